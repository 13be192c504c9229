//! `pipeline sweep`: every configuration of a registry in one command, as the
//! official `scripts/run_eval_embedding.sh` and `run_eval_rerank.sh` run
//! them, ending in a leaderboard.
//!
//! Each job is one `pipeline run` in a child process (so that a failed job
//! cannot take the sweep down, and a GPU worker pins its child to its device
//! through `CUDA_VISIBLE_DEVICES`): a configuration without a reranker is one
//! job; one with a reranker is a job per depth, each reusing the first
//! stage's cached vectors. A job writes into `runs/<job>.partial` and is
//! renamed to `runs/<job>` with its `job.json` (its key) only when complete:
//! a sweep run again skips every job whose directory holds the same key and
//! redoes the rest.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::SweepArgs;
use crate::config::{Overrides, Settings};

/// One `pipeline run` of the sweep.
#[derive(Debug, Clone)]
struct Job {
    /// `<config stem>`, `<config stem>@<depth>`, or, for a reranker over
    /// another configuration's first stage, `<first stage>+<config stem>@<depth>`.
    name: String,
    config: PathBuf,
    depth: Option<usize>,
    /// The job whose first stage (its `skillret.retriever.json`) this one
    /// reranks; it runs in a first phase.
    first: Option<usize>,
    /// `--top-n` for a first stage that rerankers read deeper than its own
    /// top_n.
    top_n: Option<usize>,
    /// What makes the job's result: config text, options, data, tool, and
    /// the first stage's key.
    key: String,
}

/// How a job ended.
#[derive(Debug, Clone)]
enum Outcome {
    Done { seconds: f64, reused: bool },
    Failed(String),
}

/// Builds the jobs of a sweep; configurations that do not load go to
/// `failures`.
struct Planner<'a> {
    args: &'a SweepArgs,
    jobs: Vec<Job>,
    failures: Vec<(String, String)>,
    data_revisions: HashMap<String, String>,
    /// A first-stage configuration's job, once planned.
    first_stage_jobs: HashMap<PathBuf, usize>,
}

impl Planner<'_> {
    fn load(&mut self, config: &Path) -> Result<(Settings, String)> {
        let overrides = Overrides {
            data: self.args.data.clone(),
            limit_queries: self.args.limit_queries,
            ..Overrides::default()
        };
        let settings = Settings::load(config, &overrides)?;
        let data = format!("{:?}", settings.data);
        let revision = match self.data_revisions.get(&data) {
            Some(r) => r.clone(),
            None => {
                let r = crate::provenance::data(&settings)?.revision;
                self.data_revisions.insert(data, r.clone());
                r
            }
        };
        Ok((settings, revision))
    }

    fn key(&self, config: &Path, revision: &str, extra: &str) -> Result<String> {
        let mut h = Sha256::new();
        h.update(std::fs::read(config).with_context(|| format!("reading {}", config.display()))?);
        h.update(format!(
            "\n{extra} {:?} {revision} {:?} {} {}",
            self.args.data,
            self.args.limit_queries,
            env!("CARGO_PKG_VERSION"),
            env!("SKILLRET_GIT_COMMIT")
        ));
        Ok(format!("{:x}", h.finalize()))
    }

    /// The job of a configuration without a reranker (planned once).
    fn first_stage(&mut self, config: &Path) -> Result<usize> {
        if let Some(&i) = self.first_stage_jobs.get(config) {
            return Ok(i);
        }
        let (settings, revision) = self.load(config)?;
        if settings.reranker.is_some() {
            bail!(
                "{}: a first stage to rerank must have no [reranker]",
                config.display()
            );
        }
        let key = self.key(config, &revision, "first-stage")?;
        self.jobs.push(Job {
            name: stem(config),
            config: config.to_path_buf(),
            depth: None,
            first: None,
            top_n: None,
            key,
        });
        let i = self.jobs.len() - 1;
        self.first_stage_jobs.insert(config.to_path_buf(), i);
        Ok(i)
    }

    fn plan(&mut self, config: &Path) -> Result<()> {
        let (settings, revision) = self.load(config)?;
        let Some(reranker) = &settings.reranker else {
            self.first_stage(config)?;
            return Ok(());
        };
        let depths: Vec<usize> = if self.args.rerank_depths.is_empty() {
            vec![reranker.top_n]
        } else {
            self.args.rerank_depths.clone()
        };
        let stem = stem(config);
        if settings.sweep_first_stages.is_empty() {
            // Its own first stage, one job per depth.
            for d in depths {
                let key = self.key(config, &revision, &format!("depth {d}"))?;
                self.jobs.push(Job {
                    name: format!("{stem}@{d}"),
                    config: config.to_path_buf(),
                    depth: Some(d),
                    first: None,
                    top_n: None,
                    key,
                });
            }
            return Ok(());
        }
        // Every listed first stage, each at every depth.
        let mut planned = Vec::new();
        for first in &settings.sweep_first_stages {
            let i = self.first_stage(first).with_context(|| {
                format!(
                    "{}: [sweep] first_stages: {}",
                    config.display(),
                    first.display()
                )
            })?;
            planned.push(i);
        }
        let deepest = depths.iter().copied().max().unwrap_or(0);
        for i in planned {
            let (first_name, first_config) = {
                let f = &self.jobs[i];
                (f.name.clone(), f.config.clone())
            };
            // A first stage read deeper than it retrieves retrieves deeper.
            let (first_settings, first_revision) = self.load(&first_config)?;
            if deepest > first_settings.retriever.top_n
                && self.jobs[i].top_n.is_none_or(|n| n < deepest)
            {
                self.jobs[i].top_n = Some(deepest);
                self.jobs[i].key = self.key(
                    &first_config,
                    &first_revision,
                    &format!("first-stage top {deepest}"),
                )?;
            }
            for &d in &depths {
                self.jobs.push(Job {
                    name: format!("{first_name}+{stem}@{d}"),
                    config: config.to_path_buf(),
                    depth: Some(d),
                    first: Some(i),
                    top_n: None,
                    key: String::new(),
                });
            }
        }
        Ok(())
    }

    /// Reranker-over-first-stage keys include their first stage's final key.
    fn finish(&mut self) -> Result<()> {
        for j in 0..self.jobs.len() {
            let Some(i) = self.jobs[j].first else {
                continue;
            };
            let (first_key, config, depth) = (
                self.jobs[i].key.clone(),
                self.jobs[j].config.clone(),
                self.jobs[j].depth,
            );
            let (_, revision) = self.load(&config)?;
            self.jobs[j].key = self.key(
                &config,
                &revision,
                &format!("over {first_key} depth {depth:?}"),
            )?;
        }
        Ok(())
    }
}

