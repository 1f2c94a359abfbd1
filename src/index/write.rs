//! Writing an index directory from a corpus (and precomputed vectors), atomically: everything
//! is written into a temporary sibling directory, the manifest last, then renamed into place.

use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

use crate::dataset::tempfiles::{self, StagingDir};
use crate::dataset::{
    Document, Encoder, TextKind, VectorDtype, VectorMatrix, for_each_document, ids_path, read_ids,
    write_npy,
};
use crate::error::{Error, Result, Setting};
use crate::index::bm25::{Bm25Settings, Bm25Writer};
use crate::index::docids::DocIds;
use crate::index::hnsw::{HnswGraph, cache_key};
use crate::index::layout;
use crate::index::manifest::{
    CorpusInfo, DenseInfo, DenseModelRef, FORMAT_VERSION, HnswSettings, Manifest,
};
use crate::progress::Progress;

/// Precomputed document vectors to add as dense model `name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VectorSource {
    /// Retriever name (`dense:NAME`): letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// The `.npy` matrix; its ids are read from the `.ids` file next to it.
    pub npy: PathBuf,
}

impl std::str::FromStr for VectorSource {
    type Err = Error;

    /// Parses `NAME=PATH.npy`.
    fn from_str(spec: &str) -> Result<Self> {
        let (name, path) = spec.split_once('=').ok_or_else(|| {
            Error::invalid(
                Setting::Vectors,
                format!("{spec:?}: expected NAME=PATH.npy"),
            )
        })?;
        validate_model_name(name)?;
        Ok(Self {
            name: name.to_string(),
            npy: PathBuf::from(path),
        })
    }
}

/// Checks a dense model name is usable as a directory name and retriever suffix: the one path
/// rule of every name that becomes a path ([`crate::dataset::check_plain_name`]).
pub fn validate_model_name(name: &str) -> Result<()> {
    crate::dataset::check_plain_name(Setting::ModelName, name)
}

/// One dense model an index build encodes the corpus with: its name, how its vectors are
/// stored, and how to load its [`Encoder`] (the data model's one text-to-vector trait). `index`
/// knows no models (it imports only `dataset`): the search layer implements this with the
/// `embed` models (`search::build_hybrid_index`), tests with anything.
pub trait DocumentModel: Sync {
    /// The retriever name (`dense:NAME`).
    fn name(&self) -> &str;
    /// How the stored matrix keeps its values.
    fn storage_dtype(&self) -> VectorDtype {
        VectorDtype::F16
    }
    /// Loads the encoder. Called once per build, and only when there are documents to encode;
    /// the encoder is dropped once it has embedded them, so a build holds one model at a time.
    fn load(&self) -> Result<LoadedModel>;
}

/// A loaded [`DocumentModel`]: the encoder and what the manifest records about it.
pub struct LoadedModel {
    /// Embeds the documents' texts ([`TextKind::Document`], one per document in corpus order;
    /// see [`Document::model_text`]): one L2-normalised row per text, in input order.
    pub encoder: Box<dyn Encoder>,
    /// The model, recorded in the manifest so searches can encode queries alike.
    pub model: Option<DenseModelRef>,
    /// Where the vectors came from, for the manifest's `source` (e.g. the model id).
    pub source: String,
}

/// The vectors a [`DocumentModel`] computed, with its [`LoadedModel`]'s record.
pub(crate) struct EncodedVectors {
    /// Columns.
    pub(crate) dim: usize,
    /// `rows x dim` values, row-major, in input order.
    pub(crate) data: Vec<f32>,
    /// [`LoadedModel::model`].
    pub(crate) model: Option<DenseModelRef>,
    /// [`LoadedModel::source`].
    pub(crate) source: String,
}

