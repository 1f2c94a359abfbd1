//! Judge health: whether a build's LLM labels look like labels, read from its work files
//! (`DIR/work/judgments.jsonl`, `DIR/work/nuggets.jsonl`, `DIR/work/pool.jsonl`,
//! `DIR/work/settings.json`) when the dataset directory is a build's. Shown in the report:
//! the share of judged pairs called supported (before filtering) beside the reference labels'
//! share, the same by the document's position in its judge call (a judge that favours early
//! documents shows it here), the share of nuggets dropped as cut or restating the question,
//! and, when `DIR/reference-labels.jsonl` holds reference labels for the build's pairs,
//! the judge's agreement with them ([`calibration::agreement`]).

use std::path::Path;

use serde::Serialize;

use super::calibration::{self, AgreementInputs, AgreementReport};
use crate::dataset::{JudgmentRecord, NuggetsRecord, for_each_jsonl};
use crate::error::Result;
use crate::pipeline::{DroppedCounts, layout};

pub use crate::pipeline::judge::LENIENT_SUPPORT_RATE;

/// The reference labels of judge-dev (expert-style, 1,155 pairs of the quickstart's pools) call
/// this share supported: the point of comparison the report names.
pub const REFERENCE_SUPPORT_RATE: f64 = 0.133;

/// The judge's support rate at one position of its calls.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PositionRate {
    /// 1-based position of the document in its call.
    pub position: usize,
    /// Judged pairs at that position.
    pub pairs: u64,
    /// Share called supported.
    pub support_rate: f64,
}

/// What the report shows of the judge.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JudgeHealth {
    /// The judge's verdict (`generate` or `probability`).
    pub verdict: String,
    /// Pairs with a verdict.
    pub pairs: u64,
    /// Pairs without one (unusable answers).
    pub unjudged: u64,
    /// Share of the judged pairs called supported.
    pub support_rate: Option<f64>,
    /// By position in the call (`generate` with more than one document per call).
    pub by_position: Vec<PositionRate>,
    /// Nuggets kept.
    pub nuggets: u64,
    /// Nuggets dropped because the budget cut them or they stop mid-sentence.
    pub nuggets_dropped_cut: u64,
    /// Nuggets dropped because they restate the question.
    pub nuggets_dropped_restating: u64,
    /// Nuggets dropped because they repeat an earlier nugget of the same answer.
    #[serde(skip_serializing_if = "is_zero")]
    pub nuggets_dropped_repeated: u64,
    /// Pairs whose model quoted evidence (the `quote` verdict), and how many of the quotes
    /// were found in their document.
    pub quotes: u64,
    /// Quotes found in their document.
    pub quotes_verified: u64,
    /// Agreement with `DIR/reference-labels.jsonl`, when present.
    pub agreement: Option<AgreementReport>,
    /// Where calls were asked twice (votes, or the self-check's re-asked sample): Cohen's kappa
    /// of the second answer (documents shuffled) against the first
    /// ([`crate::pipeline::judge::self_consistency`]).
    pub self_consistency: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The judge health of the build in `dir`; `None` when `dir/work/judgments.jsonl` is absent
/// (an exported dataset alone).
pub fn judge_health(dir: &Path) -> Result<Option<JudgeHealth>> {
    let judgments_path = dir.join(layout::JUDGMENTS);
    if !judgments_path.is_file() {
        return Ok(None);
    }
    let mut judgments: Vec<JudgmentRecord> = Vec::new();
    for_each_jsonl(&judgments_path, |_, row: JudgmentRecord| {
        judgments.push(row)
    })?;
    let verdict = verdict_of(&judgments).to_string();
    // The batch size of the last finished build (`settings.json` is written after the report,
    // so a first build has none yet: no split by position then).
    let settings: Option<serde_json::Value> =
        crate::dataset::read_json_if_present(&dir.join(layout::SETTINGS))?;
    let docs_per_call = settings
        .as_ref()
        .and_then(|s| s.pointer("/judge/docs_per_call"))
        .and_then(|v| v.as_u64())
        .map(|n| n as usize)
        .filter(|&n| n > 1 && verdict == "generate");
    let judged: Vec<bool> = judgments.iter().filter_map(|j| j.supported).collect();
    let pairs = judged.len() as u64;
    let supported = judged.iter().filter(|&&s| s).count() as u64;

    let pool_path = dir.join(layout::POOL);
    let by_position = match docs_per_call {
        Some(n) if pool_path.is_file() => position_rates(&pool_path, n, &judgments)?,
        _ => Vec::new(),
    };

    let mut nuggets = 0;
    let mut dropped = DroppedCounts::default();
    let nuggets_path = dir.join(layout::NUGGETS);
    if nuggets_path.is_file() {
        for_each_jsonl(&nuggets_path, |_, row: NuggetsRecord| {
            nuggets += row.nuggets.len() as u64;
            dropped.add(&row);
        })?;
    }

    let labels = dir.join("reference-labels.jsonl");
    let agreement = if labels.is_file() {
        Some(calibration::agreement(&AgreementInputs {
            judgments: judgments_path,
            labels,
            pool: docs_per_call.map(|_| pool_path.clone()),
            docs_per_call,
            review: None,
        })?)
    } else {
        None
    };
    let quotes = judgments.iter().filter(|j| j.quote.is_some()).count() as u64;
    let quotes_verified = judgments
        .iter()
        .filter(|j| j.quote.as_ref().is_some_and(|q| q.verified))
        .count() as u64;
    Ok(Some(JudgeHealth {
        verdict,
        quotes,
        quotes_verified,
        pairs,
        unjudged: judgments.len() as u64 - pairs,
        support_rate: (pairs > 0).then(|| supported as f64 / pairs as f64),
        by_position,
        nuggets,
        nuggets_dropped_cut: dropped.cut,
        nuggets_dropped_restating: dropped.restating,
        nuggets_dropped_repeated: dropped.repeated,
        agreement,
        self_consistency: crate::pipeline::judge::self_consistency(&judgments),
    }))
}

