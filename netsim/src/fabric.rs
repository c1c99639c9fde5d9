//! Builds the fabric graph ([`FabricTopology`]) from a [`TopologySpec`].
//!
//! Node ids: hosts first (in the order of their NIC groups), then switches, like the HPCC
//! reference. Ports are numbered per node in the order links are declared. Host IPv4
//! addresses follow the reference: node i is 11.(i / 256).(i % 256).1 (NIC n of a multi-NIC
//! host uses the fourth octet n + 1).

use crate::scenario::{LoadedScenario, ScenarioError, TopologySpec};
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeId, NodeKind, PortRef};
use std::fmt;

/// Something in a scenario's inputs that was accepted but deserves a look (e.g. lines of an
/// HPCC topology file that the reference, and therefore netsim, ignores). Printed to stderr
/// by `hawkmesh sim run`, `sim check` and `demo --scenario`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The file the warning is about.
    pub file: String,
    /// First line concerned (1-based).
    pub first_line: usize,
    /// Last line concerned (inclusive; equal to `first_line` for one line).
    pub last_line: usize,
    /// What was accepted and how.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.first_line == self.last_line {
            write!(f, "{}:{}: {}", self.file, self.first_line, self.message)
        } else {
            write!(
                f,
                "{}:{}-{}: {}",
                self.file, self.first_line, self.last_line, self.message
            )
        }
    }
}

/// Builder that hands out port numbers in declaration order.
struct Builder {
    topo: FabricTopology,
    next_port: Vec<u16>,
}

impl Builder {
    fn new() -> Self {
        Builder {
            topo: FabricTopology::default(),
            next_port: Vec::new(),
        }
    }

    fn node(&mut self, name: String, kind: NodeKind, tier: Option<u8>) -> NodeId {
        let id = self.topo.nodes.len() as NodeId;
        let ipv4 = (kind == NodeKind::Host).then(|| host_ipv4(id, 0));
        self.topo.nodes.push(NodeDesc {
            id,
            name,
            kind,
            tier,
            ipv4,
        });
        self.next_port.push(0);
        id
    }

    fn link(&mut self, a: NodeId, b: NodeId, gbps: f64, delay_ns: u64) {
        let pa = self.next_port[a as usize];
        self.next_port[a as usize] += 1;
        let pb = self.next_port[b as usize];
        self.next_port[b as usize] += 1;
        self.topo.links.push(LinkDesc {
            a: PortRef { node: a, port: pa },
            b: PortRef { node: b, port: pb },
            gbps,
            delay_ns,
        });
    }
}

/// IPv4 address of NIC `nic` of node `id` (HPCC convention, see module docs).
pub fn host_ipv4(id: NodeId, nic: u32) -> [u8; 4] {
    [11, (id / 256) as u8, (id % 256) as u8, (nic + 1) as u8]
}

/// Builds the topology; `loaded` is used to resolve and report file paths.
pub fn build(loaded: &LoadedScenario) -> Result<FabricTopology, ScenarioError> {
    build_with_warnings(loaded).map(|(topo, _)| topo)
}

