//! The pipeline of `freshstack build` (paper Figure 2), one file per stage: `questions` ->
//! `corpus` -> `index` -> `nuggets` -> `variants` -> [`pool`] -> `judge` -> [`filter`] +
//! [`export`] -> `report` ([`ReportStage`]), run in that order by the orchestrator ([`build`],
//! from a [`BuildConfig`]; [`manifest`] makes it resumable and incremental).
//!
//! `freshstack refresh` ([`Refresh`]) is a build that carries over an old build's results whose
//! inputs are unchanged and records what changed ([`changes`]).
//!
//! The three LLM stages (paper §3.3-3.5) are also library calls of their own:
//! [`generate_nuggets`] from question + answer, [`generate_query_variants`] from the question
//! alone, and [`judge()`] (nugget-level support judgments on a pool), each over the
//! [`Llm`](crate::llm::Llm) client; their worker pool and ask-parse-repair loop are
//! `workers`. The rows they read and write are the data model's
//! ([`Question`](crate::dataset::Question), [`NuggetsRecord`](crate::dataset::NuggetsRecord),
//! ...). Guarantees: outputs are sorted by question id (then nugget, then document), whatever
//! the concurrency; they are written atomically; every item ends with a result or a recorded
//! failure (with the model's raw answer), never a silent default; a transport failure (server
//! unreachable after retries) stops the stage with an error and no output, and a rerun resumes
//! from the response cache.

pub mod changes;
pub mod config;
mod corpus;
pub mod export;
pub mod filter;
mod index;
pub mod judge;
pub mod manifest;
mod nuggets;
mod orchestrator;
pub mod pool;
mod questions;
pub mod quickstart;
mod refresh;
mod report;
mod variants;
mod workers;

use serde::Serialize;

use crate::llm::LlmStats;
pub use crate::llm::StructuredOutput;

pub use changes::Changes;
pub use config::BuildConfig;
pub use export::{
    ExportManifest, ManifestCorpus, ManifestInputs, ManifestLlm, ManifestQuestions,
    ManifestRepository, ManifestStageLlm,
};
pub use judge::{
    JudgeConfig, JudgeInputs, JudgeSummary, Verdict, judge, judge_schema, nugget_labels,
};
pub use nuggets::{DroppedCounts, NuggetsConfig, generate_nuggets, nuggets_schema};
pub use orchestrator::{BuildSummary, StageOutcome, build, layout};
pub use refresh::{Refresh, RefreshSummary};
pub use report::{REPORT_FILES, ReportStage, ReportWritten};
pub use variants::{VariantsConfig, generate_query_variants, variants_schema};

/// Runs every stage's reply parser on `text` (judgments of 3 documents x 4 nuggets, nuggets,
/// query variants) and returns how many read it: the fuzzing entry point (`crate::fuzz`), not an
/// API. The stages call the same parsers on each model answer.
#[doc(hidden)]
pub fn parse_replies(text: &str) -> usize {
    usize::from(judge::parse_judgments(text, 3, 4).is_ok())
        + usize::from(nuggets::parse_nuggets(text).is_ok())
        + usize::from(variants::parse_variants(text).is_ok())
}

/// Default repair requests after an unusable answer.
pub const DEFAULT_MAX_REPAIRS: u32 = 2;

/// How a stage's answers were constrained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StructuredOutputUsed {
    /// Every call carried its JSON Schema and the backend accepted it.
    JsonSchema,
    /// No schema was sent (`structured_output = "off"`).
    #[default]
    Off,
    /// The server refused `response_format` (HTTP 400): the calls went out without their
    /// schema, and the unconstrained prompt + repair did the work (see
    /// [`StageSummary::structured_output_refusal`]).
    Refused,
}

/// What an LLM stage did; the CLI prints it and `--summary` writes it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageSummary {
    /// The prompt used, with its version (e.g. `nuggets.v3`).
    pub prompt: String,
    /// Whether the answers were constrained by a JSON Schema.
    pub structured_output: StructuredOutputUsed,
    /// The server's refusal of `response_format`, when `structured_output` is `refused`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output_refusal: Option<String>,
    /// Answers that did not match the JSON Schema sent with them (a server that ignores or
    /// mis-enforces `response_format`, or an answer cut off at `max_tokens`); they were read
    /// like unconstrained answers, and the per-item error names the mismatch when that failed.
    pub schema_mismatches: u64,
    /// Work items (questions, or judge calls).
    pub items: u64,
    /// Items with a usable answer.
    pub ok: u64,
    /// Items whose answer stayed unusable after the repairs (recorded with the raw text).
    pub failed: u64,
    /// Repair requests sent.
    pub repairs: u64,
    /// Backend calls and cache hits.
    pub llm: LlmStats,
}
