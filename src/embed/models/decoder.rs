//! The transformer-decoder machinery shared by the Mistral, Qwen2/Qwen3 and Gemma-2 embedders:
//! RMSNorm, rotary positions, grouped-query causal attention (optional sliding window, logit
//! soft-capping, per-head q/k norms) and gated MLPs. Each architecture file maps its
//! `config.json` onto a [`DecoderSpec`]; unlike candle-transformers' generation models, the
//! forward pass returns every position's final hidden state (no KV cache, no LM head), so the
//! embedder can pool the last real token of right-padded rows.

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Embedding, VarBuilder};

use crate::kernels::aligned::LineVec;
use crate::kernels::bert_layer::RotaryTable;
use crate::kernels::bf16::DecoderLinear;
use crate::kernels::decoder_layer::{
    self, CpuDecoderLayer, DecoderLayerWeights, DecoderShape, DecoderWorkspace, GatedActivation,
};

use super::{Backbone, QuantizedLinears};
use crate::kernels::ops::{AttnMask, attention_probs, silu_mul};

/// Feed-forward activation of the gated MLP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// SiLU (Mistral, Qwen).
    Silu,
    /// GELU, tanh approximation (Gemma-2's `gelu_pytorch_tanh`).
    GeluTanh,
}

impl std::str::FromStr for Activation {
    type Err = candle_core::Error;

    /// From a `hidden_act` / `hidden_activation` value.
    fn from_str(name: &str) -> candle_core::Result<Self> {
        match name {
            "silu" | "swish" => Ok(Self::Silu),
            "gelu_pytorch_tanh" | "gelu_new" | "gelu_fast" => Ok(Self::GeluTanh),
            other => candle_core::bail!("unsupported activation '{other}'"),
        }
    }
}

/// Everything that differs between the decoder families, resolved from their configs.
#[derive(Debug, Clone)]
pub struct DecoderSpec {
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Model width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Transformer blocks (decoder layers) stacked.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// RoPE base.
    pub rope_theta: f64,
    /// MLP activation.
    pub activation: Activation,
    /// q/k/v projections carry biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm on queries and keys before RoPE (Qwen3; Gemma-3 with `(1 + w)`).
    pub qk_norm: bool,
    /// Gemma-2 layout: `(1 + w)` norms, extra post-attention / pre- and post-feed-forward norms,
    /// embeddings scaled by `sqrt(hidden_size)`.
    pub gemma: bool,
    /// Attention scale (`head_dim^-0.5`, or `query_pre_attn_scalar^-0.5` for Gemma-2).
    pub attn_scale: f64,
    /// `tanh(x / cap) * cap` on attention logits (Gemma-2).
    pub attn_softcap: Option<f64>,
    /// Sliding-window size per layer (`None`: full attention).
    pub sliding_window: Vec<Option<usize>>,
    /// Causal attention (decoders); `false` lets every token see the whole text (EmbeddingGemma).
    pub causal: bool,
    /// RoPE base of the sliding-window layers when it differs from `rope_theta` (Gemma-3).
    pub local_rope_theta: Option<f64>,
}

struct RmsNorm {
    weight: Tensor,
    eps: f64,
}

impl RmsNorm {
    fn new(size: usize, eps: f64, gemma: bool, vb: VarBuilder) -> candle_core::Result<Self> {
        let weight = vb.get(size, "weight")?;
        // Gemma stores w and scales by (1 + w).
        let weight = if gemma { (weight + 1.0)? } else { weight };
        Ok(Self { weight, eps })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        // As upstream: normalise in f32, scale, back to the activation dtype.
        let dtype = x.dtype();
        let xf = x.to_dtype(DType::F32)?;
        let var = xf.sqr()?.mean_keepdim(D::Minus1)?;
        let normed = xf.broadcast_div(&(var + self.eps)?.sqrt()?)?;
        normed
            .broadcast_mul(&self.weight.to_dtype(DType::F32)?)?
            .to_dtype(dtype)
    }
}

