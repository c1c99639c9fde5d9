//! The RNICs of a fabric, read from the fabric description (`wire::topology`): each host
//! port with a link is an RNIC; the switch at its other end is its ToR (in a rail-optimised
//! fabric, its rail switch). Also the number of parallel equal-cost paths between ToRs,
//! the N of Eq. 1.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortNo, PortRef};
use thiserror::Error;

/// Dense index of an RNIC in an [`Inventory`].
pub type RnicId = u32;

/// One RDMA NIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rnic {
    /// Its host.
    pub host: NodeId,
    /// The host's name.
    pub host_name: String,
    /// The host port it is (NIC n is port n).
    pub nic: PortNo,
    /// Its IPv4 address: the host's address plus `nic` in the last octet (the addressing of
    /// `wire::topology::FabricTopology::host_by_nic_ipv4`).
    pub ipv4: [u8; 4],
    /// The switch it is cabled to.
    pub tor: NodeId,
}

/// Why a fabric description gives no inventory.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum InventoryError {
    /// The description itself is inconsistent.
    #[error("fabric description: {0}")]
    Topology(String),
    /// A host without an address.
    #[error("host {0}: no ipv4 address, so its RNICs cannot be probed")]
    NoAddress(String),
    /// A host port cabled to another host.
    #[error("host {host} port {port}: cabled to a host, not to a switch")]
    HostToHost {
        /// The host.
        host: String,
        /// Its port.
        port: PortNo,
    },
    /// A NIC number that does not fit the address's last octet.
    #[error("host {host} NIC {nic}: its address would pass .255")]
    AddressOverflow {
        /// The host.
        host: String,
        /// The NIC.
        nic: PortNo,
    },
    /// No RNIC at all.
    #[error("the fabric has no host with a cabled port")]
    Empty,
}

/// Every RNIC, grouped by ToR, with the parallel paths between ToRs.
#[derive(Clone, Debug)]
pub struct Inventory {
    rnics: Vec<Rnic>,
    by_tor: BTreeMap<NodeId, Vec<RnicId>>,
    /// Per ToR, the largest number of equal-cost shortest paths to any other ToR.
    paths_from: BTreeMap<NodeId, u32>,
    names: BTreeMap<NodeId, String>,
    /// Both ends of every host link (an RNIC's own link).
    access_ports: BTreeSet<PortRef>,
    /// Each port's peer at the other end of its link.
    peers: BTreeMap<PortRef, PortRef>,
}

