//! Rerankers: rescore the first stage's top N.
//!
//! Every reranker implements [`Reranker`] (score (query, document) pairs;
//! rerank a run's top N), one file per scorer:
//!
//! - [`classifier`]: cross-encoders with a sequence-classification head on
//!   the first token (BERT, XLM-R layouts).
//! - [`yes_no`]: yes/no rerankers on a causal language model (Qwen3-Reranker,
//!   SKILLRET-Reranker), P(yes) at the last token of the official template.
//! - [`remote`]: a served reranker behind a `/rerank` endpoint (vLLM,
//!   Jina/Cohere-style APIs, text-embeddings-inference), sent exactly what
//!   the local scorers read, so that scores agree number for number.
//!
//! [`CrossEncoder::from_dir`] loads a local checkpoint and detects which of
//! the first two it is. The encoder, its loading, batching and engines
//! (native CPU f32/bf16/int8, candle on CUDA) are the embedder's:
//! [`embedder::Encoder`].
//!
//! ```no_run
//! use reranker::{CrossEncoder, Reranker, RerankerOptions};
//! let model = CrossEncoder::from_dir("models/ms-marco-MiniLM-L-6-v2".as_ref(), RerankerOptions::default())?;
//! let scores = model.score_pairs(&[("parse a pdf", "pdf | Read PDFs. | # PDF")], &|_| {})?;
//! # Ok::<(), reranker::Error>(())
//! ```
#![warn(missing_docs)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use embedder::{Backend, Encoder, EncoderOptions, ModelConfig, Precision, Tokens};
use eval::{Run, ScoredDoc};

pub mod classifier;
pub mod remote;
pub mod yes_no;

pub use classifier::Classifier;
pub use embedder::Error;
pub use embedder::hub::HubOptions;
pub use remote::{RemoteApi, RemoteOptions, RemoteReranker};
pub use yes_no::{
    SKILLRET_INSTRUCTION, Template, YES_NO_PREFIX, YES_NO_SUFFIX, YesNo, yes_no_content,
};

/// What a one-label model's logit becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Activation {
    /// The logit itself (sentence-transformers' default for rankings).
    #[default]
    Identity,
    /// `1 / (1 + e^-logit)`: a probability.
    Sigmoid,
}

/// How a reranker is loaded and run.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RerankerOptions {
    /// Truncate pairs to this many tokens (default: the tokenizer's
    /// `model_max_length`, at most the model's positions).
    pub max_length: Option<usize>,
    /// Tokens per batch.
    pub batch_tokens: usize,
    /// The engine.
    pub backend: Backend,
    /// Arithmetic of the native engine's linear layers.
    pub precision: Precision,
    /// Applied to one-label logits (cross-encoders).
    pub activation: Activation,
    /// The instruction of a yes/no reranker (default: [`SKILLRET_INSTRUCTION`]).
    pub instruction: Option<String>,
}

impl Default for RerankerOptions {
    fn default() -> Self {
        Self {
            max_length: None,
            batch_tokens: 8192,
            backend: Backend::Native,
            precision: Precision::F32,
            activation: Activation::Identity,
            instruction: None,
        }
    }
}

impl RerankerOptions {
    /// Sets the maximum length in tokens.
    pub fn with_max_length(mut self, tokens: usize) -> Self {
        self.max_length = Some(tokens);
        self
    }
    /// Sets the token budget of a batch.
    pub fn with_batch_tokens(mut self, tokens: usize) -> Self {
        self.batch_tokens = tokens;
        self
    }
    /// Sets the engine.
    pub fn with_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }
    /// Sets the precision of the native engine.
    pub fn with_precision(mut self, precision: Precision) -> Self {
        self.precision = precision;
        self
    }
    /// Sets the activation of one-label logits.
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }
    /// Sets the instruction of a yes/no reranker.
    pub fn with_instruction(mut self, instruction: &str) -> Self {
        self.instruction = Some(instruction.to_owned());
        self
    }
}

/// The interface of every reranker: scores for (query, document) pairs,
/// and the reranking of a run's top N built on them.
pub trait Reranker: Send + Sync + std::fmt::Debug {
    /// What scores where, in words (one line).
    fn describe(&self) -> String;

