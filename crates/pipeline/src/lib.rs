//! The `pipeline` command line: one module per subcommand, each a thin layer
//! over the library crates.
#![warn(missing_docs)]

pub mod cli;
mod commands;

/// Runs one parsed command line.
pub fn run(cli: cli::Cli) -> anyhow::Result<()> {
    match cli.command {
        cli::Command::Eval(args) => commands::eval::run(&args),
    }
}