/// The verdict the rows were written by: `probability` rows carry the model's probability,
/// `terms` rows a term coverage and the rationale that verdict writes, the rest `generate`.
fn verdict_of(judgments: &[JudgmentRecord]) -> &'static str {
    let terms_rationale = |r: &JudgmentRecord| {
        r.rationale
            .split_once(" of ")
            .is_some_and(|(n, rest)| n.parse::<u64>().is_ok() && rest.contains(" nugget terms "))
    };
    if judgments
        .iter()
        .any(|r| r.quote.is_some() || r.rationale == crate::pipeline::judge::NO_STATEMENT)
    {
        "quote"
    } else if judgments.iter().any(|r| r.grade.is_some()) {
        "graded"
    } else if judgments.iter().any(|r| r.probability.is_some()) {
        "probability"
    } else if !judgments.is_empty()
        && judgments
            .iter()
            .all(|r| r.term_coverage.is_some() && terms_rationale(r))
    {
        "terms"
    } else {
        "generate"
    }
}

/// The judge's support rate by the document's position in its call, positions as
/// [`calibration::read_positions`] reads them from the pool (as the judge batches it).
fn position_rates(
    pool: &Path,
    docs_per_call: usize,
    judgments: &[JudgmentRecord],
) -> Result<Vec<PositionRate>> {
    let position = calibration::read_positions(pool, docs_per_call)?;
    let mut counts = vec![(0u64, 0u64); docs_per_call];
    for j in judgments {
        if let (Some(s), Some(&p)) = (
            j.supported,
            position.get(&(j.query_id.to_string(), j.doc_id.clone())),
        ) {
            counts[p - 1].0 += 1;
            counts[p - 1].1 += u64::from(s);
        }
    }
    Ok(counts
        .into_iter()
        .enumerate()
        .filter(|(_, (n, _))| *n > 0)
        .map(|(i, (n, s))| PositionRate {
            position: i + 1,
            pairs: n,
            support_rate: s as f64 / n as f64,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(doc: &str, supported: bool, rationale: &str, quote: Option<(&str, bool)>) -> String {
        let mut value = serde_json::json!({
            "query_id": "q",
            "nugget_id": "q_0",
            "doc_id": doc,
            "supported": supported,
            "rationale": rationale,
            "term_coverage": 0.5,
        });
        if let Some((text, verified)) = quote {
            value["quote"] = serde_json::json!({"text": text, "verified": verified});
        }
        value.to_string() + "\n"
    }

    fn health_of(rows: &[String]) -> JudgeHealth {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(layout::WORK)).unwrap();
        std::fs::write(dir.path().join(layout::JUDGMENTS), rows.concat()).unwrap();
        judge_health(dir.path()).unwrap().unwrap()
    }

    #[test]
    fn quote_rows_are_told_apart_and_their_verified_share_counted() {
        let health = health_of(&[
            row(
                "a",
                true,
                "quoted; 2 of 3 nugget terms in the quote: x, y",
                Some(("x y", true)),
            ),
            row(
                "b",
                false,
                "the quote is not in the document",
                Some(("z", false)),
            ),
            row("c", false, crate::pipeline::judge::NO_STATEMENT, None),
        ]);
        assert_eq!(health.verdict, "quote");
        assert_eq!((health.quotes, health.quotes_verified), (2, 1));
        assert_eq!(health.pairs, 3);
        let page = crate::report::html::judge_health_page_section(&health);
        assert!(page.contains("Quotes found in their document"), "{page}");
        assert!(page.contains("50.0%"), "{page}");
    }

    #[test]
    fn terms_and_generate_rows_keep_their_verdicts_and_show_no_quotes() {
        let terms = health_of(&[row(
            "a",
            true,
            "2 of 3 nugget terms in the document: x, y",
            None,
        )]);
        assert_eq!(terms.verdict, "terms");
        assert_eq!(terms.quotes, 0);
        let generate = health_of(&[row("a", true, "the document names the flag", None)]);
        assert_eq!(generate.verdict, "generate");
        let page = crate::report::html::judge_health_page_section(&generate);
        assert!(!page.contains("Evidence quotes"), "{page}");
        assert!(!page.contains("Self-consistency"), "{page}");
    }

    #[test]
    fn voted_rows_give_the_self_consistency_of_the_shuffled_vote() {
        let voted = |doc: &str, votes: [bool; 2]| {
            let mut value: serde_json::Value =
                serde_json::from_str(&row(doc, votes[0], "reason", None)).unwrap();
            value["votes"] = serde_json::json!(votes);
            value.to_string() + "\n"
        };
        // Two of four pairs agree, one each way: p_o 0.5, p_e 0.5, kappa 0.
        let health = health_of(&[
            voted("a", [true, true]),
            voted("b", [false, false]),
            voted("c", [true, false]),
            voted("d", [false, true]),
        ]);
        assert_eq!(health.self_consistency, Some(0.0));
        let page = crate::report::html::judge_health_page_section(&health);
        assert!(page.contains("Self-consistency"), "{page}");
        let graded: serde_json::Value = serde_json::json!({
            "query_id": "q", "nugget_id": "q_0", "doc_id": "a", "supported": true,
            "rationale": "grade full, expected 0.900; 1 of 1 nugget terms in the document: x",
            "probability": 0.9, "term_coverage": 1.0, "grade": "full",
        });
        assert_eq!(health_of(&[graded.to_string() + "\n"]).verdict, "graded");
    }
}
