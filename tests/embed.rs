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
    /// The sha256 of the model file the vectors were made with, where the test makes that
    /// file itself.
    #[serde(default)]
    gguf_sha256: Option<String>,
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

/// The largest absolute difference between two vectors' elements.
fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn minilm_matches_sentence_transformers() {
    let dir = minilm_dir();
    matches_sentence_transformers(&dir, &reference(), 384, 1);
}

/// all-mpnet-base-v2 (MPNet: relative position buckets, RoBERTa positions, 384 tokens).
#[test]
#[cfg_attr(
    not(has_model_mpnet),
    ignore = "needs models/all-mpnet-base-v2: scripts/setup.sh --with-encoders"
)]
fn mpnet_matches_sentence_transformers() {
    let dir = real_model_dir("all-mpnet-base-v2", "scripts/setup.sh --with-encoders");
    matches_sentence_transformers(&dir, &reference_of("mpnet"), 768, 1);
}

/// EmbeddingGemma-300M (Gemma-3, bidirectional attention with a 512 window, two Dense
/// projections after mean pooling, a prompt per kind; 2048 tokens, so nothing is cut).
#[test]
#[cfg_attr(
    not(has_model_embeddinggemma),
    ignore = "needs models/embeddinggemma-300m: scripts/setup.sh --with-encoders"
)]
fn embeddinggemma_matches_sentence_transformers() {
    let dir = real_model_dir("embeddinggemma-300m", "scripts/setup.sh --with-encoders");
    let reference = reference_of("embeddinggemma");
    assert!(!reference.query_vectors.is_empty());
    matches_sentence_transformers(&dir, &reference, 768, 0);
}

/// Matryoshka: `dimensions: 256` gives sentence-transformers' `truncate_dim=256` vectors (the
/// first 256 values, renormalised); a width the card does not list, or a model with none, is
/// refused.
#[test]
#[cfg_attr(
    not(all(has_model_embeddinggemma, has_model_minilm)),
    ignore = "needs models/embeddinggemma-300m and all-MiniLM-L6-v2: scripts/setup.sh --with-encoders"
)]
fn matryoshka_dimensions_cut_and_renormalise_only_listed_widths() {
    let dir = real_model_dir("embeddinggemma-300m", "scripts/setup.sh --with-encoders");
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
    let files = resolve_model(minilm_dir().to_str().unwrap()).unwrap();
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
        let diff = max_abs_diff(got.row(i), want);
        assert!(diff <= 1e-4, "{kind} {i}: max abs diff {diff}");
    }
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn minilm_batched_equals_one_by_one() {
    let dir = minilm_dir();
    let reference = reference();
    let encoder = load(&dir, &EncoderOptions::default());
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).take(8).collect();
    let batched = encoder.embed(&texts, TextKind::Query, &NoProgress).unwrap();
    for (i, text) in texts.iter().enumerate() {
        let alone = encoder
            .embed(&[text], TextKind::Query, &NoProgress)
            .unwrap();
        let diff = max_abs_diff(alone.row(0), batched.row(i));
        assert!(diff <= 1e-5, "text {i}: batched vs alone differ by {diff}");
    }
}

#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn cli_writes_npy_and_ids_in_input_order() {
    let dir = minilm_dir();
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
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn corrupt_and_mismatched_weights_are_errors() {
    let dir = minilm_dir();
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

    // A tokenizer whose ids would run past the embedding table (another model's weights).
    let config = std::fs::read_to_string(dir.join("config.json"))
        .unwrap()
        .replace("\"vocab_size\": 30522", "\"vocab_size\": 1000");
    assert!(config.contains("1000"));
    std::fs::write(tmp.path().join("config.json"), config).unwrap();
    let err = TextEncoder::load(&files, &EncoderOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("do not belong together"), "{err}");
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

/// The tiny Mistral runs candle's ops.
#[test]
fn same_bits_whatever_the_thread_count() {
    same_bits_in_any_pool(&root().join("tests/fixtures/embed/tiny-mistral"));
}

/// MiniLM takes the fused CPU path.
#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn minilm_same_bits_whatever_the_thread_count() {
    same_bits_in_any_pool(&minilm_dir());
}

