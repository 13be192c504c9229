//! The outputs of `pipeline run`: metrics per stage, runs, per-query table,
//! the Markdown report and the Recall@k / NDCG@k plot. Everything but
//! `timings.json` depends only on the inputs, so identical runs write identical
//! bytes.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use eval::Qrels;
use eval::metrics::{Evaluation, Metric, Options, evaluate};
use serde_json::{Map, Value, json};

use crate::config::Settings;
use crate::plot::curves;
use crate::ranking::{SEED, Stage, TRIALS};

/// An approximate or remote index against exact search on the run's queries.
#[derive(Debug, Clone)]
pub(crate) struct IndexRecall {
    /// `hnsw` or `milvus`: `metrics.json` has `<key>_recall`.
    pub(crate) key: &'static str,
    /// The index in words, for report.md.
    pub(crate) label: String,
    /// Its search parameters, into `metrics.json` beside the recalls.
    pub(crate) params: Map<String, Value>,
    pub(crate) at_10: f64,
    pub(crate) at_n: f64,
    pub(crate) n: usize,
}

/// Wall time of one stage.
pub(crate) struct StageTiming {
    pub(crate) stage: String,
    pub(crate) seconds: f64,
    pub(crate) detail: String,
    /// Further lines (a served model's figures per endpoint).
    pub(crate) notes: Vec<String>,
    /// Tokens the stage embedded, where it embedded any.
    pub(crate) tokens: Option<usize>,
}

impl StageTiming {
    pub(crate) fn new(stage: &str, started: Instant, detail: String) -> Self {
        Self {
            stage: stage.to_owned(),
            seconds: started.elapsed().as_secs_f64(),
            detail,
            notes: Vec::new(),
            tokens: None,
        }
    }
}

/// What the terminal shows, and what the results file records.
pub(crate) struct Written {
    pub(crate) table: String,
    /// `metrics.json`'s content: per stage, every metric.
    pub(crate) metrics: Map<String, Value>,
    /// The breakdowns (see [`crate::breakdown`]).
    pub(crate) breakdowns: Value,
    /// What each stage changes on the one it builds on (NDCG@10, per query).
    pub(crate) changes: Vec<Change>,
}

/// What a stage changes on the stage it builds on, per query (NDCG@10).
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Change {
    pub(crate) stage: String,
    pub(crate) against: String,
    pub(crate) metric: String,
    pub(crate) delta: f64,
    pub(crate) wins: usize,
    pub(crate) ties: usize,
    pub(crate) losses: usize,
    pub(crate) queries: usize,
    /// Paired randomization test of the mean difference, two-sided.
    pub(crate) p: f64,
}

/// Every stage's change on the one it builds on.
fn changes(stages: &[Stage], evals: &[Evaluation]) -> Vec<Change> {
    let m = Metric::Ndcg(10);
    let mut out = Vec::new();
    for (to, stage) in stages.iter().enumerate() {
        let Some(from) = stage.after else { continue };
        let (Some(a), Some(b)) = (
            per_query_values(&evals[from], m),
            per_query_values(&evals[to], m),
        ) else {
            continue;
        };
        let (wins, ties, losses) = eval::stats::wins_ties_losses(&a, &b);
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        out.push(Change {
            stage: stage.name.clone(),
            against: stages[from].name.clone(),
            metric: m.to_string(),
            delta: mean(&b) - mean(&a),
            wins,
            ties,
            losses,
            queries: a.len(),
            p: eval::stats::paired_randomization_test(&a, &b, TRIALS, SEED),
        });
    }
    out
}

/// What a run measured beside its stages' rankings.
#[derive(Default)]
pub(crate) struct Extras<'a> {
    /// The index's recall against exact search (HNSW, Milvus).
    pub(crate) recall: Option<&'a IndexRecall>,
    /// The query-focus pass (focus.json's value), written beside the report and shown in it.
    pub(crate) focus: Option<&'a Value>,
    /// focus.tsv's text.
    pub(crate) focus_tsv: Option<&'a str>,
}

