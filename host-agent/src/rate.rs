//! A token bucket: at most `burst` at once, refilled at `per_second`. Path tracing and the
//! polling sender both bound what they put on the wire with one.

/// A token bucket on a caller-given monotonic clock (ns).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    refilled_ns: Option<u64>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `per_second` (both checked by the
    /// caller's configuration: positive and finite).
    pub fn new(per_second: f64, burst: u32) -> Self {
        TokenBucket {
            per_second,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            refilled_ns: None,
        }
    }

    /// Adds the tokens earned since the last refill (a clock going backwards earns none).
    pub fn refill(&mut self, now_ns: u64) {
        let elapsed = self
            .refilled_ns
            .map_or(0, |then| now_ns.saturating_sub(then));
        self.refilled_ns = Some(now_ns.max(self.refilled_ns.unwrap_or(0)));
        self.tokens = (self.tokens + elapsed as f64 * 1e-9 * self.per_second).min(self.burst);
    }

    /// Whether a whole token is there.
    pub fn ready(&self) -> bool {
        self.tokens >= 1.0
    }

    /// Takes a token if there is one.
    pub fn take(&mut self) -> bool {
        if self.ready() {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate_and_never_more_than_the_burst() {
        let mut bucket = TokenBucket::new(10.0, 3);
        bucket.refill(1_000);
        assert!(bucket.take() && bucket.take() && bucket.take());
        assert!(!bucket.take());
        // 100 ms at 10/s: one more.
        bucket.refill(1_000 + 100_000_000);
        assert!(bucket.take());
        assert!(!bucket.take());
        // A long quiet time fills it to the burst, not beyond.
        bucket.refill(1_000 + 100_000_000 + 60_000_000_000);
        assert_eq!((0..10).filter(|_| bucket.take()).count(), 3);
        // A clock going backwards earns nothing.
        bucket.refill(5);
        assert!(!bucket.ready());
    }
}