/// `dir`'s model embeds the reference texts to the same bits in pools of 1, 2 and 3 threads.
fn same_bits_in_any_pool(dir: &Path) {
    {
        let options = EncoderOptions {
            dtype: Some(ModelDType::F32),
            max_batch_tokens: Some(100),
            ..EncoderOptions::default()
        };
        let encoder = load(dir, &options);
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
/// (one text at a time): the causal decoders pool their last token, ModernBERT its first, the
/// bidirectional Qwen3 the mean.
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
        let diff = max_abs_diff(got.row(i), want);
        assert!(diff <= 1e-4, "{arch} text {i}: max abs diff {diff}");
        let alone = encoder
            .embed(&[texts[i]], TextKind::Document, &NoProgress)
            .unwrap();
        let diff = max_abs_diff(alone.row(0), got.row(i));
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

/// pplx-embed's layout: a Qwen3 checkpoint whose `model_type` says bidirectional, mean pooled
/// by `1_Pooling`; the reference ran with the causal triangle cleared (the script checks that
/// this changes its vectors).
#[test]
fn bidirectional_qwen3_matches_transformers() {
    tiny_model_parity("pplx-qwen3");
}

/// EuroBERT (Jina v5 text nano's backbone): Llama blocks attending both ways, pooled at the
/// last token by `1_Pooling` as Jina v5 pools.
#[test]
fn eurobert_matches_transformers() {
    tiny_model_parity("eurobert");
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

/// The llama.cpp name of a Hugging Face BERT tensor (what its GGUF converter writes), `None` for
/// tensors a GGUF leaves out (`position_ids`, the pooler).
fn llama_cpp_bert_name(hf: &str) -> Option<String> {
    let hf = hf.strip_prefix("bert.").unwrap_or(hf);
    let (stem, suffix) = hf.rsplit_once('.')?;
    let global = match stem {
        "embeddings.word_embeddings" => Some("token_embd"),
        "embeddings.position_embeddings" => Some("position_embd"),
        "embeddings.token_type_embeddings" => Some("token_types"),
        "embeddings.LayerNorm" => Some("token_embd_norm"),
        _ => None,
    };
    if let Some(name) = global {
        return Some(format!("{name}.{suffix}"));
    }
    let rest = stem.strip_prefix("encoder.layer.")?;
    let (layer, part) = rest.split_once('.')?;
    let part = match part {
        "attention.self.query" => "attn_q",
        "attention.self.key" => "attn_k",
        "attention.self.value" => "attn_v",
        "attention.output.dense" => "attn_output",
        "attention.output.LayerNorm" => "attn_output_norm",
        "intermediate.dense" => "ffn_up",
        "output.dense" => "ffn_down",
        "output.LayerNorm" => "layer_output_norm",
        _ => return None,
    };
    Some(format!("blk.{layer}.{part}.{suffix}"))
}

/// Writes all-MiniLM-L6-v2 (`dir`) to `path` as llama.cpp's `bert` GGUF: matrices in `dtype`,
/// vectors in f32, the vocabulary in llama.cpp's "phantom space" form, `pooling_type` as given;
/// `vocab_extra` more tokens than the embedding table has rows when nonzero.
fn write_bert_gguf(
    dir: &Path,
    path: &Path,
    dtype: candle_core::quantized::GgmlDType,
    pooling_type: u32,
    vocab_extra: usize,
) {
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file::Value};
    let weights =
        candle_core::safetensors::load(dir.join("model.safetensors"), &candle_core::Device::Cpu)
            .unwrap();
    let mut tensors: Vec<(String, QTensor)> = weights
        .iter()
        .filter_map(|(name, t)| {
            let name = llama_cpp_bert_name(name)?;
            let t = t.to_dtype(candle_core::DType::F32).unwrap();
            let kind = if t.rank() == 2 { dtype } else { GgmlDType::F32 };
            Some((name, QTensor::quantize(&t, kind).unwrap()))
        })
        .collect();
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let tokenizer: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    let vocab = tokenizer["model"]["vocab"].as_object().unwrap();
    let mut tokens = vec![String::new(); vocab.len()];
    for (token, id) in vocab {
        tokens[id.as_u64().unwrap() as usize] = if token.starts_with('[') && token.ends_with(']') {
            token.clone()
        } else if let Some(rest) = token.strip_prefix("##") {
            rest.to_string()
        } else {
            format!("\u{2581}{token}")
        };
    }
    tokens.extend((0..vocab_extra).map(|i| format!("[extra{i}]")));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let int = |key: &str| Value::U32(config[key].as_u64().unwrap() as u32);
    let metadata: Vec<(&str, Value)> = vec![
        ("general.architecture", Value::String("bert".into())),
        ("general.type", Value::String("model".into())),
        ("bert.block_count", int("num_hidden_layers")),
        ("bert.context_length", int("max_position_embeddings")),
        ("bert.embedding_length", int("hidden_size")),
        ("bert.feed_forward_length", int("intermediate_size")),
        ("bert.attention.head_count", int("num_attention_heads")),
        ("bert.attention.layer_norm_epsilon", Value::F32(1e-12)),
        ("bert.attention.causal", Value::Bool(false)),
        ("bert.pooling_type", Value::U32(pooling_type)),
        ("tokenizer.ggml.model", Value::String("bert".into())),
        (
            "tokenizer.ggml.tokens",
            Value::Array(tokens.into_iter().map(Value::String).collect()),
        ),
        ("tokenizer.ggml.bos_token_id", Value::U32(101)),
        ("tokenizer.ggml.seperator_token_id", Value::U32(102)),
        ("tokenizer.ggml.unknown_token_id", Value::U32(100)),
        ("tokenizer.ggml.padding_token_id", Value::U32(0)),
    ];
    let metadata: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    candle_core::quantized::gguf_file::write(&mut file, &metadata, &tensors).unwrap();
}

/// `src` rewritten with every matrix in `kind` (vectors stay f32, as llama.cpp quantizes).
fn requantize_gguf(src: &Path, dst: &Path, kind: candle_core::quantized::GgmlDType) {
    use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
    let mut file = std::fs::File::open(src).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut names: Vec<&String> = content.tensor_infos.keys().collect();
    names.sort();
    let tensors: Vec<(String, QTensor)> = names
        .into_iter()
        .map(|name| {
            let t = content
                .tensor(&mut file, name, &candle_core::Device::Cpu)
                .unwrap()
                .dequantize(&candle_core::Device::Cpu)
                .unwrap();
            let kind = if t.rank() == 2 { kind } else { GgmlDType::F32 };
            (name.clone(), QTensor::quantize(&t, kind).unwrap())
        })
        .collect();
    let mut keys: Vec<&String> = content.metadata.keys().collect();
    keys.sort();
    let metadata: Vec<(&str, &gguf_file::Value)> = keys
        .into_iter()
        .map(|k| (k.as_str(), &content.metadata[k]))
        .collect();
    let tensors: Vec<(&str, &QTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut out = std::fs::File::create(dst).unwrap();
    gguf_file::write(&mut out, &metadata, &tensors).unwrap();
}

/// A Qwen3-Embedding GGUF (`qwen3` with a `pooling_type`): the tiny random Qwen3 of
/// `tiny-qwen3/` in llama.cpp's layout (scripts/gen_tiny_qwen3_embedding_gguf.py) embeds the
/// reference texts as `transformers` did, through the byte-level BPE rebuilt from the GGUF
/// vocabulary and the EOS its `add_eos_token` asks for; in Q8_0 within cosine 0.99.
#[test]
fn qwen3_embedding_gguf_matches_transformers() {
    use candle_core::quantized::GgmlDType;
    let gguf = root().join("tests/fixtures/embed/tiny-qwen3-embedding.gguf");
    let reference: DecoderReference = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/embed/tiny-qwen3/reference.json"))
            .unwrap(),
    )
    .unwrap();
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let options = EncoderOptions {
        dtype: Some(ModelDType::F32),
        max_batch_tokens: Some(100),
        ..EncoderOptions::default()
    };
    let encoder = load(&gguf, &options);
    let got = encoder
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    assert_eq!(got.num_tokens, reference.tokens.iter().sum::<usize>());
    for (i, want) in reference.vectors.iter().enumerate() {
        let diff = max_abs_diff(got.row(i), want);
        assert!(diff <= 1e-4, "text {i}: max abs diff {diff}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let q8 = tmp.path().join("tiny-qwen3-embedding-q8_0.gguf");
    requantize_gguf(&gguf, &q8, GgmlDType::Q8_0);
    let quantized = load(&q8, &options)
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    for (i, want) in reference.vectors.iter().enumerate() {
        let c = cosine(quantized.row(i), want);
        assert!(c >= 0.99, "Q8_0 text {i}: cosine {c}");
    }
}

/// A BERT model as a GGUF file (`--model FILE.gguf`): all-MiniLM-L6-v2 converted to llama.cpp's
/// layout embeds the reference texts exactly as its safetensors directory does when stored in
/// f32 (so the tokenizer rebuilt from the GGUF vocabulary splits every text, accents and CJK
/// included, into the same ids), and within cosine 0.995 in Q8_0. The file's stem finds the
/// MiniLM card (max length 256).
#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn bert_gguf_embeds_as_its_safetensors_model() {
    use candle_core::quantized::GgmlDType;
    let dir = minilm_dir();
    let reference = reference();
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let want = load(&dir, &EncoderOptions::default())
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (dtype, sub, bound) in [
        (GgmlDType::F32, "f32", 1e-6f32),
        (GgmlDType::Q8_0, "q8_0", 0.02),
    ] {
        let path = tmp.path().join(sub).join("all-MiniLM-L6-v2.gguf");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        write_bert_gguf(&dir, &path, dtype, 1, 0);
        let encoder = load(&path, &EncoderOptions::default());
        assert_eq!(
            encoder.manifest().id,
            "sentence-transformers/all-MiniLM-L6-v2"
        );
        assert_eq!(encoder.manifest().max_length, 256);
        let got = encoder
            .embed(&texts, TextKind::Document, &NoProgress)
            .unwrap();
        assert_eq!(got.num_truncated, want.num_truncated, "{sub}");
        assert_eq!(got.num_tokens, want.num_tokens, "{sub}: token counts");
        for i in 0..texts.len() {
            let diff = max_abs_diff(got.row(i), want.row(i));
            let c = cosine(got.row(i), want.row(i));
            assert!(diff <= bound, "{sub} text {i}: max abs diff {diff}");
            assert!(c >= 0.995, "{sub} text {i}: cosine {c}");
        }
    }
}

/// Files we cannot embed with are refused in one line naming the file, before any output: a
/// GGUF of an LLM architecture, a file that is no GGUF, a plain file that is no model.
#[test]
fn unusable_gguf_encoders_are_refused_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let llm = root().join("tests/fixtures/gguf/tiny-qwen3.gguf");
    embed_refused(
        tmp.path(),
        &llm,
        &[],
        "GGUF architecture 'qwen3' is not an encoder we run",
    );
    embed_refused(tmp.path(), &llm, &[], "tiny-qwen3.gguf");
    let not_gguf = tmp.path().join("weights.gguf");
    std::fs::write(&not_gguf, "not a gguf").unwrap();
    embed_refused(tmp.path(), &not_gguf, &[], "not a GGUF file");
    let plain = tmp.path().join("plain.txt");
    std::fs::write(&plain, "text").unwrap();
    embed_refused(
        tmp.path(),
        &plain,
        &[],
        "a model is a directory or a .gguf file",
    );
}

/// The same for BERT GGUFs written from MiniLM's weights: pooling `none` or `rank`, a
/// vocabulary larger than the embedding table, `--dimensions` on a model without Matryoshka
/// widths.
#[test]
#[cfg_attr(
    not(has_model_minilm),
    ignore = "needs models/all-MiniLM-L6-v2: scripts/setup.sh"
)]
fn unusable_bert_ggufs_are_refused_in_one_line() {
    use candle_core::quantized::GgmlDType;
    let tmp = tempfile::tempdir().unwrap();
    let dir = minilm_dir();
    for (pooling, wanted) in [(0, "pooling_type 0"), (4, "reranker")] {
        let path = tmp.path().join(format!("pooling-{pooling}.gguf"));
        write_bert_gguf(&dir, &path, GgmlDType::F16, pooling, 0);
        embed_refused(tmp.path(), &path, &[], wanted);
    }
    let path = tmp.path().join("extra-vocab.gguf");
    write_bert_gguf(&dir, &path, GgmlDType::F16, 1, 3);
    embed_refused(
        tmp.path(),
        &path,
        &[],
        "30525 tokens but token_embd.weight 30522 rows",
    );
    let path = tmp.path().join("ok.gguf");
    write_bert_gguf(&dir, &path, GgmlDType::F16, 1, 0);
    embed_refused(
        tmp.path(),
        &path,
        &["--dimensions", "128"],
        "defines no Matryoshka widths",
    );
}

