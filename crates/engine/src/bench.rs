//! Entry points for the benchmarks of `examples/` and `scripts/` (not a
//! stable API): the native engine's dense layer on its own. The arithmetic
//! peaks it is measured against are [`crate::rates`]'.

use crate::Precision;
use crate::linear::{Arithmetic, Linear};

/// A dense layer (`inputs → outputs`, no bias) with deterministic weights,
/// in the arithmetic a [`Precision`] gives every layer (int8 here quantises
/// every layer, whatever a model keeps in bf16).
pub struct Dense(Linear);

impl std::fmt::Debug for Dense {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dense")
    }
}

impl Dense {
    /// A layer with weights from a fixed sequence; `precision` must be
    /// [`supported`].
    pub fn new(inputs: usize, outputs: usize, precision: Precision) -> Self {
        assert!(supported(precision), "{precision:?} is not supported here");
        let weight: Vec<f32> = (0..inputs * outputs)
            .map(|i| ((i * 7919 % 1009) as f32 / 1009.0 - 0.5) * 0.1)
            .collect();
        let mut layer = Linear::new(weight, None, inputs, outputs);
        layer.prepare(Arithmetic::from(precision));
        Self(layer)
    }

    /// `out = x · Wᵀ` for `tokens` rows.
    pub fn forward(&self, x: &[f32], tokens: usize, out: &mut [f32]) {
        self.0.forward(x, tokens, out, None);
    }
}

/// Whether this CPU runs the native kernels of `precision`.
pub fn supported(precision: Precision) -> bool {
    precision.on_this_cpu() == precision
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dense_layers_agree_across_precisions() {
        let (rows, inputs, outputs) = (10, 96, 70);
        let x: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 13 % 29) as f32 / 29.0) - 0.5)
            .collect();
        let mut want = vec![0.0; rows * outputs];
        Dense::new(inputs, outputs, Precision::F32).forward(&x, rows, &mut want);
        for precision in [Precision::Bf16, Precision::Int8] {
            if !supported(precision) {
                continue;
            }
            let mut got = vec![0.0; rows * outputs];
            Dense::new(inputs, outputs, precision).forward(&x, rows, &mut got);
            let norm = want.iter().map(|v| v * v).sum::<f32>().sqrt();
            let err = want
                .iter()
                .zip(&got)
                .map(|(a, b)| (a - b) * (a - b))
                .sum::<f32>()
                .sqrt();
            assert!(
                err / norm < 0.02,
                "{precision:?}: relative error {}",
                err / norm
            );
        }
    }
}
