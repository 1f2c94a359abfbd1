//! Walking a local checkout: which files become documents, which are skipped and why, and the
//! commit the checkout is at (read from `.git` without running git).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::dataset::bounded;
use crate::error::{Error, Result, Setting};

/// A repository to collect: its GitHub name (`owner/name`) and the local checkout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepoSpec {
    /// `owner/name`, used in document ids and URLs.
    pub name: String,
    /// The checkout's root directory.
    pub path: PathBuf,
}

impl RepoSpec {
    /// Fails unless the checkout path is an existing directory.
    pub fn check(&self) -> Result<()> {
        let meta = fs::metadata(&self.path).map_err(|e| Error::io(&self.path, e))?;
        if !meta.is_dir() {
            return Err(Error::invalid(
                Setting::Repository,
                format!("{} is not a directory", self.path.display()),
            ));
        }
        Ok(())
    }
}

impl std::str::FromStr for RepoSpec {
    type Err = Error;

    /// Parses `OWNER/NAME=PATH` and checks that PATH is a directory.
    fn from_str(spec: &str) -> Result<Self> {
        let (name, path) = spec.split_once('=').ok_or_else(|| {
            Error::invalid(
                Setting::Repository,
                format!("`{spec}` is not OWNER/NAME=PATH"),
            )
        })?;
        let name = name.trim().trim_matches('/');
        // One rule: two parts of GitHub's characters, neither `.` nor `..` (the name is a path
        // prefix of every document id and part of every URL).
        let valid_name = name.split('/').count() == 2
            && name.split('/').all(|part| {
                !part.is_empty()
                    && part != "."
                    && part != ".."
                    && part
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            });
        if !valid_name {
            return Err(Error::invalid(
                Setting::Repository,
                format!(
                    "`{name}` is not a GitHub OWNER/NAME (two non-empty parts, neither `.` nor \
                     `..`)"
                ),
            ));
        }
        if path.is_empty() {
            return Err(Error::invalid(
                Setting::Repository,
                format!("`{spec}`: PATH after `=` is empty"),
            ));
        }
        let spec = RepoSpec {
            name: name.to_string(),
            path: PathBuf::from(path),
        };
        spec.check()?;
        Ok(spec)
    }
}

/// Why a file was not turned into documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A symbolic link (never followed).
    Symlink,
    /// A hidden file or directory (name starting with `.`), `.git` included.
    Hidden,
    /// An extension that is never text: images, video, audio, archives, fonts, weights, binaries.
    BinaryExtension,
    /// A dependency lock file (`Cargo.lock`, `package-lock.json`, ...).
    LockFile,
    /// A minified bundle (`*.min.js`, or JS/CSS with very long lines).
    Minified,
    /// Larger than the size cap.
    TooLarge,
    /// Contains NUL bytes.
    Binary,
    /// Not valid UTF-8.
    NotUtf8,
    /// Empty or whitespace only.
    Empty,
    /// Could not be read (permissions, vanished, I/O error).
    Unreadable,
    /// A notebook whose JSON could not be parsed.
    BadNotebook,
    /// Not a regular file: a FIFO, socket or device (reading one could block or never end).
    SpecialFile,
    /// A path with a line break, which no id list or run file can hold as a document id.
    LineBreakInName,
}

impl SkipReason {
    /// Every reason, in report order.
    pub const ALL: [SkipReason; 13] = [
        SkipReason::Symlink,
        SkipReason::Hidden,
        SkipReason::BinaryExtension,
        SkipReason::LockFile,
        SkipReason::Minified,
        SkipReason::TooLarge,
        SkipReason::Binary,
        SkipReason::NotUtf8,
        SkipReason::Empty,
        SkipReason::Unreadable,
        SkipReason::BadNotebook,
        SkipReason::SpecialFile,
        SkipReason::LineBreakInName,
    ];

