//! The training loop: a deterministic plan of batches (seeded shuffles),
//! AdamW steps with warm-up and decay, gradient clipping, a JSON line per
//! step, and checkpoints written atomically every N steps from which a
//! killed run resumes to the same weights as an uninterrupted one.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::{Device, Tensor};
use embedder::Tokens;
use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::bert::{Batch, Bert, Dropout, Head};
use crate::error::{Error, Result};
use crate::loss::{binary_cross_entropy, listwise_softmax, multiple_negatives_ranking};
use crate::optim::{AdamW, AdamWConfig, Schedule, clip_grad_norm};
use crate::save::{write_dir, write_safetensors};

/// One training example, tokenised.
#[derive(Debug, Clone, PartialEq)]
pub enum Example {
    /// Bi-encoder: an anchor, its positive and hard negatives (each alone).
    Triplet {
        /// The query.
        anchor: Tokens,
        /// A relevant document.
        positive: Tokens,
        /// Irrelevant documents that a first stage ranks high.
        negatives: Vec<Tokens>,
    },
    /// Cross-encoder: (query, document) pairs, tokenised together, and
    /// their labels (1 relevant, 0 not).
    Pairs {
        /// The pairs.
        pairs: Vec<Tokens>,
        /// One label per pair.
        labels: Vec<f32>,
    },
}

impl Example {
    /// Tokens of the example (its sequences, without padding).
    pub fn tokens(&self) -> usize {
        match self {
            Self::Triplet {
                anchor,
                positive,
                negatives,
            } => {
                anchor.ids.len()
                    + positive.ids.len()
                    + negatives.iter().map(|t| t.ids.len()).sum::<usize>()
            }
            Self::Pairs { pairs, .. } => pairs.iter().map(|p| p.ids.len()).sum(),
        }
    }

    fn longest(&self) -> usize {
        match self {
            Self::Triplet {
                anchor,
                positive,
                negatives,
            } => std::iter::once(anchor)
                .chain(std::iter::once(positive))
                .chain(negatives)
                .map(|t| t.ids.len())
                .max()
                .unwrap_or(0),
            Self::Pairs { pairs, .. } => pairs.iter().map(|p| p.ids.len()).max().unwrap_or(0),
        }
    }

    fn sequences(&self) -> usize {
        match self {
            Self::Triplet { negatives, .. } => 2 + negatives.len(),
            Self::Pairs { pairs, .. } => pairs.len(),
        }
    }
}

/// Settings of a run that decide its result (anything else, such as where
/// it is written or how often it is checkpointed, does not).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW weight decay.
    pub weight_decay: f64,
    /// Share of the steps spent warming up.
    pub warmup_ratio: f64,
    /// Passes over the examples.
    pub epochs: usize,
    /// Examples per step at most.
    pub batch_size: usize,
    /// Padded tokens per step at most (sequences × longest).
    pub batch_tokens: usize,
    /// Gradient-norm clip.
    pub max_grad_norm: f64,
    /// MNRL similarity scale.
    pub scale: f64,
    /// Seed of shuffles and dropout.
    pub seed: u64,
    /// The cross-encoder's objective (a bi-encoder always uses MNRL).
    #[serde(default)]
    pub loss: PairLoss,
}

/// How a cross-encoder learns from a query's labelled candidates.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PairLoss {
    /// Binary cross-entropy of each (query, skill) pair.
    #[default]
    Bce,
    /// Softmax cross-entropy over each query's list (positives against its
    /// hard negatives).
    Listwise,
}

/// One step's record (a line of `train_log.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// 1-based step.
    pub step: u64,
    /// Steps of the run.
    pub steps: u64,
    /// Epoch of the step (0-based).
    pub epoch: usize,
    /// Loss of the batch.
    pub loss: f64,
    /// Learning rate used.
    pub lr: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Tokens of the batch (padding excluded).
    pub tokens: usize,
    /// Seconds the step took.
    pub seconds: f64,
}

