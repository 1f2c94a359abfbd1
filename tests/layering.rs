//! The layering rule (docs/architecture.md): a module names only modules on lower levels of
//! [`LEVELS`], never one on its own level or above.
//!
//! Reads `src/**/*.rs` as text (nothing is compiled or linked, so this binary builds in
//! seconds): after dropping comments, string and character literals, every path that starts
//! with `crate::` or climbs to the crate root with `super::` is resolved to the top-level module
//! it names (items re-exported at the root, such as `crate::Error`, to the module they come
//! from). Known debts are listed in [`ALLOWED`]; an entry that no longer matches anything fails
//! the test too, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library's top-level modules from the bottom up. A module may name modules of lower levels
/// only; modules on one level are independent of each other. The binary (`src/main.rs` and
/// `src/cli/`) sits above all of them and is not scanned: it names the library as `freshstack::`.
const LEVELS: &[&[&str]] = &[
    // Utilities every layer uses: the error type and the progress callback.
    &["error", "progress"],
    // Numeric kernels: dot products, GEMM-side layers, quantized blocks, attention.
    &["kernels"],
    // GGUF files: the tokenizer their metadata describes (both engines read GGUF).
    &["gguf"],
    // The data model and its formats.
    &["dataset"],
    // The outside world coming in, encoders, index structures.
    &["source", "embed", "index"],
    // Cross-encoders: a second ranking stage over `embed`'s backbones.
    &["rerank"],
    // Retrievers, the engine, fusion.
    &["search"],
    // The LLM clients and the metrics.
    &["llm", "eval"],
    // The pipeline's stages and their orchestration; joining sharded stage outputs.
    &["pipeline", "merge"],
    // Statistics, pooling results, the HTML page.
    &["report"],
    // The published-dataset runner (draws its page with `report`'s charts).
    &["benchmark"],
    // Fuzzing entry points: one per parser of outside input, anywhere in the crate.
    &["fuzz"],
];

/// Known violations, each a debt to pay: (file, module it names, why it is there).
const ALLOWED: &[(&str, &str, &str)] = &[];

