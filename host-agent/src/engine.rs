//! The probing engine of one agent interface: a [`Prober`] and a [`Responder`] over any
//! [`ProbeTransport`], driven from one thread by [`Engine::step`].
//!
//! - Probes go round-robin to a list of [`ProbeTarget`]s, one every
//!   [`EngineConfig::probe_interval`], each from its target's source port.
//! - Incoming probes are answered with both ACKs (R-Pingmesh §4.1, Fig. 4): the first at
//!   once, to the probe's source address and from its source port (the reverse 5-tuple);
//!   the delay ACK when the first ACK's send completion ④ is known, carrying ④−③.
//! - Send completions become ② and ④; receptions ③ and ⑤; the transport's host clock gives
//!   ① and ⑥. Each interval takes one clock for both its ends ([`Stamps::common_clock`]):
//!   the engine holds a probe's first ACK until the probe's own completion is known, so ②
//!   and ⑤ are read on the same clock, and measures ④−③ itself
//!   ([`Responder::on_ack_sent_measured`]). Every result says which clock each side used
//!   ([`ProbeClocks`]).
//! - Malformed datagrams and refused probes or ACKs are counted by reason
//!   ([`DropCounts`]) and dropped; nothing a peer sends makes the engine fail.
//!
//! Queue pair numbers: the kernel-UDP transport has none, so each agent interface is given
//! a 24-bit id ([`EngineConfig::id`], at most [`MAX_ID`]: the width of a QPN in the
//! InfiniBand BTH) that stands for its QPN in the payload — the prober's id in its probes,
//! the responder id a probe is addressed to. On the verbs transport it is the UD QPN.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use hawkmesh_wire::probe::{ProbeError, ProbeKind, ProbeRepr};
use thiserror::Error;

use crate::probe::{AckRejected, ProbeRejected, ProbeResult, Prober, ProberConfig, Responder};
use crate::transport::{ProbeTransport, Stamps, TimestampSource, TransportError, TransportEvent};

/// The largest id (a QPN is 24 bits).
pub const MAX_ID: u32 = 0x00FF_FFFF;

/// ACK 5-tuples remembered for [`Engine::take_answered`] at most (more are not kept until
/// the caller takes them).
const MAX_ANSWERED: usize = 4096;

/// Probes sent in one step at most when the engine fell behind its rate (a stalled thread
/// catches up by skipping, not by a burst).
const MAX_PROBE_BURST: u64 = 8;

/// Whom to probe.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProbeTarget<A> {
    /// The responder agent's address.
    pub addr: A,
    /// The 5-tuple's source port for this target (ECMP follows it; its ACKs keep it).
    pub src_port: u16,
    /// The responder's id (its QPN on verbs; its configured 24-bit id on kernel UDP).
    pub responder_id: u32,
}

/// How an engine runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// This interface's 24-bit id (its QPN on verbs), at most [`MAX_ID`].
    pub id: u32,
    /// This agent's incarnation (drawn at its start; a restart takes a new one).
    pub incarnation: u32,
    /// Timeout and in-flight bound of the prober.
    pub prober: ProberConfig,
    /// Time between two probes (to the targets in turn).
    pub probe_interval: Duration,
    /// Probes the responder keeps waiting for their first ACK's completion at most.
    pub max_pending_acks: usize,
    /// Fault injection for labs and tests: the responder holds each first ACK this long
    /// after handling the probe, as a responder whose CPU is busy would (zero: none).
    pub ack_hold: Duration,
    /// Reports kept until [`Engine::take_reports`] at most; beyond, the oldest are dropped
    /// (counted).
    pub max_reports: usize,
    /// Probes to send in all (a one-shot run), or `None` to probe for as long as the engine
    /// runs. Probes the transport refused count.
    pub max_probes: Option<u64>,
}

impl EngineConfig {
    /// Defaults for the interface `id` of an agent started as `incarnation`: the paper's
    /// 500 ms timeout, 150 probes per second, no hold.
    pub fn new(id: u32, incarnation: u32) -> Self {
        EngineConfig {
            id,
            incarnation,
            prober: ProberConfig::default(),
            probe_interval: Duration::from_nanos(1_000_000_000 / 150),
            max_pending_acks: 4096,
            ack_hold: Duration::ZERO,
            max_reports: 65_536,
            max_probes: None,
        }
    }
}

