//! Run configurations: a TOML file parsed once into raw options (unknown keys
//! are errors naming the file, line and key), then resolved into checked
//! settings before any model loads.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use embedder::remote::InputMode;
use embedder::{AttentionKernel, Backend, Pooling, Precision};
use index::{HnswParams, MilvusParams};
use reranker::{RemoteApi, RerankerKind};
use serde::{Deserialize, Serialize};

/// The file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    data: RawData,
    #[serde(default)]
    embedder: Option<RawEmbedder>,
    retriever: RawRetriever,
    #[serde(default)]
    reranker: Option<RawReranker>,
    #[serde(default)]
    eval: RawEval,
    #[serde(default)]
    output: RawOutput,
    #[serde(default)]
    sweep: RawSweep,
    #[serde(default)]
    analysis: RawAnalysis,
}

/// `[analysis]`: what a run measures beside the metrics.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnalysis {
    /// Query focus: each sentence of every request left out and alone (focus.json, focus.tsv).
    #[serde(default)]
    query_focus: bool,
    /// With query focus, the reranker too: its pool (fixed from the full request) reranked with
    /// each sentence left out (a pass per sentence).
    #[serde(default)]
    query_focus_reranker: bool,
}

/// What `pipeline sweep` reads and `pipeline run` ignores.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweep {
    /// Configurations (names beside this file, without `.toml`) whose
    /// first stages this configuration's reranker reranks in a sweep.
    #[serde(default)]
    first_stages: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    /// A local SkillRet directory.
    dir: Option<PathBuf>,
    /// ThakiCloud/SKILLRET on the Hub: `v1.0`, `v1.1` or a 40-hex commit.
    hub_revision: Option<String>,
    #[serde(default = "default_split")]
    split: String,
    /// A corpus subset: a file of skill ids, one a line (the official
    /// `skill_ids_filter`).
    skill_ids_filter: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmbedder {
    /// native | candle | cuda (this process) | openai (a served model).
    backend: Option<EmbedderBackend>,
    /// The model directory or Hub id (a served model: optional, its local
    /// directory for the tokenizer, prompts and length).
    model: Option<String>,
    revision: Option<String>,
    /// Literal text before each query (`query_prefix` is the older name).
    #[serde(alias = "query_prefix")]
    query_prompt: Option<String>,
    /// Literal text before each document (`document_prefix` is the older name).
    #[serde(alias = "document_prefix")]
    document_prompt: Option<String>,
    /// A prompt of the model's `config_sentence_transformers.json`, by name.
    query_prompt_name: Option<String>,
    document_prompt_name: Option<String>,
    /// The LoRA adapter of a model with per-task adapters (jina-embeddings-v5).
    task: Option<String>,
    /// How NV-Embed's decoder attends.
    attention: Option<embedder::Attention>,
    pooling: Option<Pooling>,
    normalize: Option<bool>,
    max_length: Option<usize>,
    batch_tokens: Option<usize>,
    precision: Option<Precision>,
    /// exact | flash: the candle engine's attention kernel.
    attention_kernel: Option<AttentionKernel>,
    // A served model's keys (see RawServed).
    served_model: Option<toml::Spanned<String>>,
    endpoints: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    api_key_env: Option<toml::Spanned<String>>,
    max_in_flight: Option<usize>,
    batch_size: Option<usize>,
    timeout_s: Option<f64>,
    retries: Option<usize>,
    allow_insecure_http: Option<bool>,
    /// Matryoshka width (served).
    dimensions: Option<usize>,
    /// tokens | text (served).
    input: Option<embedder::remote::InputMode>,
    /// Characters each text is cut to (served, without `model`).
    max_chars: Option<usize>,
}

/// The keys of a served model, in [embedder] or [reranker].
#[derive(Debug, Default)]
struct RawServed {
    served_model: Option<toml::Spanned<String>>,
    endpoints: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    api_key_env: Option<toml::Spanned<String>>,
    max_in_flight: Option<usize>,
    batch_size: Option<usize>,
    timeout_s: Option<f64>,
    retries: Option<usize>,
    allow_insecure_http: Option<bool>,
}

impl RawServed {
    fn any(&self) -> Option<&'static str> {
        [
            (self.served_model.is_some(), "served_model"),
            (self.endpoints.is_some(), "endpoints"),
            (self.api_key_env.is_some(), "api_key_env"),
            (self.max_in_flight.is_some(), "max_in_flight"),
            (self.batch_size.is_some(), "batch_size"),
            (self.timeout_s.is_some(), "timeout_s"),
            (self.retries.is_some(), "retries"),
            (self.allow_insecure_http.is_some(), "allow_insecure_http"),
        ]
        .into_iter()
        .find_map(|(set, key)| set.then_some(key))
    }
}

/// Where an [embedder] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmbedderBackend {
    /// This project's CPU engine (the default).
    Native,
    /// The family's candle graph on the CPU.
    Candle,
    /// candle on a CUDA GPU.
    Cuda,
    /// A served model behind the OpenAI embeddings API.
    Openai,
}

/// Where a [reranker] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RerankerBackend {
    /// This project's CPU engine (the default).
    Native,
    /// The family's candle graph on the CPU.
    Candle,
    /// candle on a CUDA GPU.
    Cuda,
    /// A served reranker behind a `/rerank` endpoint.
    RerankApi,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetriever {
    kind: RetrieverKind,
    #[serde(default)]
    index: IndexKind,
    #[serde(default = "default_top_n")]
    top_n: usize,
    hnsw: Option<HnswParams>,
    milvus: Option<MilvusParams>,
    /// Reciprocal-rank fusion constant (hybrid).
    rrf_k: Option<f64>,
    /// How deep each list goes into the fusion (hybrid).
    fusion_depth: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReranker {
    /// native | candle | cuda (this process) | rerank-api (a served reranker).
    backend: Option<RerankerBackend>,
    /// The model directory or Hub id (served: optional, its local directory
    /// for the tokenizer, length and kind).
    model: Option<String>,
    revision: Option<String>,
    #[serde(default = "default_top_n")]
    top_n: usize,
    max_length: Option<usize>,
    batch_tokens: Option<usize>,
    precision: Option<Precision>,
    /// exact | flash: the candle engine's attention kernel.
    attention_kernel: Option<AttentionKernel>,
    #[serde(default)]
    sigmoid: bool,
    /// The instruction of a yes/no (decoder) reranker.
    instruction: Option<String>,
    /// How the reranker's score makes the final order.
    #[serde(default)]
    combine: Combine,
    /// The reranker's share with combine = "interpolate".
    weight: Option<f64>,
    /// Oracle reranking: the gold skills join each query's pool.
    #[serde(default)]
    oracle: bool,
    // A served reranker's keys (see RawServed).
    served_model: Option<toml::Spanned<String>>,
    endpoints: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
    api_key_env: Option<toml::Spanned<String>>,
    max_in_flight: Option<usize>,
    batch_size: Option<usize>,
    timeout_s: Option<f64>,
    retries: Option<usize>,
    allow_insecure_http: Option<bool>,
    /// rerank | tei (served).
    api: Option<toml::Spanned<String>>,
    /// cross-encoder | yes-no (served; default from the local model).
    kind: Option<RerankerKind>,
}

/// How the second stage orders the top N.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// By the reranker's score alone (the official protocol).
    #[default]
    Replace,
    /// By `weight · reranker + (1 − weight) · first stage`, each min-max
    /// normalised over the query's top N.
    Interpolate,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEval {
    #[serde(default = "default_k")]
    k: Vec<usize>,
}

impl Default for RawEval {
    fn default() -> Self {
        Self { k: default_k() }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    dir: Option<PathBuf>,
    cache: Option<PathBuf>,
}

fn default_split() -> String {
    "test".to_owned()
}
fn default_batch_tokens() -> usize {
    8192
}
/// The deepest ranking a run makes (a million skills; SkillRet's library holds thousands).
pub(crate) const MAX_DEPTH: usize = 1_000_000;

fn default_top_n() -> usize {
    20
}
fn default_k() -> Vec<usize> {
    vec![5, 10, 15]
}

/// First-stage kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RetrieverKind {
    /// Embeddings and an index.
    Dense,
    /// BM25 as bm25s computes it.
    Bm25,
    /// Reciprocal-rank fusion of dense and BM25.
    Hybrid,
}

/// Vector index kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexKind {
    /// Exhaustive inner product (the official protocol's FAISS Flat).
    #[default]
    Exact,
    /// HNSW graph (hnsw_rs), with its recall against exact search reported.
    Hnsw,
    /// A Milvus collection (`[retriever.milvus]`), with its recall against
    /// exact search reported.
    Milvus,
}

