//! Fabric families of the widened evaluation: the paper's K=4 fat-tree and fabrics drawn at
//! random — two-tier leaf-spine, three-tier Clos and rail-optimised — with mixed link speeds
//! (25–400 Gbit/s hosts and fabric), oversubscription from 1:1 to 4:1, and the buffers and
//! PFC/ECN thresholds of deployed switches.
//!
//! A [`FabricSpec`] is the drawn fabric; [`FabricView`] is its built topology as the trace
//! generator sees it (which switch each host NIC hangs off, the switch graph, shortest paths
//! and simple cycles), so that anomalies are placed by the graph, not by names.

use super::EvalError;
use hawkmesh_netsim::rng::Rng;
use hawkmesh_netsim::Scenario;
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::path::PathBuf;

/// A family of fabrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Family {
    /// HAWKEYE's evaluation fabric (§4.1): K=4 fat-tree, 100 Gbit/s links, 2 µs.
    K4,
    /// Two tiers: leaves and spines.
    LeafSpine,
    /// Three tiers: ToR, aggregation and core switches in pods.
    Clos,
    /// Rail-optimised: NIC r of every host of a group on the group's rail switch r.
    Rail,
}

impl Family {
    /// Every family, in report order.
    pub const ALL: [Family; 4] = [Family::K4, Family::LeafSpine, Family::Clos, Family::Rail];

    /// Name on the command line and in files.
    pub fn name(self) -> &'static str {
        match self {
            Family::K4 => "k4",
            Family::LeafSpine => "leaf-spine",
            Family::Clos => "clos",
            Family::Rail => "rail",
        }
    }

    /// Human title.
    pub fn title(self) -> &'static str {
        match self {
            Family::K4 => "K=4 fat-tree, 100G (HAWKEYE §4.1)",
            Family::LeafSpine => "leaf-spine, mixed speeds, 1:1–4:1",
            Family::Clos => "3-tier Clos, mixed speeds, 1:1–4:1",
            Family::Rail => "rail-optimised, 2–4 rails",
        }
    }

    /// Parses a family name.
    pub fn parse(text: &str) -> Result<Family, EvalError> {
        let wanted = text.trim().to_ascii_lowercase().replace('_', "-");
        Family::ALL
            .into_iter()
            .find(|f| f.name() == wanted)
            .ok_or_else(|| {
                EvalError::Config(format!(
                    "unknown fabric family {text:?}; the families are {}",
                    Family::ALL.map(Family::name).join(", ")
                ))
            })
    }

    /// Parses a command line's list of family names; `all` stands for every family.
    pub fn parse_list(names: &[String]) -> Result<Vec<Family>, EvalError> {
        if names.iter().any(|f| f.trim() == "all") {
            Ok(Family::ALL.to_vec())
        } else {
            names.iter().map(|name| Family::parse(name)).collect()
        }
    }

    pub(crate) fn stream(self) -> u64 {
        match self {
            Family::K4 => 0,
            Family::LeafSpine => 1,
            Family::Clos => 2,
            Family::Rail => 3,
        }
    }
}

impl std::fmt::Display for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One drawn fabric: the `[topology]` of the scenario and the switch settings that go with
/// it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FabricSpec {
    /// The family.
    pub family: Family,
    /// netsim's topology kind.
    pub kind: String,
    /// The kind's integer fields, in order (`k`, `leaves`, ...).
    pub shape: Vec<(String, u32)>,
    /// Host link speed, Gbit/s.
    pub host_gbps: f64,
    /// Switch-to-switch link speed, Gbit/s.
    pub fabric_gbps: f64,
    /// One-way link delay, ns.
    pub delay_ns: u64,
    /// Host bandwidth over uplink bandwidth at the first tier (1 = non-blocking).
    pub oversubscription: f64,
    /// NICs per host.
    pub rails: u32,
    /// ECN Kmin per Gbit/s, KB (`None`: netsim's default, as in the paper's fabric).
    pub kmin_kb_per_gbps: Option<f64>,
    /// ECN Kmax per Gbit/s, KB.
    pub kmax_kb_per_gbps: Option<f64>,
    /// ECN marking probability at Kmax.
    pub pmax: Option<f64>,
    /// PFC dynamic-threshold shift (`None`: netsim's default).
    pub pfc_alpha_shift: Option<u32>,
}

