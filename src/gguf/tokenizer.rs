//! The tokenizer a GGUF file describes, rebuilt from its metadata as a `tokenizers` tokenizer:
//! gpt2 byte-level BPE (`tokenizer.ggml.tokens` / `merges`, with the pre-tokenizer split its
//! `tokenizer.ggml.pre` names) or llama.cpp's `llama` SentencePiece BPE (tokens / scores / token
//! types, byte fallback), control and user-defined tokens matched whole; and how generated ids
//! decode. The LLM engine reads chat models with it, the encoders GGUF embedding models.

use std::collections::HashMap;

use candle_core::quantized::gguf_file;
use tokenizers::SplitDelimiterBehavior;
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::models::bpe::BPE;
use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreTokenizerSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, Tokenizer};

/// A GGUF tokenizer and what generation needs beside it.
pub(crate) struct GgufTokenizer {
    /// Encodes text (special markers matched whole); decodes gpt2 vocabularies.
    pub(crate) tokenizer: Tokenizer,
    /// SentencePiece vocabularies decode themselves (see [`SpmPiece`]).
    pub(crate) spm_pieces: Option<Vec<SpmPiece>>,
    /// The token strings as in the GGUF, by id.
    pub(crate) tokens: Vec<String>,
    /// Which tokens are special markers.
    pub(crate) special: Vec<bool>,
}

impl GgufTokenizer {
    /// Rebuilds the tokenizer from the metadata, with the token string -> id map it was built
    /// from (for the loader's lookups of markers: the caller drops it, so the loaded model
    /// does not keep a second copy of the vocabulary); the error names the missing or
    /// unsupported key.
    pub(crate) fn from_metadata(md: &Metadata) -> Result<(Self, HashMap<String, u32>), String> {
        let tokenizer_model = md
            .get("tokenizer.ggml.model")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_default();
        if tokenizer_model != "gpt2" && tokenizer_model != "llama" {
            return Err(format!(
                "tokenizer {tokenizer_model:?} is not supported (supported: gpt2 byte-level BPE, \
                 llama SentencePiece BPE)"
            ));
        }
        let tokens: Vec<String> = md
            .get("tokenizer.ggml.tokens")
            .and_then(|v| v.to_vec().ok())
            .map(|vs| {
                vs.iter()
                    .filter_map(|v| v.to_string().ok().cloned())
                    .collect()
            })
            .ok_or("metadata tokenizer.ggml.tokens missing")?;
        let token_types: Vec<i64> = md
            .get("tokenizer.ggml.token_type")
            .and_then(|v| v.to_vec().ok())
            .map(|vs| {
                vs.iter()
                    .map(|v| v.to_i32().map(i64::from).unwrap_or(1))
                    .collect()
            })
            .unwrap_or_default();
        let vocab: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let spm_pieces = (tokenizer_model == "llama").then(|| {
            tokens
                .iter()
                .enumerate()
                .map(|(id, t)| SpmPiece::of(t, token_types.get(id).copied().unwrap_or(1)))
                .collect()
        });
        let mut tokenizer = if tokenizer_model == "gpt2" {
            gpt2_tokenizer(md, &vocab)?
        } else {
            let add_space_prefix = md
                .get("tokenizer.ggml.add_space_prefix")
                .and_then(|v| v.to_bool().ok())
                .unwrap_or(true);
            spm_tokenizer(md, &tokens, &token_types, &vocab, add_space_prefix)?
        };
        // Control tokens (type 3) and user-defined ones (type 4) are matched whole.
        let special: Vec<bool> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| {
                matches!(token_types.get(i), Some(3) | Some(4))
                    || (t.starts_with("<|") && t.ends_with("|>"))
                    // End-of-text markers typed as normal text (Qwen's `</s>`): llama.cpp
                    // overrides them to control tokens, so they are matched whole there too.
                    || matches!(t.as_str(), "</s>" | "<end_of_turn>")
            })
            .collect();
        let specials: Vec<AddedToken> = tokens
            .iter()
            .zip(&special)
            .filter(|(_, s)| **s)
            .map(|(t, _)| AddedToken::from(t.clone(), true))
            .collect();
        tokenizer
            .add_special_tokens(specials)
            .map_err(|e| format!("tokenizer: {e}"))?;

