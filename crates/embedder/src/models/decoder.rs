//! The decoder engine the Qwen3, Gemma3 and Mistral families share: pre-norm
//! layers with RMSNorm, rotary positions, grouped-query attention (causal or
//! bidirectional, full or in a sliding window, with or without per-head
//! RMSNorm of queries and keys) and a gated feed-forward (SwiGLU or GeGLU).
//! A family's file reads its `config.json` into a [`Spec`]; the weights,
//! the native forward pass and the candle graph are here.
//!
//! Tensor names are the ones transformers gives all three
//! (`embed_tokens`, `layers.N.self_attn.{q,k,v,o}_proj`, `mlp.{gate,up,down}_proj`,
//! `input_layernorm`, `post_attention_layernorm`, `norm`); Gemma's four
//! norms per layer add `pre_feedforward_layernorm` and
//! `post_feedforward_layernorm`, and make `post_attention_layernorm` the
//! norm of the attention's output rather than of the feed-forward's input.
//!
//! Native engine: sequences laid end to end, attention tiled with an online
//! softmax (memory linear in the length, sliding windows included), the
//! feed-forward run in blocks of rows. candle engine: the same graph on
//! unpadded batches (`varlen.rs`: device-side positions, rotary tables and
//! masks; exact or flash attention), the CUDA path.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Linear as CandleLinear, VarBuilder};
use rayon::prelude::*;

use super::lora::Lora;
use super::profile::stage;
pub(crate) use super::varlen::Rope;
use super::varlen::{self, Packed, RopeTables, rope_tables};
use super::{Mask, Model, Pool, Tokens, gather_picked, picks, pool_states};
use crate::AttentionKernel;
use crate::config::Pooling;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use engine::attention::{self, Heads, QkvLayout};
use engine::kernels;
use engine::lanes::{Reused, sized};
use engine::linear::{Arithmetic, Hidden, Linear, Plan, Role};

/// The feed-forward's gate activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Activation {
    /// `silu(gate) · up` (Qwen3, Mistral).
    Silu,
    /// `gelu_tanh(gate) · up` (Gemma).
    GeluTanh,
}

/// What differs between one decoder layer and the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LayerKind {
    /// The sliding window (see [`Heads::window`]), or none.
    pub(crate) window: Option<usize>,
    /// Index into [`Spec::ropes`].
    pub(crate) rope: usize,
}

/// A decoder's shape and arithmetic, as its family's config says.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spec {
    pub(crate) vocab: usize,
    pub(crate) hidden: usize,
    pub(crate) intermediate: usize,
    pub(crate) query_heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    pub(crate) eps: f64,
    /// Whether token t sees only tokens ≤ t.
    pub(crate) causal: bool,
    /// The factor of `Q·Kᵀ`.
    pub(crate) scale: f32,
    /// Token embeddings times √hidden (Gemma).
    pub(crate) scaled_embeddings: bool,
    /// RMSNorm computes `x · (1 + w)` (Gemma), not `x · w`.
    pub(crate) unit_offset: bool,
    /// Per-head RMSNorm of queries and keys (Qwen3, Gemma3).
    pub(crate) qk_norm: bool,
    /// Norms after the attention and after the feed-forward too (Gemma).
    pub(crate) sandwich: bool,
    pub(crate) activation: Activation,
    /// Biases on the query, key, value and output projections.
    pub(crate) attention_bias: bool,
    pub(crate) ropes: Vec<Rope>,
    /// One per layer.
    pub(crate) layers: Vec<LayerKind>,
}

impl Spec {
    fn heads(&self, kind: LayerKind, mask: Mask) -> Heads {
        let (causal, window) = match mask {
            Mask::Configured => (self.causal, kind.window),
            Mask::Causal(window) => (true, window),
        };
        let mut heads = Heads::new(self.query_heads, self.kv_heads, self.head_dim, causal);
        heads.window = window;
        heads.scale = self.scale;
        heads
    }

