//! Approximate top-k by inner product with HNSW (hnsw_rs, `DistDot`).
//!
//! Parameters are checked here before hnsw_rs sees them (it ends the process
//! on some bad values, and its `DistDot` panics on vectors longer than 1).
//! A deterministic build inserts one vector after another (hnsw_rs draws
//! levels from a fixed seed), so the same vectors give the same graph, byte
//! for byte; the parallel build is faster and differs run to run.
//!
//! An index is saved as a directory: hnsw_rs's two dump files and
//! `index.json`, a header recording the parameters, dimension, vector count,
//! a checksum of the ids in index order and the size and sha256 of each dump
//! file. Loading checks all of it before hnsw_rs reads a byte, so a stale
//! index (other ids, other parameters) or a damaged one is refused with the
//! reason instead of being used.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use eval::ScoredDoc;
use hnsw_rs::api::AnnT;
use hnsw_rs::hnswio::{HnswIo, ReloadOptions};
use hnsw_rs::prelude::{DistDot, Hnsw};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Error, VectorIndex};

/// Format tag written in every header; bumped when the layout changes.
const FORMAT: &str = "skillret-hnsw/1";
/// The header's file name inside an index directory.
pub const HEADER_FILE: &str = "index.json";
const BASENAME: &str = "graph";
/// hnsw_rs keeps at most 16 layers.
const MAX_LAYER: usize = 16;
/// How far a vector's length may stray from 1 (embeddings are normalised in
/// f32; hnsw_rs's `DistDot` asserts a dot product ≤ 1.000002).
const UNIT_TOLERANCE: f32 = 1e-3;

/// HNSW parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HnswParams {
    /// Neighbours kept per node and layer (M), 2..=255.
    pub m: usize,
    /// Candidate list size while building (efConstruction), at least `m`.
    pub ef_construction: usize,
    /// Candidate list size while searching (efSearch); a search for k
    /// documents uses at least k.
    pub ef_search: usize,
    /// Insert vectors one by one so the graph is the same on every build.
    pub deterministic: bool,
}

impl Default for HnswParams {
    fn default() -> Self {
        Self {
            m: 32,
            ef_construction: 200,
            ef_search: 128,
            deterministic: true,
        }
    }
}

impl HnswParams {
    /// Checks the values hnsw_rs would mishandle or that make no sense.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |what: String| Err(Error::Invalid(format!("HNSW parameter {what}")));
        if !(2..=255).contains(&self.m) {
            return bad(format!("m = {} is outside 2..=255", self.m));
        }
        if self.ef_construction < self.m {
            return bad(format!(
                "ef_construction = {} is below m = {}",
                self.ef_construction, self.m
            ));
        }
        if self.ef_search == 0 {
            return bad("ef_search must be at least 1".to_owned());
        }
        Ok(())
    }
}

/// An HNSW graph over unit-length vectors, searched by inner product.
pub struct HnswIndex {
    ids: Vec<Arc<str>>,
    dim: usize,
    params: HnswParams,
    graph: Hnsw<'static, f32, DistDot>,
}

impl std::fmt::Debug for HnswIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HnswIndex")
            .field("len", &self.ids.len())
            .field("dim", &self.dim)
            .field("params", &self.params)
            .finish_non_exhaustive()
    }
}

