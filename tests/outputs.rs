//! Issue 34's data-loss defects: an output that names an input (through any path) is refused
//! before anything is read or written, and the input keeps its bytes.

use std::path::{Path, PathBuf};

use crate::util::freshstack;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Copies of the report fixture's queries and two of its runs into a fresh directory.
fn inputs() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let report = fixture("report");
    let queries = dir.path().join("queries.jsonl");
    std::fs::copy(report.join("queries.jsonl"), &queries).unwrap();
    let a = dir.path().join("a.trec");
    let b = dir.path().join("b.trec");
    std::fs::copy(report.join("runs/oracle.nuggets.bm25.trec"), &a).unwrap();
    std::fs::copy(report.join("runs/inference.question.bm25.trec"), &b).unwrap();
    (dir, queries, a, b)
}

/// Runs `args`, which must fail with one line naming `flag`, leaving `input` as it was.
fn refused(args: &[&str], flag: &str, input: &Path) {
    let before = std::fs::read(input).unwrap();
    let out = freshstack(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!("invalid {flag}")) && stderr.contains("which this command reads"),
        "{args:?}: {stderr}"
    );
    assert_eq!(
        std::fs::read(input).unwrap(),
        before,
        "{args:?} changed its input"
    );
}

#[test]
fn eval_per_query_onto_its_queries_is_refused() {
    let (dir, queries, a, _) = inputs();
    let q = queries.to_str().unwrap();
    refused(
        &[
            "eval",
            "--queries",
            q,
            "--run",
            a.to_str().unwrap(),
            "--per-query",
            q,
        ],
        "--per-query",
        &queries,
    );
    // Through another spelling of the same file.
    let other = dir.path().join(".").join("a.trec");
    refused(
        &[
            "eval",
            "--queries",
            q,
            "--run",
            a.to_str().unwrap(),
            "--per-query",
            other.to_str().unwrap(),
        ],
        "--per-query",
        &a,
    );
}

#[test]
fn fuse_out_onto_one_of_its_runs_is_refused() {
    let (_dir, _, a, b) = inputs();
    let (a_str, b_str) = (a.to_str().unwrap(), b.to_str().unwrap());
    refused(&["fuse", a_str, b_str, "--out", a_str], "--out", &a);
    refused(&["fuse", a_str, b_str, "--out", b_str], "--out", &b);
}

#[test]
fn retrieve_out_onto_its_queries_is_refused() {
    let (_dir, queries, _, _) = inputs();
    let q = queries.to_str().unwrap();
    let index = fixture("index-v1");
    refused(
        &[
            "retrieve",
            "--index",
            index.to_str().unwrap(),
            "--queries",
            q,
            "--out",
            q,
        ],
        "--out",
        &queries,
    );
}

#[test]
fn merge_out_onto_one_of_its_shards_is_refused() {
    let (dir, _, a, b) = inputs();
    let s0 = dir.path().join("s0.jsonl");
    let s1 = dir.path().join("s1.jsonl");
    std::fs::copy(&a, &s0).unwrap();
    std::fs::copy(&b, &s1).unwrap();
    let (s0_str, s1_str) = (s0.to_str().unwrap(), s1.to_str().unwrap());
    refused(
        &["merge", "--out", s0_str, s0_str, s1_str],
        "merge output",
        &s0,
    );
}
