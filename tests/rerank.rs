//! Cross-encoder rerankers: parity with `transformers` on tiny random-weight models (made by
//! scripts/gen_tiny_rerankers.py) of both layouts, and the `rerank` command end to end.

use std::path::PathBuf;

use freshstack::NoProgress;
use freshstack::embed::resolve_model;
use freshstack::rerank::{CrossEncoder, Reranker, RerankerOptions};

use crate::util::{freshstack, run_ok, write};

fn fixture(kind: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/rerank/tiny-{kind}"))
}

#[derive(serde::Deserialize)]
struct Reference {
    pairs: Vec<(String, String)>,
    tokens: Vec<usize>,
    truncated: Vec<bool>,
    scores: Vec<f32>,
}

fn load(kind: &str, max_batch_tokens: usize) -> (CrossEncoder, Reference) {
    let dir = fixture(kind);
    let reference: Reference =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let files = resolve_model(dir.to_str().unwrap()).unwrap();
    let options = RerankerOptions {
        max_batch_tokens: Some(max_batch_tokens),
        ..RerankerOptions::default()
    };
    (CrossEncoder::load(&files, &options).unwrap(), reference)
}

/// Our batched, right-padded scores must match `transformers` scoring one pair at a time.
fn parity(kind: &str) {
    // A small budget forces several batches of mixed lengths.
    let (model, reference) = load(kind, 90);
    assert_eq!(
        model.max_length(),
        40,
        "{kind}: max length from the position table"
    );
    let pairs: Vec<(&str, &str)> = reference
        .pairs
        .iter()
        .map(|(q, d)| (q.as_str(), d.as_str()))
        .collect();
    let got = model.score(&pairs, &NoProgress).unwrap();
    assert_eq!(
        got.num_tokens,
        reference.tokens.iter().sum::<usize>(),
        "{kind}: tokens"
    );
    assert_eq!(
        got.num_truncated,
        reference.truncated.iter().filter(|&&t| t).count(),
        "{kind}: truncated"
    );
    for (i, (want, have)) in reference.scores.iter().zip(&got.scores).enumerate() {
        assert!(
            (want - have).abs() <= 1e-4,
            "{kind} pair {i}: {have} vs {want}"
        );
        let alone = model.score(&pairs[i..=i], &NoProgress).unwrap();
        assert!(
            (alone.scores[0] - have).abs() <= 1e-5,
            "{kind} pair {i}: batched vs alone"
        );
    }
}

#[test]
fn bert_cross_encoder_matches_transformers() {
    parity("bert");
}

#[test]
fn xlm_roberta_cross_encoder_matches_transformers() {
    parity("xlmr");
}

#[test]
fn a_query_longer_than_the_limit_is_cut_too() {
    let (model, _) = load("bert", 2048);
    let long = "route parameter ".repeat(40);
    let got = model.score(&[(long.as_str(), "a")], &NoProgress).unwrap();
    assert_eq!(got.num_truncated, 1);
    assert_eq!(got.num_tokens, 40);
    assert!(got.scores[0].is_finite());
}

#[test]
fn embedders_are_refused_as_rerankers() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/embed/tiny-qwen2");
    let files = resolve_model(dir.to_str().unwrap()).unwrap();
    let err = CrossEncoder::load(&files, &RerankerOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("not a supported cross-encoder"), "{err}");
}

/// The fixture's documents as a corpus (`d0`, `d1`, ... in pair order), written into `dir`.
fn fixture_corpus(dir: &std::path::Path, reference: &Reference) -> PathBuf {
    let mut corpus = String::new();
    for (i, (_, doc)) in reference.pairs.iter().enumerate() {
        corpus.push_str(
            &serde_json::json!({"_id": format!("d{i}"), "title": "", "text": doc}).to_string(),
        );
        corpus.push('\n');
    }
    write(dir, "corpus.jsonl", corpus)
}