/// `embed --model MODEL` (with `extra` flags) on a one-document corpus in `dir` fails with one
/// line containing `wanted`, and writes nothing.
fn embed_refused(dir: &Path, model: &Path, extra: &[&str], wanted: &str) {
    let input = dir.join("corpus.jsonl");
    std::fs::write(
        &input,
        "{\"_id\":\"d1\",\"title\":\"\",\"text\":\"queues\"}\n",
    )
    .unwrap();
    let out = dir.join("vectors.npy");
    let mut args = vec![
        "embed",
        "--model",
        model.to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let output = freshstack(&args);
    let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
    assert!(!output.status.success(), "{model:?} was accepted");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(wanted), "{stderr}");
    assert!(!out.exists(), "{model:?}: output written");
}

/// nomic-embed-text-v1.5 (nomic-bert: rotary positions, SwiGLU) from its f16 GGUF against
/// llama.cpp's `llama-embedding` on the same file (scripts/gen_gguf_encoder_reference.py):
/// documents and queries with the card's prefixes, in several padded batches.
#[test]
#[cfg_attr(
    not(has_model_nomic_gguf),
    ignore = "needs models/nomic-embed-text-v1.5.f16.gguf: scripts/setup.sh --with-encoders"
)]
fn nomic_gguf_matches_llama_cpp() {
    let path = crate::util::model_path(
        "nomic-embed-text-v1.5.f16.gguf",
        "scripts/setup.sh --with-encoders",
    );
    let reference = reference_of("nomic_gguf");
    let encoder = load(
        &path,
        &EncoderOptions {
            max_batch_tokens: Some(300),
            ..EncoderOptions::default()
        },
    );
    assert_eq!(encoder.manifest().id, "nomic-ai/nomic-embed-text-v1.5");
    assert_eq!(encoder.dim(), 768);
    assert_embeds_as_llama_cpp(&encoder, &reference, 0.9999, "f16");
}

