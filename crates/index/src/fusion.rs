//! Reciprocal-rank fusion of candidate lists (Cormack, Clarke and Büttcher,
//! SIGIR 2009): a document's fused score is Σ 1 / (k + rank) over the lists
//! that hold it, ranks counted from 1 in each list's trec_eval order.

use std::collections::HashMap;
use std::sync::Arc;

use eval::ScoredDoc;

/// The constant k of reciprocal-rank fusion in the paper and most toolkits.
pub const DEFAULT_K: f64 = 60.0;

/// Fuses rankings into one, best first (ties by id descending), cut to `depth`.
pub fn reciprocal_rank_fusion(lists: &[&[ScoredDoc]], k: f64, depth: usize) -> Vec<ScoredDoc> {
    let mut fused: HashMap<Arc<str>, f64> = HashMap::new();
    for list in lists {
        let mut ranked = list.to_vec();
        eval::sort_trec(&mut ranked);
        for (rank, doc) in ranked.iter().enumerate() {
            *fused.entry(Arc::clone(&doc.id)).or_default() += 1.0 / (k + (rank + 1) as f64);
        }
    }
    let mut out: Vec<ScoredDoc> = fused
        .into_iter()
        .map(|(id, score)| ScoredDoc { id, score })
        .collect();
    eval::sort_trec(&mut out);
    out.truncate(depth);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(ids: &[&str]) -> Vec<ScoredDoc> {
        ids.iter()
            .enumerate()
            .map(|(i, id)| ScoredDoc::new(*id, 10.0 - i as f64))
            .collect()
    }

    #[test]
    fn fuses_by_reciprocal_rank() {
        let bm25 = list(&["a", "b", "c"]);
        let dense = list(&["c", "a", "d"]);
        let fused = reciprocal_rank_fusion(&[&bm25, &dense], 60.0, 10);
        let ids: Vec<&str> = fused.iter().map(|d| &*d.id).collect();
        // a: 1/61 + 1/62; c: 1/63 + 1/61; b: 1/62; d: 1/63.
        assert_eq!(ids, ["a", "c", "b", "d"]);
        assert!((fused[0].score - (1.0 / 61.0 + 1.0 / 62.0)).abs() < 1e-15);
        assert_eq!(reciprocal_rank_fusion(&[&bm25, &dense], 60.0, 2).len(), 2);
    }

    #[test]
    fn equal_fused_scores_order_by_id_descending() {
        let x = list(&["a", "b"]);
        let y = list(&["b", "a"]);
        let fused = reciprocal_rank_fusion(&[&x, &y], 60.0, 10);
        assert_eq!(&*fused[0].id, "b");
    }
}
