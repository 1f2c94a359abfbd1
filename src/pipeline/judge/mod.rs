//! Nugget-level support judgments (paper §3.5): per question, up to `docs_per_call` pooled
//! documents with all the question's nuggets in one call; the model reasons briefly, then gives
//! per document the nuggets it supports. One output row per (question, nugget, document).
//!
//! Five verdicts ([`Verdict`]): `generate`, the paper's protocol above, optionally asked
//! several times with the documents shuffled and decided by majority (`votes`); and the
//! pointwise ones (`pointwise.rs`), one (document, nugget) pair per call: `probability` (the
//! model's probability of "yes"), `graded` (of full / partial / none), `quote` (evidence
//! checked against the document) and `terms` (no model). Any can be gated by the share of the
//! nugget's own terms that the document holds ([`evidence`]).
//!
//! Documents are truncated to fit the model's context: the prompt without documents, the answer
//! budget and the documents must fit in `context_tokens` (counted with cl100k_base, an
//! approximation of the served model's tokenizer), and no document gets more than
//! `max_doc_tokens`. Truncations are counted in the summary.

pub mod evidence;
mod pointwise;

pub use pointwise::{MAX_QUOTE_CHARS, NO_STATEMENT, quote_in_document, quote_schema};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::config::LlmStage;
use super::orchestrator::{Builder, StageOutcome, calls_line, carried_note, layout};
use super::refresh::{Carry, judge_topic};
use super::workers::{
    AskCounts, ParseOutcome, ask, call_params, note_structured_output, run_items, select_shard,
    stage_settings, write_shard_info,
};
use super::{DEFAULT_MAX_REPAIRS, StageSummary, StructuredOutput};
use crate::dataset::{
    AtomicWriter, Document, Fingerprint, JudgmentRecord, NuggetText, NuggetsRecord, PoolRow,
    QueryId, Question, Shard, SplitMix64, read_documents, read_jsonl_lines, read_questions,
};
use crate::error::{Error, Result, Setting};
use crate::llm::prompts::{JUDGE, JUDGE_GRADED, JUDGE_POINTWISE, JUDGE_QUOTE};
use crate::llm::schema::chars_within_tokens;
use crate::llm::{ChatParams, Llm, parse};
use crate::progress::Progress;

/// Settings of the judge stage.
#[derive(Debug, Clone)]
pub struct JudgeConfig {
    /// Generation parameters (default: greedy, 4096 tokens for the reasoning and the verdicts).
    pub params: ChatParams,
    /// Documents judged together in one call (the paper: at most 20).
    pub docs_per_call: usize,
    /// The model's context window, in tokens.
    pub context_tokens: usize,
    /// Most tokens of one document shown to the model.
    pub max_doc_tokens: usize,
    /// Repair requests after an unusable answer.
    pub max_repairs: u32,
    /// Only this slice of the pool's questions (sorted by id, question `i` to shard `i % N`); a
    /// sidecar for `freshstack merge` is written next to the output.
    pub shard: Option<Shard>,
    /// Whether each call carries its JSON Schema ([`judge_schema`]).
    pub structured_output: StructuredOutput,
    /// How the model gives its verdict.
    pub verdict: Verdict,
    /// The score a supported pair reaches under the pointwise verdicts (in [0, 1]):
    /// `probability` scores `(1 - term_weight) * P(yes) + term_weight * term coverage`,
    /// `terms` the term coverage alone.
    pub threshold: f64,
    /// The weight of the term coverage beside the model's probability in the `probability`
    /// verdict's score (in [0, 1]; 0: the probability alone).
    pub term_weight: f64,
    /// A supported verdict also needs at least this share of the nugget's own terms in the
    /// document ([`evidence::term_coverage`]); 0 turns the gate off.
    pub min_term_coverage: f64,
    /// How many times each `generate` call is asked: the first with the documents in pool
    /// order, the others with them in a seeded shuffle; a pair is supported when a strict
    /// majority of its usable votes say so. 1: asked once.
    pub votes: usize,
    /// With one vote, the share of `generate` calls asked a second time with their documents
    /// in a seeded shuffle (each call drawn with this probability, seeded by its question and
    /// documents): the second answers are kept as each row's `recheck` and give the judge's
    /// self-consistency; they never change a label. In [0, 1]; 0 turns the check off.
    pub self_check: f64,
}

/// How the judge model gives its verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// The paper's protocol: up to `docs_per_call` documents per call, a short reasoning then
    /// a true/false per nugget, generated.
    #[default]
    Generate,
    /// One (document, nugget) pair per call, the probability of "yes" read from the model's
    /// next-token distribution (native GGUF; a server must return log-probabilities).
    Probability,
    /// No model: a pair is supported when the document holds at least `threshold` of the
    /// nugget's own terms ([`evidence`]).
    Terms,
    /// One (document, nugget) pair per call: the model quotes the document's sentence or line
    /// that states the nugget, then gives its verdict. A pair is supported when the model says
    /// so, the quote is found in the document (whitespace normalised) and it holds at least
    /// `threshold` of the nugget's own terms.
    Quote,
    /// One (document, nugget) pair per call, graded full / partial / none (TREC 2025's support
    /// assessment), read as the probability of each grade; the expected grade (full 1, partial
    /// 0.5) takes the place of P(yes) in the `probability` verdict's score.
    Graded,
}

impl Verdict {
    /// The name in configs and flags.
    pub fn name(self) -> &'static str {
        match self {
            Self::Generate => "generate",
            Self::Probability => "probability",
            Self::Terms => "terms",
            Self::Quote => "quote",
            Self::Graded => "graded",
        }
    }

    /// The prompt this verdict asks with (`terms` asks nothing; its stage records the pointwise
    /// prompt's id, unused).
    pub fn prompt(self) -> &'static crate::llm::prompts::Prompt {
        match self {
            Self::Generate => &JUDGE,
            Self::Probability | Self::Terms => &JUDGE_POINTWISE,
            Self::Quote => &JUDGE_QUOTE,
            Self::Graded => &JUDGE_GRADED,
        }
    }

    /// Whether this verdict calls the model.
    pub fn asks_model(self) -> bool {
        self != Self::Terms
    }

    /// Whether this verdict reads the model's next-token probabilities (the backend must give
    /// them).
    pub fn reads_probabilities(self) -> bool {
        matches!(self, Self::Probability | Self::Graded)
    }
}

impl std::str::FromStr for Verdict {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "generate" => Ok(Self::Generate),
            "probability" => Ok(Self::Probability),
            "terms" => Ok(Self::Terms),
            "quote" => Ok(Self::Quote),
            "graded" => Ok(Self::Graded),
            other => Err(format!(
                "unknown verdict {other:?} (expected generate, probability, terms, quote or \
                 graded)"
            )),
        }
    }
}

