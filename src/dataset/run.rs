//! Runs: a ranked list of scored documents per question, and the TREC run format
//! (`qid Q0 docid rank score tag`) with its one writer, [`write_trec_rankings`].
//!
//! Reading follows the reference's `load_runfile` so that evaluation sees the same input:
//! fields are split on any whitespace; a line with 7 or more fields has a doc id containing
//! spaces, taken as `fields[2..len-3]` joined by one space, with the score at `fields[len-2]`.
//! A document listed twice for a question keeps its first position and its last score (the
//! reference builds a Python dict). The rank column is ignored: metrics order by score.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::io::Write as _;
use std::path::Path;

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHasher};

use super::atomic::AtomicWriter;
use super::run_file::{DocRef, Rankings, RunFile};
use crate::error::{Error, Result, Setting};

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
    /// Per ranking, hash of doc id -> position, to merge duplicates while loading (a hash hit
    /// is verified against the stored id; a collision falls back to a scan); dropped by
    /// `shrink`.
    positions: Vec<Option<FxHashMap<u64, u32>>>,
    duplicates: usize,
    /// The ranking pushed to last: consecutive lines of one question skip the id lookup.
    last: Option<usize>,
    /// Expected ranking length (the last ranking's), to size new duplicate maps.
    capacity_hint: usize,
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
        let index = match self.last {
            Some(i) if self.rankings[i].query_id == query_id => i,
            last => match self.by_query.get(query_id) {
                Some(&i) => i,
                None => {
                    if let Some(previous) = last {
                        self.capacity_hint = self.rankings[previous].docs.len();
                    }
                    let i = self.rankings.len();
                    self.by_query.insert(query_id.to_string(), i);
                    self.rankings.push(Ranking {
                        query_id: query_id.to_string(),
                        docs: Vec::with_capacity(self.capacity_hint),
                    });
                    self.positions.push(None);
                    i
                }
            },
        };
        self.last = Some(index);
        let ranking = &mut self.rankings[index];
        let capacity = self.capacity_hint;
        let positions = self.positions[index].get_or_insert_with(|| {
            // After `shrink` (or for a new question): index what is already there; size it like
            // the previous question's ranking (runs are usually uniform).
            let mut map = FxHashMap::with_capacity_and_hasher(capacity, Default::default());
            for (p, d) in ranking.docs.iter().enumerate() {
                map.entry(doc_hash(&d.doc_id)).or_insert(p as u32);
            }
            map
        });
        let hash = doc_hash(doc_id);
        let existing = match positions.get(&hash) {
            Some(&p) if ranking.docs[p as usize].doc_id == doc_id => Some(p as usize),
            // A different id with the same hash: find it (or not) the slow way.
            Some(_) => ranking.docs.iter().position(|d| d.doc_id == doc_id),
            None => None,
        };
        match existing {
            Some(p) => {
                ranking.docs[p].score = score;
                self.duplicates += 1;
            }
            None => {
                positions.entry(hash).or_insert(ranking.docs.len() as u32);
                ranking.docs.push(ScoredDoc {
                    doc_id: doc_id.to_string(),
                    score,
                });
            }
        }
    }

    /// Adds a whole ranking of distinct documents for `query_id` at once, without the per-push
    /// duplicate bookkeeping (fusion and retrieval produce distinct ids). Falls back to
    /// [`Run::push`] per document when the run already has this question.
    pub fn push_ranking(&mut self, query_id: &str, docs: Vec<ScoredDoc>) {
        if self.by_query.contains_key(query_id) {
            for doc in docs {
                self.push(query_id, &doc.doc_id, doc.score);
            }
            return;
        }
        let i = self.rankings.len();
        self.by_query.insert(query_id.to_string(), i);
        self.rankings.push(Ranking {
            query_id: query_id.to_string(),
            docs,
        });
        // Built lazily by `push` if this question ever gets another document.
        self.positions.push(None);
        self.last = Some(i);
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
        self.last = None;
    }

    /// Reads a TREC run file (see the module docs for the exact rules). Blank lines are skipped;
    /// a line with fewer than 6 fields or a score that is not a number is an error naming the
    /// line. The run is named after the file stem. (Read-only users can keep the
    /// [`RunFile`] instead and skip the per-document strings.)
    pub fn read_trec(path: impl AsRef<Path>) -> Result<Run> {
        Ok(RunFile::read(path)?.to_run())
    }

    /// Writes the run in TREC format, atomically: per question (in run order) documents by
    /// descending score (ties keep input order), ranks from 1, at most `top_k` per question,
    /// scores as [`ScoreText::F64`] (see [`write_trec_rankings`]).
    pub fn write_trec(&self, path: impl AsRef<Path>, tag: &str, top_k: usize) -> Result<()> {
        write_trec_rankings(self, path, tag, top_k, ScoreText::F64)
    }

    /// A run made of already merged rankings (distinct question ids, distinct doc ids each).
    pub(crate) fn from_rankings(name: String, rankings: Vec<Ranking>, duplicates: usize) -> Run {
        let by_query = rankings
            .iter()
            .enumerate()
            .map(|(i, r)| (r.query_id.clone(), i))
            .collect();
        Run {
            name,
            positions: vec![None; rankings.len()],
            rankings,
            by_query,
            duplicates,
            last: None,
            capacity_hint: 0,
        }
    }
}

