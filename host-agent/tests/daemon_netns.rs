//! `hawkmesh host-agent` as it runs on hosts: real daemons, each in its own network
//! namespace (a host), probing each other over veth with the kernel-UDP transport, against
//! the real analyzer service (its pingmesh controller, real gRPC with mutual TLS over a
//! management network: a bridge in a namespace of its own).
//!
//! Each daemon runs on a thread that entered its host's namespace before the daemon made
//! its runtime and threads (they inherit it). Everything the tests create is removed when
//! they end, failed or not (daemons stopped, namespaces with their interfaces and nftables
//! rules deleted, temporary directories removed). Root, iproute2 (`ip`, `tc`) and nftables (`nft`)
//! are needed; the five tests take about 36 s together.
//!
//! - Two hosts on one veth: uploads, a known added delay kept out of the network RTT to the
//!   µs, an analyzer restart, an agent restart.
//! - An analyzer that lost its data: the daemon registers again (FAILED_PRECONDITION).
//! - Service tracing of a listed connection, and the HAWKEYE polling packet it sends when
//!   the connection's path queues (a token-bucket shaper, `tc`).
//! - A routed fabric (four ToRs, two spines, Linux routers hashing the 5-tuple): path
//!   tracing keeps the probe's 5-tuple.
//! - The same fabric with a daemon per host: the analyzer blames a lossy link, marks a busy
//!   responder's delay (not the network), filters an agent restart, flags a downed RNIC.

#![cfg(target_os = "linux")]

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hawkmesh_analyzer_server::pingmesh::{PeriodView, PingmeshConfig};
use hawkmesh_analyzer_server::tls::Pki;
use hawkmesh_host_agent::daemon::{self, DaemonConfig, DaemonError, DaemonSummary, Hooks};
use hawkmesh_pingmesh::analysis::AnalysisConfig;
use hawkmesh_wire::topology::{FabricTopology, NodeKind};
use support::daemon_lab::{
    agent_toml, analyzer_config, attach_management, management, metric, pki, scrape, try_scrape,
    wait_for, Analyzer, FabricBuilder, TempDir,
};
use support::{serial, Netns};

/// The analysis period of these labs (the paper's is 20 s).
const PERIOD_NS: u64 = 2_000_000_000;
/// The agents' well-known port.
const PORT: u16 = 47_920;

/// The analyzer of the two-host lab: 2-s periods, the agents' short intervals.
fn lab_pingmesh() -> PingmeshConfig {
    PingmeshConfig {
        // Over veth a network RTT is some hundred ns to a few µs, set by the kernel's
        // scheduling: a multiple of the period's median is noise there, not congestion.
        // The absolute bound (1 ms) stays.
        analysis: AnalysisConfig {
            high_rtt_factor: 0.0,
            ..AnalysisConfig::default()
        },
        period_ns: PERIOD_NS,
        grace_ns: PERIOD_NS / 2,
        upload_interval_ms: 500,
        pinglist_refresh_ms: 1_000,
        probe_timeout_ms: 200,
        ..PingmeshConfig::default()
    }
}

/// A host's daemon configuration: its interfaces (NIC, address, id), the lab's short
/// intervals, TLS to the analyzer, metrics on the namespace's loopback.
fn daemon_config(
    host: &str,
    state: &Path,
    pki: &Pki,
    interfaces: &[(u32, &str, u32)],
    extra: &str,
) -> DaemonConfig {
    let sections = format!(
        "[probing]\nport = {PORT}\ntimeout_ms = 200\npinglist_refresh_ms = 1000\n\
         [upload]\ninterval_ms = 500\nmax_backoff_ms = 400\ndrain_ms = 10000\n\
         [metrics]\nlisten = \"127.0.0.1:9464\"\n{extra}"
    );
    let text = agent_toml(host, state, pki, interfaces, &sections);
    DaemonConfig::parse(&text, &format!("{host}.toml")).expect("a valid configuration")
}

/// A daemon running in `ns` until its stop flag is set (stopped when dropped too: a failed
/// test leaves no daemon behind).
struct Running {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<DaemonSummary, DaemonError>>>,
}

fn start_daemon(ns: &Netns, config: DaemonConfig) -> Running {
    start_daemon_with(ns, config, Hooks::default())
}

fn start_daemon_with(ns: &Netns, config: DaemonConfig, hooks: Hooks) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = ns.spawn(move || daemon::run_with(&config, flag, hooks));
    Running {
        stop,
        thread: Some(thread),
    }
}

