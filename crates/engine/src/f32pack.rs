//! f32 products below the AVX-512 level (AVX2 + FMA, and the portable
//! code that `scalar` and non-x86 builds run): the `gemm` crate picks its
//! AVX-512 kernels by itself whenever the CPU has them, so under a
//! `SKILLRET_MAX_ISA` cap the native engine's f32 products come from here.
//!
//! The right-hand matrix is packed in panels of [`NR`] = 16 columns, each
//! `k × 16` row-major (one panel row is two 8-lane vectors): a layer's
//! weight once, at load; a general right-hand side on each call. A
//! micro-kernel keeps a 6 × 16 tile of C in 12 registers and, for each `k`,
//! broadcasts one value of each of its 6 rows of A against the panel row (12
//! FMAs for 2 loads and 6 broadcasts). `k` is cut into equal blocks of at
//! most [`KC`] ([`depth`]) so that a panel's slice (at most 24 KiB) stays in
//! L1 while the row tiles pass over it, and a depth of up to [`KC`] (MiniLM's
//! and e5's 384) is one pass: C is written once, by a vectorised epilogue.

use rayon::prelude::*;

use crate::isa::{self, Isa};
use crate::tile::View;
use crate::tile::{Post, packed_tasks};

/// Output columns of a panel.
pub(crate) const NR: usize = 16;
/// Rows of the micro-kernel's tile.
const MR: usize = 6;
/// Largest depth of one pass over the panels.
const KC: usize = 384;

/// The depth of each pass for a product of depth `k`: equal blocks of at
/// most [`KC`].
fn depth(k: usize) -> usize {
    k.div_ceil(k.div_ceil(KC).max(1)).max(1)
}

/// The right-hand side `B` (`k × n`) packed in panels of [`NR`] columns.
pub(crate) struct Panels {
    data: Vec<f32>,
    k: usize,
    n: usize,
}

impl Panels {
    /// A layer's weight as stored (`outputs × inputs`, row-major), for
    /// `x · Wᵀ`: `B = Wᵀ`, `k = inputs`, `n = outputs`.
    pub(crate) fn from_weight(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        Self::pack(inputs, outputs, |k, col| weight[col * inputs + k])
    }

    /// A strided `k × n` matrix.
    fn from_view(b: View<'_>) -> Self {
        Self::pack(b.rows, b.cols, |k, col| b.data[k * b.rs + col * b.cs])
    }

    fn pack(k: usize, n: usize, at: impl Fn(usize, usize) -> f32 + Sync) -> Self {
        let panels = n.div_ceil(NR);
        let mut data = vec![0.0f32; panels * k * NR];
        let fill = |(panel, block): (usize, &mut [f32])| {
            for (p, row) in block.chunks_exact_mut(NR).enumerate() {
                for (j, v) in row.iter_mut().enumerate() {
                    let col = panel * NR + j;
                    if col < n {
                        *v = at(p, col);
                    }
                }
            }
        };
        if k * n >= 1 << 16 {
            data.par_chunks_mut(k * NR).enumerate().for_each(fill);
        } else {
            data.chunks_mut(k * NR).enumerate().for_each(fill);
        }
        Self { data, k, n }
    }

    fn panel(&self, panel: usize, k0: usize, kc: usize) -> &[f32] {
        let start = panel * self.k * NR + k0 * NR;
        &self.data[start..start + kc * NR]
    }
}

/// What a tile's result is added to.
#[derive(Clone, Copy)]
enum Base<'a> {
    /// Nothing: C is overwritten.
    Zero,
    /// C itself (accumulate).
    Dst,
    /// The bias of the tile's columns (zeros where none), and the
    /// residual's rows (`ldc` apart) where there is one.
    Bias(&'a [f32], Option<&'a [f32]>),
}

/// A strided block of A: row `r`, depth `p` at `data[r·rs + p·cs]`.
#[derive(Clone, Copy)]
struct Lhs<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

