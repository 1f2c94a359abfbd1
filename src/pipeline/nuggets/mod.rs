//! Nugget generation (paper §3.3): question + accepted answer -> atomic facts, most important
//! first, with a grading-notes style prompt.
//!
//! The answer is bounded by the nugget count and the token budget, never by a string length
//! that would close a sentence early: when the budget ends inside the list, the complete
//! nuggets before the cut are kept. Nuggets that are cut or restate the question are dropped
//! ([`quality`]) and recorded in the row's `dropped`.

pub mod quality;

use std::path::Path;

use serde_json::{Value, json};

use super::config::LlmStage;
use super::orchestrator::{Builder, StageOutcome, calls_line, carried_note, layout};
use super::workers::{
    AskCounts, ParseOutcome, StageRecord, ask, call_params, run_question_stage, stage_settings,
};
use super::{DEFAULT_MAX_REPAIRS, StageSummary, StructuredOutput};
use serde::Serialize;

use crate::dataset::{
    DropReason, DroppedNugget, NuggetText, NuggetsRecord, Question, Shard, for_each_jsonl,
};
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

/// Longest nugget the schema allows, in characters: a guard against a model that never closes
/// its string, far above a sentence. A nugget that reaches it was cut there and is dropped
/// ([`quality`]), never kept half-written.
pub const MAX_NUGGET_CHARS: usize = 600;

