//! Per topic: the corpus file and one index per retriever, built through the engine's API
//! ([`build_index`] for BM25, [`build_hybrid_index`] for a dense model, which encodes the corpus
//! with the model's document template) and reused while its key, a [`Fingerprint`] of the
//! corpus and the model (or BM25 settings), matches; then each retriever's run through [`Engine::search_batch`] (dense queries
//! encoded in one batch with the query template the index recorded).
//!
//! Layout under the output directory:
//! ```text
//! OUT/topics/TOPIC/corpus.jsonl         the topic's corpus, as the indexes read it
//! OUT/topics/TOPIC/bm25/                BM25 index       (+ bm25.key.json: its key)
//! OUT/topics/TOPIC/dense-NAME/          one dense model  (+ dense-NAME.key.json)
//! ```
//! One index per retriever, so adding a retriever encodes only the new model.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::{
    AtomicWriter, Document, Fingerprint, Question, Run, VectorDtype, write_json_atomic,
};
use crate::embed::{EncoderOptions, resolve_model};
use crate::error::{Error, Result, Setting};
use crate::index::{Bm25Settings, IndexConfig, Manifest, build_index};
use crate::progress::Progress;
use crate::search::{
    Ann, DenseModelSpec, Engine, HybridIndexConfig, Pipeline, QueryEncoderOptions, QueryItem,
    RetrieverSpec, SearchOptions, build_hybrid_index,
};

/// A retriever the benchmark scores, as given: `bm25` or `dense:[NAME=]MODEL[#WIDTH]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BenchmarkRetriever {
    /// BM25 (with [`BenchmarkConfig::bm25`](super::BenchmarkConfig::bm25)).
    Bm25,
    /// A dense model (a directory or a Hugging Face id in the local cache) that encodes each
    /// topic's corpus; its row is `dense:NAME`.
    Dense(DenseModelSpec),
}

impl std::str::FromStr for BenchmarkRetriever {
    type Err = Error;

    /// Parses `bm25` or `dense:[NAME=]MODEL[#WIDTH]` (errors name the setting `retriever`; a bad
    /// `[NAME=]MODEL` is [`DenseModelSpec`]'s error).
    fn from_str(spec: &str) -> Result<Self> {
        if spec == "bm25" {
            return Ok(Self::Bm25);
        }
        match spec.strip_prefix("dense:").filter(|m| !m.is_empty()) {
            Some(model) => Ok(Self::Dense(model.parse()?)),
            None => Err(Error::invalid(
                Setting::Retriever,
                format!("{spec:?}: expected bm25 or dense:MODEL"),
            )),
        }
    }
}

/// A retriever of the benchmark, resolved.
#[derive(Debug, Clone)]
pub(crate) enum RetrieverKind {
    /// BM25 with these settings.
    Bm25(Bm25Settings),
    /// A dense model; `identity` is what its vectors depend on besides the corpus.
    Dense {
        spec: DenseModelSpec,
        identity: Fingerprint,
    },
}

impl RetrieverKind {
    /// The engine's retriever, whose name is the row name: `bm25` or `dense:NAME`.
    pub fn spec(&self) -> RetrieverSpec {
        match self {
            Self::Bm25(_) => RetrieverSpec::Bm25,
            Self::Dense { spec, .. } => RetrieverSpec::Dense(Some(spec.name.clone())),
        }
    }

    /// The row name: `bm25` or `dense:NAME`.
    pub fn name(&self) -> String {
        self.spec().to_string()
    }

    /// Resolves a dense model now (a typo fails before any topic is loaded) and records what
    /// the vectors depend on: the model as given, its config and tokenizer files and the
    /// encoder options that change vectors (weights are too big to hash).
    pub fn dense(spec: &DenseModelSpec, options: &EncoderOptions) -> Result<Self> {
        let spec = spec.clone();
        let files = resolve_model(&spec.model)?;
        let mut identity = Fingerprint::builder("benchmark dense model")
            .text("model", &spec.model)
            .file("config.json", &files.config)?
            .file("tokenizer.json", &files.tokenizer)?
            .text("dtype", &format!("{:?}", options.dtype))
            .text("max_length", &format!("{:?}", options.max_length))
            .text("pooling", &format!("{:?}", options.pooling));
        // Only when cut, so that full-width indexes built before keep their keys.
        if let Some(n) = spec.encoder_options(options).dimensions {
            identity = identity.text("dimensions", &n.to_string());
        }
        let identity = identity.finish();
        Ok(Self::Dense { spec, identity })
    }

    fn dir_name(&self) -> String {
        self.name().replace(':', "-")
    }
}

/// The key file beside an index (`RETRIEVER.key.json`): the fingerprint of what the index was
/// built from; a mismatch means rebuild.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct IndexKey {
    fingerprint: Fingerprint,
}

impl IndexKey {
    /// The key of `retriever`'s index over a corpus of fingerprint `corpus`.
    fn new(retriever: &RetrieverKind, corpus: &Fingerprint) -> Self {
        let key = Fingerprint::builder("benchmark index").fingerprint("corpus", corpus);
        let key = match retriever {
            RetrieverKind::Bm25(settings) => key.json("bm25", settings),
            RetrieverKind::Dense { identity, .. } => key.fingerprint("dense", identity),
        };
        Self {
            fingerprint: key.finish(),
        }
    }
}

