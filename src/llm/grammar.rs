//! Constrained sampling for the native backend: a JSON Schema compiled by `llguidance` into a
//! token mask over the model's own vocabulary, so a generated answer can only be text that
//! parses and matches the schema.
//!
//! Why llguidance (over hand-written JSON grammars, Outlines-style regex automata or
//! llama.cpp's GBNF): it compiles JSON Schema directly (the schema every stage already sends
//! to servers), computes a mask over a 150k-token vocabulary in well under a millisecond with
//! a token trie and an Earley parser (no precomputed per-state tables, so per-call schemas with
//! enums of document ids cost nothing up front), is the engine behind OpenAI's and vLLM's
//! structured outputs, and is maintained as a Rust crate.
//!
//! Greedy decoding under a mask picks the same token as without it whenever the unmasked
//! choice is allowed, so an answer the model writes validly on its own comes out byte for byte
//! the same.

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};

/// How a token id turns into bytes, for the grammar's trie.
pub(crate) enum TokenBytes {
    /// Literal bytes of ordinary text.
    Text(Vec<u8>),
    /// A special token (control marker): never part of an answer.
    Special(String),
}

/// Tokenizes text as the model does.
pub(crate) type Encode = Box<dyn Fn(&str) -> Vec<u32> + Send + Sync>;

/// The model's vocabulary as llguidance sees it.
struct VocabularyEnv {
    trie: TokTrie,
    encode: Encode,
}

impl TokenizerEnv for VocabularyEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        match std::str::from_utf8(s) {
            Ok(text) => (self.encode)(text),
            Err(_) => self.trie.greedy_tokenize(s),
        }
    }
}

/// A compiled vocabulary: builds one [`Constraint`] per call from a JSON Schema.
pub struct GrammarCompiler {
    factory: ParserFactory,
    eos: u32,
}

impl GrammarCompiler {
    /// Builds the trie of `tokens` (index = token id); `eos` is the end-of-answer token;
    /// `encode` tokenizes text as the model does.
    pub(crate) fn new(tokens: Vec<TokenBytes>, eos: u32, encode: Encode) -> Result<Self, String> {
        let words: Vec<Vec<u8>> = tokens
            .into_iter()
            .map(|t| match t {
                TokenBytes::Text(bytes) => bytes,
                TokenBytes::Special(name) => {
                    let mut bytes = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    bytes.extend_from_slice(name.as_bytes());
                    bytes
                }
            })
            .collect();
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: TokEnv = Arc::new(VocabularyEnv { trie, encode });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| format!("grammar engine: {e}"))?;
        // Warnings (not errors) would go to stderr otherwise.
        factory.set_stderr_log_level(0);
        Ok(Self { factory, eos })
    }

    /// A constraint for one answer matching `schema`; an error when the schema cannot be
    /// compiled.
    pub fn constraint(&self, schema: &serde_json::Value) -> Result<Constraint, String> {
        let mut schema = schema.clone();
        if let Some(object) = schema.as_object_mut() {
            // The JSON is one line with fixed separators (`, ` and `: `, as Python's
            // json.dumps writes it): whitespace is not the model's choice. A free choice let a
            // small model whose string hit its maxLength pad with blanks until max_tokens,
            // and pretty-printing cost a quarter of a judge answer's tokens; with no choice
            // left between the values, keys and punctuation are forced tokens that the
            // generation loop runs without sampling (see Constraint::forced).
            let options = serde_json::json!({
                "whitespace_flexible": false,
                "item_separator": ", ",
                "key_separator": ": ",
            });
            object.insert("x-guidance".into(), options);
        }
        let grammar = TopLevelGrammar::from_json_schema(schema);
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| format!("the answer's JSON Schema cannot be compiled: {e}"))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(e) = matcher.get_error() {
            return Err(format!("the answer's JSON Schema cannot be compiled: {e}"));
        }
        Ok(Constraint {
            matcher,
            eos: self.eos,
        })
    }
}

/// The grammar state of one answer being generated.
pub struct Constraint {
    matcher: Matcher,
    eos: u32,
}

impl Constraint {
    /// Sets the logits of every token the grammar forbids next to minus infinity; the stop
    /// tokens are allowed exactly when the answer may end here. Returns false when nothing is
    /// allowed (the answer is complete).
    pub fn mask(&mut self, logits: &mut [f32], stop_ids: &[u32]) -> Result<bool, String> {
        if self.matcher.is_stopped() {
            return Ok(false);
        }
        let mask = self
            .matcher
            .compute_mask()
            .map_err(|e| format!("grammar: {e}"))?;
        let may_stop = mask.is_allowed(self.eos);
        let mut any = false;
        for (id, logit) in logits.iter_mut().enumerate() {
            let id = id as u32;
            let allowed = if stop_ids.contains(&id) || id == self.eos {
                may_stop
            } else {
                mask.is_allowed(id)
            };
            if allowed {
                any = true;
            } else {
                *logit = f32::NEG_INFINITY;
            }
        }
        Ok(any)
    }

    /// The tokens the grammar forces next (at most `limit`), in the vocabulary's own
    /// tokenization of the forced bytes, already accepted: they need no sampling, so a
    /// generation loop runs them through the model together with the token before them.
    /// Empty where the next token is a real choice.
    pub fn forced(&mut self, limit: usize) -> Result<Vec<u32>, String> {
        if self.matcher.is_stopped() || limit == 0 {
            return Ok(Vec::new());
        }
        let mut tokens = self.matcher.compute_ff_tokens();
        if let Some(e) = self.matcher.get_error() {
            return Err(format!("grammar: {e}"));
        }
        tokens.truncate(limit);
        self.matcher
            .consume_tokens(&tokens)
            .map_err(|e| format!("grammar: {e}"))?;
        Ok(tokens)
    }

    /// Whether the answer is complete (nothing more may follow).
    pub fn is_complete(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Advances the grammar past `token` (one the mask allowed).
    pub fn accept(&mut self, token: u32) -> Result<(), String> {
        self.matcher
            .consume_token(token)
            .map_err(|e| format!("grammar: {e}"))
    }
}

/// GPT-2's byte-level alphabet: the character that stands for each byte in a token string.
pub(crate) fn byte_level_decoder() -> std::collections::HashMap<char, u8> {
    let mut map = std::collections::HashMap::new();
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        let c = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
        map.insert(c, b);
    }
    map
}

/// Each token's bytes (or its name, for special markers) of a GGUF vocabulary: SentencePiece
/// pieces as their text or byte, gpt2 tokens through the byte-level alphabet.
pub(crate) fn token_bytes(tokenizer: &crate::gguf::GgufTokenizer) -> Vec<TokenBytes> {
    use crate::gguf::SpmPiece;
    let byte_level = byte_level_decoder();
    tokenizer
        .tokens
        .iter()
        .enumerate()
        .map(|(id, token)| {
            if tokenizer.special[id] {
                return TokenBytes::Special(token.clone());
            }
            match &tokenizer.spm_pieces {
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
