//! The GPU exact search (feature `cuda`): the kernels compile with NVRTC (no GPU needed), and
//! on a machine with a CUDA device the GPU results equal the CPU flat search's exactly. Without
//! a device the search tests print "SKIPPED ..." and pass.

use std::path::Path;

use freshstack::NoProgress;
use freshstack::dataset::{VectorDtype, VectorMatrix, write_npy};
use freshstack::index::{
    Bm25Settings, DocIds, GpuFlat, IndexConfig, VectorSource, build_index, compile_kernels,
    flat_search,
};
use freshstack::search::{Ann, Engine, SearchOptions};

/// Deterministic values in [-0.5, 0.5).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.max(1);
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        })
        .collect()
}

/// True (after a loud SKIPPED line) when `e` says there is no usable CUDA device, unless
/// `FRESHSTACK_REQUIRE_GPU=1` (scripts/gpu-check.sh sets it), which makes that a failure.
fn no_device(e: &freshstack::Error, test: &str) -> bool {
    let no_device = e.to_string().contains("cuda: open device");
    if no_device && std::env::var("FRESHSTACK_REQUIRE_GPU").as_deref() != Ok("1") {
        eprintln!("SKIPPED {test}: no CUDA device ({e})");
        return true;
    }
    false
}

/// `None` when there is no usable CUDA device.
fn gpu(matrix: &VectorMatrix, test: &str) -> Option<GpuFlat> {
    match GpuFlat::new(matrix, 0) {
        Ok(gpu) => Some(gpu),
        Err(e) if no_device(&e, test) => None,
        Err(e) => panic!("{test}: {e}"),
    }
}

#[test]
fn gpu_kernels_compile_with_nvrtc() {
    for arch in [None, Some("compute_75"), Some("compute_90")] {
        let ptx = compile_kernels(arch).unwrap_or_else(|e| panic!("{arch:?}: {e}"));
        for entry in [".entry fs_scores", ".entry fs_select"] {
            assert!(ptx.contains(entry), "{arch:?}: no {entry} in the PTX");
        }
        if let Some(arch) = arch {
            let target = arch.replace("compute_", "sm_");
            assert!(ptx.contains(&format!(".target {target}")), "{arch}");
        }
    }
}

/// A matrix with exact duplicates (ties broken by id), near-duplicates (scores a few ulps
/// apart, where GPU and CPU summation orders disagree) and a block of identical rows larger
/// than the candidate buffer (the CPU fallback).
fn tricky_matrix(dir: &Path, rows: usize, dim: usize) -> (VectorMatrix, DocIds, Vec<Vec<f32>>) {
    let mut data = values(rows * dim, 11);
    for row in 0..rows {
        let src = match row % 7 {
            0 if row >= 7 => Some(row - 7),
            3 => Some(row - 3),
            _ => None,
        };
        if let Some(src) = src {
            for j in 0..dim {
                data[row * dim + j] = data[src * dim + j];
            }
            if row % 2 == 1 {
                data[row * dim + row % dim] += 1e-3;
            }
        }
    }
    // Rows 0..1500 are all one vector: a tie wider than any candidate buffer for small k.
    for row in 1..1500.min(rows) {
        for j in 0..dim {
            data[row * dim + j] = data[j];
        }
    }
    let path = dir.join(format!("m{rows}x{dim}.npy"));
    write_npy(&path, rows, dim, VectorDtype::F16, |i, out| {
        out.copy_from_slice(&data[i * dim..(i + 1) * dim])
    })
    .unwrap();
    let matrix = VectorMatrix::open(&path).unwrap();
    // Ids in an order unrelated to rows, so the tie-break is by id, not by row.
    let ids: Vec<String> = (0..rows)
        .map(|i| format!("d{:08}", (i * 7919) % rows))
        .collect();
    let ids = DocIds::new(ids).unwrap();
    let mut queries: Vec<Vec<f32>> = (0..37).map(|q| values(dim, 100 + q as u64)).collect();
    // Queries equal to stored rows (as f32 of the f16), one of the 1500-row tie among them.
    queries.push(matrix.row(0));
    queries.push(matrix.row(rows - 1));
    queries.push(vec![0.0; dim]);
    (matrix, ids, queries)
}

#[test]
fn gpu_exact_search_equals_cpu_flat_search() {
    let dir = tempfile::tempdir().unwrap();
    for (rows, dim) in [(5000, 300), (2100, 1027), (40, 64)] {
        let (matrix, ids, queries) = tricky_matrix(dir.path(), rows, dim);
        let Some(gpu) = gpu(&matrix, "gpu_exact_search_equals_cpu_flat_search") else {
            return;
        };
        let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
        for k in [1, 10, 100, rows, rows + 5] {
            let got = gpu.search(&matrix, &ids, &refs, k).unwrap();
            assert_eq!(got.len(), queries.len());
            for (q, (query, got)) in queries.iter().zip(&got).enumerate() {
                let want = flat_search(&matrix, &ids, query, k);
                let bits = |v: &[(u32, f32)]| -> Vec<(u32, u32)> {
                    v.iter().map(|&(r, s)| (r, s.to_bits())).collect()
                };
                assert_eq!(bits(got), bits(&want), "{rows}x{dim} k={k} query {q}");
            }
        }
    }
}

#[test]
fn gpu_engine_search_batch_equals_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let (n, dim) = (700, 48);
    let ids: Vec<String> = (0..n).map(|i| format!("a/b/f{i:04}.md_0_1")).collect();
    let corpus = dir.path().join("corpus.jsonl");
    let lines: Vec<String> = ids
        .iter()
        .map(|id| serde_json::json!({"_id": id, "title": "", "text": "some text"}).to_string())
        .collect();
    std::fs::write(&corpus, lines.join("\n") + "\n").unwrap();
    let data = values(n * dim, 5);
    let npy = dir.path().join("vectors.npy");
    // The index takes unit-length rows (its scores are cosines).
    write_npy(&npy, n, dim, VectorDtype::F16, |i, row| {
        row.copy_from_slice(&data[i * dim..(i + 1) * dim]);
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    })
    .unwrap();
    std::fs::write(npy.with_extension("ids"), ids.join("\n") + "\n").unwrap();
    let index = dir.path().join("index");
    let config = IndexConfig {
        corpus,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![VectorSource {
            name: "rand".into(),
            npy,
        }],
        hnsw: None,
    };
    build_index(&config, &index, &NoProgress).unwrap();
    let options = SearchOptions {
        retriever: "dense:rand".parse().unwrap(),
        k: 25,
        ann: Ann::Exact,
        ..SearchOptions::default()
    };
    let queries: Vec<Vec<f32>> = (0..50).map(|q| values(dim, 900 + q)).collect();
    let refs: Vec<&[f32]> = queries.iter().map(Vec::as_slice).collect();
    let cpu = Engine::open(&index).unwrap();
    let want = cpu.search_vectors("rand", &refs, &options).unwrap();
    let mut engine = Engine::open(&index).unwrap();
    if let Err(e) = engine.use_gpu_exact(0) {
        if no_device(&e, "gpu_engine_search_batch_equals_cpu") {
            return;
        }
        panic!("{e}");
    }
    let got = engine.search_vectors("rand", &refs, &options).unwrap();
    assert_eq!(got, want);
}
