//! The int8 path: linear layers in 8-bit integers with i32 sums, on three
//! kernels chosen by the active instruction-set level ([`Kernel::active`]):
//! `vpdpbusd` on 512-bit registers (AVX-512 VNNI), `vpdpbusd` on 256 bits
//! (AVX-VNNI), and AVX2 without VNNI (`vpsignb`, `vpmaddubsw`, `vpmaddwd`).
//! All three compute the same integer sums, so they give the same results.
//!
//! Weights are quantised once, at load, per output channel (symmetric:
//! `w ≈ scale[o] · q`, `q ∈ [-127, 127]`) and packed in panels of 64 output
//! columns (AVX-512) or 16 (the 256-bit kernels): for each group of four
//! inputs (k..k+4) a panel holds its columns' groups of four signed bytes
//! side by side. Activations are quantised per row at run time (symmetric,
//! `a ≈ s[r] · p`, `p ∈ [-127, 127]`).
//!
//! - VNNI multiplies unsigned by signed bytes, so the activations are stored
//!   as `p + 128` and the offset is taken back exactly from each column's
//!   integer sum: `Σ (p + 128)·q = Σ p·q + 128·Σ q`. The AVX-512 micro-kernel
//!   keeps a 6 × 64 tile of i32 sums in 24 registers (24 `vpdpbusd` a step),
//!   the AVX-VNNI one a 6 × 16 tile in 12.
//! - `vpmaddubsw` (unsigned × signed bytes, adjacent pairs summed) saturates
//!   its 16-bit sums, so unsigned activations up to 255 would overflow
//!   (`2 · 255 · 127 > 32767`); ONNX Runtime narrows weights to 7 bits for
//!   it (`reduce_range`). Here the sign moves instead: `|p| · (q · sign p)`,
//!   both at most 127 in magnitude, so a pair sums to at most `2 · 127² =
//!   32258` and nothing saturates or is narrowed: the sums are exact, as on
//!   VNNI. `vpmaddwd` by ones widens the pairs to i32. The micro-kernel keeps
//!   a 4 × 16 tile in 8 registers.
//!
//! The result `s[r] · scale[o] · Σ p·q` is added to the destination, which
//! holds the bias and residual as on the f32 path.

// Only the x86_64 kernels read the packed weights.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

use rayon::prelude::*;

use crate::isa::Isa;
use crate::tile::{PACKED_ROWS_PER_TASK, Post, packed_tasks};

/// Inputs per step of the kernels (four bytes per 32-bit lane).
const GROUP: usize = 4;

/// An int8 micro-kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `vpdpbusd` on 512-bit registers (AVX-512 VNNI).
    Avx512Vnni,
    /// `vpdpbusd` on 256-bit registers (AVX-VNNI).
    AvxVnni,
    /// `vpsignb`, `vpmaddubsw`, `vpmaddwd` on 256-bit registers (AVX2).
    Avx2,
}

impl Kernel {
    /// Every kernel, fastest first.
    pub const ALL: [Kernel; 3] = [Kernel::Avx512Vnni, Kernel::AvxVnni, Kernel::Avx2];

    /// The kernel the active level runs (`None`: int8 falls back to f32).
    pub fn active() -> Option<Kernel> {
        Self::ALL
            .into_iter()
            .find(|k| crate::isa::allows(k.level()) && k.on_this_cpu())
    }

    /// The level that runs it.
    fn level(self) -> Isa {
        match self {
            Self::Avx512Vnni => Isa::Avx512,
            Self::AvxVnni => Isa::AvxVnni,
            Self::Avx2 => Isa::Avx2,
        }
    }

    /// Whether this CPU has its instructions (whatever the cap).
    pub fn on_this_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            self.level().available()
                && (self != Self::Avx512Vnni || std::is_x86_feature_detected!("avx512vnni"))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// The kernel in words (run summaries).
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512 vnni",
            Self::AvxVnni => "avx-vnni",
            Self::Avx2 => "avx2 vpmaddubsw",
        }
    }

    /// Output columns of a packed panel.
    fn panel(self) -> usize {
        match self {
            Self::Avx512Vnni => 64,
            Self::AvxVnni | Self::Avx2 => 16,
        }
    }

    /// Rows of the micro-kernel's tile.
    fn rows(self) -> usize {
        match self {
            Self::Avx512Vnni | Self::AvxVnni => 6,
            Self::Avx2 => 4,
        }
    }

    /// What the activations are stored with: `p + 128` for VNNI's unsigned
    /// bytes, `p` itself for the sign-moving AVX2 kernel.
    fn activation_offset(self) -> i32 {
        match self {
            Self::Avx512Vnni | Self::AvxVnni => 128,
            Self::Avx2 => 0,
        }
    }
}

