//! `freshstack_rs._native`: the Python module over the freshstack library. A thin layer: it
//! converts Python values into the library's types (checking them, so that a wrong value is a
//! `TypeError` or `ValueError` naming the argument and the key), calls the library with the GIL
//! released, and converts the results back. The Python package (`freshstack_rs/__init__.py`)
//! adds the reference-compatible classes on top.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use freshstack::dataset::{DatasetPart, DatasetSpec, TextKind};
use freshstack::embed::{EncoderOptions, TextEncoder, resolve_model};
use freshstack::eval::{EvalConfig, Judgments, Metric, MetricAt, paired_tests};
use freshstack::search::{FusionMethod, FusionOptions, QueryEncoderOptions, RetrieverSpec};
use freshstack::{Encoder as _, NoProgress, NuggetQrels, Run, ScoredDoc, SearchOptions};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::create_exception;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyFloat, PyList, PyString};

create_exception!(
    _native,
    FreshstackError,
    PyValueError,
    "An error of the freshstack library: its one-line message (file, line and field where it \
     has them)."
);

fn library_error(e: freshstack::Error) -> PyErr {
    FreshstackError::new_err(e.to_string())
}

/// The `str` keys and values of a Python mapping, in its iteration order.
fn dict_of<'py>(argument: &str, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
    value.cast::<PyDict>().cloned().map_err(|_| {
        PyTypeError::new_err(format!(
            "{argument}: expected a dict, got {}",
            type_name(value)
        ))
    })
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    value
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

fn key_of(argument: &str, key: &Bound<'_, PyAny>) -> PyResult<String> {
    if key.cast::<PyString>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "{argument}: keys must be str, got {} ({})",
            type_name(key),
            key.repr().map(|r| r.to_string()).unwrap_or_default()
        )));
    }
    key.extract::<String>()
}

/// Per question, its (document, score or label) pairs, in the dict's order.
type NestedScores = Vec<(String, Vec<(String, f64)>)>;

/// A finite number (int, float or bool); the error names `where_()`, built only on failure.
fn finite_number(value: &Bound<'_, PyAny>, where_: impl Fn() -> String) -> PyResult<f64> {
    let number = match value.cast::<PyFloat>() {
        Ok(float) => float.value(),
        Err(_) => value.extract::<f64>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{}: expected a number, got {}",
                where_(),
                type_name(value)
            ))
        })?,
    };
    if !number.is_finite() {
        return Err(PyValueError::new_err(format!(
            "{}: {number} is not a finite number",
            where_()
        )));
    }
    Ok(number)
}

/// Visits `{str: {str: number}}` (a run or qrels) in the dicts' order: `each(query, pairs)`.
fn for_each_nested(
    argument: &str,
    value: &Bound<'_, PyAny>,
    mut each: impl FnMut(String, Vec<(String, f64)>) -> PyResult<()>,
) -> PyResult<()> {
    for (query, docs) in dict_of(argument, value)?.iter() {
        let query = key_of(argument, &query)?;
        let docs = docs.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{argument}[{query:?}]: expected a dict, got {}",
                type_name(&docs)
            ))
        })?;
        let mut pairs = Vec::with_capacity(docs.len());
        for (doc, score) in docs.iter() {
            let doc = match doc.cast::<PyString>() {
                Ok(_) => doc.extract::<String>()?,
                Err(_) => return Err(key_of(&format!("{argument}[{query:?}]"), &doc).unwrap_err()),
            };
            let score = finite_number(&score, || format!("{argument}[{query:?}][{doc:?}]"))?;
            pairs.push((doc, score));
        }
        each(query, pairs)?;
    }
    Ok(())
}

/// `{str: {str: number}}` collected.
fn nested_scores(argument: &str, value: &Bound<'_, PyAny>) -> PyResult<NestedScores> {
    let mut rows = Vec::new();
    for_each_nested(argument, value, |query, pairs| {
        rows.push((query, pairs));
        Ok(())
    })?;
    Ok(rows)
}

/// An integer relevance label (bool, int, or a float that is a whole number).
fn label_of(argument: &str, score: f64) -> PyResult<i32> {
    if score.fract() != 0.0 || score.abs() > f64::from(i32::MAX) {
        return Err(PyValueError::new_err(format!(
            "{argument}: label {score} is not an integer"
        )));
    }
    Ok(score as i32)
}

/// A byte range of [`DictRun::text`].
type Span = std::ops::Range<usize>;

/// A run read from a dict: every id in one text buffer (no allocation per document), the
/// rankings as spans into it, in the dict's order.
struct DictRun {
    text: String,
    /// Per question: its id's span and its documents' (span, score).
    rankings: Vec<(Span, Vec<(Span, f64)>)>,
    by_query: HashMap<String, usize>,
}

impl freshstack::dataset::Rankings for DictRun {
    fn run_name(&self) -> &str {
        "run"
    }
    fn num_rankings(&self) -> usize {
        self.rankings.len()
    }
    fn ranking_query_id(&self, index: usize) -> &str {
        &self.text[self.rankings[index].0.clone()]
    }
    fn ranking_docs(&self, index: usize) -> Vec<freshstack::dataset::DocRef<'_>> {
        self.rankings[index]
            .1
            .iter()
            .map(|(span, score)| freshstack::dataset::DocRef {
                doc_id: &self.text[span.clone()],
                score: *score,
            })
            .collect()
    }
    fn find_query(&self, query_id: &str) -> Option<usize> {
        self.by_query.get(query_id).copied()
    }
}

