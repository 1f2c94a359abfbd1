//! The report on the hand-made dataset `tests/fixtures/report` (expected values worked out by
//! hand in the comments).

use std::path::{Path, PathBuf};

use super::*;
use crate::progress::NoProgress;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

fn report() -> Report {
    compute(&fixture(), &ReportOptions::default(), &NoProgress).unwrap()
}

#[test]
fn statistics_of_the_fixture() {
    let s = report().statistics;
    assert_eq!(s.topic.as_deref(), Some("Laravel & <friends>"));
    assert_eq!(s.num_queries, 3);
    // 5 rows (a blank line skipped); attributed by manifest prefix, then the url.
    assert_eq!(s.num_docs, 5);
    let repos: Vec<(&str, usize)> = s
        .docs_per_repo
        .iter()
        .map(|r| (r.name.as_str(), r.docs))
        .collect();
    assert_eq!(
        repos,
        [
            ("laravel/docs", 1),
            ("laravel/framework", 3),
            ("livewire/livewire", 0),
            ("other/repo", 1)
        ]
    );
    assert_eq!(s.num_repos, 4);
    // 2 + 1 + 0 nuggets over 3 questions.
    assert_eq!(s.num_nuggets, 3);
    assert_eq!(s.avg_nuggets_per_query, 1.0);
    // q1 has a fenced block in its body, q12's answer has one; q12's body is HTML without <pre>.
    assert_eq!((s.queries_with_code, s.answers_with_code), (1, 1));
    assert_eq!(s.pct_queries_with_code, 33.3333);
    assert_eq!(s.pct_answers_with_code, 33.3333);
    // Per nugget: q1_0 {d1, d2} = 2, q1_1 {d2} = 1 (d4 is also non-relevant: not relevant),
    // q12_0 {d4} = 1: 4 / 3. Per question: q1 {d1, d2} = 2, q12 1, q3 0: 3 / 3.
    assert_eq!(s.avg_relevant_docs_per_nugget, 1.3333);
    assert_eq!(s.avg_relevant_docs_per_query, 1.0);
    assert_eq!(s.tokenizer, "o200k_base");
}

#[test]
fn token_lengths_are_title_plus_body_and_the_answer() {
    // tiktoken on `title + " " + text` and on the answer, summed over the 3 questions:
    // o200k_base 46 and 19 tokens, cl100k_base 48 and 19 (the empty answer counts 0 and its
    // question still counts in the mean).
    let s = report().statistics;
    assert_eq!((s.avg_query_tokens, s.avg_answer_tokens), (15.3333, 6.3333));
    let options = ReportOptions {
        tokenizer: TokenizerKind::Cl100kBase,
    };
    let s = compute(&fixture(), &options, &NoProgress)
        .unwrap()
        .statistics;
    assert_eq!((s.avg_query_tokens, s.avg_answer_tokens), (16.0, 6.3333));
    assert_eq!(s.tokenizer, "cl100k_base");
}

#[test]
fn pooling_rows_in_display_order_with_hand_worked_values() {
    let p = report().pooling;
    assert_eq!(p.judged_queries, 2);
    let names: Vec<String> = p
        .rows
        .iter()
        .map(|r| {
            format!(
                "{}.{}.{}",
                r.name.setting, r.name.technique, r.name.retriever
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "inference.question.bm25",
            "inference.question.fusion",
            "inference.subquestions.bge-base-en-v1.5",
            "oracle.answer.fusion",
            "oracle.nuggets.bm25",
        ]
    );
    let bm25 = &p.rows[0];
    assert_eq!(bm25.run, "runs/inference.question.bm25.trec");
    // q1: README (judged, supports nothing), Route.php_0_100 (supports q1_0), x.py (unjudged).
    // DCG = 1/log2(3); ideal: Route.php_100_200 (both nuggets, 2) then Route.php_0_100
    // (q1_0 again, 0.5/log2(3)); q1 = 0.63093/2.31546 = 0.27249; q12 = 1. Mean 0.6362.
    assert_eq!(bm25.alpha_ndcg_10, 0.6362);
    // q1 covers q1_0 only (1/2), q12 covers its nugget: 0.75. Recall: q1 finds 1 of {d1, d2}.
    assert_eq!(bm25.coverage_20, 0.75);
    assert_eq!(bm25.recall_50, 0.75);
    assert_eq!(bm25.missing_queries, 0);
    // The bge run has no ranking for q12.
    assert_eq!(p.rows[2].missing_queries, 1);
}

#[test]
fn filtering_and_manifest_are_optional() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["corpus.jsonl", "queries.jsonl"] {
        std::fs::copy(fixture().join(name), dir.path().join(name)).unwrap();
    }
    let r = compute(dir.path(), &ReportOptions::default(), &NoProgress).unwrap();
    assert_eq!(r.filtering, None);
    assert_eq!(r.statistics.topic, None);
    // Without the manifest, docs go by url: the same repositories minus the empty one.
    assert_eq!(r.statistics.num_repos, 3);
    assert!(r.pooling.rows.is_empty());
    let page = render_html(&r, None).unwrap();
    assert!(page.contains("No filtering.json") && page.contains("No run in runs/"));
}

