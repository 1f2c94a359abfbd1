//! `freshstack stackoverflow`: import questions from a dump, and the tag reports that choose a
//! topic and its repositories.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use freshstack::source::stackoverflow::{
    DEFAULT_MAX_EVENT_BYTES, DEFAULT_SITE_URL, Day, DayRange, DropReason, ImportConfig, TagFilter,
    TagMatch, detect_compression, import_questions, recent_topics, tag_cooccurrence,
    write_import_summary,
};

use super::progress::Bars;
use super::with_flags;
use freshstack::Setting;

/// Arguments of `freshstack stackoverflow`.
#[derive(Debug, Args)]
pub struct StackOverflowArgs {
    #[command(subcommand)]
    command: StackOverflowCommand,
}

#[derive(Debug, Subcommand)]
enum StackOverflowCommand {
    /// Import a topic's questions with their accepted answers (JSONL, reference query schema).
    Import(ImportArgs),
    /// Tags co-occurring with a topic tag: which repositories to collect (paper §3.2).
    Tags(TagsArgs),
    /// Tags first used after a date with enough questions: candidate topics (paper §3.1).
    Topics(TopicsArgs),
}

#[derive(Debug, Args)]
struct ImportArgs {
    /// The Posts.xml dump: plain, .gz, .zst or .7z (detected from the content).
    #[arg(long, value_name = "FILE")]
    posts: PathBuf,
    /// A topic tag. Repeatable.
    #[arg(long = "tag", required = true, value_name = "TAG")]
    tags: Vec<String>,
    /// Whether a question needs any or all of the tags.
    #[arg(long = "match", default_value = "any", value_name = "any|all")]
    match_mode: TagMatch,
    /// First creation day kept (YYYY-MM-DD, inclusive).
    #[arg(long, value_name = "YYYY-MM-DD")]
    since: Option<Day>,
    /// Last creation day kept (YYYY-MM-DD, inclusive).
    #[arg(long, value_name = "YYYY-MM-DD")]
    until: Option<Day>,
    /// Drop questions scoring below N.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    min_score: Option<i64>,
    /// Without an accepted answer, take the top-scored answer instead of dropping the question.
    #[arg(long)]
    allow_unaccepted: bool,
    /// Base of question URLs ({site}/q/ID), for other Stack Exchange sites.
    #[arg(long, default_value = DEFAULT_SITE_URL, value_name = "URL")]
    site_url: String,
    /// Output questions (JSONL, sorted by question id; written atomically; `-` for stdout).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Also write the summary (read, kept, dropped by reason) as JSON here.
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// Fail on any one XML event (a row with its attributes, a text node, a comment) longer
    /// than this many bytes, so a corrupt dump cannot exhaust memory (default 64 MiB).
    #[arg(long, default_value_t = DEFAULT_MAX_EVENT_BYTES, value_name = "BYTES")]
    max_event_bytes: u64,
}

#[derive(Debug, Args)]
struct TagsArgs {
    /// The Posts.xml dump: plain, .gz, .zst or .7z.
    #[arg(long, value_name = "FILE")]
    posts: PathBuf,
    /// The topic tag.
    #[arg(long, value_name = "TAG")]
    tag: String,
    /// Only questions created on or after this day.
    #[arg(long, value_name = "YYYY-MM-DD")]
    since: Option<Day>,
    /// Only questions created on or before this day.
    #[arg(long, value_name = "YYYY-MM-DD")]
    until: Option<Day>,
    /// How many co-occurring tags to show.
    #[arg(long, default_value_t = 30)]
    top: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct TopicsArgs {
    /// The Posts.xml dump: plain, .gz, .zst or .7z.
    #[arg(long, value_name = "FILE")]
    posts: PathBuf,
    /// Tags whose first question is on or after this day.
    #[arg(long, value_name = "YYYY-MM-DD")]
    since: Day,
    /// Minimum questions per tag.
    #[arg(long, default_value_t = 50)]
    min_posts: u64,
    /// How many topics to show.
    #[arg(long, default_value_t = 50)]
    top: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(args: StackOverflowArgs) -> anyhow::Result<()> {
    match args.command {
        StackOverflowCommand::Import(args) => import(args),
        StackOverflowCommand::Tags(args) => tags(args),
        StackOverflowCommand::Topics(args) => topics(args),
    }
}

/// The settings of the Stack Overflow readers' errors, and this command's flags for them.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::Posts => "--posts",
        Setting::Tag => "--tag",
        Setting::Since => "--since",
        Setting::DayRange => "--since/--until",
        Setting::SiteUrl => "--site-url",
        _ => return None,
    })
}

