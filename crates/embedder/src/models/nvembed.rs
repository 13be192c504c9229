//! NV-Embed-v1 (`model_type` `nvembed`): a Mistral decoder (`text_config`,
//! `bidirectional_mistral`) whose final states go through a latent-attention
//! block before a masked mean, as its `modeling_nvembed.py` defines it:
//!
//! 1. `x + to_out(attend(to_q(LN(x)), LN_ctx(latents)))`: each token's state
//!    attends (`num_cross_heads` heads of `cross_dim_head`, scale
//!    `cross_dim_head^-½`) to `num_latents_value` learned latents, whose keys
//!    and values (`to_kv`, first half keys) do not depend on the input and
//!    are computed once at load;
//! 2. `x + net.2(GEGLU(net.0(LN(x))))`: a feed-forward of 4 × the width,
//!    GEGLU with the exact (erf) GELU on the second half, `a · gelu(g)`;
//! 3. the mean over the pooling mask (the instruction's tokens left out),
//!    then L2 normalisation (`output_normalize`).
//!
//! Both steps work on each token alone, so only the pooled tokens go
//! through them. LayerNorms use PyTorch's default epsilon, 1e-5.
//!
//! The decoder runs bidirectionally (NV-Embed's training, `mask_type` `b`):
//! no causal mask and no sliding window. The official SkillRet evaluation
//! runs it otherwise under transformers 5 (see [`Attention`]).

use std::path::Path;

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Linear as CandleLinear, VarBuilder};
use rayon::prelude::*;

use super::Pool;
use super::decoder::{CandleRowPooling, RowPooling};
use super::mistral::MistralConfig;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use engine::kernels;
use engine::linear::{Linear, Plan, Role};
use engine::tile::View;

/// Name prefix of the decoder's tensors.
pub(crate) const PREFIXES: [&str; 1] = ["embedding_model."];

/// Name prefix of the latent-attention block's tensors.
const LATENT: &str = "latent_attention_model.";

/// PyTorch's `nn.LayerNorm` default.
const LAYER_NORM_EPS: f32 = 1e-5;

/// Rows of the latent block run at once (bounds its buffers).
const ROWS: usize = 256;

/// How NV-Embed's decoder attends (`attention = "official"` or
/// `"bidirectional"` in a run configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// As the official SkillRet evaluation runs it (transformers 5 with its
    /// `_compat.py`, which gives NV-Embed's `BidirectionalMistralModel`
    /// the forward of `MistralModel`): inputs go in groups of 4 (its batch
    /// size) in the order given; a group whose inputs all have the same
    /// length, shorter than the sliding window, runs bidirectionally (SDPA
    /// skips the mask, and NV-Embed's layers are not causal); any other
    /// group (padded, or as long as the window) runs causally in the
    /// sliding window.
    #[default]
    Official,
    /// As NV-Embed was trained (and its own code under transformers 4):
    /// every token sees every token, no window.
    Bidirectional,
}

impl Attention {
    /// The name used in configs.
    pub fn name(self) -> &'static str {
        match self {
            Self::Official => "official",
            Self::Bidirectional => "bidirectional",
        }
    }
}

impl std::str::FromStr for Attention {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "official" => Ok(Self::Official),
            "bidirectional" => Ok(Self::Bidirectional),
            other => Err(format!(
                "{other:?} is not an NV-Embed attention (official, bidirectional)"
            )),
        }
    }
}

/// The official evaluation's batch size for NV-Embed-v1
/// (`skillret/config.py`).
pub(crate) const OFFICIAL_GROUP: usize = 4;

/// The latent-attention block's shape (`latent_attention_config`; absent
/// fields take the defaults of NV-Embed's `configuration_nvembed.py`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[non_exhaustive]
pub struct LatentConfig {
    /// Learned latents the tokens attend to.
    #[serde(rename = "num_latents_value", default = "default_latents")]
    pub latents: usize,
    /// Width of the latents (the decoder's width).
    #[serde(default = "default_width")]
    pub latent_dim: usize,
    /// Width of the attention's context input (the decoder's width).
    #[serde(default = "default_width")]
    pub hidden_dim: usize,
    /// Attention heads.
    #[serde(rename = "num_cross_heads", default = "default_heads")]
    pub heads: usize,
    /// Width of one head.
    #[serde(rename = "cross_dim_head", default = "default_width")]
    pub head_dim: usize,
    /// L2-normalise the pooled vector.
    #[serde(default = "default_true")]
    pub output_normalize: bool,
}

