//! Evaluation of runs against nugget judgments (paper §4.3): alpha-nDCG, Coverage and Recall
//! exactly as the reference evaluator (`freshstack==0.0.6`, `EvaluateRetrieval`) computes them,
//! plus nDCG, MRR, P, Hole and Judged, and paired significance tests between runs.
//!
//! Guarantees:
//! - Means equal the reference's output (same tie rules, denominators, summation order and
//!   Python rounding to 4 decimals); see `metrics.rs` for the three orderings.
//! - Never panics on odd input. Where the reference crashes (a question with an empty ranking, a
//!   question without any judged document, only k > 20 for alpha-nDCG) the question scores 0 and
//!   one warning per kind is logged through `tracing`.
//! - alpha-nDCG is also defined for k > 20 (the reference silently drops those k): the run is
//!   cut at k by the stable order, re-sorted by ndeval's rule, and the ideal extends greedily.
//!
//! Imports only `dataset`.

pub mod agreement;
mod job;
mod judgments;
mod load;
mod metrics;
mod report;
mod round;
mod significance;

use std::fmt;

use rayon::prelude::*;

pub use job::{EvalJob, EvalReport, evaluate_files};
pub use judgments::{Judgments, JudgmentsFormat, load_judgments};
pub use report::{Comparison, SignificanceConfig, compare_runs};
pub use round::py_round;
pub use significance::{PairedTest, paired_t_test, paired_tests, randomization_test};

use crate::dataset::{DocRef, Rankings};
use crate::error::{Error, Result, Setting};
use metrics::*;

/// Largest cutoff ndeval (and so the reference) computes alpha-nDCG for.
pub const NDEVAL_MAX_DEPTH: usize = 20;
/// alpha of alpha-nDCG (the reference's, pyndeval's default).
pub const DEFAULT_ALPHA: f64 = 0.5;

/// A metric family; each is reported at one or more cutoffs k.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Metric {
    /// alpha-nDCG@k over nuggets (ndeval), diversity and relevance.
    AlphaNdcg,
    /// Share of the question's nuggets supported by a document in the top k.
    Coverage,
    /// trec_eval recall@k on query-level labels (a document is relevant if it supports a nugget).
    Recall,
    /// trec_eval nDCG@k with the number of supported nuggets as the gain.
    Ndcg,
    /// Reciprocal rank of the first relevant document within the top k (trec_eval order).
    Mrr,
    /// trec_eval precision@k.
    Precision,
    /// Share of the top k judged for no question at all (the reference's Hole@k).
    Hole,
    /// Share of the top k judged for this question.
    Judged,
}

impl Metric {
    /// Every metric, in display order.
    pub const ALL: [Metric; 8] = [
        Metric::AlphaNdcg,
        Metric::Coverage,
        Metric::Recall,
        Metric::Ndcg,
        Metric::Mrr,
        Metric::Precision,
        Metric::Hole,
        Metric::Judged,
    ];

    /// The name used on the command line and in output keys (`alpha_ndcg`, `coverage`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Metric::AlphaNdcg => "alpha_ndcg",
            Metric::Coverage => "coverage",
            Metric::Recall => "recall",
            Metric::Ndcg => "ndcg",
            Metric::Mrr => "mrr",
            Metric::Precision => "precision",
            Metric::Hole => "hole",
            Metric::Judged => "judged",
        }
    }

    /// The paper's cutoff for the three FreshStack metrics, 10 for the others.
    pub fn default_k(self) -> usize {
        match self {
            Metric::Coverage => 20,
            Metric::Recall => 50,
            _ => 10,
        }
    }
}

impl std::str::FromStr for Metric {
    type Err = Error;

    /// Parses a metric name (also accepts `alpha-ndcg`, `p`, `rr`).
    fn from_str(name: &str) -> Result<Self> {
        let lower = name.trim().to_ascii_lowercase().replace('-', "_");
        let metric = match lower.as_str() {
            "alpha_ndcg" | "alphandcg" => Metric::AlphaNdcg,
            "coverage" => Metric::Coverage,
            "recall" => Metric::Recall,
            "ndcg" => Metric::Ndcg,
            "mrr" | "rr" => Metric::Mrr,
            "precision" | "p" => Metric::Precision,
            "hole" => Metric::Hole,
            "judged" => Metric::Judged,
            _ => {
                let names: Vec<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
                return Err(Error::invalid(
                    Setting::Metric,
                    format!("`{name}` is not one of {}", names.join(", ")),
                ));
            }
        };
        Ok(metric)
    }
}

