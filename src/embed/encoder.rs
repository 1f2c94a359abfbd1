//! The encoder: tokenizer + backbone + pooling + normalisation, with length-sorted token-budget
//! batching. [`TextEncoder::load`] reads a resolved model directory; it implements the data
//! model's [`Encoder`], whose `embed` returns vectors in input order.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use super::batch::{
    DEFAULT_CPU_MAX_BATCH_TOKENS, DEFAULT_MAX_BATCH_TOKENS, plan_batches, run_batches,
};
use super::dense_head::DenseHead;
use super::gguf::GgufEncoder;
use super::manifest::{Architecture, ModelDType, ModelKind, ModelManifest, Pooling};
use super::models::{Backbone, QuantizedLinears, build_backbone, model_err};
use super::pooling::{l2_normalize, pool};
use super::resolve::ModelFiles;
use crate::dataset::{Embeddings, Encoder, Shard, TextKind};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// Where the model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The CPU (all cores unless `RAYON_NUM_THREADS` says otherwise).
    #[default]
    Cpu,
    /// CUDA device N (needs the `cuda` feature).
    Cuda(usize),
}

impl DeviceSpec {
    pub(crate) fn device(self) -> Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(n) => Device::new_cuda(n).map_err(|e| {
                Error::invalid(
                    Setting::Device,
                    format!("cuda:{n}: {e} (GPU support needs a build with `--features cuda`)"),
                )
            }),
        }
    }
}

impl std::str::FromStr for DeviceSpec {
    type Err = Error;

    /// Parses `cpu`, `cuda` or `cuda:N`.
    fn from_str(text: &str) -> Result<Self> {
        match text {
            "cpu" => Ok(Self::Cpu),
            "cuda" => Ok(Self::Cuda(0)),
            _ => text
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Self::Cuda)
                .ok_or_else(|| {
                    Error::invalid(
                        Setting::Device,
                        format!("'{text}' (expected cpu, cuda or cuda:N)"),
                    )
                }),
        }
    }
}

/// How to load a model; `None` fields come from the manifest or the model's own config.
#[derive(Debug, Clone, Default)]
pub struct EncoderOptions {
    /// Manifest to use instead of the built-in lookup.
    pub manifest: Option<ModelManifest>,
    /// Where the model runs: the CPU, or a CUDA device (feature `cuda`).
    pub device: DeviceSpec,
    /// Weight and compute dtype.
    pub dtype: Option<ModelDType>,
    /// Max tokens per text (special tokens included).
    pub max_length: Option<usize>,
    /// Padded tokens per batch (default [`DEFAULT_CPU_MAX_BATCH_TOKENS`] on the CPU,
    /// [`DEFAULT_MAX_BATCH_TOKENS`] on a GPU).
    pub max_batch_tokens: Option<usize>,
    /// Pooling override.
    pub pooling: Option<Pooling>,
    /// Query template override (`{task}`, `{text}`).
    pub query_template: Option<String>,
    /// Document template override.
    pub document_template: Option<String>,
    /// Task description override.
    pub task: Option<String>,
    /// Matryoshka truncation: keep the first N values of each vector, then renormalise; N must
    /// be one of the widths the model's card lists.
    pub dimensions: Option<usize>,
}

/// Our dtype as candle's.
fn candle_dtype(dtype: ModelDType) -> DType {
    match dtype {
        ModelDType::F32 => DType::F32,
        ModelDType::Bf16 => DType::BF16,
        ModelDType::F16 => DType::F16,
    }
}

#[derive(Deserialize)]
struct ModelTypeOnly {
    model_type: Option<String>,
    #[serde(default)]
    vocab_size: Option<usize>,
    #[serde(default)]
    eos_token_id: Option<serde_json::Value>,
    #[serde(default)]
    hidden_size: Option<usize>,
    #[serde(default)]
    max_position_embeddings: Option<usize>,
    #[serde(default)]
    pad_token_id: Option<usize>,
}

impl ModelTypeOnly {
    /// The longest input the position table allows (RoBERTa positions start after padding).
    fn position_limit(&self, arch: Architecture) -> Option<usize> {
        let offset = arch.position_offset(self.pad_token_id);
        self.max_position_embeddings
            .map(|n| n.saturating_sub(offset))
    }
}

