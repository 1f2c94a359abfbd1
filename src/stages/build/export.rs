//! Filtering (paper §4) and the dataset export.
//!
//! Filtering keeps a question when its nuggets are supported: first questions with no nugget at
//! all (the nugget stage failed) or no supported nugget are dropped, then — with the paper's
//! rule — questions with any nugget that no judged document supports. A verdict the model could
//! not give (`supported: null`) counts as unjudged, never as "not supported".
//!
//! Export layout (the reference's formats; loadable with `datasets.load_dataset("json", ...)`):
//! `corpus.jsonl`, `queries.jsonl` (nuggets with `relevant_corpus_ids` /
//! `non_relevant_corpus_ids`), `qrels/nuggets.qrels` (`qid nugget_id doc_id label`),
//! `qrels/test.tsv` (BEIR query-level: how many of the query's nuggets a document supports),
//! `runs/*.trec` (every pooling run, restricted to the kept questions), `filtering.json`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dataset::{
    AtomicWriter, JudgmentRecord, Nugget, NuggetsRecord, QueryId, Question, write_json_atomic,
};
use crate::error::{Error, Result};

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
    /// The counts.
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

/// Writes `queries.jsonl`, `qrels/nuggets.qrels`, `qrels/test.tsv` and `filtering.json` into
/// `dir`.
pub fn write_dataset(dir: &Path, filtered: &Filtered) -> Result<()> {
    let mut queries = AtomicWriter::create(dir.join("queries.jsonl"))?;
    for q in &filtered.questions {
        queries.write_json_line(q)?;
    }
    queries.commit()?;

    let qrels_dir = dir.join("qrels");
    let path = qrels_dir.join("nuggets.qrels");
    let mut nugget_qrels = AtomicWriter::create(&path)?;
    for q in &filtered.questions {
        for n in &q.nuggets {
            for (docs, label) in [(&n.relevant_corpus_ids, 1), (&n.non_relevant_corpus_ids, 0)] {
                for doc in docs {
                    writeln!(nugget_qrels, "{} {} {} {label}", q.query_id, n.id, doc)
                        .map_err(|e| Error::io(&path, e))?;
                }
            }
        }
    }
    nugget_qrels.commit()?;

    let path = qrels_dir.join("test.tsv");
    let mut query_qrels = AtomicWriter::create(&path)?;
    writeln!(query_qrels, "query-id\tcorpus-id\tscore").map_err(|e| Error::io(&path, e))?;
    for q in &filtered.questions {
        let mut per_doc: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &q.nuggets {
            for doc in &n.non_relevant_corpus_ids {
                per_doc.entry(doc).or_insert(0);
            }
            for doc in &n.relevant_corpus_ids {
                *per_doc.entry(doc).or_insert(0) += 1;
            }
        }
        for (doc, score) in per_doc {
            writeln!(query_qrels, "{}\t{doc}\t{score}", q.query_id)
                .map_err(|e| Error::io(&path, e))?;
        }
    }
    query_qrels.commit()?;

    write_json_atomic(dir.join("filtering.json"), &filtered.counts)
}

/// Copies a TREC run keeping only the lines of `keep` questions (bytes otherwise unchanged).
pub fn copy_run_for(from: &Path, to: &Path, keep: &HashSet<&str>) -> Result<()> {
    let file = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    let mut writer = AtomicWriter::create(to)?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| Error::io(from, e))?;
        let qid = line.split_whitespace().next().unwrap_or("");
        if keep.contains(qid) {
            writeln!(writer, "{line}").map_err(|e| Error::io(to, e))?;
        }
    }
    writer.commit()
}

/// Copies a file atomically.
pub fn copy_file(from: &Path, to: &Path) -> Result<()> {
    let mut reader = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    let mut writer = AtomicWriter::create(to)?;
    std::io::copy(&mut reader, &mut writer).map_err(|e| Error::io(to, e))?;
    writer.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::NuggetText;

    fn question(id: &str) -> Question {
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

    fn judgment(q: &str, n: usize, doc: &str, supported: Option<bool>) -> JudgmentRecord {
        JudgmentRecord {
            query_id: q.into(),
            nugget_id: format!("{q}_{n}"),
            doc_id: doc.into(),
            supported,
            rationale: String::new(),
            error: None,
            raw: None,
        }
    }

    fn nuggets(q: &str, count: usize) -> NuggetsRecord {
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

    #[test]
    fn qrels_count_supported_nuggets_per_document() {
        let mut records = BTreeMap::new();
        records.insert("1".into(), nuggets("1", 2));
        let judgments = vec![
            judgment("1", 0, "d1", Some(true)),
            judgment("1", 1, "d1", Some(true)),
            judgment("1", 1, "d2", Some(false)),
        ];
        let filtered = filter_questions(vec![question("1")], &records, &judgments, true);
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), &filtered).unwrap();
        let tsv = std::fs::read_to_string(dir.path().join("qrels/test.tsv")).unwrap();
        assert_eq!(tsv, "query-id\tcorpus-id\tscore\n1\td1\t2\n1\td2\t0\n");
        let qrels = std::fs::read_to_string(dir.path().join("qrels/nuggets.qrels")).unwrap();
        assert_eq!(qrels, "1 1_0 d1 1\n1 1_1 d1 1\n1 1_1 d2 0\n");
    }
}
