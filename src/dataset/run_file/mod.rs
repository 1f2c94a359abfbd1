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

mod scan;

use std::fs::File;
use std::path::Path;

use memmap2::{Mmap, MmapOptions};
use rayon::prelude::*;
use std::collections::hash_map::Entry;
use std::hash::Hasher;

use rustc_hash::{FxHashMap, FxHasher};

use crate::error::{Error, Result};
use scan::{ParsedChunk, count_lines, parse_chunk, split_at_lines};
#[cfg(test)]
use scan::{parse_plain_decimal, parse_score, split_fields};

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
    /// Appends the documents of ranking `index` to `out` (as [`Rankings::ranking_docs`], into a
    /// reused buffer).
    fn extend_ranking_docs<'s>(&'s self, index: usize, out: &mut Vec<DocRef<'s>>) {
        out.extend(self.ranking_docs(index));
    }
    /// The index of `query_id`'s ranking, if the run has one.
    fn find_query(&self, query_id: &str) -> Option<usize>;
}

/// One document of a question: where its id is (packed), and its score. 16 bytes a line.
#[derive(Debug, Clone, Copy)]
pub(super) struct DocSpan {
    /// Bit 63: the id lives in the joined ids, not in the file text; bits 23..63: its byte
    /// offset; bits 0..23: its length.
    packed: u64,
    score: f64,
}

impl DocSpan {
    const JOINED: u64 = 1 << 63;
    const LEN_BITS: u32 = 23;
    /// Longest id a span can hold (8 MiB).
    pub const MAX_LEN: usize = (1 << Self::LEN_BITS) - 1;
    /// Largest offset a span can hold (1 TiB).
    pub const MAX_OFFSET: u64 = (1 << 40) - 1;

    /// A span, or None when the id is too long or too far into the file.
    pub fn new(offset: u64, len: usize, joined: bool, score: f64) -> Option<DocSpan> {
        if len > Self::MAX_LEN || offset > Self::MAX_OFFSET {
            return None;
        }
        let flag = if joined { Self::JOINED } else { 0 };
        Some(DocSpan {
            packed: flag | (offset << Self::LEN_BITS) | len as u64,
            score,
        })
    }

    pub fn joined(&self) -> bool {
        self.packed & Self::JOINED != 0
    }

    pub fn offset(&self) -> usize {
        ((self.packed & !Self::JOINED) >> Self::LEN_BITS) as usize
    }

    pub fn len(&self) -> usize {
        (self.packed & Self::MAX_LEN as u64) as usize
    }

    /// Moves a joined id's offset by `base` (chunk-local to whole-file joined ids).
    fn rebase(&mut self, base: u64) {
        self.packed += base << Self::LEN_BITS;
    }

    /// The id's bytes in `text` or `joined`.
    pub fn id<'t>(&self, text: &'t [u8], joined: &'t [u8]) -> &'t [u8] {
        let source = if self.joined() { joined } else { text };
        &source[self.offset()..self.offset() + self.len()]
    }
}

/// A byte range of the text.
type Span = (usize, usize);
/// A run of one question's lines: chunk index, start and end in that chunk's documents.
type Segment = (u32, u32, u32);

/// Where a question's documents are: a range of one list of [`RunFile::lists`].
#[derive(Debug)]
struct QueryDocs {
    id: (usize, usize),
    list: u32,
    start: u32,
    end: u32,
}

/// A TREC run file in memory, questions in order of first appearance.
#[derive(Debug)]
pub struct RunFile {
    name: String,
    text: Text,
    joined: String,
    /// Each chunk's documents (merged within each run of lines of one question), then one list
    /// per question whose lines were not consecutive in one chunk.
    lists: Vec<Vec<DocSpan>>,
    queries: Vec<QueryDocs>,
    by_query: FxHashMap<Box<str>, u32>,
    duplicates: usize,
}

