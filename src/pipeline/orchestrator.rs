//! The orchestrator of `freshstack build`: the whole framework in one call (paper Figure 2),
//! resumable and incremental.
//!
//! Stages, in order, each in its own file of [`pipeline`](super) and each writing its outputs
//! atomically under `OUT/work/` and then a stage manifest (see [`manifest`](super::manifest)):
//! questions -> corpus -> index -> nuggets -> query variants -> pooling -> judging ->
//! filtering and export (into `OUT/`) -> report. A rerun skips every stage whose inputs and
//! settings are unchanged; a changed input reruns exactly what depends on it. The LLM stages go
//! through the SQLite response cache (`OUT/work/llm-cache.sqlite` by default), so a build killed
//! at any point and rerun makes no LLM call twice and ends with the same bytes.
//!
//! Nothing in the exported files depends on time, thread count or absolute paths.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::StageSummary;
use super::config::{BuildConfig, LlmSection, LlmStage};
use super::manifest::{StageBook, stage_fingerprint};
use super::refresh::{Carry, llm_identity, result_settings};
use super::report::ReportStage;
use crate::dataset::{
    Fingerprint, FingerprintBuilder, QueryId, read_jsonl_lines, write_json_atomic,
};
use crate::error::{Error, Result, Setting};
use crate::llm::prompts::Prompt;
use crate::llm::{ChatParams, LlmStats, OpenedLlm};
use crate::progress::Progress;

/// Files inside the build directory.
pub mod layout {
    /// Intermediate files.
    pub const WORK: &str = "work";
    /// Imported questions (reference query schema, no nuggets).
    pub const QUESTIONS: &str = "work/questions.jsonl";
    /// The chunked corpus.
    pub const CORPUS: &str = "work/corpus.jsonl";
    /// The hybrid index.
    pub const INDEX: &str = "work/index";
    /// Nuggets per question.
    pub const NUGGETS: &str = "work/nuggets.jsonl";
    /// Query variants per question.
    pub const VARIANTS: &str = "work/variants.jsonl";
    /// Every pooling run, before filtering.
    pub const RUNS: &str = "work/runs";
    /// The judgment pool.
    pub const POOL: &str = "work/pool.jsonl";
    /// One judgment per (question, nugget, document).
    pub const JUDGMENTS: &str = "work/judgments.jsonl";
    /// The LLM response cache (default).
    pub const LLM_CACHE: &str = "work/llm-cache.sqlite";
    /// The settings of the last finished build that its results depend on (what `refresh`
    /// compares).
    pub const SETTINGS: &str = "work/settings.json";
    /// Held by the run writing the build directory ([`crate::dataset::OutputLock`]).
    pub const BUILD_LOCK: &str = "work/.lock";
    /// What `freshstack refresh` changed (in the build directory, next to the export).
    pub const CHANGES: &str = "changes.json";
}

/// What the export stage writes into the build directory.
pub(super) const EXPORTED: [&str; 6] = [
    "corpus.jsonl",
    "queries.jsonl",
    "qrels",
    "runs",
    "filtering.json",
    "manifest.json",
];

/// Refuses an output directory that a build would damage: one that exists, is not empty and
/// is not a build (a build has `work/` from its first step), whose files (`corpus.jsonl`,
/// `runs/`) the export would replace; and a checkout itself (a build directory inside one is
/// fine: the corpus stage never reads it).
fn check_build_directory(config: &BuildConfig, out: &Path) -> Result<()> {
    if out.is_dir() && !out.join(layout::WORK).is_dir() {
        let empty = std::fs::read_dir(out)
            .map_err(|e| Error::io(out, e))?
            .next()
            .is_none();
        if !empty {
            return Err(Error::invalid(
                Setting::BuildDirectory,
                format!(
                    "{} exists, is not empty and is not a build directory (no {}/): the export \
                     would replace its files; choose a new or empty directory",
                    out.display(),
                    layout::WORK
                ),
            ));
        }
    }
    if let (Ok(out), true) = (std::fs::canonicalize(out), out.is_dir()) {
        for checkout in config.corpus.repositories.values() {
            if std::fs::canonicalize(checkout).is_ok_and(|c| c == out) {
                return Err(Error::invalid(
                    Setting::BuildDirectory,
                    format!("{} is a repository checkout of the build", out.display()),
                ));
            }
        }
    }
    Ok(())
}

/// How one stage went.
#[derive(Debug, Clone, Serialize)]
pub struct StageOutcome {
    /// Stage name.
    pub stage: &'static str,
    /// False when skipped as up to date.
    pub ran: bool,
    /// Wall time.
    #[serde(skip)]
    pub elapsed: Duration,
    /// One line about the result.
    pub detail: String,
}

