//! The `skillret` Python package's native module (`skillret._skillret`):
//! the embedder, the rerankers and the metrics of the Rust crates behind
//! sentence-transformers' and pytrec_eval's calling conventions. Nothing but
//! conversions lives here; every rule is the crates' own. Inference runs with
//! the GIL released, so two Python threads can embed at once.

// The signatures are sentence-transformers' and pytrec_eval's (keyword
// arguments), and PyO3 hands arguments over by value.
#![allow(clippy::too_many_arguments, clippy::needless_pass_by_value)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::exceptions::{PyFileNotFoundError, PyValueError};
use pyo3::prelude::*;

use embedder::{Backend, EmbedderOptions, Kind, LocalEmbedder, Precision};
use eval::metrics::{Options, evaluate as score};
use eval::{Qrels, Run, ScoredDoc};
use reranker::{CrossEncoder as Reranker, RerankerOptions};

/// An error of the crates as the Python exception that fits it, with the
/// crates' message (which names the file, line and field).
fn embedder_error(e: embedder::Error) -> PyErr {
    match &e {
        embedder::Error::MissingFile { .. } => PyFileNotFoundError::new_err(e.to_string()),
        embedder::Error::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn eval_error(e: eval::Error) -> PyErr {
    match &e {
        eval::Error::Io { error, .. } if error.kind() == std::io::ErrorKind::NotFound => {
            PyFileNotFoundError::new_err(e.to_string())
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// A setting named as in the CLI and the configs (`"bf16"`, `"candle"`).
fn named<T: serde::de::DeserializeOwned>(what: &str, name: &str) -> PyResult<T> {
    serde_json::from_value(serde_json::Value::String(name.to_owned()))
        .map_err(|e| PyValueError::new_err(format!("{what} {name:?}: {e}")))
}

fn parse_precision(precision: &str) -> PyResult<Precision> {
    named("precision", precision)
}

fn parse_backend(device: &str, backend: Option<&str>) -> PyResult<Backend> {
    let name = match (device, backend) {
        (_, Some(b)) => b,
        ("cpu", None) => "native",
        ("cuda", None) => "cuda",
        (other, None) => {
            return Err(PyValueError::new_err(format!(
                "device {other:?}: use \"cpu\" or \"cuda\""
            )));
        }
    };
    named("backend", name)
}

/// A model directory, or a Hub id at a pinned revision (cache first).
fn model_dir(model: &str, revision: Option<&str>) -> PyResult<PathBuf> {
    let path = Path::new(model);
    match revision {
        None if path.is_dir() => Ok(path.to_path_buf()),
        None => Err(PyFileNotFoundError::new_err(format!(
            "{model}: not a model directory (a Hub id needs revision=, a 40-hex commit)"
        ))),
        Some(rev) => embedder::hub::model_dir(model, rev, &embedder::hub::HubOptions::from_env())
            .map_err(embedder_error),
    }
}

/// One text or a list of texts, and whether one was given.
fn texts_of(texts: &Bound<'_, PyAny>) -> PyResult<(Vec<String>, bool)> {
    if let Ok(text) = texts.extract::<String>() {
        return Ok((vec![text], true));
    }
    Ok((texts.extract::<Vec<String>>()?, false))
}

/// A progress bar on stderr (hidden unless `show` and stderr is a terminal).
fn progress_bar(show: bool, len: usize, what: &str) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{prefix} {bar:30} {pos}/{len} [{elapsed_precise}<{eta_precise}, {per_sec}]",
    ) {
        bar.set_style(style);
    }
    bar.set_prefix(what.to_owned());
    bar
}

/// Inputs per call into the engine: Ctrl-C is seen between two calls.
const CHUNK: usize = 256;

/// A bi-encoder: sentence-transformers' `SentenceTransformer` API on this
/// project's engine.
#[pyclass(frozen, module = "skillret")]
struct Embedder {
    inner: LocalEmbedder,
}

#[pymethods]
impl Embedder {
    #[new]
    #[pyo3(signature = (model, precision = "f32", device = "cpu", max_length = None, revision = None, backend = None, batch_tokens = None))]
    fn new(
        py: Python<'_>,
        model: &str,
        precision: &str,
        device: &str,
        max_length: Option<usize>,
        revision: Option<&str>,
        backend: Option<&str>,
        batch_tokens: Option<usize>,
    ) -> PyResult<Self> {
        let dir = model_dir(model, revision)?;
        let mut options = EmbedderOptions::default()
            .with_precision(parse_precision(precision)?)
            .with_backend(parse_backend(device, backend)?);
        if let Some(n) = max_length {
            options = options.with_max_length(n);
        }
        if let Some(n) = batch_tokens {
            options = options.with_batch_tokens(n);
        }
        let inner = py
            .detach(|| LocalEmbedder::from_dir(&dir, options))
            .map_err(embedder_error)?;
        Ok(Self { inner })
    }

    /// Embeds `texts` (one string gives one vector) with the prompt named
    /// `prompt_name` (`query` or `document`, the model's) or the literal
    /// `prompt`; without either, no prompt. A float32 array, (texts, dim) or
    /// (dim,). As in sentence-transformers, `normalize_embeddings=True`
    /// normalises on top of what the model does (its Normalize module);
    /// `batch_size` is accepted and unused (the engine batches by tokens:
    /// `batch_tokens=` when loading).
    #[pyo3(signature = (texts, prompt_name = None, prompt = None, batch_size = None, normalize_embeddings = None, show_progress_bar = false, convert_to_numpy = true))]
    fn encode<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        prompt_name: Option<&str>,
        prompt: Option<&str>,
        batch_size: Option<usize>,
        normalize_embeddings: Option<bool>,
        show_progress_bar: bool,
        convert_to_numpy: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = (batch_size, convert_to_numpy);
        let prompt = match (prompt, prompt_name) {
            (Some(p), _) => p.to_owned(),
            (None, Some(name)) => self.named_prompt(name)?,
            (None, None) => String::new(),
        };
        self.embed(
            py,
            texts,
            &prompt,
            Kind::Query,
            normalize_embeddings,
            show_progress_bar,
        )
    }

    /// Embeds queries with the model's query prompt (`encode_query`).
    #[pyo3(signature = (texts, normalize_embeddings = None, show_progress_bar = false))]
    fn encode_query<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        normalize_embeddings: Option<bool>,
        show_progress_bar: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.embed_as(
            py,
            texts,
            Kind::Query,
            normalize_embeddings,
            show_progress_bar,
        )
    }

    /// Embeds documents with the model's document prompt (`encode_document`).
    #[pyo3(signature = (texts, normalize_embeddings = None, show_progress_bar = false))]
    fn encode_document<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        normalize_embeddings: Option<bool>,
        show_progress_bar: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.embed_as(
            py,
            texts,
            Kind::Document,
            normalize_embeddings,
            show_progress_bar,
        )
    }

    /// Cosine similarity of every row of `a` with every row of `b`.
    fn similarity<'py>(
        &self,
        py: Python<'py>,
        a: numpy::PyReadonlyArray2<'py, f32>,
        b: numpy::PyReadonlyArray2<'py, f32>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let (a, b) = (a.as_array(), b.as_array());
        if a.ncols() != b.ncols() {
            return Err(PyValueError::new_err(format!(
                "similarity: vectors of {} and {} dimensions",
                a.ncols(),
                b.ncols()
            )));
        }
        let norm = |row: numpy::ndarray::ArrayView1<'_, f32>| row.dot(&row).sqrt().max(1e-12);
        let b_norms: Vec<f32> = b.rows().into_iter().map(norm).collect();
        let mut out = Vec::with_capacity(a.nrows() * b.nrows());
        for x in a.rows() {
            let x_norm = norm(x);
            for (y, y_norm) in b.rows().into_iter().zip(&b_norms) {
                out.push(x.dot(&y) / (x_norm * y_norm));
            }
        }
        PyArray1::from_vec(py, out).reshape([a.nrows(), b.nrows()])
    }

    /// The model's prompts, by name.
    #[getter]
    fn prompts(&self) -> HashMap<String, String> {
        HashMap::from([
            (
                "query".to_owned(),
                self.inner.prompt(Kind::Query).to_owned(),
            ),
            (
                "document".to_owned(),
                self.inner.prompt(Kind::Document).to_owned(),
            ),
        ])
    }

    /// Width of a vector.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// The maximum length in tokens.
    #[getter]
    fn max_seq_length(&self) -> usize {
        self.inner.max_length()
    }

    /// What runs where, in words (the CLI's summary line).
    fn __repr__(&self) -> String {
        format!("Embedder({})", embedder::Embedder::describe(&self.inner))
    }
}

