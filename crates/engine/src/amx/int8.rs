//! int8 products on AMX tiles (`tdpbssd`): the int8 path's quantisation —
//! weights symmetric per output channel at load, activations symmetric per
//! row at run time — with signed bytes on both sides, i32 sums, and the
//! scales applied in the epilogue with the bias and the residual.
//!
//! The layouts are [`super::bf16`]'s byte for byte (a tile row is 64 bytes
//! of the shared dimension: 64 int8 values instead of 32 bf16), and so are
//! the strip kernels, with `tdpbssd` for `tdpbf16ps`; the sums go through
//! an aligned per-task block of i32 (they must be scaled before C sees
//! them).

use rayon::prelude::*;

use super::bf16::{Blocking, CONFIGS, Kernel, Op, PANEL, STRIP, Strip};
use super::{Aligned, Layout};
use crate::tile::Post;

/// Inputs per k-step (a tile row of bytes).
const KSTEP: usize = 64;
/// Bytes per packed B tile.
const TILE_BYTES: usize = 1024;

/// A weight matrix `W` (`outputs × inputs`, row-major as stored) quantised
/// per output channel and packed in the tile layout (chunk after chunk of
/// the shared dimension, the panels in each, each panel's k-steps).
pub struct PackedWeight {
    data: Aligned<i8>,
    /// Per output (padded to whole panels): the dequantisation scale.
    scale: Vec<f32>,
    /// Where its tiles lie.
    layout: Layout,
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

/// The scale of a symmetric 8-bit quantisation of values whose largest
/// magnitude is `max`, and its inverse (1 and 0 for zeros).
fn step_of(max: f32) -> (f32, f32) {
    if max > 0.0 && max.is_finite() {
        (max / 127.0, 127.0 / max)
    } else {
        (1.0, 0.0)
    }
}

impl PackedWeight {
    /// Quantises and packs a weight as stored (`outputs × inputs`).
    pub fn pack(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        Self::pack_in_chunks(weight, inputs, outputs, inputs.div_ceil(KSTEP).max(1))
    }

    /// [`PackedWeight::pack`] with `chunk` k-steps per chunk.
    pub(crate) fn pack_in_chunks(
        weight: &[f32],
        inputs: usize,
        outputs: usize,
        chunk: usize,
    ) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        let layout = Layout::new(inputs.div_ceil(KSTEP), chunk, outputs.div_ceil(PANEL));
        let panels = layout.panels;
        // Each output channel quantised once (round half away from zero, as
        // the int8 kernels of the other levels).
        let mut scale = vec![1.0f32; panels * PANEL];
        let mut quantised = vec![0i8; outputs * inputs];
        quantised
            .par_chunks_mut(inputs.max(1))
            .zip(scale.par_iter_mut())
            .zip(weight.par_chunks(inputs.max(1)))
            .for_each(|((q, s), row)| {
                let (step, inverse) = step_of(row.iter().fold(0.0f32, |m, v| m.max(v.abs())));
                *s = step;
                for (q, &v) in q.iter_mut().zip(row) {
                    *q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
                }
            });
        let mut data = Aligned::zeroed(layout.len() * 2 * TILE_BYTES);
        let runs = layout.runs(data.as_mut_slice(), 2 * TILE_BYTES);
        runs.into_par_iter().for_each(|(first, panel, run)| {
            for (tile, bytes) in run.chunks_exact_mut(TILE_BYTES).enumerate() {
                let (step, half) = (first + tile / 2, tile % 2);
                for n in 0..PANEL / 2 {
                    let col = panel * PANEL + half * PANEL / 2 + n;
                    if col >= outputs {
                        break;
                    }
                    let row = &quantised[col * inputs..(col + 1) * inputs];
                    for i in 0..KSTEP {
                        let k = step * KSTEP + i;
                        if k >= inputs {
                            break;
                        }
                        // Row i/4 of the tile: groups of four inputs per column.
                        bytes[(i / 4) * 64 + 4 * n + i % 4] = row[k];
                    }
                }
            }
        });
        Self {
            data,
            scale,
            layout,
            inputs,
            outputs,
        }
    }

    /// Where `panel`'s k-steps of the chunk that starts at step `first`
    /// begin (in bytes), and how many there are.
    fn run(&self, first: usize, panel: usize) -> (usize, usize) {
        let (at, len) = self.layout.run(first, panel);
        (at * 2 * TILE_BYTES, len)
    }
}

/// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for `rows` rows, as
/// [`crate::int8::matmul`] (the same arguments), on AMX tiles.
pub fn matmul(
    c: &mut [f32],
    a: &[f32],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    assert!(super::supported(), "AMX tiles are not usable here");
    matmul_on(
        Kernel::Tiles,
        Blocking::for_product(rows, &w.layout),
        c,
        a,
        rows,
        w,
        bias,
        residual,
        post,
    );
}

/// [`matmul`] on `kernel` with `blocking`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_on(
    kernel: Kernel,
    blocking: Blocking,
    c: &mut [f32],
    a: &[f32],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    assert!(blocking.task_rows > 0 && blocking.task_rows.is_multiple_of(STRIP));
    let (inputs, outputs) = (w.inputs, w.outputs);
    assert_eq!(a.len(), rows * inputs, "a is not rows × inputs");
    assert_eq!(c.len(), rows * outputs, "c is not rows × outputs");
    if rows == 0 {
        return;
    }
    // The activations quantised per row, in strips of 32 rows laid out tile
    // by tile (zero past the inputs), and each row's scale.
    let strip_bytes = w.layout.steps * STRIP * KSTEP;
    let mut q = Aligned::<i8>::zeroed(rows.div_ceil(STRIP) * strip_bytes);
    let mut scale = vec![0.0f32; rows];
    q.as_mut_slice()
        .par_chunks_mut(strip_bytes)
        .zip(scale.par_chunks_mut(STRIP))
        .zip(a.par_chunks(STRIP * inputs))
        .for_each(|((strip, scale), rows)| {
            for (r, (row, s)) in rows.chunks_exact(inputs).zip(scale).enumerate() {
                *s = quantise_into_strip(strip, row, r);
            }
        });
    let (q, scale) = (q.as_slice(), &scale);
    crate::tile::packed_tasks_of(
        blocking.task_rows,
        c,
        outputs,
        bias,
        residual,
        post,
        |first, c, residual| {
            let task = Task {
                kernel,
                blocking,
                w,
                a: &q[first / STRIP * strip_bytes..],
                scale: &scale[first..],
            };
            task.run(c, bias, residual);
        },
    );
}

/// Quantises row `r` of a strip into its place in the strip's tiles (64
/// values per k-step) and returns its scale: symmetric, the largest
/// magnitude to 127, round half to even.
fn quantise_into_strip(strip: &mut [i8], row: &[f32], r: usize) -> f32 {
    assert!(r < STRIP && strip.len() >= row.len().div_ceil(KSTEP) * STRIP * KSTEP);
    #[cfg(target_arch = "x86_64")]
    if crate::isa::avx512() {
        // SAFETY: the CPU has AVX-512 (F, BW); the strip holds the row's
        // k-steps (asserted above).
        return unsafe { quantise_into_strip_avx512(strip, row, r) };
    }
    let (step, inverse) = step_of(row.iter().fold(0.0f32, |m, v| m.max(v.abs())));
    for (k, values) in row.chunks(KSTEP).enumerate() {
        let at = k * STRIP * KSTEP + r * KSTEP;
        for (q, &v) in strip[at..at + values.len()].iter_mut().zip(values) {
            *q = (v * inverse).round_ties_even().clamp(-127.0, 127.0) as i8;
        }
    }
    step
}

/// [`quantise_into_strip`], sixteen values at a time (`vcvtps2dq` rounds
/// half to even, as the portable code).
///
/// # Safety
/// The CPU has AVX-512 F and BW; the strip holds the row's k-steps.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn quantise_into_strip_avx512(strip: &mut [i8], row: &[f32], r: usize) -> f32 {
    use std::arch::x86_64::*;
    let n = row.len();
    let mut max = _mm512_setzero_ps();
    let mut i = 0;
    while i < n {
        let mask = crate::tile::tail_mask(n - i);
        // SAFETY: the masked lanes are values i..min(i + 16, n) of the row.
        let x = unsafe { _mm512_maskz_loadu_ps(mask, row.as_ptr().add(i)) };
        max = _mm512_max_ps(max, _mm512_abs_ps(x));
        i += 16;
    }
    let (step, inverse) = step_of(_mm512_reduce_max_ps(max));
    let inverse = _mm512_set1_ps(inverse);
    let (low, high) = (_mm512_set1_epi32(-127), _mm512_set1_epi32(127));
    let mut i = 0;
    while i < n {
        let mask = crate::tile::tail_mask(n - i);
        let at = (i / KSTEP) * STRIP * KSTEP + r * KSTEP + i % KSTEP;
        // SAFETY: the masked lanes are values i..min(i + 16, n) of the row
        // and their places in the strip (the caller's contract).
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, row.as_ptr().add(i));
            let q = _mm512_cvtps_epi32(_mm512_mul_ps(x, inverse));
            let q = _mm512_min_epi32(_mm512_max_epi32(q, low), high);
            _mm512_mask_cvtepi32_storeu_epi8(strip.as_mut_ptr().add(at).cast(), mask, q);
        }
        i += 16;
    }
    step
}

