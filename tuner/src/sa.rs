//! Guided simulated annealing over the DCQCN knobs (PARALEON §III-C, Algorithm 1).
//!
//! Each monitor interval the setting in force is measured (its utility, Eq. 1); it is
//! accepted if better than the current one, or with probability e^{(new−current)/T}
//! (l.6–9); the best so far is kept (l.10–13) as P, and the next setting P_m is mutated
//! from P (l.14–22): every knob moves by a random step s′ₚ = sₚ × rand(0.5, 1), in its
//! dominant direction (throughput-friendly when elephants dominate, delay-friendly when
//! mice do, [`hawkmesh_knobs::Tuning`]) with probability min(μ, η), else the other way.
//! After `iterations` the temperature cools by `cooling_rate` (l.25); below the final
//! temperature the best setting is dispatched and tuning stops.
//!
//! Two optimisations make it PARALEON's (§III-C): the guided randomness above, and a
//! relaxed temperature (Table III: 90 → 10, cooling 0.85, 20 iterations per temperature:
//! 14 temperatures, 280 intervals). [`SaConfig::naive`] is the ablation baseline (§IV-B4):
//! directions 50/50, steps sₚ × rand(0, 1), a standard schedule (90 → 1, cooling 0.95), and
//! the textbook walk: each mutation from the current (last accepted) setting.
//!
//! Why from P: at Table III's temperatures (90 → 10 against utilities of 0–100) nearly
//! every trial is accepted, so the current setting is a random walk; with guided directions
//! (80 % one way) a walk from it drifts every knob to its bound within a search (~0.6 sₚ a
//! step × 280 steps). Algorithm 1 moves P, which l.11 sets only when a trial beat the best:
//! the search explores around what worked and moves on when something works better.
//! The utility enters in percent (0–100), the scale Table III's temperatures imply.
//!
//! Beyond the paper: a *safe rollback* — a trial whose utility falls more than
//! `rollback_drop` points under the best so far is replaced at once by the best setting
//! (and annealing goes on from there), so an exploratory step never stays in force for more
//! than one interval when it hurts. The best's utility is the mean of every interval it was
//! in force (a rollback measures it again): a one-interval measurement is noisy, and a
//! lucky one would otherwise hold the search on a stale figure.

use hawkmesh_knobs::{knob, Direction, Knob};
use hawkmesh_wire::rng::SplitMix64;
use serde::Serialize;
use thiserror::Error;

use crate::fsd::Dominant;

/// Why a search cannot start.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum TunerError {
    /// A setting does not match the space or leaves a knob's bounds.
    #[error("setting: {0}")]
    Setting(String),
    /// The annealing settings are unusable.
    #[error("annealing settings: {0}")]
    Config(String),
    /// A knob of the space is not in the knob table.
    #[error("knob {0}: not in the knob table")]
    UnknownKnob(String),
}

/// One knob the tuner searches: its search bounds and empirical step (in the knob's unit).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct KnobSpec {
    /// The knob.
    #[serde(serialize_with = "knob_name")]
    pub knob: &'static Knob,
    /// Lowest value tried.
    pub low: f64,
    /// Highest value tried.
    pub high: f64,
    /// sₚ: the empirical step.
    pub step: f64,
}

fn knob_name<S: serde::Serializer>(k: &&'static Knob, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.name)
}

impl KnobSpec {
    /// The throughput-friendly direction, if the knob has one.
    pub fn throughput(&self) -> Option<Direction> {
        self.knob.tuning.map(|t| t.throughput)
    }
}

