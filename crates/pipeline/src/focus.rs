//! Query focus (`[analysis] query_focus`, `pipeline run --query-focus`): which sentences of a
//! request carry each gold skill's intent, and what the rest costs each first stage.
//!
//! Every scored request is cut into sentences (`eval::sentences`). For each first stage of the
//! run (dense, BM25, and a hybrid's fusion) the request is retrieved again with each sentence
//! left out, and with each sentence alone, by the stage's own model, prompt and scoring over
//! the whole corpus. A variant's text is the request's characters without the sentence's span
//! (`text[:start] + text[end:]`) or the span alone (`text[start:end]`).
//!
//! Per sentence and gold skill: the gold's score and rank with the full request and without
//! the sentence, and its rank with the sentence alone; per sentence, the query's NDCG@10,
//! Recall@10 and Completeness@10 without it and alone. Every Δ is positive where the sentence
//! helps: `delta_score` = full − without, `delta_rank` = rank without − rank full, and the
//! metrics' Δs full − without. A gold's intent sentence is the one whose removal lowers its
//! score most (the first of equals).
//!
//! Dense and BM25 score every document, so a gold's rank is exact over the corpus (trec_eval's
//! order: score descending, id descending), whatever index the run searched with; the
//! metrics come from the same ranking cut at the stage's top N. A hybrid's fusion is
//! reciprocal rank fusion of its parts' top `fusion_depth`, as the run fuses them; a gold
//! outside the fused list has score 0 and no rank. A reranker (`[analysis]
//! query_focus_reranker`) reranks its pool, fixed from the full request, with each sentence
//! left out (leave-one-out only: no sentence alone); a gold outside the pool has no score and
//! no rank.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use eval::metrics::{Metric, Options, evaluate};
use eval::sentences::Sentence;
use eval::{Qrels, Run, ScoredDoc};
use index::ExactIndex;
use index::bm25::Bm25;
use rayon::prelude::*;
use serde_json::{Value, json};

use crate::ranking::{SEED, TRIALS};
use crate::report::StageTiming;

/// The cut-off of the focus pass's metrics.
const K: usize = 10;

/// One first stage, as the focus pass scores a variant with it.
pub(crate) enum Scorer<'a> {
    /// Inner products with the corpus's vectors; `vectors` holds each variant's query vector
    /// (normalised as the run normalises them), row after row in [`Variants`] order.
    Dense {
        index: &'a ExactIndex,
        vectors: &'a [f32],
        dim: usize,
    },
    /// BM25 over the corpus (a document with a positive score is retrieved, as in the run).
    Bm25 { bm25: &'a Bm25, texts: &'a [String] },
    /// Reciprocal rank fusion of two earlier stages' lists (their indexes in the stage list),
    /// each cut at `depth`, as the run fuses them.
    Fused {
        parts: [usize; 2],
        rrf_k: f64,
        depth: usize,
    },
    /// A reranker's lists of the variants (by [`Variants`] id), its pool fixed from the full
    /// request: the full request and each sentence left out (no sentence alone). A gold skill
    /// outside the pool has no score and no rank.
    Pool { run: &'a Run, ids: &'a [String] },
}

/// A first stage of the run: its name in the run's outputs, its scorer, its top N, and how
/// deep its list is kept (a hybrid's part: its fusion depth).
pub(crate) struct FocusStage<'a> {
    pub(crate) name: String,
    pub(crate) scorer: Scorer<'a>,
    pub(crate) top_n: usize,
    pub(crate) depth: usize,
}

/// Every request's sentences and the texts of its variants: the full request, then each
/// sentence left out, then each sentence alone.
pub(crate) struct Variants {
    /// Per query with a sentence: its id, its sentences, the index of its first variant.
    queries: Vec<(String, Vec<Sentence>, usize)>,
    /// Each variant's id (`QUERY`, `QUERY#-I` without sentence I, `QUERY#I` sentence I alone).
    pub(crate) ids: Vec<String>,
    /// Each variant's text.
    pub(crate) texts: Vec<String>,
}

impl Variants {
    /// The full request and each sentence left out of query `id`: (variant id, text).
    pub(crate) fn leave_one_out(&self, id: &str) -> impl Iterator<Item = (&str, &str)> {
        let found = self.queries.iter().find(|(q, _, _)| q == id);
        let range = found.map_or(0..0, |(_, sentences, first)| {
            *first..first + 1 + sentences.len()
        });
        range.map(|v| (self.ids[v].as_str(), self.texts[v].as_str()))
    }

