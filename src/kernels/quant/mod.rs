//! Quantized weight matrices straight from a GGUF file, and the two products the model needs:
//!
//! - **matrix x vector** (one generated token): the activation is quantized to 8-bit blocks of
//!   32 (a scale, the values, and their sums per 16) and each weight row meets it in integer
//!   arithmetic, llama.cpp's scheme: the row's 4/5/6/8-bit values are unpacked to bytes in
//!   registers and multiplied with `VPMADDUBSW` (AVX2) or `VPDPBUSD` (AVX512-VNNI), then scaled
//!   per block in f32. With AVX512-VNNI the K-quants meet a second quantization of the
//!   activation, in blocks of 256 (llama.cpp's Q8_K), and their sub-block scales multiply in
//!   integers (`VPDPWSSD`). Offsets and minimums are folded in through the activation's block
//!   sums.
//!   Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K have such kernels; Q2_K, Q3_K, float
//!   weights and CPUs without AVX2 take a dequantize-then-dot path (correct, slower).
//! - **matrix x matrix** (a prompt): panels of 32 weight rows are dequantized once per call and
//!   multiplied with every prompt row, in bf16 with f32 sums (`VDPBF16PS`, the embedders' kernel)
//!   on CPUs with AVX512-BF16, in f32 elsewhere and always for float weights.
//!
//! Each output value is one sum in a fixed order over its row, whatever the thread count or the
//! number of rows multiplied together, so a prompt's results do not depend on how it was split.

use std::cell::RefCell;
use std::sync::Arc;

use candle_core::quantized::k_quants::{BlockQ2K, BlockQ3K, BlockQ5K, GgmlType};
use candle_core::quantized::{GgmlDType, gguf_file};
use half::{bf16, f16};
use memmap2::Mmap;
use rayon::prelude::*;

use crate::kernels::aligned::LineVec;
use crate::kernels::amx;
use crate::kernels::bf16::{PANEL, PackedBf16Linear, TILE_ROWS, dot_tile};
use crate::kernels::dot::dot;

/// The storage types a [`QMatrix`] may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QType {
    /// 32-bit floats.
    F32,
    /// IEEE half floats.
    F16,
    /// bfloat16.
    Bf16,
    /// 4-bit, one scale per 32.
    Q4_0,
    /// 4-bit, scale and minimum per 32.
    Q4_1,
    /// 5-bit, one scale per 32.
    Q5_0,
    /// 5-bit, scale and minimum per 32.
    Q5_1,
    /// 8-bit, one scale per 32.
    Q8_0,
    /// 2-bit k-quant (256 per super-block).
    Q2K,
    /// 3-bit k-quant.
    Q3K,
    /// 4-bit k-quant.
    Q4K,
    /// 5-bit k-quant.
    Q5K,
    /// 6-bit k-quant.
    Q6K,
}

impl QType {
    /// The type of a GGUF tensor, `None` for types this backend cannot multiply.
    pub fn of_ggml(dtype: GgmlDType) -> Option<Self> {
        Some(match dtype {
            GgmlDType::F32 => QType::F32,
            GgmlDType::F16 => QType::F16,
            GgmlDType::BF16 => QType::Bf16,
            GgmlDType::Q4_0 => QType::Q4_0,
            GgmlDType::Q4_1 => QType::Q4_1,
            GgmlDType::Q5_0 => QType::Q5_0,
            GgmlDType::Q5_1 => QType::Q5_1,
            GgmlDType::Q8_0 => QType::Q8_0,
            GgmlDType::Q2K => QType::Q2K,
            GgmlDType::Q3K => QType::Q3K,
            GgmlDType::Q4K => QType::Q4K,
            GgmlDType::Q5K => QType::Q5K,
            GgmlDType::Q6K => QType::Q6K,
            _ => return None,
        })
    }

    /// Values per block.
    pub fn block_values(self) -> usize {
        match self {
            QType::F32 | QType::F16 | QType::Bf16 => 1,
            QType::Q4_0 | QType::Q4_1 | QType::Q5_0 | QType::Q5_1 | QType::Q8_0 => 32,
            _ => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            QType::F32 => 4,
            QType::F16 | QType::Bf16 => 2,
            QType::Q4_0 => 18,
            QType::Q4_1 => 20,
            QType::Q5_0 => 22,
            QType::Q5_1 => 24,
            QType::Q8_0 => 34,
            QType::Q2K => 84,
            QType::Q3K => 110,
            QType::Q4K => 144,
            QType::Q5K => 176,
            QType::Q6K => 210,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, QType::F32 | QType::F16 | QType::Bf16)
    }

    /// Whether [`dot_rows`] has an integer SIMD kernel for this type.
    fn has_int8_kernel(self) -> bool {
        matches!(
            self,
            QType::Q4_0
                | QType::Q4_1
                | QType::Q5_0
                | QType::Q5_1
                | QType::Q8_0
                | QType::Q4K
                | QType::Q5K
                | QType::Q6K
        )
    }
}

/// A `[rows, cols]` weight matrix (rows = output features) whose bytes live in the mapped file
/// (a clone shares the mapping).
#[derive(Clone)]
pub struct QMatrix {
    map: Arc<Mmap>,
    offset: usize,
    /// Storage type.
    pub qtype: QType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
}

impl QMatrix {
    /// The matrix at `offset` in `map`; `None` when `cols` is not a whole number of blocks, the
    /// bytes run past the file or are misaligned for the block type.
    pub fn new(
        map: Arc<Mmap>,
        offset: usize,
        qtype: QType,
        rows: usize,
        cols: usize,
    ) -> Option<Self> {
        if cols == 0 || !cols.is_multiple_of(qtype.block_values()) || !offset.is_multiple_of(4) {
            return None;
        }
        let len = rows.checked_mul(cols / qtype.block_values() * qtype.block_bytes())?;
        if offset.checked_add(len)? > map.len() {
            return None;
        }
        Some(Self {
            map,
            offset,
            qtype,
            rows,
            cols,
        })
    }

    /// The 2-D tensor `name` of a GGUF file mapped at `map`; the error names the tensor and what
    /// is wrong with it.
    pub fn from_gguf(
        content: &gguf_file::Content,
        map: &Arc<Mmap>,
        name: &str,
    ) -> Result<Self, String> {
        let info = content
            .tensor_infos
            .get(name)
            .ok_or_else(|| format!("tensor {name} missing"))?;
        let qtype = QType::of_ggml(info.ggml_dtype).ok_or_else(|| {
            format!(
                "tensor {name} has type {:?}, which the native backend cannot multiply (supported: \
                 F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)",
                info.ggml_dtype
            )
        })?;
        let dims = info.shape.dims();
        // GGUF shapes read back as (rows, cols) for a 2-D weight.
        let (rows, cols) = match dims {
            [rows, cols] => (*rows, *cols),
            _ => {
                return Err(format!(
                    "tensor {name}: expected 2 dimensions, found {dims:?}"
                ));
            }
        };
        let offset = usize::try_from(content.tensor_data_offset + info.offset)
            .map_err(|_| format!("tensor {name}: offset past the address space"))?;
        QMatrix::new(map.clone(), offset, qtype, rows, cols).ok_or_else(|| {
            format!(
                "tensor {name}: {rows} x {cols} {qtype:?} values do not fit the file at byte \
                 {offset} (or a row is not a whole number of blocks)"
            )
        })
    }