    /// Checks what every family needs: heads that group, an even head
    /// width, positive sizes.
    pub(crate) fn check(&self) -> std::result::Result<(), (&'static str, String)> {
        let (q, kv, d) = (self.query_heads, self.kv_heads, self.head_dim);
        if q == 0 || kv == 0 || !q.is_multiple_of(kv) {
            return Err((
                "num_key_value_heads",
                format!("{kv} does not divide num_attention_heads {q}"),
            ));
        }
        if d == 0 || d % 2 == 1 {
            return Err(("head_dim", format!("{d} is not a positive even width")));
        }
        if self.hidden == 0 || self.vocab == 0 || self.intermediate == 0 {
            return Err((
                "hidden_size",
                "hidden_size, intermediate_size and vocab_size must be positive".to_owned(),
            ));
        }
        if let Some(w) = self
            .layers
            .iter()
            .find_map(|l| l.window.filter(|&w| w == 0))
        {
            return Err(("sliding_window", format!("{w} is not a window")));
        }
        Ok(())
    }
}

/// `rope_parameters` of a config with one rotary base (transformers 5).
#[derive(serde::Deserialize)]
pub(crate) struct RopeParameters {
    pub(crate) rope_theta: Option<f64>,
    pub(crate) rope_type: Option<String>,
}

/// RMSNorm's epsilon where a config leaves it out.
pub(crate) fn default_eps() -> f64 {
    1e-6
}

/// The gate activation where a config leaves it out.
pub(crate) fn default_act() -> String {
    "silu".to_owned()
}

/// The one rotary base of a Qwen3 or Mistral config: `rope_theta`, else
/// transformers 5's `rope_parameters.rope_theta`, else 10,000. A rotary
/// type other than the default, or a scaling, is refused naming its field.
pub(crate) fn single_rope_base(
    path: &Path,
    rope_theta: Option<f64>,
    parameters: Option<&RopeParameters>,
    scaling: Option<&serde_json::Value>,
) -> Result<f64> {
    let bad = |field: &str, message: String| Error::format(path, format!("{field}: {message}"));
    if let Some(kind) = parameters
        .and_then(|r| r.rope_type.as_deref())
        .filter(|t| *t != "default")
    {
        return Err(bad(
            "rope_parameters.rope_type",
            format!("{kind:?} is not supported (default)"),
        ));
    }
    if scaling.is_some_and(|v| !v.is_null()) {
        return Err(bad(
            "rope_scaling",
            "scaled rotary positions are not supported".to_owned(),
        ));
    }
    let theta = rope_theta
        .or(parameters.and_then(|r| r.rope_theta))
        .unwrap_or(10_000.0);
    if !(theta.is_finite() && theta > 1.0) {
        return Err(bad("rope_theta", format!("{theta} is not a rotary base")));
    }
    Ok(theta)
}

