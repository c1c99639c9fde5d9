//! The PARALEON controller: every monitor interval it takes the network-wide flow-size
//! distribution (the ToRs' summed, [`crate::fsd`]) and, while tuning, the interval's runtime
//! metrics; it triggers tuning when the traffic changed (§III-A), runs the annealing
//! (Algorithm 1) with the utility of the weights the operator gave or, by default, the
//! preset of the flow type the search tunes for, and says what to dispatch.
//!
//! **The trigger.** The paper triggers on KL(R_t, R_{t−1}) > θ between consecutive
//! intervals. Measured on its own workloads (docs/paraleon-eval, stop 26) that rule misses
//! three cases an operator cares about, so the controller compares R_t with the
//! distribution the setting in force was *tuned for* (`settled`: the last `hold` measured
//! intervals of the search that chose it) and asks the change to last:
//! - *first traffic*: before any search has settled a setting nothing was tuned for the
//!   traffic, and R_{t−1} does not exist (the paper's KL is 0): traffic that lasts `hold`
//!   intervals starts a search;
//! - *slow drift*: a distribution that moves by less than θ per interval (FB_Hadoop's
//!   backlog of elephants grows over hundreds of milliseconds) never passes the consecutive
//!   rule; KL(R_t, settled) > θ catches it;
//! - *transients*: a training round's first interval, where its 12 MB flows have not yet
//!   reached τ and count as mice, is a change for one interval only; a change must hold
//!   `hold` consecutive intervals (with one dominant flow type) to start or restart a search.
//!   A one-interval step that stays (the paper's case) triggers `hold` intervals later.
//!
//! A search runs to its end (§III-A: runtime metrics are collected "until a complete tuning
//! process finishes"): a distribution that keeps moving with the same dominant flow type —
//! an ON/OFF training job's ramps and tails — steers the running search through μ (Alg. 1
//! l.14) without restarting it. A change of the dominant flow type that holds restarts it
//! from the best setting found so far: the utility's preset and the knobs' favoured
//! directions change, and the utilities measured under the old traffic are not comparable
//! with the new ones.

use std::collections::VecDeque;

use serde::Serialize;

use crate::fsd::{kl_divergence, Dominant, Fsd};
use crate::sa::{Annealer, Iteration, SaConfig, Setting, Space, Step, StepKind, TunerError};
use crate::utility::{utility, IntervalMetrics, Utility, UtilityError, Weights};

/// Settings of the controller (PARALEON Table III).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ControllerConfig {
    /// θ: KL divergence that triggers tuning (0.01).
    pub kl_threshold: f64,
    /// Flows added to every size bin before the KL divergence (keeps it finite).
    pub kl_smoothing: f64,
    /// The annealing.
    pub sa: SaConfig,
    /// The utility's weights; `None`: the preset of the flow type the search tunes for.
    pub weights: Option<Weights>,
    /// Consecutive intervals a change must hold to start or restart a search (≥ 1; 1 is
    /// the paper's trigger on the first interval that differs).
    pub hold: u32,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            kl_threshold: 0.01,
            kl_smoothing: 0.01,
            sa: SaConfig::paraleon(),
            weights: None,
            hold: 3,
        }
    }
}

/// What one interval did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// KL(R_t, R_{t−1}) (0 for the first interval with traffic).
    pub kl: f64,
    /// KL(R_t, settled): how far the traffic is from what the setting in force was tuned
    /// for (none before a search has settled one).
    pub drift: Option<f64>,
    /// A search started (or restarted) this interval.
    pub triggered: bool,
    /// KL passed θ while a search for the same dominant flow type ran: it went on.
    pub changed_in_search: bool,
    /// Consecutive intervals the change seen now has held (0: no change).
    pub pending: u32,
    /// The interval's utility, while tuning.
    pub utility: Option<Utility>,
    /// The setting to dispatch now, and why (none: keep the one in force).
    pub dispatch: Option<Step>,
    /// No traffic this interval: nothing was compared, triggered or measured.
    pub idle: bool,
}

