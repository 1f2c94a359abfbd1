//! Integration tests: one binary, one module per stage.

mod cli_eval;
mod corpus;
mod embed;
mod engine;
mod eval_parity;
mod fusion;
mod llm;
mod rerank;
mod shard;
mod stackoverflow;
mod util;
