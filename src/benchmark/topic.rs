//! One topic of a benchmark: which datasets it pairs, loading them, and checking that the
//! nuggets' judged documents are in the corpus.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::dataset::{
    DatasetPart, DatasetSpec, Document, Question, check_plain_name, load_corpus, load_queries,
    resolve_files,
};
use crate::error::{Error, Result, Setting};

/// A topic: its name (a table column) and where its questions and corpus come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicSpec {
    /// Column name in the results (the hub config, or the local directory's name).
    pub name: String,
    /// The questions with nuggets.
    pub queries: DatasetSpec,
    /// The documents.
    pub corpus: DatasetSpec,
}

impl TopicSpec {
    /// Pairs the datasets into topics. With `topics`, exactly one queries and one corpus spec
    /// are expected, each expanded per topic (a hub id gets the topic as its config; a local
    /// directory, the topic as a subdirectory). Without, the i-th queries spec pairs with the
    /// i-th corpus spec. Errors name the settings `queries`, `topics` and `dataset`; a topic's
    /// name must be one plain path component ([`check_plain_name`]: never `.` or `..`).
    pub fn plan(
        queries: &[DatasetSpec],
        corpus: &[DatasetSpec],
        topics: &[String],
    ) -> Result<Vec<Self>> {
        if queries.is_empty() || corpus.is_empty() {
            return Err(Error::invalid(
                Setting::Queries,
                "give at least one queries dataset and one corpus dataset",
            ));
        }
        let mut out = Vec::new();
        if !topics.is_empty() {
            let ([q], [c]) = (queries, corpus) else {
                return Err(Error::invalid(
                    Setting::Topics,
                    "with topics, give one queries dataset and one corpus dataset (each \
                     expanded per topic)",
                ));
            };
            for topic in topics {
                let expand = |spec: &DatasetSpec| match spec {
                    DatasetSpec::Local(dir) => DatasetSpec::Local(dir.join(topic)),
                    hub => hub.with_config(topic),
                };
                out.push(Self {
                    name: topic.clone(),
                    queries: expand(q),
                    corpus: expand(c),
                });
            }
        } else {
            if queries.len() != corpus.len() {
                return Err(Error::invalid(
                    Setting::Queries,
                    format!(
                        "{} queries datasets but {} corpus datasets: give them in pairs (or one \
                         of each with topics)",
                        queries.len(),
                        corpus.len()
                    ),
                ));
            }
            for (q, c) in queries.iter().zip(corpus) {
                let queries = q.clone();
                let mut corpus = c.clone();
                // `--queries org/q:langchain --corpus org/c` takes the config from the queries.
                if let (
                    DatasetSpec::Hub {
                        config: Some(config),
                        ..
                    },
                    DatasetSpec::Hub { config: None, .. },
                ) = (&queries, &corpus)
                {
                    corpus = corpus.with_config(config);
                }
                for spec in [&queries, &corpus] {
                    if let DatasetSpec::Hub { repo, config: None } = spec {
                        return Err(Error::invalid(
                            Setting::Dataset,
                            format!(
                                "{repo}: name a config (topic), e.g. {repo}:langchain, or give topics"
                            ),
                        ));
                    }
                }
                out.push(Self {
                    name: queries.topic_name(),
                    queries,
                    corpus,
                });
            }
        }
        // A topic's name is a directory (`topics/TOPIC/`, `runs/TOPIC/`, the subdirectory of a
        // local SPEC): one plain component, by the rule of every name that becomes a path. It
        // comes from `topics` when given, else from the queries (hub config or directory name).
        let setting = if topics.is_empty() {
            Setting::Queries
        } else {
            Setting::Topics
        };
        let mut names = HashSet::new();
        for t in &out {
            check_plain_name(setting, &t.name)?;
            if !names.insert(t.name.clone()) {
                return Err(Error::invalid(
                    setting,
                    format!("topic {:?} appears twice", t.name),
                ));
            }
        }
        Ok(out)
    }
}

/// Judged documents that the corpus does not have (queries and corpus from different topics or
/// snapshots). Such judgments still count in the metrics' denominators, as in the reference.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct JudgedCheck {
    /// Distinct documents the nuggets judge.
    pub judged_docs: usize,
    /// Of those, documents missing from the corpus.
    pub unknown_docs: usize,
    /// Up to five of them, for the warning.
    pub examples: Vec<String>,
    /// Questions without any nugget (they score 0 on the nugget metrics).
    pub queries_without_nuggets: usize,
}

