//! Cross-encoder throughput in (query, document) pairs per second: one question's top 50, as the
//! paper reranks.
//!
//! No real reranker checkpoint can be fetched here, so the main case is all-MiniLM-L6-v2's
//! weights (run scripts/setup.sh first; skipped without it) with a seeded random 1-logit
//! classifier added: the layers, shapes and cost of cross-encoder/ms-marco-MiniLM-L-6-v2 (a
//! 6-layer, 384-wide BERT with pooler + classifier), not its scores. The tiny XLM-R fixture
//! measures the per-batch overhead.

use std::collections::HashMap;
use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::embed::{ModelFiles, resolve_model};
use freshstack::rerank::{CrossEncoder, Reranker, RerankerOptions};
use safetensors::tensor::{Dtype, TensorView};

fn words(count: usize, seed: u64) -> String {
    let vocab = [
        "route",
        "queue",
        "worker",
        "Eloquent",
        "model",
        "migration",
        "php",
        "artisan",
        "config",
        "cache",
        "middleware",
        "request",
        "response",
        "Blade",
        "view",
        "the",
        "a",
        "of",
        "to",
        "and",
    ];
    let mut state = seed;
    (0..count)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            vocab[(state >> 33) as usize % vocab.len()]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A seeded random classifier head (`classifier.weight` `[1, 384]`, `classifier.bias` `[1]`).
fn write_head(path: &Path, hidden: usize) {
    let mut state: u64 = 7;
    let mut weight = Vec::with_capacity(hidden * 4);
    for _ in 0..hidden {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.2;
        weight.extend_from_slice(&v.to_le_bytes());
    }
    let bias = 0.1f32.to_le_bytes().to_vec();
    let tensors = HashMap::from([
        (
            "classifier.weight".to_string(),
            TensorView::new(Dtype::F32, vec![1, hidden], &weight).unwrap(),
        ),
        (
            "classifier.bias".to_string(),
            TensorView::new(Dtype::F32, vec![1], &bias).unwrap(),
        ),
    ]);
    safetensors::serialize_to_file(tensors, None, path).unwrap();
}

fn bench_model(c: &mut Criterion, group_name: &str, model: &CrossEncoder, pairs: &[(&str, &str)]) {
    let mut group = c.benchmark_group(group_name);
    group.sample_size(10);
    group.throughput(Throughput::Elements(pairs.len() as u64));
    group.bench_function(format!("{}_pairs", pairs.len()), |b| {
        b.iter(|| black_box(model.score(pairs, &NoProgress).unwrap()))
    });
    group.finish();
}

fn bench(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let query = words(40, 1);
    let docs: Vec<String> = (0..50)
        .map(|i| words(120 + (i * 7) % 120, 100 + i as u64))
        .collect();
    let pairs: Vec<(&str, &str)> = docs.iter().map(|d| (query.as_str(), d.as_str())).collect();

    let minilm = root.join("models/all-MiniLM-L6-v2");
    if minilm.join("model.safetensors").is_file() {
        let tmp = tempfile::tempdir().unwrap();
        let head = tmp.path().join("head.safetensors");
        write_head(&head, 384);
        let base = resolve_model(minilm.to_str().unwrap()).unwrap();
        let files = ModelFiles {
            name: "minilm-as-cross-encoder".into(),
            id: None,
            dir: tmp.path().to_path_buf(),
            weights: vec![base.weights[0].clone(), head],
            ..base
        };
        let model = CrossEncoder::load(&files, &RerankerOptions::default()).unwrap();
        bench_model(c, "minilm_cross_encoder", &model, &pairs);
    } else {
        eprintln!("SKIPPED minilm_cross_encoder bench: run scripts/setup.sh");
    }

    let tiny = root.join("tests/fixtures/rerank/tiny-xlmr");
    let files = resolve_model(tiny.to_str().unwrap()).unwrap();
    let model = CrossEncoder::load(&files, &RerankerOptions::default()).unwrap();
    bench_model(c, "tiny_xlmr", &model, &pairs);
}

criterion_group!(benches, bench);
criterion_main!(benches);
