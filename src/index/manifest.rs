//! The index manifest: `DIR/manifest.json`, written atomically last, so a directory with a
//! manifest is a complete index. It records the format version, the corpus it was built from
//! (path, size, hash, document count), the BM25 settings, each dense model, and the size and
//! CRC-32 of every file, which [`Manifest::read`] checks before any reader (tantivy's, the vector
//! map) sees a byte, so a truncated, half-copied or corrupted index is a one-line error that
//! says to rebuild rather than a panic deep inside a reader or changed results. The manifest
//! seals itself: its last member, `"checksum"`, is the CRC-32 of every byte before it.
//!
//! A manifest written before checksums existed (no `"checksum"`, no per-file `crc32`) still
//! opens, with its sizes checked only and a warning that a rebuild adds the checksums.

use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::AtomicWriter;
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
    /// FNV-1a 64 ([`Fnv1a64`](crate::dataset::Fnv1a64)) of the corpus file's bytes, hex:
    /// detects a rebuilt corpus, and feeds the HNSW cache's key.
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
    /// FNV-1a 64 ([`Fnv1a64`](crate::dataset::Fnv1a64)) of `config.json` and `tokenizer.json`,
    /// joined by `-`: warns when a different model is loaded.
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
    /// Matryoshka width the vectors were cut to (queries are cut the same way); absent for
    /// the model's full width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
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

/// A file of the index, its size and checksum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileInfo {
    /// Path relative to the index directory, `/`-separated.
    pub path: String,
    /// Size in bytes.
    pub bytes: u64,
    /// CRC-32 (IEEE) of the file's bytes, 8 hex digits; absent in indexes built before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<String>,
}

/// What precedes the manifest's own checksum: the manifest's last member.
const SEAL_KEY: &[u8] = b",\n  \"checksum\": \"";
/// What follows it: the closing quote and brace.
const SEAL_END: &[u8] = b"\"\n}\n";

/// Splits a manifest's bytes into the covered part and whether its seal holds: `None` when there
/// is no seal (a manifest from before checksums, or one whose seal itself was damaged).
fn unseal(bytes: &[u8]) -> Option<(&[u8], bool)> {
    let hex_end = bytes.len().checked_sub(SEAL_END.len())?;
    if &bytes[hex_end..] != SEAL_END {
        return None;
    }
    let hex_start = hex_end.checked_sub(8)?;
    let head_end = hex_start.checked_sub(SEAL_KEY.len())?;
    if &bytes[head_end..hex_start] != SEAL_KEY {
        return None;
    }
    let head = &bytes[..head_end];
    let expected = format!("{:08x}", crc32fast::hash(head));
    Some((head, expected.as_bytes() == &bytes[hex_start..hex_end]))
}

/// The CRC-32 of a file's bytes, 8 hex digits, read in 1 MiB blocks (a memory map was no faster:
/// the page faults cost what the copy does).
pub(crate) fn crc32_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:08x}", hasher.finalize()))
}

fn corrupt_manifest(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::index(
        path,
        format!("corrupt manifest: {why}; rebuild the index with `freshstack index`"),
    )
}

/// `dir/rel` for a file the manifest lists, which must be a plain relative path inside the index
/// (no root, no `.` or `..` part): the manifest is outside input, and its checksum can be forged,
/// so it must never make a read reach `/dev/zero` or a file outside the index.
fn index_file(dir: &Path, manifest: &Path, rel: &str) -> Result<PathBuf> {
    let relative = Path::new(rel);
    let plain = !rel.is_empty()
        && relative
            .components()
            .all(|part| matches!(part, Component::Normal(_)));
    if !plain {
        return Err(corrupt_manifest(
            manifest,
            format!("file path {rel:?} is not a relative path inside the index"),
        ));
    }
    Ok(dir.join(relative))
}

