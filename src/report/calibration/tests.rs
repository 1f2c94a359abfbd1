//! The formulas on hand-worked reviews, kappa on textbook tables, sampling and reading.

use std::path::Path;

use super::*;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/report")
}

fn close(got: Option<f64>, want: f64) {
    let got = got.expect("defined");
    assert!((got - want).abs() < 1e-9, "{got} != {want}");
}

/// A question: (A, B) per nugget and C.
fn question(id: &str, flags: &[(bool, bool)], missing: u64) -> QuestionAnnotation {
    QuestionAnnotation {
        query_id: id.into(),
        missing_nuggets: missing,
        nuggets: flags
            .iter()
            .enumerate()
            .map(|(i, &(a, b))| NuggetAnnotation {
                nugget_id: format!("{id}_{i}"),
                hallucinated: a,
                minor_or_redundant: b,
            })
            .collect(),
    }
}

fn pair(q: &str, label: PairLabel) -> PairAnnotation {
    PairAnnotation {
        query_id: q.into(),
        nugget_id: format!("{q}_0"),
        doc_id: format!("doc-{q}"),
        label,
    }
}

fn alice() -> Annotations {
    Annotations {
        annotator: "alice".into(),
        questions: vec![
            // 4 nuggets, A on one, B on two, C = 1.
            question(
                "q1",
                &[(true, false), (false, true), (false, true), (false, false)],
                1,
            ),
            // 2 clean nuggets, nothing missing.
            question("q2", &[(false, false), (false, false)], 0),
            // 1 nugget, minor, nothing missing: recall 0/0.
            question("q3", &[(false, true)], 0),
        ],
        pairs: vec![
            pair("q1", PairLabel::Relevant),
            pair("q2", PairLabel::Relevant),
            pair("q3", PairLabel::NonRelevant),
        ],
    }
}

#[test]
fn paper_formulas_per_question() {
    let q = question_score(&alice().questions[0]);
    // precision (4 - 2) / 4, recall (4 - 2) / (4 - 2 + 1), groundedness (4 - 1) / 4.
    close(q.precision, 0.5);
    close(q.recall, 2.0 / 3.0);
    close(q.groundedness, 0.75);
    assert_eq!(
        (
            q.nuggets,
            q.hallucinated,
            q.minor_or_redundant,
            q.missing_nuggets
        ),
        (4, 1, 2, 1)
    );
}

#[test]
fn division_by_zero_is_undefined_and_left_out() {
    // All nuggets minor, none missing: recall 0 / 0.
    let q = question_score(&question("x", &[(false, true)], 0));
    close(q.precision, 0.0);
    assert_eq!(q.recall, None);
    close(q.groundedness, 1.0);
    // No nuggets: precision and groundedness 0 / 0; recall 0 / C.
    let q = question_score(&question("y", &[], 2));
    assert_eq!((q.precision, q.groundedness), (None, None));
    close(q.recall, 0.0);
    let q = question_score(&question("z", &[], 0));
    assert_eq!((q.precision, q.recall, q.groundedness), (None, None, None));
}

#[test]
fn table5_macro_micro_and_shares_by_hand() {
    let scores = score(&[("alice.json".into(), alice())]);
    assert!(scores.combined.is_none() && scores.agreement.is_none());
    let t = &scores.annotators[0].table;
    let q = &t.nugget_quality;
    assert_eq!((q.questions, q.nuggets), (3, 7));
    // Macro: precision (0.5 + 1 + 0) / 3; recall (2/3 + 1) / 2 (q3 undefined); groundedness
    // (0.75 + 1 + 1) / 3.
    close(q.precision.macro_avg, 0.5);
    close(q.recall.macro_avg, 5.0 / 6.0);
    assert_eq!(q.recall.undefined, 1);
    assert_eq!(q.precision.undefined, 0);
    close(q.groundedness.macro_avg, 2.75 / 3.0);
    // Micro: kept 2 + 2 + 0 = 4 of 7; recall 4 / (4 + 1); grounded 3 + 2 + 1 = 6 of 7.
    close(q.precision.micro, 4.0 / 7.0);
    close(q.recall.micro, 0.8);
    close(q.groundedness.micro, 6.0 / 7.0);
    let j = &t.judgment_quality;
    assert_eq!(j.pairs, 3);
    close(j.share(PairLabel::Relevant), 2.0 / 3.0);
    close(j.share(PairLabel::PartiallyRelevant), 0.0);
    close(j.share(PairLabel::NonRelevant), 1.0 / 3.0);
    let md = scores.to_markdown();
    assert!(
        md.contains("| alice | 3 | 7 | 50.0% | 83.3% | 91.7% | 57.1% | 80.0% | 85.7% |"),
        "{md}"
    );
    assert!(md.contains("| alice | 3 | 66.7% | 0.0% | 33.3% |"), "{md}");
    assert!(md.contains("alice: recall 1"), "{md}");
    let json = serde_json::to_value(&scores).unwrap();
    assert_eq!(
        json["annotators"][0]["nugget_quality"]["recall"]["macro"],
        0.8333
    );
    assert_eq!(
        json["annotators"][0]["per_question"][2]["recall"],
        serde_json::Value::Null
    );
    assert_eq!(
        json["annotators"][0]["judgment_quality"]["shares"]["relevant"],
        0.6667
    );
}

