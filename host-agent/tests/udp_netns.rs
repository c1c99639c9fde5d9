//! The kernel-UDP transport and the probing engine over real sockets: two network
//! namespaces joined by a veth pair, created and removed by each test (root required: the
//! tests fail with the reason when `ip netns add` does).
//!
//! On veth the software send timestamp is taken in the driver's xmit and the receive one
//! when the peer's stack takes the packet (`netif_rx`), with bottom halves disabled in
//! between, so the network RTT measured is a few microseconds of kernel forwarding and
//! does not move with what the agents' threads do.
//!
//! The tests run one at a time (`support::serial`).

#![cfg(target_os = "linux")]

mod support;

use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hawkmesh_host_agent::engine::{Engine, EngineConfig, EngineStats, ProbeReport, ProbeTarget};
use hawkmesh_host_agent::probe::{ProbeOutcome, ProberConfig};
use hawkmesh_host_agent::transport::TimestampSource;
use hawkmesh_host_agent::udp::{TimestampingSupport, UdpConfig, UdpStats, UdpTransport};
use hawkmesh_wire::probe::{ProbeKind, ProbeRepr};
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrStorage,
};
use support::{serial, Netns};

const A_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 2);
const A_IP6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 1);
const B_IP6: Ipv6Addr = Ipv6Addr::new(0xfd99, 0, 0, 0, 0, 0, 0, 2);
const A_MAC: &str = "02:00:00:99:00:01";
const B_MAC: &str = "02:00:00:99:00:02";
/// DSCP 26 (a common RoCE class) in the TOS byte.
const ROCE_TOS: u8 = 26 << 2;
/// Not the default (4791): the labs pick their own well-known port.
const PORT: u16 = 47_910;
const A_ID: u32 = 0x00_0A01;
const B_ID: u32 = 0x00_0B02;
const MS: u64 = 1_000_000;

/// Hosts A (10.99.0.1) and B (10.99.0.2) on one veth pair.
struct Pair {
    a: Netns,
    b: Netns,
}

fn pair(tag: &str) -> Pair {
    let a = Netns::add(&format!("{tag}a"));
    let b = Netns::add(&format!("{tag}b"));
    a.ip(&[
        "link", "add", "va", "address", A_MAC, "type", "veth", "peer", "name", "vb", "address",
        B_MAC, "netns", &b.name,
    ]);
    a.ip(&["addr", "add", "10.99.0.1/24", "dev", "va"]);
    b.ip(&["addr", "add", "10.99.0.2/24", "dev", "vb"]);
    // No duplicate address detection: usable as soon as the link is up.
    a.ip(&["addr", "add", "fd99::1/64", "dev", "va", "nodad"]);
    b.ip(&["addr", "add", "fd99::2/64", "dev", "vb", "nodad"]);
    a.ip(&["link", "set", "va", "up"]);
    b.ip(&["link", "set", "vb", "up"]);
    // Neighbour discovery's first solicitation on a veth just raised can go unanswered,
    // and the next waits a second (RFC 4861 §10 RetransTimer), longer than a test: the
    // IPv6 neighbours are given (ARP resolves at once, so IPv4 keeps it, as hosts do).
    a.ip(&[
        "neigh",
        "add",
        "fd99::2",
        "lladdr",
        B_MAC,
        "dev",
        "va",
        "nud",
        "permanent",
    ]);
    b.ip(&[
        "neigh",
        "add",
        "fd99::1",
        "lladdr",
        A_MAC,
        "dev",
        "vb",
        "nud",
        "permanent",
    ]);
    Pair { a, b }
}

fn udp_config(local: impl Into<IpAddr>) -> UdpConfig {
    UdpConfig {
        port: PORT,
        ..UdpConfig::new(local.into())
    }
}

