//! The pointwise verdicts, one (document, nugget) pair per call. `probability`: the model is
//! read, not asked to write: the probability that its answer starts with "yes" rather than
//! "no" ([`crate::llm::Llm::choice_probabilities`]), averaged with the share of the nugget's own
//! terms the document holds ([`super::evidence`]) by `term_weight`; a pair is supported when
//! that score reaches the threshold (chosen on reference labels). `terms` asks no model: the
//! share of terms alone is the score. `quote`: the model copies the document's sentence or
//! line that states the nugget before its verdict; the quote must be in the document
//! (whitespace normalised) and hold `threshold` of the nugget's terms, so that a lenient "yes"
//! needs evidence that checks. `graded`: like `probability`, over the three grades full,
//! partial and none (TREC 2025's support assessment); the expected grade replaces P(yes).
//!
//! Small models asked for per-nugget booleans over a batch of documents say "supported" to
//! nearly everything; a probability with a threshold sets the operating point where the labels
//! say it is, and one pair per call leaves no batch position to be biased by.

use super::evidence::{TermCoverage, content_terms, document_terms, term_coverage};
use std::fmt::Write as _;

use super::super::workers::{AskCounts, ParseOutcome, ask, call_params};
use super::{JudgeConfig, Verdict, truncate_to_tokens};
use crate::dataset::{Document, JudgmentRecord, NuggetText, Question, Quote, SupportGrade};
use crate::error::Result;
use crate::llm::prompts::{JUDGE_GRADED, JUDGE_POINTWISE, JUDGE_QUOTE};
use crate::llm::{Llm, parse};
use serde_json::{Value, json};

/// The spellings of the two answers whose first tokens are read.
const YES: &[&str] = &["yes", "Yes", "YES", " yes", " Yes"];
const NO: &[&str] = &["no", "No", "NO", " no", " No"];

/// The spellings of the three grades of the `graded` verdict, in [`SupportGrade::ALL`]'s order.
const GRADES: [&[&str]; 3] = [
    &["full", "Full", "FULL", " full", " Full"],
    &["partial", "Partial", "PARTIAL", " partial", " Partial"],
    &["none", "None", "NONE", " none", " None"],
];

/// The `graded` verdict's reading of the three grades' probabilities (full, partial, none):
/// the most likely grade (ties to the more supportive) and the expected grade on [0, 1].
pub fn grade_of(probabilities: &[f64]) -> (SupportGrade, f64) {
    let mut best = (SupportGrade::Full, f64::NEG_INFINITY);
    let mut expected = 0.0;
    for (&grade, &p) in SupportGrade::ALL.iter().zip(probabilities) {
        if p > best.1 {
            best = (grade, p);
        }
        expected += grade.value() * p;
    }
    (best.0, expected)
}

/// Most found terms a rationale lists.
const RATIONALE_TERMS: usize = 8;

/// One document with every (question, nuggets) whose pool holds it: its calls run one after
/// another, so the document's tokens are computed once.
pub(super) struct DocumentItem<'a> {
    pub doc: &'a Document,
    pub questions: Vec<(&'a Question, &'a [NuggetText])>,
}

/// The rows of one document, whether its text was cut to fit, and the calls' repairs.
pub(super) struct DocumentResult {
    pub rows: Vec<JudgmentRecord>,
    pub truncated: bool,
    pub counts: AskCounts,
}

/// The rationale of a `quote` row whose model found no statement of the nugget.
pub const NO_STATEMENT: &str = "the model found no statement of the nugget";

/// Longest quote the `quote` verdict's schema allows, in characters: a sentence or a code
/// line, not a passage.
pub const MAX_QUOTE_CHARS: usize = 300;

/// The JSON Schema of a `quote` answer: `{"quote": "...", "supported": bool}`, the quote first
/// (evidence before verdict; schemas are sent key-sorted, and `quote` sorts first).
pub fn quote_schema() -> Value {
    json!({
        "title": "evidence",
        "type": "object",
        "properties": {
            "quote": {"type": "string", "maxLength": MAX_QUOTE_CHARS},
            "supported": {"type": "boolean"},
        },
        "required": ["quote", "supported"],
        "additionalProperties": false,
    })
}

/// The shape a repair request asks for, in words.
const QUOTE_FORMAT: &str = "one JSON object with the fields \"quote\" (the document's sentence \
    or line that states the fact, copied exactly, or \"\" when none does) and \"supported\" \
    (true or false)";

/// Reads a `quote` answer: the quote (empty when absent) and the verdict.
pub(super) fn parse_quote(text: &str) -> ParseOutcome<(String, bool)> {
    let Some(map) = parse::extract_json_with_key(text, "supported") else {
        return Err((
            "no JSON object with a \"supported\" field found in the reply".into(),
            None,
        ));
    };
    let Some(supported) = map.get("supported").and_then(parse::parse_verdict) else {
        return Err(("\"supported\" is not true or false".into(), None));
    };
    let quote = map
        .get("quote")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    Ok((quote, supported))
}

