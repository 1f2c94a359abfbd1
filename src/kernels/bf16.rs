//! bf16 linear layers on CPUs with AVX512-BF16 (AMD Zen 4 and later, Intel Cooper Lake and
//! Sapphire Rapids and later). `VDPBF16PS` multiplies pairs of bf16 values exactly and adds both
//! products to an f32 lane: twice the multiply-adds of an f32 FMA per instruction. candle's CPU
//! matmul has no such path for bf16 (`cargo bench --bench embed -- bf16_linear`, one
//! E5-Mistral-7B projection over 256 tokens on 2 Zen 4 cores: 86 GFLOP/s for candle, 338 here),
//! so the decoders' projections take this one when their weights are bf16.
//!
//! The weight `[out, in]` is repacked once at load into panels of 32 output columns, each panel
//! `[in / 2][32]` of bf16 pairs, so the kernel reads 128 contiguous bytes per input pair. The
//! original tensor is dropped: packing costs no memory. Inputs are bf16 rows; sums are f32 (in
//! input order, one column's sum never split), the bias is added in f32 and the result rounded
//! to bf16 once, as a bf16 matmul with f32 accumulation does. Results do not depend on the
//! thread count (threads split output columns, never a sum).

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Module, Shape, Tensor};
use candle_nn::Linear;
use half::bf16;
use rayon::prelude::*;

use super::aligned::LineVec;
use super::amx;

/// Output columns per panel: two 16-lane f32 accumulators per row.
pub(crate) const PANEL: usize = 32;
/// Rows per kernel call: 12 x 2 accumulators + 2 weight registers + 1 broadcast fit in 32 zmm.
pub(crate) const TILE_ROWS: usize = 12;

/// A linear layer `x W^T + b` for the decoders: candle's, the packed bf16 one, or the f32 one on
/// AMX tiles.
pub(crate) enum DecoderLinear {
    Candle(Linear),
    PackedBf16(PackedBf16Linear),
    AmxF32(amx::AmxLinear),
}

impl DecoderLinear {
    /// Takes the packed bf16 path when `linear`'s weight is bf16 on the CPU and the CPU has
    /// AVX512-BF16, the AMX path for an f32 weight where AMX is available; otherwise keeps
    /// candle's layer.
    pub(crate) fn new(linear: Linear) -> candle_core::Result<Self> {
        let weight = linear.weight();
        let on_cpu = matches!(weight.device(), Device::Cpu);
        if on_cpu && weight.dtype() == DType::BF16 && PackedBf16Linear::supported() {
            Ok(Self::PackedBf16(PackedBf16Linear::new(&linear)?))
        } else if on_cpu && weight.dtype() == DType::F32 && amx::available() {
            Ok(Self::AmxF32(amx::AmxLinear::new(&linear)?))
        } else {
            Ok(Self::Candle(linear))
        }
    }

    pub(crate) fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Self::Candle(linear) => linear.forward(x),
            Self::PackedBf16(packed) => packed.forward(x),
            Self::AmxF32(linear) => linear.forward(x),
        }
    }
}

/// A bf16 linear layer repacked for the AVX512-BF16 kernel, with its bias in f32. The decoders
/// build it for every projection when [`PackedBf16Linear::supported`]; public for benches.
pub struct PackedBf16Linear {
    /// Panels of `PANEL` columns, each `[pairs][PANEL]` u32 (two bf16, the lower input first).
    panels: LineVec<u32>,
    bias: Option<Vec<f32>>,
    out_features: usize,
    in_features: usize,
}

impl PackedBf16Linear {
    /// Whether this CPU runs the kernel (AVX512-F, -BF16, -BW and -VL).
    pub fn supported() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bf16")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Repacks `linear`'s weight (converted to bf16 if it is not) and bias.
    pub fn new(linear: &Linear) -> candle_core::Result<Self> {
        if !Self::supported() {
            candle_core::bail!("packed bf16 linear: this CPU has no AVX512-BF16");
        }
        let (out_features, in_features) = linear.weight().dims2()?;
        let weight = linear
            .weight()
            .to_dtype(DType::BF16)?
            .flatten_all()?
            .to_vec1::<bf16>()?;
        let bias = bias_f32(linear)?;
        Ok(Self {
            panels: pack_panels(&weight, out_features, in_features),
            bias,
            out_features,
            in_features,
        })
    }

