//! The index and search stages: BM25 (scores, ties, analyzer), dense vectors (exact, HNSW),
//! the CLI (index, search, retrieve), and bad input.

use std::path::{Path, PathBuf};

use freshstack::NoProgress;
use freshstack::dataset::{VectorDtype, write_npy};
use freshstack::index::{Bm25Settings, HnswSettings, IndexConfig, VectorSource, build_index};
use freshstack::search::{Ann, Engine, RetrieverSpec, SearchOptions};

use crate::util::{files_under, freshstack, write};

fn doc(id: &str, text: &str) -> String {
    serde_json::json!({"_id": id, "title": "", "text": text, "metadata": {"repo": "a/b"}})
        .to_string()
}

fn corpus(dir: &Path, docs: &[(&str, &str)]) -> PathBuf {
    let lines: Vec<String> = docs.iter().map(|(id, text)| doc(id, text)).collect();
    write(dir, "corpus.jsonl", lines.join("\n") + "\n")
}

const DOCS: &[(&str, &str)] = &[
    (
        "a/b/app.php_0_10",
        "Route::get('/users', [UserController::class, 'index']);",
    ),
    (
        "a/b/db.md_0_10",
        "Configure the database connection in config/database.php",
    ),
    (
        "a/b/http.py_0_10",
        "class HTTPServer: def handle_request(self): return getUserName()",
    ),
    (
        "a/b/cache.md_0_10",
        "The cache driver stores items; cache items expire.",
    ),
    (
        "a/b/queue.md_0_10",
        "Queues let you defer time consuming tasks such as sending email.",
    ),
];

fn bm25_index(dir: &Path) -> PathBuf {
    let corpus = corpus(dir, DOCS);
    let index = dir.join("index");
    let config = IndexConfig {
        corpus,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![],
        hnsw: None,
    };
    build_index(&config, &index, &NoProgress).unwrap();
    index
}

fn ids(hits: &[freshstack::dataset::ScoredDoc]) -> Vec<&str> {
    hits.iter().map(|h| h.doc_id.as_str()).collect()
}

#[test]
fn bm25_finds_identifier_parts() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(bm25_index(dir.path())).unwrap();
    let hits = engine.search_bm25("user name", 3).unwrap();
    assert_eq!(hits[0].doc_id, "a/b/http.py_0_10");
    let hits = engine.search_bm25("handle_request", 3).unwrap();
    assert_eq!(ids(&hits), ["a/b/http.py_0_10"]);
    let hits = engine.search_bm25("UserController", 3).unwrap();
    assert_eq!(hits[0].doc_id, "a/b/app.php_0_10");
}

#[test]
fn bm25_score_matches_hand_computation() {
    // "cache" occurs twice in a 7-term doc (after stop words and stemming: the, cache, driver,
    // store, item, cache, item, expir -> "the" removed: 7 terms), in 1 of 5 documents.
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(bm25_index(dir.path())).unwrap();
    let hits = engine.search_bm25("cache", 10).unwrap();
    assert_eq!(ids(&hits), ["a/b/cache.md_0_10"]);
    // Document lengths (terms): app 8? computed from the analyzer below.
    let lens: Vec<usize> = DOCS
        .iter()
        .map(|(_, t)| freshstack::index::AnalyzerKind::Code.terms(t).len())
        .collect();
    let avgdl = lens.iter().sum::<usize>() as f32 / lens.len() as f32;
    let (k1, b) = (0.9f32, 0.4f32);
    let n = 5.0f32;
    let idf = (1.0 + (n - 1.0 + 0.5) / (1.0 + 0.5)).ln();
    let tf = 2.0f32;
    let expected = idf * tf / (tf + k1 * (1.0 - b + b * lens[3] as f32 / avgdl));
    assert!(
        (hits[0].score - f64::from(expected)).abs() < 1e-4,
        "{} vs {expected}",
        hits[0].score
    );
}

#[test]
fn bm25_ties_are_broken_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let docs = [
        ("z", "same words here"),
        ("b", "same words here"),
        ("m", "same words here"),
    ];
    let corpus = corpus(dir.path(), &docs);
    let index = dir.path().join("index");
    let config = IndexConfig {
        corpus,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![],
        hnsw: None,
    };
    build_index(&config, &index, &NoProgress).unwrap();
    let engine = Engine::open(&index).unwrap();
    assert_eq!(
        ids(&engine.search_bm25("words", 10).unwrap()),
        ["b", "m", "z"]
    );
    assert_eq!(ids(&engine.search_bm25("words", 2).unwrap()), ["b", "m"]);
}

#[test]
fn k1_and_b_are_settings() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path(), DOCS);
    let mut scores = Vec::new();
    for (i, (k1, b)) in [(0.9, 0.4), (1.2, 0.75)].into_iter().enumerate() {
        let index = dir.path().join(format!("index{i}"));
        let config = IndexConfig {
            corpus: corpus.clone(),
            bm25: Some(Bm25Settings {
                k1,
                b,
                ..Bm25Settings::default()
            }),
            vectors: vec![],
            hnsw: None,
        };
        build_index(&config, &index, &NoProgress).unwrap();
        let engine = Engine::open(&index).unwrap();
        assert_eq!(engine.manifest().bm25.unwrap().k1, k1);
        scores.push(engine.search_bm25("cache", 1).unwrap()[0].score);
    }
    assert!((scores[0] - scores[1]).abs() > 1e-3);
}

