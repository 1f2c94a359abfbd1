//! The crate's error type: every variant names what failed and where (file, line, field), so
//! the CLI can print it as one line.

use std::fmt;
use std::path::PathBuf;

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the library.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A filesystem operation on `path` failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A line of a JSONL / TSV / TREC file could not be parsed.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file being read.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong (field, expected, got).
        message: String,
    },
    /// A user-supplied setting or argument is invalid.
    #[error("invalid {what}: {message}")]
    InvalidArgument {
        /// The setting.
        what: Setting,
        /// Why it is invalid.
        message: String,
    },
    /// A configuration file's key, a model card or a prompt template is invalid.
    #[error("invalid {what}: {message}")]
    InvalidConfig {
        /// The file and key (`build.toml: questions.since`), card or template.
        what: String,
        /// Why it is invalid.
        message: String,
    },
    /// Serialising output failed.
    #[error("{}: cannot write JSON: {source}", path.display())]
    Json {
        /// The file being written.
        path: PathBuf,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// An XML input (e.g. a Stack Overflow dump) is malformed or truncated at `byte_offset`.
    #[error("{}:{line}: byte {byte_offset}: {message}", path.display())]
    Xml {
        /// The file being read.
        path: PathBuf,
        /// 0-based byte offset in the (decompressed) XML where the problem was found.
        byte_offset: u64,
        /// 1-based line number of that byte (0 when not yet known).
        line: u64,
        /// What was wrong.
        message: String,
    },
    /// A tokenizer, grammar or other resource could not be initialised.
    #[error("{what}: {message}")]
    Resource {
        /// The resource (e.g. `tokenizer cl100k_base`).
        what: String,
        /// Why it failed.
        message: String,
    },
    /// A model could not be resolved, loaded or run (missing or corrupt weights, a tensor of the
    /// wrong shape, an unsupported architecture).
    #[error("model {model}: {message}")]
    Model {
        /// The model directory or id.
        model: String,
        /// What went wrong.
        message: String,
    },
    /// An index directory is missing, corrupt, or was written by an incompatible version.
    #[error("index {}: {message}", path.display())]
    Index {
        /// The index directory (or the file inside it that is wrong).
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A language-model call failed for good (after retries), or the backend could not start.
    #[error("LLM {backend}: {message}")]
    Llm {
        /// The backend and where it runs (e.g. `openai http://localhost:8000/v1`, `gguf model.gguf`).
        backend: String,
        /// What went wrong, with the attempt count when retried.
        message: String,
    },
    /// The response cache database failed.
    #[error("{}: LLM response cache: {message}", path.display())]
    Cache {
        /// The SQLite file.
        path: PathBuf,
        /// SQLite's reason.
        message: String,
    },
    /// A dataset file (Parquet, a cached Hugging Face dataset) is missing, lacks a column, or
    /// has a row that does not fit the schema.
    #[error("{}: {message}", path.display())]
    Dataset {
        /// The file or directory involved.
        path: PathBuf,
        /// What is wrong (column, row, the paths looked for).
        message: String,
    },
    /// Another run holds the lock of an output this one would write: nothing was done.
    #[error(
        "another freshstack run is writing {} (it holds {}); wait for it to end",
        output.display(),
        lock.display()
    )]
    Busy {
        /// The output (a build directory, an index).
        output: PathBuf,
        /// The lock file the other run holds.
        lock: PathBuf,
    },
    /// The caller asked the work to stop ([`crate::progress::Progress::cancelled`]); what was
    /// finished is kept, so a rerun resumes.
    #[error("interrupted: {what} stopped on request (finished work is kept; rerun to resume)")]
    Interrupted {
        /// The work that stopped.
        what: String,
    },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A parse error at `path:line`.
    pub fn parse(path: impl Into<PathBuf>, line: usize, message: impl Into<String>) -> Self {
        Error::Parse {
            path: path.into(),
            line,
            message: message.into(),
        }
    }

    /// An invalid argument or setting.
    pub fn invalid(what: Setting, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            message: message.into(),
        }
    }

    /// An invalid configuration key, model card or prompt template, named by `what`.
    pub fn invalid_config(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidConfig {
            what: what.into(),
            message: message.into(),
        }
    }

    /// A model error for `model`.
    pub fn model(model: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Model {
            model: model.into(),
            message: message.into(),
        }
    }

    /// A problem with the dataset file or directory `path`.
    pub fn dataset(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Dataset {
            path: path.into(),
            message: message.into(),
        }
    }

    /// A problem with the index at `path`.
    pub fn index(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Index {
            path: path.into(),
            message: message.into(),
        }
    }
}

