//! The calibration kit (paper §5.2, Table 5): an expert reviews a sample of the LLM's nuggets
//! and judgments, and the review is scored with the paper's formulas.
//!
//! - [`sample`] draws questions from an exported dataset (seeded: the same dataset, count and
//!   seed give the same sample) with their answer and nuggets, and per question one positive
//!   (nugget, document) pair, as the paper samples "one positive document per question";
//!   [`write_review`] writes it as `sample.json` and `review.html`, one self-contained page
//!   (inline CSS and script, no external resource) on which the annotator ticks A
//!   (hallucinated) and B (minor or redundant) per nugget, counts C (nuggets missing) per
//!   question, labels each pair, and exports `annotations.json`.
//! - [`Annotations::read`] reads and checks an export (one line naming the file and the field
//!   on any error), [`Annotations::check_against`] checks it refers to a sample's ids, and
//!   [`score`] computes Table 5 per annotator, pooled over annotators, and the annotators'
//!   agreement (Cohen's kappa for two, Fleiss' for more).
//! - [`read_calibration_dir`]: the annotations kept in an exported dataset's `calibration/`
//!   directory, which the report shows in its "Calibration" section.
//!
//! The review page keeps the annotator's answers in the browser's `localStorage` (keyed by the
//! sample, so two samples never mix) until they are exported.

mod agreement;
mod annotations;
mod page;
pub(super) mod score;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::{AtomicWriter, QueryId, SplitMix64, read_documents, read_questions};
use crate::error::{Error, Result, Setting};

pub(crate) use agreement::read_positions;
pub use agreement::{
    AgreementCell, AgreementInputs, AgreementReport, PositionCell, QuestionCell, Unmatched,
    agreement,
};
pub use annotations::{
    Annotations, NuggetAnnotation, PairAnnotation, PairLabel, QuestionAnnotation,
};
pub use page::{render_post, render_review};
pub use score::{
    Agreement, AnnotatorScores, CalibrationScores, JudgmentQuality, Kappa, Metric, NuggetQuality,
    QuestionAgreement, QuestionScore, Table5, cohen_kappa, fleiss_kappa, fleiss_kappa_of_labels,
    question_score, score,
};

/// The `format` field of `sample.json`.
pub const SAMPLE_FORMAT: &str = "freshstack-calibration-sample";

/// The version of `sample.json` this code writes and reads.
pub const SAMPLE_VERSION: u32 = 1;

/// How many questions to sample, and the seed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleOptions {
    /// Questions to sample (all eligible ones when fewer); at least 1.
    pub questions: usize,
    /// The seed of the sampling generator.
    pub seed: u64,
}

impl Default for SampleOptions {
    /// 60 questions, as the paper; seed 0.
    fn default() -> Self {
        Self {
            questions: 60,
            seed: 0,
        }
    }
}

/// What was sampled for review: `REVIEW/sample.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CalibrationSample {
    /// Always [`SAMPLE_FORMAT`].
    pub format: String,
    /// Always [`SAMPLE_VERSION`].
    pub version: u32,
    /// The seed the sample was drawn with.
    pub seed: u64,
    /// How many questions were asked for.
    pub questions_requested: usize,
    /// Questions of the dataset with at least one nugget (those that can be sampled).
    pub questions_eligible: usize,
    /// The sampled questions, in query id order.
    pub questions: Vec<SampledQuestion>,
    /// One positive (nugget, document) pair per sampled question that has one, in the order
    /// of the questions.
    pub pairs: Vec<SampledPair>,
}

/// A sampled question with its accepted answer and nuggets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledQuestion {
    /// The question's id.
    pub query_id: QueryId,
    /// Its title.
    pub query_title: String,
    /// Its body (Markdown-like text, as exported).
    pub query_text: String,
    /// The accepted answer (Markdown-like text).
    pub answer_text: String,
    /// The question's page, when the dataset has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Its nuggets, in the dataset's order.
    pub nuggets: Vec<SampledNugget>,
}

/// A nugget of a sampled question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledNugget {
    /// The nugget's id.
    pub nugget_id: String,
    /// Its text.
    pub text: String,
}