#[test]
fn engine_is_shareable_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Engine>();
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(bm25_index(dir.path())).unwrap();
    let expected = engine.search_bm25("cache database", 5).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| assert_eq!(engine.search_bm25("cache database", 5).unwrap(), expected));
        }
    });
}

#[test]
fn bad_queries_and_retrievers_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::open(bm25_index(dir.path())).unwrap();
    let err = engine.search_bm25("$%^ -> {}", 5).unwrap_err().to_string();
    assert!(err.contains("no searchable terms"), "{err}");
    let huge = "word ".repeat(300_000);
    let err = engine.search_bm25(&huge, 5).unwrap_err().to_string();
    assert!(err.contains("limit"), "{err}");
    let err = "splade".parse::<RetrieverSpec>().unwrap_err().to_string();
    assert!(err.contains("unknown retriever \"splade\""), "{err}");
    let options = SearchOptions {
        retriever: "dense".parse().unwrap(),
        ..SearchOptions::default()
    };
    let err = engine.search("cache", &options).unwrap_err().to_string();
    assert!(err.contains("no dense model"), "{err}");
}

#[test]
fn corpus_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let cases = [
        (
            format!("{}\n{}\n", doc("x", "one"), doc("x", "two")),
            "corpus.jsonl:2: duplicate document id \"x\" (first on line 1)",
        ),
        (
            format!("{}\n", doc("x", "  ")),
            "corpus.jsonl:1: document \"x\" has an empty text",
        ),
        (format!("{}\n{{oops\n", doc("x", "one")), "corpus.jsonl:2:"),
    ];
    for (content, expected) in cases {
        let corpus = write(dir.path(), "corpus.jsonl", content);
        let out = freshstack(&[
            "index",
            "--corpus",
            corpus.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(!index.exists(), "nothing written half-way");
    }
    // No temporary directories left behind either.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".freshstack"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn other_format_version_and_corrupt_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let index = bm25_index(dir.path());
    let manifest_path = index.join("manifest.json");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap();
    // Rewritten through Manifest::write, so that its seal holds: only the version differs.
    let mut future: freshstack::index::Manifest = serde_json::from_str(&manifest).unwrap();
    future.format_version = 99;
    future.write(&index).unwrap();
    let err = Engine::open(&index).err().unwrap().to_string();
    assert!(
        err.contains("format version 99") && err.contains("rebuild"),
        "{err}"
    );
    std::fs::write(&manifest_path, "{not json").unwrap();
    let err = Engine::open(&index).err().unwrap().to_string();
    assert!(err.contains("corrupt manifest"), "{err}");
    std::fs::write(&manifest_path, &manifest).unwrap();
    Engine::open(&index).unwrap();
    // Truncate the id list: the manifest's size check catches it.
    let ids_path = index.join("ids.txt");
    let ids = std::fs::read(&ids_path).unwrap();
    std::fs::write(&ids_path, &ids[..ids.len() - 2]).unwrap();
    let err = Engine::open(&index).err().unwrap().to_string();
    assert!(err.contains("corrupt index"), "{err}");
    let err = Engine::open(dir.path()).err().unwrap().to_string();
    assert!(err.contains("not a freshstack index"), "{err}");
}

/// Deterministic pseudo-random unit vectors (xorshift), `n x dim`.
fn unit_vectors(n: usize, dim: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut state = seed.max(1);
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f32 / (1u64 << 53) as f32 - 0.5
    };
    (0..n)
        .map(|_| {
            let v: Vec<f32> = (0..dim).map(|_| next()).collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.into_iter().map(|x| x / norm).collect()
        })
        .collect()
}

fn write_vectors(path: &Path, ids: &[String], vectors: &[Vec<f32>], dtype: VectorDtype) {
    write_npy(path, vectors.len(), vectors[0].len(), dtype, |i, row| {
        row.copy_from_slice(&vectors[i])
    })
    .unwrap();
    std::fs::write(path.with_extension("ids"), ids.join("\n") + "\n").unwrap();
}

fn dense_fixture(
    dir: &Path,
    n: usize,
    dtype: VectorDtype,
) -> (PathBuf, Vec<String>, Vec<Vec<f32>>) {
    let ids: Vec<String> = (0..n).map(|i| format!("a/b/f{i:04}.md_0_1")).collect();
    let docs: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "some text")).collect();
    let corpus = corpus(dir, &docs);
    let vectors = unit_vectors(n, 24, 7);
    // Rows in reverse corpus order: the index must reorder them by id.
    let mut rev_ids = ids.clone();
    rev_ids.reverse();
    let mut rev_vectors = vectors.clone();
    rev_vectors.reverse();
    let npy = dir.join("vectors.npy");
    write_vectors(&npy, &rev_ids, &rev_vectors, dtype);
    let index = dir.join("index");
    let config = IndexConfig {
        corpus,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![VectorSource {
            name: "rand".into(),
            npy,
        }],
        hnsw: Some(HnswSettings::default()),
    };
    build_index(&config, &index, &NoProgress).unwrap();
    (index, ids, vectors)
}

