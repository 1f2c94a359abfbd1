//! The integer kernels. Each unpacks 32 weights to unsigned bytes (0..63) in one register,
//! multiplies them with 32 activation bytes into eight i32 sums of four, and scales those
//! in f32; a type's offset (Q4_0's 8, Q5_0's 16, Q6_K's 32) and minimums go through the
//! activation's scaled block sums in scalar arithmetic.

use std::arch::x86_64::*;

use super::{Q8Activation, QMatrix, QType};

/// # Safety
/// The CPU must support AVX2 and FMA; each activation must hold `m.cols` values.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_rows_avx2(
    m: &QMatrix,
    first: usize,
    acts: &[&Q8Activation],
    out: &mut [f32],
) {
    // SAFETY: forwarded.
    unsafe { dot_rows::<false>(m, first, acts, out) }
}

/// # Safety
/// The CPU must support AVX2, FMA, AVX512F/VL/BW and AVX512-VNNI; each activation must hold
/// `m.cols` values.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub(super) unsafe fn dot_rows_vnni(
    m: &QMatrix,
    first: usize,
    acts: &[&Q8Activation],
    out: &mut [f32],
) {
    // SAFETY: forwarded.
    unsafe { dot_rows::<true>(m, first, acts, out) }
}

/// Rows `first..first + out.len() / acts.len()` of `m` times each activation, into `out`
/// as `[activation][row]`; up to four activations share each unpacked weight block.
#[inline(always)]
unsafe fn dot_rows<const VNNI: bool>(
    m: &QMatrix,
    first: usize,
    acts: &[&Q8Activation],
    out: &mut [f32],
) {
    let rows = out.len() / acts.len();
    assert!(
        acts.iter().all(|a| a.qs.len() >= m.cols)
            && first + rows <= m.rows
            && out.len() == rows * acts.len()
    );
    let mut done = 0;
    for group in acts.chunks(4) {
        let out = &mut out[done * rows..(done + group.len()) * rows];
        done += group.len();
        // SAFETY: forwarded; the group's activations cover the rows (asserted).
        unsafe {
            match *group {
                [a] => columns::<VNNI, 1>(m, first, [a], out),
                [a, b] => columns::<VNNI, 2>(m, first, [a, b], out),
                [a, b, c] => columns::<VNNI, 3>(m, first, [a, b, c], out),
                [a, b, c, d] => columns::<VNNI, 4>(m, first, [a, b, c, d], out),
                _ => unreachable!("groups of one to four"),
            }
        }
    }
}

#[inline(always)]
unsafe fn columns<const VNNI: bool, const C: usize>(
    m: &QMatrix,
    first: usize,
    acts: [&Q8Activation; C],
    out: &mut [f32],
) {
    let rows = out.len() / C;
    // SAFETY (every call below): each row is one whole row of `m.qtype` blocks and the
    // activations cover its columns (asserted by dot_rows); the caller guarantees the CPU
    // features.
    unsafe {
        match m.qtype {
            QType::Q8_0 => rows32::<VNNI, Q8_0, C>(m, first, acts, out),
            QType::Q4_0 => rows32::<VNNI, Q4<false>, C>(m, first, acts, out),
            QType::Q4_1 => rows32::<VNNI, Q4<true>, C>(m, first, acts, out),
            QType::Q5_0 => rows32::<VNNI, Q5<false>, C>(m, first, acts, out),
            QType::Q5_1 => rows32::<VNNI, Q5<true>, C>(m, first, acts, out),
            _ => {
                for i in 0..rows {
                    let row = m.row(first + i);
                    let sums = match m.qtype {
                        QType::Q4K if VNNI => wide::dot_qk45::<false, C>(row, acts),
                        QType::Q5K if VNNI => wide::dot_qk45::<true, C>(row, acts),
                        QType::Q6K if VNNI => wide::dot_q6k::<C>(row, acts),
                        QType::Q4K => dot_qk45::<VNNI, false, C>(row, acts),
                        QType::Q5K => dot_qk45::<VNNI, true, C>(row, acts),
                        QType::Q6K => dot_q6k::<VNNI, C>(row, acts),
                        _ => unreachable!("no integer kernel for {:?}", m.qtype),
                    };
                    for (c, sum) in sums.into_iter().enumerate() {
                        out[c * rows + i] = sum;
                    }
                }
            }
        }
    }
}

