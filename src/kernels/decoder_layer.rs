//! The CPU fast path of a transformer-decoder layer (the Mistral, Qwen2/Qwen3, Gemma-2/3 and
//! EuroBERT encoders). Run through candle's generic operations, a bf16 Qwen3-0.6B-shaped layer
//! spent most of its time between the projections: every RMSNorm, RoPE, head transpose, dtype
//! conversion, mask and softmax was its own pass over freshly allocated tensors, and PyTorch
//! (oneDNN) ran about three times faster on the same AMX machine.
//!
//! Here a layer is a handful of passes over plain `f32` rows:
//! 1. RMSNorm of the input rows;
//! 2. one product for Q, K and V together (bias folded into the destination), then per row
//!    the per-head Q/K norms (Qwen3, Gemma-3) and RoPE in place;
//! 3. attention per (batch row, query head) in parallel, over the `len x len` block of real
//!    positions only (padding is skipped, not masked), with the causal / sliding-window range,
//!    scale and soft-cap applied to each query's logits before its softmax;
//! 4. the output projection with the residual folded into its destination (Gemma: normed
//!    first, then added);
//! 5. RMSNorm, one product for gate and up together, the gated activation, and the down
//!    projection with the residual folded in (Gemma: normed first).
//!
//! The residual stream and every sum stay f32. A bf16 model's projections round their inputs
//! to bf16 and multiply exact bf16 products into f32 sums (`kernels::dense`), where PyTorch's
//! bf16 forward pass also rounds every intermediate result to bf16: the vectors stay as close
//! to an f32 forward pass as PyTorch's, or closer. Results do not depend on the thread count or
//! on a row's batch neighbours; rows past a batch row's length are computed but never read.

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use super::aligned::LineVec;
use super::amx;
use super::bert_layer::{HeadGeometry, RotaryTable, attend};
use super::bf16::{pack_panels, round_row};
use super::dense::{Dense, DenseSource};
use super::ops::{AttnMask, GeluKind, exp_fast, gelu_in_place, softmax_row};

/// The activation of a gated MLP, `down(act(gate(x)) * up(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GatedActivation {
    /// SiLU (Mistral, Qwen, EuroBERT).
    Silu,
    /// GELU, tanh approximation (Gemma).
    GeluTanh,
}

/// Head counts and the RMSNorm epsilon of a layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DecoderShape {
    /// Query heads.
    pub(crate) heads: usize,
    /// Key/value heads (grouped-query attention).
    pub(crate) kv_heads: usize,
    /// Width of one head.
    pub(crate) head_dim: usize,
    /// RMSNorm epsilon.
    pub(crate) eps: f32,
}

/// One layer's weights as the model file holds them; the norm weights are the factors the
/// normalised values are multiplied by (a Gemma `w` already as `1 + w`).
pub(crate) struct DecoderLayerWeights {
    /// Q, K, V and output projections.
    pub(crate) attention: [DenseSource; 4],
    /// Gate, up and down projections.
    pub(crate) mlp: [DenseSource; 3],
    /// Before attention.
    pub(crate) input_norm: Tensor,
    /// Before the MLP (Mistral, Qwen) or on the attention output (Gemma).
    pub(crate) post_attention_norm: Tensor,
    /// Gemma: before the MLP and on its output.
    pub(crate) feed_forward_norms: Option<[Tensor; 2]>,
    /// Per-head norms of queries and keys (Qwen3, Gemma-3).
    pub(crate) qk_norms: Option<[Tensor; 2]>,
}

/// Rows per block of the layer's steps, per thread: the AMX kernel's task size, so a block
/// gives every thread one task and its intermediates stay in cache.
const ROWS_PER_THREAD: usize = 128;

/// Whether a model whose weights are `dtype` takes this path on the CPU: f32 always, bf16
/// where the CPU multiplies bf16 natively (AVX512-BF16; elsewhere the weights would be widened
/// to f32, twice their memory).
pub(crate) fn supports(dtype: DType) -> bool {
    dtype == DType::F32 || (dtype == DType::BF16 && Dense::keeps_bf16())
}

/// One decoder layer laid out for the CPU fast path.
pub(crate) struct CpuDecoderLayer {
    input_norm: Vec<f32>,
    post_attention_norm: Vec<f32>,
    feed_forward_norms: Option<[Vec<f32>; 2]>,
    qk_norms: Option<[Vec<f32>; 2]>,
    qkv: Dense,
    out: Dense,
    gate_up: Dense,
    down: Dense,
    shape: DecoderShape,
    activation: GatedActivation,
    /// Attention products in bf16 on AMX tiles (a bf16 model whose projections run there).
    attention_on_tiles: bool,
}

