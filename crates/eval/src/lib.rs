//! SkillRet data and trec_eval-exact metrics.
//!
//! - [`data`]: the official local layout `<dir>/{skills,queries,qrels}/<split>.jsonl`,
//!   and [`document_text`], the one text recipe every stage uses.
//! - [`hub`]: the same files from the HuggingFace Hub at a pinned, verified revision.
//! - [`Qrels`] and [`Run`]: judgements and rankings, read from and written to
//!   TREC files, SkillRet JSONL and the official output JSON.
//! - [`metrics`]: NDCG, Recall, MAP, Precision, Completeness, HitRate, MRR, ERR
//!   and RBP with trec_eval's semantics (checked against pytrec_eval).
//!
//! ```
//! use eval::{Qrels, Run, ScoredDoc, metrics::{evaluate, Metric, Options}};
//!
//! let mut qrels = Qrels::default();
//! qrels.insert("q1".into(), "skill-a".into(), 1);
//! let mut run = Run::default();
//! run.insert("q1".into(), vec![
//!     ScoredDoc::new("skill-b", 0.9),
//!     ScoredDoc::new("skill-a", 0.7),
//! ]);
//! let result = evaluate(&qrels, &run, &Options::default());
//! assert_eq!(result.mean_of(Metric::Mrr), Some(0.5));
//! assert_eq!(result.mean_of(Metric::Recall(5)), Some(1.0));
//! ```
#![warn(missing_docs)]

pub mod data;
mod error;
pub mod hub;
pub mod io;
mod jsonl;
pub mod metrics;
pub mod official;
mod qrels;
mod run;
pub mod sentences;
pub mod stats;
mod trec;

pub use data::{Dataset, Query, Skill, SplitFiles, document_text};
pub use error::{Diagnostic, Error, Location, Result};
pub use qrels::{Judgements, Qrels};
pub use run::{Run, ScoredDoc, sort_trec, trec_order};
