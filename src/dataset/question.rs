use serde::{Deserialize, Serialize};

/// A Stack Overflow question with its answer, in the reference query schema
/// (`freshstack/queries-oct-2024`): `query_id, query_title, query_text, answer_id, answer_text,
/// metadata`, plus the `nuggets` that later stages attach (absent until then).
///
/// The text a retriever searches with is `title + " " + text` (see [`Question::search_text`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The Stack Overflow post id of the question, as a string (the reference casts it so).
    pub query_id: String,
    /// The question's title, plain text.
    pub query_title: String,
    /// The question's body, converted from HTML to Markdown-like text.
    pub query_text: String,
    /// The post id of the answer (the accepted one unless the import allowed otherwise).
    #[serde(default)]
    pub answer_id: String,
    /// The answer's body, converted like `query_text`.
    #[serde(default)]
    pub answer_text: String,
    /// Provenance: date, tags, scores, url, license.
    #[serde(default)]
    pub metadata: QuestionMetadata,
    /// Atomic facts the answer must contain, with the documents judged for each (later stages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nuggets: Vec<Nugget>,
}

/// Provenance of a [`Question`]. The reference dataset has only `date` and `tags`, so every other
/// field is optional when reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuestionMetadata {
    /// The question's `CreationDate` as the dump writes it (`2024-03-14T10:11:12.880`).
    #[serde(default)]
    pub date: String,
    /// The question's tags, in the dump's order.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The question's score at dump time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<i64>,
    /// The answer's score at dump time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_score: Option<i64>,
    /// Link to the question (`https://stackoverflow.com/q/ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The question's content license (`ContentLicense`, e.g. `CC BY-SA 4.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
}

/// An atomic fact that a good answer to a question contains, with the corpus documents judged to
/// support it or not (reference schema: `_id, text, relevant_corpus_ids, non_relevant_corpus_ids`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Nugget {
    /// `{query_id}_{n}`.
    #[serde(rename = "_id")]
    pub id: String,
    /// The fact, one sentence.
    pub text: String,
    /// Documents that support the nugget.
    #[serde(default)]
    pub relevant_corpus_ids: Vec<String>,
    /// Documents judged and found not to support it.
    #[serde(default)]
    pub non_relevant_corpus_ids: Vec<String>,
}

impl Question {
    /// The text retrievers search with, as the reference builds it: `title + " " + text`.
    pub fn search_text(&self) -> String {
        format!("{} {}", self.query_title, self.query_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_row_without_our_fields_reads() {
        let row = r#"{"query_id":"78256245","query_title":"T","query_text":"B","answer_id":"1","answer_text":"A","metadata":{"date":"2024-04-01","tags":["laravel"]},"nuggets":[{"_id":"78256245_0","text":"n","relevant_corpus_ids":["d"],"non_relevant_corpus_ids":[]}]}"#;
        let q: Question = serde_json::from_str(row).unwrap();
        assert_eq!(q.metadata.tags, vec!["laravel"]);
        assert_eq!(q.metadata.score, None);
        assert_eq!(q.nuggets[0].relevant_corpus_ids, vec!["d"]);
        assert_eq!(q.search_text(), "T B");
    }

    #[test]
    fn empty_nuggets_are_not_written() {
        let q = Question {
            query_id: "1".into(),
            query_title: "t".into(),
            query_text: "x".into(),
            answer_id: "2".into(),
            answer_text: "y".into(),
            metadata: QuestionMetadata::default(),
            nuggets: Vec::new(),
        };
        let json = serde_json::to_string(&q).unwrap();
        assert!(!json.contains("nuggets"), "{json}");
        assert!(!json.contains("answer_score"), "{json}");
    }
}
