//! Encoder throughput: all-MiniLM-L6-v2 (run scripts/setup.sh first; skipped without it) on 64
//! documents of ~200 tokens, and the tiny Mistral fixture's batched forward pass.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::dataset::{Encoder, TextKind};
use freshstack::embed::{EncoderOptions, ModelDType, TextEncoder, resolve_model};

/// The next state of a 64-bit LCG (Knuth's MMIX constants): deterministic inputs for every run.
fn lcg_next(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state
}

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
                .map(|_| words[(lcg_next(&mut state) >> 33) as usize % words.len()])
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

/// `len` seeded values, uniform in [-0.5, 0.5).
fn uniform(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed;
    (0..len)
        .map(|_| ((lcg_next(&mut state) >> 40) as f32 / (1u64 << 24) as f32) - 0.5)
        .collect()
}

/// One E5-Mistral-7B projection (hidden 4096 -> 4096) over 256 tokens in bf16: candle's CPU
/// matmul against the packed AVX512-BF16 kernel the decoders use (skipped without the CPU
/// feature). Elements = multiply-adds, so elements/s x 2 = FLOP/s.
fn bench_bf16_linear(c: &mut Criterion) {
    use candle_core::{DType, Device, Module, Tensor};
    use freshstack::kernels::bf16::PackedBf16Linear;

    let (m, k, n) = (256usize, 4096usize, 4096usize);
    // Uniform in [-0.5, 0.5), rounded to bf16.
    let values = |dims: &[usize], seed: u64| -> Tensor {
        Tensor::from_vec(uniform(dims.iter().product(), seed), dims, &Device::Cpu)
            .and_then(|t| t.to_dtype(DType::BF16))
            .unwrap()
    };
    let x = values(&[1, m, k], 1);
    let weight = values(&[n, k], 2);
    let linear = candle_nn::Linear::new(weight, None);
    let mut group = c.benchmark_group("bf16_linear_256x4096x4096");
    group.sample_size(10);
    group.throughput(Throughput::Elements((m * k * n) as u64));
    group.bench_function("candle_matmul", |b| {
        b.iter(|| black_box(linear.forward(&x).unwrap()))
    });
    if PackedBf16Linear::supported() {
        let packed = PackedBf16Linear::new(&linear).unwrap();
        group.bench_function("packed_avx512_bf16", |b| {
            b.iter(|| black_box(packed.forward(&x).unwrap()))
        });
    } else {
        eprintln!("bf16_linear: this CPU has no AVX512-BF16; only candle's matmul is measured");
    }
    group.finish();
}

/// One all-MiniLM-L6-v2 feed-forward projection (384 -> 1536) over 4,096 tokens in f32:
/// candle's matmul (the `gemm` crate's AVX-512 kernel, as the BERT layer calls it) against the
/// AMX bf16x3 kernel (skipped where AMX is unavailable). Elements = multiply-adds.
fn bench_f32_projection(c: &mut Criterion) {
    use candle_core::{Device, Tensor};
    use freshstack::kernels::amx::{self, AmxWeight};

    let (m, k, n) = (4096usize, 384usize, 1536usize);
    let (x, w) = (uniform(m * k, 1), uniform(n * k, 2));
    let xt = Tensor::from_vec(x.clone(), (m, k), &Device::Cpu).unwrap();
    let wt = Tensor::from_vec(w.clone(), (n, k), &Device::Cpu)
        .unwrap()
        .t()
        .unwrap();
    let mut group = c.benchmark_group("f32_projection_4096x384x1536");
    group.sample_size(10);
    group.throughput(Throughput::Elements((m * k * n) as u64));
    group.bench_function("candle_matmul", |b| {
        b.iter(|| black_box(xt.matmul(&wt).unwrap()))
    });
    if amx::available() {
        let packed = AmxWeight::new(&w, n, k);
        let mut dst = vec![0f32; m * n];
        group.bench_function("amx_bf16x3", |b| {
            b.iter(|| {
                packed.multiply_add(&mut dst, &x, m);
                black_box(dst[0])
            })
        });
    } else {
        eprintln!("f32_projection: no AMX here; only candle's matmul is measured");
    }
    group.finish();
}

criterion_group!(benches, bench, bench_bf16_linear, bench_f32_projection);
criterion_main!(benches);
