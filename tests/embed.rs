//! Encoder integration tests on the real all-MiniLM-L6-v2 (fetched by scripts/setup.sh; the tests
//! skip loudly without it) and on broken model directories.

use std::path::{Path, PathBuf};

use freshstack::NoProgress;
use freshstack::dataset::{Embeddings, Encoder, TextKind, read_npy_f32};
use freshstack::embed::{EncoderOptions, ModelDType, TextEncoder, resolve_model};

use crate::util::{freshstack, minilm_dir, real_model_dir};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load(dir: &Path, options: &EncoderOptions) -> TextEncoder {
    let files = resolve_model(dir.to_str().unwrap()).unwrap();
    TextEncoder::load(&files, options).unwrap()
}

#[derive(serde::Deserialize)]
struct Reference {
    texts: Vec<String>,
    vectors: Vec<Vec<f32>>,
    /// The first texts embedded as queries, for models whose prompts differ by kind.
    #[serde(default)]
    query_vectors: Vec<Vec<f32>>,
}

fn reference() -> Reference {
    reference_of("minilm")
}

/// `tests/fixtures/embed/NAME_reference.json` (scripts/gen_encoder_reference.py).
fn reference_of(name: &str) -> Reference {
    let path = root().join(format!("tests/fixtures/embed/{name}_reference.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

#[test]
fn minilm_matches_sentence_transformers() {
    let Some(dir) = minilm_dir() else { return };
    matches_sentence_transformers(&dir, &reference(), 384, 1);
}

/// all-mpnet-base-v2 (MPNet: relative position buckets, RoBERTa positions, 384 tokens).
#[test]
fn mpnet_matches_sentence_transformers() {
    let Some(dir) = real_model_dir("all-mpnet-base-v2", "scripts/setup.sh --with-encoders") else {
        return;
    };
    matches_sentence_transformers(&dir, &reference_of("mpnet"), 768, 1);
}

/// EmbeddingGemma-300M (Gemma-3, bidirectional attention with a 512 window, two Dense
/// projections after mean pooling, a prompt per kind; 2048 tokens, so nothing is cut).
#[test]
fn embeddinggemma_matches_sentence_transformers() {
    let Some(dir) = real_model_dir("embeddinggemma-300m", "scripts/setup.sh --with-encoders")
    else {
        return;
    };
    let reference = reference_of("embeddinggemma");
    assert!(!reference.query_vectors.is_empty());
    matches_sentence_transformers(&dir, &reference, 768, 0);
}

/// Matryoshka: `dimensions: 256` gives sentence-transformers' `truncate_dim=256` vectors (the
/// first 256 values, renormalised); a width the card does not list, or a model with none, is
/// refused.
#[test]
fn matryoshka_dimensions_cut_and_renormalise_only_listed_widths() {
    let Some(dir) = real_model_dir("embeddinggemma-300m", "scripts/setup.sh --with-encoders")
    else {
        return;
    };
    let reference = reference_of("embeddinggemma");
    let options = EncoderOptions {
        dimensions: Some(256),
        ..EncoderOptions::default()
    };
    let encoder = load(&dir, &options);
    assert_eq!(encoder.dim(), 256);
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).take(6).collect();
    let got = encoder
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    let cut: Vec<Vec<f32>> = reference.vectors[..6]
        .iter()
        .map(|v| {
            let norm = v[..256].iter().map(|x| x * x).sum::<f32>().sqrt();
            v[..256].iter().map(|x| x / norm).collect()
        })
        .collect();
    close_to(&got, &cut, "document at 256");
    let files = resolve_model(dir.to_str().unwrap()).unwrap();
    let refused = |options: &EncoderOptions| {
        TextEncoder::load(&files, options)
            .err()
            .expect("refused")
            .to_string()
    };
    let err = refused(&EncoderOptions {
        dimensions: Some(300),
        ..EncoderOptions::default()
    });
    assert!(err.contains("768, 512, 256, 128"), "{err}");
    if let Some(minilm) = minilm_dir() {
        let files = resolve_model(minilm.to_str().unwrap()).unwrap();
        let err = TextEncoder::load(
            &files,
            &EncoderOptions {
                dimensions: Some(128),
                ..EncoderOptions::default()
            },
        )
        .err()
        .expect("refused")
        .to_string();
        assert!(err.contains("defines no Matryoshka widths"), "{err}");
    }
}

/// The model in `dir` embeds the reference texts as sentence-transformers did (cosine >= 0.9999
/// and within 1e-4 per value), in several padded batches, `truncated` of them cut at the model's
/// length; as queries too when the reference has query vectors.
fn matches_sentence_transformers(dir: &Path, reference: &Reference, dim: usize, truncated: usize) {
    // A small budget forces several batches with padding.
    let options = EncoderOptions {
        max_batch_tokens: Some(200),
        ..EncoderOptions::default()
    };
    let encoder = load(dir, &options);
    assert_eq!(encoder.dim(), dim);
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let got = encoder
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    assert_eq!(got.rows(), texts.len());
    assert_eq!(
        got.num_truncated, truncated,
        "texts cut at the model's length"
    );
    close_to(&got, &reference.vectors, "document");
    if !reference.query_vectors.is_empty() {
        let queries = &texts[..reference.query_vectors.len()];
        let got = encoder
            .embed(queries, TextKind::Query, &NoProgress)
            .unwrap();
        close_to(&got, &reference.query_vectors, "query");
    }
}

/// Each row of `got` is within cosine 0.9999 and 1e-4 per value of `reference`'s.
fn close_to(got: &Embeddings, reference: &[Vec<f32>], kind: &str) {
    for (i, want) in reference.iter().enumerate() {
        let c = cosine(got.row(i), want);
        assert!(c >= 0.9999, "{kind} {i}: cosine {c}");
        let diff = got
            .row(i)
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-4, "{kind} {i}: max abs diff {diff}");
    }
}

#[test]
fn minilm_batched_equals_one_by_one() {
    let Some(dir) = minilm_dir() else { return };
    let reference = reference();
    let encoder = load(&dir, &EncoderOptions::default());
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).take(8).collect();
    let batched = encoder.embed(&texts, TextKind::Query, &NoProgress).unwrap();
    for (i, text) in texts.iter().enumerate() {
        let alone = encoder
            .embed(&[text], TextKind::Query, &NoProgress)
            .unwrap();
        let diff = alone
            .row(0)
            .iter()
            .zip(batched.row(i))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-5, "text {i}: batched vs alone differ by {diff}");
    }
}