/// A setting or target the engine cannot use.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum EngineError {
    /// An id wider than a QPN.
    #[error("{place}: id {id:#x} does not fit in 24 bits (at most {MAX_ID:#x})")]
    IdOutOfRange {
        /// Where it was given.
        place: String,
        /// The id.
        id: u32,
    },
    /// Another bad setting.
    #[error("{place}: {reason}")]
    Invalid {
        /// The setting.
        place: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Which clock each side of a probe used (`None`: that part never completed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeClocks {
    /// The prober's ②→⑤ interval.
    pub prober: Option<TimestampSource>,
    /// The responder's ③→④ interval, as its delay ACK says.
    pub responder: Option<TimestampSource>,
}

/// What became of a probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeReport<A> {
    /// Answered, timed out or inconsistent.
    Finished {
        /// The prober's result.
        result: ProbeResult<ProbeTarget<A>>,
        /// The clocks its intervals were measured on.
        clocks: ProbeClocks,
        /// When the engine produced it (host clock).
        at_ns: u64,
    },
    /// The transport refused to send it (unroutable target, source port taken…): the
    /// network never saw it, so it is no timeout.
    NotSent {
        /// Whom it was for.
        target: ProbeTarget<A>,
        /// When (host clock).
        at_ns: u64,
        /// Why.
        error: TransportError,
    },
}

/// Datagrams dropped, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    /// Shorter than a probe payload.
    pub truncated: u64,
    /// Not a hawkmesh probe (wrong magic).
    pub bad_magic: u64,
    /// A layout version this build does not read.
    pub unsupported_version: u64,
    /// An unknown kind.
    pub bad_kind: u64,
    /// Reserved bits set.
    pub reserved: u64,
    /// A delay in a probe or first ACK.
    pub unexpected_delay: u64,
    /// Hardware and host-clock flags together.
    pub conflicting_clocks: u64,
    /// A probe for another responder id (a stale pinglist).
    pub wrong_responder: u64,
    /// An ACK for another prober id or an earlier incarnation.
    pub not_ours: u64,
    /// An ACK for no probe in flight (finished or expired).
    pub unknown_probe: u64,
    /// An ACK echoing other values than its probe had (forged or damaged).
    pub mismatch: u64,
    /// An ACK that already arrived.
    pub duplicate: u64,
}

impl DropCounts {
    /// Datagrams that were not well-formed probe payloads.
    pub fn malformed(&self) -> u64 {
        self.truncated
            + self.bad_magic
            + self.unsupported_version
            + self.bad_kind
            + self.reserved
            + self.unexpected_delay
            + self.conflicting_clocks
    }

    /// Well-formed payloads refused by the prober or the responder.
    pub fn refused(&self) -> u64 {
        self.wrong_responder + self.not_ours + self.unknown_probe + self.mismatch + self.duplicate
    }

    fn malformed_payload(&mut self, error: &ProbeError) {
        match error {
            ProbeError::Truncated { .. } => self.truncated += 1,
            ProbeError::BadMagic { .. } => self.bad_magic += 1,
            ProbeError::UnsupportedVersion { .. } => self.unsupported_version += 1,
            ProbeError::BadKind { .. } => self.bad_kind += 1,
            ProbeError::Reserved { .. } => self.reserved += 1,
            ProbeError::UnexpectedDelay { .. } => self.unexpected_delay += 1,
            ProbeError::ConflictingClocks => self.conflicting_clocks += 1,
        }
    }

    fn ack_rejected(&mut self, rejected: AckRejected) {
        match rejected {
            // An ACK routed to the prober is an ACK by construction (the engine dispatches
            // on the kind), so "not an ACK" cannot come; count it with the foreign ones.
            AckRejected::NotOurs | AckRejected::NotAnAck => self.not_ours += 1,
            AckRejected::Unknown => self.unknown_probe += 1,
            AckRejected::Mismatch => self.mismatch += 1,
            AckRejected::Duplicate => self.duplicate += 1,
        }
    }
}

/// Counters of an engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Probes handed to the transport.
    pub probes_sent: u64,
    /// Probes the transport refused (reported as [`ProbeReport::NotSent`]).
    pub probes_not_sent: u64,
    /// Probes not started because too many were in flight.
    pub probes_refused: u64,
    /// First ACKs sent.
    pub acks_sent: u64,
    /// Delay ACKs sent.
    pub delay_acks_sent: u64,
    /// ACKs or delay ACKs the transport refused.
    pub ack_send_failures: u64,
    /// The last refused send, with its place.
    pub last_send_error: Option<String>,
    /// Datagrams dropped, by reason.
    pub drops: DropCounts,
    /// The last dropped datagram: its sender and why.
    pub last_drop: Option<String>,
    /// First ACKs dropped because too many were held ([`EngineConfig::ack_hold`]).
    pub held_acks_dropped: u64,
    /// Sends whose completion was given up (too many waiting).
    pub completions_lost: u64,
    /// Reports dropped because nobody took them.
    pub reports_dropped: u64,
}