/// `encoder`'s documents and queries (`reference`'s texts) within cosine `bound` of
/// `llama-embedding`'s vectors. llama.cpp's WordPiece tokenizer drops a backslash where BERT's
/// (ours, the model's own) keeps it as a token, so a text with one is not the same input on
/// both sides and is left out (at most one of the documents).
fn assert_embeds_as_llama_cpp(
    encoder: &TextEncoder,
    reference: &Reference,
    bound: f32,
    what: &str,
) {
    let texts: Vec<&str> = reference.texts.iter().map(String::as_str).collect();
    let check = |got: &Embeddings, want: &[Vec<f32>], kind: &str| {
        let mut compared = 0;
        for (i, want) in want.iter().enumerate() {
            if texts[i].contains('\\') {
                continue;
            }
            let c = cosine(got.row(i), want);
            assert!(c >= bound, "{what} {kind} {i}: cosine {c}");
            compared += 1;
        }
        assert!(
            compared + 1 >= want.len(),
            "{what} {kind}: compared {compared}"
        );
    };
    let got = encoder
        .embed(&texts, TextKind::Document, &NoProgress)
        .unwrap();
    check(&got, &reference.vectors, "document");
    let queries = &texts[..reference.query_vectors.len()];
    let got = encoder
        .embed(queries, TextKind::Query, &NoProgress)
        .unwrap();
    check(&got, &reference.query_vectors, "query");
}