/// A block type of 32 values: its bytes, unpacked to 32 bytes plus a scale `d` and the
/// coefficient of the activation's block sum (the minimum, or -offset * d).
trait Block32 {
    const BYTES: usize;
    /// Values are signed bytes (Q8_0), not unsigned 0..63.
    const SIGNED: bool;
    /// # Safety
    /// `block` must hold `BYTES` bytes; AVX2 and F16C must be enabled.
    unsafe fn unpack(block: &[u8]) -> (__m256i, f32, f32);
}

struct Q8_0;
impl Block32 for Q8_0 {
    const BYTES: usize = 34;
    const SIGNED: bool = true;
    #[inline(always)]
    unsafe fn unpack(block: &[u8]) -> (__m256i, f32, f32) {
        // SAFETY: the scale then 32 signed values.
        unsafe {
            (
                _mm256_loadu_si256(block.as_ptr().add(2).cast()),
                half(block, 0),
                0.0,
            )
        }
    }
}

/// Q4_0 (`MIN` false: value = d (q - 8)) and Q4_1 (`MIN`: value = d q + m).
struct Q4<const MIN: bool>;
impl<const MIN: bool> Block32 for Q4<MIN> {
    const BYTES: usize = if MIN { 20 } else { 18 };
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(block: &[u8]) -> (__m256i, f32, f32) {
        let d = half(block, 0);
        let c = if MIN { half(block, 2) } else { -8.0 * d };
        // SAFETY: the nibbles are the block's last 16 bytes.
        (
            unsafe { nibbles(block.as_ptr().add(Self::BYTES - 16)) },
            d,
            c,
        )
    }
}

/// Q5_0 (value = d (q - 16)) and Q5_1 (value = d q + m).
struct Q5<const MIN: bool>;
impl<const MIN: bool> Block32 for Q5<MIN> {
    const BYTES: usize = if MIN { 24 } else { 22 };
    const SIGNED: bool = false;
    #[inline(always)]
    unsafe fn unpack(block: &[u8]) -> (__m256i, f32, f32) {
        let d = half(block, 0);
        let c = if MIN { half(block, 2) } else { -16.0 * d };
        let at = if MIN { 4 } else { 2 };
        let bits = u32::from_le_bytes([block[at], block[at + 1], block[at + 2], block[at + 3]]);
        // SAFETY: the nibbles are the block's last 16 bytes.
        let w = unsafe {
            _mm256_or_si256(
                nibbles(block.as_ptr().add(Self::BYTES - 16)),
                fifth_bits(bits),
            )
        };
        (w, d, c)
    }
}

/// Rows of a 32-value block type, four at a time (one activation load for all of them,
/// independent accumulator chains), each against `C` activations; each (row, activation)
/// sum runs in the same order as alone.
#[inline(always)]
unsafe fn rows32<const VNNI: bool, B: Block32, const C: usize>(
    m: &QMatrix,
    first: usize,
    acts: [&Q8Activation; C],
    out: &mut [f32],
) {
    let rows = out.len() / C;
    let mut i = 0;
    while i + 4 <= rows {
        let r = first + i;
        // SAFETY: forwarded from dot_rows.
        let sums = unsafe {
            dot32::<VNNI, B, 4, C>([m.row(r), m.row(r + 1), m.row(r + 2), m.row(r + 3)], acts)
        };
        for (c, quad) in sums.iter().enumerate() {
            out[c * rows + i..c * rows + i + 4].copy_from_slice(quad);
        }
        i += 4;
    }
    while i < rows {
        // SAFETY: forwarded from dot_rows.
        let sums = unsafe { dot32::<VNNI, B, 1, C>([m.row(first + i)], acts) };
        for (c, one) in sums.iter().enumerate() {
            out[c * rows + i] = one[0];
        }
        i += 1;
    }
}

/// Asks for the cache lines of `base[from..from + len]` (addresses past the matrix are
/// harmless: a prefetch never faults). The matrix x vector kernels read weights once, from
/// memory, in order; the hardware prefetcher alone leaves them waiting on it (measured: the
/// 146 MB Q8_0 output head of Qwen2.5-0.5B ran at ~4.5 GB/s without, ~10-16 GB/s with).
#[inline(always)]
fn prefetch(base: *const u8, from: usize, len: usize) {
    let mut line = 0;
    while line < len {
        // SAFETY: a prefetch has no architectural effect; SSE is baseline on x86_64.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(base.wrapping_add(from + line).cast()) };
        line += 64;
    }
}

