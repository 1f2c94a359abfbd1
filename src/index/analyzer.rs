//! Text analysis for BM25: the same function turns documents (at indexing time, through
//! tantivy's [`Tokenizer`] trait) and queries (at search time) into terms, so both sides always
//! agree.
//!
//! Two analyzers:
//! - [`AnalyzerKind::Code`] (default): words are maximal runs of alphanumerics and `_`; each word
//!   is kept whole and, when it is a compound identifier (`camelCase`, `PascalCase`,
//!   `snake_case`, `HTTPServer`), also split into its parts, so `getUserName` matches both
//!   `getusername` and `user`. Then lowercase, the Lucene English stop words (as Pyserini), and
//!   the Snowball English stemmer.
//! - [`AnalyzerKind::Plain`]: the tokenization of bm25s (`\w\w+`, lowercase), with the same stop
//!   words and stemmer; it exists to compare like with like against Python peers.

use std::sync::LazyLock;

use crate::error::Setting;
use rust_stemmers::{Algorithm, Stemmer};
use serde::{Deserialize, Serialize};
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Terms longer than this (bytes, before stemming) are dropped: base64 blobs and minified code
/// would only bloat the dictionary.
pub const MAX_TERM_BYTES: usize = 64;

/// Lucene's English stop words (`EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`), which Pyserini and
/// bm25s's `"en"` list both use.
const STOP_WORDS: [&str; 33] = [
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
];

static STEMMER: LazyLock<Stemmer> = LazyLock::new(|| Stemmer::create(Algorithm::English));

/// Which analysis chain an index uses (recorded in the manifest).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnalyzerKind {
    /// Code-aware: whole identifiers plus their camelCase / snake_case parts.
    #[default]
    Code,
    /// bm25s-compatible `\w\w+` words.
    Plain,
}

impl AnalyzerKind {
    /// The name used in the manifest and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Code => "code",
            Self::Plain => "plain",
        }
    }

    /// The tantivy tokenizer name this analyzer is registered under.
    pub(crate) fn tokenizer_name(self) -> &'static str {
        match self {
            Self::Code => "freshstack_code",
            Self::Plain => "freshstack_plain",
        }
    }

    /// Analyzes `text` into terms, in text order, calling `emit` with each term and the byte
    /// range of the word it came from.
    pub fn analyze(self, text: &str, mut emit: impl FnMut(String, usize, usize)) {
        let mut lowered = String::new();
        for (start, word) in words(text) {
            let end = start + word.len();
            match self {
                Self::Plain => {
                    if word.chars().count() >= 2 {
                        push_term(word, &mut lowered, &mut |t| emit(t, start, end));
                    }
                }
                Self::Code => {
                    let trimmed = word.trim_matches('_');
                    if trimmed.is_empty() {
                        continue;
                    }
                    push_term(trimmed, &mut lowered, &mut |t| emit(t, start, end));
                    let parts = identifier_parts(trimmed);
                    if parts.len() > 1 {
                        for part in parts {
                            push_term(part, &mut lowered, &mut |t| emit(t, start, end));
                        }
                    }
                }
            }
        }
    }

    /// The terms of `text` as a vector (queries, tests).
    pub fn terms(self, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        self.analyze(text, |t, _, _| out.push(t));
        out
    }
}

impl std::str::FromStr for AnalyzerKind {
    type Err = crate::Error;

    /// Parses `code` or `plain`.
    fn from_str(name: &str) -> crate::Result<Self> {
        match name {
            "code" => Ok(Self::Code),
            "plain" => Ok(Self::Plain),
            other => Err(crate::Error::invalid(
                Setting::Analyzer,
                format!("unknown analyzer {other:?}: expected code or plain"),
            )),
        }
    }
}

/// Lowercases, drops stop words and over-long terms, stems, and emits.
fn push_term(raw: &str, buf: &mut String, emit: &mut impl FnMut(String)) {
    if raw.len() > MAX_TERM_BYTES {
        return;
    }
    buf.clear();
    for c in raw.chars() {
        buf.extend(c.to_lowercase());
    }
    if STOP_WORDS.binary_search(&buf.as_str()).is_ok() {
        return;
    }
    emit(STEMMER.stem(buf).into_owned());
}

