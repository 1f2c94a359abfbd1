//! Encoder throughput: all-MiniLM-L6-v2 (run scripts/setup.sh first; skipped without it) on 64
//! documents of ~200 tokens, and the tiny Mistral fixture's batched forward pass.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::embed::{
    Encoder, EncoderOptions, ModelDType, TextEncoder, TextKind, resolve_model,
};

fn texts(count: usize) -> Vec<String> {
    // Deterministic pseudo-documents: a seeded LCG picks words, so every run embeds the same text.
    let words = [
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
    let mut state: u64 = 42;
    (0..count)
        .map(|_| {
            (0..150)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    words[(state >> 33) as usize % words.len()]
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let docs = texts(64);
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();

    let minilm = root.join("models/all-MiniLM-L6-v2");
    if minilm.join("model.safetensors").is_file() {
        let files = resolve_model(minilm.to_str().unwrap()).unwrap();
        let encoder = TextEncoder::load(&files, &EncoderOptions::default()).unwrap();
        let mut group = c.benchmark_group("minilm");
        group.sample_size(10);
        group.throughput(Throughput::Elements(refs.len() as u64));
        group.bench_function("64_docs", |b| {
            b.iter(|| {
                black_box(
                    encoder
                        .embed(&refs, TextKind::Document, &NoProgress)
                        .unwrap(),
                )
            })
        });
        group.finish();
    } else {
        eprintln!("SKIPPED minilm bench: run scripts/setup.sh");
    }

    let tiny = root.join("tests/fixtures/embed/tiny-mistral");
    let files = resolve_model(tiny.to_str().unwrap()).unwrap();
    let options = EncoderOptions {
        dtype: Some(ModelDType::F32),
        ..EncoderOptions::default()
    };
    let encoder = TextEncoder::load(&files, &options).unwrap();
    let mut group = c.benchmark_group("tiny_mistral");
    group.throughput(Throughput::Elements(refs.len() as u64));
    group.bench_function("64_docs", |b| {
        b.iter(|| {
            black_box(
                encoder
                    .embed(&refs, TextKind::Document, &NoProgress)
                    .unwrap(),
            )
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
