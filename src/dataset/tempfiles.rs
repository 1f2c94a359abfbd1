//! The temporaries freshstack creates beside its outputs — an atomic write's `.OUT.XXXXXX.tmp`,
//! an index build's `.freshstack-index.XXXXXX/` — removed when the process is interrupted
//! (SIGINT, SIGTERM, SIGHUP: see [`remove_temporaries_on_signals`]), and, when a process died
//! harder (SIGKILL, a crash, a power cut), by the next run that writes beside them.
//!
//! Whether a temporary still has an owner is told by a lock, not by a pid in its name: the owner
//! holds an exclusive `flock` on the file (or directory) for as long as it exists, and the kernel
//! drops the lock when the owner dies, however it dies. Unlike a pid, that survives pid reuse and
//! pid namespaces (two containers sharing a directory). A temporary is taken for stale only when
//! its lock is free and it is older than [`STALE_AFTER`] (a live owner takes its lock a few
//! microseconds after creating it), and only names of our own shape are considered
//! (`.NAME.` + six random alphanumerics + `.tmp`, `.freshstack-index.` + six), so a user's file
//! is never touched.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};

/// A temporary whose lock is free is left alone until it is this old (see the module docs).
pub const STALE_AFTER: Duration = Duration::from_secs(60);

/// The random part of a temporary's name (tempfile's default length).
const RANDOM_CHARS: usize = 6;

/// Prefix of an index build's (or refresh's) staging directory.
pub(crate) const STAGING_PREFIX: &str = ".freshstack-index.";

/// The temporaries this process owns now, by registration number; the signal thread removes
/// them. Holding the lock also keeps the signal thread waiting, which [`critical`] uses.
static LIVE: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    paths: BTreeMap::new(),
});

struct Registry {
    next: u64,
    paths: BTreeMap<u64, PathBuf>,
}

fn live() -> MutexGuard<'static, Registry> {
    // A panic while holding the lock leaves a consistent map: keep using it.
    LIVE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A temporary's entry in the registry; dropping it (after the temporary was renamed into place
/// or deleted) takes it out.
#[derive(Debug)]
pub(crate) struct Registration(u64);

impl Registration {
    /// Creates a temporary with `create` and registers the path `path_of` names, both under
    /// the registry's lock: a signal landing between the two would otherwise find the
    /// temporary on disk but not in the registry, and leave it behind.
    pub(crate) fn create<T, E>(
        create: impl FnOnce() -> std::result::Result<T, E>,
        path_of: impl FnOnce(&T) -> &Path,
    ) -> std::result::Result<(T, Self), E> {
        let mut live = live();
        let made = create()?;
        let id = live.next;
        live.next += 1;
        live.paths.insert(id, path_of(&made).to_path_buf());
        Ok((made, Registration(id)))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        live().paths.remove(&self.0);
    }
}

/// Runs `f` (a rename that puts a temporary in place, or the pair of renames that swap an index)
/// with the signal thread held off, so an interrupt never lands between the two renames of a
/// swap. `f` must not create or drop a [`Registration`].
pub(crate) fn critical<T>(f: impl FnOnce() -> T) -> T {
    let _held = live();
    f()
}

/// Removes this process's temporaries on SIGINT, SIGTERM or SIGHUP, then ends the process by
/// that same signal (default action), so a shell reports it as killed by it (130 for Ctrl-C).
/// Call once, early in `main`; it starts one thread that waits for the signals.
pub fn remove_temporaries_on_signals() -> std::io::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                // Held until exit: no rename starts or finishes half-way from here on.
                let live = live();
                for path in live.paths.values() {
                    remove_path(path);
                }
                // Die of the signal itself, so a shell or parent sees "killed by SIGINT" (bash
                // stops a loop on that, not on exit status 130).
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                std::process::exit(128 + signal);
            }
        })?;
    Ok(())
}

