//! Pooling results (paper Table 4): every `runs/*.trec` of an exported dataset scored with the
//! paper's three measures by [`crate::eval::evaluate`], the same numbers `freshstack eval` prints.

use std::cmp::Ordering;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dataset::Run;
use crate::error::{Error, Result};
use crate::eval::{EvalConfig, Judgments, evaluate};
use crate::progress::Progress;

/// The two pooling settings of the paper (§3.4), in display order.
pub const SETTINGS: [&str; 2] = ["inference", "oracle"];

/// Known techniques in display order: inference (the question, LLM sub-questions, LLM
/// closed-book answer), then oracle (the accepted answer, the nuggets).
pub const TECHNIQUES: [&str; 5] = [
    "question",
    "subquestions",
    "closed_book_answer",
    "answer",
    "nuggets",
];

/// A run file name split into its parts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunName {
    /// `inference`, `oracle`, or whatever the file says (`other` when it has no parts).
    pub setting: String,
    /// `question`, `subquestions`, `closed_book_answer`, `answer`, `nuggets`, ...
    pub technique: String,
    /// `bm25`, `fusion` or a dense model name (which may contain dots).
    pub retriever: String,
}

impl RunName {
    /// Splits `{setting}.{technique}.{retriever}[.trec]` on the first two dots only. A name with
    /// fewer parts becomes setting `other`, technique empty, retriever the whole stem.
    pub fn parse(file_name: &str) -> RunName {
        let stem = file_name.strip_suffix(".trec").unwrap_or(file_name);
        let mut parts = stem.splitn(3, '.');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(s), Some(t), Some(r)) if !s.is_empty() && !t.is_empty() && !r.is_empty() => {
                RunName {
                    setting: s.to_string(),
                    technique: t.to_string(),
                    retriever: r.to_string(),
                }
            }
            _ => RunName {
                setting: "other".to_string(),
                technique: String::new(),
                retriever: stem.to_string(),
            },
        }
    }

    /// Display order: settings inference, oracle, then others by name; techniques in
    /// [`TECHNIQUES`] order, then others by name; retrievers `bm25` first, `fusion` last, dense
    /// models by name between.
    pub fn display_cmp(&self, other: &RunName) -> Ordering {
        rank(&SETTINGS, &self.setting)
            .cmp(&rank(&SETTINGS, &other.setting))
            .then_with(|| {
                rank(&TECHNIQUES, &self.technique).cmp(&rank(&TECHNIQUES, &other.technique))
            })
            .then_with(|| retriever_rank(&self.retriever).cmp(&retriever_rank(&other.retriever)))
    }
}

/// Position in `known`, unknown names after all known ones, by name.
fn rank<'a>(known: &[&str], name: &'a str) -> (usize, &'a str) {
    match known.iter().position(|k| *k == name) {
        Some(i) => (i, ""),
        None => (known.len(), name),
    }
}

/// `bm25` first, `fusion` last, others by name.
pub fn retriever_rank(name: &str) -> (u8, &str) {
    match name {
        "bm25" => (0, ""),
        "fusion" => (2, ""),
        _ => (1, name),
    }
}

/// One run's row of Table 4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolingRow {
    /// Setting, technique and retriever, from the file name.
    #[serde(flatten)]
    pub name: RunName,
    /// The file, relative to the dataset directory (`runs/...trec`).
    pub run: String,
    /// alpha-nDCG@10 (4 decimals, as the reference).
    #[serde(rename = "alpha_ndcg@10")]
    pub alpha_ndcg_10: f64,
    /// Coverage@20: the mean share of a question's nuggets supported by its top 20.
    #[serde(rename = "coverage@20")]
    pub coverage_20: f64,
    /// Recall@50: the mean share of a question's relevant documents in its top 50.
    #[serde(rename = "recall@50")]
    pub recall_50: f64,
    /// Judged questions the run has no ranking for (they score 0).
    pub missing_queries: usize,
}

impl PoolingRow {
    /// The three values in the paper's order.
    pub fn values(&self) -> [f64; 3] {
        [self.alpha_ndcg_10, self.coverage_20, self.recall_50]
    }
}

/// Table 4: one row per run, in [`RunName::display_cmp`] order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PoolingResults {
    /// Questions with nuggets in `queries.jsonl`: the denominator of every mean.
    pub judged_queries: usize,
    /// One row per run file of the dataset, in [`RunName::display_cmp`] order.
    pub rows: Vec<PoolingRow>,
}

impl PoolingResults {
    /// Reads a dataset's `results.json` (written by the report); `Ok(None)` when there is none.
    /// A malformed file is an error naming it and the line.
    pub fn read(path: &Path) -> Result<Option<Self>> {
        crate::dataset::read_json_if_present(path)
    }

