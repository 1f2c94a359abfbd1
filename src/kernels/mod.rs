//! Every numeric kernel of the crate, on plain slices or as candle custom ops; none knows a
//! model file, a format or a stage. `embed` (the encoders), `llm` (the native GGUF engine) and
//! `index` (exact search, HNSW) import them; nothing else defines a dot product or names an
//! instruction set's intrinsics (`tests/layering.rs` checks both).
//!
//! - [`dot`]: inner products, f32 x f32 and f32 x f16, one form per instruction set, the same
//!   bits on every CPU;
//! - `ops`: fused element-wise steps (softmax rows, masked attention probabilities, GELU, SiLU
//!   gating) and the fast `exp` / `erf` they share;
//! - [`aligned`]: buffers that start a cache line, as tile loads need;
//! - [`amx`]: f32 matrix products on AMX tiles at f32-grade accuracy (three bf16 products per
//!   f32 one), where the CPU and the OS allow;
//! - `bert_layer`: the f32 fast path of a whole encoder layer (BERT, nomic-bert);
//! - `decoder_layer`: the fast path of a whole decoder layer (Mistral, Qwen, Gemma, EuroBERT),
//!   f32 or bf16 weights;
//! - `dense`: a dense layer's weight laid out for those two (f32 `gemm`, AMX bf16x3, or bf16);
//! - [`bf16`]: packed bf16 linear layers on AVX512-BF16 (decoder encoders, the GGUF engine's
//!   prompt path);
//! - [`quant`]: GGUF's quantized block formats, their dequantization and the integer matrix x
//!   vector kernels (`quant/x86.rs`: AVX2 and AVX512-VNNI);
//! - [`attention`]: the GGUF engine's KV cache and causal attention over it.

pub mod aligned;
pub mod amx;
pub mod attention;
pub(crate) mod bert_layer;
pub mod bf16;
pub(crate) mod decoder_layer;
pub(crate) mod dense;
pub mod dot;
pub(crate) mod ops;
pub mod quant;
