//! Reading what `freshstack embed` embeds: corpus rows `{"_id","title","text",...}` or query rows
//! in the reference schema ([`Question`]). Only ids and texts are kept; ids are JSON strings or
//! numbers either way.

use std::path::Path;

use crate::dataset::{Document, Question, RowIds};
use crate::error::{Error, Result};

/// Which schema the input file uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Corpus rows: `_id`, `title`, `text`.
    Documents,
    /// Query rows: `query_id`, `query_title`, `query_text`.
    Queries,
}

/// Ids and texts of one input file, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedInput {
    /// The schema found.
    pub kind: InputKind,
    /// Row ids.
    pub ids: Vec<String>,
    /// Texts to embed: for documents `title + " " + text` when the title is non-empty, else
    /// `text`; for queries [`Question::query_text`] (`query_title + " " + query_text`, what
    /// `retrieve` and pooling search with).
    pub texts: Vec<String>,
}

/// Reads a corpus or query JSONL file. The schema is taken from the first row and every row
/// must follow it; a row without an id or with an empty text is an error naming its line.
pub fn read_embed_input(path: &Path) -> Result<EmbedInput> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = std::io::BufReader::new(file);
    let mut kind = None;
    let mut ids = Vec::new();
    let mut texts = Vec::new();
    for (index, line) in crate::dataset::bounded::lines(reader).enumerate() {
        let number = index + 1;
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let bad = |e: serde_json::Error| Error::parse(path, number, e.to_string());
        let row: RowIds = serde_json::from_str(&line).map_err(bad)?;
        let row_kind = if row.has_query_id() {
            InputKind::Queries
        } else if row.has_id() {
            InputKind::Documents
        } else {
            return Err(Error::parse(
                path,
                number,
                "row has neither \"_id\" nor \"query_id\"",
            ));
        };
        let kind = *kind.get_or_insert(row_kind);
        if kind != row_kind {
            return Err(Error::parse(
                path,
                number,
                "mixes corpus rows and query rows",
            ));
        }
        let (id, text, field) = match kind {
            InputKind::Documents => {
                let doc: Document = serde_json::from_str(&line).map_err(bad)?;
                let text = doc.model_text().into_owned();
                (doc.id, text, "text")
            }
            InputKind::Queries => {
                let q: Question = serde_json::from_str(&line).map_err(bad)?;
                let text = q.query_text();
                (q.query_id.into_string(), text, "query_title/query_text")
            }
        };
        if text.trim().is_empty() {
            return Err(Error::parse(path, number, format!("{id}: empty {field}")));
        }
        ids.push(id);
        texts.push(text);
    }
    let kind = kind.ok_or_else(|| Error::parse(path, 1, "no rows"))?;
    Ok(EmbedInput { kind, ids, texts })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<EmbedInput> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.jsonl");
        std::fs::write(&path, text).unwrap();
        read_embed_input(&path)
    }

    #[test]
    fn corpus_and_query_rows() {
        let docs = read("{\"_id\":\"a/b.md_0_3\",\"title\":\"\",\"text\":\"abc\",\"metadata\":{}}\n\n{\"_id\":7,\"title\":\"T\",\"text\":\"x\"}\n").unwrap();
        assert_eq!(docs.kind, InputKind::Documents);
        assert_eq!(docs.ids, ["a/b.md_0_3", "7"]);
        assert_eq!(docs.texts, ["abc", "T x"]);
        let queries = read("{\"query_id\":\"q1\",\"query_title\":\"How?\",\"query_text\":\"Details\",\"nuggets\":[]}\n{\"query_id\":2,\"query_title\":null,\"query_text\":\"Why?\"}\n").unwrap();
        assert_eq!(queries.kind, InputKind::Queries);
        assert_eq!(queries.ids, ["q1", "2"]);
        // The query text retrieve and pooling search with (Question::query_text).
        assert_eq!(queries.texts, ["How? Details", " Why?"]);
    }

    #[test]
    fn bad_rows_name_their_line() {
        let err = read("{\"query_id\":\"q1\",\"query_title\":\"\",\"query_text\":\" \"}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(":1: q1: empty query_title/query_text"),
            "{err}"
        );
        let err =
            read("{\"_id\":\"a\",\"text\":\"x\"}\n{\"query_id\":\"q\",\"query_text\":\"y\"}\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains(":2: mixes"), "{err}");
        let err = read("{\"_id\":\"a\",\"text\":\"x\"}\nnot json\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains(":2:"), "{err}");
        assert!(read("").unwrap_err().to_string().contains("no rows"));
        assert!(
            read("{\"title\":\"t\"}")
                .unwrap_err()
                .to_string()
                .contains("neither")
        );
    }
}
