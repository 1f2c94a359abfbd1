//! [`LocalChat`]: generation from a GGUF file on our own engine (`native`), so a build can run
//! with no server at all. Architectures: `llama`, `qwen2`, `qwen3`, `gemma`, `gemma2`,
//! `gemma3`. Loading checks the header (alignment, tensor extents, block count and head size
//! against the tensors) before any weight is mapped, rebuilds the tokenizer from the metadata
//! (`crate::gguf`) and picks the chat format from its `tokenizer.chat_template`
//! (`chat_format.rs`). Templates that know `<think>` (Qwen3) get Qwen3's non-thinking prompt,
//! and a think block the model writes anyway is cut from the answer (an unfinished one with all
//! that follows). Greedy at temperature 0, else seeded sampling; JSON Schema answers through the
//! grammar constraint; several calls at once decode together (`with_sequences`). CPU.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use candle_core::quantized::gguf_file;
use candle_core::{Device, Tensor};
use candle_transformers::generation::LogitsProcessor;

use super::chat_format::ChatFormat;
use super::grammar::token_bytes;
use super::grammar::{Constraint, GrammarCompiler};
use super::native;
use super::{Chat, ChatParams, Message};
use crate::error::{Error, Result, candle_message};
use crate::gguf::GgufTokenizer;

/// The model on the native engine and what runs calls on it.
struct Engine {
    model: native::Model,
    /// One session per sequence that may run at once.
    sessions: native::SessionPool,
    /// Steps the sequences being decoded together.
    batcher: native::Batcher,
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
    tokenizer: GgufTokenizer,
    /// The end-of-sequence token (the grammar's "may stop here").
    eos: u32,
    /// Built on the first call that asks for a JSON Schema.
    grammar: OnceLock<std::result::Result<GrammarCompiler, String>>,
    engine: Engine,
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
    /// Loads the model and its tokenizer from `path` (on the CPU; the weights stay quantized
    /// in the memory-mapped file).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
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
        let Some(family) = native::Family::of_architecture(&arch) else {
            return Err(gguf_error(
                &path,
                format!(
                    "architecture {arch:?} is not supported (supported: {})",
                    native::Family::ALL
                        .map(native::Family::architecture)
                        .join(", ")
                ),
            ));
        };
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
        let (tokenizer, vocab) =
            GgufTokenizer::from_metadata(md).map_err(|e| gguf_error(&path, e))?;

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
        let think = vocab
            .get("<think>")
            .copied()
            .zip(vocab.get("</think>").copied());
        // SAFETY: the file is opened read-only and treated as immutable while mapped (as every
        // GGUF runtime does); a file changed underneath gives wrong answers, not undefined
        // behaviour in safe code, because every read is bounds-checked.
        let map = unsafe { memmap2::Mmap::map(file.get_ref()) }
            .map_err(|e| gguf_error(&path, format!("cannot map the file: {e}")))?;
        let model = native::Model::load(&content, std::sync::Arc::new(map), family)
            .map_err(|e| gguf_error(&path, e))?;
        let sessions = native::SessionPool::new(&model, 1);
        let engine = Engine {
            model,
            sessions,
            batcher: native::Batcher::default(),
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
            grammar: OnceLock::new(),
            think,
            tokenizer,
            engine,
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
            .tokenizer
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
        let Engine {
            model, sessions, ..
        } = &self.engine;
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

    /// Seconds to generate `gen_tokens` tokens (greedy, stop tokens ignored) after each of
    /// `prompts` at once, one thread per sequence, their steps batched as concurrent calls'
    /// are: what `llm bench --sequences N` measures. The prompts run first, untimed.
    pub fn bench_generate_many(&self, prompts: &[Vec<u32>], gen_tokens: usize) -> Result<f64> {
        let Engine {
            model,
            sessions,
            batcher,
        } = &self.engine;
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
    /// tokens stepped together in one pass over the weights). Answers do not depend on it.
    pub fn with_sequences(mut self, sequences: usize) -> Self {
        let Engine {
            model, sessions, ..
        } = &mut self.engine;
        *sessions = native::SessionPool::new(model, sequences);
        self
    }

    /// Decoding passes run so far and the sequence steps they held (more steps than passes:
    /// sequences were decoded together).
    pub fn decode_passes(&self) -> (u64, u64) {
        self.engine.batcher.counts()
    }

    /// How many calls may run at once (see [`LocalChat::with_sequences`]).
    pub fn sequences(&self) -> usize {
        self.engine.sessions.capacity()
    }

    /// The model's name, file and size.
    pub fn model_id(&self) -> &str {
        &self.model_id
    }

    /// The vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.tokenizer.get_vocab_size(true)
    }

    /// The text of generated `ids`, special tokens left out.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids)
            .map_err(|e| gguf_error(&self.path, e))
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
        let Engine {
            model,
            sessions,
            batcher,
        } = &self.engine;
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
            if generated.len() >= budget || constraint.as_ref().is_some_and(Constraint::is_complete)
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
        Ok(generated)
    }

    /// The grammar constraint of one answer matching `schema`.
    fn constraint(&self, schema: &serde_json::Value) -> Result<Constraint> {
        let compiler = self.grammar.get_or_init(|| {
            let tokens = token_bytes(&self.tokenizer);
            let tokenizer = self.tokenizer.tokenizer.clone();
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

    /// The logits the model gives the token after `prompt_ids`.
    pub fn next_logits(&self, prompt_ids: &[u32]) -> Result<Vec<f32>> {
        let Engine {
            model, sessions, ..
        } = &self.engine;
        let mut session = sessions.take(prompt_ids);
        session
            .prefill(model, prompt_ids)
            .map(|(logits, _)| logits)
            .map_err(|e| gguf_error(&self.path, e))
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
        let Engine {
            model, sessions, ..
        } = &self.engine;
        let mut session = sessions.take(prompt_ids);
        let native_fail = |e: String| gguf_error(&self.path, e);
        session.reserve(prompt_ids.len() + continuation.len());
        let (logits, _) = session.prefill(model, prompt_ids).map_err(native_fail)?;
        rows.push(logits);
        for &token in fed {
            rows.push(session.step(model, token).map_err(native_fail)?);
        }
        Ok(rows)
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
        match LocalChat::load(&path) {
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
}
