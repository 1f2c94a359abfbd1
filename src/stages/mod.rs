//! The LLM stages of the pipeline (paper §3.3-3.5): nuggets from question + answer, query
//! variants from the question alone, and nugget-level support judgments on a pool.
//!
//! Owns: the rows these stages read and write ([`input`]), the worker pool and the
//! ask-parse-repair loop. Guarantees: outputs are sorted by question id (then nugget, then
//! document), whatever the concurrency; they are written atomically; every item ends with a
//! result or a recorded failure (with the model's raw answer), never a silent default; a
//! transport failure (server unreachable after retries) stops the stage with an error and no
//! output, and a rerun resumes from the response cache.

pub mod build;
pub mod input;
mod judge;
mod nuggets;
mod run;
mod variants;

use serde::Serialize;

use crate::llm::LlmStats;

pub use input::{
    JudgmentRecord, NuggetText, NuggetsRecord, PoolRow, QuestionInput, VariantsRecord,
    read_questions,
};
pub use judge::{JudgeConfig, JudgeInputs, JudgeSummary, judge};
pub use nuggets::{NuggetsConfig, generate_nuggets};
pub use variants::{VariantsConfig, generate_query_variants};

/// Default repair requests after an unusable answer.
pub const DEFAULT_MAX_REPAIRS: u32 = 2;

/// What an LLM stage did; the CLI prints it and `--summary` writes it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageSummary {
    /// The prompt used, with its version (e.g. `nuggets.v1`).
    pub prompt: String,
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
