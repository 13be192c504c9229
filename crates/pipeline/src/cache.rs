//! The on-disk embedding cache.
//!
//! Vectors are stored pooled but not normalised (normalisation is applied
//! after reading, so one cache serves both settings), under a key that
//! hashes everything that changes them:
//! the model's files (weights, config, tokenizer, sentence-transformers
//! settings, prompts) and Hub revision, the prompt, the length, pooling, precision and
//! engine options, the text recipe, and the texts themselves with their ids.
//! Inputs are cut into shards of a fixed size, each embedded and written on its
//! own (to a temporary name, then renamed), so an interrupted run keeps every
//! finished shard and the next run only embeds the rest.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

/// Bumped when the text recipe or the shard layout changes; the workspace
/// version is part of it so that a new engine never reads an old one's vectors.
const VERSION: &str = concat!(
    "skillret-embeddings/2 raw pooled vectors, text=name|description|skill_md engine=",
    env!("CARGO_PKG_VERSION")
);
const MAGIC: &[u8; 8] = b"SKRVEC01";

/// Files of a model directory whose bytes decide its vectors, besides the
/// weights.
const MODEL_FILES: &[&str] = &[
    "config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "model.safetensors.index.json",
];

/// sha256 of a model directory's deciding files: its weights (one file or
/// every shard) and the files above (absent ones count as absent).
/// A model's per-task LoRA adapters (`adapters/<task>/`), sorted: the
/// adapter a run merges changes its vectors.
fn adapter_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = fs::read_dir(dir.join("adapters"))
        .into_iter()
        .flatten()
        .filter_map(std::result::Result::ok)
        .flat_map(|task| {
            ["adapter_config.json", "adapter_model.safetensors"].map(|f| {
                let name = format!("adapters/{}/{f}", task.file_name().to_string_lossy());
                (name, task.path().join(f))
            })
        })
        .collect();
    files.sort();
    files
}

/// A chat template beside the tokenizer (`chat_template.jinja`: it decides
/// the inputs of a model saved with the message modality) and a
/// cross-encoder's `LogitScore` module (the tokens it scores), where there
/// are. Counted only where present, so that the keys of models without them
/// stay what they were.
fn optional_files(dir: &Path) -> Vec<(String, PathBuf)> {
    ["chat_template.jinja", "1_LogitScore/config.json"]
        .into_iter()
        .map(|name| (name.to_owned(), dir.join(name)))
        .filter(|(_, path)| path.is_file())
        .collect()
}

