//! What the LLM stages share: a bounded pool of workers over work items, and the
//! ask-parse-repair loop.

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use serde::Serialize;
use serde_json::Value;

use super::{StageSummary, StructuredOutput, StructuredOutputUsed};
use crate::dataset::{AtomicWriter, Question, Shard, ShardInfo, read_questions};
use crate::error::{Error, Result};
use crate::llm::prompts::REPAIR;
use crate::llm::{ChatParams, Llm, Message, schema};
use crate::progress::Progress;

/// Runs `work` on every item with `workers` threads and returns the results in item order
/// (never completion order). The first error stops new items from starting; items in flight
/// finish (their answers are cached), then the error is returned.
pub(crate) fn run_items<T: Sync, R: Send>(
    items: &[T],
    workers: usize,
    progress: &dyn Progress,
    work: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<Error>> = Mutex::new(None);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let workers = workers.clamp(1, items.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                while !stop.load(Ordering::Relaxed) && !progress.cancelled() {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    match work(item) {
                        Ok(result) => {
                            if let Ok(mut slot) = slots[i].lock() {
                                *slot = Some(result);
                            }
                            progress.advance(1);
                        }
                        Err(err) => {
                            stop.store(true, Ordering::Relaxed);
                            if let Ok(mut first) = first_error.lock()
                                && first.is_none()
                            {
                                *first = Some(err);
                            }
                        }
                    }
                }
            });
        }
    });
    if let Some(err) = first_error.into_inner().ok().flatten() {
        return Err(err);
    }
    if progress.cancelled() {
        return Err(Error::Interrupted {
            what: "the stage's calls".into(),
        });
    }
    slots
        .into_iter()
        .enumerate()
        .map(|(i, slot)| {
            slot.into_inner()
                .ok()
                .flatten()
                .ok_or_else(|| Error::Resource {
                    what: "worker pool".into(),
                    message: format!("item {i} produced no result"),
                })
        })
        .collect()
}

/// The parameters of one call: the stage's, with the call's JSON Schema (built by `schema`
/// from the call's inputs) unless structured output is off.
pub(crate) fn call_params(
    base: &ChatParams,
    mode: StructuredOutput,
    schema: impl FnOnce() -> Value,
) -> ChatParams {
    ChatParams {
        json_schema: match mode {
            StructuredOutput::JsonSchema => Some(crate::llm::schema::sorted_keys(schema())),
            StructuredOutput::Off => None,
        },
        ..base.clone()
    }
}

/// What [`ask`] counted for one item.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AskCounts {
    /// Repair requests sent.
    pub repairs: u32,
    /// Answers that did not match the JSON Schema they were asked with.
    pub schema_mismatches: u32,
}

/// The outcome of [`ask`].
pub(crate) struct Answer<T> {
    /// The parsed value; on failure, whatever part the last answer had (may be `None`).
    pub value: Option<T>,
    /// Why the last answer could not be used; `None` on success.
    pub problem: Option<String>,
    /// The last raw answer.
    pub raw: String,
    /// Repairs and schema mismatches.
    pub counts: AskCounts,
}

/// What a parser says about an answer: usable, or why not (with any usable part).
pub(crate) type ParseOutcome<T> = std::result::Result<T, (String, Option<T>)>;

