//! Pingmesh intake throughput: result batches of a 10,000-RNIC cluster (1,250 hosts × 8
//! RNICs, 250 leaves, 16 spines) through what the controller does with an upload — protobuf
//! decoding, the checks against the inventory, the append to `pingmesh.log` (synced) and the
//! filing by period — then that period's analysis.
//!
//! `cargo bench -p hawkmesh-analyzer-server --bench ingest` prints results per second and
//! per core of CPU (user and kernel time, the syncs' included) for one uploader syncing each
//! batch alone, and for concurrent uploaders sharing syncs as the service does (group
//! commit); then the analysis time of the period.

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
        ack_routes: Vec::new(),
    }
}

/// This thread's time on a CPU so far, ns (Linux: the first field of schedstat).
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .expect("/proc/thread-self/schedstat")
}

/// This process's time on a CPU so far, all threads, ns (utime + stime of /proc/self/stat,
/// in clock ticks of 10 ms).
fn process_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // After the command name in parentheses: state is field 3; utime, stime are 14, 15.
    let rest = &stat[stat.rfind(')').expect("stat format") + 2..];
    let fields: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|f| f.parse().expect("a tick count"))
        .collect();
    (fields[0] + fields[1]) * 10_000_000
}

/// A controller with every host registered, in a fresh directory.
fn controller(
    topology: &FabricTopology,
    dir: &std::path::Path,
    clock: Arc<AtomicU64>,
) -> Controller {
    let _ = std::fs::remove_dir_all(dir);
    let config = PingmeshConfig {
        clock: Clock::Manual(clock),
        limits: PingmeshLimits {
            max_pending_results: 10_000_000,
            ..PingmeshLimits::default()
        },
        ..PingmeshConfig::default()
    };
    let (mut controller, _) = Controller::open(topology, dir, config).expect("controller");
    for host in 0..LEAVES * HOSTS_PER_LEAF {
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
    controller
}

/// Concurrent uploaders, as the service runs them: each takes the controller's lock to
/// decode, check, write and file a batch, then waits for the log's sync outside it (group
/// commit with the default commit delay: one `fdatasync` covers every batch written before
/// it started).
const UPLOADERS: usize = 16;

fn main() {
    let topology = cluster();
    let base = std::env::temp_dir().join(format!("hawkmesh-ingest-bench-{}", std::process::id()));
    let t0 = 1_000 * PERIOD;
    let now = t0 + 19_000_000_000;
    // One period: four 5-s uploads per host, encoded as they come off the wire.
    let hosts = LEAVES * HOSTS_PER_LEAF;
    let mut rng = SplitMix64::new(1);
    let mut wire: Vec<Vec<u8>> = Vec::new();
    for round in 0..4u64 {
        for host in 0..hosts {
            wire.push(batch(host, round + 1, t0 + round * 5_000_000_000, &mut rng).encode_to_vec());
        }
    }
    let results: usize = wire.len() * (NICS as usize) * 100;
    let bytes: usize = wire.iter().map(Vec::len).sum();
    let t = Instant::now();
    for bytes in &wire {
        let batch = pb::ResultBatch::decode(bytes.as_slice()).expect("decodes");
        std::hint::black_box(&batch);
    }
    let decode = t.elapsed();
    println!(
        "input: {results} results of 10,000 RNICs in {} batches, {:.1} MB of protobuf; protobuf decoding alone: {:.2} s",
        wire.len(),
        bytes as f64 / 1e6,
        decode.as_secs_f64()
    );

    // 1. One uploader: every batch decoded, checked, written, synced alone and filed.
    let clock = Arc::new(AtomicU64::new(t0));
    let mut single = controller(&topology, &base.join("single"), clock.clone());
    let cpu_start = thread_cpu_ns();
    let start = Instant::now();
    for bytes in &wire {
        let outcome = single.upload_encoded(bytes, now).expect("accepted");
        assert!(!outcome.duplicate);
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu_s = (thread_cpu_ns() - cpu_start) as f64 / 1e9;
    println!(
        "ingest, one uploader, a sync per batch: {wall:.2} s = {:.2} M results/s; on the CPU {cpu_s:.2} s = {:.2} M results/s per core",
        results as f64 / wall / 1e6,
        results as f64 / cpu_s / 1e6,
    );
    drop(single);

    // 2. The service's intake: concurrent uploaders sharing syncs.
    let grouped = controller(&topology, &base.join("group"), clock.clone());
    let sync = grouped.group_sync();
    let shared = std::sync::Mutex::new(grouped);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let cpu_start = process_cpu_ns();
    let start = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..UPLOADERS {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(bytes) = wire.get(i) else { break };
                let writer = sync.enter();
                let (outcome, ticket) = shared
                    .lock()
                    .expect("controller")
                    .upload_deferred(bytes, now)
                    .expect("accepted");
                writer.wait(ticket).expect("durable");
                assert!(!outcome.duplicate);
            });
        }
    });
    let wall = start.elapsed().as_secs_f64();
    let cpu_s = (process_cpu_ns() - cpu_start) as f64 / 1e9;
    let mut controller = shared.into_inner().expect("controller");
    let syncs = sync.syncs();
    println!(
        "ingest, {UPLOADERS} concurrent uploaders with group commit ({syncs} syncs for {} batches): {wall:.2} s = {:.2} M results/s; on the CPU {cpu_s:.2} s = {:.2} M results/s per core",
        wire.len(),
        results as f64 / wall / 1e6,
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
    let _ = std::fs::remove_dir_all(&base);
}