/// Scores the stages and writes every deterministic output.
pub(crate) fn write(
    settings: &Settings,
    label: &str,
    qrels: &Qrels,
    skills: &[eval::Skill],
    stages: &[Stage],
    extras: &Extras<'_>,
    queries: &[&eval::Query],
) -> Result<Written> {
    let recall = extras.recall;
    let out = &settings.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let options = Options::default().with_cutoffs(&settings.k)?;
    let evaluations: Vec<Evaluation> = stages
        .iter()
        .map(|s| evaluate(qrels, &s.run, &options))
        .collect();

    let mut metrics = Map::new();
    metrics.insert("dataset".to_owned(), json!(label));
    for (stage, e) in stages.iter().zip(&evaluations) {
        metrics.insert(stage.name.clone(), Value::Object(e.summary_json(true)));
    }
    if let Some(r) = recall {
        let mut value = r.params.clone();
        value.insert("Recall@10".to_owned(), json!(r.at_10));
        value.insert(format!("Recall@{}", r.n), json!(r.at_n));
        metrics.insert(format!("{}_recall", r.key), Value::Object(value));
    }
    write_text(
        &out.join("metrics.json"),
        &(serde_json::to_string_pretty(&metrics)? + "\n"),
    )?;

    for (stage, e) in stages.iter().zip(&evaluations) {
        let path = out.join(format!("run.{}.trec", stage.name));
        stage
            .run
            .write_trec(&path, &stage.name)
            .with_context(|| format!("writing {}", path.display()))?;
        // The official output JSON: what eval.py writes and eval_rerank reads.
        write_text(
            &out.join(format!("skillret.{}.json", stage.name)),
            &(eval::official::to_json(&settings.split, e, &settings.k, &stage.run) + "\n"),
        )?;
    }
    write_text(
        &out.join("per_query.tsv"),
        &per_query(qrels, stages, &evaluations),
    )?;
    let table = stage_table(settings, stages, &evaluations);
    let scored: Vec<String> = evaluations
        .first()
        .map(|e| e.per_query.iter().map(|q| q.query_id.clone()).collect())
        .unwrap_or_default();
    let (breakdown_md, breakdowns) = crate::breakdown::render(
        &crate::breakdown::breakdowns(qrels, queries, skills, &scored),
        stages,
        &evaluations,
        crate::breakdown::cutoff(&settings.k),
    );
    write_text(
        &out.join("report.md"),
        &(markdown(
            settings,
            label,
            skills.len(),
            stages,
            &evaluations,
            recall,
            &table,
        ) + "\n"
            + breakdown_md.trim_end()
            + "\n"),
    )?;
    let mut links = vec![
        ("report.md".to_owned(), "report.md".to_owned()),
        ("metrics.json".to_owned(), "metrics.json".to_owned()),
        ("per_query.tsv".to_owned(), "per_query.tsv".to_owned()),
        ("results.json".to_owned(), "results.json".to_owned()),
    ];
    for stage in stages {
        let file = format!("run.{}.trec", stage.name);
        links.push((file.clone(), file));
    }
    if let (Some(focus), Some(tsv)) = (extras.focus, extras.focus_tsv) {
        write_json(&out.join("focus.json"), focus)?;
        write_text(&out.join("focus.tsv"), tsv)?;
        for file in ["focus.json", "focus.tsv"] {
            links.push((file.to_owned(), file.to_owned()));
        }
    }
    let html = crate::html::run_page(&crate::html::RunReport {
        title: format!("{label} run: {}", settings.path.display()),
        about: about(settings, label, skills.len(), scored.len())
            .iter()
            .map(|line| line.replace('`', ""))
            .collect(),
        qrels,
        queries,
        skills,
        stages,
        k: &settings.k,
        pointwise: settings
            .reranker
            .as_ref()
            .is_some_and(|r| r.combine == crate::config::Combine::Replace),
        links,
        focus: extras.focus,
    })?;
    write_text(&out.join("report.html"), &html)?;
    let curve_depth = settings.retriever.top_n;
    let curves = curves(qrels, stages, curve_depth)?;
    write_text(
        &out.join("recall_at_k.svg"),
        &crate::plot::svg(&curves, curve_depth),
    )?;
    Ok(Written {
        table: format!("{label} · {}\n\n{table}", settings.path.display()),
        metrics,
        breakdowns,
        changes: changes(stages, &evaluations),
    })
}