/// One parallel task's rows.
struct Task<'a> {
    kernel: Kernel,
    blocking: Blocking,
    w: &'a PackedWeight,
    /// The task's strips of quantised activations.
    a: &'a [i8],
    /// Their rows' scales.
    scale: &'a [f32],
}

impl Task<'_> {
    fn run(&self, c: &mut [f32], bias: Option<&[f32]>, residual: Option<&[f32]>) {
        let w = self.w;
        let outputs = w.outputs;
        let rows = c.len() / outputs;
        let strips = rows.div_ceil(STRIP);
        let group_panels = self.blocking.group_panels;
        let strip_bytes = w.layout.steps * STRIP * KSTEP;
        // The i32 sums of a group's columns, 32 rows per strip (a row of an
        // odd number of cache lines: tile rows fall into different sets).
        let width = group_panels.min(w.layout.panels) * PANEL + 16;
        let mut sums = Aligned::<i32>::zeroed(strips * STRIP * width);
        let sums = sums.as_mut_slice();
        for group in (0..w.layout.panels).step_by(group_panels) {
            let panels = group_panels.min(w.layout.panels - group);
            for chunk in (0..w.layout.steps).step_by(w.layout.chunk) {
                let (at, steps) = w.run(chunk, group);
                assert!(
                    at + panels * steps * 2 * TILE_BYTES <= w.data.as_slice().len(),
                    "panels out of bounds"
                );
                for strip in 0..strips {
                    let first = strip * STRIP;
                    let m = (rows - first).min(STRIP);
                    let a = strip * strip_bytes + chunk * STRIP * KSTEP;
                    assert!(
                        a + steps * STRIP * KSTEP <= self.a.len(),
                        "rows out of bounds"
                    );
                    let call = Strip {
                        config: &CONFIGS[m],
                        a: self.a[a..].as_ptr().cast(),
                        b: w.data.as_slice()[at..].as_ptr().cast(),
                        panel_bytes: steps * 2 * TILE_BYTES,
                        panels,
                        steps,
                        c: sums[first * width..].as_mut_ptr().cast(),
                        ldc: width * 4,
                        accumulate: usize::from(chunk > 0),
                        bias: std::ptr::null(),
                    };
                    // SAFETY: the strip holds `steps` k-steps from `chunk`,
                    // the group's panels hold them (both asserted above), and
                    // the sums hold the strip's 32 rows of `width` ≥ 32 ·
                    // panels columns; the kernel was checked by the caller.
                    unsafe { self.kernel.run_op(&call, Op::Int8) };
                }
            }
            // The group's columns: scaled sums, bias and residual.
            let cols = (outputs - group * PANEL).min(panels * PANEL);
            let from = group * PANEL;
            for (r, row) in c.chunks_exact_mut(outputs).enumerate() {
                let sums = &sums[r * width..r * width + cols];
                let out = &mut row[from..from + cols];
                let scales = &w.scale[from..from + cols];
                let a = self.scale[r];
                let residual =
                    residual.map(|res| &res[r * outputs + from..r * outputs + from + cols]);
                let bias = bias.map(|b| &b[from..from + cols]);
                epilogue(out, sums, a, scales, bias, residual);
            }
        }
    }
}