/// A judge that calls more than this share of its pairs supported is warned about (reference
/// labels call about one in eight supported): it cannot tell retrievers apart.
pub const LENIENT_SUPPORT_RATE: f64 = 0.5;

/// The default threshold of the pointwise verdicts' score: chosen on judge-dev (docs/judging.md).
pub const DEFAULT_THRESHOLD: f64 = 0.4;

/// The default share of `generate` calls asked again in a shuffled order to measure the judge's
/// self-consistency.
pub const DEFAULT_SELF_CHECK: f64 = 0.1;

/// The default weight of the term coverage in the `probability` verdict's score.
pub const DEFAULT_TERM_WEIGHT: f64 = 0.5;

/// Checks a threshold or a share: a number in [0, 1].
pub fn check_unit_interval(what: Setting, value: f64) -> Result<()> {
    if (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(Error::invalid(what, format!("{value} is outside [0, 1]")))
    }
}

impl Default for JudgeConfig {
    fn default() -> Self {
        Self {
            params: ChatParams {
                max_tokens: 4096,
                ..ChatParams::default()
            },
            docs_per_call: 20,
            context_tokens: 32_768,
            max_doc_tokens: 2048,
            max_repairs: DEFAULT_MAX_REPAIRS,
            shard: None,
            structured_output: StructuredOutput::default(),
            verdict: Verdict::default(),
            threshold: DEFAULT_THRESHOLD,
            term_weight: DEFAULT_TERM_WEIGHT,
            min_term_coverage: 0.0,
            votes: 1,
            self_check: DEFAULT_SELF_CHECK,
        }
    }
}

/// What the judge stage did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct JudgeSummary {
    /// Calls (items = batches of documents), repairs, failures, cache use.
    #[serde(flatten)]
    pub stage: StageSummary,
    /// Questions in the pool.
    pub questions: u64,
    /// Pool questions skipped because they have no nuggets (missing or failed in the nuggets file).
    pub questions_without_nuggets: u64,
    /// Output rows.
    pub judgments: u64,
    /// Rows judged supported.
    pub supported: u64,
    /// Rows without a verdict (the call's answer stayed unusable).
    pub unjudged: u64,
    /// Documents shortened to fit the context.
    pub documents_truncated: u64,
    /// Rows carried over from an old build (`freshstack refresh`), not asked.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reused: u64,
    /// Cohen's kappa of the second answer (documents shuffled: the second vote, or the
    /// self-check's re-ask) against the first (pool order) over the pairs both judged: how far
    /// the verdicts survive a new order. `None` when no call was asked twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_consistency: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One call's worth of work.
struct Batch<'a> {
    question: &'a Question,
    nuggets: &'a [NuggetText],
    docs: Vec<&'a Document>,
    /// In the self-check sample: asked again in a shuffled order ([`JudgeConfig::self_check`]).
    recheck: bool,
}

/// A batch's rows plus counters.
struct BatchResult {
    rows: Vec<JudgmentRecord>,
    counts: AskCounts,
    failed: bool,
    truncated: u64,
}

/// The verdicts of one document.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct DocVerdict {
    supported: Vec<bool>,
    reason: String,
}

/// Longest reasoning of one entry the schema allows, in characters (one or two sentences).
pub const MAX_REASONING_CHARS: usize = 250;

/// The labels of `num_nuggets` nuggets, `N1`, `N2`, ..., zero-padded to one width (`N01` to
/// `N12`) so that their sorted order is their numeric order: schemas are sent key-sorted
/// ([`crate::llm::schema::sorted_keys`]), and engines emit properties in the order listed.
pub fn nugget_labels(num_nuggets: usize) -> Vec<String> {
    let width = num_nuggets.to_string().len();
    (1..=num_nuggets).map(|n| format!("N{n:0width$}")).collect()
}

/// The JSON Schema of one judge call's answer: `{"judgments": [...]}` with exactly one entry
/// per document, in order (`prefixItems`, `minItems` = `maxItems` = `num_docs`); entry `i` is
/// `{"doc": "D<i>", "reasoning": "...", "supported": {"N1": bool, ...}}` (in that order: the
/// model reasons before its verdict), `doc` fixed by `const`, `reasoning` 1 to
/// `MAX_REASONING_CHARS` characters (less when `max_tokens` shared among the entries would
/// not hold that many: [`chars_within_tokens`]), `supported` one required boolean per nugget
/// label ([`nugget_labels`]), in order.
///
/// A verdict per nugget rather than a list of the supported ones: a list of distinct labels
/// needs `uniqueItems`, which llama.cpp's grammar cannot enforce (SmolLM2 repeated a label),
/// whereas fixed required keys are plain grammar, so every engine returns exactly one verdict
/// per nugget by construction, and none is left out silently.
pub fn judge_schema(num_docs: usize, num_nuggets: usize, max_tokens: u32) -> Value {
    // Per entry: its share of the budget less its frame (`{"doc": "D12", "reasoning": "",
    // "supported": {}}` pretty-printed, as a server's model may write it, ~30 tokens) and a
    // verdict per nugget (`"N3": false,` on its own line, ~6 tokens). The native grammar
    // writes one line, which needs less.
    let per_entry = (max_tokens as usize).saturating_sub(16) / num_docs.max(1);
    let reasoning_chars = chars_within_tokens(
        per_entry.saturating_sub(30 + 6 * num_nuggets),
        MAX_REASONING_CHARS,
    );
    let labels = nugget_labels(num_nuggets);
    let verdicts: serde_json::Map<String, Value> = labels
        .iter()
        .map(|label| (label.clone(), json!({"type": "boolean"})))
        .collect();
    let supported = json!({
        "type": "object",
        "properties": verdicts,
        "required": labels,
        "additionalProperties": false,
    });
    let entries: Vec<Value> = (1..=num_docs)
        .map(|d| {
            json!({
                "type": "object",
                "properties": {
                    "doc": {"const": format!("D{d}")},
                    "reasoning": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": reasoning_chars,
                    },
                    "supported": supported,
                },
                "required": ["doc", "reasoning", "supported"],
                "additionalProperties": false,
            })
        })
        .collect();
    json!({
        "title": "judgments",
        "type": "object",
        "properties": {
            "judgments": {
                "type": "array",
                // Exactly the tuple: llama.cpp reads `items` before `prefixItems` (so no
                // `"items": false` here), the others bound the count with min/maxItems.
                "prefixItems": entries,
                "minItems": num_docs,
                "maxItems": num_docs,
            },
        },
        "required": ["judgments"],
        "additionalProperties": false,
    })
}

/// `first to last` of the nugget labels, for the prompt and the repair request.
fn label_range(num_nuggets: usize) -> String {
    let labels = nugget_labels(num_nuggets.max(1));
    format!("{} to {}", labels[0], labels[labels.len() - 1])
}

