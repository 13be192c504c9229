//! The reranker's integration tests, one test binary with a module per file (docs/development.md,
//! "The test binaries"): `cargo test -p reranker --test it qwen3::` runs tests/qwen3.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

#[path = "../../embedder/tests/common/mod.rs"]
mod common;
#[path = "../../embedder/tests/support/fake_server.rs"]
mod fake_server;

mod chat;
mod parity;
mod qwen3;
mod remote;
