//! What the integration tests share beyond `util`: OpenAI-compatible servers on loopback and
//! free ports.
//!
//! - [`MockServer`]: the LLM stages' server, which misbehaves on purpose (429 with Retry-After,
//!   500s, answers slower than [`client`]'s timeout, truncated and garbled bodies, dropped
//!   connections), answers from a deterministic "model" steered by markers in question titles,
//!   records every request and plays the structured-output servers out there
//!   ([`SchemaServer`]).
//! - [`FakeServer`]: a minimal server answering every request with a given function of its
//!   messages, counting requests (the shard tests' fleet).
//! - [`free_port`] and [`dead_url`]: a loopback port nothing listens on.
//! - [`chromium`] and [`browse`]: Debian's chromium, headless, for the report and review pages;
//!   [`copy_dir`] copies a fixture dataset.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use freshstack::llm::{Llm, Message, OpenAiChat, OpenAiConfig, ResponseCache};
use serde_json::{Value, json};

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
    pub(crate) auth: Mutex<Vec<String>>,
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
        let Some(body) = read_request(&mut reader, |name, value| {
            if name == "authorization" {
                state.auth.lock().unwrap().push(value.to_string());
            }
        }) else {
            return;
        };
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

/// The "model": answers each prompt deterministically (a judge verdict and its reason depend on
/// the nugget and document alone, not on the batch). Question titles carry test markers:
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
    if first_user.contains("copy into \"quote\"") {
        return quote_answer(first_user).to_string();
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
        .map(|(i, text)| json!({"doc": format!("D{}", i + 1), "reason": format!("doc {}", judged_id(text)), "supported": supported_by(text)}))
        .collect();
    format!(
        "D1 looks at {{the code}}. Verdicts:\n{}",
        json!({ "judgments": judgments })
    )
}

/// A `quote` verdict's answer: the document's line sharing the most words of four letters or
/// more with the fact (at least one) is quoted as is and called supported; none: `""` and not
/// supported. A document holding `[invent]` gets the fact itself as its "quote" (a model
/// inventing evidence), called supported.
fn quote_answer(first_user: &str) -> Value {
    let after = first_user.split_once(":\n").map_or("", |(_, rest)| rest);
    let (document, rest) = after.split_once("\n\nFact: ").unwrap_or((after, ""));
    let fact = rest.lines().next().unwrap_or("");
    if document.contains("[invent]") {
        return json!({"quote": fact, "supported": true});
    }
    let words = |text: &str| -> Vec<String> {
        text.split(|c: char| c.is_whitespace() || "`\".,".contains(c))
            .filter(|w| w.chars().count() >= 4)
            .map(str::to_lowercase)
            .collect()
    };
    let fact_words = words(fact);
    let best = document
        .lines()
        .map(|line| {
            let shared = words(line)
                .iter()
                .filter(|w| fact_words.contains(w))
                .count();
            (shared, line)
        })
        .filter(|(shared, _)| *shared > 0)
        .max_by_key(|(shared, _)| *shared);
    match best {
        Some((_, line)) => json!({"quote": line, "supported": true}),
        None => json!({"quote": "", "supported": false}),
    }
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

/// The document id of a `[D<i>] <id>` block of a judge prompt: the reasons name it rather than
/// the position, so that each row is a function of its (nugget, document) alone, whatever the
/// batch (a refresh batches other documents together than a fresh build).
fn judged_id(block: &str) -> &str {
    block
        .split_once("] ")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or("")
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
    let answer = if schema["properties"].get("quote").is_some() {
        quote_answer(first_user)
    } else if schema["properties"].get("nuggets").is_some() {
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

/// A minimal OpenAI-compatible server on loopback answering every request with `answer` of its
/// messages; counts requests.
pub(crate) struct FakeServer {
    pub(crate) url: String,
    pub(crate) requests: Arc<AtomicUsize>,
}

impl FakeServer {
    pub(crate) fn start(answer: fn(&[Message]) -> String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let counter = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counter = counter.clone();
                std::thread::spawn(move || serve(stream, &counter, answer));
            }
        });
        Self { url, requests }
    }
}

