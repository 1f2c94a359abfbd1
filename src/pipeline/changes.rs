//! `changes.json`: what a refresh ([`super::Refresh`]) changed, written into the new build
//! directory after the export and shown in its report.
//!
//! Every number is a function of the old and new builds' files, never of the run itself (a
//! killed refresh resumed, or one that found answers in the response cache, writes the same
//! bytes): the questions added, retired, kept and changed; the documents and files added,
//! removed and changed per repository; the judgments reused and new; the LLM requests each
//! stage needed (first requests: repairs of unusable answers come on top); and the drift of
//! every exported run's paper measures on the questions both exports kept, old run and qrels
//! against new (`crate::eval::evaluate`, the numbers `freshstack eval` prints).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::orchestrator::{Builder, StageOutcome, layout, read_by_query};
use super::refresh::{Carry, DocState, judge_topic, read_doc_states};
use crate::dataset::{
    Fingerprint, JudgmentRecord, NuggetQrels, NuggetsRecord, PoolRow, QueryId, Question, Run,
    read_jsonl, write_json_atomic,
};
use crate::error::{Error, Result};
use crate::eval::{EvalConfig, Judgments, evaluate, py_round};
use crate::progress::Progress;

/// Version of the `changes.json` layout.
pub const CHANGES_FORMAT: u32 = 1;

/// The whole of `changes.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Changes {
    /// [`CHANGES_FORMAT`].
    pub format: u32,
    /// `[refresh] retire_before`, when set.
    pub retire_before: Option<String>,
    /// Questions, by id.
    pub questions: QuestionChanges,
    /// Documents and files per repository (`owner/name`).
    pub repositories: BTreeMap<String, RepositoryChanges>,
    /// Judgment rows (one per question, nugget and document).
    pub judgments: JudgmentChanges,
    /// What each LLM stage carried over and asked.
    pub llm: LlmChanges,
    /// The exported runs' measures, old and new, on the questions both exports kept.
    pub drift: Drift,
}

/// Imported questions (`work/questions.jsonl`, before filtering) old against new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuestionChanges {
    /// In the new build only (a newer dump's questions).
    pub added: Vec<String>,
    /// In the old build only (before `retire_before`, or gone from the dump).
    pub retired: Vec<String>,
    /// In both.
    pub kept: usize,
    /// Kept, with a changed title, body or accepted answer (their LLM results were redone).
    pub changed: Vec<String>,
}

/// Old against new corpus of one repository.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RepositoryChanges {
    /// Documents by id: added, removed, changed (same id, other text), unchanged.
    pub documents: Counts,
    /// Files by path (the set of their documents' ids and texts).
    pub files: Counts,
}

/// Added / removed / changed / unchanged counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// New only.
    pub added: usize,
    /// Old only.
    pub removed: usize,
    /// In both, different.
    pub changed: usize,
    /// In both, the same.
    pub unchanged: usize,
}

/// The new build's judgment rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JudgmentChanges {
    /// Carried over from the old build.
    pub reused: u64,
    /// Asked of the judge.
    pub new: u64,
}

/// Per LLM stage: items carried over and requests sent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LlmChanges {
    /// Nuggets: questions.
    pub nuggets: StageRequests,
    /// Query variants: questions.
    pub variants: StageRequests,
    /// Judging: (question, document) pairs carried, batches requested.
    pub judge: StageRequests,
}

/// One LLM stage's share.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageRequests {
    /// Items whose old result was carried over.
    pub carried: u64,
    /// Requests the stage sent (one per question, or per judge batch; repairs not counted).
    pub requests: u64,
}

/// The drift of the exported runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// Questions in both exports (`queries.jsonl`), the ones scored.
    pub questions: usize,
    /// One row per run of either export, by name.
    pub runs: Vec<RunDrift>,
}

/// One run's measures, old and new.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDrift {
    /// `{setting}.{technique}.{retriever}`.
    pub run: String,
    /// The old run on the old qrels (absent when the old build has no such run).
    pub old: Option<Scores>,
    /// The new run on the new qrels.
    pub new: Option<Scores>,
    /// New minus old (4 decimals), when both exist.
    pub delta: Option<Scores>,
}

