//! Hand-computed cases for every metric, and the crash cases of the reference.

use super::*;
use crate::dataset::{NuggetQrels, Run};
use std::str::FromStr;

/// Question `q`: nuggets n0, n1, n2 (n2 without any judged document); d1 supports n0 and n1,
/// d2 supports n0, d3 supports n1, d4 is judged but supports nothing.
fn judgments() -> Judgments {
    let mut qrels = NuggetQrels::new();
    qrels.set("q", "q_0", "d1", 1);
    qrels.set("q", "q_0", "d2", 1);
    qrels.set("q", "q_1", "d1", 1);
    qrels.set("q", "q_1", "d3", 1);
    qrels.set("q", "q_1", "d4", 0);
    qrels.add_nugget("q", "q_2");
    Judgments::new(&qrels)
}

fn run(rows: &[(&str, &str, f64)]) -> Run {
    rows.iter()
        .map(|(q, d, s)| (q.to_string(), d.to_string(), *s))
        .collect()
}

fn config(metric: Metric, ks: &[usize]) -> EvalConfig {
    EvalConfig::new(&[metric], ks).unwrap()
}

fn per_query(eval: &Evaluation) -> Vec<f64> {
    eval.per_query[0].values.clone()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn alpha_ndcg_by_hand() {
    // Run: d2, d3, d1. Gains 1, 1, 0.5 + 0.5 = 1. Ideal (greedy): d1 (2), then d2 and d3 both
    // 0.5 (d3 first: the larger id), so gains 2, 0.5, 0.5.
    let r = run(&[("q", "d2", 3.0), ("q", "d3", 2.0), ("q", "d1", 1.0)]);
    let e = evaluate(&judgments(), &r, &config(Metric::AlphaNdcg, &[1, 2, 3]));
    let l3 = 1.0 / 3f64.log2();
    let l4 = 0.5;
    let v = per_query(&e);
    assert!(close(v[0], 1.0 / 2.0), "{v:?}");
    assert!(close(v[1], (1.0 + l3) / (2.0 + 0.5 * l3)), "{v:?}");
    assert!(
        close(v[2], (1.0 + l3 + l4) / (2.0 + 0.5 * l3 + 0.5 * l4)),
        "{v:?}"
    );
    assert_eq!(e.means[2], py_round(v[2], 4));
}

#[test]
fn alpha_ndcg_ties_use_doc_id_inside_the_cut() {
    // Equal scores: the cut is a stable sort (with k = 1 only d2, first in input, survives),
    // then ndeval orders by doc id ascending inside the cut (with k = 1, 2: d1, gain 2, first).
    let r = run(&[("q", "d2", 1.0), ("q", "d1", 1.0), ("q", "x", 0.5)]);
    let one = evaluate(
        &judgments(),
        &r,
        &EvalConfig::new(&[Metric::AlphaNdcg], &[1]).unwrap(),
    );
    assert!(close(per_query(&one)[0], 0.5), "{:?}", per_query(&one));
    let two = evaluate(
        &judgments(),
        &r,
        &EvalConfig::new(&[Metric::AlphaNdcg], &[1, 2]).unwrap(),
    );
    assert!(close(per_query(&two)[0], 1.0), "{:?}", per_query(&two));
}

#[test]
fn alpha_ndcg_beyond_20_is_defined() {
    let mut rows = vec![];
    for i in 0..30 {
        rows.push(("q", format!("x{i:02}"), 100.0 - i as f64));
    }
    rows.push(("q", "d1".to_string(), 0.0));
    let r: Run = rows
        .into_iter()
        .map(|(q, d, s)| (q.to_string(), d, s))
        .collect();
    let e = evaluate(&judgments(), &r, &config(Metric::AlphaNdcg, &[25, 31]));
    let v = per_query(&e);
    assert_eq!(v[0], 0.0);
    assert!(v[1] > 0.0 && v[1] < 1.0, "{v:?}");
}

#[test]
fn coverage_by_hand() {
    let r = run(&[("q", "d2", 3.0), ("q", "d3", 2.0), ("q", "d1", 1.0)]);
    let e = evaluate(&judgments(), &r, &config(Metric::Coverage, &[1, 2]));
    // n2 has no document but counts: 1/3 and 2/3, rounded to 5 decimals per question.
    assert_eq!(per_query(&e), vec![0.33333, 0.66667]);
    assert_eq!(e.means, vec![0.3333, 0.6667]);
    // Stable ties: equal scores keep input order.
    let r = run(&[("q", "x", 1.0), ("q", "d1", 1.0)]);
    let e = evaluate(&judgments(), &r, &config(Metric::Coverage, &[1]));
    assert_eq!(per_query(&e), vec![0.0]);
}

#[test]
fn recall_precision_mrr_ndcg_by_hand() {
    // Query labels: d1 2, d2 1, d3 1, d4 0 -> 3 relevant.
    // trec_eval ties: equal scores by doc id descending: x, d4, d3, d1.
    let r = run(&[
        ("q", "d1", 1.0),
        ("q", "d3", 1.0),
        ("q", "x", 1.0),
        ("q", "d4", 1.0),
    ]);
    let all = EvalConfig::new(
        &[Metric::Recall, Metric::Precision, Metric::Mrr, Metric::Ndcg],
        &[2, 3],
    )
    .unwrap();
    let e = evaluate(&judgments(), &r, &all);
    let v = per_query(&e);
    assert_eq!(&v[0..2], &[0.0, 1.0 / 3.0]); // recall@2, @3
    assert_eq!(&v[2..4], &[0.0, 1.0 / 3.0]); // P@2, P@3
    assert_eq!(&v[4..6], &[0.0, 1.0 / 3.0]); // MRR@2, @3
    assert_eq!(v[6], 0.0); // nDCG@2
    let expected = (1.0 / 4f64.log2()) / (2.0 + 1.0 / 3f64.log2() + 1.0 / 4f64.log2());
    assert!(close(v[7], expected), "{v:?}");
}

#[test]
fn hole_and_judged_by_hand() {
    let mut qrels = NuggetQrels::new();
    qrels.set("q", "q_0", "d1", 1);
    qrels.set("p", "p_0", "e1", 0);
    let j = Judgments::new(&qrels);
    let r = run(&[("q", "d1", 3.0), ("q", "e1", 2.0), ("q", "x", 1.0)]);
    let e = evaluate(
        &j,
        &r,
        &EvalConfig::new(&[Metric::Hole, Metric::Judged], &[4]).unwrap(),
    );
    // Hole: x only (e1 is judged for another question). Judged: d1 only.
    assert_eq!(per_query(&e), vec![0.25, 0.25]);
}

#[test]
fn denominators_count_every_judged_question() {
    let mut qrels = NuggetQrels::new();
    qrels.set("a", "a_0", "d", 1);
    qrels.set("b", "b_0", "d", 1);
    let j = Judgments::new(&qrels);
    let r = run(&[("a", "d", 1.0), ("zzz", "d", 1.0)]);
    let e = evaluate(&j, &r, &EvalConfig::paper());
    assert_eq!(e.means, vec![0.5, 0.5, 0.5]);
    assert_eq!(e.notes.missing_queries, 1);
    assert_eq!(e.notes.unknown_queries, 1);
}

#[test]
fn reference_crash_cases_score_zero() {
    let mut qrels = NuggetQrels::new();
    qrels.set("a", "a_0", "d", 1);
    qrels.add_nugget("b", "b_0"); // nuggets, but no judged document
    let j = Judgments::new(&qrels);
    let mut r = run(&[("b", "d", 1.0)]);
    r.push("a", "d", 1.0);
    let empty = Run::new("empty");
    assert_eq!(
        evaluate(&j, &empty, &EvalConfig::paper()).means,
        vec![0.0; 3]
    );
    let e = evaluate(&j, &r, &EvalConfig::paper());
    assert_eq!(e.notes.unjudged_queries, 1);
    assert_eq!(e.means, vec![0.5, 0.5, 0.5]);
    // Only k > 20: the reference crashes; we compute it.
    let e = evaluate(&j, &r, &config(Metric::AlphaNdcg, &[50]));
    assert_eq!(e.means, vec![0.5]);
}

#[test]
fn q1_does_not_take_q12_s_nuggets() {
    let qrels =
        NuggetQrels::from_nugget_map(vec![("q1_0", vec![("a", 1)]), ("q12_0", vec![("b", 1)])]);
    let j = Judgments::new(&qrels);
    let r = run(&[("q1", "a", 1.0), ("q12", "b", 1.0)]);
    let e = evaluate(&j, &r, &EvalConfig::paper());
    assert_eq!(e.means, vec![1.0, 1.0, 1.0]);
}

#[test]
fn config_defaults_and_parse() {
    let c = EvalConfig::new(&[], &[]).unwrap();
    assert_eq!(c, EvalConfig::paper());
    let names: Vec<String> = EvalConfig::new(&[Metric::Recall, Metric::Coverage], &[5, 100])
        .unwrap()
        .measures
        .iter()
        .map(|m| m.to_string())
        .collect();
    assert_eq!(
        names,
        ["recall@5", "recall@100", "coverage@5", "coverage@100"]
    );
    assert!(EvalConfig::new(&[], &[0]).is_err());
    assert_eq!(Metric::from_str("alpha-nDCG").unwrap(), Metric::AlphaNdcg);
    assert!(Metric::from_str("map").is_err());
    assert_eq!(EvalConfig::paper().alpha_cut(), 20);
    assert_eq!(
        EvalConfig::new(&[Metric::AlphaNdcg], &[])
            .unwrap()
            .alpha_cut(),
        10
    );
    assert_eq!(EvalConfig::new(&[], &[10, 20, 50]).unwrap().alpha_cut(), 20);
}

#[test]
fn output_does_not_depend_on_thread_count() {
    let mut qrels = NuggetQrels::new();
    let mut rows = Vec::new();
    for q in 0..40 {
        let qid = format!("q{q}");
        for n in 0..3 {
            qrels.set(
                &qid,
                &format!("{qid}_{n}"),
                &format!("d{}", (q * 7 + n) % 13),
                1,
            );
        }
        for d in 0..25 {
            rows.push((qid.clone(), format!("d{d}"), ((q * 31 + d * 17) % 9) as f64));
        }
    }
    let j = Judgments::new(&qrels);
    let r: Run = rows.into_iter().collect();
    let config = EvalConfig::new(&Metric::ALL, &[1, 5, 10, 20, 30]).unwrap();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let four = rayon::ThreadPoolBuilder::new()
        .num_threads(4)
        .build()
        .unwrap();
    let a = one.install(|| evaluate(&j, &r, &config));
    let b = four.install(|| evaluate(&j, &r, &config));
    assert_eq!(a, b);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    /// (question, nugget, doc, label) judgments; (question, doc, score) run lines; cutoffs.
    type Inputs = (Vec<(u8, u8, u8, i8)>, Vec<(u8, u8, f64)>, Vec<usize>);

    fn inputs() -> impl Strategy<Value = Inputs> {
        (
            prop::collection::vec((0u8..6, 0u8..4, 0u8..30, -1i8..3), 0..60),
            prop::collection::vec(
                (
                    0u8..8,
                    0u8..40,
                    prop_oneof![
                        Just(1.0),
                        Just(0.0),
                        Just(-0.0),
                        -5.0f64..5.0,
                        Just(f64::NAN)
                    ],
                ),
                0..200,
            ),
            prop::collection::vec(1usize..60, 1..4),
        )
    }

    proptest! {
        #[test]
        fn never_panics_and_stays_in_range((judged, ranked, ks) in inputs()) {
            let mut qrels = NuggetQrels::new();
            for (q, n, d, label) in judged {
                qrels.set(&format!("q{q}"), &format!("q{q}_{n}"), &format!("d{d}"), i32::from(label));
            }
            let mut run = Run::new("p");
            for (q, d, s) in ranked {
                run.push(&format!("q{q}"), &format!("d{d}"), s);
            }
            let judgments = Judgments::new(&qrels);
            let config = EvalConfig::new(&Metric::ALL, &ks).unwrap();
            let e = evaluate(&judgments, &run, &config);
            for q in &e.per_query {
                for (m, v) in config.measures.iter().zip(&q.values) {
                    prop_assert!(v.is_finite() && *v >= 0.0, "{m} {v}");
                    if m.metric != Metric::AlphaNdcg {
                        // The greedy ideal of alpha-nDCG is not optimal, so only it may pass 1.
                        prop_assert!(*v <= 1.0 + 1e-12, "{m} {v}");
                    }
                }
            }
            for v in &e.means {
                prop_assert!(v.is_finite());
            }
        }
    }
}

/// `evaluate_files` reads what `compare_runs` is given in memory: the same values, runs named
/// after their file stems (a repeated stem by its path), repeated lines counted, and the
/// per-question file written.
#[test]
fn evaluate_files_reads_names_and_writes_per_query() {
    let dir = tempfile::tempdir().unwrap();
    let qrels = dir.path().join("qrels.txt");
    std::fs::write(
        &qrels,
        "q q_0 d1 1\nq q_0 d2 1\nq q_1 d1 1\nq q_1 d3 1\nq q_1 d4 0\n",
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("other")).unwrap();
    let first = dir.path().join("r.trec");
    let second = dir.path().join("other").join("r.trec");
    // The second run repeats (q, d3): its last score counts, at its first position.
    std::fs::write(&first, "q Q0 d2 1 3 a\nq Q0 d3 2 2 a\nq Q0 d1 3 1 a\n").unwrap();
    std::fs::write(&second, "q Q0 d3 1 3 b\nq Q0 d1 2 2 b\nq Q0 d3 3 4 b\n").unwrap();
    let per_query = dir.path().join("per_query.jsonl");
    let job = EvalJob {
        judgments: qrels.clone(),
        format: JudgmentsFormat::NdevalQrels,
        runs: vec![first.clone(), second.clone()],
        config: EvalConfig::new(&[Metric::AlphaNdcg, Metric::Coverage], &[1, 3]).unwrap(),
        significance: SignificanceConfig {
            permutations: 100,
            seed: 7,
        },
        per_query: Some(per_query.clone()),
    };
    let report = evaluate_files(&job).unwrap();

    let names: Vec<&str> = report
        .comparison
        .evaluations
        .iter()
        .map(|e| e.run_name.as_str())
        .collect();
    assert_eq!(names, ["r", second.display().to_string().as_str()]);
    assert_eq!(report.duplicates, [0, 1]);

    let judgments = load_judgments(&qrels, JudgmentsFormat::NdevalQrels).unwrap();
    let a = run(&[("q", "d2", 3.0), ("q", "d3", 2.0), ("q", "d1", 1.0)]);
    let b = run(&[("q", "d3", 4.0), ("q", "d1", 2.0)]);
    let expected = compare_runs(&judgments, &[a, b], &job.config, job.significance);
    for (got, want) in report
        .comparison
        .evaluations
        .iter()
        .zip(&expected.evaluations)
    {
        assert_eq!(got.means, want.means);
        assert_eq!(got.per_query, want.per_query);
    }
    // Debug text: a p-value may be NaN (one question), which `==` never equals.
    assert_eq!(
        format!("{:?}", report.comparison.tests),
        format!("{:?}", expected.tests)
    );

    let written = std::fs::read_to_string(&per_query).unwrap();
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].starts_with("{\"run\": \"r\", \"query_id\": \"q\", \"alpha_ndcg@1\": "),
        "{written}"
    );
}

#[test]
fn evaluate_files_names_the_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let qrels = dir.path().join("qrels.txt");
    std::fs::write(&qrels, "q q_0 d1 1\n").unwrap();
    let missing = dir.path().join("missing.trec");
    let job = EvalJob {
        judgments: qrels,
        format: JudgmentsFormat::NdevalQrels,
        runs: vec![missing.clone()],
        config: EvalConfig::paper(),
        significance: SignificanceConfig::default(),
        per_query: None,
    };
    let err = evaluate_files(&job).unwrap_err().to_string();
    assert!(err.starts_with(&missing.display().to_string()), "{err}");
}

#[test]
fn cutoffs_beyond_the_deepest_are_refused_before_any_allocation() {
    for k in [0, MAX_CUTOFF + 1, 100_000_000, usize::MAX] {
        let err = EvalConfig::new(&[Metric::AlphaNdcg], &[k])
            .unwrap_err()
            .to_string();
        assert!(err.contains("cutoffs must be in [1, 100000]"), "{k}: {err}");
    }
    assert!(EvalConfig::new(&[Metric::Recall], &[MAX_CUTOFF]).is_ok());
}