struct Attention {
    q: DecoderLinear,
    k: DecoderLinear,
    v: DecoderLinear,
    o: DecoderLinear,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

/// A layer's projections loaded by `load(in, out, bias, vb)`: `[q, k, v, o]` and
/// `[gate, up, down]`, as every decoder here names them (under `self_attn` and `mlp`).
type LayerLinears<T> = ([T; 4], [T; 3]);

fn layer_linears<T>(
    spec: &DecoderSpec,
    vb: &VarBuilder,
    load: impl Fn(usize, usize, bool, VarBuilder) -> candle_core::Result<T>,
) -> candle_core::Result<LayerLinears<T>> {
    let (h, hd, inner) = (spec.hidden_size, spec.head_dim, spec.intermediate_size);
    let (attn, mlp) = (vb.pp("self_attn"), vb.pp("mlp"));
    let (q_out, kv_out) = (spec.num_heads * hd, spec.num_kv_heads * hd);
    Ok((
        [
            load(h, q_out, spec.qkv_bias, attn.pp("q_proj"))?,
            load(h, kv_out, spec.qkv_bias, attn.pp("k_proj"))?,
            load(h, kv_out, spec.qkv_bias, attn.pp("v_proj"))?,
            load(q_out, h, false, attn.pp("o_proj"))?,
        ],
        [
            load(h, inner, false, mlp.pp("gate_proj"))?,
            load(h, inner, false, mlp.pp("up_proj"))?,
            load(inner, h, false, mlp.pp("down_proj"))?,
        ],
    ))
}

impl Attention {
    fn new(
        spec: &DecoderSpec,
        vb: VarBuilder,
        [q, k, v, o]: [DecoderLinear; 4],
    ) -> candle_core::Result<Self> {
        let hd = spec.head_dim;
        let (q_norm, k_norm) = if spec.qk_norm {
            (
                Some(RmsNorm::new(
                    hd,
                    spec.rms_norm_eps,
                    spec.gemma,
                    vb.pp("q_norm"),
                )?),
                Some(RmsNorm::new(
                    hd,
                    spec.rms_norm_eps,
                    spec.gemma,
                    vb.pp("k_norm"),
                )?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            q,
            k,
            v,
            o,
            q_norm,
            k_norm,
            num_heads: spec.num_heads,
            num_kv_heads: spec.num_kv_heads,
            head_dim: hd,
        })
    }

    fn heads(&self, x: &Tensor, n: usize, norm: Option<&RmsNorm>) -> candle_core::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let x = x.reshape((b, t, n, self.head_dim))?;
        let x = match norm {
            Some(norm) => norm.forward(&x)?,
            None => x,
        };
        x.transpose(1, 2)?.contiguous()
    }

    fn forward(&self, x: &Tensor, rope: &Rope, mask: &AttnMask) -> candle_core::Result<Tensor> {
        let (b, t, _) = x.dims3()?;
        let q = self.heads(&self.q.forward(x)?, self.num_heads, self.q_norm.as_ref())?;
        let k = self.heads(&self.k.forward(x)?, self.num_kv_heads, self.k_norm.as_ref())?;
        let v = self.heads(&self.v.forward(x)?, self.num_kv_heads, None)?;
        let q = candle_nn::rotary_emb::rope(&q, &rope.cos, &rope.sin)?;
        let k = candle_nn::rotary_emb::rope(&k, &rope.cos, &rope.sin)?;
        let group = self.num_heads / self.num_kv_heads;
        // Grouped-query attention as one matmul per kv head: fold the query heads of a group
        // into the sequence axis instead of copying keys and values `group` times.
        let q = q.reshape((b, self.num_kv_heads, group * t, self.head_dim))?;
        // On the CPU, a bf16/f16 model's attention matmuls run in f32: candle's half-precision
        // CPU matmul converts while packing and was ~17% of a Qwen3-0.6B-shaped forward pass
        // (PyTorch's CPU attention also accumulates half-precision inputs in f32).
        let dtype = v.dtype();
        let (q, k, v) = if matches!(q.device(), Device::Cpu) && dtype != DType::F32 {
            (
                q.to_dtype(DType::F32)?,
                k.to_dtype(DType::F32)?,
                v.to_dtype(DType::F32)?,
            )
        } else {
            (q, k, v)
        };
        // Scaling, soft-capping, masking and softmax in f32 (as upstream's eager attention).
        let probs = attention_probs(&q.matmul(&k.t()?)?, mask)?.to_dtype(v.dtype())?;
        let ctx = probs
            .matmul(&v)?
            .to_dtype(dtype)?
            .reshape((b, self.num_heads, t, self.head_dim))?
            .transpose(1, 2)?
            .reshape((b, t, self.num_heads * self.head_dim))?;
        self.o.forward(&ctx)
    }
}

struct Mlp {
    gate: DecoderLinear,
    up: DecoderLinear,
    down: DecoderLinear,
    activation: Activation,
}

impl Mlp {
    fn new(spec: &DecoderSpec, [gate, up, down]: [DecoderLinear; 3]) -> Self {
        Self {
            gate,
            up,
            down,
            activation: spec.activation,
        }
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let gate = self.gate.forward(x)?;
        let hidden = match self.activation {
            Activation::Silu => silu_mul(&gate, &self.up.forward(x)?)?,
            Activation::GeluTanh => (gate.gelu()? * self.up.forward(x)?)?,
        };
        self.down.forward(&hidden)
    }
}

struct Layer {
    attn: Attention,
    mlp: Mlp,
    input_norm: RmsNorm,
    post_attn_norm: RmsNorm,
    /// Gemma-2 only: norms around the feed-forward block.
    pre_ff_norm: Option<RmsNorm>,
    post_ff_norm: Option<RmsNorm>,
    window: Option<usize>,
}

impl Layer {
    fn new(
        spec: &DecoderSpec,
        index: usize,
        vb: VarBuilder,
        quantized: &QuantizedLinears,
    ) -> candle_core::Result<Self> {
        let (attention, mlp) = layer_linears(spec, &vb, |i, o, bias, vb| {
            DecoderLinear::new(quantized.linear(i, o, bias, vb)?)
        })?;
        let norm =
            |name: &str| RmsNorm::new(spec.hidden_size, spec.rms_norm_eps, spec.gemma, vb.pp(name));
        let (pre_ff_norm, post_ff_norm) = if spec.gemma {
            (
                Some(norm("pre_feedforward_layernorm")?),
                Some(norm("post_feedforward_layernorm")?),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            attn: Attention::new(spec, vb.pp("self_attn"), attention)?,
            mlp: Mlp::new(spec, mlp),
            input_norm: norm("input_layernorm")?,
            post_attn_norm: norm("post_attention_layernorm")?,
            pre_ff_norm,
            post_ff_norm,
            window: spec.sliding_window.get(index).copied().flatten(),
        })
    }

