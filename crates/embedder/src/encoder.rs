//! A loaded transformer: tokenizer, architecture and engine, shared by the
//! bi-encoder ([`crate::Embedder`] pools its token states) and the
//! rerankers (the `reranker` crate scores pairs with a classification head
//! on the first token, or a decoder's yes/no logits on the last).
//!
//! Inputs are sorted by length and cut into batches by a token budget (an
//! input longer than the budget gets a batch of its own); the results come
//! back in input order whatever the batching.

use std::path::Path;

use rayon::prelude::*;
use tokenizers::{
    EncodeInput, Encoding, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::config::Pooling;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use crate::models::{self, Model, ModelConfig, Pool, Tokens};
use crate::{Backend, Precision};

/// How an [`Encoder`] is loaded and run.
#[derive(Debug, Clone, PartialEq)]
pub struct EncoderOptions {
    /// Truncate inputs to this many tokens (at most the model's own limit);
    /// `None`: the caller's default, else the model's limit.
    pub max_length: Option<usize>,
    /// Tokens per batch.
    pub batch_tokens: usize,
    /// The engine.
    pub backend: Backend,
    /// Arithmetic of the native engine's linear layers.
    pub precision: Precision,
}

impl Default for EncoderOptions {
    fn default() -> Self {
        Self {
            max_length: None,
            batch_tokens: 8192,
            backend: Backend::Native,
            precision: Precision::F32,
        }
    }
}

/// A transformer ready to run.
pub struct Encoder {
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation.
    untruncated: Tokenizer,
    model: Box<dyn Model>,
    config: ModelConfig,
    files: ModelFiles,
    max_length: usize,
    batch_tokens: usize,
    device: String,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("dir", &self.files.dir)
            .field("family", &self.config.family())
            .field("max_length", &self.max_length)
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
        let files = ModelFiles::in_dir(dir)?;
        let config = ModelConfig::read(&files.config)?;
        let model_max = config.max_input_length();
        // An explicit length beyond the positions is an error; a default one
        // (a tokenizer's model_max_length, say) is capped, as
        // sentence-transformers caps it.
        let max_length = match (options.max_length, default_max_length) {
            (Some(n), _) if n > model_max => {
                return Err(Error::Invalid(format!(
                    "max length {n} exceeds the model's {model_max} positions"
                )));
            }
            (Some(0), _) | (None, Some(0)) => {
                return Err(Error::Invalid("max length must be positive".to_owned()));
            }
            (Some(n), _) => n,
            (None, Some(n)) => n.min(model_max),
            (None, None) => model_max,
        };
        if options.batch_tokens == 0 {
            return Err(Error::Invalid("batch_tokens must be positive".to_owned()));
        }
        let tokenizer = load_tokenizer(&files.tokenizer, &config, max_length)?;
        let mut untruncated = tokenizer.clone();
        untruncated
            .with_truncation(None)
            .map_err(|e| Error::format(&files.tokenizer, e.to_string()))?;
        let (model, device) = models::load(&config, &files, options.backend, options.precision)?;
        Ok(Self {
            tokenizer,
            untruncated,
            model,
            config,
            files,
            max_length,
            batch_tokens: options.batch_tokens,
            device,
        })
    }

    /// The architecture.
    pub fn config(&self) -> &ModelConfig {
        &self.config
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
        match &self.config {
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
        self.config.hidden_size()
    }

    /// The truncation length in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Tokenises single texts (specials added, truncated).
    pub fn tokenize<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Tokens>> {
        texts
            .par_iter()
            .map(|text| self.encode(text.as_ref().into()))
            .collect()
    }

    /// Token ids of `text` as it is, without the tokenizer's special tokens
    /// and without truncation (special tokens written in the text, such as
    /// `<|im_start|>`, are recognised).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.untruncated.encode(text, false).map_err(failed)?;
        Ok(self.checked(&encoding)?.ids)
    }

    /// The id of the token spelled `token` in the vocabulary, if any.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.untruncated.token_to_id(token)
    }

    /// Tokenises single texts with the tokenizer's special tokens, each cut
    /// (on the right, specials kept) to at most `limit` tokens, as
    /// transformers' `tokenizer(text, truncation=True, max_length=limit)`.
    pub fn tokenize_limited<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        limit: usize,
    ) -> Result<Vec<Tokens>> {
        let added = self
            .untruncated
            .get_post_processor()
            .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false));
        if limit <= added {
            return Err(Error::Invalid(format!(
                "a limit of {limit} tokens leaves no room beside the {added} special tokens"
            )));
        }
        texts
            .par_iter()
            .map(|text| {
                let mut encoding = self
                    .untruncated
                    .encode(text.as_ref(), false)
                    .map_err(failed)?;
                encoding.truncate(limit - added, 0, TruncationDirection::Right);
                let encoding = self
                    .untruncated
                    .post_process(encoding, None, true)
                    .map_err(failed)?;
                self.checked(&encoding)
            })
            .collect()
    }

    /// Tokenises text pairs as one input each (`[CLS] a [SEP] b [SEP]` or the
    /// model's own template), truncating the longer text first, as
    /// transformers does for `truncation="longest_first"`.
    ///
    /// Each text is tokenised whole before the pair is truncated: the
    /// tokenizers crate 0.23.2 cuts each text to the maximum length first
    /// (an early exit), which turns "longer text first" into a tie whenever
    /// both texts are long, and gives the odd token to the other text than
    /// transformers (Python tokenizers 0.23.3) does.
    pub fn tokenize_pairs<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        pairs
            .par_iter()
            .map(|(a, b)| {
                let first = self.untruncated.encode(a.as_ref(), false).map_err(failed)?;
                let second = self.untruncated.encode(b.as_ref(), false).map_err(failed)?;
                let encoding = self
                    .tokenizer
                    .post_process(first, Some(second), true)
                    .map_err(failed)?;
                self.checked(&encoding)
            })
            .collect()
    }

    /// Whether the tokenizer appends a special token to a single text (BERT's
    /// `[SEP]`, Qwen3-Embedding's `<|endoftext|>`).
    pub fn appends_special(&self) -> bool {
        let plain = self.untruncated.encode("a", false);
        let full = self.untruncated.encode("a", true);
        match (plain, full) {
            (Ok(plain), Ok(full)) => {
                let (plain, full) = (plain.get_ids(), full.get_ids());
                full.len() > plain.len() && !full.ends_with(plain)
            }
            _ => false,
        }
    }

    fn encode(&self, input: EncodeInput<'_>) -> Result<Tokens> {
        let encoding = self.tokenizer.encode(input, true).map_err(failed)?;
        self.checked(&encoding)
    }

    /// The ids and types of an encoding, checked against the model's tables.
    fn checked(&self, encoding: &Encoding) -> Result<Tokens> {
        let ids = encoding.get_ids().to_vec();
        let mismatch = |message: String| Error::TokenizerMismatch {
            path: self.files.tokenizer.clone(),
            message,
        };
        let vocab = self.config.vocab_size();
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(mismatch(format!(
                "token id {bad} is outside the model's vocabulary of {vocab}"
            )));
        }
        let types = encoding.get_type_ids().to_vec();
        let type_vocab = self.config.type_vocab_size();
        if let Some(&bad) = types.iter().find(|&&t| t as usize >= type_vocab) {
            return Err(mismatch(format!(
                "token type {bad} is beyond the model's {type_vocab} token types"
            )));
        }
        let types = if types.iter().all(|&t| t == 0) {
            Vec::new()
        } else {
            types
        };
        Ok(Tokens { ids, types })
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
        if let Some(empty) = inputs.iter().position(|t| t.ids.is_empty()) {
            return Err(Error::Invalid(format!("input {empty} has no tokens")));
        }
        let dim = self.hidden_size();
        let pool = Pool { pooling, skip };
        let mut data = vec![0.0f32; inputs.len() * dim];
        // Longest first, so batches hold inputs of similar length.
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].ids.len()));
        let mut done = 0;
        for batch in batches(&order, inputs, self.batch_tokens) {
            let seqs: Vec<&Tokens> = batch.iter().map(|&i| &inputs[i]).collect();
            let pooled = self.model.forward(&seqs, pool)?;
            for (vector, &i) in pooled.chunks_exact(dim).zip(batch) {
                data[i * dim..(i + 1) * dim].copy_from_slice(vector);
            }
            done += batch.len();
            progress(done);
        }
        Ok(data)
    }
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Inference(format!("tokenizing: {e}"))
}

