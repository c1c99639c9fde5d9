//! Signature diagnosis (HAWKEYE §3.5.2, Table 2, Alg. 2).
//!
//! The walk follows Alg. 2: for each port on the victim's path (l.35), if the victim is
//! paused there (`weight(f_v, p) > 0`, l.36) the PFC causality is traced along port→port
//! edges (`CheckPortNode`, l.24-34): a strongly connected set of ports is a cyclic buffer
//! dependency (l.26-29), a port without outgoing port→port edges is an initial congestion
//! point (l.30-32) whose port→flow edges decide between flow contention and PFC injection
//! (`AnalyzeFlowContention`, l.1-11). A port where the victim is not paused is checked for
//! normal flow contention (l.39-40).
//!
//! Table 2, as implemented (`G_P` = the port→port subgraph):
//!
//! | anomaly | signature |
//! |---|---|
//! | PFC backpressure (micro-burst incast) | a sink `p` of `G_P` reachable from the victim, with positive port→flow edges; micro-burst when the contributors' rate within their window is high and the window short |
//! | PFC storm | a sink `p`, paused, with no positive port→flow edge; its peer is a host (host PFC injection) or a switch none of whose egress ports is congested |
//! | deadlock, initiator in loop | a cycle of `G_P` whose ports have no edge leaving it; a loop port has positive port→flow edges |
//! | deadlock, initiator out of loop | a cycle with an edge leaving it (`out-deg > 1`) towards a sink, in an epoch in which the cycle's own edges hold (an exit the port waited out before the loop formed is evidence `loop_exit_apart`; exits that first held only after the loop's own edges did are `loop_before_exits`; an exit that held before the loop toward lasting contention decides out of loop unless the loop's own lasting contention outgrew it `early_exit_outgrown_ratio` times, `loop_outgrew_early_exit`); the sink's port→flow edges tell flow contention from host injection |
//! | normal flow contention | the victim is not paused at a port of its path where positive port→flow edges exist and the victim waited |
//! | slow receiver (not in Table 2) | a sink its host pauses whose pause pattern is a drain-rate limit: paused in consecutive epochs, each also letting packets through between pauses that meet the queue (`Context::slow_receiver_pattern`) |
//!
//! Every anomaly is keyed by its initial congestion point (or its loop), so several victim
//! hops leading to the same origin give one anomaly, and independent origins give several.
//! PFC trees of the graph that the victim's walk never reaches are diagnosed too, with
//! `affects_victim = false`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use hawkmesh_wire::telemetry::FiveTuple;
use hawkmesh_wire::topology::{NodeKind, PortRef};
use petgraph::algo::tarjan_scc;
use petgraph::graph::DiGraph;

use crate::graph::ProvenanceGraph;
use crate::ingest::Incident;
use crate::model::{
    Anomaly, AnomalyType, Diagnosis, EcmpCheck, Evidence, Finding, FlowContribution,
    PortContention, RootCause, RootCauseKind, Severity, SpreadingFlow, VictimHop, Window,
    DIAGNOSIS_SCHEMA_VERSION,
};
use crate::DiagnoseOptions;

/// A slow receiver's pause pattern needs the port paused in at least this many consecutive
/// epochs (one epoch cannot tell a drain-rate limit from an injection that began in it),
/// unless the host pauses it at collection and packets the pause held have already left.
const SLOW_RECEIVER_MIN_EPOCHS: u64 = 2;

/// …and in each of them at least this share of its packets enqueued between pauses (an
/// injection lets none through in an epoch it covers).
const SLOW_RECEIVER_MIN_UNPAUSED_SHARE: f64 = 0.01;

/// What shows a slow receiver at a port its host pauses.
enum SlowPattern {
    /// The host released its pause by XON (`Context::xon_releases`).
    Xon {
        /// XON frames the port received over the window.
        xons: u64,
        /// Epochs with at least one.
        epochs: usize,
    },
    /// The port's packets show pauses coming and going (`Context::slow_receiver_pattern`,
    /// for reports without XON counts).
    Packets {
        /// Consecutive paused epochs.
        epochs: usize,
        /// Smallest share of packets enqueued unpaused in one of them.
        min_unpaused_share: f64,
        /// Mean queue depth the unpaused packets that left met, bytes.
        mean_unpaused_depth: f64,
    },
}

/// Most flows listed per root cause, spreading edge or contention port.
const MAX_LISTED_FLOWS: usize = 16;

/// Bound on the depth-first search that orders a loop's ports as a cycle (`order_cycle`).
const MAX_CYCLE_SEARCH_STEPS: usize = 100_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum AnomalyKey {
    Loop(usize),
    Sink(PortRef),
    Contention(PortRef),
}

#[derive(Clone, Debug)]
struct Draft {
    anomaly_type: AnomalyType,
    affects_victim: bool,
    root: RootCause,
    root_ports: Vec<PortRef>,
    paths: BTreeSet<Vec<PortRef>>,
    loop_ports: Vec<PortRef>,
    evidence: Vec<Evidence>,
}

/// Classification of an initial congestion point (HAWKEYE Alg. 2 `AnalyzeFlowContention`).
struct SinkClass {
    anomaly_type: AnomalyType,
    root: RootCause,
    evidence: Vec<Evidence>,
}

/// A loop's exits (port→port edges from a member to a port outside the loop), sorted by
/// whether they can hold the loop (`Context::loop_exits`). Each is (from, to, weight).
#[derive(Default)]
struct LoopExits {
    /// Concurrent with the loop's own edges and strong enough: these hold the loop.
    holding: Vec<(PortRef, PortRef, f64)>,
    /// Under `min_loop_exit_share` of the weakest loop edge.
    weak: Vec<(PortRef, PortRef, f64)>,
    /// Never weighted in an epoch in which the loop's own edges were.
    apart: Vec<(PortRef, PortRef, f64)>,
    /// First weighted after every loop port was already paused: the loop was deadlocked
    /// before this exit held anything, so it did not initiate it.
    after: Vec<(PortRef, PortRef, f64)>,
}

/// Where a deadlock's initiator was found (`initiator_in_loop` / `initiator_out_of_loop`).
struct LoopInitiator {
    anomaly_type: AnomalyType,
    root: RootCause,
    root_ports: Vec<PortRef>,
    /// Spreading paths through the loop to each out-of-loop sink; empty for an initiator
    /// in the loop (the path into the loop is used).
    paths: Vec<Vec<PortRef>>,
}

struct Context<'a> {
    incident: &'a Incident,
    graph: &'a ProvenanceGraph,
    options: &'a DiagnoseOptions,
    loops: Vec<Vec<PortRef>>,
    loop_of: BTreeMap<PortRef, usize>,
    has_incoming: BTreeSet<PortRef>,
    drafts: BTreeMap<AnomalyKey, Draft>,
    visited: BTreeSet<PortRef>,
}

fn label(incident: &Incident, port: PortRef) -> String {
    incident.port_id(port).label
}

impl<'a> Context<'a> {
    fn new(
        incident: &'a Incident,
        graph: &'a ProvenanceGraph,
        options: &'a DiagnoseOptions,
    ) -> Self {
        // Cycles of G_P (HAWKEYE Alg. 2 l.26 "check whether loop exists") via Tarjan's SCC.
        let mut port_graph: DiGraph<PortRef, f64> = DiGraph::new();
        let mut index = BTreeMap::new();
        let mut has_incoming = BTreeSet::new();
        for (from, edges) in &graph.port_out {
            for (to, weight) in edges {
                let a = *index
                    .entry(*from)
                    .or_insert_with(|| port_graph.add_node(*from));
                let b = *index.entry(*to).or_insert_with(|| port_graph.add_node(*to));
                port_graph.add_edge(a, b, *weight);
                has_incoming.insert(*to);
            }
        }
        let mut loops: Vec<Vec<PortRef>> = Vec::new();
        for component in tarjan_scc(&port_graph) {
            let members: BTreeSet<PortRef> = component.iter().map(|n| port_graph[*n]).collect();
            let cyclic = members.len() > 1
                || members
                    .iter()
                    .any(|p| graph.port_edges(*p).iter().any(|(to, _)| to == p));
            if cyclic {
                loops.push(order_cycle(graph, &members));
            }
        }
        loops.sort();
        let mut loop_of = BTreeMap::new();
        for (id, ports) in loops.iter().enumerate() {
            for port in ports {
                loop_of.insert(*port, id);
            }
        }
        Context {
            incident,
            graph,
            options,
            loops,
            loop_of,
            has_incoming,
            drafts: BTreeMap::new(),
            visited: BTreeSet::new(),
        }
    }

    fn flow_contribution(&self, port: PortRef, flow: FiveTuple, weight: f64) -> FlowContribution {
        let at = self.graph.flow_at(flow, port);
        let packets = at.map(|f| f.packets.saturating_sub(f.paused)).unwrap_or(0);
        let line = self
            .graph
            .ports
            .get(&port)
            .map(|s| s.line_gbps)
            .unwrap_or(0.0);
        let (burst, rate) = match at.and_then(|f| f.peak_window) {
            Some((rate, length)) => {
                let short = (length as f64)
                    <= self.options.burst_max_epoch_fraction * self.incident.epoch_ns as f64;
                let fast = line > 0.0 && rate >= self.options.burst_min_line_rate_fraction * line;
                (Some(short && fast), Some(round3(rate)))
            }
            None => (None, None),
        };
        FlowContribution {
            flow,
            weight: round3(weight),
            packets,
            burst,
            window_rate_gbps: rate,
        }
    }

    fn contributors(&self, port: PortRef) -> Vec<FlowContribution> {
        self.graph
            .contributions(port)
            .iter()
            .filter(|(_, w)| *w > 0.0)
            .take(MAX_LISTED_FLOWS)
            .map(|(flow, w)| self.flow_contribution(port, *flow, *w))
            .collect()
    }

