//! The native CPU encoder: BERT's forward pass over unpadded batches.
//!
//! Sequences of a batch are laid end to end (no padding at all): the linear
//! layers run on every token at once through `gemm` (bias, and the residual,
//! folded into the product's destination), and attention runs per sequence
//! and head with one reused score buffer per task, so the full
//! batch × heads × len × len score tensor never exists.

use std::path::Path;

use rayon::prelude::*;
use safetensors::{Dtype, SafeTensors};

use crate::config::BertConfig;
use crate::encoder::Tokens;
use crate::error::{Error, Result};
use crate::kernels::{self, View, matmul};

/// A dense layer, its weight stored transposed (`in × out`, row-major), and
/// packed in bf16 when that path is on.
struct Linear {
    weight_t: Vec<f32>,
    bias: Vec<f32>,
    inputs: usize,
    outputs: usize,
    packed: Option<crate::bf16::PackedWeight>,
}

impl Linear {
    /// `out = (residual or 0) + bias + x · W` for `tokens` rows.
    fn forward(&self, x: &[f32], tokens: usize, out: &mut [f32], residual: Option<&[f32]>) {
        let out = &mut out[..tokens * self.outputs];
        // Row-wise, in parallel blocks of rows (the results do not depend on
        // the split).
        let block = self.outputs * ROW_BLOCK;
        let len = out.len();
        match residual {
            Some(r) => out
                .par_chunks_mut(block)
                .zip(r[..len].par_chunks(block))
                .for_each(|(rows, res)| {
                    for (row, res) in rows
                        .chunks_exact_mut(self.outputs)
                        .zip(res.chunks_exact(self.outputs))
                    {
                        kernels::add(row, res, &self.bias);
                    }
                }),
            None => out.par_chunks_mut(block).for_each(|rows| {
                for row in rows.chunks_exact_mut(self.outputs) {
                    row.copy_from_slice(&self.bias);
                }
            }),
        }
        let x = &x[..tokens * self.inputs];
        match &self.packed {
            Some(packed) => crate::bf16::matmul_add(out, x, tokens, packed),
            None => matmul(
                out,
                self.outputs,
                View::rows(x, tokens, self.inputs, self.inputs),
                View::rows(&self.weight_t, self.inputs, self.outputs, self.outputs),
                true,
                true,
            ),
        }
    }

    /// Switches the layer to bf16 (the f32 weight is dropped).
    fn pack_bf16(&mut self) {
        self.packed = Some(crate::bf16::PackedWeight::pack(
            &self.weight_t,
            self.inputs,
            self.outputs,
        ));
        self.weight_t = Vec::new();
    }
}

/// Rows per parallel task of the row-wise kernels.
const ROW_BLOCK: usize = 64;

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
}

impl LayerNorm {
    /// Normalises every `width`-wide row of `xs` in place, blocks of rows in parallel.
    fn apply(&self, xs: &mut [f32], width: usize, eps: f32) {
        xs.par_chunks_mut(width * ROW_BLOCK).for_each(|rows| {
            kernels::layer_norm(rows, width, &self.weight, &self.bias, eps);
        });
    }
}

struct Layer {
    /// Query, key and value in one product (`hidden × 3·hidden`).
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
}

/// Reads f32 (or f16/bf16, widened) tensors by name from a safetensors file,
/// checking shapes against the config; accepts names with or without a
/// `bert.` prefix.
struct Weights<'a> {
    path: &'a Path,
    tensors: SafeTensors<'a>,
    prefix: &'static str,
}

impl<'a> Weights<'a> {
    fn new(path: &'a Path, bytes: &'a [u8]) -> Result<Self> {
        let tensors = SafeTensors::deserialize(bytes)
            .map_err(|e| Error::format(path, format!("not a safetensors file: {e}")))?;
        // Bare encoders, and encoders inside a transformers task model
        // (`BertForSequenceClassification`, `XLMRobertaForSequenceClassification`).
        let prefix = ["", "bert.", "roberta."]
            .into_iter()
            .find(|p| {
                tensors
                    .tensor(&format!("{p}embeddings.word_embeddings.weight"))
                    .is_ok()
            })
            .unwrap_or("");
        Ok(Self {
            path,
            tensors,
            prefix,
        })
    }

