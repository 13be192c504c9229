//! `pipeline compare`: the main metrics of finished runs side by side.

use std::fmt::Write as _;

use anyhow::{Result, bail};
use serde_json::{Map, Value};

use crate::cli::{CompareArgs, Format};
use crate::commands::run::{metrics_path, read_output};

/// The columns, when present.
const COLUMNS: &[&str] = &[
    "NDCG@5",
    "NDCG@10",
    "NDCG@15",
    "Recall@10",
    "Completeness@10",
    "MAP@10",
    "MRR",
    "queries",
];

pub(crate) fn run(args: &CompareArgs) -> Result<()> {
    let mut rows: Vec<(String, String, String, Map<String, Value>)> = Vec::new();
    for dir in &args.runs {
        let path = metrics_path(dir);
        let value = read_output(dir, "metrics.json")?;
        let Some(stages) = value.as_object() else {
            bail!("{}: expected an object of stages", path.display());
        };
        // What the data was ("SkillRet" in runs from before the label).
        let data = stages
            .get("dataset")
            .and_then(Value::as_str)
            .unwrap_or("SkillRet")
            .to_owned();
        for (stage, metrics) in stages {
            if let Some(m) = metrics.as_object().filter(|m| m.contains_key("queries")) {
                rows.push((
                    dir.display().to_string(),
                    data.clone(),
                    stage.clone(),
                    m.clone(),
                ));
            }
        }
    }
    match args.format {
        Format::Json => {
            let list: Vec<Value> = rows
                .into_iter()
                .map(|(run, data, stage, m)| {
                    serde_json::json!({"run": run, "dataset": data, "stage": stage, "metrics": m})
                })
                .collect();
            println!("{}", serde_json::to_string_pretty(&list)?);
        }
        Format::Table => {
            let mut s = String::from("| run | data | stage |");
            for c in COLUMNS {
                let _ = write!(s, " {c} |");
            }
            s.push_str("\n|---|---|---|");
            for _ in COLUMNS {
                s.push_str("---:|");
            }
            s.push('\n');
            for (run, data, stage, m) in &rows {
                let _ = write!(s, "| {run} | {data} | {stage} |");
                for c in COLUMNS {
                    match m.get(*c) {
                        Some(Value::Number(n)) if *c == "queries" => {
                            let _ = write!(s, " {n} |");
                        }
                        Some(v) => {
                            let _ = write!(s, " {:.4} |", v.as_f64().unwrap_or(f64::NAN));
                        }
                        None => s.push_str(" – |"),
                    }
                }
                s.push('\n');
            }
            print!("{s}");
        }
    }
    Ok(())
}
