//! The service under a flood, in a process of its own (so its memory is the service's):
//! hundreds of idle connections from one peer and a switch opening incidents as fast as it
//! can, while a well-behaved agent and an operator use it from elsewhere. Bounded time: the
//! flood lasts about a second.

use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_analyzer_server::conn::ConnectionLimits;
use hawkmesh_analyzer_server::incidents::{IntakeLimits, Retention};
use hawkmesh_analyzer_server::{start, ServerConfig};
use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::{IncidentRequest, ReportChunk};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Resident memory of this process, KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// A connection from `source` (another loopback address: another peer).
async fn connect_from(source: [u8; 4], to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((source, 0)))?;
    socket.connect(to).await
}

/// Whether the server has closed `stream` (EOF or reset) within `wait`; what it sends
/// before (an HTTP/2 server's SETTINGS) is read and ignored.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buffer = [0u8; 256];
    let closed = async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    };
    tokio::time::timeout(wait, closed).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_idle_connections_and_incidents_leaves_others_served_in_bounded_memory() {
    let (topology, _, reports) = sample_pfc_storm().unwrap();
    let dir = std::env::temp_dir().join(format!("hawkmesh-flood-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = start(ServerConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.clone(),
        topology: topology.clone(),
        incident_timeout: Duration::from_millis(200),
        options: DiagnoseOptions::default(),
        retention: Retention::default(),
        limits: IntakeLimits {
            incidents_per_switch_per_s: 50.0,
            incident_burst: 50.0,
            ..IntakeLimits::default()
        },
        connections: ConnectionLimits {
            max_connections: 256,
            max_per_peer: 32,
            idle_timeout: Duration::from_millis(500),
        },
        tls: hawkmesh_analyzer_server::tls::TlsMode::PlaintextLoopback,
        pingmesh: None,
        tuning: None,
    })
    .await
    .unwrap();
    let before = rss_kib();

    // 1. 300 idle TCP connections to each listener from 127.0.0.2.
    let mut idle = Vec::new();
    for _ in 0..300 {
        for addr in [server.grpc_addr, server.http_addr] {
            if let Ok(stream) = connect_from([127, 0, 0, 2], addr).await {
                idle.push(stream);
            }
        }
    }
    // 2. One switch opens incidents as fast as it can (chunk 0 of event after event).
    let first = reports[0].clone();
    let flooder = {
        let addr = server.grpc_addr;
        tokio::spawn(async move {
            let mut client = CollectorClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            let mut refused = 0u32;
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut event = 1_000u64;
            while Instant::now() < deadline {
                let batch: Vec<ReportChunk> = (0..50)
                    .map(|_| {
                        event += 1;
                        let mut report = first.clone();
                        report.event_id = event;
                        ReportChunk {
                            chunk: report.to_chunks(200).unwrap().remove(0),
                        }
                    })
                    .collect();
                if let Err(status) = client.stream_reports(tokio_stream::iter(batch)).await {
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                    refused += 1;
                }
            }
            refused
        })
    };

    // 3. Meanwhile a well-behaved agent (another switch) reports a whole incident, and an
    //    operator reads it, from 127.0.0.1: both served, promptly.
    let started = Instant::now();
    let mut agent = CollectorClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let mut own: Vec<ReportChunk> = Vec::new();
    for report in &reports {
        let mut report = report.clone();
        report.event_id = 7;
        for chunk in report.to_chunks(200).unwrap() {
            own.push(ReportChunk { chunk });
        }
    }
    let summary = agent
        .stream_reports(tokio_stream::iter(own))
        .await
        .expect("the well-behaved agent is served")
        .into_inner();
    assert!(summary.rejected.is_empty(), "{:?}", summary.rejected);
    let reply = agent
        .get_incident(IncidentRequest { event_id: 7 })
        .await
        .expect("its incident is there")
        .into_inner();
    assert_eq!(reply.state, "complete");
    let mut http = TcpStream::connect(server.http_addr).await.unwrap();
    http.write_all(b"GET /api/incidents?limit=10 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut response = String::new();
    http.read_to_string(&mut response).await.unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let latency = started.elapsed();
    assert!(
        latency < Duration::from_secs(5),
        "the well-behaved clients waited {latency:?}"
    );

    let refused_batches = flooder.await.unwrap();
    assert!(
        refused_batches > 0,
        "the flooding switch was never throttled"
    );
    let counters = server.counters();
    // Per peer 32 per listener: everything above was closed on accept.
    assert!(
        counters.connections_refused >= 2 * (300 - 32),
        "{counters:?}"
    );
    assert!(counters.chunks_throttled > 0, "{counters:?}");
    // Incidents opened by the flooding switch: its burst plus its rate over the flood.
    let opened = server.incidents.lock().unwrap().list().len();
    assert!(opened <= 1 + 50 + 50 * 3, "{opened} incidents opened");

    // 4. Idle connections are closed after the idle timeout.
    let mut closed = 0;
    for stream in idle.iter_mut().take(20) {
        if closed_within(stream, Duration::from_secs(3)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 20, "idle connections must be closed by the server");

    // 5. Memory stayed bounded.
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    assert!(grown_mib < 64, "resident memory grew by {grown_mib} MiB");
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