    fn get(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        let full = format!("{}{name}", self.prefix);
        let view = self
            .tensors
            .tensor(&full)
            .map_err(|_| Error::MissingTensor {
                path: self.path.to_path_buf(),
                name: full.clone(),
            })?;
        if view.shape() != shape {
            return Err(Error::Shape {
                path: self.path.to_path_buf(),
                name: full,
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        widen(self.path, &full, &view)
    }

    fn linear(&self, name: &str, inputs: usize, outputs: usize) -> Result<Linear> {
        let weight = self.get(&format!("{name}.weight"), &[outputs, inputs])?;
        let bias = self.get(&format!("{name}.bias"), &[outputs])?;
        Ok(Linear {
            weight_t: transpose(&weight, outputs, inputs),
            bias,
            inputs,
            outputs,
            packed: None,
        })
    }

    fn layer_norm(&self, name: &str, width: usize) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: self.get(&format!("{name}.weight"), &[width])?,
            bias: self.get(&format!("{name}.bias"), &[width])?,
        })
    }
}

/// A tensor's values as f32 (f16 and bf16 widened).
fn widen(path: &Path, name: &str, view: &safetensors::tensor::TensorView<'_>) -> Result<Vec<f32>> {
    let data = view.data();
    Ok(match view.dtype() {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        Dtype::BF16 => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        other => {
            return Err(Error::format(
                path,
                format!("tensor `{name}` has dtype {other:?}; f32, f16 or bf16 expected"),
            ));
        }
    })
}

/// A safetensors file, for tensors beyond the encoder (task heads): looked
/// up by their full names. The file is mapped, not read, so taking a head
/// from weights the encoder has already loaded reads only the head's pages.
pub struct TensorFile {
    path: std::path::PathBuf,
    bytes: memmap2::Mmap,
}