/// Whether the int8 kernels run at the active level.
pub fn supported() -> bool {
    Kernel::active().is_some()
}

/// A weight matrix `W` (`outputs × inputs`, row-major as stored) quantised
/// per output channel and packed for `x · Wᵀ` on one kernel.
pub struct PackedWeight {
    kernel: Kernel,
    data: Vec<i8>,
    /// Per output: the dequantisation scale.
    scale: Vec<f32>,
    /// Per output: `128 · Σ_k q[o, k]`, the offset of unsigned activations
    /// (zero for the AVX2 kernel, whose activations are signed).
    offset: Vec<i32>,
    /// Groups of four inputs (inputs rounded up to a multiple of four).
    groups: usize,
    inputs: usize,
    outputs: usize,
}

impl std::fmt::Debug for PackedWeight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedWeight")
            .field("kernel", &self.kernel)
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish_non_exhaustive()
    }
}

impl PackedWeight {
    /// Quantises and packs a weight as stored (`outputs × inputs`,
    /// row-major) for the active kernel ([`supported`] must hold).
    pub fn pack(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        let kernel = Kernel::active().expect("the int8 path runs at this level");
        Self::pack_for(kernel, weight, inputs, outputs)
    }

    /// [`PackedWeight::pack`] for `kernel` (which this CPU must have).
    pub fn pack_for(kernel: Kernel, weight: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        assert!(kernel.on_this_cpu(), "{kernel:?} is not on this CPU");
        let width = kernel.panel();
        let groups = inputs.div_ceil(GROUP);
        let panels = outputs.div_ceil(width);
        let panel_len = groups * width * GROUP;
        let unsigned = kernel.activation_offset() != 0;
        let mut data = vec![0i8; panels * panel_len];
        let mut scale = vec![0.0f32; panels * width];
        let mut offset = vec![0i32; panels * width];
        data.par_chunks_mut(panel_len)
            .zip(scale.par_chunks_mut(width))
            .zip(offset.par_chunks_mut(width))
            .enumerate()
            .for_each(|(panel, ((block, scale), offset))| {
                for j in 0..width {
                    let col = panel * width + j;
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
                        block[(k / GROUP) * width * GROUP + GROUP * j + k % GROUP] = q;
                    }
                    offset[j] = if unsigned { 128 * sum } else { 0 };
                }
            });
        Self {
            kernel,
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
    step_of(max)
}

/// The step and its inverse for a largest magnitude `max`.
#[inline]
fn step_of(max: f32) -> (f32, f32) {
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

/// Activations quantised per row, as a kernel reads them.
struct QuantisedRows {
    /// `p + offset` per value (as bytes), rows padded with `offset` (zero)
    /// to whole groups.
    data: Vec<u8>,
    /// Per row: the dequantisation scale.
    scale: Vec<f32>,
}

fn quantise_rows(
    kernel: Kernel,
    a: &[f32],
    rows: usize,
    inputs: usize,
    padded: usize,
) -> QuantisedRows {
    let offset = kernel.activation_offset();
    let mut data = vec![offset as u8; rows * padded];
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
                *s = quantise_row(kernel, d, row);
            }
        });
    QuantisedRows { data, scale }
}

