//! Pingmesh intake throughput: result batches of a 10,000-RNIC cluster (1,250 hosts × 8
//! RNICs, 250 leaves, 16 spines) through what the controller does with an upload — protobuf
//! decoding, the checks against the inventory, the append to `pingmesh.log` (synced) and the
//! filing by period — then that period's analysis.
//!
//! `cargo bench -p hawkmesh-analyzer-server --bench ingest` prints results per second on one
//! core with and without the per-batch fsync, and the analysis time of the period.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use hawkmesh_analyzer_server::pingmesh::{
    Clock, Controller, PeriodAnalyzer, PingmeshConfig, PingmeshLimits,
};
use hawkmesh_pingmesh::rng::SplitMix64;
use hawkmesh_proto::v1 as pb;
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeId, NodeKind, PortRef};
use prost::Message;

const LEAVES: u32 = 250;
const SPINES: u32 = 16;
const HOSTS_PER_LEAF: u32 = 5;
const NICS: u32 = 8;
const PERIOD: u64 = 20_000_000_000;

/// Leaf l: ports 0..16 to the spines, then 40 host NICs; spine s port l to leaf l.
fn cluster() -> FabricTopology {
    let mut nodes = Vec::new();
    let mut links = Vec::new();
    let mut add = |name: String, kind: NodeKind, ipv4: Option<[u8; 4]>| {
        let id = nodes.len() as NodeId;
        nodes.push(NodeDesc {
            id,
            name,
            kind,
            tier: None,
            ipv4,
        });
        id
    };
    let spines: Vec<NodeId> = (0..SPINES)
        .map(|s| add(format!("spine{s}"), NodeKind::Switch, None))
        .collect();
    let mut hosts = Vec::new();
    for l in 0..LEAVES {
        let leaf = add(format!("leaf{l}"), NodeKind::Switch, None);
        for (s, spine) in spines.iter().enumerate() {
            links.push((leaf, s as u16, *spine, l as u16));
        }
        for h in 0..HOSTS_PER_LEAF {
            let ip = [10, (l >> 8) as u8, l as u8, (h * NICS) as u8 + 1];
            let host = add(format!("h{l}_{h}"), NodeKind::Host, Some(ip));
            for n in 0..NICS {
                links.push((host, n as u16, leaf, (SPINES + h * NICS + n) as u16));
            }
            hosts.push(host);
        }
    }
    FabricTopology {
        nodes,
        links: links
            .into_iter()
            .map(|(a, pa, b, pb)| LinkDesc {
                a: PortRef { node: a, port: pa },
                b: PortRef { node: b, port: pb },
                gbps: 400.0,
                delay_ns: 1_000,
            })
            .collect(),
    }
}

fn hop(node: String, port: u32) -> pb::Hop {
    pb::Hop { node, port }
}

/// One host's 5-s upload at the paper's rates: each RNIC sends 10 ToR-mesh probes/s and
/// about 10 inter-ToR probes/s, each with its traced path and its ACKs' (1 in 1,000 a
/// timeout).
fn batch(host: u32, seq: u64, start_ns: u64, rng: &mut SplitMix64) -> pb::ResultBatch {
    let (leaf, h) = (host / HOSTS_PER_LEAF, host % HOSTS_PER_LEAF);
    let mut results = Vec::new();
    for nic in 0..NICS {
        for i in 0..100u64 {
            let inter = i % 2 == 1;
            // Each RNIC probes a fixed list (its pinglist): 4 ToR-mesh peers and 5 inter-ToR
            // 5-tuples, each 5-tuple on one spine.
            let mut list = SplitMix64::new(u64::from(host * NICS + nic));
            let (tl, th, tn, spine) = if inter {
                let pick = i / 2 % 5;
                let mut choice = (0, 0, 0);
                for _ in 0..=pick {
                    let mut tl = list.below(u64::from(LEAVES)) as u32;
                    if tl == leaf {
                        tl = (tl + 1) % LEAVES;
                    }
                    choice = (
                        tl,
                        list.below(u64::from(HOSTS_PER_LEAF)) as u32,
                        list.below(u64::from(SPINES)) as u32,
                    );
                }
                (choice.0, choice.1, nic, choice.2)
            } else {
                (leaf, (h + 1 + (i / 2 % 4) as u32) % HOSTS_PER_LEAF, nic, 0)
            };
            let (path, ack_path) = if inter {
                (
                    vec![
                        hop(format!("h{leaf}_{h}"), nic),
                        hop(format!("leaf{leaf}"), spine),
                        hop(format!("spine{spine}"), tl),
                        hop(format!("leaf{tl}"), SPINES + th * NICS + tn),
                    ],
                    vec![
                        hop(format!("h{tl}_{th}"), tn),
                        hop(format!("leaf{tl}"), spine),
                        hop(format!("spine{spine}"), leaf),
                        hop(format!("leaf{leaf}"), SPINES + h * NICS + nic),
                    ],
                )
            } else {
                (
                    vec![
                        hop(format!("h{leaf}_{h}"), nic),
                        hop(format!("leaf{leaf}"), SPINES + th * NICS + tn),
                    ],
                    vec![
                        hop(format!("h{tl}_{th}"), tn),
                        hop(format!("leaf{leaf}"), SPINES + h * NICS + nic),
                    ],
                )
            };
            let lost = rng.below(1000) == 0;
            results.push(pb::ProbeResult {
                prober_nic: nic,
                target_host: format!("h{tl}_{th}"),
                target_nic: tn,
                target_qpn: 1000,
                kind: if inter {
                    pb::ProbeKind::InterTor
                } else {
                    pb::ProbeKind::TorMesh
                } as i32,
                sent_ns: start_ns + i * 50_000_000 + u64::from(nic) * 1_000,
                status: if lost {
                    pb::ProbeStatus::Timeout
                } else {
                    pb::ProbeStatus::Answered
                } as i32,
                network_rtt_ns: if lost { 0 } else { 8_000 + rng.below(4_000) },
                prober_delay_ns: 3_000,
                responder_delay_ns: 2_000,
                path,
                ack_path,
                ..pb::ProbeResult::default()
            });
        }
    }
    // As agents send them: each distinct path once in the batch's table.
    let mut paths: Vec<pb::Path> = Vec::new();
    for result in &mut results {
        for (inline, number) in [
            (std::mem::take(&mut result.path), &mut result.path_ref),
            (
                std::mem::take(&mut result.ack_path),
                &mut result.ack_path_ref,
            ),
        ] {
            if inline.is_empty() {
                continue;
            }
            let at = paths
                .iter()
                .position(|p| p.hops == inline)
                .unwrap_or_else(|| {
                    paths.push(pb::Path { hops: inline });
                    paths.len() - 1
                });
            *number = at as u32 + 1;
        }
    }
    pb::ResultBatch {
        host: format!("h{leaf}_{h}"),
        incarnation: 1,
        batch_seq: seq,
        results,
        paths,
    }
}

