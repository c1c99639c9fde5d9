//! R-Pingmesh Eq. 1: the fewest random 5-tuples k ≥ N that ECMP spreads over all N parallel
//! cross-ToR paths with probability at least P:
//!
//! ```text
//! argmin_k  Σ_{i=1..N} (−1)^{i+1} C(N,i) (1 − i/N)^k  ≤  1 − P,   k ≥ N
//! ```
//!
//! The left side is the probability that some path is missed (inclusion–exclusion over the
//! missed paths; the coupon collector's tail). Its alternating sum loses every digit to
//! cancellation once N reaches a few dozen, so it is computed here as the same probability
//! by a stable recurrence: after each 5-tuple, the number of distinct paths covered so far
//! stays at j with probability j/N or grows to j+1 with probability (N−j)/N (all terms
//! positive). [`miss_probability`] is that probability; the tests check it against the
//! alternating sum where the latter is exact.

use thiserror::Error;

/// Largest N accepted (the recurrence costs O(N·k), k ≈ N·(ln N + ln 1/(1−P))).
pub const MAX_PATHS: u32 = 65_536;

/// Largest P accepted: beyond it 1 − P nears the resolution of the computed probability.
pub const MAX_PROBABILITY: f64 = 0.999_999_999;

/// Why no k was computed.
#[derive(Clone, Copy, Debug, PartialEq, Error)]
pub enum CoverageError {
    /// No paths.
    #[error("the number of parallel paths must be at least 1")]
    NoPaths,
    /// Too many paths.
    #[error("{0} parallel paths: at most {MAX_PATHS} are supported")]
    TooManyPaths(u32),
    /// P outside (0, [`MAX_PROBABILITY`]].
    #[error("coverage probability {0} must be above 0 and at most {MAX_PROBABILITY}")]
    BadProbability(f64),
}

/// The probability that `k` 5-tuples, each hashed uniformly onto one of `n` paths, leave
/// some path uncovered (the left side of Eq. 1).
pub fn miss_probability(n: u32, k: u32) -> f64 {
    let mut covered = Covered::new(n.max(1));
    for _ in 0..k {
        covered.add_five_tuple();
    }
    covered.miss()
}

/// The distribution of the number of distinct paths covered so far.
struct Covered {
    /// `p[j]`: probability that exactly j of the n paths are covered.
    p: Vec<f64>,
}

impl Covered {
    fn new(n: u32) -> Self {
        let mut p = vec![0.0; n as usize + 1];
        p[0] = 1.0;
        Covered { p }
    }

    /// One more 5-tuple: j stays with probability j/n, grows with (n−j)/n.
    fn add_five_tuple(&mut self) {
        let n = (self.p.len() - 1) as f64;
        for j in (0..self.p.len()).rev() {
            let stay = self.p[j] * j as f64 / n;
            let from_below = if j > 0 {
                self.p[j - 1] * (n - (j - 1) as f64) / n
            } else {
                0.0
            };
            self.p[j] = stay + from_below;
        }
    }

    fn miss(&self) -> f64 {
        (1.0 - self.p[self.p.len() - 1]).max(0.0)
    }
}

/// Eq. 1: the smallest k ≥ `n` with [`miss_probability`]`(n, k) ≤ 1 − p` (R-Pingmesh uses
/// p = 0.99).
pub fn five_tuples_for_coverage(n: u32, p: f64) -> Result<u32, CoverageError> {
    if n == 0 {
        return Err(CoverageError::NoPaths);
    }
    if n > MAX_PATHS {
        return Err(CoverageError::TooManyPaths(n));
    }
    if !(p > 0.0 && p <= MAX_PROBABILITY) {
        return Err(CoverageError::BadProbability(p));
    }
    let mut covered = Covered::new(n);
    let mut k = 0u32;
    loop {
        covered.add_five_tuple();
        k += 1;
        if k >= n && covered.miss() <= 1.0 - p {
            return Ok(k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The alternating sum of Eq. 1 as printed, exact enough for small N.
    fn eq1(n: u32, k: u32) -> f64 {
        let mut sum = 0.0;
        let mut binom = 1.0;
        for i in 1..=n {
            binom = binom * f64::from(n - i + 1) / f64::from(i);
            let sign = if i % 2 == 1 { 1.0 } else { -1.0 };
            sum += sign * binom * (1.0 - f64::from(i) / f64::from(n)).powi(k as i32);
        }
        sum
    }

    #[test]
    fn the_recurrence_is_eq_1() {
        for n in 1..=12 {
            for k in [n, n + 3, 2 * n, 5 * n + 1] {
                let (a, b) = (miss_probability(n, k), eq1(n, k));
                assert!((a - b).abs() < 1e-9, "n={n} k={k}: {a} vs {b}");
            }
        }
    }

    #[test]
    fn k_for_p_099() {
        // One path: one 5-tuple covers it.
        assert_eq!(five_tuples_for_coverage(1, 0.99), Ok(1));
        // Two paths: P(miss) = 2·2^-k ≤ 0.01 first at k = 8.
        assert_eq!(five_tuples_for_coverage(2, 0.99), Ok(8));
        // Four spines: the smallest k with 4·(3/4)^k − 6·(1/2)^k + 4·(1/4)^k ≤ 0.01.
        let k4 = five_tuples_for_coverage(4, 0.99).unwrap();
        assert!(eq1(4, k4) <= 0.01 && eq1(4, k4 - 1) > 0.01, "k={k4}");
        assert_eq!(k4, 21);
        // Larger fabrics: monotone in N, about N·(ln N + ln 100).
        let k64 = five_tuples_for_coverage(64, 0.99).unwrap();
        let k256 = five_tuples_for_coverage(256, 0.99).unwrap();
        assert!(k64 < k256);
        let approx = 256.0 * ((256f64).ln() + 100f64.ln());
        assert!(
            (f64::from(k256) - approx).abs() / approx < 0.1,
            "{k256} vs {approx}"
        );
        assert!(miss_probability(256, k256) <= 0.01);
        assert!(miss_probability(256, k256 - 1) > 0.01);
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert_eq!(
            five_tuples_for_coverage(0, 0.99),
            Err(CoverageError::NoPaths)
        );
        assert_eq!(
            five_tuples_for_coverage(4, 1.0),
            Err(CoverageError::BadProbability(1.0))
        );
        assert!(five_tuples_for_coverage(4, f64::NAN).is_err());
        assert_eq!(
            five_tuples_for_coverage(MAX_PATHS + 1, 0.99),
            Err(CoverageError::TooManyPaths(MAX_PATHS + 1))
        );
    }
}
