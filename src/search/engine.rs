//! The hybrid engine: one open index directory, serving BM25 and dense retrievers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::dataset::{Encoder, ScoredDoc, VectorDtype, VectorMatrix};
use crate::error::{Error, Result, Setting};
use crate::index::{
    Bm25Index, DenseInfo, DocIds, HnswGraph, Manifest, TopK, cache_key, flat_search, layout,
};
use crate::kernels::dot::dot;
use crate::search::{Ann, Retriever, RetrieverSpec, SearchOptions};

/// One dense model of an open index.
pub(super) struct DenseModel {
    info: DenseInfo,
    matrix: VectorMatrix,
    /// Loaded (or rebuilt) on first HNSW search; `Err` carries why there is no graph.
    graph: OnceLock<std::result::Result<HnswGraph, String>>,
}

/// An open index: immutable, `Send + Sync`, cheap to search from many threads.
pub struct Engine {
    dir: PathBuf,
    manifest: Manifest,
    ids: DocIds,
    bm25: Option<Bm25Index>,
    dense: BTreeMap<String, DenseModel>,
    encoders: BTreeMap<String, Arc<dyn Encoder>>,
    /// Dense models uploaded for exact search on a GPU ([`Engine::use_gpu_exact`]).
    #[cfg(feature = "cuda")]
    gpu: BTreeMap<String, crate::index::GpuFlat>,
}

/// What an open index holds (for `freshstack search --info` and logs).
#[derive(Debug, Clone, serde::Serialize)]
pub struct EngineInfo {
    /// Live documents (those a refresh removed are not counted).
    pub num_documents: usize,
    /// Retriever names available.
    pub retrievers: Vec<String>,
}

