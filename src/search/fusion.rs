//! Fusing runs (paper §3.4): per question, each run's top `depth` documents are min-max
//! normalised and summed, a document missing from a run adding 0 (the reference's
//! `util.fusion`, method `normalized_sum`), or combined by reciprocal rank (RRF).
//!
//! Exactness with the reference: normalisation is `(s - min) / (max - min + 1e-8)` in f64, sums
//! run in run order, and documents enter the fused ranking in the reference's order (run by run,
//! each run by normalised score then doc id, both descending), so that after the final stable
//! sort by fused score, ties sit where the reference puts them. Differences, on purpose: each
//! run is sorted by score (doc id ascending on ties) before its top `depth` is taken (the
//! reference assumes sorted input), and fused scores keep full precision unless
//! [`FusionOptions::round_digits`] asks for the reference's 3-decimal rounding.

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::dataset::{Ranking, Run, ScoredDoc, score_key};
use crate::error::{Error, Result};

/// How per-run scores are combined.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FusionMethod {
    /// Min-max normalise each run's top-depth scores, then sum (the paper's fusion).
    NormalizedSum,
    /// Reciprocal rank fusion: `sum 1 / (k + rank)`, rank from 1 within each run's top depth.
    Rrf {
        /// The rank offset (60 in Cormack et al.).
        k: f64,
    },
}

/// Settings of [`fuse`].
#[derive(Debug, Clone, PartialEq)]
pub struct FusionOptions {
    /// Combination method.
    pub method: FusionMethod,
    /// Documents taken from each run per question (the paper: 100).
    pub depth: usize,
    /// Per-run weights (default all 1); must match the number of runs.
    pub weights: Option<Vec<f64>>,
    /// Round fused scores to this many decimals, as the reference does with 3 (creating ties).
    pub round_digits: Option<usize>,
}

impl Default for FusionOptions {
    fn default() -> Self {
        Self {
            method: FusionMethod::NormalizedSum,
            depth: 100,
            weights: None,
            round_digits: None,
        }
    }
}

/// The reference's normalisation guard: keeps a run whose scores are all equal at 0.
const NORMALIZATION_EPSILON: f64 = 1e-8;

/// Fuses `runs` into one run named `name`. Questions appear in order of first appearance across
/// the runs; each question's documents are sorted by fused score (descending, stable, before any
/// rounding).
pub fn fuse(runs: &[&Run], options: &FusionOptions, name: &str) -> Result<Run> {
    if runs.is_empty() {
        return Err(Error::invalid("runs", "nothing to fuse"));
    }
    if options.depth == 0 {
        return Err(Error::invalid("--depth", "must be at least 1"));
    }
    let weights = match &options.weights {
        Some(w) if w.len() != runs.len() => {
            return Err(Error::invalid(
                "--weights",
                format!("{} weights for {} runs", w.len(), runs.len()),
            ));
        }
        Some(w) if w.iter().any(|x| !x.is_finite()) => {
            return Err(Error::invalid(
                "--weights",
                "weights must be finite numbers",
            ));
        }
        Some(w) => w.clone(),
        None => vec![1.0; runs.len()],
    };
    let mut order: Vec<&str> = Vec::new();
    let mut seen: FxHashMap<&str, ()> = FxHashMap::default();
    for run in runs {
        for ranking in run.rankings() {
            if seen.insert(ranking.query_id.as_str(), ()).is_none() {
                order.push(ranking.query_id.as_str());
            }
        }
    }
    // Questions are independent: fused in parallel, added in order (deterministic).
    let per_query: Vec<Vec<ScoredDoc>> = order
        .par_iter()
        .map(|query_id| {
            let rankings: Vec<Option<&Ranking>> = runs.iter().map(|r| r.get(query_id)).collect();
            fuse_query(&rankings, &weights, options)
                .into_iter()
                .map(|(doc_id, score)| ScoredDoc {
                    doc_id: doc_id.to_string(),
                    score,
                })
                .collect()
        })
        .collect();
    let mut fused = Run::new(name);
    for (query_id, docs) in order.iter().zip(per_query) {
        fused.push_ranking(query_id, docs);
    }
    Ok(fused)
}

