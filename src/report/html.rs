//! The self-contained HTML page: inline CSS and inline SVG, no script, no external asset. The
//! page is also well-formed XML (every element closed, only numeric character references), so it
//! can be checked with an XML parser.

use std::fmt::Write as _;

use super::calibration::CalibrationScores;
use super::calibration::score::Row;
use super::judge_health::{JudgeHealth, LENIENT_SUPPORT_RATE, REFERENCE_SUPPORT_RATE};
use super::pooling::{MEASURE_LABELS, PoolingRow, SETTINGS, TECHNIQUES, retriever_rank};
use super::svg::{BarChart, PALETTE, Series, render};
use super::{FilteringCounts, Report};
use crate::error::Result;
use crate::pipeline::changes::{Changes, Counts, Scores, StageRequests};

/// Escapes text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // NUL and the other control characters are parse errors in HTML text.
            c if c.is_control() && !matches!(c, '\n' | '\r' | '\t') => out.push('\u{fffd}'),
            _ => out.push(c),
        }
    }
    out
}

/// `text` linked to `url` when [`is_web_url`](crate::dataset::is_web_url) allows it (http and https only), else `text`
/// alone (both escaped).
pub fn link(url: &str, text: &str) -> String {
    use crate::dataset::is_web_url;
    if is_web_url(url) {
        format!("<a href=\"{}\">{}</a>", escape(url), escape(text))
    } else {
        escape(text)
    }
}

const STYLE: &str = "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;\
max-width:1100px;padding:0 1em;color:#222}\
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;margin:0.5em 0}\
th,td{border:1px solid #ccc;padding:0.25em 0.6em;text-align:left}\
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}\
thead th{background:#f3f3f3}tr.group td{background:#fafafa;font-weight:600}\
figure{margin:1em 0}figcaption{color:#555;font-size:0.9em}.meta,.note{color:#555}";

/// Renders the report page. `generated` (e.g. a timestamp or the command that made it) is shown
/// under the title when given; nothing time-dependent is added otherwise, so the same report
/// gives the same bytes.
pub fn render_html(report: &Report, generated: Option<&str>) -> Result<String> {
    let stats = &report.statistics;
    let title = match &stats.topic {
        Some(topic) => format!("FreshStack report: {topic}"),
        None => "FreshStack report".to_string(),
    };
    let mut h = String::with_capacity(64 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n");
    let _ = writeln!(h, "<title>{}</title>", escape(&title));
    let _ = writeln!(h, "<style>{STYLE}</style>\n</head>\n<body>");
    let _ = writeln!(h, "<h1>{}</h1>", escape(&title));
    if let Some(text) = generated {
        let _ = writeln!(h, "<p class=\"meta\">{}</p>", escape(text));
    }
    statistics_section(&mut h, report);
    filtering_section(&mut h, report.filtering.as_ref());
    pooling_section(&mut h, report);
    figures_section(&mut h, report)?;
    if let Some(health) = &report.judge_health {
        judge_health_section(&mut h, health);
    }
    if let Some(scores) = &report.calibration {
        calibration_section(&mut h, scores);
    }
    if let Some(changes) = &report.changes {
        changes_section(&mut h, changes);
    }
    h.push_str("</body>\n</html>\n");
    Ok(h)
}

fn statistics_section(h: &mut String, report: &Report) {
    let s = &report.statistics;
    h.push_str("<h2 id=\"statistics-title\">Dataset statistics</h2>\n");
    h.push_str("<table id=\"statistics\">\n<thead><tr><th>Statistic</th><th class=\"num\">Value</th></tr></thead>\n<tbody>\n");
    let rows: [(&str, String); 12] = [
        ("#Queries", s.num_queries.to_string()),
        ("#Docs", s.num_docs.to_string()),
        ("#Repositories", s.num_repos.to_string()),
        (
            "Avg. nuggets per query",
            format!("{:.1}", s.avg_nuggets_per_query),
        ),
        (
            "Avg. query length (tokens)",
            format!("{:.1}", s.avg_query_tokens),
        ),
        (
            "Avg. answer length (tokens)",
            format!("{:.1}", s.avg_answer_tokens),
        ),
        (
            "Queries containing code",
            format!("{:.1}%", s.pct_queries_with_code),
        ),
        (
            "Answers containing code",
            format!("{:.1}%", s.pct_answers_with_code),
        ),
        (
            "Relevant docs per nugget",
            format!("{:.1}", s.avg_relevant_docs_per_nugget),
        ),
        (
            "Relevant docs per query",
            format!("{:.1}", s.avg_relevant_docs_per_query),
        ),
        ("#Nuggets", s.num_nuggets.to_string()),
        ("Tokenizer", s.tokenizer.clone()),
    ];
    for (name, value) in rows {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(name),
            escape(&value)
        );
    }
    h.push_str("</tbody>\n</table>\n");
    h.push_str(
        "<p class=\"note\">Query = title + body; code = a fenced code block or an HTML \
         &lt;pre&gt; element; relevant = judged to support a nugget.</p>\n",
    );
    h.push_str("<table id=\"repositories\">\n<thead><tr><th>Repository</th><th class=\"num\">Docs</th></tr></thead>\n<tbody>\n");
    for repo in &s.docs_per_repo {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
            escape(&repo.name),
            repo.docs
        );
    }
    h.push_str("</tbody>\n</table>\n");
}

