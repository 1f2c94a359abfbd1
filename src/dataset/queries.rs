//! Rows of a dataset's `queries.jsonl` in the reference schema (Hugging Face
//! `freshstack/queries-oct-2024`): a question, its accepted answer and its nuggets with the
//! documents judged to support (or not) each nugget.
//!
//! Fields the reference does not have are accepted and ignored (serde defaults), and ids may be
//! JSON strings or numbers (the reference casts them to strings).

use serde::{Deserialize, Deserializer, Serialize};

/// One question row of `queries.jsonl`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryRecord {
    /// The question id (the Stack Overflow question id in FreshStack).
    #[serde(deserialize_with = "string_or_number")]
    pub query_id: String,
    /// The question title.
    #[serde(default)]
    pub query_title: String,
    /// The question body.
    #[serde(default)]
    pub query_text: String,
    /// The accepted answer's id.
    #[serde(default, deserialize_with = "string_or_number")]
    pub answer_id: String,
    /// The accepted answer's body.
    #[serde(default)]
    pub answer_text: String,
    /// Date and tags.
    #[serde(default)]
    pub metadata: QueryMetadata,
    /// The nuggets with their judged documents.
    #[serde(default)]
    pub nuggets: Vec<NuggetRecord>,
}

/// `metadata` of a [`QueryRecord`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct QueryMetadata {
    /// Creation date of the question.
    #[serde(default)]
    pub date: Option<String>,
    /// Stack Overflow tags.
    #[serde(default)]
    pub tags: Vec<String>,
}

/// One nugget of a [`QueryRecord`] with its judgments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NuggetRecord {
    /// `{query_id}_{n}`.
    #[serde(rename = "_id", deserialize_with = "string_or_number")]
    pub id: String,
    /// The atomic fact.
    #[serde(default)]
    pub text: String,
    /// Documents judged to support the nugget (label 1).
    #[serde(default)]
    pub relevant_corpus_ids: Vec<String>,
    /// Documents judged not to support it (label 0; wins when a doc is in both lists, as in the
    /// reference, which writes this list second).
    #[serde(default)]
    pub non_relevant_corpus_ids: Vec<String>,
}

impl QueryRecord {
    /// The retrieval query string, as the reference builds it: `title + " " + text`.
    pub fn query_string(&self) -> String {
        format!("{} {}", self.query_title, self.query_text)
    }
}

/// Accepts `"123"` or `123` (or null, read as empty) for an id field.
fn string_or_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Id {
        Text(String),
        Int(i64),
        Uint(u64),
        Float(f64),
        Null(()),
    }
    Ok(match Id::deserialize(deserializer)? {
        Id::Text(s) => s,
        Id::Int(n) => n.to_string(),
        Id::Uint(n) => n.to_string(),
        Id::Float(f) => f.to_string(),
        Id::Null(()) => String::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reference_row_with_extra_fields_and_numeric_ids() {
        let row = r#"{"query_id": 78, "query_title": "T", "query_text": "B", "answer_id": "9",
            "answer_text": "A", "metadata": {"date": "2024-01-01", "tags": ["php"], "x": 1},
            "nuggets": [{"_id": "78_0", "text": "n", "relevant_corpus_ids": ["d1"],
            "non_relevant_corpus_ids": []}], "extra": true}"#;
        let q: QueryRecord = serde_json::from_str(row).unwrap();
        assert_eq!(q.query_id, "78");
        assert_eq!(q.query_string(), "T B");
        assert_eq!(q.metadata.tags, vec!["php"]);
        assert_eq!(q.nuggets[0].id, "78_0");
        assert_eq!(q.nuggets[0].relevant_corpus_ids, vec!["d1"]);
    }

    #[test]
    fn missing_query_id_is_an_error() {
        assert!(serde_json::from_str::<QueryRecord>(r#"{"nuggets": []}"#).is_err());
    }
}