impl Inventory {
    /// Reads the RNICs and ToRs of `topology`.
    pub fn from_topology(topology: &FabricTopology) -> Result<Self, InventoryError> {
        topology
            .validate()
            .map_err(|e| InventoryError::Topology(e.to_string()))?;
        let mut rnics = Vec::new();
        let mut links: Vec<(NodeId, PortNo, NodeId)> = Vec::new();
        for link in &topology.links {
            links.push((link.a.node, link.a.port, link.b.node));
            links.push((link.b.node, link.b.port, link.a.node));
        }
        links.sort_unstable();
        for (host, nic, peer) in &links {
            let node = &topology.nodes[*host as usize];
            if node.kind != NodeKind::Host {
                continue;
            }
            if topology.nodes[*peer as usize].kind == NodeKind::Host {
                return Err(InventoryError::HostToHost {
                    host: node.name.clone(),
                    port: *nic,
                });
            }
            let base = node
                .ipv4
                .ok_or_else(|| InventoryError::NoAddress(node.name.clone()))?;
            let last = u8::try_from(u16::from(base[3]) + *nic).map_err(|_| {
                InventoryError::AddressOverflow {
                    host: node.name.clone(),
                    nic: *nic,
                }
            })?;
            rnics.push(Rnic {
                host: *host,
                host_name: node.name.clone(),
                nic: *nic,
                ipv4: [base[0], base[1], base[2], last],
                tor: *peer,
            });
        }
        if rnics.is_empty() {
            return Err(InventoryError::Empty);
        }
        let mut by_tor: BTreeMap<NodeId, Vec<RnicId>> = BTreeMap::new();
        for (id, rnic) in rnics.iter().enumerate() {
            by_tor.entry(rnic.tor).or_default().push(id as RnicId);
        }
        // The switch graph, one entry per link (parallel links are parallel paths).
        let mut adjacent: BTreeMap<NodeId, Vec<NodeId>> = BTreeMap::new();
        for (from, _, to) in &links {
            let both_switches = topology.nodes[*from as usize].kind == NodeKind::Switch
                && topology.nodes[*to as usize].kind == NodeKind::Switch;
            if both_switches {
                adjacent.entry(*from).or_default().push(*to);
            }
        }
        let mut paths_from = BTreeMap::new();
        for tor in by_tor.keys() {
            let counts = shortest_path_counts(*tor, &adjacent);
            let most = by_tor
                .keys()
                .filter(|other| *other != tor)
                .filter_map(|other| counts.get(other).copied())
                .max()
                .unwrap_or(0);
            paths_from.insert(*tor, most);
        }
        let names = topology
            .nodes
            .iter()
            .map(|node| (node.id, node.name.clone()))
            .collect();
        let is_host = |n: NodeId| topology.nodes[n as usize].kind == NodeKind::Host;
        let access_ports = topology
            .links
            .iter()
            .filter(|l| is_host(l.a.node) || is_host(l.b.node))
            .flat_map(|l| [l.a, l.b])
            .collect();
        let peers = topology
            .links
            .iter()
            .flat_map(|l| [(l.a, l.b), (l.b, l.a)])
            .collect();
        Ok(Inventory {
            rnics,
            by_tor,
            paths_from,
            names,
            access_ports,
            peers,
        })
    }

    /// Every RNIC, indexed by [`RnicId`].
    pub fn rnics(&self) -> &[Rnic] {
        &self.rnics
    }

    /// One RNIC.
    pub fn rnic(&self, id: RnicId) -> Option<&Rnic> {
        self.rnics.get(id as usize)
    }

    /// The RNICs under each ToR.
    pub fn by_tor(&self) -> &BTreeMap<NodeId, Vec<RnicId>> {
        &self.by_tor
    }

    /// The largest number of equal-cost shortest paths from `tor` to another ToR (0 when no
    /// other ToR is reachable): Eq. 1's N for its inter-ToR 5-tuples.
    pub fn parallel_paths_from(&self, tor: NodeId) -> u32 {
        self.paths_from.get(&tor).copied().unwrap_or(0)
    }

    /// Whether `port` is an end of a host's link (an RNIC, its link and the ToR port facing
    /// it: what R-Pingmesh counts as the RNIC, §4.3.2 footnote 4).
    pub fn is_access_port(&self, port: PortRef) -> bool {
        self.access_ports.contains(&port)
    }

    /// The physical link `port` belongs to, named by its lower end (both directions of a
    /// link map to the same value).
    pub fn link_of(&self, port: PortRef) -> PortRef {
        self.peers.get(&port).map_or(port, |peer| port.min(*peer))
    }

    /// A node's name.
    pub fn name(&self, node: NodeId) -> &str {
        self.names.get(&node).map_or("?", String::as_str)
    }

    /// `host:nicN (a.b.c.d)`, for messages.
    pub fn label(&self, id: RnicId) -> String {
        match self.rnic(id) {
            Some(r) => format!(
                "{}:nic{} ({}.{}.{}.{})",
                r.host_name, r.nic, r.ipv4[0], r.ipv4[1], r.ipv4[2], r.ipv4[3]
            ),
            None => format!("rnic#{id}"),
        }
    }
}