/// What to build.
#[derive(Debug, Clone)]
pub struct IndexConfig {
    /// The corpus (JSONL documents).
    pub corpus: PathBuf,
    /// BM25 settings; `None` builds no BM25 part.
    pub bm25: Option<Bm25Settings>,
    /// Precomputed dense vectors, one per model.
    pub vectors: Vec<VectorSource>,
    /// HNSW parameters for every dense model; `None` keeps exact search only.
    pub hnsw: Option<HnswSettings>,
}

/// What was built.
#[derive(Debug, Clone)]
pub struct IndexSummary {
    /// Documents indexed.
    pub num_documents: usize,
    /// The manifest written.
    pub manifest: Manifest,
}

/// Reads the corpus, checking ids (non-empty, unique) and texts (not blank), with line numbers.
pub fn read_corpus(path: &Path) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    let mut first_line: FxHashMap<String, usize> = FxHashMap::default();
    for_each_document(path, |line_no, doc| {
        if doc.id.is_empty() || doc.id.contains(['\n', '\r']) {
            return Err(Error::parse(path, line_no, format!("bad _id {:?}", doc.id)));
        }
        if doc.text.trim().is_empty() && doc.title.trim().is_empty() {
            return Err(Error::parse(
                path,
                line_no,
                format!("document {:?} has an empty text", doc.id),
            ));
        }
        if let Some(first) = first_line.insert(doc.id.clone(), line_no) {
            return Err(Error::parse(
                path,
                line_no,
                format!("duplicate document id {:?} (first on line {first})", doc.id),
            ));
        }
        docs.push(doc);
        Ok(())
    })?;
    if docs.is_empty() {
        return Err(Error::invalid(
            Setting::Corpus,
            format!("{}: no documents", path.display()),
        ));
    }
    Ok(docs)
}

/// Builds the index `dir` from `config`, replacing an existing index there.
pub fn build_index(
    config: &IndexConfig,
    dir: &Path,
    progress: &dyn Progress,
) -> Result<IndexSummary> {
    build_index_with_encoders(config, &[], dir, progress)
}

