//! Vectors equal sentence-transformers' (PyTorch) on real SkillRet text:
//! cosine ≥ 0.9999 for every text, both models, both engines. The reference
//! comes from scripts/make_embedding_fixture.py; the models from
//! scripts/fetch-models.sh; the texts from ../shared/skillret-sample.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use embedder::{Backend, Embedder, EmbedderOptions, Kind, Precision};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared sample and the installed models, or `None` with a note.
fn inputs(model: &str) -> Option<(PathBuf, PathBuf)> {
    let sample = root().join("../shared/skillret-sample");
    let dir = root().join("models").join(model);
    if !sample.join("skills/test.jsonl").is_file() {
        eprintln!("skipping: {} is absent", sample.display());
        return None;
    }
    if !dir.join("model.safetensors").is_file() {
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-models.sh)",
            dir.display()
        );
        return None;
    }
    Some((sample, dir))
}

fn decode(entry: &Value) -> Vec<Vec<f32>> {
    let dim = entry["dim"].as_u64().unwrap() as usize;
    let b64 = entry["vectors_f32le_base64"].as_str().unwrap();
    let bytes = base64_decode(b64);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect::<Vec<_>>()
        .chunks_exact(dim)
        .map(<[f32]>::to_vec)
        .collect()
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let clean: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let v: Vec<u32> = chunk.iter().map(|&c| u32::from(value(c))).collect();
        let n = v.iter().fold(0u32, |acc, &x| acc << 6 | x) << (6 * (4 - v.len()));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..v.len()]);
    }
    out
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn texts(sample: &Path, reference: &Value) -> (Vec<String>, Vec<String>) {
    let data = eval::Dataset::load(sample, "test").unwrap();
    let skills: HashMap<&str, &eval::Skill> =
        data.skills.iter().map(|s| (s.id.as_str(), s)).collect();
    let queries: HashMap<&str, &eval::Query> =
        data.queries.iter().map(|q| (q.id.as_str(), q)).collect();
    let ids = |kind: &str| -> Vec<String> {
        reference[kind]["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let docs = ids("documents")
        .iter()
        .map(|id| skills[id.as_str()].text())
        .collect();
    let qs = ids("queries")
        .iter()
        .map(|id| queries[id.as_str()].text.clone())
        .collect();
    (docs, qs)
}

fn check(model: &str, backend: Backend, limit: usize) {
    check_with(model, backend, Precision::F32, limit, 0.9999);
}

fn check_with(model: &str, backend: Backend, precision: Precision, limit: usize, bound: f64) {
    let Some((sample, dir)) = inputs(model) else {
        return;
    };
    let fixture: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference_embeddings.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(fixture["generated_by"]["tool"], "sentence-transformers");
    let reference = &fixture["models"][model];
    let (docs, queries) = texts(&sample, reference);
    let max = reference["max_length"].as_u64().unwrap() as usize;
    let options = EmbedderOptions::default()
        .with_max_length(max)
        .with_prompts(
            reference["query_prefix"].as_str().unwrap(),
            reference["document_prefix"].as_str().unwrap(),
        )
        .with_backend(backend)
        .with_precision(precision);
    let embedder = Embedder::from_dir(&dir, options).unwrap();
    for (kind, texts, entry) in [
        (Kind::Document, &docs, &reference["documents"]),
        (Kind::Query, &queries, &reference["queries"]),
    ] {
        let want = decode(entry);
        let n = limit.min(texts.len());
        let got = embedder.embed(&texts[..n], kind).unwrap();
        let mut worst = 1.0f64;
        for (i, want) in want.iter().enumerate().take(n) {
            let c = cosine(got.row(i), want);
            worst = worst.min(c);
            assert!(c >= bound, "{model} {kind:?} {i}: cosine {c}");
        }
        eprintln!(
            "{model} {backend:?} {precision:?} ({}) {kind:?}: {n} texts, worst cosine {worst:.9}",
            embedder.device()
        );
    }
}

#[test]
fn minilm_native_matches_sentence_transformers() {
    check("all-MiniLM-L6-v2", Backend::Native, usize::MAX);
}

#[test]
fn e5_native_matches_sentence_transformers() {
    check("multilingual-e5-small", Backend::Native, usize::MAX);
}

#[test]
fn minilm_candle_matches_sentence_transformers() {
    check("all-MiniLM-L6-v2", Backend::Candle, 12);
}

#[test]
fn e5_candle_matches_sentence_transformers() {
    check("multilingual-e5-small", Backend::Candle, 8);
}

#[test]
fn minilm_bf16_stays_within_0_999() {
    check_with(
        "all-MiniLM-L6-v2",
        Backend::Native,
        Precision::Bf16,
        usize::MAX,
        0.999,
    );
}

#[test]
fn e5_bf16_stays_within_0_999() {
    check_with(
        "multilingual-e5-small",
        Backend::Native,
        Precision::Bf16,
        usize::MAX,
        0.999,
    );
}
