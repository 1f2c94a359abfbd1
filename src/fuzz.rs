//! Fuzzing entry points: one [`Target`] per parser of outside input, each calling the library's
//! real reader on arbitrary bytes. Not an API: the fuzz harnesses (`fuzz/` for `cargo fuzz`,
//! `examples/fuzz.rs` on stable) and the committed-corpus regression test drive these.
//!
//! Readers that take a path get the bytes written to a file in a [`Scratch`] directory first,
//! so the file handling (open, map, size checks) is fuzzed with the parser. An error is a good
//! outcome; a panic, an abort or an allocation out of proportion to the input is a finding.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::dataset::{
    JudgmentRecord, NuggetsRecord, Run, RunFile, VectorMatrix, read_jsonl, read_jsonl_lines,
    read_npy_f32, read_questions,
};
use crate::eval::{JudgmentsFormat, load_judgments};
use crate::index::{MANIFEST_FILE, Manifest, read_corpus};
use crate::llm::{LocalChat, parse};
use crate::pipeline::BuildConfig;
use crate::report::calibration::{Annotations, score};
use crate::search::{QueryField, read_queries};
use crate::source::stackoverflow::{Field, decode_entities, html_to_markdown, scan_reader};

/// A parser of outside input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Stack Exchange `Posts.xml` rows ([`scan_reader`]), each field read as the import does,
    /// bodies converted to Markdown.
    SoXml,
    /// Stack Exchange HTML bodies ([`html_to_markdown`], [`decode_entities`]).
    SoHtml,
    /// Questions JSONL ([`read_questions`], [`read_queries`] for every query field).
    Questions,
    /// Corpus JSONL ([`read_corpus`]).
    Corpus,
    /// Nuggets JSONL (the judge stage's reader of [`NuggetsRecord`] rows).
    Nuggets,
    /// Judgments: a dataset's `queries.jsonl` ([`load_judgments`]) and judgment rows.
    Judgments,
    /// TREC runs ([`RunFile::read`], [`Run::read_trec`]).
    TrecRun,
    /// ndeval subtopic qrels ([`load_judgments`] with [`JudgmentsFormat::NdevalQrels`]).
    Qrels,
    /// LLM answers: the stages' reply parsers and [`parse`]'s helpers.
    LlmAnswer,
    /// GGUF files ([`LocalChat::load`]: the header, then the weights).
    Gguf,
    /// safetensors files, read as the encoders read them (candle's memory-mapped loader).
    Safetensors,
    /// `.npy` matrices ([`VectorMatrix::open`], [`read_npy_f32`]).
    Npy,
    /// Index manifests ([`Manifest::read`]).
    Manifest,
    /// Build configs ([`BuildConfig::load`]: TOML, every setting checked at load).
    BuildConfig,
    /// Calibration annotation files ([`Annotations::read`]), then scored alone and against
    /// themselves ([`score`]).
    Annotations,
}

impl Target {
    /// Every target, in campaign order.
    pub const ALL: [Target; 15] = [
        Target::SoXml,
        Target::SoHtml,
        Target::Questions,
        Target::Corpus,
        Target::Nuggets,
        Target::Judgments,
        Target::TrecRun,
        Target::Qrels,
        Target::LlmAnswer,
        Target::Gguf,
        Target::Safetensors,
        Target::Npy,
        Target::Manifest,
        Target::BuildConfig,
        Target::Annotations,
    ];

    /// The target's name: its corpus folder under `fuzz/corpus/` and its `cargo fuzz` target.
    pub fn name(self) -> &'static str {
        match self {
            Target::SoXml => "so_xml",
            Target::SoHtml => "so_html",
            Target::Questions => "questions",
            Target::Corpus => "corpus",
            Target::Nuggets => "nuggets",
            Target::Judgments => "judgments",
            Target::TrecRun => "trec_run",
            Target::Qrels => "qrels",
            Target::LlmAnswer => "llm_answer",
            Target::Gguf => "gguf",
            Target::Safetensors => "safetensors",
            Target::Npy => "npy",
            Target::Manifest => "manifest",
            Target::BuildConfig => "build_config",
            Target::Annotations => "annotations",
        }
    }

    /// The target called `name`, if any.
    pub fn parse(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// A private directory the path-taking readers read their input from (under `/dev/shm` when it
/// exists: one file write per input).
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh scratch directory.
    pub fn new() -> std::io::Result<Scratch> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::Builder::new()
                .prefix("freshstack-fuzz.")
                .tempdir_in(shm)
                .or_else(|_| tempfile::tempdir())?
        } else {
            tempfile::tempdir()?
        };
        Ok(Scratch { dir })
    }

    fn file(&self, name: &str, data: &[u8]) -> Result<PathBuf, String> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, data).map_err(|e| format!("scratch write: {e}"))?;
        Ok(path)
    }
}

