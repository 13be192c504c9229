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

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{path, pipeline, root, text};
use embedder::remote::{InputMode, RemoteEmbedder, RemoteOptions};
use embedder::{Embedder, EmbedderOptions, Kind, LocalEmbedder};
use reranker::{Activation, CrossEncoder, RemoteApi, RemoteReranker, Reranker, RerankerOptions};
use served::{Connection, Endpoint};

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
    let pool = served::pool::Pool::new(&connection(&[url(port)]));
    match served::served_models(&pool, 0) {
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
        max_chars: None,
    })
    .unwrap()
}

#[test]
fn minilm_served_by_vllm_gives_the_native_vectors() {
    let (Some(base), Some(dir)) = (server(MINILM), model("all-MiniLM-L6-v2")) else {
        return;
    };
    let (skills, queries) = texts(48, 24);
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
        // Every skill, the first 150 of the 1,094 queries (vLLM on the CPU is slow; the vectors
        // of every kind of text are compared one by one in the tests above).
        let run = pipeline(&[
            "run",
            "--config",
            path(&config_in(tmp.path(), config, "")),
            "--data",
            path(&data),
            "--limit-queries",
            "150",
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
        max_chars: None,
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

// ---------------------------------------------------------------------------
// `pipeline run` against the fault-injecting server (no vLLM needed): bad
// configurations, replicas going down, the resume from the cache, the probe
// check and the key kept out of every output.

use crate::fake_server;

use fake_server::{Behaviour, FakeServer};

/// A served-embedder configuration over `endpoints` on the MetaTool set,
/// with its cache in `tmp`; `extra` goes into [embedder].
fn fake_config(tmp: &Path, name: &str, endpoints: &[String], extra: &str) -> PathBuf {
    let list: Vec<String> = endpoints.iter().map(|e| format!("{e:?}")).collect();
    let text = format!(
        "# a test configuration\n[data]\ndir = {:?}\n\n[embedder]\nbackend = \"openai\"\nserved_model = \"fake-model\"\nendpoints = [{}]\nmax_in_flight = 2\nbatch_size = 8\ntimeout_s = 5\nretries = 2\n{extra}\n[retriever]\nkind = \"dense\"\n\n[output]\ncache = {:?}\n",
        root().join("tests/fixtures/metatool").display().to_string(),
        list.join(", "),
        tmp.join("cache").display().to_string()
    );
    let path = tmp.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn run_config(config: &Path, out: &Path) -> std::process::Output {
    pipeline(&["run", "--config", path(config), "--out", path(out)])
}

fn metrics(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("metrics.json")).unwrap()).unwrap()
}

/// Every file under `dir`, read.
fn all_bytes(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(all_bytes(&p));
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

#[test]
fn bad_served_configurations_name_the_file_line_and_key_and_write_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Behaviour {
        served: vec!["model-a".to_owned(), "model-b".to_owned()],
        ..Behaviour::default()
    });
    let good = fake_config(tmp.path(), "good", &[server.url()], "");
    let base = std::fs::read_to_string(&good).unwrap();
    let line_of =
        |text: &str, start: &str| text.lines().position(|l| l.starts_with(start)).unwrap() + 1;
    let cases: Vec<(&str, String, String)> = vec![
        (
            "no-endpoints",
            base.replace(&format!("endpoints = [{:?}]\n", server.url()), ""),
            "[embedder] backend = \"openai\" needs `endpoints`".to_owned(),
        ),
        (
            "not-a-url",
            base.replace(&format!("{:?}", server.url()), "\"127.0.0.1:8011\""),
            "[embedder] endpoints[0]: \"127.0.0.1:8011\" is not a URL".to_owned(),
        ),
        (
            "unset-key",
            base.replace(
                "retries = 2\n",
                "retries = 2\napi_key_env = \"SKILLRET_TEST_UNSET_KEY\"\n",
            ),
            "[embedder] api_key_env names $SKILLRET_TEST_UNSET_KEY, which is not set".to_owned(),
        ),
        (
            "not-served",
            base.clone(),
            format!(
                "[embedder] served_model \"fake-model\" is not served at {}, which serves: model-a, model-b",
                server.url()
            ),
        ),
    ];
    for (name, text, needle) in cases {
        let config = tmp.path().join(format!("{name}.toml"));
        std::fs::write(&config, &text).unwrap();
        let out_dir = tmp.path().join(format!("out-{name}"));
        let out = run_config(&config, &out_dir);
        let stderr = text_of(&out);
        assert!(!out.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains(&needle),
            "{name}: {needle:?} not in {stderr}"
        );
        let line = match name {
            "no-endpoints" => line_of(&text, "[embedder]"),
            "not-a-url" => line_of(&text, "endpoints"),
            "unset-key" => line_of(&text, "api_key_env"),
            _ => line_of(&text, "served_model"),
        };
        assert!(
            stderr.contains(&format!("{name}.toml:{line}:")),
            "{name}: line {line} in {stderr}"
        );
        assert!(!out_dir.exists(), "{name}: nothing written");
        assert!(
            !tmp.path().join("cache").exists(),
            "{name}: no cache written"
        );
    }
    // An unknown reranker api, named with its line.
    let text = format!(
        "{base}\n[reranker]\nbackend = \"rerank-api\"\napi = \"cohere-v9\"\nserved_model = \"model-a\"\nendpoints = [{:?}]\n",
        server.url()
    );
    let config = tmp.path().join("api.toml");
    std::fs::write(&config, &text).unwrap();
    let out = run_config(&config, &tmp.path().join("out-api"));
    let stderr = text_of(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!(
            "api.toml:{}: [reranker] api: unknown \"cohere-v9\"",
            line_of(&text, "api =")
        )),
        "{stderr}"
    );
}

