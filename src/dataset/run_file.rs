//! A TREC run file loaded for read-only use ([`RunFile`]): the fast path of `eval` and `fuse`.
//!
//! The whole file is kept as one string and every question and document id is a byte span into
//! it (an id containing spaces is joined into a side string), so loading allocates per question,
//! not per line. The file is cut into chunks at line ends; chunks are parsed in parallel, their
//! lines merged in file order, and each question's duplicates merged in parallel, so the result
//! does not depend on the thread count.
//!
//! The rules are the reference's `load_runfile` (see [`Run`](super::Run)): lines end at `\n`,
//! `\r\n` or a lone `\r` (Python's universal newlines); fields are split on Python's whitespace;
//! a line with 7 or more fields has a doc id containing spaces, `fields[2..len-3]` joined by one
//! space, with the score at `fields[len-2]`; a document listed twice for a question keeps its
//! first position and its last score. Blank lines are skipped; a line with fewer than 6 fields, a
//! score that is not a number (or NaN) or invalid UTF-8 is an error naming the line.

use std::path::Path;

use memchr::memchr2;
use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::error::{Error, Result};

/// A borrowed document of a ranking: its id and retrieval score.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DocRef<'a> {
    /// The document id.
    pub doc_id: &'a str,
    /// Higher is better.
    pub score: f64,
}

/// Read access to the rankings of a run, whatever holds them ([`Run`](super::Run) with owned
/// strings, [`RunFile`] with spans into the loaded file). Evaluation and fusion take any of them.
pub trait Rankings: Sync {
    /// The run's display name.
    fn run_name(&self) -> &str;
    /// Number of questions.
    fn num_rankings(&self) -> usize;
    /// The question id of ranking `index` (`index < num_rankings()`).
    fn ranking_query_id(&self, index: usize) -> &str;
    /// The documents of ranking `index`, in input order (no doc id twice).
    fn ranking_docs(&self, index: usize) -> Vec<DocRef<'_>>;
    /// The index of `query_id`'s ranking, if the run has one.
    fn find_query(&self, query_id: &str) -> Option<usize>;
}

/// Flag in [`DocSpan::pos`]: the id lives in [`RunFile::joined`], not in the file text.
const JOINED: u64 = 1 << 63;

/// One document of a question: where its id is, and its score.
#[derive(Debug, Clone, Copy)]
struct DocSpan {
    /// Byte offset of the id in the text (or, with [`JOINED`] set, in the joined ids).
    pos: u64,
    len: u32,
    score: f64,
}

/// A question: its id's span in the text, and its documents in first-appearance order.
#[derive(Debug)]
struct QueryDocs {
    id: (usize, usize),
    docs: Vec<DocSpan>,
}

/// A TREC run file in memory, questions in order of first appearance.
#[derive(Debug)]
pub struct RunFile {
    name: String,
    text: String,
    joined: String,
    queries: Vec<QueryDocs>,
    by_query: FxHashMap<Box<str>, u32>,
    duplicates: usize,
}

impl RunFile {
    /// Reads and parses the TREC run at `path`, named after the file stem.
    pub fn read(path: impl AsRef<Path>) -> Result<RunFile> {
        let path = path.as_ref();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        Self::parse_bytes(name, bytes, path)
    }

    /// Parses TREC run text held in memory; errors name `name` as the file.
    pub fn parse(name: impl Into<String>, text: impl Into<String>) -> Result<RunFile> {
        let name = name.into();
        let path = std::path::PathBuf::from(&name);
        Self::parse_text(name, text.into(), &path)
    }

    fn parse_bytes(name: String, bytes: Vec<u8>, path: &Path) -> Result<RunFile> {
        let text = String::from_utf8(bytes).map_err(|e| {
            let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
            Error::parse(path, count_lines(valid) + 1, "not valid UTF-8")
        })?;
        Self::parse_text(name, text, path)
    }

