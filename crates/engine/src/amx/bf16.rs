//! bf16 products on AMX tiles: `c = residual + bias + a · Wᵀ`, `a` rounded
//! to bf16 as it is laid out, `W` packed once at load, f32 sums.
//!
//! Layout. A tile row holds 64 bytes: 32 bf16 of the shared dimension for
//! an A tile (a row of activations, as rounded), or 16 output columns × a
//! pair of the shared dimension for a B tile (the VNNI layout: pair-row `r`
//! of the tile holds `(W[n][2r], W[n][2r + 1])` for its 16 columns `n`). The
//! weight is packed in panels of 32 output columns (two B tiles), each panel
//! a run of *k-steps* of 32 inputs (1 KiB per tile, 2 KiB per step); widths
//! that are not multiples of 32 are zero-padded.
//!
//! Micro-kernel. A *strip* of up to 32 rows (two A tiles of up to 16 rows)
//! against a panel keeps a 2 × 2 block of accumulator tiles (32 × 32 f32):
//! per k-step two A and two B tile loads feed four `tdpbf16ps`. One `asm!`
//! block holds a whole call — configuration, the panels of a column group,
//! each one's k loop, stores, `tilerelease` — since nothing keeps tile
//! registers between blocks; `Kernel::Model` runs the same steps on the
//! portable `amx::model`.
//!
//! Blocking. Rows are split into parallel tasks (one per thread on large
//! products); in a task, for each group of panels (their k-steps fit in
//! L2) and each strip, one kernel call runs across the group, each panel
//! over the whole shared dimension, so that accumulators start from the
//! bias (or zero) and are stored once (a weight packed in shorter chunks,
//! as the tests do, sends partial sums through C between chunks, as f32: a
//! row's bits never depend on the batch, its strip, its task or the
//! chunking). The epilogue (bias, residual) and the caller's `post` then
//! run on the task's rows.

use rayon::prelude::*;

use super::model::{self, Config, Unit};
use super::{Aligned, Layout};
use crate::tile::{Post, to_bf16};

/// Inputs per k-step (a tile row of bf16).
pub(crate) const KSTEP: usize = 32;
/// Output columns per B tile and per panel (two tiles).
const TILE_COLUMNS: usize = 16;
pub(crate) const PANEL: usize = 2 * TILE_COLUMNS;
/// Rows per strip (two A tiles).
pub(crate) const STRIP: usize = 2 * model::ROWS;
/// bf16 values per packed B tile.
pub(crate) const TILE_VALUES: usize = model::ROWS * model::ROW_BYTES / 2;

/// How a product is cut up (see the module's documentation; the chunks of
/// the shared dimension are the packed weight's, [`PackedWeight::chunk`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocking {
    /// Rows per parallel task (a multiple of [`STRIP`]).
    pub(crate) task_rows: usize,
    /// Panels per column group.
    pub(crate) group_panels: usize,
}

impl Blocking {
    /// The smallest blocking of the engine's products: tasks of four strips,
    /// a group's chunk of the weight at most 1 MiB for the chunks that
    /// [`CHUNK_STEPS`] gives (L2, 2 MiB a core on these Xeons).
    pub(crate) const DEFAULT: Self = Self {
        task_rows: 128,
        group_panels: 32,
    };

    /// The blocking of a product of `rows` rows on a weight laid out as
    /// `layout` (2 KiB a panel per k-step): tasks of [`Blocking::DEFAULT`]'s
    /// rows, or one task per thread where that gives more, and the panels in
    /// the fewest groups whose chunk is at most [`GROUP_BYTES`], of sizes as
    /// even as they can be.
    ///
    /// One task per thread: each group of weight panels then comes from L3
    /// or memory once per thread and serves all of its strips from L2 (the
    /// tile unit runs at 24% of its peak on weights streaming from beyond
    /// L2 and at 49-58% from L2: a loop of 2 × 2 tile products, one core, a
    /// Xeon with AMX); Qwen3-0.6B's layers at 4,096 rows ran 1,313-1,513 →
    /// 1,533-1,871 GFLOP/s on two threads. Sums are the same whatever the
    /// blocking.
    pub(crate) fn for_product(rows: usize, layout: &Layout) -> Self {
        let per_thread = rows
            .div_ceil(rayon::current_num_threads().max(1))
            .next_multiple_of(STRIP);
        let most = (GROUP_BYTES / (layout.chunk * 2 * TILE_VALUES * 2)).max(1);
        let panels = layout.panels.max(1);
        Self {
            task_rows: per_thread.max(Self::DEFAULT.task_rows),
            group_panels: panels.div_ceil(panels.div_ceil(most)),
        }
    }
}

/// The most bytes of a group's chunk of the weight (L2 holds it while every
/// strip of a task passes).
pub(crate) const GROUP_BYTES: usize = 1 << 20;

/// k-steps per chunk of the shared dimension of [`Blocking::DEFAULT`] and of
/// the tests' packings (a strip's chunk of A is 32 KiB). The engine packs
/// its weights in one chunk ([`PackedWeight::pack`]): a panel's
/// accumulators then live across the whole shared dimension, since sending
/// partial sums through C costs more than reading A from L2 (Qwen3-0.6B's
/// `down`, 3,072 → 1,024 at 4,096 rows, two threads, mean GFLOP/s over 2 s:
/// chunks of 16 k-steps 1,029-1,129, 24: 1,162-1,207, 32: 1,226-1,280, 48:
/// 1,299-1,364, all 96: 1,319-1,391; a Xeon with AMX).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const CHUNK_STEPS: usize = 16;

/// A weight matrix `W` (`outputs × inputs`, row-major as stored) packed in
/// the tile layout: chunk after chunk of the shared dimension, in each the
/// panels one after the other (a group of panels' chunk is one contiguous
/// run), in each panel its k-steps, two tiles per step.
pub struct PackedWeight {
    data: Aligned<u16>,
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

impl PackedWeight {
    /// Packs a weight as stored (`outputs × inputs`, row-major), the
    /// whole shared dimension in one chunk.
    pub fn pack(weight: &[f32], inputs: usize, outputs: usize) -> Self {
        Self::pack_in_chunks(weight, inputs, outputs, inputs.div_ceil(KSTEP).max(1))
    }

    /// Packs a gated unit's weight as stored (`2·width × inputs`: the gate's
    /// `width` rows, then the up projection's) with each 32 gate columns
    /// followed by their 32 up columns, as [`Epilogue::Gated`] reads them;
    /// `bias` (where there is one) is reordered alike. `width` is a multiple
    /// of 32.
    pub fn pack_gated(
        weight: &[f32],
        bias: Option<&mut [f32]>,
        inputs: usize,
        outputs: usize,
    ) -> Self {
        assert!(
            outputs.is_multiple_of(2 * PANEL),
            "a gated width not of whole panels"
        );
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        let order = gated_order(outputs);
        let mut reordered = Vec::with_capacity(weight.len());
        for &o in &order {
            reordered.extend_from_slice(&weight[o * inputs..(o + 1) * inputs]);
        }
        if let Some(bias) = bias {
            let was = bias.to_vec();
            for (b, &o) in bias.iter_mut().zip(&order) {
                *b = was[o];
            }
        }
        Self::pack(&reordered, inputs, outputs)
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
        let mut data = Aligned::zeroed(layout.len() * 2 * TILE_VALUES);
        let runs = layout.runs(data.as_mut_slice(), 2 * TILE_VALUES);
        runs.into_par_iter().for_each(|(first, panel, run)| {
            for (tile, values) in run.chunks_exact_mut(TILE_VALUES).enumerate() {
                let (step, half) = (first + tile / 2, tile % 2);
                for n in 0..TILE_COLUMNS {
                    let col = panel * PANEL + half * TILE_COLUMNS + n;
                    if col >= outputs {
                        break;
                    }
                    let row = &weight[col * inputs..(col + 1) * inputs];
                    for i in 0..KSTEP {
                        let k = step * KSTEP + i;
                        if k >= inputs {
                            break;
                        }
                        values[(i / 2) * 2 * TILE_COLUMNS + 2 * n + i % 2] = to_bf16(row[k]);
                    }
                }
            }
        });
        Self {
            data,
            layout,
            inputs,
            outputs,
        }
    }

