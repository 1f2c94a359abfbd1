//! Table 5: the paper's nugget quality formulas (§5.2.1, equations 2-4), the judgment label
//! shares (§5.2.2), and the annotators' agreement (Cohen's and Fleiss' kappa, beyond the paper).
//!
//! Per question, with N its nuggets, A and B the flags and C the missing count:
//! precision = (|N| - ΣB) / |N|, recall = (|N| - ΣB) / (|N| - ΣB + C),
//! groundedness = (|N| - ΣA) / |N|. A value whose denominator is 0 is undefined (`None`): a
//! question without nuggets has no precision or groundedness, and one whose nuggets are all
//! minor or redundant with none missing has no recall. Undefined values are left out of the
//! average over questions (macro) and counted (`undefined`); the pooled value (micro) sums the
//! numerators and denominators over questions, and is undefined only when every denominator
//! is 0.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Serialize, Serializer};

use super::annotations::{Annotations, PairLabel, QuestionAnnotation};
pub use crate::eval::agreement::{Kappa, cohen_kappa, fleiss_kappa, fleiss_kappa_of_labels};
use crate::eval::py_round;

/// Serialises a fraction rounded to 4 decimals (`null` when undefined).
fn round4<S: Serializer>(value: &Option<f64>, s: S) -> std::result::Result<S::Ok, S::Error> {
    match value {
        Some(v) => s.serialize_f64(py_round(*v, 4)),
        None => s.serialize_none(),
    }
}

/// `numerator / denominator`, undefined when the denominator is 0.
fn ratio(numerator: u64, denominator: u64) -> Option<f64> {
    (denominator > 0).then(|| numerator as f64 / denominator as f64)
}

/// One question's counts and nugget quality.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionScore {
    /// The scored question's `query_id`.
    pub query_id: String,
    /// |N|: the question's nuggets.
    pub nuggets: u64,
    /// ΣA: nuggets flagged as saying what the answer does not.
    pub hallucinated: u64,
    /// ΣB: nuggets flagged as minor or repeating another.
    pub minor_or_redundant: u64,
    /// C: nuggets the annotator says the answer's key ideas still need.
    pub missing_nuggets: u64,
    /// (|N| - ΣB) / |N|.
    #[serde(serialize_with = "round4")]
    pub precision: Option<f64>,
    /// (|N| - ΣB) / (|N| - ΣB + C).
    #[serde(serialize_with = "round4")]
    pub recall: Option<f64>,
    /// (|N| - ΣA) / |N|.
    #[serde(serialize_with = "round4")]
    pub groundedness: Option<f64>,
}

impl QuestionScore {
    fn kept(&self) -> u64 {
        self.nuggets - self.minor_or_redundant
    }
}

/// The paper's equations 2-4 for one reviewed question.
pub fn question_score(q: &QuestionAnnotation) -> QuestionScore {
    let nuggets = q.nuggets.len() as u64;
    let hallucinated = q.nuggets.iter().filter(|n| n.hallucinated).count() as u64;
    let minor = q.nuggets.iter().filter(|n| n.minor_or_redundant).count() as u64;
    let kept = nuggets - minor;
    QuestionScore {
        query_id: q.query_id.clone(),
        nuggets,
        hallucinated,
        minor_or_redundant: minor,
        missing_nuggets: q.missing_nuggets,
        precision: ratio(kept, nuggets),
        recall: ratio(kept, kept + q.missing_nuggets),
        groundedness: ratio(nuggets - hallucinated, nuggets),
    }
}

/// One measure of nugget quality over many questions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    /// The mean of the defined per-question values (the paper's number).
    #[serde(rename = "macro", serialize_with = "round4")]
    pub macro_avg: Option<f64>,
    /// Pooled over nuggets: the summed numerators over the summed denominators.
    #[serde(serialize_with = "round4")]
    pub micro: Option<f64>,
    /// Questions where the value is undefined (left out of `macro`).
    pub undefined: usize,
}

impl Metric {
    fn new(values: &[Option<f64>], numerator: u64, denominator: u64) -> Self {
        let defined: Vec<f64> = values.iter().flatten().copied().collect();
        Self {
            macro_avg: (!defined.is_empty())
                .then(|| defined.iter().sum::<f64>() / defined.len() as f64),
            micro: ratio(numerator, denominator),
            undefined: values.len() - defined.len(),
        }
    }
}

