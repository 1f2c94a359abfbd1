//! The `probability` and `terms` verdicts. `probability`: one document and one nugget per
//! question to the model, which is
//! read, not asked to write: the probability that its answer starts with "yes" rather than
//! "no" ([`crate::llm::Llm::choice_probabilities`]), averaged with the share of the nugget's own
//! terms the document holds ([`super::evidence`]) by `term_weight`; a pair is supported when
//! that score reaches the threshold (chosen on reference labels). `terms` asks no model: the
//! share of terms alone is the score.
//!
//! Small models asked for per-nugget booleans over a batch of documents say "supported" to
//! nearly everything; a probability with a threshold sets the operating point where the labels
//! say it is, and one pair per call leaves no batch position to be biased by.

use super::evidence::{TermCoverage, content_terms, document_terms, term_coverage};
use std::fmt::Write as _;

use super::{JudgeConfig, Verdict, truncate_to_tokens};
use crate::dataset::{Document, JudgmentRecord, NuggetText, Question};
use crate::error::Result;
use crate::llm::Llm;
use crate::llm::prompts::JUDGE_POINTWISE;

/// The spellings of the two answers whose first tokens are read.
const YES: &[&str] = &["yes", "Yes", "YES", " yes", " Yes"];
const NO: &[&str] = &["no", "No", "NO", " no", " No"];

/// Most found terms a rationale lists.
const RATIONALE_TERMS: usize = 8;

/// One document with every (question, nuggets) whose pool holds it: its calls run one after
/// another, so the document's tokens are computed once.
pub(super) struct DocumentItem<'a> {
    pub doc: &'a Document,
    pub questions: Vec<(&'a Question, &'a [NuggetText])>,
}

/// The rows of one document, and whether its text was cut to fit.
pub(super) struct DocumentResult {
    pub rows: Vec<JudgmentRecord>,
    pub truncated: bool,
}

/// What the rationale says of a verdict: the probability (when the model was asked) and the
/// terms found.
fn rationale(probability: Option<f64>, coverage: &TermCoverage) -> String {
    let mut text = match probability {
        Some(p) => format!("P(yes) {p:.3}; "),
        None => String::new(),
    };
    let _ = write!(
        text,
        "{} of {} nugget terms in the document",
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
    for (question, nuggets) in &item.questions {
        let question_terms =
            content_terms(&format!("{} {}", question.query_title, question.query_text));
        for nugget in *nuggets {
            let coverage = term_coverage(&content_terms(&nugget.text), &question_terms, &doc_terms);
            let probability = match config.verdict {
                Verdict::Terms => None,
                _ => {
                    let messages = JUDGE_POINTWISE.render(&[
                        ("doc_id", item.doc.id.as_str()),
                        ("document", shown.trim_end()),
                        ("nugget", nugget.text.trim()),
                    ])?;
                    Some(llm.choice_probabilities(&messages, &[YES, NO])?[0])
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
                rationale: rationale(probability, &coverage),
                error: None,
                raw: None,
                probability,
                term_coverage: Some(share),
            });
        }
    }
    Ok(DocumentResult { rows, truncated })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rationale_names_the_probability_and_the_terms_found() {
        let coverage = TermCoverage {
            looked_for: vec!["k1".into(), "0.9".into(), "pyserini".into()],
            found: vec!["k1".into(), "0.9".into()],
        };
        assert_eq!(
            rationale(Some(0.8124), &coverage),
            "P(yes) 0.812; 2 of 3 nugget terms in the document: k1, 0.9"
        );
        assert_eq!(
            rationale(None, &coverage),
            "2 of 3 nugget terms in the document: k1, 0.9"
        );
        let many = TermCoverage {
            looked_for: (0..10).map(|i| format!("t{i}")).collect(),
            found: (0..10).map(|i| format!("t{i}")).collect(),
        };
        assert!(rationale(Some(0.5), &many).ends_with("t7, ..."));
    }
}