/// The manifest is outside input, and its checksum can be forged: every dense model's name must
/// be a plain name (it becomes a directory: `../x` would read and write outside the index), and
/// every file the readers open must be listed, so that none is read unchecked: the document
/// ids, each model's vectors, BM25's `meta.json` and (for a sealed manifest: older builds did
/// not record tantivy's `.managed.json`) every file in `bm25/`.
fn check_listing(dir: &Path, path: &Path, manifest: &Manifest, sealed: bool) -> Result<()> {
    use super::layout;
    use std::collections::BTreeSet;
    for model in &manifest.dense {
        if super::write::validate_model_name(&model.name).is_err() {
            return Err(corrupt_manifest(
                path,
                format!("dense model name {:?} is not a plain name", model.name),
            ));
        }
    }
    let listed: BTreeSet<&str> = manifest.files.iter().map(|f| f.path.as_str()).collect();
    let mut required = vec![layout::IDS_FILE.to_string()];
    if manifest.bm25.is_some() {
        required.push(format!("{}/meta.json", layout::BM25_DIR));
    }
    if manifest.bm25.is_some() && sealed {
        let bm25 = dir.join(layout::BM25_DIR);
        let entries = std::fs::read_dir(&bm25).map_err(|e| Error::io(&bm25, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&bm25, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_file = entry.file_type().is_ok_and(|t| t.is_file());
            if is_file && is_recorded(&name) {
                required.push(format!("{}/{name}", layout::BM25_DIR));
            }
        }
    }
    for model in &manifest.dense {
        required.push(format!(
            "{}/{}/{}",
            layout::DENSE_DIR,
            model.name,
            layout::VECTORS_FILE
        ));
    }
    match required.iter().find(|r| !listed.contains(r.as_str())) {
        Some(missing) => Err(corrupt_manifest(
            path,
            format!("it does not list {missing}, which the index reads"),
        )),
        None => Ok(()),
    }
}

fn corrupt(path: &Path, why: impl std::fmt::Display) -> Error {
    Error::index(
        path,
        format!("corrupt index: {why}; rebuild it with `freshstack index`"),
    )
}

impl Manifest {
    /// Reads and validates `dir/manifest.json`: a missing or unparsable manifest, another
    /// format version, a file whose size differs, or any byte of the manifest or of a file that
    /// differs from the build (by CRC-32) is a clear error. Every file is read once for that.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(MANIFEST_FILE);
        let bytes = match crate::dataset::bounded::read_bytes(
            &path,
            crate::dataset::bounded::MAX_SIDE_FILE_BYTES,
        ) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::index(
                    dir,
                    "not a freshstack index (no manifest.json); build one with `freshstack index`",
                ));
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        let sealed = match unseal(&bytes) {
            Some((_, false)) => return Err(corrupt_manifest(&path, "its checksum differs")),
            Some((_, true)) => true,
            None => false,
        };
        let text = std::str::from_utf8(&bytes).map_err(|e| corrupt_manifest(&path, e))?;
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| corrupt_manifest(&path, e))?;
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
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|e| corrupt_manifest(&path, e))?;
        let with_crc = manifest.files.iter().filter(|f| f.crc32.is_some()).count();
        if !sealed && with_crc > 0 {
            return Err(corrupt_manifest(&path, "its checksum is missing"));
        }
        if sealed && with_crc < manifest.files.len() {
            return Err(corrupt_manifest(&path, "a file has no checksum"));
        }
        if !sealed {
            tracing::warn!(
                "{}: built before index checksums: file sizes are checked, not their bytes; \
                 rebuild it with `freshstack index` to have every byte verified",
                dir.display()
            );
        }
        for file in &manifest.files {
            let file_path = index_file(dir, &path, &file.path)?;
            let meta = std::fs::metadata(&file_path)
                .map_err(|e| Error::index(&file_path, format!("missing index file: {e}")))?;
            if !meta.is_file() {
                return Err(corrupt(&file_path, "not a regular file"));
            }
            let bytes = meta.len();
            if bytes != file.bytes {
                return Err(corrupt(
                    &file_path,
                    format!("{bytes} bytes, the manifest says {}", file.bytes),
                ));
            }
            if let Some(expected) = &file.crc32 {
                let found = crc32_file(&file_path)?;
                if &found != expected {
                    return Err(corrupt(
                        &file_path,
                        format!("CRC-32 {found}, the manifest says {expected}"),
                    ));
                }
            }
        }
        check_listing(dir, &path, &manifest, sealed)?;
        Ok(manifest)
    }

    /// Writes the manifest atomically into `dir`, sealed with its checksum.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let json = serde_json::to_string_pretty(self).map_err(|e| Error::Json {
            path: path.clone(),
            source: e,
        })?;
        // A struct serializes as `{\n  ...\n}`: the seal goes in as its last member.
        let head = json.strip_suffix("\n}").unwrap_or(&json);
        let mut writer = AtomicWriter::create(&path)?;
        let crc = crc32fast::hash(head.as_bytes());
        writer
            .write_all(head.as_bytes())
            .and_then(|()| writer.write_all(SEAL_KEY))
            .and_then(|()| writer.write_all(format!("{crc:08x}").as_bytes()))
            .and_then(|()| writer.write_all(SEAL_END))
            .map_err(|e| Error::io(&path, e))?;
        writer.commit()
    }

    /// Fills [`Manifest::files`] from the files now under `dir` (recursively, sorted), skipping
    /// the manifest itself and the `hnsw/` caches.
    pub fn record_files(&mut self, dir: &Path) -> Result<()> {
        let mut names = Vec::new();
        walk_names(dir, dir, &mut names)?;
        names.sort();
        self.files = names
            .into_iter()
            .map(|rel| {
                let path = dir.join(&rel);
                let bytes = std::fs::metadata(&path)
                    .map_err(|e| Error::io(&path, e))?
                    .len();
                Ok(FileInfo {
                    path: rel,
                    bytes,
                    crc32: Some(crc32_file(&path)?),
                })
            })
            .collect::<Result<_>>()?;
        Ok(())
    }

    /// The dense model called `name`.
    pub fn dense_model(&self, name: &str) -> Option<&DenseInfo> {
        self.dense.iter().find(|d| d.name == name)
    }
}

