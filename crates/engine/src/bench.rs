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
/// throughput alone). Sixteen made the compiler keep some of them on the
/// stack (a store and reload in their chains), which halved the measured
/// 512-bit peaks on a CPU with full-width AVX-512 (263 instead of 481
/// GFLOP/s here); twelve stay in registers.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const CHAINS: usize = 12;

/// An instruction a kernel of the native engine is built on, whose peak
/// rate [`peak_gops`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Instruction {
    /// `vfmadd231ps` on 512-bit registers (f32 at the avx512 level): 32
    /// operations each.
    Avx512Fma,
    /// `vfmadd231ps` on 256-bit registers (f32 at the avx2 level): 16.
    Avx2Fma,
    /// `vdpbf16ps` on 512-bit registers (bf16): 64.
    Avx512Bf16,
    /// `vpdpbusd` on 512-bit registers (int8, AVX-512 VNNI): 128.
    Avx512Vnni,
    /// `vpdpbusd` on 256-bit registers (int8, AVX-VNNI): 64.
    AvxVnni,
    /// The AVX2 int8 step without VNNI: `vpsignb`, `vpmaddubsw`,
    /// `vpmaddwd`, `vpaddd` on 256-bit registers (32 multiply-adds of
    /// bytes into eight i32 sums, as the int8 kernel does them): 64.
    Avx2Int8,
}

