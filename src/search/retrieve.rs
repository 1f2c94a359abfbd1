//! Batch retrieval of a query file into a TREC run ([`retrieve`], what `freshstack retrieve`
//! calls): the index, its query encoders or precomputed [`QueryVectors`], an optional
//! cross-encoder second stage ([`LoadedRerank`], checked against the index's corpus), one
//! [`Pipeline`] and the one TREC writer.
//!
//! Errors about a setting are [`Error::InvalidArgument`]s named after the setting (`rerank
//! depth`, `rerank corpus`, `query vectors`, `tag`), which the command line maps to its flags.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::dataset::{
    Fnv1a64, ScoreText, VectorMatrix, check_trec_tag, ids_path, read_ids, write_trec_rankings,
};
use crate::embed::resolve_model;
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;
use crate::rerank::{CrossEncoder, RerankerOptions};
use crate::search::{
    DocumentTexts, Engine, Explained, Pipeline, QueryEncoderOptions, QueryField, QueryItem, Rerank,
    RetrieverSpec, SearchOptions, read_queries,
};

/// Which precomputed query vectors to search with: `NAME=PATH.npy`, for the dense model `NAME`
/// (the query ids in `PATH.ids`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryVectorsSpec {
    /// The dense model they are for.
    pub name: String,
    /// The `.npy` matrix.
    pub path: PathBuf,
}

impl std::str::FromStr for QueryVectorsSpec {
    type Err = Error;

    /// Parses `NAME=PATH.npy` (errors name the setting `query vectors`).
    fn from_str(text: &str) -> Result<Self> {
        let (name, path) = text.split_once('=').ok_or_else(|| {
            Error::invalid(
                Setting::QueryVectors,
                format!("{text:?}: expected NAME=PATH.npy"),
            )
        })?;
        Ok(Self {
            name: name.to_string(),
            path: PathBuf::from(path),
        })
    }
}

/// Precomputed query vectors (`PATH.npy` + `PATH.ids`), looked up by query id.
pub struct QueryVectors {
    path: PathBuf,
    matrix: VectorMatrix,
    row_of: HashMap<String, usize>,
}

impl QueryVectors {
    /// Opens `path` and its ids file; they must have as many ids as rows.
    pub fn open(path: &Path) -> Result<Self> {
        let matrix = VectorMatrix::open(path)?;
        let ids_file = ids_path(path);
        let ids = read_ids(&ids_file)?;
        if ids.len() != matrix.rows() {
            return Err(Error::dataset(
                ids_file,
                format!("{} ids for {} rows", ids.len(), matrix.rows()),
            ));
        }
        let row_of = ids.into_iter().enumerate().map(|(i, id)| (id, i)).collect();
        Ok(Self {
            path: path.to_path_buf(),
            matrix,
            row_of,
        })
    }

    /// The vector of each query, in order; a query without one is an error.
    pub fn rows(&self, queries: &[QueryItem]) -> Result<Vec<Vec<f32>>> {
        queries
            .iter()
            .map(|q| {
                let row = *self.row_of.get(q.id.as_str()).ok_or_else(|| {
                    Error::dataset(&self.path, format!("no vector for query {:?}", q.id))
                })?;
                Ok(self.matrix.row(row))
            })
            .collect()
    }
}

/// A cross-encoder second stage of `retrieve` or `search`.
#[derive(Debug, Clone)]
pub struct RerankConfig {
    /// A model directory or a cached Hugging Face id (never downloaded).
    pub model: String,
    /// Results per query rescored (at least 1); the rest keep their order below.
    pub depth: usize,
    /// The corpus JSONL the index was built from (its texts feed the reranker); default: the
    /// path the index recorded. Checked against the index's corpus hash.
    pub corpus: Option<PathBuf>,
    /// Device, dtype, longest pair.
    pub options: RerankerOptions,
}

/// A loaded [`RerankConfig`]: the cross-encoder and the corpus it reads.
pub struct LoadedRerank {
    reranker: CrossEncoder,
    depth: usize,
    corpus: PathBuf,
}

