//! Where a benchmark's questions and corpus come from: a local export (`queries.jsonl`,
//! `corpus.jsonl`, or Parquet) or a Hugging Face dataset read offline from the hub cache
//! (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`), laid out as
//! `datasets--ORG--NAME/snapshots/REVISION/CONFIG/SPLIT-*.parquet`. Never the network: a
//! missing cache is an error that lists every path looked for.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::document::Document;
use super::jsonl::read_jsonl;
use super::parquet::read_parquet;
use super::question::Question;
use crate::error::{Error, Result, Setting};

/// Columns a query file must have, and those read when present.
const QUERY_COLUMNS: &[&str] = &["query_id", "query_title", "query_text", "nuggets"];
const QUERY_OPTIONAL: &[&str] = &["answer_id", "answer_text", "metadata"];
/// Columns a corpus file must have, and those read when present.
const CORPUS_COLUMNS: &[&str] = &["_id", "text"];
const CORPUS_OPTIONAL: &[&str] = &["title", "metadata"];

/// A dataset as named on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DatasetSpec {
    /// A local file (`.jsonl` or `.parquet`) or directory (holding `queries.jsonl` /
    /// `corpus.jsonl`, or `*.parquet` files).
    Local(PathBuf),
    /// A Hugging Face dataset `ORG/NAME` with a config (the topic), read from the hub cache.
    Hub {
        /// `ORG/NAME`.
        repo: String,
        /// The config (subset), e.g. `langchain`; `None` until a topic is given.
        config: Option<String>,
    },
}

impl From<&str> for DatasetSpec {
    /// Reads `SPEC`: an existing path is local; otherwise `ORG/NAME[:CONFIG]` is a hub id;
    /// anything else is a local path (that will be reported missing).
    fn from(spec: &str) -> Self {
        if Path::new(spec).exists() {
            return Self::Local(PathBuf::from(spec));
        }
        let (repo, config) = match spec.split_once(':') {
            Some((repo, config)) => (repo, Some(config.to_string())),
            None => (spec, None),
        };
        let is_hub_id = repo.split('/').count() == 2
            && repo.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            });
        if is_hub_id && config.as_deref().is_none_or(|c| !c.is_empty()) {
            Self::Hub {
                repo: repo.to_string(),
                config,
            }
        } else {
            Self::Local(PathBuf::from(spec))
        }
    }
}

impl DatasetSpec {
    /// The same hub dataset with `config` (a local spec is returned unchanged).
    pub fn with_config(&self, config: &str) -> Self {
        match self {
            Self::Hub { repo, .. } => Self::Hub {
                repo: repo.clone(),
                config: Some(config.to_string()),
            },
            other => other.clone(),
        }
    }

    /// A short name for tables: the hub config, or the local directory's name.
    pub fn topic_name(&self) -> String {
        match self {
            Self::Hub { config, repo } => config.clone().unwrap_or_else(|| repo.clone()),
            Self::Local(path) => {
                let dir = if path.is_dir() {
                    Some(path.as_path())
                } else {
                    path.parent()
                };
                dir.and_then(|d| d.file_name())
                    .or_else(|| path.file_stem())
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| path.display().to_string())
            }
        }
    }
}

impl std::str::FromStr for DatasetSpec {
    type Err = std::convert::Infallible;

    /// As `DatasetSpec::from`: every text names a dataset (a missing local one is reported
    /// when it is read).
    fn from_str(spec: &str) -> std::result::Result<Self, Self::Err> {
        Ok(Self::from(spec))
    }
}

impl std::fmt::Display for DatasetSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Local(path) => write!(f, "{}", path.display()),
            Self::Hub {
                repo,
                config: Some(config),
            } => write!(f, "{repo}:{config}"),
            Self::Hub { repo, config: None } => write!(f, "{repo}"),
        }
    }
}

/// The hub cache directory from the environment: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
/// `$HOME/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("HF_HUB_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(home) = var("HF_HOME") {
        return PathBuf::from(home).join("hub");
    }
    let home = var("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache").join("huggingface").join("hub")
}

/// Which half of a benchmark a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatasetPart {
    /// Questions with nuggets (`queries.jsonl`, hub split `test`).
    Queries,
    /// Documents (`corpus.jsonl`, hub split `train`).
    Corpus,
}

