//! Writing TREC runs: `qid Q0 docid rank score tag`, one line per hit, queries in the order
//! given, ranks from 1; written atomically.

use std::io::Write;
use std::path::Path;

use crate::dataset::AtomicWriter;
use crate::error::{Error, Result};
use crate::search::Hit;

/// Writes `results` (query id, ranked hits) to `path` as a TREC run tagged `tag`. Scores use
/// the shortest representation that round-trips, so equal runs are byte-identical.
pub fn write_trec(path: &Path, results: &[(String, Vec<Hit>)], tag: &str) -> Result<()> {
    if tag.is_empty() || tag.contains(char::is_whitespace) {
        return Err(Error::invalid("tag", format!("{tag:?}: must be one word")));
    }
    let mut out = AtomicWriter::create(path)?;
    for (qid, hits) in results {
        for (rank, hit) in hits.iter().enumerate() {
            writeln!(out, "{qid} Q0 {} {} {} {tag}", hit.id, rank + 1, hit.score)
                .map_err(|e| Error::io(path, e))?;
        }
    }
    out.commit()
}
