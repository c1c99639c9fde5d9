//! Ground truth of injected anomalies, including the PFC spreading tree each one caused.
//!
//! The spreading tree is reconstructed from the XOFF frames actually sent during the
//! anomaly, port by port: the anomaly's own ports (initial congestion points, loop ports)
//! are affected from the start; an XOFF a switch sends is part of the tree when the egress
//! port holding most of the pausing ingress's buffer (what the upstream is made to wait
//! for, recorded with the XOFF) is affected, and the egress port it pauses upstream becomes
//! affected in turn. XOFFs from the anomaly's origin hosts (a storm's injector) belong to
//! it. A switch under several concurrent congestions thus only spreads this anomaly's PFC
//! where its buffers actually wait for this anomaly's ports, not every PAUSE it sends.

use crate::sim::PfcEvent;
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortRef};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What kind of anomaly was injected (the classes of HAWKEYE Table 2 plus the netsim faults).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    /// Synchronized incast micro-burst (PFC backpressure from flow contention).
    IncastBurst,
    /// A host NIC injecting PAUSE frames (PFC storm).
    PfcStorm,
    /// A NIC draining below line rate.
    SlowReceiver,
    /// A link going down and up.
    LinkFlap,
    /// Random loss on a link.
    RandomLoss,
    /// A link dropping some 5-tuples only (UDP source ports in a range).
    AclDrop,
    /// Routing misconfiguration creating a cyclic buffer dependency.
    RoutingLoop,
    /// Skewed ECMP.
    EcmpImbalance,
}

/// One edge of a PFC spreading tree: `sender` sent XOFF, which paused `paused`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SpreadEdge {
    /// First XOFF on this edge with this cause, ns.
    pub time_ns: u64,
    /// When the pause begun by the latest XOFF ended, ns: the sender's XON, its next XOFF
    /// for another cause, or the pause's expiry (quanta × 512 bit times, IEEE 802.1Qbb)
    /// when neither came. A port waits for `cause` from `time_ns` to `until_ns` (between
    /// two XOFFs with this cause it may have been resumed for a while).
    pub until_ns: u64,
    /// Latest XOFF on this edge with this cause, ns (a pause refreshed while the cause
    /// lasts; the same edge appears once per cause it had).
    pub last_ns: u64,
    /// The port that sent PAUSE (ingress side of the congested node).
    pub sender: PortRef,
    /// The egress port it paused (upstream neighbour).
    pub paused: PortRef,
    /// What the paused port was made to wait for: the egress port of the sender's node
    /// holding most of the pausing ingress's buffer (the sender itself for a host's XOFF).
    pub cause: PortRef,
    /// Priority.
    pub priority: u8,
}

/// One injected anomaly.
#[derive(Clone, Debug, Serialize)]
pub struct Anomaly {
    /// Index in the scenario's `[[fault]]` list.
    pub fault_index: usize,
    /// What it is.
    pub kind: AnomalyKind,
    /// Start, ns.
    pub start_ns: u64,
    /// End, ns (for bursts: when the last burst flow finished, or the run end).
    pub end_ns: u64,
    /// Nodes involved (the injecting host, the loop switches, the link ends...).
    pub nodes: Vec<NodeId>,
    /// The initial congestion point(s): egress ports where the anomaly starts.
    pub initial_ports: Vec<PortRef>,
    /// Ports forming the cyclic buffer dependency (routing loops).
    pub loop_ports: Vec<PortRef>,
    /// Flows that cause it (incast senders), by flow index.
    pub root_cause_flows: Vec<u32>,
    /// The workload whose flows cause it (incasts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<u32>,
    /// PFC spreading tree edges caused by this anomaly.
    pub pfc_spreading: Vec<SpreadEdge>,
    /// Every egress port paused by the spreading tree.
    pub paused_ports: Vec<PortRef>,
    /// Incasts: the peak of the incast's own bytes queued at each switch egress where they
    /// queued, bytes (what [`incast_congestion_points`] decided from).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub queue_peaks: Vec<(PortRef, u64)>,
    /// Human description.
    pub description: String,
}

/// An incast's own bytes queued at a switch egress make it a congestion point of the incast
/// when they peaked at no less than this (a few frames pass through any port that merges
/// two senders), bytes.
pub const INCAST_QUEUE_MIN_BYTES: u64 = 16 * 1024;

/// The initial congestion points of a labelled incast: the switch egress ports where its own
/// bytes built a queue — a peak of at least [`INCAST_QUEUE_MIN_BYTES`]: the receiver's ToR
/// port, and wherever several of its senders share a link (an oversubscribed uplink, an ECMP
/// collision) — every queue a victim can meet the incast in. The receiver's ToR port is one
/// only when it queued: where the senders' uplinks are the bottleneck, the traffic reaches
/// the receiver's port below its rate and the congestion is upstream. An incast that queued
/// nowhere keeps `receiver_ports` (where it would have).
pub fn incast_congestion_points(
    receiver_ports: &[PortRef],
    peaks: &[(PortRef, u64)],
) -> Vec<PortRef> {
    let threshold = INCAST_QUEUE_MIN_BYTES;
    let mut points: Vec<PortRef> = peaks
        .iter()
        .filter(|(_, peak)| *peak >= threshold)
        .map(|(port, _)| *port)
        .collect();
    if points.is_empty() {
        return receiver_ports.to_vec();
    }
    points.sort();
    points.dedup();
    points
}

