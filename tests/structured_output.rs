//! Structured output through the OpenAI client, against the mock server of `llm.rs`: each
//! call carries the JSON Schema built from its inputs; a server that enforces it gets parsed
//! without repairs; one that refuses `response_format` (HTTP 400) gets the same request once
//! without it, for the rest of the client's life, and the stage summary says so; answers cut
//! off or off-schema are recorded per item with the raw answer; `off` sends no schema.

use std::path::{Path, PathBuf};

use freshstack::NoProgress;
use freshstack::dataset::{JudgmentRecord, NuggetsRecord};
use freshstack::llm::StructuredOutput;
use freshstack::pipeline::{
    JudgeConfig, JudgeInputs, NuggetsConfig, StructuredOutputUsed, VariantsConfig,
    generate_nuggets, generate_query_variants, judge, judge_schema, nuggets_schema,
    variants_schema,
};
use serde_json::{Value, json};

use crate::llm::read_lines;
use crate::support::{MockServer, SchemaServer, client};
use crate::util::write;

/// Questions without the prose markers of `llm.rs`; `[cutoff]` / `[bug]` where asked.
fn questions(dir: &Path, titles: &[(&str, &str)]) -> PathBuf {
    let rows: String = titles
        .iter()
        .map(|(id, title)| {
            json!({"query_id": id, "query_title": title, "query_text": format!("How do I use {title}?"),
                   "answer_id": "a", "answer_text": "Like this.", "metadata": {"tags": ["x"]}})
            .to_string()
                + "\n"
        })
        .collect();
    write(dir, "questions.jsonl", rows)
}

const PLAIN: [(&str, &str); 3] = [
    ("q1", "Laravel queues"),
    ("q2", "Godot physics"),
    ("q3", "YOLO export"),
];

/// The schema of each chat request, in arrival order (`Value::Null` when it had none).
fn schemas_sent(server: &MockServer) -> Vec<Value> {
    server
        .bodies()
        .iter()
        .map(|b| {
            let format = &b["response_format"];
            if format.is_null() {
                return Value::Null;
            }
            assert_eq!(format["type"], "json_schema", "{format}");
            assert_eq!(format["json_schema"]["strict"], true, "{format}");
            assert!(format["json_schema"]["name"].is_string(), "{format}");
            format["json_schema"]["schema"].clone()
        })
        .collect()
}

/// Judge inputs: `q1` with 3 documents, `q2` with 2, both with 2 nuggets.
fn judge_files(dir: &Path, q2_title: &str) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let questions = questions(dir, &[("q1", "Laravel queues"), ("q2", q2_title)]);
    let texts = [
        "uses ALPHA",
        "BETA and ALPHA",
        "nothing",
        "only BETA",
        "ALPHA again",
    ];
    let corpus: String = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            json!({"_id": format!("org/r/f{i}.md_0_1"), "title": "", "text": t,
                   "metadata": {"url": null, "start_byte": 0, "end_byte": 1, "commit_id": null}})
            .to_string()
                + "\n"
        })
        .collect();
    let corpus = write(dir, "corpus.jsonl", corpus);
    let pool = format!(
        "{}\n{}\n",
        json!({"query_id": "q1", "doc_ids": ["org/r/f0.md_0_1", "org/r/f1.md_0_1", "org/r/f2.md_0_1"]}),
        json!({"query_id": "q2", "doc_ids": ["org/r/f3.md_0_1", "org/r/f4.md_0_1"]})
    );
    let pool = write(dir, "pool.jsonl", pool);
    let nuggets: String = ["q1", "q2"]
        .iter()
        .map(|q| {
            json!({"query_id": q, "nuggets": [{"_id": format!("{q}_0"), "text": "needs ALPHA"},
                                               {"_id": format!("{q}_1"), "text": "needs BETA"}]})
            .to_string()
                + "\n"
        })
        .collect();
    let nuggets = write(dir, "nuggets.jsonl", nuggets);
    (questions, nuggets, corpus, pool)
}

