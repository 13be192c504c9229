//! Self-attention over unpadded batches, tiled with an online softmax (as
//! flash attention does), so memory grows linearly with the length: no
//! `len × len` score matrix is ever held, only one `QUERY_BLOCK × KEY_BLOCK`
//! tile per task.
//!
//! One kernel serves every family: bidirectional (BERT) or causal (decoders),
//! and grouped-query attention (several query heads share one key/value
//! head). Queries are read in place from the rows of the fused QKV product;
//! the fast path copies keys and values out once per sequence and head.

use rayon::prelude::*;

use crate::kernels::{self, matmul};
use crate::tile::View;

/// Query rows of a tile.
const QUERY_BLOCK: usize = 64;
/// Key rows of a tile.
const KEY_BLOCK: usize = 512;
// Every query of a task finds its first key in the task's first key block
// (`Task::keys` rounds the start down by at most 15).
const _: () = assert!(fast::KEYS > QUERY_BLOCK + 16 && KEY_BLOCK > QUERY_BLOCK + 16);

/// The heads of an attention layer.
#[derive(Debug, Clone, Copy)]
pub struct Heads {
    /// Query heads.
    pub query: usize,
    /// Key/value heads (`query` is a multiple of it).
    pub kv: usize,
    /// Width of one head.
    pub dim: usize,
    /// Whether token t sees only tokens ≤ t (decoders).
    pub causal: bool,
    /// A sliding window of `w`: token t sees tokens within `w − 1` of it
    /// (`t − w < j`, and `j < t + w` where not causal), as transformers'
    /// sliding-window masks do.
    pub window: Option<usize>,
    /// The factor of `Q·Kᵀ` (`1/√dim` unless the model says otherwise).
    pub scale: f32,
    /// Whether `Q·Kᵀ` and `P·V` may run in bf16 with f32 sums (on AMX
    /// tiles, where the `amx` level is active and the head width is a
    /// multiple of 32): the models whose products run in bf16 or int8 say
    /// so; the softmax stays f32.
    pub bf16: bool,
}

impl Heads {
    /// Heads of width `dim` with the usual scale, no window.
    pub fn new(query: usize, kv: usize, dim: usize, causal: bool) -> Self {
        Self {
            query,
            kv,
            dim,
            causal,
            window: None,
            scale: 1.0 / (dim as f32).sqrt(),
            bf16: false,
        }
    }

    /// The keys `lo..hi` that the query at position `i` of a sequence of
    /// `len` tokens sees.
    pub fn span(&self, i: usize, len: usize) -> (usize, usize) {
        let hi = if self.causal { i + 1 } else { len };
        match self.window {
            None => (0, hi),
            Some(w) => ((i + 1).saturating_sub(w), hi.min(i + w)),
        }
    }
}

/// Where Q, K and V sit in each row of the fused projection.
#[derive(Debug, Clone, Copy)]
pub struct QkvLayout {
    /// Width of a row (`(query + 2·kv)·dim` for a fused QKV product).
    pub stride: usize,
    /// Column of Q's first head.
    pub q: usize,
    /// Column of K's first head.
    pub k: usize,
    /// Column of V's first head.
    pub v: usize,
}

impl QkvLayout {
    /// Q, K and V side by side, as a fused projection lays them out.
    pub fn fused(heads: Heads) -> Self {
        let q = heads.query * heads.dim;
        let kv = heads.kv * heads.dim;
        Self {
            stride: q + 2 * kv,
            q: 0,
            k: q,
            v: q + kv,
        }
    }
}

/// `out = softmax(scale·Q·Kᵀ [+ causal or window mask])·V` for every sequence
/// and head.
///
/// `lengths` are the sequences laid end to end in `qkv` (rows of
/// `layout.stride`) and in `out` (rows of `query·dim`, head after head).
///
/// `packed` holds the keys and values the fast path packs: reused from one
/// call to the next, it saves fresh allocations.
///
/// With `picks`, only one query per sequence, at position `picks[s]` of
/// sequence `s` (the row a CLS or last-token pooling keeps): `out` then holds
/// one row per sequence, the same values as that row of the full output.
pub fn attention(
    heads: Heads,
    lengths: &[usize],
    picks: Option<&[usize]>,
    qkv: &[f32],
    layout: QkvLayout,
    out: &mut [f32],
    packed: &mut Packed,
) {
    let path = if heads.bf16 && tiles::supported(heads.dim) {
        Path::Tiles(crate::amx::bf16::Kernel::Tiles)
    } else if fast::supported(heads.dim) {
        Path::Fast
    } else {
        Path::Gemm
    };
    run(heads, lengths, qkv, layout, out, packed, picks, path);
}

/// How a task computes its queries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `gemm` products of query blocks against key blocks.
    Gemm,
    /// The register-blocked AVX-512 / AVX2 kernels ([`fast`]).
    Fast,
    /// bf16 tile products ([`tiles`]) on the tile unit or its model.
    Tiles(crate::amx::bf16::Kernel),
}

pub use fast::Packed;

