//! The pingmesh controller (R-Pingmesh, SIGCOMM'24 §4.1–§4.3) inside the analyzer service:
//! the comm-info registry, the pinglists, the intake of probe results and the analysis of
//! every period.
//!
//! - **Registration.** A host agent registers its RNICs' comm info (GID, IP, the UD queue
//!   pair number it probes from and answers on) with an *incarnation* that grows each time
//!   the agent starts. A restarted agent has new QPNs; the registry keeps the newest, and
//!   probes to the old ones are QPN-reset noise (§4.3.1).
//! - **Pinglists.** Built once from the fabric inventory ([`Pinglists::build`]: ToR mesh,
//!   inter-ToR 5-tuples with Eq. 1's k), a fifth of the inter-ToR 5-tuples replaced every
//!   [`PingmeshConfig::rotation_ns`] (an hour in the paper, §5). A host fetches its RNICs'
//!   lists with each target's current comm info; targets whose host has not registered are
//!   left out and counted.
//! - **Intake.** A batch of results is checked whole (every name against the inventory,
//!   every path hop against the cabling, times against the clock) and then stored whole in
//!   the log (`pingmesh.log`, synced before the batch is acknowledged) or refused whole
//!   with the reason, naming the result and field. A batch is identified by (host,
//!   incarnation, batch sequence number): a resent batch is acknowledged as a duplicate and
//!   not counted twice; batches may come in any order.
//! - **Periods.** Results are grouped by the period their probe was sent in (periods of
//!   [`PingmeshConfig::period_ns`], 20 s in the paper, aligned to the clock's zero). A
//!   period is analysed once, [`PingmeshConfig::grace_ns`] after it ends (uploads come every
//!   5 s). Results that arrive for a period already analysed are stored and counted in that
//!   period's report as late; they are not voted on.
//! - **Bounds.** Results waiting for analysis are capped
//!   ([`PingmeshLimits::max_pending_results`]); over the cap a batch is refused for now
//!   (the agent keeps it and retries), never dropped after it was acknowledged. The log is
//!   compacted when most of it holds analysed results; reports beyond
//!   [`PingmeshLimits::retained_periods`] are forgotten.
//! - **Restart.** Opening replays the log: registrations, the batches not analysed yet, the
//!   deduplication windows, the reports.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hawkmesh_pingmesh::analysis::{
    AnalysisConfig, Analyzer, Percentiles, PeriodReport, Priority, ProbeRecord, ProbeSource,
    ProbeStatus, ProblemKind, Sla, TimeoutCause,
};
use hawkmesh_pingmesh::inventory::{Inventory, RnicId};
use hawkmesh_pingmesh::pinglist::{PinglistConfig, Pinglists};
use hawkmesh_proto::v1 as pb;
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortNo, PortRef};
use prost::Message;
use serde::{Deserialize, Serialize};

use crate::framelog::{FrameLog, GroupSync, Ticket};
use crate::store::{from_hex, to_hex, Store, StoreError};

/// The controller's log in the data directory (registrations, dedup windows, reports).
pub const LOG_NAME: &str = "pingmesh.log";
/// The accepted result batches, binary ([`crate::framelog`]: the protobuf as received; the
/// frame's tag is the arrival time in ns, with [`CARRIED`] set for the results a
/// compaction carried over).
pub const BATCH_LOG_NAME: &str = "pingmesh-batches.log";
/// The tag bit of carried-over results: regrouped per host, not an agent's batch (their
/// incarnation and number mean nothing).
pub const CARRIED: u64 = 1 << 63;

/// Addresses one comm-info request may ask for.
pub const MAX_COMM_INFO_IPS: usize = 4096;

/// Batches of one incarnation remembered for deduplication.
pub const DEDUP_WINDOW: usize = 4096;

/// ACK routes remembered at most (one per (responder RNIC, prober RNIC, source port); the
/// oldest forgotten first).
pub const MAX_ACK_ROUTES: usize = 1 << 20;

/// The key of an ACK route: the responder RNIC, the prober RNIC, the 5-tuple's source port.
type AckKey = (RnicId, RnicId, u16);

/// A batch as the controller files it: its records and its ACK routes.
type Converted = (Vec<ProbeRecord>, Vec<(AckKey, Arc<[PortRef]>)>);

/// The paths responders traced for the ACKs they send (`ResultBatch.ack_routes`), by
/// 5-tuple: a prober's result on that 5-tuple without an ACK path of its own gets it
/// (R-Pingmesh §4.1: the ACK's path is traced by the side that sends it). Kept in memory,
/// rebuilt by replaying the batch log; responders trace their 5-tuples again within the
/// refresh time, so a compaction forgetting old ones costs nothing lasting.
#[derive(Debug, Default)]
struct AckRoutes {
    paths: HashMap<AckKey, Arc<[PortRef]>>,
    order: VecDeque<AckKey>,
}

impl AckRoutes {
    fn insert(&mut self, key: AckKey, path: Arc<[PortRef]>) {
        if self.paths.insert(key, path).is_none() {
            self.order.push_back(key);
        }
        while self.paths.len() > MAX_ACK_ROUTES {
            match self.order.pop_front() {
                Some(old) => {
                    self.paths.remove(&old);
                }
                None => break,
            }
        }
    }

    fn get(&self, key: &AckKey) -> Option<Arc<[PortRef]>> {
        self.paths.get(key).cloned()
    }
}

/// Where the controller's time comes from (ns since the Unix epoch).
#[derive(Clone, Debug, Default)]
pub enum Clock {
    /// The system's wall clock (deployments: agents stamp their probes with theirs).
    #[default]
    System,
    /// A clock the caller sets (the netsim lab: simulated time; tests).
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// Now, ns.
    pub fn now_ns(&self) -> u64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            Clock::Manual(now) => now.load(Ordering::SeqCst),
        }
    }
}

/// Caps on what the controller takes in and keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PingmeshLimits {
    /// Results in one batch.
    pub max_batch_results: usize,
    /// Results waiting for their period's analysis, over all hosts.
    pub max_pending_results: usize,
    /// Hops in one path.
    pub max_path_hops: usize,
    /// Period reports kept (4320: a day of 20-s periods).
    pub retained_periods: usize,
    /// Bytes of analysed results in the log before it is compacted.
    pub compact_after_bytes: u64,
}

impl Default for PingmeshLimits {
    fn default() -> Self {
        PingmeshLimits {
            max_batch_results: 100_000,
            max_pending_results: 4_000_000,
            max_path_hops: 32,
            retained_periods: 4320,
            compact_after_bytes: 64 << 20,
        }
    }
}

/// How the controller runs (defaults: the paper's running parameters, §5).
#[derive(Clone, Debug)]
pub struct PingmeshConfig {
    /// The analysis rules' thresholds.
    pub analysis: AnalysisConfig,
    /// Pinglist construction.
    pub pinglists: PinglistConfig,
    /// Analysis period (20 s).
    pub period_ns: u64,
    /// How long after its end a period waits for uploads before it is analysed.
    pub grace_ns: u64,
    /// How often agents refetch their pinglists and comm info (5 min).
    pub pinglist_refresh_ms: u64,
    /// How often agents upload (5 s).
    pub upload_interval_ms: u64,
    /// Probe timeout agents use (500 ms).
    pub probe_timeout_ms: u64,
    /// Time between two pinglist rotations (an hour).
    pub rotation_ns: u64,
    /// How far in the future a probe's send time may be (clock skew between hosts).
    pub max_clock_skew_ns: u64,
    /// Intake caps.
    pub limits: PingmeshLimits,
    /// How long the batch log's sync waits for other uploads in flight, so that one sync
    /// covers them all (group commit, [`crate::framelog::Writer::wait`]); 0 syncs at once.
    /// An upload's answer is delayed by at most this; a lone upload is never delayed.
    pub commit_delay_us: u64,
    /// The time base.
    pub clock: Clock,
}

impl Default for PingmeshConfig {
    fn default() -> Self {
        PingmeshConfig {
            analysis: AnalysisConfig::default(),
            pinglists: PinglistConfig::default(),
            period_ns: 20_000_000_000,
            grace_ns: 10_000_000_000,
            pinglist_refresh_ms: 300_000,
            upload_interval_ms: 5_000,
            probe_timeout_ms: 500,
            rotation_ns: 3_600_000_000_000,
            max_clock_skew_ns: 60_000_000_000,
            limits: PingmeshLimits::default(),
            commit_delay_us: 2_000,
            clock: Clock::System,
        }
    }
}

/// Why the controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The fabric gives no RNIC inventory.
    #[error("pingmesh inventory: {0}")]
    Inventory(String),
    /// Pinglists could not be built.
    #[error("pingmesh pinglists: {0}")]
    Pinglists(String),
    /// A setting is out of range.
    #[error("pingmesh configuration: {0}")]
    Config(String),
    /// The log could not be opened.
    #[error("pingmesh log: {0}")]
    Store(#[from] StoreError),
}

/// Why a request was refused; each maps to a gRPC status code.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Malformed or inconsistent with the inventory (INVALID_ARGUMENT).
    #[error("{0}")]
    Invalid(String),
    /// The host must register first, or its incarnation is unknown (FAILED_PRECONDITION).
    #[error("{0}")]
    Precondition(String),
    /// Over a limit for now; retry later or split (RESOURCE_EXHAUSTED).
    #[error("{0}")]
    Exhausted(String),
    /// Too old to be told from a duplicate (OUT_OF_RANGE).
    #[error("{0}")]
    OutOfRange(String),
    /// The store failed; nothing was acknowledged (UNAVAILABLE).
    #[error("{0}")]
    Store(String),
}

/// One RNIC's registered comm info.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegisteredRnic {
    /// NIC index.
    pub nic: PortNo,
    /// GID, hex.
    pub gid: String,
    /// IP address.
    pub ip: String,
    /// UD queue pair number.
    pub qpn: u32,
}