    /// ECMP imbalance among the equal-cost uplinks of `port`'s switch (Alg. 2 l.11).
    fn ecmp_check(&self, port: PortRef) -> Option<EcmpCheck> {
        let topology = &self.incident.topology;
        let this = topology.nodes.get(port.node as usize)?;
        let (peer, _) = self.incident.peer(port)?;
        let peer_node = topology.nodes.get(peer.node as usize)?;
        if peer_node.kind != NodeKind::Switch {
            return None;
        }
        if let (Some(mine), Some(theirs)) = (this.tier, peer_node.tier) {
            if theirs <= mine {
                return None;
            }
        }
        let group: Vec<PortRef> = self
            .incident
            .switch_ports(port.node)
            .into_iter()
            .map(|p| PortRef {
                node: port.node,
                port: p,
            })
            .filter(|candidate| {
                self.incident
                    .peer(*candidate)
                    .and_then(|(other, _)| topology.nodes.get(other.node as usize))
                    .is_some_and(|n| n.kind == peer_node.kind && n.tier == peer_node.tier)
            })
            .collect();
        if group.len() < 2 {
            return None;
        }
        let counts: Vec<u64> = group
            .iter()
            .map(|p| self.graph.ports.get(p).map(|s| s.packets).unwrap_or(0))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let mean = total as f64 / counts.len() as f64;
        let max = counts.iter().copied().max().unwrap_or(0) as f64;
        let ratio = max / mean;
        Some(EcmpCheck {
            ports: group.iter().map(|p| self.incident.port_id(*p)).collect(),
            packet_counts: counts,
            imbalance_ratio: round3(ratio),
            imbalanced: ratio >= self.options.ecmp_imbalance_ratio,
        })
    }

    /// HAWKEYE Alg. 2 `AnalyzeFlowContention` (l.1-11) at an initial congestion point.
    fn classify_sink(&self, sink: PortRef) -> SinkClass {
        let incident = self.incident;
        let sink_label = label(incident, sink);
        let summary = self.graph.ports.get(&sink).cloned().unwrap_or_default();
        let mut evidence = vec![Evidence {
            rule: "initial_congestion_point".into(),
            from: sink_label.clone(),
            to: String::new(),
            weight: 0.0,
            note: format!(
                "{sink_label} has no outgoing port→port wait-for edge (out-deg_P = 0): the PFC spreading starts here"
            ),
        }];
        let flows = self.contributors(sink);
        // A host that paused its port decides the sink over the port's contention unless
        // the contention began strictly before the pause and lasted as long. A NIC pauses
        // when its own receive path cannot keep up — contention at the switch port facing
        // it does not make it pause — and a paused port's queue meets everything that
        // arrives once the pause lets go: contention in the pause's epochs or after them is
        // the pause's backlog draining (a storm that ended before the victim polled shows
        // only that). A burst that was already contending before the host paused and did
        // not end first stays flow contention. The contention is kept as evidence.
        let host_paused =
            summary.peer_is_host && (summary.paused > 0 || summary.first_paused_epoch.is_some());
        // "As long": to the nanosecond when the switch reported the pause's end and the
        // records carry enqueue times (a pause still in force outlasts everything), else
        // by epochs.
        let contention_lasted = match (summary.last_contention_ns, summary.pause_end_ns) {
            (Some(contention), Some(pause)) => contention >= pause,
            _ => summary.last_contention_epoch >= summary.last_paused_epoch,
        };
        let contention_came_first = summary.first_contention_epoch.is_some()
            && summary.first_paused_epoch.is_some()
            && summary.first_contention_epoch < summary.first_paused_epoch
            && contention_lasted;
        let storm_outlasts_contention = host_paused && !contention_came_first;
        if !flows.is_empty() && storm_outlasts_contention {
            for flow in flows.iter().take(5) {
                evidence.push(Evidence {
                    rule: "earlier_flow_contention".into(),
                    from: sink_label.clone(),
                    to: flow.flow.to_string(),
                    weight: flow.weight,
                    note: format!(
                        "{} contended at {sink_label} (weight {:.1}), but not before the host's pause began, or the pause outlasted it (the queue it met is the backlog of the pause)",
                        flow.flow, flow.weight
                    ),
                });
            }
        }
        if !flows.is_empty() && !storm_outlasts_contention {
            for flow in flows.iter().take(5) {
                evidence.push(Evidence {
                    rule: "flow_contention".into(),
                    from: sink_label.clone(),
                    to: flow.flow.to_string(),
                    weight: flow.weight,
                    note: format!(
                        "port→flow weight {:.1} > 0: {} is a contention contributor at {sink_label}",
                        flow.weight, flow.flow
                    ),
                });
            }
            if summary.paused > 0 && summary.peer_is_host {
                evidence.push(Evidence {
                    rule: "also_paused_by_host".into(),
                    from: sink_label.clone(),
                    to: summary
                        .peer
                        .map(|p| incident.node_name(p.node))
                        .unwrap_or_default(),
                    weight: summary.paused as f64,
                    note: format!(
                        "{sink_label} was also paused by its host for {} packets, but its flow contention began earlier and lasted as long: flow contention dominates",
                        summary.paused
                    ),
                });
            }
            let timed: Vec<&FlowContribution> =
                flows.iter().filter(|f| f.burst.is_some()).collect();
            let micro_burst = if timed.is_empty() {
                None
            } else {
                let burst_weight: f64 = timed
                    .iter()
                    .filter(|f| f.burst == Some(true))
                    .map(|f| f.weight)
                    .sum();
                let all: f64 = timed.iter().map(|f| f.weight).sum();
                Some(all > 0.0 && burst_weight * 2.0 >= all)
            };
            return SinkClass {
                anomaly_type: AnomalyType::PfcBackpressure,
                root: RootCause {
                    kind: RootCauseKind::FlowContention,
                    ports: vec![incident.port_id(sink)],
                    injector: None,
                    receiver: None,
                    flows,
                    micro_burst,
                    ecmp: self.ecmp_check(sink),
                },
                evidence,
            };
        }
        let max_weight = self
            .graph
            .contributions(sink)
            .first()
            .map(|(_, w)| *w)
            .unwrap_or(0.0);
        evidence.push(Evidence {
            rule: "no_flow_contention".into(),
            from: sink_label.clone(),
            to: String::new(),
            weight: round3(max_weight),
            note: format!(
                "max port→flow weight at {sink_label} is {:.1} ≤ 0: no flow contention (its non-paused packets did not build a queue)",
                max_weight
            ),
        });
        let peer_name = summary
            .peer
            .map(|p| incident.node_name(p.node))
            .unwrap_or_else(|| "-".into());
        let slow = if host_paused {
            self.xon_releases(sink)
                .or_else(|| self.slow_receiver_pattern(sink))
        } else {
            None
        };
        let mut receiver = None;
        let (anomaly_type, kind, injector) = if let Some(pattern) = slow {
            let note = match pattern {
                SlowPattern::Xon { xons, epochs } => format!(
                    "host {peer_name} released its pause of {sink_label} by PFC XON {xons} time(s) in {epochs} epoch(s) and paused it again: receive-buffer flow control of a receiver draining slower than its link delivers (drain-rate limit); a PFC injection refreshes its XOFF and never resumes the port itself"
                ),
                SlowPattern::Packets {
                    epochs,
                    min_unpaused_share,
                    mean_unpaused_depth,
                } => format!(
                    "host {peer_name} paused {sink_label} in {epochs} consecutive epochs, and in each the port also enqueued packets between the pauses (at least {:.0} % of them) that met a queue of {:.0} B on average: the pauses come and go with the port's queue while it keeps transmitting — a receiver draining slower than its link (drain-rate limit), not a PFC injection, which pauses without letting go",
                    min_unpaused_share * 100.0,
                    mean_unpaused_depth
                ),
            };
            evidence.push(Evidence {
                rule: "slow_receiver".into(),
                from: peer_name.clone(),
                to: sink_label.clone(),
                weight: summary.paused as f64,
                note,
            });
            receiver = Some(peer_name);
            (AnomalyType::SlowReceiver, RootCauseKind::SlowReceiver, None)
        } else if host_paused {
            evidence.push(Evidence {
                rule: "host_pfc_injection".into(),
                from: peer_name.clone(),
                to: sink_label.clone(),
                weight: summary.paused as f64,
                note: format!(
                    "host {peer_name} paused {sink_label} ({} paused packets{}) although the port had no contention{}: PFC injected by the host (Alg. 2 l.5)",
                    summary.paused,
                    if summary.paused_at_collection {
                        ", still paused at collection"
                    } else {
                        ""
                    },
                    if flows.is_empty() { "" } else { " in its latest epochs" }
                ),
            });
            (
                AnomalyType::PfcStorm,
                RootCauseKind::HostPfcInjection,
                Some(peer_name),
            )
        } else if summary.paused > 0 && summary.pause.peer_unreported_epochs > 0 {
            evidence.push(Evidence {
                rule: "telemetry_missing".into(),
                from: sink_label.clone(),
                to: peer_name.clone(),
                weight: summary.paused as f64,
                note: format!(
                    "{sink_label} is paused by {peer_name}, which sent no telemetry for the paused epochs: the spreading path continues beyond the reports"
                ),
            });
            (AnomalyType::UnresolvedPfc, RootCauseKind::Unknown, None)
        } else if summary.paused > 0 {
            evidence.push(Evidence {
                rule: "switch_pfc_injection".into(),
                from: peer_name.clone(),
                to: sink_label.clone(),
                weight: summary.paused as f64,
                note: format!(
                    "switch {peer_name} paused {sink_label} ({} paused packets) but none of its egress ports fed from it was congested (causality meter)",
                    summary.paused
                ),
            });
            (
                AnomalyType::PfcStorm,
                RootCauseKind::SwitchPfcInjection,
                Some(peer_name),
            )
        } else {
            evidence.push(Evidence {
                rule: "unexplained_queue".into(),
                from: sink_label.clone(),
                to: String::new(),
                weight: round3(summary.mean_depth()),
                note: format!(
                    "{sink_label} is congested (mean queue {:.0} B) but neither paused nor contended in the replay",
                    summary.mean_depth()
                ),
            });
            (AnomalyType::UnresolvedPfc, RootCauseKind::Unknown, None)
        };
        let flows = if kind == RootCauseKind::SlowReceiver {
            flows
        } else {
            Vec::new()
        };
        SinkClass {
            anomaly_type,
            root: RootCause {
                kind,
                ports: vec![incident.port_id(sink)],
                injector,
                receiver,
                flows,
                micro_burst: None,
                ecmp: None,
            },
            evidence,
        }
    }