/// A sampled positive pair: a nugget and a document judged to support it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampledPair {
    /// The `query_id` of the nugget's question.
    pub query_id: QueryId,
    /// The sampled nugget's id (`QUERYID_N`).
    pub nugget_id: String,
    /// The nugget's text.
    pub nugget_text: String,
    /// The document's id.
    pub doc_id: String,
    /// The document's repository (`owner/name`), when the corpus has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// The document's path in its repository, when the corpus has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The document's link, when the corpus has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The document's text.
    pub text: String,
}

impl CalibrationSample {
    /// Reads `sample.json`; a file of another format or version is an error naming it.
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            crate::dataset::bounded::read_text(path, crate::dataset::bounded::MAX_SIDE_FILE_BYTES)
                .map_err(|e| Error::io(path, e))?;
        let sample: Self =
            serde_json::from_str(&text).map_err(|e| Error::parse(path, e.line(), e.to_string()))?;
        if sample.format != SAMPLE_FORMAT || sample.version != SAMPLE_VERSION {
            return Err(Error::Dataset {
                path: path.to_path_buf(),
                message: format!(
                    "field format/version: {:?} version {}, expected {SAMPLE_FORMAT:?} version \
                     {SAMPLE_VERSION}",
                    sample.format, sample.version
                ),
            });
        }
        Ok(sample)
    }

    /// A short stable key of this sample (FNV-1a of its JSON): the review page keeps its
    /// answers in the browser under it.
    pub fn key(&self) -> String {
        let mut hash = crate::dataset::Fnv1a64::default();
        hash.update(&serde_json::to_vec(self).unwrap_or_default());
        hash.to_string()
    }
}

/// Samples questions of the exported dataset in `dir` (`queries.jsonl`, `corpus.jsonl`) for
/// review: `options.questions` of the questions that have nuggets (all of them when fewer),
/// drawn by a partial Fisher-Yates shuffle of the questions in id order, then per sampled
/// question one of its (nugget, supporting document) pairs, uniformly. A question none of whose
/// nuggets has a supporting document gets no pair. The corpus is streamed once for the sampled
/// documents.
pub fn sample(dir: &Path, options: &SampleOptions) -> Result<CalibrationSample> {
    if options.questions == 0 {
        return Err(Error::invalid(Setting::Questions, "must be at least 1"));
    }
    let queries_path = dir.join("queries.jsonl");
    let mut eligible: Vec<_> = read_questions(&queries_path)?
        .into_iter()
        .filter(|q| !q.nuggets.is_empty())
        .collect();
    if eligible.is_empty() {
        return Err(Error::Dataset {
            path: queries_path,
            message: "no question has nuggets: nothing to calibrate".into(),
        });
    }
    eligible.sort_by(|a, b| a.query_id.cmp(&b.query_id));
    let questions_eligible = eligible.len();
    let take = options.questions.min(eligible.len());
    let mut rng = SplitMix64::new(options.seed);
    let mut order: Vec<usize> = (0..eligible.len()).collect();
    for i in 0..take {
        let j = i + rng.below(order.len() - i);
        order.swap(i, j);
    }
    let mut chosen: Vec<usize> = order[..take].to_vec();
    chosen.sort_unstable();

    let mut questions = Vec::with_capacity(take);
    // (question index, nugget index, document id) per pair.
    let mut picks: Vec<(usize, usize, String)> = Vec::new();
    for &i in &chosen {
        let q = &eligible[i];
        let mut candidates: Vec<(usize, &str)> = Vec::new();
        for (n, nugget) in q.nuggets.iter().enumerate() {
            let mut seen = BTreeSet::new();
            for doc in &nugget.relevant_corpus_ids {
                if seen.insert(doc.as_str()) {
                    candidates.push((n, doc));
                }
            }
        }
        if !candidates.is_empty() {
            let (n, doc) = candidates[rng.below(candidates.len())];
            picks.push((questions.len(), n, doc.to_string()));
        }
        questions.push(SampledQuestion {
            query_id: q.query_id.clone(),
            query_title: q.query_title.clone(),
            query_text: q.query_text.clone(),
            answer_text: q.answer_text.clone(),
            url: q.metadata.url.clone(),
            nuggets: q
                .nuggets
                .iter()
                .map(|n| SampledNugget {
                    nugget_id: n.id.clone(),
                    text: n.text.clone(),
                })
                .collect(),
        });
    }

    let wanted: HashSet<&str> = picks.iter().map(|(_, _, doc)| doc.as_str()).collect();
    let corpus_path = dir.join("corpus.jsonl");
    let documents = read_documents(&corpus_path, &wanted)?;
    let mut pairs = Vec::with_capacity(picks.len());
    for (qi, ni, doc_id) in picks {
        let q = &questions[qi];
        let nugget = &q.nuggets[ni];
        let Some(doc) = documents.get(&doc_id).cloned() else {
            return Err(Error::Dataset {
                path: corpus_path,
                message: format!(
                    "document {doc_id:?} (supporting nugget {:?} of question {:?}) is not in \
                     the corpus",
                    nugget.nugget_id, q.query_id
                ),
            });
        };
        pairs.push(SampledPair {
            query_id: q.query_id.clone(),
            nugget_id: nugget.nugget_id.clone(),
            nugget_text: nugget.text.clone(),
            doc_id,
            repo: doc.metadata.repo,
            path: doc.metadata.path,
            url: doc.metadata.url,
            text: doc.text,
        });
    }
    Ok(CalibrationSample {
        format: SAMPLE_FORMAT.into(),
        version: SAMPLE_VERSION,
        seed: options.seed,
        questions_requested: options.questions,
        questions_eligible,
        questions,
        pairs,
    })
}

