//! The stages every command shares: finding models, loading data, the
//! embedder (in this process or served) with its vector cache, and the
//! reranker (in this process or served).
//!
//! A served model connects at once (its servers checked, the probe text
//! embedded), because its cache key depends on what the servers report; a
//! local model loads only when some vector is not cached.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use embedder::remote::{RemoteEmbedder, RemoteOptions};
use embedder::{
    AttentionKernel, Backend, EmbedStats, Embedder, EmbedderOptions, Kind, LocalEmbedder, Prompts,
};
use eval::Dataset;
use reranker::{Activation, CrossEncoder, Reranker, RerankerOptions};
use served::{ApiKey, Connection, Endpoint};

use crate::cache::{Shards, model_fingerprint, tokenizer_fingerprint};
use crate::config::{DataSource, EmbedderSettings, ModelRef, RerankerSettings, ServedSettings};
use crate::hub::{model_dir, tokenizer_dir};
use crate::report::StageTiming;

/// Vectors per cache shard.
pub(crate) const SHARD_SIZE: usize = 256;

/// The cosine a served model's probe vector must keep with the cached one
/// (a different model gives far less; the same one on other hardware or in
/// another precision stays above it).
const PROBE_COSINE: f64 = 0.999;

/// Prints a stage's one-line summary.
pub(crate) fn summary(timing: Option<&StageTiming>) {
    if let Some(t) = timing {
        eprintln!("{:<14} {:>8.2} s  {}", t.stage, t.seconds, t.detail);
        for note in &t.notes {
            eprintln!("{:<14} {:>10}  {note}", "", "");
        }
    }
}

/// A split from a local directory or a pinned Hub revision.
pub(crate) fn load_dataset(data: &DataSource, split: &str) -> Result<Dataset> {
    match data {
        DataSource::Dir(dir) => Dataset::load(dir, split)
            .with_context(|| format!("loading data from {}", dir.display())),
        DataSource::Hub(revision) => {
            let revision = eval::hub::Revision::find(revision)?;
            let files =
                eval::hub::fetch_split(revision, split, &eval::hub::HubOptions::from_env())?;
            Ok(Dataset::from_files(&files)?)
        }
    }
}

/// How many (query, skill) pairs a reranker scores over `run`'s pools.
pub(crate) fn pool_pairs(run: &eval::Run, pool: &reranker::Pool<'_>) -> usize {
    run.query_ids()
        .iter()
        .map(|q| pool.candidates(q, run.get(q).unwrap_or_default()).len())
        .sum()
}

/// The directory of a configured model (from the Hub where it is an id),
/// with its files and architecture checked.
pub(crate) fn resolve_model(model: &ModelRef, section: &str) -> Result<PathBuf> {
    let dir = model_dir(&model.model, model.revision.as_deref())
        .with_context(|| format!("[{section}] model {:?}", model.model))?;
    let files = embedder::ModelFiles::in_dir(&dir)
        .with_context(|| format!("[{section}] model {}", dir.display()))?;
    embedder::ModelConfig::read(&files.config)
        .with_context(|| format!("[{section}] model {}", dir.display()))?;
    Ok(dir)
}

/// The local directory of a served model: its tokenizer and config (no
/// weights needed).
pub(crate) fn resolve_tokenizer_dir(model: &ModelRef, section: &str) -> Result<PathBuf> {
    let dir = tokenizer_dir(&model.model, model.revision.as_deref())
        .with_context(|| format!("[{section}] model {:?}", model.model))?;
    embedder::Tokenization::from_dir(&dir, None, None).with_context(|| {
        format!(
            "[{section}] model {} (the served model's tokenizer)",
            dir.display()
        )
    })?;
    Ok(dir)
}

/// The model directory an [embedder] or [reranker] names, if any: checked
/// whole for a local model, its tokenizer for a served one.
pub(crate) fn model_dir_of(
    model: Option<&ModelRef>,
    served: bool,
    section: &str,
) -> Result<Option<PathBuf>> {
    model
        .map(|m| {
            if served {
                resolve_tokenizer_dir(m, section)
            } else {
                resolve_model(m, section)
            }
        })
        .transpose()
}

