//! RTT threshold detection with per-flow suppression.

use hawkmesh_wire::polling::event_id;
use hawkmesh_wire::telemetry::FiveTuple;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Detection settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DetectorConfig {
    /// Poll when RTT > `threshold` × base RTT (HAWKEYE sweeps 2.0–5.0, i.e. 200 %–500 %).
    pub threshold: f64,
    /// At most one polling packet per flow within this interval, ns (the artifact: 3 ms).
    pub suppression_ns: u64,
    /// Smallest base RTT ever assumed, ns (guards against a bogus tiny first sample when
    /// the base RTT is learned).
    pub min_base_rtt_ns: u64,
    /// Also treat data unacknowledged for this long as a slow sample, ns (HAWKEYE's
    /// artifact: 50 µs); 0 disables it. A flow frozen by PFC gets no ACKs, hence no RTT.
    pub stall_ns: u64,
}

impl Default for DetectorConfig {
    fn default() -> Self {
        DetectorConfig {
            threshold: 3.0,
            suppression_ns: 3_000_000,
            min_base_rtt_ns: 1_000,
            stall_ns: 50_000,
        }
    }
}

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
}

#[derive(Clone, Copy, Debug, Default)]
struct FlowState {
    learned_base_ns: Option<u64>,
    last_poll_ns: Option<u64>,
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
        }
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
        self.samples += 1;
        let state = self.flows.entry(victim).or_default();
        let base = match base_rtt_ns {
            Some(base) => base,
            None => {
                let learned = state.learned_base_ns.map_or(rtt_ns, |b| b.min(rtt_ns));
                state.learned_base_ns = Some(learned);
                learned
            }
        }
        .max(self.config.min_base_rtt_ns);
        if (rtt_ns as f64) <= self.config.threshold * base as f64 {
            return None;
        }
        if let Some(last) = state.last_poll_ns {
            if now_ns.saturating_sub(last) < self.config.suppression_ns {
                self.suppressed += 1;
                return None;
            }
        }
        state.last_poll_ns = Some(now_ns);
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
        })
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