/// The width of one head: `head_dim`, else `hidden_size / heads` where it
/// divides.
pub(crate) fn head_dim(
    path: &Path,
    explicit: Option<usize>,
    hidden: usize,
    heads: usize,
) -> Result<usize> {
    match explicit {
        Some(d) => Ok(d),
        None if heads > 0 && hidden.is_multiple_of(heads) => Ok(hidden / heads),
        None => Err(Error::format(
            path,
            format!(
                "head_dim: absent, and hidden_size {hidden} is not a multiple of {heads} heads"
            ),
        )),
    }
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

/// The embedding matrix's name under the prefix.
pub(crate) const EMBEDDINGS: &str = "embed_tokens.weight";

/// The factor of the token embeddings, √hidden in f32: transformers rounds
/// it to the model's dtype at run time (`embed_scale.to(weight.dtype)`), and
/// this engine computes in f32, as transformers does in float32.
fn embedding_scale(spec: &Spec) -> Option<f32> {
    spec.scaled_embeddings.then(|| (spec.hidden as f32).sqrt())
}

struct Layer {
    input_norm: Vec<f32>,
    /// Query, key and value in one product.
    qkv: Linear,
    q_norm: Option<Vec<f32>>,
    k_norm: Option<Vec<f32>>,
    output: Linear,
    /// Norm of the attention's output (sandwich layers).
    attention_out_norm: Option<Vec<f32>>,
    /// Norm of the feed-forward's input.
    feed_forward_norm: Vec<f32>,
    /// Gate and up projections in one product (gate first).
    gate_up: Linear,
    down: Linear,
    /// Norm of the feed-forward's output (sandwich layers).
    feed_forward_out_norm: Option<Vec<f32>>,
    kind: LayerKind,
}

/// The engine's name for a feed-forward block's activation.
fn feed_forward_activation(activation: Activation) -> engine::linear::Activation {
    match activation {
        Activation::Silu => engine::linear::Activation::SiluGate,
        Activation::GeluTanh => engine::linear::Activation::GeluTanhGate,
    }
}

/// Rows of the feed-forward run at once (bounds its buffers).
const FEED_FORWARD_ROWS: usize = 1024;

/// Rows per block of the layer's part after attention: its feed-forward
/// activations (`3 × intermediate` per row) in about 768 KiB of a core's
/// L2, in whole 6-row tiles of the packed kernels, 12 to 48 rows.
fn fused_rows(intermediate: usize) -> usize {
    let rows = (768 << 10) / (3 * intermediate * 4);
    (rows / 6 * 6).clamp(12, 48)
}

impl Layer {
    /// The layer after attention on rows of the residual stream `x`, given
    /// attention's output for them (`context`): the output projection, the
    /// feed-forward (in chunks of [`FEED_FORWARD_ROWS`]), each with its
    /// residual and, in sandwich layers, its norm.
    fn after_attention(&self, c: &Spec, x: &mut [f32], context: &[f32], s: &mut After) {
        let (h, eps) = (c.hidden, c.eps as f32);
        let m = x.len() / h;
        let y = sized(&mut s.y, m * h);
        match &self.attention_out_norm {
            None => {
                self.output.forward(context, m, y, Some(x));
                x.copy_from_slice(y);
            }
            Some(norm) => {
                self.output.forward(context, m, y, None);
                kernels::rms_norm_rows(y, h, norm, eps);
                kernels::add_rows(x, y, h);
            }
        }
        let normed = sized(&mut s.normed, m * h);
        normed.copy_from_slice(x);
        kernels::rms_norm_rows(normed, h, &self.feed_forward_norm, eps);
        let activation = feed_forward_activation(c.activation);
        for r0 in (0..m).step_by(FEED_FORWARD_ROWS) {
            let k = (m - r0).min(FEED_FORWARD_ROWS);
            let span = r0 * h..(r0 + k) * h;
            // The gate applied as the sums leave the tiles where both
            // products run on AMX (no f32 gate/up activations in memory).
            self.gate_up.forward_activated(
                &normed[span.clone()],
                k,
                activation,
                &mut s.hidden,
                &self.down,
            );
            let residual = self
                .feed_forward_out_norm
                .is_none()
                .then(|| &x[span.clone()]);
            self.down
                .forward_hidden(&s.hidden, k, &mut y[span], residual);
        }
        match &self.feed_forward_out_norm {
            None => x.copy_from_slice(y),
            Some(norm) => {
                kernels::rms_norm_rows(y, h, norm, eps);
                kernels::add_rows(x, y, h);
            }
        }
    }
}

/// The token-embedding matrix: f32, or kept in bf16 as stored where the
/// linear layers do not run in f32 (half the memory; rows widen on lookup).
enum TokenEmbeddings {
    F32(Vec<f32>),
    Bf16(Vec<u16>),
}

impl TokenEmbeddings {
    fn row_into(&self, id: usize, out: &mut [f32]) {
        let h = out.len();
        match self {
            Self::F32(m) => out.copy_from_slice(&m[id * h..(id + 1) * h]),
            Self::Bf16(m) => {
                for (o, &b) in out.iter_mut().zip(&m[id * h..(id + 1) * h]) {
                    *o = f32::from_bits(u32::from(b) << 16);
                }
            }
        }
    }
}

/// A pooling over every row of the final states (`lengths` end to end), set
/// by a family: NV-Embed's latent attention (`nvembed.rs`).
pub(crate) trait RowPooling: Send + Sync {
    fn pool(&self, states: &[f32], lengths: &[usize], pool: Pool) -> Vec<f32>;
}

/// [`RowPooling`]'s block on the candle path, on `[1, rows, hidden]`.
pub(crate) trait CandleRowPooling: Send + Sync {
    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor>;
}

/// Decoder weights ready for the native forward pass.
pub(crate) struct NativeDecoder {
    spec: Spec,
    embed: TokenEmbeddings,
    embed_scale: Option<f32>,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    /// NV-Embed's pooling block, applied before the mean.
    pub(crate) latent: Option<Box<dyn RowPooling>>,
    buffers: Reused<Buffers>,
    /// Whether attention's products may run in bf16 (the model's products
    /// do: bf16 or int8).
    bf16_attention: bool,
}

/// The activations of a forward pass, kept from one batch to the next.
#[derive(Default)]
struct Buffers {
    x: Vec<f32>,
    normed: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    /// The unblocked path's.
    after: After,
    attention: attention::Packed,
}

/// The activations of a layer's part after attention (one per parallel
/// task where it runs in blocks).
#[derive(Default)]
struct After {
    y: Vec<f32>,
    normed: Vec<f32>,
    hidden: Hidden,
}

/// Where the layer weights of a decoder are read: the checkpoint, and the
/// LoRA adapter merged into its projections (if any).
struct Source<'a> {
    w: &'a Weights,
    lora: Option<&'a Lora>,
}

