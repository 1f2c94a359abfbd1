//! Model manifests: what `models/*.toml` says about a supported model (architecture, pooling,
//! normalisation, max length, instruction templates, default dtype). The manifests are compiled
//! into the binary, so a model directory alone is enough at run time.

use serde::Deserialize;

use crate::dataset::TextKind;
use crate::error::{Error, Result, Setting};

/// The FreshStack retrieval task, as the reference's later examples phrase it (Qwen3-Embedding).
pub const FRESHSTACK_TASK: &str = "Given a technical question, retrieve relevant code snippets or technical documentation that best answer the question";

/// Network family of an encoder: selects the forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Architecture {
    /// BERT-family bidirectional encoders (MiniLM, BGE, E5).
    Bert,
    /// Mistral decoders (E5-Mistral).
    Mistral,
    /// Qwen2 decoders (gte-Qwen2).
    Qwen2,
    /// Qwen3 decoders (Qwen3-Embedding), causal or bidirectional (pplx-embed).
    Qwen3,
    /// Gemma-2 decoders (BGE-multilingual-Gemma2).
    Gemma2,
    /// Gemma-3 text models, causal (harrier) or bidirectional (EmbeddingGemma).
    Gemma3,
    /// (XLM-)RoBERTa bidirectional encoders (BGE-M3, bge-reranker-base / -v2-m3).
    #[serde(rename = "xlm-roberta")]
    XlmRoberta,
    /// MPNet bidirectional encoders (all-mpnet-base-v2).
    #[serde(rename = "mpnet")]
    MpNet,
    /// ModernBERT bidirectional encoders (GTE-ModernBERT).
    #[serde(rename = "modernbert")]
    ModernBert,
    /// nomic-bert bidirectional encoders (nomic-embed-text, CodeRankEmbed).
    #[serde(rename = "nomic-bert")]
    NomicBert,
    /// EuroBERT bidirectional encoders (Jina v5 text nano's backbone).
    #[serde(rename = "eurobert")]
    EuroBert,
}

impl Architecture {
    /// From a `config.json` `model_type`.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Some(match model_type {
            "bert" => Self::Bert,
            "mistral" => Self::Mistral,
            "qwen2" => Self::Qwen2,
            // pplx-embed: Qwen3 with bidirectional attention (`QwenConfig::bidirectional`).
            "qwen3" | "bidirectional_pplx_qwen3" => Self::Qwen3,
            "gemma2" => Self::Gemma2,
            "gemma3_text" | "gemma3" => Self::Gemma3,
            "xlm-roberta" | "roberta" => Self::XlmRoberta,
            "mpnet" => Self::MpNet,
            "modernbert" => Self::ModernBert,
            "nomic_bert" | "nomic-bert" => Self::NomicBert,
            "eurobert" => Self::EuroBert,
            _ => return None,
        })
    }

    /// Why a `model_type` [`Architecture::from_model_type`] does not know is refused, naming the
    /// supported ones (and, where one exists, the checkpoint to use instead).
    pub fn unknown_message(model_type: &str) -> String {
        let instead = match model_type {
            // The base repository keeps four LoRA adapters beside the backbone; Jina publishes
            // each task's adapter merged into a plain checkpoint (nano's: EuroBERT).
            "jina_embeddings_v5" => {
                "; for retrieval use the adapter-merged checkpoint, \
                 e.g. jinaai/jina-embeddings-v5-text-nano-retrieval"
            }
            _ => "",
        };
        format!(
            "unknown architecture '{model_type}' (supported: {}){instead}",
            Self::SUPPORTED
        )
    }

    /// The `model_type`s [`Architecture::from_model_type`] knows, for messages.
    pub const SUPPORTED: &'static str = "bert, xlm-roberta, mpnet, modernbert, nomic_bert, mistral, qwen2, qwen3, bidirectional_pplx_qwen3, gemma2, gemma3_text, eurobert";

    /// True for the decoder families (last-token pooling and EOS handling by default; a
    /// bidirectional checkpoint of one is still a decoder here).
    pub fn is_decoder(self) -> bool {
        !matches!(
            self,
            Self::Bert
                | Self::XlmRoberta
                | Self::MpNet
                | Self::ModernBert
                | Self::NomicBert
                | Self::EuroBert
        )
    }

    /// The first position id of a right-padded input: `padding_idx + 1` where positions count
    /// after the padding token (RoBERTa, MPNet), else 0.
    pub fn position_offset(self, pad_token_id: Option<usize>) -> usize {
        match self {
            Self::XlmRoberta | Self::MpNet => pad_token_id.unwrap_or(1) + 1,
            _ => 0,
        }
    }
}

