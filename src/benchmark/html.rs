//! `report.html` of a benchmark: one self-contained page (inline CSS and SVG, no script) with the
//! results table and one grouped-bar chart per measure (topics as groups, retrievers as bars),
//! drawn with the report module's chart code.

use std::fmt::Write as _;

use super::results::BenchmarkResults;
use crate::error::Result;
use crate::report::escape;
use crate::report::svg::{PALETTE, Series, grouped_bars};

const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1100px}\
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:4px 8px}\
td.n{text-align:right;font-variant-numeric:tabular-nums}figure{margin:1.5em 0}";

/// The value of `measure` for (`topic`, `retriever`), if evaluated.
fn value(results: &BenchmarkResults, topic: &str, retriever: &str, measure: &str) -> Option<f64> {
    results
        .results
        .iter()
        .find(|r| r.topic == topic && r.retriever == retriever)
        .and_then(|r| r.metrics.iter().find(|(m, _)| m == measure))
        .map(|(_, v)| *v)
}

/// Renders the page; deterministic for the same results.
pub fn render_benchmark_html(results: &BenchmarkResults) -> Result<String> {
    let topics: Vec<String> = results.topics.iter().map(|t| t.name.clone()).collect();
    let mut h = String::new();
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    let _ = writeln!(
        h,
        "<title>freshstack benchmark</title>\n<style>{STYLE}</style>\n</head>\n<body>"
    );
    let _ = writeln!(
        h,
        "<h1>freshstack benchmark</h1>\n<p>{} retrievers on {} topics, top {} per question ({}).</p>",
        results.retrievers.len(),
        topics.len(),
        results.k,
        escape(&results.created_by)
    );
    h.push_str("<table>\n<tr><th rowspan=\"2\">retriever</th>");
    for topic in &topics {
        let _ = write!(
            h,
            "<th colspan=\"{}\">{}</th>",
            results.measures.len(),
            escape(topic)
        );
    }
    h.push_str("</tr>\n<tr>");
    for _ in &topics {
        for measure in &results.measures {
            let _ = write!(h, "<th>{}</th>", escape(measure));
        }
    }
    h.push_str("</tr>\n");
    for retriever in &results.retrievers {
        let _ = write!(h, "<tr><td>{}</td>", escape(retriever));
        for topic in &topics {
            for measure in &results.measures {
                match value(results, topic, retriever, measure) {
                    Some(v) => {
                        let _ = write!(h, "<td class=\"n\">{v:.4}</td>");
                    }
                    None => h.push_str("<td class=\"n\">–</td>"),
                }
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    for measure in &results.measures {
        let series: Vec<Series> = results
            .retrievers
            .iter()
            .enumerate()
            .map(|(i, retriever)| {
                Series::new(
                    retriever.clone(),
                    topics
                        .iter()
                        .map(|t| value(results, t, retriever, measure))
                        .collect(),
                    PALETTE[i % PALETTE.len()],
                )
            })
            .collect();
        let svg = grouped_bars(measure, &topics, &series)?;
        let _ = writeln!(h, "<figure>{svg}</figure>");
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}
