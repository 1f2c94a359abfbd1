//! The build configuration: one TOML file per topic (see `examples/*.toml`).
//!
//! Relative paths in the file are resolved against the file's directory, so a config and its
//! data can move together. Unknown keys are errors (a typo must not silently fall back to a
//! default).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, Setting};
use crate::search::DenseModelSpec;
use crate::source::TokenizerSpec;
use crate::source::stackoverflow::{Day, DayRange, TagMatch};

/// A whole build: which questions, which repositories, which retrievers, which LLM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildConfig {
    /// Topic name (e.g. `laravel`), written into the manifest and the report.
    pub topic: String,
    /// Where the questions come from.
    pub questions: QuestionsConfig,
    /// The repositories that make the corpus.
    pub corpus: CorpusSection,
    /// Retrievers and pool sizes.
    #[serde(default)]
    pub retrieval: RetrievalConfig,
    /// The language model of the nuggets, query-variant and judge stages.
    pub llm: LlmSection,
    /// Nugget generation.
    #[serde(default)]
    pub nuggets: NuggetsSection,
    /// Query variants.
    #[serde(default)]
    pub variants: VariantsSection,
    /// Judging.
    #[serde(default)]
    pub judge: JudgeSection,
    /// Filtering.
    #[serde(default)]
    pub filter: FilterSection,
    /// An optional cross-encoder second stage over every pooled run (paper §6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerank: Option<RerankSection>,
    /// The question window of `freshstack refresh` (also applied by `build`, so that a fresh
    /// build of the same config gives the same dataset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh: Option<RefreshSection>,
}

/// `[refresh]`: how a refresh moves the question window.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RefreshSection {
    /// Questions created before this day (`YYYY-MM-DD`) are retired: left out of the build.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "parsed_option"
    )]
    pub retire_before: Option<Day>,
}

/// Reranking: every (technique, retriever) run of the pool also gets a `+rerank` run, its top
/// `depth` rescored by a cross-encoder with the query the run was retrieved with. Reranked runs
/// are pooled like the others, so their top `pool_depth` is judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RerankSection {
    /// Cross-encoder: a local directory or a Hugging Face id in the local cache.
    pub model: String,
    /// Documents per run rescored (paper §6: 50).
    #[serde(default = "default_rerank_depth")]
    pub depth: usize,
    /// Longest (query, document) pair in tokens (default: the model's).
    #[serde(default)]
    pub max_length: Option<usize>,
}

fn default_rerank_depth() -> usize {
    crate::rerank::DEFAULT_RERANK_DEPTH
}

/// Questions: a Stack Overflow dump with a tag filter, or an already imported JSONL file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionsConfig {
    /// `Posts.xml` (plain, .gz, .zst or .7z).
    #[serde(default)]
    pub posts: Option<PathBuf>,
    /// Questions already imported (reference query schema), instead of `posts`.
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// Tags to keep (with `posts`).
    #[serde(default)]
    pub tags: Vec<String>,
    /// `any` (default) or `all` of `tags`.
    #[serde(default, rename = "match", deserialize_with = "parsed")]
    pub tag_match: TagMatch,
    /// First day kept, `YYYY-MM-DD`.
    #[serde(default, deserialize_with = "parsed_option")]
    pub since: Option<Day>,
    /// Last day kept, `YYYY-MM-DD`.
    #[serde(default, deserialize_with = "parsed_option")]
    pub until: Option<Day>,
    /// Lowest question score kept.
    #[serde(default)]
    pub min_score: Option<i64>,
    /// Keep questions without an accepted answer (their best answer instead).
    #[serde(default)]
    pub allow_unaccepted: bool,
    /// Site root for question URLs.
    #[serde(default)]
    pub site_url: Option<String>,
    /// Keep at most this many questions (the first by id) — for trial runs.
    #[serde(default)]
    pub max_questions: Option<usize>,
}

impl QuestionsConfig {
    /// The days kept from the dump; `since` after `until` is an error naming
    /// `questions.since`.
    pub fn day_range(&self) -> Result<DayRange> {
        match (&self.since, &self.until) {
            (Some(s), Some(u)) if s > u => Err(Error::invalid(
                Setting::QuestionsSince,
                format!("{s} is after questions.until ({u}): no question could match"),
            )),
            _ => DayRange::new(self.since.clone(), self.until.clone()),
        }
    }
}

/// The dotted key of the TOML line holding byte `at` (`questions.since` for `since = ...` under
/// `[questions]`), or the table of a header line; `None` where the line shows neither, as in
/// the middle of a multi-line array.
fn toml_key_at(text: &str, at: usize) -> Option<String> {
    let mut table = String::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let line_end = line_start + line.len();
        let trimmed = line.trim();
        let header = trimmed
            .strip_prefix("[[")
            .and_then(|h| h.split_once("]]"))
            .or_else(|| trimmed.strip_prefix('[').and_then(|h| h.split_once(']')))
            .map(|(name, _)| dotted(name));
        if let Some(name) = &header {
            table.clone_from(name);
        }
        if at < line_end || line_end == text.len() {
            if header.is_some() {
                return Some(table);
            }
            let (key, _) = trimmed.split_once('=')?;
            let key = dotted(key);
            let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '"');
            if key.is_empty() || !key.chars().all(plain) {
                return None;
            }
            return Some(if table.is_empty() {
                key
            } else {
                format!("{table}.{key}")
            });
        }
        line_start = line_end;
    }
    None
}

