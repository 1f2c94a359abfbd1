//! Token-bounded, structure-aware chunking of one file's text.
//!
//! Every chunk is a byte range of the input (`text[start..end]`), at most `max_tokens` tokens of
//! the chosen tiktoken vocabulary, trimmed of surrounding whitespace. Chunks never overlap and,
//! together, cover every non-whitespace byte of the input. Markdown splits by headings, then
//! blocks; source code by syntax (tree-sitter); HTML/XML by elements; anything else by runs of
//! blank lines, then lines, sentences, words and, for a pathological 5 MB line, characters.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use text_splitter::{ChunkConfig, ChunkSizer, CodeSplitter, MarkdownSplitter, TextSplitter};
use tiktoken_rs::CoreBPE;

use crate::error::{Error, Result};

/// The GPT tokenizers whose token counts bound a chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenizerKind {
    /// GPT-4 / GPT-3.5 vocabulary: what the reference chunker counts with.
    #[default]
    Cl100kBase,
    /// GPT-4o vocabulary.
    O200kBase,
}

impl TokenizerKind {
    /// Parses `cl100k_base` or `o200k_base`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "cl100k_base" => Ok(TokenizerKind::Cl100kBase),
            "o200k_base" => Ok(TokenizerKind::O200kBase),
            other => Err(Error::invalid(
                "--tokenizer",
                format!("`{other}` (expected cl100k_base or o200k_base)"),
            )),
        }
    }

    /// The vocabulary's name.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerKind::Cl100kBase => "cl100k_base",
            TokenizerKind::O200kBase => "o200k_base",
        }
    }

    /// Loads the vocabulary (shipped inside tiktoken-rs; no network).
    pub fn load(self) -> Result<CoreBPE> {
        let bpe = match self {
            TokenizerKind::Cl100kBase => tiktoken_rs::cl100k_base(),
            TokenizerKind::O200kBase => tiktoken_rs::o200k_base(),
        };
        bpe.map_err(|e| Error::Resource {
            what: format!("tokenizer {}", self.name()),
            message: e.to_string(),
        })
    }
}

impl fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

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
    /// Anything else: reStructuredText, plain text, config files, unknown code.
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
            Language::Html => tree_sitter_html::LANGUAGE,
            Language::Xml => tree_sitter_xml::LANGUAGE_XML,
            Language::Markdown | Language::Notebook | Language::Text => return None,
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
    /// Tokens in `text[start..end]`.
    pub num_tokens: usize,
}

/// Counts tokens for the splitter. Any text shorter (in bytes) than the budget is reported by its
/// byte length without tokenizing: a byte-level BPE token covers at least one byte, so the
/// verdict ("fits, and more could be added") is the same as the exact count's, at no cost.
struct BoundedTokenCounter {
    bpe: Arc<CoreBPE>,
    max_tokens: usize,
}

impl ChunkSizer for BoundedTokenCounter {
    fn size(&self, chunk: &str) -> usize {
        if chunk.len() < self.max_tokens {
            chunk.len()
        } else {
            self.bpe.encode_ordinary(chunk).len()
        }
    }
}

/// Splits texts into token-bounded chunks. Cheap to share across threads.
#[derive(Clone)]
pub struct Chunker {
    bpe: Arc<CoreBPE>,
    tokenizer: TokenizerKind,
    max_tokens: usize,
}

impl fmt::Debug for Chunker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunker")
            .field("tokenizer", &self.tokenizer)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

impl Chunker {
    /// A chunker producing chunks of at most `max_tokens` tokens of `tokenizer`.
    pub fn new(tokenizer: TokenizerKind, max_tokens: usize) -> Result<Self> {
        if max_tokens < 16 {
            return Err(Error::invalid(
                "--max-tokens",
                format!("{max_tokens} is too small (at least 16)"),
            ));
        }
        Ok(Self {
            bpe: Arc::new(tokenizer.load()?),
            tokenizer,
            max_tokens,
        })
    }