    /// Whether the values are stored in blocks with scales (not as plain floats).
    pub fn is_block_quantized(&self) -> bool {
        !self.qtype.is_float()
    }

    /// Every row as f32 values, `[rows, cols]` row-major.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        for (r, row) in out.chunks_exact_mut(self.cols).enumerate() {
            self.dequantize_row(r, row);
        }
        out
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        self.cols / self.qtype.block_values() * self.qtype.block_bytes()
    }

    fn row(&self, r: usize) -> &[u8] {
        let n = self.row_bytes();
        &self.map[self.offset + r * n..self.offset + (r + 1) * n]
    }

    /// Row `r` as f32 values into `out` (`cols` long).
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        dequantize(self.qtype, self.row(r), out);
    }
}

/// Reinterprets `bytes` as blocks of `T` (a `repr(C)` GGML block of alignment <= 4).
fn blocks<T: GgmlType>(bytes: &[u8]) -> &[T] {
    let size = std::mem::size_of::<T>();
    assert!(
        bytes.len().is_multiple_of(size)
            && (bytes.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>())
    );
    // SAFETY: GGML blocks are plain `repr(C)` integers and halves (every bit pattern valid); the
    // length is a whole number of blocks and the pointer is aligned (both asserted above).
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) }
}

/// Dequantizes one row of `qtype` values (candle's reference code, llama.cpp's formulas).
fn dequantize(qtype: QType, row: &[u8], out: &mut [f32]) {
    match qtype {
        QType::F32 => {
            for (o, b) in out.iter_mut().zip(row.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        QType::F16 => dequantize_f16(row, out),
        QType::Bf16 => dequantize_bf16(row, out),
        QType::Q4_0 => dequantize_q4_0(row, out),
        QType::Q4_1 => dequantize_q4_1(row, out),
        QType::Q5_0 => dequantize_q5_0(row, out),
        QType::Q5_1 => dequantize_q5_1(row, out),
        QType::Q8_0 => dequantize_q8_0(row, out),
        QType::Q2K => BlockQ2K::to_float(blocks(row), out),
        QType::Q3K => BlockQ3K::to_float(blocks(row), out),
        QType::Q4K => dequantize_q4k(row, out),
        QType::Q5K => BlockQ5K::to_float(blocks(row), out),
        QType::Q6K => dequantize_q6k(row, out),
    }
}

/// Bytes of one Q8_0 block of 32 values: the f16 scale, then 32 signed bytes.
const Q8_0_BLOCK_BYTES: usize = 34;

/// Defines `fn $name(row: &[u8], out: &mut [f32])`, which runs `$body` compiled for AVX2 where
/// the CPU has it (the build's baseline elsewhere). Candle's dequantizers run scalar in a
/// baseline x86-64 build, a large share of a prompt's time (docs/performance.md#native-gguf),
/// and the quantized encoders dequantize every weight for every batch. Each body is inlined
/// into its own `target_feature` function: passed to one generic wrapper instead, it was not
/// inlined and ran without AVX2.
macro_rules! dequantizer_with_avx2 {
    ($(#[$attr:meta])* $name:ident => $body:path) => {
        $(#[$attr])*
        fn $name(row: &[u8], out: &mut [f32]) {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                /// The body with 256-bit vectors allowed.
                ///
                /// # Safety
                /// The CPU must support AVX2.
                #[target_feature(enable = "avx2")]
                unsafe fn with_avx2(row: &[u8], out: &mut [f32]) {
                    $body(row, out);
                }
                // SAFETY: AVX2 was just detected on this CPU.
                unsafe { with_avx2(row, out) };
                return;
            }
            $body(row, out);
        }
    };
}

/// f16 to f32 (exact): `half`'s slice conversion, F16C where the CPU has it, for a row that
/// starts on a two-byte boundary (a value at a time otherwise).
fn dequantize_f16(row: &[u8], out: &mut [f32]) {
    use half::slice::HalfFloatSliceExt;
    // SAFETY: f16 is two plain bytes (any bits valid); `align_to` puts only whole, aligned
    // values in the middle part.
    let (head, halves, tail) = unsafe { row.align_to::<f16>() };
    // The file's values are little-endian, as this CPU's must be to read them in place.
    if cfg!(target_endian = "little")
        && head.is_empty()
        && tail.is_empty()
        && halves.len() == out.len()
    {
        halves.convert_to_f32_slice(out);
        return;
    }
    for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
        *o = f16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

dequantizer_with_avx2!(
    /// bf16 to f32 (exact: `half`'s conversion, the bits moved up by 16).
    dequantize_bf16 => dequantize_bf16_body
);

#[inline(always)]
fn dequantize_bf16_body(row: &[u8], out: &mut [f32]) {
    for (o, b) in out.iter_mut().zip(row.chunks_exact(2)) {
        *o = bf16::from_le_bytes([b[0], b[1]]).to_f32();
    }
}

dequantizer_with_avx2!(
    /// Q8_0 to f32: candle's `BlockQ8_0::to_float` (`q * d`, one multiply, so the same bits).
    dequantize_q8_0 => dequantize_q8_0_body
);

#[inline(always)]
fn dequantize_q8_0_body(row: &[u8], out: &mut [f32]) {
    for (block, y) in row
        .chunks_exact(Q8_0_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(32))
    {
        let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
        for (o, &q) in y.iter_mut().zip(&block[2..]) {
            *o = f32::from(q as i8) * d;
        }
    }
}

dequantizer_with_avx2!(
    /// Q4_0 to f32: candle's `BlockQ4_0::to_float` (`(q - 8) * d`, so the same bits).
    dequantize_q4_0 => dequantize_legacy_body::<false, false>
);
dequantizer_with_avx2!(
    /// Q4_1 to f32: candle's `BlockQ4_1::to_float` (`q * d + m`, never fused, so the same bits).
    dequantize_q4_1 => dequantize_legacy_body::<true, false>
);
dequantizer_with_avx2!(
    /// Q5_0 to f32: candle's `BlockQ5_0::to_float` (`(q - 16) * d`, so the same bits).
    dequantize_q5_0 => dequantize_legacy_body::<false, true>
);
dequantizer_with_avx2!(
    /// Q5_1 to f32: candle's `BlockQ5_1::to_float` (`q * d + m`, never fused, so the same bits).
    dequantize_q5_1 => dequantize_legacy_body::<true, true>
);

/// The 32-value block types before the K-quants. A block is the f16 scale `d`, with `MIN` the
/// f16 minimum `m`, with `FIFTH` 32 fifth bits (bit `j` of a little-endian u32 for value `j`),
/// then 16 bytes whose low nibbles are values 0..16 and high nibbles 16..32. A value is `q * d
/// + m` with a minimum, else `(q - 2^(bits - 1)) * d`.
#[inline(always)]
fn dequantize_legacy_body<const MIN: bool, const FIFTH: bool>(row: &[u8], out: &mut [f32]) {
    let header = 2 + if MIN { 2 } else { 0 } + if FIFTH { 4 } else { 0 };
    let offset: i32 = match (MIN, FIFTH) {
        (true, _) => 0,
        (false, true) => 16,
        (false, false) => 8,
    };
    for (block, y) in row.chunks_exact(header + 16).zip(out.chunks_exact_mut(32)) {
        let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
        let m = if MIN {
            f16::from_le_bytes([block[2], block[3]]).to_f32()
        } else {
            0.0
        };
        let at = if MIN { 4 } else { 2 };
        let qh = if FIFTH {
            u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]])
        } else {
            0
        };
        let qs = &block[header..];
        let (low, high) = y.split_at_mut(16);
        for (j, ((lo, hi), &q)) in low.iter_mut().zip(high).zip(qs).enumerate() {
            let fifth_low = (((qh >> j) << 4) & 0x10) as i32;
            let fifth_high = ((qh >> (j + 12)) & 0x10) as i32;
            let x0 = (i32::from(q & 0x0f) | fifth_low) - offset;
            let x1 = (i32::from(q >> 4) | fifth_high) - offset;
            // Without a minimum nothing is added: `+ 0.0` would turn a -0.0 into 0.0.
            if MIN {
                *lo = x0 as f32 * d + m;
                *hi = x1 as f32 * d + m;
            } else {
                *lo = x0 as f32 * d;
                *hi = x1 as f32 * d;
            }
        }
    }
}

/// Bytes of one Q4_K block of 256 values.
const Q4K_BLOCK_BYTES: usize = 144;

/// The 6-bit scale and minimum of sub-block `j` of a Q4_K/Q5_K super-block's 12 scale bytes.
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

dequantizer_with_avx2!(
    /// Q4_K to f32: candle's `BlockQ4K::to_float`, operation for operation (`d * sc * q -
    /// dmin * m` in f32; Rust never fuses a multiply and an add, so the same bits).
    dequantize_q4k => dequantize_q4k_body
);

#[inline(always)]
fn dequantize_q4k_body(row: &[u8], out: &mut [f32]) {
    for (block, y) in row
        .chunks_exact(Q4K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let d = f16::from_le_bytes([block[0], block[1]]).to_f32();
        let min = f16::from_le_bytes([block[2], block[3]]).to_f32();
        let scales = &block[4..16];
        for (k, (q, y)) in block[16..]
            .chunks_exact(32)
            .zip(y.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc1, m1) = scale_min_k4(2 * k, scales);
            let (sc2, m2) = scale_min_k4(2 * k + 1, scales);
            let (d1, m1) = (d * f32::from(sc1), min * f32::from(m1));
            let (d2, m2) = (d * f32::from(sc2), min * f32::from(m2));
            let (low, high) = y.split_at_mut(32);
            for (o, &b) in low.iter_mut().zip(q) {
                *o = d1 * f32::from(b & 0x0f) - m1;
            }
            for (o, &b) in high.iter_mut().zip(q) {
                *o = d2 * f32::from(b >> 4) - m2;
            }
        }
    }
}