pub(crate) fn model_fingerprint(dir: &Path) -> Result<String> {
    let files = embedder::ModelFiles::in_dir(dir)?;
    let mut hasher = Sha256::new();
    let named = MODEL_FILES
        .iter()
        .map(|name| ((*name).to_owned(), dir.join(name)))
        .chain(files.weights.iter().map(|path| {
            let name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
            (name, path.clone())
        }))
        .chain(adapter_files(dir))
        .chain(optional_files(dir));
    for (name, path) in named {
        hasher.update(name.as_bytes());
        match fs::File::open(&path) {
            Ok(mut file) => {
                let mut inner = Sha256::new();
                std::io::copy(&mut file, &mut inner)
                    .with_context(|| format!("hashing {}", path.display()))?;
                hasher.update(inner.finalize());
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => hasher.update(b"absent"),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    Ok(hex(&hasher.finalize()))
}

/// sha256 of the files of a served model's local directory that decide
/// what the client sends (tokenizer, config, sentence-transformers files;
/// not the weights, which may be absent).
pub(crate) fn tokenizer_fingerprint(dir: &Path) -> Result<String> {
    let mut hasher = Sha256::new();
    let named = MODEL_FILES
        .iter()
        .map(|name| ((*name).to_owned(), dir.join(name)))
        .chain(optional_files(dir));
    for (name, path) in named {
        hasher.update(name.as_bytes());
        match fs::read(&path) {
            Ok(bytes) => hasher.update(Sha256::digest(&bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => hasher.update(b"absent"),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    Ok(hex(&hasher.finalize()))
}

/// The cache key of `texts` (with their `ids`) under `settings`: sha256 of
/// the cache version, the settings and every id and text, length-prefixed.
pub(crate) fn content_key(settings: &str, ids: &[&str], texts: &[String]) -> String {
    let mut hasher = Sha256::new();
    let parts = [VERSION, settings].into_iter().chain(
        ids.iter()
            .zip(texts)
            .flat_map(|(id, text)| [*id, text.as_str()]),
    );
    for part in parts {
        hasher.update((part.len() as u64).to_le_bytes());
        hasher.update(part.as_bytes());
    }
    hex(&hasher.finalize())
}

/// One set of inputs to embed under one key.
#[derive(Debug)]
pub struct Shards {
    dir: PathBuf,
    size: usize,
    count: usize,
    dim: usize,
    inputs: usize,
}

impl Shards {
    /// The shard directory for `texts` (with their `ids`) embedded under
    /// `settings` (every option that changes a vector, as text).
    pub fn new(
        cache: &Path,
        what: &str,
        settings: &str,
        ids: &[&str],
        texts: &[String],
        dim: usize,
        size: usize,
    ) -> Self {
        let key = content_key(settings, ids, texts);
        let size = size.max(1);
        Self {
            dir: cache.join("embeddings").join(what).join(&key[..32]),
            size,
            count: texts.len().div_ceil(size),
            dim,
            inputs: texts.len(),
        }
    }

    /// Number of shards.
    pub(crate) fn count(&self) -> usize {
        self.count
    }

    /// The input range of shard `i`.
    pub fn range(&self, i: usize) -> std::ops::Range<usize> {
        i * self.size..((i + 1) * self.size).min(self.inputs)
    }

    /// The file of shard `i`.
    pub fn path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("shard-{i:06}.f32"))
    }

    /// The directory of these shards.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of the probe vector.
    pub fn probe_path(&self) -> PathBuf {
        self.dir.join("probe.f32")
    }

    /// The probe vector stored with these shards (served models), if any.
    pub fn load_probe(&self) -> Result<Option<Vec<f32>>> {
        let path = self.probe_path();
        match fs::read(&path) {
            Ok(bytes) => {
                if bytes.len() < 16 || &bytes[..8] != MAGIC || (bytes.len() - 16) % 4 != 0 {
                    bail!(
                        "{}: not a probe vector of this cache; remove it",
                        path.display()
                    );
                }
                Ok(Some(
                    bytes[16..]
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                ))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    /// Stores the probe vector once, before the first shard (atomically).
    pub(crate) fn store_probe(&self, probe: &[f32]) -> Result<()> {
        if self.probe_path().is_file() {
            return Ok(());
        }
        self.write(&self.probe_path(), probe)
    }

    /// The vectors of shard `i` if a complete copy is on disk.
    pub fn load(&self, i: usize) -> Result<Option<Vec<f32>>> {
        let path = self.path(i);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let rows = self.range(i).len();
        let expected = 16 + rows * self.dim * 4;
        if bytes.len() != expected
            || &bytes[..8] != MAGIC
            || bytes[8..16] != ((rows * self.dim) as u64).to_le_bytes()
        {
            // Not ours or damaged: embed again and overwrite.
            return Ok(None);
        }
        Ok(Some(
            bytes[16..]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        ))
    }

    /// Writes shard `i` (atomically: a reader sees all of it or none).
    pub(crate) fn store(&self, i: usize, vectors: &[f32]) -> Result<()> {
        if vectors.len() != self.range(i).len() * self.dim {
            bail!(
                "shard {i}: {} floats for {} rows",
                vectors.len(),
                self.range(i).len()
            );
        }
        self.write(&self.path(i), vectors)
    }

    fn write(&self, path: &Path, vectors: &[f32]) -> Result<()> {
        fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir)
            .with_context(|| format!("writing in {}", self.dir.display()))?;
        let mut bytes = Vec::with_capacity(16 + vectors.len() * 4);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(vectors.len() as u64).to_le_bytes());
        for v in vectors {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        tmp.write_all(&bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .with_context(|| format!("writing {}", path.display()))?;
        tmp.persist(path)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(())
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_round_trip_and_keys_follow_the_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let texts: Vec<String> = (0..5).map(|i| format!("text {i}")).collect();
        let ids = ["a", "b", "c", "d", "e"];
        let shards = Shards::new(dir.path(), "docs", "model x", &ids, &texts, 2, 2);
        assert_eq!(shards.count(), 3);
        assert_eq!(shards.range(2), 4..5);
        assert!(shards.load(0).unwrap().is_none());
        shards.store(2, &[1.0, -2.5]).unwrap();
        assert_eq!(shards.load(2).unwrap().unwrap(), [1.0, -2.5]);
        assert!(shards.store(1, &[1.0]).is_err());
        // Another setting, text or id: another key.
        let other = Shards::new(dir.path(), "docs", "model y", &ids, &texts, 2, 2);
        assert!(other.load(2).unwrap().is_none());
        let mut changed = texts.clone();
        changed[4].push('!');
        let other = Shards::new(dir.path(), "docs", "model x", &ids, &changed, 2, 2);
        assert!(other.load(2).unwrap().is_none());
        // A truncated shard is not used.
        let path = shards.path(2);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(shards.load(2).unwrap().is_none());
    }
}
