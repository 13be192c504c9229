//! The dense layer of the native engine: `out = residual + bias + x·Wᵀ` on
//! every token of a batch at once, with the bias and the residual folded into
//! the product's destination. The weight is kept as stored (`outputs ×
//! inputs`): the `gemm` crate reads it transposed in place (f32), or
//! [`Linear::prepare`] packs it for the AVX-512 BF16 kernel ([`crate::bf16`]).

use rayon::prelude::*;

use crate::bf16::PackedWeight;
use crate::kernels::{self, View, matmul};

/// Rows per parallel task of the row-wise kernels.
pub(crate) const ROW_BLOCK: usize = 64;

/// A dense layer.
pub(crate) struct Linear {
    /// `outputs × inputs`, row-major, until packed.
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    inputs: usize,
    outputs: usize,
    packed: Packed,
}

/// The weight as the product reads it.
enum Packed {
    /// As stored, read transposed by the `gemm` crate (f32).
    None,
    /// Panels of bfloat16 pairs for the AVX-512 BF16 kernel.
    Bf16(PackedWeight),
}

impl Linear {
    /// A layer from its weight as stored (`outputs × inputs`, row-major).
    pub(crate) fn new(
        weight: Vec<f32>,
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
            weight,
            bias,
            inputs,
            outputs,
            packed: Packed::None,
        }
    }

    /// Layers over the same inputs stacked into one (their outputs side by
    /// side, in order): one product instead of several.
    pub(crate) fn stack(parts: Vec<Linear>) -> Self {
        let inputs = parts[0].inputs;
        assert!(
            parts
                .iter()
                .all(|p| p.inputs == inputs && matches!(p.packed, Packed::None))
        );
        let outputs: usize = parts.iter().map(|p| p.outputs).sum();
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
        // Stored row-major by output, so stacking is concatenation.
        let weight = parts.into_iter().flat_map(|p| p.weight).collect();
        Self::new(weight, bias, inputs, outputs)
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
                if !matches!(self.packed, Packed::None) {
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
            Packed::Bf16(packed) => crate::bf16::matmul_add(out, x, tokens, packed),
            Packed::None => matmul(
                out,
                self.outputs,
                View::rows(x, tokens, self.inputs, self.inputs),
                View::transposed(&self.weight, self.inputs, self.outputs, self.inputs),
                accumulate,
                true,
            ),
        }
    }

    /// Switches the layer to bf16 (the caller checks CPU support); the f32
    /// weight is dropped.
    pub(crate) fn pack_bf16(&mut self) {
        self.packed = Packed::Bf16(PackedWeight::pack(&self.weight, self.inputs, self.outputs));
        self.weight = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bias_residual_and_stacking() {
        // W: 2 outputs × 3 inputs.
        let w = vec![1.0, 2.0, 3.0, 0.0, -1.0, 1.0];
        let x = [1.0, 1.0, 1.0, 2.0, 0.0, -1.0];
        {
            let layer = |bias: Option<Vec<f32>>| Linear::new(w.clone(), bias, 3, 2);
            let plain = layer(None);
            let mut out = [f32::NAN; 4];
            plain.forward(&x, 2, &mut out, None);
            assert_eq!(out, [6.0, 0.0, -1.0, -1.0]);
            let biased = layer(Some(vec![0.5, -0.5]));
            biased.forward(&x, 2, &mut out, Some(&[1.0, 1.0, 1.0, 1.0]));
            assert_eq!(out, [7.5, 0.5, 0.5, -0.5]);
            plain.forward(&x, 2, &mut out, Some(&[1.0, 1.0, 1.0, 1.0]));
            assert_eq!(out, [7.0, 1.0, 0.0, 0.0]);
        }
        let stacked = Linear::stack(vec![
            Linear::new(w.clone(), None, 3, 2),
            Linear::new(w.clone(), Some(vec![0.5, -0.5]), 3, 2),
        ]);
        let mut out = [0.0; 8];
        stacked.forward(&x, 2, &mut out, None);
        assert_eq!(out, [6.0, 0.0, 6.5, -0.5, -1.0, -1.0, -0.5, -1.5]);
    }
}