impl std::fmt::Debug for TensorFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorFile")
            .field("path", &self.path)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl TensorFile {
    /// Opens (maps) the file and checks its header.
    pub fn open(path: &Path) -> Result<Self> {
        let file = crate::error::open_file(path, "the model's weights")?;
        // SAFETY: the mapping is read-only and private to this value; model
        // files are not modified while a model is being loaded (as for any
        // weights loader that maps them, e.g. candle's).
        let bytes = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        SafeTensors::deserialize(&bytes)
            .map_err(|e| Error::format(path, format!("not a safetensors file: {e}")))?;
        Ok(Self {
            path: path.to_path_buf(),
            bytes,
        })
    }

    /// The shape and f32 values of tensor `name`, or `None` if the file has
    /// no such tensor.
    pub fn get(&self, name: &str) -> Result<Option<(Vec<usize>, Vec<f32>)>> {
        let tensors = SafeTensors::deserialize(&self.bytes)
            .map_err(|e| Error::format(&self.path, format!("not a safetensors file: {e}")))?;
        match tensors.tensor(name) {
            Ok(view) => Ok(Some((
                view.shape().to_vec(),
                widen(&self.path, name, &view)?,
            ))),
            Err(_) => Ok(None),
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn transpose(m: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0; m.len()];
    for r in 0..rows {
        for c in 0..cols {
            t[c * rows + r] = m[r * cols + c];
        }
    }
    t
}

impl NativeBert {
    /// Loads the weights of `config` from a safetensors file; with `bf16`,
    /// the linear layers run in bfloat16 (the caller checks CPU support).
    pub(crate) fn load(path: &Path, config: &BertConfig, bf16: bool) -> Result<Self> {
        let bytes = crate::error::read_file(path, "the model's weights")?;
        let w = Weights::new(path, &bytes)?;
        let h = config.hidden_size;
        let i = config.intermediate_size;
        let mut layers = Vec::with_capacity(config.num_hidden_layers);
        for l in 0..config.num_hidden_layers {
            let p = format!("encoder.layer.{l}");
            let q = w.linear(&format!("{p}.attention.self.query"), h, h)?;
            let k = w.linear(&format!("{p}.attention.self.key"), h, h)?;
            let v = w.linear(&format!("{p}.attention.self.value"), h, h)?;
            layers.push(Layer {
                qkv: fuse_qkv(&q, &k, &v),
                attention_out: w.linear(&format!("{p}.attention.output.dense"), h, h)?,
                attention_norm: w.layer_norm(&format!("{p}.attention.output.LayerNorm"), h)?,
                intermediate: w.linear(&format!("{p}.intermediate.dense"), h, i)?,
                output: w.linear(&format!("{p}.output.dense"), i, h)?,
                output_norm: w.layer_norm(&format!("{p}.output.LayerNorm"), h)?,
            });
        }
        if bf16 {
            for layer in &mut layers {
                for linear in [
                    &mut layer.qkv,
                    &mut layer.attention_out,
                    &mut layer.intermediate,
                    &mut layer.output,
                ] {
                    linear.pack_bf16();
                }
            }
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
            embedding_norm: w.layer_norm("embeddings.LayerNorm", h)?,
            layers,
            config: config.clone(),
        })
    }

    /// Token states of a batch of sequences laid end to end: returns the
    /// `Σ len × hidden` matrix, row `offsets[s] + t` for token t of sequence s.
    pub(crate) fn forward(&self, inputs: &[&Tokens]) -> Vec<f32> {
        let h = self.config.hidden_size;
        let inter = self.config.intermediate_size;
        let eps = self.config.layer_norm_eps as f32;
        let tokens: usize = inputs.iter().map(|t| t.ids.len()).sum();
        // RoBERTa-style models number positions from padding_idx + 1.
        let first_position = self.config.position_offset();

        let mut hidden = vec![0.0f32; tokens * h];
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
        let sequences: Vec<usize> = inputs.iter().map(|t| t.ids.len()).collect();
        let sequences = &sequences[..];
        self.embedding_norm.apply(&mut hidden, h, eps);

        let mut qkv = vec![0.0f32; tokens * 3 * h];
        let mut context = vec![0.0f32; tokens * h];
        let mut attended = vec![0.0f32; tokens * h];
        let mut intermediate = vec![0.0f32; tokens * inter];
        for layer in &self.layers {
            layer.qkv.forward(&hidden, tokens, &mut qkv, None);
            self.attention(sequences, &qkv, &mut context);
            layer
                .attention_out
                .forward(&context, tokens, &mut attended, Some(&hidden));
            layer.attention_norm.apply(&mut attended, h, eps);
            layer
                .intermediate
                .forward(&attended, tokens, &mut intermediate, None);
            let tanh_form = self.config.tanh_gelu();
            intermediate
                .par_chunks_mut(inter * 64)
                .for_each(|chunk| kernels::gelu(chunk, tanh_form));
            layer
                .output
                .forward(&intermediate, tokens, &mut hidden, Some(&attended));
            layer.output_norm.apply(&mut hidden, h, eps);
        }
        hidden
    }

    /// Self-attention of every sequence and head: `context = softmax(QKᵀ/√d)V`.
    fn attention(&self, sequences: &[usize], qkv: &[f32], context: &mut [f32]) {
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let d = self.config.head_size();
        let scale = 1.0 / (d as f32).sqrt();
        // Split the context rows by sequence so each task owns its rows.
        let mut parts = Vec::with_capacity(sequences.len());
        let mut rest = &mut context[..];
        let mut offset = 0;
        for &len in sequences {
            let (mine, tail) = rest.split_at_mut(len * h);
            parts.push((offset, len, mine));
            offset += len;
            rest = tail;
        }
        parts.into_par_iter().for_each_init(
            <(Vec<f32>, Vec<f32>)>::default,
            |(scores, inv), (start, len, out)| {
                scores.resize(len * len, 0.0);
                inv.resize(len, 0.0);
                let rows = &qkv[start * 3 * h..(start + len) * 3 * h];
                for head in 0..heads {
                    let q = View::rows(&rows[head * d..], len, d, 3 * h);
                    let k = View::transposed(&rows[h + head * d..], d, len, 3 * h);
                    matmul(scores, len, q, k, false, false);
                    // Exponentials only; the d outputs of each row are
                    // normalised after the product instead of its len inputs.
                    for (row, inv) in scores.chunks_exact_mut(len).zip(inv.iter_mut()) {
                        *inv = kernels::softmax_unnormalized(row, scale);
                    }
                    let v = View::rows(&rows[2 * h + head * d..], len, d, 3 * h);
                    let out = &mut out[head * d..];
                    matmul(out, h, View::rows(scores, len, len, len), v, false, false);
                    kernels::scale_rows(out, h, d, inv);
                }
            },
        );
    }
}

fn fuse_qkv(q: &Linear, k: &Linear, v: &Linear) -> Linear {
    let (inputs, h) = (q.inputs, q.outputs);
    let mut weight_t = vec![0.0; inputs * 3 * h];
    for r in 0..inputs {
        for (j, part) in [q, k, v].iter().enumerate() {
            weight_t[r * 3 * h + j * h..r * 3 * h + (j + 1) * h]
                .copy_from_slice(&part.weight_t[r * h..(r + 1) * h]);
        }
    }
    let bias = [&q.bias[..], &k.bias[..], &v.bias[..]].concat();
    Linear {
        weight_t,
        bias,
        inputs,
        outputs: 3 * h,
        packed: None,
    }
}
