//! SkillRet from the HuggingFace Hub: dataset `ThakiCloud/SKILLRET` at a
//! pinned revision, every file checked against its published sha256, cached
//! the way the Hub's own clients cache (`$HF_HOME/hub`).
//!
//! The cache is always tried first. With `HF_HUB_OFFLINE=1`, or when the Hub
//! cannot be reached, fetching fails at once with a message that says how to
//! point at a local copy instead.

use std::io::Read;
use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};
use sha2::{Digest, Sha256};

use crate::data::SplitFiles;
use crate::error::{Error, Result};

/// The dataset repository.
pub const DATASET_REPO: &str = "ThakiCloud/SKILLRET";

/// A file of a revision and its published content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinnedFile {
    /// Path inside the repository.
    pub path: &'static str,
    /// Number of JSON lines.
    pub rows: usize,
    /// Size in bytes.
    pub bytes: u64,
    /// Lower-case hex sha256.
    pub sha256: &'static str,
}

/// A revision of the dataset known by name, with its files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revision {
    /// Release name, such as `v1.1`.
    pub name: &'static str,
    /// The commit it names.
    pub commit: &'static str,
    /// Its split files.
    pub files: &'static [PinnedFile],
}

const fn pinned(path: &'static str, rows: usize, bytes: u64, sha256: &'static str) -> PinnedFile {
    PinnedFile {
        path,
        rows,
        bytes,
        sha256,
    }
}

const TRAIN: [PinnedFile; 3] = [
    pinned(
        "data/skills/train.jsonl",
        10_123,
        187_920_814,
        "b4978863f6c36c1d42af4a779f86b8e5809b4709c353aa698ec494e3ed663a2b",
    ),
    pinned(
        "data/queries/train.jsonl",
        63_259,
        54_348_716,
        "e1189e402c74d11ba57af3bbc60308cc4a9b51f29f2de265e541d0599067624c",
    ),
    pinned(
        "data/qrels/train.jsonl",
        127_190,
        12_591_810,
        "7480dbf936eeee9905c752a681b029bae8e13f67dcacdf4b716684ca21da83e1",
    ),
];

/// The releases this crate can verify (ThakiCloud/SKILLRET; train files are
/// the same in both).
pub const REVISIONS: [Revision; 2] = [
    Revision {
        name: "v1.0",
        commit: "7cae7cfbad2b0e1ebc9170892f568993aae543b0",
        files: &[
            pinned(
                "data/skills/test.jsonl",
                6_660,
                127_443_784,
                "4b3db14f528b288077b77207343211dede58f11c15b95a4ced7f6e0f01cbcea9",
            ),
            pinned(
                "data/queries/test.jsonl",
                4_997,
                6_948_024,
                "7475fc12e06c81acb256831dbe25b10cca3c489f23be5774ded034f3bb3877ea",
            ),
            pinned(
                "data/qrels/test.jsonl",
                8_347,
                767_924,
                "12142c4433ffe6c6d6b2b98a277168d35c81338e1b50818eadd8a3c6bb2a6f44",
            ),
            TRAIN[0],
            TRAIN[1],
            TRAIN[2],
        ],
    },
    Revision {
        name: "v1.1",
        commit: "a050ad233a504a43135bafe8cdf45574052b5729",
        files: &[
            pinned(
                "data/skills/test.jsonl",
                6_006,
                117_606_037,
                "1960453e422e4ba01977197580934ca3c02b2ac302dfa9c0d074707d961b7c81",
            ),
            pinned(
                "data/queries/test.jsonl",
                4_392,
                6_053_507,
                "4d07a35f40e597f8468c6dab480c95a1f9b40ecbde80274081ba2e7c643d0f6d",
            ),
            pinned(
                "data/qrels/test.jsonl",
                7_187,
                661_204,
                "edbfae0b8109de460d54e27e6235b1b47316f34956744db0571ad1b4ddb860af",
            ),
            TRAIN[0],
            TRAIN[1],
            TRAIN[2],
        ],
    },
];