/// Bytes of one Q6_K block of 256 values: 128 low nibbles, 64 bytes of high bit pairs, 16
/// signed scales, the f16 scale.
const Q6K_BLOCK_BYTES: usize = 210;

dequantizer_with_avx2!(
    /// Q6_K to f32: candle's `BlockQ6K::to_float` (`d * sc * (q - 32)`, multiplied left to
    /// right, so the same bits).
    dequantize_q6k => dequantize_q6k_body
);

#[inline(always)]
fn dequantize_q6k_body(row: &[u8], out: &mut [f32]) {
    for (block, y) in row
        .chunks_exact(Q6K_BLOCK_BYTES)
        .zip(out.chunks_exact_mut(256))
    {
        let (ql, rest) = block.split_at(128);
        let (qh, rest) = rest.split_at(64);
        let (scales, d) = rest.split_at(16);
        let d = f16::from_le_bytes([d[0], d[1]]).to_f32();
        for half in 0..2 {
            let ql = &ql[64 * half..64 * half + 64];
            let qh = &qh[32 * half..32 * half + 32];
            let scales = &scales[8 * half..8 * half + 8];
            let y = &mut y[128 * half..128 * half + 128];
            // Values l and l + 16 of each 32 have scales `is` and `is + 1`.
            for is in 0..2 {
                let scale = |k: usize| d * f32::from(scales[is + 2 * k] as i8);
                let (s1, s2, s3, s4) = (scale(0), scale(1), scale(2), scale(3));
                for l in 16 * is..16 * is + 16 {
                    let (low, high) = (ql[l], ql[l + 32]);
                    let bits = qh[l];
                    let q1 = ((low & 0x0f) | ((bits & 3) << 4)) as i8 - 32;
                    let q2 = ((high & 0x0f) | (((bits >> 2) & 3) << 4)) as i8 - 32;
                    let q3 = ((low >> 4) | (((bits >> 4) & 3) << 4)) as i8 - 32;
                    let q4 = ((high >> 4) | (((bits >> 6) & 3) << 4)) as i8 - 32;
                    y[l] = s1 * f32::from(q1);
                    y[l + 32] = s2 * f32::from(q2);
                    y[l + 64] = s3 * f32::from(q3);
                    y[l + 96] = s4 * f32::from(q4);
                }
            }
        }
    }
}

/// An activation vector quantized for the integer kernels: to 8-bit blocks of 32 for the
/// 32-value block types, and, when its length is a multiple of 256, a second time to blocks
/// of 256 for the K-quant kernels with AVX512-VNNI (llama.cpp's Q8_K): one scale per
/// super-block lets a super-block's sub-block products add up in integers, scaled by the
/// weights' 6-bit scales, before one conversion to f32.
pub struct Q8Activation {
    /// The values, rounded to `x / scale`.
    qs: Vec<i8>,
    /// One scale per 32 values.
    scales: Vec<f32>,
    /// scale * (sum of the 16 values), per 16 values.
    scaled_sums16: Vec<f32>,
    /// The two of each 32 values added, per 32 values (what K-quant minimums multiply).
    scaled_sums32: Vec<f32>,
    /// The values quantized again with one scale per 256 (empty when the length is not a
    /// multiple of 256).
    k_blocks: Vec<KBlock>,
}

impl Q8Activation {
    /// An empty activation, filled by [`Q8Activation::quantize`].
    pub fn new() -> Self {
        Self {
            qs: Vec::new(),
            scales: Vec::new(),
            scaled_sums16: Vec::new(),
            scaled_sums32: Vec::new(),
            k_blocks: Vec::new(),
        }
    }

