//! EuroBERT encoders (Jina v5 text nano's backbone): Llama blocks (RMSNorm, RoPE, grouped-query
//! attention, SwiGLU) with bidirectional attention and a final norm, on the shared machinery of
//! [`super::decoder`]. Upstream: `transformers/models/eurobert/modeling_eurobert.py`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::decoder::{DecoderModel, DecoderSpec, LlamaStyleConfig};

/// The fields of a EuroBERT `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct EuroBertConfig {
    /// Sizes, activation, norm and RoPE.
    #[serde(flatten)]
    pub base: LlamaStyleConfig,
    /// Biases on the attention projections (none in the released checkpoints; refused).
    #[serde(default)]
    pub attention_bias: bool,
    /// Biases on the MLP projections (none in the released checkpoints; refused).
    #[serde(default)]
    pub mlp_bias: bool,
}

impl EuroBertConfig {
    /// The shared decoder description, attending both ways (RMSNorm epsilon 1e-5 unless the
    /// config says).
    pub fn spec(&self) -> candle_core::Result<DecoderSpec> {
        if self.attention_bias || self.mlp_bias {
            candle_core::bail!(
                "EuroBERT with attention_bias or mlp_bias is not supported (the released \
                 checkpoints have neither)"
            );
        }
        self.base.spec(1e-5, false)
    }
}

/// Builds a EuroBERT encoder from its config and weights.
pub fn load(cfg: &EuroBertConfig, vb: VarBuilder) -> candle_core::Result<DecoderModel> {
    DecoderModel::new(cfg.spec()?, vb)
}

#[cfg(test)]
mod tests {
    use super::super::mistral::MistralConfig;
    use super::*;

    const MINIMAL: &str = r#"{"vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
        "num_hidden_layers": 1, "num_attention_heads": 2}"#;

    #[test]
    fn the_shared_config_keeps_each_models_defaults() {
        let mistral: MistralConfig = serde_json::from_str(MINIMAL).unwrap();
        let spec = mistral.spec().unwrap();
        assert_eq!(spec.rms_norm_eps, 1e-6);
        assert!(spec.causal);
        let eurobert: EuroBertConfig = serde_json::from_str(MINIMAL).unwrap();
        let spec = eurobert.spec().unwrap();
        assert_eq!(spec.rms_norm_eps, 1e-5);
        assert!(!spec.causal);
        assert_eq!((spec.head_dim, spec.num_kv_heads), (4, 2));
        let given = MINIMAL.replace('}', r#", "rms_norm_eps": 1e-3}"#);
        let eurobert: EuroBertConfig = serde_json::from_str(&given).unwrap();
        assert_eq!(eurobert.spec().unwrap().rms_norm_eps, 1e-3);
    }

    #[test]
    fn eurobert_with_biases_is_refused() {
        for field in ["attention_bias", "mlp_bias"] {
            let json = MINIMAL.replace('}', &format!(r#", "{field}": true}}"#));
            let config: EuroBertConfig = serde_json::from_str(&json).unwrap();
            let err = config.spec().unwrap_err().to_string();
            assert!(err.contains("attention_bias or mlp_bias"), "{err}");
        }
    }
}
