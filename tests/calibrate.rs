//! `freshstack calibrate sample|score` end to end on the report fixture: the same bytes for the
//! same inputs, Table 5 from hand-written annotations, one-line errors, the report's
//! "Calibration" section, and the review page driven in a real headless chromium (its own
//! script ticks, labels, saves, restores and exports; the export is scored).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::{browse, browse_to_exit, chromium};
use crate::util::{copy_dir, freshstack, write};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

fn run_ok(args: &[&str]) -> String {
    let out = freshstack(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `freshstack calibrate sample` of the fixture into `out`.
fn sample_into(out: &Path, seed: &str) -> Value {
    let stdout = run_ok(&[
        "calibrate",
        "sample",
        "--dataset",
        fixture().to_str().unwrap(),
        "--seed",
        seed,
        "--out",
        out.to_str().unwrap(),
    ]);
    // q3 has no nuggets; q1 and q12 each have a supported nugget.
    assert_eq!(
        stdout,
        format!("sampled 2 of 2 questions with nuggets (seed {seed}) and 2 pairs\n")
    );
    serde_json::from_slice(&std::fs::read(out.join("sample.json")).unwrap()).unwrap()
}

/// Annotations of the fixture's sample: q1 (2 nuggets) with A on the first, B on the second,
/// C = 1; q12 (1 nugget) clean, C = 0; the two pairs labelled `labels`.
fn annotations(sample: &Value, annotator: &str, labels: [&str; 2]) -> Value {
    let pairs: Vec<Value> = sample["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(labels)
        .map(|(p, label)| {
            json!({"query_id": p["query_id"], "nugget_id": p["nugget_id"],
                   "doc_id": p["doc_id"], "label": label})
        })
        .collect();
    json!({
        "annotator": annotator,
        "questions": [
            {"query_id": "q1", "missing_nuggets": 1, "nuggets": [
                {"nugget_id": "q1_0", "hallucinated": true, "minor_or_redundant": false},
                {"nugget_id": "q1_1", "hallucinated": false, "minor_or_redundant": true}]},
            {"query_id": "q12", "missing_nuggets": 0, "nuggets": [
                {"nugget_id": "q12_0", "hallucinated": false, "minor_or_redundant": false}]}
        ],
        "pairs": pairs,
    })
}

/// The Table 5 numbers of [`annotations`]: per question P, R, G = (1/2, 1/2, 1/2) and
/// (1, 1, 1): macro 0.75 each; pooled 2 kept of 3 nuggets, 2 / (2 + 1), 2 grounded of 3.
fn assert_table5(entry: &Value) {
    let q = &entry["nugget_quality"];
    assert_eq!(
        (q["questions"].as_u64(), q["nuggets"].as_u64()),
        (Some(2), Some(3))
    );
    for metric in ["precision", "recall", "groundedness"] {
        assert_eq!(q[metric]["macro"], 0.75, "{metric}: {q}");
        assert_eq!(q[metric]["micro"], 0.6667, "{metric}: {q}");
        assert_eq!(q[metric]["undefined"], 0, "{metric}: {q}");
    }
}

#[test]
fn sample_is_byte_identical_and_score_prints_table5() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let sample = sample_into(&a, "5");
    sample_into(&b, "5");
    for file in ["review.html", "sample.json"] {
        assert_eq!(
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
            "{file}"
        );
    }
    let alice = write(
        dir.path(),
        "alice.json",
        annotations(&sample, "alice", ["relevant", "partially_relevant"]).to_string(),
    );
    let sample_file = a.join("sample.json");
    let md = run_ok(&[
        "calibrate",
        "score",
        alice.to_str().unwrap(),
        "--sample",
        sample_file.to_str().unwrap(),
    ]);
    assert!(
        md.contains("| alice | 2 | 3 | 75.0% | 75.0% | 75.0% | 66.7% | 66.7% | 66.7% |"),
        "{md}"
    );
    assert!(md.contains("| alice | 2 | 50.0% | 50.0% | 0.0% |"), "{md}");
    assert!(!md.contains("Agreement"), "{md}");

    // A second annotator: pooled table and Cohen's kappa.
    let bob = write(
        dir.path(),
        "bob.json",
        annotations(&sample, "bob", ["relevant", "non_relevant"]).to_string(),
    );
    let out = run_ok(&[
        "calibrate",
        "score",
        alice.to_str().unwrap(),
        bob.to_str().unwrap(),
        "--json",
    ]);
    let scores: Value = serde_json::from_str(&out).unwrap();
    assert_table5(&scores["annotators"][0]);
    assert_table5(&scores["annotators"][1]);
    assert_eq!(scores["annotators"][1]["file"], "bob.json");
    assert_eq!(
        scores["combined"]["judgment_quality"]["counts"],
        json!({"relevant": 2, "partially_relevant": 1, "non_relevant": 1})
    );
    let agreement = &scores["agreement"];
    assert_eq!(agreement["method"], "cohen");
    // Pairs: (relevant, relevant), (partially, non): p_o = 1/2; alice rel 1/2 part 1/2, bob
    // rel 1/2 non 1/2: p_e = 1/4; kappa = (1/2 - 1/4) / (3/4) = 1/3.
    assert_eq!(agreement["pair_labels"]["items"], 2);
    assert_eq!(agreement["pair_labels"]["kappa"], 0.3333);
    // Identical flags on 3 nuggets: kappa 1 for A and B.
    assert_eq!(agreement["hallucinated"]["kappa"], 1.0);
    assert_eq!(agreement["minor_or_redundant"]["items"], 3);
    assert_eq!(
        agreement["per_question"][0],
        json!({"query_id": "q1", "nuggets": 2, "hallucinated_agreed": 1.0,
               "minor_or_redundant_agreed": 1.0, "missing_nuggets": [1, 1],
               "pair_label_agreed": true})
    );
}

#[test]
fn bad_annotations_are_one_line_naming_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let sample = sample_into(&dir.path().join("review"), "0");
    let mut bad = annotations(&sample, "alice", ["relevant", "relevant"]);
    bad["pairs"][1]["label"] = json!("relevent");
    let file = write(dir.path(), "bad.json", bad.to_string());
    let out = freshstack(&["calibrate", "score", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.json: field pairs[1].label: unknown label \"relevent\""),
        "{err}"
    );

    let mut bad = annotations(&sample, "alice", ["relevant", "relevant"]);
    bad["questions"][0]["query_id"] = json!("q3");
    let file = write(dir.path(), "other.json", bad.to_string());
    let sample_file = dir.path().join("review/sample.json");
    let out = freshstack(&[
        "calibrate",
        "score",
        file.to_str().unwrap(),
        "--sample",
        sample_file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("other.json: field questions[0].query_id: \"q3\" is not a sampled question"),
        "{err}"
    );

    // The same annotator twice.
    let good = annotations(&sample, "alice", ["relevant", "relevant"]).to_string();
    let one = write(dir.path(), "one.json", &good);
    let two = write(dir.path(), "two.json", &good);
    let out = freshstack(&[
        "calibrate",
        "score",
        one.to_str().unwrap(),
        two.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("two.json: field annotator: \"alice\" also annotated"),
        "{err}"
    );
}

#[test]
fn report_shows_calibration_only_when_annotations_are_there() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture(), dir.path());
    let dataset = dir.path().to_str().unwrap();
    run_ok(&["report", dataset]);
    let plain = std::fs::read(dir.path().join("report.html")).unwrap();
    assert!(!String::from_utf8_lossy(&plain).contains("Calibration"));

    let calibration = dir.path().join("calibration");
    let sample = sample_into(&calibration, "0");
    // A review page and its sample alone are not annotations: the page is unchanged.
    run_ok(&["report", dataset]);
    assert_eq!(
        std::fs::read(dir.path().join("report.html")).unwrap(),
        plain
    );

    write(
        &calibration,
        "alice.json",
        annotations(&sample, "alice & co", ["relevant", "non_relevant"]).to_string(),
    );
    run_ok(&["report", dataset]);
    let page = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
    assert!(
        page.contains("<h2 id=\"calibration-title\">Calibration</h2>"),
        "{page}"
    );
    assert!(
        page.contains(
            "<tr><td>alice &amp; co</td><td class=\"num\">2</td><td class=\"num\">3</td>\
             <td class=\"num\">75.0%</td>"
        ),
        "{page}"
    );
    assert!(page.contains("<table id=\"calibration-judgments\">"));

    // A bad annotation file fails the report with one line naming it.
    write(&calibration, "zed.json", "{\"annotator\": \"z\"}");
    let out = freshstack(&["report", dataset]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("zed.json: field questions: missing"), "{err}");

    std::fs::remove_dir_all(&calibration).unwrap();
    run_ok(&["report", dataset]);
    assert_eq!(
        std::fs::read(dir.path().join("report.html")).unwrap(),
        plain
    );
}

/// The review page with `script` run after the page's own (as a last `<script>` of the body).
fn with_script(page: &Path, script: &str, to: &Path) {
    let html = std::fs::read_to_string(page).unwrap();
    assert_eq!(html.matches("</body>").count(), 1);
    let html = html.replace(
        "</body>",
        &format!("<script>\n{script}\n</script>\n</body>"),
    );
    std::fs::write(to, html).unwrap();
}

/// The text of `<textarea id="export-json">` in a DOM chromium dumped (its serialiser escapes
/// `&`, `<`, `>` and non-breaking spaces in text).
fn exported_json(dom: &str) -> String {
    let start = dom
        .find("<textarea id=\"export-json\"")
        .unwrap_or_else(|| panic!("no export textarea: {dom}"));
    let open = start + dom[start..].find('>').unwrap() + 1;
    let close = open + dom[open..].find("</textarea>").unwrap();
    dom[open..close]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", "\u{a0}")
        .replace("&amp;", "&")
}

/// What a user does on the page, through the page's own inputs: name, two checkboxes, the two
/// C counts, one label per pair, then Export.
const ANNOTATE: &str = r#"(function () {
  function $(s) { return document.querySelector(s); }
  function type(input, text) {
    input.value = text;
    input.dispatchEvent(new Event('input', { bubbles: true }));
  }
  type($('#annotator'), 'chromium');
  $('#a0-0').click();
  $('#b0-1').click();
  type($('#c0'), '1');
  type($('#c1'), '0');
  $('#p0-relevant').click();
  $('#p1-partially_relevant').click();
  $('#export').click();
}());"#;

