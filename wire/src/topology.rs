//! The fabric description shared by every component: which port of which node connects to
//! which port of which other node, at what speed and delay.
//!
//! `netsim` writes it (`topology.json` in every run's output directory), the switch agent
//! ships it with its reports and the analyzer reads it to match the causality meter rows of an
//! upstream switch to the ports of its downstream neighbours (HAWKEYE §3.5.1).
//!
//! Port numbers are per node and start at 0. A host's ports are its NICs (one per rail in a
//! rail-optimised fabric). Switch ports are numbered in the order their links were declared.

use serde::{Deserialize, Serialize};

/// Identifier of a node (host or switch) in a [`FabricTopology`]; dense, starting at 0.
pub type NodeId = u32;
/// A port number local to one node.
pub type PortNo = u16;

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// An end host with one or more RDMA NICs.
    Host,
    /// A switch.
    Switch,
}

/// One node of the fabric.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeDesc {
    /// Dense id, equal to the node's index in [`FabricTopology::nodes`].
    pub id: NodeId,
    /// Human name, e.g. `tor3`, `agg1`, `core0`, `h17`.
    pub name: String,
    /// Host or switch.
    pub kind: NodeKind,
    /// Tier for switches (0 = ToR/leaf, 1 = aggregation/spine, 2 = core); `None` for hosts
    /// and for switches of arbitrary graphs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u8>,
    /// IPv4 address of a host (first NIC), as used in the RoCEv2 5-tuple.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipv4: Option<[u8; 4]>,
}

/// One end of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PortRef {
    /// The node.
    pub node: NodeId,
    /// The port on that node.
    pub port: PortNo,
}

/// A full-duplex point-to-point link.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkDesc {
    /// One end.
    pub a: PortRef,
    /// The other end.
    pub b: PortRef,
    /// Line rate in Gbit/s.
    pub gbps: f64,
    /// One-way propagation delay in nanoseconds.
    pub delay_ns: u64,
}

/// The whole fabric.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FabricTopology {
    /// Every node, indexed by its id.
    pub nodes: Vec<NodeDesc>,
    /// Every link.
    pub links: Vec<LinkDesc>,
}

impl FabricTopology {
    /// The port at the other end of the link attached to `port`, if any.
    pub fn peer(&self, port: PortRef) -> Option<PortRef> {
        self.links.iter().find_map(|link| {
            if link.a == port {
                Some(link.b)
            } else if link.b == port {
                Some(link.a)
            } else {
                None
            }
        })
    }

    /// The node with this name.
    pub fn node_by_name(&self, name: &str) -> Option<&NodeDesc> {
        self.nodes.iter().find(|node| node.name == name)
    }

    /// The host whose IPv4 address is `ip`.
    pub fn host_by_ipv4(&self, ip: [u8; 4]) -> Option<&NodeDesc> {
        self.nodes
            .iter()
            .find(|node| node.kind == NodeKind::Host && node.ipv4 == Some(ip))
    }

    /// The host and NIC (its port) whose address is `ip`. A host's `ipv4` is its first
    /// NIC's; NIC n of a multi-NIC host (port n, one per rail) has that address plus n in
    /// its last octet (netsim's and the HPCC simulator's addressing).
    pub fn host_by_nic_ipv4(&self, ip: [u8; 4]) -> Option<(&NodeDesc, PortNo)> {
        self.nodes.iter().find_map(|node| {
            let base = node.ipv4.filter(|_| node.kind == NodeKind::Host)?;
            if base[..3] != ip[..3] || ip[3] < base[3] {
                return None;
            }
            let nic = PortNo::from(ip[3] - base[3]);
            let has_port = self.links.iter().any(|l| {
                (l.a.node == node.id && l.a.port == nic) || (l.b.node == node.id && l.b.port == nic)
            });
            has_port.then_some((node, nic))
        })
    }

