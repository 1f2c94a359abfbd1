//! `freshstack llm bench|tokenize|generate`: check a GGUF model with the native backend.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use freshstack::llm::bench::{BenchConfig, bench_gguf};
use freshstack::llm::tools::{PromptMode, read_json_schema};
use freshstack::llm::{ChatParams, LocalChat};

/// The `llm` subcommands.
#[derive(Debug, Args)]
pub struct LlmToolArgs {
    #[command(subcommand)]
    command: LlmTool,
}

#[derive(Debug, Subcommand)]
enum LlmTool {
    /// Prompt and generation tokens/s, like llama-bench (pp: N-token prompt, tg: N generated).
    Bench {
        /// The GGUF model.
        #[arg(long)]
        gguf: PathBuf,
        /// Tokens of the timed prompt.
        #[arg(long, default_value_t = 512)]
        prompt_tokens: usize,
        /// Tokens generated in the timed generation.
        #[arg(long, default_value_t = 128)]
        gen_tokens: usize,
        /// Runs of each (medians reported).
        #[arg(long, default_value_t = 3)]
        repeat: usize,
        /// Sequences generated at once (tg: all of them together, N x --gen-tokens tokens).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=64))]
        sequences: u64,
        /// One JSON object on stdout.
        #[arg(long)]
        json: bool,
    },
    /// For each line of stdin, one JSON array of token ids on stdout.
    Tokenize {
        /// The GGUF model.
        #[arg(long)]
        gguf: PathBuf,
        /// Add the special tokens the model's metadata asks for (BOS).
        #[arg(long)]
        special: bool,
    },
    /// Generate from a prompt file (raw text, or a user message with --chat).
    Generate {
        /// The GGUF model.
        #[arg(long)]
        gguf: PathBuf,
        /// The prompt.
        #[arg(long)]
        prompt_file: PathBuf,
        /// Most tokens to generate.
        #[arg(long, default_value_t = 256)]
        max_tokens: u32,
        /// Sampling temperature (0 = greedy).
        #[arg(long, default_value_t = 0.0)]
        temperature: f32,
        /// Sampling seed.
        #[arg(long)]
        seed: Option<u64>,
        /// Apply the model's chat template to the prompt as one user message.
        #[arg(long)]
        chat: bool,
        /// Print {"text", "token_ids"} (generated ids only).
        #[arg(long)]
        json: bool,
        /// Constrain the answer to this JSON Schema (a file).
        #[arg(long, value_name = "FILE")]
        json_schema: Option<PathBuf>,
    },
}

pub fn run(args: LlmToolArgs) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match args.command {
        LlmTool::Bench {
            gguf,
            prompt_tokens,
            gen_tokens,
            repeat,
            sequences,
            json,
        } => {
            let config = BenchConfig {
                prompt_tokens,
                gen_tokens,
                repeat,
                sequences: sequences as usize,
            };
            let report = bench_gguf(&gguf, config)?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&report)?)?;
            } else {
                writeln!(out, "model: {}", report.model)?;
                writeln!(out, "{}", report.summary())?;
            }
        }
        LlmTool::Tokenize { gguf, special } => {
            let chat = LocalChat::load(&gguf)?;
            // A line is bounded (`dataset::bounded`): stdin fed from /dev/zero or a stream
            // without newlines is refused at the bound instead of growing a buffer until the
            // allocator aborts.
            for line in freshstack::dataset::bounded::lines(std::io::stdin().lock()) {
                let line = line.context("reading stdin")?;
                let ids = chat.tokenize(&line, special)?;
                writeln!(out, "{}", serde_json::to_string(&ids)?)?;
            }
        }
        LlmTool::Generate {
            gguf,
            prompt_file,
            max_tokens,
            temperature,
            seed,
            chat: as_chat,
            json,
            json_schema,
        } => {
            let params = ChatParams {
                temperature,
                max_tokens,
                seed,
                json_schema: json_schema.as_deref().map(read_json_schema).transpose()?,
            };
            let prompt = freshstack::dataset::bounded::read_text(
                &prompt_file,
                freshstack::dataset::bounded::MAX_SETTINGS_BYTES,
            )
            .with_context(|| format!("{}", prompt_file.display()))?;
            let mode = if as_chat {
                PromptMode::Chat
            } else {
                PromptMode::Raw
            };
            let generation =
                LocalChat::load(&gguf)?.generate_from_prompt(&prompt, mode, &params)?;
            if json {
                writeln!(out, "{}", serde_json::to_string(&generation)?)?;
            } else {
                writeln!(out, "{}", generation.text)?;
            }
        }
    }
    Ok(())
}
