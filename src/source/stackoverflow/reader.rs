//! The streaming `Posts.xml` reader: one `<row .../>` at a time through quick-xml, in memory
//! bounded by the largest row whatever the dump size, and the largest row bounded too: any one
//! XML event (a tag with its attributes, a text node, a comment) longer than `max_event_bytes`
//! is an error, so 1 GiB of NULs or one giant comment cannot make the parser buffer it whole.
//!
//! Attributes are located once per row but decoded (entities, UTF-8) only when asked for, so a
//! scan that needs ids, types and tags never pays for unescaping bodies.

use std::borrow::Cow;
use std::io::{BufRead, Read};
use std::path::Path;

use quick_xml::events::Event;
use quick_xml::events::attributes::Attribute;
use quick_xml::name::QName;

use super::input::{line_at, with_posts_reader};
use crate::error::{Error, Result};
use crate::progress::Progress;

/// The row attributes the stage reads (the dump has more: ViewCount, OwnerUserId, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// Post id.
    Id,
    /// 1 question, 2 answer, others (wiki, tag excerpt, ...) ignored.
    PostTypeId,
    /// Answers: the question's id.
    ParentId,
    /// Questions: the accepted answer's id, when one was accepted.
    AcceptedAnswerId,
    /// `2024-03-14T10:11:12.880`.
    CreationDate,
    /// Votes up minus down.
    Score,
    /// Questions: the title.
    Title,
    /// Escaped HTML.
    Body,
    /// Questions: `<php><laravel>` (old dumps) or `|php|laravel|` (new dumps).
    Tags,
    /// e.g. `CC BY-SA 4.0`.
    ContentLicense,
}

const FIELDS: usize = 10;

/// Default bound on one XML event (a `<row>` tag with its attributes, a text node, a comment):
/// far above any real post (Stack Overflow caps a body at 30,000 characters, a few hundred KB
/// escaped), far below what exhausts memory.
pub const DEFAULT_MAX_EVENT_BYTES: u64 = 64 << 20;

impl Field {
    /// The XML attribute name.
    pub fn name(self) -> &'static str {
        match self {
            Field::Id => "Id",
            Field::PostTypeId => "PostTypeId",
            Field::ParentId => "ParentId",
            Field::AcceptedAnswerId => "AcceptedAnswerId",
            Field::CreationDate => "CreationDate",
            Field::Score => "Score",
            Field::Title => "Title",
            Field::Body => "Body",
            Field::Tags => "Tags",
            Field::ContentLicense => "ContentLicense",
        }
    }

    fn from_key(key: &[u8]) -> Option<Field> {
        Some(match key {
            b"Id" => Field::Id,
            b"PostTypeId" => Field::PostTypeId,
            b"ParentId" => Field::ParentId,
            b"AcceptedAnswerId" => Field::AcceptedAnswerId,
            b"CreationDate" => Field::CreationDate,
            b"Score" => Field::Score,
            b"Title" => Field::Title,
            b"Body" => Field::Body,
            b"Tags" => Field::Tags,
            b"ContentLicense" => Field::ContentLicense,
            _ => return None,
        })
    }
}

/// One `<row>` of the dump, with its known attributes located but not yet decoded.
pub struct PostRow<'a> {
    attrs: [Option<Attribute<'a>>; FIELDS],
    byte_offset: u64,
}

impl<'a> PostRow<'a> {
    /// Byte offset of the row in the decompressed XML (for error messages).
    pub fn byte_offset(&self) -> u64 {
        self.byte_offset
    }

    /// The attribute's raw (still escaped) bytes, if present.
    pub fn raw(&self, field: Field) -> Option<&[u8]> {
        self.attrs[field as usize]
            .as_ref()
            .map(|a| a.value.as_bytes())
    }

    /// True when the attribute is present.
    pub fn has(&self, field: Field) -> bool {
        self.attrs[field as usize].is_some()
    }

    /// The attribute as an integer: `None` when absent or not a plain decimal integer (ids, types
    /// and scores never contain entities, so no unescaping is needed).
    pub fn number(&self, field: Field) -> Option<i64> {
        let raw = self.raw(field)?;
        let (negative, digits) = match raw.split_first() {
            Some((b'-', rest)) => (true, rest),
            _ => (false, raw),
        };
        if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let value = digits
            .iter()
            .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'));
        Some(if negative { -value } else { value })
    }

