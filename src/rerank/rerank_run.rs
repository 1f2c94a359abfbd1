//! Reranking a run: the top `k` documents of each question are rescored by a [`Reranker`] and
//! reordered; the documents past `k` keep their first-stage order below them.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::cross_encoder::{CrossEncoder, Reranker, RerankerOptions};
use crate::dataset::{Run, ScoredDoc, read_documents, score_key};
use crate::embed::{read_embed_input, resolve_model};
use crate::error::{Error, Result, Setting};
use crate::progress::Progress;

/// The paper's reranking depth (§6: the top 50 of each first-stage run).
pub const DEFAULT_RERANK_DEPTH: usize = 50;

/// Pairs scored per call to the reranker: bounds the memory of tokenized pairs on big runs
/// (whole questions per call, so the batches do not depend on anything but the inputs).
const PAIRS_PER_CALL: usize = 16_384;

/// What a rerank did.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RerankSummary {
    /// Questions in the run.
    pub questions: usize,
    /// (question, document) pairs scored.
    pub pairs: usize,
    /// Pairs whose document was cut to fit the model.
    pub truncated: usize,
    /// Tokens fed to the model.
    pub tokens: usize,
}

/// The first-stage order of a ranking: score descending, ties in input order (as
/// [`Run::write_trec`] writes it).
fn first_stage_order(docs: &[ScoredDoc]) -> Vec<&ScoredDoc> {
    let mut order: Vec<&ScoredDoc> = docs.iter().collect();
    order.sort_by(|a, b| score_key(b.score).total_cmp(&score_key(a.score)));
    order
}

/// Reranks the top `k` of every ranking of `run`. `queries` maps question ids to query texts and
/// `documents` doc ids to texts; a question or document missing from them is an error.
///
/// Output per question: the top `k` by reranker score (ties keep the first-stage order) with
/// the reranker's scores, then the rest in first-stage order with scores strictly below (the
/// lowest reranked score minus 1, 2, ...), so any reader that sorts by score sees this order.
pub fn rerank_run(
    reranker: &dyn Reranker,
    run: &Run,
    queries: &HashMap<String, String>,
    documents: &HashMap<String, String>,
    k: usize,
    progress: &dyn Progress,
) -> Result<(Run, RerankSummary)> {
    if k == 0 {
        return Err(Error::invalid(Setting::RerankDepth, "must be at least 1"));
    }
    let mut summary = RerankSummary {
        questions: run.len(),
        ..RerankSummary::default()
    };
    let mut out = Run::new(format!("{}+rerank", run.name));
    let rankings = run.rankings();
    let mut start = 0;
    while start < rankings.len() {
        // Whole questions per call, up to PAIRS_PER_CALL pairs (at least one question).
        let mut end = start;
        let mut pairs_in_call = 0;
        while end < rankings.len()
            && (end == start || pairs_in_call + rankings[end].docs.len().min(k) <= PAIRS_PER_CALL)
        {
            pairs_in_call += rankings[end].docs.len().min(k);
            end += 1;
        }
        let mut pairs: Vec<(&str, &str)> = Vec::with_capacity(pairs_in_call);
        let mut orders = Vec::with_capacity(end - start);
        for ranking in &rankings[start..end] {
            let query = queries.get(&ranking.query_id).ok_or_else(|| {
                Error::invalid(
                    Setting::Queries,
                    format!(
                        "question {:?} of the run has no query text",
                        ranking.query_id
                    ),
                )
            })?;
            let order = first_stage_order(&ranking.docs);
            for doc in order.iter().take(k) {
                let text = documents.get(&doc.doc_id).ok_or_else(|| {
                    Error::invalid(
                        Setting::Corpus,
                        format!("document {:?} of the run is not in the corpus", doc.doc_id),
                    )
                })?;
                pairs.push((query.as_str(), text.as_str()));
            }
            orders.push(order);
        }
        let scored = reranker.score(&pairs, progress)?;
        summary.pairs += pairs.len();
        summary.truncated += scored.num_truncated;
        summary.tokens += scored.num_tokens;
        let mut next = 0;
        for (ranking, order) in rankings[start..end].iter().zip(orders) {
            let top = order.len().min(k);
            let scores = &scored.scores[next..next + top];
            next += top;
            let mut head: Vec<(usize, f32)> = scores.iter().copied().enumerate().collect();
            head.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let lowest = head.last().map_or(0.0, |&(_, s)| f64::from(s));
            let mut docs: Vec<ScoredDoc> = head
                .iter()
                .map(|&(i, s)| ScoredDoc {
                    doc_id: order[i].doc_id.clone(),
                    score: f64::from(s),
                })
                .collect();
            docs.extend(order[top..].iter().enumerate().map(|(j, d)| ScoredDoc {
                doc_id: d.doc_id.clone(),
                score: lowest - (j + 1) as f64,
            }));
            out.push_ranking(&ranking.query_id, docs);
        }
        start = end;
    }
    Ok((out, summary))
}

