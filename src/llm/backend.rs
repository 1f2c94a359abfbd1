//! Opening a chat backend from one description, shared by the LLM stage commands' flags and
//! `freshstack build`'s `[llm]` section, so both check and build it the same way.

use std::path::PathBuf;
use std::time::Duration;

use super::{Chat, LocalChat, OpenAiChat, OpenAiConfig};
use crate::error::{Error, Result};

/// Which backend to open, and its limits.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// Generate natively from this GGUF file (wins over servers).
    pub gguf: Option<PathBuf>,
    /// OpenAI-compatible API roots; several make a fleet of the same model.
    pub base_urls: Vec<String>,
    /// Model name as the servers know it.
    pub model: Option<String>,
    /// Requests in flight at once, per server.
    pub concurrency: usize,
    /// Seconds allowed for one request.
    pub timeout_seconds: f64,
    /// Retries after a 429, a 5xx, a timeout or a dropped connection.
    pub max_retries: u32,
}

/// An opened backend.
pub struct OpenedBackend {
    /// The backend.
    pub chat: Box<dyn Chat>,
    /// The model's context in tokens, when the backend knows it (GGUF files do).
    pub context_tokens: Option<usize>,
}

impl BackendSpec {
    /// Whether the spec names a backend at all (a GGUF file, or servers and a model).
    pub fn is_configured(&self) -> bool {
        self.gguf.is_some() || (!self.base_urls.is_empty() && self.model.is_some())
    }

    /// Loads the GGUF model or connects the HTTP client (the API key comes from
    /// [`API_KEY_ENV`](super::API_KEY_ENV)).
    pub fn open(&self) -> Result<OpenedBackend> {
        match (&self.gguf, self.base_urls.as_slice(), &self.model) {
            (Some(path), _, _) => {
                let local = LocalChat::load(path)?;
                let context_tokens = Some(local.context_tokens());
                Ok(OpenedBackend {
                    chat: Box::new(local),
                    context_tokens,
                })
            }
            (None, [_, ..], Some(model)) => {
                if self.concurrency == 0 {
                    return Err(Error::invalid("llm concurrency", "must be at least 1"));
                }
                if !(self.timeout_seconds.is_finite() && self.timeout_seconds > 0.0) {
                    return Err(Error::invalid(
                        "llm timeout",
                        "must be a positive number of seconds",
                    ));
                }
                let mut config =
                    OpenAiConfig::fleet(self.base_urls.clone(), model.clone()).with_key_from_env();
                config.concurrency = self.concurrency;
                config.timeout = Duration::from_secs_f64(self.timeout_seconds);
                config.max_retries = self.max_retries;
                Ok(OpenedBackend {
                    chat: Box::new(OpenAiChat::new(config)?),
                    context_tokens: None,
                })
            }
            _ => Err(Error::invalid(
                "llm",
                "no language model: give a server URL and a model name, or a GGUF file",
            )),
        }
    }
}
