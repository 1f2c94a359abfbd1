//! The LLM stages against a real HTTP server on loopback that speaks the OpenAI protocol and
//! misbehaves on purpose: 429 with Retry-After, 500s, answers slower than the client's timeout,
//! truncated bodies, garbled bodies, dropped connections, and a "model" that answers in the wrong
//! format. Every item must end with a result or a recorded failure, and a rerun must make no
//! new request. For structured output it records every request body and plays the servers
//! out there: one that ignores `response_format`, one that enforces it, one that refuses it
//! (HTTP 400), one that refuses everything.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use freshstack::NoProgress;
use freshstack::llm::{Llm, OpenAiChat, OpenAiConfig, ResponseCache};
use freshstack::stages::{
    JudgeConfig, JudgeInputs, JudgmentRecord, NuggetsConfig, NuggetsRecord, VariantsConfig,
    VariantsRecord, generate_nuggets, generate_query_variants, judge,
};
use serde_json::{Value, json};

use crate::util::{freshstack, write};

/// What the server does to one request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    TooMany,
    ServerError,
    Slow,
    Truncated,
    Garbled,
    Dropped,
}

/// What the server does with `response_format`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum SchemaServer {
    /// Accepts the field and answers as if it were absent (older servers, proxies).
    Ignore,
    /// Answers exactly one JSON value, as a constrained decoder would: the schema's shape,
    /// except for the test markers `[cutoff]` (the JSON ends mid-way, as at max_tokens) and
    /// `[bug]` (a judge answer that leaves out the last document, a server bug).
    Enforce,
    /// Answers HTTP 400 to any request with `response_format` (a server without support).
    Refuse,
    /// Answers HTTP 400 to every request.
    RefuseEverything,
}

const FAULTS: [Fault; 7] = [
    Fault::None,
    Fault::TooMany,
    Fault::ServerError,
    Fault::Slow,
    Fault::Truncated,
    Fault::Garbled,
    Fault::Dropped,
];

pub(crate) struct State {
    /// Every request received (faulty ones included).
    requests: AtomicUsize,
    /// Requests after this many are held unanswered (to kill a client mid-call).
    pub(crate) hold_after: AtomicUsize,
    /// Successful answers sent per distinct request body.
    answered: Mutex<HashMap<u64, u32>>,
    /// Attempts seen per distinct request body.
    attempts: Mutex<HashMap<u64, u32>>,
    /// Inject faults on the first attempts of a request.
    faults: bool,
    /// Authorization headers seen.
    auth: Mutex<Vec<String>>,
    /// Every request body, in arrival order.
    pub(crate) bodies: Mutex<Vec<Value>>,
    schema: SchemaServer,
    stop: AtomicBool,
}

/// An OpenAI-compatible server on 127.0.0.1, one thread per connection.
pub(crate) struct MockServer {
    pub(crate) url: String,
    pub(crate) state: Arc<State>,
}

impl MockServer {
    pub(crate) fn start(faults: bool) -> Self {
        Self::start_with(faults, SchemaServer::Ignore)
    }

