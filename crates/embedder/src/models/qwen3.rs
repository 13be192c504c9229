//! Qwen3 decoders (Qwen3-Embedding, Qwen3-Reranker, and the SkillRet models
//! fine-tuned from them): pre-RMSNorm layers, rotary positions, grouped-query
//! causal attention with per-head RMSNorm on queries and keys, and a SwiGLU
//! feed-forward — transformers' `Qwen3Model`.
//!
//! Checkpoints load in both layouts: `Qwen3Model` (tensor names without a
//! prefix, as embedding models are saved) and `Qwen3ForCausalLM` (under
//! `model.`, with `lm_head` or tied to the embeddings, as rerankers are).
//!
//! Native engine: sequences laid end to end, causal attention tiled with an
//! online softmax (memory linear in the length), the feed-forward run in
//! blocks of rows. candle engine: the same graph on padded batches — right
//! padding, so the causal mask alone keeps padding out of every real
//! token's view (candle-transformers' `qwen3` takes no padding mask and
//! keeps a KV cache between calls, so this crate builds its own graph).

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear as CandleLinear, VarBuilder};
use rayon::prelude::*;

use super::{Model, Pool, Reused, Tokens, pool_padded, pool_states, sized};
use crate::attention::{self, Heads, QkvLayout};
use crate::config::Pooling;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use crate::kernels;
use crate::linear::{Linear, Plan, ROW_BLOCK, Role};

/// The Qwen3 architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Qwen3Config {
    /// Rows of the token-embedding matrix.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Width of one head (`num_attention_heads · head_dim` may differ from
    /// `hidden_size`).
    pub head_dim: usize,
    /// Positions the rotary embedding was trained for: the longest input.
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary base (`rope_theta`, or transformers 5's
    /// `rope_parameters.rope_theta`).
    pub rope_theta: f64,
    /// Whether the projections have biases.
    pub attention_bias: bool,
    /// Whether the language-model head is the embedding matrix.
    pub tie_word_embeddings: bool,
}

#[derive(serde::Deserialize)]
struct RawConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
}

fn default_eps() -> f64 {
    1e-6
}
fn default_act() -> String {
    "silu".to_owned()
}

impl Qwen3Config {
    pub(crate) fn parse(path: &Path, value: serde_json::Value) -> Result<Self> {
        let raw: RawConfig = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::format(path, format!("{}: {}", e.path(), e.inner())))?;
        let bad =
            |field: &str, message: String| Err(Error::format(path, format!("{field}: {message}")));
        if raw.hidden_act != "silu" {
            return bad(
                "hidden_act",
                format!("{:?} is not supported (silu)", raw.hidden_act),
            );
        }
        if raw.use_sliding_window {
            return bad(
                "use_sliding_window",
                "sliding-window attention is not supported".to_owned(),
            );
        }
        if let Some(types) = &raw.layer_types
            && let Some(other) = types.iter().find(|t| *t != "full_attention")
        {
            return bad(
                "layer_types",
                format!("{other:?} layers are not supported (full_attention)"),
            );
        }
        let rope_type = raw
            .rope_parameters
            .as_ref()
            .and_then(|r| r.rope_type.clone());
        if let Some(kind) = rope_type.filter(|t| t != "default") {
            return bad(
                "rope_parameters.rope_type",
                format!("{kind:?} is not supported (default)"),
            );
        }
        if raw.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return bad(
                "rope_scaling",
                "scaled rotary positions are not supported".to_owned(),
            );
        }
        let rope_theta = match (
            raw.rope_theta,
            raw.rope_parameters.and_then(|r| r.rope_theta),
        ) {
            (Some(t), _) | (None, Some(t)) => t,
            (None, None) => 10_000.0,
        };
        if !(rope_theta.is_finite() && rope_theta > 1.0) {
            return bad("rope_theta", format!("{rope_theta} is not a rotary base"));
        }
        let heads = raw.num_attention_heads;
        let kv = raw.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
            return bad(
                "num_key_value_heads",
                format!("{kv} does not divide num_attention_heads {heads}"),
            );
        }
        let head_dim = match raw.head_dim {
            Some(d) => d,
            None if raw.hidden_size.is_multiple_of(heads) => raw.hidden_size / heads,
            None => {
                return bad(
                    "head_dim",
                    format!(
                        "absent, and hidden_size {} is not a multiple of {heads} heads",
                        raw.hidden_size
                    ),
                );
            }
        };
        if head_dim == 0 || head_dim % 2 == 1 {
            return bad(
                "head_dim",
                format!("{head_dim} is not a positive even width"),
            );
        }
        if raw.hidden_size == 0 || raw.vocab_size == 0 || raw.max_position_embeddings == 0 {
            return bad(
                "hidden_size",
                "hidden_size, vocab_size and max_position_embeddings must be positive".to_owned(),
            );
        }
        Ok(Self {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim,
            max_position_embeddings: raw.max_position_embeddings,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta,
            attention_bias: raw.attention_bias,
            tie_word_embeddings: raw.tie_word_embeddings,
        })
    }

    fn heads(&self) -> Heads {
        Heads {
            query: self.num_attention_heads,
            kv: self.num_key_value_heads,
            dim: self.head_dim,
            causal: true,
        }
    }
}