impl Source<'_> {
    fn norm(&self, name: &str, width: usize, unit_offset: bool) -> Result<Vec<f32>> {
        let mut v = self.w.get(&format!("{name}.weight"), &[width])?;
        if unit_offset {
            for x in &mut v {
                *x += 1.0;
            }
        }
        Ok(v)
    }

    /// `name.weight` (`outputs × inputs`) with the adapter's `B·A` merged,
    /// and `name.bias` where there is one.
    fn matrix(
        &self,
        name: &str,
        inputs: usize,
        outputs: usize,
        bias: bool,
    ) -> Result<(Vec<f32>, Option<Vec<f32>>)> {
        let mut weight = self.w.get(&format!("{name}.weight"), &[outputs, inputs])?;
        if let Some(lora) = self.lora {
            lora.merge(name, &mut weight, inputs, outputs)?;
        }
        let bias = if bias {
            Some(self.w.get(&format!("{name}.bias"), &[outputs])?)
        } else {
            None
        };
        Ok((weight, bias))
    }

    fn linear(&self, name: &str, inputs: usize, outputs: usize, bias: bool) -> Result<Linear> {
        let (weight, bias) = self.matrix(name, inputs, outputs, bias)?;
        Ok(Linear::new(weight, bias, inputs, outputs))
    }
}

/// The names of one layer's norms: attention input, attention output,
/// feed-forward input, feed-forward output.
fn norm_names(spec: &Spec, p: &str) -> [Option<String>; 4] {
    let name = |n: &str| Some(format!("{p}.{n}"));
    if spec.sandwich {
        [
            name("input_layernorm"),
            name("post_attention_layernorm"),
            name("pre_feedforward_layernorm"),
            name("post_feedforward_layernorm"),
        ]
    } else {
        [
            name("input_layernorm"),
            None,
            name("post_attention_layernorm"),
            None,
        ]
    }
}

