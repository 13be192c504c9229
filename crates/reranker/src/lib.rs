//! Cross-encoder rerankers (BERT and XLM-R sequence-classification heads) that
//! rescore the first stage's top N.
//!
//! Not implemented yet: this crate is filled by the reranker issue (#5). It
//! exports nothing so that no caller can mistake it for a working reranker.
