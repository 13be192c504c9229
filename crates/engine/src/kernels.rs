//! CPU kernels of the native encoder: a checked wrapper over the `gemm`
//! crate's matrix product, and row operations (LayerNorm, softmax, GELU)
//! written so that the compiler vectorises them, compiled for AVX-512 and
//! AVX2 and chosen at run time.

use gemm::Parallelism;

use rayon::prelude::*;

use crate::tile::View;

/// Rows per parallel task of the row-wise kernels.
pub const ROW_BLOCK: usize = 64;

/// [`rms_norm`] on blocks of rows in parallel.
pub fn rms_norm_rows(xs: &mut [f32], width: usize, weight: &[f32], eps: f32) {
    xs.par_chunks_mut(width * ROW_BLOCK)
        .for_each(|rows| rms_norm(rows, width, weight, eps));
}

/// `x += y`, blocks of rows in parallel.
pub fn add_rows(x: &mut [f32], y: &[f32], width: usize) {
    x.par_chunks_mut(width * ROW_BLOCK)
        .zip(y.par_chunks(width * ROW_BLOCK))
        .for_each(|(x, y)| {
            for (x, y) in x.iter_mut().zip(y) {
                *x += y;
            }
        });
}

/// L2 normalisation as torch's `F.normalize` (norm clamped at 1e-12), the
/// one sentence-transformers' `Normalize` module applies.
pub fn normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    for x in v {
        *x /= norm;
    }
}

/// `dst = (accumulate ? dst : 0) + lhs · rhs`, with `dst` row-major
/// (`m × n`, leading dimension `ldd`). Bounds are checked before the
/// unchecked product runs. The `gemm` crate at the AVX-512 level on CPUs
/// with full-width 512-bit FMA ([`crate::rates::f32_in_gemm`]), the packed
/// kernels of `f32pack` elsewhere. Either way, a row's result does not
/// depend on how many rows the call has, so that an input gets the same bits
/// whatever the batch it is in.
pub fn matmul(
    dst: &mut [f32],
    ldd: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    accumulate: bool,
    parallel: bool,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    assert_eq!(rhs.rows, k, "inner dimensions differ");
    lhs.check("lhs");
    rhs.check("rhs");
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * ldd + n <= dst.len(), "dst out of bounds");
    if k == 0 {
        if !accumulate {
            for row in dst.chunks_mut(ldd).take(m) {
                row[..n].fill(0.0);
            }
        }
        return;
    }
    if !crate::rates::f32_in_gemm() {
        // Below AVX-512 (an AVX2 CPU, or a cap), or where 512-bit FMA is no
        // faster than 256-bit: the `gemm` crate would pick its AVX-512
        // kernels by itself wherever the CPU has them.
        crate::f32pack::matmul_views(dst, ldd, lhs, rhs, accumulate, parallel);
        return;
    }
    gemm_rows(dst, ldd, lhs, rhs, accumulate, parallel);
}

/// The fewest rows for which the `gemm` crate (0.19) runs its blocked
/// kernels on a product with `n` columns. Below it, it takes others that
/// sum in another order: a matrix–vector product for one row, dot products
/// where rows × columns ≤ 256, another depth blocking where both are ≤ 64.
/// In the blocked kernels, a row's result does not depend on the number of
/// rows (test `gemm_rows_give_each_row_the_same_bits_whatever_the_count`).
fn gemm_min_rows(n: usize) -> usize {
    let small = if n <= 64 { 65 } else { 2 };
    small.max(256 / n + 1)
}

/// [`matmul`] through the `gemm` crate, on operands it has checked, on at
/// least [`gemm_min_rows`] rows: fewer are copied into zero-padded buffers
/// first (a few rows: a batch of one input's picked token, or a short input
/// alone).
fn gemm_rows(
    dst: &mut [f32],
    ldd: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    accumulate: bool,
    parallel: bool,
) {
    let (m, k, n) = (lhs.rows, lhs.cols, rhs.cols);
    let rows = gemm_min_rows(n);
    if m < rows {
        let mut a = vec![0.0f32; rows * k];
        for (r, row) in a.chunks_exact_mut(k).take(m).enumerate() {
            for (c, x) in row.iter_mut().enumerate() {
                *x = lhs.data[r * lhs.rs + c * lhs.cs];
            }
        }
        let mut d = vec![0.0f32; rows * n];
        if accumulate {
            for (r, row) in d.chunks_exact_mut(n).take(m).enumerate() {
                row.copy_from_slice(&dst[r * ldd..r * ldd + n]);
            }
        }
        let padded = View::rows(&a, rows, k, k);
        gemm_rows(&mut d, n, padded, rhs, accumulate, parallel);
        for (r, row) in d.chunks_exact(n).take(m).enumerate() {
            dst[r * ldd..r * ldd + n].copy_from_slice(row);
        }
        return;
    }
    let parallelism = if parallel {
        Parallelism::Rayon(0)
    } else {
        Parallelism::None
    };
    let stride = |s: usize| isize::try_from(s).expect("stride fits isize");
    // SAFETY: every element the product reads or writes lies inside the
    // slices, as `matmul` checked (last row and column of each operand; the
    // padded buffers above are made to the shapes they are given as); `dst`
    // is borrowed mutably and the operands immutably, so they do not alias.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            stride(ldd),
            accumulate,
            lhs.data.as_ptr(),
            stride(lhs.cs),
            stride(lhs.rs),
            rhs.data.as_ptr(),
            stride(rhs.cs),
            stride(rhs.rs),
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        );
    }
}

