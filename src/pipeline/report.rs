//! The report stage: the exported dataset's statistics, pooling results and HTML page
//! (`stats.json`, `results.json`, `report.html`). The pipeline sits below `report`
//! (docs/architecture.md), so the caller hands the stage its writer: a [`ReportStage`], which
//! `report::ReportOptions` implements.

use std::path::Path;

use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, EXPORTED, StageOutcome, layout};
use crate::dataset::Fingerprint;
use crate::error::Result;
use crate::progress::Progress;

/// The files the report stage writes into the build directory.
pub const REPORT_FILES: [&str; 3] = ["stats.json", "results.json", "report.html"];

/// Writes the report of an exported dataset: the build's last stage.
pub trait ReportStage {
    /// Writes [`REPORT_FILES`] into `dir` (an exported dataset) and says what was scored.
    fn write_report(&self, dir: &Path, progress: &dyn Progress) -> Result<ReportWritten>;
}

/// What a [`ReportStage`] scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportWritten {
    /// Pooling runs scored (rows of the pooling results table).
    pub pooling_runs: usize,
    /// Questions with judgments the runs were scored on.
    pub judged_questions: usize,
}

impl Builder<'_> {
    pub(super) fn report(
        &mut self,
        writer: &dyn ReportStage,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let mut fingerprint = stage_fingerprint("report");
        for rel in EXPORTED {
            fingerprint = fingerprint.maybe_fingerprint(rel, self.hash(rel));
        }
        // A refresh's record of changes is on the page too (only when there is one, so that
        // plain builds keep their fingerprints).
        let changes = self.path(layout::CHANGES);
        if changes.is_file() {
            fingerprint =
                fingerprint.fingerprint(layout::CHANGES, &Fingerprint::of_file(&changes)?);
        }
        self.stage(
            "report",
            fingerprint.finish(),
            &REPORT_FILES,
            on_stage,
            |b| {
                let written = writer.write_report(&b.out, progress)?;
                Ok(format!(
                    "{} pooling runs scored on {} questions; {}/report.html",
                    written.pooling_runs,
                    written.judged_questions,
                    b.out.display()
                ))
            },
        )
    }
}