/// A responding agent in `ns` until `stop`; ready once its socket is bound.
fn responder(
    ns: &Netns,
    config: EngineConfig,
    udp: UdpConfig,
    stop: Arc<AtomicBool>,
) -> JoinHandle<(EngineStats, UdpStats, usize)> {
    let (ready_tx, ready_rx) = mpsc::channel();
    let handle = ns.spawn(move || {
        let transport = UdpTransport::new(udp).expect("responder transport");
        let mut engine = Engine::new(transport, config, Vec::new()).expect("responder engine");
        ready_tx.send(()).expect("signal ready");
        let deadline = Instant::now() + Duration::from_secs(5);
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            engine
                .step(Duration::from_millis(1))
                .expect("responder step");
        }
        // Past the send-timestamp wait, every send has completed and is counted.
        engine
            .run_for(Duration::from_millis(30))
            .expect("responder drain");
        (
            engine.stats().clone(),
            engine.transport().stats(),
            engine.transport().source_sockets(),
        )
    });
    ready_rx
        .recv_timeout(Duration::from_secs(2))
        .expect("responder did not start");
    handle
}

struct ProbeRun {
    reports: Vec<ProbeReport<IpAddr>>,
    stats: EngineStats,
    udp: UdpStats,
    timestamping: TimestampingSupport,
    source_sockets: usize,
}

/// A probing agent in `ns`: `count` probes to `targets` in turn, then waits (at most
/// `limit`) until each probe has a report.
fn prober(
    ns: &Netns,
    config: EngineConfig,
    udp: UdpConfig,
    targets: Vec<ProbeTarget<IpAddr>>,
    count: u64,
    limit: Duration,
) -> ProbeRun {
    ns.spawn(move || {
        let transport = UdpTransport::new(udp).expect("prober transport");
        assert!(
            transport.rx_timestamps_ready(),
            "the kernel did not start stamping receptions"
        );
        let timestamping = transport.timestamping();
        let config = EngineConfig {
            max_probes: Some(count),
            ..config
        };
        let mut engine = Engine::new(transport, config, targets).expect("prober engine");
        let mut reports = Vec::new();
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline && (reports.len() as u64) < count {
            engine.step(Duration::from_millis(1)).expect("prober step");
            reports.extend(engine.take_reports());
        }
        ProbeRun {
            reports,
            stats: engine.stats().clone(),
            udp: engine.transport().stats(),
            timestamping,
            source_sockets: engine.transport().source_sockets(),
        }
    })
    .join()
    .expect("prober thread")
}

fn engine_config(id: u32, incarnation: u32) -> EngineConfig {
    EngineConfig {
        probe_interval: Duration::from_millis(2),
        prober: ProberConfig {
            timeout_ns: 300 * MS,
            max_outstanding: 256,
        },
        ..EngineConfig::new(id, incarnation)
    }
}

fn target(addr: impl Into<IpAddr>, src_port: u16, responder_id: u32) -> ProbeTarget<IpAddr> {
    ProbeTarget {
        addr: addr.into(),
        src_port,
        responder_id,
    }
}

