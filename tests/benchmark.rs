//! `freshstack benchmark`: a tiny dataset in the exact Hugging Face cache layout (Parquet with
//! nested nuggets, written by pyarrow: scripts/gen_benchmark_fixtures.py) loaded offline,
//! retrieved with BM25 (and all-MiniLM-L6-v2 when present), evaluated, and the bad inputs.

use std::path::{Path, PathBuf};

use freshstack::NoProgress;
use freshstack::benchmark::{
    BenchmarkConfig, BenchmarkRetriever, TopicSpec, load_topic, run_benchmark,
};
use freshstack::dataset::{DatasetSpec, NuggetQrels, Run};
use freshstack::embed::EncoderOptions;
use freshstack::eval::{EvalConfig, Judgments, evaluate};
use freshstack::index::Bm25Settings;

use crate::util::freshstack;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/benchmark")
}

fn hub() -> PathBuf {
    fixtures().join("hf/hub")
}

fn tiny() -> Vec<TopicSpec> {
    TopicSpec::plan(
        &[DatasetSpec::from("freshstack/queries-tiny")],
        &[DatasetSpec::from("freshstack/corpus-tiny")],
        &["tiny".to_string()],
    )
    .unwrap()
}

fn config(out: &Path, retrievers: &[&str]) -> BenchmarkConfig {
    BenchmarkConfig {
        topics: tiny(),
        retrievers: retrievers.iter().map(|r| r.parse().unwrap()).collect(),
        fusion: false,
        rerank: None,
        k: 10,
        out_dir: out.to_path_buf(),
        hub_cache: hub(),
        queries_split: "test".into(),
        corpus_split: "train".into(),
        bm25: Bm25Settings::default(),
        encoder: EncoderOptions::default(),
    }
}

#[test]
fn loads_the_hub_cache_layout_with_nested_nuggets() {
    let data = load_topic(&tiny()[0], &hub(), "test", "train").unwrap();
    // Two query files (snappy), one corpus file (zstd).
    assert_eq!(data.queries_files.len(), 2);
    assert_eq!(data.queries.len(), 3);
    assert_eq!(data.corpus.len(), 12);
    let q = &data.queries[1];
    assert_eq!(q.query_id, "102");
    assert_eq!(q.metadata.tags, vec!["python", "widget", "charts"]);
    assert_eq!(q.nuggets.len(), 2);
    assert_eq!(q.nuggets[1].id, "102_1");
    assert_eq!(
        q.nuggets[1].relevant_corpus_ids,
        vec![
            "acme/lib/CHANGELOG.md_0_90",
            "acme/lib/docs/missing.md_0_10"
        ]
    );
    assert_eq!(
        q.nuggets[1].non_relevant_corpus_ids,
        vec!["acme/lib/README.md_0_120"]
    );
    assert_eq!(
        q.query_text(),
        format!("{} {}", q.query_title, q.query_text)
    );
    let doc = &data.corpus[2];
    assert_eq!(doc.id, "acme/lib/src/cache.py_0_200");
    assert_eq!(doc.metadata.end_byte, Some(200));
    assert_eq!(doc.metadata.commit_id.as_deref(), Some("abc"));
    // One judged id is not in the corpus: counted, not fatal.
    assert_eq!(data.check.judged_docs, 10);
    assert_eq!(data.check.unknown_docs, 1);
    assert_eq!(data.check.examples, vec!["acme/lib/docs/missing.md_0_10"]);
}