/// Builds the index `dir` from `config`, plus one dense model per encoder (which encodes the
/// corpus during the build), replacing an existing index there. Nothing is replaced unless the
/// whole build succeeds.
pub fn build_index_with_encoders(
    config: &IndexConfig,
    encoders: &[&dyn DocumentModel],
    dir: &Path,
    progress: &dyn Progress,
) -> Result<IndexSummary> {
    if config.bm25.is_none() && config.vectors.is_empty() && encoders.is_empty() {
        return Err(Error::invalid(
            Setting::Index,
            "nothing to build: ask for BM25, dense models and/or precomputed vectors",
        ));
    }
    let mut names: Vec<&str> = config.vectors.iter().map(|v| v.name.as_str()).collect();
    names.extend(encoders.iter().map(|e| e.name()));
    for name in &names {
        validate_model_name(name)?;
    }
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(Error::invalid(
            Setting::DenseModels,
            format!("model name {:?} given twice (name them NAME=MODEL)", w[0]),
        ));
    }
    let _lock = crate::dataset::OutputLock::beside(dir)?;
    if dir.exists() && !dir.join(crate::index::manifest::MANIFEST_FILE).exists() {
        let empty = std::fs::read_dir(dir)
            .map_err(|e| Error::io(dir, e))?
            .next()
            .is_none();
        if !empty {
            return Err(Error::index(
                dir,
                "exists and is not a freshstack index; refusing to replace it",
            ));
        }
    }
    // A rebuild replaces the whole directory: anything of the user's in it would go with it
    // (the corpus it was given, among others).
    if dir.join(crate::index::manifest::MANIFEST_FILE).is_file() {
        let foreign = crate::index::manifest::foreign_files(dir)?;
        if let Some(first) = foreign.first() {
            return Err(Error::index(
                dir,
                format!(
                    "holds {first} (and {} more files) that are not part of the index; a \
                     rebuild replaces the whole directory: move them out first",
                    foreign.len() - 1
                ),
            ));
        }
    }
    progress.begin("reading corpus", None);
    let docs = read_corpus(&config.corpus)?;
    let corpus_hash = crate::dataset::Fnv1a64::of_file(&config.corpus)?;
    progress.finish();
    let ids = DocIds::new(docs.iter().map(|d| d.id.clone()).collect())?;

    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let staging = StagingDir::create(&parent)?;
    let tmp = staging.path();
    ids.write(&tmp.join(layout::IDS_FILE))?;

    if let Some(settings) = &config.bm25 {
        let bm25_dir = tmp.join(layout::BM25_DIR);
        tempfiles::create_dir_inside(&bm25_dir)?;
        let mut writer = Bm25Writer::create(&bm25_dir, settings)?;
        progress.begin("bm25", Some(docs.len() as u64));
        for (ord, doc) in docs.iter().enumerate() {
            writer.add(ord as u32, doc)?;
            if ord % 1024 == 1023 {
                progress.advance(1024);
            }
        }
        progress.finish();
        writer.finish(progress)?;
    }

    let mut dense = Vec::new();
    for source in &config.vectors {
        dense.push(add_vectors(
            source,
            &ids,
            tmp,
            &corpus_hash,
            config.hnsw.as_ref(),
            progress,
        )?);
    }
    if !encoders.is_empty() {
        let texts: Vec<std::borrow::Cow<'_, str>> = docs.iter().map(Document::model_text).collect();
        let texts: Vec<&str> = texts.iter().map(|t| t.as_ref()).collect();
        for encoder in encoders {
            dense.push(add_encoded(
                *encoder,
                &texts,
                tmp,
                &corpus_hash,
                config.hnsw.as_ref(),
                progress,
            )?);
        }
    }
    dense.sort_by(|a, b| a.name.cmp(&b.name));

    let mut manifest = Manifest {
        format_version: FORMAT_VERSION,
        created_by: format!("freshstack {}", env!("CARGO_PKG_VERSION")),
        corpus: CorpusInfo {
            path: config.corpus.display().to_string(),
            fnv1a64: corpus_hash,
            num_documents: docs.len(),
        },
        bm25: config.bm25,
        dense,
        files: Vec::new(),
    };
    manifest.record_files(tmp)?;
    manifest.write(tmp)?;
    install(staging, dir)?;
    Ok(IndexSummary {
        num_documents: docs.len(),
        manifest,
    })
}