/// Defines a function whose body is compiled three times (AVX-512, AVX2+FMA,
/// baseline) and runs the one of the active level ([`crate::isa::active`]:
/// the best the CPU has, or the `SKILLRET_MAX_ISA` cap).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
                unsafe fn v4($($arg: $ty),*) $body
                #[target_feature(enable = "avx2,fma")]
                unsafe fn v3($($arg: $ty),*) $body
                match $crate::isa::active() {
                    // SAFETY: the features it was compiled for are present
                    // (`isa::active` is at most what the CPU has).
                    $crate::isa::Isa::Amx | $crate::isa::Isa::Avx512 => return unsafe { v4($($arg),*) },
                    // SAFETY: as above.
                    $crate::isa::Isa::Avx2 | $crate::isa::Isa::AvxVnni => return unsafe { v3($($arg),*) },
                    $crate::isa::Isa::Scalar => {}
                }
            }
            fn baseline($($arg: $ty),*) $body
            baseline($($arg),*)
        }
    };
}

const LANES: usize = 16;

/// log2(e), and ln 2 in two parts (the high one exact in 16 bits), for
/// the argument reductions of `exp`.
const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;

/// e^x to about 2e-7 relative error, branch-free so that it vectorises:
/// 2^n · e^r with n = round(x / ln 2), |r| ≤ ln 2 / 2, and a degree-7 Taylor
/// polynomial for e^r.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Rounding to the nearest integer (ties to even) by adding and taking
    // back 1.5·2^23: exact for |x / ln 2| < 2^22, one add and one subtract
    // in every instruction set (`round_ties_even` is a library call on
    // x86_64's baseline, which has no rounding instruction).
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.7);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p: f32 = 1.0 / 5040.0;
    p = p.mul_add(r, 1.0 / 720.0);
    p = p.mul_add(r, 1.0 / 120.0);
    p = p.mul_add(r, 1.0 / 24.0);
    p = p.mul_add(r, 1.0 / 6.0);
    p = p.mul_add(r, 0.5);
    p = p.mul_add(r, 1.0);
    p = p.mul_add(r, 1.0);
    // n is in [-126, 128]; build 2^n from its exponent bits (2^128 only for
    // x near the clamp, where the polynomial is below 1 and the product
    // stays finite after the split below).
    // `n as i32` would be a saturating conversion that the compiler does
    // lane by lane; adding 1.5·2^23 puts the integer n in the low mantissa
    // bits instead (exact for |n| < 2^22), which vectorises.
    let n = (n + ROUND).to_bits() as i32 - 0x4b40_0000;
    let half = n / 2;
    let a = f32::from_bits(((half + 127) as u32) << 23);
    let b = f32::from_bits(((n - half + 127) as u32) << 23);
    p * a * b
}

/// erf(x) to 3e-7 absolute error in f32, branch-free and without
/// `exp`: `x·P(x²)/Q(x²)` on `|x| ≤ 4` (beyond, erf is 1 in f32), a rational
/// fit of degrees 13/8 (`scripts/fit_erf.py`) by iteratively reweighted least
/// squares against erf to 30 digits (the fit's own error is 6e-8; f32
/// evaluation adds the rest). It costs a third of Abramowitz and Stegun
/// 7.1.26, whose `exp` and division made GELU 3% of a MiniLM pass.
#[inline(always)]
fn erf(x: f32) -> f32 {
    const P: [f32; 7] = [
        1.128_378_7,
        0.213_839_65,
        0.052_419_715,
        0.004_288_474,
        0.000_155_415_88,
        -1.989_695_7e-6,
        1.921_689_6e-8,
    ];
    const Q: [f32; 5] = [
        1.0,
        0.522_838_2,
        0.120_756_25,
        0.015_542_104,
        0.001_096_885_7,
    ];
    let x = x.clamp(-4.0, 4.0);
    let t = x * x;
    let mut p = P[6];
    for c in P[..6].iter().rev() {
        p = p.mul_add(t, *c);
    }
    let mut q = Q[4];
    for c in Q[..4].iter().rev() {
        q = q.mul_add(t, *c);
    }
    x * p / q
}

