//! Opening a chat backend from one description, shared by the LLM stage commands' flags and
//! `freshstack build`'s `[llm]` section, so both check and build it the same way.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Chat, Llm, LocalChat, OpenAiChat, OpenAiConfig, ResponseCache};
use crate::error::{Error, Result, Setting};

/// The fewest seconds a request may be given (a millisecond).
pub const MIN_TIMEOUT_SECONDS: f64 = 0.001;

/// The most seconds a request may be given (a week): a longer wait is no timeout at all.
pub const MAX_TIMEOUT_SECONDS: f64 = 604_800.0;

/// `seconds` as a request timeout, when it is a number in
/// [[`MIN_TIMEOUT_SECONDS`], [`MAX_TIMEOUT_SECONDS`]]; otherwise what is wrong with it.
pub fn request_timeout(seconds: f64) -> std::result::Result<Duration, String> {
    if (MIN_TIMEOUT_SECONDS..=MAX_TIMEOUT_SECONDS).contains(&seconds) {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        Err(format!(
            "{seconds} is not a number of seconds in [{MIN_TIMEOUT_SECONDS}, \
             {MAX_TIMEOUT_SECONDS}]"
        ))
    }
}

/// The highest sampling temperature accepted (the OpenAI API's bound).
pub const MAX_TEMPERATURE: f32 = 2.0;

/// Checks a sampling temperature: a number in [0, [`MAX_TEMPERATURE`]] (0: greedy).
pub fn check_temperature(temperature: f32) -> std::result::Result<(), String> {
    if (0.0..=MAX_TEMPERATURE).contains(&temperature) {
        Ok(())
    } else {
        Err(format!(
            "{temperature} is not a temperature in [0, {MAX_TEMPERATURE}]"
        ))
    }
}

/// Which backend to open, and its limits.
#[derive(Debug, Clone)]
pub struct BackendSpec {
    /// Generate natively from this GGUF file (wins over servers).
    pub gguf: Option<PathBuf>,
    /// OpenAI-compatible API roots; several make a fleet of the same model.
    pub base_urls: Vec<String>,
    /// Model name as the servers know it.
    pub model: Option<String>,
    /// Requests in flight at once, per server; with a GGUF file, the sequences decoded at once.
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
        if self.concurrency == 0 {
            return Err(Error::invalid(
                Setting::LlmConcurrency,
                "must be at least 1",
            ));
        }
        match (&self.gguf, self.base_urls.as_slice(), &self.model) {
            (Some(path), _, _) => {
                let local = LocalChat::load(path)?.with_sequences(self.concurrency);
                let context_tokens = Some(local.context_tokens());
                Ok(OpenedBackend {
                    chat: Box::new(local),
                    context_tokens,
                })
            }
            (None, [_, ..], Some(model)) => {
                let timeout = request_timeout(self.timeout_seconds)
                    .map_err(|message| Error::invalid(Setting::LlmTimeout, message))?;
                let mut config =
                    OpenAiConfig::fleet(self.base_urls.clone(), model.clone()).with_key_from_env();
                config.concurrency = self.concurrency;
                config.timeout = timeout;
                config.max_retries = self.max_retries;
                Ok(OpenedBackend {
                    chat: Box::new(OpenAiChat::new(config)?),
                    context_tokens: None,
                })
            }
            _ => Err(Error::invalid(
                Setting::Llm,
                "no language model: give a server URL and a model name, or a GGUF file",
            )),
        }
    }

    /// Opens the backend ([`Self::open`]), then the SQLite response cache at `cache` unless it
    /// is `None`: the one way the LLM stage commands and `freshstack build` open a model. Where
    /// the cache lives by default is the caller's (next to a stage command's output, under a
    /// build's `work/`).
    pub fn open_llm(&self, cache: Option<&Path>) -> Result<OpenedLlm> {
        let backend = self.open()?;
        let cache = cache.map(ResponseCache::open).transpose()?;
        Ok(OpenedLlm {
            llm: Llm::new(backend.chat, cache),
            context_tokens: backend.context_tokens,
        })
    }
}

/// A model ready for the LLM stages: [`BackendSpec::open_llm`].
pub struct OpenedLlm {
    /// The backend with its response cache.
    pub llm: Llm,
    /// The model's context window in tokens, when the backend knows it (a GGUF file).
    pub context_tokens: Option<usize>,
}
