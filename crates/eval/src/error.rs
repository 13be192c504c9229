//! One error type for the crate, and the diagnostics that name a file, a line
//! and a field.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where in an input something was found: a file and, when known, a 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line, when the problem belongs to one line.
    pub line: Option<usize>,
}

impl Location {
    /// A whole file.
    pub fn file(path: &Path) -> Self {
        Self {
            path: path.to_path_buf(),
            line: None,
        }
    }

    /// One line of a file (1-based).
    pub fn line(path: &Path, line: usize) -> Self {
        Self {
            path: path.to_path_buf(),
            line: Some(line),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.path.display()),
            None => write!(f, "{}", self.path.display()),
        }
    }
}

/// A problem with one record of an input file: an error, or a warning where
/// the official SkillRet loader tolerates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// File and line.
    pub location: Location,
    /// The field (a JSON path such as `skill_ids[1]`, or a column name), when one is to blame.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
    /// The skill id, when the record names a skill the skills file lacks
    /// (tolerated in evaluation; an error for training data).
    pub unknown_skill: Option<String>,
}

impl Diagnostic {
    pub(crate) fn new(location: Location, field: Option<&str>, message: impl Into<String>) -> Self {
        Self {
            location,
            field: field.map(str::to_owned),
            message: message.into(),
            unknown_skill: None,
        }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{}: field `{field}`: {}", self.location, self.message),
            None => write!(f, "{}: {}", self.location, self.message),
        }
    }
}

/// Everything that can go wrong in this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause (shown in the message, so not repeated as a source).
        error: std::io::Error,
    },
    /// A record of an input file is malformed or inconsistent.
    #[error("{0}")]
    Input(Diagnostic),
    /// A downloaded or cached file does not have the pinned content.
    #[error(
        "{}: sha256 {actual} does not match the pinned {expected} for {what}; delete the file and fetch it again",
        path.display()
    )]
    Checksum {
        /// The file on disk.
        path: PathBuf,
        /// What the file should be (repository, revision and path).
        what: String,
        /// The pinned digest.
        expected: String,
        /// The digest of the file on disk.
        actual: String,
    },
    /// The Hub could not be used (offline, unreachable, unknown revision).
    #[error("{0}")]
    Hub(String),
    /// An argument or a combination of inputs that cannot be used.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub(crate) fn io(path: &Path, error: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            error,
        }
    }

    pub(crate) fn input(
        location: Location,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        Self::Input(Diagnostic::new(location, field, message))
    }

    /// The diagnostic behind an input error, if this is one.
    pub fn diagnostic(&self) -> Option<&Diagnostic> {
        match self {
            Self::Input(d) => Some(d),
            _ => None,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
