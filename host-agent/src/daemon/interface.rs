//! The interfaces' thread: for each, an [`Engine`] over its [`Link`] (kernel UDP or RDMA verbs),
//! probing the targets of its current [`Plan`] and answering other agents' probes, turning
//! each finished probe into the `pb::ProbeResult` the controller takes; with path tracing,
//! tracing the 5-tuples it probes and answers on ([`Tracer`]) between the engine's steps;
//! with polling, feeding the service-tracing probes' RTTs to HAWKEYE's detector and sending
//! the polling packet for a connection whose RTT crosses the threshold ([`Trigger`]).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hawkmesh_proto::v1 as pb;

use hawkmesh_wire::polling::Polling;
use hawkmesh_wire::telemetry::FiveTuple;

use super::link::Link;
use super::metrics::InterfaceMetrics;
use super::plan::{Plan, TargetInfo, TargetKey};
use super::trace::{Path, PortMap, TraceKey, Tracer};
use crate::detector::{RttDetector, POLLING_HOP_LIMIT};
use crate::engine::{Engine, EngineStats, ProbeClocks, ProbeReport, ProbeTarget};
use crate::polling_sender::{PollingSendError, PollingSender};
use crate::probe::ProbeOutcome;
use crate::transport::{TimestampSource, UdAddr};
use crate::udp::{host_now_ns, IcmpKind};
use hawkmesh_wire::dataplane::ROCEV2_UDP_PORT;

/// A stopping interface waits at least this long for its last ACKs.
const STEP: Duration = Duration::from_millis(5);
/// How often the engine's counters are copied to the metrics.
const STATS_EVERY: Duration = Duration::from_millis(200);
/// How often the same unsendable target is logged at most.
const NOT_SENT_LOG_EVERY: Duration = Duration::from_secs(60);
/// Targets whose last refusal is remembered for the log's rate limit at most.
const NOT_SENT_LOG_TARGETS: usize = 4096;

/// RTT-triggered polling (HAWKEYE §3.2) on an interface's service connections: the
/// service-tracing probes' network RTTs go to the detector, and a trigger sends the
/// polling packet for the connection's 5-tuple (RoCEv2: destination port 4791).
#[derive(Debug)]
pub struct Trigger {
    /// The detector.
    pub detector: RttDetector,
    /// The sender (raw socket, rate-limited).
    pub sender: PollingSender,
}

impl Trigger {
    /// The victim 5-tuple of a service connection from `local` on `target` (IPv4 only: the
    /// polling header carries IPv4 addresses).
    pub fn victim(local: IpAddr, target: &ProbeTarget<UdAddr>) -> Option<FiveTuple> {
        let (IpAddr::V4(src), IpAddr::V4(dst)) = (local, target.addr.ip()) else {
            return None;
        };
        Some(FiveTuple {
            src_ip: src.octets(),
            dst_ip: dst.octets(),
            src_port: target.src_port,
            dst_port: ROCEV2_UDP_PORT,
            protocol: 17,
        })
    }

    /// Feeds a finished service-tracing probe; sends a poll if the detector says so.
    fn observe(
        &mut self,
        nic: u32,
        local: IpAddr,
        result: &crate::probe::ProbeResult<ProbeTarget<UdAddr>>,
        m: &InterfaceMetrics,
    ) {
        let Some(victim) = Self::victim(local, &result.target) else {
            return;
        };
        let now = host_now_ns();
        let trigger = match result.outcome {
            ProbeOutcome::Answered { network_rtt_ns, .. } => {
                self.detector.observe(victim, network_rtt_ns, None, now)
            }
            // Unanswered for the whole timeout: stuck since it was sent.
            ProbeOutcome::Timeout { .. } => {
                self.detector
                    .observe_stall(victim, result.sent_ns, None, now)
            }
            ProbeOutcome::Inconsistent => None,
        };
        let Some(trigger) = trigger else {
            return;
        };
        let polling = Polling::new(trigger.event_id, trigger.victim, POLLING_HOP_LIMIT);
        match self.sender.send(&polling, now) {
            Ok(()) => {
                m.polls_sent.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    nic,
                    victim = %victim,
                    rtt_us = trigger.rtt_ns / 1_000,
                    base_rtt_us = trigger.base_rtt_ns / 1_000,
                    event_id = format!("{:#x}", trigger.event_id),
                    "a service connection's RTT crossed the threshold: HAWKEYE polling sent"
                );
            }
            Err(PollingSendError::Limited { .. }) => {
                m.polls_limited.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => {
                m.polls_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(nic, victim = %victim, %error, "a polling packet was not sent");
            }
        }
    }
}

