//! CPU kernels under the models: fused element-wise steps of attention and the MLP ([`ops`]),
//! the f32 fast path of a whole BERT layer ([`bert_layer`]), and bf16 linear layers on
//! AVX512-BF16 ([`bf16`]). They work on plain slices or as candle custom ops and know no model
//! files; `llm::native` (the GGUF engine) reuses `ops` and `bf16`.

pub(crate) mod bert_layer;
pub(crate) mod bf16;
pub(crate) mod ops;
