//! A stage's ranking: what the run builds, and the report, its breakdowns
//! and its curves read.

use eval::Run;

/// Rounds of the paired randomization test every stage-to-stage change reports (report.md,
/// report.html, the sweep's leaderboard).
pub(crate) const TRIALS: usize = 10_000;
/// Its seed (fixed: the p-value is part of the deterministic report).
pub(crate) const SEED: u64 = 20_260_512;

/// One stage's ranking.
pub(crate) struct Stage {
    /// `retriever` or `reranker`; a hybrid retriever's parts are `dense`
    /// and `bm25`.
    pub(crate) name: String,
    /// Its run.
    pub(crate) run: Run,
    /// The stage it builds on (by index), for the change it makes: the
    /// reranker on the retriever, a hybrid retriever on its dense part.
    pub(crate) after: Option<usize>,
}
