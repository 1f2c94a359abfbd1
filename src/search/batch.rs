//! Many queries at once, and fusion as a retriever: [`Engine::search_batch`] encodes the
//! queries of each dense model in one call (the encoder's length-sorted token-budget batches,
//! not one forward per query), searches the queries in parallel (rayon), and fuses per query
//! with [`fuse`] (the same code, so `--retriever fusion` equals `freshstack fuse` over the
//! single runs). Output order is the input order, whatever the thread count.

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use crate::dataset::{Run, ScoredDoc};
use crate::error::{Result, Setting};
use crate::search::fusion::{FusionOptions, fuse};
use crate::search::{Engine, Explained, RetrieverScore, SearchOptions};

/// The query id used inside the one-query runs handed to [`fuse`].
const QUERY: &str = "q";

impl Engine {
    /// Searches every query with `options`, results in query order. For BM25, a query without
    /// searchable terms (symbols or stop words only) gets no results rather than an error, so
    /// one odd query does not sink a batch ([`Engine::has_searchable_terms`] tells them apart).
    pub fn search_batch(
        &self,
        queries: &[&str],
        options: &SearchOptions,
    ) -> Result<Vec<Vec<ScoredDoc>>> {
        Ok(self
            .search_batch_explained(queries, options, false)?
            .into_iter()
            .map(|docs| docs.into_iter().map(|e| e.doc).collect())
            .collect())
    }

    /// [`Engine::search`] with, for fusion, each document's place in every fused retriever
    /// (empty places for a single retriever).
    pub fn search_explained(&self, query: &str, options: &SearchOptions) -> Result<Vec<Explained>> {
        if options.retriever.is_fusion() {
            return Ok(self
                .search_batch_explained(&[query], options, true)?
                .pop()
                .unwrap_or_default());
        }
        Ok(self
            .search(query, options)?
            .into_iter()
            .map(|doc| Explained {
                doc,
                places: Vec::new(),
            })
            .collect())
    }

    /// [`Engine::search_batch`], recording the fused documents' places when `explain` is set.
    fn search_batch_explained(
        &self,
        queries: &[&str],
        options: &SearchOptions,
        explain: bool,
    ) -> Result<Vec<Vec<Explained>>> {
        let components = self.components(&options.retriever)?;
        let fused = options.retriever.is_fusion();
        if fused && options.fusion_depth == 0 {
            return Err(crate::error::Error::invalid(
                Setting::FusionDepth,
                "must be at least 1",
            ));
        }
        let depth = if fused {
            options.fusion_depth
        } else {
            options.k
        };
        // One encoder call per dense model for the whole batch.
        let mut vectors: Vec<Option<Vec<Vec<f32>>>> = Vec::with_capacity(components.len());
        for component in &components {
            vectors.push(match component.dense_model() {
                Some(model) => {
                    let encoded = self.query_encoder(model)?.embed_queries(queries)?;
                    if encoded.len() != queries.len() {
                        return Err(crate::error::Error::model(
                            model,
                            format!("{} vectors for {} queries", encoded.len(), queries.len()),
                        ));
                    }
                    Some(encoded)
                }
                None => None,
            });
        }
        let single = SearchOptions {
            k: depth,
            ..options.clone()
        };
        // Exact dense searches the GPU takes (feature `cuda`), all queries at once.
        let mut on_gpu: Vec<Option<Vec<Vec<ScoredDoc>>>> = Vec::with_capacity(components.len());
        for (component, vectors) in components.iter().zip(&vectors) {
            on_gpu.push(match (component.dense_model(), vectors) {
                (Some(model), Some(vectors)) => {
                    let refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
                    self.search_vectors_gpu(model, &refs, &single)?
                }
                _ => None,
            });
        }
        let names: Vec<String> = components.iter().map(|c| c.to_string()).collect();
        let fusion = FusionOptions {
            method: options.fusion_method,
            depth,
            weights: options.fusion_weights.clone(),
            round_digits: None,
        };
        (0..queries.len())
            .into_par_iter()
            .map(|q| {
                let lists = components
                    .iter()
                    .zip(&vectors)
                    .zip(&on_gpu)
                    .map(|((component, vectors), on_gpu)| {
                        match (component.dense_model(), vectors) {
                            _ if on_gpu.is_some() => {
                                Ok(on_gpu.as_ref().map(|l| l[q].clone()).unwrap_or_default())
                            }
                            (Some(model), Some(vectors)) => {
                                self.search_vector(model, &vectors[q], &single)
                            }
                            _ => {
                                if self.has_searchable_terms(queries[q])? {
                                    self.search_bm25(queries[q], depth)
                                } else {
                                    Ok(Vec::new())
                                }
                            }
                        }
                    })
                    .collect::<Result<Vec<Vec<ScoredDoc>>>>()?;
                if fused {
                    fuse_lists(&names, &lists, &fusion, options.k, explain)
                } else {
                    Ok(lists
                        .into_iter()
                        .next()
                        .unwrap_or_default()
                        .into_iter()
                        .map(|doc| Explained {
                            doc,
                            places: Vec::new(),
                        })
                        .collect())
                }
            })
            .collect()
    }
}

/// Fuses one query's per-retriever lists with [`fuse`], keeping the best `k`; with `explain`,
/// each with its rank and raw score in every retriever that returned it.
fn fuse_lists(
    names: &[String],
    lists: &[Vec<ScoredDoc>],
    options: &FusionOptions,
    k: usize,
    explain: bool,
) -> Result<Vec<Explained>> {
    let runs: Vec<Run> = names
        .iter()
        .zip(lists)
        .map(|(name, docs)| {
            let mut run = Run::new(name.as_str());
            if !docs.is_empty() {
                run.push_ranking(QUERY, docs.clone());
            }
            run
        })
        .collect();
    let refs: Vec<&Run> = runs.iter().collect();
    let fused = fuse(&refs, options, "fusion")?;
    let Some(ranking) = fused.get(QUERY) else {
        return Ok(Vec::new());
    };
    // Only the top `depth` of each list was fused: the places recorded are within it.
    let places: Vec<FxHashMap<&str, (usize, f64)>> = if explain {
        lists
            .iter()
            .map(|docs| {
                docs.iter()
                    .take(options.depth)
                    .enumerate()
                    .map(|(i, d)| (d.doc_id.as_str(), (i + 1, d.score)))
                    .collect()
            })
            .collect()
    } else {
        Vec::new()
    };
    Ok(ranking
        .docs
        .iter()
        .take(k)
        .map(|doc| Explained {
            doc: doc.clone(),
            places: names
                .iter()
                .zip(&places)
                .filter_map(|(name, places)| {
                    places
                        .get(doc.doc_id.as_str())
                        .map(|&(rank, score)| RetrieverScore {
                            retriever: name.clone(),
                            rank,
                            score,
                        })
                })
                .collect(),
        })
        .collect())
}
