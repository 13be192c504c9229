//! The crate's error type.

use std::path::{Path, PathBuf};

/// What can go wrong building, saving, loading or searching an index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Arguments that cannot be used (shapes, parameters, vectors).
    #[error("{0}")]
    Invalid(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A call to a vector database failed (unreachable, timed out, refused).
    #[error("{0}")]
    Milvus(String),
    /// A saved index that must not be used: stale, foreign or damaged.
    #[error("refusing the index at {}: {why}", path.display())]
    Refused {
        /// The index directory.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

impl Error {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
