//! `hawkmesh-verbs-probe`: the probing engine over the RDMA verbs UD transport, one side of a
//! two-host run (the Soft-RoCE VM test, host-agent/tests/verbs_vm.rs, and hw-lab/connectx.md).
//!
//! ```text
//! hawkmesh-verbs-probe respond [--device D] [--gid-index N] [--control-port P] [--seconds S]
//! hawkmesh-verbs-probe probe --peer IPV4 [--device D] [--gid-index N] [--control-port P]
//!                      [--probes N] [--interval-ms MS] [--src-ports P,P,...] [--seconds S]
//!                      [--no-done]
//! hawkmesh-verbs-probe rc-serve [--flow-label L] [--device D] [--control-port P] [--seconds S]
//! hawkmesh-verbs-probe rc-connect --peer IPV4 [--flow-label L] [--device D] [--control-port P]
//!                      [--hold-seconds S]
//! hawkmesh-verbs-probe daemon --config FILE [--seconds S]      (with the `daemon` feature)
//! ```
//!
//! `daemon` runs `hawkmesh host-agent`'s daemon (the same code, `daemon::run_with`) for
//! `S` seconds and prints every result it queues for upload as an `HM result` line, then
//! its summary: the Soft-RoCE test's daemon phase, where the `hawkmesh` command line is not
//! in the guest.
//!
//! `rc-serve`/`rc-connect` open one RC connection with the GRH flow label `L` on both ends
//! (`verbs::RcConnection`) and exchange one message on it: a service connection for the
//! flow label → UDP source port check on the wire and for the eBPF tracer.
//!
//! The two sides learn each other's UD address over a kernel UDP exchange on the control
//! port (the prober asks `HELLO`, the responder answers `QPN <qpn> GID <gid>`; `DONE` ends
//! the responder), as rdma-core's `ibv_ud_pingpong` does over TCP. Everything is printed as
//! `HM ` lines for the test to parse: where the transport runs and on which clock, every
//! datagram sent and received with the source port its payload carries, every probe result
//! with the clocks it was measured on, and the counters.

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hawkmesh_host_agent::engine::{Engine, EngineConfig, ProbeReport, ProbeTarget};
use hawkmesh_host_agent::transport::{ProbeTransport, TransportError, TransportEvent};
use hawkmesh_host_agent::verbs::{RcConnection, RcEndpoint, UdAddr, VerbsConfig, VerbsTransport};
use hawkmesh_host_agent::{ProbeOutcome, ProberConfig};
use hawkmesh_wire::probe::{ProbeKind, ProbeRepr};

const USAGE: &str = "usage: hawkmesh-verbs-probe respond|probe|rc-serve|rc-connect|daemon \
                     [--peer IPV4] [--device D] [--gid-index N] [--control-port P] \
                     [--probes N] [--interval-ms MS] [--src-ports P,P,...] [--flow-label L] \
                     [--seconds S] [--hold-seconds S] [--config FILE] [--no-done]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Probe,
    Respond,
    RcServe,
    RcConnect,
    Daemon,
}

