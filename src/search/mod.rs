//! Searching an index: the [`Retriever`] trait, the hybrid [`Engine`] that opens an index
//! directory and serves `bm25`, `dense:NAME` and `fusion` retrievers, query encoders (the data
//! model's [`Encoder`](crate::dataset::Encoder), loaded from the `embed` model an index recorded:
//! [`load_recorded_encoder`]), building a hybrid index that encodes the corpus
//! ([`build_hybrid_index`]: the glue between `index` and `embed`), query files, [`fusion`] of
//! runs (normalized sum exact with the reference's `util.fusion`, and RRF), and the
//! [`Pipeline`] (first stage + optional [`Rerank`]) whose output is a
//! [`Run`](crate::dataset::Run). Rankings are [`ScoredDoc`]s, the one shape, scores widened
//! from the engine's `f32` to `f64` exactly; [`Explained`] adds the per-retriever places that
//! `freshstack search` shows.
//!
//! Guarantees: results of `bm25` and `dense` are ordered by score descending, then document id
//! ascending; `fusion` orders as [`fuse`] does (the reference's tie order); nothing depends on
//! the thread count; an [`Engine`] is immutable after opening (`Send + Sync`), so any number of
//! threads may search it at once.

mod batch;
mod encode_index;
mod encoders;
mod engine;
pub mod fusion;
mod pipeline;
mod queries;
mod retrieve;

pub use encode_index::{
    DenseModelSpec, HybridIndexConfig, build_hybrid_index, refresh_hybrid_index,
};
pub use encoders::{ModelOverride, QueryEncoderOptions, load_recorded_encoder};
pub use engine::{Engine, EngineInfo, EngineRetriever};
pub use fusion::{Fused, FusionMethod, FusionOptions, fuse, fuse_rankings};
pub use pipeline::{DocumentTexts, Pipeline, Rerank, Retrieved};
pub use queries::{QueryField, QueryItem, read_queries};
pub use retrieve::{
    LoadedRerank, QueryVectors, QueryVectorsSpec, RerankConfig, RetrieveConfig, RetrieveSummary,
    SearchConfig, retrieve, search_query,
};

use crate::dataset::ScoredDoc;
use crate::error::{Error, Result, Setting};

/// A document of a fused (or reranked) ranking with its place in each retriever that returned
/// it: what `freshstack search` shows. Rankings themselves are [`ScoredDoc`]s, the one shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Explained {
    /// The document and its final score.
    pub doc: ScoredDoc,
    /// For fusion: the document's rank and raw score in each fused retriever whose top
    /// `fusion_depth` holds it, in retriever order; after a rerank, the first stage's place
    /// comes first. Empty for a single retriever.
    pub places: Vec<RetrieverScore>,
}

/// A document's place in one retriever's ranking.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrieverScore {
    /// `bm25`, `dense:NAME`, or the first stage's name after a rerank.
    pub retriever: String,
    /// 1-based rank in that retriever's results.
    pub rank: usize,
    /// That retriever's raw score.
    pub score: f64,
}

/// Anything that ranks documents for a text query. Implemented by the engine's retrievers;
/// fusion combines several.
pub trait Retriever: Send + Sync {
    /// The retriever's name (`bm25`, `dense:NAME`), used as the run tag.
    fn name(&self) -> String;
    /// The best `k` documents for `query`, best first (ties by id).
    fn retrieve(&self, query: &str, k: usize) -> Result<Vec<ScoredDoc>>;
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

impl std::str::FromStr for Ann {
    type Err = Error;

    /// Parses `hnsw` or `exact`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "hnsw" => Ok(Ann::Hnsw),
            "exact" => Ok(Ann::Exact),
            other => Err(Error::invalid(
                Setting::AnnMethod,
                format!("{other:?}: expected hnsw or exact"),
            )),
        }
    }
}

/// Default HNSW search width: the smallest that reached recall@10 0.98 on 50,000 real MiniLM
/// vectors of source code (0.9814; 0.9734 at 128, see docs/performance.md).
pub const DEFAULT_EF_SEARCH: usize = 160;

/// Documents each retriever contributes to a fusion (paper §3.4: the top 100 of each model).
pub const DEFAULT_FUSION_DEPTH: usize = 100;

