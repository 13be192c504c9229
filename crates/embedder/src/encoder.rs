//! A loaded transformer: tokenizer, architecture and engine, shared by the
//! bi-encoder ([`crate::Embedder`] pools its token states) and the
//! rerankers (the `reranker` crate scores pairs with a classification head
//! on the first token, or a decoder's yes/no logits on the last).
//!
//! Inputs are sorted by length and cut into batches by a token budget (an
//! input longer than the budget gets a batch of its own); the results come
//! back in input order whatever the batching. The native CPU engine runs two
//! batches side by side, each with half the budget ([`engine::lanes`]).

use std::path::Path;

use crate::config::Pooling;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use crate::models::{self, Model, ModelConfig, Pool, Tokens};
use crate::tokenize::Tokenization;
use crate::{AttentionKernel, Backend, Precision};

/// How an [`Encoder`] is loaded and run.
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderOptions {
    /// Truncate inputs to this many tokens (at most the model's own limit);
    /// `None`: the caller's default, else the model's limit.
    pub max_length: Option<usize>,
    /// Tokens per batch; the native CPU engine runs two batches of half
    /// as many at once (see the module's documentation).
    pub batch_tokens: usize,
    /// The engine.
    pub backend: Backend,
    /// Arithmetic of the native engine's linear layers.
    pub precision: Precision,
    /// The LoRA adapter to merge, for models with per-task adapters
    /// (`adapters/<task>/`; `None`: `retrieval` where there are adapters).
    pub task: Option<String>,
    /// The candle engine's attention kernel (`None`: the default for the
    /// backend and precision).
    pub attention_kernel: Option<AttentionKernel>,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        Self {
            max_length: None,
            batch_tokens: 8192,
            backend: Backend::Native,
            precision: Precision::F32,
            task: None,
            attention_kernel: None,
        }
    }
}

/// A transformer ready to run.
pub struct Encoder {
    tokens: Tokenization,
    model: Box<dyn Model>,
    files: ModelFiles,
    batch_tokens: usize,
    device: String,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("dir", &self.files.dir)
            .field("family", &self.config().family())
            .field("max_length", &self.max_length())
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// Loads the model of a directory. `default_max_length` applies when the
    /// options set none (e.g. sentence-transformers' max_seq_length), capped
    /// at the model's positions.
    pub fn from_dir(
        dir: &Path,
        options: &EncoderOptions,
        default_max_length: Option<usize>,
    ) -> Result<Self> {
        // An unknown or impossible SKILLRET_MAX_ISA stops here, before any
        // kernel runs.
        engine::isa::check()?;
        let files = ModelFiles::in_dir(dir)?;
        let config = ModelConfig::read(&files.config)?;
        if options.batch_tokens == 0 {
            return Err(Error::Invalid("batch_tokens must be positive".to_owned()));
        }
        let tokens = Tokenization::new(
            &files.tokenizer,
            config.clone(),
            options.max_length,
            default_max_length,
        )?;
        let (model, device) = models::load(
            &config,
            &files,
            options.backend,
            options.precision,
            options.attention_kernel,
            options.task.as_deref(),
        )?;
        Ok(Self {
            tokens,
            model,
            files,
            batch_tokens: options.batch_tokens,
            device,
        })
    }

    /// The tokenizer and its truncation rules.
    pub fn tokenization(&self) -> &Tokenization {
        &self.tokens
    }

    /// The architecture.
    pub fn config(&self) -> &ModelConfig {
        self.tokens.config()
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.files.dir
    }

    /// The model's files.
    pub fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// The checkpoint's tensors by full name (for task heads).
    pub fn weights(&self) -> Result<Weights> {
        Weights::open(&self.files.weights, &[""], "")
    }

