//! Nugget-level judgments ("qrels") and the query-level qrels derived from them.
//!
//! Sources: a dataset's `queries.jsonl` (reference schema: each nugget lists
//! `relevant_corpus_ids`, label 1, then `non_relevant_corpus_ids`, label 0, the second list
//! winning for a doc in both) or ndeval / ir_measures subtopic qrels, one judgment per line:
//! `qid nugget_id doc_id label` (a line with more than 4 fields has a doc id with spaces:
//! `fields[2..len-1]` joined by one space).
//!
//! Order is kept everywhere (questions, nuggets, documents in order of first appearance) because
//! the reference's floating-point sums follow it. A nugget with no judged document is kept: it
//! counts in the question's nugget total.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::Path;

use super::atomic::AtomicWriter;
use super::jsonl::read_jsonl;
use super::question::Question;
use crate::error::{Error, Result};

/// The judged documents of one nugget.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NuggetJudgments {
    /// The nugget id (`{query_id}_{n}` in FreshStack datasets).
    pub nugget_id: String,
    /// `(doc_id, label)` in order of first appearance, each doc once; label >= 1 means the
    /// document supports the nugget.
    pub docs: Vec<(String, i32)>,
}

/// The nuggets of one question.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueryJudgments {
    /// The question id.
    pub query_id: String,
    /// Its nuggets, in order of first appearance.
    pub nuggets: Vec<NuggetJudgments>,
}

impl QueryJudgments {
    /// Query-level labels as the reference derives them (`nuggets_to_query_qrels`): per judged
    /// document, the sum of its nugget labels (so the number of nuggets it supports; 0 for a
    /// judged document that supports none). Documents in order of first appearance.
    pub fn query_labels(&self) -> Vec<(&str, i64)> {
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut out: Vec<(&str, i64)> = Vec::new();
        for nugget in &self.nuggets {
            for (doc, label) in &nugget.docs {
                match index.get(doc.as_str()) {
                    Some(&i) => out[i].1 += i64::from(*label),
                    None => {
                        index.insert(doc, out.len());
                        out.push((doc, i64::from(*label)));
                    }
                }
            }
        }
        out
    }
}

/// Nugget-level judgments of a set of questions.
#[derive(Debug, Clone, Default)]
pub struct NuggetQrels {
    queries: Vec<QueryJudgments>,
    by_query: HashMap<String, usize>,
}

/// The question a nugget id belongs to: the text before its last `_` (the whole id when it has
/// none). The reference matches nugget ids by prefix, which also gives `q12_0` to `q1`.
pub fn query_id_of_nugget(nugget_id: &str) -> &str {
    nugget_id
        .rfind('_')
        .map_or(nugget_id, |pos| &nugget_id[..pos])
}

impl NuggetQrels {
    /// No judgments.
    pub fn new() -> Self {
        Self::default()
    }

    /// The questions, in order of first appearance.
    pub fn queries(&self) -> &[QueryJudgments] {
        &self.queries
    }

    /// The judgments of `query_id`.
    pub fn get(&self, query_id: &str) -> Option<&QueryJudgments> {
        self.by_query.get(query_id).map(|&i| &self.queries[i])
    }

    /// Number of questions.
    pub fn len(&self) -> usize {
        self.queries.len()
    }