/// nomic-embed-text-v1.5 quantized by llama.cpp's own `llama-quantize` (Q8_0, and Q4_K_M: Q4_K
/// with Q6_K matrices) embeds as `llama-embedding` embeds the same file: the layers' matrices
/// stay quantized (dequantized per product). The file must be the one the
/// reference was made from (its sha256); llama.cpp rounds activations to 8 bits where we round
/// them to bf16, hence the looser bound than the f16 file's.
#[test]
#[cfg_attr(
    not(has_model_nomic_gguf),
    ignore = "needs models/nomic-embed-text-v1.5.f16.gguf: scripts/setup.sh --with-encoders"
)]
fn nomic_quantized_by_llama_cpp_matches_llama_cpp() {
    let test = "nomic_quantized_by_llama_cpp_matches_llama_cpp";
    let Some(bin) = crate::util::llama_cpp("llama-quantize", test) else {
        return;
    };
    let f16 = crate::util::model_path(
        "nomic-embed-text-v1.5.f16.gguf",
        "scripts/setup.sh --with-encoders",
    );
    let dir = tempfile::tempdir().unwrap();
    for (quant, bound) in [("Q8_0", 0.999f32), ("Q4_K_M", 0.99)] {
        let reference = reference_of(&format!("nomic_gguf_{}", quant.to_lowercase()));
        // The file's stem finds nomic-embed's card (its prefixes), as for the f16 file.
        let path = dir
            .path()
            .join(format!("nomic-embed-text-v1.5.{quant}.gguf"));
        let status = std::process::Command::new(bin.join("llama-quantize"))
            .arg(&f16)
            .arg(&path)
            .arg(quant)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "llama-quantize {quant} failed");
        let sha = freshstack::dataset::Fingerprint::of_file(&path)
            .unwrap()
            .to_string();
        assert_eq!(
            Some(sha.as_str()),
            reference.gguf_sha256.as_deref(),
            "llama-quantize wrote another {quant} file than the reference's: rerun \
             scripts/gen_gguf_encoder_reference.py --quant {quant} with this llama.cpp"
        );
        let encoder = load(&path, &EncoderOptions::default());
        assert_eq!(encoder.manifest().id, "nomic-ai/nomic-embed-text-v1.5");
        assert_embeds_as_llama_cpp(&encoder, &reference, bound, quant);
    }
}

