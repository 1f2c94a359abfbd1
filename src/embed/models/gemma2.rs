//! Gemma-2 decoders as embedders (BGE-multilingual-Gemma2): `(1 + w)` RMSNorms before and after
//! both attention and feed-forward, embeddings scaled by `sqrt(hidden_size)`, attention scaled by
//! `query_pre_attn_scalar^-0.5` with tanh soft-capping of the logits, a sliding window on every
//! even layer, GELU (tanh) MLP. The final-logit soft-capping applies to the LM head only, which an
//! embedder does not have. Upstream: `transformers/models/gemma2/modeling_gemma2.py`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::decoder::{
    Activation, DecoderModel, DecoderSpec, RopeParameters, layer_windows, rope_theta,
};

/// The fields of a Gemma-2 `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Gemma2Config {
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
    /// Head width.
    #[serde(default = "head_dim")]
    pub head_dim: usize,
    /// MLP activation (`hidden_activation`, older configs `hidden_act`).
    pub hidden_activation: Option<String>,
    /// Older name of the activation.
    pub hidden_act: Option<String>,
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
    /// Attention is scaled by this to the power -1/2.
    #[serde(default = "scalar")]
    pub query_pre_attn_scalar: f64,
    /// Soft cap on attention logits.
    pub attn_logit_softcapping: Option<f64>,
    /// Window of the even (sliding) layers.
    pub sliding_window: Option<usize>,
}

fn head_dim() -> usize {
    256
}
fn eps() -> f64 {
    1e-6
}
fn scalar() -> f64 {
    256.0
}

impl Gemma2Config {
    /// The shared decoder description.
    pub fn spec(&self) -> candle_core::Result<DecoderSpec> {
        let activation = self
            .hidden_activation
            .as_deref()
            .or(self.hidden_act.as_deref())
            .unwrap_or("gelu_pytorch_tanh");
        Ok(DecoderSpec {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim: self.head_dim,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: rope_theta(
                self.rope_theta,
                self.rope_parameters.as_ref(),
                self.rope_scaling.as_ref(),
                10_000.0,
            )?,
            activation: activation.parse::<Activation>()?,
            qkv_bias: false,
            qk_norm: false,
            gemma: true,
            attn_scale: 1.0 / self.query_pre_attn_scalar.sqrt(),
            attn_softcap: self.attn_logit_softcapping,
            sliding_window: layer_windows(
                self.layer_types.as_deref(),
                self.num_hidden_layers,
                self.sliding_window,
                |i| {
                    if i % 2 == 0 {
                        self.sliding_window
                    } else {
                        None
                    }
                },
            )?,
            causal: true,
            local_rope_theta: None,
        })
    }
}

/// Builds a Gemma-2 embedder from its config and weights.
pub fn load(cfg: &Gemma2Config, vb: VarBuilder) -> candle_core::Result<DecoderModel> {
    DecoderModel::new(cfg.spec()?, vb)
}