/// What a run did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Steps of the run.
    pub steps: u64,
    /// The step it resumed from (0 if it started fresh).
    pub resumed_from: u64,
    /// Mean loss of the first and last tenth of the steps run here.
    pub first_loss: f64,
    /// See `first_loss`.
    pub last_loss: f64,
    /// Tokens per second over the steps run here.
    pub tokens_per_second: f64,
    /// Seconds spent in steps here.
    pub seconds: f64,
}

/// The batches of every epoch, as example indices: each epoch a seeded
/// shuffle, cut greedily so that no batch exceeds `batch_size` examples or
/// `batch_tokens` padded tokens.
pub fn plan(examples: &[Example], settings: &RunSettings) -> Result<Vec<(usize, Vec<usize>)>> {
    if examples.is_empty() {
        return Err(Error::Invalid("no training examples".to_owned()));
    }
    if settings.batch_size == 0 || settings.epochs == 0 {
        return Err(Error::Invalid(
            "batch_size and epochs must be positive".to_owned(),
        ));
    }
    let mut batches = Vec::new();
    for epoch in 0..settings.epochs {
        let mut order: Vec<usize> = (0..examples.len()).collect();
        let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
        rng.set_stream(1_000_000 + epoch as u64);
        order.shuffle(&mut rng);
        let mut current: Vec<usize> = Vec::new();
        let (mut longest, mut sequences) = (0usize, 0usize);
        for i in order {
            let e = &examples[i];
            let (l, s) = (longest.max(e.longest()), sequences + e.sequences());
            if !current.is_empty()
                && (current.len() == settings.batch_size || l * s > settings.batch_tokens)
            {
                batches.push((epoch, std::mem::take(&mut current)));
                (longest, sequences) = (e.longest(), e.sequences());
            } else {
                (longest, sequences) = (l, s);
            }
            if e.longest() * e.sequences() > settings.batch_tokens {
                return Err(Error::Invalid(format!(
                    "one example alone ({} sequences of up to {} tokens) exceeds batch_tokens {}",
                    e.sequences(),
                    e.longest(),
                    settings.batch_tokens
                )));
            }
            current.push(i);
        }
        if !current.is_empty() {
            batches.push((epoch, current));
        }
    }
    Ok(batches)
}

/// Where a run keeps its checkpoints and log, and what identifies it.
#[derive(Debug, Clone)]
pub struct RunDir {
    /// The folder of checkpoints and `train_log.jsonl`.
    pub dir: PathBuf,
    /// Identifies the base model, the examples and the settings: a
    /// checkpoint made under another fingerprint is refused.
    pub fingerprint: String,
    /// The base model's name, for messages.
    pub base: String,
    /// Write a checkpoint every this many steps (0: never).
    pub checkpoint_every: u64,
}

#[derive(Debug, Serialize, Deserialize)]
struct CheckpointState {
    step: u64,
    steps: u64,
    /// Identifies the base model and everything that decides the weights.
    fingerprint: String,
    /// The base model, for the error message.
    base: String,
}

impl RunDir {
    fn checkpoints(&self) -> PathBuf {
        self.dir.join("checkpoints")
    }

    /// The log of the run.
    pub fn log(&self) -> PathBuf {
        self.dir.join("train_log.jsonl")
    }

    /// The latest complete checkpoint's folder, if any.
    fn latest(&self) -> Result<Option<PathBuf>> {
        let dir = self.checkpoints();
        if !dir.is_dir() {
            return Ok(None);
        }
        let mut best: Option<(u64, PathBuf)> = None;
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(step) = name
                .strip_prefix("step-")
                .and_then(|s| s.parse::<u64>().ok())
                && best.as_ref().is_none_or(|(b, _)| step > *b)
            {
                best = Some((step, entry.path()));
            }
        }
        Ok(best.map(|(_, p)| p))
    }
}

