//! The LLM stages against a real HTTP server on loopback ([`MockServer`], in `support`) that
//! speaks the OpenAI protocol and misbehaves on purpose: 429 with Retry-After, 500s, answers
//! slower than the client's timeout, truncated bodies, garbled bodies, dropped connections, and
//! a "model" that answers in the wrong format. Every item must end with a result or a recorded failure, and a rerun must make no
//! new request. For structured output it records every request body and plays the servers
//! out there: one that ignores `response_format`, one that enforces it, one that refuses it
//! (HTTP 400), one that refuses everything.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use freshstack::NoProgress;
use freshstack::dataset::{JudgmentRecord, NuggetsRecord, VariantsRecord};
use freshstack::llm::{Llm, OpenAiChat, OpenAiConfig, ResponseCache};
use freshstack::pipeline::{
    JudgeConfig, JudgeInputs, NuggetsConfig, VariantsConfig, generate_nuggets,
    generate_query_variants, judge,
};
use serde_json::json;

use crate::support::{MockServer, client, free_port};
use crate::util::{freshstack, write};

/// Six questions, one needing a repair, one hopeless.
pub(crate) fn questions_file(dir: &Path) -> PathBuf {
    let mut rows = String::new();
    for (id, title) in [
        ("q1", "Laravel queues"),
        ("q2", "Angular signals [messy]"),
        ("q3", "Godot physics"),
        ("q4", "LangChain retrievers [hopeless]"),
        ("q5", "YOLO export [omit]"),
        ("q10", "Ten"),
    ] {
        rows.push_str(
            &json!({"query_id": id, "query_title": title, "query_text": format!("How do I use {title}?"),
                    "answer_id": "a", "answer_text": "Like this.", "metadata": {"tags": ["x"]}})
            .to_string(),
        );
        rows.push('\n');
    }
    write(dir, "questions.jsonl", rows)
}

pub(crate) fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn nuggets_survive_faults_and_rerun_makes_no_calls() {
    let server = MockServer::start(true);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());
    let cache = dir.path().join("cache.sqlite");
    let out = dir.path().join("nuggets.jsonl");
    let llm = client(&server.url, 8, Some(&cache));
    let summary = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(summary.items, 6);
    assert_eq!(summary.ok, 5);
    assert_eq!(summary.failed, 1);
    assert!(summary.repairs >= 3, "{summary:?}");
    assert!(
        server.requests() > summary.llm.calls as usize,
        "faults were injected"
    );

    let rows: Vec<NuggetsRecord> = read_lines(&out);
    let ids: Vec<&str> = rows.iter().map(|r| r.query_id.as_str()).collect();
    assert_eq!(ids, ["q1", "q10", "q2", "q3", "q4", "q5"], "sorted by id");
    let q1 = &rows[0];
    assert_eq!(q1.nuggets.len(), 2);
    assert_eq!(q1.nuggets[0].id, "q1_0");
    assert_eq!(q1.nuggets[0].text, "Laravel queues needs ALPHA");
    assert_eq!(q1.nuggets[1].id, "q1_1");
    let messy = &rows[2];
    assert!(messy.error.is_none(), "repaired: {messy:?}");
    assert_eq!(messy.nuggets[0].text, "Angular signals needs ALPHA");
    let hopeless = &rows[4];
    assert!(hopeless.nuggets.is_empty());
    assert!(hopeless.error.as_deref().unwrap().contains("nuggets"));
    assert_eq!(
        hopeless.raw.as_deref(),
        Some("I am sorry, I cannot do that.")
    );

    // Rerun: same output, no request reaches the server.
    let before = server.requests();
    let first = std::fs::read(&out).unwrap();
    let llm = client(&server.url, 3, Some(&cache));
    let again = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(server.requests(), before);
    assert_eq!(again.llm.calls, 0);
    assert!(again.llm.cache_hits > 0);
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn query_variants_are_parsed_and_deterministic_across_concurrency() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());
    let mut outputs = Vec::new();
    for concurrency in [1, 8] {
        let out = dir.path().join(format!("variants-{concurrency}.jsonl"));
        let llm = client(&server.url, concurrency, None);
        let summary = generate_query_variants(
            &llm,
            &VariantsConfig::default(),
            &questions,
            &out,
            &NoProgress,
        )
        .unwrap();
        assert_eq!((summary.ok, summary.failed), (5, 1));
        outputs.push(std::fs::read(&out).unwrap());
    }
    assert_eq!(outputs[0], outputs[1]);
    let rows: Vec<VariantsRecord> = read_lines(&dir.path().join("variants-8.jsonl"));
    assert_eq!(rows[0].sub_questions.len(), 2);
    assert_eq!(rows[0].closed_book_answer, "Use the setting.");
}