#[test]
fn cohen_kappa_textbook() {
    // 50 items: both yes 20, A yes B no 5, A no B yes 10, both no 15. p_o = 35/50 = 0.7;
    // A says yes 25/50, B 30/50: p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5; kappa = 0.2 / 0.5 = 0.4.
    let mut a = Vec::new();
    let mut b = Vec::new();
    for (x, y, n) in [
        (true, true, 20),
        (true, false, 5),
        (false, true, 10),
        (false, false, 15),
    ] {
        a.extend(std::iter::repeat_n(x, n));
        b.extend(std::iter::repeat_n(y, n));
    }
    let k = cohen_kappa(&a, &b);
    assert_eq!(k.items, 50);
    close(k.observed, 0.7);
    close(k.expected, 0.5);
    close(k.kappa, 0.4);
    // One category only: chance agreement 1, kappa undefined.
    let k = cohen_kappa(&[true, true], &[true, true]);
    close(k.observed, 1.0);
    assert_eq!(k.kappa, None);
    assert_eq!(cohen_kappa::<bool>(&[], &[]).kappa, None);
}

#[test]
fn fleiss_kappa_textbook() {
    // Fleiss (1971) as Wikipedia shows it: 10 items, 14 raters, 5 categories.
    let counts: Vec<Vec<usize>> = [
        [0, 0, 0, 0, 14],
        [0, 2, 6, 4, 2],
        [0, 0, 3, 5, 6],
        [0, 3, 9, 2, 0],
        [2, 2, 8, 1, 1],
        [7, 7, 0, 0, 0],
        [3, 2, 6, 3, 0],
        [2, 5, 3, 2, 2],
        [6, 5, 2, 1, 0],
        [0, 2, 2, 3, 7],
    ]
    .iter()
    .map(|r| r.to_vec())
    .collect();
    let k = fleiss_kappa(&counts);
    // Σ_j n_ij² per row: 196, 60, 70, 94, 74, 98, 58, 46, 66, 66 = 828, so P-bar =
    // (828 - 10 * 14) / (10 * 14 * 13) = 688/1820. Column sums 20, 28, 39, 21, 32 of 140:
    // P-bar_e = (400 + 784 + 1521 + 441 + 1024) / 19600 = 4170/19600.
    let observed = 688.0 / 1820.0;
    let expected = 4170.0 / 19600.0;
    close(k.observed, observed);
    close(k.expected, expected);
    // (0.378022 - 0.212755) / 0.787245 = 0.2099 (Wikipedia: 0.210).
    close(k.kappa, (observed - expected) / (1.0 - expected));
    assert!((k.kappa.unwrap() - 0.2099).abs() < 1e-4);
    // The same from labels: item i labelled by 14 raters.
    let labels: Vec<Vec<usize>> = counts
        .iter()
        .map(|row| {
            row.iter()
                .enumerate()
                .flat_map(|(j, &n)| std::iter::repeat_n(j, n))
                .collect()
        })
        .collect();
    assert_eq!(fleiss_kappa_of_labels(&labels), k);
}

