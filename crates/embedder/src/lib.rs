//! Bi-encoders that turn SkillRet skills and queries into vectors, as
//! sentence-transformers does: BERT-style encoders (MiniLM, e5, bge,
//! arctic-embed) and Qwen3 decoders (Qwen3-Embedding and its SkillRet
//! fine-tunes).
//!
//! A model directory holds `config.json` (the architecture is detected from
//! it), `tokenizer.json` and `model.safetensors` (or shards with
//! `model.safetensors.index.json`); where the sentence-transformers files are
//! present (`modules.json`, the Pooling module's `config.json`,
//! `sentence_bert_config.json`, `config_sentence_transformers.json`, in the
//! layout of sentence-transformers before 6.x or of 6.x) they set pooling,
//! normalisation, maximum length and prompts, and [`EmbedderOptions`] can
//! override them. Queries get the model's `query` prompt and documents its
//! `document` prompt, as sentence-transformers' `encode_query` and
//! `encode_document` do.
//!
//! On the CPU the native engine runs ([`Backend::Native`]: unpadded batches,
//! `gemm` products with folded bias, tiled attention with an online softmax
//! so memory grows linearly with the length, vectorised element-wise
//! kernels; f32 or bf16 linear layers). Each family also has a candle graph
//! ([`Backend::Candle`]), the one used on a GPU when the crate is built with
//! the `cuda` feature.
//!
//! Every embedder implements the [`Embedder`] interface (width, a
//! description, groups of texts in, vectors out as each group completes):
//! [`LocalEmbedder`] runs the model in this process, and
//! [`remote::RemoteEmbedder`] sends the same inputs to a served copy of it
//! (vLLM, text-embeddings-inference, a hosted OpenAI-style API), fanned out
//! over replicas.
//!
//! ```no_run
//! use embedder::{EmbedderOptions, Kind, LocalEmbedder};
//! let model = LocalEmbedder::from_dir("models/all-MiniLM-L6-v2".as_ref(), EmbedderOptions::default())?;
//! let vectors = model.embed(&["pdf | Read PDFs. | # PDF"], Kind::Document)?;
//! assert_eq!(vectors.dim(), 384);
//! # Ok::<(), embedder::Error>(())
//! ```
#![warn(missing_docs)]

pub mod chat;
pub mod config;
pub mod convert;
pub mod encoder;
mod error;
pub mod files;
pub mod hub;
pub mod models;
pub mod remote;
mod tokenize;

use std::path::Path;

pub use config::{Pooling, SentenceTransformersConfig};
pub use encoder::{Encoder, EncoderOptions};
pub use engine::kernels::normalize;
pub use engine::{Isa, Precision, isa};
pub use error::{Error, Result};
pub use files::{ModelFiles, TensorFile, Weights};
pub use models::{
    Attention, BertConfig, Gemma3Config, MistralConfig, ModelConfig, Qwen3Config, SUPPORTED_TYPES,
    Tokens,
};
pub use tokenize::{Cut, Tokenization};

/// Which engine runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Backend {
    /// This crate's CPU engine (the fast path on CPU).
    #[default]
    Native,
    /// The family's candle graph on the CPU.
    Candle,
    /// The family's candle graph on the first CUDA GPU if the crate was
    /// built with the `cuda` feature and a GPU is present (bf16 where
    /// [`Precision::Bf16`] is asked for); otherwise the native CPU engine,
    /// and [`LocalEmbedder::device`] says so.
    Cuda,
}

/// Whether the flash kernel's parity has been shown on a GPU by
/// `scripts/bench_gpu.py` (README, "GPU"): only then is it the default.
/// Shown on an NVIDIA H200 (sm_90) on 2026-12-04: bf16 worst cosine to
/// sentence-transformers bf16 0.99971–0.99981 (Qwen3-0.6B shape, 512 to
/// 32,768 tokens), 0.99975 (gemma-3-270m, sliding windows), 0.99996
/// (MiniLM), 0.99962 (bge-large), 0.99976 (Qwen3-8B shape).
const FLASH_CHECKED: bool = true;

/// The attention kernel of the candle engine (`--backend candle` or `cuda`).
///
/// `None` where an option takes one: [`AttentionKernel::default_for`]'s choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AttentionKernel {
    /// Scores materialised (queries in chunks that bound their memory),
    /// masked on the device, softmax, values: any dtype on any device; the
    /// f32 parity path.
    Exact,
    /// candle-flash-attn's fused varlen kernels: bf16 on CUDA, in a build
    /// with the `flash-attn` feature (`scripts/build-cuda.sh`).
    Flash,
}

