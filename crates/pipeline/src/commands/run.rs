//! `pipeline run --config`: the end-to-end benchmark.
//!
//! data → (embed corpus, cached in shards) → index → embed queries → retrieve
//! top N → rerank top N → score every stage → write the outputs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use embedder::{Embedder, EmbedderOptions, Kind};
use eval::{Dataset, Run, ScoredDoc};
use index::{ExactIndex, HnswIndex, MilvusIndex, MilvusIndexType, VectorIndex};
use rayon::prelude::*;
use reranker::{Activation, CrossEncoder, RerankerOptions};

use crate::cache::{Shards, model_fingerprint};
use crate::cli::RunArgs;
use crate::commands::embed::model_dir;
use crate::config::{
    Combine, DataSource, EmbedderSettings, IndexKind, ModelRef, Overrides, RetrieverKind, Settings,
};
use crate::report::{self, Stage, StageTiming};

/// Vectors per cache shard.
const SHARD_SIZE: usize = 256;

pub(crate) fn run(args: &RunArgs) -> Result<()> {
    let settings = Settings::load(
        &args.config,
        &Overrides {
            data: args.data.clone(),
            out: args.out.clone(),
            limit_queries: args.limit_queries,
            precision: args.precision.map(crate::commands::embed::precision),
        },
    )?;
    let mut timings: Vec<StageTiming> = Vec::new();

    // Every model is found (downloaded where it comes from the Hub) and its
    // files checked before any work: a run fails in seconds, not after
    // hours of embedding.
    let embedder_dir = settings
        .embedder
        .as_ref()
        .map(|e| resolve_model(&e.model, "embedder"))
        .transpose()?;
    let reranker_dir = settings
        .reranker
        .as_ref()
        .map(|r| resolve_model(&r.model, "reranker"))
        .transpose()?;

    let started = Instant::now();
    let data = load_data(&settings)?;
    for warning in &data.warnings {
        eprintln!("warning: {warning}");
    }
    let queries: Vec<&eval::Query> = {
        let mut q: Vec<&eval::Query> = data.queries.iter().collect();
        q.sort_by(|a, b| a.id.cmp(&b.id));
        if let Some(n) = settings.limit_queries {
            q.truncate(n);
        }
        q
    };
    if queries.is_empty() {
        bail!("the data has no queries");
    }
    let doc_ids: Vec<Arc<str>> = data
        .skills
        .iter()
        .map(|s| Arc::from(s.id.as_str()))
        .collect();
    let doc_texts: Vec<String> = data.skills.par_iter().map(eval::Skill::text).collect();
    timings.push(StageTiming::new(
        "data",
        started,
        format!("{} skills, {} queries", doc_ids.len(), queries.len()),
    ));
    summary(timings.last());

    let retrieved = retrieve(
        &settings,
        embedder_dir.as_deref(),
        &doc_ids,
        &doc_texts,
        &queries,
        &mut timings,
    )?;
    let mut stages = vec![Stage {
        name: "retriever".to_owned(),
        run: retrieved.run,
    }];

    if let (Some(rr), Some(dir)) = (&settings.reranker, &reranker_dir) {
        let started = Instant::now();
        let options = RerankerOptions::default()
            .with_batch_tokens(rr.batch_tokens)
            .with_backend(rr.backend)
            .with_precision(rr.precision)
            .with_activation(if rr.sigmoid {
                Activation::Sigmoid
            } else {
                Activation::Identity
            });
        let options = match rr.max_length {
            Some(n) => options.with_max_length(n),
            None => options,
        };
        let options = match &rr.instruction {
            Some(text) => options.with_instruction(text),
            None => options,
        };
        let model = CrossEncoder::from_dir(dir, options)
            .with_context(|| format!("loading the reranker {}", dir.display()))?;
        eprintln!(
            "reranker: {} ({}, max {} tokens) on {}",
            dir.display(),
            describe(&model),
            model.max_length(),
            model.device()
        );
        let texts: HashMap<String, String> = queries
            .iter()
            .map(|q| (q.id.clone(), q.text.clone()))
            .collect();
        let by_id: HashMap<&str, &str> = doc_ids
            .iter()
            .zip(&doc_texts)
            .map(|(id, t)| (&**id, t.as_str()))
            .collect();
        let first = &stages[0].run;
        let pairs: usize = first
            .query_ids()
            .iter()
            .map(|q| first.get(q).map_or(0, |d| d.len().min(rr.top_n)))
            .sum();
        let bar = crate::progress::bar(pairs as u64, "reranking");
        let reranked = model.rerank_run(
            first,
            &texts,
            &|id| by_id.get(id).map(|t| (*t).to_owned()),
            rr.top_n,
            &|done| bar.set_position(done as u64),
        )?;
        bar.finish_and_clear();
        let reranked = match rr.combine {
            Combine::Replace => reranked,
            Combine::Interpolate => reranker::interpolate(first, &reranked, rr.top_n, rr.weight),
        };
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        timings.push(StageTiming::new(
            "rerank",
            started,
            format!(
                "{pairs} pairs, {:.1} pairs/s{}",
                pairs as f64 / seconds,
                match rr.combine {
                    Combine::Replace => String::new(),
                    Combine::Interpolate => format!(
                        "; interpolated with the first stage (reranker weight {})",
                        rr.weight
                    ),
                }
            ),
        ));
        summary(timings.last());
        stages.push(Stage {
            name: "reranker".to_owned(),
            run: reranked,
        });
    }

    let started = Instant::now();
    let outputs = report::write(
        &settings,
        &data.qrels,
        &data.skills,
        &stages,
        retrieved.index_recall.as_ref(),
        &timings,
    )?;
    timings.push(StageTiming::new(
        "score+report",
        started,
        format!("{} stages", stages.len()),
    ));
    summary(timings.last());
    report::write_timings(&settings.out, &timings)?;
    println!("{}", outputs.table);
    eprintln!("outputs in {}", settings.out.display());
    Ok(())
}

