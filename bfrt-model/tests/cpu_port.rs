//! The CPU port over real kernel packets: a veth pair in a network namespace stands for the
//! switch's CPU port (`bf_pci0`); the model-backed switch writes its CPU copies into one
//! end, the agent's `AF_PACKET` reader takes them from the other.
//!
//! Needs root (network namespaces, `CAP_NET_RAW`) and `ip` (iproute2); `HAWKMESH_NO_NETNS=1`
//! skips it, saying so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::sync_channel;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hawkmesh_bfrt_model::Device;
use hawkmesh_dataplane::hawkeye::{self, program, HawkeyeParams};
use hawkmesh_dataplane::model::{DataPlane, IngressInput, Model, Routing, TableEntry};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_switch_agent::cpu_port::{spawn_reader, CpuPort, CpuPortError};
use hawkmesh_switch_agent::CpuFrameKind;
use hawkmesh_wire::dataplane::CPU_PORT;
use hawkmesh_wire::telemetry::FiveTuple;

mod common;
use common::{skip, Netns};

#[test]
fn polling_copies_and_eviction_reports_reach_the_agent_through_a_kernel_interface() {
    if skip() {
        return;
    }
    let ns = Netns::new();
    let [switch_side, host_side] = ns.open(["cpu-sw", "cpu-host"]);

    // The switch: the model, its CPU mirror session pointing at the CPU port.
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let mut model = Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model");
    for (key, action, params) in hawkeye::forward_entries([10, 0, 1, 1].into(), &[2]) {
        model
            .table_add(
                "forward",
                TableEntry {
                    key,
                    mask: vec![],
                    priority: 0,
                    action: action.into(),
                    params,
                },
            )
            .expect("route");
    }
    // Polling comes in from port 4, a host's.
    model
        .table_add(
            "polling_port",
            hawkmesh_wire::control::polling_port_entry(
                4,
                hawkmesh_wire::control::PollingFrom::Host,
            ),
        )
        .expect("polling port");
    let device = Arc::new(Mutex::new(Device::new(model)));

    let (tx, rx) = sync_channel(64);
    let stop = Arc::new(AtomicBool::new(false));
    let (reader, stats) =
        spawn_reader(host_side, tx, Box::new(|| 42), stop.clone()).expect("reader");

    // Two flows in one flow slot (an eviction), then a polling packet.
    let mut sent = Vec::new();
    let flows = [
        FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 1, 1]),
        FiveTuple::rocev2([10, 0, 0, 2], 55511, [10, 0, 1, 1]),
    ];
    let mut t = 5_000_000_000u64;
    for flow in flows {
        let bytes = packets::rocev2_data(&program, &flow, 0, 2, 64, 1, 600);
        let out = device
            .lock()
            .unwrap()
            .model
            .process(
                &bytes,
                &IngressInput {
                    ingress_port: 0,
                    tstamp_ns: t,
                    routed_egress_port: None,
                },
                0,
            )
            .expect("process");
        sent.extend(out.cpu);
        t += 1_000;
    }
    let polling = Polling::new(9, flows[0], 8);
    let out = device
        .lock()
        .unwrap()
        .model
        .process(
            &packets::polling_packet(&program, &polling),
            &IngressInput {
                ingress_port: 4,
                tstamp_ns: t,
                routed_egress_port: None,
            },
            0,
        )
        .expect("process");
    sent.extend(out.cpu);
    assert_eq!(sent.len(), 2, "one eviction report, one polling copy");
    assert_eq!(CpuFrameKind::of(&sent[0]), CpuFrameKind::Eviction);
    assert_eq!(CpuFrameKind::of(&sent[1]), CpuFrameKind::Polling);
    for frame in &sent {
        switch_side.send(frame).expect("send");
    }
    let got: Vec<_> = (0..2)
        .map(|_| rx.recv_timeout(Duration::from_secs(5)).expect("a frame"))
        .collect();
    for (frame, bytes) in got.iter().zip(&sent) {
        assert_eq!(&frame.bytes, bytes, "the frame as the switch sent it");
        assert_eq!(frame.time_ns, 42, "stamped by the agent's clock");
    }
    assert_eq!(got[0].kind, CpuFrameKind::Eviction);
    assert_eq!(got[1].kind, CpuFrameKind::Polling);

    // A flood the agent does not drain: the queue (64) takes what it can, the rest is
    // counted as dropped, none is lost silently.
    for _ in 0..500 {
        switch_side.send(&sent[1]).expect("send");
    }
    let counted =
        || stats.delivered.load(Ordering::Relaxed) + stats.dropped.load(Ordering::Relaxed);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while counted() < 502 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let delivered = stats.delivered.load(Ordering::Relaxed);
    let dropped = stats.dropped.load(Ordering::Relaxed);
    assert_eq!(
        delivered + dropped,
        502,
        "delivered {delivered}, dropped {dropped}"
    );
    assert_eq!(delivered, 2 + 64, "the two read, then the queue's capacity");
    stop.store(true, Ordering::Relaxed);
    reader.join().expect("reader thread").expect("reader ok");
    drop(rx);
}

#[test]
fn a_missing_interface_is_named() {
    let e = CpuPort::open("no-such-if0", Duration::from_millis(10)).expect_err("no interface");
    assert!(matches!(e, CpuPortError::NoInterface(ref n) if n == "no-such-if0"));
    assert_eq!(
        e.to_string(),
        "CPU port `no-such-if0`: no such network interface"
    );
}
