//! `freshstack build`: the whole framework in one call (paper Figure 2), resumable and
//! incremental.
//!
//! Stages, in order, each writing its outputs atomically under `OUT/work/` and then a stage
//! manifest (see [`manifest`]): questions -> corpus -> index -> nuggets -> query variants ->
//! pooling -> judging -> filtering + export (into `OUT/`). A rerun skips every stage whose
//! inputs and settings are unchanged; a changed input reruns exactly what depends on it. The LLM
//! stages go through the SQLite response cache (`OUT/work/llm-cache.sqlite` by default), so a
//! build killed at any point and rerun makes no LLM call twice and ends with the same bytes.
//!
//! Nothing in the exported files depends on time, thread count or absolute paths.

pub mod config;
pub mod export;
pub mod manifest;
pub mod pool;
pub mod quickstart;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

pub use config::BuildConfig;
use export::{Filtered, copy_file, copy_run_for, filter_questions, write_dataset};
use manifest::{Fingerprint, StageBook, hash_file};
use pool::{PoolConfig, PoolRetriever, Technique, technique_queries};

use crate::dataset::{
    AtomicWriter, JudgmentRecord, NuggetsRecord, QueryId, Question, VariantsRecord, read_jsonl,
    read_jsonl_lines, read_questions, write_json_atomic,
};
use crate::embed::{EncoderOptions, resolve_model};
use crate::error::{Error, Result};
use crate::index::Bm25Settings;
use crate::llm::prompts::{JUDGE, NUGGETS, Prompt, QUERY_VARIANTS};
use crate::llm::{ChatParams, Llm, LlmStats, ResponseCache};
use crate::progress::Progress;
use crate::report::ReportOptions;
use crate::rerank::{CrossEncoder, RerankerOptions};
use crate::search::{
    DenseModelSpec, DocumentTexts, Engine, HybridIndexConfig, QueryEncoderOptions, Rerank,
    build_hybrid_index,
};
use crate::source::stackoverflow::{
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_SITE_URL, DayRange, ImportConfig, TagFilter, TagMatch,
    import_questions, parse_day,
};
use crate::source::{CorpusConfig, RepoSpec, TokenizerSpec, build_corpus};
use crate::stages::{
    JudgeConfig, JudgeInputs, NuggetsConfig, StageSummary, VariantsConfig, generate_nuggets,
    generate_query_variants, judge,
};

/// Files inside the build directory.
pub mod layout {
    /// Intermediate files.
    pub const WORK: &str = "work";
    /// Imported questions (reference query schema, no nuggets).
    pub const QUESTIONS: &str = "work/questions.jsonl";
    /// The chunked corpus.
    pub const CORPUS: &str = "work/corpus.jsonl";
    /// The hybrid index.
    pub const INDEX: &str = "work/index";
    /// Nuggets per question.
    pub const NUGGETS: &str = "work/nuggets.jsonl";
    /// Query variants per question.
    pub const VARIANTS: &str = "work/variants.jsonl";
    /// Every pooling run, before filtering.
    pub const RUNS: &str = "work/runs";
    /// The judgment pool.
    pub const POOL: &str = "work/pool.jsonl";
    /// One judgment per (question, nugget, document).
    pub const JUDGMENTS: &str = "work/judgments.jsonl";
    /// The LLM response cache (default).
    pub const LLM_CACHE: &str = "work/llm-cache.sqlite";
}

/// What the export stage writes into the build directory.
const EXPORTED: [&str; 6] = [
    "corpus.jsonl",
    "queries.jsonl",
    "qrels",
    "runs",
    "filtering.json",
    "manifest.json",
];

/// How one stage went.
#[derive(Debug, Clone, Serialize)]
pub struct StageOutcome {
    /// Stage name.
    pub stage: &'static str,
    /// False when skipped as up to date.
    pub ran: bool,
    /// Wall time.
    #[serde(skip)]
    pub elapsed: Duration,
    /// One line about the result.
    pub detail: String,
}

/// What a build did.
#[derive(Debug, Clone, Serialize)]
pub struct BuildSummary {
    /// The build directory.
    pub out: PathBuf,
    /// Every stage, in order.
    pub stages: Vec<StageOutcome>,
    /// Questions in the final dataset.
    pub questions: usize,
    /// Documents in the corpus.
    pub documents: usize,
}

