//! `freshstack refresh` (paper §7, "dynamic updates"): a new build of a topic from a newer dump
//! and updated checkouts that carries over every result of an old build whose inputs are
//! unchanged.
//!
//! What is carried over, from the old build's work files (never from its response cache, which
//! may be elsewhere or gone):
//! - a question's nuggets when its title, body and accepted answer are unchanged, its query
//!   variants when its title and body are (the prompts' inputs);
//! - the judgments of a (question, nuggets, document) triple: same question id, title and
//!   body, same nuggets, same document id and text. Only the documents of a question that have
//!   no carried judgments are batched (`[judge] docs_per_call`) and sent to the judge.
//!
//! Failed items (an unusable answer) are not carried: they are asked again, as a fresh build
//! would. Everything else is a plain build ([`super::build`]): the same stages, manifests and
//! resumability, into a new directory; the old one is only read. A refresh is refused, before
//! anything is written, when the old directory is not a finished build, when the new one is it
//! or lies inside it, when the LLM cache lies in it, or when a setting the carried results depend on differs
//! ([`result_settings`]): the model, sampling, repairs, structured output, prompts, the nugget,
//! variant and judge settings, and the chunking. After the export the refresh writes
//! `changes.json` ([`super::changes`]), which the report shows.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::changes::Changes;
use super::config::{BuildConfig, LlmSection, LlmStage};
use super::export::ExportManifest;
use super::manifest::StageBook;
use super::orchestrator::{BuildSummary, StageOutcome, layout, read_by_query, run_build};
use super::report::ReportStage;
use crate::dataset::{
    Fingerprint, JudgmentRecord, NuggetText, NuggetsRecord, QueryId, Question, VariantsRecord,
    for_each_document, read_jsonl,
};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;
use crate::source::TokenizerSpec;

/// A checked refresh, ready to run: [`Refresh::prepare`], then [`Refresh::run`].
#[derive(Debug)]
pub struct Refresh {
    config: BuildConfig,
    out: PathBuf,
    carry: Carry,
}

/// What a refresh did: the build, and what changed.
#[derive(Debug, Clone)]
pub struct RefreshSummary {
    /// The new build.
    pub build: BuildSummary,
    /// `changes.json`.
    pub changes: Changes,
}

impl Refresh {
    /// Checks that `from` is a finished build that `config` can refresh into `out`, and reads
    /// its results. Writes nothing; an error says why the refresh is refused.
    pub fn prepare(config: &BuildConfig, from: &Path, out: &Path) -> Result<Self> {
        check_directories(config, from, out)?;
        check_finished(from)?;
        check_settings(config, from)?;
        Ok(Self {
            config: config.clone(),
            out: out.to_path_buf(),
            carry: Carry::load(from)?,
        })
    }

