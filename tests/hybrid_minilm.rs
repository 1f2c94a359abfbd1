//! The hybrid engine with the real all-MiniLM-L6-v2 (fetched by scripts/setup.sh; the tests skip
//! loudly without it): `index --dense` encodes the corpus, searches encode queries with the
//! recorded model, `retrieve --retriever fusion` equals `fuse` over the single runs.

use std::path::Path;
use std::str::FromStr;

use freshstack::NoProgress;
use freshstack::dataset::ScoredDoc;
use freshstack::search::{
    Ann, DenseModelSpec, Engine, HybridIndexConfig, QueryEncoderOptions, SearchOptions,
    build_hybrid_index,
};

use crate::hybrid::{DOCS, corpus, options};
use crate::util::{freshstack, minilm_dir, run_ok, write};

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn minilm_index_encodes_documents_and_queries() {
    let model = minilm_dir();
    let dir = tempfile::tempdir().unwrap();
    let index = dir.path().join("index");
    let config = HybridIndexConfig {
        corpus: corpus(dir.path()),
        dense: vec![DenseModelSpec::from_str(model.to_str().unwrap()).unwrap()],
        ..HybridIndexConfig::default()
    };
    let summary = build_hybrid_index(&config, &index, &NoProgress).unwrap();
    let dense = &summary.manifest.dense[0];
    assert_eq!(dense.name, "all-MiniLM-L6-v2");
    assert_eq!((dense.dim, dense.dtype.as_str()), (384, "f16"));
    let recorded = dense.model.as_ref().unwrap();
    assert_eq!(recorded.id, "sentence-transformers/all-MiniLM-L6-v2");
    assert_eq!(recorded.reference, model.to_str().unwrap());
    assert_eq!(
        (recorded.pooling.as_str(), recorded.max_length),
        ("mean", 256)
    );

    let engine = Engine::open_with_encoders(&index, &QueryEncoderOptions::default()).unwrap();
    // No word in common with the queue document: only the dense half can find it.
    let hits = engine
        .search(
            "how can slow work be deferred to a worker process",
            &options("dense", 3),
        )
        .unwrap();
    assert_eq!(hits[0].doc_id, "laravel/docs/queues.md_0_10", "{hits:?}");
    // A document's own text finds it with cosine ~1 (f16 storage), exact and HNSW alike.
    for ann in [Ann::Exact, Ann::Hnsw] {
        let opts = SearchOptions {
            ann,
            ..options("dense:all-MiniLM-L6-v2", 1)
        };
        let hits = engine.search(DOCS[6].1, &opts).unwrap();
        assert_eq!(hits[0].doc_id, DOCS[6].0);
        assert!((hits[0].score - 1.0).abs() < 5e-3, "{}", hits[0].score);
    }
    // Batched query encoding gives the same rankings as one at a time.
    let queries = [
        "send an email to a user",
        "format today's date",
        "cache results",
    ];
    let batch = engine
        .search_batch(&queries, &options("fusion", 3))
        .unwrap();
    for (query, hits) in queries.iter().zip(&batch) {
        let single = engine.search(query, &options("fusion", 3)).unwrap();
        let ids = |h: &[ScoredDoc]| h.iter().map(|h| h.doc_id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(hits), ids(&single), "{query}");
        for (a, b) in hits.iter().zip(&single) {
            assert!((a.score - b.score).abs() < 1e-4);
        }
    }
    assert_eq!(batch[0][0].doc_id, "laravel/docs/mail.md_0_10");
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn minilm_cli_index_and_fusion_retrieve() {
    let model = minilm_dir();
    let dir = tempfile::tempdir().unwrap();
    let corpus = corpus(dir.path());
    let index = dir.path().join("index");
    let p = |p: &Path| p.to_str().unwrap().to_string();
    run_ok(&[
        "index",
        "--corpus",
        &p(&corpus),
        "--index",
        &p(&index),
        "--bm25",
        "--dense",
        &format!("mini={}", model.display()),
    ]);
    let queries = write(
        dir.path(),
        "queries.jsonl",
        [
            r#"{"_id":"q1","text":"how do I send an email to a user"}"#,
            r#"{"_id":"q2","text":"process queued jobs in the background"}"#,
            r#"{"_id":"q3","text":"!!! ???"}"#,
        ]
        .join("\n"),
    );
    let output = run_ok(&[
        "search",
        "--index",
        &p(&index),
        "--retriever",
        "dense:mini",
        "-k",
        "1",
        "--json",
        "email a user",
    ]);
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(out.contains("laravel/docs/mail.md_0_10"), "{out}");
    let mut runs = Vec::new();
    for retriever in ["bm25", "dense:mini", "fusion"] {
        let run = dir
            .path()
            .join(format!("{}.trec", retriever.replace(':', "_")));
        run_ok(&[
            "retrieve",
            "--index",
            &p(&index),
            "--queries",
            &p(&queries),
            "--out",
            &p(&run),
            "--retriever",
            retriever,
            "--field",
            "text",
            "-k",
            "100",
        ]);
        runs.push(run);
    }
    let fusion = std::fs::read_to_string(&runs[2]).unwrap();
    let lines: Vec<Vec<&str>> = fusion.lines().map(|l| l.split(' ').collect()).collect();
    assert!(
        lines
            .iter()
            .all(|l| l.len() == 6 && l[1] == "Q0" && l[5] == "fusion:bm25,dense:mini")
    );
    assert_eq!(
        lines[0][0..4],
        ["q1", "Q0", "laravel/docs/mail.md_0_10", "1"]
    );
    // q3 has no BM25 terms: the fusion still ranks it by the dense half.
    assert_eq!(lines.iter().filter(|l| l[0] == "q3").count(), DOCS.len());
    // The fusion retriever equals `freshstack fuse` over the single runs (same order).
    let fused = dir.path().join("fused.trec");
    run_ok(&["fuse", &p(&runs[0]), &p(&runs[1]), "--out", &p(&fused)]);
    let order = |text: &str| -> Vec<(String, String)> {
        text.lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].to_string(), f[2].to_string())
            })
            .collect()
    };
    let fuse_text = std::fs::read_to_string(&fused).unwrap();
    assert_eq!(order(&fusion), order(&fuse_text));
    // The model moved away: a clear error, and --model points to it.
    let manifest_path = index.join("manifest.json");
    let text = std::fs::read_to_string(&manifest_path).unwrap();
    let moved = text
        .replace(
            &format!("\"reference\": \"{}\"", model.display()),
            "\"reference\": \"/gone/mini\"",
        )
        .replace(
            &format!("\"dir\": \"{}\"", model.canonicalize().unwrap().display()),
            "\"dir\": \"/gone/mini\"",
        );
    assert_ne!(moved, text);
    // Rewritten through Manifest::write, so that its seal holds (a hand edit breaks it).
    let moved: freshstack::index::Manifest = serde_json::from_str(&moved).unwrap();
    moved.write(&index).unwrap();
    let out = freshstack(&[
        "search",
        "--index",
        &p(&index),
        "--retriever",
        "fusion",
        "email",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains("invalid --model: dense:mini: ")
            && stderr.contains("as mini=DIR"),
        "{stderr}"
    );
    let output = run_ok(&[
        "search",
        "--index",
        &p(&index),
        "--retriever",
        "fusion",
        "--model",
        &format!("mini={}", model.display()),
        "email a user",
    ]);
    let out = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        out.lines()
            .next()
            .unwrap()
            .contains("laravel/docs/mail.md_0_10"),
        "{out}"
    );
}

