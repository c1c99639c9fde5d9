//! Tests that need the crate's test hooks (a store that fails, pause points in store appends
//! and diagnoses): the service runs for real, on loopback sockets, on the test's
//! single-threaded runtime, so anything that blocked an async worker would stall the test.

use crate::counters::Counter;
use crate::gate::gate;
use crate::incidents::{IncidentError, IncidentSet, IncidentState};
use crate::{start, RunningServer, ServerConfig};
use hawkmesh_analyzer::testkit::sample_pfc_storm;
use hawkmesh_analyzer::DiagnoseOptions;
use hawkmesh_proto::v1::collector_client::CollectorClient;
use hawkmesh_proto::v1::{IncidentReply, IncidentRequest, ReportChunk, StreamSummary};
use hawkmesh_wire::telemetry::TelemetryReport;
use hawkmesh_wire::topology::FabricTopology;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const EVENT: u64 = 42;

fn storm(event_id: u64) -> (FabricTopology, Vec<TelemetryReport>) {
    let (topology, _, mut reports) = sample_pfc_storm().unwrap();
    for report in &mut reports {
        report.event_id = event_id;
    }
    (topology, reports)
}

/// Every report cut into small chunks, in switch order.
fn chunks(reports: &[TelemetryReport]) -> Vec<Vec<u8>> {
    reports
        .iter()
        .flat_map(|report| report.to_chunks(200).unwrap())
        .collect()
}

fn data_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hawkmesh-unit-{name}-{}", std::process::id()));
    remove(&dir);
    dir
}

/// Removes a test directory; one that does not exist is fine.
fn remove(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            panic!("removing {}: {e}", dir.display())
        }
        _ => {}
    }
}

async fn serve(dir: &Path, topology: &FabricTopology) -> RunningServer {
    start(ServerConfig {
        grpc_addr: "127.0.0.1:0".parse().unwrap(),
        http_addr: "127.0.0.1:0".parse().unwrap(),
        data_dir: dir.to_path_buf(),
        topology: topology.clone(),
        incident_timeout: Duration::from_secs(60),
        options: DiagnoseOptions::default(),
        retention: crate::incidents::Retention::default(),
        limits: crate::incidents::IntakeLimits::default(),
        connections: crate::conn::ConnectionLimits::default(),
        tls: crate::tls::TlsMode::PlaintextLoopback,
        pingmesh: None,
        tuning: None,
    })
    .await
    .unwrap()
}

async fn client(server: &RunningServer) -> CollectorClient<tonic::transport::Channel> {
    CollectorClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap()
}

async fn send(
    server: &RunningServer,
    chunks: Vec<Vec<u8>>,
) -> Result<StreamSummary, tonic::Status> {
    let stream = tokio_stream::iter(chunks.into_iter().map(|chunk| ReportChunk { chunk }));
    Ok(client(server)
        .await
        .stream_reports(stream)
        .await?
        .into_inner())
}

async fn incident(server: &RunningServer, event_id: u64) -> Result<IncidentReply, tonic::Status> {
    Ok(client(server)
        .await
        .get_incident(IncidentRequest { event_id })
        .await?
        .into_inner())
}

async fn http_get(server: &RunningServer, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(server.http_addr)
        .await
        .unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: analyzer\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status, body)
}

#[tokio::test]
async fn a_slow_store_append_does_not_stall_the_service() {
    let (topology, reports) = storm(EVENT);
    let dir = data_dir("slow-store");
    let server = serve(&dir, &topology).await;
    let (gate, mut control) = gate();
    server.incidents.lock().unwrap().store_mut().gate = Some(gate);
    let first = chunks(&reports).remove(0);
    let call = {
        let addr = server.grpc_addr;
        tokio::spawn(async move {
            let mut client = CollectorClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            let stream = tokio_stream::iter([ReportChunk { chunk: first }]);
            client.stream_reports(stream).await
        })
    };
    // The chunk is written and its sync is held up, with the incident set locked.
    control.reached().await;
    assert_eq!(http_get(&server, "/healthz").await, (200, "ok\n".into()));
    let (status, body) = http_get(&server, "/api/counters").await;
    assert_eq!(status, 200);
    assert!(body.contains("\"chunks_accepted\": 0"), "{body}");
    assert!(!call.is_finished(), "acknowledged before its sync");
    control.release();
    let summary = call.await.unwrap().unwrap().into_inner();
    assert_eq!(summary.accepted, 1);
    assert!(
        !control.timed_out(),
        "the service stalled while the store was slow"
    );
    server.stop().await;
    remove(&dir);
}

