//! Mistral decoders as embedders (E5-Mistral-7B-instruct): Llama-style blocks with grouped-query
//! attention and an optional sliding window on every layer; the shared forward pass lives in
//! [`super::decoder`]. Upstream: `transformers/models/mistral/modeling_mistral.py`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::decoder::{DecoderModel, DecoderSpec, LlamaStyleConfig, layer_windows};

/// The fields of a Mistral `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct MistralConfig {
    /// Sizes, activation, norm and RoPE.
    #[serde(flatten)]
    pub base: LlamaStyleConfig,
    /// Attention kind per layer (newer configs).
    pub layer_types: Option<Vec<String>>,
    /// Sliding attention window, on every layer (`null`: none).
    pub sliding_window: Option<usize>,
}

impl MistralConfig {
    /// The shared decoder description (RMSNorm epsilon 1e-6 unless the config says).
    pub fn spec(&self) -> candle_core::Result<DecoderSpec> {
        let mut spec = self.base.spec(1e-6, true)?;
        spec.sliding_window = layer_windows(
            self.layer_types.as_deref(),
            self.base.num_hidden_layers,
            self.sliding_window,
            |_| self.sliding_window,
        )?;
        Ok(spec)
    }
}

/// Builds a Mistral embedder from its config and weights.
pub fn load(cfg: &MistralConfig, vb: VarBuilder) -> candle_core::Result<DecoderModel> {
    DecoderModel::new(cfg.spec()?, vb)
}