impl AttentionKernel {
    /// Every kernel's name, as `FromStr` takes them.
    pub const NAMES: [&'static str; 2] = ["exact", "flash"];

    /// The kernel that runs where none is asked for: flash for bf16 on CUDA
    /// in a build that has it, once `scripts/bench_gpu.py` has shown its
    /// parity on a GPU (`FLASH_CHECKED`); exact everywhere else.
    pub fn default_for(backend: Backend, precision: Precision) -> Self {
        if FLASH_CHECKED
            && cfg!(feature = "flash-attn")
            && backend == Backend::Cuda
            && precision == Precision::Bf16
        {
            Self::Flash
        } else {
            Self::Exact
        }
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Exact => "exact",
            Self::Flash => "flash",
        }
    }
}

impl std::fmt::Display for AttentionKernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AttentionKernel {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "exact" => Ok(Self::Exact),
            "flash" => Ok(Self::Flash),
            other => Err(format!(
                "{other:?} is not an attention kernel (one of: {})",
                Self::NAMES.join(", ")
            )),
        }
    }
}

/// What a text is: queries and documents get different prompts.
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
    /// Override the pooling of the model directory (default: its own, else
    /// mean for encoders and the last token for decoders).
    pub pooling: Option<Pooling>,
    /// Override normalisation (default: the directory's Normalize module, else on).
    pub normalize: Option<bool>,
    /// Prepended to every query, literally (e.g. `query: ` for e5); overrides
    /// the model's `query` prompt.
    pub query_prompt: Option<String>,
    /// Prepended to every document, literally (e.g. `passage: `); overrides
    /// the model's `document` prompt.
    pub document_prompt: Option<String>,
    /// The query prompt by its name in the model's
    /// `config_sentence_transformers.json`.
    pub query_prompt_name: Option<String>,
    /// The document prompt by its name in the model's prompts.
    pub document_prompt_name: Option<String>,
    /// Tokens per batch: inputs are sorted by length and cut into batches of
    /// about this many tokens (the native engine runs two batches of half
    /// as many side by side).
    pub batch_tokens: usize,
    /// The engine.
    pub backend: Backend,
    /// Arithmetic of the native engine's linear layers.
    pub precision: Precision,
    /// The task whose LoRA adapter is merged, for models with per-task
    /// adapters (jina-embeddings-v5: `adapters/<task>/`); `None`:
    /// `retrieval` where the model has adapters.
    pub task: Option<String>,
    /// How NV-Embed's decoder attends (`None`: as the official evaluation
    /// runs it); other models refuse it.
    pub attention: Option<Attention>,
    /// The candle engine's attention kernel (`None`:
    /// [`AttentionKernel::default_for`] the backend and precision).
    pub attention_kernel: Option<AttentionKernel>,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        Self {
            max_length: None,
            pooling: None,
            normalize: None,
            query_prompt: None,
            document_prompt: None,
            query_prompt_name: None,
            document_prompt_name: None,
            batch_tokens: 8192,
            backend: Backend::Native,
            precision: Precision::F32,
            task: None,
            attention: None,
            attention_kernel: None,
        }
    }
}