#[test]
fn agreement_of_two_and_three_annotators_over_common_items() {
    let mut bob = alice();
    bob.annotator = "bob".into();
    // Bob disagrees on q1's A flag of the first nugget and labels q3's pair relevant; he has no
    // pair for q2 (left out of the pair items).
    bob.questions[0].nuggets[0].hallucinated = false;
    bob.pairs = vec![
        pair("q1", PairLabel::Relevant),
        pair("q3", PairLabel::Relevant),
    ];
    let files = vec![
        ("a.json".to_string(), alice()),
        ("b.json".to_string(), bob.clone()),
    ];
    let scores = score(&files);
    let a = scores.agreement.as_ref().unwrap();
    assert_eq!((a.annotators, a.method), (2, "cohen"));
    // Pairs: q1 (rel, rel), q3 (non, rel). p_o = 1/2; alice rel 1/2 non 1/2, bob rel 1:
    // p_e = 1/2 * 1 = 1/2; kappa 0.
    assert_eq!(a.pair_labels.items, 2);
    close(a.pair_labels.observed, 0.5);
    close(a.pair_labels.kappa, 0.0);
    // A flags over 7 nuggets: alice has one true, bob none. p_o = 6/7; p_e = (1/7)(0) +
    // (6/7)(1) = 6/7: kappa 0.
    assert_eq!(a.hallucinated.items, 7);
    close(a.hallucinated.observed, 6.0 / 7.0);
    close(a.hallucinated.kappa, 0.0);
    // B flags identical (3 of 7 true): kappa 1.
    close(a.minor_or_redundant.kappa, 1.0);
    let combined = scores.combined.as_ref().unwrap();
    assert_eq!(combined.nugget_quality.questions, 6);
    assert_eq!(combined.judgment_quality.pairs, 5);
    // Per question: q1's first nugget's A differs (3 of 4 agreed); q2's pair only alice
    // labelled; q3's pair labelled apart.
    let q1 = &a.per_question[0];
    assert_eq!((q1.query_id.as_str(), q1.nuggets), ("q1", 4));
    close(q1.hallucinated_agreed, 0.75);
    close(q1.minor_or_redundant_agreed, 1.0);
    assert_eq!(q1.missing_nuggets, [1, 1]);
    assert_eq!(q1.pair_label_agreed, Some(true));
    assert_eq!(a.per_question[1].pair_label_agreed, None);
    assert_eq!(a.per_question[2].pair_label_agreed, Some(false));
    let md = scores.to_markdown();
    assert!(
        md.contains("| q1 | 4 | 75.0% | 100.0% | 1 / 1 | yes |"),
        "{md}"
    );
    assert!(md.contains("Cohen's kappa"), "{md}");
    assert!(md.contains("| all annotators | 6 | 14 |"), "{md}");

    let mut carol = bob.clone();
    carol.annotator = "carol".into();
    let three = vec![
        ("a.json".to_string(), alice()),
        ("b.json".to_string(), bob),
        ("c.json".to_string(), carol),
    ];
    let a = score(&three).agreement.unwrap();
    assert_eq!((a.annotators, a.method), (3, "fleiss"));
    // Pairs: q1 (rel x3): P = 1; q3 (non, rel, rel): P = (1 + 4 - 3) / 6 = 1/3. P-bar = 2/3;
    // p_rel = 5/6, p_non = 1/6: P-bar_e = 26/36; kappa = (2/3 - 26/36) / (10/36) = -0.2.
    close(a.pair_labels.observed, 2.0 / 3.0);
    close(a.pair_labels.kappa, -0.2);
}

