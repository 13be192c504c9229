//! Fine-tuning BERT encoders for skill retrieval with candle's autograd: a
//! bi-encoder with sentence-transformers' Multiple Negatives Ranking loss,
//! and a cross-encoder (a `BertForSequenceClassification` head) with binary
//! cross-entropy over positives and mined hard negatives.
//!
//! Every operation of the model has a backward pass ([`bert`]); the
//! optimiser is AdamW with transformers' Trainer defaults ([`optim`]); the
//! losses are sentence-transformers' ([`loss`]). `tests/parity.rs` checks
//! three steps of each objective against PyTorch.
#![warn(missing_docs)]

pub mod bert;
mod error;
pub mod loss;
pub mod optim;
pub mod save;
pub mod trainer;

pub use bert::{Batch, Bert, Dropout, Head, LoadOptions, Param};
pub use error::{Error, Result};
pub use optim::{AdamW, AdamWConfig, Schedule, clip_grad_norm};
