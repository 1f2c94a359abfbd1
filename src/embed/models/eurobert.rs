//! EuroBERT encoders (Jina v5 text nano's backbone): Llama blocks (RMSNorm, RoPE, grouped-query
//! attention, SwiGLU) with bidirectional attention and a final norm, on the shared machinery of
//! [`super::decoder`]. Upstream: `transformers/models/eurobert/modeling_eurobert.py`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::decoder::{Activation, DecoderModel, DecoderSpec, RopeParameters, rope_theta};

/// The fields of a EuroBERT `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct EuroBertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Transformer blocks stacked.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (defaults to the query heads).
    pub num_key_value_heads: Option<usize>,
    /// Head width (defaults to hidden / heads).
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
    /// Biases on the attention projections (none in the released checkpoints; refused).
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the MLP projections (none in the released checkpoints; refused).
    #[serde(default)]
    pub mlp_bias: bool,
}

fn silu() -> String {
    "silu".to_string()
}
fn eps() -> f64 {
    1e-5
}

impl EuroBertConfig {
    /// The shared decoder description, attending both ways.
    pub fn spec(&self) -> candle_core::Result<DecoderSpec> {
        if self.attention_bias || self.mlp_bias {
            candle_core::bail!(
                "EuroBERT with attention_bias or mlp_bias is not supported (the released \
                 checkpoints have neither)"
            );
        }
        let head_dim = self
            .head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1));
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
            qkv_bias: false,
            qk_norm: false,
            gemma: false,
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            attn_softcap: None,
            sliding_window: vec![None; self.num_hidden_layers],
            causal: false,
            local_rope_theta: None,
        })
    }
}

/// Builds a EuroBERT encoder from its config and weights.
pub fn load(cfg: &EuroBertConfig, vb: VarBuilder) -> candle_core::Result<DecoderModel> {
    DecoderModel::new(cfg.spec()?, vb)
}