    /// The attribute as a non-negative id.
    pub fn id(&self, field: Field) -> Option<u64> {
        self.number(field).and_then(|n| u64::try_from(n).ok())
    }

    /// The attribute's text with XML entities and character references decoded (attribute-value
    /// normalisation as XML 1.0 requires: literal newlines become spaces, `&#xA;` stays a
    /// newline, as in every XML parser). A bad entity is an error naming the row's offset.
    pub fn text(&self, field: Field) -> Result<Option<Cow<'a, str>>> {
        let Some(attr) = &self.attrs[field as usize] else {
            return Ok(None);
        };
        attr.normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map(Some)
            .map_err(|e| Error::Xml {
                path: Default::default(),
                byte_offset: self.byte_offset,
                line: 0,
                message: format!("attribute {}: {e}", field.name()),
            })
    }

    /// The `CreationDate`'s `YYYY-MM-DD` prefix, if the attribute is present and starts with one.
    pub fn date(&self) -> Option<&str> {
        let raw = self.raw(Field::CreationDate)?;
        let day = raw.get(..10)?;
        let well_formed = day.iter().enumerate().all(|(i, b)| match i {
            4 | 7 => *b == b'-',
            _ => b.is_ascii_digit(),
        });
        if well_formed {
            std::str::from_utf8(day).ok()
        } else {
            None
        }
    }
}

/// What a scan saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// `<row>` elements visited.
    pub rows: u64,
    /// Bytes of decompressed XML parsed.
    pub bytes: u64,
}