impl CpuDecoderLayer {
    /// Packs a layer; fails if the weights' shapes do not fit `shape`. `bf16_model`: the model
    /// runs in bf16, so that quantized projections (dequantized to bf16 for the tiles) take
    /// their attention there too, as bf16 weights do.
    pub(crate) fn new(
        weights: DecoderLayerWeights,
        shape: DecoderShape,
        activation: GatedActivation,
        bf16_model: bool,
    ) -> candle_core::Result<Self> {
        let DecoderShape {
            heads,
            kv_heads,
            head_dim,
            ..
        } = shape;
        let [q, k, v, o] = weights.attention;
        let [gate, up, down] = weights.mlp;
        let h = q.dims()?.1;
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) || !head_dim.is_multiple_of(2) {
            candle_core::bail!("inconsistent head counts or odd head size");
        }
        let want = |source: &DenseSource, dims: (usize, usize), what: &str| {
            let found = source.dims()?;
            if found != dims {
                candle_core::bail!("{what}: weight {found:?}, expected {dims:?}");
            }
            Ok(())
        };
        want(&q, (heads * head_dim, h), "q_proj")?;
        want(&k, (kv_heads * head_dim, h), "k_proj")?;
        want(&v, (kv_heads * head_dim, h), "v_proj")?;
        want(&o, (h, heads * head_dim), "o_proj")?;
        let inner = gate.dims()?.0;
        want(&gate, (inner, h), "gate_proj")?;
        want(&up, (inner, h), "up_proj")?;
        want(&down, (h, inner), "down_proj")?;
        let vector = |t: &Tensor, len: usize, what: &str| -> candle_core::Result<Vec<f32>> {
            let values = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            if values.len() != len {
                candle_core::bail!("{what}: {} values, expected {len}", values.len());
            }
            Ok(values)
        };
        let pair = |norms: &Option<[Tensor; 2]>, len: usize, what: &str| {
            norms
                .as_ref()
                .map(|[a, b]| {
                    Ok::<_, candle_core::Error>([vector(a, len, what)?, vector(b, len, what)?])
                })
                .transpose()
        };
        let qkv = Dense::stacked(&[q, k, v])?;
        let attention_on_tiles = (qkv.bf16_on_tiles() || bf16_model && qkv.quantized_on_tiles())
            && head_dim.is_multiple_of(32);
        Ok(Self {
            input_norm: vector(&weights.input_norm, h, "input norm")?,
            post_attention_norm: vector(&weights.post_attention_norm, h, "post-attention norm")?,
            feed_forward_norms: pair(&weights.feed_forward_norms, h, "feed-forward norm")?,
            qk_norms: pair(&weights.qk_norms, head_dim, "q/k norm")?,
            qkv,
            out: Dense::from_source(&o)?,
            gate_up: Dense::stacked(&[gate, up])?,
            down: Dense::from_source(&down)?,
            shape,
            activation,
            attention_on_tiles,
        })
    }

    /// The layer on `x` in place: right-padded rows `[batch, seq, h]` flattened (`seq` is
    /// `mask.query_len`, the real lengths `mask.key_lengths`); `rotary` covers `seq`
    /// positions. `work` holds the intermediate buffers from layer to layer.
    pub(crate) fn forward(
        &self,
        x: &mut [f32],
        rotary: &RotaryTable,
        mask: &AttnMask,
        work: &mut DecoderWorkspace,
    ) -> candle_core::Result<()> {
        let DecoderShape {
            heads,
            kv_heads,
            head_dim,
            eps,
        } = self.shape;
        let h = self.input_norm.len();
        let seq = mask.query_len;
        if seq == 0 || !x.len().is_multiple_of(seq * h) {
            candle_core::bail!("decoder layer: {} values for rows of {seq} x {h}", x.len());
        }
        let batch = x.len() / (seq * h);
        if mask.key_lengths.len() != batch {
            candle_core::bail!(
                "decoder layer: {} lengths for {batch} rows",
                mask.key_lengths.len()
            );
        }
        if rotary.len < seq || rotary.half * 2 != head_dim {
            candle_core::bail!("decoder layer: rotary tables do not cover {seq} positions");
        }
        let (qw, kvw) = (heads * head_dim, kv_heads * head_dim);
        let DecoderWorkspace {
            normed,
            qkv,
            ctx,
            gate_up,
            hidden,
            next,
            panels: [qkv_panels, out_panels, gate_up_panels, down_panels],
        } = work;
        // Quantized weights on tiles dequantized once for the whole batch.
        let qkv_weight = self.qkv.stage(qkv_panels);
        let out_weight = self.out.stage(out_panels);
        let gate_up_weight = self.gate_up.stage(gate_up_panels);
        let down_weight = self.down.stage(down_panels);

        // The layer a block of rows at a time (whole texts for attention), so that each step's
        // output is still in cache when the next reads it. The blocks depend on the thread
        // count, so they are used only where a row's product does not depend on the rows
        // beside it; `gemm`'s f32 products take the whole batch at once, and so do quantized
        // weights off the tiles, which every product dequantizes again.
        let dense = [&qkv_weight, &out_weight, &gate_up_weight, &down_weight];
        let block_rows = if dense.iter().all(|d| d.rows_independent())
            && !dense.iter().any(|d| d.dequantizes_per_product())
        {
            ROWS_PER_THREAD * rayon::current_num_threads().max(2)
        } else {
            (x.len() / h).max(1)
        };
        // Attention a few batch rows (texts) at a time, so Q|K|V stays in cache.
        let texts_per_block = (block_rows / seq).max(1);
        for (block, rows) in x.chunks_mut(texts_per_block * seq * h).enumerate() {
            let cm = rows.len() / h;
            let first_text = block * texts_per_block;
            rms_norm_into(rows, &self.input_norm, eps, normed);
            qkv_weight.forward_into(normed, cm, None, qkv);
            qkv.par_chunks_mut(qw + 2 * kvw)
                .enumerate()
                .for_each(|(r, row)| {
                    let (q, rest) = row.split_at_mut(qw);
                    let k = &mut rest[..kvw];
                    if let Some([q_norm, k_norm]) = &self.qk_norms {
                        for head in q.chunks_exact_mut(head_dim) {
                            rms_norm_row(head, q_norm, eps);
                        }
                        for head in k.chunks_exact_mut(head_dim) {
                            rms_norm_row(head, k_norm, eps);
                        }
                    }
                    rotary.rotate(q, r % seq);
                    rotary.rotate(k, r % seq);
                });
            self.attention(qkv, first_text..first_text + cm / seq, mask, ctx);
            match &self.feed_forward_norms {
                None => out_weight.add_product(rows, ctx, cm),
                Some(_) => {
                    out_weight.forward_into(ctx, cm, None, next);
                    add_normed(rows, next, &self.post_attention_norm, eps);
                }
            }
        }
        let mlp_norm = match &self.feed_forward_norms {
            Some([pre, _]) => pre,
            None => &self.post_attention_norm,
        };
        // The MLP a block of rows at a time: its widest intermediate (gate | up) stays a few
        // MiB instead of `[m, 2 inner]`.
        let inner = self.gate_up.out_features / 2;
        for rows in x.chunks_mut(block_rows * h) {
            let cm = rows.len() / h;
            rms_norm_into(rows, mlp_norm, eps, normed);
            gate_up_weight.forward_into(normed, cm, None, gate_up);
            hidden.resize_zeroed(cm * inner);
            hidden
                .par_chunks_mut(inner)
                .zip(gate_up.par_chunks(2 * inner))
                .for_each(|(out, row)| {
                    let (gate, up) = row.split_at(inner);
                    match self.activation {
                        GatedActivation::Silu => silu_gate(out, gate, up),
                        GatedActivation::GeluTanh => {
                            out.copy_from_slice(gate);
                            gelu_in_place(out, GeluKind::Tanh);
                            for (o, u) in out.iter_mut().zip(up) {
                                *o *= u;
                            }
                        }
                    }
                });
            match &self.feed_forward_norms {
                None => down_weight.add_product(rows, hidden, cm),
                Some([_, post]) => {
                    down_weight.forward_into(hidden, cm, None, next);
                    add_normed(rows, next, post, eps);
                }
            }
        }
        Ok(())
    }

    /// The attention context `[texts * seq, heads * head_dim]` of the rotated Q|K|V rows of
    /// batch rows `texts`.
    fn attention(
        &self,
        qkv: &[f32],
        texts: std::ops::Range<usize>,
        mask: &AttnMask,
        ctx: &mut LineVec<f32>,
    ) {
        let batch = texts.len();
        let DecoderShape {
            heads,
            kv_heads,
            head_dim,
            ..
        } = self.shape;
        let seq = mask.query_len;
        let (qw, kvw) = (heads * head_dim, kv_heads * head_dim);
        let width = qw + 2 * kvw;
        let group = heads / kv_heads;
        let parts: Vec<(usize, usize, Vec<f32>)> = (0..batch * heads)
            .into_par_iter()
            .map(|task| {
                let (b, head) = (task / heads, task % heads);
                let text = texts.start + b;
                let len = mask.key_lengths[text].min(seq);
                let row = &qkv[b * seq * width..(b + 1) * seq * width];
                let kv = head / group;
                let geometry = HeadGeometry {
                    len,
                    width,
                    columns: [
                        head * head_dim,
                        qw + kv * head_dim,
                        qw + kvw + kv * head_dim,
                    ],
                    out_stride: head_dim,
                    out_col: 0,
                    head_dim,
                    scale: mask.scale,
                };
                let shape = |q: usize, logits: &mut [f32]| {
                    let (lo, hi) = mask.range(text, q);
                    if let Some(cap) = mask.softcap {
                        for logit in &mut logits[lo..hi] {
                            *logit = (*logit / cap).tanh() * cap;
                        }
                    }
                    (lo, hi)
                };
                let out = if self.attention_on_tiles {
                    attend_on_tiles(row, &geometry, shape)
                } else {
                    let mut scores = vec![0f32; len * len];
                    let mut out = vec![0f32; len * head_dim];
                    attend(row, &geometry, &mut scores, &mut out, shape);
                    out
                };
                (b, head, out)
            })
            .collect();
        // Every value is written below: a head's context for its text's real rows, zeros for
        // the padding rows after them (no need to clear the whole buffer first).
        ctx.resize_for_overwrite(batch * seq * qw);
        for (b, head, out) in parts {
            let real = out.len() / head_dim;
            for r in 0..seq {
                let at = (b * seq + r) * qw + head * head_dim;
                let slot = &mut ctx[at..at + head_dim];
                if r < real {
                    slot.copy_from_slice(&out[r * head_dim..(r + 1) * head_dim]);
                } else {
                    slot.fill(0.0);
                }
            }
        }
    }
}

