//! An OpenAI-compatible `chat/completions` client (vLLM, llama.cpp server, TGI, Ollama, OpenAI)
//! over blocking HTTP (ureq; rustls for https, no system TLS library).
//!
//! Transient failures are retried with exponential backoff and full jitter: HTTP 408, 409, 429
//! and 5xx, timeouts, refused or dropped connections, and bodies that are not the JSON the
//! protocol promises (truncated or garbled). A `Retry-After` header (seconds) is honoured, capped
//! by [`OpenAiConfig::max_backoff`]. Other 4xx (bad request, context overflow, bad key) fail at
//! once with the server's message. At most [`OpenAiConfig::concurrency`] requests are in flight
//! per server, however many threads call.
//!
//! A fleet (several [`OpenAiConfig::base_urls`], e.g. one vLLM per GPU node) shares one client:
//! each request goes to the server with the fewest requests in flight (round-robin among
//! equals), and a server that fails at the transport level (refused, reset, timed out) is set
//! aside for [`FAILOVER_COOLDOWN`] while the request moves at once to another one. The servers
//! must serve the same model: the response cache does not record which one answered.
//!
//! Structured output: a call whose [`ChatParams::json_schema`] is set is sent with
//! `"response_format": {"type": "json_schema", "json_schema": {"name", "strict": true,
//! "schema"}}`. A server that answers HTTP 400 to it (one that does not know the field, or cannot
//! compile the schema) gets the same request once more without it; when that one is accepted the
//! client remembers the refusal ([`Chat::json_schema_refusal`]) and sends no schema for the rest
//! of its life, so the stages fall back to the unconstrained prompt + repair and say so in their
//! summaries. When the request without the schema is refused too, the 400 was not about the
//! schema: the call fails with both messages and nothing is remembered.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::redact::redact;
use super::{Chat, ChatParams, Message};
use crate::error::{Error, Result, Setting};

/// How long a server that failed at the transport level is passed over.
pub const FAILOVER_COOLDOWN: Duration = Duration::from_secs(10);

/// Environment variable holding the API key of an OpenAI-compatible server (never a flag, so it
/// stays out of shell history and process listings; never logged).
pub const API_KEY_ENV: &str = "FRESHSTACK_LLM_API_KEY";

/// Settings of [`OpenAiChat`].
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API roots, e.g. `http://localhost:8000/v1`; `/chat/completions` is appended. Several
    /// roots make a fleet serving the same model: calls are spread over them.
    pub base_urls: Vec<String>,
    /// The model name the servers know.
    pub model: String,
    /// Sent as `Authorization: Bearer ...` when set. Never logged.
    pub api_key: Option<String>,
    /// Most requests in flight at once, per server.
    pub concurrency: usize,
    /// Limit for one whole request (connect, send, wait, read).
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubled each retry.
    pub initial_backoff: Duration,
    /// Longest single wait, `Retry-After` included.
    pub max_backoff: Duration,
}

impl OpenAiConfig {
    /// One server. Defaults: 8 in flight, 300 s per request, 8 retries, backoff 1 s doubling to
    /// 60 s.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self::fleet(vec![base_url.into()], model)
    }

    /// Sets the API key from [`API_KEY_ENV`] when it is set and not empty.
    pub fn with_key_from_env(mut self) -> Self {
        self.api_key = std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty());
        self
    }

    /// Several servers of the same model (same defaults as [`OpenAiConfig::new`]).
    pub fn fleet(base_urls: Vec<String>, model: impl Into<String>) -> Self {
        Self {
            base_urls,
            model: model.into(),
            api_key: None,
            concurrency: 8,
            timeout: Duration::from_secs(300),
            max_retries: 8,
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field(
                "base_urls",
                &self.base_urls.iter().map(|u| redact(u)).collect::<Vec<_>>(),
            )
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("concurrency", &self.concurrency)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("initial_backoff", &self.initial_backoff)
            .field("max_backoff", &self.max_backoff)
            .finish()
    }
}

