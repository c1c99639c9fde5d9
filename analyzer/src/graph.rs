//! The heterogeneous wait-for provenance graph (HAWKEYE §3.5.1, Alg. 1).
//!
//! Nodes are egress ports and flows. Edges, all meaning "waits for":
//!
//! * **port → port** (Alg. 1 l.6-9): from a paused egress port `Pi` of switch `U` to each
//!   congested egress port `Pj` of the downstream switch `S`. The causality meter that
//!   relates them lives on `S`: it counts bytes per (ingress port, egress port) of `S`. The
//!   topology gives `peer(Pi) = (S, a)`, the port of `S` that receives what `Pi` sends, so
//!   `meter[Pi][Pj]` is `S`'s meter row `a → j`. Per epoch,
//!   `w = paused_num[Pi] · meter[a][j] / Σ_k meter[a][k] · qdepth[Pj]` with `qdepth` the mean
//!   queue depth over all packets enqueued at `Pj` (Alg. 1 l.4). `Pj` must be congested in
//!   that epoch (§3.5.1 "each downstream congested egress port"): paused itself, or with a
//!   mean queue depth of at least [`crate::DiagnoseOptions::congestion_queue_bytes`]. Depths
//!   are measured when packets leave, so for a paused `Pj` the bytes enqueued there while
//!   paused (still held when a storm or a deadlock froze it) bound `qdepth` from below. Weights
//!   are summed over epochs, so a pause in one epoch is never tied to a queue in another.
//! * **flow → port** (Alg. 1 l.12-14): weight = the flow's paused packets at the port.
//! * **port → flow** (Alg. 1 l.15-20): weight = the flow's contribution to contention at the
//!   port ([`crate::replay`]), summed over the epochs in which the port had local contention
//!   (its non-paused packets saw a mean queue of at least the congestion threshold).

use std::collections::{BTreeMap, BTreeSet};

use hawkmesh_wire::telemetry::{FiveTuple, PortRecord};
use hawkmesh_wire::topology::{NodeId, PortNo, PortRef};
use petgraph::stable_graph::{NodeIndex, StableDiGraph};

use crate::ingest::{FlowAgg, Incident};
use crate::model::GraphStats;
use crate::replay::{replay, ReplayFlow, ReplayMode};
use crate::DiagnoseOptions;

/// A node of the provenance graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GraphNode {
    /// An egress port.
    Port(PortRef),
    /// A flow.
    Flow(FiveTuple),
}

/// The three edge kinds of HAWKEYE Alg. 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    /// Paused port waits for a downstream congested port (PFC causality).
    PortPort,
    /// Flow paused at a port.
    FlowPort,
    /// Port waits for a flow to drain (contention; weight may be negative).
    PortFlow,
}

/// An edge with its weight.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GraphEdge {
    /// Kind.
    pub kind: EdgeKind,
    /// Weight.
    pub weight: f64,
}

/// Why a paused port has no (or fewer) outgoing port→port edges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PauseFollowUp {
    /// Epochs in which the port was paused.
    pub paused_epochs: usize,
    /// Paused epochs whose downstream switch sent no telemetry for that epoch.
    pub peer_unreported_epochs: usize,
    /// Paused epochs in which the downstream switch recorded no traffic from this port
    /// (held behind the pause all epoch, or the switch frozen altogether): its newest
    /// earlier epoch with this port's traffic stood in.
    pub held_epochs: usize,
    /// Paused epochs in which the downstream switch's meter shows no traffic from this port.
    pub no_meter_epochs: usize,
    /// Paused epochs in which no metered downstream port was congested.
    pub no_congested_epochs: usize,
    /// Of the paused epochs without a metered congested downstream port, those in which
    /// the downstream switch had other congested egress ports, taken as what the port
    /// waited for.
    pub unmetered_epochs: usize,
    /// Paused epochs (the upstream switch's latest, with the pause in force at collection)
    /// that the downstream switch did not report but later epochs of it did: its latest
    /// epoch stood in.
    pub current_epochs: usize,
}

/// Window totals of one egress port.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PortSummary {
    /// Packets enqueued.
    pub packets: u64,
    /// Paused packets.
    pub paused: u64,
    /// Queue-depth sum over all packets, bytes.
    pub queue_depth_sum: u64,
    /// Queue-depth sum over non-paused packets, bytes.
    pub unpaused_queue_depth_sum: u64,
    /// Line rate of the port's link, Gbit/s.
    pub line_gbps: f64,
    /// The node at the other end.
    pub peer: Option<PortRef>,
    /// Whether the peer is a host.
    pub peer_is_host: bool,
    /// Epochs with local contention (replayed).
    pub contention_epochs: usize,
    /// Start of the earliest / latest epoch with local contention, ns.
    pub first_contention_epoch: Option<u64>,
    /// See `first_contention_epoch`.
    pub last_contention_epoch: Option<u64>,
    /// Start of the earliest / latest epoch in which the port was paused: paused packets,
    /// the end of a pause the switch reported (port status), the switch's latest epoch for
    /// a pause in force at collection.
    pub first_paused_epoch: Option<u64>,
    /// See `first_paused_epoch`.
    pub last_paused_epoch: Option<u64>,
    /// Every epoch (start, ns) in which the port was paused, by the same rules.
    pub paused_epochs: BTreeSet<u64>,
    /// The port was paused by PFC when its switch collected (port status).
    pub paused_at_collection: bool,
    /// The latest enqueue of a contributor in an epoch with local contention, ns (when the
    /// records carry timing).
    pub last_contention_ns: Option<u64>,
    /// The end of the latest pause the switch reported for the port (port status; in the
    /// future for a pause in force at collection), ns.
    pub pause_end_ns: Option<u64>,
    /// Of those, epochs replayed without flow timing.
    pub untimed_epochs: usize,
    /// Why pauses could not be followed downstream.
    pub pause: PauseFollowUp,
    /// Mean packet size seen at the port, bytes.
    pub mean_packet_bytes: f64,
}