/// Runs the plan on `model`, resuming from the latest checkpoint of `run`
/// when there is one; `on_step` sees every step (progress display).
pub fn train(
    model: &Bert,
    examples: &[Example],
    settings: &RunSettings,
    run: &RunDir,
    on_step: &mut dyn FnMut(&StepLog),
) -> Result<Summary> {
    let (fingerprint, base_name, checkpoint_every) = (
        run.fingerprint.as_str(),
        run.base.as_str(),
        run.checkpoint_every,
    );
    let batches = plan(examples, settings)?;
    let steps = batches.len() as u64;
    let schedule = Schedule {
        lr: settings.lr,
        warmup: (settings.warmup_ratio * steps as f64).ceil() as u64,
        total: steps,
    };
    let mut optimizer = AdamW::new(
        AdamWConfig {
            lr: settings.lr,
            weight_decay: settings.weight_decay,
            ..AdamWConfig::default()
        },
        model.params(),
    )?;
    std::fs::create_dir_all(&run.dir).map_err(|e| Error::io(&run.dir, e))?;
    let mut start = 0u64;
    if let Some(checkpoint) = run.latest()? {
        start = restore(
            model,
            &mut optimizer,
            &checkpoint,
            fingerprint,
            base_name,
            steps,
        )?;
    }
    truncate_log(&run.log(), start)?;
    let log_path = run.log();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Error::io(&log_path, e))?;
    let device = model.device().clone();
    let (mut losses, mut tokens, mut seconds) = (Vec::new(), 0usize, 0f64);
    for step in start..steps {
        let (epoch, indices) = &batches[step as usize];
        let begun = Instant::now();
        let batch: Vec<&Example> = indices.iter().map(|&i| &examples[i]).collect();
        let mut dropout = Some(Dropout::for_step(settings.seed, step));
        let (loss, mut grads, batch_tokens) =
            accumulated(model, &batch, settings, &device, &mut dropout)?;
        let grad_norm = clip_grad_norm(model.params(), &mut grads, settings.max_grad_norm)?;
        let lr = schedule.lr(step);
        optimizer.step(model.params(), &grads, lr)?;
        let entry = StepLog {
            step: step + 1,
            steps,
            epoch: *epoch,
            loss,
            lr,
            grad_norm,
            tokens: batch_tokens,
            seconds: begun.elapsed().as_secs_f64(),
        };
        let line = serde_json::to_string(&entry).map_err(|e| Error::Invalid(e.to_string()))?;
        writeln!(log, "{line}").map_err(|e| Error::io(&log_path, e))?;
        losses.push(entry.loss);
        tokens += batch_tokens;
        seconds += entry.seconds;
        on_step(&entry);
        let done = step + 1;
        if checkpoint_every > 0 && done % checkpoint_every == 0 && done < steps {
            log.flush().map_err(|e| Error::io(&log_path, e))?;
            save_checkpoint(model, &optimizer, run, done, steps, fingerprint, base_name)?;
        }
    }
    let tenth = (losses.len() / 10).max(1);
    let mean = |xs: &[f64]| {
        if xs.is_empty() {
            f64::NAN
        } else {
            xs.iter().sum::<f64>() / xs.len() as f64
        }
    };
    Ok(Summary {
        steps,
        resumed_from: start,
        first_loss: mean(&losses[..tenth.min(losses.len())]),
        last_loss: mean(&losses[losses.len().saturating_sub(tenth)..]),
        tokens_per_second: if seconds > 0.0 {
            tokens as f64 / seconds
        } else {
            0.0
        },
        seconds,
    })
}

/// Sequences per forward and backward pass of a cross-encoder step (a
/// whole query's list at least): the step's gradient is accumulated over
/// passes, so memory follows this, not the batch.
const PAIRS_PER_PASS: usize = 16;

