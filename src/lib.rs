//! # freshstack
//!
//! Build FreshStack-style retrieval benchmarks from community questions and answers plus
//! repository checkouts, and evaluate retrievers on them, with everything running locally.
//!
//! The pipeline (paper: *FreshStack: Building Realistic Benchmarks for Evaluating Retrieval on
//! Technical Documents*):
//!
//! 1. **Corpus** ([`source`]): repository checkouts are walked and chunked into token-bounded
//!    documents with stable ids `{owner/name}/{path}_{start_byte}_{end_byte}`.
//! 2. **Questions** ([`source::stackoverflow`]): a Stack Overflow `Posts.xml` dump is streamed
//!    and filtered to a topic's questions with their accepted answers ([`Question`]).
//! 3. **Embeddings** ([`embed`]): dense encoders (BERT family, E5-Mistral, BGE-Gemma2, Qwen)
//!    run locally through candle turn documents and questions into L2-normalised vectors
//!    (`.npy` + `.ids`).
//! 4. **Fusion** ([`search::fusion`]) and **evaluation** ([`eval`]): runs are fused as the
//!    paper does and scored with alpha-nDCG, Coverage and Recall exactly as the reference.
//! 5. **Index** ([`index`]): one directory with a BM25 index (tantivy, code-aware analyzer,
//!    k1/b settable) and dense vector matrices with HNSW graphs, the corpus encoded by the index
//!    itself ([`build_hybrid_index`]); **search** ([`search`]): the [`Engine`] serves `bm25`,
//!    `dense:NAME` (queries encoded with the recorded model) and `fusion` retrievers, one query
//!    or a batch; a [`Pipeline`] (first stage + optional rerank) turns queries into a [`Run`].
//! 6. **Rerank** ([`rerank`]): cross-encoders (BERT and XLM-RoBERTa sequence classifiers)
//!    rescore the top of a run. **Shards** ([`dataset::Shard`], [`merge`]): the heavy stages
//!    run as N deterministic slices on a cluster and merge into the single-process bytes.
//! 7. **Benchmark** ([`benchmark`]): the published datasets (or a local export), read offline,
//!    retrieved and scored in one call (`freshstack benchmark`).
//! 8. **Report** ([`report`]): an exported dataset's statistics (Table 3), pooling results
//!    (Table 4) and a self-contained HTML page with SVG charts.
//!
//! ```no_run
//! use freshstack::{CorpusConfig, NoProgress, RepoSpec, build_corpus};
//!
//! let repo: RepoSpec = "laravel/docs=/data/checkouts/laravel-docs".parse()?;
//! let summary = build_corpus(&CorpusConfig::new(vec![repo]), "corpus.jsonl".as_ref(), &NoProgress)?;
//! println!("{} documents, {} tokens", summary.documents, summary.tokens);
//! # Ok::<(), freshstack::Error>(())
//! ```
//!
//! ## Glossary
//! - *document*: one chunk of one file of one repository (a corpus row).
//! - *question*: a Stack Overflow question with its accepted answer.
//! - *nugget*: an atomic fact the answer to a question must contain.
//! - *judgment*: (question, nugget, document, supported).
//! - *run*: a ranked list of documents per question; *qrels*: judgments as relevance labels.
#![deny(missing_docs)]

pub mod benchmark;
pub mod dataset;
pub mod embed;
mod error;
pub mod eval;
#[doc(hidden)]
pub mod fuzz;
mod gguf;
pub mod index;
pub mod kernels;
pub mod llm;
pub mod merge;
pub mod pipeline;
pub mod progress;
pub mod report;
pub mod rerank;
pub mod search;
pub mod source;

pub use dataset::{
    AtomicWriter, Document, DocumentMetadata, Encoder, NuggetQrels, QueryId, Question,
    QuestionMetadata, Run, ScoredDoc,
};
pub use error::{Error, Result, Setting};
pub use eval::{EvalConfig, Evaluation, Judgments, Metric, MetricAt, evaluate};
pub use index::{IndexConfig, build_index};
pub use llm::{Chat, ChatParams, Llm, Message, OpenAiChat, OpenAiConfig, ResponseCache};
pub use progress::{NoProgress, Progress};
pub use search::{
    DenseModelSpec, Engine, HybridIndexConfig, Pipeline, Retriever, SearchOptions,
    build_hybrid_index,
};
pub use source::{CorpusConfig, CorpusSummary, RepoSpec, build_corpus};
