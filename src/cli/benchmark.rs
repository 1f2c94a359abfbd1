//! `freshstack benchmark`: score retrievers on published FreshStack datasets (or a local
//! export), offline, and write runs, results.json and results.md.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use freshstack::benchmark::{
    BenchmarkConfig, BenchmarkRetriever, PaperResults, TopicSpec, run_benchmark, write_results,
};
use freshstack::dataset::{DatasetSpec, hub_cache_dir};
use freshstack::embed::{DeviceSpec, EncoderOptions, ModelDType};
use freshstack::index::{AnalyzerKind, Bm25Settings, DEFAULT_B, DEFAULT_K1};

use super::progress::Bars;
use super::with_flags;
use freshstack::Setting;

/// How the library's settings are named on this command line.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Retrievers => "--retriever",
        Setting::K => "-k",
        Setting::Fusion => "--fusion",
        Setting::Queries => "--queries",
        Setting::Topics => "--topic",
        _ => return None,
    })
}

/// Arguments of `freshstack benchmark`.
#[derive(Debug, Args)]
pub struct BenchmarkArgs {
    /// Questions with nuggets: a local directory (queries.jsonl or *.parquet), a file, or a
    /// Hugging Face dataset id with config read from the local cache, e.g.
    /// freshstack/queries-oct-2024:langchain. Repeatable (paired with --corpus in order).
    #[arg(long, required = true, value_name = "SPEC")]
    queries: Vec<DatasetSpec>,
    /// The documents: a local directory (corpus.jsonl or *.parquet), a file, or a hub id with
    /// config, e.g. freshstack/corpus-oct-2024:langchain. Repeatable.
    #[arg(long, required = true, value_name = "SPEC")]
    corpus: Vec<DatasetSpec>,
    /// Topics (hub configs, or subdirectories of a local SPEC), comma-separated or repeated:
    /// expands one --queries and one --corpus per topic, e.g. langchain,yolo,laravel,angular,godot.
    #[arg(long = "topic", value_delimiter = ',', value_name = "NAME,...")]
    topics: Vec<String>,
    /// Retrievers: bm25, dense:[NAME=]MODEL[#WIDTH] (a model directory or a cached Hugging Face
    /// id; #WIDTH a Matryoshka width of the model). Repeatable.
    #[arg(long = "retriever", default_value = "bm25", value_name = "NAME")]
    retrievers: Vec<BenchmarkRetriever>,
    /// Also fuse all retrievers (normalized sum of each one's top 100, as the paper).
    #[arg(long)]
    fusion: bool,
    /// Also rerank the top 50 of every run with this cross-encoder (rows `NAME+rerank`).
    #[arg(long, value_name = "MODEL")]
    rerank: Option<String>,
    /// Results per question in the runs.
    #[arg(short, default_value_t = 100)]
    k: usize,
    /// Output directory: runs/, topics/ (corpus copies, embeddings, indexes), results.json, results.md.
    #[arg(long, default_value = "benchmark-out", value_name = "DIR")]
    out: PathBuf,
    /// The paper's published numbers to print beside ours (e.g. examples/paper-results.toml).
    #[arg(long, value_name = "FILE")]
    paper: Option<PathBuf>,
    /// Hugging Face hub cache (default: $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).
    #[arg(long, value_name = "DIR")]
    hf_cache: Option<PathBuf>,
    /// Split of the questions in hub datasets.
    #[arg(long, default_value = "test")]
    queries_split: String,
    /// Split of the corpus in hub datasets.
    #[arg(long, default_value = "train")]
    corpus_split: String,
    /// BM25 k1 (Pyserini's default).
    #[arg(long, default_value_t = DEFAULT_K1)]
    k1: f32,
    /// BM25 b (Pyserini's default).
    #[arg(long, default_value_t = DEFAULT_B)]
    b: f32,
    /// BM25 analyzer: code or plain.
    #[arg(long, default_value = "code")]
    analyzer: AnalyzerKind,
    /// Device for dense encoders: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Dense model weight dtype (f32, f16, bf16); default from the model's manifest.
    #[arg(long)]
    model_dtype: Option<ModelDType>,
    /// Max tokens per text for dense encoders.
    #[arg(long)]
    max_length: Option<usize>,
    /// Padded tokens per encoder batch.
    #[arg(long)]
    max_batch_tokens: Option<usize>,
    /// Matryoshka width every dense model's vectors (and queries) are cut to and renormalised
    /// (one of the widths its card lists), for models without their own
    /// `dense:MODEL#WIDTH`.
    #[arg(long, value_name = "N")]
    dimensions: Option<usize>,
}

pub fn run(args: BenchmarkArgs) -> anyhow::Result<()> {
    let topics = TopicSpec::plan(&args.queries, &args.corpus, &args.topics)
        .map_err(|e| with_flags(e, flags))?;
    let paper = args.paper.as_deref().map(PaperResults::read).transpose()?;
    let config = BenchmarkConfig {
        topics,
        retrievers: args.retrievers,
        fusion: args.fusion,
        rerank: args.rerank,
        k: args.k,
        out_dir: args.out.clone(),
        hub_cache: args.hf_cache.unwrap_or_else(hub_cache_dir),
        queries_split: args.queries_split,
        corpus_split: args.corpus_split,
        bm25: Bm25Settings {
            k1: args.k1,
            b: args.b,
            analyzer: args.analyzer,
        },
        encoder: EncoderOptions {
            device: args.device,
            dtype: args.model_dtype,
            max_length: args.max_length,
            max_batch_tokens: args.max_batch_tokens,
            dimensions: args.dimensions,
            ..EncoderOptions::default()
        },
    };
    let started = std::time::Instant::now();
    let results = run_benchmark(&config, &Bars::new()).map_err(|e| with_flags(e, flags))?;
    write_results(&results, paper.as_ref(), &args.out)
        .with_context(|| format!("writing results into {}", args.out.display()))?;
    for t in &results.topics {
        if t.judged.unknown_docs > 0 {
            eprintln!(
                "warning: {}: {} of {} judged documents are not in the corpus (e.g. {}); \
                 are the queries and the corpus from the same topic?",
                t.name,
                t.judged.unknown_docs,
                t.judged.judged_docs,
                t.judged.examples.join(", ")
            );
        }
        if t.unsearchable_queries > 0 {
            eprintln!(
                "warning: {}: {} questions have no BM25 term; they have no BM25 results",
                t.name, t.unsearchable_queries
            );
        }
    }
    std::io::Write::write_all(&mut std::io::stdout(), results.to_markdown(None).as_bytes())?;
    eprintln!(
        "{} topics x {} retrievers in {:.1}s; wrote {}/results.json, results.md and runs/",
        results.topics.len(),
        results.retrievers.len(),
        started.elapsed().as_secs_f64(),
        args.out.display()
    );
    Ok(())
}
