//! Retrieval metrics with trec_eval's semantics (as pytrec_eval computes them).
//!
//! - A ranking is the run's documents ordered by [`trec_order`]
//!   (score descending, ties by document id descending); the rank column of a
//!   run file plays no part.
//! - A document is relevant when its grade is ≥ 1. NDCG's gain is the grade
//!   itself, discounted by log2(rank + 1); the ideal ranking holds every
//!   relevant judged document.
//! - P@k divides by k; Recall@k and MAP@k divide by the number of relevant
//!   documents (MAP@k is trec_eval's `map_cut`).
//! - A query is scored when it is in the run and has at least one judgement
//!   of any grade; a query judged only non-relevant scores 0 everywhere. Queries
//!   with no judgements are skipped, and so are judged queries missing from the
//!   run unless `Options::complete` is set (trec_eval's `-c`), exactly as
//!   pytrec_eval does.
//!
//! Completeness@k (the share of queries with every relevant document in the top
//! k), HitRate@k (trec_eval's `success`), MRR (`recip_rank`, no cut-off), ERR@k
//! (Chapelle et al. 2009) and RBP (Moffat and Zobel 2008) complete the set.

use std::fmt;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::qrels::{Judgements, Qrels};
use crate::run::{Run, ScoredDoc, trec_order};

/// One measure with its parameter.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Metric {
    /// NDCG at a cut-off (trec_eval `ndcg_cut`).
    Ndcg(usize),
    /// Recall at a cut-off.
    Recall(usize),
    /// Mean average precision cut at k (trec_eval `map_cut`).
    Map(usize),
    /// Precision at a cut-off (trec_eval `P`).
    Precision(usize),
    /// 1 when every relevant document is in the top k, else 0.
    Completeness(usize),
    /// 1 when any relevant document is in the top k (trec_eval `success`).
    HitRate(usize),
    /// Expected reciprocal rank at a cut-off, graded.
    Err(usize),
    /// Reciprocal rank of the first relevant document (trec_eval `recip_rank`).
    Mrr,
    /// Rank-biased precision with persistence p, graded, over the whole ranking.
    Rbp(f64),
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ndcg(k) => write!(f, "NDCG@{k}"),
            Self::Recall(k) => write!(f, "Recall@{k}"),
            Self::Map(k) => write!(f, "MAP@{k}"),
            Self::Precision(k) => write!(f, "Precision@{k}"),
            Self::Completeness(k) => write!(f, "Completeness@{k}"),
            Self::HitRate(k) => write!(f, "HitRate@{k}"),
            Self::Err(k) => write!(f, "ERR@{k}"),
            Self::Mrr => write!(f, "MRR"),
            Self::Rbp(p) => write!(f, "RBP(p={p})"),
        }
    }
}

/// What to compute.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    cutoffs: Vec<usize>,
    rbp_persistence: f64,
    err_max_grade: Option<i64>,
    complete: bool,
}

impl Default for Options {
    /// The official cut-offs 5, 10 and 15; RBP with p = 0.8.
    fn default() -> Self {
        Self {
            cutoffs: vec![5, 10, 15],
            rbp_persistence: 0.8,
            err_max_grade: None,
            complete: false,
        }
    }
}

impl Options {
    /// Sets the cut-offs: positive, duplicates removed, sorted.
    pub fn with_cutoffs(mut self, cutoffs: &[usize]) -> Result<Self> {
        if cutoffs.is_empty() || cutoffs.contains(&0) {
            return Err(Error::Invalid(format!(
                "cut-offs must be positive integers, at least one; got {cutoffs:?}"
            )));
        }
        let mut cutoffs = cutoffs.to_vec();
        cutoffs.sort_unstable();
        cutoffs.dedup();
        self.cutoffs = cutoffs;
        Ok(self)
    }

    /// Sets RBP's persistence p, 0 < p < 1.
    pub fn with_rbp_persistence(mut self, p: f64) -> Result<Self> {
        if !(p > 0.0 && p < 1.0) {
            return Err(Error::Invalid(format!(
                "RBP persistence must be in (0, 1); got {p}"
            )));
        }
        self.rbp_persistence = p;
        Ok(self)
    }

    /// Sets the grade that ERR and RBP treat as fully relevant. By default it
    /// is the highest grade in the qrels (so binary qrels give a relevant
    /// document stopping probability 1/2 in ERR, and gain 1 in RBP).
    pub fn with_max_grade(mut self, grade: i64) -> Result<Self> {
        if grade < 1 {
            return Err(Error::Invalid(format!(
                "the maximum grade must be at least 1; got {grade}"
            )));
        }
        self.err_max_grade = Some(grade);
        Ok(self)
    }

