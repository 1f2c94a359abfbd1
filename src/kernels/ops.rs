//! Fused CPU kernels for the hot element-wise steps of attention and the MLP. candle runs each
//! element-wise op as its own single-threaded pass; for BERT on CPU the scale, mask-add and
//! softmax of the `[batch, heads, seq, seq]` logits and the erf-GELU of the MLP took about as long
//! as the matmuls. Here each is one pass, parallel over rows with rayon, with the mask computed
//! from lengths instead of read from a bias tensor. Other devices and dtypes take the same math
//! through plain candle ops, so results agree everywhere.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Device, Layout, Shape, Tensor};
use rayon::prelude::*;

/// Which keys a query row may attend to, and how logits are shaped before the softmax.
#[derive(Debug, Clone)]
pub struct AttnMask {
    /// Real tokens per batch row (keys at or past it are padding).
    pub key_lengths: Vec<usize>,
    /// Query positions per head block: row `r` of a block is query `r % query_len`.
    pub query_len: usize,
    /// Keys after the query are hidden (decoders).
    pub causal: bool,
    /// Sliding-window layers: only keys fewer than `window` positions from the query are
    /// visible (before it when causal, on either side otherwise).
    pub window: Option<usize>,
    /// Multiplies the logits.
    pub scale: f32,
    /// `tanh(x / cap) * cap` after scaling (Gemma-2).
    pub softcap: Option<f32>,
}

impl AttnMask {
    /// Visible key range `[lo, hi)` for query `q` of batch row `b`.
    pub(crate) fn range(&self, b: usize, q: usize) -> (usize, usize) {
        let len = self.key_lengths.get(b).copied().unwrap_or(0);
        let hi = match (self.causal, self.window) {
            (true, _) => (q + 1).min(len),
            (false, Some(w)) => q.saturating_add(w).min(len),
            (false, None) => len,
        };
        let lo = match self.window {
            Some(w) => (q + 1).saturating_sub(w),
            None => 0,
        };
        (lo.min(hi), hi)
    }
}

struct AttnSoftmax<'a>(&'a AttnMask);

impl CustomOp1 for AttnSoftmax<'_> {
    fn name(&self) -> &'static str {
        "freshstack-attn-softmax"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let mask = self.0;
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("attention softmax expects f32 logits");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("attention softmax expects contiguous logits");
        };
        let data = &data[start..end];
        let dims = layout.shape().dims();
        let (batch, keys) = match dims {
            [b, .., k] => (*b, *k),
            _ => candle_core::bail!("attention logits must have at least 2 dims"),
        };
        if batch == 0 || keys == 0 || mask.query_len == 0 {
            return Ok((CpuStorage::F32(data.to_vec()), layout.shape().clone()));
        }
        let rows_per_batch = data.len() / keys / batch;
        let mut out = vec![0f32; data.len()];
        out.par_chunks_mut(keys)
            .zip(data.par_chunks(keys))
            .enumerate()
            .for_each(|(row, (dst, src))| {
                let b = row / rows_per_batch;
                let q = (row % rows_per_batch) % mask.query_len;
                let (lo, hi) = mask.range(b, q);
                if lo >= hi {
                    return;
                }
                for (d, &s) in dst[lo..hi].iter_mut().zip(&src[lo..hi]) {
                    let v = s * mask.scale;
                    *d = match mask.softcap {
                        Some(cap) => (v / cap).tanh() * cap,
                        None => v,
                    };
                }
                softmax_row(&mut dst[lo..hi]);
            });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// Softmax over the last axis of attention logits `[batch, ..., keys]` with `mask` applied:
/// scaled, soft-capped, hidden keys get probability 0. Returns f32.
pub fn attention_probs(logits: &Tensor, mask: &AttnMask) -> candle_core::Result<Tensor> {
    let logits = logits.to_dtype(DType::F32)?.contiguous()?;
    if matches!(logits.device(), Device::Cpu) {
        return logits.apply_op1_no_bwd(&AttnSoftmax(mask));
    }
    // Elsewhere: the same steps as tensor ops, with an additive bias built from the mask.
    let dims = logits.dims().to_vec();
    let (batch, keys) = (dims[0], dims[dims.len() - 1]);
    let rows = logits.elem_count() / keys / batch;
    let mut bias = vec![f32::NEG_INFINITY; batch * rows * keys];
    for b in 0..batch {
        for r in 0..rows {
            let (lo, hi) = mask.range(b, r % mask.query_len.max(1));
            let row = &mut bias[(b * rows + r) * keys..(b * rows + r + 1) * keys];
            row[lo..hi].fill(0.0);
        }
    }
    let bias = Tensor::from_vec(bias, dims.as_slice(), logits.device())?;
    let mut x = (logits * f64::from(mask.scale))?;
    if let Some(cap) = mask.softcap {
        x = ((x / f64::from(cap))?.tanh()? * f64::from(cap))?;
    }
    candle_nn::ops::softmax_last_dim(&(x + bias)?)
}

