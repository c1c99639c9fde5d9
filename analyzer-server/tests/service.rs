//! The analyzer as a service: real gRPC and HTTP over loopback, a real store on disk.

use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_analyzer_server::{start, RunningServer, ServerConfig};
use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::{IncidentReply, IncidentRequest, ReportChunk};
use hawkmesh_wire::telemetry::TelemetryReport;
use hawkmesh_wire::topology::FabricTopology;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;
use common::http_get;
const EVENT: u64 = 42;

/// h0 and h3 on tor0, h7 on tor1, both tors under agg0; h7 storms (see the CLI test).
fn storm() -> (FabricTopology, Vec<TelemetryReport>) {
    let (topology, _, mut reports) = sample_pfc_storm().unwrap();
    for report in &mut reports {
        report.event_id = EVENT;
    }
    (topology, reports)
}

/// Every report cut into small chunks (several per switch), in switch order.
fn chunks(reports: &[TelemetryReport]) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    for report in reports {
        for chunk in report.to_chunks(200).unwrap() {
            out.push((report.switch, chunk));
        }
    }
    out
}

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn serve(dir: &Path, topology: &FabricTopology, timeout_ms: u64) -> RunningServer {
    start(ServerConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        topology: topology.clone(),
        incident_timeout: Duration::from_millis(timeout_ms),
        options: DiagnoseOptions::default(),
        retention: hawkmesh_analyzer_server::incidents::Retention::default(),
        limits: hawkmesh_analyzer_server::incidents::IntakeLimits::default(),
        connections: hawkmesh_analyzer_server::conn::ConnectionLimits::default(),
        tls: hawkmesh_analyzer_server::tls::TlsMode::PlaintextLoopback,
        pingmesh: None,
        tuning: None,
    })
    .await
    .unwrap()
}

async fn send(
    server: &RunningServer,
    chunks: &[(u32, Vec<u8>)],
) -> hawkmesh_proto::v1::StreamSummary {
    let mut client = CollectorClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let messages: Vec<ReportChunk> = chunks
        .iter()
        .map(|(_, bytes)| ReportChunk {
            chunk: bytes.clone(),
        })
        .collect();
    client
        .stream_reports(tokio_stream::iter(messages))
        .await
        .unwrap()
        .into_inner()
}