#[test]
fn bm25_end_to_end_evaluates_and_reuses_the_index() {
    let out = tempfile::tempdir().unwrap();
    let results = run_benchmark(&config(out.path(), &["bm25"]), &NoProgress).unwrap();
    assert_eq!(results.retrievers, vec!["bm25"]);
    assert!(!results.topics[0].index_reused);
    // Hand-checked: every nugget has a supporting document in BM25's top 20; Recall@50 is
    // (1 + 3/4 + 1) / 3, question 102's fourth relevant document being absent from the corpus.
    assert_eq!(results.value("tiny", "bm25", "coverage@20"), Some(1.0));
    assert_eq!(results.value("tiny", "bm25", "recall@50"), Some(0.9167));
    let alpha = results.value("tiny", "bm25", "alpha_ndcg@10").unwrap();
    assert!(alpha > 0.5 && alpha <= 1.0, "{alpha}");
    // The run file re-evaluates to the same numbers.
    let run = Run::read_trec(out.path().join(&results.results[0].run_file)).unwrap();
    let data = load_topic(&tiny()[0], &hub(), "test", "train").unwrap();
    let judgments = Judgments::new(&NuggetQrels::from_queries(&data.queries));
    let again = evaluate(&judgments, &run, &EvalConfig::paper());
    let ours: Vec<f64> = results.results[0].metrics.iter().map(|m| m.1).collect();
    assert_eq!(again.means, ours);

    freshstack::benchmark::write_results(&results, None, out.path()).unwrap();
    let json = std::fs::read(out.path().join("results.json")).unwrap();
    let second = run_benchmark(&config(out.path(), &["bm25"]), &NoProgress).unwrap();
    assert!(second.topics[0].index_reused);
    freshstack::benchmark::write_results(&second, None, out.path()).unwrap();
    // Reuse changes nothing in the results but the flag.
    let json2 = String::from_utf8(std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(
        String::from_utf8(json).unwrap(),
        json2.replace("\"index_reused\": true", "\"index_reused\": false")
    );
}

#[test]
fn local_jsonl_export_scores_like_the_parquet_files() {
    let data = load_topic(&tiny()[0], &hub(), "test", "train").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("tiny");
    std::fs::create_dir_all(&local).unwrap();
    let lines = |rows: Vec<String>| rows.join("\n") + "\n";
    std::fs::write(
        local.join("queries.jsonl"),
        lines(
            data.queries
                .iter()
                .map(|q| serde_json::to_string(q).unwrap())
                .collect(),
        ),
    )
    .unwrap();
    std::fs::write(
        local.join("corpus.jsonl"),
        lines(
            data.corpus
                .iter()
                .map(|d| serde_json::to_string(d).unwrap())
                .collect(),
        ),
    )
    .unwrap();
    let spec = DatasetSpec::from(local.to_str().unwrap());
    let mut cfg = config(&dir.path().join("out"), &["bm25"]);
    cfg.topics = TopicSpec::plan(
        std::slice::from_ref(&spec),
        std::slice::from_ref(&spec),
        &[],
    )
    .unwrap();
    assert_eq!(cfg.topics[0].name, "tiny");
    let from_jsonl = run_benchmark(&cfg, &NoProgress).unwrap();
    let from_hub =
        run_benchmark(&config(&dir.path().join("out2"), &["bm25"]), &NoProgress).unwrap();
    assert_eq!(from_jsonl.results[0].metrics, from_hub.results[0].metrics);
}

#[test]
fn cli_output_does_not_depend_on_threads() {
    let dir = tempfile::tempdir().unwrap();
    let hub = hub();
    let mut outputs = Vec::new();
    for threads in ["1", "2"] {
        let out = dir.path().join(threads);
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_freshstack"))
            .args(["benchmark", "--queries", "freshstack/queries-tiny:tiny"])
            .args(["--corpus", "freshstack/corpus-tiny", "-k", "10", "--paper"])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/paper-results.toml"))
            .arg("--hf-cache")
            .arg(&hub)
            .arg("--out")
            .arg(&out)
            .env("RAYON_NUM_THREADS", threads)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(
            stderr.contains("1 of 10 judged documents are not in the corpus"),
            "{stderr}"
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("| bm25 | "), "{stdout}");
        let html = std::fs::read_to_string(out.join("report.html")).unwrap();
        assert!(
            html.contains("<svg") && html.contains("bm25"),
            "report.html"
        );
        outputs.push((
            std::fs::read(out.join("results.json")).unwrap(),
            std::fs::read(out.join("results.md")).unwrap(),
            std::fs::read(out.join("runs/tiny/bm25.trec")).unwrap(),
            html.into_bytes(),
        ));
    }
    assert!(outputs[0] == outputs[1]);
}

#[test]
fn missing_cache_names_the_paths_looked_for() {
    let empty = tempfile::tempdir().unwrap();
    let out = freshstack(&[
        "benchmark",
        "--queries",
        "freshstack/queries-oct-2024:langchain",
        "--corpus",
        "freshstack/corpus-oct-2024",
        "--hf-cache",
        empty.path().to_str().unwrap(),
        "--out",
        empty.path().join("out").to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("datasets--freshstack--queries-oct-2024")
            && err.contains("langchain/test-*.parquet")
            && err.lines().count() == 1,
        "{err}"
    );
}

/// Issue 34, item 18: `benchmark --topic ..` (or `.`) passed the name check and wrote at OUT's
/// root (`OUT/topics/..`), reading `DIR/..` for a local `--queries DIR`. A topic's name is one
/// plain path component: anything else is one line naming the flag, before anything is
/// written.
#[test]
fn benchmark_topic_dot_dot_is_refused_before_writing_at_out_root() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("data");
    std::fs::create_dir_all(local.join("tiny")).unwrap();
    let local = local.to_str().unwrap();
    let hub = hub();
    let out = dir.path().join("out");
    // (--queries, --corpus, --topic, the flag named, the name refused)
    for (queries, corpus, topic, flag, bad) in [
        (local, local, Some(".."), "--topic", ".."),
        (local, local, Some("."), "--topic", "."),
        (local, local, Some("tiny,../tiny"), "--topic", "../tiny"),
        (
            "freshstack/queries-tiny",
            "freshstack/corpus-tiny",
            Some(".."),
            "--topic",
            "..",
        ),
        (
            "freshstack/queries-tiny:..",
            "freshstack/corpus-tiny",
            None,
            "--queries",
            "..",
        ),
    ] {
        let mut args = vec!["benchmark", "--queries", queries, "--corpus", corpus];
        if let Some(topic) = topic {
            args.extend(["--topic", topic]);
        }
        args.extend(["--hf-cache", hub.to_str().unwrap()]);
        args.extend(["--out", out.to_str().unwrap()]);
        let output = freshstack(&args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: invalid {flag}: {bad:?}")),
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
        assert!(!dir.path().join("topics").exists() && !dir.path().join("runs").exists());
    }
}

#[test]
fn missing_config_and_split_are_clear_errors() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), &["bm25"]);
    cfg.topics = TopicSpec::plan(
        &[DatasetSpec::from("freshstack/queries-tiny")],
        &[DatasetSpec::from("freshstack/corpus-tiny")],
        &["godot".into()],
    )
    .unwrap();
    let err = run_benchmark(&cfg, &NoProgress).unwrap_err().to_string();
    assert!(
        err.contains("godot/test-*.parquet") && err.contains("cached configs: tiny"),
        "{err}"
    );
    let mut cfg = config(out.path(), &["bm25"]);
    cfg.queries_split = "validation".into();
    let err = run_benchmark(&cfg, &NoProgress).unwrap_err().to_string();
    assert!(err.contains("split \"validation\""), "{err}");
}

