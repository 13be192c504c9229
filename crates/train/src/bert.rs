//! A BERT encoder whose every operation has a gradient in candle.
//!
//! candle-transformers' `BertModel` runs its LayerNorms through candle's fused
//! kernel and its attention through `softmax_last_dim`; neither has a backward
//! pass, so a fine-tune built on it "trains" while the gradient never reaches
//! the encoder (candle issues #2977, #3011, #3569). Here LayerNorm is
//! `layer_norm_slow` and the softmax is built from differentiable operations;
//! `tests/gradients.rs` checks that every trainable tensor gets a gradient.
//!
//! Parameters keep the names transformers gives them in `BertModel`
//! (`embeddings.word_embeddings.weight`, `encoder.layer.0.…`, `pooler.dense.…`),
//! plus `classifier.weight`/`classifier.bias` for a cross-encoder's head.

use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use embedder::{BertConfig, ModelConfig, ModelFiles, Tokens, Weights};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, Normal};

use crate::error::{Error, Result};

/// What sits on top of the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// Mean of the token states (a sentence-transformers bi-encoder).
    MeanPooling,
    /// `[CLS]` → pooler (dense, tanh) → one logit, as transformers'
    /// `BertForSequenceClassification` with one label.
    Classifier,
}

/// One tensor of the model.
#[derive(Debug)]
pub struct Param {
    /// transformers' name (without the `bert.` prefix for encoder tensors).
    pub name: String,
    /// The value.
    pub var: Var,
    /// Whether the optimiser updates it (false for frozen layers).
    pub trainable: bool,
}

impl Param {
    /// Whether weight decay applies: not to biases and LayerNorm weights, as
    /// transformers' Trainer groups them.
    pub fn decays(&self) -> bool {
        !(self.name.ends_with(".bias") || self.name.contains("LayerNorm"))
    }
}

/// A batch of tokenised inputs, right-padded.
#[derive(Debug)]
pub struct Batch {
    ids: Tensor,
    types: Tensor,
    /// 1 for tokens, 0 for padding, `[batch, len]`, f32.
    mask: Tensor,
    /// Tokens in the batch, padding excluded.
    tokens: usize,
}

impl Batch {
    /// Pads `seqs` on the right to the longest; `pad` is the padding id.
    pub fn new(seqs: &[Tokens], pad: u32, device: &Device) -> Result<Self> {
        if seqs.is_empty() || seqs.iter().any(|s| s.ids.is_empty()) {
            return Err(Error::Invalid("a batch needs non-empty inputs".to_owned()));
        }
        let len = seqs.iter().map(|s| s.ids.len()).max().unwrap_or(0);
        let n = seqs.len();
        let mut ids = vec![pad; n * len];
        let mut types = vec![0u32; n * len];
        let mut mask = vec![0f32; n * len];
        for (i, s) in seqs.iter().enumerate() {
            let row = i * len;
            ids[row..row + s.ids.len()].copy_from_slice(&s.ids);
            if !s.types.is_empty() {
                types[row..row + s.types.len()].copy_from_slice(&s.types);
            }
            mask[row..row + s.ids.len()].fill(1.0);
        }
        Ok(Self {
            ids: Tensor::from_vec(ids, (n, len), device)?,
            types: Tensor::from_vec(types, (n, len), device)?,
            mask: Tensor::from_vec(mask, (n, len), device)?,
            tokens: seqs.iter().map(|s| s.ids.len()).sum(),
        })
    }

    /// Sequences in the batch.
    pub fn len(&self) -> usize {
        self.ids.dims()[0]
    }

    /// Whether the batch is empty (never: [`Batch::new`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tokens in the batch, padding excluded.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Rows `start..start + n` (the padded length stays).
    fn rows(&self, start: usize, n: usize) -> Result<Self> {
        Ok(Self {
            ids: self.ids.narrow(0, start, n)?,
            types: self.types.narrow(0, start, n)?,
            mask: self.mask.narrow(0, start, n)?,
            tokens: 0,
        })
    }
}

