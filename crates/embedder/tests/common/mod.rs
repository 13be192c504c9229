//! Helpers shared by the embedder's test binaries: where the models and the
//! shared sample are, reference vectors and token digests from the fixtures.
#![allow(dead_code)] // Each test binary uses its own part.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shared SkillRet sample, or `None` with a note.
pub(crate) fn sample() -> Option<PathBuf> {
    let sample = root().join("../shared/skillret-sample");
    if sample.join("skills/test.jsonl").is_file() {
        Some(sample)
    } else {
        eprintln!("skipping: {} is absent", sample.display());
        None
    }
}

/// An installed model directory, or `None` with a note naming the script.
pub(crate) fn model(name: &str, script: &str) -> Option<PathBuf> {
    let dir = root().join("models").join(name);
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!("skipping: {} is absent (run {script})", dir.display());
        None
    }
}

/// A JSON fixture of this crate's tests/data.
pub(crate) fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Rows of f32 vectors stored as `{"dim", "<key>": base64 of little-endian f32}`.
pub(crate) fn vectors(entry: &Value, key: &str) -> Vec<Vec<f32>> {
    let dim = entry["dim"].as_u64().unwrap() as usize;
    let bytes = base64_decode(entry[key].as_str().unwrap());
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

pub(crate) fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

/// Checks token ids against a fixture digest (`len`, `sha256` of the ids as
/// u32 little-endian, `head`, `tail`); the message says where they differ.
pub(crate) fn check_digest(ids: &[u32], want: &Value, what: &str) {
    let ints = |v: &Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let head = ints(&want["head"]);
    let tail = ints(&want["tail"]);
    assert_eq!(
        &ids[..head.len().min(ids.len())],
        &head[..],
        "{what}: first ids"
    );
    assert_eq!(
        ids.len() as u64,
        want["len"].as_u64().unwrap(),
        "{what}: length"
    );
    assert_eq!(
        &ids[ids.len() - tail.len()..],
        &tail[..],
        "{what}: last ids"
    );
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update(id.to_le_bytes());
    }
    let hex: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        hex,
        want["sha256"].as_str().unwrap(),
        "{what}: ids differ inside"
    );
}

/// Texts with their ids, in file order.
pub(crate) type Texts = Vec<(String, String)>;

/// The texts of the sample, in file order: skills (official recipe
/// `name | description | skill_md`) and queries, with their ids.
pub(crate) fn sample_texts(sample: &Path) -> (Texts, Texts) {
    let read = |file: &str| -> Vec<Value> {
        std::fs::read_to_string(sample.join(file))
            .unwrap()
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let field = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_owned();
    let skills = read("skills/test.jsonl")
        .iter()
        .map(|s| {
            let text = eval::document_text(
                &field(s, "name"),
                &field(s, "description"),
                &field(s, "skill_md"),
            );
            (field(s, "id"), text)
        })
        .collect();
    let queries = read("queries/test.jsonl")
        .iter()
        .map(|q| (field(q, "id"), field(q, "query")))
        .collect();
    (skills, queries)
}
