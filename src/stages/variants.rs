//! Query variants for the inference setting (paper §3.4): from the question alone, sub-questions
//! (question decomposition) and a closed-book answer, each later used as a retrieval query.

use std::path::Path;

use serde_json::Value;

use super::input::{QuestionInput, VariantsRecord};
use super::run::{ParseOutcome, StageRecord, ask, run_question_stage, stage_settings};
use super::{DEFAULT_MAX_REPAIRS, StageSummary};
use crate::dataset::Shard;
use crate::error::Result;
use crate::llm::prompts::QUERY_VARIANTS;
use crate::llm::{ChatParams, Llm, parse};
use crate::progress::Progress;

/// Settings of the query-variants stage.
#[derive(Debug, Clone)]
pub struct VariantsConfig {
    /// Generation parameters (default: greedy, 1024 tokens).
    pub params: ChatParams,
    /// Most sub-questions asked for (and kept).
    pub max_sub_questions: usize,
    /// Repair requests after an unusable answer.
    pub max_repairs: u32,
    /// Only this slice of the questions (sorted by id, question `i` to shard `i % N`); a
    /// sidecar for `freshstack merge` is written next to the output.
    pub shard: Option<Shard>,
}

impl Default for VariantsConfig {
    fn default() -> Self {
        Self {
            params: ChatParams {
                max_tokens: 1024,
                ..ChatParams::default()
            },
            max_sub_questions: 5,
            max_repairs: DEFAULT_MAX_REPAIRS,
            shard: None,
        }
    }
}

const FORMAT: &str = r#"{"sub_questions": ["first sub-question", "second sub-question"], "closed_book_answer": "your answer"}"#;

fn parse_variants(text: &str) -> ParseOutcome<(Vec<String>, String)> {
    let Some(map) = parse::extract_json_object(text) else {
        return Err(("no JSON object found".into(), None));
    };
    let subs = [
        "sub_questions",
        "subquestions",
        "sub-questions",
        "questions",
    ]
    .iter()
    .find_map(|k| map.get(*k).and_then(Value::as_array))
    .map(|items| {
        items
            .iter()
            .filter_map(Value::as_str)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
    })
    .unwrap_or_default();
    let answer = ["closed_book_answer", "answer", "closed-book answer"]
        .iter()
        .find_map(|k| map.get(*k).and_then(Value::as_str))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    match (subs.is_empty(), answer.is_empty()) {
        (false, false) => Ok((subs, answer)),
        (true, _) => Err((
            "field sub_questions: missing or empty (expected an array of strings)".into(),
            None,
        )),
        (false, true) => Err((
            "field closed_book_answer: missing or empty (expected a string)".into(),
            None,
        )),
    }
}

fn variants_for(
    llm: &Llm,
    config: &VariantsConfig,
    question: &QuestionInput,
) -> Result<(VariantsRecord, u32)> {
    let max = config.max_sub_questions.to_string();
    let messages = QUERY_VARIANTS.render(&[
        ("title", question.query_title.trim()),
        ("question", question.query_text.trim()),
        ("max_sub_questions", &max),
    ])?;
    let answer = ask(
        llm,
        messages,
        &config.params,
        config.max_repairs,
        FORMAT,
        parse_variants,
    )?;
    let record = match (answer.value, answer.problem) {
        (Some((mut subs, closed_book_answer)), None) => {
            subs.truncate(config.max_sub_questions.max(1));
            VariantsRecord {
                query_id: question.query_id.clone(),
                sub_questions: subs,
                closed_book_answer,
                error: None,
                raw: None,
            }
        }
        (_, problem) => VariantsRecord {
            query_id: question.query_id.clone(),
            sub_questions: Vec::new(),
            closed_book_answer: String::new(),
            error: Some(problem.unwrap_or_else(|| "no variants".into())),
            raw: Some(answer.raw),
        },
    };
    Ok((record, answer.repairs))
}

impl StageRecord for VariantsRecord {
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// Writes sub-questions and a closed-book answer for every question of `questions` (JSONL)
/// into `out` (JSONL, one [`VariantsRecord`] per question, sorted by question id).
pub fn generate_query_variants(
    llm: &Llm,
    config: &VariantsConfig,
    questions: &Path,
    out: &Path,
    progress: &dyn Progress,
) -> Result<StageSummary> {
    let settings = stage_settings(
        llm,
        QUERY_VARIANTS.id,
        &config.params,
        &format!(
            "max_sub_questions={} max_repairs={}",
            config.max_sub_questions, config.max_repairs
        ),
    );
    run_question_stage(
        llm,
        "query variants",
        QUERY_VARIANTS.id,
        questions,
        out,
        (config.shard, settings),
        progress,
        |q| variants_for(llm, config, q),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_variants_leniently() {
        let (subs, answer) = parse_variants(
            "Here you go:\n```json\n{\"subquestions\": [\"a?\", \" \"], \"answer\": \"Use X.\"}\n```",
        )
        .unwrap();
        assert_eq!(subs, vec!["a?"]);
        assert_eq!(answer, "Use X.");
        assert!(parse_variants("{\"sub_questions\": [\"a\"]}").is_err());
        assert!(parse_variants("1. a\n2. b").is_err());
    }
}