/// Copies one model's vectors into the index in corpus order, and builds its graph.
fn add_vectors(
    source: &VectorSource,
    ids: &DocIds,
    tmp: &Path,
    corpus_hash: &str,
    hnsw: Option<&HnswSettings>,
    progress: &dyn Progress,
) -> Result<DenseInfo> {
    let matrix = VectorMatrix::open(&source.npy)?;
    let ids_file = ids_path(&source.npy);
    let row_ids = read_ids(&ids_file)?;
    if row_ids.len() != matrix.rows() {
        return Err(Error::invalid(
            Setting::Vectors,
            format!(
                "{} has {} ids but {} has {} rows",
                ids_file.display(),
                row_ids.len(),
                source.npy.display(),
                matrix.rows()
            ),
        ));
    }
    // Query vectors are checked at search time; a document row with a NaN would score NaN and
    // rank first for every query, and scores are dot products of unit vectors (cosines): a row
    // of another length would score out of [-1, 1] (a 1e30 row: infinity), a zero row 0 for
    // every query.
    if let Some((row, problem)) = first_bad_row(&matrix) {
        return Err(Error::invalid(
            Setting::Vectors,
            format!(
                "{}: row {row} (0-based; id {:?}) {problem}",
                source.npy.display(),
                row_ids[row]
            ),
        ));
    }
    let mut row_of: FxHashMap<&str, usize> = FxHashMap::default();
    for (row, id) in row_ids.iter().enumerate() {
        if row_of.insert(id.as_str(), row).is_some() {
            return Err(Error::parse(
                &ids_file,
                row + 1,
                format!("duplicate id {id:?}"),
            ));
        }
    }
    let mut order = Vec::with_capacity(ids.len());
    for id in ids.ids() {
        let row = row_of.get(id.as_str()).copied().ok_or_else(|| {
            Error::invalid(
                Setting::Vectors,
                format!("{} has no vector for document {id:?}", ids_file.display()),
            )
        })?;
        order.push(row);
    }
    if row_ids.len() != ids.len() {
        let known: rustc_hash::FxHashSet<&str> = ids.ids().iter().map(String::as_str).collect();
        let extra = row_ids
            .iter()
            .find(|id| !known.contains(id.as_str()))
            .map_or_else(String::new, |id| format!("{id:?}"));
        return Err(Error::invalid(
            Setting::Vectors,
            format!(
                "{} names {} documents that are not in the corpus, e.g. {extra}",
                ids_file.display(),
                row_ids.len() - ids.len()
            ),
        ));
    }
    let stored = StoredModel {
        name: &source.name,
        rows: ids.len(),
        dim: matrix.dim(),
        dtype: matrix.dtype(),
    };
    stored.write(tmp, corpus_hash, hnsw, progress, |i, row| {
        matrix.row_into(order[i], row)
    })?;
    Ok(DenseInfo {
        name: source.name.clone(),
        dim: matrix.dim(),
        dtype: matrix.dtype().name().to_string(),
        source: source.npy.display().to_string(),
        hnsw: hnsw.copied(),
        model: None,
    })
}

/// How far a stored row's length may be from 1: bf16 rounding moves it by well under 1%.
const UNIT_NORM_TOLERANCE: f64 = 0.02;

/// The first row of `matrix` holding a NaN or an infinity, or whose length is not 1 (within
/// [`UNIT_NORM_TOLERANCE`]), and what is wrong with it.
fn first_bad_row(matrix: &VectorMatrix) -> Option<(usize, String)> {
    let mut values = vec![0f32; matrix.dim()];
    (0..matrix.rows()).find_map(|row| {
        matrix.row_into(row, &mut values);
        if values.iter().any(|v| !v.is_finite()) {
            return Some((row, "has a NaN or infinite value".to_string()));
        }
        let norm = values
            .iter()
            .map(|&v| f64::from(v) * f64::from(v))
            .sum::<f64>()
            .sqrt();
        ((norm - 1.0).abs() > UNIT_NORM_TOLERANCE).then(|| {
            (
                row,
                format!("has length {norm:.4e}, not 1: give L2-normalised vectors"),
            )
        })
    })
}

/// Encodes the corpus with one encoder and stores its vectors (and graph).
fn add_encoded(
    encoder: &dyn DocumentModel,
    texts: &[&str],
    tmp: &Path,
    corpus_hash: &str,
    hnsw: Option<&HnswSettings>,
    progress: &dyn Progress,
) -> Result<DenseInfo> {
    let encoded = checked_vectors(encoder, texts, progress)?;
    let name = encoder.name();
    let dim = encoded.dim;
    let stored = StoredModel {
        name,
        rows: texts.len(),
        dim,
        dtype: encoder.storage_dtype(),
    };
    stored.write(tmp, corpus_hash, hnsw, progress, |i, row| {
        row.copy_from_slice(&encoded.data[i * dim..(i + 1) * dim])
    })?;
    Ok(DenseInfo {
        name: name.to_string(),
        dim,
        dtype: stored.dtype.name().to_string(),
        source: encoded.source,
        hnsw: hnsw.copied(),
        model: encoded.model,
    })
}

