//! The crate's error type.

use std::path::{Path, PathBuf};

/// Everything that can go wrong preparing or running a fine-tune.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Loading the model (config, tokenizer, weights) failed.
    #[error(transparent)]
    Model(#[from] embedder::Error),
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// A file is there but cannot be used.
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Settings or inputs that cannot work together.
    #[error("{0}")]
    Invalid(String),
    /// The tensor library failed while computing.
    #[error("tensor computation failed: {0}")]
    Tensor(#[from] candle_core::Error),
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    /// A problem with the contents of `path`.
    pub fn format(path: &Path, message: impl Into<String>) -> Self {
        Self::Format {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
