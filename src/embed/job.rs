//! `freshstack embed` as one library call: [`embed_file`] reads a corpus or query file, embeds
//! it (or one shard of it) and writes the `.npy` matrix, its `.ids` and, for a shard, the
//! sidecar that `merge` checks.

use std::path::PathBuf;
use std::time::Instant;

use super::{EncoderOptions, InputKind, ModelDType, TextEncoder, read_embed_input, resolve_model};
use crate::dataset::{
    Encoder, Shard, ShardInfo, TextKind, VectorDtype, is_stream_target, write_ids_beside,
    write_npy_matrix,
};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// What [`embed_file`] embeds and where it writes.
#[derive(Debug, Clone)]
pub struct EmbedJob {
    /// A local model directory, or a Hugging Face id (`org/name[@revision]`) already in the
    /// local cache.
    pub model: String,
    /// Corpus JSONL (`_id`, `title`, `text`) or queries JSONL (reference schema).
    pub input: PathBuf,
    /// The matrix to write (`.npy`, rows in input order); the ids beside it ([`write_ids_beside`]).
    pub out: PathBuf,
    /// Template to apply; `None` takes it from the input's schema (documents or queries).
    pub kind: Option<TextKind>,
    /// Element type of the written matrix.
    pub dtype: VectorDtype,
    /// Embed only this shard's batches (and write the sidecar).
    pub shard: Option<Shard>,
    /// How the encoder loads (device, dtype, lengths, templates).
    pub encoder: EncoderOptions,
}

/// What [`embed_file`] did.
#[derive(Debug, Clone)]
pub struct EmbedReport {
    /// Rows written (the shard's, or every input row).
    pub rows: usize,
    /// Rows of the whole input.
    pub input_rows: usize,
    /// The template applied.
    pub kind: TextKind,
    /// The model's id (its manifest's).
    pub model: String,
    /// The weight and compute dtype used.
    pub model_dtype: ModelDType,
    /// Columns of the matrix.
    pub dim: usize,
    /// Max tokens per text the model ran with.
    pub max_length: usize,
    /// Tokens fed to the model.
    pub num_tokens: usize,
    /// Texts cut at the max length.
    pub num_truncated: usize,
    /// Seconds loading the model.
    pub load_seconds: f64,
    /// Seconds embedding, after loading.
    pub embed_seconds: f64,
    /// The ids file written beside the matrix (none when the matrix went to a stream such as
    /// `/dev/null`).
    pub ids: Option<PathBuf>,
}

/// Reads `job.input`, embeds its texts (all of them, or the rows of `job.shard`, computed
/// exactly as in one process) and writes the sidecar (for a shard), the matrix and the ids, each
/// atomically.
pub fn embed_file(job: &EmbedJob, progress: &dyn Progress) -> Result<EmbedReport> {
    let input = read_embed_input(&job.input)?;
    let kind = job.kind.unwrap_or(match input.kind {
        InputKind::Documents => TextKind::Document,
        InputKind::Queries => TextKind::Query,
    });
    let texts: Vec<&str> = input.texts.iter().map(String::as_str).collect();
    if job.shard.is_some() && is_stream_target(&job.out) {
        return Err(Error::invalid(
            Setting::Out,
            format!(
                "{} is not a regular file: a shard's output needs one (its sidecar lies beside it)",
                job.out.display()
            ),
        ));
    }

    let files = resolve_model(&job.model)?;
    let started = Instant::now();
    let encoder = TextEncoder::load(&files, &job.encoder)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let (embeddings, positions) = match job.shard {
        Some(shard) => encoder.embed_shard(&texts, kind, shard, progress)?,
        None => (
            encoder.embed(&texts, kind, progress)?,
            (0..texts.len()).collect(),
        ),
    };
    let embed_seconds = started.elapsed().as_secs_f64() - load_seconds;

    let ids: Vec<String> = positions.iter().map(|&p| input.ids[p].clone()).collect();
    if let Some(shard) = job.shard {
        ShardInfo {
            items: positions.len(),
            rows: positions.len(),
            positions: positions.clone(),
            ..ShardInfo::new(
                "embed",
                shard,
                shard_settings(&encoder, job.dtype, kind),
                input.ids.iter().map(String::as_str),
            )
        }
        .write(&job.out)?;
    }
    write_npy_matrix(&job.out, &embeddings.data, embeddings.dim, job.dtype)?;
    let ids_file = write_ids_beside(&job.out, &ids)?;
    let manifest = encoder.manifest();
    Ok(EmbedReport {
        rows: positions.len(),
        input_rows: input.ids.len(),
        kind,
        model: manifest.id.clone(),
        model_dtype: manifest.dtype,
        dim: embeddings.dim,
        max_length: manifest.max_length,
        num_tokens: embeddings.num_tokens,
        num_truncated: embeddings.num_truncated,
        load_seconds,
        embed_seconds,
        ids: ids_file,
    })
}

/// What must agree between the shards of one `embed` run (a shard sidecar's `settings`): the
/// effective model settings after overrides, the written dtype, the batch budget (it decides
/// the batches, so the shards' rows) and the template.
fn shard_settings(encoder: &TextEncoder, out_dtype: VectorDtype, kind: TextKind) -> String {
    let manifest = encoder.manifest();
    let mut settings = format!(
        "model={} model_dtype={:?} out_dtype={} max_length={} max_batch_tokens={} kind={kind:?} \
         pooling={:?} query_template={:?} document_template={:?} task={:?}",
        manifest.id,
        manifest.dtype,
        out_dtype.name(),
        manifest.max_length,
        encoder.max_batch_tokens(),
        manifest.pooling,
        manifest.query_template,
        manifest.document_template,
        manifest.task,
    );
    if let Some(n) = encoder.dimensions() {
        settings.push_str(&format!(" dimensions={n}"));
    }
    settings
}
