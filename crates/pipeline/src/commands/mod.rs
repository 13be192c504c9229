//! One module per subcommand.

pub(crate) mod embed;
pub(crate) mod eval;
pub(crate) mod models;
