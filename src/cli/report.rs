//! `freshstack report`: statistics, pooling results and the HTML page of an exported dataset.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use freshstack::report::{self, MEASURE_LABELS, ReportOptions};
use freshstack::source::TokenizerKind;

use super::progress::Bars;

/// Arguments of `freshstack report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// The dataset directory (corpus.jsonl, queries.jsonl, runs/*.trec, optional
    /// filtering.json and manifest.json). stats.json and results.json are written there.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Where to write the HTML page [default: DIR/report.html].
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Tokenizer counting query and answer lengths: o200k_base (GPT-4o's, the paper's) or
    /// cl100k_base.
    #[arg(long, default_value = "o200k_base")]
    tokenizer: TokenizerKind,
    /// A line shown under the page title (e.g. a date or the build's name); nothing by default,
    /// so the page is the same bytes for the same dataset.
    #[arg(long, value_name = "TEXT")]
    note: Option<String>,
}

pub fn run(args: ReportArgs) -> anyhow::Result<()> {
    let options = ReportOptions {
        tokenizer: args.tokenizer,
    };
    let report = report::compute(&args.dir, &options, &Bars::new())?;
    let files = report::write(
        &args.dir,
        &report,
        args.out.as_deref(),
        args.note.as_deref(),
    )?;
    let s = &report.statistics;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} queries, {} docs from {} repositories, {:.1} nuggets/query, {:.1} relevant docs/query",
        s.num_queries,
        s.num_docs,
        s.num_repos,
        s.avg_nuggets_per_query,
        s.avg_relevant_docs_per_query
    )?;
    if !report.pooling.rows.is_empty() {
        writeln!(
            out,
            "{:<10} {:<20} {:<24} {:>13} {:>11} {:>9}",
            "setting",
            "technique",
            "retriever",
            MEASURE_LABELS[0],
            MEASURE_LABELS[1],
            MEASURE_LABELS[2]
        )?;
        for row in &report.pooling.rows {
            let [a, c, r] = row.values();
            writeln!(
                out,
                "{:<10} {:<20} {:<24} {a:>13.4} {c:>11.4} {r:>9.4}",
                row.name.setting, row.name.technique, row.name.retriever
            )?;
        }
    }
    out.flush()?;
    eprintln!(
        "wrote {}, {}, {}",
        files.stats.display(),
        files.results.display(),
        files.html.display()
    );
    Ok(())
}
