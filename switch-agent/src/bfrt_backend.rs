//! The switch as BF Runtime shows it (cargo feature `bfrt`): a Tofino running the hawkmesh
//! program under bf_switchd, or the model-backed BF Runtime server (`bfrt-model`).
//!
//! Requests go through `rbfrt` (the Rust BF Runtime client) by the names of the program's
//! BF Runtime description; the description is first fetched with a plain
//! `GetForwardingPipelineConfig` and checked ([`ProgramIds::resolve`]), so a switch running
//! another program or version is refused with the object that differs — rbfrt itself would
//! fail later, or panic on a description it cannot parse.
//!
//! [`SwitchBackend`] is synchronous (the agent's loop is); this backend runs rbfrt's futures
//! on a Tokio runtime through its handle, so it must be used outside that runtime's worker
//! threads (a plain thread or `spawn_blocking`).
//!
//! Register reads are the exception: they go out as plain BF Runtime `Read`s on the
//! workspace's own client (`read_register`, `read_register_cells`), the same request rbfrt would
//! send (one `TableEntry` per cell, `$REGISTER_INDEX` as 4 big-endian bytes, all pipes),
//! decoded straight into values: rbfrt builds string-keyed maps per cell (~45 ms for a
//! sketch readout, over a 1 ms monitor interval), and reads only the first message of the
//! reply stream. The `SyncRegisters` before each read still goes through rbfrt.
//!
//! Multi-pipe switches: a register read over all pipes returns one value per pipe for each
//! data field (open-p4studio `bf_rt_server_impl.cpp`). A cell is updated only by the pipe
//! its traffic crosses, so per cell the agent takes the one non-zero pipe value, and sums
//! when several pipes hold one (counters and bitmaps of distinct ports add up); such cells
//! are counted in [`BfrtBackend::multi_pipe_cells`].

use std::collections::VecDeque;

use hawkmesh_proto::bfrt_proto as pb;
use hawkmesh_proto::bfrt_proto::bf_runtime_client::BfRuntimeClient;
use hawkmesh_wire::control::TableEntry;
use hawkmesh_wire::dataplane::{Register, Table};
use rbfrt::table::{MatchValue, Request, TableOperation};
use rbfrt::SwitchConnection;
use tokio::runtime::Handle;
use tonic::transport::Channel;

use crate::backend::{BackendError, CpuFrame, PortCounters, SwitchBackend};
use crate::bfrt_info::{BfrtInfo, ProgramIds, RegisterIds};

/// Where the switch's BF Runtime server is and who the agent is to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BfrtEndpoint {
    /// Host name or address of bf_switchd's gRPC server.
    pub host: String,
    /// Its port (bf_switchd: 50052).
    pub port: u16,
    /// Device id (0 on a single-ASIC switch).
    pub device_id: u32,
    /// Client id of this agent (unique among the switch's BF Runtime clients).
    pub client_id: u32,
    /// The P4 program name the switch runs the hawkmesh program under.
    pub p4_name: String,
}

impl BfrtEndpoint {
    /// `host:port` with device 0, client 1 and program `hawkmesh`.
    pub fn new(host: &str, port: u16) -> Self {
        BfrtEndpoint {
            host: host.to_string(),
            port,
            device_id: 0,
            client_id: 1,
            p4_name: "hawkmesh".to_string(),
        }
    }

    /// `address` as given by an operator, `host:port` or `[IPv6]:port` (RFC 3986
    /// authority), with device 0, client 1 and program `hawkmesh`. The error quotes it.
    pub fn parse(address: &str) -> Result<Self, String> {
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| format!("`{address}` is not host:port"))?;
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("`{address}`: port `{port}` is not a number"))?;
        let host = match host.strip_prefix('[') {
            Some(v6) => v6
                .strip_suffix(']')
                .ok_or_else(|| format!("`{address}`: `[` without `]`"))?,
            None if host.contains(':') => {
                return Err(format!(
                    "`{address}`: an IPv6 address takes brackets, [addr]:port"
                ))
            }
            None => host,
        };
        if host.is_empty() {
            return Err(format!("`{address}` has no host"));
        }
        Ok(BfrtEndpoint::new(host, port))
    }

    /// The host as a URL's authority writes it: an IPv6 address in brackets (RFC 3986
    /// §3.2.2), so that `http://{url_host}:{port}` is a URL for every host.
    pub fn url_host(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        }
    }
}