    /// The pause pattern of a drain-rate limit at a port its host pauses (a slow
    /// receiver), from the port records and flow records the switch reports per epoch. A
    /// PFC injection holds the port: nothing drains while it lasts, so an epoch the
    /// injection covers enqueues only paused packets (or nothing at all, once everything
    /// upstream froze), and the port stays paused at collection with nothing recorded. A
    /// receiver that drains slower than its link pauses the port when its buffer fills and
    /// lets go when it drained, many times per epoch: in every epoch of the pause the port
    /// also enqueues packets between pauses, and those meet the queue the pauses leave.
    /// The pattern holds when the port was paused (paused packets) in
    /// [`SLOW_RECEIVER_MIN_EPOCHS`] or more consecutive epochs, none between them missing
    /// (or in one, if the host pauses the port at collection and packets the pause held
    /// have already left — an injection in force lets nothing it held go); in each of them at least [`SLOW_RECEIVER_MIN_UNPAUSED_SHARE`] of its packets were
    /// enqueued unpaused; wherever unpaused packets have left (their queue depth is
    /// measured when they leave) they met a mean queue of at least
    /// `congestion_queue_bytes`, and some have; and the port was not frozen after the last
    /// paused epoch (paused at collection with nothing recorded since).
    fn slow_receiver_pattern(&self, sink: PortRef) -> Option<SlowPattern> {
        let data = self.incident.switches.get(&sink.node)?;
        let epoch_ns = self.incident.epoch_ns;
        let paused: Vec<u64> = data
            .epochs
            .iter()
            .filter(|(_, e)| {
                e.ports
                    .get(&sink.port)
                    .is_some_and(|r| r.paused_packet_count > 0)
            })
            .map(|(start, _)| *start)
            .collect();
        let (first, last) = (*paused.first()?, *paused.last()?);
        let span = (last - first) / epoch_ns + 1;
        if paused.len() as u64 != span {
            return None;
        }
        // One epoch can show it too when the host pauses the port at collection and
        // packets the pause held have already left: a pause that let go while the host
        // still pauses. (An injection in force has let nothing it held go.)
        let in_force = data
            .pause_status
            .get(&sink.port)
            .is_some_and(|(in_force, _)| *in_force);
        let released: u64 = paused
            .iter()
            .filter_map(|start| data.epochs.get(start))
            .flat_map(|e| e.flows_at(sink.port))
            .map(|f| f.paused)
            .sum();
        if span < SLOW_RECEIVER_MIN_EPOCHS && !(in_force && released > 0) {
            return None;
        }
        let threshold = self.options.congestion_queue_bytes as f64;
        let mut min_share = f64::INFINITY;
        let (mut depth_sum, mut depth_packets) = (0.0, 0u64);
        for start in &paused {
            let epoch = data.epochs.get(start)?;
            let record = epoch.ports.get(&sink.port)?;
            let unpaused = record.packet_count - record.paused_packet_count;
            let share = f64::from(unpaused) / f64::from(record.packet_count);
            if share < SLOW_RECEIVER_MIN_UNPAUSED_SHARE {
                return None;
            }
            min_share = min_share.min(share);
            let left: u64 = epoch.flows_at(sink.port).iter().map(|f| f.unpaused()).sum();
            if left > 0 {
                let depth = record.unpaused_queue_depth_sum_bytes as f64 / left as f64;
                if depth < threshold {
                    return None;
                }
                depth_sum += record.unpaused_queue_depth_sum_bytes as f64;
                depth_packets += left;
            }
        }
        if depth_packets == 0 {
            return None;
        }
        let latest = *data.epochs.keys().next_back()?;
        let frozen = latest > last
            && in_force
            && data
                .epochs
                .range(last + 1..)
                .all(|(_, e)| e.ports.get(&sink.port).is_none_or(|r| r.packet_count == 0));
        if frozen {
            return None;
        }
        Some(SlowPattern::Packets {
            epochs: paused.len(),
            min_unpaused_share: min_share,
            mean_unpaused_depth: depth_sum / depth_packets as f64,
        })
    }

    /// XONs at a port its host pauses: the host resumed the port itself, so its pauses
    /// follow its receive buffer (IEEE 802.1Qbb: a receiver sends XOFF above its
    /// threshold and XON, quanta 0, once drained below the resume threshold) — a receiver
    /// draining slower than its link. A PFC injection (a storm) keeps refreshing its XOFF
    /// and at most lets the pause expire; it sends no XON. The data plane counts the XON
    /// frames per port and epoch (`port_xon`), which shows the release even while the
    /// port enqueues nothing (its upstream held by the pause), as at the first poll of a
    /// slow receiver whose first pause just let go.
    fn xon_releases(&self, sink: PortRef) -> Option<SlowPattern> {
        let data = self.incident.switches.get(&sink.node)?;
        let counts: Vec<u16> = data
            .epochs
            .values()
            .filter_map(|e| e.xons.get(&sink.port).copied())
            .collect();
        if counts.is_empty() {
            return None;
        }
        Some(SlowPattern::Xon {
            xons: counts.iter().map(|&c| u64::from(c)).sum(),
            epochs: counts.len(),
        })
    }

    /// Breadth-first search over port→port edges from `start`, heaviest edges first,
    /// optionally not expanding beyond `stop` ports. Returns parents for path recovery.
    fn bfs(
        &self,
        starts: &[PortRef],
        stop: &dyn Fn(PortRef) -> bool,
    ) -> BTreeMap<PortRef, Option<PortRef>> {
        let mut parent: BTreeMap<PortRef, Option<PortRef>> = BTreeMap::new();
        let mut queue = VecDeque::new();
        for start in starts {
            if parent.insert(*start, None).is_none() {
                queue.push_back(*start);
            }
        }
        while let Some(port) = queue.pop_front() {
            if stop(port) {
                continue;
            }
            for (next, _) in self.graph.port_edges(port) {
                if !parent.contains_key(next) {
                    parent.insert(*next, Some(port));
                    queue.push_back(*next);
                }
            }
        }
        parent
    }

    fn path_to(parent: &BTreeMap<PortRef, Option<PortRef>>, end: PortRef) -> Vec<PortRef> {
        let mut path = vec![end];
        let mut at = end;
        while let Some(Some(previous)) = parent.get(&at) {
            if path.contains(previous) {
                break;
            }
            path.push(*previous);
            at = *previous;
        }
        path.reverse();
        path
    }

    fn edge_evidence(&self, path: &[PortRef]) -> Vec<Evidence> {
        path.windows(2)
            .filter_map(|pair| {
                let weight = self
                    .graph
                    .port_edges(pair[0])
                    .iter()
                    .find(|(to, _)| *to == pair[1])
                    .map(|(_, w)| *w)?;
                let (from, to) = (label(self.incident, pair[0]), label(self.incident, pair[1]));
                Some(Evidence {
                    rule: "pfc_wait_for".into(),
                    from: from.clone(),
                    to: to.clone(),
                    weight: round3(weight),
                    note: format!("{from} is paused and waits for the congested {to}"),
                })
            })
            .collect()
    }

    fn merge(&mut self, key: AnomalyKey, draft: Draft) {
        match self.drafts.get_mut(&key) {
            Some(existing) => {
                existing.affects_victim |= draft.affects_victim;
                existing.paths.extend(draft.paths);
                for evidence in draft.evidence {
                    if !existing.evidence.contains(&evidence) {
                        existing.evidence.push(evidence);
                    }
                }
            }
            None => {
                self.drafts.insert(key, draft);
            }
        }
    }

    /// HAWKEYE Alg. 2 `CheckPortNode` (l.24-34) from `start`: everything the port→port
    /// edges reach from `start` is visited; each initial congestion point reachable without
    /// crossing a loop becomes a PFC tree of its own (`trace_direct_sinks`, l.30-32), and
    /// each cyclic buffer dependency reached becomes a deadlock (`trace_loop`, l.26-29).
    ///
    fn trace_pfc(&mut self, start: PortRef, affects_victim: bool, lead: Vec<Evidence>) {
        let reach = self.bfs(&[start], &|_| false);
        self.visited.extend(reach.keys().copied());
        let loop_ids: BTreeSet<usize> = reach
            .keys()
            .filter_map(|p| self.loop_of.get(p).copied())
            .collect();
        self.trace_direct_sinks(start, affects_victim, &lead);
        for id in loop_ids {
            self.trace_loop(id, &reach, affects_victim, &lead);
        }
    }

    /// Alg. 2 l.30-32: decides which ports are initial congestion points of PFC trees of
    /// their own — the sinks (no outgoing port→port edge) reachable from `start` without
    /// crossing a loop — and drafts one anomaly per sink, typed by `classify_sink`
    /// (`AnalyzeFlowContention`, l.1-11), with the wait-for path from `start` as evidence.
    fn trace_direct_sinks(&mut self, start: PortRef, affects_victim: bool, lead: &[Evidence]) {
        let loop_of = self.loop_of.clone();
        let stop = |p: PortRef| loop_of.contains_key(&p);
        let direct = self.bfs(&[start], &stop);
        let direct_sinks: Vec<PortRef> = direct
            .keys()
            .filter(|p| self.graph.port_edges(**p).is_empty())
            .copied()
            .collect();
        for sink in direct_sinks {
            let path = Self::path_to(&direct, sink);
            let class = self.classify_sink(sink);
            let mut evidence = lead.to_vec();
            evidence.extend(self.edge_evidence(&path));
            evidence.extend(class.evidence);
            self.merge(
                AnomalyKey::Sink(sink),
                Draft {
                    anomaly_type: class.anomaly_type,
                    affects_victim,
                    root: class.root,
                    root_ports: vec![sink],
                    paths: BTreeSet::from([path]),
                    loop_ports: Vec::new(),
                    evidence,
                },
            );
        }
    }