pub(crate) fn run(args: &SweepArgs) -> Result<()> {
    let configs = expand(&args.configs, args.filter.as_deref())?;
    if let Some(&zero) = args.rerank_depths.iter().find(|&&d| d == 0) {
        bail!("--rerank-depths: a depth of {zero} reranks nothing (each depth must be at least 1)");
    }
    std::fs::create_dir_all(args.out.join("runs"))
        .with_context(|| format!("creating {}", args.out.join("runs").display()))?;

    // Plan: a configuration that does not load is reported and skipped.
    let mut planner = Planner {
        args,
        jobs: Vec::new(),
        failures: Vec::new(),
        data_revisions: HashMap::new(),
        first_stage_jobs: HashMap::new(),
    };
    for config in &configs {
        let before = planner.jobs.len();
        if let Err(e) = planner.plan(config) {
            planner.jobs.truncate(before);
            planner.first_stage_jobs.retain(|_, i| *i < before);
            let why = format!("{e:#}");
            eprintln!("sweep: {} does not load, skipped: {why}", config.display());
            planner.failures.push((stem(config), why));
        }
    }
    planner.finish()?;
    let jobs = planner.jobs;
    let mut failures = planner.failures;
    eprintln!(
        "sweep: {} configurations, {} jobs{} → {}",
        configs.len(),
        jobs.len(),
        if failures.is_empty() {
            String::new()
        } else {
            format!(", {} configurations that do not load", failures.len())
        },
        args.out.display()
    );

    // Run: one worker per device (one after another on the CPU); first
    // stages that rerankers read run in a first phase.
    let devices: Vec<Option<usize>> = if args.devices.is_empty() {
        vec![None]
    } else {
        args.devices.iter().map(|&d| Some(d)).collect()
    };
    let outcomes: Mutex<BTreeMap<usize, Outcome>> = Mutex::new(BTreeMap::new());
    let total = jobs.len();
    let started = Instant::now();
    for phase in [false, true] {
        let queue: Mutex<VecDeque<usize>> = Mutex::new(
            (0..jobs.len())
                .filter(|&i| jobs[i].first.is_some() == phase)
                .collect(),
        );
        std::thread::scope(|scope| {
            for device in &devices {
                let (queue, outcomes, jobs) = (&queue, &outcomes, &jobs);
                scope.spawn(move || {
                    loop {
                        let next = queue.lock().map(|mut q| q.pop_front()).ok().flatten();
                        let Some(i) = next else { break };
                        let job = &jobs[i];
                        let first = job.first.map(|f| {
                            let done = outcomes
                                .lock()
                                .map(|o| matches!(o.get(&f), Some(Outcome::Done { .. })))
                                .unwrap_or(false);
                            (&jobs[f], done)
                        });
                        let outcome = match first {
                            Some((f, false)) => {
                                let why = format!("its first stage {} did not finish", f.name);
                                eprintln!("[{}/{total}] {}: skipped: {why}", i + 1, job.name);
                                Outcome::Failed(why)
                            }
                            Some((f, true)) => run_job(args, job, Some(f), *device, i + 1, total),
                            None => run_job(args, job, None, *device, i + 1, total),
                        };
                        if let Ok(mut done) = outcomes.lock() {
                            done.insert(i, outcome);
                            let failed = done
                                .values()
                                .filter(|o| matches!(o, Outcome::Failed(_)))
                                .count();
                            eprintln!(
                                "sweep: {} of {total} jobs finished ({failed} failed), {:.0} s",
                                done.len(),
                                started.elapsed().as_secs_f64()
                            );
                        }
                    }
                });
            }
        });
    }
    let outcomes = outcomes.into_inner().unwrap_or_default();
    for (i, outcome) in &outcomes {
        if let Outcome::Failed(why) = outcome {
            failures.push((jobs[*i].name.clone(), why.clone()));
        }
    }
    let (mut reused, mut ran, mut job_seconds) = (0, 0, 0.0);
    for outcome in outcomes.values() {
        if let Outcome::Done { seconds, reused: r } = outcome {
            if *r {
                reused += 1;
            } else {
                ran += 1;
                job_seconds += seconds;
            }
        }
    }
    eprintln!(
        "sweep: {ran} jobs run ({job_seconds:.1} s of job time), {reused} finished before and not recomputed"
    );
    let rows = leaderboard_rows(args, &jobs, &outcomes)?;
    write_leaderboard(&args.out, &rows, &failures)?;
    println!("{}", markdown_table(&rows));
    eprintln!(
        "sweep: leaderboard in {} and {} ({} rows); {} job(s) failed",
        args.out.join("leaderboard.md").display(),
        args.out.join("leaderboard.html").display(),
        rows.len(),
        failures.len()
    );
    for (name, why) in &failures {
        eprintln!("  FAILED {name}: {why}");
    }
    // The others finished and are on the leaderboard; the exit status
    // still says that not everything did.
    if !failures.is_empty() {
        bail!(
            "{} configuration(s) or job(s) of the sweep failed (listed above and in leaderboard.md); the rest are on the leaderboard",
            failures.len()
        );
    }
    Ok(())
}

