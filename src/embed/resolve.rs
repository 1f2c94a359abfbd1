//! Model resolution, offline only: a local directory, or a model id looked up in the Hugging Face
//! cache layout (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`, then
//! `models--org--name/snapshots/<rev>/` with `<rev>` read from `refs/main`). Nothing is ever
//! downloaded: a model that is not on disk is an error that says where we looked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The files of one model on disk.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// What the user asked for (directory or id), for messages.
    pub name: String,
    /// The Hugging Face id when resolved through the cache.
    pub id: Option<String>,
    /// The model directory (snapshot).
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// The safetensors weight files (one, or the shards named by the index), sorted.
    pub weights: Vec<PathBuf>,
    /// sentence-transformers `1_Pooling/config.json`, when present.
    pub pooling_config: Option<PathBuf>,
    /// A GGUF model file (`--model FILE.gguf`): then `config`, `tokenizer` and `weights` all
    /// name that one file, which holds all three.
    pub gguf: Option<PathBuf>,
}

/// Finds `name`: an existing directory or `.gguf` file, else a Hugging Face id in the local
/// cache.
pub fn resolve_model(name: &str) -> Result<ModelFiles> {
    let path = Path::new(name);
    if path.is_dir() {
        return model_files(name, None, path);
    }
    if path.is_file() {
        let is_gguf = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("gguf"));
        if !is_gguf {
            return Err(Error::model(
                name,
                "is a file: a model is a directory or a .gguf file",
            ));
        }
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        return Ok(ModelFiles {
            name: name.to_string(),
            id: None,
            dir,
            config: path.to_path_buf(),
            tokenizer: path.to_path_buf(),
            weights: vec![path.to_path_buf()],
            pooling_config: None,
            gguf: Some(path.to_path_buf()),
        });
    }
    let Some((org, repo)) = name.split_once('/') else {
        return Err(Error::model(
            name,
            "not a directory, and not a Hugging Face id of the form org/name",
        ));
    };
    let (repo, rev) = match repo.split_once('@') {
        Some((r, rev)) => (r, Some(rev)),
        None => (repo, None),
    };
    let cache = hub_cache_dir()
        .ok_or_else(|| Error::model(name, "no Hugging Face cache: set HF_HOME or HF_HUB_CACHE"))?;
    let root = cache.join(format!("models--{org}--{repo}"));
    if !root.is_dir() {
        return Err(Error::model(
            name,
            format!(
                "not a directory, and not in the Hugging Face cache ({} is missing; models are never downloaded)",
                root.display()
            ),
        ));
    }
    let rev = match rev {
        Some(rev) => rev.to_string(),
        None => snapshot_revision(&root).map_err(|m| Error::model(name, m))?,
    };
    let dir = root.join("snapshots").join(&rev);
    if !dir.is_dir() {
        return Err(Error::model(
            name,
            format!("snapshot {} is missing", dir.display()),
        ));
    }
    model_files(name, Some(format!("{org}/{repo}")), &dir)
}

/// The hub cache directory from the environment, as huggingface_hub computes it.
fn hub_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("HF_HUB_CACHE") {
        return Some(PathBuf::from(dir));
    }
    if let Some(home) = std::env::var_os("HF_HOME") {
        return Some(PathBuf::from(home).join("hub"));
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("huggingface").join("hub"));
    }
    std::env::var_os("HOME").map(|h| {
        PathBuf::from(h)
            .join(".cache")
            .join("huggingface")
            .join("hub")
    })
}

/// `refs/main`, else the only snapshot.
fn snapshot_revision(root: &Path) -> std::result::Result<String, String> {
    // One line: a file past that bound (or not a file) is no ref, as a missing one.
    if let Ok(rev) = crate::dataset::bounded::read_regular_text(
        &root.join("refs").join("main"),
        crate::dataset::bounded::MAX_REF_BYTES,
    ) {
        let rev = rev.trim();
        if !rev.is_empty() {
            return Ok(rev.to_string());
        }
    }
    let snapshots: Vec<String> = std::fs::read_dir(root.join("snapshots"))
        .map_err(|e| format!("{}: {e}", root.join("snapshots").display()))?
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().is_dir())
        .filter_map(|entry| entry.file_name().into_string().ok())
        .collect();
    match snapshots.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(format!("no snapshot under {}", root.display())),
        _ => Err(format!(
            "no refs/main and {} snapshots under {}: name one as org/name@REVISION",
            snapshots.len(),
            root.display()
        )),
    }
}

