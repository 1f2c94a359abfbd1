//! `freshstack search`: one query against an index, printed as a table or JSON.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use freshstack::search::{
    Ann, DEFAULT_EF_SEARCH, RetrieverSpec, SearchConfig, SearchOptions, search_query,
};

use super::progress::Bars;
use super::rerank::RerankStageArgs;
use super::retrieve::{EncoderArgs, FusionArgs, flags};
use super::with_flags;

/// Arguments of `freshstack search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The index directory.
    #[arg(long, value_name = "DIR")]
    index: PathBuf,
    /// bm25, dense, dense:NAME, fusion (every retriever of the index) or fusion:R1,R2,...
    /// Dense models built with --dense encode the query with their recorded query template.
    #[arg(long, default_value = "bm25")]
    retriever: RetrieverSpec,
    /// Number of results.
    #[arg(short, default_value_t = 10)]
    k: usize,
    /// hnsw (when the model has a graph) or exact.
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
    /// Print JSON lines ({"rank","id","score"}, plus "per_retriever" for fusion) instead of a
    /// table.
    #[arg(long)]
    json: bool,
    /// The query text.
    query: String,
}

pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    let config = SearchConfig {
        index: args.index.clone(),
        search: SearchOptions {
            retriever: args.retriever,
            k: args.k,
            ann: args.ann,
            ef_search: args.ef_search,
            ..args.fusion.options()
        },
        encoders: args.encoders.options(),
        rerank: args
            .rerank
            .config(args.encoders.device(), args.encoders.model_dtype()),
    };
    let hits =
        search_query(&config, &args.query, &Bars::new()).map_err(|e| with_flags(e, flags))?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // The engine scores in f32: printed as f32, as they always were.
    for (rank, hit) in hits.iter().enumerate() {
        if args.json {
            let mut row = serde_json::json!({
                "rank": rank + 1,
                "id": hit.doc.doc_id,
                "score": hit.doc.score as f32,
            });
            if !hit.places.is_empty() {
                row["per_retriever"] = hit
                    .places
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "retriever": p.retriever,
                            "rank": p.rank,
                            "score": p.score as f32,
                        })
                    })
                    .collect();
            }
            writeln!(out, "{row}")?;
        } else {
            let parts: Vec<String> = hit
                .places
                .iter()
                .map(|p| format!("{}#{}={:.4}", p.retriever, p.rank, p.score as f32))
                .collect();
            let parts = if parts.is_empty() {
                String::new()
            } else {
                format!("  [{}]", parts.join(" "))
            };
            writeln!(
                out,
                "{:>4}  {:>10.4}  {}{parts}",
                rank + 1,
                hit.doc.score as f32,
                hit.doc.doc_id
            )?;
        }
    }
    out.flush()?;
    Ok(())
}