#[test]
fn parquet_without_a_column_names_file_and_column() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), &["bm25"]);
    let queries = cfg.topics[0].queries.clone();
    let bad = fixtures().join("corpus-no-text.parquet");
    cfg.topics =
        TopicSpec::plan(&[queries], &[DatasetSpec::from(bad.to_str().unwrap())], &[]).unwrap();
    let err = run_benchmark(&cfg, &NoProgress).unwrap_err().to_string();
    assert!(
        err.contains("corpus-no-text.parquet") && err.contains("no column \"text\""),
        "{err}"
    );
}

#[test]
fn a_reranker_adds_reranked_rows_over_the_same_documents() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), &["bm25"]);
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rerank/tiny-bert");
    cfg.rerank = Some(model.to_string_lossy().into_owned());
    let results = run_benchmark(&cfg, &NoProgress).unwrap();
    assert_eq!(results.retrievers, ["bm25", "bm25+rerank"]);
    let read = |name: &str| {
        let mut rows: Vec<(String, String)> =
            std::fs::read_to_string(out.path().join(format!("runs/tiny/{name}.trec")))
                .unwrap()
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    (f[0].to_string(), f[2].to_string())
                })
                .collect();
        rows.sort();
        rows
    };
    // k = 10 <= the rerank depth: the same documents per question, reordered.
    assert_eq!(read("bm25"), read("bm25+rerank"));
    assert_eq!(results.results.len(), 2);
}

