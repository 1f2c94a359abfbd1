//! The corpus stage (paper §3.2): repositories -> documents.
//!
//! Files are walked per repository (see [`super::repo::walk`]), read and chunked in parallel in
//! batches, and written in sorted path order, so the output is byte-identical whatever the thread
//! count. The output is written to a temporary file and renamed when complete.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::Serialize;

use super::chunk::{Chunker, Language};
use super::notebook::notebook_text;
use super::repo::{RepoSpec, SkipReason, read_commit_id, read_file_capped, skip_by_content, walk};
use super::tokenizer::{TokenCounter, TokenizerSpec};
use crate::dataset::{AtomicWriter, Document, DocumentMetadata, write_json_atomic};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// Default per-file size cap: 1 MB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1_000_000;
/// Default token budget per document, as the reference's released code.
pub const DEFAULT_MAX_TOKENS: usize = 2048;

/// Files read and chunked together; bounds memory to one batch of documents.
const FILES_PER_BATCH: usize = 256;

/// Settings of the corpus stage.
#[derive(Debug, Clone, Serialize)]
pub struct CorpusConfig {
    /// Repositories to collect, in output order.
    pub repos: Vec<RepoSpec>,
    /// Token budget per document.
    pub max_tokens: usize,
    /// Tokenizer counting the budget (`cl100k_base`, `o200k_base` or `hf:PATH`).
    pub tokenizer: TokenizerSpec,
    /// Files larger than this are skipped.
    pub max_file_bytes: u64,
    /// Gitignore-style globs, relative to each checkout, of paths to leave out.
    pub exclude: Vec<String>,
    /// Files or directories never read as documents: the outputs of the run, when they lie
    /// inside a checkout (a corpus chunked into the next corpus would grow every run). Not part
    /// of the settings a corpus depends on.
    #[serde(skip)]
    pub outputs: Vec<PathBuf>,
}

impl CorpusConfig {
    /// A configuration with the defaults (2048 tokens of cl100k_base, 1 MB files).
    pub fn new(repos: Vec<RepoSpec>) -> Self {
        Self {
            repos,
            max_tokens: DEFAULT_MAX_TOKENS,
            tokenizer: TokenizerSpec::default(),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            exclude: Vec::new(),
            outputs: Vec::new(),
        }
    }
}

/// What the stage did with one repository.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepoSummary {
    /// `owner/name`.
    pub repo: String,
    /// The checkout.
    pub path: PathBuf,
    /// HEAD commit, when the checkout has a `.git`.
    pub commit_id: Option<String>,
    /// Files that produced at least one document.
    pub files_chunked: u64,
    /// Files (and hidden directories, symlinks) skipped, all reasons together.
    pub files_skipped: u64,
    /// Documents written.
    pub documents: u64,
    /// Tokens over all documents.
    pub tokens: u64,
    /// Bytes of text over all documents.
    pub bytes: u64,
    /// Skips by reason.
    pub skipped: BTreeMap<SkipReason, u64>,
    /// Documents per splitter language.
    pub documents_by_language: BTreeMap<String, u64>,
}

impl RepoSummary {
    fn skip(&mut self, reason: SkipReason, count: u64) {
        *self.skipped.entry(reason).or_default() += count;
        self.files_skipped += count;
    }
}

/// What the stage did overall: written to `--summary`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CorpusSummary {
    /// Tokenizer used for the budget (`cl100k_base`, `o200k_base` or `hf:PATH`).
    pub tokenizer: String,
    /// SHA-256 of the tokenizer file, for `hf:` tokenizers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer_sha256: Option<String>,
    /// Token budget per document.
    pub max_tokens: usize,
    /// Per-file size cap.
    pub max_file_bytes: u64,
    /// One entry per repository, in input order.
    pub repos: Vec<RepoSummary>,
    /// Documents over all repositories.
    pub documents: u64,
    /// Tokens over all repositories.
    pub tokens: u64,
    /// Files chunked over all repositories.
    pub files_chunked: u64,
    /// Skips by reason over all repositories.
    pub skipped: BTreeMap<SkipReason, u64>,
}

/// The result of reading and chunking one file.
enum FileOutcome {
    Skipped(SkipReason),
    /// The file's documents and their total token count.
    Chunked(Vec<Document>, u64),
    /// The tokenizer could not encode the file (only a Hugging Face tokenizer can fail).
    Failed(Error),
}

