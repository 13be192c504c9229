//! Models from the HuggingFace Hub by id, at a pinned revision, cache first.

use std::path::PathBuf;

use hf_hub::{Cache, Repo, RepoType};

use crate::error::{Error, Result};

/// Files an encoder needs (the weights: `model.safetensors`, or the shards
/// `model.safetensors.index.json` names), and the sentence-transformers and
/// tokenizer files fetched when the repository has them (with the Pooling
/// module's config, wherever `modules.json` puts it).
#[cfg(test)]
const REQUIRED: [&str; 3] = ["config.json", "tokenizer.json", "model.safetensors"];
const OPTIONAL: [&str; 4] = [
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "tokenizer_config.json",
];

/// Where and how to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubOptions {
    /// The hub cache (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`).
    pub cache_dir: PathBuf,
    /// The Hub endpoint (`$HF_ENDPOINT`).
    pub endpoint: Option<String>,
    /// Only the cache, never the network (`$HF_HUB_OFFLINE=1`).
    pub offline: bool,
}

impl HubOptions {
    /// Options from the environment variables the Hub's own clients read.
    pub fn from_env() -> Self {
        Self {
            cache_dir: Cache::from_env().path().clone(),
            endpoint: std::env::var("HF_ENDPOINT").ok().filter(|e| !e.is_empty()),
            offline: std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            }),
        }
    }
}

/// A local directory holding `model_id` at `revision` (a full commit hash, so
/// results stay reproducible): from the Hub cache when present, else
/// downloaded; offline, only the cache is used.
pub fn model_dir(model_id: &str, revision: &str, options: &HubOptions) -> Result<PathBuf> {
    snapshot(model_id, revision, options, true)
}

/// As [`model_dir`], without the weights: the config, tokenizer and
/// sentence-transformers files a client of a served copy of the model needs
/// (the weights of an 8B model stay on the GPU servers).
pub fn tokenizer_dir(model_id: &str, revision: &str, options: &HubOptions) -> Result<PathBuf> {
    snapshot(model_id, revision, options, false)
}

