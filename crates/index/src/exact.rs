//! Exact top-k by inner product: the oracle, and the official protocol's
//! search (FAISS Flat, inner product over normalised vectors).
//!
//! Queries are scored in blocks against blocks of the corpus with one f32
//! matrix product each (`gemm`), in parallel over query blocks; each query
//! keeps its best candidates and cuts them back to k now and then. Equal
//! scores are ordered by document id descending, as trec_eval orders them.

use std::cmp::Ordering;
use std::sync::Arc;

use eval::ScoredDoc;
use rayon::prelude::*;

use crate::{Error, VectorIndex};

const QUERY_BLOCK: usize = 32;
const DOC_BLOCK: usize = 8192;

/// A flat index: every vector, searched exhaustively.
#[derive(Debug, Clone)]
pub struct ExactIndex {
    ids: Vec<Arc<str>>,
    dim: usize,
    vectors: Vec<f32>,
}

impl ExactIndex {
    /// An index of `ids.len()` vectors of width `dim`, row after row.
    pub fn new(ids: Vec<Arc<str>>, vectors: Vec<f32>, dim: usize) -> Result<Self, Error> {
        if dim == 0 {
            return Err(Error::Invalid(
                "vector dimension must be positive".to_owned(),
            ));
        }
        if vectors.len() != ids.len() * dim {
            return Err(Error::Invalid(format!(
                "{} floats are not {} vectors of dimension {dim}",
                vectors.len(),
                ids.len()
            )));
        }
        Ok(Self { ids, dim, vectors })
    }

    fn search_block(&self, queries: &[f32], k: usize) -> Vec<Vec<ScoredDoc>> {
        let dim = self.dim;
        let nq = queries.len() / dim;
        let mut best: Vec<Vec<(f32, u32)>> = vec![Vec::with_capacity(2 * k + 1); nq];
        let mut floor = vec![f32::NEG_INFINITY; nq];
        let mut scores = vec![0.0f32; nq * DOC_BLOCK];
        let before = |a: &(f32, u32), b: &(f32, u32)| self.before(*a, *b);
        for start in (0..self.len()).step_by(DOC_BLOCK) {
            let nd = (self.len() - start).min(DOC_BLOCK);
            let docs = &self.vectors[start * dim..(start + nd) * dim];
            product(&mut scores[..nq * nd], queries, docs, nq, nd, dim);
            for q in 0..nq {
                let row = &scores[q * nd..(q + 1) * nd];
                let list = &mut best[q];
                for (j, &s) in row.iter().enumerate() {
                    // Equal to the floor may still win on the id; keep it.
                    if s >= floor[q] {
                        list.push((s, (start + j) as u32));
                    }
                }
                if k > 0 && list.len() > 2 * k {
                    list.select_nth_unstable_by(k - 1, before);
                    list.truncate(k);
                    floor[q] = list.iter().map(|c| c.0).fold(f32::INFINITY, f32::min);
                }
            }
        }
        best.into_iter()
            .map(|mut list| {
                if k == 0 {
                    return Vec::new();
                }
                if list.len() > k {
                    list.select_nth_unstable_by(k - 1, before);
                    list.truncate(k);
                }
                list.sort_unstable_by(before);
                list.into_iter()
                    .map(|(s, i)| ScoredDoc {
                        id: Arc::clone(&self.ids[i as usize]),
                        score: f64::from(s),
                    })
                    .collect()
            })
            .collect()
    }

    /// Every document's score for one query vector (the inner products this index ranks by,
    /// in the documents' order).
    pub fn scores(&self, query: &[f32]) -> Result<Vec<f32>, Error> {
        crate::query_count(query, self.dim)?;
        if query.len() != self.dim {
            return Err(Error::Invalid(format!(
                "one query of dimension {}, not {} floats",
                self.dim,
                query.len()
            )));
        }
        let mut scores = vec![0.0f32; self.len()];
        for start in (0..self.len()).step_by(DOC_BLOCK) {
            let nd = (self.len() - start).min(DOC_BLOCK);
            let docs = &self.vectors[start * self.dim..(start + nd) * self.dim];
            product(&mut scores[start..start + nd], query, docs, 1, nd, self.dim);
        }
        Ok(scores)
    }

    /// trec_eval order on (score, index): score descending, then id descending.
    fn before(&self, a: (f32, u32), b: (f32, u32)) -> Ordering {
        b.0.partial_cmp(&a.0)
            .unwrap_or(Ordering::Equal)
            .then_with(|| self.ids[b.1 as usize].cmp(&self.ids[a.1 as usize]))
    }
}

