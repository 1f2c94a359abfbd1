//! Questions in the reference query schema (Hugging Face `freshstack/queries-oct-2024`), their
//! ids, and the one reading of ids that every question-keyed file goes through.
//!
//! One type for every file that holds questions: the Stack Overflow import's output, the LLM
//! stages' input, the exported and published `queries.jsonl` (with judged nuggets), the query
//! files of `retrieve` and `embed`. Fields the reference does not have are optional when reading
//! and extra fields are ignored; ids may be JSON strings or numbers (the reference casts them to
//! strings) and are always written as strings.

use std::borrow::{Borrow, Cow};
use std::collections::HashSet;
use std::fmt;
use std::ops::Deref;
use std::path::Path;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use super::jsonl::read_jsonl_lines;
use crate::error::{Error, Result};

/// A question's id: in FreshStack the Stack Overflow post id of the question, kept as text.
///
/// Read from a JSON string or number (`78256245` and `"78256245"` are the same id; a float reads
/// as Rust prints it, `1.5`; `null` as the empty id, which the readers that need an id refuse);
/// written as a JSON string. Ordered, hashed and compared as its text, so it sorts, keys maps and
/// looks up by `&str` exactly as the `String` it replaces; `Debug` prints it as that string does.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct QueryId(String);

impl QueryId {
    /// The id `text`.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }

    /// The id's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id's text, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl Deref for QueryId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for QueryId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for QueryId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for QueryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Error messages quote ids with `{:?}`: keep them as they read for a plain string.
        fmt::Debug::fmt(&self.0, f)
    }
}

impl From<String> for QueryId {
    fn from(text: String) -> Self {
        Self(text)
    }
}

impl From<&str> for QueryId {
    fn from(text: &str) -> Self {
        Self(text.to_string())
    }
}

impl From<QueryId> for String {
    fn from(id: QueryId) -> Self {
        id.0
    }
}

impl PartialEq<str> for QueryId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for QueryId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for QueryId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl<'de> Deserialize<'de> for QueryId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        borrowed_id(deserializer).map(|id| Self(id.into_owned()))
    }
}

/// Reads an id given as a JSON string (borrowed from the input when it has no escapes), an
/// integer or a float (as Rust prints it), or `null` (the empty id). The one implementation
/// behind [`QueryId`], answer and nugget ids, and the borrowed rows `eval` reads judgments with.
pub(crate) fn borrowed_id<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Cow<'de, str>, D::Error> {
    struct IdVisitor;
    impl<'de> Visitor<'de> for IdVisitor {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or a number")
        }
        fn visit_borrowed_str<E: de::Error>(
            self,
            v: &'de str,
        ) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_string()))
        }
        fn visit_unit<E: de::Error>(self) -> std::result::Result<Self::Value, E> {
            Ok(Cow::Borrowed(""))
        }
    }
    deserializer.deserialize_any(IdVisitor)
}

/// [`borrowed_id`] into a `String` field (`deserialize_with`).
pub(crate) fn string_id<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<String, D::Error> {
    borrowed_id(deserializer).map(Cow::into_owned)
}

/// A string field that may be `null` (read as empty).
pub(crate) fn string_or_null<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<String, D::Error> {
    Option::<String>::deserialize(deserializer).map(Option::unwrap_or_default)
}

/// Which id fields a JSONL row has (not `null`): `query_id` for a [`Question`], `_id` for a
/// corpus document or a BEIR query. Nothing else is kept (the rest is skipped), so a reader
/// that accepts both kinds of rows can pick the type to read the line as, with serde's errors
/// naming the line and column.
#[derive(Debug, Deserialize)]
pub(crate) struct RowIds {
    query_id: Option<de::IgnoredAny>,
    #[serde(rename = "_id")]
    id: Option<de::IgnoredAny>,
}

impl RowIds {
    /// The row has a `query_id`.
    pub(crate) fn has_query_id(&self) -> bool {
        self.query_id.is_some()
    }

    /// The row has an `_id`.
    pub(crate) fn has_id(&self) -> bool {
        self.id.is_some()
    }
}

/// A Stack Overflow question with its answer, in the reference query schema: `query_id,
/// query_title, query_text, answer_id, answer_text, metadata`, plus the `nuggets` that later
/// stages attach (absent until then, and then not written). Only `query_id` is required when
/// reading; an absent or `null` text reads as empty.
///
/// The text a retriever searches with is [`Question::query_text`]: `query_title + " " +
/// query_text` (the field `query_text` is the body, as the reference names it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Question {
    /// The Stack Overflow post id of the question.
    pub query_id: QueryId,
    /// The question's title, plain text.
    #[serde(default, deserialize_with = "string_or_null")]
    pub query_title: String,
    /// The question's body, converted from HTML to Markdown-like text.
    #[serde(default, deserialize_with = "string_or_null")]
    pub query_text: String,
    /// The post id of the answer (the accepted one unless the import allowed otherwise); a JSON
    /// string or number when read.
    #[serde(default, deserialize_with = "string_id")]
    pub answer_id: String,
    /// The answer's body, converted like `query_text`.
    #[serde(default, deserialize_with = "string_or_null")]
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
    /// The question's `CreationDate` as the dump writes it (`2024-03-14T10:11:12.880`); empty
    /// when absent or `null`.
    #[serde(default, deserialize_with = "string_or_null")]
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
    /// `{query_id}_{n}`; a JSON string or number when read.
    #[serde(rename = "_id", deserialize_with = "string_id")]
    pub id: String,
    /// The fact, one sentence.
    #[serde(default)]
    pub text: String,
    /// Documents that support the nugget (label 1).
    #[serde(default)]
    pub relevant_corpus_ids: Vec<String>,
    /// Documents judged and found not to support it (label 0; wins when a document is in both
    /// lists, as in the reference, which writes this list second).
    #[serde(default)]
    pub non_relevant_corpus_ids: Vec<String>,
}

