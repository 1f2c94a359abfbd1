//! A judge's verdicts against reference labels, pair by pair: how far the labels of a
//! benchmark can be trusted. Reads a judge stage's JSONL ([`JudgmentRecord`] rows) and a
//! reference file of `{"query_id", "nugget_id", "doc_id", "supported": bool}` rows (the format
//! of `judge-dev/labels.jsonl`), and reports on the pairs both hold: the support rate of each,
//! precision, recall and F1 of "supported", accuracy, Cohen's kappa with a bootstrap 95%
//! interval, and the same split by question and (given the pool and the batch size the judge
//! used) by the document's position in its judge call. Pairs only one side has, and pairs the
//! judge left without a verdict, are counted and named, never dropped in silence.
//!
//! With a review file (`system-nugget-review.jsonl` rows: per question `missing_nuggets` and
//! per nugget `hallucinated`, `minor_or_redundant`), Table 5's nugget quality is added.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::annotations::{NuggetAnnotation, QuestionAnnotation};
use super::score::{NuggetQuality, cohen_kappa, kappa_text, question_score};
use crate::dataset::SplitMix64;
use crate::dataset::{JudgmentRecord, PoolRow, read_jsonl_lines};
use crate::error::{Error, Result, Setting};

/// Bootstrap resamples behind the kappa interval.
const BOOTSTRAP_ROUNDS: usize = 1000;

/// The seed of the bootstrap: the same files give the same interval.
const BOOTSTRAP_SEED: u64 = 0x6a75_6467_652d_6465;

/// Most pair names listed per kind of unmatched pair.
const NAMED: usize = 10;

/// One reference label.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReferenceLabel {
    query_id: crate::dataset::QueryId,
    nugget_id: String,
    doc_id: String,
    supported: bool,
}

/// One question of a Table 5 review file.
#[derive(Debug, Clone, Deserialize)]
struct ReviewRow {
    query_id: crate::dataset::QueryId,
    missing_nuggets: u64,
    nuggets: Vec<ReviewNugget>,
}

#[derive(Debug, Clone, Deserialize)]
struct ReviewNugget {
    nugget_id: String,
    hallucinated: bool,
    minor_or_redundant: bool,
}

/// The files to compare.
#[derive(Debug, Clone)]
pub struct AgreementInputs {
    /// The judge's output (JSONL judgments).
    pub judgments: PathBuf,
    /// Reference labels (JSONL).
    pub labels: PathBuf,
    /// The pool the judge was given, for the split by position (with `docs_per_call`).
    pub pool: Option<PathBuf>,
    /// Documents per judge call, for the split by position.
    pub docs_per_call: Option<usize>,
    /// A Table 5 review of the judged build's nuggets.
    pub review: Option<PathBuf>,
}

/// Agreement on some pairs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgreementCell {
    /// Pairs both sides labelled.
    pub pairs: usize,
    /// Share the judge calls supported.
    pub judge_support_rate: Option<f64>,
    /// Share the reference calls supported.
    pub reference_support_rate: Option<f64>,
    /// Of the pairs the judge calls supported, the share the reference does too.
    pub precision: Option<f64>,
    /// Of the pairs the reference calls supported, the share the judge does too.
    pub recall: Option<f64>,
    /// Harmonic mean of precision and recall.
    pub f1: Option<f64>,
    /// Share of pairs labelled alike.
    pub accuracy: Option<f64>,
    /// Cohen's kappa ("supported" against "not supported").
    pub kappa: Option<f64>,
}

impl AgreementCell {
    fn of(pairs: &[(bool, bool)]) -> Self {
        let n = pairs.len();
        let count = |f: &dyn Fn(&(bool, bool)) -> bool| pairs.iter().filter(|p| f(p)).count();
        let judged = count(&|p| p.0);
        let reference = count(&|p| p.1);
        let both = count(&|p| p.0 && p.1);
        let alike = count(&|p| p.0 == p.1);
        let ratio = |a: usize, b: usize| (b > 0).then(|| a as f64 / b as f64);
        let precision = ratio(both, judged);
        let recall = ratio(both, reference);
        let f1 = match (precision, recall) {
            (Some(p), Some(r)) if p + r > 0.0 => Some(2.0 * p * r / (p + r)),
            (Some(_), Some(_)) => Some(0.0),
            _ => None,
        };
        let (a, b): (Vec<bool>, Vec<bool>) = pairs.iter().copied().unzip();
        Self {
            pairs: n,
            judge_support_rate: ratio(judged, n),
            reference_support_rate: ratio(reference, n),
            precision,
            recall,
            f1,
            accuracy: ratio(alike, n),
            kappa: cohen_kappa(&a, &b).kappa,
        }
    }
}