/// What a build did.
#[derive(Debug, Clone, Serialize)]
pub struct BuildSummary {
    /// The build directory.
    pub out: PathBuf,
    /// Every stage, in order.
    pub stages: Vec<StageOutcome>,
    /// Questions in the final dataset.
    pub questions: usize,
    /// Documents in the corpus.
    pub documents: usize,
}

/// Rows of a per-question JSONL file keyed by question id (the stages write one row each).
pub(super) fn read_by_query<T: serde::de::DeserializeOwned>(
    path: &Path,
    query_id: impl Fn(&T) -> &QueryId,
) -> Result<BTreeMap<QueryId, T>> {
    Ok(read_jsonl_lines::<T>(path)?
        .into_iter()
        .map(|(_, row)| (query_id(&row).clone(), row))
        .collect())
}

/// This stage's share of the backend's counters (the client is shared by the LLM stages).
pub(super) fn calls_line(before: &LlmStats, after: &LlmStats) -> String {
    format!(
        "{} LLM calls, {} answers from the cache",
        after.calls - before.calls,
        after.cache_hits - before.cache_hits
    )
}

/// Runs (or resumes) a build into `out`. `report` writes the last stage's statistics and page
/// (the caller passes it in: `report` sits above the pipeline; `report::ReportOptions` is one);
/// `on_stage` hears about each stage as it ends.
pub fn build(
    config: &BuildConfig,
    out: &Path,
    report: &dyn ReportStage,
    progress: &dyn Progress,
    on_stage: &mut dyn FnMut(&StageOutcome),
) -> Result<BuildSummary> {
    run_build(config, out, None, report, progress, on_stage)
}

/// [`build`], carrying over the results of `carry`'s old build whose inputs are unchanged
/// (`freshstack refresh`), which then also writes `changes.json` before the report.
pub(super) fn run_build(
    config: &BuildConfig,
    out: &Path,
    carry: Option<&Carry>,
    report: &dyn ReportStage,
    progress: &dyn Progress,
    on_stage: &mut dyn FnMut(&StageOutcome),
) -> Result<BuildSummary> {
    check_build_directory(config, out)?;
    std::fs::create_dir_all(out.join(layout::WORK)).map_err(|e| Error::io(out, e))?;
    let _lock = crate::dataset::OutputLock::acquire(&out.join(layout::BUILD_LOCK), out)?;
    let mut run = Builder {
        config,
        out: out.to_path_buf(),
        book: StageBook::new(out),
        hashes: BTreeMap::new(),
        llm: None,
        stages: Vec::new(),
        documents: 0,
        questions_out: 0,
        repositories: Vec::new(),
        tokenizer_sha256: None,
        carry,
    };
    // A request to stop is honoured between stages (and inside the stages that look).
    let go_on = || -> Result<()> {
        if progress.cancelled() {
            return Err(Error::Interrupted {
                what: "the build".into(),
            });
        }
        Ok(())
    };
    go_on()?;
    run.questions(progress, on_stage)?;
    go_on()?;
    run.corpus(progress, on_stage)?;
    go_on()?;
    run.index(progress, on_stage)?;
    go_on()?;
    run.nuggets(progress, on_stage)?;
    go_on()?;
    run.variants(progress, on_stage)?;
    go_on()?;
    run.pool(progress, on_stage)?;
    go_on()?;
    run.judge(progress, on_stage)?;
    go_on()?;
    run.export(on_stage)?;
    if let Some(carry) = carry {
        go_on()?;
        run.changes(carry, progress, on_stage)?;
    }
    go_on()?;
    run.report(report, progress, on_stage)?;
    // Last, so that it describes the settings of the finished build (what `refresh` checks).
    write_json_atomic(run.path(layout::SETTINGS), &result_settings(config)?)?;
    Ok(BuildSummary {
        out: run.out,
        stages: run.stages,
        questions: run.questions_out,
        documents: run.documents,
    })
}

/// The end of an LLM stage's detail line in a refresh: how many items were carried over.
pub(super) fn carried_note(carried: u64, refreshing: bool) -> String {
    if refreshing {
        format!(", {carried} carried over from the old build")
    } else {
        String::new()
    }
}

