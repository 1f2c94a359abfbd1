//! The decoder of the `llama`, `qwen2`, `qwen3`, `gemma`, `gemma2` and `gemma3` GGUF families
//! on our own kernels: RMSNorm, grouped-query attention with RoPE (llama: interleaved pairs as
//! llama.cpp's converter permutes the weights for; the others: halves, "NeoX"), Qwen2's q/k/v
//! biases, per-head q/k norms (Qwen3, Gemma 3), SiLU- or GELU-gated feed-forward, tied or
//! separate output head.
//!
//! Gemma as `transformers` and llama.cpp run it (candle-transformers' `quantized_gemma3` differs:
//! SiLU for GELU, no linear RoPE scaling, no window while generating): embeddings scaled by
//! `sqrt(hidden)`, norms after the attention and the feed-forward as well as before (Gemma 2
//! and 3), GELU (tanh) gating, sliding-window layers (Gemma 2: every other one; Gemma 3: all
//! but every sixth, with their own RoPE base), linear RoPE scaling on Gemma 3's global layers,
//! Gemma 2's attention and final logit soft-capping, and llama.cpp's attention scale (the 27B
//! models: `1/sqrt(hidden / heads)`, the others `1/sqrt(head_dim)`). Norm weights are read as
//! stored: llama.cpp's converter already wrote Gemma's `1 + w`.
//!
//! Two paths share one KV cache: [`Model::prompt`] runs many tokens through matrix x matrix
//! products and returns the logits of the last one only; [`Model::step`] runs one generated
//! token through the integer matrix x vector kernels. The cache holds f32 keys and values per
//! layer, grows geometrically (never re-copied per token) and can be cut back to a prefix, which
//! is how calls that share a prompt prefix skip recomputing it.

use std::sync::Arc;

use candle_core::quantized::gguf_file;
use memmap2::Mmap;

use crate::kernels::attention::{KvCache, Scoring, attention};
use crate::kernels::dot::dot;
use crate::kernels::ops::{GeluKind, exp_fast, gelu_in_place};
use crate::kernels::quant::{Isa, Q8Activation, QMatrix, QType, matmul, matvec_many};

/// Gemma 3: every sixth layer is global unless the metadata says otherwise (llama.cpp's rule).
const GEMMA3_SLIDING_PATTERN: usize = 6;

/// The families this model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// `llama` (SmolLM, Llama 2/3, Mistral-style).
    Llama,
    /// `qwen2` (Qwen2, Qwen2.5, Qwen2.5-Coder).
    Qwen2,
    /// `qwen3`.
    Qwen3,
    /// `gemma` (Gemma 1): global attention everywhere, no extra norms.
    Gemma,
    /// `gemma2`: sliding and global layers alternate, post-norms, soft-capping.
    Gemma2,
    /// `gemma3`: five sliding layers per global one, q/k norms, two RoPE bases.
    Gemma3,
}

impl Family {
    /// Every family, in the order errors list them.
    pub const ALL: [Family; 6] = [
        Family::Llama,
        Family::Qwen2,
        Family::Qwen3,
        Family::Gemma,
        Family::Gemma2,
        Family::Gemma3,
    ];

    /// The family of a `general.architecture` value.
    pub fn of_architecture(arch: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.architecture() == arch)
    }

    /// Its `general.architecture` value (also the prefix of its metadata keys).
    pub fn architecture(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma => "gemma",
            Family::Gemma2 => "gemma2",
            Family::Gemma3 => "gemma3",
        }
    }

    fn is_gemma(self) -> bool {
        matches!(self, Family::Gemma | Family::Gemma2 | Family::Gemma3)
    }
}

/// The gated feed-forward's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) * up` (llama, Qwen).
    Silu,
    /// `gelu_tanh(gate) * up` (Gemma).
    GeluTanh,
}