/// A log record.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LogRecord {
    /// A registration.
    Register {
        /// Host name.
        host: String,
        /// Its incarnation.
        incarnation: u64,
        /// Its RNICs.
        rnics: Vec<RegisteredRnic>,
    },
    /// Batch sequence numbers of an incarnation seen before a compaction dropped their
    /// batches.
    Seen {
        /// Host name.
        host: String,
        /// Incarnation.
        incarnation: u64,
        /// Every number below this one is taken as seen.
        floor: u64,
        /// Numbers at or above the floor seen.
        seqs: Vec<u64>,
    },
    /// A period analysed.
    Period {
        /// Its report.
        report: Box<PeriodView>,
    },
    /// Results that arrived after their period was analysed.
    Late {
        /// The period.
        index: u64,
        /// How many.
        results: u64,
    },
}

/// Percentiles in a report (ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PercentilesView {
    /// Samples.
    pub count: u64,
    /// P50.
    pub p50: u64,
    /// P90.
    pub p90: u64,
    /// P99.
    pub p99: u64,
    /// P99.9.
    pub p999: u64,
}

impl From<Percentiles> for PercentilesView {
    fn from(p: Percentiles) -> Self {
        PercentilesView {
            count: p.count,
            p50: p.p50,
            p90: p.p90,
            p99: p.p99,
            p999: p.p999,
        }
    }
}

/// SLA figures of one network for one period (§5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SlaView {
    /// Probes judged.
    pub probes: u64,
    /// Share lost to RNIC problems.
    pub rnic_drop_rate: f64,
    /// Share lost in the switch network.
    pub switch_drop_rate: f64,
    /// Network RTT (ns).
    pub network_rtt: PercentilesView,
    /// End-host delay (ns).
    pub end_host_delay: PercentilesView,
}

impl From<Sla> for SlaView {
    fn from(s: Sla) -> Self {
        SlaView {
            probes: s.probes,
            rnic_drop_rate: s.rnic_drop_rate,
            switch_drop_rate: s.switch_drop_rate,
            network_rtt: s.network_rtt.into(),
            end_host_delay: s.end_host_delay.into(),
        }
    }
}

/// A voted link: its two ends as `node:port`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkVote {
    /// One end.
    pub a: String,
    /// The other end (empty for an uncabled port).
    pub b: String,
    /// Votes.
    pub votes: u32,
}

/// A voted switch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchVote {
    /// Its name.
    pub name: String,
    /// Votes.
    pub votes: u32,
}

/// One located problem.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProblemView {
    /// `rnic`, `switch_drops`, `switch_latency`, `host_cpu` or `host_down`.
    pub kind: String,
    /// `P0`, `P1` or `P2` (§4.3.4).
    pub priority: String,
    /// The RNIC, `host:nicN (ip)`.
    pub rnic: Option<String>,
    /// The host.
    pub host: Option<String>,
    /// The most suspicious links (ties all listed).
    pub links: Vec<LinkVote>,
    /// The most suspicious switches.
    pub switches: Vec<SwitchVote>,
    /// Anomalous probes behind it.
    pub probes: u32,
    /// Whether it touches the service network.
    pub affects_service: bool,
}

/// The report of one analysed period, with names instead of ids.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeriodView {
    /// Period number (its start is `index × period`).
    pub index: u64,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// Results analysed.
    pub results: u64,
    /// Results that arrived after the analysis (stored, not voted on).
    pub late_results: u64,
    /// Timeouts per cause.
    pub timeouts: BTreeMap<String, u64>,
    /// Located problems, most urgent first.
    pub problems: Vec<ProblemView>,
    /// The cluster's SLA.
    pub cluster: SlaView,
    /// The service network's SLA.
    pub service: SlaView,
    /// The service degraded and no P0/P1 problem was found.
    pub service_network_innocent: bool,
}

/// What probing saw around a HAWKEYE incident: the "where" (RNIC or switch network, which
/// link) beside HAWKEYE's "why", for the victim's two RNICs at the time the incident began.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PingmeshJoint {
    /// When the incident began on the controller's clock (its first report), ns.
    pub at_ns: u64,
    /// The analysis period holding that time.
    pub period: u64,
    /// Whether that period has been analysed yet (the problems below are empty until it is).
    pub analysed: bool,
    /// The victim's source RNIC, `host:nicN (ip)`, when the inventory has it.
    pub source: Option<String>,
    /// Its destination RNIC.
    pub destination: Option<String>,
    /// The period's problems that concern the victim: either RNIC or host, or the service
    /// network (seen by service tracing or lying on a service path).
    pub problems: Vec<ProblemView>,
    /// The service network's SLA in the period.
    pub service: Option<SlaView>,
    /// One line: where probing puts the trouble.
    pub verdict: String,
}

/// A period in listings.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PeriodSummary {
    /// Period number.
    pub index: u64,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns.
    pub end_ns: u64,
    /// Results analysed.
    pub results: u64,
    /// Late results.
    pub late_results: u64,
    /// Problems found.
    pub problems: usize,
    /// The cluster's SLA.
    pub cluster: SlaView,
}

/// The controller's state in short.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ControllerStatus {
    /// RNICs in the inventory.
    pub rnics: usize,
    /// RNICs registered.
    pub rnics_registered: usize,
    /// Hosts registered.
    pub hosts_registered: usize,
    /// Pinglist generation.
    pub pinglist_generation: u64,
    /// Results waiting for analysis.
    pub pending_results: usize,
    /// Start of the first period not analysed yet, ns.
    pub next_period_start_ns: u64,
    /// Period reports kept.
    pub periods: usize,
    /// Batches stored, duplicates acknowledged, batches refused, late results (since
    /// start).
    pub batches_accepted: u64,
    /// Duplicate batches.
    pub batches_duplicate: u64,
    /// Refused batches.
    pub batches_refused: u64,
    /// Late results.
    pub late_results: u64,
}

/// What an upload did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uploaded {
    /// Results stored.
    pub accepted: u64,
    /// The batch was stored before.
    pub duplicate: bool,
    /// Results for periods already analysed.
    pub late: u64,
}

/// Deduplication window of one incarnation's batch numbers.
#[derive(Clone, Debug, Default)]
struct SeqWindow {
    floor: u64,
    seqs: BTreeSet<u64>,
}

impl SeqWindow {
    fn seen(&self, seq: u64) -> Option<bool> {
        if seq < self.floor {
            None
        } else {
            Some(self.seqs.contains(&seq))
        }
    }

    fn insert(&mut self, seq: u64) {
        self.seqs.insert(seq);
        while self.seqs.len() > DEDUP_WINDOW {
            if let Some(first) = self.seqs.pop_first() {
                self.floor = first + 1;
            }
        }
    }
}

#[derive(Clone, Debug, Default)]
struct HostEntry {
    incarnation: u64,
    registered: bool,
    last_upload_ns: Option<u64>,
    /// Per incarnation (the current one and those before it that still upload).
    windows: BTreeMap<u64, SeqWindow>,
}

#[derive(Clone, Debug)]
struct CommInfo {
    gid: Vec<u8>,
    ip: String,
    qpn: u32,
}

/// A period whose results are handed to the analysis.
#[derive(Debug)]
pub struct DuePeriod {
    /// Period number.
    pub index: u64,
    /// Start and end, ns.
    pub span: (u64, u64),
    /// Its results.
    pub results: Vec<ProbeRecord>,
    /// Every RNIC's current QPN.
    pub current_qpn: BTreeMap<RnicId, u32>,
    /// Each host's last upload, ns.
    pub uploads: Vec<(NodeId, u64)>,
}

/// The controller: registry, pinglists, intake, reports.
#[derive(Debug)]
pub struct Controller {
    config: PingmeshConfig,
    inventory: Arc<Inventory>,
    /// Every node by name, with its kind: looked up twice per probe result (the target, the
    /// hops of inline paths), so hashed with FNV-1a rather than SipHash (names come from the
    /// fabric description; the map never grows from input).
    node_ids: HashMap<String, (NodeId, NodeKind), BuildHasherDefault<Fnv1a>>,
    cabled: HashSet<PortRef>,
    peers: Arc<HashMap<PortRef, PortRef>>,
    /// Per node id: its RNICs as (NIC, id) (a host has a handful: a scan beats hashing).
    rnic_ids: Vec<Vec<(PortNo, RnicId)>>,
    pinglists: Pinglists,
    rotated_at_ns: u64,
    hosts: BTreeMap<NodeId, HostEntry>,
    comm: BTreeMap<RnicId, CommInfo>,
    pending: BTreeMap<u64, Vec<ProbeRecord>>,
    pending_results: usize,
    /// The first period not analysed yet.
    next_period: u64,
    periods: VecDeque<PeriodView>,
    late: BTreeMap<u64, u64>,
    store: Store<LogRecord>,
    batches: FrameLog,
    /// Log bytes of batches per last period they hold results of.
    batch_bytes: BTreeMap<u64, u64>,
    dead_bytes: u64,
    ack_routes: AckRoutes,
    stats: Stats,
}

#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    accepted: u64,
    duplicate: u64,
    refused: u64,
    late: u64,
}

/// What replaying the log found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PingmeshReplay {
    /// Registrations replayed.
    pub registrations: usize,
    /// Results waiting for analysis.
    pub pending_results: usize,
    /// Period reports.
    pub periods: usize,
    /// Records that could not be used, with the reason.
    pub skipped: Vec<String>,
    /// What the store repaired.
    pub repaired: Option<String>,
}

fn gid_text(gid: &[u8]) -> String {
    to_hex(gid)
}