/// Appends the UTF-8 of the `str` `key` to `text`; its span there.
fn push_str_key(
    text: &mut String,
    key: &Bound<'_, PyAny>,
    where_: impl Fn() -> String,
) -> PyResult<Span> {
    let Ok(string) = key.cast::<PyString>() else {
        return Err(key_of(&where_(), key).unwrap_err());
    };
    let start = text.len();
    text.push_str(utf8_of(string)?);
    Ok(start..text.len())
}

unsafe extern "C" {
    /// CPython's UTF-8 view of a `str` (cached in the object). In the limited API only from
    /// 3.10, but exported with the same signature by every CPython 3 and PyPy's cpyext.
    fn PyUnicode_AsUTF8AndSize(
        unicode: *mut pyo3::ffi::PyObject,
        size: *mut pyo3::ffi::Py_ssize_t,
    ) -> *const std::ffi::c_char;
}

/// The UTF-8 of `string`, borrowed from the object: no allocation per id.
fn utf8_of<'a>(string: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `string` is a live `str` (we hold a reference, and the GIL); the returned buffer
    // belongs to it and lives as long as it does, which bounds the borrow.
    let data = unsafe { PyUnicode_AsUTF8AndSize(string.as_ptr(), &mut size) };
    if data.is_null() {
        // A lone surrogate: Python raised UnicodeEncodeError.
        return Err(PyErr::fetch(string.py()));
    }
    // SAFETY: `size` bytes at `data` (CPython's contract), valid UTF-8 (strict encoding).
    Ok(unsafe {
        std::str::from_utf8_unchecked(std::slice::from_raw_parts(data.cast::<u8>(), size as usize))
    })
}

/// A `{query: {doc: score}}` dict as a run (only the questions in `keep`, when given).
fn dict_run(
    argument: &str,
    value: &Bound<'_, PyAny>,
    keep: Option<&HashMap<String, ()>>,
) -> PyResult<DictRun> {
    let outer = dict_of(argument, value)?;
    let mut run = DictRun {
        text: String::new(),
        rankings: Vec::with_capacity(outer.len()),
        by_query: HashMap::with_capacity(outer.len()),
    };
    for (query, docs) in outer.iter() {
        let query = key_of(argument, &query)?;
        if keep.is_some_and(|k| !k.contains_key(&query)) || run.by_query.contains_key(&query) {
            continue;
        }
        let docs = docs.cast::<PyDict>().map_err(|_| {
            PyTypeError::new_err(format!(
                "{argument}[{query:?}]: expected a dict, got {}",
                type_name(&docs)
            ))
        })?;
        let start = run.text.len();
        run.text.push_str(&query);
        let query_span = start..run.text.len();
        let mut scored = Vec::with_capacity(docs.len());
        for (doc, score) in docs.iter() {
            let span = push_str_key(&mut run.text, &doc, || format!("{argument}[{query:?}]"))?;
            let score = finite_number(&score, || {
                format!("{argument}[{query:?}][{:?}]", &run.text[span.clone()])
            })?;
            scored.push((span, score));
        }
        run.by_query.insert(query, run.rankings.len());
        run.rankings.push((query_span, scored));
    }
    Ok(run)
}

fn run_of(argument: &str, value: &Bound<'_, PyAny>) -> PyResult<Run> {
    let mut run = Run::new("run");
    for_each_nested(argument, value, |query, pairs| {
        // Dict keys are distinct: no duplicate bookkeeping needed.
        let docs = pairs
            .into_iter()
            .map(|(doc_id, score)| ScoredDoc { doc_id, score })
            .collect();
        run.push_ranking(&query, docs);
        Ok(())
    })?;
    Ok(run)
}

fn run_to_dict<'py>(py: Python<'py>, run: &Run) -> PyResult<Bound<'py, PyDict>> {
    use freshstack::dataset::Rankings;
    let out = PyDict::new(py);
    for index in 0..run.num_rankings() {
        let docs = PyDict::new(py);
        for doc in run.ranking_docs(index) {
            docs.set_item(doc.doc_id, doc.score)?;
        }
        out.set_item(run.ranking_query_id(index), docs)?;
    }
    Ok(out)
}

fn means_dict<'py>(
    py: Python<'py>,
    label: &str,
    measures: &[MetricAt],
    means: &[f64],
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (m, v) in measures.iter().zip(means) {
        out.set_item(format!("{label}@{}", m.k), *v)?;
    }
    Ok(out)
}