    /// Where `panel`'s k-steps of the chunk that starts at step `first`
    /// begin (in values of the buffer), and how many there are.
    fn run(&self, first: usize, panel: usize) -> (usize, usize) {
        let (at, len) = self.layout.run(first, panel);
        (at * 2 * TILE_VALUES, len)
    }
}

/// The stored output each packed column of a gated weight of `outputs`
/// holds: 32 gate columns, their 32 up columns, and so on.
fn gated_order(outputs: usize) -> Vec<usize> {
    let width = outputs / 2;
    (0..outputs)
        .map(|j| {
            let (pair, i) = (j / (2 * PANEL), j % (2 * PANEL));
            if i < PANEL {
                pair * PANEL + i
            } else {
                width + pair * PANEL + i - PANEL
            }
        })
        .collect()
}

/// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for `rows` rows, as
/// [`crate::bf16::matmul`] (the same arguments), on AMX tiles.
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

/// What runs the strips: the tile unit, or its portable model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Kernel {
    /// The `asm!` kernels (needs [`super::supported`]).
    Tiles,
    /// [`super::model`], on any CPU.
    Model,
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
    assert!(
        blocking.task_rows > 0
            && blocking.task_rows.is_multiple_of(STRIP)
            && blocking.group_panels > 0
    );
    assert_eq!(a.len(), rows * w.inputs, "a is not rows × inputs");
    let strips = Strips::rounded(a, rows, w.inputs);
    product_on(kernel, blocking, c, &strips, w, bias, residual, post);
}

/// Activations in bf16, laid out as the products read them: strips of 32
/// rows, in each its k-steps one after the other (32 rows of 32 values),
/// zero past the columns. [`matmul`] rounds its f32 input into them;
/// [`matmul_into`] writes its output as them, for the next product
/// ([`matmul_strips`]) to read without a pass over f32 activations.
#[derive(Debug)]
pub struct Strips {
    data: Aligned<u16>,
    rows: usize,
    cols: usize,
}

impl Default for Strips {
    fn default() -> Self {
        Self {
            data: Aligned::zeroed(0),
            rows: 0,
            cols: 0,
        }
    }
}

impl Strips {
    /// `rows` rows of `cols` values rounded to bf16 (nearest even).
    pub fn rounded(a: &[f32], rows: usize, cols: usize) -> Self {
        let mut strips = Self::default();
        strips.round(a, rows, cols);
        strips
    }

    /// Values per strip.
    fn strip_values(&self) -> usize {
        self.cols.div_ceil(KSTEP) * STRIP * KSTEP
    }

    /// Room for `rows` rows of `cols` values, zero past the columns: the
    /// buffer is kept where it holds them and `cols` is unchanged (the
    /// padding is then still zero), else a zeroed one is made.
    fn reshape(&mut self, rows: usize, cols: usize) {
        let needed = rows.div_ceil(STRIP) * cols.div_ceil(KSTEP) * STRIP * KSTEP;
        if cols != self.cols || self.data.as_slice().len() < needed {
            self.data = Aligned::zeroed(needed);
        }
        (self.rows, self.cols) = (rows, cols);
    }

    /// Rounds `rows` rows of `cols` values into these strips.
    pub fn round(&mut self, a: &[f32], rows: usize, cols: usize) {
        assert_eq!(a.len(), rows * cols, "a is not rows × cols");
        self.reshape(rows, cols);
        if rows == 0 {
            return;
        }
        let strip_values = self.strip_values();
        self.data.as_mut_slice()[..rows.div_ceil(STRIP) * strip_values]
            .par_chunks_mut(strip_values)
            .zip(a.par_chunks(STRIP * cols))
            .for_each(|(strip, rows)| {
                for (r, row) in rows.chunks_exact(cols).enumerate() {
                    round_into_strip(strip, row, r);
                }
            });
    }

    /// The values as f32, row-major (`rows × cols`).
    pub fn to_f32(&self) -> Vec<f32> {
        let (rows, cols, strip_values) = (self.rows, self.cols, self.strip_values());
        let data = self.data.as_slice();
        let mut out = vec![0.0f32; rows * cols];
        for (i, row) in out.chunks_exact_mut(cols.max(1)).enumerate().take(rows) {
            let (strip, r) = (i / STRIP, i % STRIP);
            for (k, x) in row.iter_mut().enumerate() {
                let at = strip * strip_values + (k / KSTEP) * STRIP * KSTEP + r * KSTEP + k % KSTEP;
                *x = f32::from_bits(u32::from(data[at]) << 16);
            }
        }
        out
    }

    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn cols(&self) -> usize {
        self.cols
    }
}

/// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for the rows of `a`,
/// already in bf16 strips (as [`matmul`], without rounding an f32 input).
pub fn matmul_strips(
    c: &mut [f32],
    a: &Strips,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    assert!(super::supported(), "AMX tiles are not usable here");
    let blocking = Blocking::for_product(a.rows, &w.layout);
    product_on(Kernel::Tiles, blocking, c, a, w, bias, residual, post);
}

/// [`matmul_strips`] on `kernel` with `blocking`.
#[allow(clippy::too_many_arguments)]
fn product_on(
    kernel: Kernel,
    blocking: Blocking,
    c: &mut [f32],
    a: &Strips,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    residual: Option<&[f32]>,
    post: Option<&Post>,
) {
    let (rows, outputs) = (a.rows, w.outputs);
    assert_eq!(a.cols, w.inputs, "a is not as wide as the weight's inputs");
    assert_eq!(c.len(), rows * outputs, "c is not rows × outputs");
    if rows == 0 {
        return;
    }
    let strip_values = a.strip_values();
    let a16 = a.data.as_slice();
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
                a: &a16[first / STRIP * strip_values..],
            };
            task.run(c, bias, residual);
        },
    );
}

/// What a product's sums go through before they are rounded into the next
/// product's strips ([`matmul_into`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// GELU (exact, or the tanh approximation), one value per output.
    Gelu { tanh: bool },
    /// A gated unit, `f(gate) · up`, on a weight packed by
    /// [`PackedWeight::pack_gated`] (its gate and up columns in pairs of
    /// panels): SwiGLU (`f` = SiLU) or GeGLU with GELU's tanh form.
    Gated { silu: bool },
}

impl Epilogue {
    /// Panels of sums per 32 values of output.
    fn panels(self) -> usize {
        match self {
            Self::Gelu { .. } => 1,
            Self::Gated { .. } => 2,
        }
    }

    /// Applies the epilogue to the sums of one row of a block (whole
    /// units) and returns its values of output (32 per unit): the sums
    /// themselves, in place, or `out`.
    fn apply<'a>(self, sums: &'a mut [f32], out: &'a mut [f32]) -> &'a [f32] {
        match self {
            Self::Gelu { tanh } => {
                crate::kernels::gelu(sums, tanh);
                sums
            }
            // Pairs of 32 gate and 32 up sums, one after the other.
            Self::Gated { silu } => {
                let gate = if silu {
                    crate::kernels::silu_mul
                } else {
                    crate::kernels::gelu_tanh_mul
                };
                gate(sums, out, PANEL);
                out
            }
        }
    }
}

