//! Reading outside files with a bound on what one line or one whole file may hold, so that a
//! path naming `/dev/zero`, a FIFO or a runaway file fails early with a clear reason instead of
//! growing a buffer until the allocator aborts.
//!
//! Line readers ([`lines`], [`read_line_text`]) bound a line at [`MAX_LINE_BYTES`]; whole-file
//! readers ([`read_text`]) take the bound for their kind of file ([`MAX_SETTINGS_BYTES`] for
//! configuration and annotations, [`MAX_SIDE_FILE_BYTES`] for the JSON files a stage writes
//! beside its data, [`MAX_REF_BYTES`] for one-value files such as git refs and cache keys).
//! [`read_regular_bytes`] also refuses anything but a regular file, for files the program
//! wrote itself, which are never devices or pipes. Every error is an `io::Error` of kind `InvalidData`, so callers keep naming
//! the file (and line) as they do for any read error.

use std::io::{BufRead, Read};
use std::path::Path;

/// The longest line a line-oriented file may hold (a corpus row, a question, a run line).
pub const MAX_LINE_BYTES: usize = 64 << 20;

/// The largest configuration or annotation file (TOML, JSON) read whole.
pub const MAX_SETTINGS_BYTES: u64 = 16 << 20;

/// The largest JSON file a stage writes beside its data (manifests, `results.json`,
/// `changes.json`, `filtering.json`) read whole.
pub const MAX_SIDE_FILE_BYTES: u64 = 256 << 20;

/// The largest one-value file read whole: a git `HEAD`, ref or `.git` link, a Hugging Face
/// cache's `refs/main`, a cache key. Each holds one line of well under a kilobyte.
pub const MAX_REF_BYTES: u64 = 64 << 10;

fn too_long(what: &str, limit: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{what} longer than {}", size(limit)),
    )
}

fn size(bytes: u64) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The lines of `reader`, like [`BufRead::lines`] (`\n` or `\r\n` removed), except that a line
/// longer than [`MAX_LINE_BYTES`] is an error and ends the iteration.
pub fn lines<R: BufRead>(reader: R) -> Lines<R> {
    Lines {
        reader,
        limit: MAX_LINE_BYTES,
        failed: false,
    }
}

/// The iterator of [`lines`].
pub struct Lines<R> {
    reader: R,
    limit: usize,
    failed: bool,
}

impl<R: BufRead> Iterator for Lines<R> {
    type Item = std::io::Result<String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let mut buf = Vec::new();
        let read = (&mut self.reader)
            .take(self.limit as u64 + 1)
            .read_until(b'\n', &mut buf);
        let result = match read {
            Ok(0) => return None,
            Ok(_) => {
                if buf.last() == Some(&b'\n') {
                    buf.pop();
                    if buf.last() == Some(&b'\r') {
                        buf.pop();
                    }
                }
                if buf.len() > self.limit {
                    Err(too_long("line", self.limit as u64))
                } else {
                    String::from_utf8(buf).map_err(|_| not_utf8())
                }
            }
            Err(e) => Err(e),
        };
        self.failed = result.is_err();
        Some(result)
    }
}

/// Reads the whole file at `path` as UTF-8 text of at most `limit` bytes.
pub fn read_text(path: &Path, limit: u64) -> std::io::Result<String> {
    let bytes = read_bytes(path, limit)?;
    String::from_utf8(bytes).map_err(|_| not_utf8())
}

/// Reads the whole file at `path`, at most `limit` bytes.
pub fn read_bytes(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let file = std::fs::File::open(path)?;
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0);
    if hint > limit {
        return Err(too_long("file", limit));
    }
    let mut bytes = Vec::with_capacity(hint as usize);
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(too_long("file", limit));
    }
    Ok(bytes)
}

/// [`read_bytes`] of a regular file only: a device, FIFO, socket or directory at `path` (or at
/// the end of its links) is refused before it is opened, so that a file the program wrote
/// itself (a cache, a key) linked to `/dev/zero` or to a FIFO is an error at once rather than a
/// read to the bound or an open that waits for a writer forever.
pub fn read_regular_bytes(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    read_bytes(path, limit)
}

/// [`read_regular_bytes`] as UTF-8 text.
pub fn read_regular_text(path: &Path, limit: u64) -> std::io::Result<String> {
    String::from_utf8(read_regular_bytes(path, limit)?).map_err(|_| not_utf8())
}