/// The shape a repair request asks for, in words.
fn format_words(num_docs: usize, num_nuggets: usize) -> String {
    format!(
        "one JSON object with one field, \"judgments\": an array of exactly {num_docs} entries, \
         D1 to D{num_docs} in order, each an object with the fields \"doc\" (the label), \
         \"reasoning\" (one or two sentences) and \"supported\" (an object with one field per \
         nugget, {} in order, each true or false)",
        label_range(num_nuggets)
    )
}

/// Reads the judgments object: one entry per document D1..Dn, each with a verdict (true or
/// false, or yes/no) for every nugget under its label.
pub(super) fn parse_judgments(
    text: &str,
    num_docs: usize,
    num_nuggets: usize,
) -> ParseOutcome<Vec<Option<DocVerdict>>> {
    let entries = match parse::extract_json_with_key(text, "judgments") {
        Some(map) => map.get("judgments").and_then(Value::as_array).cloned(),
        None => match parse::extract_json(text) {
            Some(Value::Array(items)) => Some(items),
            _ => None,
        },
    };
    let Some(entries) = entries else {
        return Err((
            "no JSON object with a \"judgments\" array found at the end of the reply".into(),
            None,
        ));
    };
    let labels = nugget_labels(num_nuggets);
    let mut verdicts: Vec<Option<DocVerdict>> = vec![None; num_docs];
    let mut problems = Vec::new();
    for entry in &entries {
        let Some(obj) = entry.as_object() else {
            problems.push("a judgment is not an object".to_string());
            continue;
        };
        let doc = ["doc", "document", "id", "doc_id"]
            .iter()
            .find_map(|k| obj.get(*k))
            .and_then(parse::parse_index);
        let Some(doc) = doc.filter(|d| (1..=num_docs).contains(d)) else {
            problems.push(format!("a judgment names no document D1..D{num_docs}"));
            continue;
        };
        let Some(Value::Object(map)) = obj.get("supported") else {
            problems.push(format!(
                "D{doc}: no \"supported\" object with a verdict per nugget"
            ));
            continue;
        };
        let mut found: Vec<Option<bool>> = vec![None; num_nuggets];
        let mut ok = true;
        for (key, value) in map {
            let n = parse::parse_index(&Value::String(key.clone()))
                .filter(|n| (1..=num_nuggets).contains(n));
            match (n, parse::parse_verdict(value)) {
                (Some(n), Some(v)) => found[n - 1] = Some(v),
                _ => {
                    problems.push(format!("D{doc}: cannot read {key:?}: {value}"));
                    ok = false;
                }
            }
        }
        let unjudged: Vec<&str> = labels
            .iter()
            .zip(&found)
            .filter(|(_, v)| v.is_none())
            .map(|(label, _)| label.as_str())
            .collect();
        if !unjudged.is_empty() {
            problems.push(format!("D{doc}: no verdict for {}", unjudged.join(", ")));
            ok = false;
        }
        let reason = ["reason", "rationale", "reasoning"]
            .iter()
            .find_map(|k| obj.get(*k).and_then(Value::as_str))
            .unwrap_or_default()
            .trim()
            .to_string();
        let supported: Option<Vec<bool>> = found.into_iter().collect();
        if let (true, Some(supported), None) = (ok, supported, &verdicts[doc - 1]) {
            verdicts[doc - 1] = Some(DocVerdict { supported, reason });
        }
    }
    let missing: Vec<String> = verdicts
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_none())
        .map(|(i, _)| format!("D{}", i + 1))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("no usable judgment for {}", missing.join(", ")));
    }
    if problems.is_empty() {
        Ok(verdicts)
    } else {
        problems.dedup();
        Err((problems.join("; "), Some(verdicts)))
    }
}

/// `text` cut to at most `max_tokens` cl100k tokens, at a pre-token boundary; `None` when it
/// already fits.
pub(super) fn truncate_to_tokens(text: &str, max_tokens: usize) -> Option<String> {
    let tokenizer = bpe_openai::cl100k_base();
    let mut used = 0;
    let mut end = 0;
    for piece in tokenizer.split(text) {
        let n = tokenizer.bpe.count(piece.as_bytes());
        if used + n > max_tokens {
            let mut cut = text[..end].to_string();
            cut.push_str("\n[... truncated]");
            return Some(cut);
        }
        used += n;
        end += piece.len();
    }
    None
}

fn count_tokens(text: &str) -> usize {
    bpe_openai::cl100k_base().count(text)
}