impl Controller {
    /// Opens the controller for `topology` with its log in `data_dir`, replaying it.
    pub fn open(
        topology: &FabricTopology,
        data_dir: &Path,
        config: PingmeshConfig,
    ) -> Result<(Controller, PingmeshReplay), SetupError> {
        if config.period_ns == 0 {
            return Err(SetupError::Config("period_ns must be above 0".into()));
        }
        let inventory =
            Inventory::from_topology(topology).map_err(|e| SetupError::Inventory(e.to_string()))?;
        let pinglists = Pinglists::build(&inventory, config.pinglists)
            .map_err(|e| SetupError::Pinglists(e.to_string()))?;
        let node_ids = topology
            .nodes
            .iter()
            .map(|n| (n.name.clone(), (n.id, n.kind)))
            .collect();
        let cabled = topology.links.iter().flat_map(|l| [l.a, l.b]).collect();
        let peers = topology
            .links
            .iter()
            .flat_map(|l| [(l.a, l.b), (l.b, l.a)])
            .collect();
        let mut rnic_ids: Vec<Vec<(PortNo, RnicId)>> = vec![Vec::new(); topology.nodes.len()];
        for (i, r) in inventory.rnics().iter().enumerate() {
            if let Some(list) = rnic_ids.get_mut(r.host as usize) {
                list.push((r.nic, i as RnicId));
            }
        }
        let (store, replay) = Store::<LogRecord>::open_named(data_dir, LOG_NAME)?;
        let (batches, frames) = FrameLog::open(data_dir, BATCH_LOG_NAME)?;
        batches
            .group_sync()
            .set_commit_delay(std::time::Duration::from_micros(config.commit_delay_us));
        let now = config.clock.now_ns();
        let mut controller = Controller {
            next_period: now / config.period_ns,
            rotated_at_ns: now,
            config,
            inventory: Arc::new(inventory),
            node_ids,
            cabled,
            peers: Arc::new(peers),
            rnic_ids,
            pinglists,
            hosts: BTreeMap::new(),
            comm: BTreeMap::new(),
            pending: BTreeMap::new(),
            pending_results: 0,
            periods: VecDeque::new(),
            late: BTreeMap::new(),
            store,
            batches,
            batch_bytes: BTreeMap::new(),
            dead_bytes: 0,
            ack_routes: AckRoutes::default(),
            stats: Stats::default(),
        };
        let mut report = PingmeshReplay {
            repaired: replay.repair_summary(),
            ..PingmeshReplay::default()
        };
        // Reports first: they say which periods were analysed.
        let mut analysed_through: Option<u64> = None;
        for stored in &replay.records {
            if let LogRecord::Period { report: view } = &stored.record {
                analysed_through = Some(analysed_through.map_or(view.index, |i| i.max(view.index)));
            }
        }
        if let Some(last) = analysed_through {
            controller.next_period = last + 1;
        }
        for (number, stored) in replay.records.into_iter().enumerate() {
            let outcome = match stored.record {
                LogRecord::Register {
                    host,
                    incarnation,
                    rnics,
                } => {
                    report.registrations += 1;
                    controller
                        .check_registration(&host, incarnation, &rnics, true)
                        .map(|(node, parsed)| {
                            controller.apply_registration(node, incarnation, parsed)
                        })
                        .map_err(|e| e.to_string())
                }
                LogRecord::Seen {
                    host,
                    incarnation,
                    floor,
                    seqs,
                } => match controller.node_ids.get(&host) {
                    Some((node, _)) => {
                        let entry = controller.hosts.entry(*node).or_default();
                        let window = entry.windows.entry(incarnation).or_default();
                        window.floor = window.floor.max(floor);
                        for seq in seqs {
                            window.insert(seq);
                        }
                        Ok(())
                    }
                    None => Err(format!("host {host:?} is not in the inventory")),
                },
                LogRecord::Period { report: view } => {
                    controller.periods.push_back(*view);
                    Ok(())
                }
                LogRecord::Late { index, results } => {
                    *controller.late.entry(index).or_default() += results;
                    Ok(())
                }
            };
            if let Err(reason) = outcome {
                report
                    .skipped
                    .push(format!("{LOG_NAME} record {}: {reason}", number + 1));
            }
        }
        // Then the batches (registrations and windows are known by now).
        for (number, (tag, bytes)) in frames.frames.into_iter().enumerate() {
            let size = (crate::framelog::HEADER_BYTES + bytes.len()) as u64;
            let outcome = pb::ResultBatch::decode(bytes.as_slice())
                .map_err(|e| e.to_string())
                .and_then(|batch| {
                    controller.replay_batch(batch, tag & !CARRIED, tag & CARRIED != 0, size)
                });
            if let Err(reason) = outcome {
                report
                    .skipped
                    .push(format!("{BATCH_LOG_NAME} frame {}: {reason}", number + 1));
            }
        }
        if frames.torn_tail || frames.damaged.is_some() {
            let repaired = format!(
                "{BATCH_LOG_NAME}: {}{}",
                if frames.torn_tail {
                    "a last batch cut short by a stop while writing it (never acknowledged) was cut off; "
                } else {
                    ""
                },
                frames.damaged.as_deref().map_or(String::new(), |d| format!(
                    "damage ({d}) cut off, the original kept as {}",
                    frames
                        .quarantined
                        .as_ref()
                        .map_or_else(|| "-".into(), |p| p.display().to_string())
                ))
            );
            report.repaired = Some(match report.repaired.take() {
                Some(earlier) => format!("{earlier}; {repaired}"),
                None => repaired,
            });
        }
        let mut periods: Vec<PeriodView> = controller.periods.drain(..).collect();
        periods.sort_by_key(|p| p.index);
        periods.dedup_by_key(|p| p.index);
        controller.periods = periods.into();
        controller.trim_periods();
        report.pending_results = controller.pending_results;
        report.periods = controller.periods.len();
        Ok((controller, report))
    }

    /// The inventory.
    pub fn inventory(&self) -> &Arc<Inventory> {
        &self.inventory
    }

    /// The configuration.
    pub fn config(&self) -> &PingmeshConfig {
        &self.config
    }

    fn host_node(&self, host: &str) -> Result<NodeId, RequestError> {
        match self.node_ids.get(host) {
            Some((node, NodeKind::Host)) => Ok(*node),
            Some(_) => Err(RequestError::Invalid(format!(
                "{host:?} is a switch in the fabric description, not a host"
            ))),
            None => Err(RequestError::Invalid(format!(
                "host {host:?} is not in the fabric description"
            ))),
        }
    }

    /// Checks a registration against the inventory.
    fn check_registration(
        &self,
        host: &str,
        incarnation: u64,
        rnics: &[RegisteredRnic],
        replaying: bool,
    ) -> Result<(NodeId, Vec<(RnicId, CommInfo)>), RequestError> {
        let node = self.host_node(host)?;
        let invalid =
            |what: String| RequestError::Invalid(format!("registration of {host}: {what}"));
        if let Some(entry) = self.hosts.get(&node) {
            if entry.registered && incarnation < entry.incarnation && !replaying {
                return Err(invalid(format!(
                    "incarnation {incarnation} is older than the registered {}",
                    entry.incarnation
                )));
            }
        }
        if rnics.is_empty() {
            return Err(invalid("no RNIC".into()));
        }
        let mut seen = BTreeSet::new();
        let mut parsed = Vec::with_capacity(rnics.len());
        for rnic in rnics {
            let Some(id) = self.rnic_id(node, rnic.nic) else {
                return Err(invalid(format!(
                    "NIC {} is not one of its cabled ports in the fabric description",
                    rnic.nic
                )));
            };
            if !seen.insert(rnic.nic) {
                return Err(invalid(format!("NIC {} registered twice", rnic.nic)));
            }
            let gid =
                from_hex(&rnic.gid).map_err(|e| invalid(format!("NIC {} gid: {e}", rnic.nic)))?;
            if gid.len() != 16 {
                return Err(invalid(format!(
                    "NIC {} gid has {} bytes, a GID has 16",
                    rnic.nic,
                    gid.len()
                )));
            }
            let ip: IpAddr = rnic.ip.parse().map_err(|_| {
                invalid(format!(
                    "NIC {} ip {:?} is not an IP address",
                    rnic.nic, rnic.ip
                ))
            })?;
            let known = self.inventory.rnic(id).map(|r| IpAddr::from(r.ipv4));
            if known != Some(ip) {
                return Err(invalid(format!(
                    "NIC {} registers ip {ip}, the fabric description gives it {}",
                    rnic.nic,
                    known.map_or_else(|| "none".into(), |k| k.to_string())
                )));
            }
            // A QPN is 24 bits (IBTA vol. 1 §9.2, the BTH's DestQP); 0 and 1 are QP0/QP1.
            if rnic.qpn < 2 || rnic.qpn >= 1 << 24 {
                return Err(invalid(format!(
                    "NIC {} qpn {} is not a UD queue pair number (2..2^24)",
                    rnic.nic, rnic.qpn
                )));
            }
            parsed.push((
                id,
                CommInfo {
                    gid,
                    ip: ip.to_string(),
                    qpn: rnic.qpn,
                },
            ));
        }
        Ok((node, parsed))
    }

    fn apply_registration(
        &mut self,
        node: NodeId,
        incarnation: u64,
        rnics: Vec<(RnicId, CommInfo)>,
    ) {
        let entry = self.hosts.entry(node).or_default();
        if entry.registered && incarnation < entry.incarnation {
            return;
        }
        entry.registered = true;
        entry.incarnation = incarnation;
        entry.windows.entry(incarnation).or_default();
        // Windows of incarnations before the one before are forgotten (their agent is gone).
        while entry.windows.len() > 2 {
            entry.windows.pop_first();
        }
        for (id, info) in rnics {
            self.comm.insert(id, info);
        }
    }

    /// Registers `request` (stored before it is applied).
    pub fn register(
        &mut self,
        request: &pb::RegisterRequest,
    ) -> Result<pb::RegisterReply, RequestError> {
        let rnics: Vec<RegisteredRnic> = request
            .rnics
            .iter()
            .map(|r| {
                Ok(RegisteredRnic {
                    nic: PortNo::try_from(r.nic).map_err(|_| {
                        RequestError::Invalid(format!(
                            "registration of {}: NIC {} is not a port number",
                            request.host, r.nic
                        ))
                    })?,
                    gid: gid_text(&r.gid),
                    ip: r.ip.clone(),
                    qpn: r.qpn,
                })
            })
            .collect::<Result<_, RequestError>>()?;
        let (node, parsed) =
            self.check_registration(&request.host, request.incarnation, &rnics, false)?;
        self.store
            .append(&LogRecord::Register {
                host: request.host.clone(),
                incarnation: request.incarnation,
                rnics,
            })
            .map_err(|e| RequestError::Store(e.to_string()))?;
        self.apply_registration(node, request.incarnation, parsed);
        Ok(pb::RegisterReply {
            pinglist_generation: self.pinglists.generation(),
            pinglist_refresh_ms: self.config.pinglist_refresh_ms,
            upload_interval_ms: self.config.upload_interval_ms,
            probe_timeout_ms: self.config.probe_timeout_ms,
        })
    }

