//! The embedder's integration tests, one test binary with a module per file (docs/development.md,
//! "The test binaries"): `cargo test -p embedder --test it parity::` runs tests/parity.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

mod common;
#[path = "support/fake_server.rs"]
mod fake_server;

mod chat;
mod cut;
mod loading;
mod parity;
mod qwen3;
mod registry;
mod remote;
mod varlen;
