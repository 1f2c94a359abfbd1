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
//! 2. **Questions**, **nuggets**, **pooling**, **judging**, **evaluation**: later stages.
//!
//! ```no_run
//! use freshstack::{CorpusConfig, NoProgress, RepoSpec, build_corpus};
//!
//! let repo = RepoSpec::parse("laravel/docs=/data/checkouts/laravel-docs")?;
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
#![warn(missing_docs)]

pub mod dataset;
mod error;
pub mod llm;
pub mod progress;
pub mod source;
pub mod stages;

pub use dataset::{AtomicWriter, Document, DocumentMetadata};
pub use error::{Error, Result};
pub use llm::{Chat, ChatParams, Llm, Message, OpenAiChat, OpenAiConfig, ResponseCache};
pub use progress::{NoProgress, Progress};
pub use source::{CorpusConfig, CorpusSummary, RepoSpec, build_corpus};
