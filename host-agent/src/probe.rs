//! R-Pingmesh probing (SIGCOMM'24, §4.1, Fig. 4): the prober's and the responder's
//! bookkeeping, independent of the transport (verbs UD, kernel UDP, netsim).
//!
//! The six timestamps of a probe:
//!
//! | | where | clock |
//! |---|---|---|
//! | ① | prober posts the probe | prober host |
//! | ② | the probe's send completion | prober NIC |
//! | ③ | the probe's receive completion | responder NIC |
//! | ④ | the first ACK's send completion | responder NIC |
//! | ⑤ | the first ACK's receive completion | prober NIC |
//! | ⑥ | the prober handles the ACK | prober host |
//!
//! network RTT = (⑤−②) − (④−③); prober delay = (⑥−①) − (⑤−②); responder delay = ④−③,
//! carried to the prober by the second ACK. Each difference is taken on one clock, so the
//! two hosts' clocks need not agree. A probe without both ACKs within the timeout (500 ms
//! in the paper) is a timeout.
//!
//! Both sides are pure and deterministic (time is passed in) and bounded: the prober
//! refuses a probe when [`ProberConfig::max_outstanding`] are in flight, and the responder
//! keeps at most [`Responder::new`]'s `max_pending` probes waiting for their first ACK's
//! completion, forgetting the oldest (whose prober then sees a timeout), counted.

use std::collections::{BTreeMap, VecDeque};

use hawkmesh_wire::probe::{ProbeKind, ProbeRepr};

/// The prober's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProberConfig {
    /// A probe without both ACKs after this long is a timeout (R-Pingmesh §5: 500 ms).
    pub timeout_ns: u64,
    /// Probes in flight at most; further probes are refused until some complete or expire.
    pub max_outstanding: usize,
}

impl Default for ProberConfig {
    fn default() -> Self {
        ProberConfig {
            timeout_ns: 500_000_000,
            max_outstanding: 4096,
        }
    }
}

/// How a probe ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// Both ACKs arrived in time.
    Answered {
        /// (⑤−②) − (④−③).
        network_rtt_ns: u64,
        /// (⑥−①) − (⑤−②).
        prober_delay_ns: u64,
        /// ④−③.
        responder_delay_ns: u64,
        /// The responder's delay came from NIC timestamps.
        hardware_timestamps: bool,
    },
    /// Not both ACKs within the timeout; what did arrive is kept for the analyzer (a first
    /// ACK without the second points at the responder's host, not at the network).
    Timeout {
        /// The first ACK arrived.
        ack: bool,
        /// The delay ACK arrived.
        delay_ack: bool,
    },
    /// The timestamps contradict each other (e.g. the responder's delay exceeds the NIC
    /// round trip, or a completion precedes its post): a clock or driver fault, not a
    /// network measurement.
    Inconsistent,
}

/// One finished probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeResult<T> {
    /// Whom it probed (the caller's key: RNIC, 5-tuple, pinglist entry…).
    pub target: T,
    /// Its sequence number.
    pub seq: u64,
    /// ①.
    pub sent_ns: u64,
    /// How it ended.
    pub outcome: ProbeOutcome,
}

/// Why an ACK was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckRejected {
    /// Not an ACK (a probe sent to the prober's own queue pair).
    NotAnAck,
    /// For another prober: another queue pair or an earlier incarnation of this agent.
    NotOurs,
    /// No probe with this sequence number is in flight (already finished or expired).
    Unknown,
    /// The probe was sent with other values than the ACK echoes (a forged or damaged ACK).
    Mismatch,
    /// This ACK already arrived for the probe.
    Duplicate,
}

#[derive(Clone, Debug)]
struct InFlight<T> {
    target: T,
    responder_qpn: u32,
    src_port: u16,
    sent_ns: u64,
    send_completion_ns: Option<u64>,
    ack: Option<(u64, u64)>,
    responder_delay: Option<(u64, bool)>,
}

/// The prober side of one RNIC (one UD queue pair).
#[derive(Clone, Debug)]
pub struct Prober<T> {
    config: ProberConfig,
    qpn: u32,
    incarnation: u32,
    next_seq: u64,
    in_flight: BTreeMap<u64, InFlight<T>>,
    /// Sequence numbers by deadline, for expiry in send order.
    deadlines: VecDeque<(u64, u64)>,
    refused: u64,
}