    fn target(&self, id: RnicId, src_port: u16, kind: pb::ProbeKind) -> Option<pb::ProbeTarget> {
        let comm = self.comm.get(&id)?;
        let rnic = self.inventory.rnic(id)?;
        Some(pb::ProbeTarget {
            host: rnic.host_name.clone(),
            nic: u32::from(rnic.nic),
            gid: comm.gid.clone(),
            ip: comm.ip.clone(),
            qpn: comm.qpn,
            src_port: u32::from(src_port),
            kind: kind as i32,
        })
    }

    /// The pinglists of `host`'s RNICs with their targets' comm info.
    pub fn pinglist(&self, host: &str) -> Result<pb::PinglistReply, RequestError> {
        let node = self.host_node(host)?;
        if !self.hosts.get(&node).is_some_and(|h| h.registered) {
            return Err(RequestError::Precondition(format!(
                "host {host} has not registered: register its RNICs first"
            )));
        }
        let mut reply = pb::PinglistReply {
            generation: self.pinglists.generation(),
            ..pb::PinglistReply::default()
        };
        for list in self.pinglists.lists() {
            let Some(rnic) = self.inventory.rnic(list.rnic) else {
                continue;
            };
            if rnic.host != node {
                continue;
            }
            let mut targets = Vec::new();
            for dst in &list.tor_mesh {
                match self.target(*dst, 0, pb::ProbeKind::TorMesh) {
                    Some(t) => targets.push(t),
                    None => reply.unregistered_targets += 1,
                }
            }
            for t in &list.inter_tor {
                match self.target(t.dst, t.src_port, pb::ProbeKind::InterTor) {
                    Some(t) => targets.push(t),
                    None => reply.unregistered_targets += 1,
                }
            }
            reply.rnics.push(pb::RnicPinglist {
                nic: u32::from(rnic.nic),
                tor_mesh_interval_ns: list.tor_mesh_interval_ns.unwrap_or(0),
                inter_tor_interval_ns: list.inter_tor_interval_ns.unwrap_or(0),
                targets,
            });
        }
        Ok(reply)
    }

    /// The comm info of the RNICs behind `request.ips` (service tracing's targets).
    pub fn comm_info(
        &self,
        request: &pb::CommInfoRequest,
    ) -> Result<pb::CommInfoReply, RequestError> {
        let node = self.host_node(&request.host)?;
        if !self.hosts.get(&node).is_some_and(|h| h.registered) {
            return Err(RequestError::Precondition(format!(
                "host {} has not registered: register its RNICs first",
                request.host
            )));
        }
        if request.ips.len() > MAX_COMM_INFO_IPS {
            return Err(RequestError::Exhausted(format!(
                "{} addresses asked, at most {MAX_COMM_INFO_IPS} per request: split it",
                request.ips.len()
            )));
        }
        let mut reply = pb::CommInfoReply::default();
        for text in &request.ips {
            let Ok(ip) = text.parse::<std::net::Ipv4Addr>() else {
                reply.unknown.push(format!("{text:?}: not an IPv4 address"));
                continue;
            };
            let Some(id) = self
                .inventory
                .rnics()
                .iter()
                .position(|r| r.ipv4 == ip.octets())
                .map(|i| i as RnicId)
            else {
                reply
                    .unknown
                    .push(format!("{ip}: no RNIC of the fabric has it"));
                continue;
            };
            match self.target(id, 0, pb::ProbeKind::ServiceTracing) {
                Some(target) => reply.targets.push(target),
                None => reply.unknown.push(format!(
                    "{ip}: {} has not registered",
                    self.inventory.label(id)
                )),
            }
        }
        Ok(reply)
    }

    fn hop(&self, hop: &pb::Hop) -> Result<PortRef, String> {
        let (node, _) = *self
            .node_ids
            .get(&hop.node)
            .ok_or_else(|| format!("node {:?} is not in the fabric description", hop.node))?;
        let port = PortNo::try_from(hop.port)
            .map_err(|_| format!("port {} of {} is not a port number", hop.port, hop.node))?;
        let port = PortRef { node, port };
        if !self.cabled.contains(&port) {
            return Err(format!("{}:{} has no link", hop.node, hop.port));
        }
        Ok(port)
    }

    fn rnic_id(&self, node: NodeId, nic: PortNo) -> Option<RnicId> {
        self.rnic_ids
            .get(node as usize)?
            .iter()
            .find(|(n, _)| *n == nic)
            .map(|(_, id)| *id)
    }

    /// A path's hops as ports; the error (naming the hop) follows the field's name.
    fn path(&self, hops: &[pb::Hop]) -> Result<Vec<PortRef>, String> {
        let limit = self.config.limits.max_path_hops;
        if hops.len() > limit {
            return Err(format!(" has {} hops (at most {limit})", hops.len()));
        }
        hops.iter()
            .enumerate()
            .map(|(h, hop)| self.hop(hop).map_err(|e| format!(" hop {h}: {e}")))
            .collect()
    }

    /// Checks a batch against the inventory and the clock and converts it: its records
    /// (results without an ACK path get the ACK route known for their 5-tuple) and its ACK
    /// routes; the error names the result or route and field.
    fn convert(
        &self,
        node: NodeId,
        batch: &pb::ResultBatch,
        now_ns: u64,
    ) -> Result<Converted, String> {
        if batch.paths.len() > self.config.limits.max_batch_results.saturating_mul(2) {
            return Err(format!(
                "{} paths, more than two per result allowed",
                batch.paths.len()
            ));
        }
        // The batch's path table, each path checked once (an error is reported with the
        // first result that refers to it).
        let table: Vec<Result<Arc<[PortRef]>, String>> = batch
            .paths
            .iter()
            .map(|p| self.path(&p.hops).map(Arc::from))
            .collect();
        let none: Arc<[PortRef]> = Arc::new([]);
        let mut records = Vec::with_capacity(batch.results.len());
        for (i, result) in batch.results.iter().enumerate() {
            let fail = |what: String| format!("result {i}: {what}");
            let prober_nic = PortNo::try_from(result.prober_nic).map_err(|_| {
                fail(format!(
                    "prober_nic {} is not a port number",
                    result.prober_nic
                ))
            })?;
            let prober = self.rnic_id(node, prober_nic).ok_or_else(|| {
                fail(format!(
                    "prober_nic {prober_nic} is not an RNIC of {}",
                    batch.host
                ))
            })?;
            let target_node = self
                .host_node(&result.target_host)
                .map_err(|e| fail(format!("target_host: {e}")))?;
            let target_nic = PortNo::try_from(result.target_nic).map_err(|_| {
                fail(format!(
                    "target_nic {} is not a port number",
                    result.target_nic
                ))
            })?;
            let target = self.rnic_id(target_node, target_nic).ok_or_else(|| {
                fail(format!(
                    "target_nic {target_nic} is not an RNIC of {}",
                    result.target_host
                ))
            })?;
            let source = match pb::ProbeKind::try_from(result.kind) {
                Ok(pb::ProbeKind::TorMesh) => ProbeSource::TorMesh,
                Ok(pb::ProbeKind::InterTor) => ProbeSource::InterTor,
                Ok(pb::ProbeKind::ServiceTracing) => ProbeSource::ServiceTracing,
                _ => return Err(fail(format!("kind {} is not a probe kind", result.kind))),
            };
            if result.sent_ns > now_ns.saturating_add(self.config.max_clock_skew_ns) {
                return Err(fail(format!(
                    "sent_ns {} is {} ms ahead of the analyzer's clock (more than the {} ms of skew allowed)",
                    result.sent_ns,
                    (result.sent_ns - now_ns) / 1_000_000,
                    self.config.max_clock_skew_ns / 1_000_000
                )));
            }
            let status = match pb::ProbeStatus::try_from(result.status) {
                Ok(pb::ProbeStatus::Answered) => ProbeStatus::Answered {
                    network_rtt_ns: result.network_rtt_ns,
                    prober_delay_ns: result.prober_delay_ns,
                    responder_delay_ns: result.responder_delay_ns,
                },
                Ok(pb::ProbeStatus::Timeout) => ProbeStatus::Timeout {
                    ack: result.ack,
                    delay_ack: result.delay_ack,
                },
                _ => {
                    return Err(fail(format!(
                        "status {} is not a probe status",
                        result.status
                    )))
                }
            };
            let inline = |hops: &[pb::Hop], field: &str| {
                self.path(hops)
                    .map(Arc::from)
                    .map_err(|e| fail(format!("{field}{e}")))
            };
            let referred = |index: u32, field: &str| -> Result<Arc<[PortRef]>, String> {
                match table.get(index as usize - 1) {
                    Some(Ok(path)) => Ok(Arc::clone(path)),
                    Some(Err(e)) => Err(fail(format!("{field} {index}: paths[{}]{e}", index - 1))),
                    None => Err(fail(format!(
                        "{field} {index}: the batch has {} paths",
                        table.len()
                    ))),
                }
            };
            let path = match (result.path.is_empty(), result.path_ref) {
                (true, 0) => Arc::clone(&none),
                (false, 0) => inline(&result.path, "path")?,
                (true, index) => referred(index, "path_ref")?,
                (false, _) => return Err(fail("both path and path_ref are given".into())),
            };
            let src_port = u16::try_from(result.src_port)
                .map_err(|_| fail(format!("src_port {} is not a UDP port", result.src_port)))?;
            let ack_path = match (result.ack_path.is_empty(), result.ack_path_ref) {
                (true, 0) if src_port != 0 => self
                    .ack_routes
                    .get(&(target, prober, src_port))
                    .unwrap_or_else(|| Arc::clone(&none)),
                (true, 0) => Arc::clone(&none),
                (false, 0) => inline(&result.ack_path, "ack_path")?,
                (true, index) => referred(index, "ack_path_ref")?,
                (false, _) => return Err(fail("both ack_path and ack_path_ref are given".into())),
            };
            if let Some(first) = path.first() {
                if *first
                    != (PortRef {
                        node,
                        port: prober_nic,
                    })
                {
                    return Err(fail(format!(
                        "path starts at {}:{}, not at the prober's NIC {}:{prober_nic}",
                        self.inventory.name(first.node),
                        first.port,
                        batch.host
                    )));
                }
            }
            records.push(ProbeRecord {
                prober,
                target,
                source,
                target_qpn: result.target_qpn,
                sent_ns: result.sent_ns,
                status,
                path,
                ack_path,
            });
        }
        let mut routes = Vec::with_capacity(batch.ack_routes.len());
        for (i, route) in batch.ack_routes.iter().enumerate() {
            let fail = |what: String| format!("ack_routes[{i}]: {what}");
            let nic = PortNo::try_from(route.nic)
                .map_err(|_| fail(format!("nic {} is not a port number", route.nic)))?;
            let responder = self
                .rnic_id(node, nic)
                .ok_or_else(|| fail(format!("nic {nic} is not an RNIC of {}", batch.host)))?;
            let prober_node = self
                .host_node(&route.prober_host)
                .map_err(|e| fail(format!("prober_host: {e}")))?;
            let prober_nic = PortNo::try_from(route.prober_nic).map_err(|_| {
                fail(format!(
                    "prober_nic {} is not a port number",
                    route.prober_nic
                ))
            })?;
            let prober = self.rnic_id(prober_node, prober_nic).ok_or_else(|| {
                fail(format!(
                    "prober_nic {prober_nic} is not an RNIC of {}",
                    route.prober_host
                ))
            })?;
            let src_port = match u16::try_from(route.src_port) {
                Ok(p) if p != 0 => p,
                _ => {
                    return Err(fail(format!(
                        "src_port {} is not a UDP port",
                        route.src_port
                    )))
                }
            };
            let path = match table.get((route.path_ref as usize).wrapping_sub(1)) {
                Some(Ok(path)) if !path.is_empty() => Arc::clone(path),
                Some(Ok(_)) => {
                    return Err(fail(format!("path_ref {}: an empty path", route.path_ref)))
                }
                Some(Err(e)) => {
                    return Err(fail(format!(
                        "path_ref {}: paths[{}]{e}",
                        route.path_ref,
                        route.path_ref - 1
                    )))
                }
                None => {
                    return Err(fail(format!(
                        "path_ref {}: the batch has {} paths",
                        route.path_ref,
                        table.len()
                    )))
                }
            };
            if path[0] != (PortRef { node, port: nic }) {
                return Err(fail(format!(
                    "the path starts at {}:{}, not at the responder's NIC {}:{nic}",
                    self.inventory.name(path[0].node),
                    path[0].port,
                    batch.host
                )));
            }
            routes.push(((responder, prober, src_port), path));
        }
        Ok((records, routes))
    }

