//! Native generation from a GGUF file through candle, so a build can run with no server at all.
//! Architectures: `llama`, `qwen2` and `qwen3` (candle-transformers' quantized models) and
//! `gemma`, `gemma2`, `gemma3` (ours, in `gemma.rs`: candle's Gemma 3 differs from Gemma 3).
//! The tokenizer is rebuilt from the GGUF metadata: gpt2 byte-level BPE (`tokenizer.ggml.tokens`
//! / `merges`) or llama.cpp's `llama` SentencePiece BPE (tokens / scores / token types, byte
//! fallback); the chat format is chosen from the `tokenizer.chat_template` metadata (ChatML,
//! Llama 3, Llama 2, Gemma markers), falling back to ChatML when the vocabulary has
//! `<|im_start|>`, else Llama 2.
//! Templates that know `<think>` (Qwen3) get Qwen3's non-thinking prompt, and a think block the
//! model writes anyway is cut from the answer (an unfinished one with all that follows). Greedy
//! at temperature 0, else seeded sampling. One generation at a time (the model holds a KV
//! cache); CPU.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_core::{Device, Tensor};
use candle_transformers::generation::LogitsProcessor;
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

use super::gemma::{Gemma, Generation};
use super::grammar::{Constraint, GrammarCompiler, TokenBytes, byte_level_decoder};
use super::native;
use super::{Chat, ChatParams, Message, Role};
use crate::error::{Error, Result, candle_message};

/// How messages become one prompt string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// `<|im_start|>role\n...<|im_end|>` (Qwen, SmolLM).
    ChatMl,
    /// ChatML whose answer opens with an empty `<think>\n\n</think>\n\n` block: Qwen3's
    /// non-thinking mode (its template's `enable_thinking=false`).
    ChatMlNoThinking,
    /// `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`.
    Llama3,
    /// `[INST] <<SYS>>...<</SYS>> ... [/INST]`.
    Llama2,
    /// `<bos><start_of_turn>user\n...<end_of_turn>` (system folded into the first user turn).
    Gemma,
}

impl ChatFormat {
    /// The format a GGUF chat template (Jinja source) uses, recognised by its markers.
    pub fn detect(template: Option<&str>, has_im_start: bool) -> Self {
        match template {
            Some(t) if t.contains("<|im_start|>") && t.contains("<think>") => {
                ChatFormat::ChatMlNoThinking
            }
            Some(t) if t.contains("<|im_start|>") => ChatFormat::ChatMl,
            Some(t) if t.contains("<|start_header_id|>") => ChatFormat::Llama3,
            Some(t) if t.contains("<start_of_turn>") => ChatFormat::Gemma,
            Some(t) if t.contains("[INST]") => ChatFormat::Llama2,
            _ if has_im_start => ChatFormat::ChatMl,
            _ => ChatFormat::Llama2,
        }
    }

    /// The prompt for `messages`, ending where the assistant's answer begins.
    pub fn render(self, messages: &[Message]) -> String {
        let role = |r: Role| match r {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut out = String::new();
        match self {
            ChatFormat::ChatMl | ChatFormat::ChatMlNoThinking => {
                for m in messages {
                    out.push_str(&format!(
                        "<|im_start|>{}\n{}<|im_end|>\n",
                        role(m.role),
                        m.content
                    ));
                }
                out.push_str("<|im_start|>assistant\n");
                if self == ChatFormat::ChatMlNoThinking {
                    out.push_str("<think>\n\n</think>\n\n");
                }
            }
            ChatFormat::Llama3 => {
                out.push_str("<|begin_of_text|>");
                for m in messages {
                    out.push_str(&format!(
                        "<|start_header_id|>{}<|end_header_id|>\n\n{}<|eot_id|>",
                        role(m.role),
                        m.content
                    ));
                }
                out.push_str("<|start_header_id|>assistant<|end_header_id|>\n\n");
            }
            ChatFormat::Gemma | ChatFormat::Llama2 => {
                // Both lack a system role: fold system text into the next user turn.
                let mut pending_system = String::new();
                if self == ChatFormat::Gemma {
                    out.push_str("<bos>");
                }
                for m in messages {
                    match m.role {
                        Role::System => {
                            pending_system.push_str(&m.content);
                            pending_system.push_str("\n\n");
                        }
                        Role::User => {
                            // Gemma's template trims each message.
                            let text = match self {
                                ChatFormat::Gemma => m.content.trim(),
                                _ => m.content.as_str(),
                            };
                            let content = format!("{pending_system}{text}");
                            pending_system.clear();
                            if self == ChatFormat::Gemma {
                                out.push_str(&format!(
                                    "<start_of_turn>user\n{content}<end_of_turn>\n"
                                ));
                            } else {
                                out.push_str(&format!("<s>[INST] {content} [/INST]"));
                            }
                        }
                        Role::Assistant => {
                            if self == ChatFormat::Gemma {
                                out.push_str(&format!(
                                    "<start_of_turn>model\n{}<end_of_turn>\n",
                                    m.content.trim()
                                ));
                            } else {
                                out.push_str(&format!(" {} </s>", m.content));
                            }
                        }
                    }
                }
                if self == ChatFormat::Gemma {
                    out.push_str("<start_of_turn>model\n");
                }
            }
        }
        out
    }
}

/// The architectures (`general.architecture`) [`LocalChat`] runs.
pub const SUPPORTED_ARCHITECTURES: [&str; 6] =
    ["llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3"];

/// What runs the model: our own kernels (llama, qwen2, qwen3) or candle (the Gemma family).
enum Engine {
    Native {
        model: native::Model,
        /// One session per sequence that may run at once.
        sessions: native::SessionPool,
        /// Steps the sequences being decoded together.
        batcher: native::Batcher,
    },
    Candle(Mutex<Gemma>),
}

/// Models whose weights take at most this many bytes in f32 are run dequantized.
pub const DEQUANTIZE_MAX_BYTES: u64 = 2 << 30;

trait ReadSeek: std::io::Read + std::io::Seek {}
impl<T: std::io::Read + std::io::Seek> ReadSeek for T {}

/// An in-memory GGUF with every quantized tensor converted to f32 (metadata unchanged), which
/// candle then multiplies as plain tensors.
fn dequantized_copy(
    content: &gguf_file::Content,
    file: &mut (impl std::io::Read + std::io::Seek),
) -> candle_core::Result<(gguf_file::Content, std::io::Cursor<Vec<u8>>)> {
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let mut tensors: Vec<(String, QTensor)> = Vec::with_capacity(names.len());
    for name in names {
        let q = content.tensor(file, name, &Device::Cpu)?;
        let q = match q.dtype() {
            GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16 => q,
            _ => QTensor::quantize(&q.dequantize(&Device::Cpu)?, GgmlDType::F32)?,
        };
        tensors.push((name.clone(), q));
    }
    let metadata: Vec<(&str, &gguf_file::Value)> = content
        .metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v))
        .collect();
    let refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut buffer = std::io::Cursor::new(Vec::new());
    gguf_file::write(&mut buffer, &metadata, &refs)?;
    drop(tensors);
    buffer.set_position(0);
    let content = gguf_file::Content::read(&mut buffer)?;
    Ok((content, buffer))
}