/// Search bounds and steps per knob, in the knobs' units (µs, bytes, Mb/s, 1/1024, KB):
/// within what ConnectX firmware takes and what matters at 25–400 Gbit/s. The steps are a
/// few percent of each span, so that a temperature's 20 iterations can cross a good part of
/// it. The class knobs (`cnp_dscp`, `cnp_802p_prio`) are not searched: they must match the
/// switches' QoS classes and no value is faster than another. The clamp flags and
/// `rpg_max_rate` are modes and a cap, not congestion-control dynamics.
pub const SEARCH: &[(&str, f64, f64, f64)] = &[
    ("rpg_time_reset", 5.0, 1_500.0, 40.0),
    ("rpg_byte_reset", 4_096.0, 262_144.0, 8_192.0),
    ("rpg_threshold", 1.0, 31.0, 1.0),
    ("rpg_ai_rate", 1.0, 400.0, 10.0),
    ("rpg_hai_rate", 10.0, 2_000.0, 40.0),
    ("rpg_gd", 10.0, 11.0, 1.0),
    ("rpg_min_dec_fac", 1.0, 100.0, 5.0),
    ("rpg_min_rate", 1.0, 1_000.0, 20.0),
    ("rate_to_set_on_first_cnp", 0.0, 100_000.0, 5_000.0),
    ("rate_reduce_monitor_period", 1.0, 200.0, 4.0),
    ("dce_tcp_g", 1.0, 1_023.0, 32.0),
    ("dce_tcp_rtt", 1.0, 200.0, 4.0),
    ("initial_alpha_value", 1.0, 1_023.0, 64.0),
    ("min_time_between_cnps", 0.0, 200.0, 4.0),
    ("kmin_kb", 5.0, 3_000.0, 100.0),
    ("kmax_kb", 10.0, 12_000.0, 400.0),
    ("pmax", 0.01, 1.0, 0.05),
];

/// The knobs searched and their specs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Space {
    /// The knobs, in a fixed order (a [`Setting`]'s values follow it).
    pub specs: Vec<KnobSpec>,
}

impl Space {
    /// Every knob of [`SEARCH`].
    pub fn paraleon() -> Result<Space, TunerError> {
        Space::of(SEARCH)
    }

    /// The knobs of `table` (name, low, high, step).
    pub fn of(table: &[(&str, f64, f64, f64)]) -> Result<Space, TunerError> {
        let mut specs = Vec::with_capacity(table.len());
        for (name, low, high, step) in table {
            let knob = knob(name).map_err(|_| TunerError::UnknownKnob(name.to_string()))?;
            if !(low.is_finite() && high.is_finite() && low <= high && *step > 0.0) {
                return Err(TunerError::Config(format!(
                    "{name}: bounds [{low}, {high}] and step {step}"
                )));
            }
            for v in [low, high] {
                knob.validate(*v)
                    .map_err(|e| TunerError::Config(format!("{name} bound: {e}")))?;
            }
            specs.push(KnobSpec {
                knob,
                low: *low,
                high: *high,
                step: *step,
            });
        }
        Ok(Space { specs })
    }

    /// The position of `name`.
    pub fn index(&self, name: &str) -> Option<usize> {
        self.specs.iter().position(|s| s.knob.name == name)
    }

    /// A setting from (name, value) pairs; knobs not given take `base`'s value.
    pub fn setting(&self, base: &Setting, values: &[(&str, f64)]) -> Result<Setting, TunerError> {
        let mut out = base.clone();
        for (name, v) in values {
            let i = self
                .index(name)
                .ok_or_else(|| TunerError::Setting(format!("{name} is not searched")))?;
            out.values[i] = *v;
        }
        self.check(&out)?;
        Ok(out)
    }

    /// Checks a setting: one value per knob, each within its knob's valid range.
    pub fn check(&self, setting: &Setting) -> Result<(), TunerError> {
        if setting.values.len() != self.specs.len() {
            return Err(TunerError::Setting(format!(
                "{} values for {} knobs",
                setting.values.len(),
                self.specs.len()
            )));
        }
        for (spec, v) in self.specs.iter().zip(&setting.values) {
            spec.knob
                .validate(*v)
                .map_err(|e| TunerError::Setting(e.to_string()))?;
        }
        Ok(())
    }

    /// The values by knob name.
    pub fn named(&self, setting: &Setting) -> Vec<(&'static str, f64)> {
        self.specs
            .iter()
            .zip(&setting.values)
            .map(|(s, v)| (s.knob.name, *v))
            .collect()
    }

    fn fix(&self, values: &mut [f64]) {
        for (spec, v) in self.specs.iter().zip(values.iter_mut()) {
            *v = v.clamp(spec.low, spec.high);
            if spec.knob.integer {
                *v = v.round();
            }
        }
        // RED needs Kmin ≤ Kmax.
        if let (Some(lo), Some(hi)) = (self.index("kmin_kb"), self.index("kmax_kb")) {
            if values[lo] > values[hi] {
                values.swap(lo, hi);
            }
        }
    }
}

