//! A PFC watchdog from counters alone, for fabrics without the P4 data plane — in the
//! spirit of SONiC pfcwd (SONiC pfcwd design: a lossless queue that is paused and does not
//! transmit for the detection time is in a PFC storm; it is restored once no pause frames
//! arrive for the restoration time; both 200 ms by default).
//!
//! Per (port, priority), between consecutive samples of the port:
//! - *paused*: the received PFC frames (IEEE 802.1Qbb) or the received pause duration rose;
//! - *transmitting*: the priority's transmitted packets or bytes rose (when not reported,
//!   the decision rests on the pause counters alone);
//! - a queue paused and not transmitting continuously from `since` is a [`Verdict::Storm`]
//!   at the first sample whose read time is at least `since + detection`;
//! - a stormed queue with no new pauses continuously from `calm` is [`Verdict::Restored`]
//!   at the first sample at least `calm + restoration`.
//!
//! Deadlocks: a paused port A waits on its link peer B's node; that node cannot drain while
//! one of its own ports C is paused on the same priority. With the supplied link map, the
//! paused queues and these "A waits on C" edges form a graph whose cycles are circular
//! buffer dependencies — a PFC deadlock ([`Watchdog::deadlocks`]).
//!
//! Times are the samples' estimated read times, tᵠ + tᵖ/2 (as in Yellowstone Eq. 3), in ns.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::sample::{PfcCounters, PortId, PortKey, Sample, PRIORITIES};

/// Which port each port's link goes to.
pub type LinkMap = BTreeMap<PortKey, PortKey>;

/// A link map with both directions of each `(a, b)` link.
pub fn link_map(links: &[(PortKey, PortKey)]) -> LinkMap {
    let mut m = LinkMap::new();
    for (a, b) in links {
        m.insert(a.clone(), b.clone());
        m.insert(b.clone(), a.clone());
    }
    m
}

/// The watchdog's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchdogConfig {
    /// Paused without transmitting for this long is a storm, ns (SONiC default 200 ms).
    pub detection_ns: u64,
    /// No pauses for this long restores a stormed queue, ns (SONiC default 200 ms).
    pub restoration_ns: u64,
    /// The lossless priorities watched (3 and 4 in SONiC's default lossless profile).
    pub priorities: Vec<u8>,
}

impl Default for WatchdogConfig {
    fn default() -> Self {
        WatchdogConfig {
            detection_ns: 200_000_000,
            restoration_ns: 200_000_000,
            priorities: vec![3, 4],
        }
    }
}

/// The counter deltas behind a verdict, summed over its window.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// The window's start (read time), ns.
    pub from_ns: u64,
    /// The window's end (read time), ns.
    pub to_ns: u64,
    /// PFC frames received.
    pub rx_pause_frames: Option<u64>,
    /// Pause duration received, µs.
    pub rx_pause_duration_us: Option<u64>,
    /// Packets transmitted on the priority.
    pub tx_pkts: Option<u64>,
    /// Bytes transmitted on the priority.
    pub tx_bytes: Option<u64>,
    /// Sample intervals in the window.
    pub intervals: u32,
}