/// Builds the corpus of `config.repos` into `out` (JSONL, reference corpus schema) and returns
/// the summary (`-` is standard output). Checks every repository path before doing any work.
pub fn build_corpus(
    config: &CorpusConfig,
    out: &Path,
    progress: &dyn Progress,
) -> Result<CorpusSummary> {
    // An output inside a checkout would be chunked into the next run's corpus.
    let mut config = config.clone();
    if out.as_os_str() != "-" {
        config.outputs.push(out.to_path_buf());
    }
    let mut writer = AtomicWriter::create_or_stdout(out)?;
    let summary = chunk_repositories(&config, progress, |doc| writer.write_json_line(doc))?;
    writer.commit()?;
    Ok(summary)
}

/// Writes `summary` as pretty JSON, atomically.
pub fn write_summary(summary: &CorpusSummary, path: &Path) -> Result<()> {
    write_json_atomic(path, summary)
}

/// Chunks every repository of `config`, handing each document to `sink` in output order (repos
/// in input order, files in sorted path order, chunks in file order).
pub fn chunk_repositories(
    config: &CorpusConfig,
    progress: &dyn Progress,
    mut sink: impl FnMut(&Document) -> Result<()>,
) -> Result<CorpusSummary> {
    if config.repos.is_empty() {
        return Err(Error::invalid(Setting::Repository, "no repository given"));
    }
    let mut seen = std::collections::HashSet::new();
    for repo in &config.repos {
        repo.check()?;
        if !seen.insert(repo.name.as_str()) {
            return Err(Error::invalid(
                Setting::Repository,
                format!("{} given twice (document ids would collide)", repo.name),
            ));
        }
    }
    let counter = TokenCounter::load(&config.tokenizer)?;
    let mut summary = CorpusSummary {
        tokenizer: config.tokenizer.to_string(),
        tokenizer_sha256: counter.file_sha256().map(str::to_string),
        max_tokens: config.max_tokens,
        max_file_bytes: config.max_file_bytes,
        ..Default::default()
    };
    let chunker = Chunker::new(counter, config.max_tokens)?;
    for repo in &config.repos {
        let repo_summary = chunk_repository(
            repo,
            &chunker,
            config.max_file_bytes,
            &config.exclude,
            &config.outputs,
            progress,
            &mut sink,
        )?;
        summary.documents += repo_summary.documents;
        summary.tokens += repo_summary.tokens;
        summary.files_chunked += repo_summary.files_chunked;
        for (reason, n) in &repo_summary.skipped {
            *summary.skipped.entry(*reason).or_default() += n;
        }
        summary.repos.push(repo_summary);
    }
    Ok(summary)
}

/// The paths of `outputs` that lie inside the checkout `root`, relative to it (`outputs` that
/// do not exist yet are placed by their parent directory).
fn outputs_inside(root: &Path, outputs: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(root) = std::fs::canonicalize(root) else {
        return Vec::new();
    };
    outputs
        .iter()
        .filter_map(|out| {
            let resolved = crate::dataset::resolve_output_path(out)?;
            resolved.strip_prefix(&root).ok().map(Path::to_path_buf)
        })
        .collect()
}

