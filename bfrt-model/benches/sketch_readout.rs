//! PARALEON's per-interval ToR work (issue: "a ToR's sketch readout and state update per
//! interval in well under λ_MI"): the Elastic Sketch's registers read and cleared through
//! the switch backend, then the ToR monitor's ternary-state update.
//!
//! ```sh
//! cargo bench -p hawkmesh-bfrt-model --bench sketch_readout
//! ```
//!
//! Each interval the sketch holds `FLOWS` RoCEv2 flows (a few hundred packets for the
//! heaviest, one for most), inserted through the data-plane model; then, timed:
//! - over BF Runtime: `switch_agent::sketch::read_and_reset` through `BfrtBackend` (gRPC
//!   over loopback TCP) against the model-backed BF Runtime server, the path a Tofino's
//!   control plane takes (register sync through rbfrt and bulk read of the heavy part's 3
//!   registers with the agent's own `Read`s, the light part's cells of flagged flows and
//!   of the monitor's remembered flows whose bucket another holds by index in one request,
//!   4 clears through rbfrt);
//! - in process: the same through `ModelBackend` (what netsim's ToRs do);
//! - the state update: `TorMonitor::update_sketch` with the readout.
//!
//! The server here is the model, not bf_switchd: the figure covers the clients, gRPC and the
//! control plane's work, not the ASIC's DMA of register contents (hw-lab/tofino.md).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hawkmesh_bfrt_model::{BfrtServer, Device};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets;
use hawkmesh_switch_agent::bfrt_backend::{BfrtBackend, BfrtEndpoint};
use hawkmesh_switch_agent::sketch::{deployed_geometry, read_and_reset, SketchReadout};
use hawkmesh_switch_agent::ModelBackend;
use hawkmesh_tuner::fsd::{MonitorConfig, TorMonitor};
use hawkmesh_wire::dataplane::{CPU_MIRROR_SESSION, CPU_PORT};
use hawkmesh_wire::rng::SplitMix64;
use hawkmesh_wire::telemetry::FiveTuple;

/// Flows in the sketch per interval (the heavy part has 4,096 buckets).
const FLOWS: u64 = 3_000;
/// Timed intervals per backend.
const INTERVALS: usize = 40;

/// One interval's packets: flow i sends a Pareto-ish number of 1 KB packets.
fn interval_packets(program: &Program, rng: &mut SplitMix64, round: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..FLOWS {
        let flow = FiveTuple::rocev2(
            [10, 0, (i >> 8) as u8, i as u8],
            49152 + (round % 1000) as u16,
            [10, 1, 0, 1 + (i % 200) as u8],
        );
        // Most flows are mice (1–2 packets), a tenth carry hundreds.
        let n = if rng.below(10) == 0 {
            50 + rng.below(300)
        } else {
            1 + rng.below(2)
        };
        for s in 0..n {
            out.push(packets::rocev2_data(
                program, &flow, 0, 2, 64, s as u32, 1000,
            ));
        }
    }
    out
}

fn stats(name: &str, mut d: Vec<Duration>) {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    let mean = d.iter().map(|x| ms(*x)).sum::<f64>() / d.len() as f64;
    println!(
        "{name:<34} mean {:>8.3} ms  median {:>8.3} ms  p95 {:>8.3} ms  max {:>8.3} ms",
        mean,
        ms(d[d.len() / 2]),
        ms(d[(d.len() * 95 / 100).min(d.len() - 1)]),
        ms(d[d.len() - 1])
    );
}

fn update(monitor: &mut TorMonitor, r: &SketchReadout) -> usize {
    monitor
        .update_sketch(r.named_bytes(1_000), r.reached(), r.packets * 1_000)
        .bins
        .len()
}

fn main() {
    let params = HawkeyeParams::default();
    let program = Arc::new(program(&params).expect("program"));
    let geometry = deployed_geometry();
    let mut rng = SplitMix64::new(7);
    let input = |t: u64| IngressInput {
        ingress_port: 0,
        tstamp_ns: t,
        routed_egress_port: None,
    };

    // Over BF Runtime.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let model = Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model");
    let device = Arc::new(Mutex::new(Device::new(model)));
    let server = BfrtServer::new(
        device.clone(),
        "hawkmesh",
        hawkmesh_bfrt_model::program_description().to_vec(),
    )
    .expect("server");
    let port = server.spawn_loopback(&runtime).expect("serve on loopback");
    let mut backend = BfrtBackend::connect(
        runtime.handle().clone(),
        &BfrtEndpoint::new("127.0.0.1", port),
    )
    .expect("connect");
    let (mut readout_times, mut update_times) = (Vec::new(), Vec::new());
    let mut monitor = TorMonitor::new(MonitorConfig::default());
    let (mut heavy, mut displaced, mut asked) = (0usize, 0usize, 0usize);
    for round in 0..INTERVALS as u64 + 2 {
        let pkts = interval_packets(&program, &mut rng, round);
        {
            let mut dev = device.lock().expect("device");
            for (k, p) in pkts.iter().enumerate() {
                dev.process(
                    p,
                    &input(round * 1_000_000 + k as u64),
                    0,
                    CPU_MIRROR_SESSION,
                )
                .expect("packet");
            }
        }
        // The monitor's flows, as the switch daemon's `TorTuning::measure` passes them.
        let known: Vec<u64> = monitor.remembered().collect();
        let t = Instant::now();
        let r = read_and_reset(&mut backend, geometry, known.iter().copied())
            .expect("readout over BF Runtime");
        let read = t.elapsed();
        let t = Instant::now();
        std::hint::black_box(update(&mut monitor, &r));
        let up = t.elapsed();
        if round >= 2 {
            readout_times.push(read);
            update_times.push(up);
            heavy += r.flows.len();
            displaced += r.displaced.len();
            asked += known.len();
        }
    }
    println!(
        "{INTERVALS} intervals, {FLOWS} flows each ({:.0} in the heavy part on average, {:.0} remembered asked for, {:.0} of them displaced), registers of {} + {} + {} + {} cells",
        heavy as f64 / INTERVALS as f64,
        asked as f64 / INTERVALS as f64,
        displaced as f64 / INTERVALS as f64,
        1usize << geometry.heavy_bits,
        1usize << geometry.heavy_bits,
        1usize << geometry.light_bits,
        1usize << geometry.heavy_bits,
    );
    stats("readout + clear, BF Runtime", readout_times);
    stats("TorMonitor::update_sketch", update_times);

    // In process.
    let local = Rc::new(RefCell::new(
        Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model"),
    ));
    let mut backend = ModelBackend::new(local.clone());
    let mut times = Vec::new();
    for round in 0..INTERVALS as u64 + 2 {
        let pkts = interval_packets(&program, &mut rng, round);
        for (k, p) in pkts.iter().enumerate() {
            local
                .borrow_mut()
                .process(p, &input(round * 1_000_000 + k as u64), 0)
                .expect("packet");
        }
        let t = Instant::now();
        std::hint::black_box(read_and_reset(&mut backend, geometry, []).expect("readout"));
        if round >= 2 {
            times.push(t.elapsed());
        }
    }
    stats("readout + clear, in process", times);
}