/// `timings.json` (not deterministic: wall times).
pub(crate) fn write_timings(out: &Path, timings: &[StageTiming]) -> Result<()> {
    let list: Vec<Value> = timings
        .iter()
        .map(|t| {
            let mut v = json!({"stage": t.stage, "seconds": t.seconds, "detail": t.detail});
            if let Some(tokens) = t.tokens {
                v["tokens"] = json!(tokens);
            }
            if !t.notes.is_empty() {
                v["notes"] = json!(t.notes);
            }
            v
        })
        .collect();
    let total: f64 = timings.iter().map(|t| t.seconds).sum();
    let value = json!({"stages": list, "total_seconds": total});
    write_text(
        &out.join("timings.json"),
        &(serde_json::to_string_pretty(&value)? + "\n"),
    )
}

/// Writes pretty JSON and a newline, atomically.
pub(crate) fn write_json(path: &Path, value: &Value) -> Result<()> {
    write_text(path, &(serde_json::to_string_pretty(value)? + "\n"))
}

pub(crate) fn write_text(path: &Path, text: &str) -> Result<()> {
    eval::io::write_atomically(path, |w| w.write_all(text.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))
}

/// The main metrics, one row each, a column per stage and the change.
fn stage_table(settings: &Settings, stages: &[Stage], evals: &[Evaluation]) -> String {
    let mut rows: Vec<Metric> = Vec::new();
    for &k in &settings.k {
        rows.extend([Metric::Ndcg(k), Metric::Recall(k), Metric::Completeness(k)]);
    }
    for &k in &settings.k {
        rows.extend([Metric::Map(k), Metric::Precision(k), Metric::HitRate(k)]);
    }
    rows.push(Metric::Mrr);
    let steps: Vec<(usize, usize)> = stages
        .iter()
        .enumerate()
        .filter_map(|(i, st)| st.after.map(|from| (from, i)))
        .collect();
    let mut s = String::from("| metric |");
    for stage in stages {
        let _ = write!(s, " {} |", stage.name);
    }
    for &(from, to) in &steps {
        let _ = write!(s, " Δ {} − {} |", stages[to].name, stages[from].name);
    }
    s.push_str("\n|---|");
    for _ in stages.iter().map(|_| ()).chain(steps.iter().map(|_| ())) {
        s.push_str("---:|");
    }
    s.push('\n');
    for metric in rows {
        let values: Vec<f64> = evals
            .iter()
            .map(|e| e.mean_of(metric).unwrap_or(f64::NAN))
            .collect();
        let _ = write!(s, "| {metric} |");
        for v in &values {
            let _ = write!(s, " {v:.4} |");
        }
        for &(from, to) in &steps {
            let _ = write!(s, " {:+.4} |", values[to] - values[from]);
        }
        s.push('\n');
    }
    s
}

fn markdown(
    settings: &Settings,
    label: &str,
    skills: usize,
    stages: &[Stage],
    evals: &[Evaluation],
    recall: Option<&IndexRecall>,
    table: &str,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# {label} run: `{}`\n", settings.path.display());
    let queries = evals.first().map_or(0, |e| e.per_query.len());
    for line in about(settings, label, skills, queries) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "\n## Stages\n\n{table}");
    for c in changes(stages, evals) {
        let _ = writeln!(
            s,
            "## {} against {}, per query ({})\n\n\
             {} wins, {} ties, {} losses over {} queries. \
             Paired randomization test of the mean difference ({TRIALS} rounds, two-sided): p = {:.4}.\n",
            capitalised(&c.stage),
            c.against,
            c.metric,
            c.wins,
            c.ties,
            c.losses,
            c.queries,
            c.p
        );
    }
    if let Some(r) = recall {
        let params: Vec<String> = r.params.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            s,
            "## {} against exact search\n\nOn these queries, {}: recall@10 {:.4}, recall@{} {:.4} \
             (share of the exact top k that the index returned).\n",
            r.label,
            params.join(", "),
            r.at_10,
            r.n,
            r.at_n
        );
    }
    let _ = writeln!(
        s,
        "Files: `report.html` (this report drawn for a browser: attribution, gold-rank transitions, \
         rerank depth, slices with intervals, every query's rankings), \
         `metrics.json` (per stage, official key names), `run.<stage>.trec`, \
         `skillret.<stage>.json` (the official output JSON: `metrics` rounded as eval.py rounds them, \
         `retrieval`; the official eval_rerank and `pipeline rerank --run` read it), `per_query.tsv`, \
         `recall_at_k.svg`, `timings.json`, `results.json` (provenance)."
    );
    s
}