/// Nugget quality (Table 5, left).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NuggetQuality {
    /// Questions reviewed.
    pub questions: usize,
    /// Nuggets reviewed.
    pub nuggets: u64,
    /// Equation 2.
    pub precision: Metric,
    /// Equation 3.
    pub recall: Metric,
    /// Equation 4.
    pub groundedness: Metric,
}

impl NuggetQuality {
    pub(super) fn new(scores: &[&QuestionScore]) -> Self {
        let sum = |f: &dyn Fn(&QuestionScore) -> u64| scores.iter().map(|s| f(s)).sum::<u64>();
        let nuggets = sum(&|s| s.nuggets);
        let kept = sum(&|s| s.kept());
        let missing = sum(&|s| s.missing_nuggets);
        let grounded = sum(&|s| s.nuggets - s.hallucinated);
        let values = |f: &dyn Fn(&QuestionScore) -> Option<f64>| -> Vec<Option<f64>> {
            scores.iter().map(|s| f(s)).collect()
        };
        Self {
            questions: scores.len(),
            nuggets,
            precision: Metric::new(&values(&|s| s.precision), kept, nuggets),
            recall: Metric::new(&values(&|s| s.recall), kept, kept + missing),
            groundedness: Metric::new(&values(&|s| s.groundedness), grounded, nuggets),
        }
    }
}

/// Judgment quality (Table 5, right): the labels of the reviewed pairs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgmentQuality {
    /// Pairs labelled.
    pub pairs: usize,
    /// Pairs per label (`relevant`, `partially_relevant`, `non_relevant`).
    pub counts: BTreeMap<&'static str, usize>,
    /// Share of the pairs per label, rounded to 4 decimals (`null` without pairs).
    pub shares: BTreeMap<&'static str, Option<f64>>,
}

impl JudgmentQuality {
    fn new(labels: &[PairLabel]) -> Self {
        let mut counts = BTreeMap::new();
        let mut shares = BTreeMap::new();
        for label in PairLabel::ALL {
            let n = labels.iter().filter(|l| **l == label).count();
            counts.insert(label.as_str(), n);
            shares.insert(
                label.as_str(),
                ratio(n as u64, labels.len() as u64).map(|v| py_round(v, 4)),
            );
        }
        Self {
            pairs: labels.len(),
            counts,
            shares,
        }
    }

    /// The share of `label`, when there are pairs.
    pub fn share(&self, label: PairLabel) -> Option<f64> {
        let n = self.counts.get(label.as_str()).copied().unwrap_or(0);
        ratio(n as u64, self.pairs as u64)
    }
}

/// Table 5 for one annotator or for several pooled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Table5 {
    /// Table 5's nugget half: precision, recall and groundedness of the nuggets (§5.2.1).
    pub nugget_quality: NuggetQuality,
    /// Table 5's judgment half: the annotators' labels of pairs the LLM judged supporting
    /// (§5.2.2).
    pub judgment_quality: JudgmentQuality,
}

/// One annotator's Table 5 and per-question values.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnnotatorScores {
    /// The annotator's name.
    pub annotator: String,
    /// The file the annotations came from (its name).
    pub file: String,
    /// Table 5.
    #[serde(flatten)]
    pub table: Table5,
    /// Per reviewed question, in the file's order.
    pub per_question: Vec<QuestionScore>,
}

/// The agreement of two or more annotators over the items all of them labelled.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Agreement {
    /// How many annotators.
    pub annotators: usize,
    /// `cohen` (two annotators) or `fleiss` (more).
    pub method: &'static str,
    /// On the labels of the pairs every annotator labelled.
    pub pair_labels: Kappa,
    /// On the A flags of the nuggets every annotator reviewed.
    pub hallucinated: Kappa,
    /// On the B flags of the nuggets every annotator reviewed.
    pub minor_or_redundant: Kappa,
    /// Per question every annotator reviewed, in query id order.
    pub per_question: Vec<QuestionAgreement>,
}

/// How far the annotators agree on one question they all reviewed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuestionAgreement {
    /// The question.
    pub query_id: String,
    /// Its nuggets that every annotator flagged.
    pub nuggets: usize,
    /// Share of those nuggets whose A flag every annotator set alike.
    #[serde(serialize_with = "round4")]
    pub hallucinated_agreed: Option<f64>,
    /// Share of those nuggets whose B flag every annotator set alike.
    #[serde(serialize_with = "round4")]
    pub minor_or_redundant_agreed: Option<f64>,
    /// Each annotator's C, in file order.
    pub missing_nuggets: Vec<u64>,
    /// Whether every annotator gave the question's pair the same label (`null` when not all of
    /// them labelled it).
    pub pair_label_agreed: Option<bool>,
}

