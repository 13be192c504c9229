//! Every trainable tensor gets a non-zero gradient (candle's fused LayerNorm
//! and `softmax_last_dim` would cut it silently), frozen ones get none, and
//! dropout masks are a function of (seed, step).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use candle_core::{Device, Tensor};
use embedder::{Encoder, EncoderOptions};
use train::loss::{binary_cross_entropy, multiple_negatives_ranking};
use train::{Batch, Bert, Dropout, Head, LoadOptions};

const QUERIES: [&str; 2] = [
    "I keep a folder of scanned invoices and need the totals in a spreadsheet every month",
    "set up a release workflow that tags the repo and publishes the crate",
];
const SKILLS: [&str; 4] = [
    "pdf-extract | Pull tables and text out of PDF files. | # PDF\nUse when invoices arrive as PDFs.",
    "cargo-release | Tag and publish Rust crates. | # Release\nRuns cargo publish after tagging.",
    "weather | Current weather for a city. | # Weather",
    "git-blame | Who changed a line and when. | # Blame",
];

fn loss(model: &Bert, dir: &std::path::Path, dropout: &mut Option<Dropout>) -> Tensor {
    let encoder = Encoder::from_dir(dir, &EncoderOptions::default(), Some(64)).unwrap();
    let device = model.device();
    match model.head() {
        Head::MeanPooling => {
            let q = Batch::new(&encoder.tokenize(&QUERIES).unwrap(), 0, device).unwrap();
            let d = Batch::new(&encoder.tokenize(&SKILLS).unwrap(), 0, device).unwrap();
            let a = model.embed(&q, dropout).unwrap();
            let c = model.embed(&d, dropout).unwrap();
            multiple_negatives_ranking(&a, &c, 20.0).unwrap()
        }
        Head::Classifier => {
            let pairs: Vec<(&str, &str)> = QUERIES
                .iter()
                .flat_map(|q| SKILLS.iter().map(move |s| (*q, *s)))
                .collect();
            let batch = Batch::new(&encoder.tokenize_pairs(&pairs).unwrap(), 0, device).unwrap();
            let labels = Tensor::new(&[1f32, 0., 0., 0., 0., 1., 0., 0.], device).unwrap();
            binary_cross_entropy(&model.logits(&batch, dropout).unwrap(), &labels).unwrap()
        }
    }
}

/// Names of the trainable tensors without a non-zero gradient, and of the
/// frozen ones with one.
fn check(name: &str, head: Head, frozen_layers: usize) -> Option<(Vec<String>, Vec<String>)> {
    let dir = common::model(name)?;
    let options = LoadOptions {
        head,
        dropout: None,
        frozen_layers,
        seed: 7,
    };
    let model = Bert::load(&dir, &options, &Device::Cpu).unwrap();
    let mut dropout = Some(Dropout::for_step(7, 0));
    let grads = loss(&model, &dir, &mut dropout).backward().unwrap();
    let (mut without, mut leaking) = (Vec::new(), Vec::new());
    for p in model.params() {
        let norm = grads.get(p.var.as_tensor()).map(|g| {
            g.sqr()
                .unwrap()
                .sum_all()
                .unwrap()
                .to_scalar::<f32>()
                .unwrap()
        });
        match (p.trainable, norm) {
            (true, Some(n)) if n > 0.0 => {}
            (true, _) => without.push(p.name.clone()),
            (false, Some(_)) => leaking.push(p.name.clone()),
            (false, None) => {}
        }
    }
    Some((without, leaking))
}

#[test]
fn every_tensor_of_a_bi_encoder_gets_a_gradient() {
    if let Some((without, leaking)) = check("all-MiniLM-L6-v2", Head::MeanPooling, 0) {
        assert!(without.is_empty(), "no gradient: {without:?}");
        assert!(leaking.is_empty());
    }
}

#[test]
fn every_tensor_of_a_new_cross_encoder_gets_a_gradient() {
    // all-MiniLM-L6-v2 has a pooler but no classifier: the head starts fresh.
    if let Some((without, leaking)) = check("all-MiniLM-L6-v2", Head::Classifier, 0) {
        assert!(without.is_empty(), "no gradient: {without:?}");
        assert!(leaking.is_empty());
    }
}

#[test]
fn frozen_layers_get_no_gradient_and_the_rest_do() {
    if let Some((without, leaking)) = check("test-tiny-bert", Head::Classifier, 1) {
        assert!(without.is_empty(), "no gradient: {without:?}");
        assert!(
            leaking.is_empty(),
            "frozen but with a gradient: {leaking:?}"
        );
    }
    let Some(dir) = common::model("test-tiny-bert") else {
        return;
    };
    let options = LoadOptions {
        head: Head::Classifier,
        dropout: None,
        frozen_layers: 1,
        seed: 0,
    };
    let model = Bert::load(&dir, &options, &Device::Cpu).unwrap();
    let frozen: Vec<&str> = model
        .params()
        .iter()
        .filter(|p| !p.trainable)
        .map(|p| p.name.as_str())
        .collect();
    assert!(frozen.contains(&"embeddings.word_embeddings.weight"));
    assert!(frozen.contains(&"encoder.layer.0.output.LayerNorm.bias"));
    assert!(!frozen.iter().any(|n| n.starts_with("encoder.layer.1.")));
    let too_many = LoadOptions {
        frozen_layers: 3,
        ..options
    };
    let err = Bert::load(&dir, &too_many, &Device::Cpu).unwrap_err();
    assert!(
        err.to_string()
            .contains("frozen_layers 3 exceeds the model's 2 layers"),
        "{err}"
    );
}

#[test]
fn dropout_masks_depend_on_seed_and_step_only() {
    let Some(dir) = common::model("test-tiny-bert") else {
        return;
    };
    let options = LoadOptions {
        head: Head::Classifier,
        dropout: Some(0.1),
        frozen_layers: 0,
        seed: 0,
    };
    let model = Bert::load(&dir, &options, &Device::Cpu).unwrap();
    let value = |dropout: Option<Dropout>| {
        let mut dropout = dropout;
        loss(&model, &dir, &mut dropout).to_scalar::<f32>().unwrap()
    };
    let a = value(Some(Dropout::for_step(1, 5)));
    assert_eq!(a.to_bits(), value(Some(Dropout::for_step(1, 5))).to_bits());
    assert_ne!(a, value(Some(Dropout::for_step(1, 6))));
    assert_ne!(a, value(Some(Dropout::for_step(2, 5))));
    assert_ne!(a, value(None));
}
