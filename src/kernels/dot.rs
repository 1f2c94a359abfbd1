//! Dot products, the one home of every inner product in the crate: f32 x f32 ([`dot`]: exact
//! search, rescoring, RMS norms, the dequantize-then-dot fallback of the GGUF engine) and f32 x
//! f16 (`dot_f16` and its AVX2 / AVX-512 forms: the HNSW traversal over an f16 copy of the
//! vectors). Each sums in a fixed order without FMA, so every instruction set gives the same
//! bits; the wide forms are checked bit for bit against the portable ones.

/// Inner product with eight independent accumulators, so the compiler vectorises it; the
/// summation order is fixed, so results are reproducible. On x86-64 CPUs with AVX2 the same
/// arithmetic runs eight lanes wide (no FMA: every product and sum is rounded as in the
/// portable version, so the result is bit-identical).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above; the check is cached).
            return unsafe { dot_avx2(a, b) };
        }
    }
    dot_portable(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_portable(a, b)
}

#[inline(always)]
fn dot_portable(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 8];
    let chunks_a = a.chunks_exact(8);
    let chunks_b = b.chunks_exact(8);
    let (rest_a, rest_b) = (chunks_a.remainder(), chunks_b.remainder());
    for (x, y) in chunks_a.zip(chunks_b) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut tail = 0f32;
    for (x, y) in rest_a.iter().zip(rest_b) {
        tail += x * y;
    }
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// The inner product that guides the search: 32 independent accumulators (four 8-lane
/// registers under AVX2, so additions do not wait on each other), a fixed summation order and
/// no FMA, so every CPU computes the same bits. The reported scores come from the exact
/// rescoring with [`dot`], not from this.
#[inline(always)]
pub(crate) fn dot_f16(a: &[f32], b: &[u16]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; 32];
    let (wide_a, wide_b) = (a.chunks_exact(32), b.chunks_exact(32));
    let (rest_a, rest_b) = (wide_a.remainder(), wide_b.remainder());
    for (x, y) in wide_a.zip(wide_b) {
        for i in 0..32 {
            acc[i] += x[i] * half::f16::from_bits(y[i]).to_f32();
        }
    }
    let mut tail = 0f32;
    for (x, y) in rest_a.iter().zip(rest_b) {
        tail += x * half::f16::from_bits(*y).to_f32();
    }
    let mut lanes = [0f32; 8];
    for (i, lane) in lanes.iter_mut().enumerate() {
        *lane = (acc[i] + acc[i + 8]) + (acc[i + 16] + acc[i + 24]);
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// [`dot_f16`] with AVX2 and F16C intrinsics: register `j` holds accumulators
/// `8j..8j + 8`, f16 converts to f32 exactly, and products and sums are rounded one by one (no
/// FMA), so the bits are the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
#[inline]
pub(crate) fn dot_f16_avx2(a: &[f32], b: &[u16]) -> f32 {
    use std::arch::x86_64::{
        __m128i, __m256, _mm_loadu_si128, _mm256_add_ps, _mm256_cvtph_ps, _mm256_loadu_ps,
        _mm256_mul_ps, _mm256_setzero_ps, _mm256_storeu_ps,
    };
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let wide = n / 32 * 32;
    let mut acc: [__m256; 4] = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    while i < wide {
        for (j, sum) in acc.iter_mut().enumerate() {
            // SAFETY: i + 8j + 8 <= wide <= n = a.len() = b.len(): the eight values are in bounds.
            let (x, y) = unsafe {
                (
                    _mm256_loadu_ps(a.as_ptr().add(i + 8 * j)),
                    _mm256_cvtph_ps(_mm_loadu_si128(b.as_ptr().add(i + 8 * j).cast::<__m128i>())),
                )
            };
            *sum = _mm256_add_ps(*sum, _mm256_mul_ps(x, y));
        }
        i += 32;
    }
    let folded = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), folded) };
    let mut tail = 0f32;
    for (x, y) in a[wide..].iter().zip(&b[wide..]) {
        tail += x * half::f16::from_bits(*y).to_f32();
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// The traversal kernel compiled into a search or construction path (a const parameter, so
/// each path is compiled for one instruction set and the dot product inlines).
pub(crate) const F16_PORTABLE: u8 = 0;
/// [`dot_f16_avx2`].
pub(crate) const F16_AVX2: u8 = 1;
/// [`dot_f16_avx512`].
pub(crate) const F16_AVX512: u8 = 2;

/// The widest traversal kernel this CPU runs. All three give the same bits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum F16Kernel {
    Portable,
    Avx2,
    Avx512,
}

/// The widest kernel this CPU runs (feature detection is cached by the standard library).
pub(crate) fn f16_kernel() -> F16Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("f16c")
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return F16Kernel::Avx512;
            }
            return F16Kernel::Avx2;
        }
    }
    F16Kernel::Portable
}

/// The traversal inner product with kernel `K`. `K` other than [`F16_PORTABLE`] only ever reaches
/// here inside a function compiled for that instruction set, called after [`f16_kernel`] found it.
#[inline(always)]
pub(crate) fn dot_f16_with<const K: u8>(query: &[f32], row: &[u16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if K == F16_AVX512 {
            // SAFETY: see above: the CPU has AVX-512 F (and AVX2, F16C).
            return unsafe { dot_f16_avx512(query, row) };
        }
        if K == F16_AVX2 {
            // SAFETY: see above: the CPU has AVX2 and F16C.
            return unsafe { dot_f16_avx2(query, row) };
        }
    }
    dot_f16(query, row)
}