impl PortSummary {
    fn note_paused(&mut self, epoch_start: u64) {
        self.first_paused_epoch = Some(
            self.first_paused_epoch
                .map_or(epoch_start, |e| e.min(epoch_start)),
        );
        self.last_paused_epoch = self.last_paused_epoch.max(Some(epoch_start));
        self.paused_epochs.insert(epoch_start);
    }

    /// Mean queue depth over non-paused packets, bytes.
    pub fn mean_unpaused_depth(&self) -> f64 {
        let n = self.packets.saturating_sub(self.paused);
        if n == 0 {
            0.0
        } else {
            self.unpaused_queue_depth_sum as f64 / n as f64
        }
    }
    /// Mean queue depth over all packets, bytes.
    pub fn mean_depth(&self) -> f64 {
        if self.packets == 0 {
            0.0
        } else {
            self.queue_depth_sum as f64 / self.packets as f64
        }
    }
}

/// One flow's window totals at one port.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FlowAtPort {
    /// Packets.
    pub packets: u64,
    /// Paused packets.
    pub paused: u64,
    /// Queue-depth sum over non-paused packets.
    pub queue_depth_sum: u64,
    /// Highest rate within its enqueue window over the epochs, Gbit/s, and that window's
    /// length in ns (for the burst check); `None` without timing.
    pub peak_window: Option<(f64, u64)>,
}

/// One flow node: its index and its slice of per-port totals in [`FlowTable::at`].
#[derive(Clone, Copy, Debug)]
struct FlowEntry {
    flow: FiveTuple,
    node: NodeIndex,
    start: u32,
    end: u32,
}

/// Every flow of the incident, sorted by 5-tuple, with its totals per port (ports ascending).
/// Built from sorted input in one pass; looked up by binary search.
#[derive(Clone, Debug, Default)]
pub struct FlowTable {
    entries: Vec<FlowEntry>,
    at: Vec<(PortRef, FlowAtPort)>,
}

impl FlowTable {
    fn find(&self, flow: &FiveTuple) -> Option<&FlowEntry> {
        self.entries
            .binary_search_by(|entry| entry.flow.cmp(flow))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// The ports a flow has records at, with its totals there.
    pub fn ports(&self, flow: &FiveTuple) -> &[(PortRef, FlowAtPort)] {
        self.find(flow)
            .map(|e| &self.at[e.start as usize..e.end as usize])
            .unwrap_or(&[])
    }

    /// Number of flows.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no flows.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every flow (ascending) with its ports.
    pub fn iter(&self) -> impl Iterator<Item = (FiveTuple, &[(PortRef, FlowAtPort)])> + '_ {
        self.entries
            .iter()
            .map(|e| (e.flow, &self.at[e.start as usize..e.end as usize]))
    }
}

/// The flow records of one egress port in one epoch, with that epoch's packet size.
struct FlowRun<'a> {
    port: PortNo,
    records: &'a [FlowAgg],
    line_gbps: f64,
    packet_bytes: f64,
}

impl FlowAtPort {
    /// Adds one epoch's record; the peak rate uses the epoch's mean packet size.
    fn add(&mut self, record: &FlowAgg, line_gbps: f64, packet_bytes: f64) {
        self.packets += record.packets;
        self.paused += record.paused;
        self.queue_depth_sum += record.queue_depth_sum;
        if let Some((first, last)) = record.window {
            let serialisation = if line_gbps > 0.0 {
                packet_bytes * 8.0 / line_gbps
            } else {
                1.0
            };
            let length = (f64::from(last - first) + serialisation).max(1.0);
            let rate = record.packets as f64 * packet_bytes * 8.0 / length;
            let better = self.peak_window.is_none_or(|(r, _)| rate > r);
            if record.packets > 1 && better {
                self.peak_window = Some((rate, length as u64));
            }
        }
    }

    /// Mean queue depth over non-paused packets, bytes.
    pub fn mean_unpaused_depth(&self) -> f64 {
        let n = self.packets.saturating_sub(self.paused);
        if n == 0 {
            0.0
        } else {
            self.queue_depth_sum as f64 / n as f64
        }
    }
}