/// `C[0..rows, 0..n] = base + A · B` over every panel, `k` in blocks of
/// [`depth`] (the first block adds the base, later ones accumulate).
#[allow(clippy::too_many_arguments)]
fn tiles(
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    rows: usize,
    b: &Panels,
    panels: std::ops::Range<usize>,
    col0: usize,
    base: Base<'_>,
    bias: Option<&[f32]>,
    level: Isa,
) {
    #[cfg(target_arch = "x86_64")]
    let avx2 = level >= Isa::Avx2;
    #[cfg(not(target_arch = "x86_64"))]
    let _ = level;
    // The AVX2 kernel reads A packed per `KC` block, tile after tile, each
    // tile's `MR` values of one depth side by side (one stream the
    // prefetcher follows, instead of six strided rows).
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut packed_a = Vec::new();
    let block = depth(b.k);
    let mut k0 = 0;
    loop {
        let kc = (b.k - k0).min(block);
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            pack_lhs(&mut packed_a, a, rows, k0, kc);
        }
        for panel in panels.clone() {
            let cols = (b.n - panel * NR).min(NR);
            let at = panel * NR - col0;
            let tile_base = match (k0, base) {
                (0, Base::Bias(_, residual)) => Base::Bias(
                    bias.map_or(&ZEROS[..cols], |b| &b[panel * NR..panel * NR + cols]),
                    residual.map(|r| &r[at..]),
                ),
                (0, base) => base,
                _ => Base::Dst,
            };
            let panel = b.panel(panel, k0, kc);
            let mut r = 0;
            while r < rows {
                let mr = (rows - r).min(MR);
                let lhs = if packed_a.is_empty() {
                    Lhs {
                        data: &a.data[r * a.rs + k0 * a.cs..],
                        ..a
                    }
                } else {
                    Lhs {
                        data: &packed_a[(r / MR) * kc * MR..],
                        rs: 1,
                        cs: MR,
                    }
                };
                let row_base = match tile_base {
                    Base::Bias(bias, residual) => {
                        Base::Bias(bias, residual.map(|res| &res[r * ldc..]))
                    }
                    other => other,
                };
                let c = &mut c[r * ldc + at..];
                r += mr;
                #[cfg(target_arch = "x86_64")]
                if avx2 {
                    // SAFETY: AVX2 and FMA are present (`level` is at most
                    // what the CPU has, see the callers); the
                    // tile holds `mr` rows of A with `kc` values each, the
                    // panel `kc` rows of 16, and `c` (and the residual) `mr`
                    // rows of at least `cols` values `ldc` apart (the kernel
                    // asserts the first two; slicing checks the rest).
                    unsafe { avx2::tile(c, ldc, lhs, mr, panel, kc, cols, row_base) };
                    continue;
                }
                portable_tile(c, ldc, lhs, mr, panel, kc, cols, row_base);
            }
        }
        k0 += kc;
        if k0 >= b.k {
            break;
        }
    }
}

/// Rows `0..rows`, depths `k0..k0 + kc` of A into `out`: tile `t` at
/// `t·kc·MR`, depth `p` of its row `r` at `+ p·MR + r` (the slots of rows
/// past the last are left as they were: the kernel reads `mr` rows).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn pack_lhs(out: &mut Vec<f32>, a: Lhs<'_>, rows: usize, k0: usize, kc: usize) {
    let tiles = rows.div_ceil(MR);
    out.resize(tiles * kc * MR, 0.0);
    for (t, tile) in out.chunks_exact_mut(kc * MR).enumerate() {
        let mr = (rows - t * MR).min(MR);
        #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
        let mut done = 0;
        if mr == MR && a.cs == 1 {
            // A whole tile of contiguous rows: eight depths at a time through
            // 8 × 8 transposes where AVX2 is, written in order.
            let start = t * MR * a.rs + k0;
            let rows = &a.data[start..start + (MR - 1) * a.rs + kc];
            #[cfg(target_arch = "x86_64")]
            if crate::isa::allows(Isa::Avx2) {
                // SAFETY: AVX2 is present; `rows` holds the tile's six rows
                // of `kc` values `rs` apart and `tile` kc·MR values.
                done = unsafe { avx2::pack_tile(tile, rows, a.rs, kc) };
            }
            let rows: [&[f32]; MR] = std::array::from_fn(|r| &rows[r * a.rs..r * a.rs + kc]);
            for (p, out) in tile.chunks_exact_mut(MR).enumerate().skip(done) {
                for (o, row) in out.iter_mut().zip(&rows) {
                    *o = row[p];
                }
            }
            continue;
        }
        for r in 0..mr {
            let row = (t * MR + r) * a.rs + k0 * a.cs;
            for p in 0..kc {
                tile[p * MR + r] = a.data[row + p * a.cs];
            }
        }
    }
}