/// (network RTT, prober delay, responder delay) of each answered probe; panics on others.
fn answered(run: &ProbeRun) -> Vec<(u64, u64, u64)> {
    run.reports
        .iter()
        .map(|report| match report {
            ProbeReport::Finished { result, clocks, .. } => match result.outcome {
                ProbeOutcome::Answered {
                    network_rtt_ns,
                    prober_delay_ns,
                    responder_delay_ns,
                    hardware_timestamps,
                } => {
                    assert!(!hardware_timestamps, "veth has no NIC clock: {report:?}");
                    assert_eq!(
                        (clocks.prober, clocks.responder),
                        (
                            Some(TimestampSource::Software),
                            Some(TimestampSource::Software)
                        ),
                        "both sides measured on kernel software timestamps: {report:?}"
                    );
                    (network_rtt_ns, prober_delay_ns, responder_delay_ns)
                }
                other => panic!("probe {} not answered: {other:?}", result.seq),
            },
            ProbeReport::NotSent { error, .. } => panic!("probe not sent: {error}"),
        })
        .collect()
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// (a) Probes over veth get both ACKs; the network RTT is small and positive and measured
/// on kernel software timestamps, as is the responder's delay.
#[test]
fn probes_over_veth_are_answered_with_both_acks_on_software_timestamps() {
    let _serial = serial();
    let lab = pair("a");
    let stop = Arc::new(AtomicBool::new(false));
    let b = responder(
        &lab.b,
        engine_config(B_ID, 7),
        udp_config(B_IP),
        stop.clone(),
    );
    let run = prober(
        &lab.a,
        engine_config(A_ID, 3),
        udp_config(A_IP),
        vec![target(B_IP, 50_001, B_ID), target(B_IP, 50_002, B_ID)],
        20,
        Duration::from_millis(1500),
    );
    stop.store(true, Ordering::Relaxed);
    let (b_stats, b_udp, _) = b.join().expect("responder thread");

    assert_eq!(run.reports.len(), 20, "{:?}", run.reports);
    let measured = answered(&run);
    for &(rtt, prober_delay, responder_delay) in &measured {
        assert!(rtt > 0 && rtt < MS, "network RTT {rtt} ns");
        assert!(responder_delay > 0, "responder delay {responder_delay} ns");
        assert!(prober_delay < 300 * MS, "prober delay {prober_delay} ns");
    }
    // Both source ports were used, each from its own socket.
    assert_eq!(run.source_sockets, 2);
    assert_eq!(run.timestamping, TimestampingSupport::SoftwareAndHardware);
    // Every send and receive on both sides carried a kernel software timestamp.
    assert_eq!(run.udp.tx.software, 20, "{:?}", run.udp);
    assert_eq!(run.udp.rx.software, 40, "{:?}", run.udp);
    assert_eq!((run.udp.tx.host_clock, run.udp.rx.host_clock), (0, 0));
    assert_eq!(
        (run.udp.tx.hardware, run.udp.rx.hardware),
        (0, 0),
        "veth gives no NIC timestamps"
    );
    assert_eq!((b_stats.acks_sent, b_stats.delay_acks_sent), (20, 20));
    assert_eq!(b_udp.rx.software, 20);
    assert_eq!(b_udp.tx.software, 40, "{b_udp:?}");
    assert_eq!(b_stats.drops.malformed() + b_stats.drops.refused(), 0);
    println!(
        "veth: median network RTT {} ns, prober delay {} ns, responder delay {} ns",
        median(measured.iter().map(|m| m.0).collect()),
        median(measured.iter().map(|m| m.1).collect()),
        median(measured.iter().map(|m| m.2).collect()),
    );
}

/// The same over IPv6 (the error queue's messages come at the IPv6 level there).
#[test]
fn probes_over_ipv6_are_answered_too() {
    let _serial = serial();
    let lab = pair("6");
    let stop = Arc::new(AtomicBool::new(false));
    let b = responder(
        &lab.b,
        engine_config(B_ID, 2),
        udp_config(B_IP6),
        stop.clone(),
    );
    let run = prober(
        &lab.a,
        engine_config(A_ID, 2),
        udp_config(A_IP6),
        vec![target(B_IP6, 50_601, B_ID)],
        10,
        Duration::from_millis(1000),
    );
    stop.store(true, Ordering::Relaxed);
    let (b_stats, b_udp, _) = b.join().expect("responder thread");
    assert_eq!(run.reports.len(), 10, "{:?}", run.reports);
    for (rtt, _, responder_delay) in answered(&run) {
        assert!(rtt > 0 && rtt < MS && responder_delay > 0);
    }
    assert_eq!(
        (run.udp.tx.software, run.udp.rx.software),
        (10, 20),
        "{:?}",
        run.udp
    );
    assert_eq!(b_udp.tx.software, 20, "{b_udp:?}");
    assert_eq!(b_stats.delay_acks_sent, 10);
}

/// (b) A responder that holds its first ACK D = 3 ms: the responder delay is D (plus the
/// wake-up), the network RTT is what it was without the hold.
///
/// Bound: the medians of 15 probes each differ by less than 5 µs (the accuracy
/// for software timestamps). The hold happens between ③ and ④, both kernel timestamps,
/// so it is subtracted exactly; what is left of the RTT is veth forwarding with bottom
/// halves disabled (a few µs), which the threads' scheduling does not stretch; the
/// median discards the odd probe that met an interrupt. The responder delay is at least D
/// (the hold starts after ③) and, in the median, less than D + 1 ms of timer and
/// scheduling slack on a shared machine.
#[test]
fn a_held_first_ack_shows_as_responder_delay_not_as_network_rtt() {
    let _serial = serial();
    const HOLD: Duration = Duration::from_millis(3);
    let lab = pair("b");
    let mut results = Vec::new();
    for (incarnation, hold) in [(1, Duration::ZERO), (2, HOLD)] {
        let stop = Arc::new(AtomicBool::new(false));
        let b = responder(
            &lab.b,
            EngineConfig {
                ack_hold: hold,
                ..engine_config(B_ID, incarnation)
            },
            udp_config(B_IP),
            stop.clone(),
        );
        let run = prober(
            &lab.a,
            engine_config(A_ID, incarnation),
            udp_config(A_IP),
            vec![target(B_IP, 50_010, B_ID)],
            15,
            Duration::from_millis(800),
        );
        stop.store(true, Ordering::Relaxed);
        b.join().expect("responder thread");
        assert_eq!(run.reports.len(), 15, "{:?}", run.reports);
        results.push(answered(&run));
    }
    let rtt = |i: usize| median(results[i].iter().map(|m| m.0).collect());
    let delay = |i: usize| median(results[i].iter().map(|m| m.2).collect());
    let min_delay = results[1].iter().map(|m| m.2).min().unwrap_or(0);
    let hold = u64::try_from(HOLD.as_nanos()).unwrap_or(u64::MAX);
    println!(
        "baseline: RTT {} ns, responder delay {} ns; hold {hold} ns: RTT {} ns, responder delay {} ns (min {min_delay})",
        rtt(0),
        delay(0),
        rtt(1),
        delay(1)
    );
    assert!(
        rtt(0).abs_diff(rtt(1)) < 5_000,
        "the hold moved the network RTT: {} ns → {} ns",
        rtt(0),
        rtt(1)
    );
    assert!(delay(0) < MS, "baseline responder delay {} ns", delay(0));
    assert!(
        min_delay >= hold,
        "responder delay {min_delay} ns < hold {hold} ns"
    );
    assert!(
        delay(1) < hold + MS,
        "responder delay {} ns for a {hold} ns hold",
        delay(1)
    );
}

/// A probe payload for the responder `responder_id`, as a prober `A_ID` would send it.
fn probe_payload(seq: u64, responder_id: u32) -> [u8; 50] {
    ProbeRepr {
        kind: ProbeKind::Probe,
        hardware_timestamps: false,
        host_clock_timestamps: false,
        seq,
        prober_qpn: A_ID,
        responder_qpn: responder_id,
        sent_ns: 1_000 + seq,
        responder_delay_ns: 0,
        prober_incarnation: 9,
        responder_incarnation: 0,
        src_port: 0,
    }
    .to_bytes()
    .expect("probe encodes")
}

fn bind(ip: Ipv4Addr, port: u16) -> UdpSocket {
    let socket = UdpSocket::bind(SocketAddr::new(IpAddr::V4(ip), port))
        .unwrap_or_else(|e| panic!("bind {ip}:{port}: {e}"));
    socket
        .set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    socket
}

/// Receives one datagram on `socket` (with `IP_RECVTOS` on): its sender, payload and TOS.
fn recv_with_tos(socket: &UdpSocket) -> (SocketAddr, Vec<u8>, Option<u8>) {
    let mut buf = [0u8; 128];
    let mut cmsg = nix::cmsg_space!(nix::libc::c_int);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )
    .expect("a datagram");
    let tos = msg.cmsgs().ok().and_then(|mut cmsgs| {
        cmsgs.find_map(|c| match c {
            ControlMessageOwned::Ipv4Tos(tos) => Some(tos),
            _ => None,
        })
    });
    let peer = msg
        .address
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|v4| SocketAddr::new(IpAddr::V4(v4.ip()), v4.port()))
        })
        .expect("an IPv4 sender");
    let n = msg.bytes;
    (peer, buf[..n].to_vec(), tos)
}