/// One question: the fused documents in final order.
fn fuse_query<'a>(
    rankings: &[Option<&'a Ranking>],
    weights: &[f64],
    options: &FusionOptions,
) -> Vec<(&'a str, f64)> {
    let mut position: FxHashMap<&str, usize> = FxHashMap::default();
    let mut docs: Vec<(&str, f64)> = Vec::new();
    for (ranking, weight) in rankings.iter().zip(weights) {
        let Some(ranking) = ranking else { continue };
        let top = top_depth(ranking, options.depth);
        let Some(first) = top.first() else { continue };
        let contributions: Vec<(f64, &str)> = match options.method {
            FusionMethod::NormalizedSum => {
                let (mut min, mut max) = (first.score, first.score);
                for doc in &top {
                    min = min.min(doc.score);
                    max = max.max(doc.score);
                }
                let span = max - min + NORMALIZATION_EPSILON;
                let mut normalised: Vec<(f64, &str)> = top
                    .iter()
                    .map(|d| ((d.score - min) / span, d.doc_id.as_str()))
                    .collect();
                // The reference visits `sorted(zip(scores, ids), reverse=True)`.
                normalised.sort_by(|a, b| {
                    score_key(b.0)
                        .total_cmp(&score_key(a.0))
                        .then_with(|| b.1.cmp(a.1))
                });
                normalised
            }
            FusionMethod::Rrf { k } => top
                .iter()
                .enumerate()
                .map(|(rank, d)| (1.0 / (k + rank as f64 + 1.0), d.doc_id.as_str()))
                .collect(),
        };
        for (score, doc_id) in contributions {
            let value = weight * score;
            match position.get(doc_id) {
                Some(&i) => docs[i].1 += value,
                None => {
                    position.insert(doc_id, docs.len());
                    docs.push((doc_id, value));
                }
            }
        }
    }
    // Sorted on full precision, then rounded: the reference's order among rounded ties.
    docs.sort_by(|a, b| score_key(b.1).total_cmp(&score_key(a.1)));
    if let Some(digits) = options.round_digits {
        for doc in &mut docs {
            doc.1 = round_half_even_decimal(doc.1, digits);
        }
    }
    docs
}

/// A ranking's top `depth` documents by score (ties: doc id ascending).
fn top_depth(ranking: &Ranking, depth: usize) -> Vec<&ScoredDoc> {
    if depth < ranking.docs.len() {
        let mut docs: Vec<&ScoredDoc> = ranking.docs.iter().collect();
        docs.select_nth_unstable_by(depth, |a, b| by_score_then_id(a, b));
        docs.truncate(depth);
        docs.sort_by(|a, b| by_score_then_id(a, b));
        return docs;
    }
    let mut docs: Vec<&ScoredDoc> = ranking.docs.iter().collect();
    docs.sort_by(|a, b| by_score_then_id(a, b));
    docs
}

/// Score descending, then doc id ascending: a total order, so the cut is deterministic.
fn by_score_then_id(a: &ScoredDoc, b: &ScoredDoc) -> std::cmp::Ordering {
    score_key(b.score)
        .total_cmp(&score_key(a.score))
        .then_with(|| a.doc_id.cmp(&b.doc_id))
}

