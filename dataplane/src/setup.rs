//! Programming a switch's model from the fabric description: the per-port PFC quanta
//! conversion (`pfc_port_speed`), the port-mask tables, the all-ports multicast group
//! of the polling PFC branch, and where polling may come from (`polling_port`). The simulator glue and the switch agent's model backend both
//! start a switch this way; a Tofino control plane writes the same entries through BF
//! Runtime.

use std::collections::BTreeMap;

use hawkmesh_wire::topology::{FabricTopology, NodeId, NodeKind, PortNo};
use thiserror::Error;

use hawkmesh_wire::control::{polling_port_entry, PollingFrom};

use crate::error::ModelError;
use crate::model::{DataPlane, Model, TableEntry};

/// Errors configuring a switch from the fabric.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum SetupError {
    /// A control-plane request to the model failed.
    #[error("model: {0}")]
    Model(#[from] ModelError),
    /// A switch has more ports than the program's registers cover.
    #[error("switch `{switch}` has {ports} ports; the program covers {limit} (raise HawkeyeParams::ports)")]
    TooManyPorts {
        /// Switch name.
        switch: String,
        /// Its ports.
        ports: u32,
        /// The program's port count.
        limit: u32,
    },
    /// A port speed the PFC quanta table has no action for.
    #[error("switch `{switch}` port {port}: {gbps} Gbit/s has no PFC quanta conversion in table `pfc_port_speed`")]
    UnsupportedSpeed {
        /// Switch name.
        switch: String,
        /// Port.
        port: PortNo,
        /// Speed.
        gbps: f64,
    },
}

/// Prepares a fresh model for a switch with `ports` front-panel ports whose speeds
/// are `gbps[port]`: the all-ports multicast group (polling PFC branch) and the
/// `pfc_port_speed` entries (PFC quanta → time, IEEE 802.1Qbb: one quantum is 512 bit
/// times).
pub fn configure_model(model: &mut Model, switch: &str, gbps: &[f64]) -> Result<(), SetupError> {
    let p = model.program();
    let limit = p.constant("PORTS").unwrap_or(0) as u32;
    if gbps.len() as u32 > limit {
        return Err(SetupError::TooManyPorts {
            switch: switch.to_string(),
            ports: gbps.len() as u32,
            limit,
        });
    }
    // The speed actions are named `pfc_quanta_<N>g` by the program; read them from it.
    let mut speeds: Vec<(f64, String)> = Vec::new();
    if let Some(t) = p.table_by_name("pfc_port_speed") {
        for a in &p.tables[t.0 as usize].actions {
            let name = &p.actions[a.0 as usize].name;
            if let Some(n) = name
                .strip_prefix("pfc_quanta_")
                .and_then(|s| s.strip_suffix('g'))
                .and_then(|s| s.parse::<f64>().ok())
            {
                speeds.push((n, name.clone()));
            }
        }
    }
    let group = p.constant("MCAST_GROUP_ALL_PORTS").map(|g| g as u16);
    let mut entries = Vec::new();
    let entries_mask = crate::hawkeye::port_mask_entries(p);
    for (port, g) in gbps.iter().enumerate() {
        let action = speeds
            .iter()
            .find(|(s, _)| (s - g).abs() < 1e-9)
            .map(|(_, a)| a.clone())
            .ok_or_else(|| SetupError::UnsupportedSpeed {
                switch: switch.to_string(),
                port: port as PortNo,
                gbps: *g,
            })?;
        entries.push(TableEntry {
            key: vec![port as u64],
            mask: vec![],
            priority: 0,
            action,
            params: vec![],
        });
    }
    for e in entries {
        model.table_add("pfc_port_speed", e)?;
    }
    for (table, port, action, params) in entries_mask {
        model.table_add(
            table,
            TableEntry {
                key: vec![port],
                mask: vec![],
                priority: 0,
                action: action.to_string(),
                params,
            },
        )?;
    }
    if let Some(g) = group {
        model.multicast_group_set(g, (0..gbps.len() as u16).collect());
    }
    // Polling is accepted on every configured port, unlimited; `configure_polling_ports`
    // marks the host-facing ones (rate-limited).
    for port in 0..gbps.len() as u16 {
        model.table_add(
            "polling_port",
            polling_port_entry(port, PollingFrom::Fabric),
        )?;
    }
    Ok(())
}

/// Marks `host_ports` as host-facing in the polling guard (`polling_port`): polling from them
/// passes the per-port rate limit; the other configured ports stay trusted.
pub fn configure_polling_ports(model: &mut Model, host_ports: &[PortNo]) -> Result<(), ModelError> {
    for port in host_ports {
        model.table_delete("polling_port", &[u64::from(*port)], &[], 0)?;
        model.table_add("polling_port", polling_port_entry(*port, PollingFrom::Host))?;
    }
    Ok(())
}

/// The ports of `switch` whose link leads to a host.
pub fn host_ports(topo: &FabricTopology, switch: NodeId) -> Vec<PortNo> {
    let host = |n: NodeId| {
        topo.nodes
            .get(n as usize)
            .is_some_and(|d| d.kind == NodeKind::Host)
    };
    let mut ports: Vec<PortNo> = topo
        .links
        .iter()
        .filter_map(|l| {
            if l.a.node == switch && host(l.b.node) {
                Some(l.a.port)
            } else if l.b.node == switch && host(l.a.node) {
                Some(l.b.port)
            } else {
                None
            }
        })
        .collect();
    ports.sort_unstable();
    ports.dedup();
    ports
}

/// Port speeds (Gbit/s) of `switch` indexed by local port number (ports without a link
/// get the speed of the switch's first link).
pub fn port_speeds(topo: &FabricTopology, switch: NodeId) -> Vec<f64> {
    let mut speeds: BTreeMap<PortNo, f64> = BTreeMap::new();
    for l in &topo.links {
        if l.a.node == switch {
            speeds.insert(l.a.port, l.gbps);
        }
        if l.b.node == switch {
            speeds.insert(l.b.port, l.gbps);
        }
    }
    let n = speeds.keys().next_back().map_or(0, |p| *p as usize + 1);
    let fill = speeds.values().next().copied().unwrap_or(100.0);
    (0..n)
        .map(|p| speeds.get(&(p as PortNo)).copied().unwrap_or(fill))
        .collect()
}

/// Whether `switch` has a host behind one of its ports (a ToR / leaf).
pub fn is_tor(topo: &FabricTopology, switch: NodeId) -> bool {
    let host = |n: NodeId| {
        topo.nodes
            .get(n as usize)
            .is_some_and(|d| d.kind == NodeKind::Host)
    };
    topo.links
        .iter()
        .any(|l| (l.a.node == switch && host(l.b.node)) || (l.b.node == switch && host(l.a.node)))
}
