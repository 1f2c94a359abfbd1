//! The flags every LLM stage shares: which backend, its limits, the cache.

use std::path::{Path, PathBuf};

use anyhow::bail;
use clap::{Args, ValueEnum};
use freshstack::Setting;
use freshstack::dataset::Shard;
use freshstack::llm::{BackendSpec, ChatParams, Llm, StructuredOutput};

/// The settings of the backend's errors, and their flags.
fn backend_flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::LlmBaseUrl => "--llm-base-url",
        Setting::LlmModel => "--llm-model",
        Setting::LlmTimeout => "--llm-timeout",
        _ => return None,
    })
}

/// `--llm-structured-output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StructuredOutputArg {
    /// Send each call's JSON Schema (servers: response_format json_schema).
    JsonSchema,
    /// Send no schema: the prompt and repair requests alone.
    Off,
}

/// Backend and cache flags.
#[derive(Debug, Args)]
pub struct LlmArgs {
    /// OpenAI-compatible API root, e.g. http://localhost:8000/v1 (vLLM, llama.cpp, TGI, Ollama,
    /// OpenAI). Repeat it (or separate by commas) for a fleet serving the same model: calls go
    /// to the least busy server and move to another when one cannot be reached. The key, if
    /// needed, is read from FRESHSTACK_LLM_API_KEY.
    #[arg(long, value_name = "URL", value_delimiter = ',')]
    llm_base_url: Vec<String>,
    /// Model name as the server knows it.
    #[arg(long, value_name = "NAME")]
    llm_model: Option<String>,
    /// Generate natively from this GGUF file (llama, qwen2, qwen3, gemma, gemma2, gemma3
    /// families; CPU) instead of a server.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["llm_base_url", "llm_model"])]
    llm_gguf: Option<PathBuf>,
    /// Requests in flight at once, per server; with --llm-gguf, calls decoded together (one KV
    /// cache each).
    #[arg(long, default_value_t = 8)]
    llm_concurrency: usize,
    /// Seconds allowed for one request (connect, generate, read).
    #[arg(long, default_value_t = 300.0, value_parser = parse_llm_timeout)]
    llm_timeout: f64,
    /// Retries of a request after a 429, a 5xx, a timeout or a dropped connection.
    #[arg(long, default_value_t = 8)]
    llm_max_retries: u32,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.0)]
    llm_temperature: f32,
    /// Sampling seed sent to the server.
    #[arg(long)]
    llm_seed: Option<u64>,
    /// Most tokens per answer (default: per stage).
    #[arg(long)]
    llm_max_tokens: Option<u32>,
    /// Repair requests after an unparseable answer, before recording it as failed.
    #[arg(long, default_value_t = freshstack::pipeline::DEFAULT_MAX_REPAIRS)]
    llm_max_repairs: u32,
    /// Response cache (SQLite). Default: llm-cache.sqlite next to --out.
    #[arg(long, value_name = "FILE")]
    llm_cache: Option<PathBuf>,
    /// Do not read nor write the response cache.
    #[arg(long)]
    no_cache: bool,
    /// Ask for each answer's JSON Schema (a server answering HTTP 400 to it gets the same
    /// request without it, once; the stage summary says so), or send none.
    #[arg(long, value_enum, default_value_t = StructuredOutputArg::JsonSchema)]
    llm_structured_output: StructuredOutputArg,
    /// Process only shard I of N (0-based): questions sorted by id, question i to shard i % N.
    /// Writes a sidecar OUT.shard.json; join the shards with `freshstack merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<Shard>,
}

/// `--llm-timeout`: a number of seconds a request can wait (`llm::request_timeout`), checked
/// as the command line is read, so that a value no request can use (`1e300`, `nan`, `0`) is one
/// line before any stage runs, whichever backend is given.
fn parse_llm_timeout(text: &str) -> Result<f64, String> {
    text.parse::<f64>()
        .ok()
        .filter(|&seconds| freshstack::llm::request_timeout(seconds).is_ok())
        .ok_or_else(|| {
            format!(
                "{text} is not a number of seconds in [{}, {}]",
                freshstack::llm::MIN_TIMEOUT_SECONDS,
                freshstack::llm::MAX_TIMEOUT_SECONDS
            )
        })
}

impl LlmArgs {
    /// Stage parameters: `default` with the flags applied.
    pub fn params(&self, default: &ChatParams) -> ChatParams {
        ChatParams {
            temperature: self.llm_temperature,
            max_tokens: self.llm_max_tokens.unwrap_or(default.max_tokens),
            seed: self.llm_seed,
            json_schema: default.json_schema.clone(),
        }
    }

    /// Repair attempts.
    pub fn max_repairs(&self) -> u32 {
        self.llm_max_repairs
    }

    /// Whether the calls carry their JSON Schema.
    pub fn structured_output(&self) -> StructuredOutput {
        match self.llm_structured_output {
            StructuredOutputArg::JsonSchema => StructuredOutput::JsonSchema,
            StructuredOutputArg::Off => StructuredOutput::Off,
        }
    }

    /// The `--shard` slice, if any.
    pub fn shard(&self) -> anyhow::Result<Option<Shard>> {
        Ok(self.shard)
    }

    /// Whether a backend was given (a GGUF file or a server).
    pub fn is_configured(&self) -> bool {
        self.llm_gguf.is_some() || !self.llm_base_url.is_empty()
    }

    /// Opens the backend and the response cache (`--llm-cache`, else `llm-cache.sqlite` next to
    /// `out`; none with `--no-cache`).
    pub fn open(&self, out: &Path) -> anyhow::Result<Llm> {
        let spec = BackendSpec {
            gguf: self.llm_gguf.clone(),
            base_urls: self.llm_base_url.clone(),
            model: self.llm_model.clone(),
            concurrency: self.llm_concurrency,
            timeout_seconds: self.llm_timeout,
            max_retries: self.llm_max_retries,
        };
        if let Err(message) = freshstack::llm::check_temperature(self.llm_temperature) {
            bail!("invalid --llm-temperature: {message}");
        }
        if !spec.is_configured() {
            bail!(
                "no language model: give --llm-base-url URL and --llm-model NAME, or --llm-gguf PATH"
            );
        }
        let cache = (!self.no_cache).then(|| {
            self.llm_cache.clone().unwrap_or_else(|| {
                out.parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .join("llm-cache.sqlite")
            })
        });
        let opened = spec.open_llm(cache.as_deref()).map_err(|e| match &e {
            freshstack::Error::Cache { path, .. } => {
                let context = format!("cannot open the response cache {}", path.display());
                anyhow::Error::from(e).context(context)
            }
            _ => super::with_flags(e, backend_flags),
        })?;
        Ok(opened.llm)
    }
}

/// One line about the backend's work, for the end of a stage.
pub fn stats_line(llm: &Llm) -> String {
    let stats = llm.stats();
    format!(
        "{} calls to {}, {} answers from the cache",
        stats.calls,
        llm.chat_backend().location(),
        stats.cache_hits
    )
}
