//! Stage manifests: what makes a build resumable and incremental.
//!
//! Each stage's inputs (file hashes) and settings are folded into a *fingerprint*. When a stage
//! finishes, `work/stages/STAGE.json` records the fingerprint and the SHA-256 of every output.
//! On a rerun the stage is skipped when its fingerprint is unchanged and its outputs still have
//! the recorded hashes; a changed input changes the fingerprints of exactly the stages that
//! depend on it. A stage killed half-way has no manifest (outputs are renamed into place and
//! the manifest is written last), so it reruns — the LLM stages then answer from the response
//! cache.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::dataset::write_json_atomic;
use crate::error::{Error, Result};

/// Version of the stage logic; bumping it reruns every stage of old builds.
pub const STAGE_FORMAT: u32 = 1;

/// The record a finished stage leaves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageManifest {
    /// Stage name.
    pub stage: String,
    /// [`STAGE_FORMAT`] when written.
    pub format: u32,
    /// Hash of the inputs and settings.
    pub fingerprint: String,
    /// Output path (relative to the build directory) -> SHA-256.
    pub outputs: BTreeMap<String, String>,
}

/// Folds named parts into a fingerprint.
#[derive(Debug, Default)]
pub struct Fingerprint {
    parts: BTreeMap<String, String>,
}

impl Fingerprint {
    /// Starts an empty fingerprint.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a setting (any serialisable value).
    pub fn setting<T: Serialize>(mut self, name: &str, value: &T) -> Self {
        let text = serde_json::to_string(value).unwrap_or_else(|e| format!("<{e}>"));
        self.parts.insert(name.to_string(), text);
        self
    }

    /// Adds an input hash.
    pub fn input(mut self, name: &str, hash: &str) -> Self {
        self.parts.insert(format!("input:{name}"), hash.to_string());
        self
    }

    /// The hex digest.
    pub fn finish(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(STAGE_FORMAT.to_le_bytes());
        for (name, value) in &self.parts {
            hasher.update((name.len() as u64).to_le_bytes());
            hasher.update(name.as_bytes());
            hasher.update((value.len() as u64).to_le_bytes());
            hasher.update(value.as_bytes());
        }
        hex(&hasher.finalize())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// SHA-256 of a file's bytes.
pub fn hash_file(path: &Path) -> Result<String> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

/// SHA-256 over every file under a directory (relative paths and contents, sorted).
pub fn hash_dir(dir: &Path) -> Result<String> {
    let mut files = Vec::new();
    collect_files(dir, dir, &mut files)?;
    files.sort();
    let mut hasher = Sha256::new();
    for rel in files {
        let hash = hash_file(&dir.join(&rel))?;
        hasher.update(rel.to_string_lossy().as_bytes());
        hasher.update([0]);
        hasher.update(hash.as_bytes());
    }
    Ok(hex(&hasher.finalize()))
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            collect_files(root, &path, out)?;
        } else if kind.is_file() {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// SHA-256 of a file or of a directory tree.
pub fn hash_path(path: &Path) -> Result<String> {
    if path.is_dir() {
        hash_dir(path)
    } else {
        hash_file(path)
    }
}

/// The stage manifests of one build directory.
#[derive(Debug, Clone)]
pub struct StageBook {
    root: PathBuf,
}

impl StageBook {
    /// Manifests live in `root/work/stages/`; output paths are relative to `root`.
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_path_buf(),
        }
    }

    fn manifest_path(&self, stage: &str) -> PathBuf {
        self.root
            .join("work")
            .join("stages")
            .join(format!("{stage}.json"))
    }

    /// The recorded output hashes when `stage` finished with `fingerprint` and every output is
    /// still as it left it; `None` means the stage must run.
    pub fn fresh(
        &self,
        stage: &str,
        fingerprint: &str,
    ) -> Result<Option<BTreeMap<String, String>>> {
        let path = self.manifest_path(stage);
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(None);
        };
        let Ok(manifest) = serde_json::from_str::<StageManifest>(&text) else {
            // A manifest we cannot read is treated as absent: the stage reruns and rewrites it.
            return Ok(None);
        };
        if manifest.format != STAGE_FORMAT || manifest.fingerprint != fingerprint {
            return Ok(None);
        }
        for (rel, hash) in &manifest.outputs {
            let output = self.root.join(rel);
            if !output.exists() || hash_path(&output)? != *hash {
                return Ok(None);
            }
        }
        Ok(Some(manifest.outputs))
    }

    /// Forgets a stage (before it reruns), so a kill mid-stage never leaves a stale manifest.
    pub fn invalidate(&self, stage: &str) -> Result<()> {
        let path = self.manifest_path(stage);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&path, e)),
        }
    }

    /// Records a finished stage: hashes its outputs (paths relative to the build root).
    pub fn record(
        &self,
        stage: &str,
        fingerprint: &str,
        outputs: &[&str],
    ) -> Result<BTreeMap<String, String>> {
        let mut hashes = BTreeMap::new();
        for rel in outputs {
            hashes.insert((*rel).to_string(), hash_path(&self.root.join(rel))?);
        }
        let manifest = StageManifest {
            stage: stage.to_string(),
            format: STAGE_FORMAT,
            fingerprint: fingerprint.to_string(),
            outputs: hashes.clone(),
        };
        write_json_atomic(self.manifest_path(stage), &manifest)?;
        Ok(hashes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_is_fresh_until_an_input_or_output_changes() {
        let dir = tempfile::tempdir().unwrap();
        let book = StageBook::new(dir.path());
        std::fs::write(dir.path().join("out.txt"), "a").unwrap();
        let fp = Fingerprint::new()
            .setting("k", &3)
            .input("x", "h1")
            .finish();
        assert!(book.fresh("s", &fp).unwrap().is_none());
        book.record("s", &fp, &["out.txt"]).unwrap();
        assert!(book.fresh("s", &fp).unwrap().is_some());
        let other = Fingerprint::new()
            .setting("k", &4)
            .input("x", "h1")
            .finish();
        assert!(book.fresh("s", &other).unwrap().is_none());
        std::fs::write(dir.path().join("out.txt"), "b").unwrap();
        assert!(book.fresh("s", &fp).unwrap().is_none());
        book.invalidate("s").unwrap();
        book.invalidate("s").unwrap();
    }
}
