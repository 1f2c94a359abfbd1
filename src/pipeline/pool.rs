//! Pooling (paper §3.4): for every question, inference-setting queries (the question, the LLM
//! sub-questions concatenated, the LLM closed-book answer) and oracle-setting queries (the
//! accepted answer, the nuggets concatenated), each run through every retriever and their
//! normalized-sum fusion. The judgment pool of a question is the union of the top
//! `pool_depth` of each (technique, retriever) list, in a fixed order (technique, retriever,
//! rank), first occurrence kept. With a reranker, each technique's runs are followed by their
//! `+rerank` versions, pooled the same way.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, StageOutcome, layout, read_by_query};
use crate::dataset::read_questions;
use crate::dataset::{
    AtomicWriter, NuggetsRecord, PoolRow, QueryId, Question, Run, ScoredDoc, VariantsRecord,
};
use crate::embed::resolve_model;
use crate::error::Error;
use crate::error::Result;
use crate::progress::Progress;
use crate::rerank::{CrossEncoder, RerankerOptions};
use crate::search::{DocumentTexts, QueryEncoderOptions};
use crate::search::{
    Engine, FusionOptions, Pipeline, QueryItem, Rerank, RetrieverSpec, SearchOptions, fuse,
};

/// A way of turning a question into a retrieval query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Technique {
    /// Title + body, as a user asks.
    Question,
    /// The LLM's sub-questions, concatenated.
    SubQuestions,
    /// The LLM's closed-book answer (HyDE-like).
    ClosedBookAnswer,
    /// The accepted Stack Overflow answer (oracle).
    Answer,
    /// The nuggets, concatenated (oracle).
    Nuggets,
}

impl Technique {
    /// Every technique, in pool order.
    pub const ALL: [Technique; 5] = [
        Technique::Question,
        Technique::SubQuestions,
        Technique::ClosedBookAnswer,
        Technique::Answer,
        Technique::Nuggets,
    ];

    /// `inference` (needs only the question) or `oracle` (uses the answer).
    pub fn setting(self) -> &'static str {
        match self {
            Technique::Question | Technique::SubQuestions | Technique::ClosedBookAnswer => {
                "inference"
            }
            Technique::Answer | Technique::Nuggets => "oracle",
        }
    }

    /// The name used in run file names.
    pub fn name(self) -> &'static str {
        match self {
            Technique::Question => "question",
            Technique::SubQuestions => "subquestions",
            Technique::ClosedBookAnswer => "closed_book_answer",
            Technique::Answer => "answer",
            Technique::Nuggets => "nuggets",
        }
    }
}

