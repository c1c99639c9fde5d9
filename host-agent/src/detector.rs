//! RTT threshold detection with per-flow suppression.

use hawkmesh_wire::polling::event_id;
use hawkmesh_wire::telemetry::FiveTuple;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Detection settings.
///
/// # Polling rule
///
/// A flow is polled when a sample is slow: an RTT above `threshold` × base RTT, or data
/// unacknowledged (or posted and not sent) for `stall_ns` (a stall; its RTT is how long it
/// has been stuck). HAWKEYE then suppresses the flow for `suppression_ns` to bound the
/// polling overhead (§3.4: it "drops polling packets with the same 5-tuple within a certain
/// time interval"). Within that interval a suppressed flow is polled again — an
/// *escalation* — only when its condition got materially worse or changed in kind, so that
/// an anomaly starting just after a poll is not hidden for the whole interval:
///
/// * **worse**: an RTT sample at least `escalation_factor` × the RTT that fired the last
///   poll of the flow (for a stall: how long it had been stuck then);
/// * **new stall**: a stall that began after the last poll of the flow (the flow was making
///   progress when it was polled; something new froze it). A stall that was already under
///   way at the last poll is the same condition growing and does not escalate by itself.
///
/// Escalations keep a bound on the polling rate: at least `escalation_gap_ns` after the
/// previous poll of the flow, and at most `max_escalations` per suppression interval (the
/// interval restarts with each poll that is not an escalation). A flow therefore sends at
/// most `1 + max_escalations` polling packets per `suppression_ns`, never two within
/// `escalation_gap_ns`; `max_escalations = 0` is HAWKEYE's plain suppression.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DetectorConfig {
    /// Poll when RTT > `threshold` × base RTT (HAWKEYE sweeps 2.0–5.0, i.e. 200 %–500 %).
    pub threshold: f64,
    /// At most one polling packet per flow within this interval, ns (the artifact: 3 ms),
    /// escalations aside.
    pub suppression_ns: u64,
    /// Smallest base RTT ever assumed, ns (guards against a bogus tiny first sample when
    /// the base RTT is learned).
    pub min_base_rtt_ns: u64,
    /// Also treat data unacknowledged for this long as a slow sample, ns (HAWKEYE's
    /// artifact: 50 µs); 0 disables it. A flow frozen by PFC gets no ACKs, hence no RTT.
    pub stall_ns: u64,
    /// An RTT at least this many times the one that fired the last poll escalates
    /// (default 2: the flow is twice as slow as when it was last polled).
    #[serde(default = "default_escalation_factor")]
    pub escalation_factor: f64,
    /// Escalations per suppression interval (default 2).
    #[serde(default = "default_max_escalations")]
    pub max_escalations: u32,
    /// Least time between two polls of one flow, ns (default 100 µs: the switch agents'
    /// guard interval, within which a second event would share the first one's register
    /// read anyway).
    #[serde(default = "default_escalation_gap_ns")]
    pub escalation_gap_ns: u64,
}

fn default_escalation_factor() -> f64 {
    2.0
}

fn default_max_escalations() -> u32 {
    2
}

fn default_escalation_gap_ns() -> u64 {
    100_000
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            threshold: 3.0,
            suppression_ns: 3_000_000,
            min_base_rtt_ns: 1_000,
            stall_ns: 50_000,
            escalation_factor: default_escalation_factor(),
            max_escalations: default_max_escalations(),
            escalation_gap_ns: default_escalation_gap_ns(),
        }
    }
}

/// Hop limit written into polling packets (enough for any Clos path and PFC branch).
pub const POLLING_HOP_LIMIT: u8 = 16;

/// A decision to poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollingTrigger {
    /// Polling event id: host id in the top 24 bits, a per-host sequence in the low 40
    /// (a trillion events per host before it could wrap). The low 32 bits are never zero:
    /// the switches' duplicate-suppression register compares them, and an empty cell holds
    /// zero.
    pub event_id: u64,
    /// The slow flow.
    pub victim: FiveTuple,
    /// The RTT sample that crossed the threshold, ns.
    pub rtt_ns: u64,
    /// The base RTT it was compared with, ns.
    pub base_rtt_ns: u64,
    /// When, ns.
    pub at_ns: u64,
    /// The flow was within its suppression interval and polled again because its
    /// condition got materially worse or changed in kind ([`DetectorConfig`]).
    #[serde(default)]
    pub escalation: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct FlowState {
    learned_base_ns: Option<u64>,
    /// When the flow was last polled.
    last_poll_ns: Option<u64>,
    /// The RTT (or stuck time) that fired the last poll, ns.
    last_poll_rtt_ns: u64,
    /// Start of the suppression interval: the last poll that was not an escalation.
    interval_start_ns: u64,
    /// Escalations since `interval_start_ns`.
    escalations: u32,
}

