//! ModernBERT encoders (GTE-ModernBERT): pre-norm layers (the first without its attention
//! norm), one fused `Wqkv` projection, rotary positions with a base per layer type, alternating
//! attention (every `global_attn_every_n_layers`-th layer global, the others seeing keys at most
//! `local_attention / 2` positions away on either side), a GeGLU MLP (`Wi` holds the input and
//! the gate halves), LayerNorms and projections without biases unless the config asks, and a
//! final norm. Bidirectional over right-padded batches. Upstream:
//! `transformers/models/modernbert/modeling_modernbert.py`.

use candle_core::{D, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::Backbone;
use super::decoder::{Rope, fused_rotary_attention, rope_parameters_for, rope_theta};
use crate::kernels::ops::{AttnMask, gelu_erf};

/// The fields of a ModernBERT `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct ModernBertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width (each half of `Wi`).
    pub intermediate_size: usize,
    /// Layers.
    pub num_hidden_layers: usize,
    /// Attention heads.
    pub num_attention_heads: usize,
    /// LayerNorm epsilon.
    #[serde(default = "eps")]
    pub norm_eps: f64,
    /// LayerNorms carry a bias.
    #[serde(default)]
    pub norm_bias: bool,
    /// Attention projections carry biases.
    #[serde(default)]
    pub attention_bias: bool,
    /// MLP projections carry biases.
    #[serde(default)]
    pub mlp_bias: bool,
    /// MLP activation (`gelu`: erf; `gelu_pytorch_tanh` / `gelu_new`: tanh form).
    #[serde(default = "gelu")]
    pub hidden_activation: String,
    /// Total span of a local layer's window.
    #[serde(default = "local_attention")]
    pub local_attention: usize,
    /// Every this-many-th layer (from the first) is global when `layer_types` is absent.
    #[serde(default = "every")]
    pub global_attn_every_n_layers: usize,
    /// Attention kind per layer (newer configs).
    pub layer_types: Option<Vec<String>>,
    /// RoPE base of the global layers (older configs).
    pub global_rope_theta: Option<f64>,
    /// RoPE base of the local layers (older configs).
    pub local_rope_theta: Option<f64>,
    /// RoPE settings per layer type (newer configs).
    pub rope_parameters: Option<serde_json::Value>,
}

fn eps() -> f64 {
    1e-5
}
fn gelu() -> String {
    "gelu".to_string()
}
fn local_attention() -> usize {
    128
}
fn every() -> usize {
    3
}

impl ModernBertConfig {
    /// Whether each layer is global, from `layer_types` or the every-n rule.
    fn global_layers(&self) -> candle_core::Result<Vec<bool>> {
        match &self.layer_types {
            Some(types) => {
                if types.len() != self.num_hidden_layers {
                    candle_core::bail!(
                        "layer_types lists {} layers, expected {}",
                        types.len(),
                        self.num_hidden_layers
                    );
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        "full_attention" => Ok(true),
                        "sliding_attention" => Ok(false),
                        other => candle_core::bail!("unsupported layer type '{other}'"),
                    })
                    .collect()
            }
            None => {
                let every = self.global_attn_every_n_layers.max(1);
                Ok((0..self.num_hidden_layers)
                    .map(|i| i.is_multiple_of(every))
                    .collect())
            }
        }
    }

    /// The RoPE bases (global, local) from either config layout.
    fn rope_bases(&self) -> candle_core::Result<(f64, f64)> {
        let per_type = |kind| rope_parameters_for(self.rope_parameters.as_ref(), kind);
        let global = rope_theta(
            self.global_rope_theta,
            per_type("full_attention")?.as_ref(),
            None,
            160_000.0,
        )?;
        let local = rope_theta(
            self.local_rope_theta,
            per_type("sliding_attention")?.as_ref(),
            None,
            10_000.0,
        )?;
        Ok((global, local))
    }
}

fn layer_norm(cfg: &ModernBertConfig, vb: VarBuilder) -> candle_core::Result<LayerNorm> {
    let h = cfg.hidden_size;
    if cfg.norm_bias {
        candle_nn::layer_norm(h, cfg.norm_eps, vb)
    } else {
        Ok(LayerNorm::new_no_bias(vb.get(h, "weight")?, cfg.norm_eps))
    }
}

fn linear(
    inputs: usize,
    outputs: usize,
    bias: bool,
    vb: VarBuilder,
) -> candle_core::Result<Linear> {
    if bias {
        candle_nn::linear(inputs, outputs, vb)
    } else {
        candle_nn::linear_no_bias(inputs, outputs, vb)
    }
}

