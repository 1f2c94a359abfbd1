//! A non-LLM evidence signal for judging: how many of a nugget's own content terms (the words,
//! identifiers, flags, numbers and paths it names that its question does not) the document
//! contains. Every pooled document was retrieved for the question, so the question's words are
//! shared by most of the pool and tell documents apart poorly; the terms only the nugget (the
//! answer) brings are what a supporting document has to name.
//!
//! Terms are lower-cased runs of letters, digits and `_`, with `.`, `-`, `:` and `/` kept
//! between two such characters (`cl100k_base`, `max-tokens`, `src/lib.rs`, `0.9`); a document
//! also contributes the parts of each compound term (`src/cli/corpus.rs` gives `corpus`). A
//! trailing plural `s` is folded on plain words longer than three letters, and a short list of
//! English function words is ignored.

use std::collections::BTreeSet;

/// English function words that carry no evidence.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been",
    "before", "being", "between", "both", "but", "by", "can", "could", "did", "do", "does", "each",
    "either", "else", "etc", "for", "from", "had", "has", "have", "how", "if", "in", "into", "is",
    "it", "its", "just", "may", "more", "most", "must", "no", "not", "of", "on", "one", "only",
    "or", "other", "over", "own", "per", "same", "should", "so", "some", "such", "than", "that",
    "the", "their", "them", "then", "there", "these", "they", "this", "those", "through", "to",
    "too", "under", "until", "up", "use", "used", "uses", "using", "via", "was", "were", "what",
    "when", "where", "which", "while", "who", "why", "will", "with", "without", "would", "you",
    "your", "e.g", "i.e",
];

fn is_term_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_joiner(c: char) -> bool {
    matches!(c, '.' | '-' | ':' | '/')
}

/// A term as matched: lower case, a trailing plural `s` folded on long words (letters only:
/// identifiers, flags and paths are kept as written).
fn normalise(term: &str) -> String {
    let lower = term.to_lowercase();
    let word = lower.chars().all(char::is_alphabetic);
    if word && lower.len() > 3 && lower.ends_with('s') && !lower.ends_with("ss") {
        let mut folded = lower;
        folded.pop();
        folded
    } else {
        lower
    }
}

/// The compound terms of `text`, in order, before normalisation.
fn raw_terms(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut terms = Vec::new();
    let mut start: Option<usize> = None;
    for (i, &(offset, c)) in chars.iter().enumerate() {
        let inside = is_term_char(c)
            || (start.is_some()
                && is_joiner(c)
                && chars
                    .get(i + 1)
                    .is_some_and(|&(_, next)| is_term_char(next)));
        match (inside, start) {
            (true, None) => start = Some(offset),
            (false, Some(s)) => {
                terms.push(&text[s..offset]);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        terms.push(&text[s..]);
    }
    terms
}

fn is_stop_word(term: &str) -> bool {
    STOP_WORDS.contains(&term)
}

/// The content terms of a nugget or question: normalised compound terms, function words and
/// single characters left out.
pub fn content_terms(text: &str) -> BTreeSet<String> {
    raw_terms(text)
        .into_iter()
        .map(normalise)
        .filter(|t| t.chars().count() > 1 && !is_stop_word(t))
        .collect()
}

/// Every term a document offers to match: its compound terms and their parts.
pub fn document_terms(text: &str) -> BTreeSet<String> {
    let mut terms = BTreeSet::new();
    for raw in raw_terms(text) {
        terms.insert(normalise(raw));
        if raw.contains(is_joiner) {
            for part in raw.split(is_joiner).filter(|p| !p.is_empty()) {
                terms.insert(normalise(part));
            }
        }
    }
    terms
}

/// How much of a nugget's own vocabulary a document holds.
#[derive(Debug, Clone, PartialEq)]
pub struct TermCoverage {
    /// The nugget's terms that were looked for (those not in the question; all of its terms
    /// when the question has every one).
    pub looked_for: Vec<String>,
    /// Those found in the document.
    pub found: Vec<String>,
}

impl TermCoverage {
    /// `found / looked_for`, 0 when the nugget has no content term.
    pub fn share(&self) -> f64 {
        if self.looked_for.is_empty() {
            0.0
        } else {
            self.found.len() as f64 / self.looked_for.len() as f64
        }
    }
}

/// The nugget's own terms (given its question's) that `document` holds.
pub fn term_coverage(
    nugget: &BTreeSet<String>,
    question: &BTreeSet<String>,
    document: &BTreeSet<String>,
) -> TermCoverage {
    let own: Vec<&String> = nugget.iter().filter(|t| !question.contains(*t)).collect();
    let looked_for: Vec<String> = if own.is_empty() {
        nugget.iter().cloned().collect()
    } else {
        own.into_iter().cloned().collect()
    };
    let found = looked_for
        .iter()
        .filter(|t| document.contains(*t))
        .cloned()
        .collect();
    TermCoverage { looked_for, found }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_keep_identifiers_flags_paths_and_numbers_whole() {
        let terms =
            content_terms("Pass `--max-tokens 512` to src/cli/corpus.rs; k1 = 0.9 (cl100k_base).");
        let expect = [
            "0.9",
            "512",
            "cl100k_base",
            "k1",
            "max-tokens",
            "pass",
            "src/cli/corpus.rs",
        ];
        assert_eq!(terms.iter().map(String::as_str).collect::<Vec<_>>(), expect);
        // A document also offers the parts of its compounds.
        let doc = document_terms("see src/cli/corpus.rs; // chunks");
        assert!(doc.contains("src/cli/corpus.rs") && doc.contains("cli"));
        assert!(doc.contains("chunk"), "plural folded: {doc:?}");
    }

    #[test]
    fn coverage_counts_only_the_terms_the_question_lacks() {
        let question = content_terms("How do I make shorter documents with freshstack corpus?");
        let nugget = content_terms("Pass --max-tokens to freshstack corpus to shorten documents.");
        let doc = document_terms("freshstack corpus --max-tokens N caps each document");
        let coverage = term_coverage(&nugget, &question, &doc);
        assert_eq!(coverage.looked_for, ["max-tokens", "pass", "shorten"]);
        assert_eq!(coverage.found, ["max-tokens"]);
        assert!((coverage.share() - 1.0 / 3.0).abs() < 1e-12);
        // A nugget made only of the question's words is looked for whole.
        let restated = content_terms("freshstack corpus documents");
        let all = term_coverage(&restated, &question, &doc);
        assert_eq!(all.looked_for.len(), 3);
        assert_eq!(all.share(), 1.0);
        assert_eq!(
            term_coverage(&BTreeSet::new(), &question, &doc).share(),
            0.0
        );
    }

    #[test]
    fn unicode_and_edges_do_not_panic() {
        for text in [
            "",
            "-",
            "a-",
            "é.ß/ü",
            "--",
            "x:",
            "日本語-テキスト",
            "a..b",
        ] {
            let _ = content_terms(text);
            let _ = document_terms(text);
        }
        assert_eq!(raw_terms("a..b"), ["a", "b"]);
    }
}