static ZEROS: [f32; NR] = [0.0; NR];

/// The tile's epilogue: `c[r][j] = base + acc[r][j]` for its valid columns.
#[inline(always)]
fn store(c: &mut [f32], ldc: usize, acc: &[[f32; NR]], cols: usize, base: Base<'_>) {
    for (r, acc) in acc.iter().enumerate() {
        let row = &mut c[r * ldc..r * ldc + cols];
        match base {
            Base::Zero => row.copy_from_slice(&acc[..cols]),
            Base::Dst => {
                for (c, a) in row.iter_mut().zip(acc) {
                    *c += a;
                }
            }
            Base::Bias(bias, residual) => {
                for (j, (c, a)) in row.iter_mut().zip(acc).enumerate() {
                    *c = bias[j] + residual.map_or(0.0, |res| res[r * ldc + j]) + a;
                }
            }
        }
    }
}

/// The portable micro-kernel (plain f32 multiply and add, vectorised by the
/// compiler for the target's baseline).
#[allow(clippy::too_many_arguments)]
fn portable_tile(
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    rows: usize,
    panel: &[f32],
    kc: usize,
    cols: usize,
    base: Base<'_>,
) {
    // Two rows at a time: 32 sums fill half of the 16 vector registers of
    // x86_64's baseline (SSE2), where six rows would spill.
    for r in (0..rows).step_by(2) {
        let a = Lhs {
            data: &a.data[r * a.rs..],
            ..a
        };
        let base = match base {
            Base::Bias(bias, residual) => Base::Bias(bias, residual.map(|res| &res[r * ldc..])),
            other => other,
        };
        let c = &mut c[r * ldc..];
        if rows - r >= 2 {
            portable::<2>(c, ldc, a, panel, kc, cols, base);
        } else {
            portable::<1>(c, ldc, a, panel, kc, cols, base);
        }
    }
}

/// `acc + x · b` lane by lane, on values (so that the compiler keeps the
/// row in vector registers).
#[inline(always)]
fn axpy(acc: [f32; NR], x: f32, b: &[f32; NR]) -> [f32; NR] {
    std::array::from_fn(|j| acc[j] + x * b[j])
}

