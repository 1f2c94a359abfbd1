//! BM25: index build time and queries/s with long queries (350-500 words of manual text with
//! code, like FreshStack questions), on the PHP manual corpus.
//!
//! Corpus: `$FRESHSTACK_BENCH_CORPUS` (a corpus JSONL) if set, else the PHP manual from
//! `../shared/corpora/php-doc-en.tar.gz` chunked by our corpus stage (once, under
//! `target/bench-data/`). Run: `cargo bench --bench bm25`. The Python peer comparison is
//! `benches/compare/bm25_vs_bm25s.py`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::index::{Bm25Settings, IndexConfig, build_index, read_corpus};
use freshstack::search::Engine;
use freshstack::{CorpusConfig, NoProgress, RepoSpec, build_corpus};

fn bench_corpus() -> PathBuf {
    if let Ok(path) = std::env::var("FRESHSTACK_BENCH_CORPUS") {
        return PathBuf::from(path);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("target/bench-data");
    let corpus = data.join("php-doc-en.corpus.jsonl");
    if corpus.is_file() {
        return corpus;
    }
    let tree = data.join("php-doc-en");
    if !tree.is_dir() {
        std::fs::create_dir_all(&data).unwrap();
        let archive = root.join("../shared/corpora/php-doc-en.tar.gz");
        let status = Command::new("tar")
            .arg("xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&data)
            .status()
            .unwrap();
        assert!(status.success(), "cannot unpack {}", archive.display());
    }
    let repo = RepoSpec::from_str(&format!("php/doc-en={}", tree.display())).unwrap();
    build_corpus(&CorpusConfig::new(vec![repo]), &corpus, &NoProgress).unwrap();
    corpus
}

/// Seeded long queries: windows of 350-500 words from documents that have that many.
fn long_queries(texts: &[String], n: usize) -> Vec<String> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound.max(1) as u64) as usize
    };
    let long: Vec<Vec<&str>> = texts
        .iter()
        .map(|t| t.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() >= 350)
        .collect();
    assert!(!long.is_empty(), "no document has 350 words");
    (0..n)
        .map(|_| {
            let words = &long[next(long.len())];
            let len = 350 + next(words.len().min(500) - 350 + 1);
            let start = next(words.len() - len + 1);
            words[start..start + len].join(" ")
        })
        .collect()
}

fn bm25(c: &mut Criterion) {
    let corpus = bench_corpus();
    let docs = read_corpus(&corpus).unwrap();
    let texts: Vec<String> = docs.into_iter().map(|d| d.text).collect();
    let bytes: usize = texts.iter().map(String::len).sum();
    eprintln!(
        "{}: {} documents, {bytes} bytes",
        corpus.display(),
        texts.len()
    );
    let work = tempfile::tempdir().unwrap();
    let index = work.path().join("index");
    let config = IndexConfig {
        corpus: corpus.clone(),
        bm25: Some(Bm25Settings::default()),
        vectors: vec![],
        hnsw: None,
    };

    let mut group = c.benchmark_group("bm25");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("build", |b| {
        b.iter(|| build_index(&config, &index, &NoProgress).unwrap())
    });
    group.finish();

    let engine = Engine::open(&index).unwrap();
    let queries = long_queries(&texts, 100);
    let mut group = c.benchmark_group("bm25");
    group.throughput(Throughput::Elements(queries.len() as u64));
    group.bench_function("long_queries_top100_one_thread", |b| {
        b.iter(|| {
            queries
                .iter()
                .map(|q| engine.search_bm25(q, 100).unwrap().len())
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, bm25);
criterion_main!(benches);
