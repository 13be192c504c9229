//! The `pipeline` command line: one module per subcommand, each a thin layer
//! over the library crates.
#![warn(missing_docs)]

mod breakdown;
pub mod cache;
pub mod cli;
mod commands;
pub mod config;
mod focus;
mod html;
mod hub;
mod plot;
mod progress;
mod provenance;
mod ranking;
mod report;
mod stages;
pub mod train_config;

/// How `pipeline sweep` starts each job's `pipeline run`: a program and the
/// arguments before `run` (unset: this executable).
static CHILD_COMMAND: std::sync::OnceLock<(std::path::PathBuf, Vec<std::ffi::OsString>)> =
    std::sync::OnceLock::new();

/// Sets how `pipeline sweep` starts its jobs, for a program that carries the
/// command line without being the `pipeline` binary (the Python package:
/// `python -m skillret`). The first call wins.
pub fn set_child_command(program: std::path::PathBuf, leading_args: Vec<std::ffi::OsString>) {
    let _ = CHILD_COMMAND.set((program, leading_args));
}

/// The command that runs this command line in a child process.
pub(crate) fn child_command() -> anyhow::Result<std::process::Command> {
    use anyhow::Context;
    Ok(match CHILD_COMMAND.get() {
        Some((program, args)) => {
            let mut cmd = std::process::Command::new(program);
            cmd.args(args);
            cmd
        }
        None => std::process::Command::new(
            std::env::current_exe().context("finding the pipeline binary")?,
        ),
    })
}

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
