//! `freshstack fuse`: combine TREC runs (normalized sum as the paper, or RRF).

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, ValueEnum};
use freshstack::dataset::{RunFile, ScoreText, write_trec_rankings};
use freshstack::search::{FusionMethod, FusionOptions, fuse_rankings};

use freshstack::Setting;

use super::with_flags;

/// Fusion methods on the command line (`fuse --method`, `search`/`retrieve --fusion-method`).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Method {
    /// Min-max normalise each run's top-depth scores and sum them (the paper's fusion).
    #[value(alias = "normalized_sum")]
    NormalizedSum,
    /// Reciprocal rank fusion, 1 / (k + rank).
    Rrf,
}

impl Method {
    /// The library's method, RRF with offset `rrf_k`.
    pub fn with_rrf_k(self, rrf_k: f64) -> FusionMethod {
        match self {
            Method::NormalizedSum => FusionMethod::NormalizedSum,
            Method::Rrf => FusionMethod::Rrf { k: rrf_k },
        }
    }
}

/// How the library's settings are named on this command line.
fn flags(setting: Setting) -> Option<&'static str> {
    Some(match setting {
        Setting::FusionDepth => "--depth",
        Setting::FusionWeights => "--weights",
        Setting::FusionOutput => "--out",
        Setting::RrfK => "--rrf-k",
        _ => return None,
    })
}

/// Arguments of `freshstack fuse`.
#[derive(Debug, Args)]
pub struct FuseArgs {
    /// TREC runs to fuse (two or more).
    #[arg(required = true, num_args = 2.., value_name = "RUN")]
    runs: Vec<PathBuf>,
    /// Output TREC run (written atomically).
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Documents taken from each run per question.
    #[arg(long, default_value_t = 100)]
    depth: usize,
    /// How scores are combined.
    #[arg(long, value_enum, default_value_t = Method::NormalizedSum)]
    method: Method,
    /// The k of RRF (a finite number >= 0).
    #[arg(long, default_value_t = 60.0)]
    rrf_k: f64,
    /// Per-run weights, comma-separated (default: all 1).
    #[arg(long, value_delimiter = ',')]
    weights: Option<Vec<f64>>,
    /// Round fused scores to N decimals, as the reference does with 3 (creates ties).
    #[arg(long, value_name = "N")]
    round: Option<usize>,
    /// Run tag written in the last column.
    #[arg(long, default_value = "fusion")]
    tag: String,
}

pub fn run(args: FuseArgs) -> anyhow::Result<()> {
    let inputs: Vec<&std::path::Path> = args.runs.iter().map(PathBuf::as_path).collect();
    freshstack::dataset::check_output_is_not_an_input(Setting::FusionOutput, &args.out, &inputs)
        .map_err(|e| with_flags(e, flags))?;
    // Named by their paths, so that an error about a run names its file.
    let runs = args
        .runs
        .iter()
        .map(|path| {
            RunFile::read(path).map(|mut run| {
                run.set_name(path.display().to_string());
                run
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let options = FusionOptions {
        method: args.method.with_rrf_k(args.rrf_k),
        depth: args.depth,
        weights: args.weights,
        round_digits: args.round,
    };
    let started = Instant::now();
    let refs: Vec<&RunFile> = runs.iter().collect();
    let fused = fuse_rankings(&refs, &options, &args.tag).map_err(|e| with_flags(e, flags))?;
    let fusion_ms = started.elapsed().as_secs_f64() * 1e3;
    write_trec_rankings(&fused, &args.out, &args.tag, usize::MAX, ScoreText::F64)
        .with_context(|| format!("cannot write {}", args.out.display()))?;
    eprintln!(
        "fused {} runs over {} questions in {fusion_ms:.1} ms -> {}",
        runs.len(),
        fused.len(),
        args.out.display()
    );
    Ok(())
}