fn text_of(out: &std::process::Output) -> String {
    text(&out.stderr)
}

#[test]
fn a_replica_that_dies_mid_run_changes_nothing_and_when_all_die_the_rerun_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    // One replica: the reference.
    let one = FakeServer::start(Behaviour::default());
    let config = fake_config(tmp.path(), "one", &[one.url()], "");
    let out = run_config(&config, &tmp.path().join("one"));
    assert!(out.status.success(), "{}", text_of(&out));
    let reference = metrics(&tmp.path().join("one"));
    one.stop();

    // Two replicas, one stopped after 20 requests: the other finishes.
    std::fs::remove_dir_all(tmp.path().join("cache")).unwrap();
    let (a, b) = (
        FakeServer::start(Behaviour::default()),
        FakeServer::start(Behaviour::default()),
    );
    for s in [&a, &b] {
        s.behaviour.lock().unwrap().delay = Duration::from_millis(20);
    }
    let config = fake_config(tmp.path(), "two", &[a.url(), b.url()], "");
    let watch = std::sync::Arc::clone(&a.behaviour);
    let killer = std::thread::spawn(move || {
        while watch.lock().unwrap().requests < 20 {
            std::thread::sleep(Duration::from_millis(5));
        }
        a.stop();
    });
    let out = run_config(&config, &tmp.path().join("two"));
    killer.join().unwrap();
    let stderr = text_of(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        metrics(&tmp.path().join("two")),
        reference,
        "one replica killed mid-run"
    );

    // Both die mid-run: the error names both; what was answered is cached,
    // and the rerun resumes from it and ends identical.
    std::fs::remove_dir_all(tmp.path().join("cache")).unwrap();
    let (c, d) = (
        FakeServer::start(Behaviour::default()),
        FakeServer::start(Behaviour::default()),
    );
    let (pc, pd) = (c.port, d.port);
    let (bc, bd) = (
        std::sync::Arc::clone(&c.behaviour),
        std::sync::Arc::clone(&d.behaviour),
    );
    for s in [&c, &d] {
        s.behaviour.lock().unwrap().delay = Duration::from_millis(20);
    }
    let config = fake_config(tmp.path(), "both", &[c.url(), d.url()], "");
    let watch = std::sync::Arc::clone(&c.behaviour);
    let killer = std::thread::spawn(move || {
        while watch.lock().unwrap().requests < 60 {
            std::thread::sleep(Duration::from_millis(5));
        }
        c.stop();
        d.stop();
    });
    let out = run_config(&config, &tmp.path().join("both"));
    killer.join().unwrap();
    let stderr = text_of(&out);
    assert!(!out.status.success(), "{stderr}");
    for port in [pc, pd] {
        assert!(
            stderr.contains(&format!("http://127.0.0.1:{port}/v1: connection refused")),
            "{port} in {stderr}"
        );
    }
    assert!(
        stderr.contains("run the same command again to resume"),
        "{stderr}"
    );
    assert!(!tmp.path().join("both/metrics.json").exists());
    let (_c, _d) = (FakeServer::start_on(pc, bc), FakeServer::start_on(pd, bd));
    let out = run_config(&config, &tmp.path().join("both"));
    let stderr = text_of(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.lines().any(|l| l.contains("queries:")
            && l.contains("shards from the cache")
            && !l.contains(": 0 of")),
        "the rerun read finished shards: {stderr}"
    );
    assert_eq!(metrics(&tmp.path().join("both")), reference, "resumed");
}

