//! Token-bounded, structure-aware chunking of one file's text.
//!
//! Every chunk is a byte range of the input (`text[start..end]`), at most `max_tokens` tokens of
//! the chosen tokenizer ([`super::tokenizer`]: a tiktoken vocabulary, or a Hugging Face
//! `tokenizer.json` with its special tokens counted), trimmed of surrounding ASCII whitespace.
//! Chunks never overlap and, together, cover every non-whitespace byte of the input.
//!
//! How: the text is tokenized once, giving the byte offset where every token ends, so the
//! farthest end that fits the budget from any cursor is a binary search. Candidate cut points
//! carry a *level* (see [`split_points`]): headings highest (Markdown, reStructuredText, HTML
//! `h1`-`h6`, DocBook sections), then syntax nodes by depth (tree-sitter for code; for HTML/XML,
//! lines opening an element, by indentation), then blank lines, then line starts. From the cursor, the cut is the farthest point of the highest level that still fills
//! at least a quarter of the budget; with no line boundary in reach, the last whitespace, and
//! for a pathological 5 MB line, a character boundary. Each chunk is then counted exactly
//! (tokenization is not additive across a cut) and shrunk in the rare case it is over budget:
//! two tokenizer passes over the bytes in all, whatever the file's shape.

use std::cell::RefCell;
use std::collections::HashMap;

use super::tokenizer::{TokenCounter, TokenizerSpec};
use crate::error::{Error, Result, Setting};

/// How a file's text is split: chosen from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// Markdown (`.md`, `.mdx`, ...): headings, then blocks.
    Markdown,
    /// A notebook, already rendered to text by [`crate::source::notebook_text`]; split as Markdown.
    Notebook,
    /// Python.
    Python,
    /// JavaScript (incl. JSX).
    JavaScript,
    /// TypeScript.
    TypeScript,
    /// TSX.
    Tsx,
    /// PHP (incl. Blade templates and HTML around PHP).
    Php,
    /// Rust.
    Rust,
    /// C.
    C,
    /// C++.
    Cpp,
    /// Java.
    Java,
    /// Go.
    Go,
    /// C#.
    CSharp,
    /// HTML.
    Html,
    /// XML (DocBook, XSLT, SVG sources, ...).
    Xml,
    /// reStructuredText: section titles, then blank lines.
    Rst,
    /// Anything else: plain text, config files, unknown code.
    Text,
}

impl Language {
    /// Picks the splitter for a file name.
    pub fn from_file_name(file_name: &str) -> Language {
        let lower = file_name.to_ascii_lowercase();
        let ext = lower.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
        match ext {
            "md" | "markdown" | "mdx" | "mkd" | "mdown" => Language::Markdown,
            "ipynb" => Language::Notebook,
            "rst" | "rest" => Language::Rst,
            "py" | "pyi" | "pyw" => Language::Python,
            "js" | "mjs" | "cjs" | "jsx" => Language::JavaScript,
            "ts" | "mts" | "cts" => Language::TypeScript,
            "tsx" => Language::Tsx,
            "php" | "phtml" | "php3" | "php4" | "php5" | "phpt" => Language::Php,
            "rs" => Language::Rust,
            "c" | "h" => Language::C,
            "cc" | "cpp" | "cxx" | "c++" | "hpp" | "hh" | "hxx" | "h++" | "ipp" | "inl" | "cu"
            | "cuh" => Language::Cpp,
            "java" => Language::Java,
            "go" => Language::Go,
            "cs" => Language::CSharp,
            "html" | "htm" | "xhtml" => Language::Html,
            "xml" | "xsl" | "xslt" | "xsd" | "svg" | "xul" | "rss" | "atom" | "plist"
            | "csproj" | "vcxproj" | "props" | "targets" | "resx" | "xaml" | "wsdl" | "pom" => {
                Language::Xml
            }
            _ => Language::Text,
        }
    }

