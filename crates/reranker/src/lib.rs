//! Cross-encoder rerankers: rescore the first stage's top N.
//!
//! A cross-encoder reads a (query, document) pair as one input and gives it a
//! score. Two checkpoint layouts load, both as transformers saves them:
//!
//! - BERT sequence classification (`BertForSequenceClassification`: the
//!   `bert.*` encoder, `bert.pooler.dense`, `classifier`), as
//!   cross-encoder/ms-marco-MiniLM-L-6-v2 and most MiniLM/TinyBERT rerankers;
//! - XLM-RoBERTa sequence classification (`roberta.*`,
//!   `classifier.dense`, `classifier.out_proj`), as BAAI/bge-reranker-base.
//!
//! Both heads compute `out(tanh(dense(h₀)))` on the first token's state. With
//! one label the score is its logit (or its sigmoid, [`Activation::Sigmoid`]);
//! with two labels it is label 1's logit. Pairs are tokenised as
//! sentence-transformers' `CrossEncoder` does (query first, longest-first
//! truncation to the model's maximum length). The encoder, its loading, its
//! batching and its engines (native CPU f32/bf16, candle on CUDA) are the
//! embedder's: [`embedder::Encoder`].
//!
//! ```no_run
//! use reranker::{CrossEncoder, RerankerOptions};
//! let model = CrossEncoder::from_dir("models/ms-marco-MiniLM-L-6-v2".as_ref(), RerankerOptions::default())?;
//! let scores = model.score(&[("parse a pdf", "pdf | Read PDFs. | # PDF")], &|_| {})?;
//! # Ok::<(), reranker::Error>(())
//! ```
#![warn(missing_docs)]

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use embedder::{Backend, Encoder, EncoderOptions, Pooling, Precision, TensorFile};
use eval::{Run, ScoredDoc};

pub use embedder::Error;
pub use embedder::hub::HubOptions;

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

/// How a cross-encoder is loaded and run.
#[derive(Debug, Clone, Copy, PartialEq)]
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
    /// Applied to one-label logits.
    pub activation: Activation,
}