type Metadata = HashMap<String, gguf_file::Value>;

/// How a SentencePiece token decodes: its text with `▁` as a space, a raw byte (`<0xNN>`,
/// type 6), ` ⁇ ` for the unknown piece, or nothing (control, user-defined and unused tokens).
/// Bytes are joined before UTF-8 decoding and invalid sequences become U+FFFD, as SentencePiece
/// does, where `tokenizers`' byte fallback would blank a whole run of byte tokens.
#[derive(Debug, Clone, PartialEq)]
enum SpmPiece {
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

/// The answer part of `generated` when it has think markers (`(<think>, </think>)` ids): what
/// follows the last `</think>` (a complete block, empty or not, is not the answer), else what
/// precedes an unclosed `<think>` (cut off while thinking: no answer). `None`: no markers.
fn after_thinking(generated: &[u32], think: Option<(u32, u32)>) -> Option<&[u32]> {
    let (start, end) = think?;
    if let Some(i) = generated.iter().rposition(|&t| t == end) {
        return Some(&generated[i + 1..]);
    }
    let i = generated.iter().position(|&t| t == start)?;
    Some(&generated[..i])
}

/// A GGUF model loaded in memory.
pub struct LocalChat {
    path: PathBuf,
    model_id: String,
    format: ChatFormat,
    context_tokens: usize,
    stop_ids: Vec<u32>,
    /// The BOS token to put before raw text, when the model's metadata asks for one
    /// (`tokenizer.ggml.add_bos_token`).
    bos: Option<u32>,
    /// `<think>` and `</think>`, when the vocabulary has them (see [`after_thinking`]).
    think: Option<(u32, u32)>,
    tokenizer: Tokenizer,
    /// SentencePiece vocabularies decode themselves (see [`SpmPiece`]).
    spm_pieces: Option<Vec<SpmPiece>>,
    /// The vocabulary (token strings as in the GGUF) and which entries are special markers,
    /// for the grammar's token trie.
    vocab_tokens: Vec<String>,
    special: Vec<bool>,
    /// The end-of-sequence token (the grammar's "may stop here").
    eos: u32,
    /// Built on the first call that asks for a JSON Schema.
    grammar: OnceLock<std::result::Result<GrammarCompiler, String>>,
    engine: Engine,
    device: Device,
}

fn gguf_error(path: &Path, message: impl std::fmt::Display) -> Error {
    Error::Llm {
        backend: format!("gguf {}", path.display()),
        message: message.to_string(),
    }
}

/// The numeric value of the metadata key `general.alignment`, if the header has one. candle's
/// GGUF reader divides by it (a zero panics there, in `gguf_file::Content::read`), so the key is
/// looked up first with a walk over the metadata that allocates nothing but the keys of the
/// right length. Skips use `BufReader::seek_relative`, which keeps the buffer: a plain seek drops
/// it, and Qwen2.5-0.5B's ~150k vocabulary strings then cost ~300k reads (17 s to load, not
/// 0.3 s). `None` also when the header cannot be walked: candle's reader then reports why.
fn gguf_alignment(reader: &mut std::io::BufReader<std::fs::File>) -> Option<u64> {
    fn read<const N: usize>(r: &mut impl std::io::Read) -> Option<[u8; N]> {
        let mut b = [0u8; N];
        r.read_exact(&mut b).ok().map(|()| b)
    }
    fn length(r: &mut impl std::io::Read, wide: bool) -> Option<u64> {
        if wide {
            read::<8>(r).map(u64::from_le_bytes)
        } else {
            read::<4>(r).map(|b| u64::from(u32::from_le_bytes(b)))
        }
    }
    // Fixed sizes of the scalar value types (GGUF spec: 0 u8 .. 12 f64; 8 string, 9 array).
    fn scalar_bytes(value_type: u32) -> Option<u64> {
        match value_type {
            0 | 1 | 7 => Some(1),
            2 | 3 => Some(2),
            4..=6 => Some(4),
            10..=12 => Some(8),
            _ => None,
        }
    }
    fn skip_value(
        r: &mut std::io::BufReader<std::fs::File>,
        value_type: u32,
        wide: bool,
        depth: u32,
    ) -> Option<()> {
        if let Some(bytes) = scalar_bytes(value_type) {
            r.seek_relative(i64::try_from(bytes).ok()?).ok()?;
            return Some(());
        }
        match value_type {
            8 => {
                let len = length(r, wide)?;
                r.seek_relative(i64::try_from(len).ok()?).ok()?;
            }
            9 if depth < 4 => {
                let element = u32::from_le_bytes(read::<4>(r)?);
                let count = length(r, wide)?;
                if let Some(bytes) = scalar_bytes(element) {
                    let skip = count.checked_mul(bytes)?;
                    r.seek_relative(i64::try_from(skip).ok()?).ok()?;
                } else {
                    // Each element reads at least 8 bytes: the walk ends at the end of the file.
                    for _ in 0..count {
                        skip_value(r, element, wide, depth + 1)?;
                    }
                }
            }
            _ => return None,
        }
        Some(())
    }
    let magic = u32::from_le_bytes(read::<4>(reader)?);
    if magic != 0x4655_4747 && magic != 0x4747_5546 {
        return None;
    }
    let wide = u32::from_le_bytes(read::<4>(reader)?) != 1;
    let _tensors = length(reader, wide)?;
    let entries = length(reader, wide)?;
    const KEY: &[u8] = b"general.alignment";
    for _ in 0..entries {
        let key_len = length(reader, wide)?;
        let is_key = if key_len == KEY.len() as u64 {
            read::<{ KEY.len() }>(reader)? == *KEY
        } else {
            reader.seek_relative(i64::try_from(key_len).ok()?).ok()?;
            false
        };
        let value_type = u32::from_le_bytes(read::<4>(reader)?);
        if is_key {
            // candle takes the integer types u8..i32 and falls back to 32 for the others.
            if value_type > 5 {
                return None;
            }
            let bytes = scalar_bytes(value_type)?;
            let mut value = [0u8; 8];
            std::io::Read::read_exact(reader, &mut value[..bytes as usize]).ok()?;
            return Some(u64::from_le_bytes(value));
        }
        skip_value(reader, value_type, wide, 0)?;
    }
    None
}

/// Checks every tensor of `content` against the file: a shape whose element count overflows,
/// that is not a whole number of its type's blocks, or whose bytes end past the end of the file
/// is an error here rather than an overflow or an out-of-bounds read later.
fn check_tensor_infos(
    content: &gguf_file::Content,
    file_bytes: u64,
) -> std::result::Result<(), String> {
    for (name, info) in &content.tensor_infos {
        let dims = info.shape.dims();
        let elements = dims
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
            .ok_or_else(|| format!("tensor {name}: shape {dims:?} overflows"))?;
        // An empty tensor's bytes are an empty `Vec<u8>`, whose dangling pointer candle then
        // views as blocks of a wider alignment (undefined behaviour; an abort in debug builds).
        if elements == 0 {
            return Err(format!("tensor {name}: shape {dims:?} has no elements"));
        }
        let block = info.ggml_dtype.block_size() as u64;
        if !elements.is_multiple_of(block) {
            return Err(format!(
                "tensor {name}: {elements} elements are not whole blocks of {block} ({:?})",
                info.ggml_dtype
            ));
        }
        let end = (elements / block)
            .checked_mul(info.ggml_dtype.type_size() as u64)
            .and_then(|bytes| bytes.checked_add(info.offset))
            .and_then(|bytes| bytes.checked_add(content.tensor_data_offset));
        if end.is_none_or(|end| end > file_bytes) {
            return Err(format!(
                "tensor {name}: shape {dims:?} at offset {} ends past the end of the file \
                 ({file_bytes} bytes)",
                info.offset
            ));
        }
    }
    Ok(())
}

impl LocalChat {
    /// Loads the model and its tokenizer from `path` (on the CPU).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_with(path, true)
    }

