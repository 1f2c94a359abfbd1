//! `freshstack embed`: embed a corpus or query file with a local dense encoder into `.npy` + `.ids`.

use std::path::PathBuf;

use clap::Args;
use freshstack::dataset::{Shard, TextKind, VectorDtype};
use freshstack::embed::{DeviceSpec, EmbedJob, EncoderOptions, ModelDType, Pooling, embed_file};

use super::progress::Bars;

/// Arguments of `freshstack embed`.
#[derive(Debug, Args)]
pub struct EmbedArgs {
    /// Model: a local directory, or a Hugging Face id (org/name[@revision]) already in the local
    /// Hugging Face cache. Never downloaded.
    #[arg(long, value_name = "DIR|ID")]
    model: String,
    /// Corpus JSONL (`_id`, `title`, `text`) or queries JSONL (`query_id`, `query_title`, `query_text`).
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
    /// Output matrix (.npy, rows in input order); the ids go next to it with extension `.ids`.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Template to apply: query or document (default: from the input's schema).
    #[arg(long)]
    kind: Option<TextKind>,
    /// Element type of the written matrix: f32 or f16.
    #[arg(long, default_value = "f32")]
    dtype: VectorDtype,
    /// Weight and compute dtype: f32, bf16 or f16 (default: the model manifest's).
    #[arg(long)]
    model_dtype: Option<ModelDType>,
    /// Max tokens per text, special tokens included (default: the model's); longer texts are truncated.
    #[arg(long)]
    max_length: Option<usize>,
    /// Padded tokens per batch (default: 2048 on the CPU, 16384 on a GPU).
    #[arg(long)]
    max_batch_tokens: Option<usize>,
    /// Embed only shard I of N (0-based), e.g. for a Slurm array: the length-sorted batches
    /// are dealt round-robin, so rows are computed exactly as in one process. Writes a sidecar
    /// OUT.shard.json with the rows' input positions; join the shards with `freshstack merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<Shard>,
    /// cpu, cuda or cuda:N (cuda needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Pooling override for models without a manifest: cls, mean or last-token.
    #[arg(long)]
    pooling: Option<Pooling>,
    /// Task description substituted into the query template's `{task}`.
    #[arg(long)]
    task: Option<String>,
    /// Query template override (`{task}` and `{text}` are substituted).
    #[arg(long)]
    query_template: Option<String>,
    /// Matryoshka truncation: keep the first N values of each vector and renormalise (N: one of
    /// the widths the model's card lists).
    #[arg(long, value_name = "N")]
    dimensions: Option<usize>,
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    let job = EmbedJob {
        model: args.model,
        input: args.input,
        out: args.out,
        kind: args.kind,
        dtype: args.dtype,
        shard: args.shard,
        encoder: EncoderOptions {
            device: args.device,
            dtype: args.model_dtype,
            max_length: args.max_length,
            max_batch_tokens: args.max_batch_tokens,
            pooling: args.pooling,
            query_template: args.query_template,
            task: args.task,
            dimensions: args.dimensions,
            ..EncoderOptions::default()
        },
    };
    let report = embed_file(&job, &Bars::new())?;
    eprintln!(
        "embedded {} of {} {} with {} ({:?}, dim {}, max length {}): {} tokens, {} truncated; \
         load {:.1}s, embed {:.1}s ({:.1} texts/s); wrote {}{}",
        report.rows,
        report.input_rows,
        if report.kind == TextKind::Query {
            "queries"
        } else {
            "documents"
        },
        report.model,
        report.model_dtype,
        report.dim,
        report.max_length,
        report.num_tokens,
        report.num_truncated,
        report.load_seconds,
        report.embed_seconds,
        report.rows as f64 / report.embed_seconds.max(1e-9),
        job.out.display(),
        report
            .ids
            .as_ref()
            .map(|ids| format!(" and {}", ids.display()))
            .unwrap_or_default(),
    );
    Ok(())
}