    fn period_of(&self, sent_ns: u64) -> u64 {
        sent_ns / self.config.period_ns
    }

    /// Files converted records; returns (stored for analysis, late).
    fn file(&mut self, records: Vec<ProbeRecord>) -> (u64, u64) {
        let (mut filed, mut late) = (0, 0);
        let mut late_by: BTreeMap<u64, u64> = BTreeMap::new();
        for record in records {
            let index = self.period_of(record.sent_ns);
            if index < self.next_period {
                late += 1;
                *late_by.entry(index).or_default() += 1;
            } else {
                filed += 1;
                self.pending_results += 1;
                self.pending.entry(index).or_default().push(record);
            }
        }
        for (index, n) in late_by {
            *self.late.entry(index).or_default() += n;
        }
        (filed, late)
    }

    fn replay_batch(
        &mut self,
        batch: pb::ResultBatch,
        received_ns: u64,
        carried: bool,
        bytes: u64,
    ) -> Result<(), String> {
        let node = self.host_node(&batch.host).map_err(|e| e.to_string())?;
        let (records, routes) =
            self.convert(node, &batch, u64::MAX - self.config.max_clock_skew_ns)?;
        for (key, path) in routes {
            self.ack_routes.insert(key, path);
        }
        let last = records.iter().map(|r| self.period_of(r.sent_ns)).max();
        let entry = self.hosts.entry(node).or_default();
        if !carried {
            entry
                .windows
                .entry(batch.incarnation)
                .or_default()
                .insert(batch.batch_seq);
        }
        entry.last_upload_ns = Some(
            entry
                .last_upload_ns
                .map_or(received_ns, |t| t.max(received_ns)),
        );
        // Late results were counted by their Late record when they came.
        let records: Vec<ProbeRecord> = records
            .into_iter()
            .filter(|r| r.sent_ns / self.config.period_ns >= self.next_period)
            .collect();
        self.file(records);
        match last {
            Some(last) if last >= self.next_period => {
                *self.batch_bytes.entry(last).or_default() += bytes;
            }
            _ => self.dead_bytes += bytes,
        }
        Ok(())
    }

    /// Takes in a batch of results at `now_ns`.
    pub fn upload(
        &mut self,
        batch: &pb::ResultBatch,
        now_ns: u64,
    ) -> Result<Uploaded, RequestError> {
        let (uploaded, ticket) = self.upload_counted(batch, None, now_ns)?;
        self.durable(ticket)?;
        Ok(uploaded)
    }

    /// [`Controller::upload`] of a batch as it came off the wire: `bytes` are decoded here and
    /// logged as received, not encoded again.
    pub fn upload_encoded(&mut self, bytes: &[u8], now_ns: u64) -> Result<Uploaded, RequestError> {
        let (uploaded, ticket) = self.upload_deferred(bytes, now_ns)?;
        self.durable(ticket)?;
        Ok(uploaded)
    }

    /// The service's intake: [`Controller::upload_encoded`] without waiting for the log's
    /// sync. The answer may be given only after [`GroupSync::wait`] on the ticket (from
    /// [`Controller::group_sync`], outside the controller's lock) succeeded: concurrent
    /// uploads then share syncs. If that wait fails the batch is not durable; it stays
    /// filed for analysis, and its resending is answered as a duplicate only once the log
    /// syncs again.
    pub fn upload_deferred(
        &mut self,
        bytes: &[u8],
        now_ns: u64,
    ) -> Result<(Uploaded, Ticket), RequestError> {
        match pb::ResultBatch::decode(bytes) {
            Ok(batch) => self.upload_counted(&batch, Some(bytes), now_ns),
            Err(e) => {
                self.stats.refused += 1;
                Err(RequestError::Invalid(format!(
                    "a result batch of {} bytes does not decode: {e}",
                    bytes.len()
                )))
            }
        }
    }

    /// The batch log's syncing (see [`Controller::upload_deferred`]).
    pub fn group_sync(&self) -> Arc<GroupSync> {
        self.batches.group_sync()
    }

    fn durable(&self, ticket: Ticket) -> Result<(), RequestError> {
        self.batches
            .group_sync()
            .wait(ticket)
            .map_err(|e| RequestError::Store(format!("the batch is not stored: {e}")))
    }

    fn upload_counted(
        &mut self,
        batch: &pb::ResultBatch,
        encoded: Option<&[u8]>,
        now_ns: u64,
    ) -> Result<(Uploaded, Ticket), RequestError> {
        let outcome = self.upload_inner(batch, encoded, now_ns);
        match &outcome {
            Ok((u, _)) if u.duplicate => self.stats.duplicate += 1,
            Ok((u, _)) => {
                self.stats.accepted += 1;
                self.stats.late += u.late;
            }
            Err(_) => self.stats.refused += 1,
        }
        outcome
    }

    fn upload_inner(
        &mut self,
        batch: &pb::ResultBatch,
        encoded: Option<&[u8]>,
        now_ns: u64,
    ) -> Result<(Uploaded, Ticket), RequestError> {
        let node = self.host_node(&batch.host)?;
        let name = || {
            format!(
                "batch {} of {} (incarnation {})",
                batch.batch_seq, batch.host, batch.incarnation
            )
        };
        let entry = self
            .hosts
            .get(&node)
            .filter(|h| h.registered)
            .ok_or_else(|| {
                RequestError::Precondition(format!("{}: the host has not registered", name()))
            })?;
        let window = entry.windows.get(&batch.incarnation).ok_or_else(|| {
            RequestError::Precondition(format!(
                "{}: not a registered incarnation of the host (registered: {})",
                name(),
                entry.incarnation
            ))
        })?;
        match window.seen(batch.batch_seq) {
            Some(true) => {
                // Acknowledged only once the original's frame is durable too.
                return Ok((
                    Uploaded {
                        accepted: 0,
                        duplicate: true,
                        late: 0,
                    },
                    self.batches.group_sync().latest(),
                ));
            }
            Some(false) => {}
            None => {
                return Err(RequestError::OutOfRange(format!(
                    "{}: older than the last {DEDUP_WINDOW} batches of the incarnation (below {}), so it cannot be told from a duplicate",
                    name(),
                    window.floor
                )))
            }
        }
        let limits = self.config.limits;
        if batch.results.len() > limits.max_batch_results {
            return Err(RequestError::Exhausted(format!(
                "{}: {} results, at most {} per batch: split it",
                name(),
                batch.results.len(),
                limits.max_batch_results
            )));
        }
        let (records, routes) = self
            .convert(node, batch, now_ns)
            .map_err(|e| RequestError::Invalid(format!("{}: {e}", name())))?;
        let fresh = records
            .iter()
            .filter(|r| self.period_of(r.sent_ns) >= self.next_period)
            .count();
        if self.pending_results + fresh > limits.max_pending_results {
            return Err(RequestError::Exhausted(format!(
                "{}: {} results wait for analysis already (at most {}); retry after the next period is analysed",
                name(),
                self.pending_results,
                limits.max_pending_results
            )));
        }
        let reencoded;
        let payload = match encoded {
            Some(bytes) => bytes,
            None => {
                reencoded = batch.encode_to_vec();
                &reencoded
            }
        };
        let (bytes, ticket) = self
            .batches
            .append_deferred(now_ns & !CARRIED, payload)
            .map_err(|e| RequestError::Store(format!("{}: not stored: {e}", name())))?;
        let last = records.iter().map(|r| self.period_of(r.sent_ns)).max();
        for (key, path) in routes {
            self.ack_routes.insert(key, path);
        }
        let (accepted, late) = self.file(records);
        if late > 0 {
            // The late results' counts, durable as well (they are in the batch record too).
            let mut by: BTreeMap<u64, u64> = BTreeMap::new();
            for r in &batch.results {
                let index = self.period_of(r.sent_ns);
                if index < self.next_period {
                    *by.entry(index).or_default() += 1;
                }
            }
            for (index, results) in by {
                if let Err(error) = self.store.append(&LogRecord::Late { index, results }) {
                    tracing::error!(%error, index, "the late-result count could not be stored");
                }
            }
        }
        match last {
            Some(last) if last >= self.next_period => {
                *self.batch_bytes.entry(last).or_default() += bytes
            }
            _ => self.dead_bytes += bytes,
        }
        let entry = self.hosts.entry(node).or_default();
        entry.last_upload_ns = Some(entry.last_upload_ns.map_or(now_ns, |t| t.max(now_ns)));
        if let Some(window) = entry.windows.get_mut(&batch.incarnation) {
            window.insert(batch.batch_seq);
        }
        Ok((
            Uploaded {
                accepted: accepted + late,
                duplicate: false,
                late,
            },
            ticket,
        ))
    }

