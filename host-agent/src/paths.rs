//! Path tracing's schedule (R-Pingmesh §4.1: the agent traces the route of every 5-tuple it
//! probes on, and of the ACKs it sends back, so the analyzer can vote over the links a lost
//! probe crossed). A traceroute costs a few packets per hop and some switch CPU for each
//! ICMP time-exceeded reply, so agents trace at a bounded rate: each 5-tuple once when it
//! is first probed on, again after [`PathTracingConfig::refresh_ns`] (routes change), never
//! more than [`PathTracingConfig::traces_per_s`] (a token bucket with
//! [`PathTracingConfig::burst`]). Results carry the last traced path, or none yet.
//!
//! [`PathTracer`] is that schedule, independent of how a trace is done: the daemon runs a
//! UDP traceroute keeping the 5-tuple; the netsim glue reads the route the simulator takes.
//! Pure and deterministic (time is passed in) and bounded: at most
//! [`PathTracingConfig::capacity`] 5-tuples are remembered, the least recently probed
//! forgotten first (counted).

use crate::rate::TokenBucket;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// The schedule's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PathTracingConfig {
    /// Traces started per second at most (the token bucket's rate).
    pub traces_per_s: f64,
    /// Traces that may start at once after a quiet time.
    pub burst: u32,
    /// A path older than this is traced again.
    pub refresh_ns: u64,
    /// 5-tuples remembered at most.
    pub capacity: usize,
}

impl Default for PathTracingConfig {
    /// 10 traces a second per agent (about 50 packets a second with five hops), each path
    /// refreshed with the pinglist (5 minutes, R-Pingmesh §5), 8,192 5-tuples (a host of 8
    /// RNICs probing a few hundred 5-tuples each, and as many ACK 5-tuples).
    fn default() -> Self {
        PathTracingConfig {
            traces_per_s: 10.0,
            burst: 32,
            refresh_ns: 300_000_000_000,
            capacity: 8192,
        }
    }
}

#[derive(Clone, Debug)]
struct Entry<P> {
    path: Option<P>,
    traced_ns: Option<u64>,
    needed_ns: u64,
    /// In the queue of 5-tuples never traced.
    queued: bool,
}

/// Counters of a [`PathTracer`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathTracingStats {
    /// Traces handed out by [`PathTracer::due`].
    pub started: u64,
    /// Of which re-traces of a stale path.
    pub refreshed: u64,
    /// 5-tuples forgotten because the table was full.
    pub evicted: u64,
}

/// Which 5-tuples to trace when (see the module's documentation).
#[derive(Clone, Debug)]
pub struct PathTracer<K, P> {
    config: PathTracingConfig,
    entries: HashMap<K, Entry<P>>,
    /// Never traced, in the order they were first needed.
    untraced: VecDeque<K>,
    /// Traced, in the order they were (an entry traced again appears again; stale copies
    /// are skipped).
    by_age: VecDeque<(u64, K)>,
    budget: TokenBucket,
    stats: PathTracingStats,
}

impl<K: Clone + Eq + Hash, P: Clone> PathTracer<K, P> {
    /// An empty schedule; refuses a rate that is not positive and finite.
    pub fn new(config: PathTracingConfig) -> Result<Self, String> {
        if !(config.traces_per_s.is_finite() && config.traces_per_s > 0.0) {
            return Err(format!(
                "path tracing: traces_per_s = {} must be above 0",
                config.traces_per_s
            ));
        }
        if config.capacity == 0 || config.burst == 0 {
            return Err("path tracing: capacity and burst must be at least 1".into());
        }
        Ok(PathTracer {
            config,
            entries: HashMap::new(),
            untraced: VecDeque::new(),
            by_age: VecDeque::new(),
            budget: TokenBucket::new(config.traces_per_s, config.burst),
            stats: PathTracingStats::default(),
        })
    }

    /// The 5-tuple `key` is probed on at `now_ns`: it is traced when the budget allows if
    /// it never was. Returns its last traced path.
    pub fn need(&mut self, key: &K, now_ns: u64) -> Option<&P> {
        if !self.entries.contains_key(key) {
            if self.entries.len() >= self.config.capacity {
                self.evict_one();
            }
            self.entries.insert(
                key.clone(),
                Entry {
                    path: None,
                    traced_ns: None,
                    needed_ns: now_ns,
                    queued: true,
                },
            );
            self.untraced.push_back(key.clone());
        }
        let entry = self.entries.get_mut(key)?;
        entry.needed_ns = entry.needed_ns.max(now_ns);
        entry.path.as_ref()
    }

    /// The last traced path of `key`.
    pub fn path(&self, key: &K) -> Option<&P> {
        self.entries.get(key)?.path.as_ref()
    }

    /// The traces to start at `now_ns`: 5-tuples never traced first (oldest need first),
    /// then those whose path is older than the refresh time, as many as the budget allows.
    /// The caller traces each and reports it with [`PathTracer::traced`].
    pub fn due(&mut self, now_ns: u64) -> Vec<K> {
        self.budget.refill(now_ns);
        let mut due = Vec::new();
        while self.budget.ready() {
            let Some(key) = self.untraced.pop_front() else {
                break;
            };
            let Some(entry) = self.entries.get_mut(&key) else {
                continue; // forgotten meanwhile
            };
            if !entry.queued {
                continue;
            }
            entry.queued = false;
            self.budget.take();
            self.stats.started += 1;
            due.push(key);
        }
        while self.budget.ready() {
            let Some((at, key)) = self.by_age.front().cloned() else {
                break;
            };
            let current = self.entries.get(&key).and_then(|e| e.traced_ns);
            if current != Some(at) {
                self.by_age.pop_front(); // forgotten, or traced again since
                continue;
            }
            if at.saturating_add(self.config.refresh_ns) > now_ns {
                break;
            }
            self.by_age.pop_front();
            self.budget.take();
            self.stats.started += 1;
            self.stats.refreshed += 1;
            due.push(key);
        }
        due
    }

