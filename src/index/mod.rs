//! The on-disk index: one directory holding a BM25 index (tantivy) and, per dense model, a
//! memory-mapped vector matrix with an optional HNSW graph.
//!
//! Layout of an index directory:
//! ```text
//! DIR/manifest.json            format version, corpus hash, settings, models, file sizes and
//!                              CRC-32s; sealed by its own CRC-32
//! DIR/ids.txt                  document ids, one per line; line n = ordinal n-1
//! DIR/bm25/                    tantivy index (field `body`, fast field `ord`, `repo`)
//! DIR/dense/NAME/vectors.npy   N x dim, f16 or f32, rows in ordinal order
//! DIR/dense/NAME/hnsw/         HNSW graph dump (a rebuildable cache, keyed)
//! ```
//! Guarantees: a build writes into a temporary sibling and renames it into place, so a
//! directory with a manifest is complete; opening an index of another format version, or one
//! whose files do not match the manifest (size or CRC-32, checked before any reader runs), is
//! an [`Error::Index`](crate::Error::Index).
//! Imports only `dataset` (and the error and progress types).

mod analyzer;
mod bm25;
mod docids;
mod flat;
#[cfg(feature = "cuda")]
mod gpu;
mod hnsw;
mod manifest;
mod refresh;
mod write;

pub use analyzer::{AnalyzerKind, MAX_TERM_BYTES};
pub use bm25::{
    Bm25Index, Bm25Settings, Bm25Writer, DEFAULT_B, DEFAULT_K1, MAX_QUERY_BYTES, ScoredOrd,
};
pub use docids::{DocIds, TopK};
pub use flat::search as flat_search;
#[cfg(feature = "cuda")]
pub use gpu::{GpuFlat, KERNEL_SOURCE, compile_kernels};
pub use hnsw::{HnswGraph, cache_key};
pub use manifest::{
    CorpusInfo, DenseInfo, DenseModelRef, FORMAT_VERSION, FileInfo, HnswSettings, MANIFEST_FILE,
    Manifest,
};
pub use refresh::{RefreshConfig, RefreshSummary, refresh_index, refresh_index_with_encoders};
pub use write::{
    DocumentModel, IndexConfig, IndexSummary, LoadedModel, VectorSource, build_index,
    build_index_with_encoders, read_corpus, validate_model_name,
};

/// File and directory names inside an index directory.
pub mod layout {
    /// Ordinal -> document id.
    pub const IDS_FILE: &str = "ids.txt";
    /// The tantivy index.
    pub const BM25_DIR: &str = "bm25";
    /// Parent of the per-model directories.
    pub const DENSE_DIR: &str = "dense";
    /// A model's matrix, inside `dense/NAME/`.
    pub const VECTORS_FILE: &str = "vectors.npy";
    /// A model's HNSW cache, inside `dense/NAME/`.
    pub const HNSW_DIR: &str = "hnsw";
}