    /// The name written to document metadata.
    pub fn name(self) -> &'static str {
        match self {
            Language::Markdown => "markdown",
            Language::Notebook => "notebook",
            Language::Python => "python",
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
            Language::Tsx => "tsx",
            Language::Php => "php",
            Language::Rust => "rust",
            Language::C => "c",
            Language::Cpp => "cpp",
            Language::Java => "java",
            Language::Go => "go",
            Language::CSharp => "csharp",
            Language::Html => "html",
            Language::Xml => "xml",
            Language::Rst => "rst",
            Language::Text => "text",
        }
    }

    fn grammar(self) -> Option<tree_sitter_language::LanguageFn> {
        Some(match self {
            Language::Python => tree_sitter_python::LANGUAGE,
            Language::JavaScript => tree_sitter_javascript::LANGUAGE,
            Language::TypeScript => tree_sitter_typescript::LANGUAGE_TYPESCRIPT,
            Language::Tsx => tree_sitter_typescript::LANGUAGE_TSX,
            Language::Php => tree_sitter_php::LANGUAGE_PHP,
            Language::Rust => tree_sitter_rust::LANGUAGE,
            Language::C => tree_sitter_c::LANGUAGE,
            Language::Cpp => tree_sitter_cpp::LANGUAGE,
            Language::Java => tree_sitter_java::LANGUAGE,
            Language::Go => tree_sitter_go::LANGUAGE,
            Language::CSharp => tree_sitter_c_sharp::LANGUAGE,
            Language::Markdown
            | Language::Notebook
            | Language::Rst
            | Language::Html
            | Language::Xml
            | Language::Text => {
                return None;
            }
        })
    }
}

/// A chunk: byte offsets into the text it came from, and its token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Byte offset of the first byte.
    pub start: usize,
    /// Byte offset one past the last byte.
    pub end: usize,
    /// Tokens in `text[start..end]`, as [`TokenCounter::count`] counts them.
    pub num_tokens: usize,
}

/// Split-point levels: higher is a better place to cut.
mod level {
    /// Start of a line.
    pub const LINE: u8 = 2;
    /// Start of a line after one or more blank lines.
    pub const BLANK: u8 = 3;
    /// Start of a syntax node at the deepest depth considered; shallower nodes rank higher.
    pub const SYNTAX_MIN: u8 = 4;
    /// Syntax node depths ranked (depth 1 = children of the root).
    pub const SYNTAX_DEPTHS: u8 = 8;
    /// A level-6 heading; a level-1 heading is `HEADING_MIN + 5`.
    pub const HEADING_MIN: u8 = SYNTAX_MIN + SYNTAX_DEPTHS;
    /// Number of distinct levels.
    pub const COUNT: usize = (HEADING_MIN + 6) as usize;

    /// The level of a heading of rank `rank` (1 = top).
    pub fn heading(rank: usize) -> u8 {
        HEADING_MIN + 6 - rank.clamp(1, 6) as u8
    }
}

/// A chunk must reach this share of the budget before a lower-level cut is preferred over it.
const MIN_FILL_DIVISOR: usize = 4;

/// Splits texts into token-bounded chunks. Cheap to clone and share across threads.
#[derive(Debug, Clone)]
pub struct Chunker {
    counter: TokenCounter,
    max_tokens: usize,
}

impl Chunker {
    /// A chunker producing chunks of at most `max_tokens` tokens of `counter` (a
    /// [`super::TokenizerKind`], or a [`TokenCounter`] loaded from a [`TokenizerSpec`]).
    pub fn new(counter: impl Into<TokenCounter>, max_tokens: usize) -> Result<Self> {
        let counter = counter.into();
        if max_tokens < 16 + counter.num_special() {
            return Err(Error::invalid(
                Setting::MaxTokens,
                format!(
                    "{max_tokens} is too small (at least {} with {})",
                    16 + counter.num_special(),
                    counter.spec()
                ),
            ));
        }
        Ok(Self {
            counter,
            max_tokens,
        })
    }

    /// The token budget per chunk.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The tokenizer counting the budget.
    pub fn tokenizer(&self) -> &TokenizerSpec {
        self.counter.spec()
    }

    /// The counter measuring the budget.
    pub fn counter(&self) -> &TokenCounter {
        &self.counter
    }

    /// Number of tokens in `text` as [`TokenCounter::count`] counts them.
    pub fn count_tokens(&self, text: &str) -> Result<usize> {
        self.counter.count(text)
    }

