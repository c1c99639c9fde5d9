//! The diagnosis, as serialised to JSON. The schema is documented in the crate README; every
//! list is sorted so that the same input always gives byte-identical output.

use std::fmt;

use hawkmesh_wire::telemetry::FiveTuple;
use hawkmesh_wire::topology::{NodeId, PortNo};
use serde::{Deserialize, Serialize};

/// Version of the JSON schema of [`Diagnosis`].
pub const DIAGNOSIS_SCHEMA_VERSION: u32 = 1;

/// An egress port of a switch, with names for people.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PortId {
    /// Switch node id.
    pub switch: NodeId,
    /// Port number on that switch.
    pub port: PortNo,
    /// `switchname.pN`, e.g. `tor3.p2`.
    pub label: String,
    /// Name of the node at the other end of the link.
    pub peer: String,
}

impl fmt::Display for PortId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.label)
    }
}

/// The anomaly classes of HAWKEYE Table 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyType {
    /// PFC backpressure whose initial congestion point has flow contention (micro-burst
    /// incast, load imbalance).
    PfcBackpressure,
    /// PFC spreading from a port that has no flow contention: paused by its peer (host PFC
    /// injection).
    PfcStorm,
    /// Cyclic buffer dependency whose initial congestion is inside the loop.
    DeadlockInitiatorInLoop,
    /// Cyclic buffer dependency fed by a PFC path to a congestion point with flow
    /// contention outside the loop.
    DeadlockInitiatorOutOfLoopFlowContention,
    /// Cyclic buffer dependency fed by a PFC path to a port paused by a host outside the
    /// loop.
    DeadlockInitiatorOutOfLoopHostInjection,
    /// Queueing by flow contention at a port the victim uses, without PFC.
    NormalFlowContention,
    /// PFC whose initial congestion point cannot be determined from the telemetry
    /// (the spreading path leaves the switches that reported).
    UnresolvedPfc,
    /// PFC spreading from a port whose host pauses it because the host's receive path
    /// drains slower than the link delivers (a drain-rate limit: PCIe, host memory, a busy
    /// NIC): the port keeps transmitting between pauses, which come and go with its queue.
    /// The host is the root cause, but it injects nothing.
    SlowReceiver,
}

impl AnomalyType {
    /// A short human name.
    pub fn title(self) -> &'static str {
        match self {
            AnomalyType::PfcBackpressure => "PFC backpressure from flow contention",
            AnomalyType::PfcStorm => "PFC storm (PFC injection)",
            AnomalyType::DeadlockInitiatorInLoop => "PFC deadlock, initiator in loop",
            AnomalyType::DeadlockInitiatorOutOfLoopFlowContention => {
                "PFC deadlock, initiator out of loop (flow contention)"
            }
            AnomalyType::DeadlockInitiatorOutOfLoopHostInjection => {
                "PFC deadlock, initiator out of loop (host PFC injection)"
            }
            AnomalyType::NormalFlowContention => "normal flow contention (no PFC)",
            AnomalyType::UnresolvedPfc => "PFC with unresolved origin (incomplete telemetry)",
            AnomalyType::SlowReceiver => "slow receiver (host drain-rate limit)",
        }
    }
}

/// What kind of thing caused an anomaly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RootCauseKind {
    /// Flows contending in a queue (HAWKEYE Alg. 2 l.7-11).
    FlowContention,
    /// A host sending PFC pause frames to the switch port (HAWKEYE Alg. 2 l.5).
    HostPfcInjection,
    /// A switch pausing its upstream neighbour although none of its egress ports that
    /// receive that traffic is congested.
    SwitchPfcInjection,
    /// A host whose receive path drains slower than its link delivers, pausing the switch
    /// port toward it on and off (slow receiver).
    SlowReceiver,
    /// The telemetry needed to tell is missing.
    Unknown,
}

/// A flow's weight in a port→flow edge (HAWKEYE §3.5.1 "port-flow edges").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FlowContribution {
    /// The flow.
    pub flow: FiveTuple,
    /// Contribution to the contention at the port: packets it was waited on minus packets
    /// it waited for (positive = contributor, negative = victim).
    pub weight: f64,
    /// Non-paused packets of the flow at the port over the analysed epochs.
    pub packets: u64,
    /// Whether the flow is a micro-burst: rate within its active window of the epoch high
    /// and the window short (HAWKEYE Table 2 `burst-flow(f)`); `None` without timing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub burst: Option<bool>,
    /// Rate within its active window in Gbit/s, when timing is known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_rate_gbps: Option<f64>,
}

/// ECMP imbalance among equal-cost uplinks of the switch of a congestion point
/// (HAWKEYE Alg. 2 l.11).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EcmpCheck {
    /// The equal-cost ports (same switch, peers of the same kind and tier).
    pub ports: Vec<PortId>,
    /// Packets enqueued at each, in the same order.
    pub packet_counts: Vec<u64>,
    /// Largest load over mean load.
    pub imbalance_ratio: f64,
    /// Whether the ratio reaches the configured threshold.
    pub imbalanced: bool,
}

