//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Writes `content` to `root/rel`, creating parent directories.
pub fn write(root: &Path, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, content).unwrap();
    path
}

/// Runs the `freshstack` binary with `args`.
pub fn freshstack(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Runs the `freshstack` binary with `args` in the working directory `dir`.
#[allow(dead_code)]
pub fn freshstack_in(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_freshstack"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// Runs the `freshstack` binary with `args` and asserts that it succeeded (the failure shows
/// the arguments and the error output).
pub fn run_ok(args: &[&str]) -> Output {
    let output = freshstack(args);
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Copies the directory `from` into `to` (created), recursively.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `models/NAME` of this checkout, holding its weights (`model.safetensors`). Tests that call
/// it are `#[ignore]`d where `build.rs` found no such model, so a miss here means the model went
/// away after the build: the panic names `setup`, the script that fetches it.
pub fn real_model_dir(name: &str, setup: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(name);
    assert!(
        dir.join("model.safetensors").is_file(),
        "{} is missing: run {setup}",
        dir.display()
    );
    dir
}

/// all-MiniLM-L6-v2's real weights ([`real_model_dir`]; tests gated on `has_model_minilm`).
pub fn minilm_dir() -> PathBuf {
    real_model_dir("all-MiniLM-L6-v2", "scripts/setup.sh")
}

/// The shared test data directory (`../shared`), when present. Tests that need it print a loud
/// SKIPPED line when it is not.
#[allow(dead_code)]
pub fn shared_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    dir.is_dir().then_some(dir)
}

/// `models/<rel>` of this checkout. Tests that call it are `#[ignore]`d where `build.rs` found
/// no such model; a miss here panics naming `setup`, the script that fetches it.
pub fn model_path(rel: &str, setup: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(rel);
    assert!(path.exists(), "models/{rel} is absent: run {setup}");
    path
}

/// Every file under `dir` (subdirectories included) with its bytes: a snapshot to compare
/// before and after a command that must change nothing.
pub fn files_under(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.insert(path.clone(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

/// The directory holding the llama.cpp tool `tool`, or `None` after a SKIPPED line.
pub fn llama_cpp(tool: &str, test: &str) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = std::env::var_os("FRESHSTACK_LLAMA_CPP_BIN") {
        candidates.push(dir.into());
    }
    let cache = std::env::var_os("FRESHSTACK_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/freshstack")));
    if let Some(Ok(entries)) = cache.map(|c| std::fs::read_dir(c.join("llama.cpp"))) {
        let mut versions: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("bin"))
            .collect();
        versions.sort();
        candidates.extend(versions.into_iter().rev());
    }
    match candidates.into_iter().find(|d| d.join(tool).is_file()) {
        Some(dir) => Some(dir),
        None => {
            eprintln!(
                "SKIPPED {test}: no {tool} (set FRESHSTACK_LLAMA_CPP_BIN or run \
                 scripts/setup-llama-server.sh)"
            );
            None
        }
    }
}