    /// `x [.., in]` (converted to bf16) to `[.., out]` (bf16), on the CPU.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        if !matches!(x.device(), Device::Cpu) {
            candle_core::bail!("packed bf16 linear: input not on the CPU");
        }
        x.to_dtype(DType::BF16)?
            .contiguous()?
            .apply_op1_no_bwd(&PackedForward(self))
    }

    /// `out[m, out] = x[m, in] W^T + b`, rounded to bf16.
    fn run(&self, x: &[bf16], m: usize) -> Vec<bf16> {
        let (n, k) = (self.out_features, self.in_features);
        let pairs = k.div_ceil(2);
        // Rows as u32 pairs; an odd width gets a zero column (its weight pair is zero-padded too).
        let padded;
        let rows: &[bf16] = if k % 2 == 0 {
            x
        } else {
            padded = x
                .chunks_exact(k)
                .flat_map(|row| row.iter().copied().chain(std::iter::once(bf16::ZERO)))
                .collect::<Vec<_>>();
            &padded
        };
        let mut out = vec![bf16::ZERO; m * n];
        if k > 0 && k.is_multiple_of(32) && amx::available() {
            amx::bf16_linear(&self.panels, self.bias.as_deref(), x, (m, n, k), &mut out);
            return out;
        }
        let panels = n.div_ceil(PANEL);
        let threads = rayon::current_num_threads().min(panels).max(1);
        let per_task = panels.div_ceil(threads);
        let out_ptr = SharedOut(out.as_mut_ptr());
        (0..panels)
            .into_par_iter()
            .step_by(per_task)
            .for_each(|first| {
                let last = (first + per_task).min(panels);
                let out_ptr = &out_ptr;
                for panel in first..last {
                    // SAFETY: tasks own disjoint panel ranges, so disjoint output columns;
                    // `rows` holds m rows of 2 * pairs values; `panels` holds every panel.
                    unsafe { self.panel(rows, m, pairs, panel, out_ptr.0) };
                }
            });
        out
    }

    /// Computes output columns `panel * PANEL ..` for all `m` rows into `out` (`[m, n]`).
    ///
    /// # Safety
    /// `rows` must hold `m * 2 * pairs` values, `out` must point at `m * n` values of which
    /// this call alone writes the panel's columns, and the CPU must support AVX512-BF16.
    unsafe fn panel(&self, rows: &[bf16], m: usize, pairs: usize, panel: usize, out: *mut bf16) {
        let n = self.out_features;
        let first_col = panel * PANEL;
        let cols = PANEL.min(n - first_col);
        let mut bias = [0f32; PANEL];
        if let Some(values) = &self.bias {
            bias[..cols].copy_from_slice(&values[first_col..first_col + cols]);
        }
        let store = |row: usize, tile: usize, sums: &[f32]| {
            // SAFETY: rows row..row + tile and columns first_col..first_col + cols are inside
            // `out` and belong to this panel (the caller's contract).
            unsafe { store_bf16_rows(tile, sums, &bias, out.add(row * n + first_col), n, cols) };
        };
        // SAFETY: forwarded from the caller.
        unsafe { panel_tiles(rows, m, pairs, &self.panels, panel, store) };
    }
}

/// Runs `m` bf16 rows (`2 * pairs` values each) against panel `panel` of `panels`, handing the
/// f32 sums of each run of up to [`TILE_ROWS`] rows to `emit(first_row, rows, sums)` (`sums`
/// `PANEL` apart).
///
/// # Safety
/// The CPU must support AVX512-BF16; `rows` must hold `m * 2 * pairs` values.
unsafe fn panel_tiles(
    rows: &[bf16],
    m: usize,
    pairs: usize,
    panels: &[u32],
    panel: usize,
    mut emit: impl FnMut(usize, usize, &[f32]),
) {
    let weights = &panels[panel * pairs * PANEL..(panel + 1) * pairs * PANEL];
    let mut sums = [0f32; TILE_ROWS * PANEL];
    let mut row = 0;
    while row < m {
        let tile = TILE_ROWS.min(m - row);
        let a = &rows[row * 2 * pairs..(row + tile) * 2 * pairs];
        // SAFETY: the caller guarantees AVX512-BF16; `a` holds `tile` rows of `pairs` pairs
        // and `weights` one panel.
        unsafe { dot_tile(tile, pairs, a, weights, &mut sums) };
        emit(row, tile, &sums);
        row += tile;
    }
}