    /// The score of each (query, document) pair, in input order;
    /// `progress` counts pairs scored.
    fn score_pairs(
        &self,
        pairs: &[(&str, &str)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error>;

    /// Lines worth reporting about the last scoring (a served reranker's
    /// figures per endpoint); none for a local one.
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }

    /// Reranks one query's candidates: see [`Reranker::rerank_run`].
    fn rerank(
        &self,
        query: &str,
        candidates: &[ScoredDoc],
        documents: &dyn Fn(&str) -> Option<String>,
        top_n: usize,
    ) -> Result<Vec<ScoredDoc>, Error> {
        let mut run = Run::default();
        run.insert("q".to_owned(), candidates.to_vec());
        let queries = HashMap::from([("q".to_owned(), query.to_owned())]);
        let out = self.rerank_run(&run, &queries, documents, top_n, &|_| {})?;
        Ok(out.get("q").map(<[ScoredDoc]>::to_vec).unwrap_or_default())
    }

    /// Reranks every query of a first-stage run: each query's top `top_n`
    /// candidates (in trec_eval order) are rescored and reordered by that
    /// score (ties by id descending); the candidates below them stay
    /// behind, in first-stage order, with scores placed below the lowest
    /// reranked one so that the run file orders them as listed. Queries
    /// without text in `queries` are an error; documents without text
    /// (`documents` answers `None`) too. `progress` counts pairs scored.
    fn rerank_run(
        &self,
        run: &Run,
        queries: &HashMap<String, String>,
        documents: &dyn Fn(&str) -> Option<String>,
        top_n: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Run, Error> {
        let mut ranked: Vec<(&str, Vec<ScoredDoc>)> = Vec::new();
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for query in run.query_ids() {
            let text = queries.get(query).ok_or_else(|| {
                Error::Invalid(format!(
                    "query `{query}` of the run has no text in the data"
                ))
            })?;
            let mut docs = run.get(query).unwrap_or_default().to_vec();
            eval::sort_trec(&mut docs);
            for doc in docs.iter().take(top_n) {
                let body = documents(&doc.id).ok_or_else(|| {
                    Error::Invalid(format!(
                        "document `{}` (query `{query}`) is not in the skill library",
                        doc.id
                    ))
                })?;
                pairs.push((text.as_str(), body));
            }
            ranked.push((query, docs));
        }
        let borrowed: Vec<(&str, &str)> = pairs.iter().map(|(q, d)| (*q, d.as_str())).collect();
        let scores = self.score_pairs(&borrowed, progress)?;
        if scores.len() != borrowed.len() {
            return Err(Error::Inference(format!(
                "{} scores for {} pairs",
                scores.len(),
                borrowed.len()
            )));
        }
        let mut next = scores.into_iter();
        let mut out = Run::default();
        for (query, docs) in ranked {
            let n = top_n.min(docs.len());
            let mut head: Vec<ScoredDoc> = docs[..n]
                .iter()
                .map(|d| ScoredDoc {
                    id: Arc::clone(&d.id),
                    score: f64::from(next.next().unwrap_or(f32::NAN)),
                })
                .collect();
            eval::sort_trec(&mut head);
            let floor = head.last().map_or(0.0, |d| d.score);
            let tail = docs[n..].iter().enumerate().map(|(i, d)| ScoredDoc {
                id: Arc::clone(&d.id),
                score: floor - 1.0 - i as f64,
            });
            head.extend(tail);
            out.insert(query.to_owned(), head);
        }
        Ok(out)
    }
}

pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

pub(crate) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The kinds of reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RerankerKind {
    /// An encoder with a sequence-classification head.
    #[serde(rename = "cross-encoder")]
    Classifier,
    /// A causal language model scored by P(yes).
    YesNo,
}

/// A reranker checkpoint loaded in this process: a cross-encoder with a
/// classification head, or a yes/no decoder, detected from the checkpoint.
#[derive(Debug)]
pub enum CrossEncoder {
    /// A classification head on the first token.
    Classifier(Classifier),
    /// P(yes) at the last token of the templated pair.
    YesNo(YesNo),
}

impl CrossEncoder {
    /// Loads a reranker from a local directory (`config.json`,
    /// `tokenizer.json`, the weights; `tokenizer_config.json` for the
    /// default maximum length). Its kind is detected from the checkpoint.
    pub fn from_dir(dir: &Path, options: RerankerOptions) -> Result<Self, Error> {
        let encoder_options = EncoderOptions {
            max_length: options.max_length,
            batch_tokens: options.batch_tokens,
            backend: options.backend,
            precision: options.precision,
            task: None,
        };
        let default_length = embedder::config::tokenizer_max_length(dir)?;
        let encoder = Encoder::from_dir(dir, &encoder_options, default_length)?;
        Ok(match encoder.config() {
            ModelConfig::Bert(_) => {
                Self::Classifier(Classifier::new(encoder, dir, options.activation)?)
            }
            _ => Self::YesNo(YesNo::new(encoder, options.instruction)?),
        })
    }

    /// Loads `model_id` at a pinned 40-hex commit from the Hub cache, or
    /// downloads it (not offline).
    pub fn from_hub(
        model_id: &str,
        revision: &str,
        hub: &HubOptions,
        options: RerankerOptions,
    ) -> Result<Self, Error> {
        let dir = embedder::hub::model_dir(model_id, revision, hub)?;
        Self::from_dir(&dir, options)
    }

    fn encoder(&self) -> &Encoder {
        match self {
            Self::Classifier(c) => c.encoder(),
            Self::YesNo(y) => y.encoder(),
        }
    }

    /// Where the model runs, in words.
    pub fn device(&self) -> &str {
        self.encoder().device()
    }

    /// The truncation length of a pair in tokens (the template included).
    pub fn max_length(&self) -> usize {
        self.encoder().max_length()
    }

    /// The kind of reranker.
    pub fn kind(&self) -> RerankerKind {
        match self {
            Self::Classifier(_) => RerankerKind::Classifier,
            Self::YesNo(_) => RerankerKind::YesNo,
        }
    }

    /// Number of logits per pair: the classifier's labels (1 or 2), or 2
    /// ("no", "yes") for a yes/no reranker.
    pub fn labels(&self) -> usize {
        match self {
            Self::Classifier(c) => c.labels(),
            Self::YesNo(_) => 2,
        }
    }

    /// The instruction a yes/no reranker writes into each pair.
    pub fn instruction(&self) -> Option<&str> {
        match self {
            Self::Classifier(_) => None,
            Self::YesNo(y) => Some(y.template().instruction()),
        }
    }

    /// The model's input for each (query, document) pair, after truncation.
    pub fn tokenize<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        match self {
            Self::Classifier(c) => c.tokenize(pairs),
            Self::YesNo(y) => y.tokenize(pairs),
        }
    }

    /// Token count of each pair as the model sees it (after truncation).
    pub fn pair_tokens<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<usize>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        Ok(self.tokenize(pairs)?.iter().map(|t| t.ids.len()).collect())
    }