/// A TOML key path without the spaces around its dots.
fn dotted(key: &str) -> String {
    key.split('.').map(str::trim).collect::<Vec<_>>().join(".")
}

/// A setting read through its `FromStr`, so that a config file takes the same text as the flag.
/// The error is the parser's message alone: the file's line and key name the setting.
fn parsed<'de, D, T>(deserializer: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr<Err = Error>,
{
    let text = String::deserialize(deserializer)?;
    text.parse()
        .map_err(|e| serde::de::Error::custom(setting_message(e)))
}

/// [`parsed`] for an optional setting.
fn parsed_option<'de, D, T>(deserializer: D) -> std::result::Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: FromStr<Err = Error>,
{
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|t| {
        t.parse()
            .map_err(|e| serde::de::Error::custom(setting_message(e)))
    })
    .transpose()
}

/// Dense model specs as written; [`BuildConfig`] resolves them against the file's directory.
fn dense_specs<'de, D>(deserializer: D) -> std::result::Result<Vec<DenseModelSpec>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let specs = Vec::<String>::deserialize(deserializer)?;
    Ok(specs
        .iter()
        .map(|s| DenseModelSpec::unresolved(s))
        .collect())
}

/// The message of a setting's parse error, without the setting's own name (the config's key
/// replaces it).
fn setting_message(error: Error) -> String {
    match error {
        Error::InvalidArgument { message, .. } => message,
        other => other.to_string(),
    }
}

/// The corpus: `repositories` maps `owner/name` to a local checkout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorpusSection {
    /// `"owner/name" = "path/to/checkout"`.
    pub repositories: BTreeMap<String, PathBuf>,
    /// Most tokens per document.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: usize,
    /// `cl100k_base` (default, as the reference), `o200k_base`, or `hf:PATH` to a Hugging Face
    /// `tokenizer.json` (relative to the config file), e.g. the dense model's own.
    #[serde(default, deserialize_with = "parsed")]
    pub tokenizer: TokenizerSpec,
    /// Larger files are skipped.
    #[serde(default = "default_max_file_bytes")]
    pub max_file_bytes: u64,
    /// Gitignore-style globs (relative to each checkout) of paths to leave out, e.g.
    /// `["tests/fixtures/**", "vendor/**"]`.
    #[serde(default)]
    pub exclude: Vec<String>,
}

fn default_max_tokens() -> usize {
    crate::source::DEFAULT_MAX_TOKENS
}
fn default_max_file_bytes() -> u64 {
    crate::source::DEFAULT_MAX_FILE_BYTES
}

/// Retrievers and pool sizes (paper §3.4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetrievalConfig {
    /// Use BM25.
    #[serde(default = "yes")]
    pub bm25: bool,
    /// Dense models, `[NAME=]MODEL[#WIDTH]`: local directories or Hugging Face cache ids, each
    /// cut to its own Matryoshka width when `#WIDTH` is written.
    #[serde(default, deserialize_with = "dense_specs")]
    pub dense: Vec<DenseModelSpec>,
    /// Also pool the normalized-sum fusion of the retrievers (when there are two or more).
    #[serde(default = "yes")]
    pub fusion: bool,
    /// Documents pooled from each (technique, retriever) list.
    #[serde(default = "default_pool_depth")]
    pub pool_depth: usize,
    /// Documents per retriever fused, and the depth of the exported runs.
    #[serde(default = "default_fusion_depth")]
    pub fusion_depth: usize,
    /// Token budget of one encoder batch (default: the encoder's, per device).
    #[serde(default)]
    pub max_batch_tokens: Option<usize>,
    /// Matryoshka width every dense model's vectors are cut to (one its card lists; default:
    /// full width).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimensions: Option<usize>,
}

fn yes() -> bool {
    true
}
fn default_pool_depth() -> usize {
    20
}
fn default_fusion_depth() -> usize {
    100
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        Self {
            bm25: true,
            dense: Vec::new(),
            fusion: true,
            pool_depth: default_pool_depth(),
            fusion_depth: default_fusion_depth(),
            max_batch_tokens: None,
            dimensions: None,
        }
    }
}

/// The language model: a local GGUF file, or an OpenAI-compatible server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSection {
    /// Generate natively from this GGUF file.
    #[serde(default)]
    pub gguf: Option<PathBuf>,
    /// OpenAI-compatible API root (the key comes from `FRESHSTACK_LLM_API_KEY`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// More roots serving the same model (a vLLM fleet): calls go to the least busy server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_urls: Vec<String>,
    /// Model name as the server knows it.
    #[serde(default)]
    pub model: Option<String>,
    /// Requests in flight at once, per server; with `gguf`, calls decoded together (their
    /// generated tokens share each pass over the weights; answers do not change).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Seconds allowed for one request.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: f64,
    /// Retries after a 429, 5xx, timeout or dropped connection.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// Sampling temperature (0 = greedy).
    #[serde(default)]
    pub temperature: f32,
    /// Sampling seed.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Repair requests after an unusable answer.
    #[serde(default = "default_repairs")]
    pub max_repairs: u32,
    /// Response cache; default `OUT/work/llm-cache.sqlite`.
    #[serde(default)]
    pub cache: Option<PathBuf>,
    /// `json_schema` (default): every call carries its answer's JSON Schema (servers get
    /// `response_format`; one that refuses it falls back to prompt + repair, said in the stage
    /// summary). `off`: no schema is sent.
    #[serde(default)]
    pub structured_output: crate::llm::StructuredOutput,
    /// `[llm.nuggets]`: another model (or other settings) for the nuggets stage only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nuggets: Option<LlmOverride>,
    /// `[llm.variants]`: the same for the query-variants stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variants: Option<LlmOverride>,
    /// `[llm.judge]`: the same for the judge stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<LlmOverride>,
}