fn default_latents() -> usize {
    512
}
fn default_width() -> usize {
    4096
}
fn default_heads() -> usize {
    8
}
fn default_true() -> bool {
    true
}
fn default_padding_side() -> String {
    "right".to_owned()
}

/// NV-Embed's `config.json`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct NvEmbedConfig {
    /// The decoder (`text_config`), bidirectional.
    pub mistral: MistralConfig,
    /// The pooling block.
    pub latent: LatentConfig,
    /// Whether the instruction's tokens are left out of the mean
    /// (`is_mask_instruction`, with right padding).
    pub mask_instruction: bool,
    /// Whether every text gets the tokenizer's end-of-sequence token
    /// appended, as text (`add_eos`).
    pub add_eos: bool,
}

#[derive(serde::Deserialize)]
struct RawConfig {
    text_config: serde_json::Value,
    #[serde(default)]
    latent_attention_config: Option<LatentConfig>,
    #[serde(default = "default_true")]
    is_mask_instruction: bool,
    #[serde(default = "default_true")]
    add_eos: bool,
    #[serde(default = "default_padding_side")]
    padding_side: String,
}

impl NvEmbedConfig {
    pub(crate) fn parse(path: &Path, value: serde_json::Value) -> Result<Self> {
        let raw: RawConfig = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::format(path, format!("{}: {}", e.path(), e.inner())))?;
        let mut mistral = MistralConfig::parse(path, raw.text_config)?;
        // NV-Embed's layers are not causal and its own forward builds no
        // window; the official runs' causal groups put both back per call.
        mistral.spec.causal = false;
        for layer in &mut mistral.spec.layers {
            layer.window = None;
        }
        let latent = match raw.latent_attention_config {
            Some(l) => l,
            None => serde_json::from_value(serde_json::json!({}))
                .map_err(|e| Error::format(path, e.to_string()))?,
        };
        let bad = |field: &str, message: String| {
            Err(Error::format(
                path,
                format!("latent_attention_config.{field}: {message}"),
            ))
        };
        let h = mistral.hidden_size;
        if latent.latent_dim != h || latent.hidden_dim != h {
            return bad(
                "latent_dim",
                format!(
                    "latent_dim {} and hidden_dim {} must equal the decoder's hidden_size {h}",
                    latent.latent_dim, latent.hidden_dim
                ),
            );
        }
        if latent.latents == 0 || latent.heads == 0 || latent.head_dim == 0 {
            return bad(
                "num_latents_value",
                "num_latents_value, num_cross_heads and cross_dim_head must be positive".to_owned(),
            );
        }
        if raw.padding_side != "right" && raw.padding_side != "left" {
            return Err(Error::format(
                path,
                format!(
                    "padding_side: {:?} is neither \"right\" nor \"left\"",
                    raw.padding_side
                ),
            ));
        }
        Ok(Self {
            mistral,
            latent,
            // NV-Embed masks the instruction only with right padding.
            mask_instruction: raw.is_mask_instruction && raw.padding_side == "right",
            add_eos: raw.add_eos,
        })
    }
}

fn layer_norm(w: &Weights, name: &str, width: usize) -> Result<(Vec<f32>, Vec<f32>)> {
    Ok((
        w.get_full(&format!("{LATENT}{name}.weight"), &[width])?,
        w.get_full(&format!("{LATENT}{name}.bias"), &[width])?,
    ))
}

fn matrix(w: &Weights, name: &str, inputs: usize, outputs: usize) -> Result<Vec<f32>> {
    w.get_full(&format!("{LATENT}{name}.weight"), &[outputs, inputs])
}