/// Feeds `data` to `target`'s parser. `Err` carries the parser's error message (a fine outcome:
/// harnesses use it only to tell outcomes apart); a panic is a bug.
pub fn run(target: Target, data: &[u8], scratch: &Scratch) -> Result<(), String> {
    let text = || String::from_utf8_lossy(data);
    let err = |e: crate::Error| e.to_string();
    match target {
        Target::SoXml => so_xml(data),
        Target::SoHtml => {
            let html = text();
            let markdown = html_to_markdown(&html);
            let decoded = decode_entities(&html);
            std::hint::black_box((markdown, decoded));
            Ok(())
        }
        Target::Questions => {
            let path = scratch.file("questions.jsonl", data)?;
            let questions = read_questions(&path).map_err(err);
            for field in [
                QueryField::Question,
                QueryField::Answer,
                QueryField::Nuggets,
                QueryField::Text,
            ] {
                let _ = read_queries(&path, field);
            }
            questions.map(drop)
        }
        Target::Corpus => {
            let path = scratch.file("corpus.jsonl", data)?;
            read_corpus(&path).map(drop).map_err(err)
        }
        Target::Nuggets => {
            let path = scratch.file("nuggets.jsonl", data)?;
            read_jsonl_lines::<NuggetsRecord>(&path)
                .map(drop)
                .map_err(err)
        }
        Target::Judgments => {
            let path = scratch.file("judgments.jsonl", data)?;
            let rows = read_jsonl::<JudgmentRecord>(&path).map(drop).map_err(err);
            load_judgments(&path, JudgmentsFormat::QueriesJsonl)
                .map(drop)
                .map_err(err)
                .and(rows)
        }
        Target::TrecRun => {
            let path = scratch.file("run.trec", data)?;
            let run = Run::read_trec(&path).map(drop).map_err(err);
            let file = RunFile::read(&path).map_err(err)?;
            for i in 0..file.len() {
                std::hint::black_box(file.docs(i).count());
            }
            std::hint::black_box(file.to_run());
            run
        }
        Target::Qrels => {
            let path = scratch.file("qrels.txt", data)?;
            load_judgments(&path, JudgmentsFormat::NdevalQrels)
                .map(drop)
                .map_err(err)
        }
        Target::LlmAnswer => {
            let answer = text();
            let read = crate::pipeline::parse_replies(&answer);
            let stripped = parse::strip_thinking(&answer);
            std::hint::black_box((
                read,
                parse::fenced_blocks(stripped),
                parse::extract_json(stripped)
                    .as_ref()
                    .map(parse::parse_index),
                parse::extract_json(stripped)
                    .as_ref()
                    .map(parse::parse_verdict),
                parse::parse_python_list(stripped),
                parse::parse_markdown_list(stripped),
                parse::extract_string_list(stripped, "items"),
            ));
            Ok(())
        }
        Target::Gguf => {
            let path = scratch.file("model.gguf", data)?;
            LocalChat::load(&path).map(drop).map_err(err)
        }
        Target::Safetensors => safetensors(&scratch.file("model.safetensors", data)?),
        Target::Npy => {
            let path = scratch.file("vectors.npy", data)?;
            let whole = read_npy_f32(&path).map(drop).map_err(err);
            let matrix = VectorMatrix::open(&path).map_err(err)?;
            if matrix.rows() > 0 {
                std::hint::black_box(matrix.row(matrix.rows() - 1));
            }
            whole
        }
        Target::Manifest => {
            let dir = scratch.dir.path().join("index");
            std::fs::create_dir_all(&dir).map_err(|e| format!("scratch dir: {e}"))?;
            std::fs::write(dir.join(MANIFEST_FILE), data)
                .map_err(|e| format!("scratch write: {e}"))?;
            Manifest::read(&dir).map(drop).map_err(err)
        }
        Target::BuildConfig => {
            let path = scratch.file("freshstack.toml", data)?;
            BuildConfig::load(&path).map(drop).map_err(err)
        }
        Target::Annotations => {
            let path = scratch.file("annotations.json", data)?;
            let annotations = Annotations::read(&path).map_err(err)?;
            let alone = [("a".to_string(), annotations.clone())];
            std::hint::black_box(score(&alone));
            let twice = [alone[0].clone(), ("b".to_string(), annotations)];
            std::hint::black_box(score(&twice));
            Ok(())
        }
    }
}

/// Every field of every row read as the import reads it; bodies and titles through the HTML
/// converter. Events are bounded at 1 MiB (the import's bound is 64 MiB; inputs are smaller).
fn so_xml(data: &[u8]) -> Result<(), String> {
    const FIELDS: [Field; 10] = [
        Field::Id,
        Field::PostTypeId,
        Field::ParentId,
        Field::AcceptedAnswerId,
        Field::CreationDate,
        Field::Score,
        Field::Title,
        Field::Body,
        Field::Tags,
        Field::ContentLicense,
    ];
    let mut reader = data;
    let mut visit = |row: &crate::source::stackoverflow::PostRow<'_>| {
        std::hint::black_box((row.byte_offset(), row.date()));
        for field in FIELDS {
            std::hint::black_box((row.has(field), row.number(field), row.id(field)));
            if let Some(text) = row.text(field)? {
                if matches!(field, Field::Body | Field::Title) {
                    std::hint::black_box(html_to_markdown(&text));
                }
                if field == Field::Tags {
                    std::hint::black_box(crate::source::stackoverflow::parse_tags(&text).len());
                }
            }
        }
        Ok(())
    };
    scan_reader(&mut reader, 1 << 20, &mut visit)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// candle's memory-mapped safetensors loader, as `VarBuilder::from_mmaped_safetensors` uses it:
/// map and read the header, then load every tensor.
fn safetensors(path: &Path) -> Result<(), String> {
    use candle_core::safetensors::MmapedSafetensors;
    // SAFETY: the scratch file is ours and not modified while mapped.
    let tensors =
        unsafe { MmapedSafetensors::new(path) }.map_err(|e| crate::error::candle_message(&e))?;
    let names: HashSet<String> = tensors.tensors().into_iter().map(|(n, _)| n).collect();
    for name in names {
        tensors
            .load(&name, &candle_core::Device::Cpu)
            .map_err(|e| crate::error::candle_message(&e))?;
    }
    Ok(())
}