/// [`attend`] for a bf16 model on AMX tiles: Q, K, the probabilities and V rounded to bf16 (as
/// a bf16 forward pass holds them), exact products, f32 sums, the softmax in f32. Returns the
/// `[len, head_dim]` context; `geometry.head_dim` must be a multiple of 32.
fn attend_on_tiles(
    row: &[f32],
    geometry: &HeadGeometry,
    mut shape: impl FnMut(usize, &mut [f32]) -> (usize, usize),
) -> Vec<f32> {
    let &HeadGeometry {
        len,
        width,
        columns: [q_col, k_col, v_col],
        head_dim,
        scale,
        ..
    } = geometry;
    let mut out = vec![0f32; len * head_dim];
    if len == 0 {
        return out;
    }
    let gather = |col: usize| -> Vec<f32> {
        let mut out = Vec::with_capacity(len * head_dim);
        for i in 0..len {
            out.extend_from_slice(&row[i * width + col..i * width + col + head_dim]);
        }
        out
    };
    let queries = gather(q_col);
    // Keys are rounded to bf16 straight from their rows (no f32 copy first).
    let mut keys = vec![half::bf16::ZERO; len * head_dim];
    for (i, key) in keys.chunks_exact_mut(head_dim).enumerate() {
        round_row(&row[i * width + k_col..][..head_dim], key);
    }
    let mut scores = vec![0f32; len * len];
    amx::bf16_product(
        &pack_panels(&keys, len, head_dim),
        &queries,
        (len, len, head_dim),
        amx::Start::Zero,
        &mut scores,
    );
    // Keys padded to whole tile steps: the padding's probabilities and values are zero.
    let padded = len.div_ceil(32) * 32;
    let mut probs = vec![0f32; len * padded];
    for (q, (logits, p)) in scores
        .chunks_exact_mut(len)
        .zip(probs.chunks_exact_mut(padded))
        .enumerate()
    {
        for logit in logits.iter_mut() {
            *logit *= scale;
        }
        let (lo, hi) = shape(q, logits);
        let (lo, hi) = (lo.min(hi).min(len), hi.min(len));
        if lo < hi {
            softmax_row(&mut logits[lo..hi]);
            p[lo..hi].copy_from_slice(&logits[lo..hi]);
        }
    }
    // V as the weight of `probs x V`: panels of 32 value columns, pairs of keys.
    let pairs = padded / 2;
    let mut values = LineVec::<u32>::zeroed(head_dim.div_ceil(32) * pairs * 32);
    for (panel, packed) in values.chunks_exact_mut(pairs * 32).enumerate() {
        for key in 0..len {
            let at = &row[key * width + v_col + panel * 32..][..32];
            let (pair, shift) = (key / 2, 16 * (key % 2));
            for (lane, &v) in at.iter().enumerate() {
                packed[pair * 32 + lane] |= u32::from(half::bf16::from_f32(v).to_bits()) << shift;
            }
        }
    }
    amx::bf16_product(
        &values,
        &probs,
        (len, head_dim, padded),
        amx::Start::Zero,
        &mut out,
    );
    out
}

