//! The `pipeline` command: see `pipeline --help`.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = pipeline::cli::Cli::parse();
    match pipeline::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