/// The latents' keys (times the attention scale) and values, `latents ×
/// inner` each: `to_kv(LN_ctx(latents))`, which no input changes.
fn keys_values(w: &Weights, c: &LatentConfig) -> Result<(Vec<f32>, Vec<f32>)> {
    let (d, n, inner) = (c.latent_dim, c.latents, c.heads * c.head_dim);
    let mut latents = w.get_full(&format!("{LATENT}latents"), &[n, d])?;
    let (nw, nb) = layer_norm(w, "cross_attend_blocks.0.norm_context", d)?;
    kernels::layer_norm(&mut latents, d, &nw, &nb, LAYER_NORM_EPS);
    let to_kv = Linear::new(
        matrix(w, "cross_attend_blocks.0.fn.to_kv", d, 2 * inner)?,
        None,
        d,
        2 * inner,
    );
    let mut kv = vec![0.0f32; n * 2 * inner];
    to_kv.forward(&latents, n, &mut kv, None);
    let scale = (c.head_dim as f32).powf(-0.5);
    let mut keys = Vec::with_capacity(n * inner);
    let mut values = Vec::with_capacity(n * inner);
    for row in kv.chunks_exact(2 * inner) {
        keys.extend(row[..inner].iter().map(|k| k * scale));
        values.extend_from_slice(&row[inner..]);
    }
    Ok((keys, values))
}

/// The latent-attention block and masked mean on the native engine.
pub(crate) struct LatentPooler {
    config: LatentConfig,
    norm: (Vec<f32>, Vec<f32>),
    to_q: Linear,
    keys: Vec<f32>,
    values: Vec<f32>,
    to_out: Linear,
    ff_norm: (Vec<f32>, Vec<f32>),
    ff_in: Linear,
    ff_out: Linear,
}

impl LatentPooler {
    pub(crate) fn load(w: &Weights, c: &LatentConfig, plan: Plan) -> Result<Self> {
        let (d, inner) = (c.latent_dim, c.heads * c.head_dim);
        let (keys, values) = keys_values(w, c)?;
        let linear = |name: &str, inputs: usize, outputs: usize, bias: bool| -> Result<Linear> {
            let bias = bias
                .then(|| w.get_full(&format!("{LATENT}{name}.bias"), &[outputs]))
                .transpose()?;
            Ok(Linear::new(
                matrix(w, name, inputs, outputs)?,
                bias,
                inputs,
                outputs,
            ))
        };
        let mut pooler = Self {
            norm: layer_norm(w, "cross_attend_blocks.0.norm", d)?,
            to_q: linear("cross_attend_blocks.0.fn.to_q", d, inner, false)?,
            keys,
            values,
            to_out: linear("cross_attend_blocks.0.fn.to_out", inner, d, false)?,
            ff_norm: layer_norm(w, "cross_attend_blocks.1.norm", d)?,
            ff_in: linear("cross_attend_blocks.1.fn.net.0", d, 8 * d, true)?,
            ff_out: linear("cross_attend_blocks.1.fn.net.2", 4 * d, d, true)?,
            config: c.clone(),
        };
        for (linear, role) in [
            (&mut pooler.to_q, Role::AttentionIn),
            (&mut pooler.to_out, Role::AttentionOut),
            (&mut pooler.ff_in, Role::FeedForwardIn),
            (&mut pooler.ff_out, Role::FeedForwardOut),
        ] {
            linear.prepare(plan.of(role));
        }
        Ok(pooler)
    }