impl HnswIndex {
    /// Builds the graph over `ids.len()` unit vectors of width `dim`, row
    /// after row. `progress` is told how many vectors are in after each chunk.
    pub fn build(
        ids: Vec<Arc<str>>,
        vectors: &[f32],
        dim: usize,
        params: HnswParams,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Self, Error> {
        params.validate()?;
        check_rows(vectors, ids.len(), dim, "vectors")?;
        if ids.is_empty() {
            // hnsw_rs cannot save an empty graph; exact search serves it.
            return Err(Error::Invalid(
                "an HNSW index needs at least one vector".to_owned(),
            ));
        }
        check_unit(vectors, dim, "vector")?;
        let graph = Hnsw::<f32, DistDot>::new(
            params.m,
            ids.len().max(1),
            MAX_LAYER,
            params.ef_construction,
            DistDot,
        );
        let rows: Vec<(&[f32], usize)> = vectors.chunks_exact(dim).zip(0..).collect();
        let chunk = if params.deterministic { 256 } else { 4096 };
        let mut done = 0;
        for part in rows.chunks(chunk) {
            if params.deterministic {
                for &row in part {
                    graph.insert_slice(row);
                }
            } else {
                graph.parallel_insert_slice(&part.to_vec());
            }
            done += part.len();
            progress(done);
        }
        let mut graph = graph;
        graph.set_searching_mode(true);
        Ok(Self {
            ids,
            dim,
            params,
            graph,
        })
    }

    /// The parameters the graph was built with (and searches with).
    pub fn params(&self) -> HnswParams {
        self.params
    }

    /// Sets the candidate list size for later searches.
    pub fn set_ef_search(&mut self, ef_search: usize) -> Result<(), Error> {
        let params = HnswParams {
            ef_search,
            ..self.params
        };
        params.validate()?;
        self.params = params;
        Ok(())
    }

    /// The `k` best documents of every query found with candidate list size
    /// `ef` (at least `k`), each list in trec_eval order.
    pub fn search_ef(
        &self,
        queries: &[f32],
        k: usize,
        ef: usize,
    ) -> Result<Vec<Vec<ScoredDoc>>, Error> {
        crate::query_count(queries, self.dim)?;
        check_unit(queries, self.dim, "query")?;
        let k = k.min(self.ids.len());
        if k == 0 {
            return Ok(vec![Vec::new(); queries.len() / self.dim]);
        }
        let ef = ef.max(k);
        Ok(queries
            .par_chunks(self.dim)
            .map(|query| {
                let mut list: Vec<ScoredDoc> = self
                    .graph
                    .search(query, k, ef)
                    .into_iter()
                    .map(|n| ScoredDoc {
                        id: Arc::clone(&self.ids[n.d_id]),
                        // DistDot is 1 − dot, floored at 0.
                        score: f64::from(1.0 - n.distance),
                    })
                    .collect();
                eval::sort_trec(&mut list);
                list
            })
            .collect())
    }

    /// Saves the index as a directory (replacing any index there): written
    /// beside it first, then moved into place, so a reader never sees half.
    pub fn save(&self, dir: &Path) -> Result<(), Error> {
        let parent = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
        let staging = tempfile::Builder::new()
            .prefix(".hnsw-")
            .tempdir_in(&parent)
            .map_err(|e| Error::io(&parent, e))?;
        let written = self
            .graph
            .file_dump(staging.path(), BASENAME)
            .map_err(|e| Error::Invalid(format!("hnsw_rs could not write the graph: {e:#}")))?;
        if written != BASENAME {
            return Err(Error::Invalid(format!(
                "hnsw_rs wrote `{written}` instead of `{BASENAME}`"
            )));
        }
        let header = Header {
            format: FORMAT.to_owned(),
            params: self.params,
            dim: self.dim,
            count: self.ids.len(),
            ids_sha256: ids_checksum(&self.ids),
            graph: FileSum::of(&staging.path().join(GRAPH_FILE))?,
            data: FileSum::of(&staging.path().join(DATA_FILE))?,
        };
        let path = staging.path().join(HEADER_FILE);
        let mut text =
            serde_json::to_string_pretty(&header).map_err(|e| Error::io(&path, e.into()))?;
        text.push('\n');
        let mut file = fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| Error::io(&path, e))?;
        let staged = staging.keep();
        replace_dir(&staged, dir)
    }

    /// Loads an index saved by [`HnswIndex::save`] for the corpus `ids` (in
    /// index order), after checking its header against them and its files
    /// against their recorded sizes and checksums.
    pub fn load(dir: &Path, ids: Vec<Arc<str>>) -> Result<Self, Error> {
        let header_path = dir.join(HEADER_FILE);
        let text = fs::read_to_string(&header_path).map_err(|e| Error::io(&header_path, e))?;
        let refuse = |why: String| Error::Refused {
            path: dir.to_path_buf(),
            why,
        };
        let header: Header = {
            let de = &mut serde_json::Deserializer::from_str(&text);
            serde_path_to_error::deserialize(de).map_err(|e| {
                let line = e.inner().line();
                refuse(format!(
                    "{}:{line}: field `{}`: {}",
                    header_path.display(),
                    e.path(),
                    e.inner()
                ))
            })?
        };
        if header.format != FORMAT {
            return Err(refuse(format!(
                "format `{}`, this build reads `{FORMAT}`",
                header.format
            )));
        }
        header
            .params
            .validate()
            .map_err(|e| refuse(format!("its header holds a bad parameter: {e}")))?;
        if header.count != ids.len() {
            return Err(refuse(format!(
                "it holds {} vectors, the corpus has {} documents (stale index: rebuild it)",
                header.count,
                ids.len()
            )));
        }
        if header.ids_sha256 != ids_checksum(&ids) {
            return Err(refuse(
                "it was built for other document ids or another order (stale index: rebuild it)"
                    .to_owned(),
            ));
        }
        header.graph.check(&dir.join(GRAPH_FILE), &refuse)?;
        header.data.check(&dir.join(DATA_FILE), &refuse)?;
        // hnsw_rs ties the graph's lifetime to its reader. Without mmap the
        // graph owns every vector, so the reader (two paths and options, a few
        // hundred bytes) is leaked to give the graph a 'static lifetime.
        let io: &'static mut HnswIo = Box::leak(Box::new(HnswIo::new_with_options(
            dir,
            BASENAME,
            ReloadOptions::new(false),
        )));
        let graph: Hnsw<'static, f32, DistDot> = io
            .load_hnsw()
            .map_err(|e| refuse(format!("hnsw_rs could not read it: {e:#}")))?;
        let (n, d) = (
            graph.get_nb_point(),
            graph.get_point_indexation().get_data_dimension(),
        );
        if n != header.count || (n > 0 && d != header.dim) {
            return Err(refuse(format!(
                "the graph holds {n} vectors of dimension {d}, its header says {} of {}",
                header.count, header.dim
            )));
        }
        let mut graph = graph;
        graph.set_searching_mode(true);
        Ok(Self {
            ids,
            dim: header.dim,
            params: header.params,
            graph,
        })
    }
}

