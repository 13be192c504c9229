//! BERT-style encoders (BERT, RoBERTa, XLM-R): post-LayerNorm layers with
//! absolute positions, GELU feed-forward and bidirectional attention.
//!
//! Native engine: sequences of a batch are laid end to end (no padding); the
//! linear layers run on every token at once (bias and residual folded into
//! the product), attention is the tiled kernel of [`engine::attention`].
//! candle engine: the same layers as a candle graph on unpadded batches
//! (`varlen.rs`), in f32 or bf16.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::Linear as CandleLinear;
use rayon::prelude::*;
use serde::Deserialize;

use super::profile::stage;
use super::varlen::{self, Packed};
use super::{Model, Pool, Tokens, gather_picked, picks, pool_states};
use crate::AttentionKernel;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use engine::attention::{self, Heads, QkvLayout};
use engine::kernels::{self, ROW_BLOCK};
use engine::lanes::{Reused, sized};
use engine::linear::{Activation, Hidden, Linear, Plan, Role};

/// The BERT architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// Rows of the word-embedding matrix.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Activation of the feed-forward layer (`gelu` only).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Number of position embeddings: the longest input.
    pub max_position_embeddings: usize,
    /// Number of token types.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Padding token id.
    #[serde(default)]
    pub pad_token_id: usize,
    /// `absolute` only.
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
    /// transformers' model type (`bert`, `xlm-roberta`, ...).
    #[serde(default)]
    pub model_type: Option<String>,
    /// jina's XLM-RoBERTa "flash" layout (`XLMRobertaFlashConfig`, no
    /// `model_type`: jina-reranker-v2): RoBERTa positions, fused QKV.
    #[serde(skip)]
    pub flash_layout: bool,
}