    /// The block on `m` rows of `x` (`m × width`), in place.
    fn apply(&self, x: &mut [f32], m: usize) {
        let c = &self.config;
        let (d, n, dh) = (c.latent_dim, c.latents, c.head_dim);
        let inner = c.heads * dh;
        let x = &mut x[..m * d];
        let mut normed = x.to_vec();
        layer_norm_rows(&mut normed, d, &self.norm);
        let mut q = vec![0.0f32; m * inner];
        self.to_q.forward(&normed, m, &mut q, None);
        let mut context = vec![0.0f32; m * inner];
        let mut scores = vec![0.0f32; m * n];
        for h in 0..c.heads {
            let at = h * dh;
            kernels::matmul(
                &mut scores,
                n,
                View::rows(&q[at..], m, dh, inner),
                View::transposed(&self.keys[at..], dh, n, inner),
                false,
                true,
            );
            scores.par_chunks_mut(n).for_each(|row| {
                let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
                kernels::online_softmax(row, n, 1.0, &mut max, &mut sum);
                let inv = 1.0 / sum;
                for p in row.iter_mut() {
                    *p *= inv;
                }
            });
            kernels::matmul(
                &mut context[at..],
                inner,
                View::rows(&scores, m, n, n),
                View::rows(&self.values[at..], n, dh, inner),
                false,
                true,
            );
        }
        let mut y = vec![0.0f32; m * d];
        self.to_out.forward(&context, m, &mut y, Some(x));
        x.copy_from_slice(&y);
        normed.copy_from_slice(x);
        layer_norm_rows(&mut normed, d, &self.ff_norm);
        let mut up = vec![0.0f32; m * 8 * d];
        self.ff_in.forward(&normed, m, &mut up, None);
        let mut act = vec![0.0f32; m * 4 * d];
        act.par_chunks_mut(4 * d)
            .zip(up.par_chunks_mut(8 * d))
            .for_each(|(act, row)| {
                let (a, g) = row.split_at_mut(4 * d);
                kernels::gelu(g, false);
                for ((o, &a), &g) in act.iter_mut().zip(a.iter()).zip(g.iter()) {
                    *o = a * g;
                }
            });
        self.ff_out.forward(&act, m, &mut y, Some(x));
        x.copy_from_slice(&y);
    }
}

impl RowPooling for LatentPooler {
    /// The pooled vector of each sequence (states laid end to end, after the
    /// decoder's final norm): the block on the tokens the mean keeps (each
    /// sequence's first `pool.skip` left out), then their mean.
    fn pool(&self, states: &[f32], lengths: &[usize], pool: Pool) -> Vec<f32> {
        let d = self.config.latent_dim;
        let mut out = vec![0.0f32; lengths.len() * d];
        // (sequence, first row, rows) of the kept spans.
        let mut spans = Vec::with_capacity(lengths.len());
        let mut row = 0;
        for (s, &len) in lengths.iter().enumerate() {
            let from = pool.skip.min(len);
            spans.push((s, row + from, len - from));
            row += len;
        }
        let kept: usize = spans.iter().map(|s| s.2).sum();
        let mut rows = Vec::with_capacity(kept * d);
        for &(_, first, count) in &spans {
            rows.extend_from_slice(&states[first * d..(first + count) * d]);
        }
        for block in rows.chunks_mut(ROWS * d) {
            let m = block.len() / d;
            self.apply(block, m);
        }
        let mut at = 0;
        for &(s, _, count) in &spans {
            let target = &mut out[s * d..(s + 1) * d];
            for r in at..at + count {
                for (o, v) in target.iter_mut().zip(&rows[r * d..(r + 1) * d]) {
                    *o += v;
                }
            }
            let n = count.max(1) as f32;
            for o in target.iter_mut() {
                *o /= n;
            }
            at += count;
        }
        out
    }
}

fn layer_norm_rows(xs: &mut [f32], width: usize, (w, b): &(Vec<f32>, Vec<f32>)) {
    xs.par_chunks_mut(width * 64)
        .for_each(|rows| kernels::layer_norm(rows, width, w, b, LAYER_NORM_EPS));
}

/// The same block as a candle graph (the CUDA path), on every position of
/// a right-padded batch (`batch × len × width`); padding is left out by
/// the mean that follows.
pub(crate) struct CandleLatent {
    config: LatentConfig,
    norm: (Tensor, Tensor),
    to_q: CandleLinear,
    /// `heads × latents × head_dim`, keys times the scale.
    keys: Tensor,
    values: Tensor,
    to_out: CandleLinear,
    ff_norm: (Tensor, Tensor),
    ff_in: CandleLinear,
    ff_out: CandleLinear,
}