/// This thread's time on a CPU so far, ns (Linux: the first field of schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat")
}

fn main() {
    let topology = cluster();
    let dir = std::env::temp_dir().join(format!("hawkmesh-ingest-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let t0 = 1_000 * PERIOD;
    let clock = Arc::new(AtomicU64::new(t0));
    let config = PingmeshConfig {
        clock: Clock::Manual(clock.clone()),
        limits: PingmeshLimits {
            max_pending_results: 10_000_000,
            ..PingmeshLimits::default()
        },
        ..PingmeshConfig::default()
    };
    let (mut controller, _) = Controller::open(&topology, &dir, config).expect("controller");
    let hosts = LEAVES * HOSTS_PER_LEAF;
    for host in 0..hosts {
        let (leaf, h) = (host / HOSTS_PER_LEAF, host % HOSTS_PER_LEAF);
        let request = pb::RegisterRequest {
            host: format!("h{leaf}_{h}"),
            incarnation: 1,
            rnics: (0..NICS)
                .map(|n| pb::RnicInfo {
                    nic: n,
                    gid: vec![0; 16],
                    ip: format!("10.{}.{}.{}", leaf >> 8, leaf & 255, h * NICS + n + 1),
                    qpn: 1000,
                })
                .collect(),
        };
        controller.register(&request).expect("registration");
    }
    // One period: four 5-s uploads per host, encoded as they come off the wire.
    let mut rng = SplitMix64::new(1);
    let mut wire: Vec<Vec<u8>> = Vec::new();
    for round in 0..4u64 {
        for host in 0..hosts {
            wire.push(batch(host, round + 1, t0 + round * 5_000_000_000, &mut rng).encode_to_vec());
        }
    }
    let results: usize = wire.len() * (NICS as usize) * 100;
    let bytes: usize = wire.iter().map(Vec::len).sum();
    let cpu_start = thread_cpu_ns();
    let start = Instant::now();
    for bytes in &wire {
        let batch = pb::ResultBatch::decode(bytes.as_slice()).expect("decodes");
        let outcome = controller
            .upload(&batch, t0 + 19_000_000_000)
            .expect("accepted");
        assert!(!outcome.duplicate);
    }
    let wall = start.elapsed();
    let cpu_s = (thread_cpu_ns() - cpu_start) as f64 / 1e9;
    let t = Instant::now();
    for bytes in &wire {
        let batch = pb::ResultBatch::decode(bytes.as_slice()).expect("decodes");
        std::hint::black_box(&batch);
    }
    let decode = t.elapsed();
    println!("of which protobuf decoding: {:.2} s", decode.as_secs_f64());
    println!(
        "ingest: {results} results in {} batches ({:.1} MB of protobuf) of 10,000 RNICs, each batch decoded, checked, synced to the log and filed: {:.2} s = {:.2} M results/s; on the CPU {:.2} s = {:.2} M results/s per core (the rest is waiting for fsync)",
        wire.len(),
        bytes as f64 / 1e6,
        wall.as_secs_f64(),
        results as f64 / wall.as_secs_f64() / 1e6,
        cpu_s,
        results as f64 / cpu_s / 1e6,
    );
    clock.store(
        t0 + PERIOD + 10_000_000_000,
        std::sync::atomic::Ordering::SeqCst,
    );
    let mut analyzer = PeriodAnalyzer::for_controller(&controller);
    let due = controller.take_due(t0 + PERIOD + 10_000_000_000);
    let t = Instant::now();
    let mut analysed = 0;
    for period in due {
        let view = analyzer.analyse(period);
        analysed += view.results;
        controller.install(view).expect("stored");
    }
    let took = t.elapsed().as_secs_f64();
    println!(
        "analysis of the 20-s period: {analysed} results in {took:.2} s = {:.2} M results/s on one core",
        analysed as f64 / took / 1e6
    );
    let _ = std::fs::remove_dir_all(&dir);
}