/// What a model computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModelKind {
    /// A text embedder (`freshstack embed`): one vector per text.
    #[default]
    Embedding,
    /// A cross-encoder reranker (`freshstack rerank`): one relevance score per
    /// (query, document) pair, from a classification head.
    CrossEncoder,
}

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pooling {
    /// The first token's state (`[CLS]`).
    Cls,
    /// The mean of the non-padding tokens' states.
    Mean,
    /// The last non-padding token's state (decoders).
    LastToken,
}

impl std::str::FromStr for Pooling {
    type Err = Error;

    /// Parses `cls`, `mean` or `last_token` / `last-token`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "cls" => Ok(Self::Cls),
            "mean" => Ok(Self::Mean),
            "last_token" | "last-token" | "lasttoken" => Ok(Self::LastToken),
            other => Err(Error::invalid(
                Setting::Pooling,
                format!("unknown pooling '{other}' (expected cls, mean or last-token)"),
            )),
        }
    }
}

/// Floating-point type for weights and activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelDType {
    /// 32-bit float.
    F32,
    /// bfloat16 (7B models: half the memory, no f32 copy of the weights).
    Bf16,
    /// IEEE half.
    F16,
}

impl std::str::FromStr for ModelDType {
    type Err = Error;

    /// Parses `f32`, `bf16` or `f16`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "f32" => Ok(Self::F32),
            "bf16" => Ok(Self::Bf16),
            "f16" => Ok(Self::F16),
            other => Err(Error::invalid(
                Setting::Dtype,
                format!("unknown dtype '{other}' (expected f32, bf16 or f16)"),
            )),
        }
    }
}

/// One `models/*.toml` file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelManifest {
    /// Hugging Face id, e.g. `intfloat/e5-mistral-7b-instruct`.
    pub id: String,
    /// Embedder (default) or cross-encoder reranker.
    #[serde(default)]
    pub kind: ModelKind,
    /// Other names the model is known by.
    #[serde(default)]
    pub aliases: Vec<String>,
    /// Network family.
    pub architecture: Architecture,
    /// Pooling of token states.
    pub pooling: Pooling,
    /// Whether vectors are L2-normalised.
    pub normalize: bool,
    /// Longest input in tokens, special tokens included; longer inputs are truncated.
    pub max_length: usize,
    /// Output dimension.
    pub dim: usize,
    /// Matryoshka widths the model was trained to be cut to (`--dimensions`), largest first;
    /// empty when it defines none.
    #[serde(default)]
    pub matryoshka: Vec<usize>,
    /// Default weight/compute dtype.
    pub dtype: ModelDType,
    /// Append the tokenizer's EOS token when its post-processor did not (decoders).
    #[serde(default)]
    pub append_eos: bool,
    /// Query wrapper: `{task}` and `{text}` are substituted.
    pub query_template: String,
    /// Document wrapper: `{text}` is substituted.
    pub document_template: String,
    /// Task description substituted for `{task}`.
    pub task: String,
}