    /// Like [`LocalChat::load`], but quantized weights stay quantized whatever the model's size
    /// (as they do above `DEQUANTIZE_MAX_BYTES`).
    pub fn load_quantized(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_with(path, false)
    }

    fn load_with(path: impl AsRef<Path>, may_dequantize: bool) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        // Buffered: the header is ~150k small reads (one per vocabulary string) otherwise.
        let mut file = std::io::BufReader::with_capacity(1 << 20, file);
        if gguf_alignment(&mut file) == Some(0) {
            return Err(gguf_error(
                &path,
                "not a readable GGUF file: general.alignment is 0",
            ));
        }
        std::io::Seek::rewind(&mut file).map_err(|e| Error::io(&path, e))?;
        let content = gguf_file::Content::read(&mut file).map_err(|e| {
            gguf_error(
                &path,
                format!("not a readable GGUF file: {}", candle_message(&e)),
            )
        })?;
        check_tensor_infos(&content, size)
            .map_err(|e| gguf_error(&path, format!("not a readable GGUF file: {e}")))?;
        let md = &content.metadata;
        let get_str = |k: &str| md.get(k).and_then(|v| v.to_string().ok()).cloned();
        let get_u32 = |k: &str| md.get(k).and_then(|v| v.to_u32().ok());
        let arch = get_str("general.architecture").unwrap_or_default();
        if !SUPPORTED_ARCHITECTURES.contains(&arch.as_str()) {
            return Err(gguf_error(
                &path,
                format!(
                    "architecture {arch:?} is not supported (supported: {})",
                    SUPPORTED_ARCHITECTURES.join(", ")
                ),
            ));
        }
        let name = get_str("general.name").unwrap_or_else(|| arch.clone());
        // Every block has tensors of its own, so a block count above the tensor count is a
        // corrupt header; the loaders size their layer lists by it (found by fuzzing: a count
        // of ~10^9 asked for a 499 GB allocation and aborted).
        if let Some(blocks) = get_u32(&format!("{arch}.block_count"))
            && blocks as usize > content.tensor_infos.len()
        {
            return Err(gguf_error(
                &path,
                format!(
                    "not a readable GGUF file: {arch}.block_count is {blocks}, more than its {} \
                     tensors",
                    content.tensor_infos.len()
                ),
            ));
        }
        // The head size sizes the RoPE tables and attention buffers; it must agree with the
        // query projection's shape (found by fuzzing: a key_length of 738,197,520 grew the
        // process past 24 GB).
        if let (Some(head_dim), Some(heads), Some(hidden), Some(query)) = (
            get_u32(&format!("{arch}.attention.key_length")),
            get_u32(&format!("{arch}.attention.head_count")),
            get_u32(&format!("{arch}.embedding_length")),
            content.tensor_infos.get("blk.0.attn_q.weight"),
        ) {
            let expected = u64::from(hidden)
                .checked_mul(u64::from(heads))
                .and_then(|n| n.checked_mul(u64::from(head_dim)));
            let found = query.shape.elem_count() as u64;
            if expected != Some(found) {
                return Err(gguf_error(
                    &path,
                    format!(
                        "not a readable GGUF file: {arch}.attention.key_length {head_dim} x \
                         head_count {heads} x embedding_length {hidden} disagrees with \
                         blk.0.attn_q.weight's {found} elements"
                    ),
                ));
            }
        }
        let context_tokens = get_u32(&format!("{arch}.context_length")).unwrap_or(2048) as usize;
        let tokenizer_model = get_str("tokenizer.ggml.model").unwrap_or_default();
        if tokenizer_model != "gpt2" && tokenizer_model != "llama" {
            return Err(gguf_error(
                &path,
                format!(
                    "tokenizer {tokenizer_model:?} is not supported (supported: gpt2 byte-level \
                     BPE, llama SentencePiece BPE)"
                ),
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
            .ok_or_else(|| gguf_error(&path, "metadata tokenizer.ggml.tokens missing"))?;
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
            gpt2_tokenizer(md, &vocab).map_err(|e| gguf_error(&path, e))?
        } else {
            let add_space_prefix = md
                .get("tokenizer.ggml.add_space_prefix")
                .and_then(|v| v.to_bool().ok())
                .unwrap_or(true);
            spm_tokenizer(md, &tokens, &token_types, &vocab, add_space_prefix)
                .map_err(|e| gguf_error(&path, e))?
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
            .map_err(|e| gguf_error(&path, format!("tokenizer: {e}")))?;

        let template = get_str("tokenizer.chat_template");
        let format = ChatFormat::detect(template.as_deref(), vocab.contains_key("<|im_start|>"));
        let mut stop_ids: Vec<u32> = get_u32("tokenizer.ggml.eos_token_id").into_iter().collect();
        for marker in [
            "<|im_end|>",
            "<|eot_id|>",
            "<end_of_turn>",
            "<|endoftext|>",
            "</s>",
        ] {
            if let Some(&id) = vocab.get(marker) {
                stop_ids.push(id);
            }
        }
        let eos = get_u32("tokenizer.ggml.eos_token_id")
            .or(stop_ids.first().copied())
            .unwrap_or(0);
        let md_bos = md
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok())
            .unwrap_or(false)
            .then(|| get_u32("tokenizer.ggml.bos_token_id"))
            .flatten();
        let device = Device::Cpu;
        let engine = match native::Family::of_architecture(&arch) {
            Some(family) => {
                // SAFETY: the file is opened read-only and treated as immutable while mapped
                // (as every GGUF runtime does); a file changed underneath gives wrong answers,
                // not undefined behaviour in safe code, because every read is bounds-checked.
                let map = unsafe { memmap2::Mmap::map(file.get_ref()) }
                    .map_err(|e| gguf_error(&path, format!("cannot map the file: {e}")))?;
                let model = native::Model::load(&content, std::sync::Arc::new(map), family)
                    .map_err(|e| gguf_error(&path, e))?;
                let sessions = native::SessionPool::new(&model, 1);
                Engine::Native {
                    model,
                    sessions,
                    batcher: native::Batcher::default(),
                }
            }
            None => {
                let Some(generation) = Generation::of_architecture(&arch) else {
                    return Err(gguf_error(
                        &path,
                        format!(
                            "architecture {arch:?} is not supported (supported: {})",
                            SUPPORTED_ARCHITECTURES.join(", ")
                        ),
                    ));
                };
                // Small Gemma models run dequantized: candle's CPU kernels for quantized
                // blocks are scalar unless the whole build targets AVX, while f32 matmuls use
                // runtime-detected SIMD. Large ones stay quantized (their f32 copy would not fit).
                let f32_bytes: u64 = content
                    .tensor_infos
                    .values()
                    .map(|t| t.shape.elem_count() as u64 * 4)
                    .sum();
                let dequantize = may_dequantize && f32_bytes <= DEQUANTIZE_MAX_BYTES;
                let (content, mut reader): (gguf_file::Content, Box<dyn ReadSeek>) = if dequantize {
                    let (content, buffer) = dequantized_copy(&content, &mut file)
                        .map_err(|e| gguf_error(&path, candle_message(&e)))?;
                    (content, Box::new(buffer))
                } else {
                    (content, Box::new(file))
                };
                Engine::Candle(Mutex::new(
                    Gemma::from_gguf(generation, &content, &mut reader, &device)
                        .map_err(|e| gguf_error(&path, candle_message(&e)))?,
                ))
            }
        };
        let file_name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Self {
            model_id: format!("{name} ({file_name}, {size} bytes)"),
            path,
            format,
            context_tokens,
            stop_ids,
            bos: md_bos,
            eos,
            vocab_tokens: tokens,
            special,
            grammar: OnceLock::new(),
            think: vocab
                .get("<think>")
                .copied()
                .zip(vocab.get("</think>").copied()),
            tokenizer,
            spm_pieces,
            engine,
            device,
        })
    }

