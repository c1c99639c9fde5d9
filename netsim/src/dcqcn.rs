//! DCQCN reaction point (Zhu et al., SIGCOMM'15) in the NVIDIA ConnectX form, with the
//! ConnectX knob names (see [`crate::scenario::DcqcnConfig`]).
//!
//! The periodic timers of the hardware (α update every `dce_tcp_rtt`, rate-decrease check
//! every `rate_reduce_monitor_period`) are evaluated lazily: α is brought up to date in
//! closed form when it is needed, and a decrease check is scheduled only when a CNP arrived
//! in its period. The result is the same sequence of rates as running the timers eagerly
//! (as the HPCC reference does) with a fraction of the events.

use crate::scenario::DcqcnConfig;
use crate::time::{from_us, Time, NS};

/// DCQCN parameters in simulator units.
#[derive(Clone, Debug)]
pub struct DcqcnParams {
    /// Rate-increase timer period.
    pub time_reset: Time,
    /// Byte counter for rate increase (0 = disabled).
    pub byte_reset: u64,
    /// Fast-recovery stages (`rpg_threshold`).
    pub threshold: u32,
    /// Maximum rate, bit/s (0 = line rate).
    pub max_rate: f64,
    /// Additive increase, bit/s.
    pub ai_rate: f64,
    /// Hyper increase, bit/s.
    pub hai_rate: f64,
    /// Decrease: rate × (1 − α · 1024 / 2^gd).
    pub gd: u32,
    /// A decrease keeps at least this fraction of the rate.
    pub min_dec_fraction: f64,
    /// Floor, bit/s.
    pub min_rate: f64,
    /// Rate set on the first CNP, bit/s (0 = keep).
    pub rate_on_first_cnp: f64,
    /// Weight of the old α per update (dce_tcp_g / 1024).
    pub alpha_keep: f64,
    /// α update period.
    pub alpha_period: Time,
    /// Rate-decrease check period.
    pub decrease_period: Time,
    /// α at the first CNP.
    pub initial_alpha: f64,
    /// NP: minimum gap between CNPs of a QP.
    pub min_time_between_cnps: Time,
    /// Always clamp the target rate on decrease.
    pub clamp_target: bool,
    /// Clamp the target rate on a decrease after a timer increase.
    pub clamp_target_after_time_inc: bool,
}

impl DcqcnParams {
    /// Converts scenario knobs.
    pub fn from_config(c: &DcqcnConfig) -> Self {
        DcqcnParams {
            time_reset: from_us(c.rpg_time_reset),
            byte_reset: c.rpg_byte_reset,
            threshold: c.rpg_threshold,
            max_rate: c.rpg_max_rate * 1e6,
            ai_rate: c.rpg_ai_rate * 1e6,
            hai_rate: c.rpg_hai_rate * 1e6,
            gd: c.rpg_gd,
            min_dec_fraction: c.rpg_min_dec_fac / 100.0,
            min_rate: c.rpg_min_rate * 1e6,
            rate_on_first_cnp: c.rate_to_set_on_first_cnp * 1e6,
            alpha_keep: c.dce_tcp_g as f64 / 1024.0,
            alpha_period: from_us(c.dce_tcp_rtt).max(1),
            decrease_period: from_us(c.rate_reduce_monitor_period).max(1),
            initial_alpha: c.initial_alpha_value as f64 / 1024.0,
            min_time_between_cnps: from_us(c.min_time_between_cnps),
            clamp_target: c.clamp_tgt_rate,
            clamp_target_after_time_inc: c.clamp_tgt_rate_after_time_inc,
        }
    }
}

/// Per-QP reaction-point state.
#[derive(Clone, Debug, Default)]
pub struct DcqcnState {
    /// Current rate, bit/s.
    pub rate: f64,
    /// Target rate, bit/s.
    pub target: f64,
    /// Congestion estimate α.
    pub alpha: f64,
    seen_cnp: bool,
    alpha_cnp_flag: bool,
    next_alpha_update: Time,
    decrease_cnp_flag: bool,
    decrease_origin: Time,
    /// A decrease check is scheduled.
    pub decrease_pending: bool,
    timer_stage: u32,
    byte_stage: u32,
    bytes_since_increase: u64,
    /// Generation of the increase timer (stale timer events carry an old one).
    pub increase_generation: u32,
    /// The increase timer is running.
    pub increase_running: bool,
    /// CNPs received.
    pub cnps: u64,
    /// Rate decreases applied.
    pub decreases: u64,
}

/// What the caller must schedule after a DCQCN step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DcqcnEffect {
    /// Schedule a decrease check at this time.
    pub decrease_at: Option<Time>,
    /// (Re)start the increase timer: fire at this time with this generation.
    pub increase_at: Option<(Time, u32)>,
    /// The rate changed from this old value.
    pub old_rate: Option<f64>,
}