#[inline(always)]
fn tanh(x: f32) -> f32 {
    // tanh(x) = 1 - 2 / (e^{2x} + 1), stable over the clamped range of exp.
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

multiversion! {
    /// GELU in place: exact (erf) or the tanh approximation.
    pub fn gelu(xs: &mut [f32], tanh_form: bool) {
        if tanh_form {
            const C: f32 = 0.797_884_6; // sqrt(2 / pi)
            for x in xs.iter_mut() {
                let v = *x;
                *x = 0.5 * v * (1.0 + tanh(C * (v + 0.044_715 * v * v * v)));
            }
        } else {
            for x in xs.iter_mut() {
                let v = *x;
                *x = 0.5 * v * (1.0 + erf(v * std::f32::consts::FRAC_1_SQRT_2));
            }
        }
    }
}

multiversion! {
    /// Multiplies each `width`-wide row `r` of a strided matrix by `factors[r]`.
    pub fn scale_rows(xs: &mut [f32], stride: usize, width: usize, factors: &[f32]) {
        for (r, &f) in factors.iter().enumerate() {
            for v in &mut xs[r * stride..r * stride + width] {
                *v *= f;
            }
        }
    }
}

multiversion! {
    /// LayerNorm of each `width`-wide row of `xs`, in place.
    pub fn layer_norm(xs: &mut [f32], width: usize, weight: &[f32], bias: &[f32], eps: f32) {
        let n = width as f32;
        for row in xs.chunks_exact_mut(width) {
            let mut lanes = [0.0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for chunk in &mut chunks {
                for (l, &v) in lanes.iter_mut().zip(chunk) {
                    *l += v;
                }
            }
            let mean = (lanes.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()) / n;
            let mut lanes = [0.0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for chunk in &mut chunks {
                for (l, &v) in lanes.iter_mut().zip(chunk) {
                    let d = v - mean;
                    *l = d.mul_add(d, *l);
                }
            }
            let tail: f32 = chunks.remainder().iter().map(|&v| (v - mean) * (v - mean)).sum();
            let var = (lanes.iter().sum::<f32>() + tail) / n;
            let inv = 1.0 / (var + eps).sqrt();
            for ((v, &w), &b) in row.iter_mut().zip(weight).zip(bias) {
                *v = ((*v - mean) * inv).mul_add(w, b);
            }
        }
    }
}

multiversion! {
    /// RMSNorm of each `width`-wide row of `xs`, in place:
    /// `x · w / sqrt(mean(x²) + eps)`, as transformers' `Qwen3RMSNorm` (in f32).
    pub fn rms_norm(xs: &mut [f32], width: usize, weight: &[f32], eps: f32) {
        let n = width as f32;
        for row in xs.chunks_exact_mut(width) {
            let mut lanes = [0.0f32; LANES];
            let mut chunks = row.chunks_exact(LANES);
            for chunk in &mut chunks {
                for (l, &v) in lanes.iter_mut().zip(chunk) {
                    *l = v.mul_add(v, *l);
                }
            }
            let tail: f32 = chunks.remainder().iter().map(|&v| v * v).sum();
            let mean = (lanes.iter().sum::<f32>() + tail) / n;
            let inv = 1.0 / (mean + eps).sqrt();
            for (v, &w) in row.iter_mut().zip(weight) {
                *v = w * (*v * inv);
            }
        }
    }
}

multiversion! {
    /// GeGLU with the tanh approximation of GELU (Gemma's
    /// `gelu_pytorch_tanh`): `out[i] = gelu(gate[i]) · up[i]` for each row of
    /// `gate_up` (`gate` then `up`, each `width` wide) into the rows of `out`.
    pub fn gelu_tanh_mul(gate_up: &[f32], out: &mut [f32], width: usize) {
        const C: f32 = 0.797_884_6; // sqrt(2 / pi)
        for (row, out) in gate_up.chunks_exact(2 * width).zip(out.chunks_exact_mut(width)) {
            let (gate, up) = row.split_at(width);
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = 0.5 * g * (1.0 + tanh(C * (g + 0.044_715 * g * g * g))) * u;
            }
        }
    }
}

multiversion! {
    /// SwiGLU: `out[i] = silu(gate[i]) · up[i]` for each row of `gate_up`
    /// (`gate` then `up`, each `width` wide) into the rows of `out`.
    pub fn silu_mul(gate_up: &[f32], out: &mut [f32], width: usize) {
        for (row, out) in gate_up.chunks_exact(2 * width).zip(out.chunks_exact_mut(width)) {
            let (gate, up) = row.split_at(width);
            for ((o, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *o = g / (1.0 + exp(-g)) * u;
            }
        }
    }
}

/// One step of the online softmax (flash attention) for one row of scores:
/// the first `valid` entries of `row` (raw `q·k`) become
/// `exp((s − m′)·scale)` and the rest 0, where `m′` is the running maximum
/// `max` updated with this block; `sum` becomes `sum·α + Σ row`. Returns `α =
/// exp((m − m′)·scale)`, the factor by which the row's partial output must be
/// scaled before this block's `P·V` is added.
pub fn online_softmax(
    row: &mut [f32],
    valid: usize,
    scale: f32,
    max: &mut f32,
    sum: &mut f32,
) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if crate::isa::avx512() {
        // SAFETY: the features it was compiled for are present.
        return unsafe { avx512::online_softmax(row, valid, scale, max, sum) };
    }
    #[cfg(target_arch = "x86_64")]
    if crate::isa::allows(crate::isa::Isa::Avx2) {
        // SAFETY: as above.
        return unsafe { avx2::online_softmax(row, valid, scale, max, sum) };
    }
    let mut alpha = 1.0;
    online_softmax_into(row, valid, scale, max, sum, &mut alpha);
    alpha
}

/// [`online_softmax`] on the keys `from..to` of a row of raw scores (the
/// rest weigh 0), its weights written rounded to bf16 (nearest even) in one
/// pass: weight `j` of `0..len` (zero past `to`) at `out[(j / 32)·stride + j
/// % 32]`, the layout of a row of attention's `P` strip. The weights are
/// rounded to bf16 anyway, so `e^x` takes a degree-5 polynomial (relative
/// error 3e-6, against bf16's half step of 2e-3: the rounding of a weight
/// differs from that of the exact `e^x` about once in a thousand), not the
/// degree-7 one of f32 work. The row's running maximum and sum are updated
/// as `online_softmax` does (the sum of the f32 weights); returns α.
#[allow(clippy::too_many_arguments)]
pub fn softmax_to_bf16(
    row: &[f32],
    (from, to): (usize, usize),
    len: usize,
    scale: f32,
    max: &mut f32,
    sum: &mut f32,
    out: &mut [u16],
    stride: usize,
) -> f32 {
    assert!(from <= to && to <= row.len() && row.len() <= len);
    assert!(len == 0 || out.len() > (len - 1) / 32 * stride + (len - 1) % 32);
    #[cfg(target_arch = "x86_64")]
    if crate::bf16::supported() {
        // SAFETY: the CPU has AVX-512 BF16 (and F); the extents are asserted.
        return unsafe {
            avx512::softmax_to_bf16(row, (from, to), len, scale, max, sum, out, stride)
        };
    }
    let place = |j: usize| (j / 32) * stride + j % 32;
    if from >= to {
        (0..len).for_each(|j| out[place(j)] = 0);
        return 1.0;
    }
    let alpha = next_max(
        max,
        row[from..to]
            .iter()
            .fold(f32::NEG_INFINITY, |m, &v| m.max(v)),
        scale,
    );
    let new_max = *max;
    let mut total = 0.0f32;
    for j in 0..len {
        let e = if (from..to).contains(&j) {
            exp_for_bf16((row[j] - new_max) * scale)
        } else {
            0.0
        };
        total += e;
        out[place(j)] = crate::tile::to_bf16(e);
    }
    *sum = sum.mul_add(alpha, total);
    alpha
}

/// The online softmax's step for a block whose largest score is
/// `block_max`: the running maximum `max` taken to the larger of the two,
/// and α = e^((m − m′)·scale), the factor of the earlier sums (0 before
/// any block).
#[inline(always)]
fn next_max(max: &mut f32, block_max: f32, scale: f32) -> f32 {
    let new_max = max.max(block_max);
    let alpha = if *max == f32::NEG_INFINITY {
        0.0
    } else {
        exp((*max - new_max) * scale)
    };
    *max = new_max;
    alpha
}

/// e^x for x ≤ 0 (a softmax's), to 3e-6 relative error: n = round(x / ln
/// 2), r = x − n·ln 2 in two parts, a degree-5 Taylor polynomial for e^r,
/// 2^n applied to its exponent; below −87 it gives 0.
#[inline(always)]
fn exp_for_bf16(x: f32) -> f32 {
    if x < -87.0 {
        return 0.0;
    }
    const ROUND: f32 = 12_582_912.0;
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = (x - n * LN2_HI) - n * LN2_LO;
    let mut p: f32 = 1.0 / 120.0;
    for c in [1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = p.mul_add(r, c);
    }
    p * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

/// Explicit AVX-512 forms of the hottest element-wise kernels (the
/// compiler does not vectorise the branch-free `exp` above in every loop).
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    /// e^x for 16 lanes, as the scalar [`super::exp`]: n = round(x / ln 2),
    /// r = x − n·ln 2 in two parts, a degree-7 Taylor polynomial for e^r,
    /// and 2^n applied exactly by `vscalefps`.
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn exp16(x: __m512) -> __m512 {
        let x = _mm512_max_ps(
            _mm512_min_ps(x, _mm512_set1_ps(88.7)),
            _mm512_set1_ps(-87.3),
        );
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
        let mut p = _mm512_set1_ps(1.0 / 5040.0);
        for c in [
            1.0 / 720.0,
            1.0 / 120.0,
            1.0 / 24.0,
            1.0 / 6.0,
            0.5,
            1.0,
            1.0,
        ] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        _mm512_scalef_ps(p, n)
    }

    /// [`super::online_softmax`] on 16 lanes at a time.
    #[target_feature(enable = "avx512f,fma")]
    pub(super) fn online_softmax(
        row: &mut [f32],
        valid: usize,
        scale: f32,
        max: &mut f32,
        sum: &mut f32,
    ) -> f32 {
        let (live, masked) = row.split_at_mut(valid);
        masked.fill(0.0);
        let n = live.len();
        let tail = n % 16;
        let tail_mask: __mmask16 = ((1u32 << tail) - 1) as u16;
        let p = live.as_mut_ptr();
        let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 ≤ n, inside `live`.
            m = _mm512_max_ps(m, unsafe { _mm512_loadu_ps(p.add(i)) });
            i += 16;
        }
        if tail > 0 {
            // SAFETY: the masked lanes are i..n, inside `live`.
            let v = unsafe {
                _mm512_mask_loadu_ps(_mm512_set1_ps(f32::NEG_INFINITY), tail_mask, p.add(i))
            };
            m = _mm512_max_ps(m, v);
        }
        let alpha = super::next_max(max, _mm512_reduce_max_ps(m), scale);
        let new_max = *max;
        let scale_v = _mm512_set1_ps(scale);
        let shift = _mm512_set1_ps(-new_max * scale);
        let mut total = _mm512_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: i + 16 ≤ n, inside `live`.
            unsafe {
                let e = exp16(_mm512_fmadd_ps(_mm512_loadu_ps(p.add(i)), scale_v, shift));
                _mm512_storeu_ps(p.add(i), e);
                total = _mm512_add_ps(total, e);
            }
            i += 16;
        }
        if tail > 0 {
            // SAFETY: the masked lanes are i..n, inside `live`.
            unsafe {
                let v = _mm512_maskz_loadu_ps(tail_mask, p.add(i));
                let e = _mm512_maskz_mov_ps(tail_mask, exp16(_mm512_fmadd_ps(v, scale_v, shift)));
                _mm512_mask_storeu_ps(p.add(i), tail_mask, e);
                total = _mm512_add_ps(total, e);
            }
        }
        *sum = sum.mul_add(alpha, _mm512_reduce_add_ps(total));
        alpha
    }

    /// [`super::exp_for_bf16`] on 16 lanes (x ≤ 0; `vscalefps` applies 2^n,
    /// which gives 0 far below).
    #[inline]
    #[target_feature(enable = "avx512f,fma")]
    fn exp16_for_bf16(x: __m512) -> __m512 {
        let x = _mm512_max_ps(x, _mm512_set1_ps(-88.0));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        );
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(super::LN2_HI), x);
        let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(super::LN2_LO), r);
        let mut p = _mm512_set1_ps(1.0 / 120.0);
        for c in [1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        _mm512_scalef_ps(p, n)
    }

    /// [`super::softmax_to_bf16`] on 16 lanes at a time.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BF16; the caller asserted the extents.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
    pub(super) unsafe fn softmax_to_bf16(
        row: &[f32],
        (from, to): (usize, usize),
        len: usize,
        scale: f32,
        max: &mut f32,
        sum: &mut f32,
        out: &mut [u16],
        stride: usize,
    ) -> f32 {
        let p = row.as_ptr();
        let o = out.as_mut_ptr();
        // Lanes j..j + 16 of the row that are keys from..to.
        let live = |j: usize| -> __mmask16 {
            let lo = from.saturating_sub(j).min(16);
            let hi = to.saturating_sub(j).min(16);
            (((1u32 << hi) - 1) & !((1u32 << lo) - 1)) as u16
        };
        // SAFETY (for the block): every load is masked to keys below `to` ≤
        // row.len(), every store to lanes below `len`, at places inside
        // `out` (asserted by the caller); bf16 vectors are 16-bit lanes.
        unsafe {
            let store = |j: usize, e: __m512| {
                let mask = crate::tile::tail_mask(len - j);
                let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(e));
                _mm256_mask_storeu_epi16(o.add((j / 32) * stride + j % 32).cast(), mask, h);
            };
            if from >= to {
                for j in (0..len).step_by(16) {
                    store(j, _mm512_setzero_ps());
                }
                return 1.0;
            }
            let mut m = _mm512_set1_ps(f32::NEG_INFINITY);
            let mut j = from / 16 * 16;
            while j < to {
                let v = if j >= from && j + 16 <= to {
                    _mm512_loadu_ps(p.add(j))
                } else {
                    _mm512_mask_loadu_ps(_mm512_set1_ps(f32::NEG_INFINITY), live(j), p.add(j))
                };
                m = _mm512_max_ps(m, v);
                j += 16;
            }
            let alpha = super::next_max(max, _mm512_reduce_max_ps(m), scale);
            let new_max = *max;
            let scale_v = _mm512_set1_ps(scale);
            let shift = _mm512_set1_ps(-new_max * scale);
            let mut total = _mm512_setzero_ps();
            for j in (0..len).step_by(16) {
                let e = if j >= from && j + 16 <= to {
                    exp16_for_bf16(_mm512_fmadd_ps(_mm512_loadu_ps(p.add(j)), scale_v, shift))
                } else if j + 16 <= from || j >= to {
                    _mm512_setzero_ps()
                } else {
                    let mask = live(j);
                    let v = _mm512_maskz_loadu_ps(mask, p.add(j));
                    _mm512_maskz_mov_ps(mask, exp16_for_bf16(_mm512_fmadd_ps(v, scale_v, shift)))
                };
                total = _mm512_add_ps(total, e);
                store(j, e);
            }
            *sum = sum.mul_add(alpha, _mm512_reduce_add_ps(total));
            alpha
        }
    }
}

