//! Embedding models stored as GGUF (llama.cpp's format): `bert`, `nomic-bert` and `qwen3`
//! (Qwen3-Embedding: a `pooling_type` marks it an embedder, not a chat model) files as
//! llama.cpp's converter writes them, in f32, f16, bf16 or any quantization candle reads
//! (Q8_0, Q4_K, ...). [`GgufEncoder::open`] checks the metadata before reading any weight (an
//! architecture, pooling or tokenizer we do not run is refused in one line naming the file),
//! rebuilds the tokenizer from the vocabulary llama.cpp stores (WordPiece for the BERT
//! families, `crate::gguf`'s byte-level BPE for Qwen3), writes the
//! `config.json` the architecture's model file expects, and maps the tensors onto the Hugging
//! Face names that file loads. The layers' block-quantized matrices stay as the file stores
//! them, memory-mapped: the fused CPU layers dequantize them per product (`kernels::dense`) and
//! candle's layers (another device or dtype) dequantize them at load; every other tensor is
//! read in the dtype the encoder computes in.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use memmap2::Mmap;
use serde_json::json;
use tokenizers::Tokenizer;

use super::manifest::{Architecture, Pooling};
use crate::error::{Error, Result};
use crate::kernels::quant::QMatrix;

/// The GGUF architectures we embed with, for messages.
const SUPPORTED: &str = "bert, nomic-bert, qwen3 (with a pooling_type)";

/// A GGUF embedding model, checked and read.
pub(crate) struct GgufEncoder {
    /// The architecture the tensors are named for.
    pub architecture: Architecture,
    /// A Hugging Face style `config.json` for that architecture.
    pub config: String,
    /// The vocabulary's tokenizer: WordPiece (`[CLS] text [SEP]`, lower-cased) or byte-level
    /// BPE.
    pub tokenizer: Tokenizer,
    /// `tokenizer.ggml.add_eos_token`: the model reads an EOS after the text (Qwen3-Embedding).
    pub add_eos: bool,
    /// The weights under their Hugging Face names, but for the layers' block-quantized
    /// matrices: those are in `quantized`.
    pub tensors: HashMap<String, Tensor>,
    /// The layers' block-quantized matrices (Q8_0, Q4_K, ...) under their Hugging Face names,
    /// as the file stores them (memory-mapped).
    pub quantized: HashMap<String, QMatrix>,
    /// `ARCH.pooling_type`.
    pub pooling: Pooling,
    /// `ARCH.context_length`.
    pub context_length: Option<usize>,
}

/// Metadata access with messages that name the file.
struct Meta<'a> {
    content: &'a Content,
    file: &'a Path,
    arch: String,
}

impl Meta<'_> {
    fn err(&self, what: impl std::fmt::Display) -> Error {
        Error::model(self.file.display().to_string(), what.to_string())
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.content.metadata.get(key)
    }

    fn integer(&self, key: &str) -> Result<Option<u64>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let n = match value {
            Value::U8(n) => Some(u64::from(*n)),
            Value::U16(n) => Some(u64::from(*n)),
            Value::U32(n) => Some(u64::from(*n)),
            Value::U64(n) => Some(*n),
            Value::I8(n) => u64::try_from(*n).ok(),
            Value::I16(n) => u64::try_from(*n).ok(),
            Value::I32(n) => u64::try_from(*n).ok(),
            Value::I64(n) => u64::try_from(*n).ok(),
            _ => None,
        };
        n.map(Some)
            .ok_or_else(|| self.err(format!("metadata {key} is not a non-negative integer")))
    }

    fn arch_usize(&self, key: &str) -> Result<usize> {
        let full = format!("{}.{key}", self.arch);
        self.integer(&full)?
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| self.err(format!("metadata {full} is missing")))
    }

    fn arch_float(&self, key: &str) -> Result<Option<f64>> {
        let full = format!("{}.{key}", self.arch);
        match self.get(&full) {
            None => Ok(None),
            Some(Value::F32(x)) => Ok(Some(f64::from(*x))),
            Some(Value::F64(x)) => Ok(Some(*x)),
            Some(_) => Err(self.err(format!("metadata {full} is not a number"))),
        }
    }

    fn string(&self, key: &str) -> Option<&str> {
        match self.get(key) {
            Some(Value::String(s)) => Some(s.as_str()),
            _ => None,
        }
    }

    fn token_id(&self, key: &str) -> Result<Option<u32>> {
        Ok(self.integer(key)?.and_then(|n| u32::try_from(n).ok()))
    }

    /// Rows of tensor `name` (its first dimension), if present.
    fn rows(&self, name: &str) -> Option<usize> {
        self.content
            .tensor_infos
            .get(name)
            .and_then(|info| info.shape.dims().first().copied())
    }
}

