//! The line scanner of [`RunFile`](super::RunFile): one pass over a chunk of the file, eight
//! bytes at a time, stopping only at bytes that can end a field or a line.

use rustc_hash::FxHashMap;

use super::{DocSpan, merge_duplicates};

/// A run of consecutive lines of one question: its id's span, and the end (exclusive) of its
/// documents in [`ParsedChunk::docs`].
#[derive(Debug)]
pub(super) struct Segment {
    pub query: (usize, usize),
    pub end: u32,
}

/// The parsed lines of one chunk (each segment's repeated ids merged), the number of lines in
/// it, or its first error as `(1-based line within the chunk, message)`.
#[derive(Debug, Default)]
pub(super) struct ParsedChunk {
    pub docs: Vec<DocSpan>,
    pub segments: Vec<Segment>,
    /// Doc ids containing spaces, joined; joined [`DocSpan`]s point here.
    pub joined: String,
    pub duplicates: usize,
    pub lines: usize,
    pub error: Option<(usize, String)>,
}

pub(super) fn count_lines(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count()
}

/// Cuts `text` into about `pieces` byte ranges, each ending just after a `\n` (except maybe the
/// last), none smaller than 64 KiB.
pub(super) fn split_at_lines(text: &[u8], pieces: usize) -> Vec<(usize, usize)> {
    let target = (text.len() / pieces.max(1)).max(1 << 16);
    let mut out = Vec::new();
    let mut start = 0;
    while text.len() - start > target {
        match memchr::memchr(b'\n', &text[start + target..]) {
            Some(p) => {
                let end = start + target + p + 1;
                out.push((start, end));
                start = end;
            }
            None => break,
        }
    }
    if start < text.len() {
        out.push((start, text.len()));
    }
    out
}

/// For each byte of `word` (little endian), the high bit set when the byte is below 0x21 (space,
/// line ends, control characters) or not ASCII: the only bytes the scanner has to look at.
/// Exact per byte: `(b & 0x7f) + 0x5f` cannot carry into the next byte.
#[inline]
fn special_bytes(word: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    let printable = (word & (ONES * 0x7f)) + ONES * 0x5f;
    (word | !printable) & (ONES * 0x80)
}

/// Python's ASCII whitespace other than the line ends (which `str.split` also splits on).
#[inline]
fn is_field_separator(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0b | 0x0c | 0x1c..=0x1f)
}

/// The state of the line being scanned.
struct Scanner<'t> {
    text: &'t str,
    line_start: usize,
    field_start: usize,
    /// Fields of the line so far, as byte ranges of `text`.
    fields: Vec<(usize, usize)>,
    /// The line has a non-ASCII byte: split it again by Python's Unicode rules.
    unicode: bool,
    /// Position of the last `\r` that ended a line (a following `\n` ends nothing more).
    last_cr: usize,
    last_query: (usize, usize),
    /// Scratch map of [`merge_duplicates`].
    seen: FxHashMap<u64, u32>,
    out: ParsedChunk,
}

/// Parses `text[start..end]` (whole lines, `end` just after a line end or at the end of text).
pub(super) fn parse_chunk(text: &str, start: usize, end: usize) -> ParsedChunk {
    let bytes = text.as_bytes();
    let mut s = Scanner {
        text,
        line_start: start,
        field_start: start,
        fields: Vec::with_capacity(8),
        unicode: false,
        last_cr: usize::MAX,
        last_query: (0, 0),
        seen: FxHashMap::default(),
        out: ParsedChunk {
            // About 60 bytes a line in typical runs.
            docs: Vec::with_capacity((end - start) / 48),
            ..ParsedChunk::default()
        },
    };
    let mut i = start;
    while i + 8 <= end {
        let Ok(word) = <[u8; 8]>::try_from(&bytes[i..i + 8]) else {
            break;
        };
        let mut mask = special_bytes(u64::from_le_bytes(word));
        while mask != 0 {
            let p = i + (mask.trailing_zeros() / 8) as usize;
            mask &= mask - 1;
            if !s.special(p) {
                return s.out;
            }
        }
        i += 8;
    }
    while i < end {
        if (bytes[i] < 0x21 || bytes[i] >= 0x80) && !s.special(i) {
            return s.out;
        }
        i += 1;
    }
    if s.line_start < end && !s.end_line(end) {
        return s.out;
    }
    s.close_segment();
    s.out
}

