//! The PARALEON controller as a service: ToR and host agents report monitor intervals over
//! real gRPC on loopback; a change of the network-wide FSD starts a search whose settings
//! come back, versioned, in the replies; bad reports are refused with a status naming what
//! is wrong; the state is served over HTTP.

use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_analyzer_server::tuning_service::TuningConfig;
use hawkmesh_analyzer_server::{start, ServerConfig};
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::tuning_controller_client::TuningControllerClient;
use hawkmesh_tuner::fsd::truth_fsd;
use hawkmesh_tuner::Fsd;
use tonic::Code;

mod common;
use common::http_get;
fn tor(name: &str, interval: u64, fsd: &Fsd) -> pb::TorInterval {
    pb::TorInterval {
        tor: name.into(),
        interval,
        bins: fsd.bins.to_vec(),
        elephants: fsd.elephants,
        mice: fsd.mice,
        elephant_flows: fsd.elephant_flows,
        potential_elephants: fsd.potential_elephants,
        pause_fraction: vec![0.0, 0.02],
    }
}

fn host(name: &str, interval: u64) -> pb::HostInterval {
    pb::HostInterval {
        host: name.into(),
        interval,
        uplink_utilisation: vec![0.7],
        normalised_rtt: vec![0.4, 0.5],
        pause_fraction: vec![0.0],
    }
}

#[tokio::test]
async fn tors_and_hosts_report_and_lasting_traffic_dispatches_a_new_setting() {
    let (topology, _, _) = sample_pfc_storm().unwrap();
    let tuning = TuningConfig::for_fabric(&topology);
    assert_eq!(tuning.tors, ["tor0", "tor1"]);
    assert_eq!(tuning.hosts.len(), 3);
    let dir = std::env::temp_dir().join(format!("hawkmesh-tuning-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut config = ServerConfig::loopback(
        topology.clone(),
        dir.clone(),
        "127.0.0.1:0".parse().unwrap(),
    );
    config.tuning = Some(tuning.clone());
    let server = start(config).await.unwrap();
    let mut client = TuningControllerClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();

    let first = client
        .get_setting(pb::SettingRequest {
            device: "tor0".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((first.version, first.closed, first.tuning), (1, 0, false));
    assert!(first.epoch > 0, "the controller's start marks its versions");
    assert_eq!(first.knobs.len(), 17);
    let kmax = |r: &pb::TuningReply| {
        r.knobs
            .iter()
            .find(|k| k.name == "kmax_kb")
            .map(|k| k.value)
    };
    assert!(kmax(&first).is_some());

    let mice = truth_fsd((0..40).map(|i| 10_000 + i * 100), 1_000_000);
    let elephants = truth_fsd((0..40).map(|i| 5_000_000 + i * 1_000), 1_000_000);
    // Intervals 1 and 2: elephants everywhere; nothing was tuned for them, but a change
    // must hold three intervals (ControllerConfig::hold) before a search starts.
    for t in 1..=2u64 {
        for h in &tuning.hosts {
            client.report_host(host(h, t)).await.unwrap();
        }
        client.report_tor(tor("tor0", t, &elephants)).await.unwrap();
        let r = client
            .report_tor(tor("tor1", t, &elephants))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r.version, r.closed, r.tuning), (1, t, false));
    }
    // Interval 3: the traffic held: a search starts, its first trial comes back as version 2.
    for h in &tuning.hosts {
        client.report_host(host(h, 3)).await.unwrap();
    }
    let r = client
        .report_tor(tor("tor0", 3, &elephants))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.version, 1, "interval 3 waits for tor1");
    let r = client
        .report_tor(tor("tor1", 3, &elephants))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.version, r.closed, r.tuning), (2, 3, true));
    assert_eq!(r.epoch, first.epoch);
    assert_ne!(
        r.knobs.iter().map(|k| k.value).collect::<Vec<_>>(),
        first.knobs.iter().map(|k| k.value).collect::<Vec<_>>()
    );

    // Refused, with the reason.
    for (result, code, says) in [
        (
            client.report_tor(tor("tor9", 4, &mice)).await,
            Code::InvalidArgument,
            "ToR `tor9` is not in the tuned fabric",
        ),
        (
            client
                .report_tor(pb::TorInterval {
                    bins: vec![1.0; 3],
                    ..tor("tor0", 4, &mice)
                })
                .await,
            Code::InvalidArgument,
            "3 size bins, expected 16",
        ),
        (
            client.report_tor(tor("tor0", 1, &mice)).await,
            Code::OutOfRange,
            "interval 1 is closed",
        ),
        (
            client
                .report_host(pb::HostInterval {
                    uplink_utilisation: vec![1.7],
                    ..host("h0", 4)
                })
                .await,
            Code::InvalidArgument,
            "uplink_utilisation[0] = 1.7 is not in [0, 1]",
        ),
    ] {
        let status = result.expect_err(says);
        assert_eq!(status.code(), code, "{says}: {status:?}");
        assert!(status.message().contains(says), "{says}: {status:?}");
    }

    let (code, body) = http_get(&server, "/api/tuning").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(status["version"], 2);
    assert_eq!(status["tuning"], true);
    assert_eq!(status["closed"], 3);
    assert_eq!(status["stats"]["refused"], 3, "{body}");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
