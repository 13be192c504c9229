//! Where a model's files come from: a local directory, the Hub at a pinned
//! (or once resolved) revision, or, without the Hub, a local copy found by
//! name (`SKILLRET_MODELS`, `models/`).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// A local directory, or a Hub id fetched at a pinned revision.
pub(crate) fn model_dir(model: &str, revision: Option<&str>) -> Result<PathBuf> {
    hub_or_local(model, revision, true)
}

/// As [`model_dir`], fetching no weights from the Hub (a served model's
/// tokenizer and config).
pub(crate) fn tokenizer_dir(model: &str, revision: Option<&str>) -> Result<PathBuf> {
    hub_or_local(model, revision, false)
}

fn hub_or_local(model: &str, revision: Option<&str>, weights: bool) -> Result<PathBuf> {
    let path = Path::new(model);
    if path.is_dir() {
        return Ok(path.to_path_buf());
    }
    // `org/name` that is not a local path (nor under a local directory).
    let looks_like_id = model.split('/').count() == 2
        && !model.starts_with(['.', '/'])
        && !path.exists()
        && !path.parent().is_some_and(Path::is_dir);
    if !looks_like_id {
        bail!(
            "{model}: no such model directory (run scripts/fetch-models.sh to install the project's models)"
        );
    }
    let hub = embedder::hub::HubOptions::from_env();
    let from_hub = || -> Result<PathBuf> {
        let revision = match revision {
            Some(r) => r.to_owned(),
            None => {
                let commit = embedder::hub::resolve_default_branch(model, &hub)?;
                eprintln!(
                    "{model}: no pinned revision; its default branch is commit {commit} (recorded in the Hub cache and in results.json; pin it with revision = \"{commit}\")"
                );
                commit
            }
        };
        Ok(if weights {
            embedder::hub::model_dir(model, &revision, &hub)?
        } else {
            embedder::hub::tokenizer_dir(model, &revision, &hub)?
        })
    };
    match from_hub() {
        Ok(dir) => Ok(dir),
        Err(e) => {
            let (found, looked) = local_copy(model);
            match found {
                Some(dir) => {
                    eprintln!(
                        "{model}: not from the Hub ({e:#}); using the local copy {} (no revision to check it against: results.json records its weights' sha256)",
                        dir.display()
                    );
                    Ok(dir)
                }
                None => Err(e.context(format!(
                    "{model}: not from the Hub, and no local copy in {} (set SKILLRET_MODELS to the directories that hold model directories by name)",
                    looked.join(", ")
                ))),
            }
        }
    }
}

/// Where a Hub model may lie on a machine without the Hub: `<dir>/<name>`
/// for each directory in `SKILLRET_MODELS` (separated by `:`), else
/// `models/<name>` (as `scripts/fetch-models.sh` and the registry's
/// `hf download` lines lay them out). Also returns where it looked.
fn local_copy(model: &str) -> (Option<PathBuf>, Vec<String>) {
    let name = model.rsplit('/').next().unwrap_or(model);
    let roots: Vec<PathBuf> = match std::env::var("SKILLRET_MODELS") {
        Ok(v) if !v.trim().is_empty() => v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect(),
        _ => vec![PathBuf::from("models")],
    };
    let looked: Vec<String> = roots
        .iter()
        .map(|r| r.join(name).display().to_string())
        .collect();
    let found = roots
        .iter()
        .map(|r| r.join(name))
        .find(|d| d.join("config.json").is_file());
    (found, looked)
}