    /// Splits `text` as `language`. Never loses a non-whitespace byte: a grammar that cannot be
    /// loaded, or a parse error, only leaves fewer syntax split points. Fails only when a
    /// Hugging Face tokenizer cannot encode the text.
    pub fn chunk(&self, text: &str, language: Language) -> Result<Vec<Chunk>> {
        let points = split_points(text, language);
        let ends = self.counter.token_ends(text)?;
        let mut chunks = Vec::new();
        let mut cursor = skip_whitespace(text, 0);
        while cursor < text.len() {
            let (chunk, next) = self.next_chunk(text, &ends, &points, cursor)?;
            if let Some(chunk) = chunk {
                chunks.push(chunk);
            }
            cursor = skip_whitespace(text, next);
        }
        Ok(chunks)
    }

    /// The chunk starting at `cursor` (already past whitespace) and where the next one starts.
    fn next_chunk(
        &self,
        text: &str,
        ends: &[usize],
        points: &[(usize, u8)],
        cursor: usize,
    ) -> Result<(Option<Chunk>, usize)> {
        // `ends` holds the text's own tokens: the special ones come on top.
        let mut budget = self.max_tokens - self.counter.num_special();
        loop {
            let cut = choose_cut(text, ends, points, cursor, budget);
            let end = trim_end(text, cursor, cut);
            if end == cursor {
                return Ok((None, cut));
            }
            let num_tokens = self.count_tokens(&text[cursor..end])?;
            if num_tokens <= self.max_tokens {
                let chunk = Chunk {
                    start: cursor,
                    end,
                    num_tokens,
                };
                return Ok((Some(chunk), cut));
            }
            // Over budget: tokenization at the cut differs from the whole text's. Shrink the
            // budget by the excess and choose again.
            budget = budget.saturating_sub(num_tokens - self.max_tokens);
        }
    }
}

/// Where to cut a chunk starting at `cursor` with `budget` tokens (approximate, from the
/// whole-text tokenization): always a char boundary after `cursor`.
fn choose_cut(
    text: &str,
    ends: &[usize],
    points: &[(usize, u8)],
    cursor: usize,
    budget: usize,
) -> usize {
    // Tokens are counted from the first token that ends after the cursor.
    let first = ends.partition_point(|&e| e <= cursor);
    if budget == 0 {
        return next_char_boundary(text, cursor);
    }
    let last = first + budget; // one past the last token that fits
    if last >= ends.len() {
        return text.len();
    }
    let limit = ends[last - 1];
    if limit <= cursor {
        return next_char_boundary(text, cursor);
    }
    // Farthest split point per level within (cursor, limit].
    let lo = points.partition_point(|&(p, _)| p <= cursor);
    let hi = points.partition_point(|&(p, _)| p <= limit);
    let mut farthest = [0usize; level::COUNT];
    for &(pos, lvl) in &points[lo..hi] {
        farthest[lvl as usize] = pos;
    }
    let min_fill = (budget / MIN_FILL_DIVISOR).max(1);
    let mut best = 0usize;
    let mut best_any = 0usize;
    for lvl in (0..level::COUNT).rev() {
        best = best.max(farthest[lvl]);
        if best == 0 {
            continue;
        }
        if best_any == 0 {
            best_any = best;
        }
        let tokens = ends.partition_point(|&e| e <= best) - first;
        if tokens >= min_fill {
            return best;
        }
    }
    // No structural cut fills enough: the last whitespace in reach, else a char boundary.
    let bytes = text.as_bytes();
    if let Some(ws) = (cursor + 1..limit)
        .rev()
        .find(|&i| bytes[i].is_ascii_whitespace())
        && ws > best_any
    {
        return ws;
    }
    if best_any > cursor {
        return best_any;
    }
    let mut cut = limit;
    while cut > cursor && !text.is_char_boundary(cut) {
        cut -= 1;
    }
    if cut <= cursor {
        next_char_boundary(text, cursor)
    } else {
        cut
    }
}

fn next_char_boundary(text: &str, from: usize) -> usize {
    let mut i = from + 1;
    while i < text.len() && !text.is_char_boundary(i) {
        i += 1;
    }
    i.min(text.len())
}