fn remove_path(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => {
            // The stage's other threads (tantivy's writers) go on creating files while this
            // runs, so one pass can fail on a directory that filled up again: try again, for
            // up to a few seconds on a machine whose cores those threads keep busy.
            let started = std::time::Instant::now();
            while std::fs::remove_dir_all(path).is_err()
                && path.exists()
                && started.elapsed() < Duration::from_secs(5)
            {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// Takes `file`'s exclusive lock without waiting: `Ok(false)` when another open file holds it.
fn try_lock(file: &File) -> std::io::Result<bool> {
    // SAFETY: flock on a file descriptor we own; no memory is passed.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(err)
    }
}

/// True when `name` is `prefix`, six random alphanumerics, then `suffix`: our temporaries' shape.
fn is_ours(name: &str, prefix: &str, suffix: &str) -> bool {
    name.len() == prefix.len() + RANDOM_CHARS + suffix.len()
        && name.starts_with(prefix)
        && name.ends_with(suffix)
        && name[prefix.len()..prefix.len() + RANDOM_CHARS]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric())
}

/// Removes the temporaries named `prefix` + random + `suffix` in `dir` that no live process owns
/// (see the module docs); returns how many. Best effort: what cannot be read or removed is
/// skipped, since it only costs disk space.
pub(crate) fn remove_stale(dir: &Path, prefix: &str, suffix: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_ours(name, prefix, suffix) {
            continue;
        }
        let path = entry.path();
        // Never follow a link: only our own files and directories are candidates.
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !(meta.is_file() || meta.is_dir()) {
            continue;
        }
        let young = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_none_or(|age| age < STALE_AFTER);
        if young {
            continue;
        }
        let Ok(file) = File::open(&path) else {
            continue;
        };
        // Held while removing, so a second cleaner waits and then finds nothing.
        if !matches!(try_lock(&file), Ok(true)) {
            continue;
        }
        let gone = if meta.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if gone.is_ok() {
            tracing::info!("removed {}, left by an interrupted run", path.display());
            removed += 1;
        }
    }
    removed
}

/// A temporary file beside an output, locked and registered (see the module docs).
pub(crate) struct TempFile {
    /// The file; its descriptor holds the lock until it is closed.
    pub(crate) file: tempfile::NamedTempFile,
    pub(crate) registration: Registration,
}

/// Creates `.NAME.XXXXXX.tmp` in `dir` for the output `name`, with mode `0o666` so that the
/// kernel applies the umask, after removing stale ones of the same name.
pub(crate) fn temp_file_for(dir: &Path, name: &str) -> Result<TempFile> {
    let prefix = format!(".{name}.");
    remove_stale(dir, &prefix, ".tmp");
    let (file, registration) = Registration::create(
        || {
            tempfile::Builder::new()
                .prefix(&prefix)
                .suffix(".tmp")
                .rand_bytes(RANDOM_CHARS)
                .permissions(std::fs::Permissions::from_mode(0o666))
                .tempfile_in(dir)
                .map_err(|e| Error::io(dir, e))
        },
        |file| file.path(),
    )?;
    try_lock(file.as_file()).map_err(|e| Error::io(file.path(), e))?;
    Ok(TempFile { file, registration })
}

/// Creates the directory `path` (fine when it is one already) inside a staging directory,
/// whose parent must exist: unlike `create_dir_all` it never recreates a staging directory the
/// signal thread has just removed, which the process would then leave behind as it dies.
pub(crate) fn create_dir_inside(path: &Path) -> Result<()> {
    match std::fs::create_dir(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && path.is_dir() => Ok(()),
        Err(e) => Err(Error::io(path, e)),
    }
}

/// An index's staging directory, `.freshstack-index.XXXXXX/` beside it: locked and registered
/// (see the module docs), deleted when dropped unless installed.
pub(crate) struct StagingDir {
    pub(crate) dir: tempfile::TempDir,
    /// Holds the lock until the directory is installed or deleted.
    pub(crate) lock: File,
    pub(crate) registration: Registration,
}

