//! Writing an output file so that a failed or interrupted stage never leaves half of it under the
//! final name, without clobbering what the name points at.
//!
//! The target decides how: a regular file (or a name not there yet) is replaced by renaming a
//! temporary file next to it; a symbolic link is followed, and the regular file it points to is
//! replaced in the same way (the link stays a link); anything else (a FIFO, a character device
//! such as `/dev/null`) is opened and written in place, since renaming over it would turn it into
//! a regular file for every other user of the name. A new file gets the mode the umask allows
//! (`0o666 & !umask`, as `File::create` would); a replaced file keeps its permission bits.

use std::fs::{File, Metadata, Permissions};
use std::io::{BufWriter, Stdout, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::tempfiles::{self, TempFile};
use crate::error::{Error, Result, Setting};

/// How many symbolic links [`resolve_links`] follows before giving up (Linux's own limit).
const MAX_LINKS: usize = 40;

/// A buffered writer for an output file; see the module docs for how each kind of target is
/// written. [`AtomicWriter::commit`] puts the output in place; dropped without it, a temporary
/// file is deleted, so the previous output (or nothing) stays under the final name. A target that
/// is written in place (a FIFO, a device, standard output) is a stream: what was written before
/// a failure has been written.
pub struct AtomicWriter {
    path: PathBuf,
    inner: BufWriter<Sink>,
}

/// Where the bytes go.
enum Sink {
    /// A temporary file, renamed onto `target` at commit, with `mode` set first when given.
    Replace {
        tmp: TempFile,
        target: PathBuf,
        mode: Option<Permissions>,
    },
    /// A target that is not a regular file, opened on the first write (or at commit), so that
    /// an early check that the output can be created does not open a FIFO (which would block
    /// until a reader comes, and then hand it an empty stream).
    InPlace { target: PathBuf, file: Option<File> },
    /// Standard output, for `-` where the caller allows it.
    Stdout(Stdout),
}

impl Sink {
    fn in_place_file<'a>(
        target: &Path,
        file: &'a mut Option<File>,
    ) -> std::io::Result<&'a mut File> {
        let opened = match file.take() {
            Some(f) => f,
            None => std::fs::OpenOptions::new().write(true).open(target)?,
        };
        Ok(file.insert(opened))
    }
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Replace { tmp, .. } => tmp.file.write(buf),
            Sink::InPlace { target, file } => Self::in_place_file(target, file)?.write(buf),
            Sink::Stdout(out) => out.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Replace { tmp, .. } => tmp.file.flush(),
            Sink::InPlace { file, .. } => file.as_mut().map_or(Ok(()), |f| f.flush()),
            Sink::Stdout(out) => out.flush(),
        }
    }
}

