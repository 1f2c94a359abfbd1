//! BERT-family encoders (all-MiniLM, BGE, E5) and XLM-RoBERTa (BGE-M3, bge-reranker):
//! bidirectional self-attention over right-padded batches, returning every token's final hidden
//! state. Follows the tensor names of Hugging Face `BertModel` / `XLMRobertaModel` checkpoints
//! (with or without a `bert.` / `roberta.` prefix); pooling lives in [`crate::embed::pooling`].
//!
//! RoBERTa differs from BERT only in its embeddings: positions count from `padding_idx + 1`
//! (transformers' `create_position_ids_from_input_ids`; right padding makes real tokens
//! `padding_idx + 1 + i`) and there is a single segment.
//!
//! Paper: Devlin et al., *BERT* (2019); upstream: `transformers/models/bert/modeling_bert.py`,
//! `transformers/models/xlm_roberta/modeling_xlm_roberta.py`.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::Backbone;
use crate::embed::kernels::bert_layer::{CpuBertLayer, GeluKind};
use crate::embed::kernels::ops::{AttnMask, attention_probs, gelu_erf};

/// The fields of a BERT `config.json` the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct BertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// Transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Feed-forward width.
    pub intermediate_size: usize,
    /// Learned absolute positions.
    pub max_position_embeddings: usize,
    /// Segment vocabulary (2 for BERT; only segment 0 is used).
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Feed-forward activation: `gelu` (erf) or `gelu_new` / `gelu_pytorch_tanh` (tanh form).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Only `absolute` is supported.
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
    /// Padding token id (RoBERTa positions start after it).
    #[serde(default)]
    pub pad_token_id: Option<usize>,
}

fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_act() -> String {
    "gelu".to_string()
}
fn default_position_type() -> String {
    "absolute".to_string()
}

struct Embeddings {
    word: Embedding,
    position: Embedding,
    token_type: Embedding,
    norm: LayerNorm,
    /// First position id (0 for BERT, `padding_idx + 1` for RoBERTa).
    position_offset: usize,
}

impl Embeddings {
    fn new(cfg: &BertConfig, vb: VarBuilder, position_offset: usize) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        Ok(Self {
            position_offset,
            word: candle_nn::embedding(cfg.vocab_size, h, vb.pp("word_embeddings"))?,
            position: candle_nn::embedding(
                cfg.max_position_embeddings,
                h,
                vb.pp("position_embeddings"),
            )?,
            token_type: candle_nn::embedding(
                cfg.type_vocab_size,
                h,
                vb.pp("token_type_embeddings"),
            )?,
            norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, vb.pp("LayerNorm"))?,
        })
    }

    /// `token_type_ids`: `[batch, seq]` segment ids, or `None` for segment 0 everywhere.
    fn forward(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
    ) -> candle_core::Result<Tensor> {
        let (_, seq) = input_ids.dims2()?;
        let dev = input_ids.device();
        let first = self.position_offset as u32;
        let positions = Tensor::arange(first, first + seq as u32, dev)?;
        let x = self
            .word
            .forward(input_ids)?
            .broadcast_add(&self.position.forward(&positions)?)?;
        let x = match token_type_ids {
            Some(types) => (x + self.token_type.forward(types)?)?,
            None => {
                let zeros = Tensor::zeros(seq, candle_core::DType::U32, dev)?;
                x.broadcast_add(&self.token_type.forward(&zeros)?)?
            }
        };
        self.norm.forward(&x)
    }
}

struct Layer {
    query: Linear,
    key: Linear,
    value: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    up: Linear,
    down: Linear,
    out_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
    tanh_gelu: bool,
    /// The same weights packed for the CPU f32 fast path (when they live there).
    cpu: Option<CpuBertLayer>,
}