    /// Scores judged queries missing from the run as 0 instead of skipping
    /// them (trec_eval's `-c`; pytrec_eval, and so the official numbers, skip them).
    pub fn with_complete(mut self, complete: bool) -> Self {
        self.complete = complete;
        self
    }

    /// The cut-offs, ascending.
    pub fn cutoffs(&self) -> &[usize] {
        &self.cutoffs
    }

    /// Every metric computed, in report order: per cut-off NDCG, Recall, MAP,
    /// Precision, Completeness, HitRate, ERR; then MRR and RBP.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut metrics = Vec::with_capacity(self.cutoffs.len() * 7 + 2);
        for &k in &self.cutoffs {
            metrics.extend([
                Metric::Ndcg(k),
                Metric::Recall(k),
                Metric::Map(k),
                Metric::Precision(k),
                Metric::Completeness(k),
                Metric::HitRate(k),
                Metric::Err(k),
            ]);
        }
        metrics.extend([Metric::Mrr, Metric::Rbp(self.rbp_persistence)]);
        metrics
    }
}

/// One query's scores, aligned with [`Evaluation::metrics`].
#[derive(Debug, Clone, PartialEq)]
pub struct QueryScores {
    /// The query.
    pub query_id: String,
    /// One value per metric.
    pub values: Vec<f64>,
}

/// The result of scoring a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// The metrics, in report order.
    pub metrics: Vec<Metric>,
    /// Per-query scores, by query id in byte order.
    pub per_query: Vec<QueryScores>,
    /// Mean over the scored queries, one per metric (0 when none was scored).
    pub mean: Vec<f64>,
    /// Queries in the run without any judgement (skipped).
    pub unjudged_in_run: usize,
    /// Judged queries absent from the run (skipped, or scored 0 with `complete`).
    pub missing_from_run: usize,
}

impl Evaluation {
    /// The mean of one metric, if it was computed.
    pub fn mean_of(&self, metric: Metric) -> Option<f64> {
        self.metrics
            .iter()
            .position(|m| *m == metric)
            .map(|i| self.mean[i])
    }

    /// The summary with the official SkillRet key names: per cut-off `NDCG@k`,
    /// `Recall@k`, `MAP@k`, `Precision@k`, `Completeness@k`, then `HitRate@k`,
    /// then `MRR` and `queries`. With `extended`, `ERR@k` and `RBP(p=…)` too.
    pub fn summary_json(&self, extended: bool) -> serde_json::Map<String, serde_json::Value> {
        let mut map = serde_json::Map::new();
        let cutoffs: Vec<usize> = self
            .metrics
            .iter()
            .filter_map(|m| match m {
                Metric::Ndcg(k) => Some(*k),
                _ => None,
            })
            .collect();
        let mut put = |metric: Metric| {
            if let Some(v) = self.mean_of(metric) {
                map.insert(metric.to_string(), v.into());
            }
        };
        for &k in &cutoffs {
            for metric in [
                Metric::Ndcg(k),
                Metric::Recall(k),
                Metric::Map(k),
                Metric::Precision(k),
                Metric::Completeness(k),
            ] {
                put(metric);
            }
        }
        for &k in &cutoffs {
            put(Metric::HitRate(k));
        }
        put(Metric::Mrr);
        if extended {
            for &k in &cutoffs {
                put(Metric::Err(k));
            }
            for metric in &self.metrics {
                if let Metric::Rbp(_) = metric {
                    put(*metric);
                }
            }
        }
        map.insert("queries".to_owned(), self.per_query.len().into());
        map
    }
}

