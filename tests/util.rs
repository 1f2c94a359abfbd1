//! Helpers shared by the integration tests.

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

/// The shared test data directory (`../shared`), when present. Tests that need it print a loud
/// SKIPPED line when it is not.
#[allow(dead_code)]
pub fn shared_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared");
    dir.is_dir().then_some(dir)
}

/// `models/<rel>` of this checkout when it exists; otherwise `None` after a loud SKIPPED line
/// for `test` naming the missing path and `setup`, the script that fetches it.
pub fn model_path(rel: &str, setup: &str, test: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("models")
        .join(rel);
    if path.exists() {
        Some(path)
    } else {
        eprintln!("SKIPPED {test}: models/{rel} is absent (run {setup})");
        None
    }
}
