//! A trained model, saved, loads back in this project's embedder and
//! reranker (and, where Python has sentence-transformers, in
//! sentence-transformers and transformers) and scores as the training graph
//! does.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::path::Path;
use std::process::{Command, Stdio};

use candle_core::{Device, Tensor};
use embedder::{EmbedderOptions, Encoder, EncoderOptions, Kind, LocalEmbedder};
use reranker::{CrossEncoder, RerankerOptions};
use serde_json::{Value, json};
use train::loss::{binary_cross_entropy, multiple_negatives_ranking};
use train::save::save_model;
use train::{AdamW, AdamWConfig, Batch, Bert, Head, LoadOptions};

const TEXTS: [&str; 4] = [
    "convert my scanned invoices into a spreadsheet",
    "pdf-extract | Pull tables and text out of PDF files. | # PDF",
    "publish the crate after tagging a release",
    "cargo-release | Tag and publish Rust crates. | # Release",
];

/// One large step so that the saved weights differ from the base's.
fn trained(base: &Path, head: Head) -> (Bert, Encoder) {
    let device = Device::Cpu;
    let options = LoadOptions {
        head,
        dropout: Some(0.0),
        frozen_layers: 0,
        seed: 3,
    };
    let model = Bert::load(base, &options, &device).unwrap();
    let encoder = Encoder::from_dir(base, &EncoderOptions::default(), Some(64)).unwrap();
    let loss = match head {
        Head::MeanPooling => {
            let a = Batch::new(
                &encoder.tokenize(&[TEXTS[0], TEXTS[2]]).unwrap(),
                0,
                &device,
            )
            .unwrap();
            let c = Batch::new(
                &encoder.tokenize(&[TEXTS[1], TEXTS[3]]).unwrap(),
                0,
                &device,
            )
            .unwrap();
            let (a, c) = (
                model.embed(&a, &mut None).unwrap(),
                model.embed(&c, &mut None).unwrap(),
            );
            multiple_negatives_ranking(&a, &c, 20.0).unwrap()
        }
        Head::Classifier => {
            let pairs = [
                (TEXTS[0], TEXTS[1]),
                (TEXTS[0], TEXTS[3]),
                (TEXTS[2], TEXTS[3]),
            ];
            let batch = Batch::new(&encoder.tokenize_pairs(&pairs).unwrap(), 0, &device).unwrap();
            let labels = Tensor::new(&[1f32, 0., 1.], &device).unwrap();
            binary_cross_entropy(&model.logits(&batch, &mut None).unwrap(), &labels).unwrap()
        }
    };
    let config = AdamWConfig {
        lr: 1e-2,
        ..AdamWConfig::default()
    };
    let mut optimizer = AdamW::new(config, model.params()).unwrap();
    optimizer
        .step(model.params(), &loss.backward().unwrap(), 1e-2)
        .unwrap();
    (model, encoder)
}

/// sentence-transformers' view of `dir`, or `None` where Python lacks it.
fn python(kind: &str, dir: &Path, input: &Value) -> Option<Vec<Value>> {
    // Found, not imported (importing them takes seconds; the check below does).
    let has = Command::new("python3")
        .args([
            "-c",
            "import importlib.util as u, sys; \
             sys.exit(not all(u.find_spec(m) for m in ('sentence_transformers', 'torch')))",
        ])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has {
        eprintln!("skipped the Python check: python3 without sentence-transformers and torch");
        return None;
    }
    let mut child = Command::new("python3")
        .arg(common::root().join("scripts/check_trained_model.py"))
        .arg(kind)
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{kind} checked with {}", value["versions"]);
    Some(value["values"].as_array().unwrap().clone())
}

#[test]
fn a_saved_bi_encoder_embeds_as_it_trained() {
    let Some(base) = common::model("test-tiny-bert") else {
        return;
    };
    let (model, encoder) = trained(&base, Head::MeanPooling);
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("bi");
    save_model(&model, &base, &dest, 64, &[("README.md", "test\n")]).unwrap();
    let batch = Batch::new(&encoder.tokenize(&TEXTS).unwrap(), 0, &Device::Cpu).unwrap();
    let want = model
        .embed(&batch, &mut None)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let loaded = LocalEmbedder::from_dir(&dest, EmbedderOptions::default()).unwrap();
    assert_eq!(loaded.max_length(), 64);
    let got = loaded.embed(&TEXTS, Kind::Document).unwrap();
    let base_model = LocalEmbedder::from_dir(&base, EmbedderOptions::default()).unwrap();
    let before = base_model.embed(&TEXTS, Kind::Document).unwrap();
    let mut moved = 0f32;
    for (i, w) in want.iter().enumerate() {
        for ((g, w), b) in got.row(i).iter().zip(w).zip(before.row(i)) {
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "text {i}: {g} vs {w}"
            );
            moved = moved.max((w - b).abs());
        }
    }
    assert!(moved > 1e-3, "the saved model equals its base");
    if let Some(values) = python("bi-encoder", &dest, &json!(TEXTS)) {
        for (i, row) in values.iter().enumerate() {
            for (g, w) in row.as_array().unwrap().iter().zip(&want[i]) {
                let g = g.as_f64().unwrap() as f32;
                assert!(
                    (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                    "python text {i}: {g} vs {w}"
                );
            }
        }
    }
}

#[test]
fn a_saved_cross_encoder_scores_as_it_trained() {
    let Some(base) = common::model("test-tiny-bert") else {
        return;
    };
    let (model, encoder) = trained(&base, Head::Classifier);
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("cross");
    save_model(&model, &base, &dest, 64, &[("README.md", "test\n")]).unwrap();
    let pairs: Vec<(&str, &str)> = [(0, 1), (0, 3), (2, 1), (2, 3)]
        .iter()
        .map(|&(q, d)| (TEXTS[q], TEXTS[d]))
        .collect();
    let batch = Batch::new(&encoder.tokenize_pairs(&pairs).unwrap(), 0, &Device::Cpu).unwrap();
    let want = model
        .logits(&batch, &mut None)
        .unwrap()
        .to_vec1::<f32>()
        .unwrap();
    let loaded = CrossEncoder::from_dir(&dest, RerankerOptions::default()).unwrap();
    let got = loaded.logits(&pairs, &|_| {}).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-4 * w.abs().max(1.0), "{g} vs {w}");
    }
    let input: Vec<[&str; 2]> = pairs.iter().map(|(q, d)| [*q, *d]).collect();
    if let Some(values) = python("cross-encoder", &dest, &json!(input)) {
        for (g, w) in values.iter().zip(&want) {
            let g = g.as_f64().unwrap() as f32;
            assert!(
                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                "python: {g} vs {w}"
            );
        }
    }
    // Nothing but the model is left beside it.
    let names: Vec<String> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["cross"]);
}
