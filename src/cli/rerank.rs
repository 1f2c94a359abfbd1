//! `freshstack rerank`: rescore the top k of each question of a TREC run with a local
//! cross-encoder.

use std::path::PathBuf;

use clap::Args;
use freshstack::embed::{DeviceSpec, ModelDType, resolve_model};
use freshstack::rerank::{
    CrossEncoder, DEFAULT_RERANK_DEPTH, RerankFiles, Reranker, RerankerOptions, rerank_files,
};
use freshstack::search::RerankConfig;

use super::progress::Bars;
use super::with_flags;

/// How the library's settings are named on this command line.
const FLAGS: &[(&str, &str)] = &[
    ("rerank depth", "-k"),
    ("queries", "--queries"),
    ("corpus", "--corpus"),
];

/// Arguments of `freshstack rerank`.
#[derive(Debug, Args)]
pub struct RerankArgs {
    /// First-stage TREC run.
    #[arg(long, value_name = "FILE")]
    run: PathBuf,
    /// Questions (reference schema: query = query_title + " " + query_text) or BEIR queries
    /// (`_id`, `text`), JSONL.
    #[arg(long, value_name = "FILE")]
    queries: PathBuf,
    /// Corpus JSONL (`_id`, `title`, `text`).
    #[arg(long, value_name = "FILE")]
    corpus: PathBuf,
    /// Cross-encoder: a local directory, or a Hugging Face id (org/name[@revision]) already in
    /// the local Hugging Face cache. Never downloaded.
    #[arg(long, value_name = "DIR|ID")]
    model: String,
    /// Documents reranked per question; the rest keep their order below them.
    #[arg(short, default_value_t = DEFAULT_RERANK_DEPTH)]
    k: usize,
    /// The reranked TREC run to write (atomically).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Longest (query, document) pair in tokens (default: the model's); documents are cut.
    #[arg(long)]
    max_length: Option<usize>,
    /// Padded tokens per batch (default: 2048 on the CPU, 16384 on a GPU).
    #[arg(long)]
    max_batch_tokens: Option<usize>,
    /// Weight and compute dtype: f32, bf16 or f16 (default: the model manifest's, else f32).
    #[arg(long)]
    model_dtype: Option<ModelDType>,
    /// cpu, cuda or cuda:N (cuda needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Run tag (last column); default: `rerank`.
    #[arg(long, default_value = "rerank")]
    tag: String,
}

pub fn run(args: RerankArgs) -> anyhow::Result<()> {
    let options = RerankerOptions {
        device: args.device,
        dtype: args.model_dtype,
        max_length: args.max_length,
        max_batch_tokens: args.max_batch_tokens,
    };
    if args.k == 0 {
        anyhow::bail!("invalid -k: must be at least 1");
    }
    let files = resolve_model(&args.model)?;
    let started = std::time::Instant::now();
    let reranker = CrossEncoder::load(&files, &options)?;
    let loaded = started.elapsed().as_secs_f64();
    let summary = rerank_files(
        &reranker,
        &RerankFiles {
            run: args.run.clone(),
            queries: args.queries.clone(),
            corpus: args.corpus.clone(),
            out: args.out.clone(),
            tag: args.tag.clone(),
        },
        args.k,
        &Bars::new(),
    )
    .map_err(|e| with_flags(e, FLAGS))?;
    let seconds = started.elapsed().as_secs_f64() - loaded;
    eprintln!(
        "reranked the top {} of {} questions with {} (max length {}): {} pairs, {} tokens, {} \
         documents truncated; load {loaded:.1}s, rerank {seconds:.1}s ({:.1} pairs/s); wrote {}",
        args.k,
        summary.questions,
        reranker.name(),
        reranker.max_length(),
        summary.pairs,
        summary.tokens,
        summary.truncated,
        summary.pairs as f64 / seconds.max(1e-9),
        args.out.display()
    );
    Ok(())
}

/// `--rerank` flags shared by `search` and `retrieve`: a cross-encoder second stage over the top
/// `--rerank-depth` of the first-stage results.
#[derive(Debug, Args)]
pub struct RerankStageArgs {
    /// Rerank the top --rerank-depth results with this cross-encoder (a local directory or a
    /// cached Hugging Face id; never downloaded). Runs on --device.
    #[arg(long, value_name = "DIR|ID")]
    rerank: Option<String>,
    /// Results per query the reranker rescores (paper §6: 50); the rest keep their order below.
    #[arg(long, default_value_t = DEFAULT_RERANK_DEPTH)]
    rerank_depth: usize,
    /// For --rerank: the corpus JSONL the index was built from (its texts feed the reranker;
    /// checked against the index's corpus hash). Default: the path the index recorded.
    #[arg(long, value_name = "FILE")]
    corpus: Option<PathBuf>,
    /// For --rerank: longest (query, document) pair in tokens (default: the model's).
    #[arg(long)]
    rerank_max_length: Option<usize>,
}

impl RerankStageArgs {
    /// The second stage's settings when `--rerank` is given (on `device`, in `model_dtype`).
    pub fn config(
        &self,
        device: DeviceSpec,
        model_dtype: Option<ModelDType>,
    ) -> anyhow::Result<Option<RerankConfig>> {
        let Some(model) = &self.rerank else {
            return Ok(None);
        };
        Ok(Some(RerankConfig {
            model: model.clone(),
            depth: self.rerank_depth,
            corpus: self.corpus.clone(),
            options: RerankerOptions {
                device,
                dtype: model_dtype,
                max_length: self.rerank_max_length,
                max_batch_tokens: None,
            },
        }))
    }
}