/// The loss of a step and its gradient. A cross-encoder's batch goes
/// through in passes of whole examples (at most [`PAIRS_PER_PASS`]
/// sequences, one example at least), each pass's loss weighted by its share
/// of the batch (pairs for BCE, queries for listwise), so that the summed
/// gradient is the whole batch's. MNRL compares every anchor with every
/// candidate of the batch and takes it in one pass.
fn accumulated(
    model: &Bert,
    batch: &[&Example],
    settings: &RunSettings,
    device: &Device,
    dropout: &mut Option<Dropout>,
) -> Result<(f64, candle_core::backprop::GradStore, usize)> {
    if model.head() == Head::MeanPooling {
        let (loss, tokens) = loss_of(model, batch, settings, device, dropout)?;
        return Ok((
            f64::from(loss.to_scalar::<f32>()?),
            only_params(model, loss.backward()?)?,
            tokens,
        ));
    }
    let pairs: usize = batch.iter().map(|e| e.sequences()).sum();
    let mut passes: Vec<&[&Example]> = Vec::new();
    let mut start = 0;
    while start < batch.len() {
        let mut end = start + 1;
        let mut n = batch[start].sequences();
        while end < batch.len() && n + batch[end].sequences() <= PAIRS_PER_PASS {
            n += batch[end].sequences();
            end += 1;
        }
        passes.push(&batch[start..end]);
        start = end;
    }
    let (mut value, mut tokens, mut grads) = (0f64, 0usize, None);
    for pass in passes {
        let share = match settings.loss {
            PairLoss::Bce => {
                pass.iter().map(|e| e.sequences()).sum::<usize>() as f64 / pairs as f64
            }
            PairLoss::Listwise => pass.len() as f64 / batch.len() as f64,
        };
        let (loss, t) = loss_of(model, pass, settings, device, dropout)?;
        let loss = (loss * share)?;
        value += f64::from(loss.to_scalar::<f32>()?);
        tokens += t;
        let g = only_params(model, loss.backward()?)?;
        drop(loss);
        match &mut grads {
            None => grads = Some(g),
            Some(acc) => candle_core::backprop::GradStore::extend(acc, g)?,
        }
    }
    let grads = grads.ok_or_else(|| Error::Invalid("an empty batch".to_owned()))?;
    Ok((value, grads, tokens))
}

/// The parameters' gradients alone. candle's backward pass also leaves a
/// gradient for every constant a tracked tensor was combined with (key
/// masks, labels, dropout masks: activation-sized), which would otherwise
/// live until the optimiser step — across every pass of an accumulated
/// step.
fn only_params(
    model: &Bert,
    mut all: candle_core::backprop::GradStore,
) -> Result<candle_core::backprop::GradStore> {
    // An empty store is not constructible; a scalar's backward pass gives
    // one holding only that scalar.
    let mut kept = Tensor::zeros((), candle_core::DType::F32, model.device())?.backward()?;
    for p in model.params() {
        if let Some(g) = all.remove(p.var.as_tensor()) {
            kept.insert(p.var.as_tensor(), g.detach());
        }
    }
    Ok(kept)
}

