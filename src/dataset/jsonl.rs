use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Reads a JSONL file into a vector; blank lines are skipped; a bad line is an error naming
/// `path:line` and serde's reason (which names the field).
pub fn read_jsonl<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for_each_jsonl(path.as_ref(), |_, row| out.push(row))?;
    Ok(out)
}

/// [`read_jsonl`] with the 1-based line number of each row, for checks that name the line.
pub fn read_jsonl_lines<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<Vec<(usize, T)>> {
    let mut out = Vec::new();
    for_each_jsonl(path.as_ref(), |line, row| out.push((line, row)))?;
    Ok(out)
}

/// [`read_jsonl_lines`] without holding the rows: `each` gets every row with its 1-based line
/// number as it is read (for files as large as a corpus).
pub fn for_each_jsonl<T: DeserializeOwned>(
    path: &Path,
    mut each: impl FnMut(usize, T),
) -> Result<()> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    for (i, line) in super::bounded::lines(BufReader::new(file)).enumerate() {
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

/// Reads a JSON file a stage or the report writes beside its outputs (at most
/// [`MAX_SIDE_FILE_BYTES`](super::bounded::MAX_SIDE_FILE_BYTES)): `Ok(None)` when it does not
/// exist; bad JSON, or a field of the wrong type, is an error naming the file, line and field.
pub fn read_json_if_present<T: DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    let text = match super::bounded::read_text(path, super::bounded::MAX_SIDE_FILE_BYTES) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, e)),
    };
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| Error::parse(path, e.line(), e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
