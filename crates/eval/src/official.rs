//! The official SkillRet output JSON (`skillret/eval.py`, skillretbenchmark/SKILLRET at dbbdf22):
//! `{"metrics": {split: {...}}, "retrieval": {split: {query_id: {skill_id: score}}}}`, which the
//! official `eval_rerank` (and `pipeline rerank --run`) reads back as a first stage.

use std::fmt::Write as _;

use crate::metrics::{Evaluation, Metric};
use crate::run::{Run, sort_trec};

/// `eval.py`'s `trec_eval` keys and values for the cut-offs `ks`: every
/// `NDCG@k`, then `MAP@k`, `Recall@k`, `Precision@k` and `Completeness@k`,
/// each the mean rounded as Python's `round(x, 5)` rounds it. A metric the
/// evaluation lacks is left out.
pub fn metrics(evaluation: &Evaluation, ks: &[usize]) -> Vec<(String, f64)> {
    let families: [fn(usize) -> Metric; 5] = [
        Metric::Ndcg,
        Metric::Map,
        Metric::Recall,
        Metric::Precision,
        Metric::Completeness,
    ];
    let mut out = Vec::new();
    for family in families {
        for &k in ks {
            let metric = family(k);
            if let Some(v) = evaluation.mean_of(metric) {
                out.push((metric.to_string(), round5(v)));
            }
        }
    }
    out
}

/// Python's `round(x, 5)`: the double nearest to the decimal that is
/// nearest to `x`'s exact value (ties to even, on the exact value).
pub fn round5(x: f64) -> f64 {
    format!("{x:.5}").parse().unwrap_or(x)
}

/// The whole file, laid out as `json.dump(..., indent=2)` lays it out:
/// `metrics` (see [`metrics`]) and `retrieval`, each query's skills in rank
/// order (trec_eval's: score descending, ties by id descending), queries
/// in byte order.
pub fn to_json(split: &str, evaluation: &Evaluation, ks: &[usize], run: &Run) -> String {
    let key = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let number = |x: f64| serde_json::Value::from(x).to_string();
    let mut s = String::from("{\n  \"metrics\": {\n");
    let _ = writeln!(s, "    {}: {{", key(split));
    let values = metrics(evaluation, ks);
    for (i, (name, v)) in values.iter().enumerate() {
        let comma = if i + 1 < values.len() { "," } else { "" };
        let _ = writeln!(s, "      {}: {}{comma}", key(name), number(*v));
    }
    s.push_str("    }\n  },\n  \"retrieval\": {\n");
    let _ = write!(s, "    {}: {{", key(split));
    let queries = run.query_ids();
    for (i, query) in queries.iter().enumerate() {
        let mut docs = run.get(query).unwrap_or_default().to_vec();
        sort_trec(&mut docs);
        let _ = write!(s, "\n      {}: {{", key(query));
        for (j, doc) in docs.iter().enumerate() {
            let comma = if j + 1 < docs.len() { "," } else { "" };
            let _ = write!(
                s,
                "\n        {}: {}{comma}",
                key(&doc.id),
                number(doc.score)
            );
        }
        if !docs.is_empty() {
            s.push_str("\n      ");
        }
        s.push('}');
        if i + 1 < queries.len() {
            s.push(',');
        }
    }
    if !queries.is_empty() {
        s.push_str("\n    ");
    }
    s.push_str("}\n  }\n}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ScoredDoc;
    use crate::metrics::{Options, evaluate};
    use crate::qrels::Qrels;

    #[test]
    fn rounds_as_python_does() {
        // Python 3: round(0.123455, 5) = 0.12345 (the double is below the tie),
        // round(0.583215, 5) = 0.58322, round(1/3, 5) = 0.33333.
        assert_eq!(round5(0.123_455), 0.123_45);
        assert_eq!(round5(0.583_215), 0.583_22);
        assert_eq!(round5(1.0 / 3.0), 0.333_33);
        assert_eq!(round5(1.0), 1.0);
    }

    #[test]
    fn the_file_reads_back_as_the_same_run_in_rank_order() {
        let mut run = Run::default();
        run.insert(
            "q1".to_owned(),
            vec![
                ScoredDoc::new("b", 0.5),
                ScoredDoc::new("a", 0.9),
                ScoredDoc::new("c", 0.5),
            ],
        );
        run.insert("q2".to_owned(), Vec::new());
        let mut qrels = Qrels::default();
        qrels.insert("q1".to_owned(), "c".to_owned(), 1);
        qrels.insert("q2".to_owned(), "a".to_owned(), 1);
        let e = evaluate(&qrels, &run, &Options::default());
        let text = to_json("test", &e, &[5, 10, 15], &run);
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let m = &value["metrics"]["test"];
        let keys: Vec<&str> = m.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 15);
        assert_eq!(m["Recall@5"], 0.5, "q2 retrieved nothing: scored 0");
        assert_eq!(m["Completeness@5"], 0.5);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        std::fs::write(&path, &text).unwrap();
        let back = Run::read(&path, "test").unwrap();
        let ids: Vec<&str> = back.get("q1").unwrap().iter().map(|d| &*d.id).collect();
        // Rank order; the tie at 0.5 by id descending, as trec_eval.
        assert_eq!(ids, ["a", "c", "b"]);
        assert_eq!(back.get("q2").unwrap().len(), 0);
        assert!(text.starts_with("{\n  \"metrics\": {\n    \"test\": {\n      \"NDCG@5\": "));
    }
}
