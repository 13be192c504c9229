//! Candidate generation for the first stage of SkillRet retrieval.
//!
//! - [`exact`]: exact top-k by inner product (the oracle; FAISS Flat in the
//!   official protocol).
//! - [`bm25`]: BM25 exactly as the official baseline computes it with bm25s.
//! - [`hnsw`]: approximate top-k with HNSW (hnsw_rs), saved and loaded with a
//!   checked header, and its recall against exact search.
//! - [`milvus`]: a Milvus collection (standalone, cluster or Milvus Lite),
//!   uploaded idempotently and searched by inner product (FLAT or HNSW).
//! - [`fusion`]: reciprocal-rank fusion of any candidate lists (hybrid BM25 + dense).
//!
//! The vector indexes answer through one trait, [`VectorIndex`], so a run
//! swaps one for the other without other changes.
//!
//! Rankings are `eval::ScoredDoc` lists in trec_eval order (score descending,
//! ties by id descending), so runs are byte-stable.
#![warn(missing_docs)]

pub mod bm25;
mod error;
pub mod exact;
pub mod fusion;
pub mod hnsw;
pub mod milvus;

use std::sync::Arc;

pub use error::Error;
pub use exact::ExactIndex;
pub use hnsw::{HnswIndex, HnswParams};
pub use milvus::{MilvusIndex, MilvusIndexType, MilvusParams};

/// A searchable set of vectors: exact or approximate.
pub trait VectorIndex: Send + Sync {
    /// The document ids, in index order.
    fn ids(&self) -> &[Arc<str>];

    /// Vector width.
    fn dim(&self) -> usize;

    /// Number of vectors.
    fn len(&self) -> usize {
        self.ids().len()
    }

    /// Whether the index holds no vectors.
    fn is_empty(&self) -> bool {
        self.ids().is_empty()
    }

    /// The `k` best documents by inner product for every query (`queries`
    /// holds them row after row), each list in trec_eval order.
    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<eval::ScoredDoc>>, Error>;
}

/// The number of queries in `queries` (rows of `dim`), or an error where
/// its length is not a whole number of rows.
pub(crate) fn query_count(queries: &[f32], dim: usize) -> Result<usize, Error> {
    if queries.len().is_multiple_of(dim) {
        Ok(queries.len() / dim)
    } else {
        Err(Error::Invalid(format!(
            "{} floats are not queries of dimension {dim}",
            queries.len()
        )))
    }
}
