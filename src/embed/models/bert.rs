//! BERT-family encoders (all-MiniLM, BGE, E5) and XLM-RoBERTa (BGE-M3, bge-reranker):
//! bidirectional self-attention over right-padded batches, returning every token's final hidden
//! state. Follows the tensor names of Hugging Face `BertModel` / `XLMRobertaModel` checkpoints
//! (with or without a `bert.` / `roberta.` prefix); pooling lives in [`crate::embed::pooling`].
//!
//! RoBERTa differs from BERT only in its embeddings: positions count from `padding_idx + 1`
//! (transformers' `create_position_ids_from_input_ids`; right padding makes real tokens
//! `padding_idx + 1 + i`) and there is a single segment. MPNet (all-mpnet-base-v2) has
//! RoBERTa's embeddings without segments, other tensor names, and one learned relative position
//! bias ([`RelativePositionBias`]) added to every layer's attention logits.
//!
//! Papers: Devlin et al., *BERT* (2019); Song et al., *MPNet* (2020). Upstream:
//! `transformers/models/bert/modeling_bert.py`, `xlm_roberta/modeling_xlm_roberta.py`,
//! `mpnet/modeling_mpnet.py`.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Embedding, LayerNorm, Linear, VarBuilder};
use serde::Deserialize;

use super::{Backbone, QuantizedLinears};
use crate::kernels::bert_layer::CpuBertLayer;
use crate::kernels::ops::{AttnMask, GeluKind, attention_probs, gelu_erf};

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
    /// MPNet: buckets of the relative position bias.
    #[serde(default = "default_relative_buckets")]
    pub relative_attention_num_buckets: usize,
}

fn default_relative_buckets() -> usize {
    32
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
    /// Segment embeddings (none in MPNet).
    token_type: Option<Embedding>,
    norm: LayerNorm,
    /// First position id (0 for BERT, `padding_idx + 1` for RoBERTa).
    position_offset: usize,
}

impl Embeddings {
    fn new(
        cfg: &BertConfig,
        vb: VarBuilder,
        position_offset: usize,
        segments: bool,
    ) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let token_type = if segments {
            Some(candle_nn::embedding(
                cfg.type_vocab_size,
                h,
                vb.pp("token_type_embeddings"),
            )?)
        } else {
            None
        };
        Ok(Self {
            position_offset,
            word: candle_nn::embedding(cfg.vocab_size, h, vb.pp("word_embeddings"))?,
            position: candle_nn::embedding(
                cfg.max_position_embeddings,
                h,
                vb.pp("position_embeddings"),
            )?,
            token_type,
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
        let x = match (&self.token_type, token_type_ids) {
            (None, _) => x,
            (Some(table), Some(types)) => (x + table.forward(types)?)?,
            (Some(table), None) => {
                let zeros = Tensor::zeros(seq, candle_core::DType::U32, dev)?;
                x.broadcast_add(&table.forward(&zeros)?)?
            }
        };
        self.norm.forward(&x)
    }
}

struct Layer {
    projections: Projections,
    attn_norm: LayerNorm,
    out_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
    tanh_gelu: bool,
}

/// A layer's projections: candle's layers, or (on the CPU in f32) only the fused layer's
/// packing of them, so that the model holds one copy of its weights.
enum Projections {
    Candle {
        query: Linear,
        key: Linear,
        value: Linear,
        attn_out: Linear,
        up: Linear,
        down: Linear,
    },
    Fused(Box<CpuBertLayer>),
}

impl Layer {
    /// With `fused`, the projections are packed for the CPU fast path only.
    fn new(
        cfg: &BertConfig,
        vb: VarBuilder,
        flavor: BertFlavor,
        quantized: &QuantizedLinears,
        fused: bool,
    ) -> candle_core::Result<Self> {
        let h = cfg.hidden_size;
        let attn = vb.pp("attention");
        // [query, key, value, output] and the attention LayerNorm, as each checkpoint names them.
        let (names, attn_norm) = match flavor {
            BertFlavor::Bert | BertFlavor::Roberta => (
                [
                    attn.pp("self").pp("query"),
                    attn.pp("self").pp("key"),
                    attn.pp("self").pp("value"),
                    attn.pp("output").pp("dense"),
                ],
                attn.pp("output").pp("LayerNorm"),
            ),
            BertFlavor::MpNet => (
                ["q", "k", "v", "o"].map(|n| attn.pp("attn").pp(n)),
                attn.pp("LayerNorm"),
            ),
        };
        let [query, key, value, attn_out] = names;
        let (up, down) = (
            vb.pp("intermediate").pp("dense"),
            vb.pp("output").pp("dense"),
        );
        let inner = cfg.intermediate_size;
        let tanh_gelu = cfg.hidden_act != "gelu";
        let heads = cfg.num_attention_heads;
        let projections = if fused {
            let gelu = if tanh_gelu {
                GeluKind::Tanh
            } else {
                GeluKind::Erf
            };
            let source = |i, o, vb: VarBuilder| quantized.source(i, o, true, vb);
            Projections::Fused(Box::new(CpuBertLayer::new(
                [
                    source(h, h, query)?,
                    source(h, h, key)?,
                    source(h, h, value)?,
                    source(h, h, attn_out)?,
                    source(h, inner, up)?,
                    source(inner, h, down)?,
                ],
                heads,
                gelu,
            )?))
        } else {
            let linear = |i, o, vb: VarBuilder| quantized.linear(i, o, true, vb);
            Projections::Candle {
                query: linear(h, h, query)?,
                key: linear(h, h, key)?,
                value: linear(h, h, value)?,
                attn_out: linear(h, h, attn_out)?,
                up: linear(h, inner, up)?,
                down: linear(inner, h, down)?,
            }
        };
        Ok(Self {
            projections,
            attn_norm: candle_nn::layer_norm(h, cfg.layer_norm_eps, attn_norm)?,
            out_norm: candle_nn::layer_norm(
                h,
                cfg.layer_norm_eps,
                vb.pp("output").pp("LayerNorm"),
            )?,
            heads,
            head_dim: h / heads,
            tanh_gelu,
        })
    }

