//! Runs: a ranked list of scored documents per question, and the TREC run format
//! (`qid Q0 docid rank score tag`).
//!
//! Reading follows the reference's `load_runfile` so that evaluation sees the same input:
//! fields are split on any whitespace; a line with 7 or more fields has a doc id containing
//! spaces, taken as `fields[2..len-3]` joined by one space, with the score at `fields[len-2]`.
//! A document listed twice for a question keeps its first position and its last score (the
//! reference builds a Python dict). The rank column is ignored: metrics order by score.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use rustc_hash::FxHashMap;

use super::jsonl::AtomicWriter;
use crate::error::{Error, Result};

/// One retrieved document and its retrieval score.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoredDoc {
    /// The document id (corpus `_id`).
    pub doc_id: String,
    /// Higher is better.
    pub score: f64,
}

/// The ranked list of one question, in input order (not necessarily sorted by score).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ranking {
    /// The question id.
    pub query_id: String,
    /// Documents in the order they were added; no doc id twice.
    pub docs: Vec<ScoredDoc>,
}

/// A run: one [`Ranking`] per question, questions in order of first appearance.
#[derive(Debug, Clone, Default)]
pub struct Run {
    /// A display name (for a file, its stem).
    pub name: String,
    rankings: Vec<Ranking>,
    by_query: HashMap<String, usize>,
    /// Per ranking, doc id -> position, to merge duplicates while loading; dropped by `shrink`.
    positions: Vec<Option<FxHashMap<String, usize>>>,
    duplicates: usize,
}

impl Run {
    /// An empty run called `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..Self::default()
        }
    }

    /// Adds `doc_id` with `score` to `query_id`'s ranking. A doc already present keeps its
    /// position and takes the new score (the reference's dict semantics).
    pub fn push(&mut self, query_id: &str, doc_id: &str, score: f64) {
        let index = match self.by_query.get(query_id) {
            Some(&i) => i,
            None => {
                let i = self.rankings.len();
                self.by_query.insert(query_id.to_string(), i);
                self.rankings.push(Ranking {
                    query_id: query_id.to_string(),
                    docs: Vec::new(),
                });
                self.positions.push(None);
                i
            }
        };
        let ranking = &mut self.rankings[index];
        let positions = self.positions[index].get_or_insert_with(FxHashMap::default);
        match positions.get(doc_id) {
            Some(&p) => {
                ranking.docs[p].score = score;
                self.duplicates += 1;
            }
            None => {
                positions.insert(doc_id.to_string(), ranking.docs.len());
                ranking.docs.push(ScoredDoc {
                    doc_id: doc_id.to_string(),
                    score,
                });
            }
        }
    }

    /// The ranking of `query_id`, if the run has one.
    pub fn get(&self, query_id: &str) -> Option<&Ranking> {
        self.by_query.get(query_id).map(|&i| &self.rankings[i])
    }

    /// All rankings, questions in order of first appearance.
    pub fn rankings(&self) -> &[Ranking] {
        &self.rankings
    }

    /// Number of questions.
    pub fn len(&self) -> usize {
        self.rankings.len()
    }

    /// True when the run has no question.
    pub fn is_empty(&self) -> bool {
        self.rankings.is_empty()
    }

    /// How many pushes named a document already in its question's ranking.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// Drops the lookup tables used to merge duplicates (frees memory once loading is done).
    pub fn shrink(&mut self) {
        for p in &mut self.positions {
            *p = None;
        }
    }

    /// Reads a TREC run file (see the module docs for the exact rules). Blank lines are skipped;
    /// a line with fewer than 6 fields or a score that is not a number is an error naming the
    /// line. The run is named after the file stem.
    pub fn read_trec(path: impl AsRef<Path>) -> Result<Run> {
        let path = path.as_ref();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let line = e.as_bytes()[..e.utf8_error().valid_up_to()]
                .iter()
                .filter(|&&b| b == b'\n')
                .count();
            Error::parse(path, line + 1, "not valid UTF-8")
        })?;
        let mut run = Run::new(name);
        let mut fields: Vec<&str> = Vec::with_capacity(8);
        let mut joined = String::new();
        for (line_index, line) in text.lines().enumerate() {
            let line_no = line_index + 1;
            fields.clear();
            fields.extend(line.split_whitespace());
            if fields.is_empty() {
                continue;
            }
            if fields.len() < 6 {
                return Err(Error::parse(
                    path,
                    line_no,
                    format!(
                        "expected 6 fields `qid Q0 docid rank score tag`, got {}",
                        fields.len()
                    ),
                ));
            }
            let len = fields.len();
            let (doc_id, score_text): (&str, &str) = if len >= 7 {
                joined.clear();
                for (i, part) in fields[2..len - 3].iter().enumerate() {
                    if i > 0 {
                        joined.push(' ');
                    }
                    joined.push_str(part);
                }
                (joined.as_str(), fields[len - 2])
            } else {
                (fields[2], fields[4])
            };
            let score = parse_score(score_text).ok_or_else(|| {
                Error::parse(
                    path,
                    line_no,
                    format!("score: expected a number, got `{score_text}`"),
                )
            })?;
            run.push(fields[0], doc_id, score);
        }
        run.shrink();
        Ok(run)
    }

    /// Writes the run in TREC format, atomically: per question (in run order) documents by
    /// descending score (ties keep input order), ranks from 1, at most `top_k` per question.
    pub fn write_trec(&self, path: impl AsRef<Path>, tag: &str, top_k: usize) -> Result<()> {
        let mut writer = AtomicWriter::create(path)?;
        let path = writer.path().to_path_buf();
        for ranking in &self.rankings {
            let mut order: Vec<&ScoredDoc> = ranking.docs.iter().collect();
            order.sort_by(|a, b| score_key(b.score).total_cmp(&score_key(a.score)));
            for (rank, doc) in order.into_iter().take(top_k).enumerate() {
                writeln!(
                    writer,
                    "{} Q0 {} {} {} {}",
                    ranking.query_id,
                    doc.doc_id,
                    rank + 1,
                    doc.score,
                    tag
                )
                .map_err(|e| Error::io(&path, e))?;
            }
        }
        writer.commit()
    }
}