/// `e^x` for f32 without a libm call, so loops over it vectorise: Cody-Waite range reduction
/// `x = n ln 2 + r` (`|r| <= ln 2 / 2`, n rounded with the 1.5 * 2^23 trick), a degree-6
/// polynomial for `e^r` (the Cephes `expf` coefficients) and `2^n` built in the exponent
/// bits. Within 2 ulp of libm's `expf` on [-87, 88]; below -87 it returns about 1e-38 (a
/// softmax weight that small is 0 for every purpose here).
#[inline(always)]
pub(crate) fn exp_fast(x: f32) -> f32 {
    const LOG2_E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * LOG2_E + ROUND;
    let n = shifted - ROUND;
    // The integer n sits in the low mantissa bits of `shifted`: reading it from there instead of
    // `n as i32` (a saturating, NaN-checking scalar conversion) lets the loops vectorise.
    let n_int = shifted.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.987_569_1e-4;
    let p = p * r + 1.398_199_9e-3;
    let p = p * r + 8.333_452e-3;
    let p = p * r + 4.166_579_6e-2;
    let p = p * r + 1.666_666_5e-1;
    let p = p * r + 0.5;
    let p = p * r * r + r + 1.0;
    f32::from_bits((n_int.wrapping_add(127) as u32) << 23) * p
}

/// In-place softmax of one row: subtract the max, exponentiate, normalise. Eight-lane
/// accumulators keep the reductions vectorisable; an AVX2 copy of the same code is taken when
/// the CPU has it (no FMA contraction, so both give the same bits).
pub(crate) fn softmax_row(row: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { softmax_row_avx2(row) };
        }
    }
    softmax_row_portable(row);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn softmax_row_avx2(row: &mut [f32]) {
    softmax_row_portable(row);
}

#[inline(always)]
fn softmax_row_portable(row: &mut [f32]) {
    if row.is_empty() {
        return;
    }
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        for (m, &v) in lanes.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut max = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for m in lanes {
        max = if m > max { m } else { max };
    }
    let mut sums = [0f32; 8];
    let mut chunks = row.chunks_exact_mut(8);
    for chunk in &mut chunks {
        for (s, v) in sums.iter_mut().zip(chunk.iter_mut()) {
            *v = exp_fast(*v - max);
            *s += *v;
        }
    }
    let mut sum = 0f32;
    for v in chunks.into_remainder() {
        *v = exp_fast(*v - max);
        sum += *v;
    }
    sum += sums.iter().sum::<f32>();
    let inv = 1.0 / sum;
    for v in row.iter_mut() {
        *v *= inv;
    }
}

struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "freshstack-gelu-erf"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("gelu expects f32");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("gelu expects a contiguous tensor");
        };
        let mut out = data[start..end].to_vec();
        out.par_chunks_mut(4096).for_each(|chunk| {
            for v in chunk {
                let x = *v;
                *v = 0.5 * x * (1.0 + erf_rational(x * std::f32::consts::FRAC_1_SQRT_2));
            }
        });
        Ok((CpuStorage::F32(out), layout.shape().clone()))
    }
}

/// erf for f32 as a rational function of x² on [-4, 4] (the approximation Eigen and XLA use;
/// beyond |x| = 4, erf is ±1 in f32). Branch-free and call-free, so the loop above vectorises;
/// agrees with libm's `erff` to a few ulps.
#[inline(always)]
pub(crate) fn erf_rational(x: f32) -> f32 {
    const ALPHA: [f32; 7] = [
        -2.726_142_3e-10,
        2.770_681_4e-08,
        -2.101_024e-06,
        -5.692_506_4e-05,
        -7.349_906_3e-04,
        -2.954_6e-3,
        -1.609_603_3e-02,
    ];
    const BETA: [f32; 5] = [
        -1.456_607_2e-05,
        -2.133_740_6e-04,
        -1.682_827e-03,
        -7.373_329e-03,
        -1.426_474e-02,
    ];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = ALPHA.iter().fold(0.0, |acc, &a| acc * x2 + a);
    let q = BETA.iter().fold(0.0, |acc, &b| acc * x2 + b);
    x * p / q
}

