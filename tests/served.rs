//! Served models against the native engine, through real vLLM servers: the
//! same vectors (cosine ≥ 0.9999), the same reranker scores (|Δ| ≤ 1e-4),
//! the same run metrics, and the messages of the faults vLLM itself gives.
//!
//! The servers: `scripts/vllm-test-servers.sh start` (MiniLM on 8011, the
//! TEST cross-encoder on 8021, the TEST Qwen3 embedder on 8022 and yes/no
//! reranker on 8023). Without them each test skips with a message; with
//! `VLLM_REQUIRED=1` (CI) a missing server fails the test. Texts: the
//! shared SkillRet sample where present, else the shipped MetaTool set plus
//! long texts made from it (so that truncation is exercised either way).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{path, pipeline, root, text};
use embedder::remote::{Connection, Endpoint, InputMode, RemoteEmbedder, RemoteOptions};
use embedder::{Embedder, EmbedderOptions, Kind, LocalEmbedder};
use reranker::{Activation, CrossEncoder, RemoteApi, RemoteReranker, Reranker, RerankerOptions};

const MINILM: (u16, &str) = (8011, "all-MiniLM-L6-v2");
const CROSS: (u16, &str) = (8021, "test-bert-cross-encoder");
const QWEN3_EMBED: (u16, &str) = (8022, "test-qwen3-embedding");
const QWEN3_RERANK: (u16, &str) = (8023, "test-qwen3-reranker");
const QUERY_PROMPT: &str =
    "Instruct: Given a skill search query, retrieve relevant skills that match the query\nQuery: ";

fn required() -> bool {
    std::env::var("VLLM_REQUIRED").is_ok_and(|v| v == "1")
}

fn url(port: u16) -> String {
    format!("http://127.0.0.1:{port}/v1")
}

fn connection(urls: &[String]) -> Connection {
    Connection::new(
        urls.iter().map(|u| Endpoint::parse(u).unwrap()).collect(),
        None,
        4,
        Duration::from_secs(300),
        3,
        false,
    )
    .unwrap()
}

/// The base URL of the vLLM server serving `name` on `port`, or `None`
/// with a note (a failure under VLLM_REQUIRED=1).
fn server((port, name): (u16, &str)) -> Option<String> {
    let pool = embedder::remote::pool::Pool::new(&connection(&[url(port)]));
    match embedder::remote::served_models(&pool, 0) {
        Ok(models) if models.iter().any(|m| m.id == name) => Some(url(port)),
        other => {
            let why = match other {
                Ok(models) => format!(
                    "it serves {:?}",
                    models.iter().map(|m| m.id.clone()).collect::<Vec<_>>()
                ),
                Err(e) => e.to_string(),
            };
            assert!(
                !required(),
                "VLLM_REQUIRED=1 but no vLLM server serves {name} on 127.0.0.1:{port} ({why}): run scripts/vllm-test-servers.sh start"
            );
            eprintln!(
                "skipping: no vLLM server serves {name} on 127.0.0.1:{port} ({why}); run scripts/vllm-test-servers.sh start"
            );
            None
        }
    }
}

fn model(name: &str) -> Option<PathBuf> {
    let dir = root().join("models").join(name);
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        assert!(!required(), "{} is absent", dir.display());
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-models.sh and the make_*.py scripts)",
            dir.display()
        );
        None
    }
}

fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// `n` skill texts and `m` queries: the shared sample's, else MetaTool's,
/// with every third skill made long (its text repeated) so that some are
/// truncated.
fn texts(n: usize, m: usize) -> (Vec<String>, Vec<String>) {
    let sample = root().join("../shared/skillret-sample");
    let dir = if sample.join("skills/test.jsonl").is_file() {
        sample
    } else {
        root().join("tests/fixtures/metatool")
    };
    let field = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let skills: Vec<String> = read_jsonl(&dir.join("skills/test.jsonl"))
        .iter()
        .take(n)
        .enumerate()
        .map(|(i, s)| {
            let t = eval::document_text(
                &field(s, "name"),
                &field(s, "description"),
                &field(s, "skill_md"),
            );
            if i % 3 == 2 { t.repeat(40) } else { t }
        })
        .collect();
    let queries = read_jsonl(&dir.join("queries/test.jsonl"))
        .iter()
        .take(m)
        .map(|q| field(q, "query"))
        .collect();
    (skills, queries)
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let n = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (n(a) * n(b))
}