#[test]
fn sampling_is_seeded_and_picks_positive_pairs() {
    let options = SampleOptions {
        questions: 1,
        seed: 7,
    };
    let first = sample(&fixture(), &options).unwrap();
    assert_eq!(first, sample(&fixture(), &options).unwrap());
    // q3 has no nuggets: two eligible questions.
    assert_eq!(first.questions_eligible, 2);
    assert_eq!(first.questions.len(), 1);
    assert_eq!(first.pairs.len(), 1);
    let seen: BTreeSet<String> = (0..16)
        .map(|seed| {
            let s = sample(&fixture(), &SampleOptions { questions: 1, seed }).unwrap();
            s.questions[0].query_id.to_string()
        })
        .collect();
    assert_eq!(seen.len(), 2, "seeds reach both questions: {seen:?}");
    // Every pair is a nugget with a document judged to support it, with the corpus row's text.
    let all = sample(&fixture(), &SampleOptions::default()).unwrap();
    assert_eq!(all.questions.len(), 2);
    assert_eq!(all.questions[0].query_id, "q1");
    for p in &all.pairs {
        let q = all
            .questions
            .iter()
            .find(|q| q.query_id == p.query_id)
            .unwrap();
        assert!(q.nuggets.iter().any(|n| n.nugget_id == p.nugget_id));
        assert!(!p.text.is_empty());
        assert!(p.url.as_deref().unwrap().starts_with("https://github.com/"));
    }
    let q12 = all.pairs.iter().find(|p| p.query_id == "q12").unwrap();
    assert_eq!(q12.doc_id, "laravel/docs/routing.md_0_300");
    assert_eq!(q12.text, "Routes live in routes/web.php");
    let err = sample(
        &fixture(),
        &SampleOptions {
            questions: 0,
            seed: 0,
        },
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "invalid questions: must be at least 1");
}

#[test]
fn missing_document_names_the_corpus_and_the_nugget() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixture().join("queries.jsonl"),
        dir.path().join("queries.jsonl"),
    )
    .unwrap();
    std::fs::write(dir.path().join("corpus.jsonl"), "").unwrap();
    let err = sample(dir.path(), &SampleOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("corpus.jsonl: document"), "{err}");
    assert!(err.contains("is not in the corpus"), "{err}");
}

fn parse_err(text: &str) -> String {
    Annotations::parse(text, Path::new("ann.json"))
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_annotations_name_file_and_field() {
    let ok = r#"{"annotator": "a", "questions": [{"query_id": "q1", "missing_nuggets": 0,
        "nuggets": [{"nugget_id": "q1_0", "hallucinated": false, "minor_or_redundant": true}]}],
        "pairs": [{"query_id": "q1", "nugget_id": "q1_0", "doc_id": "d", "label": "relevant"}]}"#;
    let a = Annotations::parse(ok, Path::new("ann.json")).unwrap();
    assert_eq!(a.pairs[0].label, PairLabel::Relevant);
    for (from, to, message) in [
        (
            "\"relevant\"",
            "\"relevent\"",
            "ann.json: field pairs[0].label: unknown label \"relevent\"",
        ),
        (
            "\"missing_nuggets\": 0",
            "\"missing_nuggets\": -1",
            "ann.json: field questions[0].missing_nuggets: expected a non-negative integer, got -1",
        ),
        (
            "\"missing_nuggets\": 0",
            "\"missing_nuggets\": 18446744073709551000",
            "ann.json: field questions[0].missing_nuggets: 18446744073709551000 is not a count of \
             one answer's nuggets (at most 10000)",
        ),
        (
            "\"missing_nuggets\": 0,",
            "",
            "ann.json: field questions[0].missing_nuggets: missing",
        ),
        (
            "\"hallucinated\": false",
            "\"hallucinated\": \"no\"",
            "ann.json: field questions[0].nuggets[0].hallucinated: expected true or false, got a string",
        ),
        (
            "\"annotator\": \"a\"",
            "\"annotator\": \" \"",
            "ann.json: field annotator: empty",
        ),
        (
            "\"doc_id\": \"d\"",
            "\"doc_id\": null",
            "ann.json: field pairs[0].doc_id: expected a string or a number, got null",
        ),
        (
            "\"pairs\": [",
            "\"pairs\": 3, \"x\": [",
            "ann.json: field pairs: expected an array, got a number",
        ),
    ] {
        assert!(ok.contains(from), "{from}");
        let err = parse_err(&ok.replacen(from, to, 1));
        assert!(err.starts_with(message), "{err}");
        assert_eq!(err.lines().count(), 1);
    }
    assert!(parse_err("{\"annotator\": ").starts_with("ann.json:1: "));
    assert!(parse_err("[]").starts_with("ann.json: field (top level): expected an object"));
}

