//! Query encoders backed by the `embed` models (a [`TextEncoder`] is an
//! [`Encoder`](crate::dataset::Encoder)): [`load_recorded_encoder`] and
//! [`Engine::load_query_encoders`] load, for the dense models an index
//! recorded ([`DenseModelRef`]), the same model with the same query template, task, max length
//! and pooling as at build time.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Arc;

use crate::embed::{
    DeviceSpec, EncoderOptions, ModelDType, ModelFiles, Pooling, TextEncoder, resolve_model,
};
use crate::error::{Error, Result, Setting};
use crate::index::DenseModelRef;
use crate::search::Engine;
use crate::search::encode_index::recorded_files_hash;

/// How [`Engine::load_query_encoders`] loads models.
#[derive(Debug, Clone, Default)]
pub struct QueryEncoderOptions {
    /// Device for the query encoders.
    pub device: DeviceSpec,
    /// Padded tokens per batch (default: embed's, per device).
    pub max_batch_tokens: Option<usize>,
    /// Weight/compute dtype override (default: the one the corpus was encoded with).
    pub dtype: Option<ModelDType>,
    /// Per dense model name, a model directory or id to load instead of the recorded one
    /// (e.g. the index was built on another machine).
    pub models: BTreeMap<String, String>,
}

/// A query encoder to load instead of the one an index recorded: `NAME=MODEL`, the dense model
/// `NAME` of the index and `MODEL` a model directory or a cached Hugging Face id (what
/// [`QueryEncoderOptions::models`] holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelOverride {
    /// The index's dense model name.
    pub name: String,
    /// The model directory or id to load.
    pub model: String,
}

impl std::str::FromStr for ModelOverride {
    type Err = Error;

    /// Parses `NAME=MODEL` (errors name the setting `model override`).
    fn from_str(text: &str) -> Result<Self> {
        let (name, model) = text.split_once('=').ok_or_else(|| {
            Error::invalid(
                Setting::ModelOverride,
                format!("{text:?}: expected NAME=MODEL"),
            )
        })?;
        Ok(Self {
            name: name.to_string(),
            model: model.to_string(),
        })
    }
}

/// Loads the query encoder of dense model `name` as the index recorded it (`model`: the same
/// model with the same query template, task, max length and pooling), or `override_model`
/// instead of the recorded files, with the recorded settings.
pub fn load_recorded_encoder(
    name: &str,
    model: &DenseModelRef,
    override_model: Option<&str>,
    options: &QueryEncoderOptions,
) -> Result<TextEncoder> {
    let files = resolve_recorded_model(name, model, override_model)?;
    let encoder_options = recorded_options(
        model,
        options.device,
        options.dtype,
        options.max_batch_tokens,
    )?;
    TextEncoder::load(&files, &encoder_options)
}

/// The files of the model an index recorded for `dense:NAME` (by its reference as given, else
/// its resolved directory), or of `override_model`; warns when they are not the recorded ones.
pub(crate) fn resolve_recorded_model(
    name: &str,
    model: &DenseModelRef,
    override_model: Option<&str>,
) -> Result<ModelFiles> {
    let files = match override_model {
        Some(path) => resolve_model(path)?,
        None => resolve_model(&model.reference)
            .or_else(|first| resolve_model(&model.dir).map_err(|_| first))
            .map_err(|e| {
                Error::invalid(
                    Setting::QueryModel,
                    format!(
                        "dense:{name}: cannot load the encoder the index recorded ({e}; also \
                         tried {}); name the model as {name}=DIR",
                        model.dir
                    ),
                )
            })?,
    };
    match recorded_files_hash(&files) {
        Ok(found) if found != model.fingerprint => tracing::warn!(
            "dense:{name}: {} differs from the model the index was built with \
             (config/tokenizer fingerprint {found}, recorded {})",
            files.dir.display(),
            model.fingerprint
        ),
        _ => {}
    }
    Ok(files)
}

/// Encoder options reproducing the recorded settings (dtype unless overridden, max length,
/// pooling, templates, task, Matryoshka width) on `device`.
pub(crate) fn recorded_options(
    model: &DenseModelRef,
    device: DeviceSpec,
    dtype: Option<ModelDType>,
    max_batch_tokens: Option<usize>,
) -> Result<EncoderOptions> {
    Ok(EncoderOptions {
        device,
        dtype: Some(match dtype {
            Some(dtype) => dtype,
            None => ModelDType::from_str(&model.model_dtype)?,
        }),
        max_length: Some(model.max_length),
        max_batch_tokens,
        pooling: Some(Pooling::from_str(&model.pooling)?),
        query_template: Some(model.query_template.clone()),
        document_template: Some(model.document_template.clone()),
        task: Some(model.task.clone()),
        manifest: None,
        dimensions: model.dimensions,
    })
}

impl Engine {
    /// Opens the index in `dir` and loads the query encoder of every dense model it recorded
    /// (models indexed from precomputed vectors have none: search them by vector).
    pub fn open_with_encoders(
        dir: impl AsRef<std::path::Path>,
        options: &QueryEncoderOptions,
    ) -> Result<Self> {
        let mut engine = Self::open(dir)?;
        engine.load_query_encoders(&[], options)?;
        Ok(engine)
    }

    /// Loads the query encoders of the dense models `names` (all recorded models when empty)
    /// that have none yet. A named model indexed from precomputed vectors, without an override
    /// in `options.models`, is an error.
    pub fn load_query_encoders(
        &mut self,
        names: &[&str],
        options: &QueryEncoderOptions,
    ) -> Result<()> {
        for name in options.models.keys() {
            self.dense_model(Some(name))?;
        }
        let wanted: Vec<(String, Option<DenseModelRef>)> = self
            .manifest()
            .dense
            .iter()
            .filter(|d| names.is_empty() || names.contains(&d.name.as_str()))
            .map(|d| (d.name.clone(), d.model.clone()))
            .collect();
        for (name, model) in wanted {
            if self.has_query_encoder(&name) {
                continue;
            }
            let override_model = options.models.get(&name).map(String::as_str);
            let model = match (model, override_model) {
                (Some(model), _) => model,
                (None, Some(path)) => {
                    let files = resolve_model(path)?;
                    let encoder = TextEncoder::load(
                        &files,
                        &EncoderOptions {
                            device: options.device,
                            dtype: options.dtype,
                            max_batch_tokens: options.max_batch_tokens,
                            ..EncoderOptions::default()
                        },
                    )?;
                    self.set_query_encoder(&name, Arc::new(encoder))?;
                    continue;
                }
                (None, None) if names.is_empty() => continue,
                (None, None) => {
                    return Err(Error::invalid(
                        Setting::QueryModel,
                        format!(
                            "dense:{name} was indexed from precomputed vectors: give its model \
                             as {name}=DIR, or precomputed query vectors"
                        ),
                    ));
                }
            };
            let encoder = load_recorded_encoder(&name, &model, override_model, options)?;
            self.set_query_encoder(&name, Arc::new(encoder))?;
        }
        Ok(())
    }
}