impl FabricSpec {
    /// HAWKEYE's fabric: K=4 fat-tree, 100 Gbit/s, 2 µs, netsim's default thresholds.
    pub fn k4() -> FabricSpec {
        FabricSpec {
            family: Family::K4,
            kind: "fat_tree".into(),
            shape: vec![("k".into(), 4)],
            host_gbps: 100.0,
            fabric_gbps: 100.0,
            delay_ns: 2000,
            oversubscription: 1.0,
            rails: 1,
            kmin_kb_per_gbps: None,
            kmax_kb_per_gbps: None,
            pmax: None,
            pfc_alpha_shift: None,
        }
    }

    /// Draws a fabric of `family`. `diverse` asks for at least two uplinks per first-tier
    /// switch (a loop that must not be the only path between its ends: out-of-loop
    /// deadlocks steer flows around it).
    pub fn draw(family: Family, diverse: bool, rng: &mut Rng) -> FabricSpec {
        let pick = |rng: &mut Rng, from: &[u32]| from[rng.below(from.len() as u64) as usize];
        let pick_f = |rng: &mut Rng, from: &[f64]| from[rng.below(from.len() as u64) as usize];
        let mut spec = FabricSpec::k4();
        spec.family = family;
        if family == Family::K4 {
            return spec;
        }
        spec.delay_ns = u64::from(pick(rng, &[1000, 1500, 2000]));
        // Deployed ECN profiles: Kmin 1–4 KB per Gbit/s, Kmax 4× Kmin, Pmax 5–20 %
        // (PARALEON Table I's expert setting at 400G is 4 and 16 KB per Gbit/s).
        let kmin = pick_f(rng, &[1.0, 2.0, 4.0]);
        spec.kmin_kb_per_gbps = Some(kmin);
        spec.kmax_kb_per_gbps = Some(kmin * 4.0);
        spec.pmax = Some(pick_f(rng, &[0.05, 0.1, 0.2]));
        spec.pfc_alpha_shift = Some(pick(rng, &[2, 3]));
        match family {
            Family::K4 => {}
            Family::LeafSpine | Family::Clos => {
                let host = pick_f(rng, &[25.0, 50.0, 100.0, 200.0]);
                let ratios: Vec<f64> = [1.0, 2.0, 4.0]
                    .into_iter()
                    .filter(|r| host * r <= 400.0)
                    .collect();
                let ratio = pick_f(rng, &ratios);
                let over = pick_f(rng, &[1.0, 2.0, 3.0, 4.0]);
                spec.host_gbps = host;
                spec.fabric_gbps = host * ratio;
                // Uplinks per first-tier switch (spines, or aggregation switches per pod)
                // such that hosts per switch = over × uplinks × ratio stays within 2..=8.
                let choices: Vec<u32> = (if diverse { 2 } else { 1 }..=4u32)
                    .filter(|u| {
                        let hosts = over * f64::from(*u) * ratio;
                        (2.0..=8.0).contains(&hosts) && hosts.fract() == 0.0
                    })
                    .collect();
                let (uplinks, hosts) = if choices.is_empty() {
                    // The ratio alone exceeds the bound: the fewest uplinks, the most hosts
                    // allowed.
                    (
                        if diverse { 2 } else { 1 },
                        8u32.min((over * ratio) as u32).max(2),
                    )
                } else {
                    let u = pick(rng, &choices);
                    (u, (over * f64::from(u) * ratio) as u32)
                };
                spec.oversubscription =
                    f64::from(hosts) * host / (f64::from(uplinks) * spec.fabric_gbps);
                if family == Family::LeafSpine {
                    // An out-of-loop deadlock needs leaves for the destination, the
                    // initiator and the flows entering the loop besides the loop's own.
                    let leaves = pick(rng, if diverse { &[4, 5, 6] } else { &[3, 4, 5, 6] });
                    spec.kind = "leaf_spine".into();
                    spec.shape = vec![
                        ("leaves".into(), leaves),
                        ("spines".into(), uplinks),
                        ("hosts_per_leaf".into(), hosts),
                    ];
                } else {
                    let aggs = uplinks.clamp(1, 2);
                    let hosts = if aggs == uplinks {
                        hosts
                    } else {
                        ((over * f64::from(aggs) * ratio) as u32).clamp(2, 8)
                    };
                    spec.oversubscription =
                        f64::from(hosts) * host / (f64::from(aggs) * spec.fabric_gbps);
                    let pods = pick(rng, &[3, 4]);
                    let cores = aggs * if diverse { 2 } else { pick(rng, &[1, 2]) };
                    spec.kind = "clos".into();
                    spec.shape = vec![
                        ("pods".into(), pods),
                        ("tors_per_pod".into(), 2),
                        ("aggs_per_pod".into(), aggs),
                        ("cores".into(), cores),
                        ("hosts_per_tor".into(), hosts),
                    ];
                }
            }
            Family::Rail => {
                let host = pick_f(rng, &[100.0, 200.0, 400.0]);
                let ratios: Vec<f64> = [1.0, 2.0]
                    .into_iter()
                    .filter(|r| host * r <= 400.0)
                    .collect();
                spec.host_gbps = host;
                spec.fabric_gbps = host * pick_f(rng, &ratios);
                let groups = if diverse { 3 } else { pick(rng, &[2, 3]) };
                let hosts = pick(rng, &[2, 3, 4]);
                let rails = pick(rng, &[2, 4]);
                let spines = if diverse { 2 } else { pick(rng, &[1, 2]) };
                spec.rails = rails;
                spec.oversubscription =
                    f64::from(hosts) * host / (f64::from(spines) * spec.fabric_gbps);
                spec.kind = "rail".into();
                spec.shape = vec![
                    ("groups".into(), groups),
                    ("hosts_per_group".into(), hosts),
                    ("rails".into(), rails),
                    ("spines".into(), spines),
                ];
            }
        }
        spec
    }