/// Entities in one register read: the model server's bound (bf_switchd takes more), and
/// what keeps one reply message of a read by index under a few hundred kilobytes.
const READ_CHUNK: usize = 4_096;

/// The switch over BF Runtime.
pub struct BfrtBackend {
    runtime: Handle,
    conn: SwitchConnection,
    /// The workspace's own client on the same server, for register reads.
    client: BfRuntimeClient<Channel>,
    /// The device, all pipes (0xffff), both directions and parsers (0xff): what rbfrt
    /// targets.
    target: pb::TargetDevice,
    client_id: u32,
    p4_name: String,
    ids: ProgramIds,
    cpu: VecDeque<CpuFrame>,
    multi_pipe_cells: u64,
}

impl std::fmt::Debug for BfrtBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BfrtBackend")
            .field("multi_pipe_cells", &self.multi_pipe_cells)
            .finish_non_exhaustive()
    }
}

fn unreachable(endpoint: &BfrtEndpoint, what: impl std::fmt::Display) -> BackendError {
    BackendError::Unreachable(format!(
        "BF Runtime at {}:{}: {what}",
        endpoint.host, endpoint.port
    ))
}

/// Fetches the switch's description of `endpoint.p4_name` and its fixed tables; returns
/// the client too (the register reads use it).
async fn fetch_description(
    endpoint: &BfrtEndpoint,
) -> Result<(BfrtInfo, BfRuntimeClient<Channel>), BackendError> {
    let mut client =
        BfRuntimeClient::connect(format!("http://{}:{}", endpoint.url_host(), endpoint.port))
            .await
            .map_err(|e| unreachable(endpoint, e))?
            .max_decoding_message_size(64 * 1024 * 1024);
    let reply = client
        .get_forwarding_pipeline_config(pb::GetForwardingPipelineConfigRequest {
            device_id: endpoint.device_id,
            client_id: endpoint.client_id,
        })
        .await
        .map_err(|e| unreachable(endpoint, e.message()))?
        .into_inner();
    let names: Vec<&str> = reply.config.iter().map(|c| c.p4_name.as_str()).collect();
    let config = reply
        .config
        .iter()
        .find(|c| c.p4_name == endpoint.p4_name)
        .ok_or_else(|| {
            BackendError::Program(format!(
                "the switch runs no program `{}` (it runs: {})",
                endpoint.p4_name,
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            ))
        })?;
    let mut info = BfrtInfo::parse(&config.bfruntime_info)
        .map_err(|e| BackendError::Program(e.to_string()))?;
    if let Some(fixed) = &reply.non_p4_config {
        let fixed = BfrtInfo::parse(&fixed.bfruntime_info)
            .map_err(|e| BackendError::Program(format!("fixed tables: {e}")))?;
        info.merge(fixed)
            .map_err(|e| BackendError::Program(e.to_string()))?;
    }
    Ok((info, client))
}

/// A big-endian value of a pipe's data field.
fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b))
}

