//! `freshstack query-variants`: question -> sub-questions and a closed-book answer.

use std::path::PathBuf;

use clap::Args;
use freshstack::pipeline::{VariantsConfig, generate_query_variants};

use super::llm::{LlmArgs, stats_line};
use super::progress::Bars;

/// Arguments of `freshstack query-variants`.
#[derive(Debug, Args)]
pub struct QueryVariantsArgs {
    /// Questions (JSONL, reference query schema).
    #[arg(long, value_name = "FILE")]
    questions: PathBuf,
    /// Output (JSONL, one row per question: query_id, sub_questions, closed_book_answer).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Most sub-questions per question.
    #[arg(long, default_value_t = 5)]
    max_sub_questions: usize,
    /// Also write the stage summary (JSON) here.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    #[command(flatten)]
    llm: LlmArgs,
}

pub fn run(args: QueryVariantsArgs) -> anyhow::Result<()> {
    let default = VariantsConfig::default();
    let config = VariantsConfig {
        params: args.llm.params(&default.params),
        max_sub_questions: args.max_sub_questions,
        max_repairs: args.llm.max_repairs(),
        shard: args.llm.shard()?,
        structured_output: args.llm.structured_output(),
    };
    if config.max_sub_questions == 0 {
        anyhow::bail!("invalid --max-sub-questions: must be at least 1");
    }
    let llm = args.llm.open(&args.out)?;
    let summary = generate_query_variants(&llm, &config, &args.questions, &args.out, &Bars::new())?;
    if let Some(path) = &args.summary {
        freshstack::dataset::write_json_atomic(path, &summary)?;
    }
    eprintln!(
        "wrote query variants for {} questions to {} ({} failed after repairs, recorded with \
         the raw answer; {} repairs); {}",
        summary.ok,
        args.out.display(),
        summary.failed,
        summary.repairs,
        stats_line(&llm)
    );
    super::warn_if_schema_refused(&summary);
    Ok(())
}