fn import(args: ImportArgs) -> anyhow::Result<()> {
    let config = ImportConfig {
        filter: TagFilter::new(&args.tags, args.match_mode).map_err(|e| with_flags(e, flags))?,
        range: DayRange::new(args.since, args.until).map_err(|e| with_flags(e, flags))?,
        min_score: args.min_score,
        allow_unaccepted: args.allow_unaccepted,
        site_url: args.site_url,
        max_event_bytes: args.max_event_bytes,
    };
    // Fails on a missing file or an unknown compression before any work.
    detect_compression(&args.posts).map_err(|e| with_flags(e, flags))?;
    let started = std::time::Instant::now();
    // Library errors already name the dump (and the byte offset and line for bad XML).
    let summary = import_questions(&args.posts, &config, &args.out, &Bars::new())
        .map_err(|e| with_flags(e, flags))?;
    if let Some(path) = &args.summary {
        write_import_summary(&summary, path)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let dropped: Vec<String> = DropReason::ALL
        .iter()
        .filter_map(|r| summary.dropped.get(r).map(|n| format!("{} {n}", r.name())))
        .collect();
    eprintln!(
        "read {} rows ({} questions, {} answers, {} other; {:.1} MB of XML, {} pass(es)) in \
         {seconds:.1}s",
        summary.rows_read,
        summary.questions_read,
        summary.answers_read,
        summary.other_rows,
        summary.xml_bytes as f64 / 1e6,
        summary.passes,
    );
    eprintln!(
        "{} questions on topic; kept {} -> {}; dropped: {}",
        summary.questions_on_topic,
        summary.kept,
        args.out.display(),
        if dropped.is_empty() {
            "none".to_string()
        } else {
            dropped.join(", ")
        }
    );
    Ok(())
}

fn tags(args: TagsArgs) -> anyhow::Result<()> {
    let range = DayRange::new(args.since, args.until).map_err(|e| with_flags(e, flags))?;
    detect_compression(&args.posts).map_err(|e| with_flags(e, flags))?;
    let report = tag_cooccurrence(&args.posts, &args.tag, &range, args.top, &Bars::new())
        .map_err(|e| with_flags(e, flags))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{} questions tagged {} (of {} questions)",
            report.topic_questions, report.topic, report.questions_read
        )?;
        writeln!(out, "{:<32} {:>10} {:>7}", "tag", "questions", "share")?;
        for t in &report.tags {
            writeln!(
                out,
                "{:<32} {:>10} {:>6.1}%",
                t.tag,
                t.questions,
                t.share * 100.0
            )?;
        }
    }
    Ok(())
}

fn topics(args: TopicsArgs) -> anyhow::Result<()> {
    detect_compression(&args.posts).map_err(|e| with_flags(e, flags))?;
    let report = recent_topics(
        &args.posts,
        &args.since,
        args.min_posts,
        args.top,
        &Bars::new(),
    )
    .map_err(|e| with_flags(e, flags))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "{} tags first used on or after {} with >= {} questions (of {} tags)",
            report.topics.len(),
            report.since,
            report.min_questions,
            report.tags_seen
        )?;
        writeln!(out, "{:<32} {:>10} {:>12}", "tag", "questions", "first")?;
        for t in &report.topics {
            writeln!(
                out,
                "{:<32} {:>10} {:>12}",
                t.tag, t.questions, t.first_question
            )?;
        }
    }
    Ok(())
}