impl EmbedderOptions {
    /// Sets the maximum length in tokens.
    pub fn with_max_length(mut self, tokens: usize) -> Self {
        self.max_length = Some(tokens);
        self
    }
    /// Sets the query and document prompts (literal text, e.g. e5's
    /// `query: ` / `passage: `), overriding the model's.
    pub fn with_prompts(mut self, query: &str, document: &str) -> Self {
        self.query_prompt = Some(query.to_owned());
        self.document_prompt = Some(document.to_owned());
        self
    }
    /// Sets the query prompt (literal text).
    pub fn with_query_prompt(mut self, prompt: &str) -> Self {
        self.query_prompt = Some(prompt.to_owned());
        self
    }
    /// Sets the document prompt (literal text).
    pub fn with_document_prompt(mut self, prompt: &str) -> Self {
        self.document_prompt = Some(prompt.to_owned());
        self
    }
    /// Sets the query prompt by its name in the model's prompts.
    pub fn with_query_prompt_name(mut self, name: &str) -> Self {
        self.query_prompt_name = Some(name.to_owned());
        self
    }
    /// Sets the document prompt by its name in the model's prompts.
    pub fn with_document_prompt_name(mut self, name: &str) -> Self {
        self.document_prompt_name = Some(name.to_owned());
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
    /// Selects the LoRA adapter of `task`.
    pub fn with_task(mut self, task: &str) -> Self {
        self.task = Some(task.to_owned());
        self
    }
    /// Sets how NV-Embed's decoder attends.
    pub fn with_attention(mut self, attention: Attention) -> Self {
        self.attention = Some(attention);
        self
    }
    /// Sets the candle engine's attention kernel.
    pub fn with_attention_kernel(mut self, kernel: AttentionKernel) -> Self {
        self.attention_kernel = Some(kernel);
        self
    }

    /// The prompts these options give the model in `dir`, without loading
    /// it: a literal prompt, else a named one, else the model's `query` /
    /// `document` prompt (as sentence-transformers' `encode_query` /
    /// `encode_document`), else none.
    pub fn prompts(&self, dir: &Path) -> Result<Prompts> {
        self.resolve(dir, &SentenceTransformersConfig::read(dir)?)
    }

    fn resolve(&self, dir: &Path, st: &SentenceTransformersConfig) -> Result<Prompts> {
        let one = |literal: &Option<String>, name: &Option<String>, own: &str| -> Result<String> {
            match (literal, name) {
                (Some(_), Some(name)) => Err(Error::Invalid(format!(
                    "both a {own} prompt and the {own} prompt name {name:?} are set; give one"
                ))),
                (Some(text), None) => Ok(text.clone()),
                (None, Some(name)) => Ok(st.prompt(dir, name)?.to_owned()),
                (None, None) => Ok(st.prompts.get(own).cloned().unwrap_or_default()),
            }
        };
        Ok(Prompts {
            query: one(&self.query_prompt, &self.query_prompt_name, "query")?,
            document: one(
                &self.document_prompt,
                &self.document_prompt_name,
                "document",
            )?,
        })
    }
}

/// The text prepended to queries and to documents.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Prompts {
    /// Before each query.
    pub query: String,
    /// Before each document.
    pub document: String,
}

impl Prompts {
    /// The prompt of `kind`.
    pub fn get(&self, kind: Kind) -> &str {
        match kind {
            Kind::Query => &self.query,
            Kind::Document => &self.document,
        }
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
    /// The vectors row after row, as one vector (no copy).
    pub fn into_vec(self) -> Vec<f32> {
        self.data
    }
    /// The vectors as rows.
    pub fn rows(&self) -> impl Iterator<Item = &[f32]> {
        self.data.chunks_exact(self.dim.max(1))
    }
}

/// What one call of [`Embedder::embed_groups`] did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EmbedStats {
    /// Tokens embedded (the server's count where it gives one).
    pub tokens: usize,
    /// One line each worth reporting (per endpoint: requests, tokens,
    /// failures).
    pub notes: Vec<String>,
}

/// The interface of every embedder: a model run in this process
/// ([`LocalEmbedder`]) or one behind a server ([`remote::RemoteEmbedder`]).
/// Vectors are the model's own: pooled, normalised only where the embedder
/// was asked to (the pipeline caches them raw and normalises after).
pub trait Embedder: Send + Sync + std::fmt::Debug {
    /// Width of the vectors.
    fn dim(&self) -> usize;

    /// What runs where, in words (one line).
    fn describe(&self) -> String;

    /// The truncation length in tokens, where known.
    fn max_length(&self) -> Option<usize>;

    /// Embeds groups of texts of `kind`. `done(g, vectors)` gets group `g`'s
    /// vectors (in its input order) as soon as all of them are there, on
    /// this thread, groups in any order; an error from it stops the work
    /// (groups already handed over stay handed over). `progress(texts,
    /// note)` counts texts embedded so far, with a note on the work (a
    /// served model's rate per endpoint).
    fn embed_groups(
        &self,
        groups: &[&[String]],
        kind: Kind,
        done: &mut dyn FnMut(usize, Embeddings) -> Result<()>,
        progress: &(dyn Fn(usize, &str) + Sync),
    ) -> Result<EmbedStats>;
}