impl Embedder {
    /// Texts of `kind` with the model's prompt for it.
    fn embed_as<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        kind: Kind,
        normalize: Option<bool>,
        show_progress_bar: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let prompt = self.inner.prompt(kind).to_owned();
        self.embed(py, texts, &prompt, kind, normalize, show_progress_bar)
    }

    fn named_prompt(&self, name: &str) -> PyResult<String> {
        match name {
            "query" => Ok(self.inner.prompt(Kind::Query).to_owned()),
            "document" => Ok(self.inner.prompt(Kind::Document).to_owned()),
            other => Err(PyValueError::new_err(format!(
                "prompt_name {other:?}: this model's prompts are \"query\" and \"document\""
            ))),
        }
    }

    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: &Bound<'py, PyAny>,
        prompt: &str,
        kind: Kind,
        normalize: Option<bool>,
        show_progress_bar: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (texts, single) = texts_of(texts)?;
        // Chunk after chunk, so that Ctrl-C (checked between chunks) stops
        // the work; a text's vector does not depend on what it is batched
        // with, so the chunks change no bit.
        let dim = self.inner.dim();
        let mut data: Vec<f32> = Vec::new();
        let bar = progress_bar(show_progress_bar, texts.len(), "Embedding");
        for (c, chunk) in texts.chunks(CHUNK).enumerate() {
            let vectors = py
                .detach(|| {
                    self.inner.embed_with_prompt(chunk, prompt, kind, &|done| {
                        bar.set_position((c * CHUNK + done) as u64);
                    })
                })
                .map_err(embedder_error)?;
            if data.is_empty() {
                // The engine's buffer becomes the array's: no copy.
                data = vectors.into_vec();
            } else {
                data.extend_from_slice(vectors.as_slice());
            }
            py.check_signals()?;
        }
        bar.finish_and_clear();
        let rows = texts.len();
        if normalize == Some(true) {
            for row in data.chunks_exact_mut(dim.max(1)) {
                embedder::normalize(row);
            }
        }
        let flat = PyArray1::from_vec(py, data);
        Ok(if single {
            flat.into_any()
        } else {
            flat.reshape([rows, dim])?.into_any()
        })
    }
}

