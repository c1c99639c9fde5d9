//! From an RNIC's pinglist to what its engine probes: the targets in one round-robin cycle
//! and the time between two probes, so that the ToR-mesh and inter-ToR loops each keep the
//! rate the controller asked for (R-Pingmesh §4.2: ToR-mesh probes at their interval,
//! cycling through the RNICs under the ToR; inter-ToR probes at theirs, cycling through the
//! RNIC's 5-tuples).
//!
//! One engine sends at one interval, so both loops are merged into one cycle: over a
//! horizon long enough for each loop to reach each of its targets once, the loops' probe
//! times are laid out and sorted, each slot taking its loop's next target; the engine then
//! sends the cycle's slots evenly spaced over the horizon. Each loop keeps its rate; the
//! slots' spacing is evened out.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use hawkmesh_proto::v1 as pb;

use crate::engine::{ProbeTarget, MAX_ID};

/// Slots in one cycle at most (a cycle longer than this is cut: both loops still take
/// turns in proportion, over a shorter horizon).
pub const MAX_CYCLE: usize = 65_536;

/// Lowest RoCEv2 UDP source port (rdma-core sets the top two bits: `| 0xC000`).
const SOURCE_PORT_BASE: u16 = 0xC000;

/// What a probe target stands for, to name it in results.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetInfo {
    /// The target's host.
    pub host: String,
    /// Its NIC index.
    pub nic: u32,
    /// The loop that probes it.
    pub kind: pb::ProbeKind,
}

/// The key a result's target is found by.
pub type TargetKey = (IpAddr, u16, u32);

/// What one interface probes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// The cycle of targets, in sending order.
    pub targets: Vec<ProbeTarget<IpAddr>>,
    /// Time between two probes.
    pub interval: Duration,
    /// What each (address, source port, QPN) stands for.
    pub info: HashMap<TargetKey, TargetInfo>,
    /// Pinglist entries that could not be used, each with the reason.
    pub refused: Vec<String>,
}

/// The source port for a target whose pinglist entry leaves it to the agent (ToR mesh,
/// R-Pingmesh §4.2: one path, any port): a RoCEv2 port fixed per (prober, target) pair, so
/// that the same 5-tuple is probed (and traced) every time.
pub fn chosen_source_port(local: IpAddr, target: IpAddr, qpn: u32) -> u16 {
    // FNV-1a over the two addresses and the QPN.
    let mut hash: u32 = 0x811c_9dc5;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u32::from(*b);
            hash = hash.wrapping_mul(0x0100_0193);
        }
    };
    for ip in [local, target] {
        match ip {
            IpAddr::V4(v4) => feed(&v4.octets()),
            IpAddr::V6(v6) => feed(&v6.octets()),
        }
    }
    feed(&qpn.to_be_bytes());
    SOURCE_PORT_BASE | (hash as u16 & 0x3FFF)
}

fn kind_name(kind: pb::ProbeKind) -> &'static str {
    match kind {
        pb::ProbeKind::TorMesh => "ToR-mesh",
        pb::ProbeKind::InterTor => "inter-ToR",
        pb::ProbeKind::ServiceTracing => "service-tracing",
        pb::ProbeKind::Unspecified => "unspecified",
    }
}