/// The root cause of one anomaly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RootCause {
    /// What kind of cause.
    pub kind: RootCauseKind,
    /// The initial congestion point(s): ports with no outgoing port→port wait-for edge
    /// (HAWKEYE Table 2 `out-deg_P(p) = 0`), or the loop ports with contention for an
    /// in-loop deadlock.
    pub ports: Vec<PortId>,
    /// The host (or switch) injecting PFC, by name, for injection causes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub injector: Option<String>,
    /// The host whose receive path limits the drain rate, by name, for slow receivers (it
    /// pauses the port but does not inject: `injector` stays empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver: Option<String>,
    /// Root-cause flows with positive contribution, largest first.
    pub flows: Vec<FlowContribution>,
    /// Whether every root-cause flow with timing is a micro-burst.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub micro_burst: Option<bool>,
    /// ECMP check at the initial congestion point, when it has equal-cost peers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecmp: Option<EcmpCheck>,
}

/// A flow that carries PFC from one port of the spreading path to the next (HAWKEYE §3.5.2:
/// "F2 is responsible for the PFC spreading from SW2.P3 to SW1.P1").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpreadingFlow {
    /// The flow.
    pub flow: FiveTuple,
    /// The upstream (paused) port.
    pub from: PortId,
    /// The downstream port it waits for.
    pub to: PortId,
    /// Its paused packets at `from`.
    pub paused_packets: u64,
}

/// Contention found at a port that is not the root cause (for example a paused port whose
/// non-paused packets also contend).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortContention {
    /// The port.
    pub port: PortId,
    /// Contributors, largest first.
    pub flows: Vec<FlowContribution>,
}

/// One edge of the provenance graph used as evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Which rule of HAWKEYE Table 2 / Alg. 2 it supports.
    pub rule: String,
    /// Source node label (a port label or a 5-tuple).
    pub from: String,
    /// Target node label.
    pub to: String,
    /// Edge weight (0 for facts that are not edges).
    pub weight: f64,
    /// Plain-language statement.
    pub note: String,
}

/// One diagnosed anomaly.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    /// 1-based index in the diagnosis.
    pub id: usize,
    /// The class.
    #[serde(rename = "type")]
    pub anomaly_type: AnomalyType,
    /// Whether the victim flow is paused by it or waits in it.
    pub affects_victim: bool,
    /// The root cause.
    pub root_cause: RootCause,
    /// Ports where the victim (or, for anomalies off the victim path, the first port of the
    /// tree) is paused, followed to the initial congestion point.
    pub spreading_paths: Vec<Vec<PortId>>,
    /// Ports of the cyclic buffer dependency, in cycle order (deadlocks only).
    pub loop_ports: Vec<PortId>,
    /// Flows that carry traffic around the loop (deadlocks only).
    pub loop_flows: Vec<FiveTuple>,
    /// Flows that spread the PFC along the paths.
    pub spreading_flows: Vec<SpreadingFlow>,
    /// Contention at other ports of the anomaly, not the root cause.
    pub local_contention: Vec<PortContention>,
    /// Edges and facts that decided the diagnosis.
    pub evidence: Vec<Evidence>,
    /// One sentence for people.
    pub summary: String,
}

/// One hop of the victim flow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VictimHop {
    /// The egress port.
    pub port: PortId,
    /// Victim packets enqueued there (all analysed epochs).
    pub packets: u64,
    /// Of those, paused by PFC (the flow→port edge weight).
    pub paused_packets: u64,
    /// Mean queue depth its non-paused packets saw, bytes.
    pub mean_queue_depth_bytes: f64,
    /// Where the hop is known from: flow records, or only the polling packet's route.
    pub source: String,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Worth knowing; does not weaken the diagnosis.
    Info,
    /// Telemetry is incomplete: part of the diagnosis may be missing or uncertain.
    Warning,
}

/// A fact about the telemetry itself ("incomplete telemetry" findings).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// Stable machine-readable code, e.g. `lost_evictions`.
    pub code: String,
    /// Plain-language statement naming the switch, port and epoch.
    pub message: String,
}

/// The analysed time window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Epoch size in ns.
    pub epoch_ns: u64,
    /// Start of the first epoch, ns.
    pub start_ns: u64,
    /// End of the last epoch, ns.
    pub end_ns: u64,
    /// Number of aligned epochs.
    pub epochs: usize,
}

/// The answer to "why is this flow slow?".
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// [`DIAGNOSIS_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The victim flow.
    pub victim: FiveTuple,
    /// Analysed epochs.
    pub window: Window,
    /// Switches that reported, by name.
    pub switches_reported: Vec<String>,
    /// Polling event ids seen in the reports.
    pub event_ids: Vec<u64>,
    /// The victim's path, in forwarding order.
    pub victim_path: Vec<VictimHop>,
    /// Anomalies, those affecting the victim first.
    pub anomalies: Vec<Anomaly>,
    /// Facts about the telemetry.
    pub findings: Vec<Finding>,
    /// One line for people.
    pub verdict: String,
}

/// Counts of the provenance graph (for the HTML page and the benchmark).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphStats {
    /// Port nodes.
    pub port_nodes: usize,
    /// Flow nodes.
    pub flow_nodes: usize,
    /// Port→port wait-for edges.
    pub port_port_edges: usize,
    /// Flow→port (paused) edges.
    pub flow_port_edges: usize,
    /// Port→flow (contention) edges.
    pub port_flow_edges: usize,
    /// Port-epochs whose queue was replayed.
    pub replayed_port_epochs: usize,
}