impl Scanner<'_> {
    /// Merges the repeated ids of the last segment (its lines are the tail of the docs).
    fn close_segment(&mut self) {
        let start = match self.out.segments.len() {
            0 => return,
            1 => 0,
            n => self.out.segments[n - 2].end as usize,
        };
        let out = &mut self.out;
        out.duplicates += merge_duplicates(
            &mut out.docs,
            start,
            &mut self.seen,
            self.text.as_bytes(),
            out.joined.as_bytes(),
        );
        if let Some(segment) = out.segments.last_mut() {
            segment.end = out.docs.len() as u32;
        }
    }

    /// Handles the special byte at `p`; false once an error is recorded.
    #[inline]
    fn special(&mut self, p: usize) -> bool {
        let b = self.text.as_bytes()[p];
        match b {
            b'\n' | b'\r' => {
                if b == b'\n' && p > 0 && self.last_cr == p - 1 {
                    // The `\n` of a `\r\n`: the line already ended at the `\r`.
                    self.line_start = p + 1;
                    self.field_start = p + 1;
                    return true;
                }
                if b == b'\r' {
                    self.last_cr = p;
                }
                let ok = self.end_line(p);
                self.line_start = p + 1;
                self.field_start = p + 1;
                ok
            }
            _ if is_field_separator(b) => {
                if p > self.field_start {
                    self.fields.push((self.field_start, p));
                }
                self.field_start = p + 1;
                true
            }
            _ if b >= 0x80 => {
                self.unicode = true;
                true
            }
            // Other control characters belong to the field, as in Python.
            _ => true,
        }
    }

    /// Ends the line at `p` (its terminator, or the end of the text) and parses it.
    fn end_line(&mut self, p: usize) -> bool {
        self.out.lines += 1;
        if p > self.field_start {
            self.fields.push((self.field_start, p));
        }
        if self.unicode {
            self.unicode = false;
            let line = &self.text[self.line_start..p];
            let mut parts = Vec::new();
            split_fields(line, &mut parts);
            let base = self.text.as_ptr() as usize;
            self.fields.clear();
            self.fields.extend(parts.iter().map(|f| {
                let start = f.as_ptr() as usize - base;
                (start, start + f.len())
            }));
        }
        let ok = self.parse_fields();
        self.fields.clear();
        ok
    }

    fn parse_fields(&mut self) -> bool {
        let len = self.fields.len();
        if len == 0 {
            return true;
        }
        let line = self.out.lines;
        if len < 6 {
            self.out.error = Some((
                line,
                format!("expected 6 fields `qid Q0 docid rank score tag`, got {len}"),
            ));
            return false;
        }
        let text = self.text;
        let field = |i: usize| &text[self.fields[i].0..self.fields[i].1];
        let (offset, doc_len, joined, score_field) = if len >= 7 {
            let joined = &mut self.out.joined;
            let start = joined.len();
            for i in 2..len - 3 {
                if i > 2 {
                    joined.push(' ');
                }
                joined.push_str(field(i));
            }
            (start, joined.len() - start, true, len - 2)
        } else {
            (
                self.fields[2].0,
                self.fields[2].1 - self.fields[2].0,
                false,
                4,
            )
        };
        let Some(score) = parse_score(field(score_field)) else {
            self.out.error = Some((
                line,
                format!("score: expected a number, got `{}`", field(score_field)),
            ));
            return false;
        };
        let Some(doc) = DocSpan::new(offset as u64, doc_len, joined, score) else {
            self.out.error = Some((
                line,
                format!(
                    "doc id longer than {} bytes, or file larger than {} bytes",
                    DocSpan::MAX_LEN,
                    DocSpan::MAX_OFFSET
                ),
            ));
            return false;
        };
        let query = self.fields[0];
        let same = self.out.segments.last().is_some()
            && text.as_bytes()[query.0..query.1]
                == text.as_bytes()[self.last_query.0..self.last_query.1];
        if !same {
            self.close_segment();
            self.out.segments.push(Segment {
                query,
                end: self.out.docs.len() as u32,
            });
            self.last_query = query;
        }
        self.out.docs.push(doc);
        let end = self.out.docs.len() as u32;
        if let Some(segment) = self.out.segments.last_mut() {
            segment.end = end;
        }
        true
    }
}

/// Python's `str.split()`: fields separated by runs of whitespace (Python's whitespace, which
/// includes the ASCII separators 0x1C..0x1F). ASCII lines, the usual case, take a byte loop.
pub(crate) fn split_fields<'a>(line: &'a str, out: &mut Vec<&'a str>) {
    fn is_space(b: u8) -> bool {
        matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f)
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

pub(super) fn parse_plain_decimal(bytes: &[u8]) -> Option<f64> {
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
mod tests {
    use super::*;

    #[test]
    fn special_bytes_are_exact_per_byte() {
        for b in 0..=255u8 {
            for lane in 0..8 {
                let mut word = [b'a'; 8];
                word[lane] = b;
                let mask = special_bytes(u64::from_le_bytes(word));
                let expected = if !(0x21..0x80).contains(&b) {
                    0x80u64 << (8 * lane)
                } else {
                    0
                };
                assert_eq!(mask, expected, "byte {b:#x} in lane {lane}");
            }
        }
        // Neighbours do not leak into each other.
        let mask = special_bytes(u64::from_le_bytes([
            0x20, 0xff, 0x21, 0x00, 0x7f, 0x80, b' ', b'z',
        ]));
        assert_eq!(mask, 0x0080_8000_8000_8080);
    }
}