#[inline(always)]
unsafe fn dot32<const VNNI: bool, B: Block32, const R: usize, const C: usize>(
    rows: [&[u8]; R],
    acts: [&Q8Activation; C],
) -> [[f32; R]; C] {
    // SAFETY: AVX is enabled by the caller.
    let mut acc = [[unsafe { _mm256_setzero_ps() }; R]; C];
    let mut offset = [[0f32; R]; C];
    let blocks = rows[0].len() / B::BYTES;
    for b in 0..blocks {
        // SAFETY: b < blocks, so each row's block and the activation blocks are in bounds.
        unsafe {
            // The rows are adjacent in memory: fetch the next R rows at the pace these are
            // read (a prefetch past the matrix's end is harmless).
            prefetch(
                rows[0].as_ptr(),
                R * rows[0].len() + b * R * B::BYTES,
                R * B::BYTES,
            );
            let a: [__m256i; C] = std::array::from_fn(|c| load_act(acts[c], b));
            let da: [f32; C] = std::array::from_fn(|c| acts[c].scales[b]);
            let sa: [f32; C] = std::array::from_fn(|c| acts[c].scaled_sum32(b));
            for r in 0..R {
                let (w, d, k) = B::unpack(&rows[r][b * B::BYTES..(b + 1) * B::BYTES]);
                // Signed values: |w| as unsigned bytes, the activation carrying w's sign.
                let wu = if B::SIGNED { _mm256_sign_epi8(w, w) } else { w };
                for c in 0..C {
                    let p = if B::SIGNED {
                        mul_sum::<VNNI>(wu, _mm256_sign_epi8(a[c], w))
                    } else {
                        mul_sum::<VNNI>(w, a[c])
                    };
                    acc[c][r] = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(p),
                        _mm256_set1_ps(d * da[c]),
                        acc[c][r],
                    );
                    offset[c][r] += k * sa[c];
                }
            }
        }
    }
    let mut sums = [[0f32; R]; C];
    for c in 0..C {
        for r in 0..R {
            // SAFETY: AVX is enabled by the caller.
            sums[c][r] = unsafe { hsum(acc[c][r]) } + offset[c][r];
        }
    }
    sums
}

/// Sums of four products of unsigned `w` bytes and signed `a` bytes, as eight i32.
#[inline(always)]
unsafe fn mul_sum<const VNNI: bool>(w: __m256i, a: __m256i) -> __m256i {
    if VNNI {
        // SAFETY: VNNI is only instantiated inside dot_rows_vnni (features enabled).
        unsafe { _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, a) }
    } else {
        // w <= 63 here, or |w| <= 128 with a's sign moved (Q8_0): a pair sum stays within
        // i16 (128 * 127 * 2 = 32512; activations are rounded into -127..=127).
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(w, a), _mm256_set1_epi16(1)) }
    }
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }
}

/// The f16 at `bytes[at..at + 2]` (F16C's `VCVTPH2PS`: `half`'s conversion would detect
/// the feature again on every call from here).
#[inline(always)]
fn half(bytes: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    // SAFETY: F16C is enabled in both kernels' target features (and checked by
    // Isa::detect).
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits)))) }
}

#[inline(always)]
unsafe fn load_act(act: &Q8Activation, block: usize) -> __m256i {
    // SAFETY: block * 32 + 32 <= act.qs.len() (the callers' row covers act).
    unsafe { _mm256_loadu_si256(act.qs.as_ptr().add(block * 32).cast()) }
}

/// 16 bytes of nibbles to 32 values: low nibbles first (values 0..16), then high nibbles.
#[inline(always)]
unsafe fn nibbles(qs: *const u8) -> __m256i {
    unsafe {
        let bytes = _mm_loadu_si128(qs.cast());
        let low = _mm_and_si128(bytes, _mm_set1_epi8(0x0f));
        let high = _mm_and_si128(_mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
        _mm256_set_m128i(high, low)
    }
}

/// 0x10 in byte i where bit i of `bits` is set, else 0.
#[inline(always)]
unsafe fn fifth_bits(bits: u32) -> __m256i {
    unsafe {
        // Byte i takes byte i / 8 of `bits`, then keeps bit i % 8 of it.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_set_epi64x(
                0x0303_0303_0303_0303,
                0x0202_0202_0202_0202,
                0x0101_0101_0101_0101,
                0,
            ),
        );
        let select = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
        _mm256_and_si256(set, _mm256_set1_epi8(0x10))
    }
}