impl<T: Clone> Prober<T> {
    /// A prober for the queue pair `qpn` of an agent started as `incarnation`.
    pub fn new(config: ProberConfig, qpn: u32, incarnation: u32) -> Self {
        Prober {
            config,
            qpn,
            incarnation,
            next_seq: 0,
            in_flight: BTreeMap::new(),
            deadlines: VecDeque::new(),
            refused: 0,
        }
    }

    /// Starts a probe to `target`'s queue pair `responder_qpn` at ① = `now_ns`: the payload
    /// to send, or `None` when [`ProberConfig::max_outstanding`] probes are in flight
    /// (counted in [`Self::refused`]). The payload carries no source port (0); see
    /// [`Self::probe_from`].
    pub fn probe(&mut self, target: T, responder_qpn: u32, now_ns: u64) -> Option<ProbeRepr> {
        self.probe_from(target, responder_qpn, 0, now_ns)
    }

    /// [`Self::probe`] for a probe leaving from the 5-tuple source port `src_port`, which the
    /// payload carries (a UD responder learns it only from there) and its ACKs must echo.
    pub fn probe_from(
        &mut self,
        target: T,
        responder_qpn: u32,
        src_port: u16,
        now_ns: u64,
    ) -> Option<ProbeRepr> {
        if self.in_flight.len() >= self.config.max_outstanding {
            self.refused += 1;
            return None;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight.insert(
            seq,
            InFlight {
                target,
                responder_qpn,
                src_port,
                sent_ns: now_ns,
                send_completion_ns: None,
                ack: None,
                responder_delay: None,
            },
        );
        self.deadlines
            .push_back((now_ns.saturating_add(self.config.timeout_ns), seq));
        Some(ProbeRepr {
            kind: ProbeKind::Probe,
            hardware_timestamps: false,
            host_clock_timestamps: false,
            seq,
            prober_qpn: self.qpn,
            responder_qpn,
            sent_ns: now_ns,
            responder_delay_ns: 0,
            prober_incarnation: self.incarnation,
            responder_incarnation: 0,
            src_port,
        })
    }

    /// Forgets the probe `seq` that never left (its transport refused to send it): it ends
    /// in neither a result nor a timeout, since the network never saw it. Whether it was in
    /// flight.
    pub fn abandon(&mut self, seq: u64) -> bool {
        // Its deadline stays queued; `expire` skips sequence numbers no longer in flight.
        self.in_flight.remove(&seq).is_some()
    }

    /// ②: the probe `seq` left the NIC at `nic_ns`. Returns the result if the probe is now
    /// complete (its ACKs may be handled before its own send completion).
    pub fn on_send_completion(&mut self, seq: u64, nic_ns: u64) -> Option<ProbeResult<T>> {
        let probe = self.in_flight.get_mut(&seq)?;
        probe.send_completion_ns.get_or_insert(nic_ns);
        self.complete(seq)
    }

    /// An ACK arrived: ⑤ = `completion_ns` (NIC), ⑥ = `handled_ns` (host). Returns the
    /// result when the probe is complete, `Ok(None)` while it waits for more.
    pub fn on_ack(
        &mut self,
        ack: &ProbeRepr,
        completion_ns: u64,
        handled_ns: u64,
    ) -> Result<Option<ProbeResult<T>>, AckRejected> {
        if ack.kind == ProbeKind::Probe {
            return Err(AckRejected::NotAnAck);
        }
        if ack.prober_qpn != self.qpn || ack.prober_incarnation != self.incarnation {
            return Err(AckRejected::NotOurs);
        }
        let probe = self
            .in_flight
            .get_mut(&ack.seq)
            .ok_or(AckRejected::Unknown)?;
        // A version-1 ACK carries no source port (0); one that carries another than the
        // probe's is damaged or forged.
        if probe.sent_ns != ack.sent_ns
            || probe.responder_qpn != ack.responder_qpn
            || (ack.src_port != 0 && ack.src_port != probe.src_port)
        {
            return Err(AckRejected::Mismatch);
        }
        match ack.kind {
            ProbeKind::Ack if probe.ack.is_some() => return Err(AckRejected::Duplicate),
            ProbeKind::Ack => probe.ack = Some((completion_ns, handled_ns)),
            ProbeKind::DelayAck if probe.responder_delay.is_some() => {
                return Err(AckRejected::Duplicate)
            }
            ProbeKind::DelayAck => {
                probe.responder_delay = Some((ack.responder_delay_ns, ack.hardware_timestamps))
            }
            ProbeKind::Probe => return Err(AckRejected::NotAnAck),
        }
        Ok(self.complete(ack.seq))
    }

    fn complete(&mut self, seq: u64) -> Option<ProbeResult<T>> {
        let probe = self.in_flight.get(&seq)?;
        let (Some(sent_nic), Some((ack_nic, handled)), Some((responder, hardware))) =
            (probe.send_completion_ns, probe.ack, probe.responder_delay)
        else {
            return None;
        };
        let probe = self.in_flight.remove(&seq)?;
        // (⑤−②) − (④−③) and (⑥−①) − (⑤−②), each difference on one clock.
        let outcome = match ack_nic.checked_sub(sent_nic).and_then(|nic_rtt| {
            let network = nic_rtt.checked_sub(responder)?;
            let host = handled.checked_sub(probe.sent_ns)?.checked_sub(nic_rtt)?;
            Some((network, host))
        }) {
            Some((network_rtt_ns, prober_delay_ns)) => ProbeOutcome::Answered {
                network_rtt_ns,
                prober_delay_ns,
                responder_delay_ns: responder,
                hardware_timestamps: hardware,
            },
            None => ProbeOutcome::Inconsistent,
        };
        Some(ProbeResult {
            target: probe.target,
            seq,
            sent_ns: probe.sent_ns,
            outcome,
        })
    }

    /// The probes whose timeout passed by `now_ns`, as timeouts, in send order.
    pub fn expire(&mut self, now_ns: u64) -> Vec<ProbeResult<T>> {
        let mut expired = Vec::new();
        while let Some(&(deadline, seq)) = self.deadlines.front() {
            if deadline > now_ns {
                break;
            }
            self.deadlines.pop_front();
            if let Some(probe) = self.in_flight.remove(&seq) {
                expired.push(ProbeResult {
                    target: probe.target,
                    seq,
                    sent_ns: probe.sent_ns,
                    outcome: ProbeOutcome::Timeout {
                        ack: probe.ack.is_some(),
                        delay_ack: probe.responder_delay.is_some(),
                    },
                });
            }
        }
        // Completed probes leave stale deadlines behind; keep the queue bounded by them.
        if self.deadlines.len() > 2 * self.config.max_outstanding.max(1) {
            let live = &self.in_flight;
            self.deadlines.retain(|(_, seq)| live.contains_key(seq));
        }
        expired
    }

    /// Probes in flight.
    pub fn outstanding(&self) -> usize {
        self.in_flight.len()
    }

    /// Probes refused because too many were in flight.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// This prober's queue pair number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// This prober's agent incarnation.
    pub fn incarnation(&self) -> u32 {
        self.incarnation
    }
}

/// Why a probe got no ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeRejected {
    /// Not a probe (an ACK sent to the responder's queue pair).
    NotAProbe,
    /// Addressed to another queue pair (a stale pinglist entry from before a restart).
    WrongQpn,
}

