//! `hawkmesh analyzer serve` killed with SIGKILL while agents stream to it: started again on
//! the same store it opens (repairing what the kill left), and every incident whose chunks
//! were acknowledged is there, complete.

use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::{IncidentRequest, ReportChunk};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tonic::transport::Channel;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-kill-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts the analyzer; returns it and its gRPC address (read from its first line).
fn serve(topology: &Path, data: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hawkmesh"))
        .args(["analyzer", "serve", "--plaintext", "--grpc", "127.0.0.1:0"])
        .args(["--http", "127.0.0.1:0", "--timeout-ms", "60000"])
        .arg("--topology")
        .arg(topology)
        .arg("--data")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the analyzer");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    // "analyzer: gRPC (plaintext, loopback) on 127.0.0.1:PORT, HTTP on ..."
    let addr = line
        .split(" on ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (child, addr)
}

/// Every acknowledged incident is there, complete.
async fn assert_complete(client: &mut CollectorClient<Channel>, acknowledged: &[u64], when: &str) {
    for event_id in acknowledged {
        let reply = client
            .get_incident(IncidentRequest {
                event_id: *event_id,
            })
            .await
            .unwrap_or_else(|s| panic!("{when}: incident {event_id}: {s}"))
            .into_inner();
        assert_eq!(reply.state, "complete", "{when}: incident {event_id}");
    }
}

#[test]
fn an_analyzer_killed_mid_stream_restarts_with_every_acknowledged_incident() {
    let dir = scratch("mid-stream");
    let (topology, _, reports) = hawkmesh_analyzer::testkit::sample_pfc_storm().unwrap();
    let topology_path = dir.join("topology.json");
    std::fs::write(&topology_path, serde_json::to_string(&topology).unwrap()).unwrap();
    let data = dir.join("store");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let mut acknowledged: Vec<u64> = Vec::new();
    for round in 0..3u64 {
        let (mut child, addr) = serve(&topology_path, &data);
        runtime.block_on(async {
            let mut client = CollectorClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            // Everything acknowledged before this start is there, complete.
            assert_complete(&mut client, &acknowledged, &format!("round {round}")).await;
            // Stream incidents until the kill; each whole stream answered is acknowledged.
            let killer = {
                let pid = child.id();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(150 + 70 * round)).await;
                    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
                })
            };
            for n in 0.. {
                let event_id = 1000 * (round + 1) + n;
                let chunks: Vec<ReportChunk> = reports
                    .iter()
                    .flat_map(|report| {
                        let mut report = report.clone();
                        report.event_id = event_id;
                        report.to_chunks(200).unwrap()
                    })
                    .map(|chunk| ReportChunk { chunk })
                    .collect();
                match client.stream_reports(tokio_stream::iter(chunks)).await {
                    Ok(_) => acknowledged.push(event_id),
                    Err(_) => break,
                }
            }
            killer.await.unwrap();
        });
        let _ = child.wait();
    }
    assert!(
        acknowledged.len() > 3,
        "{} incidents acknowledged",
        acknowledged.len()
    );
    // After the last kill too.
    let (mut child, addr) = serve(&topology_path, &data);
    runtime.block_on(async {
        let mut client = CollectorClient::connect(format!("http://{addr}"))
            .await
            .unwrap();
        assert_complete(&mut client, &acknowledged, "after the last kill").await;
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}