#[test]
fn annotations_must_refer_to_the_sample() {
    let sample = sample(&fixture(), &SampleOptions::default()).unwrap();
    let pair = &sample.pairs[0];
    let good = Annotations {
        annotator: "a".into(),
        questions: vec![question("q12", &[(false, false)], 0)],
        pairs: vec![PairAnnotation {
            query_id: pair.query_id.to_string(),
            nugget_id: pair.nugget_id.clone(),
            doc_id: pair.doc_id.clone(),
            label: PairLabel::PartiallyRelevant,
        }],
    };
    let path = Path::new("a.json");
    good.check_against(&sample, path).unwrap();
    let mut bad = good.clone();
    bad.questions[0].query_id = "q3".into();
    let err = bad.check_against(&sample, path).unwrap_err().to_string();
    assert_eq!(
        err,
        "a.json: field questions[0].query_id: \"q3\" is not a sampled question"
    );
    let mut bad = good.clone();
    bad.questions = vec![question("q1", &[(false, false)], 0)];
    let err = bad.check_against(&sample, path).unwrap_err().to_string();
    assert!(
        err.contains("nugget \"q1_1\" of question \"q1\" is missing"),
        "{err}"
    );
    let mut bad = good;
    bad.pairs[0].doc_id = "other".into();
    let err = bad.check_against(&sample, path).unwrap_err().to_string();
    assert!(err.starts_with("a.json: field pairs[0]: "), "{err}");
}

#[test]
fn posts_render_code_as_code_and_escape_everything() {
    let text = "Try `a<b` and ``x`y``:\n\n```php\n<?php echo \"&\"; ?>\n```\n\n<p>raw</p>";
    let html = render_post(text);
    assert_eq!(
        html,
        "<p>Try <code>a&lt;b</code> and <code>x`y</code>:</p>\n\
         <pre><code class=\"language-php\">&lt;?php echo &quot;&amp;&quot;; ?&gt;\n</code></pre>\n\
         <p>&lt;p&gt;raw&lt;/p&gt;</p>\n"
    );
    // An unclosed fence keeps its code; a lone backtick stays text.
    assert_eq!(
        render_post("a ` b\n````\ncode\n```\n"),
        "<p>a ` b</p>\n<pre><code>code\n```\n</code></pre>\n"
    );
}

#[test]
fn review_page_escapes_the_dataset_and_holds_no_external_resource() {
    let mut sample = sample(&fixture(), &SampleOptions::default()).unwrap();
    sample.questions[0].query_title = "<script>alert(1)</script>".into();
    sample.questions[0].nuggets[0].text = "\"quoted\" & <b>".into();
    let page = render_review(&sample);
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    assert!(page.contains("&quot;quoted&quot; &amp; &lt;b&gt;"));
    assert_eq!(page.matches("<script>").count(), 1);
    for external in ["src=", "<link", "http://", "@import"] {
        assert!(!page.contains(external), "{external}");
    }
    // Links to the documents are plain anchors.
    assert!(page.contains("<a href=\"https://github.com/"));
    assert!(page.contains(&format!("data-sample=\"{}\"", sample.key())));

    // URLs from the dataset that are not web URLs are shown, never linked; NUL never reaches
    // the page.
    sample.questions[0].url = Some("javascript:alert(document.cookie)".into());
    sample.pairs[0].url = Some("data:text/html,<b>x</b>".into());
    sample.questions[0].query_title = "nul\0here".into();
    let page = render_review(&sample);
    assert!(!page.contains("href=\"javascript:"), "a javascript: link");
    assert!(!page.contains("href=\"data:"), "a data: link");
    assert!(page.contains("javascript:alert(document.cookie)"));
    assert!(!page.contains('\0'));
}

/// Issue 34, item 8: a failing `calibrate sample` had replaced `sample.json` but not
/// `review.html`, leaving a pair that does not match.
#[test]
fn a_failing_review_write_replaces_neither_file() {
    let sample = sample(&fixture(), &SampleOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sample.json"), "old sample\n").unwrap();
    // A directory where the page goes: the page cannot be written.
    std::fs::create_dir(dir.path().join("review.html")).unwrap();
    assert!(write_review(dir.path(), &sample).is_err());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("sample.json")).unwrap(),
        "old sample\n"
    );
    std::fs::remove_dir(dir.path().join("review.html")).unwrap();
    let files = write_review(dir.path(), &sample).unwrap();
    assert!(files.page.is_file());
    assert_ne!(
        std::fs::read_to_string(&files.sample).unwrap(),
        "old sample\n"
    );
}