impl NativeDecoder {
    pub(crate) fn load(w: &Weights, spec: &Spec, plan: Plan, lora: Option<&Lora>) -> Result<Self> {
        let src = Source { w, lora };
        let (h, d, i) = (spec.hidden, spec.head_dim, spec.intermediate);
        let q_width = spec.query_heads * d;
        let kv_width = spec.kv_heads * d;
        let bias = spec.attention_bias;
        let off = spec.unit_offset;
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (l, &kind) in spec.layers.iter().enumerate() {
            let p = format!("layers.{l}");
            let a = format!("{p}.self_attn");
            let m = format!("{p}.mlp");
            let [input, attention_out, feed_forward, feed_forward_out] = norm_names(spec, &p);
            let optional = |name: Option<String>, width| -> Result<Option<Vec<f32>>> {
                name.map(|n| src.norm(&n, width, off)).transpose()
            };
            let qk = |n: &str| spec.qk_norm.then(|| format!("{a}.{n}"));
            let mut layer = Layer {
                input_norm: src.norm(&input.unwrap_or_default(), h, off)?,
                qkv: Linear::stack(vec![
                    src.linear(&format!("{a}.q_proj"), h, q_width, bias)?,
                    src.linear(&format!("{a}.k_proj"), h, kv_width, bias)?,
                    src.linear(&format!("{a}.v_proj"), h, kv_width, bias)?,
                ]),
                q_norm: optional(qk("q_norm"), d)?,
                k_norm: optional(qk("k_norm"), d)?,
                output: src.linear(&format!("{a}.o_proj"), q_width, h, bias)?,
                attention_out_norm: optional(attention_out, h)?,
                feed_forward_norm: src.norm(&feed_forward.unwrap_or_default(), h, off)?,
                gate_up: Linear::stack(vec![
                    src.linear(&format!("{m}.gate_proj"), h, i, false)?,
                    src.linear(&format!("{m}.up_proj"), h, i, false)?,
                ]),
                down: src.linear(&format!("{m}.down_proj"), i, h, false)?,
                feed_forward_out_norm: optional(feed_forward_out, h)?,
                kind,
            };
            for (linear, role) in [
                (&mut layer.qkv, Role::AttentionIn),
                (&mut layer.output, Role::AttentionOut),
                (&mut layer.down, Role::FeedForwardOut),
            ] {
                linear.prepare(plan.of(role));
            }
            let activation = feed_forward_activation(spec.activation);
            layer
                .gate_up
                .prepare_activated(plan.of(Role::FeedForwardIn), activation);
            layers.push(layer);
        }
        let shape = [spec.vocab, h];
        let embed = match plan.of(Role::AttentionOut) {
            Arithmetic::F32 => TokenEmbeddings::F32(w.get(EMBEDDINGS, &shape)?),
            _ => match w.get_bf16(EMBEDDINGS, &shape)? {
                Some(bits) => TokenEmbeddings::Bf16(bits),
                None => TokenEmbeddings::F32(w.get(EMBEDDINGS, &shape)?),
            },
        };
        Ok(Self {
            embed,
            embed_scale: embedding_scale(spec),
            norm: src.norm("norm", h, off)?,
            layers,
            spec: spec.clone(),
            latent: None,
            buffers: Reused::default(),
            bf16_attention: plan.of(Role::AttentionOut) != engine::linear::Arithmetic::F32,
        })
    }
}

impl Model for NativeDecoder {
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>> {
        self.buffers
            .with(|buffers| Ok(self.run(batch, pool, buffers)))
    }

    fn lanes(&self) -> usize {
        engine::lanes::count()
    }

    fn batch_cap(&self) -> Option<usize> {
        (self.layers.iter().any(|l| l.down.block_rows() > 0))
            .then_some(engine::linear::TILE_BATCH_TOKENS)
    }
}

