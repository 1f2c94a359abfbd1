//! The data model shared by every stage, and its file formats.
//!
//! Owns: [`Document`] (a corpus chunk), [`Question`] (a Stack Overflow question with its
//! answer), [`QueryRecord`] (a dataset `queries.jsonl` row with judged nuggets), [`Run`] (TREC
//! runs), [`NuggetQrels`] (nugget judgments) and the JSONL helpers every stage uses to read and
//! write files, and the benchmark loaders ([`DatasetSpec`]: local exports or the Hugging Face
//! cache, JSONL or Parquet). Guarantees: output files are written through [`AtomicWriter`] (temp file +
//! rename), so an interrupted stage never leaves a half-written file under the final name.
//! Imports nothing else of ours.

mod document;
mod hub;
mod jsonl;
mod parquet;
mod qrels;
mod queries;
mod question;
mod round;
mod run;
mod run_file;
mod shard;

pub use document::{Document, DocumentMetadata};
pub use hub::{DatasetPart, DatasetSpec, hub_cache_dir, load_corpus, load_queries, resolve_files};
pub use jsonl::{AtomicWriter, read_jsonl, write_json_atomic};
pub use parquet::read_parquet;
pub use qrels::{NuggetJudgments, NuggetQrels, QueryJudgments, query_id_of_nugget};
pub use queries::{NuggetRecord, QueryMetadata, QueryRecord};
pub use question::{Nugget, Question, QuestionMetadata};
pub use round::py_round;
pub use run::{Ranking, Run, ScoredDoc, score_key, write_trec_rankings};
pub use run_file::{DocRef, Rankings, RunFile};
pub use shard::{SHARD_FORMAT, Shard, ShardInfo, keys_hash, shard_info_path};