/// A metric at a cutoff, displayed `name@k` (the output key).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MetricAt {
    /// Which measure (alpha-nDCG, Coverage, Recall, ...).
    pub metric: Metric,
    /// The cutoff (>= 1).
    pub k: usize,
}

impl fmt::Display for MetricAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.metric.name(), self.k)
    }
}

/// What to compute.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalConfig {
    /// The measures, in output order.
    pub measures: Vec<MetricAt>,
    /// alpha of alpha-nDCG.
    pub alpha: f64,
}

impl Default for EvalConfig {
    /// The paper's measures: alpha-nDCG@10, Coverage@20, Recall@50.
    fn default() -> Self {
        Self::paper()
    }
}

/// The deepest cutoff evaluated: far below it every run has ended, and the per-rank curves
/// stay small.
pub const MAX_CUTOFF: usize = 100_000;

impl EvalConfig {
    /// alpha-nDCG@10, Coverage@20, Recall@50 (paper §4.3).
    pub fn paper() -> Self {
        Self {
            measures: vec![
                MetricAt {
                    metric: Metric::AlphaNdcg,
                    k: 10,
                },
                MetricAt {
                    metric: Metric::Coverage,
                    k: 20,
                },
                MetricAt {
                    metric: Metric::Recall,
                    k: 50,
                },
            ],
            alpha: DEFAULT_ALPHA,
        }
    }

    /// Every metric of `metrics` at every k of `ks`; an empty `metrics` means the paper's three,
    /// an empty `ks` each metric's [`Metric::default_k`]. Duplicates are dropped.
    pub fn new(metrics: &[Metric], ks: &[usize]) -> Result<Self> {
        if let Some(&k) = ks.iter().find(|&&k| k == 0 || k > MAX_CUTOFF) {
            return Err(Error::invalid(
                Setting::K,
                format!("cutoffs must be in [1, {MAX_CUTOFF}], got {k}"),
            ));
        }
        let metrics: Vec<Metric> = if metrics.is_empty() {
            vec![Metric::AlphaNdcg, Metric::Coverage, Metric::Recall]
        } else {
            metrics.to_vec()
        };
        let mut measures: Vec<MetricAt> = Vec::new();
        for &metric in &metrics {
            let list: Vec<usize> = if ks.is_empty() {
                vec![metric.default_k()]
            } else {
                ks.to_vec()
            };
            for k in list {
                let m = MetricAt { metric, k };
                if !measures.contains(&m) {
                    measures.push(m);
                }
            }
        }
        Ok(Self {
            measures,
            alpha: DEFAULT_ALPHA,
        })
    }

    /// The run depth before alpha-nDCG@k for k <= 20: the reference cuts every run at the
    /// largest of *all* its k values that is <= 20 (stable order), then lets ndeval re-sort.
    /// So alpha-nDCG@10 depends on whether 20 is also asked for, exactly as in the reference.
    pub fn alpha_cut(&self) -> usize {
        self.measures
            .iter()
            .map(|m| m.k)
            .filter(|&k| k <= NDEVAL_MAX_DEPTH)
            .max()
            .unwrap_or(0)
    }
}

/// Values of every measure for one question, aligned with [`Evaluation::measures`].
#[derive(Debug, Clone, PartialEq)]
pub struct QueryScores {
    /// The question id.
    pub query_id: String,
    /// One value per measure (Coverage rounded to 5 decimals, as the reference does per
    /// question; the others unrounded).
    pub values: Vec<f64>,
}

/// Cases where the reference would have crashed; each such question scored 0.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvalNotes {
    /// Questions the run lists with no document.
    pub empty_rankings: usize,
    /// Questions in the run whose nuggets have no judged document at all.
    pub unjudged_queries: usize,
    /// Run questions absent from the judgments (ignored, as the reference does).
    pub unknown_queries: usize,
    /// Judged questions absent from the run (they score 0).
    pub missing_queries: usize,
}

/// The outcome of evaluating one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The run's name.
    pub run_name: String,
    /// The measures, in order.
    pub measures: Vec<MetricAt>,
    /// Mean of each measure over every judged question, rounded to 4 decimals like the
    /// reference.
    pub means: Vec<f64>,
    /// Per question, in judgment order.
    pub per_query: Vec<QueryScores>,
    /// What was odd about the input.
    pub notes: EvalNotes,
}

impl Evaluation {
    /// The mean of `measure`, if it was computed.
    pub fn mean(&self, measure: MetricAt) -> Option<f64> {
        self.measures
            .iter()
            .position(|m| *m == measure)
            .map(|i| self.means[i])
    }