#[test]
fn cli_writes_npy_and_ids_in_input_order() {
    let Some(dir) = minilm_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("corpus.jsonl");
    std::fs::write(
        &input,
        "{\"_id\":\"d1\",\"title\":\"\",\"text\":\"short\"}\n\
         {\"_id\":\"d2\",\"title\":\"\",\"text\":\"a much longer document about queues and workers\"}\n\
         {\"_id\":\"d3\",\"title\":\"\",\"text\":\"middle length text\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("vectors.npy");
    let status = freshstack(&[
        "embed",
        "--model",
        dir.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--dtype",
        "f16",
    ]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let (rows, dim, data) = read_npy_f32(&out).unwrap();
    assert_eq!((rows, dim), (3, 384));
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("vectors.ids")).unwrap(),
        "d1\nd2\nd3\n"
    );
    let encoder = load(&dir, &EncoderOptions::default());
    let want = encoder
        .embed(&["middle length text"], TextKind::Document, &NoProgress)
        .unwrap();
    assert!(cosine(&data[2 * dim..], want.row(0)) > 0.999);

    // Byte-identical whatever the thread count.
    let one = tmp.path().join("one-thread.npy");
    let status = freshstack(&[
        "embed",
        "--model",
        dir.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        one.to_str().unwrap(),
        "--dtype",
        "f16",
        "--threads",
        "1",
    ]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&out).unwrap());

    // Shard 1 of 2: with one text per batch (longest first: d2, d3, d1), batch 1 is d3; the
    // sidecar records its input position.
    let shard = tmp.path().join("shard.npy");
    let status = freshstack(&[
        "embed",
        "--model",
        dir.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        shard.to_str().unwrap(),
        "--shard",
        "1/2",
        "--max-batch-tokens",
        "8",
    ]);
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("shard.ids")).unwrap(),
        "d3\n"
    );
    let sidecar: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("shard.shard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(sidecar["positions"], serde_json::json!([2]));
    assert_eq!(sidecar["total_items"], 3);
}

