//! LLM backends: the HTTP client's own overhead against a loopback server that answers at once
//! (calls/s at concurrency 64), and native generation speed of the SmolLM2 GGUF (tokens/s; run
//! `scripts/setup-llm.sh` first, skipped otherwise).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::llm::{Chat, ChatParams, LocalChat, Message, OpenAiChat, OpenAiConfig};

/// Answers every request with a fixed completion, keep-alive, one thread per connection.
fn start_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    let url = format!("http://{}/v1", listener.local_addr().expect("address"));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || serve(stream));
        }
    });
    url
}

fn serve(stream: TcpStream) {
    let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"{\"nuggets\": [\"a\", \"b\"]}"},"finish_reason":"stop"}]}"#;
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let Ok(clone) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(clone);
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let trimmed = line.trim_end();
            if trimmed.is_empty() {
                break;
            }
            if let Some((name, value)) = trimmed.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut buf = vec![0; length];
        if reader.read_exact(&mut buf).is_err() || writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

fn client_overhead(c: &mut Criterion) {
    const CONCURRENCY: usize = 64;
    const CALLS: usize = 64 * 20;
    let url = start_server();
    let mut config = OpenAiConfig::new(url, "bench");
    config.concurrency = CONCURRENCY;
    config.timeout = Duration::from_secs(30);
    let chat = OpenAiChat::new(config).expect("client");
    let messages = vec![
        Message::system("You write grading notes."),
        Message::user("Question: how do I reverse a list?\nAnswer: list.reverse()".repeat(20)),
    ];
    let params = ChatParams::default();
    let mut group = c.benchmark_group("llm_client");
    group.throughput(Throughput::Elements(CALLS as u64));
    group.sample_size(10);
    group.bench_function("loopback_calls_concurrency_64", |b| {
        b.iter(|| {
            std::thread::scope(|s| {
                for worker in 0..CONCURRENCY {
                    let (chat, messages, params) = (&chat, &messages, &params);
                    s.spawn(move || {
                        for _ in (worker..CALLS).step_by(CONCURRENCY) {
                            chat.chat(messages, params).expect("call");
                        }
                    });
                }
            });
        })
    });
    group.finish();
}

fn gguf_tokens(c: &mut Criterion) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.is_file() {
        eprintln!(
            "SKIPPED gguf bench: {} absent (run scripts/setup-llm.sh)",
            path.display()
        );
        return;
    }
    let chat = LocalChat::load(&path).expect("model");
    let prompt = chat.format().render(&[Message::user(
        "Write a long story about a robot who learns to paint. Use many details.",
    )]);
    let params = ChatParams {
        temperature: 0.0,
        max_tokens: 128,
        seed: None,
        json_schema: None,
    };
    let (_, tokens) = chat.generate(&prompt, &params).expect("generate");
    let mut group = c.benchmark_group("llm_gguf");
    group.throughput(Throughput::Elements(tokens as u64));
    group.sample_size(10);
    group.bench_function(format!("smollm2_135m_q4_1_{tokens}_tokens"), |b| {
        b.iter(|| chat.generate(&prompt, &params).expect("generate"))
    });
    group.finish();
}

criterion_group!(benches, client_overhead, gguf_tokens);
criterion_main!(benches);
