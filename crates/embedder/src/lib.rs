//! BERT-style bi-encoders that turn SkillRet skills and queries into vectors,
//! as sentence-transformers does.
//!
//! A model directory holds `config.json`, `tokenizer.json` and
//! `model.safetensors`; where the sentence-transformers files are present
//! (`modules.json`, the Pooling module's `config.json`,
//! `sentence_bert_config.json`) they set pooling, normalisation and maximum
//! length, and [`EmbedderOptions`] can override them. BERT and
//! XLM-R-vocabulary BERTs (multilingual-e5) load alike.
//!
//! On the CPU the native engine runs ([`Backend::Native`]: unpadded batches,
//! `gemm` products with folded bias, fused attention, vectorised softmax and
//! GELU). candle's `BertModel` is the other backend ([`Backend::Candle`]),
//! and the one used on a GPU when the crate is built with the `cuda` feature.
//!
//! ```no_run
//! use embedder::{Embedder, EmbedderOptions, Kind};
//! let model = Embedder::from_dir("models/all-MiniLM-L6-v2".as_ref(), EmbedderOptions::default())?;
//! let vectors = model.embed(&["pdf | Read PDFs. | # PDF"], Kind::Document)?;
//! assert_eq!(vectors.dim(), 384);
//! # Ok::<(), embedder::Error>(())
//! ```
#![warn(missing_docs)]

mod bf16;
mod candle_backend;
pub mod config;
pub mod convert;
mod error;
pub mod hub;
mod kernels;
mod model;

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

pub use config::{BertConfig, Pooling, SentenceTransformersConfig};
pub use error::{Error, Result};

/// Which engine runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Backend {
    /// This crate's CPU engine (the fast path on CPU).
    #[default]
    Native,
    /// candle's `BertModel` on the CPU.
    Candle,
    /// candle's `BertModel` on the first CUDA GPU if the crate was built with
    /// the `cuda` feature and a GPU is present; otherwise the native CPU
    /// engine, and [`Embedder::device`] says so.
    Cuda,
}

/// Arithmetic of the native engine's linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Precision {
    /// f32 throughout (matches sentence-transformers to cosine ≈ 1 − 1e-7).
    #[default]
    F32,
    /// Linear layers in bfloat16 with f32 accumulation, on CPUs with
    /// AVX-512 BF16 (elsewhere f32 is used, and [`Embedder::device`] says so).
    Bf16,
}

/// What a text is: queries and documents get different prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A user request.
    Query,
    /// A skill document.
    Document,
}

/// Options of an [`Embedder`]; `Default` follows the model directory.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EmbedderOptions {
    /// Truncate inputs to this many tokens (at most the model's own limit).
    pub max_length: Option<usize>,
    /// Override the pooling of the model directory (default: its own, else mean).
    pub pooling: Option<Pooling>,
    /// Override normalisation (default: the directory's Normalize module, else on).
    pub normalize: Option<bool>,
    /// Prepended to every query (e.g. `query: ` for e5).
    pub query_prefix: String,
    /// Prepended to every document (e.g. `passage: ` for e5).
    pub document_prefix: String,
    /// Tokens per batch: inputs are sorted by length and cut into batches of
    /// about this many tokens.
    pub batch_tokens: usize,
    /// The engine.
    pub backend: Backend,
    /// Arithmetic of the native engine's linear layers.
    pub precision: Precision,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        Self {
            max_length: None,
            pooling: None,
            normalize: None,
            query_prefix: String::new(),
            document_prefix: String::new(),
            batch_tokens: 8192,
            backend: Backend::Native,
            precision: Precision::F32,
        }
    }
}

impl EmbedderOptions {
    /// Sets the maximum length in tokens.
    pub fn with_max_length(mut self, tokens: usize) -> Self {
        self.max_length = Some(tokens);
        self
    }
    /// Sets the query and document prefixes.
    pub fn with_prefixes(mut self, query: &str, document: &str) -> Self {
        self.query_prefix = query.to_owned();
        self.document_prefix = document.to_owned();
        self
    }
    /// Sets the pooling.
    pub fn with_pooling(mut self, pooling: Pooling) -> Self {
        self.pooling = Some(pooling);
        self
    }
    /// Sets normalisation.
    pub fn with_normalize(mut self, normalize: bool) -> Self {
        self.normalize = Some(normalize);
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
}

/// Vectors in input order, one row of `dim` floats each.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    data: Vec<f32>,
    dim: usize,
}

