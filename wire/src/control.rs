//! Control-plane objects of the switch program, as every backend takes them (the executable
//! model, BF Runtime on Tofino): table entries. Tables and registers themselves are named by
//! the generated typed ids [`crate::dataplane::Table`] and [`crate::dataplane::Register`].

/// A table entry as the control plane adds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableEntry {
    /// Key values, one per key field (ternary: value).
    pub key: Vec<u64>,
    /// Ternary masks (empty for exact tables).
    pub mask: Vec<u64>,
    /// Ternary priority (lower wins).
    pub priority: u32,
    /// Action name.
    pub action: String,
    /// Action parameters.
    pub params: Vec<u64>,
}

use crate::dataplane::{Table, ECMP_BUCKETS};
use std::net::Ipv4Addr;

impl TableEntry {
    /// An exact-match entry.
    pub fn exact(key: Vec<u64>, action: &str, params: Vec<u64>) -> Self {
        TableEntry {
            key,
            mask: vec![],
            priority: 0,
            action: action.to_string(),
            params,
        }
    }
}

/// The `forward` entries of destination `dst` whose ECMP next hops are `ports` (in order):
/// one `set_route` entry per ECMP bucket, bucket `b` to `ports[b % ports.len()]`; none for
/// no ports.
pub fn forward_entries(dst: Ipv4Addr, ports: &[u16]) -> Vec<TableEntry> {
    if ports.is_empty() {
        return Vec::new();
    }
    (0..u64::from(ECMP_BUCKETS))
        .map(|b| {
            let port = ports[b as usize % ports.len()];
            TableEntry::exact(
                vec![u64::from(u32::from(dst)), b],
                "set_route",
                vec![u64::from(port)],
            )
        })
        .collect()
}

/// The one-hot port masks the control plane installs at start-up for a program with `ports`
/// front-panel ports, in ingress (`port_mask`) and egress (`egress_port_mask`): Tofino's ALUs
/// shift by immediates only, so `1 << port` is a table (one 32-bit parameter per 32 ports).
pub fn port_mask_entries(ports: u16) -> Vec<(Table, TableEntry)> {
    let words = u64::from(ports).div_ceil(32);
    let mut out = Vec::new();
    for (table, action) in [
        (Table::PORT_MASK, "port_mask_set"),
        (Table::EGRESS_PORT_MASK, "egress_port_mask_set"),
    ] {
        for port in 0..u64::from(ports) {
            let params = (0..words)
                .map(|w| {
                    if port / 32 == w {
                        1u64 << (port % 32)
                    } else {
                        0
                    }
                })
                .collect();
            out.push((table, TableEntry::exact(vec![port], action, params)));
        }
    }
    out
}

/// Where polling packets may come from on a port (the data plane's `polling_port` guard).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PollingFrom {
    /// A host-facing port: polling accepted within the port's rate limit.
    Host,
    /// A fabric-facing port (another switch): polling trusted.
    Fabric,
}

impl PollingFrom {
    /// The program's action.
    pub fn action(self) -> &'static str {
        match self {
            PollingFrom::Host => "polling_from_host",
            PollingFrom::Fabric => "polling_from_fabric",
        }
    }
}

/// The `polling_port` entry of `port` (a port without one refuses polling).
pub fn polling_port_entry(port: u16, from: PollingFrom) -> TableEntry {
    TableEntry::exact(vec![u64::from(port)], from.action(), vec![])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_spread_next_hops_in_order() {
        let e = forward_entries(Ipv4Addr::new(10, 0, 1, 1), &[3, 5, 9]);
        assert_eq!(e.len(), ECMP_BUCKETS as usize);
        let ports: Vec<u64> = e.iter().map(|x| x.params[0]).collect();
        assert_eq!(&ports[..4], &[3, 5, 9, 3]);
        assert_eq!(e[5].key, vec![0x0A00_0101, 5]);
        assert!(forward_entries(Ipv4Addr::new(10, 0, 1, 1), &[]).is_empty());
    }

    #[test]
    fn masks_are_one_hot_per_word() {
        let m = port_mask_entries(40);
        assert_eq!(m.len(), 80);
        assert_eq!(m[33].1.params, vec![0, 1 << 1]);
        assert_eq!(m[40].0, Table::EGRESS_PORT_MASK);
        assert_eq!(m[40].1.params, vec![1, 0]);
    }
}
