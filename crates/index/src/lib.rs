//! Candidate generation for the first stage of SkillRet retrieval.
//!
//! - [`exact`]: exact top-k by inner product (the oracle; FAISS Flat in the
//!   official protocol).
//! - [`bm25`]: BM25 exactly as the official baseline computes it with bm25s.
//! - [`fusion`]: reciprocal-rank fusion of any candidate lists (hybrid BM25 + dense).
//!
//! Rankings are `eval::ScoredDoc` lists in trec_eval order (score descending,
//! ties by id descending), so runs are byte-stable.
//!
//! HNSW (with measured recall, save/load) is still to come (issue #4).
#![warn(missing_docs)]

pub mod bm25;
mod error;
pub mod exact;
pub mod fusion;

pub use error::Error;