/// Issue 34, item 10: after a refresh removed a repository, HNSW returned fewer live documents
/// than exact search (the removed rows stay in the graph and took the candidates' places).
#[test]
fn hnsw_after_a_refresh_returns_every_live_document_exact_search_does() {
    use freshstack::index::{RefreshConfig, refresh_index};
    let dir = tempfile::tempdir().unwrap();
    let ids: Vec<String> = (0..200)
        .map(|i| {
            let repo = if i % 5 < 2 { "gone" } else { "keep" };
            format!("x/{repo}/f{i:04}.md_0_1")
        })
        .collect();
    let docs: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "some text")).collect();
    let corpus = corpus(dir.path(), &docs);
    let vectors = unit_vectors(ids.len(), 16, 11);
    let npy = dir.path().join("vectors.npy");
    write_vectors(&npy, &ids, &vectors, VectorDtype::F16);
    let index = dir.path().join("index");
    let config = IndexConfig {
        corpus,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![VectorSource {
            name: "v".into(),
            npy,
        }],
        hnsw: Some(HnswSettings::default()),
    };
    build_index(&config, &index, &NoProgress).unwrap();
    let refresh = RefreshConfig {
        add: None,
        remove_repos: vec!["x/gone".into()],
    };
    let summary = refresh_index(&refresh, &index, &NoProgress).unwrap();
    assert_eq!((summary.removed, summary.num_live), (80, 120));
    let engine = Engine::open(&index).unwrap();
    for k in [10, 50, 120] {
        for q in [0, 3, 77] {
            let options = |ann| SearchOptions {
                retriever: "dense".parse().unwrap(),
                k,
                ann,
                ..SearchOptions::default()
            };
            let exact = engine
                .search_vector("v", &vectors[q], &options(Ann::Exact))
                .unwrap();
            let hnsw = engine
                .search_vector("v", &vectors[q], &options(Ann::Hnsw))
                .unwrap();
            assert_eq!(exact.len(), k);
            assert_eq!(hnsw.len(), k, "k {k}, query {q}");
            assert!(hnsw.iter().all(|h| h.doc_id.starts_with("x/keep/")));
            let overlap = hnsw.iter().filter(|h| exact.contains(h)).count();
            assert!(
                overlap * 10 >= k * 9,
                "k {k}, query {q}: {overlap} of {k} shared"
            );
        }
    }
}

#[test]
fn dense_exact_and_hnsw_agree_on_small_data() {
    for dtype in [VectorDtype::F32, VectorDtype::F16] {
        let dir = tempfile::tempdir().unwrap();
        let (index, ids, vectors) = dense_fixture(dir.path(), 300, dtype);
        let engine = Engine::open(&index).unwrap();
        let query = &vectors[17];
        let exact = SearchOptions {
            retriever: "dense".parse().unwrap(),
            k: 10,
            ann: Ann::Exact,
            ..SearchOptions::default()
        };
        let hits = engine.search_vector("rand", query, &exact).unwrap();
        assert_eq!(hits[0].doc_id, ids[17]);
        assert!((hits[0].score - 1.0).abs() < 1e-2, "{}", hits[0].score);
        let hnsw = SearchOptions {
            ann: Ann::Hnsw,
            ..exact.clone()
        };
        let approx = engine.search_vector("", query, &hnsw).unwrap();
        let overlap = approx.iter().filter(|h| hits.contains(h)).count();
        assert!(overlap >= 9, "{overlap}");
        // The graph is a cache: without it, it is rebuilt.
        drop(engine);
        std::fs::remove_dir_all(index.join("dense/rand/hnsw")).unwrap();
        let engine = Engine::open(&index).unwrap();
        let again = engine.search_vector("rand", query, &hnsw).unwrap();
        assert_eq!(again[0].doc_id, ids[17]);
    }
}

/// Issue 34, item 5: rebuilding an index replaced its whole directory, deleting the user's
/// files in it (the corpus it had just been given, among them).
#[test]
fn rebuilding_an_index_never_deletes_files_that_are_not_part_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let corpus = corpus(
        dir.path(),
        &[("a/b/x.md_0_1", "x y"), ("a/b/y.md_0_1", "y z")],
    );
    let build = |corpus: &Path| {
        freshstack(&[
            "index",
            "--corpus",
            corpus.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
        ])
    };
    assert!(build(&corpus).status.success());
    let inside = index.join("corpus.jsonl");
    std::fs::copy(&corpus, &inside).unwrap();
    std::fs::create_dir(index.join("notes")).unwrap();
    std::fs::write(index.join("notes/todo.txt"), "mine").unwrap();
    let out = build(&inside);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("holds corpus.jsonl (and 1 more files) that are not part of the index"),
        "{stderr}"
    );
    assert!(inside.is_file() && index.join("notes/todo.txt").is_file());
    assert!(Engine::open(&index).is_ok(), "the old index stays usable");
    // Without the user's files the rebuild goes ahead.
    std::fs::remove_file(&inside).unwrap();
    std::fs::remove_dir_all(index.join("notes")).unwrap();
    assert!(build(&corpus).status.success());
}