/// The configuration files `pattern` matches, sorted, kept where `filter`
/// finds a match in their name.
fn expand(pattern: &str, filter: Option<&str>) -> Result<Vec<PathBuf>> {
    let paths = glob::glob(pattern).with_context(|| format!("--configs {pattern:?}"))?;
    let mut configs: Vec<PathBuf> = paths
        .filter_map(std::result::Result::ok)
        .filter(|p| p.is_file())
        .collect();
    configs.sort();
    if configs.is_empty() {
        bail!(
            "--configs {pattern:?} matches no file (quote the pattern so that the shell leaves it to the sweep)"
        );
    }
    if let Some(filter) = filter {
        let re = regex::Regex::new(filter).with_context(|| format!("--filter {filter:?}"))?;
        let before = configs.len();
        configs.retain(|p| re.is_match(&stem(p)));
        if configs.is_empty() {
            bail!(
                "--filter {filter:?} keeps none of the {before} configurations {pattern:?} matches"
            );
        }
    }
    Ok(configs)
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "config".to_owned(), |s| s.to_string_lossy().into_owned())
}

/// Runs one job unless its finished directory holds the same key.
fn run_job(
    args: &SweepArgs,
    job: &Job,
    first: Option<&Job>,
    device: Option<usize>,
    n: usize,
    total: usize,
) -> Outcome {
    let runs = args.out.join("runs");
    let done_dir = runs.join(&job.name);
    if read_key(&done_dir).as_deref() == Some(job.key.as_str()) {
        eprintln!(
            "[{n}/{total}] {}: finished before (same key), not recomputed",
            job.name
        );
        return Outcome::Done {
            seconds: 0.0,
            reused: true,
        };
    }
    let partial = runs.join(format!("{}.partial", job.name));
    let log = runs.join(format!("{}.log", job.name));
    let _ = std::fs::remove_dir_all(&partial);
    let on = device.map_or_else(|| "the CPU".to_owned(), |d| format!("GPU {d}"));
    eprintln!(
        "[{n}/{total}] {}: started on {on} (log: {})",
        job.name,
        log.display()
    );
    let started = Instant::now();
    let first_stage = first.map(|f| runs.join(&f.name).join("skillret.retriever.json"));
    let result = spawn(args, job, first_stage.as_deref(), device, &partial, &log).and_then(|()| {
        let seconds = started.elapsed().as_secs_f64();
        let meta = json!({
            "key": job.key,
            "config": job.config.display().to_string(),
            "depth": job.depth,
            "device": device,
            "seconds": seconds,
        });
        crate::report::write_json(&partial.join("job.json"), &meta)?;
        let _ = std::fs::remove_dir_all(&done_dir);
        std::fs::rename(&partial, &done_dir)
            .with_context(|| format!("moving {} into place", partial.display()))?;
        // The results file in the MTEB-shaped tree.
        let results: Value = serde_json::from_str(
            &std::fs::read_to_string(done_dir.join("results.json")).context("results.json")?,
        )?;
        // A reranker over another job's first stage files under that
        // first stage's model.
        let first_results: Option<Value> = first.and_then(|f| {
            let text = std::fs::read_to_string(runs.join(&f.name).join("results.json")).ok()?;
            serde_json::from_str(&text).ok()
        });
        let rel = first_results
            .as_ref()
            .unwrap_or(&results)
            .get("results_path")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if let Some(rel) = rel {
            let rel = match job.depth {
                Some(d) => with_depth(&rel, &results, d),
                None => PathBuf::from(rel),
            };
            let to = args.out.join(rel);
            if let Some(parent) = to.parent() {
                std::fs::create_dir_all(parent)?;
            }
            crate::report::write_json(&to, &results)?;
        }
        Ok(seconds)
    });
    match result {
        Ok(seconds) => {
            eprintln!("[{n}/{total}] {}: done in {seconds:.1} s", job.name);
            Outcome::Done {
                seconds,
                reused: false,
            }
        }
        Err(e) => {
            let why = format!("{e:#}");
            eprintln!("[{n}/{total}] {}: FAILED: {why}", job.name);
            Outcome::Failed(why)
        }
    }
}