fn add(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.saturating_add(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

impl Evidence {
    fn starting(at: u64) -> Self {
        Evidence {
            from_ns: at,
            to_ns: at,
            ..Evidence::default()
        }
    }

    fn absorb(&mut self, d: &Deltas, to: u64) {
        self.rx_pause_frames = add(self.rx_pause_frames, d.rx_pause);
        self.rx_pause_duration_us = add(self.rx_pause_duration_us, d.rx_duration);
        self.tx_pkts = add(self.tx_pkts, d.tx_pkts);
        self.tx_bytes = add(self.tx_bytes, d.tx_bytes);
        self.to_ns = to;
        self.intervals = self.intervals.saturating_add(1);
    }
}

/// What the watchdog concludes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "verdict")]
pub enum Verdict {
    /// A queue paused without transmitting for the detection time.
    Storm {
        /// The port.
        port: PortId,
        /// The priority.
        priority: u8,
        /// When the stall began (read time), ns.
        since_ns: u64,
        /// When it was declared, ns.
        detected_ns: u64,
        /// The deltas over the stall.
        evidence: Evidence,
    },
    /// A stormed queue received no pauses for the restoration time.
    Restored {
        /// The port.
        port: PortId,
        /// The priority.
        priority: u8,
        /// When the storm began, ns.
        storm_since_ns: u64,
        /// When it was declared over, ns.
        restored_ns: u64,
        /// The deltas over the calm window.
        evidence: Evidence,
    },
    /// Paused queues that wait on each other in a cycle: a PFC deadlock.
    Deadlock {
        /// The priority.
        priority: u8,
        /// The ports of the cycle, each waiting on the next (the last on the first).
        cycle: Vec<PortId>,
        /// The latest read time among them, ns.
        detected_ns: u64,
    },
}

/// A queue's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum QueueState {
    /// Not paused in the last interval.
    Normal,
    /// Paused without transmitting since `since_ns`, not yet for the detection time.
    Stalled {
        /// Since when, ns.
        since_ns: u64,
    },
    /// In a storm since `since_ns`; calm (no pauses) since `calm_since_ns`, if so.
    Storm {
        /// Since when, ns.
        since_ns: u64,
        /// Since when no pauses arrived.
        calm_since_ns: Option<u64>,
    },
}

#[derive(Clone, Debug)]
struct Queue {
    port: PortId,
    state: QueueState,
    evidence: Evidence,
}

#[derive(Clone, Copy, Debug, Default)]
struct Deltas {
    rx_pause: Option<u64>,
    rx_duration: Option<u64>,
    tx_pkts: Option<u64>,
    tx_bytes: Option<u64>,
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    // A counter that went backwards was cleared: its rise since is unknown.
    b?.checked_sub(a?)
}

impl Deltas {
    fn of(a: &PfcCounters, b: &PfcCounters) -> Self {
        Deltas {
            rx_pause: delta(a.rx_pause, b.rx_pause),
            rx_duration: delta(a.rx_pause_duration_us, b.rx_pause_duration_us),
            tx_pkts: delta(a.tx_pkts, b.tx_pkts),
            tx_bytes: delta(a.tx_bytes, b.tx_bytes),
        }
    }

    fn paused(&self) -> bool {
        self.rx_pause.is_some_and(|d| d > 0) || self.rx_duration.is_some_and(|d| d > 0)
    }

    fn transmitted(&self) -> bool {
        self.tx_pkts.is_some_and(|d| d > 0) || self.tx_bytes.is_some_and(|d| d > 0)
    }
}

fn read_time(s: &Sample) -> u64 {
    s.t_query_ns.saturating_add(s.turnaround_ns / 2)
}

/// The watchdog: feed it every port's samples in time order.
#[derive(Clone, Debug)]
pub struct Watchdog {
    cfg: WatchdogConfig,
    last: BTreeMap<PortKey, Sample>,
    queues: BTreeMap<(PortKey, u8), Queue>,
}

impl Watchdog {
    /// A watchdog with `cfg` (priorities past 7 are ignored).
    pub fn new(mut cfg: WatchdogConfig) -> Self {
        cfg.priorities.retain(|&p| usize::from(p) < PRIORITIES);
        cfg.priorities.sort_unstable();
        cfg.priorities.dedup();
        Watchdog {
            cfg,
            last: BTreeMap::new(),
            queues: BTreeMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &WatchdogConfig {
        &self.cfg
    }

    /// The state of `port`'s `priority` queue (`None` before two samples of the port).
    pub fn state(&self, port: &PortKey, priority: u8) -> Option<QueueState> {
        self.queues.get(&(port.clone(), priority)).map(|q| q.state)
    }

    /// Takes one sample; returns the storms declared and restored by it. A sample not later
    /// than the port's previous one is ignored.
    pub fn observe(&mut self, sample: &Sample) -> Vec<Verdict> {
        let key = sample.port.key();
        let t1 = read_time(sample);
        let prev = match self.last.get(&key) {
            Some(p) if read_time(p) >= t1 => return Vec::new(),
            p => p.cloned(),
        };
        self.last.insert(key.clone(), sample.clone());
        let Some(prev) = prev else {
            return Vec::new();
        };
        let t0 = read_time(&prev);
        let mut out = Vec::new();
        for &p in &self.cfg.priorities {
            let (Some(a), Some(b)) = (prev.pfc(p), sample.pfc(p)) else {
                continue;
            };
            if a.is_empty() && b.is_empty() {
                continue;
            }
            let d = Deltas::of(a, b);
            let q = self
                .queues
                .entry((key.clone(), p))
                .or_insert_with(|| Queue {
                    port: sample.port.clone(),
                    state: QueueState::Normal,
                    evidence: Evidence::starting(t0),
                });
            q.port = sample.port.clone();
            let stalled = d.paused() && !d.transmitted();
            match q.state {
                QueueState::Normal | QueueState::Stalled { .. } => {
                    if !stalled {
                        q.state = QueueState::Normal;
                        continue;
                    }
                    let since = match q.state {
                        QueueState::Stalled { since_ns } => since_ns,
                        _ => {
                            q.evidence = Evidence::starting(t0);
                            t0
                        }
                    };
                    q.evidence.absorb(&d, t1);
                    if t1.saturating_sub(since) >= self.cfg.detection_ns {
                        q.state = QueueState::Storm {
                            since_ns: since,
                            calm_since_ns: None,
                        };
                        out.push(Verdict::Storm {
                            port: q.port.clone(),
                            priority: p,
                            since_ns: since,
                            detected_ns: t1,
                            evidence: q.evidence.clone(),
                        });
                    } else {
                        q.state = QueueState::Stalled { since_ns: since };
                    }
                }
                QueueState::Storm {
                    since_ns,
                    calm_since_ns,
                } => {
                    if d.paused() {
                        q.state = QueueState::Storm {
                            since_ns,
                            calm_since_ns: None,
                        };
                        continue;
                    }
                    let calm = match calm_since_ns {
                        Some(c) => c,
                        None => {
                            q.evidence = Evidence::starting(t0);
                            t0
                        }
                    };
                    q.evidence.absorb(&d, t1);
                    if t1.saturating_sub(calm) >= self.cfg.restoration_ns {
                        q.state = QueueState::Normal;
                        out.push(Verdict::Restored {
                            port: q.port.clone(),
                            priority: p,
                            storm_since_ns: since_ns,
                            restored_ns: t1,
                            evidence: q.evidence.clone(),
                        });
                    } else {
                        q.state = QueueState::Storm {
                            since_ns,
                            calm_since_ns: Some(calm),
                        };
                    }
                }
            }
        }
        out
    }

    /// Takes samples in order; returns every verdict of [`observe`](Self::observe).
    pub fn observe_all(&mut self, samples: &[Sample]) -> Vec<Verdict> {
        samples.iter().flat_map(|s| self.observe(s)).collect()
    }

    /// The cycles of paused queues waiting on each other over `links`, one per strongly
    /// connected group of the wait graph, per priority. A queue counts as paused while
    /// stalled or in a storm that has not gone calm.
    pub fn deadlocks(&self, links: &LinkMap) -> Vec<Verdict> {
        let mut out = Vec::new();
        for &p in &self.cfg.priorities {
            let paused: Vec<&PortKey> = self
                .queues
                .iter()
                .filter(|((_, prio), q)| {
                    *prio == p
                        && matches!(
                            q.state,
                            QueueState::Stalled { .. }
                                | QueueState::Storm {
                                    calm_since_ns: None,
                                    ..
                                }
                        )
                })
                .map(|((k, _), _)| k)
                .collect();
            let index: BTreeMap<&PortKey, usize> =
                paused.iter().enumerate().map(|(i, k)| (*k, i)).collect();
            // A waits on every paused C of the node its peer is on.
            let succ: Vec<Vec<usize>> = paused
                .iter()
                .map(|a| match links.get(*a) {
                    None => Vec::new(),
                    Some(peer) => paused
                        .iter()
                        .filter(|c| c.node == peer.node && **c != *a)
                        .filter_map(|c| index.get(c).copied())
                        .collect(),
                })
                .collect();
            let reach: Vec<BTreeSet<usize>> = (0..paused.len())
                .map(|s| {
                    let mut seen = BTreeSet::new();
                    let mut todo: VecDeque<usize> = succ.get(s).cloned().unwrap_or_default().into();
                    while let Some(v) = todo.pop_front() {
                        if seen.insert(v) {
                            todo.extend(succ.get(v).into_iter().flatten().copied());
                        }
                    }
                    seen
                })
                .collect();
            let mut done = BTreeSet::new();
            for s in 0..paused.len() {
                if done.contains(&s) || !reach.get(s).is_some_and(|r| r.contains(&s)) {
                    continue;
                }
                let group: BTreeSet<usize> = (0..paused.len())
                    .filter(|&v| {
                        reach.get(s).is_some_and(|r| r.contains(&v))
                            && reach.get(v).is_some_and(|r| r.contains(&s))
                    })
                    .collect();
                done.extend(group.iter().copied());
                // One cycle through s: walk the group's smallest successors until a repeat.
                let mut path = vec![s];
                let mut cur = s;
                let cycle = loop {
                    let next = succ
                        .get(cur)
                        .and_then(|n| n.iter().copied().filter(|v| group.contains(v)).min());
                    let Some(next) = next else { break Vec::new() };
                    if let Some(at) = path.iter().position(|&v| v == next) {
                        break path.split_off(at);
                    }
                    path.push(next);
                    cur = next;
                };
                if cycle.is_empty() {
                    continue;
                }
                let ports: Vec<PortId> = cycle
                    .iter()
                    .filter_map(|&i| paused.get(i))
                    .filter_map(|k| self.queues.get(&((*k).clone(), p)))
                    .map(|q| q.port.clone())
                    .collect();
                let detected_ns = cycle
                    .iter()
                    .filter_map(|&i| paused.get(i))
                    .filter_map(|k| self.last.get(*k))
                    .map(read_time)
                    .max()
                    .unwrap_or(0);
                out.push(Verdict::Deadlock {
                    priority: p,
                    cycle: ports,
                    detected_ns,
                });
            }
        }
        out
    }
}
