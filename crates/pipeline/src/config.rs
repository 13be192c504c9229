//! Run configurations: a TOML file parsed once into raw options (unknown keys
//! are errors naming the file, line and key), then resolved into checked
//! settings before any model loads.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use embedder::{Backend, Pooling, Precision};
use index::{HnswParams, MilvusParams};
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmbedder {
    model: String,
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
    pooling: Option<Pooling>,
    normalize: Option<bool>,
    max_length: Option<usize>,
    #[serde(default = "default_batch_tokens")]
    batch_tokens: usize,
    #[serde(default)]
    precision: Precision,
    #[serde(default)]
    backend: Backend,
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
    model: String,
    revision: Option<String>,
    #[serde(default = "default_top_n")]
    top_n: usize,
    max_length: Option<usize>,
    #[serde(default = "default_batch_tokens")]
    batch_tokens: usize,
    #[serde(default)]
    precision: Precision,
    #[serde(default)]
    backend: Backend,
    #[serde(default)]
    sigmoid: bool,
    /// The instruction of a yes/no (decoder) reranker.
    instruction: Option<String>,
    /// How the reranker's score makes the final order.
    #[serde(default)]
    combine: Combine,
    /// The reranker's share with combine = "interpolate".
    weight: Option<f64>,
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

/// Bi-encoder settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmbedderSettings {
    /// The model.
    pub model: ModelRef,
    /// Literal prompt of queries (default: the model's `query` prompt).
    pub query_prompt: Option<String>,
    /// Literal prompt of documents (default: the model's `document` prompt).
    pub document_prompt: Option<String>,
    /// The query prompt by name.
    pub query_prompt_name: Option<String>,
    /// The document prompt by name.
    pub document_prompt_name: Option<String>,
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
    /// Engine.
    pub backend: Backend,
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
    /// The cross-encoder.
    pub model: ModelRef,
    /// How many first-stage candidates to rescore.
    pub top_n: usize,
    /// Truncation override.
    pub max_length: Option<usize>,
    /// Tokens per batch.
    pub batch_tokens: usize,
    /// Linear-layer arithmetic.
    pub precision: Precision,
    /// Engine.
    pub backend: Backend,
    /// Sigmoid of one-label logits.
    pub sigmoid: bool,
    /// Instruction of a yes/no reranker (default: the official SkillRet one).
    pub instruction: Option<String>,
    /// Replace the first stage's order, or interpolate with it.
    pub combine: Combine,
    /// The reranker's share when interpolating.
    pub weight: f64,
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
}

impl Settings {
    /// Reads, parses and resolves a configuration file.
    pub fn load(path: &Path, overrides: &Overrides) -> Result<Self> {
        resolve(read_toml(path)?, path, overrides)
    }
}

/// Reads and parses a TOML configuration; errors name the file and line.
pub(crate) fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the configuration {}", path.display()))?;
    toml::from_str(&text).map_err(|e| {
        let place = e
            .span()
            .map(|span| {
                let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
                format!(":{line}")
            })
            .unwrap_or_default();
        anyhow::anyhow!("{}{place}: {}", path.display(), e.message())
    })
}

fn resolve(raw: Raw, path: &Path, overrides: &Overrides) -> Result<Settings> {
    let file = path.display();
    let data = DataSource::resolve(
        &file,
        overrides.data.as_deref(),
        raw.data.dir,
        raw.data.hub_revision,
    )?;
    let r = raw.retriever;
    if r.top_n == 0 {
        bail!("{file}: [retriever] top_n must be at least 1");
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
            if e.batch_tokens == 0 || e.max_length == Some(0) {
                bail!("{file}: [embedder] batch_tokens and max_length must be positive");
            }
            for (kind, literal, name) in [
                ("query", &e.query_prompt, &e.query_prompt_name),
                ("document", &e.document_prompt, &e.document_prompt_name),
            ] {
                if literal.is_some() && name.is_some() {
                    bail!(
                        "{file}: [embedder] has both {kind}_prompt and {kind}_prompt_name; keep one"
                    );
                }
            }
            Some(EmbedderSettings {
                model: model_ref(e.model, e.revision, &file.to_string(), "embedder")?,
                query_prompt: e.query_prompt,
                document_prompt: e.document_prompt,
                query_prompt_name: e.query_prompt_name,
                document_prompt_name: e.document_prompt_name,
                pooling: e.pooling,
                normalize: e.normalize,
                max_length: e.max_length,
                batch_tokens: e.batch_tokens,
                precision: overrides.precision.unwrap_or(e.precision),
                backend: e.backend,
            })
        }
    };
    let reranker = match raw.reranker {
        None => None,
        Some(x) => {
            if x.top_n == 0 || x.batch_tokens == 0 || x.max_length == Some(0) {
                bail!("{file}: [reranker] top_n, batch_tokens and max_length must be positive");
            }
            if x.top_n > r.top_n {
                bail!(
                    "{file}: [reranker] top_n = {} is more than the retriever's top_n = {}",
                    x.top_n,
                    r.top_n
                );
            }
            let weight = match (x.combine, x.weight) {
                (Combine::Replace, Some(_)) => {
                    bail!("{file}: [reranker] weight applies to combine = \"interpolate\" only")
                }
                (Combine::Replace, None) => 1.0,
                (Combine::Interpolate, w) => {
                    let w = w.unwrap_or(0.5);
                    if !(0.0..=1.0).contains(&w) {
                        bail!("{file}: [reranker] weight must be in [0, 1]");
                    }
                    w
                }
            };
            Some(RerankerSettings {
                model: model_ref(x.model, x.revision, &file.to_string(), "reranker")?,
                combine: x.combine,
                weight,
                top_n: x.top_n,
                max_length: x.max_length,
                batch_tokens: x.batch_tokens,
                precision: overrides.precision.unwrap_or(x.precision),
                backend: x.backend,
                sigmoid: x.sigmoid,
                instruction: x.instruction,
            })
        }
    };
    let mut k = raw.eval.k;
    if k.is_empty() || k.contains(&0) {
        bail!("{file}: [eval] k must be a non-empty list of positive cut-offs");
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