#[tokio::test]
async fn requests_and_other_streams_are_served_while_an_incident_is_diagnosed() {
    let (topology, reports) = storm(EVENT);
    let dir = data_dir("slow-diagnosis");
    let server = serve(&dir, &topology).await;
    let (gate, mut control) = gate();
    server.incidents.lock().unwrap().diagnosis_gate = Some(gate);
    let all = chunks(&reports);
    let count = all.len();
    let call = {
        let addr = server.grpc_addr;
        tokio::spawn(async move {
            let mut client = CollectorClient::connect(format!("http://{addr}"))
                .await
                .unwrap();
            let stream = tokio_stream::iter(all.into_iter().map(|chunk| ReportChunk { chunk }));
            client.stream_reports(stream).await
        })
    };
    // The last chunk completed the incident; its diagnosis is held up.
    control.reached().await;
    // The incident set is not locked meanwhile: the API answers (the incident reads as
    // collecting until its diagnosis is in), and another agent's chunk is stored.
    let (status, body) = http_get(&server, "/api/incidents/42").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("\"collecting\"") && body.contains(&format!("\"chunks\":{count}")),
        "{body}"
    );
    assert_eq!(incident(&server, EVENT).await.unwrap().state, "collecting");
    let (_, other) = storm(EVENT + 1);
    let summary = send(&server, vec![chunks(&other).remove(0)]).await.unwrap();
    assert_eq!(summary.accepted, 1);
    assert_eq!(http_get(&server, "/").await.0, 200);
    assert!(!call.is_finished(), "acknowledged before the diagnosis");
    control.release();
    let summary = call.await.unwrap().unwrap().into_inner();
    assert_eq!(summary.accepted as usize, count);
    assert!(!control.timed_out(), "a request waited for the diagnosis");
    let reply = incident(&server, EVENT).await.unwrap();
    assert_eq!(reply.state, "complete");
    assert!(reply.diagnosis_json.contains("\"pfc_storm\""));
    assert_eq!(server.counters().incidents_concluded, 1);
    server.stop().await;
    remove(&dir);
}

#[tokio::test]
async fn a_chunk_that_cannot_be_stored_is_unavailable_and_not_acknowledged() {
    let (topology, reports) = storm(EVENT);
    let dir = data_dir("store-failure");
    let all = chunks(&reports);
    let half = all.len() / 2;
    let server = serve(&dir, &topology).await;
    let summary = send(&server, all[..half].to_vec()).await.unwrap();
    assert_eq!(summary.accepted as usize, half);
    server
        .incidents
        .lock()
        .unwrap()
        .store_mut()
        .break_for_test();
    let status = send(&server, all[half..].to_vec()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("not acknowledged"), "{status:?}");
    // The first failure ended the stream: nothing of it was filed.
    let counters = server.counters();
    assert_eq!(counters.store_failures, 1);
    assert_eq!(counters.chunks_accepted as usize, half);
    let (_, body) = http_get(&server, "/api/incidents/42").await;
    assert!(body.contains(&format!("\"chunks\":{half}")), "{body}");
    assert_eq!(incident(&server, EVENT).await.unwrap().state, "collecting");
    server.stop().await;
    // The log is intact: after a restart the agent's resend completes the incident.
    let server = serve(&dir, &topology).await;
    let summary = send(&server, all.clone()).await.unwrap();
    assert_eq!(
        (summary.duplicates as usize, summary.accepted as usize),
        (half, all.len() - half)
    );
    assert_eq!(incident(&server, EVENT).await.unwrap().state, "complete");
    server.stop().await;
    remove(&dir);
}

/// Records the level and message of every event on this thread.
#[derive(Debug, Default, Clone)]
struct Events(Arc<Mutex<Vec<(tracing::Level, String)>>>);

impl Events {
    fn has(&self, level: tracing::Level, message: &str) -> bool {
        self.0
            .lock()
            .unwrap()
            .iter()
            .any(|(l, m)| *l == level && m.contains(message))
    }
}

thread_local! {
    /// The events of the test running on this thread, while it captures.
    static CAPTURING: std::cell::RefCell<Option<Events>> = const { std::cell::RefCell::new(None) };
}

