//! The crate's error type.

/// What can go wrong building or searching an index.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Arguments that cannot be used (shapes, parameters).
    #[error("{0}")]
    Invalid(String),
}
