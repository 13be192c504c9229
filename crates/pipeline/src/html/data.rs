//! What a run's report shows, computed once here and embedded as JSON: the
//! page only draws it. Every figure depends only on the inputs (fixed seeds
//! for the bootstrap and the randomization tests), so the same run gives
//! the same bytes.

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;

use anyhow::Result;
use base64::Engine as _;
use eval::metrics::{Evaluation, Metric, Options, evaluate};
use eval::{Qrels, Query, Run, ScoredDoc, Skill};
use serde_json::{Map, Value, json};

use crate::breakdown::Breakdown;
use crate::ranking::Stage;

/// Bootstrap resamples of every interval.
const RESAMPLES: usize = 2_000;
/// Rounds of the randomization test of each slice.
const SLICE_TRIALS: usize = 5_000;
/// Seed of the intervals and the slices' tests.
const SEED: u64 = 20_261_206;
/// How many of each stage's skills a query's view lists.
pub(crate) const SHOWN: usize = 20;
/// Descriptions are cut to this many characters (the full text is the body).
const DESCRIPTION_CHARS: usize = 180;
/// The skills' bodies are embedded, gold skills first, then by their best
/// rank, while their bytes stay under this (compressed about 4×).
const BODY_BUDGET: usize = 4 << 20;

/// One run's report: everything the page draws.
pub(crate) struct RunReport<'a> {
    /// The page's title.
    pub(crate) title: String,
    /// What ran, a line each (data, retriever, reranker).
    pub(crate) about: Vec<String>,
    pub(crate) qrels: &'a Qrels,
    pub(crate) queries: &'a [&'a Query],
    pub(crate) skills: &'a [Skill],
    pub(crate) stages: &'a [Stage],
    /// The cut-offs of the metrics (5, 10, 15 by default).
    pub(crate) k: &'a [usize],
    /// Whether a reranking stage's stored scores are its own pointwise
    /// scores (not interpolated with the first stage's), so that reranking
    /// to any depth below its pool can be recomputed from them.
    pub(crate) pointwise: bool,
    /// Files beside the report to link (name, relative path).
    pub(crate) links: Vec<(String, String)>,
    /// The run's query focus (focus.json), shown in its own view.
    pub(crate) focus: Option<&'a Value>,
}

/// The metrics the summary lists, in its order.
fn summary_metrics(k: &[usize]) -> Vec<Metric> {
    let mut rows = Vec::new();
    for &c in k {
        rows.extend([Metric::Ndcg(c), Metric::Recall(c), Metric::Completeness(c)]);
    }
    for &c in k {
        rows.extend([
            Metric::Map(c),
            Metric::Precision(c),
            Metric::HitRate(c),
            Metric::Err(c),
        ]);
    }
    rows.extend([Metric::Mrr, Metric::Rbp(0.8)]);
    rows
}

/// Each query's value of `metric` in `e`, by query id.
fn values(e: &Evaluation, metric: Metric) -> HashMap<&str, f64> {
    let Some(i) = e.metrics.iter().position(|m| *m == metric) else {
        return HashMap::new();
    };
    e.per_query
        .iter()
        .map(|q| (q.query_id.as_str(), q.values[i]))
        .collect()
}

/// The relevant skills of a query (grade ≥ 1), by id.
fn gold(qrels: &Qrels, query: &str) -> Vec<(String, i64)> {
    let mut ids: Vec<(String, i64)> = qrels
        .get(query)
        .map(|j| {
            j.iter()
                .filter(|(_, g)| **g > 0)
                .map(|(id, g)| (id.clone(), *g))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

/// A query's ranking in trec_eval's order.
fn ranked(run: &Run, query: &str) -> Vec<ScoredDoc> {
    let mut docs = run.get(query).unwrap_or_default().to_vec();
    eval::sort_trec(&mut docs);
    docs
}

/// The mean, the paired bootstrap interval of the mean of `diffs`.
fn interval(diffs: &[f64], seed: u64) -> (f64, f64, f64) {
    let mean = diffs.iter().sum::<f64>() / diffs.len().max(1) as f64;
    let (lo, hi) = eval::stats::bootstrap_interval(diffs, RESAMPLES, 0.95, seed);
    (mean, lo, hi)
}

/// Rounds a figure for the page (6 significant decimals are plenty, and
/// keep the file small).
fn r6(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1e6).round() / 1e6)
    } else {
        Value::Null
    }
}

/// The first stage's top `depth` of a query as a reranker takes it (the
/// official pool: highest scores first, ties in the run's order).
fn pool(earlier: &Run, query: &str, depth: usize) -> BTreeSet<std::sync::Arc<str>> {
    reranker::Pool::top(depth)
        .candidates(query, earlier.get(query).unwrap_or_default())
        .into_iter()
        .collect()
}

