//! `freshstack retrieve`: batch retrieval of a query file into a TREC run.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use freshstack::Progress;
use freshstack::dataset::{
    ScoreText, VectorMatrix, check_trec_tag, ids_path, read_ids, write_trec_rankings,
};
use freshstack::embed::{DeviceSpec, ModelDType};
use freshstack::search::{
    Ann, DEFAULT_EF_SEARCH, DEFAULT_FUSION_DEPTH, Engine, FusionMethod, Pipeline,
    QueryEncoderOptions, QueryField, SearchOptions, read_queries,
};

use super::progress::Bars;
use super::rerank::RerankStageArgs;

/// Fusion flags shared by `search` and `retrieve`.
#[derive(Debug, Args)]
pub struct FusionArgs {
    /// For fusion: documents taken from each retriever (paper: 100).
    #[arg(long, default_value_t = DEFAULT_FUSION_DEPTH)]
    fusion_depth: usize,
    /// For fusion: normalized-sum (the paper's) or rrf (k = 60).
    #[arg(long, default_value = "normalized-sum")]
    fusion_method: String,
    /// For fusion: comma-separated weights, one per fused retriever in order.
    #[arg(long, value_name = "W1,W2,...")]
    fusion_weights: Option<String>,
}

impl FusionArgs {
    /// Default search options carrying the fusion settings.
    pub fn options(&self) -> anyhow::Result<SearchOptions> {
        let fusion_method = match self.fusion_method.as_str() {
            "normalized-sum" | "normalized_sum" => FusionMethod::NormalizedSum,
            "rrf" => FusionMethod::Rrf { k: 60.0 },
            other => bail!("--fusion-method {other:?}: expected normalized-sum or rrf"),
        };
        let fusion_weights = self
            .fusion_weights
            .as_deref()
            .map(|text| {
                text.split(',')
                    .map(|w| {
                        w.trim()
                            .parse::<f64>()
                            .with_context(|| format!("--fusion-weights: {w:?} is not a number"))
                    })
                    .collect::<anyhow::Result<Vec<f64>>>()
            })
            .transpose()?;
        Ok(SearchOptions {
            fusion_depth: self.fusion_depth,
            fusion_method,
            fusion_weights,
            ..SearchOptions::default()
        })
    }
}

/// Query-encoder flags shared by `search` and `retrieve`.
#[derive(Debug, Args)]
pub struct EncoderArgs {
    /// Device for query encoders: cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Weight/compute dtype of query encoders (default: the one the corpus was encoded with).
    #[arg(long)]
    model_dtype: Option<String>,
    /// Load dense model NAME's query encoder from MODEL (a directory or cached id) instead of
    /// the one the index recorded. Repeatable.
    #[arg(long = "model", value_name = "NAME=MODEL")]
    models: Vec<String>,
}

impl EncoderArgs {
    /// The `--device` text.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// The `--model-dtype` text, if given.
    pub fn model_dtype(&self) -> Option<&str> {
        self.model_dtype.as_deref()
    }