/// The provenance graph and the per-node facts the diagnosis reads.
#[derive(Debug, Default)]
pub struct ProvenanceGraph {
    /// The petgraph store of all nodes and edges.
    pub graph: StableDiGraph<GraphNode, GraphEdge>,
    /// Port node indices.
    pub port_nodes: BTreeMap<PortRef, NodeIndex>,
    /// Flow nodes and their window totals per port.
    pub flows: FlowTable,
    /// Window totals per port.
    pub ports: BTreeMap<PortRef, PortSummary>,
    /// Port→port edges per source port, heaviest first.
    pub port_out: BTreeMap<PortRef, Vec<(PortRef, f64)>>,
    /// The epochs (start, ns) in which each port→port edge had weight.
    pub port_edge_epochs: BTreeMap<(PortRef, PortRef), BTreeSet<u64>>,
    /// Port→flow edges per port, largest contribution first.
    pub port_flows: BTreeMap<PortRef, Vec<(FiveTuple, f64)>>,
    /// Counts.
    pub stats: GraphStats,
}

/// The epoch a pause reported in the port status belongs to: the switch's latest reported
/// epoch for a pause in force at collection, else the epoch it ended in (clamped to the
/// reported epochs `first ..= latest`).
fn status_epoch(in_force: bool, until_ns: u64, epoch_ns: u64, first: u64, latest: u64) -> u64 {
    if in_force {
        latest
    } else {
        (until_ns / epoch_ns * epoch_ns).clamp(first, latest)
    }
}

/// Whether `port` is known paused in the epoch starting at `start` although no paused
/// packet may be counted there: paused when the polling packet passed or in force when its
/// switch collected (from the switch's latest reported epoch on — a switch frozen behind a
/// deadlock or a storm may record nothing in the latest epochs), or with a reported pause
/// that ended in that epoch (nothing was enqueued while it lasted — everything upstream
/// was already held — yet the port waited for its downstream until then).
fn known_paused(
    incident: &Incident,
    paused_at_poll: &BTreeSet<PortRef>,
    port: PortRef,
    start: u64,
) -> bool {
    let Some(data) = incident.switches.get(&port.node) else {
        return false;
    };
    let (Some(first), Some(latest)) = (
        data.epochs.keys().next().copied(),
        data.epochs.keys().next_back().copied(),
    ) else {
        return false;
    };
    (start >= latest && paused_at_poll.contains(&port))
        || data
            .pause_status
            .get(&port.port)
            .is_some_and(|(in_force, until)| {
                !*in_force && status_epoch(false, *until, incident.epoch_ns, first, latest) == start
            })
}

/// The egress ports of `downstream_in`'s switch, other than `downstream_in` itself (traffic
/// does not turn back where it came in outside a routing loop) unless it is the only one,
/// that are congested in the epoch starting at `start`: paused packets or a mean queue of at least `threshold` in
/// that epoch's record, or known paused ([`known_paused`]). Each with its queue depth
/// (at least `threshold` for a known pause).
fn congested_egress(
    incident: &Incident,
    paused_at_poll: &BTreeSet<PortRef>,
    downstream_in: PortRef,
    start: u64,
    threshold: f64,
) -> Vec<(PortRef, f64)> {
    let epoch = incident
        .switches
        .get(&downstream_in.node)
        .and_then(|data| data.epochs.get(&start));
    let mut out = Vec::new();
    let mut back = None;
    for port in incident.switch_ports(downstream_in.node) {
        let to = PortRef {
            node: downstream_in.node,
            port,
        };
        let mut depth = 0.0;
        let mut congested = false;
        if let Some(record) = epoch.and_then(|e| e.ports.get(&port)) {
            if record.packet_count > 0 {
                depth = record.queue_depth_sum_bytes as f64 / f64::from(record.packet_count);
            }
            if record.paused_packet_count > 0 {
                let bytes = epoch
                    .and_then(|e| e.egress_bytes.get(&port))
                    .copied()
                    .unwrap_or(0) as f64;
                depth = depth.max(
                    bytes * f64::from(record.paused_packet_count) / f64::from(record.packet_count),
                );
                congested = true;
            }
            congested |= depth >= threshold;
        }
        if known_paused(incident, paused_at_poll, to, start) {
            depth = depth.max(threshold);
            congested = true;
        }
        if congested && depth > 0.0 {
            if port == downstream_in.port {
                back = Some((to, depth));
            } else {
                out.push((to, depth));
            }
        }
    }
    if out.is_empty() {
        // Only the port it arrived by is congested: traffic turning back where it came in
        // is a two-switch routing loop's own edge (loop-free routing never makes that
        // U-turn), so it is what the pause waits for.
        out.extend(back);
    }
    out
}