/// A loaded topic.
#[derive(Debug, Clone)]
pub struct TopicData {
    /// What was asked for.
    pub spec: TopicSpec,
    /// Files read for the questions.
    pub queries_files: Vec<PathBuf>,
    /// Files read for the corpus.
    pub corpus_files: Vec<PathBuf>,
    /// The questions.
    pub queries: Vec<Question>,
    /// The documents.
    pub corpus: Vec<Document>,
    /// The judged-documents check.
    pub check: JudgedCheck,
}

/// Loads `spec` (queries split `queries_split`, corpus split `corpus_split` for hub datasets).
pub fn load_topic(
    spec: &TopicSpec,
    hub_cache: &Path,
    queries_split: &str,
    corpus_split: &str,
) -> Result<TopicData> {
    let queries_files = resolve_files(
        &spec.queries,
        DatasetPart::Queries,
        queries_split,
        hub_cache,
    )?;
    let corpus_files = resolve_files(&spec.corpus, DatasetPart::Corpus, corpus_split, hub_cache)?;
    let queries = load_queries(&queries_files)?;
    let corpus = load_corpus(&corpus_files)?;
    let check = check_judged(&queries, &corpus);
    Ok(TopicData {
        spec: spec.clone(),
        queries_files,
        corpus_files,
        queries,
        corpus,
        check,
    })
}

/// Counts judged documents missing from `corpus`.
pub fn check_judged(queries: &[Question], corpus: &[Document]) -> JudgedCheck {
    let ids: HashSet<&str> = corpus.iter().map(|d| d.id.as_str()).collect();
    let mut judged: Vec<&str> = queries
        .iter()
        .flat_map(|q| &q.nuggets)
        .flat_map(|n| {
            n.relevant_corpus_ids
                .iter()
                .chain(&n.non_relevant_corpus_ids)
        })
        .map(String::as_str)
        .collect();
    judged.sort_unstable();
    judged.dedup();
    let unknown: Vec<&str> = judged
        .iter()
        .copied()
        .filter(|d| !ids.contains(d))
        .collect();
    JudgedCheck {
        judged_docs: judged.len(),
        unknown_docs: unknown.len(),
        examples: unknown.iter().take(5).map(|s| s.to_string()).collect(),
        queries_without_nuggets: queries.iter().filter(|q| q.nuggets.is_empty()).count(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn d(v: &[&str]) -> Vec<DatasetSpec> {
        v.iter().map(|x| DatasetSpec::from(*x)).collect()
    }

    #[test]
    fn topics_expand_hub_ids() {
        let plan = TopicSpec::plan(
            &d(&["org/queries-x"]),
            &d(&["org/corpus-x"]),
            &s(&["langchain", "yolo"]),
        )
        .unwrap();
        assert_eq!(plan.len(), 2);
        assert_eq!(plan[1].name, "yolo");
        assert_eq!(plan[1].queries.to_string(), "org/queries-x:yolo");
        assert_eq!(plan[1].corpus.to_string(), "org/corpus-x:yolo");
    }

    #[test]
    fn pairs_take_config_from_queries() {
        let plan = TopicSpec::plan(&d(&["org/q:godot"]), &d(&["org/c"]), &[]).unwrap();
        assert_eq!(plan[0].corpus.to_string(), "org/c:godot");
        assert_eq!(plan[0].name, "godot");
        assert!(TopicSpec::plan(&d(&["org/q:a", "org/q:b"]), &d(&["org/c"]), &[]).is_err());
        let err = TopicSpec::plan(&d(&["org/q"]), &d(&["org/c"]), &[]).unwrap_err();
        assert!(err.to_string().contains("name a config"), "{err}");
        assert!(
            TopicSpec::plan(&d(&["org/q:a", "org/q:a"]), &d(&["org/c", "org/c"]), &[]).is_err()
        );
    }

    /// Issue 34, item 18: `--topic ..` passed (dots are allowed in names) and the benchmark
    /// wrote `OUT/topics/..`, that is OUT's root, and read `DIR/..` for a local `--queries DIR`.
    #[test]
    fn a_topic_named_dot_or_dot_dot_is_refused() {
        for bad in ["..", ".", "a/b", "../x", ""] {
            let err = TopicSpec::plan(&d(&["org/q"]), &d(&["org/c"]), &s(&["ok", bad]))
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("invalid topics: "), "{bad:?}: {err}");
        }
        // A hub config becomes the topic's name too.
        let err = TopicSpec::plan(&d(&["org/q:.."]), &d(&["org/c"]), &[])
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("invalid queries: \"..\""), "{err}");
        let plan = TopicSpec::plan(&d(&["org/q"]), &d(&["org/c"]), &s(&["v1.5"])).unwrap();
        assert_eq!(plan[0].name, "v1.5");
    }
}
