//! `results.json`: a run's scores with everything needed to trace them back
//! (MTEB keeps the same for each model, revision and task): the models and
//! the sha256 of their weights, the dataset revision and the sha256 of every
//! data file, the tool's version and commit, the device, the protocol, the
//! time per stage, the scores per stage and their breakdowns.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::config::{DataSource, ModelRef, Settings};
use crate::report::StageTiming;

/// The results file's format version.
const FORMAT: u32 = 1;

/// Lower-case hex sha256 of a file, read in blocks.
pub(crate) fn sha256_file(path: &Path) -> Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(format!("{:x}", hasher.finalize()))
}

/// The data: its source, revision (a local directory's is `local-` and the
/// first 12 hex digits of the sha256 over its files' hashes) and files.
pub(crate) struct DataProvenance {
    pub(crate) revision: String,
    pub(crate) value: Value,
}

pub(crate) fn data(settings: &Settings) -> Result<DataProvenance> {
    let mut files = Map::new();
    let (source, revision, commit) = match &settings.data {
        DataSource::Dir(dir) => {
            let split = eval::SplitFiles::in_dir(dir, &settings.split)?;
            let mut paths: Vec<PathBuf> = vec![split.skills, split.queries];
            paths.extend(split.qrels);
            let mut all = Sha256::new();
            for path in &paths {
                let sha = sha256_file(path)?;
                let name = path
                    .strip_prefix(dir)
                    .unwrap_or(path)
                    .to_string_lossy()
                    .into_owned();
                all.update(format!("{name}\t{sha}\n"));
                files.insert(name, json!(sha));
            }
            let digest = format!("{:x}", all.finalize());
            (
                dir.display().to_string(),
                format!("local-{}", &digest[..12]),
                None,
            )
        }
        DataSource::Hub(name) => {
            let revision = eval::hub::Revision::find(name)?;
            for file in revision.files {
                if file.path.ends_with(&format!("/{}.jsonl", settings.split)) {
                    files.insert(file.path.to_owned(), json!(file.sha256));
                }
            }
            (
                eval::hub::DATASET_REPO.to_owned(),
                revision.name.to_owned(),
                Some(revision.commit),
            )
        }
    };
    let mut value = json!({
        "source": source,
        "revision": revision,
        "commit": commit,
        "split": settings.split,
        "sha256": files,
    });
    if let Some(filter) = &settings.skill_ids_filter {
        value["skill_ids_filter"] = json!({
            "file": filter.display().to_string(),
            "sha256": sha256_file(filter)?,
        });
    }
    Ok(DataProvenance { revision, value })
}

/// The Hub commit of a model resolved into the Hub cache
/// (`…/snapshots/<commit>`), if that is where it lies.
fn snapshot_commit(dir: &Path) -> Option<String> {
    let mut parts = dir.components().rev();
    let last = parts.next()?.as_os_str().to_str()?;
    let parent = parts.next()?.as_os_str().to_str()?;
    (parent == "snapshots" && last.len() == 40 && last.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| last.to_owned())
}

/// A model: its id as configured, its revision (configured, or the commit
/// it resolved to, or `no_revision_available` as MTEB writes it), its
/// directory and the sha256 of its weight files.
pub(crate) struct ModelProvenance {
    pub(crate) revision: String,
    pub(crate) value: Value,
}

pub(crate) fn model(model: &ModelRef, dir: Option<&Path>) -> Result<ModelProvenance> {
    let resolved = dir.and_then(snapshot_commit);
    // A Hub id read from a local copy (the Hub out of reach): its bytes are
    // known, its revision is not.
    let local_copy = dir.is_some() && resolved.is_none() && !Path::new(&model.model).is_dir();
    let revision = if local_copy {
        None
    } else {
        model.revision.clone().or_else(|| resolved.clone())
    }
    .unwrap_or_else(|| "no_revision_available".to_owned());
    let mut weights = Map::new();
    if let Some(dir) = dir {
        let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("listing {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| matches!(e, "safetensors" | "bin" | "onnx" | "gguf"))
            })
            .collect();
        names.sort();
        for path in names {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            weights.insert(name.unwrap_or_default(), json!(sha256_file(&path)?));
        }
    }
    Ok(ModelProvenance {
        revision: revision.clone(),
        value: json!({
            "id": model.model,
            "revision": revision,
            "configured_revision": model.revision,
            "resolved_commit": resolved,
            "local_copy": local_copy,
            "dir": dir.map(|d| d.display().to_string()),
            "weights_sha256": weights,
        }),
    })
}

/// The machine: CPU model and the instruction level the native engine
/// uses; what each model ran on, in the engine's words, when it was loaded.
pub(crate) fn device(embedder: Option<&str>, reranker: Option<&str>) -> Value {
    let cpu = engine::rates::cpu_model().unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let isa = engine::isa::resolve(
        std::env::var(engine::isa::ENV).ok().as_deref(),
        &engine::Isa::on_this_cpu(),
    )
    .map_or_else(|e| e, |level| level.to_string());
    json!({
        "cpu": cpu,
        "threads": rayon::current_num_threads(),
        "instruction_level": isa,
        "embedder": embedder,
        "reranker": reranker,
    })
}

/// Everything else the results file holds.
pub(crate) struct Results<'a> {
    pub(crate) settings: &'a Settings,
    pub(crate) label: &'a str,
    pub(crate) data: DataProvenance,
    pub(crate) embedder: Option<ModelProvenance>,
    pub(crate) reranker: Option<ModelProvenance>,
    pub(crate) device: Value,
    pub(crate) timings: &'a [StageTiming],
    pub(crate) scores: &'a Map<String, Value>,
    pub(crate) breakdowns: &'a Value,
    pub(crate) changes: &'a [crate::report::Change],
}