    /// The logits of each (query, document) pair, row after row
    /// ([`CrossEncoder::labels`] per pair), in input order.
    pub fn logits<A, B>(
        &self,
        pairs: &[(A, B)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        match self {
            Self::Classifier(c) => c.logits(pairs, progress),
            Self::YesNo(y) => y.logits(pairs, progress),
        }
    }

    /// The score of each (query, document) pair, in input order.
    pub fn score<A, B>(
        &self,
        pairs: &[(A, B)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        match self {
            Self::Classifier(c) => c.score(pairs, progress),
            Self::YesNo(y) => y.score(pairs, progress),
        }
    }
}

impl Reranker for CrossEncoder {
    fn describe(&self) -> String {
        match self {
            Self::Classifier(c) => c.describe(),
            Self::YesNo(y) => y.describe(),
        }
    }

    fn score_pairs(
        &self,
        pairs: &[(&str, &str)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error> {
        self.score(pairs, progress)
    }
}

/// Interpolates a reranked run with the first stage it reranked: within
/// each query's top `top_n` of `first`, both stages' scores are min-max
/// normalised over those candidates and combined as
/// `weight · reranker + (1 − weight) · first stage`; the rest of `first`
/// follows in its own order. `weight` 1 gives the reranker's order, 0 the
/// first stage's (ties by document id, as trec_eval).
pub fn interpolate(first: &Run, reranked: &Run, top_n: usize, weight: f64) -> Run {
    fn normalised(docs: &[ScoredDoc]) -> HashMap<&str, f64> {
        let (lo, hi) = docs
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), d| {
                (lo.min(d.score), hi.max(d.score))
            });
        let span = hi - lo;
        docs.iter()
            .map(|d| {
                let v = if span > 0.0 {
                    (d.score - lo) / span
                } else {
                    0.0
                };
                (&*d.id, v)
            })
            .collect()
    }
    let mut out = Run::default();
    for query in first.query_ids() {
        let mut docs = first.get(query).unwrap_or_default().to_vec();
        eval::sort_trec(&mut docs);
        let n = top_n.min(docs.len());
        let base = normalised(&docs[..n]);
        let rescored = reranked.get(query).unwrap_or_default();
        let head_ids: std::collections::HashSet<&str> = docs[..n].iter().map(|d| &*d.id).collect();
        let from_reranker: Vec<ScoredDoc> = rescored
            .iter()
            .filter(|d| head_ids.contains(&*d.id))
            .cloned()
            .collect();
        let rerank = normalised(&from_reranker);
        let mut head: Vec<ScoredDoc> = docs[..n]
            .iter()
            .map(|d| ScoredDoc {
                id: Arc::clone(&d.id),
                score: weight * rerank.get(&*d.id).copied().unwrap_or(0.0)
                    + (1.0 - weight) * base[&*d.id],
            })
            .collect();
        eval::sort_trec(&mut head);
        let floor = head.last().map_or(0.0, |d| d.score);
        head.extend(docs[n..].iter().enumerate().map(|(i, d)| ScoredDoc {
            id: Arc::clone(&d.id),
            score: floor - 1.0 - i as f64,
        }));
        out.insert(query.to_owned(), head);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scores: &[(&str, f64)]) -> Run {
        let mut r = Run::default();
        r.insert(
            "q".to_owned(),
            scores
                .iter()
                .map(|&(id, score)| ScoredDoc {
                    id: Arc::from(id),
                    score,
                })
                .collect(),
        );
        r
    }

    fn order(r: &Run) -> Vec<String> {
        r.get("q")
            .unwrap()
            .iter()
            .map(|d| d.id.to_string())
            .collect()
    }

    #[test]
    fn interpolation_moves_between_the_two_orders() {
        let first = run(&[("a", 0.9), ("b", 0.8), ("c", 0.7), ("d", 0.1)]);
        // The reranker saw the top 3 and reverses them.
        let reranked = run(&[("c", 5.0), ("b", 1.0), ("a", -3.0), ("d", -4.0)]);
        assert_eq!(
            order(&interpolate(&first, &reranked, 3, 1.0)),
            ["c", "b", "a", "d"]
        );
        assert_eq!(
            order(&interpolate(&first, &reranked, 3, 0.0)),
            ["a", "b", "c", "d"]
        );
        // Normalised: first stage a 1, b 0.5, c 0; reranker a 0, b 0.5, c 1;
        // d stays last either way.
        // 0.3 on the reranker: the first stage's order wins, by margins.
        let mostly_first = interpolate(&first, &reranked, 3, 0.3);
        assert_eq!(order(&mostly_first), ["a", "b", "c", "d"]);
        let mostly_reranker = interpolate(&first, &reranked, 3, 0.7);
        assert_eq!(order(&mostly_reranker), ["c", "b", "a", "d"]);
        let scores: Vec<f64> = mostly_reranker
            .get("q")
            .unwrap()
            .iter()
            .map(|d| d.score)
            .collect();
        assert!(
            (scores[0] - 0.7).abs() < 1e-12 && scores[3] < scores[2],
            "{scores:?}"
        );
    }
}