    /// Per-question values of the measure at position `index`, in judgment order.
    pub fn column(&self, index: usize) -> Vec<f64> {
        self.per_query.iter().map(|q| q.values[index]).collect()
    }
}

/// Depths derived from a config.
struct Plan {
    alpha_cut: usize,
    alpha_ideal_depth: usize,
    stable_depth: usize,
    trec_depth: usize,
}

impl Plan {
    fn new(config: &EvalConfig) -> Self {
        let alpha_cut = config.alpha_cut();
        let mut plan = Plan {
            alpha_cut,
            alpha_ideal_depth: 0,
            stable_depth: 0,
            trec_depth: 0,
        };
        for m in &config.measures {
            match m.metric {
                Metric::AlphaNdcg => {
                    plan.alpha_ideal_depth = plan.alpha_ideal_depth.max(m.k);
                    let cut = if m.k <= NDEVAL_MAX_DEPTH {
                        alpha_cut
                    } else {
                        m.k
                    };
                    plan.stable_depth = plan.stable_depth.max(cut);
                }
                Metric::Coverage | Metric::Hole | Metric::Judged => {
                    plan.stable_depth = plan.stable_depth.max(m.k)
                }
                Metric::Recall | Metric::Ndcg | Metric::Mrr | Metric::Precision => {
                    plan.trec_depth = plan.trec_depth.max(m.k)
                }
            }
        }
        plan
    }
}

/// Evaluates `run` (a [`Run`](crate::Run), a [`RunFile`](crate::dataset::RunFile) or any other
/// [`Rankings`]) against `judgments`. Questions of the run without judgments are ignored;
/// judged questions missing from the run score 0. Means are over all judged questions.
pub fn evaluate<R: Rankings + ?Sized>(
    judgments: &Judgments,
    run: &R,
    config: &EvalConfig,
) -> Evaluation {
    let plan = Plan::new(config);
    let num_measures = config.measures.len();
    let mut per_query: Vec<QueryScores> = judgments
        .queries
        .iter()
        .map(|q| QueryScores {
            query_id: q.query_id.clone(),
            values: vec![0.0; num_measures],
        })
        .collect();
    let mut notes = EvalNotes::default();
    // Questions are scored in parallel; sums below run sequentially in a fixed order, so the
    // output does not depend on the thread count.
    let scored: Vec<(usize, Vec<f64>, bool)> = (0..run.num_rankings())
        .into_par_iter()
        .filter_map(|ri| {
            let qi = judgments.index_of(run.ranking_query_id(ri))?;
            let q = &judgments.queries[qi];
            let docs = run.ranking_docs(ri);
            let crashes = docs.is_empty() || q.has_no_judged_doc();
            let mut values = vec![0.0; num_measures];
            score_query(judgments, qi, &docs, config, &plan, crashes, &mut values);
            Some((qi, values, docs.is_empty()))
        })
        .collect();
    notes.unknown_queries = run.num_rankings() - scored.len();
    // Judged questions in run order: the reference sums alpha-nDCG, Recall and nDCG this way.
    let mut run_order: Vec<usize> = Vec::with_capacity(scored.len());
    for (qi, values, empty) in scored {
        let q = &judgments.queries[qi];
        if empty {
            notes.empty_rankings += 1;
        } else if q.has_no_judged_doc() {
            notes.unjudged_queries += 1;
        }
        per_query[qi].values = values;
        run_order.push(qi);
    }
    notes.missing_queries = judgments.len() - run_order.len();
    if run.num_rankings() == 0 {
        tracing::warn!(
            "run {} is empty: all {} judged question(s) score 0",
            run.run_name(),
            judgments.len()
        );
    } else if run_order.is_empty() {
        tracing::warn!(
            "run {} shares no question with the judgments ({} in the run, {} judged): every \
             judged question scores 0; do the query ids match?",
            run.run_name(),
            run.num_rankings(),
            judgments.len()
        );
    }
    if notes.empty_rankings > 0 {
        tracing::warn!(
            "run {}: {} question(s) with an empty ranking scored 0 (the reference crashes on them)",
            run.run_name(),
            notes.empty_rankings
        );
    }
    if notes.unjudged_queries > 0 {
        tracing::warn!(
            "run {}: {} question(s) have nuggets but no judged document; alpha-nDCG 0 for them \
             (the reference crashes on them)",
            run.run_name(),
            notes.unjudged_queries
        );
    }
    let n = judgments.len();
    let means = config
        .measures
        .iter()
        .enumerate()
        .map(|(mi, m)| {
            if n == 0 {
                return 0.0;
            }
            let sum_over = |order: &mut dyn Iterator<Item = usize>| -> f64 {
                let mut sum = 0.0f64;
                for qi in order {
                    sum += per_query[qi].values[mi];
                }
                sum
            };
            match m.metric {
                Metric::AlphaNdcg | Metric::Recall => {
                    py_round(sum_over(&mut run_order.iter().copied()) / n as f64, 4)
                }
                // The reference rounds nDCG to 5 decimals, then again to 4.
                Metric::Ndcg => py_round(
                    py_round(sum_over(&mut run_order.iter().copied()) / n as f64, 5),
                    4,
                ),
                _ => py_round(sum_over(&mut (0..n)) / n as f64, 4),
            }
        })
        .collect();
    Evaluation {
        run_name: run.run_name().to_string(),
        measures: config.measures.clone(),
        means,
        per_query,
        notes,
    }
}