/// One register read reply: each cell's index and its value per pipe (a pair register's
/// words joined, hi << 32 | lo). bf_switchd writes, per data field id, one `DataField` per
/// pipe, in pipe order (open-p4studio `populateReadResponseWithRegisterFields`): the k-th
/// `lo` pairs with the k-th `hi`. Anything else — another table, a cell without its index,
/// an unknown field, a value that is no byte stream or wider than 8 bytes — is an error
/// naming the cell.
pub fn decode_register_response(
    ids: &RegisterIds,
    cells: usize,
    message: pb::ReadResponse,
) -> Result<Vec<(usize, Vec<u64>)>, String> {
    let hi_id = ids.hi.as_ref().map(|h| h.id);
    let mut out = Vec::with_capacity(message.entities.len());
    for entity in message.entities {
        let Some(pb::entity::Entity::TableEntry(e)) = entity.entity else {
            return Err("the read returned an entity that is not a table entry".into());
        };
        if e.table_id != ids.table_id {
            return Err(format!(
                "the read returned an entry of table {:#010x}, not {:#010x}",
                e.table_id, ids.table_id
            ));
        }
        let index = match &e.value {
            Some(pb::table_entry::Value::Key(k)) => k
                .fields
                .iter()
                .find(|f| f.field_id == ids.index_id)
                .and_then(|f| match &f.match_type {
                    Some(pb::key_field::MatchType::Exact(x)) if x.value.len() <= 8 => {
                        Some(be(&x.value))
                    }
                    _ => None,
                }),
            _ => None,
        }
        .ok_or("the read returned an entry without an exact $REGISTER_INDEX")?;
        let index = usize::try_from(index)
            .ok()
            .filter(|i| *i < cells)
            .ok_or_else(|| format!("the read returned cell {index} of {cells}"))?;
        let (mut lo, mut hi) = (Vec::with_capacity(1), Vec::new());
        for f in e.data.iter().flat_map(|d| &d.fields) {
            let Some(pb::data_field::Value::Stream(bytes)) = &f.value else {
                return Err(format!(
                    "cell {index}: field {} is not a byte stream",
                    f.field_id
                ));
            };
            if bytes.len() > 8 {
                return Err(format!(
                    "cell {index}: {} bytes in field {}",
                    bytes.len(),
                    f.field_id
                ));
            }
            if f.field_id == ids.lo.id {
                lo.push(be(bytes));
            } else if Some(f.field_id) == hi_id {
                hi.push(be(bytes));
            } else {
                return Err(format!(
                    "cell {index}: no data field with id {}",
                    f.field_id
                ));
            }
        }
        if hi_id.is_none() {
            hi.resize(lo.len(), 0);
        }
        if lo.is_empty() || lo.len() != hi.len() {
            return Err(format!(
                "cell {index}: {} / {} pipe values",
                lo.len(),
                hi.len()
            ));
        }
        for (l, h) in lo.iter_mut().zip(&hi) {
            *l |= h << 32;
        }
        out.push((index, lo));
    }
    Ok(out)
}

/// A cell's value from its pipes' values: the one non-zero value, or the sum when several
/// pipes hold one (then `true`: counted in [`BfrtBackend::multi_pipe_cells`]).
pub fn fold_pipes(pipes: &[u64]) -> (u64, bool) {
    let mut nonzero = pipes.iter().filter(|v| **v != 0);
    let first = nonzero.next().copied().unwrap_or(0);
    let mut several = false;
    let sum = nonzero.fold(first, |a, v| {
        several = true;
        a.wrapping_add(*v)
    });
    (sum, several)
}

impl BfrtBackend {
    /// Connects to the switch, checks that it runs the agent's program, binds to it. CPU
    /// frames are handed over with [`BfrtBackend::deliver_cpu`] (by whoever reads the CPU
    /// port: the switch's BF Runtime server does not carry them).
    pub fn connect(runtime: Handle, endpoint: &BfrtEndpoint) -> Result<BfrtBackend, BackendError> {
        let (ids, conn, client) = runtime.block_on(async {
            let (info, client) = fetch_description(endpoint).await?;
            let ids =
                ProgramIds::resolve(&info).map_err(|e| BackendError::Program(e.to_string()))?;
            let conn = SwitchConnection::builder(&endpoint.url_host(), endpoint.port)
                .device_id(endpoint.device_id)
                .client_id(endpoint.client_id)
                .p4_name(&endpoint.p4_name)
                .connect()
                .await
                .map_err(|e| unreachable(endpoint, e))?;
            Ok::<_, BackendError>((ids, conn, client))
        })?;
        Ok(BfrtBackend {
            runtime,
            conn,
            client,
            target: pb::TargetDevice {
                device_id: endpoint.device_id,
                pipe_id: 0xffff,
                direction: 0xff,
                prsr_id: 0xff,
            },
            client_id: endpoint.client_id,
            p4_name: endpoint.p4_name.clone(),
            ids,
            cpu: VecDeque::new(),
            multi_pipe_cells: 0,
        })
    }