fn chunk_repository(
    repo: &RepoSpec,
    chunker: &Chunker,
    max_file_bytes: u64,
    exclude: &[String],
    outputs: &[PathBuf],
    progress: &dyn Progress,
    sink: &mut impl FnMut(&Document) -> Result<()>,
) -> Result<RepoSummary> {
    let commit_id = read_commit_id(&repo.path);
    let mut walked = walk(&repo.path, max_file_bytes, exclude)?;
    let inside = outputs_inside(&repo.path, outputs);
    walked
        .files
        .retain(|file| !inside.iter().any(|out| Path::new(file).starts_with(out)));
    for problem in &walked.unreadable {
        tracing::warn!(repo = %repo.name, "skipped unreadable entry: {problem}");
    }
    let mut summary = RepoSummary {
        repo: repo.name.clone(),
        path: repo.path.clone(),
        commit_id: commit_id.clone(),
        ..Default::default()
    };
    for (reason, n) in &walked.skipped {
        summary.skip(*reason, *n);
    }
    progress.begin(&repo.name, Some(walked.files.len() as u64));
    for batch in walked.files.chunks(FILES_PER_BATCH) {
        let outcomes: Vec<FileOutcome> = batch
            .par_iter()
            .map(|rel| {
                let outcome = chunk_file(repo, commit_id.as_deref(), rel, chunker, max_file_bytes);
                progress.advance(1);
                outcome
            })
            .collect();
        for (rel, outcome) in batch.iter().zip(outcomes) {
            match outcome {
                FileOutcome::Skipped(reason) => {
                    if reason == SkipReason::Unreadable {
                        tracing::warn!(repo = %repo.name, path = %rel, "unreadable file skipped");
                    }
                    summary.skip(reason, 1);
                }
                FileOutcome::Failed(e) => {
                    return Err(Error::Resource {
                        what: format!("{}/{rel}", repo.name),
                        message: e.to_string(),
                    });
                }
                FileOutcome::Chunked(docs, tokens) => {
                    summary.tokens += tokens;
                    summary.files_chunked += 1;
                    for doc in &docs {
                        summary.documents += 1;
                        summary.bytes += doc.text.len() as u64;
                        let language = doc.metadata.language.clone().unwrap_or_default();
                        *summary.documents_by_language.entry(language).or_default() += 1;
                        sink(doc)?;
                    }
                }
            }
        }
    }
    progress.finish();
    Ok(summary)
}

fn chunk_file(
    repo: &RepoSpec,
    commit_id: Option<&str>,
    rel: &str,
    chunker: &Chunker,
    max_file_bytes: u64,
) -> FileOutcome {
    let bytes = match read_file_capped(&repo.path.join(rel), max_file_bytes) {
        Ok(b) => b,
        Err(reason) => return FileOutcome::Skipped(reason),
    };
    let file_name = rel.rsplit('/').next().unwrap_or(rel);
    if let Some(reason) = skip_by_content(file_name, &bytes) {
        return FileOutcome::Skipped(reason);
    }
    // skip_by_content has checked UTF-8; this conversion cannot fail but is handled anyway.
    let Ok(mut text) = String::from_utf8(bytes) else {
        return FileOutcome::Skipped(SkipReason::NotUtf8);
    };
    let language = Language::from_file_name(file_name);
    if language == Language::Notebook {
        match notebook_text(&text) {
            Some(rendered) if !rendered.trim().is_empty() => text = rendered,
            Some(_) => return FileOutcome::Skipped(SkipReason::Empty),
            None => return FileOutcome::Skipped(SkipReason::BadNotebook),
        }
    }
    let url = github_url(&repo.name, commit_id, rel);
    let chunks = match chunker.chunk(&text, language) {
        Ok(chunks) => chunks,
        Err(e) => return FileOutcome::Failed(e),
    };
    let tokens = chunks.iter().map(|c| c.num_tokens as u64).sum();
    let docs = chunks
        .into_iter()
        .map(|c| Document {
            id: Document::make_id(&repo.name, rel, c.start, c.end),
            title: String::new(),
            text: text[c.start..c.end].to_string(),
            metadata: DocumentMetadata {
                repo: Some(repo.name.clone()),
                path: Some(rel.to_string()),
                url: Some(url.clone()),
                start_byte: Some(c.start as u64),
                end_byte: Some(c.end as u64),
                commit_id: commit_id.map(str::to_string),
                language: Some(language.name().to_string()),
            },
        })
        .collect();
    FileOutcome::Chunked(docs, tokens)
}

/// `https://github.com/{repo}/blob/{commit or HEAD}/{path}`, the path percent-encoded.
pub fn github_url(repo: &str, commit_id: Option<&str>, path: &str) -> String {
    let mut url = format!(
        "https://github.com/{repo}/blob/{}/",
        commit_id.unwrap_or("HEAD")
    );
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-_.~+@!$&'()*,;=:".contains(&byte) {
            url.push(byte as char);
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_encoded() {
        assert_eq!(
            github_url("a/b", Some("abc"), "docs/my file#1.md"),
            "https://github.com/a/b/blob/abc/docs/my%20file%231.md"
        );
        assert_eq!(
            github_url("a/b", None, "é.md"),
            "https://github.com/a/b/blob/HEAD/%C3%A9.md"
        );
    }
}