/// `out = epilogue((bias or 0) + a · Wᵀ)` for the rows of `a`, rounded to
/// bf16 into strips, the layout the next product reads
/// ([`matmul_strips`]): each strip's sums go through a block of its own
/// (32 rows × a group's columns, in L1 or L2) and the epilogue, never
/// through f32 activations in memory. The same bits as [`matmul`] into f32
/// followed by the epilogue's function on each row and [`Strips::round`].
/// The outputs are a multiple of 32 (64 for a gated epilogue).
pub fn matmul_into(
    out: &mut Strips,
    a: &Strips,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    epilogue: Epilogue,
) {
    assert!(super::supported(), "AMX tiles are not usable here");
    let blocking = Blocking::for_product(a.rows, &w.layout);
    product_into_on(Kernel::Tiles, blocking, out, a, w, bias, epilogue);
}

/// Whether [`matmul_into`] takes a weight of `outputs` with `epilogue`.
pub fn fuses(outputs: usize, epilogue: Epilogue) -> bool {
    outputs > 0 && outputs.is_multiple_of(PANEL * epilogue.panels())
}

/// [`matmul_into`] on `kernel` with `blocking`.
pub(crate) fn product_into_on(
    kernel: Kernel,
    blocking: Blocking,
    out: &mut Strips,
    a: &Strips,
    w: &PackedWeight,
    bias: Option<&[f32]>,
    epilogue: Epilogue,
) {
    assert!(blocking.task_rows > 0 && blocking.task_rows.is_multiple_of(STRIP));
    assert_eq!(a.cols, w.inputs, "a is not as wide as the weight's inputs");
    assert!(fuses(w.outputs, epilogue), "outputs not in whole units");
    assert!(
        bias.is_none_or(|b| b.len() == w.outputs),
        "bias is not outputs wide"
    );
    let unit = epilogue.panels();
    let rows = a.rows;
    out.reshape(rows, w.outputs / unit);
    if rows == 0 {
        return;
    }
    // Groups of whole units.
    let group_panels = (blocking.group_panels / unit).max(1) * unit;
    let (a_values, out_values) = (a.strip_values(), out.strip_values());
    let task_strips = blocking.task_rows / STRIP;
    let a16 = a.data.as_slice();
    let strips = rows.div_ceil(STRIP);
    out.data.as_mut_slice()[..strips * out_values]
        .par_chunks_mut(task_strips * out_values)
        .enumerate()
        .for_each(|(t, out)| {
            let mut block = Aligned::<f32>::zeroed(STRIP * group_panels * PANEL);
            let block = block.as_mut_slice();
            let mut values = vec![0.0f32; group_panels / unit * PANEL];
            for group in (0..w.layout.panels).step_by(group_panels) {
                let panels = group_panels.min(w.layout.panels - group);
                let width = panels * PANEL;
                for (s, out) in out.chunks_exact_mut(out_values).enumerate() {
                    let strip = t * task_strips + s;
                    let m = (rows - strip * STRIP).min(STRIP);
                    let a = &a16[strip * a_values..(strip + 1) * a_values];
                    for chunk in (0..w.layout.steps).step_by(w.layout.chunk) {
                        let (at, steps) = w.run(chunk, group);
                        assert!(at + panels * steps * 2 * TILE_VALUES <= w.data.as_slice().len());
                        let a = &a[chunk * STRIP * KSTEP..];
                        assert!(steps * STRIP * KSTEP <= a.len(), "rows out of bounds");
                        let call = Strip {
                            config: &CONFIGS[m],
                            a: a.as_ptr(),
                            b: w.data.as_slice()[at..].as_ptr(),
                            panel_bytes: steps * 2 * TILE_VALUES * 2,
                            panels,
                            steps,
                            c: block.as_mut_ptr(),
                            ldc: width * 4,
                            accumulate: usize::from(chunk > 0),
                            bias: bias.map_or(std::ptr::null(), |b| b[group * PANEL..].as_ptr()),
                        };
                        // SAFETY: the strip holds `steps` k-steps from
                        // `chunk` and the group's panels hold them (both
                        // asserted), the block holds 32 rows of `width`
                        // columns, the bias (where there is one) the group's
                        // columns; the caller checked the kernel runs here.
                        unsafe { kernel.run(&call) };
                    }
                    let values = &mut values[..width / unit];
                    for r in 0..m {
                        let row = &mut block[r * width..(r + 1) * width];
                        let values = epilogue.apply(row, values);
                        for (u, values) in values.chunks_exact(PANEL).enumerate() {
                            let at = (group / unit + u) * STRIP * KSTEP + r * KSTEP;
                            round_row(&mut out[at..at + PANEL], values);
                        }
                    }
                }
            }
        });
}

/// One parallel task's rows.
struct Task<'a> {
    kernel: Kernel,
    blocking: Blocking,
    w: &'a PackedWeight,
    /// The task's strips of bf16 activations.
    a: &'a [u16],
}

impl Task<'_> {
    /// `c = (residual or 0) + (bias or 0) + a · Wᵀ` for the task's rows
    /// (`c.len() / outputs` of them): the tiles start from the bias (or
    /// zero) and store into C, whole panels straight into its rows, a last
    /// partial panel through a block of its own; the residual is added after.
    fn run(&self, c: &mut [f32], bias: Option<&[f32]>, residual: Option<&[f32]>) {
        let w = self.w;
        let outputs = w.outputs;
        let rows = c.len() / outputs;
        let strips = rows.div_ceil(STRIP);
        let group_panels = self.blocking.group_panels;
        let strip_values = w.layout.steps * STRIP * KSTEP;
        // Panels stored into C's rows; the last one where it is partial
        // goes through `tail` (32 columns per row, its bias zero-padded).
        let whole = outputs / PANEL;
        let mut tail = Aligned::<f32>::zeroed(if whole < w.layout.panels {
            strips * STRIP * PANEL
        } else {
            0
        });
        let mut tail_bias = [0.0f32; PANEL];
        if let Some(b) = bias {
            tail_bias[..outputs - whole * PANEL].copy_from_slice(&b[whole * PANEL..]);
        }
        for group in (0..w.layout.panels).step_by(group_panels) {
            let panels = group_panels.min(w.layout.panels - group);
            let stored = panels.min(whole.saturating_sub(group));
            for chunk in (0..w.layout.steps).step_by(w.layout.chunk) {
                let (at, steps) = w.run(chunk, group);
                let last = at + panels * steps * 2 * TILE_VALUES;
                assert!(last <= w.data.as_slice().len(), "panels out of bounds");
                for strip in 0..strips {
                    let first = strip * STRIP;
                    let m = (rows - first).min(STRIP);
                    let a = strip * strip_values + chunk * STRIP * KSTEP;
                    assert!(
                        a + steps * STRIP * KSTEP <= self.a.len(),
                        "rows out of bounds"
                    );
                    let call =
                        |panels: usize, b: usize, c: *mut f32, ldc: usize, bias: *const f32| {
                            Strip {
                                config: &CONFIGS[m],
                                a: self.a[a..].as_ptr(),
                                b: w.data.as_slice()[b..].as_ptr(),
                                panel_bytes: steps * 2 * TILE_VALUES * 2,
                                panels,
                                steps,
                                c,
                                ldc: ldc * 4,
                                accumulate: usize::from(chunk > 0),
                                bias,
                            }
                        };
                    if stored > 0 {
                        let c = &mut c[first * outputs + group * PANEL..];
                        assert!(c.len() >= (m - 1) * outputs + stored * PANEL);
                        let bias = bias.map_or(std::ptr::null(), |b| b[group * PANEL..].as_ptr());
                        let call = call(stored, at, c.as_mut_ptr(), outputs, bias);
                        // SAFETY: the strip holds `steps` k-steps from
                        // `chunk`, the group's panels hold them (both
                        // asserted above), C holds the strip's `m` rows of
                        // the stored panels' columns (asserted), and the
                        // bias, where there is one, those columns.
                        unsafe { self.kernel.run(&call) };
                    }
                    if group + panels > whole {
                        let (b, _) = w.run(chunk, whole);
                        let c = tail.as_mut_slice()[first * PANEL..].as_mut_ptr();
                        let bias = if bias.is_some() {
                            tail_bias.as_ptr()
                        } else {
                            std::ptr::null()
                        };
                        let call = call(1, b, c, PANEL, bias);
                        // SAFETY: as above; the tail holds the strip's 32
                        // rows of 32 columns, its bias 32 values.
                        unsafe { self.kernel.run(&call) };
                    }
                }
            }
        }
        if whole < w.layout.panels {
            let tail = tail.as_slice();
            for (r, row) in c.chunks_exact_mut(outputs).enumerate() {
                row[whole * PANEL..]
                    .copy_from_slice(&tail[r * PANEL..r * PANEL + outputs - whole * PANEL]);
            }
        }
        if let Some(residual) = residual {
            add_residual(c, residual);
        }
    }
}