    /// The periods due for analysis at `now_ns` (ended more than the grace ago), oldest
    /// first; each is taken out of the intake (later results for it are late). Also rotates
    /// the pinglists when their time has come.
    pub fn take_due(&mut self, now_ns: u64) -> Vec<DuePeriod> {
        if now_ns.saturating_sub(self.rotated_at_ns) >= self.config.rotation_ns {
            self.rotated_at_ns = now_ns;
            let replaced = self.pinglists.rotate(&self.inventory);
            tracing::info!(
                replaced,
                generation = self.pinglists.generation(),
                "pinglists rotated"
            );
        }
        let mut due = Vec::new();
        // After a stop of the controller, the periods it missed without any result are
        // skipped (nothing uploaded then, nothing to analyse); it resumes with the first
        // period holding results, or the one before the current.
        let current = now_ns / self.config.period_ns;
        if self.next_period + 2 < current {
            let resume = self
                .pending
                .keys()
                .next()
                .copied()
                .unwrap_or(current - 1)
                .min(current - 1);
            if resume > self.next_period {
                tracing::info!(
                    skipped = resume - self.next_period,
                    "pingmesh periods without results skipped after a stop"
                );
                self.next_period = resume;
            }
        }
        loop {
            let start = self.next_period.saturating_mul(self.config.period_ns);
            let end = start.saturating_add(self.config.period_ns);
            if end.saturating_add(self.config.grace_ns) > now_ns {
                break;
            }
            let results = self.pending.remove(&self.next_period).unwrap_or_default();
            self.pending_results -= results.len();
            let current_qpn = self.comm.iter().map(|(id, c)| (*id, c.qpn)).collect();
            let uploads = self
                .hosts
                .iter()
                .filter_map(|(node, h)| h.last_upload_ns.map(|t| (*node, t)))
                .collect();
            if let Some(bytes) = self.batch_bytes.remove(&self.next_period) {
                self.dead_bytes += bytes;
            }
            due.push(DuePeriod {
                index: self.next_period,
                span: (start, end),
                results,
                current_qpn,
                uploads,
            });
            self.next_period += 1;
            // A controller that was off for long skips straight to the periods with data:
            // empty periods in between are analysed too (hosts silent), but at most a
            // day's worth at once.
            if due.len() >= self.config.limits.retained_periods.max(1) {
                break;
            }
        }
        due
    }

    /// Files the report of an analysed period (stored, then kept).
    pub fn install(&mut self, view: PeriodView) -> Result<(), StoreError> {
        let stored = self.store.append(&LogRecord::Period {
            report: Box::new(view.clone()),
        });
        let index = view.index;
        let at = self.periods.partition_point(|p| p.index < index);
        if self.periods.get(at).is_some_and(|p| p.index == index) {
            self.periods[at] = view;
        } else {
            self.periods.insert(at, view);
        }
        self.trim_periods();
        stored?;
        self.maybe_compact();
        Ok(())
    }

    fn trim_periods(&mut self) {
        while self.periods.len() > self.config.limits.retained_periods {
            if let Some(old) = self.periods.pop_front() {
                self.late.remove(&old.index);
            }
        }
    }

    fn maybe_compact(&mut self) {
        let threshold = self.config.limits.compact_after_bytes;
        if self.dead_bytes < threshold || self.dead_bytes * 2 < self.batches.len() {
            return;
        }
        match self.compact() {
            Ok(()) => tracing::info!(
                bytes = self.store.len() + self.batches.len(),
                "pingmesh logs compacted"
            ),
            Err(error) => tracing::error!(%error, "pingmesh log compaction failed; appends go on"),
        }
    }

    /// Rewrites the log with what is still needed: the registrations, the deduplication
    /// windows, the reports kept, and the results not analysed yet.
    pub fn compact(&mut self) -> Result<(), StoreError> {
        let now_ms = crate::store::now_ms();
        let mut records: Vec<LogRecord> = Vec::new();
        for (node, entry) in &self.hosts {
            let host = self.inventory.name(*node).to_string();
            if entry.registered {
                let rnics = self
                    .comm
                    .iter()
                    .filter_map(|(id, c)| {
                        let r = self.inventory.rnic(*id)?;
                        (r.host == *node).then(|| RegisteredRnic {
                            nic: r.nic,
                            gid: gid_text(&c.gid),
                            ip: c.ip.clone(),
                            qpn: c.qpn,
                        })
                    })
                    .collect();
                records.push(LogRecord::Register {
                    host: host.clone(),
                    incarnation: entry.incarnation,
                    rnics,
                });
            }
            for (incarnation, window) in &entry.windows {
                records.push(LogRecord::Seen {
                    host: host.clone(),
                    incarnation: *incarnation,
                    floor: window.floor,
                    seqs: window.seqs.iter().copied().collect(),
                });
            }
        }
        for view in &self.periods {
            let mut view = view.clone();
            view.late_results += self.late.get(&view.index).copied().unwrap_or(0);
            records.push(LogRecord::Period {
                report: Box::new(view),
            });
        }
        // Pending results, regrouped per prober host into synthetic batches (incarnation
        // and number 0: they are never compared with an agent's).
        let mut by_host: BTreeMap<NodeId, Vec<&ProbeRecord>> = BTreeMap::new();
        for records in self.pending.values() {
            for record in records {
                if let Some(r) = self.inventory.rnic(record.prober) {
                    by_host.entry(r.host).or_default().push(record);
                }
            }
        }
        let mut carried: Vec<(u64, Vec<u8>)> = Vec::new();
        for (node, results) in by_host {
            let bytes = batch_of(&self.inventory, self.inventory.name(node), (0, 0), results)
                .encode_to_vec();
            let received_ns = self
                .hosts
                .get(&node)
                .and_then(|h| h.last_upload_ns)
                .unwrap_or(0);
            carried.push(((received_ns & !CARRIED) | CARRIED, bytes));
        }
        // The registrations and windows first: a stop between the two rewrites leaves the
        // old batches beside the new windows (nothing forgotten), never the reverse.
        self.store.rewrite(records.iter().map(|r| (now_ms, r)))?;
        self.batches
            .rewrite(carried.iter().map(|(tag, bytes)| (*tag, bytes.as_slice())))?;
        let live = self.batches.len();
        // Late counts are now in the reports.
        self.late.clear();
        self.dead_bytes = 0;
        self.batch_bytes.clear();
        if let Some(last) = self.pending.keys().next_back() {
            self.batch_bytes.insert(*last, live);
        }
        Ok(())
    }

    /// The kept reports after `after` (a period index), at most `limit`, with their late
    /// counts.
    pub fn periods(&self, after: Option<u64>, limit: usize) -> (Vec<PeriodView>, usize) {
        let list = self
            .periods
            .iter()
            .filter(|p| after.is_none_or(|a| p.index > a))
            .take(limit)
            .map(|p| self.with_late(p))
            .collect();
        (list, self.periods.len())
    }

    /// The last `n` reports, oldest first.
    pub fn latest(&self, n: usize) -> Vec<PeriodView> {
        let skip = self.periods.len().saturating_sub(n);
        self.periods
            .iter()
            .skip(skip)
            .map(|p| self.with_late(p))
            .collect()
    }

    /// One report.
    pub fn period(&self, index: u64) -> Option<PeriodView> {
        self.periods
            .binary_search_by_key(&index, |p| p.index)
            .ok()
            .map(|at| self.with_late(&self.periods[at]))
    }

    fn with_late(&self, view: &PeriodView) -> PeriodView {
        let mut view = view.clone();
        view.late_results += self.late.get(&view.index).copied().unwrap_or(0);
        view
    }