#[test]
fn headless_chromium_review_exports_what_score_reads() {
    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED headless_chromium_review_exports_what_score_reads: no chromium on PATH \
             (apt-get install chromium)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let review = dir.path().join("review");
    let sample = sample_into(&review, "0");
    let profile = tempfile::tempdir().unwrap();
    let downloads = profile.path().join("home/Downloads");

    // First visit: annotate and export. The second visit reads what this one saved, so it
    // must end with the browser's own exit.
    let page = review.join("annotate.html");
    with_script(&review.join("review.html"), ANNOTATE, &page);
    let dom = browse_to_exit(
        &browser,
        &["--dump-dom", &format!("file://{}", page.display())],
        profile.path(),
    );
    assert!(
        dom.contains("<span id=\"progress\">2 of 2 questions, 2 of 2 pairs done</span>"),
        "{dom}"
    );
    let exported = exported_json(&dom);
    let value: Value = serde_json::from_str(&exported).unwrap();
    assert_eq!(value["annotator"], "chromium");
    assert_eq!(
        value,
        annotations(&sample, "chromium", ["relevant", "partially_relevant"])
    );
    // The Export button's download is the same text.
    assert_eq!(
        std::fs::read_to_string(downloads.join("annotations.json")).unwrap(),
        exported
    );
    let file = write(dir.path(), "chromium.json", &exported);
    let sample_file = review.join("sample.json");
    let out = run_ok(&[
        "calibrate",
        "score",
        file.to_str().unwrap(),
        "--sample",
        sample_file.to_str().unwrap(),
        "--json",
    ]);
    let scores: Value = serde_json::from_str(&out).unwrap();
    assert_table5(&scores["annotators"][0]);
    assert_eq!(
        scores["annotators"][0]["judgment_quality"]["shares"],
        json!({"relevant": 0.5, "partially_relevant": 0.5, "non_relevant": 0.0})
    );

    // Second visit, same browser profile: the answers come back from localStorage, and Export
    // alone gives the same annotations.
    let again = review.join("export-only.html");
    with_script(
        &review.join("review.html"),
        "document.getElementById('export').click();",
        &again,
    );
    let dom = browse(
        &browser,
        &["--dump-dom", &format!("file://{}", again.display())],
        profile.path(),
    );
    assert_eq!(exported_json(&dom), exported);

    // Without a name nothing is exported.
    let fresh = tempfile::tempdir().unwrap();
    let dom = browse(
        &browser,
        &["--dump-dom", &format!("file://{}", again.display())],
        fresh.path(),
    );
    assert!(dom.contains("Enter your name before exporting."), "{dom}");
    assert_eq!(exported_json(&dom), "");
}