/// A detector host id for the event ids of `host`'s interface `nic` (24 bits, FNV-1a):
/// event ids must differ between the agents polling one fabric.
pub fn detector_host_id(host: &str, nic: u32) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for b in host.bytes().chain(nic.to_be_bytes()) {
        hash ^= u32::from(b);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (hash ^ (hash >> 24)) & 0x00FF_FFFF
}

/// A result waiting for its batch, with its traced path.
#[derive(Clone, Debug, PartialEq)]
pub struct Finished {
    /// The result (without paths: the batch puts them in its path table).
    pub result: pb::ProbeResult,
    /// The probe 5-tuple's traced path, if known.
    pub path: Option<Path>,
}

/// A path this interface traced for the ACKs it sends, waiting for its batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Route {
    /// This interface's NIC.
    pub nic: u32,
    /// The prober's host.
    pub prober_host: String,
    /// The prober's NIC.
    pub prober_nic: u32,
    /// The 5-tuple's source port.
    pub src_port: u16,
    /// The path.
    pub path: Path,
}

/// `pb::ResultBatch.results`' field number (proto/proto/pingmesh.proto).
pub const RESULTS_FIELD: u32 = 4;

/// A batch's path table: each distinct path once, numbered from 1.
#[derive(Debug, Default)]
pub struct PathTable {
    paths: Vec<pb::Path>,
    numbers: HashMap<Vec<(String, u32)>, u32>,
}

impl PathTable {
    /// `path`'s number in the table (added if new); 0 for no path.
    pub fn number(&mut self, path: &[pb::Hop]) -> u32 {
        if path.is_empty() {
            return 0;
        }
        let key: Vec<(String, u32)> = path.iter().map(|h| (h.node.clone(), h.port)).collect();
        let paths = &mut self.paths;
        *self.numbers.entry(key).or_insert_with(|| {
            paths.push(pb::Path {
                hops: path.to_vec(),
            });
            paths.len() as u32
        })
    }

    /// The paths, in number order.
    pub fn into_paths(self) -> Vec<pb::Path> {
        self.paths
    }
}

/// A batch's worth of results, encoded as they finished (each `pb::ProbeResult` as field
/// [`RESULTS_FIELD`] of a `pb::ResultBatch`), with the batch's path table.
#[derive(Debug, Default)]
pub struct Chunk {
    /// The encoded results.
    pub encoded: Vec<u8>,
    /// How many.
    pub count: u64,
    /// The paths they refer to.
    pub table: PathTable,
}

/// Results and ACK routes waiting for the next batch, each bounded: beyond the bound the
/// oldest are dropped. Results are kept encoded, ~50 bytes each instead of ~170 decoded
/// (1,200 a second for 5 s at the overhead benchmark's load: 0.3 MB instead of 1.4 MB),
/// in chunks of at most a batch's worth; the oldest chunk goes whole when the bound is
/// passed.
#[derive(Debug)]
pub struct Pending {
    chunks: VecDeque<Chunk>,
    routes: VecDeque<Route>,
    limit: usize,
    per_chunk: u64,
    len: usize,
    dropped: u64,
}

impl Pending {
    /// At most `limit` results, in batches of at most `per_batch`.
    pub fn new(limit: usize, per_batch: usize) -> Self {
        let limit = limit.max(1);
        Pending {
            chunks: VecDeque::new(),
            routes: VecDeque::new(),
            limit,
            per_chunk: per_batch.clamp(1, limit) as u64,
            len: 0,
            dropped: 0,
        }
    }

    /// Adds an ACK route (the oldest dropped beyond the bound: it is traced again later).
    pub fn push_route(&mut self, route: Route) {
        while self.routes.len() >= self.limit {
            self.routes.pop_front();
        }
        self.routes.push_back(route);
    }

