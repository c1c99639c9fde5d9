//! A BF Runtime gRPC server backed by the executable data-plane model: the control-plane
//! path to a Tofino switch (the switch agent's BF Runtime backend, `rbfrt`, any BF Runtime
//! client) without a switch.
//!
//! It serves the `bfrt_proto.BfRuntime` service (`proto/bfruntime.proto`, the subset of the
//! SDE's definition hawkmesh needs) over real gRPC the way bf_switchd does (open-p4studio
//! `bf-drivers/src/bf_rt/proto/bf_rt_server_impl.cpp` is the reference for behaviour):
//!
//! - `GetForwardingPipelineConfig`: the program's bfrt.json (`p4/tna/bfrt.json`, written by
//!   codegen in bf-p4c's schema) under its P4 name, and the fixed tables (`$pre.mgid`,
//!   `$pre.node`, `$mirror.cfg`, `$PORT`, `$PORT_STAT`; `src/fixed_tables.json`, a subset of the SDE's
//!   `bf_rt_*_tf1.json` with their names, ids and field ids) as `non_p4_config`;
//! - `SetForwardingPipelineConfig`: `BIND` to the one program; loading another pipeline is
//!   refused (this switch *is* the model of `hawkmesh`);
//! - `StreamChannel`: the subscription, answered with status OK;
//! - `Write`: register cells (`$REGISTER_INDEX` key, `.f1` or `.lo`/`.hi` data), the
//!   `Sync`/`SyncRegisters` table operation, match-table entries (`INSERT` of an existing key
//!   and `MODIFY` of a missing one are refused as bf_switchd refuses them; `DELETE` without
//!   a key clears the table), multicast nodes and groups (the model's groups follow), mirror
//!   sessions (CPU copies reach the CPU port only while the CPU session points at it), port
//!   configuration; a client must be bound first;
//! - `Read`: one cell or a whole register (one value per data field: the model is one
//!   pipe), entries of match and fixed tables, a port's MAC counters (`$PORT_STAT`, kept by
//!   [`Device::process`] as [`MacCounters`]), in one `ReadResponse` as bf_switchd sends.
//!
//! Bad requests get a gRPC error naming the table, field and problem; none panics.

use std::collections::{BTreeMap, BTreeSet};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};

use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, SwitchOutput, TableEntry};
use hawkmesh_dataplane::ModelError;
use hawkmesh_proto::bfrt_proto as pb;
use hawkmesh_proto::bfrt_proto::bf_runtime_server::{BfRuntime, BfRuntimeServer};
use hawkmesh_proto::google::rpc::Status as RpcStatus;
use hawkmesh_switch_agent::bfrt_info::{BfrtInfo, BfrtInfoError, FieldInfo, TableInfo};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

/// bf_switchd's fixed tables this server serves (`non_p4_config`).
pub const FIXED_TABLES: &str = include_str!("fixed_tables.json");

/// Most entities one `Read` or `Write` may carry.
pub const MAX_ENTITIES: usize = 4096;

/// Most cells one `Read` returns (a register of 65,536 cells fits 16 times).
pub const MAX_READ_CELLS: usize = 1 << 20;

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A description does not parse.
    #[error(transparent)]
    Info(#[from] BfrtInfoError),
    /// The description names an object the model's program lacks.
    #[error("bfrt.json describes `{0}`, which the model's program does not have")]
    NotInModel(String),
}

/// A mirror session (`$mirror.cfg`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MirrorSession {
    /// `$session_enable`.
    pub enabled: bool,
    /// `$direction` (`INGRESS`, `EGRESS`, `BOTH`).
    pub direction: String,
    /// `$ucast_egress_port`.
    pub egress_port: u32,
    /// `$ucast_egress_port_valid`.
    pub egress_port_valid: bool,
    /// `$max_pkt_len` (0: whole packets).
    pub max_pkt_len: u16,
}

/// A port's configuration (`$PORT`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PortConfig {
    /// `$SPEED`.
    pub speed: String,
    /// `$FEC`.
    pub fec: String,
    /// `$N_LANES`.
    pub lanes: u32,
    /// `$PORT_ENABLE`.
    pub enabled: bool,
    /// `$TX_PFC_EN_MAP`.
    pub tx_pfc_map: u32,
    /// `$RX_PFC_EN_MAP`.
    pub rx_pfc_map: u32,
}

/// A port's MAC counters, kept by the switch around the P4 program as Tofino's MAC keeps
/// them, and served as `$PORT_STAT` (field names and ids of open-p4studio's
/// `bf_rt_port_tf1.json`): frames received and sent, PFC frames received per priority, and
/// the time each priority was held paused by them (`$ReceivePri{N}Pause1USCount`; IEEE
/// 802.1Qbb: a frame's quanta × 512 bit times at the port's `$SPEED`, a later frame of the
/// class replacing the running pause, quanta 0 ending it). The model generates no PFC frames
/// (the traffic manager does on a switch), so the transmit-side PFC counters stay 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MacCounters {
    /// `$FramesReceivedOK`.
    pub frames_rx: u64,
    /// `$FramesTransmittedOK`.
    pub frames_tx: u64,
    /// `$Pri{N}FramesReceived`: PFC frames enabling priority N.
    pub pfc_rx: [u64; 8],
    /// Per priority: ns paused in closed pauses, and the running pause [since, until).
    paused_ns: [u64; 8],
    since_ns: [u64; 8],
    until_ns: [u64; 8],
}

