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

use crate::dataset::{DocRef, Rankings, Run, ScoredDoc, py_round, score_key};
use crate::error::{Error, Result, Setting};

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

/// Fused rankings whose document ids borrow from the input runs (as the reference's fused dicts
/// share the input's strings). Write them with
/// [`write_trec_rankings`](crate::dataset::write_trec_rankings) or copy them into a [`Run`] with
/// [`Fused::to_run`].
#[derive(Debug, Clone)]
pub struct Fused<'a> {
    name: String,
    queries: Vec<(&'a str, Vec<DocRef<'a>>)>,
}

impl<'a> Fused<'a> {
    /// Number of questions.
    pub fn len(&self) -> usize {
        self.queries.len()
    }

    /// True when no question was fused.
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }

    /// Question ids and fused documents (best first), questions in order of first appearance.
    pub fn rankings(&self) -> &[(&'a str, Vec<DocRef<'a>>)] {
        &self.queries
    }

    /// An owned run with the same rankings (strings built in parallel).
    pub fn to_run(&self) -> Run {
        let mut run = Run::new(self.name.clone());
        let rankings: Vec<Vec<ScoredDoc>> = self
            .queries
            .par_iter()
            .map(|(_, docs)| {
                docs.iter()
                    .map(|d| ScoredDoc {
                        doc_id: d.doc_id.to_string(),
                        score: d.score,
                    })
                    .collect()
            })
            .collect();
        for ((query_id, _), docs) in self.queries.iter().zip(rankings) {
            run.push_ranking(query_id, docs);
        }
        run
    }
}

impl Rankings for Fused<'_> {
    fn run_name(&self) -> &str {
        &self.name
    }
    fn num_rankings(&self) -> usize {
        self.queries.len()
    }
    fn ranking_query_id(&self, index: usize) -> &str {
        self.queries[index].0
    }
    fn ranking_docs(&self, index: usize) -> Vec<DocRef<'_>> {
        self.queries[index].1.clone()
    }
    fn find_query(&self, query_id: &str) -> Option<usize> {
        self.queries.iter().position(|(q, _)| *q == query_id)
    }
}

/// Fuses `runs` into one run named `name`. Questions appear in order of first appearance across
/// the runs; each question's documents are sorted by fused score (descending, stable, before any
/// rounding).
pub fn fuse(runs: &[&Run], options: &FusionOptions, name: &str) -> Result<Run> {
    Ok(fuse_rankings(runs, options, name)?.to_run())
}