impl NativeDecoder {
    fn run(&self, batch: &[&Tokens], pool: Pool, b: &mut Buffers) -> Vec<f32> {
        let c = &self.spec;
        let (h, d, inter) = (c.hidden, c.head_dim, c.intermediate);
        let eps = c.eps as f32;
        let layout = QkvLayout::fused(c.heads(
            LayerKind {
                window: None,
                rope: 0,
            },
            pool.mask,
        ));
        let lengths: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
        let tokens: usize = lengths.iter().sum();
        let longest = lengths.iter().copied().max().unwrap_or(0);
        let tables: Vec<(Vec<f32>, Vec<f32>)> = c
            .ropes
            .iter()
            .map(|&r| rope_tables(r, d, longest))
            .collect();
        let positions: Vec<usize> = lengths.iter().flat_map(|&n| 0..n).collect();
        // Where pooling picks one row per sequence, the last layer's output
        // projection and feed-forward run on those rows only.
        let picked = picks(&lengths, pool);

        let x = sized(&mut b.x, tokens * h);
        for (row, &id) in x
            .chunks_exact_mut(h)
            .zip(batch.iter().flat_map(|t| t.ids.iter()))
        {
            self.embed.row_into(id as usize, row);
            if let Some(scale) = self.embed_scale {
                for v in row.iter_mut() {
                    *v *= scale;
                }
            }
        }
        sized(&mut b.normed, tokens * h);
        sized(&mut b.qkv, tokens * layout.stride);
        sized(&mut b.context, tokens * c.query_heads * d);
        let last = self.layers.len().saturating_sub(1);
        for (l, layer) in self.layers.iter().enumerate() {
            let heads = Heads {
                bf16: self.bf16_attention,
                ..c.heads(layer.kind, pool.mask)
            };
            let (cos, sin) = &tables[layer.kind.rope];
            b.normed.copy_from_slice(&b.x);
            kernels::rms_norm_rows(&mut b.normed, h, &layer.input_norm, eps);
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
                        if let Some(w) = &layer.q_norm {
                            kernels::rms_norm(head, d, w, eps);
                        }
                        rotate(head, cos, sin);
                    }
                    for head in kv[..heads.kv * d].chunks_exact_mut(d) {
                        if let Some(w) = &layer.k_norm {
                            kernels::rms_norm(head, d, w, eps);
                        }
                        rotate(head, cos, sin);
                    }
                });
            let layer_picks = picked.as_deref().filter(|_| l == last);
            attention::attention(
                heads,
                &lengths,
                layer_picks,
                &b.qkv,
                layout,
                &mut b.context,
                &mut b.attention,
            );
            // The picked rows of the residual stream to the front, as
            // attention's output holds them.
            let rows = match layer_picks {
                Some(picks) => {
                    gather_picked(&mut b.x, h, &lengths, picks);
                    picks.len()
                }
                None => tokens,
            };
            let (n, width) = (rows * h, c.query_heads * d);
            // Everything after attention is row by row: where every product
            // packs its weight once (not the `gemm` crate's f32 at AVX-512),
            // blocks of rows go through it in parallel, their activations in
            // cache, as BERT's do; else all rows at once.
            if [&layer.output, &layer.gate_up, &layer.down]
                .iter()
                .all(|l| l.is_packed())
            {
                // More rows where the products run on AMX tiles.
                let block = [&layer.output, &layer.gate_up, &layer.down]
                    .iter()
                    .map(|l| l.block_rows())
                    .fold(fused_rows(inter), usize::max);
                b.x[..n]
                    .par_chunks_mut(block * h)
                    .zip(b.context[..rows * width].par_chunks(block * width))
                    .for_each_init(After::default, |s, (x, context)| {
                        layer.after_attention(c, x, context, s);
                    });
            } else {
                layer.after_attention(c, &mut b.x[..n], &b.context[..rows * width], &mut b.after);
            }
            if rows < tokens {
                // The picked rows, one per sequence, in order.
                let mut out = b.x[..n].to_vec();
                kernels::rms_norm_rows(&mut out, h, &self.norm, eps);
                return out;
            }
        }
        match pool.pooling {
            // The final norm is per token: applied to the pooled rows only
            // where pooling picks rows.
            Pooling::Mean => {
                kernels::rms_norm_rows(&mut b.x, h, &self.norm, eps);
                match &self.latent {
                    Some(latent) => latent.pool(&b.x, &lengths, pool),
                    None => pool_states(&b.x, &lengths, h, pool),
                }
            }
            Pooling::Cls | Pooling::LastToken => {
                let mut picked = pool_states(&b.x, &lengths, h, pool);
                kernels::rms_norm_rows(&mut picked, h, &self.norm, eps);
                picked
            }
        }
    }
}

/// The same forward pass as a candle graph (the CUDA path) on unpadded
/// batches ([`varlen`]).
pub(crate) struct CandleDecoder {
    spec: Spec,
    embed: Tensor,
    embed_scale: Option<f64>,
    layers: Vec<CandleLayer>,
    norm: Tensor,
    /// One per rotary base of [`Spec::ropes`].
    ropes: Vec<RopeTables>,
    /// NV-Embed's pooling block, applied before the mean.
    pub(crate) latent: Option<Box<dyn CandleRowPooling>>,
    device: Device,
    /// Checked at load (`varlen::check_kernel`, in `models::load`).
    kernel: AttentionKernel,
}