/// Where the data comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum DataSource {
    /// A local directory in the official layout.
    Dir(PathBuf),
    /// ThakiCloud/SKILLRET at a pinned revision.
    Hub(String),
}

impl DataSource {
    /// The `[data]` section's source: `--data` first, else exactly one of
    /// `dir` and `hub_revision`.
    pub(crate) fn resolve(
        file: &impl std::fmt::Display,
        over: Option<&Path>,
        dir: Option<PathBuf>,
        hub_revision: Option<String>,
    ) -> Result<Self> {
        Ok(match (over, dir, hub_revision) {
            (Some(dir), _, _) => Self::Dir(dir.to_path_buf()),
            (None, Some(dir), None) => Self::Dir(dir),
            (None, None, Some(revision)) => Self::Hub(revision),
            (None, Some(_), Some(_)) => {
                bail!("{file}: [data] has both `dir` and `hub_revision`; keep one")
            }
            (None, None, None) => bail!(
                "{file}: [data] needs `dir` (a local SkillRet directory) or `hub_revision` (v1.0, v1.1 or a commit), or pass --data"
            ),
        })
    }
}

/// A model: a local directory or a Hub id at a commit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelRef {
    /// Directory or Hub id.
    pub model: String,
    /// The Hub commit, for Hub ids.
    pub revision: Option<String>,
}

/// A place in a configuration file, for messages (`file:line`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Place {
    /// The file.
    pub file: PathBuf,
    /// Its line (1-based).
    pub line: usize,
}

impl std::fmt::Display for Place {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// A served model's connection settings (never its key: only the name of
/// the variable that holds it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServedSettings {
    /// The name the server knows the model by (optional for TEI).
    pub served_model: Option<String>,
    /// Base URLs of the replicas, checked to be URLs.
    pub endpoints: Vec<String>,
    /// The variable that holds the API key (checked to be set).
    pub api_key_env: Option<String>,
    /// Requests in flight per endpoint.
    pub max_in_flight: usize,
    /// Inputs (embedder) or documents (reranker) per request.
    pub batch_size: usize,
    /// Deadline of one request, in seconds.
    pub timeout_s: f64,
    /// Failed attempts in a row after which an endpoint is down.
    pub retries: usize,
    /// Allow a key over plain http to another host.
    pub allow_insecure_http: bool,
    /// The section's header.
    pub section: Place,
    /// `served_model` (else the section).
    pub served_model_at: Place,
    /// `endpoints` (else the section).
    pub endpoints_at: Place,
}

/// Bi-encoder settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbedderSettings {
    /// The model (a served model: its optional local directory).
    pub model: Option<ModelRef>,
    /// Literal prompt of queries (default: the model's `query` prompt).
    pub query_prompt: Option<String>,
    /// Literal prompt of documents (default: the model's `document` prompt).
    pub document_prompt: Option<String>,
    /// The query prompt by name.
    pub query_prompt_name: Option<String>,
    /// The document prompt by name.
    pub document_prompt_name: Option<String>,
    /// The LoRA adapter's task (models with `adapters/<task>/`).
    pub task: Option<String>,
    /// How NV-Embed's decoder attends (default: as the official evaluation
    /// runs it).
    pub attention: Option<embedder::Attention>,
    /// Pooling override.
    pub pooling: Option<Pooling>,
    /// L2 normalisation override (default: the model directory's Normalize
    /// module, else on).
    pub normalize: Option<bool>,
    /// Truncation override.
    pub max_length: Option<usize>,
    /// Tokens per batch.
    pub batch_tokens: usize,
    /// Linear-layer arithmetic.
    pub precision: Precision,
    /// Engine (local models).
    pub backend: Backend,
    /// The candle engine's attention kernel (default: the backend's and
    /// precision's).
    pub attention_kernel: Option<AttentionKernel>,
    /// The served model (backend = "openai").
    pub served: Option<ServedSettings>,
    /// Matryoshka width asked of a served model.
    pub dimensions: Option<usize>,
    /// What goes over the wire to a served model.
    pub input: Option<InputMode>,
    /// Characters a served model's texts are cut to (without `model`).
    pub max_chars: Option<usize>,
}

impl EmbedderSettings {
    /// The model's name in words: the served name, or the model.
    pub fn label(&self) -> String {
        match (&self.served, &self.model) {
            (Some(s), _) => format!("{} (served)", s.served_model.as_deref().unwrap_or("model")),
            (None, Some(m)) => m.model.clone(),
            (None, None) => "?".to_owned(),
        }
    }
}

/// First-stage settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrieverSettings {
    /// Dense, BM25 or hybrid.
    pub kind: RetrieverKind,
    /// Exact or HNSW (dense and hybrid).
    pub index: IndexKind,
    /// HNSW parameters (when `index` is HNSW).
    pub hnsw: HnswParams,
    /// The Milvus server and collection (when `index` is Milvus).
    pub milvus: Option<MilvusParams>,
    /// Candidates per query.
    pub top_n: usize,
    /// Reciprocal-rank fusion constant.
    pub rrf_k: f64,
    /// Depth of each fused list.
    pub fusion_depth: usize,
}

