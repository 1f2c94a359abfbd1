//! A corrupt index (issue 19 item 3): every byte of every file of a small index is flipped in
//! turn; each flip must give a one-line error that says to rebuild (the manifest's CRC-32s are
//! checked before tantivy or the vector map reads a byte), or, in the HNSW cache, which is
//! rebuilt when its checksum fails, the very same answers. Never a panic, never other answers.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use freshstack::NoProgress;
use freshstack::dataset::{VectorDtype, write_npy};
use freshstack::index::{Bm25Settings, HnswSettings, IndexConfig, VectorSource, build_index};
use freshstack::search::{Ann, Engine, SearchOptions};

const TEXTS: &[&str] = &[
    "Route::get('/users', [UserController::class, 'index']);",
    "Configure the database connection in config/database.php",
    "class HTTPServer: def handle_request(self): return getUserName()",
    "The cache driver stores items; cache items expire.",
    "Queues let you defer time consuming tasks such as sending email.",
    "A queue worker retries failed jobs with a backoff.",
];

fn small_index(dir: &Path) -> PathBuf {
    let ids: Vec<String> = (0..TEXTS.len())
        .map(|i| format!("a/b/f{i}.md_0_1"))
        .collect();
    let corpus: String = ids
        .iter()
        .zip(TEXTS)
        .map(|(id, text)| {
            serde_json::json!({"_id": id, "title": "", "text": text, "metadata": {"repo": "a/b"}})
                .to_string()
                + "\n"
        })
        .collect();
    let corpus_path = dir.join("corpus.jsonl");
    std::fs::write(&corpus_path, corpus).unwrap();
    // Unit vectors along (i mod 4) with a small tilt, so exact and HNSW rank alike.
    let npy = dir.join("vectors.npy");
    write_npy(&npy, ids.len(), 4, VectorDtype::F32, |i, row| {
        row.fill(0.1);
        row[i % 4] = 1.0;
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        row.iter_mut().for_each(|x| *x /= norm);
    })
    .unwrap();
    std::fs::write(npy.with_extension("ids"), ids.join("\n") + "\n").unwrap();
    let index = dir.join("index");
    let config = IndexConfig {
        corpus: corpus_path,
        bm25: Some(Bm25Settings::default()),
        vectors: vec![VectorSource {
            name: "v".into(),
            npy,
        }],
        hnsw: Some(HnswSettings::default()),
    };
    build_index(&config, &index, &NoProgress).unwrap();
    index
}