/// Values of a [`Space`]'s knobs, in its order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting {
    /// One value per knob.
    pub values: Vec<f64>,
}

/// Annealing settings (PARALEON Table III).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SaConfig {
    /// Starting temperature (90).
    pub initial_temperature: f64,
    /// Tuning stops below this (10).
    pub final_temperature: f64,
    /// Cooling factor per temperature (0.85).
    pub cooling_rate: f64,
    /// Intervals per temperature (20).
    pub iterations: u32,
    /// η: the exploitation rate's upper bound (0.8).
    pub eta: f64,
    /// Guided randomness (false: directions 50/50, steps sₚ × rand(0, 1)).
    pub guided: bool,
    /// A trial this many utility points (of 100) under the best is rolled back at once
    /// (`f64::INFINITY`: never).
    pub rollback_drop: f64,
    /// Mutate from the best so far (Alg. 1's P, l.11 and l.15); false: from the current
    /// (last accepted) setting, the textbook walk.
    pub from_best: bool,
}

impl SaConfig {
    /// PARALEON's (Table III), with rollback at 15 points.
    pub fn paraleon() -> Self {
        SaConfig {
            initial_temperature: 90.0,
            final_temperature: 10.0,
            cooling_rate: 0.85,
            iterations: 20,
            eta: 0.8,
            guided: true,
            rollback_drop: 15.0,
            from_best: true,
        }
    }

    /// The ablation baseline (§IV-B4): no guidance, no relaxed temperature.
    pub fn naive() -> Self {
        SaConfig {
            initial_temperature: 90.0,
            final_temperature: 1.0,
            cooling_rate: 0.95,
            iterations: 20,
            eta: 0.5,
            guided: false,
            rollback_drop: f64::INFINITY,
            from_best: false,
        }
    }

    fn validate(&self) -> Result<(), TunerError> {
        let ok = self.initial_temperature.is_finite()
            && self.final_temperature > 0.0
            && self.initial_temperature > self.final_temperature
            && self.cooling_rate > 0.0
            && self.cooling_rate < 1.0
            && self.iterations > 0
            && (0.0..=1.0).contains(&self.eta)
            && self.rollback_drop > 0.0;
        if ok {
            Ok(())
        } else {
            Err(TunerError::Config(format!("{self:?}")))
        }
    }

    /// Intervals a whole search takes.
    pub fn intervals(&self) -> u32 {
        let temps =
            (self.final_temperature / self.initial_temperature).ln() / self.cooling_rate.ln();
        (temps.ceil().max(1.0) as u32).saturating_mul(self.iterations)
    }
}

/// Why the next setting is dispatched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum StepKind {
    /// A mutation to try.
    Trial,
    /// The trial was far worse than the best: the best again.
    Rollback,
    /// The search ended: the best, for good.
    Final,
}

/// The setting to dispatch next.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Step {
    /// The setting.
    pub setting: Setting,
    /// Why.
    pub kind: StepKind,
}

/// One iteration as the report shows it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Iteration {
    /// The utility measured (0–1).
    pub utility: f64,
    /// The temperature.
    pub temperature: f64,
    /// Whether the measured setting was accepted.
    pub accepted: bool,
    /// The best utility so far (0–1).
    pub best: f64,
}

/// One search (Algorithm 1).
#[derive(Clone, Debug)]
pub struct Annealer {
    config: SaConfig,
    space: Space,
    rng: SplitMix64,
    temperature: f64,
    iteration: u32,
    dispatched: Setting,
    current: Option<(Setting, f64)>,
    best: Option<(Setting, f64)>,
    /// Intervals the best setting was measured in.
    best_samples: u32,
    finished: bool,
    history: Vec<Iteration>,
}

impl Annealer {
    /// A search from `start` (in force now: the first observation measures it).
    pub fn new(
        config: SaConfig,
        space: Space,
        start: Setting,
        seed: u64,
    ) -> Result<Self, TunerError> {
        config.validate()?;
        space.check(&start)?;
        Ok(Annealer {
            temperature: config.initial_temperature,
            config,
            space,
            rng: SplitMix64::new(seed),
            iteration: 0,
            dispatched: start,
            current: None,
            best: None,
            best_samples: 0,
            finished: false,
            history: Vec::new(),
        })
    }

