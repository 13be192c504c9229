//! Synthetic unit vectors for HNSW tests and the index benchmark.
//!
//! Text embeddings fill few of their dimensions (their intrinsic dimension is
//! tens, not hundreds), and they cluster. So points are drawn from a mixture of
//! Gaussian clusters in a `rank`-dimensional latent space, mapped into `dim`
//! dimensions by a fixed random matrix, given a little isotropic noise in all
//! `dim` dimensions, and normalised. `rank == dim` with no mapping gives a plain
//! isotropic mixture, the hardest case for any graph index.

use rand::{Rng, SeedableRng, rngs::StdRng};
use rand_distr::StandardNormal;

/// Isotropic noise added in the full space, relative to the signal's length.
const AMBIENT_NOISE: f32 = 0.1;

/// A fixed distribution of unit vectors.
pub(crate) struct Mixture {
    dim: usize,
    rank: usize,
    spread: f32,
    centres: Vec<f32>,
    /// `dim × rank`, row-major; empty when `rank == dim` (no mapping).
    map: Vec<f32>,
}

impl Mixture {
    /// `clusters` centres in a `rank`-dimensional latent space; points lie
    /// around them with noise of length about `spread` (centres have length 1).
    pub(crate) fn new(dim: usize, rank: usize, clusters: usize, spread: f32, seed: u64) -> Self {
        let rank = rank.clamp(1, dim);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut centres = gaussian(&mut rng, clusters * rank, 1.0);
        normalise(&mut centres, rank);
        let map = if rank == dim {
            Vec::new()
        } else {
            gaussian(&mut rng, dim * rank, 1.0 / (rank as f32).sqrt())
        };
        Self {
            dim,
            rank,
            spread,
            centres,
            map,
        }
    }

    /// `n` unit vectors, row after row, drawn from `seed`.
    pub(crate) fn sample(&self, n: usize, seed: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(seed);
        let clusters = self.centres.len() / self.rank;
        let sigma = self.spread / (self.rank as f32).sqrt();
        let ambient = AMBIENT_NOISE / (self.dim as f32).sqrt();
        let mut latent = vec![0.0f32; self.rank];
        let mut out = Vec::with_capacity(n * self.dim);
        for _ in 0..n {
            let c = rng.random_range(0..clusters);
            let centre = &self.centres[c * self.rank..(c + 1) * self.rank];
            for (z, &x) in latent.iter_mut().zip(centre) {
                *z = x + sigma * rng.sample::<f32, _>(StandardNormal);
            }
            if self.map.is_empty() {
                out.extend_from_slice(&latent);
            } else {
                for row in self.map.chunks_exact(self.rank) {
                    let signal: f32 = row.iter().zip(&latent).map(|(a, b)| a * b).sum();
                    out.push(signal + ambient * rng.sample::<f32, _>(StandardNormal));
                }
            }
        }
        normalise(&mut out, self.dim);
        out
    }
}

fn gaussian(rng: &mut StdRng, n: usize, sigma: f32) -> Vec<f32> {
    (0..n)
        .map(|_| sigma * rng.sample::<f32, _>(StandardNormal))
        .collect()
}

fn normalise(values: &mut [f32], dim: usize) {
    for row in values.chunks_exact_mut(dim) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        for x in row {
            *x /= norm;
        }
    }
}
