//! `pipeline report DIR [DIR...]`: the HTML report of finished runs. One
//! directory: its stages, as `pipeline run` drew them. Several: each run's
//! last stage, in the order given, each compared with the one before as a
//! stage with the one it builds on (a reranker run over the first run's
//! ranking gets its pool, ceiling and depth curve).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use eval::Run;
use serde_json::Value;

use crate::cli::ReportArgs;
use crate::config::{DataSource, MAX_DEPTH};
use crate::ranking::Stage;

/// What a finished run's files say.
struct Finished {
    dir: PathBuf,
    results: Value,
    /// Its stages in report order, each with the stage it builds on.
    stages: Vec<(String, Option<String>)>,
}

impl Finished {
    fn read(dir: &Path) -> Result<Self> {
        let path = dir.join("results.json");
        let results = crate::commands::run::read_output(dir, "results.json")?;
        // Stages in metrics.json's order (the run's), each after the stage
        // its change is measured against.
        let scores = results["scores"]
            .as_object()
            .with_context(|| format!("{}: no `scores` object", path.display()))?;
        let changes = results["changes"].as_array().cloned().unwrap_or_default();
        let stages = scores
            .iter()
            .filter(|(_, v)| v.get("queries").is_some())
            .map(|(name, _)| {
                let after = changes
                    .iter()
                    .find(|c| c["stage"] == name.as_str())
                    .and_then(|c| c["against"].as_str())
                    .map(str::to_owned);
                (name.clone(), after)
            })
            .collect::<Vec<_>>();
        if stages.is_empty() {
            bail!("{}: no stage has scores", path.display());
        }
        // A stage's name picks its run file, run.<stage>.trec, beside results.json: nothing
        // that leaves the directory.
        if let Some((name, _)) = stages
            .iter()
            .find(|(name, _)| name.contains(['/', '\\', '\0']) || name.starts_with('.'))
        {
            bail!(
                "{}: scores: stage {name:?} is not a stage name (its run file would be outside the run's directory)",
                path.display()
            );
        }
        Ok(Self {
            dir: dir.to_owned(),
            results,
            stages,
        })
    }

    fn protocol(&self) -> &Value {
        &self.results["protocol"]
    }

    /// Where the run read its data.
    fn data(&self) -> Result<DataSource> {
        let data = &self.protocol()["data"];
        match (data["Dir"].as_str(), data["Hub"].as_str()) {
            (Some(dir), _) => Ok(DataSource::Dir(PathBuf::from(dir))),
            (None, Some(revision)) => Ok(DataSource::Hub(revision.to_owned())),
            _ => bail!(
                "{}: `protocol.data` names no data directory or revision",
                self.dir.join("results.json").display()
            ),
        }
    }

    /// The run's cut-offs (`protocol.k`): positive whole numbers no deeper than any ranking
    /// this tool makes; 5, 10 and 15 where the run records none.
    fn cutoffs(&self) -> Result<Vec<usize>> {
        let k = &self.protocol()["k"];
        if k.is_null() {
            return Ok(vec![5, 10, 15]);
        }
        let expected = || {
            format!(
                "{}: `protocol.k` is {k}; expected a list of whole numbers from 1 to {MAX_DEPTH}",
                self.dir.join("results.json").display()
            )
        };
        let list = k
            .as_array()
            .filter(|k| !k.is_empty())
            .with_context(expected)?;
        list.iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| (1..=MAX_DEPTH).contains(n))
                    .with_context(expected)
            })
            .collect()
    }

    /// The run's focus.json, if it has one: an object of format 1 with its queries and stages.
    fn focus(&self) -> Result<Option<Value>> {
        let path = self.dir.join("focus.json");
        if !path.is_file() {
            return Ok(None);
        }
        let focus = crate::commands::run::read_output(&self.dir, "focus.json")?;
        if focus["format"] != 1 || !focus["queries"].is_array() || !focus["stages"].is_object() {
            bail!(
                "{}: not a query-focus file of format 1 (with `queries` and `stages`)",
                path.display()
            );
        }
        Ok(Some(focus))
    }

    fn split(&self) -> String {
        self.protocol()["split"]
            .as_str()
            .unwrap_or("test")
            .to_owned()
    }

    fn run_of(&self, stage: &str) -> Result<Run> {
        let path = self.dir.join(format!("run.{stage}.trec"));
        Run::read_trec(&path).with_context(|| format!("reading {}", path.display()))
    }

    /// Whether a reranker's stored scores are its own (not interpolated).
    fn pointwise(&self) -> bool {
        self.protocol()["reranker"]["combine"]
            .as_str()
            .is_none_or(|c| c == "replace")
    }

    fn name(&self) -> String {
        self.dir.file_name().map_or_else(
            || self.dir.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
    }
}