impl RunFile {
    /// Reads and parses the TREC run at `path`, named after the file stem. A regular file is
    /// memory-mapped (and must not change while the `RunFile` lives, as for any mapped file).
    pub fn read(path: impl AsRef<Path>) -> Result<RunFile> {
        let path = path.as_ref();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let regular = file
            .metadata()
            .map(|m| m.is_file() && m.len() > 0)
            .unwrap_or(false);
        // SAFETY: the map is read-only and private; the text is validated as UTF-8 below before
        // any `str` is made from it.
        let mapped = if regular {
            unsafe { MmapOptions::new().populate().map(&file) }.ok()
        } else {
            None
        };
        let bytes = match mapped {
            Some(map) => Bytes::Mapped(map),
            None => {
                let bytes = crate::dataset::bounded::read_line_text(path)
                    .map_err(|e| Error::io(path, e))?;
                Bytes::Owned(bytes)
            }
        };
        let chunks = split_at_lines(bytes.as_slice(), 4 * rayon::current_num_threads());
        let text = Text::validate(bytes, &chunks)
            .map_err(|line| Error::parse(path, line, "not valid UTF-8"))?;
        Self::parse_text(name, text, &chunks, path)
    }

    /// Parses TREC run text held in memory; errors name `name` as the file.
    pub fn parse(name: impl Into<String>, text: impl Into<String>) -> Result<RunFile> {
        let name = name.into();
        let path = std::path::PathBuf::from(&name);
        let text = Text::Owned(text.into());
        let chunks = split_at_lines(text.as_str().as_bytes(), 4 * rayon::current_num_threads());
        Self::parse_text(name, text, &chunks, &path)
    }

    fn parse_text(
        name: String,
        text_store: Text,
        chunks: &[(usize, usize)],
        path: &Path,
    ) -> Result<RunFile> {
        let text = text_store.as_str();
        let mut parsed: Vec<ParsedChunk> = chunks
            .par_iter()
            .map(|&(start, end)| parse_chunk(text, start, end))
            .collect();
        // The first error in file order wins.
        let mut lines_before = 0usize;
        for chunk in &parsed {
            if let Some((line, message)) = &chunk.error {
                return Err(Error::parse(path, lines_before + line, message.clone()));
            }
            lines_before += chunk.lines;
        }
        // Joined ids of every chunk, one after the other; their spans rebased to match.
        let mut joined = String::new();
        let mut bases = Vec::with_capacity(parsed.len());
        for chunk in &parsed {
            bases.push(joined.len() as u64);
            joined.push_str(&chunk.joined);
        }
        if joined.len() as u64 > DocSpan::MAX_OFFSET {
            return Err(Error::parse(path, 0, "more than 1 TiB of ids with spaces"));
        }
        parsed
            .par_iter_mut()
            .zip(&bases)
            .filter(|(chunk, _)| !chunk.joined.is_empty())
            .for_each(|(chunk, &base)| {
                for d in chunk.docs.iter_mut().filter(|d| d.joined()) {
                    d.rebase(base);
                }
            });
        // Questions in order of first appearance, each with its runs of lines.
        let mut index: FxHashMap<&str, u32> = FxHashMap::default();
        let mut parts: Vec<(Span, Vec<Segment>)> = Vec::new();
        let mut duplicates = 0usize;
        for (ci, chunk) in parsed.iter().enumerate() {
            duplicates += chunk.duplicates;
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
        drop(index);
        let mut lists: Vec<Vec<DocSpan>> = parsed.into_iter().map(|c| c.docs).collect();
        // Questions met in several places: their documents gathered and merged again.
        let bytes = text.as_bytes();
        let merged: Vec<(usize, Vec<DocSpan>, usize)> = parts
            .par_iter()
            .enumerate()
            .filter(|(_, (_, segments))| segments.len() > 1)
            .map_init(FxHashMap::default, |seen, (qi, (_, segments))| {
                let mut docs = Vec::new();
                for &(ci, s, e) in segments {
                    docs.extend_from_slice(&lists[ci as usize][s as usize..e as usize]);
                }
                let dups = merge_duplicates(&mut docs, 0, seen, bytes, joined.as_bytes());
                (qi, docs, dups)
            })
            .collect();
        let mut queries: Vec<QueryDocs> = parts
            .iter()
            .map(|(id, segments)| {
                let (list, start, end) = segments.first().copied().unwrap_or((0, 0, 0));
                QueryDocs {
                    id: *id,
                    list,
                    start,
                    end,
                }
            })
            .collect();
        for (qi, docs, dups) in merged {
            duplicates += dups;
            queries[qi] = QueryDocs {
                id: queries[qi].id,
                list: lists.len() as u32,
                start: 0,
                end: docs.len() as u32,
            };
            lists.push(docs);
        }
        let by_query = queries
            .iter()
            .enumerate()
            .map(|(qi, q)| (Box::from(&text[q.id.0..q.id.1]), qi as u32))
            .collect();
        Ok(RunFile {
            name,
            text: text_store,
            joined,
            lists,
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
        &self.text.as_str()[start..end]
    }

    /// The documents of ranking `index`, in input order.
    pub fn docs(&self, index: usize) -> impl ExactSizeIterator<Item = DocRef<'_>> + '_ {
        let q = &self.queries[index];
        let text = self.text.as_str();
        self.lists[q.list as usize][q.start as usize..q.end as usize]
            .iter()
            .map(move |d| DocRef {
                doc_id: if d.joined() {
                    &self.joined[d.offset()..d.offset() + d.len()]
                } else {
                    &text[d.offset()..d.offset() + d.len()]
                },
                score: d.score,
            })
    }

    /// The index of `query_id`'s ranking.
    pub fn position(&self, query_id: &str) -> Option<usize> {
        self.by_query.get(query_id).map(|&i| i as usize)
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
    fn extend_ranking_docs<'s>(&'s self, index: usize, out: &mut Vec<DocRef<'s>>) {
        out.extend(self.docs(index));
    }
    fn find_query(&self, query_id: &str) -> Option<usize> {
        self.position(query_id)
    }
}

/// Merges repeated ids in `docs[start..]` (first position, last score), returning how many
/// lines repeated an id. `seen` (scratch) maps id hashes to positions; a hash shared by two ids
/// falls back to a scan.
pub(super) fn merge_duplicates(
    docs: &mut Vec<DocSpan>,
    start: usize,
    seen: &mut FxHashMap<u64, u32>,
    text: &[u8],
    joined: &[u8],
) -> usize {
    seen.clear();
    let mut kept = start;
    let mut duplicates = 0usize;
    for read in start..docs.len() {
        let doc = docs[read];
        let id = doc.id(text, joined);
        let hash = {
            let mut hasher = FxHasher::default();
            hasher.write(id);
            hasher.finish()
        };
        let first = match seen.entry(hash) {
            Entry::Vacant(slot) => {
                slot.insert(kept as u32);
                None
            }
            Entry::Occupied(at) => {
                let at = *at.get() as usize;
                if docs[at].id(text, joined) == id {
                    Some(at)
                } else {
                    (start..kept).find(|&i| docs[i].id(text, joined) == id)
                }
            }
        };
        match first {
            Some(at) => {
                docs[at].score = doc.score;
                duplicates += 1;
            }
            None => {
                docs[kept] = doc;
                kept += 1;
            }
        }
    }
    docs.truncate(kept);
    duplicates
}

/// The bytes of a run file: mapped, or read into memory.
#[derive(Debug)]
enum Bytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Bytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Mapped(map) => map,
            Bytes::Owned(bytes) => bytes,
        }
    }
}