/// Corpus of 25 documents; some mention ALPHA (nugget 1) or BETA (nugget 2).
pub(crate) fn judge_inputs(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let questions = questions_file(dir);
    let mut corpus = String::new();
    for i in 0..25 {
        let text = match i % 4 {
            0 => format!("doc {i}: uses ALPHA here"),
            1 => format!("doc {i}: BETA and ALPHA"),
            2 => format!("doc {i}: nothing relevant {}", "word ".repeat(400)),
            _ => format!("doc {i}: only BETA"),
        };
        corpus.push_str(
            &json!({"_id": format!("org/repo/file{i:02}.md_0_10"), "title": "", "text": text,
                    "metadata": {"url": null, "start_byte": 0, "end_byte": 10, "commit_id": null}})
            .to_string(),
        );
        corpus.push('\n');
    }
    let corpus = write(dir, "corpus.jsonl", corpus);
    let all: Vec<String> = (0..25)
        .map(|i| format!("org/repo/file{i:02}.md_0_10"))
        .collect();
    let pool = [
        json!({"query_id": "q1", "doc_ids": all}),
        json!({"query_id": "q2", "doc_ids": all[..5]}),
        json!({"query_id": "q4", "doc_ids": all[..3]}),
        json!({"query_id": "q5", "doc_ids": all[3..9]}),
        json!({"query_id": "q3", "doc_ids": [all[0], all[0]]}),
    ]
    .iter()
    .map(|v| v.to_string() + "\n")
    .collect::<String>();
    let pool = write(dir, "pool.jsonl", pool);
    // Nuggets: q4 failed in the nuggets stage (no nuggets), the others have two.
    let nuggets = ["q1", "q2", "q3", "q4", "q5"]
        .iter()
        .map(|q| {
            let nuggets = if *q == "q4" {
                json!([])
            } else {
                json!([{"_id": format!("{q}_0"), "text": "needs ALPHA"},
                       {"_id": format!("{q}_1"), "text": "needs BETA"}])
            };
            json!({"query_id": q, "nuggets": nuggets}).to_string() + "\n"
        })
        .collect::<String>();
    let nuggets = write(dir, "nuggets.jsonl", nuggets);
    (questions, nuggets, corpus, pool)
}

