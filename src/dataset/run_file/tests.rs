//! Parser edge cases of [`RunFile`]; the owned [`Run`](super::super::Run) reads through it.

use super::*;

fn parse(text: &str) -> Result<RunFile> {
    RunFile::parse("run.trec", text)
}

fn docs(run: &RunFile, query_id: &str) -> Vec<(String, f64)> {
    let i = run.position(query_id).unwrap();
    run.docs(i)
        .map(|d| (d.doc_id.to_string(), d.score))
        .collect()
}

fn pairs(list: &[(&str, f64)]) -> Vec<(String, f64)> {
    list.iter().map(|(d, s)| (d.to_string(), *s)).collect()
}

proptest::proptest! {
    #[test]
    fn fast_split_equals_unicode_split(line in "[a-z0-9_./ \t\u{1c}\u{1f}\u{7f}\u{a0}é\x00-]{0,80}") {
        let mut fast = Vec::new();
        split_fields(&line, &mut fast);
        let slow: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c))
            .filter(|f| !f.is_empty())
            .collect();
        proptest::prop_assert_eq!(fast, slow);
    }

    #[test]
    fn fast_scores_equal_std_parse(text in "[-+]?[0-9]{0,21}(\\.[0-9]{0,21})?") {
        let fast = parse_plain_decimal(text.as_bytes());
        let slow = text.parse::<f64>().ok();
        if let Some(value) = fast {
            proptest::prop_assert_eq!(Some(value.to_bits()), slow.map(f64::to_bits), "{}", text);
        }
        proptest::prop_assert_eq!(parse_score(&text).map(f64::to_bits), slow.map(f64::to_bits));
    }

    #[test]
    fn random_scores_round_trip(bits in proptest::num::u64::ANY) {
        let value = f64::from_bits(bits);
        if !value.is_nan() {
            for text in [format!("{value}"), format!("{value:.6}"), format!("{value:e}")] {
                proptest::prop_assert_eq!(
                    parse_score(&text).map(f64::to_bits),
                    text.parse::<f64>().ok().map(f64::to_bits)
                );
            }
        }
    }
}

#[test]
fn fields_split_like_python() {
    let mut f = Vec::new();
    split_fields(" a\tb\x1cc  d\r", &mut f);
    assert_eq!(f, ["a", "b", "c", "d"]);
    split_fields("q\u{a0}é  x", &mut f);
    assert_eq!(f, ["q", "é", "x"]);
    split_fields("abcdefghijklmnop qrstuvwxyz0123456789\tq\u{7f}", &mut f);
    assert_eq!(f, ["abcdefghijklmnop", "qrstuvwxyz0123456789", "q\u{7f}"]);
    split_fields("a_long_doc_id_x\u{a0}y_more_bytes_here 2", &mut f);
    assert_eq!(f, ["a_long_doc_id_x", "y_more_bytes_here", "2"]);
    split_fields("a\x00b c", &mut f);
    assert_eq!(f, ["a\x00b", "c"]);
}

#[test]
fn scores_in_every_form_python_reads() {
    for (text, value) in [
        ("1", 1.0),
        ("-2.5", -2.5),
        ("+3.", 3.0),
        (".25", 0.25),
        ("1e-3", 0.001),
        ("1E+2", 100.0),
        ("inf", f64::INFINITY),
        ("-Infinity", f64::NEG_INFINITY),
        ("0.1", 0.1),
        ("12345678901234567890.5", 12345678901234567890.5),
    ] {
        assert_eq!(parse_score(text), Some(value), "{text}");
    }
    assert_eq!(
        parse_score("-0").map(f64::to_bits),
        Some((-0.0f64).to_bits())
    );
    for bad in ["", "-", ".", "1.2.3", "nan", "NaN", "0x10", "1,5", "--1"] {
        assert_eq!(parse_score(bad), None, "{bad}");
    }
}

#[test]
fn empty_and_blank_files_have_no_question() {
    assert!(parse("").unwrap().is_empty());
    assert!(parse("\n \r\n\t\n").unwrap().is_empty());
}