#[derive(Deserialize)]
struct StPooling {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

/// A loaded encoder.
pub struct TextEncoder {
    name: String,
    manifest: ModelManifest,
    tokenizer: Tokenizer,
    /// EOS id to append after truncation, when the tokenizer does not add it itself.
    append_eos: Option<u32>,
    backbone: Box<dyn Backbone>,
    /// sentence-transformers `Dense` modules after pooling (EmbeddingGemma).
    dense: Option<DenseHead>,
    /// The Matryoshka width vectors are cut to, when asked.
    dimensions: Option<usize>,
    device: Device,
    max_batch_tokens: usize,
}

impl TextEncoder {
    /// Loads the model in `files`: manifest (built-in by id or directory name, or derived from
    /// `config.json` and `1_Pooling`), tokenizer and memory-mapped weights; or, for a GGUF file,
    /// all three from the file (its card found by the file's stem).
    pub fn load(files: &ModelFiles, options: &EncoderOptions) -> Result<Self> {
        if let Some(path) = &files.gguf {
            return Self::load_gguf(files, path, options);
        }
        let name = files.name.as_str();
        let config_text = crate::dataset::bounded::read_text(
            &files.config,
            crate::dataset::bounded::MAX_SETTINGS_BYTES,
        )
        .map_err(|e| Error::io(&files.config, e))?;
        let config: ModelTypeOnly = serde_json::from_str(&config_text)
            .map_err(|e| Error::model(name, format!("{}: {e}", files.config.display())))?;
        let manifest = match &options.manifest {
            Some(m) => m.clone(),
            None => find_manifest(files)?.map_or_else(|| derive_manifest(files, &config), Ok)?,
        };
        let tokenizer = Tokenizer::from_file(&files.tokenizer)
            .map_err(|e| Error::model(name, format!("{}: {e}", files.tokenizer.display())))?;
        Self::assemble(
            files,
            options,
            manifest,
            (&config, &config_text),
            tokenizer,
            |dtype, device| {
                // SAFETY: the weight files are memory-mapped read-only; like every mmap user we
                // rely on them not being truncated while the model is loaded.
                unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, device) }
                    .map(|vb| (vb, QuantizedLinears::default()))
                    .map_err(|e| Error::model(name, format!("cannot read weights: {e}")))
            },
        )
    }

    /// Loads a GGUF embedding model: the card by the file's stem (else a manifest from the
    /// file's metadata), the tokenizer and weights from the file (see `embed::gguf`).
    fn load_gguf(files: &ModelFiles, path: &Path, options: &EncoderOptions) -> Result<Self> {
        let name = files.name.as_str();
        let card = match &options.manifest {
            Some(m) => Some(m.clone()),
            None => find_manifest(files)?,
        };
        let dtype = options
            .dtype
            .or(card.as_ref().map(|m| m.dtype))
            .unwrap_or(ModelDType::F32);
        let gguf = GgufEncoder::open(path, candle_dtype(dtype))?;
        let config: ModelTypeOnly = serde_json::from_str(&gguf.config)
            .map_err(|e| Error::model(name, format!("GGUF config: {e}")))?;
        let manifest = match card {
            Some(m) => m,
            None => ModelManifest {
                id: files
                    .gguf
                    .as_deref()
                    .and_then(Path::file_stem)
                    .and_then(|s| s.to_str())
                    .unwrap_or(name)
                    .to_string(),
                kind: ModelKind::Embedding,
                aliases: Vec::new(),
                architecture: gguf.architecture,
                pooling: gguf.pooling,
                normalize: true,
                max_length: gguf.context_length.unwrap_or(512),
                dim: config.hidden_size.unwrap_or(0),
                matryoshka: Vec::new(),
                dtype,
                append_eos: gguf.add_eos,
                query_template: "{text}".to_string(),
                document_template: "{text}".to_string(),
                task: super::manifest::FRESHSTACK_TASK.to_string(),
            },
        };
        let GgufEncoder {
            config: config_text,
            tokenizer,
            tensors,
            quantized,
            ..
        } = gguf;
        Self::assemble(
            files,
            options,
            manifest,
            (&config, &config_text),
            tokenizer,
            move |dtype, device| {
                Ok((
                    VarBuilder::from_tensors(tensors, dtype, device),
                    QuantizedLinears::new(quantized),
                ))
            },
        )
    }

    /// The rest of a load, whatever the file format: overrides, checks, truncation, backbone,
    /// `Dense` head and Matryoshka width.
    fn assemble(
        files: &ModelFiles,
        options: &EncoderOptions,
        mut manifest: ModelManifest,
        (config, config_text): (&ModelTypeOnly, &str),
        mut tokenizer: Tokenizer,
        weights: impl FnOnce(DType, &Device) -> Result<(VarBuilder<'static>, QuantizedLinears)>,
    ) -> Result<Self> {
        let name = files.name.as_str();
        if let Some(model_type) = config.model_type.as_deref() {
            match Architecture::from_model_type(model_type) {
                Some(arch) => manifest.architecture = arch,
                None => {
                    return Err(Error::model(
                        name,
                        Architecture::unknown_message(model_type),
                    ));
                }
            }
        }
        if manifest.kind == ModelKind::CrossEncoder {
            return Err(Error::model(
                name,
                "is a cross-encoder reranker, not an embedder: use `freshstack rerank`",
            ));
        }
        if let Some(p) = options.pooling {
            manifest.pooling = p;
        }
        if let Some(t) = &options.query_template {
            manifest.query_template = t.clone();
        }
        if let Some(t) = &options.document_template {
            manifest.document_template = t.clone();
        }
        if let Some(t) = &options.task {
            manifest.task = t.clone();
        }
        if let Some(n) = options.max_length {
            manifest.max_length = n;
        }
        if let Some(limit) = config.position_limit(manifest.architecture) {
            manifest.max_length = manifest.max_length.min(limit);
        }
        if manifest.max_length < 2 {
            return Err(Error::invalid(Setting::MaxLength, "must be at least 2"));
        }
        let dtype = options.dtype.unwrap_or(manifest.dtype);
        manifest.dtype = dtype;
        let device = options.device.device()?;

        // The model's own vocabulary (added tokens aside: EmbeddingGemma's tokenizer adds one
        // past its table) must fit the embedding table, or its ids would index past it.
        if let Some(rows) = config.vocab_size
            && tokenizer.get_vocab_size(false) > rows
        {
            return Err(Error::model(
                name,
                format!(
                    "the tokenizer has {} tokens but the model's vocab_size is {rows}: \
                     tokenizer and weights do not belong together",
                    tokenizer.get_vocab_size(false)
                ),
            ));
        }
        tokenizer.with_padding(None);
        let eos = eos_id(config, &tokenizer);
        let append_eos = if manifest.append_eos && manifest.architecture.is_decoder() {
            eos.filter(|&id| !adds_eos(&tokenizer, id))
        } else {
            None
        };
        let truncate_to = manifest.max_length - usize::from(append_eos.is_some());
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: truncate_to,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
                direction: TruncationDirection::Right,
            }))
            .map_err(|e| Error::model(name, format!("tokenizer truncation: {e}")))?;

        let (vb, quantized) = weights(candle_dtype(dtype), &device)?;
        let backbone = build_backbone(manifest.architecture, config_text, vb, &quantized, name)?;
        if let Some(hidden) = config.hidden_size
            && hidden != backbone.hidden_size()
        {
            return Err(Error::model(name, "hidden_size mismatch"));
        }
        // A GGUF file carries no sentence-transformers modules (its directory is not the model's).
        let dense = match files.gguf {
            Some(_) => None,
            None => DenseHead::load(
                &files.dir,
                name,
                backbone.hidden_size(),
                options.dimensions,
                &device,
            )?,
        };
        manifest.dim = dense
            .as_ref()
            .and_then(DenseHead::out_features)
            .unwrap_or(backbone.hidden_size());
        // The widths a card lists (truncation) and those of Matryoshka heads (Stella's
        // `2_Dense_N` folders, one of which the head loaded when asked).
        let mut widths = manifest.matryoshka.clone();
        for &w in dense.as_ref().map_or(&[][..], DenseHead::widths) {
            if !widths.contains(&w) {
                widths.push(w);
            }
        }
        if let Some(n) = options.dimensions {
            if !widths.contains(&n) || n > manifest.dim {
                let widths = if widths.is_empty() {
                    "the model defines no Matryoshka widths".to_string()
                } else {
                    let listed: Vec<String> = widths.iter().map(|w| w.to_string()).collect();
                    format!("the model's Matryoshka widths are {}", listed.join(", "))
                };
                return Err(Error::invalid(
                    Setting::Dimensions,
                    format!("{n} for {name}: {widths}"),
                ));
            }
            manifest.dim = n;
        }
        let max_batch_tokens = options
            .max_batch_tokens
            .unwrap_or(if matches!(device, Device::Cpu) {
                DEFAULT_CPU_MAX_BATCH_TOKENS
            } else {
                DEFAULT_MAX_BATCH_TOKENS
            })
            .max(1);
        Ok(Self {
            name: name.to_string(),
            manifest,
            tokenizer,
            append_eos,
            backbone,
            dense,
            dimensions: options.dimensions,
            device,
            max_batch_tokens,
        })
    }

    /// The Matryoshka width vectors are cut to (`EncoderOptions::dimensions`), if any.
    pub fn dimensions(&self) -> Option<usize> {
        self.dimensions
    }

    /// The effective manifest (after overrides).
    pub fn manifest(&self) -> &ModelManifest {
        &self.manifest
    }

    /// Padded tokens per batch.
    pub fn max_batch_tokens(&self) -> usize {
        self.max_batch_tokens
    }

    /// Tokenizes already-templated texts into ids (truncated, EOS appended when the model wants
    /// it), with whether each text was truncated.
    fn tokenize(&self, texts: &[String]) -> Result<(Vec<Vec<u32>>, Vec<bool>)> {
        let mut all = Vec::with_capacity(texts.len());
        let mut truncated = Vec::with_capacity(texts.len());
        // Slices keep the tokenizers' full encodings (offsets, strings) short-lived: only ids stay.
        for slice in texts.chunks(1024) {
            let encodings = self
                .tokenizer
                .encode_batch(slice.to_vec(), true)
                .map_err(|e| Error::model(&self.name, format!("tokenizer: {e}")))?;
            for encoding in encodings {
                truncated.push(!encoding.get_overflowing().is_empty());
                let mut ids = encoding.get_ids().to_vec();
                if let Some(eos) = self.append_eos
                    && ids.last() != Some(&eos)
                {
                    ids.push(eos);
                }
                all.push(ids);
            }
        }
        Ok((all, truncated))
    }

    /// Runs one batch (right padded) and returns its pooled, normalised rows.
    fn run_batch(&self, ids: &[&[u32]]) -> candle_core::Result<Vec<Vec<f32>>> {
        let width = ids.iter().map(|row| row.len()).max().unwrap_or(1).max(1);
        let mut flat_ids = Vec::with_capacity(ids.len() * width);
        let mut flat_mask = Vec::with_capacity(ids.len() * width);
        let lengths: Vec<usize> = ids.iter().map(|row| row.len().max(1)).collect();
        for (row, &len) in ids.iter().zip(&lengths) {
            flat_ids.extend_from_slice(row);
            flat_ids.resize(flat_ids.len() + width - row.len(), 0);
            // An empty tokenisation (no special tokens, empty text) still attends to one position.
            flat_mask.extend(std::iter::repeat_n(1u32, len));
            flat_mask.resize(flat_mask.len() + width - len, 0);
        }
        let input = Tensor::from_vec(flat_ids, (ids.len(), width), &self.device)?;
        let mask = Tensor::from_vec(flat_mask, (ids.len(), width), &self.device)?;
        let hidden = self.backbone.forward(&input, &lengths)?;
        let pooled = pool(&hidden, &mask, &lengths, self.manifest.pooling)?;
        let pooled = match &self.dense {
            Some(dense) => dense.forward(&pooled)?,
            None => pooled,
        };
        // Matryoshka: the leading values, renormalised below (the model's own normalisation
        // came before the cut in sentence-transformers too, so the result is the same).
        let pooled = if pooled.dim(1)? > self.manifest.dim {
            pooled.narrow(1, 0, self.manifest.dim)?
        } else {
            pooled
        };
        let pooled = if self.manifest.normalize {
            l2_normalize(&pooled)?
        } else {
            pooled
        };
        pooled.to_vec2::<f32>()
    }
}