impl MacCounters {
    /// Priority `q`'s paused time up to `now_ns`, µs.
    pub fn paused_us(&self, q: usize, now_ns: u64) -> u64 {
        let running = self.until_ns[q]
            .min(now_ns)
            .saturating_sub(self.since_ns[q]);
        (self.paused_ns[q] + running) / 1000
    }

    fn pause(&mut self, q: usize, now_ns: u64, duration_ns: u64) {
        self.paused_ns[q] += self.until_ns[q]
            .min(now_ns)
            .saturating_sub(self.since_ns[q]);
        self.since_ns[q] = now_ns;
        self.until_ns[q] = now_ns + duration_ns;
    }

    /// The `$PORT_STAT` data field `name` at `now_ns` (0 for the transmit-side PFC fields).
    fn field(&self, name: &str, now_ns: u64) -> Option<u64> {
        let priority = |prefix: &str, suffix: &str| {
            name.strip_prefix(prefix)
                .and_then(|r| r.strip_suffix(suffix))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n < 8)
        };
        match name {
            "$FramesReceivedOK" => Some(self.frames_rx),
            "$FramesTransmittedOK" => Some(self.frames_tx),
            _ => {
                if let Some(q) = priority("$Pri", "FramesReceived") {
                    Some(self.pfc_rx[q])
                } else if let Some(q) = priority("$ReceivePri", "Pause1USCount") {
                    Some(self.paused_us(q, now_ns))
                } else if priority("$Pri", "FramesTransmitted").is_some()
                    || priority("$TransmitPri", "Pause1USCount").is_some()
                {
                    Some(0)
                } else {
                    None
                }
            }
        }
    }
}

/// Gbit/s of a `$SPEED` value (`BF_SPEED_100G`).
fn speed_gbps(speed: &str) -> Option<u64> {
    speed
        .strip_prefix("BF_SPEED_")?
        .strip_suffix('G')?
        .parse()
        .ok()
}

/// One stored entry of a match or fixed table: its key values (in key field order) and
/// data fields (by field id).
#[derive(Clone, Debug, PartialEq)]
struct Stored {
    action_id: u32,
    fields: Vec<pb::DataField>,
}

/// The switch: the model and the control-plane state bf_switchd would hold.
#[derive(Debug)]
pub struct Device {
    /// The data plane.
    pub model: Model,
    bound: BTreeSet<u32>,
    /// Match-table entries and fixed-table entries, by table id then key.
    entries: BTreeMap<u32, BTreeMap<Vec<u64>, Stored>>,
    nodes: BTreeMap<u32, Vec<u32>>,
    groups: BTreeMap<u16, Vec<u32>>,
    mirror: BTreeMap<u16, MirrorSession>,
    ports: BTreeMap<u32, PortConfig>,
    mac: BTreeMap<u32, MacCounters>,
    /// The latest packet time, ns (the MAC counters' "now").
    now_ns: u64,
}

impl Device {
    /// A switch running `model`, with nothing configured.
    pub fn new(model: Model) -> Device {
        Device {
            model,
            bound: BTreeSet::new(),
            entries: BTreeMap::new(),
            nodes: BTreeMap::new(),
            groups: BTreeMap::new(),
            mirror: BTreeMap::new(),
            ports: BTreeMap::new(),
            mac: BTreeMap::new(),
            now_ns: 0,
        }
    }

    /// Mirror session `sid`, as configured.
    pub fn mirror_session(&self, sid: u16) -> Option<&MirrorSession> {
        self.mirror.get(&sid)
    }

    /// Port `dev_port`'s configuration.
    pub fn port(&self, dev_port: u32) -> Option<&PortConfig> {
        self.ports.get(&dev_port)
    }

    /// Configures port `dev_port` as a `$PORT` write does (a lab bringing ports up).
    pub fn configure_port(&mut self, dev_port: u32, config: PortConfig) {
        self.ports.insert(dev_port, config);
    }

    /// Port `dev_port`'s MAC counters (`None` before its first frame).
    pub fn mac_counters(&self, dev_port: u32) -> Option<&MacCounters> {
        self.mac.get(&dev_port)
    }

    /// The MAC's view of a frame received on `port` at `now_ns`.
    fn mac_receive(&mut self, frame: &[u8], port: u32, now_ns: u64) {
        let gbps = self.ports.get(&port).and_then(|p| speed_gbps(&p.speed));
        let mac = self.mac.entry(port).or_default();
        mac.frames_rx += 1;
        let Ok(pfc) = hawkmesh_wire::pfc::PfcFrame::new_checked(frame) else {
            return;
        };
        for q in 0..8 {
            if pfc.class_enable_vector() & (1 << q) == 0 {
                continue;
            }
            mac.pfc_rx[q] += 1;
            // A port without a speed configured pauses for an unknown time: counted as a
            // frame, not as time.
            if let Some(gbps) = gbps {
                let ps = hawkmesh_wire::pfc::pause_duration_ps(pfc.quanta(q), gbps * 1_000_000_000);
                mac.pause(q, now_ns, ps / 1000);
            }
        }
    }

    /// Whether clones reach the CPU port: mirror session `sid` is enabled with the model's
    /// CPU port as its egress port.
    pub fn cpu_mirror_active(&self, sid: u16) -> bool {
        self.mirror.get(&sid).is_some_and(|m| {
            m.enabled && m.egress_port_valid && m.egress_port == u32::from(self.model.cpu_port())
        })
    }

