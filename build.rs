//! Which real models this checkout's `models/` holds, as cfgs for the integration tests.
//!
//! A test that needs a model fetched by a setup script carries
//! `#[cfg_attr(not(has_model_X), ignore = "...")]`: without the model it is reported as ignored,
//! with the command that fetches it, instead of passing without checking anything. The build
//! script runs again when anything under `models/` changes, so a model fetched after a build
//! turns its tests on.

use std::path::Path;

/// (cfg suffix, file under `models/` whose presence means the model is there).
const MODELS: &[(&str, &str)] = &[
    ("minilm", "all-MiniLM-L6-v2/model.safetensors"),
    ("mpnet", "all-mpnet-base-v2/model.safetensors"),
    ("embeddinggemma", "embeddinggemma-300m/model.safetensors"),
    ("nomic_gguf", "nomic-embed-text-v1.5.f16.gguf"),
    ("smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    ("qwen05", "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"),
    ("qwen15", "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"),
    ("gemma3", "gemma-3-270m-q4_k_m.gguf"),
];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=models");
    for (name, file) in MODELS {
        println!("cargo::rustc-check-cfg=cfg(has_model_{name})");
        if Path::new("models").join(file).is_file() {
            println!("cargo::rustc-cfg=has_model_{name}");
        }
    }
}
