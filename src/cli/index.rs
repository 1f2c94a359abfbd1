//! `freshstack index`: build the index directory (BM25 and/or precomputed dense vectors).

use std::path::PathBuf;

use clap::Args;
use freshstack::index::{
    AnalyzerKind, Bm25Settings, DEFAULT_B, DEFAULT_K1, HnswSettings, IndexConfig, RefreshConfig,
    VectorSource, build_index, refresh_index,
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
    /// Build the BM25 index (the default when no --vectors are given).
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
    analyzer: String,
    /// Precomputed document vectors as NAME=PATH.npy (rows L2-normalised, ids in PATH.ids).
    /// Repeatable; each becomes retriever dense:NAME.
    #[arg(long = "vectors", value_name = "NAME=PATH.npy")]
    vectors: Vec<String>,
    /// HNSW links per node.
    #[arg(long, default_value_t = 16)]
    hnsw_m: usize,
    /// HNSW candidate list size while building.
    #[arg(long, default_value_t = 200)]
    hnsw_ef_construction: usize,
    /// Keep exact search only (no HNSW graph).
    #[arg(long)]
    no_hnsw: bool,
    /// Change an existing (BM25-only) index in place instead of building: remove the
    /// --remove-repo repositories' documents, then add the --corpus documents.
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
        let summary = refresh_index(&config, &args.index, &Bars::new())?;
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
    let vectors = args
        .vectors
        .iter()
        .map(|spec| VectorSource::parse(spec))
        .collect::<Result<Vec<_>, _>>()?;
    let bm25 = (args.bm25 || vectors.is_empty()).then_some(Bm25Settings {
        k1: args.k1,
        b: args.b,
        analyzer: AnalyzerKind::parse(&args.analyzer)?,
    });
    let config = IndexConfig {
        corpus,
        bm25,
        vectors,
        hnsw: (!args.no_hnsw).then_some(HnswSettings {
            m: args.hnsw_m,
            ef_construction: args.hnsw_ef_construction,
        }),
    };
    let started = std::time::Instant::now();
    let summary = build_index(&config, &args.index, &Bars::new())?;
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
