//! `freshstack benchmark`'s own hot paths: reading a corpus from Parquet (the published
//! datasets' format) against the same corpus as JSONL, and one topic end to end with BM25 on a
//! reused index (load, retrieve the top 100 of 100 long questions, evaluate).
//!
//! Data: a synthetic corpus of 20,000 documents of ~1,500 bytes (seeded, so every run sees the
//! same bytes) written once under a temporary directory, snappy-compressed like the published
//! files. Run: `cargo bench --bench benchmark`. The reference-evaluator check is
//! `benches/compare/benchmark_vs_reference.py`.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::benchmark::{BenchmarkConfig, BenchmarkRetriever, TopicSpec, run_benchmark};
use freshstack::dataset::{DatasetSpec, Document, load_corpus};
use freshstack::embed::EncoderOptions;
use freshstack::index::Bm25Settings;
use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

const DOCS: usize = 20_000;
const QUESTIONS: usize = 100;

fn words(rng: &mut fastrand::Rng, n: usize) -> String {
    const VOCAB: &[&str] = &[
        "cache",
        "router",
        "render",
        "widget",
        "token",
        "query",
        "index",
        "vector",
        "model",
        "config",
        "deploy",
        "server",
        "client",
        "async",
        "await",
        "stream",
        "buffer",
        "layout",
        "schema",
        "migrate",
        "queue",
        "worker",
        "event",
        "signal",
        "component",
        "template",
        "binding",
        "inject",
        "service",
        "module",
        "import",
        "export",
        "function",
        "return",
    ];
    let mut out = String::with_capacity(n * 8);
    for i in 0..n {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(VOCAB[rng.usize(..VOCAB.len())]);
        out.push_str(&rng.usize(..300).to_string());
    }
    out
}

fn documents() -> Vec<Document> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..DOCS)
        .map(|i| Document {
            id: format!("org/repo/src/file{}.py_{}_{}", i / 10, i, i + 1500),
            title: String::new(),
            text: words(&mut rng, 180),
            metadata: Default::default(),
        })
        .collect()
}

fn write_parquet(docs: &[Document], path: &Path) {
    let schema = Arc::new(
        parse_message_type(
            "message schema { REQUIRED BYTE_ARRAY _id (UTF8); REQUIRED BYTE_ARRAY title (UTF8); \
             REQUIRED BYTE_ARRAY text (UTF8); }",
        )
        .unwrap(),
    );
    let props = Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build(),
    );
    let mut writer = SerializedFileWriter::new(File::create(path).unwrap(), schema, props).unwrap();
    let mut group = writer.next_row_group().unwrap();
    let columns: [Vec<ByteArray>; 3] = [
        docs.iter()
            .map(|d| ByteArray::from(d.id.as_str()))
            .collect(),
        docs.iter()
            .map(|d| ByteArray::from(d.title.as_str()))
            .collect(),
        docs.iter()
            .map(|d| ByteArray::from(d.text.as_str()))
            .collect(),
    ];
    let mut i = 0;
    while let Some(mut column) = group.next_column().unwrap() {
        column
            .typed::<ByteArrayType>()
            .write_batch(&columns[i], None, None)
            .unwrap();
        column.close().unwrap();
        i += 1;
    }
    group.close().unwrap();
    writer.close().unwrap();
}

fn write_queries(path: &Path) {
    let mut rng = fastrand::Rng::with_seed(11);
    let mut out = String::new();
    for q in 0..QUESTIONS {
        let nuggets: Vec<serde_json::Value> = (0..4)
            .map(|n| {
                let rel: Vec<String> = (0..3)
                    .map(|_| {
                        let i = rng.usize(..DOCS);
                        format!("org/repo/src/file{}.py_{}_{}", i / 10, i, i + 1500)
                    })
                    .collect();
                serde_json::json!({"_id": format!("{q}_{n}"), "text": "fact",
                    "relevant_corpus_ids": rel, "non_relevant_corpus_ids": []})
            })
            .collect();
        let row = serde_json::json!({"query_id": q.to_string(), "query_title": words(&mut rng, 8),
            "query_text": words(&mut rng, 350), "nuggets": nuggets});
        out.push_str(&row.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let topic = dir.path().join("synthetic");
    std::fs::create_dir_all(&topic).unwrap();
    let docs = documents();
    let parquet = topic.join("corpus.parquet");
    write_parquet(&docs, &parquet);
    let jsonl = dir.path().join("corpus.jsonl");
    let lines: Vec<String> = docs
        .iter()
        .map(|d| serde_json::to_string(d).unwrap())
        .collect();
    std::fs::write(&jsonl, lines.join("\n") + "\n").unwrap();
    write_queries(&topic.join("queries.jsonl"));

    let mut group = c.benchmark_group("benchmark");
    group.sample_size(10);
    group.throughput(Throughput::Elements(DOCS as u64));
    group.bench_function("load_corpus_parquet_20k", |b| {
        b.iter(|| load_corpus(std::slice::from_ref(&parquet)).unwrap())
    });
    group.bench_function("load_corpus_jsonl_20k", |b| {
        b.iter(|| load_corpus(std::slice::from_ref(&jsonl)).unwrap())
    });
    let spec = DatasetSpec::from(topic.to_str().unwrap());
    let config = BenchmarkConfig {
        topics: TopicSpec::plan(
            std::slice::from_ref(&spec),
            std::slice::from_ref(&spec),
            &[],
        )
        .unwrap(),
        retrievers: vec![BenchmarkRetriever::Bm25],
        fusion: false,
        rerank: None,
        k: 100,
        out_dir: dir.path().join("out"),
        hub_cache: dir.path().to_path_buf(),
        queries_split: "test".into(),
        corpus_split: "train".into(),
        bm25: Bm25Settings::default(),
        encoder: EncoderOptions::default(),
    };
    // Builds the index once; the measured calls reuse it.
    run_benchmark(&config, &NoProgress).unwrap();
    group.throughput(Throughput::Elements(QUESTIONS as u64));
    group.bench_function("topic_bm25_reused_index_100q", |b| {
        b.iter(|| run_benchmark(&config, &NoProgress).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