impl VectorIndex for ExactIndex {
    fn ids(&self) -> &[Arc<str>] {
        &self.ids
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<ScoredDoc>>, Error> {
        crate::query_count(queries, self.dim)?;
        let k = k.min(self.len());
        let results = queries
            .par_chunks(QUERY_BLOCK * self.dim)
            .flat_map_iter(|block| self.search_block(block, k))
            .collect();
        Ok(results)
    }
}

/// `out[q, d] = queries[q] · docs[d]` for `nq × nd` pairs.
fn product(out: &mut [f32], queries: &[f32], docs: &[f32], nq: usize, nd: usize, dim: usize) {
    assert!(out.len() >= nq * nd && queries.len() >= nq * dim && docs.len() >= nd * dim);
    // SAFETY: out is nq × nd (row stride nd), queries nq × dim (row stride
    // dim), docs nd × dim read as its transpose (dim × nd: row stride 1,
    // column stride dim); the assertion above covers every element touched.
    unsafe {
        gemm::gemm(
            nq,
            nd,
            dim,
            out.as_mut_ptr(),
            1,
            nd as isize,
            false,
            queries.as_ptr(),
            1,
            dim as isize,
            docs.as_ptr(),
            dim as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small integer vectors: every dot product is exact in f32 whatever the
    /// summation order, so ties are real ties.
    fn random_case(seed: u64, n: usize, dim: usize, nq: usize) -> (ExactIndex, Vec<f32>) {
        let mut state = seed;
        let mut next = |m: u64| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) % m
        };
        // Ids of different lengths so that byte order matters.
        let ids: Vec<Arc<str>> = (0..n)
            .map(|i| Arc::from(format!("s{}", i * 7 % (n + 3))))
            .collect();
        let vectors: Vec<f32> = (0..n * dim).map(|_| next(4) as f32 - 1.0).collect();
        let queries: Vec<f32> = (0..nq * dim).map(|_| next(3) as f32 - 1.0).collect();
        (ExactIndex::new(ids, vectors, dim).unwrap(), queries)
    }

    fn brute_force(index: &ExactIndex, query: &[f32], k: usize) -> Vec<ScoredDoc> {
        let mut all: Vec<ScoredDoc> = (0..index.len())
            .map(|i| {
                let v = &index.vectors[i * index.dim..(i + 1) * index.dim];
                let s: f64 = v
                    .iter()
                    .zip(query)
                    .map(|(a, b)| f64::from(*a) * f64::from(*b))
                    .sum();
                ScoredDoc {
                    id: Arc::clone(&index.ids[i]),
                    score: s,
                }
            })
            .collect();
        eval::sort_trec(&mut all);
        all.truncate(k);
        all
    }

    #[test]
    fn equals_a_full_sort_with_ties() {
        for seed in 0..40u64 {
            let n = 1 + (seed as usize * 37) % 300;
            let dim = 1 + (seed as usize * 5) % 9;
            let (index, queries) = random_case(seed, n, dim, 40);
            for k in [1, 3, 10, 50, 400] {
                let got = index.search(&queries, k).unwrap();
                assert_eq!(got.len(), 40);
                for (q, hits) in got.iter().enumerate() {
                    let want = brute_force(&index, &queries[q * dim..(q + 1) * dim], k);
                    assert_eq!(
                        hits, &want,
                        "seed {seed}, n {n}, dim {dim}, k {k}, query {q}"
                    );
                }
            }
        }
    }

    #[test]
    fn spans_several_corpus_blocks() {
        let (index, queries) = random_case(7, DOC_BLOCK * 2 + 123, 4, 3);
        let got = index.search(&queries, 25).unwrap();
        for (q, hits) in got.iter().enumerate() {
            assert_eq!(hits, &brute_force(&index, &queries[q * 4..(q + 1) * 4], 25));
        }
    }

    #[test]
    fn scores_are_the_products_search_ranks_by() {
        let (index, queries) = random_case(3, DOC_BLOCK + 77, 5, 2);
        for q in queries.chunks_exact(5) {
            let scores = index.scores(q).unwrap();
            assert_eq!(scores.len(), index.len());
            for (i, score) in scores.iter().enumerate() {
                let v = &index.vectors[i * 5..(i + 1) * 5];
                let want: f32 = v.iter().zip(q).map(|(a, b)| a * b).sum();
                assert_eq!(*score, want, "document {i}");
            }
        }
        assert!(index.scores(&[1.0; 10]).is_err());
    }

    #[test]
    fn shapes_are_checked() {
        assert!(ExactIndex::new(vec![Arc::from("a")], vec![1.0; 3], 2).is_err());
        let (index, _) = random_case(1, 5, 3, 1);
        assert!(index.search(&[1.0; 4], 2).is_err());
    }
}
