//! Tags: both dump formats, the tag filter, and the two reports that choose a topic (paper §3.1)
//! and the repositories for it (§3.2): co-occurring tags and recent tags.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::reader::{DEFAULT_MAX_EVENT_BYTES, Field, PostRow, scan_posts};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// Splits a `Tags` attribute in either dump format: `<php><laravel>` (older dumps) or
/// `|php|laravel|` (newer dumps). Empty names are dropped.
pub fn parse_tags(tags: &str) -> Vec<&str> {
    let tags = tags.trim();
    if tags.starts_with('<') {
        tags.split(['<', '>']).filter(|t| !t.is_empty()).collect()
    } else {
        tags.split('|').filter(|t| !t.is_empty()).collect()
    }
}

/// How several `--tag`s combine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TagMatch {
    /// A question with at least one of the tags.
    #[default]
    Any,
    /// A question with every tag.
    All,
}

impl std::str::FromStr for TagMatch {
    type Err = Error;

    /// Parses `any` or `all`.
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "any" => Ok(TagMatch::Any),
            "all" => Ok(TagMatch::All),
            _ => Err(Error::invalid(
                Setting::TagMatch,
                format!("{s:?}: expected any or all"),
            )),
        }
    }
}

impl std::fmt::Display for TagMatch {
    /// `any` or `all`, as the flag and the config write it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TagMatch::Any => "any",
            TagMatch::All => "all",
        })
    }
}

/// The topic filter: tags (compared case-insensitively) and how they combine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TagFilter {
    /// Lowercase tag names.
    pub tags: Vec<String>,
    /// Any or all of them.
    pub mode: TagMatch,
}

impl TagFilter {
    /// A filter on `tags`; at least one non-empty tag is required.
    pub fn new(tags: &[String], mode: TagMatch) -> Result<Self> {
        let mut tags: Vec<String> = tags
            .iter()
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        tags.sort();
        tags.dedup();
        if tags.is_empty() {
            return Err(Error::invalid(Setting::Tag, "at least one tag is required"));
        }
        Ok(Self { tags, mode })
    }

    /// True when the question's tags satisfy the filter.
    pub fn matches(&self, question_tags: &[&str]) -> bool {
        let has = |wanted: &String| question_tags.iter().any(|t| t.eq_ignore_ascii_case(wanted));
        match self.mode {
            TagMatch::Any => self.tags.iter().any(has),
            TagMatch::All => self.tags.iter().all(has),
        }
    }
}

/// A day, `YYYY-MM-DD`: four digits, a dash, two digits, a dash, two digits (the shape only, as
/// the dumps write their dates; not checked against a calendar). Days compare as text, which
/// orders ISO dates. Parsed once ([`FromStr`](std::str::FromStr), [`parse_day`]); serialised as
/// the plain string.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Day(String);

impl Day {
    /// The day as written, `YYYY-MM-DD`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Day {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for Day {
    type Err = Error;

    /// Parses `YYYY-MM-DD`; an error names the setting `day`.
    fn from_str(text: &str) -> Result<Self> {
        parse_day(Setting::Day, text)
    }
}

impl TryFrom<String> for Day {
    type Error = Error;

    fn try_from(text: String) -> Result<Self> {
        text.parse()
    }
}

impl From<Day> for String {
    fn from(day: Day) -> Self {
        day.0
    }
}

/// Checks a day (`YYYY-MM-DD`); errors name `setting` (`since`, `until`, or a config key).
pub fn parse_day(setting: Setting, value: &str) -> Result<Day> {
    let bytes = value.as_bytes();
    let ok = bytes.len() == 10
        && bytes.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        });
    if !ok {
        return Err(Error::invalid(
            setting,
            format!("{value:?}: expected YYYY-MM-DD"),
        ));
    }
    let number = |range: std::ops::Range<usize>| -> u32 {
        // ASCII digits, checked above.
        value[range].parse().unwrap_or(0)
    };
    let (year, month, day) = (number(0..4), number(5..7), number(8..10));
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(Error::invalid(
            setting,
            format!("{value:?} is not a day of the calendar"),
        ));
    }
    Ok(Day(value.to_string()))
}

/// Days of `month` (1-12) in `year`, Gregorian.
fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// An inclusive range of days.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayRange {
    /// First day kept.
    pub since: Option<Day>,
    /// Last day kept.
    pub until: Option<Day>,
}

impl DayRange {
    /// The range from `since` to `until`; `since` after `until` is an error naming the setting
    /// `day range`.
    pub fn new(since: Option<Day>, until: Option<Day>) -> Result<Self> {
        if let (Some(s), Some(u)) = (&since, &until)
            && s > u
        {
            return Err(Error::invalid(
                Setting::DayRange,
                format!("{s} is after {u}"),
            ));
        }
        Ok(Self { since, until })
    }