    /// The setting in force (being measured).
    pub fn dispatched(&self) -> &Setting {
        &self.dispatched
    }

    /// The best setting and its utility (0–1), once one was measured.
    pub fn best(&self) -> Option<(&Setting, f64)> {
        self.best.as_ref().map(|(s, u)| (s, u / 100.0))
    }

    /// Whether the search ended.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// The iterations so far.
    pub fn history(&self) -> &[Iteration] {
        &self.history
    }

    /// The utility (0–1) the dispatched setting gave over the last interval, and the
    /// network's dominant flow type and its share μ; returns what to dispatch next.
    pub fn observe(&mut self, utility: f64, dominant: (Dominant, f64)) -> Step {
        let new = utility.clamp(0.0, 1.0) * 100.0;
        if self.finished {
            let best = self.best.as_ref().map_or(&self.dispatched, |(s, _)| s);
            return Step {
                setting: best.clone(),
                kind: StepKind::Final,
            };
        }
        let mut remeasured = false;
        if let Some((best, value)) = self.best.as_mut() {
            if *best == self.dispatched {
                // The best measured again (after a rollback): its utility is the mean of
                // its intervals, so one lucky interval does not hold the search.
                self.best_samples += 1;
                *value += (new - *value) / f64::from(self.best_samples);
                self.current = Some((best.clone(), *value));
                remeasured = true;
            }
        }
        let accepted = remeasured
            || match &self.current {
                None => true,
                Some((_, current)) => {
                    new > *current || ((new - current) / self.temperature).exp() > self.rng.unit()
                }
            };
        if accepted && !remeasured {
            self.current = Some((self.dispatched.clone(), new));
        }
        if let Some((setting, value)) = &self.current {
            if self.best.as_ref().is_none_or(|(_, b)| value > b) && !remeasured {
                self.best = Some((setting.clone(), *value));
                self.best_samples = 1;
            }
        }
        let best_value = self.best.as_ref().map_or(new, |(_, b)| *b);
        self.history.push(Iteration {
            utility: new / 100.0,
            temperature: self.temperature,
            accepted,
            best: best_value / 100.0,
        });
        self.iteration += 1;
        if self.iteration >= self.config.iterations {
            self.iteration = 0;
            self.temperature *= self.config.cooling_rate;
        }
        if self.temperature < self.config.final_temperature {
            self.finished = true;
            let best = self
                .best
                .as_ref()
                .map_or(&self.dispatched, |(s, _)| s)
                .clone();
            self.dispatched = best.clone();
            return Step {
                setting: best,
                kind: StepKind::Final,
            };
        }
        if !remeasured && new < best_value - self.config.rollback_drop {
            if let Some((best, value)) = self.best.clone() {
                self.current = Some((best.clone(), value));
                self.dispatched = best.clone();
                return Step {
                    setting: best,
                    kind: StepKind::Rollback,
                };
            }
        }
        let origin = if self.config.from_best {
            &self.best
        } else {
            &self.current
        };
        let from = origin.as_ref().map_or(&self.dispatched, |(s, _)| s).clone();
        let next = self.mutate(&from, dominant);
        self.dispatched = next.clone();
        Step {
            setting: next,
            kind: StepKind::Trial,
        }
    }

    /// Alg. 1 l.14–22.
    fn mutate(&mut self, from: &Setting, (dominant, mu): (Dominant, f64)) -> Setting {
        let mut values = from.values.clone();
        let exploit = if self.config.guided {
            mu.min(self.config.eta)
        } else {
            0.5
        };
        for (spec, v) in self.space.specs.iter().zip(values.iter_mut()) {
            let step = if self.config.guided {
                spec.step * self.rng.range(0.5, 1.0)
            } else {
                spec.step * self.rng.unit()
            };
            let favoured = match (spec.throughput(), dominant) {
                (Some(d), Dominant::Elephants) => d,
                (Some(d), Dominant::Mice) => d.opposite(),
                // No known direction: either way alike.
                (None, _) => Direction::Increase,
            };
            let p = if spec.throughput().is_some() {
                exploit
            } else {
                0.5
            };
            let direction = if self.rng.unit() < p {
                favoured
            } else {
                favoured.opposite()
            };
            let mut delta = match direction {
                Direction::Increase => step,
                Direction::Decrease => -step,
            };
            if spec.knob.integer && delta.abs() < 1.0 {
                delta = delta.signum();
            }
            *v += delta;
        }
        self.space.fix(&mut values);
        Setting { values }
    }
}