/// `100 * part / whole` with one decimal, or an empty string when `whole` is 0.
fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        String::new()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

fn filtering_section(h: &mut String, filtering: Option<&FilteringCounts>) {
    h.push_str("<h2 id=\"filtering-title\">Filtering</h2>\n");
    let Some(f) = filtering else {
        h.push_str("<p class=\"note\">No filtering.json in the dataset.</p>\n");
        return;
    };
    h.push_str("<table id=\"filtering\">\n<thead><tr><th>Step</th><th class=\"num\">Questions</th><th class=\"num\">Share of input</th></tr></thead>\n<tbody>\n");
    let mut rows: Vec<(&str, u64)> = vec![("Questions in", f.questions_in)];
    if let Some(n) = f.dropped_no_nuggets {
        rows.push(("Dropped: no nuggets", n));
    }
    rows.push((
        "Dropped: no supported nugget",
        f.dropped_no_supported_nugget,
    ));
    rows.push(match f.require_all_nuggets_supported {
        Some(false) => (
            "Dropped: an unsupported nugget (rule not applied)",
            f.dropped_any_unsupported_nugget,
        ),
        _ => (
            "Dropped: an unsupported nugget",
            f.dropped_any_unsupported_nugget,
        ),
    });
    rows.push(("Questions out", f.questions_out));
    for (name, count) in rows {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"num\">{count}</td><td class=\"num\">{}</td></tr>",
            escape(name),
            percent(count, f.questions_in)
        );
    }
    h.push_str("</tbody>\n</table>\n");
}