impl TextEncoder {
    /// Embeds the rows of shard `shard` of `texts`: the texts are tokenized and planned into
    /// length-sorted batches exactly as [`Encoder::embed`] does for all of them, and batch `b`
    /// belongs to shard `b % N`, so each row is computed in the same batch (to the same bits) as
    /// in one process. Returns the shard's rows in input order and their input positions.
    pub fn embed_shard(
        &self,
        texts: &[&str],
        kind: TextKind,
        shard: Shard,
        progress: &dyn Progress,
    ) -> Result<(Embeddings, Vec<usize>)> {
        self.embed_batches(texts, kind, Some(shard), progress)
    }

    fn embed_batches(
        &self,
        texts: &[&str],
        kind: TextKind,
        shard: Option<Shard>,
        progress: &dyn Progress,
    ) -> Result<(Embeddings, Vec<usize>)> {
        let templated: Vec<String> = texts
            .iter()
            .map(|t| self.manifest.apply_template(t, kind))
            .collect();
        let (ids, truncated) = self.tokenize(&templated)?;
        let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
        let batches: Vec<Vec<usize>> = plan_batches(&lengths, self.max_batch_tokens)
            .into_iter()
            .enumerate()
            .filter(|(b, _)| shard.is_none_or(|s| s.contains(*b)))
            .map(|(_, batch)| batch)
            .collect();
        let mut positions: Vec<usize> = batches.iter().flatten().copied().collect();
        positions.sort_unstable();
        // Row of each input position in the output (usize::MAX: not in this shard).
        let mut row_of = vec![usize::MAX; texts.len()];
        for (row, &p) in positions.iter().enumerate() {
            row_of[p] = row;
        }
        let num_truncated = positions.iter().filter(|&&p| truncated[p]).count();
        if num_truncated > 0 {
            tracing::warn!(
                "{num_truncated} of {} texts were truncated to {} tokens",
                positions.len(),
                self.manifest.max_length
            );
        }
        let dim = self.dim();
        let mut data = vec![0f32; positions.len() * dim];
        progress.begin("embedding", Some(positions.len() as u64));
        run_batches(
            &self.name,
            &batches,
            matches!(self.device, Device::Cpu),
            progress,
            |batch| {
                let rows: Vec<&[u32]> = batch.iter().map(|&i| ids[i].as_slice()).collect();
                self.run_batch(&rows).map_err(model_err(&self.name))
            },
            |batch, vectors| {
                for (&position, vector) in batch.iter().zip(vectors) {
                    if vector.len() != dim {
                        return Err(Error::model(
                            &self.name,
                            format!("pooled {} values, expected {dim}", vector.len()),
                        ));
                    }
                    let row = row_of[position];
                    data[row * dim..(row + 1) * dim].copy_from_slice(&vector);
                }
                Ok(())
            },
        )?;
        progress.finish();
        let num_tokens = positions.iter().map(|&p| lengths[p]).sum();
        Ok((
            Embeddings {
                dim,
                data,
                num_truncated,
                num_tokens,
            },
            positions,
        ))
    }
}

