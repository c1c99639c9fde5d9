//! The PARALEON controller: every monitor interval it takes the network-wide flow-size
//! distribution (the ToRs' summed, [`crate::fsd`]) and, while tuning, the interval's runtime
//! metrics; it triggers tuning when the distribution changed (KL(R_t, R_{t−1}) > θ,
//! §III-A), runs the annealing (Algorithm 1) with the utility of the weights the operator
//! gave or, by default, the preset of the dominant flow type, and says what to dispatch.
//!
//! A search runs to its end (§III-A: runtime metrics are collected "until a complete tuning
//! process finishes"): a distribution that keeps moving with the same dominant flow type —
//! an ON/OFF training job's ramps and tails — steers the running search through μ (Alg. 1
//! l.14) without restarting it. A change of the dominant flow type restarts it from the best
//! setting found so far: the utility's preset and the knobs' favoured directions change,
//! and the utilities measured under the old traffic are not comparable with the new ones.

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
    /// The utility's weights; `None`: the preset of the dominant flow type.
    pub weights: Option<Weights>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            kl_threshold: 0.01,
            kl_smoothing: 0.01,
            sa: SaConfig::paraleon(),
            weights: None,
        }
    }
}

/// What one interval did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// KL(R_t, R_{t−1}) (0 for the first interval).
    pub kl: f64,
    /// A search started (or restarted) this interval.
    pub triggered: bool,
    /// KL passed θ while a search for the same dominant flow type ran: it went on.
    pub changed_in_search: bool,
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
            && config.kl_smoothing > 0.0)
        {
            return Err(TunerError::Config(format!(
                "kl_threshold {} (≥ 0) and kl_smoothing {} (> 0)",
                config.kl_threshold, config.kl_smoothing
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
                triggered: false,
                changed_in_search: false,
                utility: None,
                dispatch: None,
                idle: true,
            });
        }
        let kl = self.last.as_ref().map_or(0.0, |last| {
            kl_divergence(fsd, last, self.config.kl_smoothing)
        });
        self.last = Some(fsd.clone());
        let changed = kl > self.config.kl_threshold;
        let dominant = fsd.dominant();
        let weights = self
            .config
            .weights
            .unwrap_or_else(|| Weights::preset(dominant.0));
        let mut triggered = false;
        let restart = changed && self.searching_for != Some(dominant.0);
        let changed_in_search = changed && !restart;
        if restart {
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
                    triggered,
                    changed_in_search,
                    utility: None,
                    dispatch: Some(Step {
                        setting: start,
                        kind: StepKind::Rollback,
                    }),
                    idle: false,
                });
            }
        }
        let Some(search) = self.search.as_mut() else {
            return Ok(Outcome {
                kl,
                triggered,
                changed_in_search,
                utility: None,
                dispatch: None,
                idle: false,
            });
        };
        let u = utility(metrics, &weights)?;
        let step = search.observe(u.value, dominant);
        self.in_force = step.setting.clone();
        if step.kind == StepKind::Final {
            self.searching_for = None;
            if let Some(done) = self.search.take() {
                self.last_best = done.best().map(|(b, u)| (b.clone(), u));
                self.finished.push(done.history().to_vec());
            }
        }
        Ok(Outcome {
            kl,
            triggered,
            changed_in_search,
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

    /// Steady traffic never triggers; a shift of the distribution does; the search runs
    /// its schedule and ends with the best setting in force; the same seed, the same run.
    #[test]
    fn a_distribution_change_triggers_one_search_that_ends_in_its_best() {
        let space = Space::paraleon().unwrap();
        let start = defaults(&space, 100.0, &[]).unwrap();
        let mice = truth_fsd((0..100).map(|i| 10_000 + i * 100), 1_000_000);
        let elephants = truth_fsd((0..100).map(|i| 5_000_000 + i * 1_000), 1_000_000);
        let run = |seed: u64| {
            let mut c = Controller::new(
                ControllerConfig::default(),
                space.clone(),
                start.clone(),
                seed,
            )
            .unwrap();
            let mut log = Vec::new();
            for _ in 0..5 {
                let o = c.interval(&mice, &metrics(0.5)).unwrap();
                assert!(!o.triggered && o.dispatch.is_none(), "{o:?}");
            }
            let hai = space.index("rpg_hai_rate").unwrap();
            for i in 0..400 {
                // Utility rises with hai_rate (a throughput knob): what elephants want.
                let u = (c.in_force().values[hai] / 2_000.0).clamp(0.0, 1.0);
                let o = c.interval(&elephants, &metrics(u)).unwrap();
                assert_eq!(o.triggered, i == 0, "interval {i}: {o:?}");
                log.push(o.dispatch.map(|s| s.kind));
                if !c.tuning() {
                    break;
                }
            }
            (c.in_force().clone(), log, c.searches())
        };
        let (a, log, searches) = run(11);
        assert_eq!(searches, 1);
        assert_eq!(log.len() as u32, SaConfig::paraleon().intervals());
        assert_eq!(log.last(), Some(&Some(StepKind::Final)));
        let hai = space.index("rpg_hai_rate").unwrap();
        assert!(
            a.values[hai] > start.values[hai] * 4.0,
            "hai {} from {}",
            a.values[hai],
            start.values[hai]
        );
        assert_eq!(run(11).0, a);
        assert_ne!(run(12).0, a);
    }

    /// A distribution that moves with the same dominant flow type (a training round's ramp
    /// and tail) does not restart the running search: it runs its schedule; a change of the
    /// dominant type does restart it, from the best so far.
    #[test]
    fn a_search_runs_through_changes_of_the_same_kind_and_restarts_on_a_new_dominant_type() {
        let space = Space::paraleon().unwrap();
        let start = defaults(&space, 100.0, &[]).unwrap();
        let mice = truth_fsd((0..100).map(|i| 10_000 + i * 100), 1_000_000);
        let elephants = truth_fsd((0..100).map(|i| 5_000_000 + i * 1_000), 1_000_000);
        // Elephants still, but half of them far larger: a KL change well above θ.
        let mut big: Vec<u64> = (0..50).map(|i| 5_000_000 + i * 1_000).collect();
        big.extend((0..50).map(|i| 90_000_000 + i * 1_000));
        let bigger = truth_fsd(big, 1_000_000);
        let mut c = Controller::new(ControllerConfig::default(), space, start, 5).unwrap();
        c.interval(&mice, &metrics(0.5)).unwrap();
        assert!(c.interval(&elephants, &metrics(0.5)).unwrap().triggered);
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
        let o = c.interval(&mice, &metrics(0.5)).unwrap();
        assert!(o.triggered && !o.changed_in_search, "{o:?}");
        assert_eq!(c.searches(), 2);
        assert_eq!(c.finished_searches().len(), 1);
    }

    /// An ON/OFF workload: the silences between rounds neither trigger a search, nor
    /// restart it when traffic returns with the same distribution, nor count as measured
    /// iterations (an idle fabric would score a perfect PFC term).
    #[test]
    fn idle_intervals_are_neither_changes_nor_measurements() {
        let space = Space::paraleon().unwrap();
        let start = defaults(&space, 100.0, &[]).unwrap();
        let elephants = truth_fsd((0..100).map(|i| 5_000_000 + i * 1_000), 1_000_000);
        let silence = Fsd::default();
        let idle = IntervalMetrics {
            pause_fraction: vec![0.0; 8],
            ..IntervalMetrics::default()
        };
        let mut c = Controller::new(ControllerConfig::default(), space, start, 3).unwrap();
        let first = c.interval(&elephants, &metrics(0.5)).unwrap();
        assert!(!first.triggered && !first.idle);
        let mut measured = 0;
        for round in 0..5 {
            for _ in 0..10 {
                let o = c.interval(&silence, &idle).unwrap();
                assert!(o.idle && !o.triggered && o.dispatch.is_none() && o.utility.is_none());
            }
            for _ in 0..3 {
                let o = c.interval(&elephants, &metrics(0.5)).unwrap();
                assert!(
                    !o.triggered,
                    "round {round}: the same traffic came back: {o:?}"
                );
                measured += usize::from(o.utility.is_some());
            }
        }
        assert_eq!(c.searches(), 0);
        assert_eq!(measured, 0, "no search ran, so nothing was measured");
    }
}