fn skip_whitespace(text: &str, from: usize) -> usize {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() && bytes[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

/// `end` moved back over ASCII whitespace, not before `start`.
fn trim_end(text: &str, start: usize, end: usize) -> usize {
    let bytes = text.as_bytes();
    let mut e = end;
    while e > start && bytes[e - 1].is_ascii_whitespace() {
        e -= 1;
    }
    e
}

/// Candidate cut points of `text` with their levels, sorted by position, one per position.
pub(crate) fn split_points(text: &str, language: Language) -> Vec<(usize, u8)> {
    let mut points = line_points(text, language);
    if let Some(grammar) = language.grammar() {
        syntax_points(text, language, grammar, &mut points);
    }
    points.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    points.dedup_by_key(|p| p.0);
    points
}

/// Line starts (after blank lines ranked higher), plus headings for Markdown and
/// reStructuredText. Lines inside Markdown code fences are plain line starts.
fn line_points(text: &str, language: Language) -> Vec<(usize, u8)> {
    let markdown = matches!(language, Language::Markdown | Language::Notebook);
    let rst = language == Language::Rst;
    let markup = matches!(language, Language::Html | Language::Xml);
    let mut points = Vec::new();
    let mut rst_adornments: Vec<u8> = Vec::new();
    let mut offset = 0usize;
    let mut after_blank = false;
    let mut in_fence: Option<u8> = None;
    let mut prev_line: Option<(usize, &str)> = None;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let content = line.trim_end_matches(['\n', '\r']);
        let trimmed = content.trim_start_matches([' ', '\t']);
        if trimmed.is_empty() {
            after_blank = true;
            prev_line = None;
            continue;
        }
        let mut lvl = if after_blank {
            level::BLANK
        } else {
            level::LINE
        };
        if markdown {
            let fence = trimmed.as_bytes()[0];
            let is_fence = (fence == b'`' || fence == b'~')
                && trimmed.bytes().take_while(|&b| b == fence).count() >= 3;
            match in_fence {
                Some(open) if is_fence && fence == open => {
                    in_fence = None;
                    lvl = level::LINE;
                }
                Some(_) => lvl = level::LINE,
                None if is_fence => {
                    in_fence = Some(fence);
                    lvl = lvl.max(level::BLANK);
                }
                None => {
                    if let Some(rank) = atx_heading(trimmed) {
                        lvl = level::heading(rank);
                    } else if let Some((prev_start, _)) = prev_line.filter(|_| {
                        trimmed.bytes().all(|b| b == b'=') || trimmed.bytes().all(|b| b == b'-')
                    }) {
                        // Setext heading: the underlined line starts the section.
                        let rank = if trimmed.starts_with('=') { 1 } else { 2 };
                        points.push((prev_start, level::heading(rank)));
                    }
                }
            }
        } else if markup {
            if let Some(markup_level) = markup_line_level(trimmed, content.len() - trimmed.len()) {
                lvl = lvl.max(markup_level);
            }
        } else if rst
            && let Some((prev_start, prev)) = prev_line
            && is_rst_underline(trimmed, prev)
        {
            let ch = trimmed.as_bytes()[0];
            let rank = match rst_adornments.iter().position(|&c| c == ch) {
                Some(i) => i + 1,
                None => {
                    rst_adornments.push(ch);
                    rst_adornments.len()
                }
            };
            points.push((prev_start, level::heading(rank)));
        }
        if start > 0 {
            points.push((start, lvl));
        }
        after_blank = false;
        prev_line = Some((start, trimmed));
    }
    points
}

/// Elements that open a section: HTML headings, DocBook divisions (the PHP manual, Linux and
/// GNOME docs), with their heading rank.
const MARKUP_SECTIONS: &[(&str, usize)] = &[
    ("h1", 1),
    ("h2", 2),
    ("h3", 3),
    ("h4", 4),
    ("h5", 5),
    ("h6", 6),
    ("book", 1),
    ("part", 1),
    ("chapter", 1),
    ("reference", 1),
    ("appendix", 1),
    ("article", 2),
    ("refentry", 2),
    ("sect1", 2),
    ("section", 2),
    ("preface", 2),
    ("refsect1", 3),
    ("sect2", 3),
    ("simplesect", 3),
    ("refsect2", 4),
    ("sect3", 4),
    ("refsect3", 5),
    ("sect4", 5),
    ("example", 6),
];

/// The level of a markup line that starts with a tag or comment: sections by their rank, other
/// elements by indentation (shallower ranks higher, like syntax depth). Closing tags are not
/// cut points of their own.
fn markup_line_level(line: &str, indent: usize) -> Option<u8> {
    let rest = line.strip_prefix('<')?;
    if rest.starts_with('/') {
        return None;
    }
    if !(rest.starts_with("!--") || rest.starts_with(|c: char| c.is_ascii_alphabetic())) {
        return None;
    }
    let name_len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == ':' || c == '-' || c == '_'))
        .unwrap_or(rest.len());
    let name = &rest[..name_len];
    let name = name.rsplit(':').next().unwrap_or(name);
    if let Some(&(_, rank)) = MARKUP_SECTIONS
        .iter()
        .find(|(tag, _)| tag.eq_ignore_ascii_case(name))
    {
        return Some(level::heading(rank));
    }
    let depth = (indent / 2).min(level::SYNTAX_DEPTHS as usize - 1) as u8;
    Some(level::SYNTAX_MIN + level::SYNTAX_DEPTHS - 1 - depth)
}

