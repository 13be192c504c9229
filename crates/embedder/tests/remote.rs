//! The served-model client against a fault-injecting OpenAI-style server
//! (tests/support/fake_server.rs): fan-out over replicas, retries on
//! another endpoint, Retry-After, back-off, endpoints set aside and the
//! messages a user sees for each fault. The same client against a real
//! vLLM server is tested in the workspace's tests/served.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::fake_server;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use embedder::remote::{InputMode, RemoteEmbedder, RemoteOptions};
use embedder::{Embedder, EmbedderOptions, Error, Kind};
use fake_server::{Behaviour, FakeServer, Fault, vector};
use serde_json::json;
use served::{ApiKey, Connection, Endpoint};

fn connection(
    urls: &[String],
    key: Option<(&str, &str)>,
    timeout: Duration,
    retries: usize,
) -> Connection {
    Connection::new(
        urls.iter().map(|u| Endpoint::parse(u).unwrap()).collect(),
        key.map(|(env, k)| (env.to_owned(), ApiKey::new(k.to_owned()))),
        2,
        timeout,
        retries,
        false,
    )
    .unwrap()
}

fn options(connection: Connection) -> RemoteOptions {
    RemoteOptions {
        connection,
        served_model: "fake-model".to_owned(),
        model_dir: None,
        embedder: EmbedderOptions::default(),
        batch_size: 4,
        dimensions: None,
        input: Some(InputMode::Text),
        max_chars: None,
    }
}

fn texts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("skill number {i} | does thing {i}"))
        .collect()
}

/// Embeds `groups` of texts, returning each group's vectors in order.
fn embed(model: &RemoteEmbedder, groups: &[Vec<String>]) -> Result<Vec<Vec<f32>>, Error> {
    let refs: Vec<&[String]> = groups.iter().map(Vec::as_slice).collect();
    let mut out = vec![Vec::new(); groups.len()];
    model.embed_groups(
        &refs,
        Kind::Document,
        &mut |g, v| {
            out[g] = v.as_slice().to_vec();
            Ok(())
        },
        &|_, _| {},
    )?;
    Ok(out)
}

fn expected(texts: &[String], seed: u64) -> Vec<f32> {
    texts
        .iter()
        .flat_map(|t| vector(&json!(t), seed, 8))
        .collect()
}

#[test]
fn batches_spread_over_replicas_and_come_back_in_order() {
    let a = FakeServer::start(Behaviour::default());
    let b = FakeServer::start(Behaviour::default());
    let model = RemoteEmbedder::connect(options(connection(
        &[a.url(), b.url()],
        None,
        Duration::from_secs(5),
        3,
    )))
    .unwrap();
    assert_eq!(model.dim(), 8);
    let groups: Vec<Vec<String>> = (0..5).map(|g| texts(9 + g)).collect();
    let got = embed(&model, &groups).unwrap();
    for (g, texts) in groups.iter().enumerate() {
        assert_eq!(got[g], expected(texts, 1), "group {g}");
    }
    let (na, nb) = (
        a.behaviour.lock().unwrap().inputs,
        b.behaviour.lock().unwrap().inputs,
    );
    // Every text once (plus one probe at start), over both servers.
    assert_eq!(na + nb, groups.iter().map(Vec::len).sum::<usize>() + 1);
    assert!(na > 0 && nb > 0, "both replicas got work: {na} and {nb}");
    // Vectors travel as base64, and vLLM is asked for the raw pooled vectors.
    let body = a.behaviour.lock().unwrap().bodies[0].clone();
    assert_eq!(body["encoding_format"], "base64");
    assert_eq!(body["use_activation"], false);
}

#[test]
fn a_429_is_retried_after_its_retry_after() {
    let mut behaviour = Behaviour::default();
    let server = FakeServer::start(Behaviour::default());
    let model = RemoteEmbedder::connect(options(connection(
        &[server.url()],
        None,
        Duration::from_secs(5),
        3,
    )))
    .unwrap();
    behaviour.faults.push_back(Fault::Status {
        code: 429,
        retry_after: Some("2".to_owned()),
        message: "rate limited".to_owned(),
    });
    server.behaviour.lock().unwrap().faults = behaviour.faults;
    let started = Instant::now();
    let got = embed(&model, &[texts(3)]).unwrap();
    // The client waited as told before asking again, then got the answer.
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(got[0], expected(&texts(3), 1));
    assert_eq!(server.behaviour.lock().unwrap().requests, 3); // probe, 429, retry
}

#[test]
fn a_503_goes_to_the_other_replica() {
    let a = FakeServer::start(Behaviour::default());
    let b = FakeServer::start(Behaviour::default());
    let model = RemoteEmbedder::connect(options(connection(
        &[a.url(), b.url()],
        None,
        Duration::from_secs(5),
        3,
    )))
    .unwrap();
    for s in [&a, &b] {
        let mut beh = s.behaviour.lock().unwrap();
        beh.faults.push_back(Fault::Status {
            code: 503,
            retry_after: Some("30".to_owned()),
            message: "overloaded".to_owned(),
        });
    }
    // Each replica refuses once and holds for 30 s; the batch that failed on
    // one is done by the other as soon as it may send again… which it may
    // not for 30 s either: so the run would take 30 s. Give one replica no
    // fault to show the retry lands there.
    b.behaviour.lock().unwrap().faults.clear();
    let started = Instant::now();
    let got = embed(&model, &[texts(4)]).unwrap();
    assert_eq!(got[0], expected(&texts(4), 1));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the other replica took the batch"
    );
}