#[test]
fn judge_survives_faults_truncates_and_resumes() {
    let server = MockServer::start(true);
    let dir = tempfile::tempdir().unwrap();
    let (questions, nuggets, corpus, pool) = judge_inputs(dir.path());
    let cache = dir.path().join("cache.sqlite");
    let out = dir.path().join("judgments.jsonl");
    let config = JudgeConfig {
        docs_per_call: 10,
        max_doc_tokens: 100,
        ..JudgeConfig::default()
    };
    let llm = client(&server.url, 8, Some(&cache));
    let summary = judge(
        &llm,
        &config,
        &JudgeInputs {
            questions: &questions,
            nuggets: &nuggets,
            corpus: &corpus,
            pool: &pool,
        },
        &out,
        &NoProgress,
    )
    .unwrap();
    // q1: 25 docs in 3 calls, q2: 1, q3: 1 (duplicate doc dropped), q5: 1; q4 has no nuggets.
    assert_eq!(summary.questions, 5);
    assert_eq!(summary.questions_without_nuggets, 1);
    assert_eq!(summary.stage.items, 6);
    assert_eq!(summary.judgments, (25 + 5 + 1 + 6) * 2);
    assert_eq!(summary.unjudged, 0, "{summary:?}");
    assert_eq!(summary.stage.failed, 0);
    assert!(
        summary.stage.repairs >= 2,
        "q2 and q5 need repairs: {summary:?}"
    );
    assert!(summary.documents_truncated > 0);

    let rows: Vec<JudgmentRecord> = read_lines(&out);
    assert_eq!(rows.len() as u64, summary.judgments);
    for row in &rows {
        let i: usize = row.doc_id["org/repo/file".len().."org/repo/file".len() + 2]
            .parse()
            .unwrap();
        let nugget = row.nugget_id.rsplit('_').next().unwrap();
        let expected = match nugget {
            "0" => i % 4 <= 1,
            _ => i % 4 == 1 || i % 4 == 3,
        };
        assert_eq!(row.supported, Some(expected), "{row:?}");
        assert!(row.rationale.starts_with("doc "));
    }
    // Sorted: question, nugget, document.
    let keys: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            (
                r.query_id.to_string(),
                r.nugget_id.clone(),
                r.doc_id.clone(),
            )
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);

    let before = server.requests();
    let first = std::fs::read(&out).unwrap();
    let llm = client(&server.url, 2, Some(&cache));
    let again = judge(
        &llm,
        &config,
        &JudgeInputs {
            questions: &questions,
            nuggets: &nuggets,
            corpus: &corpus,
            pool: &pool,
        },
        &out,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(server.requests(), before, "rerun made new calls");
    assert_eq!(again.stage.llm.calls, 0);
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn unusable_judge_answers_are_recorded_not_defaulted() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let (questions, _, corpus, _) = judge_inputs(dir.path());
    let nuggets = write(
        dir.path(),
        "nuggets4.jsonl",
        r#"{"query_id": "q4", "nuggets": [{"_id": "q4_0", "text": "needs ALPHA"}]}"#,
    );
    let pool = write(
        dir.path(),
        "pool4.jsonl",
        r#"{"query_id": "q4", "doc_ids": ["org/repo/file00.md_0_10", "org/repo/file01.md_0_10"]}"#,
    );
    let out = dir.path().join("j.jsonl");
    let llm = client(&server.url, 2, None);
    // No self-check: the one call's answer and its repairs are all that is counted here.
    let config = JudgeConfig {
        self_check: 0.0,
        ..JudgeConfig::default()
    };
    let summary = judge(
        &llm,
        &config,
        &JudgeInputs {
            questions: &questions,
            nuggets: &nuggets,
            corpus: &corpus,
            pool: &pool,
        },
        &out,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(summary.stage.failed, 1);
    assert_eq!(summary.stage.repairs, 2);
    assert_eq!(summary.unjudged, 2);
    let rows: Vec<JudgmentRecord> = read_lines(&out);
    assert!(rows.iter().all(|r| r.supported.is_none()));
    assert!(
        rows.iter()
            .all(|r| r.raw.as_deref() == Some("I am sorry, I cannot do that."))
    );
    assert_eq!(server.requests(), 3, "one call and two repairs");
}

#[test]
fn unreachable_server_fails_cleanly_without_output() {
    // A port that was free a moment ago: connections are refused.
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());
    let out = dir.path().join("nuggets.jsonl");
    let mut config = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    config.max_retries = 2;
    config.initial_backoff = Duration::from_millis(1);
    let llm = Llm::new(Box::new(OpenAiChat::new(config).unwrap()), None);
    let err = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("giving up after 3 attempts"), "{err}");
    assert!(err.contains(&format!("127.0.0.1:{port}")), "{err}");
    assert!(!out.exists());
}

