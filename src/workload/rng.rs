//! A small deterministic PRNG (SplitMix64), so `gen` needs no dependency and the same
//! seed gives the same workload on every platform and build.
//!
//! Every order gets its own stream seeded from `(seed, order_id)`, which makes an
//! order's life independent of the block size and of every other order.

use crate::time::Micros;

/// SplitMix64: 64 bits of state, passes BigCrush, and is trivially reproducible.
#[derive(Debug, Clone)]
pub(super) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A stream starting at `seed`.
    pub(super) fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The stream of one order of one workload.
    pub(super) fn for_order(seed: u64, order_id: i64) -> Self {
        SplitMix64::new(mix(seed ^ mix(order_id as u64 ^ 0x5E_ED0F_0DE5)))
    }

    /// The next 64 random bits.
    pub(super) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.state)
    }

    /// Uniform in `[0, 1)`.
    pub(super) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub(super) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Uniform in `[low, high)` (`low` when the range is empty).
    pub(super) fn between(&mut self, low: Micros, high: Micros) -> Micros {
        if high <= low {
            return low;
        }
        low + (self.next_u64() % (high - low) as u64) as Micros
    }

    /// Uniform index in `[0, n)`.
    pub(super) fn index(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

/// The SplitMix64 finaliser: a good 64-bit mixing function, also used as the partition hash.
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = SplitMix64::for_order(7, 8821);
        let mut b = SplitMix64::for_order(7, 8821);
        let mut c = SplitMix64::for_order(8, 8821);
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(xs[0], c.next_u64());
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = SplitMix64::new(1);
        for _ in 0..10_000 {
            let x = r.between(-5, 5);
            assert!((-5..5).contains(&x));
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(r.between(3, 3), 3);
    }
}