fn default_act() -> String {
    "gelu".to_owned()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_position_type() -> String {
    "absolute".to_owned()
}

impl BertConfig {
    /// Reads and checks `config.json`.
    pub fn read(path: &Path) -> Result<Self> {
        Self::parse(path, crate::config::read_json(path)?)
    }

    pub(crate) fn parse(path: &Path, value: serde_json::Value) -> Result<Self> {
        let flash = value
            .pointer("/auto_map/AutoConfig")
            .and_then(serde_json::Value::as_str)
            .is_some_and(|c| c.ends_with("XLMRobertaFlashConfig"));
        let mut config: Self = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::format(path, format!("{}: {}", e.path(), e.inner())))?;
        if flash {
            config.flash_layout = true;
            config
                .model_type
                .get_or_insert_with(|| "xlm-roberta".to_owned());
        }
        let bad = |message: String| Err(Error::format(path, message));
        if config.hidden_size == 0
            || config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return bad(format!(
                "hidden_size {} is not a positive multiple of num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            ));
        }
        if !matches!(
            config.hidden_act.as_str(),
            "gelu" | "gelu_new" | "gelu_pytorch_tanh"
        ) {
            return bad(format!(
                "hidden_act {:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
                config.hidden_act
            ));
        }
        if config.position_embedding_type != "absolute" {
            return bad(format!(
                "position_embedding_type {:?} is not supported (absolute)",
                config.position_embedding_type
            ));
        }
        if config.type_vocab_size == 0 || config.max_input_length() == 0 {
            return bad("type_vocab_size and max_position_embeddings must be positive".to_owned());
        }
        Ok(config)
    }

    /// Whether positions are numbered as RoBERTa numbers them: from
    /// `pad_token_id + 1` (transformers' `create_position_ids_from_input_ids`).
    pub fn roberta_positions(&self) -> bool {
        matches!(
            self.model_type.as_deref(),
            Some("roberta" | "xlm-roberta" | "camembert")
        )
    }

    /// The position of a sequence's first token.
    pub fn position_offset(&self) -> usize {
        if self.roberta_positions() {
            self.pad_token_id + 1
        } else {
            0
        }
    }

    /// The longest input the position table allows.
    pub fn max_input_length(&self) -> usize {
        self.max_position_embeddings
            .saturating_sub(self.position_offset())
    }

    /// Width of one attention head.
    pub fn head_size(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Whether the activation is the tanh approximation of GELU.
    fn tanh_gelu(&self) -> bool {
        self.hidden_act != "gelu"
    }

    fn heads(&self) -> Heads {
        Heads::new(
            self.num_attention_heads,
            self.num_attention_heads,
            self.head_size(),
            false,
        )
    }
}

/// Name prefixes of the encoder: bare, or inside a transformers task model
/// (`BertForSequenceClassification`, `XLMRobertaForSequenceClassification`).
const PREFIXES: [&str; 3] = ["", "bert.", "roberta."];
const PROBE: &str = "embeddings.word_embeddings.weight";

/// The weights of a BERT-style checkpoint, in jina's flash layout read by
/// their usual names.
fn weights(files: &ModelFiles, config: &BertConfig) -> Result<Weights> {
    let w = Weights::open(&files.weights, &PREFIXES, PROBE)?;
    Ok(if config.flash_layout {
        w.with_remap(flash_name)
    } else {
        w
    })
}

/// Where jina's XLM-RoBERTa "flash" layout (jina-reranker-v2, from
/// flash-attention's BERT) keeps a tensor of transformers' layout: the
/// embedding LayerNorm is `emb_ln`, layers are `encoder.layers.N` with a
/// fused `mixer.Wqkv` (query, key and value rows, in that order),
/// `mixer.out_proj`, `norm1`, `mlp.fc1`, `mlp.fc2` and `norm2`.
fn flash_name(name: &str) -> Option<(String, Option<(usize, usize)>)> {
    if let Some(rest) = name.strip_prefix("embeddings.LayerNorm.") {
        return Some((format!("emb_ln.{rest}"), None));
    }
    let (layer, tail) = name.strip_prefix("encoder.layer.")?.split_once('.')?;
    let (stem, kind) = tail.rsplit_once('.')?;
    let (target, fused) = match stem {
        "attention.self.query" => ("mixer.Wqkv", Some((0, 3))),
        "attention.self.key" => ("mixer.Wqkv", Some((1, 3))),
        "attention.self.value" => ("mixer.Wqkv", Some((2, 3))),
        "attention.output.dense" => ("mixer.out_proj", None),
        "attention.output.LayerNorm" => ("norm1", None),
        "intermediate.dense" => ("mlp.fc1", None),
        "output.dense" => ("mlp.fc2", None),
        "output.LayerNorm" => ("norm2", None),
        _ => return None,
    };
    Some((format!("encoder.layers.{layer}.{target}.{kind}"), fused))
}

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl LayerNorm {
    fn read(w: &Weights, name: &str, width: usize) -> Result<Self> {
        Ok(Self {
            weight: w.get(&format!("{name}.weight"), &[width])?,
            bias: w.get(&format!("{name}.bias"), &[width])?,
        })
    }

    /// Normalises every `width`-wide row of `xs` in place, blocks of rows in parallel.
    fn apply(&self, xs: &mut [f32], width: usize, eps: f32) {
        xs.par_chunks_mut(width * ROW_BLOCK).for_each(|rows| {
            kernels::layer_norm(rows, width, &self.weight, &self.bias, eps);
        });
    }
}

fn linear(w: &Weights, name: &str, inputs: usize, outputs: usize) -> Result<Linear> {
    let weight = w.get(&format!("{name}.weight"), &[outputs, inputs])?;
    let bias = w.get(&format!("{name}.bias"), &[outputs])?;
    Ok(Linear::new(weight, Some(bias), inputs, outputs))
}

struct Layer {
    /// Query, key and value in one product (`hidden → 3·hidden`).
    qkv: Linear,
    attention_out: Linear,
    attention_norm: LayerNorm,
    intermediate: Linear,
    output: Linear,
    output_norm: LayerNorm,
}

/// BERT weights ready for the native forward pass.
pub(crate) struct NativeBert {
    config: BertConfig,
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    embedding_norm: LayerNorm,
    layers: Vec<Layer>,
    buffers: Reused<Buffers>,
    /// Whether attention's products may run in bf16 (the model's products
    /// do: bf16 or int8).
    bf16_attention: bool,
}

impl NativeBert {
    /// Loads the weights of `config`, each linear layer in the arithmetic
    /// `plan` gives its role (the caller checks CPU support).
    pub(crate) fn load(files: &ModelFiles, config: &BertConfig, plan: Plan) -> Result<Self> {
        let w = weights(files, config)?;
        let h = config.hidden_size;
        let i = config.intermediate_size;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let q = linear(&w, &format!("{p}.attention.self.query"), h, h)?;
            let k = linear(&w, &format!("{p}.attention.self.key"), h, h)?;
            let v = linear(&w, &format!("{p}.attention.self.value"), h, h)?;
            let mut layer = Layer {
                qkv: Linear::stack(vec![q, k, v]),
                attention_out: linear(&w, &format!("{p}.attention.output.dense"), h, h)?,
                attention_norm: LayerNorm::read(&w, &format!("{p}.attention.output.LayerNorm"), h)?,
                intermediate: linear(&w, &format!("{p}.intermediate.dense"), h, i)?,
                output: linear(&w, &format!("{p}.output.dense"), i, h)?,
                output_norm: LayerNorm::read(&w, &format!("{p}.output.LayerNorm"), h)?,
            };
            for (linear, role) in [
                (&mut layer.qkv, Role::AttentionIn),
                (&mut layer.attention_out, Role::AttentionOut),
                (&mut layer.intermediate, Role::FeedForwardIn),
                (&mut layer.output, Role::FeedForwardOut),
            ] {
                linear.prepare(plan.of(role));
            }
            layers.push(layer);
        }
        Ok(Self {
            word: w.get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position: w.get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type: w.get(
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?,
            embedding_norm: LayerNorm::read(&w, "embeddings.LayerNorm", h)?,
            layers,
            config: config.clone(),
            buffers: Reused::default(),
            bf16_attention: plan.of(Role::AttentionOut) != engine::linear::Arithmetic::F32,
        })
    }

    /// Token states of a batch of sequences laid end to end, in
    /// `b.hidden`: the `Σ len × hidden` matrix, row `offsets[s] + t` for token
    /// t of sequence s; with `picks`, only the state of token `picks[s]` of
    /// each sequence, in row s (the last layer runs its attention output and
    /// feed-forward on those rows only).
    fn states(&self, inputs: &[&Tokens], picks: Option<&[usize]>, b: &mut Buffers) {
        let h = self.config.hidden_size;
        let eps = self.config.layer_norm_eps as f32;
        let tokens: usize = inputs.iter().map(|t| t.ids.len()).sum();
        // RoBERTa-style models number positions from padding_idx + 1.
        let first_position = self.config.position_offset();

        let hidden = sized(&mut b.hidden, tokens * h);
        let mut row = 0;
        for input in inputs {
            for (pos, &id) in input.ids.iter().enumerate() {
                let out = &mut hidden[row * h..(row + 1) * h];
                let word = &self.word[id as usize * h..(id as usize + 1) * h];
                let p = first_position + pos;
                let position = &self.position[p * h..(p + 1) * h];
                kernels::add(out, word, position);
                let kind = input.types.get(pos).map_or(0, |&t| t as usize);
                for (o, t) in out
                    .iter_mut()
                    .zip(&self.token_type[kind * h..(kind + 1) * h])
                {
                    *o += t;
                }
                row += 1;
            }
        }
        let lengths: Vec<usize> = inputs.iter().map(|t| t.ids.len()).collect();
        self.embedding_norm.apply(hidden, h, eps);

        let heads = Heads {
            bf16: self.bf16_attention,
            ..self.config.heads()
        };
        let layout = QkvLayout::fused(heads);
        let tanh_form = self.config.tanh_gelu();
        sized(&mut b.qkv, tokens * 3 * h);
        sized(&mut b.context, tokens * h);
        let last = self.layers.len().saturating_sub(1);
        for (l, layer) in self.layers.iter().enumerate() {
            layer.qkv.forward(&b.hidden, tokens, &mut b.qkv, None);
            let layer_picks = picks.filter(|_| l == last);
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
                    gather_picked(&mut b.hidden, h, &lengths, picks);
                    picks.len()
                }
                None => tokens,
            };
            // Everything after attention is row by row: blocks of rows go
            // through it in turn, their intermediate states in cache (not a
            // batch-sized feed-forward activation that would go to memory
            // and back). Where a product packs its weight on each call (the
            // `gemm` crate's f32 at AVX-512), all rows at once.
            let after = |hidden: &mut [f32],
                         context: &[f32],
                         attended: &mut [f32],
                         intermediate: &mut Hidden| {
                let m = hidden.len() / h;
                let attended = &mut attended[..m * h];
                layer
                    .attention_out
                    .forward(context, m, attended, Some(hidden));
                layer.attention_norm.apply(attended, h, eps);
                // GELU as the sums leave the tiles where both products run
                // on AMX (the intermediate then never reaches memory in f32).
                layer.intermediate.forward_activated(
                    attended,
                    m,
                    Activation::Gelu { tanh: tanh_form },
                    intermediate,
                    &layer.output,
                );
                layer
                    .output
                    .forward_hidden(intermediate, m, hidden, Some(attended));
                layer.output_norm.apply(hidden, h, eps);
            };
            let packed = [&layer.attention_out, &layer.intermediate, &layer.output]
                .iter()
                .all(|l| l.is_packed());
            if packed {
                // More rows where the products run on AMX tiles.
                let block = [&layer.attention_out, &layer.intermediate, &layer.output]
                    .iter()
                    .map(|l| l.block_rows())
                    .fold(FUSED_ROWS, usize::max);
                b.hidden[..rows * h]
                    .par_chunks_mut(block * h)
                    .zip(b.context[..rows * h].par_chunks(block * h))
                    .for_each_init(
                        || (vec![0.0f32; block * h], Hidden::default()),
                        |(attended, intermediate), (hidden, context)| {
                            after(hidden, context, attended, intermediate);
                        },
                    );
            } else {
                after(
                    &mut b.hidden[..rows * h],
                    &b.context[..rows * h],
                    sized(&mut b.attended, rows * h),
                    &mut b.intermediate,
                );
            }
        }
    }
}