/// Shape and constants from the GGUF metadata.
#[derive(Debug, Clone)]
pub struct Config {
    /// Architecture family.
    pub family: Family,
    /// Transformer blocks.
    pub layers: usize,
    /// Hidden width.
    pub hidden: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Dimensions rotated by RoPE (the first ones of each head).
    pub rope_dims: usize,
    /// RoPE base frequency.
    pub rope_base: f32,
    /// RMSNorm epsilon.
    pub eps: f32,
    /// Vocabulary size (rows of the output head).
    pub vocab: usize,
    /// The factor on every embedding row (Gemma: `sqrt(hidden)`).
    pub embed_scale: Option<f32>,
    /// The feed-forward's activation.
    pub activation: Activation,
    /// `Some(c)`: logits become `c * tanh(logit / c)` (Gemma 2).
    pub final_softcap: Option<f32>,
}

struct Layer {
    attn_norm: Vec<f32>,
    wq: QMatrix,
    wk: QMatrix,
    wv: QMatrix,
    wo: QMatrix,
    bq: Option<Vec<f32>>,
    bk: Option<Vec<f32>>,
    bv: Option<Vec<f32>>,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    /// Gemma 2 and 3: the norm of the attention's output before it is added.
    post_attn_norm: Option<Vec<f32>>,
    ffn_norm: Vec<f32>,
    /// Gemma 2 and 3: the norm of the feed-forward's output before it is added.
    post_ffn_norm: Option<Vec<f32>>,
    gate: QMatrix,
    up: QMatrix,
    down: QMatrix,
    /// Scale, window and soft-capping of its attention.
    scoring: Scoring,
    /// Which of the model's RoPE tables it rotates with (Gemma 3's local layers: 1).
    rope_table: usize,
}

/// How a pass multiplies activations by the weights.
#[derive(Debug, Clone, Copy)]
enum Products {
    /// Matrix x matrix in bf16 (a prompt).
    Matrix,
    /// The integer matrix x vector kernels, several rows at once (generated tokens).
    Integer,
}

/// One sequence's tokens in a pass and the KV cache they extend.
pub struct Run<'a> {
    /// The tokens, appended to the cache in order.
    pub tokens: &'a [u32],
    /// The sequence's cache.
    pub cache: &'a mut KvCache,
}

/// A loaded model (weights memory-mapped from the GGUF file).
pub struct Model {
    /// Its configuration.
    pub config: Config,
    isa: Isa,
    embeddings: QMatrix,
    layers: Vec<Layer>,
    out_norm: Vec<f32>,
    output: QMatrix,
    /// RoPE inverse frequencies, one per rotated pair: the global layers' table, then (Gemma
    /// 3) the sliding layers' own.
    inv_freq: Vec<Vec<f32>>,
}

/// Why a model could not be loaded: a message naming the tensor or key.
pub type LoadError = String;

fn matrix(content: &gguf_file::Content, map: &Arc<Mmap>, name: &str) -> Result<QMatrix, LoadError> {
    QMatrix::from_gguf(content, map, name)
}

