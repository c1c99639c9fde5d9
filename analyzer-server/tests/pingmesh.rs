//! The pingmesh controller as a service: real gRPC and HTTP over loopback, its log on disk,
//! a clock the test sets. Agents register, fetch pinglists and upload results; bad uploads
//! (malformed, huge, duplicated, out of order, late) get clear answers and lose nothing; a
//! lossy link is located in the period's report; a restart replays what was not analysed.

use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_analyzer_server::pingmesh::{Clock, PingmeshConfig, PingmeshLimits};
use hawkmesh_analyzer_server::{start, RunningServer, ServerConfig};
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::pingmesh_controller_client::PingmeshControllerClient;
use hawkmesh_wire::topology::{FabricTopology, LinkDesc, NodeDesc, NodeKind, PortRef};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tonic::transport::Channel;

mod common;
use common::http_get;
const PERIOD: u64 = 1_000_000_000;
/// The first period the test fills.
const P0: u64 = 1_000;

/// tor0 (h0–h3) and tor1 (h4–h7) under spine0 and spine1. Host port 0 is its NIC; ToR
/// ports 0–3 face its hosts, 4 and 5 the spines; spine port t faces tor t.
fn fabric() -> FabricTopology {
    let mut nodes = Vec::new();
    let mut node = |name: String, kind: NodeKind, tier: Option<u8>, ipv4: Option<[u8; 4]>| {
        let id = nodes.len() as u32;
        nodes.push(NodeDesc {
            id,
            name,
            kind,
            tier,
            ipv4,
        });
        id
    };
    let tors: Vec<u32> = (0..2)
        .map(|t| node(format!("tor{t}"), NodeKind::Switch, Some(0), None))
        .collect();
    let spines: Vec<u32> = (0..2)
        .map(|s| node(format!("spine{s}"), NodeKind::Switch, Some(1), None))
        .collect();
    let hosts: Vec<u32> = (0..8)
        .map(|h| {
            node(
                format!("h{h}"),
                NodeKind::Host,
                None,
                Some([10, 0, h as u8, 1]),
            )
        })
        .collect();
    let link = |a: (u32, u16), b: (u32, u16)| LinkDesc {
        a: PortRef {
            node: a.0,
            port: a.1,
        },
        b: PortRef {
            node: b.0,
            port: b.1,
        },
        gbps: 100.0,
        delay_ns: 1000,
    };
    let mut links = Vec::new();
    for (h, host) in hosts.iter().enumerate() {
        links.push(link((*host, 0), (tors[h / 4], (h % 4) as u16)));
    }
    for (t, tor) in tors.iter().enumerate() {
        for (s, spine) in spines.iter().enumerate() {
            links.push(link((*tor, 4 + s as u16), (*spine, t as u16)));
        }
    }
    let topology = FabricTopology { nodes, links };
    topology.validate().unwrap();
    topology
}

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-pingmesh-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(clock: &Arc<AtomicU64>) -> PingmeshConfig {
    PingmeshConfig {
        period_ns: PERIOD,
        grace_ns: PERIOD / 2,
        limits: PingmeshLimits {
            max_batch_results: 1000,
            ..PingmeshLimits::default()
        },
        clock: Clock::Manual(clock.clone()),
        ..PingmeshConfig::default()
    }
}

async fn serve(dir: &Path, clock: &Arc<AtomicU64>) -> RunningServer {
    let mut config =
        ServerConfig::loopback(fabric(), dir.to_path_buf(), "127.0.0.1:0".parse().unwrap());
    config.options = DiagnoseOptions::default();
    config.pingmesh = Some(self::config(clock));
    start(config).await.unwrap()
}

async fn client(server: &RunningServer) -> PingmeshControllerClient<Channel> {
    PingmeshControllerClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap()
}