/// True when every element is equal to the first.
fn unanimous<T: PartialEq>(items: &[T]) -> bool {
    items.windows(2).all(|w| w[0] == w[1])
}

fn per_question_agreement(files: &[(String, Annotations)]) -> Vec<QuestionAgreement> {
    let k = files.len();
    let mut questions: BTreeMap<&str, Vec<&QuestionAnnotation>> = BTreeMap::new();
    for (_, a) in files {
        for q in &a.questions {
            questions.entry(&q.query_id).or_default().push(q);
        }
    }
    let mut pair_labels: BTreeMap<(&str, &str, &str), Vec<PairLabel>> = BTreeMap::new();
    for (_, a) in files {
        for p in &a.pairs {
            pair_labels
                .entry((&p.query_id, &p.nugget_id, &p.doc_id))
                .or_default()
                .push(p.label);
        }
    }
    questions
        .into_iter()
        .filter(|(_, reviews)| reviews.len() == k)
        .map(|(query_id, reviews)| {
            let mut flags: BTreeMap<&str, Vec<(bool, bool)>> = BTreeMap::new();
            for q in &reviews {
                for n in &q.nuggets {
                    flags
                        .entry(&n.nugget_id)
                        .or_default()
                        .push((n.hallucinated, n.minor_or_redundant));
                }
            }
            let common: Vec<&Vec<(bool, bool)>> = flags.values().filter(|v| v.len() == k).collect();
            let agreed = |pick: fn(&(bool, bool)) -> bool| {
                let same = common
                    .iter()
                    .filter(|v| unanimous(&v.iter().map(pick).collect::<Vec<_>>()))
                    .count();
                ratio(same as u64, common.len() as u64)
            };
            let labels: Vec<&Vec<PairLabel>> = pair_labels
                .iter()
                .filter(|((q, _, _), v)| *q == query_id && v.len() == k)
                .map(|(_, v)| v)
                .collect();
            QuestionAgreement {
                query_id: query_id.to_string(),
                nuggets: common.len(),
                hallucinated_agreed: agreed(|f| f.0),
                minor_or_redundant_agreed: agreed(|f| f.1),
                missing_nuggets: reviews.iter().map(|q| q.missing_nuggets).collect(),
                pair_label_agreed: (!labels.is_empty())
                    .then(|| labels.iter().all(|v| unanimous(v))),
            }
        })
        .collect()
}

fn kappa_of<T: Ord + Clone>(items: &[Vec<T>]) -> Kappa {
    match items.first().map(Vec::len) {
        Some(2) => {
            let a: Vec<T> = items.iter().map(|i| i[0].clone()).collect();
            let b: Vec<T> = items.iter().map(|i| i[1].clone()).collect();
            cohen_kappa(&a, &b)
        }
        Some(_) => fleiss_kappa_of_labels(items),
        None => Kappa::from_agreements(0, 0.0, 0.0),
    }
}

fn agreement(files: &[(String, Annotations)]) -> Agreement {
    let k = files.len();
    // Per item, the labels of the annotators who labelled it, in file order.
    let mut pairs: BTreeMap<(&str, &str, &str), Vec<PairLabel>> = BTreeMap::new();
    let mut flags: BTreeMap<(&str, &str), Vec<(bool, bool)>> = BTreeMap::new();
    for (_, a) in files {
        for p in &a.pairs {
            pairs
                .entry((&p.query_id, &p.nugget_id, &p.doc_id))
                .or_default()
                .push(p.label);
        }
        for q in &a.questions {
            for n in &q.nuggets {
                flags
                    .entry((&q.query_id, &n.nugget_id))
                    .or_default()
                    .push((n.hallucinated, n.minor_or_redundant));
            }
        }
    }
    let pair_items: Vec<Vec<PairLabel>> = pairs.into_values().filter(|v| v.len() == k).collect();
    let flag_items: Vec<Vec<(bool, bool)>> = flags.into_values().filter(|v| v.len() == k).collect();
    let a_items: Vec<Vec<bool>> = flag_items
        .iter()
        .map(|v| v.iter().map(|f| f.0).collect())
        .collect();
    let b_items: Vec<Vec<bool>> = flag_items
        .iter()
        .map(|v| v.iter().map(|f| f.1).collect())
        .collect();
    Agreement {
        annotators: k,
        method: if k == 2 { "cohen" } else { "fleiss" },
        pair_labels: kappa_of(&pair_items),
        hallucinated: kappa_of(&a_items),
        minor_or_redundant: kappa_of(&b_items),
        per_question: per_question_agreement(files),
    }
}