#[test]
fn a_refused_key_names_its_variable_never_the_key() {
    let server = FakeServer::start(Behaviour {
        key: Some("right-key".to_owned()),
        ..Behaviour::default()
    });
    let err = RemoteEmbedder::connect(options(connection(
        &[server.url()],
        Some(("MY_EMBED_KEY", "sk-wrong-secret")),
        Duration::from_secs(5),
        3,
    )))
    .unwrap_err()
    .to_string();
    assert!(err.contains("$MY_EMBED_KEY"), "{err}");
    assert!(!err.contains("sk-wrong-secret"), "{err}");
    // The right key works.
    let model = RemoteEmbedder::connect(options(connection(
        &[server.url()],
        Some(("MY_EMBED_KEY", "right-key")),
        Duration::from_secs(5),
        3,
    )))
    .unwrap();
    assert!(!format!("{model:?}").contains("right-key"));
    assert!(!model.describe().contains("right-key"));
}

#[test]
fn an_input_too_long_for_the_server_says_how_to_fix_it() {
    let server = FakeServer::start(Behaviour {
        max_model_len: 30,
        ..Behaviour::default()
    });
    let model = RemoteEmbedder::connect(options(connection(
        &[server.url()],
        None,
        Duration::from_secs(5),
        3,
    )))
    .unwrap();
    let long = vec!["word ".repeat(40)];
    let err = embed(&model, &[long]).unwrap_err().to_string();
    assert!(err.contains("maximum context length is 30 tokens"), "{err}");
    assert!(
        err.contains("set `model` to the local model directory"),
        "{err}"
    );
    // Refused at once: no retries of a request no retry can change.
    assert_eq!(server.behaviour.lock().unwrap().requests, 2);
}

#[test]
fn a_server_that_stops_answering_times_out_and_the_other_takes_over() {
    let a = FakeServer::start(Behaviour::default());
    let b = FakeServer::start(Behaviour::default());
    let model = RemoteEmbedder::connect(options(connection(
        &[a.url(), b.url()],
        None,
        Duration::from_secs(1),
        3,
    )))
    .unwrap();
    a.behaviour
        .lock()
        .unwrap()
        .faults
        .extend(std::iter::repeat_n(Fault::Hang(Duration::from_secs(10)), 4));
    let got = embed(&model, &[texts(16)]).unwrap();
    assert_eq!(got[0], expected(&texts(16), 1));
}

#[test]
fn a_refused_connection_sets_the_endpoint_aside_and_when_all_are_down_the_error_names_each() {
    // A port with nothing on it.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}/v1", l.local_addr().unwrap().port())
    };
    let live = FakeServer::start(Behaviour::default());
    // At start a dead endpoint is left out, with a warning.
    let model = RemoteEmbedder::connect(options(connection(
        &[dead.clone(), live.url()],
        None,
        Duration::from_secs(2),
        2,
    )))
    .unwrap();
    assert!(
        model
            .warnings()
            .iter()
            .any(|w| w.contains(&dead) && w.contains("connection refused")),
        "{:?}",
        model.warnings()
    );
    assert_eq!(model.endpoints(), [live.url()]);
    assert_eq!(
        embed(&model, &[texts(5)]).unwrap()[0],
        expected(&texts(5), 1)
    );

    // Both go down mid-run: the error names both, with their last errors.
    let other = FakeServer::start(Behaviour::default());
    let model = RemoteEmbedder::connect(options(connection(
        &[live.url(), other.url()],
        None,
        Duration::from_secs(2),
        2,
    )))
    .unwrap();
    let (a, b) = (live.url(), other.url());
    live.stop();
    other.stop();
    let err = embed(&model, &[texts(5)]).unwrap_err().to_string();
    assert!(
        err.contains("every endpoint serving \"fake-model\" is down"),
        "{err}"
    );
    for url in [a, b] {
        assert!(
            err.contains(&format!("{url}: connection refused")),
            "{url} in {err}"
        );
    }
    assert!(err.contains("3 attempts in a row failed"), "{err}");
}