/// What the index answers: BM25, exact and HNSW dense search, as (id, score) lists.
fn answers(index: &Path) -> freshstack::Result<Vec<Vec<(String, f64)>>> {
    let engine = Engine::open(index)?;
    let as_pairs = |hits: Vec<freshstack::dataset::ScoredDoc>| {
        hits.into_iter()
            .map(|h| (h.doc_id, h.score))
            .collect::<Vec<_>>()
    };
    let mut out = vec![as_pairs(engine.search_bm25("queue worker cache", 6)?)];
    for ann in [Ann::Exact, Ann::Hnsw] {
        let options = SearchOptions {
            retriever: "dense:v".parse().unwrap(),
            k: 6,
            ann,
            ..SearchOptions::default()
        };
        out.push(as_pairs(engine.search_vector(
            "v",
            &[0.0, 1.0, 0.2, 0.0],
            &options,
        )?));
    }
    Ok(out)
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn a_corrupt_index_panics_or_answers_wrongly() {
    let dir = tempfile::tempdir().unwrap();
    let index = small_index(dir.path());
    let baseline = answers(&index).unwrap();
    let mut paths = Vec::new();
    files(&index, &mut paths);
    paths.sort();
    let names: Vec<String> = paths
        .iter()
        .map(|p| p.strip_prefix(&index).unwrap().display().to_string())
        .collect();
    // Every kind of file is in the test: tantivy's, ours, the HNSW cache.
    for part in [
        ".fast",
        ".term",
        ".fieldnorm",
        ".idx",
        ".store",
        "meta.json",
        ".managed.json",
        "ids.txt",
        "vectors.npy",
        "manifest.json",
        "graph.bin",
    ] {
        assert!(
            names.iter().any(|n| n.ends_with(part)),
            "{part} in {names:?}"
        );
    }
    let mut flips = 0;
    for (path, name) in paths.iter().zip(&names) {
        let original = std::fs::read(path).unwrap();
        let cache = name.contains("/hnsw/");
        // One byte rewritten in place (no truncation, which ext4 answers with a flush).
        let poke = |at: usize, byte: u8| {
            let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            file.write_at(&[byte], at as u64).unwrap();
        };
        for at in 0..original.len() {
            poke(at, original[at] ^ 0xff);
            match answers(&index) {
                Err(e) => {
                    let message = e.to_string();
                    assert!(
                        !cache && message.contains("rebuild") && !message.contains('\n'),
                        "{name} byte {at}: {message}"
                    );
                }
                Ok(got) => assert!(
                    cache && got == baseline,
                    "{name} byte {at}: answered {got:?}, not {baseline:?}"
                ),
            }
            if cache {
                // The rebuilt cache replaced the file with the same graph; write it back anyway.
                std::fs::write(path, &original).unwrap();
            } else {
                poke(at, original[at]);
            }
            flips += 1;
        }
    }
    assert!(flips > 3000, "{flips} flips");
    assert_eq!(answers(&index).unwrap(), baseline);
}

#[test]
fn a_corrupt_index_is_one_line_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let index = small_index(dir.path());
    let ids = index.join("ids.txt");
    let mut bytes = std::fs::read(&ids).unwrap();
    bytes[3] ^= 0x01;
    std::fs::write(&ids, bytes).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(["search", "--index", index.to_str().unwrap(), "queue"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ids.txt")
            && stderr.contains("corrupt index")
            && stderr.contains("rebuild"),
        "{stderr}"
    );
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
}

/// A manifest is outside input and its checksum can be forged: one that names a file outside the
/// index (an absolute path, a `..` part) or a file that is not a regular file (a symlink to
/// `/dev/zero`, a directory) is refused with one line before a byte of that file is read.
#[test]
fn a_forged_manifest_never_reads_outside_the_index() {
    use freshstack::index::Manifest;
    let dir = tempfile::tempdir().unwrap();
    let index = small_index(dir.path());
    let original = Manifest::read(&index).unwrap();
    std::os::unix::fs::symlink("/dev/zero", index.join("zero")).unwrap();
    std::fs::create_dir(index.join("sub")).unwrap();
    std::fs::write(dir.path().join("outside"), b"x").unwrap();
    let forged = [
        ("/dev/zero", "not a relative path inside the index"),
        ("../outside", "not a relative path inside the index"),
        ("./ids.txt", "not a relative path inside the index"),
        ("", "not a relative path inside the index"),
        ("zero", "not a regular file"),
        ("sub", "not a regular file"),
    ];
    for (path, why) in forged {
        let mut manifest = original.clone();
        manifest.files[0].path = path.to_string();
        manifest.files[0].bytes = 1;
        manifest.write(&index).unwrap();
        let err = Manifest::read(&index).unwrap_err().to_string();
        assert!(err.contains(why), "{path:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    original.write(&index).unwrap();
    Manifest::read(&index).unwrap();
}

/// Issue 34: a dense model name is a directory of the index; a forged `../..` would have made
/// `search` read vectors from outside and write its graph there.
#[test]
fn a_forged_dense_model_name_never_leaves_the_index() {
    use freshstack::index::Manifest;
    let dir = tempfile::tempdir().unwrap();
    let index = small_index(dir.path());
    let original = Manifest::read(&index).unwrap();
    for name in ["../../somewhere", "..", "a/b", ""] {
        let mut manifest = original.clone();
        manifest.dense[0].name = name.to_string();
        manifest.write(&index).unwrap();
        let err = Manifest::read(&index).unwrap_err().to_string();
        assert!(err.contains("is not a plain name"), "{name:?}: {err}");
        assert!(!dir.path().join("somewhere").exists());
    }
    original.write(&index).unwrap();
    Manifest::read(&index).unwrap();
}

/// Issue 34: a manifest with an entry removed opened, and that file was then never checked.
#[test]
fn a_manifest_that_leaves_out_a_file_the_index_reads_is_refused() {
    use freshstack::index::Manifest;
    let dir = tempfile::tempdir().unwrap();
    let index = small_index(dir.path());
    let original = Manifest::read(&index).unwrap();
    for i in 0..original.files.len() {
        let mut manifest = original.clone();
        let left_out = manifest.files.remove(i).path;
        manifest.write(&index).unwrap();
        let err = Manifest::read(&index).unwrap_err().to_string();
        assert!(
            err.contains(&format!("it does not list {left_out}")),
            "{left_out}: {err}"
        );
    }
    original.write(&index).unwrap();
    Manifest::read(&index).unwrap();
}