/// Operands packed as B panels by the caller, for products a strip at a
/// time (attention's `Q·Kᵀ` and `P·V`): panel `p`'s k-step `s` is at
/// `(p·steps + s)·2·TILE_VALUES` (one chunk: each panel's steps contiguous).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Panels<'a> {
    pub(crate) data: &'a [u16],
    /// k-steps per panel.
    pub(crate) steps: usize,
}

/// Values a B panel layout of `outputs` × `inputs` holds (both padded).
pub(crate) fn panels_len(outputs: usize, inputs: usize) -> usize {
    outputs.div_ceil(PANEL) * inputs.div_ceil(KSTEP) * 2 * TILE_VALUES
}

/// `c[0..m][0..32·panels]` (`ldc` apart) = (c if `accumulate`) + the
/// strip's `m` rows × k-steps `0..steps` of `a` · panels `first..first +
/// panels` of `b` at their k-steps `from..from + steps`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn strip_times_panels(
    kernel: Kernel,
    a: &[u16],
    m: usize,
    steps: usize,
    b: Panels<'_>,
    first: usize,
    panels: usize,
    from: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    assert!((1..=STRIP).contains(&m) && steps > 0 && panels > 0);
    assert!(a.len() >= steps * STRIP * KSTEP, "strip out of bounds");
    assert!(from + steps <= b.steps, "k-steps out of bounds");
    let at = (first * b.steps + from) * 2 * TILE_VALUES;
    assert!(
        at + ((panels - 1) * b.steps + steps) * 2 * TILE_VALUES <= b.data.len(),
        "panels out of bounds"
    );
    assert!(c.len() >= (m - 1) * ldc + panels * PANEL, "c out of bounds");
    let call = Strip {
        config: &CONFIGS[m],
        a: a.as_ptr(),
        b: b.data[at..].as_ptr(),
        panel_bytes: b.steps * 2 * TILE_VALUES * 2,
        panels,
        steps,
        c: c.as_mut_ptr(),
        ldc: ldc * 4,
        accumulate: usize::from(accumulate),
        bias: std::ptr::null(),
    };
    // SAFETY: every operand's extent is asserted above; the caller checked
    // that the kernel runs here.
    unsafe { kernel.run(&call) };
}

/// Packs `rows` rows of `cols` values (row `i` at `src[i·stride..]`, `cols`
/// a multiple of 32, at most 256) as B panels whose outputs are the rows
/// (attention's keys: `Q·Kᵀ`), k-steps over the columns, into `dst`
/// ([`panels_len`]`(rows, cols)` values; the padding is zeroed here).
pub(crate) fn pack_rows(dst: &mut [u16], src: &[f32], stride: usize, rows: usize, cols: usize) {
    let steps = cols / KSTEP;
    assert!(cols.is_multiple_of(KSTEP) && cols <= 256);
    assert!(dst.len() >= panels_len(rows, cols));
    assert!(rows == 0 || src.len() >= (rows - 1) * stride + cols);
    // The last panel's keys past the end read as zero.
    if !rows.is_multiple_of(PANEL) {
        let last = rows / PANEL * steps * 2 * TILE_VALUES;
        dst[last..last + steps * 2 * TILE_VALUES].fill(0);
    }
    let mut row16 = [0u16; 256];
    for i in 0..rows {
        let (panel, half, n) = (i / PANEL, (i % PANEL) / TILE_COLUMNS, i % TILE_COLUMNS);
        round_row(&mut row16[..cols], &src[i * stride..i * stride + cols]);
        for step in 0..steps {
            let tile = ((panel * steps + step) * 2 + half) * TILE_VALUES + 2 * n;
            let pairs = &row16[step * KSTEP..(step + 1) * KSTEP];
            // Pair r of the row goes to pair-row r, column n.
            for (r, pair) in pairs.chunks_exact(2).enumerate() {
                let at = tile + r * 2 * TILE_COLUMNS;
                dst[at..at + 2].copy_from_slice(pair);
            }
        }
    }
}

/// Packs `rows` rows of `cols` values (row `i` at `src[i·stride..]`, `cols`
/// a multiple of 32, at most 256) as B panels whose outputs are the columns
/// (attention's values: `P·V`), k-steps over the rows, into `dst`
/// ([`panels_len`]`(cols, rows)` values; the padding is zeroed here).
pub(crate) fn pack_columns(dst: &mut [u16], src: &[f32], stride: usize, rows: usize, cols: usize) {
    let steps = rows.div_ceil(KSTEP);
    assert!(cols.is_multiple_of(KSTEP) && cols <= 256);
    assert!(dst.len() >= panels_len(cols, rows));
    assert!(rows == 0 || src.len() >= (rows - 1) * stride + cols);
    let (mut even, mut odd) = ([0u16; 256], [0u16; 256]);
    for pair in 0..steps * KSTEP / 2 {
        let (i, step, r) = (2 * pair, 2 * pair / KSTEP, pair % (KSTEP / 2));
        // Rows past the end read as zero.
        for (buf, row) in [(&mut even, i), (&mut odd, i + 1)] {
            if row < rows {
                round_row(&mut buf[..cols], &src[row * stride..row * stride + cols]);
            } else {
                buf[..cols].fill(0);
            }
        }
        for col in 0..cols {
            let (panel, half, n) = (
                col / PANEL,
                (col % PANEL) / TILE_COLUMNS,
                col % TILE_COLUMNS,
            );
            let at =
                ((panel * steps + step) * 2 + half) * TILE_VALUES + r * 2 * TILE_COLUMNS + 2 * n;
            dst[at] = even[col];
            dst[at + 1] = odd[col];
        }
    }
}

/// Rounds a row to bf16 (nearest even), as [`round_into_strip`] does.
fn round_row(dst: &mut [u16], row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::bf16::supported() {
        // SAFETY: the CPU has AVX-512 BF16; `dst` is at least as long.
        unsafe { crate::tile::round_row(dst, row) };
        return;
    }
    for (d, &x) in dst.iter_mut().zip(row) {
        *d = to_bf16(x);
    }
}

/// Rounds row `r` of a strip to bf16 (nearest even) into its place in the
/// strip's tiles (32 values per k-step; the values past the row's end stay
/// zero): `vcvtneps2bf16` where the CPU has AVX-512 BF16, else one value at
/// a time (the same values but for denormals, which the instruction
/// flushes).
pub(crate) fn round_into_strip(strip: &mut [u16], row: &[f32], r: usize) {
    assert!(r < STRIP && strip.len() >= row.len().div_ceil(KSTEP) * STRIP * KSTEP);
    #[cfg(target_arch = "x86_64")]
    if crate::bf16::supported() {
        // SAFETY: the CPU has AVX-512 BF16; the strip holds every k-step of
        // the row (asserted above).
        unsafe { round_into_strip_avx512(strip, row, r) };
        return;
    }
    for (step, values) in row.chunks(KSTEP).enumerate() {
        let at = step * STRIP * KSTEP + r * KSTEP;
        for (d, &x) in strip[at..at + values.len()].iter_mut().zip(values) {
            *d = to_bf16(x);
        }
    }
}