#[test]
fn context_overflow_is_a_clear_error() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let (questions, nuggets, corpus, pool) = judge_inputs(dir.path());
    let out = dir.path().join("j.jsonl");
    let config = JudgeConfig {
        context_tokens: 2000,
        ..JudgeConfig::default()
    };
    let llm = client(&server.url, 2, None);
    let err = judge(
        &llm,
        &config,
        &JudgeInputs {
            questions: &questions,
            nuggets: &nuggets,
            corpus: &corpus,
            pool: &pool,
        },
        &out,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    // The library names the setting; `freshstack judge` maps it to --llm-context-tokens.
    assert!(err.contains("context tokens"), "{err}");
    assert!(!out.exists());
}

#[test]
fn bad_inputs_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let (questions, nuggets, corpus, _) = judge_inputs(dir.path());
    let server = MockServer::start(false);
    let llm = client(&server.url, 1, None);
    let out = dir.path().join("j.jsonl");
    let pool = write(
        dir.path(),
        "pool-bad.jsonl",
        "{\"query_id\": \"q1\", \"doc_ids\": [\"org/repo/missing_0_1\"]}\n",
    );
    let err = judge(
        &llm,
        &JudgeConfig::default(),
        &JudgeInputs {
            questions: &questions,
            nuggets: &nuggets,
            corpus: &corpus,
            pool: &pool,
        },
        &out,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("org/repo/missing_0_1"), "{err}");
    let pool = write(
        dir.path(),
        "pool-bad2.jsonl",
        "\n{\"query_id\": \"nope\", \"doc_ids\": []}\n",
    );
    let err = judge(
        &llm,
        &JudgeConfig::default(),
        &JudgeInputs {
            questions: &questions,
            nuggets: &nuggets,
            corpus: &corpus,
            pool: &pool,
        },
        &out,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("pool-bad2.jsonl:2:"), "{err}");
    let dup = write(
        dir.path(),
        "dup.jsonl",
        "{\"query_id\": \"a\", \"query_title\": \"t\"}\n{\"query_id\": \"a\", \"query_title\": \"t\"}\n",
    );
    let err = generate_nuggets(&llm, &NuggetsConfig::default(), &dup, &out, &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dup.jsonl:2:") && err.contains("twice"),
        "{err}"
    );
    assert_eq!(server.requests(), 0);
    assert!(!out.exists());
}

