//! Statistics, pooling results and the HTML report of an exported dataset (paper Tables 3 and 4,
//! Figure 3).
//!
//! Reads a dataset directory as `freshstack build` exports it:
//!
//! ```text
//! DIR/corpus.jsonl        corpus rows (reference schema)
//! DIR/queries.jsonl       questions with judged nuggets (reference schema)
//! DIR/runs/*.trec         pooling runs, named {setting}.{technique}.{retriever}.trec
//! DIR/filtering.json      filtering counts (optional)
//! DIR/manifest.json       topic and repositories[].name are read (optional)
//! DIR/calibration/*.json  expert annotations and their sample.json (optional, [`calibration`])
//! DIR/changes.json        what `freshstack refresh` changed (optional)
//! DIR/work/*              a build's stage outputs: the judge's health (optional, [`judge_health`])
//! DIR/reference-labels.jsonl  reference labels of judged pairs: the judge's agreement (optional)
//! ```
//!
//! and writes `DIR/stats.json` ([`Statistics`] and [`FilteringCounts`]), `DIR/results.json`
//! ([`PoolingResults`]) and `DIR/report.html` (self-contained: inline CSS and SVG charts).
//!
//! Guarantees: pooling numbers are [`crate::eval::evaluate`]'s with the paper's measures, the
//! numbers `freshstack eval --queries DIR/queries.jsonl --run FILE` prints; the same inputs give
//! the same bytes (rows in a fixed order, averages rounded to 4 decimals, no timestamp unless
//! the caller passes one); every file is written atomically. Imports `dataset`, `eval`, the
//! token counter of `source`, and `pipeline`'s [`ReportStage`] (which [`ReportOptions`]
//! implements: `freshstack build`'s last stage).

pub mod calibration;
mod html;
pub mod judge_health;
mod pooling;
mod stats;
pub mod svg;

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::{
    AtomicWriter, NuggetQrels, Question, check_output_is_not_an_input, read_json_if_present,
    read_jsonl,
};
use crate::error::{Error, Result, Setting};
use crate::eval::Judgments;
use crate::pipeline::{Changes, ExportManifest, ReportStage, ReportWritten};
use crate::progress::Progress;
use crate::source::TokenizerKind;

pub use html::{escape, link, render_html};
pub use pooling::{
    MEASURE_LABELS, PoolingResults, PoolingRow, RunName, SETTINGS, TECHNIQUES, retriever_rank,
};
pub use stats::{RepoCount, Statistics, contains_code};

/// The filtering step's counts (paper §4), as `DIR/filtering.json` holds them (other fields are
/// ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilteringCounts {
    /// Questions before filtering.
    pub questions_in: u64,
    /// Dropped because they have no nugget at all (the nugget stage failed for them), when the
    /// build counts them apart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dropped_no_nuggets: Option<u64>,
    /// Dropped because no nugget has a supporting document.
    pub dropped_no_supported_nugget: u64,
    /// Dropped, among the rest, because some nugget has no supporting document.
    pub dropped_any_unsupported_nugget: u64,
    /// Questions kept.
    pub questions_out: u64,
    /// Whether the second rule (every nugget supported) was applied, when the build says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_all_nuggets_supported: Option<bool>,
}

/// Everything the report shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// Table 3.
    pub statistics: Statistics,
    /// Filtering counts, when the dataset has `filtering.json`.
    pub filtering: Option<FilteringCounts>,
    /// Table 4.
    pub pooling: PoolingResults,
    /// Table 5, when `DIR/calibration/` holds annotation files (the page then has a
    /// "Calibration" section; without them it is the same bytes as before).
    pub calibration: Option<calibration::CalibrationScores>,
    /// What `freshstack refresh` changed, when the directory has `changes.json` (the page then
    /// has a "Changes" section; without it it is the same bytes as before).
    pub changes: Option<Changes>,
    /// The judge's health, when the directory is a build's (it has `work/judgments.jsonl`; the
    /// page then has a "Judge health" section).
    pub judge_health: Option<judge_health::JudgeHealth>,
}

/// How to compute a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOptions {
    /// Tokenizer counting query and answer lengths.
    pub tokenizer: TokenizerKind,
}

impl Default for ReportOptions {
    /// `o200k_base`: the paper counts lengths with the GPT-4o tokenizer (§4.1).
    fn default() -> Self {
        Self {
            tokenizer: TokenizerKind::O200kBase,
        }
    }
}

/// Where [`write()`] put the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFiles {
    /// `DIR/stats.json`.
    pub stats: PathBuf,
    /// `DIR/results.json`.
    pub results: PathBuf,
    /// The HTML page (`DIR/report.html` unless asked otherwise).
    pub html: PathBuf,
}

