//! Rerankers: rescore the first stage's top N.
//!
//! A reranker reads a (query, document) pair as one input and gives it a
//! score. The kind is detected from the checkpoint:
//!
//! - Cross-encoders with a sequence-classification head, as transformers
//!   saves them: BERT (`BertForSequenceClassification`: the `bert.*` encoder,
//!   `bert.pooler.dense`, `classifier`), as cross-encoder/ms-marco-MiniLM-L-6-v2
//!   and most MiniLM/TinyBERT rerankers; XLM-RoBERTa (`roberta.*`,
//!   `classifier.dense`, `classifier.out_proj`), as BAAI/bge-reranker-base.
//!   Both compute `out(tanh(dense(h₀)))` on the first token's state. With one
//!   label the score is its logit (or its sigmoid, [`Activation::Sigmoid`]);
//!   with two labels it is label 1's logit. Pairs are tokenised as
//!   sentence-transformers' `CrossEncoder` does (query first, longest-first
//!   truncation to the model's maximum length).
//! - Yes/no rerankers on a causal language model (`Qwen3ForCausalLM`:
//!   Qwen3-Reranker, SKILLRET-Reranker), scored as the official SkillRet
//!   evaluation and Qwen's model card do: the pair is written into the chat
//!   template ([`YES_NO_PREFIX`], `<Instruct>: …\n<Query>: …\n<Document>: …`
//!   truncated on the right, [`YES_NO_SUFFIX`]; the maximum length counts the
//!   whole input) and the score is P(yes) = softmax over the ("no", "yes")
//!   logits of the last position, computed from the two rows of the
//!   language-model head that matter (equal to σ(h·(w_yes − w_no))).
//!
//! The encoder, its loading, batching and engines (native CPU f32/bf16,
//! candle on CUDA) are the embedder's: [`embedder::Encoder`].
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

use embedder::{
    Backend, Encoder, EncoderOptions, ModelConfig, Pooling, Precision, Tokens, Weights,
};
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

/// The system prompt and user-turn opening of Qwen3-Reranker's template
/// (the official SkillRet evaluation's `Qwen3RankModel`).
pub const YES_NO_PREFIX: &str = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";

/// The end of the user turn and an empty thinking block, after which the
/// model's next token is "yes" or "no".
pub const YES_NO_SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The instruction of the official SkillRet evaluation's rerankers.
pub const SKILLRET_INSTRUCTION: &str = "Given a skill search query, judge whether the skill document is relevant and useful for the query";