    /// The snake_case name used in summaries.
    pub fn name(self) -> &'static str {
        match self {
            SkipReason::Symlink => "symlink",
            SkipReason::Hidden => "hidden",
            SkipReason::BinaryExtension => "binary_extension",
            SkipReason::LockFile => "lock_file",
            SkipReason::Minified => "minified",
            SkipReason::TooLarge => "too_large",
            SkipReason::Binary => "binary",
            SkipReason::NotUtf8 => "not_utf8",
            SkipReason::Empty => "empty",
            SkipReason::Unreadable => "unreadable",
            SkipReason::BadNotebook => "bad_notebook",
            SkipReason::SpecialFile => "special_file",
            SkipReason::LineBreakInName => "line_break_in_name",
        }
    }
}

/// Extensions that are never text worth indexing.
const BINARY_EXTENSIONS: &[&str] = &[
    // images
    "png",
    "jpg",
    "jpeg",
    "gif",
    "bmp",
    "ico",
    "icns",
    "webp",
    "tif",
    "tiff",
    "psd",
    "svgz",
    "avif",
    "heic",
    "xcf",
    "eps", // video and audio
    "mp4",
    "m4v",
    "mov",
    "avi",
    "mkv",
    "webm",
    "wmv",
    "flv",
    "mpg",
    "mpeg",
    "mp3",
    "wav",
    "ogg",
    "oga",
    "flac",
    "aac",
    "m4a",
    "opus",
    "mid",
    "midi", // archives and packages
    "zip",
    "tar",
    "gz",
    "tgz",
    "bz2",
    "xz",
    "zst",
    "lz4",
    "7z",
    "rar",
    "jar",
    "war",
    "ear",
    "whl",
    "egg",
    "deb",
    "rpm",
    "dmg",
    "iso",
    "apk",
    "nupkg",
    "gem",
    "crate", // fonts
    "ttf",
    "otf",
    "woff",
    "woff2",
    "eot",
    "pfb",
    "pfm", // model weights and data blobs
    "safetensors",
    "pt",
    "pth",
    "ckpt",
    "onnx",
    "gguf",
    "ggml",
    "h5",
    "hdf5",
    "pb",
    "tflite",
    "npy",
    "npz",
    "pkl",
    "pickle",
    "joblib",
    "parquet",
    "arrow",
    "feather",
    "avro",
    "orc",
    "mat",
    "bin",
    "dat",
    "db",
    "sqlite",
    "sqlite3",
    "mdb",
    "lmdb", // executables and objects
    "exe",
    "dll",
    "so",
    "dylib",
    "a",
    "lib",
    "o",
    "obj",
    "class",
    "pyc",
    "pyo",
    "pyd",
    "wasm",
    "elf",
    "out",
    "node", // documents
    "pdf",
    "doc",
    "docx",
    "xls",
    "xlsx",
    "ppt",
    "pptx",
    "odt",
    "ods",
    "odp",
    "key",
    "pages",
    "numbers",
    "blend",
    "fbx",
    "glb",
    "gltf",
    "stl",
    "3ds",
    "unitypackage",
    "keystore",
    "jks",
    "p12",
    "pfx",
    "der",
    "swf",
    "fla",
];

/// File names of dependency lock files.
const LOCK_FILES: &[&str] = &[
    "cargo.lock",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "bun.lockb",
    "bun.lock",
    "composer.lock",
    "gemfile.lock",
    "poetry.lock",
    "pipfile.lock",
    "pdm.lock",
    "uv.lock",
    "go.sum",
    "flake.lock",
    "mix.lock",
    "pubspec.lock",
    "podfile.lock",
    "packages.lock.json",
    "paket.lock",
    "conan.lock",
    "gradle.lockfile",
    "deno.lock",
    "shard.lock",
    "cartfile.resolved",
    "package.resolved",
];

/// The lowercase extension of a file name (`None` when there is none).
pub fn extension(file_name: &str) -> Option<String> {
    let (stem, ext) = file_name.rsplit_once('.')?;
    if stem.is_empty() {
        return None;
    }
    Some(ext.to_ascii_lowercase())
}