    /// The token budget per chunk.
    pub fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    /// The tokenizer counting the budget.
    pub fn tokenizer(&self) -> TokenizerKind {
        self.tokenizer
    }

    /// Number of tokens in `text` (no special tokens).
    pub fn count_tokens(&self, text: &str) -> usize {
        self.bpe.encode_ordinary(text).len()
    }

    /// Splits `text` as `language`. Never fails: a grammar that cannot be loaded falls back to the
    /// plain-text splitter, and a parse error only makes the syntax tree coarser.
    pub fn chunk(&self, text: &str, language: Language) -> Vec<Chunk> {
        let config = || {
            ChunkConfig::new(self.max_tokens)
                .with_trim(true)
                .with_sizer(BoundedTokenCounter {
                    bpe: Arc::clone(&self.bpe),
                    max_tokens: self.max_tokens,
                })
        };
        let ranges: Vec<(usize, &str)> = match language {
            Language::Markdown | Language::Notebook => MarkdownSplitter::new(config())
                .chunk_indices(text)
                .collect(),
            Language::Text => TextSplitter::new(config()).chunk_indices(text).collect(),
            code => match code.grammar().map(|g| CodeSplitter::new(g, config())) {
                Some(Ok(splitter)) => splitter.chunk_indices(text).collect(),
                _ => TextSplitter::new(config()).chunk_indices(text).collect(),
            },
        };
        ranges
            .into_iter()
            .filter(|(_, piece)| !piece.trim().is_empty())
            .map(|(start, piece)| Chunk {
                start,
                end: start + piece.len(),
                num_tokens: self.count_tokens(piece),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunker(max: usize) -> Chunker {
        Chunker::new(TokenizerKind::Cl100kBase, max).unwrap()
    }

    /// Checks the invariants every splitter promises and returns the chunk texts.
    fn check<'a>(chunker: &Chunker, text: &'a str, language: Language) -> Vec<&'a str> {
        let chunks = chunker.chunk(text, language);
        let mut covered = vec![false; text.len()];
        let mut last_end = 0;
        for c in &chunks {
            assert!(c.start >= last_end, "overlap or disorder at {c:?}");
            assert!(c.num_tokens <= chunker.max_tokens(), "{c:?} over budget");
            assert_eq!(c.num_tokens, chunker.count_tokens(&text[c.start..c.end]));
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
        let pieces = check(&chunker(200), &text, Language::Python);
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
            (
                Language::Html,
                "<html><body><h1>T</h1><p>x</p></body></html>\n",
            ),
            (
                Language::Xml,
                "<?xml version=\"1.0\"?><book><title>T</title></book>\n",
            ),
        ];
        let c = chunker(64);
        for (language, text) in samples {
            assert!(language.grammar().is_some());
            let pieces = check(&c, text, language);
            assert_eq!(pieces, vec![text.trim()], "{language:?}");
        }
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
        assert!(chunker(64).chunk(" \n\n\t \r\n", Language::Text).is_empty());
    }

    #[test]
    fn languages_from_names() {
        assert_eq!(Language::from_file_name("a.PY"), Language::Python);
        assert_eq!(Language::from_file_name("x.blade.php"), Language::Php);
        assert_eq!(Language::from_file_name("README.md"), Language::Markdown);
        assert_eq!(Language::from_file_name("index.rst"), Language::Text);
        assert_eq!(Language::from_file_name("Makefile"), Language::Text);
    }

    #[test]
    fn rejects_tiny_budgets_and_unknown_tokenizers() {
        assert!(Chunker::new(TokenizerKind::Cl100kBase, 4).is_err());
        assert!(TokenizerKind::parse("gpt2").is_err());
        assert_eq!(
            TokenizerKind::parse("o200k_base").unwrap(),
            TokenizerKind::O200kBase
        );
    }
}