/// Reranker settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RerankerSettings {
    /// The checkpoint (served: its optional local directory).
    pub model: Option<ModelRef>,
    /// How many first-stage candidates to rescore.
    pub top_n: usize,
    /// Truncation override.
    pub max_length: Option<usize>,
    /// Tokens per batch.
    pub batch_tokens: usize,
    /// Linear-layer arithmetic.
    pub precision: Precision,
    /// Engine (local models).
    pub backend: Backend,
    /// The candle engine's attention kernel (default: the backend's and
    /// precision's).
    pub attention_kernel: Option<AttentionKernel>,
    /// Sigmoid of one-label logits.
    pub sigmoid: bool,
    /// Instruction of a yes/no reranker (default: the official SkillRet one).
    pub instruction: Option<String>,
    /// Replace the first stage's order, or interpolate with it.
    pub combine: Combine,
    /// The reranker's share when interpolating.
    pub weight: f64,
    /// Oracle reranking (`eval_rerank(oracle=True)`): every gold skill
    /// joins its query's pool.
    pub oracle: bool,
    /// The served reranker (backend = "rerank-api").
    pub served: Option<ServedSettings>,
    /// Its request shape.
    pub api: Option<RemoteApi>,
    /// Cross-encoder or yes/no (served).
    pub kind: Option<RerankerKind>,
}

impl RerankerSettings {
    /// The reranker's name in words.
    pub fn label(&self) -> String {
        match (&self.served, &self.model) {
            (Some(s), _) => format!(
                "{} (served)",
                s.served_model.as_deref().unwrap_or("reranker")
            ),
            (None, Some(m)) => m.model.clone(),
            (None, None) => "?".to_owned(),
        }
    }
}

/// A checked run configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Settings {
    /// The configuration file.
    pub path: PathBuf,
    /// Data source.
    pub data: DataSource,
    /// Split.
    pub split: String,
    /// The corpus subset (`[data] skill_ids_filter`), if any.
    pub skill_ids_filter: Option<PathBuf>,
    /// Bi-encoder (dense and hybrid).
    pub embedder: Option<EmbedderSettings>,
    /// First stage.
    pub retriever: RetrieverSettings,
    /// Second stage.
    pub reranker: Option<RerankerSettings>,
    /// Cut-offs.
    pub k: Vec<usize>,
    /// Output directory.
    pub out: PathBuf,
    /// Cache directory (embeddings, indexes).
    pub cache: PathBuf,
    /// Evaluate only the first n queries (by id).
    pub limit_queries: Option<usize>,
    /// A first-stage run file to rerank instead of retrieving
    /// (`--first-stage`).
    pub first_stage: Option<PathBuf>,
    /// `[sweep] first_stages`: configurations whose first stages this
    /// reranker reranks in a sweep, as files beside this one.
    pub sweep_first_stages: Vec<PathBuf>,
    /// `[analysis] query_focus` (or `--query-focus`): the focus pass over each request's
    /// sentences.
    pub query_focus: bool,
    /// `[analysis] query_focus_reranker`: the focus pass over the reranker's pool too.
    pub query_focus_reranker: bool,
}

/// Command-line overrides.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--data`.
    pub data: Option<PathBuf>,
    /// `--out`.
    pub out: Option<PathBuf>,
    /// `--limit-queries`.
    pub limit_queries: Option<usize>,
    /// `--precision`: the embedder's and the reranker's.
    pub precision: Option<Precision>,
    /// `--attention-kernel`: the embedder's and the reranker's.
    pub attention_kernel: Option<AttentionKernel>,
    /// `--rerank-depth`: the reranker's top_n (the retriever's raised to it
    /// where lower).
    pub rerank_depth: Option<usize>,
    /// `--top-n`: the retriever's top_n.
    pub top_n: Option<usize>,
    /// `--first-stage`: a run to rerank instead of retrieving.
    pub first_stage: Option<PathBuf>,
    /// `--query-focus`: sets `[analysis] query_focus`.
    pub query_focus: bool,
}

impl Settings {
    /// Reads, parses and resolves a configuration file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Self> {
        let (raw, text) = read_toml_text(path)?;
        let source = Source { path, text: &text };
        resolve(raw, &source, overrides)
    }
}

/// Reads and parses a TOML configuration; errors name the file and line.
pub(crate) fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    Ok(read_toml_text(path)?.0)
}

/// [`read_toml`], and the file's text. An error names the file, the line,
/// and the section and key written there: `c.toml:7: [retriever] tpo_n: …`.
pub(crate) fn read_toml_text<T: serde::de::DeserializeOwned>(path: &Path) -> Result<(T, String)> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    match toml::from_str(&text) {
        Ok(value) => Ok((value, text)),
        Err(e) => {
            let source = Source { path, text: &text };
            let place = e
                .span()
                .map(|span| {
                    let line = source.line(span.start);
                    let field = source.field_at(line);
                    format!(
                        ":{line}{}",
                        field.map(|f| format!(": {f}")).unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            bail!("{}{place}: {}", path.display(), e.message())
        }
    }
}

/// A configuration file's text, to say where things are in it.
pub(crate) struct Source<'a> {
    pub(crate) path: &'a Path,
    pub(crate) text: &'a str,
}

impl Source<'_> {
    /// The 1-based line of a byte offset.
    pub(crate) fn line(&self, offset: usize) -> usize {
        self.text[..offset.min(self.text.len())]
            .matches('\n')
            .count()
            + 1
    }

    /// `file:line` of a byte offset.
    pub(crate) fn place(&self, offset: usize) -> Place {
        Place {
            file: self.path.to_path_buf(),
            line: self.line(offset),
        }
    }

    /// The line of a section's header (`[embedder]`), else 1.
    pub(crate) fn section(&self, name: &str) -> Place {
        let header = format!("[{name}]");
        let line = self
            .text
            .lines()
            .position(|l| {
                l.trim_start()
                    .strip_prefix(header.as_str())
                    .is_some_and(|rest| {
                        rest.trim().is_empty() || rest.trim_start().starts_with('#')
                    })
            })
            .map_or(1, |i| i + 1);
        Place {
            file: self.path.to_path_buf(),
            line,
        }
    }

    /// `[section] key` of the key written on `line`, if any.
    fn field_at(&self, line: usize) -> Option<String> {
        let lines: Vec<&str> = self.text.lines().collect();
        let here = lines.get(line.checked_sub(1)?)?;
        let key = here.split_once('=').map(|(k, _)| k.trim()).filter(|k| {
            !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_-.\"".contains(c))
        });
        let section = lines[..line]
            .iter()
            .rev()
            .map(|l| l.trim())
            .find(|l| l.starts_with('[') && !l.starts_with("[["))
            .and_then(|l| l.split(']').next())
            .map(|l| format!("{l}]"));
        match (section, key) {
            (Some(s), Some(k)) => Some(format!("{s} {k}")),
            (None, Some(k)) => Some(k.to_owned()),
            (Some(s), None) => Some(s),
            (None, None) => None,
        }
    }
}