pub(crate) fn run(args: &ReportArgs) -> Result<()> {
    let runs: Vec<Finished> = args
        .runs
        .iter()
        .map(|d| Finished::read(d))
        .collect::<Result<_>>()?;
    let out = match (&args.out, runs.as_slice()) {
        (Some(out), _) => out.clone(),
        (None, [one]) => one.dir.join("report.html"),
        (None, _) => bail!("--out FILE is needed with several runs (where to write their report)"),
    };
    let first = &runs[0];
    let (data, split) = match &args.data {
        Some(dir) => (DataSource::Dir(dir.clone()), first.split()),
        None => (first.data()?, first.split()),
    };
    for other in &runs[1..] {
        if other.split() != split
            || (args.data.is_none() && other.protocol()["data"] != first.protocol()["data"])
        {
            bail!(
                "{} and {} ran on different data or splits: their queries cannot be compared",
                first.dir.display(),
                other.dir.display()
            );
        }
    }
    let mut dataset = crate::stages::load_dataset(&data, &split).with_context(|| {
        format!(
            "the data of {} (give --data DIR where it is elsewhere now)",
            first.dir.display()
        )
    })?;
    if let Some(filter) = first.protocol()["skill_ids_filter"].as_str() {
        dataset
            .keep_skills(Path::new(filter))
            .with_context(|| format!("the skill_ids_filter of {}", first.dir.display()))?;
    }

    let mut stages: Vec<Stage> = Vec::new();
    if let [one] = runs.as_slice() {
        for (name, after) in &one.stages {
            let after = after
                .as_ref()
                .and_then(|a| one.stages.iter().position(|(n, _)| n == a));
            stages.push(Stage {
                name: name.clone(),
                run: one.run_of(name)?,
                after,
            });
        }
    } else {
        for (i, r) in runs.iter().enumerate() {
            let (last, _) = r.stages.last().expect("read checks a stage");
            let mut name = r.name();
            if stages.iter().any(|s| s.name == name) {
                name = format!("{name} ({})", i + 1);
            }
            stages.push(Stage {
                name,
                run: r.run_of(last)?,
                after: i.checked_sub(1),
            });
        }
    }
    let queries: Vec<&eval::Query> = {
        let run = &stages[0].run;
        let mut q: Vec<&eval::Query> = dataset
            .queries
            .iter()
            .filter(|q| run.get(&q.id).is_some())
            .collect();
        q.sort_by(|a, b| a.id.cmp(&b.id));
        q
    };
    let k = first.cutoffs()?;
    let label = dataset.label().to_owned();
    let title = match runs.as_slice() {
        [one] => format!(
            "{label} run: {}",
            one.results["config"].as_str().unwrap_or("?")
        ),
        _ => format!(
            "{label}: {}",
            runs.iter()
                .map(Finished::name)
                .collect::<Vec<_>>()
                .join(" vs ")
        ),
    };
    let mut about = vec![format!(
        "Data: {label}, split {split}: {} skills, {} queries.",
        dataset.skills.len(),
        queries.len()
    )];
    for r in &runs {
        about.push(format!(
            "{}: {} (config {}).",
            r.dir.display(),
            r.stages
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            r.results["config"].as_str().unwrap_or("?")
        ));
    }
    // One run's query focus, where it has one.
    let focus = match runs.as_slice() {
        [one] => one.focus()?,
        _ => None,
    };
    // Links to the runs' files, relative to the report where it sits in a run.
    let links = match runs.as_slice() {
        [one] if out.parent() == Some(one.dir.as_path()) => {
            let mut links: Vec<(String, String)> = ["report.md", "metrics.json", "results.json"]
                .iter()
                .map(|f| ((*f).to_owned(), (*f).to_owned()))
                .collect();
            for (name, _) in &one.stages {
                let f = format!("run.{name}.trec");
                links.push((f.clone(), f));
            }
            if focus.is_some() {
                for f in ["focus.json", "focus.tsv"] {
                    links.push((f.to_owned(), f.to_owned()));
                }
            }
            links
        }
        _ => Vec::new(),
    };
    let html = crate::html::run_page(&crate::html::RunReport {
        title,
        about,
        qrels: &dataset.qrels,
        queries: &queries,
        skills: &dataset.skills,
        stages: &stages,
        k: &k,
        pointwise: runs.iter().all(Finished::pointwise),
        links,
        focus: focus.as_ref(),
    })?;
    crate::report::write_text(&out, &html)?;
    println!("{}", out.display());
    Ok(())
}