/// A reranker: sentence-transformers' `CrossEncoder` API (cross-encoders
/// and Qwen3 yes/no rerankers).
#[pyclass(frozen, module = "skillret")]
struct CrossEncoder {
    inner: Reranker,
}

#[pymethods]
impl CrossEncoder {
    #[new]
    #[pyo3(signature = (model, precision = "f32", device = "cpu", max_length = None, revision = None, backend = None, instruction = None))]
    fn new(
        py: Python<'_>,
        model: &str,
        precision: &str,
        device: &str,
        max_length: Option<usize>,
        revision: Option<&str>,
        backend: Option<&str>,
        instruction: Option<&str>,
    ) -> PyResult<Self> {
        let dir = model_dir(model, revision)?;
        let mut options = RerankerOptions::default()
            .with_precision(parse_precision(precision)?)
            .with_backend(parse_backend(device, backend)?);
        if let Some(n) = max_length {
            options = options.with_max_length(n);
        }
        if let Some(text) = instruction {
            options = options.with_instruction(text);
        }
        let inner = py
            .detach(|| Reranker::from_dir(&dir, options))
            .map_err(embedder_error)?;
        Ok(Self { inner })
    }

    /// The score of each (query, document) pair, in order: a one-label
    /// model's logit (its sigmoid with `activation_fn="sigmoid"`), a
    /// two-label model's label 1 logit, a yes/no reranker's P(yes).
    #[pyo3(signature = (pairs, activation_fn = None, show_progress_bar = false))]
    fn predict<'py>(
        &self,
        py: Python<'py>,
        pairs: Vec<(String, String)>,
        activation_fn: Option<&str>,
        show_progress_bar: bool,
    ) -> PyResult<Bound<'py, PyArray1<f32>>> {
        let scores = self.scores(py, &pairs, activation_fn, show_progress_bar)?;
        Ok(PyArray1::from_vec(py, scores))
    }

    /// The documents ranked for `query`, best first: a list of
    /// `{"corpus_id": index, "score": float}` (with `"text"` when
    /// `return_documents`), the first `top_k` where given.
    #[pyo3(signature = (query, documents, top_k = None, return_documents = false))]
    fn rank<'py>(
        &self,
        py: Python<'py>,
        query: String,
        documents: Vec<String>,
        top_k: Option<usize>,
        return_documents: bool,
    ) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        use pyo3::types::PyDictMethods;
        let pairs: Vec<(String, String)> = documents
            .iter()
            .map(|d| (query.clone(), d.clone()))
            .collect();
        let scores = self.scores(py, &pairs, None, false)?;
        let mut order: Vec<usize> = (0..scores.len()).collect();
        // Best first; equal scores keep the documents' order (a stable sort, as Python's).
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        order
            .into_iter()
            .take(top_k.unwrap_or(usize::MAX))
            .map(|i| {
                let d = pyo3::types::PyDict::new(py);
                d.set_item("corpus_id", i)?;
                d.set_item("score", scores[i])?;
                if return_documents {
                    d.set_item("text", &documents[i])?;
                }
                Ok(d)
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "CrossEncoder({})",
            reranker::Reranker::describe(&self.inner)
        )
    }
}

