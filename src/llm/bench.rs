//! `llm bench`: prompt processing and generation speed of a GGUF model, measured like
//! llama.cpp's `llama-bench` (pp: a prompt of N pseudo-random tokens from an empty cache; tg: N
//! tokens generated one at a time from an empty cache), medians over repeats.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use super::LocalChat;
use crate::error::{Error, Result, Setting};

/// What to measure.
#[derive(Debug, Clone, Copy)]
pub struct BenchConfig {
    /// Tokens of the timed prompt (`pp`).
    pub prompt_tokens: usize,
    /// Tokens generated in the timed generation (`tg`).
    pub gen_tokens: usize,
    /// Runs of each; the medians are reported.
    pub repeat: usize,
    /// Sequences generated at once in the timed generation (their steps batched, as
    /// concurrent calls are); `gen_tokens` each.
    pub sequences: usize,
}

/// The measurements.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The model's name and file.
    pub model: String,
    /// Size of the GGUF file.
    pub file_bytes: u64,
    /// Worker threads.
    pub threads: usize,
    /// Tokens per timed prompt.
    pub prompt_tokens: usize,
    /// Tokens per timed generation, per sequence.
    pub gen_tokens: usize,
    /// Sequences generated at once.
    pub sequences: usize,
    /// Median prompt tokens per second.
    pub prompt_tokens_per_s: f64,
    /// Median generated tokens per second, all sequences together.
    pub gen_tokens_per_s: f64,
    /// Seconds of each prompt run.
    pub prompt_runs_s: Vec<f64>,
    /// Seconds of each generation run.
    pub gen_runs_s: Vec<f64>,
    /// Seconds to load the model.
    pub load_s: f64,
    /// Peak resident memory of the process (Linux `VmHWM`), when known.
    pub peak_rss_bytes: Option<u64>,
}

impl BenchReport {
    /// One line in llama-bench's terms: prompt and generation tokens/s, threads, load time and
    /// peak memory.
    pub fn summary(&self) -> String {
        format!(
            "pp{}: {:.1} tokens/s   tg{}{}: {:.1} tokens/s   ({} threads, load {:.2} s, peak RSS {} MiB)",
            self.prompt_tokens,
            self.prompt_tokens_per_s,
            self.gen_tokens,
            if self.sequences > 1 {
                format!(" x {} sequences", self.sequences)
            } else {
                String::new()
            },
            self.gen_tokens_per_s,
            self.threads,
            self.load_s,
            self.peak_rss_bytes.map_or(0, |b| b >> 20),
        )
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Peak resident set size of this process (`VmHWM` in `/proc/self/status`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Loads `path` and measures it (in the current rayon pool).
pub fn bench_gguf(path: &Path, config: BenchConfig) -> Result<BenchReport> {
    let started = Instant::now();
    let sequences = config.sequences.max(1);
    let chat = LocalChat::load(path)?.with_sequences(sequences);
    if chat.sequences() < sequences {
        return Err(Error::invalid(
            Setting::BenchSequences,
            format!(
                "{} runs one sequence at a time (the candle engine)",
                path.display()
            ),
        ));
    }
    let load_s = started.elapsed().as_secs_f64();
    let context = chat.context_tokens();
    let needed = config.prompt_tokens.saturating_add(config.gen_tokens);
    if needed > context {
        return Err(Error::invalid(
            Setting::BenchTokens,
            format!(
                "{} prompt + {} generated tokens exceed the model's context of {context} tokens",
                config.prompt_tokens, config.gen_tokens
            ),
        ));
    }
    let vocab = chat.vocab_size().max(1) as u64;
    // Pseudo-random prompt tokens, as llama-bench uses (fixed seed: every run the same prompt).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let prompt: Vec<u32> = (0..config.prompt_tokens.max(1))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % vocab) as u32
        })
        .collect();
    // One untimed warm-up pass (page faults of the mapped weights, thread start-up).
    chat.bench_pass(&prompt[..prompt.len().min(16)], 2)?;
    let mut prompt_runs_s = Vec::new();
    let mut gen_runs_s = Vec::new();
    for _ in 0..config.repeat.max(1) {
        let (pp, _) = chat.bench_pass(&prompt, 0)?;
        prompt_runs_s.push(pp);
        // tg from an (almost) empty cache, as llama-bench: one token of prompt, then generate.
        let tg = if sequences == 1 {
            chat.bench_pass(&prompt[..1], config.gen_tokens)?.1
        } else {
            // A different first token per sequence, so that they are different sequences.
            let firsts: Vec<Vec<u32>> = (0..sequences)
                .map(|i| vec![prompt[i % prompt.len()]])
                .collect();
            chat.bench_generate_many(&firsts, config.gen_tokens)?
        };
        gen_runs_s.push(tg);
    }
    let per_s = |tokens: usize, secs: f64| {
        if secs > 0.0 {
            tokens as f64 / secs
        } else {
            0.0
        }
    };
    Ok(BenchReport {
        model: chat.model_id().to_string(),
        file_bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        threads: rayon::current_num_threads(),
        prompt_tokens: prompt.len(),
        gen_tokens: config.gen_tokens,
        sequences,
        prompt_tokens_per_s: per_s(prompt.len(), median(&prompt_runs_s)),
        gen_tokens_per_s: per_s(config.gen_tokens * sequences, median(&gen_runs_s)),
        prompt_runs_s,
        gen_runs_s,
        load_s,
        peak_rss_bytes: peak_rss_bytes(),
    })
}