impl Revision {
    /// A known revision by release name (`v1.0`, `v1.1`) or full commit hash.
    pub fn find(name_or_commit: &str) -> Result<&'static Self> {
        REVISIONS
            .iter()
            .find(|r| r.name == name_or_commit || r.commit == name_or_commit)
            .ok_or_else(|| {
                let known: Vec<String> = REVISIONS
                    .iter()
                    .map(|r| format!("{} ({})", r.name, r.commit))
                    .collect();
                Error::Hub(format!(
                    "unknown {DATASET_REPO} revision {name_or_commit:?}: only pinned revisions can be verified; known: {}. For other data, download it yourself and pass the directory with --data",
                    known.join(", ")
                ))
            })
    }

    /// The pinned file at `path` in this revision.
    pub fn file(&self, path: &str) -> Option<&'static PinnedFile> {
        self.files.iter().find(|f| f.path == path)
    }
}

/// Where and how to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubOptions {
    /// The hub cache (`$HF_HOME/hub`, default `~/.cache/huggingface/hub`).
    pub cache_dir: PathBuf,
    /// The Hub endpoint (`$HF_ENDPOINT`, default `https://huggingface.co`).
    pub endpoint: Option<String>,
    /// Never use the network (`$HF_HUB_OFFLINE=1`).
    pub offline: bool,
}

impl HubOptions {
    /// Options from the environment variables the Hub's own clients read.
    pub fn from_env() -> Self {
        let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        });
        Self {
            cache_dir: Cache::from_env().path().clone(),
            endpoint: std::env::var("HF_ENDPOINT").ok().filter(|e| !e.is_empty()),
            offline,
        }
    }
}

/// The verified local paths of one split of `revision`, downloading what the
/// cache lacks.
pub fn fetch_split(revision: &Revision, split: &str, options: &HubOptions) -> Result<SplitFiles> {
    let path = |kind: &str| format!("data/{kind}/{split}.jsonl");
    let get = |kind: &str| -> Result<PathBuf> {
        let file = revision.file(&path(kind)).ok_or_else(|| {
            Error::Hub(format!(
                "{DATASET_REPO}@{} has no pinned file {} (splits: train, test)",
                revision.name,
                path(kind)
            ))
        })?;
        fetch_file(revision, file, options)
    };
    Ok(SplitFiles {
        skills: get("skills")?,
        queries: get("queries")?,
        qrels: Some(get("qrels")?),
    })
}

/// One verified file: from the cache when present, else downloaded.
pub fn fetch_file(revision: &Revision, file: &PinnedFile, options: &HubOptions) -> Result<PathBuf> {
    let repo = Repo::with_revision(
        DATASET_REPO.to_owned(),
        RepoType::Dataset,
        revision.commit.to_owned(),
    );
    let what = format!("{DATASET_REPO}@{} {}", revision.name, file.path);
    let cached = Cache::new(options.cache_dir.clone())
        .repo(repo.clone())
        .get(file.path);
    let local = match cached {
        Some(path) => path,
        None if options.offline => {
            return Err(Error::Hub(format!(
                "{what} is not in the cache {} and HF_HUB_OFFLINE is set; {}",
                options.cache_dir.display(),
                LOCAL_HINT
            )));
        }
        None => download(repo, file.path, options)
            .map_err(|e| Error::Hub(format!("could not download {what}: {e}; {LOCAL_HINT}")))?,
    };
    verify(&local, file, &what)?;
    Ok(local)
}

const LOCAL_HINT: &str = "to use a local copy instead, pass --data <dir> with the official layout {skills,queries,qrels}/<split>.jsonl (or set data.dir in the run config)";

fn download(repo: Repo, filename: &str, options: &HubOptions) -> Result<PathBuf, String> {
    let mut builder =
        hf_hub::api::sync::ApiBuilder::from_cache(Cache::new(options.cache_dir.clone()))
            .with_progress(true);
    if let Some(endpoint) = &options.endpoint {
        builder = builder.with_endpoint(endpoint.clone());
    }
    let api = builder.build().map_err(|e| e.to_string())?;
    api.repo(repo).download(filename).map_err(|e| e.to_string())
}

/// Checks size, then sha256, of a file against its pinned content.
pub fn verify(path: &Path, file: &PinnedFile, what: &str) -> Result<()> {
    let size = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .len();
    let actual = if size == file.bytes {
        sha256_file(path)?
    } else {
        format!("(not computed: {size} bytes instead of {})", file.bytes)
    };
    if actual == file.sha256 {
        Ok(())
    } else {
        Err(Error::Checksum {
            path: path.to_path_buf(),
            what: what.to_owned(),
            expected: file.sha256.to_owned(),
            actual,
        })
    }
}

/// Lower-case hex sha256 of a file.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(|e| Error::io(path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}
