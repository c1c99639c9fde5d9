//! What the control plane installs on one switch of a fabric, derived from the fabric's
//! description, and its installation through any [`SwitchBackend`]: the routes (shortest-
//! path ECMP to every host NIC, one `forward` entry per ECMP bucket), the one-hot port masks,
//! the PFC quanta conversion per port speed, and the all-ports multicast group of the
//! polling PFC branch. The CPU mirror session is the backend's (BF Runtime `$mirror.cfg`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::Ipv4Addr;

use hawkmesh_wire::control::{
    forward_entries, polling_port_entry, port_mask_entries, PollingFrom, TableEntry,
};
use hawkmesh_wire::dataplane::{Table, MCAST_GROUP_ALL_PORTS, PORTS};
use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortNo};

use crate::backend::{BackendError, SwitchBackend};

/// Why a switch's set-up cannot be derived.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SetupError {
    /// No switch of that name.
    #[error("the fabric has no switch `{0}`")]
    NoSwitch(String),
    /// A port beyond what the program's registers cover.
    #[error("switch `{switch}` port {port}: the program covers ports 0..{limit}")]
    PortOutOfRange {
        /// The switch.
        switch: String,
        /// The port.
        port: PortNo,
        /// `PORTS`.
        limit: u16,
    },
    /// A link speed the program's PFC quanta conversion has no action for.
    #[error(
        "switch `{switch}` port {port}: {gbps} Gbit/s has no PFC quanta conversion in the program"
    )]
    Speed {
        /// The switch.
        switch: String,
        /// The port.
        port: PortNo,
        /// The speed.
        gbps: f64,
    },
}

/// One switch's control-plane set-up.
#[derive(Clone, Debug, PartialEq)]
pub struct SwitchSetup {
    /// The switch.
    pub switch: String,
    /// Per destination NIC address, the ECMP next-hop ports (ascending).
    pub routes: BTreeMap<Ipv4Addr, Vec<PortNo>>,
    /// Per connected port, its speed in Gbit/s.
    pub port_gbps: BTreeMap<PortNo, f64>,
    /// Per connected port, where polling packets may come from (the data plane's guard):
    /// a host's port is rate-limited, a switch's trusted; other ports refuse polling.
    pub polling: BTreeMap<PortNo, PollingFrom>,
}

/// The PFC quanta conversion action of a port speed (`pfc_port_speed`, IEEE 802.1Qbb: one
/// quantum is 512 bit times): the program names them `pfc_quanta_<Gbit/s>g`, read from its
/// generated table description as `dataplane::setup` reads them from the program.
fn speed_action(gbps: f64) -> Option<&'static str> {
    Table::PFC_PORT_SPEED.actions().iter().copied().find(|a| {
        a.strip_prefix("pfc_quanta_")
            .and_then(|s| s.strip_suffix('g'))
            .and_then(|s| s.parse::<f64>().ok())
            .is_some_and(|g| (g - gbps).abs() < 1e-9)
    })
}

