//! The switch-agent daemon end to end, as it runs on a Tofino's CPU: BF Runtime over TCP to
//! the model-backed server (table programming, mirror session, register sync and reads),
//! CPU copies over a veth pair in a network namespace (`bf_pci0`), reports over gRPC to the
//! real analyzer service — through a BF Runtime server restart in the middle of a
//! collection, an analyzer outage, and a switch that comes back with its state lost.
//!
//! Needs root (network namespace); `HAWKMESH_NO_NETNS=1` skips it, saying so.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hawkmesh_analyzer_server::tuning_service::TuningConfig;
use hawkmesh_analyzer_server::{start, RunningServer, ServerConfig};
use hawkmesh_bfrt_model::{BfrtServer, Device};
use hawkmesh_dataplane::hawkeye::{program, HawkeyeParams};
use hawkmesh_dataplane::ir::Program;
use hawkmesh_dataplane::model::{IngressInput, Model, Routing};
use hawkmesh_dataplane::packets::{self, Polling};
use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::tuning_controller_client::TuningControllerClient;
use hawkmesh_proto::v1::{HostInterval, IncidentRequest};
use hawkmesh_switch_agent::cpu_port::CpuPort;
use hawkmesh_switch_agent::daemon::{run, DaemonConfig, DaemonSummary};
use hawkmesh_wire::dataplane::{CPU_MIRROR_SESSION, CPU_PORT};
use hawkmesh_wire::telemetry::FiveTuple;
use hawkmesh_wire::topology::FabricTopology;

mod common;
use common::{skip, Netns};

/// l0 (node 0) with h0 (10.0.0.1) on port 0 and h1 (10.0.0.2) on port 1, its port 2 to
/// s0 (node 1) port 0; h2 (10.0.1.1) on s0 port 1.
const FABRIC: &str = r#"{
  "nodes": [
    {"id": 0, "name": "l0", "kind": "switch", "tier": 0},
    {"id": 1, "name": "s0", "kind": "switch", "tier": 1},
    {"id": 2, "name": "h0", "kind": "host", "ipv4": [10, 0, 0, 1]},
    {"id": 3, "name": "h1", "kind": "host", "ipv4": [10, 0, 0, 2]},
    {"id": 4, "name": "h2", "kind": "host", "ipv4": [10, 0, 1, 1]}
  ],
  "links": [
    {"a": {"node": 2, "port": 0}, "b": {"node": 0, "port": 0}, "gbps": 100.0, "delay_ns": 1000},
    {"a": {"node": 3, "port": 0}, "b": {"node": 0, "port": 1}, "gbps": 100.0, "delay_ns": 1000},
    {"a": {"node": 0, "port": 2}, "b": {"node": 1, "port": 0}, "gbps": 100.0, "delay_ns": 1000},
    {"a": {"node": 4, "port": 0}, "b": {"node": 1, "port": 1}, "gbps": 100.0, "delay_ns": 1000}
  ]
}"#;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn bfrt_json() -> Vec<u8> {
    hawkmesh_bfrt_model::program_description().to_vec()
}