#[test]
fn missing_reranker_and_bad_retrievers_are_refused() {
    let out = tempfile::tempdir().unwrap();
    let mut cfg = config(out.path(), &["bm25"]);
    cfg.rerank = Some("/no/such/reranker".into());
    let err = run_benchmark(&cfg, &NoProgress).unwrap_err().to_string();
    assert!(err.contains("reranker"), "{err}");
    for bad in ["splade", "dense:", "dense"] {
        let err = bad.parse::<BenchmarkRetriever>().unwrap_err().to_string();
        assert_eq!(
            err,
            format!("invalid retriever: {bad:?}: expected bm25 or dense:MODEL")
        );
    }
    let mut cfg = config(out.path(), &["bm25"]);
    cfg.fusion = true;
    assert!(run_benchmark(&cfg, &NoProgress).is_err());
}

#[test]
fn two_widths_of_one_model_are_two_rows_and_two_indexes() {
    let model_dir = tempfile::tempdir().unwrap();
    let model = model_dir.path().join("tiny-stella");
    crate::embed::tiny_stella(&model);
    let out = tempfile::tempdir().unwrap();
    let cut = format!("dense:{}#8", model.display());
    let full = format!("dense:full={}", model.display());
    let cfg = config(out.path(), &[&cut, &full]);
    let results = run_benchmark(&cfg, &NoProgress).unwrap();
    assert_eq!(
        results.retrievers,
        vec!["dense:tiny-stella-8", "dense:full"]
    );
    // Each width has its own cached index, keyed by its width.
    let topic = out.path().join("topics").join("tiny");
    let manifest = |name: &str| {
        std::fs::read_to_string(topic.join(name).join("manifest.json"))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    assert!(manifest("dense-tiny-stella-8").contains("\"dimensions\": 8"));
    assert!(!manifest("dense-full").contains("dimensions"));
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn minilm_dense_and_fusion_end_to_end() {
    let model = crate::util::minilm_dir();
    let out = tempfile::tempdir().unwrap();
    let dense = format!("dense:{}", model.display());
    let mut cfg = config(out.path(), &["bm25", &dense]);
    cfg.fusion = true;
    let results = run_benchmark(&cfg, &NoProgress).unwrap();
    assert_eq!(
        results.retrievers,
        vec!["bm25", "dense:all-MiniLM-L6-v2", "fusion"]
    );
    for r in &results.results {
        assert!(out.path().join(&r.run_file).is_file());
        assert_eq!(r.notes.missing_queries, 0, "{}", r.retriever);
        for (measure, value) in &r.metrics {
            assert!(
                (0.0..=1.0).contains(value),
                "{} {measure} {value}",
                r.retriever
            );
        }
    }
    // With 12 documents and k = 10, every retriever covers most nuggets.
    let dense_cov = results
        .value("tiny", "dense:all-MiniLM-L6-v2", "coverage@20")
        .unwrap();
    assert!(dense_cov >= 0.5, "{dense_cov}");
    // The vectors are cached: a second call reuses the index.
    let again = run_benchmark(&cfg, &NoProgress).unwrap();
    assert!(again.topics[0].index_reused);
    assert_eq!(
        again
            .results
            .iter()
            .map(|r| r.metrics.clone())
            .collect::<Vec<_>>(),
        results
            .results
            .iter()
            .map(|r| r.metrics.clone())
            .collect::<Vec<_>>()
    );
}