/// Builds the topology and returns the warnings about its inputs (see [`Warning`]).
pub fn build_with_warnings(
    loaded: &LoadedScenario,
) -> Result<(FabricTopology, Vec<Warning>), ScenarioError> {
    let mut b = Builder::new();
    match &loaded.scenario.topology {
        TopologySpec::FatTree {
            k,
            host_gbps,
            fabric_gbps,
            delay_ns,
        } => {
            let half = k / 2;
            // A k-ary fat-tree is a Clos of k pods with k/2 ToR and k/2 aggregation switches,
            // (k/2)^2 cores and k/2 hosts per ToR.
            clos(
                &mut b,
                *k,
                half,
                half,
                half * half,
                half,
                *host_gbps,
                *fabric_gbps,
                *delay_ns,
            );
        }
        TopologySpec::Clos {
            pods,
            tors_per_pod,
            aggs_per_pod,
            cores,
            hosts_per_tor,
            host_gbps,
            fabric_gbps,
            delay_ns,
        } => clos(
            &mut b,
            *pods,
            *tors_per_pod,
            *aggs_per_pod,
            *cores,
            *hosts_per_tor,
            *host_gbps,
            *fabric_gbps,
            *delay_ns,
        ),
        TopologySpec::LeafSpine {
            leaves,
            spines,
            hosts_per_leaf,
            links_per_spine,
            host_gbps,
            fabric_gbps,
            delay_ns,
        } => {
            let hosts: Vec<_> = (0..leaves * hosts_per_leaf)
                .map(|i| b.node(format!("h{i}"), NodeKind::Host, None))
                .collect();
            let leaf_ids: Vec<_> = (0..*leaves)
                .map(|i| b.node(format!("leaf{i}"), NodeKind::Switch, Some(0)))
                .collect();
            let spine_ids: Vec<_> = (0..*spines)
                .map(|i| b.node(format!("spine{i}"), NodeKind::Switch, Some(1)))
                .collect();
            for (i, host) in hosts.iter().enumerate() {
                b.link(
                    *host,
                    leaf_ids[i / *hosts_per_leaf as usize],
                    *host_gbps,
                    *delay_ns,
                );
            }
            for leaf in &leaf_ids {
                for spine in &spine_ids {
                    for _ in 0..*links_per_spine {
                        b.link(*leaf, *spine, *fabric_gbps, *delay_ns);
                    }
                }
            }
        }
        TopologySpec::Rail {
            groups,
            hosts_per_group,
            rails,
            spines,
            host_gbps,
            fabric_gbps,
            delay_ns,
        } => {
            let hosts: Vec<_> = (0..groups * hosts_per_group)
                .map(|i| b.node(format!("h{i}"), NodeKind::Host, None))
                .collect();
            let mut rail_switches = Vec::new();
            for g in 0..*groups {
                for r in 0..*rails {
                    rail_switches.push(b.node(format!("rail{g}_{r}"), NodeKind::Switch, Some(0)));
                }
            }
            let spine_ids: Vec<_> = (0..*spines)
                .map(|i| b.node(format!("spine{i}"), NodeKind::Switch, Some(1)))
                .collect();
            for (i, host) in hosts.iter().enumerate() {
                let group = i / *hosts_per_group as usize;
                for r in 0..*rails as usize {
                    let rail = rail_switches[group * *rails as usize + r];
                    b.link(*host, rail, *host_gbps, *delay_ns);
                }
            }
            for rail in &rail_switches {
                for spine in &spine_ids {
                    b.link(*rail, *spine, *fabric_gbps, *delay_ns);
                }
            }
            // NIC n of host h gets its own address.
            for host in &hosts {
                b.topo.nodes[*host as usize].ipv4 = Some(host_ipv4(*host, 0));
            }
        }
        TopologySpec::Ring {
            switches,
            hosts_per_switch,
            host_gbps,
            fabric_gbps,
            delay_ns,
        } => {
            let hosts: Vec<_> = (0..switches * hosts_per_switch)
                .map(|i| b.node(format!("h{i}"), NodeKind::Host, None))
                .collect();
            let ids: Vec<_> = (0..*switches)
                .map(|i| b.node(format!("s{i}"), NodeKind::Switch, None))
                .collect();
            for (i, host) in hosts.iter().enumerate() {
                b.link(
                    *host,
                    ids[i / *hosts_per_switch as usize],
                    *host_gbps,
                    *delay_ns,
                );
            }
            for i in 0..ids.len() {
                b.link(ids[i], ids[(i + 1) % ids.len()], *fabric_gbps, *delay_ns);
            }
        }
        TopologySpec::Graph {
            switches,
            hosts,
            links,
        } => {
            let mut names = std::collections::HashMap::new();
            for (index, name) in hosts.iter().enumerate() {
                if names.contains_key(name) {
                    return Err(loaded.error(
                        &format!("topology.hosts[{index}]"),
                        format!("duplicate node name {name:?}"),
                    ));
                }
                names.insert(name.clone(), b.node(name.clone(), NodeKind::Host, None));
            }
            for (index, name) in switches.iter().enumerate() {
                if names.contains_key(name) {
                    return Err(loaded.error(
                        &format!("topology.switches[{index}]"),
                        format!("duplicate node name {name:?}"),
                    ));
                }
                names.insert(name.clone(), b.node(name.clone(), NodeKind::Switch, None));
            }
            for (index, link) in links.iter().enumerate() {
                let end = |name: &String, field: &str| {
                    names.get(name).copied().ok_or_else(|| {
                        loaded.error(
                            &format!("topology.links[{index}].{field}"),
                            format!("no node named {name:?}"),
                        )
                    })
                };
                let a = end(&link.a, "a")?;
                let z = end(&link.b, "b")?;
                if a == z {
                    return Err(loaded.error(
                        &format!("topology.links[{index}]"),
                        "a link must join two different nodes",
                    ));
                }
                b.link(a, z, link.gbps, link.delay_ns);
            }
        }
        TopologySpec::HpccFile { path } => {
            let full = loaded.base_dir.join(path);
            let text = std::fs::read_to_string(&full).map_err(|error| {
                loaded.error(
                    "topology.path",
                    format!("cannot read {}: {error}", full.display()),
                )
            })?;
            return parse_hpcc_topology(
                &text,
                &full.display().to_string(),
                &loaded.scenario.limits,
            );
        }
    }
    Ok((b.topo, Vec::new()))
}