/// Scores held at once, in elements (queries are processed in chunks).
const SCORE_BUDGET: usize = 1 << 26;

impl CandleLatent {
    pub(crate) fn load(
        files: &ModelFiles,
        w: &Weights,
        c: &LatentConfig,
        device: &Device,
        dtype: DType,
    ) -> Result<Self> {
        let path = w.path().to_path_buf();
        let bad = |e: candle_core::Error| Error::format(&path, e.to_string());
        // SAFETY: as for `TensorFile::open`: read-only maps of files that are
        // not modified while the model loads.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, device) }
            .map_err(bad)?
            .pp(LATENT.trim_end_matches('.'));
        let (d, n, dh, heads) = (c.latent_dim, c.latents, c.head_dim, c.heads);
        let inner = heads * dh;
        let norm = |name: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                vb.get(d, &format!("{name}.weight")).map_err(bad)?,
                vb.get(d, &format!("{name}.bias")).map_err(bad)?,
            ))
        };
        let linear = |name: &str, inputs: usize, outputs: usize, bias: bool| {
            let weight = vb
                .get((outputs, inputs), &format!("{name}.weight"))
                .map_err(bad)?;
            let bias = bias
                .then(|| vb.get(outputs, &format!("{name}.bias")))
                .transpose()
                .map_err(bad)?;
            Ok::<_, Error>(CandleLinear::new(weight, bias))
        };
        // Keys and values once, in f32 as the native engine computes them.
        let (keys, values) = keys_values(w, c)?;
        let heads_first = |v: Vec<f32>, dtype: DType| -> Result<Tensor> {
            Tensor::from_vec(v, (n, heads, dh), device)
                .and_then(|t| t.transpose(0, 1)?.contiguous()?.to_dtype(dtype))
                .map_err(bad)
        };
        Ok(Self {
            norm: norm("cross_attend_blocks.0.norm")?,
            to_q: linear("cross_attend_blocks.0.fn.to_q", d, inner, false)?,
            keys: heads_first(keys, dtype)?,
            values: heads_first(values, dtype)?,
            to_out: linear("cross_attend_blocks.0.fn.to_out", inner, d, false)?,
            ff_norm: norm("cross_attend_blocks.1.norm")?,
            ff_in: linear("cross_attend_blocks.1.fn.net.0", d, 8 * d, true)?,
            ff_out: linear("cross_attend_blocks.1.fn.net.2", 4 * d, d, true)?,
            config: c.clone(),
        })
    }
}

impl CandleRowPooling for CandleLatent {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let c = &self.config;
        let (b, len, d) = x.dims3()?;
        let (heads, dh) = (c.heads, c.head_dim);
        let normed = candle_nn::ops::layer_norm(x, &self.norm.0, &self.norm.1, LAYER_NORM_EPS)?;
        let q = self
            .to_q
            .forward(&normed)?
            .reshape((b, len, heads, dh))?
            .transpose(1, 2)?
            .contiguous()?;
        let kt = self.keys.t()?;
        let chunk = (SCORE_BUDGET / (b * heads * c.latents).max(1)).clamp(1, len.max(1));
        let mut parts = Vec::new();
        let mut c0 = 0;
        while c0 < len {
            let m = chunk.min(len - c0);
            let scores = q.narrow(2, c0, m)?.broadcast_matmul(&kt)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?;
            parts.push(probs.broadcast_matmul(&self.values)?);
            c0 += m;
        }
        let context = Tensor::cat(&parts, 2)?
            .transpose(1, 2)?
            .reshape((b, len, heads * dh))?;
        let x = (x + self.to_out.forward(&context)?)?;
        let normed =
            candle_nn::ops::layer_norm(&x, &self.ff_norm.0, &self.ff_norm.1, LAYER_NORM_EPS)?;
        let up = self.ff_in.forward(&normed)?;
        let a = up.narrow(D::Minus1, 0, 4 * d)?;
        let g = up.narrow(D::Minus1, 4 * d, 4 * d)?.gelu_erf()?;
        x + self.ff_out.forward(&(a * g)?)?
    }
}