fn judge_batch(llm: &Llm, config: &JudgeConfig, batch: &Batch<'_>) -> Result<BatchResult> {
    let q = batch.question;
    let nuggets_text: String = nugget_labels(batch.nuggets.len())
        .iter()
        .zip(batch.nuggets)
        .map(|(label, n)| format!("{label}. {}\n", n.text.trim()))
        .collect();
    let num_nuggets = batch.nuggets.len().to_string();
    let nugget_range = label_range(batch.nuggets.len());
    let num_docs = batch.docs.len().to_string();
    let vars_without_docs = [
        ("title", q.query_title.trim()),
        ("question", q.query_text.trim()),
        ("nuggets", nuggets_text.trim_end()),
        ("num_nuggets", num_nuggets.as_str()),
        ("nugget_range", nugget_range.as_str()),
        ("num_docs", num_docs.as_str()),
        ("documents", ""),
    ];
    let fixed_tokens: usize = JUDGE
        .render(&vars_without_docs)?
        .iter()
        .map(|m| count_tokens(&m.content) + 8)
        .sum();
    // Room for the documents: the context minus the prompt, the answer budget and the
    // per-document headers.
    let headers = batch.docs.len() * 32;
    let room = config
        .context_tokens
        .saturating_sub(fixed_tokens + config.params.max_tokens as usize + headers);
    let per_doc = (room / batch.docs.len().max(1)).min(config.max_doc_tokens);
    if per_doc < 32 {
        return Err(Error::invalid(
            Setting::ContextTokens,
            format!(
                "question {}: the prompt ({fixed_tokens} tokens) and the answer budget ({}) leave \
                 no room for {} documents in a {}-token context; lower the documents per call or \
                 the answer's max tokens, or raise the context tokens",
                q.query_id,
                config.params.max_tokens,
                batch.docs.len(),
                config.context_tokens
            ),
        ));
    }
    let mut truncated = 0;
    let mut documents = String::new();
    for (i, doc) in batch.docs.iter().enumerate() {
        let text = match truncate_to_tokens(&doc.text, per_doc) {
            Some(cut) => {
                truncated += 1;
                cut
            }
            None => doc.text.clone(),
        };
        documents.push_str(&format!("[D{}] {}\n{}\n\n", i + 1, doc.id, text.trim_end()));
    }
    let mut vars = vars_without_docs;
    vars[6] = ("documents", documents.trim_end());
    let messages = JUDGE.render(&vars)?;
    let (n_docs, n_nuggets) = (batch.docs.len(), batch.nuggets.len());
    let params = call_params(&config.params, config.structured_output, || {
        judge_schema(n_docs, n_nuggets, config.params.max_tokens)
    });
    let answer = ask(
        llm,
        messages,
        &params,
        config.max_repairs,
        &format_words(n_docs, n_nuggets),
        |text| parse_judgments(text, n_docs, n_nuggets),
    )?;
    let verdicts = answer.value.unwrap_or_else(|| vec![None; n_docs]);
    // The term-coverage gate, when on: computed for every verdict and recorded with it.
    let gate = (config.min_term_coverage > 0.0).then(|| {
        let question = evidence::content_terms(&format!("{} {}", q.query_title, q.query_text));
        let nuggets: Vec<_> = batch
            .nuggets
            .iter()
            .map(|n| evidence::content_terms(&n.text))
            .collect();
        let docs: Vec<_> = batch
            .docs
            .iter()
            .map(|d| evidence::document_terms(&d.text))
            .collect();
        (question, nuggets, docs)
    });
    let mut rows = Vec::with_capacity(n_docs * n_nuggets);
    for (nugget_index, nugget) in batch.nuggets.iter().enumerate() {
        for (doc_index, (doc, verdict)) in batch.docs.iter().zip(&verdicts).enumerate() {
            let coverage = gate.as_ref().map(|(question, nuggets, docs)| {
                evidence::term_coverage(&nuggets[nugget_index], question, &docs[doc_index]).share()
            });
            rows.push(match verdict {
                Some(v) => JudgmentRecord {
                    query_id: q.query_id.clone(),
                    nugget_id: nugget.id.clone(),
                    doc_id: doc.id.clone(),
                    supported: Some(
                        v.supported[nugget_index]
                            && coverage.is_none_or(|c| c >= config.min_term_coverage),
                    ),
                    rationale: v.reason.clone(),
                    error: None,
                    raw: None,
                    probability: None,
                    term_coverage: coverage,
                    quote: None,
                    grade: None,
                    votes: None,
                    recheck: None,
                },
                None => JudgmentRecord {
                    query_id: q.query_id.clone(),
                    nugget_id: nugget.id.clone(),
                    doc_id: doc.id.clone(),
                    supported: None,
                    rationale: String::new(),
                    error: answer.problem.clone(),
                    raw: Some(answer.raw.clone()),
                    probability: None,
                    term_coverage: None,
                    quote: None,
                    grade: None,
                    votes: None,
                    recheck: None,
                },
            });
        }
    }
    Ok(BatchResult {
        rows,
        counts: answer.counts,
        failed: answer.problem.is_some(),
        truncated,
    })
}

/// The seed of vote `vote`'s shuffle of a batch: from the question and the batch's documents,
/// so that a rerun, a shard or a resumed build draws the same order whatever the threads.
fn shuffle_seed(batch: &Batch<'_>, vote: usize) -> u64 {
    let mut builder = Fingerprint::builder("judge vote order")
        .text("query_id", batch.question.query_id.as_str())
        .number("vote", vote as u64);
    for doc in &batch.docs {
        builder = builder.text("doc", &doc.id);
    }
    let bytes = builder.finish();
    let mut seed = [0u8; 8];
    seed.copy_from_slice(&bytes.as_bytes()[..8]);
    u64::from_le_bytes(seed)
}

/// Judges `batch` `config.votes` times, the first with its documents in pool order, the others
/// in seeded shuffles, and takes the strict majority of the usable votes per pair; each row
/// keeps every vote (`votes`). One vote is [`judge_batch`] unchanged.
fn judge_batch_voting(llm: &Llm, config: &JudgeConfig, batch: &Batch<'_>) -> Result<BatchResult> {
    let first = judge_batch(llm, config, batch)?;
    let shuffled = |vote: usize| {
        let mut docs = batch.docs.clone();
        SplitMix64::new(shuffle_seed(batch, vote)).shuffle(&mut docs);
        let shuffled = Batch {
            question: batch.question,
            nuggets: batch.nuggets,
            docs,
            recheck: false,
        };
        judge_batch(llm, config, &shuffled)
    };
    if config.votes <= 1 {
        if !batch.recheck {
            return Ok(first);
        }
        return Ok(attach_recheck(first, shuffled(1)?));
    }
    let mut others = Vec::with_capacity(config.votes - 1);
    for vote in 1..config.votes {
        others.push(shuffled(vote)?);
    }
    Ok(combine_votes(first, others))
}

/// `first`'s rows with the verdicts of `again` (the same call, shuffled) as their `recheck`;
/// the labels stay `first`'s. The second call's repairs count, its failure does not (no label
/// depends on it).
fn attach_recheck(mut first: BatchResult, again: BatchResult) -> BatchResult {
    let verdicts: HashMap<(&str, &str), Option<bool>> = again
        .rows
        .iter()
        .map(|r| ((r.nugget_id.as_str(), r.doc_id.as_str()), r.supported))
        .collect();
    for row in &mut first.rows {
        row.recheck = verdicts
            .get(&(row.nugget_id.as_str(), row.doc_id.as_str()))
            .copied()
            .flatten();
    }
    first.counts.repairs += again.counts.repairs;
    first.counts.schema_mismatches += again.counts.schema_mismatches;
    first
}

/// Whether `batch` is in the self-check sample: each call is, with probability `share`, by a
/// seeded draw from its question and documents alone, so that a shard, a resumed build or
/// another thread count samples the same calls (a small build may sample none).
fn in_self_check(batch: &Batch<'_>, share: f64) -> bool {
    if share <= 0.0 {
        return false;
    }
    if share >= 1.0 {
        return true;
    }
    let draw = SplitMix64::new(shuffle_seed(batch, 0)).next_u64();
    (draw as f64) < share * u64::MAX as f64
}

/// The majority of `first` (pool order) and `others` (shuffled) per pair: supported when more
/// than half of the usable votes say so, no verdict when none is usable. A row's rationale
/// is its first usable vote's.
fn combine_votes(first: BatchResult, others: Vec<BatchResult>) -> BatchResult {
    let by_pair: Vec<HashMap<(&str, &str), &JudgmentRecord>> = others
        .iter()
        .map(|result| {
            result
                .rows
                .iter()
                .map(|r| ((r.nugget_id.as_str(), r.doc_id.as_str()), r))
                .collect()
        })
        .collect();
    let mut counts = first.counts;
    let mut failed = first.failed;
    for other in &others {
        counts.repairs += other.counts.repairs;
        counts.schema_mismatches += other.counts.schema_mismatches;
        failed |= other.failed;
    }
    let rows = first
        .rows
        .iter()
        .map(|row| {
            let key = (row.nugget_id.as_str(), row.doc_id.as_str());
            let mut voters = vec![row];
            voters.extend(by_pair.iter().filter_map(|m| m.get(&key).copied()));
            let votes: Vec<Option<bool>> = voters.iter().map(|r| r.supported).collect();
            let judged = votes.iter().flatten().count();
            let yes = votes.iter().flatten().filter(|&&v| v).count();
            let mut combined = match voters.iter().find(|r| r.supported.is_some()) {
                Some(usable) => JudgmentRecord {
                    supported: Some(2 * yes > judged),
                    ..(*usable).clone()
                },
                None => row.clone(),
            };
            combined.votes = Some(votes);
            combined
        })
        .collect();
    BatchResult {
        rows,
        counts,
        failed,
        truncated: first.truncated,
    }
}