/// The AVX2 + FMA forms of [`avx512`]'s kernels, eight lanes at a time.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// e^x for 8 lanes and x ≤ 88, the softmax's (whose arguments are at
    /// most 0, up to a rounding): the work of [`super::exp`] cut to what
    /// that range needs, ten operations on the FMA ports where `exp` takes
    /// fourteen. No upper clamp; a lower one at −86.6, so that n is at least
    /// −125 and p·2^n a normal number, made by adding n to p's exponent bits
    /// (no multiply); r = x − n·ln 2 in one step (ln 2's f32 rounding adds
    /// at most 1.9e−9·|n| relative error: 3e−8 down to e^−11, the weights
    /// that count); e^r by a degree-6 minimax polynomial on |r| ≤ ln 2 / 2
    /// (1.2e−7 relative error in f32, against the degree-7 Taylor's 9e−8).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn exp8(x: __m256) -> __m256 {
        const ROUND: f32 = 12_582_912.0;
        let x = _mm256_max_ps(x, _mm256_set1_ps(-86.6));
        // n = x·log2(e) rounded to the nearest integer (ties to even), which
        // the sum also holds in its low mantissa bits.
        let sum = _mm256_fmadd_ps(
            x,
            _mm256_set1_ps(std::f32::consts::LOG2_E),
            _mm256_set1_ps(ROUND),
        );
        let n = _mm256_sub_ps(sum, _mm256_set1_ps(ROUND));
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(std::f32::consts::LN_2), x);
        // 1 + r + c2·r² + … + c6·r⁶, fitted by iteratively reweighted least
        // squares for the smallest relative error.
        let mut p = _mm256_set1_ps(0.001_381_460_8);
        for c in [
            0.008_368_711,
            0.041_668_39,
            0.166_665_21,
            0.499_999_94,
            1.0,
            1.0,
        ] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        // bits(sum) = 0x4b40_0000 + n, whose lowest set bit is 22, so
        // bits(sum) << 23 = n << 23 (mod 2^32): n added to p's exponent.
        let n_bits = _mm256_slli_epi32::<23>(_mm256_castps_si256(sum));
        _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), n_bits))
    }

    /// The sum of the eight lanes.
    #[inline]
    #[target_feature(enable = "avx2")]
    fn sum8(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// [`super::online_softmax`] on 8 lanes at a time (the tail through a
    /// padded copy).
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn online_softmax(
        row: &mut [f32],
        valid: usize,
        scale: f32,
        max: &mut f32,
        sum: &mut f32,
    ) -> f32 {
        let (live, masked) = row.split_at_mut(valid);
        masked.fill(0.0);
        let n = live.len();
        let whole = n - n % 8;
        let p = live.as_mut_ptr();
        // Four running maxima: no chain of dependent `vmaxps` through the row.
        let mut ms = [_mm256_set1_ps(f32::NEG_INFINITY); 4];
        let mut i = 0;
        while i + 32 <= whole {
            for (k, m) in ms.iter_mut().enumerate() {
                // SAFETY: i + 32 ≤ n, inside `live`.
                *m = _mm256_max_ps(*m, unsafe { _mm256_loadu_ps(p.add(i + 8 * k)) });
            }
            i += 32;
        }
        while i < whole {
            // SAFETY: i + 8 ≤ n, inside `live`.
            ms[0] = _mm256_max_ps(ms[0], unsafe { _mm256_loadu_ps(p.add(i)) });
            i += 8;
        }
        let m = _mm256_max_ps(_mm256_max_ps(ms[0], ms[1]), _mm256_max_ps(ms[2], ms[3]));
        // The eight lanes' maximum in registers, then the tail's.
        let m = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps::<1>(m));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        let block_max = live[whole..]
            .iter()
            .fold(_mm_cvtss_f32(m), |a, &b| a.max(b));
        let new_max = max.max(block_max);
        let alpha = if *max == f32::NEG_INFINITY {
            0.0
        } else {
            super::exp((*max - new_max) * scale)
        };
        *max = new_max;
        let scale_v = _mm256_set1_ps(scale);
        let shift = _mm256_set1_ps(-new_max * scale);
        let mut total = _mm256_setzero_ps();
        let mut i = 0;
        while i < whole {
            // SAFETY: i + 8 ≤ n, inside `live`.
            unsafe {
                let e = exp8(_mm256_fmadd_ps(_mm256_loadu_ps(p.add(i)), scale_v, shift));
                _mm256_storeu_ps(p.add(i), e);
                total = _mm256_add_ps(total, e);
            }
            i += 8;
        }
        let mut total = sum8(total);
        if whole < n {
            let tail = &mut live[whole..];
            let mut buffer = [0.0f32; 8];
            buffer[..tail.len()].copy_from_slice(tail);
            // SAFETY: eight floats.
            unsafe {
                let e = exp8(_mm256_fmadd_ps(
                    _mm256_loadu_ps(buffer.as_ptr()),
                    scale_v,
                    shift,
                ));
                _mm256_storeu_ps(buffer.as_mut_ptr(), e);
            }
            for (t, e) in tail.iter_mut().zip(buffer) {
                *t = e;
                total += e;
            }
        }
        *sum = sum.mul_add(alpha, total);
        alpha
    }
}