/// Maximal runs of alphanumeric characters and `_`, with their byte offsets.
fn words(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let start = loop {
            let (i, c) = rest.next()?;
            if is_word_char(c) {
                break i;
            }
        };
        let mut end = text.len();
        while let Some(&(i, c)) = rest.peek() {
            if !is_word_char(c) {
                end = i;
                break;
            }
            rest.next();
        }
        Some((start, &text[start..end]))
    })
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Splits an identifier on `_` and on case changes: `getUserName` -> get, User, Name;
/// `HTTPServer` -> HTTP, Server; `utf8Encode` -> utf8, Encode. Digits stay with what precedes.
fn identifier_parts(word: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for j in 1..chars.len() {
            let prev = chars[j - 1].1;
            let cur = chars[j].1;
            let next_lower = chars.get(j + 1).is_some_and(|&(_, n)| n.is_lowercase());
            let boundary = cur.is_uppercase()
                && (prev.is_lowercase()
                    || prev.is_numeric()
                    || (prev.is_uppercase() && next_lower));
            if boundary {
                parts.push(&piece[start..chars[j].0]);
                start = chars[j].0;
            }
        }
        parts.push(&piece[start..]);
    }
    parts
}

/// The tantivy side of an [`AnalyzerKind`]: analyzes eagerly into a buffer of tokens.
#[derive(Debug, Clone)]
pub(crate) struct AnalyzerTokenizer {
    kind: AnalyzerKind,
    tokens: Vec<Token>,
}

impl AnalyzerTokenizer {
    pub(crate) fn new(kind: AnalyzerKind) -> Self {
        Self {
            kind,
            tokens: Vec::new(),
        }
    }
}

/// Token stream over the buffered tokens.
pub(crate) struct BufferedTokens<'a> {
    tokens: &'a mut [Token],
    next: usize,
}

impl Tokenizer for AnalyzerTokenizer {
    type TokenStream<'a> = BufferedTokens<'a>;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> BufferedTokens<'a> {
        self.tokens.clear();
        let tokens = &mut self.tokens;
        self.kind.analyze(text, |term, from, to| {
            let position = tokens.len();
            tokens.push(Token {
                offset_from: from,
                offset_to: to,
                position,
                text: term,
                position_length: 1,
            });
        });
        BufferedTokens {
            tokens: &mut self.tokens,
            next: 0,
        }
    }
}

impl TokenStream for BufferedTokens<'_> {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    // tantivy calls these only after `advance` returned true, so `next >= 1` and in range.
    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted_for_binary_search() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn code_analyzer_keeps_identifier_and_parts() {
        let terms = AnalyzerKind::Code.terms("$getUserName = my_http_client; HTTPServer");
        assert_eq!(
            terms,
            [
                "getusernam",
                "get",
                "user",
                "name",
                "my_http_client",
                "my",
                "http",
                "client",
                "httpserver",
                "http",
                "server"
            ]
        );
    }

    #[test]
    fn stop_words_and_stemming() {
        assert_eq!(
            AnalyzerKind::Code.terms("The running of the Tests"),
            ["run", "test"]
        );
    }

    #[test]
    fn plain_analyzer_matches_bm25s_words() {
        assert_eq!(
            AnalyzerKind::Plain.terms("a getUserName x_y b 42"),
            ["getusernam", "x_i", "42"]
        );
    }

    #[test]
    fn symbols_only_give_no_terms() {
        assert!(AnalyzerKind::Code.terms("$%^ -> {} ___").is_empty());
    }

    #[test]
    fn identifier_parts_cases() {
        assert_eq!(identifier_parts("utf8Encode"), ["utf8", "Encode"]);
        assert_eq!(
            identifier_parts("XMLHttpRequest"),
            ["XML", "Http", "Request"]
        );
        assert_eq!(identifier_parts("simple"), ["simple"]);
    }
}