/// A bf16 weight `[n, k]` packed as [`PackedBf16Linear`] packs it, for products whose f32 sums
/// are added to an f32 destination unrounded (the fused decoder layer's projections). Build and
/// use it only where [`PackedBf16Linear::supported`].
pub(crate) struct Bf16Weight {
    panels: LineVec<u32>,
    n: usize,
    k: usize,
}

impl Bf16Weight {
    /// Whether [`Bf16Weight::multiply_add`] runs on AMX tiles for this weight.
    pub(crate) fn on_tiles(&self) -> bool {
        self.k.is_multiple_of(32) && amx::available()
    }

    /// The packed panels, as [`amx::bf16_product`] takes them where
    /// [`Bf16Weight::on_tiles`].
    pub(crate) fn panels(&self) -> &[u32] {
        &self.panels
    }
}

impl Bf16Weight {
    /// Packs a row-major `[n, k]` weight.
    pub(crate) fn new(weight: &[bf16], n: usize, k: usize) -> Self {
        assert_eq!(
            weight.len(),
            n * k,
            "weight of {} for [{n}, {k}]",
            weight.len()
        );
        Self {
            panels: pack_panels(weight, n, k),
            n,
            k,
        }
    }

    /// `dst[m, n] += bf16(x)[m, k] W^T`: the inputs rounded to bf16 (to nearest even), one
    /// exact product per pair, f32 sums in a fixed order. Rows do not depend on the thread count
    /// or on their place among the `m`.
    pub(crate) fn multiply_add(&self, dst: &mut [f32], x: &[f32], m: usize) {
        let (n, k) = (self.n, self.k);
        assert!(dst.len() == m * n && x.len() == m * k);
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        if self.on_tiles() {
            amx::bf16_product(&self.panels, x, (m, n, k), amx::Start::Dst, dst);
            return;
        }
        self.multiply_add_without_tiles(dst, x, m);
    }

    /// [`Bf16Weight::multiply_add`] on the AVX512-BF16 kernel (the path of CPUs without AMX).
    fn multiply_add_without_tiles(&self, dst: &mut [f32], x: &[f32], m: usize) {
        let (n, k) = (self.n, self.k);
        assert!(dst.len() == m * n && x.len() == m * k);
        // Rows as bf16 pairs; an odd width gets a zero column (its weight pair is zero too).
        let width = k.div_ceil(2) * 2;
        let mut rows = vec![bf16::ZERO; m * width];
        rows.par_chunks_mut(width)
            .zip(x.par_chunks(k))
            .for_each(|(dst, src)| round_row(src, &mut dst[..k]));
        let pairs = width / 2;
        let panels = n.div_ceil(PANEL);
        let out = SharedOut(dst.as_mut_ptr());
        (0..panels).into_par_iter().for_each(|panel| {
            let out = &out;
            let first_col = panel * PANEL;
            let cols = PANEL.min(n - first_col);
            let add = |row: usize, tile: usize, sums: &[f32]| {
                for (r, sums) in sums.chunks_exact(PANEL).take(tile).enumerate() {
                    for (c, s) in sums[..cols].iter().enumerate() {
                        // SAFETY: each panel task owns columns first_col..first_col + cols of
                        // the m x n destination; row + r < m.
                        unsafe { *out.0.add((row + r) * n + first_col + c) += s };
                    }
                }
            };
            // SAFETY: `Bf16Weight` is used only where AVX512-BF16 is supported; `rows` holds m
            // rows of 2 * pairs values.
            unsafe { panel_tiles(&rows, m, pairs, &self.panels, panel, add) };
        });
    }
}

/// Rounds `src` to bf16 (to nearest even), 16 values per `VCVTNEPS2BF16` where the CPU has it.
pub(crate) fn round_row(src: &[f32], dst: &mut [bf16]) {
    assert_eq!(src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    {
        if PackedBf16Linear::supported() {
            let whole = src.len() / 16 * 16;
            // SAFETY: AVX512-BF16/BW/VL checked just above; both slices hold `whole` values.
            unsafe { round_row_avx512(&src[..whole], &mut dst[..whole]) };
            for (d, &s) in dst[whole..].iter_mut().zip(&src[whole..]) {
                *d = bf16::from_f32(s);
            }
            return;
        }
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16::from_f32(s);
    }
}

/// # Safety
/// The CPU must have AVX512-BF16/BW/VL; both slices hold the same multiple of 16 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn round_row_avx512(src: &[f32], dst: &mut [bf16]) {
    use std::arch::x86_64::*;
    for (values, out) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
        // SAFETY: each chunk holds 16 values (the caller's contract).
        unsafe {
            let rounded: __m256i =
                std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(values.as_ptr())));
            _mm256_storeu_si256(out.as_mut_ptr().cast(), rounded);
        }
    }
}