/// A candle error's message without the backtrace candle attaches to it when `RUST_BACKTRACE` or
/// `RUST_LIB_BACKTRACE` is set: that is dozens of lines inside what must be a one-line error,
/// and resolving it takes seconds on a debug build. Context and path layers are kept as candle
/// prints them.
pub(crate) fn candle_message(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(inner),
        candle_core::Error::Context { inner, context } => {
            format!("{context}\n{}", candle_message(inner))
        }
        candle_core::Error::WithPath { inner, path } => {
            format!("path: {path:?} {}", candle_message(inner))
        }
        other => other.to_string(),
    }
}

/// The user-facing setting or argument an [`Error::InvalidArgument`] is about. The command line
/// maps a variant to the flag that sets it with a `match`, so the compiler checks every mapping;
/// [`Setting::name`] is how the library's own message names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Setting {
    /// `analyzer`.
    Analyzer,
    /// `ANN method`.
    AnnMethod,
    /// `bench sequences`.
    BenchSequences,
    /// `bench tokens`.
    BenchTokens,
    /// `b`.
    Bm25B,
    /// `k1`.
    Bm25K1,
    /// `build directory`.
    BuildDirectory,
    /// `chart series`.
    ChartSeries,
    /// `context tokens`.
    ContextTokens,
    /// `corpus`.
    Corpus,
    /// `dataset`.
    Dataset,
    /// `day`.
    Day,
    /// `day range`.
    DayRange,
    /// `dense model`.
    DenseModel,
    /// `dense models`.
    DenseModels,
    /// `device`.
    Device,
    /// `dim`.
    Dim,
    /// `dimensions`.
    Dimensions,
    /// `docs per call`.
    DocsPerCall,
    /// `dtype`.
    Dtype,
    /// `exclude`.
    Exclude,
    /// `fusion`.
    Fusion,
    /// `fusion depth`.
    FusionDepth,
    /// `fusion output`.
    FusionOutput,
    /// `fusion weights`.
    FusionWeights,
    /// `GPU exact search`.
    GpuExactSearch,
    /// `hnsw`.
    Hnsw,
    /// `id`.
    Id,
    /// `index`.
    Index,
    /// `judge min term coverage`.
    JudgeMinTermCoverage,
    /// `judge self check`.
    JudgeSelfCheck,
    /// `judge term weight`.
    JudgeTermWeight,
    /// `judge threshold`.
    JudgeThreshold,
    /// `judge verdict`.
    JudgeVerdict,
    /// `judge votes`.
    JudgeVotes,
    /// `judgments`.
    Judgments,
    /// `k`.
    K,
    /// `kind`.
    Kind,
    /// `language model`.
    LanguageModel,
    /// `llm`.
    Llm,
    /// `LLM base URL`.
    LlmBaseUrl,
    /// `llm concurrency`.
    LlmConcurrency,
    /// `LLM model`.
    LlmModel,
    /// `LLM request`.
    LlmRequest,
    /// `LLM timeout`.
    LlmTimeout,
    /// `matrix`.
    Matrix,
    /// `max-length`.
    MaxLength,
    /// `max tokens`.
    MaxTokens,
    /// `merge`.
    Merge,
    /// `merge output`.
    MergeOutput,
    /// `metric`.
    Metric,
    /// `model name`.
    ModelName,
    /// `model override`.
    ModelOverride,
    /// `models`.
    Models,
    /// `npy header`.
    NpyHeader,
    /// `out`.
    Out,
    /// `--out`.
    OutFlag,
    /// `per-query output`.
    PerQueryOutput,
    /// `pool`.
    Pool,
    /// `pooling`.
    Pooling,
    /// `posts`.
    Posts,
    /// `queries`.
    Queries,
    /// `query`.
    Query,
    /// `query encoder`.
    QueryEncoder,
    /// `query field`.
    QueryField,
    /// `query model`.
    QueryModel,
    /// `query vector`.
    QueryVector,
    /// `query vectors`.
    QueryVectors,
    /// `questions`.
    Questions,
    /// `questions.since`.
    QuestionsSince,
    /// `questions.until`.
    QuestionsUntil,
    /// `refresh`.
    Refresh,
    /// `refresh.retire_before`.
    RefreshRetireBefore,
    /// `removed repository`.
    RemovedRepository,
    /// `report page`.
    ReportPage,
    /// `repository`.
    Repository,
    /// `rerank`.
    Rerank,
    /// `rerank corpus`.
    RerankCorpus,
    /// `rerank depth`.
    RerankDepth,
    /// `retriever`.
    Retriever,
    /// `retrievers`.
    Retrievers,
    /// `rows`.
    Rows,
    /// `rrf k`.
    RrfK,
    /// `run output`.
    RunOutput,
    /// `runs`.
    Runs,
    /// `shard`.
    Shard,
    /// `since`.
    Since,
    /// `site URL`.
    SiteUrl,
    /// `tag`.
    Tag,
    /// `tag match`.
    TagMatch,
    /// `tokenizer`.
    Tokenizer,
    /// `topic`.
    Topic,
    /// `topics`.
    Topics,
    /// `vectors`.
    Vectors,
}

