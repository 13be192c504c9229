//! The trainer's integration tests, one test binary with a module per file (docs/development.md,
//! "The test binaries"): `cargo test -p train --test it save::` runs tests/save.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

mod common;

mod accumulation;
mod gradients;
mod parity;
mod resume;
mod save;
