//! Joining shard outputs (`--shard I/N`) into exactly the file one process would have written.
//!
//! Every shard output has a sidecar (`OUT.shard.json`, see [`ShardInfo`]). The shards must come
//! from the same stage, settings and input (same input hash), and together be shards `0..N`
//! exactly once. Then:
//! - LLM stage outputs (JSONL sorted by `query_id`, every question's rows in one shard) are
//!   merged by `query_id`, streaming, lines copied byte for byte;
//! - `embed` outputs (`.npy` + `.ids`) are interleaved back into input order from the rows'
//!   recorded positions, the matrix bytes copied as they are (memory-mapped, streaming).
//!
//! Layer: imports `dataset` (shards, question ids, the vectors format); imported by `cli`.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::dataset::{
    AtomicWriter, NpyWriter, QueryId, SHARD_FORMAT, ShardInfo, VectorMatrix,
    check_output_is_not_an_input, ids_path, shard_info_path, write_ids_beside,
};
use crate::error::{Error, Result, Setting};

/// What [`merge_shards`] joined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergeSummary {
    /// The stage the shards came from.
    pub stage: String,
    /// Shards joined.
    pub shards: usize,
    /// Lines or rows written.
    pub rows: usize,
}

/// Reads and checks the sidecars of `shards`, returned in shard order.
fn read_infos(shards: &[PathBuf]) -> Result<Vec<(PathBuf, ShardInfo)>> {
    if shards.is_empty() {
        return Err(Error::invalid(Setting::Merge, "no shard files given"));
    }
    let mut infos = Vec::with_capacity(shards.len());
    for path in shards {
        let sidecar = shard_info_path(path);
        let text = crate::dataset::bounded::read_text(
            &sidecar,
            crate::dataset::bounded::MAX_SIDE_FILE_BYTES,
        )
        .map_err(|e| {
            Error::invalid(
                Setting::Merge,
                format!(
                    "{}: cannot read its shard sidecar {} ({e}); was it written as a shard?",
                    path.display(),
                    sidecar.display()
                ),
            )
        })?;
        let info: ShardInfo = serde_json::from_str(&text)
            .map_err(|e| Error::parse(&sidecar, e.line(), e.to_string()))?;
        if info.format != SHARD_FORMAT {
            return Err(Error::parse(
                &sidecar,
                1,
                format!(
                    "shard format {} (this build reads {SHARD_FORMAT})",
                    info.format
                ),
            ));
        }
        infos.push((path.clone(), info));
    }
    let (first_path, first) = &infos[0];
    for (path, info) in &infos[1..] {
        let differs = |what: &str| {
            Error::invalid(
                Setting::Merge,
                format!(
                    "{} and {} differ in {what}: not shards of one run",
                    first_path.display(),
                    path.display()
                ),
            )
        };
        if info.stage != first.stage {
            return Err(differs("stage"));
        }
        if info.count != first.count {
            return Err(differs("shard count"));
        }
        if info.settings != first.settings {
            return Err(differs("settings"));
        }
        if info.input_hash != first.input_hash || info.total_items != first.total_items {
            return Err(differs("input"));
        }
    }
    let (count, total_items) = (first.count, first.total_items);
    infos.sort_by_key(|(_, info)| info.shard);
    let have: Vec<usize> = infos.iter().map(|(_, info)| info.shard).collect();
    let want: Vec<usize> = (0..count).collect();
    if have != want {
        let missing: Vec<String> = want
            .iter()
            .filter(|i| !have.contains(i))
            .map(|i| format!("{i}/{count}"))
            .collect();
        let message = if missing.is_empty() {
            "a shard is given twice".to_string()
        } else {
            format!("missing shard(s) {}", missing.join(", "))
        };
        return Err(Error::invalid(Setting::Merge, message));
    }
    let items: usize = infos.iter().map(|(_, info)| info.items).sum();
    if items != total_items {
        return Err(Error::invalid(
            Setting::Merge,
            format!("the shards hold {items} items, the input had {total_items}"),
        ));
    }
    Ok(infos)
}