impl Instruction {
    /// Every instruction, in the order reports list them.
    pub const ALL: [Instruction; 6] = [
        Instruction::Avx512Fma,
        Instruction::Avx2Fma,
        Instruction::Avx512Bf16,
        Instruction::Avx512Vnni,
        Instruction::AvxVnni,
        Instruction::Avx2Int8,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Fma => "avx512 fma",
            Self::Avx2Fma => "avx2 fma",
            Self::Avx512Bf16 => "avx512 bf16",
            Self::Avx512Vnni => "avx512 vnni",
            Self::AvxVnni => "avx-vnni",
            Self::Avx2Int8 => "avx2 int8",
        }
    }

    /// Whether this CPU has it (whatever `SKILLRET_MAX_ISA` says: peaks
    /// are the CPU's).
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            let detected = crate::isa::Isa::detected();
            match self {
                Self::Avx512Fma => detected >= crate::isa::Isa::Avx512,
                Self::Avx2Fma => detected >= crate::isa::Isa::Avx2,
                Self::Avx512Bf16 => {
                    detected >= crate::isa::Isa::Avx512
                        && std::is_x86_feature_detected!("avx512bf16")
                }
                Self::Avx512Vnni => crate::int8::Kernel::Avx512Vnni.on_this_cpu(),
                Self::AvxVnni => crate::int8::Kernel::AvxVnni.on_this_cpu(),
                Self::Avx2Int8 => crate::int8::Kernel::Avx2.on_this_cpu(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// Arithmetic operations per instruction.
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    fn operations(self) -> f64 {
        match self {
            Self::Avx512Fma => 32.0,
            Self::Avx2Fma => 16.0,
            Self::Avx512Bf16 => 64.0,
            Self::Avx512Vnni => 128.0,
            Self::AvxVnni | Self::Avx2Int8 => 64.0,
        }
    }

    /// The instruction the dense layers of `precision` run on at the active
    /// level (`None`: the portable code, which has no single instruction).
    pub fn of(precision: Precision) -> Option<Self> {
        let level = crate::isa::active();
        match precision.on_this_cpu() {
            Precision::Bf16 => Some(Self::Avx512Bf16),
            Precision::Int8 => crate::int8::Kernel::active().map(|k| match k {
                crate::int8::Kernel::Avx512Vnni => Self::Avx512Vnni,
                crate::int8::Kernel::AvxVnni => Self::AvxVnni,
                crate::int8::Kernel::Avx2 => Self::Avx2Int8,
            }),
            Precision::F32 if level >= crate::isa::Isa::Avx512 => Some(Self::Avx512Fma),
            Precision::F32 if level >= crate::isa::Isa::Avx2 => Some(Self::Avx2Fma),
            Precision::F32 => None,
        }
    }
}

/// The peak rate, in 10⁹ arithmetic operations per second over all of
/// rayon's threads, of `instruction` in [`CHAINS`] independent chains,
/// registers only. `None` where the CPU lacks it.
pub fn peak_gops(instruction: Instruction, iterations: usize) -> Option<f64> {
    if !instruction.available() {
        return None;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let threads = rayon::current_num_threads();
        let start = Instant::now();
        let sinks = rayon::broadcast(|_| {
            // SAFETY: the CPU has the instruction (checked above).
            unsafe {
                match instruction {
                    Instruction::Avx512Fma => peak::fma(iterations),
                    Instruction::Avx2Fma => peak::fma256(iterations),
                    Instruction::Avx512Bf16 => peak::bf16(iterations),
                    Instruction::Avx512Vnni => peak::int8(iterations),
                    Instruction::AvxVnni => peak::int8_256(iterations),
                    Instruction::Avx2Int8 => peak::int8_avx2(iterations),
                }
            }
        });
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(sinks);
        let chains = match instruction {
            Instruction::Avx2Fma | Instruction::AvxVnni => peak::CHAINS_256,
            Instruction::Avx2Int8 => peak::CHAINS_AVX2_INT8,
            _ => CHAINS,
        };
        let instructions = (threads * iterations * chains) as f64;
        Some(instructions * instruction.operations() / seconds / 1e9)
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

    /// Chains of the 256-bit loops: AVX2 has 16 registers, two of which
    /// hold the operands (16 chains would spill).
    pub(super) const CHAINS_256: usize = 12;

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma256(iterations: usize) -> f32 {
        let a = _mm256_set1_ps(1e-7);
        let b = std::hint::black_box(_mm256_set1_ps(1.0));
        let mut acc = [_mm256_setzero_ps(); CHAINS_256];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm256_fmadd_ps(a, b, *acc);
            }
        }
        let mut firsts = [0.0f32; CHAINS_256];
        for (f, v) in firsts.iter_mut().zip(&acc) {
            *f = _mm256_cvtss_f32(*v);
        }
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

    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn int8_256(iterations: usize) -> f32 {
        let a = _mm256_set1_epi8(1);
        let b = std::hint::black_box(_mm256_set1_epi8(1));
        let mut acc = [_mm256_setzero_si256(); CHAINS_256];
        for _ in 0..iterations {
            for acc in &mut acc {
                *acc = _mm256_dpbusd_avx_epi32(*acc, a, b);
            }
        }
        let mut firsts = [0.0f32; CHAINS_256];
        for (f, v) in firsts.iter_mut().zip(&acc) {
            *f = _mm256_cvtsi256_si32(*v) as f32;
        }
        sink(&firsts)
    }

    /// Chains of the AVX2 int8 loop: each needs its state and one
    /// temporary, plus `|a|` and the ones.
    pub(super) const CHAINS_AVX2_INT8: usize = 10;

    /// Each chain's state is the signed operand of its next step, so no
    /// step can be hoisted and every one of its four instructions runs.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn int8_avx2(iterations: usize) -> f32 {
        let a = std::hint::black_box(_mm256_set1_epi8(3));
        let magnitude = _mm256_abs_epi8(a);
        let ones = _mm256_set1_epi16(1);
        let mut acc: [__m256i; CHAINS_AVX2_INT8] =
            std::array::from_fn(|i| _mm256_set1_epi8(i as i8 - 5));
        for _ in 0..iterations {
            for acc in &mut acc {
                let pairs = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(*acc, a));
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(pairs, ones));
            }
        }
        let mut firsts = [0.0f32; CHAINS_AVX2_INT8];
        for (f, v) in firsts.iter_mut().zip(&acc) {
            *f = _mm256_cvtsi256_si32(*v) as f32;
        }
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
    fn every_instruction_this_cpu_has_has_a_peak() {
        for instruction in Instruction::ALL {
            let peak = peak_gops(instruction, 1000);
            if instruction.available() {
                assert!(peak.is_some_and(|p| p > 0.0), "{instruction:?}: {peak:?}");
            } else {
                assert_eq!(peak, None);
            }
        }
        // Each path names an instruction this CPU has, except the portable code.
        for precision in [Precision::F32, Precision::Bf16, Precision::Int8] {
            match Instruction::of(precision) {
                Some(i) => assert!(i.available(), "{precision:?}: {i:?}"),
                None => assert_eq!(crate::isa::active(), crate::isa::Isa::Scalar),
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