#[allow(clippy::too_many_arguments)]
fn run(
    heads: Heads,
    lengths: &[usize],
    qkv: &[f32],
    layout: QkvLayout,
    out: &mut [f32],
    packed: &mut Packed,
    picks: Option<&[usize]>,
    path: Path,
) {
    let width = heads.query * heads.dim;
    assert!(heads.kv > 0 && heads.query.is_multiple_of(heads.kv));
    if let Some(picks) = picks {
        assert_eq!(picks.len(), lengths.len(), "one pick per sequence");
        assert!(
            picks.iter().zip(lengths).all(|(&p, &len)| p < len),
            "a pick past its sequence"
        );
    }
    let total: usize = lengths.iter().sum();
    let rows = picks.map_or(total, <[usize]>::len);
    assert!(qkv.len() >= total * layout.stride && out.len() >= rows * width);
    // Tasks own disjoint row ranges of `out`: one block of queries of one
    // sequence, every head.
    // The fast path reads keys (in blocks of 16) and values packed once per
    // sequence and key/value head, shared by every task of the sequence.
    match path {
        Path::Fast => packed.fill(heads, lengths, qkv, layout),
        Path::Tiles(_) => packed.tiles.fill(heads, lengths, qkv, layout),
        Path::Gemm => {}
    }
    let packed = &*packed;
    let mut tasks = Vec::new();
    let mut rest = &mut out[..rows * width];
    let mut start = 0;
    for (s, &len) in lengths.iter().enumerate() {
        // Blocks of queries from `first` up to `end`: all of them, or the pick.
        let (mut first, end) = picks.map_or((0, len), |p| (p[s], p[s] + 1));
        while first < end {
            let rows = (end - first).min(QUERY_BLOCK);
            let (mine, tail) = rest.split_at_mut(rows * width);
            tasks.push(Task {
                sequence: start,
                index: s,
                len,
                first,
                rows,
                out: mine,
            });
            rest = tail;
            first += rows;
        }
        start += len;
    }
    tasks
        .into_par_iter()
        .for_each_init(Scratch::default, |scratch, task| match path {
            Path::Fast => task.run_fast(heads, qkv, layout, packed, scratch),
            Path::Gemm => task.run_gemm(heads, qkv, layout, scratch),
            Path::Tiles(kernel) => task.run_tiles(heads, qkv, layout, &packed.tiles, kernel),
        });
}

#[derive(Default)]
struct Scratch {
    scores: Vec<f32>,
    max: Vec<f32>,
    sum: Vec<f32>,
    alpha: Vec<f32>,
}

struct Task<'a> {
    /// Row of the sequence's first token.
    sequence: usize,
    /// The sequence's index in the batch.
    index: usize,
    len: usize,
    /// Position of the block's first query in its sequence.
    first: usize,
    rows: usize,
    out: &'a mut [f32],
}

impl Task<'_> {
    /// Through `gemm` products of each query block against key blocks.
    fn run_gemm(self, heads: Heads, qkv: &[f32], layout: QkvLayout, scratch: &mut Scratch) {
        let d = heads.dim;
        let width = heads.query * d;
        let group = heads.query / heads.kv;
        let scale = heads.scale;
        let stride = layout.stride;
        // Keys this block sees: from its first query's first key to its
        // last query's last.
        let (start, keys) = self.keys(heads);
        let key_block = (keys - start).min(KEY_BLOCK);
        scratch.scores.resize(self.rows * key_block, 0.0);
        let seq = &qkv[self.sequence * stride..(self.sequence + self.len) * stride];
        self.out.fill(0.0);
        for head in 0..heads.query {
            let kv_head = head / group;
            let q = View::rows(
                &seq[self.first * stride + layout.q + head * d..],
                self.rows,
                d,
                stride,
            );
            let out = &mut self.out[head * d..];
            scratch.max.clear();
            scratch.max.resize(self.rows, f32::NEG_INFINITY);
            scratch.sum.clear();
            scratch.sum.resize(self.rows, 0.0);
            scratch.alpha.resize(self.rows, 1.0);
            let mut k0 = start;
            while k0 < keys {
                let n = (keys - k0).min(key_block);
                let scores = &mut scratch.scores[..self.rows * n];
                let k =
                    View::transposed(&seq[k0 * stride + layout.k + kv_head * d..], d, n, stride);
                matmul(scores, n, q, k, false, false);
                for (r, row) in scores.chunks_exact_mut(n).enumerate() {
                    scratch.alpha[r] = softmax_row(
                        heads.span(self.first + r, self.len),
                        row,
                        k0,
                        scale,
                        &mut scratch.max[r],
                        &mut scratch.sum[r],
                    );
                }
                if k0 > start {
                    kernels::scale_rows(out, width, d, &scratch.alpha[..self.rows]);
                }
                let v = View::rows(&seq[k0 * stride + layout.v + kv_head * d..], n, d, stride);
                matmul(
                    out,
                    width,
                    View::rows(scores, self.rows, n, n),
                    v,
                    true,
                    false,
                );
                k0 += n;
            }
            for s in &mut scratch.sum[..self.rows] {
                *s = 1.0 / *s;
            }
            kernels::scale_rows(out, width, d, &scratch.sum[..self.rows]);
        }
    }

    /// The keys the task's queries see, from the first one's first key
    /// (rounded down to a multiple of 16, where packed key blocks start) to
    /// the last one's last.
    fn keys(&self, heads: Heads) -> (usize, usize) {
        let lo = heads.span(self.first, self.len).0;
        let hi = heads.span(self.first + self.rows - 1, self.len).1;
        (lo / 16 * 16, hi)
    }
}

/// The online softmax of one row of scores against keys `k0..`, those
/// outside the query's span `lo..hi` masked (weight 0); returns the factor
/// of the row's earlier sums.
fn softmax_row(
    (lo, hi): (usize, usize),
    row: &mut [f32],
    k0: usize,
    scale: f32,
    max: &mut f32,
    sum: &mut f32,
) -> f32 {
    let n = row.len();
    let (from, to) = (lo.saturating_sub(k0).min(n), hi.saturating_sub(k0).min(n));
    if from >= to {
        row.fill(0.0);
        return 1.0;
    }
    row[..from].fill(0.0);
    kernels::online_softmax(&mut row[from..], to - from, scale, max, sum)
}