/// The paper's three measures.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Scores {
    /// alpha-nDCG@10.
    #[serde(rename = "alpha_ndcg@10")]
    pub alpha_ndcg_10: f64,
    /// Coverage@20.
    #[serde(rename = "coverage@20")]
    pub coverage_20: f64,
    /// Recall@50.
    #[serde(rename = "recall@50")]
    pub recall_50: f64,
}

impl Scores {
    /// The three values in the paper's order.
    pub fn values(&self) -> [f64; 3] {
        [self.alpha_ndcg_10, self.coverage_20, self.recall_50]
    }
}

impl Builder<'_> {
    /// Writes `changes.json` (it always runs: it is cheap, and its inputs are both builds).
    pub(super) fn changes(
        &mut self,
        carry: &Carry,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let start = Instant::now();
        progress.begin("changes", None);
        let changes = self.compute_changes(carry);
        progress.finish();
        let changes = changes?;
        write_json_atomic(self.path(layout::CHANGES), &changes)?;
        let q = &changes.questions;
        let outcome = StageOutcome {
            stage: "changes",
            ran: true,
            elapsed: start.elapsed(),
            detail: format!(
                "questions: {} added, {} retired, {} kept ({} changed); judgments: {} reused, {} \
                 new; LLM requests: nuggets {}, variants {}, judge {}",
                q.added.len(),
                q.retired.len(),
                q.kept,
                q.changed.len(),
                changes.judgments.reused,
                changes.judgments.new,
                changes.llm.nuggets.requests,
                changes.llm.variants.requests,
                changes.llm.judge.requests
            ),
        };
        on_stage(&outcome);
        self.stages.push(outcome);
        Ok(())
    }

    fn compute_changes(&self, carry: &Carry) -> Result<Changes> {
        let questions: Vec<Question> = read_jsonl(self.path(layout::QUESTIONS))?;
        let nuggets: BTreeMap<QueryId, NuggetsRecord> =
            read_by_query(&self.path(layout::NUGGETS), |r: &NuggetsRecord| &r.query_id)?;
        let documents = read_doc_states(&self.path(layout::CORPUS))?;
        let mut llm = LlmChanges::default();
        for q in &questions {
            let (stage, carried) = (&mut llm.nuggets, carry.nuggets(q).is_some());
            count(stage, carried);
            count(&mut llm.variants, carry.variants(q).is_some());
        }
        // The judge's plan, as `judge_carrying` makes it: per question with nuggets, its pool
        // documents without carried judgments, in batches of `docs_per_call`.
        let by_id: BTreeMap<&QueryId, &Question> =
            questions.iter().map(|q| (&q.query_id, q)).collect();
        let per_call = self.config.judge.docs_per_call.max(1);
        let mut carried_pairs: HashSet<(QueryId, String)> = HashSet::new();
        let mut pools: BTreeMap<QueryId, Vec<String>> = BTreeMap::new();
        for row in read_jsonl::<PoolRow>(self.path(layout::POOL))? {
            let docs = pools.entry(row.query_id).or_default();
            for id in row.doc_ids {
                if !docs.contains(&id) {
                    docs.push(id);
                }
            }
        }
        for (qid, doc_ids) in &pools {
            let (Some(question), Some(record)) = (by_id.get(qid), nuggets.get(qid)) else {
                continue;
            };
            if record.nuggets.is_empty() {
                continue;
            }
            let topic = judge_topic(question, &record.nuggets);
            let mut asked = 0u64;
            for id in doc_ids {
                let Some(doc) = documents.get(id) else {
                    continue;
                };
                if carry.judged(qid, &topic, id, &doc.text).is_some() {
                    carried_pairs.insert((qid.clone(), id.clone()));
                    llm.judge.carried += 1;
                } else {
                    asked += 1;
                }
            }
            llm.judge.requests += asked.div_ceil(per_call as u64);
        }
        let mut judgments = JudgmentChanges::default();
        for row in read_jsonl::<JudgmentRecord>(self.path(layout::JUDGMENTS))? {
            if carried_pairs.contains(&(row.query_id.clone(), row.doc_id.clone())) {
                judgments.reused += 1;
            } else {
                judgments.new += 1;
            }
        }
        Ok(Changes {
            format: CHANGES_FORMAT,
            retire_before: self
                .config
                .refresh
                .as_ref()
                .and_then(|r| r.retire_before.as_ref())
                .map(ToString::to_string),
            questions: question_changes(&carry.questions, &questions),
            repositories: repository_changes(&carry.documents, &documents),
            judgments,
            llm,
            drift: drift(&carry.from, &self.out)?,
        })
    }
}