/// The text of a yes/no reranker's input between prefix and suffix.
pub fn yes_no_content(instruction: &str, query: &str, document: &str) -> String {
    format!("<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}")
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
    fn read(file: &Weights, hidden: usize) -> Result<Self, Error> {
        // (dense, output) tensor name stems of each layout.
        const LAYOUTS: [(&str, &str); 2] = [
            ("bert.pooler.dense", "classifier"),
            ("classifier.dense", "classifier.out_proj"),
        ];
        let path = file.path();
        for (dense, out) in LAYOUTS {
            let Some((shape, out_weight)) = file.find_full(&format!("{out}.weight"))? else {
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
                match file.find_full(&name)? {
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

/// A decoder's yes/no scoring: the two rows of its language-model head and
/// the template around each pair.
struct YesNo {
    /// Rows "no" then "yes" of the head (`2 × hidden`).
    rows: Vec<f32>,
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    instruction: String,
}

/// How pairs become scores.
enum Scorer {
    /// A sequence-classification head on the first token.
    Classifier(Head),
    /// P(yes) at the last token of the templated pair.
    YesNo(YesNo),
}

/// A loaded reranker: a cross-encoder with a classification head, or a
/// yes/no decoder.
pub struct CrossEncoder {
    encoder: Encoder,
    scorer: Scorer,
    activation: Activation,
}

impl std::fmt::Debug for CrossEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrossEncoder")
            .field("encoder", &self.encoder)
            .field("kind", &self.kind())
            .field("labels", &self.labels())
            .field("activation", &self.activation)
            .finish_non_exhaustive()
    }
}

/// The kinds of reranker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RerankerKind {
    /// An encoder with a sequence-classification head.
    Classifier,
    /// A causal language model scored by P(yes).
    YesNo,
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
        };
        let default_length = embedder::config::tokenizer_max_length(dir)?;
        let encoder = Encoder::from_dir(dir, &encoder_options, default_length)?;
        let scorer = match encoder.config() {
            ModelConfig::Bert(_) => Scorer::Classifier(classifier(&encoder, dir)?),
            _ => Scorer::YesNo(yes_no(&encoder, options.instruction)?),
        };
        Ok(Self {
            encoder,
            scorer,
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

    /// The truncation length of a pair in tokens (the template included).
    pub fn max_length(&self) -> usize {
        self.encoder.max_length()
    }

    /// The kind of reranker.
    pub fn kind(&self) -> RerankerKind {
        match self.scorer {
            Scorer::Classifier(_) => RerankerKind::Classifier,
            Scorer::YesNo(_) => RerankerKind::YesNo,
        }
    }

    /// Number of logits per pair: the classifier's labels (1 or 2), or 2
    /// ("no", "yes") for a yes/no reranker.
    pub fn labels(&self) -> usize {
        match &self.scorer {
            Scorer::Classifier(head) => head.labels,
            Scorer::YesNo(_) => 2,
        }
    }

    /// The instruction a yes/no reranker writes into each pair.
    pub fn instruction(&self) -> Option<&str> {
        match &self.scorer {
            Scorer::Classifier(_) => None,
            Scorer::YesNo(y) => Some(&y.instruction),
        }
    }

    /// The model's input for each (query, document) pair, after truncation.
    pub fn tokenize<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        match &self.scorer {
            Scorer::Classifier(_) => self.encoder.tokenize_pairs(pairs),
            Scorer::YesNo(y) => {
                let template = y.prefix.len() + y.suffix.len();
                let limit = self.max_length().checked_sub(template).filter(|&n| n > 0).ok_or_else(|| {
                    Error::Invalid(format!(
                        "a maximum length of {} tokens cannot hold the template's {template} tokens and a pair",
                        self.max_length()
                    ))
                })?;
                let contents: Vec<String> = pairs
                    .iter()
                    .map(|(q, d)| yes_no_content(&y.instruction, q.as_ref(), d.as_ref()))
                    .collect();
                Ok(self
                    .encoder
                    .tokenize_limited(&contents, limit)?
                    .into_iter()
                    .map(|content| Tokens {
                        ids: [&y.prefix[..], &content.ids, &y.suffix].concat(),
                        types: Vec::new(),
                    })
                    .collect())
            }
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
        let inputs = self.tokenize(pairs)?;
        let (pooling, hidden) = match self.scorer {
            Scorer::Classifier(_) => (Pooling::Cls, self.encoder.hidden_size()),
            Scorer::YesNo(_) => (Pooling::LastToken, self.encoder.hidden_size()),
        };
        let states = self.encoder.encode_pooled(&inputs, pooling, 0, progress)?;
        Ok(match &self.scorer {
            Scorer::Classifier(head) => states
                .chunks_exact(hidden)
                .flat_map(|state| head.logits(state))
                .collect(),
            Scorer::YesNo(y) => states
                .chunks_exact(hidden)
                .flat_map(|state| y.rows.chunks_exact(hidden).map(|row| dot(row, state)))
                .collect(),
        })
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
        let sigmoid = |x: f32| 1.0 / (1.0 + (-x).exp());
        Ok(logits
            .chunks_exact(self.labels())
            .map(|l| match (&self.scorer, self.activation) {
                // softmax([no, yes])[1] = σ(yes − no).
                (Scorer::YesNo(_), _) => sigmoid(l[1] - l[0]),
                (_, Activation::Sigmoid) if l.len() == 1 => sigmoid(l[0]),
                _ if l.len() == 1 => l[0],
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

/// The classification head of a BERT-family cross-encoder, checked against
/// the labels its config declares.
fn classifier(encoder: &Encoder, dir: &Path) -> Result<Head, Error> {
    let head = Head::read(&encoder.weights()?, encoder.hidden_size())?;
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
    Ok(head)
}

/// The yes/no scoring of a decoder: the "no" and "yes" rows of its head, and
/// the template tokenised by its own tokenizer.
fn yes_no(encoder: &Encoder, instruction: Option<String>) -> Result<YesNo, Error> {
    let weights = encoder.weights()?;
    if weights.contains_full("score.weight") {
        return Err(Error::format(
            weights.path(),
            "this is a sequence-classification decoder (`score.weight`); yes/no rerankers load from the causal language model (`*ForCausalLM`) checkpoint",
        ));
    }
    let tokenizer = &encoder.files().tokenizer;
    let token = |text: &str| {
        encoder.token_id(text).ok_or_else(|| Error::TokenizerMismatch {
            path: tokenizer.clone(),
            message: format!(
                "model.vocab has no token {text:?}: a yes/no reranker scores the \"no\" and \"yes\" tokens"
            ),
        })
    };
    let ids = [token("no")?, token("yes")?];
    Ok(YesNo {
        rows: encoder.lm_head_rows(&ids)?,
        prefix: encoder.token_ids(YES_NO_PREFIX)?,
        suffix: encoder.token_ids(YES_NO_SUFFIX)?,
        instruction: instruction.unwrap_or_else(|| SKILLRET_INSTRUCTION.to_owned()),
    })
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