/// [`super::scale_min_k4`] as floats.
#[inline(always)]
fn scale_min_k4(j: usize, q: &[u8]) -> (f32, f32) {
    let (scale, min) = super::scale_min_k4(j, q);
    (f32::from(scale), f32::from(min))
}

/// Q4_K (`FIVE` false) and Q5_K: 8 sub-blocks of 32, value = d sc q - dmin m.
#[inline(always)]
unsafe fn dot_qk45<const VNNI: bool, const FIVE: bool, const C: usize>(
    row: &[u8],
    acts: [&Q8Activation; C],
) -> [f32; C] {
    let size = if FIVE { 176 } else { 144 };
    let qs_at = if FIVE { 48 } else { 16 };
    // SAFETY: AVX is enabled by the caller.
    let mut acc = [unsafe { _mm256_setzero_ps() }; C];
    let mut offset = [0f32; C];
    for (s, block) in row.chunks_exact(size).enumerate() {
        prefetch(row.as_ptr(), row.len() + s * size, size);
        let d = half(block, 0);
        let dmin = half(block, 2);
        let scales = &block[4..16];
        // SAFETY: Q5_K's 32 high-bit bytes start at 16.
        let high = if FIVE {
            unsafe { _mm256_loadu_si256(block.as_ptr().add(16).cast()) }
        } else {
            unsafe { _mm256_setzero_si256() }
        };
        for chunk in 0..4 {
            // SAFETY: 4 chunks of 32 nibble bytes from qs_at fill the block.
            let bytes =
                unsafe { _mm256_loadu_si256(block.as_ptr().add(qs_at + 32 * chunk).cast()) };
            for half_index in 0..2 {
                let j = 2 * chunk + half_index;
                let b = s * 8 + j;
                let (sc, mn) = scale_min_k4(j, scales);
                // SAFETY: AVX2 is enabled by the caller; `b` is inside `act`.
                unsafe {
                    let mut w = if half_index == 0 {
                        _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f))
                    } else {
                        _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0f))
                    };
                    if FIVE {
                        let bit = _mm256_and_si256(
                            _mm256_srl_epi16(high, _mm_cvtsi32_si128(j as i32)),
                            _mm256_set1_epi8(1),
                        );
                        w = _mm256_or_si256(w, _mm256_slli_epi16(bit, 4));
                    }
                    for c in 0..C {
                        let p = mul_sum::<VNNI>(w, load_act(acts[c], b));
                        acc[c] = _mm256_fmadd_ps(
                            _mm256_cvtepi32_ps(p),
                            _mm256_set1_ps(d * sc * acts[c].scales[b]),
                            acc[c],
                        );
                    }
                }
                for c in 0..C {
                    offset[c] -= dmin * mn * acts[c].scaled_sum32(b);
                }
            }
        }
    }
    // SAFETY: AVX is enabled by the caller.
    std::array::from_fn(|c| unsafe { hsum(acc[c]) } + offset[c])
}

/// Bits `shift..shift + 2` of each byte of `hb`, moved to bits 4..6.
#[inline(always)]
unsafe fn two_bits_at_four(hb: __m256i, shift: i32, two: __m256i) -> __m256i {
    // SAFETY: AVX2 is enabled by the callers.
    unsafe {
        _mm256_slli_epi16(
            _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(shift)), two),
            4,
        )
    }
}

/// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales, value = d sc (q - 32).
#[inline(always)]
unsafe fn dot_q6k<const VNNI: bool, const C: usize>(
    row: &[u8],
    acts: [&Q8Activation; C],
) -> [f32; C] {
    // SAFETY: AVX is enabled by the caller.
    let mut acc = [unsafe { _mm256_setzero_ps() }; C];
    let mut offset = [0f32; C];
    for (s, block) in row.chunks_exact(210).enumerate() {
        prefetch(row.as_ptr(), row.len() + s * 210, 210);
        let d = half(block, 208);
        let scales = &block[192..208];
        for h in 0..2 {
            let ql = 64 * h;
            let qh = 128 + 32 * h;
            // SAFETY: ql (128 bytes) then qh (64 bytes) open the block.
            unsafe {
                let ql0 = _mm256_loadu_si256(block.as_ptr().add(ql).cast());
                let ql1 = _mm256_loadu_si256(block.as_ptr().add(ql + 32).cast());
                let hb = _mm256_loadu_si256(block.as_ptr().add(qh).cast());
                let low = _mm256_set1_epi8(0x0f);
                let two = _mm256_set1_epi8(3);
                let top = |shift: i32| two_bits_at_four(hb, shift, two);
                let ws = [
                    _mm256_or_si256(_mm256_and_si256(ql0, low), top(0)),
                    _mm256_or_si256(_mm256_and_si256(ql1, low), top(2)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), top(4)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low), top(6)),
                ];
                for (k, w) in ws.into_iter().enumerate() {
                    let b = s * 8 + 4 * h + k;
                    let s0 = f32::from(scales[8 * h + 2 * k] as i8);
                    let s1 = f32::from(scales[8 * h + 2 * k + 1] as i8);
                    for c in 0..C {
                        let act = acts[c];
                        let p = mul_sum::<VNNI>(w, load_act(act, b));
                        let da = d * act.scales[b];
                        let scale = _mm256_set_m128(_mm_set1_ps(s1 * da), _mm_set1_ps(s0 * da));
                        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[c]);
                        offset[c] -= 32.0
                            * d
                            * (s0 * act.scaled_sums16[2 * b] + s1 * act.scaled_sums16[2 * b + 1]);
                    }
                }
            }
        }
    }
    // SAFETY: AVX is enabled by the caller.
    std::array::from_fn(|c| unsafe { hsum(acc[c]) } + offset[c])
}

/// The K-quant kernels on 512-bit registers (VNNI machines), on the activation's 256-value
/// blocks (Q8_K): per super-block and activation, `VPDPBUSD` sums the byte products four at a
/// time, two chunks' sums pack to i16 and `VPDPWSSD` multiplies them by the sub-blocks'
/// integer scales into i32, so one conversion to f32 and one multiply-add (by the two
/// super-block scales) close the super-block. The minimums' and offsets' terms go through the
/// activation's block sums, accumulated as vectors. Per activation this is what bounds
/// decoding several sequences at once. The sums run in a fixed order: the same on every call
/// and for one activation or four.
pub(super) mod wide {
    use std::arch::x86_64::*;

    use super::super::{KBlock, Q8Activation};
    use super::{half, prefetch};

    /// i16 lane `i` takes element `f(i)` of a vector's 32 i16 lanes.
    #[inline(always)]
    unsafe fn lanes16(f: impl Fn(usize) -> i16) -> __m512i {
        let index: [i16; 32] = std::array::from_fn(f);
        // SAFETY: 64 bytes read from a 64-byte array; AVX512F enabled by the caller.
        unsafe { _mm512_loadu_si512(index.as_ptr().cast()) }
    }

    /// Q4_K's eight 6-bit scales and eight 6-bit minimums (12 bytes) as bytes.
    #[inline(always)]
    fn scales_and_mins(packed: &[u8]) -> ([u8; 8], [u8; 8]) {
        let word = |i: usize| u32::from_le_bytes(packed[4 * i..4 * i + 4].try_into().unwrap());
        let (w0, w1, w2) = (word(0), word(1), word(2));
        let (six, four, two) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
        // Sub-blocks 0-3 keep their low six bits; 4-7 take four bits from the third word and
        // their top two from the first (scales) or second (minimums) word's spare bits.
        let scales_high = (w2 & four) | (((w0 >> 6) & two) << 4);
        let mins_high = ((w2 >> 4) & four) | (((w1 >> 6) & two) << 4);
        let mut scales = [0u8; 8];
        let mut mins = [0u8; 8];
        scales[..4].copy_from_slice(&(w0 & six).to_le_bytes());
        scales[4..].copy_from_slice(&scales_high.to_le_bytes());
        mins[..4].copy_from_slice(&(w1 & six).to_le_bytes());
        mins[4..].copy_from_slice(&mins_high.to_le_bytes());
        (scales, mins)
    }

