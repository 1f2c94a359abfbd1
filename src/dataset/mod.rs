//! The data model shared by every stage, and its file formats.
//!
//! Owns: [`Document`] (a corpus chunk), [`Question`] (a Stack Overflow question with its answer
//! and, once judged, its [`Nugget`]s; every question file, `queries.jsonl` included), its
//! [`QueryId`], the rows the LLM stages write ([`NuggetsRecord`], [`VariantsRecord`],
//! [`PoolRow`], [`JudgmentRecord`]), [`Run`] (TREC runs), [`NuggetQrels`] (nugget judgments), the
//! one text-to-vector trait [`Encoder`] (with [`Embeddings`] and [`TextKind`]), the one hash
//! behind every cache decision ([`Fingerprint`]), the
//! vectors format (`.npy` + `.ids`: [`VectorMatrix`], [`NpyWriter`]), the JSONL helpers every
//! stage uses to read and write files, and the benchmark loaders ([`DatasetSpec`]: local exports
//! or the Hugging Face cache, JSONL or Parquet). Guarantees: output files are written through
//! [`AtomicWriter`] (temp file + rename), so an interrupted stage never leaves a half-written file
//! under the final name; a FIFO or device is written in place, a symlink's target is replaced;
//! the temporaries it and the index builds create are removed on SIGINT/SIGTERM/SIGHUP and, when
//! a run died harder, by the next run ([`remove_temporaries_on_signals`]). Imports nothing else of
//! ours.

mod atomic;
pub mod bounded;
mod document;
mod encoder;
mod fingerprint;
mod hub;
mod jsonl;
mod names;
mod parquet;
mod qrels;
mod question;
mod records;
mod round;
mod run;
mod run_file;
mod seeded;
mod shard;
pub(crate) mod tempfiles;
mod url;
mod vectors;

pub use atomic::{
    AtomicWriter, check_output_is_not_an_input, is_stream_target, resolve_output_path,
    write_json_atomic,
};
pub use document::{Document, DocumentMetadata, document_text, for_each_document, read_documents};
pub use encoder::{Embeddings, Encoder, TextKind};
pub use fingerprint::{
    FINGERPRINT_FORMAT, Fingerprint, FingerprintBuilder, Fnv1a64, ParseFingerprintError,
};
pub use hub::{DatasetPart, DatasetSpec, hub_cache_dir, load_corpus, load_queries, resolve_files};
pub use jsonl::{for_each_jsonl, read_json_if_present, read_jsonl, read_jsonl_lines};
pub use names::{check_plain_name, is_plain_name};
pub use parquet::read_parquet;
pub use qrels::{NuggetJudgments, NuggetQrels, QueryJudgments, query_id_of_nugget};
pub use question::{Nugget, QueryId, Question, QuestionMetadata, read_questions};
pub(crate) use question::{RowIds, borrowed_id};
pub use records::{
    DropReason, DroppedNugget, JudgmentRecord, NuggetText, NuggetsRecord, PoolRow, Quote,
    SupportGrade, VariantsRecord,
};
pub use round::py_round;
pub use run::{Ranking, Run, ScoreText, ScoredDoc, check_trec_tag, score_key, write_trec_rankings};
pub use run_file::{DocRef, Rankings, RunFile};
pub use seeded::SplitMix64;
pub use shard::{SHARD_FORMAT, Shard, ShardInfo, keys_hash, shard_info_path};
pub use tempfiles::{OutputLock, STALE_AFTER, remove_temporaries_on_signals};
pub use url::is_web_url;
pub use vectors::{
    NpyWriter, VectorDtype, VectorMatrix, ids_path, read_ids, read_npy_f32, write_ids,
    write_ids_beside, write_npy, write_npy_matrix,
};
