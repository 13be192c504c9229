//! HNSW: recall against exact search, determinism, save/load and refusals.
#![allow(clippy::unwrap_used)]

use crate::synthetic;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use index::hnsw::{HEADER_FILE, recall_at_k};
use index::{Error, ExactIndex, HnswIndex, HnswParams, VectorIndex};
use synthetic::Mixture;

const DIM: usize = 48;

fn corpus(n: usize) -> (Vec<Arc<str>>, Vec<f32>, Vec<f32>) {
    let mixture = Mixture::new(DIM, 12, 40, 0.5, 7);
    let ids = (0..n).map(|i| Arc::from(format!("skill-{i:05}"))).collect();
    (ids, mixture.sample(n, 1), mixture.sample(50, 2))
}

fn params() -> HnswParams {
    HnswParams {
        m: 16,
        ef_construction: 100,
        ef_search: 64,
        deterministic: true,
    }
}

fn build(ids: &[Arc<str>], vectors: &[f32], params: HnswParams) -> HnswIndex {
    HnswIndex::build(ids.to_vec(), vectors, DIM, params, &|_| {}).unwrap()
}

#[test]
fn finds_what_exact_search_finds() {
    let (ids, vectors, queries) = corpus(3000);
    let exact = ExactIndex::new(ids.clone(), vectors.clone(), DIM).unwrap();
    let truth = exact.search(&queries, 10).unwrap();
    let hnsw = build(&ids, &vectors, params());
    let found = hnsw.search(&queries, 10).unwrap();
    assert_eq!(found.len(), 50);
    let recall = recall_at_k(&found, &truth, 10);
    assert!(recall >= 0.98, "recall@10 {recall}");
    // A starved search (ef = k = 1 from a far entry) does worse: the
    // measure can tell the difference.
    let starved = hnsw.search_ef(&queries, 10, 10).unwrap();
    assert!(recall_at_k(&starved, &truth, 10) <= recall);
    // Scores are inner products: the same as exact search for the same pair.
    for (a, e) in found.iter().zip(&truth) {
        for doc in a {
            if let Some(t) = e.iter().find(|t| t.id == doc.id) {
                assert!(
                    (t.score - doc.score).abs() < 1e-5,
                    "{} vs {}",
                    t.score,
                    doc.score
                );
            }
        }
        let mut sorted = a.clone();
        eval::sort_trec(&mut sorted);
        assert_eq!(&sorted, a, "results come in trec_eval order");
    }
}

#[test]
fn recall_at_k_counts_shared_ids() {
    let doc = |id: &str, score| eval::ScoredDoc::new(Arc::from(id), score);
    let truth = vec![
        vec![doc("a", 3.0), doc("b", 2.0)],
        vec![doc("c", 1.0)],
        vec![],
    ];
    let approx = vec![
        vec![doc("b", 2.0), doc("x", 1.0)],
        vec![doc("c", 1.0)],
        vec![],
    ];
    // (1/2 + 1/1) / 2; the query with no exact results is skipped.
    assert!((recall_at_k(&approx, &truth, 2) - 0.75).abs() < 1e-12);
    assert!((recall_at_k(&approx, &truth, 1) - 0.5).abs() < 1e-12);
}

#[test]
fn deterministic_builds_are_identical() {
    let (ids, vectors, queries) = corpus(1500);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let first = build(&ids, &vectors, params());
    let second = build(&ids, &vectors, params());
    assert_eq!(
        first.search(&queries, 10).unwrap(),
        second.search(&queries, 10).unwrap()
    );
    first.save(&a).unwrap();
    second.save(&b).unwrap();
    for name in [HEADER_FILE, "graph.hnsw.graph", "graph.hnsw.data"] {
        assert!(
            fs::read(a.join(name)).unwrap() == fs::read(b.join(name)).unwrap(),
            "{name} differs between two deterministic builds"
        );
    }
}

