//! Sample statistics shared by [`crate::simulate`] and [`crate::advise`]: exact
//! nearest-rank quantiles of a sample of durations.

use crate::time::Micros;

/// Quantiles of a lag sample, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LagQuantiles {
    /// Sample size.
    pub count: u64,
    /// Median.
    pub p50: Micros,
    /// 90th percentile.
    pub p90: Micros,
    /// 99th percentile.
    pub p99: Micros,
    /// 99.9th percentile.
    pub p999: Micros,
    /// Largest.
    pub max: Micros,
}

impl LagQuantiles {
    /// Nearest-rank quantiles of `sample` (sorted in place).
    pub fn of(sample: &mut [Micros]) -> LagQuantiles {
        if sample.is_empty() {
            return LagQuantiles::default();
        }
        sample.sort_unstable();
        let n = sample.len();
        let rank = |q: f64| sample[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        LagQuantiles {
            count: n as u64,
            p50: rank(0.5),
            p90: rank(0.9),
            p99: rank(0.99),
            p999: rank(0.999),
            max: sample[n - 1],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LagQuantiles;

    #[test]
    fn quantiles_are_nearest_rank() {
        let mut sample: Vec<i64> = (1..=1000).rev().collect();
        let q = LagQuantiles::of(&mut sample);
        assert_eq!((q.count, q.p50, q.p90, q.p99, q.p999, q.max), (1000, 500, 900, 990, 999, 1000));
        assert_eq!(LagQuantiles::of(&mut [7]).p50, 7);
        assert_eq!(LagQuantiles::of(&mut []), LagQuantiles::default());
    }
}