    /// Alg. 2 l.26-29 and l.14-21 for loop `id` reached from the walk in `reach`: decides
    /// where the deadlock's initiator is. The loop's exits are sorted into those that hold
    /// it and those that do not (`loop_exits`); the initiator is in the loop unless the
    /// holding exits outweigh the loop's own contention (`exits_hold_loop`), and is then
    /// found in the loop (`initiator_in_loop`) or at the sinks the exits lead to
    /// (`initiator_out_of_loop`). One draft per loop.
    fn trace_loop(
        &mut self,
        id: usize,
        reach: &BTreeMap<PortRef, Option<PortRef>>,
        affects_victim: bool,
        lead: &[Evidence],
    ) {
        let members = self.loops[id].clone();
        let member_set: BTreeSet<PortRef> = members.iter().copied().collect();
        let entry = Self::loop_entry(&members, reach);
        let path = Self::path_to(reach, entry);
        let mut evidence = lead.to_vec();
        evidence.extend(self.edge_evidence(&path));
        evidence.extend(self.loop_edge_evidence(&members));
        let exits = self.loop_exits(&members, &member_set);
        evidence.extend(self.ignored_exit_evidence(&exits));
        let initiator =
            if !self.exits_hold_loop(&members, &member_set, &exits.holding, &mut evidence) {
                self.initiator_in_loop(&members, &mut evidence)
            } else {
                self.initiator_out_of_loop(
                    &members,
                    &member_set,
                    entry,
                    &path,
                    &exits.holding,
                    &mut evidence,
                )
            };
        let paths: BTreeSet<Vec<PortRef>> = if initiator.paths.is_empty() {
            BTreeSet::from([path])
        } else {
            initiator.paths.into_iter().collect()
        };
        self.merge(
            AnomalyKey::Loop(id),
            Draft {
                anomaly_type: initiator.anomaly_type,
                affects_victim,
                root: initiator.root,
                root_ports: initiator.root_ports,
                paths,
                loop_ports: members,
                evidence,
            },
        );
    }

    /// Where the walk enters the loop: the member reached by the shortest path from the
    /// walk's start (the loop's first port if none was reached).
    fn loop_entry(members: &[PortRef], reach: &BTreeMap<PortRef, Option<PortRef>>) -> PortRef {
        members
            .iter()
            .filter(|p| reach.contains_key(p))
            .min_by_key(|p| Self::path_to(reach, **p).len())
            .copied()
            .unwrap_or(members[0])
    }

    /// Alg. 2 l.26-29: the loop itself, in cycle order, as `cyclic_buffer_dependency`
    /// evidence (one item per wait-for edge between consecutive members).
    fn loop_edge_evidence(&self, members: &[PortRef]) -> Vec<Evidence> {
        let mut cycle = members.to_vec();
        cycle.push(members[0]);
        self.edge_evidence(&cycle)
            .into_iter()
            .map(|item| Evidence {
                rule: "cyclic_buffer_dependency".into(),
                note: format!("{} (loop edge)", item.note),
                ..item
            })
            .collect()
    }

    /// Decides which of the loop's exits (port→port edges from a member to a port outside
    /// the loop; `out-deg_P > 1`, Alg. 2 l.14) can hold the loop: an exit that never had
    /// weight in an epoch in which the loop's own wait-for edges did is apart (a pause the
    /// port waited out before the loop formed, or after it was gone); one first weighted
    /// after every loop port was paused came after the deadlock
    /// ([`Self::loop_deadlocked_since`]); one under
    /// `min_loop_exit_share` of the weakest loop edge is weak; the rest hold.
    fn loop_exits(&self, members: &[PortRef], member_set: &BTreeSet<PortRef>) -> LoopExits {
        let cycle: Vec<(PortRef, PortRef)> = Self::loop_edges(members).collect();
        let weakest_loop_edge = cycle
            .iter()
            .filter_map(|(from, to)| {
                self.graph
                    .port_edges(*from)
                    .iter()
                    .find(|(target, _)| target == to)
                    .map(|(_, w)| *w)
            })
            .fold(f64::INFINITY, f64::min);
        let exit_floor = if weakest_loop_edge.is_finite() {
            self.options.min_loop_exit_share * weakest_loop_edge
        } else {
            0.0
        };
        // The epochs in which the loop's own wait-for edges had weight: an exit that
        // never had weight in one of them (a pause the port waited out before the
        // loop's dependencies formed, or after they were gone) did not hold the loop.
        let loop_epochs: BTreeSet<u64> = cycle
            .iter()
            .filter_map(|(from, to)| self.graph.edge_epochs(*from, *to))
            .flatten()
            .copied()
            .collect();
        let deadlocked = self.loop_deadlocked_since(members);
        let mut exits = LoopExits::default();
        for p in members {
            for (to, w) in self.graph.port_edges(*p) {
                if member_set.contains(to) {
                    continue;
                }
                let epochs = self.graph.edge_epochs(*p, *to);
                let concurrent = epochs.is_some_and(|epochs| !epochs.is_disjoint(&loop_epochs));
                let first = epochs.and_then(|epochs| epochs.first().copied());
                if !concurrent && !loop_epochs.is_empty() {
                    exits.apart.push((*p, *to, *w));
                } else if let (Some(first), Some(since)) = (first, deadlocked) {
                    // A pause injected beyond the exit froze its path, so its weight can
                    // show late; such an exit is judged like the others.
                    if first > since && !self.leads_to_injection(*to, member_set) {
                        exits.after.push((*p, *to, *w));
                    } else if *w >= exit_floor {
                        exits.holding.push((*p, *to, *w));
                    } else {
                        exits.weak.push((*p, *to, *w));
                    }
                } else if *w >= exit_floor {
                    exits.holding.push((*p, *to, *w));
                } else {
                    exits.weak.push((*p, *to, *w));
                }
            }
        }
        exits
    }

    /// The start of the first epoch in which every loop port was paused: each member
    /// enqueued paused packets in it, or recorded nothing (held behind the pause: its
    /// switch froze) while paused at collection; at least one member recorded paused
    /// packets. An initiator outside the loop congests its exit before the loop's ports
    /// all pause (its PFC is what pauses them), so an exit first weighted after this did
    /// not initiate the deadlock (HAWKEYE §2: the out-of-loop initiator's PFC spreads into
    /// the loop). `None` when no such epoch is in the window, or when it is the first
    /// epoch the loop's switches reported (the deadlock was not seen forming).
    fn loop_deadlocked_since(&self, members: &[PortRef]) -> Option<u64> {
        let epochs: BTreeSet<u64> = members
            .iter()
            .filter_map(|m| self.incident.switches.get(&m.node))
            .flat_map(|data| data.epochs.keys().copied())
            .collect();
        let first_seen = epochs.first().copied()?;
        let since = epochs.into_iter().find(|start| {
            let mut recorded_pause = false;
            let all = members.iter().all(|m| {
                let Some(data) = self.incident.switches.get(&m.node) else {
                    return false;
                };
                let in_force = data
                    .pause_status
                    .get(&m.port)
                    .is_some_and(|(in_force, _)| *in_force);
                match data.epochs.get(start).and_then(|e| e.ports.get(&m.port)) {
                    Some(record) if record.paused_packet_count > 0 => {
                        recorded_pause = true;
                        true
                    }
                    Some(record) => record.packet_count == 0 && in_force,
                    None => in_force && data.epochs.contains_key(start),
                }
            });
            all && recorded_pause
        })?;
        // Only a deadlock seen forming counts: when the loop was already deadlocked in the
        // first epoch any of its switches reported, the exits' weight before the window is
        // unknown.
        (since > first_seen).then_some(since)
    }

