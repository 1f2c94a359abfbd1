//! Fusion throughput: 1,000 questions x 4 runs x 100 documents (the size), normalized
//! sum and RRF over owned [`Run`]s, and normalized sum over [`RunFile`]s (what `freshstack fuse`
//! uses: ids are spans into the loaded files). Run: `cargo bench --bench fusion`.

use criterion::{Criterion, criterion_group, criterion_main};
use freshstack::Run;
use freshstack::dataset::RunFile;
use freshstack::search::{FusionMethod, FusionOptions, fuse, fuse_rankings};

/// A deterministic pseudo-random generator (SplitMix64): no extra dependency.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn runs() -> Vec<Run> {
    let mut rng = SplitMix(42);
    (0..4)
        .map(|r| {
            let mut run = Run::new(format!("run{r}"));
            for q in 0..1000 {
                for d in 0..100 {
                    let doc = rng.next() % 400;
                    let score = 100.0 - d as f64 + (rng.next() % 1000) as f64 / 1e4;
                    run.push(&format!("q{q}"), &format!("repo/file{doc}.md_0_100"), score);
                }
            }
            run
        })
        .collect()
}

fn fusion(c: &mut Criterion) {
    let runs = runs();
    let refs: Vec<&Run> = runs.iter().collect();
    let mut group = c.benchmark_group("fusion_1000q_4runs_100docs");
    group.sample_size(20);
    group.bench_function("normalized_sum", |b| {
        b.iter(|| fuse(&refs, &FusionOptions::default(), "f").map(|r| r.len()))
    });
    let rrf = FusionOptions {
        method: FusionMethod::Rrf { k: 60.0 },
        ..FusionOptions::default()
    };
    group.bench_function("rrf", |b| {
        b.iter(|| fuse(&refs, &rrf, "f").map(|r| r.len()))
    });
    // The shape of `benches/compare/fusion_vs_reference.py`: 100 distinct documents of 400 per
    // question, ranked by score.
    let mut rng = SplitMix(7);
    let files: Vec<RunFile> = (0..4)
        .map(|r| {
            let mut text = String::new();
            for q in 0..1000 {
                let mut pool: Vec<u64> = (0..400).collect();
                for rank in 1..=100u64 {
                    let pick = rank as usize - 1 + (rng.next() % (401 - rank)) as usize;
                    pool.swap(rank as usize - 1, pick);
                    let score = 100.0 - rank as f64 + (rng.next() % 1_000_000) as f64 / 1e6;
                    text.push_str(&format!(
                        "q{q} Q0 repo/file{}.md_0_100 {rank} {score:.6} r{r}\n",
                        pool[rank as usize - 1]
                    ));
                }
            }
            RunFile::parse(format!("run{r}"), text).unwrap()
        })
        .collect();
    let file_refs: Vec<&RunFile> = files.iter().collect();
    let rounded = FusionOptions {
        round_digits: Some(3),
        ..FusionOptions::default()
    };
    group.bench_function("normalized_sum_run_files_round3", |b| {
        b.iter(|| fuse_rankings(&file_refs, &rounded, "f").map(|r| r.len()))
    });
    group.finish();
}

criterion_group!(benches, fusion);
criterion_main!(benches);