impl GgufEncoder {
    /// Opens `path`, checks that it is an embedding model we run, and reads its weights as
    /// `dtype` (on the CPU: the encoder's `VarBuilder` moves them to its device), the layers'
    /// block-quantized matrices left as they are.
    pub fn open(path: &Path, dtype: DType) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: mapped read-only; like every mmap user we rely on the file not being
        // truncated while the model is loaded.
        let map = Arc::new(unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?);
        let mut reader = std::io::BufReader::new(&file);
        let content = Content::read(&mut reader).map_err(|e| {
            Error::model(path.display().to_string(), format!("not a GGUF file: {e}"))
        })?;
        let mut meta = Meta {
            content: &content,
            file: path,
            arch: String::new(),
        };
        if let Some(kind) = meta.string("general.type")
            && kind != "model"
        {
            return Err(meta.err(format!("general.type is '{kind}', not a model")));
        }
        let arch = meta
            .string("general.architecture")
            .ok_or_else(|| meta.err("metadata general.architecture is missing"))?
            .to_string();
        let pooling_key = format!("{arch}.pooling_type");
        let architecture = match arch.as_str() {
            "bert" => Architecture::Bert,
            "nomic-bert" => Architecture::NomicBert,
            "qwen3" if meta.get(&pooling_key).is_some() => Architecture::Qwen3,
            other => {
                return Err(meta.err(format!(
                    "GGUF architecture '{other}' is not an encoder we run (supported: {SUPPORTED})"
                )));
            }
        };
        meta.arch = arch;
        if !architecture.is_decoder()
            && let Some(Value::Bool(true)) = meta.get(&format!("{}.attention.causal", meta.arch))
        {
            return Err(meta.err(format!("{}.attention.causal is true", meta.arch)));
        }
        let pooling = match meta.integer(&format!("{}.pooling_type", meta.arch))? {
            Some(1) => Pooling::Mean,
            Some(2) => Pooling::Cls,
            Some(3) => Pooling::LastToken,
            Some(0) => return Err(meta.err("pooling_type 0 (none): not a sentence embedder")),
            Some(4) => return Err(meta.err("pooling_type 4 (rank) is a reranker, not an embedder")),
            Some(n) => return Err(meta.err(format!("pooling_type {n} is not supported"))),
            None => return Err(meta.err(format!("metadata {}.pooling_type is missing", meta.arch))),
        };
        let tokenizer = if architecture.is_decoder() {
            let (tokenizer, _) = crate::gguf::GgufTokenizer::from_metadata(&content.metadata)
                .map_err(|e| meta.err(e))?;
            tokenizer.tokenizer
        } else {
            wordpiece_tokenizer(&meta)?
        };
        let add_eos = matches!(
            meta.get("tokenizer.ggml.add_eos_token"),
            Some(Value::Bool(true))
        );
        let config = config_json(&meta, architecture)?;
        let context_length = meta
            .integer(&format!("{}.context_length", meta.arch))?
            .and_then(|n| usize::try_from(n).ok());