/// Quantises one row into `dst` (`p + offset` per value as a byte, `p`
/// rounded to nearest even) and returns its scale.
fn quantise_row(kernel: Kernel, dst: &mut [u8], row: &[f32]) -> f32 {
    assert!(dst.len() >= row.len());
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the kernel's CPU features were checked when its weight was
        // packed (`PackedWeight::pack_for`); `dst` holds the row.
        unsafe {
            if kernel == Kernel::Avx512Vnni {
                x86::quantise_row_avx512(dst, row)
            } else {
                x86::quantise_row_avx2(dst, row, kernel.activation_offset())
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, dst, row);
        unreachable!("the int8 path is only enabled on x86_64")
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
    const { assert!(PACKED_ROWS_PER_TASK.is_multiple_of(6)) };
    const { assert!(PACKED_ROWS_PER_TASK.is_multiple_of(4)) };
    let padded = GROUP * w.groups;
    assert_eq!(a.len(), rows * w.inputs, "a is not rows × inputs");
    assert_eq!(c.len(), rows * w.outputs, "c is not rows × outputs");
    if rows == 0 {
        return;
    }
    let q = quantise_rows(w.kernel, a, rows, w.inputs, padded);
    packed_tasks(c, w.outputs, bias, residual, post, |first, c, residual| {
        let rows = c.len() / w.outputs;
        let a = &q.data[first * padded..(first + rows) * padded];
        let scale = &q.scale[first..first + rows];
        tile_rows(c, a, scale, rows, w, bias, residual);
    });
}

/// Every tile of a task's rows, panel by panel.
fn tile_rows(
    c: &mut [f32],
    a: &[u8],
    row_scale: &[f32],
    rows: usize,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
) {
    let lda = GROUP * w.groups;
    let width = w.kernel.panel();
    let panels = w.outputs.div_ceil(width);
    let panel_len = w.groups * width * GROUP;
    let zeros = [0.0f32; 64];
    for panel in 0..panels {
        let cols = (w.outputs - panel * width).min(width);
        let bias = bias.map_or(&zeros[..cols], |b| &b[panel * width..panel * width + cols]);
        let mut r = 0;
        while r < rows {
            let mr = (rows - r).min(w.kernel.rows());
            let tile = Tile {
                a: &a[r * lda..],
                lda,
                row_scale: &row_scale[r..],
                b: &w.data[panel * panel_len..(panel + 1) * panel_len],
                groups: w.groups,
                scale: &w.scale[panel * width..(panel + 1) * width],
                offset: &w.offset[panel * width..(panel + 1) * width],
                bias,
                residual: residual.map(|res| &res[r * w.outputs + panel * width..]),
            };
            let c = &mut c[r * w.outputs + panel * width..];
            run_tile(w.kernel, mr, &tile, c, w.outputs);
            r += mr;
        }
    }
}

/// Runs `kernel` on a tile of `rows` rows: `c` (at stride `ldc`) and the
/// tile as [`tile_rows`] slices them.
fn run_tile(kernel: Kernel, rows: usize, tile: &Tile<'_>, c: &mut [f32], ldc: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the kernel's CPU features were checked when the weight was
    // packed (`PackedWeight::pack_for`); each kernel checks the tile's and
    // C's slices before it reads or writes them (`Tile::check`).
    unsafe {
        x86::tile(kernel, rows, tile, c, ldc);
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kernel, rows, tile, c, ldc);
        unreachable!("the int8 path is only enabled on x86_64")
    }
}

/// What one call of a micro-kernel reads.
struct Tile<'a> {
    /// Rows of quantised activations, `lda` bytes apart.
    a: &'a [u8],
    lda: usize,
    row_scale: &'a [f32],
    /// The panel: `groups` steps of (panel width) × 4 signed bytes.
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