/// Dropout with masks from a seeded generator, so that a step is a pure
/// function of (weights, batch, seed, step): resuming from a checkpoint
/// replays exactly the masks of an uninterrupted run.
#[derive(Debug)]
pub struct Dropout {
    rng: ChaCha8Rng,
}

impl Dropout {
    /// The masks of optimiser step `step` of a run seeded with `seed`.
    pub fn for_step(seed: u64, step: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(step.wrapping_add(1));
        Self { rng }
    }

    fn apply(&mut self, x: &Tensor, p: f64) -> Result<Tensor> {
        if p <= 0.0 {
            return Ok(x.clone());
        }
        let keep = 1.0 - p;
        let scale = (1.0 / keep) as f32;
        // Kept when a uniform 32-bit draw falls below keep · 2³².
        let threshold = (keep * 4_294_967_296.0).min(4_294_967_295.0) as u32;
        let mask: Vec<f32> = (0..x.elem_count())
            .map(|_| {
                if self.rng.next_u32() < threshold {
                    scale
                } else {
                    0.0
                }
            })
            .collect();
        let mask = Tensor::from_vec(mask, x.shape(), x.device())?;
        crate::ops::masked(x, &mask)
    }
}

/// A BERT encoder with its head, as trainable variables.
#[derive(Debug)]
pub struct Bert {
    config: BertConfig,
    head: Head,
    params: Vec<Param>,
    device: Device,
    hidden_dropout: f64,
    attention_dropout: f64,
}

/// Names of the encoder's tensors in transformers' `BertModel` order.
fn encoder_names(config: &BertConfig) -> Vec<(String, Vec<usize>)> {
    let (h, i) = (config.hidden_size, config.intermediate_size);
    let mut names = vec![
        (
            "embeddings.word_embeddings.weight".to_owned(),
            vec![config.vocab_size, h],
        ),
        (
            "embeddings.position_embeddings.weight".to_owned(),
            vec![config.max_position_embeddings, h],
        ),
        (
            "embeddings.token_type_embeddings.weight".to_owned(),
            vec![config.type_vocab_size, h],
        ),
        ("embeddings.LayerNorm.weight".to_owned(), vec![h]),
        ("embeddings.LayerNorm.bias".to_owned(), vec![h]),
    ];
    for l in 0..config.num_hidden_layers {
        let p = format!("encoder.layer.{l}.");
        for (name, shape) in [
            ("attention.self.query.weight", vec![h, h]),
            ("attention.self.query.bias", vec![h]),
            ("attention.self.key.weight", vec![h, h]),
            ("attention.self.key.bias", vec![h]),
            ("attention.self.value.weight", vec![h, h]),
            ("attention.self.value.bias", vec![h]),
            ("attention.output.dense.weight", vec![h, h]),
            ("attention.output.dense.bias", vec![h]),
            ("attention.output.LayerNorm.weight", vec![h]),
            ("attention.output.LayerNorm.bias", vec![h]),
            ("intermediate.dense.weight", vec![i, h]),
            ("intermediate.dense.bias", vec![i]),
            ("output.dense.weight", vec![h, i]),
            ("output.dense.bias", vec![h]),
            ("output.LayerNorm.weight", vec![h]),
            ("output.LayerNorm.bias", vec![h]),
        ] {
            names.push((format!("{p}{name}"), shape));
        }
    }
    names
}

/// How a model directory is turned into a trainable model.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOptions {
    /// The head to train.
    pub head: Head,
    /// Dropout of hidden states and attention probabilities; `None` keeps
    /// the checkpoint's `hidden_dropout_prob` / `attention_probs_dropout_prob`.
    pub dropout: Option<f64>,
    /// Freeze the embeddings and this many lower layers.
    pub frozen_layers: usize,
    /// Seed of a new classification head's initial weights.
    pub seed: u64,
}