    /// One super-block's sum over its sub-blocks of (integer scale * byte products), in i32
    /// lanes. Two 64-value chunks at a time: `VPDPBUSD` sums four products per lane, the two
    /// chunks' sums pack to i16 (a sum of four is at most 4 * 63 * 127 = 32004, so nothing
    /// saturates) and `VPDPWSSD` multiplies them by `scales`. In 128-bit lane L of a packed
    /// pair, i16 lanes 0-3 are the first chunk's i32 lanes 4L..4L + 4, lanes 4-7 the second's.
    #[inline(always)]
    unsafe fn scaled_sum(weights: &[__m512i; 4], qs: &[i8; 256], scales: &[__m512i; 2]) -> __m512i {
        // SAFETY: 4 x 64 bytes read from `qs`; the features are enabled by the caller.
        unsafe {
            let product = |chunk: usize| {
                _mm512_dpbusd_epi32(
                    _mm512_setzero_si512(),
                    weights[chunk],
                    _mm512_loadu_si512(qs.as_ptr().add(64 * chunk).cast()),
                )
            };
            let first = _mm512_packs_epi32(product(0), product(1));
            let second = _mm512_packs_epi32(product(2), product(3));
            _mm512_dpwssd_epi32(_mm512_madd_epi16(first, scales[0]), second, scales[1])
        }
    }