    fn forward(&self, x: &Tensor, rope: &Rope, mask: &AttnMask) -> candle_core::Result<Tensor> {
        let attn = self
            .attn
            .forward(&self.input_norm.forward(x)?, rope, mask)?;
        match (&self.pre_ff_norm, &self.post_ff_norm) {
            (Some(pre), Some(post)) => {
                let x = (x + self.post_attn_norm.forward(&attn)?)?;
                let ff = self.mlp.forward(&pre.forward(&x)?)?;
                x + post.forward(&ff)?
            }
            _ => {
                let x = (x + attn)?;
                let ff = self.mlp.forward(&self.post_attn_norm.forward(&x)?)?;
                x + ff
            }
        }
    }
}

/// RoPE cos/sin tables (shared with the encoders that rotate positions, such as ModernBERT).
pub(super) struct Rope {
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
}

impl Rope {
    /// Non-interleaved RoPE tables of base `theta` for positions `0..len` (rotate-half
    /// convention).
    pub(super) fn new(
        head_dim: usize,
        theta: f64,
        len: usize,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Self> {
        let half = head_dim / 2;
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| (1.0 / theta.powf(2.0 * i as f64 / head_dim as f64)) as f32)
            .collect();
        let inv_freq = Tensor::from_vec(inv_freq, (1, half), dev)?;
        let positions = Tensor::arange(0u32, len as u32, dev)?
            .to_dtype(DType::F32)?
            .reshape((len, 1))?;
        let freqs = positions.matmul(&inv_freq)?;
        Ok(Self {
            cos: freqs.cos()?.to_dtype(dtype)?,
            sin: freqs.sin()?.to_dtype(dtype)?,
        })
    }
}

/// Bidirectional encoder self-attention with one fused `[3h, h]` Q|K|V projection and RoPE on
/// Q and K (ModernBERT, nomic-bert): `out(softmax(Q K^T) V)` for `x` `[batch, seq, h]`.
pub(super) fn fused_rotary_attention(
    qkv: &candle_nn::Linear,
    out: &candle_nn::Linear,
    x: &Tensor,
    (heads, head_dim): (usize, usize),
    rope: &Rope,
    mask: &AttnMask,
) -> candle_core::Result<Tensor> {
    let (b, t, h) = x.dims3()?;
    let qkv = qkv.forward(x)?.reshape((b, t, 3, heads, head_dim))?;
    let part = |n: usize| -> candle_core::Result<Tensor> {
        qkv.narrow(2, n, 1)?
            .squeeze(2)?
            .transpose(1, 2)?
            .contiguous()
    };
    let q = candle_nn::rotary_emb::rope(&part(0)?, &rope.cos, &rope.sin)?;
    let k = candle_nn::rotary_emb::rope(&part(1)?, &rope.cos, &rope.sin)?;
    let v = part(2)?;
    let probs = attention_probs(&q.matmul(&k.t()?)?, mask)?.to_dtype(v.dtype())?;
    let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, h))?;
    out.forward(&ctx)
}

