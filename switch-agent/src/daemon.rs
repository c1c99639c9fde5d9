//! `hawkmesh switch-agent`: the switch agent as the daemon an operator runs on a Tofino
//! switch's CPU (cargo feature `daemon`).
//!
//! What it does, in order:
//! 1. reads its configuration ([`DaemonConfig`], TOML) and, when given, the fabric
//!    description, from which it derives this switch's control-plane state
//!    ([`SwitchSetup`]: routes, port masks, PFC speeds, the polling multicast group);
//! 2. connects to the switch's BF Runtime server (bf_switchd; retrying while it is not up),
//!    checks that it runs the agent's program, installs the set-up and points the CPU
//!    mirror session at the CPU port;
//! 3. reads the CPU port (`bf_pci0`) on a thread ([`crate::cpu_port`]) and runs the agent's
//!    loop ([`SwitchAgent`]) on the calling thread: polling copies in, register reads,
//!    reports out;
//! 4. queues every report's chunks in a bounded outbox that a task streams to the analyzer
//!    (`hawkmesh.v1.Collector/StreamReports`, mutual TLS). A report leaves the outbox only
//!    when the analyzer has acknowledged its stream; a failed stream is sent again after a
//!    back-off (the analyzer stores each chunk once, so a resend is harmless), so an
//!    analyzer restart or a cut connection loses nothing; when the analyzer stays away
//!    longer than the outbox holds, the oldest reports are dropped and counted;
//! 5. when a switch operation fails (bf_switchd restarted, the gRPC connection cut), it
//!    reconnects, installs its state again and serves the polling events that were waiting
//!    — none is dropped for it; what the switch lost in a restart is absent from their
//!    reports;
//! 6. on stop, serves every polling event it accepted, gives the outbox a bounded time to
//!    drain, and returns what it did ([`DaemonSummary`]), including anything it could not
//!    deliver.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hawkmesh_proto::v1 as pb_v1;
use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::tuning_controller_client::TuningControllerClient;
use hawkmesh_proto::v1::ReportChunk;
use hawkmesh_wire::dataplane::{CPU_MIRROR_SESSION, CPU_PORT};
use hawkmesh_wire::polling::Polling;
use hawkmesh_wire::topology::{FabricTopology, NodeId};
use serde::Deserialize;
use tokio::runtime::Handle;
use tokio::sync::Notify;
use tonic::transport::{Channel, Endpoint};

use crate::agent::{AgentConfig, SwitchAgent};
use crate::backend::{BackendError, CpuFrame, CpuFrameKind};
use crate::bfrt_backend::{BfrtBackend, BfrtEndpoint};
use crate::cpu_port::{spawn_reader, CpuPort};
use crate::setup::SwitchSetup;

/// How long a sample of the switch clock's offset counts.
const CLOCK_WINDOW: Duration = Duration::from_secs(10);

/// The switch's time (the data plane's clock, which the registers' epochs are in) as the
/// agent estimates it between polling copies: the host's monotonic clock plus an offset
/// learned from the ingress timestamps the data plane writes into polling copies. A
/// sample is `copy timestamp − host time on handling`, short of the true offset by the
/// copy's delivery delay, so the estimate is the largest sample of the last 10 s (the
/// fastest delivery; the window lets the two clocks drift apart without a stale maximum).
#[derive(Debug)]
pub struct SwitchClock {
    start: Instant,
    samples: Mutex<VecDeque<(u64, i128)>>,
}

impl Default for SwitchClock {
    fn default() -> Self {
        SwitchClock {
            start: Instant::now(),
            samples: Mutex::new(VecDeque::new()),
        }
    }
}

impl SwitchClock {
    fn host_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Takes a switch timestamp of a packet handled now.
    pub fn observe(&self, switch_ns: u64) {
        let host = self.host_ns();
        let Ok(mut samples) = self.samples.lock() else {
            return;
        };
        let oldest = host.saturating_sub(CLOCK_WINDOW.as_nanos() as u64);
        while samples.front().is_some_and(|(at, _)| *at < oldest) && samples.len() > 1 {
            samples.pop_front();
        }
        samples.push_back((host, i128::from(switch_ns) - i128::from(host)));
    }

    /// The switch time now, ns; `None` before the first sample.
    pub fn now(&self) -> Option<u64> {
        let host = self.host_ns();
        let samples = self.samples.lock().ok()?;
        let offset = samples.iter().map(|(_, o)| *o).max()?;
        u64::try_from(i128::from(host) + offset).ok()
    }
}

/// The daemon's configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DaemonConfig {
    /// This switch's node name in the fabric (and its certificate's common name).
    pub switch: String,
    /// Its node id in reports; taken from the fabric description when not given.
    #[serde(default)]
    pub node_id: Option<NodeId>,
    /// The fabric description (`topology.json`): when given, the daemon installs the
    /// switch's routes, port masks, PFC speeds and multicast group from it.
    #[serde(default)]
    pub topology: Option<PathBuf>,
    /// The switch's BF Runtime server.
    pub bfrt: BfrtSection,
    /// The CPU port.
    #[serde(default)]
    pub cpu_port: CpuPortSection,
    /// The analyzer.
    pub analyzer: AnalyzerSection,
    /// Agent settings.
    #[serde(default)]
    pub agent: AgentSection,
    /// PARALEON on this ToR (absent: off).
    #[serde(default)]
    pub tuning: Option<TuningSection>,
}