/// A served model's connection: its endpoints, and its key read now from
/// the variable the configuration names (never stored in the settings).
fn connection(s: &ServedSettings, section: &str) -> Result<Connection> {
    let endpoints = s
        .endpoints
        .iter()
        .map(|e| {
            Endpoint::parse(e)
                .map_err(|why| anyhow::anyhow!("{}: [{section}] {why}", s.endpoints_at))
        })
        .collect::<Result<Vec<_>>>()?;
    let key = match &s.api_key_env {
        None => None,
        Some(var) => match std::env::var(var) {
            Ok(key) if !key.is_empty() => Some((var.clone(), ApiKey::new(key))),
            _ => bail!(
                "{}: [{section}] api_key_env names ${var}, which is not set",
                s.section
            ),
        },
    };
    Connection::new(
        endpoints,
        key,
        s.max_in_flight,
        Duration::from_secs_f64(s.timeout_s),
        s.retries,
        s.allow_insecure_http,
    )
    .map_err(|e| anyhow::anyhow!("{}: [{section}] {e}", s.endpoints_at))
}

/// A connection or model error of a served model, placed in its section.
fn placed(e: &embedder::Error, s: &ServedSettings, section: &str) -> anyhow::Error {
    match e {
        embedder::Error::NotServed { .. } => {
            anyhow::anyhow!("{}: [{section}] {e}", s.served_model_at)
        }
        embedder::Error::Served(_) => anyhow::anyhow!("{}: [{section}] {e}", s.endpoints_at),
        _ => anyhow::anyhow!("{}: [{section}] {e}", s.section),
    }
}

enum Model {
    Local {
        dir: PathBuf,
        options: EmbedderOptions,
        loaded: Option<Box<LocalEmbedder>>,
    },
    Served(Box<RemoteEmbedder>),
}

/// The first stage's vectors: an embedder, what its vectors are keyed on,
/// and how they are normalised after the cache.
pub(crate) struct Vectors {
    /// Everything but the kind that decides a vector.
    settings: String,
    prompts: Prompts,
    dim: usize,
    normalize: bool,
    model: Model,
}

