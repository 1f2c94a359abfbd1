//! Integration tests: one binary, one module per stage.

mod corpus;
mod engine;
mod util;
