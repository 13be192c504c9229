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
        match residual {
            Some(r) => {
                for (row, res) in out
                    .chunks_exact_mut(self.outputs)
                    .zip(r.chunks_exact(self.outputs))
                {
                    kernels::add(row, res, &self.bias);
                }
            }
            None => {
                for row in out.chunks_exact_mut(self.outputs) {
                    row.copy_from_slice(&self.bias);
                }
            }
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

struct LayerNorm {
    weight: Vec<f32>,
    bias: Vec<f32>,
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
        let prefix = if tensors.tensor("embeddings.word_embeddings.weight").is_ok() {
            ""
        } else {
            "bert."
        };
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
                name: name.to_owned(),
            })?;
        if view.shape() != shape {
            return Err(Error::Shape {
                path: self.path.to_path_buf(),
                name: full,
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        let data = view.data();
        let values = match view.dtype() {
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
                    self.path,
                    format!("tensor `{full}` has dtype {other:?}; f32, f16 or bf16 expected"),
                ));
            }
        };
        Ok(values)
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
    pub(crate) fn forward(&self, sequences: &[Vec<u32>]) -> Vec<f32> {
        let h = self.config.hidden_size;
        let inter = self.config.intermediate_size;
        let eps = self.config.layer_norm_eps as f32;
        let tokens: usize = sequences.iter().map(Vec::len).sum();

        let mut hidden = vec![0.0f32; tokens * h];
        let mut row = 0;
        for seq in sequences {
            for (pos, &id) in seq.iter().enumerate() {
                let out = &mut hidden[row * h..(row + 1) * h];
                let word = &self.word[id as usize * h..(id as usize + 1) * h];
                let position = &self.position[pos * h..(pos + 1) * h];
                kernels::add(out, word, position);
                for (o, t) in out.iter_mut().zip(&self.token_type[..h]) {
                    *o += t;
                }
                row += 1;
            }
        }
        kernels::layer_norm(
            &mut hidden,
            h,
            &self.embedding_norm.weight,
            &self.embedding_norm.bias,
            eps,
        );

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
            let norm = &layer.attention_norm;
            kernels::layer_norm(&mut attended, h, &norm.weight, &norm.bias, eps);
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
            let norm = &layer.output_norm;
            kernels::layer_norm(&mut hidden, h, &norm.weight, &norm.bias, eps);
        }
        hidden
    }

    /// Self-attention of every sequence and head: `context = softmax(QKᵀ/√d)V`.
    fn attention(&self, sequences: &[Vec<u32>], qkv: &[f32], context: &mut [f32]) {
        let h = self.config.hidden_size;
        let heads = self.config.num_attention_heads;
        let d = self.config.head_size();
        let scale = 1.0 / (d as f32).sqrt();
        // Split the context rows by sequence so each task owns its rows.
        let mut parts = Vec::with_capacity(sequences.len());
        let mut rest = &mut context[..];
        let mut offset = 0;
        for seq in sequences {
            let (mine, tail) = rest.split_at_mut(seq.len() * h);
            parts.push((offset, seq.len(), mine));
            offset += seq.len();
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
