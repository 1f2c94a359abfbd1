//! The questions stage: a Stack Overflow dump filtered to the topic's questions with their
//! accepted answers (`source::stackoverflow`), or a questions file checked the way the LLM
//! stages read it, into `work/questions.jsonl`.

use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, StageOutcome, layout};
use crate::dataset::{AtomicWriter, Fingerprint, Question, read_jsonl, read_questions};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;
use crate::source::stackoverflow::{
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_SITE_URL, Day, ImportConfig, TagFilter, import_questions,
};

impl Builder<'_> {
    pub(super) fn questions(
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
            (None, Some(file)) => format!("file:{}", Fingerprint::of_file(file)?),
            (None, None) => return Err(Error::invalid(Setting::Questions, "no source")),
        };
        let mut fingerprint = stage_fingerprint("questions")
            .json("questions", q)
            .text("source", &source);
        // Only when set, so that builds without `[refresh]` keep their fingerprints.
        if let Some(refresh) = &self.config.refresh {
            fingerprint = fingerprint.json("refresh", refresh);
        }
        let fingerprint = fingerprint.finish();
        self.stage(
            "questions",
            fingerprint,
            &[layout::QUESTIONS],
            on_stage,
            |b| b.import_questions(progress),
        )
    }

    pub(super) fn import_questions(&mut self, progress: &dyn Progress) -> Result<String> {
        let q = &self.config.questions;
        let target = self.path(layout::QUESTIONS);
        let mut questions: Vec<Question> = match (&q.posts, &q.file) {
            (Some(posts), _) => {
                let mode = q.tag_match;
                let range = q.day_range()?;
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
                Setting::Questions,
                "no question matched (check tags, dates and the dump)",
            ));
        }
        let retire_before = self
            .config
            .refresh
            .as_ref()
            .and_then(|r| r.retire_before.as_ref())
            .map(Day::as_str);
        let retired = match retire_before {
            Some(day) => retire(&mut questions, day)?,
            None => 0,
        };
        if questions.is_empty() {
            return Err(Error::invalid(
                Setting::RefreshRetireBefore,
                format!(
                    "every question was created before {}",
                    retire_before.unwrap_or("")
                ),
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
        let retired = if retired > 0 {
            format!(", {retired} retired")
        } else {
            String::new()
        };
        Ok(format!(
            "{} questions ({total} matched{retired})",
            questions.len()
        ))
    }
}

/// Drops the questions created before `day` (`YYYY-MM-DD`, `[refresh] retire_before`) and
/// says how many. A question without a creation date cannot be placed in the window: an error
/// naming it.
fn retire(questions: &mut Vec<Question>, day: &str) -> Result<usize> {
    if let Some(undated) = questions.iter().find(|q| q.metadata.date.len() < 10) {
        return Err(Error::invalid(
            Setting::RefreshRetireBefore,
            format!(
                "question {} has no metadata.date (YYYY-MM-DD...) to compare with {day}",
                undated.query_id
            ),
        ));
    }
    let before = questions.len();
    questions.retain(|q| q.metadata.date.get(..10).is_some_and(|d| d >= day));
    Ok(before - questions.len())
}
