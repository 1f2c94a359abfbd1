//! The export stage (paper §4): the questions filtered ([`filter`](super::filter)), then the
//! dataset written into the build directory.
//!
//! Export layout (the reference's formats; loadable with `datasets.load_dataset("json", ...)`):
//! `corpus.jsonl`, `queries.jsonl` (nuggets with `relevant_corpus_ids` /
//! `non_relevant_corpus_ids`), `qrels/nuggets.qrels` (`qid nugget_id doc_id label`),
//! `qrels/test.tsv` (BEIR query-level: how many of the query's nuggets a document supports),
//! `runs/*.trec` (every pooling run, restricted to the kept questions), `filtering.json`,
//! `manifest.json` (the settings, repositories and input hashes).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufReader, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::config::LlmStage;
use super::filter::{FilterCounts, Filtered, filter_questions};
use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, EXPORTED, StageOutcome, layout, read_by_query};
use super::refresh::{llm_identity, stage_llms};
use crate::dataset::{
    AtomicWriter, JudgmentRecord, NuggetsRecord, QueryId, Question, read_json_if_present,
    read_jsonl, write_json_atomic,
};
use crate::error::{Error, Result};
use crate::source::stackoverflow::Day;

/// Writes `queries.jsonl`, `qrels/nuggets.qrels`, `qrels/test.tsv` and `filtering.json` into
/// `dir`.
pub fn write_dataset(dir: &Path, filtered: &Filtered) -> Result<()> {
    let mut queries = AtomicWriter::create(dir.join("queries.jsonl"))?;
    for q in &filtered.questions {
        queries.write_json_line(q)?;
    }
    queries.commit()?;

    let qrels_dir = dir.join("qrels");
    let path = qrels_dir.join("nuggets.qrels");
    let mut nugget_qrels = AtomicWriter::create(&path)?;
    for q in &filtered.questions {
        for n in &q.nuggets {
            for (docs, label) in [(&n.relevant_corpus_ids, 1), (&n.non_relevant_corpus_ids, 0)] {
                for doc in docs {
                    writeln!(nugget_qrels, "{} {} {} {label}", q.query_id, n.id, doc)
                        .map_err(|e| Error::io(&path, e))?;
                }
            }
        }
    }
    nugget_qrels.commit()?;

    let path = qrels_dir.join("test.tsv");
    let mut query_qrels = AtomicWriter::create(&path)?;
    writeln!(query_qrels, "query-id\tcorpus-id\tscore").map_err(|e| Error::io(&path, e))?;
    for q in &filtered.questions {
        let mut per_doc: BTreeMap<&str, usize> = BTreeMap::new();
        for n in &q.nuggets {
            for doc in &n.non_relevant_corpus_ids {
                per_doc.entry(doc).or_insert(0);
            }
            for doc in &n.relevant_corpus_ids {
                *per_doc.entry(doc).or_insert(0) += 1;
            }
        }
        for (doc, score) in per_doc {
            writeln!(query_qrels, "{}\t{doc}\t{score}", q.query_id)
                .map_err(|e| Error::io(&path, e))?;
        }
    }
    query_qrels.commit()?;

    write_json_atomic(dir.join("filtering.json"), &filtered.counts)
}

/// Copies a TREC run keeping only the lines of `keep` questions (bytes otherwise unchanged).
pub fn copy_run_for(from: &Path, to: &Path, keep: &HashSet<&str>) -> Result<()> {
    let file = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    let mut writer = AtomicWriter::create(to)?;
    for line in crate::dataset::bounded::lines(BufReader::new(file)) {
        let line = line.map_err(|e| Error::io(from, e))?;
        let qid = line.split_whitespace().next().unwrap_or("");
        if keep.contains(qid) {
            writeln!(writer, "{line}").map_err(|e| Error::io(to, e))?;
        }
    }
    writer.commit()
}

/// Copies a file atomically.
pub fn copy_file(from: &Path, to: &Path) -> Result<()> {
    let mut reader = std::fs::File::open(from).map_err(|e| Error::io(from, e))?;
    let mut writer = AtomicWriter::create(to)?;
    std::io::copy(&mut reader, &mut writer).map_err(|e| Error::io(to, e))?;
    writer.commit()
}