/// A setting of the space from the knob table's defaults at `gbps` (ECN thresholds scale
/// with the link speed) with `overrides` on top.
pub fn defaults(
    space: &Space,
    gbps: f64,
    overrides: &[(&str, f64)],
) -> Result<Setting, TunerError> {
    let values = space
        .specs
        .iter()
        .map(|s| {
            s.knob.default_at(gbps).ok_or_else(|| {
                TunerError::Config(format!(
                    "{}: its default comes from another setting; give it a value",
                    s.knob.name
                ))
            })
        })
        .collect::<Result<_, _>>()?;
    space.setting(&Setting { values }, overrides)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> Space {
        Space::paraleon().expect("the search table is valid")
    }

    /// With elephants dominating at μ = 1 (capped at η = 0.8), guided mutations move the
    /// knobs with a throughput direction that way about 80 % of the time; with mice, the
    /// other way; steps stay within [0.5, 1] × sₚ and the bounds.
    #[test]
    fn guided_mutations_follow_the_dominant_flow_type() {
        let space = space();
        let start = defaults(&space, 100.0, &[]).unwrap();
        let hai = space.index("rpg_hai_rate").unwrap();
        let reset = space.index("rpg_time_reset").unwrap();
        for (dominant, hai_up) in [(Dominant::Elephants, true), (Dominant::Mice, false)] {
            let mut a =
                Annealer::new(SaConfig::paraleon(), space.clone(), start.clone(), 7).unwrap();
            let (mut with, mut with_reset, mut n) = (0, 0, 0);
            for _ in 0..400 {
                let m = a.mutate(&start, (dominant, 1.0));
                let d = m.values[hai] - start.values[hai];
                assert!((20.0..=40.0).contains(&d.abs()), "step {d}");
                if (d > 0.0) == hai_up {
                    with += 1;
                }
                n += 1;
                // rpg_time_reset's throughput direction is down: opposite to hai's here.
                if (m.values[reset] < start.values[reset]) == hai_up {
                    with_reset += 1;
                }
                space.check(&m).unwrap();
            }
            let share = with as f64 / n as f64;
            assert!((0.74..0.86).contains(&share), "{dominant:?}: {share}");
            let share = with_reset as f64 / n as f64;
            assert!((0.74..0.86).contains(&share), "{dominant:?} reset: {share}");
        }
        // Naive SA: 50/50 whatever dominates.
        let mut naive = Annealer::new(SaConfig::naive(), space.clone(), start.clone(), 7).unwrap();
        let up = (0..400)
            .filter(|_| {
                naive.mutate(&start, (Dominant::Elephants, 1.0)).values[hai] > start.values[hai]
            })
            .count();
        assert!((160..240).contains(&up), "{up}");
    }

    /// On a utility with one optimum, the search ends at a setting near it, better than
    /// where it started; a much worse trial is rolled back at once; a finished search keeps
    /// its best.
    #[test]
    fn annealing_climbs_rolls_back_and_ends_at_its_best() {
        let space = Space::of(&[
            ("rpg_hai_rate", 10.0, 2_000.0, 40.0),
            ("kmax_kb", 10.0, 12_000.0, 400.0),
        ])
        .unwrap();
        let start = space
            .setting(
                &Setting {
                    values: vec![50.0, 1_600.0],
                },
                &[],
            )
            .unwrap();
        // Best at hai = 800, kmax = 6,400.
        let score = |s: &Setting| {
            let a = (s.values[0] - 800.0) / 2_000.0;
            let b = (s.values[1] - 6_400.0) / 12_000.0;
            (1.0 - (a * a + b * b).sqrt()).clamp(0.0, 1.0)
        };
        let mut a = Annealer::new(SaConfig::paraleon(), space.clone(), start.clone(), 3).unwrap();
        let mut steps = 0;
        let last = loop {
            let u = score(a.dispatched());
            let step = a.observe(u, (Dominant::Elephants, 0.9));
            steps += 1;
            if step.kind == StepKind::Final {
                break step.setting;
            }
            assert!(steps < 1_000);
        };
        assert_eq!(steps, SaConfig::paraleon().intervals());
        let (best, value) = a.best().unwrap();
        assert_eq!(best, &last);
        assert!(
            value > score(&start) + 0.1,
            "{value} from {}",
            score(&start)
        );
        assert!(value > 0.9, "{value}");
        assert_eq!(a.history().len() as u32, steps);
        // A trial 50 points under the best goes back to the best at once.
        let mut b = Annealer::new(SaConfig::paraleon(), space.clone(), start.clone(), 4).unwrap();
        b.observe(0.9, (Dominant::Elephants, 0.9));
        let back = b.observe(0.3, (Dominant::Elephants, 0.9));
        assert_eq!(back.kind, StepKind::Rollback);
        assert_eq!(back.setting, start);
        // Measured again at 0.5, the best's figure is its mean, 0.7, and the search goes on.
        let next = b.observe(0.5, (Dominant::Elephants, 0.9));
        assert_eq!(next.kind, StepKind::Trial);
        let (best, value) = b.best().unwrap();
        assert_eq!(best, &start);
        assert!((value - 0.7).abs() < 1e-9, "{value}");
    }

    /// PARALEON mutates from the best so far (Alg. 1's P): while trials come out slightly
    /// worse (and are accepted: e^(−0.1/90) ≈ 1), every one stays a step from the start,
    /// the best; naive SA walks on from each trial it accepted and wanders off.
    #[test]
    fn paraleon_mutates_from_the_best_and_naive_sa_from_the_current() {
        let space = Space::of(&[("rpg_hai_rate", 10.0, 2_000.0, 40.0)]).unwrap();
        let start = space
            .setting(
                &Setting {
                    values: vec![1_000.0],
                },
                &[],
            )
            .unwrap();
        for (config, from_best) in [(SaConfig::paraleon(), true), (SaConfig::naive(), false)] {
            let mut a = Annealer::new(config, space.clone(), start.clone(), 9).unwrap();
            let mut farthest: f64 = 0.0;
            for i in 0..30 {
                let step = a.observe(0.8 - 0.001 * f64::from(i), (Dominant::Elephants, 0.9));
                assert_eq!(step.kind, StepKind::Trial);
                farthest = farthest.max((step.setting.values[0] - 1_000.0).abs());
            }
            assert_eq!(a.best().unwrap().0, &start);
            assert!(a.history()[1..].iter().all(|i| i.accepted));
            if from_best {
                assert!(farthest <= 40.0, "{farthest}");
            } else {
                assert!(farthest > 80.0, "{farthest}");
            }
        }
    }

    #[test]
    fn bad_settings_and_configurations_are_refused_by_name() {
        let space = space();
        assert!(matches!(
            Space::of(&[("rpg_colour", 0.0, 1.0, 0.1)]),
            Err(TunerError::UnknownKnob(_))
        ));
        let e = Space::of(&[("rpg_gd", 10.0, 12.0, 1.0)]).unwrap_err();
        assert!(e.to_string().contains("rpg_gd"), "{e}");
        let start = defaults(&space, 100.0, &[]).unwrap();
        let e = space.setting(&start, &[("pmax", 1.5)]).unwrap_err();
        assert!(e.to_string().contains("pmax"), "{e}");
        let bad = SaConfig {
            cooling_rate: 1.2,
            ..SaConfig::paraleon()
        };
        assert!(Annealer::new(bad, space.clone(), start.clone(), 1).is_err());
        assert!(Annealer::new(
            SaConfig::paraleon(),
            space,
            Setting { values: vec![1.0] },
            1
        )
        .is_err());
        // Table III's schedule: 14 temperatures × 20 intervals.
        assert_eq!(SaConfig::paraleon().intervals(), 280);
    }
}