/// Table 5 per annotator, pooled over all of them, and their agreement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CalibrationScores {
    /// One entry per annotation file, in the order given.
    pub annotators: Vec<AnnotatorScores>,
    /// Every annotator's questions and pairs pooled (two or more annotators).
    pub combined: Option<Table5>,
    /// The annotators' agreement (two or more annotators).
    pub agreement: Option<Agreement>,
}

/// Scores annotation files: `(file name, annotations)` per annotator.
pub fn score(files: &[(String, Annotations)]) -> CalibrationScores {
    let annotators: Vec<AnnotatorScores> = files
        .iter()
        .map(|(file, a)| {
            let per_question: Vec<QuestionScore> = a.questions.iter().map(question_score).collect();
            let labels: Vec<PairLabel> = a.pairs.iter().map(|p| p.label).collect();
            AnnotatorScores {
                annotator: a.annotator.clone(),
                file: file.clone(),
                table: Table5 {
                    nugget_quality: NuggetQuality::new(&per_question.iter().collect::<Vec<_>>()),
                    judgment_quality: JudgmentQuality::new(&labels),
                },
                per_question,
            }
        })
        .collect();
    let (combined, agreement) = if files.len() >= 2 {
        let all: Vec<&QuestionScore> = annotators.iter().flat_map(|a| &a.per_question).collect();
        let labels: Vec<PairLabel> = files
            .iter()
            .flat_map(|(_, a)| a.pairs.iter().map(|p| p.label))
            .collect();
        (
            Some(Table5 {
                nugget_quality: NuggetQuality::new(&all),
                judgment_quality: JudgmentQuality::new(&labels),
            }),
            Some(agreement(files)),
        )
    } else {
        (None, None)
    };
    CalibrationScores {
        annotators,
        combined,
        agreement,
    }
}

/// `value` as a percentage with one decimal, `n/a` when undefined.
pub(crate) fn percent(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".into(), |v| format!("{:.1}%", 100.0 * v))
}

/// A kappa with three decimals, `n/a` when undefined.
pub(crate) fn kappa_text(value: Option<f64>) -> String {
    value.map_or_else(|| "n/a".into(), |v| format!("{v:.3}"))
}

/// One row of a table: a label and its cells.
pub(crate) type Row = (String, Vec<String>);

impl CalibrationScores {
    /// The rows of the nugget quality table: per annotator (and `all` when pooled): questions,
    /// nuggets, precision, recall, groundedness (macro), the same pooled (micro).
    pub(crate) fn nugget_rows(&self) -> Vec<Row> {
        self.tables()
            .into_iter()
            .map(|(name, t)| {
                let q = &t.nugget_quality;
                (
                    name,
                    vec![
                        q.questions.to_string(),
                        q.nuggets.to_string(),
                        percent(q.precision.macro_avg),
                        percent(q.recall.macro_avg),
                        percent(q.groundedness.macro_avg),
                        percent(q.precision.micro),
                        percent(q.recall.micro),
                        percent(q.groundedness.micro),
                    ],
                )
            })
            .collect()
    }

    /// The rows of the judgment quality table: pairs and the share of each label.
    pub(crate) fn judgment_rows(&self) -> Vec<Row> {
        self.tables()
            .into_iter()
            .map(|(name, t)| {
                let j = &t.judgment_quality;
                let mut cells = vec![j.pairs.to_string()];
                cells.extend(PairLabel::ALL.iter().map(|l| percent(j.share(*l))));
                (name, cells)
            })
            .collect()
    }

    /// The rows of the agreement table: items, observed and expected agreement, kappa.
    pub(crate) fn agreement_rows(&self) -> Vec<Row> {
        let Some(a) = &self.agreement else {
            return Vec::new();
        };
        [
            ("pair label", &a.pair_labels),
            ("A: hallucinated", &a.hallucinated),
            ("B: minor or redundant", &a.minor_or_redundant),
        ]
        .into_iter()
        .map(|(name, k)| {
            (
                name.to_string(),
                vec![
                    k.items.to_string(),
                    percent(k.observed),
                    percent(k.expected),
                    kappa_text(k.kappa),
                ],
            )
        })
        .collect()
    }

