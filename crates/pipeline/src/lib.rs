//! The `pipeline` command line: one module per subcommand, each a thin layer
//! over the library crates.
#![warn(missing_docs)]

mod breakdown;
mod cache;
pub mod cli;
mod commands;
pub mod config;
mod html;
mod hub;
mod plot;
mod progress;
mod provenance;
mod ranking;
mod report;
mod stages;
pub mod train_config;

/// Runs one parsed command line.
pub fn run(cli: cli::Cli) -> anyhow::Result<()> {
    match cli.command {
        cli::Command::Run(args) => commands::run::run(&args),
        cli::Command::Sweep(args) => commands::sweep::run(&args),
        cli::Command::Compare(args) => commands::compare::run(&args),
        cli::Command::Report(args) => commands::report::run(&args),
        cli::Command::Eval(args) => commands::eval::run(&args),
        cli::Command::Embed(args) => commands::embed::run(&args),
        cli::Command::Rerank(args) => commands::rerank::run(&args),
        cli::Command::Train(args) => commands::train::run(&args),
        cli::Command::Models(cli::ModelsCommand::ConvertE5s1(args)) => {
            commands::models::convert_e5s1(&args)
        }
    }
}