        let mut tensors = HashMap::with_capacity(content.tensor_infos.len());
        let mut quantized = HashMap::new();
        let mut names: Vec<&String> = content.tensor_infos.keys().collect();
        names.sort();
        for name in names {
            // A decoder's output projection (the language-model head) is not part of the
            // embedder.
            if architecture.is_decoder() && name.starts_with("output.") {
                continue;
            }
            let hf_name = hf_tensor_name(architecture, name).ok_or_else(|| {
                meta.err(format!(
                    "tensor '{name}' is not part of a {} encoder we know",
                    meta.arch
                ))
            })?;
            // A layer's matrix in blocks stays so (the fused CPU layers multiply it as it is);
            // one the engine cannot map (misaligned) is dequantized like the rest.
            if name.starts_with("blk.")
                && let Ok(matrix) = QMatrix::from_gguf(&content, &map, name)
                && matrix.is_block_quantized()
            {
                quantized.insert(hf_name, matrix);
                continue;
            }
            let tensor = content
                .tensor(&mut reader, name, &Device::Cpu)
                .and_then(|q| q.dequantize(&Device::Cpu))
                .and_then(|t| t.to_dtype(dtype))
                .map_err(|e| meta.err(format!("tensor '{name}': {e}")))?;
            tensors.insert(hf_name, tensor);
        }
        Ok(Self {
            architecture,
            config,
            tokenizer,
            add_eos,
            tensors,
            quantized,
            pooling,
            context_length,
        })
    }
}

/// The Hugging Face name of llama.cpp tensor `name` for `arch`, `None` when unknown.
fn hf_tensor_name(arch: Architecture, name: &str) -> Option<String> {
    let (stem, suffix) = name.rsplit_once('.')?;
    if suffix != "weight" && suffix != "bias" {
        return None;
    }
    if arch == Architecture::Qwen3 {
        return qwen3_tensor_name(stem).map(|hf| format!("{hf}.{suffix}"));
    }
    let global = match (arch, stem) {
        (_, "token_embd") => Some("embeddings.word_embeddings"),
        (_, "token_types") => Some("embeddings.token_type_embeddings"),
        (Architecture::Bert, "position_embd") => Some("embeddings.position_embeddings"),
        (Architecture::Bert, "token_embd_norm") => Some("embeddings.LayerNorm"),
        (Architecture::NomicBert, "token_embd_norm") => Some("emb_ln"),
        _ => None,
    };
    if let Some(global) = global {
        return Some(format!("{global}.{suffix}"));
    }
    let rest = stem.strip_prefix("blk.")?;
    let (layer, part) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let mapped = match (arch, part) {
        (Architecture::Bert, "attn_q") => "attention.self.query",
        (Architecture::Bert, "attn_k") => "attention.self.key",
        (Architecture::Bert, "attn_v") => "attention.self.value",
        (Architecture::Bert, "attn_output") => "attention.output.dense",
        (Architecture::Bert, "attn_output_norm") => "attention.output.LayerNorm",
        (Architecture::Bert, "ffn_up") => "intermediate.dense",
        (Architecture::Bert, "ffn_down") => "output.dense",
        (Architecture::Bert, "layer_output_norm") => "output.LayerNorm",
        (Architecture::NomicBert, "attn_qkv") => "attn.Wqkv",
        (Architecture::NomicBert, "attn_output") => "attn.out_proj",
        (Architecture::NomicBert, "attn_output_norm") => "norm1",
        (Architecture::NomicBert, "ffn_up") => "mlp.fc11",
        (Architecture::NomicBert, "ffn_gate") => "mlp.fc12",
        (Architecture::NomicBert, "ffn_down") => "mlp.fc2",
        (Architecture::NomicBert, "layer_output_norm") => "norm2",
        _ => return None,
    };
    let layers = if arch == Architecture::Bert {
        "encoder.layer"
    } else {
        "encoder.layers"
    };
    Some(format!("{layers}.{layer}.{mapped}.{suffix}"))
}

