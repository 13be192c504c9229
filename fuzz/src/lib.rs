//! The fuzz targets' bodies: one function for each reader of outside input.
//!
//! Each target takes the fuzzer's bytes, writes them where the reader looks (files in a scratch
//! directory of its own, overwritten at every input) and calls the function the `pipeline`
//! command calls on them, so that what is fuzzed is what users reach. Whatever the bytes, the
//! reader must answer without a panic, an abort, a hang or an allocation beyond the fuzzer's
//! limits; an error is a fine answer, and the error must name the file it is about (the scratch
//! directory's path is in it).
//!
//! Inputs of several files are cut at NUL bytes (`\0`), which none of the text formats holds:
//! `skills \0 queries \0 qrels \0 dataset.json` is a data directory.
//!
//! `fuzz_targets/NAME.rs` runs target NAME under libFuzzer (`scripts/fuzz.sh NAME`), and
//! `tests/replay.rs` runs every file of `corpus/NAME/` and `regressions/NAME/` through it in
//! `cargo test --workspace`; a regression's `NAME.expect` holds what its error must say.
//!
//! `data/tokenizer.json` is a WordPiece tokenizer of 24 made-up entries in the layout of
//! all-MiniLM-L6-v2's (Apache-2.0), written by hand for the model targets.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::sync::Arc;

mod structured;

/// One reader of outside input.
#[derive(Debug)]
pub struct Target {
    /// Its name: the fuzz target's, and the folders of its corpora.
    pub name: &'static str,
    /// What it reads, through which function.
    pub reads: &'static str,
    /// Reads `data` with `scratch` as its directory.
    pub run: fn(&Path, &[u8]),
}

/// Every target, in the order of the tables that list them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "run_config",
        reads: "a `pipeline run` configuration (TOML), through its validation: config::Settings::load",
        run: run_config,
    },
    Target {
        name: "train_config",
        reads: "a `pipeline train` configuration (TOML), through its validation: train_config::TrainSettings::load",
        run: train_config,
    },
    Target {
        name: "skills",
        reads: "a skills JSONL file: eval::data::read_skills",
        run: skills,
    },
    Target {
        name: "data_dir",
        reads: "a data directory, skills \\0 queries \\0 qrels \\0 dataset.json: eval::Dataset::load",
        run: data_dir,
    },
    Target {
        name: "qrels",
        reads: "a qrels file, SkillRet JSONL or TREC by its first byte: eval::Qrels::read",
        run: qrels,
    },
    Target {
        name: "trec_run",
        reads: "a TREC run file: eval::Run::read_trec",
        run: trec_run,
    },
    Target {
        name: "official_json",
        reads: "the official output JSON: eval::Run::read_skillret_json",
        run: official_json,
    },
    Target {
        name: "eval",
        reads: "qrels \\0 run, scored: `pipeline eval --qrels Q --run R --format json`",
        run: evaluate,
    },
    Target {
        name: "outputs",
        reads: "results.json \\0 metrics.json \\0 run.<stage>.trec of a run directory: `pipeline compare` and `pipeline report`",
        run: outputs,
    },
    Target {
        name: "safetensors",
        reads: "a safetensors file, every tensor of it: embedder::TensorFile",
        run: safetensors_file,
    },
    Target {
        name: "safetensors_structured",
        reads: "a safetensors file built from a plausible header (offsets that fit): embedder::TensorFile",
        run: structured::safetensors,
    },
    Target {
        name: "model_config",
        reads: "a model directory's config.json, any family: embedder::Encoder::from_dir",
        run: model_config,
    },
    Target {
        name: "model_config_structured",
        reads: "config.json built from plausible numbers, per family: embedder::Encoder::from_dir",
        run: structured::model_config,
    },
    Target {
        name: "tokenizer",
        reads: "tokenizer.json \\0 tokenizer_config.json, then texts tokenised: embedder::Tokenization",
        run: tokenizer,
    },
    Target {
        name: "sentence_transformers",
        reads: "modules.json \\0 1_Pooling/config.json \\0 sentence_bert_config.json \\0 config_sentence_transformers.json: embedder::SentenceTransformersConfig::read",
        run: sentence_transformers,
    },
    Target {
        name: "chat_template",
        reads: "a chat template, rendered: embedder::chat::ChatTemplate::render",
        run: chat_template,
    },
    Target {
        name: "e5s1",
        reads: "an E5S1 container: embedder::convert::E5s1::read",
        run: e5s1,
    },
    Target {
        name: "hnsw_index",
        reads: "a saved HNSW index, index.json \\0 graph and data (as `sized` cuts them): index::HnswIndex::load",
        run: hnsw_index,
    },
    Target {
        name: "cache",
        reads: "an embedding cache shard and its probe vector: pipeline::cache::Shards::load, load_probe",
        run: cache,
    },
    Target {
        name: "checkpoint",
        reads: "a training checkpoint, state.json \\0 optimizer.safetensors: train::trainer::read_checkpoint_state, restore_optimizer",
        run: checkpoint,
    },
    Target {
        name: "served",
        reads: "served models' answers: OpenAI embeddings, /rerank, TEI, classify, GET /models, error bodies, Retry-After",
        run: served_answers,
    },
];

