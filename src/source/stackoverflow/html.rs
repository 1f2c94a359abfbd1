//! Stack Overflow post bodies (the HTML subset the site renders) to Markdown-like text.
//!
//! - `<pre><code>` becomes a fenced block whose content is the code, entity-decoded,
//!   byte-for-byte (tags inside the block are dropped, their text kept). Fences are always at the
//!   start of a line, even inside lists and quotes, because retrievers match on the exact code.
//! - inline `<code>` becomes backticks (verbatim), links `text (url)`, images `alt (src)`,
//!   lists `- ` / `1. `, quotes `> `, headings `#`, `<strong>` `**`, `<em>` `*`, `<hr>` `---`.
//! - Outside code, runs of ASCII whitespace collapse to one space; blocks are separated by a
//!   blank line; the result is trimmed.

use std::borrow::Cow;

/// Converts a post body (HTML, already XML-unescaped) to Markdown-like text.
pub fn html_to_markdown(html: &str) -> String {
    let mut conv = Converter::default();
    let mut rest = html;
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            conv.text(rest);
            break;
        };
        if lt > 0 {
            conv.text(&rest[..lt]);
        }
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = match after.find("-->") {
                Some(end) => &after[end + 3..],
                None => "",
            };
            continue;
        }
        match parse_tag(rest) {
            Some((tag, len)) => {
                conv.tag(&tag);
                rest = &rest[len..];
            }
            None => {
                // A lone '<' (e.g. "a < b" that was not escaped): literal text.
                conv.text("<");
                rest = &rest[1..];
            }
        }
    }
    conv.finish()
}

/// A parsed tag: lowercase name, closing or not, attributes (entity-decoded values).
struct Tag<'a> {
    name: String,
    closing: bool,
    attrs: Vec<(&'a str, String)>,
}

impl Tag<'_> {
    fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the tag at the start of `s` (which starts with '<'); returns it and its byte length.
fn parse_tag(s: &str) -> Option<(Tag<'_>, usize)> {
    let bytes = s.as_bytes();
    let mut i = 1;
    let closing = bytes.get(i) == Some(&b'/');
    if closing {
        i += 1;
    }
    let name_start = i;
    while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'-') {
        i += 1;
    }
    if i == name_start || !bytes[name_start].is_ascii_alphabetic() {
        // `<!DOCTYPE`, `<?`, `< b`: not a tag we render; treat `<!...>` as markup to skip.
        if bytes.get(1) == Some(&b'!') || bytes.get(1) == Some(&b'?') {
            let end = s.find('>')?;
            return Some((
                Tag {
                    name: String::new(),
                    closing: false,
                    attrs: Vec::new(),
                },
                end + 1,
            ));
        }
        return None;
    }
    let name = s[name_start..i].to_ascii_lowercase();
    let mut attrs = Vec::new();
    loop {
        while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b'/') {
            i += 1;
        }
        if i >= bytes.len() {
            return None;
        }
        if bytes[i] == b'>' {
            return Some((
                Tag {
                    name,
                    closing,
                    attrs,
                },
                i + 1,
            ));
        }
        let key_start = i;
        while i < bytes.len()
            && !bytes[i].is_ascii_whitespace()
            && !matches!(bytes[i], b'=' | b'>' | b'/')
        {
            i += 1;
        }
        let key = &s[key_start..i];
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        let mut value = String::new();
        if bytes.get(i) == Some(&b'=') {
            i += 1;
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            match bytes.get(i) {
                Some(&q @ (b'"' | b'\'')) => {
                    let end = s[i + 1..].find(q as char)? + i + 1;
                    value = decode_entities(&s[i + 1..end]).into_owned();
                    i = end + 1;
                }
                Some(_) => {
                    let start = i;
                    while i < bytes.len() && !bytes[i].is_ascii_whitespace() && bytes[i] != b'>' {
                        i += 1;
                    }
                    value = decode_entities(&s[start..i]).into_owned();
                }
                None => return None,
            }
        }
        if key.is_empty() {
            // Skip one whole character: a byte could land inside a multi-byte one (found by
            // fuzzing: `<a ="x"é>` sliced `é` in two).
            i += s[i..].chars().next().map_or(1, char::len_utf8);
        } else {
            attrs.push((key, value));
        }
    }
}

