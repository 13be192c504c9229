//! `pipeline run --config`: the end-to-end benchmark.
//!
//! data → (embed corpus, cached in shards) → index → embed queries → retrieve
//! top N → rerank top N → score every stage → write the outputs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use embedder::Kind;
use eval::{Run, ScoredDoc};
use index::{ExactIndex, HnswIndex, MilvusIndex, MilvusIndexType, VectorIndex};
use rayon::prelude::*;

use crate::cli::RunArgs;
use crate::config::{Combine, IndexKind, Overrides, RetrieverKind, Settings};
use crate::provenance;
use crate::ranking::Stage;
use crate::report::{self, StageTiming};
use crate::stages::{self, Vectors, load_dataset, summary};

pub(crate) fn run(args: &RunArgs) -> Result<()> {
    let settings = Settings::load(
        &args.config,
        &Overrides {
            data: args.data.clone(),
            out: args.out.clone(),
            limit_queries: args.limit_queries,
            precision: args.precision.map(crate::commands::embed::precision),
            attention_kernel: args.attention_kernel,
            rerank_depth: args.rerank_depth,
            top_n: args.top_n,
            first_stage: args.first_stage.clone(),
            query_focus: args.query_focus,
        },
    )?;
    let mut timings: Vec<StageTiming> = Vec::new();

    // Every model is found (downloaded where it comes from the Hub) and its
    // files checked before any work: a run fails in seconds, not after
    // hours of embedding.
    // A given first stage replaces the embedder and the retriever.
    let embedder = settings
        .embedder
        .as_ref()
        .filter(|_| settings.first_stage.is_none());
    let embedder_dir = match embedder {
        Some(e) => stages::model_dir_of(e.model.as_ref(), e.served.is_some(), "embedder")?,
        None => None,
    };
    let reranker_dir = match &settings.reranker {
        Some(r) => stages::model_dir_of(r.model.as_ref(), r.served.is_some(), "reranker")?,
        None => None,
    };
    // A Milvus server that is down fails the run now, not after embedding.
    if let (IndexKind::Milvus, Some(params), None) = (
        settings.retriever.index,
        &settings.retriever.milvus,
        &settings.first_stage,
    ) {
        index::milvus::check_server(params)?;
    }
    // Served models are checked (and a local embedder's key computed) before
    // any data is read or anything written.
    let mut vectors = embedder
        .map(|e| Vectors::open(e, embedder_dir.as_deref()))
        .transpose()?;
    // The given first stage is read before any data or model loads.
    let given = settings
        .first_stage
        .as_ref()
        .map(|path| {
            Run::read(path, &settings.split)
                .with_context(|| format!("reading the first stage {}", path.display()))
        })
        .transpose()?;
    let reranker = settings
        .reranker
        .as_ref()
        .map(|r| stages::open_reranker(r, reranker_dir.as_deref()))
        .transpose()?;
    if let Some(r) = &reranker {
        eprintln!("reranker: {}", r.describe());
    }

    let started = Instant::now();
    let mut data = load_dataset(&settings.data, &settings.split)?;
    for warning in &data.warnings {
        eprintln!("warning: {warning}");
    }
    if let Some(filter) = &settings.skill_ids_filter {
        let kept = data
            .keep_skills(filter)
            .with_context(|| format!("{}: [data] skill_ids_filter", settings.path.display()))?;
        eprintln!(
            "data: {kept} skills kept by the filter {}",
            filter.display()
        );
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
        format!(
            "{}: {} skills, {} queries",
            data.label(),
            doc_ids.len(),
            queries.len()
        ),
    ));
    summary(timings.last());

    let mut retrieved = match given {
        Some(run) => {
            let started = Instant::now();
            let mut first = Run::default();
            for q in &queries {
                if let Some(docs) = run.get(&q.id) {
                    first.insert(q.id.clone(), docs.to_vec());
                }
            }
            timings.push(StageTiming::new(
                "first stage",
                started,
                format!(
                    "{} queries of {} read from {}",
                    first.len(),
                    run.len(),
                    settings
                        .first_stage
                        .as_ref()
                        .map_or_else(String::new, |p| p.display().to_string())
                ),
            ));
            summary(timings.last());
            Retrieved {
                run: first,
                parts: Vec::new(),
                index_recall: None,
                exact: None,
                bm25: None,
            }
        }
        None => retrieve(
            &settings,
            vectors.as_mut(),
            &doc_ids,
            &doc_texts,
            &queries,
            &mut timings,
        )?,
    };
    // The focus pass's variants of every request (each sentence left out, each alone), and
    // the first stages' scorers it needs.
    let variants = settings
        .query_focus
        .then(|| crate::focus::Variants::new(&queries));
    let (exact, bm25) = (retrieved.exact.take(), retrieved.bm25.take());
    // A hybrid retriever's parts are stages of their own, so that the
    // report shows what each part and the fusion contribute.
    let mut stages: Vec<Stage> = retrieved
        .parts
        .into_iter()
        .map(|(name, run)| Stage {
            name: name.to_owned(),
            run,
            after: None,
        })
        .collect();
    let fused_after = stages.iter().position(|s| s.name == "dense");
    stages.push(Stage {
        name: "retriever".to_owned(),
        run: retrieved.run,
        after: fused_after,
    });
    let retriever = stages.len() - 1;

    let mut rerank_focus: Option<Run> = None;
    if let (Some(rr), Some(model)) = (&settings.reranker, &reranker) {
        let started = Instant::now();
        let texts: HashMap<String, String> = queries
            .iter()
            .map(|q| (q.id.clone(), q.text.clone()))
            .collect();
        let by_id: HashMap<&str, &str> = doc_ids
            .iter()
            .zip(&doc_texts)
            .map(|(id, t)| (&**id, t.as_str()))
            .collect();
        let first = &stages[retriever].run;
        let pool = reranker::Pool {
            depth: rr.top_n,
            oracle: rr.oracle.then_some(&data.qrels),
        };
        let pairs = stages::pool_pairs(first, &pool);
        let bar = crate::progress::bar(pairs as u64, "reranking");
        let reranked = model.rerank_run(
            first,
            &texts,
            &|id| by_id.get(id).map(|t| (*t).to_owned()),
            &pool,
            &|done| bar.set_position(done as u64),
        )?;
        bar.finish_and_clear();
        let reranked = match rr.combine {
            Combine::Replace => reranked,
            Combine::Interpolate => reranker::interpolate(first, &reranked, rr.weight),
        };
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        timings.push(StageTiming::new(
            "rerank",
            started,
            format!(
                "{pairs} pairs{}, {:.1} pairs/s{}",
                if rr.oracle {
                    " (oracle: gold skills added)"
                } else {
                    ""
                },
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
        if let Some(t) = timings.last_mut() {
            t.notes = model.notes();
        }
        summary(timings.last());
        if let (Some(variants), true) = (&variants, settings.query_focus_reranker) {
            rerank_focus = Some(rerank_variants(
                variants,
                &queries,
                &reranked,
                &stages[retriever].run,
                rr,
                model.as_ref(),
                &by_id,
                &mut timings,
            )?);
        }
        stages.push(Stage {
            name: "reranker".to_owned(),
            run: reranked,
            after: Some(retriever),
        });
    }
    let focus = match &variants {
        Some(variants) => Some(query_focus(
            &settings,
            vectors.as_mut(),
            &FocusInputs {
                variants,
                doc_ids: &doc_ids,
                exact: exact.as_ref(),
                bm25: bm25.as_ref(),
                reranked: rerank_focus.as_ref(),
            },
            &data.qrels,
            &mut timings,
        )?),
        None => None,
    };

    let started = Instant::now();
    let outputs = report::write(
        &settings,
        data.label(),
        &data.qrels,
        &data.skills,
        &stages,
        &report::Extras {
            recall: retrieved.index_recall.as_ref(),
            focus: focus.as_ref().map(|f| &f.json),
            focus_tsv: focus.as_ref().map(|f| f.tsv.as_str()),
        },
        &queries,
    )?;
    timings.push(StageTiming::new(
        "score+report",
        started,
        format!("{} stages", stages.len()),
    ));
    summary(timings.last());
    report::write_timings(&settings.out, &timings)?;
    let results = provenance::Results {
        settings: &settings,
        label: data.label(),
        data: provenance::data(&settings)?,
        embedder: match embedder {
            Some(e) => e
                .model
                .as_ref()
                .map(|m| provenance::model(m, embedder_dir.as_deref()))
                .transpose()?,
            None => None,
        },
        reranker: match &settings.reranker {
            Some(r) => r
                .model
                .as_ref()
                .map(|m| provenance::model(m, reranker_dir.as_deref()))
                .transpose()?,
            None => None,
        },
        device: provenance::device(
            vectors
                .as_ref()
                .and_then(Vectors::loaded_description)
                .as_deref(),
            reranker.as_ref().map(|r| r.describe()).as_deref(),
        ),
        timings: &timings,
        scores: &outputs.metrics,
        breakdowns: &outputs.breakdowns,
        changes: &outputs.changes,
    };
    report::write_json(&settings.out.join("results.json"), &results.to_json())?;
    println!("{}", outputs.table);
    if let Some(focus) = &focus {
        println!(
            "Query focus (NDCG@10 of the full request; of the best single sentence, minus it; share of queries one sentence wins; share of |Δ gold score| on the top sentence):"
        );
        let shown = |x: f64, text: String| if x.is_nan() { "–".to_owned() } else { text };
        for (stage, [ndcg, headroom, wins, concentration]) in &focus.headline {
            println!(
                "  {stage:<10} NDCG@10 {}  headroom {}  single-sentence wins {}  concentration {}",
                shown(*ndcg, format!("{ndcg:.4}")),
                shown(*headroom, format!("{headroom:+.4}")),
                shown(*wins, format!("{wins:.3}")),
                shown(*concentration, format!("{concentration:.3}")),
            );
        }
    }
    eprintln!("outputs in {}", settings.out.display());
    eprintln!(
        "report: {} (open it in a browser)",
        settings.out.join("report.html").display()
    );
    Ok(())
}

/// The focus pass (crate::focus) over every first stage of the run.
/// What the focus pass scores the variants with.
struct FocusInputs<'a> {
    variants: &'a crate::focus::Variants,
    doc_ids: &'a [Arc<str>],
    exact: Option<&'a ExactIndex>,
    bm25: Option<&'a index::bm25::Bm25>,
    /// The reranker's lists of the full request and each sentence left out.
    reranked: Option<&'a Run>,
}

/// The reranker's pass of the focus (`[analysis] query_focus_reranker`): each query's pool as
/// the full request's reranking holds it, reranked with each sentence left out (and the full
/// request again, so that every variant is scored alike), combined as the run combines.
#[allow(clippy::too_many_arguments)]
fn rerank_variants(
    variants: &crate::focus::Variants,
    queries: &[&eval::Query],
    reranked: &Run,
    first: &Run,
    rr: &crate::config::RerankerSettings,
    model: &dyn reranker::Reranker,
    docs: &HashMap<&str, &str>,
    timings: &mut Vec<StageTiming>,
) -> Result<Run> {
    let started = Instant::now();
    let (mut pools, mut firsts, mut texts) = (Run::default(), Run::default(), HashMap::new());
    for q in queries {
        let Some(pool) = reranked.get(&q.id) else {
            continue;
        };
        for (id, text) in variants.leave_one_out(&q.id) {
            pools.insert(id.to_owned(), pool.to_vec());
            firsts.insert(id.to_owned(), first.get(&q.id).unwrap_or_default().to_vec());
            texts.insert(id.to_owned(), text.to_owned());
        }
    }
    let pool = reranker::Pool {
        depth: usize::MAX,
        oracle: None,
    };
    let pairs = stages::pool_pairs(&pools, &pool);
    let bar = crate::progress::bar(pairs as u64, "focus rerank");
    let out = model.rerank_run(
        &pools,
        &texts,
        &|id| docs.get(id).map(|t| (*t).to_owned()),
        &pool,
        &|done| bar.set_position(done as u64),
    )?;
    bar.finish_and_clear();
    let out = match rr.combine {
        Combine::Replace => out,
        Combine::Interpolate => reranker::interpolate(&firsts, &out, rr.weight),
    };
    timings.push(StageTiming::new(
        "focus rerank",
        started,
        format!("{pairs} pairs: each pool with each sentence left out"),
    ));
    summary(timings.last());
    Ok(out)
}

fn query_focus(
    settings: &Settings,
    vectors: Option<&mut Vectors>,
    inputs: &FocusInputs<'_>,
    qrels: &eval::Qrels,
    timings: &mut Vec<StageTiming>,
) -> Result<crate::focus::Focus> {
    use crate::focus::{FocusStage, Scorer};
    let r = &settings.retriever;
    let (variants, doc_ids) = (inputs.variants, inputs.doc_ids);
    // The variants embedded as queries are (same model, prompt and cache, resumable).
    let (exact, bm25) = (inputs.exact, inputs.bm25);
    let query_vectors = match (exact, vectors) {
        (Some(_), Some(vectors)) => {
            let ids: Vec<&str> = variants.ids.iter().map(String::as_str).collect();
            let mut v = vectors.embed_cached(
                &settings.cache,
                "focus",
                &vectors.key(Kind::Query),
                &ids,
                &variants.texts,
                Kind::Query,
                timings,
            )?;
            if vectors.normalize() {
                for row in v.chunks_exact_mut(vectors.dim()) {
                    embedder::normalize(row);
                }
            }
            Some((v, vectors.dim()))
        }
        _ => None,
    };
    let dense = exact
        .zip(query_vectors.as_ref())
        .map(|(index, (v, dim))| Scorer::Dense {
            index,
            vectors: v,
            dim: *dim,
        });
    let sparse = bm25.map(|bm25| Scorer::Bm25 {
        bm25,
        texts: &variants.texts,
    });
    let stage = |name: &str, scorer, depth| FocusStage {
        name: name.to_owned(),
        scorer,
        top_n: r.top_n,
        depth,
    };
    let stages = match (dense, sparse) {
        (Some(d), Some(s)) => vec![
            stage("dense", d, r.fusion_depth),
            stage("bm25", s, r.fusion_depth),
            stage(
                "retriever",
                Scorer::Fused {
                    parts: [0, 1],
                    rrf_k: r.rrf_k,
                    depth: r.fusion_depth,
                },
                r.top_n,
            ),
        ],
        (Some(one), None) | (None, Some(one)) => vec![stage("retriever", one, r.top_n)],
        (None, None) => bail!("query focus needs a first stage of the run's own"),
    };
    let mut stages = stages;
    if let (Some(run), Some(rr)) = (inputs.reranked, &settings.reranker) {
        stages.push(FocusStage {
            name: "reranker".to_owned(),
            scorer: Scorer::Pool {
                run,
                ids: &variants.ids,
            },
            top_n: rr.top_n,
            depth: rr.top_n,
        });
    }
    let focus = crate::focus::analyse(&stages, variants, doc_ids, qrels, timings)?;
    summary(timings.last());
    Ok(focus)
}

/// The first stage's run, a hybrid's parts (each cut to the top N), and
/// the index's recall against exact search.
struct Retrieved {
    run: Run,
    parts: Vec<(&'static str, Run)>,
    index_recall: Option<report::IndexRecall>,
    /// The corpus's vectors (dense and hybrid) and BM25 index (BM25 and hybrid), for the
    /// focus pass.
    exact: Option<ExactIndex>,
    bm25: Option<index::bm25::Bm25>,
}

fn retrieve(
    settings: &Settings,
    vectors: Option<&mut Vectors>,
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
            let Some(vectors) = vectors else {
                bail!("a dense retriever needs an embedder");
            };
            Some(dense(
                settings, vectors, doc_ids, doc_texts, queries, depth, timings,
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
            Some((lists, bm25))
        }
    };
    let (sparse, bm25) = sparse.unzip();
    let mut run = Run::default();
    let index_recall = dense.as_ref().and_then(|d| d.index_recall.clone());
    let mut parts = Vec::new();
    if let (Some(d), Some(sp)) = (&dense, &sparse) {
        for (name, lists) in [("dense", &d.lists), ("bm25", sp)] {
            let mut part = Run::default();
            for (q, docs) in queries.iter().zip(lists) {
                let mut docs = docs.clone();
                eval::sort_trec(&mut docs);
                docs.truncate(r.top_n);
                part.insert(q.id.clone(), docs);
            }
            parts.push((name, part));
        }
    }
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
    Ok(Retrieved {
        run,
        parts,
        index_recall,
        exact: dense.map(|d| d.exact),
        bm25,
    })
}

struct Dense {
    lists: Vec<Vec<ScoredDoc>>,
    index_recall: Option<report::IndexRecall>,
    exact: ExactIndex,
}

/// Embeds (or reads from the cache) corpus and queries, indexes, searches.
fn dense(
    settings: &Settings,
    vectors: &mut Vectors,
    doc_ids: &[Arc<str>],
    doc_texts: &[String],
    queries: &[&eval::Query],
    depth: usize,
    timings: &mut Vec<StageTiming>,
) -> Result<Dense> {
    let dim = vectors.dim();
    let normalize = vectors.normalize();
    let ids: Vec<&str> = doc_ids.iter().map(|s| &**s).collect();
    let doc_key = vectors.key(Kind::Document);
    let mut docs = vectors.embed_cached(
        &settings.cache,
        "documents",
        &doc_key,
        &ids,
        doc_texts,
        Kind::Document,
        timings,
    )?;
    let q_ids: Vec<&str> = queries.iter().map(|q| q.id.as_str()).collect();
    let q_texts: Vec<String> = queries.iter().map(|q| q.text.clone()).collect();
    let mut query_vectors = vectors.embed_cached(
        &settings.cache,
        "queries",
        &vectors.key(Kind::Query),
        &q_ids,
        &q_texts,
        Kind::Query,
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
                &format!("{doc_key} normalize={normalize} hnsw={params:?}"),
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
                &format!("{doc_key} normalize={normalize}"),
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
        exact,
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

/// Paths of a finished run's outputs (for `compare`).
pub(crate) fn metrics_path(dir: &Path) -> PathBuf {
    dir.join("metrics.json")
}

/// A finished run's JSON output `name` (`metrics.json`, `results.json`),
/// read and parsed; errors name the file and ask whether `dir` is a run.
pub(crate) fn read_output(dir: &Path, name: &str) -> Result<serde_json::Value> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {} (is {} a `pipeline run` output directory?)",
            path.display(),
            dir.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))
}