/// Sends `messages`; when `parse` rejects the answer, asks the model to repair it (showing its
/// answer and the problem) up to `max_repairs` times. A transport failure is an error; an
/// answer still unusable after the repairs is an [`Answer`] with `problem` set.
///
/// When `params` carries a JSON Schema that the backend honours, each answer is also checked
/// against it: a mismatch (which a constrained backend should never produce) is counted, and
/// named in the problem when the answer is unusable, but the lenient parser still decides, so
/// a server that ignores `response_format` fares no worse than an unconstrained one.
pub(crate) fn ask<T>(
    llm: &Llm,
    mut messages: Vec<Message>,
    params: &ChatParams,
    max_repairs: u32,
    format: &str,
    parse: impl Fn(&str) -> ParseOutcome<T>,
) -> Result<Answer<T>> {
    let mut counts = AskCounts::default();
    loop {
        let raw = llm.complete(&messages, params)?;
        let mismatch = params
            .json_schema
            .as_ref()
            .filter(|_| llm.chat_backend().json_schema_refusal().is_none())
            .and_then(|s| schema::check_answer(s, &raw).err());
        if let Some(m) = &mismatch {
            counts.schema_mismatches += 1;
            tracing::debug!("an answer does not match its JSON schema: {m}");
        }
        match parse(&raw) {
            Ok(value) => {
                return Ok(Answer {
                    value: Some(value),
                    problem: None,
                    raw,
                    counts,
                });
            }
            Err((problem, partial)) => {
                let problem = match mismatch {
                    Some(m) => format!(
                        "{problem} (the answer does not match the JSON schema it was asked \
                         with: {m})"
                    ),
                    None => problem,
                };
                if counts.repairs >= max_repairs {
                    return Ok(Answer {
                        value: partial,
                        problem: Some(problem),
                        raw,
                        counts,
                    });
                }
                messages.push(Message::assistant(raw));
                messages.extend(REPAIR.render(&[("problem", &problem), ("format", format)])?);
                counts.repairs += 1;
            }
        }
    }
}

/// A per-question output row that records whether the model's answer was unusable.
pub(crate) trait StageRecord: Serialize + Send {
    /// True when the row carries an error instead of a result.
    fn failed(&self) -> bool;
}

/// Fills the summary's structured-output fields: what `mode` asked for, and whether the
/// backend refused it.
pub(crate) fn note_structured_output(
    summary: &mut StageSummary,
    llm: &Llm,
    mode: StructuredOutput,
) {
    let refusal = llm.chat_backend().json_schema_refusal();
    summary.structured_output = match (mode, &refusal) {
        (StructuredOutput::Off, _) => StructuredOutputUsed::Off,
        (StructuredOutput::JsonSchema, Some(_)) => StructuredOutputUsed::Refused,
        (StructuredOutput::JsonSchema, None) => StructuredOutputUsed::JsonSchema,
    };
    summary.structured_output_refusal = match summary.structured_output {
        StructuredOutputUsed::Refused => refusal,
        _ => None,
    };
}

/// What must agree between the shards of one stage run: the prompt, the model, the
/// generation parameters, whether schemas are sent and the stage's own settings (not the
/// server: shards may use different ones).
pub(crate) fn stage_settings(
    llm: &Llm,
    prompt_id: &str,
    params: &ChatParams,
    mode: StructuredOutput,
    extra: &str,
) -> String {
    format!(
        "prompt={prompt_id} backend={} model={} params={} structured_output={mode} {extra}",
        llm.chat_backend().backend(),
        llm.chat_backend().model(),
        serde_json::to_string(params).unwrap_or_default(),
    )
}

/// A shard's slice of work items (in work order) and its sidecar, before the rows are known.
pub(crate) fn select_shard<T>(
    items: Vec<T>,
    key: impl Fn(&T) -> &str,
    shard: Option<Shard>,
    stage: &str,
    settings: String,
) -> (Vec<T>, Option<ShardInfo>) {
    let Some(shard) = shard else {
        return (items, None);
    };
    let info = ShardInfo::new(stage, shard, settings, items.iter().map(&key));
    let kept: Vec<T> = items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| shard.contains(*i))
        .map(|(_, item)| item)
        .collect();
    let info = ShardInfo {
        items: kept.len(),
        ..info
    };
    (kept, Some(info))
}

/// Writes a shard's sidecar (with its row count) next to `out`.
pub(crate) fn write_shard_info(out: &Path, info: Option<ShardInfo>, rows: usize) -> Result<()> {
    match info {
        Some(info) => ShardInfo { rows, ..info }.write(out),
        None => Ok(()),
    }
}