/// The files `freshstack rerank` reads and writes.
#[derive(Debug, Clone)]
pub struct RerankFiles {
    /// First-stage TREC run.
    pub run: PathBuf,
    /// Questions (reference schema) or BEIR queries (`_id`, `text`).
    pub queries: PathBuf,
    /// Corpus JSONL.
    pub corpus: PathBuf,
    /// The reranked TREC run to write (atomically).
    pub out: PathBuf,
    /// Last column of the written run.
    pub tag: String,
}

/// Reads the run, the query texts and the texts of the documents the run ranks in its top `k`,
/// reranks, and writes the reranked run (every document of the input run, atomically).
pub fn rerank_files(
    reranker: &dyn Reranker,
    files: &RerankFiles,
    k: usize,
    progress: &dyn Progress,
) -> Result<RerankSummary> {
    let run = Run::read_trec(&files.run)?;
    let input = read_embed_input(&files.queries)?;
    let queries: HashMap<String, String> = input.ids.into_iter().zip(input.texts).collect();
    let wanted = top_document_ids(&run, k);
    let documents = read_document_texts(&files.corpus, &wanted)?;
    let (reranked, summary) = rerank_run(reranker, &run, &queries, &documents, k, progress)?;
    reranked.write_trec(&files.out, &files.tag, usize::MAX)?;
    Ok(summary)
}

/// What [`rerank_file`] does: rerank `files.run`'s top `depth` with the cross-encoder `model`.
#[derive(Debug, Clone)]
pub struct RerankJob {
    /// A local model directory, or a Hugging Face id (`org/name[@revision]`) already in the
    /// local cache; never downloaded.
    pub model: String,
    /// Device, dtype, longest pair, batch budget.
    pub options: RerankerOptions,
    /// The run, queries and corpus read, and the run written.
    pub files: RerankFiles,
    /// Documents reranked per question (at least 1); the rest keep their order below them.
    pub depth: usize,
}

/// What [`rerank_file`] did.
#[derive(Debug, Clone)]
pub struct RerankReport {
    /// Questions, pairs, tokens.
    pub summary: RerankSummary,
    /// The cross-encoder's name.
    pub model: String,
    /// Longest (query, document) pair in tokens it ran with.
    pub max_length: usize,
    /// Seconds loading the model.
    pub load_seconds: f64,
    /// Seconds reading, reranking and writing, after loading.
    pub rerank_seconds: f64,
}

/// `freshstack rerank` as one call: checks the depth (setting `rerank depth`), loads the
/// cross-encoder and runs [`rerank_files`].
pub fn rerank_file(job: &RerankJob, progress: &dyn Progress) -> Result<RerankReport> {
    if job.depth == 0 {
        return Err(Error::invalid(Setting::RerankDepth, "must be at least 1"));
    }
    let files = resolve_model(&job.model)?;
    let started = std::time::Instant::now();
    let reranker = CrossEncoder::load(&files, &job.options)?;
    let load_seconds = started.elapsed().as_secs_f64();
    let summary = rerank_files(&reranker, &job.files, job.depth, progress)?;
    Ok(RerankReport {
        summary,
        model: reranker.name().to_string(),
        max_length: reranker.max_length(),
        load_seconds,
        rerank_seconds: started.elapsed().as_secs_f64() - load_seconds,
    })
}