/// Rows per block of the layer's part after attention (their feed-forward
/// activations, `rows × intermediate`, stay in a core's L2 cache).
const FUSED_ROWS: usize = 48;

/// The activations of a forward pass, kept from one batch to the next.
#[derive(Default)]
struct Buffers {
    hidden: Vec<f32>,
    qkv: Vec<f32>,
    context: Vec<f32>,
    /// The unfused path's: after attention, before the feed-forward.
    attended: Vec<f32>,
    intermediate: Hidden,
    attention: attention::Packed,
}

impl Model for NativeBert {
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>> {
        self.buffers.with(|b| {
            let lengths: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
            let h = self.config.hidden_size;
            Ok(match picks(&lengths, pool) {
                Some(picks) => {
                    self.states(batch, Some(&picks), b);
                    b.hidden[..batch.len() * h].to_vec()
                }
                None => {
                    self.states(batch, None, b);
                    pool_states(&b.hidden, &lengths, h, pool)
                }
            })
        })
    }

    fn lanes(&self) -> usize {
        engine::lanes::count()
    }

    fn batch_cap(&self) -> Option<usize> {
        (self.layers.iter().any(|l| l.output.block_rows() > 0))
            .then_some(engine::linear::TILE_BATCH_TOKENS)
    }
}

/// The same encoder as a candle graph (the CUDA path) on unpadded batches
/// ([`varlen`]), in the dtype the precision asks for.
pub(crate) struct CandleBert {
    config: BertConfig,
    word: Tensor,
    position: Tensor,
    token_type: Tensor,
    embedding_norm: (Tensor, Tensor),
    layers: Vec<CandleLayer>,
    device: Device,
    /// Checked at load (`varlen::check_kernel`, in `models::load`).
    kernel: AttentionKernel,
}