    /// True when there is no question.
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }

    /// Makes sure `nugget_id` exists under `query_id` (with no judged document yet); returns
    /// its judgments.
    pub fn add_nugget(&mut self, query_id: &str, nugget_id: &str) -> &mut NuggetJudgments {
        let qi = match self.by_query.get(query_id) {
            Some(&i) => i,
            None => {
                let i = self.queries.len();
                self.by_query.insert(query_id.to_string(), i);
                self.queries.push(QueryJudgments {
                    query_id: query_id.to_string(),
                    nuggets: Vec::new(),
                });
                i
            }
        };
        let nuggets = &mut self.queries[qi].nuggets;
        let ni = match nuggets.iter().position(|n| n.nugget_id == nugget_id) {
            Some(i) => i,
            None => {
                nuggets.push(NuggetJudgments {
                    nugget_id: nugget_id.to_string(),
                    docs: Vec::new(),
                });
                nuggets.len() - 1
            }
        };
        &mut nuggets[ni]
    }

    /// Sets the label of (`query_id`, `nugget_id`, `doc_id`); a later label for the same
    /// triple replaces the earlier one and keeps its position.
    pub fn set(&mut self, query_id: &str, nugget_id: &str, doc_id: &str, label: i32) {
        let nugget = self.add_nugget(query_id, nugget_id);
        match nugget.docs.iter_mut().find(|(d, _)| d == doc_id) {
            Some(entry) => entry.1 = label,
            None => nugget.docs.push((doc_id.to_string(), label)),
        }
    }

    /// Judgments from `queries.jsonl` rows, as the reference's loader builds them. A question
    /// with no nugget is left out (the reference never sees it).
    pub fn from_queries(records: &[Question]) -> Self {
        let mut qrels = Self::new();
        for record in records {
            for nugget in &record.nuggets {
                qrels.add_nugget(&record.query_id, &nugget.id);
                for doc in &nugget.relevant_corpus_ids {
                    qrels.set(&record.query_id, &nugget.id, doc, 1);
                }
                for doc in &nugget.non_relevant_corpus_ids {
                    qrels.set(&record.query_id, &nugget.id, doc, 0);
                }
            }
        }
        qrels
    }

    /// Judgments keyed by nugget id only (`{nugget_id: {doc_id: label}}`, the reference's
    /// `qrels_nuggets`); each nugget goes to [`query_id_of_nugget`].
    pub fn from_nugget_map<'a, I, D>(nuggets: I) -> Self
    where
        I: IntoIterator<Item = (&'a str, D)>,
        D: IntoIterator<Item = (&'a str, i32)>,
    {
        let mut qrels = Self::new();
        for (nugget_id, docs) in nuggets {
            let query_id = query_id_of_nugget(nugget_id);
            qrels.add_nugget(query_id, nugget_id);
            for (doc, label) in docs {
                qrels.set(query_id, nugget_id, doc, label);
            }
        }
        qrels
    }

    /// Reads a dataset's `queries.jsonl` (reference schema).
    pub fn read_queries_jsonl(path: impl AsRef<Path>) -> Result<Self> {
        let records: Vec<Question> = read_jsonl(path)?;
        Ok(Self::from_queries(&records))
    }

    /// Reads ndeval subtopic qrels: `qid nugget_id doc_id label` per line; blank lines and
    /// lines starting with `#` are skipped.
    pub fn read_ndeval(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut qrels = Self::new();
        let mut joined = String::new();
        for (i, line) in super::bounded::lines(BufReader::new(file)).enumerate() {
            let line = line.map_err(|e| Error::io(path, e))?;
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.is_empty() || fields[0].starts_with('#') {
                continue;
            }
            if fields.len() < 4 {
                return Err(Error::parse(
                    path,
                    i + 1,
                    format!(
                        "expected 4 fields `qid nugget_id doc_id label`, got {}",
                        fields.len()
                    ),
                ));
            }
            let len = fields.len();
            let label_text = fields[len - 1];
            let label: i32 = label_text.parse().map_err(|_| {
                Error::parse(
                    path,
                    i + 1,
                    format!("label: expected an integer, got `{label_text}`"),
                )
            })?;
            joined.clear();
            joined.push_str(&fields[2..len - 1].join(" "));
            qrels.set(fields[0], fields[1], &joined, label);
        }
        Ok(qrels)
    }

    /// Writes ndeval subtopic qrels (`qid nugget_id doc_id label`), atomically. Nuggets with no
    /// judged document cannot be expressed in this format and are lost.
    pub fn write_ndeval(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut writer = AtomicWriter::create(path)?;
        let path = writer.path().to_path_buf();
        for query in &self.queries {
            for nugget in &query.nuggets {
                for (doc, label) in &nugget.docs {
                    writeln!(
                        writer,
                        "{} {} {} {}",
                        query.query_id, nugget.nugget_id, doc, label
                    )
                    .map_err(|e| Error::io(&path, e))?;
                }
            }
        }
        writer.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::Nugget;

    fn record(qid: &str, nuggets: Vec<(&str, Vec<&str>, Vec<&str>)>) -> Question {
        Question {
            query_id: qid.into(),
            nuggets: nuggets
                .into_iter()
                .map(|(id, rel, non)| Nugget {
                    id: id.into(),
                    relevant_corpus_ids: rel.into_iter().map(String::from).collect(),
                    non_relevant_corpus_ids: non.into_iter().map(String::from).collect(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn non_relevant_list_wins_and_empty_nuggets_stay() {
        let q = NuggetQrels::from_queries(&[
            record(
                "1",
                vec![
                    ("1_0", vec!["a", "b"], vec!["b", "c"]),
                    ("1_1", vec![], vec![]),
                    ("1_2", vec!["a"], vec![]),
                ],
            ),
            record("2", vec![]),
        ]);
        assert_eq!(q.len(), 1);
        let judgments = q.get("1").unwrap();
        assert_eq!(judgments.nuggets.len(), 3);
        assert_eq!(
            judgments.nuggets[0].docs,
            vec![("a".into(), 1), ("b".into(), 0), ("c".into(), 0)]
        );
        assert_eq!(judgments.query_labels(), vec![("a", 2), ("b", 0), ("c", 0)]);
    }

    #[test]
    fn nugget_ids_group_by_last_underscore_not_prefix() {
        assert_eq!(query_id_of_nugget("q1_0"), "q1");
        assert_eq!(query_id_of_nugget("q12_3"), "q12");
        assert_eq!(query_id_of_nugget("a_b_7"), "a_b");
        assert_eq!(query_id_of_nugget("plain"), "plain");
        let q =
            NuggetQrels::from_nugget_map(vec![("q1_0", vec![("d", 1)]), ("q12_0", vec![("e", 1)])]);
        assert_eq!(q.get("q1").unwrap().nuggets.len(), 1);
        assert_eq!(q.get("q12").unwrap().nuggets.len(), 1);
    }

    #[test]
    fn ndeval_round_trip_with_spaces_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.qrels");
        std::fs::write(&path, "q1 q1_0 my doc 1\n# comment\n\nq1 q1_1 x 0\n").unwrap();
        let q = NuggetQrels::read_ndeval(&path).unwrap();
        let j = q.get("q1").unwrap();
        assert_eq!(j.nuggets[0].docs, vec![("my doc".into(), 1)]);
        let out = dir.path().join("o.qrels");
        q.write_ndeval(&out).unwrap();
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "q1 q1_0 my doc 1\nq1 q1_1 x 0\n"
        );
        std::fs::write(&path, "q1 q1_0 d 1\nq1 q1_0 d\n").unwrap();
        let err = NuggetQrels::read_ndeval(&path).unwrap_err().to_string();
        assert!(err.contains("n.qrels:2:"), "{err}");
        std::fs::write(&path, "q1 q1_0 d x\n").unwrap();
        let err = NuggetQrels::read_ndeval(&path).unwrap_err().to_string();
        assert!(err.contains(":1:") && err.contains("label"), "{err}");
    }
}