fn resolve(raw: Raw, source: &Source<'_>, overrides: &Overrides) -> Result<Settings> {
    let path = source.path;
    let file = path.display();
    let data = DataSource::resolve(
        &file,
        overrides.data.as_deref(),
        raw.data.dir,
        raw.data.hub_revision,
    )?;
    let mut r = raw.retriever;
    if let Some(n) = overrides.top_n {
        if n == 0 {
            bail!("--top-n must be at least 1");
        }
        r.top_n = n;
    }
    let mut raw_reranker = raw.reranker;
    if overrides.first_stage.is_some() && raw_reranker.is_none() {
        bail!("{file}: --first-stage needs a [reranker] section (it reranks the given run)");
    }
    if overrides.first_stage.is_some() && (raw.analysis.query_focus || overrides.query_focus) {
        bail!(
            "{file}: query focus retrieves each request's variants with the run's own first stage; \
             a given --first-stage has none to retrieve them with"
        );
    }
    if raw.analysis.query_focus_reranker
        && (raw_reranker.is_none() || !(raw.analysis.query_focus || overrides.query_focus))
    {
        bail!(
            "{file}: [analysis] query_focus_reranker needs a [reranker] section and query focus \
             ([analysis] query_focus = true or --query-focus)"
        );
    }
    let here = path.parent().unwrap_or_else(|| Path::new("."));
    if !raw.sweep.first_stages.is_empty() && raw_reranker.is_none() {
        bail!("{file}: [sweep] first_stages needs a [reranker] section");
    }
    let sweep_first_stages: Vec<PathBuf> = raw
        .sweep
        .first_stages
        .iter()
        .map(|name| here.join(format!("{name}.toml")))
        .collect();
    for (name, p) in raw.sweep.first_stages.iter().zip(&sweep_first_stages) {
        if !p.is_file() {
            bail!(
                "{file}: [sweep] first_stages names {name:?}, but {} does not exist",
                p.display()
            );
        }
    }
    if let Some(depth) = overrides.rerank_depth {
        if depth == 0 {
            bail!("--rerank-depth must be at least 1");
        }
        let Some(x) = raw_reranker.as_mut() else {
            bail!("{file}: --rerank-depth needs a [reranker] section");
        };
        x.top_n = depth;
        r.top_n = r.top_n.max(depth);
    }
    if r.top_n == 0 {
        bail!("{file}: [retriever] top_n must be at least 1");
    }
    // The report's curves and every stage size their tables by the depth: refuse a depth no
    // library reaches before anything is allocated or written.
    for (key, value) in [("top_n", Some(r.top_n)), ("fusion_depth", r.fusion_depth)] {
        if let Some(n) = value.filter(|&n| n > MAX_DEPTH) {
            bail!(
                "{file}: [retriever] {key} = {n} is more than {MAX_DEPTH}, the deepest ranking this tool makes"
            );
        }
    }
    let hnsw = r.hnsw.unwrap_or_default();
    hnsw.validate()
        .with_context(|| format!("{file}: [retriever.hnsw]"))?;
    if r.hnsw.is_some() && r.index != IndexKind::Hnsw {
        bail!("{file}: [retriever.hnsw] is set but index is not \"hnsw\"");
    }
    match (&r.milvus, r.index) {
        (Some(m), IndexKind::Milvus) => m
            .validate()
            .with_context(|| format!("{file}: [retriever.milvus]"))?,
        (None, IndexKind::Milvus) => bail!(
            "{file}: index = \"milvus\" needs a [retriever.milvus] section with at least uri (e.g. uri = \"http://127.0.0.1:19530\")"
        ),
        (Some(_), _) => bail!("{file}: [retriever.milvus] is set but index is not \"milvus\""),
        (None, _) => {}
    }
    if r.index != IndexKind::Exact && r.kind == RetrieverKind::Bm25 {
        bail!(
            "{file}: index = {:?} needs vectors; a bm25 retriever has none",
            r.index
        );
    }
    if r.kind != RetrieverKind::Hybrid && (r.rrf_k.is_some() || r.fusion_depth.is_some()) {
        bail!("{file}: rrf_k and fusion_depth apply to kind = \"hybrid\" only");
    }
    let rrf_k = r.rrf_k.unwrap_or(index::fusion::DEFAULT_K);
    if rrf_k.is_nan() || rrf_k < 0.0 {
        bail!("{file}: [retriever] rrf_k must be a non-negative number");
    }
    let fusion_depth = r.fusion_depth.unwrap_or(100).max(r.top_n);
    let embedder = match (r.kind, raw.embedder) {
        (RetrieverKind::Bm25, Some(_)) => {
            bail!("{file}: [embedder] is set but the retriever is bm25 (no embeddings)")
        }
        (RetrieverKind::Bm25, None) => None,
        (_, None) => bail!(
            "{file}: a {:?} retriever needs an [embedder] section",
            r.kind
        ),
        (_, Some(e)) => {
            if r.index == IndexKind::Hnsw && e.normalize == Some(false) {
                bail!(
                    "{file}: [embedder] normalize = false cannot go with index = \"hnsw\" (HNSW by inner product needs unit vectors)"
                );
            }
            Some(resolve_embedder(e, source, overrides)?)
        }
    };
    let reranker = match raw_reranker {
        None => None,
        Some(x) => {
            if x.top_n > r.top_n {
                bail!(
                    "{file}: [reranker] top_n = {} is more than the retriever's top_n = {}",
                    x.top_n,
                    r.top_n
                );
            }
            Some(resolve_reranker(x, source, overrides)?)
        }
    };
    let mut k = raw.eval.k;
    if k.is_empty() || k.contains(&0) {
        bail!("{file}: [eval] k must be a non-empty list of positive cut-offs");
    }
    if let Some(n) = k.iter().copied().find(|&n| n > MAX_DEPTH) {
        bail!(
            "{file}: [eval] k = {n} is more than {MAX_DEPTH}, the deepest ranking this tool makes"
        );
    }
    k.sort_unstable();
    k.dedup();
    if overrides.limit_queries == Some(0) {
        bail!("--limit-queries must be at least 1");
    }
    let stem = path
        .file_stem()
        .map_or_else(|| "run".to_owned(), |s| s.to_string_lossy().into_owned());
    Ok(Settings {
        path: path.to_path_buf(),
        data,
        split: raw.data.split,
        skill_ids_filter: raw.data.skill_ids_filter,
        embedder,
        retriever: RetrieverSettings {
            kind: r.kind,
            index: r.index,
            hnsw,
            milvus: r.milvus,
            top_n: r.top_n,
            rrf_k,
            fusion_depth,
        },
        reranker,
        k,
        out: overrides
            .out
            .clone()
            .or(raw.output.dir)
            .unwrap_or_else(|| PathBuf::from("runs").join(stem)),
        cache: raw
            .output
            .cache
            .unwrap_or_else(|| PathBuf::from(".cache/skillret")),
        limit_queries: overrides.limit_queries,
        first_stage: overrides.first_stage.clone(),
        sweep_first_stages,
        query_focus: raw.analysis.query_focus || overrides.query_focus,
        query_focus_reranker: raw.analysis.query_focus_reranker,
    })
}

