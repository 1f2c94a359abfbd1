//! Opening a dump: compression detected from the first bytes (not the extension), decompressed
//! as a stream. 7z archives are read with `sevenz-rust2`, streaming the `Posts.xml` entry through
//! a callback (the archive format needs `Seek`, so the entry cannot be returned as a reader).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// Buffer size of the decompressed stream the XML parser reads from.
const READ_BUFFER_BYTES: usize = 1 << 20;
/// Compressed bytes reported to [`Progress`] at a time (keeps the callback cheap).
const PROGRESS_STEP_BYTES: u64 = 4 << 20;

/// How a dump file is compressed, detected from its magic bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain XML.
    Plain,
    /// gzip (`1f 8b`).
    Gzip,
    /// Zstandard (`28 b5 2f fd`).
    Zstd,
    /// A 7z archive (`37 7a bc af 27 1c`), as the Stack Exchange dumps are published.
    SevenZip,
}

impl Compression {
    /// The lowercase name used in summaries.
    pub fn name(self) -> &'static str {
        match self {
            Compression::Plain => "plain",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
            Compression::SevenZip => "7z",
        }
    }
}

/// Detects the compression of `path` from its first bytes. A missing file, an unreadable one, or
/// a format we cannot stream (bzip2, xz, zip, ...) is an error naming the file, so the caller
/// fails before doing any work.
pub fn detect_compression(path: &Path) -> Result<Compression> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 8];
    let mut filled = 0;
    while filled < magic.len() {
        let n = file
            .read(&mut magic[filled..])
            .map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    let head = &magic[..filled];
    let unsupported = |what: &str| {
        Err(Error::invalid(
            Setting::Posts,
            format!(
                "{}: {what} compression is not supported; decompress it first \
                 (supported: plain XML, .gz, .zst, .7z)",
                path.display()
            ),
        ))
    };
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Compression::Gzip)
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Ok(Compression::Zstd)
    } else if head.starts_with(&[0x37, 0x7a, 0xbc, 0xaf, 0x27, 0x1c]) {
        Ok(Compression::SevenZip)
    } else if head.starts_with(b"BZh") {
        unsupported("bzip2")
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        unsupported("xz")
    } else if head.starts_with(b"PK\x03\x04") {
        unsupported("zip")
    } else {
        // Plain XML: optional UTF-8 BOM, optional whitespace, then '<'.
        let text = head.strip_prefix(&[0xef, 0xbb, 0xbf]).unwrap_or(head);
        match text.iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'<') => Ok(Compression::Plain),
            None if filled < magic.len() => Err(Error::invalid(
                Setting::Posts,
                format!("{}: the file is empty, not an XML dump", path.display()),
            )),
            _ => unsupported("unknown (not XML, gzip, zstd or 7z)"),
        }
    }
}

/// Counts the compressed bytes read for progress reporting.
struct ProgressReader<'p, R> {
    inner: R,
    progress: &'p dyn Progress,
    unreported: u64,
}

impl<'p, R> ProgressReader<'p, R> {
    fn new(inner: R, progress: &'p dyn Progress) -> Self {
        Self {
            inner,
            progress,
            unreported: 0,
        }
    }
}

impl<R: Read> Read for ProgressReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.unreported += n as u64;
        if self.unreported >= PROGRESS_STEP_BYTES {
            self.progress.advance(self.unreported);
            self.unreported = 0;
        }
        Ok(n)
    }
}

impl<R: Seek> Seek for ProgressReader<'_, R> {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.inner.seek(pos)
    }
}

impl<R> Drop for ProgressReader<'_, R> {
    fn drop(&mut self) {
        if self.unreported > 0 {
            self.progress.advance(self.unreported);
        }
    }
}

/// Opens `path` (any supported compression), and calls `read` once with the decompressed XML as
/// a buffered stream. Progress counts compressed bytes against the file size.
pub fn with_posts_reader<T>(
    path: &Path,
    progress: &dyn Progress,
    read: impl FnOnce(&mut dyn BufRead) -> Result<T>,
) -> Result<T> {
    let compression = detect_compression(path)?;
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let source = ProgressReader::new(file, progress);
    match compression {
        Compression::Plain => read(&mut BufReader::with_capacity(READ_BUFFER_BYTES, source)),
        Compression::Gzip => {
            // MultiGzDecoder: `cat a.gz b.gz` (and pigz/bgzip output) is one valid stream.
            let decoder = flate2::read::MultiGzDecoder::new(BufReader::new(source));
            read(&mut BufReader::with_capacity(READ_BUFFER_BYTES, decoder))
        }
        Compression::Zstd => {
            let decoder =
                zstd::stream::read::Decoder::new(source).map_err(|e| Error::io(path, e))?;
            read(&mut BufReader::with_capacity(READ_BUFFER_BYTES, decoder))
        }
        Compression::SevenZip => read_seven_zip(path, source, read),
    }
}