impl Rankings for Run {
    fn run_name(&self) -> &str {
        &self.name
    }
    fn num_rankings(&self) -> usize {
        self.rankings.len()
    }
    fn ranking_query_id(&self, index: usize) -> &str {
        &self.rankings[index].query_id
    }
    fn ranking_docs(&self, index: usize) -> Vec<DocRef<'_>> {
        self.rankings[index].doc_refs()
    }
    fn extend_ranking_docs<'s>(&'s self, index: usize, out: &mut Vec<DocRef<'s>>) {
        out.extend(self.rankings[index].docs.iter().map(|d| DocRef {
            doc_id: &d.doc_id,
            score: d.score,
        }));
    }
    fn find_query(&self, query_id: &str) -> Option<usize> {
        self.by_query.get(query_id).copied()
    }
}

impl Ranking {
    /// The documents as borrowed [`DocRef`]s, in order.
    pub fn doc_refs(&self) -> Vec<DocRef<'_>> {
        self.docs
            .iter()
            .map(|d| DocRef {
                doc_id: &d.doc_id,
                score: d.score,
            })
            .collect()
    }
}

/// How [`write_trec_rankings`] prints scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ScoreText {
    /// The shortest text that reads back as the same `f64`: fused, reranked and read runs.
    #[default]
    F64,
    /// The shortest text that reads back as the same `f32`, for scores computed in `f32` and
    /// widened to `f64` (the engine's BM25 and inner products): what `retrieve` writes, so a
    /// score reads `12.345678`, not the widened `12.345678329467773`.
    F32,
}

/// The one TREC writer. Writes any [`Rankings`] atomically: per question (in run order)
/// documents by descending score (ties keep input order), ranks from 1, at most `top_k` per
/// question, scores printed as `scores` says. Lines are formatted in parallel, a batch of
/// questions at a time, and written in order.
pub fn write_trec_rankings<R: Rankings + ?Sized>(
    run: &R,
    path: impl AsRef<Path>,
    tag: &str,
    top_k: usize,
    scores: ScoreText,
) -> Result<()> {
    const BATCH: usize = 256;
    let mut writer = AtomicWriter::create(path)?;
    let path = writer.path().to_path_buf();
    let n = run.num_rankings();
    for first in (0..n).step_by(BATCH) {
        let texts: Vec<String> = (first..(first + BATCH).min(n))
            .into_par_iter()
            .map(|i| {
                let mut docs = run.ranking_docs(i);
                docs.sort_by(|a, b| score_key(b.score).total_cmp(&score_key(a.score)));
                let query_id = run.ranking_query_id(i);
                let mut text = String::new();
                for (rank, doc) in docs.iter().take(top_k).enumerate() {
                    text.push_str(query_id);
                    text.push_str(" Q0 ");
                    text.push_str(doc.doc_id);
                    text.push(' ');
                    push_score(&mut text, (rank + 1) as f64);
                    text.push(' ');
                    match scores {
                        ScoreText::F64 => push_score(&mut text, doc.score),
                        // Writing to a String cannot fail.
                        ScoreText::F32 => {
                            let _ = write!(text, "{}", doc.score as f32);
                        }
                    }
                    text.push(' ');
                    text.push_str(tag);
                    text.push('\n');
                }
                text
            })
            .collect();
        for text in texts {
            writer
                .write_all(text.as_bytes())
                .map_err(|e| Error::io(&path, e))?;
        }
    }
    writer.commit()
}

fn doc_hash(doc_id: &str) -> u64 {
    let mut hasher = FxHasher::default();
    doc_id.hash(&mut hasher);
    hasher.finish()
}

