//! Qwen2 (gte-Qwen2) and Qwen3 (Qwen3-Embedding) decoders as embedders. Qwen2 adds biases to the
//! q/k/v projections; Qwen3 drops them and normalises each query and key head (RMSNorm) before
//! RoPE. Sliding windows apply from layer `max_window_layers` on when `use_sliding_window` is set.
//! A checkpoint that declares itself bidirectional (pplx-embed's `model_type`
//! `bidirectional_pplx_qwen3`, or `is_causal: false` as Giga-Embeddings writes it) attends both
//! ways: the causal triangle is dropped, padding stays masked.
//! Upstream: `transformers/models/qwen2/modeling_qwen2.py`, `.../qwen3/modeling_qwen3.py`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::QuantizedLinears;
use super::decoder::{
    Activation, DecoderModel, DecoderSpec, RopeParameters, layer_windows, rope_theta,
};

/// Which Qwen generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QwenVersion {
    /// Qwen2: q/k/v biases.
    Qwen2,
    /// Qwen3: per-head q/k RMSNorm, explicit `head_dim`, optional `attention_bias`.
    Qwen3,
}

/// The fields of a Qwen2/Qwen3 `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct QwenConfig {
    /// `qwen2`, `qwen3` or `bidirectional_pplx_qwen3`.
    pub model_type: Option<String>,
    /// `false` for checkpoints trained with bidirectional attention.
    pub is_causal: Option<bool>,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Transformer blocks (decoder layers) stacked.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads.
    pub num_key_value_heads: Option<usize>,
    /// Head width (Qwen3; Qwen2 derives it).
    pub head_dim: Option<usize>,
    /// MLP activation.
    #[serde(default = "silu")]
    pub hidden_act: String,
    /// RMSNorm epsilon.
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    /// RoPE base (older configs).
    pub rope_theta: Option<f64>,
    /// RoPE settings (newer configs).
    pub rope_parameters: Option<RopeParameters>,
    /// Older RoPE scaling block (refused unless default).
    pub rope_scaling: Option<serde_json::Value>,
    /// Attention kind per layer (newer configs).
    pub layer_types: Option<Vec<String>>,
    /// Qwen3: biases on q/k/v.
    #[serde(default)]
    pub attention_bias: bool,
    /// Whether layers from `max_window_layers` on use a sliding window.
    #[serde(default)]
    pub use_sliding_window: bool,
    /// Positions a sliding-window layer attends to (with `use_sliding_window`).
    pub sliding_window: Option<usize>,
    /// First layer with a sliding window.
    #[serde(default)]
    pub max_window_layers: usize,
}

fn silu() -> String {
    "silu".to_string()
}
fn eps() -> f64 {
    1e-6
}

impl QwenConfig {
    /// True when every token attends to every other one (pplx-embed, `is_causal: false`).
    pub fn bidirectional(&self) -> bool {
        self.model_type.as_deref() == Some("bidirectional_pplx_qwen3")
            || self.is_causal == Some(false)
    }

    /// The shared decoder description.
    pub fn spec(&self, version: QwenVersion) -> candle_core::Result<DecoderSpec> {
        let head_dim = self
            .head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1));
        let sliding_window = layer_windows(
            self.layer_types.as_deref(),
            self.num_hidden_layers,
            self.sliding_window,
            |i| {
                (self.use_sliding_window && i >= self.max_window_layers)
                    .then_some(self.sliding_window)
                    .flatten()
            },
        )?;
        Ok(DecoderSpec {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: rope_theta(
                self.rope_theta,
                self.rope_parameters.as_ref(),
                self.rope_scaling.as_ref(),
                10_000.0,
            )?,
            activation: self.hidden_act.parse::<Activation>()?,
            qkv_bias: match version {
                QwenVersion::Qwen2 => true,
                QwenVersion::Qwen3 => self.attention_bias,
            },
            qk_norm: version == QwenVersion::Qwen3,
            gemma: false,
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            attn_softcap: None,
            sliding_window,
            causal: !self.bidirectional(),
            local_rope_theta: None,
        })
    }
}

/// Builds a Qwen2 or Qwen3 embedder from its config and weights (those a GGUF file keeps
/// quantized from `quantized`).
pub fn load(
    cfg: &QwenConfig,
    version: QwenVersion,
    vb: VarBuilder,
    quantized: &QuantizedLinears,
) -> candle_core::Result<DecoderModel> {
    DecoderModel::load_with(cfg.spec(version)?, vb, quantized)
}