fn loss_of(
    model: &Bert,
    batch: &[&Example],
    settings: &RunSettings,
    device: &Device,
    dropout: &mut Option<Dropout>,
) -> Result<(Tensor, usize)> {
    let pad = model.config().pad_token_id as u32;
    match model.head() {
        Head::MeanPooling => {
            let mut anchors = Vec::new();
            let mut positives = Vec::new();
            let mut negatives: Vec<Vec<Tokens>> = Vec::new();
            for e in batch {
                let Example::Triplet {
                    anchor,
                    positive,
                    negatives: n,
                } = e
                else {
                    return Err(Error::Invalid("a bi-encoder trains on triplets".to_owned()));
                };
                anchors.push(anchor.clone());
                positives.push(positive.clone());
                if negatives.len() < n.len() {
                    negatives.resize(n.len(), Vec::new());
                }
                for (k, t) in n.iter().enumerate() {
                    negatives[k].push(t.clone());
                }
            }
            // MNRL needs whole columns: every anchor with k negatives.
            if negatives.iter().any(|c| c.len() != anchors.len()) {
                return Err(Error::Invalid(
                    "every triplet of a batch needs the same number of negatives".to_owned(),
                ));
            }
            let a = Batch::new(&anchors, pad, device)?;
            let tokens = a.tokens();
            let a = model.embed(&a, dropout)?;
            let mut docs = vec![positives];
            docs.extend(negatives);
            let mut columns = Vec::new();
            let mut total = tokens;
            for column in &docs {
                let b = Batch::new(column, pad, device)?;
                total += b.tokens();
                columns.push(model.embed(&b, dropout)?);
            }
            let candidates = Tensor::cat(&columns, 0)?;
            Ok((
                multiple_negatives_ranking(&a, &candidates, settings.scale)?,
                total,
            ))
        }
        Head::Classifier => {
            let mut pairs = Vec::new();
            let mut labels = Vec::new();
            for e in batch {
                let Example::Pairs {
                    pairs: p,
                    labels: l,
                } = e
                else {
                    return Err(Error::Invalid(
                        "a cross-encoder trains on labelled pairs".to_owned(),
                    ));
                };
                pairs.extend(p.iter().cloned());
                labels.extend_from_slice(l);
            }
            let b = Batch::new(&pairs, pad, device)?;
            let tokens = b.tokens();
            let logits = model.logits(&b, dropout)?;
            let loss = match settings.loss {
                PairLoss::Bce => binary_cross_entropy(&logits, &Tensor::new(labels, device)?)?,
                PairLoss::Listwise => {
                    let mut losses = Vec::with_capacity(batch.len());
                    let mut at = 0;
                    for e in batch {
                        let Example::Pairs { labels, .. } = e else {
                            unreachable!("checked above")
                        };
                        let list = logits.narrow(0, at, labels.len())?;
                        losses.push(listwise_softmax(
                            &list,
                            &Tensor::new(labels.as_slice(), device)?,
                        )?);
                        at += labels.len();
                    }
                    (Tensor::stack(&losses, 0)?.sum_all()? / losses.len() as f64)?
                }
            };
            Ok((loss, tokens))
        }
    }
}

