//! The served reranker's client against the fault-injecting server of the
//! embedder's tests: pairs grouped by query into requests, scores put back
//! in pair order, the activation reconciled, refusals explained. Against a
//! real vLLM: the workspace's tests/served.rs.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::fake_server;

use std::time::Duration;

use fake_server::{Behaviour, FakeServer, score};
use reranker::{Activation, RemoteApi, RemoteOptions, RemoteReranker, Reranker};
use served::{Connection, Endpoint};

fn options(url: &str, activation: Activation, batch_size: usize) -> RemoteOptions {
    RemoteOptions {
        connection: Connection::new(
            vec![Endpoint::parse(url).unwrap()],
            None,
            2,
            Duration::from_secs(5),
            2,
            false,
        )
        .unwrap(),
        served_model: Some("fake-model".to_owned()),
        api: RemoteApi::Rerank,
        model_dir: None,
        kind: None,
        max_length: None,
        instruction: None,
        activation,
        batch_size,
    }
}

fn pairs() -> Vec<(String, String)> {
    (0..11)
        .map(|i| (format!("query {}", i / 4), format!("document {i}")))
        .collect()
}

#[test]
fn pairs_are_grouped_by_query_and_scores_come_back_in_pair_order() {
    let server = FakeServer::start(Behaviour::default());
    let model = RemoteReranker::connect(options(&server.url(), Activation::Sigmoid, 3)).unwrap();
    let pairs = pairs();
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(q, d)| (q.as_str(), d.as_str()))
        .collect();
    let got = model.score_pairs(&borrowed, &|_| {}).unwrap();
    let want: Vec<f32> = pairs.iter().map(|(q, d)| score(q, d, 1)).collect();
    assert_eq!(got, want);
    // Queries of 4, 4 and 3 pairs in requests of at most 3 documents.
    assert_eq!(server.behaviour.lock().unwrap().requests, 5);
    assert_eq!(server.behaviour.lock().unwrap().inputs, 11);
    assert!(
        model.notes()[0].contains("5 requests"),
        "{:?}",
        model.notes()
    );
}

#[test]
fn probabilities_of_a_service_without_logits_are_turned_back_into_logits() {
    let server = FakeServer::start(Behaviour {
        owned_by: "a-hosted-service".to_owned(),
        ..Behaviour::default()
    });
    let model = RemoteReranker::connect(options(&server.url(), Activation::Identity, 8)).unwrap();
    let pairs = pairs();
    let borrowed: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(q, d)| (q.as_str(), d.as_str()))
        .collect();
    let got = model.score_pairs(&borrowed, &|_| {}).unwrap();
    for ((q, d), g) in pairs.iter().zip(got) {
        let p = score(q, d, 1).clamp(1e-7, 1.0 - 1e-7);
        assert!((g - (p / (1.0 - p)).ln()).abs() < 1e-5, "{g} for {p}");
    }
}

#[test]
fn a_served_yes_no_reranker_needs_its_tokenizer_and_refusals_are_explained() {
    let server = FakeServer::start(Behaviour::default());
    let mut o = options(&server.url(), Activation::Identity, 8);
    o.kind = Some(reranker::RerankerKind::YesNo);
    let err = RemoteReranker::connect(o).unwrap_err().to_string();
    assert!(err.contains("needs `model`"), "{err}");

    let model = RemoteReranker::connect(options(&server.url(), Activation::Identity, 8)).unwrap();
    server
        .behaviour
        .lock()
        .unwrap()
        .faults
        .push_back(fake_server::Fault::Status {
            code: 400,
            retry_after: None,
            message: "documents too long".to_owned(),
        });
    let err = model
        .score_pairs(&[("q", "d")], &|_| {})
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("refused a request (1 pair,") && err.contains("documents too long"),
        "{err}"
    );
    assert!(err.contains("set `model`"), "{err}");
}