/// Checks that `corpus` holds a row for every live document of `engine`'s index.
fn check_holds_live_documents(corpus: &Path, engine: &Engine) -> Result<()> {
    let mut present: std::collections::HashSet<String> = std::collections::HashSet::new();
    crate::dataset::for_each_document(corpus, |_, doc| {
        present.insert(doc.id);
        Ok(())
    })?;
    match engine.live_ids().find(|id| !present.contains(*id)) {
        Some(missing) => Err(Error::invalid(
            Setting::RerankCorpus,
            format!(
                "{} has no document {missing:?}, which the refreshed index holds: give a corpus \
                 with every live document (the build's corpus.jsonl)",
                corpus.display()
            ),
        )),
        None => Ok(()),
    }
}

impl LoadedRerank {
    /// Checks the settings and that the corpus is the one `engine`'s index was built from, then
    /// loads the model.
    pub fn load(config: &RerankConfig, engine: &Engine) -> Result<Self> {
        if config.depth == 0 {
            return Err(Error::invalid(Setting::RerankDepth, "must be at least 1"));
        }
        let recorded = &engine.manifest().corpus;
        let corpus = config
            .corpus
            .clone()
            .unwrap_or_else(|| PathBuf::from(&recorded.path));
        if !corpus.is_file() {
            return Err(Error::invalid(
                Setting::RerankCorpus,
                format!(
                    "{} is not a file: reranking needs the texts of the corpus the index was \
                     built from",
                    corpus.display()
                ),
            ));
        }
        // A refreshed index was built from several corpora (recorded joined by `+`): no one
        // file has their hash, and the corpus it needs is one holding every live document.
        let refreshed = recorded.fnv1a64.contains('+');
        if refreshed {
            check_holds_live_documents(&corpus, engine)?;
        }
        let hash = Fnv1a64::of_file(&corpus)?;
        if !refreshed && hash != recorded.fnv1a64 {
            return Err(Error::invalid(
                Setting::RerankCorpus,
                format!(
                    "{}: not the corpus this index was built from (FNV-1a {hash}, the index has \
                     {})",
                    corpus.display(),
                    recorded.fnv1a64
                ),
            ));
        }
        let reranker = CrossEncoder::load(&resolve_model(&config.model)?, &config.options)?;
        Ok(Self {
            reranker,
            depth: config.depth,
            corpus,
        })
    }

    /// The second stage of a [`Pipeline`]: this cross-encoder over the corpus texts.
    pub fn stage(&self) -> Rerank<'_> {
        Rerank {
            reranker: &self.reranker,
            depth: self.depth,
            documents: DocumentTexts::Corpus(&self.corpus),
        }
    }
}

impl Engine {
    /// Loads the query encoders of the dense models `retriever` (`bm25`, `dense:NAME`,
    /// `fusion...`) searches; nothing for BM25.
    pub fn load_query_encoders_for(
        &mut self,
        retriever: &RetrieverSpec,
        options: &QueryEncoderOptions,
    ) -> Result<()> {
        let components = self.components(retriever)?;
        let names: Vec<&str> = components
            .iter()
            .filter_map(RetrieverSpec::dense_model)
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        self.load_query_encoders(&names, options)
    }
}

/// What [`retrieve`] reads and writes.
#[derive(Debug, Clone)]
pub struct RetrieveConfig {
    /// The index directory.
    pub index: PathBuf,
    /// Queries: reference-schema questions or BEIR `{"_id","text"}` lines (JSONL).
    pub queries: PathBuf,
    /// Which text of each query is searched.
    pub field: QueryField,
    /// The TREC run to write (atomically).
    pub out: PathBuf,
    /// Results per query.
    pub k: usize,
    /// How to search (`retriever`, ANN, fusion; `k` is ignored in favour of [`Self::k`]).
    pub search: SearchOptions,
    /// How dense query encoders load (unused with [`Self::query_vectors`]).
    pub encoders: QueryEncoderOptions,
    /// Exact dense search on this CUDA device (feature `cuda`).
    pub gpu_exact: Option<usize>,
    /// Precomputed vectors for a single dense retriever (instead of encoding the queries).
    pub query_vectors: Option<QueryVectorsSpec>,
    /// A second stage.
    pub rerank: Option<RerankConfig>,
    /// Run tag (one word); default: the run's name.
    pub tag: Option<String>,
}

/// What [`retrieve`] did.
#[derive(Debug, Clone)]
pub struct RetrieveSummary {
    /// Queries read.
    pub queries: usize,
    /// The run's name: the resolved retriever, `+rerank` after a rerank.
    pub run: String,
    /// Queries without results (for BM25: no searchable term); they have no lines.
    pub unsearchable: usize,
    /// Seconds spent retrieving and writing, after loading.
    pub seconds: f64,
}