    /// The chat format in use.
    pub fn format(&self) -> ChatFormat {
        self.format
    }

    /// The model's context window (from the metadata).
    pub fn context_tokens(&self) -> usize {
        self.context_tokens
    }

    /// Token ids of `text` (special markers matched whole).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| gguf_error(&self.path, format!("tokenizer: {e}")))
    }

    /// Token ids of raw `text` as the model's metadata says to start a sequence: the BOS token
    /// first when `tokenizer.ggml.add_bos_token` is true.
    pub fn encode_with_bos(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids: Vec<u32> = self.bos.into_iter().collect();
        ids.extend(self.encode(text)?);
        Ok(ids)
    }

    /// Seconds to process `prompt` from an empty cache, then to generate `gen_tokens` tokens
    /// one at a time (greedy, stop tokens ignored): what `llm bench` measures.
    pub fn bench_pass(&self, prompt: &[u32], gen_tokens: usize) -> Result<(f64, f64)> {
        let argmax = |v: &[f32]| {
            (0..v.len())
                .max_by(|&i, &j| v[i].total_cmp(&v[j]).then(j.cmp(&i)))
                .unwrap_or(0) as u32
        };
        match &self.engine {
            Engine::Native {
                model, sessions, ..
            } => {
                let fail = |e: String| gguf_error(&self.path, e);
                let mut session = sessions.take(prompt);
                session.clear();
                session.reserve(prompt.len() + gen_tokens);
                let started = std::time::Instant::now();
                let (mut logits, _) = session.prefill(model, prompt).map_err(fail)?;
                let prompt_secs = started.elapsed().as_secs_f64();
                let started = std::time::Instant::now();
                for _ in 0..gen_tokens {
                    logits = session.step(model, argmax(&logits)).map_err(fail)?;
                }
                let gen_secs = started.elapsed().as_secs_f64();
                session.clear();
                Ok((prompt_secs, gen_secs))
            }
            Engine::Candle(weights) => {
                let fail = |e: candle_core::Error| gguf_error(&self.path, candle_message(&e));
                let mut weights = self.lock(weights)?;
                weights.clear_kv_cache();
                let started = std::time::Instant::now();
                let mut logits = self.candle_step(&mut weights, prompt, 0).map_err(fail)?;
                let prompt_secs = started.elapsed().as_secs_f64();
                let started = std::time::Instant::now();
                for i in 0..gen_tokens {
                    let next = argmax(&logits);
                    logits = self
                        .candle_step(&mut weights, &[next], prompt.len() + i)
                        .map_err(fail)?;
                }
                Ok((prompt_secs, started.elapsed().as_secs_f64()))
            }
        }
    }

    /// Seconds to generate `gen_tokens` tokens (greedy, stop tokens ignored) after each of
    /// `prompts` at once, one thread per sequence, their steps batched as concurrent calls'
    /// are: what `llm bench --sequences N` measures. The prompts run first, untimed.
    pub fn bench_generate_many(&self, prompts: &[Vec<u32>], gen_tokens: usize) -> Result<f64> {
        let Engine::Native {
            model,
            sessions,
            batcher,
        } = &self.engine
        else {
            return Err(gguf_error(
                &self.path,
                "several sequences at once need the native engine (llama, qwen2, qwen3)",
            ));
        };
        if prompts.len() > sessions.capacity() {
            return Err(gguf_error(
                &self.path,
                format!(
                    "{} sequences but room for {}",
                    prompts.len(),
                    sessions.capacity()
                ),
            ));
        }
        let argmax = |v: &[f32]| {
            (0..v.len())
                .max_by(|&i, &j| v[i].total_cmp(&v[j]).then(j.cmp(&i)))
                .unwrap_or(0) as u32
        };
        let ready = std::sync::Barrier::new(prompts.len() + 1);
        let fail = |e: String| gguf_error(&self.path, e);
        std::thread::scope(|scope| {
            let workers: Vec<_> = prompts
                .iter()
                .map(|prompt| {
                    let ready = &ready;
                    scope.spawn(move || -> Result<()> {
                        let mut session = sessions.take(prompt);
                        session.clear();
                        session.reserve(prompt.len() + gen_tokens);
                        let prefilled = session.prefill(model, prompt);
                        let decoding = batcher.join();
                        ready.wait();
                        let (mut logits, _) = prefilled.map_err(fail)?;
                        for _ in 0..gen_tokens {
                            logits = decoding
                                .steps(model, &mut session, &[argmax(&logits)])
                                .map_err(fail)?;
                        }
                        drop(decoding);
                        session.clear();
                        Ok(())
                    })
                })
                .collect();
            ready.wait();
            let started = std::time::Instant::now();
            for worker in workers {
                worker
                    .join()
                    .map_err(|_| gguf_error(&self.path, "a bench sequence panicked"))??;
            }
            Ok(started.elapsed().as_secs_f64())
        })
    }

    /// Lets up to `sequences` calls run at once (natively: one KV cache each, their generated
    /// tokens stepped together in one pass over the weights); the candle engine (Gemma) runs
    /// one call at a time whatever this says. Answers do not depend on it.
    pub fn with_sequences(mut self, sequences: usize) -> Self {
        if let Engine::Native {
            model, sessions, ..
        } = &mut self.engine
        {
            *sessions = native::SessionPool::new(model, sequences);
        }
        self
    }

    /// Decoding passes run so far and the sequence steps they held (more steps than passes:
    /// sequences were decoded together); zeros on the candle engine.
    pub fn decode_passes(&self) -> (u64, u64) {
        match &self.engine {
            Engine::Native { batcher, .. } => batcher.counts(),
            Engine::Candle(_) => (0, 0),
        }
    }

    /// How many calls may run at once (see [`LocalChat::with_sequences`]).
    pub fn sequences(&self) -> usize {
        match &self.engine {
            Engine::Native { sessions, .. } => sessions.capacity(),
            Engine::Candle(_) => 1,
        }
    }

    /// The model's name, file and size.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The text of generated `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let Some(pieces) = &self.spm_pieces else {
            return self
                .tokenizer
                .decode(ids, true)
                .map_err(|e| gguf_error(&self.path, format!("tokenizer: {e}")));
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

    /// Generates up to `params.max_tokens` tokens after `prompt`; returns the text and the
    /// number of tokens generated. A complete `<think>...</think>` block (empty or not) is cut
    /// from the text, and so is an unfinished one (with all that follows it: no answer).
    pub fn generate(&self, prompt: &str, params: &ChatParams) -> Result<(String, usize)> {
        let prompt_ids = self.encode(prompt)?;
        let generated = self.generate_ids(&prompt_ids, params)?;
        let after = after_thinking(&generated, self.think);
        let text = self.decode(after.unwrap_or(&generated))?;
        // Decoding drops the (special) think markers, so the block is cut here, by token.
        let text = match after {
            Some(_) => text.trim_start().to_string(),
            None => text,
        };
        Ok((text, generated.len()))
    }

    /// The tokens generated after `prompt_ids` (stop token excluded).
    pub fn generate_ids(&self, prompt_ids: &[u32], params: &ChatParams) -> Result<Vec<u32>> {
        let fail = |e: candle_core::Error| gguf_error(&self.path, candle_message(&e));
        let budget = params.max_tokens as usize;
        if prompt_ids.len() + budget > self.context_tokens {
            return Err(gguf_error(
                &self.path,
                format!(
                    "context overflow: the prompt has {} tokens and the answer may have {budget}, \
                     more than the model's {}-token context (lower the answer's max tokens, \
                     the documents' max tokens or the documents per call)",
                    prompt_ids.len(),
                    self.context_tokens
                ),
            ));
        }
        let temperature = (params.temperature > 0.0).then_some(f64::from(params.temperature));
        let mut sampler = LogitsProcessor::new(params.seed.unwrap_or(0), temperature, None);
        let mut sample = |logits: Vec<f32>| -> Result<u32> {
            let n = logits.len();
            let t = Tensor::from_vec(logits, n, &Device::Cpu).map_err(fail)?;
            sampler.sample(&t).map_err(fail)
        };
        let mut generated: Vec<u32> = Vec::new();
        let mut constraint = match &params.json_schema {
            Some(schema) => Some(self.constraint(schema)?),
            None => None,
        };
        match &self.engine {
            Engine::Native {
                model,
                sessions,
                batcher,
            } => {
                let native_fail = |e: String| gguf_error(&self.path, e);
                if budget == 0 {
                    return Ok(generated);
                }
                // Tokens the grammar forces (JSON keys, fixed values, punctuation) are not
                // sampled: they join the prompt, or the sampled token before them, in one pass.
                let mut input = prompt_ids.to_vec();
                let forced = self.forced(&mut constraint, budget)?;
                input.extend(&forced);
                generated.extend(forced);
                let mut session = sessions.take(&input);
                session.reserve(prompt_ids.len() + budget);
                let started = std::time::Instant::now();
                let (mut logits, reuse) = session.prefill(model, &input).map_err(native_fail)?;
                let prompt_secs = started.elapsed().as_secs_f64();
                let mut passes = 1;
                // From here on this sequence's steps share passes with the other calls' (when
                // several run at once); its answer is the same either way.
                let decoding = batcher.join();
                while generated.len() < budget
                    && let Some(next) = self.choose(&mut constraint, logits, &mut sample)?
                {
                    generated.push(next);
                    let mut run = vec![next];
                    let forced = self.forced(&mut constraint, budget - generated.len())?;
                    run.extend(&forced);
                    generated.extend(forced);
                    if generated.len() >= budget
                        || constraint.as_ref().is_some_and(Constraint::is_complete)
                    {
                        break;
                    }
                    logits = match decoding.steps(model, &mut session, &run) {
                        Ok(logits) => logits,
                        Err(e) => {
                            // The cache may hold part of the failed pass: start afresh.
                            session.clear();
                            return Err(native_fail(e));
                        }
                    };
                    passes += 1;
                }
                drop(decoding);
                tracing::debug!(
                    "generated {} tokens in {passes} passes ({:.1} s) after a {}-token prompt \
                     ({} reused, {} computed in {prompt_secs:.1} s)",
                    generated.len(),
                    started.elapsed().as_secs_f64() - prompt_secs,
                    prompt_ids.len(),
                    reuse.reused,
                    reuse.computed
                );
            }
            Engine::Candle(weights) => {
                let mut weights = self.lock(weights)?;
                weights.clear_kv_cache();
                let mut input = prompt_ids.to_vec();
                let forced = self.forced(&mut constraint, budget)?;
                input.extend(&forced);
                generated.extend(forced);
                let mut pos = 0;
                while generated.len() < budget {
                    let logits = self.candle_step(&mut weights, &input, pos).map_err(fail)?;
                    pos += input.len();
                    let Some(next) = self.choose(&mut constraint, logits, &mut sample)? else {
                        break;
                    };
                    generated.push(next);
                    input = vec![next];
                    let forced = self.forced(&mut constraint, budget - generated.len())?;
                    input.extend(&forced);
                    generated.extend(forced);
                    if constraint.as_ref().is_some_and(Constraint::is_complete) {
                        break;
                    }
                }
            }
        }
        Ok(generated)
    }

    /// The grammar constraint of one answer matching `schema`.
    fn constraint(&self, schema: &serde_json::Value) -> Result<Constraint> {
        let compiler = self.grammar.get_or_init(|| {
            let tokens = self.grammar_tokens();
            let tokenizer = self.tokenizer.clone();
            let encode = Box::new(move |text: &str| {
                tokenizer
                    .encode(text, false)
                    .map(|e| e.get_ids().to_vec())
                    .unwrap_or_default()
            });
            GrammarCompiler::new(tokens, self.eos, encode)
        });
        compiler
            .as_ref()
            .map_err(|e| gguf_error(&self.path, e))?
            .constraint(schema)
            .map_err(|e| gguf_error(&self.path, e))
    }

    /// Each token's bytes (or its name, for special markers).
    fn grammar_tokens(&self) -> Vec<TokenBytes> {
        let byte_level = byte_level_decoder();
        self.vocab_tokens
            .iter()
            .enumerate()
            .map(|(id, token)| {
                if self.special[id] {
                    return TokenBytes::Special(token.clone());
                }
                match &self.spm_pieces {
                    Some(pieces) => match &pieces[id] {
                        SpmPiece::Text(t) => TokenBytes::Text(t.as_bytes().to_vec()),
                        SpmPiece::Byte(b) => TokenBytes::Text(vec![*b]),
                        SpmPiece::Skip => TokenBytes::Special(token.clone()),
                    },
                    None => {
                        let bytes: Option<Vec<u8>> =
                            token.chars().map(|c| byte_level.get(&c).copied()).collect();
                        TokenBytes::Text(bytes.unwrap_or_else(|| token.as_bytes().to_vec()))
                    }
                }
            })
            .collect()
    }

    /// The next token from `logits` (masked by the grammar when there is one, which then
    /// advances past it); `None` when the answer ends here (a stop token, or a complete
    /// grammar). Both engines' generation loops take each token through this.
    fn choose(
        &self,
        constraint: &mut Option<Constraint>,
        mut logits: Vec<f32>,
        sample: &mut dyn FnMut(Vec<f32>) -> Result<u32>,
    ) -> Result<Option<u32>> {
        let grammar = |e: String| gguf_error(&self.path, e);
        // Corrupt weights (a NaN or infinity in a tensor) spread to every logit: the sampler
        // would take token 0 or stop at once, and the answer be silently empty.
        if logits.iter().any(|v| v.is_nan() || *v == f32::INFINITY) {
            return Err(gguf_error(
                &self.path,
                "the model computed non-finite logits (NaN or infinity): its weights are \
                 likely corrupt",
            ));
        }
        if let Some(c) = constraint.as_mut()
            && !c.mask(&mut logits, &self.stop_ids).map_err(grammar)?
        {
            return Ok(None);
        }
        let next = sample(logits)?;
        if self.stop_ids.contains(&next) {
            return Ok(None);
        }
        if let Some(c) = constraint.as_mut() {
            c.accept(next).map_err(grammar)?;
        }
        Ok(Some(next))
    }

    /// The tokens the grammar (if any) forces next, at most `limit`, already accepted.
    fn forced(&self, constraint: &mut Option<Constraint>, limit: usize) -> Result<Vec<u32>> {
        match constraint.as_mut() {
            Some(c) => c.forced(limit).map_err(|e| gguf_error(&self.path, e)),
            None => Ok(Vec::new()),
        }
    }

    fn lock<'a, T>(&self, mutex: &'a Mutex<T>) -> Result<std::sync::MutexGuard<'a, T>> {
        mutex
            .lock()
            .map_err(|_| gguf_error(&self.path, "model lock poisoned"))
    }

    /// The logits the model gives the token after `prompt_ids`.
    pub fn next_logits(&self, prompt_ids: &[u32]) -> Result<Vec<f32>> {
        match &self.engine {
            Engine::Native {
                model, sessions, ..
            } => {
                let mut session = sessions.take(prompt_ids);
                session
                    .prefill(model, prompt_ids)
                    .map(|(logits, _)| logits)
                    .map_err(|e| gguf_error(&self.path, e))
            }
            Engine::Candle(weights) => {
                let mut weights = self.lock(weights)?;
                weights.clear_kv_cache();
                self.candle_step(&mut weights, prompt_ids, 0)
                    .map_err(|e| gguf_error(&self.path, e))
            }
        }
    }

    /// The logits before each token of `continuation` after `prompt_ids` (so
    /// `continuation.len()` rows), computed as generation computes them: the prompt through
    /// the prompt path, then one generated-token pass per token. Scores a given continuation
    /// (teacher forcing) where [`LocalChat::generate_ids`] picks its own.
    pub fn continuation_logits(
        &self,
        prompt_ids: &[u32],
        continuation: &[u32],
    ) -> Result<Vec<Vec<f32>>> {
        let Some((_, fed)) = continuation.split_last() else {
            return Ok(Vec::new());
        };
        if prompt_ids.len() + continuation.len() > self.context_tokens {
            return Err(gguf_error(
                &self.path,
                format!(
                    "context overflow: {} prompt and {} continuation tokens exceed the model's \
                     {}-token context",
                    prompt_ids.len(),
                    continuation.len(),
                    self.context_tokens
                ),
            ));
        }
        let mut rows = Vec::with_capacity(continuation.len());
        match &self.engine {
            Engine::Native {
                model, sessions, ..
            } => {
                let mut session = sessions.take(prompt_ids);
                let native_fail = |e: String| gguf_error(&self.path, e);
                session.reserve(prompt_ids.len() + continuation.len());
                let (logits, _) = session.prefill(model, prompt_ids).map_err(native_fail)?;
                rows.push(logits);
                for &token in fed {
                    rows.push(session.step(model, token).map_err(native_fail)?);
                }
            }
            Engine::Candle(weights) => {
                let mut weights = self.lock(weights)?;
                weights.clear_kv_cache();
                let fail = |e: candle_core::Error| gguf_error(&self.path, candle_message(&e));
                rows.push(
                    self.candle_step(&mut weights, prompt_ids, 0)
                        .map_err(fail)?,
                );
                for (i, &token) in fed.iter().enumerate() {
                    let pos = prompt_ids.len() + i;
                    rows.push(
                        self.candle_step(&mut weights, &[token], pos)
                            .map_err(fail)?,
                    );
                }
            }
        }
        Ok(rows)
    }

    /// One candle forward pass over `input` starting at `pos`: the last position's f32 logits.
    fn candle_step(
        &self,
        weights: &mut Gemma,
        input: &[u32],
        pos: usize,
    ) -> candle_core::Result<Vec<f32>> {
        let x = Tensor::new(input, &self.device)?.unsqueeze(0)?;
        weights
            .forward(&x, pos)?
            .squeeze(0)?
            .to_dtype(candle_core::DType::F32)?
            .to_vec1::<f32>()
    }
}