/// Runs target `name` on `data` in this process's scratch directory (made at the first call,
/// in the temporary directory: scripts/fuzz.sh points `TMPDIR` at a folder it removes after).
pub fn fuzz(name: &str, data: &[u8]) {
    static SCRATCH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let scratch = SCRATCH.get_or_init(|| {
        tempfile::Builder::new()
            .prefix(&format!("skillret-fuzz-{name}-"))
            .tempdir()
            .expect("a scratch directory in TMPDIR")
            .keep()
    });
    let target = target(name).unwrap_or_else(|| panic!("no fuzz target {name}"));
    // The errors are dropped with each input (kept, they grew the process by a kilobyte an
    // input: libFuzzer's out-of-memory after two million).
    target.errors(scratch, data);
}

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}

/// Writes `bytes` to `dir/name` (folders made), or removes it for `None`, so that nothing of
/// an earlier input stays.
fn put(dir: &Path, name: &str, bytes: Option<&[u8]>) -> PathBuf {
    let path = dir.join(name);
    match bytes {
        Some(bytes) => {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("the scratch directory is writable");
            }
            std::fs::write(&path, bytes).expect("the scratch directory is writable");
        }
        None => {
            let _ = std::fs::remove_file(&path);
        }
    }
    path
}

/// Two binary files in one input (they may hold NUL bytes): the first's length (8 bytes, little
/// endian, at most what follows), the first, the second.
fn sized(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<8>() else {
        return (data, &[]);
    };
    let len = usize::try_from(u64::from_le_bytes(*len)).map_or(rest.len(), |n| n.min(rest.len()));
    rest.split_at(len)
}

/// `data` cut at NUL bytes into `n` parts, `None` for those it does not reach.
fn parts(data: &[u8], n: usize) -> Vec<Option<&[u8]>> {
    let mut cut: Vec<Option<&[u8]>> = data.splitn(n, |&b| b == 0).map(Some).collect();
    cut.resize(n, None);
    cut
}

thread_local! {
    /// The errors of the readers called for the current input, in order.
    static ERRORS: std::cell::RefCell<Vec<String>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Target {
    /// Runs the target on `data` and returns the errors its readers gave (none: all read it).
    pub fn errors(&self, scratch: &Path, data: &[u8]) -> Vec<String> {
        ERRORS.with(|e| e.borrow_mut().clear());
        (self.run)(scratch, data);
        ERRORS.with(|e| std::mem::take(&mut *e.borrow_mut()))
    }
}

fn refused(text: String) {
    ERRORS.with(|e| e.borrow_mut().push(text));
}

/// A reader's answer: its value, or its error, which must say which file it is about (the
/// scratch directory is in its path).
fn check<T, E: Display>(scratch: &Path, result: Result<T, E>) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(e) => {
            let text = format!("{e:#}");
            let dir = scratch.display().to_string();
            assert!(
                text.contains(&dir),
                "an error that names no file (of {dir}): {text}"
            );
            refused(text);
            None
        }
    }
}