#[allow(clippy::too_many_arguments)]
fn clos(
    b: &mut Builder,
    pods: u32,
    tors_per_pod: u32,
    aggs_per_pod: u32,
    cores: u32,
    hosts_per_tor: u32,
    host_gbps: f64,
    fabric_gbps: f64,
    delay_ns: u64,
) {
    let tor_count = pods * tors_per_pod;
    let hosts: Vec<_> = (0..tor_count * hosts_per_tor)
        .map(|i| b.node(format!("h{i}"), NodeKind::Host, None))
        .collect();
    let tors: Vec<_> = (0..tor_count)
        .map(|i| b.node(format!("tor{i}"), NodeKind::Switch, Some(0)))
        .collect();
    let aggs: Vec<_> = (0..pods * aggs_per_pod)
        .map(|i| b.node(format!("agg{i}"), NodeKind::Switch, Some(1)))
        .collect();
    let core_ids: Vec<_> = (0..cores)
        .map(|i| b.node(format!("core{i}"), NodeKind::Switch, Some(2)))
        .collect();
    for (i, host) in hosts.iter().enumerate() {
        b.link(*host, tors[i / hosts_per_tor as usize], host_gbps, delay_ns);
    }
    for pod in 0..pods {
        for t in 0..tors_per_pod {
            for a in 0..aggs_per_pod {
                b.link(
                    tors[(pod * tors_per_pod + t) as usize],
                    aggs[(pod * aggs_per_pod + a) as usize],
                    fabric_gbps,
                    delay_ns,
                );
            }
        }
    }
    let cores_per_agg = cores / aggs_per_pod;
    for pod in 0..pods {
        for a in 0..aggs_per_pod {
            for c in 0..cores_per_agg {
                b.link(
                    aggs[(pod * aggs_per_pod + a) as usize],
                    core_ids[(a * cores_per_agg + c) as usize],
                    fabric_gbps,
                    delay_ns,
                );
            }
        }
    }
}