pub(super) struct Builder<'a> {
    pub(super) config: &'a BuildConfig,
    pub(super) out: PathBuf,
    pub(super) book: StageBook,
    /// Output content fingerprints by relative path, as the stages left them.
    pub(super) hashes: BTreeMap<String, Fingerprint>,
    /// The model of the LLM stage that ran last, with the settings it was opened with (a stage
    /// with other settings in `[llm.STAGE]` opens its own in its place).
    pub(super) llm: Option<(LlmSection, OpenedLlm)>,
    pub(super) stages: Vec<StageOutcome>,
    pub(super) documents: usize,
    pub(super) questions_out: usize,
    pub(super) repositories: Vec<(String, Option<String>)>,
    /// SHA-256 of the corpus's `hf:` tokenizer file.
    pub(super) tokenizer_sha256: Option<String>,
    /// The old build's results (`freshstack refresh`).
    pub(super) carry: Option<&'a Carry>,
}

impl Builder<'_> {
    pub(super) fn path(&self, rel: &str) -> PathBuf {
        self.out.join(rel)
    }

    /// The content fingerprint of an earlier stage's output.
    pub(super) fn hash(&self, rel: &str) -> Option<&Fingerprint> {
        self.hashes.get(rel)
    }

    /// [`Builder::hash`] as the export manifest records it: hex, empty when absent.
    pub(super) fn hash_text(&self, rel: &str) -> String {
        self.hash(rel)
            .map(Fingerprint::to_string)
            .unwrap_or_default()
    }

    /// Runs `work` unless the stage is fresh; records its outputs either way.
    pub(super) fn stage(
        &mut self,
        name: &'static str,
        fingerprint: Fingerprint,
        outputs: &[&str],
        on_stage: &mut dyn FnMut(&StageOutcome),
        work: impl FnOnce(&mut Self) -> Result<String>,
    ) -> Result<()> {
        let start = Instant::now();
        let (ran, detail) = match self.book.fresh(name, &fingerprint)? {
            Some(hashes) => {
                self.hashes.extend(hashes);
                (false, "up to date".to_string())
            }
            None => {
                self.book.invalidate(name)?;
                let detail = work(self)?;
                let hashes = self.book.record(name, &fingerprint, outputs)?;
                self.hashes.extend(hashes);
                (true, detail)
            }
        };
        let outcome = StageOutcome {
            stage: name,
            ran,
            elapsed: start.elapsed(),
            detail,
        };
        on_stage(&outcome);
        self.stages.push(outcome);
        Ok(())
    }

    /// The settings `stage` runs with (`[llm]` with `[llm.STAGE]` applied).
    pub(super) fn llm_section(&self, stage: LlmStage) -> LlmSection {
        self.config.llm.for_stage(stage)
    }

    /// The model `stage` calls, opened on first use (and the previous stage's closed when
    /// `[llm.STAGE]` names another).
    pub(super) fn llm(&mut self, stage: LlmStage) -> Result<&OpenedLlm> {
        let section = self.llm_section(stage);
        if self.llm.as_ref().is_none_or(|(open, _)| *open != section) {
            // Closed before the next opens: two local models never share the memory.
            self.llm = None;
            let cache_path = section
                .cache
                .clone()
                .unwrap_or_else(|| self.path(layout::LLM_CACHE));
            let opened = section.backend().open_llm(Some(&cache_path))?;
            self.llm = Some((section, opened));
        }
        self.llm
            .as_ref()
            .map(|(_, opened)| opened)
            .ok_or_else(|| Error::invalid(Setting::Llm, "no backend configured"))
    }

    /// What every LLM stage's output depends on besides its inputs: the model, the sampling,
    /// the repair budget, the stage's prompt version and whether schemas are sent (a prompt
    /// bump or a switch of `structured_output` reruns the stage; the response cache then
    /// answers only what was asked before).
    pub(super) fn llm_fingerprint(&self, stage: LlmStage, prompt: &Prompt) -> FingerprintBuilder {
        let llm = self.llm_section(stage);
        stage_fingerprint(stage.name())
            .json("llm", &llm_identity(&llm))
            .json("sampling", &(llm.temperature, llm.seed))
            .json("repairs", &llm.max_repairs)
            .json("prompt", &prompt.id)
            .json("structured_output", &llm.structured_output)
    }

    /// Appends the stage's structured-output note to its one-line detail: said only when the
    /// server refused the schemas.
    pub(super) fn structured_note(summary: &StageSummary) -> String {
        match &summary.structured_output_refusal {
            Some(refusal) => format!(
                "; structured output refused by the server ({refusal}): unconstrained prompt + \
                 repair used"
            ),
            None => String::new(),
        }
    }

    /// The generation parameters of `stage`'s calls.
    pub(super) fn params(&self, stage: LlmStage, max_tokens: u32) -> ChatParams {
        let llm = self.llm_section(stage);
        ChatParams {
            temperature: llm.temperature,
            max_tokens,
            seed: llm.seed,
            json_schema: None,
        }
    }
}