/// The reference's three measures (alpha-nDCG@k for k <= 20, Coverage@k, Recall@k on
/// `qrels_query`) as three dicts keyed like `freshstack.retrieval.evaluation`'s.
#[pyfunction]
#[pyo3(signature = (qrels_nuggets, query_to_nuggets, qrels_query, results, k_values))]
fn evaluate<'py>(
    py: Python<'py>,
    qrels_nuggets: &Bound<'py, PyAny>,
    query_to_nuggets: &Bound<'py, PyAny>,
    qrels_query: &Bound<'py, PyAny>,
    results: &Bound<'py, PyAny>,
    k_values: Vec<usize>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    if k_values.is_empty() {
        return Err(PyValueError::new_err("k_values: give at least one cutoff"));
    }
    let nugget_labels: HashMap<String, Vec<(String, f64)>> =
        nested_scores("qrels_nuggets", qrels_nuggets)?
            .into_iter()
            .collect();
    let mut nuggets = NuggetQrels::new();
    for (query, ids) in dict_of("query_to_nuggets", query_to_nuggets)?.iter() {
        let query = key_of("query_to_nuggets", &query)?;
        let where_ = format!("query_to_nuggets[{query:?}]");
        let ids = ids.cast::<PyList>().map_err(|_| {
            PyTypeError::new_err(format!("{where_}: expected a list of nugget ids"))
        })?;
        for id in ids.iter() {
            let id = key_of(&where_, &id)?;
            nuggets.add_nugget(&query, &id);
            for (doc, label) in nugget_labels.get(&id).into_iter().flatten() {
                let label = label_of(&format!("qrels_nuggets[{id:?}][{doc:?}]"), *label)?;
                nuggets.set(&query, &id, doc, label);
            }
        }
    }
    let mut query_level = NuggetQrels::new();
    let mut judged_queries = HashMap::new();
    for (query, docs) in nested_scores("qrels_query", qrels_query)? {
        query_level.add_nugget(&query, &query);
        for (doc, label) in docs {
            let label = label_of(&format!("qrels_query[{query:?}][{doc:?}]"), label)?;
            query_level.set(&query, &query, &doc, label);
        }
        judged_queries.insert(query, ());
    }
    if nuggets.is_empty() || query_level.is_empty() {
        return Err(PyValueError::new_err(
            "qrels and results must be provided for evaluation",
        ));
    }
    // As the reference: only the run's questions that qrels_query has.
    let run = dict_run("results", results, Some(&judged_queries))?;
    let small: Vec<usize> = k_values.iter().copied().filter(|&k| k <= 20).collect();
    let (alpha, coverage, recall) = py
        .detach(|| -> freshstack::Result<_> {
            let mut config = EvalConfig::new(&[Metric::Coverage], &k_values)?;
            // alpha-nDCG only where ndeval computes it (the reference drops k > 20).
            let mut measures: Vec<MetricAt> = small
                .iter()
                .map(|&k| MetricAt {
                    metric: Metric::AlphaNdcg,
                    k,
                })
                .collect();
            measures.extend(config.measures);
            config.measures = measures;
            let judgments = Judgments::new(&nuggets);
            let evaluation = freshstack::evaluate(&judgments, &run, &config);
            let recall_config = EvalConfig::new(&[Metric::Recall], &k_values)?;
            let recall = freshstack::evaluate(&Judgments::new(&query_level), &run, &recall_config);
            let split = small.len();
            Ok((
                (
                    evaluation.measures[..split].to_vec(),
                    evaluation.means[..split].to_vec(),
                ),
                (
                    evaluation.measures[split..].to_vec(),
                    evaluation.means[split..].to_vec(),
                ),
                (recall.measures, recall.means),
            ))
        })
        .map_err(library_error)?;
    Ok((
        means_dict(py, "alpha-nDCG", &alpha.0, &alpha.1)?,
        means_dict(py, "Coverage", &coverage.0, &coverage.1)?,
        means_dict(py, "Recall", &recall.0, &recall.1)?,
    ))
}

/// Every measure of `freshstack eval` (`metrics`: names such as `alpha_ndcg`, `coverage`,
/// `recall`, `ndcg`, `mrr`, `precision`, `hole`, `judged`) of a run against nugget judgments
/// (`qrels_nuggets` keyed by nugget id, `query_to_nuggets`): `(means, per_query)`, keys
/// `name@k`.
#[pyfunction]
#[pyo3(signature = (qrels_nuggets, query_to_nuggets, results, metrics, k_values))]
fn evaluate_metrics<'py>(
    py: Python<'py>,
    qrels_nuggets: &Bound<'py, PyAny>,
    query_to_nuggets: &Bound<'py, PyAny>,
    results: &Bound<'py, PyAny>,
    metrics: Vec<String>,
    k_values: Vec<usize>,
) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
    let metrics: Vec<Metric> = metrics
        .iter()
        .map(|m| m.parse::<Metric>())
        .collect::<freshstack::Result<_>>()
        .map_err(|e| PyValueError::new_err(format!("metrics: {e}")))?;
    let nugget_labels: HashMap<String, Vec<(String, f64)>> =
        nested_scores("qrels_nuggets", qrels_nuggets)?
            .into_iter()
            .collect();
    let mut nuggets = NuggetQrels::new();
    for (query, ids) in dict_of("query_to_nuggets", query_to_nuggets)?.iter() {
        let query = key_of("query_to_nuggets", &query)?;
        let ids: Vec<String> = ids.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "query_to_nuggets[{query:?}]: expected a list of str"
            ))
        })?;
        for id in ids {
            nuggets.add_nugget(&query, &id);
            for (doc, label) in nugget_labels.get(&id).into_iter().flatten() {
                let label = label_of(&format!("qrels_nuggets[{id:?}][{doc:?}]"), *label)?;
                nuggets.set(&query, &id, doc, label);
            }
        }
    }
    let run = dict_run("results", results, None)?;
    let evaluation = py
        .detach(|| -> freshstack::Result<_> {
            let config = EvalConfig::new(&metrics, &k_values)?;
            Ok(freshstack::evaluate(
                &Judgments::new(&nuggets),
                &run,
                &config,
            ))
        })
        .map_err(library_error)?;
    let means = PyDict::new(py);
    for (m, v) in evaluation.measures.iter().zip(&evaluation.means) {
        means.set_item(m.to_string(), *v)?;
    }
    let per_query = PyDict::new(py);
    for q in &evaluation.per_query {
        let row = PyDict::new(py);
        for (m, v) in evaluation.measures.iter().zip(&q.values) {
            row.set_item(m.to_string(), *v)?;
        }
        per_query.set_item(&q.query_id, row)?;
    }
    Ok((means, per_query))
}

