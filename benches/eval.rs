//! Evaluation speed: 1,000 questions (5 nuggets each) x runs of 1,000 documents, generated
//! with a seeded generator. Measures parsing a TREC run, indexing the judgments, and scoring
//! (paper metrics at k = 10, 20, 50; and all eight metrics).

use std::hint::black_box;
use std::io::Write;

use criterion::{Criterion, criterion_group, criterion_main};
use freshstack::dataset::{NuggetQrels, Run};
use freshstack::eval::{EvalConfig, Judgments, Metric, evaluate};

const QUESTIONS: usize = 1_000;
const DOCS_PER_RUN: usize = 1_000;
const CORPUS: u64 = 200_000;

/// SplitMix64: a seeded generator, enough for synthetic inputs.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn doc(i: u64) -> String {
    format!("owner/repo/src/module{}/file{i}.py_{i}_{}", i / 50, i + 700)
}

fn inputs() -> (NuggetQrels, String) {
    let mut rng = Rng(7);
    let mut qrels = NuggetQrels::new();
    let mut trec = String::with_capacity(QUESTIONS * DOCS_PER_RUN * 60);
    for q in 0..QUESTIONS {
        let qid = format!("q{q:05}");
        let pool: Vec<u64> = (0..40).map(|_| rng.below(CORPUS)).collect();
        for n in 0..5 {
            let nid = format!("{qid}_{n}");
            qrels.add_nugget(&qid, &nid);
            for _ in 0..1 + rng.below(8) {
                qrels.set(&qid, &nid, &doc(pool[rng.below(40) as usize]), 1);
            }
            for _ in 0..5 {
                let d = doc(pool[rng.below(40) as usize]);
                let known = qrels
                    .get(&qid)
                    .is_some_and(|j| j.nuggets[n].docs.iter().any(|(x, _)| *x == d));
                if !known {
                    qrels.set(&qid, &nid, &d, 0);
                }
            }
        }
        for rank in 0..DOCS_PER_RUN {
            let id = if rank % 33 == 0 {
                pool[rng.below(40) as usize]
            } else {
                rng.below(CORPUS)
            };
            let score = (rng.below(100_000) as f64) / 1000.0;
            trec.push_str(&format!(
                "{qid} Q0 {} {} {score} bench\n",
                doc(id),
                rank + 1
            ));
        }
    }
    (qrels, trec)
}

fn bench_eval(c: &mut Criterion) {
    let (qrels, trec) = inputs();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.trec");
    std::fs::File::create(&path)
        .unwrap()
        .write_all(trec.as_bytes())
        .unwrap();
    let run = Run::read_trec(&path).unwrap();
    let judgments = Judgments::new(&qrels);
    let paper = EvalConfig::new(&[], &[10, 20, 50]).unwrap();
    let all = EvalConfig::new(&Metric::ALL, &[10, 20, 50]).unwrap();

    let mut group = c.benchmark_group("eval_1000x1000");
    group.sample_size(10);
    group.bench_function("read_trec", |b| {
        b.iter(|| Run::read_trec(black_box(&path)).unwrap())
    });
    group.bench_function("index_judgments", |b| {
        b.iter(|| Judgments::new(black_box(&qrels)))
    });
    group.bench_function("evaluate_paper_k10_20_50", |b| {
        b.iter(|| evaluate(black_box(&judgments), black_box(&run), &paper))
    });
    group.bench_function("evaluate_all_metrics", |b| {
        b.iter(|| evaluate(black_box(&judgments), black_box(&run), &all))
    });
    group.finish();
}

criterion_group!(benches, bench_eval);
criterion_main!(benches);