impl Encoder for TextEncoder {
    fn dim(&self) -> usize {
        self.manifest.dim
    }

    fn embed(&self, texts: &[&str], kind: TextKind, progress: &dyn Progress) -> Result<Embeddings> {
        Ok(self.embed_batches(texts, kind, None, progress)?.0)
    }
}

/// The built-in manifest for `files`: by Hugging Face id, else by directory name (a GGUF
/// file's by its file name without `.gguf`, then without a storage-type suffix such as
/// `-Q8_0`, `.f16` or `-Q4_K_M`, as GGUF repositories name their files).
pub(crate) fn find_manifest(files: &ModelFiles) -> Result<Option<ModelManifest>> {
    if let Some(id) = &files.id
        && let Some(m) = ModelManifest::find(id)?
    {
        return Ok(Some(m));
    }
    if let Some(path) = &files.gguf {
        let Some(stem) = path.file_stem().and_then(|n| n.to_str()) else {
            return Ok(None);
        };
        if let Some(m) = ModelManifest::find(stem)? {
            return Ok(Some(m));
        }
        return match without_storage_suffix(stem) {
            Some(base) => ModelManifest::find(base),
            None => Ok(None),
        };
    }
    match files.dir.file_name().and_then(|n| n.to_str()) {
        Some(dir_name) => ModelManifest::find(dir_name),
        None => Ok(None),
    }
}

