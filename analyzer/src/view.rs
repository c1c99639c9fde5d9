//! The part of the provenance graph worth drawing, with roles and a deterministic layered
//! layout (shared by the DOT and HTML renderers).
//!
//! Shown: every port with a port→port edge, the victim's ports, root-cause and contention
//! ports; the victim flow, root-cause, spreading, loop and local-contention flows (at most
//! [`MAX_VIEW_FLOWS`]). Ports are layered by longest path over port→port edges (cycles are
//! broken at their smallest port); each flow is drawn under the port it is tied to most.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use hawkmesh_wire::telemetry::FiveTuple;
use hawkmesh_wire::topology::PortRef;
use serde::{Deserialize, Serialize};

use crate::graph::ProvenanceGraph;
use crate::ingest::Incident;
use crate::model::{Diagnosis, GraphStats, PortId};

/// Most flow nodes drawn.
pub const MAX_VIEW_FLOWS: usize = 60;

/// What a node is in the story.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Initial congestion point / root-cause port.
    RootPort,
    /// Port of a deadlock loop.
    LoopPort,
    /// Port on a spreading path.
    PathPort,
    /// Port the victim uses.
    VictimPort,
    /// Any other port.
    Port,
    /// The victim flow.
    VictimFlow,
    /// A root-cause flow.
    RootFlow,
    /// A flow spreading PFC or going round a loop.
    SpreadingFlow,
    /// Any other flow shown.
    Flow,
}

/// Node kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViewKind {
    /// Egress port.
    Port,
    /// Flow.
    Flow,
}

/// One node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewNode {
    /// Stable id (`n0`, `n1`, ...).
    pub id: String,
    /// Port or flow.
    pub kind: ViewKind,
    /// Short label.
    pub label: String,
    /// Tooltip text.
    pub detail: String,
    /// Role.
    pub role: Role,
    /// Layout column.
    pub column: usize,
    /// Layout row within the column (ports first, then flows).
    pub row: usize,
}

/// How an edge is highlighted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Highlight {
    /// Plain.
    None,
    /// On a spreading path.
    Path,
    /// On a deadlock loop.
    Loop,
    /// Root-cause contention edge.
    Root,
}

/// One edge.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewEdge {
    /// Source node id.
    pub from: String,
    /// Target node id.
    pub to: String,
    /// `port_port`, `flow_port` or `port_flow`.
    pub kind: String,
    /// Weight.
    pub weight: f64,
    /// Highlight.
    pub highlight: Highlight,
}

/// The drawable graph.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphView {
    /// Nodes, ports first.
    pub nodes: Vec<ViewNode>,
    /// Edges.
    pub edges: Vec<ViewEdge>,
    /// Counts of the whole graph.
    pub stats: GraphStats,
    /// Flow nodes of the whole graph not drawn.
    pub omitted_flows: usize,
}

fn port_ref(id: &PortId) -> PortRef {
    PortRef {
        node: id.switch,
        port: id.port,
    }
}

