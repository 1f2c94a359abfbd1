//! `import`: the questions stage (paper §3.1). Two streaming passes over the dump:
//!
//! 1. questions: keep those matching the tags, the day range and the score floor that have an
//!    accepted answer (or any answer with `allow_unaccepted`); remember the wanted answer ids;
//! 2. answers: pick up exactly the wanted ones (the accepted answer by id, never by score; the
//!    top-scored answer only for questions without an accepted one, when allowed).
//!
//! Rows may come in any order (answers before their question): the second pass makes that
//! irrelevant, and memory holds only the selected questions and answers, never the dump.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::html::html_to_markdown;
use super::input::detect_compression;
use super::reader::{DEFAULT_MAX_EVENT_BYTES, Field, scan_posts};
use super::tags::{DayRange, TagFilter, file_len, parse_tags};
use crate::dataset::{AtomicWriter, Question, QuestionMetadata, write_json_atomic};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// Where question URLs point by default.
pub const DEFAULT_SITE_URL: &str = "https://stackoverflow.com";

/// Settings of the import.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImportConfig {
    /// Which questions are on topic.
    pub filter: TagFilter,
    /// Days (of the question's creation) kept.
    pub range: DayRange,
    /// Questions scoring below this are dropped.
    pub min_score: Option<i64>,
    /// Without an accepted answer, take the top-scored answer instead of dropping the question.
    pub allow_unaccepted: bool,
    /// Base of question URLs (`{site_url}/q/{id}`); other Stack Exchange sites differ.
    pub site_url: String,
    /// Bound on any one XML event of the dump (a row with its attributes, a text node, a
    /// comment); longer is an error, so a corrupt or hostile dump cannot exhaust memory.
    #[serde(default = "default_max_event_bytes")]
    pub max_event_bytes: u64,
}

fn default_max_event_bytes() -> u64 {
    DEFAULT_MAX_EVENT_BYTES
}

/// Why a row was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// A row without a required attribute (Id, PostTypeId; questions: CreationDate, Title, Body,
    /// Tags, Score; answers: ParentId, Body, Score), or with an unparsable one.
    MalformedRow,
    /// An on-topic question created outside the day range.
    OutOfRange,
    /// An on-topic question scoring below `min_score`.
    BelowMinScore,
    /// An on-topic question without an accepted answer.
    NoAcceptedAnswer,
    /// With `allow_unaccepted`: an on-topic question without any answer in the dump.
    NoAnswer,
    /// The accepted answer is not in the dump (deleted) or is malformed.
    AnswerMissing,
}

impl DropReason {
    /// Every reason, in summary order.
    pub const ALL: [DropReason; 6] = [
        DropReason::MalformedRow,
        DropReason::OutOfRange,
        DropReason::BelowMinScore,
        DropReason::NoAcceptedAnswer,
        DropReason::NoAnswer,
        DropReason::AnswerMissing,
    ];

    /// The snake_case name used in summaries.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::MalformedRow => "malformed_row",
            DropReason::OutOfRange => "out_of_range",
            DropReason::BelowMinScore => "below_min_score",
            DropReason::NoAcceptedAnswer => "no_accepted_answer",
            DropReason::NoAnswer => "no_answer",
            DropReason::AnswerMissing => "answer_missing",
        }
    }
}

/// What the import read, kept and dropped: printed by the CLI and written by `--summary`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ImportSummary {
    /// The dump.
    pub posts: PathBuf,
    /// Its compression.
    pub compression: String,
    /// Bytes of decompressed XML in one pass.
    pub xml_bytes: u64,
    /// `<row>`s in the dump.
    pub rows_read: u64,
    /// Questions (PostTypeId 1).
    pub questions_read: u64,
    /// Answers (PostTypeId 2).
    pub answers_read: u64,
    /// Other post types (tag wikis, excerpts, ...), ignored.
    pub other_rows: u64,
    /// Well-formed questions matching the tag filter.
    pub questions_on_topic: u64,
    /// Questions written.
    pub kept: u64,
    /// Rows dropped, by reason (malformed rows of any type; on-topic questions otherwise).
    pub dropped: BTreeMap<DropReason, u64>,
    /// Passes over the dump (1 when no answer was wanted).
    pub passes: u32,
    /// The settings used, for reproducibility.
    pub config: Option<ImportConfig>,
}

impl ImportSummary {
    fn drop_row(&mut self, reason: DropReason) {
        *self.dropped.entry(reason).or_default() += 1;
    }
}

/// A selected question waiting for its answer.
struct Pending {
    title: String,
    text: String,
    date: String,
    tags: Vec<String>,
    score: i64,
    license: Option<String>,
    accepted: Option<u64>,
    /// The answer found: id, score, body HTML (converted when written).
    answer: Option<(u64, i64, String)>,
}

