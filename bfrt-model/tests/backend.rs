//! The switch agent's BF Runtime backend against the model-backed BF Runtime server: the
//! agent reading a switch over BF Runtime (gRPC over TCP, rbfrt) reports exactly what the
//! agent reading the same switch in process reports.

use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use hawkmesh_bfrt_model::{BfrtServer, Device, PortConfig};
use hawkmesh_congestion::{CounterSource, Direction, Tier};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_switch_agent::bfrt_backend::{BfrtBackend, BfrtEndpoint};
use hawkmesh_switch_agent::port_counters::{SwitchCounterSource, SwitchPort};
use hawkmesh_switch_agent::setup::SwitchSetup;
use hawkmesh_switch_agent::sketch::{deployed_geometry, read_and_reset};
use hawkmesh_switch_agent::{
    AgentConfig, BackendError, CpuFrame, CpuFrameKind, ModelBackend, SwitchAgent, SwitchBackend,
};
use hawkmesh_wire::dataplane::{Register, CPU_MIRROR_SESSION, CPU_PORT};
use hawkmesh_wire::telemetry::FiveTuple;

fn bfrt_json() -> Vec<u8> {
    hawkmesh_bfrt_model::program_description().to_vec()
}

/// A model-backed BF Runtime server on a fresh runtime; the backend runs on this thread.
struct Remote {
    runtime: tokio::runtime::Runtime,
    device: Arc<Mutex<Device>>,
    port: u16,
}

fn serve(program: &Arc<Program>, p4_name: &str) -> Remote {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let model = Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model");
    let device = Arc::new(Mutex::new(Device::new(model)));
    let server = BfrtServer::new(device.clone(), p4_name, bfrt_json()).expect("server");
    let port = server.spawn_loopback(&runtime).expect("serve on loopback");
    Remote {
        runtime,
        device,
        port,
    }
}

/// What the control plane installs at start-up, through the backend (the same code for
/// both): port masks, PFC speeds, the all-ports group, routes to two destinations.
fn configure(backend: &mut dyn SwitchBackend) -> Result<(), BackendError> {
    let setup = SwitchSetup {
        switch: "s".into(),
        routes: [
            (Ipv4Addr::new(10, 0, 1, 1), vec![2u16]),
            (Ipv4Addr::new(10, 0, 1, 2), vec![3, 4]),
        ]
        .into(),
        port_gbps: (0..8u16).map(|p| (p, 100.0)).collect(),
        polling: (0..8u16)
            .map(|p| (p, hawkmesh_wire::control::PollingFrom::Fabric))
            .collect(),
    };
    setup.apply(backend)
}

/// The traffic of the test: flows from ports 0 and 1, a PFC pause on port 2, more flows,
/// then a polling packet for a victim towards 10.0.1.1. Returns (packet, ingress port, time).
fn traffic(program: &Program) -> Vec<(Vec<u8>, u16, u64)> {
    let mut out = Vec::new();
    let t0 = 5_000_000_000u64;
    for i in 0..40u64 {
        let flow = FiveTuple::rocev2(
            [10, 0, 0, (i % 4) as u8 + 1],
            49152 + (i % 6) as u16,
            [10, 0, 1, 1 + (i % 2) as u8],
        );
        out.push((
            packets::rocev2_data(program, &flow, 0, 2, 64, i as u32, 1062),
            (i % 2) as u16,
            t0 + i * 2_000,
        ));
        if i == 10 {
            out.push((
                packets::pfc_frame(1, [0xFFFF, 0, 0, 0, 0, 0, 0, 0]),
                2,
                t0 + i * 2_000 + 500,
            ));
        }
    }
    let victim = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 1, 1]);
    let polling = Polling::new(77, victim, 8);
    out.push((packets::polling_packet(program, &polling), 5, t0 + 100_000));
    out
}

fn deliver(to: &mut BfrtBackend, copies: &[Vec<u8>], t: u64) {
    for c in copies {
        to.deliver_cpu(CpuFrame {
            time_ns: t,
            kind: CpuFrameKind::of(c),
            bytes: c.clone(),
        });
    }
}