    /// Runs a packet through the whole switch. Its CPU copies are kept only while mirror
    /// session `cpu_session` sends to the CPU port (a switch whose control plane has not
    /// configured the session delivers none).
    pub fn process(
        &mut self,
        packet: &[u8],
        input: &IngressInput,
        queue: u8,
        cpu_session: u16,
    ) -> Result<SwitchOutput, ModelError> {
        self.now_ns = self.now_ns.max(input.tstamp_ns);
        self.mac_receive(packet, u32::from(input.ingress_port), input.tstamp_ns);
        let mut out = self.model.process(packet, input, queue)?;
        for (port, _) in &out.ports {
            self.mac.entry(u32::from(*port)).or_default().frames_tx += 1;
        }
        if !self.cpu_mirror_active(cpu_session) {
            out.cpu.clear();
        }
        Ok(out)
    }
}

/// The BF Runtime description of hawkmesh's TNA program (`p4/tna/bfrt.json`, written by
/// codegen), built in: what a server over the executable model of that program serves.
pub fn program_description() -> &'static [u8] {
    include_bytes!("../../p4/tna/bfrt.json")
}

/// The BF Runtime service over a shared [`Device`].
#[derive(Clone, Debug)]
pub struct BfrtServer {
    device: Arc<Mutex<Device>>,
    info: Arc<BfrtInfo>,
    p4_name: String,
    program_json: Arc<Vec<u8>>,
    fixed_json: Arc<Vec<u8>>,
}

fn short_name(table: &TableInfo) -> &str {
    table.name.rsplit('.').next().unwrap_or(&table.name)
}

fn width_bytes(width: u32) -> usize {
    (width as usize).div_ceil(8).max(1)
}

/// A big-endian byte string as a value of `width` bits.
fn decode_be(bytes: &[u8], width: u32, what: &str) -> Result<u64, Status> {
    let significant: &[u8] = {
        let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
        &bytes[first..]
    };
    if significant.len() > 8 {
        return Err(Status::invalid_argument(format!(
            "{what}: {} bytes do not fit {width} bits",
            bytes.len()
        )));
    }
    let v = significant
        .iter()
        .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
    if width < 64 && v >> width != 0 {
        return Err(Status::invalid_argument(format!(
            "{what}: value {v:#x} does not fit {width} bits"
        )));
    }
    Ok(v)
}

fn encode_be(v: u64, width: u32) -> Vec<u8> {
    let n = width_bytes(width).min(8);
    v.to_be_bytes()[8 - n..].to_vec()
}

fn lock(device: &Mutex<Device>) -> MutexGuard<'_, Device> {
    // A panic while holding the lock cannot leave the device half-updated in a way a
    // later request could not see: keep serving.
    device.lock().unwrap_or_else(|e| e.into_inner())
}

fn model_status(what: &str, e: ModelError) -> Status {
    match e {
        ModelError::UnknownTable(_) | ModelError::UnknownRegister(_) => {
            Status::not_found(format!("{what}: {e}"))
        }
        ModelError::TableFull { .. } => Status::resource_exhausted(format!("{what}: {e}")),
        other => Status::invalid_argument(format!("{what}: {other}")),
    }
}

impl BfrtServer {
    /// A server for `device`, describing its program with `program_json` (the bfrt.json of
    /// the model's program) under `p4_name`. Every table the description lists must be a
    /// register or table of the model's program.
    pub fn new(
        device: Arc<Mutex<Device>>,
        p4_name: &str,
        program_json: Vec<u8>,
    ) -> Result<BfrtServer, ServerError> {
        let mut info = BfrtInfo::parse(&program_json)?;
        {
            let dev = lock(&device);
            let program = dev.model.program();
            for t in info.tables() {
                let short = short_name(t);
                let known = match t.table_type.as_str() {
                    "Register" => program.registers.iter().any(|r| r.name == short),
                    _ => program.tables.iter().any(|x| x.name == short),
                };
                if !known {
                    return Err(ServerError::NotInModel(t.name.clone()));
                }
            }
        }
        info.merge(BfrtInfo::parse(FIXED_TABLES.as_bytes())?)?;
        Ok(BfrtServer {
            device,
            info: Arc::new(info),
            p4_name: p4_name.to_string(),
            program_json: Arc::new(program_json),
            fixed_json: Arc::new(FIXED_TABLES.as_bytes().to_vec()),
        })
    }

    /// The tonic service.
    pub fn into_service(self) -> BfRuntimeServer<BfrtServer> {
        BfRuntimeServer::new(self)
            .max_decoding_message_size(32 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    }

    /// Serves BF Runtime on `listener` until the future is dropped. Accepted connections
    /// get `TCP_NODELAY`, as bf_switchd's gRPC server sets it: without it a request's
    /// small reply waits for the client's delayed ACK (tens of ms per call).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
    ) -> Result<(), tonic::transport::Error> {
        let incoming =
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(self.into_service())
            .serve_with_incoming(incoming)
            .await
    }

    /// Serves BF Runtime on a fresh loopback port, on `runtime` (tests, benches, labs);
    /// returns the port.
    pub fn spawn_loopback(self, runtime: &tokio::runtime::Runtime) -> std::io::Result<u16> {
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
        let port = listener.local_addr()?.port();
        runtime.spawn(async move { self.serve(listener).await });
        Ok(port)
    }

    fn table(&self, id: u32) -> Result<&TableInfo, Status> {
        self.info
            .table_by_id(id)
            .ok_or_else(|| Status::not_found(format!("no table with id {id:#010x}")))
    }