/// [`fuse`] over any [`Rankings`] (for example [`RunFile`](crate::dataset::RunFile)s), without
/// copying document ids.
pub fn fuse_rankings<'a, R: Rankings + ?Sized>(
    runs: &[&'a R],
    options: &FusionOptions,
    name: &str,
) -> Result<Fused<'a>> {
    if runs.is_empty() {
        return Err(Error::invalid(Setting::Runs, "nothing to fuse"));
    }
    if options.depth == 0 {
        return Err(Error::invalid(Setting::FusionDepth, "must be at least 1"));
    }
    let weights = match &options.weights {
        Some(w) if w.len() != runs.len() => {
            return Err(Error::invalid(
                Setting::FusionWeights,
                format!("{} weights for {} runs", w.len(), runs.len()),
            ));
        }
        // Every fused score is at most the sum of the weights' sizes (each run's scores are
        // normalised to [0, 1], RRF's are below 1): a finite sum keeps every score finite.
        Some(w) if !w.iter().map(|x| x.abs()).sum::<f64>().is_finite() => {
            return Err(Error::invalid(
                Setting::FusionWeights,
                "weights must be finite numbers whose sizes sum to a finite number",
            ));
        }
        Some(w) => w.clone(),
        None => vec![1.0; runs.len()],
    };
    if let FusionMethod::Rrf { k } = options.method
        && !(k.is_finite() && k >= 0.0)
    {
        // 1 / (k + rank) with rank from 1: k <= -1 divides by zero or turns the order around.
        return Err(Error::invalid(
            Setting::RrfK,
            format!("{k}: must be a finite number >= 0"),
        ));
    }
    // Questions in order of first appearance, each with its ranking index in every run.
    let mut order: Vec<(&'a str, Vec<Option<usize>>)> = Vec::new();
    let mut seen: FxHashMap<&str, ()> = FxHashMap::default();
    for (ri, run) in runs.iter().enumerate() {
        for i in 0..run.num_rankings() {
            let query_id = run.ranking_query_id(i);
            if seen.insert(query_id, ()).is_none() {
                let mut at = vec![None; runs.len()];
                at[ri] = Some(i);
                for (rj, other) in runs.iter().enumerate().skip(ri + 1) {
                    at[rj] = other.find_query(query_id);
                }
                order.push((query_id, at));
            }
        }
    }
    // Questions are independent: fused in parallel, kept in order (deterministic), each thread
    // reusing its buffers.
    let queries: Vec<(&'a str, Vec<DocRef<'a>>)> = order
        .par_iter()
        .map_init(Scratch::default, |scratch, (query_id, at)| {
            fuse_query(runs, at, &weights, options, scratch)
                .map(|docs| (*query_id, docs))
                .map_err(|(run, doc_id, score)| {
                    Error::invalid(
                        Setting::Runs,
                        format!(
                            "run {}: question {query_id:?}, document {doc_id:?}: score {score} is \
                             not finite; normalized-sum fusion needs finite scores (RRF uses \
                             ranks only)",
                            runs[run].run_name()
                        ),
                    )
                })
        })
        .collect::<Result<_>>()?;
    Ok(Fused {
        name: name.to_string(),
        queries,
    })
}

/// Per-thread buffers of [`fuse_query`], reused across questions.
#[derive(Default)]
struct Scratch<'a> {
    top: Vec<DocRef<'a>>,
    docs: Vec<DocRef<'a>>,
    keyed: Vec<u128>,
    position: FxHashMap<&'a str, u32>,
}

