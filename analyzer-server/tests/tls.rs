//! Mutual TLS on a real socket: agents with certificates from the fabric's CA report for
//! their own switch only; a client without a certificate, or with one from another CA, is
//! refused at the handshake.

use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_analyzer_server::conn::ConnectionLimits;
use hawkmesh_analyzer_server::incidents::{IntakeLimits, Retention};
use hawkmesh_analyzer_server::tls::{client_config, Pki, TlsMode};
use hawkmesh_analyzer_server::{start, RunningServer, ServerConfig};
use hawkmesh_proto::v1 as pb;
use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::pingmesh_controller_client::PingmeshControllerClient;
use hawkmesh_proto::v1::{IncidentRequest, ReportChunk, StreamSummary};
use hawkmesh_wire::telemetry::TelemetryReport;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, ClientTlsConfig};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

async fn serve(dir: &Path, pki: &Pki) -> RunningServer {
    let (topology, _, _) = sample_pfc_storm().unwrap();
    let tuning = hawkmesh_analyzer_server::tuning_service::TuningConfig::for_fabric(&topology);
    start(ServerConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.join("store"),
        topology,
        incident_timeout: Duration::from_secs(60),
        options: DiagnoseOptions::default(),
        retention: Retention::default(),
        limits: IntakeLimits::default(),
        connections: ConnectionLimits::default(),
        tls: TlsMode::Mutual {
            cert: pki.cert_path("analyzer"),
            key: pki.key_path("analyzer"),
            client_ca: pki.cert_path("ca"),
        },
        pingmesh: Some(Default::default()),
        tuning: Some(tuning),
    })
    .await
    .unwrap()
}

async fn client(
    server: &RunningServer,
    tls: ClientTlsConfig,
) -> Result<CollectorClient<Channel>, tonic::transport::Error> {
    let channel = Channel::from_shared(format!("https://{}", server.grpc_addr))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(CollectorClient::new(channel))
}

fn agent(pki: &Pki, name: &str) -> ClientTlsConfig {
    client_config(
        &pki.cert_path("ca"),
        &pki.cert_path(name),
        &pki.key_path(name),
        "localhost",
    )
    .unwrap()
}

async fn send(
    client: &mut CollectorClient<Channel>,
    report: &TelemetryReport,
) -> Result<StreamSummary, tonic::Status> {
    let chunks: Vec<ReportChunk> = report
        .to_chunks(200)
        .unwrap()
        .into_iter()
        .map(|chunk| ReportChunk { chunk })
        .collect();
    Ok(client
        .stream_reports(tokio_stream::iter(chunks))
        .await?
        .into_inner())
}