/// Whether `later` only reorders the top of `earlier` (a reranker's pool):
/// every query's list of `later` is within the first as many of `earlier`'s.
/// Returns the pool's depth (the longest list of `later`).
fn pool_depth(earlier: &Run, later: &Run, ids: &[&str]) -> Option<usize> {
    let mut depth = 0;
    for q in ids {
        let b = later.get(q).unwrap_or_default();
        let top = pool(earlier, q, b.len());
        if !b.iter().all(|d| top.contains(&d.id)) {
            return None;
        }
        depth = depth.max(b.len());
    }
    (depth > 0).then_some(depth)
}

/// The page's data.
pub(crate) fn build(report: &RunReport<'_>) -> Result<Value> {
    let stages = report.stages;
    let options = Options::default().with_cutoffs(report.k)?;
    let evals: Vec<Evaluation> = stages
        .iter()
        .map(|s| evaluate(report.qrels, &s.run, &options))
        .collect();
    let cut = crate::breakdown::cutoff(report.k);
    let main = Metric::Ndcg(cut);
    // The scored queries (judged ones in the run), in id order.
    let ids: Vec<&str> = evals
        .first()
        .map(|e| e.per_query.iter().map(|q| q.query_id.as_str()).collect())
        .unwrap_or_default();
    let metrics = summary_metrics(report.k);

    let stage_json: Vec<Value> = stages
        .iter()
        .zip(&evals)
        .map(|(s, e)| {
            let m: Map<String, Value> = metrics
                .iter()
                .filter_map(|m| Some((m.to_string(), r6(e.mean_of(*m)?))))
                .collect();
            json!({"name": s.name, "after": s.after, "metrics": m})
        })
        .collect();

    // Each stage's change on the one it builds on: every metric with its
    // interval; the main metric with the test and the wins.
    let steps: Vec<(usize, usize)> = stages
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.after.map(|from| (from, i)))
        .collect();
    let mut changes = Vec::new();
    for (n, &(from, to)) in steps.iter().enumerate() {
        let mut rows = Vec::new();
        for (j, m) in metrics.iter().enumerate() {
            let (a, b) = (values(&evals[from], *m), values(&evals[to], *m));
            if a.is_empty() {
                continue;
            }
            let diffs: Vec<f64> = ids.iter().map(|q| b[q] - a[q]).collect();
            let (mean, lo, hi) = interval(&diffs, SEED + (n * 100 + j) as u64);
            rows.push(
                json!({"metric": m.to_string(), "delta": r6(mean), "lo": r6(lo), "hi": r6(hi)}),
            );
        }
        let (a, b) = (values(&evals[from], main), values(&evals[to], main));
        let (xs, ys): (Vec<f64>, Vec<f64>) = ids.iter().map(|q| (a[q], b[q])).unzip();
        let (wins, ties, losses) = eval::stats::wins_ties_losses(&xs, &ys);
        let p = eval::stats::paired_randomization_test(
            &xs,
            &ys,
            crate::ranking::TRIALS,
            crate::ranking::SEED,
        );
        let pool = pool_depth(&stages[from].run, &stages[to].run, &ids)
            .map(|depth| pool_json(report, &evals, from, to, depth, &ids, cut))
            .transpose()?;
        // The depth the transitions cut at: the pool's, else the longest
        // ranking of the later stage.
        let depth = ids
            .iter()
            .map(|q| stages[to].run.get(q).map_or(0, <[_]>::len))
            .max()
            .unwrap_or(0);
        changes.push(json!({
            "stage": to, "against": from, "metric": main.to_string(), "depth": depth,
            "rows": rows, "wins": wins, "ties": ties, "losses": losses,
            "queries": ids.len(), "p": r6(p), "pool": pool,
        }));
    }

    // The slices: each group's change of the main metric, per step, with
    // its interval and its p-value, Holm-corrected across the groups.
    let scored: Vec<String> = ids.iter().map(|q| (*q).to_owned()).collect();
    let breakdowns: Vec<Breakdown> =
        crate::breakdown::breakdowns(report.qrels, report.queries, report.skills, &scored);
    let mut slices = Vec::new();
    let mut membership: HashMap<&str, Map<String, Value>> = HashMap::new();
    for (b_index, b) in breakdowns.iter().enumerate() {
        let mut per_step: Vec<Vec<(f64, f64, f64, f64)>> = Vec::new();
        for (n, &(from, to)) in steps.iter().enumerate() {
            let (a, bb) = (values(&evals[from], main), values(&evals[to], main));
            let figures: Vec<(f64, f64, f64, f64)> = b
                .groups
                .iter()
                .enumerate()
                .map(|(g, (_, members))| {
                    let (xs, ys): (Vec<f64>, Vec<f64>) = members
                        .iter()
                        .filter_map(|q| Some((*a.get(q.as_str())?, *bb.get(q.as_str())?)))
                        .unzip();
                    let diffs: Vec<f64> = xs.iter().zip(&ys).map(|(x, y)| y - x).collect();
                    let seed = SEED + 1_000_000 + (b_index * 10_000 + n * 1_000 + g) as u64;
                    let (mean, lo, hi) = interval(&diffs, seed);
                    let p = eval::stats::paired_randomization_test(&xs, &ys, SLICE_TRIALS, seed);
                    (mean, lo, hi, p)
                })
                .collect();
            per_step.push(figures);
        }
        let groups: Vec<Value> = b
            .groups
            .iter()
            .enumerate()
            .map(|(g, (label, members))| {
                for q in members {
                    let entry = membership.entry(q.as_str()).or_default();
                    match entry.get_mut(b.key) {
                        Some(Value::Array(list)) => list.push(json!(g)),
                        _ => {
                            entry.insert(b.key.to_owned(), json!([g]));
                        }
                    }
                }
                let changes: Vec<Value> = per_step
                    .iter()
                    .map(|figures| {
                        let holm =
                            eval::stats::holm(&figures.iter().map(|f| f.3).collect::<Vec<_>>());
                        let (mean, lo, hi, p) = figures[g];
                        json!({"delta": r6(mean), "lo": r6(lo), "hi": r6(hi), "p": r6(p), "p_holm": r6(holm[g])})
                    })
                    .collect();
                json!({"label": label, "queries": members.len(), "changes": changes})
            })
            .collect();
        slices.push(json!({"key": b.key, "title": b.title, "groups": groups}));
    }

    // The skills the page names (each stage's top SHOWN, every gold skill),
    // stored once; the queries point at them by index.
    let by_id: HashMap<&str, usize> = report
        .skills
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut table: Vec<&str> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    // Best rank of each named skill (gold skills count as rank 0), for the
    // order in which bodies are embedded.
    let mut best: HashMap<usize, usize> = HashMap::new();
    let mut queries_json = Vec::new();
    let texts: HashMap<&str, &str> = report
        .queries
        .iter()
        .map(|q| (q.id.as_str(), q.text.as_str()))
        .collect();
    let main_values: Vec<HashMap<&str, f64>> = evals.iter().map(|e| values(e, main)).collect();
    let recall_values: Vec<HashMap<&str, f64>> = evals
        .iter()
        .map(|e| values(e, Metric::Recall(cut)))
        .collect();
    let mut slot = |id: &str, rank: usize| -> Option<usize> {
        let (&key, _) = by_id.get_key_value(id)?;
        let i = *index.entry(key).or_insert_with(|| {
            table.push(key);
            table.len() - 1
        });
        let b = best.entry(i).or_insert(rank);
        *b = (*b).min(rank);
        Some(i)
    };
    for q in &ids {
        let gold = gold(report.qrels, q);
        let gold_slots: Vec<Value> = gold
            .iter()
            .map(|(id, g)| match slot(id, 0) {
                Some(i) => json!([i, g]),
                None => json!([id, g]),
            })
            .collect();
        let mut top = Vec::new();
        let mut ranks = Vec::new();
        for s in stages {
            let docs = ranked(&s.run, q);
            let shown: Vec<Value> = docs
                .iter()
                .take(SHOWN)
                .enumerate()
                .map(|(r, d)| match slot(&d.id, r + 1) {
                    Some(i) => json!(i),
                    None => json!(&*d.id),
                })
                .collect();
            let position: HashMap<&str, usize> = docs
                .iter()
                .enumerate()
                .map(|(r, d)| (&*d.id, r + 1))
                .collect();
            ranks.push(
                gold.iter()
                    .map(|(id, _)| position.get(id.as_str()).copied().unwrap_or(0))
                    .collect::<Vec<_>>(),
            );
            top.push(shown);
        }
        let classes: Vec<Value> = changes
            .iter()
            .map(|c| {
                let (from, to) = (
                    c["against"].as_u64().unwrap_or(0) as usize,
                    c["stage"].as_u64().unwrap_or(0) as usize,
                );
                let depth = c["pool"]["depth"].as_u64().map(|d| d as usize);
                let in_pool = depth.map(|n| {
                    let pool = pool(&stages[from].run, q, n);
                    gold.iter().any(|(id, _)| pool.contains(id.as_str()))
                });
                json!(class(main_values[from][q], main_values[to][q], in_pool))
            })
            .collect();
        queries_json.push(json!({
            "id": q,
            "text": texts.get(q).copied().unwrap_or(""),
            "words": texts.get(q).map_or(0, |t| t.split_whitespace().count()),
            "gold": gold_slots,
            "top": top,
            "ranks": ranks,
            "ndcg": main_values.iter().map(|v| r6(v[q])).collect::<Vec<_>>(),
            "recall": recall_values.iter().map(|v| r6(v[q])).collect::<Vec<_>>(),
            "class": classes,
            "slices": membership.remove(q).unwrap_or_default(),
        }));
    }
    let skill = |i: &&str| &report.skills[by_id[*i]];
    let skills_json = json!({
        "id": table.iter().map(|i| skill(i).id.as_str()).collect::<Vec<_>>(),
        "name": table.iter().map(|i| skill(i).name.as_str()).collect::<Vec<_>>(),
        "description": table.iter().map(|i| cut_text(&skill(i).description, DESCRIPTION_CHARS)).collect::<Vec<_>>(),
        "major": table.iter().map(|i| skill(i).major.as_deref()).collect::<Vec<_>>(),
        "sub": table.iter().map(|i| skill(i).sub.as_deref()).collect::<Vec<_>>(),
    });
    let bodies = bodies(&table, &best, |i| skill(&i).skill_md.as_str())?;

    let curves = crate::plot::curves(report.qrels, stages, curve_depth(stages))?;
    let curves: Vec<Value> = curves
        .iter()
        .map(|c| {
            json!({
                "stage": c.stage,
                "recall": c.recall.iter().map(|v| r6(*v)).collect::<Vec<_>>(),
                "ndcg": c.ndcg.iter().map(|v| r6(*v)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let links: Vec<Value> = report
        .links
        .iter()
        .map(|(name, path)| json!({"name": name, "href": path}))
        .collect();
    Ok(json!({
        "kind": "run",
        "title": report.title,
        "about": report.about,
        "tool": format!("skillret-rs pipeline {}", env!("CARGO_PKG_VERSION")),
        "k": report.k,
        "cut": cut,
        "shown": SHOWN,
        "stages": stage_json,
        "changes": changes,
        "curves": curves,
        "slices": slices,
        "skills": skills_json,
        "bodies": bodies,
        "queries": queries_json,
        "links": links,
        "focus": report.focus,
    }))
}

/// What a step did to one query: `retriever miss` where the pool (the
/// first stage's top N) holds no gold skill, so that no reranking could
/// help; else `rescued` or `harmed` by the sign of the change of the main
/// metric, `unchanged`, or `both miss` where it is 0 in both stages.
pub(crate) fn class(from: f64, to: f64, gold_in_pool: Option<bool>) -> &'static str {
    if gold_in_pool == Some(false) {
        "retriever miss"
    } else if to - from > 1e-12 {
        "rescued"
    } else if from - to > 1e-12 {
        "harmed"
    } else if from <= 1e-12 {
        "both miss"
    } else {
        "unchanged"
    }
}

/// A reranker's pool: its ceiling (the first stage's recall at the pool's
/// depth, and the main metric of the best reordering of the pool, the
/// oracle reranker), the share of the possible gain realised, and, where
/// the stored scores are pointwise, the main metric and recall against
/// the depth reranked.
fn pool_json(
    report: &RunReport<'_>,
    evals: &[Evaluation],
    from: usize,
    to: usize,
    depth: usize,
    ids: &[&str],
    cut: usize,
) -> Result<Value> {
    let first = &report.stages[from].run;
    let later = &report.stages[to].run;
    let main = Metric::Ndcg(cut);
    let options = Options::default().with_cutoffs(&[cut])?;
    let mut oracle = Run::default();
    let mut recall = 0.0;
    for q in ids {
        let gold: HashMap<String, i64> = gold(report.qrels, q).into_iter().collect();
        let pool = reranker::Pool::top(depth).candidates(q, first.get(q).unwrap_or_default());
        let found = pool.iter().filter(|d| gold.contains_key(&***d)).count();
        recall += found as f64 / gold.len().max(1) as f64;
        let mut docs: Vec<ScoredDoc> = pool
            .iter()
            .map(|d| ScoredDoc::new(d.clone(), gold.get(&**d).copied().unwrap_or(0) as f64))
            .collect();
        eval::sort_trec(&mut docs);
        oracle.insert((*q).to_owned(), docs);
    }
    let n = ids.len().max(1) as f64;
    let ceiling = evaluate(report.qrels, &oracle, &options)
        .mean_of(main)
        .unwrap_or(f64::NAN);
    let (a, b) = (
        evals[from].mean_of(main).unwrap_or(f64::NAN),
        evals[to].mean_of(main).unwrap_or(f64::NAN),
    );
    let realised = if ceiling > a + 1e-12 {
        (b - a) / (ceiling - a)
    } else {
        f64::NAN
    };
    let curve = if report.pointwise {
        let scores: HashMap<&str, HashMap<&str, f64>> = ids
            .iter()
            .map(|q| {
                let s = later
                    .get(q)
                    .unwrap_or_default()
                    .iter()
                    .map(|d| (&*d.id, d.score))
                    .collect();
                (*q, s)
            })
            .collect();
        let mut ndcg = Vec::new();
        let mut recall = Vec::new();
        for n in 1..=depth {
            let mut run = Run::default();
            for q in ids {
                let mut docs: Vec<ScoredDoc> = reranker::Pool::top(n)
                    .candidates(q, first.get(q).unwrap_or_default())
                    .into_iter()
                    .filter_map(|d| {
                        let score = *scores[q].get(&*d)?;
                        Some(ScoredDoc::new(d, score))
                    })
                    .collect();
                eval::sort_trec(&mut docs);
                run.insert((*q).to_owned(), docs);
            }
            let e = evaluate(report.qrels, &run, &options);
            ndcg.push(r6(e.mean_of(main).unwrap_or(f64::NAN)));
            recall.push(r6(e.mean_of(Metric::Recall(cut)).unwrap_or(f64::NAN)));
        }
        json!({"ndcg": ndcg, "recall": recall})
    } else {
        Value::Null
    };
    Ok(json!({
        "depth": depth,
        "recall": r6(recall / n),
        "oracle": r6(ceiling),
        "realised": r6(realised),
        "by_depth": curve,
    }))
}

/// The depth of the Recall@k / NDCG@k curves: the longest ranking, at most 100.
fn curve_depth(stages: &[Stage]) -> usize {
    stages
        .iter()
        .flat_map(|s| {
            s.run
                .query_ids()
                .into_iter()
                .map(|q| s.run.get(q).map_or(0, <[_]>::len))
        })
        .max()
        .unwrap_or(10)
        .clamp(1, 100)
}

/// `text` cut to `chars` characters, an ellipsis marking the cut.
fn cut_text(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", text[..at].trim_end()),
        None => text.to_owned(),
    }
}

/// The bodies of the named skills, gold and best-ranked first, while they
/// fit [`BODY_BUDGET`]: one JSON array, gzip-compressed and in base64 (the
/// page inflates it when a body is first asked for), and the skills (by
/// index in the table) whose bodies it holds, in its order.
fn bodies<'s>(
    table: &[&str],
    best: &HashMap<usize, usize>,
    body: impl Fn(&str) -> &'s str,
) -> Result<Value> {
    let mut order: Vec<usize> = (0..table.len()).collect();
    order.sort_by_key(|i| (best.get(i).copied().unwrap_or(usize::MAX), *i));
    let mut kept = Vec::new();
    let mut texts = Vec::new();
    let mut bytes = 0;
    for i in order {
        let text = body(table[i]);
        if bytes + text.len() > BODY_BUDGET {
            continue;
        }
        bytes += text.len();
        kept.push(i);
        texts.push(text);
    }
    let json = serde_json::to_vec(&texts)?;
    // A fixed header (no name, no time, "unknown" OS): the same bytes on
    // every machine.
    let mut gz = flate2::GzBuilder::new()
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::new(6));
    gz.write_all(&json)?;
    let packed = gz.finish()?;
    Ok(json!({
        "skills": kept,
        "gzip_base64": base64::engine::general_purpose::STANDARD.encode(packed),
        "left_out": table.len() - kept.len(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_pool_and_the_sign() {
        assert_eq!(class(0.5, 0.9, Some(false)), "retriever miss");
        assert_eq!(class(0.5, 0.9, Some(true)), "rescued");
        assert_eq!(class(0.5, 0.9, None), "rescued");
        assert_eq!(class(0.9, 0.5, Some(true)), "harmed");
        assert_eq!(class(0.0, 0.0, Some(true)), "both miss");
        assert_eq!(class(0.4, 0.4, None), "unchanged");
    }

    #[test]
    fn text_is_cut_on_a_character() {
        assert_eq!(cut_text("héllo wörld", 5), "héllo…");
        assert_eq!(cut_text("short", 5), "short");
    }
}
