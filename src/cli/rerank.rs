//! `freshstack rerank`: rescore the top k of each question of a TREC run with a local
//! cross-encoder.

use std::path::PathBuf;

use clap::Args;
use freshstack::embed::{DeviceSpec, ModelDType};
use freshstack::rerank::{
    DEFAULT_RERANK_DEPTH, RerankFiles, RerankJob, RerankerOptions, rerank_file,
};
use freshstack::search::RerankConfig;

use super::progress::Bars;
use super::with_flags;
use freshstack::Setting;

/// How the library's settings are named on this command line.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::RerankDepth => "-k",
        Setting::Queries => "--queries",
        Setting::Corpus => "--corpus",
        _ => return None,
    })
}

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
    let job = RerankJob {
        model: args.model,
        options: RerankerOptions {
            device: args.device,
            dtype: args.model_dtype,
            max_length: args.max_length,
            max_batch_tokens: args.max_batch_tokens,
        },
        files: RerankFiles {
            run: args.run,
            queries: args.queries,
            corpus: args.corpus,
            out: args.out,
            tag: args.tag,
        },
        depth: args.k,
    };
    let report = rerank_file(&job, &Bars::new()).map_err(|e| with_flags(e, flags))?;
    let summary = &report.summary;
    eprintln!(
        "reranked the top {} of {} questions with {} (max length {}): {} pairs, {} tokens, {} \
         documents truncated; load {:.1}s, rerank {:.1}s ({:.1} pairs/s); wrote {}",
        job.depth,
        summary.questions,
        report.model,
        report.max_length,
        summary.pairs,
        summary.tokens,
        summary.truncated,
        report.load_seconds,
        report.rerank_seconds,
        summary.pairs as f64 / report.rerank_seconds.max(1e-9),
        job.files.out.display()
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
    ) -> Option<RerankConfig> {
        let model = self.rerank.as_ref()?;
        Some(RerankConfig {
            model: model.clone(),
            depth: self.rerank_depth,
            corpus: self.corpus.clone(),
            options: RerankerOptions {
                device,
                dtype: model_dtype,
                max_length: self.rerank_max_length,
                max_batch_tokens: None,
            },
        })
    }
}