/// Paired tests of two systems' per-question scores: `{"t_test": p, "randomization": p}`.
#[pyfunction]
#[pyo3(signature = (a, b, permutations = 10_000, seed = 0))]
fn paired_significance<'py>(
    py: Python<'py>,
    a: Vec<f64>,
    b: Vec<f64>,
    permutations: usize,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    if a.len() != b.len() || a.is_empty() {
        return Err(PyValueError::new_err(format!(
            "a and b: need the same non-zero number of scores, got {} and {}",
            a.len(),
            b.len()
        )));
    }
    if let Some(v) = a.iter().chain(&b).find(|v| !v.is_finite()) {
        return Err(PyValueError::new_err(format!(
            "a, b: {v} is not a finite score"
        )));
    }
    let test = py.detach(|| paired_tests(&a, &b, permutations, seed));
    let out = PyDict::new(py);
    out.set_item("mean_difference", test.mean_difference)?;
    out.set_item("t_test", test.t_test_p)?;
    out.set_item("randomization", test.randomization_p)?;
    Ok(out)
}

/// Fuses runs (dicts) by normalized sum (the paper's) or reciprocal rank.
#[pyfunction]
#[pyo3(signature = (runs, method = "normalized_sum", depth = 100, weights = None, rrf_k = 60.0))]
fn fuse<'py>(
    py: Python<'py>,
    runs: Vec<Bound<'py, PyAny>>,
    method: &str,
    depth: usize,
    weights: Option<Vec<f64>>,
    rrf_k: f64,
) -> PyResult<Bound<'py, PyDict>> {
    let method = match method {
        "normalized_sum" => FusionMethod::NormalizedSum,
        "rrf" => FusionMethod::Rrf { k: rrf_k },
        other => {
            return Err(PyValueError::new_err(format!(
                "method: {other:?} is not \"normalized_sum\" or \"rrf\""
            )));
        }
    };
    let runs: Vec<Run> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| run_of(&format!("runs[{i}]"), r))
        .collect::<PyResult<_>>()?;
    let options = FusionOptions {
        method,
        depth,
        weights,
        ..FusionOptions::default()
    };
    let refs: Vec<&Run> = runs.iter().collect();
    let fused = py
        .detach(|| freshstack::search::fuse(&refs, &options, "fused"))
        .map_err(library_error)?;
    run_to_dict(py, &fused)
}

fn text_kind(kind: &str) -> PyResult<TextKind> {
    match kind {
        "query" => Ok(TextKind::Query),
        "document" => Ok(TextKind::Document),
        other => Err(PyValueError::new_err(format!(
            "kind: {other:?} is not \"query\" or \"document\""
        ))),
    }
}

/// A dense encoder run natively (CPU): a model directory, a Hugging Face cache id or a model
/// card, as `freshstack embed --model` takes.
#[pyclass(module = "freshstack_rs._native", frozen)]
struct Encoder {
    inner: Arc<TextEncoder>,
    name: String,
}

#[pymethods]
impl Encoder {
    #[new]
    #[pyo3(signature = (model, max_length = None, dimensions = None))]
    fn new(
        py: Python<'_>,
        model: &str,
        max_length: Option<usize>,
        dimensions: Option<usize>,
    ) -> PyResult<Self> {
        let name = model.to_string();
        let inner = py
            .detach(|| -> freshstack::Result<TextEncoder> {
                let files = resolve_model(&name)?;
                TextEncoder::load(
                    &files,
                    &EncoderOptions {
                        max_length,
                        dimensions,
                        ..EncoderOptions::default()
                    },
                )
            })
            .map_err(library_error)?;
        Ok(Self {
            inner: Arc::new(inner),
            name: model.to_string(),
        })
    }

    /// Width of the vectors.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// What the encoder was opened from.
    #[getter]
    fn model(&self) -> &str {
        &self.name
    }