/// The split by the document's position in its judge call.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionCell {
    /// 1-based position in the call.
    pub position: usize,
    /// Agreement at that position.
    #[serde(flatten)]
    pub cell: AgreementCell,
}

/// The split by question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionCell {
    /// The question.
    pub query_id: String,
    /// Agreement on its pairs.
    #[serde(flatten)]
    pub cell: AgreementCell,
}

/// Pairs only one side has, or without a verdict: the count and the first few.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Unmatched {
    /// How many.
    pub count: usize,
    /// The first ten as `query_id nugget_id doc_id`, in sorted order.
    pub first: Vec<String>,
}

impl Unmatched {
    fn of(mut keys: Vec<String>) -> Self {
        keys.sort();
        Self {
            count: keys.len(),
            first: keys.into_iter().take(NAMED).collect(),
        }
    }
}

/// What [`agreement`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgreementReport {
    /// The judgments file.
    pub judgments: String,
    /// The reference labels.
    pub labels: String,
    /// Every shared pair.
    pub overall: AgreementCell,
    /// The 2.5th and 97.5th percentiles of kappa over bootstrap resamples of the shared pairs
    /// (seeded; undefined resamples left out).
    pub kappa_ci95: Option<[f64; 2]>,
    /// By position in the judge call (when the pool and batch size were given).
    pub by_position: Vec<PositionCell>,
    /// By question.
    pub by_question: Vec<QuestionCell>,
    /// Pairs the judgments have and the labels do not.
    pub only_in_judgments: Unmatched,
    /// Pairs the labels have and the judgments do not.
    pub only_in_labels: Unmatched,
    /// Labelled pairs the judge left without a verdict (its answer was unusable).
    pub without_verdict: Unmatched,
    /// Table 5 of the reviewed nuggets, when a review was given.
    pub nugget_quality: Option<NuggetQuality>,
}

type PairKey = (String, String, String);

fn key_text((q, n, d): &PairKey) -> String {
    format!("{q} {n} {d}")
}

/// The question a nugget id belongs to: the text before its last `_`.
fn nugget_question(nugget_id: &str) -> Option<&str> {
    nugget_id.rsplit_once('_').map(|(q, _)| q)
}

fn read_labels(path: &Path) -> Result<BTreeMap<PairKey, bool>> {
    let mut labels = BTreeMap::new();
    for (line, row) in read_jsonl_lines::<ReferenceLabel>(path)? {
        if nugget_question(&row.nugget_id) != Some(row.query_id.as_str()) {
            return Err(Error::parse(
                path,
                line,
                format!(
                    "field nugget_id: {:?} is not a nugget of question {:?} (expected {}_N)",
                    row.nugget_id, row.query_id, row.query_id
                ),
            ));
        }
        let key = (row.query_id.to_string(), row.nugget_id, row.doc_id);
        if labels.insert(key.clone(), row.supported).is_some() {
            return Err(Error::parse(
                path,
                line,
                format!("the pair {} is labelled twice", key_text(&key)),
            ));
        }
    }
    Ok(labels)
}

fn read_judgments(path: &Path) -> Result<BTreeMap<PairKey, Option<bool>>> {
    let mut judgments = BTreeMap::new();
    for (line, row) in read_jsonl_lines::<JudgmentRecord>(path)? {
        let key = (row.query_id.to_string(), row.nugget_id, row.doc_id);
        if judgments.insert(key.clone(), row.supported).is_some() {
            return Err(Error::parse(
                path,
                line,
                format!("the pair {} is judged twice", key_text(&key)),
            ));
        }
    }
    Ok(judgments)
}

