//! Query variants for the inference setting (paper §3.4): from the question alone, sub-questions
//! (question decomposition) and a closed-book answer, each later used as a retrieval query.

use std::path::Path;

use serde_json::{Value, json};

use super::config::LlmStage;
use super::orchestrator::{Builder, StageOutcome, calls_line, carried_note, layout};
use super::workers::{
    AskCounts, ParseOutcome, StageRecord, ask, call_params, run_question_stage, stage_settings,
};
use super::{DEFAULT_MAX_REPAIRS, StageSummary, StructuredOutput};
use crate::dataset::{Question, Shard, VariantsRecord};
use crate::error::Result;
use crate::llm::prompts::QUERY_VARIANTS;
use crate::llm::schema::chars_within_tokens;
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
    /// Whether each call carries its JSON Schema ([`variants_schema`]).
    pub structured_output: StructuredOutput,
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
            structured_output: StructuredOutput::default(),
        }
    }
}

/// Longest sub-question the schema allows, in characters.
pub const MAX_SUB_QUESTION_CHARS: usize = 300;
/// Longest closed-book answer the schema allows, in characters (the prompt asks for at most
/// 250 words).
pub const MAX_CLOSED_BOOK_CHARS: usize = 2000;

/// The JSON Schema of a query-variants answer: `{"closed_book_answer": "...", "sub_questions":
/// [...]}` in that order (serde_json sorts object keys, and engines generate properties in the
/// order they are listed: the answer first, then its decomposition), 2 (1 when only one is allowed) to `max_sub_questions` sub-questions of
/// 1 to `MAX_SUB_QUESTION_CHARS` characters, an answer of 1 to `MAX_CLOSED_BOOK_CHARS`; less
/// when `max_tokens` would not hold that much (a third of it for the sub-questions, the rest for
/// the answer; [`chars_within_tokens`]).
pub fn variants_schema(max_sub_questions: usize, max_tokens: u32) -> Value {
    let max = max_sub_questions.max(1);
    let budget = (max_tokens as usize).saturating_sub(16);
    let sub_chars =
        chars_within_tokens((budget / 3 / max).saturating_sub(8), MAX_SUB_QUESTION_CHARS);
    let answer_chars = chars_within_tokens(budget - budget / 3, MAX_CLOSED_BOOK_CHARS);
    json!({
        "title": "query_variants",
        "type": "object",
        "properties": {
            "closed_book_answer": {
                "type": "string",
                "minLength": 1,
                "maxLength": answer_chars,
            },
            "sub_questions": {
                "type": "array",
                "minItems": max.min(2),
                "maxItems": max,
                "items": {"type": "string", "minLength": 1, "maxLength": sub_chars},
            },
        },
        "required": ["closed_book_answer", "sub_questions"],
        "additionalProperties": false,
    })
}

/// The shape a repair request asks for, in words.
fn format_words(max_sub_questions: usize) -> String {
    format!(
        "one JSON object with two fields, in this order: \"closed_book_answer\", a string, then \
         \"sub_questions\", an array of 1 to {} strings",
        max_sub_questions.max(1)
    )
}

pub(super) fn parse_variants(text: &str) -> ParseOutcome<(Vec<String>, String)> {
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
    question: &Question,
) -> Result<(VariantsRecord, AskCounts)> {
    let max = config.max_sub_questions.to_string();
    let messages = QUERY_VARIANTS.render(&[
        ("title", question.query_title.trim()),
        ("question", question.query_text.trim()),
        ("max_sub_questions", &max),
    ])?;
    let params = call_params(&config.params, config.structured_output, || {
        variants_schema(config.max_sub_questions, config.params.max_tokens)
    });
    let answer = ask(
        llm,
        messages,
        &params,
        config.max_repairs,
        &format_words(config.max_sub_questions),
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
    Ok((record, answer.counts))
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
    generate_variants_carrying(llm, config, questions, out, progress, &|_| None)
}

/// [`generate_query_variants`], taking `carried`'s record of a question instead of asking
/// when it has one (`freshstack refresh`).
fn generate_variants_carrying(
    llm: &Llm,
    config: &VariantsConfig,
    questions: &Path,
    out: &Path,
    progress: &dyn Progress,
    carried: &dyn Fn(&Question) -> Option<VariantsRecord>,
) -> Result<StageSummary> {
    let settings = stage_settings(
        llm,
        QUERY_VARIANTS.id,
        &config.params,
        config.structured_output,
        &format!(
            "max_sub_questions={} max_repairs={}",
            config.max_sub_questions, config.max_repairs
        ),
    );
    run_question_stage(
        llm,
        "query variants",
        (QUERY_VARIANTS.id, config.structured_output),
        questions,
        out,
        (config.shard, settings),
        progress,
        carried,
        |q| variants_for(llm, config, q),
    )
}

impl Builder<'_> {
    pub(super) fn variants(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint(LlmStage::Variants, &QUERY_VARIANTS)
            .json("variants", &self.config.variants)
            .maybe_fingerprint("questions", self.hash(layout::QUESTIONS))
            .finish();
        self.stage(
            "variants",
            fingerprint,
            &[layout::VARIANTS],
            on_stage,
            |b| {
                let stage_llm = b.llm_section(LlmStage::Variants);
                let config = VariantsConfig {
                    params: b.params(LlmStage::Variants, b.config.variants.max_tokens),
                    max_sub_questions: b.config.variants.max_sub_questions,
                    max_repairs: stage_llm.max_repairs,
                    shard: None,
                    structured_output: stage_llm.structured_output,
                };
                let questions = b.path(layout::QUESTIONS);
                let out = b.path(layout::VARIANTS);
                let carry = b.carry;
                let carried = |q: &Question| carry.and_then(|c| c.variants(q));
                let llm = &b.llm(LlmStage::Variants)?.llm;
                let before = llm.stats();
                let summary =
                    generate_variants_carrying(llm, &config, &questions, &out, progress, &carried)?;
                Ok(format!(
                    "{} questions, {} failed after repairs{}; {}{}",
                    summary.items,
                    summary.failed,
                    carried_note(summary.ok + summary.failed - summary.items, carry.is_some()),
                    calls_line(&before, &llm.stats()),
                    Self::structured_note(&summary)
                ))
            },
        )
    }
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

    #[test]
    fn schema_is_strict_and_its_answers_parse() {
        use crate::llm::schema::{check_answer, check_portable};
        let schema = variants_schema(3, 1024);
        check_portable(&schema).unwrap();
        let keys: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["closed_book_answer", "sub_questions"],
            "generation order"
        );
        let answer = r#"{"sub_questions": ["a?", "b?"], "closed_book_answer": "Use X."}"#;
        check_answer(&schema, answer).unwrap();
        assert_eq!(
            parse_variants(answer).unwrap(),
            (
                vec!["a?".to_string(), "b?".to_string()],
                "Use X.".to_string()
            )
        );
        let one = r#"{"sub_questions": ["a?"], "closed_book_answer": "Use X."}"#;
        assert!(
            check_answer(&schema, one)
                .unwrap_err()
                .contains("fewer than 2")
        );
        check_answer(&variants_schema(1, 1024), one).unwrap();
        let small = variants_schema(3, 256);
        assert_eq!(
            small["properties"]["sub_questions"]["items"]["maxLength"],
            27
        );
        assert_eq!(small["properties"]["closed_book_answer"]["maxLength"], 240);
        let empty = r#"{"sub_questions": ["a?", "b?"], "closed_book_answer": ""}"#;
        assert!(check_answer(&schema, empty).is_err());
    }
}