    /// The `[topology]` table.
    pub fn topology_toml(&self) -> String {
        let mut t = format!("[topology]\nkind = \"{}\"\n", self.kind);
        for (field, value) in &self.shape {
            let _ = writeln!(t, "{field} = {value}");
        }
        let _ = write!(
            t,
            "host_gbps = {}\nfabric_gbps = {}\ndelay_ns = {}",
            self.host_gbps, self.fabric_gbps, self.delay_ns
        );
        t
    }

    /// Lines of the `[switch]` table other than the buffer (empty for the paper's fabric).
    pub fn switch_toml(&self) -> String {
        let mut t = String::new();
        if let Some(shift) = self.pfc_alpha_shift {
            let _ = writeln!(t, "pfc_alpha_shift = {shift}");
        }
        if self.kmin_kb_per_gbps.is_some() || self.pmax.is_some() {
            let _ = writeln!(t, "[switch.ecn]");
            if let Some(kmin) = self.kmin_kb_per_gbps {
                let _ = writeln!(t, "kmin_kb_per_gbps = {kmin}");
            }
            if let Some(kmax) = self.kmax_kb_per_gbps {
                let _ = writeln!(t, "kmax_kb_per_gbps = {kmax}");
            }
            if let Some(pmax) = self.pmax {
                let _ = writeln!(t, "pmax = {pmax}");
            }
        }
        t
    }

    /// PFC headroom a switch port of `gbps` reserves (netsim's default: 3 × rate × delay), bytes.
    fn headroom_bytes(&self, gbps: f64) -> f64 {
        3.0 * gbps * self.delay_ns as f64 / 8.0
    }