    /// Takes every ACK route waiting.
    pub fn take_routes(&mut self) -> Vec<Route> {
        self.routes.drain(..).collect()
    }

    /// Adds a result; returns how many old ones were dropped for it.
    pub fn push(&mut self, result: Finished) -> u64 {
        if self.chunks.back().is_none_or(|c| c.count >= self.per_chunk) {
            self.chunks.push_back(Chunk::default());
        }
        let Some(chunk) = self.chunks.back_mut() else {
            return 0;
        };
        let mut encoded = result.result;
        if let Some(path) = result.path {
            encoded.path_ref = chunk.table.number(&path);
        }
        prost::encoding::message::encode(RESULTS_FIELD, &encoded, &mut chunk.encoded);
        chunk.count += 1;
        self.len += 1;
        // A chunk holds at most `limit` results: beyond the bound there are two or more.
        let mut dropped = 0;
        while self.len > self.limit && self.chunks.len() > 1 {
            if let Some(old) = self.chunks.pop_front() {
                self.len -= old.count as usize;
                dropped += old.count;
            }
        }
        self.dropped += dropped;
        dropped
    }

    /// Takes every result waiting, a chunk per batch.
    pub fn take(&mut self) -> Vec<Chunk> {
        self.len = 0;
        self.chunks.drain(..).collect()
    }

