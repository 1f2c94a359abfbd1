use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// A corpus document: one chunk of one file of one repository, in the reference corpus schema
/// (`_id`, `title`, `text`, `metadata`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// `{owner/name}/{path}_{start_byte}_{end_byte}`.
    #[serde(rename = "_id")]
    pub id: String,
    /// Always empty in FreshStack corpora (kept for BEIR compatibility).
    #[serde(default)]
    pub title: String,
    /// The chunk's text, exactly the file's bytes `start_byte..end_byte`.
    pub text: String,
    /// Where the chunk comes from.
    #[serde(default)]
    pub metadata: DocumentMetadata,
}

/// Provenance of a [`Document`]. Fields the reference does not have are optional on reading.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DocumentMetadata {
    /// `owner/name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// Path inside the repository, `/`-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `https://github.com/{repo}/blob/{commit}/{path}` (branch `HEAD` when the commit is unknown).
    #[serde(default)]
    pub url: Option<String>,
    /// UTF-8 byte offset of the chunk's first byte in the file.
    #[serde(default)]
    pub start_byte: Option<u64>,
    /// UTF-8 byte offset one past the chunk's last byte.
    #[serde(default)]
    pub end_byte: Option<u64>,
    /// The checkout's HEAD commit, or null when it has no `.git`.
    #[serde(default)]
    pub commit_id: Option<String>,
    /// The splitter's language name (`python`, `markdown`, `text`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

impl Document {
    /// The document id the reference uses: `{repo}/{path}_{start}_{end}`.
    pub fn make_id(repo: &str, path: &str, start_byte: usize, end_byte: usize) -> String {
        format!("{repo}/{path}_{start_byte}_{end_byte}")
    }

    /// What a model (dense encoder or cross-encoder) reads of this document: see
    /// [`document_text`].
    pub fn model_text(&self) -> Cow<'_, str> {
        document_text(&self.title, &self.text)
    }
}

/// The text of a corpus row that models read: `title + " " + text` when both are non-blank,
/// else whichever is (FreshStack titles are empty, so the text itself). The one rule behind
/// the index's dense encoding, `freshstack embed` of a corpus and the rerankers' document texts.
pub fn document_text<'a>(title: &'a str, text: &'a str) -> Cow<'a, str> {
    match (title.trim().is_empty(), text.trim().is_empty()) {
        (true, _) => Cow::Borrowed(text),
        (false, true) => Cow::Borrowed(title),
        (false, false) => Cow::Owned(format!("{title} {text}")),
    }
}