    /// The resolved ids of the running program.
    pub fn ids(&self) -> &ProgramIds {
        &self.ids
    }

    /// Queues a frame from the CPU port for the agent's next poll.
    pub fn deliver_cpu(&mut self, frame: CpuFrame) {
        self.cpu.push_back(frame);
    }

    /// Takes the frames not polled yet (to hand them to a new connection's backend).
    pub fn take_cpu(&mut self) -> VecDeque<CpuFrame> {
        std::mem::take(&mut self.cpu)
    }

    /// Cells read so far that held values in more than one pipe (summed).
    pub fn multi_pipe_cells(&self) -> u64 {
        self.multi_pipe_cells
    }

    /// Writes `request` as a new entry, or over the entry with its key.
    fn upsert(&self, request: Request) -> Result<(), String> {
        self.runtime.block_on(async {
            match self.conn.write_table_entry(request.clone()).await {
                Ok(()) => Ok(()),
                Err(insert) => self
                    .conn
                    .update_table_entry(request)
                    .await
                    .map_err(|update| format!("insert: {insert}; modify: {update}")),
            }
        })
    }
}

impl SwitchBackend for BfrtBackend {
    fn read_register(&mut self, register: Register) -> Result<Vec<u64>, BackendError> {
        let ids = self.ids.register(register).clone();
        let failed = |reason: String| BackendError::Register { register, reason };
        let read = self.synced_read(&ids, None)?;
        let cells = register.cells() as usize;
        let mut out = vec![0u64; cells];
        let mut seen = vec![false; cells];
        for (i, v) in &read {
            out[*i] = *v;
            seen[*i] = true;
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(failed(format!(
                "the read returned {} of {cells} cells (cell {missing} missing)",
                read.len()
            )));
        }
        Ok(out)
    }

    /// One read request with a `$REGISTER_INDEX` key per wanted cell, after the sync: what
    /// a control plane reads when it needs a few cells of a large register (the Elastic
    /// Sketch's light part), instead of every cell.
    fn read_register_cells(
        &mut self,
        register: Register,
        indices: &[u32],
    ) -> Result<Vec<u64>, BackendError> {
        if indices.is_empty() {
            return Ok(Vec::new());
        }
        let ids = self.ids.register(register).clone();
        let failed = |reason: String| BackendError::Register { register, reason };
        let cells = register.cells();
        if let Some(bad) = indices.iter().find(|i| **i >= cells) {
            return Err(failed(format!("cell {bad} of {cells}")));
        }
        let read = self.synced_read(&ids, Some(indices))?;
        // Both bf_switchd and the model answer in the order asked; anything else is
        // matched by index.
        if read.len() == indices.len()
            && read
                .iter()
                .zip(indices)
                .all(|((i, _), w)| *i == *w as usize)
        {
            return Ok(read.into_iter().map(|(_, v)| v).collect());
        }
        let values: std::collections::HashMap<usize, u64> = read.into_iter().collect();
        indices
            .iter()
            .map(|i| {
                values
                    .get(&(*i as usize))
                    .copied()
                    .ok_or_else(|| failed(format!("the read did not return cell {i}")))
            })
            .collect()
    }

    fn reset_register(&mut self, register: Register) -> Result<(), BackendError> {
        let name = self.ids.register(register).table_name.clone();
        self.runtime
            .block_on(self.conn.clear_table(&name))
            .map_err(|e| BackendError::Register {
                register,
                reason: format!("reset: {e}"),
            })
    }