/// Each (question, document)'s 1-based position in its judge call: the pool's order per
/// question (repeats dropped, as the judge drops them), cut into calls of `docs_per_call`.
pub(crate) fn read_positions(
    path: &Path,
    docs_per_call: usize,
) -> Result<HashMap<(String, String), usize>> {
    let mut order: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (_, row) in read_jsonl_lines::<PoolRow>(path)? {
        let docs = order.entry(row.query_id.to_string()).or_default();
        for id in row.doc_ids {
            if !docs.contains(&id) {
                docs.push(id);
            }
        }
    }
    let mut positions = HashMap::new();
    for (qid, docs) in order {
        for (i, doc) in docs.into_iter().enumerate() {
            positions.insert((qid.clone(), doc), i % docs_per_call + 1);
        }
    }
    Ok(positions)
}

fn read_review(path: &Path) -> Result<NuggetQuality> {
    let mut scores = Vec::new();
    for (_, row) in read_jsonl_lines::<ReviewRow>(path)? {
        scores.push(question_score(&QuestionAnnotation {
            query_id: row.query_id.to_string(),
            missing_nuggets: row.missing_nuggets,
            nuggets: row
                .nuggets
                .into_iter()
                .map(|n| NuggetAnnotation {
                    nugget_id: n.nugget_id,
                    hallucinated: n.hallucinated,
                    minor_or_redundant: n.minor_or_redundant,
                })
                .collect(),
        }));
    }
    Ok(NuggetQuality::new(&scores.iter().collect::<Vec<_>>()))
}

/// The 2.5th and 97.5th percentile of kappa over seeded bootstrap resamples of `pairs`.
fn bootstrap_kappa(pairs: &[(bool, bool)]) -> Option<[f64; 2]> {
    if pairs.is_empty() {
        return None;
    }
    let mut rng = SplitMix64::new(BOOTSTRAP_SEED);
    let mut kappas = Vec::with_capacity(BOOTSTRAP_ROUNDS);
    let (mut a, mut b) = (vec![false; pairs.len()], vec![false; pairs.len()]);
    for _ in 0..BOOTSTRAP_ROUNDS {
        for i in 0..pairs.len() {
            let (x, y) = pairs[rng.below(pairs.len())];
            a[i] = x;
            b[i] = y;
        }
        if let Some(k) = cohen_kappa(&a, &b).kappa {
            kappas.push(k);
        }
    }
    if kappas.is_empty() {
        return None;
    }
    kappas.sort_by(f64::total_cmp);
    let at = |q: f64| kappas[((kappas.len() - 1) as f64 * q).round() as usize];
    Some([at(0.025), at(0.975)])
}

/// Compares the judgments with the reference labels (module docs).
pub fn agreement(inputs: &AgreementInputs) -> Result<AgreementReport> {
    if inputs.docs_per_call == Some(0) {
        return Err(Error::invalid(Setting::DocsPerCall, "must be at least 1"));
    }
    let labels = read_labels(&inputs.labels)?;
    let judgments = read_judgments(&inputs.judgments)?;
    let positions = match (&inputs.pool, inputs.docs_per_call) {
        (Some(pool), Some(n)) => Some(read_positions(pool, n)?),
        (None, None) => None,
        _ => {
            return Err(Error::invalid(
                Setting::Pool,
                "the split by position needs both the pool and the documents per call",
            ));
        }
    };
    let mut shared: Vec<(bool, bool)> = Vec::new();
    let mut by_question: BTreeMap<&str, Vec<(bool, bool)>> = BTreeMap::new();
    let mut by_position: BTreeMap<usize, Vec<(bool, bool)>> = BTreeMap::new();
    let mut without_verdict = Vec::new();
    let mut only_in_labels = Vec::new();
    for (key, &reference) in &labels {
        match judgments.get(key) {
            None => only_in_labels.push(key_text(key)),
            Some(None) => without_verdict.push(key_text(key)),
            Some(Some(judged)) => {
                let pair = (*judged, reference);
                shared.push(pair);
                by_question.entry(key.0.as_str()).or_default().push(pair);
                if let Some(position) = positions
                    .as_ref()
                    .and_then(|p| p.get(&(key.0.clone(), key.2.clone())))
                {
                    by_position.entry(*position).or_default().push(pair);
                }
            }
        }
    }
    let only_in_judgments: Vec<String> = judgments
        .keys()
        .filter(|key| !labels.contains_key(*key))
        .map(key_text)
        .collect();
    let nugget_quality = inputs.review.as_deref().map(read_review).transpose()?;
    Ok(AgreementReport {
        judgments: inputs.judgments.display().to_string(),
        labels: inputs.labels.display().to_string(),
        overall: AgreementCell::of(&shared),
        kappa_ci95: bootstrap_kappa(&shared),
        by_position: by_position
            .into_iter()
            .map(|(position, pairs)| PositionCell {
                position,
                cell: AgreementCell::of(&pairs),
            })
            .collect(),
        by_question: by_question
            .into_iter()
            .map(|(qid, pairs)| QuestionCell {
                query_id: qid.to_string(),
                cell: AgreementCell::of(&pairs),
            })
            .collect(),
        only_in_judgments: Unmatched::of(only_in_judgments),
        only_in_labels: Unmatched::of(only_in_labels),
        without_verdict: Unmatched::of(without_verdict),
        nugget_quality,
    })
}

