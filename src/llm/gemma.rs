//! The Gemma decoders (Gemma 1, 2 and 3 text models) over GGUF weights, with llama.cpp's tensor
//! names and metadata keys (`gemma`, `gemma2`, `gemma3` architectures).
//!
//! Written here rather than taken from candle-transformers 0.11.1, whose `quantized_gemma3`
//! differs from Gemma 3 (and from `transformers` and llama.cpp) in ways that change the answers:
//! its feed-forward uses SiLU where Gemma uses GELU (tanh approximation), it ignores the linear
//! RoPE scaling of the global layers (4B and larger), applies the sliding window to the prompt
//! only (with one key too many) and never while generating, and scales attention by
//! 1/sqrt(head_dim) for every size (candle has no quantized Gemma 1 or 2). Here: GELU (tanh),
//! linear RoPE scaling on Gemma 3's global layers, the window `i - j < window` on every step,
//! Gemma 2's attention and final logit soft-capping, and llama.cpp's attention scale (the 27B
//! models: 1/sqrt of hidden/heads, the others 1/sqrt(head_dim), as `query_pre_attn_scalar`
//! says). Norm weights are read as stored: llama.cpp's converter already wrote Gemma's `1 + w`.

use candle_core::quantized::{QMatMul, gguf_file};
use candle_core::{DType, Device, Module, Result, Tensor};
use candle_transformers::quantized_nn::RmsNorm;
use candle_transformers::utils::repeat_kv;

/// Gemma 3: every sixth layer is global unless the metadata says otherwise (llama.cpp's rule).
const GEMMA3_SLIDING_PATTERN: usize = 6;

/// Which Gemma.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Gemma 1 (`gemma`): global attention everywhere, no extra norms.
    One,
    /// Gemma 2 (`gemma2`): sliding and global layers alternate, post-norms, soft-capping.
    Two,
    /// Gemma 3 (`gemma3`): five sliding layers per global one, q/k norms, two RoPE bases.
    Three,
}

impl Generation {
    /// The generation of a GGUF `general.architecture`.
    pub fn of_architecture(arch: &str) -> Option<Self> {
        match arch {
            "gemma" => Some(Generation::One),
            "gemma2" => Some(Generation::Two),
            "gemma3" => Some(Generation::Three),
            _ => None,
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Generation::One => "gemma",
            Generation::Two => "gemma2",
            Generation::Three => "gemma3",
        }
    }
}

struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    fn new(head_dim: usize, base: f32, scale: f32) -> Self {
        let inv_freq = (0..head_dim)
            .step_by(2)
            .map(|i| 1.0 / base.powf(i as f32 / head_dim as f32) / scale)
            .collect();
        Self { inv_freq }
    }

    /// cos and sin for positions `offset..offset + len`, each (len, head_dim / 2).
    fn tables(&self, offset: usize, len: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut angles = Vec::with_capacity(len * half);
        for p in offset..offset + len {
            let p = p as f32;
            angles.extend(self.inv_freq.iter().map(|f| p * f));
        }
        let angles = Tensor::from_vec(angles, (len, half), device)?;
        Ok((angles.cos()?, angles.sin()?))
    }
}

#[derive(Clone, Copy)]
struct Dims {
    n_head: usize,
    n_kv_head: usize,
    head_dim: usize,
    attn_scale: f64,
    attn_softcap: Option<f64>,
}

struct Layer {
    q: QMatMul,
    k: QMatMul,
    v: QMatMul,
    o: QMatMul,
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    attn_norm: RmsNorm,
    post_attn_norm: Option<RmsNorm>,
    ffn_norm: RmsNorm,
    post_ffn_norm: Option<RmsNorm>,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    /// `Some(w)`: a query at position i sees keys j with i - w < j <= i.
    window: Option<usize>,
    global: bool,
    cache: Option<(Tensor, Tensor)>,
}

/// A Gemma model ready to generate (one sequence, KV cache inside).
pub struct Gemma {
    embed: Tensor,
    embed_scale: f64,
    layers: Vec<Layer>,
    norm: RmsNorm,
    output: QMatMul,
    dims: Dims,
    rope_local: Rope,
    rope_global: Rope,
    final_softcap: Option<f64>,
}