#[tokio::test]
async fn agents_report_over_mutual_tls_for_their_own_switch_only() {
    let dir = scratch("mutual");
    let pki = Pki::create(&dir.join("pki"), "fabric CA").unwrap();
    pki.issue("analyzer", &["localhost".into(), "127.0.0.1".into()])
        .unwrap();
    let (topology, _, reports) = sample_pfc_storm().unwrap();
    let name = |switch: u32| topology.nodes[switch as usize].name.clone();
    for report in &reports {
        pki.issue(&name(report.switch), &[]).unwrap();
    }
    let server = serve(&dir, &pki).await;

    // Each switch's agent sends its own report: accepted, and the incident completes.
    for report in &reports {
        let mut agent_client = client(&server, agent(&pki, &name(report.switch)))
            .await
            .expect("an agent with a certificate of the fabric's CA connects");
        let summary = send(&mut agent_client, report).await.unwrap();
        assert!(summary.rejected.is_empty(), "{:?}", summary.rejected);
        assert!(summary.accepted > 0);
    }
    let mut reader = client(&server, agent(&pki, &name(reports[0].switch)))
        .await
        .unwrap();
    let reply = reader
        .get_incident(IncidentRequest {
            event_id: reports[0].event_id,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.state, "complete");

    // An agent reporting for another switch: every chunk refused, naming both.
    let mut forged = reports[1].clone();
    forged.event_id += 1;
    let summary = send(&mut reader, &forged).await.unwrap();
    assert_eq!(summary.accepted, 0);
    assert!(
        summary
            .rejected
            .iter()
            .all(|r| r.contains("its own switch")),
        "{:?}",
        summary.rejected
    );

    // No client certificate: the handshake fails, nothing is served.
    let anonymous = ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(
            std::fs::read(pki.cert_path("ca")).unwrap(),
        ))
        .domain_name("localhost");
    let refused = match client(&server, anonymous).await {
        Err(_) => true,
        Ok(mut c) => send(&mut c, &reports[0]).await.is_err(),
    };
    assert!(refused, "a client without a certificate must be refused");

    // A certificate from another CA: refused too.
    let other = Pki::create(&dir.join("other"), "someone else").unwrap();
    other.issue(&name(reports[0].switch), &[]).unwrap();
    let stranger = client_config(
        &pki.cert_path("ca"),
        &other.cert_path(&name(reports[0].switch)),
        &other.key_path(&name(reports[0].switch)),
        "localhost",
    )
    .unwrap();
    let refused = match client(&server, stranger).await {
        Err(_) => true,
        Ok(mut c) => send(&mut c, &forged).await.is_err(),
    };
    assert!(refused, "a certificate of another CA must be refused");

    // A host agent registers its own RNICs, and may not speak for another host.
    let hosts: Vec<_> = topology
        .nodes
        .iter()
        .filter(|n| n.kind == hawkmesh_wire::topology::NodeKind::Host)
        .collect();
    let registration = |host: &hawkmesh_wire::topology::NodeDesc| {
        let nic = topology
            .links
            .iter()
            .find_map(|l| {
                [l.a, l.b]
                    .into_iter()
                    .find(|p| p.node == host.id)
                    .map(|p| p.port)
            })
            .unwrap();
        let ip = host.ipv4.unwrap();
        pb::RegisterRequest {
            host: host.name.clone(),
            incarnation: 1,
            rnics: vec![pb::RnicInfo {
                nic: u32::from(nic),
                gid: vec![0; 16],
                ip: std::net::Ipv4Addr::from([ip[0], ip[1], ip[2], ip[3] + nic as u8]).to_string(),
                qpn: 77,
            }],
        }
    };
    pki.issue(&hosts[0].name, &[]).unwrap();
    let channel = Channel::from_shared(format!("https://{}", server.grpc_addr))
        .unwrap()
        .tls_config(agent(&pki, &hosts[0].name))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut host_agent = PingmeshControllerClient::new(channel.clone());
    // The tuning controller holds devices to their certificates too.
    let mut tuning =
        hawkmesh_proto::v1::tuning_controller_client::TuningControllerClient::new(channel);
    let ask = |device: &str| pb::SettingRequest {
        device: device.to_string(),
    };
    let denied = tuning.get_setting(ask(&hosts[1].name)).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert_eq!(
        tuning
            .get_setting(ask(&hosts[0].name))
            .await
            .unwrap()
            .into_inner()
            .version,
        1
    );
    host_agent.register(registration(hosts[0])).await.unwrap();
    let denied = host_agent
        .register(registration(hosts[1]))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    assert!(denied.message().contains(&hosts[1].name), "{denied:?}");
    // Uploads too (their bytes go to the controller undecoded by tonic: the host is read
    // from them for the check).
    let upload = |host: &str| pb::ResultBatch {
        host: host.to_string(),
        incarnation: 1,
        batch_seq: 1,
        ..pb::ResultBatch::default()
    };
    let denied = host_agent
        .upload_results(upload(&hosts[1].name))
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied:?}");
    let own = host_agent
        .upload_results(upload(&hosts[0].name))
        .await
        .unwrap()
        .into_inner();
    assert!(!own.duplicate, "{own:?}");
    let again = host_agent
        .upload_results(upload(&hosts[0].name))
        .await
        .unwrap()
        .into_inner();
    assert!(again.duplicate, "{again:?}");
    drop(host_agent);
    let counters = server.counters();
    assert_eq!(
        counters.chunks_rejected as usize,
        forged.to_chunks(200).unwrap().len()
    );
    server.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn plaintext_is_refused_off_loopback() {
    let dir = scratch("plain");
    let (topology, _, _) = sample_pfc_storm().unwrap();
    let error = start(ServerConfig {
        grpc_addr: "0.0.0.0:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.clone(),
        topology,
        incident_timeout: Duration::from_secs(1),
        options: DiagnoseOptions::default(),
        retention: Retention::default(),
        limits: IntakeLimits::default(),
        connections: ConnectionLimits::default(),
        tls: TlsMode::PlaintextLoopback,
        pingmesh: None,
        tuning: None,
    })
    .await
    .expect_err("plaintext on every address");
    assert!(error.to_string().contains("loopback"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}