/// Exact (erf) GELU; parallel on CPU f32, candle's `gelu_erf` elsewhere.
pub fn gelu_erf(x: &Tensor) -> candle_core::Result<Tensor> {
    if matches!(x.device(), Device::Cpu) && x.dtype() == DType::F32 {
        x.contiguous()?.apply_op1_no_bwd(&GeluErf)
    } else {
        x.gelu_erf()
    }
}

/// `silu(gate) * up` for the decoders' gated MLP: one pass on the CPU in bf16 (each value
/// rounded as the two separate bf16 ops round it: the activation, then the product), candle's
/// two ops elsewhere. candle's bf16 SiLU and mul were two passes and a buffer per layer.
pub fn silu_mul(gate: &Tensor, up: &Tensor) -> candle_core::Result<Tensor> {
    if matches!(gate.device(), Device::Cpu)
        && gate.dtype() == DType::BF16
        && up.dtype() == DType::BF16
        && gate.shape() == up.shape()
    {
        gate.contiguous()?
            .apply_op2_no_bwd(&up.contiguous()?, &SiluMulBf16)
    } else {
        candle_nn::ops::silu(gate)? * up
    }
}

struct SiluMulBf16;

impl CustomOp2 for SiluMulBf16 {
    fn name(&self) -> &'static str {
        "freshstack-silu-mul-bf16"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::BF16(gate), CpuStorage::BF16(up)) = (s1, s2) else {
            candle_core::bail!("silu_mul expects bf16");
        };
        let (Some((g0, g1)), Some((u0, u1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("silu_mul expects contiguous tensors");
        };
        let (gate, up) = (&gate[g0..g1], &up[u0..u1]);
        if gate.len() != up.len() {
            candle_core::bail!(
                "silu_mul: {} gate values for {} up values",
                gate.len(),
                up.len()
            );
        }
        let mut out = vec![half::bf16::ZERO; gate.len()];
        out.par_chunks_mut(4096)
            .zip(gate.par_chunks(4096).zip(up.par_chunks(4096)))
            .for_each(|(out, (gate, up))| {
                for ((o, g), u) in out.iter_mut().zip(gate).zip(up) {
                    let g = g.to_f32();
                    let act = half::bf16::from_f32(g / (1.0 + (-g).exp()));
                    *o = half::bf16::from_f32(act.to_f32() * u.to_f32());
                }
            });
        Ok((CpuStorage::BF16(out), l1.shape().clone()))
    }
}

/// Which GELU the MLP uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GeluKind {
    /// Exact: `0.5 x (1 + erf(x / sqrt 2))` (BERT's `gelu`).
    Erf,
    /// Tanh approximation (`gelu_new`, `gelu_pytorch_tanh`), as candle's `gelu`.
    Tanh,
}

/// GELU in place; an AVX2 copy of the same code is taken when the CPU has it (twice the lanes
/// of the baseline SSE build; no FMA contraction, so both give the same bits).
pub(crate) fn gelu_in_place(values: &mut [f32], kind: GeluKind) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { gelu_in_place_avx2(values, kind) };
        }
    }
    gelu_in_place_portable(values, kind);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn gelu_in_place_avx2(values: &mut [f32], kind: GeluKind) {
    gelu_in_place_portable(values, kind);
}