/// One question (ranking `at[r]` of run `r`, if any): the fused documents in final order, or,
/// for normalized-sum fusion, the first infinite score among a run's top `depth` (the run's
/// index, the document and the score): min-max normalisation would make it NaN.
fn fuse_query<'a, R: Rankings + ?Sized>(
    runs: &[&'a R],
    at: &[Option<usize>],
    weights: &[f64],
    options: &FusionOptions,
    scratch: &mut Scratch<'a>,
) -> std::result::Result<Vec<DocRef<'a>>, (usize, &'a str, f64)> {
    let Scratch {
        top,
        docs,
        keyed,
        position,
    } = scratch;
    position.clear();
    docs.clear();
    for (ri, ((index, run), weight)) in at.iter().zip(runs).zip(weights).enumerate() {
        let Some(index) = *index else { continue };
        top.clear();
        run.extend_ranking_docs(index, top);
        top_depth(top, options.depth);
        let Some(first) = top.first() else { continue };
        match options.method {
            FusionMethod::NormalizedSum => {
                if let Some(bad) = top.iter().find(|d| !d.score.is_finite()) {
                    return Err((ri, bad.doc_id, bad.score));
                }
                let (mut min, mut max) = (first.score, first.score);
                for doc in top.iter() {
                    min = min.min(doc.score);
                    max = max.max(doc.score);
                }
                let span = max - min + NORMALIZATION_EPSILON;
                if span.is_finite() {
                    for d in top.iter_mut() {
                        d.score = (d.score - min) / span;
                    }
                } else {
                    // max - min overflows (scores near +-f64::MAX) and would give inf / inf =
                    // NaN: the same ratio over halves, which cannot overflow.
                    let half_span = max / 2.0 - min / 2.0 + NORMALIZATION_EPSILON / 2.0;
                    for d in top.iter_mut() {
                        d.score = (d.score / 2.0 - min / 2.0) / half_span;
                    }
                }
                // The reference visits `sorted(zip(scores, ids), reverse=True)`. The top is
                // already by score (and normalising keeps that order), so only runs of tied
                // scores change: they go by id, descending.
                if span.is_finite() {
                    order_ties_by_id_descending(top);
                } else {
                    top.sort_by(|a, b| {
                        score_key(b.score)
                            .total_cmp(&score_key(a.score))
                            .then_with(|| b.doc_id.cmp(a.doc_id))
                    });
                }
            }
            FusionMethod::Rrf { k } => {
                for (rank, d) in top.iter_mut().enumerate() {
                    d.score = 1.0 / (k + rank as f64 + 1.0);
                }
            }
        }
        for c in top.iter() {
            let value = weight * c.score;
            match position.entry(c.doc_id) {
                std::collections::hash_map::Entry::Occupied(i) => {
                    docs[*i.get() as usize].score += value
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(docs.len() as u32);
                    docs.push(DocRef {
                        doc_id: c.doc_id,
                        score: value,
                    });
                }
            }
        }
    }
    // Sorted on full precision, then rounded: the reference's order among rounded ties. A
    // stable sort by score descending, done as an unstable sort of (key, position) integers.
    keyed.clear();
    keyed.extend(
        docs.iter()
            .enumerate()
            .map(|(i, d)| u128::from(descending_key(d.score)) << 64 | i as u128),
    );
    keyed.sort_unstable();
    let mut fused: Vec<DocRef<'a>> = keyed.iter().map(|&k| docs[k as u64 as usize]).collect();
    if let Some(digits) = options.round_digits {
        for doc in &mut fused {
            doc.score = py_round(doc.score, digits);
        }
    }
    Ok(fused)
}

/// Sorts each run of equal scores (`score_key`) of `docs`, a list ordered by score, by doc id
/// descending.
fn order_ties_by_id_descending(docs: &mut [DocRef<'_>]) {
    let mut start = 0;
    while start < docs.len() {
        let key = score_key(docs[start].score);
        let mut end = start + 1;
        while end < docs.len() && score_key(docs[end].score) == key {
            end += 1;
        }
        if end - start > 1 {
            docs[start..end].sort_unstable_by(|a, b| b.doc_id.cmp(a.doc_id));
        }
        start = end;
    }
}

/// Cuts a ranking to its top `depth` documents by score (ties: doc id ascending). Input already
/// in that order (the usual run file) is only cut.
fn top_depth(docs: &mut Vec<DocRef<'_>>, depth: usize) {
    let sorted = docs
        .windows(2)
        .all(|w| by_score_then_id(&w[0], &w[1]) != std::cmp::Ordering::Greater);
    if !sorted {
        if depth < docs.len() {
            docs.select_nth_unstable_by(depth, by_score_then_id);
            docs.truncate(depth);
        }
        docs.sort_by(by_score_then_id);
    }
    docs.truncate(depth);
}

/// An integer that sorts ascending as `score_key(score)` sorts descending under `total_cmp`.
fn descending_key(score: f64) -> u64 {
    let bits = score_key(score).to_bits();
    let ascending = if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    };
    !ascending
}

