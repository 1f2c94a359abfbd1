//! The outside world coming in: repository checkouts (walk, classify, commit id), chunking (and
//! the tokenizers that measure it), and the corpus stage that joins them; Stack Overflow dumps
//! ([`stackoverflow`]).

mod chunk;
mod corpus;
mod notebook;
mod repo;
pub mod stackoverflow;
mod tokenizer;

pub use chunk::{Chunk, Chunker, Language};
pub use corpus::{
    CorpusConfig, CorpusSummary, DEFAULT_MAX_FILE_BYTES, DEFAULT_MAX_TOKENS, RepoSummary,
    build_corpus, chunk_repositories, github_url, write_summary,
};
pub use notebook::notebook_text;
pub use repo::{
    RepoSpec, SkipReason, WalkResult, check_exclude_globs, read_commit_id, read_file_capped,
    skip_by_content, skip_by_name, walk,
};
pub use tokenizer::{TokenCounter, TokenizerKind, TokenizerSpec};