/// The model-backed BF Runtime server on its own runtime: dropping it is bf_switchd's gRPC
/// server going away (every connection cut).
fn serve_bfrt(device: &Arc<Mutex<Device>>, port: u16) -> tokio::runtime::Runtime {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let server = BfrtServer::new(device.clone(), "hawkmesh", bfrt_json()).expect("server");
    // The previous server's runtime shuts down in the background: its listener may hold the
    // port for a moment, as a restarted bf_switchd would wait for it.
    let deadline = Instant::now() + Duration::from_secs(10);
    let listener = loop {
        match runtime.block_on(tokio::net::TcpListener::bind(("127.0.0.1", port))) {
            Ok(listener) => break listener,
            Err(e) if Instant::now() < deadline => {
                eprintln!("port {port} not free yet ({e}); retrying");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("bind the BF Runtime port {port}: {e}"),
        }
    };
    runtime.spawn(async move { server.serve(listener).await });
    runtime
}

async fn serve_analyzer(topology: &FabricTopology, dir: &Path, grpc: SocketAddr) -> RunningServer {
    start(ServerConfig::loopback(
        topology.clone(),
        dir.to_path_buf(),
        grpc,
    ))
    .await
    .expect("analyzer")
}

fn fresh_device(program: &Arc<Program>) -> Device {
    Device::new(Model::new(program.clone(), Routing::FromTable, CPU_PORT).expect("model"))
}

/// The switch and the host side of its CPU port.
struct Switch {
    program: Arc<Program>,
    device: Arc<Mutex<Device>>,
    cpu: CpuPort,
    /// The switch's own clock (the ASIC's timestamps, unrelated to the host's).
    clock: Box<dyn Fn() -> u64>,
}

impl Switch {
    /// Runs `packet` in by `port` now; its CPU copies go out of the switch's CPU port.
    /// Returns the egress ports of what the switch forwarded.
    fn send(&self, packet: &[u8], port: u16) -> Vec<u16> {
        let input = IngressInput {
            ingress_port: port,
            tstamp_ns: (self.clock)(),
            routed_egress_port: None,
        };
        let out = self
            .device
            .lock()
            .unwrap()
            .process(packet, &input, 0, CPU_MIRROR_SESSION)
            .expect("process");
        for copy in &out.cpu {
            self.cpu.send(copy).expect("CPU port send");
        }
        out.ports.iter().map(|(p, _)| *p).collect()
    }

    /// Traffic from h0 and h1 to h2 (out of port 2), a pause from s0 on port 2, and a
    /// polling packet from h0 for its flow to h2.
    fn incident(&self, event: u64) {
        for i in 0..24u64 {
            let flow = FiveTuple::rocev2(
                [10, 0, 0, 1 + (i % 2) as u8],
                49152 + (i % 3) as u16,
                [10, 0, 1, 1],
            );
            let packet = packets::rocev2_data(&self.program, &flow, 0, 2, 64, i as u32, 1062);
            assert_eq!(self.send(&packet, (i % 2) as u16), [2], "routed to s0");
            if i == 8 {
                self.send(&packets::pfc_frame(1, [0xFFFF, 0, 0, 0, 0, 0, 0, 0]), 2);
            }
        }
        let victim = FiveTuple::rocev2([10, 0, 0, 1], 49152, [10, 0, 1, 1]);
        self.send(
            &packets::polling_packet(&self.program, &Polling::new(event, victim, 8)),
            0,
        );
    }

    fn programmed(&self) -> bool {
        self.device
            .lock()
            .unwrap()
            .cpu_mirror_active(CPU_MIRROR_SESSION)
    }
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the analyzer holds l0's report of `event`.
fn reported(runtime: &tokio::runtime::Runtime, grpc: SocketAddr, event: u64) -> bool {
    runtime.block_on(async {
        let Ok(mut client) = CollectorClient::connect(format!("http://{grpc}")).await else {
            return false;
        };
        client
            .get_incident(IncidentRequest { event_id: event })
            .await
            .is_ok_and(|r| r.into_inner().reported_switches.contains(&0))
    })
}

/// Flow records in l0's report of `event` at the analyzer (the epochs of the event read
/// in the switch's time).
fn flows(server: &RunningServer, event: u64) -> usize {
    let reports = server
        .incidents
        .lock()
        .unwrap()
        .reports(event)
        .unwrap_or_default();
    reports
        .iter()
        .filter(|r| r.switch == 0)
        .flat_map(|r| &r.epochs)
        .map(|e| e.flows.len())
        .sum()
}

/// What both tests start from: the fabric description on disk, the CPU port's veth pair in
/// a namespace (its host side returned apart: the daemon takes it), the switch (its clock
/// from `origin_ns`: an ASIC counts from its reset), a free BF Runtime port.
struct Lab {
    dir: PathBuf,
    topology: FabricTopology,
    ns: Netns,
    switch: Switch,
    program: Arc<Program>,
    device: Arc<Mutex<Device>>,
    bfrt_port: u16,
}

fn lab(name: &str, origin_ns: u64) -> (Lab, CpuPort) {
    let dir = scratch(name);
    let topology: FabricTopology = serde_json::from_str(FABRIC).expect("fabric");
    std::fs::write(dir.join("topology.json"), FABRIC).expect("write topology");
    let ns = Netns::new();
    let [switch_side, host_side] = ns.open(["cpu-sw", "cpu-host"]);
    let program = Arc::new(program(&HawkeyeParams::default()).expect("program"));
    let device = Arc::new(Mutex::new(fresh_device(&program)));
    let started = Instant::now();
    let switch = Switch {
        program: program.clone(),
        device: device.clone(),
        cpu: switch_side,
        clock: Box::new(move || origin_ns + started.elapsed().as_nanos() as u64),
    };
    let bfrt_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let lab = Lab {
        dir,
        topology,
        ns,
        switch,
        program,
        device,
        bfrt_port,
    };
    (lab, host_side)
}

/// The daemon's configuration file in `dir` (switch l0, BF Runtime on `bfrt_port`, CPU port
/// `cpu-host`, the analyzer at `grpc`) with `extra` appended, loaded.
fn daemon_config(dir: &Path, bfrt_port: u16, grpc: SocketAddr, extra: &str) -> DaemonConfig {
    let path = dir.join("switch-agent.toml");
    std::fs::write(
        &path,
        format!(
            "switch = \"l0\"\ntopology = \"{}\"\n\n[bfrt]\naddress = \"127.0.0.1:{bfrt_port}\"\n\n\
             [cpu_port]\ninterface = \"cpu-host\"\n\n[analyzer]\nendpoint = \"http://{grpc}\"\n{extra}",
            dir.join("topology.json").display()
        ),
    )
    .expect("write config");
    DaemonConfig::load(&path).expect("config")
}

#[test]
fn the_daemon_delivers_every_report_through_switch_restarts_and_an_analyzer_outage() {
    if skip() {
        return;
    }
    let (
        Lab {
            dir,
            topology,
            ns: _ns,
            switch,
            program,
            device,
            bfrt_port,
        },
        host_side,
    ) = lab("switch-daemon", 123_456_789_000);

    // The switch's BF Runtime server and the analyzer.
    let mut bfrt = Some(serve_bfrt(&device, bfrt_port));
    let analyzer_rt = tokio::runtime::Runtime::new().expect("runtime");
    let analyzer_dir = dir.join("analyzer");
    let analyzer = analyzer_rt.block_on(serve_analyzer(
        &topology,
        &analyzer_dir,
        "127.0.0.1:0".parse().expect("addr"),
    ));
    let grpc = analyzer.grpc_addr;

    // The daemon, from its configuration file.
    let config = daemon_config(&dir, bfrt_port, grpc, "");
    let daemon_rt = tokio::runtime::Runtime::new().expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let daemon = {
        let (handle, stop) = (daemon_rt.handle().clone(), stop.clone());
        std::thread::spawn(move || run(&config, host_side, handle, stop))
    };

    // It programs the switch: routes from the fabric description, the CPU mirror session.
    wait_for("the switch's set-up", Duration::from_secs(20), || {
        switch.programmed()
    });

    // 1. An incident: the report reaches the analyzer.
    switch.incident(1);
    wait_for("event 1's report", Duration::from_secs(20), || {
        reported(&analyzer_rt, grpc, 1)
    });
    assert!(flows(&analyzer, 1) > 0, "the event's epochs were read");

    // 2. bf_switchd's gRPC server goes away with a polling event waiting for its read;
    //    the daemon reconnects when it is back and reports the event.
    if let Some(rt) = bfrt.take() {
        rt.shutdown_background();
    }
    switch.incident(2);
    std::thread::sleep(Duration::from_millis(700));
    assert!(
        !reported(&analyzer_rt, grpc, 2),
        "no report without the switch"
    );
    bfrt = Some(serve_bfrt(&device, bfrt_port));
    wait_for("event 2's report", Duration::from_secs(30), || {
        reported(&analyzer_rt, grpc, 2)
    });
    assert!(
        flows(&analyzer, 2) > 0,
        "read a second late, the report still carries the event's epochs the ring holds"
    );

    // 3. The analyzer is down while event 3 is reported: the report waits in the outbox
    //    and reaches the analyzer restarted on the same address and store.
    analyzer_rt.block_on(analyzer.stop());
    switch.incident(3);
    std::thread::sleep(Duration::from_millis(1500));
    let analyzer = analyzer_rt.block_on(serve_analyzer(&topology, &analyzer_dir, grpc));
    wait_for("event 3's report", Duration::from_secs(30), || {
        reported(&analyzer_rt, grpc, 3)
    });
    assert!(reported(&analyzer_rt, grpc, 1), "the store kept event 1");
    assert!(flows(&analyzer, 3) > 0);

    // 4. The switch restarts with its state lost (bf_switchd restart): the daemon notices
    //    (its mirror session is gone), installs everything again, and event 4 is reported.
    if let Some(rt) = bfrt.take() {
        rt.shutdown_background();
    }
    *device.lock().unwrap() = fresh_device(&program);
    bfrt = Some(serve_bfrt(&device, bfrt_port));
    wait_for(
        "the set-up installed again",
        Duration::from_secs(30),
        || switch.programmed(),
    );
    switch.incident(4);
    wait_for("event 4's report", Duration::from_secs(30), || {
        reported(&analyzer_rt, grpc, 4)
    });
    assert!(flows(&analyzer, 4) > 0);

    stop.store(true, Ordering::Release);
    let summary: DaemonSummary = daemon
        .join()
        .expect("daemon thread")
        .expect("the daemon ran");
    assert_eq!(summary.polling_copies, 4);
    assert_eq!(summary.reports, 4);
    assert_eq!(summary.reports_sent, 4, "{summary:?}");
    assert_eq!(summary.reports_unsent, 0);
    assert_eq!(summary.reports_dropped, 0);
    assert_eq!(summary.events_unreported, 0);
    assert!(summary.switch_reconnects >= 2, "{summary:?}");
    analyzer_rt.block_on(analyzer.stop());
    drop(bfrt);
    let _ = std::fs::remove_dir_all(&dir);
}

/// PARALEON on the ToR: with `[tuning]`, the daemon reads the switch's sketch every
/// interval and reports the ToR's FSD to the analyzer's tuning controller (the test reports
/// h0's metrics as its host agent would); as the distribution changes (many small flows
/// growing, then a few large ones), the controller starts a search and the daemon writes
/// the new setting's ECN profile into the switch's `ecn_profile` table.
#[test]
fn the_daemon_reports_its_fsd_and_writes_the_tuned_ecn_profile() {
    if skip() {
        return;
    }
    let (
        Lab {
            dir,
            topology,
            ns: _ns,
            switch,
            program,
            device,
            bfrt_port,
        },
        host_side,
    ) = lab("switch-tuning", 0);
    let _bfrt = serve_bfrt(&device, bfrt_port);
    let analyzer_rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut config = ServerConfig::loopback(
        topology.clone(),
        dir.join("analyzer"),
        "127.0.0.1:0".parse().expect("addr"),
    );
    config.tuning = Some(TuningConfig {
        tors: vec!["l0".into()],
        hosts: vec!["h0".into()],
        ..TuningConfig::for_fabric(&topology)
    });
    let analyzer = analyzer_rt.block_on(start(config)).expect("analyzer");
    let grpc = analyzer.grpc_addr;
    let config = daemon_config(&dir, bfrt_port, grpc, "\n[tuning]\ninterval_ms = 250\n");
    let daemon_rt = tokio::runtime::Runtime::new().expect("runtime");
    let stop = Arc::new(AtomicBool::new(false));
    let daemon = {
        let (handle, stop) = (daemon_rt.handle().clone(), stop.clone());
        std::thread::spawn(move || run(&config, host_side, handle, stop))
    };
    wait_for("the switch's set-up", Duration::from_secs(20), || {
        switch.programmed()
    });
    let ecn_entries = || {
        device
            .lock()
            .unwrap()
            .model
            .table_len(hawkmesh_wire::dataplane::Table::ECN_PROFILE.name())
            .expect("the program has ecn_profile")
    };
    assert_eq!(ecn_entries(), 0, "no ECN profile before tuning");
    let tuning = analyzer.tuning.clone().expect("the tuning controller runs");
    // h0's host agent: its metrics for the current and the next two intervals (250 ms
    // each, numbered by the Unix clock; long enough for a debug build's readout), every
    // 50 ms, so they are in before l0 closes them.
    let host_done = Arc::new(AtomicBool::new(false));
    let host = {
        let done = host_done.clone();
        let handle = analyzer_rt.handle().clone();
        std::thread::spawn(move || {
            let mut client = handle
                .block_on(TuningControllerClient::connect(format!("http://{grpc}")))
                .expect("connect");
            while !done.load(Ordering::Acquire) {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_nanos() as u64
                    / 250_000_000;
                for interval in now..now + 3 {
                    // An interval closed meanwhile is refused: nothing to do.
                    let _ = handle.block_on(client.report_host(HostInterval {
                        host: "h0".into(),
                        interval,
                        uplink_utilisation: vec![0.5],
                        normalised_rtt: vec![0.5],
                        pause_fraction: vec![0.0],
                    }));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    // Traffic from h0 into l0 every 5 ms: first many two-packet flows, then a few long ones.
    let mut seq = 0u32;
    let mut send = |flows: u16, packets: u32| {
        for f in 0..flows {
            let flow = FiveTuple::rocev2([10, 0, 0, 1], 1_000 + f, [10, 0, 1, 1]);
            for _ in 0..packets {
                seq = seq.wrapping_add(1);
                switch.send(
                    &packets::rocev2_data(&program, &flow, 0, 2, 64, seq, 1062),
                    0,
                );
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let phase = Instant::now();
    while tuning.status().expect("status").stats.closed < 3 {
        assert!(
            phase.elapsed() < Duration::from_secs(20),
            "no intervals: {:?}",
            tuning.status()
        );
        send(30, 2);
    }
    // Until a whole profile is in: l0's three ports, 2^8 draws each (the daemon writes
    // them entry by entry).
    let phase = Instant::now();
    while ecn_entries() < 3 * 256 {
        assert!(
            phase.elapsed() < Duration::from_secs(30),
            "no setting written ({} entries): {:?}",
            ecn_entries(),
            tuning.status()
        );
        send(3, 60);
    }
    let status = tuning.status().expect("status");
    assert!(status.version >= 2 && status.searches >= 1, "{status:?}");
    assert_eq!(ecn_entries(), 3 * 256);
    host_done.store(true, Ordering::Release);
    host.join().expect("host thread");
    stop.store(true, Ordering::Release);
    let summary: DaemonSummary = daemon
        .join()
        .expect("daemon thread")
        .expect("the daemon ran");
    // Replies taken by the loop (the last may still wait in its queue at the stop; the
    // controller's closed intervals above count the reports).
    assert!(summary.tuning_reports >= 1, "{summary:?}");
    assert!(summary.settings_applied >= 1, "{summary:?}");
    analyzer_rt.block_on(analyzer.stop());
    let _ = std::fs::remove_dir_all(&dir);
}
