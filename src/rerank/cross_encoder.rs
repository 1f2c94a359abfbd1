//! The cross-encoder: a pair tokenizer, a BERT or XLM-RoBERTa backbone and the classification
//! head of the checkpoint, scoring (query, document) pairs with length-sorted token-budget
//! batching.
//!
//! Heads, as in `transformers`:
//! - `BertForSequenceClassification` (cross-encoder/ms-marco-MiniLM-L-6-v2):
//!   `classifier(tanh(pooler.dense(h[CLS])))`, segments 0/1 from the tokenizer.
//! - `XLMRobertaForSequenceClassification` (BAAI/bge-reranker-base, -v2-m3):
//!   `out_proj(tanh(dense(h[<s>])))`, no pooler, one segment, positions after `padding_idx`.
//!
//! The score is the head's single logit (no sigmoid): the order is what reranking needs.

use candle_core::{D, DType, Device, IndexOp, Module, Tensor};
use candle_nn::{Linear, VarBuilder};
use serde::Deserialize;
use tokenizers::{
    EncodeInput, Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::embed::{
    Architecture, BertConfig, BertFlavor, BertModel, DEFAULT_CPU_MAX_BATCH_TOKENS,
    DEFAULT_MAX_BATCH_TOKENS, DeviceSpec, ModelDType, ModelFiles, ModelKind, find_manifest,
    plan_batches, run_batches,
};
use crate::error::{Error, Result, Setting, candle_message};
use crate::progress::Progress;

/// Default longest pair, in tokens, for a cross-encoder without a manifest.
pub const DEFAULT_RERANK_MAX_LENGTH: usize = 512;

/// Scores (query, document) pairs. Carries no candle types.
pub trait Reranker: Send + Sync {
    /// One relevance score per pair, in input order (higher is more relevant).
    fn score(&self, pairs: &[(&str, &str)], progress: &dyn Progress) -> Result<PairScores>;
    /// The model's name, for messages and run tags.
    fn name(&self) -> &str;
}

/// The scores of a list of pairs plus what happened on the way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PairScores {
    /// One score per pair, in input order.
    pub scores: Vec<f32>,
    /// Pairs whose document (or, when the query alone was too long, both) was cut.
    pub num_truncated: usize,
    /// Tokens fed to the model (special tokens included, padding excluded).
    pub num_tokens: usize,
}

/// How to load a cross-encoder; `None` fields come from the manifest or the model's config.
#[derive(Debug, Clone, Default)]
pub struct RerankerOptions {
    /// Where the model runs: the CPU, or a CUDA device (feature `cuda`).
    pub device: DeviceSpec,
    /// Weight and compute dtype.
    pub dtype: Option<ModelDType>,
    /// Longest pair in tokens (special tokens included); documents are cut to fit.
    pub max_length: Option<usize>,
    /// Padded tokens per batch (default 2048 on the CPU, 16384 on a GPU).
    pub max_batch_tokens: Option<usize>,
}

#[derive(Deserialize)]
struct HeadConfig {
    model_type: Option<String>,
    #[serde(default)]
    id2label: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    num_labels: Option<usize>,
}

enum Head {
    /// BERT: pooler (dense + tanh) then classifier.
    Bert { pooler: Linear, classifier: Linear },
    /// RoBERTa: dense + tanh then out_proj.
    Roberta { dense: Linear, out_proj: Linear },
}

impl Head {
    fn forward(&self, cls: &Tensor) -> candle_core::Result<Tensor> {
        let (first, second) = match self {
            Head::Bert { pooler, classifier } => (pooler, classifier),
            Head::Roberta { dense, out_proj } => (dense, out_proj),
        };
        second.forward(&first.forward(cls)?.tanh()?)
    }
}

/// A loaded cross-encoder.
pub struct CrossEncoder {
    name: String,
    architecture: Architecture,
    /// Truncates only the document.
    tokenizer: Tokenizer,
    /// Fallback when the query alone is too long: cuts the longer of the two.
    fallback: Tokenizer,
    backbone: BertModel,
    head: Head,
    device: Device,
    max_length: usize,
    max_batch_tokens: usize,
}

/// A tokenized pair: token ids and segment ids.
type PairTokens = (Vec<u32>, Vec<u32>);

fn model_err(name: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::model(name, candle_message(&e))
}

fn with_truncation(
    mut tokenizer: Tokenizer,
    max_length: usize,
    strategy: TruncationStrategy,
    name: &str,
) -> Result<Tokenizer> {
    tokenizer.with_padding(None);
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            strategy,
            stride: 0,
            direction: TruncationDirection::Right,
        }))
        .map_err(|e| Error::model(name, format!("tokenizer truncation: {e}")))?;
    Ok(tokenizer)
}

