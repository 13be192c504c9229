//! Where a model fails: each stage's scores broken down by the number of
//! gold skills a query needs, by query length, and by skill category where
//! the skill records carry one (`major`, `sub`), each group with its count
//! of queries, and where a reranker helps or hurts.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use eval::metrics::{Evaluation, Metric};
use eval::{Qrels, Query, Skill};
use serde_json::{Value, json};

use crate::ranking::Stage;

/// One way of grouping the queries.
pub(crate) struct Breakdown {
    /// `gold_skills`, `query_words`, `category` or `subcategory`.
    pub(crate) key: &'static str,
    /// Its title in report.md.
    pub(crate) title: &'static str,
    /// Label → the query ids in the group, groups in display order.
    pub(crate) groups: Vec<(String, Vec<String>)>,
}

/// The metrics of every group (at the cut-off `k`).
fn metrics(k: usize) -> [Metric; 3] {
    [Metric::Ndcg(k), Metric::Recall(k), Metric::Completeness(k)]
}

/// Every breakdown the data allows, over the scored queries.
pub(crate) fn breakdowns(
    qrels: &Qrels,
    queries: &[&Query],
    skills: &[Skill],
    scored: &[String],
) -> Vec<Breakdown> {
    let scored_set: std::collections::HashSet<&str> = scored.iter().map(String::as_str).collect();
    let queries: Vec<&Query> = queries
        .iter()
        .copied()
        .filter(|q| scored_set.contains(q.id.as_str()))
        .collect();
    let gold = |q: &Query| -> Vec<&str> {
        let mut ids: Vec<&str> = qrels
            .get(&q.id)
            .map(|j| {
                j.iter()
                    .filter(|(_, g)| **g > 0)
                    .map(|(id, _)| id.as_str())
                    .collect()
            })
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    };
    let mut out = Vec::new();

    let mut by_count: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for q in &queries {
        by_count
            .entry(gold(q).len().min(3))
            .or_default()
            .push(q.id.clone());
    }
    out.push(Breakdown {
        key: "gold_skills",
        title: "By number of gold skills per query",
        groups: by_count
            .into_iter()
            .map(|(n, ids)| {
                (
                    if n >= 3 {
                        "3+".to_owned()
                    } else {
                        n.to_string()
                    },
                    ids,
                )
            })
            .collect(),
    });

    // Length quartiles: queries by word count (ties by id), cut into four
    // groups of near-equal size.
    let mut by_length: Vec<(usize, &Query)> = queries
        .iter()
        .map(|q| (q.text.split_whitespace().count(), *q))
        .collect();
    by_length.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.id.cmp(&b.1.id)));
    let n = by_length.len();
    let mut quartiles = Vec::new();
    for i in 0..4 {
        let part = &by_length[i * n / 4..(i + 1) * n / 4];
        if let (Some(first), Some(last)) = (part.first(), part.last()) {
            quartiles.push((
                format!("Q{} ({}–{} words)", i + 1, first.0, last.0),
                part.iter().map(|(_, q)| q.id.clone()).collect(),
            ));
        }
    }
    out.push(Breakdown {
        key: "query_words",
        title: "By query length (quartiles of whitespace-separated words)",
        groups: quartiles,
    });

    // Categories: a query counts in the category of each of its gold skills.
    let by_id: HashMap<&str, &Skill> = skills.iter().map(|s| (s.id.as_str(), s)).collect();
    if skills.iter().any(|s| s.major.is_some()) {
        for (key, title, label) in [
            ("category", "By skill category (`major`)", 0),
            ("subcategory", "By skill subcategory (`major` / `sub`)", 1),
        ] {
            let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for q in &queries {
                let mut names: Vec<String> = gold(q)
                    .into_iter()
                    .map(|id| {
                        let skill = by_id.get(id);
                        let major = skill.and_then(|s| s.major.as_deref()).unwrap_or("(none)");
                        if label == 0 {
                            major.to_owned()
                        } else {
                            let sub = skill.and_then(|s| s.sub.as_deref()).unwrap_or("(none)");
                            format!("{major} / {sub}")
                        }
                    })
                    .collect();
                names.sort_unstable();
                names.dedup();
                for name in names {
                    groups.entry(name).or_default().push(q.id.clone());
                }
            }
            out.push(Breakdown {
                key,
                title,
                groups: groups.into_iter().collect(),
            });
        }
    }
    out
}

