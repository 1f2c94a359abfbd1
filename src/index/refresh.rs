//! Incremental refresh ("fresh"): remove the documents of some repositories and add the
//! documents of a new corpus file (e.g. a re-chunked repository) without rebuilding the index.
//!
//! Removed documents are deleted from tantivy and their ordinals become empty lines of
//! `ids.txt` (searches skip them, BM25 and dense alike); added documents get new ordinals at the
//! end. Dense models keep every stored row and append the added documents' vectors, computed by
//! a [`DocumentModel`] per model (the search layer loads the recorded model; models given as
//! precomputed `--vectors` have none, so adding to them is refused); their HNSW graph is rebuilt
//! over the new matrix. Only the added documents are encoded. The index is copied to a temporary
//! sibling, changed there and renamed into place, so a failed refresh leaves the old index.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use rustc_hash::FxHashSet;

use crate::dataset::tempfiles::{self, StagingDir};
use crate::dataset::{Document, Fnv1a64, VectorDtype, VectorMatrix};
use crate::error::{Error, Result, Setting};
use crate::index::bm25::Bm25Writer;
use crate::index::docids::DocIds;
use crate::index::layout;
use crate::index::manifest::Manifest;
use crate::index::write::{DocumentModel, StoredModel, checked_vectors, install, read_corpus};
use crate::progress::Progress;

/// What to change.
#[derive(Debug, Clone, Default)]
pub struct RefreshConfig {
    /// Documents to add (JSONL corpus); their ids must not be live in the index.
    pub add: Option<PathBuf>,
    /// Repositories (`OWNER/NAME`) whose documents (ids starting `OWNER/NAME/`) are removed
    /// before adding.
    pub remove_repos: Vec<String>,
}

/// Checks a repository named for removal: exactly `OWNER/NAME`, two non-empty segments that
/// are not `.` or `..`, so that it can never name a whole owner, a folder inside a repository
/// or a path outside one.
fn check_repo_name(repo: &str) -> Result<()> {
    let segments: Vec<&str> = repo.split('/').collect();
    let ok = segments.len() == 2
        && segments
            .iter()
            .all(|s| !s.is_empty() && *s != "." && *s != ".." && !s.contains(char::is_whitespace));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(
            Setting::RemovedRepository,
            format!("{repo:?} is not a repository name (expected OWNER/NAME)"),
        ))
    }
}

/// What a refresh changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshSummary {
    /// Documents removed.
    pub removed: usize,
    /// Documents added.
    pub added: usize,
    /// Live documents now.
    pub num_live: usize,
}