impl Bert {
    /// Loads a BERT checkpoint (a `BertModel` or a
    /// `BertForSequenceClassification` directory). A classifier head that
    /// the checkpoint lacks starts as transformers initialises one: normal
    /// with the config's `initializer_range`, bias zero; a missing pooler
    /// likewise.
    pub fn load(dir: &Path, options: &LoadOptions, device: &Device) -> Result<Self> {
        let files = ModelFiles::in_dir(dir)?;
        let config = match ModelConfig::read(&files.config)? {
            ModelConfig::Bert(c) if !c.roberta_positions() => c,
            other => {
                return Err(Error::format(
                    &files.config,
                    format!(
                        "model_type: training supports BERT encoders, not {}",
                        other.family()
                    ),
                ));
            }
        };
        if options.frozen_layers > config.num_hidden_layers {
            return Err(Error::Invalid(format!(
                "frozen_layers {} exceeds the model's {} layers",
                options.frozen_layers, config.num_hidden_layers
            )));
        }
        let raw: serde_json::Value = std::fs::read(&files.config)
            .map_err(|e| Error::io(&files.config, e))
            .and_then(|bytes| {
                serde_json::from_slice(&bytes)
                    .map_err(|e| Error::format(&files.config, e.to_string()))
            })?;
        let prob = |key: &str| {
            raw.get(key)
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(0.1)
        };
        let (hidden_dropout, attention_dropout) = match options.dropout {
            Some(p) => (p, p),
            None => (
                prob("hidden_dropout_prob"),
                prob("attention_probs_dropout_prob"),
            ),
        };
        for p in [hidden_dropout, attention_dropout] {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::Invalid(format!("dropout {p} is not in [0, 1)")));
            }
        }
        let init_range = raw
            .get("initializer_range")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.02);
        let weights = Weights::open(
            &files.weights,
            &["bert.", ""],
            "embeddings.word_embeddings.weight",
        )?;
        let mut params = Vec::new();
        // Freezing n layers freezes the embeddings below them too.
        let frozen = |name: &str| {
            (options.frozen_layers > 0 && name.starts_with("embeddings."))
                || name
                    .strip_prefix("encoder.layer.")
                    .and_then(|rest| rest.split('.').next())
                    .and_then(|l| l.parse::<usize>().ok())
                    .is_some_and(|l| l < options.frozen_layers)
        };
        let mut add = |name: String, shape: &[usize], values: Vec<f32>| -> Result<()> {
            let var = Var::from_vec(values, shape, device)?;
            let trainable = !frozen(&name);
            params.push(Param {
                name,
                var,
                trainable,
            });
            Ok(())
        };
        for (name, shape) in encoder_names(&config) {
            let values = weights.get(&name, &shape)?;
            add(name, &shape, values)?;
        }
        if options.head == Head::MeanPooling && weights.contains("pooler.dense.weight") {
            // Kept (untrained, see below) so that the saved BertModel is whole.
            let h = config.hidden_size;
            for (name, shape) in [
                ("pooler.dense.weight", vec![h, h]),
                ("pooler.dense.bias", vec![h]),
            ] {
                let values = weights.get(name, &shape)?;
                add(name.to_owned(), &shape, values)?;
            }
        }
        if options.head == Head::Classifier {
            let h = config.hidden_size;
            let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
            let normal = Normal::new(0.0f32, init_range as f32)
                .map_err(|e| Error::Invalid(format!("initializer_range: {e}")))?;
            let mut fresh =
                |n: usize| -> Vec<f32> { (0..n).map(|_| normal.sample(&mut rng)).collect() };
            for (name, full, shape) in [
                ("pooler.dense.weight", None, vec![h, h]),
                ("pooler.dense.bias", None, vec![h]),
                ("classifier.weight", Some("classifier.weight"), vec![1, h]),
                ("classifier.bias", Some("classifier.bias"), vec![1]),
            ] {
                let present = match full {
                    Some(full) => weights.contains_full(full),
                    None => weights.contains(name),
                };
                let values = if present {
                    match full {
                        Some(full) => weights.get_full(full, &shape)?,
                        None => weights.get(name, &shape)?,
                    }
                } else if name.ends_with(".bias") {
                    vec![0.0; shape.iter().product()]
                } else {
                    fresh(shape.iter().product())
                };
                add(name.to_owned(), &shape, values)?;
            }
            if weights.contains_full("classifier.weight")
                && weights
                    .find_full("classifier.weight")?
                    .is_some_and(|(s, _)| s != [1, h])
            {
                return Err(Error::format(
                    weights.path(),
                    "classifier.weight: a cross-encoder with one label expected",
                ));
            }
        }
        if options.head == Head::MeanPooling {
            for p in params.iter_mut().filter(|p| p.name.starts_with("pooler.")) {
                p.trainable = false;
            }
        }
        Ok(Self {
            config,
            head: options.head,
            params,
            device: device.clone(),
            hidden_dropout,
            attention_dropout,
        })
    }

    /// The architecture.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The head.
    pub fn head(&self) -> Head {
        self.head
    }

    /// Every tensor, in transformers' order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The device the model lives on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Parameter `name` as a tensor of the graph (detached when frozen, so
    /// the backward pass stops there).
    fn p(&self, name: &str) -> Result<Tensor> {
        let param = self
            .params
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Error::Invalid(format!("no parameter `{name}`")))?;
        Ok(if param.trainable {
            param.var.as_tensor().clone()
        } else {
            param.var.as_tensor().detach()
        })
    }

    fn linear(&self, x: &Tensor, prefix: &str) -> Result<Tensor> {
        let w = self.p(&format!("{prefix}.weight"))?;
        let b = self.p(&format!("{prefix}.bias"))?;
        Ok(x.broadcast_matmul(&w.t()?)?.broadcast_add(&b)?)
    }

    fn layer_norm(&self, x: &Tensor, prefix: &str) -> Result<Tensor> {
        let w = self.p(&format!("{prefix}.weight"))?;
        let b = self.p(&format!("{prefix}.bias"))?;
        Ok(candle_nn::ops::layer_norm_slow(
            x,
            &w,
            &b,
            self.config.layer_norm_eps as f32,
        )?)
    }

    /// Sequences per pass through the encoder on the CPU: every activation
    /// of a pass (attention scores `[n, heads, len, len]`, the feed-forward
    /// `[n·len, intermediate]`) stays under 24 MiB, so that glibc serves it
    /// from its heap and reuses it step after step; larger blocks are
    /// mapped and zeroed afresh by the kernel each time (over a third of a
    /// step's time at 44 sequences of 256 tokens). The result is the same:
    /// sequences do not interact in the encoder.
    fn rows_per_pass(&self, len: usize) -> usize {
        const BUDGET: usize = 24 << 20;
        let c = &self.config;
        let per_row = (c.num_attention_heads * len * len)
            .max(len * c.intermediate_size)
            .max(1)
            * 4;
        (BUDGET / per_row).max(1)
    }

    /// Token states `[batch, len, hidden]`; `dropout` is `Some` in training.
    pub fn encode(&self, batch: &Batch, dropout: &mut Option<Dropout>) -> Result<Tensor> {
        let (n, len) = batch.ids.dims2()?;
        let step = self.rows_per_pass(len);
        if batch.ids.device().is_cpu() && n > step {
            let mut parts = Vec::with_capacity(n.div_ceil(step));
            for start in (0..n).step_by(step) {
                let rows = batch.rows(start, step.min(n - start))?;
                parts.push(self.encode_pass(&rows, dropout)?);
            }
            return Ok(Tensor::cat(&parts, 0)?);
        }
        self.encode_pass(batch, dropout)
    }

    fn encode_pass(&self, batch: &Batch, dropout: &mut Option<Dropout>) -> Result<Tensor> {
        let (n, len) = batch.ids.dims2()?;
        let h = self.config.hidden_size;
        if len > self.config.max_position_embeddings {
            return Err(Error::Invalid(format!(
                "an input of {len} tokens exceeds the model's {} positions",
                self.config.max_position_embeddings
            )));
        }
        let mut drop = |x: Tensor, p: f64| -> Result<Tensor> {
            match dropout {
                Some(d) => d.apply(&x, p),
                None => Ok(x),
            }
        };
        let words = self
            .p("embeddings.word_embeddings.weight")?
            .index_select(&batch.ids.flatten_all()?, 0)?
            .reshape((n, len, h))?;
        let types = self
            .p("embeddings.token_type_embeddings.weight")?
            .index_select(&batch.types.flatten_all()?, 0)?
            .reshape((n, len, h))?;
        let positions = self
            .p("embeddings.position_embeddings.weight")?
            .narrow(0, 0, len)?;
        let x = words.add(&types)?.broadcast_add(&positions)?;
        let x = self.layer_norm(&x, "embeddings.LayerNorm")?;
        let mut x = drop(x, self.hidden_dropout)?;
        let heads = self.config.num_attention_heads;
        let d = h / heads;
        // Additive mask over the keys: 0 for tokens, a large negative for padding.
        let bias = ((batch.mask.ones_like()? - &batch.mask)? * -1e30f64)?
            .reshape((n, 1, 1, len))?
            .to_dtype(DType::F32)?;
        let scale = 1.0 / (d as f64).sqrt();
        for l in 0..self.config.num_hidden_layers {
            let p = format!("encoder.layer.{l}.");
            let split = |t: Tensor| -> Result<Tensor> {
                Ok(t.reshape((n, len, heads, d))?
                    .transpose(1, 2)?
                    .contiguous()?)
            };
            let q = split(self.linear(&x, &format!("{p}attention.self.query"))?)?;
            let k = split(self.linear(&x, &format!("{p}attention.self.key"))?)?;
            let v = split(self.linear(&x, &format!("{p}attention.self.value"))?)?;
            let probs = crate::ops::masked_softmax(&q.matmul(&k.t()?)?, &bias, scale)?;
            let probs = drop(probs, self.attention_dropout)?;
            let context = probs
                .matmul(&v)?
                .transpose(1, 2)?
                .contiguous()?
                .reshape((n, len, h))?;
            let attended = self.linear(&context, &format!("{p}attention.output.dense"))?;
            let attended = drop(attended, self.hidden_dropout)?;
            let x1 = self.layer_norm(
                &attended.add(&x)?,
                &format!("{p}attention.output.LayerNorm"),
            )?;
            let inner = self
                .linear(&x1, &format!("{p}intermediate.dense"))?
                .gelu_erf()?;
            let out = self.linear(&inner, &format!("{p}output.dense"))?;
            let out = drop(out, self.hidden_dropout)?;
            x = self.layer_norm(&out.add(&x1)?, &format!("{p}output.LayerNorm"))?;
        }
        Ok(x)
    }

    /// Sentence embeddings `[batch, hidden]`: the mean of the token states
    /// (sentence-transformers' mean pooling, divisor clamped at 1e-9).
    pub fn embed(&self, batch: &Batch, dropout: &mut Option<Dropout>) -> Result<Tensor> {
        let states = self.encode(batch, dropout)?;
        let mask = batch.mask.unsqueeze(2)?;
        let sum = states.broadcast_mul(&mask)?.sum(1)?;
        let count = mask.sum(1)?.clamp(1e-9, f64::INFINITY)?;
        Ok(sum.broadcast_div(&count)?)
    }

    /// One relevance logit per input `[batch]` (the classifier head).
    pub fn logits(&self, batch: &Batch, dropout: &mut Option<Dropout>) -> Result<Tensor> {
        if self.head != Head::Classifier {
            return Err(Error::Invalid(
                "logits need a classifier head (a cross-encoder)".to_owned(),
            ));
        }
        let states = self.encode(batch, dropout)?;
        let cls = states.narrow(1, 0, 1)?.squeeze(1)?;
        let pooled = self.linear(&cls, "pooler.dense")?.tanh()?;
        let pooled = match dropout {
            Some(d) => d.apply(&pooled, self.hidden_dropout)?,
            None => pooled,
        };
        Ok(self.linear(&pooled, "classifier")?.squeeze(1)?)
    }
}
