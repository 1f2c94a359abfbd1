use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// A buffered writer to a temporary file next to `path`, renamed onto `path` by
/// [`AtomicWriter::commit`]. Dropped without commit, the temporary file is deleted, so a failed or
/// interrupted stage leaves the previous output (or nothing) in place.
pub struct AtomicWriter {
    path: PathBuf,
    inner: BufWriter<tempfile::NamedTempFile>,
}

impl AtomicWriter {
    /// Opens a temporary file in `path`'s directory (created if missing).
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(&dir)
            .map_err(|e| Error::io(&dir, e))?;
        Ok(Self {
            path,
            inner: BufWriter::with_capacity(1 << 20, tmp),
        })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `value` as one line of JSON.
    pub fn write_json_line<T: Serialize>(&mut self, value: &T) -> Result<()> {
        serde_json::to_writer(&mut self.inner, value).map_err(|e| Error::Json {
            path: self.path.clone(),
            source: e,
        })?;
        self.inner
            .write_all(b"\n")
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Flushes, syncs and renames the temporary file onto the final path.
    pub fn commit(self) -> Result<()> {
        let path = self.path;
        let tmp = self
            .inner
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        tmp.as_file().sync_all().map_err(|e| Error::io(&path, e))?;
        tmp.persist(&path).map_err(|e| Error::io(&path, e.error))?;
        Ok(())
    }
}

impl Write for AtomicWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub fn write_json_atomic<T: Serialize>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    let mut writer = AtomicWriter::create(path)?;
    let path = writer.path().to_path_buf();
    serde_json::to_writer_pretty(&mut writer, value).map_err(|e| Error::Json {
        path: path.clone(),
        source: e,
    })?;
    writer.write_all(b"\n").map_err(|e| Error::io(&path, e))?;
    writer.commit()
}

/// Reads a JSONL file into a vector; blank lines are skipped; a bad line is an error naming
/// `path:line` and serde's reason (which names the field).
pub fn read_jsonl<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for_each_row(path.as_ref(), |_, row| out.push(row))?;
    Ok(out)
}

/// [`read_jsonl`] with the 1-based line number of each row, for checks that name the line.
pub fn read_jsonl_lines<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<(usize, T)>> {
    let mut out = Vec::new();
    for_each_row(path.as_ref(), |line, row| out.push((line, row)))?;
    Ok(out)
}

fn for_each_row<T: DeserializeOwned>(path: &Path, mut each: impl FnMut(usize, T)) -> Result<()> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    for (i, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let row =
            serde_json::from_str(&line).map_err(|e| Error::parse(path, i + 1, e.to_string()))?;
        each(i + 1, row);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncommitted_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.jsonl");
        {
            let mut w = AtomicWriter::create(&target).unwrap();
            w.write_json_line(&serde_json::json!({"a": 1})).unwrap();
        }
        assert!(!target.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn committed_writer_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("sub/out.jsonl");
        let mut w = AtomicWriter::create(&target).unwrap();
        w.write_json_line(&serde_json::json!({"a": 1})).unwrap();
        w.write_json_line(&serde_json::json!({"a": 2})).unwrap();
        w.commit().unwrap();
        let rows: Vec<serde_json::Value> = read_jsonl(&target).unwrap();
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn bad_line_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("bad.jsonl");
        std::fs::write(&target, "{\"a\":1}\n\n{oops\n").unwrap();
        let err = read_jsonl::<serde_json::Value>(&target)
            .unwrap_err()
            .to_string();
        assert!(err.contains("bad.jsonl:3:"), "{err}");
    }
}