impl AtomicWriter {
    /// Opens a writer for `path`: for a regular file or a new name, a temporary file in the
    /// directory of the file (the directory is created if missing); see the module docs for
    /// symbolic links and other targets. A directory is an error.
    pub fn create(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let target = resolve_links(&path).map_err(|e| Error::io(&path, e))?;
        let sink = match std::fs::metadata(&target) {
            Ok(meta) if meta.is_dir() => {
                return Err(Error::io(
                    &path,
                    std::io::Error::from_raw_os_error(libc::EISDIR),
                ));
            }
            Ok(meta) if !meta.is_file() && !is_socket(&meta) => {
                Sink::InPlace { target, file: None }
            }
            Ok(meta) => replace(target, Some(meta.permissions()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => replace(target, None)?,
            Err(e) => return Err(Error::io(&path, e)),
        };
        Ok(Self {
            path,
            inner: BufWriter::with_capacity(1 << 20, sink),
        })
    }

    /// [`AtomicWriter::create`], except that `-` is standard output, for commands whose output is
    /// one stream.
    pub fn create_or_stdout(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path == Path::new("-") {
            return Ok(Self {
                path: path.to_path_buf(),
                inner: BufWriter::with_capacity(1 << 20, Sink::Stdout(std::io::stdout())),
            });
        }
        Self::create(path)
    }

    /// The path given to [`AtomicWriter::create`] (what messages name).
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

    /// Flushes the output and puts it in place: a temporary file is synced and renamed onto its
    /// target; a target written in place is opened now if nothing was written, so a reader of a
    /// FIFO sees the (empty) output end.
    pub fn commit(self) -> Result<()> {
        let path = self.path;
        let sink = self
            .inner
            .into_inner()
            .map_err(|e| Error::io(&path, e.into_error()))?;
        match sink {
            Sink::Replace { tmp, target, mode } => {
                let TempFile { file, registration } = tmp;
                if let Some(mode) = mode {
                    file.as_file()
                        .set_permissions(mode)
                        .map_err(|e| Error::io(&path, e))?;
                }
                file.as_file().sync_all().map_err(|e| Error::io(&path, e))?;
                // Out of the signal thread's way: it removes the temporary or finds it renamed.
                tempfiles::critical(|| file.persist(&target))
                    .map_err(|e| Error::io(&path, e.error))?;
                drop(registration);
            }
            Sink::InPlace { target, mut file } => {
                Sink::in_place_file(&target, &mut file)
                    .and_then(|f| f.flush())
                    .map_err(|e| Error::io(&path, e))?;
            }
            Sink::Stdout(mut out) => out.flush().map_err(|e| Error::io(&path, e))?,
        }
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

/// A socket cannot be opened for writing; it is replaced like a regular file (as before).
fn is_socket(meta: &Metadata) -> bool {
    meta.file_type().is_socket()
}

/// A temporary file next to `target`, created with `0o666` so that the kernel applies the
/// umask (tempfile's default is `0o600`), locked and registered for removal on a signal, stale
/// ones of the same output removed first ([`tempfiles`]); `mode` is the replaced file's, to keep.
fn replace(target: PathBuf, mode: Option<Permissions>) -> Result<Sink> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = tempfiles::temp_file_for(&dir, &name)?;
    let mode = mode.map(|m| Permissions::from_mode(m.mode() & 0o7777));
    Ok(Sink::Replace { tmp, target, mode })
}

/// Follows `path` through symbolic links (relative ones from the link's directory) to a name
/// that is not a link, which may not exist yet (a dangling link's target is created).
fn resolve_links(path: &Path) -> std::io::Result<PathBuf> {
    let mut path = path.to_path_buf();
    for _ in 0..MAX_LINKS {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = std::fs::read_link(&path)?;
                let next = match path.parent() {
                    Some(dir) => dir.join(link),
                    None => link,
                };
                // A kernel "magic" link (`/proc/self/fd/1` -> `pipe:[N]`) names no path, yet
                // opens: the link itself is the target.
                let dangling = matches!(std::fs::symlink_metadata(&next),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound);
                if dangling && std::fs::metadata(&path).is_ok() {
                    return Ok(path);
                }
                path = next;
            }
            _ => return Ok(path),
        }
    }
    Err(std::io::Error::from_raw_os_error(libc::ELOOP))
}

/// Whether `path` (links followed) names a stream that is written in place rather than a file
/// (a FIFO, a pipe, a character device such as `/dev/null`): outputs beside it (an `.ids`
/// sidecar, a journal) have no place to go.
pub fn is_stream_target(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir() && !is_socket(&m))
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub fn write_json_atomic<T: Serialize>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    AtomicWriter::json(path, value)?.commit()
}

impl AtomicWriter {
    /// A writer for `path` holding `value` as pretty JSON, not yet committed: a command that
    /// writes several files prepares them all, then commits, so that a failure before the
    /// commits changes none of them.
    pub fn json<T: Serialize>(path: impl AsRef<Path>, value: &T) -> Result<Self> {
        let mut writer = AtomicWriter::create(path)?;
        let path = writer.path().to_path_buf();
        serde_json::to_writer_pretty(&mut writer, value).map_err(|e| Error::Json {
            path: path.clone(),
            source: e,
        })?;
        writer.write_all(b"\n").map_err(|e| Error::io(&path, e))?;
        Ok(writer)
    }
}

/// Where the output `out` will be, links and `..` resolved: the path itself when it exists,
/// else its resolved parent directory joined with its name; `None` when neither resolves.
pub fn resolve_output_path(out: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(out).ok().or_else(|| {
        let parent = out.parent().filter(|p| !p.as_os_str().is_empty());
        let parent = std::fs::canonicalize(parent.unwrap_or(Path::new("."))).ok()?;
        Some(parent.join(out.file_name()?))
    })
}