    pub(crate) fn new(queries: &[&eval::Query]) -> Self {
        let mut variants = Self {
            queries: Vec::new(),
            ids: Vec::new(),
            texts: Vec::new(),
        };
        for q in queries {
            let sentences = eval::sentences::split(&q.text);
            if sentences.is_empty() {
                continue;
            }
            let chars: Vec<char> = q.text.chars().collect();
            variants
                .queries
                .push((q.id.clone(), sentences.clone(), variants.ids.len()));
            variants.ids.push(q.id.clone());
            variants.texts.push(q.text.clone());
            for (i, s) in sentences.iter().enumerate() {
                variants.ids.push(format!("{}#-{i}", q.id));
                let kept = chars[..s.start].iter().chain(&chars[s.end..]);
                variants.texts.push(kept.collect());
            }
            for (i, s) in sentences.iter().enumerate() {
                variants.ids.push(format!("{}#{i}", q.id));
                variants.texts.push(chars[s.start..s.end].iter().collect());
            }
        }
        variants
    }
}

/// A gold skill's standing in one ranking.
#[derive(Debug, Clone, Copy)]
struct Standing {
    /// NaN for a gold skill outside the corpus.
    score: f64,
    /// 1-based; `None` outside a fused list (or the corpus).
    rank: Option<usize>,
}

/// One variant as one stage ranks it.
struct Ranked {
    gold: Vec<Standing>,
    /// NDCG@10, Recall@10, Completeness@10.
    metrics: [f64; 3],
}

/// One query's variants under one stage.
struct QueryFocus {
    full: Ranked,
    without: Vec<Ranked>,
    alone: Vec<Ranked>,
}

/// One query's variants under every stage.
struct Scored<'v> {
    id: &'v str,
    sentences: &'v [Sentence],
    gold: Vec<String>,
    stages: Vec<QueryFocus>,
}

/// What the pass found: focus.json's value and focus.tsv's text.
pub(crate) struct Focus {
    pub(crate) json: Value,
    pub(crate) tsv: String,
    /// Per stage: full-request NDCG@10, focus headroom, the share of single-sentence wins and
    /// concentration (means over queries), for the run's summary.
    pub(crate) headline: Vec<(String, [f64; 4])>,
}