#[derive(Default)]
struct Converter {
    out: String,
    /// The paragraph being built (inline content, whitespace already collapsed).
    para: String,
    /// `> ` depth.
    quote_depth: usize,
    /// Open lists: ordered?, next number.
    lists: Vec<(bool, usize)>,
    /// Marker for the next block of the current list item (`- `, `3. `), consumed by that block.
    item_marker: Option<String>,
    /// Inside `<pre>`: the code collected so far and its language.
    pre: Option<(String, String)>,
    /// Inside inline `<code>` (outside `<pre>`): its verbatim text.
    inline_code: Option<String>,
    /// Open links: href and where their text starts in `para`.
    links: Vec<(String, usize)>,
    /// `# ` prefix for the heading being built.
    heading: Option<usize>,
    /// Inside a table row: cells seen so far.
    cells: usize,
}

impl Converter {
    fn text(&mut self, raw: &str) {
        let decoded = decode_entities(raw);
        if let Some((code, _)) = &mut self.pre {
            code.push_str(&decoded);
        } else if let Some(code) = &mut self.inline_code {
            code.push_str(&decoded);
        } else {
            self.push_collapsed(&decoded);
        }
    }

    /// Appends prose, collapsing ASCII whitespace (not U+00A0, which is deliberate).
    fn push_collapsed(&mut self, text: &str) {
        for c in text.chars() {
            if c.is_ascii_whitespace() {
                if !self.para.is_empty() && !self.para.ends_with([' ', '\n']) {
                    self.para.push(' ');
                }
            } else {
                self.para.push(c);
            }
        }
    }

    fn tag(&mut self, tag: &Tag<'_>) {
        let name = tag.name.as_str();
        if self.pre.is_some() {
            // Inside a code block only the end of the block matters; other markup is dropped.
            if name == "pre" && tag.closing {
                let (code, lang) = self.pre.take().unwrap_or_default();
                self.code_block(&code, &lang);
            } else if let (Some((code, _)), "br") = (&mut self.pre, name) {
                code.push('\n');
            }
            return;
        }
        match (name, tag.closing) {
            ("pre", false) => {
                self.flush();
                let lang = language(tag.attr("class")).unwrap_or_default();
                self.pre = Some((String::new(), lang));
            }
            ("code", false) => {
                self.inline_code = Some(String::new());
            }
            ("code", true) => {
                if let Some(code) = self.inline_code.take() {
                    self.inline_code_span(&code);
                }
            }
            ("p" | "div" | "table" | "thead" | "tbody", _) => self.flush(),
            ("tr", _) => {
                self.flush();
                self.cells = 0;
            }
            ("td" | "th", false) => {
                if self.cells > 0 {
                    self.para.push_str(" | ");
                }
                self.cells += 1;
            }
            ("br", _) => {
                while self.para.ends_with(' ') {
                    self.para.pop();
                }
                if !self.para.is_empty() {
                    self.para.push('\n');
                }
            }
            ("hr", _) => {
                self.flush();
                self.block("---");
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", false) => {
                self.flush();
                self.heading = Some(usize::from(name.as_bytes()[1] - b'0'));
            }
            ("h1" | "h2" | "h3" | "h4" | "h5" | "h6", true) => {
                self.flush();
                self.heading = None;
            }
            ("blockquote", false) => {
                self.flush();
                self.quote_depth += 1;
            }
            ("blockquote", true) => {
                self.flush();
                self.quote_depth = self.quote_depth.saturating_sub(1);
            }
            ("ul" | "ol", false) => {
                self.flush();
                let start = tag
                    .attr("start")
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(1);
                self.lists.push((name == "ol", start));
            }
            ("ul" | "ol", true) => {
                self.flush();
                self.lists.pop();
                self.item_marker = None;
            }
            ("li", false) => {
                self.flush();
                let marker = match self.lists.last_mut() {
                    Some((true, next)) => {
                        let marker = format!("{next}. ");
                        // `start` is the page's: a huge one must not overflow (found by fuzzing).
                        *next = next.saturating_add(1);
                        marker
                    }
                    _ => "- ".to_string(),
                };
                self.item_marker = Some(marker);
            }
            ("li", true) => self.flush(),
            ("strong" | "b", _) => self.para.push_str("**"),
            ("em" | "i", _) => self.para.push('*'),
            ("a", false) => {
                let href = tag.attr("href").unwrap_or_default().trim().to_string();
                self.links.push((href, self.para.len()));
            }
            ("a", true) => {
                if let Some((href, start)) = self.links.pop() {
                    let text = self.para.get(start..).unwrap_or_default().trim();
                    let (empty, same) = (text.is_empty(), text == href);
                    if href.is_empty() || same {
                        // Nothing to add: no target, or the text is the URL.
                    } else if empty {
                        self.para.push_str(&href);
                    } else {
                        self.para.push_str(" (");
                        self.para.push_str(&href);
                        self.para.push(')');
                    }
                }
            }
            ("img", _) => {
                let alt = tag.attr("alt").unwrap_or_default().trim();
                let src = tag.attr("src").unwrap_or_default().trim();
                let text = match (alt.is_empty(), src.is_empty()) {
                    (false, false) => format!("{alt} ({src})"),
                    (true, false) => src.to_string(),
                    (false, true) => alt.to_string(),
                    (true, true) => String::new(),
                };
                self.push_collapsed(&text);
            }
            // span, kbd, sup, sub, del, s, strike, unknown: their text only.
            _ => {}
        }
    }