    fn parse_text(name: String, text: String, path: &Path) -> Result<RunFile> {
        let pieces = 4 * rayon::current_num_threads();
        let chunks = split_at_lines(&text, pieces);
        let parsed: Vec<ParsedChunk> = chunks
            .par_iter()
            .map(|&(start, end)| parse_chunk(&text, start, end))
            .collect();
        // The first error in file order wins.
        let mut lines_before = 0usize;
        for chunk in &parsed {
            if let Some((line, message)) = &chunk.error {
                return Err(Error::parse(path, lines_before + line, message.clone()));
            }
            lines_before += chunk.lines;
        }
        // Joined ids of every chunk, one after the other.
        let mut joined = String::new();
        let mut joined_base = Vec::with_capacity(parsed.len());
        for chunk in &parsed {
            joined_base.push(joined.len() as u64);
            joined.push_str(&chunk.joined);
        }
        // Questions in order of first appearance; each gathers its line segments.
        let mut index: FxHashMap<&str, u32> = FxHashMap::default();
        let mut parts: Vec<((usize, usize), Vec<(u32, u32, u32)>)> = Vec::new();
        for (ci, chunk) in parsed.iter().enumerate() {
            let mut start = 0u32;
            for segment in &chunk.segments {
                let id = &text[segment.query.0..segment.query.1];
                let qi = *index.entry(id).or_insert_with(|| {
                    parts.push((segment.query, Vec::new()));
                    (parts.len() - 1) as u32
                });
                parts[qi as usize].1.push((ci as u32, start, segment.end));
                start = segment.end;
            }
        }
        let resolve = |d: &DocSpan| -> &str {
            if d.pos & JOINED != 0 {
                let start = (d.pos & !JOINED) as usize;
                &joined[start..start + d.len as usize]
            } else {
                let start = d.pos as usize;
                &text[start..start + d.len as usize]
            }
        };
        let built: Vec<(QueryDocs, usize)> =
            parts
                .par_iter()
                .map_init(FxHashMap::default, |seen, (id, segments)| {
                    let total: usize = segments.iter().map(|&(_, s, e)| (e - s) as usize).sum();
                    let mut docs = Vec::with_capacity(total);
                    for &(ci, s, e) in segments {
                        let base = joined_base[ci as usize];
                        docs.extend(parsed[ci as usize].docs[s as usize..e as usize].iter().map(
                            |d| {
                                let mut d = *d;
                                if d.pos & JOINED != 0 {
                                    d.pos += base;
                                }
                                d
                            },
                        ));
                    }
                    let duplicates = merge_duplicates(&mut docs, seen, resolve);
                    (QueryDocs { id: *id, docs }, duplicates)
                })
                .collect();
        drop(parsed);
        let mut duplicates = 0;
        let mut queries = Vec::with_capacity(built.len());
        let mut by_query = FxHashMap::default();
        for (qi, (query, dups)) in built.into_iter().enumerate() {
            duplicates += dups;
            by_query.insert(Box::from(&text[query.id.0..query.id.1]), qi as u32);
            queries.push(query);
        }
        Ok(RunFile {
            name,
            text,
            joined,
            queries,
            by_query,
            duplicates,
        })
    }

    /// The run's display name (for a file, its stem).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renames the run.
    pub fn set_name(&mut self, name: impl Into<String>) {
        self.name = name.into();
    }

    /// Number of questions.
    pub fn len(&self) -> usize {
        self.queries.len()
    }

    /// True when the run has no question.
    pub fn is_empty(&self) -> bool {
        self.queries.is_empty()
    }

    /// How many lines named a document already listed for their question.
    pub fn duplicates(&self) -> usize {
        self.duplicates
    }

    /// The question id of ranking `index`.
    pub fn query_id(&self, index: usize) -> &str {
        let (start, end) = self.queries[index].id;
        &self.text[start..end]
    }

    /// The documents of ranking `index`, in input order.
    pub fn docs(&self, index: usize) -> impl ExactSizeIterator<Item = DocRef<'_>> + '_ {
        self.queries[index].docs.iter().map(|d| DocRef {
            doc_id: self.doc_id(d),
            score: d.score,
        })
    }

    /// The index of `query_id`'s ranking.
    pub fn position(&self, query_id: &str) -> Option<usize> {
        self.by_query.get(query_id).map(|&i| i as usize)
    }

