//! Paired significance tests between two runs' per-question values: the two-sided paired
//! t-test and the paired randomization (sign-flip permutation) test, as IR papers report them.
//!
//! The randomization test is seeded, so p-values are reproducible run to run.

use crate::dataset::SplitMix64;

/// p-values of one comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PairedTest {
    /// Mean of `b - a`.
    pub mean_difference: f64,
    /// Two-sided paired t-test p-value.
    pub t_test_p: f64,
    /// Two-sided paired randomization test p-value.
    pub randomization_p: f64,
}

/// Both tests on paired samples `a` and `b` (same questions, same order).
pub fn paired_tests(a: &[f64], b: &[f64], permutations: usize, seed: u64) -> PairedTest {
    let diffs = differences(a, b);
    PairedTest {
        mean_difference: mean(&diffs),
        t_test_p: paired_t_test(a, b),
        randomization_p: randomization_test(a, b, permutations, seed),
    }
}

fn differences(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| y - x).collect()
}

fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        0.0
    } else {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// Two-sided paired t-test (Student, n - 1 degrees of freedom). With fewer than two pairs, or
/// with all differences equal, the test is undefined: 1.0 when the differences are all zero,
/// 0.0 when they are all the same non-zero value.
pub fn paired_t_test(a: &[f64], b: &[f64]) -> f64 {
    let diffs = differences(a, b);
    let n = diffs.len();
    let m = mean(&diffs);
    if n < 2 {
        return 1.0;
    }
    let var = diffs.iter().map(|d| (d - m) * (d - m)).sum::<f64>() / (n - 1) as f64;
    if var <= f64::EPSILON * f64::EPSILON * m.abs().max(1.0) {
        return if m.abs() < 1e-15 { 1.0 } else { 0.0 };
    }
    let t = m / (var / n as f64).sqrt();
    let df = (n - 1) as f64;
    // P(|T| >= |t|) = I_{df/(df+t^2)}(df/2, 1/2).
    regularized_incomplete_beta(df / (df + t * t), df / 2.0, 0.5).clamp(0.0, 1.0)
}

/// Two-sided paired randomization test: the share of `permutations` random sign flips of the
/// differences whose mean is at least as far from 0 as the observed one, with the observed
/// assignment counted ((hits + 1) / (permutations + 1)). Deterministic for a given seed.
pub fn randomization_test(a: &[f64], b: &[f64], permutations: usize, seed: u64) -> f64 {
    let diffs = differences(a, b);
    if diffs.is_empty() || permutations == 0 {
        return 1.0;
    }
    let observed = diffs.iter().sum::<f64>().abs();
    // Sums that differ by rounding only must count as equal.
    let tolerance = 1e-9 * diffs.iter().map(|d| d.abs()).sum::<f64>().max(1e-300);
    let mut rng = SplitMix64::new(seed);
    let mut hits = 0usize;
    for _ in 0..permutations {
        let mut sum = 0.0f64;
        let mut bits = 0u64;
        let mut left = 0u32;
        for d in &diffs {
            if left == 0 {
                bits = rng.next_u64();
                left = 64;
            }
            sum += if bits & 1 == 1 { *d } else { -*d };
            bits >>= 1;
            left -= 1;
        }
        if sum.abs() >= observed - tolerance {
            hits += 1;
        }
    }
    (hits + 1) as f64 / (permutations + 1) as f64
}

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, 9 coefficients; ~1e-15 relative).
fn ln_gamma(x: f64) -> f64 {
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1-x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// The regularized incomplete beta function I_x(a, b), by its continued fraction (modified
/// Lentz), using the symmetry I_x(a,b) = 1 - I_{1-x}(b,a) where the fraction converges slowly.
fn regularized_incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    if x < (a + 1.0) / (a + b + 2.0) {
        ln_front.exp() * beta_fraction(x, a, b) / a
    } else {
        1.0 - ln_front.exp() * beta_fraction(1.0 - x, b, a) / b
    }
}

fn beta_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    let mut c = 1.0f64;
    let mut d = 1.0 - (a + b) * x / (a + 1.0);
    if d.abs() < TINY {
        d = TINY;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..=500 {
        let m = m as f64;
        let m2 = 2.0 * m;
        // Even step.
        let num = m * (b - m) * x / ((a + m2 - 1.0) * (a + m2));
        d = 1.0 + num * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + num / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        h *= d * c;
        // Odd step.
        let num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0));
        d = 1.0 + num * d;
        if d.abs() < TINY {
            d = TINY;
        }
        c = 1.0 + num / c;
        if c.abs() < TINY {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_test_matches_scipy() {
        // scipy.stats.ttest_rel(a, b).pvalue
        let a = [0.1, 0.4, 0.35, 0.8, 0.5, 0.3];
        let b = [0.2, 0.5, 0.3, 0.9, 0.7, 0.35];
        let p = paired_t_test(&a, &b);
        assert!((p - 0.054_490_099_342_376_2).abs() < 1e-9, "{p}");
    }

    #[test]
    fn degenerate_t_tests() {
        assert_eq!(paired_t_test(&[0.5, 0.5], &[0.5, 0.5]), 1.0);
        assert_eq!(paired_t_test(&[0.1, 0.2], &[0.2, 0.3]), 0.0);
        assert_eq!(paired_t_test(&[0.1], &[0.2]), 1.0);
    }

    #[test]
    fn randomization_is_deterministic_and_sensible() {
        let a: Vec<f64> = (0..50).map(|i| (i % 7) as f64 / 7.0).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 0.1).collect();
        let p1 = randomization_test(&a, &b, 2000, 7);
        assert_eq!(p1, randomization_test(&a, &b, 2000, 7));
        assert!(p1 < 0.01, "{p1}");
        assert_eq!(randomization_test(&a, &a, 100, 1), 1.0);
    }

    #[test]
    fn incomplete_beta_known_values() {
        assert!((regularized_incomplete_beta(0.5, 2.0, 2.0) - 0.5).abs() < 1e-12);
        assert!((regularized_incomplete_beta(0.3, 1.0, 1.0) - 0.3).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
    }
}