/// Runs the pass over `variants` for every stage; `qrels` decide the gold skills (grade ≥ 1).
pub(crate) fn analyse(
    stages: &[FocusStage<'_>],
    variants: &Variants,
    doc_ids: &[Arc<str>],
    qrels: &Qrels,
    timings: &mut Vec<StageTiming>,
) -> Result<Focus> {
    let started = Instant::now();
    let position: std::collections::HashMap<&str, usize> =
        doc_ids.iter().enumerate().map(|(i, d)| (&**d, i)).collect();
    let scored: Vec<Scored<'_>> = variants
        .queries
        .par_iter()
        .filter_map(|(id, sentences, first)| {
            let judged = qrels.get(id)?;
            let mut gold: Vec<String> = judged
                .iter()
                .filter(|(_, g)| **g >= 1)
                .map(|(d, _)| d.clone())
                .collect();
            if gold.is_empty() {
                return None;
            }
            gold.sort_unstable();
            let gold_at: Vec<Option<usize>> = gold
                .iter()
                .map(|g| position.get(g.as_str()).copied())
                .collect();
            let mut one = Qrels::default();
            for (d, g) in judged {
                one.insert(id.clone(), d.clone(), *g);
            }
            let range = *first..first + 1 + 2 * sentences.len();
            Some(
                rank_query(stages, range, &gold_at, doc_ids, &one, id).map(|per_stage| Scored {
                    id,
                    sentences,
                    gold,
                    stages: per_stage,
                }),
            )
        })
        .collect::<Result<_>>()?;

    let mut tsv = String::from(
        "stage\tquery_id\tsentence\tstart\tend\tskill_id\tscore\tdelta_score\trank\tdelta_rank\t\
         alone_score\talone_rank\tintent\tdelta_ndcg@10\tdelta_recall@10\tdelta_completeness@10\t\
         alone_ndcg@10\n",
    );
    let mut json_stages = serde_json::Map::new();
    let mut headline = Vec::new();
    for (s, stage) in stages.iter().enumerate() {
        let mut rows = Vec::new();
        for q in &scored {
            let f = &q.stages[s];
            let intents: Vec<Option<usize>> = (0..q.gold.len()).map(|g| intent(f, g)).collect();
            for (i, sentence) in q.sentences.iter().enumerate() {
                for (g, skill) in q.gold.iter().enumerate() {
                    let (full, without, alone) =
                        (f.full.gold[g], f.without[i].gold[g], f.alone[i].gold[g]);
                    let _ = writeln!(
                        tsv,
                        "{}\t{}\t{i}\t{}\t{}\t{skill}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                        stage.name,
                        q.id,
                        sentence.start,
                        sentence.end,
                        value(full.score),
                        value(full.score - without.score),
                        cell(full.rank),
                        delta_rank(full.rank, without.rank),
                        value(alone.score),
                        cell(alone.rank),
                        u8::from(intents[g] == Some(i)),
                        value(f.full.metrics[0] - f.without[i].metrics[0]),
                        value(f.full.metrics[1] - f.without[i].metrics[1]),
                        value(f.full.metrics[2] - f.without[i].metrics[2]),
                        value(f.alone[i].metrics[0]),
                    );
                }
            }
            rows.push(query_json(q, f, &intents));
        }
        let summary = summarise(&scored, s);
        let mean = |key: &str| summary[key]["mean"].as_f64().unwrap_or(f64::NAN);
        headline.push((
            stage.name.clone(),
            [
                mean("ndcg@10"),
                mean("focus_headroom"),
                mean("single_sentence_wins"),
                mean("concentration"),
            ],
        ));
        json_stages.insert(
            stage.name.clone(),
            json!({"top_n": stage.top_n, "summary": summary, "queries": rows}),
        );
    }
    let json = json!({
        "format": 1,
        "k": K,
        "about": "Each request's sentences (character offsets [start, end)) left out and alone, \
                  retrieved by each first stage over the whole corpus. Every delta is positive \
                  where the sentence helps: score and metrics full minus without, rank without \
                  minus full. A gold skill's intent sentence is the one whose removal lowers \
                  its score most. Intervals: 95% percentile bootstrap over queries.",
        "bootstrap": {"resamples": TRIALS, "seed": SEED, "level": 0.95},
        "queries": scored.iter().map(|q| json!({
            "query_id": q.id,
            "sentences": q.sentences.iter().map(|s| json!([s.start, s.end])).collect::<Vec<_>>(),
            "gold": q.gold,
        })).collect::<Vec<_>>(),
        "stages": json_stages,
    });
    timings.push(StageTiming::new(
        "focus",
        started,
        format!(
            "{} queries, {} sentences, {} stage(s)",
            scored.len(),
            scored.iter().map(|q| q.sentences.len()).sum::<usize>(),
            stages.len()
        ),
    ));
    Ok(Focus {
        json,
        tsv,
        headline,
    })
}

/// A number for focus.tsv: empty where there is none (NaN).
fn value(x: f64) -> String {
    if x.is_nan() {
        String::new()
    } else {
        x.to_string()
    }
}

fn cell(rank: Option<usize>) -> String {
    rank.map_or_else(String::new, |r| r.to_string())
}

fn delta_rank(full: Option<usize>, without: Option<usize>) -> String {
    match (full, without) {
        (Some(f), Some(w)) => (w as i64 - f as i64).to_string(),
        _ => String::new(),
    }
}

/// A number for JSON: `null` for NaN.
fn number(x: f64) -> Value {
    if x.is_finite() { json!(x) } else { Value::Null }
}

/// The sentence whose removal lowers gold `g`'s score most (the first of equals).
fn intent(f: &QueryFocus, g: usize) -> Option<usize> {
    let full = f.full.gold[g].score;
    let mut best: Option<(usize, f64)> = None;
    for (i, without) in f.without.iter().enumerate() {
        let d = full - without.gold[g].score;
        if d.is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| d > b) {
            best = Some((i, d));
        }
    }
    best.map(|(i, _)| i)
}