impl Gemma {
    /// Reads the weights named as llama.cpp writes Gemma (`blk.N.attn_q.weight`, ...).
    pub fn from_gguf<R: std::io::Read + std::io::Seek>(
        generation: Generation,
        content: &gguf_file::Content,
        reader: &mut R,
        device: &Device,
    ) -> Result<Self> {
        let md = &content.metadata;
        let prefix = generation.prefix();
        let get = |key: &str| {
            md.get(&format!("{prefix}.{key}"))
                .ok_or_else(|| candle_core::Error::Msg(format!("metadata {prefix}.{key} missing")))
        };
        let get_u32 = |key: &str| get(key).and_then(|v| v.to_u32()).map(|v| v as usize);
        let opt_f32 = |key: &str| get(key).and_then(|v| v.to_f32()).ok();
        let n_head = get_u32("attention.head_count")?;
        let n_kv_head = get_u32("attention.head_count_kv")?;
        let n_layer = get_u32("block_count")?;
        let hidden = get_u32("embedding_length")?;
        let head_dim = get_u32("attention.key_length")?;
        let eps = f64::from(get("attention.layer_norm_rms_epsilon")?.to_f32()?);
        let (window, pattern) = match generation {
            Generation::One => (0, 1),
            Generation::Two => (get_u32("attention.sliding_window")?, 2),
            Generation::Three => (
                get_u32("attention.sliding_window")?,
                get_u32("attention.sliding_window_type").unwrap_or(GEMMA3_SLIDING_PATTERN),
            ),
        };
        if n_kv_head == 0 || n_head % n_kv_head != 0 || pattern == 0 {
            candle_core::bail!("{prefix} metadata: inconsistent head counts or window pattern");
        }
        // Gemma 1 and 2 use one RoPE base; Gemma 3 a local one and a global one.
        let (base_global, base_local) = match generation {
            Generation::Three => (
                opt_f32("rope.freq_base").unwrap_or(1_000_000.0),
                opt_f32("rope.freq_base_swa")
                    .or_else(|| opt_f32("rope.local_freq_base"))
                    .unwrap_or(10_000.0),
            ),
            _ => {
                let base = opt_f32("rope.freq_base").unwrap_or(10_000.0);
                (base, base)
            }
        };
        let linear = get("rope.scaling.type")
            .and_then(|v| v.to_string().cloned())
            .is_ok_and(|t| t == "linear");
        let scale_global = if linear {
            opt_f32("rope.scaling.factor").unwrap_or(1.0)
        } else {
            1.0
        };
        // llama.cpp: the 27B models (Gemma 2: 46 layers, Gemma 3: 62) scale by hidden/heads,
        // the others by head_dim.
        let big = matches!(
            (generation, n_layer),
            (Generation::Two, 46) | (Generation::Three, 62)
        );
        let attn_scale = if big {
            1.0 / ((hidden / n_head) as f64).sqrt()
        } else {
            1.0 / (head_dim as f64).sqrt()
        };
        let final_softcap = opt_f32("final_logit_softcapping").map(f64::from);
        let attn_softcap = opt_f32("attn_logit_softcapping").map(f64::from);

        let mut tensor = |name: &str| content.tensor(reader, name, device);
        let embed_q = tensor("token_embd.weight")?;
        let embed = embed_q.dequantize(device)?;
        let output = match tensor("output.weight") {
            Ok(t) => QMatMul::from_qtensor(t)?,
            Err(_) => QMatMul::from_qtensor(embed_q)?,
        };
        let norm = RmsNorm::from_qtensor(tensor("output_norm.weight")?, eps)?;
        let mut layers = Vec::with_capacity(n_layer);
        for i in 0..n_layer {
            let mut mm = |n: &str| {
                content
                    .tensor(reader, &format!("blk.{i}.{n}.weight"), device)
                    .and_then(QMatMul::from_qtensor)
            };
            let (q, k, v, o) = (
                mm("attn_q")?,
                mm("attn_k")?,
                mm("attn_v")?,
                mm("attn_output")?,
            );
            let (gate, up, down) = (mm("ffn_gate")?, mm("ffn_up")?, mm("ffn_down")?);
            let mut rms = |n: &str| {
                content
                    .tensor(reader, &format!("blk.{i}.{n}.weight"), device)
                    .and_then(|t| RmsNorm::from_qtensor(t, eps))
            };
            let three = generation == Generation::Three;
            let post = generation != Generation::One;
            // Gemma 2: even layers slide; Gemma 3: all but every `pattern`-th; Gemma 1: none.
            let global = (i + 1) % pattern == 0;
            layers.push(Layer {
                q,
                k,
                v,
                o,
                q_norm: three.then(|| rms("attn_q_norm")).transpose()?,
                k_norm: three.then(|| rms("attn_k_norm")).transpose()?,
                attn_norm: rms("attn_norm")?,
                post_attn_norm: post.then(|| rms("post_attention_norm")).transpose()?,
                ffn_norm: rms("ffn_norm")?,
                post_ffn_norm: post.then(|| rms("post_ffw_norm")).transpose()?,
                gate,
                up,
                down,
                window: (!global && window > 0).then_some(window),
                global,
                cache: None,
            });
        }
        Ok(Self {
            embed,
            embed_scale: (hidden as f64).sqrt(),
            layers,
            norm,
            output,
            dims: Dims {
                n_head,
                n_kv_head,
                head_dim,
                attn_scale,
                attn_softcap,
            },
            rope_local: Rope::new(head_dim, base_local, 1.0),
            rope_global: Rope::new(head_dim, base_global, scale_global),
            final_softcap,
        })
    }