fn resolve_embedder(
    e: RawEmbedder,
    source: &Source<'_>,
    overrides: &Overrides,
) -> Result<EmbedderSettings> {
    let file = source.path.display();
    let section = source.section("embedder");
    let served = RawServed {
        served_model: e.served_model,
        endpoints: e.endpoints,
        api_key_env: e.api_key_env,
        max_in_flight: e.max_in_flight,
        batch_size: e.batch_size,
        timeout_s: e.timeout_s,
        retries: e.retries,
        allow_insecure_http: e.allow_insecure_http,
    };
    if e.batch_tokens == Some(0) || e.max_length == Some(0) {
        bail!("{section}: [embedder] batch_tokens and max_length must be positive");
    }
    for (kind, literal, name) in [
        ("query", &e.query_prompt, &e.query_prompt_name),
        ("document", &e.document_prompt, &e.document_prompt_name),
    ] {
        if literal.is_some() && name.is_some() {
            bail!("{section}: [embedder] has both {kind}_prompt and {kind}_prompt_name; keep one");
        }
    }
    let backend = e.backend.unwrap_or(EmbedderBackend::Native);
    let model = match e.model {
        Some(m) => Some(model_ref(m, e.revision, &file.to_string(), "embedder")?),
        None if backend == EmbedderBackend::Openai => {
            if e.revision.is_some() {
                bail!("{section}: [embedder] revision applies to a Hub `model`; there is none");
            }
            None
        }
        None => bail!(
            "{section}: [embedder] needs `model` (a model directory, or a Hub id with revision)"
        ),
    };
    let served = if backend == EmbedderBackend::Openai {
        for (set, key, why) in [
            (
                e.pooling.is_some(),
                "pooling",
                "the server pools as the model's files say",
            ),
            (
                e.precision.is_some(),
                "precision",
                "the server's arithmetic is its own (vLLM: --dtype)",
            ),
            (
                e.attention_kernel.is_some(),
                "attention_kernel",
                "the server's attention is its own",
            ),
            (
                e.batch_tokens.is_some(),
                "batch_tokens",
                "use batch_size, the inputs per request",
            ),
        ] {
            if set {
                bail!("{section}: [embedder] {key} does not apply to backend = \"openai\": {why}");
            }
        }
        if e.max_length.is_some() && model.is_none() {
            bail!(
                "{section}: [embedder] max_length needs `model`, the local directory whose tokenizer counts the tokens"
            );
        }
        if e.max_chars.is_some() && model.is_some() {
            bail!(
                "{section}: [embedder] max_chars applies without `model` only: with it, inputs are truncated to its max length in tokens"
            );
        }
        if e.max_chars == Some(0) {
            bail!("{section}: [embedder] max_chars must be positive");
        }
        if e.input == Some(InputMode::Tokens) && model.is_none() {
            bail!(
                "{section}: [embedder] input = \"tokens\" needs `model`, the local directory whose tokenizer makes them"
            );
        }
        let served = resolve_served(served, source, "embedder", true, 64)?;
        Some(served)
    } else {
        if let Some(key) = served.any() {
            bail!(
                "{section}: [embedder] {key} applies to backend = \"openai\" (a served model) only"
            );
        }
        for (set, key) in [
            (e.dimensions.is_some(), "dimensions"),
            (e.input.is_some(), "input"),
        ] {
            if set {
                bail!(
                    "{section}: [embedder] {key} applies to backend = \"openai\" (a served model) only"
                );
            }
        }
        None
    };
    if e.dimensions == Some(0) {
        bail!("{section}: [embedder] dimensions must be positive");
    }
    Ok(EmbedderSettings {
        model,
        query_prompt: e.query_prompt,
        document_prompt: e.document_prompt,
        query_prompt_name: e.query_prompt_name,
        document_prompt_name: e.document_prompt_name,
        task: e.task,
        attention: e.attention,
        pooling: e.pooling,
        normalize: e.normalize,
        max_length: e.max_length,
        batch_tokens: e.batch_tokens.unwrap_or_else(default_batch_tokens),
        precision: match backend {
            EmbedderBackend::Openai => Precision::F32,
            _ => overrides.precision.or(e.precision).unwrap_or_default(),
        },
        backend: match backend {
            EmbedderBackend::Candle => Backend::Candle,
            EmbedderBackend::Cuda => Backend::Cuda,
            EmbedderBackend::Native | EmbedderBackend::Openai => Backend::Native,
        },
        attention_kernel: match backend {
            EmbedderBackend::Openai => None,
            _ => overrides.attention_kernel.or(e.attention_kernel),
        },
        served,
        dimensions: e.dimensions,
        input: e.input,
        max_chars: e.max_chars,
    })
}

