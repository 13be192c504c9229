//! Three AdamW steps of each objective against PyTorch
//! (`tests/data/parity.json`, made by `scripts/make_train_fixture.py` on
//! `models/test-tiny-bert`): the same losses (|Δ| ≤ 1e-5) and the same
//! weights after the third step (|Δ| ≤ 1e-4 of the tensor's largest
//! value), and the same clipped gradient norms.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use candle_core::{Device, Tensor};
use embedder::Tokens;
use serde_json::Value;
use train::loss::{binary_cross_entropy, multiple_negatives_ranking};
use train::{AdamW, AdamWConfig, Batch, Bert, Head, LoadOptions, Schedule, clip_grad_norm};

fn fixture() -> Value {
    let path = common::root().join("crates/train/tests/data/parity.json");
    serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap()
}

fn floats(b64: &Value) -> Vec<f32> {
    let bytes = base64_decode(b64.as_str().unwrap());
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Standard base64 (the fixture's encoding), without a dependency.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    for chunk in s.as_bytes().chunks(4) {
        let pad = chunk.iter().filter(|&&c| c == b'=').count();
        let mut n = 0u32;
        for &c in chunk {
            n = (n << 6) | if c == b'=' { 0 } else { value(c) };
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..4 - pad]);
    }
    out
}

fn tokens(rows: &Value, types: Option<&Value>) -> Vec<Tokens> {
    rows.as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, row)| Tokens {
            ids: row
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect(),
            types: types.map_or_else(Vec::new, |t| {
                t[i].as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_u64().unwrap() as u32)
                    .collect()
            }),
        })
        .collect()
}

/// Runs the fixture's steps of `objective`; returns (worst loss |Δ|, worst
/// relative weight |Δ|, the tensor where it is).
fn run(objective: &str) -> Option<(f64, f64, String)> {
    let dir = common::model("test-tiny-bert")?;
    let fixture = fixture();
    let config = &fixture["config"];
    let head = if objective == "bce" {
        Head::Classifier
    } else {
        Head::MeanPooling
    };
    let device = Device::Cpu;
    let options = LoadOptions {
        head,
        dropout: Some(0.0),
        frozen_layers: 0,
        seed: 0,
    };
    let model = Bert::load(&dir, &options, &device).unwrap();
    let mut optimizer = AdamW::new(
        AdamWConfig {
            lr: config["lr"].as_f64().unwrap(),
            weight_decay: config["weight_decay"].as_f64().unwrap(),
            ..AdamWConfig::default()
        },
        model.params(),
    )
    .unwrap();
    let schedule = Schedule {
        lr: config["lr"].as_f64().unwrap(),
        warmup: config["warmup"].as_u64().unwrap(),
        total: config["steps"].as_u64().unwrap(),
    };
    let max_norm = config["max_norm"].as_f64().unwrap();
    let pad = 0;
    let mut worst_loss = 0.0f64;
    for (k, step) in fixture[objective]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        let loss = if objective == "bce" {
            let batch =
                Batch::new(&tokens(&step["ids"], Some(&step["types"])), pad, &device).unwrap();
            let labels: Vec<f32> = step["labels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            let labels = Tensor::new(labels, &device).unwrap();
            binary_cross_entropy(&model.logits(&batch, &mut None).unwrap(), &labels).unwrap()
        } else {
            let embed = |key: &str| {
                let batch = Batch::new(&tokens(&step[key], None), pad, &device).unwrap();
                model.embed(&batch, &mut None).unwrap()
            };
            let anchors = embed("anchors");
            let candidates = Tensor::cat(&[embed("positives"), embed("negatives")], 0).unwrap();
            let scale = config["scale"].as_f64().unwrap();
            multiple_negatives_ranking(&anchors, &candidates, scale).unwrap()
        };
        let value = f64::from(loss.to_scalar::<f32>().unwrap());
        let want = step["loss"].as_f64().unwrap();
        worst_loss = worst_loss.max((value - want).abs());
        let mut grads = loss.backward().unwrap();
        let norm = clip_grad_norm(model.params(), &mut grads, max_norm).unwrap();
        let want_norm = step["grad_norm"].as_f64().unwrap();
        assert!(
            (norm - want_norm).abs() <= 1e-4 * want_norm.max(1.0),
            "{objective} step {k}: gradient norm {norm} vs PyTorch {want_norm}"
        );
        optimizer
            .step(model.params(), &grads, schedule.lr(k as u64))
            .unwrap();
    }
    let mut worst = (0.0f64, String::new());
    let want = fixture[objective]["weights"].as_object().unwrap();
    let trained: Vec<_> = model.params().iter().filter(|p| p.trainable).collect();
    assert_eq!(
        want.len(),
        trained.len(),
        "{objective}: PyTorch trains {} tensors, this crate {}",
        want.len(),
        trained.len()
    );
    for param in trained {
        let reference = &want
            .get(&param.name)
            .unwrap_or_else(|| panic!("{objective}: PyTorch has no `{}`", param.name));
        let shape: Vec<usize> = reference["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(param.var.dims(), shape, "{}", param.name);
        let mut got = param.var.as_tensor().clone();
        if let Some(rows) = reference.get("rows") {
            let rows: Vec<u32> = rows
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            got = got
                .index_select(&Tensor::new(rows, &device).unwrap(), 0)
                .unwrap();
        }
        let got = got.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let expected = floats(&reference["values"]);
        assert_eq!(got.len(), expected.len(), "{}", param.name);
        // Relative to the tensor's largest value: elements near zero would
        // turn rounding noise into huge ratios.
        let scale = expected.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        let mut tensor_worst = 0f64;
        for (g, e) in got.iter().zip(&expected) {
            tensor_worst = tensor_worst.max(f64::from((g - e).abs() / scale));
        }
        if param.name.ends_with("attention.self.key.bias") {
            // Its gradient is zero in exact arithmetic (a key bias adds the
            // same q·b to every score of a query, which the softmax cancels):
            // both sides' gradients are rounding noise near 1e-10, which Adam
            // turns into steps of about lr·g/(|g| + ε) ≈ lr/100. Bound the
            // drift instead of comparing noise.
            let drift = got
                .iter()
                .zip(&expected)
                .fold(0f32, |m, (g, e)| m.max((g - e).abs()));
            let lr = config["lr"].as_f64().unwrap() as f32;
            assert!(drift <= lr / 10.0, "{}: |Δ| {drift}", param.name);
            continue;
        }
        if tensor_worst > worst.0 {
            worst = (tensor_worst, param.name.clone());
        }
    }
    Some((worst_loss, worst.0, worst.1))
}

#[test]
fn mnrl_steps_equal_pytorch() {
    if let Some((loss, weights, at)) = run("mnrl") {
        eprintln!(
            "mnrl: worst loss |Δ| {loss:.3e}, worst relative weight |Δ| {weights:.3e} ({at})"
        );
        assert!(loss <= 1e-5, "loss |Δ| {loss}");
        assert!(weights <= 1e-4, "weight |Δ| {weights} at {at}");
    }
}

#[test]
fn bce_steps_equal_pytorch() {
    if let Some((loss, weights, at)) = run("bce") {
        eprintln!("bce: worst loss |Δ| {loss:.3e}, worst relative weight |Δ| {weights:.3e} ({at})");
        assert!(loss <= 1e-5, "loss |Δ| {loss}");
        assert!(weights <= 1e-4, "weight |Δ| {weights} at {at}");
    }
}