/// `text` with every run of whitespace as one space, trimmed.
fn squeeze_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether `quote` is in `document` once whitespace runs count as one space. Quote marks or
/// backticks the model put around the whole quote are not part of it; an empty quote is
/// never found.
pub fn quote_in_document(quote: &str, document: &str) -> bool {
    let quote = squeeze_whitespace(quote);
    let quote = quote.trim_matches(|c| matches!(c, '"' | '\'' | '`')).trim();
    !quote.is_empty() && squeeze_whitespace(document).contains(quote)
}

/// What the rationale says of a verdict: the probability (when the model was asked) and the
/// terms found.
fn rationale(probability: Option<f64>, coverage: &TermCoverage, place: &str) -> String {
    let mut text = match probability {
        Some(p) => format!("P(yes) {p:.3}; "),
        None => String::new(),
    };
    let _ = write!(
        text,
        "{} of {} nugget terms in the {place}",
        coverage.found.len(),
        coverage.looked_for.len()
    );
    if !coverage.found.is_empty() {
        let shown: Vec<&str> = coverage
            .found
            .iter()
            .take(RATIONALE_TERMS)
            .map(String::as_str)
            .collect();
        text.push_str(": ");
        text.push_str(&shown.join(", "));
        if coverage.found.len() > RATIONALE_TERMS {
            text.push_str(", ...");
        }
    }
    text
}

/// The rationale of a `graded` row: the most likely grade, the expected one, and the terms.
fn graded_rationale(grade: SupportGrade, expected: f64, coverage: &TermCoverage) -> String {
    format!(
        "grade {}, expected {expected:.3}; {}",
        grade.name(),
        rationale(None, coverage, "document")
    )
}

/// Judges every nugget of every question of `item` against its document.
pub(super) fn judge_document(
    llm: &Llm,
    config: &JudgeConfig,
    item: &DocumentItem<'_>,
) -> Result<DocumentResult> {
    let cut = truncate_to_tokens(&item.doc.text, config.max_doc_tokens);
    let truncated = cut.is_some();
    let shown = cut.as_deref().unwrap_or(&item.doc.text);
    let doc_terms = document_terms(&item.doc.text);
    let mut rows = Vec::new();
    let mut counts = AskCounts::default();
    for (question, nuggets) in &item.questions {
        let question_terms =
            content_terms(&format!("{} {}", question.query_title, question.query_text));
        for nugget in *nuggets {
            let coverage = term_coverage(&content_terms(&nugget.text), &question_terms, &doc_terms);
            if config.verdict == Verdict::Quote {
                let row = judge_quote(
                    llm,
                    config,
                    item.doc,
                    shown,
                    question,
                    nugget,
                    (&question_terms, coverage.share()),
                    &mut counts,
                )?;
                rows.push(row);
                continue;
            }
            let vars = [
                ("doc_id", item.doc.id.as_str()),
                ("document", shown.trim_end()),
                ("nugget", nugget.text.trim()),
            ];
            let (probability, grade) = match config.verdict {
                Verdict::Terms => (None, None),
                Verdict::Graded => {
                    let messages = JUDGE_GRADED.render(&vars)?;
                    let (grade, expected) =
                        grade_of(&llm.choice_probabilities(&messages, &GRADES)?);
                    (Some(expected), Some(grade))
                }
                _ => {
                    let messages = JUDGE_POINTWISE.render(&vars)?;
                    let yes = llm.choice_probabilities(&messages, &[YES, NO])?[0];
                    (Some(yes), None)
                }
            };
            let share = coverage.share();
            let score = match probability {
                Some(p) => (1.0 - config.term_weight) * p + config.term_weight * share,
                None => share,
            };
            let supported = score >= config.threshold && share >= config.min_term_coverage;
            rows.push(JudgmentRecord {
                query_id: question.query_id.clone(),
                nugget_id: nugget.id.clone(),
                doc_id: item.doc.id.clone(),
                supported: Some(supported),
                rationale: match (grade, probability) {
                    (Some(grade), Some(expected)) => graded_rationale(grade, expected, &coverage),
                    _ => rationale(probability, &coverage, "document"),
                },
                error: None,
                raw: None,
                probability,
                term_coverage: Some(share),
                quote: None,
                grade,
                votes: None,
                recheck: None,
            });
        }
    }
    Ok(DocumentResult {
        rows,
        truncated,
        counts,
    })
}

