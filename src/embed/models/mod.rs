//! One file per architecture, each mapping its `config.json` onto a forward pass that returns
//! every position's final hidden state: BERT, XLM-RoBERTa and MPNet ([`bert`]), ModernBERT
//! ([`modernbert`]), nomic-bert ([`nomic_bert`]), and the decoders Mistral, Qwen2/Qwen3 (also
//! bidirectional), Gemma-2 and Gemma-3 (also bidirectional) and the bidirectional EuroBERT
//! ([`eurobert`]) over the shared machinery of [`decoder`]. Model files do no file or hub I/O
//! (resolution is `embed::resolve`'s) and no pooling (`embed::pooling`'s); their CPU fast paths
//! are in `crate::kernels`. [`build_backbone`] picks the file for an [`Architecture`].

mod bert;
mod decoder;
mod eurobert;
mod gemma2;
mod gemma3;
mod mistral;
mod modernbert;
mod nomic_bert;
mod qwen;

use candle_core::Tensor;
use candle_nn::VarBuilder;

pub(crate) use bert::{BertConfig, BertFlavor, BertModel};
use eurobert::EuroBertConfig;
use gemma2::Gemma2Config;
use gemma3::Gemma3Config;
use mistral::MistralConfig;
use modernbert::{ModernBertConfig, ModernBertModel};
use nomic_bert::{NomicBertConfig, NomicBertModel};
use qwen::{QwenConfig, QwenVersion};

use super::manifest::Architecture;
use crate::error::{Error, Result, candle_message};

/// The forward pass of one architecture: all final hidden states `[batch, seq, hidden]` for
/// right-padded `input_ids` `[batch, seq]` (u32) whose rows hold `lengths` real tokens.
pub(crate) trait Backbone: Send + Sync {
    fn forward(&self, input_ids: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor>;
    fn hidden_size(&self) -> usize;
}

/// A candle error of model `name` as ours.
pub(crate) fn model_err(name: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::model(name, candle_message(&e))
}

/// Loads the backbone of `arch` from `config` (the text of `config.json`) and the weights in
/// `vb`; errors name the model `name`.
pub(crate) fn build_backbone(
    arch: Architecture,
    config: &str,
    vb: VarBuilder,
    name: &str,
) -> Result<Box<dyn Backbone>> {
    let parse_err = |e: serde_json::Error| Error::model(name, format!("config.json: {e}"));
    let backbone: Box<dyn Backbone> = match arch {
        Architecture::Bert | Architecture::XlmRoberta | Architecture::MpNet => {
            let cfg: BertConfig = serde_json::from_str(config).map_err(parse_err)?;
            let flavor = match arch {
                Architecture::XlmRoberta => BertFlavor::Roberta,
                Architecture::MpNet => BertFlavor::MpNet,
                _ => BertFlavor::Bert,
            };
            Box::new(BertModel::load(&cfg, vb, flavor).map_err(model_err(name))?)
        }
        Architecture::ModernBert => {
            let cfg: ModernBertConfig = serde_json::from_str(config).map_err(parse_err)?;
            Box::new(ModernBertModel::load(&cfg, vb).map_err(model_err(name))?)
        }
        Architecture::NomicBert => {
            let cfg: NomicBertConfig = serde_json::from_str(config).map_err(parse_err)?;
            Box::new(NomicBertModel::load(&cfg, vb).map_err(model_err(name))?)
        }
        Architecture::Mistral => {
            let cfg: MistralConfig = serde_json::from_str(config).map_err(parse_err)?;
            Box::new(mistral::load(&cfg, vb).map_err(model_err(name))?)
        }
        Architecture::Qwen2 | Architecture::Qwen3 => {
            let cfg: QwenConfig = serde_json::from_str(config).map_err(parse_err)?;
            let version = if arch == Architecture::Qwen2 {
                QwenVersion::Qwen2
            } else {
                QwenVersion::Qwen3
            };
            Box::new(qwen::load(&cfg, version, vb).map_err(model_err(name))?)
        }
        Architecture::EuroBert => {
            let cfg: EuroBertConfig = serde_json::from_str(config).map_err(parse_err)?;
            Box::new(eurobert::load(&cfg, vb).map_err(model_err(name))?)
        }
        Architecture::Gemma2 => {
            let cfg: Gemma2Config = serde_json::from_str(config).map_err(parse_err)?;
            Box::new(gemma2::load(&cfg, vb).map_err(model_err(name))?)
        }
        Architecture::Gemma3 => {
            let cfg: Gemma3Config = serde_json::from_str(config).map_err(parse_err)?;
            Box::new(gemma3::load(&cfg, vb).map_err(model_err(name))?)
        }
    };
    Ok(backbone)
}