/// A reranker job's results path: the reranker and depth after the first
/// stage's model (`<embedder>/…` → `<embedder>+<reranker>@<depth>/…`).
fn with_depth(rel: &str, results: &Value, depth: usize) -> PathBuf {
    let reranker = results["models"]["reranker"]["id"]
        .as_str()
        .unwrap_or("reranker")
        .rsplit('/')
        .next()
        .unwrap_or("reranker")
        .to_owned();
    let path = Path::new(rel);
    let mut parts: Vec<String> = path
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    // <model…>/<revision>/<file>: the model is everything before the last two.
    let at = parts.len().saturating_sub(3);
    if let Some(model) = parts.get_mut(at) {
        *model = format!("{model}+{reranker}@{depth}");
    }
    parts.iter().collect()
}

fn read_key(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("job.json")).ok()?;
    let value: Value = serde_json::from_str(&text).ok()?;
    value["key"].as_str().map(str::to_owned)
}

/// `pipeline run` for the job in a child process, its output in `log`.
fn spawn(
    args: &SweepArgs,
    job: &Job,
    first_stage: Option<&Path>,
    device: Option<usize>,
    out: &Path,
    log: &Path,
) -> Result<()> {
    let mut cmd = crate::child_command()?;
    cmd.arg("run")
        .arg("--config")
        .arg(&job.config)
        .arg("--out")
        .arg(out);
    if let Some(data) = &args.data {
        cmd.arg("--data").arg(data);
    }
    if let Some(n) = args.limit_queries {
        cmd.arg("--limit-queries").arg(n.to_string());
    }
    if let Some(d) = job.depth {
        cmd.arg("--rerank-depth").arg(d.to_string());
    }
    if let Some(n) = job.top_n {
        cmd.arg("--top-n").arg(n.to_string());
    }
    if let Some(file) = first_stage {
        cmd.arg("--first-stage").arg(file);
    }
    if let Some(d) = device {
        cmd.env("CUDA_VISIBLE_DEVICES", d.to_string());
    }
    let file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    cmd.stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file));
    die_with_parent(&mut cmd);
    let status = cmd.status().context("starting pipeline run")?;
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let last: Vec<&str> = text
        .lines()
        .rev()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    let last: Vec<&str> = last.into_iter().rev().collect();
    bail!("pipeline run exited with {status}: {}", last.join(" | "))
}

