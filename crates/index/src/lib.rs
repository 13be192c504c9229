//! Candidate generation for the first stage: exact inner-product search, HNSW
//! (hnsw_rs), BM25 and reciprocal-rank fusion.
//!
//! Not implemented yet: this crate is filled by the index issue (#4). It exports
//! nothing so that no caller can mistake it for a working index.