fn share(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |v| format!("{:.1}%", 100.0 * v))
}

fn decimal(value: Option<f64>) -> String {
    value.map_or("n/a".into(), |v| format!("{v:.3}"))
}

fn cell_row(label: &str, c: &AgreementCell) -> String {
    format!(
        "| {label} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        c.pairs,
        share(c.judge_support_rate),
        share(c.reference_support_rate),
        decimal(c.precision),
        decimal(c.recall),
        decimal(c.f1),
        decimal(c.accuracy),
        kappa_text(c.kappa)
    )
}

/// The columns after the first of every agreement table.
const CELL_COLUMNS: &str =
    "pairs | judge supported | reference supported | precision | recall | F1 | accuracy | kappa |";

/// A table's header and rule, its first column named `first`.
fn table_head(out: &mut String, first: &str) {
    let _ = writeln!(out, "| {first} | {CELL_COLUMNS}");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
}

impl AgreementReport {
    /// Markdown tables: overall, by position, by question, unmatched pairs, Table 5.
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "## Agreement of {} with {}\n",
            self.judgments, self.labels
        );
        table_head(&mut out, "what");
        out.push_str(&cell_row("all shared pairs", &self.overall));
        match self.kappa_ci95 {
            Some([lo, hi]) => {
                let _ = writeln!(
                    out,
                    "\nCohen's kappa {} (bootstrap 95% interval {lo:.3} to {hi:.3}, {BOOTSTRAP_ROUNDS} resamples).",
                    kappa_text(self.overall.kappa)
                );
            }
            None => {
                let _ = writeln!(out, "\nNo shared pair: no kappa.");
            }
        }
        for (title, unmatched) in [
            ("only in the judgments", &self.only_in_judgments),
            ("only in the labels", &self.only_in_labels),
            ("labelled but without a verdict", &self.without_verdict),
        ] {
            if unmatched.count > 0 {
                let _ = writeln!(
                    out,
                    "\n{} pair(s) {title}, not compared: {}{}",
                    unmatched.count,
                    unmatched.first.join("; "),
                    if unmatched.count > unmatched.first.len() {
                        "; ..."
                    } else {
                        ""
                    }
                );
            }
        }
        if !self.by_position.is_empty() {
            let _ = writeln!(out, "\n### By position in the judge call\n");
            table_head(&mut out, "position");
            for p in &self.by_position {
                out.push_str(&cell_row(&p.position.to_string(), &p.cell));
            }
        }
        let _ = writeln!(out, "\n### By question\n");
        table_head(&mut out, "question");
        for q in &self.by_question {
            out.push_str(&cell_row(&q.query_id, &q.cell));
        }
        if let Some(t5) = &self.nugget_quality {
            let _ = writeln!(
                out,
                "\n### Nugget quality (Table 5; {} questions, {} nuggets)\n",
                t5.questions, t5.nuggets
            );
            let _ = writeln!(out, "| precision | recall | groundedness |");
            let _ = writeln!(out, "|---|---|---|");
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                decimal(t5.precision.macro_avg),
                decimal(t5.recall.macro_avg),
                decimal(t5.groundedness.macro_avg)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn label(q: &str, n: &str, d: &str, s: bool) -> String {
        format!(
            "{{\"query_id\": \"{q}\", \"nugget_id\": \"{n}\", \"doc_id\": \"{d}\", \"supported\": {s}}}\n"
        )
    }

    fn judgment(q: &str, n: &str, d: &str, s: &str) -> String {
        format!(
            "{{\"query_id\": \"{q}\", \"nugget_id\": \"{n}\", \"doc_id\": \"{d}\", \"supported\": {s}, \"rationale\": \"\"}}\n"
        )
    }

    #[test]
    fn hand_worked_pairs_give_the_textbook_numbers() {
        let dir = tempfile::tempdir().unwrap();
        // Reference: d1, d2 supported; judge: d1, d3 supported; d4 both not.
        let labels: String = [
            ("d1", true),
            ("d2", true),
            ("d3", false),
            ("d4", false),
            ("d5", true),
        ]
        .iter()
        .map(|(d, s)| label("7", "7_0", d, *s))
        .collect();
        let judgments: String = [
            ("d1", "true"),
            ("d2", "false"),
            ("d3", "true"),
            ("d4", "false"),
            ("d5", "null"),
            ("d6", "true"),
        ]
        .iter()
        .map(|(d, s)| judgment("7", "7_0", d, s))
        .collect();
        let inputs = AgreementInputs {
            judgments: write(dir.path(), "j.jsonl", &judgments),
            labels: write(dir.path(), "l.jsonl", &labels),
            pool: Some(write(
                dir.path(),
                "pool.jsonl",
                "{\"query_id\": \"7\", \"doc_ids\": [\"d1\", \"d2\", \"d3\", \"d4\", \"d5\", \"d6\"]}\n",
            )),
            docs_per_call: Some(2),
            review: None,
        };
        let report = agreement(&inputs).unwrap();
        let all = &report.overall;
        assert_eq!(all.pairs, 4);
        assert_eq!(all.judge_support_rate, Some(0.5));
        assert_eq!(all.precision, Some(0.5));
        assert_eq!(all.recall, Some(0.5));
        assert_eq!(all.accuracy, Some(0.5));
        // p_o = 0.5, p_e = 0.5 * 0.5 + 0.5 * 0.5 = 0.5: kappa 0.
        assert!(all.kappa.unwrap().abs() < 1e-12);
        assert_eq!(report.without_verdict.first, ["7 7_0 d5"]);
        assert_eq!(report.only_in_judgments.first, ["7 7_0 d6"]);
        assert_eq!(report.only_in_labels.count, 0);
        // d1, d3 at position 1; d2, d4 at position 2.
        let positions: Vec<(usize, usize)> = report
            .by_position
            .iter()
            .map(|p| (p.position, p.cell.pairs))
            .collect();
        assert_eq!(positions, [(1, 2), (2, 2)]);
        assert_eq!(report.by_position[0].cell.judge_support_rate, Some(1.0));
        let [lo, hi] = report.kappa_ci95.unwrap();
        assert!(lo <= 0.0 && hi >= 0.0 && lo < hi, "{lo} {hi}");
        assert_eq!(report, agreement(&inputs).unwrap(), "seeded");
        let text = report.to_markdown();
        assert!(text.contains("| all shared pairs | 4 | 50.0% |"), "{text}");
        assert!(text.contains("1 pair(s) only in the judgments"), "{text}");
    }

    #[test]
    fn bad_label_files_name_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let j = write(dir.path(), "j.jsonl", &judgment("7", "7_0", "d", "true"));
        let check = |text: &str, expect: &str| {
            let inputs = AgreementInputs {
                judgments: j.clone(),
                labels: write(dir.path(), "l.jsonl", text),
                pool: None,
                docs_per_call: None,
                review: None,
            };
            let message = agreement(&inputs).unwrap_err().to_string();
            assert!(
                message.contains("l.jsonl") && message.contains(expect),
                "{message}"
            );
        };
        let ok = label("7", "7_0", "d", true);
        check(&format!("{ok}{ok}"), "l.jsonl:2:");
        check(&format!("{ok}{ok}"), "labelled twice");
        check(&label("7", "8_0", "d", true), "not a nugget of question");
        check(
            "{\"query_id\": \"7\", \"nugget_id\": \"7_0\", \"doc_id\": \"d\", \"supported\": \"yes\"}\n",
            "l.jsonl:1:",
        );
    }
}