fn embed_all(model: &dyn Embedder, texts: &[String], kind: Kind) -> Vec<f32> {
    let mut out = Vec::new();
    model
        .embed_groups(
            &[texts],
            kind,
            &mut |_, v| {
                out = v.as_slice().to_vec();
                Ok(())
            },
            &|_, _| {},
        )
        .unwrap();
    out
}

/// Worst cosine between the native and the served vectors of `texts`.
fn worst_cosine(native: &dyn Embedder, served: &dyn Embedder, texts: &[String], kind: Kind) -> f64 {
    let dim = native.dim();
    assert_eq!(served.dim(), dim);
    let (a, b) = (
        embed_all(native, texts, kind),
        embed_all(served, texts, kind),
    );
    a.chunks_exact(dim)
        .zip(b.chunks_exact(dim))
        .map(|(x, y)| cosine(x, y))
        .fold(1.0, f64::min)
}

fn remote_embedder(
    base: &str,
    name: &str,
    dir: &Path,
    options: EmbedderOptions,
    input: InputMode,
) -> RemoteEmbedder {
    RemoteEmbedder::connect(RemoteOptions {
        connection: connection(&[base.to_owned()]),
        served_model: name.to_owned(),
        model_dir: Some(dir.to_path_buf()),
        embedder: options,
        batch_size: 16,
        dimensions: None,
        input: Some(input),
    })
    .unwrap()
}

#[test]
fn minilm_served_by_vllm_gives_the_native_vectors() {
    let (Some(base), Some(dir)) = (server(MINILM), model("all-MiniLM-L6-v2")) else {
        return;
    };
    let (skills, queries) = texts(96, 24);
    let native =
        LocalEmbedder::from_dir(&dir, EmbedderOptions::default().with_normalize(false)).unwrap();
    for input in [InputMode::Tokens, InputMode::Text] {
        let served = remote_embedder(&base, MINILM.1, &dir, EmbedderOptions::default(), input);
        assert!(served.raw(), "vLLM is asked for raw pooled vectors");
        let docs = worst_cosine(&native, &served, &skills, Kind::Document);
        let q = worst_cosine(&native, &served, &queries, Kind::Query);
        eprintln!(
            "MiniLM via vLLM ({input:?}): worst cosine documents {docs:.12}, queries {q:.12}"
        );
        assert!(docs >= 0.9999 && q >= 0.9999, "{input:?}: {docs} {q}");
    }
}

#[test]
fn the_qwen3_test_embedder_served_by_vllm_gives_the_native_vectors() {
    let (Some(base), Some(dir)) = (server(QWEN3_EMBED), model("test-qwen3-embedding")) else {
        return;
    };
    let (skills, queries) = texts(24, 12);
    let options = || {
        EmbedderOptions::default()
            .with_max_length(1024)
            .with_query_prompt(QUERY_PROMPT)
            .with_normalize(false)
    };
    let native = LocalEmbedder::from_dir(&dir, options()).unwrap();
    let served = remote_embedder(&base, QWEN3_EMBED.1, &dir, options(), InputMode::Tokens);
    let docs = worst_cosine(&native, &served, &skills, Kind::Document);
    let q = worst_cosine(&native, &served, &queries, Kind::Query);
    eprintln!("TEST Qwen3 embedder via vLLM: worst cosine documents {docs:.12}, queries {q:.12}");
    assert!(docs >= 0.9999 && q >= 0.9999, "{docs} {q}");
}

