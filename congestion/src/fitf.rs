//! The forced idle time fraction (FITF), Yellowstone Eq. 3:
//!
//! F_r\[i\] = τ·(W_{r,i+1} − W_{r,i}) / ((tᵠ_{i+1} + tᵖ_{i+1}/2) − (tᵠ_i + tᵖ_i/2)),
//!
//! the share of the interval between two consecutive reads of a round during which the port
//! had data to send but no flow-control credits (PortXmitWait counts ticks of τ, about 22 ns
//! on an FDR port). The read time of each query is estimated as tᵠ + tᵖ/2, the middle of the
//! query's turnaround; when the first query reached the switch earlier and the second later
//! than that estimate, the estimated interval is shorter than the true one and FITF exceeds 1
//! (Yellowstone §IV-D, Table III: 1.179). Such values are kept and flagged
//! ([`IntervalStatus::AboveOne`]): they mean the port stalled for the whole interval.
//!
//! A counter that went backwards was reset between the reads ([`IntervalStatus::Reset`]); a
//! 32-bit PortCounters PortXmitWait that reads 0xFFFFFFFF has saturated (IB counters stick
//! at all ones instead of wrapping) and the interval's wait is unknown
//! ([`IntervalStatus::Saturated`], with the lower bound when the first read was not
//! saturated). Neither gives a value, rather than garbage.
//!
//! The RoCE analogue ([`pause_round`]) is the paused fraction from a priority's PFC pause
//! duration counters (µs): Δduration·1000 / Δt, with the same timing, statuses and statistics.
//!
//! [`classify`] groups rounds by switch tier and port direction as the study does (Fig. 5:
//! zero vs non-zero intervals; Fig. 6/7: max and mean FITF of each non-zero round).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::sample::{Direction, PortId, Sample, Tier, Width};

/// The study's explanation of FITF values above 1 (Yellowstone §IV-D).
pub const ABOVE_ONE_EXPLANATION: &str = "FITF > 1: the read times are estimated as t_q + t_p/2; \
the first query reached the switch earlier and the second later than that estimate, so the true \
interval is longer than the estimated one (Yellowstone §IV-D, Table III). Read it as the port \
stalled, waiting for credits, for the whole interval.";

/// Settings of the FITF computation.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct FitfConfig {
    /// τ: the duration of one PortXmitWait tick, in ns (about 22 ns on an FDR port,
    /// Yellowstone Eq. 3).
    pub tau_ns: f64,
    /// Values above this are flagged as outliers (1.0: the whole interval).
    pub outlier_above: f64,
}

impl Default for FitfConfig {
    fn default() -> Self {
        FitfConfig {
            tau_ns: 22.0,
            outlier_above: 1.0,
        }
    }
}

/// Which side's pause duration the RoCE analogue uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseSide {
    /// Pauses received: our transmitter was held (the analogue of PortXmitWait).
    Rx,
    /// Pauses sent: we held the peer.
    Tx,
}

/// What a round measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Metric {
    /// FITF from PortXmitWait (Yellowstone Eq. 3).
    Fitf,
    /// The paused fraction of a priority from its PFC pause duration counter.
    PfcPaused {
        /// The IEEE 802.1Qbb priority.
        priority: u8,
        /// Which side.
        side: PauseSide,
    },
}

/// What one interval's value is.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "status")]
pub enum IntervalStatus {
    /// A value in [0, `outlier_above`].
    Ok,
    /// A value above `outlier_above`: see [`ABOVE_ONE_EXPLANATION`].
    AboveOne,
    /// The counter reached its maximum: the wait is unknown; at least `lower_bound` when the
    /// first read was below the maximum.
    Saturated {
        /// The FITF the counter's rise to its maximum alone gives.
        lower_bound: Option<f64>,
    },
    /// The counter went backwards: it was reset between the reads.
    Reset,
    /// The estimated read times do not advance.
    NoTime,
    /// A read lacks the counter.
    Missing,
}

impl IntervalStatus {
    /// Whether the interval has a value.
    pub fn has_value(&self) -> bool {
        matches!(self, IntervalStatus::Ok | IntervalStatus::AboveOne)
    }

    /// A short name (CSV, HTML).
    pub fn name(&self) -> &'static str {
        match self {
            IntervalStatus::Ok => "ok",
            IntervalStatus::AboveOne => "above_one",
            IntervalStatus::Saturated { .. } => "saturated",
            IntervalStatus::Reset => "reset",
            IntervalStatus::NoTime => "no_time",
            IntervalStatus::Missing => "missing",
        }
    }
}