    /// Builds into the new directory carrying the old results over, then writes
    /// `changes.json` and the report (see [`super::build`] for the arguments).
    pub fn run(
        &self,
        report: &dyn ReportStage,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<RefreshSummary> {
        let build = run_build(
            &self.config,
            &self.out,
            Some(&self.carry),
            report,
            progress,
            on_stage,
        )?;
        let path = self.out.join(layout::CHANGES);
        let text =
            crate::dataset::bounded::read_text(&path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
                .map_err(|e| Error::io(&path, e))?;
        let changes = serde_json::from_str(&text)
            .map_err(|e| Error::parse(&path, e.line(), e.to_string()))?;
        Ok(RefreshSummary { build, changes })
    }
}

fn refused(message: String) -> Error {
    Error::invalid(Setting::Refresh, message)
}

/// `out` is a new place: neither `from` nor inside it, and the response cache does not write
/// into `from`.
fn check_directories(config: &BuildConfig, from: &Path, out: &Path) -> Result<()> {
    if !from.is_dir() {
        return Err(refused(format!(
            "{} is not a build directory",
            from.display()
        )));
    }
    let from_real = std::fs::canonicalize(from).map_err(|e| Error::io(from, e))?;
    if resolved(out).starts_with(&from_real) {
        return Err(refused(format!(
            "--out {} is the old build (--from) or inside it: a refresh writes a new directory \
             and leaves the old one as it is",
            out.display()
        )));
    }
    if let Some(cache) = &config.llm.cache
        && resolved(cache).starts_with(&from_real)
    {
        return Err(refused(format!(
            "[llm] cache {} is inside the old build {}, which a refresh leaves as it is: point \
             the cache elsewhere (or leave it out: NEW_OUT/{})",
            cache.display(),
            from.display(),
            layout::LLM_CACHE
        )));
    }
    Ok(())
}

/// `path` made absolute through its nearest existing ancestor (the rest need not exist).
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        if let Ok(real) = std::fs::canonicalize(&current) {
            return rest.iter().rev().fold(real, |p, part| p.join(part));
        }
        match (current.file_name(), current.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                current = if parent.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    parent.to_path_buf()
                };
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// The export finished, its outputs are as it left them, and its manifest's input hashes are
/// the work files' (no later, unfinished build has changed them). That is all a refresh reads:
/// the index, the pool and the report may be gone or rewritten (`freshstack report` with other
/// options).
fn check_finished(from: &Path) -> Result<()> {
    let not_finished = |why: String| {
        refused(format!(
            "{} is not a finished build ({why}): finish it with `freshstack build`, or use \
             `freshstack build` for the new inputs",
            from.display()
        ))
    };
    if !StageBook::new(from).finished("export")? {
        return Err(not_finished("its export has not finished".into()));
    }
    let manifest = ExportManifest::read(&from.join("manifest.json"))?
        .ok_or_else(|| not_finished("it has no manifest.json".into()))?;
    let inputs = manifest.inputs.unwrap_or_default();
    for (rel, recorded) in inputs.by_work_file() {
        let now = Fingerprint::of_path(&from.join(rel))?.to_string();
        if recorded != now {
            return Err(not_finished(format!("{rel} changed after its export")));
        }
    }
    Ok(())
}

fn read_json(path: &Path) -> Result<Value> {
    let text =
        crate::dataset::bounded::read_text(path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
            .map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::parse(path, e.line(), e.to_string()))
}

/// The model as the manifest and the stage fingerprints name it (not where it runs).
pub(super) fn llm_identity(llm: &LlmSection) -> String {
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

/// The settings every carried result depends on, in the export manifest's shape (so that an
/// old build without `work/settings.json` is compared on its manifest's fields):
/// `llm` (model, sampling, prompts, repairs, structured output), `nuggets`, `variants`,
/// `judge` and the chunking of `corpus` (`max_tokens`, tokenizer and its file's hash).
pub(super) fn result_settings(config: &BuildConfig) -> Result<Value> {
    let tokenizer = &config.corpus.tokenizer;
    let mut corpus = json!({
        "max_tokens": config.corpus.max_tokens,
        "tokenizer": tokenizer.portable_name(),
    });
    if let TokenizerSpec::HuggingFace(path) = tokenizer {
        corpus["tokenizer_sha256"] = Fingerprint::of_file(path)?.to_string().into();
    }
    let llm = &config.llm;
    let mut settings = json!({
        "llm": {
            "model": llm_identity(llm),
            "temperature": llm.temperature,
            "seed": llm.seed,
            "prompts": [
                crate::llm::prompts::NUGGETS.id,
                crate::llm::prompts::QUERY_VARIANTS.id,
                crate::llm::prompts::JUDGE.id,
            ],
            "max_repairs": llm.max_repairs,
            "structured_output": llm.structured_output,
        },
        "nuggets": config.nuggets,
        "variants": config.variants,
        "judge": config.judge,
        "corpus": corpus,
    });
    // Only stages with `[llm.STAGE]`: builds without keep their recorded bytes.
    for (stage, section) in stage_llms(config) {
        settings["llm"][stage.name()] = json!({
            "model": llm_identity(&section),
            "temperature": section.temperature,
            "seed": section.seed,
            "max_repairs": section.max_repairs,
            "structured_output": section.structured_output,
        });
    }
    Ok(settings)
}

/// The stages that run with `[llm.STAGE]` settings, resolved.
pub(super) fn stage_llms(config: &BuildConfig) -> Vec<(LlmStage, LlmSection)> {
    LlmStage::ALL
        .into_iter()
        .filter(|&stage| config.llm.stage_override(stage).is_some())
        .map(|stage| (stage, config.llm.for_stage(stage)))
        .collect()
}

/// The old build's settings (`work/settings.json`, else its `manifest.json`) against the new
/// config's: the first difference is refused, by name.
fn check_settings(config: &BuildConfig, from: &Path) -> Result<()> {
    let new = result_settings(config)?;
    let recorded = from.join(layout::SETTINGS);
    let (old, complete) = if recorded.is_file() {
        (read_json(&recorded)?, true)
    } else {
        (read_json(&from.join("manifest.json"))?, false)
    };
    if let Some((key, old, new)) = first_difference("", &old, &new, complete) {
        return Err(refused(format!(
            "setting {key} differs from the old build's ({old} there, {new} now): its results \
             cannot be carried over; run a plain `freshstack build` instead"
        )));
    }
    Ok(())
}

/// The first leaf (dotted path, old, new) where `new` differs from `old`. With `complete`
/// false, `old` may lack keys (an older record): those are not compared.
fn first_difference(
    at: &str,
    old: &Value,
    new: &Value,
    complete: bool,
) -> Option<(String, String, String)> {
    let key = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut keys: Vec<&String> = n.keys().collect();
            if complete {
                keys.extend(o.keys().filter(|k| !n.contains_key(*k)));
            }
            for k in keys {
                match (o.get(k), n.get(k)) {
                    (None, _) if !complete => {}
                    (Some(a), Some(b)) => {
                        if let Some(found) = first_difference(&key(k), a, b, complete) {
                            return Some(found);
                        }
                    }
                    (a, b) => {
                        let show = |v: Option<&Value>| v.map_or("unset".into(), Value::to_string);
                        return Some((key(k), show(a), show(b)));
                    }
                }
            }
            None
        }
        _ if old == new => None,
        _ => Some((at.to_string(), old.to_string(), new.to_string())),
    }
}

/// A corpus document as the change record sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct DocState {
    /// `owner/name` (empty when the row does not say).
    pub(super) repo: String,
    /// Path inside the repository (the id when the row does not say).
    pub(super) path: String,
    /// The SHA-256 of its text.
    pub(super) text: Fingerprint,
}