/// How long after an anomaly's end its PFC effects are still attributed to it, ns.
pub const SPREAD_SLACK_NS: u64 = 500_000;

/// How long an XOFF of `quanta` pauses a link of `gbps`, ns (IEEE 802.1Qbb: a quantum is
/// 512 bit times).
fn pause_ns(quanta: u16, gbps: f64) -> u64 {
    if gbps > 0.0 {
        (f64::from(quanta) * 512.0 / gbps).ceil() as u64
    } else {
        // A port without a link (not in the topology) never resumes by expiry; only an
        // XON or a new XOFF ends its pause. Kept far from overflow when added to a time.
        u64::MAX / 4
    }
}

/// Fills `pfc_spreading` and `paused_ports` from the PFC log (XOFFs make the edges; XONs,
/// later XOFFs and expiry end their pauses).
pub fn compute_spreading(
    anomaly: &mut Anomaly,
    origins: &[NodeId],
    log: &[PfcEvent],
    topo: &FabricTopology,
) {
    let mut affected: BTreeSet<PortRef> = anomaly
        .initial_ports
        .iter()
        .chain(anomaly.loop_ports.iter())
        .copied()
        .collect();
    let mut seen_edges: BTreeMap<(PortRef, PortRef, u8, PortRef), usize> = BTreeMap::new();
    // Per (sender port, priority): the edge whose pause the sender's latest XOFF started.
    let mut open: BTreeMap<(PortRef, u8), usize> = BTreeMap::new();
    let gbps: BTreeMap<PortRef, f64> = topo
        .links
        .iter()
        .flat_map(|l| [(l.a, l.gbps), (l.b, l.gbps)])
        .collect();
    let mut paused = BTreeSet::new();
    let window_end = anomaly.end_ns.saturating_add(SPREAD_SLACK_NS);
    for event in log {
        if event.time_ns < anomaly.start_ns || event.time_ns > window_end {
            continue;
        }
        let from = PortRef {
            node: event.node,
            port: event.port,
        };
        // Whatever this frame is, the pause the sender's previous XOFF started ends here
        // for its cause: resumed (XON), or continued for another reason (a new XOFF; its
        // own edge, possibly the same one, takes over below).
        if let Some(at) = open.remove(&(from, event.priority)) {
            let edge = &mut anomaly.pfc_spreading[at];
            edge.until_ns = edge.until_ns.min(event.time_ns);
        }
        if event.quanta == 0 {
            continue;
        }
        let is_host = topo
            .nodes
            .get(event.node as usize)
            .is_some_and(|n| n.kind == NodeKind::Host);
        let sender = PortRef {
            node: event.node,
            port: event.port,
        };
        let cause = if is_host {
            origins.contains(&event.node).then_some(sender)
        } else {
            event
                .cause
                .map(|port| PortRef {
                    node: event.node,
                    port,
                })
                .filter(|cause| {
                    if affected.contains(cause) {
                        return true;
                    }
                    // An incast's own flows can build a queue before its receiver's port
                    // pauses anything (ECMP sends several senders down one aggregation
                    // link): a port whose queue they own when it makes its ingress pause
                    // is another initial congestion point of the incast.
                    let own =
                        anomaly.workload.is_some() && event.cause_workload == anomaly.workload;
                    if own {
                        anomaly.initial_ports.push(*cause);
                        affected.insert(*cause);
                    }
                    own
                })
        };
        let Some(cause) = cause else {
            continue;
        };
        let Some(peer) = topo.peer(sender) else {
            continue;
        };
        let until = event.time_ns.saturating_add(pause_ns(
            event.quanta,
            gbps.get(&sender).copied().unwrap_or(0.0),
        ));
        let at = match seen_edges.entry((sender, peer, event.priority, cause)) {
            std::collections::btree_map::Entry::Occupied(at) => {
                let edge = &mut anomaly.pfc_spreading[*at.get()];
                edge.last_ns = event.time_ns;
                edge.until_ns = until;
                *at.get()
            }
            std::collections::btree_map::Entry::Vacant(slot) => {
                slot.insert(anomaly.pfc_spreading.len());
                anomaly.pfc_spreading.push(SpreadEdge {
                    time_ns: event.time_ns,
                    until_ns: until,
                    last_ns: event.time_ns,
                    sender,
                    paused: peer,
                    cause,
                    priority: event.priority,
                });
                anomaly.pfc_spreading.len() - 1
            }
        };
        open.insert((from, event.priority), at);
        paused.insert(peer);
        affected.insert(peer);
    }
    anomaly.paused_ports = paused.into_iter().collect();
}
