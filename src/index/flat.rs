//! Exact (flat) inner-product search over a [`VectorMatrix`](crate::dataset::VectorMatrix): every row is scored, in parallel
//! over row blocks with rayon; the result is the ground truth HNSW is measured against and the
//! right choice for small corpora. Deterministic: each row's score does not depend on the
//! blocking, and [`TopK`] orders ties by id.

use rayon::prelude::*;

use crate::dataset::VectorMatrix;
use crate::index::docids::{DocIds, TopK};

const BLOCK_ROWS: usize = 4096;

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

/// The `k` rows with the largest inner product with `query`, best first, as
/// `(row, score)`; ties by id. `query.len()` must equal the matrix dimension.
pub fn search(matrix: &VectorMatrix, ids: &DocIds, query: &[f32], k: usize) -> Vec<(u32, f32)> {
    let rows = matrix.rows();
    let blocks: Vec<usize> = (0..rows.div_ceil(BLOCK_ROWS)).collect();
    let partial: Vec<Vec<(u32, f32)>> = blocks
        .par_iter()
        .map(|&block| {
            let mut top = TopK::new(k, ids);
            let mut buf = vec![0f32; matrix.dim()];
            let end = ((block + 1) * BLOCK_ROWS).min(rows);
            for row in block * BLOCK_ROWS..end {
                let score = match matrix.row_f32(row) {
                    Some(slice) => dot(slice, query),
                    None => {
                        matrix.row_into(row, &mut buf);
                        dot(&buf, query)
                    }
                };
                top.push(row as u32, score);
            }
            top.into_sorted()
        })
        .collect();
    let mut top = TopK::new(k, ids);
    for (row, score) in partial.into_iter().flatten() {
        top.push(row, score);
    }
    top.into_sorted()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