/// The text of a run file, valid UTF-8.
#[derive(Debug)]
enum Text {
    /// A map whose bytes were checked to be UTF-8 ([`Text::validate`]).
    Mapped(Mmap),
    Owned(String),
}

impl Text {
    /// Checks `bytes` (cut into `chunks` at line ends, checked in parallel) as UTF-8, or returns
    /// the 1-based line of the first invalid byte.
    fn validate(bytes: Bytes, chunks: &[(usize, usize)]) -> std::result::Result<Text, usize> {
        let slice = bytes.as_slice();
        let first_error = chunks
            .par_iter()
            .map(|&(start, end)| {
                std::str::from_utf8(&slice[start..end])
                    .err()
                    .map(|e| start + e.valid_up_to())
            })
            .find_first(Option::is_some)
            .flatten();
        if let Some(at) = first_error {
            return Err(count_lines(&slice[..at]) + 1);
        }
        Ok(match bytes {
            Bytes::Mapped(map) => Text::Mapped(map),
            // Checked just above, so this cannot fail (it costs one more pass over the bytes).
            Bytes::Owned(bytes) => Text::Owned(
                String::from_utf8(bytes)
                    .map_err(|e| count_lines(&e.as_bytes()[..e.utf8_error().valid_up_to()]) + 1)?,
            ),
        })
    }

    fn as_str(&self) -> &str {
        match self {
            // SAFETY: built only by `validate`, after every chunk (together, the whole map)
            // passed `str::from_utf8`; chunks end after a `\n`, an ASCII byte, so validity of
            // the parts is validity of the whole.
            Text::Mapped(map) => unsafe { std::str::from_utf8_unchecked(map) },
            Text::Owned(text) => text,
        }
    }
}

#[cfg(test)]
mod tests;
