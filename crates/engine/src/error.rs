//! The engine's errors.

/// What the engine refuses.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting that cannot be used (an unknown `SKILLRET_MAX_ISA`, or one
    /// above the CPU), with the message that names it.
    #[error("{0}")]
    Invalid(String),
}

/// The engine's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