#[test]
fn bad_inputs_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let err = compute(dir.path(), &ReportOptions::default(), &NoProgress).unwrap_err();
    assert!(err.to_string().contains("queries.jsonl"), "{err}");
    for name in ["corpus.jsonl", "queries.jsonl"] {
        std::fs::copy(fixture().join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("filtering.json"), r#"{"questions_in": 3}"#).unwrap();
    let err = compute(dir.path(), &ReportOptions::default(), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("filtering.json:1:") && err.contains("dropped_no_supported_nugget"),
        "{err}"
    );
    std::fs::remove_file(dir.path().join("filtering.json")).unwrap();
    std::fs::write(
        dir.path().join("corpus.jsonl"),
        "{\"_id\": \"a\"}\n{\"text\": \"no id\"}\n",
    )
    .unwrap();
    let err = compute(dir.path(), &ReportOptions::default(), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("corpus.jsonl:2:") && err.contains("_id"),
        "{err}"
    );
    std::fs::copy(
        fixture().join("corpus.jsonl"),
        dir.path().join("corpus.jsonl"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("runs")).unwrap();
    std::fs::write(
        dir.path().join("runs/oracle.answer.bm25.trec"),
        "q1 Q0 d1 1\n",
    )
    .unwrap();
    let err = compute(dir.path(), &ReportOptions::default(), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(err.contains("oracle.answer.bm25.trec:1:"), "{err}");
}

#[test]
fn writes_three_files_with_the_same_bytes_twice() {
    let dir = tempfile::tempdir().unwrap();
    let r = report();
    let files = write(dir.path(), &r, None, None).unwrap();
    assert_eq!(files.html, dir.path().join("report.html"));
    let first: Vec<Vec<u8>> = [&files.stats, &files.results, &files.html]
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    write(dir.path(), &report(), None, None).unwrap();
    for (path, bytes) in [&files.stats, &files.results, &files.html]
        .iter()
        .zip(&first)
    {
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "{}", path.display());
    }
    // Nothing else (no temporary file) is left behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    // generate = compute + write with the defaults.
    let copy = tempfile::tempdir().unwrap();
    for name in [
        "corpus.jsonl",
        "queries.jsonl",
        "manifest.json",
        "filtering.json",
    ] {
        std::fs::copy(fixture().join(name), copy.path().join(name)).unwrap();
    }
    let (_, made) = generate(copy.path(), &ReportOptions::default(), &NoProgress).unwrap();
    assert_eq!(std::fs::read(&made.stats).unwrap(), first[0]);
    let stats: serde_json::Value = serde_json::from_slice(&first[0]).unwrap();
    assert_eq!(stats["statistics"]["num_docs"], 5);
    assert_eq!(stats["filtering"]["questions_out"], 3);
    let results: serde_json::Value = serde_json::from_slice(&first[1]).unwrap();
    assert_eq!(results["rows"][0]["alpha_ndcg@10"], 0.6362);
    assert_eq!(results["rows"][0]["setting"], "inference");
}

#[test]
fn html_escapes_and_holds_the_numbers() {
    let page = render_html(&report(), Some("generated <now>")).unwrap();
    if let Ok(path) = std::env::var("FRESHSTACK_DUMP_REPORT") {
        std::fs::write(path, &page).unwrap();
    }
    assert!(page.contains("<title>FreshStack report: Laravel &amp; &lt;friends&gt;</title>"));
    assert!(page.contains("generated &lt;now&gt;"));
    assert!(!page.contains("<friends>") && !page.contains("<now>"));
    assert!(page.contains("<td class=\"num\">0.6362</td>"));
    // Best of the inference setting in bold.
    assert!(page.contains("<td class=\"num\"><b>0.8155</b></td>"));
    assert!(page.contains("33.3%") && page.contains("20.0%"));
    assert_eq!(page.matches("<svg").count(), 3);
    // Self-contained: no script, stylesheet link or external source.
    assert!(!page.contains("<script") && !page.contains("<link") && !page.contains(" src="));
}

#[test]
fn filtering_json_as_the_build_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    for name in ["corpus.jsonl", "queries.jsonl"] {
        std::fs::copy(fixture().join(name), dir.path().join(name)).unwrap();
    }
    std::fs::write(
        dir.path().join("filtering.json"),
        r#"{"questions_in": 10, "dropped_no_nuggets": 2, "dropped_no_supported_nugget": 3,
        "dropped_any_unsupported_nugget": 0, "questions_out": 5,
        "require_all_nuggets_supported": false, "future_field": 1}"#,
    )
    .unwrap();
    let r = compute(dir.path(), &ReportOptions::default(), &NoProgress).unwrap();
    let f = r.filtering.clone().unwrap();
    assert_eq!(f.dropped_no_nuggets, Some(2));
    assert_eq!(f.require_all_nuggets_supported, Some(false));
    let page = render_html(&r, None).unwrap();
    assert!(page.contains(
        "<tr><td>Dropped: no nuggets</td><td class=\"num\">2</td><td class=\"num\">20.0%</td></tr>"
    ));
    assert!(page.contains("(rule not applied)"));
    assert!(page.contains("<td class=\"num\">50.0%</td>"));
}

