//! `freshstack build` end to end against the mock OpenAI-compatible server of `llm.rs`: the
//! exported dataset, a rerun that makes no call, a build killed with SIGKILL mid-way that
//! resumes to the same bytes without answering any call twice, and config errors.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use freshstack::dataset::{Document, Question, read_jsonl};
use serde_json::Value;

use crate::support::MockServer;
use crate::util::{freshstack, freshstack_in, write};

/// A repository whose documents mention the facts the mock model's nuggets need.
fn tiny_repo(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    write(
        &repo,
        "docs/cache.md",
        "# Cache\n\nSet ALPHA in the cache config to enable the store.\n\n## Drivers\n\nThe BETA \
         driver keeps entries in memory.\n",
    );
    write(
        &repo,
        "docs/queue.md",
        "# Queue\n\nQueues need ALPHA workers and a BETA connection to run jobs.\n",
    );
    write(
        &repo,
        "src/routes.php",
        "<?php\n// Routes map URLs to controllers.\nRoute::get('/cache', fn () => cache('x'));\n",
    );
    write(
        &repo,
        "README.md",
        "# Demo\n\nA demo application with a cache and a queue.\n",
    );
    repo
}

fn questions(root: &Path) -> PathBuf {
    let rows = [
        (
            "11",
            "How do I enable the cache store",
            "My cache config does nothing.",
            "Set ALPHA.",
        ),
        (
            "12",
            "Why do my queue jobs never run",
            "Jobs stay pending forever.",
            "Start workers.",
        ),
        (
            "13",
            "How are routes matched",
            "What maps a URL to a controller?",
            "Route::get.",
        ),
    ];
    let mut text = String::new();
    for (id, title, body, answer) in rows {
        text.push_str(
            &serde_json::json!({
                "query_id": id, "query_title": title, "query_text": body,
                "answer_id": format!("{id}0"), "answer_text": answer,
                "metadata": {"date": "2024-05-01T10:00:00.000", "tags": ["demo"]},
            })
            .to_string(),
        );
        text.push('\n');
    }
    write(root, "questions.jsonl", text)
}

fn config(root: &Path, url: &str, extra: &str) -> PathBuf {
    tiny_repo(root);
    questions(root);
    write(
        root,
        "demo.toml",
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
model = "mock-model"
concurrency = 1
max_retries = 0
[judge]
docs_per_call = 2
{extra}"#
        ),
    )
}

