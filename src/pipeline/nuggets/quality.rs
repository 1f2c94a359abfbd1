//! Checks on generated nuggets: a nugget is an answer's fact, complete. Dropped, and recorded
//! with the reason in the question's row ([`DroppedNugget`]):
//! - one the token budget cut (the answer ended inside it, or it stops on `:`, `,`, `;`, an
//!   opening bracket or a dangling code span);
//! - one that restates the question: it asks (ends with `?`), describes the question ("The
//!   user wants ..."), or every content term it has is the question's;
//! - one that repeats an earlier nugget of the answer (the same content terms): a small model
//!   can write one nugget five times, and a judge would count it five times.
//!
//! Before the checks, a nugget of several sentences is split into one nugget per sentence
//! while the answer stays within its nugget budget: a nugget is one atomic fact (the prompt
//! asks for one sentence each), and small models copy whole paragraphs of the answer into one
//! string, or wrap a fact in sentences that describe the question and the answer, which the
//! checks then drop one by one.

use std::collections::BTreeSet;

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
    "the answer ",
    "the accepted answer ",
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

/// What makes two nuggets the same: their content terms, or, for a nugget without any, its
/// words in lower case.
fn repeat_key(text: &str) -> BTreeSet<String> {
    let terms = content_terms(text);
    if terms.is_empty() {
        text.split_whitespace().map(str::to_lowercase).collect()
    } else {
        terms
    }
}

/// Abbreviations whose period ends no sentence.
const ABBREVIATIONS: &[&str] = &["e.g", "i.e", "etc", "vs", "cf", "approx", "no", "fig"];

/// The sentences of `text`: split after `.`, `!` or `?` followed by white space and a capital
/// letter, a digit or a code span, outside code spans and not after an abbreviation or a
/// single character; a piece of fewer than three words stays with its neighbour.
fn sentences(text: &str) -> Vec<String> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut in_code = false;
    for (i, &(offset, c)) in chars.iter().enumerate() {
        if c == '`' {
            in_code = !in_code;
            continue;
        }
        if in_code || !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let Some(&(_, space)) = chars.get(i + 1) else {
            continue;
        };
        let next = chars[i + 1..].iter().find(|(_, n)| !n.is_whitespace());
        let starts_sentence =
            next.is_some_and(|&(_, n)| n.is_uppercase() || n.is_ascii_digit() || n == '`');
        let before = &text[start..offset];
        let last_word = before
            .rsplit(|ch: char| ch.is_whitespace() || ch == '(')
            .next()
            .unwrap_or("")
            .to_lowercase();
        let abbreviation = last_word.chars().count() <= 1 || ABBREVIATIONS.contains(&&*last_word);
        if space.is_whitespace() && starts_sentence && !abbreviation {
            let end = offset + c.len_utf8();
            pieces.push(text[start..end].trim().to_string());
            start = end;
        }
    }
    pieces.push(text[start..].trim().to_string());
    // Fragments of one or two words join the piece before them (or after, for the first).
    let mut joined: Vec<String> = Vec::new();
    for piece in pieces.into_iter().filter(|p| !p.is_empty()) {
        match joined.last_mut() {
            Some(last)
                if last.split_whitespace().count() < 3 || piece.split_whitespace().count() < 3 =>
            {
                last.push(' ');
                last.push_str(&piece);
            }
            _ => joined.push(piece),
        }
    }
    joined
}

/// `texts` with each nugget of several sentences split into its sentences, in order, as long as
/// the total stays within `limit` (a nugget whose sentences would not fit stays whole).
pub fn split_sentences(texts: Vec<String>, limit: usize) -> Vec<String> {
    let mut out = Vec::with_capacity(texts.len());
    let count = texts.len();
    for (i, text) in texts.into_iter().enumerate() {
        let pieces = sentences(&text);
        let still_to_come = count - i - 1;
        if pieces.len() > 1 && out.len() + pieces.len() + still_to_come <= limit {
            out.extend(pieces);
        } else {
            out.push(text);
        }
    }
    out
}