/// [`dot_f16`] with AVX-512: register `lo` holds accumulators `0..16`, `hi` `16..32`;
/// folding each register's halves gives exactly the AVX2 form's `(acc0 + acc1) + (acc2 + acc3)`,
/// so the bits are the same.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,f16c")]
#[inline]
pub(crate) fn dot_f16_avx512(a: &[f32], b: &[u16]) -> f32 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_ps, _mm256_castpd_ps, _mm256_loadu_si256, _mm256_storeu_ps,
        _mm512_add_ps, _mm512_castpd512_pd256, _mm512_castps_pd, _mm512_cvtph_ps,
        _mm512_extractf64x4_pd, _mm512_loadu_ps, _mm512_mul_ps, _mm512_setzero_ps,
    };
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let wide = n / 32 * 32;
    let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let mut i = 0;
    while i < wide {
        // SAFETY: i + 32 <= wide <= n = a.len() = b.len(): the 32 values are in bounds.
        unsafe {
            let x0 = _mm512_loadu_ps(a.as_ptr().add(i));
            let x1 = _mm512_loadu_ps(a.as_ptr().add(i + 16));
            let y0 = _mm512_cvtph_ps(_mm256_loadu_si256(b.as_ptr().add(i).cast::<__m256i>()));
            let y1 = _mm512_cvtph_ps(_mm256_loadu_si256(b.as_ptr().add(i + 16).cast::<__m256i>()));
            lo = _mm512_add_ps(lo, _mm512_mul_ps(x0, y0));
            hi = _mm512_add_ps(hi, _mm512_mul_ps(x1, y1));
        }
        i += 32;
    }
    let halves = |v| {
        let v = _mm512_castps_pd(v);
        (
            _mm256_castpd_ps(_mm512_castpd512_pd256(v)),
            _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(v)),
        )
    };
    let ((a0, a1), (a2, a3)) = (halves(lo), halves(hi));
    let folded = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    let mut lanes = [0f32; 8];
    // SAFETY: `lanes` holds eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), folded) };
    let mut tail = 0f32;
    for (x, y) in a[wide..].iter().zip(&b[wide..]) {
        tail += x * half::f16::from_bits(*y).to_f32();
    }
    ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
        + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]))
        + tail
}

/// Prefetches the cache lines holding bytes `from..to` of the memory at `at`.
#[inline(always)]
pub(crate) fn prefetch_bytes(at: *const u8, from: usize, to: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let mut offset = from;
        while offset < to {
            // SAFETY: SSE is part of x86-64; a prefetch never faults, whatever the address
            // (`wrapping_add` keeps the pointer arithmetic itself defined).
            unsafe { _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(offset).cast::<i8>()) };
            offset += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (at, from, to);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `n` random unit vectors of width `dim` (also the HNSW tests' data).
    pub(crate) fn unit_rows(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
        let mut rng = fastrand::Rng::with_seed(seed);
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..dim).map(|_| rng.f32() - 0.5).collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                v.into_iter().map(|x| x / norm).collect()
            })
            .collect()
    }

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..21).map(|i| i as f32 * 0.25).collect();
        let b: Vec<f32> = (0..21).map(|i| 1.0 - i as f32 * 0.1).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-4);
    }

    #[test]
    fn wide_dot_is_bit_identical_to_portable() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for len in [0, 1, 7, 8, 9, 63, 384, 1027] {
            let a: Vec<f32> = (0..len).map(|_| next()).collect();
            let b: Vec<f32> = (0..len).map(|_| next()).collect();
            assert_eq!(
                dot(&a, &b).to_bits(),
                dot_portable(&a, &b).to_bits(),
                "{len}"
            );
        }
    }

    #[test]
    fn traversal_dots_agree_bit_for_bit() {
        let rows = unit_rows(2, 1100, 9);
        for len in [0, 1, 7, 31, 32, 33, 384, 1027] {
            let a = &rows[0][..len];
            let b: Vec<u16> = rows[1][..len]
                .iter()
                .map(|v| half::f16::from_f32(*v).to_bits())
                .collect();
            let b = &b[..];
            let naive: f32 = a.iter().zip(&rows[1]).map(|(x, y)| x * y).sum();
            assert!((dot_f16(a, b) - naive).abs() < 1e-2, "{len}");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                // SAFETY: the CPU has AVX2 and F16C.
                let wide = unsafe { dot_f16_avx2(a, b) };
                assert_eq!(wide.to_bits(), dot_f16(a, b).to_bits(), "{len}");
            }
            #[cfg(target_arch = "x86_64")]
            if f16_kernel() == F16Kernel::Avx512 {
                // SAFETY: the CPU has AVX-512 F, AVX2 and F16C.
                let widest = unsafe { dot_f16_avx512(a, b) };
                assert_eq!(widest.to_bits(), dot_f16(a, b).to_bits(), "{len}");
            }
        }
    }
}