impl DatasetPart {
    fn file_name(self) -> &'static str {
        match self {
            Self::Queries => "queries.jsonl",
            Self::Corpus => "corpus.jsonl",
        }
    }

    /// The hub split FreshStack publishes this part under.
    pub fn default_split(self) -> &'static str {
        match self {
            Self::Queries => "test",
            Self::Corpus => "train",
        }
    }
}

/// The files of `spec`'s `part`, in name order. Hub datasets are looked up in `hub_cache`
/// under `split`; nothing is downloaded.
pub fn resolve_files(
    spec: &DatasetSpec,
    part: DatasetPart,
    split: &str,
    hub_cache: &Path,
) -> Result<Vec<PathBuf>> {
    match spec {
        DatasetSpec::Local(path) => resolve_local(path, part),
        DatasetSpec::Hub { repo, config } => {
            let config = config.as_deref().ok_or_else(|| {
                Error::invalid(
                    Setting::Dataset,
                    format!("{repo}: name a config (topic), e.g. {repo}:langchain, or give topics"),
                )
            })?;
            resolve_hub(repo, config, split, hub_cache)
        }
    }
}

fn resolve_local(path: &Path, part: DatasetPart) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    if !path.is_dir() {
        return Err(Error::dataset(
            path,
            "no such file or directory, and not a hub id ORG/NAME:CONFIG",
        ));
    }
    let jsonl = path.join(part.file_name());
    if jsonl.is_file() {
        return Ok(vec![jsonl]);
    }
    let parquet = sorted_files(path, |name| name.ends_with(".parquet"))?;
    if parquet.is_empty() {
        return Err(Error::dataset(
            path,
            format!("has neither {} nor *.parquet files", part.file_name()),
        ));
    }
    Ok(parquet)
}

fn sorted_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if keep(&name) && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// `REPO_DIR/snapshots/*` in the order to try: the revision `refs/main` names first, then the
/// others by name.
fn snapshots(repo_dir: &Path) -> Vec<PathBuf> {
    let dir = repo_dir.join("snapshots");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    all.sort();
    // One line: a file past that bound (or not a file) is no ref, as a missing one.
    if let Ok(main) = super::bounded::read_regular_text(
        &repo_dir.join("refs").join("main"),
        super::bounded::MAX_REF_BYTES,
    ) {
        let main = dir.join(main.trim());
        if let Some(pos) = all.iter().position(|p| *p == main) {
            let first = all.remove(pos);
            all.insert(0, first);
        }
    }
    all
}

fn resolve_hub(repo: &str, config: &str, split: &str, hub_cache: &Path) -> Result<Vec<PathBuf>> {
    let repo_dir = hub_cache.join(format!("datasets--{}", repo.replace('/', "--")));
    let snapshots = snapshots(&repo_dir);
    let mut looked_for = Vec::new();
    let mut configs_seen = std::collections::BTreeSet::new();
    for snapshot in &snapshots {
        let config_dir = snapshot.join(config);
        // `CONFIG/SPLIT-00000-of-00001.parquet` (datasets' push_to_hub) or `CONFIG/SPLIT/*.parquet`.
        let prefix = format!("{split}-");
        let flat = if config_dir.is_dir() {
            sorted_files(&config_dir, |n| {
                (n.starts_with(&prefix) || n == format!("{split}.parquet"))
                    && n.ends_with(".parquet")
            })?
        } else {
            Vec::new()
        };
        looked_for.push(config_dir.join(format!("{split}-*.parquet")));
        if !flat.is_empty() {
            return Ok(flat);
        }
        let nested_dir = config_dir.join(split);
        let nested = if nested_dir.is_dir() {
            sorted_files(&nested_dir, |n| n.ends_with(".parquet"))?
        } else {
            Vec::new()
        };
        looked_for.push(nested_dir.join("*.parquet"));
        if !nested.is_empty() {
            return Ok(nested);
        }
        if let Ok(entries) = std::fs::read_dir(snapshot) {
            for entry in entries.flatten() {
                if entry.path().is_dir() {
                    configs_seen.insert(entry.file_name().to_string_lossy().into_owned());
                }
            }
        }
    }
    let looked: Vec<String> = if looked_for.is_empty() {
        vec![
            repo_dir
                .join("snapshots/*")
                .join(config)
                .join(format!("{split}-*.parquet"))
                .display()
                .to_string(),
        ]
    } else {
        looked_for.iter().map(|p| p.display().to_string()).collect()
    };
    let mut message = format!(
        "{repo}:{config} split {split:?} is not in the Hugging Face cache (offline; nothing is \
         downloaded); looked for: {}",
        looked.join(", ")
    );
    configs_seen.remove(config);
    if !configs_seen.is_empty() {
        let seen: Vec<&str> = configs_seen.iter().map(String::as_str).collect();
        message.push_str(&format!("; cached configs: {}", seen.join(", ")));
    }
    message.push_str(
        "; fetch it on a connected machine (huggingface-cli download --repo-type dataset REPO) \
         and copy the hub cache here, or set HF_HOME / HF_HUB_CACHE",
    );
    Err(Error::dataset(&repo_dir, message))
}

