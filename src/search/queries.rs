//! Reading query files for batch retrieval: either questions in the reference schema
//! (`query_id`, `query_title`, `query_text`, `answer_text`, `nuggets[{_id, text}]`) or BEIR
//! queries (`_id`, `text`). A minimal local reading of those rows: only what retrieval needs.

use std::io::BufRead;
use std::path::Path;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use crate::error::{Error, Result};

/// Which text of a question is the query (the paper's settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum QueryField {
    /// `query_title + " " + query_text` (the benchmark setting); `text` for BEIR rows.
    #[default]
    Question,
    /// The accepted answer (`answer_text`): an oracle setting.
    Answer,
    /// The nuggets' texts joined by newlines: an oracle setting.
    Nuggets,
    /// BEIR `text`.
    Text,
}

impl QueryField {
    /// Parses `question`, `answer`, `nuggets` or `text`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "question" => Ok(Self::Question),
            "answer" => Ok(Self::Answer),
            "nuggets" => Ok(Self::Nuggets),
            "text" => Ok(Self::Text),
            other => Err(Error::invalid(
                "--field",
                format!("{other:?}: expected question, answer, nuggets or text"),
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Question => "question",
            Self::Answer => "answer",
            Self::Nuggets => "nuggets",
            Self::Text => "text",
        }
    }
}

/// One query to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryItem {
    /// Query id (`query_id` or `_id`).
    pub id: String,
    /// The query text for the chosen field.
    pub text: String,
}

#[derive(Deserialize)]
struct QueryRow {
    query_id: Option<String>,
    #[serde(rename = "_id")]
    id: Option<String>,
    query_title: Option<String>,
    query_text: Option<String>,
    answer_text: Option<String>,
    nuggets: Option<Vec<NuggetRow>>,
    text: Option<String>,
}

#[derive(Deserialize)]
struct NuggetRow {
    text: String,
}

/// Reads `path` (JSONL), taking `field` of every row. A row without an id or without the
/// field, a duplicate id, or bad JSON is an error naming the line.
pub fn read_queries(path: &Path, field: QueryField) -> Result<Vec<QueryItem>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut out = Vec::new();
    let mut seen: FxHashMap<String, usize> = FxHashMap::default();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let row: QueryRow =
            serde_json::from_str(&line).map_err(|e| Error::parse(path, line_no, e.to_string()))?;
        let missing = |what: &str| Error::parse(path, line_no, format!("no {what}"));
        let id = row
            .query_id
            .clone()
            .or_else(|| row.id.clone())
            .ok_or_else(|| missing("query_id or _id"))?;
        let text = match field {
            QueryField::Question | QueryField::Text => {
                match (&row.query_title, &row.query_text, &row.text) {
                    (Some(title), Some(body), _) if field == QueryField::Question => {
                        format!("{title} {body}")
                    }
                    (_, _, Some(text)) => text.clone(),
                    (title, body, None) if field == QueryField::Question => match (title, body) {
                        (Some(t), None) => t.clone(),
                        (None, Some(b)) => b.clone(),
                        _ => return Err(missing("query_title/query_text or text")),
                    },
                    _ => return Err(missing("text")),
                }
            }
            QueryField::Answer => row
                .answer_text
                .clone()
                .ok_or_else(|| missing("answer_text"))?,
            QueryField::Nuggets => {
                let nuggets = row.nuggets.as_ref().ok_or_else(|| missing("nuggets"))?;
                nuggets
                    .iter()
                    .map(|n| n.text.as_str())
                    .collect::<Vec<_>>()
                    .join("\n")
            }
        };
        if text.trim().is_empty() {
            return Err(Error::parse(
                path,
                line_no,
                format!("query {id:?} has an empty {}", field.name()),
            ));
        }
        if id.is_empty() || id.contains(char::is_whitespace) {
            return Err(Error::parse(
                path,
                line_no,
                format!("query id {id:?} is empty or has whitespace"),
            ));
        }
        if let Some(first) = seen.insert(id.clone(), line_no) {
            return Err(Error::parse(
                path,
                line_no,
                format!("duplicate query id {id:?} (first on line {first})"),
            ));
        }
        out.push(QueryItem { id, text });
    }
    Ok(out)
}