fn registration(h: u32, incarnation: u64, qpn: u32) -> pb::RegisterRequest {
    pb::RegisterRequest {
        host: format!("h{h}"),
        incarnation,
        rnics: vec![pb::RnicInfo {
            nic: 0,
            gid: [[0u8; 10].as_slice(), &[0xff, 0xff, 10, 0, h as u8, 1]].concat(),
            ip: format!("10.0.{h}.1"),
            qpn,
        }],
    }
}

fn hop(node: &str, port: u32) -> pb::Hop {
    pb::Hop {
        node: node.into(),
        port,
    }
}

/// A probe from h`a` to h`b` under the other ToR through spine`s`, and its ACKs back the
/// same way; lost when `lossy` and it crosses the tor0–spine0 link (either direction).
fn cross(a: u32, b: u32, s: u32, sent_ns: u64, lossy: bool) -> pb::ProbeResult {
    let (ta, tb) = (a / 4, b / 4);
    let path = vec![
        hop(&format!("h{a}"), 0),
        hop(&format!("tor{ta}"), 4 + s),
        hop(&format!("spine{s}"), tb),
        hop(&format!("tor{tb}"), b % 4),
    ];
    let ack_path = vec![
        hop(&format!("h{b}"), 0),
        hop(&format!("tor{tb}"), 4 + s),
        hop(&format!("spine{s}"), ta),
        hop(&format!("tor{ta}"), a % 4),
    ];
    let lost = lossy && s == 0;
    pb::ProbeResult {
        prober_nic: 0,
        target_host: format!("h{b}"),
        target_nic: 0,
        target_qpn: 100 + b,
        kind: pb::ProbeKind::InterTor as i32,
        sent_ns,
        status: if lost {
            pb::ProbeStatus::Timeout as i32
        } else {
            pb::ProbeStatus::Answered as i32
        },
        network_rtt_ns: if lost { 0 } else { 8_000 },
        prober_delay_ns: if lost { 0 } else { 2_000 },
        responder_delay_ns: if lost { 0 } else { 1_500 },
        path,
        ack_path,
        ..pb::ProbeResult::default()
    }
}

/// Host h`a`'s results of one period: to each host under the other ToR over both spines,
/// 4 rounds (32 results).
fn results_of(a: u32, period: u64, lossy: bool) -> Vec<pb::ProbeResult> {
    let others = if a < 4 { 4..8 } else { 0..4 };
    let mut out = Vec::new();
    for round in 0..4u64 {
        for b in others.clone() {
            for s in 0..2 {
                let sent =
                    period * PERIOD + 1_000_000 + round * 100_000_000 + u64::from(b * 2 + s) * 1000;
                out.push(cross(a, b, s, sent, lossy));
            }
        }
    }
    out
}

fn batch(a: u32, incarnation: u64, seq: u64, results: Vec<pb::ProbeResult>) -> pb::ResultBatch {
    pb::ResultBatch {
        host: format!("h{a}"),
        incarnation,
        batch_seq: seq,
        results,
        paths: Vec::new(),
        ack_routes: Vec::new(),
    }
}