fn save_checkpoint(
    model: &Bert,
    optimizer: &AdamW,
    run: &RunDir,
    step: u64,
    steps: u64,
    fingerprint: &str,
    base_name: &str,
) -> Result<()> {
    let dest = run.checkpoints().join(format!("step-{step:08}"));
    write_dir(&dest, |dir| {
        let weights: Vec<(String, Tensor)> = model
            .params()
            .iter()
            .map(|p| (p.name.clone(), p.var.as_tensor().clone()))
            .collect();
        write_safetensors(&dir.join("model.safetensors"), &weights)?;
        let mut state = optimizer.state()?;
        for (_, t) in &mut state {
            if t.dtype() != candle_core::DType::F32 {
                *t = t.to_dtype(candle_core::DType::F32)?;
            }
        }
        write_safetensors(&dir.join("optimizer.safetensors"), &state)?;
        let info = CheckpointState {
            step,
            steps,
            fingerprint: fingerprint.to_owned(),
            base: base_name.to_owned(),
        };
        let text =
            serde_json::to_string_pretty(&info).map_err(|e| Error::Invalid(e.to_string()))?;
        std::fs::write(dir.join("state.json"), text)
            .map_err(|e| Error::io(&dir.join("state.json"), e))
    })?;
    // Older checkpoints are superseded.
    let dir = run.checkpoints();
    for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
        let path = entry.map_err(|e| Error::io(&dir, e))?.path();
        if path != dest {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
    Ok(())
}

fn restore(
    model: &Bert,
    optimizer: &mut AdamW,
    checkpoint: &Path,
    fingerprint: &str,
    base_name: &str,
    steps: u64,
) -> Result<u64> {
    let step = read_checkpoint_state(checkpoint, fingerprint, base_name, steps)?;
    let weights = read_tensors(&checkpoint.join("model.safetensors"), model.device())?;
    for p in model.params() {
        let t = weights.get(&p.name).ok_or_else(|| {
            Error::format(
                &checkpoint.join("model.safetensors"),
                format!("no tensor `{}`", p.name),
            )
        })?;
        if t.dims() != p.var.dims() {
            return Err(Error::format(
                &checkpoint.join("model.safetensors"),
                format!(
                    "tensor `{}` has shape {:?}, the model {:?}",
                    p.name,
                    t.dims(),
                    p.var.dims()
                ),
            ));
        }
        p.var.set(t)?;
    }
    restore_optimizer(
        optimizer,
        model.params(),
        &checkpoint.join("optimizer.safetensors"),
        step,
    )?;
    Ok(step)
}

/// A checkpoint's `state.json`, checked against the run that resumes from it (the same
/// fingerprint and number of steps); its step.
pub fn read_checkpoint_state(
    checkpoint: &Path,
    fingerprint: &str,
    base_name: &str,
    steps: u64,
) -> Result<u64> {
    let state_path = checkpoint.join("state.json");
    let bytes = std::fs::read(&state_path).map_err(|e| Error::io(&state_path, e))?;
    let state: CheckpointState =
        serde_json::from_slice(&bytes).map_err(|e| Error::format(&state_path, e.to_string()))?;
    if state.fingerprint != fingerprint {
        let what = if state.base == base_name {
            "another configuration or other training data"
        } else {
            "another model"
        };
        return Err(Error::format(
            &state_path,
            format!(
                "fingerprint: this checkpoint was made from {what} (base {}, this run's base {base_name}); \
                 delete {} to start afresh",
                state.base,
                checkpoint.parent().unwrap_or(checkpoint).display()
            ),
        ));
    }
    if state.steps != steps || state.step > steps {
        return Err(Error::format(
            &state_path,
            format!(
                "steps: the checkpoint's run has {} steps, this one {steps}",
                state.steps
            ),
        ));
    }
    Ok(state.step)
}

/// A checkpoint's optimiser state (`optimizer.safetensors`: each trainable parameter's moments
/// and the step), restored into `optimizer` after it was checked against `params` and the
/// checkpoint's `step`.
pub fn restore_optimizer(
    optimizer: &mut AdamW,
    params: &[crate::Param],
    path: &Path,
    step: u64,
) -> Result<()> {
    let device = params
        .first()
        .map_or(Device::Cpu, |p| p.var.device().clone());
    let mut opt = read_tensors(path, &device)?;
    if let Some((name, t)) = opt
        .iter()
        .find(|(name, t)| name.as_str() != "step" && t.dtype() != candle_core::DType::F32)
    {
        return Err(Error::format(
            path,
            format!("tensor `{name}` is {:?}, not F32", t.dtype()),
        ));
    }
    if let Some(step) = opt.get("step") {
        let values = step
            .to_dtype(candle_core::DType::F64)?
            .flatten_all()?
            .to_vec1::<f64>()?;
        let &[value] = values.as_slice() else {
            return Err(Error::format(
                path,
                format!("tensor `step` holds {} values, not one", values.len()),
            ));
        };
        opt.insert(
            "step".to_owned(),
            Tensor::new(&[value as i64], &Device::Cpu)?,
        );
    }
    optimizer
        .restore(params, &opt)
        .map_err(|e| Error::format(path, e.to_string()))?;
    if optimizer.steps() != step {
        return Err(Error::format(
            path,
            format!(
                "step {} but the checkpoint's state.json has {step}",
                optimizer.steps()
            ),
        ));
    }
    Ok(())
}

fn read_tensors(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    candle_core::safetensors::load(path, device).map_err(|e| Error::format(path, e.to_string()))
}

/// Keeps the first `steps` lines of the log (those a checkpoint covers).
fn truncate_log(path: &Path, steps: u64) -> Result<()> {
    if !path.is_file() {
        return Ok(());
    }
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let kept: String = text
        .lines()
        .take(steps as usize)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(path, kept).map_err(|e| Error::io(path, e))
}