impl Setting {
    /// How messages name the setting.
    pub fn name(self) -> &'static str {
        match self {
            Setting::Analyzer => "analyzer",
            Setting::AnnMethod => "ANN method",
            Setting::BenchSequences => "bench sequences",
            Setting::BenchTokens => "bench tokens",
            Setting::Bm25B => "b",
            Setting::Bm25K1 => "k1",
            Setting::BuildDirectory => "build directory",
            Setting::ChartSeries => "chart series",
            Setting::ContextTokens => "context tokens",
            Setting::Corpus => "corpus",
            Setting::Dataset => "dataset",
            Setting::Day => "day",
            Setting::DayRange => "day range",
            Setting::DenseModel => "dense model",
            Setting::DenseModels => "dense models",
            Setting::Device => "device",
            Setting::Dim => "dim",
            Setting::Dimensions => "dimensions",
            Setting::DocsPerCall => "docs per call",
            Setting::Dtype => "dtype",
            Setting::Exclude => "exclude",
            Setting::Fusion => "fusion",
            Setting::FusionDepth => "fusion depth",
            Setting::FusionOutput => "fusion output",
            Setting::FusionWeights => "fusion weights",
            Setting::GpuExactSearch => "GPU exact search",
            Setting::Hnsw => "hnsw",
            Setting::Id => "id",
            Setting::Index => "index",
            Setting::JudgeMinTermCoverage => "judge min term coverage",
            Setting::JudgeSelfCheck => "judge self check",
            Setting::JudgeTermWeight => "judge term weight",
            Setting::JudgeThreshold => "judge threshold",
            Setting::JudgeVerdict => "judge verdict",
            Setting::JudgeVotes => "judge votes",
            Setting::Judgments => "judgments",
            Setting::K => "k",
            Setting::Kind => "kind",
            Setting::LanguageModel => "language model",
            Setting::Llm => "llm",
            Setting::LlmBaseUrl => "LLM base URL",
            Setting::LlmConcurrency => "llm concurrency",
            Setting::LlmModel => "LLM model",
            Setting::LlmRequest => "LLM request",
            Setting::LlmTimeout => "LLM timeout",
            Setting::Matrix => "matrix",
            Setting::MaxLength => "max-length",
            Setting::MaxTokens => "max tokens",
            Setting::Merge => "merge",
            Setting::MergeOutput => "merge output",
            Setting::Metric => "metric",
            Setting::ModelName => "model name",
            Setting::ModelOverride => "model override",
            Setting::Models => "models",
            Setting::NpyHeader => "npy header",
            Setting::Out => "out",
            Setting::OutFlag => "--out",
            Setting::PerQueryOutput => "per-query output",
            Setting::Pool => "pool",
            Setting::Pooling => "pooling",
            Setting::Posts => "posts",
            Setting::Queries => "queries",
            Setting::Query => "query",
            Setting::QueryEncoder => "query encoder",
            Setting::QueryField => "query field",
            Setting::QueryModel => "query model",
            Setting::QueryVector => "query vector",
            Setting::QueryVectors => "query vectors",
            Setting::Questions => "questions",
            Setting::QuestionsSince => "questions.since",
            Setting::QuestionsUntil => "questions.until",
            Setting::Refresh => "refresh",
            Setting::RefreshRetireBefore => "refresh.retire_before",
            Setting::RemovedRepository => "removed repository",
            Setting::ReportPage => "report page",
            Setting::Repository => "repository",
            Setting::Rerank => "rerank",
            Setting::RerankCorpus => "rerank corpus",
            Setting::RerankDepth => "rerank depth",
            Setting::Retriever => "retriever",
            Setting::Retrievers => "retrievers",
            Setting::Rows => "rows",
            Setting::RrfK => "rrf k",
            Setting::RunOutput => "run output",
            Setting::Runs => "runs",
            Setting::Shard => "shard",
            Setting::Since => "since",
            Setting::SiteUrl => "site URL",
            Setting::Tag => "tag",
            Setting::TagMatch => "tag match",
            Setting::Tokenizer => "tokenizer",
            Setting::Topic => "topic",
            Setting::Topics => "topics",
            Setting::Vectors => "vectors",
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::candle_message;

    #[test]
    fn candle_backtraces_are_left_out_of_messages() {
        let with_backtrace = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg("unknown magic".into())),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        assert_eq!(candle_message(&with_backtrace), "unknown magic");
        let layered = with_backtrace
            .context("reading the header")
            .with_path("m.gguf");
        assert_eq!(
            candle_message(&layered),
            "path: \"m.gguf\" reading the header\nunknown magic"
        );
    }
}