/// The Hugging Face name (without `.weight`) of a `qwen3` GGUF tensor stem.
fn qwen3_tensor_name(stem: &str) -> Option<String> {
    match stem {
        "token_embd" => return Some("embed_tokens".into()),
        "output_norm" => return Some("norm".into()),
        _ => {}
    }
    let (layer, part) = stem.strip_prefix("blk.")?.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let mapped = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "attn_q_norm" => "self_attn.q_norm",
        "attn_k_norm" => "self_attn.k_norm",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("layers.{layer}.{mapped}"))
}

/// The `config.json` the model file of `arch` reads, from the GGUF metadata and tensor shapes.
fn config_json(meta: &Meta, arch: Architecture) -> Result<String> {
    let vocab = meta
        .rows("token_embd.weight")
        .ok_or_else(|| meta.err("tensor token_embd.weight is missing"))?;
    let hidden = meta.arch_usize("embedding_length")?;
    let layers = meta.arch_usize("block_count")?;
    let heads = meta.arch_usize("attention.head_count")?;
    let inner = meta.arch_usize("feed_forward_length")?;
    let eps = meta
        .arch_float("attention.layer_norm_epsilon")?
        .unwrap_or(1e-12);
    let segments = meta.rows("token_types.weight").unwrap_or(2);
    let config = match arch {
        Architecture::Qwen3 => {
            let kv_heads = meta.arch_usize("attention.head_count_kv").unwrap_or(heads);
            let head_dim = meta
                .arch_usize("attention.key_length")
                .unwrap_or(hidden / heads.max(1));
            json!({
                "model_type": "qwen3",
                "vocab_size": vocab,
                "hidden_size": hidden,
                "intermediate_size": inner,
                "num_hidden_layers": layers,
                "num_attention_heads": heads,
                "num_key_value_heads": kv_heads,
                "head_dim": head_dim,
                "rms_norm_eps": meta.arch_float("attention.layer_norm_rms_epsilon")?.unwrap_or(1e-6),
                "rope_theta": meta.arch_float("rope.freq_base")?.unwrap_or(1_000_000.0),
                "eos_token_id": meta.token_id("tokenizer.ggml.eos_token_id")?,
                "max_position_embeddings": meta
                    .integer(&format!("{}.context_length", meta.arch))?
                    .unwrap_or(32_768),
            })
        }
        Architecture::NomicBert => json!({
            "model_type": "nomic_bert",
            "vocab_size": vocab,
            "hidden_size": hidden,
            "n_embd": hidden,
            "n_layer": layers,
            "n_head": heads,
            "n_inner": inner,
            "type_vocab_size": segments,
            "layer_norm_epsilon": eps,
            "rotary_emb_base": meta.arch_float("rope.freq_base")?.unwrap_or(10_000.0),
            "qkv_proj_bias": meta.content.tensor_infos.contains_key("blk.0.attn_qkv.bias"),
            "mlp_fc1_bias": meta.content.tensor_infos.contains_key("blk.0.ffn_up.bias"),
            "mlp_fc2_bias": meta.content.tensor_infos.contains_key("blk.0.ffn_down.bias"),
        }),
        _ => json!({
            "model_type": "bert",
            "vocab_size": vocab,
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "intermediate_size": inner,
            "max_position_embeddings": meta
                .rows("position_embd.weight")
                .ok_or_else(|| meta.err("tensor position_embd.weight is missing"))?,
            "type_vocab_size": segments,
            "layer_norm_eps": eps,
            "hidden_act": "gelu",
        }),
    };
    Ok(config.to_string())
}

