//! f32 matrix products on Intel AMX tiles (Sapphire Rapids and later), at f32-grade accuracy.
//!
//! An AMX `TDPBF16PS` multiplies a 16 x 32 bf16 tile by a 32 x 16 one into 16 x 16 f32 sums:
//! 8,192 multiply-adds per instruction, where an AVX-512 FMA does 16. bf16 keeps 8 bits of
//! mantissa, so one product per pair would move an f32 encoder's vectors visibly (a cosine of
//! 0.9973 to the f32 ones on one MPNet document). Each f32 operand is therefore split into two
//! bf16 values, `x = hi + lo` (`hi` the rounded value, `lo` the rounded remainder), and three
//! products are summed: `hi_x hi_w + hi_x lo_w + lo_x hi_w`. What is dropped, `lo_x lo_w` and
//! the remainders' own rounding, is about 2^-16 of each product; the sums stay f32. This is the
//! "bf16x3" scheme that oneDNN and PyTorch (`float32_matmul_precision = "high"`) offer on this
//! hardware.
//!
//! The weight `[n, k]` is packed once, as `bf16::PackedBf16Linear` packs it (panels of 32
//! output columns, `[k / 2][32]` bf16 pairs, the layout a `B` tile reads), once for `hi` and once
//! for `lo`, `k` padded to a multiple of 32. Inputs are split per task into the same padded
//! form. A task owns whole output rows: every sum runs over the whole inner dimension in one
//! fixed order, so results do not depend on the thread count.
//!
//! Linux hands out AMX state only on request (`arch_prctl(ARCH_REQ_XCOMP_PERM)`); [`available`]
//! asks once and says no where the CPU, the kernel or `FRESHSTACK_AMX=0` refuses, and callers
//! keep their AVX-512 path.

use std::sync::OnceLock;

use half::bf16;
use rayon::prelude::*;

use super::aligned::LineVec;
use super::bf16::{round_row, store_bf16_rows};

/// Output columns per packed panel (two `B` tiles of 16).
const PANEL: usize = 32;
/// Rows per row block (two `A` tiles of 16).
const BLOCK_ROWS: usize = 32;
/// Row blocks per parallel task: the task's split input stays in cache while every weight
/// panel passes over it.
const BLOCKS_PER_TASK: usize = 4;
/// Inner values per tile step (one `A` tile row: 32 bf16 = 64 bytes).
const STEP: usize = 32;