/// Where a timestamp, or an interval between two, came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimestampSource {
    /// The NIC's clock (a CQE completion timestamp, or the `SO_TIMESTAMPING` raw hardware
    /// timestamp): a delay ACK measured on it carries the hardware flag.
    Hardware,
    /// The kernel's software timestamp (`SO_TIMESTAMPING` software, taken by the driver or
    /// the stack on the host clock): no flag.
    Software,
    /// A reading of the host clock taken by the agent because no timestamp was given (it
    /// includes the agent's own scheduling): a delay ACK measured on it carries the
    /// host-clock flag.
    HostClock,
}

/// Identifies a probe at the responder: the prober's queue pair, incarnation and sequence.
type ProbeKey = (u32, u32, u64);

/// The responder side of one RNIC: answers probes with two ACKs.
#[derive(Clone, Debug)]
pub struct Responder {
    qpn: u32,
    incarnation: u32,
    hardware_timestamps: bool,
    max_pending: usize,
    pending: BTreeMap<ProbeKey, (u64, ProbeRepr)>,
    order: VecDeque<ProbeKey>,
    forgotten: u64,
}

impl Responder {
    /// A responder on queue pair `qpn` of an agent started as `incarnation`;
    /// `hardware_timestamps` says whether ③ and ④ are NIC completion timestamps; at most
    /// `max_pending` probes wait for their first ACK's send completion.
    pub fn new(qpn: u32, incarnation: u32, hardware_timestamps: bool, max_pending: usize) -> Self {
        Responder {
            qpn,
            incarnation,
            hardware_timestamps,
            max_pending: max_pending.max(1),
            pending: BTreeMap::new(),
            order: VecDeque::new(),
            forgotten: 0,
        }
    }