const BUILTIN: &[(&str, &str)] = &[
    (
        "all-MiniLM-L6-v2",
        include_str!("../../models/all-MiniLM-L6-v2.toml"),
    ),
    (
        "all-mpnet-base-v2",
        include_str!("../../models/all-mpnet-base-v2.toml"),
    ),
    (
        "embeddinggemma-300m",
        include_str!("../../models/embeddinggemma-300m.toml"),
    ),
    (
        "stella_en_1.5B_v5",
        include_str!("../../models/stella_en_1.5B_v5.toml"),
    ),
    (
        "gte-modernbert-base",
        include_str!("../../models/gte-modernbert-base.toml"),
    ),
    (
        "nomic-embed-text-v1.5",
        include_str!("../../models/nomic-embed-text-v1.5.toml"),
    ),
    (
        "bge-small-en-v1.5",
        include_str!("../../models/bge-small-en-v1.5.toml"),
    ),
    (
        "bge-base-en-v1.5",
        include_str!("../../models/bge-base-en-v1.5.toml"),
    ),
    ("e5-small-v2", include_str!("../../models/e5-small-v2.toml")),
    ("e5-base-v2", include_str!("../../models/e5-base-v2.toml")),
    (
        "e5-mistral-7b-instruct",
        include_str!("../../models/e5-mistral-7b-instruct.toml"),
    ),
    (
        "bge-multilingual-gemma2",
        include_str!("../../models/bge-multilingual-gemma2.toml"),
    ),
    (
        "gte-Qwen2-7B-instruct",
        include_str!("../../models/gte-Qwen2-7B-instruct.toml"),
    ),
    (
        "gte-Qwen2-1.5B-instruct",
        include_str!("../../models/gte-Qwen2-1.5B-instruct.toml"),
    ),
    (
        "Qwen3-Embedding-0.6B",
        include_str!("../../models/Qwen3-Embedding-0.6B.toml"),
    ),
    (
        "Qwen3-Embedding-4B",
        include_str!("../../models/Qwen3-Embedding-4B.toml"),
    ),
    (
        "Qwen3-Embedding-8B",
        include_str!("../../models/Qwen3-Embedding-8B.toml"),
    ),
    (
        "pplx-embed-v1-0.6b",
        include_str!("../../models/pplx-embed-v1-0.6b.toml"),
    ),
    (
        "pplx-embed-v1-4b",
        include_str!("../../models/pplx-embed-v1-4b.toml"),
    ),
    (
        "CodeRankEmbed",
        include_str!("../../models/CodeRankEmbed.toml"),
    ),
    (
        "harrier-oss-v1-27b",
        include_str!("../../models/harrier-oss-v1-27b.toml"),
    ),
    (
        "harrier-oss-v1-0.6b",
        include_str!("../../models/harrier-oss-v1-0.6b.toml"),
    ),
    (
        "harrier-oss-v1-270m",
        include_str!("../../models/harrier-oss-v1-270m.toml"),
    ),
    (
        "jina-embeddings-v5-text-nano-retrieval",
        include_str!("../../models/jina-embeddings-v5-text-nano-retrieval.toml"),
    ),
    (
        "ms-marco-MiniLM-L-6-v2",
        include_str!("../../models/ms-marco-MiniLM-L-6-v2.toml"),
    ),
    (
        "bge-reranker-base",
        include_str!("../../models/bge-reranker-base.toml"),
    ),
    (
        "bge-reranker-v2-m3",
        include_str!("../../models/bge-reranker-v2-m3.toml"),
    ),
];

impl ModelManifest {
    /// Parses a manifest; `origin` names it in errors.
    pub fn from_toml(text: &str, origin: &str) -> Result<Self> {
        toml::from_str(text)
            .map_err(|e| Error::invalid_config(format!("manifest {origin}"), e.to_string()))
    }

    /// Every built-in manifest (`models/*.toml`).
    pub fn builtin() -> Result<Vec<Self>> {
        BUILTIN
            .iter()
            .map(|(name, text)| Self::from_toml(text, &format!("models/{name}.toml")))
            .collect()
    }

