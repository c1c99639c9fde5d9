//! The event core: a monotone priority queue ordered by (time, insertion order).
//!
//! Events are small `Copy` values (no boxing, no per-event allocation); the queue's storage is
//! reused for the whole run. Ties in time are broken by insertion order, which makes every run
//! with the same inputs process events in exactly the same order.

use crate::time::Time;
use std::collections::VecDeque;

/// What happens when an event fires. Indices refer to the simulator's arenas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A packet finishes arriving at the receiving end of a link (global port index).
    Arrive { port: u32, packet: u32 },
    /// A port finished serializing and may start the next packet.
    TxFree { port: u32 },
    /// A flow (queue pair) starts.
    FlowStart { flow: u32 },
    /// A rate-limited queue pair may send its next packet.
    QpReady { flow: u32 },
    /// DCQCN rate-decrease check (`rate_reduce_monitor_period` boundary) of a queue pair.
    DcqcnDecrease { flow: u32 },
    /// DCQCN rate-increase timer (`rpg_time_reset`) of a queue pair.
    DcqcnIncrease { flow: u32, generation: u32 },
    /// Go-back-N retransmission timer of a queue pair.
    RetransmitTimer { flow: u32 },
    /// Stall check of a queue pair for the host hook.
    StallCheck { flow: u32 },
    /// A switch re-sends PAUSE for an ingress (port, priority) that is still congested.
    PfcRefresh {
        port: u32,
        priority: u8,
        generation: u32,
    },
    /// A host NIC's receive pipeline finished absorbing a packet (slow receiver model).
    NicRxDrain { port: u32, packet: u32 },
    /// A scheduled fault action (index into the fault timeline).
    Fault { action: u32 },
    /// Periodic queue-depth sampling.
    Sample,
    /// The host hook's periodic wake-up.
    HostWakeup,
    /// A host hook's deferred send (index into the deferred sends).
    HostSend { slot: u32 },
    /// A host hook's packet left its NIC (index into the pending send completions).
    HostTxDone { slot: u32 },
}

/// The pending-event set: a radix heap (Ahuja, Mehlhorn, Orlin & Tarjan, 1990) keyed by time.
///
/// Simulation time never goes backwards, which is exactly what a radix heap needs: an event is
/// filed in bucket `b` = position of the highest bit in which its time differs from the last
/// popped time; popping refills bucket 0 from the lowest non-empty bucket. Every bucket keeps
/// its events in insertion order (pushes append; a refill moves one bucket's events, in order,
/// into empty lower buckets), so events with equal times come out in the order they were
/// scheduled — the (time, sequence) order the simulator's determinism relies on, without
/// storing a sequence number.
#[derive(Debug)]
pub struct EventQueue {
    last: Time,
    front: VecDeque<(Time, EventKind)>,
    buckets: Vec<Vec<(Time, EventKind)>>,
    occupied: u128,
    len: usize,
    processed: u64,
    max_pending: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self::with_capacity(0)
    }
}

#[inline]
fn bucket_of(time: Time, last: Time) -> usize {
    64 - (time ^ last).leading_zeros() as usize
}

impl EventQueue {
    /// An empty queue with room for `capacity` events in its first bucket.
    pub fn with_capacity(capacity: usize) -> Self {
        EventQueue {
            last: 0,
            front: VecDeque::with_capacity(capacity),
            buckets: (0..=64).map(|_| Vec::new()).collect(),
            occupied: 0,
            len: 0,
            processed: 0,
            max_pending: 0,
        }
    }

    /// Schedules `kind` at absolute time `time`; a time in the past is treated as now.
    #[inline]
    pub fn schedule(&mut self, time: Time, kind: EventKind) {
        let time = time.max(self.last);
        let bucket = bucket_of(time, self.last);
        if bucket == 0 {
            self.front.push_back((time, kind));
        } else {
            self.buckets[bucket].push((time, kind));
            self.occupied |= 1 << bucket;
        }
        self.len += 1;
        if self.len > self.max_pending {
            self.max_pending = self.len;
        }
    }

    fn refill(&mut self) -> bool {
        if self.occupied == 0 {
            return false;
        }
        let index = self.occupied.trailing_zeros() as usize;
        self.occupied &= !(1 << index);
        let mut moving = std::mem::take(&mut self.buckets[index]);
        self.last = moving.iter().map(|(t, _)| *t).min().unwrap_or(self.last);
        for (time, kind) in moving.drain(..) {
            let bucket = bucket_of(time, self.last);
            if bucket == 0 {
                self.front.push_back((time, kind));
            } else {
                self.buckets[bucket].push((time, kind));
                self.occupied |= 1 << bucket;
            }
        }
        // Give the (now empty) vector back so its capacity is reused.
        self.buckets[index] = moving;
        true
    }

    /// Removes and returns the earliest event if it is not later than `until`.
    #[inline]
    pub fn pop_until(&mut self, until: Time) -> Option<(Time, EventKind)> {
        if self.front.is_empty() && !self.refill() {
            return None;
        }
        if self.last > until {
            return None;
        }
        let event = self.front.pop_front()?;
        self.len -= 1;
        self.processed += 1;
        Some(event)
    }

    /// The next event, if it is already known without reorganising the queue.
    #[inline]
    pub fn peek_ready(&self) -> Option<&(Time, EventKind)> {
        self.front.front()
    }

    /// Number of events processed so far.
    pub fn processed(&self) -> u64 {
        self.processed
    }

    /// Number of events still pending.
    pub fn pending(&self) -> usize {
        self.len
    }

    /// Largest number of simultaneously pending events.
    pub fn max_pending(&self) -> usize {
        self.max_pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_and_ties_in_insertion_order() {
        let mut q = EventQueue::with_capacity(4);
        q.schedule(30, EventKind::Sample);
        q.schedule(10, EventKind::FlowStart { flow: 1 });
        q.schedule(10, EventKind::FlowStart { flow: 2 });
        q.schedule(20, EventKind::TxFree { port: 3 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop_until(25)).collect();
        assert_eq!(
            order,
            vec![
                (10, EventKind::FlowStart { flow: 1 }),
                (10, EventKind::FlowStart { flow: 2 }),
                (20, EventKind::TxFree { port: 3 }),
            ]
        );
        assert_eq!(q.pending(), 1);
        assert_eq!(q.processed(), 3);
    }

    #[test]
    fn matches_a_sorted_reference_on_random_schedules() {
        // Interleave pops and pushes (never into the past) and compare with a stable sort.
        let mut rng = crate::rng::Rng::new(11);
        let mut q = EventQueue::default();
        let mut reference: Vec<(Time, u64, u32)> = Vec::new();
        let mut now = 0;
        let mut sequence = 0;
        let mut popped = Vec::new();
        let mut expected = Vec::new();
        for round in 0..2000 {
            for _ in 0..rng.below(4) {
                let at = now + rng.below(if round % 7 == 0 { 1 << 40 } else { 300 });
                q.schedule(
                    at,
                    EventKind::QpReady {
                        flow: sequence as u32,
                    },
                );
                reference.push((at, sequence, sequence as u32));
                sequence += 1;
            }
            if let Some((time, EventKind::QpReady { flow })) = q.pop_until(Time::MAX) {
                now = time;
                popped.push((time, flow));
                reference.sort_by_key(|(t, s, _)| (*t, *s));
                let (t, _, f) = reference.remove(0);
                expected.push((t, f));
            }
        }
        assert_eq!(popped, expected);
        assert!(q.pop_until(0).is_none() || now == 0);
    }
}
