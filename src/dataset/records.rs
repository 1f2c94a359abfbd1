//! The rows the LLM stages and pooling write, one JSONL line each, keyed by [`QueryId`]:
//! `nuggets.jsonl` ([`NuggetsRecord`]), `variants.jsonl` ([`VariantsRecord`]), the judgment pool
//! ([`PoolRow`]) and `judgments.jsonl` ([`JudgmentRecord`]). Question ids may be JSON strings or
//! numbers when read and are written as strings; a failed item keeps the model's raw answer and
//! why it could not be used, never a silent default.

use serde::{Deserialize, Serialize};

use super::question::QueryId;

/// One nugget as the nuggets stage writes it: an atomic fact a good answer must contain (the
/// judged form, with its documents, is [`Nugget`](super::Nugget)).
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
    pub query_id: QueryId,
    /// Most important first; empty when `error` is set.
    pub nuggets: Vec<NuggetText>,
    /// Why the model's answer could not be used (after the repair attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The model's last raw answer, kept when `error` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// Nuggets the model wrote that were not kept, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedNugget>,
}

/// A generated nugget that was not kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DroppedNugget {
    /// What the model wrote.
    pub text: String,
    /// Why it was dropped.
    pub reason: DropReason,
}

/// Why a generated nugget was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The token budget ended inside it, or it stops mid-sentence.
    Cut,
    /// It asks, restates or describes the question (or describes the answer) instead of
    /// stating a fact of the answer.
    RestatesQuestion,
    /// It says again what an earlier nugget of the same answer says: the same words, or the
    /// same content terms in another order or with other function words.
    Repeated,
}

/// A row of `variants.jsonl`: inference-setting query variants of one question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VariantsRecord {
    /// The question.
    pub query_id: QueryId,
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
    pub query_id: QueryId,
    /// Corpus document ids.
    pub doc_ids: Vec<String>,
}

/// A row of `judgments.jsonl`: does `doc_id` support nugget `nugget_id` of `query_id`?
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JudgmentRecord {
    /// The question.
    pub query_id: QueryId,
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
    /// The model's probability that the document supports the nugget (the `probability`
    /// verdict), before the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probability: Option<f64>,
    /// The share of the nugget's own terms found in the document (when the judge computed it:
    /// the `probability` verdict, or a term-coverage gate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term_coverage: Option<f64>,
    /// The document's words the model quoted as stating the nugget (the `quote` verdict), and
    /// whether they were found in the document (after whitespace normalisation): a quote not
    /// found there makes the pair not supported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<Quote>,
    /// The grade the model found most likely (the `graded` verdict); `supported` comes from
    /// the expected grade against the threshold, so it can differ from this most likely one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grade: Option<SupportGrade>,
    /// Every vote's verdict when each call was asked more than once (`votes` > 1 with the
    /// `generate` verdict): the first with the documents in pool order, the others shuffled;
    /// `null` where that vote's answer was unusable. `supported` is their strict majority.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub votes: Option<Vec<Option<bool>>>,
    /// The verdict of the same call asked again with its documents in a seeded shuffle, when
    /// the call was in the judge's self-check sample (`self_check` with one vote) and that
    /// answer was usable. It measures the judge (self-consistency) and never changes
    /// `supported`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recheck: Option<bool>,
}

/// How much of a nugget a document states (TREC 2025 RAG's support assessment).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SupportGrade {
    /// The document states the whole nugget.
    Full,
    /// It states part of it.
    Partial,
    /// It does not state it.
    None,
}

impl SupportGrade {
    /// Every grade, from most to least support.
    pub const ALL: [SupportGrade; 3] = [Self::Full, Self::Partial, Self::None];

    /// The name rows and prompts use (`full`, `partial`, `none`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Partial => "partial",
            Self::None => "none",
        }
    }

    /// The grade's value on the [0, 1] scale that maps it to a binary label: full 1, partial
    /// 0.5, none 0.
    pub fn value(self) -> f64 {
        match self {
            Self::Full => 1.0,
            Self::Partial => 0.5,
            Self::None => 0.0,
        }
    }
}

/// Evidence a judge quoted from a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Quote {
    /// The words, as the model wrote them.
    pub text: String,
    /// Whether they are in the document (whitespace runs counted as one space).
    pub verified: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_numeric_ids_and_write_the_same_bytes() {
        let line = r#"{"query_id":"7","nuggets":[{"_id":"7_0","text":"a"}]}"#;
        let record: NuggetsRecord = serde_json::from_str(line).unwrap();
        assert_eq!(serde_json::to_string(&record).unwrap(), line);
        let numeric: NuggetsRecord =
            serde_json::from_str(r#"{"query_id": 7, "nuggets": [{"_id": "7_0", "text": "a"}]}"#)
                .unwrap();
        assert_eq!(numeric, record);
        let pool: PoolRow = serde_json::from_str(r#"{"query_id": 12, "doc_ids": ["d"]}"#).unwrap();
        assert_eq!(pool.query_id, "12");
        let judgment = r#"{"query_id":"7","nugget_id":"7_0","doc_id":"d","supported":null,"rationale":"","error":"e","raw":"r"}"#;
        let row: JudgmentRecord = serde_json::from_str(judgment).unwrap();
        assert_eq!(serde_json::to_string(&row).unwrap(), judgment);
    }
}