impl Chat for LocalChat {
    fn backend(&self) -> &str {
        "gguf"
    }

    fn model(&self) -> &str {
        &self.model_id
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn max_concurrency(&self) -> usize {
        self.sequences()
    }

    fn chat(&self, messages: &[Message], params: &ChatParams) -> Result<String> {
        let prompt = self.format.render(messages);
        self.generate(&prompt, params).map(|(text, _)| text)
    }

    fn gives_probabilities(&self) -> bool {
        true
    }

    /// One prompt pass (its prefix shared with the previous call is reused, so asking about
    /// several facts after one document computes the document once), then the softmax of the
    /// next token's logits summed over each choice's first tokens.
    fn choice_probabilities(&self, messages: &[Message], choices: &[&[&str]]) -> Result<Vec<f64>> {
        let prompt = self.encode(&self.format.render(messages))?;
        if prompt.len() >= self.context_tokens {
            return Err(gguf_error(
                &self.path,
                format!(
                    "context overflow: the prompt has {} tokens, the model's context {}",
                    prompt.len(),
                    self.context_tokens
                ),
            ));
        }
        let mut token_sets = Vec::with_capacity(choices.len());
        for spellings in choices {
            let mut ids: Vec<u32> = Vec::new();
            for spelling in *spellings {
                if let Some(&first) = self.encode(spelling)?.first()
                    && !ids.contains(&first)
                {
                    ids.push(first);
                }
            }
            token_sets.push(ids);
        }
        let logits = self.next_logits(&prompt)?;
        Ok(choice_mass(&logits, &token_sets))
    }
}

/// The probability mass of each token set under the softmax of `logits`, normalised over the
/// sets (uniform when every set's mass underflows; a token id outside the vocabulary adds
/// nothing).
fn choice_mass(logits: &[f32], token_sets: &[Vec<u32>]) -> Vec<f64> {
    let max = logits
        .iter()
        .copied()
        .filter(|v| v.is_finite())
        .fold(f32::NEG_INFINITY, f32::max);
    let mass: Vec<f64> = token_sets
        .iter()
        .map(|ids| {
            ids.iter()
                .filter_map(|&id| logits.get(id as usize))
                .filter(|v| v.is_finite())
                .map(|&v| f64::from(v - max).exp())
                .sum()
        })
        .collect();
    super::normalised_shares(mass)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fuzz_regression(name: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fuzz/regressions/gguf")
            .join(name);
        match LocalChat::load_quantized(&path) {
            Ok(_) => panic!("{name}: loaded"),
            Err(e) => e.to_string(),
        }
    }

    /// Found by fuzzing: `general.alignment = 0` made candle's GGUF reader divide by zero.
    #[test]
    fn gguf_alignment_zero_is_an_error_not_a_panic() {
        let message = fuzz_regression("alignment-zero.gguf");
        assert!(message.contains("general.alignment is 0"), "{message}");
    }

    /// Found by fuzzing: a tensor shape whose element count overflows u64 panicked (overflow in
    /// `Shape::elem_count`) while sizing the model.
    #[test]
    fn gguf_tensor_shape_overflow_is_an_error_not_a_panic() {
        let message = fuzz_regression("shape-overflow.gguf");
        assert!(
            message.contains("not a readable GGUF file: tensor"),
            "{message}"
        );
    }

    /// Found by fuzzing: a tensor with a zero dimension (`token_embd.weight` of shape [32, 0])
    /// made candle view an empty buffer's dangling pointer as f32 blocks, an abort in debug
    /// builds ("unsafe precondition(s) violated") and undefined behaviour in release ones.
    #[test]
    fn gguf_empty_tensor_is_an_error_not_an_abort() {
        let message = fuzz_regression("empty-tensor.gguf");
        assert!(message.contains("has no elements"), "{message}");
    }

    /// Found by fuzzing: `gemma2.block_count` of 1,023,410,179 made the loader reserve a layer
    /// list of 499 GB (an abort: "memory allocation failed").
    #[test]
    fn gguf_huge_block_count_is_an_error_not_an_abort() {
        let message = fuzz_regression("huge-block-count.gguf");
        assert!(message.contains("block_count is 1023410179"), "{message}");
    }

    /// Found by fuzzing: `gemma.attention.key_length` of 738,197,520 (the query projection
    /// holds 32 x 4 x 16 values) grew the process past 24 GB.
    #[test]
    fn gguf_head_size_must_match_the_query_projection() {
        let message = fuzz_regression("huge-key-length.gguf");
        assert!(message.contains("key_length 738197520"), "{message}");
    }

    #[test]
    fn choice_mass_is_the_softmax_share_of_each_set() {
        let logits = [0.0f32, 1.0, 2.0, f32::NEG_INFINITY];
        let p = choice_mass(&logits, &[vec![2], vec![0, 1]]);
        let e = |x: f64| x.exp();
        let expect = e(0.0) / (e(0.0) + e(-1.0) + e(-2.0));
        assert!((p[0] - expect).abs() < 1e-12, "{p:?}");
        assert!((p[0] + p[1] - 1.0).abs() < 1e-12);
        // Only out-of-vocabulary or impossible tokens: uniform, never NaN.
        assert_eq!(choice_mass(&logits, &[vec![3], vec![99]]), vec![0.5, 0.5]);
    }

    #[test]
    fn detects_formats() {
        assert_eq!(
            ChatFormat::detect(Some("{{'<|im_start|>' + role}}"), false),
            ChatFormat::ChatMl
        );
        assert_eq!(
            ChatFormat::detect(Some("<|start_header_id|>"), true),
            ChatFormat::Llama3
        );
        assert_eq!(
            ChatFormat::detect(Some("<start_of_turn>"), false),
            ChatFormat::Gemma
        );
        assert_eq!(
            ChatFormat::detect(Some("'<|im_start|>' ... '<think>\\n\\n</think>'"), false),
            ChatFormat::ChatMlNoThinking
        );
        assert_eq!(ChatFormat::detect(None, true), ChatFormat::ChatMl);
        assert_eq!(ChatFormat::detect(None, false), ChatFormat::Llama2);
    }

    #[test]
    fn think_blocks_are_cut_by_token() {
        let think = Some((3, 4));
        assert_eq!(
            after_thinking(&[3, 9, 4, 7, 8], think),
            Some(&[7u32, 8][..])
        );
        assert_eq!(after_thinking(&[3, 4, 5], think), Some(&[5u32][..]));
        // Cut off while thinking: no answer.
        assert_eq!(after_thinking(&[3, 9, 9], think), Some(&[][..]));
        assert_eq!(after_thinking(&[7, 8], think), None);
        assert_eq!(after_thinking(&[3, 7, 4, 8], None), None);
    }

    #[test]
    fn renders_chatml_and_gemma() {
        let msgs = [Message::system("S"), Message::user("U")];
        assert_eq!(
            ChatFormat::ChatMl.render(&msgs),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            ChatFormat::Gemma.render(&msgs),
            "<bos><start_of_turn>user\nS\n\nU<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(ChatFormat::Llama2.render(&msgs), "<s>[INST] S\n\nU [/INST]");
        assert!(
            ChatFormat::ChatMlNoThinking
                .render(&msgs)
                .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        );
    }
}
