//! Runs: a ranked list of scored documents per question, and the TREC run format
//! (`qid Q0 docid rank score tag`).
//!
//! Reading follows the reference's `load_runfile` so that evaluation sees the same input:
//! fields are split on any whitespace; a line with 7 or more fields has a doc id containing
//! spaces, taken as `fields[2..len-3]` joined by one space, with the score at `fields[len-2]`.
//! A document listed twice for a question keeps its first position and its last score (the
//! reference builds a Python dict). The rank column is ignored: metrics order by score.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use std::hash::{Hash, Hasher};

use rayon::prelude::*;
use rustc_hash::{FxHashMap, FxHasher};

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
    /// line. The run is named after the file stem.
    pub fn read_trec(path: impl AsRef<Path>) -> Result<Run> {
        let path = path.as_ref();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut run = Run::new(name);
        // The file is read in blocks cut at line ends; each block's lines are parsed in
        // parallel, then added in file order (so the run is the same whatever the threads).
        let size = file
            .metadata()
            .map(|m| m.len() as usize)
            .unwrap_or(READ_BLOCK_BYTES);
        let block = size.saturating_add(1).min(READ_BLOCK_BYTES);
        let mut buf: Vec<u8> = Vec::with_capacity(block + (1 << 16));
        let mut lines_before = 0usize;
        // Per parse chunk, reused from block to block (no fresh memory per block).
        let mut parsed: Vec<ParsedChunk> = Vec::new();
        loop {
            let eof = fill_block(&mut file, &mut buf, block).map_err(|e| Error::io(path, e))?;
            let end = if eof {
                buf.len()
            } else {
                match buf.iter().rposition(|&b| b == b'\n') {
                    Some(p) => p + 1,
                    // One line longer than a block: read on.
                    None => continue,
                }
            };
            let text = std::str::from_utf8(&buf[..end]).map_err(|e| {
                let line = count_lines(&buf[..e.valid_up_to()]);
                Error::parse(path, lines_before + line + 1, "not valid UTF-8")
            })?;
            let chunks = split_at_lines(text, PARSE_CHUNKS);
            if parsed.len() < chunks.len() {
                parsed.resize_with(chunks.len(), ParsedChunk::default);
            }
            chunks
                .par_iter()
                .zip(parsed.par_iter_mut())
                .for_each(|(chunk, out)| parse_chunk(chunk, out));
            for (chunk, out) in chunks.iter().zip(&parsed) {
                if let Some((line, message)) = &out.error {
                    return Err(Error::parse(path, lines_before + line, message.clone()));
                }
                for entry in &out.entries {
                    let query_id = &chunk[entry.query.0..entry.query.1];
                    let doc_id = if entry.doc_joined {
                        &out.joined[entry.doc.0..entry.doc.1]
                    } else {
                        &chunk[entry.doc.0..entry.doc.1]
                    };
                    run.push(query_id, doc_id, entry.score);
                }
                lines_before += out.lines;
            }
            buf.drain(..end);
            if eof {
                break;
            }
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

/// Bytes read (and parsed in parallel) at a time.
const READ_BLOCK_BYTES: usize = 8 << 20;
/// Pieces a block is cut into for parsing.
const PARSE_CHUNKS: usize = 16;

/// Reads until `buf` holds `block` more bytes or the file ends; true at end of file.
fn fill_block(file: &mut File, buf: &mut Vec<u8>, block: usize) -> std::io::Result<bool> {
    let target = buf.len() + block.max(1);
    while buf.len() < target {
        let start = buf.len();
        buf.resize(target, 0);
        let n = loop {
            match file.read(&mut buf[start..]) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        };
        buf.truncate(start + n);
        if n == 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

fn count_lines(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| b == b'\n').count()
}

/// Cuts `text` into about `pieces` parts, each ending at a line end (except maybe the last).
fn split_at_lines(text: &str, pieces: usize) -> Vec<&str> {
    let target = (text.len() / pieces.max(1)).max(1 << 16);
    let mut out = Vec::new();
    let mut rest = text;
    while rest.len() > target {
        match rest.as_bytes()[target..].iter().position(|&b| b == b'\n') {
            Some(p) => {
                let (head, tail) = rest.split_at(target + p + 1);
                out.push(head);
                rest = tail;
            }
            None => break,
        }
    }
    if !rest.is_empty() {
        out.push(rest);
    }
    out
}

/// One parsed line: byte ranges of its question id (in the chunk) and doc id (in the chunk, or
/// in [`ParsedChunk::joined`] for an id with spaces), and its score.
#[derive(Debug, Clone, Copy)]
struct Entry {
    query: (usize, usize),
    doc: (usize, usize),
    doc_joined: bool,
    score: f64,
}

/// The parsed lines of one chunk, the number of line ends in it, or its first error as
/// `(1-based line within the chunk, message)`. Reused across blocks.
#[derive(Debug, Default)]
struct ParsedChunk {
    entries: Vec<Entry>,
    joined: String,
    lines: usize,
    error: Option<(usize, String)>,
}

/// Parses one chunk of a TREC run into `out` (cleared first).
fn parse_chunk(chunk: &str, out: &mut ParsedChunk) {
    out.entries.clear();
    out.joined.clear();
    out.error = None;
    let base = chunk.as_ptr() as usize;
    let span = |field: &str| -> (usize, usize) {
        let start = field.as_ptr() as usize - base;
        (start, start + field.len())
    };
    let mut fields: Vec<&str> = Vec::with_capacity(8);
    let mut lines = 0usize;
    for line in chunk.split('\n') {
        lines += 1;
        split_fields(line, &mut fields);
        if fields.is_empty() {
            continue;
        }
        let len = fields.len();
        if len < 6 {
            out.error = Some((
                lines,
                format!("expected 6 fields `qid Q0 docid rank score tag`, got {len}"),
            ));
            return;
        }
        let (doc, doc_joined, score_text) = if len >= 7 {
            let start = out.joined.len();
            for (i, part) in fields[2..len - 3].iter().enumerate() {
                if i > 0 {
                    out.joined.push(' ');
                }
                out.joined.push_str(part);
            }
            ((start, out.joined.len()), true, fields[len - 2])
        } else {
            (span(fields[2]), false, fields[4])
        };
        let Some(score) = parse_score(score_text) else {
            out.error = Some((
                lines,
                format!("score: expected a number, got `{score_text}`"),
            ));
            return;
        };
        out.entries.push(Entry {
            query: span(fields[0]),
            doc,
            doc_joined,
            score,
        });
    }
    // `split` yields one piece more than there are line ends.
    out.lines = lines - 1;
}

/// Python's `str.split()`: fields separated by runs of whitespace (Python's whitespace, which
/// includes the ASCII separators 0x1C..0x1F). ASCII lines, the usual case, take a byte loop.
fn split_fields<'a>(line: &'a str, out: &mut Vec<&'a str>) {
    fn is_space(b: u8) -> bool {
        matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f)
    }
    /// True when all 8 bytes are printable ASCII (0x21..=0x7f): none can end a field or need
    /// the Unicode path, so the scan may skip the word (bit trick "hasless(x, 0x21)").
    fn plain_word(word: u64) -> bool {
        const ONES: u64 = u64::MAX / 255;
        let below_0x21 = word.wrapping_sub(ONES * 0x21) & !word & (ONES * 0x80);
        below_0x21 == 0 && word & (ONES * 0x80) == 0
    }
    out.clear();
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        while i < bytes.len() && is_space(bytes[i]) {
            i += 1;
        }
        let start = i;
        while i < bytes.len() {
            if let Some(word) = bytes.get(i..i + 8) {
                let mut array = [0u8; 8];
                array.copy_from_slice(word);
                if plain_word(u64::from_le_bytes(array)) {
                    i += 8;
                    continue;
                }
            }
            let b = bytes[i];
            if b >= 0x80 {
                // Not ASCII: Python's Unicode whitespace rules, on the whole line.
                out.clear();
                out.extend(
                    line.split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
                        .filter(|f| !f.is_empty()),
                );
                return;
            }
            if is_space(b) {
                break;
            }
            i += 1;
        }
        if start < i {
            out.push(&line[start..i]);
        }
    }
}

