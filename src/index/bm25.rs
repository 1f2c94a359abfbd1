//! BM25 over a tantivy index, with our own scorer so k1 and b are settings.
//!
//! tantivy stores the inverted index (block-compressed postings with term frequencies) and the
//! per-document field norms (token counts, quantised to one byte as Lucene does); its own BM25
//! hard-codes k1 = 1.2, b = 0.75, while the paper uses Pyserini's k1 = 0.9, b = 0.4. So we
//! score term-at-a-time over tantivy's block postings, accumulating into one dense score array per
//! segment, then select the top k. FreshStack queries are long (hundreds of terms), where
//! term-at-a-time over decoded blocks beats document-at-a-time pruning.
//!
//! Scoring is Lucene's (and bm25s's "lucene" method):
//! `idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))`,
//! `score(d) = sum_t qtf(t) * idf(t) * tf / (tf + k1 * (1 - b + b * dl / avgdl))`,
//! where a term repeated in the query counts `qtf` times, as in a Lucene boolean query.
//!
//! `N`, `df` and `avgdl` are those of the live documents. A refresh deletes documents from
//! tantivy, whose document frequencies and token totals go on counting them (and a merge would
//! purge them but only estimate the token total from the quantised field norms), so
//! [`Bm25Index::open`] counts what the deleted documents of each segment hold, exactly, from
//! the postings: a refreshed index scores as a fresh build over its live documents does.

use std::collections::BTreeMap;
use std::path::Path;

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use tantivy::fieldnorm::FieldNormReader;
use tantivy::indexer::NoMergePolicy;
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy, Searcher, TantivyDocument, Term};

use crate::dataset::Document;
use crate::error::{Error, Result, Setting};
use crate::index::analyzer::{AnalyzerKind, AnalyzerTokenizer};
use crate::progress::Progress;

/// Default BM25 k1 (Pyserini).
pub const DEFAULT_K1: f32 = 0.9;
/// Default BM25 b (Pyserini).
pub const DEFAULT_B: f32 = 0.4;
/// A query longer than this (bytes) is refused rather than analysed.
pub const MAX_QUERY_BYTES: usize = 1 << 20;

const FIELD_BODY: &str = "body";
const FIELD_ORD: &str = "ord";
const FIELD_REPO: &str = "repo";
const WRITER_MEMORY_BYTES: usize = 256 << 20;

/// BM25 parameters and analysis, recorded in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bm25Settings {
    /// Term-frequency saturation.
    pub k1: f32,
    /// Length normalisation.
    pub b: f32,
    /// Analysis chain for documents and queries.
    pub analyzer: AnalyzerKind,
}

impl Default for Bm25Settings {
    fn default() -> Self {
        Self {
            k1: DEFAULT_K1,
            b: DEFAULT_B,
            analyzer: AnalyzerKind::Code,
        }
    }
}

impl Bm25Settings {
    /// Checks the parameters are in their meaningful ranges.
    pub fn validate(&self) -> Result<()> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(Error::invalid(
                Setting::Bm25K1,
                format!("{} must be >= 0", self.k1),
            ));
        }
        if !(0.0..=1.0).contains(&self.b) {
            return Err(Error::invalid(
                Setting::Bm25B,
                format!("{} must be in [0, 1]", self.b),
            ));
        }
        Ok(())
    }
}

fn schema(analyzer: AnalyzerKind) -> Schema {
    let mut builder = Schema::builder();
    let indexing = TextFieldIndexing::default()
        .set_tokenizer(analyzer.tokenizer_name())
        .set_index_option(IndexRecordOption::WithFreqs)
        .set_fieldnorms(true);
    builder.add_text_field(
        FIELD_BODY,
        TextOptions::default().set_indexing_options(indexing),
    );
    builder.add_u64_field(FIELD_ORD, FAST | INDEXED);
    builder.add_text_field(FIELD_REPO, STRING);
    builder.build()
}

fn tantivy_error(dir: &Path, e: impl std::fmt::Display) -> Error {
    Error::index(dir, format!("tantivy: {e}"))
}