/// Streams the `Posts.xml` entry of a 7z archive (or its only file) through `read`.
fn read_seven_zip<T, R: Read + Seek>(
    path: &Path,
    source: R,
    read: impl FnOnce(&mut dyn BufRead) -> Result<T>,
) -> Result<T> {
    let archive_error = |e: sevenz_rust2::Error| {
        Error::invalid(
            Setting::Posts,
            format!(
                "{}: cannot read the 7z archive ({e}); extract Posts.xml with `7z x` and pass it \
                 (or recompress it with zstd)",
                path.display()
            ),
        )
    };
    let mut archive = sevenz_rust2::ArchiveReader::new(source, sevenz_rust2::Password::empty())
        .map_err(archive_error)?;
    // One decoding thread: the parser is the bottleneck, and output must not depend on threads.
    archive.set_thread_count(1);
    let files: Vec<&str> = archive
        .archive()
        .files
        .iter()
        .filter(|f| f.has_stream && !f.is_directory)
        .map(|f| f.name.as_str())
        .collect();
    let wanted = files
        .iter()
        .find(|name| {
            let base = name.rsplit(['/', '\\']).next().unwrap_or(name);
            base.eq_ignore_ascii_case("posts.xml")
        })
        .or(if files.len() == 1 {
            files.first()
        } else {
            None
        })
        .map(|name| name.to_string())
        .ok_or_else(|| {
            Error::invalid(
                Setting::Posts,
                format!(
                    "{}: the 7z archive has no Posts.xml (entries: {})",
                    path.display(),
                    files.join(", ")
                ),
            )
        })?;
    let mut read = Some(read);
    let mut outcome: Option<Result<T>> = None;
    let walked = archive.for_each_entries_with_decision(|entry, reader| {
        if entry.name != wanted {
            return Ok(sevenz_rust2::EntryDecision::Continue);
        }
        if let Some(read) = read.take() {
            let mut buffered = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
            outcome = Some(read(&mut buffered));
        }
        Ok(sevenz_rust2::EntryDecision::Stop)
    });
    match (outcome, walked) {
        // The parser's own error first: it names the byte offset.
        (Some(Err(e)), _) => Err(e),
        (_, Err(e)) => Err(archive_error(e)),
        (Some(Ok(value)), Ok(())) => Ok(value),
        (None, Ok(())) => Err(Error::invalid(
            Setting::Posts,
            format!(
                "{}: the 7z archive entry {wanted} was not found",
                path.display()
            ),
        )),
    }
}

/// The 1-based line of byte `offset` in the decompressed stream of `path`: read again on the
/// error path only, so the happy path does not pay for counting lines.
pub fn line_at(path: &Path, offset: u64) -> Result<u64> {
    with_posts_reader(path, &crate::progress::NoProgress, |reader| {
        let mut remaining = offset;
        let mut newlines = 0u64;
        while remaining > 0 {
            let buf = match reader.fill_buf() {
                Ok(buf) => buf,
                // The data before the failure point is what matters; stop at the failure.
                Err(_) => break,
            };
            if buf.is_empty() {
                break;
            }
            let take = buf
                .len()
                .min(usize::try_from(remaining).unwrap_or(usize::MAX));
            newlines += count_byte(b'\n', &buf[..take]);
            reader.consume(take);
            remaining -= take as u64;
        }
        Ok(newlines + 1)
    })
}

fn count_byte(needle: u8, haystack: &[u8]) -> u64 {
    haystack.iter().filter(|&&b| b == needle).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn detects_by_magic_not_extension() {
        let dir = tempfile::tempdir().unwrap();
        let xml = dir.path().join("posts.gz"); // plain XML with a misleading name
        std::fs::write(&xml, "\u{feff}  <?xml version=\"1.0\"?><posts/>").unwrap();
        assert_eq!(detect_compression(&xml).unwrap(), Compression::Plain);

        let gz = dir.path().join("posts.xml");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"<posts/>").unwrap();
        std::fs::write(&gz, enc.finish().unwrap()).unwrap();
        assert_eq!(detect_compression(&gz).unwrap(), Compression::Gzip);

        let bz = dir.path().join("posts.bz2");
        std::fs::write(&bz, b"BZh91AY&SY").unwrap();
        let err = detect_compression(&bz).unwrap_err().to_string();
        assert!(err.contains("bzip2") && err.contains("posts.bz2"), "{err}");

        let missing = detect_compression(&dir.path().join("nope.xml"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("nope.xml"), "{missing}");

        let empty = dir.path().join("empty.xml");
        std::fs::write(&empty, b"").unwrap();
        assert!(detect_compression(&empty).is_err());
    }
}