/// The stages that call the language model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LlmStage {
    /// Nugget generation.
    Nuggets,
    /// Query variants.
    Variants,
    /// Judging.
    Judge,
}

impl LlmStage {
    /// Every LLM stage, in build order.
    pub const ALL: [LlmStage; 3] = [LlmStage::Nuggets, LlmStage::Variants, LlmStage::Judge];

    /// The stage's name, as in `[llm.NAME]`.
    pub fn name(self) -> &'static str {
        match self {
            LlmStage::Nuggets => "nuggets",
            LlmStage::Variants => "variants",
            LlmStage::Judge => "judge",
        }
    }
}

/// One stage's departures from `[llm]`. A field left out keeps `[llm]`'s value, except the
/// backend: naming any of `gguf`, `base_url`, `base_urls` or `model` replaces all four, so a
/// stage never mixes its file with `[llm]`'s servers. The response cache stays `[llm]`'s (its
/// keys name the model).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmOverride {
    /// Generate natively from this GGUF file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gguf: Option<PathBuf>,
    /// OpenAI-compatible API root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// More roots serving the same model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub base_urls: Vec<String>,
    /// Model name as the server knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Requests in flight at once (or sequences decoded together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<usize>,
    /// Seconds allowed for one request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<f64>,
    /// Retries after a 429, 5xx, timeout or dropped connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Sampling temperature (0 = greedy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    /// Sampling seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Repair requests after an unusable answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_repairs: Option<u32>,
    /// `json_schema` or `off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_output: Option<crate::llm::StructuredOutput>,
}

impl LlmOverride {
    /// Whether it names a backend of its own.
    fn names_backend(&self) -> bool {
        self.gguf.is_some()
            || self.base_url.is_some()
            || !self.base_urls.is_empty()
            || self.model.is_some()
    }
}

fn default_concurrency() -> usize {
    8
}
fn default_timeout() -> f64 {
    300.0
}
fn default_retries() -> u32 {
    8
}
fn default_repairs() -> u32 {
    crate::pipeline::DEFAULT_MAX_REPAIRS
}

/// Nugget generation settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NuggetsSection {
    /// Most nuggets per question.
    #[serde(default = "default_max_nuggets")]
    pub max_nuggets: usize,
    /// Most tokens per answer.
    #[serde(default = "default_stage_tokens")]
    pub max_tokens: u32,
}

fn default_max_nuggets() -> usize {
    10
}
fn default_stage_tokens() -> u32 {
    1024
}

impl Default for NuggetsSection {
    fn default() -> Self {
        Self {
            max_nuggets: default_max_nuggets(),
            max_tokens: default_stage_tokens(),
        }
    }
}

/// Query-variant settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantsSection {
    /// Most sub-questions per question.
    #[serde(default = "default_sub_questions")]
    pub max_sub_questions: usize,
    /// Most tokens per answer.
    #[serde(default = "default_stage_tokens")]
    pub max_tokens: u32,
}

fn default_sub_questions() -> usize {
    5
}

impl Default for VariantsSection {
    fn default() -> Self {
        Self {
            max_sub_questions: default_sub_questions(),
            max_tokens: default_stage_tokens(),
        }
    }
}

/// Judging settings (paper §3.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JudgeSection {
    /// Documents judged in one call.
    #[serde(default = "default_docs_per_call")]
    pub docs_per_call: usize,
    /// The model's context window; default: the GGUF's, or 32768 for a server.
    #[serde(default)]
    pub context_tokens: Option<usize>,
    /// Most tokens of one document shown to the model.
    #[serde(default = "default_max_doc_tokens")]
    pub max_doc_tokens: usize,
    /// Most tokens per answer.
    #[serde(default = "default_judge_tokens")]
    pub max_tokens: u32,
    /// How the model gives its verdict: `generate` (the paper's batched protocol),
    /// `probability` (one pair per call, the probability of "yes" against `threshold`),
    /// `terms` (no model), `quote` (a quote checked against the document) or `graded`
    /// (full / partial / none, the expected grade against `threshold`).
    #[serde(default)]
    pub verdict: crate::pipeline::judge::Verdict,
    /// The score a supported pair reaches under the `probability` and `terms` verdicts, in
    /// [0, 1].
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// The weight of the term coverage beside the model's probability in the `probability`
    /// verdict's score, in [0, 1].
    #[serde(default = "default_term_weight")]
    pub term_weight: f64,
    /// The least share of a nugget's own terms a supporting document must hold, in [0, 1]
    /// (0: no gate).
    #[serde(default)]
    pub min_term_coverage: f64,
    /// How many times each `generate` call is asked, the documents shuffled after the first;
    /// the majority decides (1: once). Left out of the fingerprint's JSON at 1, so builds made
    /// before it existed resume.
    #[serde(default = "one_vote", skip_serializing_if = "is_one_vote")]
    pub votes: usize,
    /// With one vote, the share of `generate` calls asked again with their documents
    /// shuffled, to measure the judge's self-consistency (never changing a label), in [0, 1].
    /// Left out of the fingerprint's JSON at its default, so builds made before it existed
    /// resume.
    #[serde(
        default = "default_self_check",
        skip_serializing_if = "is_default_self_check"
    )]
    pub self_check: f64,
}

