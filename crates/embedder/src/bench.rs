//! Entry points for the benchmarks of `examples/` and `scripts/` (not a
//! stable API): the native engine's dense layer on its own, and the
//! arithmetic peak of this CPU that its kernels are measured against.

use std::time::Instant;

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

/// Independent accumulators per thread in the peak loops (more than the
/// instruction's latency times its issue rate, so the loop is bound by
/// throughput alone).
const CHAINS: usize = 16;

/// The peak rate, in 10⁹ arithmetic operations per second over all of
/// rayon's threads, of the instruction the native kernels of `precision`
/// are built on: `vfmadd231ps` (f32: 32 per instruction), `vdpbf16ps`
/// (bf16: 64) or `vpdpbusd` (int8: 128), each on 512-bit registers in
/// [`CHAINS`] independent chains, registers only. `None` where the CPU lacks
/// the instruction.
pub fn peak_gops(precision: Precision, iterations: usize) -> Option<f64> {
    if !supported(precision) || !cfg!(target_arch = "x86_64") {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if precision == Precision::F32 && !std::is_x86_feature_detected!("avx512f") {
            return None;
        }
        let threads = rayon::current_num_threads();
        let start = Instant::now();
        let sinks = rayon::broadcast(|_| {
            // SAFETY: support for the instruction was checked above.
            unsafe {
                match precision {
                    Precision::F32 => peak::fma(iterations),
                    Precision::Bf16 => peak::bf16(iterations),
                    Precision::Int8 => peak::int8(iterations),
                }
            }
        });
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(sinks);
        let per_instruction = match precision {
            Precision::F32 => 32.0,
            Precision::Bf16 => 64.0,
            Precision::Int8 => 128.0,
        };
        let instructions = (threads * iterations * CHAINS) as f64;
        Some(instructions * per_instruction / seconds / 1e9)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (iterations, Instant::now());
        None
    }
}

#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::x86_64::*;

    use super::CHAINS;

    /// Sums the chains' first lanes, so the loop cannot be dropped.
    fn sink(lanes: &[f32]) -> f32 {
        lanes.iter().sum()
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma(iterations: usize) -> f32 {
        let a = _mm512_set1_ps(1e-7);
        let b = std::hint::black_box(_mm512_set1_ps(1.0));
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm512_fmadd_ps(a, b, *acc);
            }
        }
        let firsts: Vec<f32> = acc.iter().map(|v| _mm512_reduce_add_ps(*v)).collect();
        sink(&firsts)
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn bf16(iterations: usize) -> f32 {
        // SAFETY: 512-bit vectors of the same size, reinterpreted.
        let (a, b): (__m512bh, __m512bh) = unsafe {
            (
                std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi16(0x3380)), // 2^-24
                std::mem::transmute::<__m512i, __m512bh>(std::hint::black_box(_mm512_set1_epi16(
                    0x3f80,
                ))), // 1.0
            )
        };
        let mut acc = [_mm512_setzero_ps(); CHAINS];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm512_dpbf16_ps(*acc, a, b);
            }
        }
        let firsts: Vec<f32> = acc.iter().map(|v| _mm512_reduce_add_ps(*v)).collect();
        sink(&firsts)
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn int8(iterations: usize) -> f32 {
        let a = _mm512_set1_epi8(1);
        let b = std::hint::black_box(_mm512_set1_epi8(1));
        let mut acc = [_mm512_setzero_si512(); CHAINS];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm512_dpbusd_epi32(*acc, a, b);
            }
        }
        let firsts: Vec<f32> = acc
            .iter()
            .map(|v| _mm512_reduce_add_epi32(*v) as f32)
            .collect();
        sink(&firsts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_precision_has_a_peak() {
        for precision in [Precision::F32, Precision::Bf16, Precision::Int8] {
            let peak = peak_gops(precision, 1000);
            if supported(precision) && cfg!(target_arch = "x86_64") {
                if precision != Precision::F32 || std::is_x86_feature_detected!("avx512f") {
                    assert!(peak.is_some_and(|p| p > 0.0), "{precision:?}: {peak:?}");
                }
            } else {
                assert_eq!(peak, None);
            }
        }
    }

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
