//! Dense encoders, run locally through candle: BERT-family models (all-MiniLM, BGE, E5) and
//! decoder embedders (E5-Mistral, BGE-Gemma2, gte-Qwen2, Qwen3-Embedding).
//!
//! Owns: model resolution (a local directory or the Hugging Face cache, never the network), the
//! registry of `models/*.toml` manifests, one forward pass per architecture, pooling, L2
//! normalisation, length-sorted token-budget batching (the `.npy` + `.ids` output format is the
//! data model's, [`VectorMatrix`](crate::dataset::VectorMatrix)).
//! Guarantees: rows come back in input order; results do not depend on the thread count; the
//! public API ([`TextEncoder`] through the data model's [`Encoder`](crate::dataset::Encoder))
//! carries no candle types. Imports only `kernels` (the CPU kernels under the models),
//! `dataset`, `error` and `progress`.
//!
//! Layout (the shape of text-embeddings-inference's candle backend):
//! - `encoder.rs` — [`TextEncoder`]: tokenizer + backbone + pooling + normalisation, the device
//!   and load options;
//! - `models/` — one file per architecture (`bert.rs`; `mistral.rs`, `qwen.rs`, `gemma2.rs` over
//!   the shared `decoder.rs`) and the dispatch from an [`Architecture`] to its backbone;
//! - `gguf.rs` — embedding models in llama.cpp's GGUF (`bert`, `nomic-bert`): metadata checks,
//!   the WordPiece tokenizer rebuilt from the stored vocabulary, tensors under their Hugging
//!   Face names;
//! - `pooling.rs`, `batch.rs` (length-sorted token-budget batches), `resolve.rs` (where a model's
//!   files are), `manifest.rs` (the `models/*.toml` registry), `input.rs` (the rows `embed` and
//!   `rerank` read), `job.rs` ([`embed_file`]: a file in, `.npy` + `.ids` (+ shard sidecar)
//!   out, what `freshstack embed` calls).

mod batch;
mod dense_head;
mod encoder;
mod gguf;
mod input;
mod job;
mod manifest;
mod models;
mod pooling;
mod resolve;

pub use batch::{
    DEFAULT_CPU_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_TOKENS, plan_batches, run_batches,
};
pub(crate) use encoder::find_manifest;
pub use encoder::{DeviceSpec, EncoderOptions, TextEncoder};
pub use input::{EmbedInput, InputKind, read_embed_input};
pub use job::{EmbedJob, EmbedReport, embed_file};
pub use manifest::{Architecture, FRESHSTACK_TASK, ModelDType, ModelKind, ModelManifest, Pooling};
pub(crate) use models::{BertConfig, BertFlavor, BertModel};
pub use resolve::{ModelFiles, resolve_model};
