//! Language models behind one small trait, with a persistent response cache.
//!
//! Owns: the [`Chat`] trait (messages in, text out), its OpenAI-compatible HTTP implementation
//! ([`OpenAiChat`]), native GGUF generation on our own kernels ([`LocalChat`] over [`native`]:
//! the engine; the tokenizer rebuilt from the metadata is `crate::gguf`'s;
//! `chat_format.rs`: [`ChatFormat`]), the SQLite response cache ([`ResponseCache`]), the
//! [`Llm`] front that every stage calls (cache first, then the backend, with counters), our own
//! prompts ([`prompts`], versioned text files) and robust output parsing ([`parse`]).
//!
//! Guarantees: a call whose answer is in the cache never reaches the backend, so a rerun of a
//! finished stage makes no calls and an interrupted one resumes where it stopped; every answer
//! is stored as soon as it arrives. The API key is never logged nor printed by `Debug`.

mod backend;
pub mod bench;
mod cache;
mod chat_format;
pub mod grammar;
mod local;
pub mod native;
mod openai;
pub mod parse;
pub mod prompts;
mod redact;
pub mod schema;
pub mod tools;

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

pub use backend::{
    BackendSpec, MAX_TEMPERATURE, MAX_TIMEOUT_SECONDS, MIN_TIMEOUT_SECONDS, OpenedBackend,
    OpenedLlm, check_temperature, request_timeout,
};
pub use cache::{ResponseCache, cache_key};
pub use chat_format::ChatFormat;
pub use local::LocalChat;
pub use openai::{API_KEY_ENV, OpenAiChat, OpenAiConfig};
pub use redact::{Redacted, redact};
pub use schema::StructuredOutput;

use crate::error::{Result, Setting};

/// Who speaks a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions that frame the conversation.
    System,
    /// The request.
    User,
    /// The model's earlier answer (used when asking it to repair its output).
    Assistant,
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Text.
    pub content: String,
}

impl Message {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self {
            role: Role::System,
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: Role::User,
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self {
            role: Role::Assistant,
            content: content.into(),
        }
    }
}

/// Generation parameters; part of the cache key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatParams {
    /// Sampling temperature; 0 means greedy.
    pub temperature: f32,
    /// Most tokens the answer may have.
    pub max_tokens: u32,
    /// Sampling seed, when the backend supports one.
    pub seed: Option<u64>,
    /// The JSON Schema the answer must match, when the stage asks for structured output:
    /// servers get it as `response_format` `json_schema`, the native backend compiles it to a
    /// token mask. Absent from the cache key when `None` (keys of unstructured calls unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json_schema: Option<serde_json::Value>,
}

impl Default for ChatParams {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            max_tokens: 2048,
            seed: None,
            json_schema: None,
        }
    }
}

/// A chat model: messages in, text out. Implementations are called from several threads at
/// once and bound their own concurrency (see [`Chat::max_concurrency`]).
pub trait Chat: Send + Sync {
    /// Backend kind, part of the cache key (`openai`, `gguf`).
    fn backend(&self) -> &str;
    /// Model name, part of the cache key.
    fn model(&self) -> &str;
    /// Where it runs, for error messages (a URL or a file), never with credentials.
    fn location(&self) -> String;
    /// How many calls are worth running at once.
    fn max_concurrency(&self) -> usize;
    /// Generates the answer to `messages`. Transient failures are retried inside; an error here
    /// is final.
    fn chat(&self, messages: &[Message], params: &ChatParams) -> Result<String>;
    /// Why this backend stopped sending [`ChatParams::json_schema`] (a server that answered
    /// HTTP 400 to `response_format`: its message), once it has; later calls are then made
    /// without the schema. `None` while schemas are honoured (the default).
    fn json_schema_refusal(&self) -> Option<String> {
        None
    }
    /// Whether [`Chat::choice_probabilities`] works on this backend (native GGUF always; a
    /// server when it returns `logprobs`). Checked before a stage that needs it makes a call.
    fn gives_probabilities(&self) -> bool {
        false
    }
    /// The probability of each choice as the first token of the answer to `messages`,
    /// normalised over the choices: `choices[i]` lists the spellings of choice `i` (`["yes",
    /// "Yes"]`), whose first tokens' probabilities are summed. Backends without
    /// log-probabilities refuse.
    fn choice_probabilities(&self, messages: &[Message], choices: &[&[&str]]) -> Result<Vec<f64>> {
        let _ = (messages, choices);
        Err(crate::error::Error::invalid(
            Setting::JudgeVerdict,
            format!(
                "the {} backend at {} gives no log-probabilities; use verdict = \"generate\"",
                self.backend(),
                self.location()
            ),
        ))
    }
}

/// Each choice's probability mass as its share of their sum (uniform when the sum is 0 or not
/// finite): what every backend's [`Chat::choice_probabilities`] returns.
pub(crate) fn normalised_shares(mass: Vec<f64>) -> Vec<f64> {
    let total: f64 = mass.iter().sum();
    if total > 0.0 && total.is_finite() {
        mass.iter().map(|m| m / total).collect()
    } else {
        vec![1.0 / mass.len().max(1) as f64; mass.len()]
    }
}

