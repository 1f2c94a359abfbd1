//! The hybrid engine end to end: dense models that encode the corpus at index time and queries
//! at search time, fusion as a retriever, batched search, with a hashed bag-of-words encoder (no
//! model needed). `hybrid_minilm` does the same with the real all-MiniLM-L6-v2.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use freshstack::NoProgress;
use freshstack::Progress;
use freshstack::dataset::{Embeddings, Encoder, ScoredDoc, TextKind};
use freshstack::index::{
    Bm25Settings, DenseModelRef, DocumentModel, HnswSettings, IndexConfig, LoadedModel,
    build_index_with_encoders,
};
use freshstack::search::{
    Ann, Engine, FusionMethod, QueryEncoderOptions, RetrieverSpec, SearchOptions,
};

use crate::util::{copy_dir, write};

pub(crate) const DOCS: &[(&str, &str)] = &[
    (
        "laravel/docs/routing.md_0_10",
        "Routes are defined in routes/web.php: Route::get registers a GET route returning a view.",
    ),
    (
        "laravel/docs/queues.md_0_10",
        "Queued jobs run in the background: dispatch a job and run php artisan queue:work.",
    ),
    (
        "laravel/docs/eloquent.md_0_10",
        "Eloquent models map database tables to classes; Model::where('active', 1)->get() queries rows.",
    ),
    (
        "laravel/docs/mail.md_0_10",
        "Sending email: build a Mailable class and send it with Mail::to($user)->send().",
    ),
    (
        "php/doc/array.md_0_10",
        "array_map applies a callback to every element of an array and returns a new array.",
    ),
    (
        "php/doc/string.md_0_10",
        "str_contains checks whether a string contains a given substring, case-sensitively.",
    ),
    (
        "php/doc/date.md_0_10",
        "The DateTime class parses and formats dates; date('Y-m-d') formats the current day.",
    ),
    (
        "laravel/docs/cache.md_0_10",
        "The cache stores items for a number of seconds; Cache::remember caches a closure's result.",
    ),
];

pub(crate) fn corpus(dir: &Path) -> PathBuf {
    let lines: Vec<String> = DOCS
        .iter()
        .map(|(id, text)| {
            // Keys in sorted order, the bytes the manifest golden's corpus hash was made from.
            serde_json::json!({"_id": id, "metadata": {}, "text": text, "title": ""}).to_string()
        })
        .collect();
    write(dir, "corpus.jsonl", lines.join("\n") + "\n")
}

/// A hashed bag-of-words encoder: words (lowercased, alphanumeric runs) counted into 64 buckets,
/// L2-normalised. Crude, deterministic, and enough to check the plumbing and fusion arithmetic.
struct HashEncoder;

const HASH_DIM: usize = 64;

fn hash_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; HASH_DIM];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in word.to_lowercase().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        v[(h % HASH_DIM as u64) as usize] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        v[0] = 1.0;
        return v;
    }
    v.into_iter().map(|x| x / norm).collect()
}

fn hash_model_ref() -> DenseModelRef {
    DenseModelRef {
        reference: "test/hash".into(),
        id: "test/hash".into(),
        dir: "/nonexistent/hash".into(),
        fingerprint: "0-0".into(),
        query_template: "{text}".into(),
        document_template: "{text}".into(),
        task: String::new(),
        max_length: 512,
        pooling: "mean".into(),
        model_dtype: "f32".into(),
        dimensions: None,
    }
}

impl DocumentModel for HashEncoder {
    fn name(&self) -> &str {
        "hash"
    }

    fn storage_dtype(&self) -> freshstack::dataset::VectorDtype {
        freshstack::dataset::VectorDtype::F32
    }

    fn load(&self) -> freshstack::Result<LoadedModel> {
        Ok(LoadedModel {
            encoder: Box::new(HashEncoder),
            model: Some(hash_model_ref()),
            source: "test/hash".into(),
        })
    }
}

impl Encoder for HashEncoder {
    fn dim(&self) -> usize {
        HASH_DIM
    }

    fn embed(
        &self,
        texts: &[&str],
        _: TextKind,
        _: &dyn Progress,
    ) -> freshstack::Result<Embeddings> {
        Ok(Embeddings {
            dim: HASH_DIM,
            data: texts.iter().flat_map(|t| hash_vector(t)).collect(),
            num_truncated: 0,
            num_tokens: 0,
        })
    }
}