    /// Quantizes `x` (a multiple of 32 long) in place of the previous contents.
    pub fn quantize(&mut self, x: &[f32]) {
        debug_assert!(x.len().is_multiple_of(32));
        self.qs.clear();
        self.scales.clear();
        self.scaled_sums16.clear();
        self.scaled_sums32.clear();
        for block in x.chunks_exact(32) {
            let start = self.qs.len();
            self.qs.resize(start + 32, 0);
            let scale = round_block(block, &mut self.qs[start..]);
            let (low, high) = scaled_halves(scale, &self.qs[start..]);
            self.scales.push(scale);
            self.scaled_sums16.push(low);
            self.scaled_sums16.push(high);
            self.scaled_sums32.push(low + high);
        }
        self.k_blocks.clear();
        if !x.len().is_multiple_of(256) {
            return;
        }
        for values in x.chunks_exact(256) {
            let mut block = KBlock {
                qs: [0; 256],
                scale: 0.0,
                sums32: [0.0; 8],
                sums16: [0.0; 16],
            };
            block.scale = round_block(values, &mut block.qs);
            for (i, pair) in block.qs.chunks_exact(32).enumerate() {
                let (low, high) = scaled_halves(block.scale, pair);
                block.sums16[2 * i] = low;
                block.sums16[2 * i + 1] = high;
                block.sums32[i] = low + high;
            }
            self.k_blocks.push(block);
        }
    }

    /// `x` (a multiple of 32 long) quantized into a new activation.
    pub fn of(x: &[f32]) -> Self {
        let mut act = Self::new();
        act.quantize(x);
        act
    }

    fn scaled_sum32(&self, block: usize) -> f32 {
        self.scaled_sums32[block]
    }
}

/// 256 activation values with one scale (llama.cpp's Q8_K), and what the K-quant kernels
/// need of them, in one record so that a kernel walks one pointer per activation.
#[repr(C, align(64))]
struct KBlock {
    /// The values, rounded to `x / scale`.
    qs: [i8; 256],
    /// The block's scale.
    scale: f32,
    /// scale * (sum of the 32 values), per 32 values (what Q4_K / Q5_K minimums multiply).
    sums32: [f32; 8],
    /// scale * (sum of the 16 values), per 16 values (Q6_K's offsets).
    sums16: [f32; 16],
}

/// Rounds `block` to `x / scale` in -127..=127 (scale: its largest magnitude / 127) into
/// `qs` (as long as `block`) and returns the scale.
fn round_block(block: &[f32], qs: &mut [i8]) -> f32 {
    let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
    let scale = max / 127.0;
    let inverse = if scale > 0.0 { 1.0 / scale } else { 0.0 };
    for (q, v) in qs.iter_mut().zip(block) {
        *q = round_to_i8(v * inverse);
    }
    scale
}

/// `scale` times the sums of the first and the second 16 of 32 rounded values.
fn scaled_halves(scale: f32, q: &[i8]) -> (f32, f32) {
    let sum = |half: &[i8]| half.iter().map(|&v| i32::from(v)).sum::<i32>() as f32;
    (scale * sum(&q[..16]), scale * sum(&q[16..32]))
}

/// `y.round() as i8` without the libm calls that `round` and `trunc` are on baseline x86-64
/// (they took a few percent of a decode): adding the largest f32 below one half, with y's
/// sign, then truncating (the cast) gives the same integer for |y| < 2^23 (LLVM lowers
/// `round` this way where the CPU can truncate), and both saturate beyond.
#[inline(always)]
fn round_to_i8(y: f32) -> i8 {
    (y + 0.499_999_97f32.copysign(y)) as i8
}

impl Default for Q8Activation {
    fn default() -> Self {
        Self::new()
    }
}

/// Which matrix x vector kernels this CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// Dequantize-then-dot everywhere.
    Portable,
    /// AVX2 + FMA integer kernels.
    Avx2,
    /// AVX2 kernels with AVX512-VNNI's `VPDPBUSD` for the byte products, and 512-bit
    /// K-quant kernels (AVX512F/BW/VNNI) on the activation's 256-value blocks.
    Avx512Vnni,
}

impl Isa {
    /// The best this CPU supports.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            if has!("avx2") && has!("fma") && has!("f16c") {
                if has!("avx512vnni") && has!("avx512vl") && has!("avx512f") && has!("avx512bw") {
                    return Isa::Avx512Vnni;
                }
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// `out[i] = row(first + i) . x` for `out.len()` rows of `m`.
fn dot_rows(isa: Isa, m: &QMatrix, first: usize, x: &[f32], act: &Q8Activation, out: &mut [f32]) {
    dot_rows_many(isa, m, first, x, &[act], out);
}

/// [`dot_rows`] for several inputs (`xs` `[n][cols]`, quantized as `acts`), `out` as
/// `[input][row]`: each weight block is unpacked once for up to four inputs, and every
/// (row, input) sum is the one [`dot_rows`] computes for that input alone.
fn dot_rows_many(
    isa: Isa,
    m: &QMatrix,
    first: usize,
    xs: &[f32],
    acts: &[&Q8Activation],
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if m.qtype.has_int8_kernel() && isa != Isa::Portable {
        // SAFETY: `isa` was detected on this CPU (Isa::detect), so the features are present;
        // each activation holds `m.cols` values (the caller quantized `xs`).
        unsafe {
            match isa {
                Isa::Avx512Vnni => x86::dot_rows_vnni(m, first, acts, out),
                _ => x86::dot_rows_avx2(m, first, acts, out),
            }
        }
        return;
    }
    let _ = isa;
    let rows = out.len() / acts.len();
    SCRATCH.with(|scratch| {
        let mut row = scratch.borrow_mut();
        row.resize(m.cols, 0.0);
        for i in 0..rows {
            m.dequantize_row(first + i, &mut row);
            for (t, x) in xs.chunks_exact(m.cols).enumerate() {
                out[t * rows + i] = dot(&row, x);
            }
        }
    });
}

/// Rows per parallel task of a matrix x vector product.
const ROWS_PER_TASK: usize = 64;

/// Matrix x vector for several matrices sharing one input (`x`, quantized as `act`), in one
/// parallel pass: `outs[i] = mats[i] x`.
pub fn matvec(isa: Isa, mats: &[&QMatrix], x: &[f32], act: &Q8Activation, outs: &mut [&mut [f32]]) {
    let mut tasks: Vec<(&QMatrix, usize, &mut [f32])> = Vec::new();
    for (m, out) in mats.iter().zip(outs.iter_mut()) {
        debug_assert_eq!(out.len(), m.rows);
        for (i, chunk) in out.chunks_mut(ROWS_PER_TASK).enumerate() {
            tasks.push((m, i * ROWS_PER_TASK, chunk));
        }
    }
    tasks
        .into_par_iter()
        .for_each(|(m, first, out)| dot_rows(isa, m, first, x, act, out));
}

/// [`matvec`] for `n` inputs at once (`xs` `[n][cols]`, `acts[t]` quantizing `xs[t]`):
/// `outs[i][t][r] = mats[i].row(r) . xs[t]`. Each task reads its rows' weights once and keeps
/// them in cache for all `n` inputs; every product is the same as [`matvec`]'s, bit for bit.
pub fn matvec_many(
    isa: Isa,
    mats: &[&QMatrix],
    xs: &[f32],
    acts: &[Q8Activation],
    outs: &mut [&mut [f32]],
) {
    let n = acts.len();
    if n == 1 {
        return matvec(isa, mats, xs, &acts[0], outs);
    }
    let mut tasks: Vec<(&QMatrix, usize, SharedOut)> = Vec::new();
    for (m, out) in mats.iter().zip(outs.iter_mut()) {
        assert!(out.len() == n * m.rows && xs.len() == n * m.cols);
        for first in (0..m.rows).step_by(ROWS_PER_TASK) {
            tasks.push((m, first, SharedOut(out.as_mut_ptr())));
        }
    }
    let acts: Vec<&Q8Activation> = acts.iter().collect();
    tasks.into_par_iter().for_each(|(m, first, shared)| {
        let rows = ROWS_PER_TASK.min(m.rows - first);
        let mut sums = vec![0f32; rows * n];
        dot_rows_many(isa, m, first, xs, &acts, &mut sums);
        for (t, column) in sums.chunks_exact(rows).enumerate() {
            // SAFETY: input t's cells first..first + rows of this matrix's output: inside the
            // `n * m.rows` slice (asserted above), and no other task writes these rows.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    column.as_ptr(),
                    shared.0.add(t * m.rows + first),
                    rows,
                )
            };
        }
    });
}