/// Reads the whole line-oriented file at `path` (of any size) as bytes, failing as soon as one
/// line grows past [`MAX_LINE_BYTES`], for readers that parse a file in memory (in parallel).
pub fn read_line_text(path: &Path) -> std::io::Result<Vec<u8>> {
    read_line_text_bounded(path, MAX_LINE_BYTES)
}

/// [`read_line_text`] as UTF-8 text.
pub fn read_line_string(path: &Path) -> std::io::Result<String> {
    String::from_utf8(read_line_text(path)?).map_err(|_| not_utf8())
}

fn not_utf8() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "stream did not contain valid UTF-8",
    )
}

fn read_line_text_bounded(path: &Path, limit: usize) -> std::io::Result<Vec<u8>> {
    let mut file = std::fs::File::open(path)?;
    let hint = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(hint as usize);
    let mut line_start = 0;
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let start = bytes.len();
        bytes.extend_from_slice(&chunk[..n]);
        if let Some(last) = bytes[start..].iter().rposition(|&b| b == b'\n') {
            line_start = start + last + 1;
        }
        if bytes.len() - line_start > limit {
            return Err(too_long("line", limit as u64));
        }
    }
    // A line ends at its newline; the bound is on what lies between two.
    let longest = bytes
        .split(|&b| b == b'\n')
        .map(<[u8]>::len)
        .max()
        .unwrap_or(0);
    if longest > limit {
        return Err(too_long("line", limit as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_strip_endings_like_std() {
        let text = "a\r\nb\n\nc";
        let ours: Vec<String> = lines(text.as_bytes()).map(Result::unwrap).collect();
        let std: Vec<String> = text.as_bytes().lines().map(Result::unwrap).collect();
        assert_eq!(ours, std);
    }

    #[test]
    fn a_long_line_is_an_error_that_ends_the_lines() {
        let text = format!("ok\n{}\nnext\n", "x".repeat(20));
        let mut it = Lines {
            reader: text.as_bytes(),
            limit: 10,
            failed: false,
        };
        assert_eq!(it.next().unwrap().unwrap(), "ok");
        let err = it.next().unwrap().unwrap_err();
        assert_eq!(err.to_string(), "line longer than 10 bytes");
        assert!(it.next().is_none());
    }

    #[test]
    fn dev_zero_is_refused_at_the_bound() {
        let zero = Path::new("/dev/zero");
        if !zero.exists() {
            return;
        }
        let err = read_text(zero, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("file longer than 1 MiB"), "{err}");
        let err = read_line_text_bounded(zero, 1 << 20).unwrap_err();
        assert!(err.to_string().contains("line longer than"), "{err}");
        let file = std::io::BufReader::new(std::fs::File::open(zero).unwrap());
        let mut it = Lines {
            reader: file,
            limit: 1 << 20,
            failed: false,
        };
        assert!(it.next().unwrap().is_err());
    }

    #[test]
    fn regular_reads_refuse_devices_fifos_and_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "abc\n").unwrap();
        assert_eq!(read_regular_text(&path, 4).unwrap(), "abc\n");
        assert!(read_regular_text(&path, 3).is_err());
        let err = read_regular_bytes(dir.path(), 1 << 20).unwrap_err();
        assert_eq!(err.to_string(), "not a regular file");
        #[cfg(unix)]
        {
            let zero = dir.path().join("zero");
            std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
            if Path::new("/dev/zero").exists() {
                let err = read_regular_bytes(&zero, 1 << 20).unwrap_err();
                assert_eq!(err.to_string(), "not a regular file");
            }
            // A FIFO without a writer: refused without opening it (an open would block).
            let fifo = dir.path().join("fifo");
            let made = std::process::Command::new("mkfifo").arg(&fifo).status();
            if made.is_ok_and(|s| s.success()) {
                let err = read_regular_bytes(&fifo, 1 << 20).unwrap_err();
                assert_eq!(err.to_string(), "not a regular file");
            }
        }
    }

    #[test]
    fn whole_file_reads_keep_text_under_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.txt");
        std::fs::write(&path, "one\ntwo\n").unwrap();
        assert_eq!(read_text(&path, 8).unwrap(), "one\ntwo\n");
        assert!(read_text(&path, 7).is_err());
        assert_eq!(read_line_text_bounded(&path, 3).unwrap(), b"one\ntwo\n");
        assert!(read_line_text_bounded(&path, 2).is_err());
    }
}