fn resolve_reranker(
    x: RawReranker,
    source: &Source<'_>,
    overrides: &Overrides,
) -> Result<RerankerSettings> {
    let file = source.path.display();
    let section = source.section("reranker");
    if x.top_n == 0 || x.batch_tokens == Some(0) || x.max_length == Some(0) {
        bail!("{section}: [reranker] top_n, batch_tokens and max_length must be positive");
    }
    let weight = match (x.combine, x.weight) {
        (Combine::Replace, Some(_)) => {
            bail!("{section}: [reranker] weight applies to combine = \"interpolate\" only")
        }
        (Combine::Replace, None) => 1.0,
        (Combine::Interpolate, w) => {
            let w = w.unwrap_or(0.5);
            if !(0.0..=1.0).contains(&w) {
                bail!("{section}: [reranker] weight must be in [0, 1]");
            }
            w
        }
    };
    let backend = x.backend.unwrap_or(RerankerBackend::Native);
    let remote = backend == RerankerBackend::RerankApi;
    let model = match x.model {
        Some(m) => Some(model_ref(m, x.revision, &file.to_string(), "reranker")?),
        None if remote => None,
        None => bail!(
            "{section}: [reranker] needs `model` (a reranker directory, or a Hub id with revision)"
        ),
    };
    let served = RawServed {
        served_model: x.served_model,
        endpoints: x.endpoints,
        api_key_env: x.api_key_env,
        max_in_flight: x.max_in_flight,
        batch_size: x.batch_size,
        timeout_s: x.timeout_s,
        retries: x.retries,
        allow_insecure_http: x.allow_insecure_http,
    };
    let (served, api) = if remote {
        for (set, key, why) in [
            (
                x.precision.is_some(),
                "precision",
                "the server's arithmetic is its own (vLLM: --dtype)",
            ),
            (
                x.attention_kernel.is_some(),
                "attention_kernel",
                "the server's attention is its own",
            ),
            (
                x.batch_tokens.is_some(),
                "batch_tokens",
                "use batch_size, the documents per request",
            ),
        ] {
            if set {
                bail!(
                    "{section}: [reranker] {key} does not apply to backend = \"rerank-api\": {why}"
                );
            }
        }
        let api = match &x.api {
            None => RemoteApi::Rerank,
            Some(api) => match api.get_ref().as_str() {
                "rerank" => RemoteApi::Rerank,
                "tei" => RemoteApi::Tei,
                other => bail!(
                    "{}: [reranker] api: unknown {other:?}; expected \"rerank\" (vLLM, Jina, Cohere: query + documents) or \"tei\" (text-embeddings-inference: query + texts)",
                    source.place(api.span().start)
                ),
            },
        };
        let needs_name = api == RemoteApi::Rerank;
        if x.max_length.is_some() && model.is_none() {
            bail!(
                "{section}: [reranker] max_length needs `model`, the local directory whose tokenizer counts the tokens"
            );
        }
        (
            Some(resolve_served(served, source, "reranker", needs_name, 32)?),
            Some(api),
        )
    } else {
        if let Some(key) = served.any() {
            bail!(
                "{section}: [reranker] {key} applies to backend = \"rerank-api\" (a served reranker) only"
            );
        }
        for (set, key) in [(x.api.is_some(), "api"), (x.kind.is_some(), "kind")] {
            if set {
                bail!(
                    "{section}: [reranker] {key} applies to backend = \"rerank-api\" (a served reranker) only"
                );
            }
        }
        (None, None)
    };
    Ok(RerankerSettings {
        model,
        combine: x.combine,
        oracle: x.oracle,
        weight,
        top_n: x.top_n,
        max_length: x.max_length,
        batch_tokens: x.batch_tokens.unwrap_or_else(default_batch_tokens),
        precision: if remote {
            Precision::F32
        } else {
            overrides.precision.or(x.precision).unwrap_or_default()
        },
        backend: match backend {
            RerankerBackend::Candle => Backend::Candle,
            RerankerBackend::Cuda => Backend::Cuda,
            RerankerBackend::Native | RerankerBackend::RerankApi => Backend::Native,
        },
        attention_kernel: if remote {
            None
        } else {
            overrides.attention_kernel.or(x.attention_kernel)
        },
        sigmoid: x.sigmoid,
        instruction: x.instruction,
        served,
        api,
        kind: x.kind,
    })
}

/// Checks a served model's keys: endpoints (each a URL), the key's
/// variable (set), positive limits. Errors name the file, line and key.
fn resolve_served(
    raw: RawServed,
    source: &Source<'_>,
    name: &str,
    needs_name: bool,
    default_batch: usize,
) -> Result<ServedSettings> {
    let section = source.section(name);
    let backend = if name == "embedder" {
        "openai"
    } else {
        "rerank-api"
    };
    let served_model_at = raw
        .served_model
        .as_ref()
        .map_or_else(|| section.clone(), |s| source.place(s.span().start));
    let served_model = match raw.served_model {
        Some(s) if s.get_ref().trim().is_empty() => {
            bail!("{served_model_at}: [{name}] served_model is empty")
        }
        Some(s) => Some(s.into_inner()),
        None if needs_name => bail!(
            "{section}: [{name}] backend = \"{backend}\" needs `served_model`, the name the server knows the model by (vLLM: --served-model-name)"
        ),
        None => None,
    };
    let Some(endpoints) = raw.endpoints else {
        bail!(
            "{section}: [{name}] backend = \"{backend}\" needs `endpoints`, a list of the replicas' base URLs (e.g. endpoints = [\"http://127.0.0.1:8011/v1\"])"
        );
    };
    let endpoints_at = source.place(endpoints.span().start);
    let list = endpoints.into_inner();
    if list.is_empty() {
        bail!("{endpoints_at}: [{name}] endpoints is empty: list at least one base URL");
    }
    let mut urls = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let at = source.place(e.span().start);
        let parsed = served::Endpoint::parse(e.get_ref())
            .map_err(|why| anyhow::anyhow!("{at}: [{name}] endpoints[{i}]: {why}"))?;
        if urls.contains(&parsed.to_string()) {
            bail!("{at}: [{name}] endpoints[{i}]: {parsed} is listed twice");
        }
        urls.push(parsed.to_string());
    }
    let api_key_env = match raw.api_key_env {
        None => None,
        Some(var) => {
            let at = source.place(var.span().start);
            let var = var.into_inner();
            if var.is_empty() || var.contains(['=', '\0']) {
                bail!("{at}: [{name}] api_key_env {var:?} is not a variable name");
            }
            match std::env::var_os(&var) {
                Some(v) if !v.is_empty() => {}
                _ => bail!(
                    "{at}: [{name}] api_key_env names ${var}, which is not set (export {var}=… with the key, or remove api_key_env for a server without one)"
                ),
            }
            Some(var)
        }
    };
    let timeout_s = raw.timeout_s.unwrap_or(120.0);
    if !(timeout_s.is_finite() && timeout_s > 0.0) {
        bail!("{section}: [{name}] timeout_s must be a positive number of seconds");
    }
    let (max_in_flight, batch_size) = (
        raw.max_in_flight.unwrap_or(8),
        raw.batch_size.unwrap_or(default_batch),
    );
    if max_in_flight == 0 || batch_size == 0 {
        bail!("{section}: [{name}] max_in_flight and batch_size must be at least 1");
    }
    Ok(ServedSettings {
        served_model,
        endpoints: urls,
        api_key_env,
        max_in_flight,
        batch_size,
        timeout_s,
        retries: raw.retries.unwrap_or(5),
        allow_insecure_http: raw.allow_insecure_http.unwrap_or(false),
        section,
        served_model_at,
        endpoints_at,
    })
}