/// The skip decided by the file name alone (before reading it).
pub fn skip_by_name(file_name: &str) -> Option<SkipReason> {
    let lower = file_name.to_ascii_lowercase();
    if LOCK_FILES.contains(&lower.as_str()) {
        return Some(SkipReason::LockFile);
    }
    let ext = extension(&lower);
    if let Some(ext) = ext.as_deref() {
        if BINARY_EXTENSIONS.contains(&ext) {
            return Some(SkipReason::BinaryExtension);
        }
        if ext == "lock" || ext == "lockb" {
            return Some(SkipReason::LockFile);
        }
        if ext == "map" && (lower.ends_with(".js.map") || lower.ends_with(".css.map")) {
            return Some(SkipReason::Minified);
        }
    }
    if lower.contains(".min.") || lower.contains("-min.js") || lower.ends_with(".bundle.js") {
        return Some(SkipReason::Minified);
    }
    None
}

/// The skip decided by the contents: NUL bytes, invalid UTF-8, minified JS/CSS, emptiness.
pub fn skip_by_content(file_name: &str, bytes: &[u8]) -> Option<SkipReason> {
    if memchr_nul(bytes) {
        return Some(SkipReason::Binary);
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(_) => return Some(SkipReason::NotUtf8),
    };
    if text.trim().is_empty() {
        return Some(SkipReason::Empty);
    }
    let is_web = matches!(
        extension(file_name).as_deref(),
        Some("js" | "mjs" | "cjs" | "css")
    );
    if is_web && looks_minified(text) {
        return Some(SkipReason::Minified);
    }
    None
}

fn memchr_nul(bytes: &[u8]) -> bool {
    bytes.contains(&0)
}

/// Minified bundles: long files made of very long lines.
fn looks_minified(text: &str) -> bool {
    if text.len() < 2048 {
        return false;
    }
    let lines = text.lines().count().max(1);
    text.len() / lines > 500
}

/// Reads the file at `path` if it is a regular file of at most `max_bytes` bytes. The cap is
/// enforced while reading, not by the size the file system reports: pseudo-files such as
/// `/proc/self/pagemap` report 0 and never end. Opened without blocking and without following a
/// symlink, so a file replaced by a FIFO or a link since the walk is skipped, not waited on.
pub fn read_file_capped(path: &Path, max_bytes: u64) -> std::result::Result<Vec<u8>, SkipReason> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY)
        .open(path)
        .map_err(|_| SkipReason::Unreadable)?;
    let meta = file.metadata().map_err(|_| SkipReason::Unreadable)?;
    if !meta.is_file() {
        return Err(SkipReason::SpecialFile);
    }
    if meta.len() > max_bytes {
        return Err(SkipReason::TooLarge);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|_| SkipReason::Unreadable)?;
    if bytes.len() as u64 > max_bytes {
        return Err(SkipReason::TooLarge);
    }
    Ok(bytes)
}

/// What walking a checkout found: the candidate files (sorted, `/`-separated relative paths) and
/// the entries skipped before reading.
#[derive(Debug, Default)]
pub struct WalkResult {
    /// Relative paths of regular files to read, sorted bytewise.
    pub files: Vec<String>,
    /// Skips decided during the walk (symlinks, hidden, by name, by size, unreadable).
    pub skipped: BTreeMap<SkipReason, u64>,
    /// Paths skipped as unreadable during the walk, for the log.
    pub unreadable: Vec<String>,
}

/// The `exclude` globs as the walk applies them under `root`; a glob that does not compile is
/// an error naming it (setting `exclude`).
fn exclude_overrides(root: &Path, exclude: &[String]) -> Result<ignore::overrides::Override> {
    let mut overrides = ignore::overrides::OverrideBuilder::new(root);
    for glob in exclude {
        overrides
            .add(&format!("!{glob}"))
            .map_err(|e| Error::invalid(Setting::Exclude, format!("{glob:?}: {e}")))?;
    }
    overrides
        .build()
        .map_err(|e| Error::invalid(Setting::Exclude, e.to_string()))
}