/// Number of shortest paths (counted per link) from `source` to every reachable switch.
fn shortest_path_counts(
    source: NodeId,
    adjacent: &BTreeMap<NodeId, Vec<NodeId>>,
) -> BTreeMap<NodeId, u32> {
    let mut distance: BTreeMap<NodeId, u32> = BTreeMap::from([(source, 0)]);
    let mut count: BTreeMap<NodeId, u32> = BTreeMap::from([(source, 1)]);
    let mut queue = VecDeque::from([source]);
    while let Some(node) = queue.pop_front() {
        let (d, c) = (distance[&node], count[&node]);
        for next in adjacent.get(&node).map_or(&[][..], Vec::as_slice) {
            match distance.get(next) {
                None => {
                    distance.insert(*next, d + 1);
                    count.insert(*next, c);
                    queue.push_back(*next);
                }
                Some(nd) if *nd == d + 1 => {
                    let entry = count.entry(*next).or_insert(0);
                    *entry = entry.saturating_add(c);
                }
                Some(_) => {}
            }
        }
    }
    count
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use hawkmesh_wire::topology::{LinkDesc, NodeDesc, PortRef};

    /// Leaf-spine: `leaves` ToRs with `hosts` single-NIC hosts each, `spines` spines, every
    /// leaf cabled once to every spine.
    pub(crate) fn leaf_spine(leaves: u32, hosts: u32, spines: u32) -> FabricTopology {
        let mut t = FabricTopology::default();
        let add = |t: &mut FabricTopology, name: String, kind, ipv4| {
            let id = t.nodes.len() as NodeId;
            t.nodes.push(NodeDesc {
                id,
                name,
                kind,
                tier: None,
                ipv4,
            });
            id
        };
        let mut next_port: BTreeMap<NodeId, PortNo> = BTreeMap::new();
        let mut link = |t: &mut FabricTopology, a: NodeId, b: NodeId| {
            let pa = *next_port.entry(a).and_modify(|p| *p += 1).or_insert(0);
            let pb = *next_port.entry(b).and_modify(|p| *p += 1).or_insert(0);
            t.links.push(LinkDesc {
                a: PortRef { node: a, port: pa },
                b: PortRef { node: b, port: pb },
                gbps: 100.0,
                delay_ns: 1000,
            });
        };
        let spine_ids: Vec<NodeId> = (0..spines)
            .map(|s| add(&mut t, format!("spine{s}"), NodeKind::Switch, None))
            .collect();
        for l in 0..leaves {
            let leaf = add(&mut t, format!("leaf{l}"), NodeKind::Switch, None);
            for s in &spine_ids {
                link(&mut t, leaf, *s);
            }
            for h in 0..hosts {
                let ip = [10, 0, l as u8, h as u8 + 1];
                let host = add(&mut t, format!("h{l}_{h}"), NodeKind::Host, Some(ip));
                link(&mut t, host, leaf);
            }
        }
        t
    }

    #[test]
    fn rnics_tors_and_parallel_paths_of_a_leaf_spine() {
        let inv = Inventory::from_topology(&leaf_spine(3, 2, 4)).unwrap();
        assert_eq!(inv.rnics().len(), 6);
        assert_eq!(inv.by_tor().len(), 3);
        for tor in inv.by_tor().keys() {
            assert_eq!(inv.parallel_paths_from(*tor), 4);
        }
        let first = inv.rnic(0).unwrap();
        assert_eq!(first.ipv4, [10, 0, 0, 1]);
        assert_eq!(inv.name(first.tor), "leaf0");
        assert_eq!(inv.label(0), "h0_0:nic0 (10.0.0.1)");
    }

    #[test]
    fn a_fabric_that_cannot_be_probed_is_refused_naming_the_host() {
        let mut t = leaf_spine(2, 1, 1);
        let host = t
            .nodes
            .iter()
            .position(|n| n.kind == NodeKind::Host)
            .unwrap();
        t.nodes[host].ipv4 = None;
        let err = Inventory::from_topology(&t).unwrap_err();
        assert_eq!(
            err.to_string(),
            "host h0_0: no ipv4 address, so its RNICs cannot be probed"
        );
        let mut t = leaf_spine(1, 1, 1);
        let nodes = t.nodes.clone();
        t.links.retain(|l| {
            nodes[l.a.node as usize].kind == NodeKind::Switch
                && nodes[l.b.node as usize].kind == NodeKind::Switch
        });
        assert_eq!(
            Inventory::from_topology(&t).unwrap_err(),
            InventoryError::Empty
        );
    }
}