/// A counting semaphore: bounds requests in flight.
struct Permits {
    free: Mutex<usize>,
    freed: Condvar,
}

struct Permit<'a>(&'a Permits);

impl Permits {
    fn new(n: usize) -> Self {
        Self {
            free: Mutex::new(n.max(1)),
            freed: Condvar::new(),
        }
    }

    fn acquire(&self) -> Permit<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        while *free == 0 {
            free = self.freed.wait(free).unwrap_or_else(|e| e.into_inner());
        }
        *free -= 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|e| e.into_inner());
        *free += 1;
        self.0.freed.notify_one();
    }
}

/// The outcome of one attempt.
enum Attempt {
    Done(String),
    /// Worth retrying; `retry_after` from the server when it said; `transport` when the server
    /// could not be reached or dropped the connection (another server may do better).
    Transient {
        reason: String,
        retry_after: Option<Duration>,
        transport: bool,
    },
    Fatal {
        message: String,
        /// The HTTP status, when the server answered.
        status: Option<u16>,
    },
}

/// One server of the fleet.
struct Endpoint {
    /// The full `chat/completions` URL.
    url: String,
    /// `url` with any `user:password@` redacted: what messages show.
    shown: String,
    in_flight: AtomicUsize,
    /// Passed over until then after a transport failure.
    down_until: Mutex<Option<Instant>>,
}

impl Endpoint {
    fn is_down(&self, now: Instant) -> bool {
        self.down_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t > now)
    }
}

/// Counts a request in flight on an endpoint while alive.
struct InFlight<'a>(&'a Endpoint);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The chat client. Cheap to share between threads.
pub struct OpenAiChat {
    config: OpenAiConfig,
    endpoints: Vec<Endpoint>,
    /// Rotates the starting point of the least-busy scan (round-robin among equals).
    next: AtomicUsize,
    agent: ureq::Agent,
    permits: Permits,
    /// Set once, by the first call whose `response_format` was refused (HTTP 400) and whose
    /// retry without it was accepted: the server's message. Later calls send no schema.
    schema_refusal: OnceLock<String>,
}