    /// The loop's own wait-for edges, each member to the next (`members` in cycle order).
    fn loop_edges(members: &[PortRef]) -> impl Iterator<Item = (PortRef, PortRef)> + '_ {
        members
            .iter()
            .copied()
            .zip(members.iter().copied().cycle().skip(1))
    }

    /// The sinks (out-degree 0) the wait-for edges from `starts` reach without re-entering
    /// the loop.
    fn sinks_beyond(&self, starts: &[PortRef], member_set: &BTreeSet<PortRef>) -> Vec<PortRef> {
        self.bfs(starts, &|p| member_set.contains(&p))
            .into_keys()
            .filter(|p| self.graph.port_edges(*p).is_empty())
            .collect()
    }

    /// Whether `sink`'s PFC is injected or drain-limited rather than caused by queueing.
    fn injects_pfc(&self, sink: PortRef) -> bool {
        matches!(
            self.classify_sink(sink).root.kind,
            RootCauseKind::HostPfcInjection
                | RootCauseKind::SwitchPfcInjection
                | RootCauseKind::SlowReceiver
        )
    }

    /// Whether the wait-for edges from `start` (not re-entering the loop) end at a port whose
    /// PFC is injected or drain-limited rather than caused by queueing.
    fn leads_to_injection(&self, start: PortRef, member_set: &BTreeSet<PortRef>) -> bool {
        self.sinks_beyond(&[start], member_set)
            .into_iter()
            .any(|p| self.injects_pfc(p))
    }

    /// Evidence for the exits that do not hold the loop, with why: `loop_exit_after_deadlock`
    /// for those that came after the loop deadlocked, `loop_exit_apart` for those apart in
    /// time, then `weak_loop_exit` for those too weak.
    fn ignored_exit_evidence(&self, exits: &LoopExits) -> Vec<Evidence> {
        // An exit that does not hold the loop, with why.
        let ignored_exit = |rule: &str, (from, to, weight): &(PortRef, PortRef, f64), why: &str| {
            let (from, to) = (label(self.incident, *from), label(self.incident, *to));
            Evidence {
                rule: rule.into(),
                note: format!(
                    "loop port {from} also waits for {to} outside the loop, but {why}: not what holds the loop"
                ),
                from,
                to,
                weight: round3(*weight),
            }
        };
        let mut evidence = Vec::new();
        for exit in &exits.after {
            evidence.push(ignored_exit(
                "loop_exit_after_deadlock",
                exit,
                "it first held traffic after every loop port was already paused (the loop was deadlocked before it)",
            ));
        }
        for exit in &exits.apart {
            evidence.push(ignored_exit(
                "loop_exit_apart",
                exit,
                "never in an epoch in which the loop's own wait-for edges held",
            ));
        }
        let weak_why = format!(
            "with less than {:.0} % of the weakest loop edge",
            self.options.min_loop_exit_share * 100.0
        );
        for exit in &exits.weak {
            evidence.push(ignored_exit("weak_loop_exit", exit, &weak_why));
        }
        evidence
    }

    /// Alg. 2 l.14, checked against contention: decides whether the holding exits make the
    /// initiator a candidate outside the loop. Without exits it is in the loop; with
    /// `loop_contention_check` off, any exit moves it out (l.14 as written), and so does an
    /// exit that held a member before the loop existed toward lasting contention
    /// ([`Self::sustained_exit_before_loop`]). Otherwise the exits hold the loop unless the
    /// loop ports' own contention exceeds that of every sink the exits lead to and no such
    /// sink injects PFC (evidence `loop_contention_dominates`).
    fn exits_hold_loop(
        &self,
        members: &[PortRef],
        member_set: &BTreeSet<PortRef>,
        exits: &[(PortRef, PortRef, f64)],
        evidence: &mut Vec<Evidence>,
    ) -> bool {
        // Exits make the initiator a candidate outside the loop (Alg. 2 l.14), but with
        // background traffic a loop port nearly always also waits for some queue
        // outside. The telemetry separates a port's own contention (queueing of
        // non-paused packets) from queueing held by PAUSE: if the loop's own contention
        // outweighs that of every queue its exits lead to, and nothing outside injects
        // PFC, the loop congested itself (in-loop initiator) and the exits are
        // bystanders.
        // An exit that already held a member before any of the loop's own wait-for edges
        // existed, toward flow contention that lasts (not a micro-burst), is what paused the
        // loop's ports: it initiated the deadlock (HAWKEYE Table 2, initiator out of loop)
        // unless the loop's own contention grew to many times the contention it leads
        // to — then it was background contention the loop's own traffic outgrew, and
        // the remaining exits are judged as below.
        if !self.options.loop_contention_check {
            if let Some((from, to, _)) = self
                .sustained_exits_before_loop(members, member_set, exits)
                .first()
            {
                evidence.push(self.exit_before_loop_evidence(*from, *to));
            }
            return !exits.is_empty();
        }
        let contention = |p: &PortRef| -> f64 {
            self.contributors(*p)
                .iter()
                .map(|f| f.weight.max(0.0))
                .sum()
        };
        let own: f64 = members.iter().map(contention).sum();
        // Only lasting contention outgrows lasting contention: the loop's micro-bursts
        // do not count against a queue that held a loop port all along.
        let own_sustained: f64 = members
            .iter()
            .flat_map(|p| self.contributors(*p))
            .filter(|f| f.burst != Some(true))
            .map(|f| f.weight.max(0.0))
            .sum();
        let mut outgrown = BTreeSet::new();
        for (from, to, led_to) in self.sustained_exits_before_loop(members, member_set, exits) {
            if own_sustained > self.options.early_exit_outgrown_ratio * led_to {
                outgrown.insert((from, to));
                evidence.push(Evidence {
                    rule: "loop_outgrew_early_exit".into(),
                    from: label(self.incident, from),
                    to: label(self.incident, to),
                    weight: round3(led_to),
                    note: format!(
                        "loop port {} waited for {} before the loop's own wait-for edges existed, but the contention that exit leads to ({led_to:.1}) is under 1/{} of the loop's own lasting contention ({own_sustained:.1}): background the loop's own traffic outgrew",
                        label(self.incident, from),
                        label(self.incident, to),
                        self.options.early_exit_outgrown_ratio
                    ),
                });
            } else {
                evidence.push(self.exit_before_loop_evidence(from, to));
                return true;
            }
        }
        let exits: Vec<(PortRef, PortRef, f64)> = exits
            .iter()
            .filter(|(from, to, _)| !outgrown.contains(&(*from, *to)))
            .copied()
            .collect();
        if exits.is_empty() {
            return false;
        }
        if let Some(loop_first) = self.exits_after_loop_formed(members, member_set, &exits) {
            evidence.push(Evidence {
                rule: "loop_before_exits".into(),
                from: label(self.incident, members[0]),
                to: String::new(),
                weight: 0.0,
                note: format!(
                    "the loop's own wait-for edges already had weight in the epoch from {loop_first} ns, before any exit did, and no exit leads to injected PFC: the loop was forming before anything outside held it"
                ),
            });
            return false;
        }
        let exit_targets: Vec<PortRef> = exits.iter().map(|(_, to, _)| *to).collect();
        let sinks = self.sinks_beyond(&exit_targets, member_set);
        let injected = sinks.iter().any(|p| self.injects_pfc(*p));
        let outside = sinks.iter().map(contention).fold(0.0, f64::max);
        if injected || outside >= own {
            true
        } else {
            evidence.push(Evidence {
                rule: "loop_contention_dominates".into(),
                from: label(self.incident, members[0]),
                to: String::new(),
                weight: round3(own),
                note: format!(
                    "the loop ports' own contention ({own:.1}) exceeds that of every queue the loop's exits lead to (at most {outside:.1}) and nothing outside injects PFC: the loop congested itself"
                ),
            });
            false
        }
    }

    fn exit_before_loop_evidence(&self, from: PortRef, to: PortRef) -> Evidence {
        Evidence {
            rule: "loop_exit_before_loop".into(),
            from: label(self.incident, from),
            to: label(self.incident, to),
            weight: 0.0,
            note: format!(
                "loop port {} already waited for {} before the loop's own wait-for edges existed, toward flow contention that lasts: the initiator is outside the loop",
                label(self.incident, from),
                label(self.incident, to)
            ),
        }
    }

    /// The epoch the loop's first own wait-for edge had weight in, when every exit's edge
    /// first had weight only in a later epoch and none of them leads to PFC injected (or
    /// drain-limited) beyond the loop: what the exits wait for cannot have paused the loop's
    /// ports into the dependency, which had begun before them.
    fn exits_after_loop_formed(
        &self,
        members: &[PortRef],
        member_set: &BTreeSet<PortRef>,
        exits: &[(PortRef, PortRef, f64)],
    ) -> Option<u64> {
        let first_epoch = |from: PortRef, to: PortRef| {
            self.graph
                .edge_epochs(from, to)
                .and_then(|epochs| epochs.first().copied())
        };
        let loop_first = Self::loop_edges(members)
            .filter_map(|(from, to)| first_epoch(from, to))
            .min()?;
        exits
            .iter()
            .all(|(from, to, _)| {
                first_epoch(*from, *to).is_some_and(|e| e > loop_first)
                    && !self.leads_to_injection(*to, member_set)
            })
            .then_some(loop_first)
    }

    /// The exits (member → outside port) whose wait-for edge had weight in an epoch before
    /// every one of the loop's own edges and that lead, beyond the loop, to a sink of flow
    /// contention that is not a micro-burst; each with the largest contention among such
    /// sinks.
    fn sustained_exits_before_loop(
        &self,
        members: &[PortRef],
        member_set: &BTreeSet<PortRef>,
        exits: &[(PortRef, PortRef, f64)],
    ) -> Vec<(PortRef, PortRef, f64)> {
        let first_epoch = |from: PortRef, to: PortRef| {
            self.graph
                .edge_epochs(from, to)
                .and_then(|epochs| epochs.first().copied())
        };
        let Some(loop_first) = Self::loop_edges(members)
            .filter_map(|(from, to)| first_epoch(from, to))
            .min()
        else {
            return Vec::new();
        };
        exits
            .iter()
            .filter(|(from, to, _)| first_epoch(*from, *to).is_some_and(|e| e < loop_first))
            .filter_map(|(from, to, _)| {
                self.sinks_beyond(&[*to], member_set)
                    .into_iter()
                    .filter_map(|p| {
                        let sink = self.classify_sink(p);
                        (sink.root.kind == RootCauseKind::FlowContention
                            && sink.root.micro_burst == Some(false))
                        .then(|| {
                            self.contributors(p)
                                .iter()
                                .map(|f| f.weight.max(0.0))
                                .sum::<f64>()
                        })
                    })
                    .reduce(f64::max)
                    .map(|led_to| (*from, *to, led_to))
            })
            .collect()
    }

    /// Initiator in loop (Alg. 2 l.18-21): the root ports are the loop ports with flow
    /// contention and the root cause their contributing flows; without any, the root cause
    /// is unknown (the initiating burst may predate the telemetry window).
    fn initiator_in_loop(
        &self,
        members: &[PortRef],
        evidence: &mut Vec<Evidence>,
    ) -> LoopInitiator {
        let mut flows = Vec::new();
        let mut root_ports = Vec::new();
        for port in members {
            let found = self.contributors(*port);
            if !found.is_empty() {
                root_ports.push(*port);
                for flow in found.iter().take(5) {
                    evidence.push(Evidence {
                        rule: "flow_contention_in_loop".into(),
                        from: label(self.incident, *port),
                        to: flow.flow.to_string(),
                        weight: flow.weight,
                        note: format!(
                            "loop port {} has flow contention: {} contributes {:.1}",
                            label(self.incident, *port),
                            flow.flow,
                            flow.weight
                        ),
                    });
                }
                flows.extend(found);
            }
        }
        flows.sort_by(|a, b| b.weight.total_cmp(&a.weight).then(a.flow.cmp(&b.flow)));
        flows.truncate(MAX_LISTED_FLOWS);
        let kind = if flows.is_empty() {
            evidence.push(Evidence {
                rule: "no_contention_in_loop".into(),
                from: label(self.incident, members[0]),
                to: String::new(),
                weight: 0.0,
                note: "no loop port shows flow contention in the analysed epochs: the initiating burst may predate the telemetry window; the loop's own ports are the root cause (the cyclic buffer dependency holds with or without the burst that closed it)".into(),
            });
            root_ports = members.to_vec();
            RootCauseKind::Unknown
        } else {
            RootCauseKind::FlowContention
        };
        let micro_burst = if flows.iter().any(|f| f.burst.is_some()) {
            Some(flows.iter().any(|f| f.burst == Some(true)))
        } else {
            None
        };
        LoopInitiator {
            anomaly_type: AnomalyType::DeadlockInitiatorInLoop,
            root: RootCause {
                kind,
                ports: root_ports
                    .iter()
                    .map(|p| self.incident.port_id(*p))
                    .collect(),
                injector: None,
                receiver: None,
                flows,
                micro_burst,
                ecmp: None,
            },
            root_ports,
            paths: Vec::new(),
        }
    }

    /// Initiator out of loop (Alg. 2 l.14-17): follows the holding exits to the sinks beyond
    /// the loop and classifies each (`AnalyzeFlowContention`, l.1-11). The anomaly type
    /// follows the strongest kind of initiator (PFC injection over flow contention over
    /// unknown); every sink is a root port, and each gets a spreading path
    /// start → loop entry → around the loop to the exit port → sink.
    fn initiator_out_of_loop(
        &self,
        members: &[PortRef],
        member_set: &BTreeSet<PortRef>,
        entry: PortRef,
        path: &[PortRef],
        exits: &[(PortRef, PortRef, f64)],
        evidence: &mut Vec<Evidence>,
    ) -> LoopInitiator {
        for (from, to, weight) in exits {
            evidence.push(Evidence {
                rule: "loop_exit".into(),
                from: label(self.incident, *from),
                to: label(self.incident, *to),
                weight: round3(*weight),
                note: format!(
                    "loop port {} also waits for {} outside the loop (out-deg_P > 1)",
                    label(self.incident, *from),
                    label(self.incident, *to)
                ),
            });
        }
        let exit_targets: Vec<PortRef> = exits.iter().map(|(_, to, _)| *to).collect();
        let beyond = self.bfs(&exit_targets, &|p| member_set.contains(&p));
        let sinks: Vec<PortRef> = beyond
            .keys()
            .filter(|p| self.graph.port_edges(**p).is_empty())
            .copied()
            .collect();
        let mut classes: Vec<(PortRef, SinkClass)> =
            sinks.iter().map(|s| (*s, self.classify_sink(*s))).collect();
        // The type follows the strongest kind of initiator: a host (or switch)
        // injecting PFC holds its port for as long as it keeps pausing, while a
        // contended queue drains at line rate — a loop fed by both is held by the
        // injection. Contention sinks stay among the root ports.
        let rank = |kind: RootCauseKind| match kind {
            RootCauseKind::HostPfcInjection
            | RootCauseKind::SwitchPfcInjection
            | RootCauseKind::SlowReceiver => 0,
            RootCauseKind::FlowContention => 1,
            RootCauseKind::Unknown => 2,
        };
        classes.sort_by_key(|(port, class)| (rank(class.root.kind), *port));
        let mut root_ports = Vec::new();
        let mut paths = Vec::new();
        let mut root: Option<RootCause> = None;
        for (port, class) in classes {
            root_ports.push(port);
            evidence.extend(class.evidence);
            let exit_path = Self::path_to(&beyond, port);
            evidence.extend(self.edge_evidence(&exit_path));
            // start → loop entry → around the loop to the exit port → sink.
            let exit_from = exit_path.first().and_then(|target| {
                exits
                    .iter()
                    .find(|(_, to, _)| to == target)
                    .map(|(from, _, _)| *from)
            });
            let mut full = path.to_vec();
            if let (Some(from), Some(at)) = (exit_from, members.iter().position(|p| *p == entry)) {
                for step in 1..members.len() {
                    if full.last() == Some(&from) {
                        break;
                    }
                    full.push(members[(at + step) % members.len()]);
                }
            }
            for port in &exit_path {
                if !full.contains(port) {
                    full.push(*port);
                }
            }
            paths.push(full);
            match root.as_mut() {
                None => root = Some(class.root),
                Some(existing) => {
                    existing.ports.extend(class.root.ports);
                    existing.flows.extend(class.root.flows);
                }
            }
        }
        let root = root.unwrap_or(RootCause {
            kind: RootCauseKind::Unknown,
            ports: Vec::new(),
            injector: None,
            receiver: None,
            flows: Vec::new(),
            micro_burst: None,
            ecmp: None,
        });
        let anomaly_type = match root.kind {
            RootCauseKind::FlowContention => AnomalyType::DeadlockInitiatorOutOfLoopFlowContention,
            RootCauseKind::HostPfcInjection
            | RootCauseKind::SwitchPfcInjection
            | RootCauseKind::SlowReceiver => AnomalyType::DeadlockInitiatorOutOfLoopHostInjection,
            RootCauseKind::Unknown => AnomalyType::UnresolvedPfc,
        };
        LoopInitiator {
            anomaly_type,
            root,
            root_ports,
            paths,
        }
    }

    /// The victim met contention at a port that is also the origin of PFC spreading (the
    /// initial congestion point of a backpressure tree, or a port of a deadlocked loop or of
    /// its out-of-loop initiator) that its walk did not reach through a pause — e.g. it is
    /// one of the incast flows at the root itself. That is one anomaly, not two: the
    /// contention draft is folded into the PFC anomaly, which then affects the victim.
    fn absorb_contention_at_pfc_origins(&mut self) {
        let contended: Vec<PortRef> = self
            .drafts
            .keys()
            .filter_map(|key| match key {
                AnomalyKey::Contention(port) => Some(*port),
                _ => None,
            })
            .collect();
        for port in contended {
            let origin = self.drafts.iter().find_map(|(key, draft)| {
                let holds = match key {
                    AnomalyKey::Sink(sink) => {
                        *sink == port && draft.anomaly_type == AnomalyType::PfcBackpressure
                    }
                    AnomalyKey::Loop(_) => {
                        draft.loop_ports.contains(&port) || draft.root_ports.contains(&port)
                    }
                    AnomalyKey::Contention(_) => false,
                };
                holds.then_some(*key)
            });
            let Some(origin) = origin else {
                continue;
            };
            let Some(contention) = self.drafts.remove(&AnomalyKey::Contention(port)) else {
                continue;
            };
            let port_label = label(self.incident, port);
            if let Some(draft) = self.drafts.get_mut(&origin) {
                draft.affects_victim = true;
                draft.evidence.push(Evidence {
                    rule: "victim_at_pfc_origin".into(),
                    from: port_label.clone(),
                    to: String::new(),
                    weight: 0.0,
                    note: format!(
                        "the victim met contention at {port_label}, which is where this PFC spreading starts: it is one of the flows at the origin"
                    ),
                });
                for evidence in contention.evidence {
                    if !draft.evidence.contains(&evidence) {
                        draft.evidence.push(evidence);
                    }
                }
            }
        }
    }

    /// Normal flow contention at a victim port (Alg. 2 l.39-40).
    fn check_contention(&mut self, port: PortRef, victim: FiveTuple) {
        let contributors: Vec<FlowContribution> = self
            .contributors(port)
            .into_iter()
            .filter(|f| f.flow != victim)
            .collect();
        if contributors.is_empty() {
            return;
        }
        let victim_weight = self
            .graph
            .contributions(port)
            .iter()
            .find(|(f, _)| *f == victim)
            .map(|(_, w)| *w);
        let victim_depth = self
            .graph
            .flow_at(victim, port)
            .map(|f| f.mean_unpaused_depth())
            .unwrap_or(0.0);
        let waited = victim_weight.is_some_and(|w| w < 0.0)
            || victim_depth >= self.options.congestion_queue_bytes as f64;
        if !waited {
            return;
        }
        let port_label = label(self.incident, port);
        let mut evidence = vec![Evidence {
            rule: "victim_not_paused".into(),
            from: victim.to_string(),
            to: port_label.clone(),
            weight: 0.0,
            note: format!(
                "the victim has no paused packets at {port_label} (flow→port weight 0) but met a mean queue of {victim_depth:.0} B"
            ),
        }];
        if let Some(weight) = victim_weight {
            evidence.push(Evidence {
                rule: "victim_contention_weight".into(),
                from: port_label.clone(),
                to: victim.to_string(),
                weight: round3(weight),
                note: format!("port→flow weight of the victim at {port_label} is {weight:.1}"),
            });
        }
        for flow in contributors.iter().take(5) {
            evidence.push(Evidence {
                rule: "flow_contention".into(),
                from: port_label.clone(),
                to: flow.flow.to_string(),
                weight: flow.weight,
                note: format!(
                    "port→flow weight {:.1} > 0: {} is a contention contributor",
                    flow.weight, flow.flow
                ),
            });
        }
        let micro_burst = if contributors.iter().any(|f| f.burst.is_some()) {
            Some(contributors.iter().any(|f| f.burst == Some(true)))
        } else {
            None
        };
        self.merge(
            AnomalyKey::Contention(port),
            Draft {
                anomaly_type: AnomalyType::NormalFlowContention,
                affects_victim: true,
                root: RootCause {
                    kind: RootCauseKind::FlowContention,
                    ports: vec![self.incident.port_id(port)],
                    injector: None,
                    receiver: None,
                    flows: contributors,
                    micro_burst,
                    ecmp: self.ecmp_check(port),
                },
                root_ports: vec![port],
                paths: BTreeSet::new(),
                loop_ports: Vec::new(),
                evidence,
            },
        );
    }
}

