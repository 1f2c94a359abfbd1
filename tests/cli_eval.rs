//! `freshstack eval` end to end: formats, outputs, errors.

use crate::util::freshstack_in;

const QUERIES: &str = r#"{"query_id": "q1", "query_title": "t", "query_text": "b", "answer_id": "1", "answer_text": "a", "metadata": {"date": null, "tags": []}, "nuggets": [{"_id": "q1_0", "text": "n", "relevant_corpus_ids": ["d1", "my doc"], "non_relevant_corpus_ids": ["d3"]}, {"_id": "q1_1", "text": "n", "relevant_corpus_ids": ["d2"], "non_relevant_corpus_ids": []}]}
{"query_id": "q12", "query_title": "t", "query_text": "b", "answer_id": "2", "answer_text": "a", "metadata": {"date": null, "tags": []}, "nuggets": [{"_id": "q12_0", "text": "n", "relevant_corpus_ids": ["d9"], "non_relevant_corpus_ids": []}]}
"#;

const RUN_A: &str =
    "q1 Q0 d1 1 3 a\nq1 Q0 d3 2 2 a\nq1 Q0 my doc 3 1 a\nq12 Q0 d8 1 5 a\nq12 Q0 d9 2 4 a\n";
const RUN_B: &str = "q1 Q0 d2 1 3 b\nq1 Q0 d1 2 2 b\nq12 Q0 d9 1 5 b\n";

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("queries.jsonl"), QUERIES).unwrap();
    std::fs::write(dir.path().join("a.trec"), RUN_A).unwrap();
    std::fs::write(dir.path().join("b.trec"), RUN_B).unwrap();
    dir
}

