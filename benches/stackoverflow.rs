//! Parse throughput of the Stack Overflow dump reader (MB/s of XML) on a generated dump.
//!
//! `FRESHSTACK_BENCH_SO_MB` sets the dump size (default 32 MB; the comparison with Python in
//! `benches/compare/so_vs_python.sh` uses >= 200 MB). Three scans: rows only (attributes located),
//! the `tags` report (ids, types, dates, tags decoded), and the full `import` (two passes, bodies
//! of the selected questions decoded and converted).

use std::fmt::Write as _;
use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use freshstack::NoProgress;
use freshstack::source::stackoverflow::{
    DEFAULT_MAX_EVENT_BYTES, DayRange, ImportConfig, TagFilter, TagMatch, import_questions,
    scan_posts, tag_cooccurrence,
};

/// A small deterministic generator (xorshift), so runs compare.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\n', "&#xA;")
}

/// Writes a Posts.xml of about `target_bytes`: one question in three, answers after their
/// question or before it, bodies with paragraphs, inline code and a code block, 1% laravel.
fn generate(path: &Path, target_bytes: usize) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let words = [
        "route",
        "model",
        "query",
        "migration",
        "eloquent",
        "request",
        "the",
        "a",
        "with",
        "how",
        "does",
        "controller",
        "view",
        "blade",
        "cache",
        "queue",
        "job",
        "returns",
        "null",
        "error",
    ];
    let mut xml = String::with_capacity(target_bytes + 4096);
    xml.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<!-- generated -->\n<posts>\n");
    let mut id = 1u64;
    while xml.len() < target_bytes {
        let mut body = String::new();
        for _ in 0..1 + rng.below(3) {
            body.push_str("<p>");
            for _ in 0..20 + rng.below(40) {
                body.push_str(words[rng.below(words.len() as u64) as usize]);
                body.push(' ');
            }
            body.push_str("<code>$x-&gt;y()</code> &amp; more.</p>\n");
        }
        body.push_str("<pre class=\"lang-php prettyprint-override\"><code>");
        for line in 0..3 + rng.below(10) {
            let _ = writeln!(body, "$v{line} = $a &lt; $b &amp;&amp; \"q\" ? 1 : 2;");
        }
        body.push_str("</code></pre>\n");
        let tag = if rng.below(100) == 0 {
            "laravel".to_string()
        } else {
            format!("tag{}", rng.below(2000))
        };
        let year = 2018 + rng.below(7);
        let _ = writeln!(
            xml,
            "  <row Id=\"{id}\" PostTypeId=\"1\" AcceptedAnswerId=\"{}\" CreationDate=\"{year}-03-14T10:11:12.880\" Score=\"{}\" ViewCount=\"{}\" Body=\"{}\" OwnerUserId=\"{}\" LastActivityDate=\"2024-01-01T00:00:00.000\" Title=\"How to {} {}\" Tags=\"|php|{tag}|tag{}|\" AnswerCount=\"2\" CommentCount=\"0\" ContentLicense=\"CC BY-SA 4.0\" />",
            id + 1,
            rng.below(50),
            rng.below(10_000),
            escape(&body),
            rng.below(1_000_000),
            words[rng.below(20) as usize],
            words[rng.below(20) as usize],
            rng.below(2000),
        );
        for answer in 1..=2 {
            let _ = writeln!(
                xml,
                "  <row Id=\"{}\" PostTypeId=\"2\" ParentId=\"{id}\" CreationDate=\"{year}-03-15T10:11:12.880\" Score=\"{}\" Body=\"{}\" OwnerUserId=\"{}\" LastActivityDate=\"2024-01-01T00:00:00.000\" CommentCount=\"0\" ContentLicense=\"CC BY-SA 4.0\" />",
                id + answer,
                rng.below(50),
                escape(&body),
                rng.below(1_000_000),
            );
        }
        id += 3;
    }
    xml.push_str("</posts>\n");
    std::fs::write(path, xml).expect("write the generated dump");
}

fn bench(c: &mut Criterion) {
    let mb: usize = std::env::var("FRESHSTACK_BENCH_SO_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let dir = tempfile::tempdir().expect("temp dir");
    let posts = dir.path().join("Posts.xml");
    generate(&posts, mb << 20);
    let bytes = std::fs::metadata(&posts).expect("dump size").len();

    let mut group = c.benchmark_group("stackoverflow");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes));
    group.bench_function("scan_rows", |b| {
        b.iter(|| {
            let mut n = 0u64;
            scan_posts(&posts, DEFAULT_MAX_EVENT_BYTES, &NoProgress, |row| {
                n += row.byte_offset() & 1;
                Ok(())
            })
            .expect("scan");
            black_box(n)
        })
    });
    group.bench_function("tags_report", |b| {
        b.iter(|| {
            tag_cooccurrence(&posts, "laravel", &DayRange::default(), 30, &NoProgress)
                .expect("tags")
        })
    });
    let config = ImportConfig {
        filter: TagFilter::new(&["laravel".to_string()], TagMatch::Any).expect("filter"),
        range: DayRange::default(),
        min_score: None,
        allow_unaccepted: false,
        site_url: "https://stackoverflow.com".into(),
        max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
    };
    let out = dir.path().join("questions.jsonl");
    // Two passes: the throughput is per pass over the dump, so count the bytes twice.
    group.throughput(Throughput::Bytes(2 * bytes));
    group.bench_function("import_two_passes", |b| {
        b.iter(|| import_questions(&posts, &config, &out, &NoProgress).expect("import"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