/// (query, skill) pairs: each query with several skills.
fn pairs(n: usize) -> Vec<(String, String)> {
    let (skills, queries) = texts(n, 4);
    skills
        .into_iter()
        .enumerate()
        .map(|(i, s)| (queries[i % queries.len()].clone(), s))
        .collect()
}

fn worst_score_difference(
    native: &dyn Reranker,
    served: &dyn Reranker,
    pairs: &[(String, String)],
) -> f64 {
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(q, d)| (q.as_str(), d.as_str()))
        .collect();
    let a = native.score_pairs(&borrowed, &|_| {}).unwrap();
    let b = served.score_pairs(&borrowed, &|_| {}).unwrap();
    assert_eq!(a.len(), b.len());
    if std::env::var("SERVED_DEBUG").is_ok() {
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            eprintln!(
                "pair {i}: native {x} served {y} query {} doc {}",
                pairs[i].0.len(),
                pairs[i].1.len()
            );
        }
    }
    a.iter()
        .zip(&b)
        .map(|(x, y)| f64::from((x - y).abs()))
        .fold(0.0, f64::max)
}

fn remote_reranker(
    base: &str,
    name: &str,
    dir: &Path,
    activation: Activation,
    max_length: Option<usize>,
) -> RemoteReranker {
    RemoteReranker::connect(reranker::RemoteOptions {
        connection: connection(&[base.to_owned()]),
        served_model: Some(name.to_owned()),
        api: RemoteApi::Rerank,
        model_dir: Some(dir.to_path_buf()),
        kind: None,
        max_length,
        instruction: None,
        activation,
        batch_size: 20,
    })
    .unwrap()
}

#[test]
fn the_test_cross_encoder_served_by_vllm_scores_as_the_native_one() {
    let (Some(base), Some(dir)) = (server(CROSS), model("test-bert-cross-encoder")) else {
        return;
    };
    let pairs = pairs(40);
    for activation in [Activation::Identity, Activation::Sigmoid] {
        let native =
            CrossEncoder::from_dir(&dir, RerankerOptions::default().with_activation(activation))
                .unwrap();
        let served = remote_reranker(&base, CROSS.1, &dir, activation, None);
        let worst = worst_score_difference(&native, &served, &pairs);
        eprintln!(
            "TEST cross-encoder via vLLM /rerank ({activation:?}): worst |Δ score| {worst:.3e}"
        );
        assert!(worst <= 1e-4, "{activation:?}: {worst}");
    }
}

#[test]
fn the_qwen3_test_reranker_served_by_vllm_gives_the_official_p_yes() {
    let (Some(base), Some(dir)) = (server(QWEN3_RERANK), model("test-qwen3-reranker")) else {
        return;
    };
    let pairs = pairs(24);
    let native =
        CrossEncoder::from_dir(&dir, RerankerOptions::default().with_max_length(1024)).unwrap();
    let served = remote_reranker(
        &base,
        QWEN3_RERANK.1,
        &dir,
        Activation::Identity,
        Some(1024),
    );
    assert!(
        served.describe().contains("yes/no"),
        "{}",
        served.describe()
    );
    let worst = worst_score_difference(&native, &served, &pairs);
    eprintln!("TEST Qwen3 yes/no reranker via vLLM /rerank: worst |Δ P(yes)| {worst:.3e}");
    assert!(worst <= 1e-4, "{worst}");
    assert!(
        served.notes().iter().all(|n| !n.contains("tokenise back")),
        "{:?}",
        served.notes()
    );
}

/// A copy of `config` with [output] cache and dir in `tmp`.
fn config_in(tmp: &Path, config: &str, extra: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join(config)).unwrap();
    let text = text
        .replace(
            "\"tests/fixtures/",
            &format!("\"{}/tests/fixtures/", root().display()),
        )
        .replace("\"models/", &format!("\"{}/models/", root().display()));
    let path = tmp.join(Path::new(config).file_name().unwrap());
    std::fs::write(
        &path,
        format!(
            "{text}{extra}\n[output]\ncache = \"{}\"\n",
            tmp.join("cache").display()
        ),
    )
    .unwrap();
    path
}

