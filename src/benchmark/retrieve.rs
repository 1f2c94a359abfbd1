//! Per topic: the corpus file and index directory (built once, then reused while the corpus,
//! the BM25 settings and the dense models are the same), and the runs of each retriever.
//!
//! Layout under the output directory:
//! ```text
//! OUT/topics/TOPIC/corpus.jsonl                      the topic's corpus, as the index reads it
//! OUT/topics/TOPIC/embeddings/NAME-KEY.npy (+ .ids)  document vectors, KEY = corpus + model
//! OUT/topics/TOPIC/index/                            BM25 + dense vectors (exact search)
//! OUT/topics/TOPIC/index.key.json                    what the index was built from
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::dataset::{AtomicWriter, Document, QueryRecord, Run, write_json_atomic};
use crate::embed::{Encoder, NpyDType, TextEncoder, TextKind, write_ids, write_npy};
use crate::error::{Error, Result};
use crate::index::{Bm25Settings, IndexConfig, Manifest, VectorSource, build_index, fnv1a64_file};
use crate::progress::Progress;
use crate::search::{Ann, Engine, SearchOptions};

/// A dense model taking part: its retriever name and the loaded encoder.
pub(crate) struct DenseModel {
    /// Index and retriever name (`dense:NAME`).
    pub name: String,
    /// What identifies the vectors besides the corpus (model id, dtype, max length).
    pub identity: String,
    /// The encoder.
    pub encoder: TextEncoder,
}

/// What an index was built from; a mismatch means rebuild.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct IndexKey {
    corpus_fnv1a64: String,
    bm25: Bm25Settings,
    dense: Vec<(String, String)>,
}

/// FNV-1a 64 of `bytes`, hex (the index manifest's corpus hash).
fn fnv1a64(bytes: &[u8]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{hash:016x}")
}

/// Writes the corpus as JSONL (unless an identical file is there); returns its path and hash.
fn write_corpus(docs: &[Document], dir: &Path) -> Result<(PathBuf, String)> {
    let path = dir.join("corpus.jsonl");
    let mut bytes = Vec::new();
    for doc in docs {
        serde_json::to_writer(&mut bytes, doc).map_err(|e| Error::Json {
            path: path.clone(),
            source: e,
        })?;
        bytes.push(b'\n');
    }
    let hash = fnv1a64(&bytes);
    if path.is_file() && fnv1a64_file(&path)? == hash {
        return Ok((path, hash));
    }
    let mut writer = AtomicWriter::create(&path)?;
    writer.write_all(&bytes).map_err(|e| Error::io(&path, e))?;
    writer.commit()?;
    Ok((path, hash))
}

/// The topic's index: reused when its key matches, else (re)built, embedding the corpus with
/// each dense model whose vectors are not cached yet. Returns the open engine and whether it
/// was reused.
pub(crate) fn prepare_index(
    docs: &[Document],
    dir: &Path,
    bm25: Bm25Settings,
    dense: &[DenseModel],
    progress: &dyn Progress,
) -> Result<(Engine, bool)> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let (corpus, hash) = write_corpus(docs, dir)?;
    let key = IndexKey {
        corpus_fnv1a64: hash.clone(),
        bm25,
        dense: dense
            .iter()
            .map(|m| (m.name.clone(), m.identity.clone()))
            .collect(),
    };
    let index_dir = dir.join("index");
    let key_path = dir.join("index.key.json");
    let old_key: Option<IndexKey> = std::fs::read_to_string(&key_path)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok());
    if old_key.as_ref() == Some(&key) && Manifest::read(&index_dir).is_ok() {
        return Ok((Engine::open(&index_dir)?, true));
    }
    let mut vectors = Vec::new();
    for model in dense {
        let npy = embed_corpus(docs, dir, &hash, model, progress)?;
        vectors.push(VectorSource {
            name: model.name.clone(),
            npy,
        });
    }
    let config = IndexConfig {
        corpus,
        bm25: Some(bm25),
        vectors,
        // Exact search: the ground truth, and independent of thread scheduling.
        hnsw: None,
    };
    build_index(&config, &index_dir, progress)?;
    write_json_atomic(&key_path, &key)?;
    Ok((Engine::open(&index_dir)?, false))
}

