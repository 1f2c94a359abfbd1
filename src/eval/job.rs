//! `freshstack eval` as one call: read the judgments and the run files, evaluate them side by
//! side, log what the reference would have done differently, and write the per-question values.

use std::path::{Path, PathBuf};

use super::{
    Comparison, EvalConfig, JudgmentsFormat, Metric, NDEVAL_MAX_DEPTH, SignificanceConfig,
    compare_runs, load_judgments,
};
use crate::dataset::{RunFile, check_output_is_not_an_input};
use crate::error::{Result, Setting};

/// Files to evaluate and how; see [`evaluate_files`].
#[derive(Debug, Clone)]
pub struct EvalJob {
    /// The judgments file.
    pub judgments: PathBuf,
    /// Its format (a dataset's `queries.jsonl` or ndeval subtopic qrels).
    pub format: JudgmentsFormat,
    /// TREC runs; the later ones are tested against the first.
    pub runs: Vec<PathBuf>,
    /// The measures to compute.
    pub config: EvalConfig,
    /// Settings of the paired randomization test.
    pub significance: SignificanceConfig,
    /// Where to write every measure per question as JSON lines, if anywhere.
    pub per_query: Option<PathBuf>,
}

/// What [`evaluate_files`] computed.
#[derive(Debug, Clone)]
pub struct EvalReport {
    /// The runs' evaluations and tests, in the order of [`EvalJob::runs`]; render it with
    /// [`Comparison::to_json`] or [`Comparison::to_table`].
    pub comparison: Comparison,
    /// Per run, repeated (question, document) lines (the last score counted, at the first
    /// position, as the reference does).
    pub duplicates: Vec<usize>,
}

/// Evaluates every run of `job` against its judgments and writes the per-question values if
/// asked. A run is named after its file stem, or after its whole path when an earlier run has
/// that name already. Logs (through `tracing`) a warning for alpha-nDCG beyond
/// [`NDEVAL_MAX_DEPTH`] and for a run with repeated lines, and per run, at info level, the
/// questions ignored (not judged) and missing (scored 0).
pub fn evaluate_files(job: &EvalJob) -> Result<EvalReport> {
    if let Some(out) = &job.per_query {
        let inputs: Vec<&Path> = std::iter::once(job.judgments.as_path())
            .chain(job.runs.iter().map(PathBuf::as_path))
            .collect();
        check_output_is_not_an_input(Setting::PerQueryOutput, out, &inputs)?;
    }
    let beyond: Vec<String> = job
        .config
        .measures
        .iter()
        .filter(|m| m.metric == Metric::AlphaNdcg && m.k > NDEVAL_MAX_DEPTH)
        .map(|m| m.to_string())
        .collect();
    if !beyond.is_empty() {
        tracing::warn!(
            "{}: the reference evaluator silently drops alpha-nDCG beyond k = {NDEVAL_MAX_DEPTH}; \
             these values have no reference counterpart",
            beyond.join(", ")
        );
    }
    let judgments = load_judgments(&job.judgments, job.format)?;
    let mut runs: Vec<RunFile> = Vec::with_capacity(job.runs.len());
    for path in &job.runs {
        let mut run = RunFile::read(path)?;
        if run.duplicates() > 0 {
            tracing::warn!(
                "{}: {} repeated (question, document) lines; the last score counts, at the first \
                 position (as the reference)",
                path.display(),
                run.duplicates()
            );
        }
        if runs.iter().any(|r| r.name() == run.name()) {
            run.set_name(path.display().to_string());
        }
        runs.push(run);
    }
    let comparison = compare_runs(&judgments, &runs, &job.config, job.significance);
    for eval in &comparison.evaluations {
        let notes = &eval.notes;
        if notes.unknown_queries > 0 || notes.missing_queries > 0 {
            tracing::info!(
                "run {}: {} question(s) without judgments ignored, {} judged question(s) missing \
                 (scored 0)",
                eval.run_name,
                notes.unknown_queries,
                notes.missing_queries
            );
        }
    }
    if let Some(path) = &job.per_query {
        comparison.write_per_query(path)?;
    }
    Ok(EvalReport {
        comparison,
        duplicates: runs.iter().map(RunFile::duplicates).collect(),
    })
}