/// Scores `run` against `qrels`.
pub fn evaluate(qrels: &Qrels, run: &Run, options: &Options) -> Evaluation {
    let metrics = options.metrics();
    let max_grade = options
        .err_max_grade
        .unwrap_or_else(|| qrels.max_grade().max(1));
    let run_queries = run.query_ids();
    let mut per_query: Vec<QueryScores> = run_queries
        .par_iter()
        .filter_map(|&query| {
            let judged = qrels.get(query).filter(|j| !j.is_empty())?;
            let docs = run.get(query).unwrap_or_default();
            Some(QueryScores {
                query_id: query.to_owned(),
                values: score_query(judged, docs, &metrics, max_grade),
            })
        })
        .collect();
    let unjudged_in_run = run_queries.len() - per_query.len();
    let mut missing_from_run = 0;
    for query in qrels.query_ids() {
        let judged = qrels.get(query).is_some_and(|j| !j.is_empty());
        if judged && run.get(query).is_none() {
            missing_from_run += 1;
            if options.complete {
                per_query.push(QueryScores {
                    query_id: query.to_owned(),
                    values: vec![0.0; metrics.len()],
                });
            }
        }
    }
    per_query.sort_unstable_by(|a, b| a.query_id.cmp(&b.query_id));
    let mut mean = vec![0.0; metrics.len()];
    for scores in &per_query {
        for (sum, v) in mean.iter_mut().zip(&scores.values) {
            *sum += v;
        }
    }
    if !per_query.is_empty() {
        let n = per_query.len() as f64;
        for v in &mut mean {
            *v /= n;
        }
    }
    Evaluation {
        metrics,
        per_query,
        mean,
        unjudged_in_run,
        missing_from_run,
    }
}

/// All metrics of one judged query.
fn score_query(
    judged: &Judgements,
    docs: &[ScoredDoc],
    metrics: &[Metric],
    max_grade: i64,
) -> Vec<f64> {
    // The deepest cut-off: ranks below it matter only where a relevant
    // document sits (MRR, RBP).
    let depth = metrics
        .iter()
        .filter_map(|m| match m {
            Metric::Ndcg(k)
            | Metric::Recall(k)
            | Metric::Map(k)
            | Metric::Precision(k)
            | Metric::Completeness(k)
            | Metric::HitRate(k)
            | Metric::Err(k) => Some(*k),
            Metric::Mrr | Metric::Rbp(_) => None,
        })
        .max()
        .unwrap_or(0);
    let ranking = Ranking::new(judged, docs, depth);
    let grades = &ranking.top;
    let mut ideal: Vec<i64> = judged.values().copied().filter(|&g| g >= 1).collect();
    ideal.sort_unstable_by(|a, b| b.cmp(a));
    let num_rel = ideal.len();
    let num_rel_f = num_rel as f64;

    // Prefix sums over ranks 1..=depth, index r holding the value of the top r.
    let mut hits = vec![0usize; depth + 1];
    let mut dcg = vec![0.0f64; depth + 1];
    let mut idcg = vec![0.0f64; depth + 1];
    let mut ap = vec![0.0f64; depth + 1];
    let mut err = vec![0.0f64; depth + 1];
    let max_gain = 2f64.powi(i32::try_from(max_grade).unwrap_or(i32::MAX));
    let mut not_stopped = 1.0;
    for r in 1..=depth {
        let i = r - 1;
        let g = grades.get(i).copied().unwrap_or(-1);
        let relevant = g >= 1;
        hits[r] = hits[r - 1] + usize::from(relevant);
        dcg[r] = dcg[r - 1];
        ap[r] = ap[r - 1];
        err[r] = err[r - 1];
        if relevant {
            dcg[r] += g as f64 / ((r + 1) as f64).log2();
            ap[r] += hits[r] as f64 / r as f64;
            let stop = stop_probability(g, max_grade, max_gain);
            err[r] += not_stopped * stop / r as f64;
            not_stopped *= 1.0 - stop;
        }
        idcg[r] = idcg[r - 1]
            + ideal
                .get(i)
                .map_or(0.0, |&g| g as f64 / ((r + 1) as f64).log2());
    }

    metrics
        .iter()
        .map(|metric| match *metric {
            Metric::Ndcg(k) => {
                if idcg[k] > 0.0 {
                    dcg[k] / idcg[k]
                } else {
                    dcg[k]
                }
            }
            Metric::Recall(k) => ratio(hits[k] as f64, num_rel_f),
            Metric::Map(k) => ratio(ap[k], num_rel_f),
            Metric::Precision(k) => hits[k] as f64 / k as f64,
            Metric::Completeness(k) => f64::from(u8::from(num_rel > 0 && hits[k] == num_rel)),
            Metric::HitRate(k) => f64::from(u8::from(hits[k] > 0)),
            Metric::Err(k) => err[k],
            Metric::Mrr => ranking
                .relevant()
                .next()
                .map_or(0.0, |(rank, _)| 1.0 / rank as f64),
            Metric::Rbp(p) => {
                let mut sum = 0.0;
                let mut weight = 1.0 - p;
                let mut at = 1;
                for (rank, g) in ranking.relevant() {
                    while at < rank {
                        weight *= p;
                        at += 1;
                    }
                    sum += weight * (g.min(max_grade) as f64 / max_grade as f64);
                }
                sum
            }
        })
        .collect()
}