    pub(crate) fn start_with(faults: bool, schema: SchemaServer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let state = Arc::new(State {
            requests: AtomicUsize::new(0),
            hold_after: AtomicUsize::new(usize::MAX),
            answered: Mutex::new(HashMap::new()),
            attempts: Mutex::new(HashMap::new()),
            faults,
            auth: Mutex::new(Vec::new()),
            bodies: Mutex::new(Vec::new()),
            schema,
            stop: AtomicBool::new(false),
        });
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if shared.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let state = shared.clone();
                std::thread::spawn(move || serve_connection(stream, &state));
            }
        });
        Self { url, state }
    }

    pub(crate) fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The request bodies received so far.
    pub(crate) fn bodies(&self) -> Vec<Value> {
        self.state.bodies.lock().unwrap().clone()
    }

    /// The most times any one request was answered successfully.
    pub(crate) fn max_answers_per_request(&self) -> u32 {
        self.state
            .answered
            .lock()
            .unwrap()
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(
            self.url
                .trim_start_matches("http://")
                .trim_end_matches("/v1"),
        );
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

fn serve_connection(stream: TcpStream, state: &State) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut content_length = 0;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            match name.to_ascii_lowercase().as_str() {
                "content-length" => content_length = value.trim().parse().unwrap_or(0),
                "authorization" => state.auth.lock().unwrap().push(value.trim().to_string()),
                _ => {}
            }
        }
        let mut body = vec![0; content_length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let seen = state.requests.fetch_add(1, Ordering::SeqCst) + 1;
        if seen > state.hold_after.load(Ordering::SeqCst) {
            // Hold the call until the server stops: the client is about to be killed.
            while !state.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            return;
        }
        let key = fnv(&body);
        let attempt = {
            let mut attempts = state.attempts.lock().unwrap();
            let n = attempts.entry(key).or_insert(0);
            *n += 1;
            *n - 1
        };
        // A fault on the first attempt of most requests, a second one on some.
        let fault = if !state.faults {
            Fault::None
        } else if attempt == 0 {
            FAULTS[(key % 7) as usize]
        } else if attempt == 1 {
            FAULTS[((key / 7) % 7) as usize]
        } else {
            Fault::None
        };
        let request: Value = serde_json::from_slice(&body).unwrap();
        state.bodies.lock().unwrap().push(request.clone());
        let with_schema = request.get("response_format").is_some();
        let refuse = match state.schema {
            SchemaServer::Refuse => with_schema,
            SchemaServer::RefuseEverything => true,
            SchemaServer::Ignore | SchemaServer::Enforce => false,
        };
        let constrained = with_schema && state.schema == SchemaServer::Enforce;
        let ok_body = json!({
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant",
                                     "content": model_answer(&request, constrained)}}],
        })
        .to_string();
        let send = |w: &mut TcpStream, status: &str, extra: &str, body: &str| {
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\r\n",
                body.len()
            );
            w.write_all(head.as_bytes())
                .and_then(|_| w.write_all(body.as_bytes()))
                .and_then(|_| w.flush())
        };
        let keep = match fault {
            Fault::None if refuse => send(
                &mut writer,
                "400 Bad Request",
                "",
                r#"{"error":{"code":400,"message":"Unrecognized request argument: response_format","type":"invalid_request_error"}}"#,
            )
            .is_ok(),
            Fault::None => {
                let sent = send(&mut writer, "200 OK", "", &ok_body).is_ok();
                if sent {
                    *state.answered.lock().unwrap().entry(key).or_insert(0) += 1;
                }
                sent
            }
            Fault::TooMany => send(
                &mut writer,
                "429 Too Many Requests",
                "Retry-After: 1\r\n",
                r#"{"error":"slow down"}"#,
            )
            .is_ok(),
            Fault::ServerError => {
                send(&mut writer, "500 Internal Server Error", "", "oops").is_ok()
            }
            Fault::Slow => {
                std::thread::sleep(Duration::from_millis(2500));
                let _ = send(&mut writer, "200 OK", "", &ok_body);
                false
            }
            Fault::Truncated => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    ok_body.len()
                );
                let _ = writer.write_all(head.as_bytes());
                let _ = writer.write_all(&ok_body.as_bytes()[..ok_body.len() / 2]);
                false
            }
            Fault::Garbled => {
                send(&mut writer, "200 OK", "", "<html>502 proxy says hi</html>").is_ok()
            }
            Fault::Dropped => false,
        };
        if !keep {
            let _ = writer.shutdown(std::net::Shutdown::Both);
            return;
        }
    }
}

/// The "model": answers each prompt deterministically. Question titles carry test markers:
/// `[messy]` answers in prose first and correctly after a repair request, `[hopeless]` never
/// answers usably, `[omit]` leaves out the last document until repaired. `constrained`: the
/// answer is one JSON value of the requested shape (see [`SchemaServer::Enforce`]).
pub(crate) fn model_answer(request: &Value, constrained: bool) -> String {
    if constrained {
        return constrained_answer(request);
    }
    let messages = request["messages"].as_array().unwrap();
    let first_user = messages.iter().find(|m| m["role"] == "user").unwrap()["content"]
        .as_str()
        .unwrap();
    let last = messages.last().unwrap()["content"].as_str().unwrap();
    let repaired = last.starts_with("Your reply could not be used");
    let title = first_user
        .lines()
        .find_map(|l| l.strip_prefix("Question title: "))
        .unwrap_or("");
    if title.contains("[hopeless]") {
        return "I am sorry, I cannot do that.".into();
    }
    if title.contains("[messy]") && !repaired {
        return "Sure! The answer involves several facts, as explained above.".into();
    }
    if first_user.contains("grading notes") {
        // Nuggets: two facts, in a fenced block with chatter around.
        let t = title.replace(" [messy]", "");
        return format!(
            "Here are the nuggets:\n```json\n{{\"nuggets\": [\"{t} needs ALPHA\", \"{t} also needs BETA\",]}}\n```\nDone."
        );
    }
    if first_user.contains("sub_questions") {
        return format!(
            "{{\"sub_questions\": [\"What is {title}?\", \"How to configure it?\"], \"closed_book_answer\": \"Use the setting.\"}}"
        );
    }
    // Judge: D<i> supports N1 when its text has ALPHA, N2 when it has BETA.
    let mut texts = judge_documents(first_user);
    if title.contains("[omit]") && !repaired {
        texts.pop();
    }
    let judgments: Vec<Value> = texts
        .iter()
        .enumerate()
        .map(|(i, text)| json!({"doc": format!("D{}", i + 1), "reason": format!("doc {}", i + 1), "supported": supported_by(text)}))
        .collect();
    format!(
        "D1 looks at {{the code}}. Verdicts:\n{}",
        json!({ "judgments": judgments })
    )
}

