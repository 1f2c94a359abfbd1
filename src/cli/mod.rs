//! Subcommands: argument parsing and glue only; all work is a library call.

mod benchmark;
mod build;
mod calibrate;
mod corpus;
mod embed;
mod eval;
mod fuse;
mod index;
mod judge;
mod llm;
mod llm_tools;
mod merge;
mod nuggets;
mod progress;
mod query_variants;
mod report;
mod rerank;
mod retrieve;
mod search;
mod stackoverflow;

use anyhow::Context;
use clap::{Parser, Subcommand};
use freshstack::pipeline::StageSummary;

/// Warns on stderr when the server refused the stage's JSON Schemas (the summary file says it
/// too): the answers then came from the unconstrained prompt and repairs.
fn warn_if_schema_refused(summary: &StageSummary) {
    if let Some(refusal) = &summary.structured_output_refusal {
        eprintln!(
            "warning: the server refused structured output ({refusal}); the unconstrained \
             prompt + repair was used (--llm-structured-output off silences this)"
        );
    }
}

/// Build realistic retrieval benchmarks from Stack Overflow and GitHub, and evaluate retrievers
/// on them, offline.
#[derive(Debug, Parser)]
#[command(name = "freshstack", version, about, long_about = None)]
pub struct Cli {
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Worker threads (default: all cores). No output depends on it.
    #[arg(long, global = true, value_name = "N")]
    pub threads: Option<usize>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Chunk local repository checkouts into a corpus of documents (JSONL).
    Corpus(corpus::CorpusArgs),
    /// Stack Overflow dumps: import a topic's questions, report co-occurring and recent tags.
    #[command(name = "stackoverflow")]
    StackOverflow(stackoverflow::StackOverflowArgs),
    /// Embed a corpus or query file with a local dense encoder into a .npy matrix plus .ids.
    Embed(embed::EmbedArgs),
    /// Score TREC runs against nugget judgments (alpha-nDCG, Coverage, Recall, ...), several
    /// runs side by side with paired significance tests.
    Eval(eval::EvalArgs),
    /// Fuse TREC runs: per question, normalise each run's top scores and sum (or RRF).
    Fuse(fuse::FuseArgs),
    /// Build an index directory: BM25 and/or precomputed dense vectors (+ HNSW).
    Index(index::IndexArgs),
    /// Search an index with one query.
    Search(search::SearchArgs),
    /// Run a query file against an index and write a TREC run.
    Retrieve(retrieve::RetrieveArgs),
    /// Turn each question and its accepted answer into nuggets (atomic facts) with an LLM.
    Nuggets(nuggets::NuggetsArgs),
    /// Write sub-questions and a closed-book answer per question with an LLM (inference setting).
    QueryVariants(query_variants::QueryVariantsArgs),
    /// Score retrievers on published FreshStack datasets (Hugging Face cache, offline) or a
    /// local export: runs, results.json and results.md (alpha-nDCG@10, Coverage@20, Recall@50).
    Benchmark(benchmark::BenchmarkArgs),
    /// Judge, with an LLM, whether each pooled document supports each nugget of its question.
    Judge(judge::JudgeArgs),
    /// Rerank the top k documents of each question of a TREC run with a local cross-encoder.
    Rerank(rerank::RerankArgs),
    /// Join `--shard I/N` outputs (embed, nuggets, query-variants, judge) into one file.
    Merge(merge::MergeArgs),
    /// The whole pipeline from a topic config: questions, corpus, index, nuggets, variants,
    /// pooling, judging, filtering, export. Resumable.
    Build(build::BuildArgs),
    /// Refresh a built benchmark from newer inputs: carry over every result whose inputs are
    /// unchanged, ask the LLM only for the new work, write changes.json.
    Refresh(build::RefreshArgs),
    /// Build a small benchmark about freshstack itself with the local test models, no config.
    Quickstart(build::QuickstartArgs),
    /// Statistics, pooling results and a self-contained HTML report of an exported dataset.
    Report(report::ReportArgs),
    /// Expert review of the LLM's nuggets and judgments (paper Table 5): sample a review page,
    /// score the exported annotations.
    Calibrate(calibrate::CalibrateArgs),
    /// Check a GGUF model with the native backend: speed (bench), tokenizer, generation.
    Llm(llm_tools::LlmToolArgs),
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    if let Some(threads) = cli.threads {
        set_threads(threads)?;
    }
    match cli.command {
        Command::Corpus(args) => corpus::run(args),
        Command::StackOverflow(args) => stackoverflow::run(args),
        Command::Embed(args) => embed::run(args),
        Command::Eval(args) => eval::run(args),
        Command::Fuse(args) => fuse::run(args),
        Command::Index(args) => index::run(args),
        Command::Search(args) => search::run(args),
        Command::Retrieve(args) => retrieve::run(args),
        Command::Nuggets(args) => nuggets::run(args),
        Command::QueryVariants(args) => query_variants::run(args),
        Command::Judge(args) => judge::run(args),
        Command::Rerank(args) => rerank::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Benchmark(args) => benchmark::run(args),
        Command::Build(args) => build::run_build(args),
        Command::Refresh(args) => build::run_refresh(args),
        Command::Quickstart(args) => build::run_quickstart(args),
        Command::Report(args) => report::run(args),
        Command::Calibrate(args) => calibrate::run(args),
        Command::Llm(args) => llm_tools::run(args),
    }
}