#[tokio::test]
async fn agents_register_fetch_upload_and_a_lossy_link_is_located() {
    let dir = data_dir("loop");
    let clock = Arc::new(AtomicU64::new(P0 * PERIOD + 1));
    let server = serve(&dir, &clock).await;
    let mut c = client(&server).await;

    // Registration is checked against the fabric description.
    let e = c.register(registration(9, 1, 100)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("\"h9\" is not in the fabric"),
        "{}",
        e.message()
    );
    let mut wrong_ip = registration(1, 1, 101);
    wrong_ip.rnics[0].ip = "10.9.9.9".into();
    let e = c.register(wrong_ip).await.unwrap_err();
    assert!(
        e.message()
            .contains("the fabric description gives it 10.0.1.1"),
        "{}",
        e.message()
    );
    let e = c.register(registration(1, 1, 0)).await.unwrap_err();
    assert!(e.message().contains("qpn 0"), "{}", e.message());
    // Before registering, no pinglist and no upload.
    let e = c
        .get_pinglist(pb::PinglistRequest { host: "h0".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);

    for h in 0..8 {
        let reply = c
            .register(registration(h, 1, 100 + h))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(reply.upload_interval_ms, 5000);
        assert_eq!(reply.probe_timeout_ms, 500);
    }
    // h0's pinglist: its ToR mesh (h1–h3) with their QPNs, and inter-ToR 5-tuples to tor1.
    let list = c
        .get_pinglist(pb::PinglistRequest { host: "h0".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.unregistered_targets, 0);
    assert_eq!(list.rnics.len(), 1);
    let rnic = &list.rnics[0];
    let mesh: Vec<(String, u32)> = rnic
        .targets
        .iter()
        .filter(|t| t.kind == pb::ProbeKind::TorMesh as i32)
        .map(|t| (t.host.clone(), t.qpn))
        .collect();
    assert_eq!(
        mesh,
        vec![("h1".into(), 101), ("h2".into(), 102), ("h3".into(), 103)]
    );
    assert!(rnic.tor_mesh_interval_ns > 0);
    for t in rnic
        .targets
        .iter()
        .filter(|t| t.kind == pb::ProbeKind::InterTor as i32)
    {
        assert!(["h4", "h5", "h6", "h7"].contains(&t.host.as_str()), "{t:?}");
        assert!(t.src_port >= 0xC000);
        assert_eq!(t.gid.len(), 16);
    }

    // Service tracing's targets: the comm info behind the remote addresses of h0's
    // connections (a restarted agent's new QPN once it re-registers).
    let info = c
        .get_comm_info(pb::CommInfoRequest {
            host: "h0".into(),
            ips: vec!["10.0.5.1".into(), "10.0.9.9".into(), "x".into()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.targets.len(), 1);
    assert_eq!(
        (info.targets[0].host.as_str(), info.targets[0].qpn),
        ("h5", 105)
    );
    assert_eq!(info.targets[0].kind, pb::ProbeKind::ServiceTracing as i32);
    assert_eq!(info.unknown.len(), 2, "{:?}", info.unknown);
    assert!(
        info.unknown[0].contains("10.0.9.9: no RNIC"),
        "{:?}",
        info.unknown
    );

    // Results in batches, out of order; a resent batch is a duplicate.
    for a in 0..4 {
        let results = results_of(a, P0, true);
        let (first, second) = results.split_at(results.len() / 2);
        let r2 = c
            .upload_results(batch(a, 1, 2, second.to_vec()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r2.accepted, r2.duplicate), (second.len() as u64, false));
        let r1 = c
            .upload_results(batch(a, 1, 1, first.to_vec()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r1.accepted, r1.duplicate), (first.len() as u64, false));
        let again = c
            .upload_results(batch(a, 1, 1, first.to_vec()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((again.accepted, again.duplicate), (0, true));
    }

    // Malformed batches are refused whole, naming the result and field.
    let mut bad = results_of(4, P0, false);
    bad[3].path[1] = hop("spine7", 0);
    let e = c.upload_results(batch(4, 1, 1, bad)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    assert!(
        e.message().contains("batch 1 of h4")
            && e.message()
                .contains("result 3: path hop 1: node \"spine7\""),
        "{}",
        e.message()
    );
    let mut future = results_of(4, P0, false);
    future[0].sent_ns = P0 * PERIOD + 3_600 * PERIOD;
    let e = c.upload_results(batch(4, 1, 1, future)).await.unwrap_err();
    assert!(
        e.message().contains("ahead of the analyzer's clock"),
        "{}",
        e.message()
    );
    let mut unknown_status = results_of(4, P0, false);
    unknown_status[5].status = 9;
    let e = c
        .upload_results(batch(4, 1, 1, unknown_status))
        .await
        .unwrap_err();
    assert!(
        e.message().contains("result 5: status 9"),
        "{}",
        e.message()
    );
    // A path number past the batch's path table, and both forms at once.
    let mut dangling = results_of(4, P0, false);
    dangling[2].path.clear();
    dangling[2].path_ref = 3;
    let e = c
        .upload_results(batch(4, 1, 1, dangling))
        .await
        .unwrap_err();
    assert!(
        e.message()
            .contains("result 2: path_ref 3: the batch has 0 paths"),
        "{}",
        e.message()
    );
    let mut both = results_of(4, P0, false);
    both[1].ack_path_ref = 1;
    let mut with_table = batch(4, 1, 1, both);
    with_table.paths.push(pb::Path {
        hops: vec![hop("h4", 0)],
    });
    let e = c.upload_results(with_table).await.unwrap_err();
    assert!(
        e.message()
            .contains("result 1: both ack_path and ack_path_ref"),
        "{}",
        e.message()
    );
    // An incarnation the host never registered.
    let e = c
        .upload_results(batch(4, 7, 1, results_of(4, P0, false)))
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition);
    // Over the batch limit: split it.
    let many: Vec<pb::ProbeResult> = (0..40).flat_map(|_| results_of(4, P0, false)).collect();
    assert!(many.len() > 1000);
    let e = c.upload_results(batch(4, 1, 1, many)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(e.message().contains("split it"), "{}", e.message());
    // A message over the size limit is refused before it is decoded; the service goes on.
    let mut huge = results_of(4, P0, false);
    huge[0].target_host = "x".repeat(40 << 20);
    let e = c.upload_results(batch(4, 1, 1, huge)).await.unwrap_err();
    assert!(
        matches!(
            e.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{e:?}"
    );
    // None of the refused batches used up h4's batch number 1.
    let ok = c
        .upload_results(batch(4, 1, 1, results_of(4, P0, true)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((ok.accepted, ok.duplicate), (32, false));

    // The other hosts upload too (an empty batch says the agent is alive: a host that
    // uploads nothing for a period is down, and timeouts to it are not the network's).
    for a in 5..8 {
        let r = c
            .upload_results(batch(a, 1, 10, Vec::new()))
            .await
            .unwrap()
            .into_inner();
        assert_eq!((r.accepted, r.duplicate), (0, false));
    }

    // The period ends; after the grace it is analysed.
    clock.store((P0 + 1) * PERIOD + PERIOD / 2 + 1, Ordering::SeqCst);
    // Analysed now (unless the service's own period task got there first).
    let shared = server.pingmesh.clone().unwrap();
    shared.analyse_due().await.unwrap();
    let (status, body) = http_get(&server, &format!("/api/pingmesh/periods/{P0}")).await;
    assert_eq!(status, 200, "{body}");
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["results"], 4 * 32 + 32);
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{body}");
    assert_eq!(problems[0]["kind"], "switch_drops");
    let link = &problems[0]["links"][0];
    assert_eq!(
        (link["a"].as_str(), link["b"].as_str()),
        (Some("tor0:4"), Some("spine0:0")),
        "{body}"
    );
    assert!(report["cluster"]["switch_drop_rate"].as_f64().unwrap() > 0.2);
    assert_eq!(report["cluster"]["network_rtt"]["p50"], 8_000);

    // A result for the analysed period is late: stored, counted, not voted on.
    let late = c
        .upload_results(batch(5, 1, 1, results_of(5, P0, false)[..3].to_vec()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((late.accepted, late.late), (3, 3));
    let (_, body) = http_get(&server, &format!("/api/pingmesh/periods/{P0}")).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["late_results"], 3);

    // Results of the next period wait for it, and survive a restart of the analyzer.
    let next = c
        .upload_results(batch(6, 1, 1, results_of(6, P0 + 1, false)))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((next.accepted, next.late), (32, 0));
    drop(c);
    server.stop().await;

    let server = serve(&dir, &clock).await;
    let mut c = client(&server).await;
    let (status, body) = http_get(&server, "/api/pingmesh").await;
    assert_eq!(status, 200);
    let state: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["status"]["pending_results"], 32, "{body}");
    assert_eq!(state["status"]["rnics_registered"], 8);
    assert_eq!(state["latest"]["index"], P0);
    assert_eq!(state["latest"]["late_results"], 3);
    // The resent batch is still known after the restart.
    let again = c
        .upload_results(batch(6, 1, 1, results_of(6, P0 + 1, false)))
        .await
        .unwrap()
        .into_inner();
    assert!(again.duplicate);
    clock.store((P0 + 2) * PERIOD + PERIOD / 2 + 1, Ordering::SeqCst);
    let shared = server.pingmesh.clone().unwrap();
    shared.analyse_due().await.unwrap();
    let (_, body) = http_get(&server, &format!("/api/pingmesh/periods/{}", P0 + 1)).await;
    let report: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(report["results"], 32);
    assert!(report["problems"].as_array().unwrap().is_empty(), "{body}");

    // The listing, the page and bad requests.
    let (status, body) = http_get(&server, "/api/pingmesh/periods?limit=1").await;
    assert_eq!(status, 200);
    let page: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["total"], 2);
    assert_eq!(
        page["next"],
        format!("/api/pingmesh/periods?after={P0}&limit=1")
    );
    let (status, _) = http_get(&server, "/api/pingmesh/periods/x").await;
    assert_eq!(status, 400);
    let (status, _) = http_get(&server, "/api/pingmesh/periods/5").await;
    assert_eq!(status, 404);
    let (status, html) = http_get(&server, "/pingmesh").await;
    assert_eq!(status, 200);
    assert!(html.contains("<svg") && html.contains("Cluster network RTT"));
    assert!(
        html.contains("tor0:4–spine0:0"),
        "the located link is listed"
    );
    assert!(
        html.contains("stroke=\"#d00\" stroke-width=\"4\""),
        "and drawn"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A HAWKEYE incident served with the pingmesh view of its victim: dated by its first
/// report chunk on the controller's clock, "not analysed yet" until its period is, then the
/// period's verdict; the HTML report carries the same section.
#[tokio::test]
async fn an_incident_carries_the_pingmesh_view_of_its_victim() {
    use hawkmesh_proto::v1::collector_client::CollectorClient;
    use hawkmesh_proto::v1::ReportChunk;
    let (topology, _, mut reports) = hawkmesh_analyzer::testkit::sample_pfc_storm().unwrap();
    for report in &mut reports {
        report.event_id = 42;
    }
    let dir = data_dir("joint");
    let clock = Arc::new(AtomicU64::new(P0 * PERIOD + 1));
    let mut config = ServerConfig::loopback(topology, dir.clone(), "127.0.0.1:0".parse().unwrap());
    config.pingmesh = Some(self::config(&clock));
    let server = start(config).await.unwrap();
    let mut collector = CollectorClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let chunks: Vec<ReportChunk> = reports
        .iter()
        .flat_map(|r| r.to_chunks(200).unwrap())
        .map(|chunk| ReportChunk { chunk })
        .collect();
    collector
        .stream_reports(tokio_stream::iter(chunks))
        .await
        .unwrap();
    let (status, body) = http_get(&server, "/api/incidents/42").await;
    assert_eq!(status, 200, "{body}");
    let incident: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(incident["pingmesh"]["period"], P0, "{body}");
    assert_eq!(incident["pingmesh"]["analysed"], false);
    assert!(incident["pingmesh"]["source"].as_str().is_some(), "{body}");
    // The period is analysed (no results: nothing concerns the victim).
    clock.store((P0 + 1) * PERIOD + PERIOD / 2 + 1, Ordering::SeqCst);
    server
        .pingmesh
        .clone()
        .unwrap()
        .analyse_due()
        .await
        .unwrap();
    let (_, body) = http_get(&server, "/api/incidents/42").await;
    let incident: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(incident["pingmesh"]["analysed"], true);
    let verdict = incident["pingmesh"]["verdict"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        verdict.contains("no RNIC, host or service-network problem"),
        "{verdict}"
    );
    let (status, html) = http_get(&server, "/incidents/42").await;
    assert_eq!(status, 200);
    assert!(html.contains("Where: the pingmesh view") && html.contains(&verdict));
    drop(collector);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