/// `stem` without a trailing GGUF storage type after a `-` or `.` (`-Q8_0`, `.f16`,
/// `-Q4_K_M`, `-IQ4_XS`, `-bf16`), when it has one.
fn without_storage_suffix(stem: &str) -> Option<&str> {
    let at = stem.rfind(['-', '.'])?;
    let suffix = stem[at + 1..].to_ascii_lowercase();
    let digit_after = |prefix: &str| {
        suffix
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
    };
    let storage = matches!(suffix.as_str(), "f16" | "f32" | "bf16")
        || ((digit_after("q") || digit_after("iq"))
            && suffix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'));
    storage.then_some(&stem[..at])
}

/// A manifest for a model we have no TOML for: from `config.json`, `1_Pooling` and
/// `sentence_bert_config.json`; no templates, f32 for encoders and bf16 for decoders.
fn derive_manifest(files: &ModelFiles, config: &ModelTypeOnly) -> Result<ModelManifest> {
    let name = files.name.as_str();
    let model_type = config
        .model_type
        .as_deref()
        .ok_or_else(|| Error::model(name, "config.json has no model_type"))?;
    let architecture = Architecture::from_model_type(model_type)
        .ok_or_else(|| Error::model(name, Architecture::unknown_message(model_type)))?;
    let pooling = match &files.pooling_config {
        Some(path) => {
            let text = crate::dataset::bounded::read_text(
                path,
                crate::dataset::bounded::MAX_SETTINGS_BYTES,
            )
            .map_err(|e| Error::io(path, e))?;
            let st: StPooling = serde_json::from_str(&text)
                .map_err(|e| Error::model(name, format!("{}: {e}", path.display())))?;
            if st.pooling_mode_cls_token {
                Pooling::Cls
            } else if st.pooling_mode_lasttoken {
                Pooling::LastToken
            } else if st.pooling_mode_mean_tokens {
                Pooling::Mean
            } else {
                return Err(Error::model(
                    name,
                    format!("{}: no supported pooling mode", path.display()),
                ));
            }
        }
        None if architecture.is_decoder() => Pooling::LastToken,
        None => Pooling::Cls,
    };
    let prompts = read_st_prompts(&files.dir);
    let max_length = read_st_max_length(&files.dir)
        .or(config.max_position_embeddings)
        .unwrap_or(512);
    Ok(ModelManifest {
        id: files.id.clone().unwrap_or_else(|| name.to_string()),
        kind: ModelKind::Embedding,
        aliases: Vec::new(),
        architecture,
        pooling,
        normalize: true,
        max_length,
        dim: config.hidden_size.unwrap_or(0),
        matryoshka: Vec::new(),
        dtype: if architecture.is_decoder() {
            ModelDType::Bf16
        } else {
            ModelDType::F32
        },
        // The EOS is what last-token pooling reads; a mean over a bidirectional decoder's tokens
        // takes the tokenizer's own ids.
        append_eos: architecture.is_decoder() && pooling == Pooling::LastToken,
        query_template: format!("{}{{text}}", prompts.query.unwrap_or_default()),
        document_template: format!("{}{{text}}", prompts.document.unwrap_or_default()),
        task: super::manifest::FRESHSTACK_TASK.to_string(),
    })
}

/// The `query` and `document` prompts of `config_sentence_transformers.json`, when present.
#[derive(Debug, Default, Deserialize)]
struct StPrompts {
    query: Option<String>,
    document: Option<String>,
}

fn read_st_prompts(dir: &Path) -> StPrompts {
    #[derive(Deserialize)]
    struct StConfig {
        #[serde(default)]
        prompts: StPrompts,
    }
    let path = dir.join("config_sentence_transformers.json");
    crate::dataset::bounded::read_text(&path, crate::dataset::bounded::MAX_SETTINGS_BYTES)
        .ok()
        .and_then(|text| serde_json::from_str::<StConfig>(&text).ok())
        .map(|c| c.prompts)
        .unwrap_or_default()
}

fn read_st_max_length(dir: &Path) -> Option<usize> {
    #[derive(Deserialize)]
    struct StConfig {
        max_seq_length: Option<usize>,
    }
    let text = crate::dataset::bounded::read_text(
        &dir.join("sentence_bert_config.json"),
        crate::dataset::bounded::MAX_SETTINGS_BYTES,
    )
    .ok()?;
    serde_json::from_str::<StConfig>(&text).ok()?.max_seq_length
}

/// The EOS id: `eos_token_id` of config.json (first when a list), else the tokenizer's `</s>`,
/// `<|endoftext|>` or `<eos>`.
fn eos_id(config: &ModelTypeOnly, tokenizer: &Tokenizer) -> Option<u32> {
    let from_config = match &config.eos_token_id {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::Array(items)) => items.first().and_then(|v| v.as_u64()),
        _ => None,
    };
    from_config.and_then(|n| u32::try_from(n).ok()).or_else(|| {
        ["</s>", "<|endoftext|>", "<eos>"]
            .iter()
            .find_map(|t| tokenizer.token_to_id(t))
    })
}