/// What a reranker is, in words.
pub(crate) fn describe(model: &CrossEncoder) -> String {
    match model.kind() {
        reranker::RerankerKind::YesNo => "yes/no decoder, P(yes)".to_owned(),
        _ => format!("cross-encoder, {} labels", model.labels()),
    }
}

pub(crate) fn summary(timing: Option<&StageTiming>) {
    if let Some(t) = timing {
        eprintln!("{:<14} {:>8.2} s  {}", t.stage, t.seconds, t.detail);
    }
}

fn load_data(settings: &Settings) -> Result<Dataset> {
    load_dataset(&settings.data, &settings.split)
}

/// A split from a local directory or a pinned Hub revision.
pub(crate) fn load_dataset(data: &DataSource, split: &str) -> Result<Dataset> {
    match data {
        DataSource::Dir(dir) => Dataset::load(dir, split)
            .with_context(|| format!("loading SkillRet data from {}", dir.display())),
        DataSource::Hub(revision) => {
            let revision = eval::hub::Revision::find(revision)?;
            let files =
                eval::hub::fetch_split(revision, split, &eval::hub::HubOptions::from_env())?;
            Ok(Dataset::from_files(&files)?)
        }
    }
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

/// The first stage's run, and HNSW's recall against exact search.
struct Retrieved {
    run: Run,
    index_recall: Option<report::IndexRecall>,
}

fn retrieve(
    settings: &Settings,
    embedder_dir: Option<&Path>,
    doc_ids: &[Arc<str>],
    doc_texts: &[String],
    queries: &[&eval::Query],
    timings: &mut Vec<StageTiming>,
) -> Result<Retrieved> {
    let r = &settings.retriever;
    let dense = match r.kind {
        RetrieverKind::Bm25 => None,
        RetrieverKind::Dense | RetrieverKind::Hybrid => {
            let depth = if r.kind == RetrieverKind::Hybrid {
                r.fusion_depth
            } else {
                r.top_n
            };
            let (Some(embedder), Some(dir)) = (settings.embedder.as_ref(), embedder_dir) else {
                bail!("a dense retriever needs an embedder");
            };
            Some(dense(
                settings, embedder, dir, doc_ids, doc_texts, queries, depth, timings,
            )?)
        }
    };
    let sparse = match r.kind {
        RetrieverKind::Dense => None,
        RetrieverKind::Bm25 | RetrieverKind::Hybrid => {
            let started = Instant::now();
            let bm25 = index::bm25::Bm25::new(
                doc_ids.to_vec(),
                doc_texts,
                index::bm25::Bm25Params::default(),
            );
            let depth = if r.kind == RetrieverKind::Hybrid {
                r.fusion_depth
            } else {
                r.top_n
            };
            let lists: Vec<Vec<ScoredDoc>> = queries
                .par_iter()
                .map(|q| bm25.search(&q.text, depth))
                .collect();
            timings.push(StageTiming::new(
                "bm25",
                started,
                format!(
                    "{} documents indexed, {} queries",
                    doc_ids.len(),
                    queries.len()
                ),
            ));
            summary(timings.last());
            Some(lists)
        }
    };
    let mut run = Run::default();
    let index_recall = dense.as_ref().and_then(|d| d.index_recall.clone());
    for (i, q) in queries.iter().enumerate() {
        let docs = match (&dense, &sparse) {
            (Some(d), None) => d.lists[i].clone(),
            (None, Some(s)) => s[i].clone(),
            (Some(d), Some(s)) => {
                index::fusion::reciprocal_rank_fusion(&[&d.lists[i], &s[i]], r.rrf_k, r.top_n)
            }
            (None, None) => Vec::new(),
        };
        let mut docs = docs;
        eval::sort_trec(&mut docs);
        docs.truncate(r.top_n);
        run.insert(q.id.clone(), docs);
    }
    Ok(Retrieved { run, index_recall })
}

struct Dense {
    lists: Vec<Vec<ScoredDoc>>,
    index_recall: Option<report::IndexRecall>,
}

/// Embeds (or reads from the cache) corpus and queries, indexes, searches.
#[allow(clippy::too_many_arguments)]
fn dense(
    settings: &Settings,
    e: &EmbedderSettings,
    dir: &Path,
    doc_ids: &[Arc<str>],
    doc_texts: &[String],
    queries: &[&eval::Query],
    depth: usize,
    timings: &mut Vec<StageTiming>,
) -> Result<Dense> {
    // A Milvus server that is down fails the run now, not after embedding.
    if let (IndexKind::Milvus, Some(params)) =
        (settings.retriever.index, &settings.retriever.milvus)
    {
        index::milvus::check_server(params)?;
    }
    // Pooled vectors are cached raw; normalisation follows the model's
    // Normalize module unless the configuration says otherwise.
    let normalize = e
        .normalize
        .or(embedder::SentenceTransformersConfig::read(dir)?.normalize)
        .unwrap_or(true);
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
    if let Some(p) = e.pooling {
        options = options.with_pooling(p);
    }
    // The prompts as the model will apply them (its own, or the config's),
    // known before it loads: they are part of the vectors' cache key.
    let prompts = options
        .prompts(dir)
        .with_context(|| format!("[embedder] prompts of {}", dir.display()))?;
    let fingerprint = model_fingerprint(dir)?;
    let dim = embedder::ModelConfig::read(&dir.join("config.json"))?.hidden_size();
    let vector_settings = format!(
        "model={fingerprint} revision={:?} max_length={:?} pooling={:?} precision={:?} backend={:?}",
        e.model.revision,
        e.max_length,
        e.pooling,
        e.precision.on_this_cpu(),
        e.backend
    );
    // The model loads only if some vectors are not cached.
    let mut model: Option<Embedder> = None;
    let mut load = || -> Result<Embedder> {
        let m = Embedder::from_dir(dir, options.clone())
            .with_context(|| format!("loading the model {}", dir.display()))?;
        eprintln!(
            "embedder: {} ({}, max {} tokens, {:?} pooling) on {}",
            dir.display(),
            m.config().family(),
            m.max_length(),
            m.pooling(),
            m.device()
        );
        Ok(m)
    };

    let ids: Vec<&str> = doc_ids.iter().map(|s| &**s).collect();
    let mut docs = embed_cached(
        &settings.cache,
        &mut model,
        &mut load,
        "documents",
        &format!(
            "{vector_settings} prompt={:?} kind=document",
            prompts.document
        ),
        &ids,
        doc_texts,
        Kind::Document,
        dim,
        timings,
    )?;
    let q_ids: Vec<&str> = queries.iter().map(|q| q.id.as_str()).collect();
    let q_texts: Vec<String> = queries.iter().map(|q| q.text.clone()).collect();
    let mut query_vectors = embed_cached(
        &settings.cache,
        &mut model,
        &mut load,
        "queries",
        &format!("{vector_settings} prompt={:?} kind=query", prompts.query),
        &q_ids,
        &q_texts,
        Kind::Query,
        dim,
        timings,
    )?;

    if normalize {
        for row in docs
            .chunks_exact_mut(dim)
            .chain(query_vectors.chunks_exact_mut(dim))
        {
            embedder::normalize(row);
        }
    }

    let started = Instant::now();
    let exact = ExactIndex::new(doc_ids.to_vec(), docs.clone(), dim)?;
    let (lists, index_recall) = match settings.retriever.index {
        IndexKind::Exact => {
            let lists = exact.search(&query_vectors, depth)?;
            timings.push(StageTiming::new(
                "search",
                started,
                format!(
                    "exact, {} queries × {} documents",
                    queries.len(),
                    doc_ids.len()
                ),
            ));
            summary(timings.last());
            (lists, None)
        }
        IndexKind::Hnsw => {
            let params = settings.retriever.hnsw;
            // The documents' vectors key, plus what else shapes the graph.
            let key = crate::cache::content_key(
                &format!(
                    "{vector_settings} prompt={:?} kind=document normalize={normalize} hnsw={params:?}",
                    prompts.document
                ),
                &ids,
                doc_texts,
            );
            let path = settings.cache.join("hnsw").join(&key[..32]);
            let (hnsw, how) = match HnswIndex::load(&path, doc_ids.to_vec()) {
                Ok(index) => (index, "loaded from the cache"),
                Err(_) => {
                    let bar = crate::progress::bar(doc_ids.len() as u64, "hnsw build");
                    let index = HnswIndex::build(doc_ids.to_vec(), &docs, dim, params, &|n| {
                        bar.set_position(n as u64);
                    })?;
                    bar.finish_and_clear();
                    index.save(&path)?;
                    (index, "built")
                }
            };
            timings.push(StageTiming::new(
                "index",
                started,
                format!(
                    "hnsw {how} (M {}, ef_construction {})",
                    params.m, params.ef_construction
                ),
            ));
            summary(timings.last());
            let started = Instant::now();
            let lists = hnsw.search(&query_vectors, depth)?;
            timings.push(StageTiming::new(
                "search",
                started,
                format!("hnsw ef {}, {} queries", params.ef_search, queries.len()),
            ));
            summary(timings.last());
            let truth = exact.search(&query_vectors, depth)?;
            let recall = index_recall(
                "hnsw",
                "HNSW".to_owned(),
                serde_json::json!({"ef_search": params.ef_search}),
                &lists,
                &truth,
                depth,
            );
            (lists, Some(recall))
        }
        IndexKind::Milvus => {
            let params = settings
                .retriever
                .milvus
                .as_ref()
                .context("index = \"milvus\" without [retriever.milvus]")?;
            // The vectors' key: a collection never holds another model's,
            // text recipe's or corpus's vectors.
            let key = crate::cache::content_key(
                &format!(
                    "{vector_settings} prompt={:?} kind=document normalize={normalize}",
                    prompts.document
                ),
                &ids,
                doc_texts,
            );
            let bar = crate::progress::bar(doc_ids.len() as u64, "milvus upload");
            let (milvus, upload) =
                MilvusIndex::open(params, &key, doc_ids.to_vec(), &docs, dim, &|n| {
                    bar.set_position(n as u64);
                })?;
            bar.finish_and_clear();
            timings.push(StageTiming::new(
                "index",
                started,
                format!(
                    "milvus {} at {}: {} rows found, {} uploaded, {} index {}",
                    upload.collection,
                    params.uri,
                    upload.found,
                    upload.uploaded,
                    params.index_type.name(),
                    if upload.indexed { "built" } else { "found" },
                ),
            ));
            summary(timings.last());
            let started = Instant::now();
            let lists = milvus.search(&query_vectors, depth)?;
            timings.push(StageTiming::new(
                "search",
                started,
                format!(
                    "milvus {}, {} queries",
                    params.index_type.name(),
                    queries.len()
                ),
            ));
            summary(timings.last());
            let truth = exact.search(&query_vectors, depth)?;
            let search = match params.index_type {
                MilvusIndexType::Flat => serde_json::json!({"index_type": "FLAT"}),
                MilvusIndexType::Hnsw => {
                    serde_json::json!({"index_type": "HNSW", "ef": params.ef.max(depth)})
                }
            };
            let recall = index_recall(
                "milvus",
                format!("Milvus (collection {})", upload.collection),
                search,
                &lists,
                &truth,
                depth,
            );
            (lists, Some(recall))
        }
    };
    Ok(Dense {
        lists,
        index_recall,
    })
}

/// Recall@10 and @depth of `lists` against exact search's `truth`.
fn index_recall(
    key: &'static str,
    label: String,
    params: serde_json::Value,
    lists: &[Vec<ScoredDoc>],
    truth: &[Vec<ScoredDoc>],
    depth: usize,
) -> report::IndexRecall {
    let serde_json::Value::Object(params) = params else {
        unreachable!("index parameters are a JSON object")
    };
    report::IndexRecall {
        key,
        label,
        params,
        at_10: index::hnsw::recall_at_k(lists, truth, 10.min(depth)),
        at_n: index::hnsw::recall_at_k(lists, truth, depth),
        n: depth,
    }
}

/// Vectors of `texts` from the cache, embedding (and storing) missing shards.
#[allow(clippy::too_many_arguments)]
pub(crate) fn embed_cached(
    cache: &Path,
    model: &mut Option<Embedder>,
    load: &mut dyn FnMut() -> Result<Embedder>,
    what: &str,
    key: &str,
    ids: &[&str],
    texts: &[String],
    kind: Kind,
    dim: usize,
    timings: &mut Vec<StageTiming>,
) -> Result<Vec<f32>> {
    let started = Instant::now();
    let shards = Shards::new(cache, what, key, ids, texts, dim, SHARD_SIZE);
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
    let mut tokens = 0usize;
    if !missing.is_empty() {
        if model.is_none() {
            *model = Some(load()?);
        }
        let m = model.as_ref().context("the model is loaded")?;
        if m.dim() != dim {
            bail!(
                "the model gives vectors of {} values, its config.json says {dim}",
                m.dim()
            );
        }
        let todo: usize = missing.iter().map(|&i| shards.range(i).len()).sum();
        let bar = crate::progress::bar(todo as u64, &format!("embed {what}"));
        let mut done = 0usize;
        for &i in &missing {
            let range = shards.range(i);
            let ids = m.tokenize(&texts[range.clone()], kind)?;
            tokens += ids.iter().map(Vec::len).sum::<usize>();
            let base = done;
            let vectors = m.embed_tokens(&ids, kind, &|n| bar.set_position((base + n) as u64))?;
            shards.store(i, vectors.as_slice())?;
            out[range.start * dim..range.end * dim].copy_from_slice(vectors.as_slice());
            done += range.len();
        }
        bar.finish_and_clear();
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
            "{} {what}: {cached} of {} shards from the cache, {} embedded ({tokens} tokens, {:.0} tokens/s)",
            texts.len(),
            shards.count(),
            missing.len(),
            tokens as f64 / seconds
        )
    };
    timings.push(StageTiming::new(&format!("embed {what}"), started, detail));
    summary(timings.last());
    Ok(out)
}

/// Paths of a finished run's outputs (for `compare`).
pub(crate) fn metrics_path(dir: &Path) -> PathBuf {
    dir.join("metrics.json")
}