multiversion! {
    fn online_softmax_into(
        row: &mut [f32],
        valid: usize,
        scale: f32,
        max: &mut f32,
        sum: &mut f32,
        alpha: &mut f32,
    ) {
        let (live, masked) = row.split_at_mut(valid);
        masked.fill(0.0);
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = live.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (l, &v) in lanes.iter_mut().zip(chunk) {
                *l = l.max(v);
            }
        }
        let mut block_max = lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        for &v in chunks.remainder() {
            block_max = block_max.max(v);
        }
        let new_max = max.max(block_max);
        *alpha = if *max == f32::NEG_INFINITY {
            0.0
        } else {
            exp((*max - new_max) * scale)
        };
        *max = new_max;
        let shift = new_max * scale;
        let mut sums = [0.0f32; LANES];
        let mut chunks = live.chunks_exact_mut(LANES);
        for chunk in &mut chunks {
            for (s, v) in sums.iter_mut().zip(chunk.iter_mut()) {
                *v = exp(v.mul_add(scale, -shift));
                *s += *v;
            }
        }
        let mut total: f32 = sums.iter().sum();
        for v in chunks.into_remainder() {
            *v = exp(v.mul_add(scale, -shift));
            total += *v;
        }
        *sum = sum.mul_add(*alpha, total);
    }
}