/// The texts of the documents `[D1]`, `[D2]`, ... of a judge prompt.
fn judge_documents(first_user: &str) -> Vec<&str> {
    let docs_part = first_user.split("\nDocuments:\n").nth(1).unwrap();
    let docs_part = docs_part
        .split("\nReply with one JSON object")
        .next()
        .unwrap();
    docs_part.split("[D").skip(1).collect()
}

/// The verdicts of a judge document for the two nuggets every mock question has.
fn supported_by(text: &str) -> Value {
    json!({"N1": text.contains("ALPHA"), "N2": text.contains("BETA")})
}

/// What a constrained decoder returns: one JSON value in the requested shape (the schema's
/// property order), nothing around it; `[cutoff]` ends mid-way, `[bug]` drops a judgment.
fn constrained_answer(request: &Value) -> String {
    let messages = request["messages"].as_array().unwrap();
    let first_user = messages.iter().find(|m| m["role"] == "user").unwrap()["content"]
        .as_str()
        .unwrap();
    let title = first_user
        .lines()
        .find_map(|l| l.strip_prefix("Question title: "))
        .unwrap_or("");
    let schema = &request["response_format"]["json_schema"]["schema"];
    let answer = if schema["properties"].get("nuggets").is_some() {
        json!({"nuggets": [format!("{title} needs ALPHA"), format!("{title} also needs BETA")]})
    } else if schema["properties"].get("sub_questions").is_some() {
        json!({"sub_questions": [format!("What is {title}?"), "How to configure it?"],
               "closed_book_answer": "Use the setting."})
    } else {
        let mut texts = judge_documents(first_user);
        if title.contains("[bug]") {
            texts.pop();
        }
        let judgments: Vec<Value> = texts
            .iter()
            .enumerate()
            .map(|(i, text)| json!({"doc": format!("D{}", i + 1), "reasoning": format!("doc {} read", i + 1), "supported": supported_by(text)}))
            .collect();
        json!({ "judgments": judgments })
    }
    .to_string();
    if title.contains("[cutoff]") {
        answer[..answer.len() / 2].to_string()
    } else {
        answer
    }
}

pub(crate) fn client(url: &str, concurrency: usize, cache: Option<&Path>) -> Llm {
    let mut config = OpenAiConfig::new(url, "mock-model");
    config.concurrency = concurrency;
    config.timeout = Duration::from_millis(1000);
    config.max_retries = 6;
    config.initial_backoff = Duration::from_millis(5);
    config.max_backoff = Duration::from_millis(1200);
    let chat = OpenAiChat::new(config).unwrap();
    Llm::new(
        Box::new(chat),
        cache.map(|p| ResponseCache::open(p).unwrap()),
    )
}

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
        .map(|r| (r.query_id.clone(), r.nugget_id.clone(), r.doc_id.clone()))
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
    let summary = judge(
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
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
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
    assert!(err.contains("--llm-context-tokens"), "{err}");
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

/// The SmolLM2 test model fetched by `scripts/setup-llm.sh`, when present.
fn smollm2() -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    path.is_file().then_some(path)
}

#[test]
fn local_gguf_generates_and_the_stages_cope() {
    use freshstack::llm::{Chat, ChatFormat, ChatParams, LocalChat, Message};
    let Some(model) = smollm2() else {
        eprintln!(
            "SKIPPED local_gguf_generates_and_the_stages_cope: models/SmolLM2-135M-Instruct.Q4_1.gguf \
             is absent (run scripts/setup-llm.sh)"
        );
        return;
    };
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
    let chat = LocalChat::load_quantized(&path).unwrap();
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