fn default_self_check() -> f64 {
    crate::pipeline::judge::DEFAULT_SELF_CHECK
}
fn is_default_self_check(share: &f64) -> bool {
    *share == default_self_check()
}

fn one_vote() -> usize {
    1
}
fn is_one_vote(votes: &usize) -> bool {
    *votes == 1
}

fn default_threshold() -> f64 {
    crate::pipeline::judge::DEFAULT_THRESHOLD
}
fn default_term_weight() -> f64 {
    crate::pipeline::judge::DEFAULT_TERM_WEIGHT
}

fn default_docs_per_call() -> usize {
    20
}
fn default_max_doc_tokens() -> usize {
    2048
}
fn default_judge_tokens() -> u32 {
    4096
}

impl Default for JudgeSection {
    fn default() -> Self {
        Self {
            docs_per_call: default_docs_per_call(),
            context_tokens: None,
            max_doc_tokens: default_max_doc_tokens(),
            max_tokens: default_judge_tokens(),
            verdict: crate::pipeline::judge::Verdict::default(),
            threshold: default_threshold(),
            term_weight: default_term_weight(),
            min_term_coverage: 0.0,
            votes: one_vote(),
            self_check: default_self_check(),
        }
    }
}

/// Filtering (paper §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilterSection {
    /// Drop questions with any nugget that no judged document supports (the paper's rule).
    /// `false` keeps every question with at least one supported nugget.
    #[serde(default = "yes")]
    pub require_all_nuggets_supported: bool,
}

impl LlmSection {
    /// The settings `stage` runs with: this section with the stage's `[llm.STAGE]` applied
    /// (without the stage tables themselves).
    pub fn for_stage(&self, stage: LlmStage) -> LlmSection {
        let mut resolved = LlmSection {
            nuggets: None,
            variants: None,
            judge: None,
            ..self.clone()
        };
        let Some(over) = self.stage_override(stage) else {
            return resolved;
        };
        if over.names_backend() {
            resolved.gguf = over.gguf.clone();
            resolved.base_url = over.base_url.clone();
            resolved.base_urls = over.base_urls.clone();
            resolved.model = over.model.clone();
        }
        resolved.concurrency = over.concurrency.unwrap_or(self.concurrency);
        resolved.timeout_seconds = over.timeout_seconds.unwrap_or(self.timeout_seconds);
        resolved.max_retries = over.max_retries.unwrap_or(self.max_retries);
        resolved.temperature = over.temperature.unwrap_or(self.temperature);
        resolved.seed = over.seed.or(self.seed);
        resolved.max_repairs = over.max_repairs.unwrap_or(self.max_repairs);
        resolved.structured_output = over.structured_output.unwrap_or(self.structured_output);
        resolved
    }

    /// `[llm.STAGE]`, when given.
    pub fn stage_override(&self, stage: LlmStage) -> Option<&LlmOverride> {
        match stage {
            LlmStage::Nuggets => self.nuggets.as_ref(),
            LlmStage::Variants => self.variants.as_ref(),
            LlmStage::Judge => self.judge.as_ref(),
        }
    }

    /// The checks of `validate` on one resolved section; `at` prefixes the field names
    /// (`llm`, `llm.nuggets`). Errors are (field, message).
    fn check(&self, at: &str) -> std::result::Result<(), (String, String)> {
        let bad = |field: &str, message: String| Err((format!("{at}{field}"), message));
        let mut urls: Vec<&String> = self.base_url.iter().chain(&self.base_urls).collect();
        if let Some(url) = urls.iter().find(|u| !crate::dataset::is_web_url(u)) {
            return bad(
                ".base_url",
                format!("{url:?} is not an http:// or https:// URL"),
            );
        }
        urls.sort();
        if let Some(pair) = urls
            .windows(2)
            .find(|w| w[0].trim_end_matches('/') == w[1].trim_end_matches('/'))
        {
            return bad(
                ".base_urls",
                format!("{:?} is listed twice: each server once", pair[0]),
            );
        }
        if self.model.as_ref().is_some_and(|m| m.trim().is_empty()) {
            return bad(".model", "empty".into());
        }
        if let Some(gguf) = &self.gguf
            && !gguf.is_file()
        {
            return bad(".gguf", format!("{} is not a file", gguf.display()));
        }
        let has_servers = self.base_url.is_some() || !self.base_urls.is_empty();
        match (&self.gguf, has_servers, &self.model) {
            (Some(_), false, None) | (None, true, Some(_)) => {}
            _ => {
                return bad(
                    "",
                    "give `gguf`, or `base_url` (and/or `base_urls`) and `model` (not both kinds)"
                        .into(),
                );
            }
        }
        if self.concurrency == 0 {
            return bad(".concurrency", "must be at least 1".into());
        }
        if let Err(message) = crate::llm::request_timeout(self.timeout_seconds) {
            return bad(".timeout_seconds", message);
        }
        if let Err(message) = crate::llm::check_temperature(self.temperature) {
            return bad(".temperature", message);
        }
        Ok(())
    }

    /// The backend this section describes (servers: `base_url` first, then `base_urls`).
    pub fn backend(&self) -> crate::llm::BackendSpec {
        crate::llm::BackendSpec {
            gguf: self.gguf.clone(),
            base_urls: self
                .base_url
                .iter()
                .chain(&self.base_urls)
                .cloned()
                .collect(),
            model: self.model.clone(),
            concurrency: self.concurrency,
            timeout_seconds: self.timeout_seconds,
            max_retries: self.max_retries,
        }
    }
}

