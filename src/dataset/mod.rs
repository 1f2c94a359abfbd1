//! The data model shared by every stage, and its file formats.
//!
//! Owns: [`Document`] (a corpus chunk), [`Question`] (a Stack Overflow question with its
//! answer) and the JSONL helpers every stage uses to read and write files. Guarantees: output
//! files are written through [`AtomicWriter`] (temp file + rename), so an interrupted stage never
//! leaves a half-written file under the final name. Imports nothing else of ours.

mod document;
mod jsonl;
mod question;

pub use document::{Document, DocumentMetadata};
pub use jsonl::{AtomicWriter, read_jsonl, write_json_atomic};
pub use question::{Nugget, Question, QuestionMetadata};
