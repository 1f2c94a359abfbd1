//! The response cache: one SQLite table (`responses`), keyed by a SHA-256 of everything that
//! determines an answer (backend, model, messages, parameters).
//!
//! Each answer is committed as soon as it arrives (WAL journal), so an interrupted stage keeps
//! every call it completed. Several processes may share one file (SQLite locking, busy timeout).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::{ChatParams, Message};
use crate::dataset::Fingerprint;
use crate::error::{Error, Result};

/// Bumped when the key's recipe changes, so old entries are simply never hit.
const KEY_VERSION: &str = "freshstack-llm-cache-v1";

/// The cache key: the [`Fingerprint`] (SHA-256, hex) of a canonical JSON of backend, model, messages and parameters.
pub fn cache_key(backend: &str, model: &str, messages: &[Message], params: &ChatParams) -> String {
    let canonical = serde_json::json!({
        "v": KEY_VERSION,
        "backend": backend,
        "model": model,
        "messages": messages,
        "params": params,
    });
    // The content fingerprint of that JSON: the SHA-256 the cache has always been keyed by,
    // so existing caches keep answering.
    Fingerprint::of_bytes(canonical.to_string().as_bytes()).to_string()
}

/// The key of a [`crate::llm::Llm::choice_probabilities`] request: never equal to a
/// [`cache_key`] (its canonical JSON has a `choices` field and no `params`).
pub fn probability_key(
    backend: &str,
    model: &str,
    messages: &[Message],
    choices: &[&[&str]],
) -> String {
    let canonical = serde_json::json!({
        "v": KEY_VERSION,
        "backend": backend,
        "model": model,
        "messages": messages,
        "choices": choices,
    });
    Fingerprint::of_bytes(canonical.to_string().as_bytes()).to_string()
}

/// A persistent map from [`cache_key`] to the model's answer.
pub struct ResponseCache {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl ResponseCache {
    /// Opens (creating when missing, with its directory) the cache at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        if std::fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
            // SQLite keeps a journal beside its file: `/dev/null` would grow `/dev/null-wal`.
            return Err(Error::Cache {
                path,
                message: "not a regular file (the cache is a SQLite database)".into(),
            });
        }
        if let Some(dir) = path.parent()
            && !dir.as_os_str().is_empty()
        {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        }
        let fail = |e: rusqlite::Error| Error::Cache {
            path: path.clone(),
            message: e.to_string(),
        };
        let conn = Connection::open(&path).map_err(fail)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(fail)?;
        // WAL: readers never block the writer and a commit is one append.
        conn.query_row("PRAGMA journal_mode=WAL", [], |_| Ok(()))
            .map_err(fail)?;
        conn.execute_batch(
            "PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS responses (
                 key TEXT PRIMARY KEY,
                 backend TEXT NOT NULL,
                 model TEXT NOT NULL,
                 response TEXT NOT NULL,
                 created_unix INTEGER NOT NULL
             );",
        )
        .map_err(fail)?;
        Ok(Self {
            path,
            conn: Mutex::new(conn),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn error(&self, e: impl ToString) -> Error {
        Error::Cache {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// The stored answer for `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<String>> {
        let conn = self.conn.lock().map_err(|e| self.error(e))?;
        conn.query_row(
            "SELECT response FROM responses WHERE key = ?1",
            params![key],
            |row| row.get(0),
        )
        .optional()
        .map_err(|e| self.error(e))
    }

    /// Stores `response` under `key` (replacing any older answer).
    pub fn put(&self, key: &str, backend: &str, model: &str, response: &str) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let conn = self.conn.lock().map_err(|e| self.error(e))?;
        conn.execute(
            "INSERT OR REPLACE INTO responses (key, backend, model, response, created_unix)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![key, backend, model, response, now],
        )
        .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// Number of stored answers.
    pub fn len(&self) -> Result<u64> {
        let conn = self.conn.lock().map_err(|e| self.error(e))?;
        conn.query_row("SELECT COUNT(*) FROM responses", [], |row| {
            row.get::<_, i64>(0)
        })
        .map(|n| n as u64)
        .map_err(|e| self.error(e))
    }

    /// True when nothing is stored.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_that_is_not_a_regular_file_is_refused_without_a_journal() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("cache.fifo");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let err = ResponseCache::open(&fifo).err().unwrap().to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }

    #[test]
    fn key_depends_on_every_part() {
        let msgs = vec![Message::user("hi")];
        let p = ChatParams::default();
        let base = cache_key("openai", "m", &msgs, &p);
        assert_eq!(base.len(), 64);
        assert_eq!(base, cache_key("openai", "m", &msgs, &p));
        assert_ne!(base, cache_key("gguf", "m", &msgs, &p));
        assert_ne!(base, cache_key("openai", "m2", &msgs, &p));
        assert_ne!(base, cache_key("openai", "m", &[Message::user("ho")], &p));
        let seeded = ChatParams {
            seed: Some(1),
            ..p.clone()
        };
        assert_ne!(base, cache_key("openai", "m", &msgs, &seeded));
    }

    #[test]
    fn round_trips_and_persists() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/cache.sqlite");
        {
            let cache = ResponseCache::open(&path).unwrap();
            assert!(cache.is_empty().unwrap());
            cache.put("k", "openai", "m", "answer").unwrap();
            assert_eq!(cache.get("k").unwrap().as_deref(), Some("answer"));
            assert_eq!(cache.get("other").unwrap(), None);
        }
        let cache = ResponseCache::open(&path).unwrap();
        assert_eq!(cache.get("k").unwrap().as_deref(), Some("answer"));
        assert_eq!(cache.len().unwrap(), 1);
    }
}