/// Score descending, then doc id ascending: a total order, so the cut is deterministic.
fn by_score_then_id(a: &DocRef<'_>, b: &DocRef<'_>) -> std::cmp::Ordering {
    score_key(b.score)
        .total_cmp(&score_key(a.score))
        .then_with(|| a.doc_id.cmp(b.doc_id))
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
    fn fuse_infinite_scores_are_rejected_not_written_as_nan() {
        let a = run("a", &[("q", "d1", f64::INFINITY), ("q", "d2", 1.0)]);
        let b = run("b", &[("q", "d2", 0.5)]);
        let err = fuse(&[&b, &a], &FusionOptions::default(), "f")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run a") && err.contains("\"d1\"") && err.contains("inf"),
            "{err}"
        );
        // Beyond the depth it plays no part; RRF uses ranks only.
        let low = run("low", &[("q", "d1", 1.0), ("q", "d2", f64::NEG_INFINITY)]);
        let options = FusionOptions {
            depth: 1,
            ..FusionOptions::default()
        };
        assert!(fuse(&[&low, &b], &options, "f").is_ok());
        let rrf = FusionOptions {
            method: FusionMethod::Rrf { k: 60.0 },
            ..FusionOptions::default()
        };
        let fused = fuse(&[&a, &b], &rrf, "f").unwrap();
        assert!(scores(&fused, "q").iter().all(|(_, s)| s.is_finite()));
        // Finite scores whose span overflows still normalise to [0, 1].
        let wide = run(
            "w",
            &[
                ("q", "d1", f64::MAX),
                ("q", "d2", 0.0),
                ("q", "d3", -f64::MAX),
            ],
        );
        let fused = fuse(&[&wide], &FusionOptions::default(), "f").unwrap();
        let got = scores(&fused, "q");
        assert_eq!(got[0].0, "d1");
        assert!(
            got.iter()
                .all(|(_, s)| s.is_finite() && (0.0..=1.0).contains(s)),
            "{got:?}"
        );
        assert!((got[1].1 - 0.5).abs() < 1e-12, "{got:?}");
    }

    #[test]
    fn rrf_k_must_be_finite_and_not_negative() {
        let a = run("a", &[("q", "d1", 1.0)]);
        for k in [-1.0, -0.5, f64::INFINITY, f64::NAN] {
            let options = FusionOptions {
                method: FusionMethod::Rrf { k },
                ..FusionOptions::default()
            };
            let err = fuse(&[&a], &options, "f").unwrap_err().to_string();
            assert!(err.contains("invalid rrf k"), "{err}");
        }
        let options = FusionOptions {
            method: FusionMethod::Rrf { k: 0.0 },
            ..FusionOptions::default()
        };
        let fused = fuse(&[&a], &options, "f").unwrap();
        assert_eq!(scores(&fused, "q"), [("d1".to_string(), 1.0)]);
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
    }

    #[test]
    fn descending_key_orders_like_total_cmp() {
        let values = [
            f64::NEG_INFINITY,
            -3.5,
            -1e-300,
            -0.0,
            0.0,
            5e-324,
            0.25,
            1.0,
            1e300,
            f64::INFINITY,
        ];
        for a in values {
            for b in values {
                let expected = score_key(b).total_cmp(&score_key(a));
                assert_eq!(
                    descending_key(a).cmp(&descending_key(b)),
                    expected,
                    "{a} {b}"
                );
            }
        }
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
    fn weights_whose_sum_overflows_are_refused_for_every_method() {
        let a = run("a", &[("q", "x", 3.0), ("q", "y", 2.0)]);
        let b = run("b", &[("q", "y", 9.0), ("q", "z", 1.0)]);
        for method in [
            FusionMethod::Rrf { k: 60.0 },
            FusionOptions::default().method,
        ] {
            for weights in [
                vec![1e308, 1e308],
                vec![f64::NAN, 1.0],
                vec![1.0, f64::INFINITY],
            ] {
                let options = FusionOptions {
                    method,
                    weights: Some(weights.clone()),
                    ..FusionOptions::default()
                };
                let err = fuse(&[&a, &b], &options, "f").unwrap_err().to_string();
                assert!(err.contains("fusion weights"), "{weights:?}: {err}");
            }
            let options = FusionOptions {
                method,
                weights: Some(vec![1e300, 1e300]),
                ..FusionOptions::default()
            };
            let fused = fuse(&[&a, &b], &options, "f").unwrap();
            assert!(scores(&fused, "q").iter().all(|(_, s)| s.is_finite()));
        }
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
