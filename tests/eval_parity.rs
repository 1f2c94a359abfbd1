//! Parity with the reference evaluator (freshstack==0.0.6): fixtures made by
//! `scripts/gen_eval_fixtures.py`; every value must be equal.

use std::path::Path;

use freshstack::Run;
use freshstack::dataset::{NuggetQrels, Question};
use freshstack::eval::{EvalConfig, Judgments, Metric, evaluate, paired_t_test, py_round};

fn fixture(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/eval")
        .join(name);
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn every_reference_value_is_reproduced() {
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for line in fixture("parity.jsonl").lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = case["name"].as_str().unwrap();
        let qrels = if case["format"] == "ndeval" {
            let path = dir.path().join(format!("{name}.qrels"));
            std::fs::write(&path, case["ndeval"].as_str().unwrap()).unwrap();
            NuggetQrels::read_ndeval(&path).unwrap()
        } else {
            let records: Vec<Question> = serde_json::from_value(case["queries"].clone()).unwrap();
            NuggetQrels::from_queries(&records)
        };
        let judgments = Judgments::new(&qrels);
        let run_path = dir.path().join(format!("{name}.trec"));
        std::fs::write(&run_path, case["run"].as_str().unwrap()).unwrap();
        let run = Run::read_trec(&run_path).unwrap();
        let ks: Vec<usize> = case["k_values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k.as_u64().unwrap() as usize)
            .collect();
        let config = EvalConfig::new(
            &[
                Metric::AlphaNdcg,
                Metric::Coverage,
                Metric::Recall,
                Metric::Ndcg,
                Metric::Hole,
            ],
            &ks,
        )
        .unwrap();
        let eval = evaluate(&judgments, &run, &config);
        for (key, want) in case["expected"].as_object().unwrap() {
            let measure = config
                .measures
                .iter()
                .position(|m| m.to_string() == *key)
                .unwrap();
            let got = eval.means[measure];
            assert_eq!(got, want.as_f64().unwrap(), "{name} {key}");
            checked += 1;
        }
        // Per-question Hole@k, unrounded in the reference.
        for (qid, values) in case["expected_hole"].as_object().unwrap() {
            let row = eval.per_query.iter().find(|q| q.query_id == *qid).unwrap();
            for (key, want) in values.as_object().unwrap() {
                let measure = config
                    .measures
                    .iter()
                    .position(|m| m.to_string() == *key)
                    .unwrap();
                assert_eq!(
                    row.values[measure],
                    want.as_f64().unwrap(),
                    "{name} {qid} {key}"
                );
                checked += 1;
            }
        }
        let crashes = case["reference_crashes_on"].as_array().unwrap().len();
        assert_eq!(eval.notes.unjudged_queries, crashes, "{name}");
    }
    assert!(checked > 500, "{checked}");
}

#[test]
fn python_round_is_reproduced() {
    let cases: Vec<(f64, usize, f64)> = serde_json::from_str(&fixture("rounding.json")).unwrap();
    for (x, nd, want) in cases {
        assert_eq!(py_round(x, nd), want, "round({x}, {nd})");
    }
}

#[test]
fn t_test_matches_scipy() {
    let cases: Vec<serde_json::Value> = serde_json::from_str(&fixture("ttest.json")).unwrap();
    for case in cases {
        let a: Vec<f64> = serde_json::from_value(case["a"].clone()).unwrap();
        let b: Vec<f64> = serde_json::from_value(case["b"].clone()).unwrap();
        let want = case["p"].as_f64().unwrap();
        let got = paired_t_test(&a, &b);
        assert!(
            (got - want).abs() < 1e-9 * want.max(1e-3),
            "{got} vs {want}"
        );
    }
}