    fn split_heads(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        x.reshape((b, t, self.heads, self.head_dim))?
            .transpose(1, 2)?
            .contiguous()
    }

    /// `lengths`: real tokens per row (right padding); `bias`: the relative position bias of
    /// this batch's length, if the model has one.
    fn forward(
        &self,
        x: &Tensor,
        lengths: &[usize],
        bias: Option<&BatchBias>,
    ) -> candle_core::Result<Tensor> {
        let (query, key, value, attn_out, up, down) = match &self.projections {
            Projections::Fused(cpu) => {
                if !CpuBertLayer::accepts(x) {
                    candle_core::bail!("a layer packed for the CPU in f32 got other input");
                }
                let by_offset = bias.map(|b| b.by_offset.as_slice());
                return cpu.forward(
                    x,
                    lengths,
                    by_offset,
                    None,
                    [&self.attn_norm, &self.out_norm],
                );
            }
            Projections::Candle {
                query,
                key,
                value,
                attn_out,
                up,
                down,
            } => (query, key, value, attn_out, up, down),
        };
        let (b, t, h) = x.dims3()?;
        let q = self.split_heads(&query.forward(x)?)?;
        let k = self.split_heads(&key.forward(x)?)?;
        let v = self.split_heads(&value.forward(x)?)?;
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let mut logits = q.matmul(&k.t()?)?;
        if let Some(bias) = bias {
            let full = bias.full(self.heads, t, logits.device())?;
            let full = full.to_dtype(logits.dtype())?;
            logits = (logits * f64::from(scale))?.broadcast_add(&full)?;
        }
        let mask = AttnMask {
            key_lengths: lengths.to_vec(),
            query_len: t,
            causal: false,
            window: None,
            scale: if bias.is_some() { 1.0 } else { scale },
            softcap: None,
        };
        let probs = attention_probs(&logits, &mask)?.to_dtype(v.dtype())?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?;
        let x = self.attn_norm.forward(&(attn_out.forward(&ctx)? + x)?)?;
        let up = up.forward(&x)?;
        let up = if self.tanh_gelu {
            up.gelu()?
        } else {
            gelu_erf(&up)?
        };
        self.out_norm.forward(&(down.forward(&up)? + x)?)
    }
}

/// Which embedding layout a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BertFlavor {
    /// BERT: positions from 0, weights at the root or under `bert.`.
    Bert,
    /// (XLM-)RoBERTa: positions from `pad_token_id + 1`, weights at the root or under `roberta.`.
    Roberta,
    /// MPNet: RoBERTa's positions, no segments, a relative position bias; weights at the root
    /// or under `mpnet.`.
    MpNet,
}