/// `encoder`'s vectors for `texts`, checked: one finite row of a non-zero dimension per text.
pub(crate) fn checked_vectors(
    encoder: &dyn DocumentModel,
    texts: &[&str],
    progress: &dyn Progress,
) -> Result<EncodedVectors> {
    let loaded = encoder.load()?;
    let embeddings = loaded.encoder.embed(texts, TextKind::Document, progress)?;
    drop(loaded.encoder);
    let encoded = EncodedVectors {
        dim: embeddings.dim,
        data: embeddings.data,
        model: loaded.model,
        source: loaded.source,
    };
    let name = encoder.name();
    if encoded.dim == 0 || encoded.data.len() != texts.len() * encoded.dim {
        return Err(Error::invalid(
            Setting::DenseModel,
            format!(
                "{name}: the encoder returned {} values for {} texts of dimension {}",
                encoded.data.len(),
                texts.len(),
                encoded.dim
            ),
        ));
    }
    if let Some(row) = encoded
        .data
        .chunks_exact(encoded.dim)
        .position(|row| row.iter().any(|v| !v.is_finite()))
    {
        return Err(Error::invalid(
            Setting::DenseModel,
            format!("{name}: the vector of document {row} has NaN or infinite values"),
        ));
    }
    Ok(encoded)
}

/// One dense model's files inside the staging directory.
pub(crate) struct StoredModel<'a> {
    pub(crate) name: &'a str,
    pub(crate) rows: usize,
    pub(crate) dim: usize,
    pub(crate) dtype: VectorDtype,
}

impl StoredModel<'_> {
    /// Writes `dense/NAME/vectors.npy` from `row` (row `i` in corpus order) and, with `hnsw`,
    /// builds and saves the graph.
    pub(crate) fn write(
        &self,
        tmp: &Path,
        corpus_hash: &str,
        hnsw: Option<&HnswSettings>,
        progress: &dyn Progress,
        row: impl FnMut(usize, &mut [f32]),
    ) -> Result<()> {
        let dense_dir = tmp.join(layout::DENSE_DIR);
        tempfiles::create_dir_inside(&dense_dir)?;
        let model_dir = dense_dir.join(self.name);
        tempfiles::create_dir_inside(&model_dir)?;
        let stored = model_dir.join(layout::VECTORS_FILE);
        write_npy(&stored, self.rows, self.dim, self.dtype, row)?;
        if let Some(settings) = hnsw {
            let matrix = VectorMatrix::open(&stored)?;
            let graph = HnswGraph::build(&matrix, settings, progress)?;
            let key = cache_key(corpus_hash, self.name, self.rows, settings);
            graph.save(&model_dir.join(layout::HNSW_DIR), &key)?;
        }
        Ok(())
    }
}

/// Moves the staged index onto `dir`, replacing an older index there. The renames run with
/// the signal thread held off, so an interrupt never leaves `dir` missing between them.
pub(crate) fn install(staging: StagingDir, dir: &Path) -> Result<()> {
    let StagingDir {
        dir: staged,
        lock,
        registration,
    } = staging;
    let tmp = staged.keep();
    let outcome = if dir.exists() {
        let parent = tmp.parent().unwrap_or(Path::new("."));
        let (old, old_registration) = tempfiles::Registration::create(
            || {
                tempfile::Builder::new()
                    .prefix(".freshstack-old.")
                    .tempdir_in(parent)
                    .map_err(|e| Error::io(parent, e))
            },
            |old| old.path(),
        )?;
        let old_path = old.path().join("index");
        let swapped = tempfiles::critical(|| {
            std::fs::rename(dir, &old_path).map_err(|e| Error::io(dir, e))?;
            if let Err(e) = std::fs::rename(&tmp, dir) {
                let _ = std::fs::rename(&old_path, dir);
                return Err(Error::io(dir, e));
            }
            Ok(())
        });
        drop(old);
        drop(old_registration);
        swapped
    } else {
        tempfiles::critical(|| std::fs::rename(&tmp, dir)).map_err(|e| Error::io(dir, e))
    };
    if outcome.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    drop(lock);
    drop(registration);
    outcome
}