/// (c) On the wire: a probe leaves from its target's source port, and both ACKs come back
/// from that same source port to the prober's well-known port (the reverse 5-tuple), in
/// the traffic class configured.
#[test]
fn acks_take_the_reverse_five_tuple_of_their_probe() {
    let _serial = serial();
    let lab = pair("c");
    // The responder engine in B answers probes a plain socket in A sends.
    let stop = Arc::new(AtomicBool::new(false));
    let b = responder(
        &lab.b,
        engine_config(B_ID, 1),
        UdpConfig {
            tos: Some(ROCE_TOS),
            ..udp_config(B_IP)
        },
        stop.clone(),
    );
    let seen = lab
        .a
        .spawn(|| {
            let well_known = bind(A_IP, PORT);
            setsockopt(&well_known, sockopt::IpRecvTos, &true).expect("IP_RECVTOS");
            let mut seen = Vec::new();
            for (seq, src_port) in [(1u64, 50_123u16), (2, 61_000)] {
                let source = bind(A_IP, src_port);
                source
                    .send_to(&probe_payload(seq, B_ID), (B_IP, PORT))
                    .expect("send probe");
                for _ in 0..2 {
                    let (peer, payload, tos) = recv_with_tos(&well_known);
                    let ack = ProbeRepr::from_bytes(&payload).expect("an ACK payload");
                    assert_eq!(tos, Some(ROCE_TOS), "{:?} TOS", ack.kind);
                    seen.push((src_port, peer, ack.kind, ack.seq));
                }
                // Nothing comes back to the source port itself.
                source.set_nonblocking(true).expect("nonblocking");
                let mut buf = [0u8; 128];
                assert!(
                    source.recv_from(&mut buf).is_err(),
                    "datagram at the source port"
                );
            }
            seen
        })
        .join()
        .expect("plain prober thread");
    stop.store(true, Ordering::Relaxed);
    b.join().expect("responder thread");
    assert_eq!(seen.len(), 4);
    for (src_port, peer, kind, seq) in &seen {
        assert_eq!(
            *peer,
            SocketAddr::new(IpAddr::V4(B_IP), *src_port),
            "{kind:?} for probe {seq} came from {peer}, not from the probe's source port"
        );
    }
    let kinds: Vec<_> = seen.iter().map(|s| (s.3, s.2)).collect();
    assert_eq!(
        kinds,
        [
            (1, ProbeKind::Ack),
            (1, ProbeKind::DelayAck),
            (2, ProbeKind::Ack),
            (2, ProbeKind::DelayAck)
        ]
    );

    // The prober engine in A sends from its target's source port to B's well-known port.
    let (ready_tx, ready_rx) = mpsc::channel();
    let listener = lab.b.spawn(move || {
        let socket = bind(B_IP, PORT);
        ready_tx.send(()).expect("ready");
        let mut buf = [0u8; 128];
        let (n, peer) = socket.recv_from(&mut buf).expect("a probe");
        (
            peer,
            ProbeRepr::from_bytes(&buf[..n]).expect("a probe payload"),
        )
    });
    ready_rx
        .recv_timeout(Duration::from_secs(2))
        .expect("listener ready");
    let run = prober(
        &lab.a,
        EngineConfig {
            prober: ProberConfig {
                timeout_ns: 50 * MS,
                max_outstanding: 4,
            },
            ..engine_config(A_ID, 5)
        },
        udp_config(A_IP),
        vec![target(B_IP, 55_555, B_ID)],
        1,
        Duration::from_millis(500),
    );
    let (peer, probe) = listener.join().expect("listener thread");
    assert_eq!(peer, SocketAddr::new(IpAddr::V4(A_IP), 55_555));
    assert_eq!(
        (
            probe.kind,
            probe.prober_qpn,
            probe.responder_qpn,
            probe.prober_incarnation
        ),
        (ProbeKind::Probe, A_ID, B_ID, 5)
    );
    // Nobody answered it: a timeout.
    assert!(matches!(
        run.reports.as_slice(),
        [ProbeReport::Finished { result, .. }]
            if result.outcome == ProbeOutcome::Timeout { ack: false, delay_ack: false }
    ));
}

