//! Dense search: one HNSW query (hnsw_rs, M 16, ef_construction 200, ef 128, rescored exactly)
//! against exact flat search, and the graph build, on seeded random unit vectors (the hardest
//! case for HNSW; real embeddings cluster). Prints recall@10 of HNSW against exact once.
//!
//! Run: `cargo bench --bench hnsw` (or `--profile dev`, dependencies are optimised there too).
//! Size: `FRESHSTACK_BENCH_HNSW_N` (default 20,000) x 384. The Python peer comparison (hnswlib,
//! real MiniLM embeddings or random vectors) is `benches/compare/hnsw_vs_hnswlib.py`.

use criterion::{Criterion, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::index::{
    DocIds, Dtype, HnswGraph, HnswSettings, VectorMatrix, flat_search, write_npy,
};

const DIM: usize = 384;

fn unit_vectors(n: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed.max(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..DIM).map(|_| next()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let n: usize = std::env::var("FRESHSTACK_BENCH_HNSW_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.npy");
    let data = unit_vectors(n, 42);
    write_npy(&path, n, DIM, Dtype::F32, |i, row| {
        row.copy_from_slice(&data[i])
    })
    .unwrap();
    let matrix = VectorMatrix::open(&path).unwrap();
    let ids = DocIds::new((0..n).map(|i| format!("d{i:07}")).collect()).unwrap();
    let settings = HnswSettings::default();
    let started = std::time::Instant::now();
    let graph = HnswGraph::build(&matrix, &settings, &NoProgress).unwrap();
    eprintln!(
        "hnsw build: {n} x {DIM} in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let queries = unit_vectors(200, 7);
    let mut found = 0;
    for q in &queries {
        let exact: Vec<u32> = flat_search(&matrix, &ids, q, 10)
            .into_iter()
            .map(|(o, _)| o)
            .collect();
        found += graph
            .search(q, 10, 128)
            .iter()
            .filter(|r| exact.contains(r))
            .count();
    }
    eprintln!(
        "hnsw recall@10 (ef 128): {:.4}",
        found as f64 / (10.0 * queries.len() as f64)
    );

    let mut group = c.benchmark_group("dense");
    let mut i = 0;
    group.bench_function(format!("hnsw_search_k10_ef128_n{n}"), |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            graph.search(&queries[i], 10, 128)
        })
    });
    group.bench_function(format!("flat_search_k10_n{n}"), |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            flat_search(&matrix, &ids, &queries[i], 10)
        })
    });
    group.sample_size(10);
    let small = 2_000.min(n);
    let small_path = dir.path().join("small.npy");
    write_npy(&small_path, small, DIM, Dtype::F32, |i, row| {
        row.copy_from_slice(&data[i])
    })
    .unwrap();
    let small_matrix = VectorMatrix::open(&small_path).unwrap();
    group.bench_function(format!("hnsw_build_n{small}"), |b| {
        b.iter(|| HnswGraph::build(&small_matrix, &settings, &NoProgress).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
