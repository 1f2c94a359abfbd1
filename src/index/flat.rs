//! Exact (flat) inner-product search over a [`VectorMatrix`]: every row is scored, in parallel
//! over row blocks with rayon; the result is the ground truth HNSW is measured against and the
//! right choice for small corpora. Deterministic: each row's score does not depend on the
//! blocking, and [`TopK`] orders ties by id.

use rayon::prelude::*;

use crate::index::docids::{DocIds, TopK};
use crate::index::vectors::VectorMatrix;

const BLOCK_ROWS: usize = 4096;

/// Inner product with eight independent accumulators, so the compiler vectorises it; the
/// summation order is fixed, so results are reproducible.
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
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
}