/// The process-wide subscriber of the test binary: hands each event to the capture of the
/// thread that emits it. One global subscriber, installed once, instead of a scoped one per
/// test: tests run in parallel, and a callsite first hit by another test while no scoped
/// subscriber was alive stays cached as "never interested" (tracing's interest cache), which
/// made events of a later capture disappear now and then.
struct ToCapture;

impl tracing::Subscriber for ToCapture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        CAPTURING.with(|current| {
            if let Some(events) = current.borrow().as_ref() {
                tracing::Subscriber::event(events, event);
            }
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs `f` recording the events this thread emits into `events`.
fn capture<R>(events: &Events, f: impl FnOnce() -> R) -> R {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // Another subscriber already installed would also be a bug of the tests.
        tracing::subscriber::set_global_default(ToCapture)
            .expect("the test binary installs one global subscriber");
    });
    // Callsites registered before the global subscriber existed were cached as not
    // interested; recompute them with it in place.
    tracing::callsite::rebuild_interest_cache();
    CAPTURING.with(|current| *current.borrow_mut() = Some(events.clone()));
    let out = f();
    CAPTURING.with(|current| *current.borrow_mut() = None);
    out
}

impl tracing::Subscriber for Events {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Message(String);
        impl tracing::field::Visit for Message {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), message.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn failures_are_returned_logged_and_counted_and_leave_the_incident_collecting() {
    let (topology, reports) = storm(EVENT);
    let dir = data_dir("set-failures");
    let events = Events::default();
    capture(&events, || {
        let mut set = IncidentSet::open(
            &dir,
            topology.clone(),
            DiagnoseOptions::default(),
            Duration::from_millis(1),
        )
        .unwrap();
        let all = chunks(&reports);
        let now = Instant::now();
        set.accept(all[0].clone(), now).unwrap();
        let error = set.accept(all[0][..20].to_vec(), now).unwrap_err();
        assert!(matches!(error, IncidentError::BadChunk(_)), "{error}");
        assert!(events.has(tracing::Level::WARN, "chunk rejected"));
        set.store_mut().break_for_test();
        // A chunk that cannot be stored is not filed.
        let error = set.accept(all[1].clone(), now).unwrap_err();
        assert!(matches!(error, IncidentError::Store(_)), "{error}");
        assert_eq!(set.summary(EVENT).unwrap().chunks, 1);
        // A timeout that cannot be stored is not applied.
        let later = now + Duration::from_secs(1);
        assert!(matches!(set.expire(later), Err(IncidentError::Store(_))));
        assert_eq!(set.summary(EVENT).unwrap().state, IncidentState::Collecting);
        assert!(events.has(tracing::Level::ERROR, "stays collecting"));
        let counters = set.counters();
        assert_eq!(
            [
                Counter::ChunksAccepted,
                Counter::ChunksRejected,
                Counter::StoreFailures,
                Counter::IncidentsConcluded
            ]
            .map(|c| counters.get(c)),
            [1, 1, 2, 0]
        );
    });
    // The log holds the one stored chunk; once it can be written, the timeout concludes.
    let mut set = IncidentSet::open(
        &dir,
        topology.clone(),
        DiagnoseOptions::default(),
        Duration::from_millis(1),
    )
    .unwrap();
    assert_eq!(set.summary(EVENT).unwrap().chunks, 1);
    let events = Events::default();
    capture(&events, || {
        let expired = set.expire(Instant::now() + Duration::from_secs(1)).unwrap();
        assert_eq!(expired, vec![EVENT]);
    });
    assert_eq!(set.summary(EVENT).unwrap().state, IncidentState::TimedOut);
    assert!(events.has(tracing::Level::INFO, "incident concluded"));
    remove(&dir);
}

#[test]
fn a_stored_chunk_that_does_not_decode_is_skipped_counted_and_logged() {
    let (topology, reports) = storm(EVENT);
    let dir = data_dir("replay-skip");
    std::fs::create_dir_all(&dir).unwrap();
    let good = crate::store::to_hex(&chunks(&reports)[0]);
    std::fs::write(
        dir.join("incidents.log"),
        format!(
            "{{\"kind\":\"chunk\",\"hex\":\"zz\"}}\n{{\"kind\":\"chunk\",\"hex\":\"{good}\"}}\n"
        ),
    )
    .unwrap();
    let events = Events::default();
    let set = capture(&events, || {
        IncidentSet::open(
            &dir,
            topology,
            DiagnoseOptions::default(),
            Duration::from_secs(1),
        )
        .unwrap()
    });
    assert_eq!(set.counters().get(Counter::ReplaySkipped), 1);
    assert_eq!(set.summary(EVENT).unwrap().chunks, 1);
    assert!(events.has(tracing::Level::WARN, "skipped on replay"));
    remove(&dir);
}

fn open_set(dir: &Path, topology: &FabricTopology) -> IncidentSet {
    IncidentSet::open(
        dir,
        topology.clone(),
        DiagnoseOptions::default(),
        Duration::from_secs(60),
    )
    .unwrap()
}

#[test]
fn a_resend_with_other_contents_is_refused_and_the_first_copy_kept() {
    let (topology, reports) = storm(EVENT);
    let dir = data_dir("conflict");
    let mut set = open_set(&dir, &topology);
    let first = chunks(&reports).remove(0);
    assert!(matches!(
        set.accept(first.clone(), Instant::now()),
        Ok(crate::incidents::Accepted::New)
    ));
    // The same bytes again: a harmless resend.
    assert!(matches!(
        set.accept(first.clone(), Instant::now()),
        Ok(crate::incidents::Accepted::Duplicate)
    ));
    // Same switch, event and index, other contents (checksum recomputed, so only the
    // conflict can refuse it): refused, loudly, and not stored.
    let mut other = reports[0].clone();
    other.epochs[0].ports[0].packet_count += 1;
    let forged = other.to_chunks(200).unwrap().remove(0);
    assert_ne!(forged, first);
    let error = set.accept(forged, Instant::now()).unwrap_err();
    assert!(error.to_string().contains("conflicts"), "{error}");
    assert_eq!(set.counters().get(Counter::ChunksRejected), 1);
    drop(set);
    let set = open_set(&dir, &topology);
    assert_eq!(
        set.summary(EVENT).unwrap().chunks,
        1,
        "the first copy stays"
    );
    remove(&dir);
}

#[test]
fn retention_drops_old_and_excess_incidents_and_compacts_the_log() {
    let (topology, _) = storm(1);
    let dir = data_dir("retention");
    let mut set = open_set(&dir, &topology);
    // Twenty complete incidents.
    for event in 1..=20u64 {
        let (_, reports) = storm(event);
        for chunk in chunks(&reports) {
            set.accept(chunk, Instant::now()).unwrap();
        }
        assert_eq!(set.summary(event).unwrap().state, IncidentState::Complete);
    }
    let full = set.store_len();
    let per_incident = full / 20;
    // Size: at most about ten incidents' worth; the oldest go first, down to 3/4 of it.
    set.set_retention(crate::incidents::Retention {
        max_age: Duration::from_secs(3600),
        max_bytes: per_incident * 10,
    });
    let now = crate::store::now_ms();
    let dropped = set.retain(now).unwrap();
    assert!(!dropped.is_empty());
    assert_eq!(
        dropped,
        (1..=dropped.len() as u64).collect::<Vec<_>>(),
        "oldest first"
    );
    assert!(set.store_len() <= per_incident * 10 / 4 * 3 + per_incident);
    assert!(set.summary(1).is_none() && set.summary(20).is_some());
    assert_eq!(
        set.counters().get(Counter::IncidentsDropped),
        dropped.len() as u64
    );
    let kept = set.list().len();
    // The compacted log replays to the same incidents.
    drop(set);
    let mut set = open_set(&dir, &topology);
    assert_eq!(set.list().len(), kept);
    assert!(set
        .list()
        .iter()
        .all(|i| i.state == IncidentState::Complete));
    // Age: everything is older than a day, a day from now.
    set.set_retention(crate::incidents::Retention {
        max_age: Duration::from_secs(86_400),
        max_bytes: 1 << 30,
    });
    assert!(
        set.retain(now).unwrap().is_empty(),
        "nothing is a day old yet"
    );
    let dropped = set.retain(now + 86_400_001).unwrap();
    assert_eq!(dropped.len(), kept);
    assert!(set.list().is_empty());
    assert_eq!(set.store_len(), 0);
    remove(&dir);
}

/// A tmpfs of `kib` KiB mounted at a fresh directory, unmounted on drop. Needs root (as CI
/// runs); `HAWKMESH_NO_TMPFS=1` skips the tests that need one, saying so.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(name: &str, kib: u32) -> Option<Tmpfs> {
        if std::env::var_os("HAWKMESH_NO_TMPFS").is_some() {
            eprintln!("HAWKMESH_NO_TMPFS is set: skipping the full-disk test {name}");
            return None;
        }
        let dir = data_dir(name);
        std::fs::create_dir_all(&dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("running mount");
        assert!(
            status.success(),
            "mounting a {kib} KiB tmpfs at {} failed ({status}): the full-disk tests need root \
             (set HAWKMESH_NO_TMPFS=1 to skip them)",
            dir.display()
        );
        Some(Tmpfs(dir))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_full_disk_refuses_chunks_without_damaging_the_store_and_service_resumes_when_freed() {
    let Some(disk) = Tmpfs::mount("enospc", 64) else {
        return;
    };
    let (topology, _) = storm(1);
    let data = disk.0.join("store");
    let filler = disk.0.join("filler");
    let mut set = open_set(&data, &topology);
    // Fill most of the disk with another file, then accept until the disk is full.
    std::fs::write(&filler, vec![0u8; 40 * 1024]).unwrap();
    let mut acknowledged: Vec<Vec<u8>> = Vec::new();
    let mut refused = 0;
    'fill: for event in 1..=200u64 {
        let (_, reports) = storm(event);
        for chunk in chunks(&reports) {
            match set.accept(chunk.clone(), Instant::now()) {
                Ok(_) => acknowledged.push(chunk),
                Err(IncidentError::Store(_)) => {
                    refused += 1;
                    if refused == 5 {
                        break 'fill;
                    }
                }
                Err(other) => panic!("unexpected: {other}"),
            }
        }
    }
    assert!(refused > 0, "the disk never filled");
    assert!(!acknowledged.is_empty());
    assert!(set.counters().get(Counter::StoreFailures) >= refused);
    // Space is freed; the service goes on appending where it stopped.
    std::fs::remove_file(&filler).unwrap();
    let (_, reports) = storm(1000);
    for chunk in chunks(&reports) {
        set.accept(chunk.clone(), Instant::now()).unwrap();
        acknowledged.push(chunk);
    }
    drop(set);
    // Restart: nothing to repair, every acknowledged chunk is there.
    let set = open_set(&data, &topology);
    assert_eq!(set.recovery, crate::incidents::Recovery::default());
    let stored: usize = set.list().iter().map(|i| i.chunks).sum();
    assert_eq!(stored, acknowledged.len());
    assert_eq!(set.summary(1000).unwrap().state, IncidentState::Complete);
}

#[test]
fn intake_limits_bound_what_one_switch_and_all_together_can_open() {
    let (topology, _) = storm(1);
    let dir = data_dir("limits");
    let mut set = open_set(&dir, &topology);
    set.set_limits(crate::incidents::IntakeLimits {
        max_report_bytes: 4096,
        incidents_per_switch_per_s: 10.0,
        incident_burst: 3.0,
        max_collecting: 5,
    });
    // The first chunk of each new event opens an incident: one switch may open a burst
    // of 3, then 10 per second.
    let first_chunk = |event: u64| chunks(&storm(event).1).remove(0);
    let t0 = Instant::now();
    for event in 1..=3 {
        set.accept(first_chunk(event), t0).unwrap();
    }
    let error = set.accept(first_chunk(4), t0).unwrap_err();
    assert!(matches!(error, IncidentError::Busy(_)), "{error}");
    assert!(error.to_string().contains("per second"), "{error}");
    assert_eq!(set.counters().get(Counter::ChunksThrottled), 1);
    // Chunks of incidents already open are never throttled.
    let more = chunks(&storm(1).1);
    set.accept(more[1].clone(), t0).unwrap();
    // 100 ms later one more token; then the incidents collecting at once run out.
    let t1 = t0 + Duration::from_millis(100);
    set.accept(first_chunk(4), t1).unwrap();
    let t2 = t0 + Duration::from_secs(10);
    set.accept(first_chunk(5), t2).unwrap();
    let error = set.accept(first_chunk(6), t2).unwrap_err();
    assert!(error.to_string().contains("collecting"), "{error}");
    // Nothing refused was stored.
    drop(set);
    let set = open_set(&dir, &topology);
    assert_eq!(set.list().len(), 5);
    // A report beyond its size limit is refused for good.
    let mut set = set;
    set.set_limits(crate::incidents::IntakeLimits {
        max_report_bytes: 100,
        ..crate::incidents::IntakeLimits::default()
    });
    let error = set.accept(more[2].clone(), t2).unwrap_err();
    assert!(
        matches!(error, IncidentError::BadChunk(ref reason) if reason.contains("limit")),
        "{error}"
    );
    remove(&dir);
}