/// (d) Short, foreign, future-version, misaddressed and stray datagrams are counted by
/// reason and dropped; the responder still answers the next good probe, and only it.
#[test]
fn bad_datagrams_are_counted_by_reason_and_ignored() {
    let _serial = serial();
    let lab = pair("d");
    let stop = Arc::new(AtomicBool::new(false));
    let b = responder(
        &lab.b,
        engine_config(B_ID, 1),
        udp_config(B_IP),
        stop.clone(),
    );
    let answers = lab
        .a
        .spawn(|| {
            let well_known = bind(A_IP, PORT);
            let source = bind(A_IP, 50_200);
            let mut future = probe_payload(1, B_ID);
            future[4] = hawkmesh_wire::probe::PROBE_VERSION + 1;
            let mut stray_ack = probe_payload(2, B_ID);
            stray_ack[5] = 2; // an ACK for a probe B never sent
            let bad: [&[u8]; 5] = [
                &future,
                &[1, 2, 3],
                &probe_payload(3, B_ID + 1),
                &stray_ack,
                &[0xAB; 50],
            ];
            for datagram in bad {
                source.send_to(datagram, (B_IP, PORT)).expect("send");
            }
            source
                .send_to(&probe_payload(7, B_ID), (B_IP, PORT))
                .expect("send the good probe");
            let mut answers = Vec::new();
            let mut buf = [0u8; 128];
            while let Ok((n, _)) = well_known.recv_from(&mut buf) {
                let ack = ProbeRepr::from_bytes(&buf[..n]).expect("an ACK payload");
                answers.push((ack.seq, ack.kind));
                if answers.len() == 2 {
                    // Anything else would come within this wait.
                    well_known
                        .set_read_timeout(Some(Duration::from_millis(100)))
                        .expect("read timeout");
                }
            }
            answers
        })
        .join()
        .expect("sender thread");
    stop.store(true, Ordering::Relaxed);
    let (stats, _, _) = b.join().expect("responder thread");
    assert_eq!(answers, [(7, ProbeKind::Ack), (7, ProbeKind::DelayAck)]);
    let drops = stats.drops;
    assert_eq!(
        (
            drops.unsupported_version,
            drops.truncated,
            drops.wrong_responder,
            drops.not_ours,
            drops.bad_magic
        ),
        (1, 1, 1, 1, 1),
        "{drops:?}"
    );
    assert_eq!(drops.malformed() + drops.refused(), 5);
    let last = stats.last_drop.unwrap_or_default();
    assert!(
        last.contains("source port 50200") && last.contains("bytes 0..4: magic 0xabababab"),
        "{last}"
    );
    assert_eq!((stats.acks_sent, stats.delay_acks_sent), (1, 1));
}