/// Per stage, the mean of each metric over a group's queries.
fn group_means(e: &Evaluation, ids: &[String], k: usize) -> Vec<f64> {
    let row: HashMap<&str, &[f64]> = e
        .per_query
        .iter()
        .map(|q| (q.query_id.as_str(), q.values.as_slice()))
        .collect();
    metrics(k)
        .iter()
        .map(|m| {
            let Some(i) = e.metrics.iter().position(|x| x == m) else {
                return f64::NAN;
            };
            let values: Vec<f64> = ids
                .iter()
                .filter_map(|id| row.get(id.as_str()).map(|v| v[i]))
                .collect();
            if values.is_empty() {
                f64::NAN
            } else {
                values.iter().sum::<f64>() / values.len() as f64
            }
        })
        .collect()
}

/// The cut-off the breakdowns use: 10 where computed, else the largest.
pub(crate) fn cutoff(ks: &[usize]) -> usize {
    if ks.contains(&10) {
        10
    } else {
        ks.iter().copied().max().unwrap_or(10)
    }
}

/// The Markdown section and the JSON of every breakdown.
pub(crate) fn render(
    breakdowns: &[Breakdown],
    stages: &[Stage],
    evals: &[Evaluation],
    k: usize,
) -> (String, Value) {
    let names = metrics(k);
    let steps: Vec<(usize, usize)> = stages
        .iter()
        .enumerate()
        .filter(|(_, s)| s.name == "reranker")
        .filter_map(|(i, s)| s.after.map(|from| (from, i)))
        .collect();
    let mut md = String::from("## Breakdowns\n\n");
    let _ = writeln!(
        md,
        "Each stage's {} per group of queries ({} too in results.json; a query may sit in several category groups: one per gold skill's category).\n",
        names[0],
        names[1..]
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(" and ")
    );
    let mut json_out = serde_json::Map::new();
    for b in breakdowns {
        let _ = write!(md, "### {}\n\n| group | queries |", b.title);
        for stage in stages {
            let _ = write!(md, " {} {} |", stage.name, names[0]);
        }
        for &(from, to) in &steps {
            let _ = write!(md, " Δ {} − {} |", stages[to].name, stages[from].name);
        }
        md.push_str("\n|---|---:|");
        for _ in 0..stages.len() + steps.len() {
            md.push_str("---:|");
        }
        md.push('\n');
        let mut groups_json = Vec::new();
        let (mut helps, mut hurts) = (Vec::new(), Vec::new());
        for (label, ids) in &b.groups {
            let means: Vec<Vec<f64>> = evals.iter().map(|e| group_means(e, ids, k)).collect();
            let _ = write!(md, "| {label} | {} |", ids.len());
            for m in &means {
                let _ = write!(md, " {:.4} |", m[0]);
            }
            for &(from, to) in &steps {
                let delta = means[to][0] - means[from][0];
                let _ = write!(md, " {delta:+.4} |");
                if delta > 1e-12 {
                    helps.push(format!("{label} ({delta:+.4})"));
                } else if delta < -1e-12 {
                    hurts.push(format!("{label} ({delta:+.4})"));
                }
            }
            md.push('\n');
            let mut per_stage = serde_json::Map::new();
            for (stage, m) in stages.iter().zip(&means) {
                let mut values = serde_json::Map::new();
                for (name, v) in names.iter().zip(m) {
                    values.insert(name.to_string(), json!(v));
                }
                per_stage.insert(stage.name.clone(), Value::Object(values));
            }
            groups_json.push(json!({"group": label, "queries": ids.len(), "scores": per_stage}));
        }
        if !steps.is_empty() {
            let list = |v: &[String]| {
                if v.is_empty() {
                    "none".to_owned()
                } else {
                    v.join(", ")
                }
            };
            let _ = writeln!(
                md,
                "\nThe reranker helps {} and hurts {} ({} of each group).",
                list(&helps),
                list(&hurts),
                names[0]
            );
        }
        md.push('\n');
        json_out.insert(b.key.to_owned(), Value::Array(groups_json));
    }
    (md, Value::Object(json_out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use eval::metrics::{Options, evaluate};
    use eval::{Run, ScoredDoc};

    fn skill(id: &str, major: Option<&str>, sub: Option<&str>) -> Skill {
        Skill {
            id: id.to_owned(),
            name: id.to_owned(),
            description: String::new(),
            skill_md: String::new(),
            major: major.map(str::to_owned),
            sub: sub.map(str::to_owned),
        }
    }

    fn query(id: &str, words: usize) -> Query {
        Query {
            id: id.to_owned(),
            text: vec!["w"; words].join(" "),
            labels: None,
        }
    }

    #[test]
    fn groups_by_gold_count_length_and_category_with_counts_and_the_rerankers_effect() {
        let skills = [
            skill("a", Some("devops"), Some("backup")),
            skill("b", Some("devops"), Some("alerts")),
            skill("c", Some("design"), None),
            skill("d", None, None),
        ];
        let queries = [
            query("q1", 3),
            query("q2", 10),
            query("q3", 30),
            query("q4", 5),
        ];
        let mut qrels = Qrels::default();
        for (q, d) in [
            ("q1", "a"),
            ("q2", "b"),
            ("q2", "c"),
            ("q3", "a"),
            ("q3", "b"),
            ("q3", "c"),
            ("q4", "d"),
        ] {
            qrels.insert(q.to_owned(), d.to_owned(), 1);
        }
        // The retriever finds every gold skill first; the "reranker" puts
        // a wrong one first for q1 only.
        let mut first = Run::default();
        let mut second = Run::default();
        for q in &queries {
            let gold: Vec<String> = qrels.get(&q.id).unwrap().keys().cloned().collect();
            let mut docs: Vec<ScoredDoc> = gold
                .iter()
                .map(|g| ScoredDoc::new(g.as_str(), 1.0))
                .collect();
            docs.push(ScoredDoc::new("x", 0.5));
            first.insert(q.id.clone(), docs.clone());
            if q.id == "q1" {
                docs.push(ScoredDoc::new("y", 9.0));
            }
            second.insert(q.id.clone(), docs);
        }
        let stages = [
            Stage {
                name: "retriever".to_owned(),
                run: first,
                after: None,
            },
            Stage {
                name: "reranker".to_owned(),
                run: second,
                after: Some(0),
            },
        ];
        let options = Options::default();
        let evals: Vec<Evaluation> = stages
            .iter()
            .map(|s| evaluate(&qrels, &s.run, &options))
            .collect();
        let refs: Vec<&Query> = queries.iter().collect();
        let scored: Vec<String> = evals[0]
            .per_query
            .iter()
            .map(|q| q.query_id.clone())
            .collect();
        let b = breakdowns(&qrels, &refs, &skills, &scored);
        let keys: Vec<&str> = b.iter().map(|x| x.key).collect();
        assert_eq!(
            keys,
            ["gold_skills", "query_words", "category", "subcategory"]
        );
        let counts = |i: usize| -> Vec<(String, usize)> {
            b[i].groups
                .iter()
                .map(|(l, ids)| (l.clone(), ids.len()))
                .collect()
        };
        assert_eq!(
            counts(0),
            [("1".into(), 2), ("2".into(), 1), ("3+".into(), 1)]
        );
        assert_eq!(counts(1).len(), 4, "quartiles of 4 queries");
        assert_eq!(counts(1)[0].0, "Q1 (3–3 words)");
        // q1 a(devops); q2 b(devops) c(design); q3 a b c; q4 d (none).
        assert_eq!(
            counts(2),
            [
                ("(none)".into(), 1),
                ("design".into(), 2),
                ("devops".into(), 3)
            ]
        );
        assert!(
            counts(3).contains(&("devops / backup".into(), 2)),
            "{:?}",
            counts(3)
        );
        let (md, json) = render(&b, &stages, &evals, 10);
        // The reranker hurt q1 only: in its groups, and nowhere else.
        assert!(md.contains("hurts 1 (-"), "{md}");
        assert!(md.contains("The reranker helps none"), "{md}");
        let one = &json["gold_skills"][0];
        assert_eq!(one["queries"], 2);
        assert_eq!(one["scores"]["retriever"]["NDCG@10"], 1.0);
        assert!(one["scores"]["reranker"]["NDCG@10"].as_f64().unwrap() < 1.0);
        assert_eq!(
            json["category"][1]["scores"]["reranker"]["NDCG@10"], 1.0,
            "design: untouched"
        );
        // Without categories in the records, no category breakdowns.
        let plain: Vec<Skill> = skills.iter().map(|s| skill(&s.id, None, None)).collect();
        assert_eq!(breakdowns(&qrels, &refs, &plain, &scored).len(), 2);
    }
}
