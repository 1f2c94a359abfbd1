//! Chunking throughput (MB/s) on a real tree, beside plain tokenization of the same bytes: the
//! floor the issue names.
//!
//! Tree: `$FRESHSTACK_BENCH_TREE` if set, else the PHP manual sources from
//! `../shared/corpora/php-doc-en.tar.gz` (unpacked once under `target/bench-data/`), else this
//! crate's own `src/`. Run: `cargo bench --bench chunk`.

use std::path::{Path, PathBuf};
use std::process::Command;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::source::{Chunker, Language, TokenCounter, TokenizerKind, TokenizerSpec};
use rayon::prelude::*;

fn bench_tree() -> PathBuf {
    if let Ok(dir) = std::env::var("FRESHSTACK_BENCH_TREE") {
        return PathBuf::from(dir);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let archive = root.join("../shared/corpora/php-doc-en.tar.gz");
    let data = root.join("target/bench-data");
    let tree = data.join("php-doc-en");
    if !tree.is_dir() && archive.is_file() {
        std::fs::create_dir_all(&data).unwrap();
        let status = Command::new("tar")
            .arg("xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&data)
            .status()
            .unwrap();
        assert!(status.success(), "cannot unpack {}", archive.display());
    }
    if tree.is_dir() {
        tree
    } else {
        eprintln!("NOTE: ../shared/corpora missing; benchmarking this crate's src/ instead");
        root.join("src")
    }
}

fn load(tree: &Path) -> Vec<(Language, String)> {
    let mut files: Vec<PathBuf> = ignore::WalkBuilder::new(tree)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .collect();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            let name = p.file_name()?.to_string_lossy().into_owned();
            Some((Language::from_file_name(&name), text))
        })
        .collect()
}

fn chunking(c: &mut Criterion) {
    let tree = bench_tree();
    let files = load(&tree);
    let bytes: usize = files.iter().map(|(_, t)| t.len()).sum();
    eprintln!("{}: {} files, {} bytes", tree.display(), files.len(), bytes);
    let chunker = Chunker::new(TokenizerKind::Cl100kBase, 2048).unwrap();
    let bpe = TokenizerKind::Cl100kBase.tokenizer();

    let mut group = c.benchmark_group("tree");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes as u64));
    group.bench_function("chunk_2048_one_thread", |b| {
        b.iter(|| {
            files
                .iter()
                .map(|(lang, text)| chunker.chunk(text, *lang).unwrap().len())
                .sum::<usize>()
        })
    });
    group.bench_function("chunk_2048_all_threads", |b| {
        b.iter(|| {
            files
                .par_iter()
                .map(|(lang, text)| chunker.chunk(text, *lang).unwrap().len())
                .sum::<usize>()
        })
    });
    // A Hugging Face tokenizer (the quickstart's: MiniLM's, 256 tokens), when fetched.
    let minilm =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2/tokenizer.json");
    if minilm.is_file() {
        let counter = TokenCounter::load(&TokenizerSpec::HuggingFace(minilm)).unwrap();
        let chunker = Chunker::new(counter, 256).unwrap();
        group.bench_function("chunk_256_minilm_one_thread", |b| {
            b.iter(|| {
                files
                    .iter()
                    .map(|(lang, text)| chunker.chunk(text, *lang).unwrap().len())
                    .sum::<usize>()
            })
        });
    } else {
        eprintln!(
            "SKIPPED chunk_256_minilm_one_thread: {} is absent",
            minilm.display()
        );
    }
    // The floor: one plain tokenizer pass (bpe-openai, no memo) over the same bytes.
    group.bench_function("tokenize_one_thread", |b| {
        b.iter(|| {
            files
                .iter()
                .map(|(_, text)| bpe.count(text.as_str()))
                .sum::<usize>()
        })
    });
    group.finish();
}

criterion_group!(benches, chunking);
criterion_main!(benches);