impl SwitchSetup {
    /// The set-up of `switch`: shortest-path routes (hosts do not forward; every neighbour
    /// one hop closer to the destination NIC's switch is a next hop) to every host NIC
    /// (NIC n of a host at its address plus n, [`FabricTopology::host_by_nic_ipv4`]), and the
    /// speed of every connected port.
    pub fn from_fabric(fabric: &FabricTopology, switch: &str) -> Result<SwitchSetup, SetupError> {
        let me = fabric
            .nodes
            .iter()
            .find(|n| n.name == switch && n.kind == NodeKind::Switch)
            .ok_or_else(|| SetupError::NoSwitch(switch.to_string()))?;
        let is_switch = |id: NodeId| {
            fabric
                .nodes
                .get(id as usize)
                .is_some_and(|n| n.kind == NodeKind::Switch)
        };
        // Switch adjacency: (neighbour, my port towards it).
        let mut adjacent: BTreeMap<NodeId, Vec<(NodeId, PortNo)>> = BTreeMap::new();
        let mut port_gbps = BTreeMap::new();
        let mut polling = BTreeMap::new();
        for l in &fabric.links {
            for (here, there) in [(l.a, l.b), (l.b, l.a)] {
                if here.node == me.id {
                    if here.port >= PORTS {
                        return Err(SetupError::PortOutOfRange {
                            switch: switch.to_string(),
                            port: here.port,
                            limit: PORTS,
                        });
                    }
                    if speed_action(l.gbps).is_none() {
                        return Err(SetupError::Speed {
                            switch: switch.to_string(),
                            port: here.port,
                            gbps: l.gbps,
                        });
                    }
                    port_gbps.insert(here.port, l.gbps);
                    let from = if is_switch(there.node) {
                        PollingFrom::Fabric
                    } else {
                        PollingFrom::Host
                    };
                    polling.insert(here.port, from);
                }
                if is_switch(here.node) && is_switch(there.node) {
                    adjacent
                        .entry(here.node)
                        .or_default()
                        .push((there.node, here.port));
                }
            }
        }
        // Hops from every switch to a NIC's switch (BFS over switches), per NIC switch.
        let mut distances: BTreeMap<NodeId, BTreeMap<NodeId, u32>> = BTreeMap::new();
        let mut routes = BTreeMap::new();
        for host in fabric.nodes.iter().filter(|n| n.kind == NodeKind::Host) {
            let Some(base) = host.ipv4 else { continue };
            for l in &fabric.links {
                let (nic, attach) = if l.a.node == host.id {
                    (l.a, l.b)
                } else if l.b.node == host.id {
                    (l.b, l.a)
                } else {
                    continue;
                };
                let Some(last) = base[3].checked_add(nic.port as u8) else {
                    continue;
                };
                let addr = Ipv4Addr::new(base[0], base[1], base[2], last);
                let hops: Vec<PortNo> = if attach.node == me.id {
                    vec![attach.port]
                } else {
                    let dist = distances.entry(attach.node).or_insert_with(|| {
                        let mut dist = BTreeMap::from([(attach.node, 0u32)]);
                        let mut queue = VecDeque::from([attach.node]);
                        while let Some(v) = queue.pop_front() {
                            let d = dist[&v];
                            for (w, _) in adjacent.get(&v).into_iter().flatten() {
                                if !dist.contains_key(w) {
                                    dist.insert(*w, d + 1);
                                    queue.push_back(*w);
                                }
                            }
                        }
                        dist
                    });
                    let Some(mine) = dist.get(&me.id) else {
                        continue; // unreachable from here
                    };
                    let ports: BTreeSet<PortNo> = adjacent
                        .get(&me.id)
                        .into_iter()
                        .flatten()
                        .filter(|(w, _)| dist.get(w).is_some_and(|d| d + 1 == *mine))
                        .map(|(_, p)| *p)
                        .collect();
                    ports.into_iter().collect()
                };
                if !hops.is_empty() {
                    routes.insert(addr, hops);
                }
            }
        }
        Ok(SwitchSetup {
            switch: switch.to_string(),
            routes,
            port_gbps,
            polling,
        })
    }

    /// Every table entry of the set-up, in installation order: port masks, port speeds,
    /// polling ports, routes.
    pub fn entries(&self) -> Vec<(Table, TableEntry)> {
        let mut out = port_mask_entries(PORTS);
        for (port, gbps) in &self.port_gbps {
            if let Some(action) = speed_action(*gbps) {
                out.push((
                    Table::PFC_PORT_SPEED,
                    TableEntry::exact(vec![u64::from(*port)], action, vec![]),
                ));
            }
        }
        for (port, from) in &self.polling {
            out.push((Table::POLLING_PORT, polling_port_entry(*port, *from)));
        }
        for (dst, hops) in &self.routes {
            for e in forward_entries(*dst, hops) {
                out.push((Table::FORWARD, e));
            }
        }
        out
    }

    /// Installs the set-up through `backend`: every entry, then the all-ports multicast
    /// group over the connected ports.
    pub fn apply(&self, backend: &mut dyn SwitchBackend) -> Result<(), BackendError> {
        for (table, entry) in self.entries() {
            backend.add_table_entry(table, entry)?;
        }
        backend.set_multicast_group(
            MCAST_GROUP_ALL_PORTS,
            self.port_gbps.keys().copied().collect(),
        )
    }
}
