//! Benchmark: diagnose an incident of 20 switches × 4 epochs × 64 ports × 4,096 flows per
//! switch and epoch (HAWKEYE §4.3 scale: a fat-tree K=4 has 20 switches; one switch's
//! collection is 2-4 epochs, 64 ports, 4,096 flows per epoch).
//!
//! Run: `cargo run --release -p hawkmesh-analyzer --example diagnose_bench`
//!
//! The fabric is the K=4 fat-tree (8 ToR, 8 aggregation, 4 core) with hosts on every
//! remaining port up to 64 per switch. Telemetry is synthetic and deterministic: every port
//! carries 64 flows per epoch; one PFC backpressure chain (ToR → agg → ToR → host with
//! micro-bursts at the end) pauses the victim, and about 1 port in 16 has local contention
//! so the queue replay runs on a few hundred port-epochs. Prints ingest, graph-build and
//! diagnosis times (median of 7 runs, one thread).

use std::time::{Duration, Instant};

use hawkmesh_analyzer::testkit::TopologyBuilder;
use hawkmesh_analyzer::{diagnose_reports, loaded, render, DiagnoseOptions};
use hawkmesh_wire::telemetry::{
    EpochTelemetry, FiveTuple, FlowRecord, MeterRecord, PollingContext, PortRecord,
    TelemetryReport, TraceFlags, TELEMETRY_FORMAT_VERSION,
};
use hawkmesh_wire::topology::{FabricTopology, NodeId, PortNo, PortRef};

const SWITCHES: usize = 20;
const PORTS: usize = 64;
const FLOWS_PER_PORT: usize = 64;
const EPOCHS: usize = 4;
const EPOCH_NS: u64 = 1 << 20;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn fat_tree() -> Result<FabricTopology, Box<dyn std::error::Error>> {
    let mut builder = TopologyBuilder::new();
    for i in 0..8 {
        builder = builder.switch(&format!("tor{i}"), Some(0));
    }
    for i in 0..8 {
        builder = builder.switch(&format!("agg{i}"), Some(1));
    }
    for i in 0..4 {
        builder = builder.switch(&format!("core{i}"), Some(2));
    }
    // Pods of 2 ToRs and 2 aggs; agg j of every pod links to cores 2j and 2j+1.
    for pod in 0..4 {
        for t in 0..2 {
            for a in 0..2 {
                builder = builder.link(
                    &format!("tor{}", pod * 2 + t),
                    &format!("agg{}", pod * 2 + a),
                );
            }
        }
        for a in 0..2 {
            for c in 0..2 {
                builder = builder.link(
                    &format!("agg{}", pod * 2 + a),
                    &format!("core{}", a * 2 + c),
                );
            }
        }
    }
    // Fabric links per switch: a ToR has 2 (aggs), an agg 4 (2 ToRs, 2 cores), a core 4.
    let used: Vec<usize> = (0..SWITCHES).map(|i| if i < 8 { 2 } else { 4 }).collect();
    let mut host = 0u32;
    for (switch, count) in used.iter().enumerate() {
        for _ in *count..PORTS {
            let name = format!("h{host}");
            let ip = [10, 128 + (host >> 16) as u8, (host >> 8) as u8, host as u8];
            let switch_name = match switch {
                0..=7 => format!("tor{switch}"),
                8..=15 => format!("agg{}", switch - 8),
                _ => format!("core{}", switch - 16),
            };
            builder = builder.host(&name, ip).link(&name, &switch_name);
            host += 1;
        }
    }
    Ok(builder.build()?)
}

fn flow_id(switch: usize, port: usize, index: usize) -> FiveTuple {
    FiveTuple::rocev2(
        [10, switch as u8, port as u8, index as u8],
        49152 + index as u16,
        [10, 200, port as u8, index as u8],
    )
}

