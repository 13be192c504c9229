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

use embedder::chat::ChatInputs;
use embedder::{AttentionKernel, Backend, Encoder, EncoderOptions, ModelConfig, Precision, Tokens};
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
    /// The candle engine's attention kernel (`None`: the default for the
    /// backend and precision).
    pub attention_kernel: Option<AttentionKernel>,
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
            attention_kernel: None,
        }
    }
}

impl RerankerOptions {
    /// Sets the candle engine's attention kernel.
    pub fn with_attention_kernel(mut self, kernel: AttentionKernel) -> Self {
        self.attention_kernel = Some(kernel);
        self
    }
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
        depth: usize,
    ) -> Result<Vec<ScoredDoc>, Error> {
        let mut run = Run::default();
        run.insert("q".to_owned(), candidates.to_vec());
        let queries = HashMap::from([("q".to_owned(), query.to_owned())]);
        let out = self.rerank_run(&run, &queries, documents, &Pool::top(depth), &|_| {})?;
        Ok(out.get("q").map(<[ScoredDoc]>::to_vec).unwrap_or_default())
    }

    /// Reranks every query of a first-stage run, as the official
    /// `eval_rerank` does: each query's [`Pool`] (its top `depth` candidates,
    /// plus the gold skills with `oracle`) is rescored, and the reranked run
    /// holds those candidates only, by the reranker's score (ties by id
    /// descending, as trec_eval orders them). Queries without text in
    /// `queries` are an error; documents without text (`documents` answers
    /// `None`) too. `progress` counts pairs scored.
    fn rerank_run(
        &self,
        run: &Run,
        queries: &HashMap<String, String>,
        documents: &dyn Fn(&str) -> Option<String>,
        pool: &Pool<'_>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Run, Error> {
        let mut ranked: Vec<(&str, Vec<Arc<str>>)> = Vec::new();
        let mut pairs: Vec<(&str, String)> = Vec::new();
        for query in run.query_ids() {
            let text = queries.get(query).ok_or_else(|| {
                Error::Invalid(format!(
                    "query `{query}` of the run has no text in the data"
                ))
            })?;
            let candidates = pool.candidates(query, run.get(query).unwrap_or_default());
            for id in &candidates {
                let body = documents(id).ok_or_else(|| {
                    Error::Invalid(format!(
                        "document `{id}` (query `{query}`) is not in the skill library"
                    ))
                })?;
                pairs.push((text.as_str(), body));
            }
            ranked.push((query, candidates));
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
        for (query, candidates) in ranked {
            let mut head: Vec<ScoredDoc> = candidates
                .into_iter()
                .map(|id| ScoredDoc {
                    id,
                    score: f64::from(next.next().unwrap_or(f32::NAN)),
                })
                .collect();
            eval::sort_trec(&mut head);
            out.insert(query.to_owned(), head);
        }
        Ok(out)
    }
}

/// Which candidates a reranker rescores for each query: the official
/// `eval_rerank`'s pool.
#[derive(Debug, Clone, Copy)]
pub struct Pool<'a> {
    /// How many of the first stage's candidates (`from_top_k`).
    pub depth: usize,
    /// Oracle reranking (`eval_rerank(oracle=True)`): every relevant skill
    /// of the query (grade ≥ 1) joins the pool if the first stage missed it.
    pub oracle: Option<&'a eval::Qrels>,
}