impl Question {
    /// The text retrievers, encoders and rerankers search with, as the reference builds it:
    /// `query_title + " " + query_text`, whatever either holds (an empty title leaves a leading
    /// space, which is what the exported pools, runs and reports were made with).
    pub fn query_text(&self) -> String {
        format!("{} {}", self.query_title, self.query_text)
    }
}

/// Reads the questions of a JSONL file, refusing empty or repeated ids (they would collide in
/// every output) and rows whose title and body are both empty (nothing to ask); errors name the
/// line and field.
pub fn read_questions(path: &Path) -> Result<Vec<Question>> {
    let rows: Vec<(usize, Question)> = read_jsonl_lines(path)?;
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
        assert_eq!(q.query_text(), "T B");
    }

    #[test]
    fn reads_numeric_ids_null_dates_and_extra_fields() {
        let row = r#"{"query_id": 78, "query_title": "T", "query_text": null, "answer_id": 9,
            "answer_text": "A", "metadata": {"date": null, "tags": ["php"], "x": 1},
            "nuggets": [{"_id": 780, "relevant_corpus_ids": ["d1"]}], "extra": true}"#;
        let q: Question = serde_json::from_str(row).unwrap();
        assert_eq!(q.query_id, "78");
        assert_eq!(q.answer_id, "9");
        assert_eq!(q.query_text(), "T ");
        assert_eq!(q.metadata.date, "");
        assert_eq!(q.nuggets[0].id, "780");
        assert_eq!(q.nuggets[0].text, "");
        for (json, id) in [
            ("-3", "-3"),
            ("1.5", "1.5"),
            ("18446744073709551615", "18446744073709551615"),
            ("null", ""),
            ("\"a\\u0062\"", "ab"),
        ] {
            let id_read: QueryId = serde_json::from_str(json).unwrap();
            assert_eq!(id_read, id, "{json}");
        }
        let err = serde_json::from_str::<QueryId>("true")
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected a string or a number"), "{err}");
        assert!(serde_json::from_str::<Question>(r#"{"nuggets": []}"#).is_err());
    }

    #[test]
    fn query_ids_write_sort_and_print_as_strings() {
        let ids: Vec<QueryId> = serde_json::from_str(r#"[10, "9", "10a"]"#).unwrap();
        assert_eq!(serde_json::to_string(&ids).unwrap(), r#"["10","9","10a"]"#);
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(sorted, ["10", "10a", "9"]);
        assert_eq!(format!("{} {:?}", ids[0], ids[1]), r#"10 "9""#);
        let by_id: std::collections::HashMap<QueryId, usize> = ids.into_iter().zip(0..).collect();
        assert_eq!(by_id.get("10a"), Some(&2));
    }

    #[test]
    fn empty_nuggets_are_not_written() {
        let q = Question {
            query_id: "1".into(),
            query_title: "t".into(),
            query_text: "x".into(),
            answer_id: "2".into(),
            answer_text: "y".into(),
            ..Question::default()
        };
        let json = serde_json::to_string(&q).unwrap();
        assert_eq!(
            json,
            r#"{"query_id":"1","query_title":"t","query_text":"x","answer_id":"2","answer_text":"y","metadata":{"date":"","tags":[]}}"#
        );
    }

    #[test]
    fn query_text_keeps_the_reference_join() {
        let q = |title: &str, body: &str| Question {
            query_title: title.into(),
            query_text: body.into(),
            ..Question::default()
        };
        assert_eq!(q("T", "B").query_text(), "T B");
        assert_eq!(q("", "B").query_text(), " B");
        assert_eq!(q("T", "").query_text(), "T ");
    }

    #[test]
    fn read_questions_refuses_empty_repeated_and_textless_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        let cases = [
            (
                "{\"query_id\": 7, \"query_title\": \"t\"}\n\n{\"query_id\": \"7\", \"query_text\": \"b\"}\n",
                ":3: field query_id: \"7\" appears twice",
            ),
            (
                "{\"query_id\": null, \"query_title\": \"t\"}\n",
                ":1: field query_id: empty",
            ),
            (
                "{\"query_id\": \"a\", \"query_title\": \" \", \"query_text\": \"\"}\n",
                ":1: fields query_title and query_text: both empty",
            ),
        ];
        for (text, message) in cases {
            std::fs::write(&path, text).unwrap();
            let err = read_questions(&path).unwrap_err().to_string();
            assert!(err.contains(message), "{err}");
        }
        std::fs::write(&path, "{\"query_id\": 7, \"query_title\": \"t\"}\n").unwrap();
        assert_eq!(read_questions(&path).unwrap()[0].query_id, "7");
    }
}