#[test]
fn each_call_carries_its_schema_and_enforced_answers_need_no_repair() {
    let server = MockServer::start_with(false, SchemaServer::Enforce);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions(dir.path(), &PLAIN);
    let cache = dir.path().join("cache.sqlite");

    let out = dir.path().join("nuggets.jsonl");
    let config = NuggetsConfig {
        max_nuggets: 4,
        ..NuggetsConfig::default()
    };
    let llm = client(&server.url, 2, Some(&cache));
    let summary = generate_nuggets(&llm, &config, &questions, &out, &NoProgress).unwrap();
    assert_eq!((summary.ok, summary.failed, summary.repairs), (3, 0, 0));
    assert_eq!(summary.structured_output, StructuredOutputUsed::JsonSchema);
    assert_eq!(summary.schema_mismatches, 0);
    assert!(summary.structured_output_refusal.is_none());
    let sent = schemas_sent(&server);
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|s| *s == nuggets_schema(4)), "{sent:?}");
    let rows: Vec<NuggetsRecord> = read_lines(&out);
    assert_eq!(rows[0].nuggets[0].text, "Laravel queues needs ALPHA");

    let out = dir.path().join("variants.jsonl");
    let config = VariantsConfig {
        max_sub_questions: 3,
        ..VariantsConfig::default()
    };
    let summary = generate_query_variants(&llm, &config, &questions, &out, &NoProgress).unwrap();
    assert_eq!(
        (summary.ok, summary.repairs, summary.schema_mismatches),
        (3, 0, 0)
    );
    let sent = schemas_sent(&server);
    assert!(
        sent[3..]
            .iter()
            .all(|s| *s == variants_schema(3, VariantsConfig::default().params.max_tokens))
    );

    let (questions, nuggets, corpus, pool) = judge_files(dir.path(), "Godot physics");
    let out = dir.path().join("judgments.jsonl");
    let inputs = JudgeInputs {
        questions: &questions,
        nuggets: &nuggets,
        corpus: &corpus,
        pool: &pool,
    };
    let before = server.bodies().len();
    // No self-check: the calls counted and the schemas compared are the two of the batches.
    let config = JudgeConfig {
        self_check: 0.0,
        ..JudgeConfig::default()
    };
    let summary = judge(&llm, &config, &inputs, &out, &NoProgress).unwrap();
    assert_eq!((summary.stage.ok, summary.stage.repairs), (2, 0));
    assert_eq!(summary.stage.schema_mismatches, 0);
    assert_eq!(
        summary.stage.structured_output,
        StructuredOutputUsed::JsonSchema
    );
    assert_eq!((summary.judgments, summary.unjudged), (10, 0));
    // One schema per call, built from the call: its document count and nugget labels.
    let mut sent: Vec<Value> = schemas_sent(&server)[before..].to_vec();
    sent.sort_by_key(|s| s.to_string());
    let max_tokens = JudgeConfig::default().params.max_tokens;
    let mut want = vec![
        // What is sent has its keys sorted (llm::schema::sorted_keys; generation order).
        freshstack::llm::schema::sorted_keys(judge_schema(3, 2, max_tokens)),
        freshstack::llm::schema::sorted_keys(judge_schema(2, 2, max_tokens)),
    ];
    want.sort_by_key(|s| s.to_string());
    assert_eq!(sent, want);
    let rows: Vec<JudgmentRecord> = read_lines(&out);
    let d1 = rows.iter().find(|r| r.doc_id == "org/r/f0.md_0_1").unwrap();
    assert_eq!(
        d1.rationale, "doc 1 read",
        "the reasoning field is the rationale"
    );

    // A rerun on the same cache makes no call and writes the same bytes.
    let first = std::fs::read(&out).unwrap();
    let requests = server.requests();
    let llm = client(&server.url, 2, Some(&cache));
    let again = judge(&llm, &config, &inputs, &out, &NoProgress).unwrap();
    assert_eq!((again.stage.llm.calls, server.requests()), (0, requests));
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn off_sends_no_schema_and_the_same_prompts() {
    let server = MockServer::start_with(false, SchemaServer::Enforce);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions(dir.path(), &PLAIN);
    for mode in [StructuredOutput::JsonSchema, StructuredOutput::Off] {
        let config = NuggetsConfig {
            structured_output: mode,
            ..NuggetsConfig::default()
        };
        let out = dir.path().join(format!("nuggets-{mode}.jsonl"));
        let summary = generate_nuggets(
            &client(&server.url, 1, None),
            &config,
            &questions,
            &out,
            &NoProgress,
        )
        .unwrap();
        assert_eq!(summary.ok, 3);
        let want = match mode {
            StructuredOutput::JsonSchema => StructuredOutputUsed::JsonSchema,
            StructuredOutput::Off => StructuredOutputUsed::Off,
        };
        assert_eq!(summary.structured_output, want);
    }
    let bodies = server.bodies();
    assert_eq!(bodies.len(), 6);
    for (with, without) in bodies[..3].iter().zip(&bodies[3..]) {
        assert!(with.get("response_format").is_some());
        assert!(without.get("response_format").is_none(), "{without}");
        assert_eq!(
            with["messages"], without["messages"],
            "same prompt either way"
        );
    }
}

