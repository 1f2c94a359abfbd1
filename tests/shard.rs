//! `--shard I/N` + `freshstack merge`: shards 0/2 + 1/2 (and 0..3/3) merged must be exactly the
//! bytes one process writes, for `embed` (real all-MiniLM-L6-v2; skipped loudly without it) and
//! the LLM stages (a deterministic fake model, in process and over two fake HTTP servers making
//! a fleet, one of them down).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use freshstack::NoProgress;
use freshstack::dataset::Shard;
use freshstack::llm::{Chat, ChatParams, Llm, Message};
use freshstack::merge::merge_shards;
use freshstack::pipeline::{
    JudgeConfig, JudgeInputs, NuggetsConfig, VariantsConfig, generate_nuggets,
    generate_query_variants, judge, nugget_labels,
};
use serde_json::json;

use crate::support::{FakeServer, dead_url};
use crate::util::{freshstack, write};

fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// Answers every stage's prompt deterministically from the prompt's text.
fn fake_answer(messages: &[Message]) -> String {
    let user = messages
        .iter()
        .find(|m| m.content.contains("Question"))
        .map_or("", |m| m.content.as_str());
    let h = fnv(user);
    if user.contains("\"judgments\"") {
        let docs: usize = user
            .split(" documents (D1 to D")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let nuggets: usize = user
            .split(" nuggets (N")
            .next()
            .and_then(|s| s.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let judgments: Vec<_> = (1..=docs)
            .map(|d| {
                let supported: serde_json::Map<String, serde_json::Value> = nugget_labels(nuggets)
                    .into_iter()
                    .enumerate()
                    .map(|(n, label)| (label, json!((h >> (d + 8 * n)) & 1 == 1)))
                    .collect();
                json!({"doc": format!("D{d}"), "reason": format!("r{}", h % 97), "supported": supported})
            })
            .collect();
        json!({ "judgments": judgments }).to_string()
    } else if user.contains("sub_questions") {
        json!({"sub_questions": [format!("s{}", h % 1000)], "closed_book_answer": format!("a{}", h % 77)})
            .to_string()
    } else {
        json!({"nuggets": [format!("fact {}", h % 1000), format!("fact {}", h % 313)]}).to_string()
    }
}

struct FakeChat;

impl Chat for FakeChat {
    fn backend(&self) -> &str {
        "fake"
    }
    fn model(&self) -> &str {
        "fake"
    }
    fn location(&self) -> String {
        "memory".into()
    }
    fn max_concurrency(&self) -> usize {
        3
    }
    fn chat(&self, messages: &[Message], _: &ChatParams) -> freshstack::Result<String> {
        Ok(fake_answer(messages))
    }
}

fn questions(dir: &Path, n: usize) -> PathBuf {
    let mut rows = String::new();
    for i in 0..n {
        let row = json!({"query_id": format!("q{i}"), "query_title": format!("Title {i}"),
            "query_text": format!("How do I do thing {i}?"), "answer_text": format!("Use {i}.")});
        rows.push_str(&row.to_string());
        rows.push('\n');
    }
    write(dir, "questions.jsonl", rows)
}

fn shard(i: usize, n: usize) -> Option<Shard> {
    Some(Shard { index: i, count: n })
}

#[test]
fn llm_stage_shards_merge_to_the_unsharded_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let questions = questions(dir, 7);
    let llm = Llm::new(Box::new(FakeChat), None);
    let out = |name: &str| dir.join(name);

    let whole = out("nuggets.jsonl");
    generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &whole,
        &NoProgress,
    )
    .unwrap();
    for n in [2, 3] {
        let parts: Vec<PathBuf> = (0..n)
            .map(|i| {
                let path = out(&format!("nuggets.{i}-of-{n}.jsonl"));
                let config = NuggetsConfig {
                    shard: shard(i, n),
                    ..NuggetsConfig::default()
                };
                generate_nuggets(&llm, &config, &questions, &path, &NoProgress).unwrap();
                path
            })
            .collect();
        let merged = out(&format!("nuggets.merged-{n}.jsonl"));
        let summary = merge_shards(&parts, &merged).unwrap();
        assert_eq!((summary.shards, summary.rows), (n, 7));
        assert_eq!(
            std::fs::read(&merged).unwrap(),
            std::fs::read(&whole).unwrap()
        );
    }

    let whole_variants = out("variants.jsonl");
    generate_query_variants(
        &llm,
        &VariantsConfig::default(),
        &questions,
        &whole_variants,
        &NoProgress,
    )
    .unwrap();
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| {
            let path = out(&format!("variants.{i}.jsonl"));
            let config = VariantsConfig {
                shard: shard(i, 2),
                ..VariantsConfig::default()
            };
            generate_query_variants(&llm, &config, &questions, &path, &NoProgress).unwrap();
            path
        })
        .collect();
    merge_shards(&parts, &out("variants.merged.jsonl")).unwrap();
    assert_eq!(
        std::fs::read(out("variants.merged.jsonl")).unwrap(),
        std::fs::read(&whole_variants).unwrap()
    );

    // Judge: 5 pooled questions, several calls each (3 documents per call).
    let mut corpus = String::new();
    for d in 0..8 {
        corpus.push_str(
            &json!({"_id": format!("d{d}"), "title": "", "text": format!("text {d}")}).to_string(),
        );
        corpus.push('\n');
    }
    let corpus = write(dir, "corpus.jsonl", corpus);
    let mut pool = String::new();
    for q in [0, 2, 3, 5, 6] {
        let docs: Vec<String> = (0..(3 + q % 4))
            .map(|d| format!("d{}", (d + q) % 8))
            .collect();
        pool.push_str(&json!({"query_id": format!("q{q}"), "doc_ids": docs}).to_string());
        pool.push('\n');
    }
    let pool = write(dir, "pool.jsonl", pool);
    let inputs = JudgeInputs {
        questions: &questions,
        nuggets: &whole,
        corpus: &corpus,
        pool: &pool,
    };
    // Half the calls asked again shuffled: each shard must sample the calls the whole run does.
    let config = JudgeConfig {
        docs_per_call: 3,
        self_check: 0.5,
        ..JudgeConfig::default()
    };
    let whole_judgments = out("judgments.jsonl");
    judge(&llm, &config, &inputs, &whole_judgments, &NoProgress).unwrap();
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| {
            let path = out(&format!("judgments.{i}.jsonl"));
            let config = JudgeConfig {
                shard: shard(i, 2),
                ..config.clone()
            };
            judge(&llm, &config, &inputs, &path, &NoProgress).unwrap();
            path
        })
        .collect();
    // Any order on the command line.
    let reversed: Vec<PathBuf> = parts.iter().rev().cloned().collect();
    merge_shards(&reversed, &out("judgments.merged.jsonl")).unwrap();
    let merged = std::fs::read(out("judgments.merged.jsonl")).unwrap();
    assert!(merged.len() > 500);
    assert!(String::from_utf8_lossy(&merged).contains("\"recheck\""));
    assert_eq!(merged, std::fs::read(&whole_judgments).unwrap());

    // Refusals: a missing shard, shards of different stages, a file without a sidecar.
    let err = merge_shards(&parts[..1], &out("x.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing shard(s) 1/2"), "{err}");
    let mixed = vec![parts[0].clone(), out("variants.1.jsonl")];
    let err = merge_shards(&mixed, &out("x.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("differ in stage"), "{err}");
    let err = merge_shards(std::slice::from_ref(&whole), &out("x.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("was it written as a shard?"), "{err}");
    // A truncated shard file.
    let text = std::fs::read_to_string(&parts[1]).unwrap();
    let first_line_len = text.find('\n').unwrap() + 1;
    std::fs::write(&parts[1], &text[first_line_len..]).unwrap();
    let err = merge_shards(&parts, &out("x.jsonl"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("sidecar says"), "{err}");
    assert!(!out("x.jsonl").exists());
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn embed_shards_merge_to_the_unsharded_bytes() {
    let model = crate::util::minilm_dir();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Real prose of varied lengths: the README's paragraphs.
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let mut corpus = String::new();
    for (i, para) in readme
        .split("\n\n")
        .filter(|p| p.trim().len() > 20)
        .take(12)
        .enumerate()
    {
        let text: String = para.chars().take(300).collect();
        corpus.push_str(
            &json!({"_id": format!("readme_{i}"), "title": "", "text": text}).to_string(),
        );
        corpus.push('\n');
    }
    let corpus = write(dir, "corpus.jsonl", corpus);
    let embed = |out: &Path, budget: &str, extra: &[&str]| {
        let mut args = vec![
            "embed",
            "--model",
            model.to_str().unwrap(),
            "--input",
            corpus.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--max-batch-tokens",
            budget,
            "--dtype",
            "f16",
        ];
        args.extend_from_slice(extra);
        let output = freshstack(&args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let whole = dir.join("whole.npy");
    embed(&whole, "200", &[]);
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| {
            let path = dir.join(format!("part{i}.npy"));
            embed(&path, "200", &["--shard", &format!("{i}/2")]);
            path
        })
        .collect();
    // Both shards hold work, interleaved.
    for part in &parts {
        let ids = std::fs::read_to_string(part.with_extension("ids")).unwrap();
        assert!(ids.lines().count() >= 3, "{ids}");
    }
    let merged = dir.join("merged.npy");
    let output = freshstack(&[
        "merge",
        "--out",
        merged.to_str().unwrap(),
        parts[1].to_str().unwrap(),
        parts[0].to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(&merged).unwrap(),
        std::fs::read(&whole).unwrap()
    );
    assert_eq!(
        std::fs::read(merged.with_extension("ids")).unwrap(),
        std::fs::read(whole.with_extension("ids")).unwrap()
    );

    // A shard made with another batch budget does not merge.
    let other = dir.join("other1.npy");
    embed(&other, "300", &["--shard", "1/2"]);
    let output = freshstack(&[
        "merge",
        "--out",
        dir.join("bad.npy").to_str().unwrap(),
        parts[0].to_str().unwrap(),
        other.to_str().unwrap(),
    ]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("differ in settings"));
    assert!(!dir.join("bad.npy").exists());
}

#[test]
fn cli_shards_over_a_fleet_with_a_dead_server_merge_to_the_unsharded_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let questions = questions(dir, 9);
    let (a, b) = (
        FakeServer::start(fake_answer),
        FakeServer::start(fake_answer),
    );
    let nuggets = |out: &Path, urls: &str, extra: &[&str]| {
        let mut args = vec![
            "nuggets",
            "--questions",
            questions.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--llm-model",
            "fake",
            "--no-cache",
            "--llm-concurrency",
            "2",
            "--llm-max-retries",
            "1",
        ];
        for url in urls.split(' ') {
            args.extend(["--llm-base-url", url]);
        }
        args.extend_from_slice(extra);
        let output = freshstack(&args);
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    let whole = dir.join("whole.jsonl");
    nuggets(&whole, &a.url, &[]);
    let before = (
        a.requests.load(Ordering::SeqCst),
        b.requests.load(Ordering::SeqCst),
    );
    assert_eq!(before, (9, 0));

    // Shard 0 over both servers (comma-separated), shard 1 over a dead one and b.
    let parts = [dir.join("n0.jsonl"), dir.join("n1.jsonl")];
    nuggets(
        &parts[0],
        &format!("{},{}", a.url, b.url),
        &["--shard", "0/2"],
    );
    let spread = (
        a.requests.load(Ordering::SeqCst) - before.0,
        b.requests.load(Ordering::SeqCst),
    );
    assert_eq!(spread.0 + spread.1, 5);
    assert!(
        spread.0 > 0 && spread.1 > 0,
        "calls spread over the fleet: {spread:?}"
    );
    nuggets(
        &parts[1],
        &format!("{} {}", dead_url(), b.url),
        &["--shard", "1/2"],
    );
    assert_eq!(
        b.requests.load(Ordering::SeqCst),
        spread.1 + 4,
        "the dead server's calls moved to b"
    );

    let merged = dir.join("merged.jsonl");
    let output = freshstack(&[
        "merge",
        "--out",
        merged.to_str().unwrap(),
        parts[0].to_str().unwrap(),
        parts[1].to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        std::fs::read(&merged).unwrap(),
        std::fs::read(&whole).unwrap()
    );

    // Every server down: a clear error, no output.
    let out = dir.join("none.jsonl");
    let output = freshstack(&[
        "nuggets",
        "--questions",
        questions.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--llm-model",
        "fake",
        "--no-cache",
        "--llm-max-retries",
        "0",
        "--llm-base-url",
        &dead_url(),
        "--llm-base-url",
        &dead_url(),
    ]);
    assert!(!output.status.success());
    assert!(!out.exists());
}