fn register(index: &Index, analyzer: AnalyzerKind) {
    index
        .tokenizers()
        .register(analyzer.tokenizer_name(), AnalyzerTokenizer::new(analyzer));
}

/// Writes BM25 documents into a tantivy index: used for a fresh build and for refreshes.
pub struct Bm25Writer {
    dir: std::path::PathBuf,
    writer: IndexWriter,
    body: Field,
    ord: Field,
    repo: Field,
}

impl Bm25Writer {
    /// Creates a new, empty index in the existing empty directory `dir`.
    pub fn create(dir: &Path, settings: &Bm25Settings) -> Result<Self> {
        settings.validate()?;
        let index = Index::create_in_dir(dir, schema(settings.analyzer))
            .map_err(|e| tantivy_error(dir, e))?;
        Self::with_index(dir, index, settings.analyzer)
    }

    /// Opens the existing index in `dir` for adding and deleting documents. Its segments are
    /// never merged: a merge would drop the deleted documents and, with them, the exact token
    /// total that [`Bm25Index::open`] corrects for them (tantivy then estimates it from the
    /// quantised field norms), and a refreshed index would no longer score as a fresh build.
    pub fn open(dir: &Path, settings: &Bm25Settings) -> Result<Self> {
        let index = Index::open_in_dir(dir).map_err(|e| tantivy_error(dir, e))?;
        let writer = Self::with_index(dir, index, settings.analyzer)?;
        writer.writer.set_merge_policy(Box::new(NoMergePolicy));
        Ok(writer)
    }

    fn with_index(dir: &Path, index: Index, analyzer: AnalyzerKind) -> Result<Self> {
        register(&index, analyzer);
        let schema = index.schema();
        let field = |name| schema.get_field(name).map_err(|e| tantivy_error(dir, e));
        let (body, ord, repo) = (field(FIELD_BODY)?, field(FIELD_ORD)?, field(FIELD_REPO)?);
        let writer = index
            .writer(WRITER_MEMORY_BYTES)
            .map_err(|e| tantivy_error(dir, e))?;
        Ok(Self {
            dir: dir.to_path_buf(),
            writer,
            body,
            ord,
            repo,
        })
    }

    /// Adds `doc` under ordinal `ord` (its row in the index's id list).
    pub fn add(&mut self, ord: u32, doc: &Document) -> Result<()> {
        let mut tdoc = TantivyDocument::default();
        if doc.title.is_empty() {
            tdoc.add_text(self.body, &doc.text);
        } else {
            tdoc.add_text(self.body, format!("{}\n{}", doc.title, doc.text));
        }
        tdoc.add_u64(self.ord, u64::from(ord));
        if let Some(repo) = &doc.metadata.repo {
            tdoc.add_text(self.repo, repo);
        }
        self.writer
            .add_document(tdoc)
            .map_err(|e| tantivy_error(&self.dir, e))?;
        Ok(())
    }

    /// Deletes the document with ordinal `ord`.
    pub fn delete(&mut self, ord: u32) {
        self.writer
            .delete_term(Term::from_field_u64(self.ord, u64::from(ord)));
    }

    /// Commits and waits for merges, so the directory is complete when this returns.
    pub fn finish(mut self, progress: &dyn Progress) -> Result<()> {
        progress.begin("bm25 commit", None);
        self.writer
            .commit()
            .map_err(|e| tantivy_error(&self.dir, e))?;
        self.writer
            .wait_merging_threads()
            .map_err(|e| tantivy_error(&self.dir, e))?;
        progress.finish();
        Ok(())
    }
}

/// What the deleted documents of one segment hold (`alive[doc]` false): adds to `deleted_df`,
/// per term, the deleted documents holding it, and returns their tokens (each token is one
/// occurrence of one term, so the term frequencies add up to tantivy's exact token count).
/// Reads every posting list of the segment once.
fn count_deleted(
    inverted: &tantivy::InvertedIndexReader,
    alive: &[bool],
    deleted_df: &mut FxHashMap<Vec<u8>, u64>,
) -> std::io::Result<u64> {
    let mut tokens = 0u64;
    let mut terms = inverted.terms().stream()?;
    while terms.advance() {
        let mut postings = inverted
            .read_block_postings_from_terminfo(terms.value(), IndexRecordOption::WithFreqs)?;
        let mut holding = 0u64;
        loop {
            let docs = postings.docs();
            if docs.is_empty() {
                break;
            }
            for (&doc, &tf) in docs.iter().zip(postings.freqs()) {
                if !alive.get(doc as usize).copied().unwrap_or(true) {
                    holding += 1;
                    tokens += u64::from(tf);
                }
            }
            postings.advance();
        }
        if holding > 0 {
            *deleted_df.entry(terms.key().to_vec()).or_default() += holding;
        }
    }
    Ok(tokens)
}

