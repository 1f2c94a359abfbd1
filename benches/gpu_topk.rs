//! GPU exact top-k throughput (feature `cuda`), against the memory-bandwidth bound:
//!
//!     cargo bench --profile dev --features cuda --bench gpu_topk -- [ROWS] [DIM] [K]
//!
//! Writes a random f16 matrix (default 1,000,000 x 1024), uploads it, then times
//! `GpuFlat::search` (kernels, candidate download and the exact CPU rescoring: what `retrieve
//! --ann exact --device cuda` pays) for batches of 16 to 1024 queries, best of 5. The bound:
//! a batch reads the f16 matrix at least once, so it takes at least matrix bytes / bandwidth
//! (`FRESHSTACK_GPU_BW` bytes/s, default 4.8e12, the H200's HBM3e peak). Large batches are
//! bound by f32 arithmetic instead: rows x dim fused multiply-adds per query
//! (`FRESHSTACK_GPU_FMA` per second, default 3.35e13, an H100/H200 SXM's 67 TFLOP/s FP32),
//! also printed. Checks a few queries against the CPU flat search. Prints "SKIPPED" and exits 0
//! without a CUDA device.

use std::time::Instant;

use freshstack::dataset::{VectorDtype, VectorMatrix, write_npy};
use freshstack::index::{DocIds, GpuFlat, flat_search};

fn values(n: usize, seed: u64) -> impl Iterator<Item = f32> {
    let mut state = seed.max(1);
    (0..n).map(move |_| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    })
}

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .filter(|a| !a.starts_with('-'))
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let (rows, dim, k) = (arg(1, 1_000_000), arg(2, 1024), arg(3, 100));
    let bandwidth: f64 = std::env::var("FRESHSTACK_GPU_BW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4.8e12);
    let fma_rate: f64 = std::env::var("FRESHSTACK_GPU_FMA")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3.35e13);
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("m.npy");
    let started = Instant::now();
    let mut rng = values(rows * dim, 7);
    write_npy(&path, rows, dim, VectorDtype::F16, |_, row| {
        for v in row.iter_mut() {
            *v = rng.next().unwrap_or(0.0);
        }
    })
    .expect("write matrix");
    let matrix = VectorMatrix::open(&path).expect("open matrix");
    let ids = DocIds::new((0..rows).map(|i| format!("d{i:08}")).collect()).expect("ids");
    eprintln!(
        "matrix {rows} x {dim} f16 written in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let started = Instant::now();
    let gpu = match GpuFlat::new(&matrix, 0) {
        Ok(gpu) => gpu,
        Err(e) => {
            println!("SKIPPED gpu_topk: {e}");
            return;
        }
    };
    let matrix_bytes = (rows * dim * 2) as f64;
    println!(
        "gpu_topk: {} | {rows} x {dim} f16 ({:.2} GB), k = {k}, upload + NVRTC {:.2}s, \
         batch limit {}",
        gpu.device(),
        matrix_bytes / 1e9,
        started.elapsed().as_secs_f64(),
        gpu.batch_size()
    );
    for batch in [16usize, 64, 256, 1024] {
        let queries: Vec<Vec<f32>> = (0..batch)
            .map(|q| values(dim, 1000 + q as u64).collect())
            .collect();
        let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
        let mut best = f64::INFINITY;
        let mut got = Vec::new();
        for _ in 0..6 {
            let t = Instant::now();
            got = gpu.search(&matrix, &ids, &refs, k).expect("search");
            best = best.min(t.elapsed().as_secs_f64());
        }
        // The first run (compilation caches, allocations) is included in the best-of-6.
        let qps = batch as f64 / best;
        let bound_qps = batch as f64 * bandwidth / matrix_bytes;
        let fma_qps = fma_rate / (rows * dim) as f64;
        println!(
            "gpu_topk: batch {batch:5}: {:9.2} ms, {qps:10.0} queries/s, matrix read at \
             {:7.1} GB/s; bandwidth bound {bound_qps:10.0} queries/s ({:5.1}% of it), \
             FP32 bound {fma_qps:8.0} queries/s ({:5.1}%)",
            best * 1e3,
            matrix_bytes / best / 1e9,
            100.0 * qps / bound_qps,
            100.0 * qps / fma_qps
        );
        for q in [0, batch - 1] {
            let want = flat_search(&matrix, &ids, &queries[q], k);
            assert_eq!(got[q], want, "batch {batch} query {q}: GPU != CPU");
        }
    }
    println!("gpu_topk: GPU results equal the CPU flat search on the checked queries");
}