/// What ran, a line each: the data, the retriever, the reranker (Markdown).
fn about(settings: &Settings, label: &str, skills: usize, queries: usize) -> Vec<String> {
    let data = match &settings.data {
        crate::config::DataSource::Dir(d) => format!("`{}`", d.display()),
        crate::config::DataSource::Hub(r) => format!("ThakiCloud/SKILLRET at {r}"),
    };
    let mut lines = vec![format!(
        "Data: {label}{}, {data}, split `{}`: {skills} skills, {queries} judged queries scored.",
        if label == "SkillRet" {
            String::new()
        } else {
            " (not SkillRet: its metrics are not comparable with the SkillRet paper's)".to_owned()
        },
        settings.split
    )];
    let r = &settings.retriever;
    let first = match (&settings.embedder, r.kind) {
        (Some(e), kind) => format!(
            "{kind:?} ({}, {:?} index), top {}",
            e.label(),
            r.index,
            r.top_n
        ),
        (None, kind) => format!("{kind:?}, top {}", r.top_n),
    };
    let first = match &settings.first_stage {
        Some(file) => format!("the run {} (given, not retrieved)", file.display()),
        None => first,
    };
    lines.push(format!("Retriever: {first}."));
    if let Some(rr) = &settings.reranker {
        lines.push(format!("Reranker: {}, top {}.", rr.label(), rr.top_n));
    }
    lines
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// Each query's value of `metric`, in query order; `None` if not computed.
fn per_query_values(e: &Evaluation, metric: Metric) -> Option<Vec<f64>> {
    let i = e.metrics.iter().position(|m| *m == metric)?;
    Some(e.per_query.iter().map(|q| q.values[i]).collect())
}

/// `query stage metric… relevant_ranks`: the rank of each relevant skill in
/// that stage's run (`-` when it was not retrieved).
fn per_query(qrels: &Qrels, stages: &[Stage], evals: &[Evaluation]) -> String {
    let mut s = String::from("query\tstage");
    if let Some(e) = evals.first() {
        for m in &e.metrics {
            let _ = write!(s, "\t{m}");
        }
    }
    s.push_str("\trelevant_ranks\n");
    for (stage, e) in stages.iter().zip(evals) {
        for q in &e.per_query {
            let _ = write!(s, "{}\t{}", q.query_id, stage.name);
            for v in &q.values {
                let _ = write!(s, "\t{v}");
            }
            let mut ranked = stage.run.get(&q.query_id).unwrap_or_default().to_vec();
            eval::sort_trec(&mut ranked);
            let ranks: BTreeMap<&str, usize> = ranked
                .iter()
                .enumerate()
                .map(|(i, d)| (&*d.id, i + 1))
                .collect();
            let relevant: Vec<String> = qrels
                .get(&q.query_id)
                .map(|j| {
                    let mut ids: Vec<&str> = j
                        .iter()
                        .filter(|(_, g)| **g > 0)
                        .map(|(id, _)| id.as_ref())
                        .collect();
                    ids.sort_unstable();
                    ids.into_iter()
                        .map(|id| match ranks.get(id) {
                            Some(r) => format!("{id}:{r}"),
                            None => format!("{id}:-"),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let _ = writeln!(s, "\t{}", relevant.join(","));
        }
    }
    s
}