/// `manifest.json` of an exported dataset: what was built (version, topic, repositories at their
/// commits), how (questions, chunking, LLMs, the stage settings) and from what (the hashes of the
/// work files). Written by the export stage; read by `refresh` (the input hashes) and `report`
/// (topic and repositories). Keys are written in the order declared. Every field reads as absent
/// or empty when a manifest (of another version, or hand-made) lacks it, and unknown keys are
/// ignored, so that any dataset's manifest can be read for what it has.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ExportManifest {
    /// The `freshstack` version that exported.
    pub freshstack_version: String,
    /// The build's topic.
    pub topic: Option<String>,
    /// The corpus's repositories, in config order.
    pub repositories: Vec<ManifestRepository>,
    /// Where the questions came from and how they were selected.
    pub questions: ManifestQuestions,
    /// How the corpus was chunked.
    pub corpus: ManifestCorpus,
    /// `[retrieval]` as the build ran it.
    pub retrieval: Value,
    /// The model and sampling of the LLM stages.
    pub llm: ManifestLlm,
    /// `[nuggets]` as the build ran it.
    pub nuggets: Value,
    /// `[variants]` as the build ran it.
    pub variants: Value,
    /// `[judge]` as the build ran it.
    pub judge: Value,
    /// `[filter]` as the build ran it.
    pub filter: Value,
    /// The SHA-256 of each work file the dataset was exported from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inputs: Option<ManifestInputs>,
    /// The pooling runs exported under `runs/`, by name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<String>>,
    /// What the filter kept and dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filtering: Option<FilterCounts>,
}

/// A corpus repository in [`ExportManifest::repositories`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestRepository {
    /// `owner/name`.
    pub name: String,
    /// The checkout's HEAD commit (null without `.git`).
    pub commit_id: Option<String>,
}

/// The question selection in [`ExportManifest::questions`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestQuestions {
    /// `stackoverflow dump` or `file`.
    pub source: String,
    /// The dump's or file's name (no directory).
    pub file_name: Option<String>,
    /// Tags asked for.
    pub tags: Vec<String>,
    /// `any` or `all` of the tags.
    #[serde(rename = "match")]
    pub tag_match: String,
    /// First question day kept.
    pub since: Option<String>,
    /// Last question day kept.
    pub until: Option<String>,
    /// Lowest question score kept.
    pub min_score: Option<i64>,
    /// Questions without an accepted answer allowed.
    pub allow_unaccepted: bool,
    /// Cap on the questions imported.
    pub max_questions: Option<usize>,
    /// `[refresh] retire_before`, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retire_before: Option<String>,
}

/// The chunking in [`ExportManifest::corpus`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestCorpus {
    /// Chunk size in tokens.
    pub max_tokens: usize,
    /// The tokenizer, without a local path.
    pub tokenizer: String,
    /// Files larger than this were skipped.
    pub max_file_bytes: u64,
    /// Globs excluded.
    pub exclude: Vec<String>,
    /// SHA-256 of a Hugging Face tokenizer file, when one was used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer_sha256: Option<String>,
}

/// The LLM of the stages in [`ExportManifest::llm`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestLlm {
    /// `gguf:<file>:<bytes>` or `openai:<model>`.
    pub model: String,
    /// Sampling temperature.
    pub temperature: f32,
    /// Sampling seed.
    pub seed: Option<u64>,
    /// The prompt versions of the nuggets, variants and judge stages.
    pub prompts: Vec<String>,
    /// The nuggets stage's own `[llm.nuggets]`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nuggets: Option<ManifestStageLlm>,
    /// The variants stage's own `[llm.variants]`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variants: Option<ManifestStageLlm>,
    /// The judge stage's own `[llm.judge]`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge: Option<ManifestStageLlm>,
}

impl ManifestLlm {
    /// The own LLM of `stage`, when it has one.
    pub fn stage_mut(&mut self, stage: LlmStage) -> &mut Option<ManifestStageLlm> {
        match stage {
            LlmStage::Nuggets => &mut self.nuggets,
            LlmStage::Variants => &mut self.variants,
            LlmStage::Judge => &mut self.judge,
        }
    }
}

/// The work files' hashes in [`ExportManifest::inputs`] (SHA-256, lowercase hex).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestInputs {
    /// `work/questions.jsonl`.
    #[serde(rename = "questions.jsonl")]
    pub questions: String,
    /// `work/corpus.jsonl`.
    #[serde(rename = "corpus.jsonl")]
    pub corpus: String,
    /// `work/nuggets.jsonl`.
    #[serde(rename = "nuggets.jsonl")]
    pub nuggets: String,
    /// `work/variants.jsonl`.
    #[serde(rename = "variants.jsonl")]
    pub variants: String,
    /// `work/judgments.jsonl`.
    #[serde(rename = "judgments.jsonl")]
    pub judgments: String,
}