#[test]
fn cli_bad_input_fails_without_output() {
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("queries.jsonl");
    std::fs::write(
        &input,
        "{\"query_id\":\"q1\",\"query_title\":\"\",\"query_text\":\"\"}\n",
    )
    .unwrap();
    let out = tmp.path().join("q.npy");
    let model = tmp.path().join("no-model");
    let result = freshstack(&[
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!result.status.success());
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert!(
        stderr.contains("queries.jsonl:1: q1: empty query_title/query_text"),
        "{stderr}"
    );
    assert!(!out.exists());
}

#[test]
fn corrupt_and_mismatched_weights_are_errors() {
    let Some(dir) = minilm_dir() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir.join(file), tmp.path().join(file)).unwrap();
    }
    let weights = tmp.path().join("model.safetensors");
    std::fs::write(&weights, b"definitely not safetensors").unwrap();
    let files = resolve_model(tmp.path().to_str().unwrap()).unwrap();
    let err = TextEncoder::load(&files, &EncoderOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("cannot read weights"), "{err}");

    // A config whose width disagrees with the checkpoint: a shape error, not a panic.
    let config = std::fs::read_to_string(dir.join("config.json"))
        .unwrap()
        .replace("\"hidden_size\": 384", "\"hidden_size\": 768");
    std::fs::write(tmp.path().join("config.json"), config).unwrap();
    std::fs::copy(dir.join("model.safetensors"), &weights).unwrap();
    let err = TextEncoder::load(&files, &EncoderOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("shape"), "{err}");

    // An architecture we do not know.
    let config = std::fs::read_to_string(dir.join("config.json"))
        .unwrap()
        .replace("\"model_type\": \"bert\"", "\"model_type\": \"t5\"");
    std::fs::write(tmp.path().join("config.json"), config).unwrap();
    let err = TextEncoder::load(&files, &EncoderOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("unknown architecture 't5'"), "{err}");
}

#[derive(serde::Deserialize)]
struct DecoderReference {
    texts: Vec<String>,
    tokens: Vec<usize>,
    vectors: Vec<Vec<f32>>,
}

/// Embeds `texts` inside a rayon pool of `threads` threads (batches run concurrently, one per
/// thread).
fn embed_in_pool(encoder: &TextEncoder, texts: &[&str], threads: usize) -> Embeddings {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .unwrap()
        .install(|| encoder.embed(texts, TextKind::Document, &NoProgress))
        .unwrap()
}

