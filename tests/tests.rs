//! Integration tests: one binary, one module per stage.

mod benchmark;
mod build;
mod calibrate;
mod cli_eval;
mod corpus;
mod corrupt_index;
mod embed;
mod engine;
mod eval_parity;
mod fusion;
mod fuzz_corpus;
mod hybrid;
mod hybrid_minilm;
mod interrupt;
mod llama_server;
mod llm;
mod native_llm;
mod native_parity;
mod report;
mod rerank;
mod shard;
mod slurm;
mod stackoverflow;
mod structured_output;
mod support;
mod util;