/// `[tuning]`: every `interval_ms` the switch's sketch is read into the ToR's flow states
/// and its local FSD and ports' pause shares reported to the analyzer's tuning controller;
/// a new setting's ECN knobs are written into the program's ECN table.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TuningSection {
    /// λ_MI, ms (PARALEON's testbed: 30).
    #[serde(default = "default_tuning_ms")]
    pub interval_ms: u64,
    /// Bytes a sketch packet stands for (RoCEv2 at a 1,024-byte MTU: 1,082).
    #[serde(default = "default_packet_bytes")]
    pub packet_bytes: u64,
    /// Ports whose ECN profile the controller sets and whose pause share is reported
    /// (default: the switch's ports in the fabric description).
    #[serde(default)]
    pub ports: Option<Vec<u16>>,
    /// The ports' speed, Gbit/s: the ECN profile assumed in force at start is the knob
    /// table's default at it.
    #[serde(default = "default_tuning_gbps")]
    pub gbps: f64,
}

fn default_tuning_ms() -> u64 {
    30
}

fn default_packet_bytes() -> u64 {
    1_082
}

fn default_tuning_gbps() -> f64 {
    100.0
}

/// `[bfrt]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BfrtSection {
    /// `host:port` of bf_switchd's gRPC server (default port 50052).
    pub address: String,
    /// Device id.
    #[serde(default)]
    pub device_id: u32,
    /// This agent's client id (unique among the switch's BF Runtime clients).
    #[serde(default = "default_client_id")]
    pub client_id: u32,
    /// The P4 name the switch runs the hawkmesh program under.
    #[serde(default = "default_p4_name")]
    pub p4_name: String,
}

fn default_client_id() -> u32 {
    1
}

fn default_p4_name() -> String {
    "hawkmesh".to_string()
}

/// `[cpu_port]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CpuPortSection {
    /// The Linux interface of the CPU port (`bf_pci0` with the SDE's `bf_kpkt`).
    #[serde(default = "default_interface")]
    pub interface: String,
    /// The CPU port's device port (Tofino 1 PCIe CPU port: 192 on 2-pipe, 320 on 4-pipe
    /// parts; the program's `CPU_PORT` by default).
    #[serde(default = "default_dev_port")]
    pub dev_port: u16,
    /// The mirror session the program clones CPU copies to.
    #[serde(default = "default_mirror_session")]
    pub mirror_session: u16,
}

fn default_interface() -> String {
    "bf_pci0".to_string()
}

fn default_dev_port() -> u16 {
    CPU_PORT
}

fn default_mirror_session() -> u16 {
    CPU_MIRROR_SESSION
}

impl Default for CpuPortSection {
    fn default() -> Self {
        CpuPortSection {
            interface: default_interface(),
            dev_port: default_dev_port(),
            mirror_session: default_mirror_session(),
        }
    }
}

/// `[analyzer]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AnalyzerSection {
    /// `https://host:port` (mutual TLS), or `http://` on a loopback address only.
    pub endpoint: String,
    /// The CA the analyzer's certificate chains to (PEM).
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// This agent's certificate (PEM; its common name is `switch`).
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// Its private key (PEM).
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// The analyzer's name as its certificate gives it (default: the endpoint's host).
    #[serde(default)]
    pub name: Option<String>,
}

/// `[agent]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSection {
    /// At most one register read per this many µs.
    pub guard_us: u64,
    /// Wait after a polling event's first copy before its read, µs.
    pub gather_us: u64,
    /// How far back intact ring slots older than the window are still reported, µs.
    pub aged_lookback_us: u64,
    /// Largest report chunk, bytes.
    pub chunk_bytes: usize,
    /// Eviction reports kept between collections.
    pub max_pending_evictions: usize,
    /// New polling events taken per second by each arrival port (more are refused).
    pub events_per_port_per_sec: u32,
    /// Polling events one arrival port may bring at once.
    pub event_burst: u32,
    /// Polling events waiting for a read at most.
    pub max_waiting: usize,
    /// CPU frames queued between the CPU-port reader and the agent (more are dropped and
    /// counted).
    pub cpu_queue: usize,
    /// Report bytes kept for the analyzer while it is away (the oldest reports beyond are
    /// dropped and counted).
    pub outbox_bytes: usize,
    /// How long a stop waits for the outbox to drain, ms.
    pub drain_ms: u64,
}

impl Default for AgentSection {
    fn default() -> Self {
        let agent = AgentConfig::new(0);
        AgentSection {
            guard_us: agent.guard_ns / 1000,
            gather_us: agent.gather_ns / 1000,
            aged_lookback_us: agent.aged_lookback_ns / 1000,
            chunk_bytes: agent.chunk_bytes,
            max_pending_evictions: agent.max_pending_evictions,
            events_per_port_per_sec: agent.events_per_port_per_sec,
            event_burst: agent.event_burst,
            max_waiting: agent.max_waiting,
            cpu_queue: 4096,
            outbox_bytes: 64 << 20,
            drain_ms: 10_000,
        }
    }
}