fn is_commit(revision: &str) -> bool {
    revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The commit `model_id`'s default branch names, for a model configured
/// without a pinned revision: asked of the Hub once and recorded in the
/// cache as the Hub's own clients record it (`refs/main`), so that later
/// runs, offline ones included, load the same commit until the ref is
/// removed. Offline without that record it is an error saying what to do.
pub fn resolve_default_branch(model_id: &str, options: &HubOptions) -> Result<String> {
    let repo = Repo::model(model_id.to_owned());
    let ref_path = options
        .cache_dir
        .join(repo.folder_name())
        .join("refs")
        .join(repo.revision());
    if let Ok(text) = std::fs::read_to_string(&ref_path) {
        let commit = text.trim();
        if is_commit(commit) {
            return Ok(commit.to_owned());
        }
    }
    if options.offline {
        return Err(Error::Hub(format!(
            "{model_id} has no pinned revision and the Hub cache {} has not recorded its default branch, and HF_HUB_OFFLINE is set: pin revision = \"<40-hex commit>\" (--revision on the command line) or use a local copy",
            options.cache_dir.display()
        )));
    }
    let mut builder =
        hf_hub::api::sync::ApiBuilder::from_cache(Cache::new(options.cache_dir.clone()));
    if let Some(endpoint) = &options.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let info = builder
        .build()
        .map_err(|e| Error::Hub(e.to_string()))?
        .repo(repo.clone())
        .info()
        .map_err(|e| {
            Error::Hub(format!(
                "could not resolve the default branch of {model_id} to a commit: {e}; pin revision = \"<40-hex commit>\" (--revision on the command line) or use a local copy"
            ))
        })?;
    if !is_commit(&info.sha) {
        return Err(Error::Hub(format!(
            "the Hub answered {:?} for the commit of {model_id}'s default branch",
            info.sha
        )));
    }
    Cache::new(options.cache_dir.clone())
        .repo(repo)
        .create_ref(&info.sha)
        .map_err(|e| {
            Error::Hub(format!(
                "recording {model_id}'s commit in {}: {e}",
                ref_path.display()
            ))
        })?;
    Ok(info.sha)
}

fn snapshot(
    model_id: &str,
    revision: &str,
    options: &HubOptions,
    weights: bool,
) -> Result<PathBuf> {
    if !is_commit(revision) {
        return Err(Error::Hub(format!(
            "revision {revision:?} of {model_id} is not a 40-hex-digit commit hash: pin the exact commit so results are reproducible"
        )));
    }
    let repo = Repo::with_revision(model_id.to_owned(), RepoType::Model, revision.to_owned());
    let cache = Cache::new(options.cache_dir.clone()).repo(repo.clone());
    let api = if options.offline {
        None
    } else {
        let mut builder =
            hf_hub::api::sync::ApiBuilder::from_cache(Cache::new(options.cache_dir.clone()));
        if let Some(endpoint) = &options.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        Some(
            builder
                .build()
                .map_err(|e| Error::Hub(e.to_string()))?
                .repo(repo),
        )
    };
    let fetch = |file: &str, required: bool| -> Result<Option<PathBuf>> {
        match (cache.get(file), &api) {
            (Some(path), _) => Ok(Some(path)),
            (None, Some(api)) => match api.download(file) {
                Ok(path) => Ok(Some(path)),
                Err(e) if required => Err(Error::Hub(format!(
                    "could not download {file} of {model_id}@{revision}: {e}; where the Hub is unreachable, pass a local model directory instead"
                ))),
                Err(_) => Ok(None),
            },
            (None, None) if required => Err(Error::Hub(format!(
                "{file} of {model_id}@{revision} is not in the Hub cache {} and HF_HUB_OFFLINE is set: pass a local model directory instead",
                options.cache_dir.display()
            ))),
            (None, None) => Ok(None),
        }
    };
    let config = fetch("config.json", true)?
        .ok_or_else(|| Error::Hub(format!("no config.json for {model_id}@{revision}")))?;
    fetch("tokenizer.json", true)?;
    if weights && fetch("model.safetensors", false)?.is_none() {
        // Large models come in shards listed by an index.
        let index = fetch("model.safetensors.index.json", false)?.ok_or_else(|| {
            Error::Hub(format!(
                "{model_id}@{revision} has neither model.safetensors nor model.safetensors.index.json (or they could not be downloaded); where the Hub is unreachable, pass a local model directory instead"
            ))
        })?;
        for shard in crate::files::ModelFiles::shard_names(&index)? {
            fetch(&shard, true)?;
        }
    }
    for file in OPTIONAL {
        let path = fetch(file, false)?;
        if let (Some(path), "modules.json") = (path, file) {
            for module in crate::config::pooling_dirs(&path)? {
                fetch(&format!("{module}/config.json"), false)?;
            }
        }
    }
    config
        .parent()
        .map(PathBuf::from)
        .ok_or_else(|| Error::Hub(format!("no snapshot directory for {model_id}@{revision}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const REV: &str = "0123456789abcdef0123456789abcdef01234567";

    fn options(cache: &std::path::Path, offline: bool) -> HubOptions {
        HubOptions {
            cache_dir: cache.to_path_buf(),
            // Nothing listens on port 9 of the loopback: refused at once.
            endpoint: Some("http://127.0.0.1:9".to_owned()),
            offline,
        }
    }

    #[test]
    fn revisions_must_be_commits() {
        let cache = tempfile::tempdir().unwrap();
        let err =
            model_dir("intfloat/e5-small-v2", "main", &options(cache.path(), true)).unwrap_err();
        assert!(err.to_string().contains("40-hex-digit"), "{err}");
    }

    #[test]
    fn offline_and_unreachable_fail_with_a_hint() {
        let cache = tempfile::tempdir().unwrap();
        let err = model_dir("intfloat/e5-small-v2", REV, &options(cache.path(), true)).unwrap_err();
        assert!(err.to_string().contains("HF_HUB_OFFLINE"), "{err}");
        let err =
            model_dir("intfloat/e5-small-v2", REV, &options(cache.path(), false)).unwrap_err();
        assert!(
            err.to_string().contains("could not download config.json"),
            "{err}"
        );
        assert!(err.to_string().contains("local model directory"), "{err}");
    }

    #[test]
    fn the_cache_is_used_first() {
        let cache = tempfile::tempdir().unwrap();
        let repo = cache.path().join("models--intfloat--e5-small-v2");
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join(REV), REV).unwrap();
        let snapshot = repo.join("snapshots").join(REV);
        std::fs::create_dir_all(&snapshot).unwrap();
        for file in REQUIRED {
            std::fs::write(snapshot.join(file), "{}").unwrap();
        }
        // Online, with an unreachable endpoint: the optional files are
        // skipped and the cached snapshot is returned.
        let dir = model_dir("intfloat/e5-small-v2", REV, &options(cache.path(), false)).unwrap();
        assert_eq!(dir, snapshot);
    }

    #[test]
    fn the_default_branch_resolves_from_the_cache_record_and_offline_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let offline = options(dir.path(), true);
        let err = resolve_default_branch("org/model", &offline).unwrap_err();
        assert!(err.to_string().contains("pin revision"), "{err}");
        let refs = dir.path().join("models--org--model").join("refs");
        std::fs::create_dir_all(&refs).unwrap();
        std::fs::write(refs.join("main"), "not a commit").unwrap();
        assert!(resolve_default_branch("org/model", &offline).is_err());
        std::fs::write(refs.join("main"), REV).unwrap();
        assert_eq!(resolve_default_branch("org/model", &offline).unwrap(), REV);
        // Unreachable (no such endpoint) with no record: an error, not a hang.
        let other = tempfile::tempdir().unwrap();
        let mut unreachable = options(other.path(), false);
        unreachable.endpoint = Some("http://127.0.0.1:9".to_owned());
        let err = resolve_default_branch("org/model", &unreachable).unwrap_err();
        assert!(err.to_string().contains("could not resolve"), "{err}");
    }
}