/// MPNet's relative position bias: a learned `[buckets, heads]` table indexed by the bucket of
/// `key - query` (T5's bidirectional bucketing: exact up to 8 positions each way, then
/// logarithmic up to 128), shared by every layer.
struct RelativePositionBias {
    /// `[buckets, heads]`, row-major.
    table: Vec<f32>,
    buckets: usize,
    heads: usize,
}

/// The farthest relative position with a bucket of its own (transformers' `max_distance`).
const MPNET_MAX_DISTANCE: usize = 128;

impl RelativePositionBias {
    /// The bucket of `relative` = key position - query position, computed in f32 as
    /// transformers' `relative_position_bucket` does (so the boundaries agree).
    fn bucket(&self, relative: i64) -> usize {
        let half = self.buckets / 2;
        let n = -relative;
        let mut bucket = if n < 0 { half } else { 0 };
        let n = n.unsigned_abs() as usize;
        let max_exact = half / 2;
        bucket += if n < max_exact {
            n
        } else {
            let ratio = (n as f32 / max_exact as f32).ln()
                / ((MPNET_MAX_DISTANCE as f64 / max_exact as f64).ln() as f32)
                * (half - max_exact) as f32;
            (max_exact + ratio as usize).min(half - 1)
        };
        bucket
    }

    /// The bias for a batch of length `seq`: `[heads, 2 seq - 1]`, head `h`'s value for
    /// `key - query = d` at `h (2 seq - 1) + d + seq - 1`.
    fn for_length(&self, seq: usize) -> BatchBias {
        let width = (2 * seq).saturating_sub(1);
        let mut by_offset = vec![0f32; self.heads * width];
        for offset in 0..width {
            let bucket = self.bucket(offset as i64 - seq as i64 + 1);
            for head in 0..self.heads {
                by_offset[head * width + offset] = self.table[bucket * self.heads + head];
            }
        }
        BatchBias {
            by_offset,
            seq,
            full: std::sync::OnceLock::new(),
        }
    }
}

/// [`RelativePositionBias`] laid out for one batch length.
struct BatchBias {
    by_offset: Vec<f32>,
    seq: usize,
    /// `[1, heads, seq, seq]` for the tensor-op path, made on first use.
    full: std::sync::OnceLock<Tensor>,
}

impl BatchBias {
    fn full(&self, heads: usize, seq: usize, device: &Device) -> candle_core::Result<Tensor> {
        if let Some(t) = self.full.get() {
            return Ok(t.clone());
        }
        if seq != self.seq {
            candle_core::bail!("relative bias made for length {}, used at {seq}", self.seq);
        }
        let width = (2 * seq).saturating_sub(1);
        let mut data = Vec::with_capacity(heads * seq * seq);
        for head in 0..heads {
            for q in 0..seq {
                let row = &self.by_offset[head * width + seq - 1 - q..][..seq];
                data.extend_from_slice(row);
            }
        }
        let t = Tensor::from_vec(data, (1, heads, seq, seq), device)?;
        Ok(self.full.get_or_init(|| t).clone())
    }
}

/// A BERT encoder: embeddings then `num_hidden_layers` post-norm transformer layers.
pub struct BertModel {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    relative_bias: Option<RelativePositionBias>,
    hidden_size: usize,
    max_length: usize,
}

impl BertModel {
    /// Builds a model of `flavor` from `vb` (weights at the root or under the flavor's prefix).
    pub fn load(cfg: &BertConfig, vb: VarBuilder, flavor: BertFlavor) -> candle_core::Result<Self> {
        Self::load_with(cfg, vb, flavor, &QuantizedLinears::default())
    }