/// The egress ports the downstream switch's data plane sent a polling packet that came
/// in by `downstream_in` out of for PFC causality (HAWKEYE §3.4, Fig. 6: the ingress's
/// held fanout ∩ the paused ports), still paused at collection: the ports whose pause
/// holds what that ingress buffered, as the switch itself tracked it — including the port
/// back toward where it came in, where a routing loop turns its traffic around. It stays
/// right when the causality meter has nothing for the ingress (its traffic froze before
/// the ring's epochs). Each with a depth of at least `threshold`.
fn pfc_branch_targets(
    incident: &Incident,
    downstream_in: PortRef,
    threshold: f64,
) -> Vec<(PortRef, f64)> {
    let Some(data) = incident.switches.get(&downstream_in.node) else {
        return Vec::new();
    };
    let mut ports: BTreeSet<PortNo> = BTreeSet::new();
    for polling in data
        .polling
        .iter()
        .filter(|p| p.ingress_port == downstream_in.port)
    {
        for egress in polling.egress.iter().filter(|e| e.reason.pfc_causality()) {
            let in_force = data
                .pause_status
                .get(&egress.port)
                .is_some_and(|(in_force, _)| *in_force);
            if in_force {
                ports.insert(egress.port);
            }
        }
    }
    ports
        .into_iter()
        .map(|port| {
            let to = PortRef {
                node: downstream_in.node,
                port,
            };
            let depth = data
                .epochs
                .values()
                .next_back()
                .and_then(|e| e.ports.get(&port))
                .filter(|r| r.packet_count > 0)
                .map(|r| r.queue_depth_sum_bytes as f64 / f64::from(r.packet_count))
                .unwrap_or(0.0);
            (to, depth.max(threshold))
        })
        .collect()
}

impl ProvenanceGraph {
    fn port_node(&mut self, port: PortRef) -> NodeIndex {
        if let Some(index) = self.port_nodes.get(&port) {
            return *index;
        }
        let index = self.graph.add_node(GraphNode::Port(port));
        self.port_nodes.insert(port, index);
        index
    }

    /// Node index of a flow.
    pub fn flow_index(&self, flow: &FiveTuple) -> Option<NodeIndex> {
        self.flows.find(flow).map(|entry| entry.node)
    }

    /// A flow's window totals at one port.
    pub fn flow_at(&self, flow: FiveTuple, port: PortRef) -> Option<&FlowAtPort> {
        let ports = self.flow_ports(flow);
        ports
            .binary_search_by(|(p, _)| p.cmp(&port))
            .ok()
            .map(|i| &ports[i].1)
    }

    /// The ports a flow has records at (ascending) with its totals there.
    pub fn flow_ports(&self, flow: FiveTuple) -> &[(PortRef, FlowAtPort)] {
        self.flows.ports(&flow)
    }

