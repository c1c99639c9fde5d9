//! The simulated agents against the real pingmesh controller: registration, the
//! controller's pinglists, batched uploads over gRPC every 5 ms of simulated time, and the
//! period's report from the service's JSON — the lossy link located, as the analysis of
//! the same probes in-process finds it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use hawkmesh_analyzer_server::pingmesh::{Clock, PingmeshConfig};
use hawkmesh_analyzer_server::{start, ServerConfig};
use hawkmesh_lab::pingmesh::{NetsimProbing, ProbingConfig};
use hawkmesh_lab::pingmesh_uplink::Uplink;
use hawkmesh_netsim::time::NS;
use hawkmesh_netsim::{Scenario, Simulation};
use hawkmesh_pingmesh::analysis::AnalysisConfig;
use hawkmesh_proto::v1 as pb;

const PERIOD_NS: u64 = 20_000_000;
const UPLOAD_NS: u64 = 5_000_000;

#[test]
fn simulated_agents_upload_over_grpc_and_the_service_locates_the_lossy_link() {
    let text = r#"
version = 1
duration_us = 31000
[topology]
kind = "fat_tree"
k = 4
[[fault]]
kind = "random_loss"
a = "agg2"
b = "core0"
rate = 0.3
"#;
    let loaded = Scenario::parse(text, "pingmesh.toml", ".".into()).unwrap();
    let mut sim = Simulation::new(&loaded).unwrap();
    let config = ProbingConfig::default();
    let probing = NetsimProbing::new(&sim, config, Vec::new(), Vec::new()).unwrap();
    sim.set_host_hook(Box::new(probing.clone()));

    let dir = std::env::temp_dir().join(format!("hawkmesh-lab-uplink-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = Arc::new(AtomicU64::new(0));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut server_config = ServerConfig::loopback(
        sim.topology().clone(),
        dir.clone(),
        "127.0.0.1:0".parse().unwrap(),
    );
    server_config.pingmesh = Some(PingmeshConfig {
        // Simulation scale: 20-ms periods, probes at 2,000/s (see lab::pingmesh).
        analysis: AnalysisConfig {
            host_silence_ns: PERIOD_NS / 2,
            rnic_hold_ns: 3 * PERIOD_NS,
            cpu_noise_delay_ns: 200_000,
            high_rtt_ns: 200_000,
            ..AnalysisConfig::default()
        },
        pinglists: config.pinglists,
        period_ns: PERIOD_NS,
        // As in the paper (20-s periods, 5-s uploads, 10-s grace): two uploads of grace.
        grace_ns: 2 * UPLOAD_NS,
        clock: Clock::Manual(clock.clone()),
        ..PingmeshConfig::default()
    });
    let server = runtime.block_on(start(server_config)).unwrap();
    let mut uplink = Uplink::connect(server.grpc_addr, clock.clone(), probing.inventory()).unwrap();

    let mut t = 0;
    while t < PERIOD_NS + 2 * UPLOAD_NS {
        t += UPLOAD_NS;
        sim.run_until(t * NS);
        uplink.sync(&probing, &sim).unwrap();
    }
    let stats = uplink.stats();
    assert_eq!(stats.registrations, 16, "every host registered once");
    assert!(stats.results > 5_000, "{stats:?}");
    assert_eq!(stats.late, 0, "every result came within the grace");

    // What the agents probe is what the controller hands out.
    let list = uplink.pinglist("h0").unwrap();
    assert_eq!(list.unregistered_targets, 0);
    let mesh: Vec<&str> = list.rnics[0]
        .targets
        .iter()
        .filter(|t| t.kind == pb::ProbeKind::TorMesh as i32)
        .map(|t| t.host.as_str())
        .collect();
    assert_eq!(mesh, ["h1"], "h0 shares its ToR with h1 in a K=4 fat tree");

    // The first period is due once its grace has passed (the service's own task may have
    // analysed it already).
    let shared = server.pingmesh.clone().unwrap();
    runtime.block_on(shared.analyse_due()).unwrap();
    let report = shared.lock().unwrap().period(0).unwrap();
    assert!(report.results > 5_000);
    let switch: Vec<_> = report
        .problems
        .iter()
        .filter(|p| p.kind == "switch_drops")
        .collect();
    assert_eq!(switch.len(), 1, "{:?}", report.problems);
    let ends: Vec<&str> = switch[0]
        .links
        .iter()
        .flat_map(|l| [l.a.as_str(), l.b.as_str()])
        .map(|end| end.split(':').next().unwrap())
        .collect();
    assert!(
        ends.contains(&"agg2") && ends.contains(&"core0"),
        "{:?}",
        switch[0].links
    );
    assert!(
        report.problems.iter().all(|p| p.kind == "switch_drops"),
        "{:?}",
        report.problems
    );
    // The agents go first: the service's graceful stop waits for its clients' connections.
    drop(uplink);
    runtime.block_on(server.stop());
    let _ = std::fs::remove_dir_all(&dir);
}