/// The buffers a layer's steps write, kept from layer to layer so that each forward pass
/// touches fresh memory once rather than once per layer.
#[derive(Default)]
pub(crate) struct DecoderWorkspace {
    normed: LineVec<f32>,
    qkv: LineVec<f32>,
    ctx: LineVec<f32>,
    gate_up: LineVec<f32>,
    hidden: LineVec<f32>,
    next: LineVec<f32>,
    /// Q|K|V, output, gate|up and down weights dequantized to bf16 panels for a batch
    /// (quantized weights on AMX tiles only).
    panels: [LineVec<u32>; 4],
}

/// RMSNorm of every `weight.len()`-wide row of `x`.
pub(crate) fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    rms_norm_to(x, weight, eps, &mut out);
    out
}

/// [`rms_norm`] into `out` (its memory reused).
fn rms_norm_into(x: &[f32], weight: &[f32], eps: f32, out: &mut LineVec<f32>) {
    out.resize_zeroed(x.len());
    rms_norm_to(x, weight, eps, out);
}

/// [`rms_norm`] into `out`, of `x`'s length.
fn rms_norm_to(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    out.par_chunks_mut(weight.len())
        .zip(x.par_chunks(weight.len()))
        .for_each(|(dst, row)| rms_norm_row_to(row, dst, weight, eps));
}