/// Applies `config` to the index in `dir` (an index without dense models, or one whose dense
/// models gain no documents; see [`refresh_index_with_encoders`]).
pub fn refresh_index(
    config: &RefreshConfig,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<RefreshSummary> {
    refresh_index_with_encoders(config, &[], dir, progress)
}

/// Applies `config` to the index in `dir`; `encoders` embed the added documents for the dense
/// models of the same names (every dense model needs one when documents are added).
pub fn refresh_index_with_encoders(
    config: &RefreshConfig,
    encoders: &[&dyn DocumentModel],
    dir: &Path,
    progress: &dyn Progress,
) -> Result<RefreshSummary> {
    for repo in &config.remove_repos {
        check_repo_name(repo)?;
    }
    let _lock = crate::dataset::OutputLock::beside(dir)?;
    let mut manifest = Manifest::read(dir)?;
    let added_docs = match &config.add {
        Some(path) => read_corpus(path)?,
        None => Vec::new(),
    };
    if !added_docs.is_empty()
        && let Some(model) = manifest
            .dense
            .iter()
            .find(|d| !encoders.iter().any(|e| e.name() == d.name))
    {
        return Err(Error::index(
            dir,
            format!(
                "dense model {:?} has no encoder for the added documents (its vectors were \
                 precomputed); rebuild the index with `freshstack index`",
                model.name
            ),
        ));
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let staging = StagingDir::create(&parent)?;
    let tmp = staging.path();
    progress.begin("copying index", None);
    copy_dir(dir, tmp)?;
    progress.finish();

    let mut ids = DocIds::read(&tmp.join(layout::IDS_FILE))?;
    let old_rows = ids.len();
    let mut writer = match manifest.bm25 {
        Some(settings) => Some(Bm25Writer::open(&tmp.join(layout::BM25_DIR), &settings)?),
        None => None,
    };
    let mut removed = 0;
    for repo in &config.remove_repos {
        let prefix = format!("{repo}/");
        let ords: Vec<u32> = (0..ids.len() as u32)
            .filter(|&ord| ids.id(ord).starts_with(&prefix))
            .collect();
        if ords.is_empty() {
            return Err(Error::invalid(
                Setting::RemovedRepository,
                format!("{repo:?} has no document in the index {}", dir.display()),
            ));
        }
        for ord in ords {
            if let Some(writer) = writer.as_mut() {
                writer.delete(ord);
            }
            ids.remove(ord);
            removed += 1;
        }
    }
    let live: FxHashSet<&str> = ids
        .ids()
        .iter()
        .filter(|id| !id.is_empty())
        .map(String::as_str)
        .collect();
    if let Some(doc) = added_docs.iter().find(|d| live.contains(d.id.as_str())) {
        return Err(Error::invalid(
            Setting::Refresh,
            format!(
                "document {:?} is already in the index; remove its repository in this refresh \
                 first",
                doc.id
            ),
        ));
    }
    progress.begin("bm25 refresh", Some(added_docs.len() as u64));
    for doc in &added_docs {
        let ord = ids.push(doc.id.clone());
        if let Some(writer) = writer.as_mut() {
            writer.add(ord, doc)?;
        }
    }
    progress.finish();
    if let Some(writer) = writer {
        writer.finish(progress)?;
    }
    let ids = ids.reindexed()?;
    ids.write(&tmp.join(layout::IDS_FILE))?;

    manifest.corpus.num_documents = ids.len();
    if let Some(path) = &config.add {
        manifest.corpus.path = format!("{} + {}", manifest.corpus.path, path.display());
        manifest.corpus.fnv1a64 =
            format!("{}+{}", manifest.corpus.fnv1a64, Fnv1a64::of_file(path)?);
    }
    if !added_docs.is_empty() {
        let texts: Vec<std::borrow::Cow<'_, str>> =
            added_docs.iter().map(Document::model_text).collect();
        let texts: Vec<&str> = texts.iter().map(|t| t.as_ref()).collect();
        for info in &manifest.dense {
            let Some(encoder) = encoders.iter().find(|e| e.name() == info.name) else {
                continue;
            };
            let encoded = checked_vectors(*encoder, &texts, progress)?;
            if encoded.dim != info.dim {
                return Err(Error::index(
                    dir,
                    format!(
                        "dense model {:?}: the encoder gives dimension {}, the index has {}",
                        info.name, encoded.dim, info.dim
                    ),
                ));
            }
            let model_dir = dir.join(layout::DENSE_DIR).join(&info.name);
            let old = VectorMatrix::open(&model_dir.join(layout::VECTORS_FILE))?;
            if old.rows() != old_rows || old.dim() != info.dim {
                return Err(Error::index(
                    dir,
                    format!(
                        "dense model {:?}: {} rows of dimension {} for {old_rows} documents",
                        info.name,
                        old.rows(),
                        old.dim()
                    ),
                ));
            }
            // The old graph's dump is replaced by one over the new matrix.
            let staged_graph = tmp
                .join(layout::DENSE_DIR)
                .join(&info.name)
                .join(layout::HNSW_DIR);
            if staged_graph.exists() {
                std::fs::remove_dir_all(&staged_graph).map_err(|e| Error::io(&staged_graph, e))?;
            }
            let dim = info.dim;
            let stored = StoredModel {
                name: &info.name,
                rows: ids.len(),
                dim,
                dtype: VectorDtype::from_str(&info.dtype)?,
            };
            stored.write(
                tmp,
                &manifest.corpus.fnv1a64,
                info.hnsw.as_ref(),
                progress,
                |i, row| {
                    if i < old_rows {
                        old.row_into(i, row);
                    } else {
                        let at = (i - old_rows) * dim;
                        row.copy_from_slice(&encoded.data[at..at + dim]);
                    }
                },
            )?;
        }
    }
    manifest.record_files(tmp)?;
    manifest.write(tmp)?;
    install(staging, dir)?;
    Ok(RefreshSummary {
        removed,
        added: added_docs.len(),
        num_live: ids.num_live(),
    })
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    tempfiles::create_dir_inside(to)?;
    for entry in std::fs::read_dir(from).map_err(|e| Error::io(from, e))? {
        let entry = entry.map_err(|e| Error::io(from, e))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        let name = entry.file_name();
        if name.to_string_lossy().ends_with(".lock") {
            continue;
        }
        if entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
            copy_dir(&path, &target)?;
        } else {
            std::fs::copy(&path, &target).map_err(|e| Error::io(&path, e))?;
        }
    }
    Ok(())
}