/// [`round_into_strip`] with `vcvtneps2bf16`, sixteen values at a time.
///
/// # Safety
/// The CPU has AVX-512 BF16; the strip holds every k-step of the row.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn round_into_strip_avx512(strip: &mut [u16], row: &[f32], r: usize) {
    use std::arch::x86_64::*;
    let n = row.len();
    let mut i = 0;
    while i < n {
        let mask = crate::tile::tail_mask(n - i);
        let at = (i / KSTEP) * STRIP * KSTEP + r * KSTEP + i % KSTEP;
        // SAFETY: the masked lanes are values i..min(i + 16, n) of the row
        // and their places in the strip (the caller's contract); bf16
        // vectors are 16-bit lanes, reinterpreted.
        unsafe {
            let x = _mm512_maskz_loadu_ps(mask, row.as_ptr().add(i));
            let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(x));
            _mm256_mask_storeu_epi16(strip.as_mut_ptr().add(at).cast(), mask, h);
        }
        i += 16;
    }
}

/// `c += residual`.
fn add_residual(c: &mut [f32], residual: &[f32]) {
    #[inline(always)]
    fn add(c: &mut [f32], residual: &[f32]) {
        for (x, &y) in c.iter_mut().zip(residual) {
            *x += y;
        }
    }
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f")]
        fn add512(c: &mut [f32], residual: &[f32]) {
            add(c, residual);
        }
        if crate::isa::avx512() {
            // SAFETY: the CPU has AVX-512F.
            unsafe { add512(c, residual) };
            return;
        }
    }
    add(c, residual);
}

/// One kernel call: a strip of up to 32 rows against `panels` panels, over
/// `steps` k-steps. Read by the assembly at fixed offsets (`repr(C)`, eight
/// bytes each, in this order).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Strip {
    /// The tile shapes for the strip's rows ([`CONFIGS`]).
    pub(crate) config: *const Config,
    /// The strip's activations at the chunk's first k-step: per step two A
    /// tiles of 1 KiB (rows 0–15, 16–31; 64 bytes a row).
    pub(crate) a: *const u16,
    /// The first panel's tiles at the chunk's first k-step: per step two B
    /// tiles of 1 KiB.
    pub(crate) b: *const u16,
    /// Bytes between panels.
    pub(crate) panel_bytes: usize,
    pub(crate) panels: usize,
    pub(crate) steps: usize,
    /// The strip's first row of C at the first panel's first column.
    pub(crate) c: *mut f32,
    /// Bytes between rows of C.
    pub(crate) ldc: usize,
    /// Non-zero: the sums start from C (a later chunk), else from the bias
    /// (or zero).
    pub(crate) accumulate: usize,
    /// The first panel's 32 biases (null: none), read into every row of the
    /// accumulators as they start (a tile load with a stride of zero).
    pub(crate) bias: *const f32,
}

/// The tile configuration of a strip of `m` rows (index `m`, 1 to 32):
/// tiles 0–1 accumulate the first 16 rows (two panels' halves), 2–3 the
/// rest; 4 and 5 hold their A rows, 6 and 7 the two B tiles.
pub(crate) static CONFIGS: [Config; STRIP + 1] = {
    let mut configs = [Config([0; 64]); STRIP + 1];
    let mut m = 1;
    while m <= STRIP {
        let top = if m < 16 { m } else { 16 } as u8;
        let rest = (m - top as usize) as u8;
        let (wide, rest_bytes) = (model::ROW_BYTES as u16, if rest > 0 { 64 } else { 0 });
        configs[m] = Config::new(
            [top, top, rest, rest, top, rest, 16, 16],
            [
                wide, wide, rest_bytes, rest_bytes, wide, rest_bytes, wide, wide,
            ],
        );
        m += 1;
    }
    configs
};

/// The tile product a strip call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// `tdpbf16ps`: bf16 pairs, f32 sums.
    Bf16,
    /// `tdpbssd`: signed bytes in groups of four, i32 sums.
    Int8,
}

impl Kernel {
    /// Runs one strip call of bf16 products.
    ///
    /// # Safety
    /// As [`Kernel::run_op`].
    unsafe fn run(self, s: &Strip) {
        // SAFETY: the caller's contract.
        unsafe { self.run_op(s, Op::Bf16) }
    }