impl ManifestInputs {
    /// The inputs with the hash `hash_of` gives each work file (its path under the build
    /// directory).
    pub fn of(hash_of: impl Fn(&str) -> String) -> Self {
        ManifestInputs {
            questions: hash_of(layout::QUESTIONS),
            corpus: hash_of(layout::CORPUS),
            nuggets: hash_of(layout::NUGGETS),
            variants: hash_of(layout::VARIANTS),
            judgments: hash_of(layout::JUDGMENTS),
        }
    }

    /// (path under the build directory, recorded hash) of each input.
    pub fn by_work_file(&self) -> [(&'static str, &str); 5] {
        [
            (layout::QUESTIONS, &self.questions),
            (layout::CORPUS, &self.corpus),
            (layout::NUGGETS, &self.nuggets),
            (layout::VARIANTS, &self.variants),
            (layout::JUDGMENTS, &self.judgments),
        ]
    }
}

/// A stage's own LLM in [`ManifestLlm`] (`nuggets`, `variants`, `judge`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ManifestStageLlm {
    /// As [`ManifestLlm::model`].
    pub model: String,
    /// Sampling temperature.
    pub temperature: f32,
    /// Sampling seed.
    pub seed: Option<u64>,
}

/// A settings section as JSON (a section that cannot be written as JSON, which none of the
/// config's can, reads as null).
fn settings_value<T: Serialize>(section: &T) -> Value {
    serde_json::to_value(section).unwrap_or_default()
}

impl ExportManifest {
    /// The manifest as a JSON value, fields in the order declared (the order written). The
    /// export stage's fingerprint hashes this value, so it is the same with or without
    /// serde_json's `preserve_order`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    /// Writes the manifest atomically.
    pub fn write(&self, path: &Path) -> Result<()> {
        write_json_atomic(path, &self.to_json())
    }

    /// Reads `path`; `Ok(None)` when there is none. Bad JSON, or a field of the wrong type, is an
    /// error naming the file and line.
    pub fn read(path: &Path) -> Result<Option<Self>> {
        read_json_if_present(path)
    }

    /// The non-empty names of [`Self::repositories`].
    pub fn repository_names(&self) -> Vec<String> {
        self.repositories
            .iter()
            .filter(|r| !r.name.is_empty())
            .map(|r| r.name.clone())
            .collect()
    }
}