/// A tiny Qwen2 with Stella-style Matryoshka heads in `dir`: `modules.json` names
/// `2_Dense_16`, a sibling `2_Dense_8` exists (random weights).
pub(crate) fn tiny_stella(dir: &Path) {
    use std::collections::HashMap;
    crate::util::copy_dir(&root().join("tests/fixtures/embed/tiny-qwen2"), dir);
    std::fs::write(
        dir.join("modules.json"),
        r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Dense_16", "type": "sentence_transformers.models.Dense"}]"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("1_Pooling")).unwrap();
    std::fs::write(
        dir.join("1_Pooling/config.json"),
        r#"{"word_embedding_dimension": 32, "pooling_mode_mean_tokens": true}"#,
    )
    .unwrap();
    let mut rng = fastrand::Rng::with_seed(3);
    for width in [8usize, 16] {
        let folder = dir.join(format!("2_Dense_{width}"));
        std::fs::create_dir_all(&folder).unwrap();
        std::fs::write(
            folder.join("config.json"),
            format!(
                r#"{{"in_features": 32, "out_features": {width}, "bias": true,
                    "activation_function": "torch.nn.modules.linear.Identity"}}"#
            ),
        )
        .unwrap();
        let dev = candle_core::Device::Cpu;
        let weight: Vec<f32> = (0..width * 32).map(|_| rng.f32() - 0.5).collect();
        let bias: Vec<f32> = (0..width).map(|_| rng.f32() - 0.5).collect();
        let tensors: HashMap<String, candle_core::Tensor> = [
            (
                "linear.weight".to_string(),
                candle_core::Tensor::from_vec(weight, (width, 32), &dev).unwrap(),
            ),
            (
                "linear.bias".to_string(),
                candle_core::Tensor::from_vec(bias, width, &dev).unwrap(),
            ),
        ]
        .into();
        candle_core::safetensors::save(&tensors, folder.join("model.safetensors")).unwrap();
    }
}

/// Stella-style Matryoshka heads ([`tiny_stella`]): `dimensions: 8` loads the `2_Dense_8` head
/// (8 values, not 16 cut to 8), the widths are offered in the refusal of any other, and no
/// width keeps the listed head.
#[test]
fn matryoshka_heads_are_chosen_by_dimensions() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    tiny_stella(dir);
    let texts = ["how do I resume a killed build", "queue workers"];
    let embed = |dimensions: Option<usize>| {
        let encoder = load(
            dir,
            &EncoderOptions {
                dimensions,
                dtype: Some(ModelDType::F32),
                ..EncoderOptions::default()
            },
        );
        encoder
            .embed(&texts, TextKind::Document, &NoProgress)
            .unwrap()
    };
    let full = embed(None);
    assert_eq!(full.dim, 16);
    let eight = embed(Some(8));
    assert_eq!(eight.dim, 8);
    // Not the 16-wide head cut to 8 and renormalised.
    let cut: Vec<f32> = {
        let head = &full.row(0)[..8];
        let norm = head.iter().map(|x| x * x).sum::<f32>().sqrt();
        head.iter().map(|x| x / norm).collect()
    };
    assert!(cosine(eight.row(0), &cut) < 0.99);
    let files = resolve_model(dir.to_str().unwrap()).unwrap();
    let err = TextEncoder::load(
        &files,
        &EncoderOptions {
            dimensions: Some(12),
            ..EncoderOptions::default()
        },
    )
    .err()
    .expect("refused")
    .to_string();
    assert!(err.contains("widths are 8, 16"), "{err}");
}