/// Orders the ports of a strongly connected component as a cycle: the longest simple cycle
/// through its smallest port (heaviest edges tried first, so of equally long cycles the
/// heaviest-first one wins), found by a depth-first search of at most
/// [`MAX_CYCLE_SEARCH_STEPS`] steps (then the longest found so far). Ports no such cycle
/// covers (a component made of several cycles) follow in port order.
///
/// A greedy walk along the heaviest edge can take a chord and close a short cycle early;
/// the loop's other ports then came out of order, and every check on "consecutive loop
/// ports" (the loop's own wait-for edges, their epochs, the weakest loop edge) saw only part
/// of the loop.
fn order_cycle(graph: &ProvenanceGraph, members: &BTreeSet<PortRef>) -> Vec<PortRef> {
    let Some(first) = members.iter().next().copied() else {
        return Vec::new();
    };
    let inside = |port: PortRef| -> Vec<PortRef> {
        graph
            .port_edges(port)
            .iter()
            .map(|(to, _)| *to)
            .filter(|to| members.contains(to))
            .collect()
    };
    let mut best: Vec<PortRef> = vec![first];
    let mut path: Vec<PortRef> = vec![first];
    // Each frame: the successors of the path's port still to try.
    let mut stack: Vec<std::vec::IntoIter<PortRef>> = vec![inside(first).into_iter()];
    let mut steps = 0usize;
    while let Some(frame) = stack.last_mut() {
        if steps >= MAX_CYCLE_SEARCH_STEPS || best.len() == members.len() {
            break;
        }
        steps += 1;
        match frame.next() {
            Some(next) if next == first => {
                if path.len() > best.len() || (best.len() == 1 && path.len() == 1) {
                    best = path.clone();
                }
            }
            Some(next) if !path.contains(&next) => {
                path.push(next);
                stack.push(inside(next).into_iter());
            }
            Some(_) => {}
            None => {
                stack.pop();
                path.pop();
            }
        }
    }
    let mut order = best;
    for port in members {
        if !order.contains(port) {
            order.push(*port);
        }
    }
    order
}