    /// The rows of the per-question agreement table: nuggets, A and B flags agreed, each
    /// annotator's C, pair label agreed.
    pub(crate) fn question_agreement_rows(&self) -> Vec<Row> {
        let Some(a) = &self.agreement else {
            return Vec::new();
        };
        a.per_question
            .iter()
            .map(|q| {
                (
                    q.query_id.clone(),
                    vec![
                        q.nuggets.to_string(),
                        percent(q.hallucinated_agreed),
                        percent(q.minor_or_redundant_agreed),
                        q.missing_nuggets
                            .iter()
                            .map(u64::to_string)
                            .collect::<Vec<_>>()
                            .join(" / "),
                        match q.pair_label_agreed {
                            Some(true) => "yes".into(),
                            Some(false) => "no".into(),
                            None => "n/a".into(),
                        },
                    ],
                )
            })
            .collect()
    }

    /// The line saying what the agreement is, when there is one.
    pub(crate) fn agreement_caption(&self) -> Option<String> {
        self.agreement.as_ref().map(|a| {
            format!(
                "Agreement of {} annotators ({}) over the items all of them labelled (kappa \
                 is n/a when chance agreement is 1: every label the same).",
                a.annotators,
                if a.method == "cohen" {
                    "Cohen's kappa"
                } else {
                    "Fleiss' kappa"
                }
            )
        })
    }

    /// The note on undefined values, when some value is undefined.
    pub(crate) fn undefined_note(&self) -> Option<String> {
        let undefined: Vec<String> = self
            .annotators
            .iter()
            .filter_map(|a| {
                let q = &a.table.nugget_quality;
                let counts = [
                    ("precision", q.precision.undefined),
                    ("recall", q.recall.undefined),
                    ("groundedness", q.groundedness.undefined),
                ];
                let parts: Vec<String> = counts
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(m, n)| format!("{m} {n}"))
                    .collect();
                (!parts.is_empty()).then(|| format!("{}: {}", a.annotator, parts.join(", ")))
            })
            .collect();
        (!undefined.is_empty()).then(|| {
            format!(
                "Undefined values (a question without nuggets has no precision or groundedness; \
                 one whose nuggets are all minor or redundant, with none missing, has no recall) \
                 are left out of the averages over questions. Questions left out: {}.",
                undefined.join("; ")
            )
        })
    }

    /// (name, table) per annotator, then `all` when pooled.
    fn tables(&self) -> Vec<(String, &Table5)> {
        let mut rows: Vec<(String, &Table5)> = self
            .annotators
            .iter()
            .map(|a| (a.annotator.clone(), &a.table))
            .collect();
        if let Some(t) = &self.combined {
            rows.push(("all annotators".into(), t));
        }
        rows
    }

    /// Table 5 as Markdown: nugget quality, judgment quality and, with two or more annotators,
    /// agreement.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        md.push_str("## Nugget quality (paper Table 5)\n\n");
        md.push_str(
            "Per question, then averaged over questions; \"pooled\" sums over nuggets.\n\n",
        );
        markdown_table(
            &mut md,
            &[
                "annotator",
                "questions",
                "nuggets",
                "precision",
                "recall",
                "groundedness",
                "precision (pooled)",
                "recall (pooled)",
                "groundedness (pooled)",
            ],
            &self.nugget_rows(),
        );
        if let Some(note) = self.undefined_note() {
            let _ = writeln!(md, "\n{note}");
        }
        md.push_str("\n## Judgment quality (paper Table 5)\n\n");
        markdown_table(
            &mut md,
            &[
                "annotator",
                "pairs",
                "relevant",
                "partially relevant",
                "non-relevant",
            ],
            &self.judgment_rows(),
        );
        if let Some(caption) = self.agreement_caption() {
            let _ = writeln!(md, "\n## Agreement\n\n{caption}\n");
            markdown_table(
                &mut md,
                &["item", "items", "observed", "expected", "kappa"],
                &self.agreement_rows(),
            );
            md.push_str(
                "\nPer question all of them reviewed: the share of its nuggets whose A (B) flag \
                 they all set alike, each annotator's C, and whether they gave its pair one \
                 label.\n\n",
            );
            markdown_table(
                &mut md,
                &[
                    "question",
                    "nuggets",
                    "A agreed",
                    "B agreed",
                    "C per annotator",
                    "pair label agreed",
                ],
                &self.question_agreement_rows(),
            );
        }
        md
    }
}

/// Escapes a Markdown table cell (`|` and line breaks).
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn markdown_table(md: &mut String, header: &[&str], rows: &[Row]) {
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(
        md,
        "|---|{}",
        header[1..].iter().map(|_| "---:|").collect::<String>()
    );
    for (name, cells) in rows {
        let _ = writeln!(md, "| {} | {} |", cell(name), cells.join(" | "));
    }
}
