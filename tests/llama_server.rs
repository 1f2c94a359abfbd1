//! The LLM stages against a real llama.cpp `llama-server` (built by
//! `scripts/setup-llama-server.sh`) serving the real SmolLM2-135M GGUF, and Qwen2.5-Coder-0.5B
//! where present, through the OpenAI client with structured output: nuggets, query variants
//! and judging on the quickstart questions. Every answer must parse with zero repairs and match
//! its schema, a rerun on the same cache must make no call, and both runs must write the same
//! bytes. Skips loudly without the server binary or the model.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use freshstack::NoProgress;
use freshstack::dataset::{DropReason, NuggetsRecord, read_questions};
use freshstack::llm::{Llm, OpenAiChat, OpenAiConfig, ResponseCache};
use freshstack::pipeline::{
    JudgeConfig, JudgeInputs, NuggetsConfig, StructuredOutputUsed, VariantsConfig,
    generate_nuggets, generate_query_variants, judge,
};
use freshstack::source::stackoverflow::{
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_SITE_URL, DayRange, ImportConfig, TagFilter, TagMatch,
    import_questions,
};
use freshstack::source::{CorpusConfig, RepoSpec, build_corpus};
use serde_json::{Value, json};

use crate::support::free_port;

pub(crate) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `$FRESHSTACK_LLAMA_SERVER`, else the newest build under
/// `${FRESHSTACK_CACHE:-$HOME/.cache/freshstack}/llama.cpp/*/bin/`.
pub(crate) fn llama_server_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("FRESHSTACK_LLAMA_SERVER") {
        return Some(PathBuf::from(path)).filter(|p| p.is_file());
    }
    let cache = std::env::var_os("FRESHSTACK_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/freshstack")))?;
    let mut builds: Vec<PathBuf> = std::fs::read_dir(cache.join("llama.cpp"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin/llama-server"))
        .filter(|p| p.is_file())
        .collect();
    builds.sort();
    builds.pop()
}

/// A running `llama-server`, killed when dropped (also when the test panics).
struct Server {
    child: Child,
    url: String,
    log: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Starts `binary` on a free loopback port with `model` and waits for `/health`.
    fn start(binary: &Path, model: &Path, alias: &str, dir: &Path) -> Server {
        let port = free_port();
        let log = dir.join(format!("{alias}.log"));
        let out = std::fs::File::create(&log).unwrap();
        let child = Command::new(binary)
            .args(["-m", model.to_str().unwrap(), "-a", alias])
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            // Two slots of 8192 tokens each (the judge prompts need ~3000), decoded together.
            // One thread: on two busy cores (a build alongside) two threads stall on each
            // other's barriers (measured: 1 token/s with -t 2, 47 with -t 1).
            .args(["-c", "16384", "-np", "2", "-t", "1", "--no-webui"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap();
        let mut server = Server {
            child,
            url: format!("http://127.0.0.1:{port}/v1"),
            log,
        };
        let health = format!("http://127.0.0.1:{port}/health");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("llama-server exited ({status}):\n{}", server.log_tail());
            }
            if let Ok(response) = ureq::get(&health).call()
                && response.status() == 200
            {
                return server;
            }
            assert!(
                Instant::now() < deadline,
                "llama-server not healthy after 120 s:\n{}",
                server.log_tail()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn client(&self, alias: &str, cache: &Path) -> Llm {
        let mut config = OpenAiConfig::new(&self.url, alias);
        config.concurrency = 2;
        config.max_retries = 2;
        config.timeout = Duration::from_secs(600);
        let chat = OpenAiChat::new(config).unwrap();
        Llm::new(Box::new(chat), Some(ResponseCache::open(cache).unwrap()))
    }
}

/// The quickstart's questions, imported from `examples/quickstart/Posts.xml`.
pub(crate) fn quickstart_questions(dir: &Path) -> PathBuf {
    let out = dir.join("questions.jsonl");
    let config = ImportConfig {
        filter: TagFilter::new(&["freshstack".to_string()], TagMatch::Any).unwrap(),
        range: DayRange::default(),
        min_score: None,
        allow_unaccepted: false,
        site_url: DEFAULT_SITE_URL.to_string(),
        max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
    };
    import_questions(
        &root().join("examples/quickstart/Posts.xml"),
        &config,
        &out,
        &NoProgress,
    )
    .unwrap();
    out
}

fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|w| w.len() > 3)
        .map(str::to_ascii_lowercase)
        .collect()
}

/// A corpus of the LLM stage sources (chunks of 256 tokens) and a pool of each question's 3
/// documents sharing the most words with it (ties by id): small enough for two CPU cores.
pub(crate) fn corpus_and_pool(dir: &Path, questions: &Path) -> (PathBuf, PathBuf) {
    let corpus = dir.join("corpus.jsonl");
    let repo = RepoSpec::from_str(&format!(
        "freshstack/freshstack={}",
        root().join("src/pipeline").display()
    ))
    .unwrap();
    let mut config = CorpusConfig::new(vec![repo]);
    config.max_tokens = 256;
    // The LLM stages' files only (the orchestrator's stages live beside them).
    config.exclude = [
        "config.rs",
        "corpus.rs",
        "export.rs",
        "filter.rs",
        "index.rs",
        "manifest.rs",
        "orchestrator.rs",
        "pool.rs",
        "questions.rs",
        "quickstart.rs",
        "report.rs",
    ]
    .map(String::from)
    .to_vec();
    build_corpus(&config, &corpus, &NoProgress).unwrap();
    let docs: Vec<(String, BTreeSet<String>)> = std::fs::read_to_string(&corpus)
        .unwrap()
        .lines()
        .map(|l| {
            let doc: Value = serde_json::from_str(l).unwrap();
            (
                doc["_id"].as_str().unwrap().to_string(),
                words(doc["text"].as_str().unwrap()),
            )
        })
        .collect();
    let mut pool = String::new();
    for q in read_questions(questions).unwrap() {
        let asked = words(&format!("{} {}", q.query_title, q.query_text));
        let mut ranked: Vec<(usize, &str)> = docs
            .iter()
            .map(|(id, w)| (w.intersection(&asked).count(), id.as_str()))
            .collect();
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let ids: Vec<&str> = ranked.iter().take(3).map(|(_, id)| *id).collect();
        pool.push_str(&json!({"query_id": q.query_id, "doc_ids": ids}).to_string());
        pool.push('\n');
    }
    let pool_path = dir.join("pool.jsonl");
    std::fs::write(&pool_path, pool).unwrap();
    (corpus, pool_path)
}

/// What one pass over the three stages wrote and counted.
struct Pass {
    outputs: Vec<Vec<u8>>,
    calls: u64,
}

/// Nuggets, query variants and judging on `questions`, into `out`, with `llm`; asserts that
/// every answer was constrained, parsed and needed no repair. Prints the figures.
fn run_stages(llm: &Llm, label: &str, questions: &Path, dir: &Path, out: &Path) -> Pass {
    std::fs::create_dir_all(out).unwrap();
    let (corpus, pool) = (dir.join("corpus.jsonl"), dir.join("pool.jsonl"));
    let nuggets_path = out.join("nuggets.jsonl");
    let start = Instant::now();
    let config = NuggetsConfig {
        max_nuggets: 5,
        ..NuggetsConfig::default()
    };
    let nuggets = generate_nuggets(llm, &config, questions, &nuggets_path, &NoProgress).unwrap();
    let nuggets_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let config = VariantsConfig {
        max_sub_questions: 3,
        ..VariantsConfig::default()
    };
    let variants_path = out.join("variants.jsonl");
    let variants =
        generate_query_variants(llm, &config, questions, &variants_path, &NoProgress).unwrap();
    let variants_s = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let config = JudgeConfig {
        docs_per_call: 3,
        context_tokens: 8192,
        max_doc_tokens: 256,
        ..JudgeConfig::default()
    };
    let judgments_path = out.join("judgments.jsonl");
    let judged = judge(
        llm,
        &config,
        &JudgeInputs {
            questions,
            nuggets: &nuggets_path,
            corpus: &corpus,
            pool: &pool,
        },
        &judgments_path,
        &NoProgress,
    )
    .unwrap();
    let judge_s = start.elapsed().as_secs_f64();
    let rows: Vec<NuggetsRecord> = std::fs::read_to_string(&nuggets_path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let num_nuggets: usize = rows.iter().map(|r| r.nuggets.len()).sum();
    // A question whose every nugget the quality check dropped as cut is a failed row of a
    // parsed answer, not a parsing failure: it names what it dropped.
    let all_dropped = rows
        .iter()
        .filter(|r| r.nuggets.is_empty() && !r.dropped.is_empty())
        .count() as u64;
    // An answer the token budget ended inside its JSON (recorded as a cut entry without text)
    // is counted a schema mismatch by the stage; the server kept to the schema, the model ran
    // out of tokens. Every other mismatch is the server's and fails the test.
    let budget_cut = rows
        .iter()
        .filter(|r| {
            r.dropped
                .iter()
                .any(|d| d.text.is_empty() && d.reason == DropReason::Cut)
        })
        .count() as u64;
    eprintln!(
        "llama-server {label}: nuggets {}/{} questions ({num_nuggets} nuggets, {all_dropped} questions with every \
         nugget dropped) in {nuggets_s:.1} s; \
         variants {}/{} in {variants_s:.1} s; judging {}/{} calls, {} judgments ({} supported, {} \
         without a verdict) in {judge_s:.1} s; repairs {}/{}/{}, schema mismatches {}/{}/{}; \
         calls {}",
        nuggets.ok,
        nuggets.items,
        variants.ok,
        variants.items,
        judged.stage.ok,
        judged.stage.items,
        judged.judgments,
        judged.supported,
        judged.unjudged,
        nuggets.repairs,
        variants.repairs,
        judged.stage.repairs,
        nuggets.schema_mismatches,
        variants.schema_mismatches,
        judged.stage.schema_mismatches,
        judged.stage.llm.calls,
    );
    assert!(nuggets.ok > 0, "{label}: no question kept a nugget");
    for (stage, summary, quality_failures, budget_cuts) in [
        ("nuggets", &nuggets, all_dropped, budget_cut),
        ("variants", &variants, 0, 0),
        ("judge", &judged.stage, 0, 0),
    ] {
        assert_eq!(
            summary.structured_output,
            StructuredOutputUsed::JsonSchema,
            "{label} {stage}: {summary:?}"
        );
        assert_eq!(
            summary.failed, quality_failures,
            "{label} {stage}: {summary:?}"
        );
        assert_eq!(summary.repairs, 0, "{label} {stage}: {summary:?}");
        assert_eq!(
            summary.schema_mismatches, budget_cuts,
            "{label} {stage}: {summary:?}"
        );
    }
    assert_eq!(judged.unjudged, 0);
    assert_eq!(judged.questions_without_nuggets, all_dropped);
    Pass {
        outputs: [nuggets_path, variants_path, judgments_path]
            .iter()
            .map(|p| std::fs::read(p).unwrap())
            .collect(),
        calls: judged.stage.llm.calls,
    }
}

fn check_model(binary: &Path, model: &Path, alias: &str, max_questions: usize) {
    let dir = tempfile::tempdir().unwrap();
    let all = quickstart_questions(dir.path());
    let questions = dir.path().join("questions-kept.jsonl");
    let kept: String = std::fs::read_to_string(&all)
        .unwrap()
        .lines()
        .take(max_questions)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&questions, kept).unwrap();
    corpus_and_pool(dir.path(), &questions);
    let server = Server::start(binary, model, alias, dir.path());
    let cache = dir.path().join("cache.sqlite");
    let first = run_stages(
        &server.client(alias, &cache),
        alias,
        &questions,
        dir.path(),
        &dir.path().join("run1"),
    );
    assert!(first.calls > 0);
    let second = run_stages(
        &server.client(alias, &cache),
        &format!("{alias} rerun"),
        &questions,
        dir.path(),
        &dir.path().join("run2"),
    );
    assert_eq!(second.calls, 0, "the rerun is served by the cache");
    assert!(
        first.outputs == second.outputs,
        "{alias}: the rerun wrote different bytes"
    );
}

#[test]
#[cfg_attr(
    not(all(has_model_smollm2, has_model_qwen05)),
    ignore = "needs models/SmolLM2-135M-Instruct.Q4_1.gguf and qwen2.5-coder-0.5b: scripts/setup-llm.sh"
)]
fn llama_server_structured_output_parses_every_answer_without_repair() {
    let Some(binary) = llama_server_binary() else {
        eprintln!(
            "SKIPPED llama_server_structured_output_parses_every_answer_without_repair: no \
             llama-server (run scripts/setup-llama-server.sh, or set FRESHSTACK_LLAMA_SERVER)"
        );
        return;
    };
    let model = |file| crate::util::model_path(file, "scripts/setup-llm.sh");
    // Half the quickstart's questions: every stage's schema and both chat paths are exercised
    // by the first, and CI's budget (the whole suite on two cores) does not cover all twelve.
    check_model(
        &binary,
        &model("SmolLM2-135M-Instruct.Q4_1.gguf"),
        "smollm2",
        6,
    );
    // Four times slower on two cores: a quarter of the questions.
    check_model(
        &binary,
        &model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
        "qwen2.5-coder-0.5b",
        3,
    );
}
