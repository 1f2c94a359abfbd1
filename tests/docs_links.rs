//! The README and `docs/*.md` stay a small front door with working links: every relative link
//! (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`, `[label]: path`) names a file or
//! directory that exists and, for a Markdown target with an anchor, a heading of that file (as
//! GitHub derives heading anchors). Links inside code blocks and code spans are not links. Web
//! links are not fetched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The README's budget in lines (issue 18: the front door, everything else under `docs/`).
const README_MAX_LINES: usize = 250;

#[test]
fn relative_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut broken = Vec::new();
    for file in markdown_files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file.strip_prefix(root).unwrap().display().to_string();
        for link in links(&text) {
            if let Err(why) = check(&file, &link.target) {
                broken.push(format!("{rel}:{}: ({}) {why}", link.line, link.target));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn readme_is_short_and_links_every_doc() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines (at most {README_MAX_LINES}): move detail into docs/"
    );
    let targets: BTreeSet<String> = links(&readme)
        .into_iter()
        .map(|l| l.target.split('#').next().unwrap().to_string())
        .collect();
    for doc in markdown_files(root)
        .iter()
        .filter(|f| f.parent() != Some(root))
    {
        let rel = doc.strip_prefix(root).unwrap().display().to_string();
        assert!(targets.contains(&rel), "README.md does not link {rel}");
    }
    assert!(
        targets.contains("docs/limitations.md"),
        "README.md must link docs/limitations.md"
    );
}

/// `README.md` and every `docs/*.md`, sorted.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// Why a link from `file` to `target` is broken, if it is.
fn check(file: &Path, target: &str) -> Result<(), String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return Ok(());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let resolved = if path.is_empty() {
        file.to_path_buf()
    } else {
        file.parent().unwrap().join(path)
    };
    if !resolved.exists() {
        return Err(format!("{} does not exist", resolved.display()));
    }
    if let Some(anchor) = anchor
        && resolved.extension().is_some_and(|e| e == "md")
    {
        let text = std::fs::read_to_string(&resolved).unwrap();
        let anchors = heading_anchors(&text);
        if !anchors.contains(anchor) {
            return Err(format!(
                "no heading with anchor #{anchor} in {}",
                resolved.display()
            ));
        }
    }
    Ok(())
}

#[derive(Debug, PartialEq)]
struct Link {
    target: String,
    line: usize,
}

/// The links of a Markdown text, outside fenced code blocks and code spans.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    let mut fence: Option<&str> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            continue;
        }
        let line_no = n + 1;
        let code_free = without_code_spans(line);
        // Reference definitions: `[label]: target`.
        if let Some(rest) = code_free.trim_start().strip_prefix('[')
            && let Some((_, after)) = rest.split_once("]:")
            && let Some(target) = after.split_whitespace().next()
        {
            found.push(Link {
                target: target.trim_matches(['<', '>']).to_string(),
                line: line_no,
            });
            continue;
        }
        let mut rest = code_free.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            if !target.is_empty() {
                found.push(Link {
                    target: target.trim_matches(['<', '>']).to_string(),
                    line: line_no,
                });
            }
            rest = &after[end..];
        }
    }
    found
}

/// `line` with the contents of its code spans (`` `...` ``, ``` ``...`` ```) removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let ticks = rest[start..].chars().take_while(|&c| c == '`').count();
        let marker = &rest[start..start + ticks];
        let body = &rest[start + ticks..];
        match body.find(marker) {
            Some(end) => rest = &body[end + ticks..],
            None => {
                // An unclosed backtick is literal text.
                out.push_str(marker);
                rest = body;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The anchors GitHub gives the ATX headings of a Markdown text: lowercased, punctuation other
/// than `-` and `_` dropped, spaces turned into `-`; a repeated anchor gets `-1`, `-2`, ...
fn heading_anchors(text: &str) -> BTreeSet<String> {
    let mut anchors = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let slug = slug(trimmed[hashes..].trim());
        let mut anchor = slug.clone();
        let mut n = 0;
        while anchors.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        anchors.insert(anchor);
    }
    anchors
}

fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn link_parser_skips_code_and_reads_anchors() {
    let text = "See [a](docs/a.md#x-y) and `[not](a/link)`.\n\
                ```sh\n[also not](x)\n```\n\
                [ref]: ../b.md\n";
    let targets: Vec<String> = links(text).into_iter().map(|l| l.target).collect();
    assert_eq!(targets, ["docs/a.md#x-y", "../b.md"]);
    assert_eq!(
        slug("`freshstack index`, `search`, `retrieve` — the hybrid engine"),
        "freshstack-index-search-retrieve--the-hybrid-engine"
    );
    assert_eq!(slug("Decoders in bf16 on CPU"), "decoders-in-bf16-on-cpu");
    let anchors = heading_anchors("# A\n## A\n```\n# not a heading\n```\n");
    assert_eq!(
        anchors,
        BTreeSet::from(["a".to_string(), "a-1".to_string()])
    );
}