/// A killed sweep leaves no job running behind it: the child gets SIGKILL
/// when its parent dies (Linux).
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// One line of the leaderboard.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    model: String,
    revision: String,
    stage: String,
    first_stage: Option<String>,
    depth: Option<usize>,
    config: String,
    scores: BTreeMap<String, f64>,
    /// The reranker's NDCG@10 change on its first stage, and its p-value.
    delta_ndcg_10: Option<f64>,
    p: Option<f64>,
    tokens_per_s: Option<f64>,
    wall_s: f64,
    device: String,
    /// The job's report, relative to the sweep's directory.
    report: String,
    /// A first stage's query focus (its configuration asked for it): focus headroom and
    /// concentration, the means of focus.json's summary.
    focus: Option<[f64; 2]>,
}

/// A first stage's focus headroom and concentration from its run's focus.json, if it has one.
fn read_focus(dir: &Path) -> Option<[f64; 2]> {
    let text = std::fs::read_to_string(dir.join("focus.json")).ok()?;
    let focus: Value = serde_json::from_str(&text).ok()?;
    let summary = &focus["stages"]["retriever"]["summary"];
    Some([
        summary["focus_headroom"]["mean"].as_f64()?,
        summary["concentration"]["mean"].as_f64()?,
    ])
}

/// The focus columns, where any row has them.
const FOCUS: [&str; 2] = ["focus headroom", "concentration"];

const COLUMNS: [&str; 10] = [
    "NDCG@5",
    "NDCG@10",
    "NDCG@15",
    "Recall@5",
    "Recall@10",
    "Recall@15",
    "Completeness@5",
    "Completeness@10",
    "Completeness@15",
    "MRR",
];

/// The leaderboard's rows from every finished job's results, by NDCG@10.
fn leaderboard_rows(
    args: &SweepArgs,
    jobs: &[Job],
    outcomes: &BTreeMap<usize, Outcome>,
) -> Result<Vec<Row>> {
    let mut rows: Vec<Row> = Vec::new();
    let mut first_stages_seen = std::collections::HashSet::new();
    for (i, job) in jobs.iter().enumerate() {
        let Some(Outcome::Done { .. }) = outcomes.get(&i) else {
            continue;
        };
        let dir = args.out.join("runs").join(&job.name);
        let path = dir.join("results.json");
        let results: Value = serde_json::from_str(
            &std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?,
        )
        .with_context(|| format!("{}: not JSON", path.display()))?;
        let scores = |stage: &str| -> BTreeMap<String, f64> {
            COLUMNS
                .iter()
                .filter_map(|c| {
                    results["scores"][stage][*c]
                        .as_f64()
                        .map(|v| ((*c).to_owned(), v))
                })
                .collect()
        };
        let wall_s = results["timings"]["total_seconds"].as_f64().unwrap_or(0.0);
        let (tokens, embed_s) = results["timings"]["stages"]
            .as_array()
            .map(|stages| {
                stages
                    .iter()
                    .filter_map(|s| Some((s["tokens"].as_f64()?, s["seconds"].as_f64()?)))
                    .fold((0.0, 0.0), |(t, s), (a, b)| (t + a, s + b))
            })
            .unwrap_or((0.0, 0.0));
        let device = describe_device(&results);
        let embedder = &results["models"]["embedder"];
        // A reranker over another job's first stage: that job names it.
        let first_model = match job.first {
            Some(f) => {
                let path = args
                    .out
                    .join("runs")
                    .join(&jobs[f].name)
                    .join("results.json");
                let first: Value = serde_json::from_str(
                    &std::fs::read_to_string(&path)
                        .with_context(|| format!("reading {}", path.display()))?,
                )?;
                first_stage_label(&first)
            }
            None => first_stage_label(&results),
        };
        let first_revision = embedder["revision"].as_str().unwrap_or("-").to_owned();
        let config = job.config.display().to_string();
        if job.first.is_none() && first_stages_seen.insert((config.clone(), first_model.clone())) {
            rows.push(Row {
                model: first_model.clone(),
                revision: first_revision,
                stage: "retriever".to_owned(),
                first_stage: None,
                depth: None,
                config: config.clone(),
                scores: scores("retriever"),
                delta_ndcg_10: None,
                p: None,
                tokens_per_s: (embed_s > 0.0).then(|| tokens / embed_s),
                wall_s,
                device: device.clone(),
                report: format!("runs/{}/report.html", job.name),
                focus: read_focus(&dir),
            });
        }
        if job.depth.is_some() {
            let reranker = &results["models"]["reranker"];
            let change = results["changes"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["stage"] == "reranker"));
            rows.push(Row {
                model: reranker["id"].as_str().unwrap_or("reranker").to_owned(),
                revision: reranker["revision"].as_str().unwrap_or("-").to_owned(),
                stage: "reranker".to_owned(),
                first_stage: Some(first_model),
                depth: job.depth,
                config,
                scores: scores("reranker"),
                delta_ndcg_10: change.and_then(|c| c["delta"].as_f64()),
                p: change.and_then(|c| c["p"].as_f64()),
                tokens_per_s: None,
                wall_s,
                device,
                report: format!("runs/{}/report.html", job.name),
                focus: None,
            });
        }
    }
    let ndcg = |r: &Row| {
        r.scores
            .get("NDCG@10")
            .copied()
            .unwrap_or(f64::NEG_INFINITY)
    };
    rows.sort_by(|a, b| {
        ndcg(b)
            .total_cmp(&ndcg(a))
            .then_with(|| a.model.cmp(&b.model))
            .then_with(|| a.depth.cmp(&b.depth))
            .then_with(|| a.config.cmp(&b.config))
    });
    Ok(rows)
}