/// Adds the bias to `tile` rows of sums (`PANEL` apart), rounds them to bf16 (`VCVTNEPS2BF16`: to nearest even, as
/// `half`'s conversion for every finite non-subnormal value) and writes the first `cols` of each
/// of the `tile` rows to `out` (row stride `ldo`).
///
/// # Safety
/// The CPU must support AVX512-BF16/BW/VL; `out` must be writable at `r * ldo + c` for
/// `r < tile`, `c < cols <= PANEL`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
pub(crate) unsafe fn store_bf16_rows(
    tile: usize,
    sums: &[f32],
    bias: &[f32; PANEL],
    out: *mut bf16,
    ldo: usize,
    cols: usize,
) {
    use std::arch::x86_64::*;
    assert!(sums.len() >= tile * PANEL);
    let mask = if cols >= PANEL {
        u32::MAX
    } else {
        (1u32 << cols) - 1
    };
    let (low, high) = (mask as u16, (mask >> 16) as u16);
    // SAFETY: the reads stay inside `sums` and `bias` (asserted: r < tile); the masked
    // stores write only columns < cols of rows < tile (the caller's contract).
    unsafe {
        let b0 = _mm512_loadu_ps(bias.as_ptr());
        let b1 = _mm512_loadu_ps(bias.as_ptr().add(16));
        for r in 0..tile {
            let v0 = _mm512_add_ps(_mm512_loadu_ps(sums.as_ptr().add(r * PANEL)), b0);
            let v1 = _mm512_add_ps(_mm512_loadu_ps(sums.as_ptr().add(r * PANEL + 16)), b1);
            let h0: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v0));
            let h1: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v1));
            let at = out.add(r * ldo).cast::<i16>();
            _mm256_mask_storeu_epi16(at, low, h0);
            _mm256_mask_storeu_epi16(at.add(16), high, h1);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn store_bf16_rows(
    _tile: usize,
    _sums: &[f32],
    _bias: &[f32; PANEL],
    _out: *mut bf16,
    _ldo: usize,
    _cols: usize,
) {
    unreachable!("PackedBf16Linear::supported() is false off x86_64")
}

/// `linear`'s bias in f32, if it has one.
pub(crate) fn bias_f32(linear: &Linear) -> candle_core::Result<Option<Vec<f32>>> {
    linear
        .bias()
        .map(|b| b.to_dtype(DType::F32)?.to_vec1::<f32>())
        .transpose()
}

/// The output pointer shared by the tasks that write disjoint columns.
struct SharedOut<T>(*mut T);
// SAFETY: tasks write disjoint elements through it (see `PackedBf16Linear::run` and
// `Bf16Weight::multiply_add`).
unsafe impl<T> Sync for SharedOut<T> {}

/// Repacks `w` `[n, k]` into panels of `PANEL` columns of `[k / 2][PANEL]` bf16 pairs, zero
/// padded in both directions.
pub(crate) fn pack_panels(w: &[bf16], n: usize, k: usize) -> LineVec<u32> {
    let pairs = k.div_ceil(2);
    let mut out = LineVec::<u32>::zeroed(n.div_ceil(PANEL) * pairs * PANEL);
    out.par_chunks_mut(pairs * PANEL)
        .enumerate()
        .for_each(|(panel, packed)| {
            let first = panel * PANEL;
            let columns = w[first * k..(first + PANEL).min(n) * k].chunks_exact(k);
            for (lane, weights) in columns.enumerate() {
                for (pair, values) in weights.chunks(2).enumerate() {
                    let lo = u32::from(values[0].to_bits());
                    let hi = values.get(1).map_or(0, |v| u32::from(v.to_bits()));
                    packed[pair * PANEL + lane] = lo | (hi << 16);
                }
            }
        });
    out
}