#[test]
fn lower_modules_never_name_higher_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = root.join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let level = levels();
    let declared = declared_modules(&lib);
    let listed: BTreeSet<String> = level.keys().cloned().collect();
    assert_eq!(
        declared, listed,
        "every top-level module of src/lib.rs must have a level in LEVELS (and only those)"
    );
    let reexports = root_reexports(&lib);

    let mut violations = Vec::new();
    let mut used_allowances = BTreeSet::new();
    for file in rust_files(&src) {
        let rel = relative(root, &file);
        let Some(module_path) = module_path(&rel) else {
            continue;
        };
        let from = module_path[0].clone();
        let text = std::fs::read_to_string(&file).unwrap();
        for reference in references(&text, &module_path) {
            let to = match resolve_root_name(&reference.name, &level, &reexports) {
                Ok(to) => to,
                Err(message) => panic!("{rel}:{}: {message}", reference.line),
            };
            if to == from || level[&to] < level[&from] {
                continue;
            }
            if let Some(i) = ALLOWED.iter().position(|(f, m, _)| *f == rel && *m == to) {
                used_allowances.insert(i);
                continue;
            }
            violations.push(format!(
                "{rel}:{}: `{from}` (level {}) names `{to}` (level {})",
                reference.line, level[&from], level[&to]
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "layering violations (a module may name only lower levels; see LEVELS in \
         tests/layering.rs and docs/architecture.md):\n{}",
        violations.join("\n")
    );
    let stale: Vec<_> = ALLOWED
        .iter()
        .enumerate()
        .filter(|(i, _)| !used_allowances.contains(i))
        .map(|(_, (file, module, _))| format!("{file} -> {module}"))
        .collect();
    assert!(
        stale.is_empty(),
        "allowed violations that no longer occur (remove them from ALLOWED): {stale:?}"
    );
}

/// Module name -> level index.
fn levels() -> BTreeMap<String, usize> {
    let mut map = BTreeMap::new();
    for (i, level) in LEVELS.iter().enumerate() {
        for name in *level {
            assert!(map.insert(name.to_string(), i).is_none(), "{name} twice");
        }
    }
    map
}

/// The `mod NAME;` / `pub mod NAME;` declarations of `src/lib.rs`.
fn declared_modules(lib: &str) -> BTreeSet<String> {
    let code = strip(lib);
    let tokens = tokenize(&code);
    let mut modules = BTreeSet::new();
    for window in tokens.windows(3) {
        if window[0].text == "mod" && window[2].text == ";" {
            modules.insert(window[1].text.clone());
        }
    }
    modules
}

/// Names re-exported at the crate root (`pub use MODULE::{A, B}` / `pub use MODULE::A`) -> the
/// top-level module they come from.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let code = strip(lib);
    let tokens = tokenize(&code);
    let mut map = BTreeMap::new();
    let mut i = 0;
    while i + 1 < tokens.len() {
        if tokens[i].text == "pub" && tokens[i + 1].text == "use" {
            let module = tokens[i + 2].text.clone();
            let end = (i..tokens.len()).find(|&j| tokens[j].text == ";").unwrap();
            // The last identifier of each `::`-path in the tree is the exported name.
            for j in i + 3..end {
                let t = &tokens[j].text;
                let next = tokens[j + 1].text.as_str();
                if is_ident(t) && next != "::" && tokens[j - 1].text != "as" {
                    map.insert(t.clone(), module.clone());
                }
                if t == "as" {
                    map.insert(tokens[j + 1].text.clone(), module.clone());
                }
            }
            i = end;
        }
        i += 1;
    }
    map
}

fn resolve_root_name(
    name: &str,
    level: &BTreeMap<String, usize>,
    reexports: &BTreeMap<String, String>,
) -> Result<String, String> {
    if level.contains_key(name) {
        return Ok(name.to_string());
    }
    reexports.get(name).cloned().ok_or_else(|| {
        format!(
            "`crate::{name}` is neither a top-level module nor a root re-export this test knows"
        )
    })
}

/// Every `.rs` file under `dir`, sorted.
/// The seeded generator and the legacy hash have one definition each: no other source file
/// carries SplitMix64's or FNV-1a's constants (a copy would drift from the one the formats and
/// samples depend on).
#[test]
fn one_splitmix64_and_one_fnv1a() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let owners = [
        ("9e3779b97f4a7c15", "src/dataset/seeded.rs"),
        ("bf58476d1ce4e5b9", "src/dataset/seeded.rs"),
        ("cbf29ce484222325", "src/dataset/fingerprint.rs"),
        ("00000100000001b3", "src/dataset/fingerprint.rs"),
    ];
    let mut copies = Vec::new();
    for path in rust_files(&root.join("src")) {
        let rel = relative(root, &path);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .to_lowercase()
            .replace('_', "");
        for (constant, owner) in owners {
            if rel != owner && text.contains(constant.trim_start_matches('0')) {
                copies.push(format!("{rel} holds {constant} (its home: {owner})"));
            }
        }
    }
    assert!(copies.is_empty(), "{copies:#?}");
}

/// Numeric kernels live in `src/kernels/` only: outside it no function with `dot` in its name
/// takes a float slice, and no file names an instruction set's intrinsics (`std::arch::x86_64`
/// and the like; feature detection and `#[target_feature]` wrappers that compile a caller for
/// one instruction set are fine).
#[test]
fn numeric_kernels_live_in_the_kernels_module() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut strays = Vec::new();
    for path in rust_files(&root.join("src")) {
        let rel = relative(root, &path);
        if rel.starts_with("src/kernels/") {
            continue;
        }
        let code = strip(&std::fs::read_to_string(&path).unwrap());
        for (n, line) in code.lines().enumerate() {
            for arch in [
                "arch::x86_64",
                "arch::x86::",
                "arch::aarch64",
                "arch::arm::",
            ] {
                if line.contains(arch) {
                    strays.push(format!("{rel}:{}: names {arch}", n + 1));
                }
            }
            if let Some(name) = dot_product_definition(line) {
                strays.push(format!("{rel}:{}: defines {name}", n + 1));
            }
        }
    }
    assert!(
        strays.is_empty(),
        "move these into src/kernels/: {strays:#?}"
    );
}

