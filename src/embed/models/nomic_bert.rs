//! nomic-bert encoders (nomic-embed-text, CodeRankEmbed): BERT's post-norm layers with rotary
//! positions instead of a position table (rotate-half convention), one fused `Wqkv` projection,
//! a SwiGLU MLP (`fc2(fc11(x) * silu(fc12(x)))`) and no projection biases. Bidirectional over
//! right-padded batches; every token is in segment 0. Tensor names are the Hugging Face
//! checkpoint's (`embeddings.word_embeddings`, `emb_ln`, `encoder.layers.N.attn.Wqkv`, ...); a
//! GGUF file's llama.cpp names are mapped onto them by `embed::gguf`. Upstream: nomic-ai's
//! `modeling_hf_nomic_bert.py` (contrastors), llama.cpp's `nomic-bert` graph.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::decoder::{Rope, fused_rotary_attention};
use super::{Backbone, QuantizedLinears};
use crate::kernels::bert_layer::{CpuBertLayer, RotaryTable};
use crate::kernels::ops::{AttnMask, silu_mul};

/// The fields of a nomic-bert `config.json` (GPT-2-style names) the forward pass needs.
#[derive(Debug, Clone, Deserialize)]
pub struct NomicBertConfig {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub n_embd: usize,
    /// Layers.
    pub n_layer: usize,
    /// Attention heads.
    pub n_head: usize,
    /// MLP width (`fc11` and `fc12` each).
    pub n_inner: usize,
    /// Segment vocabulary (only segment 0 is used).
    #[serde(default = "type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "eps")]
    pub layer_norm_epsilon: f64,
    /// RoPE base.
    #[serde(default = "rotary_base")]
    pub rotary_emb_base: f64,
    /// Share of each head rotated (only 1.0 is supported).
    #[serde(default = "one")]
    pub rotary_emb_fraction: f64,
    /// Interleaved (GPT-J) rotation instead of rotate-half (not supported).
    #[serde(default)]
    pub rotary_emb_interleaved: bool,
    /// Pre-norm layers (not supported: nomic-embed and CodeRankEmbed are post-norm).
    #[serde(default)]
    pub prenorm: bool,
    /// MLP activation (only `swiglu`).
    #[serde(default = "swiglu")]
    pub activation_function: String,
    /// `Wqkv` carries a bias.
    #[serde(default)]
    pub qkv_proj_bias: bool,
    /// `fc11` / `fc12` carry biases.
    #[serde(default)]
    pub mlp_fc1_bias: bool,
    /// `fc2` carries a bias.
    #[serde(default)]
    pub mlp_fc2_bias: bool,
}

fn type_vocab() -> usize {
    2
}
fn eps() -> f64 {
    1e-12
}
fn rotary_base() -> f64 {
    10_000.0
}
fn one() -> f64 {
    1.0
}
fn swiglu() -> String {
    "swiglu".to_string()
}

struct Layer {
    projections: Projections,
    norm1: LayerNorm,
    norm2: LayerNorm,
}

/// A layer's projections: candle's layers, or (on the CPU in f32) only the fused layer's
/// packing of them, so that the model holds one copy of its weights.
enum Projections {
    Candle {
        qkv: Linear,
        out: Linear,
        up: Linear,
        gate: Linear,
        down: Linear,
    },
    Fused(Box<CpuBertLayer>),
}

/// A nomic-bert encoder.
pub struct NomicBertModel {
    word: Embedding,
    /// Segment 0's embedding, added to every token.
    segment: Tensor,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    heads: usize,
    head_dim: usize,
    theta: f64,
    hidden_size: usize,
}

impl NomicBertModel {
    /// Builds the model from `vb`; configurations outside what the checkpoints use (pre-norm,
    /// partial or interleaved rotation, another activation) are refused.
    /// Weights a GGUF file keeps quantized come from `quantized`.
    pub fn load(
        cfg: &NomicBertConfig,
        vb: VarBuilder,
        quantized: &QuantizedLinears,
    ) -> candle_core::Result<Self> {
        let fused = matches!(vb.device(), Device::Cpu) && vb.dtype() == DType::F32;
        Self::build(cfg, vb, quantized, fused)
    }

