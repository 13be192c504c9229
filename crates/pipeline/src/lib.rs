//! The `pipeline` command line: one module per subcommand, each a thin layer
//! over the library crates.
#![warn(missing_docs)]

pub mod cli;
mod commands;
mod progress;

/// Runs one parsed command line.
pub fn run(cli: cli::Cli) -> anyhow::Result<()> {
    match cli.command {
        cli::Command::Eval(args) => commands::eval::run(&args),
        cli::Command::Embed(args) => commands::embed::run(&args),
        cli::Command::Models(cli::ModelsCommand::ConvertE5s1(args)) => {
            commands::models::convert_e5s1(&args)
        }
    }
}
