//! The benchmark runner: evaluate retrievers on published FreshStack datasets (or a local
//! export), offline, in one call.
//!
//! For each topic: load the questions and corpus ([`TopicSpec`], local JSONL/Parquet or the
//! Hugging Face cache), build or reuse the topic's index (keyed by the corpus hash, the BM25
//! settings and the dense models), retrieve the top k for every question
//! (`query_title + " " + query_text`, in each dense model's query template), fuse when asked
//! (normalized sum of the top 100, as the paper), evaluate alpha-nDCG@10, Coverage@20 and
//! Recall@50 with [`crate::eval`], and write `runs/TOPIC/RETRIEVER.trec`, `results.json` and
//! `results.md` under the output directory.
//!
//! Guarantees: the same inputs give byte-identical runs and results whatever the thread count
//! (exact search, ties by document id); outputs are written atomically. Imports `dataset`,
//! `embed`, `index`, `search` and `eval`.

mod paper;
mod results;
mod retrieve;
mod topic;

use std::path::{Path, PathBuf};

pub use paper::{PaperResults, PaperRow};
pub use results::{BenchmarkResults, NotesSummary, RunResult, TopicSummary};
pub use topic::{JudgedCheck, TopicData, TopicSpec, check_judged, load_topic};

use crate::dataset::{NuggetQrels, Run, write_json_atomic};
use crate::embed::{EncoderOptions, TextEncoder, resolve_model};
use crate::error::{Error, Result};
use crate::eval::{EvalConfig, Judgments, evaluate};
use crate::index::{Bm25Settings, validate_model_name};
use crate::progress::Progress;
use crate::search::{FusionOptions, fuse};
use retrieve::{DenseModel, bm25_run, dense_run, prepare_index};

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchmarkConfig {
    /// The topics, in column order.
    pub topics: Vec<TopicSpec>,
    /// Retrievers, in row order: `bm25` and/or `dense:MODEL` (a model directory or a Hugging
    /// Face model id in the local cache).
    pub retrievers: Vec<String>,
    /// Also fuse all retrievers (normalized sum of each one's top 100), as row `fusion`.
    pub fusion: bool,
    /// A reranker for the top 50 (not available yet: an error).
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

/// A retriever of the config, parsed.
enum RetrieverPlan {
    Bm25,
    Dense(usize),
}

/// The retriever name for `dense:MODEL`: the model directory's (or id's) last component.
pub fn dense_name(model: &str) -> Result<String> {
    let model = model.split('@').next().unwrap_or(model);
    let last = model
        .trim_end_matches(['/', '\\'])
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(model);
    validate_model_name(last)?;
    Ok(last.to_string())
}

/// Runs the benchmark and writes its outputs; returns what it measured.
pub fn run_benchmark(
    config: &BenchmarkConfig,
    progress: &dyn Progress,
) -> Result<BenchmarkResults> {
    if let Some(model) = &config.rerank {
        return Err(Error::invalid(
            "--rerank",
            format!(
                "{model}: reranking is not available yet in `freshstack benchmark` \
                 (rerankers are being added); run without --rerank"
            ),
        ));
    }
    if config.retrievers.is_empty() {
        return Err(Error::invalid("--retriever", "give at least one retriever"));
    }
    if config.k == 0 {
        return Err(Error::invalid("-k", "must be at least 1"));
    }
    if config.fusion && config.retrievers.len() < 2 {
        return Err(Error::invalid(
            "--fusion",
            "fusion needs at least two --retriever",
        ));
    }
    // Parse retrievers and load each dense encoder once, for every topic.
    let mut plans = Vec::new();
    let mut names = Vec::new();
    let mut dense: Vec<DenseModel> = Vec::new();
    for spec in &config.retrievers {
        if spec == "bm25" {
            plans.push(RetrieverPlan::Bm25);
            names.push("bm25".to_string());
        } else if let Some(model) = spec.strip_prefix("dense:").filter(|m| !m.is_empty()) {
            let name = dense_name(model)?;
            let files = resolve_model(model)?;
            progress.begin(&format!("loading {model}"), None);
            let encoder = TextEncoder::load(&files, &config.encoder)?;
            progress.finish();
            let m = encoder.manifest();
            let identity = format!(
                "{} {} dtype={:?} max_length={} pooling={:?} dim={}",
                model, m.id, m.dtype, m.max_length, m.pooling, m.dim
            );
            plans.push(RetrieverPlan::Dense(dense.len()));
            names.push(format!("dense:{name}"));
            dense.push(DenseModel {
                name,
                identity,
                encoder,
            });
        } else {
            return Err(Error::invalid(
                "--retriever",
                format!("{spec:?}: expected bm25 or dense:MODEL"),
            ));
        }
    }
    if let Some(dup) = names
        .iter()
        .enumerate()
        .find_map(|(i, n)| names[..i].contains(n).then_some(n))
    {
        return Err(Error::invalid("--retriever", format!("{dup} given twice")));
    }
    if config.fusion {
        names.push("fusion".to_string());
    }

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
        let (engine, reused) =
            prepare_index(&data.corpus, &topic_dir, config.bm25, &dense, progress)?;
        let judgments = Judgments::new(&NuggetQrels::from_queries(&data.queries));
        let mut runs: Vec<Run> = Vec::new();
        let mut unsearchable = 0;
        for plan in &plans {
            progress.begin(&format!("{}: retrieving", spec.name), None);
            let run = match plan {
                RetrieverPlan::Bm25 => {
                    let (run, n) = bm25_run(&engine, &data.queries, config.k)?;
                    unsearchable = n;
                    run
                }
                RetrieverPlan::Dense(i) => {
                    dense_run(&engine, &dense[*i], &data.queries, config.k, progress)?
                }
            };
            progress.finish();
            runs.push(run);
        }
        if config.fusion {
            let refs: Vec<&Run> = runs.iter().collect();
            runs.push(fuse(&refs, &FusionOptions::default(), "fusion")?);
        }
        for (run, name) in runs.iter().zip(&names) {
            let file = format!("runs/{}/{}.trec", spec.name, name.replace(':', "-"));
            // Every document evaluated is written, so the file re-evaluates to the same numbers.
            run.write_trec(config.out_dir.join(&file), name, usize::MAX)?;
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
            index_reused: reused,
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

/// Writes `results.json` and `results.md` (with the paper's rows when given) into `out_dir`.
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
    writer.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_names() {
        assert_eq!(
            dense_name("models/all-MiniLM-L6-v2").unwrap(),
            "all-MiniLM-L6-v2"
        );
        assert_eq!(
            dense_name("intfloat/e5-mistral-7b-instruct@abc").unwrap(),
            "e5-mistral-7b-instruct"
        );
        assert_eq!(dense_name("models/x/").unwrap(), "x");
        assert!(dense_name("bad name").is_err());
    }
}