fn hash_index(dir: &Path) -> PathBuf {
    let config = IndexConfig {
        corpus: corpus(dir),
        bm25: Some(Bm25Settings::default()),
        vectors: vec![],
        hnsw: Some(HnswSettings::default()),
    };
    let index = dir.join("index");
    build_index_with_encoders(&config, &[&HashEncoder], &index, &NoProgress).unwrap();
    index
}

fn hash_engine(index: &Path) -> Engine {
    let mut engine = Engine::open(index).unwrap();
    engine
        .set_query_encoder("hash", Arc::new(HashEncoder))
        .unwrap();
    engine
}

pub(crate) fn options(retriever: &str, k: usize) -> SearchOptions {
    SearchOptions {
        retriever: retriever.parse().unwrap(),
        k,
        ..SearchOptions::default()
    }
}

/// min-max normalisation of one retriever's list, as the reference's `util.fusion`.
fn normalized(hits: &[ScoredDoc]) -> Vec<(String, f64)> {
    let scores: Vec<f64> = hits.iter().map(|h| h.score).collect();
    let min = scores.iter().copied().fold(f64::INFINITY, f64::min);
    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    hits.iter()
        .zip(&scores)
        .map(|(h, s)| (h.doc_id.clone(), (s - min) / (max - min + 1e-8)))
        .collect()
}

#[test]
fn fusion_is_the_normalized_sum_of_the_retrievers() {
    let dir = tempfile::tempdir().unwrap();
    let engine = hash_engine(&hash_index(dir.path()));
    let query = "run queued jobs in the background with an artisan class";
    let bm25 = engine.search(query, &options("bm25", 100)).unwrap();
    let dense = engine.search(query, &options("dense:hash", 100)).unwrap();
    assert!(bm25.len() >= 2 && dense.len() == DOCS.len());
    assert_eq!(bm25[0].doc_id, "laravel/docs/queues.md_0_10");
    assert_eq!(dense[0].doc_id, "laravel/docs/queues.md_0_10");

    let mut expected: std::collections::BTreeMap<String, f64> = Default::default();
    for list in [&bm25, &dense] {
        for (id, s) in normalized(list) {
            *expected.entry(id).or_default() += s;
        }
    }
    let fused = engine
        .search_explained(query, &options("fusion", 5))
        .unwrap();
    assert_eq!(fused.len(), 5);
    for pair in fused.windows(2) {
        assert!(pair[0].doc.score >= pair[1].doc.score);
    }
    for hit in &fused {
        let want = expected[&hit.doc.doc_id];
        assert!(
            (hit.doc.score - want).abs() < 1e-5,
            "{}: {} vs {want}",
            hit.doc.doc_id,
            hit.doc.score
        );
        // Per-retriever places are the single retrievers' ranks and raw scores.
        for place in &hit.places {
            let list = if place.retriever == "bm25" {
                &bm25
            } else {
                &dense
            };
            assert!(place.retriever == "bm25" || place.retriever == "dense:hash");
            let rank = list
                .iter()
                .position(|h| h.doc_id == hit.doc.doc_id)
                .unwrap()
                + 1;
            assert_eq!(place.rank, rank);
            assert!((place.score - list[rank - 1].score).abs() < 1e-6);
        }
        let in_bm25 = bm25.iter().any(|h| h.doc_id == hit.doc.doc_id);
        assert_eq!(hit.places.len(), 1 + usize::from(in_bm25));
    }
    // The best of all lists is fused first; the explicit list fuses the same.
    assert_eq!(fused[0].doc.doc_id, "laravel/docs/queues.md_0_10");
    assert!((fused[0].doc.score - 2.0).abs() < 1e-5);
    let explicit = engine
        .search_explained(query, &options("fusion:dense:hash,bm25", 5))
        .unwrap();
    assert_eq!(
        explicit.iter().map(|h| &h.doc.doc_id).collect::<Vec<_>>(),
        fused.iter().map(|h| &h.doc.doc_id).collect::<Vec<_>>()
    );
    assert_eq!(explicit[0].places[0].retriever, "dense:hash");
    // Without places, the same ranking.
    let plain = engine.search(query, &options("fusion", 5)).unwrap();
    assert_eq!(
        plain,
        fused.iter().map(|h| h.doc.clone()).collect::<Vec<_>>()
    );
    // Depth: only the top 1 of each retriever takes part.
    let shallow = SearchOptions {
        fusion_depth: 1,
        ..options("fusion", 10)
    };
    let hits = engine.search(query, &shallow).unwrap();
    assert_eq!(hits.len(), 1);
    // RRF: sum of 1 / (60 + rank).
    let rrf = SearchOptions {
        fusion_method: FusionMethod::Rrf { k: 60.0 },
        ..options("fusion", 3)
    };
    let hits = engine.search_explained(query, &rrf).unwrap();
    let top = &hits[0];
    let want: f64 = top
        .places
        .iter()
        .map(|p| 1.0 / (60.0 + p.rank as f64))
        .sum();
    assert!((top.doc.score - want).abs() < 1e-6);
}

