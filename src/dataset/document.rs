use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::io::BufReader;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::question::{string_id, string_or_null};
use crate::error::{Error, Result};

/// A corpus document: one chunk of one file of one repository, in the reference corpus schema
/// (`_id`, `title`, `text`, `metadata`). On reading, `_id` may be a JSON string or number, and an
/// absent or `null` title or text reads as empty.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Document {
    /// `{owner/name}/{path}_{start_byte}_{end_byte}`.
    #[serde(rename = "_id", deserialize_with = "string_id")]
    pub id: String,
    /// Always empty in FreshStack corpora (kept for BEIR compatibility).
    #[serde(default, deserialize_with = "string_or_null")]
    pub title: String,
    /// The chunk's text, exactly the file's bytes `start_byte..end_byte`.
    #[serde(default, deserialize_with = "string_or_null")]
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

/// Streams the rows of a corpus JSONL file, the one reader of corpus rows: `each` gets every
/// document with its 1-based line number, in file order; blank lines are skipped. A line that is
/// not a document is an error naming `path:line`, and so is whatever error `each` returns.
pub fn for_each_document(
    path: &Path,
    mut each: impl FnMut(usize, Document) -> Result<()>,
) -> Result<()> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    for (i, line) in super::bounded::lines(reader).enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let doc =
            serde_json::from_str(&line).map_err(|e| Error::parse(path, i + 1, e.to_string()))?;
        each(i + 1, doc)?;
    }
    Ok(())
}

/// The documents of a corpus JSONL file whose ids are in `wanted`, by id (the first row of a
/// repeated id wins). Only rows with a wanted id are parsed in full, and reading stops once every
/// wanted id is found; an id not in the file is simply absent from the map.
pub fn read_documents(path: &Path, wanted: &HashSet<&str>) -> Result<HashMap<String, Document>> {
    /// The id alone, borrowed from the line when it can be.
    #[derive(Deserialize)]
    struct IdOnly<'a> {
        #[serde(
            rename = "_id",
            borrow,
            deserialize_with = "super::question::borrowed_id"
        )]
        id: Cow<'a, str>,
    }
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = BufReader::with_capacity(1 << 20, file);
    let mut found = HashMap::with_capacity(wanted.len());
    for (i, line) in super::bounded::lines(reader).enumerate() {
        if found.len() == wanted.len() {
            break;
        }
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |e: serde_json::Error| Error::parse(path, i + 1, e.to_string());
        let head: IdOnly = serde_json::from_str(&line).map_err(bad)?;
        if wanted.contains(head.id.as_ref()) && !found.contains_key(head.id.as_ref()) {
            let doc: Document = serde_json::from_str(&line).map_err(bad)?;
            found.insert(doc.id.clone(), doc);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corpus.jsonl");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn rows_read_leniently_and_in_order() {
        let (_dir, path) = corpus(
            "{\"_id\":\"a/b.md_0_3\",\"title\":\"\",\"text\":\"abc\",\"metadata\":{\"repo\":\"a\"}}\n\
             \n{\"_id\":7,\"title\":null,\"text\":\"x\"}\n{\"_id\":\"t\",\"title\":\"T\"}\n",
        );
        let mut rows = Vec::new();
        for_each_document(&path, |line, doc| {
            let text = doc.model_text().into_owned();
            rows.push((line, doc.id, text));
            Ok(())
        })
        .unwrap();
        let expected = [(1, "a/b.md_0_3", "abc"), (3, "7", "x"), (4, "t", "T")];
        let rows: Vec<(usize, &str, &str)> = rows
            .iter()
            .map(|(l, id, t)| (*l, id.as_str(), t.as_str()))
            .collect();
        assert_eq!(rows, expected);
    }

    #[test]
    fn an_error_names_the_line_and_stops_the_read() {
        let (_dir, path) = corpus("{\"_id\":\"a\",\"text\":\"x\"}\n{\"_id\":[1]}\n");
        let err = for_each_document(&path, |_, _| Ok(()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("corpus.jsonl:2: "), "{err}");
        let mut seen = 0;
        let err = for_each_document(&path, |line, _| {
            seen += 1;
            Err(Error::parse(&path, line, "refused"))
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("corpus.jsonl:1: refused"), "{err}");
        assert_eq!(seen, 1);
    }

    #[test]
    fn the_id_filter_keeps_the_first_row_of_an_id_and_stops_when_all_are_found() {
        // Line 4 is not JSON: never reached, since both wanted ids come before it.
        let (_dir, path) = corpus(
            "{\"_id\":\"a\",\"text\":\"first\"}\n{\"_id\":\"b\",\"text\":\"b\"}\n\
             {\"_id\":\"a\",\"text\":\"second\"}\n{oops\n",
        );
        let wanted: HashSet<&str> = ["a", "b"].into_iter().collect();
        let docs = read_documents(&path, &wanted).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs["a"].text, "first");
        let wanted: HashSet<&str> = ["a", "missing"].into_iter().collect();
        let err = read_documents(&path, &wanted).unwrap_err().to_string();
        assert!(err.contains("corpus.jsonl:4: "), "{err}");
    }
}