async fn incident(server: &RunningServer) -> IncidentReply {
    let mut client = CollectorClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    client
        .get_incident(IncidentRequest { event_id: EVENT })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn reports_streamed_over_grpc_become_a_diagnosed_incident_served_over_http() {
    let (topology, reports) = storm();
    let dir = data_dir("happy");
    let server = serve(&dir, &topology, 5_000).await;
    let all = chunks(&reports);
    assert!(
        all.len() > reports.len(),
        "reports must span several chunks"
    );
    let summary = send(&server, &all).await;
    assert_eq!(summary.accepted as usize, all.len());
    assert!(summary.rejected.is_empty(), "{:?}", summary.rejected);
    let reply = incident(&server).await;
    assert_eq!(reply.state, "complete");
    assert_eq!(reply.reported_switches, vec![0, 1, 2]);
    assert!(reply.missing_switches.is_empty());
    assert!(
        reply.diagnosis_json.contains("\"pfc_storm\""),
        "{}",
        reply.diagnosis_json
    );
    let (status, body) = http_get(&server, "/api/incidents/42").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("pfc_storm") && body.contains("\"complete\""),
        "{body}"
    );
    let (status, body) = http_get(&server, "/incidents/42").await;
    assert_eq!(status, 200);
    assert!(body.contains("<svg"));
    assert_eq!(http_get(&server, "/api/incidents/7").await.0, 404);
    assert_eq!(http_get(&server, "/api/incidents/x").await.0, 400);
    let (status, list) = http_get(&server, "/api/incidents").await;
    assert_eq!(status, 200);
    assert!(list.contains("\"event_id\": 42"));
    let page: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(page["total"], 1);
    assert!(page["next"].is_null(), "one incident fits one page");
    // A page of one names the next; the next page after the last incident is empty.
    let (_, list) = http_get(&server, "/api/incidents?limit=1").await;
    let page: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(page["next"], "/api/incidents?after=42&limit=1");
    let (_, list) = http_get(&server, "/api/incidents?after=42&limit=1").await;
    let page: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(page["incidents"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        http_get(&server, "/api/incidents?limit=100000").await.0,
        400
    );
    assert_eq!(http_get(&server, "/api/incidents?after=x").await.0, 400);
    let (status, index) = http_get(&server, "/").await;
    assert_eq!(status, 200);
    assert!(
        index.contains("href=\"/incidents/42\"") && index.contains("PFC storm"),
        "{index}"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_cut_stream_and_duplicates_lose_nothing_and_count_nothing_twice() {
    let (topology, reports) = storm();
    let dir = data_dir("cut");
    let server = serve(&dir, &topology, 5_000).await;
    let all = chunks(&reports);
    let half = all.len() / 2;
    // The agent's connection breaks after half the chunks: the client task is killed while
    // its stream is still open.
    let (tx, rx) = tokio::sync::mpsc::channel::<ReportChunk>(all.len());
    let addr = server.grpc_addr;
    let call = tokio::spawn(async move {
        let mut client = CollectorClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        client
            .stream_reports(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
    });
    for (_, bytes) in &all[..half] {
        tx.send(ReportChunk {
            chunk: bytes.clone(),
        })
        .await
        .unwrap();
    }
    for _ in 0..200 {
        let stored = server
            .incidents
            .lock()
            .unwrap()
            .summary(EVENT)
            .map(|s| s.chunks);
        if stored == Some(half) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    call.abort();
    drop(tx);
    assert_eq!(incident(&server).await.state, "collecting");
    // The agent retries from the start: the first half are duplicates.
    let summary = send(&server, &all).await;
    assert_eq!(summary.duplicates as usize, half);
    assert_eq!(summary.accepted as usize, all.len() - half);
    // And a third, fully duplicated stream changes nothing.
    let again = send(&server, &all).await;
    assert_eq!((again.accepted, again.duplicates as usize), (0, all.len()));
    assert_eq!(incident(&server).await.state, "complete");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_analyzer_restart_mid_incident_keeps_what_was_received() {
    let (topology, reports) = storm();
    let dir = data_dir("restart");
    let all = chunks(&reports);
    let half = all.len() / 2;
    let server = serve(&dir, &topology, 5_000).await;
    send(&server, &all[..half]).await;
    server.stop().await;
    let server = serve(&dir, &topology, 5_000).await;
    assert_eq!(incident(&server).await.state, "collecting");
    let summary = send(&server, &all[half..]).await;
    assert_eq!(summary.accepted as usize, all.len() - half);
    let before = incident(&server).await;
    assert_eq!(before.state, "complete");
    server.stop().await;
    // The diagnosis is the same after another restart.
    let server = serve(&dir, &topology, 5_000).await;
    let after = incident(&server).await;
    assert_eq!(after.state, "complete");
    assert_eq!(after.diagnosis_json, before.diagnosis_json);
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_switch_that_never_answers_times_out_into_an_explicitly_incomplete_incident() {
    let (topology, reports) = storm();
    let dir = data_dir("silent");
    let server = serve(&dir, &topology, 200).await;
    // tor1 (switch 1), where the storm is, never reports.
    let partial: Vec<_> = chunks(&reports)
        .into_iter()
        .filter(|(s, _)| *s != 1)
        .collect();
    send(&server, &partial).await;
    assert_eq!(incident(&server).await.state, "collecting");
    let mut reply = incident(&server).await;
    for _ in 0..100 {
        if reply.state != "collecting" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        reply = incident(&server).await;
    }
    assert_eq!(reply.state, "timed_out");
    assert_eq!(reply.missing_switches, vec![1]);
    assert!(
        !reply.diagnosis_json.contains("\"pfc_storm\""),
        "no guessed root cause"
    );
    assert!(
        reply.diagnosis_json.contains("polled_switch_missing")
            || reply.diagnosis_json.contains("unresolved_pfc"),
        "{}",
        reply.diagnosis_json
    );
    server.stop().await;
    // The timeout is durable too.
    let server = serve(&dir, &topology, 200).await;
    assert_eq!(incident(&server).await.state, "timed_out");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn malformed_chunks_are_rejected_with_a_reason_and_the_stream_continues() {
    let (topology, reports) = storm();
    let dir = data_dir("bad");
    let server = serve(&dir, &topology, 5_000).await;
    let mut all = chunks(&reports);
    let mut truncated = all[0].1.clone();
    truncated.truncate(20);
    let mut lying = all[1].1.clone();
    lying.push(0);
    let mut stranger = all[2].1.clone();
    stranger[8..12].copy_from_slice(&99u32.to_be_bytes());
    all.insert(0, (0, truncated));
    all.insert(0, (0, lying));
    all.insert(0, (0, stranger));
    let summary = send(&server, &all).await;
    assert_eq!(summary.rejected.len(), 3, "{:?}", summary.rejected);
    assert!(
        summary.rejected.iter().any(|r| r.contains("99")),
        "{:?}",
        summary.rejected
    );
    assert_eq!(summary.accepted as usize, all.len() - 3);
    assert_eq!(incident(&server).await.state, "complete");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn unknown_incidents_are_not_found_and_malformed_ids_are_bad_requests() {
    let (topology, reports) = storm();
    let dir = data_dir("statuses");
    let server = serve(&dir, &topology, 5_000).await;
    let mut client = CollectorClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let status = client
        .get_incident(IncidentRequest { event_id: EVENT })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    assert!(status.message().contains("42"), "{status:?}");
    for path in ["/api/incidents/42", "/incidents/42"] {
        assert_eq!(http_get(&server, path).await.0, 404, "{path}");
    }
    for id in ["x", "-1", "18446744073709551616", "4%202"] {
        for prefix in ["/api/incidents/", "/incidents/"] {
            let (status, body) = http_get(&server, &format!("{prefix}{id}")).await;
            assert_eq!(status, 400, "{prefix}{id}: {body}");
        }
    }
    // Half the chunks: the incident exists and is collecting.
    let all = chunks(&reports);
    send(&server, &all[..all.len() / 2]).await;
    assert_eq!(incident(&server).await.state, "collecting");
    assert_eq!(http_get(&server, "/api/incidents/42").await.0, 200);
    assert_eq!(http_get(&server, "/incidents/42").await.0, 202);
    let (status, body) = http_get(&server, "/api/counters").await;
    assert_eq!(status, 200);
    assert!(
        body.contains(&format!("\"chunks_accepted\": {}", all.len() / 2)),
        "{body}"
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
