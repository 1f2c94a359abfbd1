//! `annotations.json`, what the review page exports: read field by field, so that every error
//! names the file and the field (`questions[2].missing_nuggets`), never only a line and column.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use super::CalibrationSample;
use crate::error::{Error, Result};

/// The most nuggets a reviewer can say one answer is missing: far above any real answer, and
/// low enough that the recall's sums over any number of questions cannot overflow.
pub const MAX_MISSING_NUGGETS: u64 = 10_000;

/// One annotator's review of a sample (the shape the review page exports).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Annotations {
    /// Who annotated (not empty).
    pub annotator: String,
    /// The questions whose nuggets were reviewed.
    pub questions: Vec<QuestionAnnotation>,
    /// The (nugget, document) pairs labelled.
    pub pairs: Vec<PairAnnotation>,
}

/// The review of one question's nuggets (paper §5.2.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuestionAnnotation {
    /// The reviewed question's `query_id`.
    pub query_id: String,
    /// C: how many more nuggets the answer's key ideas need.
    pub missing_nuggets: u64,
    /// Every nugget of the question with its A and B flags.
    pub nuggets: Vec<NuggetAnnotation>,
}

/// The A and B flags of one nugget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NuggetAnnotation {
    /// The flagged nugget's id (`QUERYID_N`, as in `queries.jsonl`).
    pub nugget_id: String,
    /// A: the nugget says what the answer does not (hallucinated).
    pub hallucinated: bool,
    /// B: the nugget is minor or repeats another.
    pub minor_or_redundant: bool,
}

/// The label of one (nugget, document) pair (paper §5.2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PairAnnotation {
    /// The `query_id` of the nugget's question.
    pub query_id: String,
    /// The judged nugget's id (`QUERYID_N`).
    pub nugget_id: String,
    /// The document the LLM judged to support the nugget.
    pub doc_id: String,
    /// The annotator's label.
    pub label: PairLabel,
}

/// The three-level relevance scale of the paper's judgment review.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PairLabel {
    /// The document supports the nugget.
    Relevant,
    /// The document supports part of the nugget.
    PartiallyRelevant,
    /// The document does not support the nugget (the LLM's judgment was wrong).
    NonRelevant,
}

impl PairLabel {
    /// The three labels, in the order tables show them.
    pub const ALL: [PairLabel; 3] = [
        PairLabel::Relevant,
        PairLabel::PartiallyRelevant,
        PairLabel::NonRelevant,
    ];

    /// The label as written in `annotations.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            PairLabel::Relevant => "relevant",
            PairLabel::PartiallyRelevant => "partially_relevant",
            PairLabel::NonRelevant => "non_relevant",
        }
    }

    /// The label as tables show it.
    pub fn title(self) -> &'static str {
        match self {
            PairLabel::Relevant => "relevant",
            PairLabel::PartiallyRelevant => "partially relevant",
            PairLabel::NonRelevant => "non-relevant",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == text)
    }
}

/// Reads fields of one JSON object, naming them by their path in errors.
struct Fields<'a> {
    path: &'a Path,
    at: String,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn new(path: &'a Path, at: String, value: &'a Value) -> Result<Self> {
        match value {
            Value::Object(map) => Ok(Self { path, at, map }),
            other => Err(field_error(
                path,
                &at,
                &format!("expected an object, got {}", kind(other)),
            )),
        }
    }

    fn name(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        }
    }

    fn get(&self, key: &str) -> Result<&'a Value> {
        self.map
            .get(key)
            .ok_or_else(|| field_error(self.path, &self.name(key), "missing"))
    }

    fn error(&self, key: &str, message: &str) -> Error {
        field_error(self.path, &self.name(key), message)
    }

    /// A string (or, for ids, a number written as its text); empty is refused.
    fn id(&self, key: &str) -> Result<String> {
        let text = match self.get(key)? {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(self.error(
                    key,
                    &format!("expected a string or a number, got {}", kind(other)),
                ));
            }
        };
        if text.trim().is_empty() {
            return Err(self.error(key, "empty"));
        }
        Ok(text)
    }

    fn bool(&self, key: &str) -> Result<bool> {
        match self.get(key)? {
            Value::Bool(b) => Ok(*b),
            other => Err(self.error(key, &format!("expected true or false, got {}", kind(other)))),
        }
    }

    fn count(&self, key: &str) -> Result<u64> {
        let value = self.get(key)?;
        value.as_u64().ok_or_else(|| {
            self.error(
                key,
                &format!("expected a non-negative integer, got {}", short(value)),
            )
        })
    }

    fn array(&self, key: &str) -> Result<&'a Vec<Value>> {
        match self.get(key)? {
            Value::Array(items) => Ok(items),
            other => Err(self.error(key, &format!("expected an array, got {}", kind(other)))),
        }
    }
}