/// The output pointer shared by tasks writing disjoint columns of a matrix product.
struct SharedOut(*mut f32);
// SAFETY: tasks write disjoint elements through it (see `matmul` and `matvec_many`).
unsafe impl Sync for SharedOut {}
// SAFETY: as above; a task only writes its own elements.
unsafe impl Send for SharedOut {}

thread_local! {
    static PANEL_F32: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    static PANEL_BF16: RefCell<LineVec<u32>> = const { RefCell::new(LineVec::new()) };
}

/// `out[t][r] = x[t] . row(r)` for the `n` rows of `x` (`[n, cols]`), `out` `[n, rows]`.
pub fn matmul(m: &QMatrix, x: &[f32], n: usize, out: &mut [f32]) {
    matmul_stacked(&[m], x, n, out, false);
}

/// The products of several matrices with one input, side by side: for the `n` rows of `x`
/// (`[n, cols]`, every part `cols` wide), `out[t][offset_i + r] = x[t] . parts[i].row(r)`,
/// where `offset_i` is the rows of the parts before `i` and `out` is `[n, total rows]`. With
/// `accumulate` the products are added to `out` instead (a bias or residual already there).
///
/// Panels of 32 weight rows, over all parts, are the parallel tasks: each is dequantized once
/// per call and multiplied with every input row, so a product's cost of dequantizing falls as
/// `n` grows. Every output is one sum in a fixed order (see the module's note).
pub fn matmul_stacked(parts: &[&QMatrix], x: &[f32], n: usize, out: &mut [f32], accumulate: bool) {
    let Some(first_part) = parts.first() else {
        return;
    };
    let k = first_part.cols;
    let width: usize = parts.iter().map(|m| m.rows).sum();
    assert!(
        parts.iter().all(|m| m.cols == k),
        "stacked parts of different widths"
    );
    assert!(x.len() == n * k && out.len() == n * width);
    let bf16_path =
        |m: &QMatrix| !m.qtype.is_float() && k.is_multiple_of(2) && PackedBf16Linear::supported();
    // Starting a cache line, so that the tile kernel reads the rows where they are.
    let mut xb = LineVec::<bf16>::new();
    if parts.iter().any(|m| bf16_path(m)) {
        xb.resize_zeroed(x.len());
        for (b, &v) in xb.iter_mut().zip(x) {
            *b = bf16::from_f32(v);
        }
    }
    // AMX tiles take the packed panels as they are, 32 rows at a time.
    let tiles = (!xb.is_empty() && k.is_multiple_of(32) && n > 0 && amx::available())
        .then(|| amx::Bf16Rows::new(&xb, k));
    // (part, its first output column, the panel's first row in the part)
    let mut tasks = Vec::new();
    let mut offset = 0;
    for m in parts {
        tasks.extend((0..m.rows.div_ceil(PANEL)).map(|p| (*m, offset, p * PANEL)));
        offset += m.rows;
    }
    let shared = SharedOut(out.as_mut_ptr());
    tasks.into_par_iter().for_each(|(m, column, first)| {
        let shared = &shared;
        let cols = PANEL.min(m.rows - first);
        let column = column + first;
        // Writes (or adds) `values` at row `t`, columns column..column + values.len().
        let put = |t: usize, values: &[f32]| {
            assert!(t < n && column + values.len() <= width);
            // SAFETY: row t < n and the columns are inside a row of `out` (asserted); only
            // this task writes this panel's columns.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(shared.0.add(t * width + column), values.len())
            };
            if accumulate {
                dst.iter_mut().zip(values).for_each(|(d, v)| *d += v);
            } else {
                dst.copy_from_slice(values);
            }
        };
        PANEL_F32.with(|buf| {
            let mut rows = buf.borrow_mut();
            rows.resize(PANEL * k, 0.0);
            for c in 0..cols {
                m.dequantize_row(first + c, &mut rows[c * k..(c + 1) * k]);
            }
            rows[cols * k..].fill(0.0);
            if !bf16_path(m) {
                let mut sums = [0f32; PANEL];
                for t in 0..n {
                    let xt = &x[t * k..(t + 1) * k];
                    for (c, sum) in sums[..cols].iter_mut().enumerate() {
                        *sum = dot(&rows[c * k..(c + 1) * k], xt);
                    }
                    put(t, &sums[..cols]);
                }
                return;
            }
            PANEL_BF16.with(|packed| {
                let mut packed = packed.borrow_mut();
                packed.resize_zeroed(k / 2 * PANEL);
                pack_bf16_panel(&rows, k, &mut packed);
                // Rows first_row..first_row + live of the panel's sums (`PANEL` apart).
                let store = |first_row: usize, live: usize, sums: &[f32]| {
                    for r in 0..live {
                        put(first_row + r, &sums[r * PANEL..r * PANEL + cols]);
                    }
                };
                if let Some(tiles) = &tiles {
                    tiles.times_panel(&packed, store);
                    return;
                }
                let pairs = k / 2;
                let mut sums = [0f32; TILE_ROWS * PANEL];
                let mut t = 0;
                while t < n {
                    let tile = TILE_ROWS.min(n - t);
                    // SAFETY: the CPU has AVX512-BF16 (PackedBf16Linear::supported); the rows
                    // slice holds `tile` rows of `pairs` pairs, `packed` one panel.
                    unsafe {
                        dot_tile(tile, pairs, &xb[t * k..(t + tile) * k], &packed, &mut sums)
                    };
                    store(t, tile, &sums);
                    t += tile;
                }
            });
        });
    });
}