/// Sizes the global rayon pool and candle's matmul parallelism (which reads
/// `RAYON_NUM_THREADS`) to `threads` (at least 1), before any thread starts.
fn set_threads(threads: usize) -> anyhow::Result<()> {
    let threads = threads.max(1);
    // SAFETY: called first thing after parsing: no other thread exists yet (nothing has touched
    // rayon or candle).
    unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .context("cannot configure worker threads")
}

/// The HTTP client's protocol layer dumps every byte it sends at trace level, the
/// `Authorization` header (the API key) included: its target is capped at debug whatever
/// `RUST_LOG` asks (a directive added last replaces the user's for the same target), and never
/// raised above the most verbose level asked for anything (a plain `warn` keeps it quiet). Its
/// debug output and the client's own logs redact headers and URL credentials.
const REDACTED_TARGET: &str = "ureq_proto";

/// The directive for [`REDACTED_TARGET`] under a filter whose most verbose level is `asked`.
fn redacting_directive(asked: Option<tracing_subscriber::filter::LevelFilter>) -> String {
    use tracing_subscriber::filter::LevelFilter;
    let level = asked.unwrap_or(LevelFilter::OFF).min(LevelFilter::DEBUG);
    format!("{REDACTED_TARGET}={}", level.to_string().to_lowercase())
}

/// Logs to stderr (plain, without colour codes, unless stderr is a terminal); level from
/// RUST_LOG, else warnings (info with -v, debug with -vv); see [`REDACTED_TARGET`].
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let cap = redacting_directive(filter.max_level_hint());
    let filter = filter.add_directive(cap.parse().expect("a valid directive"));
    // Colour codes only on a terminal: a log written to a file or a pipe stays plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// The error and its causes on one line, joined by ": ". A cause whose text the line already
/// holds is skipped: library errors print their source themselves (`path: No such file...`).
pub fn one_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace('\n', " ")
}

/// A library error for the command line: an invalid setting that `flag_of` maps to a flag reads
/// `invalid FLAG: ...`, as the user typed it; anything else is unchanged.
pub fn with_flags(
    err: freshstack::Error,
    flag_of: fn(freshstack::Setting) -> Option<&'static str>,
) -> anyhow::Error {
    if let freshstack::Error::InvalidArgument { what, message } = &err
        && let Some(flag) = flag_of(*what)
    {
        return anyhow::anyhow!("invalid {flag}: {message}");
    }
    err.into()
}

/// Ends the process on a command-line error. A value its typed argument's parser rejected
/// (`FromStr`: the library's own message) is one line, `error: invalid value 'X' for '--FLAG
/// <V>': MESSAGE`, exit 2 (clap's usage status), as the house rule for bad input asks; help,
/// version and every other usage error (unknown flags, closed sets with their possible values)
/// print as clap prints them.
pub fn command_line_error(err: clap::Error) -> std::process::ExitCode {
    if err.kind() == clap::error::ErrorKind::ValueValidation {
        let text = err.render().to_string();
        eprintln!("{}", text.lines().next().unwrap_or_default());
        return std::process::ExitCode::from(2);
    }
    err.exit()
}

/// True when the error is a closed stdout (`freshstack ... | head`): not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::filter::LevelFilter;

    #[test]
    fn the_http_protocol_log_is_capped_at_debug_and_never_raised() {
        assert_eq!(
            redacting_directive(Some(LevelFilter::WARN)),
            "ureq_proto=warn"
        );
        assert_eq!(
            redacting_directive(Some(LevelFilter::INFO)),
            "ureq_proto=info"
        );
        assert_eq!(
            redacting_directive(Some(LevelFilter::DEBUG)),
            "ureq_proto=debug"
        );
        assert_eq!(
            redacting_directive(Some(LevelFilter::TRACE)),
            "ureq_proto=debug"
        );
        assert_eq!(redacting_directive(None), "ureq_proto=off");
    }
}
