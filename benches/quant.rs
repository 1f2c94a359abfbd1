//! The native engine's matrix x vector kernels on one thread, per GGUF storage type, at the
//! shapes of Qwen2.5-Coder-0.5B (hidden 896, feed-forward 4864, vocabulary ~152k) and
//! SmolLM2-135M (576 / 1536). Throughput is weight bytes read per second: one generated token
//! reads every weight once, so this is the ceiling of generation speed. Also the row
//! dequantization that prompt products and quantized encoders run.

use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::kernels::quant::{Isa, Q8Activation, QMatrix, QType, matvec, matvec_many};
use memmap2::MmapMut;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// A `[rows, cols]` matrix of `dtype`: a quantized `[base_rows, cols]` block repeated (the
/// kernels' speed does not depend on the values), in anonymous memory.
fn matrix(dtype: GgmlDType, base_rows: usize, repeats: usize, cols: usize) -> QMatrix {
    let w = Tensor::from_vec(values(base_rows * cols, 7), (base_rows, cols), &Device::Cpu)
        .expect("tensor");
    let bytes = QTensor::quantize(&w, dtype)
        .expect("quantize")
        .data()
        .expect("bytes")
        .into_owned();
    let mut map = MmapMut::map_anon(bytes.len() * repeats).expect("anonymous map");
    for chunk in map.chunks_exact_mut(bytes.len()) {
        chunk.copy_from_slice(&bytes);
    }
    let map = Arc::new(map.make_read_only().expect("read-only map"));
    let qtype = QType::of_ggml(dtype).expect("supported type");
    QMatrix::new(map, 0, qtype, base_rows * repeats, cols).expect("matrix")
}

fn kernels(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let isa = Isa::detect();
    let shapes = [
        ("q5_0_ffn_up_4864x896", GgmlDType::Q5_0, 4864, 1, 896),
        ("q8_0_output_151k_x896", GgmlDType::Q8_0, 4864, 31, 896),
        ("q8_0_4864x896", GgmlDType::Q8_0, 4864, 1, 896),
        ("q6k_ffn_down_896x4864", GgmlDType::Q6K, 896, 1, 4864),
        ("q4k_ffn_down_896x4864", GgmlDType::Q4K, 896, 1, 4864),
        ("q4_1_ffn_up_1536x576", GgmlDType::Q4_1, 1536, 1, 576),
        ("q4_0_4864x896", GgmlDType::Q4_0, 4864, 1, 896),
    ];
    let mut group = c.benchmark_group("native_matvec_1_thread");
    group.sample_size(20);
    for (name, dtype, base_rows, repeats, cols) in shapes {
        let m = matrix(dtype, base_rows, repeats, cols);
        let x = values(cols, 3);
        let act = Q8Activation::of(&x);
        let mut out = vec![0f32; m.rows];
        group.throughput(Throughput::Bytes((m.rows * m.row_bytes()) as u64));
        group.bench_function(format!("{name}_{isa:?}"), |b| {
            b.iter(|| pool.install(|| matvec(isa, &[&m], &x, &act, &mut [&mut out[..]])))
        });
    }
    group.finish();
}

/// One token for one sequence against one token for each of four (batched decoding), at the
/// feed-forward shapes of Qwen2.5-Coder-1.5B (hidden 1536, feed-forward 8960), whose Q4_K_M
/// file stores them as Q4_K and Q6_K. Throughput is tokens: the four-input run's element
/// rate over the one-input run's is what batching gains in these kernels.
fn batched(c: &mut Criterion) {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    let isa = Isa::detect();
    let shapes = [
        ("q4k_ffn_up_8960x1536", GgmlDType::Q4K, 8960, 1536),
        ("q6k_ffn_down_1536x8960", GgmlDType::Q6K, 1536, 8960),
    ];
    let mut group = c.benchmark_group("native_matvec_many_1_thread");
    group.sample_size(20);
    for (name, dtype, rows, cols) in shapes {
        let m = matrix(dtype, rows, 1, cols);
        for n in [1, 4] {
            let xs = values(n * cols, 5);
            let acts: Vec<Q8Activation> = xs.chunks_exact(cols).map(Q8Activation::of).collect();
            let mut out = vec![0f32; n * rows];
            group.throughput(Throughput::Elements(n as u64));
            group.bench_function(format!("{name}_x{n}_{isa:?}"), |b| {
                b.iter(|| pool.install(|| matvec_many(isa, &[&m], &xs, &acts, &mut [&mut out[..]])))
            });
        }
    }
    group.finish();
}

/// Dequantizing rows to f32, per storage type, on one thread: a prompt's products dequantize
/// every weight once per call, and the quantized encoders once per batch. 64 rows of 4,864
/// values (the 0.5B model's feed-forward width), in cache; throughput in values per second.
fn dequantize(c: &mut Criterion) {
    let (rows, cols) = (64, 4864);
    let mut group = c.benchmark_group("dequantize");
    group.throughput(Throughput::Elements((rows * cols) as u64));
    for (name, dtype) in [
        ("q4_0", GgmlDType::Q4_0),
        ("q4_1", GgmlDType::Q4_1),
        ("q5_0", GgmlDType::Q5_0),
        ("q5_1", GgmlDType::Q5_1),
        ("q8_0", GgmlDType::Q8_0),
        ("q4k", GgmlDType::Q4K),
        ("q6k", GgmlDType::Q6K),
        ("f16", GgmlDType::F16),
    ] {
        let m = matrix(dtype, rows, 1, cols);
        let mut out = vec![0f32; cols];
        group.bench_function(name, |b| {
            b.iter(|| {
                for r in 0..rows {
                    m.dequantize_row(r, &mut out);
                }
                out[0]
            })
        });
    }
    group.finish();
}

criterion_group!(benches, kernels, batched, dequantize);
criterion_main!(benches);