struct CandleLayer {
    /// Query, key and value: three products of one widened input, each
    /// output contiguous (no copies before attention).
    qkv: [Folded; 3],
    attention_out: Folded,
    attention_norm: (Tensor, Tensor),
    intermediate: Folded,
    /// Its input is four times wider than its output: the bias is added.
    output: CandleLinear,
    output_norm: (Tensor, Tensor),
}

/// Extra input columns of a [`Folded`] product: a one, then zeros (the
/// width stays a multiple of 8, as tensor cores want it).
const FOLD: usize = 8;

/// A linear layer whose bias rides in the product: the weight carries it
/// as an extra input column (`outputs × (inputs + 8)`), the input gets a
/// column of ones ([`ones`]). candle adds a bias with a broadcast, which on
/// CUDA runs an index-computing kernel over every output element (a third
/// of a BERT-large layer's time on an H200, by `SKILLRET_PROFILE`); the
/// extra columns cost a copy of the narrower input instead, and the bias is
/// added in the product's f32 accumulator, as PyTorch's fused epilogue adds
/// it.
struct Folded(Tensor);

impl Folded {
    fn fold(weight: &[f32], bias: &[f32], inputs: usize) -> Vec<f32> {
        let mut folded = Vec::with_capacity(bias.len() * (inputs + FOLD));
        for (row, &b) in weight.chunks_exact(inputs).zip(bias) {
            folded.extend_from_slice(row);
            folded.push(b);
            folded.extend(std::iter::repeat_n(0.0, FOLD - 1));
        }
        folded
    }