fn doc_hash(doc_id: &str) -> u64 {
    let mut hasher = FxHasher::default();
    doc_id.hash(&mut hasher);
    hasher.finish()
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

    proptest::proptest! {
        #[test]
        fn fast_split_equals_unicode_split(line in "[a-z0-9_./ \t\u{1c}\u{1f}\u{7f}\u{a0}é\x00-]{0,80}") {
            let mut fast = Vec::new();
            split_fields(&line, &mut fast);
            let slow: Vec<&str> = line
                .split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
                .filter(|f| !f.is_empty())
                .collect();
            proptest::prop_assert_eq!(fast, slow);
        }
    }

    #[test]
    fn fields_split_like_python() {
        let mut f = Vec::new();
        split_fields(" a\tb\x1cc  d\r", &mut f);
        assert_eq!(f, ["a", "b", "c", "d"]);
        split_fields("q\u{a0}é  x", &mut f);
        assert_eq!(f, ["q", "é", "x"]);
        split_fields("abcdefghijklmnop qrstuvwxyz0123456789\tq\u{7f}", &mut f);
        assert_eq!(f, ["abcdefghijklmnop", "qrstuvwxyz0123456789", "q\u{7f}"]);
        split_fields("a_long_doc_id_x\u{a0}y_more_bytes_here 2", &mut f);
        assert_eq!(f, ["a_long_doc_id_x", "y_more_bytes_here", "2"]);
        split_fields("a\x00b c", &mut f);
        assert_eq!(f, ["a\x00b", "c"]);
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