    /// The trace of `key` finished at `now_ns` with `path` (`None`: it failed; the old
    /// path, if any, is kept and the 5-tuple traced again after the refresh time).
    pub fn traced(&mut self, key: &K, path: Option<P>, now_ns: u64) {
        let Some(entry) = self.entries.get_mut(key) else {
            return;
        };
        if let Some(path) = path {
            entry.path = Some(path);
        }
        entry.queued = false;
        entry.traced_ns = Some(now_ns);
        self.by_age.push_back((now_ns, key.clone()));
        // Stale copies of re-traced entries are dropped as they reach the front; bound them.
        if self.by_age.len() > 2 * self.config.capacity {
            let entries = &self.entries;
            self.by_age
                .retain(|(at, k)| entries.get(k).and_then(|e| e.traced_ns) == Some(*at));
        }
    }

    /// 5-tuples known (traced or waiting).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is known.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// 5-tuples waiting for their first trace.
    pub fn waiting(&self) -> usize {
        self.entries.values().filter(|e| e.queued).count()
    }

    /// The counters.
    pub fn stats(&self) -> PathTracingStats {
        self.stats
    }

    /// Forgets the least recently needed 5-tuple.
    fn evict_one(&mut self) {
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.needed_ns)
            .map(|(k, _)| k.clone());
        if let Some(key) = oldest {
            self.entries.remove(&key);
            self.stats.evicted += 1;
        }
        if self.untraced.len() > 2 * self.config.capacity {
            let entries = &self.entries;
            self.untraced
                .retain(|k| entries.get(k).is_some_and(|e| e.queued));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn tracer(rate: f64, burst: u32, capacity: usize) -> PathTracer<u32, &'static str> {
        PathTracer::new(PathTracingConfig {
            traces_per_s: rate,
            burst,
            refresh_ns: 60 * S,
            capacity,
        })
        .unwrap()
    }

    #[test]
    fn new_tuples_are_traced_at_the_rate_limit_in_the_order_they_came() {
        let mut t = tracer(10.0, 4, 100);
        for k in 0..10 {
            assert_eq!(t.need(&k, 0), None);
        }
        // The burst at once, then one per 100 ms.
        assert_eq!(t.due(0), vec![0, 1, 2, 3]);
        assert_eq!(t.due(50_000_000), Vec::<u32>::new());
        assert_eq!(t.due(100_000_000), vec![4]);
        assert_eq!(t.due(300_000_000), vec![5, 6]);
        for k in 0..7 {
            t.traced(&k, Some("p"), 300_000_000);
        }
        assert_eq!(t.need(&3, S), Some(&"p"));
        assert_eq!(t.path(&8), None);
        assert_eq!(t.waiting(), 3);
        // A long quiet time refills only up to the burst.
        assert_eq!(t.due(100 * S).len(), 3 + 1);
        assert_eq!(t.stats().started, 11);
    }

    #[test]
    fn paths_are_traced_again_after_the_refresh_time_and_a_failed_trace_keeps_the_old() {
        let mut t = tracer(1000.0, 8, 100);
        t.need(&1, 0);
        t.need(&2, 0);
        assert_eq!(t.due(0), vec![1, 2]);
        t.traced(&1, Some("old"), 0);
        t.traced(&2, Some("two"), S);
        assert_eq!(t.due(59 * S), Vec::<u32>::new());
        assert_eq!(t.due(60 * S), vec![1]);
        t.traced(&1, None, 60 * S);
        assert_eq!(t.path(&1), Some(&"old"));
        assert_eq!(t.due(61 * S), vec![2]);
        t.traced(&2, Some("new"), 61 * S);
        assert_eq!(t.path(&2), Some(&"new"));
        assert_eq!(t.due(62 * S), Vec::<u32>::new());
        assert_eq!(t.stats().refreshed, 2);
    }

    #[test]
    fn the_table_stays_bounded_forgetting_the_least_recently_probed() {
        let mut t = tracer(1e9, 1000, 3);
        t.need(&1, 0);
        t.need(&2, 1);
        t.need(&3, 2);
        t.need(&1, 3); // 1 is probed again: 2 is now the least recent
        t.need(&4, 4);
        assert_eq!(t.len(), 3);
        assert_eq!(t.stats().evicted, 1);
        let due = t.due(5);
        assert_eq!(due, vec![1, 3, 4]);
        for k in 10..10_000 {
            t.need(&k, k as u64);
        }
        assert_eq!(t.len(), 3);
        assert!(t.untraced.len() <= 2 * 3 + 1, "{}", t.untraced.len());
    }

    #[test]
    fn bad_settings_are_refused() {
        let bad = |config| PathTracer::<u32, u32>::new(config).unwrap_err();
        assert!(bad(PathTracingConfig {
            traces_per_s: 0.0,
            ..PathTracingConfig::default()
        })
        .contains("traces_per_s = 0"));
        assert!(bad(PathTracingConfig {
            capacity: 0,
            ..PathTracingConfig::default()
        })
        .contains("capacity"));
    }
}
