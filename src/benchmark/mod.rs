//! The benchmark runner: evaluate retrievers on published FreshStack datasets (or a local
//! export), offline, in one call.
//!
//! For each topic: load the questions and corpus ([`TopicSpec`], local JSONL/Parquet or the
//! Hugging Face cache), build or reuse one index per retriever through the engine's API (keyed
//! by the corpus hash and the model or BM25 settings), retrieve the top k for every question
//! (`query_title + " " + query_text`, in each dense model's query template), fuse when asked
//! (normalized sum of the top 100, as the paper), evaluate alpha-nDCG@10, Coverage@20 and
//! Recall@50 with [`crate::eval`], and write `runs/TOPIC/RETRIEVER.trec`, `results.json` and
//! `results.md` under the output directory.
//!
//! Guarantees: the same inputs give byte-identical runs and results whatever the thread count
//! (exact search, ties by document id); outputs are written atomically. Imports `dataset`,
//! `embed`, `index`, `search` and `eval`.

mod html;
mod paper;
mod results;
mod retrieve;
mod topic;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub use paper::{PaperResults, PaperRow};
pub use results::{BenchmarkResults, NotesSummary, RunResult, TopicSummary};
pub use retrieve::BenchmarkRetriever;
pub use topic::{JudgedCheck, TopicData, TopicSpec, check_judged, load_topic};

use crate::dataset::{NuggetQrels, Run, write_json_atomic};
use crate::embed::{EncoderOptions, resolve_model};
use crate::error::{Error, Result, Setting};
use crate::eval::{EvalConfig, Judgments, evaluate};
use crate::index::Bm25Settings;
use crate::progress::Progress;
use crate::rerank::{CrossEncoder, RerankerOptions};
use crate::search::{DocumentTexts, FusionOptions, Rerank, fuse};
use retrieve::{RetrieverKind, prepare_index, retrieve, truncate, write_corpus};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchmarkConfig {
    /// The topics, in column order.
    pub topics: Vec<TopicSpec>,
    /// Retrievers, in row order: `bm25` and/or `dense:[NAME=]MODEL[#WIDTH]` (a model directory
    /// or a Hugging Face model id in the local cache, cut to Matryoshka width WIDTH when written;
    /// the row is `dense:NAME`, NAME defaulting to the directory's or id's last component, then
    /// `-WIDTH`).
    pub retrievers: Vec<BenchmarkRetriever>,
    /// Also fuse all retrievers (normalized sum of each one's top 100), as row `fusion`.
    pub fusion: bool,
    /// A cross-encoder (model directory or cached id) reranking the top 50 of every run; each
    /// reranked run is its own row, `NAME+rerank`.
    pub rerank: Option<String>,
    /// Results per question in the runs.
    pub k: usize,
    /// Where runs, indexes and results go.
    pub out_dir: PathBuf,
    /// The Hugging Face hub cache to read hub datasets from.
    pub hub_cache: PathBuf,
    /// Hub split of the questions (`test`).
    pub queries_split: String,
    /// Hub split of the corpus (`train`).
    pub corpus_split: String,
    /// BM25 settings.
    pub bm25: Bm25Settings,
    /// How dense encoders load (device, dtype, batch tokens).
    pub encoder: EncoderOptions,
}

/// Documents of each first-stage run the reranker rescores (the paper's top 50).
pub const RERANK_DEPTH: usize = 50;