/// A probe in flight, as the engine sees it.
#[derive(Debug)]
struct Track {
    /// ①.
    sent_ns: u64,
    responder_id: u32,
    /// ②'s readings, once its completion came.
    probe_sent: Option<Stamps>,
    /// The first ACK, its ⑤ readings and ⑥, held until ② is known.
    ack: Option<(ProbeRepr, Stamps, u64)>,
    /// ② and the first ACK went to the prober.
    fed: bool,
    prober_clock: Option<TimestampSource>,
    responder_clock: Option<TimestampSource>,
}

/// A send whose completion the engine waits for.
#[derive(Debug)]
enum Awaited<A> {
    Probe {
        seq: u64,
    },
    Ack {
        ack: ProbeRepr,
        to: A,
        src_port: u16,
        /// ③'s readings.
        received: Stamps,
    },
}

/// A first ACK held by [`EngineConfig::ack_hold`].
#[derive(Debug)]
struct Held<A> {
    due_ns: u64,
    ack: ProbeRepr,
    to: A,
    src_port: u16,
    received: Stamps,
}

/// Prober and responder of one agent interface over the transport `T`.
#[derive(Debug)]
pub struct Engine<T: ProbeTransport> {
    transport: T,
    config: EngineConfig,
    targets: Vec<ProbeTarget<T::Addr>>,
    next_target: usize,
    next_probe_ns: Option<u64>,
    prober: Prober<ProbeTarget<T::Addr>>,
    responder: Responder,
    tracks: HashMap<u64, Track>,
    awaited: BTreeMap<u64, Awaited<T::Addr>>,
    next_token: u64,
    held: VecDeque<Held<T::Addr>>,
    reports: VecDeque<ProbeReport<T::Addr>>,
    events: Vec<TransportEvent<T::Addr>>,
    /// The (prober address, source port) of probes answered since the last
    /// [`Engine::take_answered`]: the 5-tuples this responder's ACKs take.
    answered: Vec<(T::Addr, u16)>,
    stats: EngineStats,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn responder_clock(delay_ack: &ProbeRepr) -> TimestampSource {
    if delay_ack.hardware_timestamps {
        TimestampSource::Hardware
    } else if delay_ack.host_clock_timestamps {
        TimestampSource::HostClock
    } else {
        TimestampSource::Software
    }
}

fn check_targets<A>(targets: &[ProbeTarget<A>]) -> Result<(), EngineError> {
    for (i, t) in targets.iter().enumerate() {
        if t.responder_id > MAX_ID {
            return Err(EngineError::IdOutOfRange {
                place: format!("target {i}: responder_id"),
                id: t.responder_id,
            });
        }
        if t.src_port == 0 {
            return Err(EngineError::Invalid {
                place: format!("target {i}: src_port"),
                reason: "0 is not a source port".into(),
            });
        }
    }
    Ok(())
}

impl<T: ProbeTransport> Engine<T> {
    /// An engine probing `targets` over `transport`.
    pub fn new(
        transport: T,
        config: EngineConfig,
        targets: Vec<ProbeTarget<T::Addr>>,
    ) -> Result<Self, EngineError> {
        let invalid = |place: &str, reason: &str| EngineError::Invalid {
            place: format!("EngineConfig::{place}"),
            reason: reason.into(),
        };
        if config.id > MAX_ID {
            return Err(EngineError::IdOutOfRange {
                place: "EngineConfig::id".into(),
                id: config.id,
            });
        }
        if config.probe_interval.is_zero() {
            return Err(invalid("probe_interval", "must be positive"));
        }
        if config.prober.timeout_ns == 0 {
            return Err(invalid("prober.timeout_ns", "must be positive"));
        }
        if config.prober.max_outstanding == 0 {
            return Err(invalid("prober.max_outstanding", "must be at least 1"));
        }
        if config.max_pending_acks == 0 {
            return Err(invalid("max_pending_acks", "must be at least 1"));
        }
        if config.max_reports == 0 {
            return Err(invalid("max_reports", "must be at least 1"));
        }
        check_targets(&targets)?;
        Ok(Engine {
            prober: Prober::new(config.prober, config.id, config.incarnation),
            // The delay ACK's clock flags come from the measured interval, not from here.
            responder: Responder::new(
                config.id,
                config.incarnation,
                false,
                config.max_pending_acks,
            ),
            transport,
            config,
            targets,
            next_target: 0,
            next_probe_ns: None,
            tracks: HashMap::new(),
            awaited: BTreeMap::new(),
            next_token: 0,
            held: VecDeque::new(),
            reports: VecDeque::new(),
            events: Vec::new(),
            answered: Vec::new(),
            stats: EngineStats::default(),
        })
    }

    /// Replaces the targets (a new pinglist); probes in flight finish as before.
    pub fn set_targets(&mut self, targets: Vec<ProbeTarget<T::Addr>>) -> Result<(), EngineError> {
        check_targets(&targets)?;
        self.targets = targets;
        self.next_target = 0;
        Ok(())
    }

