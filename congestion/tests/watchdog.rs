//! The PFC watchdog: a storm after exactly the detection time and not before, restoration
//! after the restoration time, no storm while the queue transmits, and a 3-port deadlock.

use hawkmesh_congestion::watchdog::{link_map, QueueState};
use hawkmesh_congestion::{
    Direction, PortId, PortKey, Sample, Tier, Verdict, Watchdog, WatchdogConfig,
};

const MS: u64 = 1_000_000;

fn port(node: &str, n: u32) -> PortId {
    PortId::new(node, n, Tier::Tor, Direction::Up)
}

/// A sample at `t_ms` with priority 3's counters.
fn at(p: &PortId, t_ms: u64, rx_frames: u64, rx_us: u64, tx_pkts: u64) -> Sample {
    let mut s = Sample::new(p.clone(), t_ms * MS, 0);
    s.pfc[3].rx_pause = Some(rx_frames);
    s.pfc[3].rx_pause_duration_us = Some(rx_us);
    s.pfc[3].tx_pkts = Some(tx_pkts);
    s
}

#[test]
fn storm_after_exactly_the_detection_time_then_restored() {
    let p = port("tor1", 1);
    let mut wd = Watchdog::new(WatchdogConfig::default());
    // Transmitting normally, then paused with no transmission from t = 100 ms.
    assert!(wd.observe(&at(&p, 0, 0, 0, 10)).is_empty());
    assert!(wd.observe(&at(&p, 100, 0, 0, 20)).is_empty());
    assert!(wd.observe(&at(&p, 150, 40, 50_000, 20)).is_empty());
    assert!(wd.observe(&at(&p, 250, 90, 150_000, 20)).is_empty());
    assert_eq!(
        wd.state(&p.key(), 3),
        Some(QueueState::Stalled { since_ns: 100 * MS })
    );
    // 299 ms: 199 ms stalled — not yet.
    assert!(wd.observe(&at(&p, 299, 110, 199_000, 20)).is_empty());
    // 300 ms: exactly 200 ms.
    let v = wd.observe(&at(&p, 300, 120, 200_000, 20));
    match v.as_slice() {
        [Verdict::Storm {
            port: sp,
            priority: 3,
            since_ns,
            detected_ns,
            evidence,
        }] => {
            assert_eq!(sp, &p);
            assert_eq!((*since_ns, *detected_ns), (100 * MS, 300 * MS));
            assert_eq!(evidence.rx_pause_frames, Some(120));
            assert_eq!(evidence.rx_pause_duration_us, Some(200_000));
            assert_eq!(evidence.tx_pkts, Some(0));
            assert_eq!(
                (evidence.from_ns, evidence.to_ns, evidence.intervals),
                (100 * MS, 300 * MS, 4)
            );
        }
        other => panic!("expected one storm, got {other:?}"),
    }
    // Still paused: stays in storm, no new verdict.
    assert!(wd.observe(&at(&p, 400, 160, 300_000, 20)).is_empty());
    // Pauses stop at 400 ms; restored at 600 ms, not at 599.
    assert!(wd.observe(&at(&p, 500, 160, 300_000, 30)).is_empty());
    assert!(wd.observe(&at(&p, 599, 160, 300_000, 40)).is_empty());
    let v = wd.observe(&at(&p, 600, 160, 300_000, 50));
    match v.as_slice() {
        [Verdict::Restored {
            storm_since_ns,
            restored_ns,
            evidence,
            ..
        }] => {
            assert_eq!((*storm_since_ns, *restored_ns), (100 * MS, 600 * MS));
            assert_eq!(evidence.tx_pkts, Some(30));
            assert_eq!(evidence.rx_pause_frames, Some(0));
        }
        other => panic!("expected a restoration, got {other:?}"),
    }
    assert_eq!(wd.state(&p.key(), 3), Some(QueueState::Normal));
    // Verdicts serialise with their evidence.
    let json = serde_json::to_string(&v).expect("json");
    assert!(json.contains("\"verdict\":\"restored\""), "{json}");
}

#[test]
fn a_paused_queue_that_transmits_is_no_storm() {
    let p = port("tor1", 2);
    let mut wd = Watchdog::new(WatchdogConfig::default());
    let all: Vec<Sample> = (0..20u64)
        .map(|i| at(&p, i * 100, i * 10, i * 30_000, i * 1000))
        .collect();
    assert!(wd.observe_all(&all).is_empty());
    // Stale or repeated samples are ignored.
    assert!(wd.observe(&at(&p, 100, 0, 0, 0)).is_empty());
}

#[test]
fn a_stall_that_breaks_restarts_the_clock() {
    let p = port("tor1", 3);
    let mut wd = Watchdog::new(WatchdogConfig::default());
    let seq = [
        at(&p, 0, 0, 0, 0),
        at(&p, 100, 5, 90_000, 0),
        at(&p, 200, 5, 90_000, 0),  // a calm interval
        at(&p, 300, 9, 180_000, 0), // 300 ms: would have been 200 ms since 100 ms
    ];
    assert!(wd.observe_all(&seq).is_empty());
    let v = wd.observe(&at(&p, 400, 14, 270_000, 0));
    assert!(
        matches!(v.as_slice(), [Verdict::Storm { since_ns, detected_ns, .. }] if (*since_ns, *detected_ns) == (200 * MS, 400 * MS)),
        "{v:?}"
    );
}

#[test]
fn three_ports_paused_in_a_cycle_are_a_deadlock() {
    // s1:2 -> s2:1, s2:2 -> s3:1, s3:2 -> s1:1 (a ring), plus a bystander link.
    let links = link_map(&[
        (PortKey::new("s1", 2), PortKey::new("s2", 1)),
        (PortKey::new("s2", 2), PortKey::new("s3", 1)),
        (PortKey::new("s3", 2), PortKey::new("s1", 1)),
        (PortKey::new("s1", 3), PortKey::new("h1", 1)),
    ]);
    let ring = [port("s1", 2), port("s2", 2), port("s3", 2)];
    let bystander = port("s1", 3);
    let mut wd = Watchdog::new(WatchdogConfig::default());
    let mut storms = 0;
    for step in 0..=3u64 {
        for p in ring.iter().chain([&bystander]) {
            storms += wd
                .observe(&at(p, step * 100, step * 7, step * 95_000, 5))
                .iter()
                .filter(|v| matches!(v, Verdict::Storm { .. }))
                .count();
        }
    }
    assert_eq!(storms, 4);
    let dl = wd.deadlocks(&links);
    match dl.as_slice() {
        [Verdict::Deadlock {
            priority: 3,
            cycle,
            detected_ns,
        }] => {
            let mut keys: Vec<PortKey> = cycle.iter().map(PortId::key).collect();
            assert_eq!(keys.len(), 3);
            // Each waits on the next: peer of cycle[i] is on cycle[i+1]'s node.
            for i in 0..3 {
                let peer = &links[&keys[i]];
                assert_eq!(peer.node, keys[(i + 1) % 3].node);
            }
            keys.sort();
            assert_eq!(keys, ring.iter().map(PortId::key).collect::<Vec<_>>());
            assert_eq!(*detected_ns, 300 * MS);
        }
        other => panic!("expected one deadlock, got {other:?}"),
    }
    // Without the link closing the ring there is no cycle.
    let open = link_map(&[
        (PortKey::new("s1", 2), PortKey::new("s2", 1)),
        (PortKey::new("s2", 2), PortKey::new("s3", 1)),
    ]);
    assert!(wd.deadlocks(&open).is_empty());
}