impl Vectors {
    /// The embedder of `[embedder]`, with `dir` its resolved model
    /// directory (a served model's is optional).
    pub(crate) fn open(e: &EmbedderSettings, dir: Option<&Path>) -> Result<Self> {
        let mut options = EmbedderOptions::default()
            .with_normalize(false)
            .with_batch_tokens(e.batch_tokens)
            .with_backend(e.backend)
            .with_precision(e.precision);
        if let Some(p) = &e.query_prompt {
            options = options.with_query_prompt(p);
        }
        if let Some(p) = &e.document_prompt {
            options = options.with_document_prompt(p);
        }
        if let Some(name) = &e.query_prompt_name {
            options = options.with_query_prompt_name(name);
        }
        if let Some(name) = &e.document_prompt_name {
            options = options.with_document_prompt_name(name);
        }
        if let Some(n) = e.max_length {
            options = options.with_max_length(n);
        }
        if let Some(task) = &e.task {
            options = options.with_task(task);
        }
        if let Some(a) = e.attention {
            options = options.with_attention(a);
        }
        if let Some(kernel) = e.attention_kernel {
            options = options.with_attention_kernel(kernel);
        }
        if let Some(p) = e.pooling {
            options = options.with_pooling(p);
        }
        // Pooled vectors are cached raw; normalisation follows the model's
        // Normalize module unless the configuration says otherwise.
        let own_normalize = match dir {
            Some(dir) => embedder::SentenceTransformersConfig::read(dir)?.normalize,
            None => None,
        };
        let normalize = e.normalize.or(own_normalize).unwrap_or(true);
        match (&e.served, dir) {
            (Some(s), dir) => {
                let remote = RemoteEmbedder::connect(RemoteOptions {
                    connection: connection(s, "embedder")?,
                    served_model: s.served_model.clone().unwrap_or_default(),
                    model_dir: dir.map(Path::to_path_buf),
                    embedder: options,
                    batch_size: s.batch_size,
                    dimensions: e.dimensions,
                    input: e.input,
                    max_chars: e.max_chars,
                })
                .map_err(|err| placed(&err, s, "embedder"))?;
                for w in remote.warnings() {
                    eprintln!("warning: [embedder] {w}");
                }
                let local_files = match dir {
                    Some(dir) => tokenizer_fingerprint(dir)?,
                    None => "none".to_owned(),
                };
                let prompts = Prompts::default();
                Ok(Self {
                    settings: format!("{} local_files={local_files}", remote.protocol()),
                    prompts,
                    dim: remote.dim(),
                    normalize,
                    model: Model::Served(Box::new(remote)),
                })
            }
            (None, Some(dir)) => {
                // The prompts as the model will apply them (its own, or the
                // config's), known before it loads: they are part of the key.
                let prompts = options
                    .prompts(dir)
                    .with_context(|| format!("[embedder] prompts of {}", dir.display()))?;
                let fingerprint = model_fingerprint(dir)?;
                let dim = embedder::ModelConfig::read(&dir.join("config.json"))?.hidden_size();
                // The arithmetic that runs: the native engine's on this CPU,
                // the candle engine's as asked; its attention kernel.
                let (precision, kernel) = match e.backend {
                    Backend::Native if e.precision.on_this_cpu() == engine::Precision::Int8 => {
                        // Its kept layers' arithmetic follows this CPU's units.
                        let (plan, _) =
                            engine::linear::Plan::for_precision(engine::Precision::Int8)?;
                        let kept = plan.of(engine::linear::Role::AttentionIn);
                        (engine::Precision::Int8, format!(" int8_kept={kept:?}"))
                    }
                    Backend::Native => (e.precision.on_this_cpu(), String::new()),
                    _ => (
                        e.precision,
                        format!(
                            " attention_kernel={:?}",
                            e.attention_kernel.unwrap_or_else(|| {
                                AttentionKernel::default_for(e.backend, e.precision)
                            })
                        ),
                    ),
                };
                let settings = format!(
                    "model={fingerprint} revision={:?} task={:?} attention={:?} max_length={:?} pooling={:?} precision={precision:?} backend={:?}{kernel}",
                    e.model.as_ref().and_then(|m| m.revision.clone()),
                    e.task,
                    e.attention,
                    e.max_length,
                    e.pooling,
                    e.backend
                );
                Ok(Self {
                    settings,
                    prompts,
                    dim,
                    normalize,
                    model: Model::Local {
                        dir: dir.to_path_buf(),
                        options,
                        loaded: None,
                    },
                })
            }
            (None, None) => bail!("[embedder] needs a model"),
        }
    }

    /// A local model keyed by `settings` (the trainer's miner).
    pub(crate) fn local(
        dir: &Path,
        options: EmbedderOptions,
        settings: String,
        normalize: bool,
    ) -> Result<Self> {
        let dim = embedder::ModelConfig::read(&dir.join("config.json"))?.hidden_size();
        Ok(Self {
            settings,
            prompts: Prompts::default(),
            dim,
            normalize,
            model: Model::Local {
                dir: dir.to_path_buf(),
                options,
                loaded: None,
            },
        })
    }

    /// Width of the vectors.
    pub(crate) fn dim(&self) -> usize {
        self.dim
    }

    /// Whether vectors are normalised after the cache.
    pub(crate) fn normalize(&self) -> bool {
        self.normalize
    }

    /// The key of vectors of `kind`.
    pub(crate) fn key(&self, kind: Kind) -> String {
        match (&self.model, kind) {
            (Model::Served(_), Kind::Document) => format!("{} kind=document", self.settings),
            (Model::Served(_), Kind::Query) => format!("{} kind=query", self.settings),
            (Model::Local { .. }, Kind::Document) => format!(
                "{} prompt={:?} kind=document",
                self.settings, self.prompts.document
            ),
            (Model::Local { .. }, Kind::Query) => {
                format!(
                    "{} prompt={:?} kind=query",
                    self.settings, self.prompts.query
                )
            }
        }
    }