/// `row * rsqrt(mean(row^2) + eps) * weight` in place (upstream's RMSNorm), with an AVX-512
/// copy of the same code where the CPU has it (no FMA contraction: both give the same bits).
fn rms_norm_row(row: &mut [f32], weight: &[f32], eps: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX512F (checked just above).
            return unsafe { rms_norm_row_avx512(row, weight, eps) };
        }
    }
    let scale = inverse_rms(row, eps);
    scale_row(row, scale, weight);
}

/// [`rms_norm_row`] of `row` written to `dst` (the same bits).
fn rms_norm_row_to(row: &[f32], dst: &mut [f32], weight: &[f32], eps: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX512F (checked just above).
            return unsafe { rms_norm_row_to_avx512(row, dst, weight, eps) };
        }
    }
    let scale = inverse_rms(row, eps);
    scale_row_to(row, dst, scale, weight);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn rms_norm_row_avx512(row: &mut [f32], weight: &[f32], eps: f32) {
    let scale = inverse_rms(row, eps);
    scale_row(row, scale, weight);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn rms_norm_row_to_avx512(row: &[f32], dst: &mut [f32], weight: &[f32], eps: f32) {
    let scale = inverse_rms(row, eps);
    scale_row_to(row, dst, scale, weight);
}

/// `rsqrt(mean(row^2) + eps)`, the squares summed in sixteen running sums (so that they
/// vectorise), then in a fixed order.
#[inline(always)]
fn inverse_rms(row: &[f32], eps: f32) -> f32 {
    let mut lanes = [0f32; 16];
    let chunks = row.chunks_exact(16);
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    for chunk in chunks {
        for (lane, v) in lanes.iter_mut().zip(chunk) {
            *lane += v * v;
        }
    }
    let mean_square = (lanes.iter().sum::<f32>() + tail) / row.len() as f32;
    1.0 / (mean_square + eps).sqrt()
}

#[inline(always)]
fn scale_row(row: &mut [f32], scale: f32, weight: &[f32]) {
    for (v, w) in row.iter_mut().zip(weight) {
        *v = *v * scale * w;
    }
}

#[inline(always)]
fn scale_row_to(row: &[f32], dst: &mut [f32], scale: f32, weight: &[f32]) {
    for ((d, v), w) in dst.iter_mut().zip(row).zip(weight) {
        *d = v * scale * w;
    }
}

/// `out = silu(gate) * up` with [`exp_fast`] (within 2 ulp of `expf`), vectorised; an
/// AVX-512 copy of the same code where the CPU has it.
fn silu_gate(out: &mut [f32], gate: &[f32], up: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX512F (checked just above).
            return unsafe { silu_gate_avx512(out, gate, up) };
        }
    }
    silu_gate_portable(out, gate, up);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn silu_gate_avx512(out: &mut [f32], gate: &[f32], up: &[f32]) {
    silu_gate_portable(out, gate, up);
}