impl Layer {
    fn new(cfg: &BertConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let attn = vb.pp("attention");
        let on_cpu_f32 = matches!(vb.device(), Device::Cpu) && vb.dtype() == DType::F32;
        let mut layer = Self {
            query: candle_nn::linear(h, h, attn.pp("self").pp("query"))?,
            key: candle_nn::linear(h, h, attn.pp("self").pp("key"))?,
            value: candle_nn::linear(h, h, attn.pp("self").pp("value"))?,
            attn_out: candle_nn::linear(h, h, attn.pp("output").pp("dense"))?,
            attn_norm: candle_nn::layer_norm(
                h,
                cfg.layer_norm_eps,
                attn.pp("output").pp("LayerNorm"),
            )?,
            up: candle_nn::linear(h, cfg.intermediate_size, vb.pp("intermediate").pp("dense"))?,
            down: candle_nn::linear(cfg.intermediate_size, h, vb.pp("output").pp("dense"))?,
            out_norm: candle_nn::layer_norm(
                h,
                cfg.layer_norm_eps,
                vb.pp("output").pp("LayerNorm"),
            )?,
            heads: cfg.num_attention_heads,
            head_dim: h / cfg.num_attention_heads,
            tanh_gelu: cfg.hidden_act != "gelu",
            cpu: None,
        };
        if on_cpu_f32 {
            let gelu = if layer.tanh_gelu {
                GeluKind::Tanh
            } else {
                GeluKind::Erf
            };
            layer.cpu = Some(CpuBertLayer::new(
                [
                    &layer.query,
                    &layer.key,
                    &layer.value,
                    &layer.attn_out,
                    &layer.up,
                    &layer.down,
                ],
                layer.heads,
                gelu,
            )?);
        }
        Ok(layer)
    }

    fn split_heads(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        x.reshape((b, t, self.heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    /// `lengths`: real tokens per row (right padding).
    fn forward(&self, x: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        if let Some(cpu) = self.cpu.as_ref().filter(|_| CpuBertLayer::accepts(x)) {
            return cpu.forward(x, lengths, &self.attn_norm, &self.out_norm);
        }
        let (b, t, h) = x.dims3()?;
        let q = self.split_heads(&self.query.forward(x)?)?;
        let k = self.split_heads(&self.key.forward(x)?)?;
        let v = self.split_heads(&self.value.forward(x)?)?;
        let mask = AttnMask {
            key_lengths: lengths.to_vec(),
            query_len: t,
            causal: false,
            window: None,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            softcap: None,
        };
        let probs = attention_probs(&q.matmul(&k.t()?)?, &mask)?.to_dtype(v.dtype())?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?;
        let x = self
            .attn_norm
            .forward(&(self.attn_out.forward(&ctx)? + x)?)?;
        let up = self.up.forward(&x)?;
        let up = if self.tanh_gelu {
            up.gelu()?
        } else {
            gelu_erf(&up)?
        };
        self.out_norm.forward(&(self.down.forward(&up)? + x)?)
    }
}

/// Which embedding layout a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BertFlavor {
    /// BERT: positions from 0, weights at the root or under `bert.`.
    Bert,
    /// (XLM-)RoBERTa: positions from `pad_token_id + 1`, weights at the root or under `roberta.`.
    Roberta,
}

/// A BERT encoder: embeddings then `num_hidden_layers` post-norm transformer layers.
pub struct BertModel {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    hidden_size: usize,
    max_length: usize,
}

impl BertModel {
    /// Builds a model of `flavor` from `vb` (weights at the root or under the flavor's prefix).
    pub fn load(cfg: &BertConfig, vb: VarBuilder, flavor: BertFlavor) -> candle_core::Result<Self> {
        if cfg.position_embedding_type != "absolute" {
            candle_core::bail!(
                "position_embedding_type '{}' is not supported (only absolute)",
                cfg.position_embedding_type
            );
        }
        if cfg.num_attention_heads == 0 || !cfg.hidden_size.is_multiple_of(cfg.num_attention_heads)
        {
            candle_core::bail!("hidden_size is not a multiple of num_attention_heads");
        }
        let (prefix, position_offset) = match flavor {
            BertFlavor::Bert => ("bert", 0),
            BertFlavor::Roberta => ("roberta", cfg.pad_token_id.unwrap_or(1) + 1),
        };
        if position_offset >= cfg.max_position_embeddings {
            candle_core::bail!("max_position_embeddings leaves no room after the padding offset");
        }
        let vb = if vb.contains_tensor(&format!("{prefix}.embeddings.word_embeddings.weight")) {
            vb.pp(prefix)
        } else {
            vb
        };
        let embeddings = Embeddings::new(cfg, vb.pp("embeddings"), position_offset)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| Layer::new(cfg, vb.pp("encoder").pp("layer").pp(i)))
            .collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Self {
            embeddings,
            layers,
            hidden_size: cfg.hidden_size,
            max_length: cfg.max_position_embeddings - position_offset,
        })
    }