    /// A probe arrived with receive completion ③ = `received_ns`: the first ACK to send now
    /// (to the probe's source, so that it takes the reverse of the probe's 5-tuple).
    pub fn on_probe(
        &mut self,
        probe: &ProbeRepr,
        received_ns: u64,
    ) -> Result<ProbeRepr, ProbeRejected> {
        if probe.kind != ProbeKind::Probe {
            return Err(ProbeRejected::NotAProbe);
        }
        if probe.responder_qpn != self.qpn {
            return Err(ProbeRejected::WrongQpn);
        }
        let ack = probe.ack(self.incarnation);
        let key = (probe.prober_qpn, probe.prober_incarnation, probe.seq);
        if self.pending.insert(key, (received_ns, ack)).is_none() {
            self.order.push_back(key);
        }
        while self.pending.len() > self.max_pending {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if self.pending.remove(&oldest).is_some() {
                self.forgotten += 1;
            }
        }
        Ok(ack)
    }

    /// The first ACK for `ack` left with send completion ④ = `sent_ns`: the delay ACK to send
    /// (`None` if that probe was forgotten or already answered).
    pub fn on_ack_sent(&mut self, ack: &ProbeRepr, sent_ns: u64) -> Option<ProbeRepr> {
        let (received_ns, ack) = self.take(ack)?;
        Some(ack.delay_ack(
            self.incarnation,
            sent_ns.saturating_sub(received_ns),
            self.hardware_timestamps,
        ))
    }

    /// The first ACK for `ack` left and the caller measured ④−③ itself as `delay_ns` on the
    /// clock `clock` (NIC, kernel or host-clock readings): for transports where ③ and ④ may come from different clocks (kernel UDP on
    /// a NIC that stamps sends but not receives), which pick one clock both readings share.
    /// The delay ACK to send, flagged accordingly (`None` if that probe was forgotten or
    /// already answered); the ③ passed to [`Self::on_probe`] is not used.
    pub fn on_ack_sent_measured(
        &mut self,
        ack: &ProbeRepr,
        delay_ns: u64,
        clock: TimestampSource,
    ) -> Option<ProbeRepr> {
        let (_, ack) = self.take(ack)?;
        Some(ProbeRepr {
            host_clock_timestamps: clock == TimestampSource::HostClock,
            ..ack.delay_ack(
                self.incarnation,
                delay_ns,
                clock == TimestampSource::Hardware,
            )
        })
    }

    /// Forgets the probe behind the first ACK `ack`, which could not be sent (its prober
    /// times out). Whether it was pending.
    pub fn abandon(&mut self, ack: &ProbeRepr) -> bool {
        self.take(ack).is_some()
    }

    fn take(&mut self, ack: &ProbeRepr) -> Option<(u64, ProbeRepr)> {
        let key = (ack.prober_qpn, ack.prober_incarnation, ack.seq);
        let taken = self.pending.remove(&key)?;
        if self.order.len() > 2 * self.max_pending {
            let live = &self.pending;
            self.order.retain(|k| live.contains_key(k));
        }
        Some(taken)
    }

    /// Probes dropped from the pending set because it was full (their probers time out).
    pub fn forgotten(&self) -> u64 {
        self.forgotten
    }

    /// This responder's queue pair number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// One probe through both sides with the figure's six timestamps.
    #[test]
    fn the_six_timestamps_give_network_rtt_and_both_hosts_delays() {
        let mut prober = Prober::new(ProberConfig::default(), 10, 1);
        let mut responder = Responder::new(20, 2, true, 16);
        // ① at 1,000 (prober host clock).
        let probe = prober.probe("rnic-b", 20, 1_000).unwrap();
        // ② 3,000 on the prober's NIC clock (a different epoch from its host clock).
        assert!(prober
            .on_send_completion(probe.seq, 1_000_003_000)
            .is_none());
        // ③ 50,000 and ④ 57,000 on the responder's NIC clock: responder delay 7,000.
        let ack = responder.on_probe(&probe, 50_000).unwrap();
        let delay_ack = responder.on_ack_sent(&ack, 57_000).unwrap();
        assert_eq!(delay_ack.responder_delay_ns, 7_000);
        assert!(delay_ack.hardware_timestamps);
        // ⑤ at prober NIC 1,000,023,000 (NIC round trip 20,000); ⑥ at host 26,000.
        assert_eq!(prober.on_ack(&ack, 1_000_023_000, 26_000), Ok(None));
        let result = prober
            .on_ack(&delay_ack, 1_000_024_000, 27_000)
            .unwrap()
            .unwrap();
        assert_eq!(result.target, "rnic-b");
        assert_eq!(
            result.outcome,
            ProbeOutcome::Answered {
                // (⑤−②) − (④−③) = 20,000 − 7,000.
                network_rtt_ns: 13_000,
                // (⑥−①) − (⑤−②) = 25,000 − 20,000.
                prober_delay_ns: 5_000,
                responder_delay_ns: 7_000,
                hardware_timestamps: true,
            }
        );
        assert_eq!(prober.outstanding(), 0);
        assert!(prober.expire(10 * MS * 100).is_empty());
    }

