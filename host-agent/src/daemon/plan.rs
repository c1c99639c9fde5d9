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
//!
//! Service tracing (R-Pingmesh §4.1.2) is a third loop: the service connections this
//! interface has open, each probed on its own 5-tuple every `interval` (10 ms), the loop's
//! rate capped (with many connections each is probed less often).

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

use hawkmesh_proto::v1 as pb;

use crate::engine::{ProbeTarget, MAX_ID};
use crate::transport::UdAddr;

/// Slots in one cycle at most (a cycle longer than this is cut: both loops still take
/// turns in proportion, over a shorter horizon).
pub const MAX_CYCLE: usize = 65_536;

/// Lowest RoCEv2 UDP source port (rdma-core sets the top two bits: `| 0xC000`).
const SOURCE_PORT_BASE: u16 = hawkmesh_wire::roce::UDP_SPORT_MIN;

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
    pub targets: Vec<ProbeTarget<UdAddr>>,
    /// Time between two probes.
    pub interval: Duration,
    /// What each (address, source port, QPN) stands for.
    pub info: HashMap<TargetKey, TargetInfo>,
    /// Pinglist entries that could not be used, each with the reason.
    pub refused: Vec<String>,
}

/// A service connection to trace, with its peer's comm info.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ServiceTarget {
    /// The peer RNIC's address.
    pub ip: IpAddr,
    /// Its probe queue pair.
    pub qpn: u32,
    /// Its host.
    pub host: String,
    /// Its NIC index.
    pub nic: u32,
    /// The connection's RoCEv2 source port.
    pub src_port: u16,
}

/// The service-tracing loop of an interface.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceLoop {
    /// The connections, each probed once per `per_target`.
    pub targets: Vec<ServiceTarget>,
    /// Time between two probes of one connection, ns.
    pub per_target_ns: u64,
    /// Probes per second the loop may send at most.
    pub max_pps: f64,
}

impl ServiceLoop {
    /// The loop's interval (between two of its probes), ns: each connection once per
    /// `per_target_ns`, no faster than `max_pps`; 0 for an empty loop.
    pub fn interval_ns(&self) -> u64 {
        self.interval_for(self.targets.len())
    }

    fn interval_for(&self, count: usize) -> u64 {
        if count == 0 {
            return 0;
        }
        let even = self.per_target_ns / count as u64;
        let floor = if self.max_pps > 0.0 {
            (1e9 / self.max_pps).ceil() as u64
        } else {
            u64::MAX
        };
        even.max(floor).max(1)
    }
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

/// The plan of the interface at `local` from its pinglist (none: not fetched yet) and its
/// service connections.
pub fn plan(local: IpAddr, list: Option<&pb::RnicPinglist>, services: &ServiceLoop) -> Plan {
    let empty = pb::RnicPinglist::default();
    let list = list.unwrap_or(&empty);
    let mut plan = Plan::default();
    let mut groups: [Vec<ProbeTarget<UdAddr>>; 3] = [Vec::new(), Vec::new(), Vec::new()];
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
            addr: UdAddr::of_ip(ip, t.qpn),
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
    for (i, s) in services.targets.iter().enumerate() {
        if s.ip.is_ipv4() != local.is_ipv4() || s.qpn > MAX_ID || s.src_port == 0 {
            plan.refused.push(format!(
                "service connection {i} to {}:{} ({} qpn {:#x} port {}): not probeable from {local}",
                s.host, s.nic, s.ip, s.qpn, s.src_port
            ));
            continue;
        }
        plan.info
            .entry((s.ip, s.src_port, s.qpn))
            .or_insert_with(|| TargetInfo {
                host: s.host.clone(),
                nic: s.nic,
                kind: pb::ProbeKind::ServiceTracing,
            });
        groups[2].push(ProbeTarget {
            addr: UdAddr::of_ip(s.ip, s.qpn),
            src_port: s.src_port,
            responder_id: s.qpn,
        });
    }
    let intervals = [
        list.tor_mesh_interval_ns,
        list.inter_tor_interval_ns,
        services.interval_for(groups[2].len()),
    ];
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
    let horizon = (0..3)
        .filter(|g| !groups[*g].is_empty())
        .map(|g| intervals[g].saturating_mul(groups[g].len() as u64))
        .max()
        .unwrap_or(0);
    if horizon == 0 {
        return plan;
    }
    let mut slots: Vec<(u64, usize)> = Vec::new();
    for g in 0..3 {
        if groups[g].is_empty() {
            continue;
        }
        // Slots of this loop in the horizon. The intervals are whole nanoseconds, rounded
        // down from the pinglist's rates: a horizon a hair above a multiple of the
        // interval (3·10⁸ / 7,142,857 = 42.0000008) must not add a slot (2.4 % too many
        // probes), so an excess under 0.1 % is the rounding's, not a slot's.
        let count = (horizon - horizon / 1000).div_ceil(intervals[g]).max(1);
        for k in 0..count.min(MAX_CYCLE as u64) {
            slots.push((k.saturating_mul(intervals[g]), g));
        }
    }
    slots.sort_unstable();
    slots.truncate(MAX_CYCLE);
    let mut next = [0usize; 3];
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
        let plan = plan(local, Some(&list), &ServiceLoop::default());
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
        let info = &plan.info[&(h1.addr.ip(), h1.src_port, 11)];
        assert_eq!(
            (info.host.as_str(), info.kind),
            ("h1", pb::ProbeKind::TorMesh)
        );
    }