/// The query text of every question for one technique; questions whose LLM output failed or is
/// empty have no query for the techniques that need it.
pub fn technique_queries(
    technique: Technique,
    questions: &[Question],
    nuggets: &BTreeMap<QueryId, NuggetsRecord>,
    variants: &BTreeMap<QueryId, VariantsRecord>,
) -> Vec<(String, String)> {
    let mut queries = Vec::new();
    for q in questions {
        let text = match technique {
            Technique::Question => q.query_text(),
            Technique::SubQuestions => variants
                .get(&q.query_id)
                .filter(|v| v.error.is_none())
                .map(|v| v.sub_questions.join("\n"))
                .unwrap_or_default(),
            Technique::ClosedBookAnswer => variants
                .get(&q.query_id)
                .filter(|v| v.error.is_none())
                .map(|v| v.closed_book_answer.clone())
                .unwrap_or_default(),
            Technique::Answer => q.answer_text.clone(),
            Technique::Nuggets => nuggets
                .get(&q.query_id)
                .filter(|n| n.error.is_none())
                .map(|n| {
                    n.nuggets
                        .iter()
                        .map(|x| x.text.as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default(),
        };
        if !text.trim().is_empty() {
            queries.push((q.query_id.to_string(), text));
        }
    }
    queries
}

/// A retriever as pooling uses it: the engine's name and the label in file names.
#[derive(Debug, Clone)]
pub struct PoolRetriever {
    /// The engine's retriever (`bm25`, `dense:NAME`).
    pub retriever: RetrieverSpec,
    /// Label in run names (`bm25`, the model name, or `fusion`).
    pub label: String,
}

/// Pooling settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// The retrievers, in pool order.
    pub retrievers: Vec<PoolRetriever>,
    /// Fuse the retrievers (when two or more).
    pub fusion: bool,
    /// Documents pooled per list.
    pub pool_depth: usize,
    /// Depth of every run, and of each run taken into the fusion.
    pub run_depth: usize,
}

/// What pooling produced.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PoolSummary {
    /// Run files written (`{setting}.{technique}.{retriever}`).
    pub runs: Vec<String>,
    /// Questions with a pool.
    pub questions: usize,
    /// Pooled (question, document) pairs.
    pub pooled_documents: usize,
}

/// Runs every technique through every retriever (and, with a reranker, reranks every run: each
/// run of the pool also gets a `{retriever}+rerank` run), writes `runs_dir/{name}.trec` for
/// each list and the pool (JSONL [`PoolRow`]s, by question id) to `pool_path`.
pub fn pool(
    engine: &Engine,
    config: &PoolConfig,
    queries_by_technique: &[(Technique, Vec<(String, String)>)],
    reranker: Option<&Rerank>,
    runs_dir: &Path,
    pool_path: &Path,
    progress: &dyn Progress,
) -> Result<PoolSummary> {
    let mut summary = PoolSummary::default();
    let total: usize = queries_by_technique
        .iter()
        .map(|(_, q)| q.len())
        .sum::<usize>()
        * config.retrievers.len();
    progress.begin("pooling", Some(total as u64));
    let mut lists: Vec<(Technique, Vec<(String, Run)>)> = Vec::new();
    for (technique, queries) in queries_by_technique {
        let mut runs: Vec<(String, Run)> = Vec::new();
        for retriever in &config.retrievers {
            let run = retrieve_run(engine, &retriever.retriever, queries, config.run_depth)?;
            progress.advance(queries.len() as u64);
            runs.push((retriever.label.clone(), run));
        }
        if config.fusion && runs.len() >= 2 {
            let refs: Vec<&Run> = runs.iter().map(|(_, r)| r).collect();
            let options = FusionOptions {
                depth: config.run_depth,
                ..FusionOptions::default()
            };
            let fused = fuse(&refs, &options, "fusion")?;
            runs.push(("fusion".to_string(), fused));
        }
        lists.push((*technique, runs));
    }
    progress.finish();
    if let Some(reranker) = reranker {
        rerank_lists(&mut lists, queries_by_technique, reranker, progress)?;
    }
    // Pool lists in order: (question -> docs), filled technique by technique.
    let mut pools: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut seen: BTreeMap<String, HashSet<String>> = BTreeMap::new();
    for (technique, runs) in &lists {
        for (label, run) in runs {
            let name = format!("{}.{}.{}", technique.setting(), technique.name(), label);
            run.write_trec(
                runs_dir.join(format!("{name}.trec")),
                &name,
                config.run_depth,
            )?;
            summary.runs.push(name);
            for ranking in run.rankings() {
                let mut docs: Vec<&ScoredDoc> = ranking.docs.iter().collect();
                docs.sort_by(|a, b| {
                    crate::dataset::score_key(b.score)
                        .total_cmp(&crate::dataset::score_key(a.score))
                });
                let pool = pools.entry(ranking.query_id.clone()).or_default();
                let seen = seen.entry(ranking.query_id.clone()).or_default();
                for doc in docs.into_iter().take(config.pool_depth) {
                    if seen.insert(doc.doc_id.clone()) {
                        pool.push(doc.doc_id.clone());
                    }
                }
            }
        }
    }
    let mut writer = AtomicWriter::create(pool_path)?;
    for (query_id, doc_ids) in pools {
        if doc_ids.is_empty() {
            continue;
        }
        summary.questions += 1;
        summary.pooled_documents += doc_ids.len();
        writer.write_json_line(&PoolRow {
            query_id: query_id.into(),
            doc_ids,
        })?;
    }
    writer.commit()?;
    Ok(summary)
}

/// Appends `{label}+rerank` after each technique's runs: the top `depth` of every ranking
/// rescored with the query the run was retrieved with. The corpus is read once, for every
/// document any run puts in its top `depth`.
fn rerank_lists(
    lists: &mut [(Technique, Vec<(String, Run)>)],
    queries_by_technique: &[(Technique, Vec<(String, String)>)],
    reranker: &Rerank,
    progress: &dyn Progress,
) -> Result<()> {
    let texts: Vec<HashMap<String, String>> = queries_by_technique
        .iter()
        .map(|(_, queries)| queries.iter().cloned().collect())
        .collect();
    let mut jobs = Vec::new();
    for ((technique, runs), texts) in lists.iter().zip(&texts) {
        for (label, run) in runs {
            jobs.push((run, texts, format!("rerank {}.{label}", technique.name())));
        }
    }
    let mut reranked = reranker.rerank_runs(&jobs, progress)?.into_iter();
    for (_, runs) in lists.iter_mut() {
        let labels: Vec<String> = runs.iter().map(|(label, _)| label.clone()).collect();
        for label in labels {
            let run = reranked.next().unwrap_or_default();
            runs.push((format!("{label}+rerank"), run));
        }
    }
    Ok(())
}

/// One retriever over every query (batched: one encoder pass per dense model); a query
/// without searchable terms gets no ranking. Rankings are in query order.
fn retrieve_run(
    engine: &Engine,
    retriever: &RetrieverSpec,
    queries: &[(String, String)],
    k: usize,
) -> Result<Run> {
    let pipeline = Pipeline {
        retriever: engine.retriever(retriever, &SearchOptions::default())?,
        rerank: None,
    };
    let items: Vec<QueryItem> = queries
        .iter()
        .map(|(id, text)| QueryItem {
            id: id.as_str().into(),
            text: text.clone(),
        })
        .collect();
    Ok(pipeline.first_stage(&items, k)?.0)
}

impl Builder<'_> {
    pub(super) fn retrievers(&self, engine: &Engine) -> Vec<PoolRetriever> {
        let mut retrievers = Vec::new();
        if self.config.retrieval.bm25 {
            retrievers.push(PoolRetriever {
                retriever: RetrieverSpec::Bm25,
                label: "bm25".into(),
            });
        }
        for dense in &engine.manifest().dense {
            retrievers.push(PoolRetriever {
                retriever: RetrieverSpec::Dense(Some(dense.name.clone())),
                label: dense.name.clone(),
            });
        }
        retrievers
    }

    pub(super) fn pool(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let manifest = format!("{}/{}", layout::INDEX, crate::index::MANIFEST_FILE);
        let fingerprint = stage_fingerprint("pool")
            .json("retrieval", &self.config.retrieval)
            .maybe_fingerprint("questions", self.hash(layout::QUESTIONS))
            .maybe_fingerprint("nuggets", self.hash(layout::NUGGETS))
            .maybe_fingerprint("variants", self.hash(layout::VARIANTS))
            .maybe_fingerprint("index", self.hash(&manifest))
            .json("rerank", &self.config.rerank)
            .finish();
        self.stage(
            "pool",
            fingerprint,
            &[layout::RUNS, layout::POOL],
            on_stage,
            |b| {
                let questions = read_questions(&b.path(layout::QUESTIONS))?;
                let nuggets: BTreeMap<QueryId, NuggetsRecord> =
                    read_by_query(&b.path(layout::NUGGETS), |r: &NuggetsRecord| &r.query_id)?;
                let variants: BTreeMap<QueryId, VariantsRecord> =
                    read_by_query(&b.path(layout::VARIANTS), |r: &VariantsRecord| &r.query_id)?;
                let queries: Vec<(Technique, Vec<(String, String)>)> = Technique::ALL
                    .iter()
                    .map(|&t| (t, technique_queries(t, &questions, &nuggets, &variants)))
                    .collect();
                let engine = Engine::open_with_encoders(
                    b.path(layout::INDEX),
                    &QueryEncoderOptions::default(),
                )?;
                let config = PoolConfig {
                    retrievers: b.retrievers(&engine),
                    fusion: b.config.retrieval.fusion,
                    pool_depth: b.config.retrieval.pool_depth,
                    run_depth: b.config.retrieval.fusion_depth,
                };
                let runs_dir = b.path(layout::RUNS);
                if runs_dir.exists() {
                    std::fs::remove_dir_all(&runs_dir).map_err(|e| Error::io(&runs_dir, e))?;
                }
                let cross_encoder = match &b.config.rerank {
                    Some(rerank) => Some(CrossEncoder::load(
                        &resolve_model(&rerank.model)?,
                        &RerankerOptions {
                            max_length: rerank.max_length,
                            ..RerankerOptions::default()
                        },
                    )?),
                    None => None,
                };
                let corpus = b.path(layout::CORPUS);
                let reranker = cross_encoder.as_ref().zip(b.config.rerank.as_ref()).map(
                    |(reranker, rerank)| Rerank {
                        reranker,
                        depth: rerank.depth,
                        documents: DocumentTexts::Corpus(&corpus),
                    },
                );
                let summary = pool(
                    &engine,
                    &config,
                    &queries,
                    reranker.as_ref(),
                    &runs_dir,
                    &b.path(layout::POOL),
                    progress,
                )?;
                Ok(format!(
                    "{} runs, {} documents pooled for {} questions",
                    summary.runs.len(),
                    summary.pooled_documents,
                    summary.questions
                ))
            },
        )
    }
}