    /// Outgoing port→port edges of a port, heaviest first.
    pub fn port_edges(&self, port: PortRef) -> &[(PortRef, f64)] {
        self.port_out.get(&port).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The epochs (start, ns) in which the port→port edge `from → to` had weight (empty
    /// when there is no such edge).
    pub fn edge_epochs(&self, from: PortRef, to: PortRef) -> Option<&BTreeSet<u64>> {
        self.port_edge_epochs.get(&(from, to))
    }

    /// Port→flow edges of a port, largest first.
    pub fn contributions(&self, port: PortRef) -> &[(FiveTuple, f64)] {
        self.port_flows.get(&port).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Paused packets of a flow at a port (the flow→port edge weight).
    pub fn paused_at(&self, flow: FiveTuple, port: PortRef) -> u64 {
        self.flow_at(flow, port).map(|f| f.paused).unwrap_or(0)
    }

    /// Builds the graph from an incident (HAWKEYE Alg. 1).
    pub fn build(incident: &Incident, options: &DiagnoseOptions) -> ProvenanceGraph {
        let mut graph = ProvenanceGraph::default();
        let epoch_ns = incident.epoch_ns;
        let threshold = options.congestion_queue_bytes as f64;

        // Alg. 1 l.2-5: port nodes and per-port totals.
        for (switch, data) in &incident.switches {
            for (start, epoch) in &data.epochs {
                for (port_no, record) in &epoch.ports {
                    let port = PortRef {
                        node: *switch,
                        port: *port_no,
                    };
                    graph.port_node(port);
                    let summary = graph.ports.entry(port).or_default();
                    if record.paused_packet_count > 0 {
                        summary.note_paused(*start);
                    }
                    summary.packets += u64::from(record.packet_count);
                    summary.paused += u64::from(record.paused_packet_count);
                    summary.queue_depth_sum += record.queue_depth_sum_bytes;
                    summary.unpaused_queue_depth_sum += record.unpaused_queue_depth_sum_bytes;
                }
                // Flows are grouped by egress port: touch each port once per run.
                let mut previous = None;
                for flow in &epoch.flows {
                    if previous == Some(flow.egress_port) {
                        continue;
                    }
                    previous = Some(flow.egress_port);
                    let port = PortRef {
                        node: *switch,
                        port: flow.egress_port,
                    };
                    graph.port_node(port);
                    graph.ports.entry(port).or_default();
                }
            }
        }
        // Port status at collection: a pause in force belongs to the switch's latest epoch,
        // even when nothing could be enqueued behind it any more.
        for (switch, data) in &incident.switches {
            let (Some(first), Some(latest)) = (
                data.epochs.keys().next().copied(),
                data.epochs.keys().next_back().copied(),
            ) else {
                continue;
            };
            for (port_no, (in_force, until_ns)) in &data.pause_status {
                let port = PortRef {
                    node: *switch,
                    port: *port_no,
                };
                graph.port_node(port);
                let summary = graph.ports.entry(port).or_default();
                summary.note_paused(status_epoch(*in_force, *until_ns, epoch_ns, first, latest));
                summary.paused_at_collection |= *in_force;
                summary.pause_end_ns = summary.pause_end_ns.max(Some(*until_ns));
            }
        }
        let ports: Vec<PortRef> = graph.ports.keys().copied().collect();
        for port in ports {
            let peer = incident.peer(port);
            let bytes: u64 = incident
                .switches
                .get(&port.node)
                .map(|s| {
                    s.epochs
                        .values()
                        .map(|e| e.egress_bytes.get(&port.port).copied().unwrap_or(0))
                        .sum()
                })
                .unwrap_or(0);
            if let Some(summary) = graph.ports.get_mut(&port) {
                summary.peer = peer.map(|(p, _)| p);
                summary.line_gbps = peer.map(|(_, g)| g).unwrap_or(0.0);
                summary.peer_is_host = peer.is_some_and(|(p, _)| incident.is_host(p.node));
                summary.mean_packet_bytes = if summary.packets > 0 && bytes > 0 {
                    bytes as f64 / summary.packets as f64
                } else {
                    options.default_packet_bytes as f64
                };
            }
        }

        // Ports the data plane found paused when a polling packet passed (the PFC bit of
        // its egress decision, HAWKEYE §3.4) or the agent found paused when it collected
        // (port status). A pause that began just before the poll may
        // not have held any packet yet, so no epoch counts it: in the switch's latest epoch
        // such a port is treated as paused (one packet) so its wait-for edges exist.
        let paused_at_poll: BTreeSet<PortRef> = incident
            .switches
            .iter()
            .flat_map(|(switch, data)| {
                data.polling
                    .iter()
                    .flat_map(|p| p.egress.iter())
                    .filter(|e| e.reason.pfc_causality())
                    .map(|e| e.port)
                    .chain(
                        data.pause_status
                            .iter()
                            .filter(|(_, (in_force, _))| *in_force)
                            .map(|(port, _)| *port),
                    )
                    .map(|port| PortRef {
                        node: *switch,
                        port,
                    })
            })
            .collect();

        // Alg. 1 l.6-9: port→port wait-for edges, per epoch.
        let mut port_weights: BTreeMap<(PortRef, PortRef), f64> = BTreeMap::new();
        let mut edge_epochs: BTreeMap<(PortRef, PortRef), BTreeSet<u64>> = BTreeMap::new();
        for (switch, data) in &incident.switches {
            let paused_here = |start: u64, port: PortNo| {
                known_paused(
                    incident,
                    &paused_at_poll,
                    PortRef {
                        node: *switch,
                        port,
                    },
                    start,
                )
            };
            for (start, epoch) in &data.epochs {
                let held: BTreeSet<PortNo> = paused_at_poll
                    .iter()
                    .filter(|p| p.node == *switch)
                    .map(|p| p.port)
                    .chain(data.pause_status.keys().copied())
                    .filter(|port| !epoch.ports.contains_key(port) && paused_here(*start, *port))
                    .collect();
                let candidates = epoch
                    .ports
                    .iter()
                    .map(|(port_no, record)| (*port_no, record.paused_packet_count))
                    .chain(held.into_iter().map(|port| (port, 0)));
                for (port_no, paused_count) in candidates {
                    let upstream = PortRef {
                        node: *switch,
                        port: port_no,
                    };
                    let paused_packets = if paused_count == 0 && paused_here(*start, port_no) {
                        1
                    } else {
                        paused_count
                    };
                    if paused_packets == 0 {
                        continue;
                    }
                    let mut follow = PauseFollowUp {
                        paused_epochs: 1,
                        ..PauseFollowUp::default()
                    };
                    match incident.peer(upstream) {
                        Some((downstream_in, _)) if !incident.is_host(downstream_in.node) => {
                            let down_switch = incident.switches.get(&downstream_in.node);
                            let own = down_switch.and_then(|s| s.epochs.get(start));
                            let from_upstream = |e: &&crate::ingest::EpochData| {
                                e.meters
                                    .get(&downstream_in.port)
                                    .is_some_and(|rows| rows.iter().any(|(_, b)| *b > 0))
                            };
                            // A port paused the whole epoch sent nothing into the downstream
                            // switch in it (nor did anything else, if that switch froze
                            // behind a deadlock or a storm): what it waits for is what its
                            // traffic left in the downstream's buffers — the downstream's
                            // newest earlier epoch with traffic from it.
                            let held = match (own, down_switch) {
                                (Some(e), _) if from_upstream(&e) => None,
                                (_, Some(s)) => s
                                    .epochs
                                    .range(..*start)
                                    .rev()
                                    .map(|(_, e)| e)
                                    .find(from_upstream),
                                _ => None,
                            };
                            if held.is_some() {
                                follow.held_epochs = 1;
                            }
                            // A pause in force now, in the upstream switch's latest epoch
                            // (its ring stopped there: frozen behind the pause), while the
                            // downstream switch kept recording later epochs: what the port
                            // waits for is what the downstream holds now — its latest epoch.
                            // Frozen and live rings stop at different epochs; the pause
                            // spans them.
                            let mut down_start = *start;
                            let current = (held.is_none() && own.is_none())
                                .then(|| {
                                    let in_force_now = paused_at_poll.contains(&upstream)
                                        && data.epochs.keys().next_back() == Some(start);
                                    down_switch
                                        .and_then(|s| s.epochs.iter().next_back())
                                        .filter(|(later, _)| in_force_now && **later > *start)
                                })
                                .flatten();
                            if let Some((later, _)) = current {
                                down_start = *later;
                                follow.current_epochs = 1;
                            }
                            match held.or(own).or(current.map(|(_, e)| e)) {
                                None => follow.peer_unreported_epochs = 1,
                                Some(down) => {
                                    let rows = down
                                        .meters
                                        .get(&downstream_in.port)
                                        .map(Vec::as_slice)
                                        .unwrap_or(&[]);
                                    let meter_sum: u64 = rows.iter().map(|(_, b)| *b).sum();
                                    if meter_sum == 0 {
                                        follow.no_meter_epochs = 1;
                                    } else {
                                        let mut any = false;
                                        for (egress, bytes) in rows {
                                            let to = PortRef {
                                                node: downstream_in.node,
                                                port: *egress,
                                            };
                                            // A downstream port known paused now (port
                                            // status, the polling verdict) is congested
                                            // even when none of its packets was counted
                                            // paused or has left to measure a depth: a
                                            // frozen queue whose packets were all enqueued
                                            // before its pause, or whose last recorded
                                            // epoch predates the congestion.
                                            let paused_now = known_paused(
                                                incident,
                                                &paused_at_poll,
                                                to,
                                                down_start,
                                            );
                                            let idle = PortRecord {
                                                port: *egress,
                                                packet_count: 0,
                                                paused_packet_count: 0,
                                                queue_depth_sum_bytes: 0,
                                                unpaused_queue_depth_sum_bytes: 0,
                                                xon_count: 0,
                                            };
                                            let target = match down.ports.get(egress) {
                                                Some(target) => target,
                                                None if paused_now => &idle,
                                                None => continue,
                                            };
                                            let mut depth = if target.packet_count == 0 {
                                                0.0
                                            } else {
                                                target.queue_depth_sum_bytes as f64
                                                    / f64::from(target.packet_count)
                                            };
                                            // Queue depths are measured when packets leave;
                                            // packets held behind a pause (a storm, a frozen
                                            // loop) have not left, yet they are queued: the
                                            // bytes enqueued while paused bound the queue
                                            // from below.
                                            if target.paused_packet_count > 0
                                                && target.packet_count > 0
                                            {
                                                let bytes = down
                                                    .egress_bytes
                                                    .get(egress)
                                                    .copied()
                                                    .unwrap_or(0)
                                                    as f64;
                                                let held = bytes
                                                    * f64::from(target.paused_packet_count)
                                                    / f64::from(target.packet_count);
                                                depth = depth.max(held);
                                            }
                                            if paused_now {
                                                depth = depth.max(threshold);
                                            }
                                            let congested = target.paused_packet_count > 0
                                                || depth >= threshold;
                                            if !congested {
                                                continue;
                                            }
                                            let weight = f64::from(paused_packets)
                                                * (*bytes as f64 / meter_sum as f64)
                                                * depth;
                                            if weight > 0.0 {
                                                any = true;
                                                *port_weights.entry((upstream, to)).or_default() +=
                                                    weight;
                                                edge_epochs
                                                    .entry((upstream, to))
                                                    .or_default()
                                                    .insert(*start);
                                            }
                                        }
                                        if !any {
                                            follow.no_congested_epochs = 1;
                                        }
                                    }
                                }
                            }
                            // The meter ties this pause to nothing congested downstream —
                            // its traffic never got in (held upstream since before the
                            // ring's epochs), or what got in went elsewhere. The downstream
                            // switch pauses an ingress only because its buffer fills, so
                            // if any of its egress ports is congested now, that is what
                            // this port waits for: an edge to each, weighted evenly
                            // (`unmetered_epochs`). Only a switch with no congested egress
                            // at all pauses out of nothing (switch PFC injection).
                            let unlinked =
                                follow.no_meter_epochs > 0 || follow.no_congested_epochs > 0;
                            if unlinked {
                                let branch = pfc_branch_targets(incident, downstream_in, threshold);
                                let targets = if branch.is_empty() {
                                    congested_egress(
                                        incident,
                                        &paused_at_poll,
                                        downstream_in,
                                        down_start,
                                        threshold,
                                    )
                                } else {
                                    branch
                                };
                                let count = targets.len() as f64;
                                for (to, depth) in targets {
                                    let weight = f64::from(paused_packets) * depth / count;
                                    if weight > 0.0 {
                                        follow.unmetered_epochs = 1;
                                        *port_weights.entry((upstream, to)).or_default() += weight;
                                        edge_epochs
                                            .entry((upstream, to))
                                            .or_default()
                                            .insert(*start);
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                    if let Some(summary) = graph.ports.get_mut(&upstream) {
                        summary.pause.paused_epochs += follow.paused_epochs;
                        summary.pause.peer_unreported_epochs += follow.peer_unreported_epochs;
                        summary.pause.held_epochs += follow.held_epochs;
                        summary.pause.no_meter_epochs += follow.no_meter_epochs;
                        summary.pause.no_congested_epochs += follow.no_congested_epochs;
                        summary.pause.unmetered_epochs += follow.unmetered_epochs;
                        summary.pause.current_epochs += follow.current_epochs;
                    }
                }
            }
        }
        // Drop wait-for edges that carry a negligible share of the upstream port's strongest
        // one (a few stray bytes in a meter row must not become a PFC path of their own).
        let mut strongest: BTreeMap<PortRef, f64> = BTreeMap::new();
        for ((from, _), weight) in &port_weights {
            let entry = strongest.entry(*from).or_default();
            *entry = entry.max(*weight);
        }
        port_weights.retain(|(from, _), weight| {
            *weight >= options.min_port_edge_share * strongest.get(from).copied().unwrap_or(0.0)
        });
        for ((from, to), weight) in &port_weights {
            let a = graph.port_node(*from);
            let b = graph.port_node(*to);
            graph.ports.entry(*to).or_default();
            graph.graph.add_edge(
                a,
                b,
                GraphEdge {
                    kind: EdgeKind::PortPort,
                    weight: *weight,
                },
            );
            graph
                .port_out
                .entry(*from)
                .or_default()
                .push((*to, *weight));
        }
        for edges in graph.port_out.values_mut() {
            edges.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        }
        edge_epochs.retain(|edge, _| port_weights.contains_key(edge));
        graph.port_edge_epochs = edge_epochs;
        graph.stats.port_port_edges = port_weights.len();

        // Alg. 1 l.10-14: flow nodes and flow→port edges; l.15-20: port→flow edges.
        let mut contributions: BTreeMap<PortRef, BTreeMap<FiveTuple, f64>> = BTreeMap::new();
        let mut replay_input: Vec<ReplayFlow> = Vec::new();
        // Per-(flow, port) window totals are accumulated per switch in a table small enough
        // to stay in cache, then moved into one sorted list.
        let mut all_flow_ports: Vec<((FiveTuple, PortRef), FlowAtPort)> = Vec::new();
        let mut runs: Vec<FlowRun<'_>> = Vec::new();
        let mut heads: Vec<usize> = Vec::new();
        for (switch, data) in &incident.switches {
            runs.clear();
            for (start, epoch) in &data.epochs {
                let mut index = 0;
                while index < epoch.flows.len() {
                    let port_no = epoch.flows[index].egress_port;
                    let end = index
                        + epoch.flows[index..]
                            .iter()
                            .take_while(|f| f.egress_port == port_no)
                            .count();
                    let records = &epoch.flows[index..end];
                    index = end;
                    let port = PortRef {
                        node: *switch,
                        port: port_no,
                    };
                    let (line_gbps, packet_bytes) = graph
                        .ports
                        .get(&port)
                        .map(|s| (s.line_gbps, s.mean_packet_bytes))
                        .unwrap_or((0.0, options.default_packet_bytes as f64));
                    let epoch_packet_bytes =
                        match (epoch.egress_bytes.get(&port_no), epoch.ports.get(&port_no)) {
                            (Some(bytes), Some(record)) if record.packet_count > 0 => {
                                *bytes as f64 / f64::from(record.packet_count)
                            }
                            _ => packet_bytes,
                        };
                    runs.push(FlowRun {
                        port: port_no,
                        records,
                        line_gbps,
                        packet_bytes: epoch_packet_bytes,
                    });
                    // Local contention gate: non-paused packets met a queue.
                    let (unpaused, unpaused_depth_sum) = match epoch.ports.get(&port_no) {
                        Some(record) => (
                            u64::from(record.packet_count - record.paused_packet_count),
                            record.unpaused_queue_depth_sum_bytes,
                        ),
                        None => (
                            records.iter().map(|r| r.unpaused()).sum(),
                            records.iter().map(|r| r.queue_depth_sum).sum(),
                        ),
                    };
                    if unpaused == 0 || (unpaused_depth_sum as f64 / unpaused as f64) < threshold {
                        continue;
                    }
                    replay_input.clear();
                    replay_input.extend(records.iter().map(|r| {
                        let n = r.unpaused();
                        ReplayFlow {
                            packets: n as f64,
                            window: r.window,
                            mean_depth_packets: if n == 0 {
                                0.0
                            } else {
                                r.queue_depth_sum as f64 / n as f64 / epoch_packet_bytes
                            },
                        }
                    }));
                    let bins = options.replay_bins(epoch_ns);
                    let service = line_gbps / 8.0 / epoch_packet_bytes;
                    let result = replay(&replay_input, epoch_ns, service, bins);
                    graph.stats.replayed_port_epochs += 1;
                    // An epoch has contention when some flow contributed to the queue, not
                    // merely when a lone flow met one.
                    let contended = result
                        .contributions
                        .iter()
                        .any(|c| *c >= options.min_contribution_packets);
                    if let Some(summary) = graph.ports.get_mut(&port) {
                        summary.contention_epochs += 1;
                        if contended {
                            summary.first_contention_epoch = Some(
                                summary
                                    .first_contention_epoch
                                    .map_or(*start, |e| e.min(*start)),
                            );
                            summary.last_contention_epoch =
                                summary.last_contention_epoch.max(Some(*start));
                            let last_enqueue = records
                                .iter()
                                .zip(&result.contributions)
                                .filter(|(_, c)| **c >= options.min_contribution_packets)
                                .filter_map(|(r, _)| {
                                    r.window.map(|(_, last)| start + u64::from(last))
                                })
                                .max();
                            summary.last_contention_ns =
                                summary.last_contention_ns.max(last_enqueue);
                        }
                        if result.mode == ReplayMode::Untimed {
                            summary.untimed_epochs += 1;
                        }
                    }
                    let per_flow = contributions.entry(port).or_default();
                    for (record, contribution) in records.iter().zip(&result.contributions) {
                        *per_flow.entry(record.flow).or_default() += contribution;
                    }
                }
            }
            // Window totals per (flow, port): every epoch's records are sorted by
            // (egress port, flow), so a k-way merge of the epochs' runs of one port adds them
            // up without any hashing.
            runs.sort_by_key(|run| run.port);
            for group in runs.chunk_by(|a, b| a.port == b.port) {
                let port = PortRef {
                    node: *switch,
                    port: group[0].port,
                };
                heads.clear();
                heads.resize(group.len(), 0);
                loop {
                    let mut next: Option<FiveTuple> = None;
                    for (run, head) in group.iter().zip(&heads) {
                        if let Some(record) = run.records.get(*head) {
                            if next.is_none_or(|flow| record.flow < flow) {
                                next = Some(record.flow);
                            }
                        }
                    }
                    let Some(flow) = next else {
                        break;
                    };
                    let mut totals = FlowAtPort::default();
                    for (run, head) in group.iter().zip(heads.iter_mut()) {
                        while let Some(record) = run.records.get(*head).filter(|r| r.flow == flow) {
                            totals.add(record, run.line_gbps, run.packet_bytes);
                            *head += 1;
                        }
                    }
                    all_flow_ports.push(((flow, port), totals));
                }
            }
        }
        // Flow nodes in a deterministic order, then flow→port edges. Sorted by (flow, port),
        // each flow's records are consecutive: the flow table is built without look-ups.
        all_flow_ports.sort_unstable_by_key(|entry| entry.0);
        graph.flows.at.reserve(all_flow_ports.len());
        for ((flow, port), totals) in all_flow_ports {
            let flow_index = match graph.flows.entries.last_mut() {
                Some(entry) if entry.flow == flow => {
                    entry.end += 1;
                    entry.node
                }
                _ => {
                    let node = graph.graph.add_node(GraphNode::Flow(flow));
                    let start = graph.flows.at.len() as u32;
                    graph.flows.entries.push(FlowEntry {
                        flow,
                        node,
                        start,
                        end: start + 1,
                    });
                    node
                }
            };
            let paused = totals.paused;
            graph.flows.at.push((port, totals));
            if paused > 0 {
                let port_index = graph.port_node(port);
                graph.graph.add_edge(
                    flow_index,
                    port_index,
                    GraphEdge {
                        kind: EdgeKind::FlowPort,
                        weight: paused as f64,
                    },
                );
                graph.stats.flow_port_edges += 1;
            }
        }
        for (port, flows) in contributions {
            let port_index = graph.port_node(port);
            let mut edges: Vec<(FiveTuple, f64)> = flows
                .into_iter()
                .filter(|(_, w)| w.abs() >= options.min_contribution_packets)
                .collect();
            edges.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            for (flow, weight) in &edges {
                let Some(flow_index) = graph.flow_index(flow) else {
                    continue;
                };
                graph.graph.add_edge(
                    port_index,
                    flow_index,
                    GraphEdge {
                        kind: EdgeKind::PortFlow,
                        weight: *weight,
                    },
                );
            }
            graph.stats.port_flow_edges += edges.len();
            if !edges.is_empty() {
                graph.port_flows.insert(port, edges);
            }
        }
        graph.stats.port_nodes = graph.port_nodes.len();
        graph.stats.flow_nodes = graph.flows.entries.len();
        graph
    }

    /// Switches that have at least one port node.
    pub fn switches(&self) -> Vec<NodeId> {
        let mut out: Vec<NodeId> = self.port_nodes.keys().map(|p| p.node).collect();
        out.dedup();
        out
    }
}