/// `out = (bias + residual) + sum · (a · scale)` per column.
fn epilogue(
    out: &mut [f32],
    sums: &[i32],
    a: f32,
    scales: &[f32],
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) {
    #[inline(always)]
    fn scale(
        out: &mut [f32],
        sums: &[i32],
        a: f32,
        scales: &[f32],
        bias: Option<&[f32]>,
        residual: Option<&[f32]>,
    ) {
        for (j, (o, (&s, &w))) in out.iter_mut().zip(sums.iter().zip(scales)).enumerate() {
            let start = bias.map_or(0.0, |b| b[j]) + residual.map_or(0.0, |r| r[j]);
            *o = start + s as f32 * (a * w);
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn scale512(
            out: &mut [f32],
            sums: &[i32],
            a: f32,
            scales: &[f32],
            bias: Option<&[f32]>,
            residual: Option<&[f32]>,
        ) {
            scale(out, sums, a, scales, bias, residual);
        }
        if crate::isa::avx512() {
            // SAFETY: the CPU has AVX-512F.
            unsafe { scale512(out, sums, a, scales, bias, residual) };
            return;
        }
    }
    scale(out, sums, a, scales, bias, residual);
}

#[cfg(test)]
mod tests {
    use super::super::bf16::CHUNK_STEPS;
    use super::*;

    /// A product whose weights and activations quantise exactly (every row
    /// of each reaches 127 and holds integers), so that the tile sums and
    /// the model's are the definition's, and a within-rounding case.
    fn case(rows: usize, inputs: usize, outputs: usize) -> (Vec<f32>, Vec<f32>) {
        let a: Vec<f32> = (0..rows * inputs)
            .map(|i| {
                if i % inputs == 0 {
                    127.0
                } else {
                    ((i * 7919 + 3) % 255) as f32 - 127.0
                }
            })
            .collect();
        let w: Vec<f32> = (0..outputs * inputs)
            .map(|i| {
                if i % inputs == 0 {
                    -127.0
                } else {
                    ((i * 104_729 + 11) % 255) as f32 - 127.0
                }
            })
            .collect();
        (a, w)
    }

    fn product(
        kernel: Kernel,
        blocking: Blocking,
        a: &[f32],
        w: &PackedWeight,
        rows: usize,
    ) -> Vec<f32> {
        let mut c = vec![f32::NAN; rows * w.outputs];
        matmul_on(kernel, blocking, &mut c, a, rows, w, None, None, None);
        c
    }

    const BLOCKINGS: &[Blocking] = &[
        Blocking::DEFAULT,
        Blocking {
            task_rows: 32,
            group_panels: 1,
        },
    ];

    #[test]
    fn exact_integers_give_the_definitions_sums_on_the_model_and_the_tiles() {
        for &(rows, inputs, outputs) in &[(1, 5, 3), (17, 70, 33), (40, 200, 96), (65, 130, 64)] {
            let (a, w) = case(rows, inputs, outputs);
            let want: Vec<f32> = (0..rows * outputs)
                .map(|i| {
                    let (r, o) = (i / outputs, i % outputs);
                    (0..inputs)
                        .map(|k| a[r * inputs + k] * w[o * inputs + k])
                        .sum::<f32>()
                })
                .collect();
            let mut kernels = vec![Kernel::Model];
            if super::super::supported() {
                kernels.push(Kernel::Tiles);
            }
            for chunk in [CHUNK_STEPS, 1] {
                let packed = PackedWeight::pack_in_chunks(&w, inputs, outputs, chunk);
                for &kernel in &kernels {
                    for &blocking in BLOCKINGS {
                        let got = product(kernel, blocking, &a, &packed, rows);
                        assert_eq!(
                            got, want,
                            "{rows}x{inputs}x{outputs} {kernel:?} {blocking:?} chunk {chunk}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bias_and_residual_are_added_and_real_values_stay_within_int8s_rounding() {
        let (rows, inputs, outputs) = (50, 96, 40);
        let a: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..outputs * inputs)
            .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
            .collect();
        let bias: Vec<f32> = (0..outputs).map(|o| o as f32).collect();
        let residual: Vec<f32> = (0..rows * outputs).map(|i| (i % 5) as f32).collect();
        let packed = PackedWeight::pack(&w, inputs, outputs);
        let mut c = vec![f32::NAN; rows * outputs];
        matmul_on(
            Kernel::Model,
            Blocking::DEFAULT,
            &mut c,
            &a,
            rows,
            &packed,
            Some(&bias),
            Some(&residual),
            None,
        );
        for (i, &got) in c.iter().enumerate() {
            let (r, o) = (i / outputs, i % outputs);
            let exact: f32 = bias[o]
                + residual[i]
                + (0..inputs)
                    .map(|k| a[r * inputs + k] * w[o * inputs + k])
                    .sum::<f32>();
            let scale: f32 = (0..inputs)
                .map(|k| (a[r * inputs + k] * w[o * inputs + k]).abs())
                .sum::<f32>();
            assert!(
                (got - exact).abs() <= 2e-2 * scale.max(1.0),
                "[{r},{o}]: {got} vs {exact}"
            );
        }
    }
}
