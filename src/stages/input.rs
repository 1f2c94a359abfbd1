//! The rows the LLM stages read and write.
//!
//! Questions are read in the reference query schema (`query_id`, `query_title`, `query_text`,
//! `answer_id`, `answer_text`, `metadata`), keeping only the fields these stages use. These
//! minimal types will be unified with the dataset's question type later.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};

use crate::error::{Error, Result};

/// A question as the LLM stages need it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct QuestionInput {
    /// The question's id (a JSON string or integer in the file).
    #[serde(deserialize_with = "string_or_integer")]
    pub query_id: String,
    /// The title.
    #[serde(default)]
    pub query_title: String,
    /// The body (Markdown).
    #[serde(default)]
    pub query_text: String,
    /// The accepted answer (Markdown); needed by the nuggets stage only.
    #[serde(default)]
    pub answer_text: String,
}

/// Accepts `"123"` or `123`.
fn string_or_integer<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        S(String),
        I(i64),
    }
    match Id::deserialize(d)? {
        Id::S(s) => Ok(s),
        Id::I(i) => Ok(i.to_string()),
    }
}

/// One nugget: an atomic fact a good answer must contain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NuggetText {
    /// `{query_id}_{n}`, n counting from 0 in order of importance.
    #[serde(rename = "_id")]
    pub id: String,
    /// The fact.
    pub text: String,
}

/// A row of `nuggets.jsonl`: the nuggets of one question, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NuggetsRecord {
    /// The question.
    #[serde(deserialize_with = "string_or_integer")]
    pub query_id: String,
    /// Most important first; empty when `error` is set.
    pub nuggets: Vec<NuggetText>,
    /// Why the model's answer could not be used (after the repair attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The model's last raw answer, kept when `error` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// A row of `variants.jsonl`: inference-setting query variants of one question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantsRecord {
    /// The question.
    #[serde(deserialize_with = "string_or_integer")]
    pub query_id: String,
    /// Sub-questions that together cover the question.
    pub sub_questions: Vec<String>,
    /// The model's answer without seeing the accepted one (empty when `error` is set).
    pub closed_book_answer: String,
    /// Why the model's answer could not be used (after the repair attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The model's last raw answer, kept when `error` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// A row of the judgment pool: the documents to judge for one question, in pool order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolRow {
    /// The question.
    #[serde(deserialize_with = "string_or_integer")]
    pub query_id: String,
    /// Corpus document ids.
    pub doc_ids: Vec<String>,
}

/// A row of `judgments.jsonl`: does `doc_id` support nugget `nugget_id` of `query_id`?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgmentRecord {
    /// The question.
    pub query_id: String,
    /// The nugget (`{query_id}_{n}`).
    pub nugget_id: String,
    /// The corpus document.
    pub doc_id: String,
    /// The verdict; `null` when the model's answer could not be used (see `error`), which is
    /// never the same as "not supported".
    pub supported: Option<bool>,
    /// The model's short reason for this document.
    pub rationale: String,
    /// Why there is no verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The model's last raw answer for the failed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
}

/// Reads a JSONL file with the 1-based line number of each row; blank lines skipped.
pub(crate) fn read_rows<T: DeserializeOwned>(path: &Path) -> Result<Vec<(usize, T)>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut rows = Vec::new();
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let row =
            serde_json::from_str(&line).map_err(|e| Error::parse(path, i + 1, e.to_string()))?;
        rows.push((i + 1, row));
    }
    Ok(rows)
}

/// Reads questions, refusing empty or repeated ids (they would collide in every output).
pub fn read_questions(path: &Path) -> Result<Vec<QuestionInput>> {
    let rows: Vec<(usize, QuestionInput)> = read_rows(path)?;
    let mut seen = HashSet::new();
    let mut questions = Vec::with_capacity(rows.len());
    for (line, q) in rows {
        if q.query_id.trim().is_empty() {
            return Err(Error::parse(path, line, "field query_id: empty"));
        }
        if !seen.insert(q.query_id.clone()) {
            return Err(Error::parse(
                path,
                line,
                format!("field query_id: {:?} appears twice", q.query_id),
            ));
        }
        if q.query_title.trim().is_empty() && q.query_text.trim().is_empty() {
            return Err(Error::parse(
                path,
                line,
                "fields query_title and query_text: both empty",
            ));
        }
        questions.push(q);
    }
    Ok(questions)
}