/// Cohen's kappa of the second vote, or the self-check's re-ask, against the first answer over
/// the pairs both judged (`None` when no call was asked twice, or chance agreement is total).
pub fn self_consistency(rows: &[JudgmentRecord]) -> Option<f64> {
    let (first, second): (Vec<bool>, Vec<bool>) = rows
        .iter()
        .filter_map(|r| match (r.votes.as_deref(), r.recheck) {
            (Some([Some(a), Some(b), ..]), _) => Some((*a, *b)),
            (None, Some(again)) => r.supported.map(|first| (first, again)),
            _ => None,
        })
        .unzip();
    if first.is_empty() {
        return None;
    }
    crate::eval::agreement::cohen_kappa(&first, &second).kappa
}

/// Below this self-consistency a build warns: the verdicts depend on document order more than
/// on the documents.
pub const LOW_SELF_CONSISTENCY: f64 = 0.4;

/// The files the judge stage reads.
#[derive(Debug, Clone)]
pub struct JudgeInputs<'a> {
    /// Questions (JSONL, reference query schema).
    pub questions: &'a Path,
    /// Nuggets (JSONL, [`NuggetsRecord`] rows).
    pub nuggets: &'a Path,
    /// Corpus (JSONL documents).
    pub corpus: &'a Path,
    /// Pool (JSONL, [`PoolRow`] rows).
    pub pool: &'a Path,
}

/// Judges every pooled document of every question against the question's nuggets and writes
/// one [`JudgmentRecord`] per (question, nugget, document) to `out`, sorted by question id,
/// nugget order, then document id.
pub fn judge(
    llm: &Llm,
    config: &JudgeConfig,
    inputs: &JudgeInputs<'_>,
    out: &Path,
    progress: &dyn Progress,
) -> Result<JudgeSummary> {
    judge_carrying(llm, config, inputs, None, out, progress)
}