#[test]
fn batch_search_equals_one_by_one_whatever_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    let engine = hash_engine(&hash_index(dir.path()));
    let queries = [
        "background queue worker",
        "format the current date",
        "#### ???",
        "cache a closure result",
        "send email to a user",
    ];
    for retriever in ["bm25", "dense:hash", "fusion"] {
        let opts = options(retriever, 4);
        let batch = engine.search_batch(&queries, &opts).unwrap();
        assert_eq!(batch.len(), queries.len());
        for (query, hits) in queries.iter().zip(&batch) {
            if retriever == "bm25" && !engine.has_searchable_terms(query).unwrap() {
                assert!(hits.is_empty());
                assert!(engine.search(query, &opts).is_err());
                continue;
            }
            assert_eq!(
                hits,
                &engine.search(query, &opts).unwrap(),
                "{retriever} {query}"
            );
        }
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let four = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        let a = one.install(|| engine.search_batch(&queries, &opts).unwrap());
        let b = four.install(|| engine.search_batch(&queries, &opts).unwrap());
        assert_eq!(a, b);
        assert_eq!(a, batch);
    }
    // A symbols-only query still gets the dense half of a fusion.
    let hits = engine
        .search_explained("#### ???", &options("fusion", 3))
        .unwrap();
    assert_eq!(hits.len(), 3);
    assert!(hits.iter().all(|h| h.places[0].retriever == "dense:hash"));
}

#[test]
fn bad_retrievers_and_missing_encoders_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let index = hash_index(dir.path());
    let engine = hash_engine(&index);
    let err = |r: &str| {
        engine
            .search("queue", &options(r, 3))
            .unwrap_err()
            .to_string()
    };
    assert!(err("fusion:bm25,bm25").contains("names bm25 twice"));
    assert!(err("fusion:bm25,dense:nope").contains("no such model"));
    // Names that are no retriever fail while parsing, before any engine sees them.
    let parse_err = |r: &str| r.parse::<RetrieverSpec>().unwrap_err().to_string();
    assert!(parse_err("fusion:bm25,fusion").contains("cannot contain a fusion"));
    assert!(parse_err("fusion:bm25,splade").contains("unknown retriever"));
    assert!(parse_err("fusionx").contains("unknown retriever"));
    // A nested fusion built by hand is still refused by the engine.
    let nested = SearchOptions {
        retriever: RetrieverSpec::Fusion(vec![RetrieverSpec::Bm25, RetrieverSpec::Fusion(vec![])]),
        ..options("fusion", 3)
    };
    let e = engine.search("queue", &nested).unwrap_err().to_string();
    assert!(e.contains("cannot contain a fusion"), "{e}");
    let weights = SearchOptions {
        fusion_weights: Some(vec![1.0]),
        ..options("fusion", 3)
    };
    let e = engine.search("queue", &weights).unwrap_err().to_string();
    assert!(e.contains("1 weights for 2 runs"), "{e}");
    let no_depth = SearchOptions {
        fusion_depth: 0,
        ..options("fusion", 3)
    };
    let e = engine.search("queue", &no_depth).unwrap_err().to_string();
    assert!(
        e.contains("invalid fusion depth: must be at least 1"),
        "{e}"
    );
    // Without a registered encoder, dense text search says what is missing.
    let bare = Engine::open(&index).unwrap();
    let e = bare
        .search("queue", &options("fusion", 3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("dense:hash needs a query encoder"), "{e}");
    // The recorded model is not on this machine: the error says how to name it.
    let mut bare = bare;
    let e = bare
        .load_query_encoders(&["hash"], &QueryEncoderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("invalid query model: dense:hash: ") && e.contains("as hash=DIR"),
        "{e}"
    );
    // A BM25-only index has nothing to fuse.
    let bm25_only = dir.path().join("bm25-only");
    let config = IndexConfig {
        corpus: dir.path().join("corpus.jsonl"),
        bm25: Some(Bm25Settings::default()),
        vectors: vec![],
        hnsw: None,
    };
    build_index_with_encoders(&config, &[], &bm25_only, &NoProgress).unwrap();
    let e = Engine::open(&bm25_only)
        .unwrap()
        .search("queue", &options("fusion", 3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("fusion needs two retrievers"), "{e}");
    // Two encoders with one name.
    let e = build_index_with_encoders(
        &config,
        &[&HashEncoder, &HashEncoder],
        &bm25_only,
        &NoProgress,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("\"hash\" given twice"), "{e}");
}

/// The manifest's shape is pinned: a change here is a format change (bump FORMAT_VERSION).
#[test]
fn manifest_golden() {
    let dir = tempfile::tempdir().unwrap();
    let index = hash_index(dir.path());
    let mut manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(index.join("manifest.json")).unwrap())
            .unwrap();
    // Paths and tantivy's segment names vary; everything else is fixed.
    manifest["corpus"]["path"] = "corpus.jsonl".into();
    manifest["created_by"] = "freshstack VERSION".into();
    // The seal covers the corpus path, which varies.
    manifest.as_object_mut().unwrap().remove("checksum");
    let files: Vec<String> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap().to_string())
        .filter(|p| !p.starts_with("bm25/"))
        .collect();
    manifest["files"] = serde_json::json!(files);
    let golden_path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/index-manifest-v1.json");
    let got = serde_json::to_string_pretty(&sorted_keys(manifest)).unwrap() + "\n";
    if std::env::var_os("FRESHSTACK_BLESS").is_some() {
        std::fs::write(&golden_path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&golden_path).unwrap();
    assert_eq!(
        got, want,
        "manifest changed: rerun with FRESHSTACK_BLESS=1 if intended"
    );
}

