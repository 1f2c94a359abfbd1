//! Judgments prepared for evaluation: per question, a hash map from judged document to the
//! nuggets it supports and its query-level label, plus the global judged pool (for hole@k).
//!
//! Built once from [`NuggetQrels`] and reused for every run.

use std::path::Path;
use std::sync::OnceLock;

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHashSet};

use super::load::read_queries_jsonl;
use crate::dataset::NuggetQrels;
use crate::error::{Error, Result, Setting};

/// What one judged document means for one question.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct DocJudgment {
    /// Indices of the question's nuggets this document supports (label >= 1), ascending.
    pub supports: Vec<u32>,
    /// Query-level label: the sum of the document's nugget labels (the reference's qrels_query).
    pub query_label: i64,
}

/// One question's judgments, ready for scoring.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct QueryJudgmentIndex {
    pub query_id: String,
    /// All nuggets of the question, with or without judged documents.
    pub num_nuggets: usize,
    /// Nuggets with at least one supporting document (ndeval's "actual subtopics").
    pub num_supported_nuggets: usize,
    /// Judged documents (any label), as indices into `doc_judgments`.
    pub docs: FxHashMap<String, u32>,
    pub doc_judgments: Vec<DocJudgment>,
    /// Judged doc ids sorted ascending (bytewise, as C `strcmp`), indices into `doc_judgments`:
    /// the pool the greedy ideal ranking of alpha-nDCG is taken from.
    pub pool_sorted: Vec<u32>,
    /// Documents with a query-level label >= 1 (trec_eval's `num_rel`).
    pub num_relevant: usize,
    /// Positive query-level labels, descending (trec_eval's ideal ranking for nDCG).
    pub ideal_labels: Vec<i64>,
}

impl QueryJudgmentIndex {
    pub fn judgment(&self, doc_id: &str) -> Option<&DocJudgment> {
        self.docs
            .get(doc_id)
            .map(|&i| &self.doc_judgments[i as usize])
    }

    /// True when no document is judged for any nugget: the reference crashes on such a
    /// question when the run has it.
    pub fn has_no_judged_doc(&self) -> bool {
        self.doc_judgments.is_empty()
    }
}

impl QueryJudgmentIndex {
    /// Indexes one question from its nuggets, each given as its judged documents with their
    /// final labels (each document once per nugget, in order of first appearance).
    pub(crate) fn build<'a, N, D>(query_id: &str, nuggets: N) -> Self
    where
        N: ExactSizeIterator<Item = D>,
        D: IntoIterator<Item = (&'a str, i32)>,
    {
        let num_nuggets = nuggets.len();
        let mut docs: FxHashMap<String, u32> = FxHashMap::default();
        let mut doc_judgments: Vec<DocJudgment> = Vec::new();
        let mut supported = vec![false; num_nuggets];
        for (ni, nugget) in nuggets.enumerate() {
            for (doc, label) in nugget {
                let di = match docs.get(doc) {
                    Some(&i) => i as usize,
                    None => {
                        docs.insert(doc.to_string(), doc_judgments.len() as u32);
                        doc_judgments.push(DocJudgment::default());
                        doc_judgments.len() - 1
                    }
                };
                let judgment = &mut doc_judgments[di];
                judgment.query_label += i64::from(label);
                if label >= 1 {
                    judgment.supports.push(ni as u32);
                    supported[ni] = true;
                }
            }
        }
        let mut pool: Vec<(&str, u32)> = docs.iter().map(|(d, &i)| (d.as_str(), i)).collect();
        pool.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        let pool_sorted = pool.into_iter().map(|(_, i)| i).collect();
        let mut ideal_labels: Vec<i64> = doc_judgments
            .iter()
            .map(|j| j.query_label)
            .filter(|&l| l >= 1)
            .collect();
        ideal_labels.sort_unstable_by(|a, b| b.cmp(a));
        QueryJudgmentIndex {
            query_id: query_id.to_string(),
            num_nuggets,
            num_supported_nuggets: supported.iter().filter(|&&s| s).count(),
            num_relevant: ideal_labels.len(),
            ideal_labels,
            docs,
            doc_judgments,
            pool_sorted,
        }
    }
}

/// Nugget judgments of a set of questions, indexed for evaluating runs.
#[derive(Debug, Clone)]
pub struct Judgments {
    pub(crate) queries: Vec<QueryJudgmentIndex>,
    pub(crate) by_query: FxHashMap<String, usize>,
    /// Every document judged for any question (the reference's "annotated corpus"), built on
    /// first use (only Hole@k needs it).
    judged_anywhere: OnceLock<FxHashSet<String>>,
}

impl Judgments {
    /// Indexes `qrels`. Questions keep their order (the reference sums per-question values in
    /// this order for Coverage).
    pub fn new(qrels: &NuggetQrels) -> Self {
        let queries = qrels
            .queries()
            .par_iter()
            .map(|query| {
                QueryJudgmentIndex::build(
                    &query.query_id,
                    query
                        .nuggets
                        .iter()
                        .map(|n| n.docs.iter().map(|(d, l)| (d.as_str(), *l))),
                )
            })
            .collect();
        Self::from_indexes(queries)
    }

    /// Judgments made of already indexed questions (distinct ids), in order.
    pub(crate) fn from_indexes(queries: Vec<QueryJudgmentIndex>) -> Self {
        let by_query = queries
            .iter()
            .enumerate()
            .map(|(i, q)| (q.query_id.clone(), i))
            .collect();
        Self {
            queries,
            by_query,
            judged_anywhere: OnceLock::new(),
        }
    }

    /// Every document judged for any question.
    pub(crate) fn judged_anywhere(&self) -> &FxHashSet<String> {
        self.judged_anywhere.get_or_init(|| {
            self.queries
                .iter()
                .flat_map(|q| q.docs.keys().cloned())
                .collect()
        })
    }

    /// Number of questions (those with at least one nugget).
    pub fn len(&self) -> usize {
        self.queries.len()
    }

    /// True when there is no question.
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }

    /// Question ids in order.
    pub fn query_ids(&self) -> impl Iterator<Item = &str> {
        self.queries.iter().map(|q| q.query_id.as_str())
    }

    pub(crate) fn index_of(&self, query_id: &str) -> Option<usize> {
        self.by_query.get(query_id).copied()
    }
}

/// Where judgments come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgmentsFormat {
    /// A dataset's `queries.jsonl` (reference schema).
    QueriesJsonl,
    /// ndeval subtopic qrels: `qid nugget_id doc_id label`.
    NdevalQrels,
}

/// Loads judgments from `path` in `format`; a file without any nugget is an error (nothing could
/// be evaluated against it).
pub fn load_judgments(path: &Path, format: JudgmentsFormat) -> Result<Judgments> {
    let judgments = match format {
        JudgmentsFormat::QueriesJsonl => read_queries_jsonl(path)?,
        JudgmentsFormat::NdevalQrels => Judgments::new(&NuggetQrels::read_ndeval(path)?),
    };
    if judgments.is_empty() {
        return Err(Error::invalid(
            Setting::Judgments,
            format!(
                "{}: no question with nuggets, nothing to evaluate",
                path.display()
            ),
        ));
    }
    Ok(judgments)
}
