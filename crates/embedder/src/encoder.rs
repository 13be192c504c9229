//! A loaded transformer encoder: tokenizer, architecture and engine, shared
//! by the bi-encoder ([`crate::Embedder`] pools its token states) and the
//! cross-encoder (the `reranker` crate classifies its first token).
//!
//! Inputs are sorted by length and cut into batches by a token budget; the
//! results come back in input order whatever the batching.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tokenizers::{
    EncodeInput, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use crate::config::{BertConfig, Pooling};
use crate::error::{Error, Result};
use crate::{Backend, Precision, bf16, candle_backend, model};

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

/// One tokenised input: token ids, and token types (empty: all type 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tokens {
    /// Token ids, specials included.
    pub ids: Vec<u32>,
    /// Segment of each token (0 first text, 1 second), or empty.
    pub types: Vec<u32>,
}

pub(crate) enum Engine {
    Native(model::NativeBert),
    Candle(candle_backend::CandleBert),
}

/// The files of a model directory.
pub(crate) struct ModelFiles {
    pub(crate) config: PathBuf,
    pub(crate) tokenizer: PathBuf,
    pub(crate) weights: PathBuf,
}

impl ModelFiles {
    pub(crate) fn in_dir(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Invalid(format!(
                "{}: not a model directory (expected config.json, tokenizer.json and model.safetensors; run scripts/fetch-models.sh for the models this project uses)",
                dir.display()
            )));
        }
        let files = Self {
            config: dir.join("config.json"),
            tokenizer: dir.join("tokenizer.json"),
            weights: dir.join("model.safetensors"),
        };
        for (path, what) in [
            (&files.config, "the model's config.json"),
            (&files.tokenizer, "the model's tokenizer.json"),
            (&files.weights, "the model's weights"),
        ] {
            if !path.is_file() {
                return Err(Error::MissingFile {
                    path: path.clone(),
                    what,
                });
            }
        }
        Ok(files)
    }
}

/// A transformer encoder ready to run.
pub struct Encoder {
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation, for the texts of a pair.
    untruncated: Tokenizer,
    engine: Engine,
    config: BertConfig,
    max_length: usize,
    batch_tokens: usize,
    device: String,
    dir: PathBuf,
    weights: PathBuf,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("dir", &self.dir)
            .field("max_length", &self.max_length)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

impl Encoder {
    /// Loads the encoder of a model directory. `default_max_length` applies
    /// when the options set none (e.g. sentence-transformers' max_seq_length).
    pub fn from_dir(
        dir: &Path,
        options: &EncoderOptions,
        default_max_length: Option<usize>,
    ) -> Result<Self> {
        let files = ModelFiles::in_dir(dir)?;
        let config = BertConfig::read(&files.config)?;
        let model_max = config.max_input_length();
        let max_length = match options.max_length.or(default_max_length) {
            Some(n) if n > model_max => {
                return Err(Error::Invalid(format!(
                    "max length {n} exceeds the model's {model_max} positions"
                )));
            }
            Some(0) => return Err(Error::Invalid("max length must be positive".to_owned())),
            Some(n) => n,
            None => model_max,
        };
        if options.batch_tokens < max_length {
            return Err(Error::Invalid(format!(
                "a batch of {} tokens cannot hold one input of {max_length} tokens",
                options.batch_tokens
            )));
        }
        let tokenizer = load_tokenizer(&files.tokenizer, &config, max_length)?;
        let mut untruncated = tokenizer.clone();
        untruncated
            .with_truncation(None)
            .map_err(|e| Error::format(&files.tokenizer, e.to_string()))?;
        let (bf16, precision_note) = match options.precision {
            Precision::F32 => (false, "f32"),
            Precision::Bf16 if bf16::supported() => (true, "bf16"),
            Precision::Bf16 => (false, "f32: this CPU has no AVX-512 BF16"),
        };
        let native = || -> Result<(Engine, String)> {
            Ok((
                Engine::Native(model::NativeBert::load(&files.weights, &config, bf16)?),
                format!(
                    "cpu (native, {precision_note}, {} threads)",
                    rayon::current_num_threads()
                ),
            ))
        };
        let (engine, device) = match options.backend {
            Backend::Native => native()?,
            Backend::Candle => (
                Engine::Candle(candle_backend::CandleBert::load(&files, &config, false)?),
                "cpu (candle)".to_owned(),
            ),
            Backend::Cuda => match candle_backend::CandleBert::load(&files, &config, true) {
                Ok(model) => (Engine::Candle(model), "cuda:0 (candle)".to_owned()),
                Err(Error::Invalid(why)) => {
                    let (engine, device) = native()?;
                    (engine, format!("{device}: no GPU used, {why}"))
                }
                Err(e) => return Err(e),
            },
        };
        Ok(Self {
            tokenizer,
            untruncated,
            engine,
            config,
            max_length,
            batch_tokens: options.batch_tokens,
            device,
            dir: dir.to_path_buf(),
            weights: files.weights,
        })
    }