        let tokenizer = Self {
            tokenizer,
            spm_pieces,
            tokens,
            special,
        };
        Ok((tokenizer, vocab))
    }

    /// The text of `ids`, special tokens left out.
    pub(crate) fn decode(&self, ids: &[u32]) -> Result<String, String> {
        let Some(pieces) = &self.spm_pieces else {
            return self
                .tokenizer
                .decode(ids, true)
                .map_err(|e| format!("tokenizer: {e}"));
        };
        let mut bytes = Vec::new();
        for &id in ids {
            match pieces.get(id as usize) {
                Some(SpmPiece::Text(t)) => bytes.extend_from_slice(t.as_bytes()),
                Some(SpmPiece::Byte(b)) => bytes.push(*b),
                Some(SpmPiece::Skip) | None => {}
            }
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// A GGUF file's metadata.
pub(crate) type Metadata = HashMap<String, gguf_file::Value>;

/// How a SentencePiece token decodes: its text with `▁` as a space, a raw byte (`<0xNN>`,
/// type 6), ` ⁇ ` for the unknown piece, or nothing (control, user-defined and unused tokens).
/// Bytes are joined before UTF-8 decoding and invalid sequences become U+FFFD, as SentencePiece
/// does, where `tokenizers`' byte fallback would blank a whole run of byte tokens.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SpmPiece {
    Text(String),
    Byte(u8),
    Skip,
}

impl SpmPiece {
    fn of(token: &str, token_type: i64) -> Self {
        let byte = token
            .strip_prefix("<0x")
            .and_then(|h| h.strip_suffix('>'))
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (token_type, byte) {
            (6, Some(b)) => SpmPiece::Byte(b),
            (1, _) => SpmPiece::Text(token.replace('\u{2581}', " ")),
            // SentencePiece writes the unknown piece as " ⁇ ".
            (2, _) => SpmPiece::Text(" \u{2047} ".into()),
            _ => SpmPiece::Skip,
        }
    }
}

/// A gpt2 byte-level BPE (`tokenizer.ggml.merges` given) as a `tokenizers` tokenizer.
fn gpt2_tokenizer(
    md: &Metadata,
    vocab: &HashMap<String, u32>,
) -> std::result::Result<Tokenizer, String> {
    let merges: Vec<(String, String)> = md
        .get("tokenizer.ggml.merges")
        .and_then(|v| v.to_vec().ok())
        .map(|vs| {
            vs.iter()
                .filter_map(|v| v.to_string().ok())
                .filter_map(|m| m.split_once(' '))
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        })
        .ok_or("metadata tokenizer.ggml.merges missing")?;
    let bpe = BPE::builder()
        .vocab_and_merges(
            vocab
                .clone()
                .into_iter()
                .collect::<tokenizers::models::bpe::Vocab>(),
            merges,
        )
        .build()
        .map_err(|e| format!("tokenizer: {e}"))?;
    let mut tokenizer = Tokenizer::new(bpe);
    // The split before BPE, by llama.cpp's `tokenizer.ggml.pre` name (the same splits as each
    // family's tokenizer.json): Qwen2/3 and Llama 3 have their own regex, SmolLM splits every
    // digit first; anything else gets GPT-2's.
    let pre = md
        .get("tokenizer.ggml.pre")
        .and_then(|v| v.to_string().ok())
        .map(String::as_str)
        .unwrap_or("default");
    let regex = |pattern: &str| -> std::result::Result<PreTokenizerWrapper, String> {
        Split::new(
            SplitPattern::Regex(pattern.into()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map(Into::into)
        .map_err(|e| format!("tokenizer: {e}"))
    };
    let byte_level =
        |use_regex: bool| PreTokenizerWrapper::from(ByteLevel::new(false, true, use_regex));
    let pre_tokenizer: PreTokenizerWrapper = match pre {
        "qwen2" => PreTokenizerSequence::new(vec![regex(QWEN2_SPLIT)?, byte_level(false)]).into(),
        "llama-bpe" | "llama3" => {
            PreTokenizerSequence::new(vec![regex(LLAMA3_SPLIT)?, byte_level(false)]).into()
        }
        "smollm" => {
            PreTokenizerSequence::new(vec![Digits::new(true).into(), byte_level(true)]).into()
        }
        _ => byte_level(true),
    };
    tokenizer.with_pre_tokenizer(Some(pre_tokenizer));
    tokenizer.with_decoder(Some(ByteLevel::new(false, true, true)));
    Ok(tokenizer)
}

/// Qwen2's pre-tokenizer split (its tokenizer.json; llama.cpp's `qwen2` pre type).
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Llama 3's (digits in runs of up to three).
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A SentencePiece BPE (llama.cpp's `llama` tokenizer model: pieces, scores, token types) as a
/// `tokenizers` BPE. SentencePiece merges, anywhere in the text, the adjacent pair whose union
/// is the best-scored piece; the same order as BPE merges is every split of a normal piece into
/// two normal pieces, ranked by the piece's score (ties by piece id, then by the halves' ids).
/// Spaces become `▁` (one is prepended when `add_space_prefix`), characters outside the
/// vocabulary fall back to `<0xXX>` byte pieces, and no pre-tokenizer splits the text.
fn spm_tokenizer(
    md: &Metadata,
    tokens: &[String],
    types: &[i64],
    vocab: &HashMap<String, u32>,
    add_space_prefix: bool,
) -> std::result::Result<Tokenizer, String> {
    let scores: Vec<f32> = md
        .get("tokenizer.ggml.scores")
        .and_then(|v| v.to_vec().ok())
        .map(|vs| vs.iter().map(|v| v.to_f32().unwrap_or(0.0)).collect())
        .ok_or("metadata tokenizer.ggml.scores missing")?;
    if scores.len() != tokens.len() {
        return Err(format!(
            "metadata tokenizer.ggml.scores has {} entries for {} tokens",
            scores.len(),
            tokens.len()
        ));
    }
    // Type 1 is a normal piece (absent types count as normal).
    let normal = |id: usize| types.get(id).is_none_or(|&t| t == 1);
    let pieces: HashMap<&str, usize> = tokens
        .iter()
        .enumerate()
        .filter(|(id, _)| normal(*id))
        .map(|(id, t)| (t.as_str(), id))
        .collect();
    let mut ranked: Vec<(f32, usize, usize, usize)> = Vec::new();
    for (id, piece) in tokens.iter().enumerate().filter(|(id, _)| normal(*id)) {
        for (at, _) in piece.char_indices().skip(1) {
            if let (Some(&left), Some(&right)) =
                (pieces.get(&piece[..at]), pieces.get(&piece[at..]))
            {
                ranked.push((scores[id], id, left, right));
            }
        }
    }
    ranked.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    let merges = ranked
        .into_iter()
        .map(|(_, _, l, r)| (tokens[l].clone(), tokens[r].clone()))
        .collect();
    let mut builder = BPE::builder()
        .vocab_and_merges(
            vocab
                .clone()
                .into_iter()
                .collect::<tokenizers::models::bpe::Vocab>(),
            merges,
        )
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = tokens
        .iter()
        .enumerate()
        .find(|(id, _)| types.get(*id) == Some(&2))
    {
        builder = builder.unk_token(unk.1.clone());
    }
    let bpe = builder.build().map_err(|e| format!("tokenizer: {e}"))?;
    let mut tokenizer = Tokenizer::new(bpe);
    let space = Replace::new(" ", "\u{2581}").map_err(|e| format!("tokenizer: {e}"))?;
    if add_space_prefix {
        tokenizer.with_normalizer(Some(NormalizerSequence::new(vec![
            Prepend::new("\u{2581}".into()).into(),
            space.into(),
        ])))
    } else {
        tokenizer.with_normalizer(Some(space))
    }
    .map_err(|e| format!("tokenizer: {e}"))?;
    let unspace = Replace::new("\u{2581}", " ").map_err(|e| format!("tokenizer: {e}"))?;
    tokenizer.with_decoder(Some(DecoderSequence::new(vec![
        unspace.into(),
        ByteFallback::new().into(),
        Fuse::new().into(),
    ])));
    Ok(tokenizer)
}
