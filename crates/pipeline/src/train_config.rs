//! Training configurations (`pipeline train --config configs/train/*.toml`):
//! parsed into raw options (unknown keys are errors naming the file, line
//! and key), then resolved into checked settings before anything loads.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use train::recipe::{DocumentText, MineOptions, PseudoOptions};
use train::trainer::{PairLoss, RunSettings};

use crate::config::{DataSource, ModelRef, model_ref, read_toml};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    data: RawData,
    model: RawModel,
    #[serde(default)]
    pseudo: Option<RawPseudo>,
    negatives: RawNegatives,
    #[serde(default)]
    train: RawTrain,
    #[serde(default)]
    output: RawOutput,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawData {
    dir: Option<PathBuf>,
    hub_revision: Option<String>,
    /// The split whose data trains.
    split: String,
    /// Where the queries come from.
    source: Source,
    /// The split the model will be evaluated on: its queries and qrels are
    /// never read.
    #[serde(default = "default_eval_split")]
    evaluate_on: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    base: String,
    revision: Option<String>,
    objective: Objective,
    #[serde(default = "default_max_length")]
    max_length: usize,
    #[serde(default)]
    frozen_layers: usize,
    /// Dropout probability [default: the base model's config].
    dropout: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPseudo {
    #[serde(default)]
    single: usize,
    #[serde(default)]
    composed: usize,
    #[serde(default = "default_skills_per_query")]
    skills_per_query: [usize; 2],
    #[serde(default = "default_neighbours")]
    neighbours: usize,
    seed: Option<u64>,
    #[serde(default)]
    documents: DocumentText,
    #[serde(default)]
    details: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNegatives {
    miner: String,
    revision: Option<String>,
    #[serde(default = "default_negatives")]
    count: usize,
    #[serde(default = "default_depth")]
    depth: usize,
    #[serde(default = "default_near_duplicate")]
    near_duplicate: f32,
    #[serde(default = "default_from_rank")]
    from_rank: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTrain {
    #[serde(default)]
    loss: PairLoss,
    #[serde(default = "default_lr")]
    lr: f64,
    #[serde(default = "default_weight_decay")]
    weight_decay: f64,
    #[serde(default = "default_warmup")]
    warmup_ratio: f64,
    #[serde(default = "default_epochs")]
    epochs: usize,
    #[serde(default = "default_batch_size")]
    batch_size: usize,
    #[serde(default = "default_batch_tokens")]
    batch_tokens: usize,
    #[serde(default = "default_clip")]
    max_grad_norm: f64,
    #[serde(default = "default_scale")]
    scale: f64,
    #[serde(default = "default_seed")]
    seed: u64,
    #[serde(default = "default_checkpoint_every")]
    checkpoint_every: u64,
}

impl Default for RawTrain {
    fn default() -> Self {
        toml::from_str("").expect("every field has a default")
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOutput {
    dir: Option<PathBuf>,
    cache: Option<PathBuf>,
}

fn default_eval_split() -> String {
    "test".to_owned()
}
fn default_max_length() -> usize {
    256
}
fn default_skills_per_query() -> [usize; 2] {
    [2, 3]
}
fn default_neighbours() -> usize {
    30
}
fn default_negatives() -> usize {
    3
}
fn default_depth() -> usize {
    30
}
fn default_near_duplicate() -> f32 {
    0.95
}
fn default_from_rank() -> usize {
    1
}
fn default_lr() -> f64 {
    2e-5
}
fn default_weight_decay() -> f64 {
    0.01
}
fn default_warmup() -> f64 {
    0.1
}
fn default_epochs() -> usize {
    1
}
fn default_batch_size() -> usize {
    16
}
fn default_batch_tokens() -> usize {
    32_768
}
fn default_clip() -> f64 {
    1.0
}
fn default_scale() -> f64 {
    20.0
}
fn default_seed() -> u64 {
    42
}
fn default_checkpoint_every() -> u64 {
    50
}

/// Where training queries come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The split's labelled queries and qrels (SkillRet's train split).
    Labelled,
    /// Queries made from the split's skills alone (`train::recipe`).
    Pseudo,
}

/// What is trained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Objective {
    /// Mean-pooled embeddings with MNRL (and hard negatives).
    BiEncoder,
    /// A classification head over (query, skill) pairs.
    CrossEncoder,
}

/// A checked training configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TrainSettings {
    /// The configuration file.
    pub path: PathBuf,
    /// Data source.
    pub data: DataSource,
    /// The split that trains.
    pub split: String,
    /// Labelled or pseudo-labelled.
    pub source: Source,
    /// The split never read beyond its skills.
    pub evaluate_on: String,
    /// The model to start from.
    pub base: ModelRef,
    /// Bi- or cross-encoder.
    pub objective: Objective,
    /// Truncation (pairs as a whole for cross-encoders).
    pub max_length: usize,
    /// Frozen lower layers (and embeddings when any).
    pub frozen_layers: usize,
    /// Dropout override.
    pub dropout: Option<f64>,
    /// The pseudo-labelled recipe (source = "pseudo").
    pub pseudo: Option<PseudoOptions>,
    /// The first stage that mines negatives (and relates skills).
    pub miner: ModelRef,
    /// Mining.
    pub negatives: MineOptions,
    /// Everything that decides the weights.
    pub run: RunSettings,
    /// Steps between checkpoints.
    pub checkpoint_every: u64,
    /// The trained model's directory.
    pub out: PathBuf,
    /// Checkpoints, log and training data: `<out>.training`.
    pub work: PathBuf,
    /// Vector cache of the miner.
    pub cache: PathBuf,
}

impl TrainSettings {
    /// Reads, parses and resolves a training configuration; `data` and `out`
    /// override the file as in `pipeline run`.
    pub fn load(path: &Path, data: Option<&Path>, out: Option<&Path>) -> Result<Self> {
        resolve(read_toml(path)?, path, data, out)
    }
}

fn resolve(
    raw: Raw,
    path: &Path,
    data: Option<&Path>,
    out: Option<&Path>,
) -> Result<TrainSettings> {
    let file = path.display().to_string();
    let source = DataSource::resolve(
        &file,
        data,
        raw.data.dir.clone(),
        raw.data.hub_revision.clone(),
    )?;
    let d = &raw.data;
    if d.source == Source::Labelled && d.split == d.evaluate_on {
        bail!(
            "{file}: [data] split = {:?} is the split the model is evaluated on (evaluate_on): training on its queries and qrels would leak the answers; train on another split (SkillRet's \"train\") or use source = \"pseudo\", which reads only the skills",
            d.split
        );
    }
    match (d.source, &raw.pseudo) {
        (Source::Labelled, Some(_)) => {
            bail!("{file}: [pseudo] applies to source = \"pseudo\" only")
        }
        (Source::Pseudo, None) => {
            bail!("{file}: source = \"pseudo\" needs a [pseudo] section (single, composed)")
        }
        _ => {}
    }
    let m = &raw.model;
    if m.max_length < 8 {
        bail!("{file}: [model] max_length must be at least 8");
    }
    if let Some(p) = m.dropout
        && !(0.0..1.0).contains(&p)
    {
        bail!("{file}: [model] dropout must be in [0, 1)");
    }
    let pseudo = match raw.pseudo {
        None => None,
        Some(p) => {
            if p.single + p.composed == 0 {
                bail!("{file}: [pseudo] makes no queries: set single and/or composed");
            }
            let [lo, hi] = p.skills_per_query;
            if lo < 1 || hi < lo {
                bail!("{file}: [pseudo] skills_per_query = [{lo}, {hi}] needs 1 ≤ fewest ≤ most");
            }
            if p.neighbours == 0 {
                bail!("{file}: [pseudo] neighbours must be at least 1");
            }
            Some(PseudoOptions {
                single: p.single,
                composed: p.composed,
                skills_per_query: (lo, hi),
                neighbours: p.neighbours,
                near_duplicate: raw.negatives.near_duplicate,
                seed: p.seed.unwrap_or(raw.train.seed),
                documents: p.documents,
                details: p.details,
            })
        }
    };
    let n = &raw.negatives;
    if !(n.near_duplicate > 0.0 && n.near_duplicate <= 1.0) {
        bail!("{file}: [negatives] near_duplicate must be a cosine in (0, 1]");
    }
    if n.from_rank == 0 {
        bail!("{file}: [negatives] from_rank is 1-based (1: from the top)");
    }
    if n.count > 0 && n.depth < n.from_rank + n.count {
        bail!("{file}: [negatives] depth must exceed count (from rank from_rank on)");
    }
    if m.objective == Objective::CrossEncoder && n.count == 0 {
        bail!("{file}: a cross-encoder needs negatives: [negatives] count ≥ 1");
    }
    let t = &raw.train;
    if t.loss != PairLoss::Bce && m.objective == Objective::BiEncoder {
        bail!("{file}: [train] loss applies to cross-encoders (a bi-encoder trains with MNRL)");
    }
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(t.lr) || t.weight_decay < 0.0 || !(0.0..1.0).contains(&t.warmup_ratio) {
        bail!("{file}: [train] lr must be positive, weight_decay ≥ 0 and warmup_ratio in [0, 1)");
    }
    if t.epochs == 0 || t.batch_size == 0 || t.batch_tokens == 0 {
        bail!("{file}: [train] epochs, batch_size and batch_tokens must be positive");
    }
    if m.objective == Objective::BiEncoder && t.batch_size < 2 {
        bail!("{file}: [train] MNRL needs batch_size ≥ 2 (the batch is the negatives)");
    }
    if !positive(t.max_grad_norm) || !positive(t.scale) {
        bail!("{file}: [train] max_grad_norm and scale must be positive");
    }
    let stem = path
        .file_stem()
        .map_or_else(|| "model".to_owned(), |s| s.to_string_lossy().into_owned());
    let out = out
        .map(Path::to_path_buf)
        .or(raw.output.dir)
        .unwrap_or_else(|| PathBuf::from("models").join(stem));
    let mut work = out.clone().into_os_string();
    work.push(".training");
    Ok(TrainSettings {
        path: path.to_path_buf(),
        data: source,
        split: raw.data.split,
        source: raw.data.source,
        evaluate_on: raw.data.evaluate_on,
        base: model_ref(m.base.clone(), m.revision.clone(), &file, "model")?,
        objective: m.objective,
        max_length: m.max_length,
        frozen_layers: m.frozen_layers,
        dropout: m.dropout,
        pseudo,
        miner: model_ref(n.miner.clone(), n.revision.clone(), &file, "negatives")?,
        negatives: MineOptions {
            count: n.count,
            depth: n.depth,
            near_duplicate: n.near_duplicate,
            from_rank: n.from_rank,
        },
        run: RunSettings {
            lr: t.lr,
            weight_decay: t.weight_decay,
            warmup_ratio: t.warmup_ratio,
            epochs: t.epochs,
            batch_size: t.batch_size,
            batch_tokens: t.batch_tokens,
            max_grad_norm: t.max_grad_norm,
            scale: t.scale,
            seed: t.seed,
            loss: t.loss,
        },
        checkpoint_every: t.checkpoint_every,
        out,
        work: PathBuf::from(work),
        cache: raw
            .output
            .cache
            .unwrap_or_else(|| PathBuf::from(".cache/skillret")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TrainSettings> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, text).unwrap();
        TrainSettings::load(&path, None, None)
    }

    const BASE: &str = "[data]\ndir = \"d\"\nsplit = \"test\"\nsource = \"pseudo\"\n[model]\nbase = \"m\"\nobjective = \"cross-encoder\"\n[pseudo]\ncomposed = 10\n[negatives]\nminer = \"m\"\n";

    #[test]
    fn defaults_and_derived_paths() {
        let s = parse(BASE).unwrap();
        assert_eq!(s.out, PathBuf::from("models/t"));
        assert_eq!(s.work, PathBuf::from("models/t.training"));
        assert_eq!(s.evaluate_on, "test");
        assert_eq!(s.run.loss, PairLoss::Bce);
        assert_eq!(s.pseudo.unwrap().seed, 42);
    }

    #[test]
    fn errors_name_the_file_line_and_key() {
        let err = parse(&format!("{BASE}[train]\nlr = 1e-5\nepoch = 2\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("t.toml:14") && err.contains("epoch"), "{err}");
    }

    #[test]
    fn training_on_the_evaluation_split_is_refused() {
        let text = BASE
            .replace("source = \"pseudo\"", "source = \"labelled\"")
            .replace("[pseudo]\ncomposed = 10\n", "");
        let err = format!("{:#}", parse(&text).unwrap_err());
        assert!(
            err.contains("evaluated on") && err.contains("t.toml"),
            "{err}"
        );
        let ok = text.replace("split = \"test\"", "split = \"train\"");
        assert_eq!(parse(&ok).unwrap().source, Source::Labelled);
    }

    #[test]
    fn inconsistent_settings_are_refused() {
        for (text, needle) in [
            (BASE.replace("composed = 10", "single = 0"), "no queries"),
            (format!("{BASE}count = 0\n"), "needs negatives"),
            (format!("{BASE}depth = 2\n"), "depth must exceed"),
            (
                BASE.replace("cross-encoder", "bi-encoder") + "[train]\nloss = \"listwise\"\n",
                "cross-encoders",
            ),
            (
                format!("{BASE}[train]\nwarmup_ratio = 1.5\n"),
                "warmup_ratio",
            ),
            (
                BASE.replace("[pseudo]\ncomposed = 10\n", ""),
                "needs a [pseudo]",
            ),
            (
                BASE.replace(
                    "composed = 10\n",
                    "composed = 10\nskills_per_query = [0, 2]\n",
                ),
                "skills_per_query = [0, 2] needs 1 ≤ fewest ≤ most",
            ),
            (
                BASE.replace(
                    "composed = 10\n",
                    "composed = 10\nskills_per_query = [3, 2]\n",
                ),
                "skills_per_query = [3, 2]",
            ),
        ] {
            let err = format!("{:#}", parse(&text).unwrap_err());
            assert!(err.contains(needle), "{needle:?} not in {err}");
        }
    }
}