/// Whether a file called `name` is listed in the manifest. tantivy's lock files come and go
/// with readers; the manifest is written last; other dot-files are temporaries, except
/// tantivy's list of its files, which it reads.
fn is_recorded(name: &str) -> bool {
    !(name == MANIFEST_FILE
        || name.ends_with(".lock")
        || (name.starts_with('.') && name != ".managed.json"))
}

/// Files under the index directory `dir` that its manifest does not list and that are not the
/// index's own (the manifest, `hnsw/` caches, lock and temporary files): a user's files, which
/// replacing the directory would delete. Sorted; read without checking the manifest's seal.
pub(crate) fn foreign_files(dir: &Path) -> Result<Vec<String>> {
    let path = dir.join(MANIFEST_FILE);
    let text =
        crate::dataset::bounded::read_text(&path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
            .map_err(|e| Error::io(&path, e))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| corrupt_manifest(&path, e))?;
    let listed: std::collections::BTreeSet<&str> = value["files"]
        .as_array()
        .map(|files| files.iter().filter_map(|f| f["path"].as_str()).collect())
        .unwrap_or_default();
    let mut found = Vec::new();
    walk_names(dir, dir, &mut found)?;
    found.retain(|rel| !listed.contains(rel.as_str()));
    found.sort();
    Ok(found)
}

/// The relative paths of the files under `dir` that a manifest records (see [`is_recorded`];
/// `hnsw/` caches are skipped).
fn walk_names(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().map_err(|e| Error::io(&path, e))?.is_dir() {
            if name != "hnsw" {
                walk_names(root, &path, out)?;
            }
        } else if is_recorded(&name) {
            out.push(relative_name(root, &path));
        }
    }
    Ok(())
}

/// `path` relative to `root`, `/`-separated (as the manifest lists files).
fn relative_name(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}