/// Issue 34, item 9: two runs writing one index raced. A second `index` or `index --refresh`
/// onto an index another run is writing (its lock `.index.lock` beside it, held here as that
/// run holds it) fails at once, in one line, and changes nothing: a new index is not created,
/// a built one is neither replaced nor refreshed. Once the lock is free the same runs go ahead.
#[test]
fn a_second_index_run_on_an_index_being_written_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path(), DOCS);
    let added = write(
        dir.path(),
        "added.jsonl",
        doc("e/f/new.md_0_1", "A new queue driver.") + "\n",
    );
    let index = dir.path().join("index");
    let (corpus, added, index_arg) = (
        corpus.to_str().unwrap(),
        added.to_str().unwrap(),
        index.to_str().unwrap(),
    );
    let build = ["index", "--corpus", corpus, "--index", index_arg];
    let refresh = [
        "index",
        "--refresh",
        "--index",
        index_arg,
        "--corpus",
        added,
    ];
    let refused = |args: &[&str]| {
        let before = files_under(dir.path());
        let out = freshstack(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!(
                "another freshstack run is writing {}",
                index.display()
            )),
            "{stderr}"
        );
        assert!(files_under(dir.path()) == before, "{args:?} wrote");
    };
    let ok = |args: &[&str]| {
        let out = freshstack(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {stderr}");
        stderr
    };

    // A first run building a new index.
    let held = freshstack::dataset::OutputLock::beside(&index).unwrap();
    refused(&build);
    assert!(!index.exists());
    drop(held);
    ok(&build);

    // A first run replacing or refreshing the built index.
    let held = freshstack::dataset::OutputLock::beside(&index).unwrap();
    refused(&build);
    refused(&refresh);
    assert_eq!(
        Engine::open(&index).unwrap().info().num_documents,
        DOCS.len()
    );
    drop(held);
    assert!(ok(&refresh).contains("removed 0, added 1, 6 documents now"));
}

#[test]
fn vector_ids_must_match_the_corpus() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path(), &[("a", "x y"), ("b", "y z")]);
    let npy = dir.path().join("v.npy");
    write_vectors(
        &npy,
        &["a".into(), "c".into()],
        &unit_vectors(2, 4, 3),
        VectorDtype::F32,
    );
    let index = dir.path().join("index");
    let out = freshstack(&[
        "index",
        "--corpus",
        corpus.to_str().unwrap(),
        "--index",
        index.to_str().unwrap(),
        "--vectors",
        &format!("m={}", npy.display()),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no vector for document \"b\""), "{stderr}");
    assert!(!index.exists());
}

#[test]
fn nan_document_vector_is_rejected_at_index_time_naming_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path(), &[("a", "x y"), ("b", "y z"), ("c", "z w")]);
    let ids: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
    for (dtype, bad) in [
        (VectorDtype::F32, f32::NAN),
        (VectorDtype::F16, f32::INFINITY),
    ] {
        let npy = dir.path().join(format!("v-{}.npy", dtype.name()));
        let mut vectors = unit_vectors(3, 4, 5);
        vectors[1][2] = bad;
        write_vectors(&npy, &ids, &vectors, dtype);
        let index = dir.path().join("index");
        let out = freshstack(&[
            "index",
            "--corpus",
            corpus.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
            "--vectors",
            &format!("m={}", npy.display()),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.contains(&*npy.to_string_lossy()), "{stderr}");
        assert!(
            stderr.contains("row 1") && stderr.contains("\"b\""),
            "{stderr}"
        );
        assert!(!index.exists());
    }
}

#[test]
fn vectors_that_are_not_unit_length_are_rejected_naming_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path(), &[("a", "x y"), ("b", "y z"), ("c", "z w")]);
    let ids: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
    for scale in [1e30f32, 0.0, 3.0] {
        let npy = dir.path().join("v.npy");
        let mut vectors = unit_vectors(3, 4, 5);
        vectors[2].iter_mut().for_each(|v| *v *= scale);
        write_vectors(&npy, &ids, &vectors, VectorDtype::F32);
        let index = dir.path().join("index");
        let out = freshstack(&[
            "index",
            "--corpus",
            corpus.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
            "--vectors",
            &format!("m={}", npy.display()),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains("row 2") && stderr.contains("\"c\"") && stderr.contains("not 1"),
            "{stderr}"
        );
        assert!(!index.exists());
    }
}

