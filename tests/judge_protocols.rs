//! The judge's verdicts beyond the paper's batch (`--verdict terms|probability|quote`, the
//! term-coverage gate) and `freshstack calibrate agreement`, end to end through the binary:
//! real behaviour on a small hand-made pool, the real SmolLM2 GGUF for the probability
//! verdict (skipped loudly without it), judge-dev's reference labels for the agreement (skipped
//! loudly without `../shared`), and the refusals of bad settings and bad label files.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::FakeServer;
use crate::util::{freshstack, model_path, shared_dir, write};

/// A question, two nuggets and three documents: `d1` names the first nugget's flag and value,
/// `d2` the second nugget's setting, `d3` neither.
fn pool_fixture(dir: &Path) -> [PathBuf; 4] {
    let questions = write(
        dir,
        "questions.jsonl",
        r#"{"query_id":"7","query_title":"How do I make documents shorter?","query_text":"My documents are too long for the encoder.","answer_id":"8","answer_text":"Pass --max-tokens 512 to the corpus command. Set tokenizer = o200k_base to count with GPT-4o's vocabulary.","metadata":{"date":"2026-01-01T00:00:00.000","tags":["x"]}}
"#,
    );
    let nuggets = write(
        dir,
        "nuggets.jsonl",
        r#"{"query_id":"7","nuggets":[{"_id":"7_0","text":"Pass `--max-tokens 512` to the corpus command."},{"_id":"7_1","text":"Set `tokenizer = o200k_base` for the GPT-4o vocabulary."}]}
"#,
    );
    let corpus = write(
        dir,
        "corpus.jsonl",
        concat!(
            r#"{"_id":"d1","title":"","text":"freshstack corpus --max-tokens 512 caps each document at 512 tokens.","metadata":{}}"#,
            "\n",
            r#"{"_id":"d2","title":"","text":"[corpus]\ntokenizer = \"o200k_base\"  # the GPT-4o vocabulary","metadata":{}}"#,
            "\n",
            r#"{"_id":"d3","title":"","text":"Documents are JSON lines with an id and a text.","metadata":{}}"#,
            "\n"
        ),
    );
    let pool = write(
        dir,
        "pool.jsonl",
        "{\"query_id\": \"7\", \"doc_ids\": [\"d1\", \"d2\", \"d3\"]}\n",
    );
    [questions, nuggets, corpus, pool]
}

fn judge_args<'a>(files: &'a [PathBuf; 4], out: &'a Path) -> Vec<&'a str> {
    let [questions, nuggets, corpus, pool] = files;
    vec![
        "judge",
        "--questions",
        questions.to_str().unwrap(),
        "--nuggets",
        nuggets.to_str().unwrap(),
        "--corpus",
        corpus.to_str().unwrap(),
        "--pool",
        pool.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]
}