/// `sums[r][c] = sum over pairs of rows[r] . panel[c]` for `tile` (1..=12) rows.
///
/// # Safety
/// The CPU must support AVX512-BF16; `rows` must hold `tile` rows of `2 * pairs` bf16 values
/// and `panel` `pairs * PANEL` values.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn dot_tile(
    tile: usize,
    pairs: usize,
    rows: &[bf16],
    panel: &[u32],
    sums: &mut [f32; TILE_ROWS * PANEL],
) {
    assert!(rows.len() >= tile * 2 * pairs && panel.len() >= pairs * PANEL);
    // SAFETY: forwarded from the caller; the assert bounds every read.
    unsafe {
        match tile {
            12 => kernel::<12>(pairs, rows, panel, sums),
            11 => kernel::<11>(pairs, rows, panel, sums),
            10 => kernel::<10>(pairs, rows, panel, sums),
            9 => kernel::<9>(pairs, rows, panel, sums),
            8 => kernel::<8>(pairs, rows, panel, sums),
            7 => kernel::<7>(pairs, rows, panel, sums),
            6 => kernel::<6>(pairs, rows, panel, sums),
            5 => kernel::<5>(pairs, rows, panel, sums),
            4 => kernel::<4>(pairs, rows, panel, sums),
            3 => kernel::<3>(pairs, rows, panel, sums),
            2 => kernel::<2>(pairs, rows, panel, sums),
            _ => kernel::<1>(pairs, rows, panel, sums),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn dot_tile(
    _tile: usize,
    _pairs: usize,
    _rows: &[bf16],
    _panel: &[u32],
    _sums: &mut [f32; TILE_ROWS * PANEL],
) {
    unreachable!("PackedBf16Linear::supported() is false off x86_64")
}

/// The micro-kernel: `R` rows x 32 columns, `R x 2` accumulators, one broadcast pair per row
/// and input pair.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn kernel<const R: usize>(
    pairs: usize,
    rows: &[bf16],
    panel: &[u32],
    sums: &mut [f32; TILE_ROWS * PANEL],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_ps(); 2]; R];
    let a = rows.as_ptr().cast::<u32>();
    let mut b = panel.as_ptr();
    for pair in 0..pairs {
        // SAFETY: `b` walks the panel (pairs * PANEL u32, checked by `dot_tile`); the row
        // reads stay below R * 2 * pairs bf16 (unaligned: bf16 rows are 2-byte aligned).
        unsafe {
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(b.add(16).cast()));
            for (r, acc) in acc.iter_mut().enumerate() {
                let value = a.add(r * pairs + pair).read_unaligned();
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(value as i32));
                acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
            }
            b = b.add(PANEL);
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        // SAFETY: r < R <= TILE_ROWS, so both 16-lane stores stay inside `sums`.
        unsafe {
            _mm512_storeu_ps(sums.as_mut_ptr().add(r * PANEL), acc[0]);
            _mm512_storeu_ps(sums.as_mut_ptr().add(r * PANEL + 16), acc[1]);
        }
    }
}

struct PackedForward<'a>(&'a PackedBf16Linear);