fn field_error(path: &Path, field: &str, message: &str) -> Error {
    let field = if field.is_empty() {
        "(top level)"
    } else {
        field
    };
    Error::Dataset {
        path: path.to_path_buf(),
        message: format!("field {field}: {message}"),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The value as JSON, cut to 40 characters.
fn short(value: &Value) -> String {
    let text = value.to_string();
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

impl Annotations {
    /// Reads and checks an `annotations.json` file.
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            crate::dataset::bounded::read_text(path, crate::dataset::bounded::MAX_SETTINGS_BYTES)
                .map_err(|e| Error::io(path, e))?;
        Self::parse(&text, path)
    }

    /// Parses and checks the text of an `annotations.json` file (`path` names it in errors):
    /// every field present and of its type, labels among the three, no question, nugget of a
    /// question or pair given twice.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| Error::parse(path, e.line(), e.to_string()))?;
        let top = Fields::new(path, String::new(), &value)?;
        let annotator = match top.get("annotator")? {
            Value::String(s) if !s.trim().is_empty() => s.clone(),
            Value::String(_) => return Err(top.error("annotator", "empty")),
            other => {
                return Err(top.error(
                    "annotator",
                    &format!("expected a string, got {}", kind(other)),
                ));
            }
        };
        let mut questions = Vec::new();
        let mut seen_questions = BTreeSet::new();
        for (i, item) in top.array("questions")?.iter().enumerate() {
            let q = Fields::new(path, format!("questions[{i}]"), item)?;
            let query_id = q.id("query_id")?;
            if !seen_questions.insert(query_id.clone()) {
                return Err(q.error("query_id", &format!("{query_id:?} appears twice")));
            }
            let missing_nuggets = q.count("missing_nuggets")?;
            if missing_nuggets > MAX_MISSING_NUGGETS {
                return Err(q.error(
                    "missing_nuggets",
                    &format!(
                        "{missing_nuggets} is not a count of one answer's nuggets (at most \
                         {MAX_MISSING_NUGGETS})"
                    ),
                ));
            }
            let mut nuggets = Vec::new();
            let mut seen_nuggets = BTreeSet::new();
            for (j, item) in q.array("nuggets")?.iter().enumerate() {
                let n = Fields::new(path, format!("questions[{i}].nuggets[{j}]"), item)?;
                let nugget_id = n.id("nugget_id")?;
                if !seen_nuggets.insert(nugget_id.clone()) {
                    return Err(n.error("nugget_id", &format!("{nugget_id:?} appears twice")));
                }
                nuggets.push(NuggetAnnotation {
                    nugget_id,
                    hallucinated: n.bool("hallucinated")?,
                    minor_or_redundant: n.bool("minor_or_redundant")?,
                });
            }
            questions.push(QuestionAnnotation {
                query_id,
                missing_nuggets,
                nuggets,
            });
        }
        let mut pairs = Vec::new();
        let mut seen_pairs = BTreeSet::new();
        for (i, item) in top.array("pairs")?.iter().enumerate() {
            let p = Fields::new(path, format!("pairs[{i}]"), item)?;
            let query_id = p.id("query_id")?;
            let nugget_id = p.id("nugget_id")?;
            let doc_id = p.id("doc_id")?;
            let label = match p.get("label")? {
                Value::String(s) => PairLabel::parse(s).ok_or_else(|| {
                    p.error(
                        "label",
                        &format!(
                            "unknown label {s:?} (expected relevant, partially_relevant or \
                             non_relevant)"
                        ),
                    )
                })?,
                other => {
                    return Err(
                        p.error("label", &format!("expected a string, got {}", kind(other)))
                    );
                }
            };
            if !seen_pairs.insert((query_id.clone(), nugget_id.clone(), doc_id.clone())) {
                return Err(p.error(
                    "doc_id",
                    &format!("the pair ({query_id:?}, {nugget_id:?}, {doc_id:?}) appears twice"),
                ));
            }
            pairs.push(PairAnnotation {
                query_id,
                nugget_id,
                doc_id,
                label,
            });
        }
        Ok(Self {
            annotator,
            questions,
            pairs,
        })
    }

    /// Checks that these annotations refer to `sample` (`path` names the file in errors): every
    /// question is a sampled one and lists exactly its sampled nuggets; every pair is a sampled
    /// pair. Questions and pairs left unannotated are allowed (a review in progress).
    pub fn check_against(&self, sample: &CalibrationSample, path: &Path) -> Result<()> {
        let nuggets: BTreeMap<&str, BTreeSet<&str>> = sample
            .questions
            .iter()
            .map(|q| {
                (
                    q.query_id.as_str(),
                    q.nuggets.iter().map(|n| n.nugget_id.as_str()).collect(),
                )
            })
            .collect();
        for (i, q) in self.questions.iter().enumerate() {
            let Some(expected) = nuggets.get(q.query_id.as_str()) else {
                return Err(field_error(
                    path,
                    &format!("questions[{i}].query_id"),
                    &format!("{:?} is not a sampled question", q.query_id),
                ));
            };
            let got: BTreeSet<&str> = q.nuggets.iter().map(|n| n.nugget_id.as_str()).collect();
            if let Some((j, n)) = q
                .nuggets
                .iter()
                .enumerate()
                .find(|(_, n)| !expected.contains(n.nugget_id.as_str()))
            {
                return Err(field_error(
                    path,
                    &format!("questions[{i}].nuggets[{j}].nugget_id"),
                    &format!(
                        "{:?} is not a nugget of question {:?} in the sample",
                        n.nugget_id, q.query_id
                    ),
                ));
            }
            if let Some(missing) = expected.iter().find(|n| !got.contains(*n)) {
                return Err(field_error(
                    path,
                    &format!("questions[{i}].nuggets"),
                    &format!(
                        "nugget {missing:?} of question {:?} is missing (every nugget of a \
                         reviewed question needs its flags)",
                        q.query_id
                    ),
                ));
            }
        }
        let pairs: BTreeSet<(&str, &str, &str)> = sample
            .pairs
            .iter()
            .map(|p| (p.query_id.as_str(), p.nugget_id.as_str(), p.doc_id.as_str()))
            .collect();
        for (i, p) in self.pairs.iter().enumerate() {
            let key = (p.query_id.as_str(), p.nugget_id.as_str(), p.doc_id.as_str());
            if !pairs.contains(&key) {
                return Err(field_error(
                    path,
                    &format!("pairs[{i}]"),
                    &format!(
                        "({:?}, {:?}, {:?}) is not a sampled pair",
                        p.query_id, p.nugget_id, p.doc_id
                    ),
                ));
            }
        }
        Ok(())
    }
}
