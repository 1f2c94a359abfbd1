//! Per-question metric values, each with the reference's own ordering of tied scores:
//!
//! - *stable* (score descending, ties in input order: Python's `sorted`): Coverage, Hole,
//!   Judged, and the cut of the run before alpha-nDCG;
//! - *ndeval* (score descending, then doc id ascending: pyndeval's run sort): alpha-nDCG inside
//!   the cut;
//! - *trec_eval* (score as a 32-bit float descending, then doc id descending: pytrec_eval's
//!   `float sim` and `comp_sim_docno`): Recall, nDCG, P, MRR.
//!
//! The arithmetic of alpha-nDCG follows ndeval.c v4.5 step by step (cumulative gains divided by
//! the "ideal ideal" before dividing by the ideal), so values are identical to the last bit.

use std::cmp::Ordering;

use super::judgments::QueryJudgmentIndex;
use crate::dataset::{DocRef, score_key};

/// The first `min(depth, n)` of `0..n` in the order `cmp` (a total order), in that order.
pub(crate) fn top_by<F>(n: usize, depth: usize, mut cmp: F) -> Vec<u32>
where
    F: FnMut(u32, u32) -> Ordering,
{
    let mut idx: Vec<u32> = (0..n as u32).collect();
    let depth = depth.min(n);
    if depth == 0 {
        return Vec::new();
    }
    if depth < n {
        idx.select_nth_unstable_by(depth - 1, |&a, &b| cmp(a, b));
        idx.truncate(depth);
    }
    idx.sort_unstable_by(|&a, &b| cmp(a, b));
    idx
}