#[test]
fn a_server_refusing_response_format_falls_back_once_and_says_so() {
    let server = MockServer::start_with(false, SchemaServer::Refuse);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions(dir.path(), &PLAIN);
    let cache = dir.path().join("cache.sqlite");
    let out = dir.path().join("nuggets.jsonl");
    let llm = client(&server.url, 1, Some(&cache));
    let summary = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap();
    // Unconstrained answers (prose around the JSON) still parse, through the lenient parser.
    assert_eq!((summary.ok, summary.failed), (3, 0));
    assert_eq!(summary.structured_output, StructuredOutputUsed::Refused);
    let refusal = summary.structured_output_refusal.as_deref().unwrap();
    assert!(
        refusal.contains("400") && refusal.contains("response_format"),
        "{refusal}"
    );
    assert_eq!(
        summary.schema_mismatches, 0,
        "unconstrained answers are not checked"
    );
    // Once per client: the first request carried the schema, every later one did not.
    let sent = schemas_sent(&server);
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert!(!sent[0].is_null());
    assert!(sent[1..].iter().all(Value::is_null));
    assert_eq!(
        server.bodies()[0]["messages"],
        server.bodies()[1]["messages"]
    );
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["structured_output"], "refused");

    // The same client keeps asking without a schema in the next stage.
    let variants = dir.path().join("variants.jsonl");
    let summary = generate_query_variants(
        &llm,
        &VariantsConfig::default(),
        &questions,
        &variants,
        &NoProgress,
    )
    .unwrap();
    assert_eq!(summary.structured_output, StructuredOutputUsed::Refused);
    assert!(schemas_sent(&server)[4..].iter().all(Value::is_null));

    // A new client rediscovers the refusal with one call (its unconstrained answer is already
    // cached under the key of what was really sent); the rest comes from the cache.
    let first = std::fs::read(&out).unwrap();
    let requests = server.requests();
    let llm = client(&server.url, 1, Some(&cache));
    let again = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap();
    assert_eq!((again.llm.calls, again.llm.cache_hits), (1, 2));
    assert_eq!(
        server.requests(),
        requests + 2,
        "the refused request and its fallback"
    );
    assert_eq!(std::fs::read(&out).unwrap(), first);
}

