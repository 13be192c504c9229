//! Yes/no rerankers (Qwen3ForCausalLM) score as the official SkillRet
//! evaluation's `Qwen3RankModel` does on real (query, skill) pairs: the same
//! template token ids (with and without truncation; checked in the native f32 test) and P(yes) within 1e-5;
//! bad checkpoints are refused naming the file.
//!
//! Reference: tests/data/qwen3_reference.json, from
//! scripts/make_qwen3_fixture.py (its header names the versions). Model:
//! scripts/fetch-models.sh then scripts/make_qwen3_models.py (a TEST model,
//! random weights); texts: ../shared/skillret-sample.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::path::{Path, PathBuf};

use embedder::{Backend, Precision};
use reranker::{CrossEncoder, Error, RerankerKind, RerankerOptions};
use serde_json::Value;

fn qwen3() -> Option<PathBuf> {
    common::model(
        "test-qwen3-reranker",
        "scripts/fetch-models.sh && python3 scripts/make_qwen3_models.py",
    )
}

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/qwen3_reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The fixture's pairs as texts, checked against its ids.
fn pairs(fixture: &Value) -> Option<Vec<(String, String)>> {
    let sample = common::sample()?;
    let (skills, queries) = common::sample_texts(&sample);
    let n = fixture["pairs"]["count"].as_u64().unwrap() as usize;
    let pairs: Vec<(String, String)> = (0..n)
        .map(|k| {
            let (qid, q) = &queries[k % queries.len()];
            let (sid, s) = &skills[k];
            assert_eq!(fixture["query_ids"][k].as_str().unwrap(), qid);
            assert_eq!(fixture["skill_ids"][k].as_str().unwrap(), sid);
            (q.clone(), s.clone())
        })
        .collect();
    Some(pairs)
}

