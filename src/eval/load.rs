//! Judgments straight from a dataset's `queries.jsonl`, the fast way: each row is parsed (in
//! parallel) into a borrowed view of the [`Question`](crate::dataset::Question) holding only the
//! fields evaluation needs, ids borrowed from the file text (read by the data model's one id
//! reader), and indexed without the intermediate [`NuggetQrels`](crate::dataset::NuggetQrels).
//!
//! Same result as `NuggetQrels::from_queries` on [`Question`](crate::dataset::Question)s
//! (tested): rows of one question are merged in order of first appearance, nuggets of one id
//! merged within a question, relevant documents labelled 1 and then non-relevant ones 0 (so a
//! document in both lists ends up 0), a question without nuggets left out. Fields evaluation does
//! not read (titles, texts, answers, metadata) are skipped without being checked.

use std::borrow::Cow;
use std::path::Path;

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::Deserialize;

use super::judgments::{Judgments, QueryJudgmentIndex};
use crate::dataset::borrowed_id;
use crate::error::{Error, Result};

/// A string id, borrowed from the line when it has no escapes.
#[derive(Debug, Deserialize)]
struct Id<'a>(#[serde(borrow)] Cow<'a, str>);

/// A borrowed view of a `queries.jsonl` row: the fields judgments need.
#[derive(Debug, Deserialize)]
struct QuestionView<'a> {
    #[serde(borrow, deserialize_with = "borrowed_id")]
    query_id: Cow<'a, str>,
    #[serde(default, borrow)]
    nuggets: Vec<NuggetView<'a>>,
}

/// A borrowed view of one nugget of a [`QuestionView`].
#[derive(Debug, Deserialize)]
struct NuggetView<'a> {
    #[serde(rename = "_id", borrow, deserialize_with = "borrowed_id")]
    id: Cow<'a, str>,
    #[serde(default, borrow)]
    relevant_corpus_ids: Vec<Id<'a>>,
    #[serde(default, borrow)]
    non_relevant_corpus_ids: Vec<Id<'a>>,
}

/// Reads the judgments of a dataset's `queries.jsonl` (see the module docs).
pub(crate) fn read_queries_jsonl(path: &Path) -> Result<Judgments> {
    let bytes = crate::dataset::bounded::read_line_text(path).map_err(|e| Error::io(path, e))?;
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
    let rows: Vec<std::result::Result<QuestionView, (usize, String)>> = lines
        .par_iter()
        .map(|&(i, line)| {
            serde_json::from_str::<QuestionView>(line).map_err(|e| (i + 1, e.to_string()))
        })
        .collect();
    let mut parsed = Vec::with_capacity(rows.len());
    for row in rows {
        match row {
            Ok(row) => parsed.push(row),
            Err((line, message)) => return Err(Error::parse(path, line, message)),
        }
    }
    warn_repeated_ids(path, &parsed, &lines);
    Ok(judgments_from_rows(&parsed))
}

/// Rows of one question are merged (no judgment is lost: the reference's loader does the same),
/// but a repeated `query_id` is more often two exports concatenated than one question split in
/// two: one warning names the first repeat's line.
fn warn_repeated_ids(path: &Path, rows: &[QuestionView<'_>], lines: &[(usize, &str)]) {
    let mut first_line: FxHashMap<&str, usize> = FxHashMap::default();
    let mut first_repeat = None;
    let mut repeats = 0usize;
    for (row, &(i, _)) in rows.iter().zip(lines) {
        if let Some(&first) = first_line.get(row.query_id.as_ref()) {
            repeats += 1;
            first_repeat.get_or_insert((i + 1, row.query_id.as_ref(), first));
        } else {
            first_line.insert(row.query_id.as_ref(), i + 1);
        }
    }
    if let Some((line, id, first)) = first_repeat {
        tracing::warn!(
            "{}:{line}: query_id {id:?} repeats line {first}; the rows of a question are merged \
             ({repeats} repeated row(s) in the file)",
            path.display()
        );
    }
}

/// Merges rows by question and indexes each question (in parallel, order kept).
fn judgments_from_rows(rows: &[QuestionView<'_>]) -> Judgments {
    let mut groups: Vec<(&str, Vec<&NuggetView>)> = Vec::new();
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
    use crate::dataset::{NuggetQrels, Question};

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
    fn borrowed_views_give_the_same_judgments_as_questions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queries.jsonl");
        std::fs::write(&path, ROWS).unwrap();
        let fast = read_queries_jsonl(&path).unwrap();
        let records: Vec<Question> = crate::dataset::read_jsonl(&path).unwrap();
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
            assert!(crate::dataset::read_jsonl::<Question>(&path).is_err());
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