/// Reads a corpus file into id -> [`DocState`].
pub(super) fn read_doc_states(corpus: &Path) -> Result<BTreeMap<String, DocState>> {
    let mut docs = BTreeMap::new();
    for_each_document(corpus, |_, doc| {
        let state = DocState {
            repo: doc.metadata.repo.clone().unwrap_or_default(),
            path: doc.metadata.path.clone().unwrap_or_else(|| doc.id.clone()),
            text: Fingerprint::of_bytes(doc.text.as_bytes()),
        };
        docs.insert(doc.id, state);
        Ok(())
    })?;
    Ok(docs)
}

/// What the judge prompt says about a question besides its documents: its title, body and
/// nuggets (ids and texts).
pub(super) fn judge_topic(question: &Question, nuggets: &[NuggetText]) -> Fingerprint {
    let mut topic = Fingerprint::builder("judged question")
        .text("title", &question.query_title)
        .text("text", &question.query_text)
        .number("nuggets", nuggets.len() as u64);
    for nugget in nuggets {
        topic = topic.text("id", &nugget.id).text("nugget", &nugget.text);
    }
    topic.finish()
}

/// The carried judgments of one (question, document).
#[derive(Debug)]
struct CarriedDoc {
    /// [`judge_topic`] of the old question and nuggets.
    topic: Fingerprint,
    /// The old document text's SHA-256.
    text: Fingerprint,
    /// One row per nugget, in nugget order.
    rows: Vec<JudgmentRecord>,
}

/// The old build's results, as a refresh carries them over.
#[derive(Debug)]
pub(super) struct Carry {
    /// The old build directory.
    pub(super) from: PathBuf,
    /// Old questions by id.
    pub(super) questions: BTreeMap<QueryId, Question>,
    /// Usable nugget records by question.
    nuggets: BTreeMap<QueryId, NuggetsRecord>,
    /// Usable variant records by question.
    variants: BTreeMap<QueryId, VariantsRecord>,
    /// Complete judgments by (question, document).
    judged: HashMap<(QueryId, String), CarriedDoc>,
    /// The old corpus.
    pub(super) documents: BTreeMap<String, DocState>,
}