    /// The embedder, loading a local model on first use.
    fn model(&mut self) -> Result<&dyn Embedder> {
        match &mut self.model {
            Model::Served(remote) => Ok(&**remote),
            Model::Local {
                dir,
                options,
                loaded,
            } => {
                if loaded.is_none() {
                    let m = LocalEmbedder::from_dir(dir, options.clone())
                        .with_context(|| format!("loading the model {}", dir.display()))?;
                    eprintln!("embedder: {}", Embedder::describe(&m));
                    if m.dim() != self.dim {
                        bail!(
                            "the model gives vectors of {} values, its config.json says {}",
                            m.dim(),
                            self.dim
                        );
                    }
                    *loaded = Some(Box::new(m));
                }
                let m: &dyn Embedder = &**loaded.as_ref().context("the model is loaded")?;
                Ok(m)
            }
        }
    }

    /// What ran, in words, if the model was loaded or is served (a run
    /// whose vectors all came from the cache loads none).
    pub(crate) fn loaded_description(&self) -> Option<String> {
        match &self.model {
            Model::Served(remote) => Some(remote.describe()),
            Model::Local { loaded, .. } => loaded.as_ref().map(|m| m.describe()),
        }
    }

    /// What runs, in words.
    pub(crate) fn describe(&mut self) -> Result<String> {
        Ok(self.model()?.describe())
    }

    /// Vectors of `texts` (raw: not normalised), not cached.
    pub(crate) fn embed(
        &mut self,
        texts: &[String],
        kind: Kind,
        progress: &(dyn Fn(usize, &str) + Sync),
    ) -> Result<(Vec<f32>, EmbedStats)> {
        let mut out = Vec::new();
        let stats = self.model()?.embed_groups(
            &[texts],
            kind,
            &mut |_, v| {
                out = v.as_slice().to_vec();
                Ok(())
            },
            progress,
        )?;
        Ok((out, stats))
    }

    /// Vectors of `texts` (raw) from the cache under `key`, embedding (and
    /// storing, shard by shard as each completes) the missing ones. A
    /// served model's probe vector is stored with its shards and must agree
    /// with the one the servers give now.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn embed_cached(
        &mut self,
        cache: &Path,
        what: &str,
        key: &str,
        ids: &[&str],
        texts: &[String],
        kind: Kind,
        timings: &mut Vec<StageTiming>,
    ) -> Result<Vec<f32>> {
        let started = Instant::now();
        let dim = self.dim;
        let shards = Shards::new(cache, what, key, ids, texts, dim, SHARD_SIZE);
        if let Model::Served(remote) = &self.model {
            check_probe(&shards, remote.probe(), what)?;
        }
        let mut out = vec![0.0f32; texts.len() * dim];
        let mut missing = Vec::new();
        for i in 0..shards.count() {
            match shards.load(i)? {
                Some(v) => {
                    let range = shards.range(i);
                    out[range.start * dim..range.end * dim].copy_from_slice(&v);
                }
                None => missing.push(i),
            }
        }
        let cached = shards.count() - missing.len();
        let mut stats = EmbedStats::default();
        if !missing.is_empty() {
            let probe = match &self.model {
                Model::Served(remote) => Some(remote.probe().to_vec()),
                Model::Local { .. } => None,
            };
            let todo: usize = missing.iter().map(|&i| shards.range(i).len()).sum();
            let bar = crate::progress::bar(todo as u64, &format!("embed {what}"));
            let groups: Vec<&[String]> = missing.iter().map(|&i| &texts[shards.range(i)]).collect();
            let mut stored = 0usize;
            let model = self.model()?;
            let result = model.embed_groups(
                &groups,
                kind,
                &mut |g, vectors| {
                    let i = missing[g];
                    if let Some(p) = &probe {
                        shards
                            .store_probe(p)
                            .map_err(|e| embedder::Error::Invalid(format!("{e:#}")))?;
                    }
                    shards
                        .store(i, vectors.as_slice())
                        .map_err(|e| embedder::Error::Invalid(format!("{e:#}")))?;
                    let range = shards.range(i);
                    out[range.start * dim..range.end * dim].copy_from_slice(vectors.as_slice());
                    stored += 1;
                    Ok(())
                },
                &|n, note| {
                    bar.set_position(n as u64);
                    if !note.is_empty() {
                        bar.set_message(format!("embed {what} · {note}"));
                    }
                },
            );
            bar.finish_and_clear();
            stats = result.with_context(|| {
                format!(
                    "embedding {what}: {} of {} shards are in the cache ({}); run the same command again to resume from them",
                    cached + stored,
                    shards.count(),
                    shards.dir().display()
                )
            })?;
        }
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        let detail = if missing.is_empty() {
            format!(
                "{} {what}: all {} shards from the cache",
                texts.len(),
                shards.count()
            )
        } else {
            format!(
                "{} {what}: {cached} of {} shards from the cache, {} embedded ({} tokens, {:.0} tokens/s)",
                texts.len(),
                shards.count(),
                missing.len(),
                stats.tokens,
                stats.tokens as f64 / seconds
            )
        };
        let mut timing = StageTiming::new(&format!("embed {what}"), started, detail);
        timing.notes = stats.notes;
        timing.tokens = (!missing.is_empty()).then_some(stats.tokens);
        timings.push(timing);
        summary(timings.last());
        Ok(out)
    }
}

