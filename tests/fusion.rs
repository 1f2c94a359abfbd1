//! Fusion against the reference's `util.fusion` (fixtures from scripts/gen_fusion_fixtures.py),
//! and the `fuse` command.

use std::path::PathBuf;

use freshstack::Run;
use freshstack::search::{FusionOptions, fuse};

use crate::util::freshstack;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fusion")
        .join(name)
}

#[test]
fn reference_fusion_is_reproduced_exactly() {
    let runs: Vec<Run> = (0..3)
        .map(|i| Run::read_trec(fixture(&format!("run{i}.trec"))).unwrap())
        .collect();
    let refs: Vec<&Run> = runs.iter().collect();
    let options = FusionOptions {
        depth: 10,
        round_digits: Some(3),
        ..FusionOptions::default()
    };
    let fused = fuse(&refs, &options, "fusion").unwrap();
    let expected: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    let mut order: Vec<&str> = fused
        .rankings()
        .iter()
        .map(|r| r.query_id.as_str())
        .collect();
    order.sort_unstable();
    // Sorted: serde_json keeps the file's key order (llguidance turns on `preserve_order`).
    let mut expected_order: Vec<&str> = expected.keys().map(String::as_str).collect();
    expected_order.sort_unstable();
    assert_eq!(order, expected_order);
    for (qid, docs) in &expected {
        let ranking = fused.get(qid).unwrap();
        let docs = docs.as_array().unwrap();
        assert_eq!(ranking.docs.len(), docs.len(), "{qid}");
        for (got, want) in ranking.docs.iter().zip(docs) {
            assert_eq!(got.doc_id, want[0].as_str().unwrap(), "{qid}");
            assert_eq!(got.score, want[1].as_f64().unwrap(), "{qid} {}", got.doc_id);
        }
    }
}

#[test]
fn fuse_command_writes_a_trec_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fused.trec");
    let o = freshstack(&[
        "fuse",
        fixture("run0.trec").to_str().unwrap(),
        fixture("run1.trec").to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--depth",
        "10",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fused = Run::read_trec(&out).unwrap();
    assert!(fused.len() >= 20);
    // Bad input: a malformed run names its line; nothing is written.
    let bad = dir.path().join("bad.trec");
    std::fs::write(&bad, "q1 Q0 d1 1 0.5 t\nq1 Q0 d2\n").unwrap();
    let out2 = dir.path().join("never.trec");
    let o = freshstack(&[
        "fuse",
        bad.to_str().unwrap(),
        fixture("run1.trec").to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad.trec:2"));
    assert!(!out2.exists());
}
