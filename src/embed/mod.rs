//! Dense encoders, run locally through candle: BERT-family models (all-MiniLM, BGE, E5) and
//! decoder embedders (E5-Mistral, BGE-Gemma2, gte-Qwen2, Qwen3-Embedding).
//!
//! Owns: model resolution (a local directory or the Hugging Face cache, never the network), the
//! registry of `models/*.toml` manifests, one forward pass per architecture, pooling, L2
//! normalisation, length-sorted token-budget batching (the `.npy` + `.ids` output format is the
//! data model's, [`VectorMatrix`](crate::dataset::VectorMatrix)).
//! Guarantees: rows come back in input order; results do not depend on the thread count; the
//! public API ([`Encoder`], [`Embeddings`]) carries no candle types. Imports only `dataset`,
//! `error` and `progress`.

mod batch;
mod bert;
mod cpu_bert;
pub(crate) mod cpu_bf16;
pub(crate) mod cpu_ops;
mod decoder;
mod encoder;
mod gemma2;
mod input;
mod manifest;
mod mistral;
mod pooling;
mod qwen;
mod resolve;

pub use batch::{
    DEFAULT_CPU_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_TOKENS, plan_batches, run_batches,
};
pub(crate) use bert::{BertConfig, BertFlavor, BertModel};
pub use cpu_bf16::PackedBf16Linear;
pub(crate) use encoder::find_manifest;
pub use encoder::{DeviceSpec, Embeddings, Encoder, EncoderOptions, TextEncoder};
pub use input::{EmbedInput, InputKind, read_embed_input};
pub use manifest::{
    Architecture, FRESHSTACK_TASK, ModelDType, ModelKind, ModelManifest, Pooling, TextKind,
};
pub use resolve::{ModelFiles, resolve_model};