impl Default for FilterSection {
    fn default() -> Self {
        Self {
            require_all_nuggets_supported: true,
        }
    }
}

impl BuildConfig {
    /// Reads and checks a config file; relative paths become relative to its directory.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            crate::dataset::bounded::read_text(path, crate::dataset::bounded::MAX_SETTINGS_BYTES)
                .map_err(|e| Error::io(path, e))?;
        let base = path.parent().unwrap_or(Path::new(""));
        Self::parse(&text, path, base)
    }

    /// Parses config text (`origin` names it in errors; relative paths resolve against `base`).
    pub fn parse(text: &str, origin: &Path, base: &Path) -> Result<Self> {
        let mut config: BuildConfig = toml::from_str(text).map_err(|e| {
            let start = e.span().map(|span| span.start.min(text.len()));
            let line = start.map_or(0, |at| text[..at].lines().count().max(1));
            let message = e.message().replace('\n', " ");
            // A missing field's span is its table (the whole file at the top level), and the
            // message names the field.
            let key = start
                .filter(|_| !message.starts_with("missing field"))
                .and_then(|at| toml_key_at(text, at));
            match key {
                Some(key) => Error::parse(origin, line, format!("{key}: {message}")),
                None => Error::parse(origin, line, message),
            }
        })?;
        config.resolve_paths(base, origin)?;
        config.validate(origin)?;
        Ok(config)
    }

    /// The same settings as JSON (the Python binding's dict): the fields and checks of the
    /// TOML file, relative paths resolved against `base`; `origin` names it in errors.
    pub fn from_json(text: &str, origin: &Path, base: &Path) -> Result<Self> {
        let mut config: BuildConfig = serde_json::from_str(text)
            .map_err(|e| Error::parse(origin, e.line(), e.to_string()))?;
        config.resolve_paths(base, origin)?;
        config.validate(origin)?;
        Ok(config)
    }

    fn resolve_paths(&mut self, base: &Path, origin: &Path) -> Result<()> {
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        if let Some(p) = self.questions.posts.as_mut() {
            resolve(p);
        }
        if let Some(p) = self.questions.file.as_mut() {
            resolve(p);
        }
        for p in self.corpus.repositories.values_mut() {
            resolve(p);
        }
        self.corpus.tokenizer = self.corpus.tokenizer.clone().resolved(base);
        if let Some(p) = self.llm.gguf.as_mut() {
            resolve(p);
        }
        if let Some(p) = self.llm.cache.as_mut() {
            resolve(p);
        }
        for over in [
            &mut self.llm.nuggets,
            &mut self.llm.variants,
            &mut self.llm.judge,
        ]
        .into_iter()
        .flatten()
        {
            if let Some(p) = over.gguf.as_mut() {
                resolve(p);
            }
        }
        // Dense models and the reranker: a relative spec naming an existing directory is a
        // path; anything else is a Hugging Face id.
        for spec in &mut self.retrieval.dense {
            *spec = spec.clone().resolved(base).map_err(|e| {
                Error::invalid_config(
                    format!("{}: retrieval.dense", origin.display()),
                    setting_message(e),
                )
            })?;
        }
        if let Some(model) = self.rerank.as_mut().map(|r| &mut r.model) {
            let candidate = base.join(&*model);
            if Path::new(model.as_str()).is_relative() && candidate.exists() {
                *model = candidate.to_string_lossy().into_owned();
            }
        }
        Ok(())
    }

    fn validate(&self, origin: &Path) -> Result<()> {
        let bad = |field: &str, message: String| {
            Err(Error::invalid_config(
                format!("{}: {field}", origin.display()),
                message,
            ))
        };
        if self.topic.trim().is_empty() {
            return bad("topic", "empty".into());
        }
        match (&self.questions.posts, &self.questions.file) {
            (None, None) => return bad("questions", "give `posts` (a dump) or `file`".into()),
            (Some(_), Some(_)) => {
                return bad("questions", "give `posts` or `file`, not both".into());
            }
            (Some(_), None) if self.questions.tags.is_empty() => {
                return bad("questions.tags", "at least one tag with `posts`".into());
            }
            _ => {}
        }
        if let Err(Error::InvalidArgument { what, message }) = self.questions.day_range() {
            return bad(what.name(), message);
        }
        if self.questions.max_questions == Some(0) {
            return bad("questions.max_questions", "must be at least 1".into());
        }
        if let Some(rerank) = &self.rerank {
            if rerank.model.trim().is_empty() {
                return bad("rerank.model", "empty".into());
            }
            if rerank.depth == 0 {
                return bad("rerank.depth", "must be at least 1".into());
            }
            if rerank.max_length == Some(0) {
                return bad("rerank.max_length", "must be at least 1".into());
            }
            if let Err(e) = crate::embed::resolve_model(&rerank.model) {
                return bad("rerank.model", e.to_string());
            }
        }
        for spec in &self.retrieval.dense {
            if let Err(e) = crate::embed::resolve_model(&spec.model) {
                return bad("retrieval.dense", e.to_string());
            }
        }
        if self.judge.context_tokens == Some(0) {
            return bad("judge.context_tokens", "must be at least 1".into());
        }
        if self.judge.max_doc_tokens == 0 {
            return bad("judge.max_doc_tokens", "must be at least 1".into());
        }
        if let Err(e) = crate::source::check_exclude_globs(&self.corpus.exclude) {
            return bad("corpus.exclude", e.to_string());
        }
        if let Err((field, message)) = self.llm.check("llm") {
            return bad(&field, message);
        }
        for stage in LlmStage::ALL {
            if self.llm.stage_override(stage).is_some() {
                let at = format!("llm.{}", stage.name());
                if let Err((field, message)) = self.llm.for_stage(stage).check(&at) {
                    return bad(&field, message);
                }
            }
        }
        if let Some(cache) = &self.llm.cache
            && std::fs::metadata(cache).is_ok_and(|m| !m.is_file())
        {
            return bad(
                "llm.cache",
                format!(
                    "{} is {}, not a cache file",
                    cache.display(),
                    if cache.is_dir() {
                        "a directory"
                    } else {
                        "not a regular file"
                    }
                ),
            );
        }
        if self.corpus.repositories.is_empty() {
            return bad("corpus.repositories", "no repository".into());
        }
        for (name, path) in &self.corpus.repositories {
            if name.trim().is_empty() || name.contains(char::is_whitespace) {
                return bad(
                    "corpus.repositories",
                    format!("{name:?} is not an owner/name"),
                );
            }
            if !path.is_dir() {
                return bad(
                    &format!("corpus.repositories.{name:?}"),
                    format!("{} is not a directory", path.display()),
                );
            }
        }
        if self.corpus.max_tokens == 0 {
            return bad("corpus.max_tokens", "must be at least 1".into());
        }
        if let TokenizerSpec::HuggingFace(path) = &self.corpus.tokenizer
            && !path.is_file()
        {
            return bad(
                "corpus.tokenizer",
                format!("{} is not a file", path.display()),
            );
        }
        if !self.retrieval.bm25 && self.retrieval.dense.is_empty() {
            return bad(
                "retrieval",
                "no retriever: enable bm25 or list dense models".into(),
            );
        }
        if self.retrieval.pool_depth == 0 || self.retrieval.fusion_depth == 0 {
            return bad(
                "retrieval",
                "pool_depth and fusion_depth must be at least 1".into(),
            );
        }
        if self.retrieval.pool_depth > self.retrieval.fusion_depth {
            return bad(
                "retrieval.pool_depth",
                "must not exceed fusion_depth (the depth every run is retrieved to)".into(),
            );
        }
        if self.nuggets.max_nuggets == 0 {
            return bad("nuggets.max_nuggets", "must be at least 1".into());
        }
        if self.variants.max_sub_questions == 0 {
            return bad("variants.max_sub_questions", "must be at least 1".into());
        }
        if self.judge.docs_per_call == 0 {
            return bad("judge.docs_per_call", "must be at least 1".into());
        }
        if self.judge.votes == 0 {
            return bad("judge.votes", "must be at least 1".into());
        }
        if self.judge.votes > 1 && self.judge.verdict != crate::pipeline::judge::Verdict::Generate {
            return bad(
                "judge.votes",
                format!(
                    "{} votes need verdict = \"generate\" (the {} verdict judges one pair per \
                     call: no document order to shuffle)",
                    self.judge.votes,
                    self.judge.verdict.name()
                ),
            );
        }
        for (field, value) in [
            ("judge.threshold", self.judge.threshold),
            ("judge.term_weight", self.judge.term_weight),
            ("judge.min_term_coverage", self.judge.min_term_coverage),
            ("judge.self_check", self.judge.self_check),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return bad(field, format!("{value} is outside [0, 1]"));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BuildConfig> {
        BuildConfig::parse(text, Path::new("topic.toml"), Path::new("."))
    }

    const MINIMAL: &str = r#"
topic = "demo"
[questions]
file = "Cargo.toml"
[corpus.repositories]
"me/repo" = "src"
[llm]
base_url = "http://localhost:8000/v1"
model = "m"
"#;

    #[test]
    fn a_stage_table_overrides_only_what_it_names() {
        let text = format!(
            "{MINIMAL}temperature = 0.5\nseed = 7\nconcurrency = 3\n[llm.nuggets]\nmodel = \"big\"\n\
             base_url = \"http://localhost:9000/v1\"\nseed = 8\n[llm.judge]\nmax_repairs = 0\n"
        );
        let config = parse(&text).unwrap();
        let nuggets = config.llm.for_stage(LlmStage::Nuggets);
        assert_eq!(nuggets.model.as_deref(), Some("big"));
        assert_eq!(
            nuggets.base_url.as_deref(),
            Some("http://localhost:9000/v1")
        );
        assert_eq!((nuggets.seed, nuggets.temperature), (Some(8), 0.5));
        assert_eq!(nuggets.concurrency, 3);
        assert!(nuggets.nuggets.is_none() && nuggets.judge.is_none());
        // No table: `[llm]` itself, without the stage tables.
        let variants = config.llm.for_stage(LlmStage::Variants);
        assert_eq!(variants.model.as_deref(), Some("m"));
        assert_eq!(variants.seed, Some(7));
        assert!(variants.nuggets.is_none());
        // A table without a backend keeps `[llm]`'s.
        let judge = config.llm.for_stage(LlmStage::Judge);
        assert_eq!(judge.model.as_deref(), Some("m"));
        assert_eq!(judge.max_repairs, 0);
        assert_ne!(config.llm.max_repairs, 0);
    }

    #[test]
    fn minimal_config_gets_the_paper_defaults() {
        let config = parse(MINIMAL).unwrap();
        assert_eq!(config.retrieval.pool_depth, 20);
        assert_eq!(config.retrieval.fusion_depth, 100);
        assert_eq!(config.judge.docs_per_call, 20);
        assert!(config.retrieval.bm25 && config.retrieval.fusion);
        assert!(config.filter.require_all_nuggets_supported);
        assert_eq!(
            config.corpus.repositories[&"me/repo".to_string()],
            Path::new("./src")
        );
        assert_eq!(
            config.llm.structured_output,
            crate::llm::StructuredOutput::JsonSchema
        );
        let off = MINIMAL.replace("[llm]", "[llm]\nstructured_output = \"off\"");
        assert_eq!(
            parse(&off).unwrap().llm.structured_output,
            crate::llm::StructuredOutput::Off
        );
        let bad = MINIMAL.replace("[llm]", "[llm]\nstructured_output = \"grammar\"");
        let err = parse(&bad).unwrap_err().to_string();
        assert!(
            err.contains("structured_output") || err.contains("json_schema"),
            "{err}"
        );
    }

    #[test]
    fn dense_models_resolve_against_the_config_with_or_without_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("models/enc");
        std::fs::create_dir_all(&model).unwrap();
        for file in ["config.json", "tokenizer.json", "model.safetensors"] {
            std::fs::write(model.join(file), "{}").unwrap();
        }
        std::fs::create_dir(dir.path().join("src")).unwrap();
        let text = MINIMAL.replace("file = \"Cargo.toml\"", "file = \"topic.toml\"")
            + "[retrieval]\ndense = [\"models/enc\", \"small=models/enc\"]\n";
        std::fs::write(dir.path().join("topic.toml"), &text).unwrap();
        let config = BuildConfig::load(&dir.path().join("topic.toml")).unwrap();
        let names: Vec<(&str, &Path)> = config
            .retrieval
            .dense
            .iter()
            .map(|d| (d.name.as_str(), Path::new(&d.model)))
            .collect();
        assert_eq!(
            names,
            [("enc", model.as_path()), ("small", model.as_path())]
        );
        // Written back as given, the paths resolved (what the stage fingerprints hash).
        let written = serde_json::to_value(&config.retrieval.dense).unwrap();
        assert_eq!(
            written,
            serde_json::json!([
                model.display().to_string(),
                format!("small={}", model.display())
            ])
        );
        let empty = MINIMAL.to_string() + "[retrieval]\ndense = [\"\"]\n";
        let err = parse(&empty).unwrap_err().to_string();
        assert_eq!(err, "invalid topic.toml: retrieval.dense: empty");
    }

    #[test]
    fn errors_name_the_line_and_field() {
        let typo = MINIMAL.replace("[llm]", "[llm]\ntemprature = 0.5");
        let err = parse(&typo).unwrap_err().to_string();
        assert!(
            err.starts_with("topic.toml:7: llm.temprature: unknown field `temprature`"),
            "{err}"
        );
        let hot = MINIMAL.replace("[llm]", "[llm]\ntemperature = \"hot\"");
        let err = parse(&hot).unwrap_err().to_string();
        assert!(err.starts_with("topic.toml:8: llm.temperature: "), "{err}");
        // Typed settings take the flag's text and give its message.
        let all = MINIMAL.replace(
            "file = \"Cargo.toml\"",
            "file = \"Cargo.toml\"\nmatch = \"All\"",
        );
        assert_eq!(parse(&all).unwrap().questions.tag_match, TagMatch::All);
        let some = MINIMAL.replace(
            "file = \"Cargo.toml\"",
            "file = \"Cargo.toml\"\nmatch = \"some\"",
        );
        let err = parse(&some).unwrap_err().to_string();
        assert_eq!(
            err,
            "topic.toml:5: questions.match: \"some\": expected any or all"
        );
        let no_topic = MINIMAL.replace("topic = \"demo\"", "");
        let err = parse(&no_topic).unwrap_err().to_string();
        assert_eq!(err, "topic.toml:1: missing field `topic`");
        let no_llm = MINIMAL.replace("model = \"m\"", "");
        let err = parse(&no_llm).unwrap_err().to_string();
        assert!(err.contains("llm"), "{err}");
        let missing_repo = MINIMAL.replace("\"src\"", "\"does/not/exist\"");
        let err = parse(&missing_repo).unwrap_err().to_string();
        assert!(err.contains("not a directory"), "{err}");
        let deep_pool = MINIMAL.to_string() + "[retrieval]\npool_depth = 200\n";
        assert!(parse(&deep_pool).is_err());
        let window = MINIMAL.to_string() + "[refresh]\nretire_before = \"2024-3-1\"\n";
        let err = parse(&window).unwrap_err().to_string();
        assert_eq!(
            err,
            "topic.toml:11: refresh.retire_before: \"2024-3-1\": expected YYYY-MM-DD"
        );
        let window = MINIMAL.to_string() + "[refresh]\nretire_before = \"2024-03-01\"\n";
        let config = parse(&window).unwrap();
        assert_eq!(
            config.refresh.unwrap().retire_before.map(String::from),
            Some("2024-03-01".to_string())
        );
    }

    #[test]
    fn out_of_range_timeouts_and_temperatures_are_refused_at_load() {
        let with = |line: &str| MINIMAL.replace("[llm]", &format!("[llm]\n{line}"));
        for (line, field) in [
            ("timeout_seconds = 1e300", "llm.timeout_seconds"),
            ("timeout_seconds = 1e-300", "llm.timeout_seconds"),
            ("timeout_seconds = -1.0", "llm.timeout_seconds"),
            ("timeout_seconds = nan", "llm.timeout_seconds"),
            ("temperature = nan", "llm.temperature"),
            ("temperature = inf", "llm.temperature"),
            ("temperature = -5.0", "llm.temperature"),
        ] {
            let err = parse(&with(line)).unwrap_err().to_string();
            assert!(err.contains(field), "{line}: {err}");
        }
        assert!(parse(&with("timeout_seconds = 600.0\ntemperature = 0.7")).is_ok());
    }

    /// Issue 34, item 17: settings that passed load and failed only at the stage using them,
    /// after index builds and LLM calls.
    #[test]
    fn settings_that_would_fail_late_are_refused_at_load() {
        let cases = [
            (
                MINIMAL.replace("http://localhost:8000/v1", "not a url"),
                "llm.base_url",
            ),
            (
                MINIMAL.replace("model = \"m\"", "model = \"  \""),
                "llm.model",
            ),
            (
                MINIMAL.replace(
                    "[llm]",
                    "[llm]\nbase_urls = [\"http://localhost:8000/v1/\"]",
                ),
                "llm.base_urls",
            ),
            (
                MINIMAL.replace("[llm]", "[llm]\ncache = \"src\""),
                "llm.cache",
            ),
            (
                MINIMAL.replace("[llm]", "[llm]\ncache = \"/dev/null\""),
                "llm.cache",
            ),
            (
                MINIMAL.to_string() + "[judge]\ncontext_tokens = 0\n",
                "judge.context_tokens",
            ),
            (
                MINIMAL.to_string() + "[judge]\nmax_doc_tokens = 0\n",
                "judge.max_doc_tokens",
            ),
            (
                MINIMAL.replace(
                    "[corpus.repositories]",
                    "[corpus]\nexclude = [\"a/{b\"]\n[corpus.repositories]",
                ),
                "corpus.exclude",
            ),
            (
                MINIMAL.to_string() + "[retrieval]\ndense = [\"no/such-model-here\"]\n",
                "retrieval.dense",
            ),
            (
                MINIMAL.to_string() + "[rerank]\nmodel = \"src\"\nmax_length = 0\n",
                "rerank.max_length",
            ),
        ];
        for (text, field) in cases {
            let err = parse(&text).unwrap_err().to_string();
            assert!(err.contains(field), "{field}: {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
        let gguf = r#"
topic = "demo"
[questions]
file = "Cargo.toml"
[corpus.repositories]
"me/repo" = "src"
[llm]
gguf = "no-such-model.gguf"
"#;
        let err = parse(gguf).unwrap_err().to_string();
        assert!(
            err.contains("llm.gguf") && err.contains("is not a file"),
            "{err}"
        );
    }

    #[test]
    fn a_day_range_that_keeps_no_day_names_the_field() {
        let dump = |days: &str| {
            MINIMAL.replace(
                "file = \"Cargo.toml\"",
                &format!("posts = \"Cargo.toml\"\ntags = [\"rust\"]\n{days}"),
            )
        };
        let range = parse(&dump("since = \"2024-01-01\"\nuntil = \"2024-01-01\""))
            .unwrap()
            .questions
            .day_range()
            .unwrap();
        assert!(range.contains("2024-01-01") && !range.contains("2024-01-02"));
        // Before, the stage built the range as given and imported nothing, silently.
        let err = parse(&dump("since = \"2024-05-01\"\nuntil = \"2024-01-01\""))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "invalid topic.toml: questions.since: 2024-05-01 is after questions.until \
             (2024-01-01): no question could match"
        );
        let err = parse(&dump("until = \"2024-1-1\""))
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "topic.toml:6: questions.until: \"2024-1-1\": expected YYYY-MM-DD"
        );
        // A config built in code is checked where the stage reads it.
        let mut config = parse(MINIMAL).unwrap();
        config.questions.since = Some("2024-05-01".parse().unwrap());
        config.questions.until = Some("2024-01-01".parse().unwrap());
        let err = config.questions.day_range().unwrap_err().to_string();
        assert!(
            err.starts_with("invalid questions.since: 2024-05-01 is after questions.until"),
            "{err}"
        );
    }

    #[test]
    fn tokenizer_files_resolve_against_the_config_and_must_exist() {
        let with = |tokenizer: &str| {
            MINIMAL.replace(
                "[corpus.repositories]",
                &format!("[corpus]\ntokenizer = \"{tokenizer}\"\n[corpus.repositories]"),
            )
        };
        // Any file will do for the check at load time (it is parsed by the corpus stage).
        let config = parse(&with("hf:Cargo.toml")).unwrap();
        assert_eq!(config.corpus.tokenizer.to_string(), "hf:./Cargo.toml");
        assert_eq!(
            parse(&with("o200k_base")).unwrap().corpus.tokenizer,
            TokenizerSpec::Tiktoken(crate::source::TokenizerKind::O200kBase)
        );
        let err = parse(&with("hf:no/such/tokenizer.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("corpus.tokenizer"), "{err}");
        assert!(
            err.contains("no/such/tokenizer.json is not a file"),
            "{err}"
        );
        let err = parse(&with("gpt2")).unwrap_err().to_string();
        assert!(
            err.contains("corpus.tokenizer") && err.contains("gpt2"),
            "{err}"
        );
    }
}