impl OpenAiChat {
    /// Checks the settings and builds the HTTP agent (no request is made).
    pub fn new(config: OpenAiConfig) -> Result<Self> {
        if config.base_urls.is_empty() {
            return Err(Error::invalid(Setting::LlmBaseUrl, "no server given"));
        }
        let mut endpoints = Vec::with_capacity(config.base_urls.len());
        for base in &config.base_urls {
            let base = base.trim().trim_end_matches('/');
            if !(base.starts_with("http://") || base.starts_with("https://")) {
                return Err(Error::invalid(
                    Setting::LlmBaseUrl,
                    format!("{:?} is not an http:// or https:// URL", redact(base)),
                ));
            }
            let url = format!("{base}/chat/completions");
            if endpoints.iter().any(|e: &Endpoint| e.url == url) {
                return Err(Error::invalid(
                    Setting::LlmBaseUrl,
                    format!("{:?} is given twice", redact(base)),
                ));
            }
            endpoints.push(Endpoint {
                shown: redact(&url),
                url,
                in_flight: AtomicUsize::new(0),
                down_until: Mutex::new(None),
            });
        }
        if config.model.trim().is_empty() {
            return Err(Error::invalid(Setting::LlmModel, "empty model name"));
        }
        if config.timeout.is_zero() {
            return Err(Error::invalid(Setting::LlmTimeout, "must be positive"));
        }
        let per_server = config.concurrency.max(1);
        let agent_config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(config.timeout))
            .timeout_connect(Some(config.timeout.min(Duration::from_secs(30))))
            .max_idle_connections(per_server * 2 * endpoints.len())
            .max_idle_connections_per_host(per_server * 2)
            .user_agent(concat!("freshstack/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Self {
            permits: Permits::new(per_server * endpoints.len()),
            endpoints,
            next: AtomicUsize::new(0),
            agent: ureq::Agent::new_with_config(agent_config),
            config,
            schema_refusal: OnceLock::new(),
        })
    }

    /// The full `chat/completions` URL (of the first server of a fleet), credentials included:
    /// show it through [`Redacted`](crate::llm::Redacted).
    pub fn endpoint(&self) -> &str {
        &self.endpoints[0].url
    }

    /// The server for the next request: the fewest requests in flight among those not set
    /// aside (all of them when every one is), scanning from a rotating start.
    fn pick(&self) -> &Endpoint {
        let n = self.endpoints.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let now = Instant::now();
        let mut best: Option<((bool, usize), &Endpoint)> = None;
        for j in 0..n {
            let endpoint = &self.endpoints[(start + j) % n];
            let key = (
                endpoint.is_down(now),
                endpoint.in_flight.load(Ordering::Relaxed),
            );
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, endpoint));
            }
        }
        best.map_or(&self.endpoints[0], |(_, e)| e)
    }

    /// Whether some server other than `failed` is not set aside.
    fn another_is_up(&self, failed: &str) -> bool {
        let now = Instant::now();
        self.endpoints
            .iter()
            .any(|e| e.url != failed && !e.is_down(now))
    }

    /// The JSON request; with `schema`, its `response_format` (named after the schema's
    /// `title` when it has one, else `answer`; names allow `[A-Za-z0-9_-]` only).
    fn request_body(
        &self,
        messages: &[Message],
        params: &ChatParams,
        schema: Option<&serde_json::Value>,
    ) -> String {
        let mut body = serde_json::json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": params.temperature,
            "max_tokens": params.max_tokens,
            "stream": false,
        });
        if let Some(seed) = params.seed {
            body["seed"] = serde_json::json!(seed);
        }
        if let Some(schema) = schema {
            body["response_format"] = serde_json::json!({
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(schema),
                    "strict": true,
                    "schema": schema,
                },
            });
        }
        body.to_string()
    }

    /// One request to the least busy server; returns which one with the outcome.
    fn attempt(&self, body: &str, extract: Extract) -> (&Endpoint, Attempt) {
        let _permit = self.permits.acquire();
        let endpoint = self.pick();
        endpoint.in_flight.fetch_add(1, Ordering::Relaxed);
        let _in_flight = InFlight(endpoint);
        let outcome = self.send(&endpoint.url, body, extract);
        if let Attempt::Transient {
            transport: true, ..
        } = outcome
        {
            *endpoint
                .down_until
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + FAILOVER_COOLDOWN);
        }
        (endpoint, outcome)
    }

    fn send(&self, url: &str, body: &str, extract: Extract) -> Attempt {
        let fatal = |message: String, status: Option<u16>| Attempt::Fatal { message, status };
        let mut request = self
            .agent
            .post(url)
            .header("Content-Type", "application/json");
        if let Some(key) = &self.config.api_key {
            request = request.header("Authorization", format!("Bearer {key}"));
        }
        let mut response = match request.send(body) {
            Ok(r) => r,
            Err(e) => return classify_transport(e),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let text = match response.body_mut().read_to_string() {
            Ok(t) => t,
            Err(e) => {
                return Attempt::Transient {
                    reason: redact(&format!("reading the response body: {e}")),
                    retry_after: None,
                    transport: true,
                };
            }
        };
        match status {
            200..=299 => match extract(&text) {
                Ok(content) => Attempt::Done(content),
                Err(reason) => Attempt::Transient {
                    reason,
                    retry_after: None,
                    transport: false,
                },
            },
            408 | 409 | 429 | 500..=599 => Attempt::Transient {
                reason: format!("HTTP {status}: {}", snippet(&text)),
                retry_after,
                transport: false,
            },
            _ => {
                let mut message = format!("HTTP {status}: {}", snippet(&text));
                let lower = text.to_ascii_lowercase();
                if lower.contains("context") || lower.contains("too long") {
                    message.push_str(
                        " (the prompt may exceed the model's context: lower the context tokens, the \
                         documents' max tokens or the documents per call)",
                    );
                }
                fatal(message, Some(status))
            }
        }
    }

    /// The wait before retry number `retry` (0-based): full jitter over an exponential ceiling,
    /// at least the server's `Retry-After`, at most `max_backoff`.
    fn backoff(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        let ceiling = self
            .config
            .initial_backoff
            .saturating_mul(1u32 << retry.min(20))
            .min(self.config.max_backoff);
        let jittered = ceiling.mul_f64(0.5 + 0.5 * fastrand::f64());
        match retry_after {
            Some(wait) => wait.max(jittered).min(self.config.max_backoff),
            None => jittered,
        }
    }
}

