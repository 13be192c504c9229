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