multiversion! {
    /// `dst[i] = a[i] + b[i]` over the whole slices (equal lengths).
    pub fn add(dst: &mut [f32], a: &[f32], b: &[f32]) {
        for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
            *d = x + y;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The weights written in bf16 are those of the f32 online softmax,
    /// rounded: within one bf16 step of them (equal almost always), the
    /// running maximum equal and the sum within 1e-5; masked keys and the
    /// padding are zero. On the AVX-512 path and the portable one.
    #[test]
    fn softmax_to_bf16_is_the_online_softmax_rounded() {
        let row: Vec<f32> = (0..200)
            .map(|i| ((i * 7919) % 211) as f32 / 9.0 - 11.0)
            .collect();
        let stride = 96;
        for (from, to, len) in [
            (0, 200, 224),
            (0, 37, 64),
            (5, 150, 160),
            (17, 17, 32),
            (40, 30, 64),
            (0, 1, 32),
        ] {
            let n = len.min(row.len());
            for prior in [f32::NEG_INFINITY, 1.5, 30.0] {
                let (mut max, mut sum) = (prior, 2.0f32);
                let mut want = row[..n].to_vec();
                let live = (from.min(n), to.min(n));
                let alpha_want = if live.0 < live.1 {
                    want[..live.0].fill(0.0);
                    online_softmax(
                        &mut want[live.0..],
                        live.1 - live.0,
                        0.7,
                        &mut max,
                        &mut sum,
                    )
                } else {
                    want.fill(0.0);
                    1.0
                };
                want.resize(len, 0.0);
                let mut out = vec![0xffffu16; (len / 32) * stride];
                let (mut m2, mut s2) = (prior, 2.0f32);
                let alpha = softmax_to_bf16(
                    &row[..n],
                    (live.0.min(live.1), live.1),
                    len,
                    0.7,
                    &mut m2,
                    &mut s2,
                    &mut out,
                    stride,
                );
                assert_eq!(m2, max, "{from}..{to} of {len}");
                assert!((alpha - alpha_want).abs() <= 1e-6 * alpha_want.max(1.0));
                assert!(
                    (s2 - sum).abs() <= 1e-5 * sum.abs().max(1.0),
                    "sum {s2} against {sum}"
                );
                let mut differ = 0;
                for (j, &w) in want.iter().enumerate() {
                    let got = out[(j / 32) * stride + j % 32];
                    let exact = crate::tile::to_bf16(w);
                    assert!(
                        got.abs_diff(exact) <= 1,
                        "{from}..{to}: key {j}: {got:#x} against {exact:#x}"
                    );
                    differ += usize::from(got != exact);
                    if w == 0.0 {
                        assert_eq!(got, 0, "key {j} is masked or padding");
                    }
                }
                assert!(differ * 50 <= len, "{differ} of {len} weights differ");
            }
        }
    }

    #[test]
    fn normalisation() {
        let mut v = [3.0, 4.0];
        normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut zero = [0.0, 0.0];
        normalize(&mut zero);
        assert_eq!(zero, [0.0, 0.0]);
    }

    #[test]
    fn exp_and_erf_are_accurate() {
        let mut worst_exp = 0.0f64;
        let mut worst_erf = 0.0f64;
        for i in -8000..=8000 {
            let x = i as f32 / 100.0;
            let want = f64::from(x).exp();
            if want > 1e-30 && want < 1e30 {
                worst_exp = worst_exp.max(((f64::from(exp(x)) - want) / want).abs());
            }
            let x = i as f32 / 1000.0;
            // erf from the standard library of f64 via a series is not
            // available; compare against a high-order reference instead.
            let want = erf_reference(f64::from(x));
            worst_erf = worst_erf.max((f64::from(erf(x)) - want).abs());
        }
        assert!(worst_exp < 3e-7, "exp relative error {worst_exp}");
        assert!(worst_erf < 5e-7, "erf absolute error {worst_erf}");
    }

    /// erf by its Taylor series (|x| < 2.5) or erfc's continued fraction,
    /// in f64.
    fn erf_reference(x: f64) -> f64 {
        if x.abs() >= 2.5 {
            // erfc(a) = e^(−a²)/√π · 1/(a + (1/2)/(a + 1/(a + (3/2)/(a + …)))).
            let a = x.abs();
            let mut k = a;
            for n in (1..=80).rev() {
                k = a + f64::from(n) / 2.0 / k;
            }
            let erfc = (-a * a).exp() / std::f64::consts::PI.sqrt() / k;
            return x.signum() * (1.0 - erfc);
        }
        let mut sum: f64 = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs().max(1e-300) || n < 5.0 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
            if n > 200.0 {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn online_softmax_over_blocks_matches_the_definition() {
        let row: Vec<f32> = (0..37).map(|i| (i as f32 * 0.7).sin() * 5.0).collect();
        let scale = 0.3;
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let e: Vec<f64> = row
            .iter()
            .map(|&v| f64::from((v - max) * scale).exp())
            .collect();
        let total: f64 = e.iter().sum();
        // Two blocks, the second with its last 5 entries masked (causal).
        let (mut m, mut sum) = (f32::NEG_INFINITY, 0.0f32);
        let mut first = row[..20].to_vec();
        let alpha = online_softmax(&mut first, 20, scale, &mut m, &mut sum);
        assert_eq!(alpha, 0.0);
        let mut second = row[20..].to_vec();
        let alpha = online_softmax(&mut second, 12, scale, &mut m, &mut sum);
        assert!(second[12..].iter().all(|&v| v == 0.0));
        let masked: f64 = e[32..].iter().sum();
        // The first block's weights, rescaled, then the second's, over the sum.
        for (i, want) in e[..32].iter().enumerate() {
            let got = if i < 20 {
                first[i] * alpha
            } else {
                second[i - 20]
            };
            let want = want / (total - masked);
            assert!(
                (f64::from(got / sum) - want).abs() < 1e-6,
                "{i}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn the_avx512_forms_equal_the_portable_ones() {
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("fma") {
            use std::arch::x86_64::*;
            // exp over its whole range, to the portable form's accuracy.
            let mut worst = 0.0f64;
            for i in -560..=560 {
                let xs: [f32; 16] = std::array::from_fn(|l| (i * 16 + l as i32) as f32 / 100.0);
                let mut got = [0.0f32; 16];
                // SAFETY: the features were detected above.
                unsafe {
                    _mm512_storeu_ps(
                        got.as_mut_ptr(),
                        avx512::exp16(_mm512_loadu_ps(xs.as_ptr())),
                    );
                };
                for (x, g) in xs.iter().zip(got) {
                    let want = f64::from(*x).exp();
                    if want > 1e-30 && want < 1e30 {
                        worst = worst.max((f64::from(g) - want).abs() / want);
                    }
                }
            }
            assert!(worst < 3e-7, "exp16 relative error {worst}");
            // The online softmax, lengths with and without a tail, masked entries.
            for (len, valid) in [(16, 16), (37, 30), (5, 5), (64, 1), (300, 299)] {
                let row: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 7.0).collect();
                let (mut a, mut b) = (row.clone(), row.clone());
                let (mut ma, mut sa, mut mb, mut sb) = (1.5f32, 2.0f32, 1.5f32, 2.0f32);
                // SAFETY: the features were detected above.
                let alpha_a =
                    unsafe { avx512::online_softmax(&mut a, valid, 0.3, &mut ma, &mut sa) };
                let mut alpha_b = 0.0;
                online_softmax_into(&mut b, valid, 0.3, &mut mb, &mut sb, &mut alpha_b);
                assert_eq!(ma, mb);
                assert!(
                    (alpha_a - alpha_b).abs() <= 1e-6 * alpha_b.abs(),
                    "{alpha_a} vs {alpha_b}"
                );
                assert!((sa - sb).abs() <= 1e-5 * sb, "{sa} vs {sb}");
                for (x, y) in a.iter().zip(&b) {
                    assert!((x - y).abs() <= 1e-6 * y.abs().max(1e-30), "{x} vs {y}");
                }
            }
        }
    }

    #[test]
    fn the_avx2_forms_equal_the_portable_ones() {
        #[cfg(target_arch = "x86_64")]
        if crate::isa::Isa::Avx2.available() {
            use std::arch::x86_64::*;
            let mut worst = 0.0f64;
            // Its domain: x ≤ 88 (the softmax's arguments are at most 0).
            for i in -1120..=1100 {
                let xs: [f32; 8] = std::array::from_fn(|l| (i * 8 + l as i32) as f32 / 100.0);
                let mut got = [0.0f32; 8];
                // SAFETY: the features were detected above.
                unsafe {
                    _mm256_storeu_ps(got.as_mut_ptr(), avx2::exp8(_mm256_loadu_ps(xs.as_ptr())));
                };
                for (x, g) in xs.iter().zip(got) {
                    let want = f64::from(*x).exp();
                    if want > 1e-30 && want < 1e30 {
                        worst = worst.max((f64::from(g) - want).abs() / want);
                    }
                    assert!(g.is_finite() && g > 0.0, "exp8({x}) = {g}");
                }
            }
            assert!(worst < 3e-7, "exp8 relative error {worst}");
            for (len, valid) in [(16, 16), (37, 30), (5, 5), (64, 1), (300, 299), (8, 3)] {
                let row: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin() * 7.0).collect();
                for start in [(1.5f32, 2.0f32), (f32::NEG_INFINITY, 0.0)] {
                    let (mut a, mut b) = (row.clone(), row.clone());
                    let ((mut ma, mut sa), (mut mb, mut sb)) = (start, start);
                    // SAFETY: the features were detected above.
                    let alpha_a =
                        unsafe { avx2::online_softmax(&mut a, valid, 0.3, &mut ma, &mut sa) };
                    let mut alpha_b = 0.0;
                    online_softmax_into(&mut b, valid, 0.3, &mut mb, &mut sb, &mut alpha_b);
                    assert_eq!(ma, mb);
                    assert!(
                        (alpha_a - alpha_b).abs() <= 1e-6 * alpha_b.abs(),
                        "{alpha_a} vs {alpha_b}"
                    );
                    assert!((sa - sb).abs() <= 1e-5 * sb, "{sa} vs {sb}");
                    for (x, y) in a.iter().zip(&b) {
                        assert!((x - y).abs() <= 1e-6 * y.abs().max(1e-30), "{x} vs {y}");
                    }
                }
            }
        }
    }

    #[test]
    fn rms_norm_and_swiglu() {
        let mut xs = vec![3.0f32, 4.0, 0.0, 0.0];
        rms_norm(&mut xs, 2, &[1.0, 2.0], 1e-6);
        let r = (12.5f32 + 1e-6).sqrt();
        assert!((xs[0] - 3.0 / r).abs() < 1e-6 && (xs[1] - 8.0 / r).abs() < 1e-6);
        assert_eq!(&xs[2..], &[0.0, 0.0]);
        let mut out = [0.0f32; 2];
        silu_mul(&[1.0, -2.0, 3.0, 0.5], &mut out, 2);
        let silu = |x: f32| x / (1.0 + (-x).exp());
        assert!((out[0] - silu(1.0) * 3.0).abs() < 1e-6);
        assert!((out[1] - silu(-2.0) * 0.5).abs() < 1e-6);
    }

    #[test]
    fn layer_norm_and_gelu() {
        let mut xs: Vec<f32> = (0..40).map(|i| i as f32).collect();
        layer_norm(&mut xs, 20, &[1.0; 20], &[0.5; 20], 1e-12);
        for row in xs.chunks(20) {
            let mean: f32 = row.iter().sum::<f32>() / 20.0;
            assert!((mean - 0.5).abs() < 1e-5);
        }
        let mut g = vec![-3.0f32, -1.0, 0.0, 0.5, 2.0];
        gelu(&mut g, false);
        let want = [-0.004_049_7, -0.158_655_25, 0.0, 0.345_731_1, 1.954_5];
        for (a, b) in g.iter().zip(want) {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    #[test]
    fn gemm_rows_give_each_row_the_same_bits_whatever_the_count() {
        // The `gemm` crate sums a lone row (or a few short ones) in another
        // order than a block of rows: padded, every count gives each row the
        // bits it gets among 150, wherever it starts, accumulating or not.
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut random = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for (n, k) in [(384, 384), (96, 700), (40, 64), (8, 3), (300, 1536)] {
            let total = 150;
            let a: Vec<f32> = (0..total * k).map(|_| random()).collect();
            let w: Vec<f32> = (0..n * k).map(|_| random()).collect();
            let init: Vec<f32> = (0..total * n).map(|_| random()).collect();
            let rhs = View::transposed(&w, k, n, k);
            for accumulate in [false, true] {
                let mut all = init.clone();
                gemm_rows(
                    &mut all,
                    n,
                    View::rows(&a, total, k, k),
                    rhs,
                    accumulate,
                    true,
                );
                for (start, m) in [(0, 1), (7, 1), (3, 2), (11, 5), (1, 9), (20, 64), (5, 65)] {
                    // dst with a wider leading dimension than the product's.
                    let ldd = n + 3;
                    let mut part = vec![0.0f32; m * ldd];
                    for r in 0..m {
                        let src = &init[(start + r) * n..(start + r + 1) * n];
                        part[r * ldd..r * ldd + n].copy_from_slice(src);
                    }
                    let lhs = View::rows(&a[start * k..], m, k, k);
                    gemm_rows(&mut part, ldd, lhs, rhs, accumulate, false);
                    for r in 0..m {
                        let got = &part[r * ldd..r * ldd + n];
                        let want = &all[(start + r) * n..(start + r + 1) * n];
                        assert!(
                            got.iter()
                                .zip(want)
                                .all(|(x, y)| x.to_bits() == y.to_bits()),
                            "n {n} k {k} rows {start}+{m} accumulate {accumulate}: row {r}"
                        );
                        assert!(part[r * ldd + n..(r + 1) * ldd].iter().all(|&x| x == 0.0));
                    }
                }
            }
        }
    }

    #[test]
    fn matmul_with_transposed_rhs_and_accumulation() {
        // a: 2x3, b stored as 2x3 (so bᵀ is 3x2); c = a·bᵀ + 1.
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0];
        let mut c = [1.0f32; 4];
        matmul(
            &mut c,
            2,
            View::rows(&a, 2, 3, 3),
            View::transposed(&b, 3, 2, 3),
            true,
            false,
        );
        assert_eq!(c, [5.0, 3.0, 11.0, 6.0]);
    }
}