impl Chat for OpenAiChat {
    fn backend(&self) -> &str {
        "openai"
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn location(&self) -> String {
        match self.endpoints.as_slice() {
            [one] => one.shown.clone(),
            many => format!(
                "{} servers ({})",
                many.len(),
                many.iter()
                    .map(|e| e.shown.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn max_concurrency(&self) -> usize {
        self.config.concurrency.max(1) * self.endpoints.len()
    }

    fn json_schema_refusal(&self) -> Option<String> {
        self.schema_refusal.get().cloned()
    }

    fn chat(&self, messages: &[Message], params: &ChatParams) -> Result<String> {
        // The schema goes out unless this client already saw the server refuse one.
        let mut schema = params
            .json_schema
            .as_ref()
            .filter(|_| self.schema_refusal.get().is_none());
        let mut body = self.request_body(messages, params, schema);
        // The server's answer to the request with the schema, once it refused it.
        let mut refused_with: Option<String> = None;
        let mut retry = 0;
        // Immediate moves to another server after a transport failure: not retries, but
        // bounded (each one sets a server aside; the cap guards against flapping).
        let mut failovers = 0;
        loop {
            let (endpoint, outcome) = self.attempt(&body, extract_content);
            match outcome {
                Attempt::Done(text) => {
                    if let Some(refusal) = refused_with
                        && self.schema_refusal.set(refusal.clone()).is_ok()
                    {
                        tracing::warn!(
                            "{}: the server refused response_format json_schema ({refusal}); \
                             the rest of this run asks without a schema (prompt + repair)",
                            endpoint.shown
                        );
                    }
                    return Ok(text);
                }
                Attempt::Fatal {
                    message,
                    status: Some(400),
                } if schema.is_some() => {
                    // Once: the same request without `response_format`.
                    tracing::debug!(
                        "{}: {message}; retrying without response_format",
                        endpoint.shown
                    );
                    refused_with = Some(message);
                    schema = None;
                    body = self.request_body(messages, params, None);
                }
                Attempt::Fatal { message, .. } => {
                    let message = match refused_with {
                        Some(first) => format!(
                            "{first} with response_format json_schema, and without it: {message}"
                        ),
                        None => message,
                    };
                    return Err(Error::Llm {
                        backend: format!("openai {}", endpoint.shown),
                        message,
                    });
                }
                Attempt::Transient {
                    reason,
                    retry_after,
                    transport,
                } => self.after_transient(
                    endpoint,
                    &reason,
                    (retry_after, transport),
                    &mut retry,
                    &mut failovers,
                )?,
            }
        }
    }

    fn gives_probabilities(&self) -> bool {
        true
    }

    /// One request for a single token with `logprobs` and the 20 most likely first tokens
    /// (`top_logprobs`); each choice's spellings are matched to those tokens exactly. A server
    /// that answers without log-probabilities is an error naming it.
    fn choice_probabilities(&self, messages: &[Message], choices: &[&[&str]]) -> Result<Vec<f64>> {
        let mut body: serde_json::Value = serde_json::from_str(&self.request_body(
            messages,
            &ChatParams {
                max_tokens: 1,
                ..ChatParams::default()
            },
            None,
        ))
        .map_err(|e| Error::invalid(Setting::LlmRequest, e.to_string()))?;
        body["logprobs"] = true.into();
        body["top_logprobs"] = TOP_LOGPROBS.into();
        let body = body.to_string();
        let (mut retry, mut failovers) = (0, 0);
        loop {
            let (endpoint, outcome) = self.attempt(&body, extract_top_logprobs);
            match outcome {
                Attempt::Done(text) => {
                    let top: Vec<(String, f64)> = serde_json::from_str(&text).unwrap_or_default();
                    if top.is_empty() {
                        return Err(Error::Llm {
                            backend: format!("openai {}", endpoint.shown),
                            message: "the server answered without log-probabilities (logprobs, \
                                      top_logprobs); use verdict = \"generate\" or \"terms\""
                                .into(),
                        });
                    }
                    return Ok(top_logprob_mass(&top, choices));
                }
                Attempt::Fatal { message, .. } => {
                    return Err(Error::Llm {
                        backend: format!("openai {}", endpoint.shown),
                        message,
                    });
                }
                Attempt::Transient {
                    reason,
                    retry_after,
                    transport,
                } => self.after_transient(
                    endpoint,
                    &reason,
                    (retry_after, transport),
                    &mut retry,
                    &mut failovers,
                )?,
            }
        }
    }
}

/// How many first tokens a probability request asks the server for (OpenAI's limit is 20).
const TOP_LOGPROBS: u32 = 20;

/// What one successful answer body is read into (an error makes the attempt transient).
type Extract = fn(&str) -> std::result::Result<String, String>;

impl OpenAiChat {
    /// After a transient failure: moves on to another server right away (transport failures,
    /// bounded), or waits its backoff for the next retry; an error once the retries are spent.
    fn after_transient(
        &self,
        endpoint: &Endpoint,
        reason: &str,
        (retry_after, transport): (Option<Duration>, bool),
        retry: &mut u32,
        failovers: &mut usize,
    ) -> Result<()> {
        if transport && *failovers < 2 * self.endpoints.len() && self.another_is_up(&endpoint.url) {
            *failovers += 1;
            tracing::debug!("{}: {reason}; moving to another server", endpoint.shown);
            return Ok(());
        }
        if *retry >= self.config.max_retries {
            return Err(Error::Llm {
                backend: format!("openai {}", endpoint.shown),
                message: format!(
                    "giving up after {} attempts; last: {reason}",
                    *retry as usize + *failovers + 1
                ),
            });
        }
        let wait = self.backoff(*retry, retry_after);
        tracing::debug!(
            "{}: {reason}; retry {} in {:.2}s",
            endpoint.shown,
            *retry + 1,
            wait.as_secs_f64()
        );
        std::thread::sleep(wait);
        *retry += 1;
        Ok(())
    }
}

/// Each choice's share of the probability of the listed first tokens (uniform when none of
/// them is among the top tokens).
fn top_logprob_mass(top: &[(String, f64)], choices: &[&[&str]]) -> Vec<f64> {
    let mass: Vec<f64> = choices
        .iter()
        .map(|spellings| {
            top.iter()
                .filter(|(token, lp)| spellings.contains(&token.as_str()) && lp.is_finite())
                .map(|(_, lp)| lp.exp())
                .sum()
        })
        .collect();
    super::normalised_shares(mass)
}

/// `choices[0].logprobs.content[0].top_logprobs` as the JSON text of `[[token, logprob], ...]`
/// (`[]` when the body has a choice but no log-probabilities); an error message when the body
/// is not a completion.
fn extract_top_logprobs(body: &str) -> std::result::Result<String, String> {
    let value: serde_json::Value = serde_json::from_str(body)
        .map_err(|e| format!("malformed completion body ({e}): {}", snippet(body)))?;
    let choice = value
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| format!("completion without choices: {}", snippet(body)))?;
    let top: Vec<(String, f64)> = choice
        .pointer("/logprobs/content/0/top_logprobs")
        .and_then(serde_json::Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|t| {
                    Some((
                        t.get("token")?.as_str()?.to_string(),
                        t.get("logprob")?.as_f64()?,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::to_string(&top).map_err(|e| e.to_string())
}

/// The `response_format` name of a schema: its `title` reduced to `[A-Za-z0-9_-]` (at most 64
/// characters, OpenAI's limit), else `answer`.
fn schema_name(schema: &serde_json::Value) -> String {
    let name: String = schema
        .get("title")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(64)
        .collect();
    if name.is_empty() {
        "answer".to_string()
    } else {
        name
    }
}

/// Sorts a transport error into retryable (network, timeout) or not (bad URL, TLS setup).
fn classify_transport(e: ureq::Error) -> Attempt {
    use ureq::Error as E;
    match e {
        E::BadUri(_)
        | E::Http(_)
        | E::RequireHttpsOnly(_)
        | E::TlsRequired
        | E::InvalidProxyUrl
        | E::Tls(_) => Attempt::Fatal {
            // ureq's messages may hold the URL (BadUri, RequireHttpsOnly).
            message: redact(&e.to_string()),
            status: None,
        },
        other => Attempt::Transient {
            reason: redact(&other.to_string()),
            retry_after: None,
            transport: true,
        },
    }
}

/// `Retry-After` as delta-seconds (the HTTP-date form is rare from model servers: ignored).
fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

#[derive(Deserialize)]
struct Completion {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

/// `choices[0].message.content`; an error message when the body is not that shape.
fn extract_content(body: &str) -> std::result::Result<String, String> {
    let completion: Completion = serde_json::from_str(body)
        .map_err(|e| format!("malformed completion body ({e}): {}", snippet(body)))?;
    let choice = completion
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| format!("completion without choices: {}", snippet(body)))?;
    Ok(choice.message.content.unwrap_or_default())
}

/// The first 200 characters of a body, on one line, for error messages.
fn snippet(text: &str) -> String {
    let one_line: String = text
        .chars()
        .take(200)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().count() > 200 {
        format!("{one_line}...")
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_logprobs_are_read_and_summed_per_choice() {
        let body = r#"{"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [
            {"token": "Yes", "logprob": -0.5, "top_logprobs": [
                {"token": "Yes", "logprob": -0.5}, {"token": "No", "logprob": -1.5},
                {"token": " yes", "logprob": -3.0}, {"token": "Maybe", "logprob": -4.0}]}]}}]}"#;
        let top: Vec<(String, f64)> =
            serde_json::from_str(&extract_top_logprobs(body).unwrap()).unwrap();
        assert_eq!(top.len(), 4);
        let p = top_logprob_mass(&top, &[&["yes", "Yes", " yes"], &["no", "No"]]);
        let (yes, no) = ((-0.5f64).exp() + (-3.0f64).exp(), (-1.5f64).exp());
        assert!((p[0] - yes / (yes + no)).abs() < 1e-12, "{p:?}");
        // No log-probabilities: an empty list (the caller's error), not a transient failure.
        assert_eq!(
            extract_top_logprobs(r#"{"choices": [{"message": {"content": "Yes"}}]}"#).unwrap(),
            "[]"
        );
        assert!(extract_top_logprobs("{}").is_err());
        assert_eq!(top_logprob_mass(&top, &[&["si"], &["non"]]), vec![0.5, 0.5]);
    }

    #[test]
    fn debug_redacts_key() {
        let mut config = OpenAiConfig::new("http://x/v1", "m");
        config.api_key = Some("sk-secret".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-secret"), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn fleet_spreads_least_busy_and_skips_servers_set_aside() {
        let urls = vec!["http://a/v1".to_string(), "http://b/v1/".to_string()];
        let chat = OpenAiChat::new(OpenAiConfig::fleet(urls, "m")).unwrap();
        assert_eq!(chat.max_concurrency(), 16);
        assert!(chat.location().contains("2 servers"));
        let picks: Vec<&str> = (0..4).map(|_| chat.pick().url.as_str()).collect();
        assert_eq!(picks[0], picks[2]);
        assert_ne!(picks[0], picks[1], "round-robin among equals: {picks:?}");
        chat.endpoints[0].in_flight.store(3, Ordering::Relaxed);
        assert!((0..4).all(|_| chat.pick().url == "http://b/v1/chat/completions"));
        *chat.endpoints[1].down_until.lock().unwrap() = Some(Instant::now() + FAILOVER_COOLDOWN);
        assert_eq!(chat.pick().url, "http://a/v1/chat/completions");
        assert!(!chat.another_is_up("http://a/v1/chat/completions"));
        let twice = vec!["http://a/v1".to_string(), "http://a/v1/".to_string()];
        assert!(OpenAiChat::new(OpenAiConfig::fleet(twice, "m")).is_err());
        assert!(OpenAiChat::new(OpenAiConfig::fleet(Vec::new(), "m")).is_err());
    }

    #[test]
    fn rejects_bad_urls() {
        assert!(OpenAiChat::new(OpenAiConfig::new("localhost:8000", "m")).is_err());
        assert!(OpenAiChat::new(OpenAiConfig::new("http://h/v1/", "")).is_err());
        let chat = OpenAiChat::new(OpenAiConfig::new("http://h/v1/", "m")).unwrap();
        assert_eq!(chat.endpoint(), "http://h/v1/chat/completions");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut config = OpenAiConfig::new("http://h/v1", "m");
        config.initial_backoff = Duration::from_millis(100);
        config.max_backoff = Duration::from_secs(2);
        let chat = OpenAiChat::new(config).unwrap();
        for retry in 0..30 {
            let wait = chat.backoff(retry, None);
            assert!(wait <= Duration::from_secs(2));
            let ceiling = Duration::from_millis(100)
                .saturating_mul(1 << retry.min(20))
                .min(Duration::from_secs(2));
            assert!(wait >= ceiling / 2, "{retry}: {wait:?}");
        }
        assert_eq!(
            chat.backoff(0, Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(
            chat.backoff(0, Some(Duration::from_secs(100))),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn a_schema_goes_out_as_a_strict_response_format() {
        let chat = OpenAiChat::new(OpenAiConfig::new("http://h/v1", "m")).unwrap();
        let schema = serde_json::json!({"title": "nug gets!", "type": "object"});
        let params = ChatParams {
            json_schema: Some(schema.clone()),
            ..ChatParams::default()
        };
        let messages = [Message::user("hi")];
        let body: serde_json::Value =
            serde_json::from_str(&chat.request_body(&messages, &params, Some(&schema))).unwrap();
        assert_eq!(body["response_format"]["type"], "json_schema");
        assert_eq!(body["response_format"]["json_schema"]["name"], "nuggets");
        assert_eq!(body["response_format"]["json_schema"]["strict"], true);
        assert_eq!(body["response_format"]["json_schema"]["schema"], schema);
        let plain: serde_json::Value =
            serde_json::from_str(&chat.request_body(&messages, &params, None)).unwrap();
        assert!(plain.get("response_format").is_none());
        assert_eq!(plain["messages"], body["messages"]);
        assert_eq!(
            schema_name(&serde_json::json!({"type": "object"})),
            "answer"
        );
        assert!(chat.json_schema_refusal().is_none());
    }

    #[test]
    fn retry_after_and_content() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(
            extract_content(r#"{"choices":[{"message":{"role":"assistant","content":"hi"}}]}"#)
                .unwrap(),
            "hi"
        );
        assert!(extract_content(r#"{"choices":[]}"#).is_err());
        assert!(extract_content(r#"{"choi"#).is_err());
    }
}