/// `value` with every object's keys in sorted order (the golden file's order), whatever order
/// serde_json keeps (llguidance turns on its `preserve_order`).
fn sorted_keys(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(String, serde_json::Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted_keys(v)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted_keys).collect())
        }
        other => other,
    }
}

/// A committed format-1 index (scripts/make-index-fixture.sh) still opens and searches.
#[test]
fn committed_v1_index_opens_and_searches() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/index-v1");
    let index = dir.path().join("index");
    copy_dir(&fixture, &index);
    let engine = Engine::open(&index).unwrap();
    assert_eq!(engine.info().retrievers, ["bm25", "dense:onehot"]);
    let hits = engine
        .search("background queue", &options("bm25", 2))
        .unwrap();
    assert_eq!(hits[0].doc_id, "laravel/docs/queues.md_0_10");
    let exact = SearchOptions {
        ann: Ann::Exact,
        ..options("dense:onehot", 1)
    };
    let hits = engine
        .search_vector("onehot", &[0.0, 0.0, 0.0, 1.0], &exact)
        .unwrap();
    assert_eq!(hits[0].doc_id, "laravel/docs/cache.md_0_10");
    assert!((hits[0].score - 1.0).abs() < 1e-6);
    // Fusion of the two, with the vector half given by a query encoder.
    struct Axis;
    impl Encoder for Axis {
        fn dim(&self) -> usize {
            4
        }
        fn embed(
            &self,
            texts: &[&str],
            _: TextKind,
            _: &dyn Progress,
        ) -> freshstack::Result<Embeddings> {
            Ok(Embeddings {
                dim: 4,
                data: texts.iter().flat_map(|_| [0.0, 1.0, 0.0, 0.0]).collect(),
                num_truncated: 0,
                num_tokens: 0,
            })
        }
    }
    let mut engine = engine;
    engine.set_query_encoder("onehot", Arc::new(Axis)).unwrap();
    let hits = engine
        .search("background queue", &options("fusion", 4))
        .unwrap();
    let ids: Vec<&str> = hits.iter().map(|h| h.doc_id.as_str()).collect();
    assert!(
        ids.contains(&"laravel/docs/queues.md_0_10") && ids.contains(&"php/doc/string.md_0_10")
    );
}

