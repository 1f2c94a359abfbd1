//! The questions stage end to end, on dumps the tests write.

use std::io::Write;
use std::path::{Path, PathBuf};

use freshstack::Error;
use freshstack::NoProgress;
use freshstack::Question;
use freshstack::dataset::read_jsonl;
use freshstack::source::stackoverflow::{
    DEFAULT_MAX_EVENT_BYTES, DayRange, DropReason, ImportConfig, TagFilter, TagMatch,
    import_questions, recent_topics, tag_cooccurrence,
};

use crate::util::freshstack;

/// Escapes an attribute value as the dumps do (newlines as `&#xA;`).
fn escape(value: &str) -> String {
    value
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\n', "&#xA;")
        .replace('\t', "&#x9;")
}

fn row(attrs: &[(&str, &str)]) -> String {
    let mut s = String::from("  <row");
    for (k, v) in attrs {
        s.push_str(&format!(" {k}=\"{}\"", escape(v)));
    }
    s.push_str(" />\n");
    s
}

/// The code of question 300, which must survive byte-for-byte.
const CODE: &str = "$user = User::where('email', \"a&b<c>@x.io\")->first();\n\tif ($a < $b && $c > $d) { echo '&amp;'; }\n";

fn tags(old_format: bool, tags: &[&str]) -> String {
    if old_format {
        tags.iter().map(|t| format!("<{t}>")).collect()
    } else {
        format!("|{}|", tags.join("|"))
    }
}

struct Q<'a> {
    id: &'a str,
    date: &'a str,
    score: &'a str,
    tags: &'a [&'a str],
    accepted: Option<&'a str>,
    body: &'a str,
}

fn question(q: &Q<'_>, old_format: bool) -> String {
    let title = format!("Question {} &amp; more", q.id);
    let tag_text = tags(old_format, q.tags);
    let mut attrs = vec![
        ("Id", q.id),
        ("PostTypeId", "1"),
        ("CreationDate", q.date),
        ("Score", q.score),
        ("Body", q.body),
        ("Title", title.as_str()),
        ("Tags", tag_text.as_str()),
        ("ContentLicense", "CC BY-SA 4.0"),
    ];
    if let Some(a) = q.accepted {
        attrs.insert(2, ("AcceptedAnswerId", a));
    }
    row(&attrs)
}

fn answer(id: &str, parent: &str, score: &str, body: &str) -> String {
    row(&[
        ("Id", id),
        ("PostTypeId", "2"),
        ("ParentId", parent),
        ("CreationDate", "2024-02-02T00:00:00.000"),
        ("Score", score),
        ("Body", body),
        ("ContentLicense", "CC BY-SA 4.0"),
    ])
}