    /// Changes the time between two probes (a new pinglist's rate); refuses zero. The next
    /// probe is due one new interval after the last one.
    pub fn set_probe_interval(&mut self, interval: Duration) -> Result<(), EngineError> {
        if interval.is_zero() {
            return Err(EngineError::Invalid {
                place: "probe interval".into(),
                reason: "must be positive".into(),
            });
        }
        if let Some(next) = self.next_probe_ns {
            let old = nanos(self.config.probe_interval);
            self.next_probe_ns = Some(next.saturating_sub(old).saturating_add(nanos(interval)));
        }
        self.config.probe_interval = interval;
        Ok(())
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// The transport, mutably.
    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Counters.
    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    /// How long until the next held ACK falls due (none held: `None`): a caller that
    /// handles the engine at a coarse pace wakes for it, so that a hold is kept to time.
    pub fn next_held_ack_in(&self) -> Option<Duration> {
        let held = self.held.front()?;
        Some(Duration::from_nanos(
            held.due_ns.saturating_sub(self.transport.now_ns()),
        ))
    }

    /// Probes in flight.
    pub fn outstanding(&self) -> usize {
        self.prober.outstanding()
    }

    /// Probes the responder forgot because too many waited for their first ACK's
    /// completion (their probers time out).
    pub fn responder_forgotten(&self) -> u64 {
        self.responder.forgotten()
    }

    /// The (prober address, source port) of the probes answered since the last call (at
    /// most 4,096; repeated ones too): the reverse 5-tuples the ACKs took, for path tracing
    /// of the ACKs' paths by their sender.
    pub fn take_answered(&mut self) -> Vec<(T::Addr, u16)> {
        std::mem::take(&mut self.answered)
    }

    /// Changes the responder's hold of first ACKs ([`EngineConfig::ack_hold`]) for the
    /// probes handled from now on (labs vary a responder's delay while it runs).
    pub fn set_ack_hold(&mut self, hold: Duration) {
        self.config.ack_hold = hold;
    }

    /// The reports since the last call, oldest first.
    pub fn take_reports(&mut self) -> Vec<ProbeReport<T::Addr>> {
        self.reports.drain(..).collect()
    }

    /// Runs steps of at most 5 ms each for `duration`.
    pub fn run_for(&mut self, duration: Duration) -> Result<(), TransportError> {
        let end = Instant::now() + duration;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            self.step(left.min(Duration::from_millis(5)))?;
        }
    }

    /// One round: sends the probes and held ACKs that are due, expires timed-out probes,
    /// waits up to `max_wait` (less when something falls due sooner) for the transport and
    /// handles what it reports. Timeouts are noticed at the next step, so `max_wait` is the
    /// caller's bound on their lateness.
    pub fn step(&mut self, max_wait: Duration) -> Result<(), TransportError> {
        let now = self.transport.now_ns();
        self.send_due_probes(now);
        self.send_held_acks(now);
        for result in self.prober.expire(now) {
            self.finish(result, now);
        }
        let mut wait = max_wait;
        if let (false, Some(next)) = (self.targets.is_empty(), self.next_probe_ns) {
            wait = wait.min(Duration::from_nanos(next.saturating_sub(now)));
        }
        if let Some(held) = self.held.front() {
            wait = wait.min(Duration::from_nanos(held.due_ns.saturating_sub(now)));
        }
        let mut events = std::mem::take(&mut self.events);
        events.clear();
        let polled = self.transport.poll(wait, &mut events);
        for event in events.drain(..) {
            match event {
                TransportEvent::Sent { token, stamps } => self.on_sent(token, stamps),
                TransportEvent::Received {
                    from,
                    src_port,
                    stamps,
                    payload,
                } => self.on_received(from, src_port, stamps, &payload),
            }
        }
        self.events = events;
        polled
    }

    fn token(&mut self) -> u64 {
        let token = self.next_token;
        self.next_token = self.next_token.wrapping_add(1);
        token
    }

    /// Remembers a send whose completion matters, within a bound: beyond it the oldest is
    /// given up (its probe times out; its responder forgets the probe).
    fn await_completion(&mut self, token: u64, awaited: Awaited<T::Addr>) {
        let cap = self.config.prober.max_outstanding + self.config.max_pending_acks;
        while self.awaited.len() >= cap {
            let Some((_, lost)) = self.awaited.pop_first() else {
                break;
            };
            self.stats.completions_lost += 1;
            if let Awaited::Ack { ack, .. } = lost {
                self.responder.abandon(&ack);
            }
        }
        self.awaited.insert(token, awaited);
    }

    fn report(&mut self, report: ProbeReport<T::Addr>) {
        while self.reports.len() >= self.config.max_reports {
            self.reports.pop_front();
            self.stats.reports_dropped += 1;
        }
        self.reports.push_back(report);
    }