/// The `quote` verdict of one pair: asks for the quote and the verdict, checks the quote
/// against the whole document, and scores the share of the nugget's terms the quote holds.
/// `terms` is the question's terms and the nugget's term coverage of the whole document.
#[allow(clippy::too_many_arguments)]
fn judge_quote(
    llm: &Llm,
    config: &JudgeConfig,
    doc: &Document,
    shown: &str,
    question: &Question,
    nugget: &NuggetText,
    terms: (&std::collections::BTreeSet<String>, f64),
    counts: &mut AskCounts,
) -> Result<JudgmentRecord> {
    let (question_terms, document_share) = terms;
    let messages = JUDGE_QUOTE.render(&[
        ("doc_id", doc.id.as_str()),
        ("document", shown.trim_end()),
        ("nugget", nugget.text.trim()),
    ])?;
    let params = call_params(&config.params, config.structured_output, quote_schema);
    let answer = ask(
        llm,
        messages,
        &params,
        config.max_repairs,
        QUOTE_FORMAT,
        parse_quote,
    )?;
    counts.repairs += answer.counts.repairs;
    counts.schema_mismatches += answer.counts.schema_mismatches;
    let mut row = JudgmentRecord {
        query_id: question.query_id.clone(),
        nugget_id: nugget.id.clone(),
        doc_id: doc.id.clone(),
        supported: None,
        rationale: String::new(),
        error: answer.problem.clone(),
        raw: None,
        probability: None,
        term_coverage: Some(document_share),
        quote: None,
        grade: None,
        votes: None,
        recheck: None,
    };
    let Some((quote, said_supported)) = answer.value else {
        row.raw = Some(answer.raw);
        return Ok(row);
    };
    let verified = quote_in_document(&quote, &doc.text);
    let quote_coverage = term_coverage(
        &content_terms(&nugget.text),
        question_terms,
        &document_terms(&quote),
    );
    let share = quote_coverage.share();
    row.supported = Some(
        said_supported
            && verified
            && share >= config.threshold
            && document_share >= config.min_term_coverage,
    );
    row.rationale = match (said_supported, quote.trim().is_empty(), verified) {
        (false, _, _) => NO_STATEMENT.to_string(),
        (true, true, _) => "the model said supported but quoted nothing".to_string(),
        (true, false, false) => "the quote is not in the document".to_string(),
        (true, false, true) => format!("quoted; {}", rationale(None, &quote_coverage, "quote")),
    };
    if !quote.trim().is_empty() {
        row.quote = Some(Quote {
            text: quote,
            verified,
        });
    }
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quote_is_found_whatever_its_whitespace_and_never_when_invented() {
        let doc = "Set the driver:\n\n    CACHE_DRIVER=redis\n\nThen   restart the worker.";
        assert!(quote_in_document("CACHE_DRIVER=redis", doc));
        assert!(quote_in_document("Then restart the worker.", doc));
        assert!(quote_in_document("`CACHE_DRIVER=redis`", doc));
        assert!(quote_in_document(
            "\"Set the driver: CACHE_DRIVER=redis\"",
            doc
        ));
        assert!(!quote_in_document("CACHE_DRIVER=memcached", doc));
        assert!(
            !quote_in_document("then restart the worker.", doc),
            "case counts"
        );
        assert!(!quote_in_document("", doc));
        assert!(!quote_in_document("  \"\" ", doc));
    }

    #[test]
    fn quote_answers_parse_and_bad_ones_are_named() {
        assert_eq!(
            parse_quote(r#"{"quote": "a b", "supported": true}"#).ok(),
            Some(("a b".to_string(), true))
        );
        assert_eq!(
            parse_quote(r#"{"supported": false}"#).ok(),
            Some((String::new(), false))
        );
        assert!(parse_quote("yes").is_err());
        assert!(parse_quote(r#"{"quote": "x", "supported": "maybe"}"#).is_err());
    }

    #[test]
    fn grades_read_as_the_most_likely_and_the_expected_grade() {
        let (grade, expected) = grade_of(&[0.2, 0.5, 0.3]);
        assert_eq!(grade, SupportGrade::Partial);
        assert!((expected - 0.45).abs() < 1e-12, "{expected}");
        assert_eq!(grade_of(&[0.0, 0.0, 1.0]), (SupportGrade::None, 0.0));
        assert_eq!(grade_of(&[1.0, 0.0, 0.0]), (SupportGrade::Full, 1.0));
        // A tie goes to the more supportive grade; the threshold decides the label anyway.
        assert_eq!(grade_of(&[0.4, 0.4, 0.2]).0, SupportGrade::Full);
        let coverage = TermCoverage {
            looked_for: vec!["k1".into()],
            found: vec![],
        };
        assert_eq!(
            graded_rationale(SupportGrade::Partial, 0.45, &coverage),
            "grade partial, expected 0.450; 0 of 1 nugget terms in the document"
        );
    }

    #[test]
    fn rationale_names_the_probability_and_the_terms_found() {
        let coverage = TermCoverage {
            looked_for: vec!["k1".into(), "0.9".into(), "pyserini".into()],
            found: vec!["k1".into(), "0.9".into()],
        };
        assert_eq!(
            rationale(Some(0.8124), &coverage, "document"),
            "P(yes) 0.812; 2 of 3 nugget terms in the document: k1, 0.9"
        );
        assert_eq!(
            rationale(None, &coverage, "document"),
            "2 of 3 nugget terms in the document: k1, 0.9"
        );
        let many = TermCoverage {
            looked_for: (0..10).map(|i| format!("t{i}")).collect(),
            found: (0..10).map(|i| format!("t{i}")).collect(),
        };
        assert!(rationale(Some(0.5), &many, "document").ends_with("t7, ..."));
    }
}
