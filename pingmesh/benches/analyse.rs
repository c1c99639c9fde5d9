//! Analyzer throughput: one 20-s period of a 10,000-RNIC cluster's probe results.
//!
//! `cargo bench -p hawkmesh-pingmesh --bench analyse` prints probe results per second on one
//! core (the target: at least 2 million) and the period's analysis time.

use std::collections::BTreeMap;
use std::time::Instant;

use hawkmesh_pingmesh::analysis::{
    AnalysisConfig, Analyzer, ProbeRecord, ProbeSource, ProbeStatus,
};
use hawkmesh_pingmesh::inventory::{Inventory, RnicId};
use hawkmesh_pingmesh::rng::SplitMix64;
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeId, NodeKind, PortRef};

/// Leaf-spine: 250 leaves × 40 single-NIC hosts (10,000 RNICs), 16 spines.
fn cluster() -> FabricTopology {
    let mut t = FabricTopology::default();
    let mut ports: Vec<u16> = Vec::new();
    let node = |t: &mut FabricTopology, ports: &mut Vec<u16>, name: String, kind, ipv4| {
        let id = t.nodes.len() as NodeId;
        t.nodes.push(NodeDesc {
            id,
            name,
            kind,
            tier: None,
            ipv4,
        });
        ports.push(0);
        id
    };
    let link = |t: &mut FabricTopology, ports: &mut Vec<u16>, a: NodeId, b: NodeId| {
        let (pa, pb) = (ports[a as usize], ports[b as usize]);
        ports[a as usize] += 1;
        ports[b as usize] += 1;
        t.links.push(LinkDesc {
            a: PortRef { node: a, port: pa },
            b: PortRef { node: b, port: pb },
            gbps: 400.0,
            delay_ns: 1_000,
        });
    };
    let spines: Vec<NodeId> = (0..16)
        .map(|s| {
            node(
                &mut t,
                &mut ports,
                format!("spine{s}"),
                NodeKind::Switch,
                None,
            )
        })
        .collect();
    for l in 0..250u32 {
        let leaf = node(
            &mut t,
            &mut ports,
            format!("leaf{l}"),
            NodeKind::Switch,
            None,
        );
        for s in &spines {
            link(&mut t, &mut ports, leaf, *s);
        }
        for h in 0..40u32 {
            let ip = [10, (l >> 8) as u8, l as u8, h as u8 + 1];
            let host = node(
                &mut t,
                &mut ports,
                format!("h{l}_{h}"),
                NodeKind::Host,
                Some(ip),
            );
            link(&mut t, &mut ports, host, leaf);
        }
    }
    t
}

fn main() {
    let topology = cluster();
    let inventory = Inventory::from_topology(&topology).expect("cluster");
    let rnics = inventory.rnics().len() as u64;
    let qpn: BTreeMap<RnicId, u32> = (0..rnics as RnicId).map(|r| (r, 1000 + r)).collect();
    let mut rng = SplitMix64::new(1);
    // 2 million results: 0.1 % timeouts, 0.1 % high RTT; inter-ToR ones carry 4-hop paths.
    let probes: Vec<ProbeRecord> = (0..2_000_000u64)
        .map(|i| {
            let prober = rng.below(rnics) as RnicId;
            let target = rng.below(rnics) as RnicId;
            let inter = i % 3 != 0;
            let roll = rng.below(1000);
            let status = match roll {
                0 => ProbeStatus::Timeout {
                    ack: false,
                    delay_ack: false,
                },
                1 => ProbeStatus::Answered {
                    network_rtt_ns: 5_000_000,
                    prober_delay_ns: 3_000,
                    responder_delay_ns: 2_000,
                },
                _ => ProbeStatus::Answered {
                    network_rtt_ns: 8_000 + rng.below(4_000),
                    prober_delay_ns: 3_000,
                    responder_delay_ns: 2_000,
                },
            };
            let path = if inter {
                let spine = rng.below(16) as u16;
                vec![
                    PortRef {
                        node: 0,
                        port: spine,
                    },
                    PortRef {
                        node: 1,
                        port: spine,
                    },
                    PortRef { node: 2, port: 0 },
                    PortRef { node: 3, port: 0 },
                ]
            } else {
                Vec::new()
            };
            ProbeRecord {
                prober,
                target,
                source: if inter {
                    ProbeSource::InterTor
                } else {
                    ProbeSource::TorMesh
                },
                target_qpn: 1000 + target,
                sent_ns: i * 10_000,
                status,
                ack_path: path.clone().into(),
                path: path.into(),
            }
        })
        .collect();
    let mut analyzer = Analyzer::new(AnalysisConfig::default());
    for r in inventory.rnics() {
        analyzer.uploaded(r.host, 19_000_000_000);
    }
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        let report = analyzer.analyse(&inventory, &qpn, &probes, (0, 20_000_000_000), None);
        let took = start.elapsed().as_secs_f64();
        best = best.min(took);
        assert!(report.cluster.probes > 0);
    }
    println!(
        "analyse: {} probe results of {} RNICs in {:.3} s (best of 5) = {:.2} M results/s on one core",
        probes.len(),
        rnics,
        best,
        probes.len() as f64 / best / 1e6
    );
}