    fn finish(&mut self, result: ProbeResult<ProbeTarget<T::Addr>>, now: u64) {
        let clocks = self.tracks.remove(&result.seq).map_or(
            ProbeClocks {
                prober: None,
                responder: None,
            },
            |t| ProbeClocks {
                prober: t.prober_clock,
                responder: t.responder_clock,
            },
        );
        self.report(ProbeReport::Finished {
            result,
            clocks,
            at_ns: now,
        });
    }

    fn send_due_probes(&mut self, now: u64) {
        if self.targets.is_empty() {
            return;
        }
        let interval = nanos(self.config.probe_interval).max(1);
        let mut next = self.next_probe_ns.unwrap_or(now);
        if now.saturating_sub(next) > interval.saturating_mul(MAX_PROBE_BURST) {
            next = now;
        }
        let mut burst = 0;
        while next <= now && burst < MAX_PROBE_BURST {
            let started = self.stats.probes_sent + self.stats.probes_not_sent;
            if self.config.max_probes.is_some_and(|max| started >= max) {
                break;
            }
            self.send_probe();
            next = next.saturating_add(interval);
            burst += 1;
        }
        self.next_probe_ns = Some(next);
    }

    fn send_probe(&mut self) {
        let Some(target) = self
            .targets
            .get(self.next_target % self.targets.len())
            .cloned()
        else {
            return;
        };
        self.next_target = (self.next_target + 1) % self.targets.len();
        // ① is read before the post, so the send completion ② follows it.
        let sent_ns = self.transport.now_ns();
        let Some(probe) = self.prober.probe_from(
            target.clone(),
            target.responder_id,
            target.src_port,
            sent_ns,
        ) else {
            self.stats.probes_refused += 1;
            return;
        };
        let Ok(bytes) = probe.to_bytes() else {
            // A probe the prober built always encodes; should it not, it never leaves.
            self.prober.abandon(probe.seq);
            return;
        };
        let token = self.token();
        match self
            .transport
            .send(&target.addr, target.src_port, &bytes, token)
        {
            Ok(_) => {
                self.stats.probes_sent += 1;
                self.tracks.insert(
                    probe.seq,
                    Track {
                        sent_ns,
                        responder_id: target.responder_id,
                        probe_sent: None,
                        ack: None,
                        fed: false,
                        prober_clock: None,
                        responder_clock: None,
                    },
                );
                self.await_completion(token, Awaited::Probe { seq: probe.seq });
            }
            Err(error) => {
                self.prober.abandon(probe.seq);
                self.stats.probes_not_sent += 1;
                self.report(ProbeReport::NotSent {
                    target,
                    at_ns: sent_ns,
                    error,
                });
            }
        }
    }

    fn send_held_acks(&mut self, now: u64) {
        while self.held.front().is_some_and(|h| h.due_ns <= now) {
            if let Some(h) = self.held.pop_front() {
                self.send_ack(h.ack, h.to, h.src_port, h.received);
            }
        }
    }

    fn send_ack(&mut self, ack: ProbeRepr, to: T::Addr, src_port: u16, received: Stamps) {
        let Ok(bytes) = ack.to_bytes() else {
            self.responder.abandon(&ack);
            return;
        };
        let token = self.token();
        match self.transport.send(&to, src_port, &bytes, token) {
            Ok(_) => {
                self.stats.acks_sent += 1;
                self.await_completion(
                    token,
                    Awaited::Ack {
                        ack,
                        to,
                        src_port,
                        received,
                    },
                );
            }
            Err(error) => {
                self.stats.ack_send_failures += 1;
                self.stats.last_send_error = Some(error.to_string());
                self.responder.abandon(&ack);
            }
        }
    }

    fn on_sent(&mut self, token: u64, stamps: Stamps) {
        // Delay ACKs are not awaited: their completions fall through.
        match self.awaited.remove(&token) {
            Some(Awaited::Probe { seq }) => {
                if let Some(track) = self.tracks.get_mut(&seq) {
                    track.probe_sent.get_or_insert(stamps);
                    self.feed(seq);
                }
            }
            Some(Awaited::Ack {
                ack,
                to,
                src_port,
                received,
            }) => {
                // ④−③ on one clock.
                let (start, end, clock) = Stamps::common_clock(&received, &stamps);
                let Some(delay_ack) =
                    self.responder
                        .on_ack_sent_measured(&ack, end.saturating_sub(start), clock)
                else {
                    return;
                };
                let Ok(bytes) = delay_ack.to_bytes() else {
                    return;
                };
                let token = self.token();
                match self.transport.send(&to, src_port, &bytes, token) {
                    Ok(_) => self.stats.delay_acks_sent += 1,
                    Err(error) => {
                        self.stats.ack_send_failures += 1;
                        self.stats.last_send_error = Some(error.to_string());
                    }
                }
            }
            None => {}
        }
    }