    /// The architecture.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The model directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The weights file (`model.safetensors`), for heads read by other crates.
    pub fn weights_path(&self) -> &Path {
        &self.weights
    }

    /// Where the model runs, in words.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Width of the token states.
    pub fn hidden_size(&self) -> usize {
        self.config.hidden_size
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
        let failed = |e: tokenizers::Error| Error::Inference(format!("tokenizing: {e}"));
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

    fn encode(&self, input: EncodeInput<'_>) -> Result<Tokens> {
        let encoding = self
            .tokenizer
            .encode(input, true)
            .map_err(|e| Error::Inference(format!("tokenizing: {e}")))?;
        self.checked(&encoding)
    }

    /// The ids and types of an encoding, checked against the model's tables.
    fn checked(&self, encoding: &tokenizers::Encoding) -> Result<Tokens> {
        let ids = encoding.get_ids().to_vec();
        let mismatch = |message: String| Error::TokenizerMismatch {
            path: self.dir.join("tokenizer.json"),
            message,
        };
        if let Some(&bad) = ids
            .iter()
            .find(|&&id| id as usize >= self.config.vocab_size)
        {
            return Err(mismatch(format!(
                "token id {bad} is outside the model's vocabulary of {}",
                self.config.vocab_size
            )));
        }
        let types = encoding.get_type_ids().to_vec();
        if let Some(&bad) = types
            .iter()
            .find(|&&t| t as usize >= self.config.type_vocab_size)
        {
            return Err(mismatch(format!(
                "token type {bad} is beyond the model's {} token types",
                self.config.type_vocab_size
            )));
        }
        let types = if types.iter().all(|&t| t == 0) {
            Vec::new()
        } else {
            types
        };
        Ok(Tokens { ids, types })
    }

    /// One pooled (not normalised) vector per input, in input order; calls
    /// `progress` with the number of inputs done after each batch.
    pub fn encode_pooled(
        &self,
        inputs: &[Tokens],
        pooling: Pooling,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>> {
        let dim = self.hidden_size();
        let mut data = vec![0.0f32; inputs.len() * dim];
        // Longest first, so batches hold inputs of similar length.
        let mut order: Vec<usize> = (0..inputs.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(inputs[i].ids.len()));
        let mut done = 0;
        for batch in batches(&order, inputs, self.batch_tokens) {
            let seqs: Vec<&Tokens> = batch.iter().map(|&i| &inputs[i]).collect();
            let pooled = match &self.engine {
                Engine::Native(model) => {
                    let states = model.forward(&seqs);
                    pool(&states, &seqs, dim, pooling)
                }
                Engine::Candle(model) => model.forward_pooled(&seqs, pooling)?,
            };
            for (vector, &i) in pooled.chunks_exact(dim).zip(batch) {
                data[i * dim..(i + 1) * dim].copy_from_slice(vector);
            }
            done += batch.len();
            progress(done);
        }
        Ok(data)
    }
}

fn load_tokenizer(path: &Path, config: &BertConfig, max_length: usize) -> Result<Tokenizer> {
    let mut tokenizer =
        Tokenizer::from_file(path).map_err(|e| Error::format(path, e.to_string()))?;
    let size = tokenizer.get_vocab_size(true);
    if size > config.vocab_size {
        return Err(Error::TokenizerMismatch {
            path: path.to_path_buf(),
            message: format!(
                "it has {size} tokens but the model's vocab_size is {} (is this the tokenizer of another model?)",
                config.vocab_size
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

/// Pools token states (sequences laid end to end) into one vector each.
fn pool(states: &[f32], seqs: &[&Tokens], dim: usize, pooling: Pooling) -> Vec<f32> {
    let mut out = vec![0.0f32; seqs.len() * dim];
    let mut row = 0;
    for (s, seq) in seqs.iter().enumerate() {
        let len = seq.ids.len();
        let target = &mut out[s * dim..(s + 1) * dim];
        match pooling {
            Pooling::Cls => target.copy_from_slice(&states[row * dim..(row + 1) * dim]),
            Pooling::Mean => {
                for t in 0..len {
                    for (o, v) in target
                        .iter_mut()
                        .zip(&states[(row + t) * dim..(row + t + 1) * dim])
                    {
                        *o += v;
                    }
                }
                let n = len.max(1) as f32;
                for o in target.iter_mut() {
                    *o /= n;
                }
            }
        }
        row += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let states = [1.0, 2.0, 3.0, 4.0, 10.0, 20.0];
        let (a, b) = (tokens(2), tokens(1));
        let seqs = [&a, &b];
        assert_eq!(
            pool(&states, &seqs, 2, Pooling::Mean),
            [2.0, 3.0, 10.0, 20.0]
        );
        assert_eq!(
            pool(&states, &seqs, 2, Pooling::Cls),
            [1.0, 2.0, 10.0, 20.0]
        );
    }
}