/// Checks that every `exclude` glob compiles, before any checkout is walked.
pub fn check_exclude_globs(exclude: &[String]) -> Result<()> {
    exclude_overrides(Path::new("."), exclude).map(|_| ())
}

/// Walks a checkout: honours `.gitignore` (also nested ones, and without a `.git`), never follows
/// symlinks, skips hidden entries, lock files, binary extensions, files over `max_file_bytes` (by
/// their reported size; [`read_file_capped`] enforces it on the bytes) and special files.
/// `exclude` holds gitignore-style globs relative to `root` (e.g. `tests/fixtures/**`) whose
/// matches are left out like ignored files. Deterministic: the result does not depend on
/// directory order.
pub fn walk(root: &Path, max_file_bytes: u64, exclude: &[String]) -> Result<WalkResult> {
    let hidden_count = Arc::new(AtomicU64::new(0));
    let hidden_counter = Arc::clone(&hidden_count);
    let overrides = exclude_overrides(root, exclude)?;
    let walker = ignore::WalkBuilder::new(root)
        .overrides(overrides)
        .hidden(false)
        .parents(false)
        .ignore(false)
        .git_global(false)
        .git_exclude(true)
        .git_ignore(true)
        .require_git(false)
        .follow_links(false)
        .filter_entry(move |entry| {
            let hidden = entry.depth() > 0 && entry.file_name().to_string_lossy().starts_with('.');
            if hidden {
                hidden_counter.fetch_add(1, Ordering::Relaxed);
            }
            !hidden
        })
        .build();
    let mut result = WalkResult::default();
    for entry in walker {
        let entry = match entry {
            Ok(e) => e,
            Err(err) => {
                // Permission denied on a directory, a loop, a vanished entry: count, go on.
                *result.skipped.entry(SkipReason::Unreadable).or_default() += 1;
                result.unreadable.push(err.to_string());
                continue;
            }
        };
        if entry.depth() == 0 {
            continue;
        }
        let Some(file_type) = entry.file_type() else {
            continue;
        };
        let rel = match entry.path().strip_prefix(root) {
            Ok(r) => r,
            Err(_) => continue,
        };
        let rel = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        if file_type.is_symlink() {
            *result.skipped.entry(SkipReason::Symlink).or_default() += 1;
            continue;
        }
        if rel.contains(['\n', '\r']) {
            // Counted per file (a directory's files each carry its name).
            if !file_type.is_dir() {
                *result
                    .skipped
                    .entry(SkipReason::LineBreakInName)
                    .or_default() += 1;
            }
            continue;
        }
        if file_type.is_dir() {
            continue;
        }
        if !file_type.is_file() {
            *result.skipped.entry(SkipReason::SpecialFile).or_default() += 1;
            continue;
        }
        let name = entry.file_name().to_string_lossy();
        if let Some(reason) = skip_by_name(&name) {
            *result.skipped.entry(reason).or_default() += 1;
            continue;
        }
        match entry.metadata() {
            Ok(meta) if meta.len() > max_file_bytes => {
                *result.skipped.entry(SkipReason::TooLarge).or_default() += 1;
            }
            Ok(_) => result.files.push(rel),
            Err(err) => {
                *result.skipped.entry(SkipReason::Unreadable).or_default() += 1;
                result.unreadable.push(format!("{rel}: {err}"));
            }
        }
    }
    let hidden = hidden_count.load(Ordering::Relaxed);
    if hidden > 0 {
        result.skipped.insert(SkipReason::Hidden, hidden);
    }
    result.files.sort_unstable();
    Ok(result)
}