    /// `texts` as a `float32` array `[len(texts), dim]`, unit length, each row the model's
    /// embedding of its text (`kind` picks the query or document template). `batch_size`
    /// texts go to the encoder per call (the vectors do not depend on it).
    #[pyo3(signature = (texts, batch_size = 256, kind = "document"))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        batch_size: usize,
        kind: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kind = text_kind(kind)?;
        if batch_size == 0 {
            return Err(PyValueError::new_err("batch_size: must be at least 1"));
        }
        let dim = self.inner.dim();
        let encoder = Arc::clone(&self.inner);
        let mut data = Vec::with_capacity(texts.len() * dim);
        for chunk in texts.chunks(batch_size) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let embeddings = py
                .detach(|| encoder.embed(&refs, kind, &NoProgress))
                .map_err(library_error)?;
            data.extend_from_slice(&embeddings.data);
            // Ctrl-C between batches raises KeyboardInterrupt.
            py.check_signals()?;
        }
        let rows = texts.len();
        let array = PyArray1::from_vec(py, data);
        Ok(array.reshape([rows, dim])?.into_any())
    }
}

/// An index directory (`freshstack index`): BM25, dense models, HNSW; queries of dense
/// retrievers are encoded with the model the index recorded.
#[pyclass(module = "freshstack_rs._native", frozen)]
struct Index {
    engine: freshstack::Engine,
    /// The directory it was opened from (for `refresh`).
    path: PathBuf,
}

/// `logger`, or the `freshstack_rs` logger when none was given.
fn logger_or_default(py: Python<'_>, logger: Option<Py<PyAny>>) -> PyResult<Py<PyAny>> {
    match logger {
        Some(logger) => Ok(logger),
        None => Ok(py
            .import("logging")?
            .call_method1("getLogger", ("freshstack_rs",))?
            .unbind()),
    }
}

/// Queries searched between two looks for Ctrl-C in `Index.retrieve`.
const RETRIEVE_SLICE: usize = 64;

fn search_options(retriever: &str, k: usize, exact: bool) -> PyResult<SearchOptions> {
    let retriever: RetrieverSpec = retriever
        .parse()
        .map_err(|e: freshstack::Error| PyValueError::new_err(format!("retriever: {e}")))?;
    if k == 0 {
        return Err(PyValueError::new_err("k: must be at least 1"));
    }
    Ok(SearchOptions {
        retriever,
        k,
        ann: if exact {
            freshstack::search::Ann::Exact
        } else {
            freshstack::search::Ann::Hnsw
        },
        ..SearchOptions::default()
    })
}

#[pymethods]
impl Index {
    #[new]
    fn new(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let engine = py
            .detach(|| {
                freshstack::Engine::open_with_encoders(&path, &QueryEncoderOptions::default())
            })
            .map_err(library_error)?;
        Ok(Self { engine, path })
    }

