//! Candidate generation for the first stage of SkillRet retrieval.
//!
//! - [`bm25`]: BM25 exactly as the official baseline computes it with bm25s.
//!
//! Rankings are `eval::ScoredDoc` lists in trec_eval order (score descending,
//! ties by id descending), so runs are byte-stable.
//!
//! Exact inner-product search, HNSW and reciprocal-rank fusion are still to
//! come (issue #4).
#![warn(missing_docs)]

pub mod bm25;