/// (e) A responder that never answers gives a timeout after the configured timeout; a
/// neighbour that does not exist too (its probe never reaches the driver, so its send
/// completes on the host clock); an unrouted address is refused at once, with the reason.
#[test]
fn silent_absent_and_unrouted_targets() {
    let _serial = serial();
    const TIMEOUT_NS: u64 = 150 * MS;
    let lab = pair("e");
    let run = prober(
        &lab.a,
        EngineConfig {
            prober: ProberConfig {
                timeout_ns: TIMEOUT_NS,
                max_outstanding: 16,
            },
            ..engine_config(A_ID, 1)
        },
        udp_config(A_IP),
        vec![
            // B exists but runs no agent.
            target(B_IP, 50_300, B_ID),
            // Nobody has this address on the link.
            target(Ipv4Addr::new(10, 99, 0, 77), 50_301, B_ID),
            // No route.
            target(Ipv4Addr::new(10, 200, 0, 1), 50_302, B_ID),
        ],
        3,
        Duration::from_millis(1500),
    );
    assert_eq!(run.reports.len(), 3, "{:?}", run.reports);
    let mut timeouts = 0;
    for report in &run.reports {
        match report {
            ProbeReport::Finished {
                result,
                clocks,
                at_ns,
            } => {
                assert_eq!(
                    result.outcome,
                    ProbeOutcome::Timeout {
                        ack: false,
                        delay_ack: false
                    }
                );
                let waited = at_ns - result.sent_ns;
                assert!(
                    (TIMEOUT_NS..TIMEOUT_NS + 100 * MS).contains(&waited),
                    "timed out after {waited} ns"
                );
                assert_eq!((clocks.prober, clocks.responder), (None, None));
                timeouts += 1;
            }
            ProbeReport::NotSent { target, error, .. } => {
                assert_eq!(target.addr, IpAddr::V4(Ipv4Addr::new(10, 200, 0, 1)));
                let text = error.to_string();
                assert!(
                    text.starts_with("sendto (10.99.0.1:50302 -> 10.200.0.1:47910): ")
                        && text.contains("unreachable"),
                    "{text}"
                );
            }
        }
    }
    assert_eq!(timeouts, 2);
    assert_eq!(
        (run.stats.probes_sent, run.stats.probes_not_sent),
        (2, 1),
        "{:?}",
        run.stats
    );
    // The refused send reset its socket's timestamp ids.
    assert_eq!(run.udp.tx_resyncs, 1, "{:?}", run.udp);
    // B's probe left (kernel timestamp); the absent neighbour's never reached the driver.
    assert_eq!(
        (run.udp.tx.software, run.udp.tx.host_clock),
        (1, 1),
        "{:?}",
        run.udp
    );
}

