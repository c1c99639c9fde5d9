//! PARALEON's utility (Eq. 1): U = ω_TP·O_TP + ω_RTT·O_RTT + ω_PFC·O_PFC, from one monitor
//! interval's runtime metrics.
//!
//! - O_TP: the average bandwidth utilisation of the active uplinks from RNICs to ToRs;
//! - O_RTT: the average normalised RTT of the RNIC pairs, base path delay / runtime RTT
//!   (base path delay = hop count × minimum link delay, after Swift);
//! - O_PFC: 1 − λ_xoff/λ_MI, λ_xoff the average PFC pause time of the devices in the
//!   interval.
//!
//! Each objective is in [0, 1], and so is U. A term with no samples in the interval (no
//! active uplink, no RTT measured) is left out and the other weights scaled up to sum 1.

use serde::Serialize;
use thiserror::Error;

use crate::fsd::Dominant;

/// The operator's weights (ω_TP + ω_RTT + ω_PFC = 1).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Weights {
    /// ω_TP.
    pub throughput: f64,
    /// ω_RTT.
    pub rtt: f64,
    /// ω_PFC.
    pub pfc: f64,
}

/// Why weights or metrics cannot be used.
#[derive(Clone, Debug, PartialEq, Error)]
pub enum UtilityError {
    /// The weights are not three non-negative numbers summing to 1.
    #[error("utility weights {0:?}: each in [0, 1], summing to 1")]
    Weights(Weights),
    /// A metric is not a finite number in its range.
    #[error("{what}[{index}] = {value}: {why}")]
    Metric {
        /// Which list.
        what: &'static str,
        /// Its index.
        index: usize,
        /// The value.
        value: f64,
        /// The range it must be in.
        why: &'static str,
    },
}

impl Weights {
    /// The throughput-leaning preset (PARALEON §III-C: "for throughput-sensitive workload
    /// such as LLM training, ω_TP = 0.5, ω_RTT = 0.2 and ω_PFC = 0.3").
    pub const THROUGHPUT: Weights = Weights {
        throughput: 0.5,
        rtt: 0.2,
        pfc: 0.3,
    };
    /// The latency-leaning preset (Table III's NS3 setting: 0.2, 0.5, 0.3).
    pub const LATENCY: Weights = Weights {
        throughput: 0.2,
        rtt: 0.5,
        pfc: 0.3,
    };

    /// The preset for the dominant flow type: elephants want throughput, mice delay.
    pub fn preset(dominant: Dominant) -> Weights {
        match dominant {
            Dominant::Elephants => Weights::THROUGHPUT,
            Dominant::Mice => Weights::LATENCY,
        }
    }

    /// Checks the weights.
    pub fn validate(&self) -> Result<(), UtilityError> {
        let parts = [self.throughput, self.rtt, self.pfc];
        let sum: f64 = parts.iter().sum();
        if parts
            .iter()
            .all(|w| w.is_finite() && (0.0..=1.0).contains(w))
            && (sum - 1.0).abs() < 1e-6
        {
            Ok(())
        } else {
            Err(UtilityError::Weights(*self))
        }
    }
}

/// One monitor interval's runtime metrics.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IntervalMetrics {
    /// Bandwidth utilisation (0–1) of each active RNIC→ToR uplink.
    pub uplink_utilisation: Vec<f64>,
    /// Normalised RTT (base path delay / runtime RTT, 0–1) of each RNIC pair measured.
    pub normalised_rtt: Vec<f64>,
    /// PFC pause time of each device as a fraction of the interval (0–1).
    pub pause_fraction: Vec<f64>,
}

/// The objectives and the utility of one interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Utility {
    /// O_TP (None: no active uplink).
    pub throughput: Option<f64>,
    /// O_RTT (None: no RTT measured).
    pub rtt: Option<f64>,
    /// O_PFC (None: no device reported).
    pub pfc: Option<f64>,
    /// U.
    pub value: f64,
}

