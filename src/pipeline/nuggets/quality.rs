//! Checks on generated nuggets: a nugget is an answer's fact, complete. Dropped, and recorded
//! with the reason in the question's row ([`DroppedNugget`]):
//! - one the token budget cut (the answer ended inside it, or it stops on `:`, `,`, `;`, an
//!   opening bracket or a dangling code span);
//! - one that restates the question: it asks (ends with `?`), describes the question ("The
//!   user wants ..."), or every content term it has is the question's.

use crate::dataset::{DropReason, DroppedNugget};

use super::super::judge::evidence::content_terms;

/// Why `text` is no nugget of this question and answer, if it is not.
pub fn check_nugget(text: &str, question: &str) -> Option<DropReason> {
    let trimmed = text.trim();
    if looks_cut(trimmed) {
        return Some(DropReason::Cut);
    }
    if restates_question(trimmed, question) {
        return Some(DropReason::RestatesQuestion);
    }
    None
}

/// Whether a nugget ends where no sentence ends, or at the schema's length bound.
fn looks_cut(text: &str) -> bool {
    if text.chars().count() >= super::MAX_NUGGET_CHARS {
        return true;
    }
    let dangling_code = text.matches("```").count() % 2 == 1
        || text.replace("```", "").matches('`').count() % 2 == 1;
    let open_brackets = ['(', '[', '{']
        .iter()
        .zip([')', ']', '}'])
        .any(|(&open, close)| text.matches(open).count() > text.matches(close).count());
    text.is_empty()
        || dangling_code
        || open_brackets
        || text.ends_with([':', ',', ';', '(', '[', '{', '-', '/', '='])
}

/// Openings of a nugget that describes the question instead of answering it.
const QUESTION_OPENINGS: &[&str] = &[
    "the user ",
    "the asker ",
    "the question ",
    "the op ",
    "the poster ",
    "you want ",
    "how do ",
    "how to ",
    "how can ",
];

/// Whether a nugget only asks or says again what the question says: it asks (ends with `?`),
/// it describes the question ("The user wants ..."), or every content term it has is the
/// question's.
fn restates_question(text: &str, question: &str) -> bool {
    let lower = text.to_lowercase();
    if text.ends_with('?') || QUESTION_OPENINGS.iter().any(|o| lower.starts_with(o)) {
        return true;
    }
    let nugget = content_terms(text);
    let question = content_terms(question);
    !nugget.is_empty() && nugget.iter().all(|t| question.contains(t))
}

/// Splits `texts` into the nuggets kept and those dropped (in order). When every nugget that
/// is not cut restates the question, those are kept (the question keeps the model's best
/// attempt; judging and the filters decide its fate) and only the cut ones are dropped.
pub fn keep_nuggets(texts: Vec<String>, question: &str) -> (Vec<String>, Vec<DroppedNugget>) {
    let checked: Vec<(String, Option<DropReason>)> = texts
        .into_iter()
        .map(|t| {
            let reason = check_nugget(&t, question);
            (t, reason)
        })
        .collect();
    let only_restating = !checked.iter().any(|(_, r)| r.is_none());
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (text, reason) in checked {
        match reason {
            Some(DropReason::RestatesQuestion) if only_restating => kept.push(text),
            Some(reason) => dropped.push(DroppedNugget { text, reason }),
            None => kept.push(text),
        }
    }
    (kept, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUESTION: &str = "How do I evaluate a TREC run with alpha-nDCG, coverage and recall? \
        I have a run file and the exported queries.";

    #[test]
    fn cut_nuggets_are_dropped() {
        for cut in [
            "Pass `--max-tokens` to `freshstack corpus`, for example:",
            "Use `freshstack eval --queries",
            "It switches to the GPT-",
            "The flags (see the docs",
            "Set the value,",
        ] {
            assert_eq!(check_nugget(cut, QUESTION), Some(DropReason::Cut), "{cut}");
        }
    }

    #[test]
    fn restated_questions_are_dropped_and_answers_kept() {
        for restated in [
            "How do I evaluate a TREC run with alpha-nDCG, coverage and recall?",
            "The user wants to evaluate a TREC run with alpha-nDCG and recall.",
            "Evaluate a TREC run with alpha-nDCG, coverage and recall.",
        ] {
            assert_eq!(
                check_nugget(restated, QUESTION),
                Some(DropReason::RestatesQuestion),
                "{restated}"
            );
        }
        for fact in [
            "`freshstack eval --queries queries.jsonl --run run.trec` evaluates the run.",
            "The scores are identical to the reference implementation.",
            "Chunks never overlap",
        ] {
            assert_eq!(check_nugget(fact, QUESTION), None, "{fact}");
        }
        let (kept, dropped) = keep_nuggets(
            vec![
                "The scores match the reference.".into(),
                "How do I evaluate a run?".into(),
            ],
            QUESTION,
        );
        assert_eq!(kept, ["The scores match the reference."]);
        assert_eq!(dropped[0].reason, DropReason::RestatesQuestion);
        // Only restatements (and a cut one): the restatements stay, the cut one goes.
        let (kept, dropped) = keep_nuggets(
            vec!["How do I evaluate a run?".into(), "Use the flag:".into()],
            QUESTION,
        );
        assert_eq!(kept, ["How do I evaluate a run?"]);
        assert_eq!(dropped.len(), 1);
        assert_eq!(dropped[0].reason, DropReason::Cut);
    }
}
