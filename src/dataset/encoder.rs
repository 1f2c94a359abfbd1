//! The one text-to-vector trait, [`Encoder`], with its output [`Embeddings`] and the
//! [`TextKind`] that picks a model's query or document template. It lives in the data model (the
//! lowest level that `embed`, `index` and `search` all may name) and carries no candle types:
//! `embed` implements it with its models, `index` builds dense parts from any implementation,
//! `search` encodes queries with one, and tests implement it with hash or random vectors.

use crate::error::{Error, Result, Setting};
use crate::progress::{NoProgress, Progress};

/// Whether a text is a query (instruction template) or a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// A search query (a question).
    Query,
    /// A corpus document.
    Document,
}

impl std::str::FromStr for TextKind {
    type Err = Error;

    /// Parses `query` or `document` (also `doc`).
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "query" => Ok(Self::Query),
            "document" | "doc" => Ok(Self::Document),
            other => Err(Error::invalid(
                Setting::Kind,
                format!("unknown kind '{other}' (expected query or document)"),
            )),
        }
    }
}

/// Texts to vectors, one row per text in input order. The vectors of one model must be
/// comparable by inner product (L2-normalised), queries against documents.
pub trait Encoder: Send + Sync {
    /// Output dimension.
    fn dim(&self) -> usize;

    /// Embeds `texts` (raw: the encoder applies its query or document template for `kind`), one
    /// row per text in input order.
    fn embed(&self, texts: &[&str], kind: TextKind, progress: &dyn Progress) -> Result<Embeddings>;

    /// Embeds many queries in one call (batched as [`Encoder::embed`] batches), one vector each
    /// in input order.
    fn embed_queries(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let embeddings = self.embed(texts, TextKind::Query, &NoProgress)?;
        Ok((0..embeddings.rows())
            .map(|i| embeddings.row(i).to_vec())
            .collect())
    }

    /// Embeds one query.
    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        self.embed_queries(&[text])?.pop().ok_or_else(|| {
            Error::invalid(Setting::QueryEncoder, "returned no vector for the query")
        })
    }
}

/// A row-major matrix of embeddings plus what happened on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Columns.
    pub dim: usize,
    /// `rows x dim` values, row `i` for input `i`.
    pub data: Vec<f32>,
    /// Texts cut at the model's max length.
    pub num_truncated: usize,
    /// Tokens fed to the model (special tokens included, padding excluded; 0 when the encoder
    /// has no tokens to count).
    pub num_tokens: usize,
}

impl Embeddings {
    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
}