/// The backend of a stage that asks no model (the judge's `terms` verdict): every call is
/// refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoModel;

impl Chat for NoModel {
    fn backend(&self) -> &str {
        "none"
    }
    fn model(&self) -> &str {
        "none"
    }
    fn location(&self) -> String {
        "nowhere (no language model configured)".into()
    }
    fn max_concurrency(&self) -> usize {
        1
    }
    fn chat(&self, _: &[Message], _: &ChatParams) -> Result<String> {
        Err(crate::error::Error::invalid(
            Setting::LanguageModel,
            "no language model is configured: give --llm-base-url URL and --llm-model NAME, or \
             --llm-gguf PATH",
        ))
    }
}

/// Counters of one [`Llm`]: what reached the backend and what the cache answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LlmStats {
    /// Answers served from the cache.
    pub cache_hits: u64,
    /// Calls that reached the backend and succeeded.
    pub calls: u64,
    /// Calls that failed for good.
    pub failed_calls: u64,
}

/// The front every stage calls: the response cache, then the backend.
pub struct Llm {
    chat: Box<dyn Chat>,
    cache: Option<ResponseCache>,
    cache_hits: AtomicU64,
    calls: AtomicU64,
    failed_calls: AtomicU64,
}

impl Llm {
    /// Wraps `chat`; with `cache` None every call reaches the backend (`--no-cache`).
    pub fn new(chat: Box<dyn Chat>, cache: Option<ResponseCache>) -> Self {
        Self {
            chat,
            cache,
            cache_hits: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            failed_calls: AtomicU64::new(0),
        }
    }

    /// The backend.
    pub fn chat_backend(&self) -> &dyn Chat {
        self.chat.as_ref()
    }

    /// The answer to `messages`, from the cache when it has it, else from the backend (and then
    /// stored in the cache at once).
    ///
    /// The key is that of the request the backend really answered: once the backend refuses
    /// JSON Schemas ([`Chat::json_schema_refusal`]) calls are keyed, and made, without the
    /// schema, and so is the answer of the call that discovered the refusal (it was generated
    /// unconstrained), so an unconstrained answer is never replayed as a constrained one.
    pub fn complete(&self, messages: &[Message], params: &ChatParams) -> Result<String> {
        let unconstrained;
        let mut params = params;
        if params.json_schema.is_some() && self.chat.json_schema_refusal().is_some() {
            unconstrained = ChatParams {
                json_schema: None,
                ..params.clone()
            };
            params = &unconstrained;
        }
        let key = cache_key(self.chat.backend(), self.chat.model(), messages, params);
        if let Some(cache) = &self.cache
            && let Some(text) = cache.get(&key)?
        {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(text);
        }
        match self.chat.chat(messages, params) {
            Ok(text) => {
                self.calls.fetch_add(1, Ordering::Relaxed);
                if let Some(cache) = &self.cache {
                    let key = if params.json_schema.is_some()
                        && self.chat.json_schema_refusal().is_some()
                    {
                        let sent = ChatParams {
                            json_schema: None,
                            ..params.clone()
                        };
                        cache_key(self.chat.backend(), self.chat.model(), messages, &sent)
                    } else {
                        key
                    };
                    cache.put(&key, self.chat.backend(), self.chat.model(), &text)?;
                }
                Ok(text)
            }
            Err(err) => {
                self.failed_calls.fetch_add(1, Ordering::Relaxed);
                Err(err)
            }
        }
    }

    /// [`Chat::choice_probabilities`] through the cache: a stored answer is replayed, a new
    /// one stored at once (as its JSON text, which gives back the same bits).
    pub fn choice_probabilities(
        &self,
        messages: &[Message],
        choices: &[&[&str]],
    ) -> Result<Vec<f64>> {
        let key = cache::probability_key(self.chat.backend(), self.chat.model(), messages, choices);
        if let Some(cache) = &self.cache
            && let Some(text) = cache.get(&key)?
            && let Ok(stored) = serde_json::from_str::<Vec<f64>>(&text)
            && stored.len() == choices.len()
        {
            self.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(stored);
        }
        match self.chat.choice_probabilities(messages, choices) {
            Ok(probabilities) => {
                self.calls.fetch_add(1, Ordering::Relaxed);
                if let Some(cache) = &self.cache {
                    let text = serde_json::to_string(&probabilities).unwrap_or_default();
                    cache.put(&key, self.chat.backend(), self.chat.model(), &text)?;
                }
                Ok(probabilities)
            }
            Err(err) => {
                self.failed_calls.fetch_add(1, Ordering::Relaxed);
                Err(err)
            }
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> LlmStats {
        LlmStats {
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            calls: self.calls.load(Ordering::Relaxed),
            failed_calls: self.failed_calls.load(Ordering::Relaxed),
        }
    }
}