#[test]
fn a_restarted_server_is_waited_for_and_answered_batches_are_kept() {
    let server = FakeServer::start(Behaviour::default());
    let port = server.port;
    let behaviour = std::sync::Arc::clone(&server.behaviour);
    let model = RemoteEmbedder::connect(options(connection(
        &[server.url()],
        None,
        Duration::from_secs(2),
        5,
    )))
    .unwrap();
    behaviour.lock().unwrap().delay = Duration::from_millis(100);
    let groups: Vec<Vec<String>> = (0..6).map(|g| texts(8 + g)).collect();
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(350));
        server.stop();
        std::thread::sleep(Duration::from_millis(1500));
        FakeServer::start_on(port, behaviour)
    });
    let refs: Vec<&[String]> = groups.iter().map(Vec::as_slice).collect();
    let mut seen = HashSet::new();
    let mut out = vec![Vec::new(); groups.len()];
    let stats = model
        .embed_groups(
            &refs,
            Kind::Document,
            &mut |g, v| {
                assert!(seen.insert(g), "group {g} handed over twice");
                out[g] = v.as_slice().to_vec();
                Ok(())
            },
            &|_, _| {},
        )
        .unwrap();
    let _server = restart.join().unwrap();
    for (g, texts) in groups.iter().enumerate() {
        assert_eq!(out[g], expected(texts, 1), "group {g}");
    }
    assert!(
        stats.notes[0].contains("failed attempts"),
        "{:?}",
        stats.notes
    );
}

#[test]
fn the_start_checks_the_served_name_and_that_replicas_agree() {
    let server = FakeServer::start(Behaviour {
        served: vec!["other-a".to_owned(), "other-b".to_owned()],
        ..Behaviour::default()
    });
    let err = RemoteEmbedder::connect(options(connection(
        &[server.url()],
        None,
        Duration::from_secs(2),
        1,
    )))
    .unwrap_err();
    assert!(
        matches!(&err, Error::NotServed { serves, .. } if serves == &["other-a", "other-b"]),
        "{err}"
    );
    assert!(
        err.to_string().contains("which serves: other-a, other-b"),
        "{err}"
    );

    let a = FakeServer::start(Behaviour::default());
    let b = FakeServer::start(Behaviour {
        max_model_len: 128,
        ..Behaviour::default()
    });
    let err = RemoteEmbedder::connect(options(connection(
        &[a.url(), b.url()],
        None,
        Duration::from_secs(2),
        1,
    )))
    .unwrap_err()
    .to_string();
    assert!(err.contains("serve \"fake-model\" differently"), "{err}");
}

#[test]
fn the_protocol_key_names_the_model_never_where_it_runs() {
    let a = FakeServer::start(Behaviour::default());
    let b = FakeServer::start(Behaviour::default());
    let on_a = RemoteEmbedder::connect(options(connection(
        &[a.url()],
        None,
        Duration::from_secs(2),
        1,
    )))
    .unwrap();
    let on_b = RemoteEmbedder::connect(options(connection(
        &[b.url()],
        None,
        Duration::from_secs(2),
        1,
    )))
    .unwrap();
    assert_eq!(on_a.protocol(), on_b.protocol());
    assert!(
        !on_a.protocol().contains(&a.port.to_string()),
        "{}",
        on_a.protocol()
    );
    assert_eq!(on_a.probe(), on_b.probe());
    // Another model under the name gives another probe vector.
    let c = FakeServer::start(Behaviour {
        seed: 2,
        ..Behaviour::default()
    });
    let on_c = RemoteEmbedder::connect(options(connection(
        &[c.url()],
        None,
        Duration::from_secs(2),
        1,
    )))
    .unwrap();
    assert_ne!(on_a.probe(), on_c.probe());
}

/// A model saved with a chat template (sentence-transformers 6.3's message
/// modality): the served model is sent the ids the native path embeds
/// (rendered, cut, the template's ending restored); text input, which
/// cannot carry them exactly, is refused.
#[test]
fn a_chat_template_model_sends_the_native_ids_and_refuses_text_input() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/test-qwen3-chat");
    if !dir.join("chat_template.jinja").is_file() {
        eprintln!(
            "skipping: {} is absent (run scripts/make_chat_models.py)",
            dir.display()
        );
        return;
    }
    let server = FakeServer::start(Behaviour {
        max_model_len: 100_000,
        ..Behaviour::default()
    });
    let connect = |input| {
        let mut o = options(connection(&[server.url()], None, Duration::from_secs(5), 1));
        o.model_dir = Some(dir.clone());
        o.embedder = EmbedderOptions::default().with_max_length(64);
        o.input = input;
        RemoteEmbedder::connect(o)
    };
    let e = connect(Some(InputMode::Text)).unwrap_err().to_string();
    assert!(
        e.contains("chat template") && e.contains("input = \"tokens\""),
        "{e}"
    );
    let model = connect(None).unwrap();
    let texts = vec!["hello world".to_owned(), "merge the tables ".repeat(40)];
    server.behaviour.lock().unwrap().bodies.clear();
    embed(&model, std::slice::from_ref(&texts)).unwrap();
    let local =
        embedder::LocalEmbedder::from_dir(&dir, EmbedderOptions::default().with_max_length(64))
            .unwrap();
    let want = local.tokenize(&texts, Kind::Document).unwrap();
    let sent: Vec<Vec<u32>> = server.behaviour.lock().unwrap().bodies[0]["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|ids| {
            ids.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    assert_eq!(sent, want);
    assert_eq!(sent[1].len(), 64);
}
