//! `freshstack retrieve`: batch retrieval of a query file into a TREC run.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use freshstack::index::{VectorMatrix, ids_path, read_ids};
use freshstack::search::{
    Ann, DEFAULT_EF_SEARCH, Engine, Hit, QueryField, SearchOptions, read_queries, write_trec,
};
use rayon::prelude::*;

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
    /// bm25, dense or dense:NAME.
    #[arg(long, default_value = "bm25")]
    retriever: String,
    /// Query text: question (title + body), answer or nuggets (oracles), or text (BEIR).
    #[arg(long, default_value = "question")]
    field: String,
    /// hnsw (default when the model has a graph) or exact (ground truth).
    #[arg(long, default_value = "hnsw")]
    ann: String,
    /// HNSW search width.
    #[arg(long, default_value_t = DEFAULT_EF_SEARCH)]
    ef_search: usize,
    /// Precomputed query vectors for a dense retriever, NAME=PATH.npy (query ids in PATH.ids).
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
        retriever: args.retriever.clone(),
        k: args.k,
        ann: Ann::parse(&args.ann)?,
        ef_search: args.ef_search,
    };
    let field = QueryField::parse(&args.field)?;
    let engine = Engine::open(&args.index)?;
    let retriever = engine.resolve(&args.retriever)?;
    let queries = read_queries(&args.queries, field)?;
    let started = std::time::Instant::now();
    let mut unsearchable = 0usize;
    let results: Vec<(String, Vec<Hit>)> = if let Some(model) = retriever.strip_prefix("dense:") {
        let spec = args.query_vectors.as_deref().with_context(|| {
            format!("{retriever} needs --query-vectors {model}=PATH.npy (query encoders are not built in yet)")
        })?;
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
        queries
            .par_iter()
            .map(|q| {
                let row = *row_of.get(q.id.as_str()).with_context(|| {
                    format!("{} has no vector for query {:?}", path.display(), q.id)
                })?;
                let hits = engine.search_vector(model, &matrix.row(row), &options)?;
                Ok((q.id.clone(), hits))
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        let per_query: Vec<Option<(String, Vec<Hit>)>> = queries
            .par_iter()
            .map(|q| {
                if !engine.has_searchable_terms(&q.text)? {
                    return Ok(None);
                }
                Ok(Some((q.id.clone(), engine.search(&q.text, &options)?)))
            })
            .collect::<anyhow::Result<_>>()?;
        unsearchable = per_query.iter().filter(|r| r.is_none()).count();
        per_query.into_iter().flatten().collect()
    };
    let tag = args.tag.unwrap_or_else(|| retriever.clone());
    write_trec(&args.out, &results, &tag)?;
    if unsearchable > 0 {
        eprintln!(
            "warning: {unsearchable} queries have no searchable terms (symbols only); \
             they have no results in the run"
        );
    }
    eprintln!(
        "{} queries, {retriever}, k = {}: wrote {} in {:.2}s",
        queries.len(),
        args.k,
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