/// One interval of a round: F_r\[i\] between reads i and i+1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// i, 1-based as in Eq. 3.
    pub index: usize,
    /// tᵠ_i + tᵖ_i/2, ns.
    pub t_start_ns: f64,
    /// tᵠ_{i+1} + tᵖ_{i+1}/2, ns.
    pub t_end_ns: f64,
    /// The counter's rise (ticks, or µs for pause durations), when it rose.
    pub delta: Option<u64>,
    /// The fraction, when the interval has one.
    pub value: Option<f64>,
    /// What the value is.
    #[serde(flatten)]
    pub status: IntervalStatus,
    /// The explanation of a flagged value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A round's statistics (over the intervals with a value).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundStats {
    /// Intervals in the round.
    pub intervals: usize,
    /// Intervals with a value.
    pub valid: usize,
    /// Intervals with a value above zero.
    pub nonzero: usize,
    /// `nonzero / valid` (0 when none valid).
    pub share_nonzero: f64,
    /// Largest value (0 when none valid).
    pub max: f64,
    /// Mean over the valid intervals (0 when none valid).
    pub mean: f64,
    /// Mean over the non-zero values only, as Fig. 7 averages.
    pub mean_nonzero: Option<f64>,
    /// Values above `outlier_above`.
    pub above_one: usize,
    /// Saturated intervals.
    pub saturated: usize,
    /// Intervals across a reset.
    pub resets: usize,
}

impl RoundStats {
    /// A non-zero round: one with a non-zero value in at least one interval (§IV-C).
    pub fn is_nonzero(&self) -> bool {
        self.nonzero > 0
    }
}

/// One round of one port: its intervals and statistics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Round {
    /// The port.
    pub port: PortId,
    /// What was measured.
    pub metric: Metric,
    /// tᵠ of the first read, ns.
    pub t_start_ns: u64,
    /// The intervals (one fewer than the reads).
    pub intervals: Vec<Interval>,
    /// Their statistics.
    pub stats: RoundStats,
}

/// Why a round cannot be computed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FitfError {
    /// A round needs at least two reads.
    #[error("a round needs at least 2 samples, got {0}")]
    TooFewSamples(usize),
    /// All samples of a round must be of one port.
    #[error("sample {index} is of port {got}, the round's is {expected}")]
    MixedPorts {
        /// The offending sample's index.
        index: usize,
        /// The round's port.
        expected: String,
        /// The sample's port.
        got: String,
    },
    /// A PFC priority past 7.
    #[error("priority {0} is not 0–7")]
    Priority(u8),
}

fn round_of(
    samples: &[Sample],
    metric: Metric,
    ns_per_unit: f64,
    outlier_above: f64,
    counter: impl Fn(&Sample) -> Option<u64>,
    width: impl Fn(&Sample) -> Width,
) -> Result<Round, FitfError> {
    let (first, rest) = match samples {
        [first, rest @ ..] if !rest.is_empty() => (first, rest),
        _ => return Err(FitfError::TooFewSamples(samples.len())),
    };
    let key = first.port.key();
    for (index, s) in rest.iter().enumerate() {
        if s.port.key() != key {
            return Err(FitfError::MixedPorts {
                index: index + 1,
                expected: first.port.to_string(),
                got: s.port.to_string(),
            });
        }
    }
    let mut intervals = Vec::with_capacity(samples.len() - 1);
    for (i, pair) in samples.windows(2).enumerate() {
        let [a, b] = pair else { continue };
        let (t0, t1) = (a.read_time_ns(), b.read_time_ns());
        let dt = t1 - t0;
        let mut iv = Interval {
            index: i + 1,
            t_start_ns: t0,
            t_end_ns: t1,
            delta: None,
            value: None,
            status: IntervalStatus::Ok,
            note: None,
        };
        let (Some(w0), Some(w1)) = (counter(a), counter(b)) else {
            iv.status = IntervalStatus::Missing;
            intervals.push(iv);
            continue;
        };
        let max = width(b).max().min(width(a).max());
        if w1 < w0 {
            iv.status = IntervalStatus::Reset;
        } else if dt <= 0.0 || !dt.is_finite() {
            iv.status = IntervalStatus::NoTime;
        } else if w1 >= max {
            iv.status = IntervalStatus::Saturated {
                lower_bound: (w0 < max).then(|| (max - w0) as f64 * ns_per_unit / dt),
            };
        } else {
            let d = w1 - w0;
            let v = d as f64 * ns_per_unit / dt;
            iv.delta = Some(d);
            iv.value = Some(v);
            if v > outlier_above {
                iv.status = IntervalStatus::AboveOne;
                iv.note = Some(ABOVE_ONE_EXPLANATION.to_string());
            }
        }
        intervals.push(iv);
    }
    let stats = stats_of(&intervals);
    Ok(Round {
        port: first.port.clone(),
        metric,
        t_start_ns: first.t_query_ns,
        intervals,
        stats,
    })
}