#[test]
fn cli_index_search_retrieve() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path(), DOCS);
    let index = dir.path().join("index");
    let out = freshstack(&[
        "index",
        "--corpus",
        corpus.to_str().unwrap(),
        "--index",
        index.to_str().unwrap(),
        "--bm25",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = freshstack(&[
        "search",
        "--index",
        index.to_str().unwrap(),
        "--json",
        "-k",
        "2",
        "cache expiry",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let first: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    assert_eq!(first["id"], "a/b/cache.md_0_10");
    assert_eq!(first["rank"], 1);

    let questions = [
        serde_json::json!({"query_id": "q1", "query_title": "Database config", "query_text": "where is the connection set?",
            "answer_text": "config/database.php", "nuggets": [{"_id": "q1_0", "text": "database connection config"}]}),
        serde_json::json!({"query_id": "q2", "query_title": "Send email later", "query_text": "defer tasks",
            "answer_text": "use queues", "nuggets": [{"_id": "q2_0", "text": "queues defer tasks"}]}),
        serde_json::json!({"query_id": "q3", "query_title": "$$$", "query_text": "->",
            "answer_text": "?", "nuggets": [{"_id": "q3_0", "text": "$$"}]}),
    ];
    let lines: Vec<String> = questions.iter().map(|q| q.to_string()).collect();
    let queries = write(dir.path(), "questions.jsonl", lines.join("\n"));
    let mut runs = Vec::new();
    for threads in ["1", "2"] {
        let run = dir.path().join(format!("run{threads}.trec"));
        let out = freshstack(&[
            "retrieve",
            "--index",
            index.to_str().unwrap(),
            "--queries",
            queries.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "-k",
            "3",
            "--threads",
            threads,
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stderr).contains("1 queries got no results"));
        runs.push(std::fs::read_to_string(&run).unwrap());
    }
    assert_eq!(runs[0], runs[1]);
    let first = runs[0].lines().next().unwrap();
    let fields: Vec<&str> = first.split(' ').collect();
    assert_eq!(fields[..4], ["q1", "Q0", "a/b/db.md_0_10", "1"]);
    assert_eq!(fields[5], "bm25");
    assert!(runs[0].lines().all(|l| !l.starts_with("q3 ")));

    // Oracle fields and BEIR queries.
    let run = dir.path().join("nuggets.trec");
    let out = freshstack(&[
        "retrieve",
        "--index",
        index.to_str().unwrap(),
        "--queries",
        queries.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--field",
        "nuggets",
        "-k",
        "1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let beir = write(
        dir.path(),
        "beir.jsonl",
        "{\"_id\": \"b1\", \"text\": \"cache driver\"}\n{\"_id\": \"b2\"}\n",
    );
    let out = freshstack(&[
        "retrieve",
        "--index",
        index.to_str().unwrap(),
        "--queries",
        beir.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--field",
        "text",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("beir.jsonl:2: no text"), "{stderr}");
    let out = freshstack(&[
        "retrieve",
        "--index",
        index.to_str().unwrap(),
        "--queries",
        beir.to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
        "--retriever",
        "dense:nope",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("dense:nope: no such model"), "{stderr}");
}

/// Regression: `retrieve` refused numeric `query_id`s (`invalid type: integer`) that `embed`
/// and the LLM stages accept; a numeric id now runs exactly as the same id written as a string.
#[test]
fn cli_retrieve_accepts_numeric_query_ids() {
    let dir = tempfile::tempdir().unwrap();
    let index = bm25_index(dir.path());
    let rows = |numeric: bool| {
        let id = |n: u64| {
            if numeric {
                serde_json::json!(n)
            } else {
                serde_json::json!(n.to_string())
            }
        };
        [
            serde_json::json!({"query_id": id(101), "query_title": "Database config",
                "query_text": "where is the connection set?"}),
            serde_json::json!({"query_id": id(102), "query_title": "Send email later",
                "query_text": "defer tasks"}),
            serde_json::json!({"_id": id(7), "text": "cache driver"}),
        ]
        .map(|row| row.to_string())
        .join("\n")
    };
    let mut runs = Vec::new();
    for numeric in [false, true] {
        let queries = write(dir.path(), &format!("q-{numeric}.jsonl"), rows(numeric));
        let run = dir.path().join(format!("run-{numeric}.trec"));
        let out = freshstack(&[
            "retrieve",
            "--index",
            index.to_str().unwrap(),
            "--queries",
            queries.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "-k",
            "2",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        runs.push(std::fs::read_to_string(&run).unwrap());
    }
    assert_eq!(runs[0], runs[1]);
    let mut ids: Vec<&str> = runs[1]
        .lines()
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    ids.dedup();
    assert_eq!(ids, ["101", "102", "7"]);
}

#[test]
fn cli_retrieve_with_query_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let (index, ids, vectors) = dense_fixture(dir.path(), 200, VectorDtype::F16);
    let queries = write(
        dir.path(),
        "queries.jsonl",
        "{\"_id\": \"q1\", \"text\": \"x\"}\n{\"_id\": \"q2\", \"text\": \"y\"}\n",
    );
    let qnpy = dir.path().join("queries.npy");
    write_vectors(
        &qnpy,
        &["q2".into(), "q1".into()],
        &[vectors[5].clone(), vectors[9].clone()],
        VectorDtype::F32,
    );
    let mut runs = Vec::new();
    for ann in ["exact", "hnsw"] {
        let run = dir.path().join(format!("{ann}.trec"));
        let out = freshstack(&[
            "retrieve",
            "--index",
            index.to_str().unwrap(),
            "--queries",
            queries.to_str().unwrap(),
            "--out",
            run.to_str().unwrap(),
            "--retriever",
            "dense",
            "-k",
            "5",
            "--ann",
            ann,
            "--query-vectors",
            &format!("rand={}", qnpy.display()),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        runs.push(std::fs::read_to_string(&run).unwrap());
    }
    let first: Vec<&str> = runs[0].lines().next().unwrap().split(' ').collect();
    assert_eq!(first[..3], ["q1", "Q0", ids[9].as_str()]);
    assert_eq!(first[5], "dense:rand");
    let q2_first = runs[0].lines().find(|l| l.starts_with("q2 ")).unwrap();
    assert!(q2_first.contains(&ids[5]));
}

#[test]
fn refresh_removes_and_adds_a_repository() {
    let dir = tempfile::tempdir().unwrap();
    let old = [
        ("a/b/x.md_0_1", "cache driver"),
        ("c/d/y.md_0_1", "cache tags"),
        ("c/d/z.md_0_1", "old queue text"),
    ];
    let corpus = corpus(dir.path(), &old);
    let index = dir.path().join("index");
    let out = freshstack(&[
        "index",
        "--corpus",
        corpus.to_str().unwrap(),
        "--index",
        index.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = [
        doc("c/d/y.md_0_1", "cache tags renamed"),
        doc("c/d/w.md_0_1", "new queue text"),
    ];
    let fresh = write(dir.path(), "fresh.jsonl", lines.join("\n"));
    // Adding a live id without removing its repository is refused, and changes nothing.
    let out = freshstack(&[
        "index",
        "--refresh",
        "--index",
        index.to_str().unwrap(),
        "--corpus",
        fresh.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already in the index"));
    // Only a whole repository, named exactly, is removed: never an owner's every repository,
    // a folder inside one, a path outside, or nothing for a typo.
    let before = std::fs::read(index.join("manifest.json")).unwrap();
    for (bad, says) in [
        ("c", "not a repository name"),
        ("c/d/docs", "not a repository name"),
        ("../..", "not a repository name"),
        ("c/", "not a repository name"),
        ("c/e", "has no document in the index"),
    ] {
        let out = freshstack(&[
            "index",
            "--refresh",
            "--index",
            index.to_str().unwrap(),
            "--remove-repo",
            bad,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}: {stderr}");
        assert!(
            stderr.contains("invalid --remove-repo") && stderr.contains(says),
            "{bad}: {stderr}"
        );
        assert_eq!(std::fs::read(index.join("manifest.json")).unwrap(), before);
    }
    let out = freshstack(&[
        "index",
        "--refresh",
        "--index",
        index.to_str().unwrap(),
        "--corpus",
        fresh.to_str().unwrap(),
        "--remove-repo",
        "c/d",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("removed 2, added 2, 3 documents now"));
    let engine = Engine::open(&index).unwrap();
    assert_eq!(engine.info().num_documents, 3);
    assert_eq!(
        ids(&engine.search_bm25("queue", 10).unwrap()),
        ["c/d/w.md_0_1"]
    );
    assert_eq!(
        ids(&engine.search_bm25("renamed", 10).unwrap()),
        ["c/d/y.md_0_1"]
    );
    assert_eq!(engine.search_bm25("cache", 10).unwrap().len(), 2);
}

/// A TREC run's rows per question: `qid -> [(doc id, rank)]`, in file order.
fn run_rows(path: &Path) -> std::collections::BTreeMap<String, Vec<(String, usize)>> {
    let mut rows: std::collections::BTreeMap<String, Vec<(String, usize)>> = Default::default();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        assert_eq!(f.len(), 6, "{line}");
        rows.entry(f[0].to_string())
            .or_default()
            .push((f[2].to_string(), f[3].parse().unwrap()));
    }
    rows
}

/// Issue 34, item 10: after `index --refresh` removed a repository and re-added the same
/// documents, `retrieve -k 20` gave 18-19 rows for some questions (removed rows, still in the
/// HNSW graph, took the candidates' places) and the fusion run differed from a fresh build's
/// (BM25's document frequencies and average length went on counting the deleted documents:
/// 103 of these 260 BM25 rows differed, the re-added documents ranked low). Here, through the
/// CLI, with a dense model that embeds the re-added documents (the committed tiny Qwen3
/// fixture, so it runs everywhere), refreshed twice: every run has k rows per question, each a
/// distinct live document (a removed row would repeat its re-added id); exact dense, BM25 and
/// fusion (exact) runs are byte for byte a fresh build's over the same documents; HNSW finds
/// what exact search does (recall@k against the refreshed index's own exact run) on a graph
/// that still holds the removed rows. The graphs differ from a fresh build's (other rows, in
/// another order), so HNSW is compared with exact search, not with the fresh graph.
#[test]
fn refreshed_index_retrieves_k_live_rows_per_question_like_a_fresh_build() {
    let dir = tempfile::tempdir().unwrap();
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed/tiny-qwen3");
    let model = model.to_str().unwrap();
    // 480 documents in 8 repositories, 12 words each from a 150-word vocabulary (xorshift).
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut words = |n: usize| -> String {
        (0..n)
            .map(|_| format!("w{}", next(150)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let (mut kept, mut gone) = (Vec::new(), Vec::new());
    for i in 0..480 {
        let repo = i % 8;
        let line = doc(&format!("own/r{repo}/f{i:04}.md_0_1"), &words(12));
        let target = if repo == 3 { &mut gone } else { &mut kept };
        target.push(line);
    }
    let all_ids: std::collections::HashSet<String> = kept
        .iter()
        .chain(&gone)
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["_id"].to_string())
        .map(|id| id.trim_matches('"').to_string())
        .collect();
    let initial = write(
        dir.path(),
        "initial.jsonl",
        [kept.clone(), gone.clone()].concat().join("\n") + "\n",
    );
    let readded = write(dir.path(), "readded.jsonl", gone.join("\n") + "\n");
    let whole = write(
        dir.path(),
        "whole.jsonl",
        [kept, gone].concat().join("\n") + "\n",
    );
    let (refreshed, fresh) = (dir.path().join("refreshed"), dir.path().join("fresh"));
    let p = |path: &Path| path.to_str().unwrap().to_string();
    for (corpus, index) in [(&initial, &refreshed), (&whole, &fresh)] {
        crate::util::run_ok(&[
            "index",
            "--corpus",
            &p(corpus),
            "--index",
            &p(index),
            "--bm25",
            "--dense",
            model,
        ]);
    }
    // Twice: the second refresh deletes from the first one's segment too.
    for _ in 0..2 {
        let out = crate::util::run_ok(&[
            "index",
            "--refresh",
            "--index",
            &p(&refreshed),
            "--corpus",
            &p(&readded),
            "--remove-repo",
            "own/r3",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("removed 60, added 60, 480 documents now"),
            "{stderr}"
        );
    }
    let questions: Vec<String> = (0..13)
        .map(|i| {
            serde_json::json!({"query_id": format!("q{i}"), "query_title": words(3),
                "query_text": words(5), "answer_text": "", "nuggets": []})
            .to_string()
        })
        .collect();
    let queries = write(dir.path(), "questions.jsonl", questions.join("\n") + "\n");
    let k = 20;
    let retrieve = |index: &Path, retriever: &str, ann: &str| {
        let run = dir.path().join(format!(
            "{}-{}-{ann}.trec",
            index.file_name().unwrap().to_str().unwrap(),
            retriever.replace(':', "-")
        ));
        crate::util::run_ok(&[
            "retrieve",
            "--index",
            &p(index),
            "--queries",
            &p(&queries),
            "--out",
            &p(&run),
            "-k",
            &k.to_string(),
            "--retriever",
            retriever,
            "--ann",
            ann,
        ]);
        run
    };
    let mut runs = std::collections::BTreeMap::new();
    for index in [&refreshed, &fresh] {
        for (retriever, ann) in [
            ("dense", "exact"),
            ("dense", "hnsw"),
            ("bm25", "exact"),
            ("fusion", "exact"),
            ("fusion", "hnsw"),
        ] {
            let run = retrieve(index, retriever, ann);
            // k rows per question, ranks 1..=k, each a distinct live document.
            let rows = run_rows(&run);
            assert_eq!(rows.len(), 13, "{}", run.display());
            for (qid, list) in &rows {
                assert_eq!(list.len(), k, "{} {qid}", run.display());
                let distinct: std::collections::HashSet<&String> =
                    list.iter().map(|(id, _)| id).collect();
                assert_eq!(
                    distinct.len(),
                    list.len(),
                    "{} {qid}: {list:?}",
                    run.display()
                );
                assert!(list.iter().all(|(id, _)| all_ids.contains(id)));
                assert!(list.iter().enumerate().all(|(i, (_, rank))| *rank == i + 1));
            }
            runs.insert((*index == refreshed, retriever, ann), run);
        }
    }
    let bytes = |key: (bool, &str, &str)| std::fs::read(&runs[&key]).unwrap();
    for (retriever, ann) in [("dense", "exact"), ("bm25", "exact"), ("fusion", "exact")] {
        assert!(
            bytes((true, retriever, ann)) == bytes((false, retriever, ann)),
            "{retriever} {ann}: the refreshed index's run differs from a fresh build's"
        );
    }
    // HNSW against exact search on the refreshed index: recall@k over every question.
    for (retriever, min_recall) in [("dense", 0.95), ("fusion", 0.95)] {
        let exact = run_rows(&runs[&(true, retriever, "exact")]);
        let hnsw = run_rows(&runs[&(true, retriever, "hnsw")]);
        let fresh_hnsw = run_rows(&runs[&(false, retriever, "hnsw")]);
        let (mut found, mut same_as_fresh, mut total) = (0, 0, 0);
        for (qid, want) in &exact {
            let want: std::collections::HashSet<&String> = want.iter().map(|(id, _)| id).collect();
            found += hnsw[qid].iter().filter(|(id, _)| want.contains(id)).count();
            same_as_fresh += usize::from(hnsw[qid] == fresh_hnsw[qid]);
            total += want.len();
        }
        let recall = found as f64 / total as f64;
        eprintln!(
            "{retriever}: HNSW recall@{k} {recall:.3} on the refreshed index; {same_as_fresh} of \
             13 questions ranked as the fresh build's HNSW"
        );
        assert!(recall >= min_recall, "{retriever}: recall@{k} {recall:.3}");
    }
}

/// Issue 20's determinism target: 20,000 x 384 vectors indexed with one thread and with two give
/// the same `graph.bin`, byte for byte (the parallel build inserts in batches, but every batch
/// reads the graph as it stood and writes in a fixed order).
#[test]
fn hnsw_graph_file_is_the_same_with_one_thread_and_two() {
    let dir = tempfile::tempdir().unwrap();
    let n = 20_000;
    let ids: Vec<String> = (0..n).map(|i| format!("a/b/f{i:05}.md_0_1")).collect();
    let docs: Vec<(&str, &str)> = ids.iter().map(|id| (id.as_str(), "x")).collect();
    let corpus = corpus(dir.path(), &docs);
    let npy = dir.path().join("v.npy");
    write_vectors(&npy, &ids, &unit_vectors(n, 384, 3), VectorDtype::F16);
    let graph = |threads: &str| {
        let index = dir.path().join(format!("index-{threads}"));
        let out = freshstack(&[
            "--threads",
            threads,
            "index",
            "--corpus",
            corpus.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
            "--vectors",
            &format!("v={}", npy.display()),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::read(index.join("dense/v/hnsw/graph.bin")).unwrap()
    };
    let one = graph("1");
    let two = graph("2");
    // 20,000 rows of at most 32 links, plus the upper layers: the whole graph, not a stub.
    assert!(one.len() > 20_000 * 4 * 8, "{} bytes", one.len());
    assert!(one == two, "graph.bin differs between 1 and 2 threads");
}

#[test]
fn typed_arguments_are_refused_while_parsing_in_one_line_with_exit_2() {
    // Each value is parsed once, by its type's FromStr, before any file is opened.
    let retrieve = [
        "retrieve",
        "--index",
        "idx",
        "--queries",
        "q.jsonl",
        "--out",
        "r.trec",
    ];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            [&retrieve[..], &["--retriever", "splade"]].concat(),
            "error: invalid value 'splade' for '--retriever <RETRIEVER>': invalid retriever: \
             unknown retriever \"splade\": expected bm25, dense, dense:NAME, fusion or \
             fusion:R1,R2,...",
        ),
        (
            [&retrieve[..], &["--model", "mini"]].concat(),
            "error: invalid value 'mini' for '--model <NAME=MODEL>': invalid model override: \
             \"mini\": expected NAME=MODEL",
        ),
        (
            [&retrieve[..], &["--query-vectors", "q.npy"]].concat(),
            "error: invalid value 'q.npy' for '--query-vectors <NAME=PATH.npy>': invalid query \
             vectors: \"q.npy\": expected NAME=PATH.npy",
        ),
        (
            vec![
                "search",
                "--index",
                "idx",
                "--retriever",
                "fusion:fusion",
                "q",
            ],
            "error: invalid value 'fusion:fusion' for '--retriever <RETRIEVER>': invalid \
             retriever: \"fusion:fusion\": a fusion cannot contain a fusion",
        ),
        (
            vec![
                "stackoverflow",
                "topics",
                "--posts",
                "Posts.xml",
                "--since",
                "2023-1-1",
            ],
            "error: invalid value '2023-1-1' for '--since <YYYY-MM-DD>': invalid day: \
             \"2023-1-1\": expected YYYY-MM-DD",
        ),
        (
            vec![
                "benchmark",
                "--queries",
                "q",
                "--corpus",
                "c",
                "--retriever",
                "splade",
            ],
            "error: invalid value 'splade' for '--retriever <NAME>': invalid retriever: \
             \"splade\": expected bm25 or dense:MODEL",
        ),
    ];
    for (args, expected) in cases {
        let out = freshstack(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end(), expected, "{args:?}");
    }
    // Two valid days in the wrong order: the range's check, still naming both flags.
    let out = freshstack(&[
        "stackoverflow",
        "tags",
        "--posts",
        "Posts.xml",
        "--tag",
        "laravel",
        "--since",
        "2024-01-02",
        "--until",
        "2024-01-01",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "error: invalid --since/--until: 2024-01-02 is after 2024-01-01"
    );
}
