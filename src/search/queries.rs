//! Reading query files for batch retrieval: either questions in the reference schema
//! ([`Question`]: `query_id`, `query_title`, `query_text`, `answer_text`, `nuggets[{_id, text}]`)
//! or BEIR queries (`_id`, `text`). A row with a `query_id` is a question, one with only an
//! `_id` a BEIR query; ids are JSON strings or numbers either way ([`QueryId`]).

use std::path::Path;

use rustc_hash::FxHashMap;
use serde::Deserialize;

use crate::dataset::{QueryId, Question, RowIds};
use crate::error::{Error, Result, Setting};

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

impl std::str::FromStr for QueryField {
    type Err = Error;

    /// Parses `question`, `answer`, `nuggets` or `text`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "question" => Ok(Self::Question),
            "answer" => Ok(Self::Answer),
            "nuggets" => Ok(Self::Nuggets),
            "text" => Ok(Self::Text),
            other => Err(Error::invalid(
                Setting::QueryField,
                format!("{other:?}: expected question, answer, nuggets or text"),
            )),
        }
    }
}

impl QueryField {
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
    pub id: QueryId,
    /// The query text for the chosen field.
    pub text: String,
}

/// A BEIR query row.
#[derive(Deserialize)]
struct BeirQuery {
    #[serde(rename = "_id")]
    id: QueryId,
    text: Option<String>,
}

/// Reads `path` (JSONL), taking `field` of every row. A row without an id or without the
/// field, a duplicate id, or bad JSON is an error naming the line.
pub fn read_queries(path: &Path, field: QueryField) -> Result<Vec<QueryItem>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut out = Vec::new();
    let mut seen: FxHashMap<QueryId, usize> = FxHashMap::default();
    for (i, line) in crate::dataset::bounded::lines(std::io::BufReader::new(file)).enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |e: serde_json::Error| Error::parse(path, line_no, e.to_string());
        let missing = |what: &str| Error::parse(path, line_no, format!("no {what}"));
        let row: RowIds = serde_json::from_str(&line).map_err(bad)?;
        let (id, text) = if row.has_query_id() {
            let q: Question = serde_json::from_str(&line).map_err(bad)?;
            let text = match field {
                QueryField::Question => q.query_text(),
                QueryField::Answer => q.answer_text,
                QueryField::Nuggets => q
                    .nuggets
                    .iter()
                    .map(|n| n.text.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                QueryField::Text => return Err(missing("text")),
            };
            (q.query_id, text)
        } else if row.has_id() {
            let q: BeirQuery = serde_json::from_str(&line).map_err(bad)?;
            let text = match field {
                QueryField::Question | QueryField::Text => q.text.ok_or_else(|| missing("text"))?,
                QueryField::Answer => return Err(missing("answer_text")),
                QueryField::Nuggets => return Err(missing("nuggets")),
            };
            (q.id, text)
        } else {
            return Err(missing("query_id or _id"));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str, field: QueryField) -> Result<Vec<QueryItem>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queries.jsonl");
        std::fs::write(&path, text).unwrap();
        read_queries(&path, field)
    }

    #[test]
    fn numeric_query_ids_are_read_as_text() {
        // Regression: `retrieve` refused `"query_id": 101` that `embed` and the LLM stages
        // accept.
        let rows = "{\"query_id\": 101, \"query_title\": \"T\", \"query_text\": \"B\"}\n\
                    {\"query_id\": \"q2\", \"query_title\": \"T2\", \"query_text\": \"B2\"}\n\
                    {\"_id\": 7, \"text\": \"beir\"}\n";
        let items = read(rows, QueryField::Question).unwrap();
        let ids: Vec<&str> = items.iter().map(|q| q.id.as_str()).collect();
        assert_eq!(ids, ["101", "q2", "7"]);
        assert_eq!(items[0].text, "T B");
        let err = read(
            "{\"query_id\": 5, \"query_title\": \"a\"}\n{\"query_id\": \"5\", \"query_title\": \"b\"}\n",
            QueryField::Question,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(":2: duplicate query id \"5\" (first on line 1)"),
            "{err}"
        );
    }

    #[test]
    fn fields_and_their_errors() {
        let rows = "{\"query_id\": \"q\", \"query_title\": \"\", \"query_text\": \"B\", \"answer_text\": \"A\", \"nuggets\": [{\"_id\": \"q_0\", \"text\": \"n0\"}, {\"_id\": \"q_1\", \"text\": \"n1\"}]}\n";
        let text = |field| read(rows, field).unwrap()[0].text.clone();
        // The reference's join, as pooling builds it: an empty title leaves a leading space.
        assert_eq!(text(QueryField::Question), " B");
        assert_eq!(text(QueryField::Answer), "A");
        assert_eq!(text(QueryField::Nuggets), "n0\nn1");
        let err = |rows: &str, field| read(rows, field).unwrap_err().to_string();
        assert!(err(rows, QueryField::Text).contains(":1: no text"));
        let beir = "{\"_id\": \"b\", \"text\": \"t\"}\n";
        assert_eq!(read(beir, QueryField::Text).unwrap()[0].text, "t");
        assert!(err(beir, QueryField::Answer).contains("no answer_text"));
        assert!(err(beir, QueryField::Nuggets).contains("no nuggets"));
        assert!(err("{\"_id\": \"b\"}\n", QueryField::Question).contains("no text"));
        assert!(err("{\"title\": \"t\"}\n", QueryField::Question).contains("no query_id or _id"));
        assert!(
            err(
                "{\"query_id\": \"a b\", \"query_text\": \"x\"}\n",
                QueryField::Question
            )
            .contains("whitespace")
        );
        assert!(
            err(
                "{\"query_id\": \"q\", \"query_text\": \" \"}\n",
                QueryField::Answer
            )
            .contains("has an empty answer")
        );
        assert!(
            err("{\"query_id\": true}\n", QueryField::Question)
                .contains("expected a string or a number")
        );
        assert!(err("\nnot json\n", QueryField::Question).contains(":2:"));
    }
}