/// A decoder stack: embeddings, layers, final norm.
pub struct DecoderModel {
    embed: Embedding,
    layers: Layers,
    spec: DecoderSpec,
    dtype: DType,
}

/// The layers and final norm: candle's, or the fused CPU path (`kernels::decoder_layer`).
enum Layers {
    Candle(Vec<Layer>, RmsNorm),
    Cpu(Vec<CpuDecoderLayer>, Vec<f32>),
}

/// An RMSNorm's factors in f32 (Gemma's `1 + w` computed in f32, as upstream does).
fn norm_factors(size: usize, gemma: bool, vb: VarBuilder) -> candle_core::Result<Tensor> {
    let weight = vb.get(size, "weight")?.to_dtype(DType::F32)?;
    if gemma { weight + 1.0 } else { Ok(weight) }
}

/// Layer `vb` packed for the fused CPU path.
fn cpu_layer(
    spec: &DecoderSpec,
    vb: VarBuilder,
    quantized: &QuantizedLinears,
) -> candle_core::Result<CpuDecoderLayer> {
    let (h, hd) = (spec.hidden_size, spec.head_dim);
    let attn = vb.pp("self_attn");
    let (attention, mlp) =
        layer_linears(spec, &vb, |i, o, bias, vb| quantized.source(i, o, bias, vb))?;
    let norm = |size, name: &str, vb: &VarBuilder| norm_factors(size, spec.gemma, vb.pp(name));
    let weights = DecoderLayerWeights {
        attention,
        mlp,
        input_norm: norm(h, "input_layernorm", &vb)?,
        post_attention_norm: norm(h, "post_attention_layernorm", &vb)?,
        feed_forward_norms: if spec.gemma {
            Some([
                norm(h, "pre_feedforward_layernorm", &vb)?,
                norm(h, "post_feedforward_layernorm", &vb)?,
            ])
        } else {
            None
        },
        qk_norms: if spec.qk_norm {
            Some([norm(hd, "q_norm", &attn)?, norm(hd, "k_norm", &attn)?])
        } else {
            None
        },
    };
    let shape = DecoderShape {
        heads: spec.num_heads,
        kv_heads: spec.num_kv_heads,
        head_dim: hd,
        eps: spec.rms_norm_eps as f32,
    };
    let activation = match spec.activation {
        Activation::Silu => GatedActivation::Silu,
        Activation::GeluTanh => GatedActivation::GeluTanh,
    };
    CpuDecoderLayer::new(weights, shape, activation, vb.dtype() == DType::BF16)
}

impl DecoderModel {
    /// Builds the stack from `vb` (weights at the root or under `model.`).
    pub fn new(spec: DecoderSpec, vb: VarBuilder) -> candle_core::Result<Self> {
        Self::load_with(spec, vb, &QuantizedLinears::default())
    }