/// A bi-encoder loaded in this process (native engine, or candle on CPU or CUDA).
pub struct LocalEmbedder {
    encoder: Encoder,
    pooling: Pooling,
    normalize: bool,
    quantize: Option<config::Quantize>,
    prompts: Prompts,
    /// Prompt tokens left out of pooling, per kind (query, document):
    /// non-zero only where the Pooling module says `include_prompt = false`
    /// (or NV-Embed masks its instruction).
    skip: [usize; 2],
    /// The Pooling module's `include_prompt`.
    include_prompt: bool,
    /// Appended to every text (NV-Embed's end-of-sequence token).
    suffix: String,
    /// NV-Embed's official groups: their size and the sliding window.
    official_groups: Option<(usize, Option<usize>)>,
    /// Texts rendered through the tokenizer's chat template
    /// (sentence-transformers 6.x's `message` modality).
    chat: Option<chat::ChatInputs>,
    options: EmbedderOptions,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("dir", &self.encoder.dir())
            .field("pooling", &self.pooling)
            .field("normalize", &self.normalize)
            .field("prompts", &self.prompts)
            .field("max_length", &self.encoder.max_length())
            .field("device", &self.encoder.device())
            .finish_non_exhaustive()
    }
}

impl LocalEmbedder {
    /// Loads a model from a local directory.
    pub fn from_dir(dir: &Path, options: EmbedderOptions) -> Result<Self> {
        let st = SentenceTransformersConfig::read(dir)?;
        if st.logit_score.is_some() {
            return Err(Error::format(
                &dir.join("modules.json"),
                "it ends in a LogitScore module: this is a cross-encoder (a reranker), not an embedder",
            ));
        }
        let prompts = options.resolve(dir, &st)?;
        let encoder_options = EncoderOptions {
            max_length: options.max_length,
            batch_tokens: options.batch_tokens,
            backend: options.backend,
            precision: options.precision,
            task: options.task.clone(),
            attention_kernel: options.attention_kernel,
        };
        // sentence-transformers' limit: max_seq_length (before 6.x), else the
        // tokenizer's model_max_length (capped at the positions by the encoder).
        let default_length = match st.max_seq_length {
            Some(n) => Some(n),
            None => config::tokenizer_max_length(dir)?,
        };
        let encoder = Encoder::from_dir(dir, &encoder_options, default_length)?;
        let pooling = options
            .pooling
            .or(st.pooling)
            .unwrap_or_else(|| encoder.config().default_pooling());
        let chat = chat::ChatInputs::load(
            dir,
            &st,
            encoder.config().family(),
            encoder.tokenization(),
            &prompts,
        )?;
        let mut skip = [0; 2];
        for (slot, prompt) in skip.iter_mut().zip([&prompts.query, &prompts.document]) {
            *slot = prompt_skip(&encoder, st.include_prompt, chat.is_some(), prompt)?;
        }
        let mut normalize = options.normalize.or(st.normalize).unwrap_or(true);
        let mut suffix = String::new();
        let mut official_groups = None;
        match encoder.config() {
            ModelConfig::NvEmbed(c) => {
                if pooling != Pooling::Mean {
                    return Err(Error::Invalid(format!(
                        "{}: pooling {pooling:?}: NV-Embed pools by latent attention and a mean",
                        dir.display()
                    )));
                }
                normalize = options.normalize.unwrap_or(c.latent.output_normalize);
                if c.add_eos {
                    suffix = config::tokenizer_special(dir, "eos_token")?;
                }
                // NVEmbedModel.encode masks `len(tokenizer.tokenize(instruction))`
                // leading positions: the instruction's tokens without the
                // specials, counted from the BOS.
                skip = [0; 2];
                if c.mask_instruction {
                    for (slot, prompt) in skip.iter_mut().zip([&prompts.query, &prompts.document]) {
                        *slot = encoder.token_ids(prompt)?.len();
                    }
                }
                if options.attention.unwrap_or_default() == Attention::Official {
                    official_groups =
                        Some((models::nvembed::OFFICIAL_GROUP, c.mistral.sliding_window));
                }
            }
            other => {
                if let Some(a) = options.attention {
                    return Err(Error::Invalid(format!(
                        "{}: attention {:?}: only NV-Embed (nvembed) models take an attention choice, this is a {} model",
                        dir.display(),
                        a.name(),
                        other.family()
                    )));
                }
            }
        }
        Ok(Self {
            encoder,
            pooling,
            normalize,
            include_prompt: st.include_prompt,
            quantize: st.quantize,
            prompts,
            skip,
            suffix,
            official_groups,
            chat,
            options,
        })
    }