/// Refuses an output that would destroy or feed an input: `out` (a file or an output
/// directory) naming the same file or directory as one of `inputs` (through any path or link),
/// or lying inside an input that is a directory (the stage would read its own output back).
/// `what` names the output setting in the error (`--out`). Inputs that do not exist are ignored
/// (their readers report them); `-` (standard output) and outputs that are neither regular
/// files, directories nor new names (a FIFO, `/dev/null`) are never inputs.
pub fn check_output_is_not_an_input(what: Setting, out: &Path, inputs: &[&Path]) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if out.as_os_str() == "-" {
        return Ok(());
    }
    let out_meta = std::fs::metadata(out).ok();
    if out_meta
        .as_ref()
        .is_some_and(|m| !m.is_file() && !m.is_dir())
    {
        return Ok(());
    }
    let resolved_out = resolve_output_path(out);
    for input in inputs {
        let Ok(in_meta) = std::fs::metadata(input) else {
            continue;
        };
        let same_file = out_meta
            .as_ref()
            .is_some_and(|o| o.dev() == in_meta.dev() && o.ino() == in_meta.ino());
        let inside = in_meta.is_dir()
            && match (&resolved_out, std::fs::canonicalize(input)) {
                (Some(out), Ok(dir)) => out.starts_with(&dir),
                _ => false,
            };
        if same_file || inside {
            return Err(Error::invalid(
                what,
                format!(
                    "{} is {} {}, which this command reads: writing it would {}",
                    out.display(),
                    if same_file {
                        "the input"
                    } else {
                        "inside the input"
                    },
                    input.display(),
                    if same_file {
                        "destroy the input"
                    } else {
                        "feed the output back into the input"
                    }
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::read_jsonl;

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
    fn atomic_out_follows_a_symlink_and_replaces_its_target() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        let real = dir.path().join("real/out.txt");
        std::fs::write(&real, "old").unwrap();
        std::fs::set_permissions(&real, Permissions::from_mode(0o640)).unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink("real/out.txt", &link).unwrap();

        let mut w = AtomicWriter::create(&link).unwrap();
        w.write_all(b"new").unwrap();
        w.commit().unwrap();

        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&real).unwrap(), "new");
        let mode = std::fs::metadata(&real).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o640, "the replaced file keeps its mode");
        // The temporary file was made next to the target, and is gone.
        assert_eq!(
            std::fs::read_dir(dir.path().join("real")).unwrap().count(),
            1
        );
    }

    #[test]
    fn atomic_out_through_a_dangling_symlink_creates_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link.txt");
        std::os::unix::fs::symlink("made.txt", &link).unwrap();
        let mut w = AtomicWriter::create(&link).unwrap();
        w.write_all(b"x").unwrap();
        w.commit().unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(
            std::fs::read_to_string(dir.path().join("made.txt")).unwrap(),
            "x"
        );
    }

    #[test]
    fn atomic_out_symlink_loop_is_an_error_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        std::os::unix::fs::symlink("b", &a).unwrap();
        std::os::unix::fs::symlink("a", dir.path().join("b")).unwrap();
        let err = AtomicWriter::create(&a).err().unwrap().to_string();
        assert!(err.contains(&*a.to_string_lossy()), "{err}");
    }

    #[test]
    fn atomic_out_writes_through_to_a_character_device() {
        let null = Path::new("/dev/null");
        if !std::fs::metadata(null).is_ok_and(|m| m.file_type().is_char_device()) {
            eprintln!("skipped: no /dev/null character device here");
            return;
        }
        // Writing to /dev/null in place is harmless; a rename over it would fail without root
        // (or, as root, break it for the machine), so success means it was written in place.
        let mut w = AtomicWriter::create(null).unwrap();
        w.write_all(b"discarded").unwrap();
        w.commit().unwrap();
        assert!(
            std::fs::metadata(null)
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }

    #[test]
    fn atomic_out_into_a_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = AtomicWriter::create(dir.path()).err().unwrap().to_string();
        assert!(err.contains("directory"), "{err}");
    }

    #[test]
    fn an_output_may_not_be_an_input_nor_inside_one() {
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.jsonl");
        std::fs::write(&input, "x\n").unwrap();
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&input, &link).unwrap();
        let sub = dir.path().join("checkout");
        std::fs::create_dir(&sub).unwrap();
        let check = |out: &Path, inputs: &[&Path]| {
            check_output_is_not_an_input(Setting::OutFlag, out, inputs)
        };
        for (out, inputs) in [
            (input.clone(), vec![input.as_path()]),
            (link.clone(), vec![input.as_path()]),
            (dir.path().join("./in.jsonl"), vec![link.as_path()]),
            (sub.join("corpus.jsonl"), vec![sub.as_path()]),
            (sub.join("corpus.jsonl"), vec![dir.path()]),
        ] {
            let err = check(&out, &inputs).unwrap_err().to_string();
            assert!(err.starts_with("invalid --out: "), "{err}");
        }
        let other = dir.path().join("out.jsonl");
        assert!(check(&other, &[input.as_path(), sub.as_path()]).is_ok());
        assert!(check(Path::new("-"), &[input.as_path()]).is_ok());
        assert!(check(Path::new("/dev/null"), &[Path::new("/dev/null")]).is_ok());
        assert_eq!(std::fs::read(&input).unwrap(), b"x\n");
    }
}