/// Name prefixes: `Qwen3Model` saves (none) and `Qwen3ForCausalLM` saves.
pub(crate) const PREFIXES: [&str; 2] = ["", "model."];
const PROBE: &str = "embed_tokens.weight";

/// The name of the language-model head's matrix in `weights`: `lm_head.weight`
/// where the checkpoint has one, else (tied) the embedding matrix.
pub(crate) fn lm_head_name(weights: &Weights) -> String {
    if weights.contains_full("lm_head.weight") {
        "lm_head.weight".to_owned()
    } else {
        format!("{}{PROBE}", weights.prefix())
    }
}

/// Opens a Qwen3 checkpoint's weights.
pub(crate) fn weights(files: &ModelFiles) -> Result<Weights> {
    Weights::open(&files.weights, &PREFIXES, PROBE)
}

/// Rotary tables for positions `0..len`: `cos` and `sin`, `len × head_dim/2`.
///
/// Computed as transformers computes them, so that long inputs agree: the
/// inverse frequencies `1 / θ^(2i/d)` in f32, each angle the f32 product of
/// position and frequency, and its cosine and sine (of that f32 angle).
pub(crate) fn rope_tables(config: &Qwen3Config, len: usize) -> (Vec<f32>, Vec<f32>) {
    let d = config.head_dim;
    let half = d / 2;
    let theta = config.rope_theta as f32;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / d as f32))
        .collect();
    let mut cos = vec![0.0f32; len * half];
    let mut sin = vec![0.0f32; len * half];
    cos.par_chunks_mut(half)
        .zip(sin.par_chunks_mut(half))
        .enumerate()
        .for_each(|(p, (c, s))| {
            for ((c, s), &f) in c.iter_mut().zip(s.iter_mut()).zip(&inv) {
                let angle = f64::from(p as f32 * f);
                *c = angle.cos() as f32;
                *s = angle.sin() as f32;
            }
        });
    (cos, sin)
}

/// Rotates one head in place: `x·cos + rotate_half(x)·sin`.
fn rotate(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let half = x.len() / 2;
    let (a, b) = x.split_at_mut(half);
    for i in 0..half {
        let (x1, x2) = (a[i], b[i]);
        a[i] = x1 * cos[i] - x2 * sin[i];
        b[i] = x2 * cos[i] + x1 * sin[i];
    }
}

struct Layer {
    input_norm: Vec<f32>,
    /// Query, key and value in one product.
    qkv: Linear,
    q_norm: Vec<f32>,
    k_norm: Vec<f32>,
    output: Linear,
    post_norm: Vec<f32>,
    /// Gate and up projections in one product (gate first).
    gate_up: Linear,
    down: Linear,
}

/// Rows of the feed-forward run at once (bounds its buffers).
const FEED_FORWARD_ROWS: usize = 1024;