impl CrossEncoder {
    /// Loads the cross-encoder in `files`: a BERT or XLM-RoBERTa sequence classifier with one
    /// label, its `tokenizer.json` and memory-mapped weights.
    pub fn load(files: &ModelFiles, options: &RerankerOptions) -> Result<Self> {
        let name = files.name.as_str();
        if files.gguf.is_some() {
            return Err(Error::model(
                name,
                "GGUF rerankers are not supported: give the model's directory",
            ));
        }
        let config_text = crate::dataset::bounded::read_text(
            &files.config,
            crate::dataset::bounded::MAX_SETTINGS_BYTES,
        )
        .map_err(|e| Error::io(&files.config, e))?;
        let parse_err =
            |e: serde_json::Error| Error::model(name, format!("{}: {e}", files.config.display()));
        let head_config: HeadConfig = serde_json::from_str(&config_text).map_err(parse_err)?;
        let bert_config: BertConfig = serde_json::from_str(&config_text).map_err(parse_err)?;
        let model_type = head_config.model_type.as_deref().unwrap_or("");
        let architecture = match Architecture::from_model_type(model_type) {
            Some(a @ (Architecture::Bert | Architecture::XlmRoberta)) => a,
            _ => {
                return Err(Error::model(
                    name,
                    format!(
                        "model_type '{model_type}' is not a supported cross-encoder (supported: bert, xlm-roberta)"
                    ),
                ));
            }
        };
        let labels = head_config
            .num_labels
            .or_else(|| head_config.id2label.as_ref().map(|m| m.len()))
            .unwrap_or(1);
        if labels != 1 {
            return Err(Error::model(
                name,
                format!("has {labels} labels; only single-logit cross-encoders are supported"),
            ));
        }
        let manifest = find_manifest(files)?;
        if let Some(m) = &manifest
            && m.kind != ModelKind::CrossEncoder
        {
            return Err(Error::model(
                name,
                "is an embedding model, not a cross-encoder: use `freshstack embed`",
            ));
        }
        let dtype = options
            .dtype
            .or(manifest.as_ref().map(|m| m.dtype))
            .unwrap_or(ModelDType::F32);
        let dtype = match dtype {
            ModelDType::F32 => DType::F32,
            ModelDType::Bf16 => DType::BF16,
            ModelDType::F16 => DType::F16,
        };
        let device = options.device.device()?;
        // SAFETY: the weight files are memory-mapped read-only; like every mmap user we rely on
        // them not being truncated while the model is loaded.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, &device) }
            .map_err(|e| Error::model(name, format!("cannot read weights: {e}")))?;
        let (flavor, prefix) = match architecture {
            Architecture::XlmRoberta => (BertFlavor::Roberta, "roberta"),
            _ => (BertFlavor::Bert, "bert"),
        };
        let backbone =
            BertModel::load(&bert_config, vb.clone(), flavor).map_err(model_err(name))?;
        let h = bert_config.hidden_size;
        let head = match flavor {
            BertFlavor::Bert => {
                let pooler = if vb.contains_tensor(&format!("{prefix}.pooler.dense.weight")) {
                    vb.pp(prefix).pp("pooler").pp("dense")
                } else {
                    vb.pp("pooler").pp("dense")
                };
                Head::Bert {
                    pooler: candle_nn::linear(h, h, pooler).map_err(model_err(name))?,
                    classifier: candle_nn::linear(h, 1, vb.pp("classifier"))
                        .map_err(model_err(name))?,
                }
            }
            // MPNet is refused above, with every other architecture but these two.
            BertFlavor::Roberta | BertFlavor::MpNet => Head::Roberta {
                dense: candle_nn::linear(h, h, vb.pp("classifier").pp("dense"))
                    .map_err(model_err(name))?,
                out_proj: candle_nn::linear(h, 1, vb.pp("classifier").pp("out_proj"))
                    .map_err(model_err(name))?,
            },
        };
        let max_length = options
            .max_length
            .or(manifest.as_ref().map(|m| m.max_length))
            .unwrap_or(DEFAULT_RERANK_MAX_LENGTH)
            .min(backbone.max_length());
        if max_length < 4 {
            return Err(Error::invalid(Setting::MaxLength, "must be at least 4"));
        }
        let tokenizer = Tokenizer::from_file(&files.tokenizer)
            .map_err(|e| Error::model(name, format!("{}: {e}", files.tokenizer.display())))?;
        let fallback = with_truncation(
            tokenizer.clone(),
            max_length,
            TruncationStrategy::LongestFirst,
            name,
        )?;
        let tokenizer =
            with_truncation(tokenizer, max_length, TruncationStrategy::OnlySecond, name)?;
        let max_batch_tokens = options
            .max_batch_tokens
            .unwrap_or(if matches!(device, Device::Cpu) {
                DEFAULT_CPU_MAX_BATCH_TOKENS
            } else {
                DEFAULT_MAX_BATCH_TOKENS
            })
            .max(1);
        Ok(Self {
            name: manifest.map_or_else(|| name.to_string(), |m| m.id),
            architecture,
            tokenizer,
            fallback,
            backbone,
            head,
            device,
            max_length,
            max_batch_tokens,
        })
    }