/// Parses the HPCC reference's topology file format. Node names are `n{id}`; switches keep
/// the reference's ids so that its flow files apply unchanged.
///
/// Like the reference (`scratch/third.cc`, `main`: it reads `link_num` links and stops), only
/// the number of links the header declares is read; lines after them are ignored and named
/// in a [`Warning`] (the reference's own `mix/topology.txt` declares 65 links and lists more).
/// A file with fewer links than declared is an error.
pub fn parse_hpcc_topology(
    text: &str,
    file: &str,
    limits: &crate::scenario::Limits,
) -> Result<(FabricTopology, Vec<Warning>), ScenarioError> {
    let err = |line: usize, field: &str, reason: String| ScenarioError {
        file: file.into(),
        line,
        field: field.into(),
        reason,
    };
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty());
    let (line_no, header) = lines
        .next()
        .ok_or_else(|| err(1, "header", "empty topology file".into()))?;
    let numbers: Vec<u64> = header
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            err(
                line_no,
                "header",
                format!("expected `nodes switches links`: {e}"),
            )
        })?;
    let [node_count, switch_count, link_count] = numbers[..] else {
        return Err(err(
            line_no,
            "header",
            "expected three numbers: nodes switches links".into(),
        ));
    };
    // Checked before anything is sized by them.
    for (count, limit, what, name) in [
        (node_count, limits.max_nodes, "nodes", "max_nodes"),
        (link_count, limits.max_links, "links", "max_links"),
    ] {
        if count > limit {
            return Err(err(
                line_no,
                "header",
                format!("{count} {what}, above the limit of {limit} (raise limits.{name} in the scenario if the machine can hold it)"),
            ));
        }
    }
    if switch_count > node_count {
        return Err(err(
            line_no,
            "header",
            format!("{switch_count} switches among {node_count} nodes"),
        ));
    }
    let mut is_switch = vec![false; node_count as usize];
    let mut last_line = line_no;
    if switch_count > 0 {
        let (line_no, ids) = lines
            .next()
            .ok_or_else(|| err(line_no + 1, "switches", "missing the switch id line".into()))?;
        last_line = line_no;
        let ids: Vec<usize> = ids
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .map_err(|e| err(line_no, "switches", format!("bad switch id: {e}")))?;
        if ids.len() as u64 != switch_count {
            return Err(err(
                line_no,
                "switches",
                format!(
                    "header says {switch_count} switches, line lists {}",
                    ids.len()
                ),
            ));
        }
        for id in ids {
            let slot = is_switch.get_mut(id).ok_or_else(|| {
                err(
                    line_no,
                    "switches",
                    format!("switch id {id} ≥ node count {node_count}"),
                )
            })?;
            *slot = true;
        }
    }
    let mut b = Builder::new();
    for (id, switch) in is_switch.iter().enumerate() {
        let kind = if *switch {
            NodeKind::Switch
        } else {
            NodeKind::Host
        };
        b.node(format!("n{id}"), kind, None);
    }
    let mut links = 0;
    let mut warnings = Vec::new();
    while let Some((line_no, line)) = lines.next() {
        if links == link_count {
            let ignored: Vec<usize> = std::iter::once(line_no)
                .chain(lines.by_ref().map(|(n, _)| n))
                .collect();
            let last = *ignored.last().unwrap_or(&line_no);
            warnings.push(Warning {
                file: file.into(),
                first_line: line_no,
                last_line: last,
                message: format!(
                    "ignored {} line(s) after the {link_count} links the header declares \
                     (the HPCC reference reads only those)",
                    ignored.len()
                ),
            });
            break;
        }
        last_line = line_no;
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 4 {
            return Err(err(
                line_no,
                "link",
                "expected `src dst rate delay [error_rate]`".into(),
            ));
        }
        let node = |text: &str, field: &str| -> Result<NodeId, ScenarioError> {
            let id: u64 = text
                .parse()
                .map_err(|e| err(line_no, field, format!("bad node id {text:?}: {e}")))?;
            if id >= node_count {
                return Err(err(
                    line_no,
                    field,
                    format!("node {id} ≥ node count {node_count}"),
                ));
            }
            Ok(id as NodeId)
        };
        let src = node(fields[0], "src")?;
        let dst = node(fields[1], "dst")?;
        let gbps = parse_rate_gbps(fields[2]).ok_or_else(|| {
            err(
                line_no,
                "rate",
                format!("bad rate {:?} (e.g. 100Gbps)", fields[2]),
            )
        })?;
        let delay_ns = parse_delay_ns(fields[3]).ok_or_else(|| {
            err(
                line_no,
                "delay",
                format!("bad delay {:?} (e.g. 0.001ms)", fields[3]),
            )
        })?;
        b.link(src, dst, gbps, delay_ns);
        links += 1;
    }
    if links != link_count {
        return Err(err(
            line_no,
            "header",
            format!(
                "header says {link_count} links, the file ends after {links} (line {last_line})"
            ),
        ));
    }
    Ok((b.topo, warnings))
}