    /// Q4_K (`FIVE` false) and Q5_K: value = d sc q - dmin m, 8 sub-blocks of 32.
    ///
    /// # Safety
    /// AVX2, F16C, AVX512F/BW and AVX512-VNNI must be enabled; the activations must cover
    /// the row with their 256-value blocks.
    #[inline(always)]
    pub(in super::super) unsafe fn dot_qk45<const FIVE: bool, const C: usize>(
        row: &[u8],
        acts: [&Q8Activation; C],
    ) -> [f32; C] {
        let size = if FIVE { 176 } else { 144 };
        let qs_at = if FIVE { 48 } else { 16 };
        let blocks = row.len() / size;
        assert!(acts.iter().all(|a| a.k_blocks.len() >= blocks));
        let records: [*const KBlock; C] = std::array::from_fn(|c| acts[c].k_blocks.as_ptr());
        // SAFETY: the features are enabled by the caller; every load below is inside the
        // row's blocks or the activations' first `blocks` super-blocks (asserted).
        unsafe {
            let mut acc = [_mm512_setzero_ps(); C];
            let mut mins = [_mm256_setzero_ps(); C];
            // Chunks 2p and 2p + 1 pack into one i16 vector (`packed_pair`); its lanes
            // come from sub-blocks 4p, 4p + 2 (128-bit lanes 0-1) and 4p + 1, 4p + 3 (2-3).
            let index: [__m512i; 2] = std::array::from_fn(|p| {
                lanes16(|i| {
                    let (lane, second) = (i / 8, (i % 8) / 4);
                    (4 * p + 2 * second + lane / 2) as i16
                })
            });
            let low = _mm256_set1_epi8(0x0f);
            for (s, block) in row.chunks_exact(size).enumerate() {
                prefetch(row.as_ptr(), row.len() + s * size, size);
                let d = half(block, 0);
                let dmin = half(block, 2);
                let (sc, mn) = scales_and_mins(&block[4..16]);
                let sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_loadl_epi64(
                    sc.as_ptr().cast(),
                )));
                let scales: [__m512i; 2] =
                    std::array::from_fn(|p| _mm512_permutexvar_epi16(index[p], sc16));
                let mn = _mm256_mul_ps(
                    _mm256_set1_ps(dmin),
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(mn.as_ptr().cast()))),
                );
                let high = if FIVE {
                    _mm256_loadu_si256(block.as_ptr().add(16).cast())
                } else {
                    _mm256_setzero_si256()
                };
                let fifth = |j: i32| {
                    _mm256_slli_epi16(
                        _mm256_and_si256(
                            _mm256_srl_epi16(high, _mm_cvtsi32_si128(j)),
                            _mm256_set1_epi8(1),
                        ),
                        4,
                    )
                };
                let mut weights = [_mm512_setzero_si512(); 4];
                for (chunk, w) in weights.iter_mut().enumerate() {
                    let bytes = _mm256_loadu_si256(block.as_ptr().add(qs_at + 32 * chunk).cast());
                    let mut lo = _mm256_and_si256(bytes, low);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
                    if FIVE {
                        lo = _mm256_or_si256(lo, fifth(2 * chunk as i32));
                        hi = _mm256_or_si256(hi, fifth(2 * chunk as i32 + 1));
                    }
                    *w = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                }
                let dv = _mm512_set1_ps(d);
                for c in 0..C {
                    let record = &*records[c].add(s);
                    let sum = scaled_sum(&weights, &record.qs, &scales);
                    acc[c] = _mm512_fmadd_ps(
                        _mm512_mul_ps(_mm512_cvtepi32_ps(sum), dv),
                        _mm512_set1_ps(record.scale),
                        acc[c],
                    );
                    mins[c] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(record.sums32.as_ptr()), mins[c]);
                }
            }
            std::array::from_fn(|c| _mm512_reduce_add_ps(acc[c]) - super::hsum(mins[c]))
        }
    }

    /// Q6_K: value = d sc (q - 32), 16 sub-blocks of 16 with signed 8-bit scales.
    ///
    /// # Safety
    /// As [`dot_qk45`].
    #[inline(always)]
    pub(in super::super) unsafe fn dot_q6k<const C: usize>(
        row: &[u8],
        acts: [&Q8Activation; C],
    ) -> [f32; C] {
        let blocks = row.len() / 210;
        assert!(acts.iter().all(|a| a.k_blocks.len() >= blocks));
        let records: [*const KBlock; C] = std::array::from_fn(|c| acts[c].k_blocks.as_ptr());
        // SAFETY: as in dot_qk45.
        unsafe {
            let mut acc = [_mm512_setzero_ps(); C];
            let mut offsets = [_mm512_setzero_ps(); C];
            // Chunks 2p and 2p + 1 pack into one i16 vector (`packed_pair`): 128-bit lane
            // L holds four sums of sub-block 8p + L, then four of sub-block 8p + 4 + L.
            let index: [__m512i; 2] = std::array::from_fn(|p| {
                lanes16(|i| {
                    let (lane, second) = (i / 8, (i % 8) / 4);
                    (8 * p + 4 * second + lane) as i16
                })
            });
            let low = _mm256_set1_epi8(0x0f);
            let two = _mm256_set1_epi8(3);
            for (s, block) in row.chunks_exact(210).enumerate() {
                prefetch(row.as_ptr(), row.len() + s * 210, 210);
                let d = half(block, 208);
                let sc8 = _mm_loadu_si128(block.as_ptr().add(192).cast());
                let sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
                let scales: [__m512i; 2] =
                    std::array::from_fn(|p| _mm512_permutexvar_epi16(index[p], sc16));
                // d * the sixteen sub-block scales, for the offsets.
                let sc = _mm512_mul_ps(
                    _mm512_set1_ps(d),
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)),
                );
                let mut weights = [_mm512_setzero_si512(); 4];
                for h in 0..2 {
                    let ql0 = _mm256_loadu_si256(block.as_ptr().add(64 * h).cast());
                    let ql1 = _mm256_loadu_si256(block.as_ptr().add(64 * h + 32).cast());
                    let hb = _mm256_loadu_si256(block.as_ptr().add(128 + 32 * h).cast());
                    let top = |shift: i32| super::two_bits_at_four(hb, shift, two);
                    let ws = [
                        _mm256_or_si256(_mm256_and_si256(ql0, low), top(0)),
                        _mm256_or_si256(_mm256_and_si256(ql1, low), top(2)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), top(4)),
                        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low), top(6)),
                    ];
                    weights[2 * h] = _mm512_inserti64x4(_mm512_castsi256_si512(ws[0]), ws[1], 1);
                    weights[2 * h + 1] =
                        _mm512_inserti64x4(_mm512_castsi256_si512(ws[2]), ws[3], 1);
                }
                let dv = _mm512_set1_ps(d);
                for c in 0..C {
                    let record = &*records[c].add(s);
                    let sum = scaled_sum(&weights, &record.qs, &scales);
                    acc[c] = _mm512_fmadd_ps(
                        _mm512_mul_ps(_mm512_cvtepi32_ps(sum), dv),
                        _mm512_set1_ps(record.scale),
                        acc[c],
                    );
                    offsets[c] =
                        _mm512_fmadd_ps(sc, _mm512_loadu_ps(record.sums16.as_ptr()), offsets[c]);
                }
            }
            std::array::from_fn(|c| {
                _mm512_reduce_add_ps(acc[c]) - 32.0 * _mm512_reduce_add_ps(offsets[c])
            })
        }
    }
}