fn round3(value: f64) -> f64 {
    if value.is_finite() {
        (value * 1000.0).round() / 1000.0
    } else {
        0.0
    }
}

/// The victim's egress ports in forwarding order, and where each is known from.
fn victim_path(incident: &Incident, graph: &ProvenanceGraph) -> Vec<(PortRef, &'static str)> {
    let victim = incident.victim;
    let mut ports: BTreeMap<PortRef, &'static str> = BTreeMap::new();
    for (port, _) in graph.flow_ports(victim) {
        ports.insert(*port, "flow_records");
    }
    for (switch, data) in &incident.switches {
        for polling in data.polling.iter().filter(|p| p.victim == victim) {
            for egress in polling.egress.iter().filter(|e| e.reason.victim_path()) {
                ports
                    .entry(PortRef {
                        node: *switch,
                        port: egress.port,
                    })
                    .or_insert("polling_route");
            }
        }
    }
    // Chain hops: the successor of (S, e) is the victim port on peer(S, e)'s switch.
    let by_switch: BTreeMap<u32, PortRef> = ports.keys().rev().map(|p| (p.node, *p)).collect();
    let successor = |port: PortRef| -> Option<PortRef> {
        let (peer, _) = incident.peer(port)?;
        by_switch.get(&peer.node).copied()
    };
    let successors: BTreeSet<PortRef> = ports.keys().filter_map(|p| successor(*p)).collect();
    let mut order: Vec<PortRef> = Vec::new();
    let starts: Vec<PortRef> = ports
        .keys()
        .filter(|p| !successors.contains(p))
        .copied()
        .collect();
    for start in starts {
        let mut at = Some(start);
        while let Some(port) = at {
            if order.contains(&port) {
                break;
            }
            order.push(port);
            at = successor(port);
        }
    }
    for port in ports.keys() {
        if !order.contains(port) {
            order.push(*port);
        }
    }
    order
        .into_iter()
        .map(|p| (p, ports.get(&p).copied().unwrap_or("flow_records")))
        .collect()
}

/// Flows with records at both `from` and `to`.
fn flows_through(
    port_flows: &BTreeMap<PortRef, BTreeSet<FiveTuple>>,
    from: PortRef,
    to: PortRef,
) -> Vec<FiveTuple> {
    match (port_flows.get(&from), port_flows.get(&to)) {
        (Some(a), Some(b)) => a.intersection(b).copied().collect(),
        _ => Vec::new(),
    }
}

/// Runs HAWKEYE Alg. 2 over a built provenance graph.
pub fn diagnose(
    incident: &Incident,
    graph: &ProvenanceGraph,
    options: &DiagnoseOptions,
) -> Diagnosis {
    let victim = incident.victim;
    let mut findings: Vec<Finding> = incident.findings.clone();
    let mut context = Context::new(incident, graph, options);
    let path = victim_path(incident, graph);
    if graph.flow_index(&victim).is_none() {
        findings.push(Finding {
            severity: Severity::Warning,
            code: "victim_not_seen".into(),
            message: format!(
                "no flow record of the victim {victim} in any report (evicted and lost, or outside the analysed epochs); its path is taken from the polling route only"
            ),
        });
    }
    // Where the polling packet passed, the data plane itself said whether the victim's
    // egress port was paused (HAWKEYE §3.4: the flag gains the PFC bit). That covers victim
    // packets still held behind the pause, which no flow record counts yet (they are
    // counted when they leave).
    let paused_by_polling: BTreeSet<PortRef> = incident
        .switches
        .iter()
        .flat_map(|(switch, data)| {
            data.polling
                .iter()
                .filter(|p| p.victim == victim)
                .flat_map(|p| p.egress.iter())
                .filter(|e| e.reason.victim_path() && e.reason.pfc_causality())
                .map(|e| PortRef {
                    node: *switch,
                    port: e.port,
                })
        })
        .collect();
    let victim_paused_at =
        |port: PortRef| graph.paused_at(victim, port) > 0 || paused_by_polling.contains(&port);
    // Alg. 2 l.35-38: PFC causality from every port where the victim is paused.
    for (port, _) in &path {
        let paused = graph.paused_at(victim, *port);
        if paused == 0 && paused_by_polling.contains(port) {
            let port_label = label(incident, *port);
            let lead = vec![Evidence {
                rule: "victim_paused".into(),
                from: victim.to_string(),
                to: port_label.clone(),
                weight: 0.0,
                note: format!(
                    "the polling packet found the victim's egress port {port_label} paused (its packets there are still held, so no flow record counts them yet)"
                ),
            }];
            context.trace_pfc(*port, true, lead);
        } else if paused > 0 {
            let port_label = label(incident, *port);
            let lead = vec![Evidence {
                rule: "victim_paused".into(),
                from: victim.to_string(),
                to: port_label.clone(),
                weight: paused as f64,
                note: format!("the victim has {paused} packets paused by PFC at {port_label}"),
            }];
            context.trace_pfc(*port, true, lead);
        }
    }
    // The sender's own NIC held by its first switch: the polling packet came in from the
    // sending host, and the data plane branched it for PFC causality to egress ports other
    // than the victim's (HAWKEYE §3.4: the ingress's held fanout ∩ the paused ports). The
    // host's latest packets through that ingress wait at those paused ports, so the
    // switch's buffer for the host fills and it pauses the host's NIC — the victim with it
    // (head-of-line blocking at the sender, which no switch on the victim's path sees).
    // Each such port starts a PFC walk that affects the victim.
    for (switch, data) in &incident.switches {
        for polling in data.polling.iter().filter(|p| p.victim == victim) {
            let ingress = PortRef {
                node: *switch,
                port: polling.ingress_port,
            };
            let from_sender = incident
                .peer(ingress)
                .is_some_and(|(peer, _)| incident.is_host(peer.node));
            if !from_sender {
                continue;
            }
            for egress in polling
                .egress
                .iter()
                .filter(|e| e.reason.pfc_causality() && !e.reason.victim_path())
            {
                let port = PortRef {
                    node: *switch,
                    port: egress.port,
                };
                let port_label = label(incident, port);
                let lead = vec![Evidence {
                    rule: "sender_held".into(),
                    from: victim.to_string(),
                    to: port_label.clone(),
                    weight: 0.0,
                    note: format!(
                        "the victim's sender enters {} by {}, whose latest packets wait at the paused {port_label} (the data plane's PFC branch of the polling packet): the switch's buffer for that ingress fills and it pauses the sender's NIC, the victim with it (head-of-line blocking at the sender)",
                        incident.node_name(*switch),
                        label(incident, ingress)
                    ),
                }];
                context.trace_pfc(port, true, lead);
            }
        }
    }
    // Alg. 2 l.39-40: normal flow contention where the victim is not paused.
    let pfc_roots: BTreeSet<PortRef> = context
        .drafts
        .values()
        .filter(|d| d.affects_victim)
        .flat_map(|d| d.root_ports.iter().copied())
        .collect();
    for (port, _) in &path {
        if !victim_paused_at(*port) && !pfc_roots.contains(port) {
            context.check_contention(*port, victim);
        }
    }
    // PFC trees the victim's walk did not reach ("several concurrent anomalies").
    loop {
        let pending: Vec<PortRef> = graph
            .port_out
            .keys()
            .filter(|p| !context.visited.contains(p))
            .copied()
            .collect();
        let Some(first) = pending.first().copied() else {
            break;
        };
        let start = pending
            .iter()
            .find(|p| !context.has_incoming.contains(p))
            .copied()
            .unwrap_or(first);
        context.trace_pfc(start, false, Vec::new());
        context.visited.insert(start);
    }
    context.absorb_contention_at_pfc_origins();
    // Findings about the PFC path leaving the telemetry.
    for (port, summary) in &graph.ports {
        let peer_name = summary
            .peer
            .map(|p| incident.node_name(p.node))
            .unwrap_or_default();
        if summary.pause.held_epochs > 0 {
            findings.push(Finding {
                severity: Severity::Info,
                code: "held_traffic".into(),
                message: format!(
                    "{} was paused in {} epoch(s) in which {peer_name} recorded no traffic from it while it kept pausing (frozen, or held behind the pause all epoch): its newest earlier epoch with that traffic stands for what its buffers hold",
                    label(incident, *port),
                    summary.pause.held_epochs,
                ),
            });
        }
        if summary.pause.current_epochs > 0 {
            findings.push(Finding {
                severity: Severity::Info,
                code: "pause_across_rings".into(),
                message: format!(
                    "{} is paused at collection in its switch's latest epoch, which {peer_name} recorded no telemetry for (that switch kept recording later epochs): it is taken to wait for what {peer_name} holds in its latest epoch",
                    label(incident, *port),
                ),
            });
        }
        if summary.pause.peer_unreported_epochs > 0 {
            findings.push(Finding {
                severity: Severity::Warning,
                code: "pfc_path_leaves_telemetry".into(),
                message: format!(
                    "{} was paused in {} epoch(s) by {peer_name}, which has no telemetry for them: the PFC spreading path cannot be followed further",
                    label(incident, *port),
                    summary.pause.peer_unreported_epochs,
                ),
            });
        }
        if summary.pause.unmetered_epochs > 0 {
            findings.push(Finding {
                severity: Severity::Info,
                code: "pause_without_meter".into(),
                message: format!(
                    "{} was paused in {} epoch(s) in which {peer_name}'s causality meter tied its traffic to no congested port: it is taken to wait for the ports {peer_name}'s data plane branched polling packets from that link to (still paused), or else for {peer_name}'s congested egress ports of those epochs",
                    label(incident, *port),
                    summary.pause.unmetered_epochs,
                ),
            });
        }
        if summary.untimed_epochs > 0 {
            findings.push(Finding {
                severity: Severity::Info,
                code: "untimed_replay".into(),
                message: format!(
                    "{}: {} epoch(s) of contention were replayed without flow enqueue windows (HAWKEYE's even spreading); burst attribution there is approximate",
                    label(incident, *port),
                    summary.untimed_epochs
                ),
            });
        }
    }

    // Spreading flows need, per port, the flows with records there.
    let mut wanted: BTreeSet<PortRef> = BTreeSet::new();
    for draft in context.drafts.values() {
        for path in &draft.paths {
            wanted.extend(path.iter().copied());
        }
        wanted.extend(draft.loop_ports.iter().copied());
    }
    let mut port_flows: BTreeMap<PortRef, BTreeSet<FiveTuple>> = BTreeMap::new();
    if !wanted.is_empty() {
        for (flow, ports) in graph.flows.iter() {
            for (port, _) in ports {
                if wanted.contains(port) {
                    port_flows.entry(*port).or_default().insert(flow);
                }
            }
        }
    }

    let mut anomalies: Vec<Anomaly> = Vec::new();
    for draft in context.drafts.into_values() {
        let root_flows: BTreeSet<FiveTuple> = draft.root.flows.iter().map(|f| f.flow).collect();
        let mut spreading: Vec<SpreadingFlow> = Vec::new();
        let mut local: BTreeMap<PortRef, PortContention> = BTreeMap::new();
        for path in &draft.paths {
            for pair in path.windows(2) {
                let mut through: Vec<SpreadingFlow> = flows_through(&port_flows, pair[0], pair[1])
                    .into_iter()
                    .filter(|f| *f != victim && !root_flows.contains(f))
                    .map(|flow| SpreadingFlow {
                        flow,
                        from: incident.port_id(pair[0]),
                        to: incident.port_id(pair[1]),
                        paused_packets: graph.paused_at(flow, pair[0]),
                    })
                    .filter(|s| s.paused_packets > 0)
                    .collect();
                through.sort_by(|a, b| {
                    b.paused_packets
                        .cmp(&a.paused_packets)
                        .then(a.flow.cmp(&b.flow))
                });
                through.truncate(MAX_LISTED_FLOWS);
                for item in through {
                    if !spreading
                        .iter()
                        .any(|s| s.flow == item.flow && s.from == item.from && s.to == item.to)
                    {
                        spreading.push(item);
                    }
                }
            }
            for port in path {
                if draft.root_ports.contains(port) || local.contains_key(port) {
                    continue;
                }
                let flows = context_contributors(incident, graph, options, *port);
                if !flows.is_empty() {
                    local.insert(
                        *port,
                        PortContention {
                            port: incident.port_id(*port),
                            flows,
                        },
                    );
                }
            }
        }
        let mut loop_flows: BTreeSet<FiveTuple> = BTreeSet::new();
        if !draft.loop_ports.is_empty() {
            let mut cycle = draft.loop_ports.clone();
            cycle.push(draft.loop_ports[0]);
            for pair in cycle.windows(2) {
                loop_flows.extend(flows_through(&port_flows, pair[0], pair[1]));
            }
        }
        // A path that is the tail of a longer one (the victim paused at consecutive hops)
        // adds nothing.
        let spreading_paths: Vec<Vec<_>> = draft
            .paths
            .iter()
            .filter(|p| {
                !draft
                    .paths
                    .iter()
                    .any(|q| q.len() > p.len() && q.ends_with(p))
            })
            .map(|p| p.iter().map(|port| incident.port_id(*port)).collect())
            .collect();
        let summary = summarise(
            &draft.anomaly_type,
            &draft.root,
            &draft.loop_ports,
            incident,
        );
        anomalies.push(Anomaly {
            id: 0,
            anomaly_type: draft.anomaly_type,
            affects_victim: draft.affects_victim,
            root_cause: draft.root,
            spreading_paths,
            loop_ports: draft
                .loop_ports
                .iter()
                .map(|p| incident.port_id(*p))
                .collect(),
            loop_flows: loop_flows.into_iter().collect(),
            spreading_flows: spreading,
            local_contention: local.into_values().collect(),
            evidence: draft.evidence,
            summary,
        });
    }
    anomalies.sort_by(|a, b| {
        b.affects_victim
            .cmp(&a.affects_victim)
            .then(a.anomaly_type.cmp(&b.anomaly_type))
            .then(a.root_cause.ports.cmp(&b.root_cause.ports))
            .then(a.loop_ports.cmp(&b.loop_ports))
    });
    for (index, anomaly) in anomalies.iter_mut().enumerate() {
        anomaly.id = index + 1;
    }
    findings.sort();
    findings.dedup();

    let victim_path: Vec<VictimHop> = path
        .iter()
        .map(|(port, source)| {
            let at = graph.flow_at(victim, *port);
            VictimHop {
                port: incident.port_id(*port),
                packets: at.map(|f| f.packets).unwrap_or(0),
                paused_packets: at.map(|f| f.paused).unwrap_or(0),
                mean_queue_depth_bytes: round3(at.map(|f| f.mean_unpaused_depth()).unwrap_or(0.0)),
                source: (*source).to_string(),
            }
        })
        .collect();
    let verdict = verdict(&anomalies, &findings);
    let start_ns = incident.epoch_starts.first().copied().unwrap_or(0);
    let end_ns = incident
        .epoch_starts
        .last()
        .map(|s| s + incident.epoch_ns)
        .unwrap_or(0);
    Diagnosis {
        schema_version: DIAGNOSIS_SCHEMA_VERSION,
        victim,
        window: Window {
            epoch_ns: incident.epoch_ns,
            start_ns,
            end_ns,
            epochs: incident.epoch_starts.len(),
        },
        switches_reported: incident
            .switches
            .keys()
            .map(|s| incident.node_name(*s))
            .collect(),
        event_ids: incident.event_ids.clone(),
        victim_path,
        anomalies,
        findings,
        verdict,
    }
}

