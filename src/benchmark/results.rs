//! What a benchmark produces: per topic and retriever, the paper's three measures; written as
//! `results.json` (machine-readable, byte-identical for identical inputs: no timings, no paths
//! outside the output directory) and `results.md` (one table, topics side by side, in the
//! layout of the paper's Table 4 / the leaderboard, plus an average when there are several
//! topics, and the paper's published rows in a separate labelled table).

use std::fmt::Write as _;

use serde::Serialize;

use super::paper::PaperResults;
use super::topic::JudgedCheck;
use crate::eval::EvalNotes;

/// One topic's inputs, as recorded in the results.
#[derive(Debug, Clone, Serialize)]
pub struct TopicSummary {
    /// Column name.
    pub name: String,
    /// The questions' dataset, as given.
    pub queries: String,
    /// The corpus' dataset, as given.
    pub corpus: String,
    /// Questions loaded for the topic (with or without nuggets).
    pub num_queries: usize,
    /// Documents of the topic's corpus.
    pub num_documents: usize,
    /// Nuggets over all questions.
    pub num_nuggets: usize,
    /// Judged documents missing from the corpus.
    pub judged: JudgedCheck,
    /// Questions BM25 could not search (no term left after analysis): no results.
    pub unsearchable_queries: usize,
    /// True when the index was reused from an earlier call.
    pub index_reused: bool,
}

/// One retriever on one topic.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    /// Topic name.
    pub topic: String,
    /// Retriever (`bm25`, `dense:NAME`, `fusion`).
    pub retriever: String,
    /// The run file, relative to the output directory.
    pub run_file: String,
    /// Measure names (`alpha_ndcg@10`, ...) to means (4 decimals, as the reference).
    pub metrics: Vec<(String, f64)>,
    /// Questions judged / in the run / empty.
    pub notes: NotesSummary,
}

/// [`EvalNotes`] in the results.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NotesSummary {
    /// Questions the run lists with no document.
    pub empty_rankings: usize,
    /// Judged questions absent from the run (scored 0).
    pub missing_queries: usize,
    /// Run questions without nugget judgments (ignored).
    pub unknown_queries: usize,
}

impl From<&EvalNotes> for NotesSummary {
    fn from(n: &EvalNotes) -> Self {
        Self {
            empty_rankings: n.empty_rankings,
            missing_queries: n.missing_queries,
            unknown_queries: n.unknown_queries,
        }
    }
}

/// Everything one `freshstack benchmark` call measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchmarkResults {
    /// `freshstack <version>`.
    pub created_by: String,
    /// Results retrieved per question.
    pub k: usize,
    /// The measures, in column order.
    pub measures: Vec<String>,
    /// Retrievers, in row order.
    pub retrievers: Vec<String>,
    /// Topics, in column order.
    pub topics: Vec<TopicSummary>,
    /// One entry per (topic, retriever), topics outer.
    pub results: Vec<RunResult>,
}

/// Column title of a measure: the paper's abbreviations.
fn short(measure: &str) -> String {
    match measure {
        "alpha_ndcg@10" => "α-N@10".to_string(),
        "coverage@20" => "Cov@20".to_string(),
        "recall@50" => "Rec@50".to_string(),
        other => other.to_string(),
    }
}

impl BenchmarkResults {
    /// The results as pretty JSON.
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The mean of `measure` for `retriever` on `topic`.
    pub fn value(&self, topic: &str, retriever: &str, measure: &str) -> Option<f64> {
        self.results
            .iter()
            .find(|r| r.topic == topic && r.retriever == retriever)?
            .metrics
            .iter()
            .find(|(m, _)| m == measure)
            .map(|(_, v)| *v)
    }