impl StagingDir {
    /// Creates the staging directory in `parent` (mode `0o777` less the umask, as `create_dir`
    /// gives), after removing stale ones there.
    pub(crate) fn create(parent: &Path) -> Result<Self> {
        remove_stale(parent, STAGING_PREFIX, "");
        let (dir, registration) = Registration::create(
            || {
                tempfile::Builder::new()
                    .prefix(STAGING_PREFIX)
                    .rand_bytes(RANDOM_CHARS)
                    .permissions(std::fs::Permissions::from_mode(0o777))
                    .tempdir_in(parent)
                    .map_err(|e| Error::io(parent, e))
            },
            |dir| dir.path(),
        )?;
        let lock = File::open(dir.path()).map_err(|e| Error::io(dir.path(), e))?;
        try_lock(&lock).map_err(|e| Error::io(dir.path(), e))?;
        Ok(Self {
            dir,
            lock,
            registration,
        })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// One run's exclusive claim on an output it writes in several steps (a build directory, an
/// index): an `flock` on a lock file, held while the value lives and dropped by the kernel
/// however the run ends. A second run on the same output fails at once instead of racing the
/// first (both making every LLM call, one failing midway on a file the other moved). The lock
/// file stays (removing it would race a third run opening it).
#[derive(Debug)]
pub struct OutputLock {
    _file: File,
}

impl OutputLock {
    /// Takes the lock at `lock_path` for the output `what` (named in the error when another
    /// run holds it); creates the file when missing.
    pub fn acquire(lock_path: &Path, what: &Path) -> Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(lock_path)
            .map_err(|e| Error::io(lock_path, e))?;
        match try_lock(&file) {
            Ok(true) => Ok(Self { _file: file }),
            Ok(false) => Err(Error::Busy {
                output: what.to_path_buf(),
                lock: lock_path.to_path_buf(),
            }),
            Err(e) => Err(Error::io(lock_path, e)),
        }
    }

    /// The lock beside the directory `dir` (`.NAME.lock` in its parent), for outputs that are
    /// replaced whole, such as an index.
    pub fn beside(dir: &Path) -> Result<Self> {
        let name = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "output".into());
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Self::acquire(&parent.join(format!(".{name}.lock")), dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn age(path: &Path) {
        let old = SystemTime::now() - 2 * STALE_AFTER;
        File::open(path).unwrap().set_modified(old).unwrap();
    }

    #[test]
    fn only_unlocked_old_temporaries_of_our_shape_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let stale = d.join(".out.jsonl.Ab12Cd.tmp");
        let young = d.join(".out.jsonl.Yy12Yy.tmp");
        let locked = d.join(".out.jsonl.Lk12Lk.tmp");
        let user = d.join(".out.jsonl.bak.tmp");
        let other = d.join(".other.jsonl.Ab12Cd.tmp");
        for p in [&stale, &young, &locked, &user, &other] {
            std::fs::write(p, b"x").unwrap();
        }
        for p in [&stale, &locked, &user, &other] {
            age(p);
        }
        let holder = File::open(&locked).unwrap();
        assert!(try_lock(&holder).unwrap());
        assert_eq!(remove_stale(d, ".out.jsonl.", ".tmp"), 1);
        assert!(!stale.exists());
        for p in [&young, &locked, &user, &other] {
            assert!(p.exists(), "{}", p.display());
        }
        drop(holder);
        assert_eq!(remove_stale(d, ".out.jsonl.", ".tmp"), 1);
        assert!(!locked.exists());

        // A staging directory, with files in it.
        let staging = d.join(".freshstack-index.Zz99Zz");
        std::fs::create_dir(&staging).unwrap();
        std::fs::write(staging.join("ids.txt"), b"a\n").unwrap();
        age(&staging);
        let live = StagingDir::create(d).unwrap();
        assert!(!staging.exists());
        assert!(live.path().exists());
        // Our own live staging directory is locked: never stale, however old.
        age(live.path());
        assert_eq!(remove_stale(d, STAGING_PREFIX, ""), 0);
    }

    #[test]
    fn registration_lasts_as_long_as_the_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let t = temp_file_for(dir.path(), "x.json").unwrap();
        let path = t.file.path().to_path_buf();
        assert!(live().paths.values().any(|p| p == &path));
        drop(t);
        assert!(!live().paths.values().any(|p| p == &path));
        assert!(!path.exists());
    }

    #[test]
    fn a_second_run_on_a_locked_output_fails_at_once_and_the_lock_ends_with_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("index");
        let first = OutputLock::beside(&out).unwrap();
        let err = OutputLock::beside(&out).unwrap_err().to_string();
        assert!(err.contains("another freshstack run is writing"), "{err}");
        assert!(err.contains(".index.lock"), "{err}");
        drop(first);
        OutputLock::beside(&out).unwrap();
    }
}