/// The commit a checkout is at, read from its `.git` (a directory, or a file `gitdir: ...` for
/// worktrees and submodules): HEAD, then loose refs, then `packed-refs`. `None` when there is no
/// `.git` or the ref cannot be resolved.
pub fn read_commit_id(root: &Path) -> Option<String> {
    let dot_git = root.join(".git");
    let git_dir = if dot_git.is_dir() {
        dot_git
    } else if dot_git.is_file() {
        let content = read_ref_file(&dot_git)?;
        let target = content.trim().strip_prefix("gitdir:")?.trim();
        let target = PathBuf::from(target);
        if target.is_absolute() {
            target
        } else {
            root.join(target)
        }
    } else {
        return None;
    };
    // A worktree's git dir holds HEAD; refs live in the common dir named by `commondir`.
    let common_dir = match read_ref_file(&git_dir.join("commondir")) {
        Some(c) => {
            let c = PathBuf::from(c.trim());
            if c.is_absolute() { c } else { git_dir.join(c) }
        }
        None => git_dir.clone(),
    };
    let head = read_ref_file(&git_dir.join("HEAD"))?;
    let head = head.trim();
    let mut reference = match head.strip_prefix("ref:") {
        Some(r) => r.trim().to_string(),
        None => return is_sha(head).then(|| head.to_ascii_lowercase()),
    };
    // Symbolic refs may chain; bound the depth.
    for _ in 0..8 {
        let loose = [git_dir.join(&reference), common_dir.join(&reference)];
        let mut next = None;
        for candidate in loose {
            if let Some(value) = read_ref_file(&candidate) {
                next = Some(value.trim().to_string());
                break;
            }
        }
        match next {
            Some(value) if is_sha(&value) => return Some(value.to_ascii_lowercase()),
            Some(value) => match value.strip_prefix("ref:") {
                Some(r) => reference = r.trim().to_string(),
                None => return None,
            },
            None => return packed_ref(&common_dir, &reference),
        }
    }
    None
}

/// A one-line file of a `.git` (the `.git` link, `commondir`, `HEAD`, a loose ref): `None` when
/// it is missing, not a regular file, or longer than any such file
/// ([`bounded::MAX_REF_BYTES`]), so that a checkout whose `HEAD` is linked to `/dev/zero` or a
/// FIFO has no commit id instead of a read that never ends.
fn read_ref_file(path: &Path) -> Option<String> {
    bounded::read_regular_text(path, bounded::MAX_REF_BYTES).ok()
}

/// The sha of `reference` in `packed-refs`, streamed line by line (a repository with many tags
/// has a large one; each line is bounded by [`bounded::lines`]).
fn packed_ref(common_dir: &Path, reference: &str) -> Option<String> {
    let path = common_dir.join("packed-refs");
    if !fs::metadata(&path).ok()?.is_file() {
        return None;
    }
    let file = std::io::BufReader::new(fs::File::open(&path).ok()?);
    for line in bounded::lines(file) {
        let line = line.ok()?;
        if line.starts_with('#') || line.starts_with('^') {
            continue;
        }
        if let Some((sha, name)) = line.split_once(' ')
            && name.trim() == reference
            && is_sha(sha)
        {
            return Some(sha.to_ascii_lowercase());
        }
    }
    None
}