fn serve(stream: TcpStream, requests: &AtomicUsize, answer: fn(&[Message]) -> String) {
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut writer = stream;
    loop {
        let Some(body) = read_request(&mut reader, |_, _| {}) else {
            return;
        };
        requests.fetch_add(1, Ordering::SeqCst);
        let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let messages: Vec<Message> =
            serde_json::from_value(request["messages"].clone()).unwrap_or_default();
        let answer =
            json!({"choices": [{"message": {"role": "assistant", "content": answer(&messages)}}]})
                .to_string();
        let reply = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        );
        if writer.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// A loopback URL nothing listens on (connections are refused).
pub(crate) fn dead_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    drop(listener);
    url
}

/// A loopback port that was free a moment ago (for a server started on it, or for refused
/// connections).
pub(crate) fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Reads one HTTP/1.1 request (request line, headers, a `Content-Length` body) and returns its
/// body; `None` when the connection ends first. Every header goes to `on_header` (name
/// lowercased, value trimmed) as it is read, before the body.
fn read_request(
    reader: &mut impl BufRead,
    mut on_header: impl FnMut(&str, &str),
) -> Option<Vec<u8>> {
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return None;
    }
    let mut content_length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            content_length = value.parse().unwrap_or(0);
        }
        on_header(&name, value);
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// Debian's chromium, if installed.
pub(crate) fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|dir| dir.join(name))
                    .find(|p| p.is_file())
            })
        })
}

/// Runs the browser headless with a deadline and the profile `profile`; returns stdout. Its
/// home is `profile/home`, so a download lands in `profile/home/Downloads`, never in the
/// user's. With `--dump-dom`, once the whole DOM is out (it ends with `</html>`) the browser
/// gets 5 s to exit and is then stopped: after a download, headless chromium sometimes never
/// exits (seen about once in ten runs, the DOM dumped and the download written).
pub(crate) fn browse(browser: &Path, args: &[&str], profile: &Path) -> String {
    browse_once(browser, args, profile).0
}

/// [`browse`] until the browser exits by itself (at most three runs), each run from an empty
/// `profile`: a browser stopped after its dump may not have written the page's
/// `localStorage` to the profile, which a later visit with the same profile reads.
pub(crate) fn browse_to_exit(browser: &Path, args: &[&str], profile: &Path) -> String {
    for _ in 0..2 {
        let (text, exited) = browse_once(browser, args, profile);
        if exited {
            return text;
        }
        eprintln!("chromium was stopped after its dump; running the visit again");
        std::fs::remove_dir_all(profile).unwrap();
        std::fs::create_dir_all(profile).unwrap();
    }
    browse_once(browser, args, profile).0
}

/// [`browse`], and whether the browser exited by itself (not stopped after its dump).
fn browse_once(browser: &Path, args: &[&str], profile: &Path) -> (String, bool) {
    let home = profile.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .env("HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut stdout = child.stdout.take().unwrap();
    let text = Arc::new(Mutex::new(String::new()));
    let reader = {
        let text = Arc::clone(&text);
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let mut chunk = [0u8; 8192];
            loop {
                match std::io::Read::read(&mut stdout, &mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        bytes.extend_from_slice(&chunk[..n]);
                        *text.lock().unwrap() = String::from_utf8_lossy(&bytes).into_owned();
                    }
                }
            }
        })
    };
    let mut dumped_at: Option<Instant> = None;
    let mut exited = true;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if dumped_at.is_none() && text.lock().unwrap().trim_end().ends_with("</html>") {
            dumped_at = Some(Instant::now());
        }
        if dumped_at.is_some_and(|at| at.elapsed() > Duration::from_secs(5)) {
            child.kill().unwrap();
            child.wait().unwrap();
            exited = false;
            break;
        }
        if started.elapsed() > Duration::from_secs(90) {
            child.kill().unwrap();
            panic!("chromium did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    reader.join().unwrap();
    (Arc::try_unwrap(text).unwrap().into_inner().unwrap(), exited)
}
