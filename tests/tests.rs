//! Integration tests: one binary, one module per stage.

mod corpus;
mod llm;
mod util;