/// Runs `config.queries` through the index (and the reranker) and writes the TREC run.
pub fn retrieve(config: &RetrieveConfig, progress: &dyn Progress) -> Result<RetrieveSummary> {
    let mut inputs: Vec<&Path> = vec![config.queries.as_path(), config.index.as_path()];
    if let Some(vectors) = &config.query_vectors {
        inputs.push(&vectors.path);
    }
    if let Some(corpus) = config.rerank.as_ref().and_then(|r| r.corpus.as_ref()) {
        inputs.push(corpus);
    }
    crate::dataset::check_output_is_not_an_input(Setting::RunOutput, &config.out, &inputs)?;
    let mut engine = Engine::open(&config.index)?;
    let retriever = engine.resolve(&config.search.retriever)?;
    #[cfg(feature = "cuda")]
    if let Some(ordinal) = config.gpu_exact {
        engine.use_gpu_exact(ordinal)?;
    }
    #[cfg(not(feature = "cuda"))]
    let _ = config.gpu_exact;
    let queries = read_queries(&config.queries, config.field)?;
    // Loaded before retrieval, so a bad model or corpus fails at once.
    let reranker = config
        .rerank
        .as_ref()
        .map(|rerank| LoadedRerank::load(rerank, &engine))
        .transpose()?;
    let started = std::time::Instant::now();
    let vectors = match (&config.query_vectors, retriever.dense_model()) {
        (Some(QueryVectorsSpec { name, path }), Some(model)) => {
            if name != model {
                return Err(Error::invalid(
                    Setting::QueryVectors,
                    format!("names model {name:?} but the retriever is {retriever}"),
                ));
            }
            Some(QueryVectors::open(path)?.rows(&queries)?)
        }
        (Some(_), None) => {
            return Err(Error::invalid(
                Setting::QueryVectors,
                format!("for a single dense retriever, not {retriever}"),
            ));
        }
        (None, _) => {
            engine.load_query_encoders_for(&config.search.retriever, &config.encoders)?;
            None
        }
    };
    let pipeline = Pipeline {
        retriever: engine.retriever(&config.search.retriever, &config.search)?,
        rerank: reranker.as_ref().map(LoadedRerank::stage),
    };
    let retrieved = match &vectors {
        Some(vectors) => {
            let refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
            pipeline.run_vectors(&queries, &refs, config.k, progress)?
        }
        None => {
            progress.begin("retrieve", Some(queries.len() as u64));
            let retrieved = pipeline.run(&queries, config.k, progress)?;
            progress.finish();
            retrieved
        }
    };
    let run = retrieved.run;
    let tag = config.tag.clone().unwrap_or_else(|| run.name.clone());
    check_trec_tag(&tag)?;
    // The engine scores in f32: written as f32, as `retrieve` always has.
    write_trec_rankings(&run, &config.out, &tag, usize::MAX, ScoreText::F32)?;
    Ok(RetrieveSummary {
        queries: queries.len(),
        run: run.name,
        unsearchable: retrieved.unsearchable,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What [`search_query`] searches: one index, its retriever, query encoders and an optional
/// second stage (what `freshstack search` passes).
#[derive(Debug, Clone)]
pub struct SearchConfig {
    /// The index directory.
    pub index: PathBuf,
    /// How to search (`retriever`, `k` results, ANN, fusion).
    pub search: SearchOptions,
    /// How dense query encoders load.
    pub encoders: QueryEncoderOptions,
    /// A second stage.
    pub rerank: Option<RerankConfig>,
}

/// Searches `query` through the index of `config` (and its reranker): the top `k` documents
/// with, for a fusion, each retriever's place ([`Explained`]).
pub fn search_query(
    config: &SearchConfig,
    query: &str,
    progress: &dyn Progress,
) -> Result<Vec<Explained>> {
    let mut engine = Engine::open(&config.index)?;
    engine.load_query_encoders_for(&config.search.retriever, &config.encoders)?;
    let reranker = config
        .rerank
        .as_ref()
        .map(|rerank| LoadedRerank::load(rerank, &engine))
        .transpose()?;
    let pipeline = Pipeline {
        retriever: engine.retriever(&config.search.retriever, &config.search)?,
        rerank: reranker.as_ref().map(LoadedRerank::stage),
    };
    pipeline.explain(query, config.search.k, progress)
}