/// [`judge()`], taking the judgments `carry` has for a (question, nuggets, document) triple
/// instead of asking (`freshstack refresh`): only the other documents of a question are
/// batched and sent.
pub(super) fn judge_carrying(
    llm: &Llm,
    config: &JudgeConfig,
    inputs: &JudgeInputs<'_>,
    carry: Option<&Carry>,
    out: &Path,
    progress: &dyn Progress,
) -> Result<JudgeSummary> {
    let JudgeInputs {
        questions,
        nuggets,
        corpus,
        pool,
    } = *inputs;
    if config.docs_per_call == 0 {
        return Err(Error::invalid(Setting::DocsPerCall, "must be at least 1"));
    }
    check_unit_interval(Setting::JudgeThreshold, config.threshold)?;
    check_unit_interval(Setting::JudgeTermWeight, config.term_weight)?;
    check_unit_interval(Setting::JudgeMinTermCoverage, config.min_term_coverage)?;
    check_unit_interval(Setting::JudgeSelfCheck, config.self_check)?;
    if config.votes == 0 {
        return Err(Error::invalid(Setting::JudgeVotes, "must be at least 1"));
    }
    if config.votes > 1 && config.verdict != Verdict::Generate {
        return Err(Error::invalid(
            Setting::JudgeVotes,
            format!(
                "{} votes need verdict = \"generate\": the {} verdict judges one pair per call, \
                 so there is no document order to shuffle",
                config.votes,
                config.verdict.name()
            ),
        ));
    }
    if config.verdict.reads_probabilities() && !llm.chat_backend().gives_probabilities() {
        // The backend's own refusal names it and says what to use instead.
        llm.chat_backend().choice_probabilities(&[], &[])?;
    }
    let questions: HashMap<QueryId, Question> = read_questions(questions)?
        .into_iter()
        .map(|q| (q.query_id.clone(), q))
        .collect();
    let mut nuggets_by_query: HashMap<QueryId, Vec<NuggetText>> = HashMap::new();
    for (line, record) in read_jsonl_lines::<NuggetsRecord>(nuggets)? {
        if nuggets_by_query.contains_key(&record.query_id) {
            return Err(Error::parse(
                nuggets,
                line,
                format!("field query_id: {:?} appears twice", record.query_id),
            ));
        }
        nuggets_by_query.insert(record.query_id, record.nuggets);
    }
    // Pool: dedupe documents within a question, keep pool order.
    let mut pool_rows: BTreeMap<QueryId, Vec<String>> = BTreeMap::new();
    for (line, row) in read_jsonl_lines::<PoolRow>(pool)? {
        if !questions.contains_key(&row.query_id) {
            return Err(Error::parse(
                pool,
                line,
                format!(
                    "field query_id: {:?} is not in the questions file",
                    row.query_id
                ),
            ));
        }
        let docs = pool_rows.entry(row.query_id).or_default();
        for id in row.doc_ids {
            if !docs.contains(&id) {
                docs.push(id);
            }
        }
    }
    let prompt = config.verdict.prompt();
    let mut extra = format!(
        "docs_per_call={} context_tokens={} max_doc_tokens={} max_repairs={}",
        config.docs_per_call, config.context_tokens, config.max_doc_tokens, config.max_repairs
    );
    // Settings at their old defaults leave the line (and so shard sidecars) as it was.
    if config.verdict != Verdict::Generate || config.min_term_coverage > 0.0 {
        extra.push_str(&format!(
            " verdict={} threshold={} term_weight={} min_term_coverage={}",
            config.verdict.name(),
            config.threshold,
            config.term_weight,
            config.min_term_coverage
        ));
    }
    if config.votes > 1 {
        extra.push_str(&format!(" votes={}", config.votes));
    } else if config.verdict == Verdict::Generate && config.self_check > 0.0 {
        extra.push_str(&format!(" self_check={}", config.self_check));
    }
    let settings = stage_settings(
        llm,
        prompt.id,
        &config.params,
        config.structured_output,
        &extra,
    );
    let (pool_rows, shard_info) = select_shard(
        pool_rows.into_iter().collect::<Vec<_>>(),
        |(qid, _)| qid.as_str(),
        config.shard,
        "judge",
        settings,
    );
    let wanted: HashSet<&str> = pool_rows
        .iter()
        .flat_map(|(_, docs)| docs)
        .map(String::as_str)
        .collect();
    let documents = read_documents(corpus, &wanted)?;
    let mut missing: Vec<&str> = wanted
        .iter()
        .filter(|id| !documents.contains_key(**id))
        .copied()
        .collect();
    if !missing.is_empty() {
        missing.sort_unstable();
        return Err(Error::invalid(
            Setting::Pool,
            format!(
                "{} pooled document(s) are not in the corpus {}: {}{}",
                missing.len(),
                corpus.display(),
                missing
                    .iter()
                    .take(3)
                    .copied()
                    .collect::<Vec<_>>()
                    .join(", "),
                if missing.len() > 3 { ", ..." } else { "" }
            ),
        ));
    }

    let mut summary = JudgeSummary {
        questions: pool_rows.len() as u64,
        ..JudgeSummary::default()
    };
    let mut batches = Vec::new();
    let mut by_document: BTreeMap<&str, pointwise::DocumentItem<'_>> = BTreeMap::new();
    let mut carried_rows: Vec<JudgmentRecord> = Vec::new();
    for (qid, doc_ids) in &pool_rows {
        let nuggets = match nuggets_by_query.get(qid) {
            Some(n) if !n.is_empty() => n.as_slice(),
            _ => {
                summary.questions_without_nuggets += 1;
                continue;
            }
        };
        let Some(question) = questions.get(qid) else {
            continue;
        };
        let topic = carry.map(|_| judge_topic(question, nuggets));
        let mut asked: Vec<&Document> = Vec::with_capacity(doc_ids.len());
        for doc in doc_ids.iter().filter_map(|id| documents.get(id)) {
            let text = Fingerprint::of_bytes(doc.text.as_bytes());
            match carry
                .zip(topic.as_ref())
                .and_then(|(c, topic)| c.judged(qid, topic, &doc.id, &text))
            {
                Some(rows) => {
                    summary.reused += rows.len() as u64;
                    carried_rows.extend_from_slice(rows);
                }
                None => asked.push(doc),
            }
        }
        match config.verdict {
            Verdict::Generate => {
                for docs in asked.chunks(config.docs_per_call) {
                    batches.push(Batch {
                        question,
                        nuggets,
                        docs: docs.to_vec(),
                        recheck: false,
                    });
                }
            }
            Verdict::Probability | Verdict::Terms | Verdict::Quote | Verdict::Graded => {
                for doc in asked {
                    by_document
                        .entry(doc.id.as_str())
                        .or_insert_with(|| pointwise::DocumentItem {
                            doc,
                            questions: Vec::new(),
                        })
                        .questions
                        .push((question, nuggets));
                }
            }
        }
    }
    let documents_asked: Vec<pointwise::DocumentItem<'_>> = by_document.into_values().collect();
    if config.votes <= 1 {
        for batch in &mut batches {
            batch.recheck = in_self_check(batch, config.self_check);
        }
    }

    // An unwritable output fails before any call, but no temporary file is held while the
    // calls run: Ctrl-C ends the process without destructors and would leave it behind.
    drop(AtomicWriter::create(out)?);
    let workers = llm.chat_backend().max_concurrency();
    let mut rows = carried_rows;
    summary.stage.prompt = prompt.id.to_string();
    match config.verdict {
        Verdict::Generate => {
            progress.begin("judging", Some(batches.len() as u64));
            let results = run_items(&batches, workers, progress, |batch| {
                judge_batch_voting(llm, config, batch)
            });
            progress.finish();
            let results = results?;
            summary.stage.items = results.len() as u64;
            for result in results {
                summary.stage.repairs += u64::from(result.counts.repairs);
                summary.stage.schema_mismatches += u64::from(result.counts.schema_mismatches);
                summary.documents_truncated += result.truncated;
                if result.failed {
                    summary.stage.failed += 1;
                } else {
                    summary.stage.ok += 1;
                }
                rows.extend(result.rows);
            }
        }
        Verdict::Probability | Verdict::Terms | Verdict::Quote | Verdict::Graded => {
            progress.begin("judging documents", Some(documents_asked.len() as u64));
            let results = run_items(&documents_asked, workers, progress, |item| {
                pointwise::judge_document(llm, config, item)
            });
            progress.finish();
            let results = results?;
            summary.stage.items = results.len() as u64;
            for result in results {
                summary.documents_truncated += u64::from(result.truncated);
                summary.stage.repairs += u64::from(result.counts.repairs);
                summary.stage.schema_mismatches += u64::from(result.counts.schema_mismatches);
                if result.rows.iter().any(|r| r.supported.is_none()) {
                    summary.stage.failed += 1;
                } else {
                    summary.stage.ok += 1;
                }
                rows.extend(result.rows);
            }
        }
    }
    let mut writer = AtomicWriter::create(out)?;
    // Nugget order is the numeric suffix of the id (`q_10` after `q_9`).
    let nugget_rank = |id: &str| -> u64 {
        id.rsplit('_')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(u64::MAX)
    };
    rows.sort_by(|a, b| {
        (
            a.query_id.as_str(),
            nugget_rank(&a.nugget_id),
            a.nugget_id.as_str(),
            a.doc_id.as_str(),
        )
            .cmp(&(
                b.query_id.as_str(),
                nugget_rank(&b.nugget_id),
                b.nugget_id.as_str(),
                b.doc_id.as_str(),
            ))
    });
    for row in &rows {
        match row.supported {
            Some(true) => summary.supported += 1,
            Some(false) => {}
            None => summary.unjudged += 1,
        }
        writer.write_json_line(row)?;
    }
    summary.judgments = rows.len() as u64;
    summary.self_consistency = self_consistency(&rows);
    if let Some(kappa) = summary.self_consistency
        && kappa < LOW_SELF_CONSISTENCY
    {
        tracing::warn!(
            "the judge's verdicts with the documents shuffled agree with those in pool order \
             at kappa {kappa:.2} (below {LOW_SELF_CONSISTENCY}): they follow the order more \
             than the documents (docs/judging.md)"
        );
    }
    let judged = summary.judgments - summary.unjudged;
    if judged > 0 && summary.supported as f64 > LENIENT_SUPPORT_RATE * judged as f64 {
        tracing::warn!(
            "the judge called {} of {judged} pairs supported ({:.0}%; reference labels: about \
             13%): labels this lenient cannot tell retrievers apart (docs/judging.md)",
            summary.supported,
            100.0 * summary.supported as f64 / judged as f64
        );
    }
    write_shard_info(out, shard_info, rows.len())?;
    writer.commit()?;
    summary.stage.llm = llm.stats();
    note_structured_output(&mut summary.stage, llm, config.structured_output);
    Ok(summary)
}