/// A query's ranking, as far as the metrics need it: the grade at each of the
/// top `depth` ranks, and the rank and grade of every relevant document below.
/// Unjudged documents (and negative grades, which trec_eval treats as
/// unjudged) get grade −1.
///
/// Only the top `depth` documents are sorted; the rank of a relevant document
/// below them is counted directly, so a deep run costs little more than a
/// shallow one.
struct Ranking {
    top: Vec<i64>,
    deeper_relevant: Vec<(usize, i64)>,
}

/// A document with its sort keys and grade.
type Keyed<'a> = (u64, u64, &'a ScoredDoc, i64);

impl Ranking {
    fn new(judged: &Judgements, docs: &[ScoredDoc], depth: usize) -> Self {
        let mut keyed: Vec<Keyed<'_>> = docs
            .iter()
            .map(|d| {
                let grade = judged.get(&*d.id).copied().filter(|&g| g >= 0);
                (score_key(d.score), id_key(&d.id), d, grade.unwrap_or(-1))
            })
            .collect();
        let depth = depth.min(keyed.len());
        if depth > 0 && depth < keyed.len() {
            keyed.select_nth_unstable_by(depth - 1, before);
        }
        let (top, rest) = keyed.split_at_mut(depth);
        top.sort_unstable_by(before);
        let mut deeper_relevant: Vec<(usize, i64)> = rest
            .iter()
            .filter(|d| d.3 >= 1)
            .map(|d| {
                let ahead = rest.iter().filter(|o| before(o, d).is_lt()).count();
                (depth + ahead + 1, d.3)
            })
            .collect();
        deeper_relevant.sort_unstable();
        Self {
            top: top.iter().map(|d| d.3).collect(),
            deeper_relevant,
        }
    }

    /// (rank, grade) of every relevant document, by rank.
    fn relevant(&self) -> impl Iterator<Item = (usize, i64)> + '_ {
        self.top
            .iter()
            .enumerate()
            .filter(|(_, g)| **g >= 1)
            .map(|(i, &g)| (i + 1, g))
            .chain(self.deeper_relevant.iter().copied())
    }
}

/// [`trec_order`] on keyed documents: the score's bits, then the first eight
/// bytes of the id, and whole ids only when both tie.
fn before(a: &Keyed<'_>, b: &Keyed<'_>) -> std::cmp::Ordering {
    (b.0, b.1)
        .cmp(&(a.0, a.1))
        .then_with(|| trec_order(a.2, b.2))
}

/// An order-preserving integer for a score. Adding 0.0 turns −0.0 into 0.0,
/// which trec_eval treats as equal.
fn score_key(score: f64) -> u64 {
    let bits = (score + 0.0).to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | 1 << 63
    }
}

/// The first eight bytes of an id, zero-padded, as a big-endian integer: the
/// same order as the bytes, with ties where the ids share those bytes.
fn id_key(id: &str) -> u64 {
    let mut head = [0u8; 8];
    let n = id.len().min(8);
    head[..n].copy_from_slice(&id.as_bytes()[..n]);
    u64::from_be_bytes(head)
}