/// Why the daemon cannot start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The configuration is wrong.
    #[error("{path}: {reason}")]
    Config {
        /// The file (or `flags`).
        path: String,
        /// What is wrong, with the key or line.
        reason: String,
    },
    /// The switch refused the agent (another program, a refused entry).
    #[error("switch `{switch}`: {source}")]
    Switch {
        /// The switch.
        switch: String,
        /// Why.
        #[source]
        source: BackendError,
    },
    /// The CPU port failed.
    #[error("{0}")]
    CpuPort(String),
    /// The analyzer channel could not be set up.
    #[error("analyzer: {0}")]
    Analyzer(String),
}

impl DaemonConfig {
    /// Parses a configuration; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<DaemonConfig, DaemonError> {
        let config: DaemonConfig = toml::from_str(text).map_err(|e| DaemonError::Config {
            path: origin.to_string(),
            reason: e.to_string().trim_end().to_string(),
        })?;
        config.check(origin)?;
        Ok(config)
    }

    /// Reads and parses a configuration file.
    pub fn load(path: &Path) -> Result<DaemonConfig, DaemonError> {
        let text = std::fs::read_to_string(path).map_err(|e| DaemonError::Config {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        DaemonConfig::parse(&text, &path.display().to_string())
    }

    fn check(&self, origin: &str) -> Result<(), DaemonError> {
        let bad = |reason: String| DaemonError::Config {
            path: origin.to_string(),
            reason,
        };
        if self.topology.is_none() && self.node_id.is_none() {
            return Err(bad(
                "give `node_id` or `topology` (the switch's node id in reports comes from one of them)"
                    .into(),
            ));
        }
        BfrtEndpoint::parse(&self.bfrt.address).map_err(|e| bad(format!("bfrt.address: {e}")))?;
        let tls = [&self.analyzer.ca, &self.analyzer.cert, &self.analyzer.key];
        hawkmesh_proto::tls::check_analyzer_endpoint(
            &self.analyzer.endpoint,
            tls.iter().all(|f| f.is_some()),
        )
        .map_err(bad)?;
        if let Some(t) = &self.tuning {
            if !(1..=60_000).contains(&t.interval_ms) {
                return Err(bad(format!(
                    "tuning.interval_ms {}: must be in 1..=60000",
                    t.interval_ms
                )));
            }
            if !(64..=16_384).contains(&t.packet_bytes) {
                return Err(bad(format!(
                    "tuning.packet_bytes {}: must be in 64..=16384",
                    t.packet_bytes
                )));
            }
            if !(t.gbps.is_finite() && t.gbps > 0.0 && t.gbps <= 1_600.0) {
                return Err(bad(format!("tuning.gbps {}: must be in (0, 1600]", t.gbps)));
            }
            if t.ports.is_none() && self.topology.is_none() {
                return Err(bad(
                    "tuning: give `ports`, or `topology` (the switch's ports come from it)".into(),
                ));
            }
        }
        let a = &self.agent;
        if a.chunk_bytes < 256 || a.cpu_queue == 0 || a.outbox_bytes == 0 {
            return Err(bad(
                "agent: chunk_bytes must be at least 256, cpu_queue and outbox_bytes above 0"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The agent's settings for `node`.
    pub fn agent_config(&self, node: NodeId) -> AgentConfig {
        let mut agent = AgentConfig::new(node);
        agent.guard_ns = self.agent.guard_us.saturating_mul(1000);
        agent.gather_ns = self.agent.gather_us.saturating_mul(1000);
        agent.aged_lookback_ns = self.agent.aged_lookback_us.saturating_mul(1000);
        agent.chunk_bytes = self.agent.chunk_bytes;
        agent.max_pending_evictions = self.agent.max_pending_evictions;
        agent.events_per_port_per_sec = self.agent.events_per_port_per_sec;
        agent.event_burst = self.agent.event_burst;
        agent.max_waiting = self.agent.max_waiting;
        agent
    }

    /// The BF Runtime endpoint.
    pub fn bfrt_endpoint(&self) -> BfrtEndpoint {
        // Checked in `parse`.
        let (host, port) = BfrtEndpoint::parse(&self.bfrt.address)
            .map(|e| (e.host, e.port))
            .unwrap_or_default();
        BfrtEndpoint {
            host,
            port,
            device_id: self.bfrt.device_id,
            client_id: self.bfrt.client_id,
            p4_name: self.bfrt.p4_name.clone(),
        }
    }

    /// The node id and, with a fabric description, the switch's set-up (reads the file).
    pub fn resolve(&self) -> Result<(NodeId, Option<SwitchSetup>), DaemonError> {
        let Some(path) = &self.topology else {
            // `check` makes one of them present.
            return Ok((self.node_id.unwrap_or_default(), None));
        };
        let bad = |reason: String| DaemonError::Config {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let fabric: FabricTopology = serde_json::from_str(&text)
            .map_err(|e| bad(format!("not a fabric description: {e}")))?;
        fabric.validate().map_err(|e| bad(e.to_string()))?;
        let node = fabric
            .node_by_name(&self.switch)
            .map(|n| n.id)
            .ok_or_else(|| bad(format!("no node `{}`", self.switch)))?;
        if let Some(id) = self.node_id.filter(|id| *id != node) {
            return Err(bad(format!(
                "`{}` is node {node} here, the configuration says node_id = {id}",
                self.switch
            )));
        }
        let setup =
            SwitchSetup::from_fabric(&fabric, &self.switch).map_err(|e| bad(e.to_string()))?;
        Ok((node, Some(setup)))
    }
}

/// What the daemon did (also logged every minute while it runs).
#[derive(Debug, Default)]
pub struct DaemonStats {
    /// CPU frames read from the CPU port.
    pub cpu_frames: AtomicU64,
    /// CPU frames dropped because the agent's queue was full.
    pub cpu_dropped: AtomicU64,
    /// Reports produced.
    pub reports: AtomicU64,
    /// Reports the analyzer acknowledged.
    pub reports_sent: AtomicU64,
    /// Chunks the analyzer stored for the first time.
    pub chunks_accepted: AtomicU64,
    /// Chunks the analyzer already had (resent after a failed stream).
    pub chunks_duplicate: AtomicU64,
    /// Chunks the analyzer refused (logged with its reason).
    pub chunks_rejected: AtomicU64,
    /// Streams to the analyzer that failed (sent again).
    pub send_failures: AtomicU64,
    /// Reports dropped from a full outbox (analyzer away too long).
    pub reports_dropped: AtomicU64,
    /// Reconnections to the switch.
    pub switch_reconnects: AtomicU64,
    /// Tuning intervals reported to the controller.
    pub tuning_reports: AtomicU64,
    /// Tuning intervals not reported (a failed readout or report).
    pub tuning_failures: AtomicU64,
    /// Settings written (new versions).
    pub settings_applied: AtomicU64,
}

/// What a daemon run did, at its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DaemonSummary {
    /// Polling copies the agent received.
    pub polling_copies: u64,
    /// Reports produced.
    pub reports: u64,
    /// Reports the analyzer acknowledged.
    pub reports_sent: u64,
    /// Reports still in the outbox when the drain time ran out.
    pub reports_unsent: u64,
    /// Reports dropped from a full outbox.
    pub reports_dropped: u64,
    /// Polling events accepted and never reported (the switch unreachable at the stop).
    pub events_unreported: u64,
    /// Polling events refused by the agent's per-port budget (a flood).
    pub events_refused: u64,
    /// Reconnections to the switch.
    pub switch_reconnects: u64,
    /// Failed streams to the analyzer (each sent again).
    pub send_failures: u64,
    /// CPU frames dropped at the agent's queue.
    pub cpu_dropped: u64,
    /// Tuning intervals reported.
    pub tuning_reports: u64,
    /// Tuning intervals not reported.
    pub tuning_failures: u64,
    /// Tuned settings written.
    pub settings_applied: u64,
}

/// A report waiting for the analyzer's acknowledgement.
#[derive(Debug)]
struct Pending {
    seq: u64,
    event_id: u64,
    bytes: usize,
    chunks: Vec<Vec<u8>>,
}

/// Reports waiting for the analyzer, bounded in bytes.
#[derive(Debug)]
struct Outbox {
    queue: VecDeque<Pending>,
    bytes: usize,
    limit: usize,
    next_seq: u64,
}

impl Outbox {
    /// Queues a report; drops the oldest beyond the limit, returning how many.
    fn push(&mut self, event_id: u64, chunks: Vec<Vec<u8>>) -> u64 {
        let bytes = chunks.iter().map(Vec::len).sum();
        self.queue.push_back(Pending {
            seq: self.next_seq,
            event_id,
            bytes,
            chunks,
        });
        self.next_seq += 1;
        self.bytes += bytes;
        let mut dropped = 0;
        while self.bytes > self.limit && self.queue.len() > 1 {
            if let Some(old) = self.queue.pop_front() {
                self.bytes -= old.bytes;
                dropped += 1;
                tracing::warn!(
                    event = old.event_id,
                    "outbox full: dropped the report of polling event {} (the analyzer has been away too long)",
                    old.event_id
                );
            }
        }
        dropped
    }

    /// Removes the reports up to `seq` (acknowledged).
    fn acknowledge(&mut self, seq: u64) -> u64 {
        let mut n = 0;
        while self.queue.front().is_some_and(|p| p.seq <= seq) {
            if let Some(p) = self.queue.pop_front() {
                self.bytes -= p.bytes;
                n += 1;
            }
        }
        n
    }
}

/// Reports per stream.
const BATCH_REPORTS: usize = 64;
/// Longest wait between retries of a failed stream or connection.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often an idle daemon checks that the switch still holds its state.
const LIVENESS_CHECK: Duration = Duration::from_secs(1);
/// A stream that takes longer than this is given up and sent again.
const STREAM_TIMEOUT: Duration = Duration::from_secs(30);

fn analyzer_channel(config: &AnalyzerSection, runtime: &Handle) -> Result<Channel, DaemonError> {
    let bad = |e: String| DaemonError::Analyzer(format!("{}: {e}", config.endpoint));
    let mut endpoint = Endpoint::from_shared(config.endpoint.clone())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_keepalive(Some(Duration::from_secs(30)))
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    if config.endpoint.starts_with("https://") {
        let (_, host) = hawkmesh_proto::tls::endpoint_host(&config.endpoint).map_err(bad)?;
        let name = config.name.clone().unwrap_or_else(|| host.to_string());
        let (Some(ca), Some(cert), Some(key)) = (&config.ca, &config.cert, &config.key) else {
            return Err(bad("mutual TLS needs ca, cert and key".into()));
        };
        let tls = hawkmesh_proto::tls::client_config(ca, cert, key, &name)
            .map_err(|e| bad(e.to_string()))?;
        endpoint = endpoint.tls_config(tls).map_err(|e| bad(e.to_string()))?;
    }
    let _entered = runtime.enter();
    Ok(endpoint.connect_lazy())
}

/// Streams the outbox to the analyzer until `closing` is set and the outbox is empty.
async fn deliver(
    channel: Channel,
    outbox: Arc<Mutex<Outbox>>,
    wake: Arc<Notify>,
    closing: Arc<AtomicBool>,
    stats: Arc<DaemonStats>,
) {
    let mut client = CollectorClient::new(channel);
    let mut backoff = Duration::from_millis(100);
    let mut failing = false;
    loop {
        let batch: Vec<(u64, Vec<Vec<u8>>)> = match outbox.lock() {
            Ok(o) => o
                .queue
                .iter()
                .take(BATCH_REPORTS)
                .map(|p| (p.seq, p.chunks.clone()))
                .collect(),
            Err(_) => return,
        };
        let Some(last) = batch.last().map(|(seq, _)| *seq) else {
            if closing.load(Ordering::Acquire) {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), wake.notified()).await;
            continue;
        };
        let chunks: Vec<ReportChunk> = batch
            .into_iter()
            .flat_map(|(_, chunks)| chunks)
            .map(|chunk| ReportChunk { chunk })
            .collect();
        let sent = tokio::time::timeout(
            STREAM_TIMEOUT,
            client.stream_reports(tokio_stream::iter(chunks)),
        )
        .await;
        match sent {
            Ok(Ok(summary)) => {
                let summary = summary.into_inner();
                let acknowledged = outbox.lock().map(|mut o| o.acknowledge(last)).unwrap_or(0);
                stats
                    .reports_sent
                    .fetch_add(acknowledged, Ordering::Relaxed);
                stats
                    .chunks_accepted
                    .fetch_add(summary.accepted, Ordering::Relaxed);
                stats
                    .chunks_duplicate
                    .fetch_add(summary.duplicates, Ordering::Relaxed);
                stats
                    .chunks_rejected
                    .fetch_add(summary.rejected.len() as u64, Ordering::Relaxed);
                for reason in &summary.rejected {
                    tracing::error!("the analyzer refused a report chunk: {reason}");
                }
                if failing {
                    tracing::info!("the analyzer is reachable again; reports are flowing");
                }
                failing = false;
                backoff = Duration::from_millis(100);
            }
            failed => {
                let why = match failed {
                    Ok(Err(status)) => format!("{}: {}", status.code(), status.message()),
                    _ => format!("no answer within {} s", STREAM_TIMEOUT.as_secs()),
                };
                stats.send_failures.fetch_add(1, Ordering::Relaxed);
                if !failing {
                    tracing::warn!("streaming reports to the analyzer failed ({why}); they stay queued and are sent again");
                }
                failing = true;
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Connects to the switch and installs the agent's state, retrying while the switch is
/// unreachable (bf_switchd starting or restarting) until `stop`. A switch that runs
/// another program is an error at the first connection (a configuration mistake) and
/// retried later (the program may be being reloaded).
fn connect_switch(
    runtime: &Handle,
    config: &DaemonConfig,
    setup: Option<&SwitchSetup>,
    stop: &AtomicBool,
    first: bool,
) -> Result<Option<BfrtBackend>, DaemonError> {
    let endpoint = config.bfrt_endpoint();
    let mut backoff = Duration::from_millis(50);
    let mut logged = false;
    loop {
        if stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        let attempt = BfrtBackend::connect(runtime.clone(), &endpoint).and_then(|mut backend| {
            if let Some(setup) = setup {
                setup.apply(&mut backend)?;
            }
            backend.set_mirror_session(config.cpu_port.mirror_session, config.cpu_port.dev_port)?;
            Ok(backend)
        });
        match attempt {
            Ok(backend) => {
                tracing::info!(
                    "switch `{}`: connected to BF Runtime at {}:{}, program `{}` checked, state installed",
                    config.switch,
                    endpoint.host,
                    endpoint.port,
                    endpoint.p4_name
                );
                return Ok(Some(backend));
            }
            Err(e @ (BackendError::Program(_) | BackendError::EntryRefused { .. })) if first => {
                return Err(DaemonError::Switch {
                    switch: config.switch.clone(),
                    source: e,
                })
            }
            Err(e) => {
                if !logged {
                    tracing::warn!(
                        "switch `{}`: {e}; retrying every {} s at most",
                        config.switch,
                        MAX_BACKOFF.as_secs()
                    );
                    logged = true;
                }
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// Runs the daemon until `stop` is set: `cpu` is the opened CPU port, `runtime` a Tokio
/// runtime for the gRPC clients. Blocks; call it outside the runtime's worker threads.
/// The agent works in the switch's time, learned from the polling copies ([`SwitchClock`]).
pub fn run(
    config: &DaemonConfig,
    cpu: CpuPort,
    runtime: Handle,
    stop: Arc<AtomicBool>,
) -> Result<DaemonSummary, DaemonError> {
    let clock = Arc::new(SwitchClock::default());
    let (node, setup) = config.resolve()?;
    let stats = Arc::new(DaemonStats::default());
    let channel = analyzer_channel(&config.analyzer, &runtime)?;
    let Some(backend) = connect_switch(&runtime, config, setup.as_ref(), &stop, true)? else {
        return Ok(summary(&stats, 0, 0, 0));
    };

    let outbox = Arc::new(Mutex::new(Outbox {
        queue: VecDeque::new(),
        bytes: 0,
        limit: config.agent.outbox_bytes,
        next_seq: 0,
    }));
    let wake = Arc::new(Notify::new());
    let closing = Arc::new(AtomicBool::new(false));
    let channel_for_tuning = channel.clone();
    let sender = runtime.spawn(deliver(
        channel,
        outbox.clone(),
        wake.clone(),
        closing.clone(),
        stats.clone(),
    ));

    let reader_stop = Arc::new(AtomicBool::new(false));
    let (cpu_tx, cpu_rx) = sync_channel(config.agent.cpu_queue);
    let reader_clock = clock.clone();
    let (reader, reader_stats) = spawn_reader(
        cpu,
        cpu_tx,
        Box::new(move || reader_clock.now().unwrap_or(0)),
        reader_stop.clone(),
    )
    .map_err(|e| DaemonError::CpuPort(format!("starting the reader thread: {e}")))?;

    let mut tuner = config.tuning.as_ref().map(|t| {
        let ports: Vec<u16> = t.ports.clone().unwrap_or_else(|| {
            setup
                .as_ref()
                .map(|s| s.port_gbps.keys().copied().collect())
                .unwrap_or_default()
        });
        crate::tuning::TorTuning::new(crate::tuning::TorTuningConfig {
            interval_ns: t.interval_ms.saturating_mul(1_000_000),
            packet_bytes: t.packet_bytes,
            pause_ports: ports.clone(),
            ecn_ports: ports,
            profile: crate::tuning::default_profile(t.gbps),
        })
    });
    let tuning_client = TuningControllerClient::new(channel_for_tuning);
    let (tuning_tx, tuning_rx) = sync_channel::<Result<pb_v1::TuningReply, String>>(64);
    let mut tuning_failing = false;

    let mut agent = SwitchAgent::new(config.agent_config(node), backend);
    let mut last_log = Instant::now();
    let mut last_check = Instant::now();
    let mut reader_error = None;
    let mut events_unreported = 0;
    loop {
        let stopping = stop.load(Ordering::Acquire);
        // Short waits while polling events wait for their read, long ones when idle.
        let wait = if agent.waiting() > 0 {
            Duration::from_micros(20)
        } else {
            Duration::from_millis(2)
        };
        match cpu_rx.recv_timeout(wait) {
            Ok(frame) => {
                for frame in
                    std::iter::once(frame).chain(cpu_rx.try_iter().take(config.agent.cpu_queue))
                {
                    agent.backend_mut().deliver_cpu(stamped(&clock, frame));
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                reader_error = Some("the CPU-port reader stopped".to_string());
            }
        }
        // Before the first polling copy there is nothing to collect and no switch time.
        let now = clock.now().unwrap_or(0);
        let made = if stopping || reader_error.is_some() {
            agent.flush(now)
        } else {
            agent.poll(now)
        };
        let failure = match made {
            Ok(collections) => {
                for c in collections {
                    stats.reports.fetch_add(1, Ordering::Relaxed);
                    let dropped = outbox
                        .lock()
                        .map(|mut o| o.push(c.event_id, c.chunks))
                        .unwrap_or(0);
                    stats.reports_dropped.fetch_add(dropped, Ordering::Relaxed);
                    wake.notify_one();
                }
                // Once a second while idle: is the switch still there with our state?
                // (bf_switchd restarted with a fresh state: install it again.)
                if agent.waiting() == 0 && !stopping && last_check.elapsed() >= LIVENESS_CHECK {
                    last_check = Instant::now();
                    let (session, port) =
                        (config.cpu_port.mirror_session, config.cpu_port.dev_port);
                    match agent.backend_mut().mirror_session_sends_to(session, port) {
                        Ok(true) => None,
                        Ok(false) => Some(format!(
                            "mirror session {session} no longer sends to port {port}"
                        )),
                        Err(e) => Some(e.to_string()),
                    }
                } else {
                    None
                }
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(failure) = failure {
            tracing::warn!(
                "switch `{}`: {failure}; reconnecting ({} polling events wait for their read)",
                config.switch,
                agent.waiting()
            );
            let frames = agent.backend_mut().take_cpu();
            match connect_switch(&runtime, config, setup.as_ref(), &stop, false)? {
                Some(mut backend) => {
                    for frame in frames {
                        backend.deliver_cpu(frame);
                    }
                    *agent.backend_mut() = backend;
                    stats.switch_reconnects.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    events_unreported = agent.waiting() as u64;
                    if events_unreported > 0 {
                        tracing::error!(
                            "stopping with the switch unreachable: {events_unreported} polling events are not reported"
                        );
                    }
                    break;
                }
            }
        }
        if let Some(t) = tuner.as_mut() {
            // Between polling events: an interval's readout holds the loop for a few ms.
            if agent.waiting() == 0 && !stopping {
                if let Some(interval) = t.due(hawkmesh_proto::tuning::unix_ns()) {
                    match t.measure(agent.backend_mut(), &config.switch, interval) {
                        Ok(report) => {
                            let mut client = tuning_client.clone();
                            let tx = tuning_tx.clone();
                            runtime.spawn(async move {
                                let reply = tokio::time::timeout(
                                    TUNING_REPLY_WAIT,
                                    client.report_tor(report),
                                )
                                .await;
                                let result = match reply {
                                    Ok(Ok(r)) => Ok(r.into_inner()),
                                    Ok(Err(status)) => Err(status.message().to_string()),
                                    Err(_) => Err("no reply in time".to_string()),
                                };
                                // A full queue drops the reply: the next one carries the
                                // same setting.
                                let _ = tx.try_send(result);
                            });
                        }
                        Err(e) => {
                            stats.tuning_failures.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!("tuning interval {interval}: the readout failed: {e}");
                        }
                    }
                }
            }
            while let Ok(result) = tuning_rx.try_recv() {
                match result {
                    Ok(reply) => {
                        stats.tuning_reports.fetch_add(1, Ordering::Relaxed);
                        tuning_failing = false;
                        match t.apply(agent.backend_mut(), &reply) {
                            Ok(Some(version)) => {
                                stats.settings_applied.fetch_add(1, Ordering::Relaxed);
                                let p = t.profile();
                                tracing::info!(
                                    "tuning: setting {version} written (ECN Kmin {} B, Kmax {} B, Pmax {})",
                                    p.kmin_bytes,
                                    p.kmax_bytes,
                                    p.pmax
                                );
                            }
                            Ok(None) => {}
                            Err(e) => {
                                tracing::warn!("tuning: setting {} not written: {e}", reply.version)
                            }
                        }
                    }
                    Err(e) => {
                        stats.tuning_failures.fetch_add(1, Ordering::Relaxed);
                        // Once per outage, not once per interval.
                        if !tuning_failing {
                            tracing::warn!("tuning: the controller did not take a report: {e}");
                        }
                        tuning_failing = true;
                    }
                }
            }
        }
        if (stopping || reader_error.is_some()) && agent.waiting() == 0 {
            break;
        }
        if last_log.elapsed() >= Duration::from_secs(60) {
            last_log = Instant::now();
            let a = agent.stats();
            tracing::info!(
                "polling copies {}, events refused {}, reports {}, sent {}, queued {}, register reads {}, evictions {} (lost {}), CPU frames dropped {}",
                a.polling_copies,
                a.refused_events,
                a.reports,
                stats.reports_sent.load(Ordering::Relaxed),
                outbox.lock().map(|o| o.queue.len()).unwrap_or(0),
                a.register_reads,
                a.evictions,
                a.lost_evictions,
                reader_stats.dropped.load(Ordering::Relaxed)
            );
        }
    }

    reader_stop.store(true, Ordering::Release);
    let reader_result = reader.join();
    stats.cpu_frames.store(
        reader_stats.delivered.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );
    stats.cpu_dropped.store(
        reader_stats.dropped.load(Ordering::Relaxed),
        Ordering::Relaxed,
    );

    // Let the outbox drain, for a bounded time.
    closing.store(true, Ordering::Release);
    wake.notify_one();
    let deadline = Instant::now() + Duration::from_millis(config.agent.drain_ms);
    while !sender.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    sender.abort();
    let unsent = outbox.lock().map(|o| o.queue.len() as u64).unwrap_or(0);
    if unsent > 0 {
        tracing::error!("{unsent} reports could not be delivered to the analyzer before the stop");
    }
    let polling_copies = agent.stats().polling_copies;
    let events_refused = agent.stats().refused_events;
    if let Some(reason) = reader_error {
        let detail = match reader_result {
            Ok(Err(e)) => e.to_string(),
            Ok(Ok(())) => reason,
            Err(_) => "the CPU-port reader panicked".to_string(),
        };
        return Err(DaemonError::CpuPort(detail));
    }
    let mut done = summary(&stats, polling_copies, unsent, events_unreported);
    done.events_refused = events_refused;
    Ok(done)
}

/// A polling copy carries the switch's time of the event: it is the frame's time and a
/// sample of the switch clock.
fn stamped(clock: &SwitchClock, mut frame: CpuFrame) -> CpuFrame {
    if frame.kind == CpuFrameKind::Polling {
        if let Ok(polling) = Polling::parse_packet(&frame.bytes) {
            if polling.context_tstamp_ns != 0 {
                clock.observe(polling.context_tstamp_ns);
                frame.time_ns = polling.context_tstamp_ns;
            }
        }
    }
    frame
}

/// How long a tuning report waits for the controller's reply.
const TUNING_REPLY_WAIT: Duration = Duration::from_secs(2);

fn summary(
    stats: &DaemonStats,
    polling_copies: u64,
    reports_unsent: u64,
    events_unreported: u64,
) -> DaemonSummary {
    let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
    DaemonSummary {
        polling_copies,
        reports: get(&stats.reports),
        reports_sent: get(&stats.reports_sent),
        reports_unsent,
        reports_dropped: get(&stats.reports_dropped),
        events_unreported,
        events_refused: 0,
        switch_reconnects: get(&stats.switch_reconnects),
        send_failures: get(&stats.send_failures),
        cpu_dropped: get(&stats.cpu_dropped),
        tuning_reports: get(&stats.tuning_reports),
        tuning_failures: get(&stats.tuning_failures),
        settings_applied: get(&stats.settings_applied),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
switch = "tor1"
node_id = 3
[bfrt]
address = "127.0.0.1:50052"
[analyzer]
endpoint = "http://127.0.0.1:50051"
"#;

    #[test]
    fn a_minimal_configuration_takes_the_defaults() {
        let config = DaemonConfig::parse(MINIMAL, "agent.toml").expect("parses");
        assert_eq!(config.cpu_port.interface, "bf_pci0");
        assert_eq!(config.cpu_port.dev_port, CPU_PORT);
        let endpoint = config.bfrt_endpoint();
        assert_eq!(
            (endpoint.host.as_str(), endpoint.port),
            ("127.0.0.1", 50052)
        );
        assert_eq!(endpoint.p4_name, "hawkmesh");
        assert_eq!(config.agent_config(3).guard_ns, crate::DEFAULT_GUARD_NS);
        assert_eq!(config.resolve().expect("node").0, 3);
    }

    #[test]
    fn the_switch_clock_follows_the_fastest_delivered_copy() {
        let clock = SwitchClock::default();
        assert_eq!(clock.now(), None, "no switch time before a copy");
        clock.observe(1_000_000_000_000);
        let first = clock.now().expect("a time");
        assert!((1_000_000_000_000..1_000_000_000_000 + 50_000_000).contains(&first));
        // A copy that was delivered late (its stamp older) does not move the clock back.
        clock.observe(999_000_000_000);
        assert!(clock.now().expect("a time") >= first);
        // A copy delivered faster than all before moves it forward.
        clock.observe(1_005_000_000_000);
        assert!(clock.now().expect("a time") >= 1_005_000_000_000);
    }

    #[test]
    fn the_lab_example_configuration_parses() {
        let text = include_str!("../../hw-lab/switch-agent.toml");
        let config = DaemonConfig::parse(text, "hw-lab/switch-agent.toml").expect("parses");
        assert_eq!(config.analyzer.name.as_deref(), Some("analyzer.lab"));
        assert_eq!(config.agent, AgentSection::default());
        assert_eq!(config.cpu_port, CpuPortSection::default());
        let tuning = config.tuning.as_ref().expect("the tuning section");
        assert_eq!(
            (
                tuning.interval_ms,
                tuning.packet_bytes,
                tuning.ports.as_ref()
            ),
            (30, 1_082, None)
        );
    }

    #[test]
    fn the_tofino_model_lab_configuration_resolves_its_switch() {
        let text = include_str!("../../hw-lab/switch-agent-model.toml");
        let mut config =
            DaemonConfig::parse(text, "hw-lab/switch-agent-model.toml").expect("parses");
        assert_eq!(config.cpu_port.dev_port, 64);
        config.topology =
            Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("../hw-lab/tofino-lab-topology.json"));
        let (node, setup) = config.resolve().expect("resolves");
        assert_eq!(node, 0);
        let setup = setup.expect("a set-up");
        assert_eq!(setup.routes.len(), 4, "a route to each of the four hosts");
        assert_eq!(setup.port_gbps.len(), 4);
    }

    #[test]
    fn configuration_errors_name_the_file_and_the_key() {
        let cases = [
            (
                MINIMAL.replace("node_id = 3\n", ""),
                "agent.toml: give `node_id` or `topology`",
            ),
            (
                MINIMAL.replace("127.0.0.1:50052", "switch1"),
                "agent.toml: bfrt.address: `switch1` is not host:port",
            ),
            (
                MINIMAL.replace("http://127.0.0.1", "http://10.1.1.1"),
                "agent.toml: analyzer.endpoint: plaintext is for a loopback analyzer only",
            ),
            (
                MINIMAL.replace("http://127.0.0.1", "https://analyzer"),
                "agent.toml: analyzer: an https endpoint needs `ca`, `cert` and `key`",
            ),
            (
                MINIMAL.replace("[bfrt]", "[bfrt]\nport = 1"),
                "agent.toml: TOML parse error at line",
            ),
            (
                format!("{MINIMAL}[tuning]\ninterval_ms = 0\nports = [1]\n"),
                "agent.toml: tuning.interval_ms 0: must be in 1..=60000",
            ),
            (
                format!("{MINIMAL}[tuning]\n"),
                "agent.toml: tuning: give `ports`, or `topology`",
            ),
        ];
        for (text, expected) in cases {
            let e = DaemonConfig::parse(&text, "agent.toml").expect_err(expected);
            assert!(e.to_string().starts_with(expected), "{e}");
        }
        let e = DaemonConfig::parse(&MINIMAL.replace("[bfrt]", "[bfrt]\nport = 1"), "agent.toml")
            .expect_err("unknown key");
        assert!(e.to_string().contains("unknown field `port`"), "{e}");
    }

    #[test]
    fn the_outbox_keeps_its_bound_and_drops_the_oldest_report_first() {
        let mut outbox = Outbox {
            queue: VecDeque::new(),
            bytes: 0,
            limit: 250,
            next_seq: 0,
        };
        for event in 0..5u64 {
            outbox.push(event, vec![vec![0u8; 100]]);
        }
        let kept: Vec<u64> = outbox.queue.iter().map(|p| p.event_id).collect();
        assert_eq!(kept, [3, 4]);
        assert_eq!(outbox.bytes, 200);
        assert_eq!(outbox.acknowledge(3), 1);
        assert_eq!(outbox.queue.front().map(|p| p.event_id), Some(4));
        // A report larger than the bound is still kept (alone) rather than lost.
        outbox.push(9, vec![vec![0u8; 400]]);
        assert_eq!(outbox.queue.back().map(|p| p.event_id), Some(9));
    }
}