#[inline(always)]
fn portable<const R: usize>(
    c: &mut [f32],
    ldc: usize,
    a: Lhs<'_>,
    panel: &[f32],
    kc: usize,
    cols: usize,
    base: Base<'_>,
) {
    let mut acc = [[0.0f32; NR]; R];
    if a.cs == 1 {
        // Each row's `kc` values as one slice: no strided index in the loop.
        let rows: [&[f32]; R] = std::array::from_fn(|r| &a.data[r * a.rs..r * a.rs + kc]);
        for (p, b) in panel.chunks_exact(NR).take(kc).enumerate() {
            let b: &[f32; NR] = b.try_into().expect("panel rows are NR wide");
            for (acc, row) in acc.iter_mut().zip(&rows) {
                *acc = axpy(*acc, row[p], b);
            }
        }
    } else {
        for (p, b) in panel.chunks_exact(NR).take(kc).enumerate() {
            let b: &[f32; NR] = b.try_into().expect("panel rows are NR wide");
            for (r, acc) in acc.iter_mut().enumerate() {
                *acc = axpy(*acc, a.data[r * a.rs + p * a.cs], b);
            }
        }
    }
    store(c, ldc, &acc, cols, base);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Base, Lhs, MR, NR, store};

    /// The first `kc / 8 · 8` depths of a whole tile (six rows of `kc`
    /// values, `rs` apart, in `rows`) into `tile` (`p·MR + r`), eight at a
    /// time: the 8 × 8 transpose of six rows and two of zeros, each depth's
    /// six values stored as one vector whose last two lanes the next depth
    /// overwrites (the eighth as four and two). Returns the depths done.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_tile(tile: &mut [f32], rows: &[f32], rs: usize, kc: usize) -> usize {
        assert!(rows.len() >= (MR - 1) * rs + kc && tile.len() >= kc * MR);
        let whole = kc / 8 * 8;
        let (src, dst) = (rows.as_ptr(), tile.as_mut_ptr());
        for p0 in (0..whole).step_by(8) {
            // SAFETY: each row's depths p0..p0 + 8 ≤ kc lie inside `rows`;
            // the stores cover tile[p0·MR .. (p0 + 8)·MR] (asserted above).
            unsafe {
                let r: [__m256; 8] = std::array::from_fn(|i| {
                    if i < MR {
                        _mm256_loadu_ps(src.add(i * rs + p0))
                    } else {
                        _mm256_setzero_ps()
                    }
                });
                let depths = crate::tile::transpose8(r);
                let at = dst.add(p0 * MR);
                for (i, v) in depths.iter().enumerate().take(7) {
                    _mm256_storeu_ps(at.add(i * MR), *v);
                }
                let last = at.add(7 * MR);
                _mm_storeu_ps(last, _mm256_castps256_ps128(depths[7]));
                _mm_storel_epi64(
                    last.add(4).cast(),
                    _mm_castps_si128(_mm256_extractf128_ps::<1>(depths[7])),
                );
            }
        }
        whole
    }

    /// The AVX2 + FMA micro-kernel on `rows` ≤ 6 rows.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tile(
        c: &mut [f32],
        ldc: usize,
        a: Lhs<'_>,
        rows: usize,
        panel: &[f32],
        kc: usize,
        cols: usize,
        base: Base<'_>,
    ) {
        if a.rs == 1 && a.cs == MR {
            // A packed by `pack_lhs`: constant offsets.
            return match rows {
                6 => kernel::<6, true>(c, ldc, a, panel, kc, cols, base),
                5 => kernel::<5, true>(c, ldc, a, panel, kc, cols, base),
                4 => kernel::<4, true>(c, ldc, a, panel, kc, cols, base),
                3 => kernel::<3, true>(c, ldc, a, panel, kc, cols, base),
                2 => kernel::<2, true>(c, ldc, a, panel, kc, cols, base),
                _ => kernel::<1, true>(c, ldc, a, panel, kc, cols, base),
            };
        }
        match rows {
            6 => kernel::<6, false>(c, ldc, a, panel, kc, cols, base),
            5 => kernel::<5, false>(c, ldc, a, panel, kc, cols, base),
            4 => kernel::<4, false>(c, ldc, a, panel, kc, cols, base),
            3 => kernel::<3, false>(c, ldc, a, panel, kc, cols, base),
            2 => kernel::<2, false>(c, ldc, a, panel, kc, cols, base),
            _ => kernel::<1, false>(c, ldc, a, panel, kc, cols, base),
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn kernel<const R: usize, const PACKED: bool>(
        c: &mut [f32],
        ldc: usize,
        a: Lhs<'_>,
        panel: &[f32],
        kc: usize,
        cols: usize,
        base: Base<'_>,
    ) {
        const { assert!(R <= MR) };
        assert!(panel.len() >= kc * NR, "panel shorter than its depth");
        if kc > 0 {
            assert!(
                a.data.len() > (R - 1) * a.rs + (kc - 1) * a.cs,
                "lhs shorter than its tile"
            );
        }
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let ap = a.data.as_ptr();
        let bp = panel.as_ptr();
        for p in 0..kc {
            // SAFETY: p < kc: the panel row p and each row's value p lie
            // inside the slices (asserted above).
            unsafe {
                // The panel row eight ahead into L1, and A's stream with the
                // non-temporal hint: the panel (24 KiB) and a tile of A
                // (9 KiB) overflow L1 together, and without the hints A's
                // lines push out the panel rows the next tile reads again
                // (prefetches do not fault: the addresses past the ends are
                // never read).
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add((p + 8) * NR).cast());
                if PACKED {
                    _mm_prefetch::<_MM_HINT_NTA>(ap.wrapping_add((p + 16) * MR).cast());
                }
                let b0 = _mm256_loadu_ps(bp.add(p * NR));
                let b1 = _mm256_loadu_ps(bp.add(p * NR + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let at = if PACKED {
                        p * MR + r
                    } else {
                        r * a.rs + p * a.cs
                    };
                    let x = _mm256_broadcast_ss(&*ap.add(at));
                    acc[0] = _mm256_fmadd_ps(x, b0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(x, b1, acc[1]);
                }
            }
        }
        if cols == NR {
            // Whole rows of 16: the epilogue in vectors, with the same
            // order of additions as `store`.
            for (r, acc) in acc.iter().enumerate() {
                let row = &mut c[r * ldc..r * ldc + NR];
                let at = row.as_mut_ptr();
                for (h, acc) in acc.iter().enumerate() {
                    // SAFETY: `row` (and the residual's row, sliced the same
                    // way) hold 16 floats, and `bias` 16 when cols is 16.
                    unsafe {
                        let v = match base {
                            Base::Zero => *acc,
                            Base::Dst => _mm256_add_ps(_mm256_loadu_ps(at.add(8 * h)), *acc),
                            Base::Bias(bias, residual) => {
                                let b = _mm256_loadu_ps(bias[..NR].as_ptr().add(8 * h));
                                let b = match residual {
                                    Some(res) => _mm256_add_ps(
                                        b,
                                        _mm256_loadu_ps(
                                            res[r * ldc..r * ldc + NR].as_ptr().add(8 * h),
                                        ),
                                    ),
                                    None => b,
                                };
                                _mm256_add_ps(b, *acc)
                            }
                        };
                        _mm256_storeu_ps(at.add(8 * h), v);
                    }
                }
            }
            return;
        }
        let mut out = [[0.0f32; NR]; R];
        for (o, acc) in out.iter_mut().zip(&acc) {
            // SAFETY: each row of `out` holds 16 floats.
            unsafe {
                _mm256_storeu_ps(o.as_mut_ptr(), acc[0]);
                _mm256_storeu_ps(o.as_mut_ptr().add(8), acc[1]);
            }
        }
        store(c, ldc, &out, cols, base);
    }
}

/// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for `rows` rows (a layer:
/// `a` is `rows × inputs`, `c` and `residual` are `rows × outputs`); `post`
/// then runs on each parallel task's rows of `c`.
pub(crate) fn matmul(
    c: &mut [f32],
    a: &[f32],
    rows: usize,
    w: &Panels,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    matmul_at(isa::active(), c, a, rows, w, bias, residual, post);
}

/// [`matmul`] with the kernel of `level` (at most [`Isa::detected`]).
#[allow(clippy::too_many_arguments)]
fn matmul_at(
    level: Isa,
    c: &mut [f32],
    a: &[f32],
    rows: usize,
    w: &Panels,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    assert!(level.available(), "{level} is not on this CPU");
    let (inputs, outputs) = (w.k, w.n);
    assert_eq!(a.len(), rows * inputs, "a is not rows × inputs");
    assert_eq!(c.len(), rows * outputs, "c is not rows × outputs");
    if rows == 0 {
        return;
    }
    packed_tasks(c, outputs, bias, residual, post, |first, c, residual| {
        let rows = c.len() / outputs;
        let lhs = Lhs {
            data: &a[first * inputs..(first + rows) * inputs],
            rs: inputs,
            cs: 1,
        };
        let panels = 0..outputs.div_ceil(NR);
        tiles(
            c,
            outputs,
            lhs,
            rows,
            w,
            panels,
            0,
            Base::Bias(&[], residual),
            bias,
            level,
        );
    });
}

/// `dst = (accumulate ? dst : 0) + lhs · rhs` (`dst` row-major, `m × n`,
/// leading dimension `ldd`), as [`crate::kernels::matmul`]: the right-hand
/// side is packed on each call; `parallel` splits the panels over rayon's
/// threads.
pub(crate) fn matmul_views(
    dst: &mut [f32],
    ldd: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    accumulate: bool,
    parallel: bool,
) {
    matmul_views_at(isa::active(), dst, ldd, lhs, rhs, accumulate, parallel);
}

/// [`matmul_views`] with the kernel of `level` (at most [`Isa::detected`]).
fn matmul_views_at(
    level: Isa,
    dst: &mut [f32],
    ldd: usize,
    lhs: View<'_>,
    rhs: View<'_>,
    accumulate: bool,
    parallel: bool,
) {
    assert!(level.available(), "{level} is not on this CPU");
    let (m, n) = (lhs.rows, rhs.cols);
    if m == 0 || n == 0 {
        return;
    }
    let b = Panels::from_view(rhs);
    let a = Lhs {
        data: lhs.data,
        rs: lhs.rs,
        cs: lhs.cs,
    };
    let base = if accumulate { Base::Dst } else { Base::Zero };
    let panels = 0..n.div_ceil(NR);
    let threads = rayon::current_num_threads().max(1);
    if parallel && m * n * lhs.cols >= 1 << 18 && m > MR && threads > 1 {
        // Blocks of whole rows (multiples of the tile) per task.
        let per = m.div_ceil(2 * threads).next_multiple_of(MR);
        let last = (m - 1) * ldd + n;
        dst[..last]
            .par_chunks_mut(per * ldd)
            .enumerate()
            .for_each(|(i, dst)| {
                let first = i * per;
                let rows = (m - first).min(per);
                let a = Lhs {
                    data: &a.data[first * a.rs..],
                    ..a
                };
                tiles(dst, ldd, a, rows, &b, panels.clone(), 0, base, None, level);
            });
    } else {
        tiles(dst, ldd, a, m, &b, panels, 0, base, None, level);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 7919 + seed * 104_729) % 1009) as f32 / 1009.0 - 0.5) * 2.0)
            .collect()
    }

    /// The levels whose kernels this module has that this CPU runs.
    fn levels() -> Vec<Isa> {
        [Isa::Avx2, Isa::Scalar]
            .into_iter()
            .filter(|l| l.available())
            .collect()
    }

    #[test]
    fn layer_products_equal_the_definition() {
        for level in levels() {
            for &(rows, inputs, outputs) in &[
                (1, 3, 5),
                (7, 33, 70),
                (13, 384, 40),
                (100, 300, 17),
                (97, 600, 33),
            ] {
                let a = det(rows * inputs, 1);
                let w = det(outputs * inputs, 2);
                let bias = det(outputs, 3);
                let residual = det(rows * outputs, 4);
                let packed = Panels::from_weight(&w, inputs, outputs);
                for (with_bias, with_residual) in [(false, false), (true, false), (true, true)] {
                    let mut c = vec![f32::NAN; rows * outputs];
                    matmul_at(
                        level,
                        &mut c,
                        &a,
                        rows,
                        &packed,
                        with_bias.then_some(&bias[..]),
                        with_residual.then_some(&residual[..]),
                        None,
                    );
                    for r in 0..rows {
                        for o in 0..outputs {
                            let mut want: f64 = (0..inputs)
                                .map(|k| {
                                    f64::from(a[r * inputs + k]) * f64::from(w[o * inputs + k])
                                })
                                .sum();
                            if with_bias {
                                want += f64::from(bias[o]);
                            }
                            if with_residual {
                                want += f64::from(residual[r * outputs + o]);
                            }
                            let got = f64::from(c[r * outputs + o]);
                            assert!(
                                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                "{level} {rows}x{inputs}x{outputs} [{r},{o}]: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn strided_products_equal_the_definition() {
        // lhs m × k with a row stride, rhs read transposed, dst with a wider
        // leading dimension; accumulate and not, serial and parallel.
        for level in levels() {
            for &(m, k, n, parallel) in
                &[(5, 7, 3, false), (40, 64, 130, true), (90, 520, 50, true)]
            {
                let (lda, ldb, ldd) = (k + 3, k + 1, n + 5);
                let a = det(m * lda, 5);
                let bt = det(n * ldb, 6); // n × k, read as k × n
                for accumulate in [false, true] {
                    let mut dst = det(m * ldd, 7);
                    let before = dst.clone();
                    matmul_views_at(
                        level,
                        &mut dst,
                        ldd,
                        View::rows(&a, m, k, lda),
                        View::transposed(&bt, k, n, ldb),
                        accumulate,
                        parallel,
                    );
                    for r in 0..m {
                        for j in 0..ldd {
                            let got = f64::from(dst[r * ldd + j]);
                            if j >= n {
                                assert_eq!(
                                    dst[r * ldd + j],
                                    before[r * ldd + j],
                                    "outside the product"
                                );
                                continue;
                            }
                            let mut want: f64 = (0..k)
                                .map(|p| f64::from(a[r * lda + p]) * f64::from(bt[j * ldb + p]))
                                .sum();
                            if accumulate {
                                want += f64::from(before[r * ldd + j]);
                            }
                            assert!(
                                (got - want).abs() <= 1e-4 * (1.0 + want.abs()),
                                "{level} {m}x{k}x{n} [{r},{j}]: {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