    /// The model, its layers fused for the CPU where `fused`.
    fn build(
        cfg: &NomicBertConfig,
        vb: VarBuilder,
        quantized: &QuantizedLinears,
        fused: bool,
    ) -> candle_core::Result<Self> {
        let (h, heads) = (cfg.n_embd, cfg.n_head);
        if heads == 0 || !h.is_multiple_of(heads) || !(h / heads).is_multiple_of(2) {
            candle_core::bail!("n_embd is not a multiple of an even head size");
        }
        if cfg.prenorm {
            candle_core::bail!("pre-norm nomic-bert layers are not supported");
        }
        if cfg.rotary_emb_fraction != 1.0 || cfg.rotary_emb_interleaved {
            candle_core::bail!("only full, rotate-half rotary embeddings are supported");
        }
        if cfg.activation_function != "swiglu" {
            candle_core::bail!(
                "activation_function '{}' is not supported (only swiglu)",
                cfg.activation_function
            );
        }
        let i = cfg.n_inner;
        let norm = |vb: VarBuilder| candle_nn::layer_norm(h, cfg.layer_norm_epsilon, vb);
        let layers = (0..cfg.n_layer)
            .map(|n| {
                let vb = vb.pp("encoder").pp("layers").pp(n);
                let (attn, mlp) = (vb.pp("attn"), vb.pp("mlp"));
                let [qkv, out, up, gate, down] = [
                    attn.pp("Wqkv"),
                    attn.pp("out_proj"),
                    mlp.pp("fc11"),
                    mlp.pp("fc12"),
                    mlp.pp("fc2"),
                ];
                let (qkv_bias, fc1_bias) = (cfg.qkv_proj_bias, cfg.mlp_fc1_bias);
                let projections = if fused {
                    let source = |i, o, bias, vb| quantized.source(i, o, bias, vb);
                    Projections::Fused(Box::new(CpuBertLayer::with_swiglu(
                        source(h, 3 * h, qkv_bias, qkv)?,
                        source(h, h, qkv_bias, out)?,
                        [
                            source(h, i, fc1_bias, gate)?,
                            source(h, i, fc1_bias, up)?,
                            source(i, h, cfg.mlp_fc2_bias, down)?,
                        ],
                        heads,
                    )?))
                } else {
                    let linear = |i, o, bias, vb| quantized.linear(i, o, bias, vb);
                    Projections::Candle {
                        qkv: linear(h, 3 * h, qkv_bias, qkv)?,
                        out: linear(h, h, qkv_bias, out)?,
                        up: linear(h, i, fc1_bias, up)?,
                        gate: linear(h, i, fc1_bias, gate)?,
                        down: linear(i, h, cfg.mlp_fc2_bias, down)?,
                    }
                };
                Ok(Layer {
                    projections,
                    norm1: norm(vb.pp("norm1"))?,
                    norm2: norm(vb.pp("norm2"))?,
                })
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let embeddings = vb.pp("embeddings");
        let segments = embeddings
            .pp("token_type_embeddings")
            .get((cfg.type_vocab_size, h), "weight")?;
        Ok(Self {
            word: candle_nn::embedding(cfg.vocab_size, h, embeddings.pp("word_embeddings"))?,
            segment: segments.narrow(0, 0, 1)?,
            embed_norm: norm(vb.pp("emb_ln"))?,
            layers,
            heads,
            head_dim: h / heads,
            theta: cfg.rotary_emb_base,
            hidden_size: h,
        })
    }
}

impl Backbone for NomicBertModel {
    fn forward(&self, input_ids: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let words = self.word.forward(input_ids)?;
        let mut x = self
            .embed_norm
            .forward(&words.broadcast_add(&self.segment)?)?;
        let fused = |l: &Layer| matches!(l.projections, Projections::Fused(_));
        if self.layers.iter().any(fused) {
            if !CpuBertLayer::accepts(&x) {
                candle_core::bail!("layers packed for the CPU in f32 got other input");
            }
            let table = RotaryTable::new(self.head_dim, self.theta, t);
            for layer in &self.layers {
                let Projections::Fused(cpu) = &layer.projections else {
                    candle_core::bail!("a model with fused and candle layers");
                };
                x = cpu.forward(
                    &x,
                    lengths,
                    None,
                    Some(&table),
                    [&layer.norm1, &layer.norm2],
                )?;
            }
            return Ok(x);
        }
        let rope = Rope::new(self.head_dim, self.theta, t, x.dtype(), input_ids.device())?;
        let mask = AttnMask {
            key_lengths: lengths.to_vec(),
            query_len: t,
            causal: false,
            window: None,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            softcap: None,
        };
        for layer in &self.layers {
            let Projections::Candle {
                qkv,
                out,
                up,
                gate,
                down,
            } = &layer.projections
            else {
                candle_core::bail!("a model with fused and candle layers");
            };
            let attended =
                fused_rotary_attention(qkv, out, &x, (self.heads, self.head_dim), &rope, &mask)?;
            x = layer.norm1.forward(&(&x + attended)?)?;
            let mlp = down.forward(&silu_mul(&gate.forward(&x)?, &up.forward(&x)?)?)?;
            x = layer.norm2.forward(&(&x + mlp)?)?;
        }
        Ok(x)
    }

    fn hidden_size(&self) -> usize {
        self.hidden_size
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A tiny random nomic-bert (fixed seed), with the CPU fast path and with it switched off.
    fn fast_and_plain(cfg: &NomicBertConfig) -> (NomicBertModel, NomicBertModel) {
        let mut rng = fastrand::Rng::with_seed(5);
        let mut tensors = HashMap::new();
        let mut add = |name: String, shape: &[usize]| {
            let n: usize = shape.iter().product();
            let data: Vec<f32> = (0..n).map(|_| (rng.f32() - 0.5) * 0.4).collect();
            tensors.insert(name, Tensor::from_vec(data, shape, &Device::Cpu).unwrap());
        };
        let (h, i) = (cfg.n_embd, cfg.n_inner);
        add(
            "embeddings.word_embeddings.weight".into(),
            &[cfg.vocab_size, h],
        );
        add("embeddings.token_type_embeddings.weight".into(), &[2, h]);
        for part in ["weight", "bias"] {
            add(format!("emb_ln.{part}"), &[h]);
        }
        for l in 0..cfg.n_layer {
            let p = format!("encoder.layers.{l}");
            for (name, out, inp) in [
                ("attn.Wqkv", 3 * h, h),
                ("attn.out_proj", h, h),
                ("mlp.fc11", i, h),
                ("mlp.fc12", i, h),
                ("mlp.fc2", h, i),
            ] {
                add(format!("{p}.{name}.weight"), &[out, inp]);
            }
            for norm in ["norm1", "norm2"] {
                for part in ["weight", "bias"] {
                    add(format!("{p}.{norm}.{part}"), &[h]);
                }
            }
        }
        let vb = VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu);
        let none = QuantizedLinears::default();
        let fast = NomicBertModel::load(cfg, vb.clone(), &none).unwrap();
        let plain = NomicBertModel::build(cfg, vb, &none, false).unwrap();
        let fused = |l: &Layer| matches!(l.projections, Projections::Fused(_));
        assert!(fast.layers.iter().all(fused) && !plain.layers.iter().any(fused));
        (fast, plain)
    }

    /// The fused CPU layer (RoPE inside the Q|K|V projection, SwiGLU inside the up projection)
    /// equals candle's ops on every real position of a padded batch.
    #[test]
    fn cpu_fast_path_matches_candle_ops() {
        let cfg: NomicBertConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 50, "n_embd": 24, "n_layer": 2, "n_head": 3, "n_inner": 40,
            "rotary_emb_base": 1000.0,
        }))
        .unwrap();
        let (fast, plain) = fast_and_plain(&cfg);
        let lengths = [11usize, 5, 1];
        let ids: Vec<u32> = (0..33u32).map(|i| (i * 7 + 3) % 50).collect();
        let ids = Tensor::from_vec(ids, (3, 11), &Device::Cpu).unwrap();
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
                    assert!((x - y).abs() < 1e-5, "row {row} pos {pos}: {x} vs {y}");
                }
            }
        }
    }

    /// Checkpoint variants the forward pass does not implement are refused at load.
    #[test]
    fn unsupported_variants_are_refused() {
        for (field, value) in [
            ("prenorm", serde_json::json!(true)),
            ("rotary_emb_fraction", serde_json::json!(0.5)),
            ("rotary_emb_interleaved", serde_json::json!(true)),
            ("activation_function", serde_json::json!("gelu")),
        ] {
            let mut config = serde_json::json!({
                "vocab_size": 50, "n_embd": 24, "n_layer": 1, "n_head": 3, "n_inner": 40,
            });
            config[field] = value;
            let cfg: NomicBertConfig = serde_json::from_value(config).unwrap();
            let vb = VarBuilder::zeros(DType::F32, &Device::Cpu);
            assert!(
                NomicBertModel::load(&cfg, vb, &QuantizedLinears::default()).is_err(),
                "{field}"
            );
        }
    }
}