    /// Loads the query encoders the dense retrievers in `retriever` need.
    pub fn load(&self, engine: &mut Engine, retriever: &str) -> anyhow::Result<()> {
        let components = engine.components(retriever)?;
        let names: Vec<&str> = components
            .iter()
            .filter_map(|c| c.strip_prefix("dense:"))
            .collect();
        if names.is_empty() {
            return Ok(());
        }
        let mut options = QueryEncoderOptions {
            device: DeviceSpec::parse(&self.device)?,
            dtype: self
                .model_dtype
                .as_deref()
                .map(ModelDType::parse)
                .transpose()?,
            ..QueryEncoderOptions::default()
        };
        for spec in &self.models {
            let (name, model) = spec
                .split_once('=')
                .with_context(|| format!("--model {spec:?}: expected NAME=MODEL"))?;
            options.models.insert(name.to_string(), model.to_string());
        }
        engine.load_query_encoders(&names, &options)?;
        Ok(())
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
    retriever: String,
    /// Query text: question (title + body), answer or nuggets (oracles), or text (BEIR).
    #[arg(long, default_value = "question")]
    field: String,
    /// hnsw (default when the model has a graph) or exact (ground truth). With `--device
    /// cuda[:N]` in a `--features cuda` build, exact dense search runs on that GPU (same results).
    #[arg(long, default_value = "hnsw")]
    ann: String,
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
    query_vectors: Option<String>,
    /// Run tag (last column); default: the retriever name.
    #[arg(long)]
    tag: Option<String>,
    /// Worker threads (default: all cores). The output does not depend on it.
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: RetrieveArgs) -> anyhow::Result<()> {
    if let Some(threads) = args.threads {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads.max(1))
            .build_global()
            .context("cannot configure worker threads")?;
    }
    let options = SearchOptions {
        ann: Ann::parse(&args.ann)?,
        ef_search: args.ef_search,
        ..args.fusion.options()?
    };
    let field = QueryField::parse(&args.field)?;
    let mut engine = Engine::open(&args.index)?;
    let retriever = engine.resolve(&args.retriever)?;
    // `--ann exact --device cuda[:N]`: dense exact search on that GPU too (same results).
    #[cfg(feature = "cuda")]
    if let (Ann::Exact, DeviceSpec::Cuda(ordinal)) =
        (options.ann, DeviceSpec::parse(args.encoders.device())?)
    {
        engine.use_gpu_exact(ordinal)?;
    }
    let queries = read_queries(&args.queries, field)?;
    // Loaded before retrieval, so a bad model or corpus fails at once.
    let reranker =
        args.rerank
            .load(&engine, args.encoders.device(), args.encoders.model_dtype())?;
    let started = std::time::Instant::now();
    let vectors = match retriever
        .strip_prefix("dense:")
        .filter(|_| args.query_vectors.is_some())
    {
        Some(model) => {
            let spec = args.query_vectors.as_deref().unwrap_or_default();
            let (name, path) = spec
                .split_once('=')
                .with_context(|| format!("--query-vectors {spec:?}: expected NAME=PATH.npy"))?;
            if name != model {
                bail!("--query-vectors names model {name:?} but the retriever is {retriever}");
            }
            let path = PathBuf::from(path);
            let matrix = VectorMatrix::open(&path)?;
            let ids = read_ids(&ids_path(&path))?;
            if ids.len() != matrix.rows() {
                bail!(
                    "{}: {} ids for {} rows",
                    ids_path(&path).display(),
                    ids.len(),
                    matrix.rows()
                );
            }
            let row_of: std::collections::HashMap<&str, usize> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i))
                .collect();
            let vectors = queries
                .iter()
                .map(|q| {
                    let row = *row_of.get(q.id.as_str()).with_context(|| {
                        format!("{} has no vector for query {:?}", path.display(), q.id)
                    })?;
                    Ok(matrix.row(row))
                })
                .collect::<anyhow::Result<Vec<Vec<f32>>>>()?;
            Some(vectors)
        }
        None => {
            if args.query_vectors.is_some() {
                bail!("--query-vectors is for a single dense retriever, not {retriever}");
            }
            args.encoders.load(&mut engine, &args.retriever)?;
            None
        }
    };
    let pipeline = Pipeline {
        retriever: engine.retriever(&args.retriever, &options)?,
        rerank: reranker.as_ref().map(|r| r.stage()),
    };
    let bars = Bars::new();
    let retrieved = match &vectors {
        Some(vectors) => {
            let refs: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
            pipeline.run_vectors(&queries, &refs, args.k, &bars)?
        }
        None => {
            bars.begin("retrieve", Some(queries.len() as u64));
            let retrieved = pipeline.run(&queries, args.k, &bars)?;
            bars.finish();
            retrieved
        }
    };
    let run = retrieved.run;
    let tag = args.tag.unwrap_or_else(|| run.name.clone());
    check_trec_tag(&tag)?;
    write_trec_rankings(&run, &args.out, &tag, usize::MAX, ScoreText::F32)?;
    if retrieved.unsearchable > 0 {
        eprintln!(
            "warning: {} queries got no results (for bm25: no searchable terms, symbols only); \
             they have no results in the run",
            retrieved.unsearchable
        );
    }
    eprintln!(
        "{} queries, {}, k = {}: wrote {} in {:.2}s",
        queries.len(),
        run.name,
        args.k,
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