/// Whether the tokenizer's post-processor already ends sequences with `eos`.
fn adds_eos(tokenizer: &Tokenizer, eos: u32) -> bool {
    tokenizer
        .encode("a", true)
        .is_ok_and(|e| e.get_ids().last() == Some(&eos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gguf_file_names_lose_their_storage_type_to_find_a_card() {
        for (stem, base) in [
            ("Qwen3-Embedding-0.6B-Q8_0", Some("Qwen3-Embedding-0.6B")),
            ("Qwen3-Embedding-0.6B-Q4_K_M", Some("Qwen3-Embedding-0.6B")),
            ("Qwen3-Embedding-0.6B-f16", Some("Qwen3-Embedding-0.6B")),
            ("nomic-embed-text-v1.5.f16", Some("nomic-embed-text-v1.5")),
            ("model-IQ4_XS", Some("model")),
            ("all-MiniLM-L6-v2", None),
            ("e5-small-v2", None),
            ("bge-m3", None),
        ] {
            assert_eq!(without_storage_suffix(stem), base, "{stem}");
        }
        use std::path::PathBuf;
        let card = |name: &str| {
            let files = ModelFiles {
                name: name.into(),
                id: None,
                dir: PathBuf::from("."),
                config: PathBuf::from(name),
                tokenizer: PathBuf::from(name),
                weights: vec![PathBuf::from(name)],
                pooling_config: None,
                gguf: Some(PathBuf::from(name)),
            };
            find_manifest(&files).unwrap().map(|m| m.id)
        };
        assert_eq!(
            card("models/Qwen3-Embedding-0.6B-Q8_0.gguf").as_deref(),
            Some("Qwen/Qwen3-Embedding-0.6B")
        );
        assert_eq!(card("models/unknown-Q8_0.gguf"), None);
    }

    #[test]
    fn sentence_transformers_prompts_become_templates_when_present() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_st_prompts(dir.path()).query.is_none());
        std::fs::write(
            dir.path().join("config_sentence_transformers.json"),
            r#"{"prompts": {"query": "task: search result | query: ", "document": "title: none | text: ",
                "STS": "task: sentence similarity | query: "}, "default_prompt_name": null}"#,
        )
        .unwrap();
        let prompts = read_st_prompts(dir.path());
        assert_eq!(
            prompts.query.as_deref(),
            Some("task: search result | query: ")
        );
        assert_eq!(prompts.document.as_deref(), Some("title: none | text: "));
    }
}
