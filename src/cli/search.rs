//! `freshstack search`: one query against an index, printed as a table or JSON.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use freshstack::search::{Ann, DEFAULT_EF_SEARCH, Engine, SearchOptions};

/// Arguments of `freshstack search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// The index directory.
    #[arg(long, value_name = "DIR")]
    index: PathBuf,
    /// bm25, dense or dense:NAME (dense needs a query encoder: see `retrieve --query-vectors`).
    #[arg(long, default_value = "bm25")]
    retriever: String,
    /// Number of results.
    #[arg(short, default_value_t = 10)]
    k: usize,
    /// hnsw (when the model has a graph) or exact.
    #[arg(long, default_value = "hnsw")]
    ann: String,
    /// HNSW search width.
    #[arg(long, default_value_t = DEFAULT_EF_SEARCH)]
    ef_search: usize,
    /// Print JSON lines ({"rank","id","score"}) instead of a table.
    #[arg(long)]
    json: bool,
    /// The query text.
    query: String,
}

pub fn run(args: SearchArgs) -> anyhow::Result<()> {
    let options = SearchOptions {
        retriever: args.retriever,
        k: args.k,
        ann: Ann::parse(&args.ann)?,
        ef_search: args.ef_search,
    };
    let engine = Engine::open(&args.index)?;
    let hits = engine.search(&args.query, &options)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (rank, hit) in hits.iter().enumerate() {
        if args.json {
            let row = serde_json::json!({"rank": rank + 1, "id": hit.id, "score": hit.score});
            writeln!(out, "{row}")?;
        } else {
            writeln!(out, "{:>4}  {:>10.4}  {}", rank + 1, hit.score, hit.id)?;
        }
    }
    out.flush()?;
    Ok(())
}