/// Qwen3 weights ready for the native forward pass.
pub(crate) struct NativeQwen3 {
    config: Qwen3Config,
    embed: Vec<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    buffers: Reused<Buffers>,
}

/// The activations of a forward pass, kept from one batch to the next.
#[derive(Default)]
struct Buffers {
    x: Vec<f32>,
    y: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    gate_up: Vec<f32>,
    act: Vec<f32>,
    attention: attention::Packed,
}

fn projection(
    w: &Weights,
    name: &str,
    inputs: usize,
    outputs: usize,
    bias: bool,
) -> Result<Linear> {
    let weight = w.get(&format!("{name}.weight"), &[outputs, inputs])?;
    let bias = if bias {
        Some(w.get(&format!("{name}.bias"), &[outputs])?)
    } else {
        None
    };
    Ok(Linear::new(weight, bias, inputs, outputs))
}

impl NativeQwen3 {
    pub(crate) fn load(files: &ModelFiles, config: &Qwen3Config, plan: Plan) -> Result<Self> {
        let w = weights(files)?;
        let h = config.hidden_size;
        let d = config.head_dim;
        let q_width = config.num_attention_heads * d;
        let kv_width = config.num_key_value_heads * d;
        let i = config.intermediate_size;
        let bias = config.attention_bias;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("layers.{l}");
            let a = format!("{p}.self_attn");
            let m = format!("{p}.mlp");
            let mut layer = Layer {
                input_norm: w.get(&format!("{p}.input_layernorm.weight"), &[h])?,
                qkv: Linear::stack(vec![
                    projection(&w, &format!("{a}.q_proj"), h, q_width, bias)?,
                    projection(&w, &format!("{a}.k_proj"), h, kv_width, bias)?,
                    projection(&w, &format!("{a}.v_proj"), h, kv_width, bias)?,
                ]),
                q_norm: w.get(&format!("{a}.q_norm.weight"), &[d])?,
                k_norm: w.get(&format!("{a}.k_norm.weight"), &[d])?,
                output: projection(&w, &format!("{a}.o_proj"), q_width, h, bias)?,
                post_norm: w.get(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                gate_up: Linear::stack(vec![
                    projection(&w, &format!("{m}.gate_proj"), h, i, false)?,
                    projection(&w, &format!("{m}.up_proj"), h, i, false)?,
                ]),
                down: projection(&w, &format!("{m}.down_proj"), i, h, false)?,
            };
            for (linear, role) in [
                (&mut layer.qkv, Role::AttentionIn),
                (&mut layer.output, Role::AttentionOut),
                (&mut layer.gate_up, Role::FeedForwardIn),
                (&mut layer.down, Role::FeedForwardOut),
            ] {
                linear.prepare(plan.of(role));
            }
            layers.push(layer);
        }
        Ok(Self {
            embed: w.get(PROBE, &[config.vocab_size, h])?,
            norm: w.get("norm.weight", &[h])?,
            layers,
            config: config.clone(),
            buffers: Reused::default(),
        })
    }

    fn rms_norm_rows(xs: &mut [f32], width: usize, weight: &[f32], eps: f32) {
        xs.par_chunks_mut(width * ROW_BLOCK)
            .for_each(|rows| kernels::rms_norm(rows, width, weight, eps));
    }
}

impl Model for NativeQwen3 {
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>> {
        self.buffers
            .with(|buffers| Ok(self.run(batch, pool, buffers)))
    }
}