    /// `freshstack index`: builds the index `path` over the JSONL corpus `corpus` (BM25, and a
    /// dense part per model spec `NAME=MODEL` or `MODEL`, with HNSW graphs unless `hnsw` is
    /// false), replacing an index there, and opens it. Progress goes to `logger`; Ctrl-C stops
    /// the encoding at its next batch and raises KeyboardInterrupt (nothing is replaced).
    #[staticmethod]
    #[pyo3(signature = (path, corpus, bm25 = true, dense = Vec::new(), hnsw = true, vector_dtype = "f16", logger = None))]
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        path: PathBuf,
        corpus: PathBuf,
        bm25: bool,
        dense: Vec<String>,
        hnsw: bool,
        vector_dtype: &str,
        logger: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let logger = logger_or_default(py, logger)?;
        use freshstack::dataset::VectorDtype;
        let dense = dense
            .iter()
            .map(|spec| {
                spec.parse::<freshstack::DenseModelSpec>()
                    .map_err(|e| PyValueError::new_err(format!("dense: {spec:?}: {e}")))
            })
            .collect::<PyResult<Vec<_>>>()?;
        let vector_dtype = match vector_dtype {
            "f16" => VectorDtype::F16,
            "f32" => VectorDtype::F32,
            other => {
                return Err(PyValueError::new_err(format!(
                    "vector_dtype: {other:?} is not \"f16\" or \"f32\""
                )));
            }
        };
        let config = freshstack::HybridIndexConfig {
            corpus,
            bm25: bm25.then(Default::default),
            dense,
            hnsw: hnsw.then(Default::default),
            vector_dtype,
            ..freshstack::HybridIndexConfig::default()
        };
        let progress = LogProgress::new(logger);
        run_interruptible(py, &progress, || {
            freshstack::build_hybrid_index(&config, &path, &progress)
        })?;
        Self::new(py, path)
    }

    /// `freshstack index --refresh`: removes the documents of the repositories `remove_repos`
    /// (`OWNER/NAME`), then adds the JSONL documents of `add` (BM25, and every dense model the
    /// index recorded embeds them with its build settings), and returns the index reopened.
    /// The refresh works on a copy renamed into place: this object keeps answering from the
    /// index as it was, and Ctrl-C (KeyboardInterrupt at the next batch) leaves it unchanged.
    #[pyo3(signature = (add = None, remove_repos = Vec::new(), logger = None))]
    fn refresh(
        &self,
        py: Python<'_>,
        add: Option<PathBuf>,
        remove_repos: Vec<String>,
        logger: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        if add.is_none() && remove_repos.is_empty() {
            return Err(PyValueError::new_err(
                "nothing to refresh: give add (a JSONL corpus) and/or remove_repos",
            ));
        }
        let logger = logger_or_default(py, logger)?;
        let config = freshstack::index::RefreshConfig { add, remove_repos };
        let progress = LogProgress::new(logger);
        let path = self.path.clone();
        run_interruptible(py, &progress, || {
            freshstack::search::refresh_hybrid_index(
                &config,
                &path,
                freshstack::embed::DeviceSpec::default(),
                None,
                &progress,
            )
        })?;
        Self::new(py, path)
    }

    /// Documents in the index.
    fn __len__(&self) -> usize {
        self.engine.live_ids().count()
    }

    /// The top `k` of `query` as `[(doc_id, score)]`, best first.
    #[pyo3(signature = (query, k = 10, retriever = "bm25", exact = false))]
    fn search(
        &self,
        py: Python<'_>,
        query: &str,
        k: usize,
        retriever: &str,
        exact: bool,
    ) -> PyResult<Vec<(String, f64)>> {
        let options = search_options(retriever, k, exact)?;
        let hits = py
            .detach(|| self.engine.search(query, &options))
            .map_err(library_error)?;
        Ok(hits.into_iter().map(|d| (d.doc_id, d.score)).collect())
    }

    /// Dense top `k` for query vectors of model `model` (`""`: the index's only dense model):
    /// a float32 array `[dim]` gives `[(doc_id, score)]`, `[n, dim]` a list of them, one per
    /// row, by HNSW (rescored exactly) unless `exact`. Rows are used as given: normalise them
    /// as the model's vectors are.
    #[pyo3(signature = (vectors, k = 10, model = "", exact = false))]
    fn search_vectors<'py>(
        &self,
        py: Python<'py>,
        vectors: &Bound<'py, PyAny>,
        k: usize,
        model: &str,
        exact: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        use numpy::{PyReadonlyArrayDyn, PyUntypedArrayMethods};
        let array: PyReadonlyArrayDyn<'py, f32> = vectors.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "vectors: expected a float32 numpy array, got {}",
                type_name(vectors)
            ))
        })?;
        let shape = array.shape().to_vec();
        let (rows, dim) = match shape.as_slice() {
            [dim] => (1, *dim),
            [rows, dim] => (*rows, *dim),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "vectors: expected 1 or 2 dimensions, got shape {shape:?}"
                )));
            }
        };
        let data = array.as_slice().map_err(|_| {
            PyValueError::new_err(
                "vectors: the array is not C-contiguous (pass np.ascontiguousarray(vectors))",
            )
        })?;
        let options = search_options("bm25", k, exact)?;
        let queries: Vec<&[f32]> = if dim == 0 {
            vec![&[]; rows]
        } else {
            data.chunks(dim).collect()
        };
        let results = py
            .detach(|| self.engine.search_vectors(model, &queries, &options))
            .map_err(library_error)?;
        let pairs = |hits: Vec<ScoredDoc>| -> Vec<(String, f64)> {
            hits.into_iter().map(|d| (d.doc_id, d.score)).collect()
        };
        if shape.len() == 1 {
            let first = results.into_iter().next().unwrap_or_default();
            return Ok(pairs(first).into_pyobject(py)?.into_any());
        }
        let all: Vec<Vec<(String, f64)>> = results.into_iter().map(pairs).collect();
        Ok(all.into_pyobject(py)?.into_any())
    }

    /// A run for `queries` (`{query_id: text}`): `{query_id: {doc_id: score}}`.
    #[pyo3(signature = (queries, k = 100, retriever = "bm25", exact = false))]
    fn retrieve<'py>(
        &self,
        py: Python<'py>,
        queries: &Bound<'py, PyAny>,
        k: usize,
        retriever: &str,
        exact: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let options = search_options(retriever, k, exact)?;
        let mut ids = Vec::new();
        let mut texts = Vec::new();
        for (id, text) in dict_of("queries", queries)?.iter() {
            let id = key_of("queries", &id)?;
            let text: String = text
                .extract()
                .map_err(|_| PyTypeError::new_err(format!("queries[{id:?}]: expected str")))?;
            ids.push(id);
            texts.push(text);
        }
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        // In slices, so that Ctrl-C raises KeyboardInterrupt between them (every query's hits
        // are its own: the slicing changes none).
        let mut results = Vec::with_capacity(refs.len());
        for slice in refs.chunks(RETRIEVE_SLICE) {
            let hits = py
                .detach(|| self.engine.search_batch(slice, &options))
                .map_err(library_error)?;
            results.extend(hits);
            py.check_signals()?;
        }
        let out = PyDict::new(py);
        for (id, hits) in ids.iter().zip(results) {
            let docs = PyDict::new(py);
            for hit in hits {
                docs.set_item(hit.doc_id, hit.score)?;
            }
            out.set_item(id, docs)?;
        }
        Ok(out)
    }
}