/// Merges shard outputs into `out` (for `embed`, also `out` with extension `.ids`), atomically.
pub fn merge_shards(shards: &[PathBuf], out: &Path) -> Result<MergeSummary> {
    // A shard given as the output would hold everything, and every later merge would fail.
    let mut inputs: Vec<PathBuf> = Vec::new();
    for shard in shards {
        inputs.push(shard.clone());
        inputs.push(shard_info_path(shard));
        inputs.push(ids_path(shard));
    }
    let input_refs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
    check_output_is_not_an_input(Setting::MergeOutput, out, &input_refs)?;
    check_output_is_not_an_input(Setting::MergeOutput, &ids_path(out), &input_refs)?;
    let infos = read_infos(shards)?;
    let stage = infos[0].1.stage.clone();
    let rows = if stage == "embed" {
        merge_npy(&infos, out)?
    } else {
        merge_jsonl(&infos, out)?
    };
    Ok(MergeSummary {
        stage,
        shards: infos.len(),
        rows,
    })
}

/// The key of a stage output row.
#[derive(Deserialize)]
struct KeyOnly {
    query_id: QueryId,
}

/// One shard's JSONL, read a line ahead.
struct Cursor {
    path: PathBuf,
    lines: crate::dataset::bounded::Lines<BufReader<File>>,
    line_no: usize,
    /// The next line and its key.
    head: Option<(String, String)>,
    rows: usize,
}