    /// True when `day` (`YYYY-MM-DD`) is within the range.
    pub fn contains(&self, day: &str) -> bool {
        self.since.as_ref().is_none_or(|s| day >= s.as_str())
            && self.until.as_ref().is_none_or(|u| day <= u.as_str())
    }
}

/// A question row's tags, decoded; `None` when the row is not a well-formed question.
fn question_tags(row: &PostRow<'_>) -> Result<Option<String>> {
    if row.id(Field::Id).is_none() || row.date().is_none() {
        return Ok(None);
    }
    Ok(row.text(Field::Tags)?.map(|t| t.into_owned()))
}

/// One tag that co-occurs with the topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagCount {
    /// The co-occurring tag, as the dump writes it.
    pub tag: String,
    /// Topic questions carrying it.
    pub questions: u64,
    /// `questions` / topic questions.
    pub share: f64,
}

/// Tags that co-occur with a topic tag: the signal for which repositories to collect (§3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TagReport {
    /// The topic tag.
    pub topic: String,
    /// Days considered.
    pub range: DayRange,
    /// Questions read in the dump.
    pub questions_read: u64,
    /// Question rows skipped for lack of Id, date or tags.
    pub malformed_questions: u64,
    /// Questions carrying the topic tag in the range.
    pub topic_questions: u64,
    /// Co-occurring tags by count (descending), then name; at most `top`.
    pub tags: Vec<TagCount>,
}

/// Counts the tags co-occurring with `topic` over the questions of the dump at `posts`.
pub fn tag_cooccurrence(
    posts: &Path,
    topic: &str,
    range: &DayRange,
    top: usize,
    progress: &dyn Progress,
) -> Result<TagReport> {
    let topic = topic.trim().to_ascii_lowercase();
    if topic.is_empty() {
        return Err(Error::invalid(Setting::Tag, "a topic tag is required"));
    }
    let mut counts: HashMap<String, u64> = HashMap::new();
    let (mut questions_read, mut malformed, mut topic_questions) = (0u64, 0u64, 0u64);
    progress.begin("scanning posts", file_len(posts));
    scan_posts(posts, DEFAULT_MAX_EVENT_BYTES, progress, |row| {
        if row.number(Field::PostTypeId) != Some(1) {
            return Ok(());
        }
        questions_read += 1;
        let Some(tags) = question_tags(row)? else {
            malformed += 1;
            return Ok(());
        };
        let tags = parse_tags(&tags);
        if !tags.iter().any(|t| t.eq_ignore_ascii_case(&topic)) {
            return Ok(());
        }
        if !row.date().is_some_and(|d| range.contains(d)) {
            return Ok(());
        }
        topic_questions += 1;
        for tag in tags {
            if !tag.eq_ignore_ascii_case(&topic) {
                match counts.get_mut(tag) {
                    Some(n) => *n += 1,
                    None => {
                        counts.insert(tag.to_string(), 1);
                    }
                }
            }
        }
        Ok(())
    })?;
    progress.finish();
    let tags = ranked(counts, top)
        .into_iter()
        .map(|(tag, questions)| TagCount {
            tag,
            questions,
            share: if topic_questions == 0 {
                0.0
            } else {
                questions as f64 / topic_questions as f64
            },
        })
        .collect();
    Ok(TagReport {
        topic,
        range: range.clone(),
        questions_read,
        malformed_questions: malformed,
        topic_questions,
        tags,
    })
}

/// A candidate topic: a tag first used after the cut-off date.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicCandidate {
    /// The candidate topic's tag, as the dump writes it.
    pub tag: String,
    /// Questions carrying it (all of them are after the cut-off).
    pub questions: u64,
    /// Day of its first question.
    pub first_question: String,
}

/// Tags whose first question is on or after `since`, with enough questions: how the paper picks
/// "niche and recent" topics (§3.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicReport {
    /// The cut-off day.
    pub since: String,
    /// Minimum number of questions.
    pub min_questions: u64,
    /// Question rows of the dump read (every tag, every day), malformed ones included.
    pub questions_read: u64,
    /// Question rows skipped for lack of Id, date or tags.
    pub malformed_questions: u64,
    /// Distinct tags seen.
    pub tags_seen: u64,
    /// The candidates, by questions (descending), then name; at most `top`.
    pub topics: Vec<TopicCandidate>,
}

