//! First stage + optional rerank: a [`Pipeline`] turns queries into one [`Run`], the one
//! ranking shape of the crate. `retrieve`, `search`, pooling and the benchmark all go through
//! it (the benchmark and pooling through [`Pipeline::first_stage`] and [`Rerank::rerank_runs`],
//! because they fuse and rerank many runs at once).
//!
//! Guarantees: rankings are in query order, each best first (the engine's order); a query
//! without results has no ranking; reranking keeps the documents past its depth below the
//! reranked ones ([`rerank_run`]); nothing depends on the thread count.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::dataset::Run;
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;
use crate::rerank::{Reranker, read_document_texts, rerank_run, top_document_ids};
use crate::search::{EngineRetriever, Explained, QueryItem, RetrieverScore, SearchOptions};

/// Queries searched per [`Engine::search_batch`](crate::search::Engine::search_batch) call by
/// [`Pipeline::run`]: each slice is one encoder batch plan and one parallel search, and moves
/// the progress bar.
const QUERIES_PER_SLICE: usize = 1024;

/// The query id of the one ranking [`Pipeline::explain`] reranks.
const QUERY: &str = "query";

/// Where a [`Rerank`] finds the texts of the documents it rescores.
#[derive(Debug, Clone, Copy)]
pub enum DocumentTexts<'a> {
    /// A corpus JSONL (`_id`, `title`, `text`; the text is `title + " " + text`), streamed once
    /// per [`Rerank::rerank_runs`] call for the documents it needs.
    Corpus(&'a Path),
    /// Texts already in memory, by document id.
    Loaded(&'a HashMap<String, String>),
}

/// A second stage: a cross-encoder rescoring the top `depth` documents of each ranking.
#[derive(Clone, Copy)]
pub struct Rerank<'a> {
    /// The cross-encoder.
    pub reranker: &'a dyn Reranker,
    /// Documents per ranking rescored (paper §6: 50); the rest keep their order below them.
    pub depth: usize,
    /// The documents' texts.
    pub documents: DocumentTexts<'a>,
}

impl Rerank<'_> {
    /// Reranks each `(run, query texts by question id, progress label)`, reading the document
    /// texts once for all of them. Each output run is named `{run}+rerank` and holds every
    /// document of its input run.
    pub fn rerank_runs(
        &self,
        runs: &[(&Run, &HashMap<String, String>, String)],
        progress: &dyn Progress,
    ) -> Result<Vec<Run>> {
        let read;
        let documents = match self.documents {
            DocumentTexts::Loaded(texts) => texts,
            DocumentTexts::Corpus(corpus) => {
                let mut wanted: HashSet<&str> = HashSet::new();
                for (run, _, _) in runs {
                    wanted.extend(top_document_ids(run, self.depth));
                }
                read = read_document_texts(corpus, &wanted)?;
                &read
            }
        };
        let mut out = Vec::with_capacity(runs.len());
        for (run, queries, label) in runs {
            progress.begin(label, None);
            let (reranked, _) =
                rerank_run(self.reranker, run, queries, documents, self.depth, progress)?;
            progress.finish();
            out.push(reranked);
        }
        Ok(out)
    }
}

/// What [`Pipeline::run`] returns.
#[derive(Debug, Clone)]
pub struct Retrieved {
    /// One ranking per query that got results, in query order, at most `k` documents each;
    /// named after the first stage (`bm25`, `dense:NAME`, `fusion:...`), `+rerank` after a
    /// rerank.
    pub run: Run,
    /// Queries the first stage found nothing for (for BM25: no searchable term).
    pub unsearchable: usize,
}

/// A first-stage retriever of an engine and an optional reranker.
pub struct Pipeline<'a> {
    /// The first stage (its name and search settings; `k` comes with each call).
    pub retriever: EngineRetriever<'a>,
    /// The second stage, if any.
    pub rerank: Option<Rerank<'a>>,
}

