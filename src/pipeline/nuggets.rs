//! Nugget generation (paper §3.3): question + accepted answer -> atomic facts, most important
//! first, with a grading-notes style prompt.

use std::path::Path;

use serde_json::{Value, json};

use super::orchestrator::{Builder, StageOutcome, calls_line, carried_note, layout};
use super::workers::{
    AskCounts, ParseOutcome, StageRecord, ask, call_params, run_question_stage, stage_settings,
};
use super::{DEFAULT_MAX_REPAIRS, StageSummary, StructuredOutput};
use crate::dataset::{NuggetText, NuggetsRecord, Question, Shard};
use crate::error::Result;
use crate::llm::prompts::NUGGETS;
use crate::llm::schema::chars_within_tokens;
use crate::llm::{ChatParams, Llm, parse};
use crate::progress::Progress;

/// Settings of the nuggets stage.
#[derive(Debug, Clone)]
pub struct NuggetsConfig {
    /// Generation parameters (default: greedy, 1024 tokens).
    pub params: ChatParams,
    /// Most nuggets asked for (and kept) per question.
    pub max_nuggets: usize,
    /// Repair requests after an unusable answer.
    pub max_repairs: u32,
    /// Only this slice of the questions (sorted by id, question `i` to shard `i % N`); a
    /// sidecar for `freshstack merge` is written next to the output.
    pub shard: Option<Shard>,
    /// Whether each call carries its JSON Schema ([`nuggets_schema`]).
    pub structured_output: StructuredOutput,
}

impl Default for NuggetsConfig {
    fn default() -> Self {
        Self {
            params: ChatParams {
                max_tokens: 1024,
                ..ChatParams::default()
            },
            max_nuggets: 10,
            max_repairs: DEFAULT_MAX_REPAIRS,
            shard: None,
            structured_output: StructuredOutput::default(),
        }
    }
}

/// Longest nugget the schema allows, in characters (one sentence; v1 nuggets of real models
/// stay well under it).
pub const MAX_NUGGET_CHARS: usize = 300;

/// The JSON Schema of a nuggets answer: `{"nuggets": [1 to max_nuggets strings]}`, no other
/// field, each string at least 1 character and at most `MAX_NUGGET_CHARS`, or less when
/// `max_tokens` shared among `max_nuggets` strings would not hold that many
/// ([`chars_within_tokens`]).
pub fn nuggets_schema(max_nuggets: usize, max_tokens: u32) -> Value {
    let max_nuggets = max_nuggets.max(1);
    // Per string: its share of the budget less the object's frame and its quotes, comma and
    // indentation (models pretty-print).
    let per_nugget = (max_tokens as usize).saturating_sub(16) / max_nuggets;
    let max_chars = chars_within_tokens(per_nugget.saturating_sub(8), MAX_NUGGET_CHARS);
    json!({
        "title": "nuggets",
        "type": "object",
        "properties": {
            "nuggets": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_nuggets,
                "items": {"type": "string", "minLength": 1, "maxLength": max_chars},
            },
        },
        "required": ["nuggets"],
        "additionalProperties": false,
    })
}

/// The shape a repair request asks for, in words (no example a model could copy).
fn format_words(max_nuggets: usize) -> String {
    format!(
        "one JSON object with one field, \"nuggets\": an array of 1 to {} strings, each one \
         nugget",
        max_nuggets.max(1)
    )
}

pub(super) fn parse_nuggets(text: &str) -> ParseOutcome<Vec<String>> {
    parse::extract_string_list(text, "nuggets").ok_or_else(|| {
        (
            "no list of nuggets found (expected a JSON object with a \"nuggets\" array of strings)"
                .to_string(),
            None,
        )
    })
}

/// The nuggets record of one question.
pub(crate) fn nuggets_for(
    llm: &Llm,
    config: &NuggetsConfig,
    question: &Question,
) -> Result<(NuggetsRecord, AskCounts)> {
    let max = config.max_nuggets.to_string();
    let messages = NUGGETS.render(&[
        ("title", question.query_title.trim()),
        ("question", question.query_text.trim()),
        ("answer", question.answer_text.trim()),
        ("max_nuggets", &max),
    ])?;
    let params = call_params(&config.params, config.structured_output, || {
        nuggets_schema(config.max_nuggets, config.params.max_tokens)
    });
    let answer = ask(
        llm,
        messages,
        &params,
        config.max_repairs,
        &format_words(config.max_nuggets),
        parse_nuggets,
    )?;
    let record = match (answer.value, answer.problem) {
        (Some(texts), None) => NuggetsRecord {
            query_id: question.query_id.clone(),
            nuggets: texts
                .into_iter()
                .take(config.max_nuggets.max(1))
                .enumerate()
                .map(|(n, text)| NuggetText {
                    id: format!("{}_{n}", question.query_id),
                    text,
                })
                .collect(),
            error: None,
            raw: None,
        },
        (_, problem) => NuggetsRecord {
            query_id: question.query_id.clone(),
            nuggets: Vec::new(),
            error: Some(problem.unwrap_or_else(|| "no nuggets".into())),
            raw: Some(answer.raw),
        },
    };
    Ok((record, answer.counts))
}