impl Task<'_> {
    /// The AVX-512 path, flash-attention order: for each key/value head,
    /// each block of [`fast::KEYS`] keys (packed once per sequence, read
    /// from L2) is applied to every query of the task — tiles of
    /// [`fast::MR`] rows of each head of the group, register-blocked `Q·Kᵀ`
    /// and `P·V` kernels around the online softmax, whose running maxima and
    /// sums are kept per row and head.
    fn run_fast(
        self,
        heads: Heads,
        qkv: &[f32],
        layout: QkvLayout,
        packed: &fast::Packed,
        scratch: &mut Scratch,
    ) {
        use fast::{KEYS, MR};
        let d = heads.dim;
        let width = heads.query * d;
        let group = heads.query / heads.kv;
        let scale = heads.scale;
        let stride = layout.stride;
        let (start, keys) = self.keys(heads);
        let seq = &qkv[self.sequence * stride..(self.sequence + self.len) * stride];
        let states = self.rows * heads.query;
        scratch.scores.resize(MR * KEYS, 0.0);
        scratch.max.clear();
        scratch.max.resize(states, f32::NEG_INFINITY);
        scratch.sum.clear();
        scratch.sum.resize(states, 0.0);
        scratch.alpha.resize(MR, 0.0);
        for kv_head in 0..heads.kv {
            let (packed_keys, values) = packed.get(self.index, kv_head);
            let mut k0 = start;
            while k0 < keys {
                let n = (keys - k0).min(KEYS);
                for head in kv_head * group..(kv_head + 1) * group {
                    let mut r = 0;
                    while r < self.rows {
                        let mr = (self.rows - r).min(MR);
                        let tile = r;
                        r += mr;
                        // The tile's last query sees keys up to the end of its span.
                        let seen = heads
                            .span(self.first + tile + mr - 1, self.len)
                            .1
                            .saturating_sub(k0)
                            .min(n);
                        // The first block is never skipped: every query's span
                        // starts inside it (spans of a task's queries start at
                        // most QUERY_BLOCK apart, and KEYS > QUERY_BLOCK + 16).
                        if seen == 0 {
                            continue;
                        }
                        let q = &seq[(self.first + tile) * stride + layout.q + head * d..];
                        fast::scores(&mut scratch.scores, q, stride, mr, packed_keys, k0, seen, d);
                        for (i, row) in scratch.scores.chunks_exact_mut(KEYS).take(mr).enumerate() {
                            let state = (tile + i) * heads.query + head;
                            let (max, sum) = (&mut scratch.max[state], &mut scratch.sum[state]);
                            let span = heads.span(self.first + tile + i, self.len);
                            scratch.alpha[i] =
                                softmax_row(span, &mut row[..seen], k0, scale, max, sum);
                        }
                        fast::accumulate(
                            &mut self.out[tile * width + head * d..],
                            width,
                            mr,
                            &scratch.scores,
                            seen,
                            &values[k0 * d..],
                            d,
                            d,
                            &scratch.alpha,
                            k0 == start,
                        );
                    }
                }
                k0 += n;
            }
        }
        for (row, out) in self.out.chunks_exact_mut(width).enumerate() {
            for (head, out) in out.chunks_exact_mut(d).enumerate() {
                let inv = 1.0 / scratch.sum[row * heads.query + head];
                for o in out {
                    *o *= inv;
                }
            }
        }
    }
}

impl Task<'_> {
    /// The tile path: for each query head, strips of 32 of the task's
    /// queries (rounded to bf16 in the tile layout) against blocks of
    /// [`tiles::KEYS`] keys: `S = Q·Kᵀ` on tiles, the online softmax in f32
    /// on S's rows, `P` rounded to bf16 as the next product's strip, and `O
    /// = O·α + P·V` on tiles, O kept in f32.
    fn run_tiles(
        self,
        heads: Heads,
        qkv: &[f32],
        layout: QkvLayout,
        packed: &tiles::Packed,
        kernel: crate::amx::bf16::Kernel,
    ) {
        use crate::amx::Aligned;
        use crate::amx::bf16::{KSTEP, PANEL, STRIP, round_into_strip, strip_times_panels};
        use tiles::KEYS;
        let d = heads.dim;
        let steps = d / KSTEP;
        let width = heads.query * d;
        let group = heads.query / heads.kv;
        let stride = layout.stride;
        let (lo, keys) = self.keys(heads);
        let start = lo / KSTEP * KSTEP;
        let seq = &qkv[self.sequence * stride..(self.sequence + self.len) * stride];
        let mut q = Aligned::<u16>::zeroed(steps * STRIP * KSTEP);
        let mut p = Aligned::<u16>::zeroed(KEYS / KSTEP * STRIP * KSTEP);
        let mut s = Aligned::<f32>::zeroed(STRIP * KEYS);
        let mut o = Aligned::<f32>::zeroed(STRIP * d);
        let (mut max, mut sum, mut alpha) = ([0.0f32; STRIP], [0.0f32; STRIP], [0.0f32; STRIP]);
        for head in 0..heads.query {
            let (k_panels, v_panels) = packed.get(self.index, head / group);
            for strip in (0..self.rows).step_by(STRIP) {
                let m = (self.rows - strip).min(STRIP);
                let first = self.first + strip;
                for i in 0..m {
                    let at = (first + i) * stride + layout.q + head * d;
                    round_into_strip(q.as_mut_slice(), &seq[at..at + d], i);
                }
                max.fill(f32::NEG_INFINITY);
                sum.fill(0.0);
                // The strip's last query sees keys up to the end of its span.
                let end = heads.span(first + m - 1, self.len).1;
                let mut k0 = start;
                let mut accumulate = false;
                while k0 < keys.min(end) {
                    let n = (keys.min(end) - k0).min(KEYS);
                    let padded = n.next_multiple_of(KSTEP);
                    strip_times_panels(
                        kernel,
                        q.as_slice(),
                        m,
                        steps,
                        k_panels,
                        k0 / PANEL,
                        padded / PANEL,
                        0,
                        s.as_mut_slice(),
                        KEYS,
                        false,
                    );
                    // Each row's weights straight into P's strip, rounded
                    // to bf16 in the same pass as their exponentials.
                    for i in 0..m {
                        let row = &s.as_slice()[i * KEYS..i * KEYS + n];
                        let (lo, hi) = heads.span(first + i, self.len);
                        let live = (lo.saturating_sub(k0).min(n), hi.saturating_sub(k0).min(n));
                        alpha[i] = kernels::softmax_to_bf16(
                            row,
                            (live.0.min(live.1), live.1),
                            padded,
                            heads.scale,
                            &mut max[i],
                            &mut sum[i],
                            &mut p.as_mut_slice()[i * KSTEP..],
                            STRIP * KSTEP,
                        );
                    }
                    if accumulate {
                        for (row, &a) in o.as_mut_slice().chunks_exact_mut(d).zip(&alpha).take(m) {
                            row.iter_mut().for_each(|x| *x *= a);
                        }
                    }
                    strip_times_panels(
                        kernel,
                        p.as_slice(),
                        m,
                        padded / KSTEP,
                        v_panels,
                        0,
                        d / PANEL,
                        k0 / KSTEP,
                        o.as_mut_slice(),
                        d,
                        accumulate,
                    );
                    accumulate = true;
                    k0 += n;
                }
                let rows = o.as_slice().chunks_exact(d).zip(&sum).take(m);
                for (i, (row, &total)) in rows.enumerate() {
                    let inv = 1.0 / total;
                    let out = &mut self.out[(strip + i) * width + head * d..][..d];
                    for (y, &x) in out.iter_mut().zip(row) {
                        *y = x * inv;
                    }
                }
            }
        }
    }
}