    fn doc_id(&self, d: &DocSpan) -> &str {
        let (source, start) = if d.pos & JOINED != 0 {
            (&self.joined, (d.pos & !JOINED) as usize)
        } else {
            (&self.text, d.pos as usize)
        };
        &source[start..start + d.len as usize]
    }

    /// Copies the rankings into an owned [`Run`](super::Run) (strings built in parallel).
    pub fn to_run(&self) -> super::Run {
        let rankings: Vec<super::Ranking> = (0..self.len())
            .into_par_iter()
            .map(|i| super::Ranking {
                query_id: self.query_id(i).to_string(),
                docs: self
                    .docs(i)
                    .map(|d| super::ScoredDoc {
                        doc_id: d.doc_id.to_string(),
                        score: d.score,
                    })
                    .collect(),
            })
            .collect();
        super::Run::from_rankings(self.name.clone(), rankings, self.duplicates)
    }
}

impl Rankings for RunFile {
    fn run_name(&self) -> &str {
        &self.name
    }
    fn num_rankings(&self) -> usize {
        self.len()
    }
    fn ranking_query_id(&self, index: usize) -> &str {
        self.query_id(index)
    }
    fn ranking_docs(&self, index: usize) -> Vec<DocRef<'_>> {
        self.docs(index).collect()
    }
    fn find_query(&self, query_id: &str) -> Option<usize> {
        self.position(query_id)
    }
}

/// Merges repeated ids in `docs` (first position, last score), returning how many there were.
fn merge_duplicates<'t>(
    docs: &mut Vec<DocSpan>,
    seen: &mut FxHashMap<&'t str, u32>,
    resolve: impl Fn(&DocSpan) -> &'t str,
) -> usize {
    seen.clear();
    seen.reserve(docs.len());
    let mut kept = 0usize;
    let mut duplicates = 0usize;
    for read in 0..docs.len() {
        let doc = docs[read];
        match seen.entry(resolve(&doc)) {
            std::collections::hash_map::Entry::Occupied(first) => {
                docs[*first.get() as usize].score = doc.score;
                duplicates += 1;
            }
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(kept as u32);
                docs[kept] = doc;
                kept += 1;
            }
        }
    }
    docs.truncate(kept);
    // The keys borrow the text; the next question starts from an empty map.
    seen.clear();
    duplicates
}

fn count_lines(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count()
}

/// Cuts `text` into about `pieces` byte ranges, each ending just after a `\n` (except maybe the
/// last), none smaller than 64 KiB.
fn split_at_lines(text: &str, pieces: usize) -> Vec<(usize, usize)> {
    let bytes = text.as_bytes();
    let target = (bytes.len() / pieces.max(1)).max(1 << 16);
    let mut out = Vec::new();
    let mut start = 0;
    while bytes.len() - start > target {
        match memchr::memchr(b'\n', &bytes[start + target..]) {
            Some(p) => {
                let end = start + target + p + 1;
                out.push((start, end));
                start = end;
            }
            None => break,
        }
    }
    if start < bytes.len() {
        out.push((start, bytes.len()));
    }
    out
}

/// A run of consecutive lines of one question: its id's span, and the end (exclusive) of its
/// documents in [`ParsedChunk::docs`].
#[derive(Debug)]
struct Segment {
    query: (usize, usize),
    end: u32,
}

/// The parsed lines of one chunk, the number of lines in it, or its first error as
/// `(1-based line within the chunk, message)`.
#[derive(Debug, Default)]
struct ParsedChunk {
    docs: Vec<DocSpan>,
    segments: Vec<Segment>,
    joined: String,
    lines: usize,
    error: Option<(usize, String)>,
}

