//! The dense layer of the native engine: `out = residual + bias + x·Wᵀ` on
//! every token of a batch at once, in f32 (through `gemm`) or bf16 (the
//! AVX-512 BF16 micro-kernel), with the bias and the residual folded into the
//! product's destination.

use rayon::prelude::*;

use crate::bf16::PackedWeight;
use crate::kernels::{self, View, matmul};

/// Rows per parallel task of the row-wise kernels.
pub(crate) const ROW_BLOCK: usize = 64;

/// A dense layer; its weight stored transposed (`inputs × outputs`,
/// row-major), or packed in bf16.
pub(crate) struct Linear {
    weight_t: Vec<f32>,
    bias: Option<Vec<f32>>,
    inputs: usize,
    outputs: usize,
    packed: Option<PackedWeight>,
}

impl Linear {
    /// A layer from its weight as stored (`outputs × inputs`, row-major).
    pub(crate) fn new(
        weight: &[f32],
        bias: Option<Vec<f32>>,
        inputs: usize,
        outputs: usize,
    ) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        if let Some(b) = &bias {
            assert_eq!(b.len(), outputs, "bias is not outputs wide");
        }
        Self {
            weight_t: transpose(weight, outputs, inputs),
            bias,
            inputs,
            outputs,
            packed: None,
        }
    }

    /// Layers over the same inputs stacked into one (their outputs side by
    /// side, in order): one product instead of several.
    pub(crate) fn stack(parts: &[Linear]) -> Self {
        let inputs = parts[0].inputs;
        assert!(
            parts
                .iter()
                .all(|p| p.inputs == inputs && p.packed.is_none())
        );
        let outputs: usize = parts.iter().map(|p| p.outputs).sum();
        let mut weight_t = vec![0.0; inputs * outputs];
        for r in 0..inputs {
            let mut col = 0;
            for part in parts {
                weight_t[r * outputs + col..r * outputs + col + part.outputs]
                    .copy_from_slice(&part.weight_t[r * part.outputs..(r + 1) * part.outputs]);
                col += part.outputs;
            }
        }
        let bias = if parts.iter().any(|p| p.bias.is_some()) {
            Some(
                parts
                    .iter()
                    .flat_map(|p| p.bias.clone().unwrap_or_else(|| vec![0.0; p.outputs]))
                    .collect(),
            )
        } else {
            None
        };
        Self {
            weight_t,
            bias,
            inputs,
            outputs,
            packed: None,
        }
    }

    /// `out = (residual or 0) + (bias or 0) + x·Wᵀ` for `tokens` rows.
    pub(crate) fn forward(
        &self,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
        residual: Option<&[f32]>,
    ) {
        let out = &mut out[..tokens * self.outputs];
        // Row-wise, in parallel blocks of rows (the results do not depend on
        // the split).
        let block = self.outputs * ROW_BLOCK;
        let len = out.len();
        let zero_bias;
        let bias = match &self.bias {
            Some(b) => b.as_slice(),
            None if residual.is_some() => {
                zero_bias = vec![0.0; self.outputs];
                zero_bias.as_slice()
            }
            None => &[],
        };
        match residual {
            Some(r) => out
                .par_chunks_mut(block)
                .zip(r[..len].par_chunks(block))
                .for_each(|(rows, res)| {
                    for (row, res) in rows
                        .chunks_exact_mut(self.outputs)
                        .zip(res.chunks_exact(self.outputs))
                    {
                        kernels::add(row, res, bias);
                    }
                }),
            None if bias.is_empty() => {
                if self.packed.is_some() {
                    out.par_chunks_mut(block).for_each(|rows| rows.fill(0.0));
                }
            }
            None => out.par_chunks_mut(block).for_each(|rows| {
                for row in rows.chunks_exact_mut(self.outputs) {
                    row.copy_from_slice(bias);
                }
            }),
        }
        let accumulate = residual.is_some() || !bias.is_empty();
        let x = &x[..tokens * self.inputs];
        match &self.packed {
            Some(packed) => crate::bf16::matmul_add(out, x, tokens, packed),
            None => matmul(
                out,
                self.outputs,
                View::rows(x, tokens, self.inputs, self.inputs),
                View::rows(&self.weight_t, self.inputs, self.outputs, self.outputs),
                accumulate,
                true,
            ),
        }
    }

    /// Switches the layer to bf16 (the f32 weight is dropped).
    pub(crate) fn pack_bf16(&mut self) {
        self.packed = Some(PackedWeight::pack(
            &self.weight_t,
            self.inputs,
            self.outputs,
        ));
        self.weight_t = Vec::new();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_residual_and_stacking() {
        // W: 2 outputs × 3 inputs.
        let w = [1.0, 2.0, 3.0, 0.0, -1.0, 1.0];
        let x = [1.0, 1.0, 1.0, 2.0, 0.0, -1.0];
        let plain = Linear::new(&w, None, 3, 2);
        let mut out = [f32::NAN; 4];
        plain.forward(&x, 2, &mut out, None);
        assert_eq!(out, [6.0, 0.0, -1.0, -1.0]);
        let biased = Linear::new(&w, Some(vec![0.5, -0.5]), 3, 2);
        biased.forward(&x, 2, &mut out, Some(&[1.0, 1.0, 1.0, 1.0]));
        assert_eq!(out, [7.5, 0.5, 0.5, -0.5]);
        plain.forward(&x, 2, &mut out, Some(&[1.0, 1.0, 1.0, 1.0]));
        assert_eq!(out, [7.0, 1.0, 0.0, 0.0]);
        let stacked = Linear::stack(&[plain, biased]);
        let mut out = [0.0; 8];
        stacked.forward(&x, 2, &mut out, None);
        assert_eq!(out, [6.0, 0.0, 6.5, -0.5, -1.0, -1.0, -0.5, -1.5]);
    }
}
