//! The files of a model directory, and the weights in them.
//!
//! Weights are safetensors files, mapped rather than read: one
//! `model.safetensors`, or the shards that `model.safetensors.index.json`
//! lists (as transformers saves large models). Tensors are looked up by name
//! and widened to f32 (from f32, f16 or bf16), their shapes checked against
//! what the architecture implies.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use safetensors::{Dtype, SafeTensors};

use crate::error::{Error, Result};

/// The files of a model directory.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// The directory.
    pub dir: PathBuf,
    /// `config.json`.
    pub config: PathBuf,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// `model.safetensors`, or the shards of `model.safetensors.index.json`.
    pub weights: Vec<PathBuf>,
}

const SINGLE: &str = "model.safetensors";
const INDEX: &str = "model.safetensors.index.json";

impl ModelFiles {
    /// The files of `dir`, each checked to exist.
    pub fn in_dir(dir: &Path) -> Result<Self> {
        if !dir.is_dir() {
            return Err(Error::Invalid(format!(
                "{}: not a model directory (expected config.json, tokenizer.json and model.safetensors; run scripts/fetch-models.sh for the models this project uses)",
                dir.display()
            )));
        }
        let config = dir.join("config.json");
        let tokenizer = dir.join("tokenizer.json");
        for (path, what) in [
            (&config, "the model's config.json"),
            (&tokenizer, "the model's tokenizer.json"),
        ] {
            if !path.is_file() {
                return Err(Error::MissingFile {
                    path: path.clone(),
                    what,
                });
            }
        }
        let weights = if dir.join(INDEX).is_file() && !dir.join(SINGLE).is_file() {
            shards(&dir.join(INDEX))?
        } else {
            vec![dir.join(SINGLE)]
        };
        for path in &weights {
            if !path.is_file() {
                return Err(Error::MissingFile {
                    path: path.clone(),
                    what: "the model's weights",
                });
            }
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            config,
            tokenizer,
            weights,
        })
    }
}

/// The shard files an index names, sorted.
fn shards(index: &Path) -> Result<Vec<PathBuf>> {
    let dir = index.parent().unwrap_or(Path::new("."));
    Ok(ModelFiles::shard_names(index)?
        .into_iter()
        .map(|name| dir.join(name))
        .collect())
}

impl ModelFiles {
    /// The shard file names `model.safetensors.index.json` lists in its
    /// `weight_map`, sorted, each checked to be a plain file name.
    pub fn shard_names(index: &Path) -> Result<Vec<String>> {
        #[derive(serde::Deserialize)]
        struct Index {
            weight_map: HashMap<String, String>,
        }
        let parsed: Index = crate::config::read_json(index)?;
        let mut files: Vec<String> = parsed.weight_map.into_values().collect();
        files.sort();
        files.dedup();
        if files.is_empty() {
            return Err(Error::format(index, "weight_map names no shard"));
        }
        if let Some(bad) = files
            .iter()
            .find(|name| name.contains(['/', '\\']) || name.starts_with('.'))
        {
            return Err(Error::format(
                index,
                format!("weight_map: shard name {bad:?} is not a file name"),
            ));
        }
        Ok(files)
    }
}

/// A safetensors file, mapped, for tensors looked up by their full names.
pub struct TensorFile {
    path: PathBuf,
    bytes: memmap2::Mmap,
}

