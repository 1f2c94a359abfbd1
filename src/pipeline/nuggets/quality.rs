//! Checks on generated nuggets: a nugget is an answer's fact, complete. Dropped, and recorded
//! with the reason in the question's row ([`DroppedNugget`]):
//! - one the token budget cut (the answer ended inside it, or it stops on `:`, `,`, `;`, an
//!   opening bracket or a dangling code span);
//! - one that restates the question: it asks (ends with `?`), or none of its content terms
//!   comes from the accepted answer alone while most of them are the question's.

use crate::dataset::{DropReason, DroppedNugget};

use super::super::judge::evidence::content_terms;

/// Why `text` is no nugget of this question and answer, if it is not.
pub fn check_nugget(text: &str, question: &str, answer: &str) -> Option<DropReason> {
    let trimmed = text.trim();
    if looks_cut(trimmed) {
        return Some(DropReason::Cut);
    }
    if restates_question(trimmed, question, answer) {
        return Some(DropReason::RestatesQuestion);
    }
    None
}

/// Whether a nugget ends where no sentence ends.
fn looks_cut(text: &str) -> bool {
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

/// Whether a nugget only asks or says again what the question says.
fn restates_question(text: &str, question: &str, answer: &str) -> bool {
    if text.ends_with('?') {
        return true;
    }
    let nugget = content_terms(text);
    if nugget.is_empty() {
        return false;
    }
    let question = content_terms(question);
    let answer = content_terms(answer);
    let from_answer_alone = nugget
        .iter()
        .filter(|t| answer.contains(*t) && !question.contains(*t))
        .count();
    let from_question = nugget.iter().filter(|t| question.contains(*t)).count();
    from_answer_alone == 0 && 2 * from_question >= nugget.len()
}

/// Splits `texts` into the nuggets kept and those dropped (in order).
pub fn keep_nuggets(
    texts: Vec<String>,
    question: &str,
    answer: &str,
) -> (Vec<String>, Vec<DroppedNugget>) {
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for text in texts {
        match check_nugget(&text, question, answer) {
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
    const ANSWER: &str = "Run `freshstack eval --queries queries.jsonl --run run.trec`; it prints \
        alpha-nDCG@10, Coverage@20 and Recall@50, identical to the reference.";

    #[test]
    fn cut_nuggets_are_dropped() {
        for cut in [
            "Pass `--max-tokens` to `freshstack corpus`, for example:",
            "Use `freshstack eval --queries",
            "It switches to the GPT-",
            "The flags (see the docs",
            "Set the value,",
        ] {
            assert_eq!(
                check_nugget(cut, QUESTION, ANSWER),
                Some(DropReason::Cut),
                "{cut}"
            );
        }
    }

    #[test]
    fn restated_questions_are_dropped_and_answers_kept() {
        for restated in [
            "How do I evaluate a TREC run with alpha-nDCG, coverage and recall?",
            "The user wants to evaluate a TREC run with alpha-nDCG and recall.",
        ] {
            assert_eq!(
                check_nugget(restated, QUESTION, ANSWER),
                Some(DropReason::RestatesQuestion),
                "{restated}"
            );
        }
        for fact in [
            "`freshstack eval --queries queries.jsonl --run run.trec` evaluates the run.",
            "The scores are identical to the reference implementation.",
            "Chunks never overlap",
        ] {
            assert_eq!(check_nugget(fact, QUESTION, ANSWER), None, "{fact}");
        }
        let (kept, dropped) = keep_nuggets(
            vec![
                "The scores match the reference.".into(),
                "How do I evaluate a run?".into(),
            ],
            QUESTION,
            ANSWER,
        );
        assert_eq!(kept, ["The scores match the reference."]);
        assert_eq!(dropped[0].reason, DropReason::RestatesQuestion);
    }
}