    fn inline_code_span(&mut self, code: &str) {
        let fence = "`".repeat(longest_run(code, '`') + 1);
        let pad = if code.starts_with('`') || code.ends_with('`') {
            " "
        } else {
            ""
        };
        self.para.push_str(&fence);
        self.para.push_str(pad);
        self.para.push_str(code);
        self.para.push_str(pad);
        self.para.push_str(&fence);
    }

    /// Ends the current paragraph (if any) as a block.
    fn flush(&mut self) {
        if let Some(code) = self.inline_code.take() {
            // An unclosed inline <code> ends with its block.
            self.inline_code_span(&code);
        }
        let para = std::mem::take(&mut self.para);
        let text = para.trim_matches([' ', '\n']);
        if text.is_empty() {
            return;
        }
        match self.heading.take() {
            Some(level) => {
                let line = format!("{} {}", "#".repeat(level), text.replace('\n', " "));
                self.block(&line);
            }
            None => self.block(text),
        }
    }

    /// Appends a block of prose with the quote and list prefixes.
    fn block(&mut self, text: &str) {
        self.separate();
        let quote = "> ".repeat(self.quote_depth);
        let marker = self.item_marker.take();
        let indent = if self.lists.is_empty() {
            String::new()
        } else {
            // Continuation lines (and later blocks of the item) align after the marker.
            " ".repeat(2 * (self.lists.len() - 1) + marker.as_ref().map_or(2, String::len))
        };
        let nesting = " ".repeat(2 * self.lists.len().saturating_sub(1));
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.out.push('\n');
            }
            self.out.push_str(&quote);
            match (&marker, i) {
                (Some(marker), 0) => {
                    self.out.push_str(&nesting);
                    self.out.push_str(marker);
                }
                _ => self.out.push_str(&indent),
            }
            self.out.push_str(line.trim_end());
        }
    }

    /// A fenced code block at the start of a line, content verbatim.
    fn code_block(&mut self, code: &str, lang: &str) {
        if code.trim().is_empty() {
            return;
        }
        self.item_marker = None;
        self.separate();
        let fence = "`".repeat((longest_run(code, '`') + 1).max(3));
        self.out.push_str(&fence);
        self.out.push_str(lang);
        self.out.push('\n');
        self.out.push_str(code);
        if !code.ends_with('\n') {
            self.out.push('\n');
        }
        self.out.push_str(&fence);
    }

    fn separate(&mut self) {
        if !self.out.is_empty() {
            self.out.push_str("\n\n");
        }
    }

    fn finish(mut self) -> String {
        if let Some((code, lang)) = self.pre.take() {
            // An unclosed <pre> still keeps its code.
            self.code_block(&code, &lang);
        }
        self.flush();
        let trimmed_len = self.out.trim_end().len();
        self.out.truncate(trimmed_len);
        self.out
    }
}