fn rows(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn supported(rows: &[Value]) -> Vec<(String, String)> {
    rows.iter()
        .filter(|r| r["supported"] == true)
        .map(|r| {
            (
                r["nugget_id"].as_str().unwrap().to_string(),
                r["doc_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn terms_verdict_needs_no_model_and_finds_the_documents_that_name_the_fact() {
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let out = dir.path().join("judgments.jsonl");
    let mut args = judge_args(&files, &out);
    args.extend(["--verdict", "terms", "--threshold", "0.5"]);
    let run = freshstack(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let judged = rows(&out);
    assert_eq!(judged.len(), 6, "2 nuggets x 3 documents");
    assert_eq!(
        supported(&judged),
        [
            ("7_0".to_string(), "d1".to_string()),
            ("7_1".to_string(), "d2".to_string())
        ]
    );
    let d3 = judged
        .iter()
        .find(|r| r["doc_id"] == "d3" && r["nugget_id"] == "7_0")
        .unwrap();
    assert_eq!(d3["term_coverage"], 0.0);
    assert!(d3.get("probability").is_none());
    assert!(
        d3["rationale"]
            .as_str()
            .unwrap()
            .starts_with("0 of 5 nugget terms"),
        "{d3}"
    );
    // The same bytes again.
    let first = std::fs::read(&out).unwrap();
    assert!(freshstack(&args).status.success());
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn bad_judge_settings_are_refused_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let out = dir.path().join("judgments.jsonl");
    for (extra, expect) in [
        (
            &["--verdict", "terms", "--threshold", "1.5"][..],
            "--threshold",
        ),
        (
            &["--verdict", "terms", "--min-term-coverage=-0.1"][..],
            "--min-term-coverage",
        ),
        (
            &["--verdict", "maybe"][..],
            "expected generate, probability, terms, quote or graded",
        ),
        (&["--verdict", "terms", "--votes", "3"][..], "--votes"),
        (&["--verdict", "terms", "--votes", "0"][..], "--votes"),
    ] {
        let mut args = judge_args(&files, &out);
        args.extend(extra);
        let run = freshstack(&args);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{extra:?}");
        assert!(stderr.contains(expect), "{extra:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.exists(), "{extra:?} wrote an output");
    }
}

/// A server that answers without `logprobs`: the first call fails with one line naming the
/// server, and nothing is written.
#[test]
fn probability_verdict_refuses_a_server_without_log_probabilities() {
    let server = FakeServer::start(|_| "yes".to_string());
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let out = dir.path().join("judgments.jsonl");
    let mut args = judge_args(&files, &out);
    args.extend([
        "--verdict",
        "probability",
        "--llm-base-url",
        &server.url,
        "--llm-model",
        "m",
        "--no-cache",
    ]);
    let run = freshstack(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(stderr.contains("without log-probabilities"), "{stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default();
    assert!(last.starts_with("error: "), "{stderr}");
    assert!(last.contains(&server.url), "{stderr}");
    assert!(!out.exists());
}

/// The `quote` verdict: evidence before the verdict, and a quote the document does not hold
/// (a model inventing evidence) turns "supported" into not supported.
#[test]
fn quote_verdict_keeps_only_verdicts_whose_quote_is_in_the_document() {
    let server = crate::support::MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let [_, _, corpus, pool] = &files;
    let mut text = std::fs::read_to_string(corpus).unwrap();
    text.push_str(
        r#"{"_id":"d4","title":"","text":"[invent] The changelog lists the releases.","metadata":{}}"#,
    );
    text.push('\n');
    std::fs::write(corpus, text).unwrap();
    std::fs::write(
        pool,
        "{\"query_id\": \"7\", \"doc_ids\": [\"d1\", \"d2\", \"d3\", \"d4\"]}\n",
    )
    .unwrap();
    let out = dir.path().join("judgments.jsonl");
    let mut args = judge_args(&files, &out);
    args.extend([
        "--verdict",
        "quote",
        "--llm-base-url",
        &server.url,
        "--llm-model",
        "mock-model",
        "--no-cache",
    ]);
    let run = freshstack(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let judged = rows(&out);
    assert_eq!(judged.len(), 8);
    assert_eq!(
        supported(&judged),
        [("7_0".into(), "d1".into()), ("7_1".into(), "d2".into())]
    );
    for row in &judged {
        let doc = row["doc_id"].as_str().unwrap();
        if doc == "d4" {
            assert_eq!(row["quote"]["verified"], false, "{row}");
            assert_eq!(row["rationale"], "the quote is not in the document");
        } else if doc == "d3" {
            assert!(row.get("quote").is_none(), "{row}");
        }
    }
    // Every call asked for the evidence schema, the quote before the verdict.
    let schemas: Vec<Value> = server
        .bodies()
        .iter()
        .map(|b| b["response_format"]["json_schema"]["schema"].clone())
        .collect();
    assert_eq!(schemas.len(), 8);
    assert!(
        schemas
            .iter()
            .all(|s| s["required"] == json!(["quote", "supported"]))
    );
}

/// A judge biased by position: the first document of every call supports every nugget; the
/// others support a nugget when they name its flag (`--max-tokens`, `o200k_base`).
fn first_position_judge(messages: &[freshstack::llm::Message]) -> String {
    let user = &messages
        .iter()
        .find(|m| m.content.contains("\nDocuments:\n"))
        .unwrap()
        .content;
    let documents = user.split("\nDocuments:\n").nth(1).unwrap();
    let documents = documents
        .split("\nReply with one JSON object")
        .next()
        .unwrap();
    let judgments: Vec<Value> = documents
        .split("[D")
        .skip(1)
        .enumerate()
        .map(|(i, text)| {
            json!({
                "doc": format!("D{}", i + 1),
                "reasoning": "read",
                "supported": {
                    "N1": i == 0 || text.contains("--max-tokens"),
                    "N2": i == 0 || text.contains("o200k_base"),
                },
            })
        })
        .collect();
    json!({ "judgments": judgments }).to_string()
}

/// `--votes 3`: each call asked three times, the documents shuffled after the first; every row
/// keeps its three votes and takes their majority, and the summary gives the second vote's
/// agreement with the first.
#[test]
fn votes_shuffle_the_documents_and_take_the_majority() {
    let server = FakeServer::start(first_position_judge);
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let out = dir.path().join("judgments.jsonl");
    let summary = dir.path().join("summary.json");
    let mut args = judge_args(&files, &out);
    args.extend([
        "--votes",
        "3",
        "--llm-base-url",
        &server.url,
        "--llm-model",
        "m",
        "--no-cache",
        "--summary",
        summary.to_str().unwrap(),
    ]);
    let run = freshstack(&args);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(stderr.contains("self-consistency"), "{stderr}");
    assert_eq!(
        server.requests.load(std::sync::atomic::Ordering::SeqCst),
        3,
        "one call of 3 documents, asked 3 times"
    );
    let judged = rows(&out);
    assert_eq!(judged.len(), 6);
    for row in &judged {
        let votes: Vec<bool> = row["votes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_bool().unwrap())
            .collect();
        assert_eq!(votes.len(), 3, "{row}");
        let yes = votes.iter().filter(|&&v| v).count();
        assert_eq!(row["supported"], yes >= 2, "{row}");
        if row["doc_id"] == "d1" {
            // First in pool order: the biased first vote says yes to both nuggets.
            assert!(votes[0], "{row}");
        }
    }
    // A document that names a nugget's flag wins every vote, wherever it stands.
    let d1_n1 = judged
        .iter()
        .find(|r| r["doc_id"] == "d1" && r["nugget_id"] == "7_0")
        .unwrap();
    assert_eq!(d1_n1["votes"], json!([true, true, true]));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let kappa = summary["self_consistency"].as_f64().unwrap();
    assert!((-1.0..=1.0).contains(&kappa), "{summary}");
    // Seeded shuffles: the same bytes again.
    let first = std::fs::read(&out).unwrap();
    assert!(freshstack(&args).status.success());
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

/// One vote: the self-check asks a seeded sample of the calls again with the documents
/// shuffled (here, at share 1, the only call), keeps those answers as `recheck` beside labels
/// that stay the first answer's, and gives their agreement as the self-consistency;
/// `--self-check 0` asks once.
#[test]
fn self_check_re_asks_a_sample_shuffled_without_changing_labels() {
    let server = FakeServer::start(first_position_judge);
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let run_judge = |out: &std::path::Path, extra: &[&str]| {
        let summary = out.with_extension("summary.json");
        let mut args = judge_args(&files, out);
        args.extend([
            "--llm-base-url",
            &server.url,
            "--llm-model",
            "m",
            "--no-cache",
            "--summary",
            summary.to_str().unwrap(),
        ]);
        args.extend(extra);
        let run = freshstack(&args);
        let stderr = String::from_utf8_lossy(&run.stderr).to_string();
        assert!(run.status.success(), "{stderr}");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        (stderr, summary)
    };
    let requests = || server.requests.load(std::sync::atomic::Ordering::SeqCst);
    let checked = dir.path().join("checked.jsonl");
    let (stderr, summary) = run_judge(&checked, &["--self-check", "1"]);
    assert!(stderr.contains("self-consistency"), "{stderr}");
    assert_eq!(requests(), 2, "one call, asked again shuffled");
    assert!(summary["self_consistency"].as_f64().is_some(), "{summary}");
    let unchecked = dir.path().join("unchecked.jsonl");
    let (stderr, summary) = run_judge(&unchecked, &["--self-check", "0"]);
    assert_eq!(requests(), 3, "asked once");
    assert!(!stderr.contains("self-consistency"), "{stderr}");
    assert!(summary.get("self_consistency").is_none(), "{summary}");
    let (checked, unchecked) = (rows(&checked), rows(&unchecked));
    assert_eq!(checked.len(), unchecked.len());
    for (with, without) in checked.iter().zip(&unchecked) {
        assert_eq!(with["supported"], without["supported"], "{with}");
        assert!(with["recheck"].is_boolean(), "{with}");
        assert!(without.get("recheck").is_none(), "{without}");
    }
}

#[test]
#[cfg_attr(
    not(has_model_smollm2),
    ignore = "needs models/SmolLM2-135M-Instruct.Q4_1.gguf: scripts/setup-llm.sh"
)]
fn graded_verdict_reads_three_grades_from_a_real_model() {
    let gguf = model_path("SmolLM2-135M-Instruct.Q4_1.gguf", "scripts/setup-llm.sh");
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let out = dir.path().join("judgments.jsonl");
    let mut args = judge_args(&files, &out);
    args.extend([
        "--verdict",
        "graded",
        "--threshold",
        "0.5",
        "--term-weight",
        "0",
        "--llm-gguf",
        gguf.to_str().unwrap(),
        "--no-cache",
    ]);
    let run = freshstack(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let judged = rows(&out);
    assert_eq!(judged.len(), 6);
    for row in &judged {
        let expected = row["probability"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&expected), "{row}");
        assert_eq!(
            row["supported"].as_bool().unwrap(),
            expected >= 0.5,
            "{row}"
        );
        let grade = row["grade"].as_str().unwrap();
        assert!(["full", "partial", "none"].contains(&grade), "{row}");
        let rationale = row["rationale"].as_str().unwrap();
        assert!(
            rationale.starts_with(&format!("grade {grade}, expected ")),
            "{row}"
        );
    }
    let first = std::fs::read(&out).unwrap();
    assert!(freshstack(&args).status.success());
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
#[cfg_attr(
    not(has_model_smollm2),
    ignore = "needs models/SmolLM2-135M-Instruct.Q4_1.gguf: scripts/setup-llm.sh"
)]
fn probability_verdict_reads_a_real_model_and_is_deterministic() {
    let gguf = model_path("SmolLM2-135M-Instruct.Q4_1.gguf", "scripts/setup-llm.sh");
    let dir = tempfile::tempdir().unwrap();
    let files = pool_fixture(dir.path());
    let out = dir.path().join("judgments.jsonl");
    let cache = dir.path().join("cache.sqlite");
    let mut args = judge_args(&files, &out);
    args.extend([
        "--verdict",
        "probability",
        "--threshold",
        "0.5",
        "--term-weight",
        "0",
        "--llm-gguf",
        gguf.to_str().unwrap(),
        "--llm-cache",
        cache.to_str().unwrap(),
    ]);
    let run = freshstack(&args);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let judged = rows(&out);
    assert_eq!(judged.len(), 6);
    for row in &judged {
        let p = row["probability"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&p), "{row}");
        assert_eq!(row["supported"].as_bool().unwrap(), p >= 0.5, "{row}");
        assert!(row["rationale"].as_str().unwrap().starts_with("P(yes) "));
    }
    let first = std::fs::read(&out).unwrap();
    // From the cache: no model call, the same bytes.
    let again = freshstack(&args);
    assert!(String::from_utf8_lossy(&again.stderr).contains("6 answers from the cache"));
    assert_eq!(std::fs::read(&out).unwrap(), first);
    // Without the cache, computed again: the same bytes.
    let mut fresh = judge_args(&files, &out);
    fresh.extend([
        "--verdict",
        "probability",
        "--threshold",
        "0.5",
        "--term-weight",
        "0",
        "--llm-gguf",
        gguf.to_str().unwrap(),
        "--no-cache",
    ]);
    assert!(freshstack(&fresh).status.success());
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn agreement_of_the_terms_judge_with_judge_dev_labels() {
    let Some(shared) = shared_dir() else {
        eprintln!(
            "SKIPPED agreement_of_the_terms_judge_with_judge_dev_labels: ../shared is absent"
        );
        return;
    };
    let dev = shared.join("judge-dev");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("judgments.jsonl");
    let path = |name: &str| dev.join(name).to_str().unwrap().to_string();
    let (questions, nuggets, corpus, pool, labels, review) = (
        path("questions.jsonl"),
        path("nuggets.jsonl"),
        path("corpus.jsonl"),
        path("pool.jsonl"),
        path("labels.jsonl"),
        path("system-nugget-review.jsonl"),
    );
    let run = freshstack(&[
        "judge",
        "--questions",
        &questions,
        "--nuggets",
        &nuggets,
        "--corpus",
        &corpus,
        "--pool",
        &pool,
        "--out",
        out.to_str().unwrap(),
        "--verdict",
        "terms",
        "--threshold",
        "0.4",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report = freshstack(&[
        "calibrate",
        "agreement",
        "--judgments",
        out.to_str().unwrap(),
        "--labels",
        &labels,
        "--review",
        &review,
        "--json",
    ]);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let all = &report["overall"];
    assert_eq!(all["pairs"], 1155);
    assert_eq!(report["only_in_labels"]["count"], 0);
    // The reference's 13.3% supported; the judge's kappa far above chance.
    assert!((all["reference_support_rate"].as_f64().unwrap() - 0.1333).abs() < 0.001);
    let kappa = all["kappa"].as_f64().unwrap();
    assert!(kappa > 0.3, "{all}");
    let ci = report["kappa_ci95"].as_array().unwrap();
    assert!(ci[0].as_f64().unwrap() < kappa && kappa < ci[1].as_f64().unwrap());
    assert_eq!(report["by_question"].as_array().unwrap().len(), 12);
    // The 0.5B model's own nuggets, reviewed (the README's Table 5 numbers).
    let t5 = &report["nugget_quality"];
    assert!(
        (t5["precision"]["macro"].as_f64().unwrap() - 0.592).abs() < 0.001,
        "{t5}"
    );
    assert!(
        (t5["recall"]["macro"].as_f64().unwrap() - 0.568).abs() < 0.001,
        "{t5}"
    );
}

#[test]
fn agreement_refuses_bad_label_files_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let judgments = write(
        dir.path(),
        "j.jsonl",
        "{\"query_id\": \"7\", \"nugget_id\": \"7_0\", \"doc_id\": \"d\", \"supported\": true, \"rationale\": \"\"}\n",
    );
    let ok =
        "{\"query_id\": \"7\", \"nugget_id\": \"7_0\", \"doc_id\": \"d\", \"supported\": true}\n";
    for (labels, expect) in [
        (format!("{ok}{ok}"), "labels.jsonl:2:"),
        (ok.replace("true", "\"yes\""), "labels.jsonl:1:"),
        (ok.replace("\"7_0\"", "\"9_0\""), "not a nugget of question"),
    ] {
        let path = write(dir.path(), "labels.jsonl", labels);
        let run = freshstack(&[
            "calibrate",
            "agreement",
            "--judgments",
            judgments.to_str().unwrap(),
            "--labels",
            path.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success());
        assert!(stderr.contains(expect), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
