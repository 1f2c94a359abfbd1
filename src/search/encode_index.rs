//! Building a hybrid index whose dense models encode the corpus themselves: the glue between
//! `index` (which stores vectors and graphs but knows no encoders) and `embed` (which encodes
//! but knows no indexes). [`build_hybrid_index`] reads the corpus once, builds BM25, and for
//! each [`DenseModelSpec`] loads the encoder, embeds every document with the model's document
//! template (length-sorted token-budget batches), drops the model, and stores the vectors, the
//! HNSW graph and the model reference ([`DenseModelRef`]) the engine later loads to encode
//! queries with the query template. [`refresh_hybrid_index`] does the same for the documents a
//! refresh adds, with the models and settings the index recorded.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::dataset::{Embeddings, Encoder, Fnv1a64, TextKind, VectorDtype};
use crate::embed::ModelManifest;
use crate::embed::{
    DeviceSpec, EncoderOptions, ModelDType, ModelFiles, Pooling, TextEncoder, resolve_model,
};
use crate::error::{Error, Result, Setting};
use crate::index::{
    Bm25Settings, DenseModelRef, DocumentModel, HnswSettings, IndexConfig, IndexSummary,
    LoadedModel, Manifest, RefreshConfig, RefreshSummary, VectorSource, build_index_with_encoders,
    refresh_index_with_encoders, validate_model_name,
};
use crate::progress::Progress;
use crate::search::encoders::{recorded_options, resolve_recorded_model};

/// One dense model to encode the corpus with: `[NAME=]MODEL[#WIDTH]`, as `--dense` and a build
/// config's `retrieval.dense` write it. `#WIDTH` cuts this model's vectors to one of its
/// Matryoshka widths (over any `--dimensions` of the run), so one index or benchmark can hold
/// several widths of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenseModelSpec {
    /// Retriever name (`dense:NAME`).
    pub name: String,
    /// A model directory or a Hugging Face id in the local cache (`org/name[@rev]`).
    pub model: String,
    /// This model's Matryoshka width (`#WIDTH`), if written.
    pub dimensions: Option<usize>,
    /// True when the name was derived from the model rather than written.
    derived_name: bool,
}

impl DenseModelSpec {
    /// The spec as written, nothing looked up yet: `NAME=MODEL` keeps its name; a bare `MODEL`
    /// gets its name from [`resolved`](Self::resolved), once the directory it names is known.
    /// A malformed `#WIDTH` stays in the model and is refused by `resolved`.
    pub fn unresolved(spec: &str) -> Self {
        let (rest, dimensions) = match split_width(spec) {
            Ok(split) => split,
            Err(_) => (spec, None),
        };
        match split_name(rest) {
            Some((name, model)) => Self {
                name: name.to_string(),
                model: model.to_string(),
                dimensions,
                derived_name: false,
            },
            None => Self {
                name: String::new(),
                model: rest.to_string(),
                dimensions,
                derived_name: true,
            },
        }
    }

    /// The encoder options for this model: `options` with its own width, where it has one.
    pub fn encoder_options(&self, options: &EncoderOptions) -> EncoderOptions {
        EncoderOptions {
            dimensions: self.dimensions.or(options.dimensions),
            ..options.clone()
        }
    }

    /// The spec with a relative model directory or `.gguf` file taken relative to `base` (a
    /// config file's directory), and a name not written derived from the model.
    pub fn resolved(self, base: &Path) -> Result<Self> {
        if self.model.trim().is_empty() {
            return Err(Error::invalid(Setting::DenseModel, "empty"));
        }
        // A width `unresolved` could not read is still in the model: refuse it here.
        split_width(&self.model)?;
        let candidate = base.join(&self.model);
        let model = if Path::new(&self.model).is_relative() && candidate.exists() {
            candidate.to_string_lossy().into_owned()
        } else {
            self.model
        };
        if self.derived_name {
            let mut spec = Self::from_str(&model)?;
            spec.set_width(self.dimensions);
            return Ok(spec);
        }
        Ok(Self { model, ..self })
    }

    /// Sets the width of a spec without one; a derived name gains `-WIDTH`, so that two widths
    /// of one model are two retrievers.
    fn set_width(&mut self, dimensions: Option<usize>) {
        if let Some(n) = dimensions {
            self.dimensions = Some(n);
            if self.derived_name {
                self.name = format!("{}-{n}", self.name);
            }
        }
    }
}

/// `NAME=MODEL` split, when the part before `=` is a valid name and a model follows.
fn split_name(spec: &str) -> Option<(&str, &str)> {
    spec.split_once('=')
        .filter(|(name, model)| validate_model_name(name).is_ok() && !model.is_empty())
}

