//! The crate's error type: every variant names what failed and where (file, line, field), so
//! the CLI can print it as one line.

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
        /// The flag, config key or argument.
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
    pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
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