impl Pool<'_> {
    /// The first stage's top `depth`, no oracle.
    pub fn top(depth: usize) -> Self {
        Pool {
            depth,
            oracle: None,
        }
    }

    /// The pool of one query: its `depth` highest-scored candidates, equal
    /// scores at the cut taken in the run's own order (Python's stable
    /// `sorted(..., reverse=True)[:k]` over the first stage's dict), then,
    /// with an oracle, the relevant skills not among them, by id.
    pub fn candidates(&self, query: &str, docs: &[ScoredDoc]) -> Vec<Arc<str>> {
        let mut order: Vec<&ScoredDoc> = docs.iter().collect();
        // Stable: ties keep the run's order. NaN sorts last.
        order.sort_by(|a, b| {
            b.score
                .partial_cmp(&a.score)
                .unwrap_or_else(|| a.score.is_nan().cmp(&b.score.is_nan()))
        });
        let mut pool: Vec<Arc<str>> = order
            .into_iter()
            .take(self.depth)
            .map(|d| Arc::clone(&d.id))
            .collect();
        if let Some(judged) = self.oracle.and_then(|q| q.get(query)) {
            let mut gold: Vec<&String> = judged
                .iter()
                .filter(|&(id, &grade)| grade >= 1 && !pool.iter().any(|p| **p == **id))
                .map(|(id, _)| id)
                .collect();
            gold.sort_unstable();
            pool.extend(gold.into_iter().map(|id| Arc::from(id.as_str())));
        }
        pool
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
    ///
    /// A directory saved by sentence-transformers 6.x's `CrossEncoder` is
    /// read as it reads it: its default prompt (the instruction, where
    /// given, instead), and pairs rendered through the tokenizer's chat
    /// template where the `message` modality is listed (a `query` and a
    /// `document` message; see [`embedder::chat::ChatInputs`]); a causal
    /// language model with a `LogitScore` module is scored by its tokens.
    pub fn from_dir(dir: &Path, options: RerankerOptions) -> Result<Self, Error> {
        let encoder_options = EncoderOptions {
            max_length: options.max_length,
            batch_tokens: options.batch_tokens,
            backend: options.backend,
            precision: options.precision,
            task: None,
            attention_kernel: options.attention_kernel,
        };
        let st = embedder::config::SentenceTransformersConfig::read(dir)?;
        let default_length = match st.max_seq_length {
            Some(n) => Some(n),
            None => embedder::config::tokenizer_max_length(dir)?,
        };
        let encoder = Encoder::from_dir(dir, &encoder_options, default_length)?;
        // sentence-transformers' default prompt, unless one is given.
        let prompt = match (&options.instruction, &st.default_prompt_name) {
            (Some(instruction), _) => instruction.clone(),
            (None, Some(name)) => st.prompt(dir, name)?.to_owned(),
            (None, None) => String::new(),
        };
        let load_chat = |encoder: &Encoder| {
            ChatInputs::load_pairs(
                dir,
                &st,
                encoder.config().family(),
                encoder.tokenization(),
                &prompt,
            )
        };
        Ok(match encoder.config() {
            ModelConfig::Bert(_) => {
                if st.logit_score.is_some() {
                    return Err(Error::format(
                        &dir.join("modules.json"),
                        "a LogitScore module on an encoder: it scores a causal language model's tokens",
                    ));
                }
                let chat = load_chat(&encoder)?;
                Self::Classifier(Classifier::new(
                    encoder,
                    dir,
                    options.activation,
                    prompt,
                    chat,
                )?)
            }
            _ => match st.logit_score {
                // A plain checkpoint (or one saved without LogitScore): the
                // official Qwen3-Reranker protocol.
                None => Self::YesNo(YesNo::new(encoder, options.instruction)?),
                Some((yes, no)) => {
                    let no = no.ok_or_else(|| {
                        Error::format(
                            &dir.join("modules.json"),
                            "LogitScore without a false_token_id (the score is one token's logit) is not supported; a yes/no reranker scores logit(yes) - logit(no)",
                        )
                    })?;
                    let chat = load_chat(&encoder)?.ok_or_else(|| {
                        Error::format(
                            &dir.join("sentence_bert_config.json"),
                            "a causal language model scored by LogitScore without the message modality (a chat template) reads a pair as plain text, which is not supported",
                        )
                    })?;
                    Self::YesNo(YesNo::with_chat(encoder, [no, yes], prompt, chat)?)
                }
            },
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

/// How a cross-encoder's pairs are written, for its one-line description:
/// the chat template they are rendered through, and the prompt.
pub(crate) fn chat_words(chat: Option<&ChatInputs>, prompt: &str) -> String {
    let mut words = String::new();
    if let Some(chat) = chat {
        words.push_str(&format!(
            ", pairs rendered through the chat template of {} ({} messages)",
            chat.template().path().display(),
            chat.format().name()
        ));
    }
    if !prompt.is_empty() {
        words.push_str(&format!(", prompt {prompt:?}"));
    }
    words
}

/// Interpolates a reranked run with the first stage it reranked: within
/// each query's reranked pool, both stages' scores are min-max normalised
/// over the pool and combined as `weight · reranker + (1 − weight) · first
/// stage` (a candidate the first stage did not return, an oracle's gold
/// skill, counts as its lowest). Like the reranked run, the result holds the
/// pool only. `weight` 1 gives the reranker's order, 0 the first stage's
/// (ties by document id, as trec_eval).
pub fn interpolate(first: &Run, reranked: &Run, weight: f64) -> Run {
    fn normalised(scores: &[(Arc<str>, f64)]) -> HashMap<Arc<str>, f64> {
        let (lo, hi) = scores
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), d| {
                (lo.min(d.1), hi.max(d.1))
            });
        let span = hi - lo;
        scores
            .iter()
            .map(|(id, score)| {
                let v = if span > 0.0 { (score - lo) / span } else { 0.0 };
                (Arc::clone(id), v)
            })
            .collect()
    }
    let mut out = Run::default();
    for query in reranked.query_ids() {
        let pool = reranked.get(query).unwrap_or_default();
        let firsts: HashMap<&str, f64> = first
            .get(query)
            .unwrap_or_default()
            .iter()
            .map(|d| (&*d.id, d.score))
            .collect();
        let known: Vec<f64> = pool
            .iter()
            .filter_map(|d| firsts.get(&*d.id).copied())
            .collect();
        let floor = known.iter().copied().fold(f64::INFINITY, f64::min);
        let floor = if floor.is_finite() { floor } else { 0.0 };
        let base: Vec<(Arc<str>, f64)> = pool
            .iter()
            .map(|d| {
                (
                    Arc::clone(&d.id),
                    firsts.get(&*d.id).copied().unwrap_or(floor),
                )
            })
            .collect();
        let base = normalised(&base);
        let rerank: Vec<(Arc<str>, f64)> =
            pool.iter().map(|d| (Arc::clone(&d.id), d.score)).collect();
        let rerank = normalised(&rerank);
        let mut head: Vec<ScoredDoc> = pool
            .iter()
            .map(|d| ScoredDoc {
                id: Arc::clone(&d.id),
                score: weight * rerank[&d.id] + (1.0 - weight) * base[&d.id],
            })
            .collect();
        eval::sort_trec(&mut head);
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
        // The reranker saw the top 3 and reverses them; d, outside the
        // pool, is not in either result.
        let reranked = run(&[("c", 5.0), ("b", 1.0), ("a", -3.0)]);
        assert_eq!(order(&interpolate(&first, &reranked, 1.0)), ["c", "b", "a"]);
        assert_eq!(order(&interpolate(&first, &reranked, 0.0)), ["a", "b", "c"]);
        // Normalised: first stage a 1, b 0.5, c 0; reranker a 0, b 0.5, c 1.
        // 0.3 on the reranker: the first stage's order wins, by margins.
        let mostly_first = interpolate(&first, &reranked, 0.3);
        assert_eq!(order(&mostly_first), ["a", "b", "c"]);
        let mostly_reranker = interpolate(&first, &reranked, 0.7);
        assert_eq!(order(&mostly_reranker), ["c", "b", "a"]);
        let scores: Vec<f64> = mostly_reranker
            .get("q")
            .unwrap()
            .iter()
            .map(|d| d.score)
            .collect();
        assert!(
            (scores[0] - 0.7).abs() < 1e-12 && scores[2] < scores[1],
            "{scores:?}"
        );
    }

    /// Scores a pair by the document's length: a reranker whose order is
    /// known in advance.
    #[derive(Debug)]
    struct ByLength;

    impl Reranker for ByLength {
        fn describe(&self) -> String {
            "by length".to_owned()
        }
        fn score_pairs(
            &self,
            pairs: &[(&str, &str)],
            progress: &(dyn Fn(usize) + Sync),
        ) -> Result<Vec<f32>, Error> {
            progress(pairs.len());
            Ok(pairs.iter().map(|(_, d)| d.len() as f32).collect())
        }
    }

    #[test]
    fn equal_scores_at_the_cut_keep_the_first_stages_order() {
        // b, c and d tie at the cut of 2: the run lists d before b and c,
        // so Python's stable sort takes a and d (trec order would take c).
        let docs = run(&[("a", 0.9), ("d", 0.5), ("b", 0.5), ("c", 0.5)]);
        let pool = Pool::top(2).candidates("q", docs.get("q").unwrap());
        let ids: Vec<&str> = pool.iter().map(|id| &**id).collect();
        assert_eq!(ids, ["a", "d"]);
        let docs = run(&[("c", 0.5), ("b", 0.5), ("a", 0.9), ("d", 0.5)]);
        let pool = Pool::top(3).candidates("q", docs.get("q").unwrap());
        let ids: Vec<&str> = pool.iter().map(|id| &**id).collect();
        assert_eq!(ids, ["a", "c", "b"]);
    }

    #[test]
    fn the_reranked_run_holds_the_pool_only_and_the_oracle_adds_the_gold() {
        let first = run(&[("aaaa", 0.9), ("bb", 0.8), ("c", 0.7), ("dddddd", 0.1)]);
        let queries = HashMap::from([("q".to_owned(), "text".to_owned())]);
        let text = |id: &str| Some(id.to_owned());
        let reranked = ByLength
            .rerank_run(&first, &queries, &text, &Pool::top(3), &|_| {})
            .unwrap();
        assert_eq!(order(&reranked), ["aaaa", "bb", "c"]);
        let mut qrels = eval::Qrels::default();
        qrels.insert("q".to_owned(), "dddddd".to_owned(), 1);
        qrels.insert("q".to_owned(), "bb".to_owned(), 2);
        qrels.insert("q".to_owned(), "zzzzzzzz".to_owned(), 0);
        let oracle = Pool {
            depth: 2,
            oracle: Some(&qrels),
        };
        let reranked = ByLength
            .rerank_run(&first, &queries, &text, &oracle, &|_| {})
            .unwrap();
        // The top 2 and the one relevant skill the first stage ranked
        // lower; the non-relevant judged one stays out.
        assert_eq!(order(&reranked), ["dddddd", "aaaa", "bb"]);
        // A document without text is an error naming it.
        let err = ByLength
            .rerank_run(&first, &queries, &|_| None, &Pool::top(1), &|_| {})
            .unwrap_err();
        assert!(err.to_string().contains("`aaaa`"), "{err}");
    }
}