impl Pipeline<'_> {
    /// Documents per query the first stage returns so that `k` survive reranking.
    pub fn first_stage_k(&self, k: usize) -> usize {
        match &self.rerank {
            Some(rerank) => k.max(rerank.depth),
            None => k,
        }
    }

    fn options(&self, k: usize) -> SearchOptions {
        SearchOptions {
            k,
            ..self.retriever.options.clone()
        }
    }

    /// The best `k` documents of every query (first stage, then the rerank), searched a slice
    /// of queries at a time; `progress` advances by the queries of each slice (the caller
    /// begins and finishes it).
    pub fn run(
        &self,
        queries: &[QueryItem],
        k: usize,
        progress: &dyn Progress,
    ) -> Result<Retrieved> {
        let options = self.options(self.first_stage_k(k));
        let mut run = Run::new(self.retriever.options.retriever.to_string());
        let mut unsearchable = 0;
        for slice in queries.chunks(QUERIES_PER_SLICE) {
            let texts: Vec<&str> = slice.iter().map(|q| q.text.as_str()).collect();
            let results = self.retriever.engine.search_batch(&texts, &options)?;
            for (query, docs) in slice.iter().zip(results) {
                if docs.is_empty() {
                    unsearchable += 1;
                } else {
                    run.push_ranking(&query.id, docs);
                }
            }
            progress.advance(slice.len() as u64);
        }
        Ok(Retrieved {
            run: self.rerank_top(run, queries, k, progress)?,
            unsearchable,
        })
    }

    /// [`Pipeline::run`] of a dense first stage from precomputed query vectors (`vectors[i]`
    /// is `queries[i]`'s, of the retriever's model) instead of encoding the texts; the texts
    /// still feed the rerank.
    pub fn run_vectors(
        &self,
        queries: &[QueryItem],
        vectors: &[&[f32]],
        k: usize,
        progress: &dyn Progress,
    ) -> Result<Retrieved> {
        let name = &self.retriever.options.retriever;
        let Some(model) = name.dense_model() else {
            return Err(Error::invalid(
                Setting::QueryVectors,
                format!("for a single dense retriever, not {name}"),
            ));
        };
        if vectors.len() != queries.len() {
            return Err(Error::invalid(
                Setting::QueryVectors,
                format!("{} vectors for {} queries", vectors.len(), queries.len()),
            ));
        }
        let options = self.options(self.first_stage_k(k));
        let results = self
            .retriever
            .engine
            .search_vectors(model, vectors, &options)?;
        let mut run = Run::new(name.to_string());
        for (query, docs) in queries.iter().zip(results) {
            if !docs.is_empty() {
                run.push_ranking(&query.id, docs);
            }
        }
        Ok(Retrieved {
            run: self.rerank_top(run, queries, k, progress)?,
            unsearchable: 0,
        })
    }

    /// The first stage alone over every query in one batch (one encoder pass per dense model),
    /// the best `k` each: the run of pooling and the benchmark, which fuse and rerank many such
    /// runs together. Returns the run and how many queries got no results.
    pub fn first_stage(&self, queries: &[QueryItem], k: usize) -> Result<(Run, usize)> {
        let texts: Vec<&str> = queries.iter().map(|q| q.text.as_str()).collect();
        let results = self
            .retriever
            .engine
            .search_batch(&texts, &self.options(k))?;
        let mut run = Run::new(self.retriever.options.retriever.to_string());
        let mut unsearchable = 0;
        for (query, docs) in queries.iter().zip(results) {
            if docs.is_empty() {
                unsearchable += 1;
            } else {
                run.push_ranking(&query.id, docs);
            }
        }
        Ok((run, unsearchable))
    }

    /// With a rerank: reranks `run` with the queries' texts and keeps the best `k` of each
    /// ranking. Without: `run` as it is (the first stage already returned `k`).
    fn rerank_top(
        &self,
        run: Run,
        queries: &[QueryItem],
        k: usize,
        progress: &dyn Progress,
    ) -> Result<Run> {
        let Some(rerank) = &self.rerank else {
            return Ok(run);
        };
        let texts: HashMap<String, String> = queries
            .iter()
            .map(|q| (q.id.to_string(), q.text.clone()))
            .collect();
        let reranked = rerank
            .rerank_runs(&[(&run, &texts, "rerank".to_string())], progress)?
            .pop()
            .unwrap_or_default();
        let mut top = Run::new(reranked.name.as_str());
        for ranking in reranked.rankings() {
            top.push_ranking(
                &ranking.query_id,
                ranking.docs.iter().take(k).cloned().collect(),
            );
        }
        Ok(top)
    }

    /// One query's best `k`, each document with its places: for fusion, its rank and score in
    /// every fused retriever; after a rerank, first its place in the first stage.
    pub fn explain(
        &self,
        query: &str,
        k: usize,
        progress: &dyn Progress,
    ) -> Result<Vec<Explained>> {
        let first = self
            .retriever
            .engine
            .search_explained(query, &self.options(self.first_stage_k(k)))?;
        if self.rerank.is_none() {
            return Ok(first);
        }
        let first_stage = self.retriever.options.retriever.to_string();
        let mut run = Run::new(first_stage.as_str());
        run.push_ranking(QUERY, first.iter().map(|e| e.doc.clone()).collect());
        let item = QueryItem {
            id: QUERY.into(),
            text: query.to_string(),
        };
        let reranked = self.rerank_top(run, std::slice::from_ref(&item), k, progress)?;
        let places: HashMap<&str, (usize, &Explained)> = first
            .iter()
            .enumerate()
            .map(|(i, e)| (e.doc.doc_id.as_str(), (i + 1, e)))
            .collect();
        let Some(ranking) = reranked.get(QUERY) else {
            return Ok(Vec::new());
        };
        ranking
            .docs
            .iter()
            .map(|doc| {
                let &(rank, first) = places.get(doc.doc_id.as_str()).ok_or_else(|| {
                    Error::invalid(
                        Setting::Rerank,
                        "returned a document the first stage did not",
                    )
                })?;
                let mut places = vec![RetrieverScore {
                    retriever: first_stage.clone(),
                    rank,
                    score: first.doc.score,
                }];
                places.extend(first.places.iter().cloned());
                Ok(Explained {
                    doc: doc.clone(),
                    places,
                })
            })
            .collect()
    }
}