/// Embeds the corpus with `model` into `DIR/embeddings/NAME-KEY.npy` unless already there.
fn embed_corpus(
    docs: &[Document],
    dir: &Path,
    corpus_hash: &str,
    model: &DenseModel,
    progress: &dyn Progress,
) -> Result<PathBuf> {
    let key = fnv1a64(format!("{corpus_hash}\n{}", model.identity).as_bytes());
    let npy = dir
        .join("embeddings")
        .join(format!("{}-{key}.npy", model.name));
    let ids_path = npy.with_extension("ids");
    if npy.is_file() && ids_path.is_file() {
        return Ok(npy);
    }
    let texts: Vec<String> = docs.iter().map(document_text).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let embeddings = model.encoder.embed(&refs, TextKind::Document, progress)?;
    let ids: Vec<String> = docs.iter().map(|d| d.id.clone()).collect();
    // ids first: the matrix is what marks the pair complete.
    write_ids(&ids_path, &ids)?;
    write_npy(&npy, &embeddings.data, embeddings.dim, NpyDType::F32)?;
    Ok(npy)
}

/// A document's text for a dense encoder: `title + " " + text` when it has a title (as
/// `freshstack embed` does).
fn document_text(doc: &Document) -> String {
    if doc.title.trim().is_empty() {
        doc.text.clone()
    } else {
        format!("{} {}", doc.title, doc.text)
    }
}

/// The BM25 run: top `k` per question; questions without a searchable term (symbols only) get
/// no results. Returns the run and the number of such questions.
pub(crate) fn bm25_run(engine: &Engine, queries: &[QueryRecord], k: usize) -> Result<(Run, usize)> {
    let results: Vec<Option<Vec<(String, f64)>>> = queries
        .par_iter()
        .map(|q| {
            let text = q.query_string();
            if !engine.has_searchable_terms(&text)? {
                return Ok(None);
            }
            let hits = engine.search_bm25(&text, k)?;
            Ok(Some(
                hits.into_iter()
                    .map(|h| (h.id, f64::from(h.score)))
                    .collect(),
            ))
        })
        .collect::<Result<_>>()?;
    let unsearchable = results.iter().filter(|r| r.is_none()).count();
    Ok((to_run("bm25", queries, results), unsearchable))
}

/// A dense run: the questions encoded in one batch (with the model's query template), then
/// exact inner-product search.
pub(crate) fn dense_run(
    engine: &Engine,
    model: &DenseModel,
    queries: &[QueryRecord],
    k: usize,
    progress: &dyn Progress,
) -> Result<Run> {
    let texts: Vec<String> = queries.iter().map(QueryRecord::query_string).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vectors = model.encoder.embed(&refs, TextKind::Query, progress)?;
    let options = SearchOptions {
        retriever: format!("dense:{}", model.name),
        k,
        ann: Ann::Exact,
        ..SearchOptions::default()
    };
    let results: Vec<Option<Vec<(String, f64)>>> = (0..queries.len())
        .into_par_iter()
        .map(|i| {
            let hits = engine.search_vector(&model.name, vectors.row(i), &options)?;
            Ok(Some(
                hits.into_iter()
                    .map(|h| (h.id, f64::from(h.score)))
                    .collect(),
            ))
        })
        .collect::<Result<_>>()?;
    Ok(to_run(&format!("dense:{}", model.name), queries, results))
}

fn to_run(name: &str, queries: &[QueryRecord], results: Vec<Option<Vec<(String, f64)>>>) -> Run {
    let mut run = Run::new(name);
    for (q, hits) in queries.iter().zip(results) {
        for (doc, score) in hits.unwrap_or_default() {
            run.push(&q.query_id, &doc, score);
        }
    }
    run
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_manifest_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, b"hello\nworld\n").unwrap();
        assert_eq!(fnv1a64(b"hello\nworld\n"), fnv1a64_file(&path).unwrap());
    }
}