    fn add_table_entry(&mut self, table: Table, entry: TableEntry) -> Result<(), BackendError> {
        let info = &self.ids.table(table).info;
        let refused = |reason: String| BackendError::EntryRefused { table, reason };
        if entry.key.len() != info.keys.len() {
            return Err(refused(format!(
                "{} key values for {} key fields",
                entry.key.len(),
                info.keys.len()
            )));
        }
        let action = info
            .action(&entry.action)
            .ok_or_else(|| refused(format!("no action `{}`", entry.action)))?;
        if entry.params.len() != action.params.len() {
            return Err(refused(format!(
                "action `{}` takes {} parameters, {} given",
                action.name,
                action.params.len(),
                entry.params.len()
            )));
        }
        let mut request = Request::new(&info.name).action(&action.name);
        for (k, v) in info.keys.iter().zip(&entry.key) {
            request = request.match_key(&k.name, MatchValue::exact(*v));
        }
        for (p, v) in action.params.iter().zip(&entry.params) {
            request = request.action_data(&p.name, *v);
        }
        self.upsert(request).map_err(refused)
    }

    fn set_multicast_group(&mut self, group: u16, ports: Vec<u16>) -> Result<(), BackendError> {
        // One PRE node per group, with the group's number as its node id.
        let node = u32::from(group);
        let ports: Vec<u32> = ports.into_iter().map(u32::from).collect();
        let failed = |what: &str, e: String| {
            BackendError::Unreachable(format!("multicast group {group}: {what}: {e}"))
        };
        self.upsert(
            Request::new("$pre.node")
                .match_key("$MULTICAST_NODE_ID", MatchValue::exact(node))
                .action_data("$MULTICAST_RID", group)
                .action_data_repeated("$MULTICAST_LAG_ID", Vec::<u32>::new())
                .action_data_repeated("$DEV_PORT", ports),
        )
        .map_err(|e| failed("node", e))?;
        self.upsert(
            Request::new("$pre.mgid")
                .match_key("$MGID", MatchValue::exact(group))
                .action_data_repeated("$MULTICAST_NODE_ID", vec![node])
                .action_data_repeated("$MULTICAST_NODE_L1_XID_VALID", vec![false])
                .action_data_repeated("$MULTICAST_NODE_L1_XID", vec![0u32]),
        )
        .map_err(|e| failed("group", e))
    }

    fn poll_cpu(&mut self) -> Result<Vec<CpuFrame>, BackendError> {
        Ok(self.cpu.drain(..).collect())
    }

    fn port_counters(&mut self, port: u16) -> Result<PortCounters, BackendError> {
        let failed =
            |what: String| BackendError::Unreachable(format!("port {port} counters: {what}"));
        let entries = self
            .runtime
            .block_on(
                self.conn.get_table_entries(
                    Request::new("$PORT_STAT")
                        .match_key("$DEV_PORT", MatchValue::exact(u32::from(port))),
                ),
            )
            .map_err(|e| failed(e.to_string()))?;
        let entry = entries
            .first()
            .ok_or_else(|| failed("the switch returned no entry".into()))?;
        let field = |name: String| -> Result<u64, BackendError> {
            entry
                .get_action_data(&name)
                .map(|d| be(d.get_data()))
                .map_err(|_| failed(format!("no field `{name}`")))
        };
        let mut c = PortCounters {
            frames_rx: field("$FramesReceivedOK".into())?,
            frames_tx: field("$FramesTransmittedOK".into())?,
            ..PortCounters::default()
        };
        for q in 0..8 {
            c.pfc_rx[q] = field(format!("$Pri{q}FramesReceived"))?;
            c.pfc_tx[q] = field(format!("$Pri{q}FramesTransmitted"))?;
            c.paused_rx_us[q] = field(format!("$ReceivePri{q}Pause1USCount"))?;
            c.paused_tx_us[q] = field(format!("$TransmitPri{q}Pause1USCount"))?;
        }
        Ok(c)
    }

    fn port_is_up(&mut self, port: u16) -> Result<bool, BackendError> {
        let failed =
            |what: String| BackendError::Unreachable(format!("port {port} link state: {what}"));
        let entries = self
            .runtime
            .block_on(self.conn.get_table_entries(
                Request::new("$PORT").match_key("$DEV_PORT", MatchValue::exact(u32::from(port))),
            ))
            .map_err(|e| failed(e.to_string()))?;
        let entry = entries
            .first()
            .ok_or_else(|| failed("the switch returned no entry (is the port added?)".into()))?;
        entry
            .get_action_data("$PORT_UP")
            .map(|d| be(d.get_data()) != 0)
            .map_err(|_| failed("no field `$PORT_UP`".into()))
    }
}