#[inline(always)]
fn gelu_in_place_portable(values: &mut [f32], kind: GeluKind) {
    match kind {
        GeluKind::Erf => {
            for v in values {
                let x = *v;
                *v = 0.5 * x * (1.0 + erf_rational(x * std::f32::consts::FRAC_1_SQRT_2));
            }
        }
        GeluKind::Tanh => {
            const SQRT_TWO_OVER_PI: f32 = 0.797_884_6;
            for v in values {
                let x = *v;
                *v = 0.5 * x * (1.0 + (SQRT_TWO_OVER_PI * x * (1.0 + 0.044715 * x * x)).tanh());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_hide_far_keys_before_the_query_or_on_both_sides() {
        let mask = |causal| AttnMask {
            key_lengths: vec![10],
            query_len: 10,
            causal,
            window: Some(3),
            scale: 1.0,
            softcap: None,
        };
        // Causal: keys q-2..=q. Bidirectional: keys q-2..=q+2, within the row's 10 tokens.
        assert_eq!(mask(true).range(0, 5), (3, 6));
        assert_eq!(mask(false).range(0, 5), (3, 8));
        assert_eq!(mask(false).range(0, 0), (0, 3));
        assert_eq!(mask(false).range(0, 9), (7, 10));
        let full = AttnMask {
            window: None,
            ..mask(false)
        };
        assert_eq!(full.range(0, 5), (0, 10));
    }

    fn reference(logits: &[f32], mask: &AttnMask, keys: usize) -> Vec<f32> {
        let rows = logits.len() / keys / mask.key_lengths.len();
        let mut out = vec![0f32; logits.len()];
        for (row, chunk) in logits.chunks(keys).enumerate() {
            let (lo, hi) = mask.range(row / rows, (row % rows) % mask.query_len);
            let vals: Vec<f32> = chunk[lo..hi]
                .iter()
                .map(|&s| {
                    let v = s * mask.scale;
                    mask.softcap.map_or(v, |c| (v / c).tanh() * c)
                })
                .collect();
            let max = vals.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f32 = vals.iter().map(|v| (v - max).exp()).sum();
            for (j, v) in vals.iter().enumerate() {
                out[row * keys + lo + j] = (v - max).exp() / sum;
            }
        }
        out
    }

    #[test]
    fn fused_softmax_matches_masked_reference() {
        let (b, h, t) = (2, 3, 5);
        let logits: Vec<f32> = (0..b * h * t * t)
            .map(|i| ((i * 37 % 23) as f32 - 11.0) / 3.0)
            .collect();
        let tensor = Tensor::from_vec(logits.clone(), (b, h, t, t), &Device::Cpu).unwrap();
        for (causal, window, softcap) in [
            (false, None, None),
            (true, None, None),
            (true, Some(2), Some(2.0)),
        ] {
            let mask = AttnMask {
                key_lengths: vec![5, 3],
                query_len: t,
                causal,
                window,
                scale: 0.5,
                softcap,
            };
            let got = attention_probs(&tensor, &mask)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            let want = reference(&logits, &mask, t);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-6, "{causal} {window:?}: {g} vs {w}");
            }
        }
    }

    #[test]
    fn fast_exp_is_within_two_ulp_of_libm() {
        let mut x = -87.0f32;
        while x <= 88.0 {
            let (got, want) = (exp_fast(x), x.exp());
            let ulp = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulp <= 2, "exp({x}): {got} vs {want} ({ulp} ulp)");
            x += 0.0137;
        }
        assert!(exp_fast(-1000.0) < 1e-37);
    }

    #[test]
    fn softmax_row_matches_the_plain_formula() {
        for len in [1usize, 7, 8, 9, 33] {
            let row: Vec<f32> = (0..len)
                .map(|i| ((i * 13 % 7) as f32 - 3.0) * 1.7)
                .collect();
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let sum: f64 = row.iter().map(|&v| f64::from(v - max).exp()).sum();
            let mut got = row.clone();
            softmax_row(&mut got);
            for (g, v) in got.iter().zip(&row) {
                let want = f64::from(v - max).exp() / sum;
                assert!((f64::from(*g) - want).abs() < 1e-6, "{len}: {g} vs {want}");
            }
        }
    }

    #[test]
    fn silu_mul_matches_candles_two_bf16_ops() {
        let values: Vec<f32> = (0..5000)
            .map(|i| ((i * 37 % 1001) as f32 - 500.0) / 60.0)
            .collect();
        let gate = Tensor::from_vec(values.clone(), (50, 100), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let up = Tensor::from_vec(
            values.iter().rev().copied().collect::<Vec<_>>(),
            (50, 100),
            &Device::Cpu,
        )
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
        let got = silu_mul(&gate, &up).unwrap().to_dtype(DType::F32).unwrap();
        let want = (candle_nn::ops::silu(&gate).unwrap() * &up)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let (got, want) = (
            got.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            want.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        );
        for (g, w) in got.iter().zip(&want) {
            // Within one bf16 rounding step of candle's (its SiLU rounds inside, too).
            assert!((g - w).abs() <= w.abs() / 64.0 + 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn gelu_matches_candle() {
        let x = Tensor::arange(-300i64, 300, &Device::Cpu)
            .unwrap()
            .to_dtype(DType::F32)
            .unwrap();
        let x = (x / 50.0).unwrap();
        let ours = gelu_erf(&x).unwrap().to_vec1::<f32>().unwrap();
        let theirs = x.gelu_erf().unwrap().to_vec1::<f32>().unwrap();
        for (a, b) in ours.iter().zip(&theirs) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{a} vs {b}");
        }
        for i in -400..=400 {
            let x = i as f32 / 100.0;
            let want = candle_core::cpu::erf::erf_f32(x);
            assert!(
                (erf_rational(x) - want).abs() < 1e-6,
                "erf({x}): {} vs {want}",
                erf_rational(x)
            );
        }
    }
}