    /// Runs one strip call of `op`'s products.
    ///
    /// # Safety
    /// `s` describes memory that holds what it says (rows of A and C, the
    /// panels' k-steps), `panels` and `steps` are at least 1, and for
    /// [`Kernel::Tiles`] the CPU runs AMX ([`super::supported`]).
    pub(crate) unsafe fn run_op(self, s: &Strip, op: Op) {
        debug_assert!(s.panels >= 1 && s.steps >= 1);
        // SAFETY: the caller's contract.
        let two = unsafe { (*s.config).rows(2) } > 0;
        match self {
            // SAFETY: the caller's contract.
            Self::Model => unsafe { strip_model(s, two, op) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the caller's contract.
            Self::Tiles => unsafe {
                match (op, two) {
                    (Op::Bf16, true) => strip2(s),
                    (Op::Bf16, false) => strip1(s),
                    (Op::Int8, true) => strip2_int8(s),
                    (Op::Int8, false) => strip1_int8(s),
                }
            },
            #[cfg(not(target_arch = "x86_64"))]
            Self::Tiles => unreachable!("AMX runs on x86_64 only"),
        }
    }
}

/// The strip kernel on the portable model, step for step as the assembly.
///
/// # Safety
/// As [`Kernel::run`].
unsafe fn strip_model(s: &Strip, two: bool, op: Op) {
    // SAFETY: the caller's contract.
    let mut unit = Unit::load_config(unsafe { &*s.config });
    let (mut b, mut c, mut bias) = (s.b.cast::<u8>(), s.c.cast::<u8>(), s.bias.cast::<u8>());
    for _ in 0..s.panels {
        // SAFETY: the caller's contract: 16 rows further is still inside C
        // where the strip has a second tile of rows.
        let c2 = unsafe { c.add(16 * s.ldc) };
        // SAFETY: the caller's contract (for all the loads and stores below).
        unsafe {
            if s.accumulate != 0 {
                unit.load(0, c, s.ldc);
                unit.load(1, c.add(64), s.ldc);
                if two {
                    unit.load(2, c2, s.ldc);
                    unit.load(3, c2.add(64), s.ldc);
                }
            } else if !bias.is_null() {
                unit.load(0, bias, 0);
                unit.load(1, bias.add(64), 0);
                if two {
                    unit.load(2, bias, 0);
                    unit.load(3, bias.add(64), 0);
                }
            } else {
                (0..4).for_each(|t| unit.zero(t));
            }
            let mut a = s.a.cast::<u8>();
            let mut bp = b;
            let product = |unit: &mut Unit, c, a, b| match op {
                Op::Bf16 => unit.dpbf16ps(c, a, b),
                Op::Int8 => unit.dp_int8(c, a, b, true),
            };
            for _ in 0..s.steps {
                unit.load(4, a, 64);
                unit.load(6, bp, 64);
                unit.load(7, bp.add(1024), 64);
                product(&mut unit, 0, 4, 6);
                product(&mut unit, 1, 4, 7);
                if two {
                    unit.load(5, a.add(1024), 64);
                    product(&mut unit, 2, 5, 6);
                    product(&mut unit, 3, 5, 7);
                }
                a = a.add(2048);
                bp = bp.add(2048);
            }
            unit.store(0, c, s.ldc);
            unit.store(1, c.add(64), s.ldc);
            if two {
                unit.store(2, c2, s.ldc);
                unit.store(3, c2.add(64), s.ldc);
            }
            b = b.add(s.panel_bytes);
            c = c.add(128);
            if !bias.is_null() {
                bias = bias.add(128);
            }
        }
    }
}

/// The strip kernels of one tile product instruction (`$op`: `tdpbf16ps`
/// for bf16, `tdpbssd` for int8; their operands' bytes are laid out alike:
/// 64 bytes of the shared dimension per A row, 16 groups of 4 bytes per B
/// row).
macro_rules! strip_kernels {
    ($two:ident, $one:ident, $op:literal) => {
        /// The strip kernel for 17 to 32 rows: a 2 × 2 block of accumulators.
        ///
        /// # Safety
        /// As [`Kernel::run`], on a CPU that runs AMX.
        #[cfg(target_arch = "x86_64")]
        unsafe fn $two(s: &Strip) {
            // SAFETY: the caller's contract; the block loads its own configuration
            // and releases the tiles before it ends.
            unsafe {
                std::arch::asm!(
                    "mov {x}, qword ptr [{s}]",
                    "ldtilecfg [{x}]",
                    "mov {b}, qword ptr [{s} + 16]",
                    "mov {n}, qword ptr [{s} + 32]",
                    "mov {c}, qword ptr [{s} + 48]",
                    "mov {ldc}, qword ptr [{s} + 56]",
                    "mov {bias}, qword ptr [{s} + 72]",
                    "xor {zero:e}, {zero:e}",
                    "mov {x}, 64",
                    // Each panel: the accumulators from C or zero, ...
                    "2:",
                    "lea {c2}, [{c} + {ldc}*8]",
                    "lea {c2}, [{c2} + {ldc}*8]",
                    "cmp qword ptr [{s} + 64], 0",
                    "je 4f",
                    "tileloadd tmm0, [{c} + {ldc}*1]",
                    "tileloadd tmm1, [{c} + {ldc}*1 + 64]",
                    "tileloadd tmm2, [{c2} + {ldc}*1]",
                    "tileloadd tmm3, [{c2} + {ldc}*1 + 64]",
                    "jmp 5f",
                    "4:",
                    "test {bias}, {bias}",
                    "jz 6f",
                    // The bias in every row: a stride of zero.
                    "tileloadd tmm0, [{bias} + {zero}*1]",
                    "tileloadd tmm1, [{bias} + {zero}*1 + 64]",
                    "tileloadd tmm2, [{bias} + {zero}*1]",
                    "tileloadd tmm3, [{bias} + {zero}*1 + 64]",
                    "jmp 5f",
                    "6:",
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "tilezero tmm2",
                    "tilezero tmm3",
                    // ... the k-steps: two A and two B tiles, four products, ...
                    "5:",
                    // Ask for the next panel's rows of C while this one computes
                    // (its stores would otherwise wait on their lines).
                    "lea {t}, [{c} + 128]",
                    "mov {k}, 32",
                    "8:",
                    "prefetchw [{t}]",
                    "prefetchw [{t} + 64]",
                    "add {t}, {ldc}",
                    "dec {k}",
                    "jnz 8b",
                    "mov {ap}, qword ptr [{s} + 8]",
                    "mov {bp}, {b}",
                    "mov {k}, qword ptr [{s} + 40]",
                    "3:",
                    "tileloadd tmm4, [{ap} + {x}*1]",
                    "tileloadd tmm6, [{bp} + {x}*1]",
                    "tileloadd tmm7, [{bp} + {x}*1 + 1024]",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    concat!($op, " tmm1, tmm4, tmm7"),
                    "tileloadd tmm5, [{ap} + {x}*1 + 1024]",
                    concat!($op, " tmm2, tmm5, tmm6"),
                    concat!($op, " tmm3, tmm5, tmm7"),
                    "add {ap}, 2048",
                    "add {bp}, 2048",
                    "dec {k}",
                    "jnz 3b",
                    // ... and the sums back to C.
                    "tilestored [{c} + {ldc}*1], tmm0",
                    "tilestored [{c} + {ldc}*1 + 64], tmm1",
                    "tilestored [{c2} + {ldc}*1], tmm2",
                    "tilestored [{c2} + {ldc}*1 + 64], tmm3",
                    "add {b}, qword ptr [{s} + 24]",
                    "add {c}, 128",
                    // The next panel's biases (none stays none).
                    "test {bias}, {bias}",
                    "jz 7f",
                    "add {bias}, 128",
                    "7:",
                    "dec {n}",
                    "jnz 2b",
                    "tilerelease",
                    s = in(reg) s as *const Strip,
                    x = out(reg) _,
                    b = out(reg) _,
                    n = out(reg) _,
                    c = out(reg) _,
                    c2 = out(reg) _,
                    ldc = out(reg) _,
                    ap = out(reg) _,
                    bp = out(reg) _,
                    k = out(reg) _,
                    bias = out(reg) _,
                    zero = out(reg) _,
                    t = out(reg) _,
                    out("tmm0") _,
                    out("tmm1") _,
                    out("tmm2") _,
                    out("tmm3") _,
                    out("tmm4") _,
                    out("tmm5") _,
                    out("tmm6") _,
                    out("tmm7") _,
                    options(nostack),
                );
            }
        }

        /// The strip kernel for 1 to 16 rows: one row of two accumulators.
        ///
        /// # Safety
        /// As [`Kernel::run`], on a CPU that runs AMX.
        #[cfg(target_arch = "x86_64")]
        unsafe fn $one(s: &Strip) {
            // SAFETY: as the kernel for 17 to 32 rows.
            unsafe {
                std::arch::asm!(
                    "mov {x}, qword ptr [{s}]",
                    "ldtilecfg [{x}]",
                    "mov {b}, qword ptr [{s} + 16]",
                    "mov {n}, qword ptr [{s} + 32]",
                    "mov {c}, qword ptr [{s} + 48]",
                    "mov {ldc}, qword ptr [{s} + 56]",
                    "mov {bias}, qword ptr [{s} + 72]",
                    "xor {zero:e}, {zero:e}",
                    "mov {x}, 64",
                    "2:",
                    "cmp qword ptr [{s} + 64], 0",
                    "je 4f",
                    "tileloadd tmm0, [{c} + {ldc}*1]",
                    "tileloadd tmm1, [{c} + {ldc}*1 + 64]",
                    "jmp 5f",
                    "4:",
                    "test {bias}, {bias}",
                    "jz 6f",
                    "tileloadd tmm0, [{bias} + {zero}*1]",
                    "tileloadd tmm1, [{bias} + {zero}*1 + 64]",
                    "jmp 5f",
                    "6:",
                    "tilezero tmm0",
                    "tilezero tmm1",
                    "5:",
                    // Ask for the next panel's rows of C while this one computes
                    // (its stores would otherwise wait on their lines).
                    "lea {t}, [{c} + 128]",
                    "mov {k}, 16",
                    "8:",
                    "prefetchw [{t}]",
                    "prefetchw [{t} + 64]",
                    "add {t}, {ldc}",
                    "dec {k}",
                    "jnz 8b",
                    "mov {ap}, qword ptr [{s} + 8]",
                    "mov {bp}, {b}",
                    "mov {k}, qword ptr [{s} + 40]",
                    "3:",
                    "tileloadd tmm4, [{ap} + {x}*1]",
                    "tileloadd tmm6, [{bp} + {x}*1]",
                    "tileloadd tmm7, [{bp} + {x}*1 + 1024]",
                    concat!($op, " tmm0, tmm4, tmm6"),
                    concat!($op, " tmm1, tmm4, tmm7"),
                    "add {ap}, 2048",
                    "add {bp}, 2048",
                    "dec {k}",
                    "jnz 3b",
                    "tilestored [{c} + {ldc}*1], tmm0",
                    "tilestored [{c} + {ldc}*1 + 64], tmm1",
                    "add {b}, qword ptr [{s} + 24]",
                    "add {c}, 128",
                    // The next panel's biases (none stays none).
                    "test {bias}, {bias}",
                    "jz 7f",
                    "add {bias}, 128",
                    "7:",
                    "dec {n}",
                    "jnz 2b",
                    "tilerelease",
                    s = in(reg) s as *const Strip,
                    x = out(reg) _,
                    b = out(reg) _,
                    n = out(reg) _,
                    c = out(reg) _,
                    ldc = out(reg) _,
                    ap = out(reg) _,
                    bp = out(reg) _,
                    k = out(reg) _,
                    bias = out(reg) _,
                    zero = out(reg) _,
                    t = out(reg) _,
                    out("tmm0") _,
                    out("tmm1") _,
                    out("tmm4") _,
                    out("tmm6") _,
                    out("tmm7") _,
                    options(nostack),
                );
            }
        }
    };
}

strip_kernels!(strip2, strip1, "tdpbf16ps");
strip_kernels!(strip2_int8, strip1_int8, "tdpbssd");

#[cfg(test)]
mod tests {
    use super::*;

