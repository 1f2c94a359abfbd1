//! `freshstack eval`: score runs against nugget judgments, side by side with significance tests.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use freshstack::dataset::RunFile;
use freshstack::eval::{
    EvalConfig, JudgmentsFormat, Metric, NDEVAL_MAX_DEPTH, SignificanceConfig, compare_runs,
    load_judgments,
};

/// Arguments of `freshstack eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Judgments from a dataset's queries.jsonl (reference schema: nuggets with
    /// relevant_corpus_ids / non_relevant_corpus_ids).
    #[arg(
        long,
        value_name = "FILE",
        required_unless_present = "qrels",
        conflicts_with = "qrels"
    )]
    queries: Option<PathBuf>,
    /// Judgments from ndeval subtopic qrels: `qid nugget_id doc_id label` per line.
    #[arg(long, value_name = "FILE")]
    qrels: Option<PathBuf>,
    /// A run in TREC format (`qid Q0 docid rank score tag`). Repeat to compare runs: the
    /// later ones are tested against the first.
    #[arg(long = "run", required = true, value_name = "FILE")]
    runs: Vec<PathBuf>,
    /// Cutoffs, comma-separated, applied to every selected metric [default: alpha_ndcg@10,
    /// coverage@20, recall@50, the paper's].
    #[arg(long, value_delimiter = ',', value_name = "K,...")]
    k: Vec<usize>,
    /// Metrics, comma-separated: alpha_ndcg, coverage, recall, ndcg, mrr, precision, hole,
    /// judged [default: alpha_ndcg,coverage,recall].
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    metrics: Vec<Metric>,
    /// Also write every metric per question as JSON lines here.
    #[arg(long, value_name = "FILE")]
    per_query: Option<PathBuf>,
    /// Print JSON (one object keyed `metric@k`; with several runs, one per run) instead of a
    /// table.
    #[arg(long)]
    json: bool,
    /// Random sign flips of the paired randomization test.
    #[arg(long, default_value_t = 10_000)]
    permutations: usize,
    /// Seed of the randomization test (same seed, same p-values).
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

pub fn run(args: EvalArgs) -> anyhow::Result<()> {
    let config = EvalConfig::new(&args.metrics, &args.k)?;
    let beyond: Vec<String> = config
        .measures
        .iter()
        .filter(|m| m.metric == Metric::AlphaNdcg && m.k > NDEVAL_MAX_DEPTH)
        .map(|m| m.to_string())
        .collect();
    if !beyond.is_empty() {
        tracing::warn!(
            "{}: the reference evaluator silently drops alpha-nDCG beyond k = {NDEVAL_MAX_DEPTH}; \
             these values have no reference counterpart",
            beyond.join(", ")
        );
    }
    let (path, format) = match (&args.queries, &args.qrels) {
        (Some(p), _) => (p, JudgmentsFormat::QueriesJsonl),
        (None, Some(p)) => (p, JudgmentsFormat::NdevalQrels),
        (None, None) => anyhow::bail!("give the judgments with --queries or --qrels"),
    };
    let judgments = load_judgments(path, format)?;
    let mut runs = Vec::with_capacity(args.runs.len());
    for path in &args.runs {
        let mut run = RunFile::read(path)?;
        if run.duplicates() > 0 {
            tracing::warn!(
                "{}: {} repeated (question, document) lines; the last score counts, at the first \
                 position (as the reference)",
                path.display(),
                run.duplicates()
            );
        }
        if runs.iter().any(|r: &RunFile| r.name() == run.name()) {
            run.set_name(path.display().to_string());
        }
        runs.push(run);
    }
    let significance = SignificanceConfig {
        permutations: args.permutations,
        seed: args.seed,
    };
    let comparison = compare_runs(&judgments, &runs, &config, significance);
    for eval in &comparison.evaluations {
        let notes = &eval.notes;
        if notes.unknown_queries > 0 || notes.missing_queries > 0 {
            tracing::info!(
                "run {}: {} question(s) without judgments ignored, {} judged question(s) missing \
                 (scored 0)",
                eval.run_name,
                notes.unknown_queries,
                notes.missing_queries
            );
        }
    }
    if let Some(path) = &args.per_query {
        comparison
            .write_per_query(path)
            .with_context(|| format!("cannot write per-question values to {}", path.display()))?;
    }
    let text = if args.json {
        let mut s = comparison.to_json();
        s.push('\n');
        s
    } else {
        comparison.to_table()
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    // Many allocations: the process is about to exit, skip freeing them one by one.
    std::mem::forget(comparison);
    std::mem::forget(runs);
    std::mem::forget(judgments);
    Ok(())
}