/// Refuses cached vectors that another model made under the same name.
fn check_probe(shards: &Shards, probe: &[f32], what: &str) -> Result<()> {
    let Some(stored) = shards.load_probe()? else {
        return Ok(());
    };
    let cosine = if stored.len() == probe.len() {
        let dot: f64 = stored
            .iter()
            .zip(probe)
            .map(|(a, b)| f64::from(*a) * f64::from(*b))
            .sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        dot / (norm(&stored) * norm(probe)).max(1e-30)
    } else {
        f64::NAN
    };
    if cosine.is_nan() || cosine < PROBE_COSINE {
        bail!(
            "the model served under this name is not the one whose {what} vectors are cached in {}: its vector of the probe text {} (a different model served under the same name?). Its old vectors are not used. To embed these {what} afresh with the model now served, remove that directory (rm -r {}), or set [output] cache to a new directory",
            shards.dir().display(),
            if cosine.is_nan() {
                format!(
                    "has {} values, the cached one {}",
                    probe.len(),
                    stored.len()
                )
            } else {
                format!(
                    "has cosine {cosine:.4} with the cached one (at least {PROBE_COSINE} expected)"
                )
            },
            shards.dir().display()
        );
    }
    Ok(())
}

/// The reranker of `[reranker]`, with `dir` its resolved model directory
/// (a served reranker's is optional).
pub(crate) fn open_reranker(
    rr: &RerankerSettings,
    dir: Option<&Path>,
) -> Result<Box<dyn Reranker>> {
    let activation = if rr.sigmoid {
        Activation::Sigmoid
    } else {
        Activation::Identity
    };
    match (&rr.served, dir) {
        (Some(s), dir) => {
            let remote = reranker::RemoteReranker::connect(reranker::RemoteOptions {
                connection: connection(s, "reranker")?,
                served_model: s.served_model.clone(),
                api: rr.api.unwrap_or(reranker::RemoteApi::Rerank),
                model_dir: dir.map(Path::to_path_buf),
                kind: rr.kind,
                max_length: rr.max_length,
                instruction: rr.instruction.clone(),
                activation,
                batch_size: s.batch_size,
            })
            .map_err(|err| placed(&err, s, "reranker"))?;
            for w in remote.warnings() {
                eprintln!("warning: [reranker] {w}");
            }
            Ok(Box::new(remote))
        }
        (None, Some(dir)) => {
            let mut options = RerankerOptions::default()
                .with_batch_tokens(rr.batch_tokens)
                .with_backend(rr.backend)
                .with_precision(rr.precision)
                .with_activation(activation);
            if let Some(kernel) = rr.attention_kernel {
                options = options.with_attention_kernel(kernel);
            }
            if let Some(n) = rr.max_length {
                options = options.with_max_length(n);
            }
            if let Some(text) = &rr.instruction {
                options = options.with_instruction(text);
            }
            let model = CrossEncoder::from_dir(dir, options)
                .with_context(|| format!("loading the reranker {}", dir.display()))?;
            Ok(Box::new(model))
        }
        (None, None) => bail!("[reranker] needs a model"),
    }
}
