//! A run interrupted after a checkpoint resumes to exactly the weights of an
//! uninterrupted run; the same seed gives the same weights; a checkpoint of
//! another model is refused naming its file.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use candle_core::Device;
use embedder::{Encoder, EncoderOptions};
use train::trainer::{Example, RunDir, RunSettings, train};
use train::{Bert, Head, LoadOptions};

const QUERIES: [&str; 6] = [
    "turn scanned invoices into a spreadsheet",
    "publish a crate after tagging a release",
    "what's the weather in Lisbon tomorrow",
    "who changed this line of the config",
    "resize every photo in a folder",
    "translate the README into French",
];
const SKILLS: [&str; 6] = [
    "pdf-extract | Pull tables out of PDFs. | # PDF",
    "cargo-release | Tag and publish crates. | # Release",
    "weather | Forecasts by city. | # Weather",
    "git-blame | Who changed a line. | # Blame",
    "image-resize | Resize images in bulk. | # Images",
    "translate | Translate documents. | # Translate",
];

fn examples(base: &std::path::Path, head: Head) -> Vec<Example> {
    let encoder = Encoder::from_dir(base, &EncoderOptions::default(), Some(32)).unwrap();
    (0..QUERIES.len())
        .map(|i| {
            let j = (i + 1) % SKILLS.len();
            match head {
                Head::MeanPooling => {
                    let t = encoder
                        .tokenize(&[QUERIES[i], SKILLS[i], SKILLS[j]])
                        .unwrap();
                    Example::Triplet {
                        anchor: t[0].clone(),
                        positive: t[1].clone(),
                        negatives: vec![t[2].clone()],
                    }
                }
                Head::Classifier => Example::Pairs {
                    pairs: encoder
                        .tokenize_pairs(&[(QUERIES[i], SKILLS[i]), (QUERIES[i], SKILLS[j])])
                        .unwrap(),
                    labels: vec![1.0, 0.0],
                },
            }
        })
        .collect()
}

fn run_dir(dir: &std::path::Path, fingerprint: &str, base: &str, every: u64) -> RunDir {
    RunDir {
        dir: dir.to_path_buf(),
        fingerprint: fingerprint.to_owned(),
        base: base.to_owned(),
        checkpoint_every: every,
    }
}

fn settings() -> RunSettings {
    RunSettings {
        lr: 1e-3,
        weight_decay: 0.01,
        warmup_ratio: 0.1,
        epochs: 2,
        batch_size: 2,
        batch_tokens: 4096,
        max_grad_norm: 1.0,
        scale: 20.0,
        seed: 11,
        loss: train::trainer::PairLoss::Bce,
    }
}

fn load(base: &std::path::Path, head: Head) -> Bert {
    let options = LoadOptions {
        head,
        dropout: None,
        frozen_layers: 0,
        seed: 5,
    };
    Bert::load(base, &options, &Device::Cpu).unwrap()
}

fn weights(model: &Bert) -> Vec<Vec<u32>> {
    model
        .params()
        .iter()
        .map(|p| {
            let v = p
                .var
                .as_tensor()
                .flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap();
            v.iter().map(|x| x.to_bits()).collect()
        })
        .collect()
}

fn full_run(head: Head) -> Option<(Vec<Vec<u32>>, Vec<String>)> {
    let base = common::model("test-tiny-bert")?;
    let model = load(&base, head);
    let examples = examples(&base, head);
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let summary = train(
        &model,
        &examples,
        &settings(),
        &run_dir(&run, "fp", "tiny", 0),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(summary.steps, 6);
    let log = std::fs::read_to_string(run.join("train_log.jsonl")).unwrap();
    Some((weights(&model), log.lines().map(str::to_owned).collect()))
}

#[test]
fn an_interrupted_run_resumes_to_the_same_weights() {
    for head in [Head::MeanPooling, Head::Classifier] {
        let Some((want, want_log)) = full_run(head) else {
            return;
        };
        let base = common::model("test-tiny-bert").unwrap();
        let examples = examples(&base, head);
        let tmp = tempfile::tempdir().unwrap();
        let run = tmp.path().join("run");
        // Killed during step 4 (a checkpoint was written after step 2).
        let model = load(&base, head);
        let interrupted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            train(
                &model,
                &examples,
                &settings(),
                &run_dir(&run, "fp", "tiny", 2),
                &mut |s| {
                    assert!(s.step < 4, "killed");
                },
            )
        }));
        assert!(interrupted.is_err());
        let fresh = load(&base, head);
        let summary = train(
            &fresh,
            &examples,
            &settings(),
            &run_dir(&run, "fp", "tiny", 2),
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(summary.resumed_from, 2, "{head:?}");
        assert_eq!(weights(&fresh), want, "{head:?}: resumed weights differ");
        // The log holds each step once; the timing field aside, as uninterrupted.
        let strip = |l: &String| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("seconds");
            v
        };
        let log: Vec<String> = std::fs::read_to_string(run.join("train_log.jsonl"))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect();
        assert_eq!(
            log.iter().map(strip).collect::<Vec<_>>(),
            want_log.iter().map(strip).collect::<Vec<_>>()
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_weights_and_another_seed_does_not() {
    let Some((a, _)) = full_run(Head::Classifier) else {
        return;
    };
    let (b, _) = full_run(Head::Classifier).unwrap();
    assert_eq!(a, b);
    let base = common::model("test-tiny-bert").unwrap();
    let model = load(&base, Head::Classifier);
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let other = RunSettings {
        seed: 12,
        ..settings()
    };
    train(
        &model,
        &examples(&base, Head::Classifier),
        &other,
        &run_dir(&run, "fp", "tiny", 0),
        &mut |_| {},
    )
    .unwrap();
    assert_ne!(weights(&model), a);
}

#[test]
fn a_checkpoint_of_another_model_is_refused() {
    let Some(base) = common::model("test-tiny-bert") else {
        return;
    };
    let examples = examples(&base, Head::Classifier);
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let model = load(&base, Head::Classifier);
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        train(
            &model,
            &examples,
            &settings(),
            &run_dir(&run, "fp-a", "model-a", 2),
            &mut |s| {
                assert!(s.step < 3, "killed");
            },
        )
    }));
    let err = train(
        &model,
        &examples,
        &settings(),
        &run_dir(&run, "fp-b", "model-b", 2),
        &mut |_| {},
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("state.json") && text.contains("another model"),
        "{text}"
    );
    let err = train(
        &model,
        &examples,
        &settings(),
        &run_dir(&run, "fp-c", "model-a", 2),
        &mut |_| {},
    )
    .unwrap_err();
    assert!(err.to_string().contains("another configuration"), "{err}");
}