fn parse_rate_gbps(text: &str) -> Option<f64> {
    let lower = text.to_ascii_lowercase();
    let (number, scale) = if let Some(n) = lower.strip_suffix("gbps") {
        (n, 1.0)
    } else if let Some(n) = lower.strip_suffix("mbps") {
        (n, 1e-3)
    } else if let Some(n) = lower.strip_suffix("kbps") {
        (n, 1e-6)
    } else if let Some(n) = lower.strip_suffix("bps") {
        (n, 1e-9)
    } else {
        return None;
    };
    let value: f64 = number.parse().ok()?;
    (value > 0.0).then_some(value * scale)
}

fn parse_delay_ns(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let (number, scale) = if let Some(n) = lower.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = lower.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = lower.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = lower.strip_suffix('s') {
        (n, 1e9)
    } else {
        return None;
    };
    let value: f64 = number.parse().ok()?;
    (value >= 0.0).then(|| (value * scale).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{Limits, Scenario};

    fn topo(text: &str) -> FabricTopology {
        let loaded = Scenario::parse(text, "t.toml", Default::default()).unwrap();
        build(&loaded).unwrap()
    }

    #[test]
    fn the_cost_estimate_counts_what_the_builders_build() {
        // `scenario::topology_size` refuses scenarios before they are built: it must agree
        // with the builders, shape by shape.
        for topology in [
            "kind = \"fat_tree\"\nk = 6",
            "kind = \"clos\"\npods = 3\ntors_per_pod = 2\naggs_per_pod = 2\ncores = 4\nhosts_per_tor = 5",
            "kind = \"leaf_spine\"\nleaves = 4\nspines = 3\nhosts_per_leaf = 6\nlinks_per_spine = 2",
            "kind = \"rail\"\ngroups = 3\nhosts_per_group = 4\nrails = 4\nspines = 2",
            "kind = \"ring\"\nswitches = 5\nhosts_per_switch = 3",
        ] {
            let text = format!("version = 1\nduration_us = 1\n[topology]\n{topology}\n");
            let loaded = Scenario::parse(&text, "t.toml", Default::default()).unwrap();
            let (hosts, switches, links) =
                crate::scenario::topology_size(&loaded.scenario.topology).unwrap();
            let built = build(&loaded).unwrap();
            let count = |kind| built.nodes.iter().filter(|n| n.kind == kind).count() as f64;
            assert_eq!(
                (count(NodeKind::Host), count(NodeKind::Switch), built.links.len() as f64),
                (hosts, switches, links),
                "{topology}"
            );
        }
    }

    #[test]
    fn fat_tree_k4_has_20_switches_and_16_hosts() {
        let t = topo("version = 1\nduration_us = 1\n[topology]\nkind = \"fat_tree\"\nk = 4\n");
        t.validate().unwrap();
        let switches = t
            .nodes
            .iter()
            .filter(|n| n.kind == NodeKind::Switch)
            .count();
        assert_eq!((switches, t.nodes.len() - switches), (20, 16));
        // 16 host links + 16 tor-agg + 16 agg-core.
        assert_eq!(t.links.len(), 48);
        // Every switch has exactly k = 4 ports.
        for node in t.nodes.iter().filter(|n| n.kind == NodeKind::Switch) {
            let ports = t
                .links
                .iter()
                .filter(|l| l.a.node == node.id || l.b.node == node.id)
                .count();
            assert_eq!(ports, 4, "{}", node.name);
        }
    }

    #[test]
    fn hpcc_320_host_clos_shape() {
        let t = topo("version = 1\nduration_us = 1\n[topology]\nkind = \"clos\"\npods = 5\ntors_per_pod = 4\naggs_per_pod = 4\ncores = 16\nhosts_per_tor = 16\nfabric_gbps = 400\ndelay_ns = 1000\n");
        t.validate().unwrap();
        let count = |tier| t.nodes.iter().filter(|n| n.tier == Some(tier)).count();
        assert_eq!((count(0), count(1), count(2)), (20, 20, 16));
        assert_eq!(
            t.nodes.iter().filter(|n| n.kind == NodeKind::Host).count(),
            320
        );
        assert_eq!(t.links.len(), 320 + 80 + 80);
    }

    #[test]
    fn hpcc_file_import_and_errors() {
        let text = "4 1 3\n3\n0 3 100Gbps 0.001ms 0\n1 3 100Gbps 0.001ms 0\n2 3 25Gbps 2us 0\n";
        let (t, warnings) = parse_hpcc_topology(text, "topo.txt", &Limits::default()).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(t.nodes[3].kind, NodeKind::Switch);
        assert_eq!(t.links[0].delay_ns, 1000);
        assert_eq!(t.links[2].gbps, 25.0);
        let error = parse_hpcc_topology(
            "4 1 3\n3\n0 3 100Gbps 0.001ms 0\n0 9 1Gbps 1ms\n",
            "topo.txt",
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (4, "dst"));
        let error = parse_hpcc_topology(
            "4 1 3\n3\n0 3 fast 0.001ms 0\n",
            "topo.txt",
            &Limits::default(),
        )
        .unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (3, "rate"));
    }

    /// The reference's own `mix/topology.txt` declares fewer links than it lists (and the
    /// extra ones name a node past the count); like the reference, the declared links are
    /// read and the rest is ignored, with a warning naming the ignored lines.
    #[test]
    fn hpcc_file_lines_after_the_declared_links_are_ignored_with_a_warning() {
        let text = "4 1 2\n3\n0 3 100Gbps 0.001ms 0\n1 3 100Gbps 0.001ms 0\n\
                    2 3 100Gbps 0.001ms 0\n0 4 100Gbps 0.001ms 0\n\nnot a link\n";
        let (t, warnings) = parse_hpcc_topology(text, "topo.txt", &Limits::default()).unwrap();
        assert_eq!(t.links.len(), 2);
        assert_eq!(warnings.len(), 1);
        let w = &warnings[0];
        assert_eq!((w.first_line, w.last_line), (5, 8));
        assert_eq!(
            w.to_string(),
            "topo.txt:5-8: ignored 3 line(s) after the 2 links the header declares \
             (the HPCC reference reads only those)"
        );
        // One extra line: a single line number.
        let (_, warnings) = parse_hpcc_topology(
            "4 1 1\n3\n0 3 100Gbps 0.001ms 0\n1 3 1Gbps 1us 0\n",
            "t",
            &Limits::default(),
        )
        .unwrap();
        assert_eq!(warnings[0].to_string().split(": ").next(), Some("t:4"));
    }

    /// Fewer links than the header declares is still an error, naming the header line and
    /// the line the file ends at.
    #[test]
    fn hpcc_file_with_fewer_links_than_declared_is_an_error() {
        let text = "4 1 3\n3\n0 3 100Gbps 0.001ms 0\n1 3 100Gbps 0.001ms 0\n";
        let error = parse_hpcc_topology(text, "topo.txt", &Limits::default()).unwrap_err();
        assert_eq!((error.line, error.field.as_str()), (1, "header"));
        assert!(
            error
                .reason
                .contains("says 3 links, the file ends after 2 (line 4)"),
            "{}",
            error.reason
        );
    }
}