#[test]
fn an_agent_over_bf_runtime_reports_what_the_in_process_agent_reports() {
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));

    // In process.
    let local = Rc::new(RefCell::new(
        Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model"),
    ));
    let mut local_agent = SwitchAgent::new(AgentConfig::new(7), ModelBackend::new(local.clone()));
    configure(local_agent.backend_mut()).expect("configure in process");

    // Over BF Runtime.
    let remote = serve(&program, "hawkmesh");
    let endpoint = BfrtEndpoint::new("127.0.0.1", remote.port);
    let mut backend =
        BfrtBackend::connect(remote.runtime.handle().clone(), &endpoint).expect("connect");
    backend
        .set_mirror_session(CPU_MIRROR_SESSION, CPU_PORT)
        .expect("mirror session");
    let mut remote_agent = SwitchAgent::new(AgentConfig::new(7), backend);
    configure(remote_agent.backend_mut()).expect("configure over BF Runtime");

    // Port 2 is up at 100 Gbit/s (its PFC pauses are timed at that speed).
    remote.device.lock().unwrap().configure_port(
        2,
        PortConfig {
            speed: "BF_SPEED_100G".into(),
            enabled: true,
            ..PortConfig::default()
        },
    );
    let mut reports = 0;
    let mut collected = Vec::new();
    let mut sent_on_2 = 0u64;
    for (bytes, port, t) in traffic(&program) {
        let input = IngressInput {
            ingress_port: port,
            tstamp_ns: t,
            routed_egress_port: None,
        };
        let a = local
            .borrow_mut()
            .process(&bytes, &input, 0)
            .expect("local");
        let b = remote
            .device
            .lock()
            .unwrap()
            .process(&bytes, &input, 0, CPU_MIRROR_SESSION)
            .expect("remote");
        assert_eq!(a, b, "both switches forward alike");
        sent_on_2 += b.ports.iter().filter(|(p, _)| *p == 2).count() as u64;
        for c in &a.cpu {
            local_agent.backend_mut().deliver_cpu(CpuFrame {
                time_ns: t,
                kind: CpuFrameKind::of(c),
                bytes: c.clone(),
            });
        }
        deliver(remote_agent.backend_mut(), &b.cpu, t);
        let done_local = local_agent.poll(t + 200_000).expect("local agent");
        let done_remote = remote_agent.poll(t + 200_000).expect("remote agent");
        assert_eq!(done_local.len(), done_remote.len());
        for (x, y) in done_local.iter().zip(&done_remote) {
            assert_eq!(x.event_id, y.event_id);
            assert_eq!(x.chunks, y.chunks, "event {}: reports differ", x.event_id);
            reports += 1;
        }
        collected.extend(done_remote);
    }
    let flushed_local = local_agent.flush(u64::MAX / 2).expect("flush");
    let flushed_remote = remote_agent.flush(u64::MAX / 2).expect("flush");
    for (x, y) in flushed_local.iter().zip(&flushed_remote) {
        assert_eq!(x.chunks, y.chunks, "event {}: reports differ", x.event_id);
        reports += 1;
    }
    assert_eq!(flushed_local.len(), flushed_remote.len());
    collected.extend(flushed_remote);
    assert_eq!(reports, 1, "the polling event was reported");
    let report = collected.first().map(|c| &c.report).expect("the report");
    assert!(
        report.epochs.iter().any(|e| !e.flows.is_empty()),
        "the report carries flow telemetry read over BF Runtime"
    );
    assert_eq!(remote_agent.backend_mut().multi_pipe_cells(), 0, "one pipe");

    // Port 2's MAC counters over BF Runtime (`$PORT_STAT`): the one PFC frame it received
    // (priority 0, 65,535 quanta = 335.5 µs at 100G, from t0 + 20.5 µs; the last packet
    // came at t0 + 100 µs, so 79.5 µs of it have passed), and what the switch sent out of it.
    let c = remote_agent
        .backend_mut()
        .port_counters(2)
        .expect("port 2's counters");
    assert_eq!(c.frames_rx, 1);
    assert_eq!(c.frames_tx, sent_on_2);
    assert_eq!(c.pfc_rx, [1, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(c.paused_rx_us, [79, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(c.pfc_tx, [0; 8], "the model sends no PFC frames");
    let e = remote_agent
        .backend_mut()
        .port_counters(7)
        .expect_err("port 7 is neither added nor has it seen a frame");
    assert!(e.to_string().contains("port 7"), "{e}");
    let e = local_agent
        .backend_mut()
        .port_counters(2)
        .expect_err("the in-process model has no MAC");
    assert!(e.to_string().contains("MAC counters"), "{e}");

    // The same counters as the congestion view samples them (FITF's pause analogue, the
    // counter PFC watchdog): the link state from `$PORT`'s `$PORT_UP`, the rise since a
    // reset that leaves the switch's counters alone.
    {
        let mut source = SwitchCounterSource::new(
            remote_agent.backend_mut(),
            "tor0",
            Tier::Tor,
            vec![
                SwitchPort {
                    dev_port: 2,
                    port: 2,
                    dir: Direction::Down,
                },
                SwitchPort {
                    dev_port: 7,
                    port: 7,
                    dir: Direction::Down,
                },
            ],
        );
        let ports = source.ports();
        assert!(source.is_up(&ports[0]).expect("port 2's state"));
        let e = source.is_up(&ports[1]).expect_err("port 7 is not added");
        assert!(e.to_string().contains("tor0:7"), "{e}");
        let s = source.read(&ports[0]).expect("port 2");
        assert_eq!(s.pfc[0].rx_pause, Some(1));
        assert_eq!(s.pfc[0].rx_pause_duration_us, Some(79));
        assert_eq!(s.xmit_pkts, Some(sent_on_2));
        source.reset(&ports[0]).expect("reset");
        let s = source.read(&ports[0]).expect("port 2");
        assert_eq!((s.pfc[0].rx_pause, s.xmit_pkts), (Some(0), Some(0)));
    }
    assert_eq!(
        remote_agent
            .backend_mut()
            .port_counters(2)
            .expect("port 2")
            .pfc_rx[0],
        1,
        "the source's reset left the switch's counters alone"
    );

    // PARALEON's sketch readout over BF Runtime (the heavy part whole, the light part's
    // cells of flagged flows alone) gives what the in-process readout gives, and clears.
    // Cells by index (what the readout does for the light part's flagged flows).
    let full = remote_agent
        .backend_mut()
        .read_register(Register::SKETCH_KEY)
        .expect("the heavy part's keys");
    let mut picks: Vec<u32> = (0..full.len() as u32)
        .filter(|i| full[*i as usize] != 0)
        .take(5)
        .collect();
    assert!(!picks.is_empty(), "the traffic reached the heavy part");
    picks.push(0);
    let cells = remote_agent
        .backend_mut()
        .read_register_cells(Register::SKETCH_KEY, &picks)
        .expect("cells by index");
    let expected: Vec<u64> = picks.iter().map(|i| full[*i as usize]).collect();
    assert_eq!(cells, expected);
    let geometry = deployed_geometry();
    let remote_sketch = read_and_reset(remote_agent.backend_mut(), geometry, []).expect("remote");
    let local_sketch = read_and_reset(local_agent.backend_mut(), geometry, []).expect("local");
    assert_eq!(remote_sketch, local_sketch);
    assert!(remote_sketch.packets >= 40 && !remote_sketch.flows.is_empty());
    let again = read_and_reset(remote_agent.backend_mut(), geometry, []).expect("again");
    assert!(again.flows.is_empty() && again.packets == 0, "cleared");
    let e = remote_agent
        .backend_mut()
        .read_register_cells(Register::SKETCH_LIGHT, &[1 << 20])
        .expect_err("past the register");
    assert!(e.to_string().contains("cell 1048576"), "{e}");

    // Registers reset over BF Runtime are zero.
    remote_agent
        .backend_mut()
        .reset_register(Register::PORT_PACKETS)
        .expect("reset");
    let cells = remote_agent
        .backend_mut()
        .read_register(Register::PORT_PACKETS)
        .expect("read");
    assert!(cells.iter().all(|c| *c == 0));
}

#[test]
fn a_switch_running_another_program_is_refused_by_name() {
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let remote = serve(&program, "switch_p4");
    let e = BfrtBackend::connect(
        remote.runtime.handle().clone(),
        &BfrtEndpoint::new("127.0.0.1", remote.port),
    )
    .expect_err("no hawkmesh program");
    assert_eq!(
        e.to_string(),
        "switch program: the switch runs no program `hawkmesh` (it runs: switch_p4)"
    );

    let e = BfrtBackend::connect(
        remote.runtime.handle().clone(),
        &BfrtEndpoint::new("127.0.0.1", 1),
    )
    .expect_err("nothing listens on port 1");
    assert!(
        e.to_string()
            .starts_with("switch unreachable: BF Runtime at 127.0.0.1:1"),
        "{e}"
    );
}
