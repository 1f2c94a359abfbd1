//! Dataset statistics (paper Table 3) computed from an exported dataset's `corpus.jsonl` and
//! `queries.jsonl`.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::dataset::{Document, Question, for_each_document};
use crate::error::Result;
use crate::eval::py_round;
use crate::progress::Progress;
use crate::source::{TokenCounter, TokenizerKind};

/// Documents of one repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoCount {
    /// `owner/name` (or the id prefix the document was attributed to).
    pub name: String,
    /// Number of corpus documents attributed to it.
    pub docs: usize,
}

/// The paper's Table 3 for one dataset, plus the counts the averages come from.
///
/// Averages and percentages are rounded to 4 decimals (Python rounding), so the JSON is the same
/// bytes on every machine; the counts are exact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statistics {
    /// The topic, from `manifest.json` when present.
    pub topic: Option<String>,
    /// Questions in `queries.jsonl`.
    pub num_queries: usize,
    /// Documents in `corpus.jsonl`.
    pub num_docs: usize,
    /// Repositories the corpus comes from (see [`Statistics::docs_per_repo`]).
    pub num_repos: usize,
    /// Documents per repository, sorted by name; manifest repositories without documents are
    /// listed with 0.
    pub docs_per_repo: Vec<RepoCount>,
    /// Nuggets over all questions.
    pub num_nuggets: usize,
    /// Nuggets per question.
    pub avg_nuggets_per_query: f64,
    /// The tokenizer counting lengths (`o200k_base` is GPT-4o's, the paper's).
    pub tokenizer: String,
    /// Tokens of `title + " " + text` per question.
    pub avg_query_tokens: f64,
    /// Tokens of the accepted answer per question.
    pub avg_answer_tokens: f64,
    /// Questions whose title or body contains code (see [`contains_code`]).
    pub queries_with_code: usize,
    /// Accepted answers that contain code.
    pub answers_with_code: usize,
    /// `100 * queries_with_code / num_queries`.
    pub pct_queries_with_code: f64,
    /// `100 * answers_with_code / num_queries`.
    pub pct_answers_with_code: f64,
    /// Documents supporting each nugget, averaged over all nuggets.
    pub avg_relevant_docs_per_nugget: f64,
    /// Distinct documents supporting at least one nugget of a question, averaged over all
    /// questions.
    pub avg_relevant_docs_per_query: f64,
}

/// True when `text` contains a code block: a fenced block, i.e. a line that starts with ```` ``` ````
/// or `~~~` after leading blanks and `>` quote markers (the Markdown the Stack Overflow import
/// writes for `<pre><code>`, also inside lists and quotes), or a raw HTML `<pre>` element (for
/// bodies still in HTML). Inline code (`` `x` ``, a lone `<code>`) does not count: the paper
/// counts code snippets, not identifiers.
pub fn contains_code(text: &str) -> bool {
    let fenced = text.lines().any(|line| {
        let rest = line.trim_start_matches([' ', '\t', '>']);
        rest.starts_with("```") || rest.starts_with("~~~")
    });
    fenced || has_pre_tag(text)
}

/// A `<pre>` or `<pre ...>` tag, any case.
fn has_pre_tag(text: &str) -> bool {
    let bytes = text.as_bytes();
    memchr::memchr_iter(b'<', bytes).any(|i| {
        let tag = &bytes[i + 1..];
        tag.len() >= 4
            && tag[..3].eq_ignore_ascii_case(b"pre")
            && (tag[3] == b'>' || tag[3].is_ascii_whitespace())
    })
}

/// The repository of a corpus document.
pub(crate) struct RepoAttribution {
    /// Manifest repositories, longest first (so `a/b-c` wins over `a/b` for `a/b-c/x`).
    manifest: Vec<String>,
}

impl RepoAttribution {
    pub(crate) fn new(manifest_repos: &[String]) -> Self {
        let mut manifest = manifest_repos.to_vec();
        manifest.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        manifest.dedup();
        Self { manifest }
    }