/// ERR's probability that a user stops at a document of grade `g`:
/// (2^g − 1) / 2^max, with grades above `max` capped.
fn stop_probability(g: i64, max_grade: i64, max_gain: f64) -> f64 {
    let g = i32::try_from(g.min(max_grade)).unwrap_or(i32::MAX);
    (2f64.powi(g) - 1.0) / max_gain
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ranked(grades: &[(&str, i64)], ranking: &[&str]) -> (Judgements, Vec<ScoredDoc>) {
        let judged = grades.iter().map(|(d, g)| ((*d).to_owned(), *g)).collect();
        let docs = ranking
            .iter()
            .enumerate()
            .map(|(i, d)| ScoredDoc::new(*d, -(i as f64)))
            .collect();
        (judged, docs)
    }

    #[test]
    fn err_and_rbp_by_hand() {
        // Grades by rank: 0, 1, 2 (and an unjudged document last); max grade 2.
        let (judged, docs) = ranked(&[("a", 0), ("b", 1), ("c", 2)], &["a", "b", "c", "x"]);
        let metrics = [Metric::Err(3), Metric::Err(1), Metric::Rbp(0.5)];
        let v = score_query(&judged, &docs, &metrics, 2);
        // Stop probabilities (2^g - 1) / 4: 0, 1/4, 3/4.
        // ERR@3 = 1/4 / 2 + (1 - 1/4) * 3/4 / 3.
        assert!((v[0] - (0.125 + 0.1875)).abs() < 1e-15, "{}", v[0]);
        assert_eq!(v[1], 0.0);
        // RBP = (1 - p) * sum p^(rank-1) * g / 2 = 0.5 * (0.5 * 0.5 + 0.25 * 1).
        assert!((v[2] - 0.25).abs() < 1e-15, "{}", v[2]);
    }

    #[test]
    fn binary_err_uses_one_half_and_rbp_counts_full_gain() {
        let (judged, docs) = ranked(&[("a", 1)], &["a"]);
        let v = score_query(&judged, &docs, &[Metric::Err(5), Metric::Rbp(0.8)], 1);
        assert!((v[0] - 0.5).abs() < 1e-15);
        assert!((v[1] - 0.2).abs() < 1e-15);
    }

    #[test]
    fn completeness_needs_every_relevant_document() {
        let (judged, docs) = ranked(&[("a", 1), ("b", 2), ("c", 0)], &["a", "c", "b"]);
        let metrics = [
            Metric::Completeness(2),
            Metric::Completeness(3),
            Metric::HitRate(1),
        ];
        assert_eq!(score_query(&judged, &docs, &metrics, 2), [0.0, 1.0, 1.0]);
        // Judged, but nothing relevant: never complete.
        let (judged, docs) = ranked(&[("a", 0)], &["a"]);
        assert_eq!(score_query(&judged, &docs, &metrics, 1), [0.0, 0.0, 0.0]);
    }

    #[test]
    fn partial_ranking_agrees_with_a_full_sort() {
        // A small linear congruential generator: deterministic, no dependency.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |n: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) % n
        };
        for _ in 0..500 {
            let n = next(40) as usize;
            let docs: Vec<ScoredDoc> = (0..n)
                .map(|i| {
                    // Few distinct scores and ids sharing long prefixes: many ties.
                    let id = format!("skill-{}-{i}", next(3));
                    ScoredDoc::new(id, next(5) as f64 - 2.0)
                })
                .collect();
            let mut judged = Judgements::default();
            for d in &docs {
                if next(3) == 0 {
                    judged.insert(d.id.to_string(), next(4) as i64 - 1);
                }
            }
            let mut sorted = docs.clone();
            crate::run::sort_trec(&mut sorted);
            let grades: Vec<i64> = sorted
                .iter()
                .map(|d| {
                    judged
                        .get(&*d.id)
                        .copied()
                        .filter(|&g| g >= 0)
                        .unwrap_or(-1)
                })
                .collect();
            let depth = next(25) as usize;
            let ranking = Ranking::new(&judged, &docs, depth);
            assert_eq!(ranking.top, grades[..depth.min(n)]);
            let expected: Vec<(usize, i64)> = grades
                .iter()
                .enumerate()
                .filter(|(_, g)| **g >= 1)
                .map(|(i, &g)| (i + 1, g))
                .collect();
            assert_eq!(ranking.relevant().collect::<Vec<_>>(), expected);
        }
    }

    #[test]
    fn options_validate() {
        assert!(Options::default().with_cutoffs(&[]).is_err());
        assert!(Options::default().with_cutoffs(&[0, 5]).is_err());
        assert_eq!(
            Options::default()
                .with_cutoffs(&[10, 5, 10])
                .unwrap()
                .cutoffs(),
            [5, 10]
        );
        assert!(Options::default().with_rbp_persistence(1.0).is_err());
        assert!(Options::default().with_max_grade(0).is_err());
    }

    #[test]
    fn complete_scores_missing_queries_as_zero() {
        let mut qrels = Qrels::default();
        qrels.insert("q1".into(), "a".into(), 1);
        qrels.insert("q2".into(), "a".into(), 1);
        qrels.ensure_query("q3");
        let mut run = Run::default();
        run.insert(
            "q1".into(),
            vec![ScoredDoc {
                id: "a".into(),
                score: 1.0,
            }],
        );
        run.insert(
            "q4".into(),
            vec![ScoredDoc {
                id: "a".into(),
                score: 1.0,
            }],
        );
        let skipped = evaluate(&qrels, &run, &Options::default());
        assert_eq!(skipped.per_query.len(), 1);
        assert_eq!((skipped.unjudged_in_run, skipped.missing_from_run), (1, 1));
        assert_eq!(skipped.mean_of(Metric::Mrr), Some(1.0));
        let complete = evaluate(&qrels, &run, &Options::default().with_complete(true));
        assert_eq!(complete.per_query.len(), 2);
        assert_eq!(complete.mean_of(Metric::Mrr), Some(0.5));
    }
}
