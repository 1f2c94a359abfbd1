//! `freshstack nuggets`: question + accepted answer -> nuggets.

use std::path::PathBuf;

use clap::Args;
use freshstack::pipeline::{NuggetsConfig, generate_nuggets};

use super::llm::{LlmArgs, stats_line};
use super::progress::Bars;

/// Arguments of `freshstack nuggets`.
#[derive(Debug, Args)]
pub struct NuggetsArgs {
    /// Questions (JSONL, reference query schema: query_id, query_title, query_text, answer_text).
    #[arg(long, value_name = "FILE")]
    questions: PathBuf,
    /// Output (JSONL, one row per question: query_id, nuggets [{_id, text}], error/raw on failure).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Most nuggets per question.
    #[arg(long, default_value_t = 10)]
    max_nuggets: usize,
    /// Also write the stage summary (JSON) here.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    #[command(flatten)]
    llm: LlmArgs,
}

pub fn run(args: NuggetsArgs) -> anyhow::Result<()> {
    let default = NuggetsConfig::default();
    let config = NuggetsConfig {
        params: args.llm.params(&default.params),
        max_nuggets: args.max_nuggets,
        max_repairs: args.llm.max_repairs(),
        shard: args.llm.shard()?,
        structured_output: args.llm.structured_output(),
    };
    if config.max_nuggets == 0 {
        anyhow::bail!("invalid --max-nuggets: must be at least 1");
    }
    let llm = args.llm.open(&args.out)?;
    let summary = generate_nuggets(&llm, &config, &args.questions, &args.out, &Bars::new())?;
    if let Some(path) = &args.summary {
        freshstack::dataset::write_json_atomic(path, &summary)?;
    }
    let dropped = freshstack::pipeline::DroppedCounts::of_file(&args.out)?;
    eprintln!(
        "wrote nuggets for {} questions to {} ({} failed after repairs, recorded with the raw \
         answer; {} repairs{}); {}",
        summary.ok,
        args.out.display(),
        summary.failed,
        summary.repairs,
        dropped.note(),
        stats_line(&llm)
    );
    super::warn_if_schema_refused(&summary);
    Ok(())
}
