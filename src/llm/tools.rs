//! The `llm tokenize` and `llm generate` checks of a GGUF model: a prompt (raw text, or one user
//! message in the model's chat template), an optional JSON Schema file, and the generated text
//! with its token ids.

use std::path::Path;

use serde::Serialize;

use super::{ChatParams, LocalChat, Message};
use crate::dataset::bounded::{MAX_SETTINGS_BYTES, read_text};
use crate::error::{Error, Result};

/// How `llm generate` presents its prompt to the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptMode {
    /// The text as it is, after the BOS token the model's metadata asks for.
    Raw,
    /// The text as one user message in the model's chat template.
    Chat,
}

/// What `llm generate` produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Generation {
    /// The generated text.
    pub text: String,
    /// The generated token ids (the prompt's and the stop token excluded).
    pub token_ids: Vec<u32>,
}

/// Reads a JSON Schema file for `llm generate --json-schema`; an error names the file.
pub fn read_json_schema(path: &Path) -> Result<serde_json::Value> {
    let text = read_text(path, MAX_SETTINGS_BYTES).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text)
        .map_err(|e| Error::parse(path, e.line(), format!("not a JSON Schema: {e}")))
}

impl LocalChat {
    /// The token ids of one line of text; `special` adds the BOS token the model's metadata
    /// asks for.
    pub fn tokenize(&self, text: &str, special: bool) -> Result<Vec<u32>> {
        if special {
            self.encode_with_bos(text)
        } else {
            self.encode(text)
        }
    }

    /// Generates from `prompt` presented as `mode` says, with `params` (sampling, length and an
    /// optional JSON Schema).
    pub fn generate_from_prompt(
        &self,
        prompt: &str,
        mode: PromptMode,
        params: &ChatParams,
    ) -> Result<Generation> {
        let ids = match mode {
            PromptMode::Chat => self.encode(&self.format().render(&[Message::user(prompt)]))?,
            PromptMode::Raw => self.encode_with_bos(prompt)?,
        };
        let token_ids = self.generate_ids(&ids, params)?;
        let text = self.decode(&token_ids)?;
        Ok(Generation { text, token_ids })
    }
}