/// Fills `out` (one slot per measure) for the judged question `qi` given its ranking.
fn score_query(
    judgments: &Judgments,
    qi: usize,
    docs: &[DocRef<'_>],
    config: &EvalConfig,
    plan: &Plan,
    alpha_crashes: bool,
    out: &mut [f64],
) {
    let q = &judgments.queries[qi];
    let sorted = is_sorted_by_score(docs);
    let stable = stable_order(docs, plan.stable_depth, sorted);
    let trec = trec_order(docs, plan.trec_depth, sorted);
    let trec_labels = query_labels(q, docs, &trec);
    let cover_ranks = first_cover_ranks(q, docs, &stable);
    let needs_alpha = !alpha_crashes
        && config
            .measures
            .iter()
            .any(|m| m.metric == Metric::AlphaNdcg);
    let ideal = if needs_alpha {
        alpha_ideal_curve(q, plan.alpha_ideal_depth, config.alpha)
    } else {
        Vec::new()
    };
    let supports_of = |order: Vec<u32>| -> Vec<Option<&[u32]>> {
        order
            .into_iter()
            .map(|i| {
                q.judgment(docs[i as usize].doc_id)
                    .map(|j| j.supports.as_slice())
            })
            .collect()
    };
    let alpha_curve_small = if needs_alpha && plan.alpha_cut > 0 {
        let cut = &stable[..plan.alpha_cut.min(stable.len())];
        let ranked = supports_of(ndeval_order(docs, cut));
        alpha_dcg_curve(
            ranked,
            q.num_nuggets,
            q.num_supported_nuggets,
            plan.alpha_cut,
            config.alpha,
        )
    } else {
        Vec::new()
    };
    for (slot, m) in out.iter_mut().zip(&config.measures) {
        let k = m.k;
        if k == 0 {
            // Only reachable through a hand-built config; a cutoff of 0 retrieves nothing.
            *slot = 0.0;
            continue;
        }
        *slot = match m.metric {
            Metric::AlphaNdcg if !needs_alpha => 0.0,
            Metric::AlphaNdcg if k <= NDEVAL_MAX_DEPTH => {
                alpha_ndcg_at(&alpha_curve_small, &ideal, k)
            }
            Metric::AlphaNdcg => {
                let cut = &stable[..k.min(stable.len())];
                let ranked = supports_of(ndeval_order(docs, cut));
                let curve = alpha_dcg_curve(
                    ranked,
                    q.num_nuggets,
                    q.num_supported_nuggets,
                    k,
                    config.alpha,
                );
                alpha_ndcg_at(&curve, &ideal, k)
            }
            Metric::Coverage => {
                let covered = cover_ranks.iter().filter(|&&r| r < k).count();
                if q.num_nuggets == 0 {
                    0.0
                } else {
                    py_round(covered as f64 / q.num_nuggets as f64, 5)
                }
            }
            Metric::Recall => recall_at(&trec_labels, q.num_relevant, k),
            Metric::Ndcg => ndcg_at(&trec_labels, &q.ideal_labels, k),
            Metric::Mrr => mrr_at(&trec_labels, k),
            Metric::Precision => precision_at(&trec_labels, k),
            Metric::Hole => {
                let holes = stable
                    .iter()
                    .take(k)
                    .filter(|&&i| {
                        !judgments
                            .judged_anywhere()
                            .contains(docs[i as usize].doc_id)
                    })
                    .count();
                holes as f64 / k as f64
            }
            Metric::Judged => {
                let judged = stable
                    .iter()
                    .take(k)
                    .filter(|&&i| q.docs.contains_key(docs[i as usize].doc_id))
                    .count();
                judged as f64 / k as f64
            }
        };
    }
}

#[cfg(test)]
mod tests;
