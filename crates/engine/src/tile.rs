//! What the precision kernels share, below all of them: the strided
//! [`View`] of an operand, the split of a packed product into parallel tasks
//! with its post-operation ([`Post`], `packed_tasks`), rounding to bf16
//! (`to_bf16`, `round_row`), the AVX-512 epilogue's start and tail masks,
//! and the 8 × 8 AVX transpose. The f32, bf16, AMX and int8 kernels import
//! this module and nothing of each other;
//! [`crate::linear`] sits on top of them all.

use rayon::prelude::*;

/// A strided view of a row-major or transposed matrix inside a slice.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    /// Step between rows.
    pub rs: usize,
    /// Step between columns.
    pub cs: usize,
}

impl<'a> View<'a> {
    /// A row-major matrix with leading dimension `ld`.
    pub fn rows(data: &'a [f32], rows: usize, cols: usize, ld: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: ld,
            cs: 1,
        }
    }

    /// The transpose of a row-major `cols × rows` matrix with leading dimension `ld`.
    pub fn transposed(data: &'a [f32], rows: usize, cols: usize, ld: usize) -> Self {
        Self {
            data,
            rows,
            cols,
            rs: 1,
            cs: ld,
        }
    }

    pub(crate) fn check(&self, what: &str) {
        if self.rows > 0 && self.cols > 0 {
            let last = (self.rows - 1) * self.rs + (self.cols - 1) * self.cs;
            assert!(last < self.data.len(), "{what} view out of bounds");
        }
    }
}

/// Work done on a layer's output rows right after the product (an
/// activation), on each parallel task's rows while they are in cache.
pub type Post<'a> = dyn Fn(&mut [f32]) + Sync + 'a;

/// Rows of the output per parallel task of the packed (bf16, int8) kernels:
/// sixteen of their 6-row tiles.
pub(crate) const PACKED_ROWS_PER_TASK: usize = 96;

/// What every packed product (bf16, int8) shares around its kernel: the
/// shape checks, and the split of `c` (and of the residual) into parallel
/// tasks of [`PACKED_ROWS_PER_TASK`] rows of `outputs`. `kernel(first_row,
/// c_rows, residual_rows)` writes a task's rows; `post` then runs on them
/// while they are in cache.
pub(crate) fn packed_tasks(
    c: &mut [f32],
    outputs: usize,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
    kernel: impl Fn(usize, &mut [f32], Option<&[f32]>) + Sync,
) {
    packed_tasks_of(
        PACKED_ROWS_PER_TASK,
        c,
        outputs,
        bias,
        residual,
        post,
        kernel,
    );
}

/// [`packed_tasks`] with `rows_per_task` rows of `outputs` per task.
pub(crate) fn packed_tasks_of(
    rows_per_task: usize,
    c: &mut [f32],
    outputs: usize,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
    kernel: impl Fn(usize, &mut [f32], Option<&[f32]>) + Sync,
) {
    assert!(c.len().is_multiple_of(outputs), "c is not rows × outputs");
    assert!(
        bias.is_none_or(|b| b.len() == outputs),
        "bias is not outputs wide"
    );
    assert!(
        residual.is_none_or(|r| r.len() == c.len()),
        "residual is not rows × outputs"
    );
    let task = rows_per_task * outputs;
    c.par_chunks_mut(task).enumerate().for_each(|(i, c)| {
        let residual = residual.map(|r| &r[i * task..i * task + c.len()]);
        kernel(i * rows_per_task, c, residual);
        if let Some(post) = post {
            post(c);
        }
    });
}

/// Rounds to bf16 (nearest, ties to even), as `vcvtneps2bf16` does for
/// finite values.
#[inline(always)]
pub(crate) fn to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1));
    (rounded >> 16) as u16
}

/// Rounds one row to bf16 (nearest even, as [`to_bf16`]), sixteen values per
/// `vcvtneps2bf16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
pub(crate) unsafe fn round_row(dst: &mut [u16], row: &[f32]) {
    use std::arch::x86_64::*;
    assert!(dst.len() >= row.len());
    let n = row.len();
    let mut i = 0;
    while i < n {
        let mask = tail_mask(n - i);
        // SAFETY: the masked lanes are values i..min(i + 16, n) of `row`
        // and of `dst`; bf16 vectors are 16-bit lanes, reinterpreted.
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, row.as_ptr().add(i));
            let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(x));
            _mm256_mask_storeu_epi16(dst.as_mut_ptr().add(i).cast(), mask, h);
        }
        i += 16;
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) unsafe fn round_row(_: &mut [u16], _: &[f32]) {
    unreachable!("the bf16 path is only enabled on x86_64 with AVX-512 BF16")
}

/// The lanes of a 16-wide vector that hold `left` remaining values (all
/// sixteen when at least that many remain).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[inline(always)]
pub(crate) fn tail_mask(left: usize) -> u16 {
    if left >= 16 {
        0xffff
    } else {
        (1u16 << left) - 1
    }
}

/// Where a packed kernel's epilogue starts a row's 16 columns: the bias
/// vector, plus the residual's lanes at `at` where there is one.
///
/// # Safety
/// The masked lanes `at..at + 16` of `residual` lie inside it, and the CPU
/// has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn epilogue_start(
    bias: std::arch::x86_64::__m512,
    residual: Option<&[f32]>,
    at: usize,
    mask: u16,
) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    match residual {
        // SAFETY: the caller's contract.
        Some(res) => _mm512_add_ps(bias, unsafe {
            _mm512_maskz_loadu_ps(mask, res.as_ptr().add(at))
        }),
        None => bias,
    }
}

/// The 8 × 8 transpose of eight 8-lane rows: lane `j` of vector `i` of the
/// result is lane `i` of row `j` (pairs, then quads, then halves).
#[cfg(target_arch = "x86_64")]
#[inline]
#[target_feature(enable = "avx")]
pub(crate) fn transpose8(r: [std::arch::x86_64::__m256; 8]) -> [std::arch::x86_64::__m256; 8] {
    use std::arch::x86_64::*;
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}
