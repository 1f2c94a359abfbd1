//! Judgments straight from a dataset's `queries.jsonl`, the fast way: each row is parsed (in
//! parallel) into only the fields evaluation needs, with ids borrowed from the file text, and
//! indexed without the intermediate [`NuggetQrels`](crate::dataset::NuggetQrels).
//!
//! Same result as `NuggetQrels::from_queries` on [`QueryRecord`](crate::dataset::QueryRecord)s
//! (tested): rows of one question are merged in order of first appearance, nuggets of one id
//! merged within a question, relevant documents labelled 1 and then non-relevant ones 0 (so a
//! document in both lists ends up 0), a question without nuggets left out. Fields evaluation does
//! not read (titles, texts, answers, metadata) are skipped without being checked.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::judgments::{Judgments, QueryJudgmentIndex};
use crate::error::{Error, Result};

/// A string id, borrowed from the line when it has no escapes.
#[derive(Debug, Deserialize)]
struct Id<'a>(#[serde(borrow)] Cow<'a, str>);

/// The fields of a `queries.jsonl` row that judgments need.
#[derive(Debug, Deserialize)]
struct Row<'a> {
    #[serde(borrow, deserialize_with = "string_or_number")]
    query_id: Cow<'a, str>,
    #[serde(default, borrow)]
    nuggets: Vec<NuggetRow<'a>>,
}

#[derive(Debug, Deserialize)]
struct NuggetRow<'a> {
    #[serde(rename = "_id", borrow, deserialize_with = "string_or_number")]
    id: Cow<'a, str>,
    #[serde(default, borrow)]
    relevant_corpus_ids: Vec<Id<'a>>,
    #[serde(default, borrow)]
    non_relevant_corpus_ids: Vec<Id<'a>>,
}

/// An id given as a JSON string or number (the reference casts ids to strings), or null (empty),
/// as `QueryRecord` reads it.
fn string_or_number<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Cow<'a, str>, D::Error> {
    struct IdVisitor;
    impl<'de> Visitor<'de> for IdVisitor {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or a number")
        }
        fn visit_borrowed_str<E: de::Error>(
            self,
            v: &'de str,
        ) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }
    }
    deserializer.deserialize_any(IdVisitor)
}

/// Reads the judgments of a dataset's `queries.jsonl` (see the module docs).
pub(crate) fn read_queries_jsonl(path: &Path) -> Result<Judgments> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line = valid.iter().filter(|&&b| b == b'\n').count() + 1;
        Error::parse(path, line, "not valid UTF-8")
    })?;
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .collect();
    let rows: Vec<std::result::Result<Row, (usize, String)>> = lines
        .par_iter()
        .map(|&(i, line)| serde_json::from_str::<Row>(line).map_err(|e| (i + 1, e.to_string())))
        .collect();
    let mut parsed = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            Ok(row) => parsed.push(row),
            Err((line, message)) => return Err(Error::parse(path, line, message)),
        }
    }
    Ok(judgments_from_rows(&parsed))
}

