//! `freshstack calibrate sample|score`: the expert review of nuggets and judgments (paper §5.2,
//! Table 5).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use freshstack::report::calibration::{
    self, AgreementInputs, CalibrationSample, SampleOptions, score_files, write_review,
};

use super::with_flags;
use freshstack::Setting;

/// The `calibrate` subcommands.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    #[command(subcommand)]
    command: CalibrateCommand,
}

#[derive(Debug, Subcommand)]
enum CalibrateCommand {
    /// Sample questions of an exported dataset, each with its answer, nuggets and one positive
    /// (nugget, document) pair, into OUT/review.html (a self-contained review page) and
    /// OUT/sample.json.
    Sample {
        /// The exported dataset (queries.jsonl, corpus.jsonl).
        #[arg(long, value_name = "DIR")]
        dataset: PathBuf,
        /// Questions to sample (all those with nuggets when fewer).
        #[arg(long, default_value_t = 60)]
        questions: usize,
        /// Seed of the sampling: the same dataset, count and seed give the same bytes.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The review directory to write.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Score exported annotations.json files: Table 5 (nugget precision, recall,
    /// groundedness; judgment label shares) per annotator, and with two or more annotators
    /// their pooled table and agreement (Cohen's / Fleiss' kappa).
    Score {
        /// One annotations.json per annotator.
        #[arg(required = true, value_name = "ANNOTATIONS.json")]
        files: Vec<PathBuf>,
        /// Check the annotations refer to this sample (the review's sample.json).
        #[arg(long, value_name = "FILE")]
        sample: Option<PathBuf>,
        /// Print JSON instead of Markdown.
        #[arg(long)]
        json: bool,
    },
    /// A judge's judgments against reference labels on the pairs both have: support rates,
    /// precision / recall / F1 of "supported", accuracy, Cohen's kappa with a bootstrap 95%
    /// interval, split by question and by position in the judge call; Table 5 with --review.
    Agreement {
        /// The judge's output (JSONL judgments).
        #[arg(long, value_name = "FILE")]
        judgments: PathBuf,
        /// Reference labels (JSONL: query_id, nugget_id, doc_id, supported).
        #[arg(long, value_name = "FILE")]
        labels: PathBuf,
        /// The judged pool, for the split by position (with --docs-per-call).
        #[arg(long, value_name = "FILE", requires = "docs_per_call")]
        pool: Option<PathBuf>,
        /// Documents per judge call, for the split by position (with --pool).
        #[arg(long, value_name = "N", requires = "pool")]
        docs_per_call: Option<usize>,
        /// A Table 5 review of the nuggets (JSONL: query_id, missing_nuggets, nuggets with
        /// hallucinated and minor_or_redundant).
        #[arg(long, value_name = "FILE")]
        review: Option<PathBuf>,
        /// Print JSON instead of Markdown.
        #[arg(long)]
        json: bool,
    },
}

/// The flag that sets each setting this command's errors can name.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Questions => "--questions",
        Setting::DocsPerCall => "--docs-per-call",
        Setting::Pool => "--pool",
        _ => return None,
    })
}

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    match args.command {
        CalibrateCommand::Sample {
            dataset,
            questions,
            seed,
            out,
        } => {
            let sample = calibration::sample(&dataset, &SampleOptions { questions, seed })
                .map_err(|e| with_flags(e, flags))?;
            let files = write_review(&out, &sample)?;
            let mut stdout = std::io::stdout().lock();
            writeln!(
                stdout,
                "sampled {} of {} questions with nuggets (seed {seed}) and {} pairs",
                sample.questions.len(),
                sample.questions_eligible,
                sample.pairs.len()
            )?;
            stdout.flush()?;
            eprintln!("wrote {}, {}", files.page.display(), files.sample.display());
        }
        CalibrateCommand::Score {
            files,
            sample,
            json,
        } => {
            let sample = sample
                .map(|path| CalibrationSample::read(&path))
                .transpose()?;
            let scores = score_files(&files, sample.as_ref())?;
            let mut stdout = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut stdout, &scores)?;
                writeln!(stdout)?;
            } else {
                stdout.write_all(scores.to_markdown().as_bytes())?;
            }
            stdout.flush()?;
        }
        CalibrateCommand::Agreement {
            judgments,
            labels,
            pool,
            docs_per_call,
            review,
            json,
        } => {
            let report = calibration::agreement(&AgreementInputs {
                judgments,
                labels,
                pool,
                docs_per_call,
                review,
            })
            .map_err(|e| with_flags(e, flags))?;
            let mut stdout = std::io::stdout().lock();
            if json {
                serde_json::to_writer_pretty(&mut stdout, &report)?;
                writeln!(stdout)?;
            } else {
                stdout.write_all(report.to_markdown().as_bytes())?;
            }
            stdout.flush()?;
        }
    }
    Ok(())
}
