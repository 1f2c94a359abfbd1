//! `freshstack eval`: score runs against nugget judgments, side by side with significance tests.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use freshstack::eval::{
    EvalConfig, EvalJob, JudgmentsFormat, Metric, SignificanceConfig, evaluate_files,
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
    let (judgments, format) = match (args.queries, args.qrels) {
        (Some(p), _) => (p, JudgmentsFormat::QueriesJsonl),
        (None, Some(p)) => (p, JudgmentsFormat::NdevalQrels),
        (None, None) => anyhow::bail!("give the judgments with --queries or --qrels"),
    };
    let job = EvalJob {
        judgments,
        format,
        runs: args.runs,
        config: EvalConfig::new(&args.metrics, &args.k)?,
        significance: SignificanceConfig {
            permutations: args.permutations,
            seed: args.seed,
        },
        per_query: args.per_query,
    };
    let report = evaluate_files(&job).map_err(|e| {
        super::with_flags(e, |s| {
            (s == freshstack::Setting::PerQueryOutput).then_some("--per-query")
        })
    })?;
    let text = if args.json {
        let mut s = report.comparison.to_json();
        s.push('\n');
        s
    } else {
        report.comparison.to_table()
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(())
}