/// Every exported file (not `work/`) with its bytes.
pub(crate) fn exported(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![out.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path
                .strip_prefix(out)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == "work" {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

fn build(config: &Path, out: &Path) -> std::process::Output {
    freshstack(&[
        "build",
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
}

/// [`build`], which must succeed (its stderr is the failure message).
fn build_ok(config: &Path, out: &Path) {
    let output = build(config, out);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn build_exports_a_judged_dataset_and_a_rerun_makes_no_call() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &server.url, "");
    let out = dir.path().join("out");
    let first = build(&config, &out);
    let stderr = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{stderr}");

    let queries: Vec<Question> = read_jsonl(out.join("queries.jsonl")).unwrap();
    assert!(!queries.is_empty(), "{stderr}");
    for q in &queries {
        assert_eq!(q.nuggets.len(), 2, "{}", q.query_id);
        for (n, nugget) in q.nuggets.iter().enumerate() {
            assert_eq!(nugget.id, format!("{}_{n}", q.query_id));
            // The mock judge supports N1 by documents with ALPHA, N2 by those with BETA; the
            // paper's filter keeps only questions where both nuggets found support.
            assert!(!nugget.relevant_corpus_ids.is_empty());
        }
    }
    let filtering: Value =
        serde_json::from_slice(&std::fs::read(out.join("filtering.json")).unwrap()).unwrap();
    assert_eq!(filtering["questions_in"], 3);
    assert_eq!(filtering["questions_out"], queries.len());
    let qrels = std::fs::read_to_string(out.join("qrels/nuggets.qrels")).unwrap();
    assert!(qrels.lines().all(|l| l.split(' ').count() == 4), "{qrels}");
    let tsv = std::fs::read_to_string(out.join("qrels/test.tsv")).unwrap();
    assert!(tsv.starts_with("query-id\tcorpus-id\tscore\n"));
    let mut runs: Vec<String> = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    runs.sort();
    assert_eq!(
        runs,
        [
            "inference.closed_book_answer.bm25.trec",
            "inference.question.bm25.trec",
            "inference.subquestions.bm25.trec",
            "oracle.answer.bm25.trec",
            "oracle.nuggets.bm25.trec",
        ]
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["topic"], "demo");
    let results: Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["rows"].as_array().unwrap().len(), 5, "{results}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        html.contains("<svg") && html.contains("oracle"),
        "report.html"
    );
    assert_eq!(manifest["repositories"][0]["name"], "acme/demo");

    // For benches/compare/export_vs_reference_loader.py: keep a copy of the export.
    if let Ok(keep) = std::env::var("FRESHSTACK_KEEP_BUILD") {
        let status = Command::new("cp")
            .args(["-r", out.to_str().unwrap(), &keep])
            .status()
            .unwrap();
        assert!(status.success());
    }

    // The exported dataset evaluates with `freshstack eval`.
    let eval = freshstack(&[
        "eval",
        "--queries",
        out.join("queries.jsonl").to_str().unwrap(),
        "--run",
        out.join("runs/oracle.nuggets.bm25.trec").to_str().unwrap(),
        "--json",
    ]);
    assert!(
        eval.status.success(),
        "{}",
        String::from_utf8_lossy(&eval.stderr)
    );
    let metrics: Value = serde_json::from_slice(&eval.stdout).unwrap();
    assert!(metrics["coverage@20"].as_f64().unwrap() > 0.0, "{metrics}");

    // A rerun skips every stage but the (cheap, deterministic) corpus and calls nobody.
    let files = exported(&out);
    let calls = server.requests();
    let second = build(&config, &out);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert!(second.status.success(), "{stderr}");
    assert_eq!(server.requests(), calls);
    assert!(stderr.contains("skipped: up to date"), "{stderr}");
    assert!(
        exported(&out) == files,
        "a rerun changed the exported files"
    );

    // A changed judging setting reruns judging and what follows, not the nugget stage.
    let config = write(
        dir.path(),
        "demo.toml",
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("docs_per_call = 2", "docs_per_call = 3"),
    );
    let third = build(&config, &out);
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert!(third.status.success(), "{stderr}");
    let line = |stage: &str| {
        stderr
            .lines()
            .find(|l| l.trim_start().starts_with(stage))
            .unwrap_or_default()
            .to_string()
    };
    assert!(line("nuggets").contains("skipped"), "{stderr}");
    assert!(!line("judge").contains("skipped"), "{stderr}");
}

#[test]
fn a_killed_build_resumes_to_the_same_bytes_without_repeating_a_call() {
    // Reference: one uninterrupted build.
    let reference_server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let config_path = config(dir.path(), &reference_server.url, "");
    let reference_out = dir.path().join("reference");
    let done = build(&config_path, &reference_out);
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let reference = exported(&reference_out);
    let total_calls = reference_server.requests();
    assert!(total_calls > 6, "{total_calls}");

    for hold_after in [2, total_calls - 2] {
        let server = MockServer::start(false);
        server.state.hold_after.store(hold_after, Ordering::SeqCst);
        let config_path = config(dir.path(), &server.url, "");
        let out = dir.path().join(format!("killed-{hold_after}"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_freshstack"))
            .args(["build", "--config", config_path.to_str().unwrap()])
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while server.requests() <= hold_after {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the build never got there"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        server.state.hold_after.store(usize::MAX, Ordering::SeqCst);
        let resumed = build(&config_path, &out);
        assert!(
            resumed.status.success(),
            "{}",
            String::from_utf8_lossy(&resumed.stderr)
        );
        let resumed = exported(&out);
        let differing: Vec<&String> = reference
            .keys()
            .filter(|k| resumed.get(*k) != reference.get(*k))
            .collect();
        assert!(
            differing.is_empty(),
            "killed after {hold_after} calls: {differing:?}"
        );
        assert_eq!(resumed.len(), reference.len());
        assert_eq!(
            server.max_answers_per_request(),
            1,
            "a call was answered twice"
        );
    }
}

/// Issue 34, item 4: `build --out` into a directory that is not a build replaced the user's
/// `corpus.jsonl` and `runs/`.
#[test]
fn a_build_into_a_directory_that_is_not_a_build_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "http://127.0.0.1:9/v1", "");
    let out = dir.path().join("mine");
    write(&out, "corpus.jsonl", "my corpus\n");
    write(&out, "runs/my.trec", "q Q0 d 1 1.0 mine\n");
    let output = build(&config, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("is not empty and is not a build directory"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(out.join("corpus.jsonl")).unwrap(),
        "my corpus\n"
    );
    assert!(out.join("runs/my.trec").is_file());
    assert!(!out.join("work").exists());
}

/// Issue 34, item 9: two runs on one build directory raced (every LLM call made twice, one
/// failing with ENOENT in `work/runs`); the second now fails at once.
#[test]
fn a_second_build_on_the_same_directory_fails_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "http://127.0.0.1:9/v1", "");
    let out = dir.path().join("out");
    std::fs::create_dir_all(out.join("work")).unwrap();
    let held = freshstack::dataset::OutputLock::acquire(&out.join("work/.lock"), &out).unwrap();
    let output = build(&config, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("another freshstack run is writing"),
        "{stderr}"
    );
    // A refusal, not a run that stopped midway.
    assert!(!stderr.contains("stopped"), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!out.join("work/questions.jsonl").exists());
    drop(held);
}

/// Issue 34, item 7: a build whose `--out` lay inside its checkout chunked its own export into
/// the next corpus and never converged (124 -> 1,067 -> 796 documents). Run three times from
/// the topic's directory with a relative `--out` inside the checkout, as a user would, it now
/// chunks the checkout's files only, exports the same bytes each time and, once built, calls
/// nobody.
#[test]
fn a_build_whose_out_lies_inside_its_checkout_converges() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    config(dir.path(), &server.url, "");
    let out = dir.path().join("repo/build");
    let mut runs = Vec::new();
    for _ in 0..3 {
        let output = freshstack_in(
            &["build", "--config", "demo.toml", "--out", "repo/build"],
            dir.path(),
        );
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{stderr}");
        let corpus = std::fs::read(out.join("work/corpus.jsonl")).unwrap();
        runs.push((corpus, exported(&out), server.requests(), stderr));
    }
    let checkout: BTreeSet<String> = [
        "README.md",
        "docs/cache.md",
        "docs/queue.md",
        "src/routes.php",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    for corpus in ["work/corpus.jsonl", "corpus.jsonl"] {
        let documents: Vec<Document> = read_jsonl(out.join(corpus)).unwrap();
        let paths: BTreeSet<String> = documents
            .iter()
            .map(|d| d.metadata.path.clone().unwrap())
            .collect();
        assert_eq!(
            paths, checkout,
            "{corpus}: the build read its own directory back"
        );
    }
    let (corpus, files, calls, _) = &runs[0];
    assert!(files.contains_key("corpus.jsonl") && *calls > 0);
    for (n, (again, again_files, again_calls, stderr)) in runs.iter().enumerate().skip(1) {
        assert!(again == corpus, "run {}: work/corpus.jsonl changed", n + 1);
        assert!(again_files == files, "run {}: the export changed", n + 1);
        assert_eq!(again_calls, calls, "run {} called the LLM", n + 1);
        let corpus_line = stderr
            .lines()
            .find(|l| l.trim_start().starts_with("corpus"))
            .unwrap_or_default();
        assert!(corpus_line.ends_with("(unchanged)"), "{stderr}");
    }
}

#[test]
fn config_errors_name_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), "http://127.0.0.1:9/v1", "");
    let text = std::fs::read_to_string(&config).unwrap();
    let out = dir.path().join("out");
    let cases = [
        (
            text.replace("pool_depth = 3", "pool_depth = 3\npool_dept = 4"),
            "pool_dept",
        ),
        (text.replace("\"repo\"", "\"missing\""), "not a directory"),
        (text.replace("model = \"mock-model\"", ""), "llm"),
        (text.replace("topic = \"demo\"", "topic = 7"), "demo.toml:1"),
        (
            text.replace("[corpus]", "match = \"some\"\n[corpus]"),
            "demo.toml:4: questions.match: \"some\": expected any or all",
        ),
        (
            text.replace("max_tokens = 64", "max_tokens = 64\ntokenizer = \"gpt2\""),
            "demo.toml:6: corpus.tokenizer: `gpt2` (expected",
        ),
        (
            format!("{text}\n[rerank]\nmodel = \"x\"\ndepth = 0\n"),
            "rerank.depth",
        ),
        (
            format!("{text}\n[llm.nuggets]\ngguf = \"missing.gguf\"\n"),
            "llm.nuggets.gguf",
        ),
        (
            format!("{text}\n[llm.judge]\nbase_url = \"http://127.0.0.1:9/v1\"\n"),
            "llm.judge",
        ),
        (
            format!("{text}\n[llm.variants]\nconcurrency = 0\n"),
            "llm.variants.concurrency",
        ),
        (
            format!("{text}\n[llm.nuggets]\ncache = \"x.sqlite\"\n"),
            "cache",
        ),
    ];
    for (bad, expected) in cases {
        write(dir.path(), "demo.toml", &bad);
        let output = build(&config, &out);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success());
        assert!(stderr.contains(expected), "{expected}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.join("queries.jsonl").exists());
    }
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn a_dense_model_adds_its_runs_and_their_fusion() {
    let model = crate::util::minilm_dir();
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "[retrieval]\ndense = [{:?}]\npool_depth = 3\nfusion_depth = 10\n",
        model.to_str().unwrap()
    );
    let config = config(dir.path(), &server.url, "");
    // Documents measured by the dense model's own tokenizer, as the quickstart does.
    let tokenizer = model.join("tokenizer.json");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("[retrieval]\npool_depth = 3\nfusion_depth = 10\n", &extra)
        .replace(
            "max_tokens = 64\n",
            &format!(
                "max_tokens = 64\ntokenizer = \"hf:{}\"\n",
                tokenizer.display()
            ),
        );
    write(dir.path(), "demo.toml", text);
    let out = dir.path().join("out");
    build_ok(&config, &out);
    for technique in ["inference.question", "oracle.nuggets"] {
        for retriever in ["bm25", "all-MiniLM-L6-v2", "fusion"] {
            let run = out.join(format!("runs/{technique}.{retriever}.trec"));
            let text = std::fs::read_to_string(&run).unwrap();
            assert!(!text.is_empty(), "{}", run.display());
        }
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    let corpus = &manifest["corpus"];
    assert_eq!(
        corpus["tokenizer"], "hf:all-MiniLM-L6-v2/tokenizer.json",
        "no local path"
    );
    assert_eq!(corpus["tokenizer_sha256"].as_str().map(str::len), Some(64));
    let mut minilm = tokenizers::Tokenizer::from_file(&tokenizer).unwrap();
    minilm.with_truncation(None).unwrap();
    let docs: Vec<freshstack::Document> = read_jsonl(out.join("corpus.jsonl")).unwrap();
    for doc in &docs {
        let n = minilm.encode(doc.text.as_str(), true).unwrap().len();
        assert!(n <= 64, "{}: {n} MiniLM tokens", doc.id);
    }
}

/// `[rerank]`: every pooled run gets a `+rerank` run equal to `freshstack rerank` on it, and
/// the reranked runs' top `pool_depth` is pooled (so it is judged).
#[test]
fn a_reranker_adds_reranked_runs_to_the_pool() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/rerank/tiny-xlmr");
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let extra = format!(
        "[rerank]\nmodel = {:?}\ndepth = 10\n",
        model.to_str().unwrap()
    );
    let config = config(dir.path(), &server.url, &extra);
    let out = dir.path().join("out");
    build_ok(&config, &out);
    let work_run = out.join("work/runs/inference.question.bm25.trec");
    let reranked = out.join("work/runs/inference.question.bm25+rerank.trec");
    let by_command = dir.path().join("by-command.trec");
    let output = freshstack(&[
        "rerank",
        "--run",
        work_run.to_str().unwrap(),
        "--queries",
        dir.path().join("questions.jsonl").to_str().unwrap(),
        "--corpus",
        out.join("work/corpus.jsonl").to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "-k",
        "10",
        "--out",
        by_command.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let columns = |path: &Path| -> Vec<Vec<String>> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| l.split(' ').take(5).map(str::to_string).collect())
            .collect()
    };
    let reranked_rows = columns(&reranked);
    assert!(!reranked_rows.is_empty());
    assert_eq!(reranked_rows, columns(&by_command));
    // The reranked top 3 of every question is in its pool.
    let pool: Vec<Value> = read_jsonl(out.join("work/pool.jsonl")).unwrap();
    for row in reranked_rows
        .iter()
        .filter(|r| r[3].parse::<usize>().unwrap() <= 3)
    {
        let entry = pool
            .iter()
            .find(|p| p["query_id"] == row[0].as_str())
            .unwrap();
        let docs = entry["doc_ids"].as_array().unwrap();
        assert!(
            docs.iter().any(|d| d == row[2].as_str()),
            "{row:?} not pooled"
        );
    }
    for technique in ["inference.question", "oracle.answer"] {
        let run = out.join(format!("runs/{technique}.bm25+rerank.trec"));
        assert!(run.is_file(), "{} exported", run.display());
    }
}