    /// The chat template texts are rendered through, and the format of its
    /// messages (`None`: texts are tokenised as they are).
    pub fn chat_template(&self) -> Option<(&Path, config::MessageFormat)> {
        self.chat
            .as_ref()
            .map(|c| (c.template().path(), c.format()))
    }

    /// The options the model was loaded with.
    pub fn options(&self) -> &EmbedderOptions {
        &self.options
    }

    /// Where the model runs, in words (says so when a GPU was asked for but
    /// the CPU is used).
    pub fn device(&self) -> &str {
        self.encoder.device()
    }

    /// The architecture.
    pub fn config(&self) -> &ModelConfig {
        self.encoder.config()
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

    /// How the model attends, for models that offer a choice (NV-Embed).
    pub fn attention(&self) -> Option<Attention> {
        match self.config() {
            ModelConfig::NvEmbed(_) => Some(if self.official_groups.is_some() {
                Attention::Official
            } else {
                Attention::Bidirectional
            }),
            _ => None,
        }
    }

    /// What every text gets appended (NV-Embed's end-of-sequence token).
    pub fn suffix(&self) -> &str {
        &self.suffix
    }

    /// The prompt added before texts of `kind`.
    pub fn prompt(&self, kind: Kind) -> &str {
        self.prompts.get(kind)
    }

    /// Token ids of each text (prompt added, truncated), as the model sees them.
    pub fn tokenize<S: AsRef<str> + Sync>(&self, texts: &[S], kind: Kind) -> Result<Vec<Vec<u32>>> {
        self.tokenize_with_prompt(texts, self.prompt(kind), kind)
    }

    /// [`LocalEmbedder::tokenize`] with `prompt` in place of the kind's own
    /// (sentence-transformers' `encode(prompt=...)`).
    pub fn tokenize_with_prompt<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        prompt: &str,
        kind: Kind,
    ) -> Result<Vec<Vec<u32>>> {
        if let Some(chat) = &self.chat {
            return chat.tokenize(self.encoder.tokenization(), texts, prompt, kind);
        }
        let suffix = &self.suffix;
        let inputs: Vec<String> = texts
            .iter()
            .map(|text| format!("{prompt}{}{suffix}", text.as_ref()))
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
        self.embed_tokens(&ids, kind, progress)
    }

    /// Embeds texts of `kind` with `prompt` in place of the kind's own
    /// (sentence-transformers' `encode(prompt=...)`): the same vectors as
    /// [`LocalEmbedder::embed_with_progress`] where it is the kind's prompt.
    pub fn embed_with_prompt<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        prompt: &str,
        kind: Kind,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Embeddings> {
        let ids = self.tokenize_with_prompt(texts, prompt, kind)?;
        let skip = if prompt == self.prompt(kind) {
            self.skip[usize::from(kind == Kind::Document)]
        } else {
            match self.encoder.config() {
                ModelConfig::NvEmbed(c) if c.mask_instruction => {
                    self.encoder.token_ids(prompt)?.len()
                }
                ModelConfig::NvEmbed(_) => 0,
                _ => prompt_skip(
                    &self.encoder,
                    self.include_prompt,
                    self.chat.is_some(),
                    prompt,
                )?,
            }
        };
        self.embed_ids(&ids, skip, progress)
    }

    /// The quantizer applied after pooling (and normalising), if any.
    pub fn quantize(&self) -> Option<config::Quantize> {
        self.quantize
    }