impl BfrtBackend {
    /// `REGISTER_SYNC`s the register (its data-plane values made visible), then reads the
    /// cells `indices` name (None: every cell) with plain `Read`s, at most [`READ_CHUNK`]
    /// entities each; every message of each reply stream is taken. Returns each cell's
    /// index and value (see [`fold_pipes`]).
    fn synced_read(
        &mut self,
        ids: &RegisterIds,
        indices: Option<&[u32]>,
    ) -> Result<Vec<(usize, u64)>, BackendError> {
        let register = ids.register;
        let failed = |reason: String| BackendError::Register { register, reason };
        let requests: Vec<pb::ReadRequest> = match indices {
            None => vec![self.read_request(ids, &[None])],
            Some(list) => list
                .chunks(READ_CHUNK)
                .map(|chunk| {
                    let keys: Vec<Option<u32>> = chunk.iter().map(|i| Some(*i)).collect();
                    self.read_request(ids, &keys)
                })
                .collect(),
        };
        let mut client = self.client.clone();
        let cells = register.cells() as usize;
        let mut out = Vec::with_capacity(indices.map_or(cells, <[u32]>::len));
        let mut multi = 0u64;
        self.runtime.block_on(async {
            self.conn
                .execute_operation(
                    Request::new(&ids.table_name).operation(TableOperation::SyncRegister),
                )
                .await
                .map_err(|e| failed(format!("sync: {e}")))?;
            for request in requests {
                let mut stream = client
                    .read(request)
                    .await
                    .map_err(|e| failed(format!("read: {}", e.message())))?
                    .into_inner();
                while let Some(message) = stream
                    .message()
                    .await
                    .map_err(|e| failed(format!("read: {}", e.message())))?
                {
                    for (index, pipes) in
                        decode_register_response(ids, cells, message).map_err(&failed)?
                    {
                        let (value, several) = fold_pipes(&pipes);
                        multi += u64::from(several);
                        out.push((index, value));
                    }
                }
            }
            Ok::<_, BackendError>(())
        })?;
        self.multi_pipe_cells += multi;
        Ok(out)
    }

    /// A register read: one `TableEntry` per key (None: no key, the whole register), as
    /// rbfrt builds it (`$REGISTER_INDEX` is a uint32: 4 bytes big-endian; no flags —
    /// `from_hw` would make bf_switchd read each cell from the hardware, where the
    /// `SyncRegisters` before did one bulk copy).
    fn read_request(&self, ids: &RegisterIds, keys: &[Option<u32>]) -> pb::ReadRequest {
        let entity = |index: &Option<u32>| pb::Entity {
            entity: Some(pb::entity::Entity::TableEntry(pb::TableEntry {
                table_id: ids.table_id,
                value: index.map(|i| {
                    pb::table_entry::Value::Key(pb::TableKey {
                        fields: vec![pb::KeyField {
                            field_id: ids.index_id,
                            match_type: Some(pb::key_field::MatchType::Exact(
                                pb::key_field::Exact {
                                    value: i.to_be_bytes().to_vec(),
                                },
                            )),
                        }],
                    })
                }),
                data: None,
                is_default_entry: false,
                entry_tgt: None,
                table_flags: None,
            })),
        };
        pb::ReadRequest {
            target: Some(self.target),
            client_id: self.client_id,
            entities: keys.iter().map(entity).collect(),
            p4_name: self.p4_name.clone(),
        }
    }

