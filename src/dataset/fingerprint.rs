//! [`Fingerprint`]: the one hash behind every cache decision (is this stage's output still
//! valid, may this HNSW graph or benchmark index be reused, does this file still hold what was
//! recorded). A fingerprint is a SHA-256 digest, written as 64 lowercase hex digits.
//!
//! Two ways to make one:
//! - of *content*: [`Fingerprint::of_bytes`], [`Fingerprint::of_file`] and
//!   [`Fingerprint::of_path`] (a file, or a directory tree) digest the bytes themselves, so
//!   `of_file` equals `sha256sum`'s digest of the file;
//! - of *what something was made from*: [`Fingerprint::builder`] starts a [`FingerprintBuilder`]
//!   for one purpose, which is fed labelled fields (text, numbers, bytes, file contents, JSON
//!   settings, other fingerprints) in a fixed order. Every field is framed by its kind, label and
//!   length, so no two different field lists share a byte stream, and the purpose keeps two
//!   caches fed the same fields apart.
//!
//! A changed field list (a new setting, a renamed label) changes the fingerprint, so the cache it
//! guards is rebuilt once: that is the point. Bump [`FINGERPRINT_FORMAT`] when the framing itself
//! changes.
//!
//! Kept apart on purpose: the CRC-32s of an index manifest (corruption checks, not cache
//! decisions), and [`Fnv1a64`], the identity two file formats recorded before this type existed
//! (the corpus and model hashes of an index manifest, the input hash of a shard sidecar):
//! existing files keep being checked with it and new ones are byte-identical.

use std::fmt;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Version of [`FingerprintBuilder`]'s framing, fed first into every built fingerprint.
pub const FINGERPRINT_FORMAT: u32 = 1;

/// Bytes read at a time when a file is digested.
const READ_BLOCK: usize = 1 << 20;

/// A SHA-256 digest that decides whether a cache is still valid. `Display` and serde write it
/// as 64 lowercase hex digits; `FromStr` reads them back (either case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Starts a fingerprint of the fields that `purpose` (a short fixed name such as
    /// `"hnsw graph"`) depends on.
    pub fn builder(purpose: &str) -> FingerprintBuilder {
        let mut hasher = Sha256::new();
        hasher.update(b"freshstack fingerprint");
        hasher.update(FINGERPRINT_FORMAT.to_le_bytes());
        frame(&mut hasher, purpose.as_bytes());
        FingerprintBuilder { hasher }
    }

    /// The digest of `bytes` themselves.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The digest of a file's bytes (read in 1 MiB blocks); equal to [`Fingerprint::of_bytes`]
    /// of its contents.
    pub fn of_file(path: &Path) -> Result<Self> {
        let mut hasher = Sha256::new();
        digest_file(&mut hasher, path)?;
        Ok(Self(hasher.finalize().into()))
    }

    /// [`Fingerprint::of_file`] of a file; of a directory, the digest of every file under it
    /// (sorted by relative path; per file its path, a zero byte and its own fingerprint in hex).
    pub fn of_path(path: &Path) -> Result<Self> {
        if !path.is_dir() {
            return Self::of_file(path);
        }
        let mut files = Vec::new();
        collect_files(path, path, &mut files)?;
        files.sort();
        let mut hasher = Sha256::new();
        for rel in files {
            let file = Self::of_file(&path.join(&rel))?;
            hasher.update(rel.to_string_lossy().as_bytes());
            hasher.update([0]);
            hasher.update(file.to_string().as_bytes());
        }
        Ok(Self(hasher.finalize().into()))
    }

    /// The 32 digest bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Why a string is not a [`Fingerprint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseFingerprintError {
    text: String,
}

impl fmt::Display for ParseFingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "not a fingerprint: {:?}: expected 64 hex digits (a SHA-256 digest)",
            self.text
        )
    }
}

impl std::error::Error for ParseFingerprintError {}

impl FromStr for Fingerprint {
    type Err = ParseFingerprintError;