/// Finds tags first used on or after `since` with at least `min_questions` questions. Memory
/// grows with the number of distinct tags (about 65k on stackoverflow.com), not with the dump.
pub fn recent_topics(
    posts: &Path,
    since: &Day,
    min_questions: u64,
    top: usize,
    progress: &dyn Progress,
) -> Result<TopicReport> {
    // Per tag: questions and the earliest day ([u8; 10] keeps it allocation-free).
    let mut stats: HashMap<String, (u64, [u8; 10])> = HashMap::new();
    let (mut questions_read, mut malformed) = (0u64, 0u64);
    progress.begin("scanning posts", file_len(posts));
    scan_posts(posts, DEFAULT_MAX_EVENT_BYTES, progress, |row| {
        if row.number(Field::PostTypeId) != Some(1) {
            return Ok(());
        }
        questions_read += 1;
        let Some(tags) = question_tags(row)? else {
            malformed += 1;
            return Ok(());
        };
        let Some(day) = row
            .date()
            .and_then(|d| <[u8; 10]>::try_from(d.as_bytes()).ok())
        else {
            malformed += 1;
            return Ok(());
        };
        for tag in parse_tags(&tags) {
            match stats.get_mut(tag) {
                Some((n, first)) => {
                    *n += 1;
                    if day < *first {
                        *first = day;
                    }
                }
                None => {
                    stats.insert(tag.to_string(), (1, day));
                }
            }
        }
        Ok(())
    })?;
    progress.finish();
    let tags_seen = stats.len() as u64;
    let mut topics: Vec<TopicCandidate> = stats
        .into_iter()
        .filter(|(_, (n, first))| {
            *n >= min_questions && first.as_slice() >= since.as_str().as_bytes()
        })
        .map(|(tag, (questions, first))| TopicCandidate {
            tag,
            questions,
            first_question: String::from_utf8_lossy(&first).into_owned(),
        })
        .collect();
    topics.sort_by(|a, b| {
        b.questions
            .cmp(&a.questions)
            .then_with(|| a.tag.cmp(&b.tag))
    });
    topics.truncate(top);
    Ok(TopicReport {
        since: since.to_string(),
        min_questions,
        questions_read,
        malformed_questions: malformed,
        tags_seen,
        topics,
    })
}

/// Sorts counts descending, ties by name, keeps `top`.
fn ranked(counts: HashMap<String, u64>, top: usize) -> Vec<(String, u64)> {
    let mut ranked: Vec<(String, u64)> = counts.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    ranked.truncate(top);
    ranked
}

/// The file's size in bytes for progress (compressed bytes are what progress counts).
pub(crate) fn file_len(path: &Path) -> Option<u64> {
    std::fs::metadata(path).ok().map(|m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn both_tag_formats() {
        assert_eq!(parse_tags("<php><laravel-10>"), vec!["php", "laravel-10"]);
        assert_eq!(parse_tags("|php|laravel-10|"), vec!["php", "laravel-10"]);
        assert_eq!(parse_tags("|c++|"), vec!["c++"]);
        assert!(parse_tags("").is_empty());
    }

    #[test]
    fn filter_any_all() {
        let any = TagFilter::new(&["Laravel".into(), "php".into()], TagMatch::Any).unwrap();
        let all = TagFilter::new(&["laravel".into(), "php".into()], TagMatch::All).unwrap();
        assert!(any.matches(&["laravel"]));
        assert!(!all.matches(&["laravel"]));
        assert!(all.matches(&["php", "LARAVEL"]));
        assert!(TagFilter::new(&[" ".into()], TagMatch::Any).is_err());
        assert!(TagMatch::from_str("most").is_err());
    }

    #[test]
    fn day_range() {
        assert!(parse_day(Setting::Since, "2023-1-1").is_err());
        for impossible in [
            "2024-13-45",
            "2024-02-30",
            "2023-02-29",
            "2024-00-10",
            "2024-04-31",
        ] {
            let err = parse_day(Setting::Since, impossible)
                .unwrap_err()
                .to_string();
            assert!(err.contains("is not a day of the calendar"), "{err}");
        }
        for real in ["2024-02-29", "2000-02-29", "2024-12-31", "2024-01-01"] {
            assert!(parse_day(Setting::Since, real).is_ok(), "{real}");
        }
        assert!(parse_day(Setting::Since, "1900-02-29").is_err());
        assert!(Day::from_str("2023-01-0x").is_err());
        let (since, until): (Day, Day) =
            ("2023-01-01".parse().unwrap(), "2024-10-31".parse().unwrap());
        assert!(DayRange::new(Some(until.clone()), Some(since.clone())).is_err());
        let r = DayRange::new(Some(since), Some(until)).unwrap();
        assert!(r.contains("2023-01-01") && r.contains("2024-10-31"));
        assert!(!r.contains("2022-12-31") && !r.contains("2024-11-01"));
    }
}