/// Whether AMX-BF16 runs here: the CPU has it, Linux granted this process the tile state, and
/// `FRESHSTACK_AMX` is not `0`. Asked once per process.
pub fn available() -> bool {
    static READY: OnceLock<bool> = OnceLock::new();
    *READY.get_or_init(|| {
        if std::env::var("FRESHSTACK_AMX").is_ok_and(|v| v.trim() == "0") {
            return false;
        }
        request_tile_state()
    })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn request_tile_state() -> bool {
    use std::arch::x86_64::__cpuid_count;
    // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
    let leaf7 = __cpuid_count(7, 0);
    let has_amx = leaf7.edx & (1 << 22) != 0 && leaf7.edx & (1 << 24) != 0;
    // The splitting and storing around the tiles use AVX512-BF16/BW/VL (every AMX CPU has them).
    let has_avx512 = std::arch::is_x86_feature_detected!("avx512bf16")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vl");
    if !has_amx || !has_avx512 {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: a plain system call with integer arguments; it changes only whether this
    // process may use the AMX tile registers.
    let granted = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    granted == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn request_tile_state() -> bool {
    false
}

/// A weight `[n, k]` split into bf16 `hi` and `lo` parts and packed for the AMX kernel.
pub struct AmxWeight {
    hi: LineVec<u32>,
    lo: LineVec<u32>,
    n: usize,
    k: usize,
    /// `k` rounded up to a multiple of [`STEP`].
    k_padded: usize,
}

impl AmxWeight {
    /// Splits and packs a row-major `[n, k]` f32 weight.
    pub fn new(weight: &[f32], n: usize, k: usize) -> Self {
        assert_eq!(
            weight.len(),
            n * k,
            "weight of {} for [{n}, {k}]",
            weight.len()
        );
        let k_padded = k.div_ceil(STEP) * STEP;
        let pairs = k_padded / 2;
        let panel_len = pairs * PANEL;
        let mut hi = LineVec::<u32>::zeroed(n.div_ceil(PANEL) * panel_len);
        let mut lo = LineVec::<u32>::zeroed(hi.len());
        hi.par_chunks_mut(panel_len)
            .zip(lo.par_chunks_mut(panel_len))
            .enumerate()
            .for_each(|(panel, (hi, lo))| {
                let first = panel * PANEL;
                let columns = weight[first * k..(first + PANEL).min(n) * k].chunks_exact(k);
                for (lane, values) in columns.enumerate() {
                    for (index, &value) in values.iter().enumerate() {
                        let (h, l) = split(value);
                        let at = (index / 2) * PANEL + lane;
                        let shift = 16 * (index % 2);
                        hi[at] |= u32::from(h.to_bits()) << shift;
                        lo[at] |= u32::from(l.to_bits()) << shift;
                    }
                }
            });
        Self {
            hi,
            lo,
            n,
            k,
            k_padded,
        }
    }

    /// Output features.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// Input features.
    pub fn columns(&self) -> usize {
        self.k
    }

    /// `dst[m, n] += x[m, k] W^T`, row-major, over rayon's threads. Call only where
    /// [`available`] is true.
    pub fn multiply_add(&self, dst: &mut [f32], x: &[f32], m: usize) {
        let (n, k) = (self.n, self.k);
        assert!(
            dst.len() == m * n && x.len() == m * k,
            "operands do not fit [{m}, {k}] x [{n}, {k}]^T"
        );
        assert!(available(), "AMX kernel called where AMX is unavailable");
        if m == 0 || n == 0 || k == 0 {
            return;
        }
        let task_rows = BLOCK_ROWS * BLOCKS_PER_TASK;
        dst.par_chunks_mut(task_rows * n)
            .zip(x.par_chunks(task_rows * k))
            .for_each(|(dst, x)| self.task(dst, x));
    }

    /// One task: splits its rows of `x` and computes their rows of `dst`.
    fn task(&self, dst: &mut [f32], x: &[f32]) {
        let (n, k, kp) = (self.n, self.k, self.k_padded);
        let m = x.len() / k;
        let m_padded = m.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
        let mut x_hi = LineVec::<bf16>::zeroed(m_padded * kp);
        let mut x_lo = LineVec::<bf16>::zeroed(m_padded * kp);
        // One row at a time, zero padded to `kp`.
        let (mut row_hi, mut row_lo) = (vec![bf16::ZERO; kp], vec![bf16::ZERO; kp]);
        for (r, src) in x.chunks_exact(k).enumerate() {
            split_row(src, &mut row_hi[..k], &mut row_lo[..k]);
            scatter_row(&row_hi, r, &mut x_hi);
            scatter_row(&row_lo, r, &mut x_lo);
        }
        task_product::<true>(
            [&x_hi, &x_lo],
            [&self.hi, &self.lo],
            (m, n, kp),
            Start::Dst,
            dst,
        );
    }
}

/// An f32 linear layer `x W^T + b` on the AMX kernel, for the decoder encoders' f32 weights
/// (EmbeddingGemma); built only where [`available`].
pub(crate) struct AmxLinear {
    weight: AmxWeight,
    bias: Option<Vec<f32>>,
}

impl AmxLinear {
    /// Splits and packs `linear`'s weight (converted to f32).
    pub(crate) fn new(linear: &candle_nn::Linear) -> candle_core::Result<Self> {
        use candle_core::DType;
        let (n, k) = linear.weight().dims2()?;
        let values = linear
            .weight()
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?;
        let bias = super::bf16::bias_f32(linear)?;
        Ok(Self {
            weight: AmxWeight::new(&values, n, k),
            bias,
        })
    }

    /// `x [.., in]` (f32, on the CPU) to `[.., out]`.
    pub(crate) fn forward(
        &self,
        x: &candle_core::Tensor,
    ) -> candle_core::Result<candle_core::Tensor> {
        x.contiguous()?.apply_op1_no_bwd(self)
    }
}

impl candle_core::CustomOp1 for AmxLinear {
    fn name(&self) -> &'static str {
        "freshstack-amx-linear"
    }

    fn cpu_fwd(
        &self,
        storage: &candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        let candle_core::CpuStorage::F32(data) = storage else {
            candle_core::bail!("AMX linear: expected an f32 input");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("AMX linear: expected a contiguous input");
        };
        let (n, k) = (self.weight.rows(), self.weight.columns());
        let dims = layout.shape().dims();
        if dims.last() != Some(&k) {
            candle_core::bail!("AMX linear: input {dims:?} for {k} input features");
        }
        let x = &data[start..end];
        let m = x.len() / k.max(1);
        let mut out = match &self.bias {
            Some(bias) => bias.repeat(m),
            None => vec![0f32; m * n],
        };
        self.weight.multiply_add(&mut out, x, m);
        let mut out_dims = dims.to_vec();
        if let Some(last) = out_dims.last_mut() {
            *last = n;
        }
        Ok((
            candle_core::CpuStorage::F32(out),
            candle_core::Shape::from(out_dims),
        ))
    }
}

/// `out[m, n] = bf16(x[m, k] W^T + bias)` for bf16 rows and a weight packed by
/// `bf16::PackedBf16Linear` (one bf16 product per pair, f32 sums, one rounding at the end, as
/// its AVX512-BF16 kernel computes; only the order of the f32 sums differs). `k` must be a
/// positive multiple of 32 and [`available`] true.
pub(crate) fn bf16_linear(
    panels: &[u32],
    bias: Option<&[f32]>,
    x: &[bf16],
    (m, n, k): (usize, usize, usize),
    out: &mut [bf16],
) {
    let panel_len = k / 2 * PANEL;
    assert!(k > 0 && k.is_multiple_of(STEP) && x.len() == m * k && out.len() == m * n);
    assert!(panels.len() >= n.div_ceil(PANEL) * panel_len && bias.is_none_or(|b| b.len() == n));
    assert!(available(), "AMX kernel called where AMX is unavailable");
    if m == 0 || n == 0 {
        return;
    }
    let task_rows = BLOCK_ROWS * BLOCKS_PER_TASK;
    out.par_chunks_mut(task_rows * n)
        .zip(x.par_chunks(task_rows * k))
        .for_each(|(out, x)| {
            let blocks = Bf16Rows::new(x, k);
            for panel in 0..n.div_ceil(PANEL) {
                let first_col = panel * PANEL;
                let cols = PANEL.min(n - first_col);
                let mut panel_bias = [0f32; PANEL];
                if let Some(b) = bias {
                    panel_bias[..cols].copy_from_slice(&b[first_col..first_col + cols]);
                }
                let w = &panels[panel * panel_len..(panel + 1) * panel_len];
                blocks.times_panel(w, |start, live, sums| {
                    let at =
                        &mut out[start * n + first_col..(start + live - 1) * n + first_col + cols];
                    // SAFETY: AVX512-BF16 is part of `available()`; `at` spans rows
                    // start..start + live at columns first_col..first_col + cols (row stride n).
                    unsafe { store_bf16_rows(live, sums, &panel_bias, at.as_mut_ptr(), n, cols) };
                });
            }
        });
}

thread_local! {
    /// A task's packed bf16 rows in [`bf16_product`] (memory reused from product to product).
    static TASK_ROWS: std::cell::RefCell<LineVec<bf16>> =
        const { std::cell::RefCell::new(LineVec::new()) };
}

/// What the sums of [`bf16_product`] start from.
#[derive(Clone, Copy)]
pub(crate) enum Start<'a> {
    /// Zero: `dst`'s old values are not read.
    Zero,
    /// `dst`'s values (`dst += product`).
    Dst,
    /// These `[m, n]` values (`dst = values + product`; `dst`'s old values not read).
    From(&'a [f32]),
}

/// `dst[m, n] = start + bf16(x)[m, k] W^T` for f32 rows and a bf16 weight packed by
/// `bf16::PackedBf16Linear`: each task rounds its rows to bf16 (to nearest even) and the tiles
/// add one exact product per pair in f32, the sums never rounded. `k` must be a positive
/// multiple of 32 and [`available`] true. Rows do not depend on the thread count or on their
/// place among the `m` (a ragged block runs on a padded copy with the same steps).
pub(crate) fn bf16_product(
    panels: &[u32],
    x: &[f32],
    (m, n, k): (usize, usize, usize),
    start: Start,
    dst: &mut [f32],
) {
    let panel_len = k / 2 * PANEL;
    assert!(k > 0 && k.is_multiple_of(STEP) && x.len() == m * k && dst.len() == m * n);
    assert!(panels.len() >= n.div_ceil(PANEL) * panel_len);
    if let Start::From(values) = start {
        assert_eq!(values.len(), m * n, "start values do not fit [{m}, {n}]");
    }
    assert!(available(), "AMX kernel called where AMX is unavailable");
    if m == 0 || n == 0 {
        return;
    }
    let task_rows = BLOCK_ROWS * BLOCKS_PER_TASK;
    dst.par_chunks_mut(task_rows * n)
        .zip(x.par_chunks(task_rows * k))
        .enumerate()
        .for_each(|(task, (dst, x))| {
            let m = x.len() / k;
            let m_padded = m.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
            TASK_ROWS.with(|rows| {
                let mut rows = rows.borrow_mut();
                rows.resize_for_overwrite(m_padded * k);
                let mut row = vec![bf16::ZERO; k];
                for (r, src) in x.chunks_exact(k).enumerate() {
                    round_row(src, &mut row);
                    scatter_row(&row, r, &mut rows);
                }
                row.fill(bf16::ZERO);
                for r in m..m_padded {
                    scatter_row(&row, r, &mut rows);
                }
                let start = match start {
                    Start::From(values) => Start::From(&values[task * task_rows * n..][..m * n]),
                    other => other,
                };
                let rows: &[bf16] = &rows;
                task_product::<false>([rows, rows], [panels, panels], (m, n, k), start, dst);
            });
        });
}

/// One task's rows, packed by [`scatter_row`] (`m` live rows of `kp` values, zero padded to
/// whole blocks), times every panel of the weight: `dst[m, n] = start + A W^T`, with
/// `A = a[0] + a[1]` and `W = w[0] + w[1]` as three products with `SPLIT` (bf16x3), `a[0]` and
/// `w[0]` alone without. Whole 32 x 32 blocks whose rows start cache lines run on `dst`
/// directly; the others go through an aligned copy with the same operations, so a row's
/// result depends neither on where it falls in a batch nor on `dst`'s address.
fn task_product<const SPLIT: bool>(
    [a_hi, a_lo]: [&[bf16]; 2],
    [w_hi, w_lo]: [&[u32]; 2],
    (m, n, kp): (usize, usize, usize),
    start: Start,
    dst: &mut [f32],
) {
    let panel_len = kp / 2 * PANEL;
    let m_padded = m.div_ceil(BLOCK_ROWS) * BLOCK_ROWS;
    assert!(a_hi.len() >= m_padded * kp && a_lo.len() >= m_padded * kp && dst.len() == m * n);
    let panels = n.div_ceil(PANEL);
    assert!(w_hi.len() >= panels * panel_len && w_lo.len() >= panels * panel_len);
    let mut sums = SumsBlock::default();
    // A tile load or store across cache lines runs several times slower than the copy.
    let rows_on_lines = (n * 4).is_multiple_of(64);
    let _tiles = TileConfig::load();
    for panel in 0..panels {
        let weights = panel * panel_len..(panel + 1) * panel_len;
        let w = [&w_hi[weights.clone()], &w_lo[weights]];
        let first_col = panel * PANEL;
        let cols = PANEL.min(n - first_col);
        for block in 0..m_padded / BLOCK_ROWS {
            let first = block * BLOCK_ROWS;
            let inputs = first * kp..(first + BLOCK_ROWS) * kp;
            let a = [&a_hi[inputs.clone()], &a_lo[inputs]];
            let live = (m - first).min(BLOCK_ROWS);
            let span = first * n + first_col..(first + live - 1) * n + first_col + cols;
            let direct = live == BLOCK_ROWS
                && cols == PANEL
                && rows_on_lines
                && starts_line(dst[span.clone()].as_ptr())
                && match start {
                    Start::From(values) => starts_line(values[span.clone()].as_ptr()),
                    _ => true,
                };
            if direct {
                let c = dst[span.clone()].as_mut_ptr();
                // SAFETY: the tile configuration is loaded on this thread (`_tiles`); `a` holds
                // 32 rows of `kp` values, `w` one panel of `kp / 2` pairs (asserted), and
                // `dst`'s span (and the start values' same span) 32 rows of 32 values `n`
                // apart.
                unsafe {
                    match start {
                        Start::Zero => block_product::<SPLIT, false, true>(a, w, kp, c, c, n),
                        Start::Dst => block_product::<SPLIT, true, true>(a, w, kp, c, c, n),
                        Start::From(values) => {
                            let c_in = values[span].as_ptr();
                            block_product::<SPLIT, true, true>(a, w, kp, c_in, c, n)
                        }
                    }
                };
                continue;
            }
            let sums = &mut sums.0;
            sums.fill(0.0);
            let source: Option<&[f32]> = match start {
                Start::Zero => None,
                Start::Dst => Some(dst),
                Start::From(values) => Some(values),
            };
            if let Some(source) = source {
                for r in 0..live {
                    let row = &source[(first + r) * n + first_col..][..cols];
                    sums[r * PANEL..r * PANEL + cols].copy_from_slice(row);
                }
            }
            let c = sums.as_mut_ptr();
            // SAFETY: as above, with `sums` 32 rows of 32 values `PANEL` apart.
            unsafe { block_product::<SPLIT, true, true>(a, w, kp, c, c, PANEL) };
            for r in 0..live {
                let row = &mut dst[(first + r) * n + first_col..][..cols];
                row.copy_from_slice(&sums[r * PANEL..r * PANEL + cols]);
            }
        }
    }
}

/// bf16 rows `[rows, k]` (`k` a multiple of 32) in the 32-row blocks the AMX kernel reads, each
/// starting a cache line: the caller's rows where they do (a ragged last block copied and zero
/// padded), a padded copy of all of them where they do not.
pub(crate) struct Bf16Rows<'a> {
    whole: &'a [bf16],
    copy: LineVec<bf16>,
    rows: usize,
    k: usize,
}

impl<'a> Bf16Rows<'a> {
    /// Blocks of `x`; `k` must be a multiple of 32 and [`available`] true.
    pub(crate) fn new(x: &'a [bf16], k: usize) -> Self {
        assert!(k.is_multiple_of(STEP) && k > 0 && x.len().is_multiple_of(k));
        assert!(available(), "AMX kernel called where AMX is unavailable");
        let rows = x.len() / k;
        // Rows are `2k` bytes apart, a multiple of 64: the first row's address decides.
        let borrowed = if (x.as_ptr() as usize).is_multiple_of(64) {
            rows / BLOCK_ROWS * BLOCK_ROWS
        } else {
            0
        };
        let rest = &x[borrowed * k..];
        let mut copy = LineVec::zeroed(rest.len().div_ceil(BLOCK_ROWS * k) * BLOCK_ROWS * k);
        copy[..rest.len()].copy_from_slice(rest);
        Self {
            whole: &x[..borrowed * k],
            copy,
            rows,
            k,
        }
    }

    /// The rows times one weight panel (`k / 2` pairs x 32 columns, as
    /// `bf16::PackedBf16Linear` packs it): one bf16 product per pair, f32 sums. Calls
    /// `emit(first_row, live_rows, sums)` per block, `sums` 32 rows of 32 columns.
    pub(crate) fn times_panel(&self, panel: &[u32], mut emit: impl FnMut(usize, usize, &[f32])) {
        let k = self.k;
        assert!(panel.len() >= k / 2 * PANEL);
        let borrowed = self.whole.len() / k;
        let mut sums = SumsBlock::default();
        let _tiles = TileConfig::load();
        for start in (0..self.rows).step_by(BLOCK_ROWS) {
            let a = if start < borrowed {
                &self.whole[start * k..(start + BLOCK_ROWS) * k]
            } else {
                &self.copy[(start - borrowed) * k..(start - borrowed + BLOCK_ROWS) * k]
            };
            // SAFETY: the tile configuration is loaded on this thread (`_tiles`); `a` holds 32
            // rows of k values, `panel` k / 2 pairs x 32, `sums` 32 x 32.
            unsafe {
                block_product::<false, false, false>(
                    [a, a],
                    [panel, panel],
                    k,
                    sums.0.as_ptr(),
                    sums.0.as_mut_ptr(),
                    PANEL,
                )
            };
            emit(start, (self.rows - start).min(BLOCK_ROWS), &sums.0);
        }
    }
}

/// One block's 32 x 32 f32 sums, starting a cache line (tile loads and stores read and write
/// it whole).
#[repr(C, align(64))]
struct SumsBlock([f32; BLOCK_ROWS * PANEL]);

impl Default for SumsBlock {
    fn default() -> Self {
        Self([0.0; BLOCK_ROWS * PANEL])
    }
}

/// Whether a tile load or store at `at` reads whole cache lines.
fn starts_line(at: *const f32) -> bool {
    (at as usize).is_multiple_of(64)
}

/// Places `row` (row `r` of a task, `kp` values, `kp` a multiple of 32) in the layout the tile
/// loads read fastest: per block of 32 rows, per step of 32 inner values, the block's 32 rows x
/// 32 values contiguous.
fn scatter_row(row: &[bf16], r: usize, packed: &mut [bf16]) {
    let kp = row.len();
    let (block, within) = (r / BLOCK_ROWS, r % BLOCK_ROWS);
    let first = block * BLOCK_ROWS * kp + within * STEP;
    for (step, piece) in row.chunks_exact(STEP).enumerate() {
        let at = first + step * BLOCK_ROWS * STEP;
        packed[at..at + STEP].copy_from_slice(piece);
    }
}

/// `value = hi + lo + (a remainder below 2^-16 of it)`, both rounded to nearest even.
fn split(value: f32) -> (bf16, bf16) {
    let hi = bf16::from_f32(value);
    let lo = bf16::from_f32(value - hi.to_f32());
    (hi, lo)
}

/// [`split`] over a row, 16 values per `VCVTNEPS2BF16` (whose rounding is [`split`]'s for
/// every normal value; subnormals become zero, as the tile products treat them anyway).
fn split_row(row: &[f32], hi: &mut [bf16], lo: &mut [bf16]) {
    assert!(hi.len() == row.len() && lo.len() == row.len());
    let whole = row.len() / 16 * 16;
    // SAFETY: `available()` (checked by the public entry) requires AVX512-BF16; the asserted
    // lengths cover the first `whole` values.
    unsafe { split_row_avx512(&row[..whole], &mut hi[..whole], &mut lo[..whole]) };
    for ((&value, h), l) in row[whole..]
        .iter()
        .zip(&mut hi[whole..])
        .zip(&mut lo[whole..])
    {
        (*h, *l) = split(value);
    }
}

/// # Safety
/// The CPU must have AVX512-BF16; the three slices hold the same multiple of 16 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn split_row_avx512(row: &[f32], hi: &mut [bf16], lo: &mut [bf16]) {
    use std::arch::x86_64::*;
    for ((values, h), l) in row
        .chunks_exact(16)
        .zip(hi.chunks_exact_mut(16))
        .zip(lo.chunks_exact_mut(16))
    {
        // SAFETY: each chunk holds 16 values (the caller's contract).
        unsafe {
            let v = _mm512_loadu_ps(values.as_ptr());
            let high: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v));
            let back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(high), 16));
            let low: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_sub_ps(v, back)));
            _mm256_storeu_si256(h.as_mut_ptr().cast(), high);
            _mm256_storeu_si256(l.as_mut_ptr().cast(), low);
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn split_row_avx512(_row: &[f32], _hi: &mut [bf16], _lo: &mut [bf16]) {
    unreachable!("AMX is x86_64 only")
}