impl Builder<'_> {
    pub(super) fn export(&mut self, on_stage: &mut dyn FnMut(&StageOutcome)) -> Result<()> {
        let fingerprint = stage_fingerprint("export")
            .json("topic", &self.config.topic)
            .json("filter", &self.config.filter)
            .json("manifest", &self.export_manifest_base().to_json())
            .maybe_fingerprint("questions", self.hash(layout::QUESTIONS))
            .maybe_fingerprint("nuggets", self.hash(layout::NUGGETS))
            .maybe_fingerprint("judgments", self.hash(layout::JUDGMENTS))
            .maybe_fingerprint("corpus", self.hash(layout::CORPUS))
            .maybe_fingerprint("runs", self.hash(layout::RUNS))
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
        let text =
            crate::dataset::bounded::read_text(&path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
                .map_err(|e| Error::io(&path, e))?;
        let counts: FilterCounts =
            serde_json::from_str(&text).map_err(|e| Error::parse(&path, 1, e.to_string()))?;
        self.questions_out = counts.questions_out;
        Ok(())
    }

    /// The parts of the export manifest known before exporting.
    pub(super) fn export_manifest_base(&self) -> ExportManifest {
        let c = self.config;
        let q = &c.questions;
        let mut manifest = ExportManifest {
            freshstack_version: env!("CARGO_PKG_VERSION").to_string(),
            topic: Some(c.topic.clone()),
            repositories: self
                .repositories
                .iter()
                .map(|(name, commit)| ManifestRepository {
                    name: name.clone(),
                    commit_id: commit.clone(),
                })
                .collect(),
            questions: ManifestQuestions {
                source: if q.posts.is_some() {
                    "stackoverflow dump"
                } else {
                    "file"
                }
                .to_string(),
                file_name: q
                    .posts
                    .as_ref()
                    .or(q.file.as_ref())
                    .and_then(|p| p.file_name())
                    .map(|n| n.to_string_lossy().into_owned()),
                tags: q.tags.clone(),
                tag_match: q.tag_match.to_string(),
                since: q.since.as_ref().map(Day::to_string),
                until: q.until.as_ref().map(Day::to_string),
                min_score: q.min_score,
                allow_unaccepted: q.allow_unaccepted,
                max_questions: q.max_questions,
                // Only when set: manifests of builds without `[refresh]` keep their bytes.
                retire_before: c
                    .refresh
                    .as_ref()
                    .and_then(|r| r.retire_before.as_ref())
                    .map(Day::to_string),
            },
            corpus: ManifestCorpus {
                max_tokens: c.corpus.max_tokens,
                // No local path: `hf:<model dir>/<file>`, and the file's hash beside it.
                tokenizer: c.corpus.tokenizer.portable_name(),
                tokenizer_sha256: self.tokenizer_sha256.clone(),
                max_file_bytes: c.corpus.max_file_bytes,
                exclude: c.corpus.exclude.clone(),
            },
            retrieval: settings_value(&c.retrieval),
            llm: ManifestLlm {
                model: llm_identity(&c.llm),
                temperature: c.llm.temperature,
                seed: c.llm.seed,
                prompts: [
                    crate::llm::prompts::NUGGETS.id,
                    crate::llm::prompts::QUERY_VARIANTS.id,
                    crate::llm::prompts::JUDGE.id,
                ]
                .map(str::to_string)
                .to_vec(),
                nuggets: None,
                variants: None,
                judge: None,
            },
            nuggets: settings_value(&c.nuggets),
            variants: settings_value(&c.variants),
            judge: settings_value(&c.judge),
            filter: settings_value(&c.filter),
            inputs: None,
            runs: None,
            filtering: None,
        };
        for (stage, section) in stage_llms(c) {
            *manifest.llm.stage_mut(stage) = Some(ManifestStageLlm {
                model: llm_identity(&section),
                temperature: section.temperature,
                seed: section.seed,
            });
        }
        manifest
    }

    pub(super) fn write_export(&self, filtered: &Filtered) -> Result<()> {
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
        manifest.inputs = Some(ManifestInputs::of(|rel| self.hash_text(rel)));
        manifest.runs = Some(
            names
                .iter()
                .map(|n| n.trim_end_matches(".trec").to_string())
                .collect(),
        );
        manifest.filtering = Some(filtered.counts.clone());
        manifest.write(&self.path("manifest.json"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_reads_what_it_has_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("manifest.json");
        assert_eq!(ExportManifest::read(&path).unwrap(), None);
        // A hand-made or other version's manifest: missing fields read empty, unknown ignored.
        std::fs::write(
            &path,
            r#"{"topic": "t", "repositories": [{"name": "a/b"}, {"commit_id": "c"}], "new": 1}"#,
        )
        .unwrap();
        let read = ExportManifest::read(&path).unwrap().unwrap();
        assert_eq!(read.topic.as_deref(), Some("t"));
        assert_eq!(read.repository_names(), ["a/b"]);
        assert_eq!(read.inputs, None);
        std::fs::write(&path, "{\n\"inputs\": {\"corpus.jsonl\": 5}}").unwrap();
        let err = ExportManifest::read(&path).unwrap_err().to_string();
        assert!(err.contains("manifest.json:2"), "{err}");

        let mut manifest = ExportManifest {
            topic: Some("t".into()),
            inputs: Some(ManifestInputs {
                corpus: "ab".into(),
                ..ManifestInputs::default()
            }),
            ..ExportManifest::default()
        };
        *manifest.llm.stage_mut(LlmStage::Judge) = Some(ManifestStageLlm {
            model: "openai:m".into(),
            temperature: 0.5,
            seed: Some(3),
        });
        manifest.write(&path).unwrap();
        assert_eq!(ExportManifest::read(&path).unwrap().unwrap(), manifest);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(!text.contains("\"nuggets\": {\n      \"model\""), "{text}");
        assert!(!text.contains("tokenizer_sha256"), "{text}");
    }
    use crate::pipeline::filter::tests::{judgment, nuggets, question};

    #[test]
    fn qrels_count_supported_nuggets_per_document() {
        let mut records = BTreeMap::new();
        records.insert("1".into(), nuggets("1", 2));
        let judgments = vec![
            judgment("1", 0, "d1", Some(true)),
            judgment("1", 1, "d1", Some(true)),
            judgment("1", 1, "d2", Some(false)),
        ];
        let filtered = filter_questions(vec![question("1")], &records, &judgments, true);
        let dir = tempfile::tempdir().unwrap();
        write_dataset(dir.path(), &filtered).unwrap();
        let tsv = std::fs::read_to_string(dir.path().join("qrels/test.tsv")).unwrap();
        assert_eq!(tsv, "query-id\tcorpus-id\tscore\n1\td1\t2\n1\td2\t0\n");
        let qrels = std::fs::read_to_string(dir.path().join("qrels/nuggets.qrels")).unwrap();
        assert_eq!(qrels, "1 1_0 d1 1\n1 1_1 d1 1\n1 1_1 d2 0\n");
    }
}