/// True when the scores never increase (by [`score_key`]) and none is NaN: the usual shape of
/// a run file, which lets the orders below skip their selection.
pub(crate) fn is_sorted_by_score(docs: &[DocRef<'_>]) -> bool {
    docs.iter().all(|d| !d.score.is_nan())
        && docs
            .windows(2)
            .all(|w| score_key(w[0].score) >= score_key(w[1].score))
}

/// Python's stable `sorted(..., key=score, reverse=True)`: score descending, input order.
/// `sorted` says the documents already are in that order ([`is_sorted_by_score`]).
pub(crate) fn stable_order(docs: &[DocRef<'_>], depth: usize, sorted: bool) -> Vec<u32> {
    if sorted {
        return (0..depth.min(docs.len()) as u32).collect();
    }
    top_by(docs.len(), depth, |a, b| {
        score_key(docs[b as usize].score)
            .total_cmp(&score_key(docs[a as usize].score))
            .then(a.cmp(&b))
    })
}

/// trec_eval's order: the score as `float` descending, then doc id descending (bytewise).
/// With `sorted` input only the first `depth` and the documents tied with the last of them (as
/// floats) are ordered.
pub(crate) fn trec_order(docs: &[DocRef<'_>], depth: usize, sorted: bool) -> Vec<u32> {
    let cmp = |a: u32, b: u32| {
        let (da, db) = (&docs[a as usize], &docs[b as usize]);
        let (sa, sb) = (trec_sim(da.score), trec_sim(db.score));
        sb.total_cmp(&sa)
            .then_with(|| db.doc_id.as_bytes().cmp(da.doc_id.as_bytes()))
    };
    if sorted {
        // Rounding to f32 keeps the order (weakly), so only ties need sorting.
        let depth = depth.min(docs.len());
        if depth == 0 {
            return Vec::new();
        }
        let last = trec_sim(docs[depth - 1].score);
        let mut end = depth;
        while end < docs.len() && trec_sim(docs[end].score) == last {
            end += 1;
        }
        let mut idx: Vec<u32> = (0..end as u32).collect();
        idx.sort_unstable_by(|&a, &b| cmp(a, b));
        idx.truncate(depth);
        return idx;
    }
    top_by(docs.len(), depth, cmp)
}

fn trec_sim(score: f64) -> f32 {
    let s = score as f32;
    if s == 0.0 { 0.0 } else { s }
}

/// pyndeval's re-sort of the (already cut) run: score descending, then doc id ascending.
pub(crate) fn ndeval_order(docs: &[DocRef<'_>], cut: &[u32]) -> Vec<u32> {
    let mut out = cut.to_vec();
    out.sort_unstable_by(|&a, &b| {
        let (da, db) = (&docs[a as usize], &docs[b as usize]);
        score_key(db.score)
            .total_cmp(&score_key(da.score))
            .then_with(|| da.doc_id.as_bytes().cmp(db.doc_id.as_bytes()))
    });
    out
}

/// ndeval's rank discount for 0-based rank `i`: 1 at the top, else `log(2)/log(i+2)` (computed
/// as ndeval does, not as `1/log2(i+2)`, which can differ in the last bit).
fn discount(i: usize) -> f64 {
    if i == 0 {
        1.0
    } else {
        2.0f64.ln() / ((i as f64) + 2.0).ln()
    }
}

/// ndeval's `computeDCG`: for the ranked documents (each given by the nuggets it supports),
/// cumulative alpha-DCG at depths `1..=depth`, divided by the "ideal ideal" from depth 2 on.
/// `supported_nuggets` is the number of nuggets with at least one supporting document; with
/// none, every value is 0.
pub(crate) fn alpha_dcg_curve<'a, I>(
    ranked: I,
    num_nuggets: usize,
    supported_nuggets: usize,
    depth: usize,
    alpha: f64,
) -> Vec<f64>
where
    I: IntoIterator<Item = Option<&'a [u32]>>,
{
    let mut dcg = vec![0.0f64; depth];
    if supported_nuggets == 0 || depth == 0 {
        return dcg;
    }
    let mut nugget_gain = vec![1.0f64; num_nuggets];
    for (i, supports) in ranked.into_iter().take(depth).enumerate() {
        let mut score = 0.0f64;
        for &j in supports.unwrap_or(&[]) {
            score += nugget_gain[j as usize];
            nugget_gain[j as usize] *= 1.0 - alpha;
        }
        dcg[i] = score * discount(i);
    }
    let mut ideal_ideal = vec![0.0f64; depth];
    let mut gain = supported_nuggets as f64;
    for (i, slot) in ideal_ideal.iter_mut().enumerate() {
        *slot = gain * discount(i);
        gain *= 1.0 - alpha;
    }
    for i in 1..depth {
        dcg[i] += dcg[i - 1];
        ideal_ideal[i] += ideal_ideal[i - 1];
    }
    for i in 1..depth {
        dcg[i] /= ideal_ideal[i];
    }
    dcg
}

/// ndeval's greedy ideal ranking over the judged pool, first `depth` picks: at each rank the
/// document with the largest marginal gain; equal gains go to the larger doc id (`strcmp`).
/// Stops early once no document has any gain left (those picks add 0 to the curve).
pub(crate) fn alpha_ideal_order(q: &QueryJudgmentIndex, depth: usize, alpha: f64) -> Vec<u32> {
    let pool = &q.pool_sorted;
    let mut taken = vec![false; pool.len()];
    let mut nugget_gain = vec![1.0f64; q.num_nuggets];
    let mut order = Vec::with_capacity(depth.min(pool.len()));
    for _ in 0..depth.min(pool.len()) {
        let mut best: Option<(usize, f64)> = None;
        for (pi, &di) in pool.iter().enumerate() {
            if taken[pi] {
                continue;
            }
            let mut score = 0.0f64;
            for &j in &q.doc_judgments[di as usize].supports {
                score += nugget_gain[j as usize];
            }
            // The pool is in ascending doc id order, so `>=` hands ties to the larger id.
            if best.is_none_or(|(_, s)| score >= s) {
                best = Some((pi, score));
            }
        }
        // A best gain of 0 means no document left supports any nugget: the rest of the ideal
        // ranking adds nothing to the curve, whatever its order.
        let Some((pi, _)) = best.filter(|&(_, gain)| gain > 0.0) else {
            break;
        };
        taken[pi] = true;
        let di = pool[pi];
        for &j in &q.doc_judgments[di as usize].supports {
            nugget_gain[j as usize] *= 1.0 - alpha;
        }
        order.push(di);
    }
    order
}

/// The ideal alpha-DCG curve of a question to `depth`.
pub(crate) fn alpha_ideal_curve(q: &QueryJudgmentIndex, depth: usize, alpha: f64) -> Vec<f64> {
    let order = alpha_ideal_order(q, depth, alpha);
    alpha_dcg_curve(
        order
            .iter()
            .map(|&di| Some(q.doc_judgments[di as usize].supports.as_slice())),
        q.num_nuggets,
        q.num_supported_nuggets,
        depth,
        alpha,
    )
}

/// alpha-nDCG at `k` from a run curve and an ideal curve (ndeval's `renormalize`).
pub(crate) fn alpha_ndcg_at(run: &[f64], ideal: &[f64], k: usize) -> f64 {
    match (run.get(k - 1), ideal.get(k - 1)) {
        (Some(&r), Some(&i)) if r != 0.0 => r / i,
        _ => 0.0,
    }
}

/// For each nugget, the 0-based rank of its first supporting document among `ranked`
/// (`usize::MAX` when none): Coverage@k counts the nuggets with a rank below k.
pub(crate) fn first_cover_ranks(
    q: &QueryJudgmentIndex,
    docs: &[DocRef<'_>],
    ranked: &[u32],
) -> Vec<usize> {
    let mut first = vec![usize::MAX; q.num_nuggets];
    for (rank, &i) in ranked.iter().enumerate() {
        if let Some(j) = q.judgment(docs[i as usize].doc_id) {
            for &n in &j.supports {
                let slot = &mut first[n as usize];
                if *slot == usize::MAX {
                    *slot = rank;
                }
            }
        }
    }
    first
}

/// Query-level labels of the documents in `ranked` (judged-for-nothing documents: `None`).
pub(crate) fn query_labels(
    q: &QueryJudgmentIndex,
    docs: &[DocRef<'_>],
    ranked: &[u32],
) -> Vec<Option<i64>> {
    ranked
        .iter()
        .map(|&i| q.judgment(docs[i as usize].doc_id).map(|j| j.query_label))
        .collect()
}

/// trec_eval `recall.k`: relevant (label >= 1) in the top k over all relevant; 0 without any.
pub(crate) fn recall_at(labels: &[Option<i64>], num_relevant: usize, k: usize) -> f64 {
    if num_relevant == 0 {
        return 0.0;
    }
    let found = labels
        .iter()
        .take(k)
        .filter(|l| l.is_some_and(|v| v >= 1))
        .count();
    found as f64 / num_relevant as f64
}

/// trec_eval `P.k`: relevant in the top k over k (also when fewer were retrieved).
pub(crate) fn precision_at(labels: &[Option<i64>], k: usize) -> f64 {
    let found = labels
        .iter()
        .take(k)
        .filter(|l| l.is_some_and(|v| v >= 1))
        .count();
    found as f64 / k as f64
}

/// trec_eval `recip_rank` cut at k: 1 / rank of the first relevant document in the top k.
pub(crate) fn mrr_at(labels: &[Option<i64>], k: usize) -> f64 {
    labels
        .iter()
        .take(k)
        .position(|l| l.is_some_and(|v| v >= 1))
        .map_or(0.0, |i| 1.0 / (i + 1) as f64)
}

/// trec_eval `ndcg_cut.k` with the query-level label (number of supported nuggets) as gain.
pub(crate) fn ndcg_at(labels: &[Option<i64>], ideal_labels: &[i64], k: usize) -> f64 {
    let mut dcg = 0.0f64;
    for (i, label) in labels.iter().take(k).enumerate() {
        if let Some(gain) = label.filter(|&g| g > 0) {
            dcg += gain as f64 / ((i + 2) as f64).log2();
        }
    }
    let mut ideal = 0.0f64;
    for (i, &gain) in ideal_labels.iter().take(k).enumerate() {
        ideal += gain as f64 / ((i + 2) as f64).log2();
    }
    if ideal > 0.0 { dcg / ideal } else { dcg }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;

    fn docs<'a>(list: &[(&'a str, f64)]) -> Vec<DocRef<'a>> {
        list.iter()
            .map(|&(doc_id, score)| DocRef { doc_id, score })
            .collect()
    }

    #[test]
    fn the_three_tie_rules() {
        let d = docs(&[("b", 1.0), ("c", 2.0), ("a", 1.0), ("d", 1.0)]);
        assert!(!is_sorted_by_score(&d));
        assert_eq!(stable_order(&d, 10, false), vec![1, 0, 2, 3]);
        assert_eq!(stable_order(&d, 2, false), vec![1, 0]);
        assert_eq!(trec_order(&d, 10, false), vec![1, 3, 0, 2]);
        assert_eq!(ndeval_order(&d, &stable_order(&d, 3, false)), vec![1, 2, 0]);
        // 32-bit floats make close scores ties for trec_eval.
        let d = docs(&[("a", 1.000_000_000_1), ("b", 1.0)]);
        assert!(is_sorted_by_score(&d));
        for sorted in [false, true] {
            assert_eq!(trec_order(&d, 2, sorted), vec![1, 0]);
            assert_eq!(trec_order(&d, 1, sorted), vec![1]);
            assert_eq!(stable_order(&d, 2, sorted), vec![0, 1]);
        }
    }

    proptest::proptest! {
        /// On input sorted by score, the shortcuts give the general orders.
        #[test]
        fn sorted_shortcuts_equal_the_general_orders(
            mut scores in proptest::collection::vec(
                proptest::prop_oneof![
                    (0u8..6).prop_map(|s| f64::from(s) / 2.0),
                    proptest::num::f64::NORMAL,
                    proptest::strategy::Just(-0.0),
                    proptest::strategy::Just(1.000_000_000_1),
                    proptest::strategy::Just(1.0),
                ],
                0..40,
            ),
            // Distinct ids, as in a ranking.
            ids in proptest::strategy::Just((0..40).collect::<Vec<u8>>()).prop_shuffle(),
            depth in 0usize..45,
        ) {
            scores.sort_by(|a, b| score_key(*b).total_cmp(&score_key(*a)));
            let names: Vec<String> = ids.iter().map(|i| format!("d{i}")).collect();
            let d: Vec<DocRef> = scores
                .iter()
                .zip(&names)
                .map(|(&score, id)| DocRef { doc_id: id, score })
                .collect();
            proptest::prop_assert!(is_sorted_by_score(&d));
            proptest::prop_assert_eq!(stable_order(&d, depth, true), stable_order(&d, depth, false));
            proptest::prop_assert_eq!(trec_order(&d, depth, true), trec_order(&d, depth, false));
        }
    }

    #[test]
    fn discount_is_ndeval_s() {
        assert_eq!(discount(0), 1.0);
        assert_eq!(discount(1), 2.0f64.ln() / 3.0f64.ln());
    }
}
