//! `freshstack corpus`: chunk checkouts into a corpus.

use std::path::PathBuf;

use clap::Args;
use freshstack::source::{
    CorpusConfig, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_TOKENS, RepoSpec, SkipReason, TokenizerSpec,
    build_corpus, write_summary,
};

use super::progress::Bars;
use freshstack::Setting;

/// Arguments of `freshstack corpus`.
#[derive(Debug, Args)]
pub struct CorpusArgs {
    /// A repository: its GitHub OWNER/NAME and local checkout, as OWNER/NAME=PATH. Repeatable.
    #[arg(long = "repo", required = true, value_name = "OWNER/NAME=PATH")]
    repos: Vec<RepoSpec>,
    /// Output corpus (JSONL, one document per line; written atomically; `-` for stdout).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Maximum tokens per document (with `hf:`, the special tokens included: set it to the
    /// dense model's max length).
    #[arg(long, default_value_t = DEFAULT_MAX_TOKENS)]
    max_tokens: usize,
    /// Tokenizer that counts the budget: cl100k_base (as the reference), o200k_base, or
    /// hf:PATH to a Hugging Face tokenizer.json (e.g. the dense model's own).
    #[arg(long, default_value = "cl100k_base", value_name = "NAME|hf:PATH")]
    tokenizer: TokenizerSpec,
    /// Skip files larger than this many bytes.
    #[arg(long, default_value_t = DEFAULT_MAX_FILE_BYTES)]
    max_file_bytes: u64,
    /// Leave out paths matching this gitignore-style glob, relative to each checkout
    /// (repeatable), e.g. `--exclude 'tests/fixtures/**'`.
    #[arg(long = "exclude", value_name = "GLOB")]
    exclude: Vec<String>,
    /// Also write the summary (per-repo totals, skips by reason) as JSON here.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
}

/// The settings of `build_corpus`'s errors, and this command's flags for them.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Repository => "--repo",
        Setting::MaxTokens => "--max-tokens",
        Setting::Tokenizer => "--tokenizer",
        _ => return None,
    })
}

pub fn run(args: CorpusArgs) -> anyhow::Result<()> {
    let config = CorpusConfig {
        repos: args.repos,
        max_tokens: args.max_tokens,
        tokenizer: args.tokenizer,
        max_file_bytes: args.max_file_bytes,
        exclude: args.exclude,
        outputs: Vec::new(),
    };
    let started = std::time::Instant::now();
    let summary =
        build_corpus(&config, &args.out, &Bars::new()).map_err(|e| super::with_flags(e, flags))?;
    if let Some(path) = &args.summary {
        write_summary(&summary, path)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    for repo in &summary.repos {
        eprintln!(
            "{}: {} files -> {} documents, {} tokens (commit {})",
            repo.repo,
            repo.files_chunked,
            repo.documents,
            repo.tokens,
            repo.commit_id.as_deref().unwrap_or("unknown")
        );
    }
    let skips: Vec<String> = SkipReason::ALL
        .iter()
        .filter_map(|r| summary.skipped.get(r).map(|n| format!("{} {n}", r.name())))
        .collect();
    eprintln!(
        "wrote {} documents ({} tokens) to {} in {seconds:.1}s; skipped: {}",
        summary.documents,
        summary.tokens,
        args.out.display(),
        if skips.is_empty() {
            "none".to_string()
        } else {
            skips.join(", ")
        }
    );
    Ok(())
}
