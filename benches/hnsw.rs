//! Dense search: one HNSW query (graph built by our batch insertion, our search; M 16,
//! ef_construction 200, ef 128; the engine rescores exactly)
//! against exact flat search, and the graph build, on seeded random unit vectors (the hardest
//! case for HNSW; real embeddings cluster). Prints recall@10 of HNSW against exact once. Then
//! the engine's `fusion` retriever over a batch of queries (BM25 + HNSW, top 100 each, fused):
//! what pooling many questions costs per query, query encoding aside.
//!
//! Run: `cargo bench --bench hnsw` (or `--profile dev`, dependencies are optimised there too).
//! Size: `FRESHSTACK_BENCH_HNSW_N` (default 20,000) x 384. The Python peer comparison (hnswlib,
//! real MiniLM embeddings or random vectors) is `benches/compare/hnsw_vs_hnswlib.py`.

use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::dataset::{Embeddings, Encoder, TextKind, VectorDtype, VectorMatrix, write_npy};
use freshstack::index::{
    Bm25Settings, DocIds, DocumentModel, HnswGraph, HnswSettings, IndexConfig, LoadedModel,
    build_index_with_encoders, flat_search,
};
use freshstack::search::{Engine, SearchOptions};
use freshstack::{NoProgress, Progress};

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
    write_npy(&path, n, DIM, VectorDtype::F32, |i, row| {
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
    write_npy(&small_path, small, DIM, VectorDtype::F32, |i, row| {
        row.copy_from_slice(&data[i])
    })
    .unwrap();
    let small_matrix = VectorMatrix::open(&small_path).unwrap();
    group.bench_function(format!("hnsw_build_n{small}"), |b| {
        b.iter(|| HnswGraph::build(&small_matrix, &settings, &NoProgress).unwrap())
    });
    group.finish();
}

/// Seeded random unit vectors for the documents, in corpus order.
#[derive(Clone)]
struct RandomDocs(Arc<Vec<Vec<f32>>>);

impl DocumentModel for RandomDocs {
    fn name(&self) -> &str {
        "rand"
    }
    fn load(&self) -> freshstack::Result<LoadedModel> {
        Ok(LoadedModel {
            encoder: Box::new(self.clone()),
            model: None,
            source: "random".into(),
        })
    }
}

impl Encoder for RandomDocs {
    fn dim(&self) -> usize {
        DIM
    }
    fn embed(
        &self,
        texts: &[&str],
        _: TextKind,
        _: &dyn Progress,
    ) -> freshstack::Result<Embeddings> {
        Ok(Embeddings {
            dim: DIM,
            data: self.0[..texts.len()].concat(),
            num_truncated: 0,
            num_tokens: 0,
        })
    }
}

/// Each query text names its vector: `"... #i"`.
struct RandomQueries(Vec<Vec<f32>>);

impl Encoder for RandomQueries {
    fn dim(&self) -> usize {
        DIM
    }
    fn embed(
        &self,
        texts: &[&str],
        _: TextKind,
        _: &dyn Progress,
    ) -> freshstack::Result<Embeddings> {
        let mut data = Vec::with_capacity(texts.len() * DIM);
        for text in texts {
            let i: usize = text
                .rsplit('#')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0);
            data.extend_from_slice(&self.0[i % self.0.len()]);
        }
        Ok(Embeddings {
            dim: DIM,
            data,
            num_truncated: 0,
            num_tokens: 0,
        })
    }
}

fn bench_fusion(c: &mut Criterion) {
    let n = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut word = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // Zipf-ish: small ids are common.
        let r = (state >> 11) as f64 / (1u64 << 53) as f64;
        format!("w{}", (2000f64.powf(r)) as usize)
    };
    let mut corpus = String::new();
    for i in 0..n {
        let text: Vec<String> = (0..60).map(|_| word()).collect();
        corpus.push_str(
            &serde_json::json!({"_id": format!("d{i:06}"), "text": text.join(" ")}).to_string(),
        );
        corpus.push('\n');
    }
    let queries: Vec<String> = (0..100)
        .map(|q| {
            let text: Vec<String> = (0..40).map(|_| word()).collect();
            format!("{} #{q}", text.join(" "))
        })
        .collect();
    let corpus_path = dir.path().join("corpus.jsonl");
    std::fs::write(&corpus_path, corpus).unwrap();
    let config = IndexConfig {
        corpus: corpus_path,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![],
        hnsw: Some(HnswSettings::default()),
    };
    let index = dir.path().join("index");
    let docs = RandomDocs(Arc::new(unit_vectors(n, 42)));
    build_index_with_encoders(&config, &[&docs], &index, &NoProgress).unwrap();
    let mut engine = Engine::open(&index).unwrap();
    engine
        .set_query_encoder("rand", Arc::new(RandomQueries(unit_vectors(100, 7))))
        .unwrap();
    let texts: Vec<&str> = queries.iter().map(String::as_str).collect();
    let options = SearchOptions {
        retriever: "fusion".parse().unwrap(),
        k: 100,
        ..SearchOptions::default()
    };
    engine.search_batch(&texts, &options).unwrap();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(texts.len() as u64));
    group.sample_size(10);
    group.bench_function(format!("fusion_batch_100q_n{n}"), |b| {
        b.iter(|| engine.search_batch(&texts, &options).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench, bench_fusion);
criterion_main!(benches);