impl Running {
    fn stop(mut self) -> DaemonSummary {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .expect("a running daemon")
            .join()
            .expect("the daemon's thread")
            .expect("the daemon ran")
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The analyzer's period reports hold `n` results in all (analysed or late).
fn stored_results(periods: &[PeriodView]) -> u64 {
    periods.iter().map(|p| p.results + p.late_results).sum()
}

/// Two hosts under one ToR (the veth between them stands for it): the daemons register,
/// probe each other and upload; the period reports have their probes, answered, on kernel
/// timestamps. The analyzer is stopped in the middle and started again on the same data
/// directory: the daemons keep their batches meanwhile and deliver them when it is back,
/// and every acknowledged result is in the reports once. A daemon restarted on its state
/// directory registers the next incarnation. Stopped daemons deliver everything.
#[test]
fn daemons_upload_through_an_analyzer_restart_and_a_restart_takes_the_next_incarnation() {
    let _serial = serial();
    let started = Instant::now();
    let dirs = TempDir::new("daemon-lab");
    let mut fabric = FabricBuilder::new();
    let tor = fabric.node("tor0", NodeKind::Switch, Some(0), None);
    let h0 = fabric.node("h0", NodeKind::Host, None, Some([10, 0, 0, 1]));
    let h1 = fabric.node("h1", NodeKind::Host, None, Some([10, 0, 1, 1]));
    fabric.link((h0, 0), (tor, 0));
    fabric.link((h1, 0), (tor, 1));
    let topology = fabric.build();

    let mgmt = Netns::add("mgmt");
    let a = Netns::add("h0");
    let b = Netns::add("h1");
    management(&mgmt);
    attach_management(&mgmt, &a, 0);
    attach_management(&mgmt, &b, 1);
    a.ip(&[
        "link", "add", "nic0", "type", "veth", "peer", "name", "nic0", "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "10.0.0.1/16", "dev", "nic0"]);
    b.ip(&["addr", "add", "10.0.1.1/16", "dev", "nic0"]);
    a.ip(&["link", "set", "nic0", "up"]);
    b.ip(&["link", "set", "nic0", "up"]);

    let pki = pki(&dirs.path().join("pki"), &["h0", "h1"]);
    let mut analyzer = Analyzer::start(
        &mgmt,
        analyzer_config(
            topology,
            &dirs.path().join("analyzer"),
            &pki,
            lab_pingmesh(),
        ),
    );
    let config_a = daemon_config(
        "h0",
        &dirs.path().join("h0"),
        &pki,
        &[(0, "10.0.0.1", 0xa01)],
        "",
    );
    let config_b = daemon_config(
        "h1",
        &dirs.path().join("h1"),
        &pki,
        &[(0, "10.0.1.1", 0xb01)],
        "",
    );
    // h0's results, for the RTT's precision; h1's ACK hold, the known added delay.
    let (tap, results) = std::sync::mpsc::sync_channel(100_000);
    let hold = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let daemon_a = start_daemon_with(
        &a,
        config_a,
        Hooks {
            results: Some(tap),
            ..Hooks::default()
        },
    );
    let daemon_b = start_daemon_with(
        &b,
        config_b.clone(),
        Hooks {
            ack_hold_us: Some(hold.clone()),
            ..Hooks::default()
        },
    );

    // A period with both hosts' probes, answered.
    wait_for(
        Duration::from_secs(12),
        "a period report with answered probes",
        || {
            analyzer
                .periods()
                .iter()
                .any(|p| p.cluster.network_rtt.count >= 10)
        },
    );
    let report = analyzer
        .periods()
        .into_iter()
        .find(|p| p.cluster.network_rtt.count >= 10)
        .expect("a report");
    assert!(report.problems.is_empty(), "{report:?}");
    assert!(report.timeouts.is_empty(), "{report:?}");
    let rtt = report.cluster.network_rtt;
    assert!(
        rtt.p50 > 0 && rtt.p99 < 1_000_000,
        "network RTT over veth: {rtt:?}"
    );
    let metrics = scrape(&a);
    let sent = metric(
        &metrics,
        "hawkmesh_host_probes_sent_total{host=\"h0\",nic=\"0\"}",
    );
    let answered = metric(
        &metrics,
        "hawkmesh_host_probes_answered_total{host=\"h0\",nic=\"0\"}",
    );
    assert!(
        sent >= 10.0 && answered >= 10.0,
        "sent {sent}, answered {answered}"
    );
    assert!(metric(&metrics, "hawkmesh_host_uploads_ok_total{host=\"h0\"}") >= 1.0);
    assert!(
        metric(
            &metrics,
            "hawkmesh_host_network_rtt_seconds_count{host=\"h0\",nic=\"0\"}"
        ) >= 10.0
    );
    assert_eq!(
        metric(
            &metrics,
            "hawkmesh_host_host_clock_results_total{host=\"h0\",nic=\"0\"}"
        ),
        0.0,
        "veth gives kernel timestamps"
    );

    // A known added delay: h1 holds its first ACKs 5 ms. The network RTT h0 measures to h1
    // (one veth: the send timestamp is taken in the veth's transmit, the peer's receive
    // timestamp in the same call) moves by less than 5 µs; the responder delay carries the
    // hold. (The longer a responder's thread sleeps, the colder the CPU that sends its ACK:
    // on a 2-core VM the median moves by about +2 µs after 20 ms, well under 1 µs after 5.)
    const HOLD_NS: u64 = 5_000_000;
    let hold_set = wall_ns();
    hold.store(HOLD_NS / 1_000, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(2_000));
    hold.store(0, Ordering::Relaxed);
    let hold_cleared = wall_ns();
    let answered: Vec<(u64, u64, u64)> = results
        .try_iter()
        .filter(|r| r.status == hawkmesh_proto::v1::ProbeStatus::Answered as i32)
        .map(|r| (r.sent_ns, r.network_rtt_ns, r.responder_delay_ns))
        .collect();
    // 50 ms of margin: the hold takes effect at h1's next step.
    let pick = |from: u64, until: u64| -> Vec<(u64, u64)> {
        answered
            .iter()
            .filter(|(sent, _, _)| (from..until).contains(sent))
            .map(|(_, rtt, delay)| (*rtt, *delay))
            .collect()
    };
    let without = pick(0, hold_set);
    let with = pick(hold_set + 50_000_000, hold_cleared);
    let (rtt_without, rtt_with, delay_with) = (
        median_of(without.iter().map(|s| s.0).collect()),
        median_of(with.iter().map(|s| s.0).collect()),
        median_of(with.iter().map(|s| s.1).collect()),
    );
    assert!(
        rtt_without.abs_diff(rtt_with) < 5_000,
        "a {HOLD_NS} ns hold moved the network RTT: {rtt_without} ns ({} probes) → {rtt_with} ns ({} probes)",
        without.len(),
        with.len()
    );
    assert!(
        // A probe waits up to a tick of the interfaces' thread before it is handled.
        (HOLD_NS..HOLD_NS + 2_000_000 + tick_ns()).contains(&delay_with),
        "responder delay {delay_with} ns for a {HOLD_NS} ns hold"
    );

    // The analyzer goes away: uploads fail, batches wait.
    analyzer.stop();
    wait_for(Duration::from_secs(5), "h0 buffering its batches", || {
        let m = scrape(&a);
        metric(&m, "hawkmesh_host_uploads_failed_total{host=\"h0\"}") >= 1.0
            && metric(&m, "hawkmesh_host_buffered_batches{host=\"h0\"}") >= 2.0
    });
    let buffered = metric(&scrape(&a), "hawkmesh_host_buffered_batches{host=\"h0\"}");
    // It comes back on the same data directory: the buffered batches arrive.
    analyzer.restart();
    wait_for(Duration::from_secs(8), "h0's buffer delivered", || {
        metric(&scrape(&a), "hawkmesh_host_buffered_bytes{host=\"h0\"}") == 0.0
    });

    // h1 restarts: the next incarnation, registered (a lower one would be refused).
    let first_b = daemon_b.stop();
    assert_eq!(first_b.undelivered(), 0, "{first_b:?}");
    let daemon_b = start_daemon(&b, config_b);
    wait_for(Duration::from_secs(5), "the restarted h1 uploading", || {
        try_scrape(&b)
            .is_some_and(|m| metric(&m, "hawkmesh_host_uploads_ok_total{host=\"h1\"}") >= 1.0)
    });
    assert_eq!(
        metric(&scrape(&b), "hawkmesh_host_agent_incarnation{host=\"h1\"}") as u64,
        first_b.incarnation + 1
    );
    std::thread::sleep(Duration::from_millis(1500));
    let second_b = daemon_b.stop();
    let last_a = daemon_a.stop();
    assert_eq!(second_b.incarnation, first_b.incarnation + 1);
    for summary in [&first_b, &second_b, &last_a] {
        assert_eq!(summary.undelivered(), 0, "{summary:?}");
        assert!(summary.results > 0, "{summary:?}");
    }
    assert!(last_a.upload_failures >= 1, "{last_a:?}");

    // Every result delivered is in the reports once (analysed, or late for a period
    // analysed while it waited in a daemon's buffer).
    let delivered =
        first_b.results_delivered + second_b.results_delivered + last_a.results_delivered;
    wait_for(
        Duration::from_millis(2 * PERIOD_NS / 1_000_000 + 2_000),
        "every period with results analysed",
        || stored_results(&analyzer.periods()) >= delivered,
    );
    let periods = analyzer.periods();
    assert_eq!(stored_results(&periods), delivered, "{periods:#?}");
    println!(
        "daemon lab: network RTT {rtt_without} ns ({} probes) → {rtt_with} ns ({} probes) with a {HOLD_NS} ns hold (error {} ns), responder delay {delay_with} ns; \
         {delivered} results delivered over {} periods; h0 buffered {buffered} batches during the analyzer's absence ({} failed uploads); {:.1} s",
        without.len(),
        with.len(),
        rtt_without.abs_diff(rtt_with),
        periods.len(),
        last_a.upload_failures,
        started.elapsed().as_secs_f64()
    );
}

/// An analyzer that lost its data (started again on an empty data directory) answers the
/// daemon's uploads FAILED_PRECONDITION (an unknown host): the daemon registers again and
/// its buffered batches are delivered.
#[test]
fn a_daemon_registers_again_when_the_analyzer_forgot_it() {
    let _serial = serial();
    let dirs = TempDir::new("daemon-forgotten");
    let mut fabric = FabricBuilder::new();
    let tor = fabric.node("tor0", NodeKind::Switch, Some(0), None);
    let h0 = fabric.node("h0", NodeKind::Host, None, Some([10, 0, 0, 1]));
    fabric.link((h0, 0), (tor, 0));
    let topology = fabric.build();
    let mgmt = Netns::add("mgmt");
    let a = Netns::add("h0");
    management(&mgmt);
    attach_management(&mgmt, &a, 0);
    // Its RNIC's address on a veth of its own (no peer agent: it only uploads).
    a.ip(&[
        "link", "add", "nic0", "type", "veth", "peer", "name", "nic0p",
    ]);
    a.ip(&["addr", "add", "10.0.0.1/24", "dev", "nic0"]);
    a.ip(&["link", "set", "nic0", "up"]);
    a.ip(&["link", "set", "nic0p", "up"]);
    let pki = pki(&dirs.path().join("pki"), &["h0"]);
    let config = |data: &str| {
        analyzer_config(
            topology.clone(),
            &dirs.path().join(data),
            &pki,
            lab_pingmesh(),
        )
    };
    let mut analyzer = Analyzer::start(&mgmt, config("first"));
    let daemon = start_daemon(
        &a,
        daemon_config(
            "h0",
            &dirs.path().join("h0"),
            &pki,
            &[(0, "10.0.0.1", 0xa01)],
            "",
        ),
    );
    let uploads = |m: &str| metric(m, "hawkmesh_host_uploads_ok_total{host=\"h0\"}");
    wait_for(Duration::from_secs(5), "the first uploads", || {
        try_scrape(&a).is_some_and(|m| uploads(&m) >= 2.0)
    });
    analyzer.stop();
    analyzer.config = config("second");
    analyzer.restart();
    let before = uploads(&scrape(&a));
    wait_for(
        Duration::from_secs(5),
        "uploads to the new analyzer",
        || {
            let m = scrape(&a);
            uploads(&m) >= before + 2.0
                && metric(&m, "hawkmesh_host_registrations_total{host=\"h0\"}") >= 2.0
                && metric(&m, "hawkmesh_host_buffered_batches{host=\"h0\"}") == 0.0
        },
    );
    let summary = daemon.stop();
    assert_eq!(summary.undelivered(), 0, "{summary:?}");
    assert!(summary.upload_failures >= 1, "{summary:?}");
    // The new analyzer has the host registered again and its batches.
    let status = analyzer.pingmesh().lock().expect("the controller").status();
    assert_eq!(status.hosts_registered, 1, "{status:?}");
    assert!(status.batches_accepted >= 2, "{status:?}");
}

/// Service tracing and RTT-triggered polling: a connection listed in the static file is
/// probed on its own 5-tuple every 10 ms and uploaded as service tracing; when the path
/// to its peer queues (a token-bucket shaper on h0's interface, flooded), its network RTT
/// crosses the threshold and h0 sends the HAWKEYE polling packet for the connection's
/// 5-tuple, which arrives at the peer's polling port. A third host whose RNIC address is
/// not routed from the others: their probes to it are refused by the kernel, counted and
/// logged, not silently lost.
#[test]
fn a_traced_service_connection_whose_rtt_rises_sends_hawkeye_polling_for_its_five_tuple() {
    use hawkmesh_proto::v1::{ProbeKind, ProbeStatus};
    use hawkmesh_wire::dataplane::POLLING_UDP_PORT;
    use hawkmesh_wire::polling::Polling;

    let _serial = serial();
    let dirs = TempDir::new("daemon-service");
    let mut fabric = FabricBuilder::new();
    let tor = fabric.node("tor0", NodeKind::Switch, Some(0), None);
    let h0 = fabric.node("h0", NodeKind::Host, None, Some([10, 0, 0, 1]));
    let h1 = fabric.node("h1", NodeKind::Host, None, Some([10, 0, 1, 1]));
    // h2's RNIC address is not routed from h0's or h1's (a misconfigured host).
    let h2 = fabric.node("h2", NodeKind::Host, None, Some([10, 9, 0, 1]));
    fabric.link((h0, 0), (tor, 0));
    fabric.link((h1, 0), (tor, 1));
    fabric.link((h2, 0), (tor, 2));
    let topology = fabric.build();
    let mgmt = Netns::add("mgmt");
    let a = Netns::add("h0");
    let b = Netns::add("h1");
    let c = Netns::add("h2");
    management(&mgmt);
    attach_management(&mgmt, &a, 0);
    attach_management(&mgmt, &b, 1);
    attach_management(&mgmt, &c, 2);
    c.ip(&[
        "link", "add", "nic0", "type", "veth", "peer", "name", "nic0p",
    ]);
    c.ip(&["addr", "add", "10.9.0.1/16", "dev", "nic0"]);
    c.ip(&["link", "set", "nic0", "up"]);
    c.ip(&["link", "set", "nic0p", "up"]);
    a.ip(&[
        "link", "add", "nic0", "type", "veth", "peer", "name", "nic0", "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "10.0.0.1/16", "dev", "nic0"]);
    b.ip(&["addr", "add", "10.0.1.1/16", "dev", "nic0"]);
    a.ip(&["link", "set", "nic0", "up"]);
    b.ip(&["link", "set", "nic0", "up"]);
    let pki = pki(&dirs.path().join("pki"), &["h0", "h1", "h2"]);
    let analyzer = Analyzer::start(
        &mgmt,
        analyzer_config(
            topology,
            &dirs.path().join("analyzer"),
            &pki,
            lab_pingmesh(),
        ),
    );
    const SERVICE_PORT: u16 = 0xC123;
    let services = dirs.path().join("services.toml");
    std::fs::write(
        &services,
        format!(
            "[[connection]]\nlocal = \"10.0.0.1\"\nremote = \"10.0.1.1\"\nsrc_port = {SERVICE_PORT}\n"
        ),
    )
    .expect("the service list");
    // Polling when the RTT passes 3 × max(base, 1 ms): veth's scheduling noise stays under.
    let extra = format!(
        "[service_tracing]\nsource = \"static\"\nstatic_file = \"{}\"\npoll_ms = 100\ninterval_ms = 10\n\
         [polling]\nenabled = true\nthreshold = 3.0\nmin_base_rtt_us = 1000\n",
        services.display()
    );
    // The peer's polling port: where the polling packet for the connection arrives.
    let (polls_tx, polls) = std::sync::mpsc::channel();
    let listening = Arc::new(AtomicBool::new(true));
    let listener = {
        let listening = listening.clone();
        b.spawn(move || {
            let socket = std::net::UdpSocket::bind(("10.0.1.1", POLLING_UDP_PORT))
                .expect("the polling port");
            socket
                .set_read_timeout(Some(Duration::from_millis(100)))
                .expect("a timeout");
            let mut buf = [0u8; 256];
            while listening.load(Ordering::Acquire) {
                if let Ok((n, from)) = socket.recv_from(&mut buf) {
                    let _ = polls_tx.send((from, Polling::parse(&buf[..n])));
                }
            }
        })
    };
    let (tap, results) = std::sync::mpsc::sync_channel(100_000);
    let daemon_a = start_daemon_with(
        &a,
        daemon_config(
            "h0",
            &dirs.path().join("h0"),
            &pki,
            &[(0, "10.0.0.1", 0xa01)],
            &extra,
        ),
        Hooks {
            results: Some(tap),
            ..Hooks::default()
        },
    );
    let daemon_b = start_daemon(
        &b,
        daemon_config(
            "h1",
            &dirs.path().join("h1"),
            &pki,
            &[(0, "10.0.1.1", 0xb01)],
            "",
        ),
    );
    let daemon_c = start_daemon(
        &c,
        daemon_config(
            "h2",
            &dirs.path().join("h2"),
            &pki,
            &[(0, "10.9.0.1", 0xc01)],
            "",
        ),
    );
    let service = |r: &hawkmesh_proto::v1::ProbeResult| {
        r.kind == ProbeKind::ServiceTracing as i32
            && r.src_port == u32::from(SERVICE_PORT)
            && r.target_host == "h1"
    };
    // Traced on the connection's 5-tuple, ~100 probes a second.
    let mut seen = Vec::new();
    wait_for(Duration::from_secs(10), "service-tracing results", || {
        seen.extend(results.try_iter());
        seen.iter().filter(|r| service(r)).count() >= 20
    });
    let first = Instant::now();
    let before = seen.iter().filter(|r| service(r)).count();
    std::thread::sleep(Duration::from_secs(2));
    seen.extend(results.try_iter());
    let in_two_seconds = seen.iter().filter(|r| service(r)).count() - before;
    let rate = in_two_seconds as f64 / first.elapsed().as_secs_f64();
    assert!(
        (60.0..=130.0).contains(&rate),
        "service tracing every 10 ms: {rate:.0} probes/s"
    );
    let quiet = seen
        .iter()
        .filter(|r| service(r) && r.status == ProbeStatus::Answered as i32)
        .map(|r| r.network_rtt_ns)
        .max()
        .expect("answered service probes");
    assert!(quiet < 3_000_000, "a quiet veth's RTT: {quiet} ns");
    let metrics = scrape(&a);
    assert_eq!(
        metric(
            &metrics,
            "hawkmesh_host_service_connections{host=\"h0\",nic=\"0\"}"
        ),
        1.0
    );
    // Probes to h2, whose address h0 has no route to, are refused by the kernel: counted
    // (and logged with the kernel's error), not uploaded as losses.
    wait_for(Duration::from_secs(5), "h0's probes to h2 refused", || {
        metric(
            &scrape(&a),
            "hawkmesh_host_probes_not_sent_total{host=\"h0\",nic=\"0\"}",
        ) >= 1.0
    });
    assert!(seen.iter().all(|r| r.target_host != "h2"));
    let quiet_polls = metric(
        &metrics,
        "hawkmesh_host_polls_sent_total{host=\"h0\",nic=\"0\"}",
    );
    assert_eq!(quiet_polls, 0.0, "no polling while the path is quiet");

    // The path queues: h0's egress shaped to 20 Mbit/s with 100 kB of queue (40 ms), and
    // flooded.
    a.exec(
        "tc",
        &[
            "qdisc", "add", "dev", "nic0", "root", "tbf", "rate", "20mbit", "burst", "16kb",
            "limit", "100kb",
        ],
    );
    let flooding = Arc::new(AtomicBool::new(true));
    let flood = {
        let flooding = flooding.clone();
        a.spawn(move || {
            let socket = std::net::UdpSocket::bind("10.0.0.1:0").expect("a flood socket");
            socket.set_nonblocking(true).expect("non-blocking");
            let payload = [0u8; 1400];
            while flooding.load(Ordering::Acquire) {
                for _ in 0..64 {
                    let _ = socket.send_to(&payload, "10.0.1.1:9");
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        })
    };
    let poll = polls.recv_timeout(Duration::from_secs(10));
    flooding.store(false, Ordering::Release);
    let _ = flood.join();
    let (from, poll) = poll.expect("a polling packet within 10 s of the queue building");
    let poll = poll.expect("a well-formed polling header");
    assert_eq!(from.ip().to_string(), "10.0.0.1");
    assert_eq!(
        from.port(),
        SERVICE_PORT,
        "the poll leaves from the victim's source port"
    );
    let victim = poll.victim;
    assert_eq!(
        (
            victim.src_ip,
            victim.dst_ip,
            victim.src_port,
            victim.dst_port,
            victim.protocol
        ),
        ([10, 0, 0, 1], [10, 0, 1, 1], SERVICE_PORT, 4791, 17),
        "the victim is the service connection's RoCEv2 5-tuple"
    );
    assert_ne!(poll.event_id & 0xFFFF_FFFF, 0);
    seen.extend(results.try_iter());
    let slow = seen
        .iter()
        .filter(|r| service(r) && r.status == ProbeStatus::Answered as i32)
        .map(|r| r.network_rtt_ns)
        .max()
        .unwrap_or(0);
    assert!(slow >= 3_000_000, "the queue's RTT: {slow} ns");
    let metrics = scrape(&a);
    assert!(
        metric(
            &metrics,
            "hawkmesh_host_polls_sent_total{host=\"h0\",nic=\"0\"}"
        ) >= 1.0
    );
    listening.store(false, Ordering::Release);
    let _ = listener.join();
    a.exec("tc", &["qdisc", "del", "dev", "nic0", "root"]);
    let summary_a = daemon_a.stop();
    let _ = daemon_b.stop();
    let summary_c = daemon_c.stop();
    assert!(summary_a.results_delivered > 0, "{summary_a:?}");
    assert!(summary_a.probes_not_sent >= 1, "{summary_a:?}");
    assert!(summary_c.probes_not_sent >= 1, "{summary_c:?}");
    drop(analyzer);
}

// ───────────────────────── The routed fabric lab (issue 25's proof) ─────────────────────────

/// Hosts, ToRs and spines of the routed lab.
const HOSTS: usize = 4;
const NICS: usize = 2;
const TORS: usize = 4;
const SPINES: usize = 2;

/// The ToR of host `h`'s NIC `n`: hosts 0–1 hang off tor0 (NIC 0) and tor1 (NIC 1),
/// hosts 2–3 off tor2 and tor3; the host is the ToR's port `h % 2`.
fn tor_of(h: usize, n: usize) -> usize {
    (h / 2) * 2 + n
}

/// Router `r`'s (ToRs 0–3, spines 4–5) address on its port `p`: 172.16.r.(p + 1).
fn router_ip(r: usize, p: usize) -> String {
    format!("172.16.{r}.{}", p + 1)
}

/// RNIC address: the fabric's host address 10.0.h.1 plus the NIC.
fn rnic_ip(h: usize, n: usize) -> String {
    format!("10.0.{h}.{}", 1 + n)
}

/// The fabric description of the lab: ToRs (ids 0–3), spines (4–5), hosts (6–9). ToR
/// ports 0–1 face hosts, 2 + s spine s; spine port t faces tor t; host port n is NIC n.
fn routed_fabric() -> FabricTopology {
    let mut f = FabricBuilder::new();
    let tors: Vec<u32> = (0..TORS)
        .map(|t| f.node(&format!("tor{t}"), NodeKind::Switch, Some(0), None))
        .collect();
    let spines: Vec<u32> = (0..SPINES)
        .map(|s| f.node(&format!("spine{s}"), NodeKind::Switch, Some(1), None))
        .collect();
    let hosts: Vec<u32> = (0..HOSTS)
        .map(|h| {
            f.node(
                &format!("h{h}"),
                NodeKind::Host,
                None,
                Some([10, 0, h as u8, 1]),
            )
        })
        .collect();
    for h in 0..HOSTS {
        for n in 0..NICS {
            f.link((hosts[h], n as u16), (tors[tor_of(h, n)], (h % 2) as u16));
        }
    }
    for (t, tor) in tors.iter().enumerate() {
        for (s, spine) in spines.iter().enumerate() {
            f.link((*tor, (2 + s) as u16), (*spine, t as u16));
        }
    }
    f.build()
}

/// The `[[port_address]]` rows of every router interface, as operators would generate
/// them from their switch configurations.
fn port_address_rows() -> String {
    let mut rows = String::new();
    let mut row = |ip: String, node: String, port: usize| {
        rows.push_str(&format!(
            "[[port_address]]\nip = \"{ip}\"\nnode = \"{node}\"\nport = {port}\n"
        ));
    };
    for t in 0..TORS {
        for p in 0..2 + SPINES {
            row(router_ip(t, p), format!("tor{t}"), p);
        }
    }
    for s in 0..SPINES {
        for t in 0..TORS {
            row(router_ip(TORS + s, t), format!("spine{s}"), t);
        }
    }
    rows
}

/// Every namespace of the routed lab (each deleted when the lab is dropped).
struct RoutedLab {
    mgmt: Netns,
    hosts: Vec<Netns>,
    tors: Vec<Netns>,
    spines: Vec<Netns>,
}

fn bring_up(ns: &Netns, interfaces: &[String]) {
    for i in interfaces {
        ns.ip(&["link", "set", i, "up"]);
    }
}

/// Builds the lab: Linux routers with L4-hashed ECMP over the spines, hosts with one
/// address per NIC and source routing (each NIC's traffic leaves by that NIC, also to the
/// host's other NIC, which the kernel would otherwise deliver locally), the management
/// bridge.
fn routed_lab() -> RoutedLab {
    let mgmt = Netns::add("mgmt");
    management(&mgmt);
    let hosts: Vec<Netns> = (0..HOSTS).map(|h| Netns::add(&format!("h{h}"))).collect();
    let tors: Vec<Netns> = (0..TORS).map(|t| Netns::add(&format!("tor{t}"))).collect();
    let spines: Vec<Netns> = (0..SPINES).map(|s| Netns::add(&format!("sp{s}"))).collect();
    for (h, host) in hosts.iter().enumerate() {
        attach_management(&mgmt, host, h);
    }
    // Cables: veth pairs named after the port at each end.
    for (h, host) in hosts.iter().enumerate() {
        for n in 0..NICS {
            let (t, p) = (tor_of(h, n), h % 2);
            host.ip(&[
                "link",
                "add",
                &format!("nic{n}"),
                "type",
                "veth",
                "peer",
                "name",
                &format!("p{p}"),
                "netns",
                &tors[t].name,
            ]);
        }
    }
    for (t, tor) in tors.iter().enumerate() {
        for (s, spine) in spines.iter().enumerate() {
            tor.ip(&[
                "link",
                "add",
                &format!("p{}", 2 + s),
                "type",
                "veth",
                "peer",
                "name",
                &format!("p{t}"),
                "netns",
                &spine.name,
            ]);
        }
    }
    let routers = tors.iter().chain(spines.iter());
    for (r, router) in routers.enumerate() {
        let ports = if r < TORS { 2 + SPINES } else { TORS };
        for setting in [
            "net.ipv4.ip_forward=1",
            // ECMP on the 5-tuple (ports included), as switches hash RoCE.
            "net.ipv4.fib_multipath_hash_policy=1",
            // Time-exceeded from the address of the port the datagram came in by.
            "net.ipv4.icmp_errors_use_inbound_ifaddr=1",
            // Linux limits ICMP errors to one a second per destination after a burst of 6;
            // switches have their own control-plane policing, the agents' trace rate is
            // the limit here.
            "net.ipv4.icmp_ratelimit=0",
            "net.ipv4.icmp_msgs_per_sec=100000",
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
        ] {
            router.sysctl(setting);
        }
        let names: Vec<String> = (0..ports).map(|p| format!("p{p}")).collect();
        for (p, name) in names.iter().enumerate() {
            router.ip(&[
                "addr",
                "add",
                &format!("{}/32", router_ip(r, p)),
                "dev",
                name,
            ]);
        }
        bring_up(router, &names);
    }
    for (h, host) in hosts.iter().enumerate() {
        for setting in [
            "net.ipv4.conf.all.rp_filter=0",
            "net.ipv4.conf.default.rp_filter=0",
            "net.ipv4.conf.all.accept_local=1",
            "net.ipv4.conf.default.accept_local=1",
        ] {
            host.sysctl(setting);
        }
        for n in 0..NICS {
            let nic = format!("nic{n}");
            host.sysctl(&format!("net.ipv4.conf.{nic}.rp_filter=0"));
            host.sysctl(&format!("net.ipv4.conf.{nic}.accept_local=1"));
            host.ip(&["addr", "add", &format!("{}/32", rnic_ip(h, n)), "dev", &nic]);
            bring_up(host, std::slice::from_ref(&nic));
            let table = format!("{}", 100 + n);
            host.ip(&[
                "rule",
                "add",
                "pref",
                &table,
                "from",
                &rnic_ip(h, n),
                "iif",
                "lo",
                "lookup",
                &table,
            ]);
            host.ip(&[
                "route",
                "add",
                "default",
                "via",
                &router_ip(tor_of(h, n), h % 2),
                "dev",
                &nic,
                "onlink",
                "table",
                &table,
            ]);
        }
        // The local table after the NICs' rules: a datagram from one NIC to the other
        // leaves by the first and comes back in by the second (accept_local).
        host.ip(&["rule", "add", "pref", "200", "lookup", "local"]);
        host.ip(&["rule", "del", "pref", "0"]);
    }
    for (t, tor) in tors.iter().enumerate() {
        for h in 0..HOSTS {
            for n in 0..NICS {
                let ip = format!("{}/32", rnic_ip(h, n));
                if tor_of(h, n) == t {
                    tor.ip(&["route", "add", &ip, "dev", &format!("p{}", h % 2)]);
                } else {
                    let mut args = vec!["route".to_string(), "add".into(), ip];
                    for s in 0..SPINES {
                        args.extend([
                            "nexthop".into(),
                            "via".into(),
                            router_ip(TORS + s, t),
                            "dev".into(),
                            format!("p{}", 2 + s),
                            "onlink".into(),
                        ]);
                    }
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    tor.ip(&args);
                }
            }
        }
    }
    for (s, spine) in spines.iter().enumerate() {
        for h in 0..HOSTS {
            for n in 0..NICS {
                let t = tor_of(h, n);
                spine.ip(&[
                    "route",
                    "add",
                    &format!("{}/32", rnic_ip(h, n)),
                    "via",
                    &router_ip(t, 2 + s),
                    "dev",
                    &format!("p{t}"),
                    "onlink",
                ]);
            }
        }
    }
    RoutedLab {
        mgmt,
        hosts,
        tors,
        spines,
    }
}

/// Packets received on `dev` in `ns` so far.
fn rx_packets(ns: &Netns, dev: &str) -> u64 {
    let json = ns.ip_output(&["-j", "-s", "link", "show", "dev", dev]);
    let value: serde_json::Value = serde_json::from_str(&json).expect("ip's JSON");
    value[0]["stats64"]["rx"]["packets"]
        .as_u64()
        .unwrap_or_else(|| panic!("no rx packet count in {json}"))
}

/// Stage 2 over real routers: UDP traceroutes from h0's NIC 0 to h2's NIC 0 (tor0 →
/// spine → tor2) on 16 source ports, each keeping the probe's 5-tuple. Linux routers hash
/// the 5-tuple (policy 1) over both spines; each trace names the egress ports of its path
/// (router addresses → ingress ports → the fabric's peers), and probes sent on that 5-tuple
/// afterwards cross exactly the spine its trace named.
#[test]
fn traces_keep_the_probe_five_tuple_over_ecmp_and_name_the_egress_ports() {
    use hawkmesh_host_agent::daemon::trace::{
        PortAddress, PortMap, TraceKey, TraceSettings, Tracer,
    };
    use hawkmesh_host_agent::paths::PathTracingConfig;
    use hawkmesh_host_agent::transport::ProbeTransport;
    use hawkmesh_host_agent::udp::{UdpConfig, UdpTransport};
    use std::net::IpAddr;

    let _serial = serial();
    let lab = routed_lab();
    let rows: Vec<PortAddress> = {
        let text = port_address_rows();
        let config = DaemonConfig::parse(
            &format!(
                "host = \"h0\"\nstate_dir = \"/tmp\"\n[analyzer]\nendpoint = \"http://127.0.0.1:1\"\n\
                 [[interface]]\nnic = 0\nip = \"10.0.0.1\"\nid = 1\n{text}"
            ),
            "rows",
        )
        .expect("the rows parse");
        config
            .port_addresses
            .iter()
            .map(|r| PortAddress {
                ip: r.ip,
                node: r.node.clone(),
                port: r.port,
            })
            .collect()
    };
    let map = Arc::new(PortMap::new(routed_fabric(), &rows).expect("the port map"));
    const PORTS: u16 = 16;
    let peer: IpAddr = rnic_ip(2, 0).parse().expect("an address");
    let paths = lab.hosts[0]
        .spawn(move || {
            let mut transport = UdpTransport::new(UdpConfig {
                port: PORT,
                trace: true,
                ..UdpConfig::new(rnic_ip(0, 0).parse().expect("an address"))
            })
            .expect("h0's transport");
            let settings = TraceSettings {
                schedule: PathTracingConfig {
                    traces_per_s: 1_000.0,
                    burst: 64,
                    refresh_ns: 600_000_000_000,
                    capacity: 64,
                },
                max_ttl: 8,
                hop_timeout_ns: 200_000_000,
            };
            let mut tracer = Tracer::new(settings, map, "h0", 0).expect("h0's tracer");
            let keys: Vec<TraceKey> = (0..PORTS)
                .map(|i| TraceKey {
                    peer,
                    src_port: 50_000 + i,
                })
                .collect();
            let now = || transport_now();
            for key in &keys {
                tracer.need(*key, now());
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut events = Vec::new();
            while tracer.counts().completed + tracer.counts().failed < u64::from(PORTS)
                && Instant::now() < deadline
            {
                let mut sends = tracer.poll(now());
                transport
                    .poll(Duration::from_millis(2), &mut events)
                    .expect("poll");
                events.clear();
                for report in transport.take_icmp() {
                    sends.extend(tracer.on_icmp(&report, now()));
                }
                for s in sends {
                    transport
                        .send_trace(&s.key.peer, s.key.src_port, s.ttl, &s.payload)
                        .expect("a trace datagram");
                }
            }
            assert_eq!(
                tracer.counts().completed,
                u64::from(PORTS),
                "{:?} {:?}",
                tracer.counts(),
                tracer.last_failure
            );
            keys.iter()
                .map(|k| {
                    let path = tracer.need(*k, now()).expect("a path");
                    path.iter()
                        .map(|h| format!("{}:{}", h.node, h.port))
                        .collect::<Vec<_>>()
                })
                .collect::<Vec<_>>()
        })
        .join()
        .expect("h0's tracing thread");
    let mut spines_seen = [0; SPINES];
    for (i, path) in paths.iter().enumerate() {
        let s = match path.get(1).map(String::as_str) {
            Some("tor0:2") => 0,
            Some("tor0:3") => 1,
            other => panic!(
                "port {}: {path:?} does not leave tor0 to a spine ({other:?})",
                50_000 + i
            ),
        };
        assert_eq!(
            path,
            &vec![
                "h0:0".to_string(),
                format!("tor0:{}", 2 + s),
                format!("spine{s}:2"),
                "tor2:0".to_string()
            ]
        );
        spines_seen[s] += 1;
        // Probes on this 5-tuple take the traced spine (its port facing tor0 counts them).
        let before: Vec<u64> = lab.spines.iter().map(|sp| rx_packets(sp, "p0")).collect();
        let port = 50_000 + i as u16;
        lab.hosts[0]
            .spawn(move || {
                let socket = std::net::UdpSocket::bind((rnic_ip(0, 0).as_str(), port))
                    .expect("the 5-tuple's source port");
                for _ in 0..10 {
                    socket
                        .send_to(&[0u8; 50], (rnic_ip(2, 0).as_str(), PORT))
                        .expect("a probe-sized datagram");
                }
            })
            .join()
            .expect("the sending thread");
        std::thread::sleep(Duration::from_millis(20));
        let after: Vec<u64> = lab.spines.iter().map(|sp| rx_packets(sp, "p0")).collect();
        let crossed: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        assert!(
            crossed[s] >= 10 && crossed[1 - s] < 10,
            "port {port}: traced over spine{s}, probes crossed {crossed:?}"
        );
    }
    assert!(
        spines_seen.iter().all(|n| *n > 0),
        "ECMP spread 16 source ports over both spines: {spines_seen:?}"
    );
    println!("traces over ECMP: source ports per spine {spines_seen:?}");
}

fn transport_now() -> u64 {
    hawkmesh_host_agent::udp::host_now_ns()
}

/// The analysis period of the routed lab.
const FABRIC_PERIOD_NS: u64 = 2_000_000_000;

/// The routed lab's controller: 2-s periods analysed 1.5 s after their end; an anomalous
/// RNIC held one period (the paper's minute would carry a fault into the next phase);
/// only the absolute RTT bound (2 ms: three Linux routers on a shared machine forward in
/// tens of µs, scheduling stalls reach a millisecond; a multiple of the median is noise
/// here); inter-ToR probing at half the paper's per-link rate (the machine forwards every
/// probe three times in software).
fn fabric_pingmesh() -> PingmeshConfig {
    use hawkmesh_pingmesh::pinglist::PinglistConfig;
    PingmeshConfig {
        analysis: AnalysisConfig {
            high_rtt_factor: 0.0,
            high_rtt_ns: 2_000_000,
            rnic_hold_ns: FABRIC_PERIOD_NS,
            ..AnalysisConfig::default()
        },
        pinglists: PinglistConfig {
            link_target_pps: 5.0,
            ..PinglistConfig::default()
        },
        period_ns: FABRIC_PERIOD_NS,
        grace_ns: FABRIC_PERIOD_NS * 3 / 4,
        upload_interval_ms: 500,
        pinglist_refresh_ms: 1_000,
        probe_timeout_ms: 200,
        ..PingmeshConfig::default()
    }
}

/// Now on the wall clock the analyzer and the agents share, ns.
fn wall_ns() -> u64 {
    transport_now()
}

/// The first period report starting at or after `after_ns`, waiting for its analysis.
fn period_after(analyzer: &Analyzer, after_ns: u64, what: &str) -> PeriodView {
    let limit =
        Duration::from_nanos(2 * FABRIC_PERIOD_NS + FABRIC_PERIOD_NS) + Duration::from_secs(2);
    let mut found = None;
    wait_for(limit, what, || {
        found = analyzer
            .periods()
            .into_iter()
            .find(|p| p.start_ns >= after_ns);
        found.is_some()
    });
    found.expect("a period")
}

/// (network RTT, responder delay) of the answered inter-ToR probes to `host` sent in
/// `[from, until)`.
fn inter_tor_to(
    results: &[hawkmesh_proto::v1::ProbeResult],
    host: &str,
    from: u64,
    until: u64,
) -> Vec<(u64, u64)> {
    use hawkmesh_proto::v1::{ProbeKind, ProbeStatus};
    results
        .iter()
        .filter(|r| {
            r.target_host == host
                && r.status == ProbeStatus::Answered as i32
                && r.kind == ProbeKind::InterTor as i32
                && (from..until).contains(&r.sent_ns)
        })
        .map(|r| (r.network_rtt_ns, r.responder_delay_ns))
        .collect()
}

/// The median of `values`.
fn median_of(mut values: Vec<u64>) -> u64 {
    assert!(!values.is_empty(), "no samples");
    values.sort_unstable();
    values[values.len() / 2]
}

/// The proof: 4 hosts × 2 RNICs behind four ToRs and two spines (Linux routers,
/// ECMP on the 5-tuple), a real daemon per host over kernel UDP with path tracing, the real
/// analyzer with its pingmesh controller. In turn:
/// - a clean period: answered probes, no problem;
/// - 30 % loss on one router link (nftables on tor0's port to spine0): the period's report
///   blames that link alone, with (nearly) every lost probe voting for it — the lost ACKs
///   through their responders' ACK routes;
/// - a responder holding its first ACKs 20 ms: the end-host delay shows it, the network RTT
///   does not (no latency problem), and the network RTT to it moves by less than 5 µs;
/// - an agent restart: probes to its old QPN are filtered as QPN reset, nobody is blamed;
/// - a downed interface (`ip link set nic1 down` on h1): that RNIC is flagged.
#[test]
fn the_analyzer_blames_the_lossy_link_the_busy_responder_the_restart_and_the_downed_rnic() {
    let _serial = serial();
    let started = Instant::now();
    let dirs = TempDir::new("fabric-lab");
    let lab = routed_lab();
    let names: Vec<String> = (0..HOSTS).map(|h| format!("h{h}")).collect();
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let pki = pki(&dirs.path().join("pki"), &name_refs);
    let fabric = routed_fabric();
    let topology_file = dirs.path().join("topology.json");
    std::fs::write(
        &topology_file,
        serde_json::to_string(&fabric).expect("the fabric as JSON"),
    )
    .expect("topology.json");
    let analyzer = Analyzer::start(
        &lab.mgmt,
        analyzer_config(
            fabric,
            &dirs.path().join("analyzer"),
            &pki,
            fabric_pingmesh(),
        ),
    );
    let tracing = format!(
        "[path_tracing]\nenabled = true\ntopology = \"{}\"\ntraces_per_s = 200.0\nburst = 64\n\
         refresh_ms = 600000\nmax_ttl = 6\nhop_timeout_ms = 100\n{}",
        topology_file.display(),
        port_address_rows()
    );
    let config = |h: usize| {
        let interfaces: Vec<(u32, String, u32)> = (0..NICS)
            .map(|n| (n as u32, rnic_ip(h, n), 0x100 + (h * NICS + n) as u32))
            .collect();
        let refs: Vec<(u32, &str, u32)> = interfaces
            .iter()
            .map(|(n, ip, id)| (*n, ip.as_str(), *id))
            .collect();
        daemon_config(
            &names[h],
            &dirs.path().join(&names[h]),
            &pki,
            &refs,
            &tracing,
        )
    };
    // The other hosts' results, for the RTT comparison; h3's ACK hold, for the busy
    // responder.
    let (tap, results) = std::sync::mpsc::sync_channel(200_000);
    let hold = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut daemons: Vec<Option<Running>> = (0..HOSTS)
        .map(|h| {
            let hooks = Hooks {
                results: (h != 3).then(|| tap.clone()),
                ack_hold_us: (h == 3).then(|| hold.clone()),
            };
            Some(start_daemon_with(&lab.hosts[h], config(h), hooks))
        })
        .collect();

    // Every interface has traced its 5-tuples (probed and answered on).
    let traced = |h: usize| {
        let m = try_scrape(&lab.hosts[h])?;
        let mut done = true;
        for n in 0..NICS {
            let label = format!("{{host=\"h{h}\",nic=\"{n}\"}}");
            let started = metric(&m, &format!("hawkmesh_host_traces_started_total{label}"));
            let completed = metric(&m, &format!("hawkmesh_host_traces_completed_total{label}"));
            let failed = metric(&m, &format!("hawkmesh_host_traces_failed_total{label}"));
            done &= completed >= 20.0 && started == completed + failed;
        }
        Some(done)
    };
    wait_for(
        Duration::from_secs(15),
        "every interface's paths traced",
        || (0..HOSTS).all(|h| traced(h) == Some(true)),
    );
    let traces: f64 = (0..HOSTS)
        .map(|h| {
            let m = scrape(&lab.hosts[h]);
            (0..NICS)
                .map(|n| {
                    metric(
                        &m,
                        &format!(
                            "hawkmesh_host_traces_completed_total{{host=\"h{h}\",nic=\"{n}\"}}"
                        ),
                    )
                })
                .sum::<f64>()
        })
        .sum();

    // A clean period.
    let clean = period_after(&analyzer, wall_ns(), "a clean period");
    assert!(clean.results >= 200, "{clean:?}");
    assert!(clean.problems.is_empty(), "{clean:#?}");
    let base_rtt = clean.cluster.network_rtt;
    assert!(base_rtt.p99 < 2_000_000, "{base_rtt:?}");

    // (a) 30 % loss on tor0's port to spine0.
    let rules = dirs.path().join("loss.nft");
    std::fs::write(
        &rules,
        "table inet hawkmesh_lab {\n  chain forward {\n    type filter hook forward priority 0; policy accept;\n    \
         oifname \"p2\" numgen random mod 100 < 30 drop\n  }\n}\n",
    )
    .expect("the ruleset");
    let loss_at = wall_ns();
    lab.tors[0].exec("nft", &["-f", &rules.display().to_string()]);
    let lossy = period_after(&analyzer, wall_ns(), "a period with the loss");
    lab.tors[0].exec("nft", &["delete", "table", "inet", "hawkmesh_lab"]);
    let drops = lossy
        .problems
        .iter()
        .find(|p| p.kind == "switch_drops")
        .unwrap_or_else(|| panic!("no switch drops located: {lossy:#?}"));
    assert_eq!(
        drops
            .links
            .iter()
            .map(|l| (l.a.as_str(), l.b.as_str()))
            .collect::<Vec<_>>(),
        [("tor0:2", "spine0:0")],
        "{lossy:#?}"
    );
    let votes = drops.links[0].votes;
    assert!(
        f64::from(votes) >= 0.9 * f64::from(drops.probes),
        "{votes} of {} lost probes vote for the lossy link: {lossy:#?}",
        drops.probes
    );
    assert!(
        !lossy.problems.iter().any(|p| p.kind == "rnic"),
        "{lossy:#?}"
    );

    // (b) h3 holds its first ACKs 20 ms: the responder's delay, not the network's.
    const HOLD_NS: u64 = 20_000_000;
    hold.store(HOLD_NS / 1_000, Ordering::Relaxed);
    let held_from = wall_ns() + 50_000_000;
    let busy = period_after(&analyzer, held_from, "a period with the held ACKs");
    hold.store(0, Ordering::Relaxed);
    let held_until = wall_ns();
    assert!(
        !busy
            .problems
            .iter()
            .any(|p| matches!(p.kind.as_str(), "switch_latency" | "switch_drops" | "rnic")),
        "the network is blamed for the responder's delay: {busy:#?}"
    );
    assert!(busy.cluster.network_rtt.p99 < 2_000_000, "{busy:#?}");
    assert!(
        busy.cluster.end_host_delay.p99 >= HOLD_NS,
        "the end-host delay does not show the hold: {busy:#?}"
    );
    let seen: Vec<hawkmesh_proto::v1::ProbeResult> = results.try_iter().collect();
    let baseline = inter_tor_to(&seen, "h3", 0, loss_at);
    let held = inter_tor_to(&seen, "h3", held_from, held_until);
    let (rtt_without, rtt_held, delay_held) = (
        median_of(baseline.iter().map(|s| s.0).collect()),
        median_of(held.iter().map(|s| s.0).collect()),
        median_of(held.iter().map(|s| s.1).collect()),
    );
    assert!(
        (HOLD_NS..HOLD_NS + 2_000_000 + tick_ns()).contains(&delay_held),
        "h3's responder delay {delay_held} ns for a {HOLD_NS} ns hold"
    );
    // Excluded from the network RTT to a hundredth of it (a leak would move the median by
    // the whole 20 ms). Not to the µs here: the network is three Linux routers forwarding
    // in the softirq of whoever sends, and after the responder's thread sleeps through the
    // hold, its ACK is forwarded by a CPU that comes back cold — the medians move by +0.3
    // µs after a 1-ms hold, +1–3 µs after 5 ms, +4–7 µs after 20 ms on a 2-core VM, and
    // +21 µs in a CI run with this file's other tests running beside it on 2 cores. The
    // timestamps are exact; the µs bound is checked where no router forwards (two hosts on
    // one veth, the first test of this file).
    assert!(
        rtt_without.abs_diff(rtt_held) < HOLD_NS / 100,
        "the hold leaks into the network RTT to h3: {rtt_without} ns ({} probes) → {rtt_held} ns ({} probes)",
        baseline.len(),
        held.len()
    );

    // (d) h2's agent restarts: a new incarnation, new QPNs.
    let restart_at = wall_ns();
    let old = daemons[2].take().expect("h2's daemon").stop();
    assert_eq!(old.undelivered(), 0, "{old:?}");
    daemons[2] = Some(start_daemon(&lab.hosts[2], config(2)));
    let restart_period = period_after(
        &analyzer,
        restart_at - restart_at % FABRIC_PERIOD_NS,
        "the period of the restart",
    );
    let next = period_after(
        &analyzer,
        restart_period.end_ns,
        "the period after the restart",
    );
    let qpn_resets: u64 = [&restart_period, &next]
        .iter()
        .map(|p| p.timeouts.get("qpn_reset").copied().unwrap_or(0))
        .sum();
    assert!(qpn_resets > 0, "{restart_period:#?} {next:#?}");
    for p in [&restart_period, &next] {
        assert!(
            p.problems.is_empty(),
            "the restart is blamed on something: {p:#?}"
        );
    }
    assert_eq!(
        metric(
            &scrape(&lab.hosts[2]),
            "hawkmesh_host_agent_incarnation{host=\"h2\"}"
        ) as u64,
        old.incarnation + 1
    );

    // (c) h1's NIC 1 goes down.
    let down_at = wall_ns();
    lab.hosts[1].ip(&["link", "set", "nic1", "down"]);
    let down = period_after(&analyzer, down_at, "a period with the downed interface");
    assert!(
        down.problems.iter().any(
            |p| p.kind == "rnic" && p.rnic.as_deref().is_some_and(|r| r.starts_with("h1:nic1"))
        ),
        "h1's NIC 1 is not flagged: {down:#?}"
    );
    assert!(
        !down.problems.iter().any(|p| p.kind.starts_with("switch")),
        "{down:#?}"
    );

    let summaries: Vec<DaemonSummary> = daemons
        .into_iter()
        .map(|d| d.expect("a daemon").stop())
        .collect();
    for s in &summaries {
        assert_eq!(s.undelivered(), 0, "{s:?}");
    }
    println!(
        "routed lab: {traces} paths traced; clean period {} results, network RTT p50 {} ns p99 {} ns; \
         loss: {} lost probes, {votes} votes for tor0:2–spine0:0; \
         20-ms hold: end-host delay p99 {} ns, responder delay {delay_held} ns, inter-ToR RTT to h3 {rtt_without} ns ({} probes) → {rtt_held} ns ({} probes); \
         restart: {qpn_resets} QPN-reset timeouts; {:.1} s",
        clean.results,
        base_rtt.p50,
        base_rtt.p99,
        drops.probes,
        busy.cluster.end_host_delay.p99,
        baseline.len(),
        held.len(),
        started.elapsed().as_secs_f64()
    );
}

/// The interfaces' thread's tick (the daemons here run the default).
fn tick_ns() -> u64 {
    hawkmesh_host_agent::daemon::config::ProbingSection::default().tick_us * 1_000
}
