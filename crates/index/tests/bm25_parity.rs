//! BM25 reproduces the official SkillRet baseline (bm25s 0.3.16) on the
//! shared sample: the top-20 ids per query agree for ≥ 99% of (query, rank)
//! pairs, scores within 1e-4.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use std::path::Path;
use std::sync::Arc;

use index::bm25::{Bm25, Bm25Params};

#[test]
fn top_20_matches_the_official_bm25_run() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/skillret-sample");
    if !sample.join("skills/test.jsonl").is_file() {
        eprintln!("skipping: {} is absent", sample.display());
        return;
    }
    let data = eval::Dataset::load(&sample, "test").unwrap();
    let ids: Vec<Arc<str>> = data
        .skills
        .iter()
        .map(|s| Arc::from(s.id.as_str()))
        .collect();
    let texts: Vec<String> = data.skills.iter().map(eval::Skill::text).collect();
    let bm25 = Bm25::new(ids, &texts, Bm25Params::default());
    let reference = eval::Run::read_trec(&sample.join("reference/bm25.run.trec")).unwrap();

    let (mut pairs, mut same, mut worst) = (0, 0, 0.0f64);
    for query in &data.queries {
        let ours = bm25.search(&query.text, 20);
        let mut theirs = reference.get(&query.id).unwrap().to_vec();
        eval::sort_trec(&mut theirs);
        for (rank, want) in theirs.iter().enumerate() {
            pairs += 1;
            if let Some(got) = ours.get(rank).filter(|got| got.id == want.id) {
                same += 1;
                worst = worst.max((got.score - want.score).abs());
            }
        }
        assert_eq!(ours.len(), theirs.len(), "{}: result count", query.id);
    }
    let agreement = f64::from(same) / f64::from(pairs);
    eprintln!("{same}/{pairs} (query, rank) pairs agree; worst score difference {worst:e}");
    assert!(
        agreement >= 0.99,
        "only {agreement} of (query, rank) pairs agree"
    );
    assert!(worst <= 1e-4, "scores differ by {worst}");
}
