//! `freshstack merge`: join `--shard I/N` outputs into what one process would have written.

use std::path::PathBuf;

use clap::Args;
use freshstack::merge::merge_shards;

/// Arguments of `freshstack merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The merged file (for embed shards, the `.npy`; the `.ids` go next to it).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// The shard outputs (JSONL of nuggets, query-variants or judge, or embed `.npy`), each
    /// with its OUT.shard.json sidecar; any order.
    #[arg(value_name = "SHARD", required = true)]
    shards: Vec<PathBuf>,
}

pub fn run(args: MergeArgs) -> anyhow::Result<()> {
    let summary = merge_shards(&args.shards, &args.out)?;
    eprintln!(
        "merged {} {} shards into {} ({} rows)",
        summary.shards,
        summary.stage,
        args.out.display(),
        summary.rows
    );
    Ok(())
}
