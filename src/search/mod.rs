//! Searching an index: the [`Retriever`] trait, the hybrid [`Engine`] that opens an index
//! directory and serves `bm25` and `dense:NAME` retrievers, query files and TREC runs, and
//! [`fusion`] of runs (normalized sum exact with the reference's `util.fusion`, and RRF).
//!
//! Guarantees: results are ordered by score descending, then document id ascending, and do not
//! depend on the thread count; an [`Engine`] is immutable after opening (`Send + Sync`), so any
//! number of threads may search it at once.

mod engine;
pub mod fusion;
mod queries;
mod trec;

pub use engine::{Engine, EngineInfo, EngineRetriever};
pub use fusion::{Fused, FusionMethod, FusionOptions, fuse, fuse_rankings};
pub use queries::{QueryField, QueryItem, read_queries};
pub use trec::write_trec;

use crate::error::{Error, Result};

/// One retrieved document.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Hit {
    /// Document id.
    pub id: String,
    /// The retriever's score (BM25, or inner product for dense).
    pub score: f32,
}

/// Anything that ranks documents for a text query. Implemented by the engine's retrievers;
/// fusion combines several.
pub trait Retriever: Send + Sync {
    /// The retriever's name (`bm25`, `dense:NAME`), used as the run tag.
    fn name(&self) -> String;
    /// The best `k` documents for `query`, best first (ties by id).
    fn retrieve(&self, query: &str, k: usize) -> Result<Vec<Hit>>;
}

/// Turns query text into a vector for a dense model (implemented by the encoders). The vector
/// must be comparable by inner product with the model's document vectors (L2-normalised).
pub trait QueryEncoder: Send + Sync {
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Encodes one query (with the model's query template applied by the implementation).
    fn encode_query(&self, text: &str) -> Result<Vec<f32>>;
}

/// Nearest-neighbour method for dense retrievers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Ann {
    /// HNSW when the model has a graph, exact otherwise.
    #[default]
    Hnsw,
    /// Exact inner-product search over every vector (the ground truth).
    Exact,
}

impl Ann {
    /// Parses `hnsw` or `exact`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "hnsw" => Ok(Ann::Hnsw),
            "exact" => Ok(Ann::Exact),
            other => Err(Error::invalid(
                "--ann",
                format!("{other:?}: expected hnsw or exact"),
            )),
        }
    }
}

/// Default HNSW search width.
pub const DEFAULT_EF_SEARCH: usize = 128;

/// How to search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchOptions {
    /// `bm25`, `dense` (the only dense model) or `dense:NAME`.
    pub retriever: String,
    /// Results wanted.
    pub k: usize,
    /// HNSW or exact, for dense retrievers.
    pub ann: Ann,
    /// HNSW search width (raised to `k` when smaller).
    pub ef_search: usize,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            retriever: "bm25".to_string(),
            k: 10,
            ann: Ann::Hnsw,
            ef_search: DEFAULT_EF_SEARCH,
        }
    }
}

/// A parsed retriever name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetrieverSpec {
    /// BM25.
    Bm25,
    /// A dense model; `None` = the only one.
    Dense(Option<String>),
}

impl RetrieverSpec {
    /// Parses `bm25`, `dense` or `dense:NAME`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "bm25" => Ok(Self::Bm25),
            "dense" => Ok(Self::Dense(None)),
            other => match other.strip_prefix("dense:") {
                Some(model) if !model.is_empty() => Ok(Self::Dense(Some(model.to_string()))),
                _ => Err(Error::invalid(
                    "retriever",
                    format!("unknown retriever {other:?}: expected bm25, dense or dense:NAME"),
                )),
            },
        }
    }
}
