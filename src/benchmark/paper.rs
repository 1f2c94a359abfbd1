//! The paper's published numbers (`examples/paper-results.toml`), shown beside ours and always
//! labelled as the paper's.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// Published results: measures, topic labels and rows of scores.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PaperResults {
    /// Where the numbers come from (paper, version, table).
    pub source: String,
    /// Measure names, in the order of each row's scores (`alpha_ndcg@10`, ...).
    pub measures: Vec<String>,
    /// Topic key (the hub config: `langchain`, ...) to the paper's column title.
    pub topics: BTreeMap<String, String>,
    /// One row per published retriever, in the file's order.
    pub rows: Vec<PaperRow>,
}

/// One published row.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PaperRow {
    /// Table or figure (`Table 4`).
    pub table: String,
    /// The setting and query variant (`oracle: Stack Overflow nuggets`).
    pub setting: String,
    /// The retriever (`BM25`, `Fusion (4 models)`).
    pub model: String,
    /// True for the rows Figure 3 draws as its oracle reference lines.
    #[serde(default)]
    pub figure3: bool,
    /// Topic key to one score per measure.
    pub scores: BTreeMap<String, Vec<f64>>,
}

impl PaperResults {
    /// Reads and checks the TOML file: every row has one score per measure, for known topics.
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            crate::dataset::bounded::read_text(path, crate::dataset::bounded::MAX_SETTINGS_BYTES)
                .map_err(|e| Error::io(path, e))?;
        let results: PaperResults = toml::from_str(&text)
            .map_err(|e| Error::dataset(path, format!("not a paper-results file: {e}")))?;
        for row in &results.rows {
            for (topic, scores) in &row.scores {
                if !results.topics.contains_key(topic) {
                    return Err(Error::dataset(
                        path,
                        format!(
                            "row {} / {}: unknown topic {topic:?}",
                            row.setting, row.model
                        ),
                    ));
                }
                if scores.len() != results.measures.len() {
                    return Err(Error::dataset(
                        path,
                        format!(
                            "row {} / {} / {topic}: {} scores for {} measures",
                            row.setting,
                            row.model,
                            scores.len(),
                            results.measures.len()
                        ),
                    ));
                }
            }
        }
        Ok(results)
    }

    /// The rows with a score for at least one of `topics`.
    pub fn rows_for<'a>(&'a self, topics: &'a [String]) -> impl Iterator<Item = &'a PaperRow> {
        self.rows
            .iter()
            .filter(move |r| topics.iter().any(|t| r.scores.contains_key(t)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_file_reads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/paper-results.toml");
        let paper = PaperResults::read(&path).unwrap();
        assert_eq!(paper.topics.len(), 5);
        // Table 4 has 4 query settings x 5 models.
        assert_eq!(paper.rows.len(), 20);
        assert_eq!(paper.rows.iter().filter(|r| r.figure3).count(), 2);
        let bm25 = &paper.rows[0];
        assert_eq!(bm25.model, "BM25");
        assert_eq!(bm25.scores["langchain"], vec![0.228, 0.495, 0.249]);
    }

    #[test]
    fn wrong_arity_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(
            &path,
            "source = 'x'\nmeasures = ['a', 'b']\n[topics]\nt = 'T'\n[[rows]]\ntable = 'T4'\n\
             setting = 's'\nmodel = 'm'\nscores = { t = [0.1] }\n",
        )
        .unwrap();
        let err = PaperResults::read(&path).unwrap_err().to_string();
        assert!(err.contains("1 scores for 2 measures"), "{err}");
    }
}