/// `Some(name)` when `line` defines a function whose name has `dot` as one of its `_` parts and
/// whose parameters take a slice of floats (`&[f32]`, `&[u16]` as f16 bits, `&[bf16]`...).
fn dot_product_definition(line: &str) -> Option<&str> {
    let at = line.find("fn ")?;
    let rest = &line[at + 3..];
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    let name = &rest[..end];
    let takes_floats = ["&[f32]", "&[f16]", "&[bf16]", "&[u16]", "&[f64]"]
        .iter()
        .any(|t| rest.contains(t));
    (name.split('_').any(|part| part == "dot") && takes_floats).then_some(name)
}

/// `path` under `root`, with `/` separators (`src/index/mod.rs`).
fn relative(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a library file (`src/index/hnsw.rs` -> `[index, hnsw]`,
/// `src/llm/native/mod.rs` -> `[llm, native]`); `None` for the crate roots and the binary.
fn module_path(rel: &str) -> Option<Vec<String>> {
    let rel = rel.strip_prefix("src/")?.strip_suffix(".rs")?;
    let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    match parts.first().map(String::as_str) {
        None | Some("lib" | "main" | "cli") => None,
        Some(_) => Some(parts),
    }
}

/// A top-level name reached from the crate root, with the line it is on.
#[derive(Debug, PartialEq)]
struct Reference {
    name: String,
    line: usize,
}

/// The crate-root names `text` (a file whose module path is `file_module`) refers to: the first
/// segment after `crate::`, or after as many `super::` as climb to the root (inline `mod x { .. }`
/// blocks counted). A `{ .. }` group after the root contributes each of its first segments.
fn references(text: &str, file_module: &[String]) -> Vec<Reference> {
    let code = strip(text);
    let tokens = tokenize(&code);
    let mut found = Vec::new();
    // Inline modules open at each brace depth: (depth at which its body opened).
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].text.as_str();
        match t {
            "{" => depth += 1,
            "}" => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "mod" if i + 2 < tokens.len() && tokens[i + 2].text == "{" => {
                inline.push(depth + 1);
            }
            _ => {}
        }
        let starts_path = i == 0 || tokens[i - 1].text != "::";
        let at_root = if starts_path && t == "crate" {
            Some(i + 1)
        } else if starts_path && t == "super" {
            let current_depth = file_module.len() + inline.len();
            let mut j = i;
            let mut supers = 0;
            while j + 1 < tokens.len() && tokens[j].text == "super" && tokens[j + 1].text == "::" {
                supers += 1;
                j += 2;
            }
            (supers == current_depth).then_some(j.saturating_sub(1))
        } else {
            None
        };
        if let Some(sep) = at_root
            && sep < tokens.len()
            && tokens[sep].text == "::"
            && sep + 1 < tokens.len()
        {
            let next = &tokens[sep + 1];
            if next.text == "{" {
                found.extend(group_heads(&tokens, sep + 1));
            } else if is_ident(&next.text) {
                found.push(Reference {
                    name: next.text.clone(),
                    line: next.line,
                });
            }
        }
        i += 1;
    }
    found
}

/// The first segment of each element of the `{ .. }` group opening at `open`.
fn group_heads(tokens: &[Token], open: usize) -> Vec<Reference> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut expect_head = true;
    for token in &tokens[open..] {
        match token.text.as_str() {
            "{" => {
                depth += 1;
                if depth > 1 {
                    expect_head = false;
                }
            }
            "}" => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            "," if depth == 1 => expect_head = true,
            t if expect_head && depth == 1 && is_ident(t) => {
                if t != "self" {
                    heads.push(Reference {
                        name: t.to_string(),
                        line: token.line,
                    });
                }
                expect_head = false;
            }
            _ => {}
        }
    }
    heads
}

#[derive(Debug)]
struct Token {
    text: String,
    line: usize,
}

fn is_ident(text: &str) -> bool {
    text.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers, `::` and single punctuation characters, with their line numbers.
fn tokenize(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let mut text: String = chars[start..i].iter().collect();
            // Raw identifiers (`r#type`) name the same thing as the plain word.
            if text == "r" && chars.get(i) == Some(&'#') {
                let start = i + 1;
                i = start;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                text = chars[start..i].iter().collect();
            }
            tokens.push(Token { text, line });
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push(Token {
                text: "::".into(),
                line,
            });
            i += 2;
        } else {
            tokens.push(Token {
                text: c.to_string(),
                line,
            });
            i += 1;
        }
    }
    tokens
}