/// `SPEC#WIDTH` split: the spec before the last `#` and the width after it (a positive whole
/// number); a spec without `#` has none.
fn split_width(spec: &str) -> Result<(&str, Option<usize>)> {
    let Some((rest, width)) = spec.rsplit_once('#') else {
        return Ok((spec, None));
    };
    match width.parse::<usize>() {
        Ok(n) if n > 0 && width.bytes().all(|b| b.is_ascii_digit()) => Ok((rest, Some(n))),
        _ => Err(Error::invalid(
            Setting::DenseModel,
            format!("{spec:?}: the width after '#' must be a positive whole number"),
        )),
    }
}

impl std::str::FromStr for DenseModelSpec {
    type Err = Error;

    /// Parses `[NAME=]MODEL[#WIDTH]`. Without a name: the directory's name, or the part of the
    /// id after the `/` (without `@revision`), followed by `-WIDTH` when a width is written.
    fn from_str(spec: &str) -> Result<Self> {
        let (rest, dimensions) = split_width(spec)?;
        if dimensions.is_some() {
            let mut parsed = Self::from_str(rest)?;
            parsed.set_width(dimensions);
            return Ok(parsed);
        }
        if let Some((name, model)) = split_name(spec) {
            return Ok(Self {
                name: name.to_string(),
                model: model.to_string(),
                dimensions: None,
                derived_name: false,
            });
        }
        let path = Path::new(spec);
        let name = if path.is_dir() {
            let absolute = path.canonicalize().map_err(|e| Error::io(path, e))?;
            absolute
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            let short = spec
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .unwrap_or(spec);
            short.split('@').next().unwrap_or(short).to_string()
        };
        validate_model_name(&name).map_err(|_| {
            Error::invalid(
                Setting::DenseModel,
                format!("{spec:?}: cannot derive a model name from it; write NAME={spec}"),
            )
        })?;
        Ok(Self {
            name,
            model: spec.to_string(),
            dimensions: None,
            derived_name: true,
        })
    }
}

impl std::fmt::Display for DenseModelSpec {
    /// As written: `NAME=MODEL`, or `MODEL` when the name is derived from it, then `#WIDTH`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.derived_name {
            f.write_str(&self.model)?;
        } else {
            write!(f, "{}={}", self.name, self.model)?;
        }
        match self.dimensions {
            Some(n) => write!(f, "#{n}"),
            None => Ok(()),
        }
    }
}

