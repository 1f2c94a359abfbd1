//! Incremental refresh ("fresh"): remove the documents of some repositories and add the
//! documents of a new corpus file (e.g. a re-chunked repository) without rebuilding the index.
//!
//! Removed documents are deleted from tantivy and their ordinals become empty lines of
//! `ids.txt`; added documents get new ordinals at the end. The index is copied to a temporary
//! sibling, changed there and renamed into place, so a failed refresh leaves the old index.
//! Dense models cannot be refreshed yet (their vectors would need the new documents' vectors):
//! such an index is refused with an error that says to rebuild.

use std::path::{Path, PathBuf};

use rustc_hash::FxHashSet;

use crate::error::{Error, Result};
use crate::index::bm25::Bm25Writer;
use crate::index::build::{install, read_corpus};
use crate::index::docids::DocIds;
use crate::index::layout;
use crate::index::manifest::{Manifest, fnv1a64_file};
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

/// Applies `config` to the index in `dir`.
pub fn refresh_index(
    config: &RefreshConfig,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<RefreshSummary> {
    let mut manifest = Manifest::read(dir)?;
    if !manifest.dense.is_empty() {
        return Err(Error::index(
            dir,
            "has dense models, which cannot be refreshed yet; rebuild it with `freshstack index`",
        ));
    }
    let settings = manifest
        .bm25
        .ok_or_else(|| Error::index(dir, "has no BM25 index to refresh"))?;
    let added_docs = match &config.add {
        Some(path) => read_corpus(path)?,
        None => Vec::new(),
    };
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let staging = tempfile::Builder::new()
        .prefix(".freshstack-index.")
        .tempdir_in(&parent)
        .map_err(|e| Error::io(&parent, e))?;
    let tmp = staging.path();
    progress.begin("copying index", None);
    copy_dir(dir, tmp)?;
    progress.finish();

    let mut ids = DocIds::read(&tmp.join(layout::IDS_FILE))?;
    let mut writer = Bm25Writer::open(&tmp.join(layout::BM25_DIR), &settings)?;
    let mut removed = 0;
    for repo in &config.remove_repos {
        let prefix = format!("{}/", repo.trim_end_matches('/'));
        let ords: Vec<u32> = (0..ids.len() as u32)
            .filter(|&ord| ids.id(ord).starts_with(&prefix))
            .collect();
        for ord in ords {
            writer.delete(ord);
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
            "refresh",
            format!(
                "document {:?} is already in the index; remove its repository first (--remove-repo)",
                doc.id
            ),
        ));
    }
    progress.begin("bm25 refresh", Some(added_docs.len() as u64));
    for doc in &added_docs {
        let ord = ids.push(doc.id.clone());
        writer.add(ord, doc)?;
    }
    progress.finish();
    writer.finish(progress)?;
    let ids = ids.reindexed()?;
    ids.write(&tmp.join(layout::IDS_FILE))?;

    manifest.corpus.num_documents = ids.len();
    if let Some(path) = &config.add {
        manifest.corpus.path = format!("{} + {}", manifest.corpus.path, path.display());
        manifest.corpus.fnv1a64 = format!("{}+{}", manifest.corpus.fnv1a64, fnv1a64_file(path)?);
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
    std::fs::create_dir_all(to).map_err(|e| Error::io(to, e))?;
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
