//! `pipeline eval`: score a run file against judgements.

use std::io::Write;

use anyhow::{Context, Result};
use eval::metrics::{self, Evaluation, Metric, Options};
use eval::{Diagnostic, Qrels, Run};

use crate::cli::{EvalArgs, Format};

pub(crate) fn run(args: &EvalArgs) -> Result<()> {
    let mut options = Options::default()
        .with_cutoffs(&args.k)?
        .with_rbp_persistence(args.rbp_p)?
        .with_complete(args.complete);
    if let Some(grade) = args.max_grade {
        options = options.with_max_grade(grade)?;
    }
    let mut warnings = Vec::new();
    let qrels = Qrels::read(&args.qrels, &args.split, &mut warnings)
        .with_context(|| format!("reading judgements from {}", args.qrels.display()))?;
    let run = Run::read(&args.run, &args.split)
        .with_context(|| format!("reading the run {}", args.run.display()))?;
    report_warnings(&warnings);

    let result = metrics::evaluate(&qrels, &run, &options);
    report_skipped(&result, args.complete);
    if let Some(path) = &args.per_query {
        write_per_query(path, &result)?;
    }
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Json => {
            let json = serde_json::to_string_pretty(&result.summary_json(args.extended))?;
            writeln!(out, "{json}")?;
        }
        Format::Table => write_table(&mut out, &result, options.cutoffs())?,
    }
    Ok(())
}

/// Warnings go to stderr: every one when few, else the first ten and a count.
pub(crate) fn report_warnings(warnings: &[Diagnostic]) {
    const SHOWN: usize = 10;
    for warning in warnings.iter().take(SHOWN) {
        eprintln!("warning: {warning}");
    }
    if warnings.len() > SHOWN {
        eprintln!("warning: … and {} more like these", warnings.len() - SHOWN);
    }
}

fn report_skipped(result: &Evaluation, complete: bool) {
    if result.unjudged_in_run > 0 {
        eprintln!(
            "note: {} run queries have no judgements and were skipped (as pytrec_eval skips them)",
            result.unjudged_in_run
        );
    }
    if result.missing_from_run > 0 {
        let what = if complete {
            "scored 0 (--complete)"
        } else {
            "skipped, as pytrec_eval skips them; --complete scores them 0"
        };
        eprintln!(
            "note: {} judged queries are missing from the run and were {what}",
            result.missing_from_run
        );
    }
    if result.per_query.is_empty() {
        eprintln!("note: no query was scored: do the run's query ids match the judgements'?");
    }
}

fn write_per_query(path: &std::path::Path, result: &Evaluation) -> Result<()> {
    eval::io::write_atomically(path, |out| {
        write!(out, "query_id")?;
        for metric in &result.metrics {
            write!(out, "\t{metric}")?;
        }
        writeln!(out)?;
        for query in &result.per_query {
            write!(out, "{}", query.query_id)?;
            for value in &query.values {
                write!(out, "\t{value}")?;
            }
            writeln!(out)?;
        }
        Ok(())
    })
    .with_context(|| format!("writing per-query metrics to {}", path.display()))
}

fn write_table(out: &mut dyn Write, result: &Evaluation, cutoffs: &[usize]) -> std::io::Result<()> {
    let value = |m: Metric| result.mean_of(m).unwrap_or(f64::NAN);
    writeln!(out, "{} queries scored", result.per_query.len())?;
    writeln!(
        out,
        "{:>5}  {:>7}  {:>7}  {:>7}  {:>9}  {:>12}  {:>7}  {:>7}",
        "k", "NDCG", "Recall", "MAP", "Precision", "Completeness", "HitRate", "ERR"
    )?;
    for &k in cutoffs {
        writeln!(
            out,
            "{k:>5}  {:>7.4}  {:>7.4}  {:>7.4}  {:>9.4}  {:>12.4}  {:>7.4}  {:>7.4}",
            value(Metric::Ndcg(k)),
            value(Metric::Recall(k)),
            value(Metric::Map(k)),
            value(Metric::Precision(k)),
            value(Metric::Completeness(k)),
            value(Metric::HitRate(k)),
            value(Metric::Err(k)),
        )?;
    }
    let rbp = result
        .metrics
        .iter()
        .find(|m| matches!(m, Metric::Rbp(_)))
        .copied();
    write!(out, "MRR {:.4}", value(Metric::Mrr))?;
    if let Some(rbp) = rbp {
        write!(out, "   {rbp} {:.4}", value(rbp))?;
    }
    writeln!(out)
}
