//! Python's `round(x, ndigits)` for floats, which the reference applies to reported means and
//! to fused scores.
//!
//! Python rounds the exact binary value of `x` to `ndigits` decimals (ties, which need an
//! exactly representable half, go to even) and returns the nearest double to that decimal.

/// 2^52: below it, a double's fraction part is exact and integers are exact.
const TWO_POW_52: f64 = 4_503_599_627_370_496.0;

const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// `round(value, ndigits)` as Python computes it. Non-finite values are returned unchanged.
///
/// Fast path: with `s = 10^ndigits` (exact) and `|x| s < 2^52`, the product `p = fl(|x| s)` and
/// its exact error `e = fma(|x|, s, -p)` give the exact `|x| s = p + e`; its integer part and
/// whether it lies above, below or on the half follow from `p - floor(p)` (exact) and the sign of
/// `e`. The rounded integer `m` and `s` are exact doubles, so `m / s` is the nearest double to
/// the decimal, as Python returns. Otherwise: Rust's exact fixed-precision formatting (also ties
/// to even) parsed back.
pub fn py_round(value: f64, ndigits: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has FMA (checked just above; the check is cached).
            return unsafe { py_round_fma(value, ndigits) };
        }
    }
    py_round_portable(value, ndigits)
}

/// [`py_round`] with the hardware fused multiply-add (without it, `mul_add` is a slow library
/// call); the fma is exact either way, so the results are the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "fma")]
fn py_round_fma(value: f64, ndigits: usize) -> f64 {
    py_round_portable(value, ndigits)
}

#[inline(always)]
fn py_round_portable(value: f64, ndigits: usize) -> f64 {
    if !value.is_finite() {
        return value;
    }
    if let Some(&scale) = POW10.get(ndigits) {
        let a = value.abs();
        let p = a * scale;
        if p < TWO_POW_52 {
            let e = a.mul_add(scale, -p);
            // `p` is in [0, 2^52): truncating is `floor`, without a libm call.
            let n = (p as u64) as f64;
            let f = p - n;
            let up = f > 0.5 || (f == 0.5 && (e > 0.0 || (e == 0.0 && n % 2.0 == 1.0)));
            let m = if up { n + 1.0 } else { n };
            return (m / scale).copysign(value);
        }
    }
    format_round(value, ndigits)
}

/// The reference implementation of [`py_round`]: format with `ndigits` decimals, parse back.
fn format_round(value: f64, ndigits: usize) -> f64 {
    let text = format!("{value:.ndigits$}");
    // The formatted text of a finite double always parses; fall back to the input otherwise.
    text.parse::<f64>().unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_on_ties_and_near_ties() {
        // Values checked with CPython 3.11.
        assert_eq!(py_round(0.015625, 5), 0.01562); // exact tie -> even
        assert_eq!(py_round(0.046875, 5), 0.04688); // exact tie -> even
        assert_eq!(py_round(2.675, 2), 2.67); // 2.675 is below the tie in binary
        assert_eq!(py_round(0.5, 0), 0.0);
        assert_eq!(py_round(1.5, 0), 2.0);
        assert_eq!(py_round(2.5, 0), 2.0);
        assert_eq!(py_round(0.12345, 4), 0.1235); // 0.12345 is above the tie in binary
        assert_eq!(py_round(1.0 / 3.0, 4), 0.3333);
        assert_eq!(py_round(-0.00004, 4).to_bits(), (-0.0f64).to_bits());
        assert_eq!(py_round(0.0005, 3), 0.001); // 0.0005 is above the tie in binary
        assert_eq!(py_round(1e300, 3), 1e300);
        assert_eq!(py_round(5e-324, 3), 0.0);
        assert!(py_round(f64::NAN, 3).is_nan());
    }

    /// Decimal halves and their neighbours, where a shortcut would go wrong first.
    #[test]
    fn near_halves_equal_the_exact_rounding() {
        for (digits, scale) in POW10.iter().enumerate().take(8) {
            for k in 0..20_000u64 {
                let half = (2 * k + 1) as f64 / (2.0 * scale);
                for x in [half, half.next_up(), half.next_down(), -half] {
                    assert_eq!(
                        py_round(x, digits).to_bits(),
                        format_round(x, digits).to_bits(),
                        "round({x:e}, {digits})"
                    );
                }
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn fast_path_equals_exact_formatting(bits in proptest::num::u64::ANY, digits in 0usize..25) {
            let x = f64::from_bits(bits);
            proptest::prop_assume!(x.is_finite());
            proptest::prop_assert_eq!(py_round(x, digits).to_bits(), format_round(x, digits).to_bits());
        }

        #[test]
        fn fast_path_equals_exact_formatting_on_scores(x in -1000.0f64..1000.0, digits in 0usize..8) {
            proptest::prop_assert_eq!(py_round(x, digits).to_bits(), format_round(x, digits).to_bits());
        }
    }
}