impl GraphView {
    /// Selects, classifies and lays out the nodes to draw.
    pub fn build(incident: &Incident, graph: &ProvenanceGraph, diagnosis: &Diagnosis) -> Self {
        let victim = diagnosis.victim;
        let mut port_role: BTreeMap<PortRef, Role> = BTreeMap::new();
        let mut set_port = |port: PortRef, role: Role| {
            let entry = port_role.entry(port).or_insert(role);
            if role < *entry {
                *entry = role;
            }
        };
        for (from, edges) in &graph.port_out {
            set_port(*from, Role::Port);
            for (to, _) in edges {
                set_port(*to, Role::Port);
            }
        }
        for hop in &diagnosis.victim_path {
            set_port(port_ref(&hop.port), Role::VictimPort);
        }
        let mut flow_role: BTreeMap<FiveTuple, Role> = BTreeMap::new();
        let mut flow_order: Vec<FiveTuple> = Vec::new();
        let mut add_flow = |flow: FiveTuple, role: Role, order: &mut Vec<FiveTuple>| match flow_role
            .get_mut(&flow)
        {
            Some(existing) => {
                if role < *existing {
                    *existing = role;
                }
            }
            None => {
                if order.len() < MAX_VIEW_FLOWS {
                    flow_role.insert(flow, role);
                    order.push(flow);
                }
            }
        };
        if graph.flow_index(&victim).is_some() {
            add_flow(victim, Role::VictimFlow, &mut flow_order);
        }
        let mut path_edges: BTreeSet<(PortRef, PortRef)> = BTreeSet::new();
        let mut loop_edges: BTreeSet<(PortRef, PortRef)> = BTreeSet::new();
        let mut root_edges: BTreeSet<(PortRef, FiveTuple)> = BTreeSet::new();
        for anomaly in &diagnosis.anomalies {
            for path in &anomaly.spreading_paths {
                for pair in path.windows(2) {
                    path_edges.insert((port_ref(&pair[0]), port_ref(&pair[1])));
                }
                for port in path {
                    set_port(port_ref(port), Role::PathPort);
                }
            }
            let loop_refs: Vec<PortRef> = anomaly.loop_ports.iter().map(port_ref).collect();
            for (index, port) in loop_refs.iter().enumerate() {
                set_port(*port, Role::LoopPort);
                let next = loop_refs[(index + 1) % loop_refs.len()];
                loop_edges.insert((*port, next));
            }
            for port in &anomaly.root_cause.ports {
                set_port(port_ref(port), Role::RootPort);
                for flow in &anomaly.root_cause.flows {
                    root_edges.insert((port_ref(port), flow.flow));
                }
            }
            for flow in &anomaly.root_cause.flows {
                add_flow(flow.flow, Role::RootFlow, &mut flow_order);
            }
            for flow in &anomaly.spreading_flows {
                add_flow(flow.flow, Role::SpreadingFlow, &mut flow_order);
            }
            for flow in &anomaly.loop_flows {
                add_flow(*flow, Role::SpreadingFlow, &mut flow_order);
            }
            for contention in &anomaly.local_contention {
                set_port(port_ref(&contention.port), Role::PathPort);
                for flow in contention.flows.iter().take(3) {
                    add_flow(flow.flow, Role::Flow, &mut flow_order);
                }
            }
        }

        // Layers: longest path over shown port→port edges, cycles broken at the smallest port.
        let ports: Vec<PortRef> = port_role.keys().copied().collect();
        let shown: BTreeSet<PortRef> = ports.iter().copied().collect();
        let mut indegree: BTreeMap<PortRef, usize> = ports.iter().map(|p| (*p, 0)).collect();
        let mut preds: BTreeMap<PortRef, Vec<PortRef>> = BTreeMap::new();
        for port in &ports {
            for (to, _) in graph.port_edges(*port) {
                if shown.contains(to) && to != port {
                    *indegree.entry(*to).or_default() += 1;
                    preds.entry(*to).or_default().push(*port);
                }
            }
        }
        let mut column: BTreeMap<PortRef, usize> = BTreeMap::new();
        let mut queue: VecDeque<PortRef> = indegree
            .iter()
            .filter(|(_, d)| **d == 0)
            .map(|(p, _)| *p)
            .collect();
        while column.len() < ports.len() {
            let next = match queue.pop_front() {
                Some(port) => port,
                None => match ports.iter().find(|p| !column.contains_key(p)) {
                    Some(port) => *port,
                    None => break,
                },
            };
            if column.contains_key(&next) {
                continue;
            }
            let layer = preds
                .get(&next)
                .map(|list| {
                    list.iter()
                        .filter_map(|p| column.get(p).map(|c| c + 1))
                        .max()
                        .unwrap_or(0)
                })
                .unwrap_or(0);
            column.insert(next, layer);
            for (to, _) in graph.port_edges(next) {
                if let Some(degree) = indegree.get_mut(to) {
                    *degree = degree.saturating_sub(1);
                    if *degree == 0 && !column.contains_key(to) {
                        queue.push_back(*to);
                    }
                }
            }
        }

        let mut nodes: Vec<ViewNode> = Vec::new();
        let mut ids: BTreeMap<PortRef, String> = BTreeMap::new();
        let mut rows: BTreeMap<usize, usize> = BTreeMap::new();
        let mut ordered_ports = ports.clone();
        ordered_ports.sort_by_key(|p| (column.get(p).copied().unwrap_or(0), *p));
        for port in &ordered_ports {
            let col = column.get(port).copied().unwrap_or(0);
            let row = rows.entry(col).or_default();
            let id = format!("n{}", nodes.len());
            ids.insert(*port, id.clone());
            let summary = graph.ports.get(port).cloned().unwrap_or_default();
            let port_id = incident.port_id(*port);
            nodes.push(ViewNode {
                id,
                kind: ViewKind::Port,
                label: port_id.label.clone(),
                detail: format!(
                    "{} → {}\npackets {}, paused {}\nmean queue {:.0} B (non-paused {:.0} B)\ncontention epochs {}",
                    port_id.label,
                    port_id.peer,
                    summary.packets,
                    summary.paused,
                    summary.mean_depth(),
                    summary.mean_unpaused_depth(),
                    summary.contention_epochs
                ),
                role: port_role.get(port).copied().unwrap_or(Role::Port),
                column: col,
                row: *row,
            });
            *row += 1;
        }
        let port_rows = rows.values().copied().max().unwrap_or(0);
        let mut flow_ids: BTreeMap<FiveTuple, String> = BTreeMap::new();
        let mut flow_rows: BTreeMap<usize, usize> = BTreeMap::new();
        for flow in &flow_order {
            // Anchor: the shown port where the flow has the most packets.
            let anchor = graph
                .flow_ports(*flow)
                .iter()
                .filter(|(p, _)| shown.contains(p))
                .max_by_key(|(p, at)| (at.packets, std::cmp::Reverse(*p)))
                .map(|(p, _)| *p);
            let col = anchor.and_then(|p| column.get(&p).copied()).unwrap_or(0);
            let row = flow_rows.entry(col).or_default();
            let id = format!("n{}", nodes.len());
            flow_ids.insert(*flow, id.clone());
            let (packets, paused) = graph
                .flow_ports(*flow)
                .iter()
                .fold((0, 0), |(a, b), (_, at)| (a + at.packets, b + at.paused));
            nodes.push(ViewNode {
                id,
                kind: ViewKind::Flow,
                label: flow.to_string(),
                detail: format!(
                    "{flow}\npacket-hops {packets}, paused {paused}\nports: {}",
                    graph
                        .flow_ports(*flow)
                        .iter()
                        .map(|(p, _)| incident.port_id(*p).label)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                role: flow_role.get(flow).copied().unwrap_or(Role::Flow),
                column: col,
                row: port_rows + *row,
            });
            *row += 1;
        }

        let mut edges: Vec<ViewEdge> = Vec::new();
        for port in &ports {
            let Some(from) = ids.get(port) else { continue };
            for (to, weight) in graph.port_edges(*port) {
                if let Some(to_id) = ids.get(to) {
                    let highlight = if loop_edges.contains(&(*port, *to)) {
                        Highlight::Loop
                    } else if path_edges.contains(&(*port, *to)) {
                        Highlight::Path
                    } else {
                        Highlight::None
                    };
                    edges.push(ViewEdge {
                        from: from.clone(),
                        to: to_id.clone(),
                        kind: "port_port".into(),
                        weight: *weight,
                        highlight,
                    });
                }
            }
            for (flow, weight) in graph.contributions(*port) {
                if let Some(to_id) = flow_ids.get(flow) {
                    let highlight = if root_edges.contains(&(*port, *flow)) {
                        Highlight::Root
                    } else {
                        Highlight::None
                    };
                    edges.push(ViewEdge {
                        from: from.clone(),
                        to: to_id.clone(),
                        kind: "port_flow".into(),
                        weight: *weight,
                        highlight,
                    });
                }
            }
        }
        for flow in &flow_order {
            let Some(from) = flow_ids.get(flow) else {
                continue;
            };
            for (port, _) in graph.flow_ports(*flow) {
                let paused = graph.paused_at(*flow, *port);
                if paused == 0 {
                    continue;
                }
                if let Some(to_id) = ids.get(port) {
                    edges.push(ViewEdge {
                        from: from.clone(),
                        to: to_id.clone(),
                        kind: "flow_port".into(),
                        weight: paused as f64,
                        highlight: Highlight::None,
                    });
                }
            }
        }
        GraphView {
            nodes,
            edges,
            stats: graph.stats.clone(),
            omitted_flows: graph.stats.flow_nodes.saturating_sub(flow_order.len()),
        }
    }
}