fn context_contributors(
    incident: &Incident,
    graph: &ProvenanceGraph,
    options: &DiagnoseOptions,
    port: PortRef,
) -> Vec<FlowContribution> {
    let context = Context {
        incident,
        graph,
        options,
        loops: Vec::new(),
        loop_of: BTreeMap::new(),
        has_incoming: BTreeSet::new(),
        drafts: BTreeMap::new(),
        visited: BTreeSet::new(),
    };
    context.contributors(port)
}

fn flow_list(flows: &[FlowContribution]) -> String {
    let mut names: Vec<String> = flows.iter().take(3).map(|f| f.flow.to_string()).collect();
    if flows.len() > 3 {
        names.push(format!("+{} more", flows.len() - 3));
    }
    names.join(", ")
}

fn summarise(
    anomaly_type: &AnomalyType,
    root: &RootCause,
    loop_ports: &[PortRef],
    incident: &Incident,
) -> String {
    let at = root
        .ports
        .iter()
        .map(|p| p.label.clone())
        .collect::<Vec<_>>()
        .join(", ");
    let loop_text = loop_ports
        .iter()
        .map(|p| label(incident, *p))
        .collect::<Vec<_>>()
        .join(" → ");
    let cause = match root.kind {
        RootCauseKind::FlowContention => {
            let what = match (
                root.micro_burst,
                root.ecmp.as_ref().is_some_and(|e| e.imbalanced),
            ) {
                (Some(true), _) => "micro-burst flows",
                (_, true) => "flows on an ECMP-imbalanced uplink",
                _ => "contending flows",
            };
            if root.flows.is_empty() {
                format!("flow contention at {at} (flows not resolved)")
            } else {
                format!("{what} {} at {at}", flow_list(&root.flows))
            }
        }
        RootCauseKind::HostPfcInjection => format!(
            "PFC injected by host {} into {at}",
            root.injector.as_deref().unwrap_or("?")
        ),
        RootCauseKind::SwitchPfcInjection => format!(
            "PFC from switch {} into {at} without congestion behind it",
            root.injector.as_deref().unwrap_or("?")
        ),
        RootCauseKind::SlowReceiver => format!(
            "host {} draining slower than {at} sends (its pauses come and go with the port's queue)",
            root.receiver.as_deref().unwrap_or("?")
        ),
        RootCauseKind::Unknown => format!("unknown (telemetry ends at {at})"),
    };
    match anomaly_type {
        AnomalyType::DeadlockInitiatorInLoop
        | AnomalyType::DeadlockInitiatorOutOfLoopFlowContention
        | AnomalyType::DeadlockInitiatorOutOfLoopHostInjection => {
            format!(
                "{}: loop {loop_text}; caused by {cause}",
                anomaly_type.title()
            )
        }
        _ => format!("{}: caused by {cause}", anomaly_type.title()),
    }
}

fn verdict(anomalies: &[Anomaly], findings: &[Finding]) -> String {
    let warnings = findings
        .iter()
        .filter(|f| f.severity == Severity::Warning)
        .count();
    let suffix = if warnings > 0 {
        format!(" ({warnings} incomplete-telemetry warning(s))")
    } else {
        String::new()
    };
    match anomalies.iter().find(|a| a.affects_victim) {
        Some(first) => {
            let others = anomalies.len() - 1;
            if others > 0 {
                format!(
                    "{} — and {others} more anomal{}{suffix}",
                    first.summary,
                    if others == 1 { "y" } else { "ies" }
                )
            } else {
                format!("{}{suffix}", first.summary)
            }
        }
        None if anomalies.is_empty() => {
            format!("no anomaly found on the victim's path{suffix}")
        }
        None => format!(
            "the victim is not affected by the {} anomal{} found{suffix}",
            anomalies.len(),
            if anomalies.len() == 1 { "y" } else { "ies" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loop_is_ordered_around_its_whole_cycle_not_around_a_chord() {
        // Five loop ports p0 → p1 → p2 → p3 → p4 → p0, and a heavier chord p0 → p3: the
        // heaviest-edge walk from p0 closes p0 → p3 → p4 → p0 and leaves p1, p2 out of
        // order, so "consecutive loop ports" would not be the loop's own edges.
        let port = |i: u16| PortRef { node: 1, port: i };
        let mut graph = ProvenanceGraph::default();
        for i in 0..5u16 {
            graph
                .port_out
                .insert(port(i), vec![(port((i + 1) % 5), 10.0)]);
        }
        graph
            .port_out
            .insert(port(0), vec![(port(3), 50.0), (port(1), 10.0)]);
        let members: BTreeSet<PortRef> = (0..5).map(port).collect();
        let order = order_cycle(&graph, &members);
        assert_eq!(order, (0..5).map(port).collect::<Vec<_>>());
        for (k, from) in order.iter().enumerate() {
            let to = order[(k + 1) % order.len()];
            assert!(
                graph.port_edges(*from).iter().any(|(t, _)| *t == to),
                "{order:?}: {from:?} does not wait for {to:?}"
            );
        }
    }
}
