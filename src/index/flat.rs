//! Exact (flat) inner-product search over a [`VectorMatrix`](crate::dataset::VectorMatrix): every row is scored, in parallel
//! over row blocks with rayon; the result is the ground truth HNSW is measured against and the
//! right choice for small corpora. Deterministic: each row's score does not depend on the
//! blocking, and [`TopK`] orders ties by id.

use rayon::prelude::*;

use crate::dataset::VectorMatrix;
use crate::index::docids::{DocIds, TopK};
use crate::kernels::dot::dot;

const BLOCK_ROWS: usize = 4096;

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