#[inline(always)]
fn silu_gate_portable(out: &mut [f32], gate: &[f32], up: &[f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
        *o = g / (1.0 + exp_fast(-g)) * u;
    }
}

/// `x += rms_norm(y)`, row by row (`y` normalised in place).
fn add_normed(x: &mut [f32], y: &mut [f32], weight: &[f32], eps: f32) {
    x.par_chunks_mut(weight.len())
        .zip(y.par_chunks_mut(weight.len()))
        .for_each(|(residual, row)| {
            rms_norm_row(row, weight, eps);
            for (r, v) in residual.iter_mut().zip(row.iter()) {
                *r += v;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::bf16::tests::random;
    use candle_core::Device;
    use candle_nn::Linear;

    fn linear(n: usize, k: usize, seed: u64, dtype: DType) -> Linear {
        let values: Vec<f32> = random(n * k, seed).iter().map(|v| v * 0.5).collect();
        let weight = Tensor::from_vec(values, (n, k), &Device::Cpu)
            .and_then(|w| w.to_dtype(dtype))
            .unwrap();
        Linear::new(weight, None)
    }

    const SHAPE: (usize, usize, usize, usize, usize) = (64, 2, 1, 32, 96);

    /// The seven projections' weights, bf16-rounded (q, k, v, o, gate, up, down).
    fn projections() -> [Linear; 7] {
        let (h, heads, kv_heads, head_dim, inner) = SHAPE;
        [
            linear(heads * head_dim, h, 1, DType::BF16),
            linear(kv_heads * head_dim, h, 2, DType::BF16),
            linear(kv_heads * head_dim, h, 3, DType::BF16),
            linear(h, heads * head_dim, 4, DType::BF16),
            linear(inner, h, 5, DType::BF16),
            linear(inner, h, 6, DType::BF16),
            linear(h, inner, 7, DType::BF16),
        ]
    }

    /// One layer with weights in `dtype` (the same values, rounded to bf16 in both cases).
    fn layer(dtype: DType) -> CpuDecoderLayer {
        layer_of(
            projections().map(|l| {
                DenseSource::Linear(Linear::new(l.weight().to_dtype(dtype).unwrap(), None))
            }),
            dtype == DType::BF16,
        )
    }

    /// One layer of `weights` (q, k, v, o, gate, up, down), of an f32 model or a bf16 one.
    fn layer_of(weights: [DenseSource; 7], bf16_model: bool) -> CpuDecoderLayer {
        let (h, heads, kv_heads, head_dim, _) = SHAPE;
        let [q, k, v, o, gate, up, down] = weights;
        let ones = |n: usize| Tensor::ones(n, DType::F32, &Device::Cpu).unwrap();
        CpuDecoderLayer::new(
            DecoderLayerWeights {
                attention: [q, k, v, o],
                mlp: [gate, up, down],
                input_norm: ones(h),
                post_attention_norm: ones(h),
                feed_forward_norms: None,
                qk_norms: Some([ones(head_dim), ones(head_dim)]),
            },
            DecoderShape {
                heads,
                kv_heads,
                head_dim,
                eps: 1e-6,
            },
            GatedActivation::Silu,
            bf16_model,
        )
        .unwrap()
    }

    fn run(layer: &CpuDecoderLayer, x: &[f32], lengths: &[usize], seq: usize) -> Vec<f32> {
        let mask = AttnMask {
            key_lengths: lengths.to_vec(),
            query_len: seq,
            causal: true,
            window: None,
            scale: 1.0 / 32f32.sqrt(),
            softcap: None,
        };
        let mut x = x.to_vec();
        let rotary = RotaryTable::new(32, 10_000.0, seq);
        layer
            .forward(&mut x, &rotary, &mask, &mut DecoderWorkspace::default())
            .unwrap();
        x
    }

    /// Every real row of `got` within cosine 0.999 of `want`'s (rows `[batch, seq, h]`).
    fn assert_real_rows_track(got: &[f32], want: &[f32], lengths: &[usize], seq: usize, h: usize) {
        for (b, &len) in lengths.iter().enumerate() {
            for row in 0..len {
                let at = (b * seq + row) * h;
                let (g, w) = (&got[at..at + h], &want[at..at + h]);
                let dot: f32 = g.iter().zip(w).map(|(a, b)| a * b).sum();
                let norms: f32 = g.iter().map(|v| v * v).sum::<f32>().sqrt()
                    * w.iter().map(|v| v * v).sum::<f32>().sqrt();
                assert!(
                    dot / norms >= 0.999,
                    "row {b}/{row}: cosine {}",
                    dot / norms
                );
            }
        }
    }

    /// A text run alone gives the bits it got inside its batch.
    fn assert_same_bits(alone: &[f32], batched: &[f32]) {
        assert_eq!(alone.len(), batched.len());
        assert!(
            alone
                .iter()
                .zip(batched)
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }

    /// The bf16 path (AMX projections and attention where the CPU has them) stays within bf16
    /// rounding of the f32 one, and a row does not depend on its batch neighbours.
    #[test]
    fn bf16_layer_tracks_the_f32_layer_and_ignores_padding() {
        if !supports(DType::BF16) {
            eprintln!("SKIPPED: this CPU multiplies bf16 weights in f32 (no AVX512-BF16)");
            return;
        }
        let (seq, h) = (45, 64);
        let lengths = [45, 33];
        let x = random(2 * seq * h, 9);
        let (f32_layer, bf16_layer) = (layer(DType::F32), layer(DType::BF16));
        let want = run(&f32_layer, &x, &lengths, seq);
        let got = run(&bf16_layer, &x, &lengths, seq);
        assert_real_rows_track(&got, &want, &lengths, seq, h);
        // The second text alone (its 33 tokens, no padding) gives the same bits.
        assert_same_bits(
            &run(&bf16_layer, &x[seq * h..(seq + 33) * h], &[33], 33),
            &got[seq * h..(seq + 33) * h],
        );
    }

    /// Q8_0 weights kept quantized (dequantized per product) track the float layer of the same
    /// dequantized values within bf16 rounding, and a row ignores its batch neighbours.
    #[test]
    fn quantized_layer_tracks_its_dequantized_layer() {
        use crate::kernels::quant::tests::quantized;
        use candle_core::quantized::GgmlDType;
        let (seq, h) = (40, SHAPE.0);
        let lengths = [40, 29];
        let files: Vec<_> = projections()
            .iter()
            .map(|l| {
                let (rows, cols) = l.weight().dims2().unwrap();
                let values = l
                    .weight()
                    .to_dtype(DType::F32)
                    .unwrap()
                    .flatten_all()
                    .unwrap();
                quantized(
                    &values.to_vec1::<f32>().unwrap(),
                    rows,
                    cols,
                    GgmlDType::Q8_0,
                )
            })
            .collect();
        let source = |i: usize| DenseSource::Quantized {
            weight: files[i].0.clone(),
            bias: vec![0.0; files[i].0.rows],
        };
        let float = |i: usize| {
            let m = &files[i].0;
            let w = Tensor::from_vec(m.dequantize(), (m.rows, m.cols), &Device::Cpu).unwrap();
            DenseSource::Linear(Linear::new(w, None))
        };
        let float_layer = layer_of(std::array::from_fn(float), false);
        let x = random(2 * seq * h, 4);
        let want = run(&float_layer, &x, &lengths, seq);
        // Of an f32 model (attention in f32), and of a bf16 one (attention on tiles where AMX
        // runs).
        for bf16_model in [false, true] {
            let quantized_layer = layer_of(std::array::from_fn(source), bf16_model);
            let got = run(&quantized_layer, &x, &lengths, seq);
            assert_real_rows_track(&got, &want, &lengths, seq, h);
            assert_same_bits(
                &run(&quantized_layer, &x[seq * h..(seq + 29) * h], &[29], 29),
                &got[seq * h..(seq + 29) * h],
            );
        }
    }
}