/// The tile shapes of this kernel, loaded on the current thread for the value's lifetime;
/// dropping it releases the tile state.
struct TileConfig;

impl TileConfig {
    /// Configures tmm0..tmm7 as 16 rows x 64 bytes (C: 16 x 16 f32; A: 16 x 32 bf16; B: 16
    /// pairs x 16 columns).
    fn load() -> Self {
        let mut config = [0u8; 64];
        config[0] = 1; // palette 1
        for tile in 0..8 {
            config[16 + 2 * tile] = 64; // bytes per row (u16, little-endian)
            config[48 + tile] = 16; // rows
        }
        // SAFETY: `available()` (checked by the public entry) granted the tile state; the
        // configuration is a valid palette-1 layout read from a 64-byte buffer.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", in(reg) config.as_ptr(), options(nostack, readonly))
        };
        Self
    }
}

impl Drop for TileConfig {
    fn drop(&mut self) {
        // SAFETY: releases the tile state this value configured.
        unsafe { std::arch::asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// `C[32][32] += A[32, kp] W_panel^T` with `A = a_hi + a_lo`, `W = w_hi + w_lo`, as
/// `hi hi + hi lo + lo hi` per 32-wide step, in that order, for every step of `kp`; without
/// `SPLIT`, of `a_hi` and `w_hi` alone (`a_lo`, `w_lo` unread). With `LOAD_C` the sums start
/// from `C`; without, from zero (`C` only written).
///
/// Tiles: C in tmm0..tmm3 (rows 0-15 / 16-31 x columns 0-15 / 16-31), A in tmm4, tmm5, B in
/// tmm6, tmm7.
///
/// # Safety
/// The tile configuration of [`TileConfig::load`] must be loaded on this thread; `a_hi`, `a_lo`
/// must hold 32 rows of `kp` bf16 values, `w_hi`, `w_lo` `kp / 2 * 32` pairs; `c` must point
/// at 32 rows of 32 f32 values `ldc` values apart, this call's alone, and with `LOAD_C`
/// `c_in` at 32 readable rows the same distance apart (the sums start from them; `c_in` may be
/// `c`).
unsafe fn block_product<const SPLIT: bool, const LOAD_C: bool, const PACKED_A: bool>(
    [a_hi, a_lo]: [&[bf16]; 2],
    [w_hi, w_lo]: [&[u32]; 2],
    kp: usize,
    c_in: *const f32,
    c: *mut f32,
    ldc: usize,
) {
    use std::arch::asm;
    debug_assert!(a_hi.len() >= BLOCK_ROWS * kp && a_lo.len() >= BLOCK_ROWS * kp);
    debug_assert!(w_hi.len() >= kp / 2 * PANEL && w_lo.len() >= kp / 2 * PANEL);
    // Bytes between A rows, bf16 values to the second A tile (row 16) and to the next step:
    // packed, each step's 32 rows x 32 values are contiguous ([`scatter_row`]).
    let (a_stride, a_half, a_step) = if PACKED_A {
        (STEP * 2, 16 * STEP, BLOCK_ROWS * STEP)
    } else {
        (kp * 2, 16 * kp, STEP)
    };
    let b_stride = PANEL * 4; // bytes between B rows (pairs)
    let sc = ldc * 4; // bytes between rows of C
    // SAFETY (every block): the addresses are inside the slices as the caller guarantees:
    // a step reads A rows 0..32 at columns step..step + 32 and B pairs step/2..step/2 + 16.
    unsafe {
        if LOAD_C {
            asm!(
                "tileloadd tmm0, [{c00} + {sc}*1]",
                "tileloadd tmm1, [{c01} + {sc}*1]",
                "tileloadd tmm2, [{c10} + {sc}*1]",
                "tileloadd tmm3, [{c11} + {sc}*1]",
                c00 = in(reg) c_in,
                c01 = in(reg) c_in.add(16),
                c10 = in(reg) c_in.add(16 * ldc),
                c11 = in(reg) c_in.add(16 * ldc + 16),
                sc = in(reg) sc,
                options(nostack, readonly),
            );
        } else {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
        }
        for step in (0..kp).step_by(STEP) {
            let a_at = step / STEP * a_step;
            let (ah, bh) = (a_hi.as_ptr().add(a_at), w_hi.as_ptr().add(step / 2 * PANEL));
            if PACKED_A {
                let (a_next, b_next) = (
                    ah.wrapping_add(AHEAD * a_step),
                    bh.wrapping_add(AHEAD * 16 * PANEL),
                );
                prefetch_step(a_next.cast(), b_next.cast());
            }
            tile_step(ah, a_half, a_stride, bh, b_stride);
            if SPLIT {
                let bl = w_lo.as_ptr().add(step / 2 * PANEL);
                if PACKED_A {
                    let al = a_lo.as_ptr().wrapping_add(a_at + AHEAD * a_step);
                    prefetch_step(al.cast(), bl.wrapping_add(AHEAD * 16 * PANEL).cast());
                }
                tile_step(ah, a_half, a_stride, bl, b_stride);
                tile_step(a_lo.as_ptr().add(a_at), a_half, a_stride, bh, b_stride);
            }
        }
        asm!(
            "tilestored [{c00} + {sc}*1], tmm0",
            "tilestored [{c01} + {sc}*1], tmm1",
            "tilestored [{c10} + {sc}*1], tmm2",
            "tilestored [{c11} + {sc}*1], tmm3",
            c00 = in(reg) c,
            c01 = in(reg) c.add(16),
            c10 = in(reg) c.add(16 * ldc),
            c11 = in(reg) c.add(16 * ldc + 16),
            sc = in(reg) sc,
            options(nostack),
        );
    }
}

/// Steps ahead that [`prefetch_step`] fetches.
const AHEAD: usize = 4;

/// Prefetches two 2 KiB blocks (a packed A step and a B step) into L1.
#[inline(always)]
unsafe fn prefetch_step(a: *const u8, b: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetches never fault.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        for line in 0..32 {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(line * 64).cast());
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add(line * 64).cast());
        }
    }
}