    /// The Markdown report: our table, then (when given) the paper's rows for these topics.
    pub fn to_markdown(&self, paper: Option<&PaperResults>) -> String {
        let topics: Vec<String> = self.topics.iter().map(|t| t.name.clone()).collect();
        let average = topics.len() > 1;
        let mut md = String::new();
        let _ = writeln!(
            md,
            "# FreshStack benchmark\n\nQuestion-only retrieval (`query_title + \" \" + query_text`), \
             top {} per question; alpha-nDCG@10, Coverage@20, Recall@50 computed as the reference \
             evaluator (freshstack 0.0.6) does. Written by {}.\n",
            self.k, self.created_by
        );
        let _ = writeln!(md, "{}", self.header(&topics, "Retriever", average));
        for retriever in &self.retrievers {
            let mut cells = vec![retriever.clone()];
            let mut sums = vec![0.0; self.measures.len()];
            for topic in &topics {
                for (i, m) in self.measures.iter().enumerate() {
                    match self.value(topic, retriever, m) {
                        Some(v) => {
                            sums[i] += v;
                            cells.push(format!("{v:.3}"));
                        }
                        None => cells.push("–".to_string()),
                    }
                }
            }
            if average {
                for sum in &sums {
                    cells.push(format!("{:.3}", sum / topics.len() as f64));
                }
            }
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
        let _ = writeln!(md);
        for t in &self.topics {
            let _ = write!(
                md,
                "- **{}**: {} questions ({} nuggets), {} documents; queries `{}`, corpus `{}`",
                t.name, t.num_queries, t.num_nuggets, t.num_documents, t.queries, t.corpus
            );
            if t.judged.unknown_docs > 0 {
                let _ = write!(
                    md,
                    "; **{} of {} judged documents are not in the corpus**",
                    t.judged.unknown_docs, t.judged.judged_docs
                );
            }
            if t.unsearchable_queries > 0 {
                let _ = write!(
                    md,
                    "; {} questions without a BM25 term",
                    t.unsearchable_queries
                );
            }
            let _ = writeln!(md);
        }
        if let Some(paper) = paper {
            md.push_str(&paper_table(paper, &topics, &self.measures));
        }
        md
    }

    fn header(&self, topics: &[String], first: &str, average: bool) -> String {
        let mut head = vec![first.to_string()];
        for topic in topics {
            for m in &self.measures {
                head.push(format!("{topic} {}", short(m)));
            }
        }
        if average {
            for m in &self.measures {
                head.push(format!("avg {}", short(m)));
            }
        }
        let rule: Vec<&str> = head
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---" } else { "---:" })
            .collect();
        format!("| {} |\n| {} |", head.join(" | "), rule.join(" | "))
    }
}

/// The paper's rows for `topics` (those it has), under a heading that says whose they are.
fn paper_table(paper: &PaperResults, topics: &[String], measures: &[String]) -> String {
    let known: Vec<String> = topics
        .iter()
        .filter(|t| paper.topics.contains_key(*t))
        .cloned()
        .collect();
    if known.is_empty() {
        return String::new();
    }
    let mut md = String::new();
    let _ = writeln!(
        md,
        "\n## Published numbers (the paper's, not ours)\n\n{}. Query settings differ from ours: \
         *inference* rows query with GPT-4o variants of the question, *oracle* rows with the \
         gold answer or its nuggets; rows marked † are Figure 3's oracle reference lines.\n",
        paper.source
    );
    // Columns follow the paper's measure order; a measure we did not compute is still shown.
    let positions: Vec<Option<usize>> = measures
        .iter()
        .map(|m| paper.measures.iter().position(|p| p == m))
        .collect();
    let mut head = vec!["Setting".to_string(), "Model".to_string()];
    for topic in &known {
        for m in measures {
            head.push(format!("{topic} {}", short(m)));
        }
    }
    let rule: Vec<&str> = head
        .iter()
        .enumerate()
        .map(|(i, _)| if i < 2 { "---" } else { "---:" })
        .collect();
    let _ = writeln!(md, "| {} |\n| {} |", head.join(" | "), rule.join(" | "));
    for row in paper.rows_for(&known) {
        let model = if row.figure3 {
            format!("{} †", row.model)
        } else {
            row.model.clone()
        };
        let mut cells = vec![format!("{} ({})", row.setting, row.table), model];
        for topic in &known {
            for pos in &positions {
                let value = row
                    .scores
                    .get(topic)
                    .zip(*pos)
                    .and_then(|(scores, i)| scores.get(i));
                cells.push(value.map_or("–".to_string(), |v| format!("{v:.3}")));
            }
        }
        let _ = writeln!(md, "| {} |", cells.join(" | "));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> BenchmarkResults {
        let topic = |name: &str| TopicSummary {
            name: name.to_string(),
            queries: format!("q:{name}"),
            corpus: format!("c:{name}"),
            num_queries: 2,
            num_documents: 10,
            num_nuggets: 5,
            judged: JudgedCheck::default(),
            unsearchable_queries: 0,
            index_reused: false,
        };
        let result = |topic: &str, values: [f64; 3]| RunResult {
            topic: topic.to_string(),
            retriever: "bm25".to_string(),
            run_file: format!("runs/{topic}/bm25.trec"),
            metrics: ["alpha_ndcg@10", "coverage@20", "recall@50"]
                .iter()
                .map(|m| m.to_string())
                .zip(values)
                .collect(),
            notes: NotesSummary::default(),
        };
        BenchmarkResults {
            created_by: "freshstack test".into(),
            k: 100,
            measures: vec![
                "alpha_ndcg@10".into(),
                "coverage@20".into(),
                "recall@50".into(),
            ],
            retrievers: vec!["bm25".into()],
            topics: vec![topic("langchain"), topic("mine")],
            results: vec![
                result("langchain", [0.2, 0.5, 0.3]),
                result("mine", [0.4, 0.7, 0.5]),
            ],
        }
    }

    #[test]
    fn one_table_with_averages_and_the_papers_rows_apart() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/paper-results.toml");
        let paper = PaperResults::read(&path).unwrap();
        let md = results().to_markdown(Some(&paper));
        assert!(
            md.contains(
                "| Retriever | langchain α-N@10 | langchain Cov@20 | langchain Rec@50 | mine α-N@10"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "| bm25 | 0.200 | 0.500 | 0.300 | 0.400 | 0.700 | 0.500 | 0.300 | 0.600 | 0.400 |"
            ),
            "{md}"
        );
        let (ours, theirs) = md
            .split_once("## Published numbers (the paper's, not ours)")
            .unwrap();
        assert!(!ours.contains("0.228"));
        // Only the topics the paper has; every Table 4 row, Figure 3's marked.
        assert!(
            theirs.contains(
                "| inference: GPT-4o sub-questions (Table 4) | BM25 | 0.228 | 0.495 | 0.249 |"
            ),
            "{theirs}"
        );
        assert!(!theirs.contains("mine"));
        assert_eq!(theirs.matches("†").count(), 3);
        assert_eq!(
            theirs
                .lines()
                .filter(|l| l.starts_with("| ") && l.contains("(Table 4)"))
                .count(),
            20
        );
    }
}