/// Every row's bits.
fn bits(embeddings: &Embeddings) -> Vec<Vec<u32>> {
    (0..embeddings.rows())
        .map(|i| embeddings.row(i).iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// Embeds `texts` inside a rayon pool of `threads` threads, returning every row's bits.
fn embed_bits(encoder: &TextEncoder, texts: &[&str], threads: usize) -> Vec<Vec<u32>> {
    bits(&embed_in_pool(encoder, texts, threads))
}

#[test]
fn same_bits_whatever_the_thread_count() {
    // MiniLM takes the fused CPU path; the tiny Mistral runs candle's ops.
    let mut dirs = vec![root().join("tests/fixtures/embed/tiny-mistral")];
    dirs.extend(minilm_dir());
    for dir in dirs {
        let options = EncoderOptions {
            dtype: Some(ModelDType::F32),
            max_batch_tokens: Some(100),
            ..EncoderOptions::default()
        };
        let encoder = load(&dir, &options);
        let reference = reference();
        let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
        let serial = embed_bits(&encoder, &texts, 1);
        for threads in [2, 3] {
            assert!(
                embed_bits(&encoder, &texts, threads) == serial,
                "{}: {threads} threads differ from one",
                dir.display()
            );
        }
    }
}

/// A tiny random-weight decoder fixture (made by scripts/gen_tiny_decoders.py with
/// `transformers`) loaded in `dtype` with a small batch budget, and its reference vectors.
fn tiny_decoder(arch: &str, dtype: ModelDType) -> (TextEncoder, DecoderReference) {
    let dir = root().join(format!("tests/fixtures/embed/tiny-{arch}"));
    let reference: DecoderReference =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap())
            .unwrap();
    let options = EncoderOptions {
        dtype: Some(dtype),
        max_batch_tokens: Some(100),
        ..EncoderOptions::default()
    };
    (load(&dir, &options), reference)
}

/// Our forward pass of a tiny random model (batched, right padded) must match `transformers'`
/// (one text at a time): the decoders pool their last token, ModernBERT its first.
fn tiny_model_parity(arch: &str) {
    let (encoder, reference) = tiny_decoder(arch, ModelDType::F32);
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let got = encoder
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    assert_eq!(
        got.num_tokens,
        reference.tokens.iter().sum::<usize>(),
        "{arch}: token counts"
    );
    // Text 4 is far longer than the 48-token limit; text 3 may fill it exactly.
    let at_limit = reference.tokens.iter().filter(|&&n| n == 48).count();
    assert!(
        (1..=at_limit).contains(&got.num_truncated),
        "{arch}: {} truncated",
        got.num_truncated
    );
    for (i, want) in reference.vectors.iter().enumerate() {
        let diff = got
            .row(i)
            .iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-4, "{arch} text {i}: max abs diff {diff}");
        let alone = encoder
            .embed(&[texts[i]], TextKind::Document, &NoProgress)
            .unwrap();
        let diff = alone
            .row(0)
            .iter()
            .zip(got.row(i))
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(
            diff <= 1e-5,
            "{arch} text {i}: batched vs alone differ by {diff}"
        );
    }
}

/// The decoders in bf16 (the packed AVX512-BF16 projections where the CPU has them, candle's
/// matmul elsewhere) stay close to transformers' f32 vectors.
#[test]
fn decoders_in_bf16_stay_close_to_f32() {
    for arch in ["mistral", "qwen3", "gemma2"] {
        let (encoder, reference) = tiny_decoder(arch, ModelDType::Bf16);
        let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
        let serial = embed_in_pool(&encoder, &texts, 1);
        for (i, want) in reference.vectors.iter().enumerate() {
            let c = cosine(serial.row(i), want);
            assert!(c >= 0.999, "{arch} text {i}: cosine {c} in bf16");
        }
        assert!(
            embed_bits(&encoder, &texts, 3) == bits(&serial),
            "{arch} bf16: 3 threads differ from one"
        );
    }
}

#[test]
fn mistral_matches_transformers() {
    tiny_model_parity("mistral");
}

#[test]
fn qwen2_matches_transformers() {
    tiny_model_parity("qwen2");
}

#[test]
fn qwen3_matches_transformers() {
    tiny_model_parity("qwen3");
}

#[test]
fn gemma2_matches_transformers() {
    tiny_model_parity("gemma2");
}

/// ModernBERT (GTE-ModernBERT's architecture): alternating global and local (windowed)
/// bidirectional layers, a RoPE base per layer type, GeGLU, CLS pooling.
#[test]
fn modernbert_matches_transformers() {
    tiny_model_parity("modernbert");
}

/// Causal Gemma-3 (harrier's architecture): (1 + w) q/k norms, a RoPE base per layer type.
#[test]
fn gemma3_matches_transformers() {
    tiny_model_parity("gemma3");
}