/// A dump with everything the stage must cope with. `shuffled`: new-dump style (comment first,
/// ids out of order, answers before their questions).
fn dump(old_format: bool, shuffled: bool) -> String {
    let code_html = escape_html(CODE);
    let body_300 = format!(
        "<p>How do I <code>where</code> with <a href=\"https://laravel.com/docs\">Eloquent</a>?</p>\n<pre class=\"lang-php prettyprint-override\"><code>{code_html}</code></pre>\n<ul>\n<li>one &amp; two</li>\n<li>three</li>\n</ul>"
    );
    let questions = [
        question(
            &Q {
                id: "300",
                date: "2024-02-01T10:11:12.880",
                score: "5",
                tags: &["php", "laravel"],
                accepted: Some("302"),
                body: &body_300,
            },
            old_format,
        ),
        question(
            &Q {
                id: "100",
                date: "2023-05-05T00:00:00.000",
                score: "2",
                tags: &["laravel"],
                accepted: None,
                body: "<p>No accepted answer here</p>",
            },
            old_format,
        ),
        question(
            &Q {
                id: "200",
                date: "2024-01-01T00:00:00.000",
                score: "9",
                tags: &["python"],
                accepted: Some("201"),
                body: "<p>off topic</p>",
            },
            old_format,
        ),
        question(
            &Q {
                id: "50",
                date: "2022-01-01T00:00:00.000",
                score: "1",
                tags: &["laravel", "eloquent"],
                accepted: Some("51"),
                body: "<p>too old</p>",
            },
            old_format,
        ),
        question(
            &Q {
                id: "400",
                date: "2024-03-01T00:00:00.000",
                score: "1",
                tags: &["laravel", "eloquent"],
                accepted: Some("999"),
                body: "<p>accepted answer deleted</p>",
            },
            old_format,
        ),
        question(
            &Q {
                id: "500",
                date: "2024-03-02T00:00:00.000",
                score: "-2",
                tags: &["laravel"],
                accepted: Some("501"),
                body: "<p>downvoted</p>",
            },
            old_format,
        ),
    ];
    let answers = [
        answer("301", "300", "10", "<p>Higher score, not accepted</p>"),
        answer(
            "302",
            "300",
            "1",
            "<p>Accepted:</p><pre><code>return $q-&gt;get();\n</code></pre>",
        ),
        answer("101", "100", "3", "<p>three</p>"),
        answer("102", "100", "7", "<p>seven</p>"),
        answer("201", "200", "1", "<p>py</p>"),
        answer("51", "50", "1", "<p>old</p>"),
        answer("501", "500", "1", "<p>meh</p>"),
    ];
    let malformed = [
        // No PostTypeId.
        row(&[("Id", "7"), ("Body", "x")]),
        // A laravel question without a title.
        row(&[
            ("Id", "8"),
            ("PostTypeId", "1"),
            ("CreationDate", "2024-01-01T00:00:00.000"),
            ("Score", "1"),
            ("Body", "<p>x</p>"),
            ("Tags", &tags(old_format, &["laravel"])),
        ]),
        // An answer without a parent.
        row(&[
            ("Id", "9"),
            ("PostTypeId", "2"),
            ("Score", "1"),
            ("Body", "x"),
        ]),
    ];
    let wiki = row(&[("Id", "600"), ("PostTypeId", "5"), ("Body", "<p>wiki</p>")]);

    let mut rows: Vec<String> = Vec::new();
    if shuffled {
        rows.extend(answers.iter().cloned());
        rows.push(wiki);
        rows.extend(questions.iter().rev().cloned());
        rows.extend(malformed.iter().cloned());
    } else {
        let mut all: Vec<String> = questions
            .iter()
            .chain(&answers)
            .chain(&malformed)
            .cloned()
            .collect();
        all.push(wiki);
        all.sort_by_key(|r| {
            let id = r.split("Id=\"").nth(1).unwrap();
            id[..id.find('"').unwrap()].parse::<u64>().unwrap()
        });
        rows = all;
    }
    let mut xml = String::from("\u{feff}<?xml version=\"1.0\" encoding=\"utf-8\"?>\n");
    if shuffled {
        xml.push_str("<!-- Stack Exchange data dump, generated by the tests -->\n");
    }
    xml.push_str("<posts>\n");
    for r in rows {
        xml.push_str(&r);
    }
    xml.push_str("</posts>\n");
    xml
}