impl CrossEncoder {
    fn scores(
        &self,
        py: Python<'_>,
        pairs: &[(String, String)],
        activation: Option<&str>,
        show_progress_bar: bool,
    ) -> PyResult<Vec<f32>> {
        let mut scores = Vec::with_capacity(pairs.len());
        let bar = progress_bar(show_progress_bar, pairs.len(), "Scoring");
        for (c, chunk) in pairs.chunks(CHUNK).enumerate() {
            scores.extend(
                py.detach(|| {
                    self.inner.score(chunk, &|done| {
                        bar.set_position((c * CHUNK + done) as u64);
                    })
                })
                .map_err(embedder_error)?,
            );
            py.check_signals()?;
        }
        bar.finish_and_clear();
        match activation {
            None | Some("identity") => {}
            Some("sigmoid") => {
                if self.inner.kind() == reranker::RerankerKind::YesNo {
                    return Err(PyValueError::new_err(
                        "activation_fn=\"sigmoid\": a yes/no reranker's score is already P(yes)",
                    ));
                }
                for s in &mut scores {
                    *s = 1.0 / (1.0 + (-*s).exp());
                }
            }
            Some(other) => {
                return Err(PyValueError::new_err(format!(
                    "activation_fn {other:?}: \"identity\" or \"sigmoid\""
                )));
            }
        }
        Ok(scores)
    }
}

/// Judgements: pytrec_eval's nested dict, or a path (TREC qrels, or a
/// SkillRet data directory's qrels for `split`).
fn qrels_of(value: &Bound<'_, PyAny>, split: &str) -> PyResult<Qrels> {
    if let Ok(map) = value.extract::<HashMap<String, HashMap<String, i64>>>() {
        let mut qrels = Qrels::default();
        for (query, docs) in map {
            qrels.ensure_query(&query);
            for (doc, grade) in docs {
                qrels.insert(query.clone(), doc, grade);
            }
        }
        return Ok(qrels);
    }
    let path: PathBuf = value.extract()?;
    let mut warnings = Vec::new();
    Qrels::read(&path, split, &mut warnings).map_err(eval_error)
}

/// A run: pytrec_eval's nested dict of scores, or a path (TREC run, or the
/// official output JSON).
fn run_of(value: &Bound<'_, PyAny>, split: &str) -> PyResult<Run> {
    if let Ok(map) = value.extract::<HashMap<String, HashMap<String, f64>>>() {
        let mut run = Run::default();
        for (query, docs) in map {
            run.insert(
                query,
                docs.into_iter()
                    .map(|(doc, score)| ScoredDoc::new(doc, score))
                    .collect(),
            );
        }
        return Ok(run);
    }
    let path: PathBuf = value.extract()?;
    Run::read(&path, split).map_err(eval_error)
}

/// Scores `run` against `qrels` as `pipeline eval` does (trec_eval's rules,
/// as pytrec_eval computes them): the official summary (`NDCG@10`, …,
/// `MRR`, `queries`), with `ERR@k` and `RBP` when `extended`; with
/// `per_query`, also `{"per_query": {query: {metric: value}}}`.
#[pyfunction]
#[pyo3(signature = (qrels, run, k = vec![5, 10, 15], metrics = None, per_query = false, extended = false, split = "test"))]
fn evaluate<'py>(
    py: Python<'py>,
    qrels: &Bound<'py, PyAny>,
    run: &Bound<'py, PyAny>,
    k: Vec<usize>,
    metrics: Option<Vec<String>>,
    per_query: bool,
    extended: bool,
    split: &str,
) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
    use pyo3::types::{PyDict, PyDictMethods};
    let qrels = qrels_of(qrels, split)?;
    let run = run_of(run, split)?;
    let options = Options::default().with_cutoffs(&k).map_err(eval_error)?;
    let result = py.detach(|| score(&qrels, &run, &options));
    let summary = result.summary_json(extended || metrics.is_some());
    let out = PyDict::new(py);
    for (name, value) in &summary {
        if let Some(wanted) = &metrics
            && name != "queries"
            && !wanted
                .iter()
                .any(|m| name == m || name.starts_with(&format!("{m}@")))
        {
            continue;
        }
        match value.as_u64() {
            Some(n) if name == "queries" => out.set_item(name, n)?,
            _ => out.set_item(name, value.as_f64())?,
        }
    }
    if per_query {
        let table = PyDict::new(py);
        for q in &result.per_query {
            let row = PyDict::new(py);
            for (metric, value) in result.metrics.iter().zip(&q.values) {
                row.set_item(metric.to_string(), value)?;
            }
            table.set_item(&q.query_id, row)?;
        }
        out.set_item("per_query", table)?;
    }
    Ok(out)
}

