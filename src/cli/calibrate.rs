//! `freshstack calibrate sample|score`: the expert review of nuggets and judgments (paper §5.2,
//! Table 5).

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use freshstack::report::calibration::{
    self, CalibrationSample, SampleOptions, score_files, write_review,
};

use super::with_flags;

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
}

const FLAGS: &[(&str, &str)] = &[("questions", "--questions")];

pub fn run(args: CalibrateArgs) -> anyhow::Result<()> {
    match args.command {
        CalibrateCommand::Sample {
            dataset,
            questions,
            seed,
            out,
        } => {
            let sample = calibration::sample(&dataset, &SampleOptions { questions, seed })
                .map_err(|e| with_flags(e, FLAGS))?;
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
    }
    Ok(())
}