#[test]
fn json_for_one_run_has_the_paper_keys_in_order() {
    let dir = setup();
    let out = freshstack_in(
        &[
            "eval",
            "--queries",
            "queries.jsonl",
            "--run",
            "a.trec",
            "--json",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let keys: Vec<&str> = text.split('"').skip(1).step_by(2).collect();
    assert_eq!(keys, ["alpha_ndcg@10", "coverage@20", "recall@50"]);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    // q1: nugget 0 covered (d1, "my doc"), nugget 1 not: 0.5; q12: 1.0.
    assert_eq!(v["coverage@20"], 0.75);
    // q1: 2 of 3 relevant (d1, my doc; d2 missing); q12: 1 of 1.
    assert_eq!(v["recall@50"], 0.8333);
}

#[test]
fn ndeval_qrels_give_the_same_numbers() {
    let dir = setup();
    let qrels = "q1 q1_0 d1 1\nq1 q1_0 my doc 1\nq1 q1_0 d3 0\nq1 q1_1 d2 1\nq12 q12_0 d9 1\n";
    std::fs::write(dir.path().join("n.qrels"), qrels).unwrap();
    let a = freshstack_in(
        &[
            "eval",
            "--queries",
            "queries.jsonl",
            "--run",
            "a.trec",
            "--json",
        ],
        dir.path(),
    );
    let b = freshstack_in(
        &["eval", "--qrels", "n.qrels", "--run", "a.trec", "--json"],
        dir.path(),
    );
    assert!(b.status.success(), "{}", String::from_utf8_lossy(&b.stderr));
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn several_runs_table_json_and_per_query() {
    let dir = setup();
    let args = [
        "eval",
        "--queries",
        "queries.jsonl",
        "--run",
        "a.trec",
        "--run",
        "b.trec",
        "--metrics",
        "alpha_ndcg,coverage,recall,ndcg,mrr,precision,hole,judged",
        "--k",
        "1,5",
        "--per-query",
        "out/pq.jsonl",
    ];
    let out = freshstack_in(&args, dir.path());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.starts_with("run"), "{table}");
    assert!(
        table.contains("p (t-test)") && table.contains("p (randomization)"),
        "{table}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.path().join("out/pq.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["run"], "a");
    assert_eq!(lines[0]["query_id"], "q1");
    assert_eq!(lines[0].as_object().unwrap().len(), 2 + 16);
    let mut json_args = args.to_vec();
    json_args.truncate(json_args.len() - 2);
    json_args.push("--json");
    let out = freshstack_in(&json_args, dir.path());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["a"]["alpha_ndcg@1"].is_number());
    assert!(v["b"]["p_t_test"]["recall@5"].is_number());
    assert!(v["b"]["p_randomization"]["recall@5"].is_number());
    // Same seed, same p-values.
    let again = freshstack_in(&json_args, dir.path());
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn bad_input_fails_with_one_line_and_writes_nothing() {
    let dir = setup();
    std::fs::write(
        dir.path().join("bad.trec"),
        "q1 Q0 d1 1 3 a\nq1 Q0 d2 2 x a\n",
    )
    .unwrap();
    let out = freshstack_in(
        &[
            "eval",
            "--queries",
            "queries.jsonl",
            "--run",
            "bad.trec",
            "--per-query",
            "pq.jsonl",
        ],
        dir.path(),
    );
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("bad.trec:2:") && err.contains("score"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!dir.path().join("pq.jsonl").exists());
    let out = freshstack_in(&["eval", "--run", "a.trec"], dir.path());
    assert!(!out.status.success());
}

#[test]
fn eval_on_an_empty_or_disjoint_run_warns_at_the_default_level() {
    let dir = setup();
    std::fs::write(dir.path().join("empty.trec"), "").unwrap();
    std::fs::write(
        dir.path().join("other.trec"),
        "x1 Q0 d1 1 3 o\nx2 Q0 d2 1 1 o\n",
    )
    .unwrap();
    for (run, expected) in [
        ("empty.trec", "run empty is empty"),
        (
            "other.trec",
            "run other shares no question with the judgments",
        ),
    ] {
        let out = freshstack_in(
            &["eval", "--queries", "queries.jsonl", "--run", run],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(
            stderr.contains("WARN") && stderr.contains(expected),
            "{stderr}"
        );
    }
    // A run sharing questions: no such warning.
    let out = freshstack_in(
        &["eval", "--queries", "queries.jsonl", "--run", "a.trec"],
        dir.path(),
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("WARN"));
}

#[test]
fn eval_warns_about_a_repeated_query_id_naming_file_and_line() {
    let dir = setup();
    let first = QUERIES.lines().next().unwrap();
    std::fs::write(
        dir.path().join("twice.jsonl"),
        format!("{QUERIES}\n{first}\n"),
    )
    .unwrap();
    let out = freshstack_in(
        &["eval", "--queries", "twice.jsonl", "--run", "a.trec"],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("twice.jsonl:4:") && stderr.contains("\"q1\"") && stderr.contains("line 1"),
        "{stderr}"
    );
}

#[test]
fn fuse_rejects_infinite_scores_and_a_bad_rrf_k() {
    let dir = setup();
    std::fs::write(
        dir.path().join("inf.trec"),
        "q1 Q0 d1 1 1e400 i\nq1 Q0 d2 2 1 i\n",
    )
    .unwrap();
    let out = freshstack_in(
        &["fuse", "a.trec", "inf.trec", "--out", "f.trec"],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("inf.trec") && stderr.contains("\"d1\""),
        "{stderr}"
    );
    assert!(!dir.path().join("f.trec").exists());
    let out = freshstack_in(
        &[
            "fuse", "a.trec", "inf.trec", "--method", "rrf", "--out", "f.trec",
        ],
        dir.path(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !std::fs::read_to_string(dir.path().join("f.trec"))
            .unwrap()
            .contains("NaN")
    );
    let out = freshstack_in(
        &[
            "fuse",
            "a.trec",
            "b.trec",
            "--method",
            "rrf",
            "--rrf-k=-1",
            "--out",
            "g.trec",
        ],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("--rrf-k"),
        "{stderr}"
    );
}