/// Writes the corpus as JSONL into `dir` (unless an identical file is there); returns its path
/// and fingerprint.
pub(crate) fn write_corpus(docs: &[Document], dir: &Path) -> Result<(PathBuf, Fingerprint)> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let path = dir.join("corpus.jsonl");
    let mut bytes = Vec::new();
    for doc in docs {
        serde_json::to_writer(&mut bytes, doc).map_err(|e| Error::Json {
            path: path.clone(),
            source: e,
        })?;
        bytes.push(b'\n');
    }
    let hash = Fingerprint::of_bytes(&bytes);
    if path.is_file() && Fingerprint::of_file(&path)? == hash {
        return Ok((path, hash));
    }
    let mut writer = AtomicWriter::create(&path)?;
    writer.write_all(&bytes).map_err(|e| Error::io(&path, e))?;
    writer.commit()?;
    Ok((path, hash))
}

/// The index of `retriever` for the corpus at `corpus` (fingerprint `hash`), under `dir`: reused when
/// its key matches, else (re)built. Returns the open engine (with the query encoder loaded for
/// a dense model) and whether it was reused.
pub(crate) fn prepare_index(
    retriever: &RetrieverKind,
    corpus: &Path,
    hash: &Fingerprint,
    dir: &Path,
    encoder: &EncoderOptions,
    progress: &dyn Progress,
) -> Result<(Engine, bool)> {
    let index_dir = dir.join(retriever.dir_name());
    let key_path = dir.join(format!("{}.key.json", retriever.dir_name()));
    let key = IndexKey::new(retriever, hash);
    // A key the benchmark wrote itself: bounded, and a file past the bound is no key (rebuild).
    let old_key: Option<IndexKey> =
        crate::dataset::bounded::read_text(&key_path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok());
    let reused = old_key.as_ref() == Some(&key) && Manifest::read(&index_dir).is_ok();
    if !reused {
        match retriever {
            RetrieverKind::Bm25(settings) => {
                let config = IndexConfig {
                    corpus: corpus.to_path_buf(),
                    bm25: Some(*settings),
                    vectors: Vec::new(),
                    hnsw: None,
                };
                build_index(&config, &index_dir, progress)?;
            }
            RetrieverKind::Dense { spec, .. } => {
                let config = HybridIndexConfig {
                    corpus: corpus.to_path_buf(),
                    bm25: None,
                    dense: vec![spec.clone()],
                    vectors: Vec::new(),
                    // Exact search: the ground truth, and independent of thread scheduling.
                    hnsw: None,
                    encoder: encoder.clone(),
                    // Full precision: benchmark numbers should not move with storage.
                    vector_dtype: VectorDtype::F32,
                };
                build_hybrid_index(&config, &index_dir, progress)?;
            }
        }
        write_json_atomic(&key_path, &key)?;
    }
    let engine = match retriever {
        RetrieverKind::Bm25(_) => Engine::open(&index_dir)?,
        RetrieverKind::Dense { .. } => Engine::open_with_encoders(
            &index_dir,
            &QueryEncoderOptions {
                device: encoder.device,
                max_batch_tokens: encoder.max_batch_tokens,
                dtype: encoder.dtype,
                ..QueryEncoderOptions::default()
            },
        )?,
    };
    Ok((engine, reused))
}

/// The run of `retriever` on `engine`: the top `depth` per question for
/// `query_title + " " + query_text`, all questions in one batch ([`Pipeline::first_stage`],
/// exact search). Also returns how many questions had no BM25 term (they get no results).
pub(crate) fn retrieve(
    engine: &Engine,
    retriever: &RetrieverKind,
    queries: &[Question],
    depth: usize,
) -> Result<(Run, usize)> {
    let items: Vec<QueryItem> = queries
        .iter()
        .map(|q| QueryItem {
            id: q.query_id.clone(),
            text: q.query_text(),
        })
        .collect();
    let options = SearchOptions {
        ann: Ann::Exact,
        ..SearchOptions::default()
    };
    let pipeline = Pipeline {
        retriever: engine.retriever(&retriever.spec(), &options)?,
        rerank: None,
    };
    let (run, _) = pipeline.first_stage(&items, depth)?;
    let mut unsearchable = 0;
    if let RetrieverKind::Bm25(_) = retriever {
        for item in &items {
            if !engine.has_searchable_terms(&item.text)? {
                unsearchable += 1;
            }
        }
    }
    Ok((run, unsearchable))
}

/// `run` cut to its best `k` documents per question (score descending, ties by input order).
pub(crate) fn truncate(run: &Run, k: usize) -> Run {
    let mut out = Run::new(run.name.as_str());
    for ranking in run.rankings() {
        let mut docs = ranking.docs.clone();
        docs.sort_by(|a, b| b.score.total_cmp(&a.score));
        docs.truncate(k);
        out.push_ranking(&ranking.query_id, docs);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_key_changes_with_the_corpus_and_the_settings() {
        let corpus = Fingerprint::of_bytes(b"corpus");
        let bm25 = RetrieverKind::Bm25(Bm25Settings::default());
        let key = IndexKey::new(&bm25, &corpus);
        assert_eq!(key, IndexKey::new(&bm25, &corpus));
        assert_ne!(key, IndexKey::new(&bm25, &Fingerprint::of_bytes(b"other")));
        let text = serde_json::to_string(&key).unwrap();
        assert_eq!(serde_json::from_str::<IndexKey>(&text).unwrap(), key);
    }

    #[test]
    fn truncation_keeps_the_best() {
        let mut run = Run::new("r");
        run.push("q", "a", 1.0);
        run.push("q", "b", 3.0);
        run.push("q", "c", 2.0);
        let cut = truncate(&run, 2);
        let ids: Vec<&str> = cut.rankings()[0]
            .docs
            .iter()
            .map(|d| d.doc_id.as_str())
            .collect();
        assert_eq!(ids, vec!["b", "c"]);
    }
}
