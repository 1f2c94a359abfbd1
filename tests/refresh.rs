//! `freshstack refresh` against the mock OpenAI-compatible server (`support`), whose answers
//! are a function of each question / (nugget, document) alone, so batching does not matter:
//! a refresh of an old build with newer inputs exports exactly the bytes of a fresh build of
//! those inputs with an empty cache, while asking the LLM only for the new work (the number of
//! calls asserted exactly), leaves the old build untouched, resumes without a call (also after
//! a SIGKILL), and refuses what it cannot do.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use freshstack::dataset::{Document, JudgmentRecord, PoolRow, Question, read_jsonl};
use serde_json::Value;

use crate::build::exported;
use crate::support::MockServer;
use crate::util::{copy_dir, files_under, freshstack, run_ok, write};

/// (id, date, title, body, answer).
type Row<'a> = (&'a str, &'a str, &'a str, &'a str, &'a str);

fn write_questions(dir: &Path, rows: &[Row<'_>]) {
    let mut text = String::new();
    for (id, date, title, body, answer) in rows {
        text.push_str(
            &serde_json::json!({
                "query_id": id, "query_title": title, "query_text": body,
                "answer_id": format!("{id}0"), "answer_text": answer,
                "metadata": {"date": format!("{date}T10:00:00.000"), "tags": ["demo"]},
            })
            .to_string(),
        );
        text.push('\n');
    }
    write(dir, "questions.jsonl", text);
}

/// The files both checkouts have, byte for byte.
fn unchanged_files(repo: &Path) {
    write(
        repo,
        "docs/cache.md",
        "# Cache\n\nSet ALPHA in the cache config to enable the store.\n\n## Drivers\n\nThe \
         BETA driver keeps entries in memory.\n",
    );
    write(
        repo,
        "src/routes.php",
        "<?php\n// Routes map URLs to controllers.\nRoute::get('/cache', fn () => cache('x'));\n",
    );
    write(
        repo,
        "docs/events.md",
        "# Events\n\nA cache hit fires the BETA event; listeners need ALPHA to be registered.\n",
    );
    write(
        repo,
        "docs/config.md",
        "# Configuration\n\nThe cache and queue connections are set in config files.\n",
    );
    write(
        repo,
        "src/Listener.php",
        "<?php\n// Logs cache hits.\nclass Listener { public function handle($event) {} }\n",
    );
}

/// The old inputs: four questions of 2024 (one from January), a repository of seven files.
fn old_inputs(dir: &Path) {
    write_questions(
        dir,
        &[
            (
                "11",
                "2024-01-10",
                "How do I enable the cache store",
                "My cache config does nothing.",
                "Set ALPHA.",
            ),
            (
                "12",
                "2024-05-01",
                "Why do my queue jobs never run",
                "Jobs stay pending forever.",
                "Start workers.",
            ),
            (
                "13",
                "2024-05-02",
                "How are routes matched",
                "What maps a URL to a controller?",
                "Route::get.",
            ),
            (
                "16",
                "2024-06-01",
                "How do I listen to cache events",
                "I want to log every cache hit.",
                "Register a listener.",
            ),
        ],
    );
    let repo = dir.join("repo");
    unchanged_files(&repo);
    write(
        &repo,
        "docs/queue.md",
        "# Queue\n\nQueues need ALPHA workers and a BETA connection to run jobs.\n",
    );
    write(
        &repo,
        "README.md",
        "# Demo\n\nA demo application with a cache and a queue.\n",
    );
}

/// The newer inputs: question 11 is before the window, 12 unchanged, 13 with a new body, 16
/// with a new answer, 14 and 15 new; in the repository one file changed, one added, one
/// removed.
fn new_inputs(dir: &Path) {
    write_questions(
        dir,
        &[
            (
                "11",
                "2024-01-10",
                "How do I enable the cache store",
                "My cache config does nothing.",
                "Set ALPHA.",
            ),
            (
                "12",
                "2024-05-01",
                "Why do my queue jobs never run",
                "Jobs stay pending forever.",
                "Start workers.",
            ),
            (
                "13",
                "2024-05-02",
                "How are routes matched",
                "Which class maps a URL to a controller action?",
                "Route::get.",
            ),
            (
                "16",
                "2024-06-01",
                "How do I listen to cache events",
                "I want to log every cache hit.",
                "Register a listener for the BETA event with ALPHA.",
            ),
            (
                "14",
                "2024-08-20",
                "How do I send mail from a queue job",
                "Mails are never delivered.",
                "Use the BETA mailer with ALPHA.",
            ),
            (
                "15",
                "2024-09-03",
                "Which cache driver keeps entries in memory",
                "I need a fast driver.",
                "The BETA driver.",
            ),
        ],
    );
    let repo = dir.join("repo");
    unchanged_files(&repo);
    write(
        &repo,
        "docs/queue.md",
        "# Queue\n\nQueues need ALPHA workers, a BETA connection and a retry policy to run \
         jobs.\n",
    );
    write(
        &repo,
        "docs/mail.md",
        "# Mail\n\nThe BETA mailer sends mail from queue jobs once ALPHA is set.\n",
    );
}

fn config(dir: &Path, name: &str, url: &str, model: &str, extra: &str) -> PathBuf {
    write(
        dir,
        name,
        format!(
            r#"topic = "demo"
[questions]
file = "questions.jsonl"
[corpus]
max_tokens = 64
[corpus.repositories]
"acme/demo" = "repo"
[retrieval]
pool_depth = 3
fusion_depth = 10
[llm]
base_url = "{url}"
model = "{model}"
concurrency = 1
max_retries = 0
[judge]
docs_per_call = 2
# No calls asked twice: the tests count the calls a refresh makes.
self_check = 0
{extra}"#
        ),
    )
}

const WINDOW: &str = "[refresh]\nretire_before = \"2024-03-01\"\n";

fn build(config: &Path, out: &Path) -> String {
    let output = run_ok(&[
        "build",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn refresh(from: &Path, config: &Path, out: &Path) -> std::process::Output {
    freshstack(&[
        "refresh",
        "--from",
        from.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
}

/// `freshstack refresh` started in the background, its output discarded: for a test that kills
/// it or holds its LLM calls while it runs.
fn spawn_refresh(from: &Path, config: &Path, out: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(["refresh", "--from"])
        .arg(from)
        .arg("--config")
        .arg(config)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The judge calls a build with this pool makes when the documents of `carried` need none:
/// per question with nuggets, its other pool documents in batches of two.
fn judge_calls(out: &Path, carried: &BTreeSet<(String, String)>) -> usize {
    let pool: Vec<PoolRow> = read_jsonl(out.join("work/pool.jsonl")).unwrap();
    pool.iter()
        .map(|row| {
            let asked = row
                .doc_ids
                .iter()
                .filter(|doc| !carried.contains(&(row.query_id.to_string(), doc.to_string())))
                .count();
            asked.div_ceil(2)
        })
        .sum()
}

fn texts(out: &Path) -> HashMap<String, String> {
    read_jsonl::<Document>(out.join("work/corpus.jsonl"))
        .unwrap()
        .into_iter()
        .map(|d| (d.id, d.text))
        .collect()
}

#[test]
fn a_refresh_exports_what_a_fresh_build_does_asking_only_for_the_new_work() {
    let dir = tempfile::tempdir().unwrap();
    let (old_in, new_in) = (dir.path().join("old-inputs"), dir.path().join("new-inputs"));
    old_inputs(&old_in);
    new_inputs(&new_in);

    let old_server = MockServer::start(false);
    let old = dir.path().join("old");
    build(
        &config(&old_in, "demo.toml", &old_server.url, "mock-model", ""),
        &old,
    );
    let old_files = files_under(&old);

    // The reference: a fresh build of the new inputs, empty cache.
    let fresh_server = MockServer::start(false);
    let fresh = dir.path().join("fresh");
    build(
        &config(
            &new_in,
            "fresh.toml",
            &fresh_server.url,
            "mock-model",
            WINDOW,
        ),
        &fresh,
    );

    let server = MockServer::start(false);
    let refreshed = dir.path().join("refreshed");
    let refresh_config = config(&new_in, "refresh.toml", &server.url, "mock-model", WINDOW);
    let output = refresh(&old, &refresh_config, &refreshed);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");

    // Byte-identical exports.
    let (a, b) = (exported(&refreshed), exported(&fresh));
    for name in [
        "corpus.jsonl",
        "queries.jsonl",
        "qrels/nuggets.qrels",
        "qrels/test.tsv",
        "filtering.json",
        "manifest.json",
    ] {
        assert!(a.contains_key(name), "{name} missing");
        assert!(a[name] == b[name], "{name} differs from the fresh build's");
    }
    let runs = |files: &BTreeMap<String, Vec<u8>>| -> BTreeMap<String, Vec<u8>> {
        files
            .iter()
            .filter(|(k, _)| k.starts_with("runs/"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    assert_eq!(runs(&a).len(), 5);
    assert!(runs(&a) == runs(&b), "runs differ");
    let queries: Vec<Question> = read_jsonl(refreshed.join("queries.jsonl")).unwrap();
    assert!(queries.iter().any(|q| q.query_id == "12"), "{stderr}");
    assert!(queries.iter().all(|q| q.query_id != "11"), "11 is retired");

    // The calls: nuggets of the new (14, 15) and changed (13, 16) questions, variants of the
    // new ones and of 13 (16's title and body are unchanged), and the judge batches of the
    // (question, document) pairs not judged before: questions 12 and 16 have the same title,
    // body and nuggets as before (the mock's nuggets follow the title, so 16's new answer gives
    // the same ones), and their pooled documents whose text is unchanged were judged in the
    // old build.
    let (old_texts, new_texts) = (texts(&old), texts(&refreshed));
    let old_judgments: Vec<JudgmentRecord> = read_jsonl(old.join("work/judgments.jsonl")).unwrap();
    let pool: Vec<PoolRow> = read_jsonl(refreshed.join("work/pool.jsonl")).unwrap();
    let pooled: BTreeSet<(String, String)> = pool
        .iter()
        .flat_map(|row| {
            row.doc_ids
                .iter()
                .map(|d| (row.query_id.to_string(), d.clone()))
        })
        .collect();
    let carried: BTreeSet<(String, String)> = old_judgments
        .iter()
        .filter(|j| j.query_id == "12" || j.query_id == "16")
        .filter(|j| new_texts.get(&j.doc_id) == old_texts.get(&j.doc_id))
        .map(|j| (j.query_id.to_string(), j.doc_id.clone()))
        .filter(|pair| pooled.contains(pair))
        .collect();
    for q in ["12", "16"] {
        assert!(
            carried.iter().any(|(id, _)| id == q),
            "nothing of {q} carried"
        );
    }
    let judge = judge_calls(&refreshed, &carried);
    assert_eq!(server.requests(), 4 + 3 + judge, "{stderr}");
    // Every judge batch sent holds only documents never judged for its question.
    let titles: HashMap<String, String> = read_jsonl::<Question>(new_in.join("questions.jsonl"))
        .unwrap()
        .into_iter()
        .map(|q| (q.query_title, q.query_id.to_string()))
        .collect();
    let mut judged = 0;
    for body in server.bodies() {
        let prompt = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "user")
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string();
        let Some(documents) = prompt.split("\nDocuments:\n").nth(1) else {
            continue;
        };
        let title = prompt
            .lines()
            .find_map(|l| l.strip_prefix("Question title: "))
            .unwrap();
        let qid = &titles[title];
        for line in documents.lines().filter(|l| l.starts_with("[D")) {
            let doc = line.split_once("] ").unwrap().1;
            assert!(
                !carried.contains(&(qid.clone(), doc.to_string())),
                "{qid} {doc} re-judged"
            );
            judged += 1;
        }
    }
    assert!(judged > 0);
    // A fresh build asks for all of it (five questions).
    assert_eq!(
        fresh_server.requests(),
        5 + 5 + judge_calls(&fresh, &BTreeSet::new())
    );
    assert!(server.requests() < fresh_server.requests());

    // changes.json says the same.
    let changes: Value =
        serde_json::from_slice(&std::fs::read(refreshed.join("changes.json")).unwrap()).unwrap();
    assert_eq!(changes["retire_before"], "2024-03-01");
    assert_eq!(
        changes["questions"]["added"],
        serde_json::json!(["14", "15"])
    );
    assert_eq!(changes["questions"]["retired"], serde_json::json!(["11"]));
    assert_eq!(changes["questions"]["kept"], 3);
    assert_eq!(
        changes["questions"]["changed"],
        serde_json::json!(["13", "16"])
    );
    let files = &changes["repositories"]["acme/demo"]["files"];
    assert_eq!(
        (
            &files["added"],
            &files["removed"],
            &files["changed"],
            &files["unchanged"]
        ),
        (&1.into(), &1.into(), &1.into(), &5.into()),
        "{changes}"
    );
    let llm = &changes["llm"];
    assert_eq!(llm["nuggets"]["requests"], 4);
    assert_eq!(llm["nuggets"]["carried"], 1);
    assert_eq!(llm["variants"]["requests"], 3);
    assert_eq!(llm["variants"]["carried"], 2);
    assert_eq!(llm["judge"]["requests"], judge);
    assert_eq!(llm["judge"]["carried"], carried.len());
    // Two nuggets per question: two rows per carried pair.
    assert_eq!(changes["judgments"]["reused"], 2 * carried.len());
    let drift = changes["drift"]["runs"].as_array().unwrap();
    assert_eq!(drift.len(), 5, "{changes}");
    assert!(changes["drift"]["questions"].as_u64().unwrap() >= 1);
    for row in drift {
        assert!(row["old"]["coverage@20"].is_f64() && row["new"]["alpha_ndcg@10"].is_f64());
        assert!(row["delta"]["recall@50"].is_f64(), "{row}");
    }
    let html = std::fs::read_to_string(refreshed.join("report.html")).unwrap();
    assert!(html.contains("id=\"changes-title\""), "no Changes section");
    let fresh_html = std::fs::read_to_string(fresh.join("report.html")).unwrap();
    assert!(!fresh_html.contains("changes-title"));

    // The old build is untouched.
    assert!(files_under(&old) == old_files, "the old build was modified");

    // A rerun resumes: no call, the same bytes.
    let before = (files_under(&refreshed), server.requests());
    let again = refresh(&old, &refresh_config, &refreshed);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(server.requests(), before.1);
    let after = files_under(&refreshed);
    let changed: Vec<&PathBuf> = after
        .iter()
        .filter(|(k, v)| before.0.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    assert!(changed.is_empty(), "{changed:?}");

    // Killed (SIGKILL) in the middle of its LLM calls and rerun, a refresh ends with the same
    // files as the uninterrupted one and answers no call twice.
    let server = MockServer::start(false);
    server.state.hold_after.store(5, Ordering::SeqCst);
    let killed_config = config(&new_in, "killed.toml", &server.url, "mock-model", WINDOW);
    let killed = dir.path().join("killed");
    let mut child = spawn_refresh(&old, &killed_config, &killed);
    let start = Instant::now();
    while server.requests() <= 5 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never got there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    server.state.hold_after.store(usize::MAX, Ordering::SeqCst);
    let resumed = refresh(&old, &killed_config, &killed);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(
        exported(&killed) == exported(&refreshed),
        "the resumed refresh differs"
    );
    assert_eq!(
        server.max_answers_per_request(),
        1,
        "a call was answered twice"
    );
}

#[test]
fn a_refresh_refuses_what_would_make_old_results_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let (old_in, new_in) = (dir.path().join("old-inputs"), dir.path().join("new-inputs"));
    old_inputs(&old_in);
    new_inputs(&new_in);
    let server = MockServer::start(false);
    let old = dir.path().join("old");
    build(
        &config(&old_in, "demo.toml", &server.url, "mock-model", ""),
        &old,
    );
    let old_files = files_under(&old);
    let calls = server.requests();
    let out = dir.path().join("new");
    let refused = |config: &Path, from: &Path, out: &Path, expected: &[&str]| {
        let output = refresh(from, config, out);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        for text in expected {
            assert!(stderr.contains(text), "{text}: {stderr}");
        }
    };
    // Another model: its judgments are not this one's.
    let other_model = config(&new_in, "other.toml", &server.url, "other-model", WINDOW);
    refused(
        &other_model,
        &old,
        &out,
        &["llm.model", "mock-model", "freshstack build"],
    );
    // Other judge settings.
    let per_call = write(
        &new_in,
        "per-call.toml",
        std::fs::read_to_string(config(
            &new_in,
            "base.toml",
            &server.url,
            "mock-model",
            WINDOW,
        ))
        .unwrap()
        .replace("docs_per_call = 2", "docs_per_call = 3"),
    );
    refused(&per_call, &old, &out, &["judge.docs_per_call"]);
    // Into itself, and from a directory that is not a finished build.
    let same = config(&new_in, "same.toml", &server.url, "mock-model", WINDOW);
    refused(&same, &old, &old, &["old build"]);
    refused(&same, &old, &old.join("next"), &["inside it"]);
    refused(&same, &new_in, &out, &["not a finished build"]);
    // An old build whose work files changed after its export (a later build into it that did
    // not finish).
    let tampered = dir.path().join("tampered");
    copy_dir(&old, &tampered);
    let variants = tampered.join("work/variants.jsonl");
    let mut text = std::fs::read_to_string(&variants).unwrap();
    text.push('\n');
    std::fs::write(&variants, text).unwrap();
    refused(
        &same,
        &tampered,
        &out,
        &[
            "not a finished build",
            "work/variants.jsonl changed after its export",
        ],
    );
    assert!(!out.exists(), "a refused refresh wrote {}", out.display());
    assert!(files_under(&old) == old_files);
    assert_eq!(server.requests(), calls);
}

/// Runs `freshstack args` and fails the test when it has not ended within `limit` (then it is
/// killed): a second run that went on instead of stopping would wait on a held call forever.
fn freshstack_within(args: &[&str], limit: Duration) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            panic!(
                "{args:?} still ran after {limit:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Issue 34, item 9: two refreshes into one directory raced (every LLM call made twice, one
/// failing with ENOENT in `work/runs`, the stage manifest left stale). A second refresh onto
/// an output a first refresh is writing (held by the server in its nugget stage) now fails at
/// once, in one line, without a call or a changed file; the first one's lock ends with it.
#[test]
fn a_second_refresh_on_the_same_directory_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (old_in, new_in) = (dir.path().join("old-inputs"), dir.path().join("new-inputs"));
    old_inputs(&old_in);
    new_inputs(&new_in);
    let old_server = MockServer::start(false);
    let old = dir.path().join("old");
    build(
        &config(&old_in, "demo.toml", &old_server.url, "mock-model", ""),
        &old,
    );

    // The first refresh gets one answer; its second call is held unanswered.
    let server = MockServer::start(false);
    server.state.hold_after.store(1, Ordering::SeqCst);
    let refresh_config = config(&new_in, "refresh.toml", &server.url, "mock-model", WINDOW);
    let out = dir.path().join("refreshed");
    let mut first = spawn_refresh(&old, &refresh_config, &out);
    let start = Instant::now();
    while server.requests() < 2 {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first refresh ended"
        );
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "never got there"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let before = (files_under(&out), files_under(&old));
    let second = freshstack_within(
        &[
            "refresh",
            "--from",
            old.to_str().unwrap(),
            "--config",
            refresh_config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success(), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another freshstack run is writing {}",
            out.display()
        )),
        "{stderr}"
    );
    assert_eq!(server.requests(), 2, "the second refresh called the LLM");
    assert!(files_under(&out) == before.0, "the second refresh wrote");
    assert!(files_under(&old) == before.1, "the old build was modified");

    // Killed, the first refresh leaves its lock behind as a free file: a rerun finishes,
    // answering no call twice.
    first.kill().unwrap();
    first.wait().unwrap();
    server.state.hold_after.store(usize::MAX, Ordering::SeqCst);
    let resumed = refresh(&old, &refresh_config, &out);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert_eq!(
        server.max_answers_per_request(),
        1,
        "a call was answered twice"
    );
}