    /// A product with values that make every partial sum exact (small
    /// integers and halves), against the definition.
    fn exact_case(rows: usize, inputs: usize, outputs: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let a: Vec<f32> = (0..rows * inputs)
            .map(|i| ((i * 7919 + 3) % 9) as f32 - 4.0)
            .collect();
        let w: Vec<f32> = (0..outputs * inputs)
            .map(|i| (((i * 104_729 + 11) % 7) as f32 - 3.0) * 0.5)
            .collect();
        let want: Vec<f32> = (0..rows * outputs)
            .map(|i| {
                let (r, o) = (i / outputs, i % outputs);
                (0..inputs)
                    .map(|k| a[r * inputs + k] * w[o * inputs + k])
                    .sum::<f32>()
            })
            .collect();
        (a, w, want)
    }

    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 3, 5),
        (7, 33, 70),
        (16, 64, 32),
        (17, 64, 33),
        (40, 100, 96),
        (95, 384, 130),
        (200, 96, 64),
    ];

    /// Small blockings, so that every path (several tasks, chunks, groups,
    /// partial strips and panels) runs on small shapes.
    const BLOCKINGS: &[Blocking] = &[
        Blocking::DEFAULT,
        Blocking {
            task_rows: 32,
            group_panels: 1,
        },
        Blocking {
            task_rows: 64,
            group_panels: 2,
        },
    ];

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

    #[test]
    fn the_portable_model_computes_the_product_for_every_blocking() {
        for &(rows, inputs, outputs) in SHAPES {
            let (a, w, want) = exact_case(rows, inputs, outputs);
            for chunk in [CHUNK_STEPS, 1, 2] {
                let packed = PackedWeight::pack_in_chunks(&w, inputs, outputs, chunk);
                for &blocking in BLOCKINGS
                    .iter()
                    .chain(&[Blocking::for_product(rows, &packed.layout)])
                {
                    let got = product(Kernel::Model, blocking, &a, &packed, rows);
                    assert_eq!(
                        got, want,
                        "{rows}x{inputs}x{outputs} {blocking:?} chunk {chunk}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_large_product_has_a_task_per_thread_and_a_small_one_the_default() {
        let threads = rayon::current_num_threads();
        let layout = Layout::new(64, CHUNK_STEPS, 64);
        assert_eq!(Blocking::for_product(1, &layout), Blocking::DEFAULT);
        assert_eq!(Blocking::for_product(128, &layout), Blocking::DEFAULT);
        let big = Blocking::for_product(4096, &layout);
        assert!(big.task_rows.is_multiple_of(STRIP) && big.task_rows >= 128);
        assert!(big.task_rows * threads >= 4096);
        if 4096usize.div_ceil(threads) > 128 {
            assert!((big.task_rows - STRIP) * threads < 4096);
        }
        assert_eq!(big.group_panels, Blocking::DEFAULT.group_panels);
    }

    #[test]
    fn groups_of_panels_hold_at_most_a_mebibyte_of_the_weight_and_are_even() {
        // 2 KiB a panel per k-step: 1,024 inputs (32 steps) → 16 panels a
        // group, 3,072 (96) → 5, 1,536 (48) → 10, evened out over the
        // panels; a chunk past 1 MiB → one panel.
        for (steps, panels, group) in [
            (1, 100, 100),
            (12, 36, 36),
            (12, 48, 24),
            (32, 96, 16),
            (32, 64, 16),
            (96, 32, 5),
            (48, 12, 6),
            (1024, 3, 1),
        ] {
            let layout = Layout::new(steps, steps, panels);
            let blocking = Blocking::for_product(64, &layout);
            assert_eq!(
                blocking.group_panels, group,
                "{steps} steps, {panels} panels"
            );
            assert!(group == 1 || group * steps * 2 * TILE_VALUES * 2 <= GROUP_BYTES);
        }
        // The engine's packing: one chunk of the whole shared dimension.
        let w = PackedWeight::pack(&vec![0.0; 100 * 1000], 1000, 100);
        assert_eq!((w.layout.chunk, w.layout.steps), (32, 32));
    }

    /// `matmul` into f32, the epilogue's function on each row (the gated
    /// ones on the weight as stored: gate then up), then rounding: what
    /// `matmul_into` must equal, bit for bit.
    #[allow(clippy::too_many_arguments)]
    fn unfused(
        kernel: Kernel,
        a: &[f32],
        rows: usize,
        w: &[f32],
        bias: Option<&[f32]>,
        inputs: usize,
        outputs: usize,
        epilogue: Epilogue,
    ) -> Vec<f32> {
        let packed = PackedWeight::pack(w, inputs, outputs);
        let mut c = vec![f32::NAN; rows * outputs];
        let blocking = Blocking::for_product(rows, &packed.layout);
        matmul_on(kernel, blocking, &mut c, a, rows, &packed, bias, None, None);
        let act = match epilogue {
            Epilogue::Gelu { tanh } => {
                c.chunks_exact_mut(outputs)
                    .for_each(|row| crate::kernels::gelu(row, tanh));
                c
            }
            Epilogue::Gated { silu } => {
                let mut out = vec![0.0; rows * outputs / 2];
                if silu {
                    crate::kernels::silu_mul(&c, &mut out, outputs / 2);
                } else {
                    crate::kernels::gelu_tanh_mul(&c, &mut out, outputs / 2);
                }
                out
            }
        };
        Strips::rounded(&act, rows, outputs / epilogue.panels()).to_f32()
    }

    #[test]
    fn a_product_into_strips_equals_the_product_its_epilogue_and_rounding() {
        let kernels: &[Kernel] = if super::super::supported() {
            &[Kernel::Model, Kernel::Tiles]
        } else {
            &[Kernel::Model]
        };
        let epilogues = [
            Epilogue::Gelu { tanh: false },
            Epilogue::Gelu { tanh: true },
            Epilogue::Gated { silu: true },
            Epilogue::Gated { silu: false },
        ];
        for &kernel in kernels {
            for (rows, inputs, outputs) in
                [(1, 33, 64), (17, 64, 128), (40, 100, 192), (95, 384, 256)]
            {
                let a: Vec<f32> = (0..rows * inputs)
                    .map(|i| ((i * 7919) % 97) as f32 / 25.0 - 2.0)
                    .collect();
                let w: Vec<f32> = (0..outputs * inputs)
                    .map(|i| ((i * 104_729) % 89) as f32 / 90.0 - 0.5)
                    .collect();
                let bias: Vec<f32> = (0..outputs).map(|o| (o % 13) as f32 / 8.0 - 0.7).collect();
                let strips = Strips::rounded(&a, rows, inputs);
                for epilogue in epilogues {
                    for bias in [None, Some(bias.as_slice())] {
                        let want = unfused(kernel, &a, rows, &w, bias, inputs, outputs, epilogue);
                        let (packed, bias) = match epilogue {
                            Epilogue::Gelu { .. } => (
                                PackedWeight::pack(&w, inputs, outputs),
                                bias.map(<[f32]>::to_vec),
                            ),
                            Epilogue::Gated { .. } => {
                                let mut bias = bias.map(<[f32]>::to_vec);
                                let packed = PackedWeight::pack_gated(
                                    &w,
                                    bias.as_deref_mut(),
                                    inputs,
                                    outputs,
                                );
                                (packed, bias)
                            }
                        };
                        let layout = packed.layout;
                        let blockings = [
                            Blocking::for_product(rows, &layout),
                            Blocking {
                                task_rows: 32,
                                group_panels: 1,
                            },
                            Blocking {
                                task_rows: 64,
                                group_panels: 3,
                            },
                        ];
                        for blocking in blockings {
                            let mut out = Strips::default();
                            product_into_on(
                                kernel,
                                blocking,
                                &mut out,
                                &strips,
                                &packed,
                                bias.as_deref(),
                                epilogue,
                            );
                            let got = out.to_f32();
                            assert_eq!(
                                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                                want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                                "{kernel:?} {rows}x{inputs}x{outputs} {epilogue:?} bias {} {blocking:?}",
                                bias.is_some()
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_product_from_strips_equals_one_from_f32() {
        let (rows, inputs, outputs) = (70, 100, 96);
        let (a, w, want) = exact_case(rows, inputs, outputs);
        let packed = PackedWeight::pack_in_chunks(&w, inputs, outputs, 1);
        let strips = Strips::rounded(&a, rows, inputs);
        let mut c = vec![f32::NAN; rows * outputs];
        let blocking = Blocking::for_product(rows, &packed.layout);
        product_on(
            Kernel::Model,
            blocking,
            &mut c,
            &strips,
            &packed,
            None,
            None,
            None,
        );
        assert_eq!(c, want);
        // Strips are reused: a smaller batch of the same width keeps them.
        let mut again = Strips::rounded(&a, rows, inputs);
        again.round(&a[..10 * inputs], 10, inputs);
        assert_eq!(again.to_f32(), a[..10 * inputs]);
    }

    #[test]
    fn bias_residual_and_post_are_applied_once() {
        let (rows, inputs, outputs) = (70, 40, 50);
        let (a, w, want) = exact_case(rows, inputs, outputs);
        let packed = PackedWeight::pack_in_chunks(&w, inputs, outputs, 1);
        let bias: Vec<f32> = (0..outputs).map(|o| o as f32).collect();
        let residual: Vec<f32> = (0..rows * outputs).map(|i| (i % 5) as f32).collect();
        let post = |rows: &mut [f32]| rows.iter_mut().for_each(|x| *x *= 2.0);
        for &blocking in BLOCKINGS {
            let mut c = vec![f32::NAN; rows * outputs];
            matmul_on(
                Kernel::Model,
                blocking,
                &mut c,
                &a,
                rows,
                &packed,
                Some(&bias),
                Some(&residual),
                Some(&post),
            );
            for (i, (&got, &p)) in c.iter().zip(&want).enumerate() {
                let expected = 2.0 * (p + bias[i % outputs] + residual[i]);
                assert_eq!(got, expected, "{blocking:?} at {i}");
            }
        }
    }

    #[test]
    fn the_tile_kernels_match_the_model() {
        if !super::super::supported() {
            eprintln!("skipping: AMX is not usable here (the model's tests ran)");
            return;
        }
        for &(rows, inputs, outputs) in SHAPES {
            let (a, w, want) = exact_case(rows, inputs, outputs);
            for chunk in [CHUNK_STEPS, 1, 2] {
                let packed = PackedWeight::pack_in_chunks(&w, inputs, outputs, chunk);
                for &blocking in BLOCKINGS {
                    let got = product(Kernel::Tiles, blocking, &a, &packed, rows);
                    assert_eq!(
                        got, want,
                        "exact {rows}x{inputs}x{outputs} {blocking:?} chunk {chunk}"
                    );
                }
            }
            // Values whose sums round: the tiles against the model, and both
            // against f64 within bf16's rounding of the inputs.
            let a: Vec<f32> = (0..rows * inputs)
                .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
                .collect();
            let w: Vec<f32> = (0..outputs * inputs)
                .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
                .collect();
            let packed = PackedWeight::pack(&w, inputs, outputs);
            let tiles = product(Kernel::Tiles, Blocking::DEFAULT, &a, &packed, rows);
            let model = product(Kernel::Model, Blocking::DEFAULT, &a, &packed, rows);
            for (i, (&t, &m)) in tiles.iter().zip(&model).enumerate() {
                let (r, o) = (i / outputs, i % outputs);
                let scale: f64 = (0..inputs)
                    .map(|k| f64::from(a[r * inputs + k] * w[o * inputs + k]).abs())
                    .sum::<f64>()
                    .max(1.0);
                let exact: f64 = (0..inputs)
                    .map(|k| f64::from(a[r * inputs + k]) * f64::from(w[o * inputs + k]))
                    .sum();
                assert!(
                    f64::from((t - m).abs()) <= 1e-5 * scale,
                    "{rows}x{inputs}x{outputs} [{r},{o}]: tiles {t}, model {m}"
                );
                assert!(
                    (f64::from(t) - exact).abs() <= 2e-2 * scale,
                    "{rows}x{inputs}x{outputs} [{r},{o}]: tiles {t}, exact {exact}"
                );
            }
        }
    }

    #[test]
    fn a_rows_bits_do_not_depend_on_the_batch() {
        if !super::super::supported() {
            eprintln!("skipping: AMX is not usable here");
            return;
        }
        let (inputs, outputs) = (384, 96);
        let a: Vec<f32> = (0..100 * inputs)
            .map(|i| ((i * 7919) % 97) as f32 / 50.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..outputs * inputs)
            .map(|i| ((i * 104_729) % 89) as f32 / 45.0 - 1.0)
            .collect();
        let packed = PackedWeight::pack(&w, inputs, outputs);
        let all = product(Kernel::Tiles, Blocking::DEFAULT, &a, &packed, 100);
        // The engine's own blocking (a task per thread on a large product)
        // gives the same bits as the default's tasks of 128 rows.
        let many: Vec<f32> = a.iter().cycle().take(20 * a.len()).copied().collect();
        let mut big = vec![f32::NAN; 2000 * outputs];
        matmul(&mut big, &many, 2000, &packed, None, None, None);
        for rows in big.chunks_exact(100 * outputs) {
            assert_eq!(
                rows.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                all.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                "Blocking::for_product(2000, …)"
            );
        }
        for (from, rows) in [(0, 1), (37, 1), (5, 17), (60, 40)] {
            let part = &a[from * inputs..(from + rows) * inputs];
            let got = product(Kernel::Tiles, Blocking::DEFAULT, part, &packed, rows);
            assert_eq!(
                got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                all[from * outputs..(from + rows) * outputs]
                    .iter()
                    .map(|x| x.to_bits())
                    .collect::<Vec<_>>(),
                "rows {from}..{}",
                from + rows
            );
        }
    }
}