impl NativeQwen3 {
    fn run(&self, batch: &[&Tokens], pool: Pool, b: &mut Buffers) -> Vec<f32> {
        let c = &self.config;
        let h = c.hidden_size;
        let d = c.head_dim;
        let inter = c.intermediate_size;
        let eps = c.rms_norm_eps as f32;
        let heads = c.heads();
        let layout = QkvLayout::fused(heads);
        let lengths: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
        let tokens: usize = lengths.iter().sum();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let (cos, sin) = rope_tables(c, longest);
        let positions: Vec<usize> = lengths.iter().flat_map(|&n| 0..n).collect();
        // Where pooling picks one row per sequence, the last layer's output
        // projection and feed-forward run on those rows only.
        let picked: Option<Vec<usize>> = match pool.pooling {
            Pooling::Mean => None,
            Pooling::Cls | Pooling::LastToken => {
                let mut start = 0;
                Some(
                    lengths
                        .iter()
                        .map(|&n| {
                            let row = start
                                + if pool.pooling == Pooling::Cls {
                                    pool.skip.min(n.saturating_sub(1))
                                } else {
                                    n.saturating_sub(1)
                                };
                            start += n;
                            row
                        })
                        .collect(),
                )
            }
        };

        let x = sized(&mut b.x, tokens * h);
        for (row, &id) in x
            .chunks_exact_mut(h)
            .zip(batch.iter().flat_map(|t| t.ids.iter()))
        {
            let id = id as usize;
            row.copy_from_slice(&self.embed[id * h..(id + 1) * h]);
        }
        sized(&mut b.y, tokens * h);
        sized(&mut b.normed, tokens * h);
        sized(&mut b.qkv, tokens * layout.stride);
        sized(&mut b.context, tokens * heads.query * d);
        let ff_rows = tokens.min(FEED_FORWARD_ROWS);
        sized(&mut b.gate_up, ff_rows * 2 * inter);
        sized(&mut b.act, ff_rows * inter);
        let last = self.layers.len().saturating_sub(1);
        for (l, layer) in self.layers.iter().enumerate() {
            b.normed.copy_from_slice(&b.x);
            Self::rms_norm_rows(&mut b.normed, h, &layer.input_norm, eps);
            layer.qkv.forward(&b.normed, tokens, &mut b.qkv, None);
            // Per-head RMSNorm of queries and keys, then rotary positions.
            let half = d / 2;
            b.qkv
                .par_chunks_mut(layout.stride)
                .zip(positions.par_iter())
                .for_each(|(row, &p)| {
                    let (cos, sin) = (
                        &cos[p * half..(p + 1) * half],
                        &sin[p * half..(p + 1) * half],
                    );
                    let (q, kv) = row.split_at_mut(layout.k);
                    for head in q.chunks_exact_mut(d) {
                        kernels::rms_norm(head, d, &layer.q_norm, eps);
                        rotate(head, cos, sin);
                    }
                    for head in kv[..heads.kv * d].chunks_exact_mut(d) {
                        kernels::rms_norm(head, d, &layer.k_norm, eps);
                        rotate(head, cos, sin);
                    }
                });
            attention::attention(
                heads,
                &lengths,
                &b.qkv,
                layout,
                &mut b.context,
                &mut b.attention,
            );
            let rows = match (&picked, l == last) {
                (Some(picked), true) => {
                    // Gather the picked rows to the front of each buffer.
                    let width = heads.query * d;
                    for (i, &row) in picked.iter().enumerate() {
                        b.context
                            .copy_within(row * width..(row + 1) * width, i * width);
                        b.x.copy_within(row * h..(row + 1) * h, i * h);
                    }
                    picked.len()
                }
                _ => tokens,
            };
            layer.output.forward(&b.context, rows, &mut b.y, Some(&b.x));
            std::mem::swap(&mut b.x, &mut b.y);
            b.normed[..rows * h].copy_from_slice(&b.x[..rows * h]);
            Self::rms_norm_rows(&mut b.normed[..rows * h], h, &layer.post_norm, eps);
            let mut r0 = 0;
            while r0 < rows {
                let n = (rows - r0).min(FEED_FORWARD_ROWS);
                let span = r0 * h..(r0 + n) * h;
                layer
                    .gate_up
                    .forward(&b.normed[span.clone()], n, &mut b.gate_up, None);
                b.act[..n * inter]
                    .par_chunks_mut(inter * ROW_BLOCK)
                    .zip(b.gate_up[..n * 2 * inter].par_chunks(2 * inter * ROW_BLOCK))
                    .for_each(|(a, g)| kernels::silu_mul(g, a, inter));
                layer.down.forward(
                    &b.act[..n * inter],
                    n,
                    &mut b.y[span.clone()],
                    Some(&b.x[span]),
                );
                r0 += n;
            }
            std::mem::swap(&mut b.x, &mut b.y);
            if rows < tokens {
                // The picked rows, one per sequence, in order.
                let mut out = b.x[..rows * h].to_vec();
                Self::rms_norm_rows(&mut out, h, &self.norm, eps);
                return out;
            }
        }
        match pool.pooling {
            // The final norm is per token: applied to the pooled rows only
            // where pooling picks rows.
            Pooling::Mean => {
                Self::rms_norm_rows(&mut b.x, h, &self.norm, eps);
                pool_states(&b.x, &lengths, h, pool)
            }
            Pooling::Cls | Pooling::LastToken => {
                let mut picked = pool_states(&b.x, &lengths, h, pool);
                Self::rms_norm_rows(&mut picked, h, &self.norm, eps);
                picked
            }
        }
    }
}

