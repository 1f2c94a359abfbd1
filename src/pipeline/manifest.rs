//! Stage manifests: what makes a build resumable and incremental.
//!
//! Each stage's inputs (their content fingerprints) and settings are folded into a
//! [`Fingerprint`] ([`stage_fingerprint`]). When a stage finishes, `work/stages/STAGE.json`
//! records that fingerprint and the content fingerprint (SHA-256) of every output.
//! On a rerun the stage is skipped when its fingerprint is unchanged and its outputs still have
//! the recorded hashes; a changed input changes the fingerprints of exactly the stages that
//! depend on it. A stage killed half-way has no manifest (outputs are renamed into place and
//! the manifest is written last), so it reruns — the LLM stages then answer from the response
//! cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::{Fingerprint, FingerprintBuilder, write_json_atomic};
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
    /// Fingerprint of the inputs and settings ([`stage_fingerprint`]).
    pub fingerprint: Fingerprint,
    /// Output path (relative to the build directory) -> its content fingerprint
    /// ([`Fingerprint::of_path`]: the SHA-256 of a file).
    pub outputs: BTreeMap<String, Fingerprint>,
}

/// Starts the fingerprint of `stage` (its name and [`STAGE_FORMAT`]); the stage feeds its
/// settings ([`FingerprintBuilder::json`]) and its inputs' fingerprints.
pub fn stage_fingerprint(stage: &str) -> FingerprintBuilder {
    Fingerprint::builder("build stage")
        .text("stage", stage)
        .number("stage format", u64::from(STAGE_FORMAT))
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
        fingerprint: &Fingerprint,
    ) -> Result<Option<BTreeMap<String, Fingerprint>>> {
        let path = self.manifest_path(stage);
        let Ok(text) =
            crate::dataset::bounded::read_text(&path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
        else {
            return Ok(None);
        };
        let Ok(manifest) = serde_json::from_str::<StageManifest>(&text) else {
            // A manifest we cannot read is treated as absent: the stage reruns and rewrites it.
            return Ok(None);
        };
        if manifest.format != STAGE_FORMAT || manifest.fingerprint != *fingerprint {
            return Ok(None);
        }
        for (rel, hash) in &manifest.outputs {
            let output = self.root.join(rel);
            if !output.exists() || Fingerprint::of_path(&output)? != *hash {
                return Ok(None);
            }
        }
        Ok(Some(manifest.outputs))
    }

    /// Whether `stage` finished (whatever its fingerprint) and its outputs are still as it left
    /// them.
    pub fn finished(&self, stage: &str) -> Result<bool> {
        let Ok(text) = crate::dataset::bounded::read_text(
            &self.manifest_path(stage),
            crate::dataset::bounded::MAX_SIDE_FILE_BYTES,
        ) else {
            return Ok(false);
        };
        let Ok(manifest) = serde_json::from_str::<StageManifest>(&text) else {
            return Ok(false);
        };
        for (rel, hash) in &manifest.outputs {
            let output = self.root.join(rel);
            if !output.exists() || Fingerprint::of_path(&output)? != *hash {
                return Ok(false);
            }
        }
        Ok(manifest.format == STAGE_FORMAT)
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
        fingerprint: &Fingerprint,
        outputs: &[&str],
    ) -> Result<BTreeMap<String, Fingerprint>> {
        let mut hashes = BTreeMap::new();
        for rel in outputs {
            hashes.insert(
                (*rel).to_string(),
                Fingerprint::of_path(&self.root.join(rel))?,
            );
        }
        let manifest = StageManifest {
            stage: stage.to_string(),
            format: STAGE_FORMAT,
            fingerprint: *fingerprint,
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
        let h1 = Fingerprint::of_bytes(b"h1");
        let fp = stage_fingerprint("s")
            .json("k", &3)
            .fingerprint("x", &h1)
            .finish();
        assert!(book.fresh("s", &fp).unwrap().is_none());
        book.record("s", &fp, &["out.txt"]).unwrap();
        assert!(book.fresh("s", &fp).unwrap().is_some());
        let other = stage_fingerprint("s")
            .json("k", &4)
            .fingerprint("x", &h1)
            .finish();
        assert!(book.fresh("s", &other).unwrap().is_none());
        std::fs::write(dir.path().join("out.txt"), "b").unwrap();
        assert!(book.fresh("s", &fp).unwrap().is_none());
        book.invalidate("s").unwrap();
        book.invalidate("s").unwrap();
    }
}