/// The repository's tiny data set (tests/fixtures/tiny), for readers that need one beside the
/// fuzzed file.
fn tiny_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny")
}

fn run_config(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "run.toml", Some(data));
    let overrides = pipeline::config::Overrides::default();
    check(scratch, pipeline::config::Settings::load(&path, &overrides));
}

fn train_config(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "train.toml", Some(data));
    check(
        scratch,
        pipeline::train_config::TrainSettings::load(&path, None, None),
    );
}

fn skills(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "skills.jsonl", Some(data));
    check(scratch, eval::data::read_skills(&path, &mut Vec::new()));
}

fn data_dir(scratch: &Path, data: &[u8]) {
    let p = parts(data, 4);
    let dir = scratch.join("data");
    put(&dir, "skills/test.jsonl", p[0]);
    put(&dir, "queries/test.jsonl", Some(p[1].unwrap_or_default()));
    put(&dir, "qrels/test.jsonl", p[2]);
    put(&dir, "dataset.json", p[3]);
    check(scratch, eval::Dataset::load(&dir, "test"));
}

fn qrels(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "qrels", Some(data));
    check(scratch, eval::Qrels::read(&path, "test", &mut Vec::new()));
}

fn trec_run(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "run.trec", Some(data));
    check(scratch, eval::Run::read_trec(&path));
}

fn official_json(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "run.json", Some(data));
    check(scratch, eval::Run::read_skillret_json(&path, "test"));
}

/// Runs the command line `args` as the `pipeline` binary does (its output to stdout).
fn pipeline_command(scratch: &Path, args: &[&str]) {
    use clap::Parser;
    let cli = pipeline::cli::Cli::try_parse_from(args).expect("the harness's command line parses");
    check(scratch, pipeline::run(cli));
}

fn evaluate(scratch: &Path, data: &[u8]) {
    let p = parts(data, 2);
    let qrels = put(scratch, "qrels", Some(p[0].unwrap_or_default()));
    let run = put(scratch, "run", Some(p[1].unwrap_or_default()));
    let (qrels, run) = (qrels.display().to_string(), run.display().to_string());
    pipeline_command(
        scratch,
        &[
            "pipeline", "eval", "--qrels", &qrels, "--run", &run, "--format", "json",
        ],
    );
}

fn outputs(scratch: &Path, data: &[u8]) {
    let p = parts(data, 3);
    let dir = scratch.join("out");
    let _ = std::fs::remove_dir_all(&dir);
    put(&dir, "results.json", p[0]);
    put(&dir, "metrics.json", p[1]);
    // The run of every stage the report may look for.
    for stage in ["retriever", "reranker"] {
        put(&dir, &format!("run.{stage}.trec"), p[2]);
    }
    let out = dir.display().to_string();
    pipeline_command(
        scratch,
        &["pipeline", "compare", &out, &out, "--format", "json"],
    );
    let tiny = tiny_data().display().to_string();
    let html = scratch.join("report.html").display().to_string();
    pipeline_command(
        scratch,
        &["pipeline", "report", &out, "--data", &tiny, "--out", &html],
    );
}

/// Reads every tensor of a safetensors file as the model loaders do.
fn read_tensors(scratch: &Path, path: &Path) {
    let Some(file) = check(scratch, embedder::TensorFile::open(path)) else {
        return;
    };
    let Some(names) = check(scratch, file.names()) else {
        return;
    };
    for name in &names {
        check(scratch, file.get(name));
        check(scratch, file.rows(name, &[0, 1]));
    }
    let weights = check(
        scratch,
        embedder::Weights::open(&[path.to_owned()], &[""], names.first().map_or("x", |n| n)),
    );
    if let Some(weights) = weights {
        for name in &names {
            check(scratch, weights.get_bf16(name, &[2, 2]));
            check(scratch, weights.get(name, &[4]));
            check(scratch, weights.rows_full(name, &[0], 2));
        }
    }
}