/// Rows of a per-question JSONL file keyed by question id (the stages write one row each).
fn read_by_query<T: serde::de::DeserializeOwned>(
    path: &Path,
    query_id: impl Fn(&T) -> &QueryId,
) -> Result<BTreeMap<QueryId, T>> {
    Ok(read_jsonl_lines::<T>(path)?
        .into_iter()
        .map(|(_, row)| (query_id(&row).clone(), row))
        .collect())
}

/// This stage's share of the backend's counters (the client is shared by the LLM stages).
fn calls_line(before: &LlmStats, after: &LlmStats) -> String {
    format!(
        "{} LLM calls, {} answers from the cache",
        after.calls - before.calls,
        after.cache_hits - before.cache_hits
    )
}

/// Runs (or resumes) a build into `out`. `on_stage` hears about each stage as it ends.
pub fn build(
    config: &BuildConfig,
    out: &Path,
    progress: &dyn Progress,
    on_stage: &mut dyn FnMut(&StageOutcome),
) -> Result<BuildSummary> {
    std::fs::create_dir_all(out.join(layout::WORK)).map_err(|e| Error::io(out, e))?;
    let mut run = Builder {
        config,
        out: out.to_path_buf(),
        book: StageBook::new(out),
        hashes: BTreeMap::new(),
        llm: None,
        stages: Vec::new(),
        documents: 0,
        questions_out: 0,
        repositories: Vec::new(),
        tokenizer_sha256: None,
    };
    run.questions(progress, on_stage)?;
    run.corpus(progress, on_stage)?;
    run.index(progress, on_stage)?;
    run.nuggets(progress, on_stage)?;
    run.variants(progress, on_stage)?;
    run.pool(progress, on_stage)?;
    run.judge(progress, on_stage)?;
    run.export(on_stage)?;
    run.report(progress, on_stage)?;
    Ok(BuildSummary {
        out: run.out,
        stages: run.stages,
        questions: run.questions_out,
        documents: run.documents,
    })
}

struct Builder<'a> {
    config: &'a BuildConfig,
    out: PathBuf,
    book: StageBook,
    /// Output hashes by relative path, as the stages left them.
    hashes: BTreeMap<String, String>,
    llm: Option<OpenedLlm>,
    stages: Vec<StageOutcome>,
    documents: usize,
    questions_out: usize,
    repositories: Vec<(String, Option<String>)>,
    /// SHA-256 of the corpus's `hf:` tokenizer file.
    tokenizer_sha256: Option<String>,
}

struct OpenedLlm {
    llm: Llm,
    context_tokens: Option<usize>,
}

