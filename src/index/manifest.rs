//! The index manifest: `DIR/manifest.json`, written atomically last, so a directory with a
//! manifest is a complete index. It records the format version, the corpus it was built from
//! (path, size, hash, document count), the BM25 settings, each dense model, and the size of every
//! file, which [`Manifest::read`] checks so a truncated or half-copied index is an error rather
//! than a panic deep inside a reader.

use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dataset::write_json_atomic;
use crate::error::{Error, Result};
use crate::index::bm25::Bm25Settings;

/// The on-disk format this build writes and reads. Bump it on any incompatible change.
pub const FORMAT_VERSION: u32 = 1;

/// The manifest's file name inside an index directory.
pub const MANIFEST_FILE: &str = "manifest.json";

/// Everything needed to open (and trust) an index directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// `freshstack <version>` that wrote the index.
    pub created_by: String,
    /// The corpus the index was built from.
    pub corpus: CorpusInfo,
    /// BM25 settings, when the index has a BM25 part.
    pub bm25: Option<Bm25Settings>,
    /// Dense models, in name order.
    pub dense: Vec<DenseInfo>,
    /// Every file of the index except the manifest and the HNSW cache, with its size.
    pub files: Vec<FileInfo>,
}

/// Identity of the corpus an index was built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorpusInfo {
    /// The corpus path as given at build time (informational).
    pub path: String,
    /// FNV-1a 64 of the corpus file's bytes, hex: detects a rebuilt corpus.
    pub fnv1a64: String,
    /// Documents indexed.
    pub num_documents: usize,
}

/// One dense model's vectors (and optional HNSW graph).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DenseInfo {
    /// The retriever name (`dense:NAME`).
    pub name: String,
    /// Vector dimension.
    pub dim: usize,
    /// Storage type of the matrix: `f16` or `f32`.
    pub dtype: String,
    /// Where the vectors came from (a `.npy` path or a model id).
    pub source: String,
    /// HNSW parameters, when a graph is kept for this model.
    pub hnsw: Option<HnswSettings>,
    /// The encoder that made the vectors, when the index encoded the corpus itself: what a
    /// search needs to load the same model and encode queries alike. `None` for precomputed
    /// vectors (`--vectors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<DenseModelRef>,
}

/// The encoder behind a dense model, as recorded at build time. Plain strings (no `embed`
/// types: `index` does not import `embed`); the search layer turns them back into options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DenseModelRef {
    /// The model as given (`--dense`): a directory or a Hugging Face id.
    pub reference: String,
    /// The Hugging Face id of the model's manifest (e.g. `sentence-transformers/all-MiniLM-L6-v2`).
    pub id: String,
    /// The resolved model directory (absolute), tried when `reference` no longer resolves.
    pub dir: String,
    /// FNV-1a 64 of `config.json` and `tokenizer.json`: warns when a different model is loaded.
    pub fingerprint: String,
    /// Query template (`{task}`, `{text}`), as used at build time.
    pub query_template: String,
    /// Document template, as used to encode the corpus.
    pub document_template: String,
    /// Task substituted into `{task}`.
    pub task: String,
    /// Max tokens per text.
    pub max_length: usize,
    /// Pooling (`cls`, `mean`, `last_token`).
    pub pooling: String,
    /// Weight/compute dtype used to encode the corpus (`f32`, `bf16`, `f16`).
    pub model_dtype: String,
}

/// HNSW construction parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct HnswSettings {
    /// Links per node (`M`).
    pub m: usize,
    /// Candidate list size while building.
    pub ef_construction: usize,
}

impl Default for HnswSettings {
    fn default() -> Self {
        Self {
            m: 16,
            ef_construction: 200,
        }
    }
}

/// A file of the index and its size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileInfo {
    /// Path relative to the index directory, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
}

impl Manifest {
    /// Reads and validates `dir/manifest.json`: a missing or unparsable manifest, another
    /// format version, or a file whose size differs is a clear error.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::index(
                    dir,
                    "not a freshstack index (no manifest.json); build one with `freshstack index`",
                ));
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let value: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::index(&path, format!("corrupt manifest: {e}")))?;
        let found = value.get("format_version").and_then(|v| v.as_u64());
        if found != Some(u64::from(FORMAT_VERSION)) {
            let found = found.map_or_else(|| "none".to_string(), |v| v.to_string());
            return Err(Error::index(
                dir,
                format!(
                    "index format version {found}, this build reads version {FORMAT_VERSION}; \
                     rebuild it with `freshstack index`"
                ),
            ));
        }
        let manifest: Manifest = serde_json::from_value(value)
            .map_err(|e| Error::index(&path, format!("corrupt manifest: {e}")))?;
        for file in &manifest.files {
            let file_path = dir.join(&file.path);
            let bytes = std::fs::metadata(&file_path)
                .map_err(|e| Error::index(&file_path, format!("missing index file: {e}")))?
                .len();
            if bytes != file.bytes {
                return Err(Error::index(
                    &file_path,
                    format!(
                        "corrupt index: {bytes} bytes, the manifest says {}; rebuild the index",
                        file.bytes
                    ),
                ));
            }
        }
        Ok(manifest)
    }

    /// Writes the manifest atomically into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        write_json_atomic(dir.join(MANIFEST_FILE), self)
    }

    /// Fills [`Manifest::files`] from the files now under `dir` (recursively, sorted), skipping
    /// the manifest itself and the `hnsw/` caches.
    pub fn record_files(&mut self, dir: &Path) -> Result<()> {
        let mut files = Vec::new();
        collect_files(dir, dir, &mut files)?;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        self.files = files;
        Ok(())
    }

    /// The dense model called `name`.
    pub fn dense_model(&self, name: &str) -> Option<&DenseInfo> {
        self.dense.iter().find(|d| d.name == name)
    }
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<FileInfo>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            if name != "hnsw" {
                collect_files(root, &path, out)?;
            }
            continue;
        }
        // tantivy's lock files come and go with readers; the manifest is written last.
        if name == MANIFEST_FILE || name.ends_with(".lock") || name.starts_with('.') {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/");
        let bytes = entry.metadata().map_err(|e| Error::io(&path, e))?.len();
        out.push(FileInfo { path: rel, bytes });
    }
    Ok(())
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// Folds `bytes` into a running FNV-1a 64 hash.
fn fnv1a64_update(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// FNV-1a 64 of `bytes`, as 16 hex digits (equal to [`fnv1a64_file`] of a file holding them).
pub fn fnv1a64(bytes: &[u8]) -> String {
    format!("{:016x}", fnv1a64_update(FNV_OFFSET, bytes))
}

/// FNV-1a 64 of a file's bytes, as 16 hex digits.
pub fn fnv1a64_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hash = FNV_OFFSET;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hash = fnv1a64_update(hash, &buf[..n]);
    }
    Ok(format!("{hash:016x}"))
}
