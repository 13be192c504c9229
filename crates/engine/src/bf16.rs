//! The reduced-precision path: linear layers in bfloat16 on CPUs with
//! AVX-512 BF16 (`vdpbf16ps`), accumulating in f32.
//!
//! Weights are rounded to bf16 once, at load, and packed in panels of 64
//! output columns: for each pair of input rows (k, k+1) a panel holds 64
//! interleaved pairs, four 512-bit vectors. Activations are rounded to bf16
//! row-major, so a pair (A\[r,k\], A\[r,k+1\]) is one 32-bit word that is
//! broadcast to all lanes. A micro-kernel keeps a 6 × 64 tile of C in 24
//! registers; each step does 24 `vdpbf16ps` (two multiply-adds per lane each).

// Only the x86_64 kernels read the packed weights.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use rayon::prelude::*;

use crate::tile::{PACKED_ROWS_PER_TASK, Post, packed_tasks, round_row, to_bf16};
#[cfg(target_arch = "x86_64")]
use crate::tile::{epilogue_start, tail_mask};

/// Output columns of a packed panel.
const PANEL: usize = 64;
/// Rows of the micro-kernel's tile.
const MR: usize = 6;

/// Whether this CPU runs the bf16 kernels.
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::avx512() && std::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A weight matrix `W` (`outputs × inputs`, row-major as stored) packed for
/// `x · Wᵀ` in bf16.
pub struct PackedWeight {
    data: Vec<u16>,
    /// Input pairs (inputs rounded up to even, halved).
    pairs: usize,
    inputs: usize,
    outputs: usize,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeight")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

impl PackedWeight {
    /// Packs a weight as stored (`outputs × inputs`, row-major).
    pub fn pack(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        let pairs = inputs.div_ceil(2);
        let panels = outputs.div_ceil(PANEL);
        let mut data = vec![0u16; panels * pairs * PANEL * 2];
        data.par_chunks_mut(pairs * PANEL * 2)
            .enumerate()
            .for_each(|(panel, block)| {
                for j in 0..PANEL {
                    let col = panel * PANEL + j;
                    if col >= outputs {
                        break;
                    }
                    let row = &weight[col * inputs..(col + 1) * inputs];
                    for (k, &v) in row.iter().enumerate() {
                        block[(k / 2) * PANEL * 2 + 2 * j + k % 2] = to_bf16(v);
                    }
                }
            });
        Self {
            data,
            pairs,
            inputs,
            outputs,
        }
    }
}

/// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for `rows` rows: `a` is
/// `rows × inputs` f32 (row-major); `c` and `residual` are `rows × outputs`
/// f32 (row-major), `bias` is `outputs` wide. `c` is only written. `post`
/// then runs on each parallel task's rows of `c` while they are in cache.
pub fn matmul(
    c: &mut [f32],
    a: &[f32],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    const { assert!(PACKED_ROWS_PER_TASK.is_multiple_of(MR)) };
    let inputs_padded = 2 * w.pairs;
    let inputs = w.inputs;
    assert_eq!(a.len(), rows * inputs, "a is not rows × inputs");
    assert_eq!(c.len(), rows * w.outputs, "c is not rows × outputs");
    if rows == 0 {
        return;
    }
    // Round the activations once; a zero column pads odd widths.
    let mut a16 = vec![0u16; rows * inputs_padded];
    a16.par_chunks_mut(inputs_padded * 64)
        .zip(a.par_chunks(inputs * 64))
        .for_each(|(dst, src)| round_rows(dst, src, inputs, inputs_padded));
    packed_tasks(c, w.outputs, bias, residual, post, |first, c, residual| {
        let rows = c.len() / w.outputs;
        let a = &a16[first * inputs_padded..(first + rows) * inputs_padded];
        // SAFETY: `supported()` was checked when the weight was packed for
        // this path (see `Linear::prepare`); the slices hold `rows` full rows
        // of A (bf16, `2·pairs` wide), C and the residual (`outputs` wide),
        // and the packed weight holds every panel and pair the kernel reads.
        unsafe { tile_rows(c, a, rows, w, bias, residual) };
    });
}

fn round_rows(dst: &mut [u16], src: &[f32], inputs: usize, padded: usize) {
    for (d, s) in dst.chunks_exact_mut(padded).zip(src.chunks_exact(inputs)) {
        // SAFETY: `supported()` was checked when the weight was packed for
        // this path; `d` is at least as long as `s`.
        unsafe { round_row(d, s) };
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn tile_rows(
    c: &mut [f32],
    a: &[u16],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) {
    let lda = 2 * w.pairs;
    let panels = w.outputs.div_ceil(PANEL);
    let zeros = [0.0f32; PANEL];
    for panel in 0..panels {
        let cols = (w.outputs - panel * PANEL).min(PANEL);
        let b = &w.data[panel * w.pairs * PANEL * 2..(panel + 1) * w.pairs * PANEL * 2];
        let bias = bias.map_or(&zeros[..cols], |b| &b[panel * PANEL..panel * PANEL + cols]);
        let mut r = 0;
        while r < rows {
            let mr = (rows - r).min(MR);
            let tile = Tile {
                a: &a[r * lda..],
                lda,
                b,
                pairs: w.pairs,
                bias,
                residual: residual.map(|res| &res[r * w.outputs + panel * PANEL..]),
            };
            let c = &mut c[r * w.outputs + panel * PANEL..];
            // SAFETY: the tile holds `mr` rows of A (`lda` bf16 each), the
            // panel's `pairs` steps of 128 bf16 and `cols` biases; `c` and
            // the residual hold `mr` rows of at least `cols` floats at stride
            // `outputs` (the caller's contract, sliced here).
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
unsafe fn tile_rows(
    _: &mut [f32],
    _: &[u16],
    _: usize,
    _: &PackedWeight,
    _: Option<&[f32]>,
    _: Option<&[f32]>,
) {
    unreachable!("the bf16 path is only enabled on x86_64 with AVX-512 BF16")
}

/// What one call of the micro-kernel reads.
struct Tile<'a> {
    /// Rows of bf16 activations, `lda` apart.
    a: &'a [u16],
    lda: usize,
    /// The panel: `pairs` steps of 64 interleaved pairs.
    b: &'a [u16],
    pairs: usize,
    /// The panel's biases, one per valid output column (zeros where the
    /// layer has none).
    bias: &'a [f32],
    /// Rows of the residual, `ldc` apart, where there is one.
    residual: Option<&'a [f32]>,
}

/// C[0..R, 0..cols] = residual + bias + A[0..R, :] · B_panel, with A pairs
/// broadcast and B read as four vectors per pair.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn kernel<const R: usize>(t: &Tile<'_>, c: &mut [f32], ldc: usize) {
    use std::arch::x86_64::*;
    let cols = t.bias.len();
    debug_assert!(t.a.len() >= (R - 1) * t.lda + 2 * t.pairs);
    debug_assert!(t.b.len() >= t.pairs * PANEL * 2);
    debug_assert!(c.len() >= (R - 1) * ldc + cols);
    debug_assert!(t.residual.is_none_or(|r| r.len() >= (R - 1) * ldc + cols));
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    let ap = t.a.as_ptr();
    let bp = t.b.as_ptr();
    for p in 0..t.pairs {
        // SAFETY: p < pairs, so the four vectors lie inside the panel, and
        // each row's pair 2p..2p+2 inside its row of A (checked above).
        unsafe {
            let step = bp.add(p * PANEL * 2);
            let b0: __m512bh = std::mem::transmute(_mm512_loadu_si512(step.cast()));
            let b1: __m512bh = std::mem::transmute(_mm512_loadu_si512(step.add(32).cast()));
            let b2: __m512bh = std::mem::transmute(_mm512_loadu_si512(step.add(64).cast()));
            let b3: __m512bh = std::mem::transmute(_mm512_loadu_si512(step.add(96).cast()));
            for (row, acc) in acc.iter_mut().enumerate() {
                let pair = ap.add(row * t.lda + 2 * p).cast::<i32>().read_unaligned();
                let av: __m512bh = std::mem::transmute(_mm512_set1_epi32(pair));
                acc[0] = _mm512_dpbf16_ps(acc[0], av, b0);
                acc[1] = _mm512_dpbf16_ps(acc[1], av, b1);
                acc[2] = _mm512_dpbf16_ps(acc[2], av, b2);
                acc[3] = _mm512_dpbf16_ps(acc[3], av, b3);
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
        // SAFETY: the masked lanes of the bias, C and the residual are
        // columns col..col+left < cols of each row, inside their slices.
        unsafe {
            let bias = _mm512_maskz_loadu_ps(mask, t.bias.as_ptr().add(col));
            for (row, acc) in acc.iter().enumerate() {
                let init = epilogue_start(bias, t.residual, row * ldc + col, mask);
                _mm512_mask_storeu_ps(cp.add(row * ldc + col), mask, _mm512_add_ps(init, acc[v]));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_product_matches_f32_within_rounding() {
        if !supported() {
            eprintln!("skipping: this CPU has no AVX-512 BF16");
            return;
        }
        for &(rows, inputs, outputs) in &[(1, 3, 5), (7, 33, 70), (13, 384, 1152), (100, 64, 128)] {
            let a: Vec<f32> = (0..rows * inputs)
                .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
                .collect();
            let w_t: Vec<f32> = (0..inputs * outputs)
                .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
                .collect();
            // The same matrix as stored (outputs × inputs).
            let w: Vec<f32> = (0..outputs * inputs)
                .map(|i| w_t[(i % inputs) * outputs + i / inputs])
                .collect();
            let packed = PackedWeight::pack(&w, inputs, outputs);
            // C is only written; the residual and the bias add 0.25 each.
            let mut c = vec![f32::NAN; rows * outputs];
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
            for r in 0..rows {
                for o in 0..outputs {
                    let exact: f64 = 0.5
                        + (0..inputs)
                            .map(|k| f64::from(a[r * inputs + k]) * f64::from(w_t[k * outputs + o]))
                            .sum::<f64>();
                    let scale: f64 = (0..inputs)
                        .map(|k| {
                            (f64::from(a[r * inputs + k]) * f64::from(w_t[k * outputs + o])).abs()
                        })
                        .sum::<f64>()
                        .max(1.0);
                    let got = f64::from(c[r * outputs + o]);
                    assert!(
                        (got - exact).abs() <= 2e-2 * scale,
                        "{rows}x{inputs}x{outputs} [{r},{o}]: {got} vs {exact}"
                    );
                }
            }
        }
    }

    #[test]
    fn rounding_is_to_nearest_even() {
        assert_eq!(to_bf16(1.0), 0x3f80);
        // 1 + 2^-8 is halfway between two bf16 values: ties go to even (1.0).
        assert_eq!(to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(to_bf16(-2.5), 0xc020);
    }
}
