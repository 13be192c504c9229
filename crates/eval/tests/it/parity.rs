//! Metrics equal pytrec_eval's: per query on random runs with ties, graded
//! qrels and unjudged queries (fixture made by scripts/make_trec_parity_fixture.py),
//! and on average for the official SkillRet reference runs.

use std::collections::BTreeMap;

use eval::metrics::{Metric, Options, evaluate};
use eval::{Dataset, Qrels, Run};
use serde_json::Value;

use crate::{data, skillret_sample};

/// pytrec_eval's name for one of our metrics; `None` where trec_eval has no
/// such measure. Completeness is read from `recall_k == 1`.
fn pytrec_key(metric: Metric) -> Option<String> {
    Some(match metric {
        Metric::Ndcg(k) => format!("ndcg_cut_{k}"),
        Metric::Recall(k) | Metric::Completeness(k) => format!("recall_{k}"),
        Metric::Map(k) => format!("map_cut_{k}"),
        Metric::Precision(k) => format!("P_{k}"),
        Metric::HitRate(k) => format!("success_{k}"),
        Metric::Mrr => "recip_rank".to_owned(),
        _ => return None,
    })
}

fn check_against(expected: &Value, run: &Run, qrels: &Qrels, cutoffs: &[usize]) -> usize {
    let options = Options::default().with_cutoffs(cutoffs).unwrap();
    let result = evaluate(qrels, run, &options);
    let expected = expected.as_object().unwrap();
    let scored: Vec<&str> = result
        .per_query
        .iter()
        .map(|q| q.query_id.as_str())
        .collect();
    let mut reference: Vec<&str> = expected.keys().map(String::as_str).collect();
    reference.sort_unstable();
    assert_eq!(
        scored, reference,
        "the set of scored queries differs from pytrec_eval's"
    );

    let mut compared = 0;
    for query in &result.per_query {
        let want = &expected[&query.query_id];
        for (metric, &got) in result.metrics.iter().zip(&query.values) {
            let Some(key) = pytrec_key(*metric) else {
                continue;
            };
            let mut reference = want[&key].as_f64().unwrap();
            if let Metric::Completeness(_) = metric {
                reference = f64::from(u8::from(reference == 1.0));
            }
            assert!(
                (got - reference).abs() <= 1e-12,
                "{} {metric}: ours {got}, pytrec_eval {reference}",
                query.query_id
            );
            compared += 1;
        }
    }
    compared
}

#[test]
fn per_query_values_equal_pytrec_eval_on_random_runs() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(data("parity/expected.json")).unwrap())
            .unwrap();
    assert_eq!(expected["generated_by"]["tool"], "pytrec_eval-terrier");
    let cutoffs: Vec<usize> = expected["cutoffs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let qrels = Qrels::read_trec(&data("parity/qrels.trec")).unwrap();

    let run = Run::read_trec(&data("parity/run.trec")).unwrap();
    let compared = check_against(&expected["trec"], &run, &qrels, &cutoffs);
    assert!(compared > 3000, "only {compared} values compared");

    // The JSON run adds queries with empty rankings, which pytrec_eval scores as 0.
    let run = Run::read(&data("parity/run.json"), "test").unwrap();
    check_against(&expected["json"], &run, &qrels, &cutoffs);
}

#[test]
fn official_reference_metrics_are_reproduced() {
    let Some(sample) = skillret_sample() else {
        return;
    };
    let dataset = Dataset::load(&sample, "test").unwrap();
    for name in ["bm25", "minilm", "e5"] {
        let reference = sample.join(format!("reference/{name}.metrics.json"));
        let reference: BTreeMap<String, f64> =
            serde_json::from_str(&std::fs::read_to_string(reference).unwrap()).unwrap();
        let run = Run::read(&sample.join(format!("reference/{name}.run.trec")), "test").unwrap();
        let result = evaluate(&dataset.qrels, &run, &Options::default());
        let ours = result.summary_json(false);
        for (key, want) in &reference {
            let got = ours[key].as_f64().unwrap();
            assert!(
                (got - want).abs() <= 1e-9,
                "{name} {key}: ours {got}, official {want}"
            );
        }
        // Exactly the official keys, plus HitRate@k and MRR.
        let extra: Vec<&String> = ours
            .keys()
            .filter(|k| !reference.contains_key(*k))
            .collect();
        assert_eq!(extra, ["HitRate@5", "HitRate@10", "HitRate@15", "MRR"]);
    }
}