#[test]
fn cli_reranks_top_k_deterministically() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_, reference) = load("xlmr", 2048);
    // Two questions over the fixture's documents; q2 also ranks a document past k.
    let corpus = fixture_corpus(dir, &reference);
    let queries = write(
        dir,
        "queries.jsonl",
        "{\"query_id\":\"q1\",\"query_title\":\"queue\",\"query_text\":\"worker\"}\n\
         {\"query_id\":\"q2\",\"query_title\":\"route\",\"query_text\":\"parameter\"}\n",
    );
    let run = write(
        dir,
        "run.trec",
        "q1 Q0 d0 1 5.0 bm25\nq1 Q0 d2 2 4.0 bm25\nq1 Q0 d4 3 3.0 bm25\n\
         q2 Q0 d1 1 9.0 bm25\nq2 Q0 d0 2 8.0 bm25\nq2 Q0 d6 3 7.0 bm25\nq2 Q0 d5 4 1.0 bm25\n",
    );
    let model = fixture("xlmr");
    let rerank = |out: &str, threads: &str| {
        let out = dir.join(out);
        let output = freshstack(&[
            "rerank",
            "--run",
            run.to_str().unwrap(),
            "--queries",
            queries.to_str().unwrap(),
            "--corpus",
            corpus.to_str().unwrap(),
            "--model",
            model.to_str().unwrap(),
            "-k",
            "3",
            "--threads",
            threads,
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        std::fs::read_to_string(out).unwrap()
    };
    let text = rerank("a.trec", "2");
    assert_eq!(
        text,
        rerank("b.trec", "1"),
        "same bytes whatever the threads"
    );
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 7);
    let q2: Vec<&str> = lines
        .iter()
        .filter(|l| l[0] == "q2")
        .map(|l| l[2])
        .collect();
    let mut head = q2[..3].to_vec();
    head.sort_unstable();
    assert_eq!(head, ["d0", "d1", "d6"]);
    assert_eq!(q2[3], "d5", "past k keeps its place below");
    // The top 3 follow the model's scores for those pairs.
    let (model, _) = load("xlmr", 2048);
    let texts = |i: usize| reference.pairs[i].1.as_str();
    let scores = model
        .score(
            &[
                ("route parameter", texts(1)),
                ("route parameter", texts(0)),
                ("route parameter", texts(6)),
            ],
            &NoProgress,
        )
        .unwrap()
        .scores;
    let mut want: Vec<(f32, &str)> = scores.into_iter().zip(["d1", "d0", "d6"]).collect();
    want.sort_by(|a, b| b.0.total_cmp(&a.0));
    assert_eq!(q2[..3], want.iter().map(|w| w.1).collect::<Vec<_>>()[..]);

    // A document missing from the corpus: one clear line, no output.
    let bad = write(dir, "bad.trec", "q1 Q0 nope 1 5.0 bm25\n");
    let out = dir.join("bad-out.trec");
    let output = freshstack(&[
        "rerank",
        "--run",
        bad.to_str().unwrap(),
        "--queries",
        queries.to_str().unwrap(),
        "--corpus",
        corpus.to_str().unwrap(),
        "--model",
        fixture("bert").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"nope\""), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!out.exists());
}

#[derive(serde::Deserialize)]
struct EmbedReference {
    texts: Vec<String>,
    tokens: Vec<usize>,
    vectors: Vec<Vec<f32>>,
}

/// The XLM-RoBERTa backbone also embeds (BGE-M3 style, CLS pooling): `embed`'s path for
/// `model_type = xlm-roberta` against `transformers`' `XLMRobertaModel` on the same weights.
#[test]
fn xlm_roberta_embeddings_match_transformers() {
    use freshstack::dataset::{Encoder, TextKind};
    use freshstack::embed::{EncoderOptions, TextEncoder};
    let dir = fixture("xlmr");
    let reference: EmbedReference =
        serde_json::from_str(&std::fs::read_to_string(dir.join("embed_reference.json")).unwrap())
            .unwrap();
    let files = resolve_model(dir.to_str().unwrap()).unwrap();
    let options = EncoderOptions {
        max_batch_tokens: Some(60),
        ..EncoderOptions::default()
    };
    let encoder = TextEncoder::load(&files, &options).unwrap();
    assert_eq!(
        encoder.manifest().max_length,
        40,
        "positions after padding_idx"
    );
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let got = encoder
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    assert_eq!(got.num_tokens, reference.tokens.iter().sum::<usize>());
    for (i, want) in reference.vectors.iter().enumerate() {
        let diff = got
            .row(i)
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-4, "text {i}: max abs diff {diff}");
    }
}

