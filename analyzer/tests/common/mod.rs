//! Hand-built incidents shared by the integration tests.
//!
//! Leaf-spine fabric used by most tests (100 Gbit/s links, 1000-byte packets, epochs of
//! 2^17 ns ≈ 131 µs, i.e. ~1,640 packets of line rate per epoch):
//!
//! ```text
//!                 agg0 ─────────── agg1
//!               /  |   \         /  |  \
//!          tor0   tor1   tor2 ──'  tor1 tor0   (every tor links to both aggs)
//!          h0 h2  h1 h3  a1 a2 a3 a4 h9 h7
//! ```
//!
//! Ring fabric for deadlocks: s0 - s1 - s2 - s3 - s0, host hK on sK, extra host h9 on s2.

#![allow(dead_code)]

use hawkmesh_analyzer::testkit::{port_towards, Hop, IncidentBuilder, TopologyBuilder};
use hawkmesh_analyzer::{diagnose_reports, loaded, DiagnoseOptions, DiagnosisOutput};
use hawkmesh_wire::telemetry::{FiveTuple, TelemetryReport};
use hawkmesh_wire::topology::{FabricTopology, PortRef};

pub const EPOCH_NS: u64 = 1 << 17;
pub const WHOLE: (u32, u32) = (0, (EPOCH_NS - 1) as u32);

pub fn flow(src: u8, sport: u16, dst: u8) -> FiveTuple {
    FiveTuple::rocev2([10, 0, 0, src], sport, [10, 0, 0, dst])
}

/// The victim F1: h0 → h1.
pub fn victim() -> FiveTuple {
    flow(1, 49152, 2)
}

pub fn leaf_spine() -> FabricTopology {
    TopologyBuilder::new()
        .switch("tor0", Some(0))
        .switch("tor1", Some(0))
        .switch("tor2", Some(0))
        .switch("agg0", Some(1))
        .switch("agg1", Some(1))
        .host("h0", [10, 0, 0, 1])
        .host("h1", [10, 0, 0, 2])
        .host("h2", [10, 0, 0, 3])
        .host("h3", [10, 0, 0, 4])
        .host("a1", [10, 0, 0, 11])
        .host("a2", [10, 0, 0, 12])
        .host("a3", [10, 0, 0, 13])
        .host("a4", [10, 0, 0, 14])
        .host("h9", [10, 0, 0, 19])
        .host("h7", [10, 0, 0, 17])
        .link("tor0", "agg0")
        .link("tor0", "agg1")
        .link("tor1", "agg0")
        .link("tor1", "agg1")
        .link("tor2", "agg0")
        .link("tor2", "agg1")
        .link("h0", "tor0")
        .link("h2", "tor0")
        .link("h1", "tor1")
        .link("h3", "tor1")
        .link("a1", "tor2")
        .link("a2", "tor2")
        .link("a3", "tor2")
        .link("a4", "tor2")
        .link("h9", "tor2")
        .link("h7", "tor2")
        .build()
        .expect("leaf-spine topology")
}

pub fn ring() -> FabricTopology {
    TopologyBuilder::new()
        .switch("s0", None)
        .switch("s1", None)
        .switch("s2", None)
        .switch("s3", None)
        .host("h0", [10, 0, 0, 1])
        .host("h1", [10, 0, 0, 2])
        .host("h2", [10, 0, 0, 3])
        .host("h3", [10, 0, 0, 4])
        .host("h9", [10, 0, 0, 19])
        .link("s0", "s1")
        .link("s1", "s2")
        .link("s2", "s3")
        .link("s3", "s0")
        .link("h0", "s0")
        .link("h1", "s1")
        .link("h2", "s2")
        .link("h3", "s3")
        .link("h9", "s2")
        .build()
        .expect("ring topology")
}

/// [`ring`] with h1 on a 400G link (same node and port numbers).
pub fn ring_with_fast_h1() -> FabricTopology {
    let mut topology = ring();
    let h1 = topology
        .nodes
        .iter()
        .find(|n| n.name == "h1")
        .expect("h1")
        .id;
    for link in &mut topology.links {
        if link.a.node == h1 || link.b.node == h1 {
            link.gbps = 400.0;
        }
    }
    topology
}

pub fn port(topology: &FabricTopology, from: &str, to: &str) -> PortRef {
    port_towards(topology, from, to).expect("linked")
}

pub fn run(builder: &IncidentBuilder) -> DiagnosisOutput {
    run_reports(builder, builder.build_reports().expect("reports"))
}

/// Diagnoses `reports` (built by `builder`, then edited) on `builder`'s topology.
pub fn run_reports(builder: &IncidentBuilder, reports: Vec<TelemetryReport>) -> DiagnosisOutput {
    diagnose_reports(
        loaded(reports),
        builder.topology().clone(),
        victim(),
        &DiagnoseOptions::default(),
    )
    .expect("diagnosis")
}

pub fn burst(index: u8) -> FiveTuple {
    flow(10 + index, 50000 + u16::from(index), 19)
}

/// The long flow L: a4 → h9, blocked by the bursts at tor2.p(h9).
pub fn long_flow() -> FiveTuple {
    flow(14, 51000, 19)
}