fn pooling_section(h: &mut String, report: &Report) {
    let pooling = &report.pooling;
    h.push_str("<h2 id=\"pooling-title\">Pooling results</h2>\n");
    if pooling.rows.is_empty() {
        let why = if pooling.judged_queries == 0 {
            "No question has nuggets: nothing to evaluate."
        } else {
            "No run in runs/."
        };
        let _ = writeln!(h, "<p class=\"note\">{why}</p>");
        return;
    }
    let _ = writeln!(
        h,
        "<p class=\"note\">Each pooling run of runs/ scored over the {} judged questions \
         (best per setting in bold).</p>",
        pooling.judged_queries
    );
    h.push_str(
        "<table id=\"pooling\">\n<thead><tr><th>Setting</th><th>Technique</th><th>Retriever</th>",
    );
    for label in MEASURE_LABELS {
        let _ = write!(h, "<th class=\"num\">{label}</th>");
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    let mut start = 0;
    while start < pooling.rows.len() {
        let setting = &pooling.rows[start].name.setting;
        let end = start
            + pooling.rows[start..]
                .iter()
                .take_while(|r| &r.name.setting == setting)
                .count();
        let group = &pooling.rows[start..end];
        let best: Vec<f64> = (0..3)
            .map(|i| {
                group
                    .iter()
                    .map(|r| r.values()[i])
                    .fold(f64::NEG_INFINITY, f64::max)
            })
            .collect();
        for row in group {
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td>",
                escape(&row.name.setting),
                escape(&row.name.technique),
                escape(&row.name.retriever)
            );
            for (value, best) in row.values().iter().zip(&best) {
                if value == best {
                    let _ = write!(h, "<td class=\"num\"><b>{value:.4}</b></td>");
                } else {
                    let _ = write!(h, "<td class=\"num\">{value:.4}</td>");
                }
            }
            h.push_str("</tr>\n");
        }
        start = end;
    }
    h.push_str("</tbody>\n</table>\n");
}

/// Colour of a (setting, technique) series: blues for inference, reds for oracle.
fn series_color(setting: &str, technique: &str) -> (u8, u8, u8) {
    const BLUES: [(u8, u8, u8); 4] = [
        (8, 81, 156),
        (49, 130, 189),
        (107, 174, 214),
        (158, 202, 225),
    ];
    const REDS: [(u8, u8, u8); 3] = [(203, 24, 29), (251, 106, 74), (252, 174, 145)];
    let position = TECHNIQUES.iter().position(|t| *t == technique);
    match setting {
        "inference" => BLUES[position.filter(|&i| i < 3).unwrap_or(3)],
        "oracle" => REDS[position.filter(|&i| i >= 3).map(|i| i - 3).unwrap_or(2)],
        _ => PALETTE[7],
    }
}

/// The Figure 3 charts: per measure, retrievers along x, one bar per (setting, technique).
pub(crate) fn pooling_charts(rows: &[PoolingRow]) -> Result<Vec<(String, String)>> {
    let rows: Vec<&PoolingRow> = rows
        .iter()
        .filter(|r| SETTINGS.contains(&r.name.setting.as_str()))
        .collect();
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let mut retrievers: Vec<&str> = rows.iter().map(|r| r.name.retriever.as_str()).collect();
    retrievers.sort_by(|a, b| retriever_rank(a).cmp(&retriever_rank(b)));
    retrievers.dedup();
    // Rows are already in display order, so series come out inference first.
    let mut techniques: Vec<(&str, &str)> = Vec::new();
    for r in &rows {
        let key = (r.name.setting.as_str(), r.name.technique.as_str());
        if !techniques.contains(&key) {
            techniques.push(key);
        }
    }
    let groups: Vec<String> = retrievers.iter().map(|r| r.to_string()).collect();
    let mut charts = Vec::with_capacity(3);
    for (mi, label) in MEASURE_LABELS.iter().enumerate() {
        let series: Vec<Series> = techniques
            .iter()
            .map(|&(setting, technique)| {
                let values = retrievers
                    .iter()
                    .map(|&retriever| {
                        rows.iter()
                            .find(|r| {
                                r.name.setting == setting
                                    && r.name.technique == technique
                                    && r.name.retriever == retriever
                            })
                            .map(|r| r.values()[mi])
                    })
                    .collect();
                Series::new(
                    format!("{setting}: {technique}"),
                    values,
                    series_color(setting, technique),
                )
            })
            .collect();
        let mut chart = BarChart::new(label.to_string(), groups.clone(), series);
        chart.y_label = label.to_string();
        charts.push((label.to_string(), render(&chart)?));
    }
    Ok(charts)
}