    /// The smallest buffer that leaves `shared_mb` MiB shared after the headroom and the
    /// reserves of the busiest switch, MiB (rounded up to 0.5).
    pub fn buffer_with_shared(&self, view: &FabricView, shared_mb: f64) -> f64 {
        let mut worst = 0.0f64;
        for node in &view.topo.nodes {
            if node.kind != NodeKind::Switch {
                continue;
            }
            let reserved: f64 = view
                .topo
                .links
                .iter()
                .filter(|l| l.a.node == node.id || l.b.node == node.id)
                .map(|l| self.headroom_bytes(l.gbps) + 8.0 * 4096.0)
                .sum();
            worst = worst.max(reserved);
        }
        let mb = worst / 1_048_576.0 + shared_mb;
        (mb * 2.0).ceil() / 2.0
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        let shape: Vec<String> = self
            .shape
            .iter()
            .map(|(field, value)| format!("{field} {value}"))
            .collect();
        format!(
            "{} ({}), {}G hosts, {}G fabric, {:.2}:1",
            self.kind,
            shape.join(", "),
            self.host_gbps,
            self.fabric_gbps,
            self.oversubscription
        )
    }

    /// The built topology.
    pub fn view(&self) -> Result<FabricView, EvalError> {
        let text = format!("version = 1\nduration_us = 1\n{}\n", self.topology_toml());
        let loaded = Scenario::parse(&text, "fabric.toml", PathBuf::from("."))
            .map_err(|e| EvalError::Config(format!("fabric {}: {e}", self.describe())))?;
        let topo = hawkmesh_netsim::fabric::build(&loaded)
            .map_err(|e| EvalError::Config(format!("fabric {}: {e}", self.describe())))?;
        Ok(FabricView::new(topo))
    }
}

/// A host of the fabric.
#[derive(Clone, Debug)]
pub struct HostView {
    /// Name (`h3`).
    pub name: String,
    /// Node id.
    pub node: NodeId,
    /// Per NIC, the switch it hangs off.
    pub tors: Vec<NodeId>,
}

/// The built fabric as the trace generator sees it.
#[derive(Clone, Debug)]
pub struct FabricView {
    /// The topology.
    pub topo: FabricTopology,
    /// Hosts in name order (`h0`, `h1`, ...).
    pub hosts: Vec<HostView>,
    /// Switch → neighbouring switches (sorted, no duplicates).
    pub adjacency: BTreeMap<NodeId, Vec<NodeId>>,
}

impl FabricView {
    /// Indexes a topology.
    pub fn new(topo: FabricTopology) -> FabricView {
        let mut hosts = Vec::new();
        let mut adjacency: BTreeMap<NodeId, BTreeSet<NodeId>> = BTreeMap::new();
        for node in &topo.nodes {
            if node.kind == NodeKind::Switch {
                adjacency.entry(node.id).or_default();
            }
        }
        for node in &topo.nodes {
            if node.kind != NodeKind::Host {
                continue;
            }
            // A host's ports are its NICs, numbered in link order.
            let mut nics: Vec<(u16, NodeId)> = topo
                .links
                .iter()
                .filter_map(|l| {
                    if l.a.node == node.id {
                        Some((l.a.port, l.b.node))
                    } else if l.b.node == node.id {
                        Some((l.b.port, l.a.node))
                    } else {
                        None
                    }
                })
                .collect();
            nics.sort();
            hosts.push(HostView {
                name: node.name.clone(),
                node: node.id,
                tors: nics.into_iter().map(|(_, tor)| tor).collect(),
            });
        }
        for link in &topo.links {
            let (a, b) = (link.a.node, link.b.node);
            if adjacency.contains_key(&a) && adjacency.contains_key(&b) {
                adjacency.entry(a).or_default().insert(b);
                adjacency.entry(b).or_default().insert(a);
            }
        }
        hosts.sort_by_key(|h| {
            (
                h.name
                    .trim_start_matches('h')
                    .parse::<u64>()
                    .unwrap_or(u64::MAX),
                h.name.clone(),
            )
        });
        FabricView {
            topo,
            hosts,
            adjacency: adjacency
                .into_iter()
                .map(|(k, v)| (k, v.into_iter().collect()))
                .collect(),
        }
    }