    /// Rows `ids` of a decoder's language-model head (`lm_head.weight`, or
    /// the embedding matrix where the checkpoint ties them), `hidden` values
    /// each: what a yes/no reranker needs of the head.
    pub fn lm_head_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        match self.config() {
            ModelConfig::Qwen3(c) => {
                let weights = models::qwen3::weights(&self.files)?;
                let name = models::qwen3::lm_head_name(&weights);
                if name != "lm_head.weight" && !c.tie_word_embeddings {
                    return Err(Error::MissingTensor {
                        path: weights.path().to_path_buf(),
                        name: "lm_head.weight".to_owned(),
                    });
                }
                let rows: Vec<usize> = ids.iter().map(|&i| i as usize).collect();
                weights.rows_full(&name, &rows, c.hidden_size)
            }
            other => Err(Error::Invalid(format!(
                "{}: a {} encoder has no language-model head",
                self.files.dir.display(),
                other.family()
            ))),
        }
    }

    /// Where the model runs, in words.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Width of the token states.
    pub fn hidden_size(&self) -> usize {
        self.config().hidden_size()
    }

    /// The truncation length in tokens.
    pub fn max_length(&self) -> usize {
        self.tokens.max_length()
    }

    /// Tokenises single texts (specials added, truncated).
    pub fn tokenize<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Tokens>> {
        self.tokens.tokenize(texts)
    }

    /// Token ids of `text` as it is, without the tokenizer's special tokens
    /// and without truncation (see [`Tokenization::token_ids`]).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        self.tokens.token_ids(text)
    }

    /// The id of the token spelled `token` in the vocabulary, if any.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokens.token_id(token)
    }

    /// Single texts cut to `limit` tokens, specials kept (see
    /// [`Tokenization::tokenize_limited`]).
    pub fn tokenize_limited<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        limit: usize,
    ) -> Result<Vec<Tokens>> {
        self.tokens.tokenize_limited(texts, limit)
    }

    /// Text pairs as one input each, longest first truncated (see
    /// [`Tokenization::tokenize_pairs`]).
    pub fn tokenize_pairs<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        self.tokens.tokenize_pairs(pairs)
    }

    /// Whether the tokenizer appends a special token to a single text.
    pub fn appends_special(&self) -> bool {
        self.tokens.appends_special()
    }

    /// One pooled (not normalised) vector per input, in input order; mean
    /// and CLS pooling leave out each input's first `skip` tokens. Calls
    /// `progress` with the number of inputs done after each batch.
    pub fn encode_pooled(
        &self,
        inputs: &[Tokens],
        pooling: Pooling,
        skip: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>> {
        self.encode(inputs, Pool::new(pooling, skip), progress)
    }

    /// [`Encoder::encode_pooled`] with the attention of `pool.mask`.
    pub(crate) fn encode(
        &self,
        inputs: &[Tokens],
        pool: Pool,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>> {
        if let Some(empty) = inputs.iter().position(|t| t.ids.is_empty()) {
            return Err(Error::Invalid(format!("input {empty} has no tokens")));
        }
        let dim = self.hidden_size();
        let mut data = vec![0.0f32; inputs.len() * dim];
        // Longest first, so batches hold inputs of similar length.
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].ids.len()));
        // A model that runs batches side by side shares the token budget
        // among them: as much in memory at once as one batch of it all.
        // The engine may want smaller batches than the budget allows.
        let lanes = self.model.lanes().max(1);
        let budget = self
            .batch_tokens
            .min(self.model.batch_cap().unwrap_or(usize::MAX));
        let all = batches(&order, inputs, (budget / lanes).max(1));
        let mut done = 0;
        let forward = |k: usize| {
            let seqs: Vec<&Tokens> = all[k].iter().map(|&i| &inputs[i]).collect();
            self.model.forward(&seqs, pool)
        };
        engine::lanes::side_by_side(all.len(), lanes, forward, |k, pooled: Vec<f32>| {
            for (vector, &i) in pooled.chunks_exact(dim).zip(all[k]) {
                data[i * dim..(i + 1) * dim].copy_from_slice(vector);
            }
            done += all[k].len();
            progress(done);
        })?;
        models::profile::report();
        Ok(data)
    }
}

/// Consecutive runs of `order` whose tokens add up to at most `budget`.
fn batches<'a>(order: &'a [usize], inputs: &[Tokens], budget: usize) -> Vec<&'a [usize]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut tokens = 0;
    for (pos, &i) in order.iter().enumerate() {
        let len = inputs[i].ids.len().max(1);
        if pos > start && tokens + len > budget {
            out.push(&order[start..pos]);
            start = pos;
            tokens = 0;
        }
        tokens += len;
    }
    if start < order.len() {
        out.push(&order[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::pool_states;

    fn tokens(len: usize) -> Tokens {
        Tokens {
            ids: vec![0; len],
            types: Vec::new(),
        }
    }

    #[test]
    fn batches_respect_the_budget_and_cover_everything() {
        let inputs: Vec<Tokens> = [5, 5, 4, 3, 3, 1].into_iter().map(tokens).collect();
        let order: Vec<usize> = (0..inputs.len()).collect();
        let b = batches(&order, &inputs, 10);
        assert_eq!(b, vec![&[0, 1][..], &[2, 3, 4][..], &[5][..]]);
        // An input longer than the budget still gets a batch of its own.
        let b = batches(&order, &inputs, 3);
        assert_eq!(b.iter().map(|b| b.len()).sum::<usize>(), 6);
    }

    #[test]
    fn pooling() {
        let states = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 10.0, 20.0];
        let lengths = [3, 1];
        let pool = |pooling, skip| pool_states(&states, &lengths, 2, Pool::new(pooling, skip));
        assert_eq!(pool(Pooling::Mean, 0), [3.0, 4.0, 10.0, 20.0]);
        assert_eq!(pool(Pooling::Cls, 0), [1.0, 2.0, 10.0, 20.0]);
        assert_eq!(pool(Pooling::LastToken, 0), [5.0, 6.0, 10.0, 20.0]);
        // A prompt of one token left out of mean and CLS pooling.
        assert_eq!(pool(Pooling::Mean, 1), [4.0, 5.0, 0.0, 0.0]);
        assert_eq!(pool(Pooling::Cls, 1), [3.0, 4.0, 10.0, 20.0]);
        assert_eq!(pool(Pooling::LastToken, 1), [5.0, 6.0, 10.0, 20.0]);
    }
}
