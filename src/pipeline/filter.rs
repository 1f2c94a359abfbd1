//! Filtering (paper §4): a question is kept when its nuggets are supported. First questions
//! with no nugget at all (the nugget stage failed) or no supported nugget are dropped, then —
//! with the paper's rule — questions with any nugget that no judged document supports. A
//! verdict the model could not give (`supported: null`) counts as unjudged, never as "not
//! supported". The export stage ([`export`](super::export)) filters and writes in one step.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::dataset::{JudgmentRecord, Nugget, NuggetsRecord, QueryId, Question};

/// Counts of the filtering step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilterCounts {
    /// Questions that reached filtering.
    pub questions_in: usize,
    /// Dropped: no nuggets (the nugget stage failed for them).
    pub dropped_no_nuggets: usize,
    /// Dropped: no nugget supported by any judged document.
    pub dropped_no_supported_nugget: usize,
    /// Dropped: some nugget unsupported (only with `require_all_nuggets_supported`).
    pub dropped_any_unsupported_nugget: usize,
    /// Questions kept.
    pub questions_out: usize,
    /// Whether every nugget had to be supported.
    pub require_all_nuggets_supported: bool,
}

/// The filtered questions with their judged nuggets.
#[derive(Debug, Clone)]
pub struct Filtered {
    /// Kept questions (by id), nuggets filled in.
    pub questions: Vec<Question>,
    /// How many questions each filtering step dropped (`filtering.json`).
    pub counts: FilterCounts,
}

/// Attaches judgments to nuggets and filters the questions.
pub fn filter_questions(
    questions: Vec<Question>,
    nuggets: &BTreeMap<QueryId, NuggetsRecord>,
    judgments: &[JudgmentRecord],
    require_all_nuggets_supported: bool,
) -> Filtered {
    // (nugget id) -> (relevant, non-relevant) documents, sorted.
    let mut verdicts: BTreeMap<&str, (BTreeSet<&str>, BTreeSet<&str>)> = BTreeMap::new();
    for j in judgments {
        let entry = verdicts.entry(j.nugget_id.as_str()).or_default();
        match j.supported {
            Some(true) => {
                entry.0.insert(j.doc_id.as_str());
            }
            Some(false) => {
                entry.1.insert(j.doc_id.as_str());
            }
            None => {}
        }
    }
    let mut counts = FilterCounts {
        questions_in: questions.len(),
        require_all_nuggets_supported,
        ..FilterCounts::default()
    };
    let mut kept = Vec::new();
    for mut question in questions {
        let Some(record) = nuggets
            .get(&question.query_id)
            .filter(|r| r.error.is_none() && !r.nuggets.is_empty())
        else {
            counts.dropped_no_nuggets += 1;
            continue;
        };
        let judged: Vec<Nugget> = record
            .nuggets
            .iter()
            .map(|n| {
                let (relevant, non_relevant) = verdicts
                    .get(n.id.as_str())
                    .map(|(r, nr)| {
                        (
                            r.iter().map(|s| s.to_string()).collect(),
                            nr.iter().map(|s| s.to_string()).collect(),
                        )
                    })
                    .unwrap_or_default();
                Nugget {
                    id: n.id.clone(),
                    text: n.text.clone(),
                    relevant_corpus_ids: relevant,
                    non_relevant_corpus_ids: non_relevant,
                }
            })
            .collect();
        let supported = judged
            .iter()
            .filter(|n| !n.relevant_corpus_ids.is_empty())
            .count();
        if supported == 0 {
            counts.dropped_no_supported_nugget += 1;
            continue;
        }
        if require_all_nuggets_supported && supported < judged.len() {
            counts.dropped_any_unsupported_nugget += 1;
            continue;
        }
        question.nuggets = judged;
        kept.push(question);
    }
    counts.questions_out = kept.len();
    Filtered {
        questions: kept,
        counts,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::dataset::NuggetText;

    pub(crate) fn question(id: &str) -> Question {
        Question {
            query_id: id.into(),
            query_title: "t".into(),
            query_text: "x".into(),
            answer_id: String::new(),
            answer_text: "a".into(),
            metadata: Default::default(),
            nuggets: Vec::new(),
        }
    }

    pub(crate) fn judgment(
        q: &str,
        n: usize,
        doc: &str,
        supported: Option<bool>,
    ) -> JudgmentRecord {
        JudgmentRecord {
            query_id: q.into(),
            nugget_id: format!("{q}_{n}"),
            doc_id: doc.into(),
            supported,
            rationale: String::new(),
            error: None,
            raw: None,
            probability: None,
            term_coverage: None,
            quote: None,
            grade: None,
            votes: None,
            recheck: None,
        }
    }

    pub(crate) fn nuggets(q: &str, count: usize) -> NuggetsRecord {
        NuggetsRecord {
            query_id: q.into(),
            nuggets: (0..count)
                .map(|n| NuggetText {
                    id: format!("{q}_{n}"),
                    text: format!("fact {n}"),
                })
                .collect(),
            error: None,
            raw: None,
            dropped: Vec::new(),
        }
    }

    #[test]
    fn filtering_applies_the_papers_two_rules_in_order() {
        let questions = vec![question("1"), question("2"), question("3"), question("4")];
        let mut records = BTreeMap::new();
        for (q, n) in [("1", 2), ("2", 2), ("3", 1)] {
            records.insert(q.into(), nuggets(q, n));
        }
        let judgments = vec![
            judgment("1", 0, "d1", Some(true)),
            judgment("1", 1, "d2", Some(true)),
            judgment("1", 1, "d3", Some(false)),
            judgment("2", 0, "d1", Some(true)),
            judgment("2", 1, "d1", None),
            judgment("3", 0, "d1", Some(false)),
        ];
        let strict = filter_questions(questions.clone(), &records, &judgments, true);
        assert_eq!(strict.questions.len(), 1);
        assert_eq!(strict.questions[0].query_id, "1");
        assert_eq!(
            strict.questions[0].nuggets[1].relevant_corpus_ids,
            vec!["d2"]
        );
        assert_eq!(
            strict.questions[0].nuggets[1].non_relevant_corpus_ids,
            vec!["d3"]
        );
        assert_eq!(strict.counts.dropped_no_nuggets, 1);
        assert_eq!(strict.counts.dropped_no_supported_nugget, 1);
        assert_eq!(strict.counts.dropped_any_unsupported_nugget, 1);
        let lenient = filter_questions(questions, &records, &judgments, false);
        assert_eq!(lenient.counts.questions_out, 2);
    }
}
