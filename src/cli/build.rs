//! `freshstack build`, `freshstack refresh` and `freshstack quickstart`: the whole pipeline in
//! one command.

use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use freshstack::pipeline::quickstart::{QuickstartOptions, quickstart_config};
use freshstack::pipeline::{BuildConfig, BuildSummary, Refresh, StageOutcome, build};
use freshstack::report::{PoolingResults, ReportOptions};

use super::progress::Bars;
use freshstack::Setting;

/// Arguments of `freshstack build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// The topic's configuration (TOML; see examples/laravel.toml).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// Build directory (default: `build/TOPIC`). Rerunning into it resumes.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Arguments of `freshstack refresh`.
#[derive(Debug, Args)]
pub struct RefreshArgs {
    /// The old build directory (a finished `freshstack build`); only read.
    #[arg(long, value_name = "DIR")]
    from: PathBuf,
    /// The topic's configuration, pointing at the newer dump and checkouts (`[refresh]
    /// retire_before` moves the question window).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The new build directory (not the old one). Rerunning into it resumes.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

/// Arguments of `freshstack quickstart`.
#[derive(Debug, Args)]
pub struct QuickstartArgs {
    /// Build directory.
    #[arg(long, value_name = "DIR", default_value = "freshstack-quickstart")]
    out: PathBuf,
    /// The freshstack checkout: its files are the corpus, examples/quickstart/Posts.xml the questions.
    #[arg(long, value_name = "DIR", default_value = ".")]
    repo: PathBuf,
    /// Where scripts/setup.sh and scripts/setup-llm.sh put the models (default: REPO/models).
    #[arg(long, value_name = "DIR")]
    models: Option<PathBuf>,
    /// Keep at most this many of the 12 questions (a faster trial).
    #[arg(long)]
    max_questions: Option<usize>,
}

pub fn run_build(args: BuildArgs) -> anyhow::Result<()> {
    let config = BuildConfig::load(&args.config)?;
    let out = args
        .out
        .unwrap_or_else(|| PathBuf::from("build").join(&config.topic));
    let summary = run(&config, out)?;
    print_summary(&summary);
    Ok(())
}

/// The settings `quickstart_config`'s errors name, and `quickstart`'s flags for them.
fn quickstart_flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Repository => "--repo",
        Setting::Models => "--models",
        _ => return None,
    })
}

pub fn run_quickstart(args: QuickstartArgs) -> anyhow::Result<()> {
    let models = args.models.unwrap_or_else(|| args.repo.join("models"));
    let config = quickstart_config(&QuickstartOptions {
        repo: args.repo.clone(),
        models,
        max_questions: args.max_questions,
        dense: true,
    })
    .map_err(|e| super::with_flags(e, quickstart_flags))?;
    eprintln!(
        "quickstart: a benchmark about freshstack itself — corpus {}, questions {}, nuggets by \
         Qwen2.5-Coder-1.5B-Instruct and query variants by 0.5B natively, labels from term \
         evidence (small models: point `freshstack build` at a 7B+ model for publishable data)",
        args.repo.display(),
        freshstack::pipeline::quickstart::QUICKSTART_POSTS
    );
    let summary = run(&config, args.out)?;
    print_summary(&summary);
    Ok(())
}

pub fn run_refresh(args: RefreshArgs) -> anyhow::Result<()> {
    let config = BuildConfig::load(&args.config)?;
    // A refusal is one line of its own; a failure after the checks says the run can resume.
    let refresh = Refresh::prepare(&config, &args.from, &args.out)?;
    let start = Instant::now();
    let bars = Bars::new();
    let summary = refresh
        .run(&ReportOptions::default(), &bars, &mut print_stage)
        .map_err(|e| {
            stopped(
                e,
                format!(
                    "refresh into {} stopped (finished stages and LLM answers are kept: fix \
                     the cause, then rerun)",
                    args.out.display()
                ),
            )
        })?;
    eprintln!("done in {:.1}s", start.elapsed().as_secs_f64());
    print_summary(&summary.build);
    println!("changes:   {}/changes.json", summary.build.out.display());
    Ok(())
}

fn print_stage(stage: &StageOutcome) {
    eprintln!(
        "{:>10} {:>8.1}s  {}{}",
        stage.stage,
        stage.elapsed.as_secs_f64(),
        if stage.ran { "" } else { "skipped: " },
        stage.detail
    );
}

fn run(config: &BuildConfig, out: PathBuf) -> anyhow::Result<BuildSummary> {
    let start = Instant::now();
    let bars = Bars::new();
    let summary = build(
        config,
        &out,
        &ReportOptions::default(),
        &bars,
        &mut print_stage,
    )
    .map_err(|e| {
        stopped(
            e,
            format!(
                "build into {} stopped (finished stages and LLM answers are kept: fix the \
                 cause, then rerun)",
                out.display()
            ),
        )
    })?;
    eprintln!("done in {:.1}s", start.elapsed().as_secs_f64());
    Ok(summary)
}

/// A failed run's error with `context` (it stopped midway: what was finished is kept), except
/// a refusal to start because another run holds the output, which is one line of its own.
fn stopped(err: freshstack::Error, context: String) -> anyhow::Error {
    if matches!(err, freshstack::Error::Busy { .. }) {
        return err.into();
    }
    anyhow::Error::from(err).context(context)
}

fn print_summary(summary: &BuildSummary) {
    let out = summary.out.display();
    println!(
        "dataset:   {out}/queries.jsonl ({} questions)",
        summary.questions
    );
    println!(
        "corpus:    {out}/corpus.jsonl ({} documents)",
        summary.documents
    );
    println!("qrels:     {out}/qrels/nuggets.qrels, {out}/qrels/test.tsv");
    println!("runs:      {out}/runs/*.trec");
    println!("manifest:  {out}/manifest.json, {out}/filtering.json");
    println!("report:    {out}/report.html, {out}/stats.json, {out}/results.json");
    println!("work:      {out}/work/ (stage outputs, LLM cache; rerun to resume)");
    // The table is a convenience: a build whose report cannot be read back still succeeded.
    let Ok(Some(pooling)) = PoolingResults::read(&summary.out.join("results.json")) else {
        return;
    };
    let table = pooling.to_text_table();
    if !table.is_empty() {
        println!();
        print!("{table}");
    }
}