/// A dataset (a local export directory or files, or `ORG/NAME:TOPIC` in the Hugging Face cache,
/// offline) as the reference's `DataLoader` gives it: a dict with `corpus`
/// (`{id: {"title", "text"}}`), `queries` (`{id: "title text"}`), `nuggets` (`{id: text}`),
/// `qrels_nuggets`, `qrels_query` and `query_to_nuggets`.
#[pyfunction]
#[pyo3(signature = (queries, corpus, split = "test", corpus_split = "train"))]
fn load_dataset<'py>(
    py: Python<'py>,
    queries: &str,
    corpus: &str,
    split: &str,
    corpus_split: &str,
) -> PyResult<Bound<'py, PyDict>> {
    let (questions, documents) = py
        .detach(|| -> freshstack::Result<_> {
            let cache = freshstack::dataset::hub_cache_dir();
            let q_files = freshstack::dataset::resolve_files(
                &DatasetSpec::from(queries),
                DatasetPart::Queries,
                split,
                &cache,
            )?;
            let c_files = freshstack::dataset::resolve_files(
                &DatasetSpec::from(corpus),
                DatasetPart::Corpus,
                corpus_split,
                &cache,
            )?;
            Ok((
                freshstack::dataset::load_queries(&q_files)?,
                freshstack::dataset::load_corpus(&c_files)?,
            ))
        })
        .map_err(library_error)?;
    let out = PyDict::new(py);
    let corpus_dict = PyDict::new(py);
    for d in &documents {
        let row = PyDict::new(py);
        row.set_item("text", &d.text)?;
        row.set_item("title", &d.title)?;
        corpus_dict.set_item(&d.id, row)?;
    }
    let queries_dict = PyDict::new(py);
    let nuggets_dict = PyDict::new(py);
    let qrels_nuggets = PyDict::new(py);
    let qrels_query = PyDict::new(py);
    let query_to_nuggets = PyDict::new(py);
    for q in &questions {
        queries_dict.set_item(
            q.query_id.to_string(),
            format!("{} {}", q.query_title, q.query_text),
        )?;
        if q.nuggets.is_empty() {
            continue;
        }
        let ids = PyList::empty(py);
        let relevant = PyDict::new(py);
        for n in &q.nuggets {
            nuggets_dict.set_item(&n.id, &n.text)?;
            ids.append(&n.id)?;
            let docs = PyDict::new(py);
            for doc in &n.relevant_corpus_ids {
                docs.set_item(doc, 1)?;
                relevant.set_item(doc, 1)?;
            }
            qrels_nuggets.set_item(&n.id, docs)?;
        }
        qrels_query.set_item(q.query_id.to_string(), relevant)?;
        query_to_nuggets.set_item(q.query_id.to_string(), ids)?;
    }
    out.set_item("corpus", corpus_dict)?;
    out.set_item("queries", queries_dict)?;
    out.set_item("nuggets", nuggets_dict)?;
    out.set_item("qrels_nuggets", qrels_nuggets)?;
    out.set_item("qrels_query", qrels_query)?;
    out.set_item("query_to_nuggets", query_to_nuggets)?;
    Ok(out)
}

/// Panics inside Rust: for the test that a panic reaches Python as an exception, never an abort.
/// The library's progress as lines on a Python logger (at most one every
/// [`PROGRESS_EVERY`] per step, plus its start and end), and a flag the build looks at before
/// each item: set when Ctrl-C reaches the waiting Python thread.
struct LogProgress {
    logger: Py<PyAny>,
    cancel: AtomicBool,
    step: Mutex<Step>,
}

/// The step in progress.
struct Step {
    label: String,
    total: Option<u64>,
    done: u64,
    logged: Instant,
}

/// Least time between two progress lines of one step.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

impl LogProgress {
    fn new(logger: Py<PyAny>) -> Self {
        Self {
            logger,
            cancel: AtomicBool::new(false),
            step: Mutex::new(Step {
                label: String::new(),
                total: None,
                done: 0,
                logged: Instant::now(),
            }),
        }
    }

    fn info(&self, line: String) {
        Python::attach(|py| {
            // A logger that fails to log must not fail the build.
            let _ = self.logger.bind(py).call_method1("info", (line,));
        });
    }
}

impl freshstack::Progress for LogProgress {
    fn begin(&self, label: &str, total: Option<u64>) {
        if let Ok(mut step) = self.step.lock() {
            *step = Step {
                label: label.to_string(),
                total,
                done: 0,
                logged: Instant::now(),
            };
        }
        self.info(match total {
            Some(total) => format!("{label}: 0/{total}"),
            None => format!("{label}: started"),
        });
    }

    fn advance(&self, units: u64) {
        let line = match self.step.lock() {
            Ok(mut step) => {
                step.done += units;
                if step.logged.elapsed() < PROGRESS_EVERY {
                    return;
                }
                step.logged = Instant::now();
                match step.total {
                    Some(total) => format!(
                        "{}: {}/{total} ({:.0}%)",
                        step.label,
                        step.done,
                        100.0 * step.done as f64 / total.max(1) as f64
                    ),
                    None => format!("{}: {}", step.label, step.done),
                }
            }
            Err(_) => return,
        };
        self.info(line);
    }

