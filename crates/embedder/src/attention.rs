//! Self-attention over unpadded batches, tiled with an online softmax (as
//! flash attention does), so memory grows linearly with the length: no
//! `len × len` score matrix is ever held, only one `QUERY_BLOCK × KEY_BLOCK`
//! tile per task.
//!
//! One kernel serves every family: bidirectional (BERT) or causal (decoders),
//! and grouped-query attention (several query heads share one key/value
//! head). Queries, keys and values are read in place from the rows of the
//! fused QKV product.

use rayon::prelude::*;

use crate::kernels::{self, View, matmul};

/// Query rows of a tile.
const QUERY_BLOCK: usize = 64;
/// Key rows of a tile.
const KEY_BLOCK: usize = 512;

/// The heads of an attention layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heads {
    /// Query heads.
    pub(crate) query: usize,
    /// Key/value heads (`query` is a multiple of it).
    pub(crate) kv: usize,
    /// Width of one head.
    pub(crate) dim: usize,
    /// Whether token t sees only tokens ≤ t (decoders).
    pub(crate) causal: bool,
}

/// Where Q, K and V sit in each row of the fused projection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QkvLayout {
    /// Width of a row (`(query + 2·kv)·dim` for a fused QKV product).
    pub(crate) stride: usize,
    /// Column of Q's first head.
    pub(crate) q: usize,
    /// Column of K's first head.
    pub(crate) k: usize,
    /// Column of V's first head.
    pub(crate) v: usize,
}

impl QkvLayout {
    /// Q, K and V side by side, as a fused projection lays them out.
    pub(crate) fn fused(heads: Heads) -> Self {
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

/// `out = softmax(Q·Kᵀ/√dim [+ causal mask])·V` for every sequence and head.
///
/// `lengths` are the sequences laid end to end in `qkv` (rows of
/// `layout.stride`) and in `out` (rows of `query·dim`, head after head).
pub(crate) fn attention(
    heads: Heads,
    lengths: &[usize],
    qkv: &[f32],
    layout: QkvLayout,
    out: &mut [f32],
) {
    let width = heads.query * heads.dim;
    assert!(heads.kv > 0 && heads.query.is_multiple_of(heads.kv));
    let total: usize = lengths.iter().sum();
    assert!(qkv.len() >= total * layout.stride && out.len() >= total * width);
    // Tasks own disjoint row ranges of `out`: one block of queries of one
    // sequence, every head.
    let mut tasks = Vec::new();
    let mut rest = &mut out[..total * width];
    let mut start = 0;
    for &len in lengths {
        let mut first = 0;
        while first < len {
            let rows = (len - first).min(QUERY_BLOCK);
            let (mine, tail) = rest.split_at_mut(rows * width);
            tasks.push(Task {
                sequence: start,
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
        .for_each_init(Scratch::default, |scratch, task| {
            task.run(heads, qkv, layout, scratch);
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
    len: usize,
    /// Position of the block's first query in its sequence.
    first: usize,
    rows: usize,
    out: &'a mut [f32],
}

impl Task<'_> {
    fn run(self, heads: Heads, qkv: &[f32], layout: QkvLayout, scratch: &mut Scratch) {
        let d = heads.dim;
        let width = heads.query * d;
        let group = heads.query / heads.kv;
        let scale = 1.0 / (d as f32).sqrt();
        let stride = layout.stride;
        // Keys this block sees: all, or up to its last query.
        let keys = if heads.causal {
            self.first + self.rows
        } else {
            self.len
        };
        let key_block = keys.min(KEY_BLOCK);
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
            let mut k0 = 0;
            while k0 < keys {
                let n = (keys - k0).min(key_block);
                let scores = &mut scratch.scores[..self.rows * n];
                let k =
                    View::transposed(&seq[k0 * stride + layout.k + kv_head * d..], d, n, stride);
                matmul(scores, n, q, k, false, false);
                for (r, row) in scores.chunks_exact_mut(n).enumerate() {
                    // Causal: query at position p sees keys 0..=p.
                    let valid = if heads.causal {
                        (self.first + r + 1).saturating_sub(k0).min(n)
                    } else {
                        n
                    };
                    scratch.alpha[r] = kernels::online_softmax(
                        row,
                        valid,
                        scale,
                        &mut scratch.max[r],
                        &mut scratch.sum[r],
                    );
                }
                if k0 > 0 {
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
                    let keys = if heads.causal { i + 1 } else { len };
                    let scores: Vec<f64> = (0..keys)
                        .map(|j| {
                            (0..d)
                                .map(|c| {
                                    at(start + i, layout.q + h * d + c)
                                        * at(start + j, layout.k + g * d + c)
                                })
                                .sum::<f64>()
                                / (d as f64).sqrt()
                        })
                        .collect();
                    let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        out[(start + i) * width + h * d + c] = (0..keys)
                            .map(|j| e[j] * at(start + j, layout.v + g * d + c))
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
    fn tiles_equal_the_definition() {
        // Lengths around the block sizes; grouped and plain heads; causal and not.
        let lengths = [1, 63, 64, 65, 700, 1100, 3];
        for (query, kv, causal) in [(4, 2, true), (2, 2, false), (3, 1, true), (2, 1, false)] {
            let heads = Heads {
                query,
                kv,
                dim: 8,
                causal,
            };
            let layout = QkvLayout::fused(heads);
            let total: usize = lengths.iter().sum();
            let qkv: Vec<f32> = (0..total * layout.stride)
                .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 3.0)
                .collect();
            let mut out = vec![f32::NAN; total * query * 8];
            attention(heads, &lengths, &qkv, layout, &mut out);
            let want = reference(heads, &lengths, &qkv, layout);
            for (i, (got, want)) in out.iter().zip(&want).enumerate() {
                assert!(
                    (f64::from(*got) - want).abs() < 2e-5,
                    "{query}/{kv} causal {causal}, element {i}: {got} vs {want}"
                );
            }
        }
    }
}