/// Why an interval could not be taken.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ControllerError {
    /// The metrics were unusable.
    #[error(transparent)]
    Utility(#[from] UtilityError),
    /// The search could not start.
    #[error(transparent)]
    Tuner(#[from] TunerError),
}

/// The controller.
#[derive(Clone, Debug)]
pub struct Controller {
    config: ControllerConfig,
    space: Space,
    in_force: Setting,
    last: Option<Fsd>,
    search: Option<Annealer>,
    /// The dominant flow type the running search tunes for.
    searching_for: Option<Dominant>,
    /// The distribution the setting in force was tuned for (the settling search's last
    /// `hold` measured intervals, summed).
    settled: Option<Fsd>,
    /// The running search's last `hold` measured distributions.
    recent: VecDeque<Fsd>,
    /// A change seen: the dominant flow type it has and the intervals it has held.
    pending: Option<(Dominant, u32)>,
    seed: u64,
    searches: u64,
    finished: Vec<Vec<Iteration>>,
    /// The best setting of the last search that ended or was interrupted, and its utility.
    last_best: Option<(Setting, f64)>,
}

impl Controller {
    /// A controller whose knobs are at `in_force` now.
    pub fn new(
        config: ControllerConfig,
        space: Space,
        in_force: Setting,
        seed: u64,
    ) -> Result<Self, TunerError> {
        space.check(&in_force)?;
        if !(config.kl_threshold.is_finite()
            && config.kl_threshold >= 0.0
            && config.kl_smoothing > 0.0
            && config.hold >= 1)
        {
            return Err(TunerError::Config(format!(
                "kl_threshold {} (≥ 0), kl_smoothing {} (> 0) and hold {} (≥ 1)",
                config.kl_threshold, config.kl_smoothing, config.hold
            )));
        }
        if let Some(w) = config.weights {
            w.validate()
                .map_err(|e| TunerError::Config(e.to_string()))?;
        }
        Ok(Controller {
            config,
            space,
            in_force,
            last: None,
            search: None,
            searching_for: None,
            settled: None,
            recent: VecDeque::new(),
            pending: None,
            seed,
            searches: 0,
            finished: Vec::new(),
            last_best: None,
        })
    }

    /// The setting in force.
    pub fn in_force(&self) -> &Setting {
        &self.in_force
    }

    /// The space searched.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// Whether a search is running.
    pub fn tuning(&self) -> bool {
        self.search.is_some()
    }

    /// Searches started.
    pub fn searches(&self) -> u64 {
        self.searches
    }

    /// The running search's iterations so far.
    pub fn iterations(&self) -> &[Iteration] {
        self.search.as_ref().map_or(&[], |s| s.history())
    }

    /// The best setting found for the traffic of now and its utility (0–1): the running
    /// search's best, else the last search's (what an offline, pretrained setting is).
    pub fn best(&self) -> Option<(Setting, f64)> {
        self.search
            .as_ref()
            .and_then(|s| s.best().map(|(b, u)| (b.clone(), u)))
            .or_else(|| self.last_best.clone())
    }

    /// The iterations of the searches that ended, oldest first.
    pub fn finished_searches(&self) -> &[Vec<Iteration>] {
        &self.finished
    }

    /// One monitor interval: the network-wide distribution and the interval's metrics
    /// (measured under the setting in force).
    pub fn interval(
        &mut self,
        fsd: &Fsd,
        metrics: &IntervalMetrics,
    ) -> Result<Outcome, ControllerError> {
        // An interval without traffic (no flow in the sketches, no active uplink, no RTT)
        // says nothing: its distribution is not a change to tune for (KL compares traffic
        // with the last traffic: an ON/OFF workload's silences do not restart the search),
        // and its utility is not a measurement of the setting (an idle fabric never pauses
        // and would score the PFC term's perfect 1).
        if fsd.flows() == 0.0
            || (metrics.uplink_utilisation.is_empty() && metrics.normalised_rtt.is_empty())
        {
            return Ok(Outcome {
                kl: 0.0,
                drift: None,
                triggered: false,
                changed_in_search: false,
                pending: self.pending.map_or(0, |p| p.1),
                utility: None,
                dispatch: None,
                idle: true,
            });
        }
        let smoothing = self.config.kl_smoothing;
        let kl = self
            .last
            .as_ref()
            .map_or(0.0, |last| kl_divergence(fsd, last, smoothing));
        let drift = self
            .settled
            .as_ref()
            .map(|settled| kl_divergence(fsd, settled, smoothing));
        self.last = Some(fsd.clone());
        let theta = self.config.kl_threshold;
        let dominant = fsd.dominant();
        // A change: while searching, traffic of another dominant type than the search's;
        // otherwise traffic nothing was tuned for, or that drifted from what was.
        let change = match self.searching_for {
            Some(tuning_for) => dominant.0 != tuning_for,
            None => drift.is_none_or(|d| d > theta),
        };
        self.pending = match (change, self.pending) {
            (false, _) => None,
            (true, Some((kind, n))) if kind == dominant.0 => Some((kind, n + 1)),
            (true, _) => Some((dominant.0, 1)),
        };
        let held = self.pending.map_or(0, |p| p.1);
        let restart = held >= self.config.hold;
        let changed_in_search = self.search.is_some() && !restart && kl > theta;
        let mut triggered = false;
        if restart {
            self.pending = None;
            // Start (or restart from the best so far) a search for the new traffic.
            let start = self
                .search
                .as_ref()
                .and_then(|s| s.best().map(|(b, _)| b.clone()))
                .unwrap_or_else(|| self.in_force.clone());
            if let Some(old) = self.search.take() {
                self.last_best = old.best().map(|(b, u)| (b.clone(), u));
                self.finished.push(old.history().to_vec());
            }
            self.recent.clear();
            self.searches += 1;
            self.searching_for = Some(dominant.0);
            let seed = self.seed ^ self.searches.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            self.search = Some(Annealer::new(
                self.config.sa,
                self.space.clone(),
                start.clone(),
                seed,
            )?);
            triggered = true;
            if start != self.in_force {
                // The best so far is not in force: dispatch it; it is measured next.
                self.in_force = start.clone();
                return Ok(Outcome {
                    kl,
                    drift,
                    triggered,
                    changed_in_search,
                    pending: held,
                    utility: None,
                    dispatch: Some(Step {
                        setting: start,
                        kind: StepKind::Rollback,
                    }),
                    idle: false,
                });
            }
        }
        let (Some(search), Some(tuning_for)) = (self.search.as_mut(), self.searching_for) else {
            return Ok(Outcome {
                kl,
                drift,
                triggered,
                changed_in_search,
                pending: held,
                utility: None,
                dispatch: None,
                idle: false,
            });
        };
        // One utility for the whole search: the preset of the type it tunes for (values
        // under two presets are not comparable); μ still follows each interval's traffic.
        let weights = self
            .config
            .weights
            .unwrap_or_else(|| Weights::preset(tuning_for));
        let u = utility(metrics, &weights)?;
        let step = search.observe(u.value, dominant);
        self.in_force = step.setting.clone();
        if self.recent.len() == self.config.hold as usize {
            self.recent.pop_front();
        }
        self.recent.push_back(fsd.clone());
        if step.kind == StepKind::Final {
            self.searching_for = None;
            self.pending = None;
            self.settled = Some(Fsd::sum(&self.recent));
            self.recent.clear();
            if let Some(done) = self.search.take() {
                self.last_best = done.best().map(|(b, u)| (b.clone(), u));
                self.finished.push(done.history().to_vec());
            }
        }
        Ok(Outcome {
            kl,
            drift,
            triggered,
            changed_in_search,
            pending: held,
            utility: Some(u),
            dispatch: Some(step),
            idle: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fsd::truth_fsd;
    use crate::sa::defaults;

    fn metrics(u: f64) -> IntervalMetrics {
        IntervalMetrics {
            uplink_utilisation: vec![u],
            normalised_rtt: vec![u],
            pause_fraction: vec![1.0 - u],
        }
    }

    fn mice() -> Fsd {
        truth_fsd((0..100).map(|i| 10_000 + i * 100), 1_000_000)
    }

    fn elephants() -> Fsd {
        truth_fsd((0..100).map(|i| 5_000_000 + i * 1_000), 1_000_000)
    }

    fn controller(seed: u64) -> Controller {
        let space = Space::paraleon().unwrap();
        let start = defaults(&space, 100.0, &[]).unwrap();
        Controller::new(ControllerConfig::default(), space, start, seed).unwrap()
    }

    /// Runs `fsd` until a search has started and ended.
    fn settle(c: &mut Controller, fsd: &Fsd) {
        let searches = c.searches();
        for _ in 0..10_000 {
            c.interval(fsd, &metrics(0.5)).unwrap();
            if c.searches() > searches && !c.tuning() {
                return;
            }
        }
        panic!("no search ran to its end");
    }

    /// Steady traffic from an idle start: nothing was tuned for it, so once it has held for
    /// `hold` intervals one search starts (the paper's consecutive KL is 0 throughout), runs
    /// its schedule and ends in its best; the same traffic then never triggers again. The
    /// same seed, the same run.
    #[test]
    fn steady_traffic_from_idle_starts_one_search_that_ends_in_its_best() {
        let hold = ControllerConfig::default().hold;
        let elephants = elephants();
        let run = |seed: u64| {
            let mut c = controller(seed);
            let start = c.in_force().clone();
            let hai = c.space().index("rpg_hai_rate").unwrap();
            let mut log = Vec::new();
            for i in 0..1_000u32 {
                // Utility rises with hai_rate (a throughput knob): what elephants want.
                let u = (c.in_force().values[hai] / 2_000.0).clamp(0.0, 1.0);
                let o = c.interval(&elephants, &metrics(u)).unwrap();
                assert_eq!(o.kl, 0.0, "steady traffic: {o:?}");
                assert_eq!(o.triggered, i + 1 == hold, "interval {i}: {o:?}");
                if i + 1 < hold {
                    assert!(o.dispatch.is_none() && o.utility.is_none(), "{o:?}");
                    assert_eq!(o.pending, i + 1);
                } else if c.searches() == 1 && (c.tuning() || o.dispatch.is_some()) {
                    log.push(o.dispatch.map(|s| s.kind));
                } else {
                    assert!(o.dispatch.is_none() && o.drift.unwrap() < 0.01, "{o:?}");
                }
            }
            assert!(
                c.in_force().values[hai] > start.values[hai] * 4.0,
                "hai {} from {}",
                c.in_force().values[hai],
                start.values[hai]
            );
            (c.in_force().clone(), log, c.searches())
        };
        let (a, log, searches) = run(11);
        assert_eq!(searches, 1);
        assert_eq!(log.len() as u32, SaConfig::paraleon().intervals());
        assert_eq!(log.last(), Some(&Some(StepKind::Final)));
        assert_eq!(run(11).0, a);
        assert_ne!(run(12).0, a);
    }

    /// After a search settled a setting, a step change that stays starts a search `hold`
    /// intervals later; a change that lasts fewer intervals (a training round's first
    /// interval, when its flows have not reached τ yet) does not.
    #[test]
    fn a_change_that_stays_triggers_and_one_that_passes_does_not() {
        let hold = ControllerConfig::default().hold;
        let (mice, elephants) = (mice(), elephants());
        let mut c = controller(7);
        settle(&mut c, &mice);
        assert_eq!(c.searches(), 1);
        for blip in 1..hold {
            for _ in 0..blip {
                let o = c.interval(&elephants, &metrics(0.5)).unwrap();
                assert!(!o.triggered && o.drift.unwrap() > 0.01, "{o:?}");
            }
            let o = c.interval(&mice, &metrics(0.5)).unwrap();
            assert!(!o.triggered && o.pending == 0, "{o:?}");
        }
        assert_eq!(c.searches(), 1);
        for i in 1..=hold {
            let o = c.interval(&elephants, &metrics(0.5)).unwrap();
            assert_eq!(o.triggered, i == hold, "interval {i}: {o:?}");
        }
        assert_eq!(c.searches(), 2);
    }

    /// A slow drift: every interval within θ of the last (the paper's rule never fires),
    /// but the traffic moves far from what the setting was tuned for: one search.
    #[test]
    fn a_slow_drift_starts_one_search() {
        let mut c = controller(9);
        // 400 flows, a tenth of them elephants; every interval one more mouse grows to 5 MB.
        let base: Vec<u64> = (0..400)
            .map(|i| if i < 40 { 5_000_000 } else { 10_000 + i * 100 })
            .collect();
        settle(&mut c, &truth_fsd(base.clone(), 1_000_000));
        assert_eq!(c.searches(), 1);
        let mut first_trigger = None;
        for step in 1..=100u64 {
            let sizes =
                base.iter().enumerate().map(
                    |(i, &b)| {
                        if (i as u64) < 40 + step {
                            5_000_000
                        } else {
                            b
                        }
                    },
                );
            let o = c
                .interval(&truth_fsd(sizes, 1_000_000), &metrics(0.5))
                .unwrap();
            assert!(o.kl < 0.01, "interval {step}: {o:?}");
            if o.triggered {
                assert!(first_trigger.is_none(), "a second trigger at {step}");
                first_trigger = Some(step);
            }
        }
        let at = first_trigger.expect("the drift triggered");
        assert!(at > 3 && at < 100, "triggered at {at}");
        assert_eq!(c.searches(), 2);
    }

    /// A distribution that moves with the same dominant flow type (a training round's ramp
    /// and tail) does not restart the running search: it runs its schedule; a change of the
    /// dominant type that holds does restart it, from the best so far.
    #[test]
    fn a_search_runs_through_changes_of_the_same_kind_and_restarts_on_a_new_dominant_type() {
        let hold = ControllerConfig::default().hold;
        let (mice, elephants) = (mice(), elephants());
        // Elephants still, but half of them far larger: a KL change well above θ.
        let mut big: Vec<u64> = (0..50).map(|i| 5_000_000 + i * 1_000).collect();
        big.extend((0..50).map(|i| 90_000_000 + i * 1_000));
        let bigger = truth_fsd(big, 1_000_000);
        let mut c = controller(5);
        for i in 1..=hold {
            let o = c.interval(&elephants, &metrics(0.5)).unwrap();
            assert_eq!(o.triggered, i == hold);
        }
        let mut went_on = 0;
        for i in 0..60 {
            let fsd = if i % 2 == 0 { &bigger } else { &elephants };
            let o = c.interval(fsd, &metrics(0.5)).unwrap();
            assert!(o.kl > 0.01, "interval {i}: {o:?}");
            assert!(!o.triggered, "interval {i}: {o:?}");
            went_on += usize::from(o.changed_in_search);
        }
        assert_eq!(went_on, 60);
        assert_eq!(c.searches(), 1);
        assert_eq!(c.iterations().len(), 61);
        // One interval of mice: not a new traffic yet.
        let o = c.interval(&mice, &metrics(0.5)).unwrap();
        assert!(!o.triggered && o.pending == 1, "{o:?}");
        c.interval(&elephants, &metrics(0.5)).unwrap();
        for i in 1..=hold {
            let o = c.interval(&mice, &metrics(0.5)).unwrap();
            assert_eq!(o.triggered, i == hold, "{o:?}");
        }
        assert_eq!(c.searches(), 2);
        assert_eq!(c.finished_searches().len(), 1);
    }

    /// An ON/OFF workload, after a search settled on its rounds: the silences between
    /// rounds neither trigger a search, nor restart it when traffic returns with the same
    /// distribution (a round's first interval of not-yet-elephants included), nor count as
    /// measured iterations (an idle fabric would score a perfect PFC term).
    #[test]
    fn idle_intervals_are_neither_changes_nor_measurements() {
        let (mice, elephants) = (mice(), elephants());
        let silence = Fsd::default();
        let idle = IntervalMetrics {
            pause_fraction: vec![0.0; 8],
            ..IntervalMetrics::default()
        };
        let mut c = controller(3);
        settle(&mut c, &elephants);
        let mut measured = 0;
        for round in 0..5 {
            for _ in 0..10 {
                let o = c.interval(&silence, &idle).unwrap();
                assert!(o.idle && !o.triggered && o.dispatch.is_none() && o.utility.is_none());
            }
            let o = c.interval(&mice, &metrics(0.5)).unwrap();
            assert!(!o.triggered, "round {round}: {o:?}");
            for _ in 0..3 {
                let o = c.interval(&elephants, &metrics(0.5)).unwrap();
                assert!(
                    !o.triggered,
                    "round {round}: the same traffic came back: {o:?}"
                );
                measured += usize::from(o.utility.is_some());
            }
        }
        assert_eq!(c.searches(), 1);
        assert_eq!(measured, 0, "no search ran, so nothing was measured");
    }
}