impl serde::Serialize for DenseModelSpec {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What [`build_hybrid_index`] builds.
#[derive(Debug, Clone)]
pub struct HybridIndexConfig {
    /// The corpus (JSONL documents).
    pub corpus: PathBuf,
    /// BM25 settings; `None` builds no BM25 part.
    pub bm25: Option<Bm25Settings>,
    /// Dense models that encode the corpus during the build.
    pub dense: Vec<DenseModelSpec>,
    /// Precomputed dense vectors (`--vectors NAME=PATH.npy`).
    pub vectors: Vec<VectorSource>,
    /// HNSW parameters for every dense model; `None` keeps exact search only.
    pub hnsw: Option<HnswSettings>,
    /// How to load the encoders (device, dtype, batch token budget, max length, ...); the same
    /// options apply to every model.
    pub encoder: EncoderOptions,
    /// How encoded vectors are stored (f16 halves the size; scores move by ~1e-3).
    pub vector_dtype: VectorDtype,
}

impl Default for HybridIndexConfig {
    fn default() -> Self {
        Self {
            corpus: PathBuf::new(),
            bm25: Some(Bm25Settings::default()),
            dense: Vec::new(),
            vectors: Vec::new(),
            hnsw: Some(HnswSettings::default()),
            encoder: EncoderOptions::default(),
            vector_dtype: VectorDtype::F16,
        }
    }
}

/// Builds the index `dir`: BM25, precomputed vectors, and every dense model of `config`
/// (encoding the corpus), atomically (nothing replaced unless all of it succeeds).
pub fn build_hybrid_index(
    config: &HybridIndexConfig,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<IndexSummary> {
    // Resolve every model before the (long) build, so a typo fails at once.
    let mut encoders = Vec::with_capacity(config.dense.len());
    for spec in &config.dense {
        validate_model_name(&spec.name)?;
        encoders.push(EmbedDocumentModel {
            name: spec.name.clone(),
            reference: spec.model.clone(),
            files: resolve_model(&spec.model)?,
            options: spec.encoder_options(&config.encoder),
            dtype: config.vector_dtype,
        });
    }
    let index_config = IndexConfig {
        corpus: config.corpus.clone(),
        bm25: config.bm25,
        vectors: config.vectors.clone(),
        hnsw: config.hnsw,
    };
    let refs: Vec<&dyn DocumentModel> = encoders.iter().map(|e| e as &dyn DocumentModel).collect();
    build_index_with_encoders(&index_config, &refs, dir, progress)
}

/// Refreshes the index `dir` ([`refresh_index_with_encoders`]): removed repositories' documents
/// go, added documents are indexed by BM25 and embedded by every dense model the index recorded,
/// loaded with the settings it was built with (on `device`, `max_batch_tokens` per batch).
/// Models are loaded only when there are documents to add.
pub fn refresh_hybrid_index(
    config: &RefreshConfig,
    dir: &Path,
    device: DeviceSpec,
    max_batch_tokens: Option<usize>,
    progress: &dyn Progress,
) -> Result<RefreshSummary> {
    let manifest = Manifest::read(dir)?;
    let mut encoders = Vec::new();
    if config.add.is_some() {
        for info in &manifest.dense {
            let Some(model) = &info.model else { continue };
            encoders.push(EmbedDocumentModel {
                name: info.name.clone(),
                reference: model.reference.clone(),
                files: resolve_recorded_model(&info.name, model, None)?,
                options: recorded_options(model, device, None, max_batch_tokens)?,
                dtype: VectorDtype::from_str(&info.dtype)?,
            });
        }
    }
    let refs: Vec<&dyn DocumentModel> = encoders.iter().map(|e| e as &dyn DocumentModel).collect();
    refresh_index_with_encoders(config, &refs, dir, progress)
}

/// A [`DocumentModel`] backed by an `embed` model, loaded only while it encodes.
struct EmbedDocumentModel {
    name: String,
    reference: String,
    files: ModelFiles,
    options: EncoderOptions,
    dtype: VectorDtype,
}

impl DocumentModel for EmbedDocumentModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn storage_dtype(&self) -> VectorDtype {
        self.dtype
    }

    fn load(&self) -> Result<LoadedModel> {
        let encoder = TextEncoder::load(&self.files, &self.options)?;
        let mut model = model_ref(&self.reference, &self.files, encoder.manifest())?;
        model.dimensions = encoder.dimensions();
        Ok(LoadedModel {
            encoder: Box::new(DocumentTextEncoder {
                name: self.name.clone(),
                encoder,
            }),
            source: model.id.clone(),
            model: Some(model),
        })
    }
}

/// A [`TextEncoder`] embedding a corpus for dense model `name`: says how many documents were
/// truncated.
struct DocumentTextEncoder {
    name: String,
    encoder: TextEncoder,
}

impl Encoder for DocumentTextEncoder {
    fn dim(&self) -> usize {
        self.encoder.dim()
    }

    fn embed(&self, texts: &[&str], kind: TextKind, progress: &dyn Progress) -> Result<Embeddings> {
        let embeddings = self.encoder.embed(texts, kind, progress)?;
        if embeddings.num_truncated > 0 {
            tracing::warn!(
                "dense:{}: {} of {} documents were truncated to {} tokens",
                self.name,
                embeddings.num_truncated,
                texts.len(),
                self.encoder.manifest().max_length
            );
        }
        Ok(embeddings)
    }
}

/// What the manifest records about a loaded model.
fn model_ref(
    reference: &str,
    files: &ModelFiles,
    manifest: &ModelManifest,
) -> Result<DenseModelRef> {
    let dir = files
        .dir
        .canonicalize()
        .unwrap_or_else(|_| files.dir.clone());
    Ok(DenseModelRef {
        reference: reference.to_string(),
        id: manifest.id.clone(),
        dir: dir.display().to_string(),
        fingerprint: recorded_files_hash(files)?,
        query_template: manifest.query_template.clone(),
        document_template: manifest.document_template.clone(),
        task: manifest.task.clone(),
        max_length: manifest.max_length,
        pooling: pooling_name(manifest.pooling).to_string(),
        model_dtype: dtype_name(manifest.dtype).to_string(),
        dimensions: None,
    })
}

/// What the index manifest records of a model's files ([`DenseModelRef::fingerprint`]): FNV-1a
/// 64 of `config.json` and `tokenizer.json` (cheap; weights are too big to hash), the format
/// manifests have always had.
pub(crate) fn recorded_files_hash(files: &ModelFiles) -> Result<String> {
    Ok(format!(
        "{}-{}",
        Fnv1a64::of_file(&files.config)?,
        Fnv1a64::of_file(&files.tokenizer)?
    ))
}

pub(crate) fn pooling_name(pooling: Pooling) -> &'static str {
    match pooling {
        Pooling::Cls => "cls",
        Pooling::Mean => "mean",
        Pooling::LastToken => "last_token",
    }
}