#[test]
fn a_run_through_vllm_gives_the_metrics_of_the_native_run() {
    if server(MINILM).is_none() || model("all-MiniLM-L6-v2").is_none() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let data = root().join("tests/fixtures/metatool");
    let mut metrics = Vec::new();
    for config in ["configs/minilm.toml", "configs/vllm-minilm.toml"] {
        let out = tmp.path().join(Path::new(config).file_stem().unwrap());
        let run = pipeline(&[
            "run",
            "--config",
            path(&config_in(tmp.path(), config, "")),
            "--data",
            path(&data),
            "--out",
            path(&out),
        ]);
        assert!(run.status.success(), "{config}: {}", text(&run.stderr));
        let m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap())
                .unwrap();
        assert_eq!(m["dataset"], "MetaTool");
        metrics.push(m);
    }
    let (native, served) = (&metrics[0]["retriever"], &metrics[1]["retriever"]);
    let mut worst = 0.0f64;
    for (key, value) in native.as_object().unwrap() {
        let d = (value.as_f64().unwrap() - served[key].as_f64().unwrap()).abs();
        worst = worst.max(d);
    }
    eprintln!("MetaTool, MiniLM native against vLLM-served: max |Δ| over every metric {worst:.2e}");
    assert!(worst <= 0.002, "{worst}");
}

#[test]
fn what_a_user_sees_when_vllm_refuses() {
    let (Some(base), Some(_)) = (server(MINILM), model("all-MiniLM-L6-v2")) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = root().join("tests/fixtures/metatool");

    // A served name vLLM does not serve: the message names the file, line
    // and key, and lists what the server serves; nothing is written.
    let config = std::fs::read_to_string(config_in(tmp.path(), "configs/vllm-minilm.toml", ""))
        .unwrap()
        .replace(
            "served_model = \"all-MiniLM-L6-v2\"",
            "served_model = \"all-MiniLM-L12-v2\"",
        );
    let wrong = tmp.path().join("wrong.toml");
    std::fs::write(&wrong, &config).unwrap();
    let out_dir = tmp.path().join("w");
    let out = pipeline(&[
        "run",
        "--config",
        path(&wrong),
        "--data",
        path(&data),
        "--out",
        path(&out_dir),
    ]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success());
    assert!(!out_dir.exists(), "nothing written");
    let line = config
        .lines()
        .position(|l| l.starts_with("served_model"))
        .unwrap()
        + 1;
    assert!(
        stderr.contains(&format!(
            "wrong.toml:{line}: [embedder] served_model \"all-MiniLM-L12-v2\" is not served at {base}, which serves: all-MiniLM-L6-v2"
        )),
        "{stderr}"
    );

    // Without the local model, texts go whole: vLLM refuses one longer
    // than its max_model_len (it never truncates silently), and the
    // message says how to have it truncated as the native engine does.
    let served = RemoteEmbedder::connect(RemoteOptions {
        connection: connection(std::slice::from_ref(&base)),
        served_model: MINILM.1.to_owned(),
        model_dir: None,
        embedder: EmbedderOptions::default(),
        batch_size: 8,
        dimensions: None,
        input: None,
    })
    .unwrap();
    let long = vec!["skills ".repeat(400)];
    let err = served
        .embed_groups(&[&long], Kind::Document, &mut |_, _| Ok(()), &|_, _| {})
        .unwrap_err()
        .to_string();
    eprintln!("too long: {err}");
    assert!(err.contains("HTTP 400") && err.contains("256"), "{err}");
    assert!(
        err.contains("set `model` to the local model directory"),
        "{err}"
    );
}