/// The ids of the documents [`rerank_run`] with depth `k` will read: the top `k` of every
/// ranking in first-stage order.
pub fn top_document_ids(run: &Run, k: usize) -> HashSet<&str> {
    run.rankings()
        .iter()
        .flat_map(|r| first_stage_order(&r.docs).into_iter().take(k))
        .map(|d| d.doc_id.as_str())
        .collect()
}

/// The texts ([`crate::dataset::Document::model_text`], as `embed` reads them) of the corpus
/// documents in `wanted`, streaming the corpus.
pub fn read_document_texts(path: &Path, wanted: &HashSet<&str>) -> Result<HashMap<String, String>> {
    let documents = read_documents(path, wanted)?;
    Ok(documents
        .into_iter()
        .map(|(id, doc)| {
            let text = doc.model_text().into_owned();
            (id, text)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;
    use crate::rerank::PairScores;

    /// Scores a pair by the number of query words its document contains.
    struct WordOverlap;

    impl Reranker for WordOverlap {
        fn score(&self, pairs: &[(&str, &str)], _: &dyn Progress) -> Result<PairScores> {
            Ok(PairScores {
                scores: pairs
                    .iter()
                    .map(|(q, d)| q.split_whitespace().filter(|w| d.contains(w)).count() as f32)
                    .collect(),
                num_truncated: 0,
                num_tokens: pairs.len(),
            })
        }
        fn name(&self) -> &str {
            "overlap"
        }
    }

    #[test]
    fn reranks_the_top_k_and_keeps_the_tail_below() {
        let mut run = Run::new("bm25");
        for (doc, score) in [("a", 9.0), ("b", 8.0), ("c", 8.0), ("d", 5.0), ("e", 1.0)] {
            run.push("q1", doc, score);
        }
        let queries = HashMap::from([("q1".to_string(), "red blue".to_string())]);
        let documents: HashMap<String, String> = [
            ("a", "nothing"),
            ("b", "red"),
            ("c", "red blue"),
            ("d", "red blue green"),
            ("e", "x"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let (out, summary) =
            rerank_run(&WordOverlap, &run, &queries, &documents, 3, &NoProgress).unwrap();
        assert_eq!(summary.pairs, 3);
        let got: Vec<(&str, f64)> = out.rankings()[0]
            .docs
            .iter()
            .map(|d| (d.doc_id.as_str(), d.score))
            .collect();
        // d would win a full rerank but sits past k: it stays below the reranked three.
        assert_eq!(
            got,
            [("c", 2.0), ("b", 1.0), ("a", 0.0), ("d", -1.0), ("e", -2.0)]
        );
        let err = rerank_run(
            &WordOverlap,
            &run,
            &HashMap::new(),
            &documents,
            3,
            &NoProgress,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("q1"), "{err}");
        assert!(rerank_run(&WordOverlap, &run, &queries, &documents, 0, &NoProgress).is_err());
    }

    #[test]
    fn corpus_texts_and_ids_are_read_as_embed_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let corpus = dir.path().join("corpus.jsonl");
        std::fs::write(
            &corpus,
            "{\"_id\": \"a\", \"title\": \"\", \"text\": \"body a\"}\n\
             {\"_id\": 7, \"title\": \"T\", \"text\": \"body 7\"}\n\
             {\"_id\": \"b\", \"title\": \"only title\", \"text\": \" \"}\n\
             {\"_id\": \"skipped\", \"text\": \"x\"}\n",
        )
        .unwrap();
        let wanted: HashSet<&str> = ["a", "7", "b"].into_iter().collect();
        let texts = read_document_texts(&corpus, &wanted).unwrap();
        assert_eq!(texts.len(), 3);
        assert_eq!(texts["a"], "body a");
        assert_eq!(texts["7"], "T body 7");
        assert_eq!(texts["b"], "only title");
        // An id that is neither a string nor a number: the one id reader's message, with the line.
        std::fs::write(
            &corpus,
            "{\"_id\": \"a\", \"text\": \"t\"}\n{\"_id\": true}\n",
        )
        .unwrap();
        let err = read_document_texts(&corpus, &wanted)
            .unwrap_err()
            .to_string();
        assert!(err.contains("corpus.jsonl:2: "), "{err}");
        assert!(
            err.contains("invalid type: boolean `true`, expected a string or a number"),
            "{err}"
        );
    }
}