    /// Embeds inputs of `kind` already tokenised by [`LocalEmbedder::tokenize`].
    pub fn embed_tokens(
        &self,
        ids: &[Vec<u32>],
        kind: Kind,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Embeddings> {
        self.embed_ids(
            ids,
            self.skip[usize::from(kind == Kind::Document)],
            progress,
        )
    }

    /// Embeds token ids, pooling without their first `skip` tokens.
    fn embed_ids(
        &self,
        ids: &[Vec<u32>],
        skip: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Embeddings> {
        let inputs: Vec<Tokens> = ids
            .iter()
            .map(|ids| Tokens {
                ids: ids.clone(),
                types: Vec::new(),
            })
            .collect();
        let pool = models::Pool::new(self.pooling, skip);
        let mut data = match self.official_groups {
            None => self.encoder.encode(&inputs, pool, progress)?,
            Some((group, window)) => {
                self.encode_official(&inputs, pool, group, window, progress)?
            }
        };
        let dim = self.dim();
        for row in data.chunks_exact_mut(dim) {
            if self.normalize {
                normalize(row);
            }
            if let Some(q) = self.quantize {
                q.apply(row);
            }
        }
        Ok(Embeddings { data, dim })
    }
}

/// The leading tokens of a text that pooling leaves out for its `prompt`:
/// none unless the Pooling module says `include_prompt = false` (and the
/// message modality, which records no prompt length, is off); then, as
/// sentence-transformers measures a prompt, its tokens alone less a special
/// token the tokenizer appends.
fn prompt_skip(encoder: &Encoder, include_prompt: bool, chat: bool, prompt: &str) -> Result<usize> {
    if include_prompt || chat || prompt.is_empty() {
        return Ok(0);
    }
    let n = encoder.tokenize(&[prompt])?[0].ids.len();
    Ok(n - usize::from(encoder.appends_special() && n > 0))
}

impl LocalEmbedder {
    /// NV-Embed as the official evaluation runs it under transformers 5:
    /// groups of `group` inputs in order; a group of inputs of one length,
    /// shorter than the window, runs bidirectionally (the model's own
    /// attention), any other causally in the window. Each input's vector
    /// depends on its group only, so the two kinds are encoded apart.
    fn encode_official(
        &self,
        inputs: &[Tokens],
        pool: models::Pool,
        group: usize,
        window: Option<usize>,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>> {
        let mut causal = Vec::new();
        let mut bidirectional = Vec::new();
        for (g, members) in inputs.chunks(group).enumerate() {
            let len = members[0].ids.len();
            let unpadded = members.iter().all(|t| t.ids.len() == len);
            let target = if unpadded && window.is_none_or(|w| len < w) {
                &mut bidirectional
            } else {
                &mut causal
            };
            target.extend(g * group..g * group + members.len());
        }
        let dim = self.dim();
        let mut data = vec![0.0f32; inputs.len() * dim];
        let mut done = 0;
        for (indices, mask) in [
            (bidirectional, models::Mask::Configured),
            (causal, models::Mask::Causal(window)),
        ] {
            if indices.is_empty() {
                continue;
            }
            let part: Vec<Tokens> = indices.iter().map(|&i| inputs[i].clone()).collect();
            let pooled = self
                .encoder
                .encode(&part, models::Pool { mask, ..pool }, &|n| {
                    progress(done + n);
                })?;
            for (vector, &i) in pooled.chunks_exact(dim).zip(&indices) {
                data[i * dim..(i + 1) * dim].copy_from_slice(vector);
            }
            done += indices.len();
        }
        Ok(data)
    }
}

impl Embedder for LocalEmbedder {
    fn dim(&self) -> usize {
        self.encoder.hidden_size()
    }

    fn describe(&self) -> String {
        let mut attention = match self.attention() {
            Some(a) => format!(", {} attention", a.name()),
            None => String::new(),
        };
        if let Some((_, format)) = self.chat_template() {
            attention.push_str(&format!(", chat template ({} messages)", format.name()));
        }
        format!(
            "{} ({}, max {} tokens, {:?} pooling{attention}) on {}",
            self.encoder.dir().display(),
            self.config().family(),
            self.encoder.max_length(),
            self.pooling,
            self.device()
        )
    }

    fn max_length(&self) -> Option<usize> {
        Some(self.encoder.max_length())
    }

    fn embed_groups(
        &self,
        groups: &[&[String]],
        kind: Kind,
        done: &mut dyn FnMut(usize, Embeddings) -> Result<()>,
        progress: &(dyn Fn(usize, &str) + Sync),
    ) -> Result<EmbedStats> {
        let mut stats = EmbedStats::default();
        let mut base = 0;
        for (g, texts) in groups.iter().enumerate() {
            let ids = self.tokenize(texts, kind)?;
            stats.tokens += ids.iter().map(Vec::len).sum::<usize>();
            let vectors = self.embed_tokens(&ids, kind, &|n| progress(base + n, ""))?;
            base += texts.len();
            done(g, vectors)?;
        }
        Ok(stats)
    }
}