/// Per-segment data hoisted out of tantivy at open time, so scoring is plain array work.
struct SegmentData {
    /// tantivy doc id -> our ordinal.
    ords: Vec<u32>,
    /// tantivy doc id -> quantised field-norm id.
    norm_ids: Vec<u8>,
    /// tantivy doc id -> alive (false: deleted by a refresh).
    alive: Option<Vec<bool>>,
}

/// An open BM25 index: immutable and safe to share between threads.
pub struct Bm25Index {
    dir: std::path::PathBuf,
    searcher: Searcher,
    // Keeps the searcher's segments valid for the index's lifetime.
    _reader: IndexReader,
    body: Field,
    settings: Bm25Settings,
    segments: Vec<SegmentData>,
    num_docs: u64,
    avg_doc_len: f32,
    /// Per term (its bytes), the deleted documents holding it, which tantivy's document
    /// frequency still counts. Empty unless a refresh deleted documents.
    deleted_df: FxHashMap<Vec<u8>, u64>,
}

/// One scored document: its ordinal and BM25 score.
pub type ScoredOrd = (u32, f32);

impl Bm25Index {
    /// Opens the tantivy index in `dir` with `settings` (from the manifest).
    pub fn open(dir: &Path, settings: Bm25Settings) -> Result<Self> {
        settings.validate()?;
        let index = Index::open_in_dir(dir).map_err(|e| tantivy_error(dir, e))?;
        register(&index, settings.analyzer);
        let schema = index.schema();
        let field = |name| schema.get_field(name).map_err(|e| tantivy_error(dir, e));
        let body = field(FIELD_BODY)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(|e| tantivy_error(dir, e))?;
        let searcher = reader.searcher();
        let mut segments = Vec::new();
        let (mut num_docs, mut total_docs, mut total_tokens) = (0u64, 0u64, 0u64);
        let mut deleted_df = FxHashMap::default();
        for segment in searcher.segment_readers() {
            let max_doc = segment.max_doc();
            let column = segment
                .fast_fields()
                .u64(FIELD_ORD)
                .map_err(|e| tantivy_error(dir, e))?;
            let mut ords = Vec::with_capacity(max_doc as usize);
            for doc in 0..max_doc {
                let ord = column.first(doc).ok_or_else(|| {
                    Error::index(dir, format!("corrupt index: document {doc} has no ordinal"))
                })?;
                ords.push(u32::try_from(ord).map_err(|_| {
                    Error::index(dir, format!("corrupt index: ordinal {ord} out of range"))
                })?);
            }
            let norms: FieldNormReader = segment
                .get_fieldnorms_reader(body)
                .map_err(|e| tantivy_error(dir, e))?;
            let norm_ids = (0..max_doc).map(|d| norms.fieldnorm_id(d)).collect();
            let alive = segment.alive_bitset().map(|bits| {
                (0..max_doc)
                    .map(|d| bits.is_alive(d))
                    .collect::<Vec<bool>>()
            });
            let inverted = segment
                .inverted_index(body)
                .map_err(|e| tantivy_error(dir, e))?;
            num_docs += u64::from(segment.num_docs());
            total_docs += u64::from(segment.num_docs());
            total_tokens += inverted.total_num_tokens();
            if let Some(alive) = alive.as_ref().filter(|_| segment.has_deletes()) {
                let deleted_tokens = count_deleted(&inverted, alive, &mut deleted_df)
                    .map_err(|e| tantivy_error(dir, e))?;
                total_tokens = total_tokens.saturating_sub(deleted_tokens);
            }
            segments.push(SegmentData {
                ords,
                norm_ids,
                alive,
            });
        }
        let avg_doc_len = if total_docs == 0 {
            1.0
        } else {
            (total_tokens as f64 / total_docs as f64).max(1e-6) as f32
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            searcher,
            _reader: reader,
            body,
            settings,
            segments,
            num_docs,
            avg_doc_len,
            deleted_df,
        })
    }

    /// The settings the index is scored with.
    pub fn settings(&self) -> &Bm25Settings {
        &self.settings
    }

    /// Live documents.
    pub fn num_docs(&self) -> u64 {
        self.num_docs
    }

    /// The query's terms with their multiplicity, in term order (so float sums are
    /// deterministic). Errors on an over-long query; may be empty (symbols only).
    pub fn query_terms(&self, query: &str) -> Result<BTreeMap<String, u32>> {
        if query.len() > MAX_QUERY_BYTES {
            return Err(Error::invalid(
                Setting::Query,
                format!(
                    "{} bytes, longer than the {MAX_QUERY_BYTES}-byte limit",
                    query.len()
                ),
            ));
        }
        let mut terms = BTreeMap::new();
        self.settings.analyzer.analyze(query, |term, _, _| {
            *terms.entry(term).or_insert(0u32) += 1;
        });
        Ok(terms)
    }

    /// Scores every live document matching a term of `query` and calls `emit(ord, score)` for
    /// each (score > 0), segment by segment. The caller selects the top k.
    pub fn score_all(&self, query: &str, mut emit: impl FnMut(u32, f32)) -> Result<()> {
        let terms = self.query_terms(query)?;
        if terms.is_empty() {
            return Ok(());
        }
        let (k1, b) = (self.settings.k1, self.settings.b);
        // Per field-norm id: k1 * (1 - b + b * dl / avgdl), as tantivy caches it.
        let mut norm_cache = [0f32; 256];
        for (id, slot) in norm_cache.iter_mut().enumerate() {
            let dl = FieldNormReader::id_to_fieldnorm(id as u8) as f32;
            *slot = k1 * (1.0 - b + b * dl / self.avg_doc_len);
        }
        // Global document frequencies, summed over segments.
        let mut weights = Vec::with_capacity(terms.len());
        for (text, &qtf) in &terms {
            let term = Term::from_field_text(self.body, text);
            let df = self
                .searcher
                .doc_freq(&term)
                .map_err(|e| tantivy_error(&self.dir, e))?;
            let df = df.saturating_sub(self.deleted_df.get(text.as_bytes()).copied().unwrap_or(0));
            if df == 0 {
                continue;
            }
            let n = self.num_docs.max(df) as f64;
            let df = df as f64;
            let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
            weights.push((term, (idf * f64::from(qtf)) as f32));
        }
        let mut scores = Vec::new();
        for (segment, data) in self.searcher.segment_readers().iter().zip(&self.segments) {
            let inverted = segment
                .inverted_index(self.body)
                .map_err(|e| tantivy_error(&self.dir, e))?;
            scores.clear();
            scores.resize(data.ords.len(), 0f32);
            for (term, weight) in &weights {
                let Some(mut postings) = inverted
                    .read_block_postings(term, IndexRecordOption::WithFreqs)
                    .map_err(|e| tantivy_error(&self.dir, e))?
                else {
                    continue;
                };
                loop {
                    let docs = postings.docs();
                    if docs.is_empty() {
                        break;
                    }
                    for (&doc, &tf) in docs.iter().zip(postings.freqs()) {
                        let doc = doc as usize;
                        let (Some(slot), Some(&norm_id)) =
                            (scores.get_mut(doc), data.norm_ids.get(doc))
                        else {
                            continue;
                        };
                        let tf = tf as f32;
                        *slot += weight * tf / (tf + norm_cache[norm_id as usize]);
                    }
                    postings.advance();
                }
            }
            for (doc, &score) in scores.iter().enumerate() {
                if score > 0.0 && data.alive.as_ref().is_none_or(|alive| alive[doc]) {
                    emit(data.ords[doc], score);
                }
            }
        }
        Ok(())
    }
}