impl Cursor {
    fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        let mut cursor = Self {
            path: path.to_path_buf(),
            lines: crate::dataset::bounded::lines(BufReader::new(file)),
            line_no: 0,
            head: None,
            rows: 0,
        };
        cursor.advance()?;
        Ok(cursor)
    }

    /// Moves to the next non-empty line, checking the file stays sorted by key.
    fn advance(&mut self) -> Result<()> {
        let previous = self.head.take().map(|(key, _)| key);
        for line in self.lines.by_ref() {
            self.line_no += 1;
            let line = line.map_err(|e| Error::io(&self.path, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let key: KeyOnly = serde_json::from_str(&line)
                .map_err(|e| Error::parse(&self.path, self.line_no, e.to_string()))?;
            if previous
                .as_ref()
                .is_some_and(|p| p.as_str() > key.query_id.as_str())
            {
                return Err(Error::parse(
                    &self.path,
                    self.line_no,
                    "field query_id: not sorted (was the file edited?)",
                ));
            }
            self.rows += 1;
            self.head = Some((key.query_id.into_string(), line));
            return Ok(());
        }
        Ok(())
    }
}

/// k-way merge by `query_id`; all rows of one question come from one shard, in its order.
fn merge_jsonl(infos: &[(PathBuf, ShardInfo)], out: &Path) -> Result<usize> {
    let mut cursors = infos
        .iter()
        .map(|(path, _)| Cursor::open(path))
        .collect::<Result<Vec<_>>>()?;
    let mut writer = AtomicWriter::create(out)?;
    let mut written = 0;
    loop {
        // The shard whose head has the smallest key; an equal key in two shards is an overlap.
        let mut best: Option<usize> = None;
        for (i, cursor) in cursors.iter().enumerate() {
            let Some((key, _)) = &cursor.head else {
                continue;
            };
            match best {
                None => best = Some(i),
                Some(b) => {
                    let best_key = cursors[b].head.as_ref().map(|(k, _)| k.as_str());
                    match Some(key.as_str()).cmp(&best_key) {
                        Ordering::Less => best = Some(i),
                        Ordering::Equal => {
                            return Err(Error::invalid(
                                Setting::Merge,
                                format!(
                                    "question {key:?} is in both {} and {}: shards overlap",
                                    cursors[b].path.display(),
                                    cursor.path.display()
                                ),
                            ));
                        }
                        Ordering::Greater => {}
                    }
                }
            }
        }
        let Some(b) = best else { break };
        let key = cursors[b].head.as_ref().map(|(k, _)| k.clone());
        // Copy this question's whole group from shard b.
        while let Some((k, line)) = &cursors[b].head {
            if Some(k) != key.as_ref() {
                break;
            }
            writer
                .write_all(line.as_bytes())
                .and_then(|()| writer.write_all(b"\n"))
                .map_err(|e| Error::io(out, e))?;
            written += 1;
            cursors[b].advance()?;
        }
    }
    for (cursor, (_, info)) in cursors.iter().zip(infos) {
        if cursor.rows != info.rows {
            return Err(Error::invalid(
                Setting::Merge,
                format!(
                    "{} has {} lines, its sidecar says {} (truncated or edited?)",
                    cursor.path.display(),
                    cursor.rows,
                    info.rows
                ),
            ));
        }
    }
    writer.commit()?;
    Ok(written)
}

/// Interleaves `.npy` shards (and their `.ids`) back into input order.
fn merge_npy(infos: &[(PathBuf, ShardInfo)], out: &Path) -> Result<usize> {
    let total = infos[0].1.total_items;
    // (shard, row in shard) of each input position.
    let mut source = vec![(u32::MAX, 0usize); total];
    let mut matrices: Vec<VectorMatrix> = Vec::with_capacity(infos.len());
    let mut ids: Vec<Option<String>> = vec![None; total];
    for (s, (path, info)) in infos.iter().enumerate() {
        let this = VectorMatrix::open(path)?;
        if let Some(first) = matrices.first()
            && (first.dtype(), first.dim()) != (this.dtype(), this.dim())
        {
            return Err(Error::invalid(
                Setting::Merge,
                format!(
                    "{}: dtype/dim {:?}/{} differ from the first shard's {:?}/{}",
                    path.display(),
                    this.dtype(),
                    this.dim(),
                    first.dtype(),
                    first.dim()
                ),
            ));
        }
        if this.rows() != info.positions.len() || this.rows() != info.rows {
            return Err(Error::invalid(
                Setting::Merge,
                format!(
                    "{} has {} rows, its sidecar lists {} positions",
                    path.display(),
                    this.rows(),
                    info.positions.len()
                ),
            ));
        }
        let ids_path = ids_path(path);
        let text = crate::dataset::bounded::read_line_string(&ids_path)
            .map_err(|e| Error::io(&ids_path, e))?;
        let shard_ids: Vec<&str> = text.lines().collect();
        if shard_ids.len() != this.rows() {
            return Err(Error::invalid(
                Setting::Merge,
                format!(
                    "{} has {} ids for {} rows",
                    ids_path.display(),
                    shard_ids.len(),
                    this.rows()
                ),
            ));
        }
        for (row, (&p, id)) in info.positions.iter().zip(shard_ids).enumerate() {
            if p >= total || source[p].0 != u32::MAX {
                return Err(Error::invalid(
                    Setting::Merge,
                    format!(
                        "{}: row position {p} is out of range or in two shards",
                        path.display()
                    ),
                ));
            }
            source[p] = (s as u32, row);
            ids[p] = Some(id.to_string());
        }
        matrices.push(this);
    }
    let ids: Vec<String> = ids
        .into_iter()
        .enumerate()
        .map(|(p, id)| {
            id.ok_or_else(|| {
                Error::invalid(Setting::Merge, format!("no shard holds input row {p}"))
            })
        })
        .collect::<Result<_>>()?;
    let Some(first) = matrices.first() else {
        return Err(Error::invalid(Setting::Merge, "no shard files given"));
    };
    // The stored bytes are copied as they are: no value is converted twice.
    let mut writer = NpyWriter::create(out, first.dtype(), total, first.dim())?;
    for &(s, row) in &source {
        writer.write_row_bytes(matrices[s as usize].row_bytes(row))?;
    }
    writer.finish()?;
    write_ids_beside(out, &ids)?;
    Ok(total)
}
