//! Stack Overflow dumps coming in (paper §3.1): a streaming `Posts.xml` reader (plain, gzip,
//! zstd or 7z, detected from the magic bytes), HTML bodies to Markdown-like text, the tag filter,
//! the import of questions with their accepted answers, and the tag reports that choose a topic.
//!
//! Guarantees: memory is bounded by the largest row plus what is selected, whatever the dump
//! size (no map of all posts); rows may come in any order; malformed or truncated XML is an
//! [`Error::Xml`](crate::Error) naming the byte offset and line, and the output file is then
//! not created (it is written through [`AtomicWriter`](crate::dataset::AtomicWriter)).

mod html;
mod import;
mod input;
mod reader;
mod tags;

pub use html::{decode_entities, html_to_markdown};
pub use import::{
    DEFAULT_SITE_URL, DropReason, ImportConfig, ImportSummary, import_questions,
    write_import_summary,
};
pub use input::{Compression, detect_compression, with_posts_reader};
pub use reader::{DEFAULT_MAX_EVENT_BYTES, Field, PostRow, ScanStats, scan_posts, scan_reader};
pub use tags::{
    Day, DayRange, TagCount, TagFilter, TagMatch, TagReport, TopicCandidate, TopicReport,
    parse_day, parse_tags, recent_topics, tag_cooccurrence,
};