    /// The table as a terminal shows it: a header with the number of judged questions, then one
    /// line per run (its name without `runs/` and `.trec`) with the three measures to 4
    /// decimals. Empty when there are no runs.
    pub fn to_text_table(&self) -> String {
        if self.rows.is_empty() {
            return String::new();
        }
        let mut out = format!(
            "{:<44} {:>13} {:>11} {:>9}\n",
            format!("pooling run ({} questions)", self.judged_queries),
            MEASURE_LABELS[0],
            MEASURE_LABELS[1],
            MEASURE_LABELS[2]
        );
        for row in &self.rows {
            let name = row
                .run
                .trim_start_matches("runs/")
                .trim_end_matches(".trec");
            out.push_str(&format!(
                "{:<44} {:>13.4} {:>11.4} {:>9.4}\n",
                name, row.alpha_ndcg_10, row.coverage_20, row.recall_50
            ));
        }
        out
    }
}

/// Column labels of the three measures, in [`PoolingRow::values`] order.
pub const MEASURE_LABELS: [&str; 3] = ["alpha-nDCG@10", "Coverage@20", "Recall@50"];

/// Scores every `*.trec` file of `runs_dir` (none when the directory is absent) against
/// `judgments` with the paper's measures. A run that cannot be read is an error naming the file
/// and line. Files are read in name order, one at a time.
pub(crate) fn pooling_results(
    runs_dir: &Path,
    judgments: &Judgments,
    progress: &dyn Progress,
) -> Result<PoolingResults> {
    let mut files: Vec<(String, std::path::PathBuf)> = Vec::new();
    match std::fs::read_dir(runs_dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(runs_dir, e))?;
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                if name.ends_with(".trec") && path.is_file() {
                    files.push((name, path));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(runs_dir, e)),
    }
    files.sort();
    let mut results = PoolingResults {
        judged_queries: judgments.len(),
        rows: Vec::with_capacity(files.len()),
    };
    if judgments.is_empty() {
        return Ok(results);
    }
    let config = EvalConfig::paper();
    progress.begin("report: runs", Some(files.len() as u64));
    for (name, path) in &files {
        let run = Run::read_trec(path)?;
        let eval = evaluate(judgments, &run, &config);
        let means = &eval.means;
        results.rows.push(PoolingRow {
            name: RunName::parse(name),
            run: format!("runs/{name}"),
            alpha_ndcg_10: means[0],
            coverage_20: means[1],
            recall_50: means[2],
            missing_queries: eval.notes.missing_queries,
        });
        progress.advance(1);
    }
    progress.finish();
    results
        .rows
        .sort_by(|a, b| a.name.display_cmp(&b.name).then_with(|| a.run.cmp(&b.run)));
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_back_and_print_as_a_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.json");
        assert_eq!(PoolingResults::read(&path).unwrap(), None);
        let results = PoolingResults {
            judged_queries: 3,
            rows: vec![PoolingRow {
                name: RunName::parse("inference.question.bm25.trec"),
                run: "runs/inference.question.bm25.trec".into(),
                alpha_ndcg_10: 0.5,
                coverage_20: 0.25,
                recall_50: 1.0,
                missing_queries: 0,
            }],
        };
        std::fs::write(&path, serde_json::to_string(&results).unwrap()).unwrap();
        let read = PoolingResults::read(&path).unwrap().unwrap();
        assert_eq!(read, results);
        let table = read.to_text_table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("pooling run (3 questions)"), "{table}");
        assert!(
            lines[0].ends_with("alpha-nDCG@10 Coverage@20 Recall@50"),
            "{table}"
        );
        assert!(lines[1].starts_with("inference.question.bm25 "), "{table}");
        assert!(
            lines[1].ends_with("0.5000      0.2500    1.0000"),
            "{table}"
        );
        assert_eq!(PoolingResults::default().to_text_table(), "");
        std::fs::write(&path, "{\n  \"rows\": 5}").unwrap();
        let err = PoolingResults::read(&path).unwrap_err().to_string();
        assert!(err.contains("results.json:2"), "{err}");
    }

    #[test]
    fn parses_names_on_the_first_two_dots() {
        let n = RunName::parse("inference.subquestions.bge-base-en-v1.5.trec");
        assert_eq!(n.setting, "inference");
        assert_eq!(n.technique, "subquestions");
        assert_eq!(n.retriever, "bge-base-en-v1.5");
        let odd = RunName::parse("mybaseline.trec");
        assert_eq!(odd.setting, "other");
        assert_eq!(odd.retriever, "mybaseline");
        assert_eq!(RunName::parse("a..b.trec").setting, "other");
    }

    #[test]
    fn display_order() {
        let mut names: Vec<RunName> = [
            "oracle.nuggets.bm25",
            "inference.closed_book_answer.fusion",
            "zzz.x.y",
            "inference.question.fusion",
            "inference.question.e5",
            "inference.question.bm25",
            "oracle.answer.bm25",
        ]
        .iter()
        .map(|n| RunName::parse(n))
        .collect();
        names.sort_by(|a, b| a.display_cmp(b));
        let order: Vec<String> = names
            .iter()
            .map(|n| format!("{}.{}.{}", n.setting, n.technique, n.retriever))
            .collect();
        assert_eq!(
            order,
            [
                "inference.question.bm25",
                "inference.question.e5",
                "inference.question.fusion",
                "inference.closed_book_answer.fusion",
                "oracle.answer.bm25",
                "oracle.nuggets.bm25",
                "zzz.x.y",
            ]
        );
    }
}