#[test]
fn crlf_trailing_spaces_and_no_final_newline() {
    let run = parse("q1 Q0 a 1 2.5 t  \r\nq1 Q0 b 2 1.5 t\t\r\n\r\nq2 Q0 c 1 1 t").unwrap();
    assert_eq!(run.len(), 2);
    assert_eq!(docs(&run, "q1"), pairs(&[("a", 2.5), ("b", 1.5)]));
    assert_eq!(docs(&run, "q2"), pairs(&[("c", 1.0)]));
}

#[test]
fn a_lone_carriage_return_ends_a_line_as_in_python() {
    // Python's universal newlines read this as two lines.
    let run = parse("q1 Q0 a 1 2 t\rq1 Q0 b 2 1 t\r").unwrap();
    assert_eq!(docs(&run, "q1"), pairs(&[("a", 2.0), ("b", 1.0)]));
    let err = parse("q1 Q0 a 1 2 t\rq1 Q0 b\r\n").unwrap_err().to_string();
    assert!(err.contains("run.trec:2:"), "{err}");
}

#[test]
fn malformed_lines_are_named() {
    let err = parse("q1 Q0 a 1 1 t\r\n\r\nq1 Q0 b 2\r\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("run.trec:3:") && err.contains("got 4"),
        "{err}"
    );
    let err = parse("q1 Q0 a 1 1,5 t\n").unwrap_err().to_string();
    assert!(err.contains(":1:") && err.contains("`1,5`"), "{err}");
    // With 7+ fields the score is the second to last field.
    let err = parse("q1 Q0 my doc 1 0.5 t\nq1 Q0 a b c 1 x t\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains(":2:") && err.contains("`x`"), "{err}");
}

#[test]
fn invalid_utf8_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.trec");
    std::fs::write(&path, b"q1 Q0 a 1 1 t\nq1 Q0 \xff 2 0.5 t\n").unwrap();
    let err = RunFile::read(&path).unwrap_err().to_string();
    assert!(
        err.contains("bad.trec:2:") && err.contains("UTF-8"),
        "{err}"
    );
}

#[test]
fn ids_with_spaces_and_duplicates() {
    let run = parse(
        "q1 Q0 my  doc\tname.md_0_10 1 0.5 tag\nq1 Q0 b 2 0.4 t\nq1 Q0 my doc name.md_0_10 3 0.9 t\n",
    )
    .unwrap();
    assert_eq!(
        docs(&run, "q1"),
        pairs(&[("my doc name.md_0_10", 0.9), ("b", 0.4)])
    );
    assert_eq!(run.duplicates(), 1);
}

/// A file big enough for many chunks, with ids containing spaces, questions interleaved and
/// duplicates far apart: the same run as pushing the lines one by one, whatever the threads.
#[test]
fn chunked_parse_equals_line_by_line_pushes() {
    let mut text = String::new();
    let mut expected = super::super::Run::new("x");
    for i in 0..60_000u64 {
        let q = format!("q{}", (i / 7) % 13);
        let doc = if i % 5 == 0 {
            format!("dir {} /f_{}", i % 11, i % 997)
        } else {
            format!("d{}", i % 1009)
        };
        let score = (i * 7919 % 1000) as f64 / 8.0;
        text.push_str(&format!("{q} Q0 {doc} {i} {score} t\n"));
        let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
        expected.push(&q, &doc, score);
    }
    let check = |run: &RunFile| {
        assert_eq!(run.len(), expected.len());
        assert_eq!(run.duplicates(), expected.duplicates());
        for (i, ranking) in expected.rankings().iter().enumerate() {
            assert_eq!(run.query_id(i), ranking.query_id);
            let got: Vec<DocRef> = run.docs(i).collect();
            assert_eq!(got, ranking.doc_refs());
        }
    };
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let run = pool.install(|| parse(&text)).unwrap();
        check(&run);
        let owned = run.to_run();
        assert_eq!(owned.duplicates(), expected.duplicates());
        assert_eq!(owned.rankings(), expected.rankings());
    }
    // An error late in the file is found in its chunk and numbered in the whole file.
    text.push_str("q1 Q0 late 1 oops t\n");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.contains(":60001:"), "{err}");
}