fn read_rows<T: DeserializeOwned>(
    files: &[PathBuf],
    required: &[&str],
    optional: &[&str],
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for file in files {
        let is_parquet = file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
        if is_parquet {
            out.extend(read_parquet::<T>(file, required, optional)?);
        } else {
            out.extend(read_jsonl::<T>(file)?);
        }
    }
    Ok(out)
}

/// Reads questions (with nuggets) from `files` (JSONL or Parquet). Duplicate question ids and
/// a question without nuggets are errors naming the file.
pub fn load_queries(files: &[PathBuf]) -> Result<Vec<Question>> {
    let queries: Vec<Question> = read_rows(files, QUERY_COLUMNS, QUERY_OPTIONAL)?;
    let where_ = files.first().cloned().unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for q in &queries {
        if q.query_id.is_empty() {
            return Err(Error::dataset(&where_, "a question has an empty query_id"));
        }
        if !seen.insert(q.query_id.as_str()) {
            return Err(Error::dataset(
                &where_,
                format!("duplicate query_id {:?}", q.query_id),
            ));
        }
    }
    if queries.is_empty() {
        return Err(Error::dataset(&where_, "no questions"));
    }
    Ok(queries)
}

/// Reads documents from `files` (JSONL or Parquet). Duplicate or empty ids are errors.
pub fn load_corpus(files: &[PathBuf]) -> Result<Vec<Document>> {
    let docs: Vec<Document> = read_rows(files, CORPUS_COLUMNS, CORPUS_OPTIONAL)?;
    let where_ = files.first().cloned().unwrap_or_default();
    let mut seen = std::collections::HashSet::new();
    for d in &docs {
        if d.id.is_empty() || d.id.contains(['\n', '\r']) {
            return Err(Error::dataset(
                &where_,
                format!("bad document id {:?}", d.id),
            ));
        }
        if !seen.insert(d.id.as_str()) {
            return Err(Error::dataset(
                &where_,
                format!("duplicate document id {:?}", d.id),
            ));
        }
    }
    if docs.is_empty() {
        return Err(Error::dataset(&where_, "no documents"));
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse() {
        assert_eq!(
            DatasetSpec::from("freshstack/queries-oct-2024:langchain"),
            DatasetSpec::Hub {
                repo: "freshstack/queries-oct-2024".into(),
                config: Some("langchain".into())
            }
        );
        assert_eq!(
            DatasetSpec::from("freshstack/corpus-oct-2024"),
            DatasetSpec::Hub {
                repo: "freshstack/corpus-oct-2024".into(),
                config: None
            }
        );
        assert!(matches!(
            DatasetSpec::from("/no/such/dir/x"),
            DatasetSpec::Local(_)
        ));
        assert!(matches!(DatasetSpec::from("a/b:"), DatasetSpec::Local(_)));
        let spec = DatasetSpec::from("o/n").with_config("yolo");
        assert_eq!(spec.to_string(), "o/n:yolo");
        assert_eq!(spec.topic_name(), "yolo");
    }

    #[test]
    fn missing_cache_lists_paths() {
        let dir = tempfile::tempdir().unwrap();
        let spec = DatasetSpec::from("freshstack/queries-x:godot");
        let err = resolve_files(&spec, DatasetPart::Queries, "test", dir.path())
            .unwrap_err()
            .to_string();
        assert!(err.contains("datasets--freshstack--queries-x"), "{err}");
        assert!(err.contains("godot/test-*.parquet"), "{err}");
    }
}