impl Builder<'_> {
    pub(super) fn judge(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = self
            .llm_fingerprint(LlmStage::Judge, self.config.judge.verdict.prompt())
            .json("judge", &self.config.judge)
            .maybe_fingerprint("questions", self.hash(layout::QUESTIONS))
            .maybe_fingerprint("nuggets", self.hash(layout::NUGGETS))
            .maybe_fingerprint("corpus", self.hash(layout::CORPUS))
            .maybe_fingerprint("pool", self.hash(layout::POOL))
            .finish();
        self.stage("judge", fingerprint, &[layout::JUDGMENTS], on_stage, |b| {
            let section = &b.config.judge;
            let questions = b.path(layout::QUESTIONS);
            let nuggets = b.path(layout::NUGGETS);
            let corpus = b.path(layout::CORPUS);
            let pool = b.path(layout::POOL);
            let out = b.path(layout::JUDGMENTS);
            let params = b.params(LlmStage::Judge, section.max_tokens);
            let stage_llm = b.llm_section(LlmStage::Judge);
            let max_repairs = stage_llm.max_repairs;
            let structured_output = stage_llm.structured_output;
            let carry = b.carry;
            let opened = b.llm(LlmStage::Judge)?;
            let default = JudgeConfig::default();
            let config = JudgeConfig {
                params,
                docs_per_call: section.docs_per_call,
                context_tokens: section
                    .context_tokens
                    .or(opened.context_tokens)
                    .unwrap_or(default.context_tokens),
                max_doc_tokens: section.max_doc_tokens,
                max_repairs,
                shard: None,
                structured_output,
                verdict: section.verdict,
                threshold: section.threshold,
                term_weight: section.term_weight,
                min_term_coverage: section.min_term_coverage,
                votes: section.votes,
                self_check: section.self_check,
            };
            let inputs = JudgeInputs {
                questions: &questions,
                nuggets: &nuggets,
                corpus: &corpus,
                pool: &pool,
            };
            let before = opened.llm.stats();
            let summary = judge_carrying(&opened.llm, &config, &inputs, carry, &out, progress)?;
            Ok(format!(
                "{} judgments in {} batches ({} failed after repairs{}); {}{}",
                summary.judgments,
                summary.stage.items,
                summary.stage.failed,
                carried_note(summary.reused, carry.is_some()),
                calls_line(&before, &opened.llm.stats()),
                Self::structured_note(&summary.stage)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::schema::{check_answer, check_portable, sorted_keys};

    fn voted(doc: &str, supported: Option<bool>, rationale: &str) -> JudgmentRecord {
        JudgmentRecord {
            query_id: "q".into(),
            nugget_id: "q_0".into(),
            doc_id: doc.into(),
            supported,
            rationale: rationale.into(),
            error: supported.is_none().then(|| "unusable".to_string()),
            raw: supported.is_none().then(|| "?".to_string()),
            probability: None,
            term_coverage: None,
            quote: None,
            grade: None,
            votes: None,
            recheck: None,
        }
    }

    fn result(rows: Vec<JudgmentRecord>) -> BatchResult {
        BatchResult {
            failed: rows.iter().any(|r| r.supported.is_none()),
            rows,
            counts: AskCounts::default(),
            truncated: 0,
        }
    }

    #[test]
    fn votes_take_the_strict_majority_of_the_usable_ones() {
        let first = result(vec![
            voted("a", Some(true), "a1"),
            voted("b", None, ""),
            voted("c", Some(true), "c1"),
            voted("d", None, ""),
        ]);
        // The shuffled votes list the documents in another order.
        let second = result(vec![
            voted("d", None, ""),
            voted("c", Some(false), "c2"),
            voted("b", Some(true), "b2"),
            voted("a", Some(true), "a2"),
        ]);
        let third = result(vec![
            voted("b", Some(false), "b3"),
            voted("a", Some(false), "a3"),
            voted("c", Some(false), "c3"),
            voted("d", None, ""),
        ]);
        let combined = combine_votes(first, vec![second, third]);
        let by_doc: HashMap<&str, &JudgmentRecord> = combined
            .rows
            .iter()
            .map(|r| (r.doc_id.as_str(), r))
            .collect();
        // Two of three.
        assert_eq!(by_doc["a"].supported, Some(true));
        assert_eq!(by_doc["a"].rationale, "a1");
        assert_eq!(
            by_doc["a"].votes,
            Some(vec![Some(true), Some(true), Some(false)])
        );
        // One of two usable: a tie is not a majority; the first usable vote's reason stays.
        assert_eq!(by_doc["b"].supported, Some(false));
        assert_eq!(by_doc["b"].rationale, "b2");
        assert!(by_doc["b"].error.is_none());
        assert_eq!(by_doc["c"].supported, Some(false));
        // No usable vote: no verdict, the first vote's error kept.
        assert_eq!(by_doc["d"].supported, None);
        assert_eq!(by_doc["d"].error.as_deref(), Some("unusable"));
        assert!(combined.failed);
        // Self-consistency over the pairs the first two votes both judged (a, c): they agree
        // on a and not on c, and chance agreement is 0.5, so kappa is 0.
        assert_eq!(self_consistency(&combined.rows), Some(0.0));
    }

    #[test]
    fn parses_reasoning_then_json() {
        let text = "D1 shows the config key {x}. D2 is unrelated.\n\
            ```json\n{\"judgments\": [{\"doc\": \"D1\", \"reason\": \"sets x\", \"supported\": {\"N1\": false, \"N2\": true}},\
            {\"doc\": 2, \"reasoning\": \"no\", \"supported\": {\"N1\": \"no\", \"N2\": false}}]}\n```";
        let verdicts = parse_judgments(text, 2, 2).unwrap();
        let d1 = verdicts[0].as_ref().unwrap();
        assert_eq!(d1.supported, vec![false, true]);
        assert_eq!(d1.reason, "sets x");
        assert_eq!(verdicts[1].as_ref().unwrap().supported, vec![false, false]);
    }

    #[test]
    fn missing_documents_and_verdicts_are_reported_with_the_partial_result() {
        let text = r#"{"judgments": [{"doc": "D1", "supported": {"N1": true}}, {"doc": "D9", "supported": {}}]}"#;
        let (problem, partial) = parse_judgments(text, 3, 1).unwrap_err();
        assert!(problem.contains("D2, D3"), "{problem}");
        assert!(problem.contains("D1..D3"), "{problem}");
        let partial = partial.unwrap();
        assert!(partial[0].is_some() && partial[1].is_none());
        let (problem, _) = parse_judgments("I think D1 is relevant.", 1, 1).unwrap_err();
        assert!(problem.contains("judgments"));
        let (problem, _) = parse_judgments(
            r#"{"judgments": [{"doc": 1, "supported": {"N1": true, "N7": true}}]}"#,
            1,
            2,
        )
        .unwrap_err();
        assert!(problem.contains("N7"), "{problem}");
        // A nugget without a verdict is not taken as "not supported".
        let (problem, partial) = parse_judgments(
            r#"{"judgments": [{"doc": "D1", "supported": {"N1": true}}]}"#,
            1,
            3,
        )
        .unwrap_err();
        assert!(problem.contains("D1: no verdict for N2, N3"), "{problem}");
        assert!(partial.unwrap()[0].is_none());
        // The v2 shape, a list of the supported labels, is not this prompt's answer.
        let (problem, _) = parse_judgments(
            r#"{"judgments": [{"doc": "D1", "supported": ["N1"]}]}"#,
            1,
            1,
        )
        .unwrap_err();
        assert!(problem.contains("\"supported\" object"), "{problem}");
    }

    #[test]
    fn schema_fixes_each_position_and_its_answers_parse() {
        let schema = judge_schema(2, 3, 4096);
        check_portable(&schema).unwrap();
        let entry = &schema["properties"]["judgments"]["prefixItems"][1];
        let keys: Vec<&String> = entry["properties"].as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            ["doc", "reasoning", "supported"],
            "reasoning before the verdict"
        );
        assert_eq!(
            entry["properties"]["supported"]["required"],
            json!(["N1", "N2", "N3"])
        );
        assert_eq!(
            schema.to_string().find("\"doc\""),
            schema.to_string().find("\"doc\":{\"const\":\"D1\"}"),
            "serialized in generation order"
        );
        let answer = r#"{"judgments": [
            {"doc": "D1", "reasoning": "Sets x.", "supported": {"N1": true, "N2": false, "N3": true}},
            {"doc": "D2", "reasoning": "Unrelated.", "supported": {"N1": false, "N2": false, "N3": false}}]}"#;
        check_answer(&schema, answer).unwrap();
        let verdicts = parse_judgments(answer, 2, 3).unwrap();
        let d1 = verdicts[0].as_ref().unwrap();
        assert_eq!(d1.supported, vec![true, false, true]);
        assert_eq!(d1.reason, "Sets x.");
        assert_eq!(verdicts[1].as_ref().unwrap().supported, vec![false; 3]);
        let no = r#"{"N1": false, "N2": false, "N3": false}"#;
        for bad in [
            // Swapped positions, a missing entry, an extra one.
            format!(
                r#"{{"judgments": [{{"doc": "D2", "reasoning": "a", "supported": {no}}},
                {{"doc": "D1", "reasoning": "b", "supported": {no}}}]}}"#
            ),
            format!(r#"{{"judgments": [{{"doc": "D1", "reasoning": "a", "supported": {no}}}]}}"#),
            format!(
                r#"{{"judgments": [{{"doc": "D1", "reasoning": "a", "supported": {no}}},
                {{"doc": "D2", "reasoning": "b", "supported": {no}}},
                {{"doc": "D3", "reasoning": "c", "supported": {no}}}]}}"#
            ),
            // An unknown nugget, a missing verdict, a verdict that is not a boolean, no reasoning.
            format!(
                r#"{{"judgments": [{{"doc": "D1", "reasoning": "a", "supported": {{"N1": false, "N2": false, "N3": false, "N4": true}}}},
                {{"doc": "D2", "reasoning": "b", "supported": {no}}}]}}"#
            ),
            format!(
                r#"{{"judgments": [{{"doc": "D1", "reasoning": "a", "supported": {{"N1": true, "N3": true}}}},
                {{"doc": "D2", "reasoning": "b", "supported": {no}}}]}}"#
            ),
            format!(
                r#"{{"judgments": [{{"doc": "D1", "reasoning": "a", "supported": {{"N1": "yes", "N2": false, "N3": false}}}},
                {{"doc": "D2", "reasoning": "b", "supported": {no}}}]}}"#
            ),
            format!(
                r#"{{"judgments": [{{"doc": "D1", "supported": {no}}},
                {{"doc": "D2", "reasoning": "b", "supported": {no}}}]}}"#
            ),
        ] {
            assert!(check_answer(&schema, &bad).is_err(), "{bad}");
        }
        assert!(!format_words(2, 3).contains("one short sentence"));
        assert!(format_words(2, 3).contains("N1 to N3"));
        let reasoning = |s: &Value| s["properties"]["judgments"]["prefixItems"][0].clone();
        assert_eq!(
            reasoning(&schema)["properties"]["reasoning"]["maxLength"],
            MAX_REASONING_CHARS
        );
        // 10 documents in 1024 tokens: 100 tokens each, 60 for the frame and 5 verdicts.
        let tight = judge_schema(10, 5, 1024);
        assert_eq!(
            reasoning(&tight)["properties"]["reasoning"]["maxLength"],
            60
        );
    }

    /// Regression (issue 17): with `supported` a list of distinct labels, llama.cpp (whose
    /// grammar cannot enforce `uniqueItems`) let SmolLM2 repeat a label. Keyed verdicts leave
    /// no room for a repeat: one required boolean per label, in numeric order also when the
    /// labels have two digits and the schema is sent key-sorted.
    #[test]
    fn verdicts_are_one_per_nugget_in_order_whatever_the_count() {
        assert_eq!(nugget_labels(3), ["N1", "N2", "N3"]);
        let labels = nugget_labels(12);
        assert_eq!((labels[0].as_str(), labels[11].as_str()), ("N01", "N12"));
        assert_eq!(label_range(12), "N01 to N12");
        let sent = sorted_keys(judge_schema(1, 12, 4096));
        assert!(!sent.to_string().contains("uniqueItems"));
        let supported =
            &sent["properties"]["judgments"]["prefixItems"][0]["properties"]["supported"];
        let keys: Vec<&String> = supported["properties"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(keys, labels.iter().collect::<Vec<_>>());
        assert_eq!(supported["required"], json!(labels));
        assert_eq!(supported["additionalProperties"], false);
        // A two-digit label parses back to its nugget.
        let verdicts: Vec<String> = labels
            .iter()
            .map(|l| format!("\"{l}\": {}", l == "N10"))
            .collect();
        let answer = format!(
            r#"{{"judgments": [{{"doc": "D1", "reasoning": "r", "supported": {{{}}}}}]}}"#,
            verdicts.join(", ")
        );
        check_answer(&sent, &answer).unwrap();
        let parsed = parse_judgments(&answer, 1, 12).unwrap();
        let supported = &parsed[0].as_ref().unwrap().supported;
        assert_eq!(supported.iter().position(|&v| v), Some(9));
        assert_eq!(supported.iter().filter(|&&v| v).count(), 1);
    }

    #[test]
    fn truncation_respects_budget() {
        let text = "word ".repeat(1000);
        let cut = truncate_to_tokens(&text, 100).unwrap();
        assert!(count_tokens(&cut) <= 110);
        assert!(truncate_to_tokens("short text", 100).is_none());
    }
}
