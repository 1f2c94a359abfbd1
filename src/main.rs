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
            // One line: the chain of causes joined by ": ".
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