#[derive(Debug)]
struct Args {
    role: Role,
    /// The prober tells the responder to stop when it is done (`--no-done`: it does not,
    /// for another run against the same responder).
    done: bool,
    flow_label: u32,
    peer: Option<Ipv4Addr>,
    device: Option<String>,
    gid_index: Option<u32>,
    control_port: u16,
    probes: u64,
    interval: Duration,
    src_ports: Vec<u16>,
    seconds: u64,
    /// An RC connection stays open this long after its exchange (a service to trace).
    hold_seconds: u64,
    /// The daemon's configuration.
    config: Option<std::path::PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let role = args.next().ok_or("no role given")?;
    let role = match role.as_str() {
        "probe" => Role::Probe,
        "respond" => Role::Respond,
        "rc-serve" => Role::RcServe,
        "rc-connect" => Role::RcConnect,
        "daemon" => Role::Daemon,
        other => {
            return Err(format!(
                "role {other:?}: not probe, respond, rc-serve, rc-connect or daemon"
            ))
        }
    };
    let mut parsed = Args {
        role,
        done: true,
        flow_label: 0,
        peer: None,
        device: None,
        gid_index: None,
        control_port: 18_600,
        probes: 20,
        interval: Duration::from_millis(50),
        src_ports: vec![0xC001, 0xD00D, 0xFFFF],
        seconds: 120,
        hold_seconds: 0,
        config: None,
    };
    while let Some(flag) = args.next() {
        if flag == "--no-done" {
            parsed.done = false;
            continue;
        }
        let value = args.next().ok_or(format!("{flag}: no value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value:?}: {e}");
        match flag.as_str() {
            "--peer" => parsed.peer = Some(value.parse().map_err(|e| bad(&e))?),
            "--device" => parsed.device = Some(value),
            "--gid-index" => parsed.gid_index = Some(value.parse().map_err(|e| bad(&e))?),
            "--control-port" => parsed.control_port = value.parse().map_err(|e| bad(&e))?,
            "--probes" => parsed.probes = value.parse().map_err(|e| bad(&e))?,
            "--interval-ms" => {
                let ms: u64 = value.parse().map_err(|e| bad(&e))?;
                if ms == 0 {
                    return Err(bad(&"must be positive"));
                }
                parsed.interval = Duration::from_millis(ms);
            }
            "--src-ports" => {
                parsed.src_ports = value
                    .split(',')
                    .map(|p| p.trim().parse::<u16>().map_err(|e| bad(&e)))
                    .collect::<Result<_, _>>()?;
                if parsed.src_ports.is_empty() {
                    return Err(bad(&"no port"));
                }
            }
            "--seconds" => parsed.seconds = value.parse().map_err(|e| bad(&e))?,
            "--hold-seconds" => parsed.hold_seconds = value.parse().map_err(|e| bad(&e))?,
            "--config" => parsed.config = Some(value.into()),
            "--flow-label" => {
                let label = match value.strip_prefix("0x") {
                    Some(hex) => u32::from_str_radix(hex, 16),
                    None => value.parse(),
                }
                .map_err(|e| bad(&e))?;
                if label > 0xF_FFFF {
                    return Err(bad(&"a flow label has 20 bits"));
                }
                parsed.flow_label = label;
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if matches!(parsed.role, Role::Probe | Role::RcConnect) && parsed.peer.is_none() {
        return Err(format!("{role:?}: --peer is required"));
    }
    Ok(parsed)
}

/// The transport, printing every datagram it sends and receives.
#[derive(Debug)]
struct Tap(VerbsTransport);

fn describe_payload(payload: &[u8]) -> String {
    match ProbeRepr::from_bytes(payload) {
        Ok(p) => {
            let kind = match p.kind {
                ProbeKind::Probe => "probe",
                ProbeKind::Ack => "ack",
                ProbeKind::DelayAck => "delay-ack",
            };
            format!("kind={kind} seq={} payload_src_port={}", p.seq, p.src_port)
        }
        Err(e) => format!("kind=malformed error={e:?}"),
    }
}

impl ProbeTransport for Tap {
    type Addr = UdAddr;

    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }

    fn send(
        &mut self,
        to: &UdAddr,
        src_port: u16,
        payload: &[u8],
        token: u64,
    ) -> Result<u64, TransportError> {
        let result = self.0.send(to, src_port, payload, token);
        println!(
            "HM tx to={to} src_port={src_port} {} ok={}",
            describe_payload(payload),
            result.is_ok()
        );
        result
    }

    fn poll(
        &mut self,
        wait: Duration,
        events: &mut Vec<TransportEvent<UdAddr>>,
    ) -> Result<(), TransportError> {
        let start = events.len();
        let result = self.0.poll(wait, events);
        for event in &events[start..] {
            if let TransportEvent::Received {
                from,
                src_port,
                stamps,
                payload,
            } = event
            {
                println!(
                    "HM rx from={from} src_port={src_port} {} clock={:?}",
                    describe_payload(payload),
                    stamps.best().1
                );
            }
        }
        result
    }
}

fn open(args: &Args) -> Result<VerbsTransport, String> {
    let transport = VerbsTransport::open(VerbsConfig {
        device: args.device.clone(),
        gid_index: args.gid_index,
        ..VerbsConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let local = transport.local_addr();
    println!(
        "HM local device={} gid_index={} addr={local} qpn={} mtu={} inline={}",
        transport.device(),
        transport.gid_index(),
        local.qpn,
        transport.mtu(),
        transport.max_inline()
    );
    println!("HM clock {}", transport.completion_clock());
    Ok(transport)
}

fn incarnation() -> u32 {
    // Different at each start: the low bits of the host clock.
    (hawkmesh_host_agent::udp::host_now_ns() & 0xFFFF_FFFF) as u32 | 1
}

fn respond(args: &Args) -> Result<(), String> {
    let transport = open(args)?;
    let local = transport.local_addr();
    let control = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, args.control_port))
        .map_err(|e| format!("control socket on port {}: {e}", args.control_port))?;
    control
        .set_nonblocking(true)
        .map_err(|e| format!("control socket: {e}"))?;
    let config = EngineConfig::new(local.qpn, incarnation());
    let mut engine = Engine::new(Tap(transport), config, Vec::new()).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut buf = [0u8; 64];
    let mut done = false;
    while !done && Instant::now() < deadline {
        engine
            .step(Duration::from_millis(5))
            .map_err(|e| e.to_string())?;
        while let Ok((n, from)) = control.recv_from(&mut buf) {
            match &buf[..n] {
                b"HELLO" => {
                    let reply = format!("QPN {} GID {}", local.qpn, local.gid_ip());
                    // A lost reply is asked for again.
                    let _ = control.send_to(reply.as_bytes(), from);
                }
                b"DONE" => done = true,
                _ => {}
            }
        }
    }
    let stats = engine.stats();
    println!(
        "HM responder acks={} delay_acks={} ack_send_failures={} drops={:?} last_drop={:?} \
         last_send_error={:?} done={done}",
        stats.acks_sent,
        stats.delay_acks_sent,
        stats.ack_send_failures,
        stats.drops,
        stats.last_drop,
        stats.last_send_error
    );
    println!("HM verbs-stats {:?}", engine.transport().0.stats());
    Ok(())
}

/// Asks the responder for its QPN and GID until it answers.
fn discover(control: &UdpSocket, peer: SocketAddr, deadline: Instant) -> Result<UdAddr, String> {
    let mut buf = [0u8; 128];
    while Instant::now() < deadline {
        control
            .send_to(b"HELLO", peer)
            .map_err(|e| format!("HELLO to {peer}: {e}"))?;
        if let Ok((n, _)) = control.recv_from(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            let fields: Vec<&str> = text.split_whitespace().collect();
            if let ["QPN", qpn, "GID", gid] = fields.as_slice() {
                let qpn: u32 = qpn
                    .parse()
                    .map_err(|e| format!("reply {text:?} from {peer}: QPN: {e}"))?;
                let gid: std::net::Ipv6Addr = gid
                    .parse()
                    .map_err(|e| format!("reply {text:?} from {peer}: GID: {e}"))?;
                return Ok(UdAddr {
                    gid: gid.octets(),
                    qpn,
                });
            }
            return Err(format!("reply {text:?} from {peer}: not QPN <n> GID <gid>"));
        }
    }
    Err(format!("no answer from the responder at {peer}"))
}

fn probe(args: &Args) -> Result<(), String> {
    let peer_ip = args.peer.ok_or("no --peer")?;
    let transport = open(args)?;
    let local = transport.local_addr();
    let control =
        UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).map_err(|e| format!("control socket: {e}"))?;
    control
        .set_read_timeout(Some(Duration::from_millis(300)))
        .map_err(|e| format!("control socket: {e}"))?;
    let peer_control = SocketAddr::from((peer_ip, args.control_port));
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let responder = discover(&control, peer_control, deadline)?;
    println!("HM peer addr={responder} qpn={}", responder.qpn);
    // What a real device must refuse, before anything is sent: a source port no flow
    // label gives, and a message longer than one MTU.
    let mut transport = transport;
    let oversize = vec![0u8; transport.mtu() + 1];
    for (port, payload) in [(4791u16, &[0u8; 50][..]), (0xC000, &oversize[..])] {
        match transport.send(&responder, port, payload, u64::MAX) {
            Ok(_) => {
                return Err(format!(
                    "a send from port {port} of {} bytes was posted",
                    payload.len()
                ))
            }
            Err(e) => println!("HM refused {e}"),
        }
    }
    let targets: Vec<ProbeTarget<UdAddr>> = args
        .src_ports
        .iter()
        .map(|&src_port| ProbeTarget {
            addr: responder,
            src_port,
            responder_id: responder.qpn,
        })
        .collect();
    let config = EngineConfig {
        probe_interval: args.interval,
        max_probes: Some(args.probes),
        // Emulated machines are slow: two seconds before a probe is lost.
        prober: ProberConfig {
            timeout_ns: 2_000_000_000,
            ..ProberConfig::default()
        },
        ..EngineConfig::new(local.qpn, incarnation())
    };
    let mut engine = Engine::new(Tap(transport), config, targets).map_err(|e| e.to_string())?;
    let mut finished = 0;
    while finished < args.probes && Instant::now() < deadline {
        engine
            .step(Duration::from_millis(5))
            .map_err(|e| e.to_string())?;
        for report in engine.take_reports() {
            finished += 1;
            match report {
                ProbeReport::Finished { result, clocks, .. } => {
                    let outcome = match result.outcome {
                        ProbeOutcome::Answered {
                            network_rtt_ns,
                            prober_delay_ns,
                            responder_delay_ns,
                            hardware_timestamps,
                        } => format!(
                            "answered rtt_ns={network_rtt_ns} prober_delay_ns={prober_delay_ns} \
                             responder_delay_ns={responder_delay_ns} hw={hardware_timestamps}"
                        ),
                        ProbeOutcome::Timeout { ack, delay_ack } => {
                            format!("timeout ack={ack} delay_ack={delay_ack}")
                        }
                        ProbeOutcome::Inconsistent => "inconsistent".into(),
                    };
                    println!(
                        "HM result seq={} src_port={} outcome={outcome} prober_clock={:?} \
                         responder_clock={:?}",
                        result.seq, result.target.src_port, clocks.prober, clocks.responder
                    );
                }
                ProbeReport::NotSent { target, error, .. } => {
                    println!(
                        "HM result src_port={} outcome=not-sent error={error}",
                        target.src_port
                    );
                }
            }
        }
    }
    for _ in 0..3 {
        if !args.done {
            break;
        }
        let _ = control.send_to(b"DONE", peer_control);
    }
    let stats = engine.stats();
    println!(
        "HM prober finished={finished} sent={} not_sent={} drops={:?} last_drop={:?}",
        stats.probes_sent, stats.probes_not_sent, stats.drops, stats.last_drop
    );
    println!("HM verbs-stats {:?}", engine.transport().0.stats());
    if finished < args.probes {
        return Err(format!(
            "{finished} of {} probes finished in time",
            args.probes
        ));
    }
    Ok(())
}

fn endpoint_text(e: &RcEndpoint) -> String {
    format!("RC {} {} {}", e.qpn, e.psn, std::net::Ipv6Addr::from(e.gid))
}

fn parse_endpoint(text: &str) -> Result<RcEndpoint, String> {
    let fields: Vec<&str> = text.split_whitespace().collect();
    let ["RC", qpn, psn, gid] = fields.as_slice() else {
        return Err(format!("{text:?}: not RC <qpn> <psn> <gid>"));
    };
    Ok(RcEndpoint {
        qpn: qpn.parse().map_err(|e| format!("{text:?}: QPN: {e}"))?,
        psn: psn.parse().map_err(|e| format!("{text:?}: PSN: {e}"))?,
        gid: gid
            .parse::<std::net::Ipv6Addr>()
            .map_err(|e| format!("{text:?}: GID: {e}"))?
            .octets(),
    })
}

/// One RC connection with the flow label on both ends, one message each way.
fn rc(args: &Args) -> Result<(), String> {
    let config = VerbsConfig {
        device: args.device.clone(),
        gid_index: args.gid_index,
        ..VerbsConfig::default()
    };
    let mut connection = RcConnection::create(&config).map_err(|e| e.to_string())?;
    let local = connection.local();
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut buf = [0u8; 128];
    let (peer, client) = if args.role == Role::RcServe {
        let control = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, args.control_port))
            .map_err(|e| format!("control socket on port {}: {e}", args.control_port))?;
        control
            .set_read_timeout(Some(Duration::from_millis(300)))
            .map_err(|e| format!("control socket: {e}"))?;
        loop {
            if Instant::now() > deadline {
                return Err("no RC client came".into());
            }
            let Ok((n, from)) = control.recv_from(&mut buf) else {
                continue;
            };
            let peer = parse_endpoint(&String::from_utf8_lossy(&buf[..n]))?;
            control
                .send_to(endpoint_text(&local).as_bytes(), from)
                .map_err(|e| format!("reply to {from}: {e}"))?;
            break (peer, false);
        }
    } else {
        let peer_ip = args.peer.ok_or("no --peer")?;
        let control = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
            .map_err(|e| format!("control socket: {e}"))?;
        control
            .set_read_timeout(Some(Duration::from_millis(300)))
            .map_err(|e| format!("control socket: {e}"))?;
        let server = SocketAddr::from((peer_ip, args.control_port));
        loop {
            if Instant::now() > deadline {
                return Err(format!("no RC server answered at {server}"));
            }
            control
                .send_to(endpoint_text(&local).as_bytes(), server)
                .map_err(|e| format!("to {server}: {e}"))?;
            if let Ok((n, _)) = control.recv_from(&mut buf) {
                break (parse_endpoint(&String::from_utf8_lossy(&buf[..n]))?, true);
            }
        }
    };
    connection
        .connect(peer, args.flow_label)
        .map_err(|e| e.to_string())?;
    let message = if client {
        &b"hawkmesh rc ping"[..]
    } else {
        &b"hawkmesh rc pong"[..]
    };
    let got = connection
        .exchange(client, message, Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    println!(
        "HM rc-fl local_qpn={:#x} remote_qpn={:#x} flow_label={:#x} received={:?}",
        local.qpn,
        peer.qpn,
        args.flow_label,
        String::from_utf8_lossy(&got)
    );
    if args.hold_seconds > 0 {
        // Kept open (its QPs alive) for the service tracing of the daemon phase.
        std::thread::sleep(Duration::from_secs(args.hold_seconds));
        println!("HM rc-fl closed local_qpn={:#x}", local.qpn);
    }
    Ok(())
}

/// The daemon for `--seconds`, its results as `HM result` lines.
#[cfg(feature = "daemon")]
fn daemon(args: &Args) -> Result<(), String> {
    use hawkmesh_host_agent::daemon::{self, DaemonConfig, Hooks};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let path = args.config.as_ref().ok_or("no --config")?;
    let config = DaemonConfig::load(path).map_err(|e| e.to_string())?;
    let (tap, results) = std::sync::mpsc::sync_channel::<hawkmesh_proto::v1::ProbeResult>(100_000);
    let stop = Arc::new(AtomicBool::new(false));
    let printer = std::thread::spawn(move || {
        for r in results {
            println!(
                "HM result kind={} status={} target={}:{} target_qpn={:#x} src_port={} \
                 prober_clock={} responder_clock={} network_rtt_ns={} responder_delay_ns={}",
                r.kind,
                r.status,
                r.target_host,
                r.target_nic,
                r.target_qpn,
                r.src_port,
                r.prober_clock,
                r.responder_clock,
                r.network_rtt_ns,
                r.responder_delay_ns
            );
        }
    });
    let flag = stop.clone();
    let seconds = args.seconds;
    let timer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(seconds));
        flag.store(true, Ordering::Release);
    });
    let hooks = Hooks {
        results: Some(tap),
        ..Hooks::default()
    };
    let summary = daemon::run_with(&config, stop, hooks).map_err(|e| e.to_string())?;
    let _ = timer.join();
    let _ = printer.join();
    println!(
        "HM daemon-summary incarnation={} sent={} answered={} timeout={} results={} delivered={} undelivered={}",
        summary.incarnation,
        summary.probes_sent,
        summary.probes_answered,
        summary.probes_timeout,
        summary.results,
        summary.results_delivered,
        summary.undelivered()
    );
    Ok(())
}

#[cfg(not(feature = "daemon"))]
fn daemon(_args: &Args) -> Result<(), String> {
    Err("built without the daemon (cargo feature `daemon`)".into())
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("hawkmesh-verbs-probe: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match args.role {
        Role::Probe => probe(&args),
        Role::Respond => respond(&args),
        Role::RcServe | Role::RcConnect => rc(&args),
        Role::Daemon => daemon(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("HM error {e}");
            eprintln!("hawkmesh-verbs-probe: {e}");
            ExitCode::FAILURE
        }
    }
}