    /// In order: the manifest repository the id starts with (`{repo}/`), the document's
    /// `metadata.repo`, the `owner/name` of a `https://github.com/owner/name/...` url, else the
    /// id's text before the first `/`.
    pub(crate) fn repo_of<'a>(&'a self, doc: &'a Document) -> &'a str {
        if let Some(repo) = self.manifest.iter().find(|r| {
            doc.id.len() > r.len()
                && doc.id.starts_with(r.as_str())
                && doc.id[r.len()..].starts_with('/')
        }) {
            return repo;
        }
        if let Some(repo) = doc.metadata.repo.as_deref().filter(|r| !r.is_empty()) {
            return repo;
        }
        if let Some(repo) = doc.metadata.url.as_deref().and_then(github_repo) {
            return repo;
        }
        doc.id.split('/').next().unwrap_or(&doc.id)
    }
}

/// `owner/name` of `https://github.com/owner/name/...`.
fn github_repo(url: &str) -> Option<&str> {
    let rest = url
        .strip_prefix("https://github.com/")
        .or_else(|| url.strip_prefix("http://github.com/"))?;
    let owner_end = rest.find('/')?;
    let name_len = rest[owner_end + 1..]
        .find('/')
        .unwrap_or(rest.len() - owner_end - 1);
    (owner_end > 0 && name_len > 0).then(|| &rest[..owner_end + 1 + name_len])
}

/// Counts the documents of `corpus.jsonl` per repository. A malformed row is an error naming
/// `path:line`.
pub(crate) fn count_docs(
    path: &Path,
    manifest_repos: &[String],
    progress: &dyn Progress,
) -> Result<BTreeMap<String, usize>> {
    let attribution = RepoAttribution::new(manifest_repos);
    let mut counts: BTreeMap<String, usize> =
        manifest_repos.iter().map(|r| (r.clone(), 0)).collect();
    progress.begin("report: corpus", None);
    for_each_document(path, |line_no, doc| {
        let repo = attribution.repo_of(&doc);
        match counts.get_mut(repo) {
            Some(c) => *c += 1,
            None => {
                counts.insert(repo.to_string(), 1);
            }
        }
        if line_no.is_multiple_of(4096) {
            progress.advance(4096);
        }
        Ok(())
    })?;
    progress.finish();
    Ok(counts)
}