/// A first stage in words: its model, with its kind and index where not
/// dense and exact (a hybrid or an HNSW index is a first stage of its own),
/// or its kind alone without an embedder (bm25).
fn first_stage_label(results: &Value) -> String {
    let retriever = &results["protocol"]["retriever"];
    match results["models"]["embedder"]["id"].as_str() {
        None => job_stage_label(results),
        Some(id) => {
            let mut label = id.to_owned();
            for (key, plain) in [("kind", "dense"), ("index", "exact")] {
                if let Some(v) = retriever[key]
                    .as_str()
                    .filter(|v| !v.eq_ignore_ascii_case(plain))
                {
                    let _ = write!(label, " ({})", v.to_lowercase());
                }
            }
            label
        }
    }
}

/// A first stage without an embedder: its kind (bm25).
fn job_stage_label(results: &Value) -> String {
    results["protocol"]["retriever"]["kind"]
        .as_str()
        .unwrap_or("retriever")
        .to_owned()
}

/// The machine a job ran on, the same whether its models were loaded or
/// every vector came from the cache: the CPU and its instruction level, and
/// CUDA where a stage was configured for it.
fn describe_device(results: &Value) -> String {
    let device = &results["device"];
    let cpu = format!(
        "{} ({})",
        device["cpu"].as_str().unwrap_or("?"),
        device["instruction_level"].as_str().unwrap_or("?")
    );
    let cuda = ["embedder", "reranker"].iter().any(|stage| {
        results["protocol"][stage]["backend"]
            .as_str()
            .is_some_and(|b| b.eq_ignore_ascii_case("cuda"))
    });
    if cuda {
        format!("CUDA GPU; {cpu}")
    } else {
        cpu
    }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".to_owned(), |v| format!("{v:.digits$}"))
}