impl Model {
    /// Every check that needs no weights: the family and each tensor's type, so an unsupported
    /// file fails before any work. Then maps the file and builds the model.
    pub fn load(
        content: &gguf_file::Content,
        map: Arc<Mmap>,
        family: Family,
    ) -> Result<Self, LoadError> {
        let md = &content.metadata;
        let arch = family.architecture();
        let get_u = |key: &str| -> Result<usize, LoadError> {
            md.get(&format!("{arch}.{key}"))
                .and_then(|v| {
                    v.to_u32()
                        .ok()
                        .map(|v| v as usize)
                        .or_else(|| v.to_u64().ok().map(|v| v as usize))
                })
                .ok_or_else(|| format!("metadata {arch}.{key} missing"))
        };
        let get_f = |key: &str| {
            md.get(&format!("{arch}.{key}"))
                .and_then(|v| v.to_f32().ok())
        };
        for (name, info) in &content.tensor_infos {
            if QType::of_ggml(info.ggml_dtype).is_none() {
                return Err(format!(
                    "tensor {name} has type {:?}, which the native backend cannot multiply \
                     (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K-Q6_K)",
                    info.ggml_dtype
                ));
            }
        }
        let layers = get_u("block_count")?;
        let hidden = get_u("embedding_length")?;
        let heads = get_u("attention.head_count")?;
        let kv_heads = get_u("attention.head_count_kv").unwrap_or(heads);
        if heads == 0 || kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(format!(
                "metadata: {heads} heads for {kv_heads} key/value heads"
            ));
        }
        let head_dim = get_u("attention.key_length").unwrap_or(hidden / heads);
        let rope_dims = get_u("rope.dimension_count")
            .unwrap_or(head_dim)
            .min(head_dim);
        if !rope_dims.is_multiple_of(2) || !head_dim.is_multiple_of(2) {
            return Err(format!(
                "metadata: odd head width {head_dim} or RoPE width {rope_dims}"
            ));
        }
        let gemma = family.is_gemma();
        let rope_base = get_f("rope.freq_base").unwrap_or(if family == Family::Gemma3 {
            1_000_000.0
        } else {
            10_000.0
        });
        let eps = get_f("attention.layer_norm_rms_epsilon").unwrap_or(1e-5);
        // Gemma's sliding layers: the window, and every how many layers one is global.
        let (window, pattern) = match family {
            Family::Gemma2 => (get_u("attention.sliding_window")?, 2),
            Family::Gemma3 => (
                get_u("attention.sliding_window")?,
                get_u("attention.sliding_window_type").unwrap_or(GEMMA3_SLIDING_PATTERN),
            ),
            _ => (0, 1),
        };
        if pattern == 0 {
            return Err("metadata: a sliding-window pattern of 0".into());
        }
        // Gemma 3's sliding layers rotate with their own base; linear RoPE scaling applies to
        // the global layers only.
        let local_base = match family {
            Family::Gemma3 => get_f("rope.freq_base_swa")
                .or_else(|| get_f("rope.local_freq_base"))
                .unwrap_or(10_000.0),
            _ => rope_base,
        };
        let linear_scaling = gemma
            && md
                .get(&format!("{arch}.rope.scaling.type"))
                .and_then(|v| v.to_string().ok())
                .is_some_and(|t| t == "linear");
        let global_scale = if linear_scaling {
            get_f("rope.scaling.factor").unwrap_or(1.0)
        } else {
            1.0
        };
        let mut scoring = Scoring::standard(head_dim);
        if gemma {
            // llama.cpp: the 27B models (Gemma 2: 46 layers, Gemma 3: 62) scale by
            // hidden / heads, the others by head_dim.
            let big = matches!(
                (family, layers),
                (Family::Gemma2, 46) | (Family::Gemma3, 62)
            );
            let width = if big { hidden / heads } else { head_dim };
            scoring.scale = (1.0 / (width as f64).sqrt()) as f32;
            scoring.softcap = get_f("attn_logit_softcapping");
        }
        let embeddings = matrix(content, &map, "token_embd.weight")?;
        if embeddings.cols != hidden {
            return Err(format!(
                "tensor token_embd.weight has width {}, metadata says {hidden}",
                embeddings.cols
            ));
        }
        let output = if content.tensor_infos.contains_key("output.weight") {
            matrix(content, &map, "output.weight")?
        } else {
            matrix(content, &map, "token_embd.weight")?
        };
        let vector = |name: &str| -> Result<Vec<f32>, LoadError> {
            let info = content
                .tensor_infos
                .get(name)
                .ok_or_else(|| format!("tensor {name} missing"))?;
            let n = info.shape.elem_count();
            let offset = (content.tensor_data_offset + info.offset) as usize;
            let qtype = QType::of_ggml(info.ggml_dtype).ok_or_else(|| {
                format!("tensor {name}: type {:?} not supported", info.ggml_dtype)
            })?;
            let m = QMatrix::new(map.clone(), offset, qtype, 1, n)
                .ok_or_else(|| format!("tensor {name}: {n} values do not fit the file"))?;
            let mut out = vec![0f32; n];
            m.dequantize_row(0, &mut out);
            Ok(out)
        };
        let optional = |name: &str| -> Result<Option<Vec<f32>>, LoadError> {
            if content.tensor_infos.contains_key(name) {
                vector(name).map(Some)
            } else {
                Ok(None)
            }
        };
        let q_width = heads * head_dim;
        let kv_width = kv_heads * head_dim;
        let mut blocks = Vec::with_capacity(layers);
        let post_norms = matches!(family, Family::Gemma2 | Family::Gemma3);
        for i in 0..layers {
            let p = |s: &str| format!("blk.{i}.{s}");
            // Gemma 2: every other layer is global; Gemma 3: every `pattern`-th; else all.
            let global = (i + 1).is_multiple_of(pattern);
            let layer = Layer {
                attn_norm: vector(&p("attn_norm.weight"))?,
                wq: matrix(content, &map, &p("attn_q.weight"))?,
                wk: matrix(content, &map, &p("attn_k.weight"))?,
                wv: matrix(content, &map, &p("attn_v.weight"))?,
                wo: matrix(content, &map, &p("attn_output.weight"))?,
                bq: optional(&p("attn_q.bias"))?,
                bk: optional(&p("attn_k.bias"))?,
                bv: optional(&p("attn_v.bias"))?,
                q_norm: optional(&p("attn_q_norm.weight"))?,
                k_norm: optional(&p("attn_k_norm.weight"))?,
                post_attn_norm: post_norms
                    .then(|| vector(&p("post_attention_norm.weight")))
                    .transpose()?,
                ffn_norm: vector(&p("ffn_norm.weight"))?,
                post_ffn_norm: post_norms
                    .then(|| vector(&p("post_ffw_norm.weight")))
                    .transpose()?,
                gate: matrix(content, &map, &p("ffn_gate.weight"))?,
                up: matrix(content, &map, &p("ffn_up.weight"))?,
                down: matrix(content, &map, &p("ffn_down.weight"))?,
                scoring: Scoring {
                    window: (!global && window > 0).then_some(window),
                    ..scoring
                },
                rope_table: usize::from(!global && gemma),
            };
            let shapes = [
                ("attn_q", &layer.wq, q_width, hidden),
                ("attn_k", &layer.wk, kv_width, hidden),
                ("attn_v", &layer.wv, kv_width, hidden),
                ("attn_output", &layer.wo, hidden, q_width),
                ("ffn_up", &layer.up, layer.gate.rows, hidden),
                ("ffn_gate", &layer.gate, layer.up.rows, hidden),
                ("ffn_down", &layer.down, hidden, layer.up.rows),
            ];
            for (name, m, rows, cols) in shapes {
                if m.rows != rows || m.cols != cols {
                    return Err(format!(
                        "tensor blk.{i}.{name}.weight is {} x {}, expected {rows} x {cols}",
                        m.rows, m.cols
                    ));
                }
            }
            for (name, norm, width) in [
                ("attn_norm", Some(&layer.attn_norm), hidden),
                ("ffn_norm", Some(&layer.ffn_norm), hidden),
                ("post_attention_norm", layer.post_attn_norm.as_ref(), hidden),
                ("post_ffw_norm", layer.post_ffn_norm.as_ref(), hidden),
                ("attn_q_norm", layer.q_norm.as_ref(), head_dim),
                ("attn_k_norm", layer.k_norm.as_ref(), head_dim),
                ("attn_q.bias", layer.bq.as_ref(), q_width),
                ("attn_k.bias", layer.bk.as_ref(), kv_width),
                ("attn_v.bias", layer.bv.as_ref(), kv_width),
            ] {
                if let Some(v) = norm
                    && v.len() != width
                {
                    return Err(format!(
                        "tensor blk.{i}.{name} has {} values, expected {width}",
                        v.len()
                    ));
                }
            }
            blocks.push(layer);
        }
        let out_norm = vector("output_norm.weight")?;
        if output.cols != hidden || out_norm.len() != hidden {
            return Err(format!(
                "output head is {} wide, hidden width {hidden}",
                output.cols
            ));
        }
        let table = |base: f32, scale: f32| -> Vec<f32> {
            (0..rope_dims / 2)
                .map(|i| 1f32 / base.powf((2 * i) as f32 / rope_dims as f32) / scale)
                .collect()
        };
        let mut inv_freq = vec![table(rope_base, global_scale)];
        if gemma {
            inv_freq.push(table(local_base, 1.0));
        }
        Ok(Self {
            config: Config {
                family,
                layers,
                hidden,
                heads,
                kv_heads,
                head_dim,
                rope_dims,
                rope_base,
                eps,
                vocab: output.rows,
                embed_scale: gemma.then(|| (hidden as f64).sqrt() as f32),
                activation: if gemma {
                    Activation::GeluTanh
                } else {
                    Activation::Silu
                },
                final_softcap: if gemma {
                    get_f("final_logit_softcapping")
                } else {
                    None
                },
            },
            isa: Isa::detect(),
            embeddings,
            layers: blocks,
            out_norm,
            output,
            inv_freq,
        })
    }

    /// An empty cache for this model.
    pub fn new_cache(&self) -> KvCache {
        KvCache::new(
            self.config.layers,
            self.config.kv_heads,
            self.config.head_dim,
        )
    }

    fn embed(&self, tokens: &[u32], x: &mut [f32]) -> Result<(), String> {
        let d = self.config.hidden;
        for (t, &id) in tokens.iter().enumerate() {
            if id as usize >= self.embeddings.rows {
                return Err(format!(
                    "token id {id} is outside the {}-token vocabulary",
                    self.embeddings.rows
                ));
            }
            let row = &mut x[t * d..(t + 1) * d];
            self.embeddings.dequantize_row(id as usize, row);
            if let Some(scale) = self.config.embed_scale {
                for v in row {
                    *v *= scale;
                }
            }
        }
        Ok(())
    }

    /// Runs `tokens` (appended to `cache`) through the matrix x matrix path; returns the logits
    /// of the last token when `logits` is true (else an empty vector).
    pub fn prompt(
        &self,
        tokens: &[u32],
        cache: &mut KvCache,
        logits: bool,
    ) -> Result<Vec<f32>, String> {
        if tokens.is_empty() {
            return Err("empty prompt".into());
        }
        let x = self.forward(&mut [Run { tokens, cache }], Products::Matrix)?;
        if !logits {
            return Ok(Vec::new());
        }
        Ok(self.logits(&x[x.len() - self.config.hidden..]))
    }

    /// Runs one token at the end of `cache` through the matrix x vector path; returns its
    /// logits.
    pub fn step(&self, token: u32, cache: &mut KvCache) -> Result<Vec<f32>, String> {
        self.steps(&[token], cache)
    }

    /// Runs `tokens` at the end of `cache` through the matrix x vector path, each weight row
    /// read once for all of them; returns the logits of the last. The keys, values and logits
    /// are bit for bit those of one [`Model::step`] per token.
    pub fn steps(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Vec<f32>, String> {
        let mut logits = self.steps_many(&mut [Run { tokens, cache }])?;
        Ok(logits.pop().unwrap_or_default())
    }

    /// [`Model::steps`] for several sequences at once, each with its own cache: every weight
    /// row is read once for all their tokens, which is what makes decoding N sequences together
    /// cheaper than N one after another. Returns each run's last logits, bit for bit those of
    /// [`Model::steps`] on that run alone.
    pub fn steps_many(&self, runs: &mut [Run<'_>]) -> Result<Vec<Vec<f32>>, String> {
        if runs.is_empty() || runs.iter().any(|r| r.tokens.is_empty()) {
            return Err("no token to run".into());
        }
        let x = self.forward(runs, Products::Integer)?;
        let d = self.config.hidden;
        let mut last = Vec::with_capacity(runs.len() * d);
        let mut end = 0;
        for run in runs.iter() {
            end += run.tokens.len();
            last.extend_from_slice(&x[(end - 1) * d..end * d]);
        }
        Ok(self.logits_many(&last))
    }

    /// The transformer blocks over each run's tokens at the end of its cache (their keys and
    /// values appended to it); returns the last block's output, `[tokens of all runs][hidden]`
    /// in run order. Each run attends to its own cache only.
    fn forward(&self, runs: &mut [Run<'_>], products: Products) -> Result<Vec<f32>, String> {
        let c = &self.config;
        let (d, qw, kvw) = (c.hidden, c.heads * c.head_dim, c.kv_heads * c.head_dim);
        let tokens: Vec<u32> = runs.iter().flat_map(|r| r.tokens.iter().copied()).collect();
        let n = tokens.len();
        // Per token: its run and its position in that run's sequence.
        let mut positions = Vec::with_capacity(n);
        let mut spans = Vec::with_capacity(runs.len());
        for run in runs.iter() {
            let (first, start) = (positions.len(), run.cache.len());
            positions.extend(start..start + run.tokens.len());
            spans.push((first, positions.len(), start));
        }
        let mut x = vec![0f32; n * d];
        self.embed(&tokens, &mut x)?;
        let mut h = vec![0f32; n * d];
        let mut q = vec![0f32; n * qw];
        let mut k = vec![0f32; n * kvw];
        let mut v = vec![0f32; n * kvw];
        let mut attn = vec![0f32; n * qw];
        let mut o = vec![0f32; n * d];
        let (mut gate, mut up) = (Vec::new(), Vec::new());
        let mut acts: Vec<Q8Activation> = match products {
            Products::Matrix => Vec::new(),
            Products::Integer => (0..n).map(|_| Q8Activation::new()).collect(),
        };
        for (li, layer) in self.layers.iter().enumerate() {
            rms_norm_rows(&x, &layer.attn_norm, c.eps, &mut h);
            self.project(
                products,
                &[&layer.wq, &layer.wk, &layer.wv],
                &h,
                &mut acts,
                &mut [&mut q[..], &mut k[..], &mut v[..]],
            );
            for (t, &pos) in positions.iter().enumerate() {
                self.finish_qkv(
                    layer,
                    pos,
                    &mut q[t * qw..(t + 1) * qw],
                    &mut k[t * kvw..(t + 1) * kvw],
                    &mut v[t * kvw..(t + 1) * kvw],
                );
            }
            for (run, &(first, end, start)) in runs.iter_mut().zip(&spans) {
                run.cache
                    .append(li, &k[first * kvw..end * kvw], &v[first * kvw..end * kvw]);
                attention(
                    run.cache,
                    li,
                    c.heads,
                    &q[first * qw..end * qw],
                    start,
                    layer.scoring,
                    &mut attn[first * qw..end * qw],
                );
            }
            self.project(products, &[&layer.wo], &attn, &mut acts, &mut [&mut o[..]]);
            if let Some(norm) = &layer.post_attn_norm {
                rms_norm_each(&mut o, norm, c.eps);
            }
            add_in_place(&mut x, &o);
            rms_norm_rows(&x, &layer.ffn_norm, c.eps, &mut h);
            // Every cell is written by the products below.
            gate.resize(n * layer.gate.rows, 0.0);
            up.resize(n * layer.up.rows, 0.0);
            self.project(
                products,
                &[&layer.gate, &layer.up],
                &h,
                &mut acts,
                &mut [&mut gate[..], &mut up[..]],
            );
            match c.activation {
                Activation::Silu => silu_mul(&mut gate, &up),
                Activation::GeluTanh => {
                    gelu_in_place(&mut gate, GeluKind::Tanh);
                    for (g, u) in gate.iter_mut().zip(&up) {
                        *g *= u;
                    }
                }
            }
            self.project(
                products,
                &[&layer.down],
                &gate,
                &mut acts,
                &mut [&mut o[..]],
            );
            if let Some(norm) = &layer.post_ffn_norm {
                rms_norm_each(&mut o, norm, c.eps);
            }
            add_in_place(&mut x, &o);
        }
        Ok(x)
    }

    /// `outs[i] = input x mats[i]` for the rows of `input` (`[n][cols]`): bf16 matrix
    /// products, or the integer kernels on `input` quantized into `acts` (one per row).
    fn project(
        &self,
        products: Products,
        mats: &[&QMatrix],
        input: &[f32],
        acts: &mut [Q8Activation],
        outs: &mut [&mut [f32]],
    ) {
        match products {
            Products::Matrix => {
                let n = input.len() / mats[0].cols;
                for (m, out) in mats.iter().zip(outs.iter_mut()) {
                    matmul(m, input, n, out);
                }
            }
            Products::Integer => {
                let width = input.len() / acts.len();
                for (act, row) in acts.iter_mut().zip(input.chunks_exact(width)) {
                    act.quantize(row);
                }
                matvec_many(self.isa, mats, input, acts, outs);
            }
        }
    }

    /// Biases, per-head norms and RoPE on one token's q, k, v.
    fn finish_qkv(&self, layer: &Layer, pos: usize, q: &mut [f32], k: &mut [f32], v: &mut [f32]) {
        let c = &self.config;
        for (vals, bias) in [
            (&mut *q, &layer.bq),
            (&mut *k, &layer.bk),
            (&mut *v, &layer.bv),
        ] {
            if let Some(b) = bias {
                add_in_place(vals, b);
            }
        }
        if let Some(norm) = &layer.q_norm {
            for head in q.chunks_exact_mut(c.head_dim) {
                rms_norm_in_place(head, norm, c.eps);
            }
        }
        if let Some(norm) = &layer.k_norm {
            for head in k.chunks_exact_mut(c.head_dim) {
                rms_norm_in_place(head, norm, c.eps);
            }
        }
        let neox = c.family != Family::Llama;
        for head in q
            .chunks_exact_mut(c.head_dim)
            .chain(k.chunks_exact_mut(c.head_dim))
        {
            self.rope(head, pos, neox, &self.inv_freq[layer.rope_table]);
        }
    }

    fn rope(&self, head: &mut [f32], pos: usize, neox: bool, inv_freq: &[f32]) {
        let half = self.config.rope_dims / 2;
        for (i, &f) in inv_freq.iter().enumerate() {
            let angle = pos as f32 * f;
            let (sin, cos) = angle.sin_cos();
            let (a, b) = if neox {
                (i, i + half)
            } else {
                (2 * i, 2 * i + 1)
            };
            let (x0, x1) = (head[a], head[b]);
            head[a] = x0 * cos - x1 * sin;
            head[b] = x0 * sin + x1 * cos;
        }
    }

    fn logits(&self, last: &[f32]) -> Vec<f32> {
        self.logits_many(last).pop().unwrap_or_default()
    }

    /// The logits of each row of `last` (`[rows][hidden]`), the output head's weights read
    /// once for all; each row's are those of [`matvec`](crate::kernels::quant::matvec) on it alone.
    fn logits_many(&self, last: &[f32]) -> Vec<Vec<f32>> {
        let rows = last.len() / self.config.hidden;
        let mut h = vec![0f32; last.len()];
        rms_norm_rows(last, &self.out_norm, self.config.eps, &mut h);
        let acts: Vec<Q8Activation> = h
            .chunks_exact(self.config.hidden)
            .map(Q8Activation::of)
            .collect();
        let vocab = self.output.rows;
        let mut logits = vec![0f32; rows * vocab];
        matvec_many(self.isa, &[&self.output], &h, &acts, &mut [&mut logits[..]]);
        if let Some(cap) = self.config.final_softcap {
            for l in &mut logits {
                *l = (*l / cap).tanh() * cap;
            }
        }
        logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }
}

fn rms_norm_in_place(x: &mut [f32], w: &[f32], eps: f32) {
    let mean = dot(x, x) / x.len() as f32;
    let inv = 1.0 / (mean + eps).sqrt();
    for (v, w) in x.iter_mut().zip(w) {
        *v = *v * inv * w;
    }
}

/// [`rms_norm_in_place`] on each row of `x` (rows as wide as `w`).
fn rms_norm_each(x: &mut [f32], w: &[f32], eps: f32) {
    for row in x.chunks_exact_mut(w.len()) {
        rms_norm_in_place(row, w, eps);
    }
}

fn rms_norm_rows(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let d = w.len();
    for (row, o) in x.chunks_exact(d).zip(out.chunks_exact_mut(d)) {
        o.copy_from_slice(row);
        rms_norm_in_place(o, w, eps);
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    if x.len() == y.len() {
        for (a, b) in x.iter_mut().zip(y) {
            *a += b;
        }
    } else {
        // A bias added to each row.
        for row in x.chunks_exact_mut(y.len()) {
            for (a, b) in row.iter_mut().zip(y) {
                *a += b;
            }
        }
    }
}

fn silu_mul(gate: &mut [f32], up: &[f32]) {
    for (g, u) in gate.iter_mut().zip(up) {
        *g = *g / (1.0 + exp_fast(-*g)) * u;
    }
}