    #[test]
    fn acks_may_arrive_before_the_send_completion() {
        let mut prober = Prober::new(ProberConfig::default(), 1, 1);
        let mut responder = Responder::new(2, 1, false, 4);
        let probe = prober.probe(7u32, 2, 0).unwrap();
        let ack = responder.on_probe(&probe, 100).unwrap();
        let delay_ack = responder.on_ack_sent(&ack, 150).unwrap();
        assert!(!delay_ack.hardware_timestamps);
        assert_eq!(prober.on_ack(&delay_ack, 0, 0), Ok(None));
        assert_eq!(prober.on_ack(&ack, 900, 1_000), Ok(None));
        let result = prober.on_send_completion(probe.seq, 100).unwrap();
        assert!(matches!(
            result.outcome,
            ProbeOutcome::Answered {
                network_rtt_ns: 750,
                prober_delay_ns: 200,
                ..
            }
        ));
    }

    #[test]
    fn a_probe_missing_an_ack_times_out_and_says_which_arrived() {
        let mut prober = Prober::new(
            ProberConfig {
                timeout_ns: 500 * MS,
                max_outstanding: 8,
            },
            1,
            1,
        );
        let lost = prober.probe('a', 2, 0).unwrap();
        let half = prober.probe('b', 2, 10 * MS).unwrap();
        prober.on_send_completion(lost.seq, 1);
        prober.on_send_completion(half.seq, 1);
        let mut responder = Responder::new(2, 1, true, 8);
        let ack = responder.on_probe(&half, 5).unwrap();
        prober.on_ack(&ack, 20, 11 * MS).unwrap();
        assert!(prober.expire(499 * MS).is_empty());
        let first = prober.expire(500 * MS);
        assert_eq!(first.len(), 1);
        assert_eq!(
            first[0].outcome,
            ProbeOutcome::Timeout {
                ack: false,
                delay_ack: false
            }
        );
        let second = prober.expire(510 * MS);
        assert_eq!((second[0].target, second[0].seq), ('b', half.seq));
        assert_eq!(
            second[0].outcome,
            ProbeOutcome::Timeout {
                ack: true,
                delay_ack: false
            }
        );
        // A late delay ACK for an expired probe is not taken.
        let late = responder.on_ack_sent(&ack, 9).unwrap();
        assert_eq!(
            prober.on_ack(&late, 30, 600 * MS),
            Err(AckRejected::Unknown)
        );
    }

    #[test]
    fn stale_forged_and_duplicate_acks_are_rejected() {
        let mut prober = Prober::new(ProberConfig::default(), 1, 5);
        let mut responder = Responder::new(2, 1, true, 8);
        let probe = prober.probe_from((), 2, 0xC0DE, 1_000).unwrap();
        assert_eq!(probe.src_port, 0xC0DE);
        let ack = responder.on_probe(&probe, 5).unwrap();
        assert_eq!(ack.src_port, 0xC0DE);
        // An ACK echoing another source port than the probe left from.
        let moved = ProbeRepr {
            src_port: 0xC0DF,
            ..ack
        };
        assert_eq!(prober.on_ack(&moved, 0, 0), Err(AckRejected::Mismatch));
        // From an earlier incarnation of this agent (a restart in between).
        let stale = ProbeRepr {
            prober_incarnation: 4,
            ..ack
        };
        assert_eq!(prober.on_ack(&stale, 0, 0), Err(AckRejected::NotOurs));
        let forged = ProbeRepr {
            sent_ns: 999,
            ..ack
        };
        assert_eq!(prober.on_ack(&forged, 0, 0), Err(AckRejected::Mismatch));
        assert_eq!(prober.on_ack(&probe, 0, 0), Err(AckRejected::NotAnAck));
        assert_eq!(prober.on_ack(&ack, 10, 2_000), Ok(None));
        assert_eq!(prober.on_ack(&ack, 10, 2_000), Err(AckRejected::Duplicate));
        // The responder refuses probes for another queue pair and ACKs sent to it.
        let elsewhere = ProbeRepr {
            responder_qpn: 3,
            ..probe
        };
        assert_eq!(
            responder.on_probe(&elsewhere, 0),
            Err(ProbeRejected::WrongQpn)
        );
        assert_eq!(responder.on_probe(&ack, 0), Err(ProbeRejected::NotAProbe));
    }