/// One 32-wide step of the four C tiles (tmm0..tmm3): `A` rows 0-15 / 16-31 (`a`, `half`
/// values on; rows `a_stride` bytes apart) into tmm4 / tmm5, the 16 pairs of columns 0-15 /
/// 16-31 of a panel step (`b`, rows `b_stride` bytes apart) into tmm6 / tmm7, and the four
/// products. Tile registers are not renamed, so each load is issued as soon as the products
/// reading its register's previous contents are issued, letting loads overlap products.
///
/// Public so that `benches/amx_tiles.rs` measures this step itself.
///
/// # Safety
/// As `block_product`'s: the tile configuration of `TileConfig::load` (tmm0..tmm7 as 16 rows x
/// 64 bytes) is loaded on this thread, and the 32 rows and 16 pairs are readable.
#[inline(always)]
pub unsafe fn tile_step(
    a: *const bf16,
    half: usize,
    a_stride: usize,
    b: *const u32,
    b_stride: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe {
        std::arch::asm!(
            "tileloadd tmm4, [{a} + {sa}*1]",
            "tileloadd tmm6, [{b} + {sb}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tileloadd tmm7, [{b16} + {sb}*1]",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tileloadd tmm5, [{a2} + {sa}*1]",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            a = in(reg) a,
            a2 = in(reg) a.add(half),
            sa = in(reg) a_stride,
            b = in(reg) b,
            b16 = in(reg) b.add(16),
            sb = in(reg) b_stride,
            options(nostack, readonly),
        )
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values with a wide spread of magnitudes, so the `lo` parts matter.
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut state = seed;
        (0..len)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let unit = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                unit * (1.0 + ((state >> 20) & 7) as f32)
            })
            .collect()
    }

    fn exact(dst: &[f32], x: &[f32], w: &[f32], m: usize, n: usize, k: usize) -> Vec<f64> {
        let mut out: Vec<f64> = dst.iter().map(|&v| f64::from(v)).collect();
        for r in 0..m {
            for c in 0..n {
                let dot: f64 = (0..k)
                    .map(|i| f64::from(x[r * k + i]) * f64::from(w[c * k + i]))
                    .sum();
                out[r * n + c] += dot;
            }
        }
        out
    }

    #[test]
    fn split_parts_sum_to_the_value_within_2_pow_minus_16() {
        for &value in &values(10_000, 7) {
            let (hi, lo) = split(value);
            let rest = (f64::from(value) - f64::from(hi.to_f32()) - f64::from(lo.to_f32())).abs();
            assert!(
                rest <= f64::from(value.abs()) * 2f64.powi(-16),
                "{value}: {rest}"
            );
        }
    }

    #[test]
    fn amx_products_match_f64_to_f32_grade() {
        if !available() {
            eprintln!("SKIPPED: this CPU or kernel has no AMX-BF16");
            return;
        }
        // Shapes with ragged rows, columns and inner sizes, and one across several tasks.
        for &(m, n, k) in &[
            (1, 1, 1),
            (5, 33, 31),
            (37, 70, 96),
            (300, 64, 384),
            (33, 40, 1000),
        ] {
            let x = values(m * k, 1 + m as u64);
            let w = values(n * k, 2 + n as u64);
            let start = values(m * n, 3);
            let packed = AmxWeight::new(&w, n, k);
            let mut dst = start.clone();
            packed.multiply_add(&mut dst, &x, m);
            let want = exact(&start, &x, &w, m, n, k);
            let scale: f64 = (0..k).map(|i| f64::from(x[i].abs()) * 4.0).sum::<f64>() + 1.0;
            for (i, (&got, &want)) in dst.iter().zip(&want).enumerate() {
                let error = (f64::from(got) - want).abs();
                assert!(error <= scale * 1e-5, "[{m}x{n}x{k}] {i}: {got} vs {want}");
            }
        }
    }

    #[test]
    fn a_rows_result_does_not_depend_on_its_place_in_the_batch() {
        if !available() {
            eprintln!("SKIPPED: this CPU or kernel has no AMX-BF16");
            return;
        }
        let (m, n, k) = (70, 40, 96);
        let (x, w, start) = (values(m * k, 21), values(n * k, 22), values(m * n, 23));
        let packed = AmxWeight::new(&w, n, k);
        let mut batch = start.clone();
        packed.multiply_add(&mut batch, &x, m);
        // Row 40 sits in a whole 32-row block of the batch, alone in a ragged block here.
        let mut alone = start[40 * n..41 * n].to_vec();
        packed.multiply_add(&mut alone, &x[40 * k..41 * k], 1);
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same(&alone, &batch[40 * n..41 * n]));
    }

    /// `panels` as `bf16::PackedBf16Linear` packs a `[n, k]` weight of already-bf16 values.
    fn packed_bf16(w: &[f32], n: usize, k: usize) -> LineVec<u32> {
        let w: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        crate::kernels::bf16::pack_panels(&w, n, k)
    }

    #[test]
    fn bf16_product_sums_exact_bf16_products_from_each_start() {
        if !available() {
            eprintln!("SKIPPED: this CPU or kernel has no AMX-BF16");
            return;
        }
        let (m, n, k) = (70, 40, 96);
        let (x, w, init) = (values(m * k, 31), values(n * k, 32), values(m * n, 33));
        let panels = packed_bf16(&w, n, k);
        let round =
            |v: &[f32]| -> Vec<f32> { v.iter().map(|&v| bf16::from_f32(v).to_f32()).collect() };
        let (xr, wr) = (round(&x), round(&w));
        let zeros = vec![0f32; m * n];
        let abs = |v: &[f32]| -> Vec<f32> { v.iter().map(|v| v.abs()).collect() };
        // The size of the terms each sum adds up, which bounds its f32 rounding error.
        let magnitude = exact(&abs(&init), &abs(&xr), &abs(&wr), m, n, k);
        for (start, base) in [
            (Start::Zero, &zeros),
            (Start::From(&init), &init),
            (Start::Dst, &init),
        ] {
            let mut dst = if matches!(start, Start::Dst) {
                init.clone()
            } else {
                values(m * n, 34)
            };
            bf16_product(&panels, &x, (m, n, k), start, &mut dst);
            let want = exact(base, &xr, &wr, m, n, k);
            for ((got, want), size) in dst.iter().zip(&want).zip(&magnitude) {
                assert!((f64::from(*got) - want).abs() <= 1e-5 * (1.0 + size));
            }
        }
        // A row's bits do not depend on its place: row 40 is in a whole block above, alone here.
        let mut batch = vec![0f32; m * n];
        bf16_product(&panels, &x, (m, n, k), Start::From(&init), &mut batch);
        let mut alone = vec![0f32; n];
        let row_init = &init[40 * n..41 * n];
        bf16_product(
            &panels,
            &x[40 * k..41 * k],
            (1, n, k),
            Start::From(row_init),
            &mut alone,
        );
        assert!(
            alone
                .iter()
                .zip(&batch[40 * n..])
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }

    #[test]
    fn the_same_bits_whether_or_not_the_destination_starts_a_cache_line() {
        if !available() {
            eprintln!("SKIPPED: this CPU or kernel has no AMX-BF16");
            return;
        }
        // 64 columns: whole blocks run on a line-aligned destination in place, and through the
        // copy on one shifted by a value.
        let (m, n, k) = (70, 64, 96);
        let (x, w, init) = (values(m * k, 41), values(n * k, 42), values(m * n, 43));
        let panels = packed_bf16(&w, n, k);
        let weight = AmxWeight::new(&w, n, k);
        let mut on_line = LineVec::<f32>::zeroed(m * n);
        let mut shifted_buffer = LineVec::<f32>::zeroed(m * n + 1);
        let shifted = &mut shifted_buffer[1..];
        let same = |a: &[f32], b: &[f32]| a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits());
        for start in [Start::Zero, Start::From(&init), Start::Dst] {
            on_line.copy_from_slice(&init);
            shifted.copy_from_slice(&init);
            bf16_product(&panels, &x, (m, n, k), start, &mut on_line);
            bf16_product(&panels, &x, (m, n, k), start, shifted);
            assert!(same(&on_line, shifted));
        }
        on_line.copy_from_slice(&init);
        shifted.copy_from_slice(&init);
        weight.multiply_add(&mut on_line, &x, m);
        weight.multiply_add(shifted, &x, m);
        assert!(same(&on_line, shifted));
    }

    #[test]
    fn amx_same_bits_whatever_the_thread_count() {
        if !available() {
            eprintln!("SKIPPED: this CPU or kernel has no AMX-BF16");
            return;
        }
        let (m, n, k) = (700, 96, 384);
        let (x, w) = (values(m * k, 11), values(n * k, 12));
        let packed = AmxWeight::new(&w, n, k);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut dst = vec![0f32; m * n];
            pool.install(|| packed.multiply_add(&mut dst, &x, m));
            dst
        };
        let one = run(1);
        assert!(
            one.iter()
                .zip(run(3))
                .all(|(a, b)| a.to_bits() == b.to_bits())
        );
    }
}