    fn forward(&self, x: &Tensor, ones: &Tensor) -> candle_core::Result<Tensor> {
        self.forward_widened(&widen(x, ones)?)
    }

    /// The product of an input [`widen`] made.
    fn forward_widened(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.matmul(&self.0.t()?)
    }
}

/// `x` with the columns of `ones` appended (the input of [`Folded`]).
fn widen(x: &Tensor, ones: &Tensor) -> candle_core::Result<Tensor> {
    let rows = x.dim(0)?;
    Tensor::cat(&[x, &ones.narrow(0, 0, rows)?], 1)
}

/// The columns [`Folded`] appends to `rows` inputs: a one and seven zeros.
fn ones(rows: usize, dtype: DType, device: &Device) -> candle_core::Result<Tensor> {
    Tensor::cat(
        &[
            Tensor::ones((rows, 1), dtype, device)?,
            Tensor::zeros((rows, FOLD - 1), dtype, device)?,
        ],
        1,
    )
}

impl CandleBert {
    pub(crate) fn load(
        files: &ModelFiles,
        config: &BertConfig,
        device: &Device,
        dtype: DType,
        kernel: AttentionKernel,
    ) -> Result<Self> {
        let w = weights(files, config)?;
        let bad = |e: candle_core::Error| Error::format(w.path(), e.to_string());
        let tensor = |values: Vec<f32>, shape: &[usize]| -> Result<Tensor> {
            Tensor::from_vec(values, shape, device)
                .and_then(|t| t.to_dtype(dtype))
                .map_err(bad)
        };
        let get = |name: &str, shape: &[usize]| tensor(w.get(name, shape)?, shape);
        let h = config.hidden_size;
        let i = config.intermediate_size;
        let norm = |name: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                get(&format!("{name}.weight"), &[h])?,
                get(&format!("{name}.bias"), &[h])?,
            ))
        };
        let read = |name: &str, inputs: usize, outputs: usize| -> Result<_> {
            Ok((
                w.get(&format!("{name}.weight"), &[outputs, inputs])?,
                w.get(&format!("{name}.bias"), &[outputs])?,
            ))
        };
        let folded = |name: &str, inputs: usize, outputs: usize| -> Result<Folded> {
            let (weight, bias) = read(name, inputs, outputs)?;
            Ok(Folded(tensor(
                Folded::fold(&weight, &bias, inputs),
                &[outputs, inputs + FOLD],
            )?))
        };
        let linear = |name: &str, inputs: usize, outputs: usize| -> Result<CandleLinear> {
            let (weight, bias) = read(name, inputs, outputs)?;
            Ok(CandleLinear::new(
                tensor(weight, &[outputs, inputs])?,
                Some(tensor(bias, &[outputs])?),
            ))
        };
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let part = |n: &str| folded(&format!("{p}.attention.self.{n}"), h, h);
            layers.push(CandleLayer {
                qkv: [part("query")?, part("key")?, part("value")?],
                attention_out: folded(&format!("{p}.attention.output.dense"), h, h)?,
                attention_norm: norm(&format!("{p}.attention.output.LayerNorm"))?,
                intermediate: folded(&format!("{p}.intermediate.dense"), h, i)?,
                output: linear(&format!("{p}.output.dense"), i, h)?,
                output_norm: norm(&format!("{p}.output.LayerNorm"))?,
            });
        }
        Ok(Self {
            word: get("embeddings.word_embeddings.weight", &[config.vocab_size, h])?,
            position: get(
                "embeddings.position_embeddings.weight",
                &[config.max_position_embeddings, h],
            )?,
            token_type: get(
                "embeddings.token_type_embeddings.weight",
                &[config.type_vocab_size, h],
            )?,
            embedding_norm: norm("embeddings.LayerNorm")?,
            layers,
            config: config.clone(),
            device: device.clone(),
            kernel,
        })
    }

    fn run(&self, batch: &[&Tokens], pool: Pool) -> candle_core::Result<Vec<f32>> {
        let c = &self.config;
        let eps = c.layer_norm_eps as f32;
        let heads = c.heads();
        let dev = &self.device;
        let lengths: Vec<usize> = batch.iter().map(|t| t.ids.len()).collect();
        let picks = picks(&lengths, pool);
        let (packed, mut x, ones) = stage("embeddings", dev, || {
            let packed = Packed::new(&lengths, picks.as_deref(), dev)?;
            let types: Vec<u32> = batch
                .iter()
                .flat_map(|t| (0..t.ids.len()).map(|p| t.types.get(p).copied().unwrap_or(0)))
                .collect();
            let types = Tensor::from_vec(types, packed.total(), dev)?;
            // RoBERTa-style models number positions from padding_idx + 1.
            let positions = packed.positions().affine(1.0, c.position_offset() as f64)?;
            let x = (self.word.index_select(&varlen::ids(batch, dev)?, 0)?
                + self.position.index_select(&positions, 0)?)?;
            let x = (x + self.token_type.index_select(&types, 0)?)?;
            let x = layer_norm(&x, &self.embedding_norm, eps)?;
            let ones = ones(packed.total(), x.dtype(), dev)?;
            Ok((packed, x, ones))
        })?;
        let total = packed.total();
        let (nh, d) = (heads.query, heads.dim);
        let last = self.layers.len().saturating_sub(1);
        let mut picked = false;
        for (l, layer) in self.layers.iter().enumerate() {
            let (q, k, v) = stage("qkv", dev, || {
                let widened = widen(&x, &ones)?;
                let part = |i: usize| {
                    layer.qkv[i]
                        .forward_widened(&widened)?
                        .reshape((total, nh, d))
                };
                Ok((part(0)?, part(1)?, part(2)?))
            })?;
            picked = picks.is_some() && l == last;
            let context = stage("attention", dev, || {
                packed.attend(self.kernel, heads, (&q, &k, &v), picked)
            })?;
            if picked {
                x = packed.picked(&x)?;
            }
            let attended = stage("attn-out", dev, || {
                layer_norm(
                    &(layer.attention_out.forward(&context, &ones)? + &x)?,
                    &layer.attention_norm,
                    eps,
                )
            })?;
            let inner = stage("ffn-in", dev, || {
                let inner = layer.intermediate.forward(&attended, &ones)?;
                if c.tanh_gelu() {
                    inner.gelu()
                } else {
                    inner.gelu_erf()
                }
            })?;
            x = stage("ffn-out", dev, || {
                layer_norm(
                    &(layer.output.forward(&inner)? + attended)?,
                    &layer.output_norm,
                    eps,
                )
            })?;
        }
        stage("pool", dev, || packed.pool(&x, pool, picked))
    }
}

fn layer_norm(x: &Tensor, (w, b): &(Tensor, Tensor), eps: f32) -> candle_core::Result<Tensor> {
    candle_nn::ops::layer_norm(x, w, b, eps)
}

impl Model for CandleBert {
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>> {
        self.run(batch, pool)
            .map_err(|e| varlen::inference_error(&e, batch))
    }
}