#[derive(Deserialize)]
struct ShardIndex {
    weight_map: std::collections::BTreeMap<String, String>,
}

/// Checks that `dir` holds a loadable model and lists its files.
fn model_files(name: &str, id: Option<String>, dir: &Path) -> Result<ModelFiles> {
    let need = |file: &str| -> Result<PathBuf> {
        let path = dir.join(file);
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::model(name, format!("{} is missing", path.display())))
        }
    };
    let config = need("config.json")?;
    let tokenizer = need("tokenizer.json")?;
    let single = dir.join("model.safetensors");
    let index = dir.join("model.safetensors.index.json");
    let weights = if single.is_file() {
        vec![single]
    } else if index.is_file() {
        let text = crate::dataset::bounded::read_text(
            &index,
            crate::dataset::bounded::MAX_SIDE_FILE_BYTES,
        )
        .map_err(|e| Error::io(&index, e))?;
        let parsed: ShardIndex = serde_json::from_str(&text)
            .map_err(|e| Error::model(name, format!("{}: {e}", index.display())))?;
        let shards: BTreeSet<&String> = parsed.weight_map.values().collect();
        if shards.is_empty() {
            return Err(Error::model(
                name,
                format!("{} names no shard", index.display()),
            ));
        }
        shards
            .into_iter()
            .map(|shard| need(shard))
            .collect::<Result<Vec<_>>>()?
    } else {
        return Err(Error::model(
            name,
            format!(
                "no weights in {}: expected model.safetensors or model.safetensors.index.json",
                dir.display()
            ),
        ));
    };
    let pooling = dir.join("1_Pooling").join("config.json");
    Ok(ModelFiles {
        name: name.to_string(),
        id,
        dir: dir.to_path_buf(),
        config,
        tokenizer,
        weights,
        pooling_config: pooling.is_file().then_some(pooling),
        gguf: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn local_directory_with_sharded_weights() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("config.json"), "{}");
        touch(&dir.path().join("tokenizer.json"), "{}");
        touch(
            &dir.path().join("model.safetensors.index.json"),
            r#"{"metadata":{},"weight_map":{"a":"m-2.safetensors","b":"m-1.safetensors","c":"m-2.safetensors"}}"#,
        );
        let name = dir.path().to_str().unwrap();
        let err = resolve_model(name).unwrap_err().to_string();
        assert!(err.contains("m-1.safetensors is missing"), "{err}");
        touch(&dir.path().join("m-1.safetensors"), "");
        touch(&dir.path().join("m-2.safetensors"), "");
        let files = resolve_model(name).unwrap();
        let shards: Vec<_> = files
            .weights
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(shards, ["m-1.safetensors", "m-2.safetensors"]);
        assert!(files.pooling_config.is_none());
    }

    #[test]
    fn missing_weights_and_unknown_names_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        touch(&dir.path().join("config.json"), "{}");
        touch(&dir.path().join("tokenizer.json"), "{}");
        let err = resolve_model(dir.path().to_str().unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("no weights"), "{err}");
        let err = resolve_model("not-a-dir-or-id").unwrap_err().to_string();
        assert!(err.contains("org/name"), "{err}");
    }

    #[test]
    fn snapshot_revision_prefers_refs_main() {
        let cache = tempfile::tempdir().unwrap();
        let root = cache.path().join("models--org--m");
        touch(&root.join("snapshots/abc/config.json"), "{}");
        assert_eq!(snapshot_revision(&root).unwrap(), "abc");
        touch(&root.join("snapshots/def/config.json"), "{}");
        assert!(
            snapshot_revision(&root)
                .unwrap_err()
                .contains("2 snapshots")
        );
        touch(&root.join("refs/main"), "def\n");
        assert_eq!(snapshot_revision(&root).unwrap(), "def");
    }
}
