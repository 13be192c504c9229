//! Helpers shared by the end-to-end tests of the `pipeline` command.
#![allow(dead_code)] // Each test binary uses a subset.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `tests/fixtures/<rel>`.
pub(crate) fn fixture(rel: &str) -> PathBuf {
    root().join("tests/fixtures").join(rel)
}

/// Runs the binary with `args` and waits for it.
pub(crate) fn pipeline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(args)
        .output()
        .expect("the pipeline binary runs")
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

pub(crate) fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// An installed model directory, or `None` with a note saying how to install it.
pub(crate) fn installed(name: &str) -> Option<PathBuf> {
    let dir = root().join("models").join(name);
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-models.sh and scripts/make_cross_encoders.py)",
            dir.display()
        );
        None
    }
}