/// Merges rows by question and indexes each question (in parallel, order kept).
fn judgments_from_rows(rows: &[Row<'_>]) -> Judgments {
    let mut groups: Vec<(&str, Vec<&NuggetRow>)> = Vec::new();
    let mut index: FxHashMap<&str, usize> = FxHashMap::default();
    for row in rows.iter().filter(|r| !r.nuggets.is_empty()) {
        let gi = *index.entry(&row.query_id).or_insert_with(|| {
            groups.push((&row.query_id, Vec::new()));
            groups.len() - 1
        });
        groups[gi].1.extend(row.nuggets.iter());
    }
    let queries: Vec<QueryJudgmentIndex> = groups
        .par_iter()
        .map(|(query_id, nuggets)| {
            // Nuggets by id in order of first appearance; per nugget, documents in order of
            // first appearance with their last label.
            let mut merged: Vec<(&str, Vec<(&str, i32)>)> = Vec::new();
            let mut at: FxHashMap<(usize, &str), usize> = FxHashMap::default();
            for nugget in nuggets {
                let ni = match merged.iter().position(|(id, _)| *id == nugget.id) {
                    Some(ni) => ni,
                    None => {
                        merged.push((&nugget.id, Vec::new()));
                        merged.len() - 1
                    }
                };
                let labelled = nugget
                    .relevant_corpus_ids
                    .iter()
                    .map(|d| (d, 1))
                    .chain(nugget.non_relevant_corpus_ids.iter().map(|d| (d, 0)));
                for (doc, label) in labelled {
                    let docs = &mut merged[ni].1;
                    match at.get(&(ni, doc.0.as_ref())) {
                        Some(&di) => docs[di].1 = label,
                        None => {
                            at.insert((ni, &doc.0), docs.len());
                            docs.push((&doc.0, label));
                        }
                    }
                }
            }
            QueryJudgmentIndex::build(
                query_id,
                merged.iter().map(|(_, docs)| docs.iter().copied()),
            )
        })
        .collect();
    Judgments::from_indexes(queries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::{NuggetQrels, QueryRecord};

    /// Rows with every case the merge rules cover: a question in two rows, a nugget id twice,
    /// a document in both lists and twice in one, numeric and escaped ids, a row without
    /// nuggets, extra fields.
    const ROWS: &str = r#"{"query_id": "q1", "query_title": "t", "nuggets": [{"_id": "q1_0", "text": "a", "relevant_corpus_ids": ["d1", "d2", "d1"], "non_relevant_corpus_ids": ["d3", "d2"]}, {"_id": "q1_1", "relevant_corpus_ids": ["d\u0034"]}]}

{"query_id": 7, "nuggets": [{"_id": 70, "relevant_corpus_ids": ["d1"], "non_relevant_corpus_ids": []}], "extra": {"x": [1, 2]}}
{"query_id": "q9", "nuggets": []}
{"query_id": "q1", "nuggets": [{"_id": "q1_0", "relevant_corpus_ids": ["d3", "d5"]}, {"_id": "q1_2", "non_relevant_corpus_ids": ["d6"]}]}
{"query_id": null, "nuggets": [{"_id": 1.5, "relevant_corpus_ids": ["x"]}]}
"#;

    #[test]
    fn lean_rows_give_the_same_judgments_as_query_records() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queries.jsonl");
        std::fs::write(&path, ROWS).unwrap();
        let fast = read_queries_jsonl(&path).unwrap();
        let records: Vec<QueryRecord> = crate::dataset::read_jsonl(&path).unwrap();
        let slow = Judgments::new(&NuggetQrels::from_queries(&records));
        assert_eq!(fast.queries, slow.queries);
        let ids: Vec<&str> = fast.query_ids().collect();
        assert_eq!(ids, ["q1", "7", ""]);
        assert_eq!(fast.queries[0].num_nuggets, 3);
        assert_eq!(fast.judged_anywhere(), slow.judged_anywhere());
    }

    #[test]
    fn bad_rows_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queries.jsonl");
        let cases = [
            "{\"query_id\": \"q\", \"nuggets\": []}\n\n{\"nuggets\": []}\n",
            "{\"query_id\": \"q\", \"nuggets\": [{\"_id\": \"n\", \"relevant_corpus_ids\": [3]}]}\n",
            "{\"query_id\": true}\n",
            "not json\n",
        ];
        for (case, line) in cases.iter().zip([3, 1, 1, 1]) {
            std::fs::write(&path, case).unwrap();
            let err = read_queries_jsonl(&path).unwrap_err().to_string();
            assert!(err.contains(&format!("queries.jsonl:{line}:")), "{err}");
            assert!(crate::dataset::read_jsonl::<QueryRecord>(&path).is_err());
        }
        std::fs::write(&path, b"{\"query_id\": \"\xff\"}\n").unwrap();
        assert!(
            read_queries_jsonl(&path)
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }
}