impl Tile<'_> {
    /// Checks that the tile holds `rows` rows of a `width`-column panel
    /// and that `c` (at stride `ldc`) holds its output.
    fn check(&self, rows: usize, width: usize, c: &[f32], ldc: usize) {
        let cols = self.bias.len();
        assert!(rows >= 1 && cols >= 1 && cols <= width);
        assert!(self.a.len() >= (rows - 1) * self.lda + GROUP * self.groups);
        assert!(self.lda >= GROUP * self.groups);
        assert!(self.row_scale.len() >= rows);
        assert!(self.b.len() >= self.groups * width * GROUP);
        assert!(self.scale.len() >= width && self.offset.len() >= width);
        assert!(c.len() >= (rows - 1) * ldc + cols);
        assert!(
            self.residual
                .is_none_or(|r| r.len() >= (rows - 1) * ldc + cols)
        );
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use super::{GROUP, Kernel, Tile, step_of};
    use crate::tile::{epilogue_start, tail_mask};

    /// Runs `kernel` on a tile of `rows` rows.
    ///
    /// # Safety
    /// The CPU has the kernel's features.
    pub(super) unsafe fn tile(
        kernel: Kernel,
        rows: usize,
        t: &Tile<'_>,
        c: &mut [f32],
        ldc: usize,
    ) {
        // SAFETY: the caller's contract; each kernel checks the slices.
        unsafe {
            match (kernel, rows) {
                (Kernel::Avx512Vnni, 6) => zmm_vnni::<6>(t, c, ldc),
                (Kernel::Avx512Vnni, 5) => zmm_vnni::<5>(t, c, ldc),
                (Kernel::Avx512Vnni, 4) => zmm_vnni::<4>(t, c, ldc),
                (Kernel::Avx512Vnni, 3) => zmm_vnni::<3>(t, c, ldc),
                (Kernel::Avx512Vnni, 2) => zmm_vnni::<2>(t, c, ldc),
                (Kernel::Avx512Vnni, _) => zmm_vnni::<1>(t, c, ldc),
                (Kernel::AvxVnni, 6) => ymm_vnni::<6>(t, c, ldc),
                (Kernel::AvxVnni, 5) => ymm_vnni::<5>(t, c, ldc),
                (Kernel::AvxVnni, 4) => ymm_vnni::<4>(t, c, ldc),
                (Kernel::AvxVnni, 3) => ymm_vnni::<3>(t, c, ldc),
                (Kernel::AvxVnni, 2) => ymm_vnni::<2>(t, c, ldc),
                (Kernel::AvxVnni, _) => ymm_vnni::<1>(t, c, ldc),
                (Kernel::Avx2, 4) => ymm_maddubs::<4>(t, c, ldc),
                (Kernel::Avx2, 3) => ymm_maddubs::<3>(t, c, ldc),
                (Kernel::Avx2, 2) => ymm_maddubs::<2>(t, c, ldc),
                (Kernel::Avx2, _) => ymm_maddubs::<1>(t, c, ldc),
            }
        }
    }

    /// Quantises one row for the AVX-512 kernel (`p + 128`), sixteen values
    /// per step; returns its scale.
    ///
    /// # Safety
    /// The CPU has AVX-512 F and BW; `dst` is at least as long as `row`.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn quantise_row_avx512(dst: &mut [u8], row: &[f32]) -> f32 {
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
        let (step, inverse) = step_of(_mm512_reduce_max_ps(max));
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

    /// Quantises one row for the 256-bit kernels (`p + offset` as a byte),
    /// eight values per step; returns its scale.
    ///
    /// # Safety
    /// The CPU has AVX2; `dst` is at least as long as `row`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantise_row_avx2(dst: &mut [u8], row: &[f32], offset: i32) -> f32 {
        assert!(dst.len() >= row.len());
        let n = row.len();
        let whole = n - n % 8;
        let src = row.as_ptr();
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let mut max = _mm256_setzero_ps();
        let mut i = 0;
        while i < whole {
            // SAFETY: i + 8 ≤ n.
            let x = unsafe { _mm256_loadu_ps(src.add(i)) };
            max = _mm256_max_ps(max, _mm256_and_ps(x, magnitude));
            i += 8;
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: eight floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), max) };
        let max = row[whole..]
            .iter()
            .chain(&lanes)
            .fold(0.0f32, |m, v| m.max(v.abs()));
        let (step, inverse) = step_of(max);
        let scale = _mm256_set1_ps(inverse);
        let add = _mm256_set1_epi32(offset);
        // The low byte of each 32-bit lane, gathered into the first four
        // bytes of each 128-bit half, then the halves' first words together.
        let low_bytes = _mm256_setr_epi8(
            0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1,
            -1, -1, -1, -1, -1, -1, -1, -1, -1,
        );
        let halves = _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0);
        let out = dst.as_mut_ptr();
        let mut i = 0;
        while i < whole {
            // SAFETY: i + 8 ≤ n ≤ dst.len().
            unsafe {
                let x = _mm256_loadu_ps(src.add(i));
                let q = _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(x, scale)), add);
                let bytes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(q, low_bytes), halves);
                _mm_storel_epi64(out.add(i).cast(), _mm256_castsi256_si128(bytes));
            }
            i += 8;
        }
        for (d, &x) in dst[whole..n].iter_mut().zip(&row[whole..]) {
            // `vcvtps2dq` rounds to nearest even, as here.
            *d = ((x * inverse).round_ties_even() as i32 + offset) as u8;
        }
        step
    }

    /// The AVX-512 VNNI micro-kernel: C[0..R, 0..cols] = residual + bias +
    /// s[r] · scale[o] · (Σ (p + 128)·q − offset[o]), four activation bytes
    /// broadcast per step and the panel read as four vectors per step.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn zmm_vnni<const R: usize>(t: &Tile<'_>, c: &mut [f32], ldc: usize) {
        const PANEL: usize = 64;
        t.check(R, PANEL, c, ldc);
        let cols = t.bias.len();
        let mut acc = [[_mm512_setzero_si512(); 4]; R];
        let ap = t.a.as_ptr();
        let bp = t.b.as_ptr();
        for g in 0..t.groups {
            // SAFETY: g < groups, so the four vectors lie inside the panel,
            // and each row's group 4g..4g+4 inside its row of A (checked).
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
            // SAFETY: the panel's scales and offsets hold 64 columns
            // (checked); the masked lanes of the bias, C and the residual are
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

    /// The AVX-VNNI micro-kernel: as [`zmm_vnni`] on a 16-column panel,
    /// two 256-bit vectors per step.
    #[target_feature(enable = "avx2,fma,avxvnni")]
    unsafe fn ymm_vnni<const R: usize>(t: &Tile<'_>, c: &mut [f32], ldc: usize) {
        const PANEL: usize = 16;
        t.check(R, PANEL, c, ldc);
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        let ap = t.a.as_ptr();
        let bp = t.b.as_ptr();
        for g in 0..t.groups {
            // SAFETY: g < groups: the two vectors lie inside the panel, and
            // each row's group inside its row of A (checked).
            unsafe {
                let step = bp.add(g * PANEL * GROUP);
                let b0 = _mm256_loadu_si256(step.cast());
                let b1 = _mm256_loadu_si256(step.add(32).cast());
                for (row, acc) in acc.iter_mut().enumerate() {
                    let quad = ap
                        .add(row * t.lda + GROUP * g)
                        .cast::<i32>()
                        .read_unaligned();
                    let av = _mm256_set1_epi32(quad);
                    acc[0] = _mm256_dpbusd_avx_epi32(acc[0], av, b0);
                    acc[1] = _mm256_dpbusd_avx_epi32(acc[1], av, b1);
                }
            }
        }
        // SAFETY: checked above.
        unsafe { store16(t, &acc, c, ldc) };
    }

    /// The AVX2 micro-kernel (no VNNI): per step, each row's four signed
    /// activation bytes are broadcast; `|p|` (unsigned) times the panel's
    /// bytes with the sign of `p` moved onto them (`vpsignb`, which also
    /// zeroes them where `p = 0`) gives `p·q` in adjacent pairs summed to
    /// 16 bits without saturating (`vpmaddubsw`), widened and summed to 32
    /// bits by `vpmaddwd` with ones.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn ymm_maddubs<const R: usize>(t: &Tile<'_>, c: &mut [f32], ldc: usize) {
        const PANEL: usize = 16;
        t.check(R, PANEL, c, ldc);
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        let ones = _mm256_set1_epi16(1);
        let ap = t.a.as_ptr();
        let bp = t.b.as_ptr();
        for g in 0..t.groups {
            // SAFETY: as in `ymm_vnni`.
            unsafe {
                let step = bp.add(g * PANEL * GROUP);
                let b0 = _mm256_loadu_si256(step.cast());
                let b1 = _mm256_loadu_si256(step.add(32).cast());
                for (row, acc) in acc.iter_mut().enumerate() {
                    let quad = ap
                        .add(row * t.lda + GROUP * g)
                        .cast::<i32>()
                        .read_unaligned();
                    let p = _mm256_set1_epi32(quad);
                    let magnitude = _mm256_abs_epi8(p);
                    let pairs0 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(b0, p));
                    let pairs1 = _mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(b1, p));
                    acc[0] = _mm256_add_epi32(acc[0], _mm256_madd_epi16(pairs0, ones));
                    acc[1] = _mm256_add_epi32(acc[1], _mm256_madd_epi16(pairs1, ones));
                }
            }
        }
        // SAFETY: checked above.
        unsafe { store16(t, &acc, c, ldc) };
    }

    /// The 256-bit kernels' epilogue on a 16-column panel: C = residual +
    /// bias + s[r] · scale[o] · (sum − offset[o]) for the valid columns.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `t.check(R, 16, c, ldc)` holds.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn store16<const R: usize>(
        t: &Tile<'_>,
        acc: &[[__m256i; 2]; R],
        c: &mut [f32],
        ldc: usize,
    ) {
        let cols = t.bias.len();
        // SAFETY: the panel's scales and offsets hold 16 columns (checked).
        let (scale, offset) = unsafe {
            (
                [
                    _mm256_loadu_ps(t.scale.as_ptr()),
                    _mm256_loadu_ps(t.scale.as_ptr().add(8)),
                ],
                [
                    _mm256_loadu_si256(t.offset.as_ptr().cast()),
                    _mm256_loadu_si256(t.offset.as_ptr().add(8).cast()),
                ],
            )
        };
        if cols == 16 {
            // Whole rows: bias plus residual first, then one fused
            // multiply-add (the AVX-512 epilogue's roundings), in vectors.
            // SAFETY: `bias` holds 16 floats; each row of C and of the
            // residual holds 16 at `row · ldc` (checked).
            unsafe {
                let bias = [
                    _mm256_loadu_ps(t.bias.as_ptr()),
                    _mm256_loadu_ps(t.bias.as_ptr().add(8)),
                ];
                for (row, acc) in acc.iter().enumerate() {
                    let step = _mm256_set1_ps(t.row_scale[row]);
                    let dst = c[row * ldc..row * ldc + 16].as_mut_ptr();
                    for h in 0..2 {
                        let init = match t.residual {
                            Some(res) => _mm256_add_ps(
                                bias[h],
                                _mm256_loadu_ps(res[row * ldc..row * ldc + 16].as_ptr().add(8 * h)),
                            ),
                            None => bias[h],
                        };
                        let sum = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[h], offset[h]));
                        let out = _mm256_fmadd_ps(sum, _mm256_mul_ps(scale[h], step), init);
                        _mm256_storeu_ps(dst.add(8 * h), out);
                    }
                }
            }
            return;
        }
        for (row, acc) in acc.iter().enumerate() {
            // As above, through a 16-wide copy of the valid columns.
            let mut init = [0.0f32; 16];
            init[..cols].copy_from_slice(t.bias);
            if let Some(res) = t.residual {
                for (i, r) in init.iter_mut().zip(&res[row * ldc..row * ldc + cols]) {
                    *i += r;
                }
            }
            let mut out = [0.0f32; 16];
            let step = _mm256_set1_ps(t.row_scale[row]);
            for h in 0..2 {
                // SAFETY: `init` and `out` are 16 wide.
                unsafe {
                    let sum = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[h], offset[h]));
                    let init = _mm256_loadu_ps(init.as_ptr().add(8 * h));
                    _mm256_storeu_ps(
                        out.as_mut_ptr().add(8 * h),
                        _mm256_fmadd_ps(sum, _mm256_mul_ps(scale[h], step), init),
                    );
                }
            }
            c[row * ldc..row * ldc + cols].copy_from_slice(&out[..cols]);
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

    /// The kernels this CPU has (whatever the cap: each is tested).
    fn kernels() -> Vec<Kernel> {
        let kernels: Vec<Kernel> = Kernel::ALL
            .into_iter()
            .filter(|k| k.on_this_cpu())
            .collect();
        if kernels.is_empty() {
            eprintln!("skipping: this CPU has no int8 kernel");
        }
        kernels
    }

    #[test]
    fn int8_product_matches_f32_within_quantisation() {
        for kernel in kernels() {
            for &(rows, inputs, outputs) in
                &[(1, 3, 5), (7, 33, 70), (13, 384, 1152), (100, 64, 130)]
            {
                let a: Vec<f32> = (0..rows * inputs)
                    .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
                    .collect();
                let w: Vec<f32> = (0..inputs * outputs)
                    .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
                    .collect();
                let packed = PackedWeight::pack_for(kernel, &w, inputs, outputs);
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
                            "{kernel:?} {rows}x{inputs}x{outputs} [{r},{o}]: {got} vs {want} (bound {bound})"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn values_on_the_quantisation_grid_are_exact() {
        for kernel in kernels() {
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
            let packed = PackedWeight::pack_for(kernel, &w, inputs, outputs);
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
                assert_eq!(f64::from(*got), 2.0 * want, "{kernel:?}");
            }
        }
    }

    #[test]
    fn zero_rows_and_columns_stay_zero() {
        for kernel in kernels() {
            let (inputs, outputs) = (8, 3);
            let mut w = vec![0.25f32; inputs * outputs];
            w[inputs..2 * inputs].fill(0.0);
            let packed = PackedWeight::pack_for(kernel, &w, inputs, outputs);
            let a: Vec<f32> = [vec![0.0; inputs], vec![1.0; inputs]].concat();
            let mut c = vec![0.0f32; 2 * outputs];
            matmul(&mut c, &a, 2, &packed, None, None, None);
            assert_eq!(c, [0.0, 0.0, 0.0, 2.0, 0.0, 2.0], "{kernel:?}");
        }
    }

    /// The kernels compute the same integer sums and the same epilogue, so
    /// their results are bit for bit equal; extreme values (every product
    /// ±127·127, which would saturate `vpmaddubsw` on unsigned activations)
    /// included.
    #[test]
    fn every_kernel_gives_the_same_bits() {
        let kernels = kernels();
        for &(rows, inputs, outputs) in &[(11, 37, 83), (96 + 7, 384, 40)] {
            let mut a: Vec<f32> = (0..rows * inputs)
                .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
                .collect();
            let mut w: Vec<f32> = (0..inputs * outputs)
                .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
                .collect();
            // Row 0 and column 0 at ±max everywhere.
            a[..inputs]
                .iter_mut()
                .enumerate()
                .for_each(|(k, v)| *v = if k % 3 == 0 { -2.0 } else { 2.0 });
            w[..inputs]
                .iter_mut()
                .enumerate()
                .for_each(|(k, v)| *v = if k % 3 == 0 { -3.0 } else { 3.0 });
            let bias: Vec<f32> = (0..outputs).map(|o| o as f32 * 0.01).collect();
            let residual: Vec<f32> = (0..rows * outputs).map(|i| (i % 13) as f32 * 0.1).collect();
            let results: Vec<Vec<f32>> = kernels
                .iter()
                .map(|&kernel| {
                    let packed = PackedWeight::pack_for(kernel, &w, inputs, outputs);
                    let mut c = vec![f32::NAN; rows * outputs];
                    matmul(
                        &mut c,
                        &a,
                        rows,
                        &packed,
                        Some(&bias),
                        Some(&residual),
                        None,
                    );
                    c
                })
                .collect();
            for (kernel, c) in kernels.iter().zip(&results) {
                assert!(c.iter().all(|v| v.is_finite()), "{kernel:?}");
                assert_eq!(c, &results[0], "{kernel:?} differs from {:?}", kernels[0]);
            }
            // Row 0 · column 0: all 127 · 127 products of the same sign.
            if let Some(c) = results.first() {
                let want = 6.0 * inputs as f64 + f64::from(residual[0]);
                assert!(
                    (f64::from(c[0]) - want).abs() < 1e-3 * want,
                    "{} vs {want}",
                    c[0]
                );
            }
        }
    }

    #[test]
    fn the_active_kernel_follows_the_level() {
        match Kernel::active() {
            Some(kernel) => {
                assert!(kernel.on_this_cpu());
                assert!(crate::isa::active() >= kernel.level());
            }
            None => assert!(crate::isa::active() < Isa::Avx2),
        }
        if crate::isa::active() == Isa::Avx2 {
            assert_eq!(Kernel::active(), Some(Kernel::Avx2));
        }
    }
}