    /// A rate whose interval is rounded down to whole nanoseconds keeps its rate: 140 probes
    /// a second beside a 10/s ToR mesh is 150 in all, not 153.
    #[test]
    fn an_interval_rounded_down_does_not_add_a_slot() {
        let local: IpAddr = "10.0.0.1".parse().expect("an address");
        let mut targets: Vec<pb::ProbeTarget> = (0..3)
            .map(|i| {
                target(
                    &format!("h{i}"),
                    &format!("10.0.{i}.1"),
                    10 + i,
                    0,
                    pb::ProbeKind::TorMesh,
                )
            })
            .collect();
        for p in 0..6 {
            targets.push(target(
                "h9",
                "10.0.9.1",
                19,
                50_000 + p,
                pb::ProbeKind::InterTor,
            ));
        }
        let list = pb::RnicPinglist {
            nic: 0,
            tor_mesh_interval_ns: 100_000_000,
            // 1 s / 140, rounded down.
            inter_tor_interval_ns: 7_142_857,
            targets,
        };
        let plan = plan(local, Some(&list), &ServiceLoop::default());
        // Horizon 300 ms (the ToR mesh's 3 targets): 3 + 42 slots.
        assert_eq!(plan.targets.len(), 45);
        let per_second = plan.targets.len() as f64 / (plan.interval.as_secs_f64() * 45.0);
        assert!((per_second - 150.0).abs() < 0.1, "{per_second} probes/s");
    }

    fn service(ip: &str, qpn: u32, src_port: u16) -> ServiceTarget {
        ServiceTarget {
            ip: ip.parse().expect("an address"),
            qpn,
            host: format!("s{qpn}"),
            nic: 0,
            src_port,
        }
    }

    /// Service connections are a third loop: each probed on its own source port once per
    /// interval, beside the pinglist's loops at their rates; many connections are capped
    /// by the loop's probe rate.
    #[test]
    fn service_connections_are_probed_every_interval_beside_the_pinglist() {
        let local: IpAddr = "10.0.0.1".parse().expect("an address");
        let list = pb::RnicPinglist {
            nic: 0,
            tor_mesh_interval_ns: 100_000_000,
            inter_tor_interval_ns: 0,
            targets: vec![
                target("h1", "10.0.1.1", 11, 0, pb::ProbeKind::TorMesh),
                target("h2", "10.0.2.1", 12, 0, pb::ProbeKind::TorMesh),
            ],
        };
        let services = ServiceLoop {
            targets: vec![
                service("10.0.7.1", 0x70, 0xC007),
                service("10.0.8.1", 0x80, 0xC008),
            ],
            per_target_ns: 10_000_000,
            max_pps: 2_000.0,
        };
        let plan = plan(local, Some(&list), &services);
        assert!(plan.refused.is_empty(), "{:?}", plan.refused);
        // Horizon 200 ms: 2 ToR-mesh slots and 40 service slots (one every 5 ms).
        assert_eq!(plan.targets.len(), 42);
        assert_eq!(plan.interval, Duration::from_nanos(200_000_000 / 42));
        for (qpn, port) in [(0x70, 0xC007), (0x80, 0xC008)] {
            let each = plan
                .targets
                .iter()
                .filter(|t| t.responder_id == qpn && t.src_port == port)
                .count();
            assert_eq!(each, 20, "every 10 ms on its own port");
            let ip = plan
                .targets
                .iter()
                .find(|t| t.responder_id == qpn)
                .unwrap()
                .addr
                .ip();
            let info = &plan.info[&(ip, port, qpn)];
            assert_eq!(info.kind, pb::ProbeKind::ServiceTracing);
        }
        // Without a pinglist yet, the service loop alone.
        let alone = super::plan(local, None, &services);
        assert_eq!(alone.targets.len(), 2);
        assert_eq!(alone.interval, Duration::from_millis(5));
        // 100 connections at most 1,000 probes/s: each once per 100 ms, not per 10 ms.
        let many = ServiceLoop {
            targets: (0..100)
                .map(|i| service("10.0.7.1", 0x100 + i, 0xC100 + i as u16))
                .collect(),
            per_target_ns: 10_000_000,
            max_pps: 1_000.0,
        };
        assert_eq!(many.interval_ns(), 1_000_000);
        let capped = super::plan(local, None, &many);
        assert_eq!(capped.targets.len(), 100);
        assert_eq!(capped.interval, Duration::from_millis(1));
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
        let plan = plan(
            local,
            Some(&list),
            &ServiceLoop {
                targets: vec![service("fd00::9", 9, 0xC009)],
                per_target_ns: 10_000_000,
                max_pps: 100.0,
            },
        );
        assert!(plan.targets.is_empty());
        let refused = plan.refused.join("\n");
        for expected in [
            "target 0 (h1:0): ip \"ten\" is not an address",
            "target 1 (h2:0): qpn 0x1000000 does not fit in 24 bits",
            "target 2 (h3:0): src_port 70000 is not a UDP port",
            "target 4 (h6:0): ip fd00::6 is not of the family",
            "target 5 (h7:0): kind 3 is not a pinglist loop",
            "1 inter-ToR targets but no interval",
            "service connection 0 to s9:0 (fd00::9 qpn 0x9 port 49161): not probeable from 10.0.0.1",
        ] {
            assert!(refused.contains(expected), "{expected} not in\n{refused}");
        }
    }
}