#[test]
fn another_model_under_the_cached_name_is_refused_with_how_to_start_afresh() {
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Behaviour::default());
    let port = server.port;
    let config = fake_config(tmp.path(), "probe", &[server.url()], "");
    let out = run_config(&config, &tmp.path().join("first"));
    assert!(out.status.success(), "{}", text_of(&out));
    server.stop();
    // The same name, port and listing; another model behind them.
    let _other = FakeServer::start_on(
        port,
        std::sync::Arc::new(std::sync::Mutex::new(Behaviour {
            seed: 99,
            ..Behaviour::default()
        })),
    );
    let out = run_config(&config, &tmp.path().join("second"));
    let stderr = text_of(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("is not the one whose documents vectors are cached"),
        "{stderr}"
    );
    assert!(stderr.contains("rm -r "), "{stderr}");
    assert!(!tmp.path().join("second").exists());
}

#[test]
fn the_key_is_sent_and_never_written() {
    const VAR: &str = "SKILLRET_TEST_SERVED_KEY";
    const KEY: &str = "sk-test-4c1d2e9f-never-written";
    let tmp = tempfile::tempdir().unwrap();
    let server = FakeServer::start(Behaviour {
        key: Some(KEY.to_owned()),
        ..Behaviour::default()
    });
    let config = fake_config(
        tmp.path(),
        "key",
        &[server.url()],
        &format!("api_key_env = {VAR:?}\n"),
    );
    let run = |key: &str, out: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args([
                "run",
                "--config",
                path(&config),
                "--out",
                path(&tmp.path().join(out)),
            ])
            .env(VAR, key)
            .output()
            .unwrap()
    };
    let wrong = run("sk-wrong-key-0000", "wrong");
    let stderr = text_of(&wrong);
    assert!(!wrong.status.success());
    assert!(
        stderr.contains(&format!("${VAR}")) && !stderr.contains("sk-wrong-key-0000"),
        "{stderr}"
    );
    let right = run(KEY, "right");
    let all = format!("{}{}", text_of(&right), text(&right.stdout));
    assert!(right.status.success(), "{all}");
    assert!(!all.contains(KEY), "the key is not printed");
    for (file, bytes) in all_bytes(tmp.path()) {
        if file.extension().is_some_and(|e| e == "toml") {
            continue;
        }
        let hay = String::from_utf8_lossy(&bytes);
        assert!(!hay.contains(KEY), "{} holds the key", file.display());
    }
}

#[test]
fn rate_limits_and_overload_are_waited_out_as_the_server_asks() {
    let tmp = tempfile::tempdir().unwrap();
    let clean = FakeServer::start(Behaviour::default());
    let config = fake_config(tmp.path(), "clean", &[clean.url()], "");
    let out = run_config(&config, &tmp.path().join("clean"));
    assert!(out.status.success(), "{}", text_of(&out));
    let clean_requests = clean.behaviour.lock().unwrap().requests;
    clean.stop();

    std::fs::remove_dir_all(tmp.path().join("cache")).unwrap();
    let server = FakeServer::start(Behaviour::default());
    {
        let mut b = server.behaviour.lock().unwrap();
        for (code, message) in [
            (429, "Rate limit reached, retry after 1 s"),
            (503, "Server overloaded"),
        ] {
            b.faults.push_back(fake_server::Fault::Status {
                code,
                retry_after: Some("1".to_owned()),
                message: message.to_owned(),
            });
        }
    }
    let config = fake_config(tmp.path(), "limited", &[server.url()], "");
    let out = run_config(&config, &tmp.path().join("limited"));
    let stderr = text_of(&out);
    eprintln!("{stderr}");
    assert!(out.status.success(), "{stderr}");
    // Both faults were served (the first requests are the start-up probe,
    // whose retries are not in the per-endpoint report) and each retried.
    let b = server.behaviour.lock().unwrap();
    assert!(b.faults.is_empty());
    assert_eq!(b.requests, clean_requests + 2);
    drop(b);
    assert_eq!(
        metrics(&tmp.path().join("limited")),
        metrics(&tmp.path().join("clean"))
    );
}
