//! The `pipeline` command's end-to-end tests, one test binary with a module per file
//! (docs/development.md, "The test binaries"): `cargo test -p pipeline --test it cli::` runs
//! cli.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

mod common;
#[path = "../crates/embedder/tests/support/fake_server.rs"]
mod fake_server;

mod cli;
mod docs;
mod report;
mod served;
mod train_cli;
