//! A cross-encoder step larger than one pass (16 sequences) is accumulated
//! over passes of whole queries: its loss (and so its gradient, the same
//! weighted sum) equals the whole batch's, for BCE and for the listwise loss.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use candle_core::{Device, Tensor};
use embedder::{Encoder, EncoderOptions};
use train::loss::{binary_cross_entropy, listwise_softmax};
use train::trainer::{Example, PairLoss, RunDir, RunSettings, StepLog, train};
use train::{Batch, Bert, Head, LoadOptions};

const TEXTS: [&str; 6] = [
    "turn scanned invoices into a spreadsheet",
    "pdf-extract | Pull tables out of PDFs.",
    "cargo-release | Tag and publish crates.",
    "weather | Forecasts by city.",
    "git-blame | Who changed a line.",
    "image-resize | Resize images in bulk.",
];

#[test]
fn an_accumulated_step_has_the_whole_batchs_loss() {
    let Some(base) = common::model("test-tiny-bert") else {
        return;
    };
    let encoder = Encoder::from_dir(&base, &EncoderOptions::default(), Some(32)).unwrap();
    // 7 queries × 3 pairs = 21 sequences: passes of 15 and 6.
    let examples: Vec<Example> = (0..7)
        .map(|i| {
            let pairs: Vec<(&str, &str)> =
                (0..3).map(|k| (TEXTS[0], TEXTS[1 + (i + k) % 5])).collect();
            Example::Pairs {
                pairs: encoder.tokenize_pairs(&pairs).unwrap(),
                labels: vec![1.0, 0.0, if i % 2 == 0 { 1.0 } else { 0.0 }],
            }
        })
        .collect();
    let options = LoadOptions {
        head: Head::Classifier,
        dropout: Some(0.0),
        frozen_layers: 0,
        seed: 5,
    };
    for loss in [PairLoss::Bce, PairLoss::Listwise] {
        // The whole batch in one graph, with the model's initial weights.
        let model = Bert::load(&base, &options, &Device::Cpu).unwrap();
        let want = {
            let all: Vec<_> = examples
                .iter()
                .flat_map(|e| match e {
                    Example::Pairs { pairs, .. } => pairs.clone(),
                    Example::Triplet { .. } => unreachable!(),
                })
                .collect();
            let labels: Vec<f32> = examples
                .iter()
                .flat_map(|e| match e {
                    Example::Pairs { labels, .. } => labels.clone(),
                    Example::Triplet { .. } => unreachable!(),
                })
                .collect();
            let batch = Batch::new(&all, 0, &Device::Cpu).unwrap();
            let logits = model.logits(&batch, &mut None).unwrap();
            let value = match loss {
                PairLoss::Bce => {
                    binary_cross_entropy(&logits, &Tensor::new(labels, &Device::Cpu).unwrap())
                        .unwrap()
                }
                PairLoss::Listwise => {
                    let mut sum = 0f32;
                    for q in 0..7 {
                        let l = listwise_softmax(
                            &logits.narrow(0, q * 3, 3).unwrap(),
                            &Tensor::new(&labels[q * 3..q * 3 + 3], &Device::Cpu).unwrap(),
                        )
                        .unwrap();
                        sum += l.to_scalar::<f32>().unwrap();
                    }
                    Tensor::new(sum / 7.0, &Device::Cpu).unwrap()
                }
            };
            f64::from(value.to_scalar::<f32>().unwrap())
        };
        let settings = RunSettings {
            lr: 1e-4,
            weight_decay: 0.0,
            warmup_ratio: 0.0,
            epochs: 1,
            batch_size: 7,
            batch_tokens: usize::MAX,
            max_grad_norm: 1.0,
            scale: 20.0,
            seed: 1,
            loss,
        };
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir {
            dir: dir.path().to_path_buf(),
            fingerprint: "f".to_owned(),
            base: "b".to_owned(),
            checkpoint_every: 0,
        };
        let mut logged = Vec::new();
        train(&model, &examples, &settings, &run, &mut |s: &StepLog| {
            logged.push((s.loss, s.tokens));
        })
        .unwrap();
        assert_eq!(logged.len(), 1);
        let (got, tokens) = logged[0];
        assert!((got - want).abs() < 1e-5, "{loss:?}: {got} vs {want}");
        assert_eq!(tokens, examples.iter().map(Example::tokens).sum::<usize>());
    }
}