/// F2: h2 → h9 through tor0 → agg0 → tor2, paused at tor0 and agg0.
pub fn f2() -> FiveTuple {
    flow(3, 49200, 19)
}

/// HAWKEYE Fig. 1(a): micro-burst incast at tor2.p(h9) (three bursts plus a long flow L),
/// PFC spreading to agg0.p(tor2) and tor0.p(agg0), where the victim h0 → h1 is paused. The
/// victim never crosses tor2: the PFC path does not overlap its path beyond tor0.
pub fn incast(builder: &mut IncidentBuilder) {
    let victim = victim();
    builder.flow(
        0,
        victim,
        &["h0", "tor0", "agg0", "tor1", "h1"],
        &[
            Hop::new(300).paused(200, 200_000).depth(20_000),
            Hop::new(300),
            Hop::new(300),
        ],
    );
    builder.flow(
        0,
        f2(),
        &["h2", "tor0", "agg0", "tor2", "h9"],
        &[
            Hop::new(200).paused(150, 200_000).depth(20_000),
            Hop::new(200).paused(150, 300_000).depth(30_000),
            Hop::new(200).depth(30_000),
        ],
    );
    micro_bursts_into_h9(builder);
    builder.flow(
        0,
        long_flow(),
        &["a4", "tor2", "h9"],
        &[Hop::new(700).depth(30_000)],
    );
}

/// The three micro-bursts a1..a3 → h9 contending at tor2.p(h9) in epoch 0.
pub fn micro_bursts_into_h9(builder: &mut IncidentBuilder) {
    micro_bursts_into_h9_in(builder, 0);
}

/// [`micro_bursts_into_h9`] in `epoch`.
pub fn micro_bursts_into_h9_in(builder: &mut IncidentBuilder, epoch: usize) {
    for index in 1..=3 {
        let host = format!("a{index}");
        builder.flow(
            epoch,
            burst(index),
            &[host.as_str(), "tor2", "h9"],
            &[Hop::new(200).depth(150_000).window(40_000, 55_000)],
        );
    }
}

/// HAWKEYE Fig. 1(b): host h7 pauses tor2.p(h7); PFC spreads to agg1.p(tor2) and
/// tor1.p(agg1). Flow S (h3 → h7) is paused along it; nobody contends at tor2.p(h7).
pub fn storm_at_h7(builder: &mut IncidentBuilder, with_victim: bool) {
    let storm_flow = flow(4, 49300, 17);
    builder.flow(
        0,
        storm_flow,
        &["h3", "tor1", "agg1", "tor2", "h7"],
        &[
            Hop::new(300).paused(220, 250_000).depth(40_000),
            Hop::new(300).paused(240, 300_000).depth(40_000),
            Hop::new(300).paused(260, 400_000).depth(120_000),
        ],
    );
    if with_victim {
        // The victim goes h0 → h7 over the same path from tor0.
        builder.flow(
            0,
            victim(),
            &["h0", "tor0", "agg1", "tor2", "h7"],
            &[
                Hop::new(250).paused(180, 200_000).depth(30_000),
                Hop::new(250).paused(200, 300_000).depth(40_000),
                Hop::new(250).paused(220, 400_000).depth(120_000),
            ],
        );
    }
}

/// Ring flows F_i: h_i → s_i → s_{i+1} → s_{i+2} → h_{i+2}, paused at both ring hops.
/// F0 is the victim.
pub fn ring_flows(builder: &mut IncidentBuilder, epoch: usize) {
    ring_flows_with_victim(
        builder,
        epoch,
        &[
            Hop::new(200).paused(180, 300_000).depth(50_000),
            Hop::new(200).paused(180, 300_000).depth(50_000),
            Hop::new(200),
        ],
    );
}

/// [`ring_flows`] with the victim's own hops given (e.g. packets still held behind the
/// pause, which its flow records do not count).
pub fn ring_flows_with_victim(builder: &mut IncidentBuilder, epoch: usize, victim_hops: &[Hop]) {
    let paused = [
        Hop::new(200).paused(180, 300_000).depth(50_000),
        Hop::new(200).paused(180, 300_000).depth(50_000),
        Hop::new(200),
    ];
    ring_flows_all(builder, epoch, victim_hops, &paused);
}

/// The four ring flows of [`ring_flows`] in `epoch`, the victim with `victim_hops` and the
/// three others with `other_hops`.
pub fn ring_flows_all(
    builder: &mut IncidentBuilder,
    epoch: usize,
    victim_hops: &[Hop],
    other_hops: &[Hop],
) {
    for i in 0..4u8 {
        let f = if i == 0 {
            victim()
        } else {
            flow(1 + i, 49400 + u16::from(i), 1 + (i + 2) % 4)
        };
        let h_in = format!("h{i}");
        let s0 = format!("s{i}");
        let s1 = format!("s{}", (i + 1) % 4);
        let s2 = format!("s{}", (i + 2) % 4);
        let h_out = format!("h{}", (i + 2) % 4);
        let hops: &[Hop] = if i == 0 { victim_hops } else { other_hops };
        builder.flow(epoch, f, &[&h_in, &s0, &s1, &s2, &h_out], hops);
    }
}