/// Every stage's ranking of one query's variants (`range`: the full request, each sentence
/// left out, each alone).
fn rank_query(
    stages: &[FocusStage<'_>],
    range: std::ops::Range<usize>,
    gold_at: &[Option<usize>],
    doc_ids: &[Arc<str>],
    qrels: &Qrels,
    query: &str,
) -> Result<Vec<QueryFocus>> {
    // Each stage's list of every variant, for the stages that fuse them.
    let mut lists: Vec<Vec<Vec<ScoredDoc>>> = Vec::with_capacity(stages.len());
    let mut out = Vec::with_capacity(stages.len());
    for stage in stages {
        let mut ranked = Vec::with_capacity(range.len());
        let mut stage_lists = Vec::with_capacity(range.len());
        for (v, variant) in range.clone().enumerate() {
            let (gold, list) = match &stage.scorer {
                Scorer::Dense {
                    index,
                    vectors,
                    dim,
                } => {
                    let row = &vectors[variant * dim..(variant + 1) * dim];
                    let scores = index.scores(row)?;
                    from_scores(&scores, gold_at, doc_ids, stage.depth, false)
                }
                Scorer::Bm25 { bm25, texts } => {
                    let scores = bm25.scores(&texts[variant]);
                    from_scores(&scores, gold_at, doc_ids, stage.depth, true)
                }
                Scorer::Fused {
                    parts,
                    rrf_k,
                    depth,
                } => {
                    let cut = |p: usize| -> Vec<ScoredDoc> {
                        lists[p][v].iter().take(*depth).cloned().collect()
                    };
                    let (a, b) = (cut(parts[0]), cut(parts[1]));
                    let fused =
                        index::fusion::reciprocal_rank_fusion(&[&a, &b], *rrf_k, stage.depth);
                    (in_list(&fused, gold_at, doc_ids, 0.0), fused)
                }
                Scorer::Pool { run, ids } => match run.get(&ids[variant]) {
                    Some(list) => {
                        let mut list = list.to_vec();
                        eval::sort_trec(&mut list);
                        (in_list(&list, gold_at, doc_ids, f64::NAN), list)
                    }
                    None => {
                        // Not reranked (a sentence alone): nothing to say.
                        ranked.push(Ranked {
                            gold: vec![
                                Standing {
                                    score: f64::NAN,
                                    rank: None,
                                };
                                gold_at.len()
                            ],
                            metrics: [f64::NAN; 3],
                        });
                        stage_lists.push(Vec::new());
                        continue;
                    }
                },
            };
            let mut top = list.clone();
            eval::sort_trec(&mut top);
            top.truncate(stage.top_n);
            let mut run = Run::default();
            run.insert(query.to_owned(), top);
            ranked.push(Ranked {
                gold,
                metrics: metrics(qrels, &run),
            });
            stage_lists.push(list);
        }
        lists.push(stage_lists);
        let sentences = (range.len() - 1) / 2;
        let mut ranked = ranked.into_iter();
        let full = ranked
            .next()
            .expect("the full request is the first variant");
        let without: Vec<Ranked> = ranked.by_ref().take(sentences).collect();
        let alone: Vec<Ranked> = ranked.collect();
        out.push(QueryFocus {
            full,
            without,
            alone,
        });
    }
    Ok(out)
}

/// The gold skills' standings in a ranked `list` (a fused list, a reranked pool): a gold
/// outside it scores `absent` and has no rank; one outside the corpus scores NaN.
fn in_list(
    list: &[ScoredDoc],
    gold_at: &[Option<usize>],
    doc_ids: &[Arc<str>],
    absent: f64,
) -> Vec<Standing> {
    gold_at
        .iter()
        .map(|at| {
            let found = at.and_then(|i| list.iter().position(|d| d.id == doc_ids[i]));
            Standing {
                score: match (at, found) {
                    (None, _) => f64::NAN,
                    (Some(_), found) => found.map_or(absent, |p| list[p].score),
                },
                rank: found.map(|p| p + 1),
            }
        })
        .collect()
}

/// The gold skills' standings in every document's `scores` (ranks exact over the corpus, in
/// trec_eval's order), and the top `depth` (with `positive`, only documents scoring above 0).
fn from_scores(
    scores: &[f32],
    gold_at: &[Option<usize>],
    doc_ids: &[Arc<str>],
    depth: usize,
    positive: bool,
) -> (Vec<Standing>, Vec<ScoredDoc>) {
    let before = |j: usize, i: usize| {
        scores[j] > scores[i] || (scores[j] == scores[i] && doc_ids[j] > doc_ids[i])
    };
    let gold = gold_at
        .iter()
        .map(|at| match at {
            Some(i) => Standing {
                score: f64::from(scores[*i]),
                rank: Some(1 + (0..scores.len()).filter(|&j| before(j, *i)).count()),
            },
            None => Standing {
                score: f64::NAN,
                rank: None,
            },
        })
        .collect();
    let mut list: Vec<ScoredDoc> = scores
        .iter()
        .enumerate()
        .filter(|(_, s)| !positive || **s > 0.0)
        .map(|(i, &s)| ScoredDoc {
            id: Arc::clone(&doc_ids[i]),
            score: f64::from(s),
        })
        .collect();
    let depth = depth.min(list.len());
    if depth > 0 && depth < list.len() {
        list.select_nth_unstable_by(depth - 1, eval::trec_order);
    }
    list.truncate(depth);
    eval::sort_trec(&mut list);
    (gold, list)
}

/// NDCG@10, Recall@10 and Completeness@10 of a one-query run.
fn metrics(qrels: &Qrels, run: &Run) -> [f64; 3] {
    let options = Options::default()
        .with_cutoffs(&[K])
        .expect("10 is a cut-off");
    let e = evaluate(qrels, run, &options);
    let value = |m: Metric| {
        let i = e.metrics.iter().position(|x| *x == m);
        match (i, e.per_query.first()) {
            (Some(i), Some(q)) => q.values[i],
            _ => 0.0,
        }
    };
    [
        value(Metric::Ndcg(K)),
        value(Metric::Recall(K)),
        value(Metric::Completeness(K)),
    ]
}

fn standing_json(s: Standing) -> Value {
    json!({"score": number(s.score), "rank": s.rank})
}

fn metrics_json(m: [f64; 3]) -> Value {
    json!({"ndcg@10": m[0], "recall@10": m[1], "completeness@10": m[2]})
}

/// Per sentence: what removing it, or keeping it alone, does; the share of the |Δ gold
/// score| each sentence carries.
fn query_json(q: &Scored<'_>, f: &QueryFocus, intents: &[Option<usize>]) -> Value {
    let (concentration, entropy) = concentration(q, f);
    let best = best_sentence(f);
    json!({
        "query_id": q.id,
        "full": metrics_json(f.full.metrics),
        "without": f.without.iter().map(|r| metrics_json(r.metrics)).collect::<Vec<_>>(),
        "alone": f.alone.iter().map(|r| metrics_json(r.metrics)).collect::<Vec<_>>(),
        "best_sentence": best.map(|(i, _)| i),
        "best_sentence_ndcg@10": best.map(|(_, n)| n),
        "concentration": number(concentration),
        "entropy": number(entropy),
        "gold": q.gold.iter().enumerate().map(|(g, skill)| json!({
            "skill_id": skill,
            "full": standing_json(f.full.gold[g]),
            "without": f.without.iter().map(|r| standing_json(r.gold[g])).collect::<Vec<_>>(),
            "alone": f.alone.iter().map(|r| standing_json(r.gold[g])).collect::<Vec<_>>(),
            "intent": intents[g],
            "position": intents[g].map(|i| position(i, q.sentences.len())),
        })).collect::<Vec<_>>(),
    })
}

/// The sentence that alone gives the best NDCG@10 (the first of equals), and that NDCG.
fn best_sentence(f: &QueryFocus) -> Option<(usize, f64)> {
    let mut best: Option<(usize, f64)> = None;
    for (i, r) in f.alone.iter().enumerate() {
        if r.metrics[0].is_nan() {
            continue;
        }
        if best.is_none_or(|(_, b)| r.metrics[0] > b) {
            best = Some((i, r.metrics[0]));
        }
    }
    best
}

/// The share of the query's total |Δ gold score| carried by its top sentence, and the
/// normalised entropy of the sentences' shares (0: one sentence carries it all; 1: spread
/// evenly); NaN where no sentence changes any gold's score.
fn concentration(q: &Scored<'_>, f: &QueryFocus) -> (f64, f64) {
    let totals: Vec<f64> = f
        .without
        .iter()
        .map(|r| {
            (0..q.gold.len())
                .map(|g| (f.full.gold[g].score - r.gold[g].score).abs())
                .filter(|d| d.is_finite())
                .sum()
        })
        .collect();
    let sum: f64 = totals.iter().sum();
    if sum <= 0.0 || !sum.is_finite() {
        return (f64::NAN, f64::NAN);
    }
    let top = totals.iter().copied().fold(0.0, f64::max);
    let entropy = if totals.len() < 2 {
        0.0
    } else {
        let h: f64 = totals
            .iter()
            .map(|t| t / sum)
            .filter(|p| *p > 0.0)
            .map(|p| -p * p.ln())
            .sum();
        h / (totals.len() as f64).ln()
    };
    (top / sum, entropy)
}

/// Where sentence `i` of `n` stands.
fn position(i: usize, n: usize) -> &'static str {
    match i {
        _ if n == 1 => "only",
        0 => "first",
        _ if i + 1 == n => "last",
        _ => "middle",
    }
}

