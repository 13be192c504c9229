//! The int8 path: linear layers on AVX-512 VNNI (`vpdpbusd`), accumulating
//! in i32.
//!
//! Weights are quantised once, at load, per output channel (symmetric:
//! `w ≈ scale[o] · q`, `q ∈ [-127, 127]`) and packed in panels of 64 output
//! columns: for each group of four inputs (k..k+4) a panel holds 64 groups of
//! four signed bytes, four 512-bit vectors. Activations are quantised per row
//! at run time (symmetric, `a ≈ s[r] · p`, `p ∈ [-127, 127]`) and stored as
//! `p + 128`, the unsigned bytes `vpdpbusd` multiplies; the offset is taken
//! back exactly from each column's integer sum: `Σ (p + 128)·q = Σ p·q +
//! 128·Σ q`. A micro-kernel keeps a 6 × 64 tile of i32 sums in 24 registers;
//! each step does 24 `vpdpbusd` (four multiply-adds per lane each). The
//! result `s[r] · scale[o] · Σ p·q` is added to the destination, which holds
//! the bias and residual as on the f32 path.

// Only the x86_64 kernels read the packed weights.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use rayon::prelude::*;

use crate::linear::{PACKED_ROWS_PER_TASK, Post, packed_tasks};
#[cfg(target_arch = "x86_64")]
use crate::linear::{epilogue_start, tail_mask};

/// Output columns of a packed panel.
const PANEL: usize = 64;
/// Rows of the micro-kernel's tile.
const MR: usize = 6;
/// Inputs per step of the kernel (four bytes per 32-bit lane).
const GROUP: usize = 4;

/// Whether this CPU runs the int8 kernels.
pub(crate) fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::avx512() && std::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A weight matrix `W` (`outputs × inputs`, row-major as stored) quantised
/// per output channel and packed for `x · Wᵀ` on VNNI.
pub(crate) struct PackedWeight {
    data: Vec<i8>,
    /// Per output: the dequantisation scale.
    scale: Vec<f32>,
    /// Per output: `128 · Σ_k q[o, k]`, the offset of the unsigned activations.
    offset: Vec<i32>,
    /// Groups of four inputs (inputs rounded up to a multiple of four).
    groups: usize,
    inputs: usize,
    outputs: usize,
}

impl PackedWeight {
    /// Quantises and packs a weight as stored (`outputs × inputs`, row-major).
    pub(crate) fn pack(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        let groups = inputs.div_ceil(GROUP);
        let panels = outputs.div_ceil(PANEL);
        let panel_len = groups * PANEL * GROUP;
        let mut data = vec![0i8; panels * panel_len];
        let mut scale = vec![0.0f32; panels * PANEL];
        let mut offset = vec![0i32; panels * PANEL];
        data.par_chunks_mut(panel_len)
            .zip(scale.par_chunks_mut(PANEL))
            .zip(offset.par_chunks_mut(PANEL))
            .enumerate()
            .for_each(|(panel, ((block, scale), offset))| {
                for j in 0..PANEL {
                    let col = panel * PANEL + j;
                    if col >= outputs {
                        break;
                    }
                    let row = &weight[col * inputs..(col + 1) * inputs];
                    let (s, inverse) = symmetric_scale(row);
                    scale[j] = s;
                    let mut sum = 0i32;
                    for (k, &v) in row.iter().enumerate() {
                        let q = quantise(v, inverse);
                        sum += i32::from(q);
                        block[(k / GROUP) * PANEL * GROUP + GROUP * j + k % GROUP] = q;
                    }
                    offset[j] = 128 * sum;
                }
            });
        Self {
            data,
            scale,
            offset,
            groups,
            inputs,
            outputs,
        }
    }
}

/// The scale of a symmetric 8-bit quantisation of `values` and its inverse
/// (1 and 0 for an all-zero row, which then quantises to zeros).
#[inline]
fn symmetric_scale(values: &[f32]) -> (f32, f32) {
    let max = values.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    if max > 0.0 && max.is_finite() {
        (max / 127.0, 127.0 / max)
    } else {
        (1.0, 0.0)
    }
}

/// `round(v · inverse)` clamped to [-127, 127] (ties away from zero).
#[inline(always)]
fn quantise(v: f32, inverse: f32) -> i8 {
    (v * inverse).round().clamp(-127.0, 127.0) as i8
}

/// Activations quantised per row, as the kernel reads them.
struct QuantisedRows {
    /// `p + 128` per value, rows padded with 128 (zero) to whole groups.
    data: Vec<u8>,
    /// Per row: the dequantisation scale.
    scale: Vec<f32>,
}

