//! `freshstack report` end to end: files, numbers equal to `freshstack eval`, a well-formed page
//! that a real browser (Debian's chromium, headless) renders with its tables and charts.

use std::path::{Path, PathBuf};

use quick_xml::Reader;
use quick_xml::events::Event;

use crate::support::{browse, chromium};
use crate::util::{copy_dir, freshstack};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

/// A copy of the fixture dataset in a temporary directory (the report writes into it).
fn dataset() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture(), dir.path());
    dir
}

fn run_report(dir: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["report", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = freshstack(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn pooling_results_equal_freshstack_eval() {
    let dir = dataset();
    run_report(dir.path(), &[]);
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("results.json")).unwrap()).unwrap();
    let rows = results["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 5);
    for row in rows {
        let run = dir.path().join(row["run"].as_str().unwrap());
        let queries = dir.path().join("queries.jsonl");
        let out = freshstack(&[
            "eval",
            "--queries",
            queries.to_str().unwrap(),
            "--run",
            run.to_str().unwrap(),
            "--json",
        ]);
        assert!(out.status.success());
        let eval: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        for key in ["alpha_ndcg@10", "coverage@20", "recall@50"] {
            assert_eq!(row[key], eval[key], "{} {key}", run.display());
        }
    }
}

#[test]
fn out_flag_moves_only_the_page_and_reruns_are_identical() {
    let dir = dataset();
    let page = dir.path().join("site/index.html");
    let out = run_report(dir.path(), &["--out", page.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("3 queries, 5 docs from 4 repositories"),
        "{stdout}"
    );
    assert!(stdout.contains("0.6362"), "{stdout}");
    assert!(!dir.path().join("report.html").exists());
    let first = std::fs::read(&page).unwrap();
    let stats = std::fs::read(dir.path().join("stats.json")).unwrap();
    run_report(dir.path(), &["--out", page.to_str().unwrap()]);
    assert_eq!(std::fs::read(&page).unwrap(), first);
    assert_eq!(std::fs::read(dir.path().join("stats.json")).unwrap(), stats);
}

#[test]
fn a_page_onto_an_input_is_refused_and_a_failing_report_replaces_nothing() {
    let dir = dataset();
    let queries = dir.path().join("queries.jsonl");
    let before = std::fs::read(&queries).unwrap();
    std::fs::write(dir.path().join("results.json"), "old results\n").unwrap();
    std::fs::write(dir.path().join("stats.json"), "old stats\n").unwrap();
    let unwritable = queries.join("page.html");
    for page in [
        &queries,
        &dir.path().join("runs/oracle.nuggets.bm25.trec"),
        &unwritable,
    ] {
        let out = freshstack(&[
            "report",
            dir.path().to_str().unwrap(),
            "--out",
            page.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{}: {err}", page.display());
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert_eq!(std::fs::read(&queries).unwrap(), before);
        for (name, old) in [
            ("results.json", "old results\n"),
            ("stats.json", "old stats\n"),
        ] {
            let now = std::fs::read_to_string(dir.path().join(name)).unwrap();
            assert_eq!(now, old, "{name} was replaced by a failing report");
        }
    }
}

#[test]
fn bad_dataset_is_one_line_naming_the_file() {
    let dir = dataset();
    std::fs::write(dir.path().join("manifest.json"), "{\"topic\": \n").unwrap();
    let out = freshstack(&["report", dir.path().to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("manifest.json:2:"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    // Nothing was written.
    assert!(!dir.path().join("report.html").exists());
    let out = freshstack(&[
        "report",
        dir.path().to_str().unwrap(),
        "--tokenizer",
        "gpt2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("gpt2"));
}

/// Element names of a well-formed XML text, failing on any unbalanced or mismatched tag.
fn element_names(xml: &str) -> Vec<String> {
    let mut reader = Reader::from_str(xml);
    let mut stack: Vec<String> = Vec::new();
    let mut names = Vec::new();
    loop {
        match reader.read_event() {
            Ok(Event::Start(e)) => {
                let name = e.name().0.to_string();
                names.push(name.clone());
                stack.push(name);
            }
            Ok(Event::Empty(e)) => {
                names.push(e.name().0.to_string());
            }
            Ok(Event::End(e)) => {
                let name = e.name().0.to_string();
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.as_str()),
                    "unbalanced </{name}>"
                );
            }
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("not well-formed at {}: {e}", reader.buffer_position()),
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    names
}

#[test]
fn page_and_its_svg_charts_are_well_formed() {
    let dir = dataset();
    run_report(dir.path(), &[]);
    let page = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    let body = page.strip_prefix("<!DOCTYPE html>\n").unwrap();
    let names = element_names(body);
    let count = |n: &str| names.iter().filter(|x| *x == n).count();
    assert_eq!(count("table"), 4);
    assert_eq!(count("svg"), 3);
    assert_eq!(count("figure"), 3);
    // Each chart on its own: 5 bars (one per run), 4 legend swatches and the background.
    let mut rest = page.as_str();
    let mut charts = 0;
    while let Some(start) = rest.find("<svg") {
        let end = rest[start..].find("</svg>").unwrap() + start + "</svg>".len();
        let svg = &rest[start..end];
        let names = element_names(svg);
        let rects = names.iter().filter(|n| *n == "rect").count();
        assert!(rects >= 10, "{rects} rects");
        assert!(svg.contains("xmlns=\"http://www.w3.org/2000/svg\""));
        charts += 1;
        rest = &rest[end..];
    }
    assert_eq!(charts, 3);
    for number in [
        "0.6362",
        "0.8155",
        "0.2159",
        "0.7159",
        "33.3%",
        "60.0%",
        "bge-base-en-v1.5",
    ] {
        assert!(page.contains(number), "{number}");
    }
}

#[test]
fn headless_chromium_renders_tables_and_charts() {
    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED headless_chromium_renders_tables_and_charts: no chromium on PATH (apt-get install chromium)"
        );
        return;
    };
    let dir = dataset();
    run_report(dir.path(), &[]);
    let url = format!("file://{}", dir.path().join("report.html").display());
    let profile = tempfile::tempdir().unwrap();
    let dom = browse(&browser, &["--dump-dom", &url], profile.path());
    // The DOM the browser built (tbody inserted by the parser, svg children as elements).
    for id in ["statistics", "repositories", "filtering", "pooling"] {
        assert!(
            dom.contains(&format!("<table id=\"{id}\">")),
            "table {id}: {dom}"
        );
    }
    assert!(dom.contains("<tbody>"), "{dom}");
    assert_eq!(dom.matches("<svg ").count(), 3, "{dom}");
    assert!(dom.matches("<rect ").count() >= 30, "{dom}");
    assert!(dom.contains("<b>0.8155</b>"));
    assert!(dom.contains("FreshStack report: Laravel &amp; &lt;friends&gt;"));
    // And it paints: a screenshot of the page is a PNG.
    let shot = dir.path().join("shot.png");
    browse(
        &browser,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1200,2000",
            &url,
        ],
        profile.path(),
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
}