impl Carry {
    /// Reads the old build's work files.
    pub(super) fn load(from: &Path) -> Result<Self> {
        let questions: BTreeMap<QueryId, Question> =
            read_jsonl::<Question>(from.join(layout::QUESTIONS))?
                .into_iter()
                .map(|q| (q.query_id.clone(), q))
                .collect();
        let mut nuggets: BTreeMap<QueryId, NuggetsRecord> =
            read_by_query(&from.join(layout::NUGGETS), |r: &NuggetsRecord| &r.query_id)?;
        nuggets.retain(|_, r| r.error.is_none() && !r.nuggets.is_empty());
        let mut variants: BTreeMap<QueryId, VariantsRecord> =
            read_by_query(&from.join(layout::VARIANTS), |r: &VariantsRecord| {
                &r.query_id
            })?;
        variants.retain(|_, r| r.error.is_none());
        let documents = read_doc_states(&from.join(layout::CORPUS))?;
        // Rows by (question, document), in the file's nugget order.
        let mut rows: BTreeMap<(QueryId, String), Vec<JudgmentRecord>> = BTreeMap::new();
        for row in read_jsonl::<JudgmentRecord>(from.join(layout::JUDGMENTS))? {
            rows.entry((row.query_id.clone(), row.doc_id.clone()))
                .or_default()
                .push(row);
        }
        let mut judged = HashMap::new();
        for ((qid, doc_id), rows) in rows {
            let (Some(question), Some(record), Some(doc)) = (
                questions.get(&qid),
                nuggets.get(&qid),
                documents.get(&doc_id),
            ) else {
                continue;
            };
            let complete = rows.len() == record.nuggets.len()
                && rows
                    .iter()
                    .zip(&record.nuggets)
                    .all(|(row, n)| row.nugget_id == n.id && row.supported.is_some());
            if complete {
                let topic = judge_topic(question, &record.nuggets);
                judged.insert(
                    (qid, doc_id),
                    CarriedDoc {
                        topic,
                        text: doc.text,
                        rows,
                    },
                );
            }
        }
        Ok(Self {
            from: from.to_path_buf(),
            questions,
            nuggets,
            variants,
            judged,
            documents,
        })
    }

    /// The old nuggets of `question` when its title, body and answer are unchanged.
    pub(super) fn nuggets(&self, question: &Question) -> Option<NuggetsRecord> {
        let old = self.questions.get(&question.query_id)?;
        let same = old.query_title == question.query_title
            && old.query_text == question.query_text
            && old.answer_text == question.answer_text;
        same.then(|| self.nuggets.get(&question.query_id).cloned())
            .flatten()
    }

    /// The old query variants of `question` when its title and body are unchanged.
    pub(super) fn variants(&self, question: &Question) -> Option<VariantsRecord> {
        let old = self.questions.get(&question.query_id)?;
        let same = old.query_title == question.query_title && old.query_text == question.query_text;
        same.then(|| self.variants.get(&question.query_id).cloned())
            .flatten()
    }

    /// The old judgments of document `doc_id` (text hash `text`) for question `query_id` with
    /// [`judge_topic`] `topic`, when that triple was judged before.
    pub(super) fn judged(
        &self,
        query_id: &QueryId,
        topic: &Fingerprint,
        doc_id: &str,
        text: &Fingerprint,
    ) -> Option<&[JudgmentRecord]> {
        let carried = self.judged.get(&(query_id.clone(), doc_id.to_string()))?;
        (carried.topic == *topic && carried.text == *text).then_some(carried.rows.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_are_named_by_their_dotted_key() {
        let old =
            json!({"llm": {"model": "openai:a", "seed": null}, "judge": {"docs_per_call": 2}});
        let same = old.clone();
        assert_eq!(first_difference("", &old, &same, true), None);
        let new =
            json!({"llm": {"model": "openai:b", "seed": null}, "judge": {"docs_per_call": 2}});
        assert_eq!(
            first_difference("", &old, &new, true),
            Some((
                "llm.model".into(),
                "\"openai:a\"".into(),
                "\"openai:b\"".into()
            ))
        );
        // An older record without a key is not compared on it; a complete one is.
        let more = json!({"llm": {"model": "openai:a", "seed": null, "max_repairs": 2}, "judge": {"docs_per_call": 2}});
        assert_eq!(first_difference("", &old, &more, false), None);
        assert_eq!(
            first_difference("", &old, &more, true).map(|d| d.0),
            Some("llm.max_repairs".into())
        );
    }

    #[test]
    fn a_path_that_does_not_exist_yet_resolves_through_its_parent() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        assert_eq!(resolved(&dir.path().join("a/b")), real.join("a/b"));
    }
}