/// What a slow sample is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slow {
    /// An ACK's RTT.
    Rtt,
    /// Data stuck (unacknowledged, or posted and not sent) since this time, ns.
    Stall { since_ns: u64 },
}

/// Per-host detector.
#[derive(Clone, Debug)]
pub struct RttDetector {
    config: DetectorConfig,
    host_id: u32,
    next_sequence: u64,
    flows: BTreeMap<FiveTuple, FlowState>,
    samples: u64,
    suppressed: u64,
    polls: u64,
    escalations: u64,
    /// Work posted and not yet seen to make progress: when it was posted, its base RTT,
    /// and when to look at it next, ns.
    posted: BTreeMap<FiveTuple, Posted>,
}

#[derive(Clone, Copy, Debug)]
struct Posted {
    at_ns: u64,
    base_rtt_ns: Option<u64>,
    next_check_ns: u64,
}

impl RttDetector {
    /// A detector for host `host_id` (only its low 24 bits enter event ids).
    pub fn new(host_id: u32, config: DetectorConfig) -> Self {
        RttDetector {
            config,
            host_id: host_id & 0xFF_FFFF,
            next_sequence: 1,
            flows: BTreeMap::new(),
            samples: 0,
            suppressed: 0,
            polls: 0,
            escalations: 0,
            posted: BTreeMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &DetectorConfig {
        &self.config
    }

    /// Feeds one RTT sample of `victim`. `base_rtt_ns` is the flow's known unloaded RTT
    /// (from the topology); `None` learns it as the smallest RTT seen so far.
    pub fn observe(
        &mut self,
        victim: FiveTuple,
        rtt_ns: u64,
        base_rtt_ns: Option<u64>,
        now_ns: u64,
    ) -> Option<PollingTrigger> {
        self.sample(victim, rtt_ns, Slow::Rtt, base_rtt_ns, now_ns)
    }

    /// Feeds a stall of `victim`: its data has been stuck since `stuck_since_ns`
    /// (unacknowledged since then, or posted then and not sent). How long it has been
    /// stuck is compared with the base RTT like an RTT sample (a stall says nothing about
    /// the base RTT, so it never teaches one).
    pub fn observe_stall(
        &mut self,
        victim: FiveTuple,
        stuck_since_ns: u64,
        base_rtt_ns: Option<u64>,
        now_ns: u64,
    ) -> Option<PollingTrigger> {
        let stuck = now_ns.saturating_sub(stuck_since_ns);
        self.sample(
            victim,
            stuck,
            Slow::Stall {
                since_ns: stuck_since_ns,
            },
            base_rtt_ns,
            now_ns,
        )
    }

    fn sample(
        &mut self,
        victim: FiveTuple,
        rtt_ns: u64,
        slow: Slow,
        base_rtt_ns: Option<u64>,
        now_ns: u64,
    ) -> Option<PollingTrigger> {
        self.samples += 1;
        if slow == Slow::Rtt {
            // An ACK came back: the flow made progress (stalls are the transport's now).
            self.posted.remove(&victim);
        }
        let config = self.config;
        let state = self.flows.entry(victim).or_default();
        let base = match (base_rtt_ns, slow) {
            (Some(base), _) => base,
            (None, Slow::Rtt) => {
                let learned = state.learned_base_ns.map_or(rtt_ns, |b| b.min(rtt_ns));
                state.learned_base_ns = Some(learned);
                learned
            }
            (None, Slow::Stall { .. }) => state.learned_base_ns.unwrap_or(0),
        }
        .max(config.min_base_rtt_ns);
        if (rtt_ns as f64) <= config.threshold * base as f64 {
            return None;
        }
        let mut escalation = false;
        if let Some(last) = state.last_poll_ns {
            if now_ns.saturating_sub(state.interval_start_ns) < config.suppression_ns {
                // Suppressed, unless materially worse or new in kind (DetectorConfig).
                let worse = slow == Slow::Rtt
                    && rtt_ns as f64 >= config.escalation_factor * state.last_poll_rtt_ns as f64;
                let new_stall = matches!(slow, Slow::Stall { since_ns } if since_ns > last);
                let allowed = state.escalations < config.max_escalations
                    && now_ns.saturating_sub(last) >= config.escalation_gap_ns;
                if !(allowed && (worse || new_stall)) {
                    self.suppressed += 1;
                    return None;
                }
                escalation = true;
            }
        }
        state.last_poll_ns = Some(now_ns);
        state.last_poll_rtt_ns = rtt_ns;
        if escalation {
            state.escalations += 1;
            self.escalations += 1;
        } else {
            state.interval_start_ns = now_ns;
            state.escalations = 0;
        }
        if self.next_sequence & 0xFFFF_FFFF == 0 {
            self.next_sequence += 1;
        }
        let event_id = event_id(self.host_id, self.next_sequence);
        self.next_sequence += 1;
        self.polls += 1;
        Some(PollingTrigger {
            event_id,
            victim,
            rtt_ns,
            base_rtt_ns: base,
            at_ns: now_ns,
            escalation,
        })
    }

    /// Work was posted on `victim` at `posted_at_ns` (a send queued on the QP). Until it
    /// makes progress ([`RttDetector::progress`], or an RTT sample) it counts as stalled
    /// from when it was posted once `stall_ns` has passed: a flow that starts while its own
    /// NIC is paused by PFC sends nothing, so neither an ACK nor a stall of unacknowledged
    /// data would ever tell of it ([`RttDetector::check_posted`]). Posting again while
    /// pending keeps the first post time.
    pub fn post(&mut self, victim: FiveTuple, posted_at_ns: u64, base_rtt_ns: Option<u64>) {
        if self.config.stall_ns == 0 {
            return;
        }
        self.posted.entry(victim).or_insert(Posted {
            at_ns: posted_at_ns,
            base_rtt_ns,
            next_check_ns: posted_at_ns.saturating_add(self.config.stall_ns),
        });
    }

    /// `victim` made progress (sent or had acknowledged its first bytes): from now on its
    /// stalls are those of unacknowledged data.
    pub fn progress(&mut self, victim: FiveTuple) {
        self.posted.remove(&victim);
    }

    /// Flows posted and not progressing, at `now_ns`: each one stuck for `stall_ns` or more
    /// is a stall since its post time ([`RttDetector::observe_stall`]); looked at again
    /// every `stall_ns` while it lasts. Returns the polls this decides, in flow order.
    pub fn check_posted(&mut self, now_ns: u64) -> Vec<PollingTrigger> {
        let due: Vec<(FiveTuple, Posted)> = self
            .posted
            .iter()
            .filter(|(_, p)| p.next_check_ns <= now_ns)
            .map(|(f, p)| (*f, *p))
            .collect();
        let mut triggers = Vec::new();
        for (victim, posted) in due {
            if let Some(entry) = self.posted.get_mut(&victim) {
                entry.next_check_ns = now_ns.saturating_add(self.config.stall_ns);
            }
            if let Some(trigger) =
                self.observe_stall(victim, posted.at_ns, posted.base_rtt_ns, now_ns)
            {
                triggers.push(trigger);
            }
        }
        triggers
    }

    /// Flows posted and not yet seen to make progress.
    pub fn pending_posts(&self) -> usize {
        self.posted.len()
    }

    /// Polls that were escalations (a suppressed flow polled again, see [`DetectorConfig`]).
    pub fn escalations(&self) -> u64 {
        self.escalations
    }

    /// Samples seen.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Polling packets sent.
    pub fn polls(&self) -> u64 {
        self.polls
    }

    /// Threshold crossings that were suppressed.
    pub fn suppressed(&self) -> u64 {
        self.suppressed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(port: u16) -> FiveTuple {
        FiveTuple::rocev2([10, 0, 0, 1], port, [10, 0, 0, 2])
    }

    #[test]
    fn polls_above_the_threshold_once_per_suppression_interval_per_flow() {
        let config = DetectorConfig {
            threshold: 2.0,
            suppression_ns: 1_000_000,
            min_base_rtt_ns: 1_000,
            stall_ns: 0,
            // HAWKEYE's plain suppression.
            max_escalations: 0,
            ..DetectorConfig::default()
        };
        let mut detector = RttDetector::new(7, config);
        let base = Some(10_000);
        assert_eq!(
            detector.observe(flow(1), 20_000, base, 0),
            None,
            "exactly 200 % is not above"
        );
        let first = detector.observe(flow(1), 20_001, base, 10).unwrap();
        assert_eq!(first.victim, flow(1));
        assert_eq!(first.event_id, (7 << 40) | 1);
        assert_ne!(first.event_id & 0xFFFF_FFFF, 0);
        assert_eq!(
            detector.observe(flow(1), 50_000, base, 999_999),
            None,
            "suppressed"
        );
        assert_eq!(detector.suppressed(), 1);
        // Another flow is not suppressed by the first one's poll.
        let other = detector.observe(flow(2), 50_000, base, 20).unwrap();
        assert_eq!(other.event_id, (7 << 40) | 2);
        let again = detector.observe(flow(1), 50_000, base, 1_000_010).unwrap();
        assert_eq!(again.event_id, (7 << 40) | 3);
        assert_eq!((detector.samples(), detector.polls()), (5, 3));
    }

    #[test]
    fn a_suppressed_flow_is_polled_again_when_it_gets_much_worse_or_newly_stalls() {
        // A victim polled just before an anomaly starts must not be blind to it for the
        // whole 3 ms suppression interval.
        let mut detector = RttDetector::new(1, DetectorConfig::default());
        let base = Some(10_000);
        let us = 1_000;
        let first = detector.observe(flow(1), 40_000, base, 0).unwrap();
        assert!(!first.escalation);
        // Twice as slow, but within the 100 µs escalation gap.
        assert_eq!(detector.observe(flow(1), 90_000, base, 50 * us), None);
        // Later, but not materially worse (< 2 × 40 µs).
        assert_eq!(detector.observe(flow(1), 70_000, base, 150 * us), None);
        // Twice the RTT that fired the poll: polled again.
        let worse = detector.observe(flow(1), 85_000, base, 200 * us).unwrap();
        assert!(worse.escalation);
        assert_ne!(worse.event_id, first.event_id);
        // A stall under way since before that poll is the same condition growing.
        assert_eq!(
            detector.observe_stall(flow(1), 150 * us, base, 400 * us),
            None
        );
        // A stall that began after the last poll is new: the flow was moving then.
        let stalled = detector
            .observe_stall(flow(1), 350 * us, base, 450 * us)
            .unwrap();
        assert!(stalled.escalation);
        assert_eq!(stalled.rtt_ns, 100 * us);
        // At most two escalations per suppression interval bound the polling rate.
        assert_eq!(detector.observe(flow(1), 1_000_000, base, 700 * us), None);
        assert_eq!(
            detector.observe_stall(flow(1), 800 * us, base, 900 * us),
            None
        );
        // The interval runs from the last ordinary poll.
        let next = detector.observe(flow(1), 40_000, base, 3_000 * us).unwrap();
        assert!(!next.escalation);
        assert_eq!((detector.polls(), detector.escalations()), (4, 2));
        assert_eq!(detector.suppressed(), 5);
    }

    #[test]
    fn work_posted_and_never_sent_counts_as_stalled_from_its_post() {
        // A flow that starts while its own NIC is paused sends nothing: no ACK, no
        // unacknowledged data, yet it is stuck from the moment its work was posted.
        let mut detector = RttDetector::new(2, DetectorConfig::default());
        let base = Some(10_000);
        detector.post(flow(1), 100_000, base);
        detector.post(flow(2), 100_000, base);
        assert!(
            detector.check_posted(140_000).is_empty(),
            "not yet stall_ns"
        );
        // flow(2) got going: its ACKs are its RTT samples from now on.
        assert_eq!(detector.observe(flow(2), 12_000, base, 145_000), None);
        let triggers = detector.check_posted(150_000);
        assert_eq!(triggers.len(), 1);
        assert_eq!(triggers[0].victim, flow(1));
        assert_eq!(triggers[0].rtt_ns, 50_000, "stuck since it was posted");
        // Still stuck: the same stall, suppressed.
        assert!(detector.check_posted(200_000).is_empty());
        assert_eq!(detector.pending_posts(), 1);
        detector.progress(flow(1));
        assert_eq!(detector.pending_posts(), 0);
        assert!(detector.check_posted(10_000_000).is_empty());
    }

    #[test]
    fn learns_the_base_rtt_when_not_given() {
        let mut detector = RttDetector::new(1, DetectorConfig::default());
        assert_eq!(detector.observe(flow(1), 12_000, None, 0), None);
        assert_eq!(detector.observe(flow(1), 9_000, None, 1), None);
        // 3 × 9 µs = 27 µs.
        assert_eq!(detector.observe(flow(1), 27_000, None, 2), None);
        let trigger = detector.observe(flow(1), 27_001, None, 3).unwrap();
        assert_eq!(trigger.base_rtt_ns, 9_000);
        // A tiny first sample cannot make every later sample look slow.
        let mut detector = RttDetector::new(1, DetectorConfig::default());
        assert_eq!(detector.observe(flow(3), 10, None, 0), None);
        assert_eq!(detector.observe(flow(3), 2_500, None, 1), None);
    }
}
