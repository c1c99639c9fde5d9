//! The program's ECN profile written by `switch_agent::ecn_table::ProgramEcn` over BF Runtime
//! (rbfrt, gRPC over TCP) to the model-backed server: the switch then marks exactly as the
//! same writer's profile makes the in-process model mark, and a dry run writes nothing.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use hawkmesh_bfrt_model::{BfrtServer, Device};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing};
use hawkmesh_dataplane::packets;
use hawkmesh_knobs::apply::{changes, KnobWriter};
use hawkmesh_switch_agent::bfrt_backend::{BfrtBackend, BfrtEndpoint};
use hawkmesh_switch_agent::ecn_table::ProgramEcn;
use hawkmesh_switch_agent::ModelBackend;
use hawkmesh_switch_agent::SwitchBackend;
use hawkmesh_wire::control::{forward_entries, EcnProfile, QdepthUnit};
use hawkmesh_wire::dataplane::{Table, CPU_MIRROR_SESSION, CPU_PORT};
use hawkmesh_wire::telemetry::FiveTuple;

struct Remote {
    runtime: tokio::runtime::Runtime,
    device: Arc<Mutex<Device>>,
    port: u16,
}

fn serve(program: &Arc<Program>) -> Remote {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
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
    Remote {
        runtime,
        device,
        port,
    }
}

/// The profile the writers assume the table holds (a setting that gives all three knobs
/// does not depend on it).
const START: EcnProfile = EcnProfile {
    kmin_bytes: 400_000,
    kmax_bytes: 1_600_000,
    pmax: 0.2,
};

/// Routes to 10.0.1.1 by port 2 and 10.0.1.2 by port 3.
fn routes(backend: &mut dyn SwitchBackend) {
    for (dst, port) in [([10, 0, 1, 1], 2u16), ([10, 0, 1, 2], 3)] {
        for e in forward_entries(dst.into(), &[port]) {
            backend.add_table_entry(Table::FORWARD, e).expect("route");
        }
    }
}

/// ECT(0), ECT(1) and Not-ECT packets to both ports, as (bytes, time).
fn traffic(program: &Program) -> Vec<(Vec<u8>, u64)> {
    let mut out = Vec::new();
    for i in 0..30u64 {
        let flow = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 1, 1 + (i % 2) as u8]);
        let ecn = [0b10, 0b01, 0b00][(i % 3) as usize];
        out.push((
            packets::rocev2_data(program, &flow, 0, ecn, 64, i as u32, 1062),
            5_000_000_000 + i * 2_000,
        ));
    }
    out
}

#[test]
fn ecn_knobs_written_over_bf_runtime_mark_as_in_process() {
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let local = Rc::new(RefCell::new(
        Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model"),
    ));
    let mut local_backend = ModelBackend::new(local.clone());
    routes(&mut local_backend);
    let remote = serve(&program);
    let endpoint = BfrtEndpoint::new("127.0.0.1", remote.port);
    let mut backend =
        BfrtBackend::connect(remote.runtime.handle().clone(), &endpoint).expect("connect");
    routes(&mut backend);

    // Kmin = Kmax = 0 on port 2: the queues of a zero-queueing switch are at Kmax, so every
    // ECN-capable packet leaving port 2 is marked; port 3 has no profile.
    let setting = changes(&[("kmin_kb", 0.0), ("kmax_kb", 0.0), ("pmax", 0.5)]).unwrap();
    let unit = QdepthUnit::TofinoCells;

    // A dry run over BF Runtime writes nothing: no packet is marked.
    let mut dry = ProgramEcn::new(&mut backend, vec![2], unit, START, true);
    let said = dry.apply(&setting).expect("dry run");
    assert_eq!(said.len(), 3);
    assert!(said.iter().all(|a| !a.written));
    let run = |device: &Arc<Mutex<Device>>| {
        traffic(&program)
            .into_iter()
            .map(|(bytes, t)| {
                let input = IngressInput {
                    ingress_port: 0,
                    tstamp_ns: t,
                    routed_egress_port: None,
                };
                let out = device
                    .lock()
                    .unwrap()
                    .process(&bytes, &input, 0, CPU_MIRROR_SESSION)
                    .expect("process");
                out.ports
                    .into_iter()
                    .map(|(port, bytes)| (port, bytes[15] & 0b11))
                    .collect::<Vec<_>>()
            })
            .collect::<Vec<_>>()
    };
    assert!(run(&remote.device)
        .iter()
        .flatten()
        .all(|(_, ecn)| *ecn != 0b11));

    let mut remote_writer = ProgramEcn::new(&mut backend, vec![2], unit, START, false);
    let wrote = remote_writer
        .apply(&setting)
        .expect("write over BF Runtime");
    assert!(wrote.iter().all(|a| a.written));
    let mut local_writer = ProgramEcn::new(&mut local_backend, vec![2], unit, START, false);
    assert_eq!(
        local_writer.apply(&setting).expect("write in process"),
        wrote
    );

    let remote_out = run(&remote.device);
    let local_out: Vec<Vec<(u16, u8)>> = traffic(&program)
        .into_iter()
        .map(|(bytes, t)| {
            let input = IngressInput {
                ingress_port: 0,
                tstamp_ns: t,
                routed_egress_port: None,
            };
            let out = local
                .borrow_mut()
                .process(&bytes, &input, 0)
                .expect("local");
            out.ports
                .into_iter()
                .map(|(port, bytes)| (port, bytes[15] & 0b11))
                .collect()
        })
        .collect();
    assert_eq!(remote_out, local_out);
    for (i, out) in remote_out.iter().enumerate() {
        let sent = [0b10, 0b01, 0b00][i % 3];
        let expected = match out[0].0 {
            2 if sent != 0b00 => 0b11,
            _ => sent,
        };
        assert_eq!(out, &vec![(2 + (i % 2) as u16, expected)], "packet {i}");
    }

    // A second setting modifies the installed entries over BF Runtime (MODIFY after the
    // INSERT is refused): Kmax far above the empty queue and Pmax 0 mark nothing.
    let mut remote_writer = ProgramEcn::new(&mut backend, vec![2], unit, START, false);
    remote_writer
        .apply(&changes(&[("kmax_kb", 1_000.0), ("pmax", 0.0)]).unwrap())
        .expect("rewrite");
    assert!(run(&remote.device)
        .iter()
        .flatten()
        .all(|(_, ecn)| *ecn != 0b11));
}
