//! Gemma-3 text models as embedders: EmbeddingGemma (bidirectional attention, mean pooling, then
//! sentence-transformers' Dense projections) and causal Gemma-3 embedders such as harrier
//! (last-token pooling). The layout is Gemma-2's (four `(1 + w)` RMSNorms per layer, embeddings
//! scaled by `sqrt(hidden_size)`, GELU (tanh) MLP) plus `(1 + w)` RMSNorms on each query and key
//! head, no soft-capping by default, and two RoPE bases: `rope_local_base_freq` on the
//! sliding-window layers and `rope_theta` on the global ones. With `use_bidirectional_attention`
//! a sliding layer sees the keys at most `sliding_window / 2` positions away on either side (the
//! config's window is the span: transformers' `Gemma3TextConfig` turns it into the exclusive
//! bound `sliding_window / 2 + 1` for `_bidirectional_window_overlay`) and a global layer every
//! real token.
//! Upstream: `transformers/models/gemma3/modeling_gemma3.py`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::decoder::{
    Activation, DecoderModel, DecoderSpec, layer_windows, rope_parameters_for, rope_theta,
};

/// The fields of a Gemma-3 text `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct Gemma3Config {
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
    /// Key/value heads.
    pub num_key_value_heads: Option<usize>,
    /// Head width.
    #[serde(default = "head_dim")]
    pub head_dim: usize,
    /// MLP activation.
    pub hidden_activation: Option<String>,
    /// RMSNorm epsilon.
    #[serde(default = "eps")]
    pub rms_norm_eps: f64,
    /// RoPE base of the global layers (older configs).
    pub rope_theta: Option<f64>,
    /// RoPE base of the sliding-window layers (older configs).
    pub rope_local_base_freq: Option<f64>,
    /// RoPE settings per layer type (newer configs: `full_attention`, `sliding_attention`).
    pub rope_parameters: Option<serde_json::Value>,
    /// Older RoPE scaling block (refused unless default).
    pub rope_scaling: Option<serde_json::Value>,
    /// Attention kind per layer.
    pub layer_types: Option<Vec<String>>,
    /// Every this-many-th layer is global when `layer_types` is absent.
    #[serde(default = "pattern", rename = "_sliding_window_pattern")]
    pub sliding_window_pattern: usize,
    /// Window of the sliding layers.
    pub sliding_window: Option<usize>,
    /// Attention is scaled by this to the power -1/2.
    #[serde(default = "scalar")]
    pub query_pre_attn_scalar: f64,
    /// Soft cap on attention logits (none in released Gemma-3 models).
    pub attn_logit_softcapping: Option<f64>,
    /// Every token attends to the whole text (EmbeddingGemma).
    #[serde(default)]
    pub use_bidirectional_attention: bool,
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
fn pattern() -> usize {
    6
}

impl Gemma3Config {
    /// The RoPE bases (global, sliding) from either config layout.
    fn rope_bases(&self) -> candle_core::Result<(f64, f64)> {
        let per_type = |kind| rope_parameters_for(self.rope_parameters.as_ref(), kind);
        let global = per_type("full_attention")?;
        let local = per_type("sliding_attention")?;
        let scaling = self.rope_scaling.as_ref().filter(|v| !v.is_null());
        let global = rope_theta(self.rope_theta, global.as_ref(), scaling, 1_000_000.0)?;
        let local = rope_theta(
            self.rope_local_base_freq,
            local.as_ref(),
            None,
            self.rope_local_base_freq.unwrap_or(10_000.0),
        )?;
        Ok((global, local))
    }

    /// The shared decoder description.
    pub fn spec(&self) -> candle_core::Result<DecoderSpec> {
        let activation = self
            .hidden_activation
            .as_deref()
            .unwrap_or("gelu_pytorch_tanh");
        let (global, local) = self.rope_bases()?;
        let pattern = self.sliding_window_pattern.max(1);
        let window = if self.use_bidirectional_attention {
            self.sliding_window.map(|w| w / 2 + 1)
        } else {
            self.sliding_window
        };
        Ok(DecoderSpec {
            vocab_size: self.vocab_size,
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_layers: self.num_hidden_layers,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_key_value_heads.unwrap_or(self.num_attention_heads),
            head_dim: self.head_dim,
            rms_norm_eps: self.rms_norm_eps,
            rope_theta: global,
            activation: activation.parse::<Activation>()?,
            qkv_bias: false,
            qk_norm: true,
            gemma: true,
            attn_scale: 1.0 / self.query_pre_attn_scalar.sqrt(),
            attn_softcap: self.attn_logit_softcapping,
            sliding_window: layer_windows(
                self.layer_types.as_deref(),
                self.num_hidden_layers,
                window,
                |i| {
                    if (i + 1).is_multiple_of(pattern) {
                        None
                    } else {
                        window
                    }
                },
            )?,
            causal: !self.use_bidirectional_attention,
            local_rope_theta: Some(local),
        })
    }
}

/// Builds a Gemma-3 embedder from its config and weights.
pub fn load(cfg: &Gemma3Config, vb: VarBuilder) -> candle_core::Result<DecoderModel> {
    DecoderModel::new(cfg.spec()?, vb)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: serde_json::Value) -> Gemma3Config {
        let mut base = serde_json::json!({
            "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 6, "num_attention_heads": 2, "num_key_value_heads": 1,
            "head_dim": 4, "sliding_window": 512,
        });
        base.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    #[test]
    fn bidirectional_windows_are_half_the_span_and_every_sixth_layer_is_global() {
        let causal = config(serde_json::json!({})).spec().unwrap();
        assert!(causal.causal);
        assert_eq!(
            causal.sliding_window,
            [Some(512), Some(512), Some(512), Some(512), Some(512), None]
        );
        let both = config(serde_json::json!({"use_bidirectional_attention": true}))
            .spec()
            .unwrap();
        assert!(!both.causal);
        assert_eq!(both.sliding_window[0], Some(257));
        assert_eq!(both.sliding_window[5], None);
    }

    #[test]
    fn rope_bases_come_from_either_layout() {
        let old = config(serde_json::json!({"rope_theta": 1e6, "rope_local_base_freq": 1e4}));
        assert_eq!(old.rope_bases().unwrap(), (1e6, 1e4));
        let new = config(serde_json::json!({"rope_parameters": {
            "full_attention": {"rope_type": "default", "rope_theta": 5e5},
            "sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
        }}));
        assert_eq!(new.rope_bases().unwrap(), (5e5, 2e4));
        let scaled = config(serde_json::json!({"rope_parameters": {
            "full_attention": {"rope_type": "linear", "rope_theta": 5e5},
        }}));
        assert!(scaled.rope_bases().is_err());
    }
}