#[test]
fn cli_nuggets_sends_the_key_and_never_prints_it() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());
    let out = dir.path().join("out/nuggets.jsonl");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args([
            "-vv",
            "nuggets",
            "--questions",
            questions.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--llm-base-url",
            &server.url,
            "--llm-model",
            "mock-model",
        ])
        .env("FRESHSTACK_LLM_API_KEY", "sk-test-secret")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("sk-test-secret"), "{stderr}");
    assert!(stderr.contains("1 failed"), "{stderr}");
    assert!(dir.path().join("out/llm-cache.sqlite").exists());
    let auth = server.state.auth.lock().unwrap().clone();
    assert!(!auth.is_empty() && auth.iter().all(|a| a == "Bearer sk-test-secret"));

    // Missing backend flags: one clear line, non-zero exit.
    let output = freshstack(&[
        "nuggets",
        "--questions",
        questions.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--llm-base-url"), "{stderr}");
}

/// Issue 34, item 14: `--llm-timeout 1e300` panicked in the HTTP client (a `Duration` out of
/// range), and only once the stage had read its inputs; with `--llm-gguf` it was taken and
/// ignored. A timeout no request can use is now refused as the command line is read: one line
/// naming the flag, exit 2, no request made, no file read or written, whatever the backend.
#[test]
fn llm_timeout_1e300_is_refused_before_any_work() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());
    let out = dir.path().join("out/stage.jsonl");
    let gguf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf/tiny-qwen3.gguf");
    for command in ["nuggets", "query-variants"] {
        for timeout in ["1e300", "inf", "nan", "0", "1e-300", "ten"] {
            for backend in [
                vec!["--llm-base-url", server.url.as_str(), "--llm-model", "m"],
                vec!["--llm-gguf", gguf.to_str().unwrap()],
            ] {
                let mut args = vec![
                    command,
                    "--questions",
                    questions.to_str().unwrap(),
                    "--out",
                    out.to_str().unwrap(),
                    "--llm-timeout",
                    timeout,
                ];
                args.extend(&backend);
                let output = freshstack(&args);
                let stderr = String::from_utf8_lossy(&output.stderr);
                assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
                assert!(
                    stderr.starts_with(&format!(
                        "error: invalid value '{timeout}' for '--llm-timeout"
                    )) && stderr.contains("is not a number of seconds in [0.001, 604800]"),
                    "{args:?}: {stderr}"
                );
                assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
            }
        }
    }
    assert_eq!(server.requests(), 0);
    assert!(!dir.path().join("out").exists());
    // The bounds themselves are timeouts: the stage runs (the server answers).
    let output = freshstack(&[
        "nuggets",
        "--questions",
        questions.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--llm-timeout",
        "604800",
        "--llm-base-url",
        &server.url,
        "--llm-model",
        "m",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[cfg_attr(
    not(has_model_smollm2),
    ignore = "needs models/SmolLM2-135M-Instruct.Q4_1.gguf: scripts/setup-llm.sh"
)]
fn local_gguf_generates_and_the_stages_cope() {
    use freshstack::llm::{Chat, ChatFormat, ChatParams, LocalChat, Message};
    let model = crate::util::model_path("SmolLM2-135M-Instruct.Q4_1.gguf", "scripts/setup-llm.sh");
    let chat = LocalChat::load(&model).unwrap();
    assert_eq!(
        chat.format(),
        ChatFormat::ChatMl,
        "SmolLM2's template is ChatML"
    );
    // Special markers are single tokens; ordinary text round-trips.
    let ids = chat
        .encode("<|im_start|>user\nhello world<|im_end|>")
        .unwrap();
    assert_eq!(ids.len(), 6, "{ids:?}");
    let params = ChatParams {
        temperature: 0.0,
        max_tokens: 24,
        seed: None,
        json_schema: None,
    };
    let messages = [Message::user(
        "What is the capital of France? Answer in one word.",
    )];
    let first = chat.chat(&messages, &params).unwrap();
    let second = chat.chat(&messages, &params).unwrap();
    assert!(!first.trim().is_empty());
    assert_eq!(first, second, "greedy decoding is deterministic");
    assert!(first.contains("Paris"), "{first}");
    let seeded = ChatParams {
        temperature: 0.8,
        seed: Some(7),
        ..params.clone()
    };
    assert_eq!(
        chat.chat(&messages, &seeded).unwrap(),
        chat.chat(&messages, &seeded).unwrap(),
        "seeded sampling is reproducible"
    );

    // The nuggets stage through the native backend: the weak model's answers end parsed or
    // recorded as failed, never lost.
    let dir = tempfile::tempdir().unwrap();
    let questions = write(
        dir.path(),
        "q.jsonl",
        json!({"query_id": "1", "query_title": "How to reverse a list in Python?",
               "query_text": "I have a list [1, 2, 3]. How do I reverse it?",
               "answer_text": "Use my_list.reverse() to reverse in place, or my_list[::-1] for a reversed copy."})
        .to_string(),
    );
    let out = dir.path().join("nuggets.jsonl");
    let cache = dir.path().join("cache.sqlite");
    let config = NuggetsConfig {
        params: ChatParams {
            max_tokens: 64,
            ..ChatParams::default()
        },
        max_nuggets: 5,
        max_repairs: 0,
        ..NuggetsConfig::default()
    };
    let llm = Llm::new(Box::new(chat), Some(ResponseCache::open(&cache).unwrap()));
    let summary = generate_nuggets(&llm, &config, &questions, &out, &NoProgress).unwrap();
    assert_eq!(summary.items, 1);
    assert_eq!(summary.ok + summary.failed, 1);
    let rows: Vec<NuggetsRecord> = read_lines(&out);
    assert_eq!(rows.len(), 1);
    assert!(rows[0].error.is_some() || !rows[0].nuggets.is_empty());
    eprintln!("SmolLM2 nuggets: {:?}", rows[0]);
    let again = generate_nuggets(&llm, &config, &questions, &out, &NoProgress).unwrap();
    assert_eq!(
        again.llm.calls, summary.llm.calls,
        "rerun served from the cache"
    );
}

/// What `scripts/gen_tiny_gguf.py` recorded from `transformers` for a tiny random model.
#[derive(serde::Deserialize)]
struct GgufReference {
    messages: Vec<HashMap<String, String>>,
    prompt: String,
    prompt_ids: Vec<u32>,
    greedy_ids: Vec<u32>,
    greedy_text: String,
    first_logits: Vec<f32>,
    /// Texts and the reference tokenizer's ids for them.
    #[serde(default)]
    tokenize: Vec<(String, Vec<u32>)>,
}

/// Loads `tests/fixtures/gguf/tiny-{arch}.gguf` and checks the chat template, tokenisation,
/// first-step logits and greedy continuation against `transformers`.
fn check_tiny_gguf(arch: &str, format: freshstack::llm::ChatFormat) {
    use freshstack::llm::{Chat, ChatParams, LocalChat, Message};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf");
    let chat = LocalChat::load(dir.join(format!("tiny-{arch}.gguf"))).unwrap();
    let reference: GgufReference = serde_json::from_str(
        &std::fs::read_to_string(dir.join(format!("tiny-{arch}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(chat.format(), format);
    let messages: Vec<Message> = reference
        .messages
        .iter()
        .map(|m| match m["role"].as_str() {
            "system" => Message::system(m["content"].clone()),
            _ => Message::user(m["content"].clone()),
        })
        .collect();
    assert_eq!(
        format.render(&messages),
        reference.prompt,
        "{arch} template"
    );
    let ids = chat.encode(&reference.prompt).unwrap();
    assert_eq!(ids, reference.prompt_ids, "{arch} tokenisation");
    for (text, expected) in &reference.tokenize {
        assert_eq!(&chat.encode(text).unwrap(), expected, "{arch}: {text:?}");
    }

    let logits = chat.next_logits(&ids).unwrap();
    assert_eq!(logits.len(), reference.first_logits.len());
    let max_diff = logits
        .iter()
        .zip(&reference.first_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let max_abs = reference
        .first_logits
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()));
    eprintln!("{arch}: largest first-step logit difference {max_diff:e} (logits up to {max_abs})");
    assert!(max_diff < 2e-4 * max_abs.max(1.0), "{arch}: {max_diff}");

    let params = ChatParams {
        temperature: 0.0,
        max_tokens: 16,
        seed: None,
        json_schema: None,
    };
    assert_eq!(
        chat.generate_ids(&ids, &params).unwrap(),
        reference.greedy_ids,
        "{arch} greedy tokens"
    );
    assert_eq!(
        chat.chat(&messages, &params).unwrap(),
        reference.greedy_text
    );
}

/// The tiny model with every matrix quantized to Q8_0, loaded without dequantizing (the path
/// real models over 2 GiB in f32 take): its first-step logits stay within a few percent of
/// `transformers`' f32 ones (measured 2-4%: Q8_0 rounds weights and activations) and pick the
/// same first token.
fn check_tiny_gguf_q8(arch: &str) {
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    use freshstack::llm::LocalChat;
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf");
    let mut file = std::fs::File::open(fixtures.join(format!("tiny-{arch}.gguf"))).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let device = candle_core::Device::Cpu;
    let tensors: Vec<(String, QTensor)> = names
        .into_iter()
        .map(|name| {
            let t = content.tensor(&mut file, name, &device).unwrap();
            let t = if t.shape().dims().len() == 2 {
                QTensor::quantize(&t.dequantize(&device).unwrap(), GgmlDType::Q8_0).unwrap()
            } else {
                t
            };
            (name.clone(), t)
        })
        .collect();
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("tiny-{arch}-q8_0.gguf"));
    let mut out = std::fs::File::create(&path).unwrap();
    gguf_file::write(&mut out, &metadata, &refs).unwrap();
    drop(out);

    let reference: GgufReference = serde_json::from_str(
        &std::fs::read_to_string(fixtures.join(format!("tiny-{arch}.json"))).unwrap(),
    )
    .unwrap();
    let chat = LocalChat::load(&path).unwrap();
    let logits = chat.next_logits(&reference.prompt_ids).unwrap();
    let max_diff = logits
        .iter()
        .zip(&reference.first_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    let max_abs = reference
        .first_logits
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()));
    let norm = |v: &mut dyn Iterator<Item = f32>| v.map(|x| x * x).sum::<f32>().sqrt();
    let relative = norm(
        &mut logits
            .iter()
            .zip(&reference.first_logits)
            .map(|(a, b)| a - b),
    ) / norm(&mut reference.first_logits.iter().copied());
    let argmax = |v: &[f32]| (0..v.len()).max_by(|&i, &j| v[i].total_cmp(&v[j])).unwrap();
    eprintln!(
        "{arch} Q8_0: largest first-step logit difference {max_diff:e} (logits up to {max_abs}), \
         relative L2 error {relative:e}"
    );
    assert!(relative < 0.05, "{arch} Q8_0: relative error {relative}");
    assert_eq!(
        argmax(&logits),
        argmax(&reference.first_logits),
        "{arch} Q8_0 first token"
    );
}

#[test]
fn tiny_gguf_quantized_q8_0_stays_close_to_transformers() {
    // Not the Gemma 3 fixture: its wide random norms make it chaotic (rounding its weights
    // to Q8_0 alone, computed in f32, moves its logits by 49% in L2); its matrices go through
    // the same quantized products as Gemma 1 and 2 here.
    for arch in ["qwen3", "gemma", "gemma2"] {
        check_tiny_gguf_q8(arch);
    }
}

#[test]
fn tiny_qwen3_gguf_matches_transformers() {
    check_tiny_gguf("qwen3", freshstack::llm::ChatFormat::ChatMlNoThinking);
}

#[test]
fn tiny_gemma_gguf_matches_transformers() {
    check_tiny_gguf("gemma", freshstack::llm::ChatFormat::Gemma);
}

#[test]
fn tiny_gemma2_gguf_matches_transformers() {
    check_tiny_gguf("gemma2", freshstack::llm::ChatFormat::Gemma);
}

#[test]
fn tiny_gemma3_gguf_matches_transformers() {
    check_tiny_gguf("gemma3", freshstack::llm::ChatFormat::Gemma);
}

#[test]
fn unsupported_gguf_architecture_lists_the_supported_ones() {
    use candle_core::quantized::gguf_file;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("phi.gguf");
    let mut file = std::fs::File::create(&path).unwrap();
    let arch = gguf_file::Value::String("phi3".into());
    gguf_file::write(&mut file, &[("general.architecture", &arch)], &[]).unwrap();
    drop(file);
    let err = match freshstack::llm::LocalChat::load(&path) {
        Ok(_) => panic!("phi3 loaded"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("\"phi3\""), "{err}");
    assert!(
        err.contains("llama, qwen2, qwen3, gemma, gemma2, gemma3"),
        "{err}"
    );
    assert!(err.contains("phi.gguf"), "{err}");
}

/// `freshstack nuggets` against `server`, one call at a time, writing `out`.
fn nuggets_command(server: &MockServer, questions: &Path, out: &Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_freshstack"));
    command
        .args(["nuggets", "--questions"])
        .arg(questions)
        .arg("--out")
        .arg(out)
        .args([
            "--llm-base-url",
            &server.url,
            "--llm-model",
            "mock-model",
            "--llm-concurrency",
            "1",
        ])
        .env_remove("RUST_LOG");
    command
}

#[test]
fn ctrl_c_mid_stage_keeps_completed_calls_and_the_rerun_finishes_them() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());

    // Reference: one uninterrupted run.
    let reference_server = MockServer::start(false);
    let reference_out = dir.path().join("reference/nuggets.jsonl");
    let done = nuggets_command(&reference_server, &questions, &reference_out)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let total = reference_server.requests();
    assert!(total >= 6, "{total}");

    for completed in [1, total / 2, total - 1] {
        let server = MockServer::start(false);
        server.state.hold_after.store(completed, Ordering::SeqCst);
        let out_dir = dir.path().join(format!("interrupted-{completed}"));
        let out = out_dir.join("nuggets.jsonl");
        let mut child = nuggets_command(&server, &questions, &out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = std::time::Instant::now();
        // One call at a time: once call `completed + 1` arrives (and is held), the first
        // `completed` answers have been received and cached.
        while server.requests() <= completed {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the stage never got there"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let kill = std::process::Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
        let status = child.wait().unwrap();
        assert!(!status.success(), "Ctrl-C must not look like success");
        assert_eq!(status.signal(), Some(2), "ended by SIGINT: {status:?}");
        assert!(!out.exists(), "a partial output was left as the output");
        let leftovers: Vec<String> = std::fs::read_dir(&out_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with("llm-cache.sqlite"))
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");

        // The rerun makes only the calls that were not answered, and writes the same bytes.
        server.state.hold_after.store(usize::MAX, Ordering::SeqCst);
        let before = server.requests();
        let rerun = nuggets_command(&server, &questions, &out).output().unwrap();
        assert!(
            rerun.status.success(),
            "{}",
            String::from_utf8_lossy(&rerun.stderr)
        );
        assert_eq!(
            server.requests() - before,
            total - completed,
            "interrupted after {completed} calls"
        );
        assert_eq!(
            server.max_answers_per_request(),
            1,
            "a call was answered twice"
        );
        assert_eq!(
            std::fs::read(&out).unwrap(),
            std::fs::read(&reference_out).unwrap(),
            "interrupted after {completed} calls"
        );
    }
}

/// The text a log could leak: stderr as it is, and the ASCII columns of hex-dump lines (the
/// last 16-character token of each line) joined, where a secret split over rows reads whole.
fn leak_surface(stderr: &str) -> String {
    let columns: String = stderr
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .filter(|token| token.len() == 16)
        .collect();
    format!("{stderr}\n{columns}")
}

#[test]
fn api_key_and_url_credentials_stay_out_of_a_trace_log() {
    let server = MockServer::start(false);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions_file(dir.path());
    let out = dir.path().join("out/nuggets.jsonl");
    let url = server
        .url
        .replacen("http://", "http://someone:pw-in-url@", 1);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args([
            "nuggets",
            "--questions",
            questions.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--llm-base-url",
            &url,
            "--llm-model",
            "mock-model",
        ])
        .env("FRESHSTACK_LLM_API_KEY", "sk-trace-secret")
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    // The premise: the HTTP client did log at trace level.
    assert!(stderr.contains("TRACE"), "{stderr}");
    let surface = leak_surface(&stderr);
    for secret in ["sk-trace-secret", "pw-in-url", "someone:"] {
        assert!(!surface.contains(secret), "{secret} in the log:\n{stderr}");
    }
    assert!(stderr.contains("http://***@127.0.0.1"), "{stderr}");
    let auth = server.state.auth.lock().unwrap().clone();
    assert!(!auth.is_empty() && auth.iter().all(|a| a == "Bearer sk-trace-secret"));

    // A server that is not there: the error line redacts the URL too.
    let dead = crate::support::dead_url().replacen("http://", "http://someone:pw-in-url@", 1);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args([
            "nuggets",
            "--questions",
            questions.to_str().unwrap(),
            "--out",
            dir.path().join("dead.jsonl").to_str().unwrap(),
            "--llm-base-url",
            &dead,
            "--llm-model",
            "mock-model",
            "--llm-max-retries",
            "0",
        ])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("***@127.0.0.1"), "{stderr}");
    let written = std::fs::read_to_string(dir.path().join("dead.jsonl")).unwrap_or_default();
    for text in [&*stderr, &written] {
        assert!(
            !text.contains("pw-in-url") && !text.contains("someone"),
            "{text}"
        );
    }
}