/// The language of a code block from `class="lang-php prettyprint-override"` (Stack Overflow)
/// or `language-php` (CommonMark renderers); `lang-none` means none.
fn language(class: Option<&str>) -> Option<String> {
    class?
        .split_ascii_whitespace()
        .find_map(|c| {
            c.strip_prefix("lang-")
                .or_else(|| c.strip_prefix("language-"))
        })
        .filter(|lang| !lang.is_empty() && *lang != "none")
        .map(str::to_string)
}

fn longest_run(s: &str, c: char) -> usize {
    let mut best = 0;
    let mut run = 0;
    for ch in s.chars() {
        if ch == c {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

/// Decodes HTML character references: numeric (`&#39;`, `&#x27;`) and the named entities that
/// occur in posts. Unknown names stay as written; invalid code points become U+FFFD.
pub fn decode_entities(s: &str) -> Cow<'_, str> {
    if !s.contains('&') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest
            .as_bytes()
            .iter()
            .take(34)
            .position(|&b| b == b';')
            .filter(|&end| end > 1);
        let decoded = end.and_then(|end| decode_reference(&rest[1..end]).map(|c| (c, end)));
        match decoded {
            Some((replacement, end)) => {
                out.push_str(replacement.as_ref());
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The text of one reference `name` (between `&` and `;`).
fn decode_reference(name: &str) -> Option<Cow<'static, str>> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse::<u32>().ok()?,
        };
        let c = char::from_u32(code)
            .filter(|&c| c != '\0')
            .unwrap_or('\u{fffd}');
        return Some(Cow::Owned(c.to_string()));
    }
    let text = match name {
        "amp" => "&",
        "lt" => "<",
        "gt" => ">",
        "quot" => "\"",
        "apos" => "'",
        "nbsp" => "\u{a0}",
        "copy" => "©",
        "reg" => "®",
        "trade" => "™",
        "hellip" => "…",
        "mdash" => "—",
        "ndash" => "–",
        "lsquo" => "‘",
        "rsquo" => "’",
        "ldquo" => "“",
        "rdquo" => "”",
        "laquo" => "«",
        "raquo" => "»",
        "bull" => "•",
        "middot" => "·",
        "times" => "×",
        "divide" => "÷",
        "deg" => "°",
        "plusmn" => "±",
        "euro" => "€",
        "pound" => "£",
        "yen" => "¥",
        "cent" => "¢",
        "sect" => "§",
        "para" => "¶",
        "larr" => "←",
        "rarr" => "→",
        "uarr" => "↑",
        "darr" => "↓",
        "harr" => "↔",
        "rArr" => "⇒",
        "lArr" => "⇐",
        "ne" => "≠",
        "le" => "≤",
        "ge" => "≥",
        "zwj" => "\u{200d}",
        "zwnj" => "\u{200c}",
        "shy" => "\u{ad}",
        _ => return None,
    };
    Some(Cow::Borrowed(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing: an attribute without a name followed by a multi-byte character
    /// panicked on a slice inside that character.
    #[test]
    fn nameless_attribute_before_a_multibyte_character_does_not_panic() {
        for html in ["<a =\"x\"é>text</a>", "<a =\"x\"\u{FFFD}", "<p =x é>y</p>"] {
            html_to_markdown(html);
        }
    }

    /// Found by fuzzing: `<ol start="usize::MAX">` with two items overflowed the next number.
    #[test]
    fn ordered_list_start_at_the_maximum_does_not_overflow() {
        let html = format!("<ol start=\"{}\"><li>a</li><li>b</li></ol>", usize::MAX);
        let markdown = html_to_markdown(&html);
        assert!(
            markdown.contains(&format!("{}. b", usize::MAX)),
            "{markdown}"
        );
    }

    #[test]
    fn paragraphs_inline_code_links() {
        let html = "<p>Use   <code>Route::get()</code> in\n<a href=\"https://laravel.com/docs\">the docs</a>.</p>\n\n<p>Second &amp; <strong>bold</strong> <a href=\"https://x.y\">https://x.y</a></p>";
        assert_eq!(
            html_to_markdown(html),
            "Use `Route::get()` in the docs (https://laravel.com/docs).\n\nSecond & **bold** https://x.y"
        );
    }

    #[test]
    fn code_block_survives_byte_for_byte() {
        let code = "if (a < b && c > d) {\n    echo \"<b>x</b>\";  // 'q'\n\n\treturn `t`;\n}\n";
        let escaped = code
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
            .replace('\'', "&#39;");
        let html = format!(
            "<p>Try:</p>\n<pre class=\"lang-php prettyprint-override\"><code>{escaped}</code></pre>\n<p>done</p>"
        );
        let md = html_to_markdown(&html);
        assert_eq!(md, format!("Try:\n\n```php\n{code}```\n\ndone"));
        assert!(md.contains(code));
    }

    #[test]
    fn nested_code_in_list_and_quote_keeps_code_verbatim() {
        let html = "<ol><li><p>First <em>step</em></p><pre><code>  indented\n    more\n</code></pre></li><li>Second</li></ol><blockquote><p>quoted\nline</p><pre><code>x = 1\n</code></pre></blockquote>";
        let md = html_to_markdown(html);
        assert_eq!(
            md,
            "1. First *step*\n\n```\n  indented\n    more\n```\n\n2. Second\n\n> quoted line\n\n```\nx = 1\n```"
        );
    }

    #[test]
    fn fence_longer_than_backticks_in_code() {
        let md = html_to_markdown("<pre><code>```\nnested fence\n```\n</code></pre>");
        assert_eq!(md, "````\n```\nnested fence\n```\n````");
        assert_eq!(html_to_markdown("<code>a`b</code>"), "``a`b``");
    }

    #[test]
    fn entities_lists_headings_breaks() {
        let html = "<h2>Title &lt;x&gt;</h2><ul><li>a&nbsp;b</li><li>&#x263A; &#9731; &unknown; &amp;amp;</li></ul>line<br>break<hr><img src=\"i.png\" alt=\"pic\">";
        assert_eq!(
            html_to_markdown(html),
            "## Title <x>\n\n- a\u{a0}b\n\n- ☺ ☃ &unknown; &amp;\n\nline\nbreak\n\n---\n\npic (i.png)"
        );
    }

    proptest::proptest! {
        #[test]
        fn any_code_block_survives(code in "[ -~\t\n\u{a0}-\u{3ff}]{1,200}") {
            let escaped = code.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
            let md = html_to_markdown(&format!("<p>x</p><pre><code>{escaped}</code></pre>"));
            if !code.trim().is_empty() {
                proptest::prop_assert!(md.contains(&code), "{md:?}");
            }
        }

        #[test]
        fn arbitrary_html_never_panics(html in "[<>/a-z \"'=&#;!-]{0,120}") {
            let _ = html_to_markdown(&html);
        }
    }

    #[test]
    fn malformed_html_does_not_panic() {
        for html in [
            "<",
            "<p",
            "a < b",
            "<pre><code>x",
            "<a href='x",
            "&#xFFFFFFFF;",
            "<!-- x",
            "</li></ul>",
        ] {
            let _ = html_to_markdown(html);
        }
        assert_eq!(html_to_markdown("a < b"), "a < b");
        assert_eq!(html_to_markdown("<pre><code>x"), "```\nx\n```");
    }
}