/// How to search. Build it with `..SearchOptions::default()` so new fields do not break you.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchOptions {
    /// `bm25`, `dense` (the only dense model), `dense:NAME`, `fusion` (every retriever of the
    /// index) or `fusion:R1,R2,...`; an [`EngineRetriever`]'s is resolved against its index
    /// (`dense:NAME`, `fusion:bm25,dense:NAME`).
    pub retriever: RetrieverSpec,
    /// Results wanted.
    pub k: usize,
    /// HNSW or exact, for dense retrievers.
    pub ann: Ann,
    /// HNSW search width (raised to the number of results wanted when smaller).
    pub ef_search: usize,
    /// For fusion: documents taken from each retriever.
    pub fusion_depth: usize,
    /// For fusion: normalized sum (the paper's) or RRF.
    pub fusion_method: FusionMethod,
    /// For fusion: one weight per fused retriever, in order (default all 1).
    pub fusion_weights: Option<Vec<f64>>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        Self {
            retriever: RetrieverSpec::Bm25,
            k: 10,
            ann: Ann::Hnsw,
            ef_search: DEFAULT_EF_SEARCH,
            fusion_depth: DEFAULT_FUSION_DEPTH,
            fusion_method: FusionMethod::NormalizedSum,
            fusion_weights: None,
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
    /// A fusion of these retrievers (never nested); empty = every retriever of the index.
    Fusion(Vec<RetrieverSpec>),
}

impl RetrieverSpec {
    /// The model a named dense retriever (`dense:NAME`) searches; `None` for `bm25`, `dense`
    /// alone and fusions.
    pub fn dense_model(&self) -> Option<&str> {
        match self {
            Self::Dense(Some(name)) => Some(name),
            _ => None,
        }
    }

    /// True for `fusion` and `fusion:R1,R2,...`.
    pub fn is_fusion(&self) -> bool {
        matches!(self, Self::Fusion(_))
    }
}

impl std::str::FromStr for RetrieverSpec {
    type Err = Error;

    /// Parses `bm25`, `dense`, `dense:NAME`, `fusion` or `fusion:R1,R2,...` (errors name the
    /// setting `retriever`).
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "bm25" => Ok(Self::Bm25),
            "dense" => Ok(Self::Dense(None)),
            "fusion" => Ok(Self::Fusion(Vec::new())),
            other => {
                if let Some(model) = other.strip_prefix("dense:")
                    && !model.is_empty()
                {
                    return Ok(Self::Dense(Some(model.to_string())));
                }
                if let Some(list) = other.strip_prefix("fusion:") {
                    let parts = list
                        .split(',')
                        .map(|part| match part.trim().parse()? {
                            Self::Fusion(_) => Err(Error::invalid(
                                Setting::Retriever,
                                format!("{other:?}: a fusion cannot contain a fusion"),
                            )),
                            single => Ok(single),
                        })
                        .collect::<Result<Vec<_>>>()?;
                    return Ok(Self::Fusion(parts));
                }
                Err(Error::invalid(
                    Setting::Retriever,
                    format!(
                        "unknown retriever {other:?}: expected bm25, dense, dense:NAME, fusion \
                         or fusion:R1,R2,..."
                    ),
                ))
            }
        }
    }
}

impl std::fmt::Display for RetrieverSpec {
    /// The name it parses from (a fusion's parts comma-separated without spaces).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bm25 => f.write_str("bm25"),
            Self::Dense(None) => f.write_str("dense"),
            Self::Dense(Some(name)) => write!(f, "dense:{name}"),
            Self::Fusion(parts) if parts.is_empty() => f.write_str("fusion"),
            Self::Fusion(parts) => {
                f.write_str("fusion:")?;
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{part}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retriever_names_round_trip() {
        for name in [
            "bm25",
            "dense",
            "dense:a:b",
            "fusion",
            "fusion:bm25,dense:x",
        ] {
            let spec: RetrieverSpec = name.parse().unwrap();
            assert_eq!(spec.to_string(), name);
        }
        let spaced: RetrieverSpec = "fusion:bm25, dense".parse().unwrap();
        assert_eq!(spaced.to_string(), "fusion:bm25,dense");
        for bad in [
            "splade",
            "dense:",
            "fusion:",
            "fusion:fusion",
            "fusion:bm25,x",
        ] {
            let err = bad.parse::<RetrieverSpec>().unwrap_err().to_string();
            assert!(err.starts_with("invalid retriever: "), "{bad}: {err}");
        }
    }
}