#[test]
fn save_and_load_round_trip() {
    let (ids, vectors, queries) = corpus(1200);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/index");
    let built = build(&ids, &vectors, params());
    built.save(&path).unwrap();
    // Saving again replaces it in place.
    built.save(&path).unwrap();
    let loaded = HnswIndex::load(&path, ids.clone()).unwrap();
    assert_eq!(loaded.params(), built.params());
    assert_eq!(loaded.dim(), DIM);
    assert_eq!(loaded.len(), ids.len());
    assert_eq!(
        loaded.search(&queries, 15).unwrap(),
        built.search(&queries, 15).unwrap()
    );
    // Nothing but the index is left in the parent directory.
    let names: Vec<_> = fs::read_dir(dir.path().join("nested"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["index"]);
}

fn refusal(dir: &Path, ids: Vec<Arc<str>>) -> String {
    let err = HnswIndex::load(dir, ids).unwrap_err();
    assert!(matches!(err, Error::Refused { .. }), "{err:?}");
    err.to_string()
}

#[test]
fn stale_damaged_and_foreign_indexes_are_refused() {
    let (ids, vectors, _) = corpus(600);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("index");
    build(&ids, &vectors, params()).save(&path).unwrap();

    // Another corpus: one id more, one id renamed, the same ids reordered.
    let mut more = ids.clone();
    more.push(Arc::from("new-skill"));
    assert!(refusal(&path, more).contains("stale"));
    let mut renamed = ids.clone();
    renamed[17] = Arc::from("skill-renamed");
    assert!(refusal(&path, renamed).contains("other document ids"));
    let mut reordered = ids.clone();
    reordered.swap(0, 1);
    assert!(refusal(&path, reordered).contains("stale"));

    // A flipped byte in the graph, a truncated data file.
    let graph = path.join("graph.hnsw.graph");
    let mut bytes = fs::read(&graph).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    fs::write(&graph, &bytes).unwrap();
    assert!(refusal(&path, ids.clone()).contains("sha256"));
    bytes[middle] ^= 0x40;
    fs::write(&graph, &bytes).unwrap();
    assert!(HnswIndex::load(&path, ids.clone()).is_ok());
    let data = path.join("graph.hnsw.data");
    let full = fs::read(&data).unwrap();
    fs::write(&data, &full[..full.len() - 8]).unwrap();
    assert!(refusal(&path, ids.clone()).contains("bytes"));
    fs::write(&data, &full).unwrap();

    // Headers: another format, an unknown field (named with its line), a bad
    // parameter.
    let header = path.join(HEADER_FILE);
    let text = fs::read_to_string(&header).unwrap();
    fs::write(&header, text.replace("skillret-hnsw/1", "skillret-hnsw/0")).unwrap();
    assert!(refusal(&path, ids.clone()).contains("format"));
    fs::write(&header, text.replacen("\"dim\"", "\"dims\"", 1)).unwrap();
    let message = refusal(&path, ids.clone());
    assert!(message.contains("index.json:"), "{message}");
    assert!(message.contains("dims"), "{message}");
    fs::write(&header, text.replacen("\"m\": 16", "\"m\": 1", 1)).unwrap();
    assert!(refusal(&path, ids.clone()).contains("m = 1"));
    fs::remove_file(&header).unwrap();
    let missing = HnswIndex::load(&path, ids).unwrap_err();
    assert!(matches!(missing, Error::Io { .. }), "{missing:?}");
}

#[test]
fn bad_parameters_and_vectors_are_errors_not_exits() {
    let (ids, vectors, _) = corpus(100);
    for bad in [
        HnswParams { m: 1, ..params() },
        HnswParams { m: 300, ..params() },
        HnswParams {
            ef_construction: 8,
            ..params()
        },
        HnswParams {
            ef_search: 0,
            ..params()
        },
    ] {
        let err = HnswIndex::build(ids.clone(), &vectors, DIM, bad, &|_| {}).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{bad:?}: {err:?}");
    }
    let mut long = vectors.clone();
    long[5 * DIM] += 0.5;
    let err = HnswIndex::build(ids.clone(), &long, DIM, params(), &|_| {}).unwrap_err();
    assert!(err.to_string().contains("vector 5 has length"), "{err}");
    let err = HnswIndex::build(ids.clone(), &vectors[1..], DIM, params(), &|_| {}).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)));

    let index = build(&ids, &vectors, params());
    assert!(index.search(&vectors[..DIM - 1], 3).is_err());
    assert!(index.search(&[0.0; DIM], 3).is_err(), "a zero query");
    // k beyond the corpus gives every document; k = 0 gives nothing.
    let all = index.search_ef(&vectors[..DIM], 500, 500).unwrap();
    assert_eq!(all[0].len(), 100);
    assert!(index.search(&vectors[..DIM], 0).unwrap()[0].is_empty());
}

#[test]
fn an_empty_corpus_is_refused() {
    let err = HnswIndex::build(Vec::new(), &[], DIM, params(), &|_| {}).unwrap_err();
    assert!(err.to_string().contains("at least one vector"), "{err}");
}
