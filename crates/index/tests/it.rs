//! The index's integration tests, one test binary with a module per file (docs/development.md, "The
//! test binaries"): `cargo test -p index --test it hnsw::` runs tests/hnsw.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

#[path = "support/synthetic.rs"]
mod synthetic;

mod bm25_parity;
mod hnsw;
mod milvus;
