//! PARALEON on a host, over real gRPC: the host agent's tuning task reports its RNIC's
//! uplink utilisation (from a sysfs tree's transmit counter) and probe RTTs to the
//! analyzer's tuning controller every interval; when the ToR's distribution changes (the
//! test reports as the ToR), the controller starts a search and the task writes the new
//! setting into the RNIC's DCQCN parameter files.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hawkmesh_analyzer_server::tuning_service::TuningConfig;
use hawkmesh_analyzer_server::{start, ServerConfig};
use hawkmesh_host_agent::daemon::tuning::{run, HostTuning, RttWindow};
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::tuning_controller_client::TuningControllerClient;
use hawkmesh_wire::topology::FabricTopology;

const INTERVAL_MS: u64 = 100;

/// An mlx5 interface's files: speed, transmit counter, the RoCE congestion parameters.
fn sysfs(root: &Path) {
    let dir = root.join("sys/class/net/eth9");
    for sub in ["statistics", "ecn/roce_rp", "ecn/roce_np"] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
    }
    std::fs::write(dir.join("speed"), "100000\n").unwrap();
    std::fs::write(dir.join("statistics/tx_bytes"), "0\n").unwrap();
}

fn fsd(sizes: impl Iterator<Item = u64>) -> pb::TorInterval {
    let f = hawkmesh_tuner::fsd::truth_fsd(sizes, 1_000_000);
    pb::TorInterval {
        tor: "t0".into(),
        interval: 0,
        bins: f.bins.to_vec(),
        elephants: f.elephants,
        mice: f.mice,
        elephant_flows: f.elephant_flows,
        potential_elephants: f.potential_elephants,
        pause_fraction: vec![0.0],
    }
}

fn unix_interval() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        / INTERVAL_MS
}

#[test]
fn the_host_reports_its_metrics_and_writes_the_tuned_rnic_setting() {
    let root = std::env::temp_dir().join(format!("hawkmesh-host-tuning-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    sysfs(&root);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut config = ServerConfig::loopback(
        FabricTopology::default(),
        root.join("analyzer"),
        "127.0.0.1:0".parse().unwrap(),
    );
    config.tuning = Some(TuningConfig {
        tors: vec!["t0".into()],
        hosts: vec!["h0".into()],
        controller: Default::default(),
        host_gbps: 100.0,
        seed: 3,
    });
    let server = runtime.block_on(start(config)).unwrap();
    let endpoint = format!("http://{}", server.grpc_addr);
    let channel = runtime
        .block_on(
            tonic::transport::Endpoint::from_shared(endpoint.clone())
                .unwrap()
                .connect(),
        )
        .unwrap();
    let rtts = Arc::new(Mutex::new(RttWindow::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let task = runtime.spawn(run(
        HostTuning {
            host: "h0".into(),
            interval: Duration::from_millis(INTERVAL_MS),
            netdevs: vec!["eth9".into()],
            root: root.clone(),
            rtts: rtts.clone(),
        },
        channel,
        stop.clone(),
    ));
    let mut tor = runtime
        .block_on(TuningControllerClient::connect(endpoint))
        .unwrap();
    let hai = root.join("sys/class/net/eth9/ecn/roce_rp/rpg_hai_rate");
    let started = Instant::now();
    let mut tx = 0u64;
    let mut reported = 0;
    let mut last = unix_interval();
    // Each interval: the RNIC sends and probes; half-way into the next, the ToR reports
    // (mice first, then elephants), after the host's report of it.
    while !hai.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no setting written; controller: {:?}",
            server.tuning.as_ref().map(|t| t.status())
        );
        tx += 400_000_000;
        std::fs::write(
            root.join("sys/class/net/eth9/statistics/tx_bytes"),
            format!("{tx}\n"),
        )
        .unwrap();
        if let Ok(mut w) = rtts.lock() {
            w.observe(0, "h1", 0, 10_000);
            w.observe(0, "h1", 0, 14_000);
        }
        std::thread::sleep(Duration::from_millis(INTERVAL_MS / 4));
        let now = unix_interval();
        if now > last + 1 {
            // The interval before the current one has ended and the host reported it.
            std::thread::sleep(Duration::from_millis(INTERVAL_MS / 2));
            let report = if reported < 3 {
                fsd((0..40).map(|i| 10_000 + i * 100))
            } else {
                fsd((0..40).map(|i| 5_000_000 + i * 1_000))
            };
            let _ = runtime.block_on(tor.report_tor(pb::TorInterval {
                interval: now - 1,
                ..report
            }));
            reported += 1;
            last = now;
        }
    }
    // The RNIC's files hold a setting of the search (a whole one: every file written).
    let status = server.tuning.as_ref().unwrap().status().unwrap();
    assert!(status.searches >= 1 && status.version >= 2, "{status:?}");
    std::thread::sleep(Duration::from_millis(INTERVAL_MS));
    for knob in ["rpg_hai_rate", "rpg_time_reset", "rpg_ai_rate"] {
        let path = root.join(format!("sys/class/net/eth9/ecn/roce_rp/{knob}"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.trim().parse::<u64>().is_ok(), "{knob}: {text:?}");
    }
    assert!(root
        .join("sys/class/net/eth9/ecn/roce_np/min_time_between_cnps")
        .exists());
    stop.store(true, Ordering::Release);
    let stats = runtime.block_on(task).unwrap();
    assert!(stats.reported >= 3 && stats.applied >= 1, "{stats:?}");
    runtime.block_on(server.stop());
    let _ = std::fs::remove_dir_all(&root);
}
