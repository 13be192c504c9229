//! Milvus against a live server: Milvus Lite from `scripts/milvus.sh`.
//!
//! The tests that share the server at `MILVUS_URI` (default
//! `http://127.0.0.1:19530`) skip with a message where none answers, unless
//! `MILVUS_REQUIRED=1` (CI starts one and sets it): then they fail. The fault
//! tests start, kill and restart servers of their own on other ports through
//! the same script, with data directories of their own.
#![allow(clippy::unwrap_used)]

use crate::synthetic;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use index::{Error, ExactIndex, MilvusIndex, MilvusIndexType, MilvusParams, VectorIndex};
use synthetic::Mixture;

const DIM: usize = 32;

fn corpus(n: usize, seed: u64) -> (Vec<Arc<str>>, Vec<f32>, Vec<f32>) {
    let mixture = Mixture::new(DIM, 8, 16, 0.5, seed);
    let ids = (0..n)
        .map(|i| Arc::from(format!("owner/repo/skill-{i:05}")))
        .collect();
    (ids, mixture.sample(n, 1), mixture.sample(40, 2))
}

fn uri() -> String {
    std::env::var("MILVUS_URI").unwrap_or_else(|_| "http://127.0.0.1:19530".to_owned())
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}

/// The shared server, or `None` (with a message) where it is not running
/// and not required.
fn shared_server() -> Option<String> {
    let uri = uri();
    let port = uri
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or(19530);
    if port_open(port) {
        return Some(uri);
    }
    assert!(
        std::env::var("MILVUS_REQUIRED").as_deref() != Ok("1"),
        "MILVUS_REQUIRED=1 but no Milvus answers at {uri}"
    );
    eprintln!("skipped: no Milvus at {uri} (scripts/milvus.sh start, or set MILVUS_URI)");
    None
}

/// A collection name no other test (or earlier run) uses.
fn fresh_name(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("test_{tag}_{}_{nanos}", std::process::id())
}

fn params(uri: &str, collection: &str, index_type: MilvusIndexType) -> MilvusParams {
    MilvusParams {
        collection: Some(collection.to_owned()),
        index_type,
        upload_batch: 100,
        timeout_s: 5.0,
        ..MilvusParams::new(uri)
    }
}

