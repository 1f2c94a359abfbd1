//! `freshstack judge`: nugget-level support judgments on a pool.

use std::path::PathBuf;

use clap::Args;
use freshstack::pipeline::{JudgeConfig, JudgeInputs, Verdict, judge};

use super::llm::{LlmArgs, stats_line};
use super::progress::Bars;
use freshstack::Setting;

/// Arguments of `freshstack judge`.
#[derive(Debug, Args)]
pub struct JudgeArgs {
    /// Questions (JSONL, reference query schema).
    #[arg(long, value_name = "FILE")]
    questions: PathBuf,
    /// Nuggets (JSONL, as written by `freshstack nuggets`).
    #[arg(long, value_name = "FILE")]
    nuggets: PathBuf,
    /// Corpus (JSONL documents: _id, title, text, metadata).
    #[arg(long, value_name = "FILE")]
    corpus: PathBuf,
    /// Judgment pool (JSONL: {"query_id", "doc_ids": [...]}).
    #[arg(long, value_name = "FILE")]
    pool: PathBuf,
    /// Output (JSONL, one row per question, nugget and document).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Documents judged together in one call, with all the question's nuggets.
    #[arg(long, default_value_t = 20)]
    docs_per_call: usize,
    /// The model's context window, in tokens; documents are truncated to fit.
    #[arg(long, default_value_t = 32_768)]
    llm_context_tokens: usize,
    /// Most tokens of one document shown to the model.
    #[arg(long, default_value_t = 2048)]
    max_doc_tokens: usize,
    /// How the model gives its verdict: generate (the paper's batched protocol: reasoning,
    /// then true/false per nugget) or probability (one document and nugget per call, the
    /// probability of "yes", with the term coverage, against --threshold; native GGUF only) or
    /// terms (no model: the share of the nugget's own terms in the document) or quote (one
    /// pair per call: the model quotes the line stating the nugget, then its verdict; the
    /// quote must be in the document and hold --threshold of the nugget's terms) or graded (one
    /// pair per call graded full, partial or none; the expected grade, with the term coverage,
    /// against --threshold).
    #[arg(long, default_value = "generate", value_name = "VERDICT")]
    verdict: Verdict,
    /// The score a supported pair reaches, in [0, 1]: probability verdict (1 - term weight) x
    /// P(yes) + term weight x term coverage; terms verdict the term coverage.
    #[arg(long, default_value_t = freshstack::pipeline::judge::DEFAULT_THRESHOLD)]
    threshold: f64,
    /// The weight of the term coverage in the probability verdict's score, in [0, 1].
    #[arg(long, default_value_t = freshstack::pipeline::judge::DEFAULT_TERM_WEIGHT)]
    term_weight: f64,
    /// A supported verdict also needs this share of the nugget's own terms (those its
    /// question lacks) in the document, in [0, 1]; 0 turns the gate off.
    #[arg(long, default_value_t = 0.0, value_name = "SHARE")]
    min_term_coverage: f64,
    /// Ask each generate call this many times, the documents shuffled after the first; a
    /// pair is supported when most of its votes say so. The summary gives the second vote's
    /// agreement with the first (self-consistency kappa).
    #[arg(long, default_value_t = 1, value_name = "N")]
    votes: usize,
    /// With one vote, ask this share of the generate calls again with their documents
    /// shuffled (each call drawn by a seeded hash): the summary gives the agreement of the answers
    /// (self-consistency kappa); labels stay the first answer's. 0 turns it off.
    #[arg(long, default_value_t = freshstack::pipeline::judge::DEFAULT_SELF_CHECK, value_name = "SHARE")]
    self_check: f64,
    /// Also write the stage summary (JSON) here.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    #[command(flatten)]
    llm: LlmArgs,
}

/// The settings `judge`'s errors name, and this command's flags for them.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::ContextTokens => "--llm-context-tokens",
        Setting::DocsPerCall => "--docs-per-call",
        Setting::JudgeThreshold => "--threshold",
        Setting::JudgeTermWeight => "--term-weight",
        Setting::JudgeMinTermCoverage => "--min-term-coverage",
        Setting::JudgeVotes => "--votes",
        Setting::JudgeSelfCheck => "--self-check",
        Setting::Pool => "--pool",
        _ => return None,
    })
}

pub fn run(args: JudgeArgs) -> anyhow::Result<()> {
    let default = JudgeConfig::default();
    let config = JudgeConfig {
        params: args.llm.params(&default.params),
        docs_per_call: args.docs_per_call,
        context_tokens: args.llm_context_tokens,
        max_doc_tokens: args.max_doc_tokens,
        max_repairs: args.llm.max_repairs(),
        shard: args.llm.shard()?,
        structured_output: args.llm.structured_output(),
        verdict: args.verdict,
        threshold: args.threshold,
        term_weight: args.term_weight,
        min_term_coverage: args.min_term_coverage,
        votes: args.votes,
        self_check: args.self_check,
    };
    let llm = if args.verdict.asks_model() || args.llm.is_configured() {
        args.llm.open(&args.out)?
    } else {
        freshstack::llm::Llm::new(Box::new(freshstack::llm::NoModel), None)
    };
    let summary = judge(
        &llm,
        &config,
        &JudgeInputs {
            questions: &args.questions,
            nuggets: &args.nuggets,
            corpus: &args.corpus,
            pool: &args.pool,
        },
        &args.out,
        &Bars::new(),
    )
    .map_err(|e| super::with_flags(e, flags))?;
    if let Some(path) = &args.summary {
        freshstack::dataset::write_json_atomic(path, &summary)?;
    }
    eprintln!(
        "wrote {} judgments ({} supported, {} without a verdict) for {} questions to {}; {} \
         questions without nuggets skipped; {} of {} calls failed after repairs (recorded with \
         the raw answer); {} documents truncated to fit; {}",
        summary.judgments,
        summary.supported,
        summary.unjudged,
        summary.questions - summary.questions_without_nuggets,
        args.out.display(),
        summary.questions_without_nuggets,
        summary.stage.failed,
        summary.stage.items,
        summary.documents_truncated,
        stats_line(&llm)
    );
    if let Some(kappa) = summary.self_consistency {
        eprintln!(
            "self-consistency: the answers asked again with the documents shuffled agree with \
             the first at kappa {kappa:.3}"
        );
    }
    super::warn_if_schema_refused(&summary.stage);
    Ok(())
}
