//! Python's `round(x, ndigits)` for floats, which the reference applies to every reported mean.
//!
//! Python rounds the exact binary value of `x` to `ndigits` decimals (ties, which need an
//! exactly representable half, go to even) and returns the nearest double to that decimal.
//! Rust's fixed-precision formatting is also exact with ties to even, so formatting and parsing
//! back gives the same double.

/// `round(value, ndigits)` as Python computes it. Non-finite values are returned unchanged.
pub fn py_round(value: f64, ndigits: usize) -> f64 {
    if !value.is_finite() {
        return value;
    }
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
        assert_eq!(py_round(0.12345, 4), 0.1235); // 0.12345 is above the tie in binary
        assert_eq!(py_round(1.0 / 3.0, 4), 0.3333);
        assert_eq!(py_round(-0.00004, 4), -0.0);
    }
}
