//! Agreement between annotators beyond chance: Cohen's kappa for two, Fleiss' kappa for more.
//! Used by calibration (annotators, a judge against reference labels) and by the judge stage
//! itself (a re-judged sample against the first verdicts).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, Serializer};

use super::py_round;

/// Serialises a fraction rounded to 4 decimals (`null` when undefined).
fn round4<S: Serializer>(value: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.serialize_f64(py_round(*v, 4)),
        None => s.serialize_none(),
    }
}

/// Cohen's or Fleiss' kappa over some items, with the agreements it is made of.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Kappa {
    /// Items every annotator labelled.
    pub items: usize,
    /// Observed agreement (Cohen's p_o, Fleiss' P-bar); undefined without items.
    #[serde(serialize_with = "round4")]
    pub observed: Option<f64>,
    /// Agreement expected by chance (Cohen's p_e, Fleiss' P-bar_e).
    #[serde(serialize_with = "round4")]
    pub expected: Option<f64>,
    /// (observed - expected) / (1 - expected): undefined without items or when chance agreement
    /// is 1 (every label the same category).
    #[serde(serialize_with = "round4")]
    pub kappa: Option<f64>,
}

impl Kappa {
    /// A kappa from its parts: `items` labelled, observed and chance agreement (undefined
    /// without items).
    pub fn from_agreements(items: usize, observed: f64, expected: f64) -> Self {
        if items == 0 {
            return Self {
                items,
                observed: None,
                expected: None,
                kappa: None,
            };
        }
        let kappa = (expected < 1.0 - 1e-12).then(|| (observed - expected) / (1.0 - expected));
        Self {
            items,
            observed: Some(observed),
            expected: Some(expected),
            kappa,
        }
    }
}

/// Cohen's kappa of two annotators' labels of the same items (`a[i]` and `b[i]` label item
/// `i`): p_o the share of items they agree on, p_e = Σ_k p_a(k) p_b(k) from each annotator's own
/// label shares.
pub fn cohen_kappa<T: Ord>(a: &[T], b: &[T]) -> Kappa {
    assert_eq!(a.len(), b.len(), "two labels per item");
    let n = a.len();
    if n == 0 {
        return Kappa::from_agreements(0, 0.0, 0.0);
    }
    let agree = a.iter().zip(b).filter(|(x, y)| x == y).count();
    let mut shares: BTreeMap<&T, (usize, usize)> = BTreeMap::new();
    for x in a {
        shares.entry(x).or_default().0 += 1;
    }
    for y in b {
        shares.entry(y).or_default().1 += 1;
    }
    let n_f = n as f64;
    let expected = shares
        .values()
        .map(|&(ca, cb)| (ca as f64 / n_f) * (cb as f64 / n_f))
        .sum();
    Kappa::from_agreements(n, agree as f64 / n_f, expected)
}

/// Fleiss' kappa from per-item category counts: `counts[i][j]` annotators put item `i` in
/// category `j`, every row summing to the same number of annotators (at least 2).
/// P_i = (Σ_j n_ij² - n) / (n (n - 1)), P-bar their mean; p_j = Σ_i n_ij / (N n),
/// P-bar_e = Σ_j p_j².
pub fn fleiss_kappa(counts: &[Vec<usize>]) -> Kappa {
    let items = counts.len();
    if items == 0 {
        return Kappa::from_agreements(0, 0.0, 0.0);
    }
    let raters: usize = counts[0].iter().sum();
    assert!(raters >= 2, "at least two annotators");
    assert!(
        counts.iter().all(|row| row.iter().sum::<usize>() == raters),
        "every item labelled by every annotator"
    );
    let categories = counts.iter().map(Vec::len).max().unwrap_or(0);
    let n = raters as f64;
    let observed = counts
        .iter()
        .map(|row| {
            let squares: usize = row.iter().map(|c| c * c).sum();
            (squares - raters) as f64 / (n * (n - 1.0))
        })
        .sum::<f64>()
        / items as f64;
    let total = items as f64 * n;
    let expected = (0..categories)
        .map(|j| {
            let p = counts
                .iter()
                .map(|row| row.get(j).copied().unwrap_or(0))
                .sum::<usize>() as f64
                / total;
            p * p
        })
        .sum();
    Kappa::from_agreements(items, observed, expected)
}

/// [`fleiss_kappa`] of labels: `labels[i]` holds every annotator's label of item `i`.
pub fn fleiss_kappa_of_labels<T: Ord>(labels: &[Vec<T>]) -> Kappa {
    let categories: BTreeSet<&T> = labels.iter().flatten().collect();
    let categories: Vec<&T> = categories.into_iter().collect();
    let counts: Vec<Vec<usize>> = labels
        .iter()
        .map(|item| {
            categories
                .iter()
                .map(|c| item.iter().filter(|l| l == c).count())
                .collect()
        })
        .collect();
    fleiss_kappa(&counts)
}