    /// Whether mirror session `session` still sends to `port`, read back from the switch:
    /// the daemon's liveness check. A cut connection, and a switch that restarted and lost
    /// the session with the rest of the control plane's state, are errors.
    pub fn mirror_session_sends_to(
        &mut self,
        session: u16,
        port: u16,
    ) -> Result<bool, BackendError> {
        let read = self.runtime.block_on(self.conn.get_table_entries(
            Request::new("$mirror.cfg").match_key("$sid", MatchValue::exact(session)),
        ));
        match read {
            Ok(entries) => Ok(entries.iter().any(|e| {
                let field = |name: &str| e.get_action_data(name).map(|d| be(d.get_data()));
                field("$session_enable").is_ok_and(|v| v != 0)
                    && field("$ucast_egress_port_valid").is_ok_and(|v| v != 0)
                    && field("$ucast_egress_port").is_ok_and(|v| v == u64::from(port))
            })),
            // bf_switchd answers a read of a missing entry with NOT_FOUND, which rbfrt
            // does not keep apart from a cut connection: both mean "install again".
            Err(e) => Err(BackendError::Unreachable(format!(
                "reading mirror session {session}: {e}"
            ))),
        }
    }

    /// Points mirror session `session` at `port` (the CPU port): clones of the program's
    /// polling packets and eviction reports reach the CPU only through it.
    pub fn set_mirror_session(&mut self, session: u16, port: u16) -> Result<(), BackendError> {
        self.upsert(
            Request::new("$mirror.cfg")
                .match_key("$sid", MatchValue::exact(session))
                .action("$normal")
                .action_data("$direction", "BOTH")
                .action_data("$session_enable", true)
                .action_data("$ucast_egress_port", u32::from(port))
                .action_data("$ucast_egress_port_valid", true),
        )
        .map_err(|e| BackendError::Unreachable(format!("mirror session {session}: {e}")))
    }
}

#[cfg(test)]
mod endpoint_tests {
    use super::BfrtEndpoint;

    #[test]
    fn an_endpoint_is_parsed_from_host_port_or_bracketed_ipv6() {
        let e = BfrtEndpoint::parse("tor1.lab:50052").expect("parses");
        assert_eq!(
            (e.host.as_str(), e.port, e.device_id, e.client_id),
            ("tor1.lab", 50052, 0, 1)
        );
        let e = BfrtEndpoint::parse("[fd00::7]:50052").expect("parses");
        assert_eq!((e.host.as_str(), e.port), ("fd00::7", 50052));
        // Written back into a URL, the IPv6 address takes its brackets again.
        assert_eq!(e.url_host(), "[fd00::7]");
        assert_eq!(
            BfrtEndpoint::new("10.0.0.21", 50052).url_host(),
            "10.0.0.21"
        );
        for (bad, says) in [
            ("tor1.lab", "is not host:port"),
            ("tor1.lab:fifty", "port `fifty` is not a number"),
            (":50052", "has no host"),
            ("fd00::7:50052", "takes brackets"),
            ("[fd00::7:50052", "without `]`"),
        ] {
            let error = BfrtEndpoint::parse(bad).expect_err(bad);
            assert!(
                error.contains(bad) && error.contains(says),
                "{bad}: {error}"
            );
        }
    }
}

#[cfg(test)]
mod read_tests {
    use super::{decode_register_response, fold_pipes, pb};
    use crate::bfrt_info::{FieldInfo, RegisterIds};
    use hawkmesh_wire::dataplane::Register;

    fn field(id: u32, name: &str) -> FieldInfo {
        FieldInfo {
            id,
            name: name.into(),
            width: 32,
            match_type: String::new(),
        }
    }

    fn pair() -> RegisterIds {
        RegisterIds {
            register: Register::SKETCH_KEY,
            table_id: 0x0800_0001,
            table_name: "pipe.Ingress.sketch_key".into(),
            index_id: 65557,
            lo: field(1, "Ingress.sketch_key.lo"),
            hi: Some(field(2, "Ingress.sketch_key.hi")),
        }
    }

    fn entry(table_id: u32, index: Option<Vec<u8>>, fields: Vec<(u32, Vec<u8>)>) -> pb::Entity {
        pb::Entity {
            entity: Some(pb::entity::Entity::TableEntry(pb::TableEntry {
                table_id,
                value: index.map(|value| {
                    pb::table_entry::Value::Key(pb::TableKey {
                        fields: vec![pb::KeyField {
                            field_id: 65557,
                            match_type: Some(pb::key_field::MatchType::Exact(
                                pb::key_field::Exact { value },
                            )),
                        }],
                    })
                }),
                data: Some(pb::TableData {
                    action_id: 0,
                    fields: fields
                        .into_iter()
                        .map(|(field_id, bytes)| pb::DataField {
                            field_id,
                            value: Some(pb::data_field::Value::Stream(bytes)),
                        })
                        .collect(),
                }),
                is_default_entry: false,
                entry_tgt: None,
                table_flags: None,
            })),
        }
    }