fn count(stage: &mut StageRequests, carried: bool) {
    if carried {
        stage.carried += 1;
    } else {
        stage.requests += 1;
    }
}

fn question_changes(old: &BTreeMap<QueryId, Question>, new: &[Question]) -> QuestionChanges {
    let new_ids: BTreeSet<&QueryId> = new.iter().map(|q| &q.query_id).collect();
    let mut changes = QuestionChanges {
        added: Vec::new(),
        retired: old
            .keys()
            .filter(|id| !new_ids.contains(id))
            .map(|id| id.to_string())
            .collect(),
        kept: 0,
        changed: Vec::new(),
    };
    let mut sorted: Vec<&Question> = new.iter().collect();
    sorted.sort_by(|a, b| a.query_id.cmp(&b.query_id));
    for q in sorted {
        match old.get(&q.query_id) {
            None => changes.added.push(q.query_id.to_string()),
            Some(o) => {
                changes.kept += 1;
                if o.query_title != q.query_title
                    || o.query_text != q.query_text
                    || o.answer_text != q.answer_text
                {
                    changes.changed.push(q.query_id.to_string());
                }
            }
        }
    }
    changes
}

fn repository_changes(
    old: &BTreeMap<String, DocState>,
    new: &BTreeMap<String, DocState>,
) -> BTreeMap<String, RepositoryChanges> {
    let mut repos: BTreeMap<String, RepositoryChanges> = BTreeMap::new();
    // (repo, path) -> the (id, text) set of its documents, old and new.
    type FileDocs<'a> = BTreeMap<(&'a str, &'a str), BTreeSet<(&'a str, Fingerprint)>>;
    let mut old_files: FileDocs = BTreeMap::new();
    let mut new_files: FileDocs = BTreeMap::new();
    for (id, doc) in old {
        old_files
            .entry((&doc.repo, &doc.path))
            .or_default()
            .insert((id, doc.text));
        let docs = &mut repos.entry(doc.repo.clone()).or_default().documents;
        match new.get(id) {
            None => docs.removed += 1,
            Some(n) if n.text != doc.text => docs.changed += 1,
            Some(_) => docs.unchanged += 1,
        }
    }
    for (id, doc) in new {
        new_files
            .entry((&doc.repo, &doc.path))
            .or_default()
            .insert((id, doc.text));
        if !old.contains_key(id) {
            repos.entry(doc.repo.clone()).or_default().documents.added += 1;
        }
    }
    for (&(repo, path), docs) in &old_files {
        let files = &mut repos.entry(repo.to_string()).or_default().files;
        match new_files.get(&(repo, path)) {
            None => files.removed += 1,
            Some(n) if n != docs => files.changed += 1,
            Some(_) => files.unchanged += 1,
        }
    }
    for (repo, path) in new_files.keys() {
        if !old_files.contains_key(&(repo, path)) {
            repos.entry(repo.to_string()).or_default().files.added += 1;
        }
    }
    repos
}