    /// Name of a node.
    pub fn name(&self, node: NodeId) -> String {
        self.topo
            .nodes
            .get(node as usize)
            .map_or_else(|| node.to_string(), |n| n.name.clone())
    }

    /// NICs per host (the fewest any host has).
    pub fn rails(&self) -> u32 {
        self.hosts
            .iter()
            .map(|h| h.tors.len() as u32)
            .min()
            .unwrap_or(1)
            .max(1)
    }

    /// The switch NIC `nic` of host index `host` hangs off.
    pub fn tor(&self, host: usize, nic: u32) -> NodeId {
        self.hosts[host].tors[nic as usize]
    }

    /// Shortest switch path from `from` to `to` (both included) avoiding `avoid`; ties go to
    /// the lowest node ids (deterministic).
    pub fn path(&self, from: NodeId, to: NodeId, avoid: &BTreeSet<NodeId>) -> Option<Vec<NodeId>> {
        self.path_to_any(from, &[to].into_iter().collect(), avoid)
    }

    /// Shortest switch path from `from` to the nearest of `targets`, avoiding `avoid`.
    pub fn path_to_any(
        &self,
        from: NodeId,
        targets: &BTreeSet<NodeId>,
        avoid: &BTreeSet<NodeId>,
    ) -> Option<Vec<NodeId>> {
        if avoid.contains(&from) {
            return None;
        }
        let mut parent: BTreeMap<NodeId, NodeId> = BTreeMap::new();
        let mut queue = VecDeque::from([from]);
        let mut seen: BTreeSet<NodeId> = [from].into_iter().collect();
        while let Some(node) = queue.pop_front() {
            if targets.contains(&node) {
                let mut path = vec![node];
                let mut at = node;
                while let Some(p) = parent.get(&at) {
                    path.push(*p);
                    at = *p;
                }
                path.reverse();
                return Some(path);
            }
            for next in self.adjacency.get(&node).into_iter().flatten() {
                if !avoid.contains(next) && seen.insert(*next) {
                    parent.insert(*next, node);
                    queue.push_back(*next);
                }
            }
        }
        None
    }

    /// Every simple cycle of `len` switches (2 = one link used both ways), each once, as
    /// rotations starting at its lowest node, at most `limit` of them.
    pub fn cycles(&self, len: usize, limit: usize) -> Vec<Vec<NodeId>> {
        let mut out = Vec::new();
        if len == 2 {
            for (a, next) in &self.adjacency {
                for b in next.iter().filter(|b| *b > a) {
                    out.push(vec![*a, *b]);
                    if out.len() >= limit {
                        return out;
                    }
                }
            }
            return out;
        }
        for start in self.adjacency.keys() {
            let mut path = vec![*start];
            self.extend_cycle(*start, len, &mut path, &mut out, limit);
            if out.len() >= limit {
                break;
            }
        }
        out
    }

    fn extend_cycle(
        &self,
        start: NodeId,
        len: usize,
        path: &mut Vec<NodeId>,
        out: &mut Vec<Vec<NodeId>>,
        limit: usize,
    ) {
        if out.len() >= limit {
            return;
        }
        let last = *path.last().unwrap_or(&start);
        for next in self.adjacency.get(&last).into_iter().flatten() {
            if path.len() == len {
                // Close the cycle; count each cycle once (its second node below its last).
                if *next == start && path[1] < path[len - 1] {
                    out.push(path.clone());
                }
                continue;
            }
            if *next <= start || path.contains(next) {
                continue;
            }
            path.push(*next);
            self.extend_cycle(start, len, path, out, limit);
            path.pop();
        }
    }
}