fn stats_of(intervals: &[Interval]) -> RoundStats {
    let values: Vec<f64> = intervals.iter().filter_map(|i| i.value).collect();
    let nonzero: Vec<f64> = values.iter().copied().filter(|&v| v > 0.0).collect();
    let valid = values.len();
    RoundStats {
        intervals: intervals.len(),
        valid,
        nonzero: nonzero.len(),
        share_nonzero: if valid == 0 {
            0.0
        } else {
            nonzero.len() as f64 / valid as f64
        },
        max: values.iter().copied().fold(0.0, f64::max),
        mean: if valid == 0 {
            0.0
        } else {
            values.iter().sum::<f64>() / valid as f64
        },
        mean_nonzero: (!nonzero.is_empty())
            .then(|| nonzero.iter().sum::<f64>() / nonzero.len() as f64),
        above_one: intervals
            .iter()
            .filter(|i| i.status == IntervalStatus::AboveOne)
            .count(),
        saturated: intervals
            .iter()
            .filter(|i| matches!(i.status, IntervalStatus::Saturated { .. }))
            .count(),
        resets: intervals
            .iter()
            .filter(|i| i.status == IntervalStatus::Reset)
            .count(),
    }
}

/// FITF of a round (Yellowstone Eq. 3) from its consecutive PortXmitWait samples.
pub fn fitf_round(samples: &[Sample], cfg: &FitfConfig) -> Result<Round, FitfError> {
    round_of(
        samples,
        Metric::Fitf,
        cfg.tau_ns,
        cfg.outlier_above,
        |s| s.xmit_wait,
        |s| s.wait_width,
    )
}

/// The RoCE analogue: the fraction of each interval priority `priority` was paused, from the
/// PFC pause duration counter of `side` (µs, 64-bit).
pub fn pause_round(
    samples: &[Sample],
    priority: u8,
    side: PauseSide,
    cfg: &FitfConfig,
) -> Result<Round, FitfError> {
    if usize::from(priority) >= crate::sample::PRIORITIES {
        return Err(FitfError::Priority(priority));
    }
    round_of(
        samples,
        Metric::PfcPaused { priority, side },
        1000.0,
        cfg.outlier_above,
        |s| {
            s.pfc(priority).and_then(|c| match side {
                PauseSide::Rx => c.rx_pause_duration_us,
                PauseSide::Tx => c.tx_pause_duration_us,
            })
        },
        |_| Width::Bits64,
    )
}

/// Splits a stream of samples into rounds: a new round starts when the port changes.
pub fn split_rounds(samples: &[Sample]) -> Vec<&[Sample]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=samples.len() {
        let boundary = match (samples.get(i - 1), samples.get(i)) {
            (Some(a), Some(b)) => a.port.key() != b.port.key(),
            _ => true,
        };
        if boundary {
            if let Some(r) = samples.get(start..i) {
                out.push(r);
            }
            start = i;
        }
    }
    out
}

/// The five-number summary of a box plot with the study's outlier rule: points more than
/// 1.5·IQR above the third or below the first quartile (Yellowstone §IV-D).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BoxStats {
    /// Points summarised.
    pub n: usize,
    /// First quartile.
    pub q1: f64,
    /// Median.
    pub median: f64,
    /// Third quartile.
    pub q3: f64,
    /// Lowest point within 1.5·IQR of q1.
    pub whisker_low: f64,
    /// Highest point within 1.5·IQR of q3.
    pub whisker_high: f64,
    /// Points outside the whiskers.
    pub outliers: Vec<f64>,
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let (a, b) = (
        sorted.get(lo).copied().unwrap_or(0.0),
        sorted.get(hi).copied().unwrap_or(0.0),
    );
    a + (b - a) * (pos - lo as f64)
}

impl BoxStats {
    /// The summary of `values` (non-finite values dropped); `None` when there are none.
    pub fn of(values: &[f64]) -> Option<BoxStats> {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let q1 = quantile(&v, 0.25);
        let median = quantile(&v, 0.5);
        let q3 = quantile(&v, 0.75);
        let iqr = q3 - q1;
        let (lo, hi) = (q1 - 1.5 * iqr, q3 + 1.5 * iqr);
        let inside: Vec<f64> = v.iter().copied().filter(|&x| x >= lo && x <= hi).collect();
        Some(BoxStats {
            n: v.len(),
            q1,
            median,
            q3,
            whisker_low: inside.first().copied().unwrap_or(q1),
            whisker_high: inside.last().copied().unwrap_or(q3),
            outliers: v.iter().copied().filter(|&x| x < lo || x > hi).collect(),
        })
    }
}

