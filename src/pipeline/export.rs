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
use std::str::FromStr;

use super::filter::{FilterCounts, Filtered, filter_questions};
use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, EXPORTED, StageOutcome, layout, read_by_query};
use super::refresh::{llm_identity, stage_llms};
use crate::dataset::{
    AtomicWriter, JudgmentRecord, NuggetsRecord, QueryId, Question, read_jsonl, write_json_atomic,
};
use crate::error::{Error, Result};
use crate::source::TokenizerSpec;

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

impl Builder<'_> {
    pub(super) fn export(&mut self, on_stage: &mut dyn FnMut(&StageOutcome)) -> Result<()> {
        let fingerprint = stage_fingerprint("export")
            .json("topic", &self.config.topic)
            .json("filter", &self.config.filter)
            .json("manifest", &self.export_manifest_base())
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
    pub(super) fn export_manifest_base(&self) -> serde_json::Value {
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
                "tokenizer": TokenizerSpec::from_str(&c.corpus.tokenizer)
                    .map_or_else(|_| c.corpus.tokenizer.clone(), |t| t.portable_name()),
                "max_file_bytes": c.corpus.max_file_bytes,
                "exclude": c.corpus.exclude,
            },
            "retrieval": c.retrieval,
            "llm": {
                "model": llm_identity(&c.llm),
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
        // Only stages with `[llm.STAGE]`: manifests of builds without keep their bytes.
        for (stage, section) in stage_llms(c) {
            manifest["llm"][stage.name()] = serde_json::json!({
                "model": llm_identity(&section),
                "temperature": section.temperature,
                "seed": section.seed,
            });
        }
        // Only when set: manifests of builds without `[refresh]` keep their bytes.
        if let Some(day) = c.refresh.as_ref().and_then(|r| r.retire_before.as_ref()) {
            manifest["questions"]["retire_before"] = day.as_str().into();
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
        if let Some(map) = manifest.as_object_mut() {
            map.insert(
                "inputs".into(),
                serde_json::json!({
                    "questions.jsonl": self.hash_text(layout::QUESTIONS),
                    "corpus.jsonl": self.hash_text(layout::CORPUS),
                    "nuggets.jsonl": self.hash_text(layout::NUGGETS),
                    "variants.jsonl": self.hash_text(layout::VARIANTS),
                    "judgments.jsonl": self.hash_text(layout::JUDGMENTS),
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

#[cfg(test)]
mod tests {
    use super::*;
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