/// Appends `value` as `{}` formats it (the shortest text that reads back as the same double).
/// A value below 2^20 in magnitude that is the double nearest to a decimal with at most 6
/// places is written from that decimal directly: no other text of at most as many digits reads
/// back as it (its ulp is below 10^-8), so it is the shortest, and Rust prints it without an
/// exponent. Anything else goes through `{}`.
pub(crate) fn push_score(text: &mut String, value: f64) {
    const POW10: [f64; 7] = [1.0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6];
    if value.is_finite() && value.abs() < 1_048_576.0 {
        for (places, &scale) in POW10.iter().enumerate() {
            // The nearest integer, rounding half away from zero, without a libm call; any
            // candidate is checked just below.
            let scaled = ((value.abs() * scale + 0.5) as u64 as f64).copysign(value);
            if scaled / scale == value {
                let digits = scaled.abs() as u64;
                let scale = scale as u64;
                if value.is_sign_negative() {
                    text.push('-');
                }
                push_digits(text, digits / scale, 1);
                let fraction = digits % scale;
                if fraction > 0 {
                    text.push('.');
                    let mut width = places;
                    let mut fraction = fraction;
                    while fraction.is_multiple_of(10) {
                        fraction /= 10;
                        width -= 1;
                    }
                    push_digits(text, fraction, width);
                }
                return;
            }
        }
    }
    // Writing to a String cannot fail.
    let _ = write!(text, "{value}");
}

/// Appends `n` in decimal, left-padded with zeros to `width` digits.
fn push_digits(text: &mut String, mut n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    while n > 0 || buf.len() - i < width {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
    }
    text.extend(buf[i..].iter().map(|&b| b as char));
}

/// Checks a TREC run tag: one word (the last column of a line).
pub fn check_trec_tag(tag: &str) -> Result<()> {
    if tag.is_empty() || tag.contains(char::is_whitespace) {
        return Err(Error::invalid(
            Setting::Tag,
            format!("{tag:?}: must be one word"),
        ));
    }
    Ok(())
}

/// A score as a sort key: `-0.0` and `0.0` compare equal (as in Python and C).
pub fn score_key(score: f64) -> f64 {
    if score == 0.0 { 0.0 } else { score }
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

    #[test]
    fn push_ranking_then_push_keeps_dict_semantics() {
        let doc = |id: &str, score| ScoredDoc {
            doc_id: id.to_string(),
            score,
        };
        let mut run = Run::new("r");
        run.push_ranking("q", vec![doc("a", 2.0), doc("b", 1.0)]);
        run.push("q", "a", 5.0);
        run.push("q", "c", 0.5);
        run.push_ranking("q", vec![doc("b", 3.0)]);
        let docs = &run.get("q").unwrap().docs;
        assert_eq!(docs, &vec![doc("a", 5.0), doc("b", 3.0), doc("c", 0.5)]);
        assert_eq!(run.duplicates(), 2);
    }

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
    fn long_files_keep_order_and_line_numbers() {
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("q{} Q0 doc{i} {i} {} t\n", i % 3, 20_000 - i));
        }
        let run = read(&text).unwrap();
        assert_eq!(run.len(), 3);
        assert_eq!(run.get("q1").unwrap().docs[2].doc_id, "doc7");
        assert_eq!(run.get("q1").unwrap().docs.len(), 6667);
        text.push_str("q1 Q0 late 1 oops t\n");
        let err = read(&text).unwrap_err().to_string();
        assert!(err.contains(":20001:"), "{err}");
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
        // Pushing after loading still merges.
        let mut run = run;
        run.push("q1", "b", 9.0);
        assert_eq!(run.get("q1").unwrap().docs.len(), 2);
        assert_eq!(run.get("q1").unwrap().docs[1].score, 9.0);
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

    proptest::proptest! {
        #[test]
        fn scores_are_written_as_display_writes_them(
            m in -2_000_000_000i64..2_000_000_000,
            places in 0u32..9,
            bits in proptest::num::u64::ANY,
        ) {
            for value in [m as f64 / 10f64.powi(places as i32), f64::from_bits(bits)] {
                let mut text = String::new();
                push_score(&mut text, value);
                proptest::prop_assert_eq!(text, format!("{value}"));
            }
        }
    }

    #[test]
    fn score_text_edge_cases() {
        for value in [
            0.0,
            -0.0,
            1.0,
            0.001,
            -0.5,
            100.0,
            0.1 + 0.2,
            1e-7,
            1048575.999999,
            3e20,
        ] {
            let mut text = String::new();
            push_score(&mut text, value);
            assert_eq!(text, format!("{value}"));
        }
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

    #[test]
    fn f32_scores_print_as_f32() {
        let run: Run = vec![("q1".to_string(), "a".to_string(), f64::from(12.345_678_f32))]
            .into_iter()
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.trec");
        write_trec_rankings(&run, &path, "x", 10, ScoreText::F32).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, "q1 Q0 a 1 12.345678 x\n");
        run.write_trec(&path, "x", 10).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text, format!("q1 Q0 a 1 {} x\n", f64::from(12.345_678_f32)));
        assert!(check_trec_tag("a b").is_err() && check_trec_tag("").is_err());
    }
}