/// The same forward pass as a candle graph (the CUDA path).
pub(crate) struct CandleQwen3 {
    config: Qwen3Config,
    embed: Tensor,
    layers: Vec<CandleLayer>,
    norm: Tensor,
    device: Device,
    dtype: DType,
}

struct CandleLayer {
    input_norm: Tensor,
    q: CandleLinear,
    k: CandleLinear,
    v: CandleLinear,
    q_norm: Tensor,
    k_norm: Tensor,
    o: CandleLinear,
    post_norm: Tensor,
    gate: CandleLinear,
    up: CandleLinear,
    down: CandleLinear,
}

/// Attention scores held at once, in elements (bounds the memory of long
/// inputs: queries are processed in chunks).
const SCORE_BUDGET: usize = 1 << 28;

impl CandleQwen3 {
    pub(crate) fn load(
        files: &ModelFiles,
        config: &Qwen3Config,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let probe = weights(files)?;
        let weights_path = probe.path().to_path_buf();
        let bad = |e: candle_core::Error| Error::format(&weights_path, e.to_string());
        // SAFETY: as for `TensorFile::open`: read-only maps of files that are
        // not modified while the model loads.
        let root = unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, device) }
            .map_err(bad)?;
        let vb = if probe.prefix().is_empty() {
            root
        } else {
            root.pp(probe.prefix().trim_end_matches('.'))
        };
        let h = config.hidden_size;
        let d = config.head_dim;
        let q_width = config.num_attention_heads * d;
        let kv_width = config.num_key_value_heads * d;
        let i = config.intermediate_size;
        let linear = |vb: VarBuilder,
                      inputs: usize,
                      outputs: usize,
                      bias: bool|
         -> candle_core::Result<CandleLinear> {
            let weight = vb.get((outputs, inputs), "weight")?;
            let bias = if bias {
                Some(vb.get(outputs, "bias")?)
            } else {
                None
            };
            Ok(CandleLinear::new(weight, bias))
        };
        let b = config.attention_bias;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let vb = vb.pp(format!("layers.{l}"));
            let a = vb.pp("self_attn");
            let m = vb.pp("mlp");
            layers.push(CandleLayer {
                input_norm: vb.get(h, "input_layernorm.weight").map_err(bad)?,
                q: linear(a.pp("q_proj"), h, q_width, b).map_err(bad)?,
                k: linear(a.pp("k_proj"), h, kv_width, b).map_err(bad)?,
                v: linear(a.pp("v_proj"), h, kv_width, b).map_err(bad)?,
                q_norm: a.get(d, "q_norm.weight").map_err(bad)?,
                k_norm: a.get(d, "k_norm.weight").map_err(bad)?,
                o: linear(a.pp("o_proj"), q_width, h, b).map_err(bad)?,
                post_norm: vb.get(h, "post_attention_layernorm.weight").map_err(bad)?,
                gate: linear(m.pp("gate_proj"), h, i, false).map_err(bad)?,
                up: linear(m.pp("up_proj"), h, i, false).map_err(bad)?,
                down: linear(m.pp("down_proj"), i, h, false).map_err(bad)?,
            });
        }
        Ok(Self {
            embed: vb.get((config.vocab_size, h), PROBE).map_err(bad)?,
            norm: vb.get(h, "norm.weight").map_err(bad)?,
            layers,
            config: config.clone(),
            device: device.clone(),
            dtype,
        })
    }

    fn run(&self, batch: &[&Tokens], pool: Pool) -> candle_core::Result<Vec<f32>> {
        let c = &self.config;
        let eps = c.rms_norm_eps as f32;
        let (nq, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let lengths: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
        let b = batch.len();
        let len = lengths.iter().copied().max().unwrap_or(0);
        // Right padding (token 0): the causal mask keeps it out of view.
        let ids: Vec<u32> = batch
            .iter()
            .flat_map(|t| {
                t.ids
                    .iter()
                    .copied()
                    .chain(std::iter::repeat_n(0, len - t.ids.len()))
            })
            .collect();
        let ids = Tensor::from_vec(ids, b * len, &self.device)?;
        let mut x = self
            .embed
            .index_select(&ids, 0)?
            .reshape((b, len, c.hidden_size))?;
        let (cos, sin) = rope_tables(c, len);
        let cos = Tensor::from_vec(cos, (len, d / 2), &self.device)?.to_dtype(self.dtype)?;
        let sin = Tensor::from_vec(sin, (len, d / 2), &self.device)?.to_dtype(self.dtype)?;
        let chunk = (SCORE_BUDGET / (b * nq * len).max(1)).clamp(1, len.max(1));
        let scale = 1.0 / (d as f64).sqrt();
        for layer in &self.layers {
            let hs = candle_nn::ops::rms_norm(&x, &layer.input_norm, eps)?;
            let heads = |proj: &CandleLinear,
                         n: usize,
                         norm: Option<&Tensor>|
             -> candle_core::Result<Tensor> {
                let t = proj.forward(&hs)?.reshape((b, len, n, d))?;
                let t = match norm {
                    Some(w) => candle_nn::ops::rms_norm(&t, w, eps)?,
                    None => t,
                };
                t.transpose(1, 2)?.contiguous()
            };
            let q = heads(&layer.q, nq, Some(&layer.q_norm))?;
            let k = heads(&layer.k, nkv, Some(&layer.k_norm))?;
            let v = heads(&layer.v, nkv, None)?;
            let q = candle_nn::rotary_emb::rope(&q, &cos, &sin)?;
            let k = candle_nn::rotary_emb::rope(&k, &cos, &sin)?;
            let k = candle_transformers::utils::repeat_kv(k, nq / nkv)?.contiguous()?;
            let v = candle_transformers::utils::repeat_kv(v, nq / nkv)?.contiguous()?;
            let kt = k.t()?;
            let mut parts = Vec::new();
            let mut c0 = 0;
            while c0 < len {
                let n = chunk.min(len - c0);
                let mask: Vec<f32> = (0..n)
                    .flat_map(|r| {
                        (0..len).map(move |j| if j <= c0 + r { 0.0 } else { f32::NEG_INFINITY })
                    })
                    .collect();
                let mask = Tensor::from_vec(mask, (n, len), &self.device)?.to_dtype(self.dtype)?;
                let scores = (q.narrow(2, c0, n)?.matmul(&kt)? * scale)?.broadcast_add(&mask)?;
                let probs = candle_nn::ops::softmax_last_dim(&scores)?;
                parts.push(probs.matmul(&v)?);
                c0 += n;
            }
            let context = Tensor::cat(&parts, 2)?
                .transpose(1, 2)?
                .reshape((b, len, nq * d))?;
            x = (x + layer.o.forward(&context)?)?;
            let hs = candle_nn::ops::rms_norm(&x, &layer.post_norm, eps)?;
            let gate = candle_nn::ops::silu(&layer.gate.forward(&hs)?)?;
            let ff = layer.down.forward(&(gate * layer.up.forward(&hs)?)?)?;
            x = (x + ff)?;
        }
        let x = candle_nn::ops::rms_norm(&x, &self.norm, eps)?;
        pool_padded(&x, &lengths, pool)
    }
}

impl Model for CandleQwen3 {
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>> {
        self.run(batch, pool)
            .map_err(|e| Error::Inference(e.to_string()))
    }
}