fn escape_html(code: &str) -> String {
    code.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn config(allow_unaccepted: bool) -> ImportConfig {
    ImportConfig {
        filter: TagFilter::new(&["laravel".to_string()], TagMatch::Any).unwrap(),
        range: DayRange {
            since: Some("2023-01-01".parse().unwrap()),
            until: Some("2024-10-31".parse().unwrap()),
        },
        min_score: Some(0),
        allow_unaccepted,
        site_url: "https://stackoverflow.com".into(),
        max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

fn import(
    posts: &Path,
    allow_unaccepted: bool,
) -> (
    Vec<Question>,
    freshstack::source::stackoverflow::ImportSummary,
) {
    let out = posts.with_extension("out.jsonl");
    let summary = import_questions(posts, &config(allow_unaccepted), &out, &NoProgress).unwrap();
    (read_jsonl(&out).unwrap(), summary)
}

#[test]
fn imports_accepted_answers_from_a_shuffled_new_format_dump() {
    let dir = tempfile::tempdir().unwrap();
    let posts = write(dir.path(), "Posts.xml", dump(false, true).as_bytes());
    let (questions, summary) = import(&posts, false);
    assert_eq!(questions.len(), 1, "{questions:#?}");
    let q = &questions[0];
    assert_eq!(q.query_id, "300");
    assert_eq!(q.query_title, "Question 300 &amp; more");
    // The accepted answer, although another answer scores higher.
    assert_eq!(q.answer_id, "302");
    assert_eq!(q.metadata.answer_score, Some(1));
    assert_eq!(q.answer_text, "Accepted:\n\n```\nreturn $q->get();\n```");
    assert_eq!(q.metadata.tags, vec!["php", "laravel"]);
    assert_eq!(q.metadata.date, "2024-02-01T10:11:12.880");
    assert_eq!(q.metadata.score, Some(5));
    assert_eq!(
        q.metadata.url.as_deref(),
        Some("https://stackoverflow.com/q/300")
    );
    assert_eq!(q.metadata.license.as_deref(), Some("CC BY-SA 4.0"));
    // Code byte-for-byte, as a fenced block.
    assert!(
        q.query_text.contains(&format!("```php\n{CODE}```")),
        "{}",
        q.query_text
    );
    assert!(
        q.query_text
            .starts_with("How do I `where` with Eloquent (https://laravel.com/docs)?")
    );
    assert!(
        q.query_text.ends_with("- one & two\n\n- three"),
        "{}",
        q.query_text
    );

    assert_eq!(summary.rows_read, 17);
    assert_eq!(summary.questions_read, 7);
    assert_eq!(summary.answers_read, 8);
    assert_eq!(summary.other_rows, 1);
    assert_eq!(summary.questions_on_topic, 5);
    assert_eq!(summary.kept, 1);
    let dropped = |r| summary.dropped.get(&r).copied().unwrap_or(0);
    assert_eq!(dropped(DropReason::MalformedRow), 3);
    assert_eq!(dropped(DropReason::OutOfRange), 1);
    assert_eq!(dropped(DropReason::BelowMinScore), 1);
    assert_eq!(dropped(DropReason::NoAcceptedAnswer), 1);
    assert_eq!(dropped(DropReason::AnswerMissing), 1);
    assert_eq!(summary.passes, 2);
}

#[test]
fn old_tag_format_and_ordered_ids_give_the_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let new = write(dir.path(), "new.xml", dump(false, true).as_bytes());
    let old = write(dir.path(), "old.xml", dump(true, false).as_bytes());
    let (a, _) = import(&new, true);
    let (b, _) = import(&old, true);
    assert_eq!(a, b);
}

#[test]
fn allow_unaccepted_takes_the_top_scored_answer_only_without_an_accepted_one() {
    let dir = tempfile::tempdir().unwrap();
    let posts = write(dir.path(), "Posts.xml", dump(false, true).as_bytes());
    let (questions, summary) = import(&posts, true);
    let ids: Vec<(&str, &str)> = questions
        .iter()
        .map(|q| (q.query_id.as_str(), q.answer_id.as_str()))
        .collect();
    // Sorted by question id; 400's accepted answer is missing and is not replaced.
    assert_eq!(ids, vec![("100", "102"), ("300", "302")]);
    assert_eq!(summary.dropped.get(&DropReason::AnswerMissing), Some(&1));
    assert_eq!(summary.dropped.get(&DropReason::NoAcceptedAnswer), None);
}

#[test]
fn gzip_and_zstd_inputs_match_plain() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dump(false, true);
    let plain = write(dir.path(), "Posts.xml", xml.as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(xml.as_bytes()).unwrap();
    // Named without an extension that tells: detection is by content.
    let gz = write(dir.path(), "posts-gz", &gz.finish().unwrap());
    let zst = write(
        dir.path(),
        "Posts.xml.zst",
        &zstd::encode_all(xml.as_bytes(), 3).unwrap(),
    );
    let (expected, _) = import(&plain, true);
    assert_eq!(import(&gz, true).0, expected);
    assert_eq!(import(&zst, true).0, expected);
}

#[test]
fn seven_zip_fixture_matches_its_plain_xml() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stackoverflow");
    let dir = tempfile::tempdir().unwrap();
    let plain = write(
        dir.path(),
        "Posts.xml",
        &std::fs::read(fixtures.join("Posts.xml")).unwrap(),
    );
    let (expected, _) = import(&plain, true);
    assert!(!expected.is_empty());
    // LZMA2 (7-Zip's default), BZip2 and PPMd archives made by 7-Zip itself.
    for name in ["posts.7z", "posts-bzip2.7z", "posts-ppmd.7z"] {
        let seven = write(
            dir.path(),
            name,
            &std::fs::read(fixtures.join(name)).unwrap(),
        );
        assert_eq!(import(&seven, true).0, expected, "{name}");
    }
}

#[test]
fn truncated_dump_fails_with_offset_and_line_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let xml = dump(false, true);
    // Cut inside the last rows, before </posts>.
    let cut = &xml[..xml.len() - 40];
    let posts = write(dir.path(), "Posts.xml", cut.as_bytes());
    let out = dir.path().join("questions.jsonl");
    let err = import_questions(&posts, &config(false), &out, &NoProgress).unwrap_err();
    match &err {
        Error::Xml {
            path,
            byte_offset,
            line,
            ..
        } => {
            assert_eq!(path, &posts);
            assert!(*byte_offset > 0 && *byte_offset <= cut.len() as u64);
            let expected_line = cut[..*byte_offset as usize].matches('\n').count() as u64 + 1;
            assert_eq!(*line, expected_line);
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(!out.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the dump"
    );

    // Cut cleanly between rows: still truncated (the root never closes).
    let clean_cut = &xml[..xml.rfind("</posts>").unwrap()];
    let posts = write(dir.path(), "Posts2.xml", clean_cut.as_bytes());
    let err = import_questions(&posts, &config(false), &out, &NoProgress)
        .unwrap_err()
        .to_string();
    assert!(err.contains("truncated"), "{err}");

    // A truncated gzip stream is an error too, not a silent short read.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(xml.as_bytes()).unwrap();
    let gz = gz.finish().unwrap();
    let posts = write(dir.path(), "Posts3.gz", &gz[..gz.len() / 2]);
    assert!(import_questions(&posts, &config(false), &out, &NoProgress).is_err());
    assert!(!out.exists());
}

#[test]
fn tag_cooccurrence_and_recent_topics() {
    let dir = tempfile::tempdir().unwrap();
    let posts = write(dir.path(), "Posts.xml", dump(true, false).as_bytes());
    let report =
        tag_cooccurrence(&posts, "Laravel", &DayRange::default(), 10, &NoProgress).unwrap();
    // 300, 100, 50, 400, 500 (8 has no title but has tags: counted for tag statistics).
    assert_eq!(report.topic_questions, 6);
    assert_eq!(report.tags[0].tag, "eloquent");
    assert_eq!(report.tags[0].questions, 2);
    assert!((report.tags[0].share - 2.0 / 6.0).abs() < 1e-9);
    assert_eq!(report.tags[1].tag, "php");

    let topics = recent_topics(&posts, &"2023-01-01".parse().unwrap(), 1, 10, &NoProgress).unwrap();
    let names: Vec<&str> = topics.topics.iter().map(|t| t.tag.as_str()).collect();
    // laravel and eloquent were first used in 2022; php and python are new.
    assert_eq!(names, vec!["php", "python"]);
    assert_eq!(topics.topics[0].first_question, "2024-02-01");
}

#[test]
fn cli_import_writes_summary_and_fails_cleanly_on_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let posts = write(dir.path(), "Posts.xml", dump(false, true).as_bytes());
    let out = dir.path().join("q.jsonl");
    let summary = dir.path().join("summary.json");
    let ok = freshstack(&[
        "stackoverflow",
        "import",
        "--posts",
        posts.to_str().unwrap(),
        "--tag",
        "laravel",
        "--since",
        "2023-01-01",
        "--min-score",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--summary",
        summary.to_str().unwrap(),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(json["kept"], 1);
    assert_eq!(json["dropped"]["malformed_row"], 3);
    assert_eq!(json["compression"], "plain");
    assert_eq!(json["config"]["filter"]["tags"][0], "laravel");
    assert_eq!(json["config"]["range"]["since"], "2023-01-01");

    // Truncated: non-zero exit, one-line error with byte and line, no output.
    let xml = dump(false, true);
    let bad = write(dir.path(), "bad.xml", &xml.as_bytes()[..xml.len() / 2]);
    let out2 = dir.path().join("q2.jsonl");
    let failed = freshstack(&[
        "stackoverflow",
        "import",
        "--posts",
        bad.to_str().unwrap(),
        "--tag",
        "laravel",
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("bad.xml:") && stderr.contains("byte "),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(!out2.exists());

    // A site URL that is not a web URL would become a link in every page: refused.
    let failed = freshstack(&[
        "stackoverflow",
        "import",
        "--posts",
        posts.to_str().unwrap(),
        "--tag",
        "laravel",
        "--site-url",
        "javascript:alert(1)",
        "--out",
        out2.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success());
    assert!(
        stderr.contains("invalid --site-url") && stderr.contains("not an http"),
        "{stderr}"
    );
    assert!(!out2.exists());

    // Missing file and unknown compression: errors before work.
    let missing = freshstack(&[
        "stackoverflow",
        "tags",
        "--posts",
        dir.path().join("nope.xml").to_str().unwrap(),
        "--tag",
        "laravel",
    ]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("nope.xml"));
    let bz = write(dir.path(), "Posts.xml.bz2", b"BZh91AY&SYxxxx");
    let unknown = freshstack(&[
        "stackoverflow",
        "topics",
        "--posts",
        bz.to_str().unwrap(),
        "--since",
        "2023-01-01",
    ]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("bzip2"));

    // Reports.
    let tags = freshstack(&[
        "stackoverflow",
        "tags",
        "--posts",
        posts.to_str().unwrap(),
        "--tag",
        "laravel",
        "--json",
    ]);
    assert!(tags.status.success());
    let report: serde_json::Value = serde_json::from_slice(&tags.stdout).unwrap();
    assert_eq!(report["tags"][0]["tag"], "eloquent");
}

#[test]
fn import_out_dash_writes_the_questions_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let posts = write(dir.path(), "Posts.xml", dump(false, true).as_bytes());
    let out = dir.path().join("q.jsonl");
    let args = |out: &str| {
        freshstack(&[
            "stackoverflow",
            "import",
            "--posts",
            posts.to_str().unwrap(),
            "--tag",
            "laravel",
            "--out",
            out,
        ])
    };
    let to_file = args(out.to_str().unwrap());
    assert!(to_file.status.success());
    let to_stdout = args("-");
    assert!(
        to_stdout.status.success(),
        "{}",
        String::from_utf8_lossy(&to_stdout.stderr)
    );
    assert!(!to_stdout.stdout.is_empty());
    assert_eq!(to_stdout.stdout, std::fs::read(&out).unwrap());
}

#[test]
fn one_huge_xml_event_is_buffered_whole() {
    // Regression (issue 19 item 4): 1 GiB of NULs gzipped, or one giant attribute, was read into
    // memory whole. Now any one event past --max-event-bytes fails on one line naming the file,
    // line and byte, and nothing is written.
    let dir = tempfile::tempdir().unwrap();
    let gzip = |bytes: &[u8]| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(bytes).unwrap();
        gz.finish().unwrap()
    };
    let xml = dump(false, true);
    let body = format!(" Body=\"{}\"", "x".repeat(2 << 20));
    // The first row gets a 2 MiB body.
    let row_at = xml.find("<row").unwrap();
    let row_line = xml[..row_at].matches('\n').count() + 1;
    let attr_at = row_at + xml[row_at..].find(" Id=").unwrap();
    let huge = format!("{}{body}{}", &xml[..attr_at], &xml[attr_at..]);
    let nuls = vec![0u8; 4 << 20];
    for (name, bytes, line, byte) in [
        ("huge.xml.gz", gzip(huge.as_bytes()), row_line, row_at),
        ("nuls.gz", gzip(&nuls), 1, 0),
    ] {
        let posts = write(dir.path(), name, &bytes);
        let out = dir.path().join("q.jsonl");
        let failed = freshstack(&[
            "stackoverflow",
            "import",
            "--posts",
            posts.to_str().unwrap(),
            "--tag",
            "laravel",
            "--max-event-bytes",
            "1000000",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(!failed.status.success(), "{name}");
        let stderr = String::from_utf8_lossy(&failed.stderr);
        let expected = format!("{name}:{line}: byte {byte}: ");
        assert!(stderr.contains(&expected), "{expected} in {stderr}");
        assert!(stderr.contains("longer than 1000000 bytes"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(!out.exists());
    }
    // Under the default bound (64 MiB) the 2 MiB body is an ordinary row.
    let posts = write(dir.path(), "huge.xml.gz", &gzip(huge.as_bytes()));
    let out = dir.path().join("q.jsonl");
    let ok = freshstack(&[
        "stackoverflow",
        "import",
        "--posts",
        posts.to_str().unwrap(),
        "--tag",
        "laravel",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
}
