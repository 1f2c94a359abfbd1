//! Native GGUF inference on our own CPU kernels (`llama`, `qwen2`, `qwen3` families): weights
//! stay quantized in the memory-mapped file, prompts run as matrix products, generated tokens
//! through integer matrix x vector kernels chosen at run time by CPU features (see
//! [`crate::kernels::quant`]; the KV cache and attention are [`crate::kernels::attention`]).
//!
//! A [`Session`] keeps the KV cache between calls: a prompt that starts with the tokens of the
//! previous prompt reuses their keys and values and computes only the rest. Positions computed
//! by the prompt path are the only ones reused (never generated ones), and the prompt path's
//! results do not depend on how a prompt is split, so reuse never changes an answer.

pub mod batch;
pub mod model;

pub use crate::kernels::attention::KvCache;
pub use batch::{Batcher, Decoding, PooledSession, SessionPool};
pub use model::{Activation, Config, Family, Model, Run};

/// Returns the heap pages freed since the last call to the kernel. The prompt path's
/// activations (a 512-token piece: ~12 MB for SmolLM2-135M, ~40 MB for Qwen2.5-0.5B) are freed
/// when it returns, but the binary raises glibc's trim threshold so that encoders keep their
/// activation buffers between batches (`tune_allocator` in `main.rs`); without this those
/// pages would stay resident through generation, beside the weights and the KV cache. The next
/// prompt faults them in again: ~3,000 pages, milliseconds against the prompt's own time.
fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only hands free heap memory back to the kernel, under the
    // allocator's own locks; no live allocation is touched.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Most prompt tokens run through the model at once. A piece's activations are live beside the
/// KV cache, so they set the peak memory: 256 tokens hold ~6.5 MB of them for SmolLM2-135M
/// (~15 MB for Qwen2.5-0.5B), half of what 512 did, which took SmolLM2's peak RSS under 1.3x
/// its file + the KV cache. Each piece dequantizes every weight panel once more, 1/256 of the
/// panel's multiply work.
pub const PROMPT_CHUNK: usize = 256;

/// A model's KV cache and the prompt tokens it holds, reused across calls.
pub struct Session {
    cache: KvCache,
    /// The tokens whose keys and values the prompt path computed (a prefix of the cache).
    prompt_tokens: Vec<u32>,
}

/// Prompt tokens a [`Session::prefill`] reused and computed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrefillStats {
    /// Tokens taken from the cache.
    pub reused: usize,
    /// Tokens computed.
    pub computed: usize,
}

impl Session {
    /// An empty session for `model`.
    pub fn new(model: &Model) -> Self {
        Self {
            cache: model.new_cache(),
            prompt_tokens: Vec::new(),
        }
    }

    /// Forgets everything cached.
    pub fn clear(&mut self) {
        self.cache.truncate(0);
        self.prompt_tokens.clear();
    }

    /// Positions in the cache (prompt and generated).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.cache.is_empty()
    }

    /// Prompt tokens this session could reuse for `prompt` (those it shares with the cached
    /// prompt).
    pub fn shared_prefix(&self, prompt: &[u32]) -> usize {
        self.prompt_tokens
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
    }

    /// Moves the cache out (for a batched pass; an empty one is left in its place).
    pub(crate) fn take_cache(&mut self) -> KvCache {
        let empty = self.cache.emptied();
        std::mem::replace(&mut self.cache, empty)
    }

    /// Puts back the cache [`Session::take_cache`] moved out.
    pub(crate) fn put_cache(&mut self, cache: KvCache) {
        self.cache = cache;
    }

    /// Bytes of keys and values held.
    pub fn cache_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Makes room for `positions` positions in all, so that the cache does not grow (and copy
    /// itself, leaving the old copy's pages in the heap) while generating.
    pub fn reserve(&mut self, positions: usize) {
        self.cache.reserve(positions);
    }

    /// Runs `prompt`, reusing the longest prefix it shares with the previous prompt (at least
    /// its last token is computed, for its logits); returns the last token's logits.
    pub fn prefill(
        &mut self,
        model: &Model,
        prompt: &[u32],
    ) -> Result<(Vec<f32>, PrefillStats), String> {
        if prompt.is_empty() {
            return Err("empty prompt".into());
        }
        let common = self.shared_prefix(prompt);
        let keep = common.min(prompt.len() - 1);
        self.cache.truncate(keep);
        self.prompt_tokens.truncate(keep);
        // In pieces of PROMPT_CHUNK tokens: the activations of one piece are all a prompt ever
        // holds (results do not depend on the split), so memory stays bounded on long prompts.
        let rest = &prompt[keep..];
        let pieces = rest.len().div_ceil(PROMPT_CHUNK);
        let mut result = Ok(Vec::new());
        for (i, piece) in rest.chunks(PROMPT_CHUNK).enumerate() {
            result = model.prompt(piece, &mut self.cache, i + 1 == pieces);
            if result.is_err() {
                break;
            }
        }
        release_freed_heap();
        match result {
            Ok(logits) => {
                self.prompt_tokens.extend_from_slice(&prompt[keep..]);
                Ok((
                    logits,
                    PrefillStats {
                        reused: keep,
                        computed: prompt.len() - keep,
                    },
                ))
            }
            Err(e) => {
                self.clear();
                Err(e)
            }
        }
    }

    /// Runs one generated token; returns its logits.
    pub fn step(&mut self, model: &Model, token: u32) -> Result<Vec<f32>, String> {
        model.step(token, &mut self.cache)
    }

    /// Runs several generated tokens at once (a sampled one and those the grammar forces
    /// after it); returns the last one's logits, the same as one [`Session::step`] each.
    pub fn steps(&mut self, model: &Model, tokens: &[u32]) -> Result<Vec<f32>, String> {
        model.steps(tokens, &mut self.cache)
    }
}