/// Splits `texts` into the nuggets kept and those dropped (in order). A nugget that is not cut
/// but repeats an earlier one that is not cut either is dropped. When every nugget left
/// restates the question, those are kept (the question keeps the model's best attempt;
/// judging and the filters decide its fate) and only the cut and repeated ones are dropped.
pub fn keep_nuggets(texts: Vec<String>, question: &str) -> (Vec<String>, Vec<DroppedNugget>) {
    let mut seen: Vec<BTreeSet<String>> = Vec::new();
    let checked: Vec<(String, Option<DropReason>)> = texts
        .into_iter()
        .map(|t| {
            let mut reason = check_nugget(&t, question);
            if reason != Some(DropReason::Cut) {
                let key = repeat_key(&t);
                if seen.contains(&key) {
                    reason = Some(DropReason::Repeated);
                } else {
                    seen.push(key);
                }
            }
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

    #[test]
    fn nuggets_of_several_sentences_are_split_within_the_budget() {
        let paragraph = "Tokens are counted with `cl100k_base` by default, e.g. as the \
            reference does. Chunks are cut at headings, then lines. They never overlap.";
        assert_eq!(
            sentences(paragraph),
            [
                "Tokens are counted with `cl100k_base` by default, e.g. as the reference does.",
                "Chunks are cut at headings, then lines.",
                "They never overlap.",
            ]
        );
        // No split inside a code span, after a version number or before a lower-case word; a
        // two-word piece stays with its neighbour.
        for whole in [
            "Run `a. B` to start it in version 0.9. then stop.",
            "Use k1 = 0.9 and b = 0.4 as the defaults of the BM25 scorer.",
            "Set it to 5. Done.",
        ] {
            assert_eq!(sentences(whole), [whole], "{whole}");
        }
        // Within the budget: the first nugget is split, the second would overflow and stays.
        let texts = vec![
            "The question asks about chunking. Pass `--max-tokens` to cap the tokens.".to_string(),
            "A second fact stays whole. Its second sentence too.".to_string(),
        ];
        let split = split_sentences(texts.clone(), 3);
        assert_eq!(split.len(), 3);
        assert_eq!(split[2], texts[1]);
        assert_eq!(split_sentences(texts.clone(), 4).len(), 4);
        assert_eq!(split_sentences(texts.clone(), 2), texts);
        // The description of the question then goes, the fact stays.
        let (kept, dropped) = keep_nuggets(split_sentences(texts, 3), QUESTION);
        assert_eq!(kept[0], "Pass `--max-tokens` to cap the tokens.");
        assert_eq!(dropped[0].reason, DropReason::RestatesQuestion);
    }

    #[test]
    fn repeated_nuggets_are_dropped_after_their_first_copy() {
        let fact = "Scores of a query without judgments are 0, with one warning.";
        let (kept, dropped) = keep_nuggets(
            vec![
                fact.into(),
                "The defaults are alpha-nDCG@10 and Recall@50.".into(),
                fact.into(),
                // The same terms with other function words and case: the same nugget.
                "scores of the query without judgments are 0 with one warning".into(),
                // A cut copy is dropped as cut; a nugget sharing only some terms stays.
                "Scores of a query without judgments are 0, with one warning,".into(),
                "A query without judgments is skipped by the reference.".into(),
            ],
            QUESTION,
        );
        assert_eq!(
            kept,
            [
                fact,
                "The defaults are alpha-nDCG@10 and Recall@50.",
                "A query without judgments is skipped by the reference.",
            ]
        );
        let reasons: Vec<DropReason> = dropped.iter().map(|d| d.reason).collect();
        assert_eq!(
            reasons,
            [DropReason::Repeated, DropReason::Repeated, DropReason::Cut]
        );
        // Copies of a restatement: one stays (the question keeps its only attempt).
        let (kept, dropped) = keep_nuggets(
            vec![
                "How do I evaluate a run?".into(),
                "How do I evaluate a run?".into(),
            ],
            QUESTION,
        );
        assert_eq!(kept, ["How do I evaluate a run?"]);
        assert_eq!(dropped[0].reason, DropReason::Repeated);
    }
}
