//! The corpus stage: the checkouts chunked into `work/corpus.jsonl` (`source`). It always
//! reruns (re-chunking is cheap and catches any edit in a checkout); unchanged checkouts give
//! the same bytes, so nothing downstream reruns.

use std::time::Instant;

use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, StageOutcome, layout};
use crate::error::Result;
use crate::progress::Progress;
use crate::source::{CorpusConfig, RepoSpec, build_corpus};

impl Builder<'_> {
    pub(super) fn corpus(
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
        corpus.tokenizer = c.tokenizer.clone();
        corpus.max_file_bytes = c.max_file_bytes;
        corpus.exclude = c.exclude.clone();
        // The build directory may lie inside a checkout: its files are never documents.
        corpus.outputs.push(self.out.clone());
        // The stage always runs: its fingerprint only says "the corpus stage"; the record is
        // for the outputs' fingerprints, to tell whether they changed.
        let fingerprint = stage_fingerprint("corpus").finish();
        let before = self.book.fresh("corpus", &fingerprint)?;
        let summary = build_corpus(&corpus, &self.path(layout::CORPUS), progress)?;
        let hashes = self
            .book
            .record("corpus", &fingerprint, &[layout::CORPUS])?;
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
}