/// Worst |P(yes) difference| over the pairs `chosen` (those the run has) of each of the
/// fixture's runs; with `tokens`, after checking the token ids of every pair
/// of the run (the template does not depend on the engine: one test checks them).
fn worst_difference(
    backend: Backend,
    precision: Precision,
    chosen: std::ops::Range<usize>,
    tokens: bool,
) -> Option<f64> {
    let dir = qwen3()?;
    let fixture = fixture();
    let pairs = pairs(&fixture)?;
    let mut worst = 0.0f64;
    for run in fixture["runs"].as_array().unwrap() {
        let max_length = run["max_length"].as_u64().unwrap() as usize;
        let options = RerankerOptions::default()
            .with_max_length(max_length)
            .with_backend(backend)
            .with_precision(precision)
            .with_batch_tokens(16_384);
        let model = CrossEncoder::from_dir(&dir, options).unwrap();
        assert_eq!(model.kind(), RerankerKind::YesNo);
        assert_eq!(
            model.instruction(),
            Some(fixture["instruction"].as_str().unwrap())
        );
        let want: Vec<f64> = run["p_yes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap())
            .collect();
        if tokens {
            let tokens = model.tokenize(&pairs[..want.len()]).unwrap();
            for (i, (t, digest)) in tokens
                .iter()
                .zip(run["tokens"].as_array().unwrap())
                .enumerate()
            {
                common::check_digest(&t.ids, digest, &format!("pair {i} at {max_length}"));
            }
        }
        let chosen = chosen.start..chosen.end.min(want.len());
        let (want, pairs) = (&want[chosen.clone()], &pairs[chosen]);
        let got = model.score(pairs, &|_| {}).unwrap();
        for (g, w) in got.iter().zip(want) {
            worst = worst.max((f64::from(*g) - w).abs());
        }
        eprintln!(
            "{backend:?} {precision:?} ({}), max_length {max_length}: {} pairs, worst |ΔP(yes)| {worst:.2e}",
            model.device(),
            want.len()
        );
    }
    Some(worst)
}

#[test]
fn native_f32_equals_the_official_scoring_within_1e_5() {
    if let Some(worst) = worst_difference(Backend::Native, Precision::F32, 0..60, true) {
        assert!(worst <= 1e-5, "worst |ΔP(yes)| {worst}");
    }
}

#[test]
fn candle_f32_equals_the_official_scoring_within_1e_5() {
    // candle pads each batch to its longest pair, and its exact attention on the CPU is
    // quadratic in it: four pairs of 1,279 to 2,138 tokens at 8,192 (the first four, up to
    // 5,584, took 20 s here against 4; the native engine above runs them all).
    if let Some(worst) = worst_difference(Backend::Candle, Precision::F32, 4..8, false) {
        assert!(worst <= 1e-5, "worst |ΔP(yes)| {worst}");
    }
}

#[test]
fn native_bf16_stays_within_1e_2() {
    if let Some(worst) = worst_difference(Backend::Native, Precision::Bf16, 0..60, false) {
        assert!(worst <= 1e-2, "worst |ΔP(yes)| {worst}");
    }
}

#[test]
fn native_int8_stays_within_3e_2() {
    // Measured: 8.4e-3 (random test weights; query/key/value and down stay bf16).
    if let Some(worst) = worst_difference(Backend::Native, Precision::Int8, 0..60, false) {
        assert!(worst <= 3e-2, "worst |ΔP(yes)| {worst}");
    }
}

#[test]
fn the_template_and_the_length_rule() {
    let Some(dir) = qwen3() else { return };
    let model =
        CrossEncoder::from_dir(&dir, RerankerOptions::default().with_max_length(64)).unwrap();
    let tokens = model
        .tokenize(&[("q", "a very long document ".repeat(100))])
        .unwrap();
    // The whole input, template included, fits max_length; the suffix ends it.
    assert_eq!(tokens[0].ids.len(), 64);
    assert_eq!(
        &tokens[0].ids[55..],
        &[151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271]
    );
    // 39 prefix ids, starting `<|im_start|>system`.
    assert_eq!(&tokens[0].ids[..2], &[151644, 8948]);
    // Default length: the tokenizer's model_max_length (131072) capped at
    // the model's 40960 positions.
    let model = CrossEncoder::from_dir(&dir, RerankerOptions::default()).unwrap();
    assert_eq!(model.max_length(), 40960);
    let err = CrossEncoder::from_dir(&dir, RerankerOptions::default().with_max_length(40)).unwrap();
    let err = err.tokenize(&[("q", "d")]).unwrap_err();
    assert!(err.to_string().contains("template"), "{err}");
    // Another instruction changes the input.
    let other = CrossEncoder::from_dir(
        &dir,
        RerankerOptions::default().with_instruction("Is the document about cooking?"),
    )
    .unwrap();
    let pair = [("parse a pdf", "pdf | Read PDFs. | # PDF")];
    assert_ne!(
        other.tokenize(&pair).unwrap()[0].ids,
        model.tokenize(&pair).unwrap()[0].ids
    );
}

#[test]
fn a_tokenizer_without_yes_or_no_is_refused() {
    let Some(dir) = qwen3() else { return };
    let copy = tempfile::tempdir().unwrap();
    for name in ["config.json", "tokenizer_config.json"] {
        std::fs::copy(dir.join(name), copy.path().join(name)).unwrap();
    }
    std::os::unix::fs::symlink(
        dir.join("model.safetensors"),
        copy.path().join("model.safetensors"),
    )
    .unwrap();
    let mut tokenizer: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    // Drop "yes" from the vocabulary, and the merges that make it.
    tokenizer["model"]["vocab"]
        .as_object_mut()
        .unwrap()
        .remove("yes");
    let merges = tokenizer["model"]["merges"].as_array_mut().unwrap();
    merges.retain(|m| {
        let parts: Vec<&str> = match m {
            Value::String(s) => s.split(' ').collect(),
            Value::Array(a) => a.iter().map(|p| p.as_str().unwrap()).collect(),
            _ => Vec::new(),
        };
        parts.concat() != "yes" && !parts.contains(&"yes")
    });
    std::fs::write(copy.path().join("tokenizer.json"), tokenizer.to_string()).unwrap();
    let err = CrossEncoder::from_dir(copy.path(), RerankerOptions::default()).unwrap_err();
    assert!(matches!(err, Error::TokenizerMismatch { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("tokenizer.json") && text.contains("\"yes\""),
        "{text}"
    );
}