/// Streams every `<row>` of the dump at `path` (any supported compression) through `visit`.
///
/// The XML must be well formed up to the closing root tag: malformed markup, an undefined
/// entity, or a file that ends before the root closes (a truncated download) is an
/// [`Error::Xml`] naming the byte offset and line. `visit` may fail with its own error, which
/// ends the scan.
///
/// Any one XML event longer than `max_event_bytes` (see [`DEFAULT_MAX_EVENT_BYTES`]) is an
/// [`Error::Xml`] at the event's first byte; memory stays within about that much plus the read
/// buffer.
pub fn scan_posts(
    path: &Path,
    max_event_bytes: u64,
    progress: &dyn Progress,
    mut visit: impl FnMut(&PostRow<'_>) -> Result<()>,
) -> Result<ScanStats> {
    let outcome = with_posts_reader(path, progress, |reader| {
        scan_reader(reader, max_event_bytes, &mut visit)
    });
    match outcome {
        Err(Error::Xml {
            byte_offset,
            message,
            ..
        }) => {
            let line = line_at(path, byte_offset).unwrap_or(0);
            Err(Error::Xml {
                path: path.to_path_buf(),
                byte_offset,
                line,
                message,
            })
        }
        other => other,
    }
}

/// Parses rows from an already opened stream; errors carry the byte offset, no path or line.
/// `max_event_bytes` bounds any one XML event as in [`scan_posts`].
pub fn scan_reader(
    reader: &mut dyn BufRead,
    max_event_bytes: u64,
    visit: &mut dyn FnMut(&PostRow<'_>) -> Result<()>,
) -> Result<ScanStats> {
    let mut xml = quick_xml::Reader::from_reader(EventBudget::new(reader, max_event_bytes));
    // Whitespace between rows is not worth an event.
    xml.config_mut().trim_text(true);
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut depth = 0usize;
    let mut seen_root = false;
    let mut stats = ScanStats::default();
    let xml_error = |byte_offset: u64, message: String| Error::Xml {
        path: Default::default(),
        byte_offset,
        line: 0,
        message,
    };
    loop {
        buf.clear();
        if buf.capacity() > 4 << 20 {
            // One big row must not pin its buffer for the rest of the dump.
            buf = Vec::with_capacity(64 * 1024);
        }
        // quick-xml consumes exactly one event per call (plus the whitespace it trims before
        // it), so the bytes consumed from here on are this event's.
        xml.get_mut().reset();
        // quick-xml's offsets leave out a byte-order mark; ours count every byte of the stream
        // (as `line_at` does).
        let skew = xml.get_ref().position - xml.buffer_position();
        let event = match xml.read_event_into(&mut buf) {
            Ok(event) => event,
            Err(_) if xml.get_ref().exceeded => {
                let budget = xml.get_ref();
                return Err(xml_error(
                    budget.event_start + budget.leading_whitespace,
                    format!(
                        "one XML event (a tag with its attributes, a text node or a comment) \
                         starting here is longer than {max_event_bytes} bytes; a real post is \
                         far smaller, so the dump is likely corrupt (raise the max event bytes if \
                         it is not)"
                    ),
                ));
            }
            Err(e) => {
                let offset = match &e {
                    quick_xml::Error::Io(_) => xml.buffer_position(),
                    _ => xml.error_position(),
                };
                return Err(xml_error(offset + skew, format!("malformed XML: {e}")));
            }
        };
        // Where the event's markup starts (after the whitespace trimmed before it).
        let start = xml.get_ref().event_start + xml.get_ref().leading_whitespace;
        let opens = matches!(event, Event::Start(_));
        match event {
            Event::Start(tag) | Event::Empty(tag)
                if depth == 1 && tag.local_name().as_ref() == "row" =>
            {
                let mut row = PostRow {
                    attrs: Default::default(),
                    byte_offset: start,
                };
                split_attributes(tag.attributes_raw(), |key, value| {
                    if let Some(field) = Field::from_key(key.as_bytes()) {
                        row.attrs[field as usize] = Some(Attribute {
                            key: QName(key),
                            value: Cow::Borrowed(value),
                        });
                    }
                })
                .map_err(|message| xml_error(start, format!("malformed attribute: {message}")))?;
                stats.rows += 1;
                visit(&row).map_err(|e| match e {
                    Error::Xml {
                        byte_offset,
                        message,
                        ..
                    } => xml_error(byte_offset, message),
                    other => other,
                })?;
                if opens {
                    depth += 1;
                }
            }
            Event::Start(_) => {
                if depth == 0 {
                    if seen_root {
                        return Err(xml_error(start, "a second root element".into()));
                    }
                    seen_root = true;
                }
                depth += 1;
            }
            Event::Empty(_) if depth == 0 => {
                if seen_root {
                    return Err(xml_error(start, "a second root element".into()));
                }
                seen_root = true;
            }
            Event::End(_) => depth = depth.saturating_sub(1),
            Event::Eof => {
                let end = xml.buffer_position() + skew;
                if !seen_root {
                    return Err(xml_error(
                        end,
                        "no root element (is this a Posts.xml?)".into(),
                    ));
                }
                if depth > 0 {
                    return Err(xml_error(
                        end,
                        "unexpected end of file before the root element closes: the dump is \
                         truncated"
                            .into(),
                    ));
                }
                stats.bytes = end;
                return Ok(stats);
            }
            // Comments (new dumps open with one), the declaration, text, PIs: nothing to do.
            _ => {}
        }
    }
}

/// The stream quick-xml reads, counting the bytes consumed since the last [`reset`]: past the
/// budget it hands out nothing more and fails, so the parser's event buffer cannot grow beyond
/// the budget (quick-xml otherwise appends to it until the event's delimiter, however far).
///
/// [`reset`]: EventBudget::reset
struct EventBudget<'r> {
    inner: &'r mut dyn BufRead,
    /// Bytes consumed from the stream in all.
    position: u64,
    /// `position` at the last reset.
    event_start: u64,
    /// Bytes consumed since the last reset.
    consumed: u64,
    limit: u64,
    /// Set when a read was refused, so the caller can tell the budget from a real I/O error.
    exceeded: bool,
    /// Whitespace consumed since the reset before anything else (quick-xml trims it into the
    /// next event), so an error can name the byte where the event itself starts.
    leading_whitespace: u64,
    /// Whitespace at the front of what the last `fill_buf` returned, until content is seen.
    whitespace_ahead: Option<usize>,
}

impl<'r> EventBudget<'r> {
    fn new(inner: &'r mut dyn BufRead, limit: u64) -> Self {
        Self {
            inner,
            position: 0,
            event_start: 0,
            consumed: 0,
            limit,
            exceeded: false,
            leading_whitespace: 0,
            whitespace_ahead: Some(0),
        }
    }

    fn reset(&mut self) {
        self.event_start = self.position;
        self.consumed = 0;
        self.leading_whitespace = 0;
        self.whitespace_ahead = Some(0);
    }
}

impl Read for EventBudget<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for EventBudget<'_> {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        let room = self.limit.saturating_sub(self.consumed);
        let available = self.inner.fill_buf()?;
        if available.is_empty() {
            return Ok(available);
        }
        if room == 0 {
            self.exceeded = true;
            return Err(std::io::Error::other("XML event over its size bound"));
        }
        let n = available
            .len()
            .min(usize::try_from(room).unwrap_or(usize::MAX));
        let available = &available[..n];
        if self.whitespace_ahead.is_some() {
            let spaces = available
                .iter()
                .take_while(|b| b.is_ascii_whitespace())
                .count();
            self.whitespace_ahead = Some(spaces);
        }
        Ok(available)
    }

    fn consume(&mut self, n: usize) {
        if let Some(spaces) = self.whitespace_ahead {
            let skipped = spaces.min(n);
            self.leading_whitespace += skipped as u64;
            self.whitespace_ahead = (n <= spaces).then(|| spaces - n);
        }
        self.consumed += n as u64;
        self.position += n as u64;
        self.inner.consume(n);
    }
}