fn markdown_table(rows: &[Row]) -> String {
    let mut s = String::from("| model | revision | stage | first stage | depth |");
    for c in COLUMNS {
        let _ = write!(s, " {c} |");
    }
    let focus = rows.iter().any(|r| r.focus.is_some());
    if focus {
        for c in FOCUS {
            let _ = write!(s, " {c} |");
        }
    }
    s.push_str(" Δ NDCG@10 | p | tokens/s | wall s | device |\n|---|---|---|---|---:|");
    for _ in 0..COLUMNS.len() + 4 + if focus { FOCUS.len() } else { 0 } {
        s.push_str("---:|");
    }
    s.push_str("---|\n");
    for r in rows {
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.model,
            r.revision,
            r.stage,
            r.first_stage.as_deref().unwrap_or("–"),
            r.depth.map_or_else(|| "–".to_owned(), |d| d.to_string())
        );
        for c in COLUMNS {
            let _ = write!(s, " {} |", fmt_opt(r.scores.get(c).copied(), 4));
        }
        if focus {
            for i in 0..FOCUS.len() {
                let _ = write!(s, " {} |", fmt_opt(r.focus.map(|f| f[i]), 4));
            }
        }
        let _ = writeln!(
            s,
            " {} | {} | {} | {:.1} | {} |",
            r.delta_ndcg_10
                .map_or_else(|| "–".to_owned(), |d| format!("{d:+.4}")),
            fmt_opt(r.p, 4),
            fmt_opt(r.tokens_per_s, 0),
            r.wall_s,
            r.device
        );
    }
    s
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

fn write_leaderboard(out: &Path, rows: &[Row], failures: &[(String, String)]) -> Result<()> {
    let mut md = String::from(
        "# Leaderboard\n\nSorted by NDCG@10. Δ NDCG@10: the reranker's change on its first stage, p: paired randomization test (two-sided). tokens/s: the embedder's, where this job embedded (blank when every vector came from the cache). Focus headroom and concentration, where a configuration asks for query focus: its first stage's (focus.json).\n\n",
    );
    md.push_str(&markdown_table(rows));
    if !failures.is_empty() {
        md.push_str("\n## Failed\n\n");
        for (name, why) in failures {
            let _ = writeln!(md, "- `{name}`: {why}");
        }
    }
    crate::report::write_text(&out.join("leaderboard.md"), &md)?;

    let mut csv = String::from("model,revision,stage,first_stage,depth,config");
    for c in COLUMNS {
        let _ = write!(csv, ",{c}");
    }
    let focus = rows.iter().any(|r| r.focus.is_some());
    if focus {
        csv.push_str(",focus_headroom,concentration");
    }
    csv.push_str(",delta_NDCG@10,p,tokens_per_s,wall_s,device\n");
    for r in rows {
        let _ = write!(
            csv,
            "{},{},{},{},{},{}",
            csv_field(&r.model),
            csv_field(&r.revision),
            r.stage,
            csv_field(r.first_stage.as_deref().unwrap_or("")),
            r.depth.map(|d| d.to_string()).unwrap_or_default(),
            csv_field(&r.config)
        );
        for c in COLUMNS {
            let _ = write!(
                csv,
                ",{}",
                r.scores.get(c).map(ToString::to_string).unwrap_or_default()
            );
        }
        if focus {
            for i in 0..FOCUS.len() {
                let v = r.focus.map(|f| f[i].to_string()).unwrap_or_default();
                let _ = write!(csv, ",{v}");
            }
        }
        let _ = writeln!(
            csv,
            ",{},{},{},{},{}",
            r.delta_ndcg_10.map(|v| v.to_string()).unwrap_or_default(),
            r.p.map(|v| v.to_string()).unwrap_or_default(),
            r.tokens_per_s
                .map(|v| format!("{v:.0}"))
                .unwrap_or_default(),
            r.wall_s,
            csv_field(&r.device)
        );
    }
    crate::report::write_text(&out.join("leaderboard.csv"), &csv)?;
    let failed: Vec<Value> = failures
        .iter()
        .map(|(name, why)| json!({"job": name, "error": why}))
        .collect();
    crate::report::write_json(
        &out.join("leaderboard.json"),
        &json!({"rows": rows, "failed": failed}),
    )?;
    crate::report::write_text(
        &out.join("leaderboard.svg"),
        &crate::plot::leaderboard_svg(&bars(rows)),
    )?;
    crate::report::write_text(
        &out.join("leaderboard.html"),
        &crate::html::leaderboard_page("Sweep leaderboard", &leaderboard_data(out, rows, failures)),
    )?;
    Ok(())
}

/// The measure the leaderboard ranks by.
const RANKED_BY: &str = "NDCG@10";

/// Each query's NDCG@10 in one stage of a finished run, by query id, from
/// its `per_query.tsv` (empty where it cannot be read).
fn per_query_ndcg(out: &Path, report: &str, stage: &str) -> BTreeMap<String, f64> {
    let Some(dir) = Path::new(report).parent() else {
        return BTreeMap::new();
    };
    let Ok(text) = std::fs::read_to_string(out.join(dir).join("per_query.tsv")) else {
        return BTreeMap::new();
    };
    let mut lines = text.lines();
    let Some(column) = lines
        .next()
        .and_then(|h| h.split('\t').position(|c| c == RANKED_BY))
    else {
        return BTreeMap::new();
    };
    lines
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            (fields.get(1) == Some(&stage))
                .then(|| Some((fields[0].to_owned(), fields.get(column)?.parse().ok()?)))
                .flatten()
        })
        .collect()
}