    /// Probing's view of an incident of `victim` that began at `at_ns`.
    pub fn joint(&self, victim: &hawkmesh_wire::telemetry::FiveTuple, at_ns: u64) -> PingmeshJoint {
        let period = self.period_of(at_ns);
        let rnic_of = |ip: [u8; 4]| {
            self.inventory
                .rnics()
                .iter()
                .position(|r| r.ipv4 == ip)
                .map(|i| i as RnicId)
        };
        let (src, dst) = (rnic_of(victim.src_ip), rnic_of(victim.dst_ip));
        let label = |r: Option<RnicId>| r.map(|r| self.inventory.label(r));
        let host = |r: Option<RnicId>| {
            r.and_then(|r| self.inventory.rnic(r))
                .map(|r| r.host_name.clone())
        };
        let (source, destination) = (label(src), label(dst));
        let hosts = [host(src), host(dst)];
        let view = self.period(period);
        let problems: Vec<ProblemView> = view
            .as_ref()
            .map(|v| {
                v.problems
                    .iter()
                    .filter(|p| {
                        p.affects_service
                            || (p.rnic.is_some() && [&source, &destination].contains(&&p.rnic))
                            || (p.host.is_some() && hosts.contains(&p.host))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let verdict = match (&view, problems.first()) {
            (None, _) => format!(
                "pingmesh: period {period} not analysed yet (it is, a grace after it ends)"
            ),
            (Some(_), None) => format!(
                "pingmesh: no RNIC, host or service-network problem in period {period}: probing finds the paths healthy, the slowdown is congestion HAWKEYE explains"
            ),
            (Some(_), Some(p)) => {
                let place = if !p.links.is_empty() {
                    let links: Vec<String> =
                        p.links.iter().map(|l| format!("{}–{}", l.a, l.b)).collect();
                    format!("link {}", links.join(", "))
                } else if let Some(r) = &p.rnic {
                    format!("RNIC {r}")
                } else if let Some(h) = &p.host {
                    format!("host {h}")
                } else if !p.switches.is_empty() {
                    let s: Vec<&str> = p.switches.iter().map(|s| s.name.as_str()).collect();
                    format!("switch {}", s.join(", "))
                } else {
                    "an unlocated place".to_string()
                };
                format!(
                    "pingmesh: {} ({}) at {place} in period {period}",
                    p.kind, p.priority
                )
            }
        };
        PingmeshJoint {
            at_ns,
            period,
            analysed: view.is_some(),
            source,
            destination,
            problems,
            service: view.map(|v| v.service),
            verdict,
        }
    }

    /// The controller in short.
    pub fn status(&self) -> ControllerStatus {
        ControllerStatus {
            rnics: self.inventory.rnics().len(),
            rnics_registered: self.comm.len(),
            hosts_registered: self.hosts.values().filter(|h| h.registered).count(),
            pinglist_generation: self.pinglists.generation(),
            pending_results: self.pending_results,
            next_period_start_ns: self.next_period.saturating_mul(self.config.period_ns),
            periods: self.periods.len(),
            batches_accepted: self.stats.accepted,
            batches_duplicate: self.stats.duplicate,
            batches_refused: self.stats.refused,
            late_results: self.stats.late,
        }
    }
}

/// A batch of `records` as an agent uploads it: RNICs and hops named from `inventory`, each
/// distinct path once in the batch's path table. `(incarnation, batch_seq)` number it.
pub fn batch_of<'a>(
    inventory: &Inventory,
    host: &str,
    (incarnation, batch_seq): (u64, u64),
    records: impl IntoIterator<Item = &'a ProbeRecord>,
) -> pb::ResultBatch {
    let mut paths: Vec<pb::Path> = Vec::new();
    let mut numbers: HashMap<&'a [PortRef], u32> = HashMap::new();
    let mut results = Vec::new();
    for record in records {
        let mut number = |path: &'a [PortRef]| -> u32 {
            if path.is_empty() {
                return 0;
            }
            *numbers.entry(path).or_insert_with(|| {
                paths.push(pb::Path {
                    hops: path
                        .iter()
                        .map(|p| pb::Hop {
                            node: inventory.name(p.node).to_string(),
                            port: u32::from(p.port),
                        })
                        .collect(),
                });
                paths.len() as u32
            })
        };
        let (path_ref, ack_path_ref) = (number(&record.path), number(&record.ack_path));
        let mut result = probe_result(inventory, record);
        result.path_ref = path_ref;
        result.ack_path_ref = ack_path_ref;
        results.push(result);
    }
    pb::ResultBatch {
        host: host.to_string(),
        incarnation,
        batch_seq,
        results,
        paths,
        ack_routes: Vec::new(),
    }
}

/// A record as an agent uploads it, without its paths.
fn probe_result(inventory: &Inventory, record: &ProbeRecord) -> pb::ProbeResult {
    let (prober_nic, target_host, target_nic) =
        match (inventory.rnic(record.prober), inventory.rnic(record.target)) {
            (Some(p), Some(t)) => (u32::from(p.nic), t.host_name.clone(), u32::from(t.nic)),
            _ => (0, String::new(), 0),
        };
    let mut result = pb::ProbeResult {
        prober_nic,
        target_host,
        target_nic,
        target_qpn: record.target_qpn,
        kind: match record.source {
            ProbeSource::TorMesh => pb::ProbeKind::TorMesh,
            ProbeSource::InterTor => pb::ProbeKind::InterTor,
            ProbeSource::ServiceTracing => pb::ProbeKind::ServiceTracing,
        } as i32,
        sent_ns: record.sent_ns,
        ..pb::ProbeResult::default()
    };
    match record.status {
        ProbeStatus::Answered {
            network_rtt_ns,
            prober_delay_ns,
            responder_delay_ns,
        } => {
            result.status = pb::ProbeStatus::Answered as i32;
            result.network_rtt_ns = network_rtt_ns;
            result.prober_delay_ns = prober_delay_ns;
            result.responder_delay_ns = responder_delay_ns;
        }
        ProbeStatus::Timeout { ack, delay_ack } => {
            result.status = pb::ProbeStatus::Timeout as i32;
            result.ack = ack;
            result.delay_ack = delay_ack;
        }
    }
    result
}

/// Runs the R-Pingmesh analysis of due periods (state across periods: anomalous RNICs).
#[derive(Debug)]
pub struct PeriodAnalyzer {
    analyzer: Analyzer,
    inventory: Arc<Inventory>,
    peers: Arc<HashMap<PortRef, PortRef>>,
}

impl PeriodAnalyzer {
    /// The analysis for `controller`'s fabric.
    pub fn for_controller(controller: &Controller) -> Self {
        PeriodAnalyzer {
            analyzer: Analyzer::new(controller.config.analysis),
            inventory: controller.inventory.clone(),
            peers: controller.peers.clone(),
        }
    }

    /// Analyses one due period.
    pub fn analyse(&mut self, due: DuePeriod) -> PeriodView {
        for (host, at) in &due.uploads {
            self.analyzer.uploaded(*host, *at);
        }
        let report = self.analyzer.analyse(
            &self.inventory,
            &due.current_qpn,
            &due.results,
            due.span,
            None,
        );
        view_of(
            &self.inventory,
            &self.peers,
            due.index,
            due.results.len() as u64,
            &report,
        )
    }
}

fn port_name(inventory: &Inventory, port: PortRef) -> String {
    format!("{}:{}", inventory.name(port.node), port.port)
}

/// A report with names.
pub fn view_of(
    inventory: &Inventory,
    peers: &HashMap<PortRef, PortRef>,
    index: u64,
    results: u64,
    report: &PeriodReport,
) -> PeriodView {
    let cause = |c: TimeoutCause| match c {
        TimeoutCause::HostDown => "host_down",
        TimeoutCause::QpnReset => "qpn_reset",
        TimeoutCause::CpuNoise => "cpu_noise",
        TimeoutCause::Rnic => "rnic",
        TimeoutCause::SwitchNetwork => "switch_network",
    };
    let problems = report
        .problems
        .iter()
        .map(|p| ProblemView {
            kind: match p.kind {
                ProblemKind::Rnic => "rnic",
                ProblemKind::SwitchDrops => "switch_drops",
                ProblemKind::SwitchLatency => "switch_latency",
                ProblemKind::HostCpu => "host_cpu",
                ProblemKind::HostDown => "host_down",
            }
            .to_string(),
            priority: match p.priority {
                Priority::P0 => "P0",
                Priority::P1 => "P1",
                Priority::P2 => "P2",
            }
            .to_string(),
            rnic: p.rnic.map(|r| inventory.label(r)),
            host: p.host.map(|h| inventory.name(h).to_string()),
            links: p
                .links
                .iter()
                .map(|(port, votes)| LinkVote {
                    a: port_name(inventory, *port),
                    b: peers
                        .get(port)
                        .map(|o| port_name(inventory, *o))
                        .unwrap_or_default(),
                    votes: *votes,
                })
                .collect(),
            switches: p
                .switches
                .iter()
                .map(|(node, votes)| SwitchVote {
                    name: inventory.name(*node).to_string(),
                    votes: *votes,
                })
                .collect(),
            probes: p.probes,
            affects_service: p.affects_service,
        })
        .collect();
    PeriodView {
        index,
        start_ns: report.start_ns,
        end_ns: report.end_ns,
        results,
        late_results: 0,
        timeouts: report
            .timeouts
            .iter()
            .map(|(c, n)| (cause(*c).to_string(), *n))
            .collect(),
        problems,
        cluster: report.cluster.into(),
        service: report.service.into(),
        service_network_innocent: report.service_network_innocent,
    }
}

/// FNV-1a, 64 bits (Fowler, Noll, Vo; the parameters of draft-eastlake-fnv): a fast hash for
/// the short node names of the fabric description.
#[derive(Clone, Copy, Debug)]
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Fnv1a(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hawkmesh_wire::topology::{LinkDesc, NodeDesc};

    const PERIOD: u64 = 1_000_000_000;

    /// tor0 (h0, h1) and tor1 (h2, h3) under spine0.
    fn fabric() -> FabricTopology {
        let names = ["tor0", "tor1", "spine0", "h0", "h1", "h2", "h3"];
        let nodes = names
            .iter()
            .enumerate()
            .map(|(i, name)| NodeDesc {
                id: i as NodeId,
                name: name.to_string(),
                kind: if i < 3 {
                    NodeKind::Switch
                } else {
                    NodeKind::Host
                },
                tier: (i < 3).then_some(u8::from(i == 2)),
                ipv4: (i >= 3).then_some([10, 0, i as u8, 1]),
            })
            .collect();
        let link = |a: (NodeId, PortNo), b: (NodeId, PortNo)| LinkDesc {
            a: PortRef {
                node: a.0,
                port: a.1,
            },
            b: PortRef {
                node: b.0,
                port: b.1,
            },
            gbps: 100.0,
            delay_ns: 1000,
        };
        FabricTopology {
            nodes,
            links: vec![
                link((3, 0), (0, 0)),
                link((4, 0), (0, 1)),
                link((5, 0), (1, 0)),
                link((6, 0), (1, 1)),
                link((0, 2), (2, 0)),
                link((1, 2), (2, 1)),
            ],
        }
    }

    fn open(dir: &Path, clock: &Arc<AtomicU64>, limits: PingmeshLimits) -> Controller {
        let config = PingmeshConfig {
            period_ns: PERIOD,
            grace_ns: PERIOD / 2,
            limits,
            clock: Clock::Manual(clock.clone()),
            ..PingmeshConfig::default()
        };
        let (controller, replay) = Controller::open(&fabric(), dir, config).unwrap();
        assert!(replay.skipped.is_empty(), "{:?}", replay.skipped);
        controller
    }

    fn dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hawkmesh-pingmesh-unit-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn register(c: &mut Controller, host: u32, incarnation: u64) -> Result<(), RequestError> {
        c.register(&pb::RegisterRequest {
            host: format!("h{host}"),
            incarnation,
            rnics: vec![pb::RnicInfo {
                nic: 0,
                gid: vec![0; 16],
                ip: format!("10.0.{}.1", host + 3),
                qpn: 100 + host + incarnation as u32,
            }],
        })
        .map(|_| ())
    }

    /// `n` answered probes from h0 to h2 sent in period `period`.
    fn batch(seq: u64, period: u64, n: usize) -> pb::ResultBatch {
        pb::ResultBatch {
            host: "h0".into(),
            incarnation: 1,
            batch_seq: seq,
            paths: Vec::new(),
            ack_routes: Vec::new(),
            results: (0..n)
                .map(|i| pb::ProbeResult {
                    target_host: "h2".into(),
                    target_qpn: 103,
                    kind: pb::ProbeKind::InterTor as i32,
                    sent_ns: period * PERIOD + 1 + i as u64,
                    status: pb::ProbeStatus::Answered as i32,
                    network_rtt_ns: 5_000 + i as u64,
                    ..pb::ProbeResult::default()
                })
                .collect(),
        }
    }

    fn hop(node: &str, port: u32) -> pb::Hop {
        pb::Hop {
            node: node.into(),
            port,
        }
    }

    /// A responder's ACK route reaches the prober's results on that 5-tuple (and only
    /// those without an ACK path of their own), survives a restart, and a bad route refuses
    /// its batch naming it.
    #[test]
    fn ack_routes_give_probers_their_ack_paths_and_bad_ones_are_refused_by_name() {
        let d = dir("ack-routes");
        let clock = Arc::new(AtomicU64::new(10 * PERIOD));
        let mut c = open(&d, &clock, PingmeshLimits::default());
        register(&mut c, 0, 1).unwrap();
        register(&mut c, 2, 1).unwrap();
        let now = clock.load(Ordering::SeqCst);
        let ack = vec![
            hop("h2", 0),
            hop("tor1", 2),
            hop("spine0", 0),
            hop("tor0", 0),
        ];
        let route = |path_ref: u32, prober_host: &str| pb::ResultBatch {
            host: "h2".into(),
            incarnation: 1,
            batch_seq: 1,
            results: Vec::new(),
            paths: vec![pb::Path { hops: ack.clone() }],
            ack_routes: vec![pb::AckRoute {
                nic: 0,
                prober_host: prober_host.into(),
                prober_nic: 0,
                src_port: 50_000,
                path_ref,
            }],
        };
        for (bad, expected) in [
            (
                route(2, "h0"),
                "ack_routes[0]: path_ref 2: the batch has 1 paths",
            ),
            (
                route(1, "h9"),
                "ack_routes[0]: prober_host: host \"h9\" is not in",
            ),
            (
                pb::ResultBatch {
                    paths: vec![pb::Path {
                        hops: ack[1..].to_vec(),
                    }],
                    ..route(1, "h0")
                },
                "ack_routes[0]: the path starts at tor1:2, not at the responder's NIC h2:0",
            ),
        ] {
            let e = c.upload(&bad, now).unwrap_err();
            assert!(
                matches!(&e, RequestError::Invalid(m) if m.contains(expected)),
                "{e:?}"
            );
        }
        c.upload(&route(1, "h0"), now).unwrap();
        let result = |src_port: u32, ack_path: Vec<pb::Hop>| pb::ProbeResult {
            target_host: "h2".into(),
            target_qpn: 103,
            kind: pb::ProbeKind::InterTor as i32,
            sent_ns: 10 * PERIOD + 1,
            status: pb::ProbeStatus::Timeout as i32,
            src_port,
            ack_path,
            ..pb::ProbeResult::default()
        };
        let own = vec![hop("h2", 0), hop("tor1", 2)];
        let probes = |seq: u64| pb::ResultBatch {
            host: "h0".into(),
            incarnation: 1,
            batch_seq: seq,
            results: vec![
                result(50_000, Vec::new()),
                result(50_001, Vec::new()),
                result(50_000, own.clone()),
            ],
            paths: Vec::new(),
            ack_routes: Vec::new(),
        };
        c.upload(&probes(1), now).unwrap();
        // Rebuilt from the batch log on a restart.
        drop(c);
        let mut c = open(&d, &clock, PingmeshLimits::default());
        c.upload(&probes(2), now).unwrap();
        let due = c.take_due(11 * PERIOD + PERIOD / 2);
        assert_eq!(due.len(), 1);
        let ports = |hops: &[pb::Hop]| -> Vec<PortRef> {
            hops.iter()
                .map(|h| c.hop(h).expect("a cabled port"))
                .collect()
        };
        let (joined, own) = (ports(&ack), ports(&own));
        let ack_paths: Vec<Vec<PortRef>> =
            due[0].results.iter().map(|r| r.ack_path.to_vec()).collect();
        let expected: Vec<Vec<PortRef>> = [joined, Vec::new(), own]
            .into_iter()
            .cycle()
            .take(6)
            .collect();
        assert_eq!(ack_paths, expected);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_restarted_agent_replaces_its_qpns_and_an_older_incarnation_is_refused() {
        let d = dir("incarnation");
        let clock = Arc::new(AtomicU64::new(10 * PERIOD));
        let mut c = open(&d, &clock, PingmeshLimits::default());
        for h in 0..4 {
            register(&mut c, h, 1).unwrap();
        }
        let qpn = |c: &Controller| {
            c.pinglist("h0").unwrap().rnics[0]
                .targets
                .iter()
                .find(|t| t.host == "h1")
                .map(|t| t.qpn)
        };
        assert_eq!(qpn(&c), Some(102));
        register(&mut c, 1, 5).unwrap();
        assert_eq!(qpn(&c), Some(106), "the new QPN is handed out");
        let refused = register(&mut c, 1, 4).unwrap_err();
        assert!(
            matches!(&refused, RequestError::Invalid(m) if m.contains("incarnation 4 is older than the registered 5")),
            "{refused:?}"
        );
        // The registry survives a restart.
        drop(c);
        let c = open(&d, &clock, PingmeshLimits::default());
        assert_eq!(qpn(&c), Some(106));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn results_waiting_for_analysis_are_capped_and_a_refused_batch_can_come_back() {
        let d = dir("cap");
        let clock = Arc::new(AtomicU64::new(10 * PERIOD));
        let limits = PingmeshLimits {
            max_pending_results: 100,
            ..PingmeshLimits::default()
        };
        let mut c = open(&d, &clock, limits);
        for h in 0..4 {
            register(&mut c, h, 1).unwrap();
        }
        let now = clock.load(Ordering::SeqCst);
        assert_eq!(c.upload(&batch(1, 10, 80), now).unwrap().accepted, 80);
        let refused = c.upload(&batch(2, 10, 30), now).unwrap_err();
        assert!(
            matches!(&refused, RequestError::Exhausted(m) if m.contains("80 results wait for analysis already (at most 100)")),
            "{refused:?}"
        );
        // Once the period is analysed, the same batch is taken.
        let later = 11 * PERIOD + PERIOD / 2;
        let due = c.take_due(later);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].results.len(), 80);
        let again = c.upload(&batch(2, 11, 30), later).unwrap();
        assert_eq!((again.accepted, again.duplicate), (30, false));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_batch_older_than_the_dedup_window_is_refused_not_taken_twice() {
        let d = dir("window");
        let clock = Arc::new(AtomicU64::new(10 * PERIOD));
        let mut c = open(&d, &clock, PingmeshLimits::default());
        register(&mut c, 0, 1).unwrap();
        register(&mut c, 2, 1).unwrap();
        let now = clock.load(Ordering::SeqCst);
        for seq in 1..=DEDUP_WINDOW as u64 + 5 {
            c.upload(&batch(seq, 10, 0), now).unwrap();
        }
        assert!(c.upload(&batch(6, 10, 1), now).unwrap().duplicate);
        let old = c.upload(&batch(3, 10, 1), now).unwrap_err();
        assert!(matches!(old, RequestError::OutOfRange(_)), "{old:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn compaction_keeps_pending_results_reports_and_what_was_seen() {
        let d = dir("compact");
        let clock = Arc::new(AtomicU64::new(10 * PERIOD));
        let limits = PingmeshLimits {
            compact_after_bytes: 1,
            ..PingmeshLimits::default()
        };
        let mut c = open(&d, &clock, limits);
        for h in 0..4 {
            register(&mut c, h, 1).unwrap();
        }
        c.upload(&batch(1, 10, 50), 10 * PERIOD).unwrap();
        c.upload(&batch(2, 11, 7), 10 * PERIOD).unwrap();
        let mut analyzer = PeriodAnalyzer::for_controller(&c);
        let due = c.take_due(11 * PERIOD + PERIOD / 2);
        assert_eq!(due.len(), 1);
        let before = c.batches.len();
        for period in due {
            let view = analyzer.analyse(period);
            assert_eq!(view.results, 50);
            assert_eq!(view.cluster.network_rtt.p50, 5_024);
            c.install(view).unwrap();
        }
        assert!(
            c.batches.len() < before,
            "the analysed batch was compacted away"
        );
        drop(c);
        let mut c = open(&d, &clock, limits);
        let status = c.status();
        assert_eq!((status.pending_results, status.periods), (7, 1));
        assert_eq!(status.rnics_registered, 4);
        // Both batches are still known as seen.
        for seq in [1, 2] {
            assert!(c.upload(&batch(seq, 11, 7), 11 * PERIOD).unwrap().duplicate);
        }
        // The carried results are analysed with their period.
        let due = c.take_due(12 * PERIOD + PERIOD / 2);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].results.len(), 7);
        let _ = std::fs::remove_dir_all(&d);
    }
}
