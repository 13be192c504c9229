//! Times the trainer on fixed synthetic batches and reports tokens/s and
//! peak RSS per step:
//!   cargo run --release -p train --example train_step -- models/all-MiniLM-L6-v2 cross 16 256 3
//! (model, cross | bi, sequences per step, tokens per sequence, steps). A
//! cross-encoder step holds sequences/4 queries of 1 positive + 3
//! negatives; a bi-encoder step sequences/2 (anchor, positive) pairs.

use std::path::PathBuf;

use candle_core::Device;
use embedder::Tokens;
use train::trainer::{Example, PairLoss, RunDir, RunSettings, StepLog};
use train::{Bert, Head, LoadOptions};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = PathBuf::from(
        args.get(1)
            .map_or("models/all-MiniLM-L6-v2", String::as_str),
    );
    let cross = args.get(2).is_none_or(|a| a == "cross");
    let batch: usize = args.get(3).map_or(Ok(16), |a| a.parse())?;
    let len: usize = args.get(4).map_or(Ok(256), |a| a.parse())?;
    let steps: usize = args.get(5).map_or(Ok(3), |a| a.parse())?;
    if std::env::var_os("NO_TUNE").is_none() {
        train::tune_allocator();
    }
    let head = if cross {
        Head::Classifier
    } else {
        Head::MeanPooling
    };
    let model = Bert::load(
        &dir,
        &LoadOptions {
            head,
            dropout: None,
            frozen_layers: 0,
            seed: 1,
        },
        &Device::Cpu,
    )?;
    let mut k = 0usize;
    let mut seq = || {
        k += 1;
        Tokens {
            ids: (0..len)
                .map(|i| 1000 + ((i * 7 + k * 13) % 20000) as u32)
                .collect(),
            types: vec![0; len],
        }
    };
    let per_step = if cross { batch / 4 } else { batch / 2 };
    let examples: Vec<Example> = (0..per_step * steps)
        .map(|_| {
            if cross {
                Example::Pairs {
                    pairs: (0..4).map(|_| seq()).collect(),
                    labels: vec![1.0, 0.0, 0.0, 0.0],
                }
            } else {
                Example::Triplet {
                    anchor: seq(),
                    positive: seq(),
                    negatives: Vec::new(),
                }
            }
        })
        .collect();
    let settings = RunSettings {
        lr: 1e-5,
        weight_decay: 0.01,
        warmup_ratio: 0.0,
        epochs: 1,
        batch_size: per_step,
        batch_tokens: usize::MAX,
        max_grad_norm: 1.0,
        scale: 20.0,
        seed: 1,
        loss: PairLoss::Bce,
    };
    let work = tempfile::tempdir()?;
    let run = RunDir {
        dir: work.path().to_path_buf(),
        fingerprint: "bench".to_owned(),
        base: dir.display().to_string(),
        checkpoint_every: 0,
    };
    train::trainer::train(&model, &examples, &settings, &run, &mut |s: &StepLog| {
        println!(
            "step {}: {:.2} s, {:.0} tokens/s, peak RSS {:.0} MiB",
            s.step,
            s.seconds,
            s.tokens as f64 / s.seconds,
            peak_rss_mib()
        );
    })?;
    Ok(())
}