impl DcqcnState {
    /// A QP starting at `line_rate` (bit/s).
    pub fn new(line_rate: f64) -> Self {
        DcqcnState {
            rate: line_rate,
            target: line_rate,
            alpha: 1.0,
            ..Default::default()
        }
    }

    fn advance_alpha(&mut self, now: Time, p: &DcqcnParams) {
        if !self.seen_cnp || now < self.next_alpha_update {
            return;
        }
        let periods = (now - self.next_alpha_update) / p.alpha_period + 1;
        // First period carries the CNP flag; later ones had no CNP (else we'd have run).
        self.alpha = p.alpha_keep * self.alpha
            + if self.alpha_cnp_flag {
                1.0 - p.alpha_keep
            } else {
                0.0
            };
        if periods > 1 {
            self.alpha *= p.alpha_keep.powi((periods - 1).min(i32::MAX as u64) as i32);
        }
        self.alpha_cnp_flag = false;
        self.next_alpha_update += periods * p.alpha_period;
    }

    /// A CNP arrived for this QP.
    pub fn on_cnp(&mut self, now: Time, p: &DcqcnParams) -> DcqcnEffect {
        let mut effect = DcqcnEffect::default();
        self.cnps += 1;
        if !self.seen_cnp {
            self.seen_cnp = true;
            self.alpha = p.initial_alpha;
            self.alpha_cnp_flag = false;
            self.next_alpha_update = now + p.alpha_period;
            // The decrease grid starts 1 ns after the α grid so that α is updated first.
            self.decrease_origin = now + NS;
            if p.rate_on_first_cnp > 0.0 {
                effect.old_rate = Some(self.rate);
                self.rate = p.rate_on_first_cnp.min(self.rate);
            }
            self.target = self.rate;
        } else {
            self.advance_alpha(now, p);
            self.alpha_cnp_flag = true;
        }
        self.decrease_cnp_flag = true;
        if !self.decrease_pending {
            self.decrease_pending = true;
            let elapsed = now.saturating_sub(self.decrease_origin);
            let periods = elapsed / p.decrease_period + 1;
            effect.decrease_at = Some(self.decrease_origin + periods * p.decrease_period);
        }
        effect
    }

    /// The rate-decrease check fired.
    pub fn on_decrease_check(&mut self, now: Time, line_rate: f64, p: &DcqcnParams) -> DcqcnEffect {
        let mut effect = DcqcnEffect::default();
        self.decrease_pending = false;
        if !self.decrease_cnp_flag {
            return effect;
        }
        self.advance_alpha(now, p);
        let clamp = p.clamp_target || (p.clamp_target_after_time_inc && self.timer_stage > 0);
        if clamp {
            self.target = self.rate;
        }
        let cut = self.alpha * 1024.0 / (1u64 << p.gd) as f64;
        let factor = (1.0 - cut).max(p.min_dec_fraction);
        effect.old_rate = Some(self.rate);
        self.rate = (self.rate * factor).max(p.min_rate).min(line_rate);
        self.decreases += 1;
        self.decrease_cnp_flag = false;
        self.timer_stage = 0;
        self.byte_stage = 0;
        self.bytes_since_increase = 0;
        self.increase_generation = self.increase_generation.wrapping_add(1);
        self.increase_running = true;
        effect.increase_at = Some((now + p.time_reset, self.increase_generation));
        effect
    }

    fn increase(&mut self, line_rate: f64, p: &DcqcnParams) {
        let max_rate = if p.max_rate > 0.0 {
            p.max_rate.min(line_rate)
        } else {
            line_rate
        };
        let (t, b) = if p.byte_reset == 0 {
            (self.timer_stage, self.timer_stage)
        } else {
            (self.timer_stage, self.byte_stage)
        };
        let f = p.threshold;
        if t.max(b) < f {
            // Fast recovery: halfway to the target.
        } else if t.min(b) > f {
            self.target = (self.target + p.hai_rate).min(max_rate);
        } else {
            self.target = (self.target + p.ai_rate).min(max_rate);
        }
        self.rate = ((self.rate + self.target) / 2.0).min(max_rate);
    }

    /// The increase timer fired (`generation` must match). Returns the next firing time, or
    /// `None` when the QP is back at line rate and the timer stops.
    pub fn on_increase_timer(
        &mut self,
        now: Time,
        generation: u32,
        line_rate: f64,
        p: &DcqcnParams,
    ) -> (DcqcnEffect, bool) {
        let mut effect = DcqcnEffect::default();
        if generation != self.increase_generation || !self.increase_running {
            return (effect, false);
        }
        effect.old_rate = Some(self.rate);
        self.increase(line_rate, p);
        self.timer_stage = self.timer_stage.saturating_add(1);
        let cap = if p.max_rate > 0.0 {
            p.max_rate.min(line_rate)
        } else {
            line_rate
        };
        if self.rate >= cap && self.target >= cap {
            self.increase_running = false;
            (effect, true)
        } else {
            effect.increase_at = Some((now + p.time_reset, generation));
            (effect, true)
        }
    }