impl Builder<'_> {
    fn path(&self, rel: &str) -> PathBuf {
        self.out.join(rel)
    }

    fn hash(&self, rel: &str) -> String {
        self.hashes.get(rel).cloned().unwrap_or_default()
    }

    /// Runs `work` unless the stage is fresh; records its outputs either way.
    fn stage(
        &mut self,
        name: &'static str,
        fingerprint: String,
        outputs: &[&str],
        on_stage: &mut dyn FnMut(&StageOutcome),
        work: impl FnOnce(&mut Self) -> Result<String>,
    ) -> Result<()> {
        let start = Instant::now();
        let (ran, detail) = match self.book.fresh(name, &fingerprint)? {
            Some(hashes) => {
                self.hashes.extend(hashes);
                (false, "up to date".to_string())
            }
            None => {
                self.book.invalidate(name)?;
                let detail = work(self)?;
                let hashes = self.book.record(name, &fingerprint, outputs)?;
                self.hashes.extend(hashes);
                (true, detail)
            }
        };
        let outcome = StageOutcome {
            stage: name,
            ran,
            elapsed: start.elapsed(),
            detail,
        };
        on_stage(&outcome);
        self.stages.push(outcome);
        Ok(())
    }

    fn llm_identity(&self) -> String {
        let llm = &self.config.llm;
        match (&llm.gguf, &llm.base_url, &llm.model) {
            (Some(path), _, _) => {
                let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                format!("gguf:{name}:{size}")
            }
            // The server's address is where the model runs, not what it is: moving the server
            // must not rerun the stages (the response cache is keyed the same way).
            (None, _, Some(model)) => format!("openai:{model}"),
            _ => String::new(),
        }
    }

    fn llm(&mut self) -> Result<&OpenedLlm> {
        if self.llm.is_none() {
            let section = &self.config.llm;
            let backend = section.backend().open()?;
            let cache_path = section
                .cache
                .clone()
                .unwrap_or_else(|| self.path(layout::LLM_CACHE));
            let cache = ResponseCache::open(&cache_path)?;
            self.llm = Some(OpenedLlm {
                llm: Llm::new(backend.chat, Some(cache)),
                context_tokens: backend.context_tokens,
            });
        }
        self.llm
            .as_ref()
            .ok_or_else(|| Error::invalid("llm", "no backend configured"))
    }

    /// What every LLM stage's output depends on besides its inputs: the model, the sampling,
    /// the repair budget, the stage's prompt version and whether schemas are sent (a prompt
    /// bump or a switch of `structured_output` reruns the stage; the response cache then
    /// answers only what was asked before).
    fn llm_fingerprint(&self, prompt: &Prompt) -> Fingerprint {
        let llm = &self.config.llm;
        Fingerprint::new()
            .setting("llm", &self.llm_identity())
            .setting("sampling", &(llm.temperature, llm.seed))
            .setting("repairs", &llm.max_repairs)
            .setting("prompt", &prompt.id)
            .setting("structured_output", &llm.structured_output)
    }

    /// Appends the stage's structured-output note to its one-line detail: said only when the
    /// server refused the schemas.
    fn structured_note(summary: &StageSummary) -> String {
        match &summary.structured_output_refusal {
            Some(refusal) => format!(
                "; structured output refused by the server ({refusal}): unconstrained prompt + \
                 repair used"
            ),
            None => String::new(),
        }
    }

    fn params(&self, max_tokens: u32) -> ChatParams {
        ChatParams {
            temperature: self.config.llm.temperature,
            max_tokens,
            seed: self.config.llm.seed,
            json_schema: None,
        }
    }

    fn questions(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let q = &self.config.questions;
        let source = match (&q.posts, &q.file) {
            (Some(posts), _) => {
                // Dumps are many GB: identify by name, size and modification time.
                let meta = std::fs::metadata(posts).map_err(|e| Error::io(posts, e))?;
                let modified = meta
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                format!("posts:{}:{}:{modified}", posts.display(), meta.len())
            }
            (None, Some(file)) => format!("file:{}", hash_file(file)?),
            (None, None) => return Err(Error::invalid("questions", "no source")),
        };
        let fingerprint = Fingerprint::new()
            .setting("questions", q)
            .input("source", &source)
            .finish();
        self.stage(
            "questions",
            fingerprint,
            &[layout::QUESTIONS],
            on_stage,
            |b| b.import_questions(progress),
        )
    }

    fn import_questions(&mut self, progress: &dyn Progress) -> Result<String> {
        let q = &self.config.questions;
        let target = self.path(layout::QUESTIONS);
        let mut questions: Vec<Question> = match (&q.posts, &q.file) {
            (Some(posts), _) => {
                let mode = if q.tag_match == "all" {
                    TagMatch::All
                } else {
                    TagMatch::Any
                };
                let range = DayRange {
                    since: q
                        .since
                        .as_deref()
                        .map(|s| parse_day("questions.since", s))
                        .transpose()?,
                    until: q
                        .until
                        .as_deref()
                        .map(|s| parse_day("questions.until", s))
                        .transpose()?,
                };
                let import = ImportConfig {
                    filter: TagFilter::new(&q.tags, mode)?,
                    range,
                    min_score: q.min_score,
                    allow_unaccepted: q.allow_unaccepted,
                    site_url: q
                        .site_url
                        .clone()
                        .unwrap_or_else(|| DEFAULT_SITE_URL.to_string()),
                    max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
                };
                let imported = self.path("work/questions.imported.jsonl");
                import_questions(posts, &import, &imported, progress)?;
                read_jsonl(&imported)?
            }
            // Ids and texts checked the way the LLM stages will.
            (None, Some(file)) => read_questions(file)?,
            (None, None) => Vec::new(),
        };
        if questions.is_empty() {
            return Err(Error::invalid(
                "questions",
                "no question matched (check tags, dates and the dump)",
            ));
        }
        let total = questions.len();
        if let Some(max) = q.max_questions {
            questions.truncate(max);
        }
        let mut writer = AtomicWriter::create(&target)?;
        for question in &questions {
            writer.write_json_line(question)?;
        }
        writer.commit()?;
        Ok(format!("{} questions ({total} matched)", questions.len()))
    }

    fn corpus(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        // Re-chunking is cheap and catches any edit in a checkout, committed or not; the output
        // is deterministic, so unchanged checkouts give the same hash and nothing downstream
        // reruns.
        let start = Instant::now();
        let c = &self.config.corpus;
        let mut corpus = CorpusConfig::new(
            c.repositories
                .iter()
                .map(|(name, path)| RepoSpec {
                    name: name.clone(),
                    path: path.clone(),
                })
                .collect(),
        );
        corpus.max_tokens = c.max_tokens;
        corpus.tokenizer = TokenizerSpec::parse(&c.tokenizer)?;
        corpus.max_file_bytes = c.max_file_bytes;
        corpus.exclude = c.exclude.clone();
        let before = self.book.fresh("corpus", "corpus")?;
        let summary = build_corpus(&corpus, &self.path(layout::CORPUS), progress)?;
        let hashes = self.book.record("corpus", "corpus", &[layout::CORPUS])?;
        let unchanged = before.as_ref() == Some(&hashes);
        self.hashes.extend(hashes);
        self.documents = summary.documents as usize;
        self.tokenizer_sha256 = summary.tokenizer_sha256.clone();
        self.repositories = summary
            .repos
            .iter()
            .map(|r| (r.repo.clone(), r.commit_id.clone()))
            .collect();
        let outcome = StageOutcome {
            stage: "corpus",
            ran: true,
            elapsed: start.elapsed(),
            detail: format!(
                "{} documents, {} tokens from {} repositories{}",
                summary.documents,
                summary.tokens,
                summary.repos.len(),
                if unchanged { " (unchanged)" } else { "" }
            ),
        };
        on_stage(&outcome);
        self.stages.push(outcome);
        Ok(())
    }

    fn index(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = Fingerprint::new()
            .setting("retrieval", &self.config.retrieval)
            .input("corpus", &self.hash(layout::CORPUS))
            .finish();
        let manifest = format!("{}/{}", layout::INDEX, crate::index::MANIFEST_FILE);
        self.stage("index", fingerprint, &[&manifest], on_stage, |b| {
            let r = &b.config.retrieval;
            let dense = r
                .dense
                .iter()
                .map(|spec| DenseModelSpec::parse(spec))
                .collect::<Result<Vec<_>>>()?;
            let index = HybridIndexConfig {
                corpus: b.path(layout::CORPUS),
                bm25: r.bm25.then(Bm25Settings::default),
                dense,
                encoder: EncoderOptions {
                    max_batch_tokens: r.max_batch_tokens,
                    ..EncoderOptions::default()
                },
                ..HybridIndexConfig::default()
            };
            let summary = build_hybrid_index(&index, &b.path(layout::INDEX), progress)?;
            let models: Vec<&str> = summary
                .manifest
                .dense
                .iter()
                .map(|d| d.name.as_str())
                .collect();
            Ok(format!(
                "{} documents indexed (bm25: {}, dense: {})",
                summary.num_documents,
                if r.bm25 { "yes" } else { "no" },
                if models.is_empty() {
                    "none".to_string()
                } else {
                    models.join(", ")
                }
            ))
        })
    }

    fn nuggets(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint(&NUGGETS)
            .setting("nuggets", &self.config.nuggets)
            .input("questions", &self.hash(layout::QUESTIONS))
            .finish();
        self.stage("nuggets", fingerprint, &[layout::NUGGETS], on_stage, |b| {
            let config = NuggetsConfig {
                params: b.params(b.config.nuggets.max_tokens),
                max_nuggets: b.config.nuggets.max_nuggets,
                max_repairs: b.config.llm.max_repairs,
                shard: None,
                structured_output: b.config.llm.structured_output,
            };
            let questions = b.path(layout::QUESTIONS);
            let out = b.path(layout::NUGGETS);
            let llm = &b.llm()?.llm;
            let before = llm.stats();
            let summary = generate_nuggets(llm, &config, &questions, &out, progress)?;
            Ok(format!(
                "{} questions, {} failed after repairs; {}{}",
                summary.items,
                summary.failed,
                calls_line(&before, &llm.stats()),
                Self::structured_note(&summary)
            ))
        })
    }

    fn variants(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint(&QUERY_VARIANTS)
            .setting("variants", &self.config.variants)
            .input("questions", &self.hash(layout::QUESTIONS))
            .finish();
        self.stage(
            "variants",
            fingerprint,
            &[layout::VARIANTS],
            on_stage,
            |b| {
                let config = VariantsConfig {
                    params: b.params(b.config.variants.max_tokens),
                    max_sub_questions: b.config.variants.max_sub_questions,
                    max_repairs: b.config.llm.max_repairs,
                    shard: None,
                    structured_output: b.config.llm.structured_output,
                };
                let questions = b.path(layout::QUESTIONS);
                let out = b.path(layout::VARIANTS);
                let llm = &b.llm()?.llm;
                let before = llm.stats();
                let summary = generate_query_variants(llm, &config, &questions, &out, progress)?;
                Ok(format!(
                    "{} questions, {} failed after repairs; {}{}",
                    summary.items,
                    summary.failed,
                    calls_line(&before, &llm.stats()),
                    Self::structured_note(&summary)
                ))
            },
        )
    }

    fn retrievers(&self, engine: &Engine) -> Vec<PoolRetriever> {
        let mut retrievers = Vec::new();
        if self.config.retrieval.bm25 {
            retrievers.push(PoolRetriever {
                engine_name: "bm25".into(),
                label: "bm25".into(),
            });
        }
        for dense in &engine.manifest().dense {
            retrievers.push(PoolRetriever {
                engine_name: format!("dense:{}", dense.name),
                label: dense.name.clone(),
            });
        }
        retrievers
    }

    fn pool(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let manifest = format!("{}/{}", layout::INDEX, crate::index::MANIFEST_FILE);
        let mut fingerprint = Fingerprint::new()
            .setting("retrieval", &self.config.retrieval)
            .input("questions", &self.hash(layout::QUESTIONS))
            .input("nuggets", &self.hash(layout::NUGGETS))
            .input("variants", &self.hash(layout::VARIANTS))
            .input("index", &self.hash(&manifest));
        // Only when present, so builds without a reranker keep their fingerprints.
        if let Some(rerank) = &self.config.rerank {
            fingerprint = fingerprint.setting("rerank", rerank);
        }
        let fingerprint = fingerprint.finish();
        self.stage(
            "pool",
            fingerprint,
            &[layout::RUNS, layout::POOL],
            on_stage,
            |b| {
                let questions = read_questions(&b.path(layout::QUESTIONS))?;
                let nuggets: BTreeMap<QueryId, NuggetsRecord> =
                    read_by_query(&b.path(layout::NUGGETS), |r: &NuggetsRecord| &r.query_id)?;
                let variants: BTreeMap<QueryId, VariantsRecord> =
                    read_by_query(&b.path(layout::VARIANTS), |r: &VariantsRecord| &r.query_id)?;
                let queries: Vec<(Technique, Vec<(String, String)>)> = Technique::ALL
                    .iter()
                    .map(|&t| (t, technique_queries(t, &questions, &nuggets, &variants)))
                    .collect();
                let engine = Engine::open_with_encoders(
                    b.path(layout::INDEX),
                    &QueryEncoderOptions::default(),
                )?;
                let config = PoolConfig {
                    retrievers: b.retrievers(&engine),
                    fusion: b.config.retrieval.fusion,
                    pool_depth: b.config.retrieval.pool_depth,
                    run_depth: b.config.retrieval.fusion_depth,
                };
                let runs_dir = b.path(layout::RUNS);
                if runs_dir.exists() {
                    std::fs::remove_dir_all(&runs_dir).map_err(|e| Error::io(&runs_dir, e))?;
                }
                let cross_encoder = match &b.config.rerank {
                    Some(rerank) => Some(CrossEncoder::load(
                        &resolve_model(&rerank.model)?,
                        &RerankerOptions {
                            max_length: rerank.max_length,
                            ..RerankerOptions::default()
                        },
                    )?),
                    None => None,
                };
                let corpus = b.path(layout::CORPUS);
                let reranker = cross_encoder.as_ref().zip(b.config.rerank.as_ref()).map(
                    |(reranker, rerank)| Rerank {
                        reranker,
                        depth: rerank.depth,
                        documents: DocumentTexts::Corpus(&corpus),
                    },
                );
                let summary = pool::pool(
                    &engine,
                    &config,
                    &queries,
                    reranker.as_ref(),
                    &runs_dir,
                    &b.path(layout::POOL),
                    progress,
                )?;
                Ok(format!(
                    "{} runs, {} documents pooled for {} questions",
                    summary.runs.len(),
                    summary.pooled_documents,
                    summary.questions
                ))
            },
        )
    }

    fn judge(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint(&JUDGE)
            .setting("judge", &self.config.judge)
            .input("questions", &self.hash(layout::QUESTIONS))
            .input("nuggets", &self.hash(layout::NUGGETS))
            .input("corpus", &self.hash(layout::CORPUS))
            .input("pool", &self.hash(layout::POOL))
            .finish();
        self.stage("judge", fingerprint, &[layout::JUDGMENTS], on_stage, |b| {
            let section = &b.config.judge;
            let questions = b.path(layout::QUESTIONS);
            let nuggets = b.path(layout::NUGGETS);
            let corpus = b.path(layout::CORPUS);
            let pool = b.path(layout::POOL);
            let out = b.path(layout::JUDGMENTS);
            let params = b.params(section.max_tokens);
            let max_repairs = b.config.llm.max_repairs;
            let structured_output = b.config.llm.structured_output;
            let opened = b.llm()?;
            let default = JudgeConfig::default();
            let config = JudgeConfig {
                params,
                docs_per_call: section.docs_per_call,
                context_tokens: section
                    .context_tokens
                    .or(opened.context_tokens)
                    .unwrap_or(default.context_tokens),
                max_doc_tokens: section.max_doc_tokens,
                max_repairs,
                shard: None,
                structured_output,
            };
            let inputs = JudgeInputs {
                questions: &questions,
                nuggets: &nuggets,
                corpus: &corpus,
                pool: &pool,
            };
            let before = opened.llm.stats();
            let summary = judge(&opened.llm, &config, &inputs, &out, progress)?;
            Ok(format!(
                "{} judgments in {} batches ({} failed after repairs); {}{}",
                summary.judgments,
                summary.stage.items,
                summary.stage.failed,
                calls_line(&before, &opened.llm.stats()),
                Self::structured_note(&summary.stage)
            ))
        })
    }

    fn export(&mut self, on_stage: &mut dyn FnMut(&StageOutcome)) -> Result<()> {
        let fingerprint = Fingerprint::new()
            .setting("topic", &self.config.topic)
            .setting("filter", &self.config.filter)
            .setting("manifest", &self.export_manifest_base())
            .input("questions", &self.hash(layout::QUESTIONS))
            .input("nuggets", &self.hash(layout::NUGGETS))
            .input("judgments", &self.hash(layout::JUDGMENTS))
            .input("corpus", &self.hash(layout::CORPUS))
            .input("runs", &self.hash(layout::RUNS))
            .finish();
        self.stage("export", fingerprint, &EXPORTED, on_stage, |b| {
            let questions: Vec<Question> = read_jsonl(b.path(layout::QUESTIONS))?;
            let nuggets: BTreeMap<QueryId, NuggetsRecord> =
                read_by_query(&b.path(layout::NUGGETS), |r: &NuggetsRecord| &r.query_id)?;
            let judgments: Vec<JudgmentRecord> = read_jsonl(b.path(layout::JUDGMENTS))?;
            let filtered = filter_questions(
                questions,
                &nuggets,
                &judgments,
                b.config.filter.require_all_nuggets_supported,
            );
            b.write_export(&filtered)?;
            let c = &filtered.counts;
            Ok(format!(
                "{} of {} questions kept (no nuggets {}, no supported nugget {}, an unsupported \
                 nugget {})",
                c.questions_out,
                c.questions_in,
                c.dropped_no_nuggets,
                c.dropped_no_supported_nugget,
                c.dropped_any_unsupported_nugget
            ))
        })?;
        let path = self.path("filtering.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
        let counts: export::FilterCounts =
            serde_json::from_str(&text).map_err(|e| Error::parse(&path, 1, e.to_string()))?;
        self.questions_out = counts.questions_out;
        Ok(())
    }

    fn report(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let mut fingerprint = Fingerprint::new();
        for rel in EXPORTED {
            fingerprint = fingerprint.input(rel, &self.hash(rel));
        }
        let outputs = ["stats.json", "results.json", "report.html"];
        self.stage("report", fingerprint.finish(), &outputs, on_stage, |b| {
            let report = crate::report::compute(&b.out, &ReportOptions::default(), progress)?;
            crate::report::write(&b.out, &report, None, None)?;
            Ok(format!(
                "{} pooling runs scored on {} questions; {}/report.html",
                report.pooling.rows.len(),
                report.pooling.judged_queries,
                b.out.display()
            ))
        })
    }

    /// The parts of the export manifest known before exporting.
    fn export_manifest_base(&self) -> serde_json::Value {
        let c = self.config;
        let mut manifest = serde_json::json!({
            "freshstack_version": env!("CARGO_PKG_VERSION"),
            "topic": c.topic,
            "repositories": self.repositories.iter().map(|(name, commit)| serde_json::json!({
                "name": name,
                "commit_id": commit,
            })).collect::<Vec<_>>(),
            "questions": {
                "source": if c.questions.posts.is_some() { "stackoverflow dump" } else { "file" },
                "file_name": c.questions.posts.as_ref().or(c.questions.file.as_ref())
                    .and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()),
                "tags": c.questions.tags,
                "match": c.questions.tag_match,
                "since": c.questions.since,
                "until": c.questions.until,
                "min_score": c.questions.min_score,
                "allow_unaccepted": c.questions.allow_unaccepted,
                "max_questions": c.questions.max_questions,
            },
            "corpus": {
                "max_tokens": c.corpus.max_tokens,
                // No local path: `hf:<model dir>/<file>`, and the file's hash below.
                "tokenizer": TokenizerSpec::parse(&c.corpus.tokenizer)
                    .map_or_else(|_| c.corpus.tokenizer.clone(), |t| t.portable_name()),
                "max_file_bytes": c.corpus.max_file_bytes,
                "exclude": c.corpus.exclude,
            },
            "retrieval": c.retrieval,
            "llm": {
                "model": self.llm_identity(),
                "temperature": c.llm.temperature,
                "seed": c.llm.seed,
                "prompts": [
                    crate::llm::prompts::NUGGETS.id,
                    crate::llm::prompts::QUERY_VARIANTS.id,
                    crate::llm::prompts::JUDGE.id,
                ],
            },
            "nuggets": c.nuggets,
            "variants": c.variants,
            "judge": c.judge,
            "filter": c.filter,
        });
        if let Some(sha256) = &self.tokenizer_sha256 {
            manifest["corpus"]["tokenizer_sha256"] = sha256.as_str().into();
        }
        manifest
    }

    fn write_export(&self, filtered: &Filtered) -> Result<()> {
        copy_file(&self.path(layout::CORPUS), &self.path("corpus.jsonl"))?;
        write_dataset(&self.out, filtered)?;
        let keep: HashSet<&str> = filtered
            .questions
            .iter()
            .map(|q| q.query_id.as_str())
            .collect();
        let runs_out = self.path("runs");
        if runs_out.exists() {
            std::fs::remove_dir_all(&runs_out).map_err(|e| Error::io(&runs_out, e))?;
        }
        let runs_in = self.path(layout::RUNS);
        let mut names: Vec<String> = std::fs::read_dir(&runs_in)
            .map_err(|e| Error::io(&runs_in, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".trec"))
            .collect();
        names.sort();
        for name in &names {
            copy_run_for(&runs_in.join(name), &runs_out.join(name), &keep)?;
        }
        let mut manifest = self.export_manifest_base();
        if let Some(map) = manifest.as_object_mut() {
            map.insert(
                "inputs".into(),
                serde_json::json!({
                    "questions.jsonl": self.hash(layout::QUESTIONS),
                    "corpus.jsonl": self.hash(layout::CORPUS),
                    "nuggets.jsonl": self.hash(layout::NUGGETS),
                    "variants.jsonl": self.hash(layout::VARIANTS),
                    "judgments.jsonl": self.hash(layout::JUDGMENTS),
                }),
            );
            map.insert(
                "runs".into(),
                serde_json::json!(
                    names
                        .iter()
                        .map(|n| n.trim_end_matches(".trec"))
                        .collect::<Vec<_>>()
                ),
            );
            map.insert("filtering".into(), serde_json::json!(filtered.counts));
        }
        write_json_atomic(self.path("manifest.json"), &manifest)
    }
}
