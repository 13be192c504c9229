//! Significance of a difference between two systems on the same queries.

/// Two-sided paired randomization (permutation) test of the mean difference
/// `b − a` over paired per-query scores: each of `trials` rounds flips the
/// sign of every query's difference with probability ½ (Fisher; Smucker,
/// Allan and Carterette, CIKM 2007). Returns the share of rounds whose |mean|
/// reaches the observed |mean|, counting the observed arrangement itself
/// (so the p-value is never 0). Deterministic for a given `seed`.
pub fn paired_randomization_test(a: &[f64], b: &[f64], trials: usize, seed: u64) -> f64 {
    assert_eq!(a.len(), b.len(), "paired scores");
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    if diffs.is_empty() || trials == 0 {
        return 1.0;
    }
    let observed = diffs.iter().sum::<f64>().abs();
    // A hair of slack so that rounding does not hide an equal arrangement.
    let bar = observed - 1e-12 * observed.max(1.0);
    let mut state = seed;
    let mut at_least = 1usize;
    for _ in 0..trials {
        let mut sum = 0.0;
        let mut bits = 0u64;
        for (i, d) in diffs.iter().enumerate() {
            if i % 64 == 0 {
                bits = splitmix64(&mut state);
            }
            sum += if bits >> (i % 64) & 1 == 1 { *d } else { -*d };
        }
        if sum.abs() >= bar {
            at_least += 1;
        }
    }
    at_least as f64 / (trials + 1) as f64
}

/// How many of the paired scores `b` beats `a` on, ties with (within
/// 1e-12) and loses to: (wins, ties, losses).
pub fn wins_ties_losses(a: &[f64], b: &[f64]) -> (usize, usize, usize) {
    assert_eq!(a.len(), b.len(), "paired scores");
    let (mut wins, mut ties, mut losses) = (0, 0, 0);
    for (x, y) in a.iter().zip(b) {
        if (y - x).abs() <= 1e-12 {
            ties += 1;
        } else if y > x {
            wins += 1;
        } else {
            losses += 1;
        }
    }
    (wins, ties, losses)
}

/// A 95% (or `level`) percentile bootstrap interval of the mean of `values`
/// (Efron): `resamples` draws of as many values with replacement, the
/// interval between the `(1 − level)/2` and `(1 + level)/2` quantiles of
/// their means. For a change between two systems on the same queries, pass
/// the per-query differences (the paired bootstrap). Deterministic for a
/// given `seed`; `(NaN, NaN)` for no values.
pub fn bootstrap_interval(values: &[f64], resamples: usize, level: f64, seed: u64) -> (f64, f64) {
    let n = values.len();
    if n == 0 || resamples == 0 {
        return (f64::NAN, f64::NAN);
    }
    let mut state = seed;
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| {
            let mut sum = 0.0;
            for _ in 0..n {
                // An index in [0, n) from the high bits of a 64-bit draw.
                let i = ((u128::from(splitmix64(&mut state)) * n as u128) >> 64) as usize;
                sum += values[i];
            }
            sum / n as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| {
        // The nearest-rank quantile: the ⌈q·B⌉-th smallest mean.
        let rank = (q * resamples as f64).ceil().max(1.0) as usize;
        means[rank.min(resamples) - 1]
    };
    (at((1.0 - level) / 2.0), at((1.0 + level) / 2.0))
}

/// Holm's step-down adjustment of `p` values tested together (Holm 1979):
/// the i-th smallest becomes `max over j ≤ i of min(1, (m − j + 1)·p₍ⱼ₎)`.
/// Returned in the order given. It controls the family-wise error rate
/// without assuming independence.
pub fn holm(p: &[f64]) -> Vec<f64> {
    let m = p.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p[a].total_cmp(&p[b]));
    let mut adjusted = vec![0.0; m];
    let mut running: f64 = 0.0;
    for (j, &i) in order.iter().enumerate() {
        running = running.max(((m - j) as f64 * p[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_systems_are_not_different() {
        let a = [0.1, 0.5, 0.9, 0.3];
        assert_eq!(paired_randomization_test(&a, &a, 1000, 1), 1.0);
    }

    #[test]
    fn a_consistent_gain_is_significant_and_a_mixed_one_is_not() {
        let a: Vec<f64> = (0..30).map(|i| f64::from(i) / 40.0).collect();
        let better: Vec<f64> = a.iter().map(|x| x + 0.2).collect();
        let p = paired_randomization_test(&a, &better, 5000, 7);
        // All 30 signs flipped the same way: 2 of 2^30 arrangements.
        assert!(p < 0.001, "{p}");
        let mixed: Vec<f64> = a
            .iter()
            .enumerate()
            .map(|(i, x)| if i % 2 == 0 { x + 0.2 } else { x - 0.2 })
            .collect();
        let p = paired_randomization_test(&a, &mixed, 5000, 7);
        assert!(p > 0.5, "{p}");
    }

    #[test]
    fn the_bootstrap_interval_covers_the_mean_and_narrows_with_more_queries() {
        // Constant values: every resample has the same mean.
        assert_eq!(bootstrap_interval(&[0.25; 10], 1000, 0.95, 1), (0.25, 0.25));
        assert!(bootstrap_interval(&[], 1000, 0.95, 1).0.is_nan());
        // Differences of ±1 in equal numbers: mean 0, standard error 1/√n, so
        // the 95% interval is about ±1.96/√n.
        for n in [100usize, 400] {
            let d: Vec<f64> = (0..n)
                .map(|i| if i % 2 == 0 { 1.0 } else { -1.0 })
                .collect();
            let (lo, hi) = bootstrap_interval(&d, 4000, 0.95, 9);
            let half = 1.96 / (n as f64).sqrt();
            assert!(lo < 0.0 && hi > 0.0, "{lo} {hi}");
            assert!((hi - half).abs() < 0.25 * half, "{n}: {hi} against {half}");
            assert!((lo + half).abs() < 0.25 * half, "{n}: {lo} against {half}");
            // Deterministic for a seed.
            assert_eq!((lo, hi), bootstrap_interval(&d, 4000, 0.95, 9));
        }
    }

    #[test]
    fn wins_ties_and_losses_count_each_pair_once() {
        assert_eq!(
            wins_ties_losses(&[0.1, 0.5, 0.5, 0.9], &[0.2, 0.5, 0.4, 0.9 + 1e-13]),
            (1, 2, 1)
        );
    }

    #[test]
    fn holm_adjusts_step_down_and_keeps_the_order_given() {
        // m = 4: sorted 0.01, 0.02, 0.03, 0.5 → 0.04, 0.06, 0.06 (monotone), 0.5.
        let adjusted = holm(&[0.03, 0.5, 0.01, 0.02]);
        let expected = [0.06, 0.5, 0.04, 0.06];
        for (a, e) in adjusted.iter().zip(expected) {
            assert!((a - e).abs() < 1e-12, "{adjusted:?}");
        }
        assert_eq!(holm(&[0.9, 0.8]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn exact_for_a_tiny_case() {
        // Differences (1, 1): 4 sign patterns, 2 reach |2|: p = 1/2. With many
        // trials the estimate is close, and the same seed gives the same p.
        let p = paired_randomization_test(&[0.0, 0.0], &[1.0, 1.0], 20_000, 3);
        assert!((p - 0.5).abs() < 0.02, "{p}");
        assert_eq!(
            p,
            paired_randomization_test(&[0.0, 0.0], &[1.0, 1.0], 20_000, 3)
        );
    }
}