    #[test]
    fn contradictory_timestamps_are_reported_not_turned_into_an_rtt() {
        let mut prober = Prober::new(ProberConfig::default(), 1, 1);
        let probe = prober.probe((), 2, 1_000).unwrap();
        prober.on_send_completion(probe.seq, 100);
        let ack = probe.ack(1);
        // The responder claims 1 ms of delay inside a 10 µs NIC round trip.
        let delay_ack = probe.delay_ack(1, 1_000_000, true);
        prober.on_ack(&ack, 10_100, 20_000).unwrap();
        let result = prober.on_ack(&delay_ack, 10_200, 20_100).unwrap().unwrap();
        assert_eq!(result.outcome, ProbeOutcome::Inconsistent);
    }

    #[test]
    fn abandoned_probes_and_measured_delays() {
        let mut prober = Prober::new(ProberConfig::default(), 1, 1);
        let probe = prober.probe('x', 2, 0).unwrap();
        assert!(prober.abandon(probe.seq));
        assert!(!prober.abandon(probe.seq));
        assert_eq!(prober.outstanding(), 0);
        // An abandoned probe neither completes nor times out.
        assert!(prober.expire(u64::MAX).is_empty());

        let mut responder = Responder::new(2, 9, false, 4);
        let ack = responder.on_probe(&probe, 100).unwrap();
        let delay = responder
            .on_ack_sent_measured(&ack, 42, TimestampSource::HostClock)
            .unwrap();
        assert_eq!(delay.responder_delay_ns, 42);
        assert!(delay.host_clock_timestamps && !delay.hardware_timestamps);
        assert!(responder.on_ack_sent(&ack, 500).is_none());
        let ack = responder.on_probe(&probe, 100).unwrap();
        let delay = responder
            .on_ack_sent_measured(&ack, 7, TimestampSource::Hardware)
            .unwrap();
        assert!(delay.hardware_timestamps && !delay.host_clock_timestamps);
        let ack = responder.on_probe(&probe, 100).unwrap();
        assert!(responder.abandon(&ack));
        assert!(responder
            .on_ack_sent_measured(&ack, 7, TimestampSource::Software)
            .is_none());
        assert_eq!(responder.forgotten(), 0);
    }

    #[test]
    fn both_sides_stay_bounded_under_a_flood() {
        let mut prober = Prober::new(
            ProberConfig {
                timeout_ns: MS,
                max_outstanding: 4,
            },
            1,
            1,
        );
        for i in 0..4 {
            assert!(prober.probe(i, 2, 0).is_some());
        }
        assert!(prober.probe(9, 2, 0).is_none());
        assert_eq!(prober.refused(), 1);
        assert_eq!(prober.expire(MS).len(), 4);
        assert!(prober.probe(10, 2, MS).is_some());

        let mut responder = Responder::new(2, 1, true, 3);
        let mut acks = Vec::new();
        for seq in 0..10u64 {
            let probe = ProbeRepr {
                kind: ProbeKind::Probe,
                hardware_timestamps: false,
                host_clock_timestamps: false,
                seq,
                prober_qpn: 1,
                responder_qpn: 2,
                sent_ns: seq,
                responder_delay_ns: 0,
                prober_incarnation: 1,
                responder_incarnation: 0,
                src_port: 0xC000,
            };
            acks.push(responder.on_probe(&probe, seq).unwrap());
        }
        assert_eq!(responder.forgotten(), 7);
        // The oldest were forgotten: no delay ACK for them; the newest still get theirs.
        assert!(responder.on_ack_sent(&acks[0], 100).is_none());
        assert_eq!(
            responder
                .on_ack_sent(&acks[9], 100)
                .unwrap()
                .responder_delay_ns,
            91
        );
    }
}