/// leaderboard.html's data: each row with its 95% bootstrap interval over
/// queries, and tiers: a row whose difference to the row above is not
/// significant (paired randomization test on the queries both scored,
/// p ≥ 0.05) shares its tier.
fn leaderboard_data(out: &Path, rows: &[Row], failures: &[(String, String)]) -> Value {
    let mut tier = 0;
    let mut above: Option<BTreeMap<String, f64>> = None;
    let mut list = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let values = per_query_ndcg(out, &r.report, &r.stage);
        let v: Vec<f64> = values.values().copied().collect();
        let (lo, hi) = eval::stats::bootstrap_interval(&v, 2_000, 0.95, 20_261_206 + i as u64);
        let same_tier = above.as_ref().is_some_and(|a| {
            let (x, y): (Vec<f64>, Vec<f64>) = a
                .iter()
                .filter_map(|(q, x)| Some((*x, *values.get(q)?)))
                .unzip();
            !x.is_empty()
                && eval::stats::paired_randomization_test(
                    &x,
                    &y,
                    crate::ranking::TRIALS,
                    crate::ranking::SEED,
                ) >= 0.05
        });
        if !same_tier {
            tier += 1;
        }
        let short = r.model.rsplit('/').next().unwrap_or(&r.model);
        let label = match (r.stage.as_str(), &r.first_stage, r.depth) {
            ("reranker", Some(first), Some(d)) => {
                format!("{} +{short}@{d}", first.rsplit('/').next().unwrap_or(first))
            }
            _ => short.to_owned(),
        };
        let finite = |x: f64| x.is_finite().then_some(x);
        let mut scores = r.scores.clone();
        if let Some(f) = r.focus {
            scores.extend(FOCUS.iter().zip(f).map(|(c, v)| ((*c).to_owned(), v)));
        }
        list.push(json!({
            "label": label,
            "model": r.model,
            "stage": r.stage,
            "first_stage": r.first_stage,
            "depth": r.depth,
            "value": r.scores.get(RANKED_BY),
            "lo": finite(lo),
            "hi": finite(hi),
            "tier": tier,
            "delta": r.delta_ndcg_10,
            "p": r.p,
            "scores": scores,
            "report": r.report,
        }));
        above = Some(values);
    }
    let failed: Vec<Value> = failures
        .iter()
        .map(|(name, why)| json!({"job": name, "error": why}))
        .collect();
    json!({
        "kind": "leaderboard",
        "title": "Sweep leaderboard",
        "about": [format!("{} rows, sorted by {RANKED_BY}; each links its run's report.", rows.len())],
        "metric": RANKED_BY,
        "columns": COLUMNS
            .iter()
            .filter(|c| **c != RANKED_BY)
            .chain(FOCUS.iter().filter(|_| rows.iter().any(|r| r.focus.is_some())))
            .collect::<Vec<_>>(),
        "rows": list,
        "failed": failed,
    })
}

/// Per first stage: its NDCG@10 and, per reranker and depth, the change.
fn bars(rows: &[Row]) -> Vec<crate::plot::Bar> {
    let mut out: Vec<crate::plot::Bar> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    // One bar per first stage (the same model under two configurations
    // scores the same), its rerankers beside it.
    for r in rows
        .iter()
        .filter(|r| r.stage == "retriever" && seen.insert(r.model.clone()))
    {
        let base = r.scores.get("NDCG@10").copied().unwrap_or(0.0);
        out.push(crate::plot::Bar {
            label: r.model.rsplit('/').next().unwrap_or(&r.model).to_owned(),
            base,
            gain: None,
        });
        for x in rows
            .iter()
            .filter(|x| x.stage == "reranker" && x.first_stage.as_deref() == Some(&r.model))
        {
            out.push(crate::plot::Bar {
                label: format!(
                    "+{}@{}",
                    x.model.rsplit('/').next().unwrap_or(&x.model),
                    x.depth.unwrap_or(0)
                ),
                base,
                gain: x.scores.get("NDCG@10").map(|v| v - base),
            });
        }
    }
    out
}