fn drop_collection(uri: &str, name: &str) {
    let script =
        format!("import pymilvus; pymilvus.MilvusClient({uri:?}).drop_collection({name:?})");
    let python = repo().join(".cache/milvus/venv/bin/python");
    let _ = Command::new(python).args(["-c", &script]).status();
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn flat_ranks_as_exact_search_and_a_second_open_reuses_the_collection() {
    let Some(uri) = shared_server() else { return };
    let (ids, vectors, queries) = corpus(700, 3);
    let name = fresh_name("flat");
    let p = params(&uri, &name, MilvusIndexType::Flat);
    let (milvus, upload) =
        MilvusIndex::open(&p, "key-a", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    assert_eq!(
        (upload.found, upload.uploaded, upload.indexed),
        (0, 700, true)
    );
    assert_eq!(milvus.len(), 700);
    let exact = ExactIndex::new(ids.clone(), vectors.clone(), DIM).unwrap();
    let truth = exact.search(&queries, 20).unwrap();
    let found = milvus.search(&queries, 20).unwrap();
    assert_eq!(found.len(), truth.len());
    for (f, t) in found.iter().zip(&truth) {
        let f_ids: Vec<&str> = f.iter().map(|d| &*d.id).collect();
        let t_ids: Vec<&str> = t.iter().map(|d| &*d.id).collect();
        assert_eq!(f_ids, t_ids);
        for (a, b) in f.iter().zip(t) {
            assert!(
                (a.score - b.score).abs() < 1e-5,
                "{} vs {}",
                a.score,
                b.score
            );
        }
    }
    drop(milvus);
    let (again, upload) =
        MilvusIndex::open(&p, "key-a", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    assert_eq!(
        (upload.found, upload.uploaded, upload.indexed),
        (700, 0, false)
    );
    assert_eq!(again.search(&queries, 20).unwrap(), found);
    drop(again);
    // Other index parameters: the index is built anew over the same rows.
    let hnsw = MilvusParams {
        index_type: MilvusIndexType::Hnsw,
        ..p.clone()
    };
    let (_, upload) =
        MilvusIndex::open(&hnsw, "key-a", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    assert_eq!(
        (upload.found, upload.uploaded, upload.indexed),
        (700, 0, true)
    );
    let (_, upload) = MilvusIndex::open(&hnsw, "key-a", ids, &vectors, DIM, &|_| {}).unwrap();
    assert!(!upload.indexed);
    drop_collection(&uri, &name);
}

#[test]
fn hnsw_finds_most_of_what_exact_search_finds() {
    let Some(uri) = shared_server() else { return };
    let (ids, vectors, queries) = corpus(2000, 5);
    let name = fresh_name("hnsw");
    let p = MilvusParams {
        m: 16,
        ef_construction: 100,
        ef: 64,
        ..params(&uri, &name, MilvusIndexType::Hnsw)
    };
    let (milvus, _) = MilvusIndex::open(&p, "key-h", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    let exact = ExactIndex::new(ids, vectors, DIM).unwrap();
    let recall = index::hnsw::recall_at_k(
        &milvus.search(&queries, 10).unwrap(),
        &exact.search(&queries, 10).unwrap(),
        10,
    );
    assert!(recall >= 0.9, "recall@10 {recall}");
    drop_collection(&uri, &name);
}

#[test]
fn a_collection_of_other_vectors_is_refused_with_the_rebuild_hint() {
    let Some(uri) = shared_server() else { return };
    let (ids, vectors, _) = corpus(150, 7);
    let name = fresh_name("foreign");
    let p = params(&uri, &name, MilvusIndexType::Flat);
    MilvusIndex::open(&p, "model-a", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    // Another model (another content key) pointed at the same collection.
    let err = MilvusIndex::open(&p, "model-b", ids.clone(), &vectors, DIM, &|_| {}).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Refused { .. }), "{text}");
    assert!(
        text.contains("holds other vectors") && text.contains("drop_collection"),
        "{text}"
    );
    // The same key over a smaller corpus: the count differs.
    let err = MilvusIndex::open(
        &p,
        "model-a",
        ids[..100].to_vec(),
        &vectors[..100 * DIM],
        DIM,
        &|_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("holds other vectors"), "{err}");
    drop_collection(&uri, &name);
}

#[test]
fn an_unreachable_server_is_a_clear_error_within_seconds() {
    // Nothing listens on this port (checked), and a name that never resolves.
    let port = 19529;
    assert!(!port_open(port), "something listens on 127.0.0.1:{port}");
    let (ids, vectors, _) = corpus(10, 9);
    for uri in [
        format!("http://127.0.0.1:{port}"),
        "http://milvus.invalid:19530".to_owned(),
    ] {
        let started = Instant::now();
        let p = MilvusParams {
            timeout_s: 1.0,
            ..params(&uri, "unused", MilvusIndexType::Flat)
        };
        let err = MilvusIndex::open(&p, "k", ids.clone(), &vectors, DIM, &|_| {}).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        let text = err.to_string();
        assert!(
            text.contains("cannot reach Milvus at") && text.contains("scripts/milvus.sh start"),
            "{text}"
        );
    }
    let err = MilvusParams::new("127.0.0.1:19530").validate().unwrap_err();
    assert!(err.to_string().contains("is not a Milvus address"), "{err}");
}

/// A Milvus Lite server of the test's own, on `port`, over `data`.
struct OwnServer {
    port: u16,
    data: PathBuf,
}

impl OwnServer {
    fn script(&self, action: &str) -> bool {
        Command::new(repo().join("scripts/milvus.sh"))
            .arg(action)
            .env("MILVUS_PORT", self.port.to_string())
            .env("MILVUS_DATA", &self.data)
            .status()
            .unwrap()
            .success()
    }

    fn kill(&self) {
        let pid_file = repo().join(format!(".cache/milvus/server-{}.pid", self.port));
        let pid = std::fs::read_to_string(pid_file).unwrap();
        Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap();
        while port_open(self.port) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        self.script("stop");
    }
}

#[test]
fn an_upload_cut_by_a_killed_server_completes_on_the_next_run_without_duplicates() {
    // Needs the script's virtual environment, which the shared server's start installs.
    if shared_server().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = OwnServer {
        port: 19537,
        data: dir.path().join("data"),
    };
    assert!(server.script("start"));
    let uri = format!("http://127.0.0.1:{}", server.port);
    let (ids, vectors, queries) = corpus(1000, 11);
    let p = params(&uri, "cut", MilvusIndexType::Flat);
    // Kill the server once the first 300 rows are in.
    let started = Instant::now();
    let err = MilvusIndex::open(&p, "k", ids.clone(), &vectors, DIM, &|done| {
        if done == 300 {
            server.kill();
        }
    })
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(matches!(err, Error::Milvus(_)), "{err}");
    assert!(server.script("start"));
    let (milvus, upload) = MilvusIndex::open(&p, "k", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    assert!(upload.found <= 300, "{upload:?}");
    assert_eq!(upload.found + upload.uploaded, 1000, "{upload:?}");
    drop(milvus);
    // A restarted server holds its collections released: the next run loads
    // it and finds everything in place.
    assert!(server.script("stop") && server.script("start"));
    let (milvus, upload) = MilvusIndex::open(&p, "k", ids.clone(), &vectors, DIM, &|_| {}).unwrap();
    assert_eq!(
        (upload.found, upload.uploaded, upload.indexed),
        (1000, 0, false)
    );
    let exact = ExactIndex::new(ids, vectors, DIM).unwrap();
    let truth = exact.search(&queries, 10).unwrap();
    assert_eq!(
        milvus
            .search(&queries, 10)
            .unwrap()
            .iter()
            .map(|l| l.iter().map(|d| d.id.clone()).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        truth
            .iter()
            .map(|l| l.iter().map(|d| d.id.clone()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
}