struct CandleLayer {
    input_norm: Tensor,
    q: CandleLinear,
    k: CandleLinear,
    v: CandleLinear,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    o: CandleLinear,
    attention_out_norm: Option<Tensor>,
    feed_forward_norm: Tensor,
    gate: CandleLinear,
    up: CandleLinear,
    down: CandleLinear,
    feed_forward_out_norm: Option<Tensor>,
    kind: LayerKind,
}

impl CandleDecoder {
    pub(crate) fn load(
        files: &ModelFiles,
        w: &Weights,
        spec: &Spec,
        device: &Device,
        dtype: DType,
        kernel: AttentionKernel,
        lora: Option<&Lora>,
    ) -> Result<Self> {
        let weights_path = w.path().to_path_buf();
        let bad = |e: candle_core::Error| Error::format(&weights_path, e.to_string());
        // SAFETY: as for `TensorFile::open`: read-only maps of files that are
        // not modified while the model loads.
        let root = unsafe { VarBuilder::from_mmaped_safetensors(&files.weights, dtype, device) }
            .map_err(bad)?;
        let vb = if w.prefix().is_empty() {
            root
        } else {
            root.pp(w.prefix().trim_end_matches('.'))
        };
        let src = Source { w, lora };
        let (h, d, i) = (spec.hidden, spec.head_dim, spec.intermediate);
        let q_width = spec.query_heads * d;
        let kv_width = spec.kv_heads * d;
        let off = spec.unit_offset;
        let norm = |name: &str, width: usize| -> Result<Tensor> {
            let t = vb.get(width, &format!("{name}.weight")).map_err(bad)?;
            if off { (t + 1.0).map_err(bad) } else { Ok(t) }
        };
        let optional = |name: Option<String>, width| -> Result<Option<Tensor>> {
            name.map(|n| norm(&n, width)).transpose()
        };
        let linear =
            |name: &str, inputs: usize, outputs: usize, bias: bool| -> Result<CandleLinear> {
                let (weight, bias) = if lora.is_some() {
                    // Merged in f32, then stored in the engine's dtype.
                    let (weight, bias) = src.matrix(name, inputs, outputs, bias)?;
                    let tensor = |v: Vec<f32>, shape: &[usize]| {
                        Tensor::from_vec(v, shape, device)
                            .and_then(|t| t.to_dtype(dtype))
                            .map_err(bad)
                    };
                    (
                        tensor(weight, &[outputs, inputs])?,
                        bias.map(|b| tensor(b, &[outputs])).transpose()?,
                    )
                } else {
                    let weight = vb
                        .get((outputs, inputs), &format!("{name}.weight"))
                        .map_err(bad)?;
                    let bias = bias
                        .then(|| vb.get(outputs, &format!("{name}.bias")))
                        .transpose()
                        .map_err(bad)?;
                    (weight, bias)
                };
                Ok(CandleLinear::new(weight, bias))
            };
        let b = spec.attention_bias;
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (l, &kind) in spec.layers.iter().enumerate() {
            let p = format!("layers.{l}");
            let a = format!("{p}.self_attn");
            let m = format!("{p}.mlp");
            let [input, attention_out, feed_forward, feed_forward_out] = norm_names(spec, &p);
            let qk = |n: &str| spec.qk_norm.then(|| format!("{a}.{n}"));
            layers.push(CandleLayer {
                input_norm: norm(&input.unwrap_or_default(), h)?,
                q: linear(&format!("{a}.q_proj"), h, q_width, b)?,
                k: linear(&format!("{a}.k_proj"), h, kv_width, b)?,
                v: linear(&format!("{a}.v_proj"), h, kv_width, b)?,
                q_norm: optional(qk("q_norm"), d)?,
                k_norm: optional(qk("k_norm"), d)?,
                o: linear(&format!("{a}.o_proj"), q_width, h, b)?,
                attention_out_norm: optional(attention_out, h)?,
                feed_forward_norm: norm(&feed_forward.unwrap_or_default(), h)?,
                gate: linear(&format!("{m}.gate_proj"), h, i, false)?,
                up: linear(&format!("{m}.up_proj"), h, i, false)?,
                down: linear(&format!("{m}.down_proj"), i, h, false)?,
                feed_forward_out_norm: optional(feed_forward_out, h)?,
                kind,
            });
        }
        Ok(Self {
            embed: vb.get((spec.vocab, h), EMBEDDINGS).map_err(bad)?,
            embed_scale: embedding_scale(spec).map(f64::from),
            norm: norm("norm", h)?,
            layers,
            ropes: spec
                .ropes
                .iter()
                .map(|&r| RopeTables::new(r, d, dtype, device))
                .collect(),
            spec: spec.clone(),
            latent: None,
            device: device.clone(),
            kernel,
        })
    }