/// `[llm] base_urls`: a build spreads its calls over a fleet and exports the same bytes as a
/// build against one server.
#[test]
fn a_build_spreads_calls_over_a_fleet_to_the_same_bytes() {
    let single = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let config_one = config(dir.path(), &single.url, "");
    let out_one = dir.path().join("one");
    build_ok(&config_one, &out_one);

    let (a, b) = (MockServer::start(false), MockServer::start(false));
    let text = std::fs::read_to_string(&config_one)
        .unwrap()
        .replace(
            &format!("base_url = \"{}\"", single.url),
            &format!("base_url = \"{}\"\nbase_urls = [\"{}\"]", a.url, b.url),
        )
        .replace("concurrency = 1", "concurrency = 2");
    let config_fleet = write(dir.path(), "fleet.toml", text);
    let out_fleet = dir.path().join("fleet");
    build_ok(&config_fleet, &out_fleet);
    assert!(
        a.requests() > 0 && b.requests() > 0,
        "{} / {}",
        a.requests(),
        b.requests()
    );
    assert_eq!(a.requests() + b.requests(), single.requests());
    let (one, fleet) = (exported(&out_one), exported(&out_fleet));
    assert_eq!(
        one.keys().collect::<Vec<_>>(),
        fleet.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &one {
        assert!(fleet[name] == *bytes, "{name} differs");
    }
}

/// `[llm.nuggets]`: the nuggets stage calls its own server and model, the other stages
/// `[llm]`'s; the dataset is the same as with one server, the manifest names both models, and
/// changing the stage's model reruns its stage and no stage before it.
#[test]
fn a_stage_with_its_own_llm_calls_only_that_model() {
    let single = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let config_one = config(dir.path(), &single.url, "");
    let out_one = dir.path().join("one");
    build_ok(&config_one, &out_one);

    let (main, nuggets) = (MockServer::start(false), MockServer::start(false));
    let text = std::fs::read_to_string(&config_one)
        .unwrap()
        .replace(&single.url, &main.url);
    let stage_text = format!(
        "{text}\n[llm.nuggets]\nbase_url = \"{}\"\nmodel = \"mock-big\"\n",
        nuggets.url
    );
    let config_stage = write(dir.path(), "stage.toml", &stage_text);
    let out_stage = dir.path().join("stage");
    build_ok(&config_stage, &out_stage);
    let questions: Vec<serde_json::Value> =
        read_jsonl(out_one.join("work/questions.jsonl")).unwrap();
    assert_eq!(
        nuggets.requests(),
        questions.len(),
        "one nuggets call per question"
    );
    assert_eq!(main.requests() + nuggets.requests(), single.requests());

    let (one, staged) = (exported(&out_one), exported(&out_stage));
    assert_eq!(
        one.keys().collect::<Vec<_>>(),
        staged.keys().collect::<Vec<_>>()
    );
    for (name, bytes) in &one {
        if name != "manifest.json" {
            assert!(staged[name] == *bytes, "{name} differs");
        }
    }
    let manifest: serde_json::Value = serde_json::from_slice(&staged["manifest.json"]).unwrap();
    assert_eq!(manifest["llm"]["model"], "openai:mock-model");
    assert_eq!(manifest["llm"]["nuggets"]["model"], "openai:mock-big");
    let plain: serde_json::Value = serde_json::from_slice(&one["manifest.json"]).unwrap();
    assert!(plain["llm"].get("nuggets").is_none(), "{}", plain["llm"]);

    // Another nuggets model: only its stage and those after it run again.
    let other = MockServer::start(false);
    let changed = stage_text
        .replace(&nuggets.url, &other.url)
        .replace("mock-big", "mock-other");
    write(dir.path(), "stage.toml", &changed);
    let output = build(&config_stage, &out_stage);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(other.requests(), questions.len(), "{stderr}");
    assert!(
        stderr.contains("variants") && stderr.contains("index"),
        "{stderr}"
    );
    for line in stderr.lines() {
        let stage = line.split_whitespace().next().unwrap_or("");
        if matches!(stage, "index" | "variants") {
            assert!(line.contains("up to date"), "{line}");
        }
    }
}
