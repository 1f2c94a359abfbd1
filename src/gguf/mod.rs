//! GGUF files as both of our engines read them: the tokenizer a file's metadata describes
//! ([`GgufTokenizer`]), used by the LLM engine for chat models and by the encoders for GGUF
//! embedding models.

mod tokenizer;

pub(crate) use tokenizer::{GgufTokenizer, SpmPiece};
