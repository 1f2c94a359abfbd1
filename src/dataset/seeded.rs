//! The one seeded generator of the crate: SplitMix64 (Steele, Lea and Flood 2014), spelled out
//! here so that a seed draws the same sample, shuffle or permutation whatever the versions of
//! the dependencies. Used where an output depends on a draw: calibration samples and their
//! bootstrap, the randomization test, the judge's shuffled votes.

/// A SplitMix64 generator: a 64-bit state advanced by a Weyl step and mixed on output.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0), by Lemire's multiply-shift.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// Shuffles `items` in place (Fisher-Yates, front to back).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in 0..items.len().saturating_sub(1) {
            let j = i + self.below(items.len() - i);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_published_sequence_for_seed_zero() {
        // The first outputs of SplitMix64 from state 0 (the reference C implementation's).
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn shuffles_are_permutations_and_depend_on_the_seed() {
        let mut a: Vec<u32> = (0..20).collect();
        SplitMix64::new(7).shuffle(&mut a);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..20).collect::<Vec<_>>());
        let mut b: Vec<u32> = (0..20).collect();
        SplitMix64::new(8).shuffle(&mut b);
        assert_ne!(a, b);
        let mut again: Vec<u32> = (0..20).collect();
        SplitMix64::new(7).shuffle(&mut again);
        assert_eq!(a, again);
    }
}