    fn reply(entities: Vec<pb::Entity>) -> pb::ReadResponse {
        pb::ReadResponse {
            entities,
            status: vec![],
        }
    }

    /// bf_switchd's shape on a two-pipe switch: per field id one value per pipe, the low
    /// words first; the k-th low word goes with the k-th high word. Folding takes the one
    /// non-zero pipe, and sums (and says so) when two hold values.
    #[test]
    fn a_multi_pipe_reply_pairs_words_by_pipe_and_folds() {
        let ids = pair();
        let be = |v: u32| v.to_be_bytes().to_vec();
        let cells = decode_register_response(
            &ids,
            4096,
            reply(vec![
                entry(
                    ids.table_id,
                    Some(7u32.to_be_bytes().to_vec()),
                    vec![(1, be(0xAAAA)), (1, be(0)), (2, be(0x1)), (2, be(0))],
                ),
                entry(
                    ids.table_id,
                    Some(9u32.to_be_bytes().to_vec()),
                    vec![(1, be(5)), (1, be(6)), (2, be(0)), (2, be(1))],
                ),
            ]),
        )
        .expect("decodes");
        assert_eq!(
            cells,
            vec![(7, vec![0x1_0000_AAAA, 0]), (9, vec![5, (1 << 32) | 6])]
        );
        assert_eq!(fold_pipes(&cells[0].1), (0x1_0000_AAAA, false));
        assert_eq!(fold_pipes(&cells[1].1), (5 + (1 << 32) + 6, true));
        assert_eq!(fold_pipes(&[0, 0]), (0, false));
        // A single-word register: no high word; 8- and 16-bit streams decode as well.
        let single = RegisterIds { hi: None, ..pair() };
        let cells = decode_register_response(
            &single,
            4096,
            reply(vec![entry(
                ids.table_id,
                Some(vec![0, 0, 0, 3]),
                vec![(1, vec![0x01, 0x02])],
            )]),
        )
        .expect("decodes");
        assert_eq!(cells, vec![(3, vec![0x0102])]);
    }

    #[test]
    fn a_malformed_reply_is_refused_naming_the_cell() {
        let ids = pair();
        let good = |i: u32| {
            (
                i.to_be_bytes().to_vec(),
                vec![(1, vec![0, 1]), (2, vec![0])],
            )
        };
        let (key, fields) = good(4);
        for (entity, says) in [
            (
                entry(0x0800_0002, Some(key.clone()), fields.clone()),
                "entry of table 0x08000002",
            ),
            (
                entry(ids.table_id, None, fields.clone()),
                "without an exact $REGISTER_INDEX",
            ),
            (
                entry(
                    ids.table_id,
                    Some(5000u32.to_be_bytes().to_vec()),
                    fields.clone(),
                ),
                "cell 5000 of 4096",
            ),
            (
                entry(ids.table_id, Some(key.clone()), vec![(3, vec![1])]),
                "cell 4: no data field with id 3",
            ),
            (
                entry(
                    ids.table_id,
                    Some(key.clone()),
                    vec![(1, vec![0; 9]), (2, vec![0])],
                ),
                "cell 4: 9 bytes in field 1",
            ),
            (
                entry(
                    ids.table_id,
                    Some(key.clone()),
                    vec![(1, vec![1]), (1, vec![2]), (2, vec![0])],
                ),
                "cell 4: 2 / 1 pipe values",
            ),
            (pb::Entity { entity: None }, "not a table entry"),
        ] {
            let e = decode_register_response(&ids, 4096, reply(vec![entity])).expect_err(says);
            assert!(e.contains(says), "{says}: {e}");
        }
    }
}