impl Results<'_> {
    /// The model a results tree files this run under (`bm25` for BM25
    /// alone), and its revision.
    pub(crate) fn model_and_revision(&self) -> (String, String) {
        if let Some(file) = &self.settings.first_stage {
            let name = file.parent().and_then(Path::file_name).map_or_else(
                || "first-stage".to_owned(),
                |n| n.to_string_lossy().into_owned(),
            );
            return (
                format!("first-stage-{name}"),
                "no_revision_available".to_owned(),
            );
        }
        let (model, revision) = match (&self.settings.embedder, &self.embedder) {
            (Some(e), Some(p)) => (e.label(), p.revision.clone()),
            (Some(e), None) => (e.label(), "no_revision_available".to_owned()),
            _ => ("bm25".to_owned(), "no_revision_available".to_owned()),
        };
        // A local directory by its name (a Hub id keeps `org/name`); a
        // hybrid or an approximate index is a first stage of its own.
        let mut model = if Path::new(&model).is_dir() {
            Path::new(&model)
                .file_name()
                .map_or(model.clone(), |n| n.to_string_lossy().into_owned())
        } else {
            model
        };
        let r = &self.settings.retriever;
        if self.settings.embedder.is_some() {
            if r.kind == crate::config::RetrieverKind::Hybrid {
                model.push_str("-hybrid");
            }
            if r.index != crate::config::IndexKind::Exact {
                model.push_str(&format!("-{:?}", r.index).to_lowercase());
            }
        }
        (model, revision)
    }

    /// The file's name in an MTEB-shaped tree:
    /// `<model>/<revision>/SkillRet-<dataset revision>-<split>.json`, the
    /// model's `/` kept as a directory level as MTEB's `__` is not needed.
    pub(crate) fn relative_path(&self) -> PathBuf {
        let (model, revision) = self.model_and_revision();
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        let model: PathBuf = model.split('/').map(clean).collect();
        model.join(clean(&revision)).join(format!(
            "{}-{}-{}.json",
            clean(self.label),
            clean(&self.data.revision),
            clean(&self.settings.split)
        ))
    }

    pub(crate) fn to_json(&self) -> Value {
        let s = self.settings;
        let stages: Vec<Value> = self
            .timings
            .iter()
            .map(|t| {
                json!({"stage": t.stage, "seconds": t.seconds, "detail": t.detail, "tokens": t.tokens})
            })
            .collect();
        let mut protocol = serde_json::to_value(s).unwrap_or(Value::Null);
        if let Value::Object(map) = &mut protocol {
            // Where outputs went is not part of the protocol.
            map.remove("out");
            map.remove("cache");
        }
        let first_stage = s.first_stage.as_ref().map(|file| {
            json!({
                "file": file.display().to_string(),
                "sha256": sha256_file(file).ok(),
            })
        });
        json!({
            "format": FORMAT,
            "first_stage": first_stage,
            "task": self.label,
            "results_path": self.relative_path().display().to_string(),
            "config": s.path.display().to_string(),
            "dataset": self.data.value,
            "models": {
                "embedder": self.embedder.as_ref().map(|m| &m.value),
                "reranker": self.reranker.as_ref().map(|m| &m.value),
            },
            "tool": {
                "name": "skillret-rs pipeline",
                "version": env!("CARGO_PKG_VERSION"),
                "git_commit": env!("SKILLRET_GIT_COMMIT"),
            },
            "device": self.device,
            "protocol": protocol,
            "timings": {
                "stages": stages,
                "total_seconds": self.timings.iter().map(|t| t.seconds).sum::<f64>(),
            },
            "scores": self.scores,
            "changes": self.changes,
            "breakdowns": self.breakdowns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Overrides;

    /// Where the results of a configuration file (its `[retriever]` given)
    /// are filed.
    fn path_of(retriever: &str) -> PathBuf {
        let dir = tempfile::tempdir().unwrap();
        let model = dir.path().join("all-MiniLM-L6-v2");
        std::fs::create_dir_all(&model).unwrap();
        let config = dir.path().join("c.toml");
        std::fs::write(
            &config,
            format!(
                "[data]\ndir = \"d\"\n[embedder]\nmodel = \"{}\"\n[retriever]\n{retriever}\n",
                model.display()
            ),
        )
        .unwrap();
        let settings = Settings::load(&config, &Overrides::default()).unwrap();
        let results = Results {
            settings: &settings,
            label: "SkillRet",
            data: DataProvenance {
                revision: "v1.1".to_owned(),
                value: Value::Null,
            },
            embedder: None,
            reranker: None,
            device: Value::Null,
            timings: &[],
            scores: &Map::new(),
            breakdowns: &Value::Null,
            changes: &[],
        };
        results.relative_path()
    }

    #[test]
    fn each_first_stage_is_filed_apart() {
        let exact = path_of("kind = \"dense\"");
        assert_eq!(
            exact,
            Path::new("all-MiniLM-L6-v2/no_revision_available/SkillRet-v1.1-test.json")
        );
        let hybrid = path_of("kind = \"hybrid\"");
        let hnsw = path_of("kind = \"dense\"\nindex = \"hnsw\"");
        assert!(
            hybrid.starts_with("all-MiniLM-L6-v2-hybrid"),
            "{}",
            hybrid.display()
        );
        assert!(
            hnsw.starts_with("all-MiniLM-L6-v2-hnsw"),
            "{}",
            hnsw.display()
        );
    }
}