/// `retrieve --rerank` is `retrieve` followed by `rerank` (same documents, order and scores);
/// `search --rerank` ranks the same way and reports the first stage; a corpus that is not the
/// index's is refused.
#[test]
fn retrieve_and_search_rerank_like_the_rerank_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let (_, reference) = load("xlmr", 2048);
    let corpus = fixture_corpus(dir, &reference);
    let queries = write(
        dir,
        "queries.jsonl",
        "{\"_id\":\"q1\",\"text\":\"queue worker running\"}\n\
         {\"_id\":\"q2\",\"text\":\"route parameter users\"}\n",
    );
    let index = dir.join("index");
    run_ok(&[
        "index",
        "--corpus",
        corpus.to_str().unwrap(),
        "--index",
        index.to_str().unwrap(),
        "--bm25",
    ]);
    let model = fixture("xlmr");
    let (index_s, queries_s, corpus_s, model_s) = (
        index.to_str().unwrap(),
        queries.to_str().unwrap(),
        corpus.to_str().unwrap(),
        model.to_str().unwrap(),
    );
    let first = dir.join("first.trec");
    run_ok(&[
        "retrieve",
        "--index",
        index_s,
        "--queries",
        queries_s,
        "--field",
        "text",
        "-k",
        "4",
        "--out",
        first.to_str().unwrap(),
    ]);
    let two_step = dir.join("two-step.trec");
    run_ok(&[
        "rerank",
        "--run",
        first.to_str().unwrap(),
        "--queries",
        queries_s,
        "--corpus",
        corpus_s,
        "--model",
        model_s,
        "-k",
        "4",
        "--out",
        two_step.to_str().unwrap(),
    ]);
    let one_step = dir.join("one-step.trec");
    run_ok(&[
        "retrieve",
        "--index",
        index_s,
        "--queries",
        queries_s,
        "--field",
        "text",
        "-k",
        "3",
        "--rerank",
        model_s,
        "--rerank-depth",
        "4",
        "--corpus",
        corpus_s,
        "--out",
        one_step.to_str().unwrap(),
    ]);
    // (query, doc, score as f32) of the top 3 per query.
    let parse = |path: &std::path::Path, keep: usize| {
        let text = std::fs::read_to_string(path).unwrap();
        let mut rows: Vec<(String, String, f32, String)> = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            if rows.iter().filter(|r| r.0 == f[0]).count() < keep {
                rows.push((f[0].into(), f[2].into(), f[4].parse().unwrap(), f[5].into()));
            }
        }
        rows
    };
    let want = parse(&two_step, 3);
    let got = parse(&one_step, 3);
    assert!(got.len() >= 4, "{got:?}");
    assert_eq!(
        got.iter().map(|r| (&r.0, &r.1, r.2)).collect::<Vec<_>>(),
        want.iter().map(|r| (&r.0, &r.1, r.2)).collect::<Vec<_>>()
    );
    assert!(got.iter().all(|r| r.3 == "bm25+rerank"), "{got:?}");

    // search: the corpus path recorded by the index is the default.
    let output = run_ok(&[
        "search",
        "--index",
        index_s,
        "--rerank",
        model_s,
        "--rerank-depth",
        "4",
        "-k",
        "3",
        "--json",
        "route parameter users",
    ]);
    let rows: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let q2: Vec<&str> = want
        .iter()
        .filter(|r| r.0 == "q2")
        .map(|r| r.1.as_str())
        .collect();
    let ids: Vec<&str> = rows.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(ids, q2);
    assert_eq!(rows[0]["per_retriever"][0]["retriever"], "bm25");

    // Another corpus than the index's: one clear line, no run.
    let other = write(dir, "other.jsonl", "{\"_id\":\"d0\",\"text\":\"x\"}\n");
    let out = dir.join("bad.trec");
    let output = freshstack(&[
        "retrieve",
        "--index",
        index_s,
        "--queries",
        queries_s,
        "--field",
        "text",
        "--rerank",
        model_s,
        "--corpus",
        other.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not the corpus this index was built from"),
        "{stderr}"
    );
    assert!(!out.exists());

    // Issue 34, item 11: a refreshed index records two corpora, which no one file hashes to;
    // it reranks with any corpus holding every live document, and names one that is missing.
    let added_row = "{\"_id\":\"new0\",\"title\":\"\",\"text\":\"queue worker restarts\"}\n";
    let added = write(dir, "added.jsonl", added_row);
    run_ok(&[
        "index",
        "--refresh",
        "--index",
        index_s,
        "--corpus",
        added.to_str().unwrap(),
    ]);
    let both = write(
        dir,
        "both.jsonl",
        std::fs::read_to_string(&corpus).unwrap() + added_row,
    );
    let rerank_with = |corpus: &std::path::Path| {
        freshstack(&[
            "retrieve",
            "--index",
            index_s,
            "--queries",
            queries_s,
            "--field",
            "text",
            "--rerank",
            model_s,
            "--corpus",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let output = rerank_with(&both);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let run = std::fs::read_to_string(&out).unwrap();
    assert!(run.contains(" new0 "), "{run}");
    std::fs::remove_file(&out).unwrap();
    let output = rerank_with(&corpus);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("has no document \"new0\""), "{stderr}");
    assert!(!out.exists());
}