    /// [`BertModel::load`] with the layers' weights that a GGUF file keeps quantized.
    pub(crate) fn load_with(
        cfg: &BertConfig,
        vb: VarBuilder,
        flavor: BertFlavor,
        quantized: &QuantizedLinears,
    ) -> candle_core::Result<Self> {
        let fused = matches!(vb.device(), Device::Cpu) && vb.dtype() == DType::F32;
        Self::build(cfg, vb, flavor, quantized, fused)
    }

    /// The model, its layers fused for the CPU where `fused`.
    fn build(
        cfg: &BertConfig,
        vb: VarBuilder,
        flavor: BertFlavor,
        quantized: &QuantizedLinears,
        fused: bool,
    ) -> candle_core::Result<Self> {
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
            BertFlavor::MpNet => ("mpnet", cfg.pad_token_id.unwrap_or(1) + 1),
        };
        if position_offset >= cfg.max_position_embeddings {
            candle_core::bail!("max_position_embeddings leaves no room after the padding offset");
        }
        let vb = if vb.contains_tensor(&format!("{prefix}.embeddings.word_embeddings.weight")) {
            vb.pp(prefix)
        } else {
            vb
        };
        let segments = flavor != BertFlavor::MpNet;
        let embeddings = Embeddings::new(cfg, vb.pp("embeddings"), position_offset, segments)?;
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| {
                let vb = vb.pp("encoder").pp("layer").pp(i);
                Layer::new(cfg, vb, flavor, quantized, fused)
            })
            .collect::<candle_core::Result<Vec<_>>>()?;
        let relative_bias = if flavor == BertFlavor::MpNet {
            let buckets = cfg.relative_attention_num_buckets;
            if buckets < 4 {
                candle_core::bail!("relative_attention_num_buckets {buckets} is below 4");
            }
            let heads = cfg.num_attention_heads;
            let table = vb
                .pp("encoder")
                .pp("relative_attention_bias")
                .get((buckets, heads), "weight")?
                .to_dtype(DType::F32)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            Some(RelativePositionBias {
                table,
                buckets,
                heads,
            })
        } else {
            None
        };
        Ok(Self {
            embeddings,
            layers,
            relative_bias,
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
        let (_, seq) = input_ids.dims2()?;
        let bias = self.relative_bias.as_ref().map(|b| b.for_length(seq));
        for layer in &self.layers {
            x = layer.forward(&x, lengths, bias.as_ref())?;
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

    /// A tiny random model of `flavor`'s tensor names (fixed seed through fastrand).
    fn random_weights_of(cfg: &BertConfig, flavor: BertFlavor) -> HashMap<String, Tensor> {
        let mpnet = flavor == BertFlavor::MpNet;
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
        if !mpnet {
            add("embeddings.token_type_embeddings.weight".into(), &[2, h]);
        } else {
            add(
                "encoder.relative_attention_bias.weight".into(),
                &[cfg.relative_attention_num_buckets, cfg.num_attention_heads],
            );
        }
        add("embeddings.LayerNorm.weight".into(), &[h]);
        add("embeddings.LayerNorm.bias".into(), &[h]);
        for l in 0..cfg.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let (q, k, v, o, attn_norm) = if mpnet {
                (
                    "attention.attn.q",
                    "attention.attn.k",
                    "attention.attn.v",
                    "attention.attn.o",
                    "attention.LayerNorm",
                )
            } else {
                (
                    "attention.self.query",
                    "attention.self.key",
                    "attention.self.value",
                    "attention.output.dense",
                    "attention.output.LayerNorm",
                )
            };
            for (name, out, inp) in [
                (q, h, h),
                (k, h, h),
                (v, h, h),
                (o, h, h),
                ("intermediate.dense", i, h),
                ("output.dense", h, i),
            ] {
                add(format!("{p}.{name}.weight"), &[out, inp]);
                add(format!("{p}.{name}.bias"), &[out]);
            }
            for norm in [attn_norm, "output.LayerNorm"] {
                add(format!("{p}.{norm}.weight"), &[h]);
                add(format!("{p}.{norm}.bias"), &[h]);
            }
        }
        tensors
    }

    /// A model of `flavor` on `cfg`'s random weights twice: with the CPU fast path, and with it
    /// switched off (plain candle ops).
    fn fast_and_plain(cfg: &BertConfig, flavor: BertFlavor) -> (BertModel, BertModel) {
        let vb = VarBuilder::from_tensors(random_weights_of(cfg, flavor), DType::F32, &Device::Cpu);
        let none = QuantizedLinears::default();
        let fast = BertModel::load(cfg, vb.clone(), flavor).unwrap();
        let plain = BertModel::build(cfg, vb, flavor, &none, false).unwrap();
        let fused = |l: &Layer| matches!(l.projections, Projections::Fused(_));
        assert!(fast.layers.iter().all(fused) && !plain.layers.iter().any(fused));
        (fast, plain)
    }

    /// Both models' final states agree within 1e-5 on every real position of `ids`.
    fn assert_same_real_states(a: &BertModel, b: &BertModel, ids: &Tensor, lengths: &[usize]) {
        let a = a.forward(ids, lengths).unwrap().to_vec3::<f32>().unwrap();
        let b = b.forward(ids, lengths).unwrap().to_vec3::<f32>().unwrap();
        for (row, &len) in lengths.iter().enumerate() {
            for pos in 0..len {
                for (x, y) in a[row][pos].iter().zip(&b[row][pos]) {
                    assert!((x - y).abs() < 1e-5, "row {row} pos {pos}: {x} vs {y}");
                }
            }
        }
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
            let (fast, plain) = fast_and_plain(&cfg, BertFlavor::Bert);
            let lengths = [9usize, 4, 1];
            let ids: Vec<u32> = (0..27u32).map(|i| (i * 7 + 3) % 50).collect();
            let ids = Tensor::from_vec(ids, (3, 9), &Device::Cpu).unwrap();
            assert_same_real_states(&fast, &plain, &ids, &lengths);
        }
    }

    /// transformers' `MPNetEncoder.relative_position_bucket` on these offsets (key - query),
    /// 32 buckets, max distance 128.
    #[test]
    fn mpnet_buckets_match_transformers() {
        let bias = RelativePositionBias {
            table: Vec::new(),
            buckets: 32,
            heads: 0,
        };
        let offsets = [
            -300, -129, -128, -127, -65, -64, -63, -33, -32, -31, -17, -16, -15, -9, -8, -7, -1, 0,
            1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 300,
        ];
        let expected = [
            15, 15, 15, 15, 14, 14, 13, 12, 12, 11, 10, 10, 9, 8, 8, 7, 1, 0, 17, 23, 24, 24, 25,
            26, 26, 27, 28, 28, 29, 30, 30, 31, 31, 31, 31,
        ];
        let got: Vec<usize> = offsets.iter().map(|&d| bias.bucket(d)).collect();
        assert_eq!(got, expected);
    }

    /// MPNet's fast path (relative bias added in the fused attention) equals the tensor-op
    /// path (bias as a `[1, heads, seq, seq]` tensor) on every real position.
    #[test]
    fn mpnet_cpu_fast_path_matches_candle_ops() {
        let cfg: BertConfig = serde_json::from_value(serde_json::json!({
            "vocab_size": 50, "hidden_size": 24, "num_hidden_layers": 2,
            "num_attention_heads": 3, "intermediate_size": 40, "layer_norm_eps": 1e-5,
            "max_position_embeddings": 40, "pad_token_id": 1,
            "relative_attention_num_buckets": 32,
        }))
        .unwrap();
        let (fast, plain) = fast_and_plain(&cfg, BertFlavor::MpNet);
        assert_eq!(fast.max_length(), 38);
        let lengths = [20usize, 11, 1];
        let ids: Vec<u32> = (0..60u32).map(|i| (i * 7 + 3) % 50).collect();
        let ids = Tensor::from_vec(ids, (3, 20), &Device::Cpu).unwrap();
        assert_same_real_states(&fast, &plain, &ids, &lengths);
        let a = fast
            .forward(&ids, &lengths)
            .unwrap()
            .to_vec3::<f32>()
            .unwrap();
        // The bias changes the output: without it the same weights give other states.
        let (mut unbiased, _) = fast_and_plain(&cfg, BertFlavor::MpNet);
        unbiased.relative_bias = None;
        let c = unbiased
            .forward(&ids, &lengths)
            .unwrap()
            .to_vec3::<f32>()
            .unwrap();
        assert!((a[0][3][0] - c[0][3][0]).abs() > 1e-6);
    }
}