#[test]
fn the_cli_warns_and_its_summary_says_structured_output_was_refused() {
    let server = MockServer::start_with(false, SchemaServer::Refuse);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions(dir.path(), &PLAIN);
    let out = dir.path().join("out/nuggets.jsonl");
    let summary = dir.path().join("out/summary.json");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "nuggets",
            "--questions",
            questions.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--summary",
            summary.to_str().unwrap(),
            "--llm-base-url",
            &server.url,
            "--llm-model",
            "mock-model",
            "--no-cache",
        ];
        args.extend_from_slice(extra);
        crate::util::freshstack(&args)
    };
    let output = run(&[]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("refused structured output"), "{stderr}");
    // At the default verbosity the HTTP client's protocol log stays quiet.
    assert!(!stderr.contains("DEBUG"), "{stderr}");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(written["structured_output"], "refused", "{written}");
    assert!(
        written["structured_output_refusal"]
            .as_str()
            .unwrap()
            .contains("400")
    );

    let before = server.bodies().len();
    let output = run(&["--llm-structured-output", "off"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");
    assert!(schemas_sent(&server)[before..].iter().all(Value::is_null));
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(written["structured_output"], "off");
    let output = run(&["--llm-structured-output", "grammar"]);
    assert!(!output.status.success());
}

#[test]
fn a_400_without_the_schema_too_is_an_error_naming_both_answers() {
    let server = MockServer::start_with(false, SchemaServer::RefuseEverything);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions(dir.path(), &PLAIN[..1]);
    let out = dir.path().join("nuggets.jsonl");
    let llm = client(&server.url, 1, None);
    let err = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("with response_format json_schema, and without it"),
        "{err}"
    );
    assert_eq!(err.matches("HTTP 400").count(), 2, "{err}");
    assert!(!out.exists());
    assert!(
        llm.chat_backend().json_schema_refusal().is_none(),
        "the 400 was not about the schema: nothing remembered"
    );
    assert_eq!(server.requests(), 2);
}

#[test]
fn cut_off_and_off_schema_answers_are_recorded_with_the_raw_answer() {
    let server = MockServer::start_with(false, SchemaServer::Enforce);
    let dir = tempfile::tempdir().unwrap();
    let questions = questions(
        dir.path(),
        &[("q1", "Laravel queues"), ("q2", "Godot physics [cutoff]")],
    );
    let out = dir.path().join("nuggets.jsonl");
    let llm = client(&server.url, 2, None);
    let summary = generate_nuggets(
        &llm,
        &NuggetsConfig::default(),
        &questions,
        &out,
        &NoProgress,
    )
    .unwrap();
    assert_eq!((summary.ok, summary.failed), (1, 1));
    assert_eq!(summary.repairs, 2, "two repairs, cut off again each time");
    assert_eq!(summary.schema_mismatches, 3);
    let rows: Vec<NuggetsRecord> = read_lines(&out);
    let cut = &rows[1];
    assert!(cut.nuggets.is_empty());
    let error = cut.error.as_deref().unwrap();
    assert!(error.contains("cut off at max_tokens"), "{error}");
    let raw = cut.raw.as_deref().unwrap();
    assert!(raw.starts_with("{\"nuggets\":") && serde_json::from_str::<Value>(raw).is_err());

    // A server bug: the judge answer leaves out a document the schema requires.
    let (questions, nuggets, corpus, pool) = judge_files(dir.path(), "Godot physics [bug]");
    let out = dir.path().join("judgments.jsonl");
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
    assert_eq!((summary.stage.ok, summary.stage.failed), (1, 1));
    assert_eq!(summary.stage.schema_mismatches, 3);
    let rows: Vec<JudgmentRecord> = read_lines(&out);
    let unjudged: Vec<&JudgmentRecord> = rows.iter().filter(|r| r.supported.is_none()).collect();
    // q2's D1 keeps its verdicts (the partial answer); D2 has none, and is not taken as "no".
    assert_eq!(unjudged.len(), 2, "q2: 2 nuggets x the missing document");
    assert_eq!(summary.unjudged, 2);
    assert!(unjudged.iter().all(|r| r.doc_id == "org/r/f4.md_0_1"));
    for row in unjudged {
        assert_eq!(row.query_id, "q2");
        let error = row.error.as_deref().unwrap();
        assert!(error.contains("no usable judgment for D2"), "{error}");
        assert!(error.contains("does not match the JSON schema"), "{error}");
        assert!(row.raw.as_deref().unwrap().contains("\"judgments\""));
    }
}