/// `code` with comments (nested block comments included), string literals (raw and byte
/// strings included) and character literals blanked out; newlines are kept so line numbers
/// stay right.
fn strip(code: &str) -> String {
    let chars: Vec<char> = code.chars().collect();
    let mut out = String::with_capacity(code.len());
    // Blank `chars[from..to]`, keeping its newlines.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &chars[from..to.min(chars.len())] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let end = (i..chars.len())
                .find(|&j| chars[j] == '\n')
                .unwrap_or(chars.len());
            blank(&mut out, i, end);
            i = end;
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            let mut j = i;
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(end) = raw_string_end(&chars, i) {
            blank(&mut out, i, end);
            i = end;
        } else if c == '"' || (c == 'b' && next == Some('"') && !ident_before(&chars, i)) {
            let mut j = if c == 'b' { i + 2 } else { i + 1 };
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}', b'x' handled by the 'b' passing
            // through as an identifier) or a lifetime ('a, 'static): only the former closes.
            let close = if next == Some('\\') {
                // The escaped character is at i + 2 (itself a quote in '\''): close after it.
                (i + 3..chars.len().min(i + 12)).find(|&j| chars[j] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => {
                    blank(&mut out, i, end + 1);
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether `chars[i]` continues an identifier (so a `b` there is not a byte-string prefix).
fn ident_before(chars: &[char], i: usize) -> bool {
    i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_')
}

/// The end (exclusive) of a raw string literal (`r"..."`, `r#"..."#`, `br##"..."##`) starting
/// at `i`, if one starts there.
fn raw_string_end(chars: &[char], i: usize) -> Option<usize> {
    if ident_before(chars, i) {
        return None;
    }
    let mut j = i;
    if chars.get(j) == Some(&'b') {
        j += 1;
    }
    if chars.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = chars[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if chars.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < chars.len() {
        let closes =
            chars[j + 1..].len() >= hashes && chars[j + 1..][..hashes].iter().all(|&c| c == '#');
        if chars[j] == '"' && closes {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(chars.len())
}

// The scanner itself, on small inputs: what it must see and what it must not.

fn names(text: &str, module: &[&str]) -> Vec<String> {
    let module: Vec<String> = module.iter().map(|s| s.to_string()).collect();
    references(text, &module)
        .into_iter()
        .map(|r| r.name)
        .collect()
}

#[test]
fn scanner_sees_paths_groups_and_supers() {
    let text = "use crate::dataset::Run;\n\
                use crate::{index::Bm25Settings, search, self};\n\
                fn f() { let _ = crate::Error::x(); }\n\
                use super::super::embed::Encoder;\n\
                use super::sibling;\n";
    assert_eq!(
        names(text, &["pipeline", "pool"]),
        ["dataset", "index", "search", "Error", "embed"]
    );
    // One `super` from a top-level file reaches the root; inside `mod tests {}` it does not.
    assert_eq!(names("use super::eval::x;", &["merge"]), ["eval"]);
    assert_eq!(
        names(
            "mod tests { use super::*; use super::super::eval; }",
            &["merge"]
        ),
        ["eval"]
    );
}

#[test]
fn scanner_ignores_comments_strings_and_nested_paths() {
    let text = "// crate::report in a comment\n\
                /* crate::report /* nested */ crate::report */\n\
                /// [`crate::report::x`]\n\
                let s = \"crate::report\"; let r = r#\"crate::report \"quoted\"\"#;\n\
                let b = b\"crate::report\"; let c = '\"'; let q = '\\''; fn g<'a>(x: &'a str) {}\n\
                use other_crate::crate_like::crate_x; use std::crate_y;\n";
    assert!(names(text, &["index"]).is_empty());
    // Line numbers survive the blanking.
    let refs = references("/* a\nb */\nuse crate::llm;", &["pipeline".to_string()]);
    assert_eq!(
        refs,
        [Reference {
            name: "llm".into(),
            line: 3
        }]
    );
}