/// `index --dense` with a Matryoshka width: the vectors are stored at that width, the manifest
/// records it, and a search encodes its query at the same width (a full-width query would not
/// fit the stored vectors). Without a width nothing is recorded, as in manifests from before.
#[test]
fn a_matryoshka_width_is_recorded_and_applied_to_queries() {
    use freshstack::embed::{EncoderOptions, ModelDType};
    use freshstack::search::{DenseModelSpec, HybridIndexConfig, build_hybrid_index};
    use std::str::FromStr;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny-stella");
    crate::embed::tiny_stella(&model);
    let build = |dimensions: Option<usize>, name: &str| {
        let index = dir.path().join(name);
        let config = HybridIndexConfig {
            corpus: corpus(dir.path()),
            dense: vec![DenseModelSpec::from_str(&format!("s={}", model.display())).unwrap()],
            encoder: EncoderOptions {
                dimensions,
                dtype: Some(ModelDType::F32),
                ..EncoderOptions::default()
            },
            ..HybridIndexConfig::default()
        };
        let summary = build_hybrid_index(&config, &index, &NoProgress).unwrap();
        (index, summary.manifest.dense[0].clone())
    };
    let (cut_index, cut) = build(Some(8), "cut");
    assert_eq!(cut.dim, 8);
    assert_eq!(cut.model.as_ref().unwrap().dimensions, Some(8));
    let (full_index, full) = build(None, "full");
    assert_eq!(full.dim, 16);
    assert_eq!(full.model.as_ref().unwrap().dimensions, None);
    let manifest = std::fs::read_to_string(full_index.join("manifest.json")).unwrap();
    assert!(!manifest.contains("dimensions"), "{manifest}");

    let engine = Engine::open_with_encoders(&cut_index, &QueryEncoderOptions::default()).unwrap();
    // A document's own text finds it with cosine ~1 at the cut width too.
    let hits = engine.search(DOCS[2].1, &options("dense:s", 1)).unwrap();
    assert_eq!(hits[0].doc_id, DOCS[2].0, "{hits:?}");
    assert!((hits[0].score - 1.0).abs() < 5e-3, "{}", hits[0].score);
}

#[test]
fn one_index_holds_two_widths_of_a_model() {
    use freshstack::embed::{EncoderOptions, ModelDType};
    use freshstack::search::{DenseModelSpec, HybridIndexConfig, build_hybrid_index};
    use std::str::FromStr;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny-stella");
    crate::embed::tiny_stella(&model);
    let index = dir.path().join("index");
    let config = HybridIndexConfig {
        corpus: corpus(dir.path()),
        dense: vec![
            DenseModelSpec::from_str(&format!("{}#8", model.display())).unwrap(),
            DenseModelSpec::from_str(&format!("full={}", model.display())).unwrap(),
        ],
        encoder: EncoderOptions {
            dtype: Some(ModelDType::F32),
            ..EncoderOptions::default()
        },
        ..HybridIndexConfig::default()
    };
    let summary = build_hybrid_index(&config, &index, &NoProgress).unwrap();
    let widths: Vec<_> = summary
        .manifest
        .dense
        .iter()
        .map(|d| (d.name.as_str(), d.dim, d.model.as_ref().unwrap().dimensions))
        .collect();
    assert_eq!(
        widths,
        [("full", 16, None), ("tiny-stella-8", 8, Some(8))],
        "{widths:?}"
    );
    // A width the model does not define is refused naming the model and its widths, and no
    // index is written.
    let refused = dir.path().join("refused");
    let config = HybridIndexConfig {
        dense: vec![DenseModelSpec::from_str(&format!("{}#12", model.display())).unwrap()],
        ..config
    };
    let err = build_hybrid_index(&config, &refused, &NoProgress)
        .unwrap_err()
        .to_string();
    let wanted = format!(
        "12 for {}: the model's Matryoshka widths are 8, 16",
        model.display()
    );
    assert!(err.contains(&wanted), "{err}");
    assert!(!refused.exists());
    let engine = Engine::open_with_encoders(&index, &QueryEncoderOptions::default()).unwrap();
    for retriever in ["dense:tiny-stella-8", "dense:full"] {
        let hits = engine.search(DOCS[2].1, &options(retriever, 1)).unwrap();
        assert_eq!(hits[0].doc_id, DOCS[2].0, "{retriever}: {hits:?}");
        assert!(
            (hits[0].score - 1.0).abs() < 5e-3,
            "{retriever}: {}",
            hits[0].score
        );
    }
}
