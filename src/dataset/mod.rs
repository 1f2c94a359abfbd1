//! The data model shared by every stage, and its file formats.
//!
//! Owns: [`Document`] (a corpus chunk), [`Question`] (a Stack Overflow question with its
//! answer), [`QueryRecord`] (a dataset `queries.jsonl` row with judged nuggets), [`Run`] (TREC
//! runs), [`NuggetQrels`] (nugget judgments) and the JSONL helpers every stage uses to read and
//! write files. Guarantees: output files are written through [`AtomicWriter`] (temp file +
//! rename), so an interrupted stage never leaves a half-written file under the final name.
//! Imports nothing else of ours.

mod document;
mod jsonl;
mod qrels;
mod queries;
mod question;
mod round;
mod run;
mod run_file;

pub use document::{Document, DocumentMetadata};
pub use jsonl::{AtomicWriter, read_jsonl, write_json_atomic};
pub use qrels::{NuggetJudgments, NuggetQrels, QueryJudgments, query_id_of_nugget};
pub use queries::{NuggetRecord, QueryMetadata, QueryRecord};
pub use question::{Nugget, Question, QuestionMetadata};
pub use round::py_round;
pub use run::{Ranking, Run, ScoredDoc, score_key, write_trec_rankings};
pub use run_file::{DocRef, Rankings, RunFile};