    fn finish(&self) {
        let line = match self.step.lock() {
            Ok(step) => format!("{}: done ({})", step.label, step.done),
            Err(_) => return,
        };
        self.info(line);
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
}

/// A build config from a path (TOML) or from JSON text (a dict, dumped by the package; its
/// relative paths resolve against the working directory).
fn build_config(
    config_path: Option<PathBuf>,
    config_json: Option<String>,
) -> PyResult<freshstack::pipeline::BuildConfig> {
    use freshstack::pipeline::BuildConfig;
    match (config_path, config_json) {
        (Some(path), None) => BuildConfig::load(&path).map_err(library_error),
        (None, Some(json)) => {
            let base = std::env::current_dir()
                .map_err(|e| PyValueError::new_err(format!("config: no working directory: {e}")))?;
            BuildConfig::from_json(&json, Path::new("config"), &base).map_err(library_error)
        }
        _ => Err(PyTypeError::new_err(
            "config: give a path to a TOML file or a dict",
        )),
    }
}

/// Runs `work` (a build) on its own thread while this one waits with the GIL released,
/// looking for Ctrl-C every 50 ms: on Ctrl-C it asks the build to stop, waits for it to stop
/// (at its next item or stage: nothing keeps running behind Python's back), then raises
/// KeyboardInterrupt.
fn run_interruptible<T: Send>(
    py: Python<'_>,
    progress: &LogProgress,
    work: impl FnOnce() -> freshstack::Result<T> + Send,
) -> PyResult<T> {
    let (result, interrupt) = std::thread::scope(|scope| {
        let handle = scope.spawn(work);
        let mut interrupt: Option<PyErr> = None;
        while !handle.is_finished() {
            py.detach(|| std::thread::sleep(Duration::from_millis(50)));
            if interrupt.is_none()
                && let Err(e) = py.check_signals()
            {
                progress.cancel.store(true, Ordering::Relaxed);
                interrupt = Some(e);
            }
        }
        (handle.join(), interrupt)
    });
    if let Some(interrupt) = interrupt {
        return Err(interrupt);
    }
    match result {
        Ok(result) => result.map_err(library_error),
        Err(_) => Err(pyo3::exceptions::PyRuntimeError::new_err(
            "the build panicked (a bug: please report it)",
        )),
    }
}

/// A build's summary as a dict: out, questions, documents, and per stage its name, whether it
/// ran, its seconds and its one-line result.
fn build_summary<'py>(
    py: Python<'py>,
    summary: &freshstack::pipeline::BuildSummary,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("out", summary.out.to_string_lossy().as_ref())?;
    dict.set_item("questions", summary.questions)?;
    dict.set_item("documents", summary.documents)?;
    let stages = PyList::empty(py);
    for stage in &summary.stages {
        let row = PyDict::new(py);
        row.set_item("stage", stage.stage)?;
        row.set_item("ran", stage.ran)?;
        row.set_item("seconds", stage.elapsed.as_secs_f64())?;
        row.set_item("detail", &stage.detail)?;
        stages.append(row)?;
    }
    dict.set_item("stages", stages)?;
    Ok(dict)
}

/// `freshstack build`: the whole pipeline into `out`, resuming what a previous run finished;
/// progress and each stage's line go to `logger`.
#[pyfunction]
#[pyo3(signature = (logger, out, config_path = None, config_json = None))]
fn build<'py>(
    py: Python<'py>,
    logger: Py<PyAny>,
    out: PathBuf,
    config_path: Option<PathBuf>,
    config_json: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let config = build_config(config_path, config_json)?;
    let progress = LogProgress::new(logger);
    let summary = run_interruptible(py, &progress, || {
        freshstack::pipeline::build(
            &config,
            &out,
            &freshstack::report::ReportOptions::default(),
            &progress,
            &mut |stage| progress.info(stage_line(stage)),
        )
    })?;
    build_summary(py, &summary)
}

/// `freshstack refresh`: a new build in `out` from the finished build `from_dir`, carrying over
/// what is unchanged; as [`build`].
#[pyfunction]
#[pyo3(signature = (logger, from_dir, out, config_path = None, config_json = None))]
fn refresh<'py>(
    py: Python<'py>,
    logger: Py<PyAny>,
    from_dir: PathBuf,
    out: PathBuf,
    config_path: Option<PathBuf>,
    config_json: Option<String>,
) -> PyResult<Bound<'py, PyDict>> {
    let config = build_config(config_path, config_json)?;
    let prepared =
        freshstack::pipeline::Refresh::prepare(&config, &from_dir, &out).map_err(library_error)?;
    let progress = LogProgress::new(logger);
    let summary = run_interruptible(py, &progress, || {
        prepared.run(
            &freshstack::report::ReportOptions::default(),
            &progress,
            &mut |stage| progress.info(stage_line(stage)),
        )
    })?;
    build_summary(py, &summary.build)
}

/// A stage's line, as `freshstack build` prints it.
fn stage_line(stage: &freshstack::pipeline::StageOutcome) -> String {
    format!(
        "{} {:.1}s: {}{}",
        stage.stage,
        stage.elapsed.as_secs_f64(),
        if stage.ran { "" } else { "skipped: " },
        stage.detail
    )
}

#[pyfunction]
fn _panic_for_test() {
    panic!("a deliberate panic");
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("FreshstackError", m.py().get_type::<FreshstackError>())?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(paired_significance, m)?)?;
    m.add_function(wrap_pyfunction!(fuse, m)?)?;
    m.add_function(wrap_pyfunction!(load_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(build, m)?)?;
    m.add_function(wrap_pyfunction!(refresh, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_class::<Encoder>()?;
    m.add_class::<Index>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