pub(crate) fn dtype_name(dtype: ModelDType) -> &'static str {
    match dtype {
        ModelDType::F32 => "f32",
        ModelDType::Bf16 => "bf16",
        ModelDType::F16 => "f16",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_and_without_names() {
        let spec = DenseModelSpec::from_str("mini=some/dir").unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.model.as_str()),
            ("mini", "some/dir")
        );
        let spec = DenseModelSpec::from_str("BAAI/bge-small-en-v1.5@abc").unwrap();
        assert_eq!(spec.name, "bge-small-en-v1.5");
        let dir = tempfile::tempdir().unwrap();
        let model_dir = dir.path().join("my-model");
        std::fs::create_dir(&model_dir).unwrap();
        let spec = DenseModelSpec::from_str(model_dir.to_str().unwrap()).unwrap();
        assert_eq!(spec.name, "my-model");
        assert_eq!(spec.to_string(), model_dir.to_str().unwrap());
        assert!(DenseModelSpec::from_str("org/na me").is_err());
    }

    #[test]
    fn specs_take_a_width_after_a_hash() {
        let spec = DenseModelSpec::from_str("org/stella_en_1.5B_v5#512").unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.model.as_str(), spec.dimensions),
            ("stella_en_1.5B_v5-512", "org/stella_en_1.5B_v5", Some(512))
        );
        assert_eq!(spec.to_string(), "org/stella_en_1.5B_v5#512");
        let spec = DenseModelSpec::from_str("s256=org/stella@rev#256").unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.model.as_str(), spec.dimensions),
            ("s256", "org/stella@rev", Some(256))
        );
        assert_eq!(spec.to_string(), "s256=org/stella@rev#256");
        // The spec's width wins over the run's; without one the run's applies.
        let run = EncoderOptions {
            dimensions: Some(1024),
            ..EncoderOptions::default()
        };
        assert_eq!(spec.encoder_options(&run).dimensions, Some(256));
        let plain = DenseModelSpec::from_str("org/stella").unwrap();
        assert_eq!(plain.encoder_options(&run).dimensions, Some(1024));
        for bad in [
            "org/stella#",
            "org/stella#0",
            "org/stella#x",
            "org/stella#+5",
        ] {
            let err = DenseModelSpec::from_str(bad).unwrap_err().to_string();
            assert!(err.contains("positive whole number"), "{bad}: {err}");
            let err = DenseModelSpec::unresolved(bad).resolved(Path::new("."));
            assert!(err.is_err(), "{bad}");
        }
        // Unresolved specs keep the width through resolution.
        let spec = DenseModelSpec::unresolved("org/stella#128")
            .resolved(Path::new("."))
            .unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.dimensions),
            ("stella-128", Some(128))
        );
        let spec = DenseModelSpec::unresolved("n=org/stella#128")
            .resolved(Path::new("."))
            .unwrap();
        assert_eq!((spec.name.as_str(), spec.dimensions), ("n", Some(128)));
    }

    #[test]
    fn specs_resolve_relative_directories_against_a_base() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("my-model")).unwrap();
        let base = dir.path().join("my-model");
        // A bare directory gets its name once resolved; `.` names the base itself.
        let spec = DenseModelSpec::unresolved(".").resolved(&base).unwrap();
        assert_eq!(spec.name, "my-model");
        let spec = DenseModelSpec::unresolved("my-model")
            .resolved(dir.path())
            .unwrap();
        assert_eq!(spec.model, base.to_str().unwrap());
        // A written name is kept, its relative directory resolved too.
        let spec = DenseModelSpec::unresolved("mini=my-model")
            .resolved(dir.path())
            .unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.model.as_str()),
            ("mini", base.to_str().unwrap())
        );
        assert_eq!(spec.to_string(), format!("mini={}", base.display()));
        // An id stays an id.
        let spec = DenseModelSpec::unresolved("BAAI/bge-small-en-v1.5")
            .resolved(dir.path())
            .unwrap();
        assert_eq!(
            (spec.name.as_str(), spec.model.as_str()),
            ("bge-small-en-v1.5", "BAAI/bge-small-en-v1.5")
        );
    }
}