    /// Longest input the position table allows.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// All final hidden states `[batch, seq, hidden]` of right-padded `input_ids` with segment
    /// ids `token_type_ids` (`None`: all 0); row `i` holds `lengths[i]` real tokens.
    pub fn forward_typed(
        &self,
        input_ids: &Tensor,
        token_type_ids: Option<&Tensor>,
        lengths: &[usize],
    ) -> candle_core::Result<Tensor> {
        let mut x = self.embeddings.forward(input_ids, token_type_ids)?;
        for layer in &self.layers {
            x = layer.forward(&x, lengths)?;
        }
        Ok(x)
    }
}

impl Backbone for BertModel {
    fn forward(&self, input_ids: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        self.forward_typed(input_ids, None, lengths)
    }

    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A tiny random BERT (fixed seed through fastrand) as named tensors.
    fn random_weights(cfg: &BertConfig) -> HashMap<String, Tensor> {
        let mut rng = fastrand::Rng::with_seed(11);
        let mut tensors = HashMap::new();
        let mut add = |name: String, shape: &[usize]| {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.5) * 0.4).collect();
            let t = Tensor::from_vec(data, shape, &Device::Cpu).unwrap();
            tensors.insert(name, t);
        };
        let (h, i) = (cfg.hidden_size, cfg.intermediate_size);
        add(
            "embeddings.word_embeddings.weight".into(),
            &[cfg.vocab_size, h],
        );
        add(
            "embeddings.position_embeddings.weight".into(),
            &[cfg.max_position_embeddings, h],
        );
        add("embeddings.token_type_embeddings.weight".into(), &[2, h]);
        add("embeddings.LayerNorm.weight".into(), &[h]);
        add("embeddings.LayerNorm.bias".into(), &[h]);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            for (name, out, inp) in [
                ("attention.self.query", h, h),
                ("attention.self.key", h, h),
                ("attention.self.value", h, h),
                ("attention.output.dense", h, h),
                ("intermediate.dense", i, h),
                ("output.dense", h, i),
            ] {
                add(format!("{p}.{name}.weight"), &[out, inp]);
                add(format!("{p}.{name}.bias"), &[out]);
            }
            for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
                add(format!("{p}.{norm}.weight"), &[h]);
                add(format!("{p}.{norm}.bias"), &[h]);
            }
        }
        tensors
    }

    /// The CPU fast path equals the plain candle ops on every real position, with padding and
    /// both GELUs.
    #[test]
    fn cpu_fast_path_matches_candle_ops() {
        for act in ["gelu", "gelu_new"] {
            let cfg: BertConfig = serde_json::from_value(serde_json::json!({
                "vocab_size": 50, "hidden_size": 24, "num_hidden_layers": 2,
                "num_attention_heads": 3, "intermediate_size": 40,
                "max_position_embeddings": 32, "hidden_act": act,
            }))
            .unwrap();
            let weights = random_weights(&cfg);
            let vb = VarBuilder::from_tensors(weights, DType::F32, &Device::Cpu);
            let fast = BertModel::load(&cfg, vb.clone(), BertFlavor::Bert).unwrap();
            let mut plain = BertModel::load(&cfg, vb, BertFlavor::Bert).unwrap();
            for layer in &mut plain.layers {
                layer.cpu = None;
            }
            assert!(fast.layers.iter().all(|l| l.cpu.is_some()));
            let lengths = [9usize, 4, 1];
            let ids: Vec<u32> = (0..27u32).map(|i| (i * 7 + 3) % 50).collect();
            let ids = Tensor::from_vec(ids, (3, 9), &Device::Cpu).unwrap();
            let a = fast
                .forward(&ids, &lengths)
                .unwrap()
                .to_vec3::<f32>()
                .unwrap();
            let b = plain
                .forward(&ids, &lengths)
                .unwrap()
                .to_vec3::<f32>()
                .unwrap();
            for (row, &len) in lengths.iter().enumerate() {
                for pos in 0..len {
                    for (x, y) in a[row][pos].iter().zip(&b[row][pos]) {
                        assert!(
                            (x - y).abs() < 1e-5,
                            "{act} row {row} pos {pos}: {x} vs {y}"
                        );
                    }
                }
            }
        }
    }
}