/// Imports the questions of the dump at `posts` into `out` (JSONL, reference query schema,
/// sorted by question id, written atomically; `-` is standard output) and returns the summary.
pub fn import_questions(
    posts: &Path,
    config: &ImportConfig,
    out: &Path,
    progress: &dyn Progress,
) -> Result<ImportSummary> {
    if !crate::dataset::is_web_url(&config.site_url) {
        return Err(Error::invalid(
            Setting::SiteUrl,
            format!(
                "{:?} is not an http:// or https:// URL (question URLs become links)",
                config.site_url
            ),
        ));
    }
    let compression = detect_compression(posts)?;
    let mut writer = AtomicWriter::create_or_stdout(out)?;
    let mut summary = ImportSummary {
        posts: posts.to_path_buf(),
        compression: compression.name().to_string(),
        passes: 1,
        config: Some(config.clone()),
        ..Default::default()
    };
    let site = config.site_url.trim_end_matches('/');
    let mut pending: BTreeMap<u64, Pending> = BTreeMap::new();
    // Accepted answer id -> question id.
    let mut wanted: HashMap<u64, u64> = HashMap::new();

    progress.begin("pass 1/2: questions", file_len(posts));
    let stats = scan_posts(posts, config.max_event_bytes, progress, |row| {
        summary.rows_read += 1;
        let (Some(id), Some(kind)) = (row.id(Field::Id), row.number(Field::PostTypeId)) else {
            summary.drop_row(DropReason::MalformedRow);
            return Ok(());
        };
        match kind {
            1 => summary.questions_read += 1,
            2 => {
                summary.answers_read += 1;
                // Checked here so the count does not depend on whether pass 2 runs.
                let well_formed = row.id(Field::ParentId).is_some()
                    && row.number(Field::Score).is_some()
                    && row.has(Field::Body);
                if !well_formed {
                    summary.drop_row(DropReason::MalformedRow);
                }
                return Ok(());
            }
            _ => {
                summary.other_rows += 1;
                return Ok(());
            }
        }
        let (Some(day), Some(score), true, true) = (
            row.date(),
            row.number(Field::Score),
            row.has(Field::Title),
            row.has(Field::Body),
        ) else {
            summary.drop_row(DropReason::MalformedRow);
            return Ok(());
        };
        let accepted = match row.raw(Field::AcceptedAnswerId) {
            None => None,
            Some(_) => match row.id(Field::AcceptedAnswerId) {
                Some(id) => Some(id),
                None => {
                    summary.drop_row(DropReason::MalformedRow);
                    return Ok(());
                }
            },
        };
        let Some(tags_text) = row.text(Field::Tags)? else {
            summary.drop_row(DropReason::MalformedRow);
            return Ok(());
        };
        let tags = parse_tags(&tags_text);
        if !config.filter.matches(&tags) {
            return Ok(());
        }
        summary.questions_on_topic += 1;
        if !config.range.contains(day) {
            summary.drop_row(DropReason::OutOfRange);
            return Ok(());
        }
        if config.min_score.is_some_and(|min| score < min) {
            summary.drop_row(DropReason::BelowMinScore);
            return Ok(());
        }
        if accepted.is_none() && !config.allow_unaccepted {
            summary.drop_row(DropReason::NoAcceptedAnswer);
            return Ok(());
        }
        let title = row.text(Field::Title)?.unwrap_or_default();
        let body = row.text(Field::Body)?.unwrap_or_default();
        let date = row.text(Field::CreationDate)?.unwrap_or_default();
        let license = row.text(Field::ContentLicense)?.map(|l| l.into_owned());
        if let Some(answer) = accepted {
            wanted.insert(answer, id);
        }
        pending.insert(
            id,
            Pending {
                title: title.trim().to_string(),
                text: html_to_markdown(&body),
                date: date.into_owned(),
                tags: tags.iter().map(|t| t.to_string()).collect(),
                score,
                license,
                accepted,
                answer: None,
            },
        );
        Ok(())
    })?;
    progress.finish();
    summary.xml_bytes = stats.bytes;

    if !pending.is_empty() {
        summary.passes = 2;
        progress.begin("pass 2/2: answers", file_len(posts));
        scan_posts(posts, config.max_event_bytes, progress, |row| {
            if row.number(Field::PostTypeId) != Some(2) {
                return Ok(());
            }
            let (Some(id), Some(parent), Some(score), true) = (
                row.id(Field::Id),
                row.id(Field::ParentId),
                row.number(Field::Score),
                row.has(Field::Body),
            ) else {
                // Counted in pass 1.
                return Ok(());
            };
            let question_id = match wanted.get(&id) {
                Some(&question) => question,
                None => parent,
            };
            let Some(question) = pending.get_mut(&question_id) else {
                return Ok(());
            };
            let better = match (question.accepted, &question.answer) {
                // The accepted answer, by id: whatever its score.
                (Some(accepted), _) => accepted == id,
                // No accepted answer: the top score; ties go to the older (smaller) id.
                (None, None) => true,
                (None, Some((best_id, best_score, _))) => {
                    score > *best_score || (score == *best_score && id < *best_id)
                }
            };
            if better {
                let body = row.text(Field::Body)?.unwrap_or_default().into_owned();
                question.answer = Some((id, score, body));
            }
            Ok(())
        })?;
        progress.finish();
    }

    for (id, question) in pending {
        let Some((answer_id, answer_score, answer_body)) = question.answer else {
            summary.drop_row(if question.accepted.is_some() {
                DropReason::AnswerMissing
            } else {
                DropReason::NoAnswer
            });
            continue;
        };
        let row = Question {
            query_id: id.to_string().into(),
            query_title: question.title,
            query_text: question.text,
            answer_id: answer_id.to_string(),
            answer_text: html_to_markdown(&answer_body),
            metadata: QuestionMetadata {
                date: question.date,
                tags: question.tags,
                score: Some(question.score),
                answer_score: Some(answer_score),
                url: Some(format!("{site}/q/{id}")),
                license: question.license,
            },
            nuggets: Vec::new(),
        };
        writer.write_json_line(&row)?;
        summary.kept += 1;
    }
    writer.commit()?;
    Ok(summary)
}

/// Writes the summary as pretty JSON, atomically.
pub fn write_import_summary(summary: &ImportSummary, path: &Path) -> Result<()> {
    write_json_atomic(path, summary)
}