    /// The key of an entry as values in key-field order (every field given, exact).
    fn key_values(table: &TableInfo, key: &pb::TableKey) -> Result<Vec<u64>, Status> {
        let mut values = vec![None; table.keys.len()];
        for k in &key.fields {
            let i = table
                .keys
                .iter()
                .position(|f| f.id == k.field_id)
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "{}: no key field with id {}",
                        table.name, k.field_id
                    ))
                })?;
            let f = &table.keys[i];
            let what = format!("{}: key field `{}`", table.name, f.name);
            let v = match &k.match_type {
                Some(pb::key_field::MatchType::Exact(e)) => decode_be(&e.value, f.width, &what)?,
                Some(_) => {
                    return Err(Status::unimplemented(format!(
                        "{what}: only exact matches are served"
                    )))
                }
                None => return Err(Status::invalid_argument(format!("{what}: no match value"))),
            };
            if values[i].replace(v).is_some() {
                return Err(Status::invalid_argument(format!("{what}: given twice")));
            }
        }
        values
            .into_iter()
            .zip(&table.keys)
            .map(|(v, f)| {
                v.ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "{}: key field `{}` missing",
                        table.name, f.name
                    ))
                })
            })
            .collect()
    }

    fn key_message(table: &TableInfo, values: &[u64]) -> pb::TableKey {
        pb::TableKey {
            fields: table
                .keys
                .iter()
                .zip(values)
                .map(|(f, v)| pb::KeyField {
                    field_id: f.id,
                    match_type: Some(pb::key_field::MatchType::Exact(pb::key_field::Exact {
                        value: encode_be(*v, f.width),
                    })),
                })
                .collect(),
        }
    }

    fn apply(&self, dev: &mut Device, update: &pb::Update) -> Result<(), Status> {
        let kind = pb::update::Type::try_from(update.r#type)
            .map_err(|_| Status::invalid_argument(format!("update type {}", update.r#type)))?;
        match update.entity.as_ref().and_then(|e| e.entity.as_ref()) {
            Some(pb::entity::Entity::TableOperation(op)) => self.operation(dev, op),
            Some(pb::entity::Entity::TableEntry(entry)) => self.write_entry(dev, kind, entry),
            None => Err(Status::unimplemented(
                "only table entries and table operations are served",
            )),
        }
    }

    fn operation(&self, dev: &mut Device, op: &pb::TableOperation) -> Result<(), Status> {
        let table = self.table(op.table_id)?;
        match (table.table_type.as_str(), op.table_operations_type.as_str()) {
            ("Register", "Sync" | "SyncRegisters") => dev
                .model
                .register_sync(short_name(table))
                .map_err(|e| model_status(&table.name, e)),
            (_, other) => Err(Status::invalid_argument(format!(
                "{}: operation `{other}` is not supported on a {} table",
                table.name, table.table_type
            ))),
        }
    }

    fn write_entry(
        &self,
        dev: &mut Device,
        kind: pb::update::Type,
        entry: &pb::TableEntry,
    ) -> Result<(), Status> {
        use pb::update::Type;
        let table = self.table(entry.table_id)?;
        if entry.is_default_entry {
            return Err(Status::unimplemented(format!(
                "{}: the default entry is the program's",
                table.name
            )));
        }
        let key = match &entry.value {
            Some(pb::table_entry::Value::Key(k)) if !k.fields.is_empty() => {
                Some(Self::key_values(table, k)?)
            }
            Some(pb::table_entry::Value::HandleId(_)) => {
                return Err(Status::unimplemented(format!(
                    "{}: entry handles are not served",
                    table.name
                )))
            }
            _ => None,
        };
        let data = entry.data.clone().unwrap_or_default();
        if table.table_type == "Register" {
            return self.write_register(dev, kind, table, key, &data);
        }
        let exists = |dev: &Device, key: &Vec<u64>| {
            dev.entries
                .get(&table.id)
                .is_some_and(|e| e.contains_key(key))
        };
        match (kind, key) {
            (Type::Delete, None) => {
                self.clear(dev, table)?;
                dev.entries.remove(&table.id);
                Ok(())
            }
            (Type::Delete, Some(key)) => {
                if !exists(dev, &key) {
                    return Err(Status::not_found(format!(
                        "{}: no entry with key {key:?}",
                        table.name
                    )));
                }
                self.delete(dev, table, &key)?;
                if let Some(e) = dev.entries.get_mut(&table.id) {
                    e.remove(&key);
                }
                Ok(())
            }
            (Type::Insert | Type::Modify | Type::InsertOrModify, Some(key)) => {
                let present = exists(dev, &key);
                if kind == Type::Insert && present {
                    return Err(Status::already_exists(format!(
                        "{}: an entry with key {key:?} exists",
                        table.name
                    )));
                }
                if kind == Type::Modify && !present {
                    return Err(Status::not_found(format!(
                        "{}: no entry with key {key:?}",
                        table.name
                    )));
                }
                self.install(dev, table, &key, &data)?;
                dev.entries.entry(table.id).or_default().insert(
                    key,
                    Stored {
                        action_id: data.action_id,
                        fields: data.fields.clone(),
                    },
                );
                Ok(())
            }
            (Type::Insert | Type::Modify | Type::InsertOrModify, None) => Err(
                Status::invalid_argument(format!("{}: an entry needs its key", table.name)),
            ),
            (other, _) => Err(Status::unimplemented(format!(
                "{}: update type {other:?} is not served",
                table.name
            ))),
        }
    }

    fn write_register(
        &self,
        dev: &mut Device,
        kind: pb::update::Type,
        table: &TableInfo,
        key: Option<Vec<u64>>,
        data: &pb::TableData,
    ) -> Result<(), Status> {
        use pb::update::Type;
        let name = short_name(table);
        match (kind, key) {
            (Type::Delete, None) => dev
                .model
                .register_reset(name)
                .map_err(|e| model_status(&table.name, e)),
            (Type::Delete, Some(key)) => dev
                .model
                .register_write(name, key[0], 0)
                .map_err(|e| model_status(&table.name, e)),
            (Type::Insert | Type::Modify | Type::InsertOrModify, Some(key)) => {
                let index = key[0];
                if index >= table.size {
                    return Err(Status::out_of_range(format!(
                        "{}: index {index} of {} cells",
                        table.name, table.size
                    )));
                }
                let mut lo = None;
                let mut hi = None;
                for f in &data.fields {
                    let pos = table
                        .data
                        .iter()
                        .position(|d| d.id == f.field_id)
                        .ok_or_else(|| {
                            Status::invalid_argument(format!(
                                "{}: no data field with id {}",
                                table.name, f.field_id
                            ))
                        })?;
                    let info = &table.data[pos];
                    let v = stream_value(table, info, f)?;
                    if pos == 0 {
                        lo = Some(v);
                    } else {
                        hi = Some(v);
                    }
                }
                let old = dev
                    .model
                    .register_read(name, index)
                    .map_err(|e| model_status(&table.name, e))?;
                let pair = table.data.len() == 2;
                let value = if pair {
                    (hi.unwrap_or(old >> 32) << 32) | lo.unwrap_or(old & 0xFFFF_FFFF)
                } else {
                    lo.unwrap_or(old)
                };
                dev.model
                    .register_write(name, index, value)
                    .map_err(|e| model_status(&table.name, e))
            }
            (_, _) => Err(Status::invalid_argument(format!(
                "{}: a register cell write needs `$REGISTER_INDEX`",
                table.name
            ))),
        }
    }

    /// Puts an entry into the model (match tables) or the device's configuration (fixed
    /// tables).
    fn install(
        &self,
        dev: &mut Device,
        table: &TableInfo,
        key: &[u64],
        data: &pb::TableData,
    ) -> Result<(), Status> {
        match table.table_type.as_str() {
            t if t.starts_with("MatchAction") => {
                let action = table
                    .actions
                    .iter()
                    .find(|a| a.id == data.action_id)
                    .ok_or_else(|| {
                        Status::invalid_argument(format!(
                            "{}: no action with id {}",
                            table.name, data.action_id
                        ))
                    })?;
                let mut params = vec![None; action.params.len()];
                for f in &data.fields {
                    let i = action
                        .params
                        .iter()
                        .position(|p| p.id == f.field_id)
                        .ok_or_else(|| {
                            Status::invalid_argument(format!(
                                "{}: action `{}` has no parameter with id {}",
                                table.name, action.name, f.field_id
                            ))
                        })?;
                    params[i] = Some(stream_value(table, &action.params[i], f)?);
                }
                let params = params
                    .into_iter()
                    .zip(&action.params)
                    .map(|(v, p)| {
                        v.ok_or_else(|| {
                            Status::invalid_argument(format!(
                                "{}: action `{}` parameter `{}` missing",
                                table.name, action.name, p.name
                            ))
                        })
                    })
                    .collect::<Result<Vec<u64>, Status>>()?;
                let short_action = action.name.rsplit('.').next().unwrap_or(&action.name);
                dev.model
                    .table_add(
                        short_name(table),
                        TableEntry {
                            key: key.to_vec(),
                            mask: vec![],
                            priority: 0,
                            action: short_action.to_string(),
                            params,
                        },
                    )
                    .map_err(|e| model_status(&table.name, e))
            }
            "PreNode" => {
                let ports = int_array(table, data, "$DEV_PORT")?.unwrap_or_default();
                for p in &ports {
                    if *p > u32::from(u16::MAX) {
                        return Err(Status::invalid_argument(format!(
                            "{}: $DEV_PORT {p} is not a port",
                            table.name
                        )));
                    }
                }
                dev.nodes.insert(key[0] as u32, ports);
                self.refresh_groups(dev);
                Ok(())
            }
            "PreMgid" => {
                let nodes = int_array(table, data, "$MULTICAST_NODE_ID")?.unwrap_or_default();
                for n in &nodes {
                    if !dev.nodes.contains_key(n) {
                        return Err(Status::not_found(format!(
                            "{}: multicast node {n} does not exist",
                            table.name
                        )));
                    }
                }
                dev.groups.insert(key[0] as u16, nodes);
                self.refresh_groups(dev);
                Ok(())
            }
            "MirrorCfg" => {
                let mut s = dev
                    .mirror
                    .get(&(key[0] as u16))
                    .cloned()
                    .unwrap_or_default();
                for f in &data.fields {
                    let info = data_field(table, f.field_id)?;
                    match info.name.as_str() {
                        "$session_enable" => s.enabled = bool_value(table, info, f)?,
                        "$direction" => s.direction = str_value(table, info, f)?,
                        "$ucast_egress_port" => {
                            s.egress_port = stream_value(table, info, f)? as u32
                        }
                        "$ucast_egress_port_valid" => {
                            s.egress_port_valid = bool_value(table, info, f)?
                        }
                        "$max_pkt_len" => s.max_pkt_len = stream_value(table, info, f)? as u16,
                        _ => {}
                    }
                }
                dev.mirror.insert(key[0] as u16, s);
                Ok(())
            }
            "PortConfigure" => {
                let mut p = dev.ports.get(&(key[0] as u32)).cloned().unwrap_or_default();
                for f in &data.fields {
                    let info = data_field(table, f.field_id)?;
                    match info.name.as_str() {
                        "$SPEED" => p.speed = str_value(table, info, f)?,
                        "$FEC" => p.fec = str_value(table, info, f)?,
                        "$N_LANES" => p.lanes = stream_value(table, info, f)? as u32,
                        "$PORT_ENABLE" => p.enabled = bool_value(table, info, f)?,
                        "$TX_PFC_EN_MAP" => p.tx_pfc_map = stream_value(table, info, f)? as u32,
                        "$RX_PFC_EN_MAP" => p.rx_pfc_map = stream_value(table, info, f)? as u32,
                        other => {
                            return Err(Status::invalid_argument(format!(
                                "{}: `{other}` is read-only",
                                table.name
                            )))
                        }
                    }
                }
                dev.ports.insert(key[0] as u32, p);
                Ok(())
            }
            other => Err(Status::unimplemented(format!(
                "{}: {other} tables are not served",
                table.name
            ))),
        }
    }

    fn delete(&self, dev: &mut Device, table: &TableInfo, key: &[u64]) -> Result<(), Status> {
        match table.table_type.as_str() {
            t if t.starts_with("MatchAction") => dev
                .model
                .table_delete(short_name(table), key, &[], 0)
                .map(|_| ())
                .map_err(|e| model_status(&table.name, e)),
            "PreNode" => {
                let node = key[0] as u32;
                if dev.groups.values().any(|g| g.contains(&node)) {
                    return Err(Status::failed_precondition(format!(
                        "{}: node {node} is a member of a multicast group",
                        table.name
                    )));
                }
                dev.nodes.remove(&node);
                self.refresh_groups(dev);
                Ok(())
            }
            "PreMgid" => {
                dev.groups.remove(&(key[0] as u16));
                dev.model.multicast_group_set(key[0] as u16, Vec::new());
                Ok(())
            }
            "MirrorCfg" => {
                dev.mirror.remove(&(key[0] as u16));
                Ok(())
            }
            "PortConfigure" => {
                dev.ports.remove(&(key[0] as u32));
                Ok(())
            }
            other => Err(Status::unimplemented(format!(
                "{}: {other} tables are not served",
                table.name
            ))),
        }
    }

    fn clear(&self, dev: &mut Device, table: &TableInfo) -> Result<(), Status> {
        let keys: Vec<Vec<u64>> = dev
            .entries
            .get(&table.id)
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default();
        if table.table_type.starts_with("MatchAction") {
            return dev
                .model
                .table_clear(short_name(table))
                .map_err(|e| model_status(&table.name, e));
        }
        for key in keys {
            self.delete(dev, table, &key)?;
        }
        Ok(())
    }

    /// The model's multicast groups from the PRE's groups and nodes.
    fn refresh_groups(&self, dev: &mut Device) {
        let groups: Vec<(u16, Vec<u16>)> = dev
            .groups
            .iter()
            .map(|(g, nodes)| {
                let mut ports: Vec<u16> = nodes
                    .iter()
                    .filter_map(|n| dev.nodes.get(n))
                    .flatten()
                    .map(|p| *p as u16)
                    .collect();
                ports.sort_unstable();
                ports.dedup();
                (*g, ports)
            })
            .collect();
        for (g, ports) in groups {
            dev.model.multicast_group_set(g, ports);
        }
    }

    fn read_entity(
        &self,
        dev: &mut Device,
        entry: &pb::TableEntry,
        out: &mut Vec<pb::Entity>,
        cells: &mut usize,
    ) -> Result<(), Status> {
        let table = self.table(entry.table_id)?;
        let key = match &entry.value {
            Some(pb::table_entry::Value::Key(k)) if !k.fields.is_empty() => {
                Some(Self::key_values(table, k)?)
            }
            _ => None,
        };
        let push = |out: &mut Vec<pb::Entity>, key: &[u64], data: pb::TableData| {
            out.push(pb::Entity {
                entity: Some(pb::entity::Entity::TableEntry(pb::TableEntry {
                    table_id: table.id,
                    value: Some(pb::table_entry::Value::Key(Self::key_message(table, key))),
                    data: Some(data),
                    is_default_entry: false,
                    entry_tgt: None,
                    table_flags: None,
                })),
            })
        };
        if table.table_type == "PortStat" {
            let ports: Vec<u64> = match &key {
                Some(k) => vec![k[0]],
                None => dev.mac.keys().map(|p| u64::from(*p)).collect(),
            };
            for port in ports {
                let dev_port = port as u32;
                if !dev.mac.contains_key(&dev_port) && !dev.ports.contains_key(&dev_port) {
                    return Err(Status::not_found(format!(
                        "{}: port {port} is not added and has seen no frame",
                        table.name
                    )));
                }
                let mac = dev.mac.get(&dev_port).cloned().unwrap_or_default();
                let fields = table
                    .data
                    .iter()
                    .filter_map(|f| mac.field(&f.name, dev.now_ns).map(|v| field_stream(f, v)))
                    .collect();
                push(
                    out,
                    &[port],
                    pb::TableData {
                        action_id: 0,
                        fields,
                    },
                );
            }
            return Ok(());
        }
        if table.table_type == "PortConfigure" {
            // A port reads back as configured (by `$PORT` writes or a lab's
            // `configure_port`), with its read-only `$PORT_UP`: the model has no link
            // partner, so an enabled port is up.
            let ports: Vec<u32> = match &key {
                Some(k) => vec![k[0] as u32],
                None => dev.ports.keys().copied().collect(),
            };
            for port in ports {
                let p = dev.ports.get(&port).ok_or_else(|| {
                    Status::not_found(format!("{}: port {port} is not added", table.name))
                })?;
                let fields = table
                    .data
                    .iter()
                    .filter_map(|f| {
                        use pb::data_field::Value;
                        let value = match f.name.as_str() {
                            "$SPEED" => Value::StrVal(p.speed.clone()),
                            "$FEC" => Value::StrVal(p.fec.clone()),
                            "$N_LANES" => return Some(field_stream(f, u64::from(p.lanes))),
                            "$PORT_ENABLE" => Value::BoolVal(p.enabled),
                            "$PORT_UP" => Value::BoolVal(p.enabled),
                            "$TX_PFC_EN_MAP" => {
                                return Some(field_stream(f, u64::from(p.tx_pfc_map)))
                            }
                            "$RX_PFC_EN_MAP" => {
                                return Some(field_stream(f, u64::from(p.rx_pfc_map)))
                            }
                            _ => return None,
                        };
                        Some(pb::DataField {
                            field_id: f.id,
                            value: Some(value),
                        })
                    })
                    .collect();
                push(
                    out,
                    &[u64::from(port)],
                    pb::TableData {
                        action_id: 0,
                        fields,
                    },
                );
            }
            return Ok(());
        }
        if table.table_type == "Register" {
            let name = short_name(table);
            if entry.table_flags.as_ref().is_some_and(|f| f.from_hw) {
                dev.model
                    .register_sync(name)
                    .map_err(|e| model_status(&table.name, e))?;
            }
            let all = dev
                .model
                .register_read_all(name)
                .map_err(|e| model_status(&table.name, e))?;
            let indices: Vec<u64> = match &key {
                Some(k) => {
                    if k[0] >= all.len() as u64 {
                        return Err(Status::out_of_range(format!(
                            "{}: index {} of {} cells",
                            table.name,
                            k[0],
                            all.len()
                        )));
                    }
                    vec![k[0]]
                }
                None => (0..all.len() as u64).collect(),
            };
            *cells += indices.len();
            if *cells > MAX_READ_CELLS {
                return Err(Status::resource_exhausted(format!(
                    "one read returns at most {MAX_READ_CELLS} cells"
                )));
            }
            for i in indices {
                let v = all[i as usize];
                let fields = if table.data.len() == 2 {
                    vec![
                        field_stream(&table.data[0], v & 0xFFFF_FFFF),
                        field_stream(&table.data[1], v >> 32),
                    ]
                } else {
                    vec![field_stream(&table.data[0], v)]
                };
                push(
                    out,
                    &[i],
                    pb::TableData {
                        action_id: 0,
                        fields,
                    },
                );
            }
            return Ok(());
        }
        let stored = dev.entries.get(&table.id);
        match key {
            Some(k) => {
                let e = stored.and_then(|s| s.get(&k)).ok_or_else(|| {
                    Status::not_found(format!("{}: no entry with key {k:?}", table.name))
                })?;
                push(
                    out,
                    &k,
                    pb::TableData {
                        action_id: e.action_id,
                        fields: e.fields.clone(),
                    },
                );
            }
            None => {
                for (k, e) in stored.into_iter().flatten() {
                    push(
                        out,
                        k,
                        pb::TableData {
                            action_id: e.action_id,
                            fields: e.fields.clone(),
                        },
                    );
                }
            }
        }
        Ok(())
    }

    fn check_bound(&self, dev: &Device, client_id: u32) -> Result<(), Status> {
        if dev.bound.contains(&client_id) {
            Ok(())
        } else {
            Err(Status::failed_precondition(format!(
                "client {client_id} is not bound to a program (SetForwardingPipelineConfig BIND `{}` first)",
                self.p4_name
            )))
        }
    }
}

fn field_stream(info: &FieldInfo, v: u64) -> pb::DataField {
    pb::DataField {
        field_id: info.id,
        value: Some(pb::data_field::Value::Stream(encode_be(v, info.width))),
    }
}

fn data_field(table: &TableInfo, id: u32) -> Result<&FieldInfo, Status> {
    table.data.iter().find(|d| d.id == id).ok_or_else(|| {
        Status::invalid_argument(format!("{}: no data field with id {id}", table.name))
    })
}

fn stream_value(table: &TableInfo, info: &FieldInfo, f: &pb::DataField) -> Result<u64, Status> {
    let what = format!("{}: field `{}`", table.name, info.name);
    match &f.value {
        Some(pb::data_field::Value::Stream(bytes)) => decode_be(bytes, info.width, &what),
        _ => Err(Status::invalid_argument(format!(
            "{what}: expected a byte stream"
        ))),
    }
}

fn bool_value(table: &TableInfo, info: &FieldInfo, f: &pb::DataField) -> Result<bool, Status> {
    match &f.value {
        Some(pb::data_field::Value::BoolVal(b)) => Ok(*b),
        _ => Err(Status::invalid_argument(format!(
            "{}: field `{}`: expected a bool",
            table.name, info.name
        ))),
    }
}

fn str_value(table: &TableInfo, info: &FieldInfo, f: &pb::DataField) -> Result<String, Status> {
    match &f.value {
        Some(pb::data_field::Value::StrVal(s)) => Ok(s.clone()),
        _ => Err(Status::invalid_argument(format!(
            "{}: field `{}`: expected a string",
            table.name, info.name
        ))),
    }
}

fn int_array(
    table: &TableInfo,
    data: &pb::TableData,
    name: &str,
) -> Result<Option<Vec<u32>>, Status> {
    let Some(info) = table.data.iter().find(|d| d.name == name) else {
        return Ok(None);
    };
    match data.fields.iter().find(|f| f.field_id == info.id) {
        None => Ok(None),
        Some(pb::DataField {
            value: Some(pb::data_field::Value::IntArrVal(a)),
            ..
        }) => Ok(Some(a.val.clone())),
        Some(_) => Err(Status::invalid_argument(format!(
            "{}: field `{name}`: expected an integer array",
            table.name
        ))),
    }
}

type ReadStream = Pin<Box<dyn Stream<Item = Result<pb::ReadResponse, Status>> + Send>>;
type ChannelStream = Pin<Box<dyn Stream<Item = Result<pb::StreamMessageResponse, Status>> + Send>>;

#[tonic::async_trait]
impl BfRuntime for BfrtServer {
    async fn write(
        &self,
        request: Request<pb::WriteRequest>,
    ) -> Result<Response<pb::WriteResponse>, Status> {
        let req = request.into_inner();
        if req.updates.len() > MAX_ENTITIES {
            return Err(Status::resource_exhausted(format!(
                "{} updates in one write; at most {MAX_ENTITIES}",
                req.updates.len()
            )));
        }
        let mut dev = lock(&self.device);
        self.check_bound(&dev, req.client_id)?;
        // CONTINUE_ON_ERROR (the protocol's default): every update is attempted.
        let mut errors = Vec::new();
        for (i, u) in req.updates.iter().enumerate() {
            if let Err(e) = self.apply(&mut dev, u) {
                errors.push((i, e));
            }
        }
        match errors.first() {
            None => Ok(Response::new(pb::WriteResponse { status: vec![] })),
            Some((_, first)) => {
                let text: Vec<String> = errors
                    .iter()
                    .map(|(i, e)| format!("update {i}: {}", e.message()))
                    .collect();
                Err(Status::new(first.code(), text.join("; ")))
            }
        }
    }

    type ReadStream = ReadStream;

    async fn read(
        &self,
        request: Request<pb::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let req = request.into_inner();
        if req.entities.len() > MAX_ENTITIES {
            return Err(Status::resource_exhausted(format!(
                "{} entities in one read; at most {MAX_ENTITIES}",
                req.entities.len()
            )));
        }
        let mut out = Vec::new();
        {
            let mut dev = lock(&self.device);
            self.check_bound(&dev, req.client_id)?;
            let mut cells = 0;
            for e in &req.entities {
                match &e.entity {
                    Some(pb::entity::Entity::TableEntry(entry)) => {
                        self.read_entity(&mut dev, entry, &mut out, &mut cells)?
                    }
                    _ => {
                        return Err(Status::unimplemented(
                            "only table entries are read by this server",
                        ))
                    }
                }
            }
        }
        let response = pb::ReadResponse {
            entities: out,
            status: vec![],
        };
        Ok(Response::new(Box::pin(tokio_stream::once(Ok(response)))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<pb::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<pb::SetForwardingPipelineConfigResponse>, Status> {
        use pb::set_forwarding_pipeline_config_request::Action;
        let req = request.into_inner();
        let action = Action::try_from(req.action)
            .map_err(|_| Status::invalid_argument(format!("action {}", req.action)))?;
        match action {
            Action::Bind => {
                let [config] = req.config.as_slice() else {
                    return Err(Status::invalid_argument(
                        "BIND takes the config of exactly one program",
                    ));
                };
                if config.p4_name != self.p4_name {
                    return Err(Status::not_found(format!(
                        "no program `{}` on this switch (it runs `{}`)",
                        config.p4_name, self.p4_name
                    )));
                }
                lock(&self.device).bound.insert(req.client_id);
                Ok(Response::new(pb::SetForwardingPipelineConfigResponse {
                    set_forwarding_pipeline_config_response_type:
                        pb::SetForwardingPipelineConfigResponseType::WarmInitStarted as i32,
                }))
            }
            other => Err(Status::failed_precondition(format!(
                "{other:?}: this switch runs the executable model of `{}` and loads no other pipeline",
                self.p4_name
            ))),
        }
    }

    async fn get_forwarding_pipeline_config(
        &self,
        _request: Request<pb::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<pb::GetForwardingPipelineConfigResponse>, Status> {
        Ok(Response::new(pb::GetForwardingPipelineConfigResponse {
            config: vec![pb::ForwardingPipelineConfig {
                p4_name: self.p4_name.clone(),
                bfruntime_info: self.program_json.as_ref().clone(),
                profiles: vec![pb::forwarding_pipeline_config::Profile {
                    profile_name: "pipe".into(),
                    context: Vec::new(),
                    binary: Vec::new(),
                    pipe_scope: vec![0],
                }],
            }],
            non_p4_config: Some(pb::NonP4Config {
                bfruntime_info: self.fixed_json.as_ref().clone(),
            }),
        }))
    }

    type StreamChannelStream = ChannelStream;

    async fn stream_channel(
        &self,
        request: Request<Streaming<pb::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            while let Ok(Some(msg)) = inbound.message().await {
                if let Some(pb::stream_message_request::Update::Subscribe(mut s)) = msg.update {
                    s.status = Some(RpcStatus {
                        code: 0,
                        message: String::new(),
                    });
                    let reply = pb::StreamMessageResponse {
                        update: Some(pb::stream_message_response::Update::Subscribe(s)),
                    };
                    if tx.send(Ok(reply)).await.is_err() {
                        break;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }
}
