//! One module per subcommand.

pub(crate) mod compare;
pub(crate) mod embed;
pub(crate) mod eval;
pub(crate) mod models;
pub(crate) mod report;
pub(crate) mod rerank;
pub(crate) mod run;
pub(crate) mod sweep;
pub(crate) mod train;