    fn from_str(text: &str) -> std::result::Result<Self, Self::Err> {
        let error = || ParseFingerprintError {
            text: text.to_string(),
        };
        let digits = text.as_bytes();
        if digits.len() != 64 {
            return Err(error());
        }
        let mut bytes = [0u8; 32];
        for (byte, pair) in bytes.iter_mut().zip(digits.chunks_exact(2)) {
            let high = hex_value(pair[0]).ok_or_else(error)?;
            let low = hex_value(pair[1]).ok_or_else(error)?;
            *byte = high << 4 | low;
        }
        Ok(Self(bytes))
    }
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Feeds labelled fields into one [`Fingerprint`] ([`Fingerprint::builder`]). The order of the
/// calls is part of the fingerprint: feed the fields in a fixed order.
#[derive(Debug, Clone)]
pub struct FingerprintBuilder {
    hasher: Sha256,
}

/// The kind of a field, fed before its label so that, say, the text `"3"` and the number 3
/// differ.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Kind {
    Text = 1,
    Number = 2,
    Bytes = 3,
    File = 4,
    Json = 5,
    Fingerprint = 6,
    Absent = 7,
}

/// Feeds `bytes` with their length in front, so consecutive fields cannot run into each other.
fn frame(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

impl FingerprintBuilder {
    fn field(&mut self, kind: Kind, label: &str) {
        self.hasher.update([kind as u8]);
        frame(&mut self.hasher, label.as_bytes());
    }

    /// Adds a text field.
    pub fn text(mut self, label: &str, value: &str) -> Self {
        self.field(Kind::Text, label);
        frame(&mut self.hasher, value.as_bytes());
        self
    }

    /// Adds a number field.
    pub fn number(mut self, label: &str, value: u64) -> Self {
        self.field(Kind::Number, label);
        self.hasher.update(value.to_le_bytes());
        self
    }

    /// Adds raw bytes.
    pub fn bytes(mut self, label: &str, value: &[u8]) -> Self {
        self.field(Kind::Bytes, label);
        frame(&mut self.hasher, value);
        self
    }

    /// Adds a file's contents (its [`Fingerprint::of_file`], so the file is read once and
    /// streamed, never held in memory).
    pub fn file(mut self, label: &str, path: &Path) -> Result<Self> {
        let contents = Fingerprint::of_file(path)?;
        self.field(Kind::File, label);
        self.hasher.update(contents.0);
        Ok(self)
    }

    /// Adds a setting as its compact JSON (serde's field order, so a struct's fields count in
    /// their declared order). A value JSON cannot hold feeds its error message instead, which
    /// is as stable as the value.
    pub fn json<T: Serialize + ?Sized>(mut self, label: &str, value: &T) -> Self {
        let text = serde_json::to_string(value).unwrap_or_else(|e| format!("<{e}>"));
        self.field(Kind::Json, label);
        frame(&mut self.hasher, text.as_bytes());
        self
    }

    /// Adds another fingerprint (an input's, say).
    pub fn fingerprint(mut self, label: &str, value: &Fingerprint) -> Self {
        self.field(Kind::Fingerprint, label);
        self.hasher.update(value.0);
        self
    }

    /// Adds a fingerprint that may be missing; a missing one differs from every present one.
    pub fn maybe_fingerprint(mut self, label: &str, value: Option<&Fingerprint>) -> Self {
        match value {
            Some(value) => self.fingerprint(label, value),
            None => {
                self.field(Kind::Absent, label);
                self
            }
        }
    }

    /// The fingerprint of everything fed.
    pub fn finish(self) -> Fingerprint {
        Fingerprint(self.hasher.finalize().into())
    }
}

fn digest_file(hasher: &mut Sha256, path: &Path) -> Result<()> {
    let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut buf = vec![0u8; READ_BLOCK];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
    }
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            collect_files(root, &path, out)?;
        } else if kind.is_file() {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// FNV-1a 64, the content identity that two formats recorded before [`Fingerprint`] existed:
/// an index manifest's corpus and model hashes and a shard sidecar's input hash. It decides
/// nothing new; it is kept so that those files stay byte-identical and indexes already built
/// are still checked against the corpus they were built from. Written as 16 hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv1a64(u64);

impl Default for Fnv1a64 {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a64 {
    /// Folds `bytes` in.
    pub fn update(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// The hash of a file's bytes, as 16 hex digits.
    pub fn of_file(path: &Path) -> Result<String> {
        let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut hash = Self::default();
        let mut buf = vec![0u8; READ_BLOCK];
        loop {
            let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                return Ok(hash.to_string());
            }
            hash.update(&buf[..n]);
        }
    }
}

impl fmt::Display for Fnv1a64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_fingerprints_are_sha256() {
        // sha256("abc"), FIPS 180-2 appendix B.1.
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(Fingerprint::of_bytes(b"abc").to_string(), abc);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "abc").unwrap();
        assert_eq!(Fingerprint::of_file(&path).unwrap().to_string(), abc);
        assert_eq!(Fingerprint::of_path(&path).unwrap().to_string(), abc);
    }

    #[test]
    fn a_directory_changes_with_a_name_or_a_byte() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a"), "1").unwrap();
        let before = Fingerprint::of_path(dir.path()).unwrap();
        assert_eq!(before, Fingerprint::of_path(dir.path()).unwrap());
        std::fs::write(dir.path().join("sub/a"), "2").unwrap();
        let changed = Fingerprint::of_path(dir.path()).unwrap();
        assert_ne!(before, changed);
        std::fs::rename(dir.path().join("sub/a"), dir.path().join("sub/b")).unwrap();
        assert_ne!(changed, Fingerprint::of_path(dir.path()).unwrap());
    }

    #[test]
    fn fields_are_framed_labelled_and_typed() {
        let base = || Fingerprint::builder("test");
        let ab_c = base().text("x", "ab").text("y", "c").finish();
        assert_eq!(ab_c, base().text("x", "ab").text("y", "c").finish());
        assert_ne!(ab_c, base().text("x", "a").text("y", "bc").finish());
        assert_ne!(ab_c, base().text("x", "ab").text("z", "c").finish());
        assert_ne!(ab_c, base().text("y", "c").text("x", "ab").finish());
        assert_ne!(
            ab_c,
            Fingerprint::builder("other")
                .text("x", "ab")
                .text("y", "c")
                .finish()
        );
        assert_ne!(
            base().text("n", "3").finish(),
            base().number("n", 3).finish()
        );
        assert_ne!(
            base().json("n", &3).finish(),
            base().number("n", 3).finish()
        );
        assert_ne!(base().bytes("b", b"").finish(), base().finish());
        let input = Fingerprint::of_bytes(b"input");
        assert_ne!(
            base().maybe_fingerprint("i", None).finish(),
            base().maybe_fingerprint("i", Some(&input)).finish()
        );
        assert_eq!(
            base().maybe_fingerprint("i", Some(&input)).finish(),
            base().fingerprint("i", &input).finish()
        );
    }

    #[test]
    fn a_file_field_is_its_contents() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "one").unwrap();
        let one = Fingerprint::builder("t").file("f", &path).unwrap().finish();
        std::fs::write(&path, "two").unwrap();
        assert_ne!(
            one,
            Fingerprint::builder("t").file("f", &path).unwrap().finish()
        );
        let missing = Fingerprint::builder("t").file("f", &dir.path().join("none"));
        assert!(missing.unwrap_err().to_string().contains("none"));
    }

    #[test]
    fn hex_text_and_json_round_trip() {
        let fp = Fingerprint::builder("t").number("n", 1).finish();
        let text = fp.to_string();
        assert_eq!(text.len(), 64);
        assert_eq!(text.parse::<Fingerprint>().unwrap(), fp);
        assert_eq!(text.to_uppercase().parse::<Fingerprint>().unwrap(), fp);
        let json = serde_json::to_string(&fp).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<Fingerprint>(&json).unwrap(), fp);
        for bad in [
            "",
            "abc",
            &text[..63],
            &format!("{}g", &text[..63]),
            &format!("{text}0"),
        ] {
            let err = bad.parse::<Fingerprint>().unwrap_err().to_string();
            assert!(err.contains("expected 64 hex digits"), "{err}");
        }
        assert!(serde_json::from_str::<Fingerprint>("\"12\"").is_err());
    }

    #[test]
    fn fnv_matches_the_reference_values() {
        // FNV-1a 64 test vectors (Fowler/Noll/Vo): "" and "a".
        assert_eq!(Fnv1a64::default().to_string(), "cbf29ce484222325");
        let mut a = Fnv1a64::default();
        a.update(b"a");
        assert_eq!(a.to_string(), "af63dc4c8601ec8c");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, "a").unwrap();
        assert_eq!(Fnv1a64::of_file(&path).unwrap(), "af63dc4c8601ec8c");
    }
}