struct Layer {
    /// `None` for the first layer (its input is the normed embeddings).
    attn_norm: Option<LayerNorm>,
    qkv: Linear,
    out: Linear,
    mlp_norm: LayerNorm,
    wi: Linear,
    wo: Linear,
    global: bool,
}

/// A ModernBERT encoder.
pub struct ModernBertModel {
    embed: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    final_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
    intermediate: usize,
    tanh_gelu: bool,
    /// Keys a local layer sees on each side, plus one (the exclusive bound of [`AttnMask`]).
    local_window: usize,
    global_theta: f64,
    local_theta: f64,
    hidden_size: usize,
}

impl ModernBertModel {
    /// Builds the model from `vb` (weights at the root or under `model.`).
    pub fn load(cfg: &ModernBertConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        let heads = cfg.num_attention_heads;
        if heads == 0 || !h.is_multiple_of(heads) || !(h / heads).is_multiple_of(2) {
            candle_core::bail!("hidden_size is not a multiple of an even head size");
        }
        let vb = if vb.contains_tensor("model.embeddings.tok_embeddings.weight") {
            vb.pp("model")
        } else {
            vb
        };
        let global = cfg.global_layers()?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|n| {
                let vb = vb.pp("layers").pp(n);
                Ok(Layer {
                    attn_norm: if n == 0 {
                        None
                    } else {
                        Some(layer_norm(cfg, vb.pp("attn_norm"))?)
                    },
                    qkv: linear(h, 3 * h, cfg.attention_bias, vb.pp("attn").pp("Wqkv"))?,
                    out: linear(h, h, cfg.attention_bias, vb.pp("attn").pp("Wo"))?,
                    mlp_norm: layer_norm(cfg, vb.pp("mlp_norm"))?,
                    wi: linear(h, 2 * i, cfg.mlp_bias, vb.pp("mlp").pp("Wi"))?,
                    wo: linear(i, h, cfg.mlp_bias, vb.pp("mlp").pp("Wo"))?,
                    global: global[n],
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let (global_theta, local_theta) = cfg.rope_bases()?;
        let tanh_gelu = match cfg.hidden_activation.as_str() {
            "gelu" => false,
            "gelu_pytorch_tanh" | "gelu_new" => true,
            other => candle_core::bail!("hidden_activation '{other}' is not supported"),
        };
        Ok(Self {
            embed: candle_nn::embedding(
                cfg.vocab_size,
                h,
                vb.pp("embeddings").pp("tok_embeddings"),
            )?,
            embed_norm: layer_norm(cfg, vb.pp("embeddings").pp("norm"))?,
            layers,
            final_norm: layer_norm(cfg, vb.pp("final_norm"))?,
            heads,
            head_dim: h / heads,
            intermediate: i,
            tanh_gelu,
            local_window: cfg.local_attention / 2 + 1,
            global_theta,
            local_theta,
            hidden_size: h,
        })
    }

    fn mlp(&self, layer: &Layer, x: &Tensor) -> candle_core::Result<Tensor> {
        let both = layer.wi.forward(x)?;
        let input = both.narrow(D::Minus1, 0, self.intermediate)?;
        let gate = both.narrow(D::Minus1, self.intermediate, self.intermediate)?;
        let act = if self.tanh_gelu {
            input.gelu()?
        } else {
            gelu_erf(&input)?
        };
        layer.wo.forward(&(act * gate)?)
    }
}

impl Backbone for ModernBertModel {
    fn forward(&self, input_ids: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let dev = input_ids.device();
        let mut x = self.embed_norm.forward(&self.embed.forward(input_ids)?)?;
        let dtype = x.dtype();
        let global_rope = Rope::new(self.head_dim, self.global_theta, t, dtype, dev)?;
        let local_rope = Rope::new(self.head_dim, self.local_theta, t, dtype, dev)?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        for layer in &self.layers {
            let mask = AttnMask {
                key_lengths: lengths.to_vec(),
                query_len: t,
                causal: false,
                window: (!layer.global).then_some(self.local_window),
                scale,
                softcap: None,
            };
            let rope = if layer.global {
                &global_rope
            } else {
                &local_rope
            };
            let normed = match &layer.attn_norm {
                Some(norm) => norm.forward(&x)?,
                None => x.clone(),
            };
            x = (&x
                + fused_rotary_attention(
                    &layer.qkv,
                    &layer.out,
                    &normed,
                    (self.heads, self.head_dim),
                    rope,
                    &mask,
                )?)?;
            x = (&x + self.mlp(layer, &layer.mlp_norm.forward(&x)?)?)?;
        }
        self.final_norm.forward(&x)
    }

    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
}