/// The rows of `parts` (stacked: part 0's rows first; every part `cols` wide, `cols` even)
/// dequantized and rounded to bf16, packed as 32-row panels of `cols / 2` pairs (the layout of
/// `amx::bf16_product` and `bf16::dot_tile`; rows past the last zero) into `packed`, its memory
/// reused. Parallel over panels.
pub fn pack_stacked_bf16(parts: &[&QMatrix], packed: &mut LineVec<u32>) {
    let Some(first_part) = parts.first() else {
        packed.resize_zeroed(0);
        return;
    };
    let k = first_part.cols;
    assert!(parts.iter().all(|m| m.cols == k) && k.is_multiple_of(2));
    let width: usize = parts.iter().map(|m| m.rows).sum();
    let pairs = k / 2;
    // Every panel is written whole below.
    packed.resize_for_overwrite(width.div_ceil(PANEL) * pairs * PANEL);
    // The part and its row for each stacked row.
    let locate = |row: usize| {
        let mut row = row;
        for m in parts {
            if row < m.rows {
                return (*m, row);
            }
            row -= m.rows;
        }
        unreachable!("row past the stacked parts")
    };
    packed
        .par_chunks_mut(pairs * PANEL)
        .enumerate()
        .for_each(|(panel, out)| {
            PANEL_F32.with(|buf| {
                let mut rows = buf.borrow_mut();
                rows.resize(PANEL * k, 0.0);
                let first = panel * PANEL;
                let live = PANEL.min(width - first);
                for c in 0..live {
                    let (m, r) = locate(first + c);
                    m.dequantize_row(r, &mut rows[c * k..(c + 1) * k]);
                }
                rows[live * k..].fill(0.0);
                pack_bf16_panel(&rows, k, out);
            });
        });
}

/// Packs `PANEL` rows of `k` f32 weights into `[k / 2][PANEL]` pairs of bf16 (the layout of
/// [`dot_tile`]), rounding to nearest even.
fn pack_bf16_panel(rows: &[f32], k: usize, packed: &mut [u32]) {
    assert_eq!(
        packed.len(),
        k / 2 * PANEL,
        "a panel of {} pairs",
        packed.len()
    );
    #[cfg(target_arch = "x86_64")]
    if k.is_multiple_of(32) {
        // SAFETY: only reached from `matmul`'s bf16 path, taken when the CPU has AVX512-BF16;
        // `rows` holds PANEL rows of k values and `packed` pairs * PANEL.
        unsafe { pack_bf16_panel_avx512(rows, k, packed) };
        return;
    }
    for lane in 0..PANEL {
        let row = &rows[lane * k..(lane + 1) * k];
        for (pair, v) in row.chunks_exact(2).enumerate() {
            let lo = u32::from(bf16::from_f32(v[0]).to_bits());
            let hi = u32::from(bf16::from_f32(v[1]).to_bits());
            packed[pair * PANEL + lane] = lo | (hi << 16);
        }
    }
}

