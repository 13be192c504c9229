//! The crate's error type: load failures name the file and what is wrong.

use std::path::{Path, PathBuf};

/// Everything that can go wrong loading or running an encoder.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        error: std::io::Error,
    },
    /// A file the model needs is not there.
    #[error("{}: missing ({what})", path.display())]
    MissingFile {
        /// The expected path.
        path: PathBuf,
        /// What the file is for.
        what: &'static str,
    },
    /// A file is there but cannot be used (malformed JSON, safetensors, E5S1, …).
    #[error("{}: {message}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A weight the architecture needs is absent.
    #[error("{}: no tensor `{name}`", path.display())]
    MissingTensor {
        /// The weights file.
        path: PathBuf,
        /// The tensor name.
        name: String,
    },
    /// A weight has another shape than the config implies.
    #[error("{}: tensor `{name}` has shape {actual:?}, but config.json implies {expected:?}", path.display())]
    Shape {
        /// The weights file.
        path: PathBuf,
        /// The tensor name.
        name: String,
        /// The shape the config implies.
        expected: Vec<usize>,
        /// The shape in the file.
        actual: Vec<usize>,
    },
    /// The tokenizer cannot feed this model.
    #[error("{}: tokenizer does not match the model: {message}", path.display())]
    TokenizerMismatch {
        /// The tokenizer file.
        path: PathBuf,
        /// What does not match.
        message: String,
    },
    /// The Hub could not be used.
    #[error("{0}")]
    Hub(String),
    /// An option or input that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// Running the model failed.
    #[error("inference failed: {0}")]
    Inference(String),
    /// A served model could not be used: its servers refused, failed or
    /// are down (the message names each endpoint).
    #[error("{0}")]
    Served(String),
    /// An endpoint does not serve the model asked for.
    #[error("served_model {name:?} is not served at {endpoint}, which serves: {}", if serves.is_empty() { "nothing".to_owned() } else { serves.join(", ") })]
    NotServed {
        /// The name asked for.
        name: String,
        /// The endpoint.
        endpoint: String,
        /// What it lists.
        serves: Vec<String>,
    },
}

impl Error {
    /// An I/O error on `path`.
    pub fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    /// A file that cannot be used, and why.
    pub fn format(path: &Path, message: impl Into<String>) -> Self {
        Self::Format {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }
}

/// Opens a file; a missing one is [`Error::MissingFile`] saying `what` it is for.
pub(crate) fn open_file(path: &Path, what: &'static str) -> Result<std::fs::File> {
    std::fs::File::open(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::MissingFile {
                path: path.to_path_buf(),
                what,
            }
        } else {
            Error::io(path, e)
        }
    })
}

/// Reads a whole file; a missing one is [`Error::MissingFile`] saying `what` it is for.
pub(crate) fn read_file(path: &Path, what: &'static str) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut open_file(path, what)?, &mut bytes)
        .map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<served::Error> for Error {
    /// The same message under the embedder's variant of the same name.
    fn from(e: served::Error) -> Self {
        match e {
            served::Error::Invalid(m) => Self::Invalid(m),
            served::Error::NotServed {
                name,
                endpoint,
                serves,
            } => Self::NotServed {
                name,
                endpoint,
                serves,
            },
            other => Self::Served(other.to_string()),
        }
    }
}

impl From<engine::Error> for Error {
    /// The engine's refusals are invalid settings, with the same message.
    fn from(e: engine::Error) -> Self {
        match e {
            engine::Error::Invalid(m) => Self::Invalid(m),
            other => Self::Invalid(other.to_string()),
        }
    }
}