    /// [`DecoderModel::new`] with the layers' weights that a GGUF file keeps quantized.
    pub(crate) fn load_with(
        spec: DecoderSpec,
        vb: VarBuilder,
        quantized: &QuantizedLinears,
    ) -> candle_core::Result<Self> {
        if spec.num_kv_heads == 0
            || !spec.num_heads.is_multiple_of(spec.num_kv_heads)
            || !spec.head_dim.is_multiple_of(2)
        {
            candle_core::bail!("inconsistent head counts or odd head_dim in config.json");
        }
        let vb = if vb.contains_tensor("model.embed_tokens.weight") {
            vb.pp("model")
        } else {
            vb
        };
        let dtype = vb.dtype();
        let embed = candle_nn::embedding(spec.vocab_size, spec.hidden_size, vb.pp("embed_tokens"))?;
        let layers = if matches!(vb.device(), Device::Cpu) && decoder_layer::supports(dtype) {
            let layers = (0..spec.num_layers)
                .map(|i| cpu_layer(&spec, vb.pp("layers").pp(i), quantized))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let norm = norm_factors(spec.hidden_size, spec.gemma, vb.pp("norm"))?;
            Layers::Cpu(layers, norm.to_vec1::<f32>()?)
        } else {
            let layers = (0..spec.num_layers)
                .map(|i| Layer::new(&spec, i, vb.pp("layers").pp(i), quantized))
                .collect::<candle_core::Result<Vec<_>>>()?;
            let norm = RmsNorm::new(
                spec.hidden_size,
                spec.rms_norm_eps,
                spec.gemma,
                vb.pp("norm"),
            )?;
            Layers::Candle(layers, norm)
        };
        Ok(Self {
            embed,
            layers,
            spec,
            dtype,
        })
    }
}

impl DecoderModel {
    /// The attention mask of a layer with sliding window `window` over right-padded rows of
    /// `lengths` real tokens (the key lengths keep real queries off padding keys).
    fn mask(&self, lengths: &[usize], t: usize, window: Option<usize>) -> AttnMask {
        AttnMask {
            key_lengths: lengths.to_vec(),
            query_len: t,
            causal: self.spec.causal,
            window,
            scale: self.spec.attn_scale as f32,
            softcap: self.spec.attn_softcap.map(|c| c as f32),
        }
    }

    /// The fused CPU layers on the embedded `x` `[batch, seq, h]`; returns f32.
    fn forward_cpu(
        &self,
        x: Tensor,
        layers: &[CpuDecoderLayer],
        norm: &[f32],
        lengths: &[usize],
    ) -> candle_core::Result<Tensor> {
        let (b, t, h) = x.dims3()?;
        let head_dim = self.spec.head_dim;
        let rope = RotaryTable::new(head_dim, self.spec.rope_theta, t);
        let local_rope = self
            .spec
            .local_rope_theta
            .map(|theta| RotaryTable::new(head_dim, theta, t));
        // Cache-line aligned, so that the tile kernel adds the out and down products onto the
        // rows in place.
        let mut values =
            LineVec::from_slice(&x.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?);
        let mut work = DecoderWorkspace::default();
        for (i, layer) in layers.iter().enumerate() {
            let window = self.spec.sliding_window.get(i).copied().flatten();
            let rope = match (&local_rope, window) {
                (Some(local), Some(_)) => local,
                _ => &rope,
            };
            layer.forward(&mut values, rope, &self.mask(lengths, t, window), &mut work)?;
        }
        let values = decoder_layer::rms_norm(&values, norm, self.spec.rms_norm_eps as f32);
        Tensor::from_vec(values, (b, t, h), x.device())
    }
}

impl Backbone for DecoderModel {
    fn forward(&self, input_ids: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        let (_, t) = input_ids.dims2()?;
        let dev = input_ids.device();
        let mut x = self.embed.forward(input_ids)?;
        if self.spec.gemma {
            // Gemma scales embeddings by sqrt(hidden), rounded to the activation dtype first.
            let normalizer =
                Tensor::new((self.spec.hidden_size as f32).sqrt(), dev)?.to_dtype(self.dtype)?;
            x = x.broadcast_mul(&normalizer)?;
        }
        let (layers, norm) = match &self.layers {
            Layers::Candle(layers, norm) => (layers, norm),
            Layers::Cpu(layers, norm) => return self.forward_cpu(x, layers, norm, lengths),
        };
        let head_dim = self.spec.head_dim;
        let rope = Rope::new(head_dim, self.spec.rope_theta, t, self.dtype, dev)?;
        let local_rope = match self.spec.local_rope_theta {
            Some(theta) => Some(Rope::new(head_dim, theta, t, self.dtype, dev)?),
            None => None,
        };
        for layer in layers {
            let mask = self.mask(lengths, t, layer.window);
            let rope = match (&local_rope, layer.window) {
                (Some(local), Some(_)) => local,
                _ => &rope,
            };
            x = layer.forward(&x, rope, &mask)?;
        }
        norm.forward(&x)
    }

    fn hidden_size(&self) -> usize {
        self.spec.hidden_size
    }
}

