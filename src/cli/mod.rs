//! Subcommands: argument parsing and glue only; all work is a library call.

mod corpus;
mod judge;
mod llm;
mod nuggets;
mod progress;
mod query_variants;

use clap::{Parser, Subcommand};

/// Build realistic retrieval benchmarks from Stack Overflow and GitHub, and evaluate retrievers
/// on them, offline.
#[derive(Debug, Parser)]
#[command(name = "freshstack", version, about, long_about = None)]
pub struct Cli {
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Chunk local repository checkouts into a corpus of documents (JSONL).
    Corpus(corpus::CorpusArgs),
    /// Turn each question and its accepted answer into nuggets (atomic facts) with an LLM.
    Nuggets(nuggets::NuggetsArgs),
    /// Write sub-questions and a closed-book answer per question with an LLM (inference setting).
    QueryVariants(query_variants::QueryVariantsArgs),
    /// Judge, with an LLM, whether each pooled document supports each nugget of its question.
    Judge(judge::JudgeArgs),
}

/// Runs the parsed command.
pub fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Corpus(args) => corpus::run(args),
        Command::Nuggets(args) => nuggets::run(args),
        Command::QueryVariants(args) => query_variants::run(args),
        Command::Judge(args) => judge::run(args),
    }
}

/// Logs to stderr; level from RUST_LOG, else warnings (info with -v, debug with -vv).
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// True when the error is a closed stdout (`freshstack ... | head`): not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