/// The WordPiece tokenizer of a `bert` vocabulary as llama.cpp stores it: word-initial pieces
/// carry a `▁` prefix and continuations none (the inverse of the converter's "phantom space"),
/// bracketed specials as they are. Lower-cased with accents stripped, as llama.cpp's WPM
/// tokenizer always does (GGUF records no casing).
fn wordpiece_tokenizer(meta: &Meta) -> Result<Tokenizer> {
    match meta.string("tokenizer.ggml.model") {
        Some("bert") => {}
        Some(other) => {
            return Err(meta.err(format!(
                "tokenizer.ggml.model '{other}' is not supported for encoders (only bert)"
            )));
        }
        None => return Err(meta.err("metadata tokenizer.ggml.model is missing")),
    }
    let tokens = match meta.get("tokenizer.ggml.tokens") {
        Some(Value::Array(items)) => items,
        _ => return Err(meta.err("metadata tokenizer.ggml.tokens is missing")),
    };
    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    for (id, token) in tokens.iter().enumerate() {
        let Value::String(token) = token else {
            return Err(meta.err(format!("tokenizer.ggml.tokens[{id}] is not a string")));
        };
        let piece = if token.starts_with('[') && token.ends_with(']') {
            token.clone()
        } else if let Some(word) = token.strip_prefix('\u{2581}') {
            word.to_string()
        } else {
            format!("##{token}")
        };
        vocab.entry(piece).or_insert_with(|| json!(id));
    }
    let rows = meta.rows("token_embd.weight").unwrap_or(0);
    if tokens.len() > rows {
        return Err(meta.err(format!(
            "the vocabulary has {} tokens but token_embd.weight {rows} rows",
            tokens.len()
        )));
    }
    let piece = |key: &str, fallback: &str| -> Result<(String, u32)> {
        let id = match meta.token_id(key)? {
            Some(id) => id,
            None => vocab
                .get(fallback)
                .and_then(|v| v.as_u64())
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| meta.err(format!("metadata {key} is missing")))?,
        };
        let text = match tokens.get(id as usize) {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(meta.err(format!("{key} {id} is outside the vocabulary"))),
        };
        Ok((text, id))
    };
    let cls = piece("tokenizer.ggml.bos_token_id", "[CLS]")?;
    let sep = piece("tokenizer.ggml.seperator_token_id", "[SEP]")?;
    let unk = piece("tokenizer.ggml.unknown_token_id", "[UNK]")?;
    let mut specials = vec![cls.clone(), sep.clone(), unk.clone()];
    if let Ok(pad) = piece("tokenizer.ggml.padding_token_id", "[PAD]") {
        specials.push(pad);
    }
    if let Some(id) = vocab.get("[MASK]").and_then(|v| v.as_u64()) {
        specials.push(("[MASK]".to_string(), id as u32));
    }
    specials.sort_by_key(|(_, id)| *id);
    specials.dedup();
    let added: Vec<serde_json::Value> = specials
        .iter()
        .map(|(content, id)| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let spec = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "BertProcessing", "sep": [sep.0, sep.1], "cls": [cls.0, cls.1]},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": unk.0, "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    });
    Tokenizer::from_bytes(spec.to_string().as_bytes())
        .map_err(|e| meta.err(format!("cannot rebuild the tokenizer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_names_map_to_hugging_face_names() {
        let nomic = Architecture::NomicBert;
        assert_eq!(
            hf_tensor_name(nomic, "blk.11.ffn_gate.weight").as_deref(),
            Some("encoder.layers.11.mlp.fc12.weight")
        );
        assert_eq!(
            hf_tensor_name(nomic, "token_embd_norm.bias").as_deref(),
            Some("emb_ln.bias")
        );
        assert_eq!(
            hf_tensor_name(Architecture::Bert, "blk.0.attn_q.bias").as_deref(),
            Some("encoder.layer.0.attention.self.query.bias")
        );
        assert_eq!(hf_tensor_name(nomic, "blk.0.attn_q.weight"), None);
        assert_eq!(
            hf_tensor_name(Architecture::Bert, "blk.0.ffn_gate.weight"),
            None
        );
        assert_eq!(hf_tensor_name(nomic, "output.weight"), None);
    }
}