/// Every exported run of either build scored on the questions both exports kept: the old run
/// against the old qrels, the new against the new.
fn drift(old_dir: &Path, new_dir: &Path) -> Result<Drift> {
    let old_queries: Vec<Question> = read_jsonl(old_dir.join("queries.jsonl"))?;
    let new_queries: Vec<Question> = read_jsonl(new_dir.join("queries.jsonl"))?;
    let old_ids: HashSet<&QueryId> = old_queries.iter().map(|q| &q.query_id).collect();
    let kept: HashSet<QueryId> = new_queries
        .iter()
        .map(|q| &q.query_id)
        .filter(|id| old_ids.contains(id))
        .cloned()
        .collect();
    let judgments = |queries: &[Question]| {
        let kept_rows: Vec<Question> = queries
            .iter()
            .filter(|q| kept.contains(&q.query_id))
            .cloned()
            .collect();
        Judgments::new(&NuggetQrels::from_queries(&kept_rows))
    };
    let (old_judgments, new_judgments) = (judgments(&old_queries), judgments(&new_queries));
    let old_runs = run_files(&old_dir.join("runs"))?;
    let new_runs = run_files(&new_dir.join("runs"))?;
    let names: BTreeSet<&String> = old_runs.iter().chain(&new_runs).collect();
    let config = EvalConfig::paper();
    let score = |dir: &Path, name: &str, runs: &[String], judgments: &Judgments| {
        if !runs.iter().any(|r| r == name) || judgments.is_empty() {
            return Ok(None);
        }
        let run = Run::read_trec(dir.join("runs").join(format!("{name}.trec")))?;
        let means = evaluate(judgments, &run, &config).means;
        Ok::<_, Error>(Some(Scores {
            alpha_ndcg_10: means[0],
            coverage_20: means[1],
            recall_50: means[2],
        }))
    };
    let mut runs = Vec::with_capacity(names.len());
    for name in names {
        let old = score(old_dir, name, &old_runs, &old_judgments)?;
        let new = score(new_dir, name, &new_runs, &new_judgments)?;
        let delta = old.zip(new).map(|(o, n)| Scores {
            alpha_ndcg_10: py_round(n.alpha_ndcg_10 - o.alpha_ndcg_10, 4),
            coverage_20: py_round(n.coverage_20 - o.coverage_20, 4),
            recall_50: py_round(n.recall_50 - o.recall_50, 4),
        });
        runs.push(RunDrift {
            run: name.clone(),
            old,
            new,
            delta,
        });
    }
    Ok(Drift {
        questions: kept.len(),
        runs,
    })
}

/// The run names (file stems) of `dir/*.trec`, sorted; none when `dir` is absent.
fn run_files(dir: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let entry = entry.map_err(|e| Error::io(dir, e))?;
                let name = entry.file_name().to_string_lossy().into_owned();
                if let Some(stem) = name.strip_suffix(".trec") {
                    names.push(stem.to_string());
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(dir, e)),
    }
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(repo: &str, path: &str, text: &str) -> DocState {
        DocState {
            repo: repo.into(),
            path: path.into(),
            text: Fingerprint::of_bytes(text.as_bytes()),
        }
    }

    #[test]
    fn documents_and_files_are_counted_per_repository() {
        let old: BTreeMap<String, DocState> = [
            ("r/a_0_1", doc("r", "a", "x")),
            ("r/a_1_2", doc("r", "a", "y")),
            ("r/b_0_1", doc("r", "b", "z")),
            ("r/c_0_1", doc("r", "c", "w")),
        ]
        .into_iter()
        .map(|(id, d)| (id.to_string(), d))
        .collect();
        let new: BTreeMap<String, DocState> = [
            ("r/a_0_1", doc("r", "a", "x")),
            ("r/a_1_2", doc("r", "a", "Y")),
            ("r/c_0_1", doc("r", "c", "w")),
            ("r/d_0_1", doc("r", "d", "v")),
        ]
        .into_iter()
        .map(|(id, d)| (id.to_string(), d))
        .collect();
        let changes = &repository_changes(&old, &new)["r"];
        let counts = |a, r, c, u| Counts {
            added: a,
            removed: r,
            changed: c,
            unchanged: u,
        };
        assert_eq!(changes.documents, counts(1, 1, 1, 2));
        assert_eq!(changes.files, counts(1, 1, 1, 1));
    }
}