/// `index --refresh` on an index with a `--dense` model: the removed repository's documents
/// are gone from every retriever, the added ones are embedded with the recorded model, and the
/// refreshed index answers exactly like one built from scratch over the same documents.
#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn refresh_embeds_added_documents_like_a_fresh_build() {
    let model = minilm_dir();
    let dir = tempfile::tempdir().unwrap();
    let line = |id: &str, text: &str| {
        serde_json::json!({"_id": id, "title": "", "text": text}).to_string() + "\n"
    };
    let mut kept = String::new();
    let mut old_php = String::new();
    for (id, text) in DOCS {
        if id.starts_with("php/doc/") {
            old_php.push_str(&line(id, text));
        } else {
            kept.push_str(&line(id, text));
        }
    }
    let new_php = line(
        "php/doc/array.md_0_20",
        "array_filter keeps the elements of an array for which a callback returns true.",
    ) + &line(
        "php/doc/json.md_0_10",
        "json_decode turns a JSON string into PHP arrays or objects.",
    );
    let initial = write(dir.path(), "initial.jsonl", format!("{kept}{old_php}"));
    let added = write(dir.path(), "added.jsonl", &new_php);
    let whole = write(dir.path(), "whole.jsonl", format!("{kept}{new_php}"));
    let (refreshed, rebuilt) = (dir.path().join("refreshed"), dir.path().join("rebuilt"));
    let run = |args: &[&str]| {
        let out = freshstack(args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let model = model.to_str().unwrap();
    for (corpus, index) in [(&initial, &refreshed), (&whole, &rebuilt)] {
        run(&[
            "index",
            "--corpus",
            corpus.to_str().unwrap(),
            "--index",
            index.to_str().unwrap(),
            "--bm25",
            "--dense",
            model,
        ]);
    }
    let stderr = run(&[
        "index",
        "--refresh",
        "--index",
        refreshed.to_str().unwrap(),
        "--corpus",
        added.to_str().unwrap(),
        "--remove-repo",
        "php/doc",
    ]);
    assert!(stderr.contains("added 2"), "{stderr}");
    let a = Engine::open_with_encoders(&refreshed, &QueryEncoderOptions::default()).unwrap();
    let b = Engine::open_with_encoders(&rebuilt, &QueryEncoderOptions::default()).unwrap();
    for query in [
        "keep array elements with a callback",
        "decode json",
        "send an email",
    ] {
        for (retriever, ann) in [
            ("dense", Ann::Exact),
            ("dense", Ann::Hnsw),
            ("fusion", Ann::Exact),
        ] {
            let k = 20;
            let opts = SearchOptions {
                ann,
                ..options(retriever, k)
            };
            let (x, y) = (
                a.search(query, &opts).unwrap(),
                b.search(query, &opts).unwrap(),
            );
            assert!(
                x.iter().all(|h| !h.doc_id.contains("str_contains")),
                "{x:?}"
            );
            let ids =
                |hits: &[ScoredDoc]| hits.iter().map(|h| h.doc_id.clone()).collect::<Vec<_>>();
            assert_eq!(ids(&x), ids(&y), "{retriever} {ann:?} {query}");
            for (p, q) in x.iter().zip(&y) {
                assert!((p.score - q.score).abs() < 1e-6, "{p:?} vs {q:?}");
            }
        }
    }
}