/// [`pack_bf16_panel`] for `k` a multiple of 32: `VCVTNE2PS2BF16` turns 32 values of a row into
/// 16 pairs; sixteen rows' pairs are transposed in registers (four rounds of block swaps) and
/// stored a pair's sixteen lanes at a time. A scatter per row wrote the same bytes at a third
/// of the speed.
///
/// # Safety
/// The CPU must support AVX512F and AVX512-BF16; `rows` must hold `PANEL * k` values and
/// `packed` `k / 2 * PANEL`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn pack_bf16_panel_avx512(rows: &[f32], k: usize, packed: &mut [u32]) {
    use std::arch::x86_64::*;
    const LANES: usize = 16;
    const _: () = assert!(PANEL.is_multiple_of(LANES));
    assert!(rows.len() >= PANEL * k && packed.len() >= k / 2 * PANEL && k.is_multiple_of(32));
    // Round `width` swaps the off-diagonal `width`-blocks of each pair of registers `width`
    // apart: after widths 8, 4, 2, 1 register `p` holds column `p` of the sixteen inputs.
    // `first[w]` picks the first register's new lanes from (first, second), `second[w]` the
    // second's.
    let picks = |width: usize| {
        let mut first = [0i32; LANES];
        let mut second = [0i32; LANES];
        for p in 0..LANES {
            let (a, b) = if p & width == 0 {
                (p, p + width)
            } else {
                ((p - width) | LANES, p | LANES)
            };
            first[p] = a as i32;
            second[p] = b as i32;
        }
        // SAFETY: [i32; 16] and __m512i have the same size; any bits are a valid __m512i.
        unsafe {
            (
                std::mem::transmute::<[i32; LANES], __m512i>(first),
                std::mem::transmute::<[i32; LANES], __m512i>(second),
            )
        }
    };
    let rounds = [picks(8), picks(4), picks(2), picks(1)];
    for group in 0..PANEL / LANES {
        for chunk in 0..k / 32 {
            // SAFETY: row group * 16 + l < PANEL reads values chunk * 32 .. chunk * 32 + 32 of
            // its k; the stores write pairs chunk * 16 .. chunk * 16 + 16, lanes group * 16 ..
            // group * 16 + 16 of PANEL, below k / 2 * PANEL.
            unsafe {
                let mut regs = [_mm512_setzero_si512(); LANES];
                for (l, reg) in regs.iter_mut().enumerate() {
                    let at = rows.as_ptr().add((group * LANES + l) * k + chunk * 32);
                    let v0 = _mm512_loadu_ps(at);
                    let v1 = _mm512_loadu_ps(at.add(16));
                    *reg = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(v1, v0));
                }
                for (width, (first, second)) in [8, 4, 2, 1].into_iter().zip(rounds) {
                    for a in (0..LANES).filter(|a| a & width == 0) {
                        let b = a + width;
                        let (x, y) = (regs[a], regs[b]);
                        regs[a] = _mm512_permutex2var_epi32(x, first, y);
                        regs[b] = _mm512_permutex2var_epi32(x, second, y);
                    }
                }
                for (pair, reg) in regs.iter().enumerate() {
                    let at = packed
                        .as_mut_ptr()
                        .add((chunk * LANES + pair) * PANEL + group * LANES);
                    _mm512_storeu_si512(at.cast(), *reg);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernels::bf16::tests::random;
    use candle_core::quantized::QTensor;
    use candle_core::quantized::k_quants::BlockQ8_0;
    use candle_core::{Device, Tensor};

    /// A `[rows, cols]` matrix of `dtype` with random values, in a mapped temp file.
    fn matrix(
        dtype: GgmlDType,
        rows: usize,
        cols: usize,
        seed: u64,
    ) -> (QMatrix, tempfile::NamedTempFile) {
        quantized(&random(rows * cols, seed), rows, cols, dtype)
    }

    /// `values` as a `[rows, cols]` matrix of `dtype` (quantized by candle), in a mapped temp
    /// file (kept while the matrix is used).
    pub(crate) fn quantized(
        values: &[f32],
        rows: usize,
        cols: usize,
        dtype: GgmlDType,
    ) -> (QMatrix, tempfile::NamedTempFile) {
        let w = Tensor::from_vec(values.to_vec(), (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
        let bytes = q.data().unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        // SAFETY: the temp file is ours and not modified while mapped.
        let map = Arc::new(unsafe { Mmap::map(file.as_file()).unwrap() });
        let qtype = QType::of_ggml(dtype).unwrap();
        (QMatrix::new(map, 0, qtype, rows, cols).unwrap(), file)
    }

    const TYPES: [GgmlDType; 12] = [
        GgmlDType::F32,
        GgmlDType::F16,
        GgmlDType::Q4_0,
        GgmlDType::Q4_1,
        GgmlDType::Q5_0,
        GgmlDType::Q5_1,
        GgmlDType::Q8_0,
        GgmlDType::Q2K,
        GgmlDType::Q3K,
        GgmlDType::Q4K,
        GgmlDType::Q5K,
        GgmlDType::Q6K,
    ];

    /// `count` blocks of `block_bytes` seeded random bytes, with the f16 scales whose high bytes
    /// sit at `scale_high` in each block kept finite (random bits would make NaNs too).
    fn random_blocks(count: usize, block_bytes: usize, seed: u32, scale_high: &[usize]) -> Vec<u8> {
        let mut state = seed;
        let mut row: Vec<u8> = (0..count * block_bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                state as u8
            })
            .collect();
        for block in row.chunks_exact_mut(block_bytes) {
            for &at in scale_high {
                block[at] &= 0x3b;
            }
        }
        row
    }

    fn assert_same_bits(ours: &[f32], theirs: &[f32]) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(ours), bits(theirs));
    }

    /// Our Q6_K, Q4_K and Q8_0 dequantizations give candle's bits, on blocks of every byte
    /// pattern mix.
    #[test]
    fn q6k_dequantization_equals_candles() {
        let row = random_blocks(64, Q6K_BLOCK_BYTES, 0x8765_4321, &[209]);
        let (mut ours, mut theirs) = (vec![0f32; 64 * 256], vec![0f32; 64 * 256]);
        dequantize_q6k(&row, &mut ours);
        candle_core::quantized::k_quants::BlockQ6K::to_float(blocks(&row), &mut theirs);
        assert_same_bits(&ours, &theirs);
    }

    #[test]
    fn q4k_dequantization_equals_candles() {
        let row = random_blocks(64, Q4K_BLOCK_BYTES, 0x1234_5678, &[1, 3]);
        let (mut ours, mut theirs) = (vec![0f32; 64 * 256], vec![0f32; 64 * 256]);
        dequantize_q4k(&row, &mut ours);
        candle_core::quantized::k_quants::BlockQ4K::to_float(blocks(&row), &mut theirs);
        assert_same_bits(&ours, &theirs);
    }

    #[test]
    fn q8_0_dequantization_equals_candles() {
        let row = random_blocks(64, Q8_0_BLOCK_BYTES, 0x0bad_cafe, &[1]);
        let (mut ours, mut theirs) = (vec![0f32; 64 * 32], vec![0f32; 64 * 32]);
        dequantize_q8_0(&row, &mut ours);
        BlockQ8_0::to_float(blocks(&row), &mut theirs);
        assert_same_bits(&ours, &theirs);
    }

    #[test]
    fn the_32_value_block_dequantizations_equal_candles() {
        use candle_core::quantized::k_quants::{BlockQ4_0, BlockQ4_1, BlockQ5_0, BlockQ5_1};
        let blocks_of = 64;
        let candles = |qtype: QType, row: &[u8], out: &mut [f32]| match qtype {
            QType::Q4_0 => BlockQ4_0::to_float(blocks(row), out),
            QType::Q4_1 => BlockQ4_1::to_float(blocks(row), out),
            QType::Q5_0 => BlockQ5_0::to_float(blocks(row), out),
            QType::Q5_1 => BlockQ5_1::to_float(blocks(row), out),
            _ => unreachable!(),
        };
        // (type, its f16 scales' high bytes)
        for (qtype, scale_high) in [
            (QType::Q4_0, &[1][..]),
            (QType::Q4_1, &[1, 3][..]),
            (QType::Q5_0, &[1][..]),
            (QType::Q5_1, &[1, 3][..]),
        ] {
            let mut row = random_blocks(blocks_of, qtype.block_bytes(), 0x5eed_0001, scale_high);
            // Negative scales too (a zero value times one is -0.0).
            for block in row.chunks_exact_mut(qtype.block_bytes()).step_by(2) {
                block[1] |= 0x80;
            }
            let (mut ours, mut theirs) = (vec![0f32; blocks_of * 32], vec![0f32; blocks_of * 32]);
            dequantize(qtype, &row, &mut ours);
            candles(qtype, &row, &mut theirs);
            assert_same_bits(&ours, &theirs);
        }
    }

    /// f16 and bf16 rows convert value by value as `half` converts them, whether or not the
    /// row starts on a two-byte boundary.
    #[test]
    fn half_precision_rows_convert_as_half_does() {
        let bytes = random_blocks(1, 2 * 257, 0x00dd_ba11, &[]);
        for start in [0, 1] {
            let row = &bytes[start..start + 2 * 256];
            let halves = || row.chunks_exact(2).map(|b| [b[0], b[1]]);
            let f16s: Vec<f32> = halves().map(|b| f16::from_le_bytes(b).to_f32()).collect();
            let bf16s: Vec<f32> = halves().map(|b| bf16::from_le_bytes(b).to_f32()).collect();
            let mut ours = vec![0f32; 256];
            dequantize(QType::F16, row, &mut ours);
            assert_same_bits(&ours, &f16s);
            dequantize(QType::Bf16, row, &mut ours);
            assert_same_bits(&ours, &bf16s);
        }
    }

    /// The vector packing writes the scalar packing's bytes (round to nearest even included).
    #[test]
    fn the_vector_bf16_packing_equals_the_scalar_one() {
        #[cfg(target_arch = "x86_64")]
        {
            if !PackedBf16Linear::supported() {
                eprintln!("SKIP: no AVX512-BF16 on this CPU");
                return;
            }
            let k = 96;
            let mut state = 0x9e37_79b9u32;
            let rows: Vec<f32> = (0..PANEL * k)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 17;
                    state ^= state << 5;
                    f32::from_bits(0x3c00_0000 | (state & 0x03ff_ffff)) - 0.02
                })
                .collect();
            let mut scalar = vec![0u32; k / 2 * PANEL];
            for lane in 0..PANEL {
                for pair in 0..k / 2 {
                    let v = &rows[lane * k + 2 * pair..lane * k + 2 * pair + 2];
                    let lo = u32::from(bf16::from_f32(v[0]).to_bits());
                    let hi = u32::from(bf16::from_f32(v[1]).to_bits());
                    scalar[pair * PANEL + lane] = lo | (hi << 16);
                }
            }
            let mut vector = vec![0u32; k / 2 * PANEL];
            pack_bf16_panel(&rows, k, &mut vector);
            assert_eq!(vector, scalar);
        }
    }

    #[test]
    fn the_quantizers_rounding_is_rounds() {
        let mut state = 0x2545_f491u32;
        let mut values: Vec<f32> = (0..100_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                (state as f32 / u32::MAX as f32 - 0.5) * 260.0
            })
            .collect();
        for k in -130..=130 {
            let half = k as f32 + 0.5;
            values.extend([
                half,
                f32::from_bits(half.to_bits() - 1),
                f32::from_bits(half.to_bits() + 1),
            ]);
        }
        values.extend([0.0, -0.0, 0.499_999_97, -0.499_999_97, f32::NAN]);
        values.extend([1e9, -1e9, f32::INFINITY, f32::NEG_INFINITY]);
        for y in values {
            assert_eq!(round_to_i8(y), y.round() as i8, "{y}");
        }
    }

    /// Every kernel against the dequantized row dotted in f64: the only differences allowed
    /// are the activation's 8-bit rounding (integer kernels) and f32 sums.
    #[test]
    fn kernels_match_dequantized_dot_products() {
        let (rows, cols) = (70, 512);
        let x = random(cols, 99);
        let act = Q8Activation::of(&x);
        // The activation as the integer kernels see it: blocks of 32, and blocks of 256 for
        // the K-quants with AVX512-VNNI.
        let xq: Vec<f32> = act
            .qs
            .iter()
            .enumerate()
            .map(|(i, &q)| f32::from(q) * act.scales[i / 32])
            .collect();
        let xq256: Vec<f32> = act
            .k_blocks
            .iter()
            .flat_map(|b| b.qs.iter().map(|&q| f32::from(q) * b.scale))
            .collect();
        assert_eq!(xq256.len(), cols);
        for dtype in TYPES {
            let (m, _file) = matrix(dtype, rows, cols, 7);
            let mut row = vec![0f32; cols];
            for isa in isas_here() {
                let mut out = vec![0f32; rows];
                matvec(isa, &[&m], &x, &act, &mut [&mut out[..]]);
                let int8 = isa != Isa::Portable && m.qtype.has_int8_kernel();
                for (r, got) in out.iter().enumerate() {
                    m.dequantize_row(r, &mut row);
                    let k_quant = matches!(m.qtype, QType::Q4K | QType::Q5K | QType::Q6K);
                    let input = match (int8, isa) {
                        (false, _) => &x,
                        (true, Isa::Avx512Vnni) if k_quant => &xq256,
                        (true, _) => &xq,
                    };
                    let want: f64 = row
                        .iter()
                        .zip(input)
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum();
                    let scale: f64 = row
                        .iter()
                        .zip(input)
                        .map(|(a, b)| f64::from((a * b).abs()))
                        .sum();
                    assert!(
                        (f64::from(*got) - want).abs() <= 1e-5 * scale + 1e-6,
                        "{dtype:?} {isa:?} row {r}: {got} vs {want}"
                    );
                }
            }
        }
    }

    /// Every kernel family this CPU can run (the AVX2 kernels too on a VNNI machine).
    fn isas_here() -> Vec<Isa> {
        let mut isas = vec![Isa::Portable];
        if Isa::detect() == Isa::Avx512Vnni {
            isas.push(Isa::Avx2);
        }
        isas.push(Isa::detect());
        isas
    }

    /// Several inputs at once give each input the bits it gets alone, for every type and
    /// every group size (the kernels take four inputs per pass, then the rest).
    #[test]
    fn matvec_many_equals_one_matvec_per_input() {
        let (rows, cols) = (70, 512);
        for n in [2, 3, 4, 5, 7] {
            let xs = random(n * cols, 40 + n as u64);
            let acts: Vec<Q8Activation> = xs.chunks_exact(cols).map(Q8Activation::of).collect();
            for dtype in TYPES {
                let (m, _file) = matrix(dtype, rows, cols, 11);
                for isa in isas_here() {
                    let mut many = vec![0f32; n * rows];
                    matvec_many(isa, &[&m], &xs, &acts, &mut [&mut many[..]]);
                    for (t, act) in acts.iter().enumerate() {
                        let mut one = vec![0f32; rows];
                        let x = &xs[t * cols..(t + 1) * cols];
                        matvec(isa, &[&m], x, act, &mut [&mut one[..]]);
                        let got = &many[t * rows..(t + 1) * rows];
                        assert!(
                            got.iter()
                                .zip(&one)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "{dtype:?} {isa:?}, {n} inputs: input {t} differs"
                        );
                    }
                }
            }
        }
    }

    /// Stacked parts (of different types, one a float) write each part's products in its
    /// columns, bit for bit those of the part alone, and `accumulate` adds them to what is there.
    #[test]
    fn stacked_products_are_each_parts_product_side_by_side() {
        let (cols, n) = (256, 37);
        let x = random(n * cols, 5);
        let parts = [
            matrix(GgmlDType::Q8_0, 40, cols, 1),
            matrix(GgmlDType::Q4K, 33, cols, 2),
            matrix(GgmlDType::F16, 7, cols, 3),
        ];
        let refs: Vec<&QMatrix> = parts.iter().map(|(m, _)| m).collect();
        let width: usize = refs.iter().map(|m| m.rows).sum();
        let start = random(n * width, 8);
        let mut stacked = start.clone();
        matmul_stacked(&refs, &x, n, &mut stacked, true);
        let mut column = 0;
        for m in &refs {
            let mut alone = vec![0f32; n * m.rows];
            matmul(m, &x, n, &mut alone);
            for t in 0..n {
                for r in 0..m.rows {
                    let at = t * width + column + r;
                    let want = start[at] + alone[t * m.rows + r];
                    assert_eq!(
                        stacked[at].to_bits(),
                        want.to_bits(),
                        "[{t}, {}]",
                        column + r
                    );
                }
            }
            column += m.rows;
        }
    }

    #[test]
    fn matmul_rows_do_not_depend_on_the_batch_or_the_threads() {
        let (rows, cols, n) = (45, 256, 45);
        let x = random(n * cols, 3);
        for dtype in [GgmlDType::F32, GgmlDType::Q4K, GgmlDType::Q5_0] {
            let (m, _file) = matrix(dtype, rows, cols, 11);
            let run = |threads: usize, x: &[f32], n: usize| {
                let mut out = vec![0f32; n * rows];
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap()
                    .install(|| matmul(&m, x, n, &mut out));
                out
            };
            let all = run(1, &x, n);
            assert!(run(3, &x, n) == all, "{dtype:?} threads");
            // Rows 5.. alone give the same bits as inside the full batch.
            let tail = run(2, &x[5 * cols..], n - 5);
            assert!(tail[..] == all[5 * rows..], "{dtype:?} batch split");
            // And the values are the dequantized products (bf16 rounding at most).
            let mut row = vec![0f32; cols];
            for r in 0..rows {
                m.dequantize_row(r, &mut row);
                for t in 0..n {
                    let want: f64 = row
                        .iter()
                        .zip(&x[t * cols..])
                        .map(|(a, b)| f64::from(*a) * f64::from(*b))
                        .sum();
                    let scale: f64 = row
                        .iter()
                        .zip(&x[t * cols..])
                        .map(|(a, b)| f64::from((a * b).abs()))
                        .sum();
                    let got = f64::from(all[t * rows + r]);
                    assert!(
                        (got - want).abs() <= scale / 64.0 + 1e-5,
                        "{dtype:?} [{t},{r}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