/// The tile path's keys and values, packed once per sequence and key/value
/// head in the tile layout ([`crate::amx::bf16::Panels`]): keys as panels
/// of 32 keys over the head's width, values as panels of 32 of the head's
/// columns over the keys.
mod tiles {
    use rayon::prelude::*;

    use crate::amx::Aligned;
    use crate::amx::bf16::{KSTEP, Panels, pack_columns, pack_rows, panels_len};

    /// Keys per block of the online softmax (a multiple of 32).
    pub(super) const KEYS: usize = 256;

    /// Whether the tile path runs here for heads of width `d`.
    pub(super) fn supported(d: usize) -> bool {
        crate::amx::supported() && d.is_multiple_of(KSTEP) && d <= 256
    }

    #[derive(Default)]
    pub(crate) struct Packed {
        keys: Option<Aligned<u16>>,
        values: Option<Aligned<u16>>,
        /// Per (sequence, kv head): start of its keys and values, and the
        /// sequence's k-steps.
        parts: Vec<(usize, usize, usize)>,
        kv: usize,
        dim: usize,
    }

    impl std::fmt::Debug for Packed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("tiles::Packed")
                .field("parts", &self.parts.len())
                .finish_non_exhaustive()
        }
    }

    impl Packed {
        /// Packs a batch's keys and values (buffers kept while large enough).
        pub(super) fn fill(
            &mut self,
            heads: super::Heads,
            lengths: &[usize],
            qkv: &[f32],
            layout: super::QkvLayout,
        ) {
            let d = heads.dim;
            self.parts.clear();
            let mut size = 0;
            for &len in lengths {
                for _ in 0..heads.kv {
                    self.parts.push((size, size, len.div_ceil(KSTEP)));
                    size += panels_len(len, d).max(panels_len(d, len));
                }
            }
            let fits =
                |b: &Option<Aligned<u16>>| b.as_ref().is_some_and(|b| b.as_slice().len() >= size);
            if !fits(&self.keys) {
                self.keys = Some(Aligned::zeroed(size));
            }
            if !fits(&self.values) {
                self.values = Some(Aligned::zeroed(size));
            }
            let (keys, values) = (
                self.keys.as_mut().expect("allocated").as_mut_slice(),
                self.values.as_mut().expect("allocated").as_mut_slice(),
            );
            // Cut the buffers into the (sequence, head) parts, in order.
            let mut jobs = Vec::with_capacity(self.parts.len());
            let (mut rest_k, mut rest_v) = (&mut keys[..size], &mut values[..size]);
            let mut start = 0;
            for &len in lengths {
                for h in 0..heads.kv {
                    let part = panels_len(len, d).max(panels_len(d, len));
                    let (k, tail_k) = rest_k.split_at_mut(part);
                    let (v, tail_v) = rest_v.split_at_mut(part);
                    jobs.push((start, len, h, k, v));
                    rest_k = tail_k;
                    rest_v = tail_v;
                }
                start += len;
            }
            jobs.into_par_iter().for_each(|(start, len, h, k, v)| {
                let rows = &qkv[start * layout.stride..(start + len) * layout.stride];
                pack_rows(k, &rows[layout.k + h * d..], layout.stride, len, d);
                pack_columns(v, &rows[layout.v + h * d..], layout.stride, len, d);
            });
            self.kv = heads.kv;
            self.dim = d;
        }

        /// Sequence `s`'s keys and values of key/value head `h`.
        pub(super) fn get(&self, s: usize, h: usize) -> (Panels<'_>, Panels<'_>) {
            let (at, _, steps) = self.parts[s * self.kv + h];
            let d = self.dim;
            let keys = self.keys.as_ref().expect("filled").as_slice();
            let values = self.values.as_ref().expect("filled").as_slice();
            (
                Panels {
                    data: &keys[at..],
                    steps: d / KSTEP,
                },
                Panels {
                    data: &values[at..],
                    steps,
                },
            )
        }
    }
}

