//! Shards: one of N deterministic slices of a stage's work, for Slurm arrays and fleets, and the
//! sidecar each shard writes next to its output so that `freshstack merge` can join the shards
//! into exactly the bytes one process would have written.
//!
//! The slice is taken over the stage's own work order: questions sorted by id for the LLM
//! stages (question `i` goes to shard `i % N`), the length-sorted batches of the encoder for
//! `embed` (batch `b` to shard `b % N`, so every row is computed in the same batch, hence to the
//! same bits, as in one process). The sidecar (`OUT` with extension `.shard.json`) names the
//! stage, the shard, the settings that must agree across shards, a hash of the whole input's
//! keys, and for `embed` the input positions of the shard's rows.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{Fnv1a64, write_json_atomic};
use crate::error::{Error, Result, Setting};

/// Version of the sidecar format.
pub const SHARD_FORMAT: u32 = 1;

/// Shard `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard, `0..count`.
    pub index: usize,
    /// Number of shards.
    pub count: usize,
}

impl Shard {
    /// Whether work item `i` (in the stage's work order) belongs to this shard.
    pub fn contains(&self, i: usize) -> bool {
        i % self.count == self.index
    }
}

impl std::str::FromStr for Shard {
    type Err = Error;

    /// Parses `I/N` (0 <= I < N).
    fn from_str(text: &str) -> Result<Self> {
        let bad = |m: &str| Error::invalid(Setting::Shard, format!("{text:?}: {m}"));
        let (i, n) = text.split_once('/').ok_or_else(|| bad("expected I/N"))?;
        let index: usize = i.trim().parse().map_err(|_| bad("I is not a number"))?;
        let count: usize = n.trim().parse().map_err(|_| bad("N is not a number"))?;
        if count == 0 || index >= count {
            return Err(bad("need 0 <= I < N"));
        }
        Ok(Self { index, count })
    }
}

/// The sidecar of a shard output: `OUT` with its extension replaced by `shard.json`.
pub fn shard_info_path(out: &Path) -> PathBuf {
    out.with_extension("shard.json")
}

/// What a shard's sidecar records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardInfo {
    /// [`SHARD_FORMAT`].
    pub format: u32,
    /// The stage that wrote it: `embed`, `nuggets`, `query-variants` or `judge`.
    pub stage: String,
    /// This shard.
    pub shard: usize,
    /// Number of shards.
    pub count: usize,
    /// Settings that must be equal across shards (model, prompt, dtype, batch budget...).
    pub settings: String,
    /// FNV-1a of every work item's key of the whole input, in work order: shards of different
    /// inputs do not merge.
    pub input_hash: String,
    /// Work items of the whole input (questions, or rows for `embed`).
    pub total_items: usize,
    /// Work items in this shard.
    pub items: usize,
    /// Lines (JSONL) or rows (`.npy`) in the shard's output.
    pub rows: usize,
    /// `embed`: the input position of each output row, ascending.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub positions: Vec<usize>,
}

impl ShardInfo {
    /// The sidecar of `shard`'s slice of a `stage` run over work items with these `keys` (the
    /// whole input, in work order: their [`keys_hash`] and count), with the `settings` that must
    /// agree between shards. `items`, `rows` and `positions` start empty: the stage fills them
    /// in once it knows them.
    pub fn new<'a>(
        stage: &str,
        shard: Shard,
        settings: String,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let mut total_items = 0;
        let input_hash = keys_hash(keys.into_iter().inspect(|_| total_items += 1));
        Self {
            format: SHARD_FORMAT,
            stage: stage.to_string(),
            shard: shard.index,
            count: shard.count,
            settings,
            input_hash,
            total_items,
            items: 0,
            rows: 0,
            positions: Vec::new(),
        }
    }

    /// Writes the sidecar next to the shard's output `out` ([`shard_info_path`]), atomically.
    pub fn write(&self, out: &Path) -> Result<()> {
        write_json_atomic(shard_info_path(out), self)
    }
}

/// FNV-1a (64-bit) of `keys`, each followed by a newline, as 16 hex digits.
pub fn keys_hash<'a>(keys: impl IntoIterator<Item = &'a str>) -> String {
    let mut hash = Fnv1a64::default();
    for key in keys {
        hash.update(key.as_bytes());
        hash.update(b"\n");
    }
    hash.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn parses_and_selects() {
        let s = Shard::from_str("1/3").unwrap();
        assert_eq!(s, Shard { index: 1, count: 3 });
        let picked: Vec<usize> = (0..8).filter(|&i| s.contains(i)).collect();
        assert_eq!(picked, [1, 4, 7]);
        for bad in ["3/3", "x", "1/0", "a/2", "1-2"] {
            assert!(Shard::from_str(bad).is_err(), "{bad}");
        }
        assert_eq!(
            shard_info_path(Path::new("out/n.0.jsonl")),
            Path::new("out/n.0.shard.json")
        );
        assert_ne!(keys_hash(["ab", "c"]), keys_hash(["a", "bc"]));
    }
}
