//! Several runs evaluated side by side, with paired significance against the first run, and
//! their renderings: JSON (keys `metric@k` in measure order), an aligned text table, and
//! per-question JSON lines.

use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use super::significance::{PairedTest, paired_tests};
use super::{EvalConfig, Evaluation, Judgments, evaluate};
use crate::dataset::{AtomicWriter, Rankings};
use crate::error::{Error, Result};

/// Settings of the paired randomization test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignificanceConfig {
    /// Random sign flips per comparison.
    pub permutations: usize,
    /// Seed of the generator: same seed, same p-values.
    pub seed: u64,
}

impl Default for SignificanceConfig {
    fn default() -> Self {
        Self {
            permutations: 10_000,
            seed: 42,
        }
    }
}

/// Runs evaluated on the same judgments; `tests[i - 1][m]` compares run `i` with run 0 on
/// measure `m`.
#[derive(Debug, Clone)]
pub struct Comparison {
    /// One evaluation per run, in input order.
    pub evaluations: Vec<Evaluation>,
    /// Paired tests of each later run against the first, per measure.
    pub tests: Vec<Vec<PairedTest>>,
    /// The randomization settings used.
    pub significance: SignificanceConfig,
}

/// Evaluates every run (in parallel; the output does not depend on the thread count) and tests
/// each later run against the first on every measure, over all judged questions.
pub fn compare_runs<R: Rankings>(
    judgments: &Judgments,
    runs: &[R],
    config: &EvalConfig,
    significance: SignificanceConfig,
) -> Comparison {
    let evaluations: Vec<Evaluation> = runs
        .par_iter()
        .map(|run| evaluate(judgments, run, config))
        .collect();
    let mut tests = Vec::new();
    if let Some((first, rest)) = evaluations.split_first() {
        tests = rest
            .par_iter()
            .map(|other| {
                (0..config.measures.len())
                    .map(|m| {
                        paired_tests(
                            &first.column(m),
                            &other.column(m),
                            significance.permutations,
                            significance.seed,
                        )
                    })
                    .collect()
            })
            .collect();
    }
    Comparison {
        evaluations,
        tests,
        significance,
    }
}

fn json_key(key: &str) -> String {
    serde_json::to_string(key).unwrap_or_else(|_| format!("\"{key}\""))
}

fn json_number(value: f64) -> String {
    if value.is_finite() {
        serde_json::to_string(&value).unwrap_or_else(|_| "null".into())
    } else {
        "null".into()
    }
}

fn json_means(eval: &Evaluation) -> String {
    let fields: Vec<String> = eval
        .measures
        .iter()
        .zip(&eval.means)
        .map(|(m, v)| format!("{}: {}", json_key(&m.to_string()), json_number(*v)))
        .collect();
    format!("{{{}}}", fields.join(", "))
}

impl Comparison {
    /// One run: `{"alpha_ndcg@10": 0.3071, ...}`. Several: an object per run name, each later
    /// run also carrying `p_t_test` and `p_randomization` objects keyed like its means.
    pub fn to_json(&self) -> String {
        if self.evaluations.len() == 1 {
            return json_means(&self.evaluations[0]);
        }
        let mut runs = Vec::new();
        for (i, eval) in self.evaluations.iter().enumerate() {
            let mut body = json_means(eval);
            if i > 0 {
                let tests = &self.tests[i - 1];
                let object = |pick: fn(&PairedTest) -> f64| -> String {
                    let fields: Vec<String> = eval
                        .measures
                        .iter()
                        .zip(tests)
                        .map(|(m, t)| {
                            format!("{}: {}", json_key(&m.to_string()), json_number(pick(t)))
                        })
                        .collect();
                    format!("{{{}}}", fields.join(", "))
                };
                body.pop();
                body.push_str(&format!(
                    ", \"p_t_test\": {}, \"p_randomization\": {}}}",
                    object(|t| t.t_test_p),
                    object(|t| t.randomization_p)
                ));
            }
            runs.push(format!("{}: {}", json_key(&eval.run_name), body));
        }
        format!("{{{}}}", runs.join(", "))
    }

    /// An aligned table: a row of means per run; under each later run, its t-test and
    /// randomization p-values against the first.
    pub fn to_table(&self) -> String {
        let Some(first) = self.evaluations.first() else {
            return String::new();
        };
        let headers: Vec<String> = first.measures.iter().map(|m| m.to_string()).collect();
        let mut rows: Vec<(String, Vec<String>)> = Vec::new();
        for (i, eval) in self.evaluations.iter().enumerate() {
            rows.push((
                eval.run_name.clone(),
                eval.means.iter().map(|v| format!("{v:.4}")).collect(),
            ));
            if i > 0 {
                let tests = &self.tests[i - 1];
                rows.push((
                    "  p (t-test)".into(),
                    tests.iter().map(|t| format!("{:.4}", t.t_test_p)).collect(),
                ));
                rows.push((
                    "  p (randomization)".into(),
                    tests
                        .iter()
                        .map(|t| format!("{:.4}", t.randomization_p))
                        .collect(),
                ));
            }
        }
        let name_width = rows
            .iter()
            .map(|(n, _)| n.chars().count())
            .chain(std::iter::once(3))
            .max()
            .unwrap_or(3);
        let widths: Vec<usize> = headers.iter().map(|h| h.len().max(6)).collect();
        let mut out = format!("{:<name_width$}", "run");
        for (h, w) in headers.iter().zip(&widths) {
            out.push_str(&format!("  {h:>w$}"));
        }
        out.push('\n');
        for (name, cells) in &rows {
            out.push_str(&format!("{name:<name_width$}"));
            for (c, w) in cells.iter().zip(&widths) {
                out.push_str(&format!("  {c:>w$}"));
            }
            out.push('\n');
        }
        if self.evaluations.len() > 1 {
            out.push_str(&format!(
                "p-values: paired, two-sided, against {} over {} questions; randomization test \
                 with {} sign flips, seed {}\n",
                first.run_name,
                first.per_query.len(),
                self.significance.permutations,
                self.significance.seed
            ));
        }
        out
    }

    /// Writes every measure per question as JSON lines
    /// (`{"run": .., "query_id": .., "alpha_ndcg@10": .., ...}`), runs in order, questions in
    /// judgment order; atomically.
    pub fn write_per_query(&self, path: &Path) -> Result<()> {
        let mut writer = AtomicWriter::create(path)?;
        let path = writer.path().to_path_buf();
        for eval in &self.evaluations {
            let keys: Vec<String> = eval
                .measures
                .iter()
                .map(|m| json_key(&m.to_string()))
                .collect();
            let run = json_key(&eval.run_name);
            for q in &eval.per_query {
                let mut line = format!("{{\"run\": {run}, \"query_id\": {}", json_key(&q.query_id));
                for (k, v) in keys.iter().zip(&q.values) {
                    line.push_str(&format!(", {k}: {}", json_number(*v)));
                }
                line.push_str("}\n");
                writer
                    .write_all(line.as_bytes())
                    .map_err(|e| Error::io(&path, e))?;
            }
        }
        writer.commit()
    }
}