impl Engine {
    /// Opens the index in `dir`: checks the manifest (format version, file sizes), maps the
    /// vectors and opens BM25. HNSW graphs are loaded lazily, on first use.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        let manifest = Manifest::read(&dir)?;
        let ids = DocIds::read(&dir.join(layout::IDS_FILE))?;
        if ids.len() != manifest.corpus.num_documents {
            return Err(Error::index(
                &dir,
                format!(
                    "corrupt index: {} ids, the manifest says {} documents",
                    ids.len(),
                    manifest.corpus.num_documents
                ),
            ));
        }
        let bm25 = match &manifest.bm25 {
            Some(settings) => Some(Bm25Index::open(&dir.join(layout::BM25_DIR), *settings)?),
            None => None,
        };
        let mut dense = BTreeMap::new();
        for info in &manifest.dense {
            let path = dir
                .join(layout::DENSE_DIR)
                .join(&info.name)
                .join(layout::VECTORS_FILE);
            let matrix = VectorMatrix::open(&path)?;
            if matrix.rows() != ids.len() || matrix.dim() != info.dim {
                return Err(Error::index(
                    &path,
                    format!(
                        "corrupt index: {} x {} vectors, expected {} x {}",
                        matrix.rows(),
                        matrix.dim(),
                        ids.len(),
                        info.dim
                    ),
                ));
            }
            dense.insert(
                info.name.clone(),
                DenseModel {
                    info: info.clone(),
                    matrix,
                    graph: OnceLock::new(),
                },
            );
        }
        Ok(Self {
            dir,
            manifest,
            ids,
            bm25,
            dense,
            encoders: BTreeMap::new(),
            #[cfg(feature = "cuda")]
            gpu: BTreeMap::new(),
        })
    }

    /// The manifest the index was opened with.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The ids of the live documents (those no refresh removed), in index order.
    pub fn live_ids(&self) -> impl Iterator<Item = &str> {
        self.ids
            .ids()
            .iter()
            .filter(|id| !id.is_empty())
            .map(String::as_str)
    }

    /// Documents and retriever names.
    pub fn info(&self) -> EngineInfo {
        EngineInfo {
            num_documents: self.ids.num_live(),
            retrievers: self
                .single_retrievers()
                .iter()
                .map(|r| r.to_string())
                .collect(),
        }
    }

    /// BM25 (when the index has it), then every dense model by name: what `fusion` alone
    /// fuses. `fusion` itself is not one of them.
    fn single_retrievers(&self) -> Vec<RetrieverSpec> {
        let mut retrievers = Vec::new();
        if self.bm25.is_some() {
            retrievers.push(RetrieverSpec::Bm25);
        }
        retrievers.extend(
            self.dense
                .keys()
                .map(|name| RetrieverSpec::Dense(Some(name.clone()))),
        );
        retrievers
    }

    /// Registers the query encoder of dense model `name`, so text queries can use it.
    pub fn set_query_encoder(&mut self, name: &str, encoder: Arc<dyn Encoder>) -> Result<()> {
        let model = self.dense_model(Some(name))?;
        if encoder.dim() != model.info.dim {
            return Err(Error::invalid(
                Setting::QueryEncoder,
                format!(
                    "dimension {} for model {name:?} of dimension {}",
                    encoder.dim(),
                    model.info.dim
                ),
            ));
        }
        self.encoders.insert(name.to_string(), encoder);
        Ok(())
    }

    /// True when dense model `name` has a query encoder.
    pub fn has_query_encoder(&self, name: &str) -> bool {
        self.encoders.contains_key(name)
    }

    /// The query encoder of dense model `name`, or an error saying how to get one.
    pub(super) fn query_encoder(&self, name: &str) -> Result<&Arc<dyn Encoder>> {
        self.encoders.get(name).ok_or_else(|| {
            Error::invalid(
                Setting::Retriever,
                format!(
                    "dense:{name} needs a query encoder for text queries (open the index with \
                     its encoders, or pass precomputed query vectors)"
                ),
            )
        })
    }

    pub(super) fn dense_model(&self, name: Option<&str>) -> Result<&DenseModel> {
        match name {
            Some(name) => self.dense.get(name).ok_or_else(|| {
                Error::invalid(
                    Setting::Retriever,
                    format!(
                        "dense:{name}: no such model in {} (has: {})",
                        self.dir.display(),
                        self.info().retrievers.join(", ")
                    ),
                )
            }),
            None => {
                let mut models = self.dense.values();
                match (models.next(), models.next()) {
                    (Some(model), None) => Ok(model),
                    (None, _) => Err(Error::invalid(
                        Setting::Retriever,
                        format!("dense: {} has no dense model", self.dir.display()),
                    )),
                    _ => Err(Error::invalid(
                        Setting::Retriever,
                        format!(
                            "dense: {} has several dense models, name one: {}",
                            self.dir.display(),
                            self.info().retrievers.join(", ")
                        ),
                    )),
                }
            }
        }
    }

    /// The canonical form (`bm25`, `dense:NAME`, `fusion:R1,R2,...`) of `retriever`, checking
    /// it exists here.
    pub fn resolve(&self, retriever: &RetrieverSpec) -> Result<RetrieverSpec> {
        match retriever {
            RetrieverSpec::Fusion(_) => Ok(RetrieverSpec::Fusion(self.components(retriever)?)),
            single => self.resolve_single(single),
        }
    }

    /// The canonical single retrievers `retriever` runs: itself, or the fused ones (`fusion`
    /// alone: BM25 then every dense model by name). A retriever named twice is an error.
    pub fn components(&self, retriever: &RetrieverSpec) -> Result<Vec<RetrieverSpec>> {
        match retriever {
            RetrieverSpec::Fusion(parts) => {
                let resolved: Vec<RetrieverSpec> = if parts.is_empty() {
                    let all = self.single_retrievers();
                    if all.len() < 2 {
                        return Err(Error::invalid(
                            Setting::Retriever,
                            format!(
                                "fusion: {} has only {}; fusion needs two retrievers or more",
                                self.dir.display(),
                                self.info().retrievers.join(", ")
                            ),
                        ));
                    }
                    all
                } else {
                    parts
                        .iter()
                        .map(|part| self.resolve_single(part))
                        .collect::<Result<_>>()?
                };
                let mut sorted: Vec<String> = resolved.iter().map(|r| r.to_string()).collect();
                sorted.sort_unstable();
                if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                    return Err(Error::invalid(
                        Setting::Retriever,
                        format!("{:?} names {} twice", retriever.to_string(), w[0]),
                    ));
                }
                Ok(resolved)
            }
            single => Ok(vec![self.resolve_single(single)?]),
        }
    }

    fn resolve_single(&self, spec: &RetrieverSpec) -> Result<RetrieverSpec> {
        match spec {
            RetrieverSpec::Bm25 => {
                self.bm25_index()?;
                Ok(RetrieverSpec::Bm25)
            }
            RetrieverSpec::Dense(name) => {
                let model = self.dense_model(name.as_deref())?;
                Ok(RetrieverSpec::Dense(Some(model.info.name.clone())))
            }
            RetrieverSpec::Fusion(_) => Err(Error::invalid(
                Setting::Retriever,
                "a fusion cannot contain a fusion",
            )),
        }
    }

    pub(super) fn bm25_index(&self) -> Result<&Bm25Index> {
        self.bm25.as_ref().ok_or_else(|| {
            Error::invalid(
                Setting::Retriever,
                format!("bm25: {} has no BM25 index", self.dir.display()),
            )
        })
    }

    /// Searches with a text query. Dense retrievers need a registered query [`Encoder`].
    /// A query without any searchable term (symbols only) is an error for BM25.
    /// For fusion, a query without BM25 terms still gets the other retrievers' results.
    pub fn search(&self, query: &str, options: &SearchOptions) -> Result<Vec<ScoredDoc>> {
        match &options.retriever {
            RetrieverSpec::Bm25 => self.search_bm25(query, options.k),
            RetrieverSpec::Dense(name) => {
                let model = self.dense_model(name.as_deref())?;
                let vector = self.query_encoder(&model.info.name)?.embed_query(query)?;
                self.search_vector(&model.info.name, &vector, options)
            }
            RetrieverSpec::Fusion(_) => Ok(self
                .search_batch(&[query], options)?
                .pop()
                .unwrap_or_default()),
        }
    }

    /// True when `query` has at least one BM25 term (false: only symbols or stop words).
    pub fn has_searchable_terms(&self, query: &str) -> Result<bool> {
        Ok(!self.bm25_index()?.query_terms(query)?.is_empty())
    }

    /// BM25 top `k` for `query`.
    pub fn search_bm25(&self, query: &str, k: usize) -> Result<Vec<ScoredDoc>> {
        let bm25 = self.bm25_index()?;
        if bm25.query_terms(query)?.is_empty() {
            return Err(Error::invalid(
                Setting::Query,
                "no searchable terms (only symbols or stop words)",
            ));
        }
        let mut top = TopK::new(k, &self.ids);
        bm25.score_all(query, |ord, score| top.push(ord, score))?;
        Ok(self.hits(top.into_sorted()))
    }

    /// Dense top `options.k` for a query vector of model `name` (`""` = the only model), by
    /// HNSW (rescored exactly) or exact search.
    pub fn search_vector(
        &self,
        name: &str,
        vector: &[f32],
        options: &SearchOptions,
    ) -> Result<Vec<ScoredDoc>> {
        let model = self.dense_model((!name.is_empty()).then_some(name))?;
        check_vector(model, vector)?;
        let k = options.k;
        let graph = match options.ann {
            Ann::Exact => None,
            Ann::Hnsw if model.info.hnsw.is_none() => None,
            Ann::Hnsw => match self.graph(model) {
                Ok(graph) => Some(graph),
                Err(message) => {
                    tracing::warn!("{message}; using exact search");
                    None
                }
            },
        };
        let scored = match graph {
            None => flat_search(&model.matrix, &self.ids, vector, k),
            Some(graph) => {
                let mut buf = vec![0f32; model.info.dim];
                // The traversal ranks by f16 rows: the exact scores of twice the asked-for
                // candidates settle near-ties at the k-th place that the rounding decided.
                // An f16 matrix's rows are read from the graph's copy (the same bits, and
                // just traversed, so in the cache rather than in the memory map).
                let mut ef = options.ef_search.max(k);
                let half = model.matrix.dtype() == VectorDtype::F16;
                let mut wanted = k.saturating_mul(2).min(ef);
                // A refresh leaves removed rows in the graph (they still connect it), and they
                // are no answers: the search widens until it holds as many live candidates as
                // a graph without them would give, or has asked for every row.
                let live_wanted = wanted.min(self.ids.num_live());
                loop {
                    let mut top = TopK::new(k, &self.ids);
                    let mut live = 0;
                    for row in graph.search(vector, wanted, ef) {
                        if (row as usize) < model.matrix.rows() {
                            live += usize::from(!self.ids.is_removed(row));
                            let score = match model.matrix.row_f32(row as usize) {
                                Some(stored) => dot(stored, vector),
                                None if half => {
                                    graph.row_into(row, &mut buf);
                                    dot(&buf, vector)
                                }
                                None => {
                                    model.matrix.row_into(row as usize, &mut buf);
                                    dot(&buf, vector)
                                }
                            };
                            top.push(row, score);
                        }
                    }
                    if live >= live_wanted || wanted >= model.matrix.rows() {
                        break top.into_sorted();
                    }
                    wanted = wanted.saturating_mul(2);
                    ef = ef.saturating_mul(2).max(wanted);
                }
            }
        };
        Ok(self.hits(scored))
    }

    /// Dense top `options.k` for many query vectors of model `name`, in order: exact search of
    /// the whole batch on the GPU after `Engine::use_gpu_exact` (feature `cuda`; the same
    /// results), else [`Engine::search_vector`] per query, in parallel.
    pub fn search_vectors(
        &self,
        name: &str,
        vectors: &[&[f32]],
        options: &SearchOptions,
    ) -> Result<Vec<Vec<ScoredDoc>>> {
        use rayon::prelude::*;
        if let Some(hits) = self.search_vectors_gpu(name, vectors, options)? {
            return Ok(hits);
        }
        vectors
            .par_iter()
            .map(|vector| self.search_vector(name, vector, options))
            .collect()
    }

    /// Uploads every f16 dense matrix to CUDA device `ordinal` (NVRTC compiles the kernels for
    /// it): exact dense searches of [`Engine::search_batch`] and [`Engine::search_vectors`] then
    /// run there, with the same results. An f32 matrix stays on the CPU (with a warning).
    #[cfg(feature = "cuda")]
    pub fn use_gpu_exact(&mut self, ordinal: usize) -> Result<()> {
        for (name, model) in &self.dense {
            if model.matrix.dtype() != crate::dataset::VectorDtype::F16 {
                tracing::warn!("dense:{name}: f32 vectors; exact search stays on the CPU");
                continue;
            }
            let gpu = crate::index::GpuFlat::new(&model.matrix, ordinal)?;
            tracing::info!(
                "dense:{name}: {} x {} on {}",
                model.matrix.rows(),
                model.matrix.dim(),
                gpu.device()
            );
            self.gpu.insert(name.clone(), gpu);
        }
        Ok(())
    }

    /// The GPU's hits for a batch of exact searches, `None` when this search is not for it.
    pub(super) fn search_vectors_gpu(
        &self,
        name: &str,
        vectors: &[&[f32]],
        options: &SearchOptions,
    ) -> Result<Option<Vec<Vec<ScoredDoc>>>> {
        #[cfg(feature = "cuda")]
        {
            if options.ann != Ann::Exact || self.gpu.is_empty() {
                return Ok(None);
            }
            let model = self.dense_model((!name.is_empty()).then_some(name))?;
            let Some(gpu) = self.gpu.get(&model.info.name) else {
                return Ok(None);
            };
            for vector in vectors {
                check_vector(model, vector)?;
            }
            let scored = gpu.search(&model.matrix, &self.ids, vectors, options.k)?;
            Ok(Some(scored.into_iter().map(|s| self.hits(s)).collect()))
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (name, vectors, options);
            Ok(None)
        }
    }

    fn graph<'a>(&'a self, model: &'a DenseModel) -> std::result::Result<&'a HnswGraph, String> {
        model
            .graph
            .get_or_init(|| {
                let settings = model
                    .info
                    .hnsw
                    .ok_or_else(|| "no HNSW settings".to_string())?;
                let dir = self
                    .dir
                    .join(layout::DENSE_DIR)
                    .join(&model.info.name)
                    .join(layout::HNSW_DIR);
                let key = cache_key(
                    &self.manifest.corpus.fnv1a64,
                    &model.info.name,
                    self.ids.len(),
                    &settings,
                );
                if let Some(graph) = HnswGraph::load(&dir, &key, &model.matrix, &settings)
                    .map_err(|e| e.to_string())?
                {
                    return Ok(graph);
                }
                tracing::warn!("{}: rebuilding the HNSW graph", dir.display());
                let graph =
                    HnswGraph::build(&model.matrix, &settings, &crate::progress::NoProgress)
                        .map_err(|e| e.to_string())?;
                // Best effort: the index may be read-only; the graph still serves this process.
                let fresh = dir.with_extension("new");
                let _ = std::fs::remove_dir_all(&fresh);
                if graph.save(&fresh, &key).is_ok() {
                    let _ = std::fs::remove_dir_all(&dir);
                    let _ = std::fs::rename(&fresh, &dir);
                }
                Ok(graph)
            })
            .as_ref()
            .map_err(|e| format!("dense:{}: {e}", model.info.name))
    }

    pub(super) fn hits(&self, scored: Vec<(u32, f32)>) -> Vec<ScoredDoc> {
        scored
            .into_iter()
            .map(|(ord, score)| ScoredDoc {
                doc_id: self.ids.id(ord).to_string(),
                score: f64::from(score),
            })
            .collect()
    }

    /// A [`Retriever`] view of `retriever` (`bm25`, `dense`, `dense:NAME`, `fusion...`) on this
    /// engine, resolved ([`Engine::resolve`]).
    pub fn retriever<'a>(
        &'a self,
        retriever: &RetrieverSpec,
        options: &SearchOptions,
    ) -> Result<EngineRetriever<'a>> {
        let name = self.resolve(retriever)?;
        Ok(EngineRetriever {
            engine: self,
            options: SearchOptions {
                retriever: name,
                ..options.clone()
            },
        })
    }
}

/// A query vector must have the model's dimension and finite values.
fn check_vector(model: &DenseModel, vector: &[f32]) -> Result<()> {
    if vector.len() != model.info.dim {
        return Err(Error::invalid(
            Setting::QueryVector,
            format!(
                "dimension {} for model {:?} of dimension {}",
                vector.len(),
                model.info.name,
                model.info.dim
            ),
        ));
    }
    if vector.iter().any(|v| !v.is_finite()) {
        return Err(Error::invalid(
            Setting::QueryVector,
            "contains NaN or infinity",
        ));
    }
    Ok(())
}

/// One retriever of an [`Engine`], as a [`Retriever`].
pub struct EngineRetriever<'a> {
    pub(super) engine: &'a Engine,
    /// `retriever` is the resolved name (`dense:NAME`, `fusion:bm25,dense:NAME`).
    pub(super) options: SearchOptions,
}

impl Retriever for EngineRetriever<'_> {
    fn name(&self) -> String {
        self.options.retriever.to_string()
    }

    fn retrieve(&self, query: &str, k: usize) -> Result<Vec<ScoredDoc>> {
        let options = SearchOptions {
            k,
            ..self.options.clone()
        };
        self.engine.search(query, &options)
    }
}