fn reports(topology: &FabricTopology, victim: FiveTuple) -> Vec<TelemetryReport> {
    let mut rng = Lcg(7);
    let peer = |node: NodeId, port: PortNo| topology.peer(PortRef { node, port });
    // PFC chain: tor0.p0 (→agg0) paused → agg0.p1 (→tor1) paused → tor1.p10 (→host) bursts.
    let chain: [(usize, usize); 3] = [(0, 0), (8, 1), (1, 10)];
    let mut out = Vec::new();
    for switch in 0..SWITCHES {
        let mut epochs = Vec::new();
        for epoch in 0..EPOCHS {
            let start_ns = (5000 + epoch as u64) * EPOCH_NS;
            let mut ports = Vec::with_capacity(PORTS);
            let mut meters: std::collections::BTreeMap<(PortNo, PortNo), u64> = Default::default();
            let mut flows = Vec::with_capacity(PORTS * FLOWS_PER_PORT);
            for port in 0..PORTS {
                let hop = chain.iter().position(|c| *c == (switch, port));
                let paused_port = matches!(hop, Some(0) | Some(1));
                let burst_port = hop == Some(2);
                let contended = burst_port || rng.next() % 16 == 0;
                let (mut packets, mut paused, mut depth_all, mut depth_unpaused) =
                    (0u64, 0u64, 0u64, 0u64);
                for index in 0..FLOWS_PER_PORT {
                    let flow = if index == 0 && hop.is_some() {
                        victim
                    } else {
                        flow_id(switch, port, index)
                    };
                    let n = 20 + (rng.next() % 100) as u32;
                    let p = if paused_port { n * 2 / 3 } else { 0 };
                    let unpaused = u64::from(n - p);
                    let bursty = contended && index % 8 == 0;
                    let depth = if contended {
                        20_000 + rng.next() % 100_000
                    } else {
                        rng.next() % 2_000
                    };
                    let (first, last) = if bursty {
                        let at = (rng.next() % (EPOCH_NS / 2)) as u32;
                        (at, at + 8_000)
                    } else {
                        (0, (EPOCH_NS - 1) as u32)
                    };
                    let n = if bursty { n * 4 } else { n };
                    flows.push(FlowRecord {
                        flow,
                        egress_port: port as PortNo,
                        packet_count: n,
                        paused_packet_count: p,
                        queue_depth_sum_bytes: unpaused * depth,
                        first_enqueue_offset_ns: first,
                        last_enqueue_offset_ns: last,
                        evicted: false,
                    });
                    packets += u64::from(n);
                    paused += u64::from(p);
                    depth_unpaused += unpaused * depth;
                    depth_all += unpaused * depth + u64::from(p) * 300_000;
                    let ingress = ((port + 1 + index) % PORTS) as PortNo;
                    *meters.entry((ingress, port as PortNo)).or_default() += u64::from(n) * 1000;
                }
                ports.push(PortRecord {
                    port: port as PortNo,
                    packet_count: packets as u32,
                    paused_packet_count: paused as u32,
                    queue_depth_sum_bytes: depth_all,
                    unpaused_queue_depth_sum_bytes: depth_unpaused,
                    xon_count: 0,
                });
            }
            // Causality: the chain's downstream switches receive the upstream port's traffic.
            for pair in chain.windows(2) {
                let (up_switch, up_port) = pair[0];
                let (down_switch, down_port) = pair[1];
                if switch == down_switch {
                    if let Some(ingress) = peer(up_switch as NodeId, up_port as PortNo) {
                        *meters
                            .entry((ingress.port, down_port as PortNo))
                            .or_default() += 5_000_000;
                    }
                }
            }
            epochs.push(EpochTelemetry {
                epoch_id: start_ns / EPOCH_NS,
                start_ns,
                lost_evictions: 0,
                ports,
                meters: meters
                    .into_iter()
                    .map(|((ingress_port, egress_port), bytes)| MeterRecord {
                        ingress_port,
                        egress_port,
                        bytes,
                    })
                    .collect(),
                flows,
            });
        }
        out.push(TelemetryReport {
            version: TELEMETRY_FORMAT_VERSION,
            switch: switch as NodeId,
            event_id: 1,
            epoch_ns: EPOCH_NS,
            polling: PollingContext {
                ingress_port: 2,
                flags: TraceFlags::BOTH,
                victim,
                egress: Vec::new(),
            },
            more_polling: Vec::new(),
            paused_ports: Vec::new(),
            epochs,
        });
    }
    out
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values[values.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let topology = fat_tree()?;
    let victim = FiveTuple::rocev2([10, 0, 0, 1], 40000, [10, 0, 0, 2]);
    let reports = reports(&topology, victim);
    let records: usize = reports
        .iter()
        .flat_map(|r| &r.epochs)
        .map(|e| e.flows.len())
        .sum();
    println!(
        "incident: {} switches x {} epochs x {} ports x {} flows/epoch = {} flow records",
        SWITCHES,
        EPOCHS,
        PORTS,
        PORTS * FLOWS_PER_PORT,
        records
    );
    let options = DiagnoseOptions::default();
    let mut ingest = Vec::new();
    let mut build = Vec::new();
    let mut diagnose = Vec::new();
    let mut total = Vec::new();
    let mut last = None;
    for _ in 0..7 {
        let input = loaded(reports.clone());
        let started = Instant::now();
        let output = diagnose_reports(input, topology.clone(), victim, &options)?;
        total.push(started.elapsed());
        ingest.push(output.timings.ingest);
        build.push(output.timings.graph_build);
        diagnose.push(output.timings.diagnosis);
        last = Some(output);
    }
    let Some(output) = last else {
        return Ok(());
    };
    let stats = &output.graph.stats;
    println!(
        "graph: {} port nodes, {} flow nodes, {} port->port, {} flow->port, {} port->flow edges, {} port-epochs replayed",
        stats.port_nodes,
        stats.flow_nodes,
        stats.port_port_edges,
        stats.flow_port_edges,
        stats.port_flow_edges,
        stats.replayed_port_epochs
    );
    println!(
        "ingest (validate + align):   {:>8.2} ms",
        median(ingest).as_secs_f64() * 1e3
    );
    println!(
        "graph build (Alg. 1):        {:>8.2} ms",
        median(build).as_secs_f64() * 1e3
    );
    println!(
        "diagnosis (Alg. 2):          {:>8.2} ms",
        median(diagnose).as_secs_f64() * 1e3
    );
    println!(
        "total incl. rendering view:  {:>8.2} ms",
        median(total).as_secs_f64() * 1e3
    );
    println!("verdict: {}", output.diagnosis.verdict);
    let text = render::to_text(&output.diagnosis);
    if let Some(line) = text.lines().find(|l| l.contains("PFC path")) {
        println!("{}", line.trim());
    }
    Ok(())
}