/// `# Title` .. `###### Title`: the heading's rank.
fn atx_heading(line: &str) -> Option<usize> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    let rest = &line[hashes..];
    ((1..=6).contains(&hashes) && (rest.is_empty() || rest.starts_with([' ', '\t'])))
        .then_some(hashes)
}

/// A reStructuredText section underline: one repeated punctuation character, at least as long
/// as the title above it.
fn is_rst_underline(line: &str, title: &str) -> bool {
    let bytes = line.as_bytes();
    let ch = bytes[0];
    b"=-~^\"'`#*+<>:._".contains(&ch)
        && bytes.len() >= 3
        && bytes.iter().all(|&b| b == ch)
        && line.len() >= title.chars().count()
        && !title.bytes().all(|b| b == ch)
}

thread_local! {
    /// One parser per grammar per thread: creating them is not free.
    static PARSERS: RefCell<HashMap<Language, tree_sitter::Parser>> = RefCell::new(HashMap::new());
}

/// Starts of syntax nodes down to `level::SYNTAX_DEPTHS` deep, at the start of their line. A node
/// right after a comment keeps the comment with it: the comment's start carries the level.
fn syntax_points(
    text: &str,
    language: Language,
    grammar: tree_sitter_language::LanguageFn,
    points: &mut Vec<(usize, u8)>,
) {
    let tree = PARSERS.with(|parsers| {
        let mut parsers = parsers.borrow_mut();
        let parser = match parsers.entry(language) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut parser = tree_sitter::Parser::new();
                parser.set_language(&grammar.into()).ok()?;
                e.insert(parser)
            }
        };
        parser.parse(text, None)
    });
    let Some(tree) = tree else {
        return;
    };
    let bytes = text.as_bytes();
    let mut cursor = tree.walk();
    let mut depth = 0usize;
    // Per depth: whether the previous sibling was a comment, and the row it ended on.
    let mut previous: [Option<(bool, usize)>; level::SYNTAX_DEPTHS as usize + 1] =
        Default::default();
    // Depth-first over the tree, down to the deepest ranked depth.
    'walk: loop {
        if depth < level::SYNTAX_DEPTHS as usize && cursor.goto_first_child() {
            depth += 1;
            previous[depth] = None;
        } else {
            loop {
                if cursor.goto_next_sibling() {
                    break;
                }
                if !cursor.goto_parent() || depth <= 1 {
                    break 'walk;
                }
                depth -= 1;
            }
        }
        let node = cursor.node();
        let start = node.start_byte();
        let start_row = node.start_position().row;
        let column = node.start_position().column;
        let follows_comment = previous[depth]
            .is_some_and(|(is_comment, end_row)| is_comment && end_row + 1 >= start_row);
        previous[depth] = Some((node.kind().contains("comment"), node.end_position().row));
        // Only nodes that begin their line (after indentation) are cut points; a long
        // indentation is not worth scanning.
        if start_row == 0 || column > 256 || column > start {
            continue;
        }
        let line_start = start - column;
        if !bytes[line_start..start]
            .iter()
            .all(|b| *b == b' ' || *b == b'\t')
        {
            continue;
        }
        let lvl = if follows_comment {
            level::LINE
        } else {
            level::SYNTAX_MIN + level::SYNTAX_DEPTHS - depth as u8
        };
        points.push((line_start, lvl));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::TokenizerKind;
    use std::str::FromStr;

    fn chunker(max: usize) -> Chunker {
        Chunker::new(TokenizerKind::Cl100kBase, max).unwrap()
    }

    /// Checks the invariants every splitter promises and returns the chunk texts.
    fn check<'a>(chunker: &Chunker, text: &'a str, language: Language) -> Vec<&'a str> {
        let chunks = chunker.chunk(text, language).unwrap();
        let mut covered = vec![false; text.len()];
        let mut last_end = 0;
        for c in &chunks {
            assert!(c.start >= last_end, "overlap or disorder at {c:?}");
            assert!(c.num_tokens <= chunker.max_tokens(), "{c:?} over budget");
            assert_eq!(
                c.num_tokens,
                chunker.count_tokens(&text[c.start..c.end]).unwrap()
            );
            covered[c.start..c.end].iter_mut().for_each(|b| *b = true);
            last_end = c.end;
        }
        for (i, b) in text.bytes().enumerate() {
            if !b.is_ascii_whitespace() {
                assert!(covered[i], "byte {i} ({:?}) not covered", b as char);
            }
        }
        chunks.iter().map(|c| &text[c.start..c.end]).collect()
    }

    #[test]
    fn markdown_splits_at_headings() {
        let section = "Some words about the topic, repeated to fill. ".repeat(12);
        let text = format!("# One\n\n{section}\n\n## Two\n\n{section}\n\n## Three\n\n{section}\n");
        let pieces = check(&chunker(160), &text, Language::Markdown);
        assert!(pieces.len() >= 3, "{pieces:?}");
        assert!(pieces[0].starts_with("# One"));
        assert!(pieces.iter().any(|p| p.starts_with("## Two")));
        assert!(pieces.iter().any(|p| p.starts_with("## Three")));
    }

    #[test]
    fn python_splits_at_definitions() {
        let body = "    x = compute(a, b, c)\n".repeat(20);
        let text = format!("import os\n\ndef first():\n{body}\n\ndef second():\n{body}\n");
        let pieces = check(&chunker(260), &text, Language::Python);
        assert_eq!(pieces.len(), 2, "{pieces:?}");
        assert!(
            pieces.iter().any(|p| p.starts_with("def second():")),
            "{pieces:?}"
        );
    }

    #[test]
    fn every_grammar_loads_and_chunks() {
        let samples = [
            (Language::JavaScript, "function f(a) { return a + 1; }\n"),
            (
                Language::TypeScript,
                "function f(a: number): number { return a; }\n",
            ),
            (Language::Tsx, "const A = () => <div>hi</div>;\n"),
            (Language::Php, "<?php\nfunction f($a) { return $a; }\n"),
            (Language::Rust, "fn f(a: u8) -> u8 { a }\n"),
            (Language::C, "int f(int a) { return a; }\n"),
            (Language::Cpp, "template<class T> T f(T a) { return a; }\n"),
            (Language::Java, "class A { int f(int a) { return a; } }\n"),
            (
                Language::Go,
                "package main\nfunc f(a int) int { return a }\n",
            ),
            (Language::CSharp, "class A { int F(int a) { return a; } }\n"),
        ];
        let c = chunker(64);
        for (language, text) in samples {
            assert!(language.grammar().is_some());
            let pieces = check(&c, text, language);
            assert_eq!(pieces, vec![text.trim()], "{language:?}");
        }
    }

    #[test]
    fn markup_splits_at_sections() {
        let para = "  <para>Some words about the function, repeated to fill. ".repeat(6);
        let text = format!(
            "<refentry xml:id=\"f\">\n <refsect1 role=\"description\">\n{para}</para>\n </refsect1>\n \
             <refsect1 role=\"parameters\">\n{para}</para>\n </refsect1>\n</refentry>\n"
        );
        let pieces = check(&chunker(120), &text, Language::Xml);
        assert!(pieces.len() >= 2, "{pieces:?}");
        assert!(
            pieces
                .iter()
                .any(|p| p.starts_with("<refsect1 role=\"parameters\">")),
            "{pieces:?}"
        );
        let html = format!("<h1>A</h1>\n<p>{para}</p>\n<h2>B</h2>\n<p>{para}</p>\n");
        let pieces = check(&chunker(120), &html, Language::Html);
        assert!(
            pieces.iter().any(|p| p.starts_with("<h2>B</h2>")),
            "{pieces:?}"
        );
    }

    #[test]
    fn rst_splits_at_section_titles() {
        let para = "Some words about the topic, repeated to fill the budget. ".repeat(8);
        let text =
            format!("Title\n=====\n\n{para}\n\nUsage\n-----\n\n{para}\n\nMore\n----\n\n{para}\n");
        let pieces = check(&chunker(150), &text, Language::Rst);
        assert!(
            pieces.iter().any(|p| p.starts_with("Usage\n-----")),
            "{pieces:?}"
        );
        assert!(
            pieces.iter().any(|p| p.starts_with("More\n----")),
            "{pieces:?}"
        );
    }

    #[test]
    fn counts_match_tiktoken() {
        // Values from tiktoken (cl100k_base / o200k_base).
        let c = chunker(64);
        let count = |c: &Chunker, text: &str| c.count_tokens(text).unwrap();
        assert_eq!(count(&c, "hello world"), 2);
        assert_eq!(count(&c, "An apple a"), 3);
        let text = "fn main() {\n    println!(\"héllo 日本\");\n}\n";
        assert_eq!(
            count(&c, text),
            TokenizerKind::Cl100kBase.tokenizer().count(text)
        );
        let o = Chunker::new(TokenizerKind::O200kBase, 64).unwrap();
        assert_eq!(
            count(&o, text),
            TokenizerKind::O200kBase.tokenizer().count(text)
        );
        // The memo must not mix vocabularies.
        assert_eq!(count(&c, text), count(&c, text));
    }

    #[test]
    fn parse_errors_lose_nothing() {
        let text = "def broken(:\n    ))) ünïcödé \"unterminated\n\nclass {{{\n".repeat(30);
        check(&chunker(50), &text, Language::Python);
    }

    #[test]
    fn giant_single_line_is_split_within_budget() {
        let text = "token ".repeat(20_000);
        let pieces = check(&chunker(512), &text, Language::Text);
        assert!(pieces.len() > 10);
    }

    #[test]
    fn non_ascii_and_crlf_offsets_are_bytes() {
        let text = "Ünïcödé heading\r\n\r\n日本語のテキスト。\r\n\r\nemoji 🎉 line\r\n".repeat(40);
        let pieces = check(&chunker(40), &text, Language::Text);
        assert!(pieces.iter().all(|p| !p.is_empty()));
    }

    #[test]
    fn whitespace_only_yields_nothing() {
        let chunks = chunker(64).chunk(" \n\n\t \r\n", Language::Text).unwrap();
        assert!(chunks.is_empty());
    }

    #[test]
    fn languages_from_names() {
        assert_eq!(Language::from_file_name("a.PY"), Language::Python);
        assert_eq!(Language::from_file_name("x.blade.php"), Language::Php);
        assert_eq!(Language::from_file_name("README.md"), Language::Markdown);
        assert_eq!(Language::from_file_name("index.rst"), Language::Rst);
        assert_eq!(Language::from_file_name("Makefile"), Language::Text);
    }

    #[test]
    fn rejects_tiny_budgets_and_unknown_tokenizers() {
        assert!(Chunker::new(TokenizerKind::Cl100kBase, 4).is_err());
        assert!(TokenizerKind::from_str("gpt2").is_err());
        assert_eq!(
            TokenizerKind::from_str("o200k_base").unwrap(),
            TokenizerKind::O200kBase
        );
    }
}
