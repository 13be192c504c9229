//! Models from the HuggingFace Hub by id, at a pinned revision, cache first.

use std::path::PathBuf;

use hf_hub::{Cache, Repo, RepoType};

use crate::error::{Error, Result};

/// Files fetched for an encoder, besides the optional sentence-transformers ones.
const REQUIRED: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];
const OPTIONAL: [&str; 3] = [
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
];

/// A local directory holding `model_id` at `revision` (a commit hash, so
/// results stay reproducible), from the Hub cache (`$HF_HOME/hub`) when
/// present, else downloaded; with `HF_HUB_OFFLINE=1` only the cache is used.
pub fn model_dir(model_id: &str, revision: &str) -> Result<PathBuf> {
    if revision.len() != 40 || !revision.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Hub(format!(
            "revision {revision:?} of {model_id} is not a 40-hex-digit commit hash: pin the exact commit so results are reproducible"
        )));
    }
    let repo = Repo::with_revision(model_id.to_owned(), RepoType::Model, revision.to_owned());
    let cache = Cache::from_env().repo(repo.clone());
    let offline =
        std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    let mut dir = None;
    let api = if offline {
        None
    } else {
        Some(
            hf_hub::api::sync::ApiBuilder::from_env()
                .build()
                .map_err(|e| Error::Hub(e.to_string()))?
                .repo(repo),
        )
    };
    for (file, required) in REQUIRED
        .iter()
        .map(|f| (f, true))
        .chain(OPTIONAL.iter().map(|f| (f, false)))
    {
        let path = match (cache.get(file), &api) {
            (Some(path), _) => Some(path),
            (None, Some(api)) => match api.get(file) {
                Ok(path) => Some(path),
                Err(e) if required => {
                    return Err(Error::Hub(format!(
                        "could not download {file} of {model_id}@{revision}: {e}; the Hub may be unreachable: pass a local model directory instead"
                    )));
                }
                Err(_) => None,
            },
            (None, None) if required => {
                return Err(Error::Hub(format!(
                    "{file} of {model_id}@{revision} is not in the Hub cache and HF_HUB_OFFLINE is set: pass a local model directory instead"
                )));
            }
            (None, None) => None,
        };
        if let (Some(path), true) = (path, *file == "config.json") {
            dir = path.parent().map(PathBuf::from);
        }
    }
    dir.ok_or_else(|| Error::Hub(format!("no snapshot directory for {model_id}@{revision}")))
}