/// The rounds of one (tier, direction) category, summarised as the study's Fig. 5–7.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupSummary {
    /// σ: the switch category.
    pub tier: Tier,
    /// λ: the port type.
    pub dir: Direction,
    /// Rounds (k_{σ,λ}).
    pub rounds: usize,
    /// Rounds with a non-zero value.
    pub nonzero_rounds: usize,
    /// Intervals with a value.
    pub intervals: usize,
    /// Of those, with zero wait (Fig. 5).
    pub zero_intervals: usize,
    /// Of those, with non-zero wait (Fig. 5).
    pub nonzero_intervals: usize,
    /// Values above 1 (Table II).
    pub above_one: usize,
    /// Saturated intervals.
    pub saturated: usize,
    /// Max value of each non-zero round (Fig. 6).
    pub max_per_nonzero_round: Vec<f64>,
    /// Mean of the non-zero values of each non-zero round (Fig. 7).
    pub mean_per_nonzero_round: Vec<f64>,
}

impl GroupSummary {
    /// Share of intervals with non-zero wait (0 when none).
    pub fn share_nonzero(&self) -> f64 {
        if self.intervals == 0 {
            0.0
        } else {
            self.nonzero_intervals as f64 / self.intervals as f64
        }
    }
}

/// Groups rounds by (tier, direction), in that order.
pub fn classify(rounds: &[Round]) -> Vec<GroupSummary> {
    let mut groups: BTreeMap<(Tier, Direction), GroupSummary> = BTreeMap::new();
    for r in rounds {
        let g = groups
            .entry((r.port.tier.clone(), r.port.dir))
            .or_insert_with(|| GroupSummary {
                tier: r.port.tier.clone(),
                dir: r.port.dir,
                rounds: 0,
                nonzero_rounds: 0,
                intervals: 0,
                zero_intervals: 0,
                nonzero_intervals: 0,
                above_one: 0,
                saturated: 0,
                max_per_nonzero_round: Vec::new(),
                mean_per_nonzero_round: Vec::new(),
            });
        let s = &r.stats;
        g.rounds += 1;
        g.intervals += s.valid;
        g.nonzero_intervals += s.nonzero;
        g.zero_intervals += s.valid - s.nonzero;
        g.above_one += s.above_one;
        g.saturated += s.saturated;
        if s.is_nonzero() {
            g.nonzero_rounds += 1;
            g.max_per_nonzero_round.push(s.max);
            if let Some(m) = s.mean_nonzero {
                g.mean_per_nonzero_round.push(m);
            }
        }
    }
    groups.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port() -> PortId {
        PortId::new("leaf1", 3, Tier::Leaf, Direction::Down)
    }

    #[test]
    fn split_rounds_cuts_at_port_changes() {
        let a = Sample::new(port(), 0, 0);
        let mut b = Sample::new(port(), 1, 0);
        b.port.port = 4;
        let s = vec![a.clone(), a.clone(), b.clone(), a];
        let r = split_rounds(&s);
        assert_eq!(r.iter().map(|r| r.len()).collect::<Vec<_>>(), vec![2, 1, 1]);
        assert!(split_rounds(&[]).is_empty());
    }

    #[test]
    fn box_stats_follow_the_iqr_rule() {
        let b = BoxStats::of(&[1.0, 2.0, 3.0, 4.0, 100.0]).expect("finite values");
        assert_eq!(b.median, 3.0);
        assert_eq!(b.q1, 2.0);
        assert_eq!(b.q3, 4.0);
        assert_eq!(b.outliers, vec![100.0]);
        assert_eq!(b.whisker_high, 4.0);
        assert!(BoxStats::of(&[f64::NAN]).is_none());
    }

    #[test]
    fn too_few_and_mixed() {
        let cfg = FitfConfig::default();
        assert_eq!(fitf_round(&[], &cfg), Err(FitfError::TooFewSamples(0)));
        let a = Sample::new(port(), 0, 0).with_wait(0, Width::Bits32);
        let mut b = a.clone();
        b.port.node = "leaf2".into();
        assert!(matches!(
            fitf_round(&[a, b], &cfg),
            Err(FitfError::MixedPorts { index: 1, .. })
        ));
    }
}