fn safetensors_file(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "model.safetensors", Some(data));
    read_tensors(scratch, &path);
}

/// The tiny tokenizer of the model-directory targets: a WordPiece vocabulary of a few words,
/// as tokenizers' BertTokenizer writes one.
const TINY_TOKENIZER: &str = include_str!("../data/tokenizer.json");

/// A BERT model directory with `config` as its config.json, loaded as the embedder loads one.
fn load_model(scratch: &Path, config: &[u8]) {
    let dir = scratch.join("model");
    put(&dir, "config.json", Some(config));
    if !dir.join("tokenizer.json").is_file() {
        put(&dir, "tokenizer.json", Some(TINY_TOKENIZER.as_bytes()));
        let tensors = structured::tiny_bert_weights();
        put(&dir, "model.safetensors", Some(&tensors));
    }
    let options = embedder::EncoderOptions::default();
    check(scratch, embedder::Encoder::from_dir(&dir, &options, None));
}

fn model_config(scratch: &Path, data: &[u8]) {
    load_model(scratch, data);
}

fn tokenizer(scratch: &Path, data: &[u8]) {
    let p = parts(data, 2);
    let dir = scratch.join("tokenizer");
    put(&dir, "tokenizer.json", Some(p[0].unwrap_or_default()));
    put(&dir, "tokenizer_config.json", p[1]);
    put(
        &dir,
        "config.json",
        Some(structured::TINY_BERT_CONFIG.as_bytes()),
    );
    let Some(tokens) = check(
        scratch,
        embedder::Tokenization::from_dir(&dir, Some(16), None),
    ) else {
        return;
    };
    let texts = [
        "hello world",
        "",
        "a much longer text with ünïcode and 数字 12345",
    ];
    if let Some(out) = check(scratch, tokens.tokenize(&texts)) {
        for t in &out {
            assert!(t.ids.len() <= 16, "{} ids past max_length 16", t.ids.len());
        }
    }
    check(scratch, tokens.tokenize_pairs(&[("a query", "a document")]));
    check(scratch, tokens.cut_text(&texts, 4));
}

fn sentence_transformers(scratch: &Path, data: &[u8]) {
    let p = parts(data, 4);
    let dir = scratch.join("st");
    put(&dir, "modules.json", p[0]);
    put(&dir, "1_Pooling/config.json", p[1]);
    put(&dir, "sentence_bert_config.json", p[2]);
    put(&dir, "config_sentence_transformers.json", p[3]);
    check(scratch, embedder::SentenceTransformersConfig::read(&dir));
}

fn chat_template(scratch: &Path, data: &[u8]) {
    use embedder::chat::{ChatTemplate, Content, Message};
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let template = ChatTemplate::new(source, scratch.join("chat_template.jinja"));
    let say = |role: &str, text: &str| Message {
        role: role.to_owned(),
        content: Content::Text(text.to_owned()),
    };
    let messages = [
        say("system", "Judge the document."),
        say("user", "parse a pdf"),
        say("assistant", "pdf | Read PDFs."),
    ];
    check(scratch, template.render(&messages, true, &[]));
    check(scratch, template.render(&messages[1..2], false, &[]));
}

fn e5s1(scratch: &Path, data: &[u8]) {
    let path = put(scratch, "model.e5s1", Some(data));
    check(scratch, embedder::convert::E5s1::read(&path));
}

fn hnsw_index(scratch: &Path, data: &[u8]) {
    let p = parts(data, 2);
    let dir = scratch.join("hnsw");
    put(&dir, index::hnsw::HEADER_FILE, p[0]);
    let (graph, vectors) = p[1].map(sized).unzip();
    put(&dir, "graph.hnsw.graph", graph);
    put(&dir, "graph.hnsw.data", vectors);
    // The corpus of the seed's index (scripts/make_fuzz_corpus.py saves one for the tiny data),
    // so that a header that matches it reaches the graph and data files.
    static IDS: std::sync::OnceLock<Vec<Arc<str>>> = std::sync::OnceLock::new();
    let ids = IDS.get_or_init(|| {
        let skills =
            eval::data::read_skills(&tiny_data().join("skills/test.jsonl"), &mut Vec::new())
                .expect("tests/fixtures/tiny reads");
        skills.into_iter().map(|s| Arc::from(s.id)).collect()
    });
    check(scratch, index::HnswIndex::load(&dir, ids.clone()));
}