    /// `bytes` were sent; returns true when the byte counter triggered an increase.
    pub fn on_bytes_sent(&mut self, bytes: u64, line_rate: f64, p: &DcqcnParams) -> bool {
        if p.byte_reset == 0 || !self.increase_running {
            return false;
        }
        self.bytes_since_increase += bytes;
        if self.bytes_since_increase < p.byte_reset {
            return false;
        }
        self.bytes_since_increase -= p.byte_reset;
        self.increase(line_rate, p);
        self.byte_stage = self.byte_stage.saturating_add(1);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::US;

    fn hpcc_like() -> DcqcnParams {
        DcqcnParams::from_config(&DcqcnConfig {
            rpg_byte_reset: 0,
            rpg_ai_rate: 20.0,
            rpg_hai_rate: 200.0,
            rpg_min_rate: 1000.0,
            dce_tcp_g: 1020,
            min_time_between_cnps: 0.0,
            ..DcqcnConfig::default()
        })
    }

    #[test]
    fn first_cnp_halves_rate_at_next_decrease_period() {
        let p = hpcc_like();
        let line = 100e9;
        let mut s = DcqcnState::new(line);
        let effect = s.on_cnp(10 * US, &p);
        // α starts at initial_alpha (1023/1024); the check is one period (+1 ns) later.
        assert_eq!(effect.decrease_at, Some(10 * US + NS + 4 * US));
        let effect = s.on_decrease_check(14 * US + NS, line, &p);
        // α decayed over 4 α periods without CNPs before the check.
        let alpha = 1023.0 / 1024.0 * (1020.0f64 / 1024.0).powi(4);
        assert!(
            (s.rate - line * (1.0 - alpha / 2.0)).abs() < 1.0,
            "rate {}",
            s.rate
        );
        assert_eq!(
            effect.increase_at.map(|(t, _)| t),
            Some(14 * US + NS + 300 * US)
        );
        assert_eq!(s.target, line, "no clamp on the first decrease (stage 0)");
    }

    #[test]
    fn recovery_returns_to_line_rate_and_stops_the_timer() {
        let p = hpcc_like();
        let line = 100e9;
        let mut s = DcqcnState::new(line);
        s.on_cnp(0, &p);
        let effect = s.on_decrease_check(4 * US + NS, line, &p);
        let (mut at, generation) = effect.increase_at.unwrap();
        let mut steps = 0;
        loop {
            let (effect, fired) = s.on_increase_timer(at, generation, line, &p);
            assert!(fired);
            steps += 1;
            match effect.increase_at {
                Some((next, _)) => at = next,
                None => break,
            }
            assert!(steps < 10_000, "never recovered");
        }
        assert_eq!(s.rate, line);
        // A stale generation does nothing.
        let (effect, fired) = s.on_increase_timer(at, generation.wrapping_sub(1), line, &p);
        assert!(!fired && effect == DcqcnEffect::default());
    }

    #[test]
    fn min_dec_fac_and_min_rate_bound_the_decrease() {
        let mut p = hpcc_like();
        p.gd = 10; // cut = α, would zero the rate at α = 1
        let line = 100e9;
        let mut s = DcqcnState::new(line);
        s.on_cnp(0, &p);
        s.on_decrease_check(4 * US + NS, line, &p);
        assert!(
            (s.rate - line * 0.5).abs() < 1.0,
            "bounded by rpg_min_dec_fac: {}",
            s.rate
        );
        for i in 0..200u64 {
            let t = (10 + i * 10) * US;
            s.on_cnp(t, &p);
            s.on_decrease_check(t + 5 * US, line, &p);
        }
        assert_eq!(s.rate, p.min_rate);
    }

    #[test]
    fn lazy_alpha_matches_eager_updates() {
        let p = hpcc_like();
        let mut lazy = DcqcnState::new(100e9);
        lazy.on_cnp(0, &p);
        lazy.on_cnp(2_500_000, &p); // 2.5 µs: inside the third α period
        lazy.advance_alpha(20 * US, &p);
        // Eager: α0 = 1023/1024; boundaries at 1,2 µs no CNP; 3 µs with CNP; 4..=20 µs none.
        let g = 1020.0 / 1024.0;
        let mut eager = 1023.0 / 1024.0;
        for k in 1..=20 {
            eager = if k == 3 {
                g * eager + (1.0 - g)
            } else {
                g * eager
            };
        }
        assert!(
            (lazy.alpha - eager).abs() < 1e-12,
            "{} vs {}",
            lazy.alpha,
            eager
        );
    }
}
