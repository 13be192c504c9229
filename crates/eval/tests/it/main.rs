//! Integration tests of the eval crate (one test binary).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

mod hub;
mod inputs;
mod parity;

use std::path::{Path, PathBuf};

/// `tests/data/<rel>` of this crate.
pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

/// The shared SkillRet sample beside the checkout, or `None` (with a note on
/// stderr) where it is absent, so the tests that need it skip cleanly.
pub fn skillret_sample() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/skillret-sample");
    if dir.join("skills/test.jsonl").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} is absent (the real SkillRet sample lives in ../shared beside the checkout)",
            dir.display()
        );
        None
    }
}