/// The plan of the interface at `local` from its pinglist.
pub fn plan(local: IpAddr, list: &pb::RnicPinglist) -> Plan {
    let mut plan = Plan::default();
    let mut groups: [Vec<ProbeTarget<IpAddr>>; 2] = [Vec::new(), Vec::new()];
    for (i, t) in list.targets.iter().enumerate() {
        let place = format!(
            "pinglist of NIC {} target {i} ({}:{})",
            list.nic, t.host, t.nic
        );
        let kind = match pb::ProbeKind::try_from(t.kind) {
            Ok(k @ (pb::ProbeKind::TorMesh | pb::ProbeKind::InterTor)) => k,
            _ => {
                plan.refused
                    .push(format!("{place}: kind {} is not a pinglist loop", t.kind));
                continue;
            }
        };
        let Ok(ip) = t.ip.parse::<IpAddr>() else {
            plan.refused
                .push(format!("{place}: ip {:?} is not an address", t.ip));
            continue;
        };
        if ip.is_ipv4() != local.is_ipv4() {
            plan.refused.push(format!(
                "{place}: ip {ip} is not of the family of this interface's {local}"
            ));
            continue;
        }
        if t.qpn > MAX_ID {
            plan.refused
                .push(format!("{place}: qpn {:#x} does not fit in 24 bits", t.qpn));
            continue;
        }
        let src_port = match t.src_port {
            0 => chosen_source_port(local, ip, t.qpn),
            p => match u16::try_from(p) {
                Ok(p) if p != 0 => p,
                _ => {
                    plan.refused
                        .push(format!("{place}: src_port {p} is not a UDP port"));
                    continue;
                }
            },
        };
        let target = ProbeTarget {
            addr: ip,
            src_port,
            responder_id: t.qpn,
        };
        plan.info
            .entry((ip, src_port, t.qpn))
            .or_insert_with(|| TargetInfo {
                host: t.host.clone(),
                nic: t.nic,
                kind,
            });
        let group = usize::from(kind == pb::ProbeKind::InterTor);
        groups[group].push(target);
    }
    let intervals = [list.tor_mesh_interval_ns, list.inter_tor_interval_ns];
    for (g, name) in [pb::ProbeKind::TorMesh, pb::ProbeKind::InterTor]
        .iter()
        .enumerate()
    {
        if !groups[g].is_empty() && intervals[g] == 0 {
            plan.refused.push(format!(
                "pinglist of NIC {}: {} {} targets but no interval; not probed",
                list.nic,
                groups[g].len(),
                kind_name(*name)
            ));
            groups[g].clear();
        }
    }
    // The horizon: long enough for each loop to reach each of its targets once.
    let horizon = (0..2)
        .filter(|g| !groups[*g].is_empty())
        .map(|g| intervals[g].saturating_mul(groups[g].len() as u64))
        .max()
        .unwrap_or(0);
    if horizon == 0 {
        return plan;
    }
    let mut slots: Vec<(u64, usize)> = Vec::new();
    for g in 0..2 {
        if groups[g].is_empty() {
            continue;
        }
        let count = horizon.div_ceil(intervals[g]);
        for k in 0..count.min(MAX_CYCLE as u64) {
            slots.push((k.saturating_mul(intervals[g]), g));
        }
    }
    slots.sort_unstable();
    slots.truncate(MAX_CYCLE);
    let mut next = [0usize; 2];
    let mut last_time = 0;
    for (time, g) in &slots {
        let members = &groups[*g];
        plan.targets.push(members[next[*g] % members.len()].clone());
        next[*g] += 1;
        last_time = *time;
    }
    // A cut cycle spans up to its last slot (plus one interval of the denser loop).
    let span = if slots.len() == MAX_CYCLE {
        last_time.max(1)
    } else {
        horizon
    };
    plan.interval = Duration::from_nanos((span / plan.targets.len() as u64).max(1));
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(
        host: &str,
        ip: &str,
        qpn: u32,
        src_port: u32,
        kind: pb::ProbeKind,
    ) -> pb::ProbeTarget {
        pb::ProbeTarget {
            host: host.into(),
            nic: 0,
            gid: Vec::new(),
            ip: ip.into(),
            qpn,
            src_port,
            kind: kind as i32,
        }
    }

    #[test]
    fn both_loops_keep_their_rates_in_one_cycle() {
        let local: IpAddr = "10.0.0.1".parse().expect("an address");
        let mut targets = vec![
            target("h1", "10.0.1.1", 11, 0, pb::ProbeKind::TorMesh),
            target("h2", "10.0.2.1", 12, 0, pb::ProbeKind::TorMesh),
        ];
        for p in 0..4 {
            targets.push(target(
                "h5",
                "10.0.5.1",
                15,
                50_000 + p,
                pb::ProbeKind::InterTor,
            ));
        }
        // ToR mesh 10/s, inter-ToR 40/s.
        let list = pb::RnicPinglist {
            nic: 0,
            tor_mesh_interval_ns: 100_000_000,
            inter_tor_interval_ns: 25_000_000,
            targets,
        };
        let plan = plan(local, &list);
        assert!(plan.refused.is_empty(), "{:?}", plan.refused);
        // Horizon 200 ms: 2 ToR-mesh slots, 8 inter-ToR slots, 20 ms apart.
        assert_eq!(plan.targets.len(), 10);
        assert_eq!(plan.interval, Duration::from_millis(20));
        let tor = plan.targets.iter().filter(|t| t.responder_id != 15).count();
        assert_eq!(tor, 2);
        // Every inter-ToR 5-tuple twice, every ToR-mesh target once.
        for p in 0..4u16 {
            assert_eq!(
                plan.targets
                    .iter()
                    .filter(|t| t.src_port == 50_000 + p)
                    .count(),
                2
            );
        }
        // The ToR-mesh source ports are the agent's, fixed per pair, RoCEv2 ones.
        let h1 = plan
            .targets
            .iter()
            .find(|t| t.responder_id == 11)
            .expect("h1");
        assert!(h1.src_port >= 0xC000);
        assert_eq!(
            h1.src_port,
            chosen_source_port(local, "10.0.1.1".parse().expect("an address"), 11)
        );
        let info = &plan.info[&(h1.addr, h1.src_port, 11)];
        assert_eq!(
            (info.host.as_str(), info.kind),
            ("h1", pb::ProbeKind::TorMesh)
        );
    }

    #[test]
    fn unusable_entries_are_refused_with_the_reason() {
        let local: IpAddr = "10.0.0.1".parse().expect("an address");
        let list = pb::RnicPinglist {
            nic: 1,
            tor_mesh_interval_ns: 100_000_000,
            inter_tor_interval_ns: 0,
            targets: vec![
                target("h1", "ten", 11, 0, pb::ProbeKind::TorMesh),
                target("h2", "10.0.2.1", 1 << 24, 0, pb::ProbeKind::TorMesh),
                target("h3", "10.0.3.1", 13, 70_000, pb::ProbeKind::TorMesh),
                target("h4", "10.0.4.1", 14, 50_000, pb::ProbeKind::InterTor),
                target("h6", "fd00::6", 16, 0, pb::ProbeKind::TorMesh),
                target("h7", "10.0.7.1", 17, 0, pb::ProbeKind::ServiceTracing),
            ],
        };
        let plan = plan(local, &list);
        assert!(plan.targets.is_empty());
        let refused = plan.refused.join("\n");
        for expected in [
            "target 0 (h1:0): ip \"ten\" is not an address",
            "target 1 (h2:0): qpn 0x1000000 does not fit in 24 bits",
            "target 2 (h3:0): src_port 70000 is not a UDP port",
            "target 4 (h6:0): ip fd00::6 is not of the family",
            "target 5 (h7:0): kind 3 is not a pinglist loop",
            "1 inter-ToR targets but no interval",
        ] {
            assert!(refused.contains(expected), "{expected} not in\n{refused}");
        }
    }
}