    /// Checks that node ids are dense and every link end names an existing node and is
    /// used by at most one link.
    pub fn validate(&self) -> Result<(), TopologyError> {
        for (index, node) in self.nodes.iter().enumerate() {
            if node.id as usize != index {
                return Err(TopologyError::NodeIdNotDense { index, id: node.id });
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, link) in self.links.iter().enumerate() {
            for end in [link.a, link.b] {
                if end.node as usize >= self.nodes.len() {
                    return Err(TopologyError::UnknownNode {
                        link: index,
                        node: end.node,
                    });
                }
                if !seen.insert(end) {
                    return Err(TopologyError::PortUsedTwice {
                        link: index,
                        node: end.node,
                        port: end.port,
                    });
                }
            }
        }
        Ok(())
    }
}

/// Why a [`FabricTopology`] is inconsistent.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// `nodes[index].id` is not `index`.
    #[error("nodes[{index}] has id {id}; node ids must equal their index")]
    NodeIdNotDense {
        /// Position in the node list.
        index: usize,
        /// The id found there.
        id: NodeId,
    },
    /// A link names a node that does not exist.
    #[error("links[{link}] refers to node {node}, which does not exist")]
    UnknownNode {
        /// Position in the link list.
        link: usize,
        /// The unknown node id.
        node: NodeId,
    },
    /// Two links share one port.
    #[error("links[{link}] reuses port {port} of node {node}, already attached to another link")]
    PortUsedTwice {
        /// Position in the link list.
        link: usize,
        /// The node.
        node: NodeId,
        /// The port.
        port: PortNo,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> FabricTopology {
        FabricTopology {
            nodes: vec![
                NodeDesc {
                    id: 0,
                    name: "h0".into(),
                    kind: NodeKind::Host,
                    tier: None,
                    ipv4: Some([10, 0, 0, 1]),
                },
                NodeDesc {
                    id: 1,
                    name: "tor0".into(),
                    kind: NodeKind::Switch,
                    tier: Some(0),
                    ipv4: None,
                },
            ],
            links: vec![LinkDesc {
                a: PortRef { node: 0, port: 0 },
                b: PortRef { node: 1, port: 3 },
                gbps: 100.0,
                delay_ns: 2000,
            }],
        }
    }

    #[test]
    fn peer_is_symmetric_and_json_round_trips() {
        let topo = two_nodes();
        topo.validate().unwrap();
        assert_eq!(
            topo.peer(PortRef { node: 1, port: 3 }),
            Some(PortRef { node: 0, port: 0 })
        );
        assert_eq!(topo.peer(PortRef { node: 1, port: 0 }), None);
        let json = serde_json::to_string(&topo).unwrap();
        let back: FabricTopology = serde_json::from_str(&json).unwrap();
        assert_eq!(back, topo);
        assert_eq!(topo.host_by_ipv4([10, 0, 0, 1]).unwrap().name, "h0");
        let (host, nic) = topo.host_by_nic_ipv4([10, 0, 0, 1]).unwrap();
        assert_eq!((host.name.as_str(), nic), ("h0", 0));
        // h0 has one NIC: the next address is nobody's …
        assert!(topo.host_by_nic_ipv4([10, 0, 0, 2]).is_none());
        // … until it has a second (rail-optimised fabrics: one NIC per rail).
        let mut two_nics = topo.clone();
        two_nics.links.push(LinkDesc {
            a: PortRef { node: 0, port: 1 },
            b: PortRef { node: 1, port: 4 },
            gbps: 100.0,
            delay_ns: 2000,
        });
        let (host, nic) = two_nics.host_by_nic_ipv4([10, 0, 0, 2]).unwrap();
        assert_eq!((host.name.as_str(), nic), ("h0", 1));
    }

    #[test]
    fn validate_rejects_bad_references() {
        let mut topo = two_nodes();
        topo.links[0].b.node = 7;
        assert_eq!(
            topo.validate(),
            Err(TopologyError::UnknownNode { link: 0, node: 7 })
        );
        let mut topo = two_nodes();
        topo.links.push(topo.links[0].clone());
        assert!(matches!(
            topo.validate(),
            Err(TopologyError::PortUsedTwice { link: 1, .. })
        ));
        let mut topo = two_nodes();
        topo.nodes[1].id = 5;
        assert!(matches!(
            topo.validate(),
            Err(TopologyError::NodeIdNotDense { index: 1, id: 5 })
        ));
    }
}
