//! Per-task LoRA adapters merged into a checkpoint's projections at load
//! (jina-embeddings-v5): `adapters/<task>/adapter_config.json` (PEFT's
//! `r` and `lora_alpha`) and `adapters/<task>/adapter_model.safetensors`
//! (`base_model.model.<module>.lora_A.weight`, `r × inputs`, and
//! `….lora_B.weight`, `outputs × r`), as vLLM's jina-embeddings-v5 loader
//! reads them: `W ← W + (α / r) · B·A`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::files::TensorFile;

/// The folder of a model directory that holds its adapters.
pub(crate) const ADAPTERS: &str = "adapters";

/// One task's adapter, ready to merge.
pub(crate) struct Lora {
    task: String,
    path: PathBuf,
    scaling: f32,
    rank: usize,
    /// Module name (`layers.0.self_attn.q_proj`) → its `A` and `B` names.
    pairs: BTreeMap<String, (String, String)>,
    file: TensorFile,
    /// Modules merged so far (every pair must be used by the model).
    merged: Mutex<BTreeSet<String>>,
}

impl std::fmt::Debug for Lora {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lora")
            .field("task", &self.task)
            .field("path", &self.path)
            .field("rank", &self.rank)
            .field("pairs", &self.pairs.len())
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct AdapterConfig {
    r: usize,
    lora_alpha: f64,
}

/// The tasks a model directory has adapters for (sorted), empty if none.
pub(crate) fn tasks(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join(ADAPTERS)) else {
        return Vec::new();
    };
    let mut tasks: Vec<String> = entries
        .filter_map(std::result::Result::ok)
        .filter(|e| e.path().join("adapter_config.json").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_owned))
        .collect();
    tasks.sort();
    tasks
}

impl Lora {
    /// The adapter of `task` in `dir`; an error listing the tasks there if
    /// it has none of that name.
    pub(crate) fn open(dir: &Path, task: &str) -> Result<Self> {
        let available = tasks(dir);
        if !available.iter().any(|t| t == task) {
            return Err(Error::format(
                &dir.join(ADAPTERS),
                format!(
                    "task {task:?}: no such adapter (this model has: {})",
                    if available.is_empty() {
                        "none".to_owned()
                    } else {
                        available.join(", ")
                    }
                ),
            ));
        }
        let folder = dir.join(ADAPTERS).join(task);
        let config_path = folder.join("adapter_config.json");
        let config: AdapterConfig = crate::config::read_json(&config_path)?;
        if config.r == 0 || !config.lora_alpha.is_finite() {
            return Err(Error::format(
                &config_path,
                format!(
                    "r: {} and lora_alpha: {} do not make a scaling",
                    config.r, config.lora_alpha
                ),
            ));
        }
        let path = folder.join("adapter_model.safetensors");
        let file = TensorFile::open(&path)?;
        let mut halves: BTreeMap<String, (Option<String>, Option<String>)> = BTreeMap::new();
        for name in file.names()? {
            let clean = name.strip_prefix("base_model.model.").unwrap_or(&name);
            let clean = clean.strip_prefix("model.").unwrap_or(clean);
            let (module, which) = if let Some((m, _)) = clean.split_once(".lora_A.") {
                (m, 0)
            } else if let Some((m, _)) = clean.split_once(".lora_B.") {
                (m, 1)
            } else {
                return Err(Error::format(
                    &path,
                    format!("tensor `{name}` is neither a lora_A nor a lora_B weight"),
                ));
            };
            let entry = halves.entry(module.to_owned()).or_default();
            if which == 0 {
                entry.0 = Some(name.clone());
            } else {
                entry.1 = Some(name.clone());
            }
        }
        let mut pairs = BTreeMap::new();
        for (module, (a, b)) in halves {
            match (a, b) {
                (Some(a), Some(b)) => {
                    pairs.insert(module, (a, b));
                }
                (a, _) => {
                    let missing = if a.is_none() { "lora_A" } else { "lora_B" };
                    return Err(Error::format(
                        &path,
                        format!("module `{module}` has no {missing} weight"),
                    ));
                }
            }
        }
        Ok(Self {
            task: task.to_owned(),
            path,
            scaling: (config.lora_alpha / config.r as f64) as f32,
            rank: config.r,
            pairs,
            file,
            merged: Mutex::default(),
        })
    }

    /// The task's name.
    pub(crate) fn task(&self) -> &str {
        &self.task
    }

    /// Adds `scaling · B·A` to `weight` (`outputs × inputs`) where the
    /// adapter has module `module` (`layers.0.self_attn.q_proj`).
    pub(crate) fn merge(
        &self,
        module: &str,
        weight: &mut [f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<()> {
        let Some((a_name, b_name)) = self.pairs.get(module) else {
            return Ok(());
        };
        let r = self.rank;
        let get = |name: &str, rows: usize, cols: usize| -> Result<Vec<f32>> {
            let (shape, values) = self
                .file
                .get(name)?
                .ok_or_else(|| Error::format(&self.path, format!("tensor `{name}` is missing")))?;
            if shape != [rows, cols] {
                return Err(Error::Shape {
                    path: self.path.clone(),
                    name: name.to_owned(),
                    expected: vec![rows, cols],
                    actual: shape,
                });
            }
            Ok(values)
        };
        let a = get(a_name, r, inputs)?;
        let b = get(b_name, outputs, r)?;
        for (o, row) in weight.chunks_exact_mut(inputs).enumerate() {
            let b_row = &b[o * r..(o + 1) * r];
            for (k, &bk) in b_row.iter().enumerate() {
                let f = bk * self.scaling;
                if f == 0.0 {
                    continue;
                }
                for (w, &ak) in row.iter_mut().zip(&a[k * inputs..(k + 1) * inputs]) {
                    *w += f * ak;
                }
            }
        }
        self.merged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(module.to_owned());
        Ok(())
    }

    /// An error naming the adapter's modules that no projection of the
    /// model took (a LoRA for a different architecture).
    pub(crate) fn check_all_merged(&self) -> Result<()> {
        let merged = self
            .merged
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let unused: Vec<&str> = self
            .pairs
            .keys()
            .filter(|m| !merged.contains(*m))
            .map(String::as_str)
            .collect();
        if unused.is_empty() {
            Ok(())
        } else {
            Err(Error::format(
                &self.path,
                format!(
                    "{} adapted module(s) are not projections of this model: {}",
                    unused.len(),
                    unused.join(", ")
                ),
            ))
        }
    }
}
