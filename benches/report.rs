//! Report speed on a generated dataset: 50,000 corpus rows from 8 repositories, 200 questions
//! (title, body with a code block, answer; 3 nuggets each) and 20 pooling runs of 100 documents
//! per question. Measures the whole `report::compute` (corpus scan, token counts, 20 runs read
//! and scored), rendering the HTML page (three SVG charts), and one chart alone.

use std::hint::black_box;
use std::io::Write;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::report::svg::{PALETTE, Series, grouped_bars};
use freshstack::report::{ReportOptions, compute, render_html};

const DOCS: u64 = 50_000;
const REPOS: u64 = 8;
const QUESTIONS: usize = 200;
const DOCS_PER_RUN: usize = 100;

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
    format!(
        "owner{}/repo/src/module{}/file{i}.py_0_{}",
        i % REPOS,
        i / 50,
        700 + i % 300
    )
}

const WORDS: [&str; 12] = [
    "route",
    "the",
    "middleware",
    "returns",
    "a",
    "collection",
    "when",
    "query",
    "builder",
    "is",
    "called",
    "error",
];

fn prose(rng: &mut Rng, words: usize) -> String {
    (0..words)
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

fn write_dataset(dir: &Path) {
    let mut rng = Rng(11);
    let mut corpus =
        std::io::BufWriter::new(std::fs::File::create(dir.join("corpus.jsonl")).unwrap());
    for i in 0..DOCS {
        let row = serde_json::json!({"_id": doc(i), "title": "", "text": prose(&mut rng, 40),
            "metadata": {"url": format!("https://github.com/owner{}/repo/blob/HEAD/x", i % REPOS),
            "start_byte": 0, "end_byte": 700, "commit_id": null}});
        writeln!(corpus, "{row}").unwrap();
    }
    corpus.flush().unwrap();
    let mut queries = std::fs::File::create(dir.join("queries.jsonl")).unwrap();
    let mut pools = Vec::with_capacity(QUESTIONS);
    for q in 0..QUESTIONS {
        let qid = format!("q{q:04}");
        let pool: Vec<u64> = (0..30).map(|_| rng.below(DOCS)).collect();
        let nuggets: Vec<serde_json::Value> = (0..3)
            .map(|n| {
                let rel: Vec<String> = (0..3).map(|_| doc(pool[rng.below(30) as usize])).collect();
                let non: Vec<String> = (0..5).map(|_| doc(pool[rng.below(30) as usize])).collect();
                serde_json::json!({"_id": format!("{qid}_{n}"), "text": prose(&mut rng, 12),
                    "relevant_corpus_ids": rel, "non_relevant_corpus_ids": non})
            })
            .collect();
        let body = format!(
            "{}\n\n```php\n{}\n```\n\n{}",
            prose(&mut rng, 150),
            prose(&mut rng, 60),
            prose(&mut rng, 80)
        );
        let row = serde_json::json!({"query_id": qid, "query_title": prose(&mut rng, 10),
            "query_text": body, "answer_id": q.to_string(), "answer_text": prose(&mut rng, 150),
            "metadata": {"date": "2024-10-01", "tags": ["php"]}, "nuggets": nuggets});
        writeln!(queries, "{row}").unwrap();
        pools.push((qid, pool));
    }
    std::fs::create_dir_all(dir.join("runs")).unwrap();
    let techniques = [
        "inference.question",
        "inference.subquestions",
        "inference.closed_book_answer",
        "oracle.answer",
        "oracle.nuggets",
    ];
    let retrievers = [
        "bm25",
        "bge-base-en-v1.5",
        "e5-mistral-7b-instruct",
        "fusion",
    ];
    for t in techniques {
        for r in retrievers {
            let mut run = std::io::BufWriter::new(
                std::fs::File::create(dir.join(format!("runs/{t}.{r}.trec"))).unwrap(),
            );
            for (qid, pool) in &pools {
                for rank in 0..DOCS_PER_RUN {
                    let id = if rank % 7 == 0 {
                        pool[rng.below(30) as usize]
                    } else {
                        rng.below(DOCS)
                    };
                    writeln!(
                        run,
                        "{qid} Q0 {} {} {} {r}",
                        doc(id),
                        rank + 1,
                        100.0 - rank as f64
                    )
                    .unwrap();
                }
            }
            run.flush().unwrap();
        }
    }
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let options = ReportOptions::default();
    let mut group = c.benchmark_group("report");
    group.sample_size(10);
    group.bench_function("compute_50k_docs_200q_20_runs", |b| {
        b.iter(|| black_box(compute(dir.path(), &options, &NoProgress).unwrap()))
    });
    let report = compute(dir.path(), &options, &NoProgress).unwrap();
    group.bench_function("render_html_3_charts", |b| {
        b.iter(|| black_box(render_html(&report, None).unwrap()))
    });
    let groups: Vec<String> = ["bm25", "bge", "e5", "fusion"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let series: Vec<Series> = (0..5)
        .map(|i| Series::new(format!("s{i}"), vec![Some(0.1 * i as f64); 4], PALETTE[i]))
        .collect();
    group.bench_function("grouped_bars_4x5", |b| {
        b.iter(|| black_box(grouped_bars("chart", &groups, &series).unwrap()))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