    fn run(&self, batch: &[&Tokens], pool: Pool) -> candle_core::Result<Vec<f32>> {
        let c = &self.spec;
        let eps = c.eps as f32;
        let dev = &self.device;
        let (nq, nkv, d) = (c.query_heads, c.kv_heads, c.head_dim);
        let lengths: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
        // NV-Embed's latent block pools every row.
        let picks = picks(&lengths, pool).filter(|_| self.latent.is_none());
        let (packed, mut x, tables) = stage("embeddings", dev, || {
            let packed = Packed::new(&lengths, picks.as_deref(), dev)?;
            let mut x = self.embed.index_select(&varlen::ids(batch, dev)?, 0)?;
            if let Some(scale) = self.embed_scale {
                x = (x * scale)?;
            }
            let tables = self
                .ropes
                .iter()
                .map(|r| r.gather(&packed))
                .collect::<candle_core::Result<Vec<_>>>()?;
            Ok((packed, x, tables))
        })?;
        let total = packed.total();
        let last = self.layers.len().saturating_sub(1);
        let mut picked = false;
        for (l, layer) in self.layers.iter().enumerate() {
            let heads = c.heads(layer.kind, pool.mask);
            let rope = &tables[layer.kind.rope];
            let (q, k, v) = stage("qkv", dev, || {
                let hs = candle_nn::ops::rms_norm(&x, &layer.input_norm, eps)?;
                let split = |proj: &CandleLinear, n: usize, norm: Option<&Tensor>| {
                    let t = proj.forward(&hs)?.reshape((total, n, d))?;
                    match norm {
                        Some(w) => candle_nn::ops::rms_norm(&t, w, eps),
                        None => Ok(t),
                    }
                };
                Ok((
                    varlen::rotate(&split(&layer.q, nq, layer.q_norm.as_ref())?, rope)?,
                    varlen::rotate(&split(&layer.k, nkv, layer.k_norm.as_ref())?, rope)?,
                    split(&layer.v, nkv, None)?,
                ))
            })?;
            // The last layer goes on with the pooled rows only.
            picked = picks.is_some() && l == last;
            let context = stage("attention", dev, || {
                packed.attend(self.kernel, heads, (&q, &k, &v), picked)
            })?;
            if picked {
                x = packed.picked(&x)?;
            }
            x = stage("attn-out", dev, || {
                let mut attended = layer.o.forward(&context)?;
                if let Some(w) = &layer.attention_out_norm {
                    attended = candle_nn::ops::rms_norm(&attended, w, eps)?;
                }
                x.add(&attended)
            })?;
            x = stage("ffn", dev, || {
                let hs = candle_nn::ops::rms_norm(&x, &layer.feed_forward_norm, eps)?;
                let gate = layer.gate.forward(&hs)?;
                let gate = match c.activation {
                    Activation::Silu => candle_nn::ops::silu(&gate)?,
                    Activation::GeluTanh => gate.gelu()?,
                };
                let mut ff = layer.down.forward(&(gate * layer.up.forward(&hs)?)?)?;
                if let Some(w) = &layer.feed_forward_out_norm {
                    ff = candle_nn::ops::rms_norm(&ff, w, eps)?;
                }
                x.add(&ff)
            })?;
        }
        stage("pool", dev, || {
            let mut x = candle_nn::ops::rms_norm(&x, &self.norm, eps)?;
            if let Some(latent) = &self.latent {
                x = latent.forward(&x.unsqueeze(0)?)?.squeeze(0)?;
            }
            packed.pool(&x, pool, picked)
        })
    }
}

impl Model for CandleDecoder {
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>> {
        self.run(batch, pool)
            .map_err(|e| varlen::inference_error(&e, batch))
    }
}
