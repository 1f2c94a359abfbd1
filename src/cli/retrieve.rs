//! `freshstack retrieve`: batch retrieval of a query file into a TREC run.

use std::path::PathBuf;

use clap::Args;
use freshstack::embed::{DeviceSpec, ModelDType};
use freshstack::search::{
    Ann, DEFAULT_EF_SEARCH, DEFAULT_FUSION_DEPTH, ModelOverride, QueryEncoderOptions, QueryField,
    QueryVectorsSpec, RetrieveConfig, RetrieverSpec, SearchOptions, retrieve,
};

use super::fuse::Method;
use super::progress::Bars;
use super::rerank::RerankStageArgs;
use super::with_flags;
use freshstack::Setting;

/// Fusion flags shared by `search` and `retrieve`.
#[derive(Debug, Args)]
pub struct FusionArgs {
    /// For fusion: documents taken from each retriever (paper: 100).
    #[arg(long, default_value_t = DEFAULT_FUSION_DEPTH)]
    fusion_depth: usize,
    /// For fusion: how scores are combined (normalized-sum is the paper's).
    #[arg(long, value_enum, default_value_t = Method::NormalizedSum)]
    fusion_method: Method,
    /// For --fusion-method rrf: the k of 1 / (k + rank) (a finite number >= 0).
    #[arg(long, default_value_t = 60.0)]
    rrf_k: f64,
    /// For fusion: comma-separated weights, one per fused retriever in order.
    #[arg(long, value_name = "W1,W2,...", value_delimiter = ',', value_parser = weight)]
    fusion_weights: Option<Vec<f64>>,
}

/// One `--fusion-weights` number (spaces around it allowed).
fn weight(text: &str) -> Result<f64, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))
}

impl FusionArgs {
    /// Default search options carrying the fusion settings.
    pub fn options(&self) -> SearchOptions {
        SearchOptions {
            fusion_depth: self.fusion_depth,
            fusion_method: self.fusion_method.with_rrf_k(self.rrf_k),
            fusion_weights: self.fusion_weights.clone(),
            ..SearchOptions::default()
        }
    }
}

/// Query-encoder flags shared by `search` and `retrieve`.
#[derive(Debug, Args)]
pub struct EncoderArgs {
    /// Device for query encoders: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Weight/compute dtype of query encoders (default: the one the corpus was encoded with).
    #[arg(long)]
    model_dtype: Option<ModelDType>,
    /// Load dense model NAME's query encoder from MODEL (a directory or cached id) instead of
    /// the one the index recorded. Repeatable.
    #[arg(long = "model", value_name = "NAME=MODEL")]
    models: Vec<ModelOverride>,
}

impl EncoderArgs {
    /// The `--device` value.
    pub fn device(&self) -> DeviceSpec {
        self.device
    }

    /// The `--model-dtype` value, if given.
    pub fn model_dtype(&self) -> Option<ModelDType> {
        self.model_dtype
    }

    /// The query encoders' settings.
    pub fn options(&self) -> QueryEncoderOptions {
        QueryEncoderOptions {
            device: self.device,
            dtype: self.model_dtype,
            models: self
                .models
                .iter()
                .map(|o| (o.name.clone(), o.model.clone()))
                .collect(),
            ..QueryEncoderOptions::default()
        }
    }
}

/// Arguments of `freshstack retrieve`.
#[derive(Debug, Args)]
pub struct RetrieveArgs {
    /// The index directory.
    #[arg(long, value_name = "DIR")]
    index: PathBuf,
    /// Queries: reference-schema questions or BEIR `{"_id","text"}` lines (JSONL).
    #[arg(long, value_name = "FILE")]
    queries: PathBuf,
    /// The TREC run to write (atomically).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Results per query.
    #[arg(short, default_value_t = 100)]
    k: usize,
    /// bm25, dense, dense:NAME, fusion (every retriever of the index) or fusion:R1,R2,...
    #[arg(long, default_value = "bm25")]
    retriever: RetrieverSpec,
    /// Query text: question (title + body), answer or nuggets (oracles), or text (BEIR).
    #[arg(long, default_value = "question")]
    field: QueryField,
    /// hnsw (default when the model has a graph) or exact (ground truth). With `--device
    /// cuda[:N]` in a `--features cuda` build, exact dense search runs on that GPU (same results).
    #[arg(long, default_value = "hnsw")]
    ann: Ann,
    /// HNSW search width.
    #[arg(long, default_value_t = DEFAULT_EF_SEARCH)]
    ef_search: usize,
    #[command(flatten)]
    fusion: FusionArgs,
    #[command(flatten)]
    encoders: EncoderArgs,
    #[command(flatten)]
    rerank: RerankStageArgs,
    /// Precomputed query vectors for a dense retriever, NAME=PATH.npy (query ids in PATH.ids),
    /// instead of encoding the queries.
    #[arg(long = "query-vectors", value_name = "NAME=PATH.npy")]
    query_vectors: Option<QueryVectorsSpec>,
    /// Run tag (last column); default: the retriever name.
    #[arg(long)]
    tag: Option<String>,
}

/// How the library's settings are named on this command line.
pub fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::RerankDepth => "--rerank-depth",
        Setting::RerankCorpus => "--corpus",
        Setting::Corpus => "--corpus",
        Setting::Queries => "--queries",
        Setting::QueryVectors => "--query-vectors",
        Setting::FusionDepth => "--fusion-depth",
        Setting::FusionWeights => "--fusion-weights",
        Setting::RrfK => "--rrf-k",
        Setting::QueryModel => "--model",
        Setting::RunOutput => "--out",
        _ => return None,
    })
}

pub fn run(args: RetrieveArgs) -> anyhow::Result<()> {
    let device = args.encoders.device();
    let ann = args.ann;
    let config = RetrieveConfig {
        index: args.index.clone(),
        queries: args.queries.clone(),
        field: args.field,
        out: args.out.clone(),
        k: args.k,
        search: SearchOptions {
            retriever: args.retriever,
            ann,
            ef_search: args.ef_search,
            ..args.fusion.options()
        },
        encoders: args.encoders.options(),
        // `--ann exact --device cuda[:N]`: dense exact search on that GPU too (same results).
        gpu_exact: match (ann, device) {
            (Ann::Exact, DeviceSpec::Cuda(ordinal)) => Some(ordinal),
            _ => None,
        },
        query_vectors: args.query_vectors.clone(),
        rerank: args
            .rerank
            .config(args.encoders.device(), args.encoders.model_dtype()),
        tag: args.tag.clone(),
    };
    let summary = retrieve(&config, &Bars::new()).map_err(|e| with_flags(e, flags))?;
    if summary.unsearchable > 0 {
        eprintln!(
            "warning: {} queries got no results (for bm25: no searchable terms, symbols only); \
             they have no results in the run",
            summary.unsearchable
        );
    }
    eprintln!(
        "{} queries, {}, k = {}: wrote {} in {:.2}s",
        summary.queries,
        summary.run,
        args.k,
        args.out.display(),
        summary.seconds
    );
    Ok(())
}