/// A score as a sort key: `-0.0` and `0.0` compare equal (as in Python and C).
pub fn score_key(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
}

/// Parses a score like Python's `float()` for the forms run files use; NaN is refused (it has
/// no place in a ranking).
fn parse_score(text: &str) -> Option<f64> {
    let value: f64 = text.parse().ok()?;
    if value.is_nan() { None } else { Some(value) }
}

impl FromIterator<(String, String, f64)> for Run {
    /// Builds an unnamed run from `(query_id, doc_id, score)` triples.
    fn from_iter<I: IntoIterator<Item = (String, String, f64)>>(iter: I) -> Self {
        let mut run = Run::new("run");
        for (q, d, s) in iter {
            run.push(&q, &d, s);
        }
        run.shrink();
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Run> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bm25.trec");
        std::fs::write(&path, text).unwrap();
        Run::read_trec(&path)
    }

    #[test]
    fn reads_plain_lines_in_order() {
        let run = read("q2 Q0 d1 1 3.5 t\nq1 Q0 d9 1 2 t\nq2 Q0 d0 2 1e-3 t\n").unwrap();
        assert_eq!(run.name, "bm25");
        assert_eq!(run.len(), 2);
        let q2 = run.get("q2").unwrap();
        assert_eq!(q2.docs[0].doc_id, "d1");
        assert_eq!(q2.docs[1].score, 0.001);
        assert_eq!(run.rankings()[1].query_id, "q1");
    }

    #[test]
    fn doc_ids_with_spaces_are_joined_like_the_reference() {
        let run = read("q1 Q0 my  doc\tname.md_0_10 1 0.5 tag\n").unwrap();
        let doc = &run.get("q1").unwrap().docs[0];
        assert_eq!(doc.doc_id, "my doc name.md_0_10");
        assert_eq!(doc.score, 0.5);
    }

    #[test]
    fn duplicate_doc_keeps_first_position_and_last_score() {
        let run = read("q1 Q0 a 1 1 t\nq1 Q0 b 2 0.5 t\nq1 Q0 a 3 0.1 t\n").unwrap();
        let docs = &run.get("q1").unwrap().docs;
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].doc_id, "a");
        assert_eq!(docs[0].score, 0.1);
        assert_eq!(run.duplicates(), 1);
    }

    #[test]
    fn short_line_and_bad_score_name_the_line() {
        let err = read("q1 Q0 a 1 1 t\n\nq1 Q0 b 2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bm25.trec:3:"), "{err}");
        let err = read("q1 Q0 a 1 high t\n").unwrap_err().to_string();
        assert!(err.contains(":1:") && err.contains("score"), "{err}");
        assert!(read("q1 Q0 a 1 nan t\n").is_err());
    }

    #[test]
    fn write_then_read_round_trips() {
        let run: Run = vec![
            ("q1".to_string(), "b".to_string(), 0.5),
            ("q1".to_string(), "a".to_string(), 2.0),
        ]
        .into_iter()
        .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.trec");
        run.write_trec(&path, "x", 10).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "q1 Q0 a 1 2 x\nq1 Q0 b 2 0.5 x\n");
        let back = Run::read_trec(&path).unwrap();
        assert_eq!(back.get("q1").unwrap().docs.len(), 2);
    }
}