/// The JSON Schema of a nuggets answer: `{"nuggets": [1 to max_nuggets strings]}`, no other
/// field, each string non-empty and under `MAX_NUGGET_CHARS`. The length bound is no budget
/// share (a grammar closes a string where its bound ends, mid-sentence): the answer is bounded by
/// the count and `max_tokens`, and a cut answer keeps its complete nuggets.
pub fn nuggets_schema(max_nuggets: usize) -> Value {
    json!({
        "title": "nuggets",
        "type": "object",
        "properties": {
            "nuggets": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_nuggets.max(1),
                "items": {"type": "string", "minLength": 1, "maxLength": MAX_NUGGET_CHARS},
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

/// The nuggets of an answer, and whether the answer's end cut a last one off (the complete
/// ones before it are kept).
pub(super) fn parse_nuggets(text: &str) -> ParseOutcome<(Vec<String>, bool)> {
    if let Some((strings, cut)) = parse::strings_before_cut(text, "nuggets")
        && !strings.is_empty()
    {
        return Ok((strings, cut));
    }
    parse::extract_string_list(text, "nuggets")
        .map(|list| (list, false))
        .ok_or_else(|| {
            (
                "no list of nuggets found (expected a JSON object with a \"nuggets\" array of \
                 strings)"
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
        nuggets_schema(config.max_nuggets)
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
        (Some((mut texts, cut)), None) => {
            texts.truncate(config.max_nuggets.max(1));
            let texts = quality::split_sentences(texts, config.max_nuggets.max(1));
            let (kept, mut dropped) = quality::keep_nuggets(
                texts,
                &format!("{}\n{}", question.query_title, question.query_text),
            );
            if cut {
                dropped.push(DroppedNugget {
                    text: String::new(),
                    reason: DropReason::Cut,
                });
            }
            let error = match (kept.is_empty(), dropped.is_empty()) {
                (false, _) => None,
                (true, true) => Some("the answer held no nuggets".to_string()),
                (true, false) => Some("every nugget was cut (see dropped)".to_string()),
            };
            NuggetsRecord {
                query_id: question.query_id.clone(),
                nuggets: kept
                    .into_iter()
                    .enumerate()
                    .map(|(n, text)| NuggetText {
                        id: format!("{}_{n}", question.query_id),
                        text,
                    })
                    .collect(),
                raw: error.as_ref().map(|_| answer.raw.clone()),
                error,
                dropped,
            }
        }
        (_, problem) => NuggetsRecord {
            query_id: question.query_id.clone(),
            nuggets: Vec::new(),
            error: Some(problem.unwrap_or_else(|| "no nuggets".into())),
            raw: Some(answer.raw),
            dropped: Vec::new(),
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

/// Nuggets dropped in a nuggets file, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DroppedCounts {
    /// Cut by the token budget or stopping mid-sentence.
    pub cut: u64,
    /// Restating the question.
    pub restating: u64,
    /// Repeating an earlier nugget of the same answer.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeated: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl DroppedCounts {
    /// Counts the `dropped` entries of every row of `path`.
    pub fn of_file(path: &Path) -> Result<Self> {
        let mut counts = Self::default();
        for_each_jsonl(path, |_, record: NuggetsRecord| counts.add(&record))?;
        Ok(counts)
    }

    /// Counts the `dropped` entries of one row.
    pub fn add(&mut self, record: &NuggetsRecord) {
        for dropped in &record.dropped {
            match dropped.reason {
                DropReason::Cut => self.cut += 1,
                DropReason::RestatesQuestion => self.restating += 1,
                DropReason::Repeated => self.repeated += 1,
            }
        }
    }

    /// `; dropped N cut and M restating the question` (and `K repeating another nugget` when
    /// there were such); empty when none was dropped.
    pub fn note(&self) -> String {
        match (self.cut + self.restating, self.repeated) {
            (0, 0) => String::new(),
            (_, 0) => format!(
                "; dropped {} cut and {} restating the question",
                self.cut, self.restating
            ),
            _ => format!(
                "; dropped {} cut, {} restating the question and {} repeating another nugget",
                self.cut, self.restating, self.repeated
            ),
        }
    }
}

impl Builder<'_> {
    pub(super) fn nuggets(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint(LlmStage::Nuggets, &NUGGETS)
            .json("nuggets", &self.config.nuggets)
            .maybe_fingerprint("questions", self.hash(layout::QUESTIONS))
            .finish();
        self.stage("nuggets", fingerprint, &[layout::NUGGETS], on_stage, |b| {
            let stage_llm = b.llm_section(LlmStage::Nuggets);
            let config = NuggetsConfig {
                params: b.params(LlmStage::Nuggets, b.config.nuggets.max_tokens),
                max_nuggets: b.config.nuggets.max_nuggets,
                max_repairs: stage_llm.max_repairs,
                shard: None,
                structured_output: stage_llm.structured_output,
            };
            let questions = b.path(layout::QUESTIONS);
            let out = b.path(layout::NUGGETS);
            let carry = b.carry;
            let carried = |q: &Question| carry.and_then(|c| c.nuggets(q));
            let llm = &b.llm(LlmStage::Nuggets)?.llm;
            let before = llm.stats();
            let summary =
                generate_nuggets_carrying(llm, &config, &questions, &out, progress, &carried)?;
            let dropped = DroppedCounts::of_file(&out)?;
            Ok(format!(
                "{} questions, {} failed after repairs{}{}; {}{}",
                summary.items,
                summary.failed,
                carried_note(summary.ok + summary.failed - summary.items, carry.is_some()),
                dropped.note(),
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
        let schema = nuggets_schema(3);
        check_portable(&schema).unwrap();
        let answer = r#"{"nuggets": ["Use X.", "Set Y to 2."]}"#;
        check_answer(&schema, answer).unwrap();
        let (list, cut) = parse_nuggets(answer).unwrap();
        assert_eq!(
            (list, cut),
            (vec!["Use X.".into(), "Set Y to 2.".into()], false)
        );
        let four = r#"{"nuggets": ["a", "b", "c", "d"]}"#;
        assert!(
            check_answer(&schema, four)
                .unwrap_err()
                .contains("more than 3")
        );
        assert!(check_answer(&schema, r#"{"nuggets": []}"#).is_err());
        assert!(check_answer(&schema, r#"{"nuggets": ["a"], "note": "b"}"#).is_err());
        // The length bound is a runaway guard, the same whatever the budget.
        assert_eq!(
            schema["properties"]["nuggets"]["items"]["maxLength"],
            MAX_NUGGET_CHARS
        );
        let long = json!({"nuggets": ["x".repeat(MAX_NUGGET_CHARS + 1)]}).to_string();
        assert!(check_answer(&schema, &long).is_err());
        // Today's (v1) answer shapes still parse: old caches stay readable.
        let v1 = "Here:\n```json\n{\"nuggets\": [\"a\", \"b\",]}\n```";
        assert_eq!(parse_nuggets(v1).unwrap().0, vec!["a", "b"]);
        assert!(!format_words(3).contains("first"));
    }

    /// Regression (issue 33): the budget ended inside the third nugget; the two before it are
    /// kept whole and the cut is recorded, not closed into a half sentence.
    #[test]
    fn an_answer_cut_by_the_budget_keeps_its_complete_nuggets() {
        let cut = r#"{"nuggets": ["Pass `--max-tokens N` to cap documents.", "Tokens are counted with cl100k_base.", "It switches to the GPT-"#;
        let (list, was_cut) = parse_nuggets(cut).unwrap();
        assert!(was_cut);
        assert_eq!(list.len(), 2);
    }
}