impl Default for RerankerOptions {
    fn default() -> Self {
        Self {
            max_length: None,
            batch_tokens: 8192,
            backend: Backend::Native,
            precision: Precision::F32,
            activation: Activation::Identity,
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
}

/// The classification head on the first token: `out(tanh(dense(h₀)))`.
struct Head {
    /// `hidden × hidden`, row-major (output rows).
    dense_weight: Vec<f32>,
    dense_bias: Vec<f32>,
    /// `labels × hidden`.
    out_weight: Vec<f32>,
    out_bias: Vec<f32>,
    labels: usize,
}

impl Head {
    /// Reads the head of a BERT or XLM-R sequence-classification save.
    fn read(file: &TensorFile, hidden: usize) -> Result<Self, Error> {
        // (dense, output) tensor name stems of each layout.
        const LAYOUTS: [(&str, &str); 2] = [
            ("bert.pooler.dense", "classifier"),
            ("classifier.dense", "classifier.out_proj"),
        ];
        let path = file.path();
        for (dense, out) in LAYOUTS {
            let Some((shape, out_weight)) = file.get(&format!("{out}.weight"))? else {
                continue;
            };
            if shape.len() != 2 || shape[1] != hidden || shape[0] == 0 {
                return Err(Error::Shape {
                    path: path.to_path_buf(),
                    name: format!("{out}.weight"),
                    expected: vec![0, hidden],
                    actual: shape,
                });
            }
            let labels = shape[0];
            let tensor = |name: String, expected: Vec<usize>| -> Result<Vec<f32>, Error> {
                match file.get(&name)? {
                    None => Err(Error::MissingTensor {
                        path: path.to_path_buf(),
                        name,
                    }),
                    Some((actual, _)) if actual != expected => Err(Error::Shape {
                        path: path.to_path_buf(),
                        name,
                        expected,
                        actual,
                    }),
                    Some((_, values)) => Ok(values),
                }
            };
            return Ok(Self {
                dense_weight: tensor(format!("{dense}.weight"), vec![hidden, hidden])?,
                dense_bias: tensor(format!("{dense}.bias"), vec![hidden])?,
                out_bias: tensor(format!("{out}.bias"), vec![labels])?,
                out_weight,
                labels,
            });
        }
        Err(Error::format(
            path,
            "no sequence-classification head (neither `classifier.weight` with `bert.pooler.dense`, \
             nor `classifier.dense` with `classifier.out_proj`): this checkpoint is not a cross-encoder \
             (a bi-encoder belongs in the embedder)",
        ))
    }

    /// The logits of one first-token state.
    fn logits(&self, state: &[f32]) -> Vec<f32> {
        let hidden = state.len();
        let pooled: Vec<f32> = self
            .dense_weight
            .chunks_exact(hidden)
            .zip(&self.dense_bias)
            .map(|(row, b)| (dot(row, state) + b).tanh())
            .collect();
        self.out_weight
            .chunks_exact(hidden)
            .zip(&self.out_bias)
            .map(|(row, b)| dot(row, &pooled) + b)
            .collect()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// A loaded cross-encoder.
pub struct CrossEncoder {
    encoder: Encoder,
    head: Head,
    activation: Activation,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("encoder", &self.encoder)
            .field("labels", &self.head.labels)
            .field("activation", &self.activation)
            .finish_non_exhaustive()
    }
}

impl CrossEncoder {
    /// Loads a cross-encoder from a local directory (`config.json`,
    /// `tokenizer.json`, `model.safetensors`; `tokenizer_config.json` for the
    /// default maximum length).
    pub fn from_dir(dir: &Path, options: RerankerOptions) -> Result<Self, Error> {
        let encoder_options = EncoderOptions {
            max_length: options.max_length,
            batch_tokens: options.batch_tokens,
            backend: options.backend,
            precision: options.precision,
        };
        let encoder = Encoder::from_dir(dir, &encoder_options, tokenizer_max_length(dir)?)?;
        let file = TensorFile::open(encoder.weights_path())?;
        let head = Head::read(&file, encoder.hidden_size())?;
        let config_path = dir.join("config.json");
        if let Some(declared) = declared_labels(&config_path)?
            && declared != head.labels
        {
            return Err(Error::format(
                &config_path,
                format!(
                    "it declares {declared} labels but the classifier has {} outputs",
                    head.labels
                ),
            ));
        }
        if !(1..=2).contains(&head.labels) {
            return Err(Error::format(
                &config_path,
                format!(
                    "{} labels: a reranker needs 1 (the logit is the score) or 2 (label 1's logit is the score)",
                    head.labels
                ),
            ));
        }
        Ok(Self {
            encoder,
            head,
            activation: options.activation,
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

    /// Where the model runs, in words.
    pub fn device(&self) -> &str {
        self.encoder.device()
    }

    /// The truncation length of a pair in tokens.
    pub fn max_length(&self) -> usize {
        self.encoder.max_length()
    }

    /// Number of labels of the classifier (1 or 2).
    pub fn labels(&self) -> usize {
        self.head.labels
    }

    /// Token count of each pair as the model sees it (after truncation).
    pub fn pair_tokens<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<usize>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        Ok(self
            .encoder
            .tokenize_pairs(pairs)?
            .iter()
            .map(|t| t.ids.len())
            .collect())
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
        let inputs = self.encoder.tokenize_pairs(pairs)?;
        let states = self
            .encoder
            .encode_pooled(&inputs, Pooling::Cls, progress)?;
        Ok(states
            .chunks_exact(self.encoder.hidden_size())
            .flat_map(|state| self.head.logits(state))
            .collect())
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
        let logits = self.logits(pairs, progress)?;
        Ok(logits
            .chunks_exact(self.head.labels)
            .map(|l| match (self.head.labels, self.activation) {
                (1, Activation::Sigmoid) => 1.0 / (1.0 + (-l[0]).exp()),
                (1, Activation::Identity) => l[0],
                _ => l[1],
            })
            .collect())
    }

    /// Reranks one query's candidates: see [`CrossEncoder::rerank_run`].
    pub fn rerank(
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
    /// candidates (in trec_eval order) are rescored by the cross-encoder and
    /// reordered by that score (ties by id descending); the candidates below
    /// them stay behind, in first-stage order, with scores placed below the
    /// lowest reranked one so that the run file orders them as listed.
    /// Queries without text in `queries` are an error; documents without text
    /// (`documents` answers `None`) too. `progress` counts pairs scored.
    pub fn rerank_run(
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
        let scores = self.score(&pairs, progress)?;
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

/// `model_max_length` of `tokenizer_config.json`, when it is a real limit
/// (transformers writes a huge sentinel when there is none).
fn tokenizer_max_length(dir: &Path) -> Result<Option<usize>, Error> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::format(&path, e.to_string()))?;
    Ok(value
        .get("model_max_length")
        .and_then(serde_json::Value::as_f64)
        .filter(|n| (1.0..1e9).contains(n))
        .map(|n| n as usize))
}

/// The label count `config.json` declares (`id2label` or `num_labels`).
fn declared_labels(path: &Path) -> Result<Option<usize>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::format(path, e.to_string()))?;
    Ok(value
        .get("id2label")
        .and_then(serde_json::Value::as_object)
        .map(serde_json::Map::len)
        .or_else(|| {
            value
                .get("num_labels")
                .and_then(serde_json::Value::as_u64)
                .map(|n| n as usize)
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_out_of_tanh_of_dense() {
        let head = Head {
            dense_weight: vec![1.0, 0.0, 0.0, 2.0],
            dense_bias: vec![0.0, 0.5],
            out_weight: vec![1.0, 1.0, -1.0, 0.0],
            out_bias: vec![0.25, 0.0],
            labels: 2,
        };
        let logits = head.logits(&[0.5, -0.25]);
        let (a, b) = (0.5f32.tanh(), 0.0f32.tanh());
        assert!((logits[0] - (a + b + 0.25)).abs() < 1e-6);
        assert!((logits[1] + a).abs() < 1e-6);
    }
}