/// The normalised RTT of a pair: base path delay (hops × minimum link delay) over the
/// runtime RTT, at most 1 (a measurement under the base is taken as the base).
pub fn normalised_rtt(hops: u32, min_link_delay_ns: u64, rtt_ns: u64) -> f64 {
    let base = f64::from(hops) * min_link_delay_ns as f64;
    if rtt_ns == 0 {
        return 1.0;
    }
    (base / rtt_ns as f64).clamp(0.0, 1.0)
}

fn mean(what: &'static str, values: &[f64]) -> Result<Option<f64>, UtilityError> {
    for (index, v) in values.iter().enumerate() {
        if !(v.is_finite() && (0.0..=1.0 + 1e-9).contains(v)) {
            return Err(UtilityError::Metric {
                what,
                index,
                value: *v,
                why: "must be a fraction in [0, 1]",
            });
        }
    }
    Ok((!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64))
}

/// Eq. 1 over `metrics` with `weights`.
pub fn utility(metrics: &IntervalMetrics, weights: &Weights) -> Result<Utility, UtilityError> {
    weights.validate()?;
    let tp = mean("uplink_utilisation", &metrics.uplink_utilisation)?;
    let rtt = mean("normalised_rtt", &metrics.normalised_rtt)?;
    let pause = mean("pause_fraction", &metrics.pause_fraction)?;
    let pfc = pause.map(|p| 1.0 - p.min(1.0));
    let terms = [
        (tp, weights.throughput),
        (rtt, weights.rtt),
        (pfc, weights.pfc),
    ];
    let weight: f64 = terms
        .iter()
        .filter(|(o, _)| o.is_some())
        .map(|(_, w)| w)
        .sum();
    let value = if weight > 0.0 {
        terms
            .iter()
            .filter_map(|(o, w)| o.map(|o| o.min(1.0) * w))
            .sum::<f64>()
            / weight
    } else {
        0.0
    };
    Ok(Utility {
        throughput: tp,
        rtt,
        pfc,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eq_1_weighs_the_three_objectives() {
        let m = IntervalMetrics {
            uplink_utilisation: vec![0.8, 0.6],
            normalised_rtt: vec![0.5],
            pause_fraction: vec![0.0, 0.2],
        };
        let u = utility(&m, &Weights::THROUGHPUT).unwrap();
        assert_eq!(u.throughput, Some(0.7));
        assert_eq!(u.pfc, Some(0.9));
        // 0.5·0.7 + 0.2·0.5 + 0.3·0.9 = 0.72
        assert!((u.value - 0.72).abs() < 1e-12, "{u:?}");
        let latency = utility(&m, &Weights::LATENCY).unwrap();
        // 0.2·0.7 + 0.5·0.5 + 0.3·0.9 = 0.66
        assert!((latency.value - 0.66).abs() < 1e-12);
        assert_eq!(Weights::preset(Dominant::Mice), Weights::LATENCY);
    }

    #[test]
    fn a_term_without_samples_is_left_out_and_bad_input_is_named() {
        let m = IntervalMetrics {
            uplink_utilisation: vec![0.5],
            ..IntervalMetrics::default()
        };
        let u = utility(&m, &Weights::LATENCY).unwrap();
        assert_eq!((u.rtt, u.pfc), (None, None));
        assert!((u.value - 0.5).abs() < 1e-12);
        let bad = IntervalMetrics {
            normalised_rtt: vec![0.5, f64::NAN],
            ..IntervalMetrics::default()
        };
        let e = utility(&bad, &Weights::LATENCY).unwrap_err();
        assert_eq!(
            e.to_string(),
            "normalised_rtt[1] = NaN: must be a fraction in [0, 1]"
        );
        let w = Weights {
            throughput: 0.5,
            rtt: 0.5,
            pfc: 0.5,
        };
        assert!(utility(&m, &w).is_err());
        // Swift's base path delay: 4 hops × 5 µs against a 40 µs RTT.
        assert_eq!(normalised_rtt(4, 5_000, 40_000), 0.5);
        assert_eq!(normalised_rtt(4, 5_000, 10_000), 1.0);
    }
}