/// The shape shared by the per-question stages (nuggets, query variants): read the questions,
/// sort them by id, keep the shard's slice, run `per_question` over them on the backend's
/// concurrency, write one row per question in id order (atomically, with the shard's sidecar)
/// and count ok / failed / repairs. A question for which `carried` has a record (`freshstack
/// refresh`: the old build's, for the same prompt inputs) takes it and asks nothing; `items`
/// counts the questions asked.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_question_stage<R: StageRecord>(
    llm: &Llm,
    label: &str,
    (prompt_id, mode): (&str, StructuredOutput),
    questions: &Path,
    out: &Path,
    (shard, settings): (Option<Shard>, String),
    progress: &dyn Progress,
    carried: &dyn Fn(&Question) -> Option<R>,
    per_question: impl Fn(&Question) -> Result<(R, AskCounts)> + Sync,
) -> Result<StageSummary> {
    let mut questions = read_questions(questions)?;
    questions.sort_by(|a, b| a.query_id.cmp(&b.query_id));
    let (questions, shard_info) = select_shard(
        questions,
        |q| q.query_id.as_str(),
        shard,
        label_stage(label),
        settings,
    );
    // An unwritable output fails before any call, but no temporary file is held while the
    // calls run: Ctrl-C ends the process without destructors and would leave it behind.
    drop(AtomicWriter::create(out)?);
    let reused: Vec<Option<R>> = questions.iter().map(carried).collect();
    let asked: Vec<Question> = questions
        .iter()
        .zip(&reused)
        .filter(|(_, r)| r.is_none())
        .map(|(q, _)| q.clone())
        .collect();
    progress.begin(label, Some(asked.len() as u64));
    let results = run_items(
        &asked,
        llm.chat_backend().max_concurrency(),
        progress,
        per_question,
    );
    progress.finish();
    let mut answered = results?.into_iter();
    let asked_count = asked.len() as u64;
    // Back into question-id order: carried records where there are, answers elsewhere.
    let results: Vec<(R, AskCounts)> = reused
        .into_iter()
        .filter_map(|r| match r {
            Some(record) => Some((record, AskCounts::default())),
            None => answered.next(),
        })
        .collect();
    let mut writer = AtomicWriter::create(out)?;
    let mut summary = StageSummary {
        prompt: prompt_id.to_string(),
        items: asked_count,
        ..StageSummary::default()
    };
    for (record, counts) in &results {
        summary.repairs += u64::from(counts.repairs);
        summary.schema_mismatches += u64::from(counts.schema_mismatches);
        if record.failed() {
            summary.failed += 1;
        } else {
            summary.ok += 1;
        }
        writer.write_json_line(record)?;
    }
    write_shard_info(out, shard_info, results.len())?;
    writer.commit()?;
    summary.llm = llm.stats();
    note_structured_output(&mut summary, llm, mode);
    Ok(summary)
}

/// The stage name recorded in shard sidecars, from a progress label.
fn label_stage(label: &str) -> &str {
    match label {
        "query variants" => "query-variants",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    #[test]
    fn results_in_item_order_whatever_the_workers() {
        let items: Vec<u64> = (0..200).collect();
        for workers in [1, 3, 16] {
            let out = run_items(&items, workers, &NoProgress, |&i| {
                if i % 7 == 0 {
                    std::thread::yield_now();
                }
                Ok(i * 2)
            })
            .unwrap();
            assert_eq!(out, items.iter().map(|i| i * 2).collect::<Vec<_>>());
        }
    }

    #[test]
    fn first_error_stops_the_run() {
        let items: Vec<u64> = (0..50).collect();
        let err = run_items(&items, 4, &NoProgress, |&i| {
            if i == 10 {
                Err(Error::invalid(crate::error::Setting::Shard, "boom"))
            } else {
                Ok(i)
            }
        })
        .unwrap_err();
        assert!(err.to_string().contains("boom"));
        assert!(
            run_items::<u64, u64>(&[], 4, &NoProgress, |&i| Ok(i))
                .unwrap()
                .is_empty()
        );
    }
}