impl Embeddings {
    /// Width of a vector.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.data.len().checked_div(self.dim).unwrap_or(0)
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
    /// Vector `i`.
    pub fn row(&self, i: usize) -> &[f32] {
        &self.data[i * self.dim..(i + 1) * self.dim]
    }
    /// All vectors, row after row.
    pub fn as_slice(&self) -> &[f32] {
        &self.data
    }
    /// The vectors as rows.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.dim.max(1))
    }
}

enum Engine {
    Native(model::NativeBert),
    Candle(candle_backend::CandleBert),
}

/// A loaded bi-encoder.
pub struct Embedder {
    tokenizer: Tokenizer,
    engine: Engine,
    config: BertConfig,
    pooling: Pooling,
    normalize: bool,
    max_length: usize,
    options: EmbedderOptions,
    device: String,
    dir: PathBuf,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("dir", &self.dir)
            .field("pooling", &self.pooling)
            .field("normalize", &self.normalize)
            .field("max_length", &self.max_length)
            .field("device", &self.device)
            .finish_non_exhaustive()
    }
}

/// The files of a model directory.
pub(crate) struct ModelFiles {
    pub(crate) config: PathBuf,
    pub(crate) tokenizer: PathBuf,
    pub(crate) weights: PathBuf,
}

impl ModelFiles {
    fn in_dir(dir: &Path) -> Result<Self> {
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

impl Embedder {
    /// Loads a model from a local directory.
    pub fn from_dir(dir: &Path, options: EmbedderOptions) -> Result<Self> {
        let files = ModelFiles::in_dir(dir)?;
        let config = BertConfig::read(&files.config)?;
        let st = SentenceTransformersConfig::read(dir)?;
        let model_max = config.max_position_embeddings;
        let max_length = match options.max_length.or(st.max_seq_length) {
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
            engine,
            pooling: options.pooling.or(st.pooling).unwrap_or(Pooling::Mean),
            normalize: options.normalize.or(st.normalize).unwrap_or(true),
            max_length,
            config,
            options,
            device,
            dir: dir.to_path_buf(),
        })
    }

    /// Where the model runs, in words (says so when a GPU was asked for but
    /// the CPU is used).
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Width of the vectors.
    pub fn dim(&self) -> usize {
        self.config.hidden_size
    }

    /// The truncation length in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// The pooling in use.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Whether vectors are L2-normalised.
    pub fn normalize(&self) -> bool {
        self.normalize
    }

    /// The prefix added to texts of `kind`.
    pub fn prefix(&self, kind: Kind) -> &str {
        match kind {
            Kind::Query => &self.options.query_prefix,
            Kind::Document => &self.options.document_prefix,
        }
    }

    /// Token ids of each text (prefix added, truncated), as the model sees them.
    pub fn tokenize<S: AsRef<str> + Sync>(&self, texts: &[S], kind: Kind) -> Result<Vec<Vec<u32>>> {
        let prefix = self.prefix(kind);
        texts
            .par_iter()
            .map(|text| {
                let input = format!("{prefix}{}", text.as_ref());
                let encoding = self
                    .tokenizer
                    .encode(input.as_str(), true)
                    .map_err(|e| Error::Inference(format!("tokenizing: {e}")))?;
                let ids = encoding.get_ids().to_vec();
                if let Some(&bad) = ids
                    .iter()
                    .find(|&&id| id as usize >= self.config.vocab_size)
                {
                    return Err(Error::TokenizerMismatch {
                        path: self.dir.join("tokenizer.json"),
                        message: format!(
                            "token id {bad} is outside the model's vocabulary of {}",
                            self.config.vocab_size
                        ),
                    });
                }
                Ok(ids)
            })
            .collect()
    }

    /// Embeds texts; vectors come back in input order.
    pub fn embed<S: AsRef<str> + Sync>(&self, texts: &[S], kind: Kind) -> Result<Embeddings> {
        self.embed_with_progress(texts, kind, &|_| {})
    }

    /// Embeds texts, calling `progress` with the number of texts done after
    /// each batch.
    pub fn embed_with_progress<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        kind: Kind,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Embeddings> {
        let ids = self.tokenize(texts, kind)?;
        self.embed_tokens(&ids, progress)
    }

    /// Embeds already tokenised inputs (from [`Embedder::tokenize`]).
    pub fn embed_tokens(
        &self,
        ids: &[Vec<u32>],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Embeddings> {
        let dim = self.dim();
        let mut data = vec![0.0f32; ids.len() * dim];
        // Longest first, so batches hold inputs of similar length.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(ids[i].len()));
        let mut done = 0;
        for batch in batches(&order, ids, self.options.batch_tokens) {
            let seqs: Vec<Vec<u32>> = batch.iter().map(|&i| ids[i].clone()).collect();
            let pooled = match &self.engine {
                Engine::Native(model) => {
                    let states = model.forward(&seqs);
                    pool(&states, &seqs, dim, self.pooling)
                }
                Engine::Candle(model) => model.forward_pooled(&seqs, self.pooling)?,
            };
            for (vector, &i) in pooled.chunks_exact(dim).zip(batch) {
                let out = &mut data[i * dim..(i + 1) * dim];
                out.copy_from_slice(vector);
                if self.normalize {
                    normalize(out);
                }
            }
            done += batch.len();
            progress(done);
        }
        Ok(Embeddings { data, dim })
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
fn batches<'a>(order: &'a [usize], ids: &'a [Vec<u32>], budget: usize) -> Vec<&'a [usize]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut tokens = 0;
    for (pos, &i) in order.iter().enumerate() {
        let len = ids[i].len().max(1);
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
fn pool(states: &[f32], seqs: &[Vec<u32>], dim: usize, pooling: Pooling) -> Vec<f32> {
    let mut out = vec![0.0f32; seqs.len() * dim];
    let mut row = 0;
    for (s, seq) in seqs.iter().enumerate() {
        let target = &mut out[s * dim..(s + 1) * dim];
        match pooling {
            Pooling::Cls => target.copy_from_slice(&states[row * dim..(row + 1) * dim]),
            Pooling::Mean => {
                for t in 0..seq.len() {
                    for (o, v) in target
                        .iter_mut()
                        .zip(&states[(row + t) * dim..(row + t + 1) * dim])
                    {
                        *o += v;
                    }
                }
                let n = seq.len().max(1) as f32;
                for o in target.iter_mut() {
                    *o /= n;
                }
            }
        }
        row += seq.len();
    }
    out
}

/// L2 normalisation as torch's `F.normalize` (norm clamped at 1e-12).
fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    for x in v {
        *x /= norm;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_respect_the_budget_and_cover_everything() {
        let ids: Vec<Vec<u32>> = [5, 5, 4, 3, 3, 1].iter().map(|&n| vec![0; n]).collect();
        let order: Vec<usize> = (0..ids.len()).collect();
        let b = batches(&order, &ids, 10);
        assert_eq!(b, vec![&[0, 1][..], &[2, 3, 4][..], &[5][..]]);
        // An input longer than the budget still gets a batch of its own.
        let b = batches(&order, &ids, 3);
        assert_eq!(b.iter().map(|b| b.len()).sum::<usize>(), 6);
    }

    #[test]
    fn pooling_and_normalisation() {
        let states = [1.0, 2.0, 3.0, 4.0, 10.0, 20.0];
        let seqs = vec![vec![0, 0], vec![0]];
        assert_eq!(
            pool(&states, &seqs, 2, Pooling::Mean),
            [2.0, 3.0, 10.0, 20.0]
        );
        assert_eq!(
            pool(&states, &seqs, 2, Pooling::Cls),
            [1.0, 2.0, 10.0, 20.0]
        );
        let mut v = [3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
    }
}