/// Parses `text[start..end]` (whole lines).
fn parse_chunk(text: &str, start: usize, end: usize) -> ParsedChunk {
    let mut out = ParsedChunk::default();
    let bytes = text.as_bytes();
    let mut fields: Vec<&str> = Vec::with_capacity(8);
    let mut pos = start;
    let mut last_query: &str = "";
    while pos < end {
        let (line_end, next) = match memchr2(b'\n', b'\r', &bytes[pos..end]) {
            Some(i) => {
                let e = pos + i;
                let crlf = bytes[e] == b'\r' && bytes.get(e + 1) == Some(&b'\n');
                (e, if crlf { e + 2 } else { e + 1 })
            }
            None => (end, end),
        };
        out.lines += 1;
        // Line ends are ASCII, so the cut falls on character boundaries.
        let line = &text[pos..line_end];
        pos = next;
        split_fields(line, &mut fields);
        let len = fields.len();
        if len == 0 {
            continue;
        }
        if len < 6 {
            out.error = Some((
                out.lines,
                format!("expected 6 fields `qid Q0 docid rank score tag`, got {len}"),
            ));
            return out;
        }
        let offset = |field: &str| field.as_ptr() as usize - text.as_ptr() as usize;
        let (pos_flag, doc_len, score_text) = if len >= 7 {
            let joined_start = out.joined.len();
            for (i, part) in fields[2..len - 3].iter().enumerate() {
                if i > 0 {
                    out.joined.push(' ');
                }
                out.joined.push_str(part);
            }
            (
                joined_start as u64 | JOINED,
                out.joined.len() - joined_start,
                fields[len - 2],
            )
        } else {
            (offset(fields[2]) as u64, fields[2].len(), fields[4])
        };
        let Ok(doc_len) = u32::try_from(doc_len) else {
            out.error = Some((out.lines, "doc id longer than 4 GiB".to_string()));
            return out;
        };
        let Some(score) = parse_score(score_text) else {
            out.error = Some((
                out.lines,
                format!("score: expected a number, got `{score_text}`"),
            ));
            return out;
        };
        let query = fields[0];
        if query != last_query || out.segments.is_empty() {
            let q = offset(query);
            out.segments.push(Segment {
                query: (q, q + query.len()),
                end: 0,
            });
            last_query = query;
        }
        out.docs.push(DocSpan {
            pos: pos_flag,
            len: doc_len,
            score,
        });
        if let Some(segment) = out.segments.last_mut() {
            segment.end = out.docs.len() as u32;
        }
    }
    out
}

/// Python's `str.split()`: fields separated by runs of whitespace (Python's whitespace, which
/// includes the ASCII separators 0x1C..0x1F). ASCII lines, the usual case, take a byte loop.
pub(crate) fn split_fields<'a>(line: &'a str, out: &mut Vec<&'a str>) {
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

/// Parses a score like Python's `float()` for the forms run files use; NaN is refused (it has
/// no place in a ranking).
///
/// Plain decimals (`-12.345`, at most 19 digits, no exponent) take Clinger's fast path: the
/// digits as an integer below 2^53 and a power of ten up to 10^22 are both exact doubles, so one
/// IEEE division gives the correctly rounded value, as `str::parse` (and Python) would.
pub(crate) fn parse_score(text: &str) -> Option<f64> {
    if let Some(value) = parse_plain_decimal(text.as_bytes()) {
        return Some(value);
    }
    let value: f64 = text.parse().ok()?;
    if value.is_nan() { None } else { Some(value) }
}

fn parse_plain_decimal(bytes: &[u8]) -> Option<f64> {
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    let (negative, digits) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        b'+' => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut mantissa: u64 = 0;
    let mut num_digits = 0usize;
    let mut fraction_digits = 0usize;
    let mut seen_point = false;
    for &b in digits {
        match b {
            b'0'..=b'9' => {
                if num_digits == 19 {
                    return None;
                }
                mantissa = mantissa * 10 + u64::from(b - b'0');
                num_digits += 1;
                if seen_point {
                    fraction_digits += 1;
                }
            }
            b'.' if !seen_point => seen_point = true,
            _ => return None,
        }
    }
    // At most 19 digits cannot overflow a u64; the value must be exact as a double.
    if num_digits == 0 || mantissa >= 1 << 53 {
        return None;
    }
    let value = mantissa as f64 / POW10[fraction_digits];
    Some(if negative { -value } else { value })
}

#[cfg(test)]
#[path = "run_file_tests.rs"]
mod tests;
