//! The `freshstack` command line: parse, dispatch to the library, map the outcome to an exit code.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.verbose);
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if cli::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", cli::one_line(&err));
            ExitCode::FAILURE
        }
    }
}