/// Python's `round(x, digits)`: the correctly rounded decimal of the exact binary value, which
/// is what Rust's `{:.N}` formatting produces.
fn round_half_even_decimal(value: f64, digits: usize) -> f64 {
    if !value.is_finite() {
        return value;
    }
    format!("{value:.digits$}").parse().unwrap_or(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, rows: &[(&str, &str, f64)]) -> Run {
        let mut r = Run::new(name);
        for (q, d, s) in rows {
            r.push(q, d, *s);
        }
        r
    }

    fn scores(run: &Run, q: &str) -> Vec<(String, f64)> {
        run.get(q)
            .unwrap()
            .docs
            .iter()
            .map(|d| (d.doc_id.clone(), d.score))
            .collect()
    }

    #[test]
    fn normalized_sum_by_hand() {
        let a = run(
            "a",
            &[("q", "d1", 10.0), ("q", "d2", 5.0), ("q", "d3", 0.0)],
        );
        let b = run("b", &[("q", "d2", 0.9), ("q", "d4", 0.1)]);
        let fused = fuse(&[&a, &b], &FusionOptions::default(), "f").unwrap();
        let got = scores(&fused, "q");
        let span_a = 10.0 + 1e-8;
        let span_b = 0.8 + 1e-8;
        let expected = [
            ("d2", 5.0 / span_a + 0.8 / span_b),
            ("d1", 10.0 / span_a),
            ("d3", 0.0),
            ("d4", 0.0),
        ];
        assert_eq!(got.len(), 4);
        for ((doc, score), (edoc, escore)) in got.iter().zip(expected) {
            assert_eq!(doc, edoc);
            assert!((score - escore).abs() < 1e-12, "{doc}: {score} vs {escore}");
        }
    }

    #[test]
    fn depth_cuts_each_run_after_sorting() {
        // Unsorted input: the top 2 by score are d3 and d1.
        let a = run("a", &[("q", "d1", 2.0), ("q", "d2", 1.0), ("q", "d3", 3.0)]);
        let options = FusionOptions {
            depth: 2,
            ..FusionOptions::default()
        };
        let fused = fuse(&[&a], &options, "f").unwrap();
        let ids: Vec<String> = scores(&fused, "q").into_iter().map(|(d, _)| d).collect();
        assert_eq!(ids, ["d3", "d1"]);
    }

    #[test]
    fn rounding_ties_keep_reference_insertion_order() {
        // All equal scores normalise to 0: the reference inserts in (score, id) descending
        // order, so d3 before d2 before d1, then b's new doc d0.
        let a = run("a", &[("q", "d1", 1.0), ("q", "d2", 1.0), ("q", "d3", 1.0)]);
        let b = run("b", &[("q", "d0", 7.0)]);
        let options = FusionOptions {
            round_digits: Some(3),
            ..FusionOptions::default()
        };
        let fused = fuse(&[&a, &b], &options, "f").unwrap();
        let ids: Vec<String> = scores(&fused, "q").into_iter().map(|(d, _)| d).collect();
        assert_eq!(ids, ["d3", "d2", "d1", "d0"]);
        assert_eq!(round_half_even_decimal(0.12345, 3), 0.123);
        assert_eq!(round_half_even_decimal(2.675, 2), 2.67); // binary 2.67499...
    }

    #[test]
    fn rrf_and_weights() {
        let a = run("a", &[("q", "x", 3.0), ("q", "y", 2.0)]);
        let b = run("b", &[("q", "y", 9.0), ("q", "z", 1.0)]);
        let options = FusionOptions {
            method: FusionMethod::Rrf { k: 60.0 },
            weights: Some(vec![1.0, 2.0]),
            ..FusionOptions::default()
        };
        let fused = fuse(&[&a, &b], &options, "f").unwrap();
        let got = scores(&fused, "q");
        assert_eq!(got[0].0, "y");
        assert!((got[0].1 - (1.0 / 62.0 + 2.0 / 61.0)).abs() < 1e-12);
        assert!(fuse(&[&a], &options, "f").is_err(), "2 weights for 1 run");
    }

    #[test]
    fn questions_missing_from_some_runs() {
        let a = run("a", &[("q1", "d1", 1.0)]);
        let b = run("b", &[("q2", "d2", 1.0)]);
        let fused = fuse(&[&a, &b], &FusionOptions::default(), "f").unwrap();
        let order: Vec<&str> = fused
            .rankings()
            .iter()
            .map(|r| r.query_id.as_str())
            .collect();
        assert_eq!(order, ["q1", "q2"]);
        assert!(fuse(&[], &FusionOptions::default(), "f").is_err());
    }
}
