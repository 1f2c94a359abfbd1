//! Nugget generation (paper §3.3): question + accepted answer -> atomic facts, most important
//! first, with a grading-notes style prompt.

use std::path::Path;

use super::input::{NuggetText, NuggetsRecord, QuestionInput};
use super::run::{ParseOutcome, StageRecord, ask, run_question_stage, stage_settings};
use super::{DEFAULT_MAX_REPAIRS, StageSummary};
use crate::dataset::Shard;
use crate::error::Result;
use crate::llm::prompts::NUGGETS;
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
        }
    }
}

const FORMAT: &str = r#"{"nuggets": ["first nugget", "second nugget"]}"#;

fn parse_nuggets(text: &str) -> ParseOutcome<Vec<String>> {
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
    question: &QuestionInput,
) -> Result<(NuggetsRecord, u32)> {
    let max = config.max_nuggets.to_string();
    let messages = NUGGETS.render(&[
        ("title", question.query_title.trim()),
        ("question", question.query_text.trim()),
        ("answer", question.answer_text.trim()),
        ("max_nuggets", &max),
    ])?;
    let answer = ask(
        llm,
        messages,
        &config.params,
        config.max_repairs,
        FORMAT,
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
    Ok((record, answer.repairs))
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
    let settings = stage_settings(
        llm,
        NUGGETS.id,
        &config.params,
        &format!(
            "max_nuggets={} max_repairs={}",
            config.max_nuggets, config.max_repairs
        ),
    );
    run_question_stage(
        llm,
        "nuggets",
        NUGGETS.id,
        questions,
        out,
        (config.shard, settings),
        progress,
        |q| nuggets_for(llm, config, q),
    )
}
