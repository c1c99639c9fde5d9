//! Fault actions (PFC injection, slow receivers, link down/up, rerouting, static routes)
//! and the shortest-path recomputation over the links that are up.

use super::{FaultAction, Owner, Simulation};
use crate::routing::{RoutingGraph, RoutingTable};

impl Simulation {
    pub(super) fn on_fault(&mut self, action: u32) {
        let Some(action) = self.fault_actions.get(action as usize).cloned() else {
            return;
        };
        match action {
            FaultAction::InjectStart {
                nic,
                priority,
                until,
            } => {
                let n = &mut self.nics[nic as usize];
                n.inject_until = until;
                n.inject_priority = priority;
                let port = n.port;
                self.send_xoff(port, priority);
            }
            FaultAction::SlowStart { nic, bps } => {
                self.nics[nic as usize].drain_bps = Some(bps);
            }
            FaultAction::SlowEnd { nic } => {
                self.nics[nic as usize].drain_bps = None;
            }
            FaultAction::LinkDown { ports } => {
                for port in ports {
                    self.ports[port as usize].link_up = false;
                }
            }
            FaultAction::LinkUp { ports } => {
                for port in ports {
                    self.ports[port as usize].link_up = true;
                    self.kick(port);
                }
            }
            FaultAction::Reroute => self.recompute_routes(),
            FaultAction::InstallRoute {
                switch,
                dst_nic,
                ports,
            } => {
                self.routes.set(switch, dst_nic, &ports);
                self.route_overrides.push((switch, dst_nic, ports));
            }
        }
    }

    /// Recomputes shortest-path routes over the links that are up, then re-applies static
    /// overrides.
    pub(crate) fn recompute_routes(&mut self) {
        let graph = self.routing_graph();
        self.routes = RoutingTable::shortest_paths(&graph);
        for (switch, nic, ports) in &self.route_overrides {
            self.routes.set(*switch, *nic, ports);
        }
    }

    pub(crate) fn routing_graph(&self) -> RoutingGraph {
        let mut switch_links = vec![Vec::new(); self.switches.len()];
        let mut nic_attach = vec![None; self.nics.len()];
        for (s, sw) in self.switches.iter().enumerate() {
            for global in sw.first_port..sw.first_port + sw.port_count {
                let port = &self.ports[global as usize];
                if !port.link_up {
                    continue;
                }
                match self.ports[port.peer as usize].owner {
                    Owner::Switch(other) => switch_links[s].push((port.local, other)),
                    Owner::Nic(n) => nic_attach[n as usize] = Some((s as u32, port.local)),
                }
            }
        }
        RoutingGraph {
            switch_links,
            nic_attach,
        }
    }
}
