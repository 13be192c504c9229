//! Helpers shared by the trainer's tests.
#![allow(dead_code)] // Each test binary uses a subset.

use std::path::PathBuf;

/// The repository root.
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `models/<name>`, or `None` (with a note saying how to make it) where it
/// has not been built.
pub(crate) fn model(name: &str) -> Option<PathBuf> {
    let dir = root().join("models").join(name);
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipped: {} missing (run scripts/fetch-models.sh and python3 scripts/make_cross_encoders.py)",
            dir.display()
        );
        None
    }
}