impl VectorIndex for HnswIndex {
    fn ids(&self) -> &[Arc<str>] {
        &self.ids
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<ScoredDoc>>, Error> {
        self.search_ef(queries, k, self.params.ef_search)
    }
}

/// Mean over queries of the share of the exact top `k` that the approximate
/// top `k` found (recall@k of an approximate index against exact search).
/// Queries with an empty exact list are skipped; no queries give 1.
pub fn recall_at_k(approx: &[Vec<ScoredDoc>], exact: &[Vec<ScoredDoc>], k: usize) -> f64 {
    let mut sum = 0.0;
    let mut n = 0usize;
    for (a, e) in approx.iter().zip(exact) {
        let truth = &e[..e.len().min(k)];
        if truth.is_empty() {
            continue;
        }
        let found = &a[..a.len().min(k)];
        let hits = truth
            .iter()
            .filter(|t| found.iter().any(|f| f.id == t.id))
            .count();
        sum += hits as f64 / truth.len() as f64;
        n += 1;
    }
    if n == 0 { 1.0 } else { sum / n as f64 }
}

const GRAPH_FILE: &str = "graph.hnsw.graph";
const DATA_FILE: &str = "graph.hnsw.data";

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    format: String,
    params: HnswParams,
    dim: usize,
    count: usize,
    ids_sha256: String,
    graph: FileSum,
    data: FileSum,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSum {
    bytes: u64,
    sha256: String,
}

impl FileSum {
    fn of(path: &Path) -> Result<Self, Error> {
        let mut file = fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let mut hasher = Sha256::new();
        let bytes = std::io::copy(&mut file, &mut hasher).map_err(|e| Error::io(path, e))?;
        Ok(Self {
            bytes,
            sha256: hex(&hasher.finalize()),
        })
    }

    fn check(&self, path: &Path, refuse: &dyn Fn(String) -> Error) -> Result<(), Error> {
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let actual = match fs::metadata(path) {
            Ok(meta) => meta.len(),
            Err(e) => return Err(refuse(format!("`{name}`: {e}"))),
        };
        if actual != self.bytes {
            return Err(refuse(format!(
                "`{name}` has {actual} bytes, its header says {} (damaged or replaced)",
                self.bytes
            )));
        }
        if Self::of(path)?.sha256 != self.sha256 {
            return Err(refuse(format!(
                "`{name}` does not match its sha256 in the header (damaged or replaced)"
            )));
        }
        Ok(())
    }
}

/// sha256 over the ids in order, each preceded by its byte length.
fn ids_checksum(ids: &[Arc<str>]) -> String {
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update((id.len() as u64).to_le_bytes());
        hasher.update(id.as_bytes());
    }
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn check_rows(values: &[f32], rows: usize, dim: usize, what: &str) -> Result<(), Error> {
    if dim == 0 {
        return Err(Error::Invalid(
            "vector dimension must be positive".to_owned(),
        ));
    }
    if values.len() != rows * dim {
        return Err(Error::Invalid(format!(
            "{} floats are not {rows} {what} of dimension {dim}",
            values.len()
        )));
    }
    Ok(())
}

/// HNSW with `DistDot` is only right for unit vectors: say which row is not.
fn check_unit(values: &[f32], dim: usize, what: &str) -> Result<(), Error> {
    let bad = values.par_chunks(dim).position_first(|row| {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        !((1.0 - UNIT_TOLERANCE)..=(1.0 + UNIT_TOLERANCE)).contains(&norm)
    });
    match bad {
        None => Ok(()),
        Some(row) => {
            let v = &values[row * dim..(row + 1) * dim];
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            Err(Error::Invalid(format!(
                "{what} {row} has length {norm} (HNSW by inner product needs unit vectors: normalise them)"
            )))
        }
    }
}

/// Moves `staged` to `dir`, replacing what was there.
fn replace_dir(staged: &Path, dir: &Path) -> Result<(), Error> {
    if dir.exists() {
        let old = dir.with_extension("old-hnsw");
        let _ = fs::remove_dir_all(&old);
        fs::rename(dir, &old).map_err(|e| Error::io(dir, e))?;
        fs::rename(staged, dir).map_err(|e| Error::io(dir, e))?;
        fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
    } else {
        fs::rename(staged, dir).map_err(|e| Error::io(dir, e))?;
    }
    Ok(())
}