impl StageRecord for NuggetsRecord {
    fn failed(&self) -> bool {
        self.error.is_some()
    }
}

/// Generates nuggets for every question of `questions` (JSONL) into `out` (JSONL, one
/// [`NuggetsRecord`] per question, sorted by question id).
pub fn generate_nuggets(
    llm: &Llm,
    config: &NuggetsConfig,
    questions: &Path,
    out: &Path,
    progress: &dyn Progress,
) -> Result<StageSummary> {
    generate_nuggets_carrying(llm, config, questions, out, progress, &|_| None)
}

/// [`generate_nuggets`], taking `carried`'s record of a question instead of asking when it has
/// one (`freshstack refresh`).
fn generate_nuggets_carrying(
    llm: &Llm,
    config: &NuggetsConfig,
    questions: &Path,
    out: &Path,
    progress: &dyn Progress,
    carried: &dyn Fn(&Question) -> Option<NuggetsRecord>,
) -> Result<StageSummary> {
    let settings = stage_settings(
        llm,
        NUGGETS.id,
        &config.params,
        config.structured_output,
        &format!(
            "max_nuggets={} max_repairs={}",
            config.max_nuggets, config.max_repairs
        ),
    );
    run_question_stage(
        llm,
        "nuggets",
        (NUGGETS.id, config.structured_output),
        questions,
        out,
        (config.shard, settings),
        progress,
        carried,
        |q| nuggets_for(llm, config, q),
    )
}

impl Builder<'_> {
    pub(super) fn nuggets(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint("nuggets", &NUGGETS)
            .json("nuggets", &self.config.nuggets)
            .maybe_fingerprint("questions", self.hash(layout::QUESTIONS))
            .finish();
        self.stage("nuggets", fingerprint, &[layout::NUGGETS], on_stage, |b| {
            let config = NuggetsConfig {
                params: b.params(b.config.nuggets.max_tokens),
                max_nuggets: b.config.nuggets.max_nuggets,
                max_repairs: b.config.llm.max_repairs,
                shard: None,
                structured_output: b.config.llm.structured_output,
            };
            let questions = b.path(layout::QUESTIONS);
            let out = b.path(layout::NUGGETS);
            let carry = b.carry;
            let carried = |q: &Question| carry.and_then(|c| c.nuggets(q));
            let llm = &b.llm()?.llm;
            let before = llm.stats();
            let summary =
                generate_nuggets_carrying(llm, &config, &questions, &out, progress, &carried)?;
            Ok(format!(
                "{} questions, {} failed after repairs{}; {}{}",
                summary.items,
                summary.failed,
                carried_note(summary.ok + summary.failed - summary.items, carry.is_some()),
                calls_line(&before, &llm.stats()),
                Self::structured_note(&summary)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::schema::{check_answer, check_portable};

    #[test]
    fn schema_bounds_the_list_and_the_parser_reads_its_answers() {
        let schema = nuggets_schema(3, 1024);
        check_portable(&schema).unwrap();
        let answer = r#"{"nuggets": ["Use X.", "Set Y to 2."]}"#;
        check_answer(&schema, answer).unwrap();
        assert_eq!(
            parse_nuggets(answer).unwrap(),
            vec!["Use X.", "Set Y to 2."]
        );
        let four = r#"{"nuggets": ["a", "b", "c", "d"]}"#;
        assert!(
            check_answer(&schema, four)
                .unwrap_err()
                .contains("more than 3")
        );
        assert!(check_answer(&schema, r#"{"nuggets": []}"#).is_err());
        let long = json!({"nuggets": ["x".repeat(MAX_NUGGET_CHARS + 1)]}).to_string();
        assert!(check_answer(&schema, &long).is_err());
        assert!(check_answer(&schema, r#"{"nuggets": ["a"], "note": "b"}"#).is_err());
        // Today's (v1) answer shapes still parse: old caches stay readable.
        let v1 = "Here:\n```json\n{\"nuggets\": [\"a\", \"b\",]}\n```";
        assert_eq!(parse_nuggets(v1).unwrap(), vec!["a", "b"]);
        assert!(!format_words(3).contains("first"));
        // A small budget shortens the strings so that the answer fits in it.
        let small = nuggets_schema(5, 256);
        assert_eq!(small["properties"]["nuggets"]["items"]["maxLength"], 60);
        assert_eq!(
            schema["properties"]["nuggets"]["items"]["maxLength"],
            MAX_NUGGET_CHARS
        );
    }
}
