//! `freshstack embed`: embed a corpus or query file with a local dense encoder into `.npy` + `.ids`.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use freshstack::embed::{
    DeviceSpec, Encoder, EncoderOptions, InputKind, ModelDType, NpyDType, Pooling, TextEncoder,
    TextKind, read_embed_input, resolve_model, write_ids, write_npy,
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
    kind: Option<String>,
    /// Element type of the written matrix: f32 or f16.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Weight and compute dtype: f32, bf16 or f16 (default: the model manifest's).
    #[arg(long)]
    model_dtype: Option<String>,
    /// Max tokens per text, special tokens included (default: the model's); longer texts are truncated.
    #[arg(long)]
    max_length: Option<usize>,
    /// Padded tokens per batch (default: 2048 on the CPU, 16384 on a GPU).
    #[arg(long)]
    max_batch_tokens: Option<usize>,
    /// Embed only shard I of N (0-based, contiguous rows), e.g. for a Slurm array.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// cpu, cuda or cuda:N (cuda needs a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Pooling override for models without a manifest: cls, mean or last-token.
    #[arg(long)]
    pooling: Option<String>,
    /// Task description substituted into the query template's `{task}`.
    #[arg(long)]
    task: Option<String>,
    /// Query template override (`{task}` and `{text}` are substituted).
    #[arg(long)]
    query_template: Option<String>,
    /// Worker threads (default: all cores). The output does not depend on it.
    #[arg(long)]
    threads: Option<usize>,
}

/// Parses `I/N` into a 0-based shard index and a shard count.
fn parse_shard(text: &str) -> anyhow::Result<(usize, usize)> {
    let (i, n) = text.split_once('/').context("--shard: expected I/N")?;
    let i: usize = i.trim().parse().context("--shard: I is not a number")?;
    let n: usize = n.trim().parse().context("--shard: N is not a number")?;
    anyhow::ensure!(n > 0 && i < n, "--shard {text}: need 0 <= I < N");
    Ok((i, n))
}

pub fn run(args: EmbedArgs) -> anyhow::Result<()> {
    let out_dtype = NpyDType::parse(&args.dtype)?;
    let shard = args.shard.as_deref().map(parse_shard).transpose()?;
    let options = EncoderOptions {
        device: DeviceSpec::parse(&args.device)?,
        dtype: args
            .model_dtype
            .as_deref()
            .map(ModelDType::parse)
            .transpose()?,
        max_length: args.max_length,
        max_batch_tokens: args.max_batch_tokens,
        pooling: args.pooling.as_deref().map(Pooling::parse).transpose()?,
        query_template: args.query_template.clone(),
        task: args.task.clone(),
        ..EncoderOptions::default()
    };
    let requested_kind = args.kind.as_deref().map(TextKind::parse).transpose()?;
    if let Some(threads) = args.threads {
        let threads = threads.max(1);
        // candle sizes its matmul parallelism from RAYON_NUM_THREADS; set before any thread starts.
        // SAFETY: no other thread exists yet (nothing has touched rayon or candle).
        unsafe { std::env::set_var("RAYON_NUM_THREADS", threads.to_string()) };
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build_global()
            .context("cannot configure worker threads")?;
    }

    let input = read_embed_input(&args.input)?;
    let kind = requested_kind.unwrap_or(match input.kind {
        InputKind::Documents => TextKind::Document,
        InputKind::Queries => TextKind::Query,
    });
    let (start, end) = match shard {
        Some((i, n)) => (input.ids.len() * i / n, input.ids.len() * (i + 1) / n),
        None => (0, input.ids.len()),
    };
    let ids = &input.ids[start..end];
    let texts: Vec<&str> = input.texts[start..end].iter().map(String::as_str).collect();

    let files = resolve_model(&args.model)?;
    let started = std::time::Instant::now();
    let encoder = TextEncoder::load(&files, &options)?;
    let loaded = started.elapsed().as_secs_f64();
    let embeddings = encoder.embed(&texts, kind, &Bars::new())?;
    let seconds = started.elapsed().as_secs_f64() - loaded;

    let ids_path = args.out.with_extension("ids");
    write_npy(&args.out, &embeddings.data, embeddings.dim, out_dtype)?;
    write_ids(&ids_path, ids)?;
    let manifest = encoder.manifest();
    eprintln!(
        "embedded {} {} (rows {start}..{end}) with {} ({:?}, dim {}, max length {}): {} tokens, {} truncated; \
         load {loaded:.1}s, embed {seconds:.1}s ({:.1} texts/s); wrote {} and {}",
        texts.len(),
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
        texts.len() as f64 / seconds.max(1e-9),
        args.out.display(),
        ids_path.display(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse() {
        assert_eq!(parse_shard("0/4").unwrap(), (0, 4));
        assert!(parse_shard("4/4").is_err());
        assert!(parse_shard("x").is_err());
    }
}