/// What `stats.json` holds.
#[derive(Serialize)]
struct StatsFile<'a> {
    statistics: &'a Statistics,
    filtering: Option<&'a FilteringCounts>,
}

/// Computes the statistics, filtering counts and pooling results of the dataset in `dir`.
/// `corpus.jsonl` and `queries.jsonl` must exist; `runs/`, `filtering.json`, `manifest.json`,
/// `calibration/` and `changes.json` are optional.
pub fn compute(dir: &Path, options: &ReportOptions, progress: &dyn Progress) -> Result<Report> {
    let manifest = ExportManifest::read(&dir.join("manifest.json"))?.unwrap_or_default();
    let (topic, repos) = (manifest.topic.clone(), manifest.repository_names());
    let filtering = read_json_if_present::<FilteringCounts>(&dir.join("filtering.json"))?;
    let queries: Vec<Question> = read_jsonl(dir.join("queries.jsonl"))?;
    let docs_per_repo = stats::count_docs(&dir.join("corpus.jsonl"), &repos, progress)?;
    let statistics = stats::statistics(topic, &queries, docs_per_repo, options.tokenizer)?;
    let judgments = Judgments::new(&NuggetQrels::from_queries(&queries));
    drop(queries);
    let pooling = pooling::pooling_results(&dir.join("runs"), &judgments, progress)?;
    let calibration = calibration::read_calibration_dir(dir)?;
    let changes = read_json_if_present::<Changes>(&dir.join("changes.json"))?;
    let judge_health = judge_health::judge_health(dir)?;
    Ok(Report {
        statistics,
        filtering,
        pooling,
        calibration,
        changes,
        judge_health,
    })
}

/// What [`compute`] reads in a dataset directory (files and folders).
const REPORT_INPUTS: &[&str] = &[
    "manifest.json",
    "filtering.json",
    "queries.jsonl",
    "corpus.jsonl",
    "changes.json",
    "reference-labels.jsonl",
    "runs",
    "calibration",
    crate::pipeline::layout::WORK,
];

/// Writes `dir/stats.json`, `dir/results.json` and the HTML page (at `html_path`, default
/// `dir/report.html`), each atomically. `generated` is shown under the page title when given.
pub fn write(
    dir: &Path,
    report: &Report,
    html_path: Option<&Path>,
    generated: Option<&str>,
) -> Result<ReportFiles> {
    let files = ReportFiles {
        stats: dir.join("stats.json"),
        results: dir.join("results.json"),
        html: html_path.map_or_else(|| dir.join("report.html"), Path::to_path_buf),
    };
    // The page may not replace anything the report reads or writes.
    let inputs: Vec<PathBuf> = REPORT_INPUTS
        .iter()
        .map(|name| dir.join(name))
        .chain([files.stats.clone(), files.results.clone()])
        .collect();
    let input_refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    check_output_is_not_an_input(Setting::ReportPage, &files.html, &input_refs)?;
    // Render and write everything first, commit last: a chart error or an unwritable page
    // leaves every previous file in place.
    let page = render_html(report, generated)?;
    let stats = AtomicWriter::json(
        &files.stats,
        &StatsFile {
            statistics: &report.statistics,
            filtering: report.filtering.as_ref(),
        },
    )?;
    let results = AtomicWriter::json(&files.results, &report.pooling)?;
    let mut html = AtomicWriter::create(&files.html)?;
    html.write_all(page.as_bytes())
        .map_err(|e| Error::io(&files.html, e))?;
    html.commit()?;
    stats.commit()?;
    results.commit()?;
    Ok(files)
}

/// [`compute`] then [`write()`] with the defaults (`dir/report.html`, no note): what `freshstack
/// build` and `quickstart` call after the export.
pub fn generate(
    dir: &Path,
    options: &ReportOptions,
    progress: &dyn Progress,
) -> Result<(Report, ReportFiles)> {
    let report = compute(dir, options, progress)?;
    let files = write(dir, &report, None, None)?;
    Ok((report, files))
}

/// The last stage of `freshstack build`: [`generate`] into the build directory.
impl ReportStage for ReportOptions {
    fn write_report(&self, dir: &Path, progress: &dyn Progress) -> Result<ReportWritten> {
        let (report, _) = generate(dir, self, progress)?;
        Ok(ReportWritten {
            pooling_runs: report.pooling.rows.len(),
            judged_questions: report.pooling.judged_queries,
        })
    }
}

#[cfg(test)]
mod tests;