fn quantise_rows(a: &[f32], rows: usize, inputs: usize, padded: usize) -> QuantisedRows {
    let mut data = vec![128u8; rows * padded];
    let mut scale = vec![0.0f32; rows];
    data.par_chunks_mut(padded * 64)
        .zip(scale.par_chunks_mut(64))
        .zip(a.par_chunks(inputs * 64))
        .for_each(|((dst, scale), src)| {
            for ((d, s), row) in dst
                .chunks_exact_mut(padded)
                .zip(scale.iter_mut())
                .zip(src.chunks_exact(inputs))
            {
                // SAFETY: `supported()` was checked when the weight was
                // packed for this path; `d` is at least as long as `row`.
                *s = unsafe { quantise_row(d, row) };
            }
        });
    QuantisedRows { data, scale }
}

/// Quantises one row into `dst` (`p + 128` per value, rounded to nearest
/// even) and returns its scale: sixteen values per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantise_row(dst: &mut [u8], row: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    assert!(dst.len() >= row.len());
    let n = row.len();
    let mask = |i: usize| tail_mask(n - i);
    let src = row.as_ptr();
    let out = dst.as_mut_ptr();
    let mut max = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        // SAFETY: the masked lanes are values i..min(i + 16, n) of `row`.
        let x = unsafe { _mm512_maskz_loadu_ps(mask(i), src.add(i)) };
        max = _mm512_max_ps(max, _mm512_abs_ps(x));
        i += 16;
    }
    let max = _mm512_reduce_max_ps(max);
    let (step, inverse) = if max > 0.0 && max.is_finite() {
        (max / 127.0, 127.0 / max)
    } else {
        (1.0, 0.0)
    };
    let inverse = _mm512_set1_ps(inverse);
    let offset = _mm512_set1_epi32(128);
    let mut i = 0;
    while i < n {
        let m = mask(i);
        // SAFETY: as above, and `dst` holds at least `n` bytes.
        unsafe {
            let x = _mm512_maskz_loadu_ps(m, src.add(i));
            let q = _mm512_add_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(x, inverse)), offset);
            _mm512_mask_cvtepi32_storeu_epi8(out.add(i).cast(), m, q);
        }
        i += 16;
    }
    step
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn quantise_row(_: &mut [u8], _: &[f32]) -> f32 {
    unreachable!("the int8 path is only enabled on x86_64 with AVX-512 VNNI")
}

/// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for `rows` rows: `a` is
/// `rows × inputs` f32 (row-major); `c` and `residual` are `rows × outputs`
/// f32 (row-major), `bias` is `outputs` wide. `c` is only written. `post`
/// then runs on each parallel task's rows of `c` while they are in cache.
pub(crate) fn matmul(
    c: &mut [f32],
    a: &[f32],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    const { assert!(PACKED_ROWS_PER_TASK.is_multiple_of(MR)) };
    let padded = GROUP * w.groups;
    assert_eq!(a.len(), rows * w.inputs, "a is not rows × inputs");
    assert_eq!(c.len(), rows * w.outputs, "c is not rows × outputs");
    if rows == 0 {
        return;
    }
    let q = quantise_rows(a, rows, w.inputs, padded);
    packed_tasks(c, w.outputs, bias, residual, post, |first, c, residual| {
        let rows = c.len() / w.outputs;
        let a = &q.data[first * padded..(first + rows) * padded];
        let scale = &q.scale[first..first + rows];
        // SAFETY: `supported()` was checked when the weight was packed for
        // this path (see `Linear::prepare`); the slices hold `rows` full rows
        // of A (`padded` bytes), their scales, C and the residual (`outputs`
        // wide), and the packed weight holds every panel and group the
        // kernel reads.
        unsafe { tile_rows(c, a, scale, rows, w, bias, residual) };
    });
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_rows(
    c: &mut [f32],
    a: &[u8],
    row_scale: &[f32],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) {
    let lda = GROUP * w.groups;
    let panels = w.outputs.div_ceil(PANEL);
    let panel_len = w.groups * PANEL * GROUP;
    let zeros = [0.0f32; PANEL];
    for panel in 0..panels {
        let cols = (w.outputs - panel * PANEL).min(PANEL);
        let b = &w.data[panel * panel_len..(panel + 1) * panel_len];
        let scale = &w.scale[panel * PANEL..(panel + 1) * PANEL];
        let offset = &w.offset[panel * PANEL..(panel + 1) * PANEL];
        let bias = bias.map_or(&zeros[..cols], |b| &b[panel * PANEL..panel * PANEL + cols]);
        let mut r = 0;
        while r < rows {
            let mr = (rows - r).min(MR);
            let tile = Tile {
                a: &a[r * lda..],
                lda,
                row_scale: &row_scale[r..],
                b,
                groups: w.groups,
                scale,
                offset,
                bias,
                residual: residual.map(|res| &res[r * w.outputs + panel * PANEL..]),
            };
            let c = &mut c[r * w.outputs + panel * PANEL..];
            // SAFETY: the tile holds `mr` rows of A (`lda` bytes each) and
            // their scales, the panel's `groups` steps of 256 bytes and its
            // 64 scales and offsets, `cols` biases; `c` and the residual hold
            // `mr` rows of at least `cols` floats at stride `outputs` (the
            // caller's contract, sliced here).
            unsafe {
                match mr {
                    6 => kernel::<6>(&tile, c, w.outputs),
                    5 => kernel::<5>(&tile, c, w.outputs),
                    4 => kernel::<4>(&tile, c, w.outputs),
                    3 => kernel::<3>(&tile, c, w.outputs),
                    2 => kernel::<2>(&tile, c, w.outputs),
                    _ => kernel::<1>(&tile, c, w.outputs),
                }
            }
            r += mr;
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_rows(
    _: &mut [f32],
    _: &[u8],
    _: &[f32],
    _: usize,
    _: &PackedWeight,
    _: Option<&[f32]>,
    _: Option<&[f32]>,
) {
    unreachable!("the int8 path is only enabled on x86_64 with AVX-512 VNNI")
}

/// What one call of the micro-kernel reads.
struct Tile<'a> {
    /// Rows of unsigned activations, `lda` bytes apart.
    a: &'a [u8],
    lda: usize,
    row_scale: &'a [f32],
    /// The panel: `groups` steps of 64 × 4 signed bytes.
    b: &'a [i8],
    groups: usize,
    scale: &'a [f32],
    offset: &'a [i32],
    /// The panel's biases, one per valid output column (zeros where the
    /// layer has none).
    bias: &'a [f32],
    /// Rows of the residual, `ldc` apart, where there is one.
    residual: Option<&'a [f32]>,
}

/// C[0..R, 0..cols] = residual + bias + s[r] · scale[o] · (Σ (p + 128)·q −
/// offset[o]), with four activation bytes broadcast per step and the panel
/// read as four vectors per step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn kernel<const R: usize>(t: &Tile<'_>, c: &mut [f32], ldc: usize) {
    use std::arch::x86_64::*;
    debug_assert!(t.a.len() >= (R - 1) * t.lda + GROUP * t.groups);
    debug_assert!(t.row_scale.len() >= R);
    debug_assert!(t.b.len() >= t.groups * PANEL * GROUP);
    debug_assert!(t.scale.len() >= PANEL && t.offset.len() >= PANEL);
    let cols = t.bias.len();
    debug_assert!(c.len() >= (R - 1) * ldc + cols);
    debug_assert!(t.residual.is_none_or(|r| r.len() >= (R - 1) * ldc + cols));
    let mut acc = [[_mm512_setzero_si512(); 4]; R];
    let ap = t.a.as_ptr();
    let bp = t.b.as_ptr();
    for g in 0..t.groups {
        // SAFETY: g < groups, so the four vectors lie inside the panel, and
        // each row's group 4g..4g+4 inside its row of A (checked above).
        unsafe {
            let step = bp.add(g * PANEL * GROUP);
            let b0 = _mm512_loadu_si512(step.cast());
            let b1 = _mm512_loadu_si512(step.add(64).cast());
            let b2 = _mm512_loadu_si512(step.add(128).cast());
            let b3 = _mm512_loadu_si512(step.add(192).cast());
            for (row, acc) in acc.iter_mut().enumerate() {
                let quad = ap
                    .add(row * t.lda + GROUP * g)
                    .cast::<i32>()
                    .read_unaligned();
                let av = _mm512_set1_epi32(quad);
                acc[0] = _mm512_dpbusd_epi32(acc[0], av, b0);
                acc[1] = _mm512_dpbusd_epi32(acc[1], av, b1);
                acc[2] = _mm512_dpbusd_epi32(acc[2], av, b2);
                acc[3] = _mm512_dpbusd_epi32(acc[3], av, b3);
            }
        }
    }
    let cp = c.as_mut_ptr();
    for v in 0..4 {
        let col = v * 16;
        if col >= cols {
            break;
        }
        let mask = tail_mask(cols - col);
        // SAFETY: the panel's scales and offsets hold 64 columns (checked
        // above); the masked lanes of the bias, C and the residual are
        // columns col..col+left < cols of each row, inside their slices.
        unsafe {
            let scale = _mm512_loadu_ps(t.scale.as_ptr().add(col));
            let offset = _mm512_loadu_si512(t.offset.as_ptr().add(col).cast());
            let bias = _mm512_maskz_loadu_ps(mask, t.bias.as_ptr().add(col));
            for (row, acc) in acc.iter().enumerate() {
                let sum = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[v], offset));
                let step = _mm512_mul_ps(scale, _mm512_set1_ps(t.row_scale[row]));
                let init = epilogue_start(bias, t.residual, row * ldc + col, mask);
                _mm512_mask_storeu_ps(
                    cp.add(row * ldc + col),
                    mask,
                    _mm512_fmadd_ps(sum, step, init),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `c = 0.5 + a · Wᵀ` in f64, with `W` as stored (`outputs × inputs`).
    fn exact(a: &[f32], w: &[f32], rows: usize, inputs: usize, outputs: usize) -> Vec<f64> {
        let mut c = vec![0.5f64; rows * outputs];
        for r in 0..rows {
            for o in 0..outputs {
                c[r * outputs + o] += (0..inputs)
                    .map(|k| f64::from(a[r * inputs + k]) * f64::from(w[o * inputs + k]))
                    .sum::<f64>();
            }
        }
        c
    }

    #[test]
    fn int8_product_matches_f32_within_quantisation() {
        if !supported() {
            eprintln!("skipping: this CPU has no AVX-512 VNNI");
            return;
        }
        for &(rows, inputs, outputs) in &[(1, 3, 5), (7, 33, 70), (13, 384, 1152), (100, 64, 130)] {
            let a: Vec<f32> = (0..rows * inputs)
                .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
                .collect();
            let w: Vec<f32> = (0..inputs * outputs)
                .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
                .collect();
            let packed = PackedWeight::pack(&w, inputs, outputs);
            let mut c = vec![0.5f32; rows * outputs];
            // C is only written: NaN must not survive. The residual and the
            // bias each add 0.25.
            c.fill(f32::NAN);
            let residual = vec![0.25f32; rows * outputs];
            matmul(
                &mut c,
                &a,
                rows,
                &packed,
                Some(&vec![0.25; outputs]),
                Some(&residual),
                None,
            );
            let want = exact(&a, &w, rows, inputs, outputs);
            for r in 0..rows {
                let a_max = a[r * inputs..(r + 1) * inputs]
                    .iter()
                    .fold(0.0f32, |m, v| m.max(v.abs()));
                for o in 0..outputs {
                    let w_max = w[o * inputs..(o + 1) * inputs]
                        .iter()
                        .fold(0.0f32, |m, v| m.max(v.abs()));
                    // Each factor is off by at most half a step; the products'
                    // errors add up over the inputs.
                    let bound = f64::from(a_max * w_max) * inputs as f64 * (1.0 / 127.0 + 1e-4);
                    let got = f64::from(c[r * outputs + o]);
                    let want = want[r * outputs + o];
                    assert!(
                        (got - want).abs() <= bound,
                        "{rows}x{inputs}x{outputs} [{r},{o}]: {got} vs {want} (bound {bound})"
                    );
                }
            }
        }
    }

    #[test]
    fn values_on_the_quantisation_grid_are_exact() {
        if !supported() {
            eprintln!("skipping: this CPU has no AVX-512 VNNI");
            return;
        }
        // Integers with a row/column maximum of 127 quantise without error,
        // so the product is exact: checks packing, offsets and tails.
        let (rows, inputs, outputs) = (9, 37, 67);
        let a: Vec<f32> = (0..rows * inputs)
            .map(|i| {
                if i % inputs == 0 {
                    127.0
                } else {
                    ((i * 31) % 255) as f32 - 127.0
                }
            })
            .collect();
        let w: Vec<f32> = (0..inputs * outputs)
            .map(|i| {
                if i % inputs == 1 {
                    -127.0
                } else {
                    ((i * 17) % 255) as f32 - 127.0
                }
            })
            .collect();
        let packed = PackedWeight::pack(&w, inputs, outputs);
        let mut c = vec![0.5f32; rows * outputs];
        // `post` sees every finished row (here: doubles it).
        let double = |rows: &mut [f32]| rows.iter_mut().for_each(|v| *v *= 2.0);
        matmul(
            &mut c,
            &a,
            rows,
            &packed,
            Some(&vec![0.5; outputs]),
            None,
            Some(&double),
        );
        let want = exact(&a, &w, rows, inputs, outputs);
        for (got, want) in c.iter().zip(&want) {
            assert_eq!(f64::from(*got), 2.0 * want);
        }
    }

    #[test]
    fn zero_rows_and_columns_stay_zero() {
        if !supported() {
            eprintln!("skipping: this CPU has no AVX-512 VNNI");
            return;
        }
        let (inputs, outputs) = (8, 3);
        let mut w = vec![0.25f32; inputs * outputs];
        w[inputs..2 * inputs].fill(0.0);
        let packed = PackedWeight::pack(&w, inputs, outputs);
        let a: Vec<f32> = [vec![0.0; inputs], vec![1.0; inputs]].concat();
        let mut c = vec![0.0f32; 2 * outputs];
        matmul(&mut c, &a, 2, &packed, None, None, None);
        assert_eq!(c, [0.0, 0.0, 0.0, 2.0, 0.0, 2.0]);
    }
}
