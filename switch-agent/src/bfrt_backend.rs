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
use rbfrt::{register, SwitchConnection};
use tokio::runtime::Handle;

use crate::backend::{BackendError, CpuFrame, PortCounters, SwitchBackend};
use crate::bfrt_info::{BfrtInfo, ProgramIds};

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

/// The switch over BF Runtime.
pub struct BfrtBackend {
    runtime: Handle,
    conn: SwitchConnection,
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

/// Fetches the switch's description of `endpoint.p4_name` and its fixed tables.
async fn fetch_description(endpoint: &BfrtEndpoint) -> Result<BfrtInfo, BackendError> {
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
    Ok(info)
}

/// A big-endian value of a pipe's data field.
fn be(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b))
}

impl BfrtBackend {
    /// Connects to the switch, checks that it runs the agent's program, binds to it. CPU
    /// frames are handed over with [`BfrtBackend::deliver_cpu`] (by whoever reads the CPU
    /// port: the switch's BF Runtime server does not carry them).
    pub fn connect(runtime: Handle, endpoint: &BfrtEndpoint) -> Result<BfrtBackend, BackendError> {
        let (ids, conn) = runtime.block_on(async {
            let info = fetch_description(endpoint).await?;
            let ids =
                ProgramIds::resolve(&info).map_err(|e| BackendError::Program(e.to_string()))?;
            let conn = SwitchConnection::builder(&endpoint.url_host(), endpoint.port)
                .device_id(endpoint.device_id)
                .client_id(endpoint.client_id)
                .p4_name(&endpoint.p4_name)
                .connect()
                .await
                .map_err(|e| unreachable(endpoint, e))?;
            Ok::<_, BackendError>((ids, conn))
        })?;
        Ok(BfrtBackend {
            runtime,
            conn,
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
        let read = self.synced_read(&ids, vec![register::Request::new(&ids.table_name)])?;
        let cells = register.cells() as usize;
        let mut out = vec![0u64; cells];
        let mut seen = vec![false; cells];
        for (i, v) in self.decode_cells(&ids, &read)? {
            out[i] = v;
            seen[i] = true;
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(failed(format!(
                "the read returned {} of {cells} cells (cell {missing} missing)",
                read.entries().len()
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
        let read = self.synced_read(
            &ids,
            indices
                .iter()
                .map(|i| register::Request::new(&ids.table_name).index(*i))
                .collect(),
        )?;
        let values: std::collections::HashMap<usize, u64> =
            self.decode_cells(&ids, &read)?.into_iter().collect();
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
    /// cells `requests` name (one request without an index: every cell) in one read.
    fn synced_read(
        &self,
        ids: &crate::bfrt_info::RegisterIds,
        requests: Vec<register::Request>,
    ) -> Result<rbfrt::register::Register, BackendError> {
        let register = ids.register;
        let failed = |reason: String| BackendError::Register { register, reason };
        self.runtime.block_on(async {
            self.conn
                .execute_operation(
                    Request::new(&ids.table_name).operation(TableOperation::SyncRegister),
                )
                .await
                .map_err(|e| failed(format!("sync: {e}")))?;
            self.conn
                .get_register_entries(requests)
                .await
                .map_err(|e| failed(format!("read: {e}")))
        })
    }

    /// The cells of a register read: each index with its value (a pair register's words
    /// joined; one non-zero value across pipes, or their sum, counted in
    /// `multi_pipe_cells`).
    fn decode_cells(
        &mut self,
        ids: &crate::bfrt_info::RegisterIds,
        read: &rbfrt::register::Register,
    ) -> Result<Vec<(usize, u64)>, BackendError> {
        let register = ids.register;
        let failed = |reason: String| BackendError::Register { register, reason };
        let cells = register.cells() as usize;
        let mut out = Vec::with_capacity(read.entries().len());
        for (index, entry) in read.entries() {
            let i = *index as usize;
            if i >= cells {
                return Err(failed(format!("cell {i} of {cells}")));
            }
            let words = |name: &str| -> Result<Vec<u64>, BackendError> {
                let pipes = entry
                    .get(name)
                    .ok_or_else(|| failed(format!("cell {i} has no field `{name}`")))?;
                Ok(pipes.iter().map(|p| be(p)).collect())
            };
            let lo = words(&ids.lo.name)?;
            let hi = match &ids.hi {
                Some(h) => words(&h.name)?,
                None => vec![0; lo.len()],
            };
            if lo.len() != hi.len() || lo.is_empty() {
                return Err(failed(format!(
                    "cell {i}: {} / {} pipe values",
                    lo.len(),
                    hi.len()
                )));
            }
            let values: Vec<u64> = lo
                .iter()
                .zip(&hi)
                .map(|(l, h)| (h << 32) | l)
                .filter(|v| *v != 0)
                .collect();
            if values.len() > 1 {
                self.multi_pipe_cells += 1;
            }
            out.push((i, values.iter().fold(0u64, |a, v| a.wrapping_add(*v))));
        }
        Ok(out)
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