/// `changes.json` adds a "Changes" section at the end of the page and changes nothing else.
#[test]
fn changes_json_adds_a_section_and_nothing_else() {
    use crate::pipeline::changes::{
        Changes, Counts, Drift, JudgmentChanges, LlmChanges, QuestionChanges, RepositoryChanges,
        RunDrift, Scores, StageRequests,
    };
    let scores = |a, c, r| Scores {
        alpha_ndcg_10: a,
        coverage_20: c,
        recall_50: r,
    };
    let changes = Changes {
        format: 1,
        retire_before: Some("2024-03-01".into()),
        questions: QuestionChanges {
            added: vec!["14".into(), "15".into()],
            retired: vec!["11".into()],
            kept: 3,
            changed: vec!["13".into()],
        },
        repositories: [(
            "acme/<demo>".to_string(),
            RepositoryChanges {
                documents: Counts {
                    added: 2,
                    removed: 2,
                    changed: 0,
                    unchanged: 5,
                },
                files: Counts {
                    added: 1,
                    removed: 1,
                    changed: 1,
                    unchanged: 5,
                },
            },
        )]
        .into_iter()
        .collect(),
        judgments: JudgmentChanges {
            reused: 14,
            new: 44,
        },
        llm: LlmChanges {
            nuggets: StageRequests {
                carried: 1,
                requests: 4,
            },
            variants: StageRequests {
                carried: 2,
                requests: 3,
            },
            judge: StageRequests {
                carried: 7,
                requests: 12,
            },
        },
        drift: Drift {
            questions: 3,
            runs: vec![
                RunDrift {
                    run: "inference.question.bm25".into(),
                    old: Some(scores(0.438, 1.0, 0.3333)),
                    new: Some(scores(0.5895, 1.0, 0.5)),
                    delta: Some(scores(0.1515, 0.0, 0.1667)),
                },
                RunDrift {
                    run: "oracle.nuggets.fusion".into(),
                    old: None,
                    new: Some(scores(0.9, 1.0, 1.0)),
                    delta: None,
                },
            ],
        },
    };
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&fixture(), dir.path());
    let without = render_html(
        &compute(dir.path(), &ReportOptions::default(), &NoProgress).unwrap(),
        None,
    )
    .unwrap();
    crate::dataset::write_json_atomic(dir.path().join("changes.json"), &changes).unwrap();
    let report = compute(dir.path(), &ReportOptions::default(), &NoProgress).unwrap();
    assert_eq!(report.changes.as_ref(), Some(&changes));
    let with = render_html(&report, None).unwrap();
    let start = with.find("<h2 id=\"changes-title\">").unwrap();
    let end = with.rfind("</body>").unwrap();
    assert_eq!(format!("{}{}", &with[..start], &with[end..]), without);
    let section = &with[start..end];
    for text in [
        "before 2024-03-01",
        "<td>Questions added</td><td class=\"num\">2</td>",
        "<td>Judging</td><td class=\"num\">7 pairs</td><td class=\"num\">12</td>",
        "<td>acme/&lt;demo&gt;</td><td class=\"num\">1</td>",
        "the 3 question(s)",
        "<td class=\"num\">0.4380</td><td class=\"num\">0.5895</td><td class=\"num\">+0.1515</td>",
        "<td class=\"num\">-</td><td class=\"num\">0.9000</td><td class=\"num\">-</td>",
    ] {
        assert!(section.contains(text), "{text}\n{section}");
    }
    // A malformed record is an error naming the file.
    std::fs::write(dir.path().join("changes.json"), "{\"format\": 1}").unwrap();
    let err = compute(dir.path(), &ReportOptions::default(), &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(err.contains("changes.json"), "{err}");
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
