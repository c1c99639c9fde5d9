//! Whether the sender itself was held by PFC while a sampled packet was in flight.
//!
//! A RoCE NIC counts how long its transmit side has been paused per priority (ConnectX:
//! `rx_prio{N}_pause_duration` in `ethtool -S`; netsim: `RttSample::src_pause`). The agent
//! reads that counter whenever it takes an RTT sample of any flow on the NIC (or on its own
//! polling period on a real host), and keeps the readings of the last few milliseconds. A
//! sample whose packet was sent at `sent` and acknowledged at `now` was held at its own NIC
//! when the counter grew over that span: the reading now exceeds the newest reading taken
//! at or before `sent`. The ToR then holds the host for an egress the victim's path may
//! never cross, so the polling packet carries the PFC-causality bit from its first hop
//! (HAWKEYE Table 1 `10`) and the ToR's data plane follows that pause from the host's port.
//!
//! Comparing with the flow's own previous sample instead misses the pause when that sample
//! arrived after the pause ended while this packet was still held (several packets of a
//! flow are in flight at once): the counter had already grown by then.

use std::collections::VecDeque;

/// Readings kept per NIC: enough for several RTTs of samples at line rate; older readings
/// are dropped first (bounded memory whatever the sample rate).
pub const PAUSE_READINGS: usize = 512;

/// The pause-duration counter readings of one NIC and priority, oldest first.
#[derive(Clone, Debug, Default)]
pub struct PauseHistory {
    readings: VecDeque<(u64, u64)>,
}

impl PauseHistory {
    /// An empty history.
    pub fn new() -> Self {
        PauseHistory::default()
    }

    /// Records a reading `pause_ns` (total paused time, ns) taken at `at_ns`. Readings come
    /// in time order; one older than the newest is ignored (a counter read out of order
    /// tells nothing new).
    pub fn record(&mut self, at_ns: u64, pause_ns: u64) {
        if let Some(&(last_at, last)) = self.readings.back() {
            if at_ns < last_at {
                return;
            }
            if pause_ns == last && self.readings.len() > 1 {
                // An unchanged counter: the newest reading stands for the span (keeps the
                // history short when nothing is paused), moved up to `at_ns`.
                let before = self.readings[self.readings.len() - 2].1;
                if before == last {
                    self.readings.pop_back();
                }
            }
        }
        if self.readings.len() == PAUSE_READINGS {
            self.readings.pop_front();
        }
        self.readings.push_back((at_ns, pause_ns));
    }

    /// Whether the counter grew between `sent_ns` and the reading `pause_ns` now: the newest
    /// reading at or before `sent_ns` is lower. `None` when no reading that old is kept
    /// (nothing to compare with).
    pub fn grew_since(&self, sent_ns: u64, pause_ns: u64) -> Option<bool> {
        let idx = self.readings.partition_point(|&(at, _)| at <= sent_ns);
        let (_, before) = *self.readings.get(idx.checked_sub(1)?)?;
        Some(pause_ns > before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_that_ended_before_the_flows_previous_sample_still_held_a_packet_sent_during_it() {
        let mut nic = PauseHistory::new();
        nic.record(100, 0); // some flow's sample before the pause
        nic.record(900, 40); // after a 40 ns pause ended
                             // A packet sent at 150 (during the pause), acknowledged at 1000 with the counter at 40:
                             // it grew since 150 even though the latest reading (900) already shows 40.
        assert_eq!(nic.grew_since(150, 40), Some(true));
        // A packet sent after the pause met no pause at its NIC.
        assert_eq!(nic.grew_since(950, 40), Some(false));
        // Before any reading: nothing to compare with.
        assert_eq!(nic.grew_since(50, 40), None);
    }

    #[test]
    fn the_history_stays_bounded_and_in_time_order() {
        let mut nic = PauseHistory::new();
        for i in 0..(4 * PAUSE_READINGS as u64) {
            nic.record(i * 10, i);
        }
        assert!(nic.readings.len() <= PAUSE_READINGS);
        // Out-of-order readings are ignored.
        nic.record(5, 1_000_000);
        assert_eq!(
            nic.grew_since(
                4 * PAUSE_READINGS as u64 * 10,
                4 * PAUSE_READINGS as u64 - 1
            ),
            Some(false)
        );
        // An idle counter collapses into its newest reading.
        let mut idle = PauseHistory::new();
        for i in 0..10_000u64 {
            idle.record(i, 7);
        }
        assert!(idle.readings.len() <= 2);
        assert_eq!(idle.grew_since(9_000, 7), Some(false));
        assert_eq!(idle.grew_since(9_000, 8), Some(true));
    }
}