    fn on_received(&mut self, from: T::Addr, src_port: u16, stamps: Stamps, payload: &[u8]) {
        let handled_ns = self.transport.now_ns();
        let repr = match ProbeRepr::from_bytes(payload) {
            Ok(repr) => repr,
            Err(error) => {
                self.stats.drops.malformed_payload(&error);
                self.stats.last_drop = Some(format!(
                    "{} bytes from {from:?} source port {src_port}: {error}",
                    payload.len()
                ));
                return;
            }
        };
        match repr.kind {
            ProbeKind::Probe => match self.responder.on_probe(&repr, stamps.best().0) {
                Ok(ack) => {
                    if self.answered.len() < MAX_ANSWERED {
                        self.answered.push((from.clone(), src_port));
                    }
                    if self.config.ack_hold.is_zero() {
                        self.send_ack(ack, from, src_port, stamps);
                    } else {
                        while self.held.len() >= self.config.max_pending_acks {
                            if let Some(dropped) = self.held.pop_front() {
                                self.responder.abandon(&dropped.ack);
                                self.stats.held_acks_dropped += 1;
                            }
                        }
                        self.held.push_back(Held {
                            due_ns: handled_ns.saturating_add(nanos(self.config.ack_hold)),
                            ack,
                            to: from,
                            src_port,
                            received: stamps,
                        });
                    }
                }
                Err(ProbeRejected::WrongQpn | ProbeRejected::NotAProbe) => {
                    self.stats.drops.wrong_responder += 1;
                    self.stats.last_drop = Some(format!(
                        "probe from {from:?} source port {src_port} for responder id {:#x}, \
                         this interface is {:#x}",
                        repr.responder_qpn, self.config.id
                    ));
                }
            },
            ProbeKind::DelayAck => {
                // A delay ACK's own arrival times are not used (`Prober::on_ack`).
                match self.prober.on_ack(&repr, 0, 0) {
                    Ok(done) => {
                        if let Some(track) = self.tracks.get_mut(&repr.seq) {
                            track.responder_clock = Some(responder_clock(&repr));
                        }
                        if let Some(result) = done {
                            self.finish(result, handled_ns);
                        }
                    }
                    Err(rejected) => self.stats.drops.ack_rejected(rejected),
                }
            }
            ProbeKind::Ack => self.on_first_ack(repr, stamps, handled_ns),
        }
    }

    /// ⑤: a first ACK. Held in its probe's track until ② is known, then both go to the
    /// prober on one clock.
    fn on_first_ack(&mut self, ack: ProbeRepr, stamps: Stamps, handled_ns: u64) {
        let ours =
            ack.prober_qpn == self.config.id && ack.prober_incarnation == self.config.incarnation;
        let track = self
            .tracks
            .get_mut(&ack.seq)
            .filter(|t| ours && t.sent_ns == ack.sent_ns && t.responder_id == ack.responder_qpn);
        match track {
            Some(track) if track.ack.is_some() || track.fed => {
                self.stats.drops.duplicate += 1;
            }
            Some(track) => {
                track.ack = Some((ack, stamps, handled_ns));
                self.feed(ack.seq);
            }
            // Not for a probe of ours in flight: the prober says why.
            None => match self.prober.on_ack(&ack, stamps.best().0, handled_ns) {
                Ok(Some(result)) => self.finish(result, handled_ns),
                Ok(None) => {}
                Err(rejected) => self.stats.drops.ack_rejected(rejected),
            },
        }
    }