fn is_sha(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn parses_repo_spec() {
        let dir = tempfile::tempdir().unwrap();
        let spec =
            RepoSpec::from_str(&format!("laravel/framework={}", dir.path().display())).unwrap();
        assert_eq!(spec.name, "laravel/framework");
        assert!(RepoSpec::from_str("laravel=/tmp").is_err());
        assert!(RepoSpec::from_str("no-equals").is_err());
        let missing = RepoSpec::from_str("a/b=/definitely/not/here").unwrap_err();
        assert!(missing.to_string().contains("/definitely/not/here"));
    }

    #[test]
    fn repo_names_with_dot_parts_and_an_empty_path_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().display();
        for bad in ["../..", "a/..", "./b", "a/.", "../../etc", "a//b", "a"] {
            let err = RepoSpec::from_str(&format!("{bad}={path}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("OWNER/NAME"), "{bad}: {err}");
        }
        for good in ["a/b", "a.b/.c", "a/..b", "-_/x.y"] {
            assert!(
                RepoSpec::from_str(&format!("{good}={path}")).is_ok(),
                "{good}"
            );
        }
        let err = RepoSpec::from_str("a/b=").unwrap_err().to_string();
        assert!(err.contains("`a/b=`") && err.contains("empty"), "{err}");
    }

    #[test]
    fn file_names_with_line_breaks_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("ok.md"), "# ok\n").unwrap();
        fs::write(dir.path().join("bad\nname.md"), "# bad\n").unwrap();
        fs::create_dir(dir.path().join("dir\r")).unwrap();
        fs::write(dir.path().join("dir\r/a.md"), "# a\n").unwrap();
        fs::write(dir.path().join("dir\r/b.md"), "# b\n").unwrap();
        let walked = walk(dir.path(), 1000, &[]).unwrap();
        assert_eq!(walked.files, vec!["ok.md"]);
        assert_eq!(walked.skipped.get(&SkipReason::LineBreakInName), Some(&3));
    }

    #[test]
    fn classifies_names() {
        assert_eq!(skip_by_name("Cargo.lock"), Some(SkipReason::LockFile));
        assert_eq!(
            skip_by_name("package-lock.json"),
            Some(SkipReason::LockFile)
        );
        assert_eq!(skip_by_name("logo.PNG"), Some(SkipReason::BinaryExtension));
        assert_eq!(
            skip_by_name("model.safetensors"),
            Some(SkipReason::BinaryExtension)
        );
        assert_eq!(skip_by_name("jquery.min.js"), Some(SkipReason::Minified));
        assert_eq!(skip_by_name("main.rs"), None);
        assert_eq!(skip_by_name("Makefile"), None);
        assert_eq!(skip_by_name("composer.json"), None);
    }

    #[test]
    fn classifies_content() {
        assert_eq!(
            skip_by_content("a.txt", b"ab\0cd"),
            Some(SkipReason::Binary)
        );
        assert_eq!(
            skip_by_content("a.txt", b"ab\xffcd"),
            Some(SkipReason::NotUtf8)
        );
        assert_eq!(skip_by_content("a.txt", b" \n\t"), Some(SkipReason::Empty));
        let bundle = "var a=1;".repeat(1000);
        assert_eq!(
            skip_by_content("app.js", bundle.as_bytes()),
            Some(SkipReason::Minified)
        );
        assert_eq!(skip_by_content("notes.txt", bundle.as_bytes()), None);
        assert_eq!(skip_by_content("a.py", "héllo".as_bytes()), None);
    }

    #[test]
    fn reads_commit_from_loose_packed_and_worktree() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert_eq!(read_commit_id(root), None);
        let git = root.join(".git");
        fs::create_dir_all(git.join("refs/heads")).unwrap();
        fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        let sha = "0123456789abcdef0123456789abcdef01234567";
        fs::write(
            git.join("packed-refs"),
            format!("# pack-refs with: peeled\n{sha} refs/heads/main\n"),
        )
        .unwrap();
        assert_eq!(read_commit_id(root).as_deref(), Some(sha));
        let loose = "fedcba9876543210fedcba9876543210fedcba98";
        fs::write(git.join("refs/heads/main"), format!("{loose}\n")).unwrap();
        assert_eq!(read_commit_id(root).as_deref(), Some(loose));

        // A linked worktree: `.git` is a file pointing into the main repo's worktrees dir.
        let wt_git = git.join("worktrees/wt");
        fs::create_dir_all(&wt_git).unwrap();
        fs::write(wt_git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::write(wt_git.join("commondir"), "../..\n").unwrap();
        let wt = root.join("wt");
        fs::create_dir_all(&wt).unwrap();
        fs::write(wt.join(".git"), format!("gitdir: {}\n", wt_git.display())).unwrap();
        assert_eq!(read_commit_id(&wt).as_deref(), Some(loose));

        // Detached HEAD.
        fs::write(git.join("HEAD"), format!("{sha}\n")).unwrap();
        assert_eq!(read_commit_id(root).as_deref(), Some(sha));
    }

    /// `.git/HEAD`, a loose ref and `packed-refs` were read with unbounded `read_to_string`: a
    /// checkout whose `HEAD` is linked to `/dev/zero` grew a buffer until the allocator aborted,
    /// and a FIFO blocked the corpus stage forever. Such a file is now no commit id.
    #[cfg(unix)]
    #[test]
    fn a_git_head_or_ref_linked_to_dev_zero_or_a_fifo_is_no_commit() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let git = root.join(".git");
        fs::create_dir_all(git.join("refs/heads")).unwrap();
        let sha = "0123456789abcdef0123456789abcdef01234567";
        let fifo = root.join("fifo");
        let have_fifo = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        let zero = Path::new("/dev/zero");
        for target in [zero, fifo.as_path()] {
            if !(target == zero && zero.exists() || target == fifo && have_fifo) {
                continue;
            }
            for linked in ["HEAD", "refs/heads/main", "packed-refs"] {
                for file in ["HEAD", "refs/heads/main", "packed-refs"] {
                    let _ = fs::remove_file(git.join(file));
                }
                fs::write(git.join("HEAD"), "ref: refs/heads/main\n").unwrap();
                fs::write(git.join("packed-refs"), format!("{sha} refs/heads/other\n")).unwrap();
                let _ = fs::remove_file(git.join(linked));
                std::os::unix::fs::symlink(target, git.join(linked)).unwrap();
                assert_eq!(
                    read_commit_id(root),
                    None,
                    "{linked} -> {}",
                    target.display()
                );
            }
        }
        // A loose ref longer than any ref is not read; as a missing one, it leaves the packed
        // ref to answer.
        fs::remove_file(git.join("packed-refs")).unwrap();
        fs::write(git.join("packed-refs"), format!("{sha} refs/heads/main\n")).unwrap();
        let _ = fs::remove_file(git.join("refs/heads/main"));
        let long = "f".repeat(bounded::MAX_REF_BYTES as usize + 1);
        fs::write(git.join("refs/heads/main"), long).unwrap();
        assert_eq!(read_commit_id(root).as_deref(), Some(sha));
        fs::remove_file(git.join("packed-refs")).unwrap();
        assert_eq!(read_commit_id(root), None);
    }

    #[test]
    fn corpus_caps_a_file_while_reading_not_by_its_reported_size() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.txt");
        fs::write(&file, "0123456789").unwrap();
        assert_eq!(read_file_capped(&file, 10).unwrap(), b"0123456789");
        assert_eq!(read_file_capped(&file, 9), Err(SkipReason::TooLarge));
        // A pseudo-file reporting size 0 whose content is far larger than the cap (hundreds of
        // GB of page map): bounded by the cap, whatever the kernel makes of the last read.
        let pagemap = Path::new("/proc/self/pagemap");
        if fs::metadata(pagemap).is_ok_and(|m| m.len() == 0) {
            let got = read_file_capped(pagemap, 1 << 16);
            assert!(
                matches!(got, Err(SkipReason::TooLarge | SkipReason::Unreadable)),
                "{got:?}"
            );
        }
    }

    #[test]
    fn corpus_skips_a_fifo_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe.md");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("SKIPPED corpus_skips_a_fifo_without_blocking: no mkfifo");
            return;
        }
        // Opening a FIFO to read blocks until a writer comes, unless asked not to.
        assert_eq!(read_file_capped(&fifo, 100), Err(SkipReason::SpecialFile));
        fs::write(dir.path().join("a.md"), "# a\n").unwrap();
        let walked = walk(dir.path(), 100, &[]).unwrap();
        assert_eq!(walked.files, vec!["a.md"]);
        assert_eq!(walked.skipped.get(&SkipReason::SpecialFile), Some(&1));
    }
}