    /// Longest pair in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Tokenizes pairs: `(ids, segment ids)` per pair and the number truncated. The document is
    /// cut first; a query too long on its own is cut too (longest first).
    fn tokenize(&self, pairs: &[(&str, &str)]) -> Result<(Vec<PairTokens>, usize)> {
        let tok_err = |e| Error::model(&self.name, format!("tokenizer: {e}"));
        let mut out = Vec::with_capacity(pairs.len());
        let mut truncated = 0;
        let mut keep = |encoding: Encoding| {
            truncated += usize::from(!encoding.get_overflowing().is_empty());
            out.push((
                encoding.get_ids().to_vec(),
                encoding.get_type_ids().to_vec(),
            ));
        };
        for slice in pairs.chunks(1024) {
            let inputs: Vec<EncodeInput> = slice
                .iter()
                .map(|&(q, d)| (q.to_string(), d.to_string()).into())
                .collect();
            match self.tokenizer.encode_batch(inputs, true) {
                Ok(encodings) => encodings.into_iter().for_each(&mut keep),
                // Some query alone exceeds the limit: redo this slice pair by pair.
                Err(_) => {
                    for &(q, d) in slice {
                        let encoding = match self.tokenizer.encode((q, d), true) {
                            Ok(e) => e,
                            Err(_) => self.fallback.encode((q, d), true).map_err(tok_err)?,
                        };
                        keep(encoding);
                    }
                }
            }
        }
        Ok((out, truncated))
    }

    /// Scores one right-padded batch.
    fn run_batch(&self, rows: &[&PairTokens]) -> candle_core::Result<Vec<f32>> {
        let width = rows.iter().map(|r| r.0.len()).max().unwrap_or(1).max(1);
        let mut ids = Vec::with_capacity(rows.len() * width);
        let mut types = Vec::with_capacity(rows.len() * width);
        let lengths: Vec<usize> = rows.iter().map(|r| r.0.len().max(1)).collect();
        for (row_ids, row_types) in rows.iter().map(|r| (&r.0, &r.1)) {
            ids.extend_from_slice(row_ids);
            ids.resize(ids.len() + width - row_ids.len(), 0);
            types.extend_from_slice(row_types);
            types.resize(types.len() + width - row_types.len(), 0);
        }
        let input = Tensor::from_vec(ids, (rows.len(), width), &self.device)?;
        // XLM-R has a single segment; its tokenizers' type ids are not model inputs.
        let types = match self.architecture {
            Architecture::Bert => Some(Tensor::from_vec(types, (rows.len(), width), &self.device)?),
            _ => None,
        };
        let hidden = self
            .backbone
            .forward_typed(&input, types.as_ref(), &lengths)?;
        let cls = hidden.i((.., 0, ..))?.contiguous()?;
        let logits = self.head.forward(&cls)?;
        logits
            .squeeze(D::Minus1)?
            .to_dtype(DType::F32)?
            .to_vec1::<f32>()
    }
}

impl Reranker for CrossEncoder {
    fn score(&self, pairs: &[(&str, &str)], progress: &dyn Progress) -> Result<PairScores> {
        let (tokens, num_truncated) = self.tokenize(pairs)?;
        let lengths: Vec<usize> = tokens.iter().map(|t| t.0.len()).collect();
        let mut scores = vec![0f32; pairs.len()];
        progress.begin("reranking", Some(pairs.len() as u64));
        let batches = plan_batches(&lengths, self.max_batch_tokens);
        run_batches(
            &self.name,
            &batches,
            matches!(self.device, Device::Cpu),
            progress,
            |batch| {
                let rows: Vec<&PairTokens> = batch.iter().map(|&i| &tokens[i]).collect();
                self.run_batch(&rows).map_err(model_err(&self.name))
            },
            |batch, got| {
                if got.len() != batch.len() {
                    return Err(Error::model(
                        &self.name,
                        format!("{} scores for {} pairs", got.len(), batch.len()),
                    ));
                }
                for (&position, score) in batch.iter().zip(got) {
                    scores[position] = score;
                }
                Ok(())
            },
        )?;
        progress.finish();
        Ok(PairScores {
            scores,
            num_truncated,
            num_tokens: lengths.iter().sum(),
        })
    }

    fn name(&self) -> &str {
        &self.name
    }
}