pub(crate) fn model_ref(
    model: String,
    revision: Option<String>,
    file: &str,
    section: &str,
) -> Result<ModelRef> {
    if model.trim().is_empty() {
        bail!("{file}: [{section}] model is empty");
    }
    if let Some(rev) = &revision
        && (rev.len() != 40 || !rev.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        bail!("{file}: [{section}] revision {rev:?} is not a 40-hex-digit commit");
    }
    Ok(ModelRef { model, revision })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_configuration_parses() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                seen += 1;
                match Settings::load(&path, &Overrides::default()) {
                    Ok(_) => {}
                    // The hosted configuration needs its key's variable set.
                    Err(e) if format!("{e:#}").contains("api_key_env names $OPENAI_API_KEY") => {}
                    Err(e) => panic!("{}: {e:#}", path.display()),
                }
            }
        }
        assert!(seen >= 20, "{seen} configurations");
    }

    /// What a registry configuration sends for query `q` and document `d`:
    /// literal prompts as they are; a prompt named in the model's files as
    /// `{name}`; none given as `{query}` / `{document}` (the model's own
    /// prompt of that name, as encode_query / encode_document apply it).
    fn sent(e: &EmbedderSettings) -> (String, String) {
        let side = |literal: &Option<String>, name: &Option<String>, own: &str, text: &str| match (
            literal, name,
        ) {
            (Some(p), _) => format!("{p}{text}"),
            (None, Some(n)) => format!("{{{n}}}{text}"),
            (None, None) => format!("{{{own}}}{text}"),
        };
        (
            side(&e.query_prompt, &e.query_prompt_name, "query", "q"),
            side(&e.document_prompt, &e.document_prompt_name, "document", "d"),
        )
    }

    #[test]
    fn every_registry_entry_sends_the_official_strings() {
        // skillretbenchmark/SKILLRET skillret/config.py and eval.py: the
        // embedders' prompts and prefixes, the max length where the registry
        // sets one, the LoRA task; rerankers' instruction and length.
        const P: &str = "Instruct: Given a skill search query, retrieve relevant skills that match the query\nQuery: ";
        let p = |q: &str| format!("{P}{q}");
        // (configuration, query sent, document sent, max length, LoRA task)
        type Entry<'a> = (&'a str, String, String, Option<usize>, Option<&'a str>);
        let embedders: Vec<Entry> = vec![
            ("bge-small-en-v1.5", "Represent this sentence for searching relevant passages: q".into(), "{document}d".into(), None, None),
            ("bge-large-en-v1.5", "Represent this sentence for searching relevant passages: q".into(), "{document}d".into(), None, None),
            ("e5-small-v2", "query: q".into(), "passage: d".into(), Some(512), None),
            ("e5-large-v2", "query: q".into(), "passage: d".into(), None, None),
            ("snowflake-arctic-embed-s", "{query}q".into(), "{document}d".into(), None, None),
            ("f2llm-v2-80m", "{query}q".into(), "{document}d".into(), None, None),
            ("harrier-oss-v1-270m", p("q"), "{document}d".into(), None, None),
            ("harrier-oss-v1-0.6b", p("q"), "{document}d".into(), None, None),
            ("pplx-embed-v1-0.6b", "{query}q".into(), "{document}d".into(), None, None),
            ("qwen3-embedding-0.6b", p("q"), "{document}d".into(), Some(32768), None),
            ("qwen3-embedding-8b", p("q"), "{document}d".into(), Some(32768), None),
            ("skillret-embedding-0.6b", p("q"), "{document}d".into(), Some(32768), None),
            ("skillret-embedding-8b", p("q"), "{document}d".into(), Some(32768), None),
            // No trailing space after `Query:`.
            ("skillrouter-embedding-0.6b", "Instruct: Given a task description, retrieve the most relevant skill document that would help an agent complete the task\nQuery:q".into(), "d".into(), Some(32768), None),
            ("jina-embeddings-v5-text-small", "{query}q".into(), "{document}d".into(), None, Some("retrieval")),
            ("nv-embed-v1", "Instruct: Given a question, retrieve passages that answer the question\nQuery: q".into(), "d".into(), Some(32768), None),
            // The document prefix `- `, no prompts.
            ("octen-embedding-8b", "q".into(), "- d".into(), Some(32768), None),
            // A space before the newline.
            ("kalm-embedding-gemma3-12b-2511", "Instruct: Given a query, retrieve documents that answer the query \nQuery: q".into(), "d".into(), Some(32768), None),
        ];
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs");
        for (name, query, document, max_length, task) in &embedders {
            let path = dir.join(format!("{name}.toml"));
            let settings = Settings::load(&path, &Overrides::default())
                .unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
            let e = settings.embedder.as_ref().unwrap();
            assert_eq!(sent(e), (query.clone(), document.clone()), "{name}");
            assert_eq!(e.max_length, *max_length, "{name}");
            assert_eq!(e.task.as_deref(), *task, "{name}");
            assert_eq!(settings.retriever.top_n, 20, "{name}");
            assert_eq!(settings.k, [5, 10, 15], "{name}");
        }
        let instruction = "Given a skill search query, judge whether the skill document is relevant and useful for the query";
        for (name, instructed) in [
            ("jina-reranker-v2-base-multilingual", false),
            ("qwen3-reranker-0.6b", true),
            ("qwen3-reranker-4b", true),
            ("qwen3-reranker-8b", true),
            ("skillret-reranker-0.6b", true),
            ("skillrouter-reranker-0.6b", true),
        ] {
            let path = dir.join(format!("{name}.toml"));
            let settings = Settings::load(&path, &Overrides::default()).unwrap();
            let r = settings.reranker.as_ref().unwrap();
            assert_eq!(r.top_n, 20, "{name}");
            assert_eq!(
                r.instruction.as_deref(),
                instructed.then_some(instruction),
                "{name}"
            );
            assert_eq!(r.max_length, instructed.then_some(32768), "{name}");
            // The first stage the current official README (v1.1) reranks;
            // the paper's v1.0 table's, 0.6B, as a named variant.
            let e = settings.embedder.as_ref().unwrap();
            assert_eq!(
                e.model.as_ref().unwrap().model,
                "ThakiCloud/SKILLRET-Embedding-8B"
            );
            // A sweep reranks the seven first stages run_eval_rerank.sh reranks.
            assert_eq!(settings.sweep_first_stages.len(), 7, "{name}");
            let variant = dir.join(format!("skillret-embedding-0.6b+{name}.toml"));
            let v = Settings::load(&variant, &Overrides::default()).unwrap();
            let ve = v.embedder.as_ref().unwrap().model.as_ref().unwrap();
            assert_eq!(ve.model, "ThakiCloud/SKILLRET-Embedding-0.6B", "{name}");
            assert!(ve.revision.is_some(), "{name}");
            assert_eq!(v.reranker.as_ref().unwrap().model, r.model, "{name}");
        }
        // Every registry entry names its Hub id, none a local directory.
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if text.contains("hf download") {
                assert!(!text.contains("model = \"models/"), "{}", path.display());
            }
        }
        assert_eq!(
            embedders.len() + 6,
            24,
            "the registry's 18 embedders and 6 rerankers"
        );
    }

    fn parse(text: &str) -> Result<Settings> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        Settings::load(&path, &Overrides::default())
    }

    const DENSE: &str =
        "[data]\ndir = \"d\"\n[embedder]\nmodel = \"m\"\n[retriever]\nkind = \"dense\"\n";

    #[test]
    fn defaults_follow_the_official_protocol() {
        let s = parse(DENSE).unwrap();
        assert_eq!(s.retriever.top_n, 20);
        assert_eq!(s.retriever.index, IndexKind::Exact);
        assert_eq!(s.k, [5, 10, 15]);
        assert_eq!(s.split, "test");
        assert_eq!(s.out, PathBuf::from("runs/c"));
    }

    #[test]
    fn unknown_keys_name_the_file_and_line() {
        let err = parse(&format!("{DENSE}tpo_n = 5\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("c.toml:7"), "{err}");
        assert!(err.contains("tpo_n"), "{err}");
        let err = parse("[data]\ndir = \"d\"\n[retriever]\nkind = \"sparse\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("c.toml:4"), "{err}");
    }

    #[test]
    fn nv_embed_attention_is_read_and_a_wrong_one_named_with_its_line() {
        let with = |mode: &str| {
            DENSE.replace(
                "model = \"m\"\n",
                &format!("model = \"m\"\nattention = \"{mode}\"\n"),
            )
        };
        let s = parse(&with("bidirectional")).unwrap();
        assert_eq!(
            s.embedder.unwrap().attention,
            Some(embedder::Attention::Bidirectional)
        );
        assert_eq!(parse(DENSE).unwrap().embedder.unwrap().attention, None);
        let err = parse(&with("sideways")).unwrap_err().to_string();
        assert!(err.contains("c.toml:5"), "{err}");
        assert!(
            err.contains("official") && err.contains("bidirectional"),
            "{err}"
        );
    }

    #[test]
    fn the_attention_kernel_is_read_overridden_and_a_wrong_one_named_with_its_line() {
        let with = |kernel: &str| {
            DENSE.replace(
                "model = \"m\"\n",
                &format!("model = \"m\"\nbackend = \"cuda\"\nattention_kernel = \"{kernel}\"\n"),
            )
        };
        let s = parse(&with("flash")).unwrap();
        assert_eq!(
            s.embedder.unwrap().attention_kernel,
            Some(AttentionKernel::Flash)
        );
        assert_eq!(
            parse(DENSE).unwrap().embedder.unwrap().attention_kernel,
            None
        );
        let err = parse(&with("fused")).unwrap_err().to_string();
        assert!(err.contains("c.toml:6"), "{err}");
        assert!(err.contains("exact") && err.contains("flash"), "{err}");
        // --attention-kernel overrides the key.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, with("flash")).unwrap();
        let overrides = Overrides {
            attention_kernel: Some(AttentionKernel::Exact),
            ..Overrides::default()
        };
        let s = Settings::load(&path, &overrides).unwrap();
        assert_eq!(
            s.embedder.unwrap().attention_kernel,
            Some(AttentionKernel::Exact)
        );
        // A served model's attention is the server's.
        let served = DENSE.replace(
            "model = \"m\"\n",
            "backend = \"openai\"\nserved_model = \"m\"\nendpoints = [\"http://127.0.0.1:1\"]\nattention_kernel = \"flash\"\n",
        );
        let err = parse(&served).unwrap_err().to_string();
        assert!(err.contains("attention_kernel does not apply"), "{err}");
    }

    #[test]
    fn inconsistent_settings_are_refused_before_anything_loads() {
        for (text, needle) in [
            (
                "[data]\ndir = \"d\"\n[retriever]\nkind = \"dense\"\n",
                "needs an [embedder]",
            ),
            (
                "[data]\ndir = \"d\"\n[embedder]\nmodel = \"m\"\n[retriever]\nkind = \"bm25\"\n",
                "no embeddings",
            ),
            (&format!("{DENSE}top_n = 0\n"), "top_n"),
            (
                &format!("{DENSE}top_n = 18446744073709551615\n"),
                "top_n = 18446744073709551615 is more than 1000000",
            ),
            (
                &format!("{DENSE}fusion_depth = 2000000\n"),
                "fusion_depth = 2000000 is more than",
            ),
            (
                &format!("{DENSE}[eval]\nk = [5, 9000000000000000000]\n"),
                "[eval] k = 9000000000000000000 is more than 1000000",
            ),
            (
                &format!(
                    "{DENSE}[retriever.hnsw]\nm = 8\nef_construction = 50\nef_search = 10\ndeterministic = true\n"
                ),
                "index is not",
            ),
            (
                &format!(
                    "{DENSE}index = \"hnsw\"\n[retriever.hnsw]\nm = 1\nef_construction = 50\nef_search = 10\ndeterministic = true\n"
                ),
                "m = 1",
            ),
            (
                &format!("{DENSE}[reranker]\nmodel = \"r\"\ntop_n = 50\n"),
                "more than",
            ),
            (&format!("{DENSE}[eval]\nk = [0]\n"), "positive"),
            (
                &format!("{DENSE}[reranker]\nmodel = \"r\"\nweight = 0.3\n"),
                "interpolate",
            ),
            (
                &format!(
                    "{DENSE}[reranker]\nmodel = \"r\"\ncombine = \"interpolate\"\nweight = 2.0\n"
                ),
                "[0, 1]",
            ),
            (
                "[data]\n[embedder]\nmodel = \"m\"\n[retriever]\nkind = \"dense\"\n",
                "needs `dir`",
            ),
            (
                &DENSE.replace("model = \"m\"", "model = \"a/b\"\nrevision = \"main\""),
                "40-hex",
            ),
            (
                &format!("{DENSE}index = \"milvus\"\n"),
                "needs a [retriever.milvus] section",
            ),
            (
                &format!("{DENSE}[retriever.milvus]\nuri = \"http://h:1\"\n"),
                "index is not \"milvus\"",
            ),
            (
                &format!("{DENSE}index = \"milvus\"\n[retriever.milvus]\nuri = \"h:19530\"\n"),
                "[retriever.milvus]: uri \"h:19530\" is not a Milvus address",
            ),
            (
                &format!(
                    "{DENSE}index = \"milvus\"\n[retriever.milvus]\nuri = \"http://h:1\"\ncollection = \"a-b\"\n"
                ),
                "not a Milvus collection name",
            ),
            (
                "[data]\ndir = \"d\"\n[retriever]\nkind = \"bm25\"\nindex = \"hnsw\"\n",
                "a bm25 retriever has none",
            ),
        ] {
            let err = format!("{:#}", parse(text).unwrap_err());
            assert!(err.contains(needle), "{needle:?} not in {err}");
        }
    }

    #[test]
    fn milvus_keys_are_read_and_misspelt_ones_refused_with_their_line() {
        let s = parse(&format!(
            "{DENSE}index = \"milvus\"\n[retriever.milvus]\nuri = \"http://127.0.0.1:19530\"\nindex_type = \"HNSW\"\nm = 8\nef = 40\ntoken = \"root:Milvus\"\n"
        ))
        .unwrap();
        let m = s.retriever.milvus.unwrap();
        assert_eq!(m.index_type, index::MilvusIndexType::Hnsw);
        assert_eq!((m.m, m.ef, m.ef_construction), (8, 40, 200));
        assert_eq!(m.token.as_deref(), Some("root:Milvus"));
        // The token is never written out with the settings.
        assert!(!serde_json::to_string(&m).unwrap().contains("root:Milvus"));
        let err = parse(&format!(
            "{DENSE}index = \"milvus\"\n[retriever.milvus]\nuri = \"http://h:1\"\nef_search = 40\n"
        ))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("c.toml:") && err.contains("ef_search"),
            "{err}"
        );
    }
}
