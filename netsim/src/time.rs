//! Simulated time.
//!
//! The clock counts picoseconds in a `u64` (enough for 213 days). Picoseconds make every
//! common line rate exact: one byte takes 80 ps at 100 Gbit/s, 20 ps at 400 Gbit/s, 10 ps at
//! 800 Gbit/s, so serialization times never accumulate rounding error.

/// A point in simulated time or a duration, in picoseconds.
pub type Time = u64;

/// Picoseconds per nanosecond.
pub const NS: Time = 1_000;
/// Picoseconds per microsecond.
pub const US: Time = 1_000_000;
/// Picoseconds per millisecond.
pub const MS: Time = 1_000_000_000;

/// Time to serialize `bytes` onto a link of `bits_per_second`, rounded down to a picosecond.
#[inline]
pub fn serialization(bytes: u32, bits_per_second: u64) -> Time {
    (bytes as u64 * 8_000_000_000_000) / bits_per_second
}

/// Converts fractional microseconds (as written in scenario files) to picoseconds.
pub fn from_us(us: f64) -> Time {
    (us * US as f64).round() as Time
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_line_rates_are_exact() {
        assert_eq!(serialization(1, 100_000_000_000), 80);
        assert_eq!(serialization(1, 400_000_000_000), 20);
        assert_eq!(serialization(1062, 400_000_000_000), 21_240);
        assert_eq!(serialization(1062, 25_000_000_000), 339_840);
        assert_eq!(from_us(2.0), 2 * US);
    }
}
