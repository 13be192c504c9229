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
pub mod encoder;
mod error;
pub mod hub;
mod kernels;
mod model;

use std::path::Path;

pub use config::{BertConfig, Pooling, SentenceTransformersConfig};
pub use encoder::{Encoder, EncoderOptions, Tokens};
pub use error::{Error, Result};
pub use model::TensorFile;

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

/// A loaded bi-encoder.
pub struct Embedder {
    encoder: Encoder,
    pooling: Pooling,
    normalize: bool,
    options: EmbedderOptions,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("dir", &self.encoder.dir())
            .field("pooling", &self.pooling)
            .field("normalize", &self.normalize)
            .field("max_length", &self.encoder.max_length())
            .field("device", &self.encoder.device())
            .finish_non_exhaustive()
    }
}

impl Embedder {
    /// Loads a model from a local directory.
    pub fn from_dir(dir: &Path, options: EmbedderOptions) -> Result<Self> {
        let st = SentenceTransformersConfig::read(dir)?;
        let encoder_options = EncoderOptions {
            max_length: options.max_length,
            batch_tokens: options.batch_tokens,
            backend: options.backend,
            precision: options.precision,
        };
        let encoder = Encoder::from_dir(dir, &encoder_options, st.max_seq_length)?;
        Ok(Self {
            encoder,
            pooling: options.pooling.or(st.pooling).unwrap_or(Pooling::Mean),
            normalize: options.normalize.or(st.normalize).unwrap_or(true),
            options,
        })
    }

    /// Where the model runs, in words (says so when a GPU was asked for but
    /// the CPU is used).
    pub fn device(&self) -> &str {
        self.encoder.device()
    }

    /// Width of the vectors.
    pub fn dim(&self) -> usize {
        self.encoder.hidden_size()
    }

    /// The truncation length in tokens.
    pub fn max_length(&self) -> usize {
        self.encoder.max_length()
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
        let inputs: Vec<String> = texts
            .iter()
            .map(|text| format!("{prefix}{}", text.as_ref()))
            .collect();
        Ok(self
            .encoder
            .tokenize(&inputs)?
            .into_iter()
            .map(|tokens| tokens.ids)
            .collect())
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
        let inputs: Vec<Tokens> = ids
            .iter()
            .map(|ids| Tokens {
                ids: ids.clone(),
                types: Vec::new(),
            })
            .collect();
        let mut data = self
            .encoder
            .encode_pooled(&inputs, self.pooling, progress)?;
        let dim = self.dim();
        if self.normalize {
            for row in data.chunks_exact_mut(dim) {
                normalize(row);
            }
        }
        Ok(Embeddings { data, dim })
    }
}

/// L2 normalisation as torch's `F.normalize` (norm clamped at 1e-12), the
/// one sentence-transformers' `Normalize` module applies.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    for x in v {
        *x /= norm;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalisation() {
        let mut v = [3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut zero = [0.0, 0.0];
        normalize(&mut zero);
        assert_eq!(zero, [0.0, 0.0]);
    }
}