    /// Forgets the previous sequence.
    pub fn clear_kv_cache(&mut self) {
        for layer in &mut self.layers {
            layer.cache = None;
        }
    }

    /// Logits (1, vocab) of the last position of `input` (1, len), which starts at `offset`.
    pub fn forward(&mut self, input: &Tensor, offset: usize) -> Result<Tensor> {
        let (b, len) = input.dims2()?;
        let device = input.device();
        let mut x = (self.embed.embedding(&input.flatten_all()?)? * self.embed_scale)?
            .reshape((b, len, ()))?;
        let local = self.rope_local.tables(offset, len, device)?;
        let global = self.rope_global.tables(offset, len, device)?;
        for layer in &mut self.layers {
            let (cos, sin) = if layer.global { &global } else { &local };
            let h = layer.attn_norm.forward(&x)?;
            let h = attention(self.dims, layer, &h, offset, cos, sin)?;
            let h = match &layer.post_attn_norm {
                Some(norm) => norm.forward(&h)?,
                None => h,
            };
            x = (x + h)?;
            let h = layer.ffn_norm.forward(&x)?;
            let h = layer
                .down
                .forward(&(layer.gate.forward(&h)?.gelu()? * layer.up.forward(&h)?)?)?;
            let h = match &layer.post_ffn_norm {
                Some(norm) => norm.forward(&h)?,
                None => h,
            };
            x = (x + h)?;
        }
        let last = self.norm.forward(&x.narrow(1, len - 1, 1)?.squeeze(1)?)?;
        let logits = self.output.forward(&last)?;
        match self.final_softcap {
            Some(cap) => (logits / cap)?.tanh()? * cap,
            None => Ok(logits),
        }
    }
}

fn attention(
    dims: Dims,
    layer: &mut Layer,
    x: &Tensor,
    offset: usize,
    cos: &Tensor,
    sin: &Tensor,
) -> Result<Tensor> {
    let (b, len, _) = x.dims3()?;
    let heads = |t: Tensor, n: usize| t.reshape((b, len, n, dims.head_dim));
    let norm = |t: Tensor, norm: &Option<RmsNorm>| match norm {
        Some(n) => n.forward(&t),
        None => Ok(t),
    };
    let q = norm(heads(layer.q.forward(x)?, dims.n_head)?, &layer.q_norm)?;
    let k = norm(heads(layer.k.forward(x)?, dims.n_kv_head)?, &layer.k_norm)?;
    let v = heads(layer.v.forward(x)?, dims.n_kv_head)?.transpose(1, 2)?;
    let q = candle_nn::rotary_emb::rope(&q.transpose(1, 2)?.contiguous()?, cos, sin)?;
    let k = candle_nn::rotary_emb::rope(&k.transpose(1, 2)?.contiguous()?, cos, sin)?;
    let (k, v) = match &layer.cache {
        Some((ck, cv)) if offset > 0 => (Tensor::cat(&[ck, &k], 2)?, Tensor::cat(&[cv, &v], 2)?),
        _ => (k, v.contiguous()?),
    };
    layer.cache = Some((k.clone(), v.clone()));
    let kv_len = k.dim(2)?;
    // Keys older than every query's window are dropped before the product.
    let first = match layer.window {
        Some(w) => (offset + 1).saturating_sub(w),
        None => 0,
    };
    let (k, v) = (
        k.narrow(2, first, kv_len - first)?,
        v.narrow(2, first, kv_len - first)?,
    );
    let group = dims.n_head / dims.n_kv_head;
    let k = repeat_kv(k, group)?.contiguous()?;
    let v = repeat_kv(v, group)?.contiguous()?;
    let mut scores = (q.matmul(&k.t()?)? * dims.attn_scale)?;
    if let Some(cap) = dims.attn_softcap {
        scores = ((scores / cap)?.tanh()? * cap)?;
    }
    if len > 1 {
        // Query i (absolute offset + i) sees key j (absolute first + j) when j <= i and,
        // in a sliding layer, i - j < window.
        let keys = kv_len - first;
        let mut mask = Vec::with_capacity(len * keys);
        for i in 0..len {
            let qi = offset + i;
            for j in 0..keys {
                let kj = first + j;
                let visible = kj <= qi && layer.window.is_none_or(|w| qi - kj < w);
                mask.push(if visible { 0f32 } else { f32::NEG_INFINITY });
            }
        }
        let mask = Tensor::from_vec(mask, (1, 1, len, keys), x.device())?;
        scores = scores.broadcast_add(&mask.to_dtype(scores.dtype())?)?;
    }
    let probs = candle_nn::ops::softmax_last_dim(&scores.to_dtype(DType::F32)?)?;
    let out = probs.matmul(&v.to_dtype(DType::F32)?)?;
    let out = out.transpose(1, 2)?.reshape((b, len, ()))?;
    layer.o.forward(&out)
}