/// The register-blocked kernels of [`Task::run_fast`]: AVX-512 (blocks of
/// up to 64 keys or value columns per call), or AVX2 + FMA (16 per call:
/// a 6 × 16 tile is 12 of its 16 registers).
mod fast {
    /// Queries per tile.
    pub(super) const MR: usize = 6;
    /// Keys per softmax block (a multiple of 64).
    pub(super) const KEYS: usize = 256;

    /// Whether the kernels run here for heads of width `d` (a multiple of
    /// 16 up to 256).
    pub(super) fn supported(d: usize) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            d.is_multiple_of(16) && d <= 256 && crate::isa::active() >= crate::isa::Isa::Avx2
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = d;
            false
        }
    }

    /// Keys of every sequence and key/value head of a batch, in blocks of
    /// 16: `[block][c][16]` (zeros past the last key), and their values,
    /// `[row][c]`: contiguous rows, where the fused projection's are a whole
    /// QKV row apart (a page or more: every value read of `P·V` would touch
    /// another page).
    #[derive(Default)]
    pub struct Packed {
        keys: Vec<f32>,
        values: Vec<f32>,
        /// Per (sequence, kv head): start of its keys and of its values.
        offsets: Vec<usize>,
        kv: usize,
        /// The tile path's keys and values.
        pub(super) tiles: super::tiles::Packed,
    }

    impl std::fmt::Debug for Packed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Packed")
                .field("keys", &self.keys.len())
                .field("kv", &self.kv)
                .finish_non_exhaustive()
        }
    }

    impl Packed {
        /// Packs the keys of a batch (the buffer's capacity is kept from one
        /// batch to the next).
        pub(super) fn fill(
            &mut self,
            heads: super::Heads,
            lengths: &[usize],
            qkv: &[f32],
            layout: super::QkvLayout,
        ) {
            use rayon::prelude::*;
            let d = heads.dim;
            let offsets = &mut self.offsets;
            offsets.clear();
            let mut size = 0;
            for &len in lengths {
                for _ in 0..heads.kv {
                    offsets.push(size);
                    size += len.div_ceil(16) * 16 * d;
                }
            }
            // Every key is written below, padding keys explicitly; values
            // past the last row are never read.
            let keys = &mut self.keys;
            keys.resize(size, 0.0);
            self.values.resize(size, 0.0);
            // Split the buffers into the (sequence, head) parts, in order.
            let mut parts = Vec::with_capacity(offsets.len());
            let (mut rest, mut rest_values) = (&mut keys[..], &mut self.values[..]);
            let mut start = 0;
            for &len in lengths {
                for h in 0..heads.kv {
                    let (k, tail) = rest.split_at_mut(len.div_ceil(16) * 16 * d);
                    let (v, tail_values) = rest_values.split_at_mut(len.div_ceil(16) * 16 * d);
                    parts.push((start, len, h, k, v));
                    rest = tail;
                    rest_values = tail_values;
                }
                start += len;
            }
            parts.into_par_iter().for_each(|(start, len, h, k, v)| {
                let stride = layout.stride;
                for (j, row) in v.chunks_exact_mut(d).take(len).enumerate() {
                    let at = (start + j) * stride + layout.v + h * d;
                    row.copy_from_slice(&qkv[at..at + d]);
                }
                // The last block's padding lanes interleave with its keys: clear it whole.
                k[(len / 16) * d * 16..].fill(0.0);
                #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
                let mut whole = 0;
                #[cfg(target_arch = "x86_64")]
                if crate::isa::allows(crate::isa::Isa::Avx2) && d.is_multiple_of(8) {
                    whole = len / 16 * 16;
                    let keys = &qkv[start * stride + layout.k + h * d..];
                    for b in 0..len / 16 {
                        // SAFETY: AVX2 is present; the block's 16 keys lie
                        // inside `keys` (rows start + 16·b .. + 16 of the
                        // sequence, `d` columns from the head's) and the
                        // block holds d × 16.
                        unsafe {
                            super::avx2::transpose_keys(
                                &keys[16 * b * stride..],
                                stride,
                                d,
                                &mut k[b * d * 16..(b + 1) * d * 16],
                            );
                        }
                    }
                }
                for j in whole..len {
                    let row = &qkv[(start + j) * stride..(start + j + 1) * stride];
                    let key = &row[layout.k + h * d..layout.k + (h + 1) * d];
                    let block = &mut k[(j / 16) * d * 16..(j / 16 + 1) * d * 16];
                    for (c, &x) in key.iter().enumerate() {
                        block[c * 16 + j % 16] = x;
                    }
                }
            });
            self.kv = heads.kv;
        }

        /// The packed keys and values of sequence `s`, head `h`.
        pub(super) fn get(&self, s: usize, h: usize) -> (&[f32], &[f32]) {
            let i = s * self.kv + h;
            let end = self.offsets.get(i + 1).copied().unwrap_or(self.keys.len());
            let span = self.offsets[i]..end;
            (&self.keys[span.clone()], &self.values[span])
        }
    }

    /// `scores[i][j] = q_i · k_{k0+j}` for `mr` queries (rows of `stride`)
    /// and `n` keys; rows of `scores` are [`KEYS`] apart.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scores(
        scores: &mut [f32],
        q: &[f32],
        stride: usize,
        mr: usize,
        keys: &[f32],
        k0: usize,
        n: usize,
        d: usize,
    ) {
        assert!((1..=MR).contains(&mr) && n <= KEYS && k0.is_multiple_of(16));
        assert!(
            q.len() > (mr - 1) * stride + d - 1,
            "query rows out of bounds"
        );
        let blocks = n.div_ceil(16);
        assert!(
            keys.len() >= (k0 / 16 + blocks) * d * 16,
            "keys out of bounds"
        );
        assert!(scores.len() >= MR * KEYS);
        #[cfg(target_arch = "x86_64")]
        if !crate::isa::avx512() {
            // SAFETY: as below; AVX2 and FMA are present (`supported`).
            unsafe {
                super::avx2::scores(
                    scores.as_mut_ptr(),
                    q,
                    stride,
                    mr,
                    &keys[k0 / 16 * d * 16..],
                    blocks,
                    d,
                );
            }
            return;
        }
        let mut b = 0;
        while b < blocks {
            let step = (blocks - b).min(4);
            let packed = &keys[(k0 / 16 + b) * d * 16..];
            // SAFETY: the asserts above bound every read (queries rows <
            // mr, columns < d; key blocks < k0/16 + blocks) and write (rows
            // < MR of `scores`, columns < b·16 + 64 ≤ KEYS).
            unsafe {
                match step {
                    4 => {
                        scores_kernel::<4>(scores[b * 16..].as_mut_ptr(), q, stride, mr, packed, d);
                    }
                    3 => {
                        scores_kernel::<3>(scores[b * 16..].as_mut_ptr(), q, stride, mr, packed, d);
                    }
                    2 => {
                        scores_kernel::<2>(scores[b * 16..].as_mut_ptr(), q, stride, mr, packed, d);
                    }
                    _ => {
                        scores_kernel::<1>(scores[b * 16..].as_mut_ptr(), q, stride, mr, packed, d);
                    }
                }
            }
            b += step;
        }
    }

    /// `B` blocks of 16 keys against `MR` queries (rows past `mr` repeat the
    /// last one; their results are written but never read).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn scores_kernel<const B: usize>(
        out: *mut f32,
        q: &[f32],
        stride: usize,
        mr: usize,
        keys: &[f32],
        d: usize,
    ) {
        use std::arch::x86_64::*;
        let mut acc = [[_mm512_setzero_ps(); B]; MR];
        let rows: [*const f32; MR] = std::array::from_fn(|i| q[i.min(mr - 1) * stride..].as_ptr());
        let kp = keys.as_ptr();
        for c in 0..d {
            // SAFETY: c < d, so each block's vector at c lies inside the
            // packed keys and each query value inside its row (the caller's
            // bounds).
            unsafe {
                let kv: [__m512; B] =
                    std::array::from_fn(|b| _mm512_loadu_ps(kp.add(b * d * 16 + c * 16)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*rows[i].add(c));
                    for b in 0..B {
                        acc[b] = _mm512_fmadd_ps(x, kv[b], acc[b]);
                    }
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (b, v) in acc.iter().enumerate() {
                // SAFETY: row i < MR and columns < B·16 of the caller's window.
                unsafe { _mm512_storeu_ps(out.add(i * KEYS + b * 16), *v) };
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    unsafe fn scores_kernel<const B: usize>(
        _: *mut f32,
        _: &[f32],
        _: usize,
        _: usize,
        _: &[f32],
        _: usize,
    ) {
        unreachable!("the fast attention path is only enabled on x86_64 with AVX-512")
    }

    /// `out_i = out_i·α_i + Σ_j p_ij·v_j` (or without the first term when
    /// `first`) for `mr` rows of `out` (`ldo` apart, `d` wide), the weights
    /// `p` in rows of [`KEYS`] and `n` value rows (`stride` apart).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accumulate(
        out: &mut [f32],
        ldo: usize,
        mr: usize,
        p: &[f32],
        n: usize,
        v: &[f32],
        stride: usize,
        d: usize,
        alpha: &[f32],
        first: bool,
    ) {
        assert!(
            (1..=MR).contains(&mr)
                && (1..=KEYS).contains(&n)
                && p.len() >= MR * KEYS
                && alpha.len() >= MR
        );
        assert!(out.len() >= (mr - 1) * ldo + d, "output rows out of bounds");
        assert!(v.len() >= (n - 1) * stride + d, "value rows out of bounds");
        #[cfg(target_arch = "x86_64")]
        if !crate::isa::avx512() {
            for c in (0..d).step_by(16) {
                // SAFETY: as below, 16 columns at a time; AVX2 and FMA are
                // present (`supported`).
                unsafe {
                    super::avx2::pv(
                        out[c..].as_mut_ptr(),
                        ldo,
                        mr,
                        p,
                        n,
                        v[c..].as_ptr(),
                        stride,
                        alpha,
                        first,
                    );
                }
            }
            return;
        }
        let mut c = 0;
        while c < d {
            let w = (d - c).min(64) / 16;
            // SAFETY: the asserts bound every access: output rows < mr,
            // columns c..c + 16·w ≤ d; value rows < n, same columns.
            unsafe {
                let (o, vv) = (out[c..].as_mut_ptr(), v[c..].as_ptr());
                match w {
                    4 => pv_kernel::<4>(o, ldo, mr, p, n, vv, stride, alpha, first),
                    3 => pv_kernel::<3>(o, ldo, mr, p, n, vv, stride, alpha, first),
                    2 => pv_kernel::<2>(o, ldo, mr, p, n, vv, stride, alpha, first),
                    _ => pv_kernel::<1>(o, ldo, mr, p, n, vv, stride, alpha, first),
                }
            }
            c += 16 * w;
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,fma")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pv_kernel<const W: usize>(
        out: *mut f32,
        ldo: usize,
        mr: usize,
        p: &[f32],
        n: usize,
        v: *const f32,
        stride: usize,
        alpha: &[f32],
        first: bool,
    ) {
        use std::arch::x86_64::*;
        let mut acc = [[_mm512_setzero_ps(); W]; MR];
        if !first {
            for (i, acc) in acc.iter_mut().enumerate().take(mr) {
                let a = _mm512_set1_ps(alpha[i]);
                for (w, x) in acc.iter_mut().enumerate() {
                    // SAFETY: row i < mr, columns < 16·W of the window.
                    *x = _mm512_mul_ps(a, unsafe { _mm512_loadu_ps(out.add(i * ldo + w * 16)) });
                }
            }
        }
        let pp = p.as_ptr();
        for j in 0..n {
            // SAFETY: value row j < n and weight column j < KEYS (the
            // caller's bounds); rows past mr read row mr − 1's weights.
            unsafe {
                let vj: [__m512; W] =
                    std::array::from_fn(|w| _mm512_loadu_ps(v.add(j * stride + w * 16)));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*pp.add(i.min(mr - 1) * KEYS + j));
                    for w in 0..W {
                        acc[w] = _mm512_fmadd_ps(x, vj[w], acc[w]);
                    }
                }
            }
        }
        for (i, acc) in acc.iter().enumerate().take(mr) {
            for (w, x) in acc.iter().enumerate() {
                // SAFETY: row i < mr, columns < 16·W of the window.
                unsafe { _mm512_storeu_ps(out.add(i * ldo + w * 16), *x) };
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pv_kernel<const W: usize>(
        _: *mut f32,
        _: usize,
        _: usize,
        _: &[f32],
        _: usize,
        _: *const f32,
        _: usize,
        _: &[f32],
        _: bool,
    ) {
        unreachable!("the fast attention path is only enabled on x86_64 with AVX-512")
    }
}

/// The AVX2 + FMA forms of [`fast`]'s kernels, 16 keys or value columns
/// (two 8-lane vectors) per call.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::fast::{KEYS, MR};

    /// `blocks` blocks of 16 packed keys against `MR` queries, one block at
    /// a time, as `scores_kernel`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `keys` holds the blocks (`d × 16` each),
    /// each of the `mr` query rows `d` values, `out` `MR` rows of [`KEYS`]
    /// and `blocks · 16 ≤ KEYS`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scores(
        out: *mut f32,
        q: &[f32],
        stride: usize,
        mr: usize,
        keys: &[f32],
        blocks: usize,
        d: usize,
    ) {
        let rows: [*const f32; MR] = std::array::from_fn(|i| q[i.min(mr - 1) * stride..].as_ptr());
        for b in 0..blocks {
            let mut acc = [[_mm256_setzero_ps(); 2]; MR];
            // SAFETY: block b < blocks lies inside `keys`.
            let kp = unsafe { keys.as_ptr().add(b * d * 16) };
            for c in 0..d {
                // SAFETY: c < d: the block's 16 keys at c and each query value
                // lie inside the slices (the caller's bounds).
                unsafe {
                    let k0 = _mm256_loadu_ps(kp.add(c * 16));
                    let k1 = _mm256_loadu_ps(kp.add(c * 16 + 8));
                    for (i, acc) in acc.iter_mut().enumerate() {
                        let x = _mm256_broadcast_ss(&*rows[i].add(c));
                        acc[0] = _mm256_fmadd_ps(x, k0, acc[0]);
                        acc[1] = _mm256_fmadd_ps(x, k1, acc[1]);
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate() {
                // SAFETY: row i < MR, columns b·16 .. b·16 + 16 ≤ KEYS.
                unsafe {
                    _mm256_storeu_ps(out.add(i * KEYS + b * 16), acc[0]);
                    _mm256_storeu_ps(out.add(i * KEYS + b * 16 + 8), acc[1]);
                }
            }
        }
    }

    /// Sixteen keys (rows `stride` apart, `d` wide, `d` a multiple of 8)
    /// into a packed block, `block[c·16 + j] = key j's column c`, in 8 × 8
    /// transposes.
    ///
    /// # Safety
    /// The CPU has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn transpose_keys(keys: &[f32], stride: usize, d: usize, block: &mut [f32]) {
        assert!(d.is_multiple_of(8) && block.len() >= 16 * d);
        assert!(keys.len() >= 15 * stride + d, "keys out of bounds");
        let (src, dst) = (keys.as_ptr(), block.as_mut_ptr());
        for half in 0..2 {
            for c0 in (0..d).step_by(8) {
                // SAFETY: rows 8·half + r < 16 and columns c0 + 8 ≤ d lie
                // inside `keys`; the stores, 8 floats at (c0 + i)·16 + 8·half,
                // inside `block` (both asserted above).
                unsafe {
                    let r: [__m256; 8] = std::array::from_fn(|i| {
                        _mm256_loadu_ps(src.add((8 * half + i) * stride + c0))
                    });
                    let columns = crate::tile::transpose8(r);
                    for (i, column) in columns.into_iter().enumerate() {
                        _mm256_storeu_ps(dst.add((c0 + i) * 16 + 8 * half), column);
                    }
                }
            }
        }
    }

    /// 16 columns of `out_i = out_i·α_i + Σ_j p_ij·v_j`, as `pv_kernel`.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA; `out` holds `mr` rows of 16 (`ldo` apart),
    /// `v` `n` rows of 16 (`stride` apart), `p` `MR` rows of [`KEYS`].
    #[allow(clippy::too_many_arguments)]
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn pv(
        out: *mut f32,
        ldo: usize,
        mr: usize,
        p: &[f32],
        n: usize,
        v: *const f32,
        stride: usize,
        alpha: &[f32],
        first: bool,
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; MR];
        if !first {
            for (i, acc) in acc.iter_mut().enumerate().take(mr) {
                let a = _mm256_set1_ps(alpha[i]);
                // SAFETY: row i < mr, 16 columns of the window.
                unsafe {
                    acc[0] = _mm256_mul_ps(a, _mm256_loadu_ps(out.add(i * ldo)));
                    acc[1] = _mm256_mul_ps(a, _mm256_loadu_ps(out.add(i * ldo + 8)));
                }
            }
        }
        let pp = p.as_ptr();
        for j in 0..n {
            // SAFETY: value row j < n, weight column j < KEYS (the caller's
            // bounds); rows past mr read row mr − 1's weights.
            unsafe {
                let v0 = _mm256_loadu_ps(v.add(j * stride));
                let v1 = _mm256_loadu_ps(v.add(j * stride + 8));
                for (i, acc) in acc.iter_mut().enumerate() {
                    let x = _mm256_broadcast_ss(&*pp.add(i.min(mr - 1) * KEYS + j));
                    acc[0] = _mm256_fmadd_ps(x, v0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(x, v1, acc[1]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate().take(mr) {
            // SAFETY: row i < mr, 16 columns of the window.
            unsafe {
                _mm256_storeu_ps(out.add(i * ldo), acc[0]);
                _mm256_storeu_ps(out.add(i * ldo + 8), acc[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention by its definition, in f64.
    fn reference(heads: Heads, lengths: &[usize], qkv: &[f32], layout: QkvLayout) -> Vec<f64> {
        let d = heads.dim;
        let width = heads.query * d;
        let total: usize = lengths.iter().sum();
        let mut out = vec![0.0f64; total * width];
        let mut start = 0;
        let at = |row: usize, col: usize| f64::from(qkv[row * layout.stride + col]);
        for &len in lengths {
            for h in 0..heads.query {
                let g = h / (heads.query / heads.kv);
                for i in 0..len {
                    let (lo, hi) = heads.span(i, len);
                    let scores: Vec<f64> = (lo..hi)
                        .map(|j| {
                            (0..d)
                                .map(|c| {
                                    at(start + i, layout.q + h * d + c)
                                        * at(start + j, layout.k + g * d + c)
                                })
                                .sum::<f64>()
                                * f64::from(heads.scale)
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        out[(start + i) * width + h * d + c] = (lo..hi)
                            .map(|j| e[j - lo] * at(start + j, layout.v + g * d + c))
                            .sum::<f64>()
                            / sum;
                    }
                }
            }
            start += len;
        }
        out
    }

    #[test]
    fn both_paths_equal_the_definition() {
        // Lengths around the block sizes; grouped and plain heads; causal and
        // not; sliding windows shorter and longer than the blocks, and a
        // scale of the model's own; head widths the fast path takes
        // (multiples of 16) and not.
        let lengths = [1, 63, 64, 65, 700, 1100, 3];
        for (query, kv, causal, dim, window) in [
            (4, 2, true, 8, None),
            (2, 2, false, 16, None),
            (3, 1, true, 32, None),
            (2, 1, false, 48, None),
            (2, 1, true, 128, None),
            (4, 2, true, 16, Some(5)),
            (4, 2, false, 16, Some(21)),
            (2, 1, true, 32, Some(300)),
            (2, 2, false, 8, Some(600)),
        ] {
            let mut heads = Heads::new(query, kv, dim, causal);
            heads.window = window;
            if window.is_some() {
                heads.scale = 0.3;
            }
            let layout = QkvLayout::fused(heads);
            let total: usize = lengths.iter().sum();
            let qkv: Vec<f32> = (0..total * layout.stride)
                .map(|i| {
                    ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 3.0 / (dim as f32).sqrt().sqrt()
                })
                .collect();
            let want = reference(heads, &lengths, &qkv, layout);
            let mut paths = vec![Path::Gemm];
            if fast::supported(dim) {
                paths.push(Path::Fast);
            }
            // The tile path in bf16 on the portable model of the tile unit
            // everywhere, and on the tile unit where it runs.
            use crate::amx::bf16::Kernel;
            if dim.is_multiple_of(32) {
                paths.push(Path::Tiles(Kernel::Model));
                if tiles::supported(dim) {
                    paths.push(Path::Tiles(Kernel::Tiles));
                }
            }
            for &path in &paths {
                let fast = path == Path::Fast;
                // bf16 inputs to both products: about 2^-8 of the values.
                let bound = if matches!(path, Path::Tiles(_)) {
                    2e-2
                } else {
                    2e-5
                };
                let mut out = vec![f32::NAN; total * query * dim];
                run(
                    heads,
                    &lengths,
                    &qkv,
                    layout,
                    &mut out,
                    &mut Packed::default(),
                    None,
                    path,
                );
                for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                    assert!(
                        (f64::from(*got) - want).abs() < bound,
                        "{query}/{kv} causal {causal} window {window:?} dim {dim} {path:?}, element {i}: {got} vs {want}"
                    );
                }
                // One query per sequence: first, last, or one in between.
                let picks: Vec<usize> = lengths
                    .iter()
                    .enumerate()
                    .map(|(s, &len)| [0, len - 1, len / 2][s % 3])
                    .collect();
                let width = query * dim;
                let mut picked = vec![f32::NAN; lengths.len() * width];
                run(
                    heads,
                    &lengths,
                    &qkv,
                    layout,
                    &mut picked,
                    &mut Packed::default(),
                    Some(&picks),
                    path,
                );
                let mut start = 0;
                for (s, (&len, &pick)) in lengths.iter().zip(&picks).enumerate() {
                    let row = (start + pick) * width;
                    let (got, full) = (&picked[s * width..(s + 1) * width], &out[row..row + width]);
                    for (c, (g, w)) in got.iter().zip(&want[row..row + width]).enumerate() {
                        assert!(
                            (f64::from(*g) - w).abs() < bound,
                            "picked, {query}/{kv} causal {causal} window {window:?} dim {dim} {path:?}, sequence {s} column {c}: {g} vs {w}"
                        );
                    }
                    // Without a window every query's keys start at 0, in the
                    // same blocks as in the full pass: the fast path does the
                    // same arithmetic (the gemm path's products of one row
                    // may add in another order than those of 64).
                    if window.is_none() && (fast || matches!(path, Path::Tiles(_))) {
                        assert_eq!(
                            got, full,
                            "picked, {query}/{kv} causal {causal} dim {dim} {path:?}, sequence {s}"
                        );
                    }
                    start += len;
                }
            }
        }
    }
}