/// Table 3 from the questions and the per-repository document counts.
pub(crate) fn statistics(
    topic: Option<String>,
    queries: &[Question],
    docs_per_repo: BTreeMap<String, usize>,
    tokenizer: TokenizerKind,
) -> Result<Statistics> {
    let counter = TokenCounter::from(tokenizer);
    let num_queries = queries.len();
    let mut num_nuggets = 0usize;
    let mut query_tokens = 0usize;
    let mut answer_tokens = 0usize;
    let mut queries_with_code = 0usize;
    let mut answers_with_code = 0usize;
    let mut relevant_per_nugget_total = 0usize;
    let mut relevant_per_query_total = 0usize;
    for q in queries {
        query_tokens += counter.count(&q.query_text())?;
        answer_tokens += counter.count(&q.answer_text)?;
        queries_with_code +=
            usize::from(contains_code(&q.query_title) || contains_code(&q.query_text));
        answers_with_code += usize::from(contains_code(&q.answer_text));
        num_nuggets += q.nuggets.len();
        let mut query_relevant: BTreeSet<&str> = BTreeSet::new();
        for nugget in &q.nuggets {
            // As the reference's qrels: a document also listed as non-relevant is not relevant.
            let non_relevant: HashSet<&str> = nugget
                .non_relevant_corpus_ids
                .iter()
                .map(String::as_str)
                .collect();
            let relevant: BTreeSet<&str> = nugget
                .relevant_corpus_ids
                .iter()
                .map(String::as_str)
                .filter(|d| !non_relevant.contains(d))
                .collect();
            relevant_per_nugget_total += relevant.len();
            query_relevant.extend(relevant);
        }
        relevant_per_query_total += query_relevant.len();
    }
    let mean = |total: usize, n: usize| {
        if n == 0 {
            0.0
        } else {
            py_round(total as f64 / n as f64, 4)
        }
    };
    let pct = |count: usize| {
        if num_queries == 0 {
            0.0
        } else {
            py_round(100.0 * count as f64 / num_queries as f64, 4)
        }
    };
    let docs_per_repo: Vec<RepoCount> = docs_per_repo
        .into_iter()
        .map(|(name, docs)| RepoCount { name, docs })
        .collect();
    Ok(Statistics {
        topic,
        num_queries,
        num_docs: docs_per_repo.iter().map(|r| r.docs).sum(),
        num_repos: docs_per_repo.len(),
        docs_per_repo,
        num_nuggets,
        avg_nuggets_per_query: mean(num_nuggets, num_queries),
        tokenizer: tokenizer.name().to_string(),
        avg_query_tokens: mean(query_tokens, num_queries),
        avg_answer_tokens: mean(answer_tokens, num_queries),
        queries_with_code,
        answers_with_code,
        pct_queries_with_code: pct(queries_with_code),
        pct_answers_with_code: pct(answers_with_code),
        avg_relevant_docs_per_nugget: mean(relevant_per_nugget_total, num_nuggets),
        avg_relevant_docs_per_query: mean(relevant_per_query_total, num_queries),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::DocumentMetadata;

    #[test]
    fn code_rule() {
        assert!(contains_code("text\n```php\necho 1;\n```\n"));
        assert!(contains_code("- item\n\n    ```\n    x\n    ```"));
        assert!(contains_code("> ```js\n> x\n> ```"));
        assert!(contains_code("~~~\nx\n~~~"));
        assert!(contains_code(
            "<p>a</p><PRE class=\"x\"><code>x</code></PRE>"
        ));
        assert!(!contains_code("use `Route::get` here"));
        assert!(!contains_code("<p>call <code>x()</code></p>"));
        assert!(!contains_code("a <prefix> tag"));
        assert!(!contains_code("inline ``` not at line start"));
        assert!(!contains_code(""));
    }

    #[test]
    fn github_repo_from_url() {
        assert_eq!(
            github_repo("https://github.com/laravel/framework/blob/abc/src/a.php"),
            Some("laravel/framework")
        );
        assert_eq!(github_repo("https://github.com/a/b"), Some("a/b"));
        assert_eq!(github_repo("https://github.com/a"), None);
        assert_eq!(github_repo("https://example.com/a/b"), None);
    }

    fn head(id: &str, repo: Option<&str>, url: Option<&str>) -> Document {
        Document {
            id: id.to_string(),
            title: String::new(),
            text: String::new(),
            metadata: DocumentMetadata {
                repo: repo.map(str::to_string),
                url: url.map(str::to_string),
                ..DocumentMetadata::default()
            },
        }
    }

    #[test]
    fn attribution_order() {
        let a = RepoAttribution::new(&["laravel/docs".into(), "laravel/docs-extra".into()]);
        assert_eq!(
            a.repo_of(&head("laravel/docs-extra/x.md_0_1", None, None)),
            "laravel/docs-extra"
        );
        assert_eq!(
            a.repo_of(&head("laravel/docs/x.md_0_1", None, None)),
            "laravel/docs"
        );
        assert_eq!(
            a.repo_of(&head("laravel/docsx/a_0_1", Some("laravel/docsx"), None)),
            "laravel/docsx"
        );
        assert_eq!(
            a.repo_of(&head(
                "o/n/a_0_1",
                None,
                Some("https://github.com/o/n/blob/HEAD/a")
            )),
            "o/n"
        );
        assert_eq!(a.repo_of(&head("owner/name/a_0_1", None, None)), "owner");
        assert_eq!(a.repo_of(&head("plain_0_1", None, None)), "plain_0_1");
    }
}