impl CustomOp1 for PackedForward<'_> {
    fn name(&self) -> &'static str {
        "freshstack-packed-bf16-linear"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::BF16(data) = storage else {
            candle_core::bail!("packed bf16 linear: expected a bf16 input");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("packed bf16 linear: expected a contiguous input");
        };
        let dims = layout.shape().dims();
        let k = self.0.in_features;
        if dims.last() != Some(&k) {
            candle_core::bail!("packed bf16 linear: input {dims:?} for {k} input features");
        }
        let x = &data[start..end];
        let m = x.len() / k.max(1);
        let out = self.0.run(x, m);
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = self.0.out_features;
        }
        Ok((CpuStorage::BF16(out), Shape::from(out_dims)))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use candle_core::Tensor;

    /// Seeded uniform values in [-0.5, 0.5) (an LCG), for kernel tests.
    pub(crate) fn random(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                ((state >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn packed_bf16_matches_the_exact_sum_of_bf16_products() {
        if !PackedBf16Linear::supported() {
            eprintln!("SKIPPED: this CPU has no AVX512-BF16");
            return;
        }
        // Odd widths, a partial panel and a partial row tile; with and without bias.
        for (m, k, n, with_bias) in [
            (13, 64, 32, false),
            (25, 77, 45, true),
            (1, 6, 3, true),
            (45, 64, 70, true),
            (150, 128, 32, false),
        ] {
            let x = Tensor::from_vec(random(m * k, 1), (m, k), &Device::Cpu)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap();
            let w = Tensor::from_vec(random(n * k, 2), (n, k), &Device::Cpu)
                .unwrap()
                .to_dtype(DType::BF16)
                .unwrap();
            let b = with_bias.then(|| {
                Tensor::from_vec(random(n, 3), n, &Device::Cpu)
                    .unwrap()
                    .to_dtype(DType::BF16)
                    .unwrap()
            });
            let linear = Linear::new(w.clone(), b.clone());
            let packed = PackedBf16Linear::new(&linear).unwrap();
            let got = packed
                .forward(&x.reshape((1, m, k)).unwrap())
                .unwrap()
                .reshape((m, n))
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap()
                .to_vec2::<f32>()
                .unwrap();
            // The bf16 products are exact in f32; only the order of the f32 sums differs.
            let xf = x.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap();
            let wf = w.to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap();
            let bf = b.map(|b| b.to_dtype(DType::F32).unwrap().to_vec1::<f32>().unwrap());
            for i in 0..m {
                for j in 0..n {
                    let mut want: f64 = (0..k)
                        .map(|c| f64::from(xf[i][c]) * f64::from(wf[j][c]))
                        .sum();
                    if let Some(bf) = &bf {
                        want += f64::from(bf[j]);
                    }
                    let diff = (f64::from(got[i][j]) - want).abs();
                    // One bf16 rounding of the result (2^-8 relative) plus f32 sum error.
                    assert!(
                        diff <= want.abs() / 256.0 + 1e-4,
                        "m{m} k{k} n{n} [{i},{j}]: {} vs {want}",
                        got[i][j]
                    );
                }
            }
        }
    }

    /// Both paths of [`Bf16Weight`] (AMX tiles where present, the AVX512-BF16 kernel always)
    /// add the exact products of the bf16-rounded inputs to the destination in f32.
    #[test]
    fn bf16_weight_adds_exact_bf16_products_in_f32() {
        if !PackedBf16Linear::supported() {
            eprintln!("SKIPPED: this CPU has no AVX512-BF16");
            return;
        }
        let round = |v: f32| bf16::from_f32(v).to_f32();
        for (m, k, n) in [(13, 64, 32), (25, 77, 45), (45, 64, 70), (150, 128, 33)] {
            let (x, w, start) = (random(m * k, 4), random(n * k, 5), random(m * n, 6));
            let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
            let weight = Bf16Weight::new(&wb, n, k);
            let mut paths = vec![start.clone()];
            weight.multiply_add_without_tiles(&mut paths[0], &x, m);
            if weight.on_tiles() {
                paths.push(start.clone());
                weight.multiply_add(&mut paths[1], &x, m);
            }
            for got in &paths {
                for i in 0..m {
                    for j in 0..n {
                        let (mut want, mut size) = (f64::from(start[i * n + j]), 1.0);
                        for c in 0..k {
                            let p = f64::from(round(x[i * k + c])) * f64::from(round(w[j * k + c]));
                            want += p;
                            size += p.abs();
                        }
                        let diff = (f64::from(got[i * n + j]) - want).abs();
                        // Twice the worst case of k f32 additions (k 2^-24 of the terms' size).
                        let bound = 2.0 * (k + 1) as f64 * f64::from(f32::EPSILON) / 2.0 * size;
                        assert!(diff <= bound, "m{m} k{k} n{n} [{i},{j}]: {diff}");
                    }
                }
            }
        }
    }

    #[test]
    fn packed_bf16_same_bits_whatever_the_thread_count() {
        if !PackedBf16Linear::supported() {
            eprintln!("SKIPPED: this CPU has no AVX512-BF16");
            return;
        }
        let (m, k, n) = (170, 96, 200);
        let w = Tensor::from_vec(random(n * k, 5), (n, k), &Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let packed = PackedBf16Linear::new(&Linear::new(w, None)).unwrap();
        let x: Vec<bf16> = random(m * k, 6).into_iter().map(bf16::from_f32).collect();
        let run = |threads| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap()
                .install(|| packed.run(&x, m))
        };
        let one = run(1);
        assert!(run(3) == one);
    }
}