/// Where [`write_review`] put the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReviewFiles {
    /// `OUT/sample.json`.
    pub sample: PathBuf,
    /// `OUT/review.html`.
    pub page: PathBuf,
}

/// Writes `out/sample.json` and `out/review.html` (the directory is created), each atomically,
/// and both prepared before either is committed: a failure leaves the old pair in place.
pub fn write_review(out: &Path, sample: &CalibrationSample) -> Result<ReviewFiles> {
    let files = ReviewFiles {
        sample: out.join("sample.json"),
        page: out.join("review.html"),
    };
    let page = render_review(sample);
    let sample_writer = AtomicWriter::json(&files.sample, sample)?;
    let mut page_writer = AtomicWriter::create(&files.page)?;
    page_writer
        .write_all(page.as_bytes())
        .map_err(|e| Error::io(&files.page, e))?;
    sample_writer.commit()?;
    page_writer.commit()?;
    Ok(files)
}

/// The annotations kept in a dataset's `calibration/` directory: every `*.json` file but
/// `sample.json`, in file name order, each checked against `sample.json` when it is there.
/// `None` when the directory is absent or holds no annotation file.
pub fn read_calibration_dir(dir: &Path) -> Result<Option<CalibrationScores>> {
    let calibration = dir.join("calibration");
    if !calibration.is_dir() {
        return Ok(None);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(&calibration)
        .map_err(|e| Error::io(&calibration, e))?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|x| x == "json")
                && p.file_name().is_some_and(|n| n != "sample.json")
        })
        .collect();
    if files.is_empty() {
        return Ok(None);
    }
    files.sort();
    let sample_path = calibration.join("sample.json");
    let sample = if sample_path.is_file() {
        Some(CalibrationSample::read(&sample_path)?)
    } else {
        None
    };
    score_files(&files, sample.as_ref()).map(Some)
}

/// Reads each annotation file (checked against `sample` when given) and [`score`]s them,
/// naming each annotator's file by its file name.
pub fn score_files(
    files: &[PathBuf],
    sample: Option<&CalibrationSample>,
) -> Result<CalibrationScores> {
    let mut read = Vec::with_capacity(files.len());
    let mut names: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in files {
        let annotations = Annotations::read(path)?;
        if let Some(sample) = sample {
            annotations.check_against(sample, path)?;
        }
        if let Some(first) = names.insert(annotations.annotator.clone(), path.clone()) {
            return Err(Error::Dataset {
                path: path.clone(),
                message: format!(
                    "field annotator: {:?} also annotated {} (one file per annotator: merge or \
                     rename them)",
                    annotations.annotator,
                    first.display()
                ),
            });
        }
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into(),
        );
        read.push((name, annotations));
    }
    Ok(score(&read))
}

#[cfg(test)]
mod tests;