/// The mean of `values` with its 95% bootstrap interval over queries.
fn stat(values: &[f64]) -> Value {
    if values.is_empty() {
        return json!({"mean": null, "ci": [null, null], "n": 0});
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    let (lo, hi) = eval::stats::bootstrap_interval(values, TRIALS, 0.95, SEED);
    json!({"mean": mean, "ci": [lo, hi], "n": values.len()})
}

/// One stage's summary over queries.
fn summarise(scored: &[Scored<'_>], s: usize) -> Value {
    let of = |f: &dyn Fn(&Scored<'_>, &QueryFocus) -> Option<f64>| -> Vec<f64> {
        scored
            .iter()
            .filter_map(|q| f(q, &q.stages[s]))
            .filter(|x| x.is_finite())
            .collect()
    };
    let full = |m: usize| of(&|_, f| Some(f.full.metrics[m]));
    let best = |f: &QueryFocus| best_sentence(f).map(|(_, n)| n);
    let mut by_position: Vec<(&str, usize, usize, f64)> = ["first", "middle", "last", "only"]
        .iter()
        .map(|p| (*p, 0, 0, 0.0))
        .collect();
    let (mut shared, mut separate) = (Vec::new(), Vec::new());
    let mut golds = 0;
    for q in scored {
        let f = &q.stages[s];
        let intents: Vec<Option<usize>> = (0..q.gold.len()).map(|g| intent(f, g)).collect();
        for (g, at) in intents.iter().enumerate() {
            let Some(i) = at else { continue };
            golds += 1;
            let p = position(*i, q.sentences.len());
            let entry = by_position
                .iter_mut()
                .find(|e| e.0 == p)
                .expect("a position");
            entry.1 += 1;
            entry.2 += usize::from(f.full.gold[g].rank.is_some_and(|r| r <= K));
            entry.3 += f.full.metrics[0];
        }
        if q.gold.len() >= 2 && intents.iter().all(Option::is_some) {
            let one = intents.windows(2).all(|w| w[0] == w[1]);
            let kind = if one { &mut shared } else { &mut separate };
            kind.push(f.full.metrics[2]);
        }
    }
    json!({
        "queries": scored.len(),
        "ndcg@10": stat(&full(0)),
        "recall@10": stat(&full(1)),
        "completeness@10": stat(&full(2)),
        "best_sentence_ndcg@10": stat(&of(&|_, f| best(f))),
        "focus_headroom": stat(&of(&|_, f| best(f).map(|b| b - f.full.metrics[0]))),
        "single_sentence_wins": stat(&of(&|_, f| best(f).map(|b| f64::from(u8::from(b > f.full.metrics[0]))))),
        "concentration": stat(&of(&|q, f| Some(concentration(q, f).0))),
        "entropy": stat(&of(&|q, f| Some(concentration(q, f).1))),
        "position": by_position.iter().filter(|e| e.1 > 0).map(|(p, n, found, ndcg)| (p.to_string(), json!({
            "gold": n,
            "share": *n as f64 / golds.max(1) as f64,
            "found@10": *found as f64 / *n as f64,
            "ndcg@10": ndcg / *n as f64,
        }))).collect::<serde_json::Map<_, _>>(),
        "multi_skill": {
            "one_sentence": {"queries": shared.len(), "completeness@10": stat(&shared)},
            "several_sentences": {"queries": separate.len(), "completeness@10": stat(&separate)},
        },
    })
}