    /// The built-in manifest whose id, short name (after the `/`) or alias equals `name`
    /// (case-insensitive), if any.
    pub fn find(name: &str) -> Result<Option<Self>> {
        let wanted = name.trim_end_matches('/').to_ascii_lowercase();
        Ok(Self::builtin()?.into_iter().find(|m| {
            let short = m.id.rsplit('/').next().unwrap_or(&m.id);
            m.id.to_ascii_lowercase() == wanted
                || short.to_ascii_lowercase() == wanted
                || m.aliases.iter().any(|a| a.to_ascii_lowercase() == wanted)
        }))
    }

    /// Wraps `text` in the query or document template.
    pub fn apply_template(&self, text: &str, kind: TextKind) -> String {
        let template = match kind {
            TextKind::Query => &self.query_template,
            TextKind::Document => &self.document_template,
        };
        // Substitute the trusted task first, then the text once, so braces inside the text are
        // never interpreted.
        let template = template.replace("{task}", &self.task);
        match template.split_once("{text}") {
            Some((before, after)) => format!("{before}{text}{after}"),
            None => format!("{template}{text}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_manifests_parse_and_are_consistent() {
        let all = ModelManifest::builtin().unwrap();
        assert_eq!(all.len(), BUILTIN.len());
        for m in &all {
            assert!(m.query_template.contains("{text}"), "{}", m.id);
            assert!(m.document_template.contains("{text}"), "{}", m.id);
            assert_eq!(m.task, FRESHSTACK_TASK, "{}", m.id);
            // Encoders never pool the last token (but EuroBERT for Jina v5, which pools the
            // tokenizer's last one); decoders pool it unless mean pooled (Stella,
            // EmbeddingGemma), and then append no EOS.
            let last = m.pooling == Pooling::LastToken;
            if m.architecture == Architecture::EuroBert {
                assert!(!m.append_eos, "{}", m.id);
            } else if !m.architecture.is_decoder() {
                assert!(!last, "{}", m.id);
            } else if m.pooling == Pooling::Mean {
                assert!(!m.append_eos, "{}", m.id);
            } else {
                assert!(last, "{}", m.id);
            }
        }
    }

    #[test]
    fn finds_by_id_short_name_and_alias() {
        let m = ModelManifest::find("intfloat/e5-mistral-7b-instruct")
            .unwrap()
            .unwrap();
        assert_eq!(m.architecture, Architecture::Mistral);
        assert!(ModelManifest::find("ALL-MINILM-L6-V2").unwrap().is_some());
        assert!(ModelManifest::find("gte-Qwen2").unwrap().is_some());
        assert!(ModelManifest::find("no-such-model").unwrap().is_none());
        let jina = ModelManifest::find("jina-embeddings-v5-text-nano")
            .unwrap()
            .unwrap();
        assert_eq!(jina.architecture, Architecture::EuroBert);
        assert_eq!(jina.apply_template("x", TextKind::Document), "Document: x");
        assert!(Architecture::unknown_message("jina_embeddings_v5").contains("-retrieval"));
        assert!(!Architecture::unknown_message("t5").contains("-retrieval"));
    }

    #[test]
    fn templates_substitute_task_and_text_once() {
        let m = ModelManifest::find("e5-mistral-7b-instruct")
            .unwrap()
            .unwrap();
        let q = m.apply_template("why {task}?", TextKind::Query);
        assert_eq!(
            q,
            format!("Instruct: {FRESHSTACK_TASK}\nQuery: why {{task}}?")
        );
        assert_eq!(m.apply_template("body", TextKind::Document), "body");
        let q3 = ModelManifest::find("Qwen3-Embedding-0.6B")
            .unwrap()
            .unwrap();
        assert!(
            q3.apply_template("x", TextKind::Query)
                .ends_with("\nQuery:x")
        );
    }
}