impl std::fmt::Debug for TensorFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorFile")
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl TensorFile {
    /// Opens (maps) the file and checks its header.
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::error::open_file(path, "the model's weights")?;
        // SAFETY: the mapping is read-only and private to this value; model
        // files are not modified while a model is being loaded (as for any
        // weights loader that maps them, e.g. candle's).
        let bytes = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        SafeTensors::deserialize(&bytes)
            .map_err(|e| Error::format(path, format!("not a safetensors file: {e}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
        })
    }

    fn tensors(&self) -> Result<SafeTensors<'_>> {
        SafeTensors::deserialize(&self.bytes)
            .map_err(|e| Error::format(&self.path, format!("not a safetensors file: {e}")))
    }

    /// The names of the file's tensors.
    pub fn names(&self) -> Result<Vec<String>> {
        Ok(self
            .tensors()?
            .names()
            .into_iter()
            .map(str::to_owned)
            .collect())
    }

    /// Whether the file has a tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors().is_ok_and(|t| t.tensor(name).is_ok())
    }

    /// The shape and f32 values of tensor `name`, or `None` if the file has
    /// no such tensor.
    pub fn get(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let tensors = self.tensors()?;
        match tensors.tensor(name) {
            Ok(view) => {
                let values = widen(&self.path, name, &view, None)?;
                self.release(view.data());
                Ok(Some((view.shape().to_vec(), values)))
            }
            Err(_) => Ok(None),
        }
    }

    /// Hands the mapped pages that lie wholly inside `data` (a tensor just
    /// copied out) back to the kernel, so that loading a model costs its
    /// converted weights, not those plus the whole mapped file. The mapping
    /// stays valid: a later read of those bytes faults them in again from
    /// the file.
    fn release(&self, data: &[u8]) {
        #[cfg(unix)]
        {
            const PAGE: usize = 4096;
            let base = self.bytes.as_ptr() as usize;
            let start = (data.as_ptr() as usize - base).div_ceil(PAGE) * PAGE;
            let end = (data.as_ptr() as usize - base + data.len()) / PAGE * PAGE;
            if end > start {
                // SAFETY: a read-only, private, file-backed mapping that this
                // process never writes: MADV_DONTNEED drops the pages, and any
                // later access reads the same bytes from the file again. The
                // range lies inside the mapping (`data` is a slice of it).
                let _ = unsafe {
                    self.bytes.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        start,
                        end - start,
                    )
                };
            }
        }
        #[cfg(not(unix))]
        let _ = data;
    }

    /// Rows `rows` of the matrix `name` (f32 values, row after row) and its
    /// width, or `None` if the file has no such tensor: reads only those rows
    /// (e.g. two rows of a language-model head).
    pub fn rows(&self, name: &str, rows: &[usize]) -> Result<Option<(usize, Vec<f32>)>> {
        let tensors = self.tensors()?;
        let Ok(view) = tensors.tensor(name) else {
            return Ok(None);
        };
        let &[height, width] = view.shape() else {
            return Err(Error::format(
                &self.path,
                format!(
                    "tensor `{name}` has shape {:?}; a matrix expected",
                    view.shape()
                ),
            ));
        };
        let mut out = Vec::with_capacity(rows.len() * width);
        for &row in rows {
            if row >= height {
                return Err(Error::format(
                    &self.path,
                    format!("tensor `{name}` has {height} rows; row {row} asked for"),
                ));
            }
            out.extend(widen(&self.path, name, &view, Some((row * width, width)))?);
        }
        Ok(Some((width, out)))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Where a tensor of a family's usual layout sits in another layout of the
/// same architecture: its name there, and for a tensor fused with others
/// along its first dimension, `(part, parts)`: which equal slice it is.
pub type Remap = fn(&str) -> Option<(String, Option<(usize, usize)>)>;

/// The weights of a model: its safetensors file(s), with the name prefix
/// under which the architecture's tensors sit (`bert.`, `model.`, …).
pub struct Weights {
    files: Vec<TensorFile>,
    /// Which file holds each tensor.
    index: HashMap<String, usize>,
    prefix: String,
    remap: Option<Remap>,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("files", &self.files)
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Weights {
    /// Opens the weights; the prefix is the first of `prefixes` under which
    /// `probe` exists (`""` if none).
    pub fn open(paths: &[PathBuf], prefixes: &[&str], probe: &str) -> Result<Self> {
        let files = paths
            .iter()
            .map(|p| TensorFile::open(p))
            .collect::<Result<Vec<_>>>()?;
        let mut index = HashMap::new();
        for (i, file) in files.iter().enumerate() {
            for name in file.names()? {
                index.insert(name, i);
            }
        }
        let prefix = prefixes
            .iter()
            .find(|p| index.contains_key(&format!("{p}{probe}")))
            .copied()
            .unwrap_or("")
            .to_owned();
        Ok(Self {
            files,
            index,
            prefix,
            remap: None,
        })
    }

    /// Reads tensors asked for by their usual names where `remap` puts them.
    #[must_use]
    pub fn with_remap(mut self, remap: Remap) -> Self {
        self.remap = Some(remap);
        self
    }

    /// The prefix found.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The first file (named in errors about the checkpoint as a whole).
    pub fn path(&self) -> &Path {
        self.files[0].path()
    }

    /// Whether tensor `name` (under the prefix) exists.
    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(&format!("{}{name}", self.prefix))
    }

    /// Whether tensor `name` exists with no prefix (task heads).
    pub fn contains_full(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// Tensor `name` (under the prefix) of exactly `shape` as its bfloat16
    /// bits, where it is stored in bf16 (`None` where it is stored otherwise):
    /// kept as stored, with no f32 copy.
    pub fn get_bf16(&self, name: &str, shape: &[usize]) -> Result<Option<Vec<u16>>> {
        let full = format!("{}{name}", self.prefix);
        let file = self.file_of(&full)?;
        let tensors = file.tensors()?;
        let view = tensors.tensor(&full).map_err(|_| self.missing(&full))?;
        if view.shape() != shape {
            return Err(Error::Shape {
                path: file.path().to_path_buf(),
                name: full,
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        if view.dtype() != Dtype::BF16 {
            return Ok(None);
        }
        let bits = view
            .data()
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        file.release(view.data());
        Ok(Some(bits))
    }

    /// The stored dtype of tensor `name` (under the prefix), if it exists.
    pub fn dtype(&self, name: &str) -> Option<Dtype> {
        let full = format!("{}{name}", self.prefix);
        let file = &self.files[*self.index.get(&full)?];
        file.tensors().ok()?.tensor(&full).ok().map(|v| v.dtype())
    }

    /// Tensor `name` (under the prefix) of exactly `shape`, as f32.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let Some((other, fused)) = self.remap.and_then(|remap| remap(name)) else {
            return self.get_full(&format!("{}{name}", self.prefix), shape);
        };
        let full = format!("{}{other}", self.prefix);
        let Some((part, parts)) = fused else {
            return self.get_full(&full, shape);
        };
        // One of `parts` equal slices along the first dimension.
        let mut whole = shape.to_vec();
        whole[0] *= parts;
        let values = self.get_full(&full, &whole)?;
        let size: usize = shape.iter().product();
        Ok(values[part * size..(part + 1) * size].to_vec())
    }

    /// Tensor `full` (no prefix added) of exactly `shape`, as f32.
    pub fn get_full(&self, full: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let file = self.file_of(full)?;
        let (actual, values) = file.get(full)?.ok_or_else(|| self.missing(full))?;
        if actual != shape {
            return Err(Error::Shape {
                path: file.path().to_path_buf(),
                name: full.to_owned(),
                expected: shape.to_vec(),
                actual,
            });
        }
        Ok(values)
    }

    /// The shape and f32 values of tensor `full` (no prefix added), or
    /// `None` if there is no such tensor.
    pub fn find_full(&self, full: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        match self.index.get(full) {
            Some(&i) => self.files[i].get(full),
            None => Ok(None),
        }
    }

    /// Rows of matrix `full` (no prefix added), which must be `width` wide.
    pub fn rows_full(&self, full: &str, rows: &[usize], width: usize) -> Result<Vec<f32>> {
        let file = self.file_of(full)?;
        let (actual, values) = file.rows(full, rows)?.ok_or_else(|| self.missing(full))?;
        if actual != width {
            return Err(Error::format(
                file.path(),
                format!("tensor `{full}` is {actual} wide, but the model's hidden size is {width}"),
            ));
        }
        Ok(values)
    }

    fn file_of(&self, full: &str) -> Result<&TensorFile> {
        self.index
            .get(full)
            .map(|&i| &self.files[i])
            .ok_or_else(|| self.missing(full))
    }

    fn missing(&self, full: &str) -> Error {
        Error::MissingTensor {
            path: self.path().to_path_buf(),
            name: full.to_owned(),
        }
    }
}

/// A tensor's values as f32 (f16 and bf16 widened); `range` = (first element,
/// count) reads a part.
fn widen(
    path: &Path,
    name: &str,
    view: &safetensors::tensor::TensorView<'_>,
    range: Option<(usize, usize)>,
) -> Result<Vec<f32>> {
    let size = match view.dtype() {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::BF16 => 2,
        other => {
            return Err(Error::format(
                path,
                format!("tensor `{name}` has dtype {other:?}; f32, f16 or bf16 expected"),
            ));
        }
    };
    let data = view.data();
    let data = match range {
        Some((first, count)) => &data[first * size..(first + count) * size],
        None => data,
    };
    Ok(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        _ => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_tensors(path: &Path, tensors: &[(&str, Vec<usize>, Vec<f32>)]) {
        let bytes: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
            .iter()
            .map(|(n, s, v)| {
                (
                    (*n).to_owned(),
                    s.clone(),
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                )
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = bytes
            .iter()
            .map(|(n, s, b)| {
                (
                    n.clone(),
                    safetensors::tensor::TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
                )
            })
            .collect();
        safetensors::serialize_to_file(views, None, path).unwrap();
    }

    #[test]
    fn sharded_weights_read_as_one() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["config.json", "tokenizer.json"] {
            std::fs::write(dir.path().join(name), "{}").unwrap();
        }
        write_tensors(
            &dir.path().join("model-00001-of-00002.safetensors"),
            &[(
                "model.embed_tokens.weight",
                vec![2, 2],
                vec![1.0, 2.0, 3.0, 4.0],
            )],
        );
        write_tensors(
            &dir.path().join("model-00002-of-00002.safetensors"),
            &[("model.norm.weight", vec![2], vec![5.0, 6.0])],
        );
        std::fs::write(
            dir.path().join(INDEX),
            r#"{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", "model.norm.weight": "model-00002-of-00002.safetensors"}}"#,
        )
        .unwrap();
        let files = ModelFiles::in_dir(dir.path()).unwrap();
        assert_eq!(files.weights.len(), 2);
        let w = Weights::open(&files.weights, &["", "model."], "embed_tokens.weight").unwrap();
        assert_eq!(w.prefix(), "model.");
        assert_eq!(w.get("norm.weight", &[2]).unwrap(), [5.0, 6.0]);
        assert_eq!(
            w.rows_full("model.embed_tokens.weight", &[1], 2).unwrap(),
            [3.0, 4.0]
        );
        let err = w.get("norm.weight", &[3]).unwrap_err();
        assert!(matches!(err, Error::Shape { .. }), "{err}");
        // A shard the index names but the directory lacks.
        std::fs::remove_file(dir.path().join("model-00002-of-00002.safetensors")).unwrap();
        let err = ModelFiles::in_dir(dir.path()).unwrap_err();
        assert!(
            err.to_string().contains("model-00002-of-00002.safetensors"),
            "{err}"
        );
        // A shard name that climbs out of the directory.
        std::fs::write(
            dir.path().join(INDEX),
            r#"{"weight_map": {"a": "../elsewhere.safetensors"}}"#,
        )
        .unwrap();
        let err = ModelFiles::in_dir(dir.path()).unwrap_err();
        assert!(err.to_string().contains("weight_map"), "{err}");
    }
}
