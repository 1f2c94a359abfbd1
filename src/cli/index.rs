//! `freshstack index`: build the index directory (BM25, dense models encoding the corpus, and/or
//! precomputed dense vectors).

use std::path::PathBuf;

use clap::Args;
use freshstack::dataset::VectorDtype;
use freshstack::embed::{DeviceSpec, EncoderOptions, ModelDType};
use freshstack::index::{
    AnalyzerKind, Bm25Settings, DEFAULT_B, DEFAULT_K1, HnswSettings, RefreshConfig, VectorSource,
};
use freshstack::search::{
    DenseModelSpec, HybridIndexConfig, build_hybrid_index, refresh_hybrid_index,
};

use super::progress::Bars;

/// Arguments of `freshstack index`.
#[derive(Debug, Args)]
pub struct IndexArgs {
    /// The corpus (JSONL documents, as written by `freshstack corpus`); with --refresh, the
    /// documents to add.
    #[arg(long, value_name = "FILE", required_unless_present = "refresh")]
    corpus: Option<PathBuf>,
    /// The index directory (built in a temporary sibling, then renamed into place).
    #[arg(long, value_name = "DIR")]
    index: PathBuf,
    /// Build the BM25 index (the default when no --dense or --vectors are given).
    #[arg(long)]
    bm25: bool,
    /// BM25 k1 (Pyserini's default).
    #[arg(long, default_value_t = DEFAULT_K1)]
    k1: f32,
    /// BM25 b (Pyserini's default).
    #[arg(long, default_value_t = DEFAULT_B)]
    b: f32,
    /// Analyzer: code (identifiers split into camelCase/snake_case parts) or plain (bm25s words).
    #[arg(long, default_value = "code")]
    analyzer: AnalyzerKind,
    /// Precomputed document vectors as NAME=PATH.npy (rows L2-normalised, ids in PATH.ids).
    /// Repeatable; each becomes retriever dense:NAME.
    #[arg(long = "vectors", value_name = "NAME=PATH.npy")]
    vectors: Vec<VectorSource>,
    /// A dense model that encodes the corpus (document template) as [NAME=]MODEL[#WIDTH], MODEL
    /// a local directory or a Hugging Face id in the local cache; NAME (default: the directory's
    /// name or the id's last part, then -WIDTH) makes retriever dense:NAME; #WIDTH cuts this
    /// model's vectors to one of its Matryoshka widths. Repeatable.
    #[arg(long = "dense", value_name = "[NAME=]MODEL[#WIDTH]")]
    dense: Vec<DenseModelSpec>,
    /// Device for --dense encoders: cpu, cuda or cuda:N (cuda needs `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: DeviceSpec,
    /// Weight and compute dtype of --dense encoders: f32, bf16 or f16 (default: the model's).
    #[arg(long)]
    model_dtype: Option<ModelDType>,
    /// Max tokens per document for --dense encoders (default: the model's).
    #[arg(long)]
    max_length: Option<usize>,
    /// Padded tokens per encoder batch (default: 2048 on the CPU, 16384 on a GPU).
    #[arg(long)]
    max_batch_tokens: Option<usize>,
    /// Matryoshka width --dense vectors are cut to and renormalised (one of the widths the
    /// model's card lists), for models without their own #WIDTH; recorded, so queries are cut
    /// the same way.
    #[arg(long, value_name = "N")]
    dimensions: Option<usize>,
    /// How --dense vectors are stored: f16 (half the size) or f32.
    #[arg(long, default_value = "f16")]
    vector_dtype: VectorDtype,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    hnsw_m: usize,
    /// HNSW candidate list size while building.
    #[arg(long, default_value_t = 200)]
    hnsw_ef_construction: usize,
    /// Keep exact search only (no HNSW graph).
    #[arg(long)]
    no_hnsw: bool,
    /// Change an existing index in place instead of building: remove the --remove-repo
    /// repositories' documents, then add the --corpus documents (BM25, and every dense model
    /// the index recorded embeds only the added ones; graphs are rebuilt).
    #[arg(long)]
    refresh: bool,
    /// With --refresh: a repository (OWNER/NAME) whose documents are removed. Repeatable.
    #[arg(long = "remove-repo", value_name = "OWNER/NAME", requires = "refresh")]
    remove_repos: Vec<String>,
}

pub fn run(args: IndexArgs) -> anyhow::Result<()> {
    if args.refresh {
        let config = RefreshConfig {
            add: args.corpus,
            remove_repos: args.remove_repos,
        };
        // Dense models the index recorded embed the added documents on --device.
        let summary = refresh_hybrid_index(
            &config,
            &args.index,
            args.device,
            args.max_batch_tokens,
            &Bars::new(),
        )
        .map_err(|e| {
            super::with_flags(e, |s| {
                (s == freshstack::Setting::RemovedRepository).then_some("--remove-repo")
            })
        })?;
        eprintln!(
            "refreshed {}: removed {}, added {}, {} documents now",
            args.index.display(),
            summary.removed,
            summary.added,
            summary.num_live
        );
        return Ok(());
    }
    let Some(corpus) = args.corpus else {
        anyhow::bail!("--corpus is required");
    };
    let (vectors, dense) = (args.vectors, args.dense);
    let bm25 = (args.bm25 || (vectors.is_empty() && dense.is_empty())).then_some(Bm25Settings {
        k1: args.k1,
        b: args.b,
        analyzer: args.analyzer,
    });
    let config = HybridIndexConfig {
        corpus,
        bm25,
        dense,
        vectors,
        hnsw: (!args.no_hnsw).then_some(HnswSettings {
            m: args.hnsw_m,
            ef_construction: args.hnsw_ef_construction,
        }),
        encoder: EncoderOptions {
            device: args.device,
            dtype: args.model_dtype,
            max_length: args.max_length,
            max_batch_tokens: args.max_batch_tokens,
            dimensions: args.dimensions,
            ..EncoderOptions::default()
        },
        vector_dtype: args.vector_dtype,
    };
    let started = std::time::Instant::now();
    let summary = build_hybrid_index(&config, &args.index, &Bars::new()).map_err(|e| {
        super::with_flags(e, |s| {
            (s == freshstack::Setting::Vectors).then_some("--vectors")
        })
    })?;
    let mut parts = Vec::new();
    if summary.manifest.bm25.is_some() {
        parts.push("bm25".to_string());
    }
    parts.extend(
        summary
            .manifest
            .dense
            .iter()
            .map(|d| format!("dense:{} ({}-d {})", d.name, d.dim, d.dtype)),
    );
    eprintln!(
        "indexed {} documents into {} [{}] in {:.1}s",
        summary.num_documents,
        args.index.display(),
        parts.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