fn figures_section(h: &mut String, report: &Report) -> Result<()> {
    let charts = pooling_charts(&report.pooling.rows)?;
    if charts.is_empty() {
        return Ok(());
    }
    h.push_str("<h2 id=\"figures-title\">Pooling results by retriever</h2>\n");
    for (i, (label, svg)) in charts.iter().enumerate() {
        let _ = writeln!(
            h,
            "<figure id=\"figure-{i}\">\n{svg}\n<figcaption>{}: per retriever, inference \
             (blue) vs oracle (red) techniques.</figcaption>\n</figure>",
            escape(label)
        );
    }
    Ok(())
}

/// An HTML table with a header row; the first cell of each row is a name.
fn html_table(h: &mut String, id: &str, header: &[&str], rows: &[Row]) {
    let _ = write!(
        h,
        "<table id=\"{id}\">\n<thead><tr><th>{}</th>",
        escape(header[0])
    );
    for name in &header[1..] {
        let _ = write!(h, "<th class=\"num\">{}</th>", escape(name));
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for (name, cells) in rows {
        let _ = write!(h, "<tr><td>{}</td>", escape(name));
        for value in cells {
            let _ = write!(h, "<td class=\"num\">{}</td>", escape(value));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody>\n</table>\n");
}

fn share_text(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |v| format!("{:.1}%", 100.0 * v))
}

fn three(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |v| format!("{v:.3}"))
}

/// The judge health section alone, for tests.
#[cfg(test)]
pub(crate) fn judge_health_page_section(health: &JudgeHealth) -> String {
    let mut h = String::new();
    judge_health_section(&mut h, health);
    h
}

/// How far the build's LLM labels look like labels (`work/`, `reference-labels.jsonl`).
fn judge_health_section(h: &mut String, health: &JudgeHealth) {
    h.push_str("<h2 id=\"judge-health-title\">Judge health</h2>\n");
    let lenient = health
        .support_rate
        .is_some_and(|r| r > LENIENT_SUPPORT_RATE);
    let _ = writeln!(
        h,
        "<p class=\"note\">The judge ({} verdict) called {} of {} judged (nugget, document) \
         pairs supported, before filtering; expert-style reference labels of the quickstart's \
         pools call {} supported.{}</p>",
        escape(&health.verdict),
        share_text(health.support_rate),
        health.pairs,
        share_text(Some(REFERENCE_SUPPORT_RATE)),
        if lenient {
            " A judge this lenient cannot tell retrievers apart: treat these labels as noise."
        } else {
            ""
        }
    );
    let rows: Vec<Row> = vec![
        ("Judged pairs".into(), vec![health.pairs.to_string()]),
        (
            "Without a verdict".into(),
            vec![health.unjudged.to_string()],
        ),
        ("Supported".into(), vec![share_text(health.support_rate)]),
        ("Nuggets kept".into(), vec![health.nuggets.to_string()]),
        (
            "Nuggets dropped: cut".into(),
            vec![health.nuggets_dropped_cut.to_string()],
        ),
        (
            "Nuggets dropped: restating the question".into(),
            vec![health.nuggets_dropped_restating.to_string()],
        ),
    ];
    let mut rows = rows;
    if health.nuggets_dropped_repeated > 0 {
        rows.push((
            "Nuggets dropped: repeating another".into(),
            vec![health.nuggets_dropped_repeated.to_string()],
        ));
    }
    if health.quotes > 0 {
        rows.push(("Evidence quotes".into(), vec![health.quotes.to_string()]));
        rows.push((
            "Quotes found in their document".into(),
            vec![share_text(Some(
                health.quotes_verified as f64 / health.quotes as f64,
            ))],
        ));
    }
    if let Some(kappa) = health.self_consistency {
        rows.push((
            "Self-consistency: second vote (shuffled) vs first, kappa".into(),
            vec![format!("{kappa:.3}")],
        ));
    }
    html_table(h, "judge-health", &["Measure", "Value"], &rows);
    if !health.by_position.is_empty() {
        let rows: Vec<Row> = health
            .by_position
            .iter()
            .map(|p| {
                (
                    p.position.to_string(),
                    vec![p.pairs.to_string(), share_text(Some(p.support_rate))],
                )
            })
            .collect();
        html_table(
            h,
            "judge-position",
            &["Position in the call", "Pairs", "Supported"],
            &rows,
        );
    }
    if let Some(a) = &health.agreement {
        let c = &a.overall;
        let interval = a.kappa_ci95.map_or(String::new(), |[lo, hi]| {
            format!(" (95% interval {lo:.3} to {hi:.3})")
        });
        let _ = writeln!(
            h,
            "<p class=\"note\">Against reference-labels.jsonl on {} shared pairs ({} only in \
             the labels, {} only in the judgments): Cohen's kappa {}{}.</p>",
            c.pairs,
            a.only_in_labels.count,
            a.only_in_judgments.count,
            three(c.kappa),
            escape(&interval)
        );
        let rows: Vec<Row> = vec![(
            "all".into(),
            vec![
                c.pairs.to_string(),
                share_text(c.judge_support_rate),
                share_text(c.reference_support_rate),
                three(c.precision),
                three(c.recall),
                three(c.f1),
                three(c.kappa),
            ],
        )];
        html_table(
            h,
            "judge-agreement",
            &[
                "Pairs",
                "Count",
                "Judge supported",
                "Reference supported",
                "Precision",
                "Recall",
                "F1",
                "Kappa",
            ],
            &rows,
        );
    }
}

/// Table 5 of the annotations in `DIR/calibration/` (`freshstack calibrate`).
fn calibration_section(h: &mut String, scores: &CalibrationScores) {
    h.push_str("<h2 id=\"calibration-title\">Calibration</h2>\n");
    let _ = writeln!(
        h,
        "<p class=\"note\">Expert review of the LLM's nuggets and judgments (paper Table 5) \
         from {} annotation file(s) in calibration/: per question, then averaged over \
         questions; pooled sums over nuggets.</p>",
        scores.annotators.len()
    );
    html_table(
        h,
        "calibration-nuggets",
        &[
            "Annotator",
            "Questions",
            "Nuggets",
            "Precision",
            "Recall",
            "Groundedness",
            "Precision (pooled)",
            "Recall (pooled)",
            "Groundedness (pooled)",
        ],
        &scores.nugget_rows(),
    );
    if let Some(note) = scores.undefined_note() {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", escape(&note));
    }
    html_table(
        h,
        "calibration-judgments",
        &[
            "Annotator",
            "Pairs",
            "Relevant",
            "Partially relevant",
            "Non-relevant",
        ],
        &scores.judgment_rows(),
    );
    if let Some(caption) = scores.agreement_caption() {
        let _ = writeln!(h, "<p class=\"note\">{}</p>", escape(&caption));
        html_table(
            h,
            "calibration-agreement",
            &["Item", "Items", "Observed", "Expected", "Kappa"],
            &scores.agreement_rows(),
        );
    }
}

/// What a refresh changed (`DIR/changes.json`).
fn changes_section(h: &mut String, changes: &Changes) {
    h.push_str("<h2 id=\"changes-title\">Changes</h2>\n");
    let window = match &changes.retire_before {
        Some(day) => format!(" Questions created before {day} are retired."),
        None => String::new(),
    };
    let _ = writeln!(
        h,
        "<p class=\"note\">What <code>freshstack refresh</code> changed from the old build \
         (changes.json): results whose inputs are unchanged were carried over, only the rest \
         was asked of the LLM.{}</p>",
        escape(&window)
    );
    let q = &changes.questions;
    let llm = &changes.llm;
    let rows: Vec<Row> = vec![
        ("Questions added".into(), vec![q.added.len().to_string()]),
        (
            "Questions retired".into(),
            vec![q.retired.len().to_string()],
        ),
        ("Questions kept".into(), vec![q.kept.to_string()]),
        (
            "Kept questions changed (redone)".into(),
            vec![q.changed.len().to_string()],
        ),
        (
            "Judgments reused".into(),
            vec![changes.judgments.reused.to_string()],
        ),
        (
            "Judgments new".into(),
            vec![changes.judgments.new.to_string()],
        ),
    ];
    html_table(h, "changes-summary", &["Change", "Count"], &rows);
    let stage = |name: &str, unit: &str, s: &StageRequests| -> Row {
        (
            name.to_string(),
            vec![format!("{} {unit}", s.carried), s.requests.to_string()],
        )
    };
    html_table(
        h,
        "changes-llm",
        &["Stage", "Carried over", "LLM requests"],
        &[
            stage("Nuggets", "questions", &llm.nuggets),
            stage("Query variants", "questions", &llm.variants),
            stage("Judging", "pairs", &llm.judge),
        ],
    );
    let counts = |c: &Counts| {
        [c.added, c.removed, c.changed, c.unchanged]
            .into_iter()
            .map(|n| n.to_string())
    };
    let repos: Vec<Row> = changes
        .repositories
        .iter()
        .map(|(name, r)| {
            (
                name.clone(),
                counts(&r.files).chain(counts(&r.documents)).collect(),
            )
        })
        .collect();
    html_table(
        h,
        "changes-repositories",
        &[
            "Repository",
            "Files added",
            "removed",
            "changed",
            "unchanged",
            "Docs added",
            "removed",
            "changed",
            "unchanged",
        ],
        &repos,
    );
    let _ = writeln!(
        h,
        "<p class=\"note\">Drift on the {} question(s) both exports kept: each run of the old \
         build on the old qrels, then the new run on the new qrels (new - old).</p>",
        changes.drift.questions
    );
    let show = |s: Option<&Scores>, i: usize| {
        s.map_or("-".to_string(), |s| format!("{:.4}", s.values()[i]))
    };
    let drift: Vec<Row> = changes
        .drift
        .runs
        .iter()
        .map(|r| {
            let mut cells = Vec::with_capacity(9);
            for i in 0..MEASURE_LABELS.len() {
                cells.push(show(r.old.as_ref(), i));
                cells.push(show(r.new.as_ref(), i));
                cells.push(match &r.delta {
                    Some(d) => format!("{:+.4}", d.values()[i]),
                    None => "-".to_string(),
                });
            }
            (r.run.clone(), cells)
        })
        .collect();
    let mut header = vec!["Run".to_string()];
    for label in MEASURE_LABELS {
        header.extend([format!("{label} old"), "new".into(), "change".into()]);
    }
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    html_table(h, "changes-drift", &header, &drift);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            escape("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn only_web_urls_become_links_and_control_characters_never_reach_the_page() {
        assert_eq!(
            link("https://x.y/a?b=1&c", "x"),
            "<a href=\"https://x.y/a?b=1&amp;c\">x</a>"
        );
        assert_eq!(link("HTTP://x.y", "x"), "<a href=\"HTTP://x.y\">x</a>");
        for bad in [
            "javascript:alert(1)",
            " JavaScript:alert(1)",
            "data:text/html,x",
            "/etc",
            "x",
        ] {
            assert_eq!(link(bad, "t<"), "t&lt;", "{bad}");
        }
        assert_eq!(escape("a\0b\u{1b}c\nd\te"), "a\u{fffd}b\u{fffd}c\nd\te");
    }

    #[test]
    fn colours_by_setting() {
        assert_eq!(series_color("inference", "question"), (8, 81, 156));
        assert_eq!(series_color("inference", "weird"), (158, 202, 225));
        assert_eq!(series_color("oracle", "nuggets"), (251, 106, 74));
        assert_eq!(series_color("oracle", "question"), (252, 174, 145));
    }
}
