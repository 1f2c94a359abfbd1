//! Python's `round(x, ndigits)`, which the reference applies to every reported mean (defined in
//! `dataset`, where fusion uses it too).

pub use crate::dataset::py_round;