/// A cache of three inputs in shards of two, 4 floats each: shard 0 and the probe vector are
/// the fuzzer's (in one input as `sized` cuts it). A shard that is not a whole one of this cache
/// is embedded again (`None`).
fn cache(scratch: &Path, data: &[u8]) {
    use pipeline::cache::Shards;
    let texts = ["a", "b", "c"].map(String::from);
    let shards = Shards::new(scratch, "docs", "fuzz", &["1", "2", "3"], &texts, 4, 2);
    let (shard, probe) = sized(data);
    put(scratch, &relative(scratch, &shards.path(0)), Some(shard));
    put(
        scratch,
        &relative(scratch, &shards.probe_path()),
        Some(probe),
    );
    if let Some(Some(vectors)) = check(scratch, shards.load(0)) {
        assert_eq!(vectors.len(), shards.range(0).len() * 4, "a shard's floats");
    }
    check(scratch, shards.load_probe());
}

fn relative(scratch: &Path, path: &Path) -> String {
    let inside = path
        .strip_prefix(scratch)
        .expect("the cache is in the scratch directory");
    inside.display().to_string()
}

/// A checkpoint of a run of 10 steps resumed by a run with the same fingerprint: its
/// state.json, and its optimiser state for two parameters (2x3 and 3 floats).
fn checkpoint(scratch: &Path, data: &[u8]) {
    use candle_core::{DType, Device, Var};
    let p = parts(data, 2);
    let dir = scratch.join("checkpoint");
    put(&dir, "state.json", p[0]);
    put(&dir, "optimizer.safetensors", p[1]);
    let Some(step) = check(
        scratch,
        train::trainer::read_checkpoint_state(&dir, "fuzz", "base", 10),
    ) else {
        return;
    };
    let params = [("w", vec![2, 3]), ("b", vec![3])].map(|(name, shape)| train::Param {
        name: name.to_owned(),
        var: Var::zeros(shape, DType::F32, &Device::Cpu).expect("a tiny parameter"),
        trainable: true,
    });
    let mut optimizer =
        train::AdamW::new(train::AdamWConfig::default(), &params).expect("an optimiser");
    check(
        scratch,
        train::trainer::restore_optimizer(
            &mut optimizer,
            &params,
            &dir.join("optimizer.safetensors"),
            step,
        ),
    );
}

/// Served models' answers; their errors are about an answer, not a file.
fn served_answers(_scratch: &Path, data: &[u8]) {
    use served::rerank::RemoteApi;
    for count in [1, 3] {
        match served::openai::parse_embeddings(data, count) {
            Ok((vectors, _prompt_tokens)) => {
                assert_eq!(vectors.len() % count, 0, "{count} embeddings of one width");
            }
            Err(e) => refused(format!("embeddings: {e}")),
        }
        for api in [RemoteApi::Rerank, RemoteApi::Tei] {
            match served::rerank::parse_scores(api, data, count) {
                Ok(scores) => {
                    assert_eq!(scores.len(), count, "{api:?}");
                    assert!(scores.iter().all(|s| !s.is_nan()), "{api:?}: {scores:?}");
                }
                Err(e) => refused(format!("{api:?}: {e}")),
            }
        }
        match served::rerank::parse_classify(data, count) {
            Ok(scores) => {
                assert_eq!(scores.len(), count, "classify");
                assert!(scores.iter().all(|s| !s.is_nan()), "classify: {scores:?}");
            }
            Err(e) => refused(format!("classify: {e}")),
        }
    }
    if let Err(e) = served::parse_models(data) {
        refused(format!("models: {e}"));
    }
    let _ = served::pool::server_message(data);
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = served::pool::parse_retry_after(text);
    }
}