/// The `config.json` fields of a Llama-style model (Mistral, EuroBERT): sizes, activation,
/// RMSNorm epsilon and RoPE. Each model's config flattens it in beside its own fields; the
/// epsilon's default differs between models, so [`LlamaStyleConfig::spec`] takes it.
#[derive(Debug, Clone, serde::Deserialize)]
pub struct LlamaStyleConfig {
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
    /// MLP activation (default `silu`).
    pub hidden_act: Option<String>,
    /// RMSNorm epsilon (default: the model's).
    pub rms_norm_eps: Option<f64>,
    /// RoPE base (older configs).
    pub rope_theta: Option<f64>,
    /// RoPE settings (newer configs).
    pub rope_parameters: Option<RopeParameters>,
    /// Older RoPE scaling block (refused unless default).
    pub rope_scaling: Option<serde_json::Value>,
}

impl LlamaStyleConfig {
    /// The decoder these fields describe, attending `causal`ly or both ways, with
    /// `default_eps` where the config names no epsilon: no biases, per-head norms or
    /// sliding windows (a model with them sets them on the result).
    pub fn spec(&self, default_eps: f64, causal: bool) -> candle_core::Result<DecoderSpec> {
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
            rms_norm_eps: self.rms_norm_eps.unwrap_or(default_eps),
            rope_theta: rope_theta(
                self.rope_theta,
                self.rope_parameters.as_ref(),
                self.rope_scaling.as_ref(),
                10_000.0,
            )?,
            activation: self
                .hidden_act
                .as_deref()
                .unwrap_or("silu")
                .parse::<Activation>()?,
            qkv_bias: false,
            qk_norm: false,
            gemma: false,
            attn_scale: 1.0 / (head_dim as f64).sqrt(),
            attn_softcap: None,
            sliding_window: vec![None; self.num_hidden_layers],
            causal,
            local_rope_theta: None,
        })
    }
}

/// RoPE settings as newer `config.json` files nest them (`rope_parameters`), older ones as
/// `rope_theta` / `rope_scaling` at the top level.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct RopeParameters {
    /// RoPE base.
    pub rope_theta: Option<f64>,
    /// `default` is the only supported type.
    pub rope_type: Option<String>,
}

/// The RoPE settings of layer type `kind` (`full_attention`, `sliding_attention`) in a config
/// whose `rope_parameters` are nested per layer type (Gemma-3, ModernBERT); `None` if absent.
pub fn rope_parameters_for(
    nested: Option<&serde_json::Value>,
    kind: &str,
) -> candle_core::Result<Option<RopeParameters>> {
    match nested.and_then(|p| p.get(kind)) {
        Some(value) => serde_json::from_value(value.clone())
            .map(Some)
            .map_err(|e| candle_core::Error::Msg(format!("rope_parameters.{kind}: {e}"))),
        None => Ok(None),
    }
}

/// The RoPE base from either layout; scaled variants (yarn, linear, ...) are refused.
pub fn rope_theta(
    top_level: Option<f64>,
    nested: Option<&RopeParameters>,
    scaling: Option<&serde_json::Value>,
    default: f64,
) -> candle_core::Result<f64> {
    let kind = nested.and_then(|p| p.rope_type.as_deref()).or_else(|| {
        scaling
            .and_then(|s| s.get("rope_type").or_else(|| s.get("type")))
            .and_then(|v| v.as_str())
    });
    if let Some(kind) = kind
        && kind != "default"
    {
        candle_core::bail!("rope type '{kind}' is not supported (only default)");
    }
    Ok(nested
        .and_then(|p| p.rope_theta)
        .or(top_level)
        .unwrap_or(default))
}

/// Per-layer windows from `layer_types` (`sliding_attention` layers get `window`) when the config
/// lists them, else from `fallback`.
pub fn layer_windows(
    layer_types: Option<&[String]>,
    num_layers: usize,
    window: Option<usize>,
    fallback: impl Fn(usize) -> Option<usize>,
) -> candle_core::Result<Vec<Option<usize>>> {
    match layer_types {
        Some(types) => {
            if types.len() != num_layers {
                candle_core::bail!(
                    "layer_types lists {} layers, expected {num_layers}",
                    types.len()
                );
            }
            types
                .iter()
                .map(|t| match t.as_str() {
                    "sliding_attention" => Ok(window),
                    "full_attention" => Ok(None),
                    other => candle_core::bail!("unsupported layer type '{other}'"),
                })
                .collect()
        }
        None => Ok((0..num_layers).map(fallback).collect()),
    }
}
