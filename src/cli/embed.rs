//! `freshstack embed`: embed a corpus or query file with a local dense encoder into `.npy` + `.ids`.

use std::path::PathBuf;

use clap::Args;
use freshstack::dataset::{Encoder, TextKind};
use freshstack::dataset::{Shard, ShardInfo, VectorDtype, ids_path, write_ids, write_npy_matrix};
use freshstack::embed::{
    DeviceSpec, EncoderOptions, InputKind, ModelDType, Pooling, TextEncoder, read_embed_input,
    resolve_model,
};

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
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    let out_dtype = args.dtype;
    let shard = args.shard;
    let options = EncoderOptions {
        device: args.device,
        dtype: args.model_dtype,
        max_length: args.max_length,
        max_batch_tokens: args.max_batch_tokens,
        pooling: args.pooling,
        query_template: args.query_template.clone(),
        task: args.task.clone(),
        ..EncoderOptions::default()
    };
    let requested_kind = args.kind;

    let input = read_embed_input(&args.input)?;
    let kind = requested_kind.unwrap_or(match input.kind {
        InputKind::Documents => TextKind::Document,
        InputKind::Queries => TextKind::Query,
    });
    let texts: Vec<&str> = input.texts.iter().map(String::as_str).collect();

    let files = resolve_model(&args.model)?;
    let started = std::time::Instant::now();
    let encoder = TextEncoder::load(&files, &options)?;
    let loaded = started.elapsed().as_secs_f64();
    let (embeddings, positions) = match shard {
        Some(shard) => encoder.embed_shard(&texts, kind, shard, &Bars::new())?,
        None => (
            encoder.embed(&texts, kind, &Bars::new())?,
            (0..texts.len()).collect(),
        ),
    };
    let seconds = started.elapsed().as_secs_f64() - loaded;

    let ids_path = ids_path(&args.out);
    let ids: Vec<String> = positions.iter().map(|&p| input.ids[p].clone()).collect();
    let manifest = encoder.manifest();
    if let Some(shard) = shard {
        let settings = format!(
            "model={} model_dtype={:?} out_dtype={} max_length={} max_batch_tokens={} kind={kind:?} \
             pooling={:?} query_template={:?} document_template={:?} task={:?}",
            manifest.id,
            manifest.dtype,
            args.dtype.name(),
            manifest.max_length,
            encoder.max_batch_tokens(),
            manifest.pooling,
            manifest.query_template,
            manifest.document_template,
            manifest.task,
        );
        ShardInfo {
            items: positions.len(),
            rows: positions.len(),
            positions: positions.clone(),
            ..ShardInfo::new(
                "embed",
                shard,
                settings,
                input.ids.iter().map(String::as_str),
            )
        }
        .write(&args.out)?;
    }
    write_npy_matrix(&args.out, &embeddings.data, embeddings.dim, out_dtype)?;
    write_ids(&ids_path, &ids)?;
    eprintln!(
        "embedded {} of {} {} with {} ({:?}, dim {}, max length {}): {} tokens, {} truncated; \
         load {loaded:.1}s, embed {seconds:.1}s ({:.1} texts/s); wrote {} and {}",
        positions.len(),
        input.ids.len(),
        if kind == TextKind::Query {
            "queries"
        } else {
            "documents"
        },
        manifest.id,
        manifest.dtype,
        embeddings.dim,
        manifest.max_length,
        embeddings.num_tokens,
        embeddings.num_truncated,
        positions.len() as f64 / seconds.max(1e-9),
        args.out.display(),
        ids_path.display(),
    );
    Ok(())
}