/// Splits a start tag's attribute text into `(name, raw value)` pairs, checking the XML rules
/// that matter here (`name="value"` or `name='value'`, whitespace between attributes, no `<` in a
/// value). quick-xml's own attribute iterator walks values byte by byte and was half the scan
/// time; this one jumps to the closing quote with memchr.
fn split_attributes<'a>(
    raw: &'a str,
    mut each: impl FnMut(&'a str, &'a str),
) -> std::result::Result<(), String> {
    let bytes = raw.as_bytes();
    let skip_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut i = skip_space(0);
    while i < bytes.len() {
        if bytes[i] == b'/' && skip_space(i + 1) == bytes.len() {
            break;
        }
        let key_start = i;
        while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'=' {
            i += 1;
        }
        let key = &raw[key_start..i];
        if key.is_empty() {
            return Err("a value without a name".into());
        }
        i = skip_space(i);
        if bytes.get(i) != Some(&b'=') {
            return Err(format!("{key} has no value"));
        }
        i = skip_space(i + 1);
        let quote = match bytes.get(i) {
            Some(&q @ (b'"' | b'\'')) => q,
            _ => return Err(format!("{key}'s value is not quoted")),
        };
        let value_start = i + 1;
        let Some(len) = memchr::memchr(quote, &bytes[value_start..]) else {
            return Err(format!("{key}'s value is not closed"));
        };
        let value = &raw[value_start..value_start + len];
        if memchr::memchr(b'<', value.as_bytes()).is_some() {
            return Err(format!("{key}'s value contains '<'"));
        }
        each(key, value);
        i = value_start + len + 1;
        match bytes.get(i) {
            None => break,
            Some(b) if b.is_ascii_whitespace() || *b == b'/' => i = skip_space(i),
            Some(_) => return Err(format!("no space after {key}'s value")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(xml: &str) -> Result<Vec<(Option<u64>, Option<String>)>> {
        let mut out = Vec::new();
        scan_reader(&mut xml.as_bytes(), DEFAULT_MAX_EVENT_BYTES, &mut |row| {
            out.push((
                row.id(Field::Id),
                row.text(Field::Body)?.map(|b| b.into_owned()),
            ));
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn reads_rows_with_entities_and_comment() {
        let xml = "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<!-- dump comment -->\n<posts>\n  \
                   <row Id=\"7\" Body=\"&lt;p&gt;a &amp;amp; b&#xA;c&lt;/p&gt;\" />\n  \
                   <row Id=\"9\"></row>\n</posts>\n";
        let got = rows(xml).unwrap();
        assert_eq!(
            got,
            vec![
                (Some(7), Some("<p>a &amp; b\nc</p>".to_string())),
                (Some(9), None)
            ]
        );
    }

    #[test]
    fn truncated_dump_is_an_error_with_offset() {
        let xml = "<posts>\n<row Id=\"1\" />\n<row Id=\"2\" />\n";
        let err = rows(xml).unwrap_err();
        match err {
            Error::Xml {
                byte_offset,
                message,
                ..
            } => {
                assert_eq!(byte_offset, xml.len() as u64);
                assert!(message.contains("truncated"), "{message}");
            }
            other => panic!("unexpected {other}"),
        }
        // Cut in the middle of a row.
        let cut = "<posts>\n<row Id=\"1\" />\n<row Id=\"2\" Bo";
        assert!(matches!(rows(cut), Err(Error::Xml { .. })));
    }

    #[test]
    fn bad_entity_and_mismatched_tags_are_errors() {
        assert!(matches!(
            rows("<posts><row Id=\"1\" Body=\"&bogus;\"/></posts>"),
            Err(Error::Xml { .. })
        ));
        assert!(matches!(
            rows("<posts><row Id=\"1\"/></post>"),
            Err(Error::Xml { .. })
        ));
    }

    #[test]
    fn attribute_syntax_is_checked() {
        let mut seen = Vec::new();
        split_attributes(" A=\"1\"  B = 'x\"y' C=\"\"/", |k, v| seen.push((k, v))).unwrap();
        assert_eq!(seen, vec![("A", "1"), ("B", "x\"y"), ("C", "")]);
        for bad in ["A", "A=1", "A=\"1", "A=\"1\"B=\"2\"", "=\"1\"", "A=\"<\""] {
            assert!(split_attributes(bad, |_, _| ()).is_err(), "{bad}");
        }
    }

    #[test]
    fn numbers_and_dates() {
        let xml = "<posts><row Id=\"12\" Score=\"-3\" ParentId=\"x1\" \
                   CreationDate=\"2024-03-14T10:11:12.880\"/></posts>";
        scan_reader(&mut xml.as_bytes(), DEFAULT_MAX_EVENT_BYTES, &mut |row| {
            assert_eq!(row.number(Field::Score), Some(-3));
            assert_eq!(row.id(Field::Score), None);
            assert_eq!(row.number(Field::ParentId), None);
            assert_eq!(row.date(), Some("2024-03-14"));
            Ok(())
        })
        .unwrap();
    }

    fn scan_with_limit(xml: &[u8], limit: u64) -> Result<ScanStats> {
        scan_reader(&mut &xml[..], limit, &mut |row| {
            row.text(Field::Body)?;
            Ok(())
        })
    }

    #[test]
    fn one_huge_xml_event_is_no_longer_buffered_whole() {
        // Regression (issue 19 item 4): a giant attribute, text node or comment was read into
        // memory whole. Each is now an error at its first byte once past the bound.
        let big = "x".repeat(5000);
        let cases = [
            (format!("<posts><row Id=\"1\" Body=\"{big}\"/></posts>"), 7),
            (format!("<posts>{big}<row Id=\"1\"/></posts>"), 7),
            (format!("<!--{big}--><posts/>"), 0),
            (format!("<posts><![CDATA[{big}]]></posts>"), 7),
            // The whitespace quick-xml trims before a row is not the row.
            (
                format!("<posts>\n  <row Id=\"1\" Body=\"{big}\"/></posts>"),
                10,
            ),
        ];
        for (xml, at) in &cases {
            match scan_with_limit(xml.as_bytes(), 4096) {
                Err(Error::Xml {
                    byte_offset,
                    message,
                    ..
                }) => {
                    assert_eq!(byte_offset, *at, "{message}");
                    assert!(message.contains("longer than 4096 bytes"), "{message}");
                }
                other => panic!("{xml:.20}: expected the bound, got {other:?}"),
            }
            // The same input under a raised bound reads as before.
            scan_with_limit(xml.as_bytes(), 8192).unwrap();
        }
        // Rows each under the bound pass, however many: the bound is per event.
        let rows = format!(
            "<posts>{}</posts>",
            "<row Id=\"1\" Body=\"abc\"/>".repeat(1000)
        );
        assert_eq!(scan_with_limit(rows.as_bytes(), 64).unwrap().rows, 1000);

        // 256 MiB of NULs (what a gzipped bomb decompresses to) stop at the default bound, in
        // one read buffer's worth past it, instead of being buffered to the end.
        let mut nuls =
            std::io::BufReader::with_capacity(1 << 20, std::io::repeat(0).take(256 << 20));
        let err = scan_reader(&mut nuls, DEFAULT_MAX_EVENT_BYTES, &mut |_| Ok(())).unwrap_err();
        assert!(err.to_string().contains("longer than"), "{err}");
        let left = std::io::copy(&mut nuls, &mut std::io::sink()).unwrap();
        assert!(
            left >= (256 << 20) - DEFAULT_MAX_EVENT_BYTES - (1 << 20),
            "{left}"
        );
    }
}