/// Probes from many distinct source ports (a flood, or a large pinglist) keep both sides'
/// socket caches within their bounds, and every probe is still answered from its own port.
#[test]
fn source_port_caches_stay_bounded_and_correct_under_many_ports() {
    let _serial = serial();
    let lab = pair("f");
    let stop = Arc::new(AtomicBool::new(false));
    let b = responder(
        &lab.b,
        engine_config(B_ID, 1),
        UdpConfig {
            max_source_sockets: 4,
            ..udp_config(B_IP)
        },
        stop.clone(),
    );
    let targets = (0..40).map(|i| target(B_IP, 51_000 + i, B_ID)).collect();
    let run = prober(
        &lab.a,
        EngineConfig {
            probe_interval: Duration::from_micros(500),
            ..engine_config(A_ID, 1)
        },
        UdpConfig {
            max_source_sockets: 3,
            ..udp_config(A_IP)
        },
        targets,
        40,
        Duration::from_millis(1500),
    );
    stop.store(true, Ordering::Relaxed);
    let (b_stats, b_udp, b_sockets) = b.join().expect("responder thread");
    assert_eq!(
        run.reports.len(),
        40,
        "responder: {b_stats:?} {b_udp:?}; prober: {:?}",
        run.stats
    );
    assert_eq!(b_stats.ack_send_failures, 0, "{b_stats:?}");
    answered(&run);
    assert!(run.source_sockets <= 3 && b_sockets <= 4);
    assert_eq!(run.udp.sockets_opened, 40, "{:?}", run.udp);
    // The responder opens each port at least once, again when a delay ACK finds its port
    // evicted by the probes handled since; all but the open ones were closed.
    assert!(b_udp.sockets_opened >= 40, "{b_udp:?}");
    assert_eq!(
        b_udp.sockets_evicted,
        b_udp.sockets_opened - b_sockets as u64,
        "{b_udp:?}"
    );
    // No send lost its timestamp to an eviction.
    assert_eq!((run.udp.tx.host_clock, b_udp.tx.host_clock), (0, 0));
    assert_eq!(b_stats.delay_acks_sent, 40);
}
