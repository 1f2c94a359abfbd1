//! Issue 34's stream defects: a file read whole is read only up to a bound (so `/dev/zero` fails
//! at once, with one line), and an output that is a stream (`/dev/stdout` into a pipe) is
//! written in place.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::freshstack;

fn report_fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/report")
        .join(rel)
}

/// Runs `args`, which must fail within a few seconds with one line saying what was too long.
fn refused_as_too_long(args: &[&str]) {
    let started = Instant::now();
    let out = freshstack(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
    assert!(
        stderr.contains("/dev/zero") && stderr.contains("longer than"),
        "{args:?}: {stderr}"
    );
    // Generous for a debug build on a busy machine; unbounded reads took minutes and ~2 GB.
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{args:?} took {:?}",
        started.elapsed()
    );
}

#[test]
fn whole_file_reads_of_dev_zero_stop_at_a_bound() {
    if !Path::new("/dev/zero").exists() {
        eprintln!("SKIP: no /dev/zero");
        return;
    }
    let queries = report_fixture("queries.jsonl");
    let run = report_fixture("runs/oracle.nuggets.bm25.trec");
    let (q, r) = (queries.to_str().unwrap(), run.to_str().unwrap());
    let out = tempfile::tempdir().unwrap();
    let fused = out.path().join("fused.trec");
    refused_as_too_long(&["build", "--config", "/dev/zero"]);
    refused_as_too_long(&["calibrate", "score", "/dev/zero"]);
    refused_as_too_long(&["eval", "--queries", "/dev/zero", "--run", r]);
    refused_as_too_long(&["eval", "--qrels", "/dev/zero", "--run", r]);
    refused_as_too_long(&["eval", "--queries", q, "--run", "/dev/zero"]);
    refused_as_too_long(&["fuse", "/dev/zero", r, "--out", fused.to_str().unwrap()]);
    assert!(!fused.exists());
}

#[test]
fn out_dev_stdout_into_a_pipe_is_written_in_place() {
    let a = report_fixture("runs/oracle.nuggets.bm25.trec");
    let b = report_fixture("runs/inference.question.bm25.trec");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fused.trec");
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let to_file = freshstack(&["fuse", a, b, "--out", file.to_str().unwrap()]);
    assert!(to_file.status.success(), "{to_file:?}");
    // The test harness reads the child's standard output through a pipe.
    let to_pipe = freshstack(&["fuse", a, b, "--out", "/dev/stdout"]);
    assert!(
        to_pipe.status.success(),
        "{}",
        String::from_utf8_lossy(&to_pipe.stderr)
    );
    assert_eq!(to_pipe.stdout, std::fs::read(&file).unwrap());
}
