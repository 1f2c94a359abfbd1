//! Interrupted runs (issue 19 item 6): a stage stopped by SIGINT/SIGTERM removes its temporaries
//! and ends by that signal (not success); one killed outright leaves them, and the next run beside them removes them.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// A gzipped dump of `chunks` x 10,000 off-topic questions, as concatenated gzip members (one
/// chunk compressed once, repeated), so that a long pass over it costs the test little: the
/// output's temporary exists all along.
fn big_dump(dir: &Path, chunks: usize) -> PathBuf {
    use std::io::Write;
    let gzip = |text: &str| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        gz.finish().unwrap()
    };
    let mut rows = String::new();
    for id in 1..=10_000 {
        rows.push_str(&format!(
            "  <row Id=\"{id}\" PostTypeId=\"1\" CreationDate=\"2024-01-01T00:00:00.000\" \
             Score=\"1\" Title=\"t\" Body=\"&lt;p&gt;some body text here&lt;/p&gt;\" \
             Tags=\"|other|\" />\n"
        ));
    }
    let chunk = gzip(&rows);
    let mut bytes = gzip("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<posts>\n");
    for _ in 0..chunks {
        bytes.extend_from_slice(&chunk);
    }
    bytes.extend_from_slice(&gzip("</posts>\n"));
    let path = dir.join(format!("Posts-{chunks}.xml.gz"));
    std::fs::write(&path, bytes).unwrap();
    path
}

/// A corpus of `docs` small documents: its BM25 build takes a few seconds.
fn big_corpus(dir: &Path, docs: usize) -> PathBuf {
    let mut text = String::new();
    for i in 0..docs {
        text.push_str(&format!(
            "{{\"_id\": \"r/x/f{i}.rs_0_1\", \"title\": \"\", \"text\": \"fn handler_{i}() {{ \
             queue worker retry {} }}\", \"metadata\": {{\"repo\": \"r/x\"}}}}\n",
            i * 7919 % 10007
        ));
    }
    let path = dir.join("corpus.jsonl");
    std::fs::write(&path, text).unwrap();
    path
}

fn spawn(args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Our temporaries in `dir`: `.NAME.XXXXXX.tmp` files and `.freshstack-*` directories.
fn temporaries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp") || n.starts_with(".freshstack-"))
        .collect();
    names.sort();
    names
}

/// Waits until a temporary shows up in `dir` (the job is under way), up to 30 s.
fn wait_for_temporary(dir: &Path, child: &mut Child) {
    let started = Instant::now();
    while temporaries(dir).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut stderr = String::new();
            if let Some(mut pipe) = child.stderr.take() {
                std::io::Read::read_to_string(&mut pipe, &mut stderr).unwrap();
            }
            panic!("the job ended ({status}) before its temporary was seen: {stderr}");
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no temporary");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

/// Makes `path` look older than the stale threshold, as a temporary left hours ago.
fn age(path: &Path) {
    let old = SystemTime::now() - 2 * freshstack::dataset::STALE_AFTER;
    std::fs::File::open(path)
        .unwrap()
        .set_modified(old)
        .unwrap();
}

fn import_args<'a>(posts: &'a Path, out: &'a Path) -> Vec<&'a str> {
    vec![
        "stackoverflow",
        "import",
        "--posts",
        posts.to_str().unwrap(),
        "--tag",
        "laravel",
        "--out",
        out.to_str().unwrap(),
    ]
}

#[test]
fn interrupted_runs_leave_temp_files_forever() {
    let dir = tempfile::tempdir().unwrap();
    // About 3 GB of XML: far longer than the test waits.
    let posts = big_dump(dir.path(), 1_500);
    let outputs = dir.path().join("out");
    std::fs::create_dir(&outputs).unwrap();
    let out = outputs.join("q.jsonl");

    // SIGINT and SIGTERM during an atomic write: the temporary goes, the process dies of it.
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let mut child = spawn(&import_args(&posts, &out));
        wait_for_temporary(&outputs, &mut child);
        signal(&child, sig);
        let status = child.wait().unwrap();
        assert_eq!(status.signal(), Some(sig), "signal {sig}: {status}");
        assert_eq!(temporaries(&outputs), Vec::<String>::new(), "signal {sig}");
        assert!(!out.exists());
    }

    // SIGTERM during an index build: the staging directory goes.
    let corpus = big_corpus(dir.path(), 200_000);
    let parent = dir.path().join("indexes");
    std::fs::create_dir(&parent).unwrap();
    let index = parent.join("index");
    let index_args = [
        "index",
        "--corpus",
        corpus.to_str().unwrap(),
        "--bm25",
        "--index",
        index.to_str().unwrap(),
    ];
    let mut child = spawn(&index_args);
    wait_for_temporary(&parent, &mut child);
    signal(&child, libc::SIGTERM);
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status}");
    assert_eq!(temporaries(&parent), Vec::<String>::new());
    assert!(!index.exists());

    // SIGKILL cannot be caught: the temporaries stay, and the next run beside them removes
    // them once they are old enough to be sure their owner is gone (its lock died with it).
    let mut child = spawn(&import_args(&posts, &out));
    wait_for_temporary(&outputs, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let left = temporaries(&outputs);
    assert_eq!(left.len(), 1, "{left:?}");
    age(&outputs.join(&left[0]));
    let mut child = spawn(&index_args);
    wait_for_temporary(&parent, &mut child);
    child.kill().unwrap();
    child.wait().unwrap();
    let staged = temporaries(&parent);
    assert_eq!(staged.len(), 1, "{staged:?}");
    age(&parent.join(&staged[0]));

    let small = big_dump(dir.path(), 1);
    let rerun = Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(import_args(&small, &out))
        .output()
        .unwrap();
    assert!(rerun.status.success());
    assert_eq!(temporaries(&outputs), Vec::<String>::new());
    assert!(out.exists());
    let small_corpus = big_corpus(dir.path(), 10);
    let mut args = index_args;
    args[2] = small_corpus.to_str().unwrap();
    let rerun = Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        rerun.status.success(),
        "{}",
        String::from_utf8_lossy(&rerun.stderr)
    );
    assert_eq!(temporaries(&parent), Vec::<String>::new());
    assert!(index.join("manifest.json").exists());
}