    /// Gives the prober ② and ⑤ on one clock once both are known.
    fn feed(&mut self, seq: u64) {
        let Some(track) = self.tracks.get_mut(&seq) else {
            return;
        };
        let Some(sent) = track.probe_sent else {
            return;
        };
        let Some((ack, received, handled_ns)) = track.ack.take() else {
            return;
        };
        let (start, end, clock) = Stamps::common_clock(&sent, &received);
        track.fed = true;
        track.prober_clock = Some(clock);
        if let Some(result) = self.prober.on_send_completion(seq, start) {
            self.finish(result, handled_ns);
            return;
        }
        match self.prober.on_ack(&ack, end, handled_ns) {
            Ok(Some(result)) => self.finish(result, handled_ns),
            Ok(None) => {}
            Err(rejected) => self.stats.drops.ack_rejected(rejected),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::*;
    use crate::probe::ProbeOutcome;

    /// The NIC clock's epoch, far from the host clock's: a NIC reading subtracted from a
    /// host one gives nonsense, which the tests would see.
    const NIC_EPOCH: u64 = 7_000_000_000_000;

    /// A datagram on the link: sender, source port, payload, arrival time.
    type InFlight = (usize, u16, Vec<u8>, u64);

    #[derive(Debug, Default)]
    struct Medium {
        now: u64,
        /// Datagrams to each side.
        queues: [VecDeque<InFlight>; 2],
    }

    /// Two engines' transports over one in-memory link; each side says which timestamps
    /// its "NIC" and "kernel" give.
    #[derive(Debug)]
    struct Mem {
        side: usize,
        medium: Rc<RefCell<Medium>>,
        hw_tx: bool,
        hw_rx: bool,
        software: bool,
        /// Polls a send completion waits before it is reported.
        completion_delay: u32,
        refuse: bool,
        sent: VecDeque<(u64, Stamps, u32)>,
    }

    impl Mem {
        fn pair(
            medium: &Rc<RefCell<Medium>>,
            hw_tx: bool,
            hw_rx: bool,
            software: bool,
        ) -> [Mem; 2] {
            [0, 1].map(|side| Mem {
                side,
                medium: medium.clone(),
                hw_tx,
                hw_rx,
                software,
                completion_delay: 0,
                refuse: false,
                sent: VecDeque::new(),
            })
        }
    }

    impl ProbeTransport for Mem {
        type Addr = usize;

        fn now_ns(&self) -> u64 {
            let mut m = self.medium.borrow_mut();
            m.now += 1_000;
            m.now
        }

        fn send(
            &mut self,
            to: &usize,
            src_port: u16,
            payload: &[u8],
            token: u64,
        ) -> Result<u64, TransportError> {
            if self.refuse {
                return Err(TransportError::Os {
                    op: "sendto",
                    place: format!("side {} -> side {to}", self.side),
                    errno: 101,
                });
            }
            let t = self.now_ns();
            self.sent.push_back((
                token,
                Stamps {
                    hardware: self.hw_tx.then_some(NIC_EPOCH + t + 100),
                    software: self.software.then_some(t + 200),
                    host_ns: t + 300,
                },
                0,
            ));
            self.medium.borrow_mut().queues[*to].push_back((
                self.side,
                src_port,
                payload.to_vec(),
                t + 5_000,
            ));
            Ok(t + 300)
        }

        fn poll(
            &mut self,
            _: Duration,
            events: &mut Vec<TransportEvent<usize>>,
        ) -> Result<(), TransportError> {
            let mut m = self.medium.borrow_mut();
            while let Some((from, src_port, payload, arrival)) = m.queues[self.side].pop_front() {
                m.now = m.now.max(arrival + 1_000);
                events.push(TransportEvent::Received {
                    from,
                    src_port,
                    stamps: Stamps {
                        hardware: self.hw_rx.then_some(NIC_EPOCH + arrival),
                        software: self.software.then_some(arrival + 50),
                        host_ns: arrival + 500,
                    },
                    payload,
                });
            }
            for entry in self.sent.iter_mut() {
                entry.2 += 1;
            }
            while self
                .sent
                .front()
                .is_some_and(|(_, _, age)| *age > self.completion_delay)
            {
                if let Some((token, stamps, _)) = self.sent.pop_front() {
                    events.push(TransportEvent::Sent { token, stamps });
                }
            }
            Ok(())
        }
    }

    fn engines(transports: [Mem; 2]) -> (Engine<Mem>, Engine<Mem>) {
        let [a, b] = transports;
        let config = |id| EngineConfig {
            probe_interval: Duration::from_micros(1),
            max_probes: Some(1),
            ..EngineConfig::new(id, 1)
        };
        let target = ProbeTarget {
            addr: 1,
            src_port: 49_200,
            responder_id: 0x22,
        };
        (
            Engine::new(a, config(0x11), vec![target]).unwrap(),
            Engine::new(b, config(0x22), Vec::new()).unwrap(),
        )
    }

    /// Steps both engines in turn until the prober reports.
    fn run(prober: &mut Engine<Mem>, responder: &mut Engine<Mem>) -> ProbeReport<usize> {
        for _ in 0..50 {
            prober.step(Duration::ZERO).unwrap();
            responder.step(Duration::ZERO).unwrap();
            if let Some(report) = prober.take_reports().pop() {
                assert_eq!(prober.stats().drops, DropCounts::default());
                assert_eq!(responder.stats().drops, DropCounts::default());
                return report;
            }
        }
        panic!("no report: {:?} {:?}", prober.stats(), responder.stats());
    }

    fn answered(report: &ProbeReport<usize>) -> (u64, bool, ProbeClocks) {
        match report {
            ProbeReport::Finished {
                result:
                    ProbeResult {
                        outcome:
                            ProbeOutcome::Answered {
                                network_rtt_ns,
                                hardware_timestamps,
                                ..
                            },
                        ..
                    },
                clocks,
                ..
            } => (*network_rtt_ns, *hardware_timestamps, *clocks),
            other => panic!("not answered: {other:?}"),
        }
    }

    #[test]
    fn nic_timestamps_on_both_ends_are_used_as_such() {
        let medium = Rc::new(RefCell::new(Medium::default()));
        let (mut a, mut b) = engines(Mem::pair(&medium, true, true, true));
        let (rtt, hardware, clocks) = answered(&run(&mut a, &mut b));
        assert!(hardware);
        assert_eq!(
            (clocks.prober, clocks.responder),
            (
                Some(TimestampSource::Hardware),
                Some(TimestampSource::Hardware)
            )
        );
        // Each way: 5,000 ns on the link, less the 100 ns from post to the NIC stamp.
        assert_eq!(rtt, 2 * 4_900);
    }

    /// A NIC that stamps sends but not receives (a PTP-only receive filter): each interval
    /// falls back to the kernel's clock on both ends instead of subtracting a NIC reading
    /// from a kernel one.
    #[test]
    fn a_nic_stamping_only_sends_falls_back_to_kernel_timestamps_on_both_ends() {
        let medium = Rc::new(RefCell::new(Medium::default()));
        let (mut a, mut b) = engines(Mem::pair(&medium, true, false, true));
        let (rtt, hardware, clocks) = answered(&run(&mut a, &mut b));
        assert!(!hardware);
        assert_eq!(
            (clocks.prober, clocks.responder),
            (
                Some(TimestampSource::Software),
                Some(TimestampSource::Software)
            )
        );
        // Send stamp 200 ns after the post, receive stamp 50 ns after arrival.
        assert_eq!(rtt, 2 * (5_000 + 50 - 200));
    }

    #[test]
    fn without_any_timestamp_both_sides_say_host_clock() {
        let medium = Rc::new(RefCell::new(Medium::default()));
        let (mut a, mut b) = engines(Mem::pair(&medium, false, false, false));
        let (rtt, hardware, clocks) = answered(&run(&mut a, &mut b));
        assert!(!hardware);
        assert_eq!(
            (clocks.prober, clocks.responder),
            (
                Some(TimestampSource::HostClock),
                Some(TimestampSource::HostClock)
            )
        );
        assert_eq!(rtt, 2 * (5_000 + 500 - 300));
    }

    /// The ACKs come back before the probe's own send completion is reported: the first ACK
    /// waits for ②, and the probe completes when it comes.
    #[test]
    fn acks_before_the_send_completion_are_held_until_it_comes() {
        let medium = Rc::new(RefCell::new(Medium::default()));
        let [mut ta, tb] = Mem::pair(&medium, true, true, true);
        ta.completion_delay = 4;
        let (mut a, mut b) = engines([ta, tb]);
        for _ in 0..3 {
            a.step(Duration::ZERO).unwrap();
            b.step(Duration::ZERO).unwrap();
        }
        a.step(Duration::ZERO).unwrap();
        assert!(a.take_reports().is_empty(), "complete without ②");
        assert_eq!(a.outstanding(), 1);
        let (rtt, _, clocks) = answered(&run(&mut a, &mut b));
        assert_eq!(clocks.prober, Some(TimestampSource::Hardware));
        assert_eq!(rtt, 2 * 4_900);
    }

    #[test]
    fn a_refused_send_is_reported_and_never_times_out() {
        let medium = Rc::new(RefCell::new(Medium::default()));
        let [mut ta, tb] = Mem::pair(&medium, false, false, true);
        ta.refuse = true;
        let (mut a, _) = engines([ta, tb]);
        a.step(Duration::ZERO).unwrap();
        let reports = a.take_reports();
        assert!(matches!(
            reports.as_slice(),
            [ProbeReport::NotSent { target, error, .. }]
                if target.addr == 1 && error.to_string().starts_with("sendto (side 0 -> side 1)")
        ));
        assert_eq!(a.outstanding(), 0);
        medium.borrow_mut().now += 10_000_000_000;
        a.step(Duration::ZERO).unwrap();
        assert!(a.take_reports().is_empty());
        // One probe was asked for, and it was tried.
        assert_eq!((a.stats().probes_sent, a.stats().probes_not_sent), (0, 1));
    }

    #[test]
    fn ids_and_targets_are_checked_naming_the_place() {
        let medium = Rc::new(RefCell::new(Medium::default()));
        let [ta, tb] = Mem::pair(&medium, false, false, true);
        let wide = Engine::new(ta, EngineConfig::new(0x0100_0000, 1), Vec::new()).unwrap_err();
        assert_eq!(
            wide.to_string(),
            "EngineConfig::id: id 0x1000000 does not fit in 24 bits (at most 0xffffff)"
        );
        let target = ProbeTarget {
            addr: 0,
            src_port: 0,
            responder_id: 1,
        };
        let err = Engine::new(tb, EngineConfig::new(1, 1), vec![target]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "target 0: src_port: 0 is not a source port"
        );
    }
}