fn load_tokenizer(path: &Path, config: &ModelConfig, max_length: usize) -> Result<Tokenizer> {
    let mut tokenizer =
        Tokenizer::from_file(path).map_err(|e| Error::format(path, e.to_string()))?;
    let size = tokenizer.get_vocab_size(true);
    if size > config.vocab_size() {
        return Err(Error::TokenizerMismatch {
            path: path.to_path_buf(),
            message: format!(
                "it has {size} tokens but the model's vocab_size is {} (is this the tokenizer of another model?)",
                config.vocab_size()
            ),
        });
    }
    tokenizer
        .with_truncation(Some(TruncationParams {
            max_length,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        }))
        .map_err(|e| Error::format(path, e.to_string()))?;
    tokenizer.with_padding(None);
    Ok(tokenizer)
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
        let pool = |pooling, skip| pool_states(&states, &lengths, 2, Pool { pooling, skip });
        assert_eq!(pool(Pooling::Mean, 0), [3.0, 4.0, 10.0, 20.0]);
        assert_eq!(pool(Pooling::Cls, 0), [1.0, 2.0, 10.0, 20.0]);
        assert_eq!(pool(Pooling::LastToken, 0), [5.0, 6.0, 10.0, 20.0]);
        // A prompt of one token left out of mean and CLS pooling.
        assert_eq!(pool(Pooling::Mean, 1), [4.0, 5.0, 0.0, 0.0]);
        assert_eq!(pool(Pooling::Cls, 1), [3.0, 4.0, 10.0, 20.0]);
        assert_eq!(pool(Pooling::LastToken, 1), [5.0, 6.0, 10.0, 20.0]);
    }
}
