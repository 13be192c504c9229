//! Times training steps of a BERT model on one fixed batch and reports
//! tokens/s and peak RSS: `cargo run --release -p train --example
//! train_step -- models/all-MiniLM-L6-v2 cross 16 256 3`.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{Device, Tensor};
use embedder::Tokens;
use train::loss::{binary_cross_entropy, multiple_negatives_ranking};
use train::optim::{AdamW, AdamWConfig};
use train::{Batch, Bert, Dropout, Head, LoadOptions};

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
    let device = Device::Cpu;
    let model = Bert::load(
        &dir,
        &LoadOptions {
            head,
            dropout: None,
            frozen_layers: 0,
            seed: 1,
        },
        &device,
    )?;
    let seqs: Vec<Tokens> = (0..batch)
        .map(|b| Tokens {
            ids: (0..len)
                .map(|i| 1000 + ((i * 7 + b * 13) % 20000) as u32)
                .collect(),
            types: vec![0; len],
        })
        .collect();
    let input = Batch::new(&seqs, 0, &device)?;
    let mut opt = AdamW::new(AdamWConfig::default(), model.params())?;
    let labels = Tensor::new(
        (0..batch).map(|i| (i % 2) as f32).collect::<Vec<_>>(),
        &device,
    )?;
    for step in 0..steps {
        let t = Instant::now();
        let mut dropout = Some(Dropout::for_step(1, step as u64));
        let loss = if cross {
            binary_cross_entropy(&model.logits(&input, &mut dropout)?, &labels)?
        } else {
            let e = model.embed(&input, &mut dropout)?;
            let half = batch / 2;
            multiple_negatives_ranking(&e.narrow(0, 0, half)?, &e.narrow(0, half, half)?, 20.0)?
        };
        let forward = t.elapsed().as_secs_f64();
        let grads = loss.backward()?;
        let backward = t.elapsed().as_secs_f64() - forward;
        opt.step(model.params(), &grads, 1e-5)?;
        let total = t.elapsed().as_secs_f64();
        println!(
            "step {step}: forward {forward:.2} s, backward {backward:.2} s, total {total:.2} s, {:.0} tokens/s, peak RSS {:.0} MiB",
            (batch * len) as f64 / total,
            peak_rss_mib()
        );
    }
    Ok(())
}