/// Runs the benchmark and writes its runs; returns what it measured (see [`write_results`]).
pub fn run_benchmark(
    config: &BenchmarkConfig,
    progress: &dyn Progress,
) -> Result<BenchmarkResults> {
    // A topic's name becomes directories under `out_dir` (`TopicSpec::plan` checks it too; a
    // config built by hand is checked here, before anything is read or written).
    for spec in &config.topics {
        crate::dataset::check_plain_name(Setting::Topic, &spec.name)?;
    }
    // The reranker loads before any topic, so a bad model fails at once.
    let reranker = match &config.rerank {
        Some(model) => {
            let files = resolve_model(model)?;
            let options = RerankerOptions {
                device: config.encoder.device,
                dtype: config.encoder.dtype,
                max_length: None,
                max_batch_tokens: config.encoder.max_batch_tokens,
            };
            Some(CrossEncoder::load(&files, &options)?)
        }
        None => None,
    };
    if config.retrievers.is_empty() {
        return Err(Error::invalid(
            Setting::Retrievers,
            "give at least one retriever",
        ));
    }
    if config.k == 0 {
        return Err(Error::invalid(Setting::K, "must be at least 1"));
    }
    if config.fusion && config.retrievers.len() < 2 {
        return Err(Error::invalid(
            Setting::Fusion,
            "fusion needs at least two retrievers",
        ));
    }
    // Resolve every retriever (and model) before loading any topic.
    let mut retrievers: Vec<RetrieverKind> = Vec::new();
    for retriever in &config.retrievers {
        let kind = match retriever {
            BenchmarkRetriever::Bm25 => RetrieverKind::Bm25(config.bm25),
            BenchmarkRetriever::Dense(spec) => RetrieverKind::dense(spec, &config.encoder)?,
        };
        if retrievers.iter().any(|r| r.name() == kind.name()) {
            return Err(Error::invalid(
                Setting::Retrievers,
                format!("{} given twice", kind.name()),
            ));
        }
        retrievers.push(kind);
    }
    let mut names: Vec<String> = retrievers.iter().map(RetrieverKind::name).collect();
    if config.fusion {
        names.push("fusion".to_string());
    }
    let first_stage = names.len();
    if reranker.is_some() {
        let reranked: Vec<String> = names.iter().map(|n| format!("{n}+rerank")).collect();
        names.extend(reranked);
    }
    // Fusion takes each retriever's top 100 (paper §3.4) whatever k is.
    let fusion = FusionOptions::default();
    let depth = if config.fusion {
        config.k.max(fusion.depth)
    } else {
        config.k
    };

    let eval_config = EvalConfig::paper();
    let measures: Vec<String> = eval_config.measures.iter().map(|m| m.to_string()).collect();
    let mut topics = Vec::new();
    let mut results = Vec::new();
    for spec in &config.topics {
        progress.begin(&format!("{}: loading", spec.name), None);
        let data = load_topic(
            spec,
            &config.hub_cache,
            &config.queries_split,
            &config.corpus_split,
        )?;
        progress.finish();
        let topic_dir = config.out_dir.join("topics").join(&spec.name);
        let (corpus, hash) = write_corpus(&data.corpus, &topic_dir)?;
        let judgments = Judgments::new(&NuggetQrels::from_queries(&data.queries));
        let mut deep_runs: Vec<Run> = Vec::new();
        let mut unsearchable = 0;
        let mut all_reused = true;
        for retriever in &retrievers {
            let (engine, reused) = prepare_index(
                retriever,
                &corpus,
                &hash,
                &topic_dir,
                &config.encoder,
                progress,
            )?;
            all_reused &= reused;
            progress.begin(&format!("{}: {}", spec.name, retriever.name()), None);
            let (run, n) = retrieve(&engine, retriever, &data.queries, depth)?;
            progress.finish();
            unsearchable = unsearchable.max(n);
            deep_runs.push(run);
        }
        let mut runs: Vec<Run> = deep_runs.iter().map(|r| truncate(r, config.k)).collect();
        if config.fusion {
            let refs: Vec<&Run> = deep_runs.iter().collect();
            runs.push(truncate(&fuse(&refs, &fusion, "fusion")?, config.k));
        }
        if let Some(reranker) = &reranker {
            // Paper §6: the top 50 of each first-stage run, reranked with the question alone.
            let queries: HashMap<String, String> = data
                .queries
                .iter()
                .map(|q| (q.query_id.to_string(), q.query_text()))
                .collect();
            let documents: HashMap<String, String> = data
                .corpus
                .iter()
                .map(|d| (d.id.clone(), d.text.clone()))
                .collect();
            let rerank = Rerank {
                reranker,
                depth: RERANK_DEPTH,
                documents: DocumentTexts::Loaded(&documents),
            };
            let jobs: Vec<(&Run, &HashMap<String, String>, String)> = runs[..first_stage]
                .iter()
                .zip(&names)
                .map(|(run, name)| (run, &queries, format!("{}: rerank {name}", spec.name)))
                .collect();
            let reranked = rerank.rerank_runs(&jobs, progress)?;
            runs.extend(reranked.iter().map(|run| truncate(run, config.k)));
        }
        for (run, name) in runs.iter().zip(&names) {
            let file = format!("runs/{}/{}.trec", spec.name, name.replace(':', "-"));
            run.write_trec(config.out_dir.join(&file), name, config.k)?;
            let evaluation = evaluate(&judgments, run, &eval_config);
            results.push(RunResult {
                topic: spec.name.clone(),
                retriever: name.clone(),
                run_file: file,
                metrics: measures
                    .iter()
                    .cloned()
                    .zip(evaluation.means.iter().copied())
                    .collect(),
                notes: NotesSummary::from(&evaluation.notes),
            });
        }
        topics.push(TopicSummary {
            name: spec.name.clone(),
            queries: spec.queries.to_string(),
            corpus: spec.corpus.to_string(),
            num_queries: data.queries.len(),
            num_documents: data.corpus.len(),
            num_nuggets: data.queries.iter().map(|q| q.nuggets.len()).sum(),
            judged: data.check.clone(),
            unsearchable_queries: unsearchable,
            index_reused: all_reused,
        });
    }
    Ok(BenchmarkResults {
        created_by: format!("freshstack {}", env!("CARGO_PKG_VERSION")),
        k: config.k,
        measures,
        retrievers: names,
        topics,
        results,
    })
}

/// Writes `results.json`, `results.md` (with the paper's rows when given) and `report.html`
/// into `out_dir`.
pub fn write_results(
    results: &BenchmarkResults,
    paper: Option<&PaperResults>,
    out_dir: &Path,
) -> Result<()> {
    write_json_atomic(out_dir.join("results.json"), results)?;
    let path = out_dir.join("results.md");
    let mut writer = crate::dataset::AtomicWriter::create(&path)?;
    std::io::Write::write_all(&mut writer, results.to_markdown(paper).as_bytes())
        .map_err(|e| Error::io(&path, e))?;
    writer.commit()?;
    let page = html::render_benchmark_html(results)?;
    let path = out_dir.join("report.html");
    let mut writer = crate::dataset::AtomicWriter::create(&path)?;
    std::io::Write::write_all(&mut writer, page.as_bytes()).map_err(|e| Error::io(&path, e))?;
    writer.commit()
}