    /// Results waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// How a probe's clock is told to the controller.
pub fn clock(source: Option<TimestampSource>) -> pb::TimestampSource {
    match source {
        Some(TimestampSource::Hardware) => pb::TimestampSource::Nic,
        Some(TimestampSource::Software) => pb::TimestampSource::Kernel,
        Some(TimestampSource::HostClock) => pb::TimestampSource::HostClock,
        None => pb::TimestampSource::Unspecified,
    }
}

/// The result to upload for a finished probe of the interface `nic` to the target `known`
/// stands for, or `None` for one that is not a measurement (its timestamps contradict each
/// other) or whose target is unknown.
pub fn result_of(
    nic: u32,
    known: Option<&TargetInfo>,
    result: &crate::probe::ProbeResult<ProbeTarget<UdAddr>>,
    clocks: ProbeClocks,
) -> Option<pb::ProbeResult> {
    let target = &result.target;
    let known = known?;
    let mut out = pb::ProbeResult {
        prober_nic: nic,
        target_host: known.host.clone(),
        target_nic: known.nic,
        target_qpn: target.responder_id,
        kind: known.kind as i32,
        src_port: u32::from(target.src_port),
        // ① on CLOCK_REALTIME (UdpTransport::now_ns): the wall clock the analyzer groups
        // results into periods by and checks against its own.
        sent_ns: result.sent_ns,
        ..pb::ProbeResult::default()
    };
    match result.outcome {
        ProbeOutcome::Answered {
            network_rtt_ns,
            prober_delay_ns,
            responder_delay_ns,
            ..
        } => {
            out.status = pb::ProbeStatus::Answered as i32;
            out.network_rtt_ns = network_rtt_ns;
            out.prober_delay_ns = prober_delay_ns;
            out.responder_delay_ns = responder_delay_ns;
            out.prober_clock = clock(clocks.prober) as i32;
            out.responder_clock = clock(clocks.responder) as i32;
        }
        ProbeOutcome::Timeout { ack, delay_ack } => {
            out.status = pb::ProbeStatus::Timeout as i32;
            out.ack = ack;
            out.delay_ack = delay_ack;
        }
        ProbeOutcome::Inconsistent => return None,
    }
    Some(out)
}

/// What an interface shares with the daemon.
#[derive(Debug)]
pub struct Shared {
    /// The next plan to take (the latest wins).
    pub plan: Mutex<Option<Plan>>,
    /// Stop probing, finish the probes in flight, return.
    pub stop: AtomicBool,
}

/// A running interface: its mailbox (the thread serving it is [`Interfaces::thread`]).
#[derive(Debug)]
pub struct Interface {
    /// Its NIC index.
    pub nic: u32,
    /// Shared with the thread.
    pub shared: Arc<Shared>,
}

/// The interfaces and the one thread serving them all.
#[derive(Debug)]
pub struct Interfaces {
    /// In the order they were given.
    pub interfaces: Vec<Interface>,
    /// The thread, returning each engine's counters in the same order.
    pub thread: JoinHandle<Vec<EngineStats>>,
}

/// Settings of an interface.
#[derive(Debug)]
pub struct Settings {
    /// NIC index.
    pub nic: u32,
    /// The interface's address.
    pub local: IpAddr,
    /// RTT-triggered polling on the service connections, when on.
    pub trigger: Option<Trigger>,
    /// The probe timeout (a stop waits this long for the probes in flight).
    pub timeout: Duration,
    /// Path tracing, when on: the interface's tracer and the address map.
    pub tracing: Option<(Tracer, Arc<PortMap>)>,
    /// Lab hook: the responder's ACK hold in µs, read at every step.
    pub ack_hold_us: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// Lab hook: every result is also sent here (dropped when full).
    pub tap: Option<std::sync::mpsc::SyncSender<pb::ProbeResult>>,
    /// PARALEON's RTT window (tuning on): answered probes' network RTTs.
    pub rtts: Option<Arc<Mutex<super::tuning::RttWindow>>>,
}

/// One interface as the thread runs it.
struct Lane {
    run: Run,
    engine: Engine<Link>,
    shared: Arc<Shared>,
    /// Its metrics' index.
    index: usize,
    /// When the stop was seen.
    stopping_since: Option<Instant>,
    /// Stopped: its probes in flight finished or timed out.
    done: bool,
}

/// Starts the one thread that serves every interface whose engine is built (`lanes`: the
/// settings, the engine and the index of its metrics); results go to `pending`.
///
/// The thread wakes once per `tick` and, for each interface, sends what fell due and
/// handles what arrived (without blocking: every datagram since the last tick is
/// waiting). One thread woken at a fixed pace replaces one per interface woken by every
/// datagram and send timestamp (~660 times a second each at 150 probes/s): in the
/// overhead benchmark, scheduling was half the agent's CPU. Handling late does not move
/// an RTT: its ends are kernel or NIC timestamps, and the responder reports the time it
/// held a probe (R-Pingmesh §4.1: ④−③), which the network RTT excludes.
pub fn spawn_all(
    lanes: Vec<(Settings, Engine<Link>, usize)>,
    metrics: Arc<super::metrics::Metrics>,
    pending: Arc<Mutex<Pending>>,
    tick: Duration,
) -> std::io::Result<Interfaces> {
    let mut interfaces = Vec::with_capacity(lanes.len());
    let mut running = Vec::with_capacity(lanes.len());
    for (mut settings, engine, index) in lanes {
        let shared = Arc::new(Shared {
            plan: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        interfaces.push(Interface {
            nic: settings.nic,
            shared: shared.clone(),
        });
        running.push(Lane {
            run: Run {
                tracing: settings.tracing.take(),
                hold_us: 0,
                icmp_logged: HashMap::new(),
                settings,
                info: HashMap::new(),
                previous: HashMap::new(),
                not_sent_logged: HashMap::new(),
                last_stats: Instant::now(),
            },
            engine,
            shared,
            index,
            stopping_since: None,
            done: false,
        });
    }
    let thread = std::thread::Builder::new()
        .name("hawkmesh-nics".into())
        .spawn(move || serve(running, &metrics, &pending, tick))?;
    Ok(Interfaces { interfaces, thread })
}

/// The thread: a round over every interface per tick until all have stopped.
fn serve(
    mut lanes: Vec<Lane>,
    metrics: &super::metrics::Metrics,
    pending: &Mutex<Pending>,
    tick: Duration,
) -> Vec<EngineStats> {
    let tick = tick.max(Duration::from_micros(1));
    let mut next_wake = Instant::now();
    loop {
        for lane in lanes.iter_mut().filter(|l| !l.done) {
            let Some(m) = metrics.interfaces.get(lane.index) else {
                lane.done = true;
                continue;
            };
            lane.round(m, pending, metrics);
        }
        if lanes.iter().all(|l| l.done) {
            break;
        }
        // The next tick on a fixed grid; a late round skips the ticks it missed rather
        // than running them back to back. A held ACK (the lab's busy responder) is sent on
        // time, not at the tick after.
        next_wake += tick;
        let now = Instant::now();
        if next_wake <= now {
            next_wake = now + tick;
        }
        let held = lanes
            .iter()
            .filter(|l| !l.done)
            .filter_map(|l| l.engine.next_held_ack_in())
            .min();
        let wait = match held {
            Some(due) => (next_wake - now).min(due),
            None => next_wake - now,
        };
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
    lanes
        .into_iter()
        .map(|l| l.engine.stats().clone())
        .collect()
}

impl Lane {
    /// One interface's turn: the stop or a new plan, the engine's step (sends due,
    /// timeouts, everything received), path tracing, results, counters.
    fn round(
        &mut self,
        m: &InterfaceMetrics,
        pending: &Mutex<Pending>,
        metrics: &super::metrics::Metrics,
    ) {
        let nic = self.run.settings.nic;
        if self.stopping_since.is_none() && self.shared.stop.load(Ordering::Acquire) {
            // Stop probing; keep answering while our probes in flight finish.
            let _ = self.engine.set_targets(Vec::new());
            self.stopping_since = Some(Instant::now());
        }
        if let Some(since) = self.stopping_since {
            let waited = since.elapsed();
            if self.engine.outstanding() == 0 && waited >= STEP
                || waited > self.run.settings.timeout + Duration::from_millis(100)
            {
                // The last reports, including the timeouts of probes still in flight.
                self.run.reports(&mut self.engine, m, pending, metrics);
                self.run.copy_stats(&self.engine, m, true);
                self.done = true;
                return;
            }
        } else if let Some(plan) = self.shared.plan.lock().ok().and_then(|mut p| p.take()) {
            self.run.install(&mut self.engine, plan, m);
        }
        self.run.hold(&mut self.engine);
        if let Err(error) = self.engine.step(Duration::ZERO) {
            tracing::warn!(nic, %error, "polling the interface's sockets failed");
        }
        self.run.trace(&mut self.engine, m, pending);
        self.run.reports(&mut self.engine, m, pending, metrics);
        self.run.copy_stats(&self.engine, m, false);
    }
}

struct Run {
    settings: Settings,
    tracing: Option<(Tracer, Arc<PortMap>)>,
    /// The ACK hold in force, µs.
    hold_us: u64,
    /// When ICMP errors about each destination were last logged.
    icmp_logged: HashMap<IpAddr, Instant>,
    info: HashMap<TargetKey, TargetInfo>,
    /// The plan before: probes to its targets may still be in flight.
    previous: HashMap<TargetKey, TargetInfo>,
    not_sent_logged: HashMap<IpAddr, Instant>,
    last_stats: Instant,
}

impl Run {
    fn install(&mut self, engine: &mut Engine<Link>, plan: Plan, m: &InterfaceMetrics) {
        let nic = self.settings.nic;
        for reason in &plan.refused {
            tracing::warn!(nic, "{reason}");
        }
        let count = plan.targets.len();
        if count > 0 {
            if let Err(error) = engine.set_probe_interval(plan.interval) {
                tracing::error!(nic, %error, "the pinglist's probe interval is refused");
                return;
            }
        }
        if let Err(error) = engine.set_targets(plan.targets) {
            tracing::error!(nic, %error, "the pinglist's targets are refused");
            return;
        }
        // Results of probes to targets no longer listed still find their names.
        self.previous = std::mem::replace(&mut self.info, plan.info);
        if let Some((tracer, _)) = &mut self.tracing {
            let now = host_now_ns();
            for key in self.info.keys() {
                tracer.need(
                    TraceKey {
                        peer: key.0,
                        src_port: key.1,
                    },
                    now,
                );
            }
        }
        let services = self
            .info
            .values()
            .filter(|i| i.kind == pb::ProbeKind::ServiceTracing)
            .count();
        m.targets.store(count as u64, Ordering::Relaxed);
        m.service_targets.store(services as u64, Ordering::Relaxed);
        tracing::info!(
            nic,
            targets = count,
            service_connections = services,
            interval_us = plan.interval.as_micros() as u64,
            "probing a new pinglist"
        );
    }

    fn reports(
        &mut self,
        engine: &mut Engine<Link>,
        m: &InterfaceMetrics,
        pending: &Mutex<Pending>,
        metrics: &super::metrics::Metrics,
    ) {
        let reports = engine.take_reports();
        if reports.is_empty() {
            return;
        }
        let mut results = Vec::with_capacity(reports.len());
        for report in reports {
            match report {
                ProbeReport::Finished { result, clocks, .. } => {
                    match result.outcome {
                        ProbeOutcome::Answered {
                            network_rtt_ns,
                            responder_delay_ns,
                            ..
                        } => {
                            m.probes_answered.fetch_add(1, Ordering::Relaxed);
                            m.network_rtt.observe(network_rtt_ns);
                            m.responder_delay.observe(responder_delay_ns);
                            if [clocks.prober, clocks.responder]
                                .contains(&Some(TimestampSource::HostClock))
                            {
                                m.host_clock_results.fetch_add(1, Ordering::Relaxed);
                                if m.host_clock_results.load(Ordering::Relaxed) == 1 {
                                    tracing::warn!(
                                        nic = self.settings.nic,
                                        prober = ?clocks.prober,
                                        responder = ?clocks.responder,
                                        "a probe was measured on the host clock: no kernel or NIC timestamp came (results say so in prober_clock / responder_clock)"
                                    );
                                }
                            }
                        }
                        ProbeOutcome::Timeout { .. } => {
                            m.probes_timeout.fetch_add(1, Ordering::Relaxed);
                        }
                        ProbeOutcome::Inconsistent => {
                            m.probes_inconsistent.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    let t = &result.target;
                    let peer = t.addr.ip();
                    let key = (peer, t.src_port, t.responder_id);
                    let known = self.info.get(&key).or_else(|| self.previous.get(&key));
                    if known.is_some_and(|k| k.kind == pb::ProbeKind::ServiceTracing) {
                        if matches!(result.outcome, ProbeOutcome::Answered { .. }) {
                            m.service_probes_answered.fetch_add(1, Ordering::Relaxed);
                        }
                        if let Some(trigger) = &mut self.settings.trigger {
                            trigger.observe(self.settings.nic, self.settings.local, &result, m);
                        }
                    }
                    if let Some(r) = result_of(self.settings.nic, known, &result, clocks) {
                        let path = self.tracing.as_mut().and_then(|(tracer, _)| {
                            let key = TraceKey {
                                peer,
                                src_port: t.src_port,
                            };
                            tracer.need(key, host_now_ns())
                        });
                        if let Some(tap) = &self.settings.tap {
                            let _ = tap.try_send(r.clone());
                        }
                        if let Some(rtts) = &self.settings.rtts {
                            if r.status == pb::ProbeStatus::Answered as i32 {
                                if let Ok(mut w) = rtts.lock() {
                                    w.observe(
                                        r.prober_nic,
                                        &r.target_host,
                                        r.target_nic,
                                        r.network_rtt_ns,
                                    );
                                }
                            }
                        }
                        results.push(Finished { result: r, path });
                    }
                }
                ProbeReport::NotSent { target, error, .. } => {
                    let now = Instant::now();
                    let addr = target.addr.ip();
                    let due = self
                        .not_sent_logged
                        .get(&addr)
                        .is_none_or(|at| now.duration_since(*at) >= NOT_SENT_LOG_EVERY);
                    if due {
                        if self.not_sent_logged.len() >= NOT_SENT_LOG_TARGETS {
                            self.not_sent_logged.clear();
                        }
                        self.not_sent_logged.insert(addr, now);
                        tracing::error!(
                            nic = self.settings.nic,
                            target = %target.addr,
                            "a probe cannot be sent: {error} (is the target's RNIC address routed from this interface?)"
                        );
                    }
                }
            }
        }
        let produced = results.len() as u64;
        let dropped = match pending.lock() {
            Ok(mut p) => results.into_iter().map(|r| p.push(r)).sum(),
            Err(_) => produced,
        };
        metrics
            .results
            .fetch_add(produced, std::sync::atomic::Ordering::Relaxed);
        metrics
            .results_dropped_pending
            .fetch_add(dropped, Ordering::Relaxed);
    }

    /// Applies the lab hook's ACK hold when it changed.
    fn hold(&mut self, engine: &mut Engine<Link>) {
        let Some(hook) = &self.settings.ack_hold_us else {
            return;
        };
        let hold = hook.load(Ordering::Relaxed);
        if hold != self.hold_us {
            self.hold_us = hold;
            engine.set_ack_hold(Duration::from_micros(hold));
        }
    }

    /// Path tracing between steps: the ACK 5-tuples answered on are needed too; ICMP
    /// answers move traces on; due traces start; finished ones become ACK routes.
    fn trace(&mut self, engine: &mut Engine<Link>, m: &InterfaceMetrics, pending: &Mutex<Pending>) {
        let nic = self.settings.nic;
        let Some((tracer, map)) = &mut self.tracing else {
            let _ = engine.take_answered();
            return;
        };
        let now = host_now_ns();
        for (peer, src_port) in engine.take_answered() {
            tracer.need(
                TraceKey {
                    peer: peer.ip(),
                    src_port,
                },
                now,
            );
        }
        let mut sends = Vec::new();
        for report in engine.transport_mut().take_icmp() {
            if let IcmpKind::Unreachable(code) = report.kind {
                m.icmp_unreachable.fetch_add(1, Ordering::Relaxed);
                if let Some((to, port)) = report.destination {
                    let due = self
                        .icmp_logged
                        .get(&to)
                        .is_none_or(|at| at.elapsed() >= NOT_SENT_LOG_EVERY);
                    if due {
                        if self.icmp_logged.len() >= NOT_SENT_LOG_TARGETS {
                            self.icmp_logged.clear();
                        }
                        self.icmp_logged.insert(to, Instant::now());
                        tracing::warn!(
                            nic,
                            "datagrams from source port {} to {to}:{port} are answered ICMP destination unreachable (code {code}) by {:?}: no agent listens there, or it is not routed",
                            report.src_port,
                            report.offender
                        );
                    }
                }
            }
            sends.extend(tracer.on_icmp(&report, now));
        }
        sends.extend(tracer.poll(now));
        for send in sends {
            if let Err(error) = engine.transport_mut().send_trace(
                &send.key.peer,
                send.key.src_port,
                send.ttl,
                &send.payload,
            ) {
                tracing::debug!(nic, %error, "a trace datagram was not sent");
            }
        }
        let finished = tracer.take_finished();
        if !finished.is_empty() {
            if let Ok(mut p) = pending.lock() {
                for (key, path) in finished {
                    if let Some((prober_host, prober_nic)) = map.rnic(key.peer) {
                        p.push_route(Route {
                            nic,
                            prober_host,
                            prober_nic,
                            src_port: key.src_port,
                            path,
                        });
                    }
                }
            }
        }
        let counts = tracer.counts();
        m.traces_started.store(counts.started, Ordering::Relaxed);
        m.traces_completed
            .store(counts.completed, Ordering::Relaxed);
        if counts.failed > m.traces_failed.load(Ordering::Relaxed) {
            if let Some(reason) = &tracer.last_failure {
                tracing::debug!(nic, "{reason}");
            }
        }
        m.traces_failed.store(counts.failed, Ordering::Relaxed);
    }

    fn copy_stats(&mut self, engine: &Engine<Link>, m: &InterfaceMetrics, now: bool) {
        if !now && self.last_stats.elapsed() < STATS_EVERY {
            return;
        }
        self.last_stats = Instant::now();
        let s = engine.stats();
        m.probes_sent.store(s.probes_sent, Ordering::Relaxed);
        m.probes_not_sent
            .store(s.probes_not_sent, Ordering::Relaxed);
        m.acks_sent
            .store(s.acks_sent + s.delay_acks_sent, Ordering::Relaxed);
        m.datagrams_dropped
            .store(s.drops.malformed() + s.drops.refused(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ProbeTarget;

    #[test]
    fn results_name_their_target_and_say_which_clock_measured_them() {
        let addr: IpAddr = "10.0.1.1".parse().expect("an address");
        let mut info = HashMap::new();
        info.insert(
            (addr, 50_000, 77),
            TargetInfo {
                host: "h1".into(),
                nic: 1,
                kind: pb::ProbeKind::InterTor,
            },
        );
        let target = ProbeTarget {
            addr: UdAddr::of_ip(addr, 77),
            src_port: 50_000,
            responder_id: 77,
        };
        let answered = crate::probe::ProbeResult {
            target,
            seq: 3,
            sent_ns: 1_700_000_000_000_000_000,
            outcome: ProbeOutcome::Answered {
                network_rtt_ns: 9_000,
                prober_delay_ns: 20_000,
                responder_delay_ns: 15_000,
                hardware_timestamps: false,
            },
        };
        let clocks = ProbeClocks {
            prober: Some(TimestampSource::Software),
            responder: Some(TimestampSource::HostClock),
        };
        let known = info.get(&(addr, 50_000, 77));
        let r = result_of(2, known, &answered, clocks).expect("a result");
        assert_eq!(
            (
                r.prober_nic,
                r.target_host.as_str(),
                r.target_nic,
                r.target_qpn
            ),
            (2, "h1", 1, 77)
        );
        assert_eq!(r.kind, pb::ProbeKind::InterTor as i32);
        assert_eq!(r.status, pb::ProbeStatus::Answered as i32);
        assert_eq!(
            (r.network_rtt_ns, r.prober_delay_ns, r.responder_delay_ns),
            (9_000, 20_000, 15_000)
        );
        assert_eq!(r.prober_clock, pb::TimestampSource::Kernel as i32);
        assert_eq!(r.responder_clock, pb::TimestampSource::HostClock as i32);
        assert_eq!(r.sent_ns, 1_700_000_000_000_000_000);

        let timeout = crate::probe::ProbeResult {
            outcome: ProbeOutcome::Timeout {
                ack: true,
                delay_ack: false,
            },
            ..answered.clone()
        };
        let r = result_of(2, known, &timeout, clocks).expect("a result");
        assert_eq!(r.status, pb::ProbeStatus::Timeout as i32);
        assert!(r.ack && !r.delay_ack);
        assert_eq!(r.prober_clock, 0);

        let inconsistent = crate::probe::ProbeResult {
            outcome: ProbeOutcome::Inconsistent,
            ..answered.clone()
        };
        assert_eq!(result_of(2, known, &inconsistent, clocks), None);
        assert_eq!(result_of(2, None, &answered, clocks), None);
    }

    #[test]
    fn pending_results_stay_bounded_dropping_the_oldest() {
        let finished = |i: u64| Finished {
            result: pb::ProbeResult {
                sent_ns: i,
                ..pb::ProbeResult::default()
            },
            path: None,
        };
        let sent = |chunks: Vec<Chunk>| -> Vec<Vec<u64>> {
            chunks
                .iter()
                .map(|c| {
                    let batch = <pb::ResultBatch as prost::Message>::decode(&c.encoded[..])
                        .expect("a chunk decodes as a batch's results");
                    assert_eq!(batch.results.len() as u64, c.count);
                    batch.results.iter().map(|r| r.sent_ns).collect()
                })
                .collect()
        };
        let mut pending = Pending::new(3, 1);
        let dropped: u64 = (0..5u64).map(|i| pending.push(finished(i))).sum();
        assert_eq!(dropped, 2);
        assert_eq!(pending.len(), 3);
        assert_eq!(sent(pending.take()), [vec![2], vec![3], vec![4]]);
        assert!(pending.is_empty());
        // Chunks of two: the oldest chunk goes whole, the bound is kept.
        let mut pending = Pending::new(5, 2);
        let dropped: u64 = (0..7u64).map(|i| pending.push(finished(i))).sum();
        assert_eq!(dropped, 2);
        assert_eq!(sent(pending.take()), [vec![2, 3], vec![4, 5], vec![6]]);
        // A batch larger than the bound is cut to it.
        let mut pending = Pending::new(2, 10);
        let dropped: u64 = (0..3u64).map(|i| pending.push(finished(i))).sum();
        assert_eq!((dropped, pending.len()), (2, 1));
    }
}
