//! The streaming `Posts.xml` reader: one `<row .../>` at a time through quick-xml, in memory
//! bounded by the largest row whatever the dump size.
//!
//! Attributes are located once per row but decoded (entities, UTF-8) only when asked for, so a
//! scan that needs ids, types and tags never pays for unescaping bodies.

use std::borrow::Cow;
use std::io::BufRead;
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
pub fn scan_posts(
    path: &Path,
    progress: &dyn Progress,
    mut visit: impl FnMut(&PostRow<'_>) -> Result<()>,
) -> Result<ScanStats> {
    let outcome = with_posts_reader(path, progress, |reader| scan_reader(reader, &mut visit));
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
pub fn scan_reader(
    reader: &mut dyn BufRead,
    visit: &mut dyn FnMut(&PostRow<'_>) -> Result<()>,
) -> Result<ScanStats> {
    let mut xml = quick_xml::Reader::from_reader(reader);
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
        let start = xml.buffer_position();
        let event = match xml.read_event_into(&mut buf) {
            Ok(event) => event,
            Err(e) => {
                let offset = match &e {
                    quick_xml::Error::Io(_) => xml.buffer_position(),
                    _ => xml.error_position(),
                };
                return Err(xml_error(offset, format!("malformed XML: {e}")));
            }
        };
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
                let end = xml.buffer_position();
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
        scan_reader(&mut xml.as_bytes(), &mut |row| {
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
        scan_reader(&mut xml.as_bytes(), &mut |row| {
            assert_eq!(row.number(Field::Score), Some(-3));
            assert_eq!(row.id(Field::Score), None);
            assert_eq!(row.number(Field::ParentId), None);
            assert_eq!(row.date(), Some("2024-03-14"));
            Ok(())
        })
        .unwrap();
    }
}