/// An error of a command as the Python exception that fits it, with the
/// CLI's message (the whole chain, as `pipeline` prints it).
fn command_error(e: &anyhow::Error) -> PyErr {
    let message = format!("{e:#}");
    let not_found = e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
            || cause
                .downcast_ref::<embedder::Error>()
                .is_some_and(|e| matches!(e, embedder::Error::MissingFile { .. }))
    });
    if not_found {
        PyFileNotFoundError::new_err(message)
    } else {
        PyValueError::new_err(message)
    }
}

/// Runs the command line `argv` (`argv[0]` the program's name) as the
/// `pipeline` binary does, with the GIL released: its output, progress bars
/// and exit code. With `raise_errors`, a failure is a Python exception with
/// the message instead of a printed `error:` and exit code 1.
#[pyfunction]
#[pyo3(signature = (argv, raise_errors = false))]
fn cli(py: Python<'_>, argv: Vec<String>, raise_errors: bool) -> PyResult<i32> {
    use clap::Parser;
    let parsed = match pipeline::cli::Cli::try_parse_from(&argv) {
        Ok(parsed) => parsed,
        Err(e) if raise_errors && e.use_stderr() => {
            return Err(PyValueError::new_err(e.to_string()));
        }
        Err(e) => {
            let _ = e.print();
            return Ok(e.exit_code());
        }
    };
    match py.detach(|| pipeline::run(parsed)) {
        Ok(()) => Ok(0),
        Err(e) if raise_errors => Err(command_error(&e)),
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(1)
        }
    }
}

/// The directory `pipeline run --config config [--data data] [--out out]`
/// writes to (`--out`, else the configuration's `[output] dir`, else
/// `runs/<config name>`).
#[pyfunction]
#[pyo3(signature = (config, data = None, out = None))]
fn run_dir(config: PathBuf, data: Option<PathBuf>, out: Option<PathBuf>) -> PyResult<PathBuf> {
    let overrides = pipeline::config::Overrides {
        data,
        out,
        ..Default::default()
    };
    pipeline::config::Settings::load(&config, &overrides)
        .map(|s| s.out)
        .map_err(|e| command_error(&e))
}

/// A SkillRet split as every stage reads it: `(queries, documents, qrels)`,
/// the queries and documents as `(id, text)` lists (a document's text is
/// `name | description | skill_md`, the official recipe) and the judgements
/// as pytrec_eval's nested dict.
#[pyfunction]
#[pyo3(signature = (data, split = "test"))]
#[allow(clippy::type_complexity)]
fn load_dataset(
    py: Python<'_>,
    data: PathBuf,
    split: &str,
) -> PyResult<(
    Vec<(String, String)>,
    Vec<(String, String)>,
    HashMap<String, HashMap<String, i64>>,
)> {
    let dataset = py
        .detach(|| eval::Dataset::load(&data, split))
        .map_err(eval_error)?;
    let queries = dataset
        .queries
        .iter()
        .map(|q| (q.id.clone(), q.text.clone()))
        .collect();
    let documents = dataset
        .skills
        .iter()
        .map(|s| {
            (
                s.id.clone(),
                eval::document_text(&s.name, &s.description, &s.skill_md),
            )
        })
        .collect();
    let mut qrels: HashMap<String, HashMap<String, i64>> = HashMap::new();
    for query in dataset.qrels.query_ids() {
        let judged = qrels.entry(query.to_owned()).or_default();
        if let Some(j) = dataset.qrels.get(query) {
            for (doc, grade) in j {
                judged.insert(doc.clone(), *grade);
            }
        }
    }
    Ok((queries, documents, qrels))
}

/// Sets how `sweep` starts its jobs (`python -m skillret run ...`): the
/// command line runs inside Python, not as the `pipeline` binary.
#[pyfunction]
fn set_child_command(program: PathBuf, leading_args: Vec<String>) {
    pipeline::set_child_command(program, leading_args.into_iter().map(Into::into).collect());
}

/// The native module.
#[pymodule]
fn _skillret(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Embedder>()?;
    m.add_class::<CrossEncoder>()?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(run_dir, m)?)?;
    m.add_function(wrap_pyfunction!(load_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(set_child_command, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
