//! The HTML report: `pipeline run`'s report.html, `pipeline report` and the
//! sweep's leaderboard.html, their data checked against the run's own files,
//! and the page checked in a real browser (headless Chromium through
//! Playwright, `tests/browser/check_report.py`).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture, installed, path, pipeline, root, text};
use serde_json::Value;

/// The shared sample (2,851 real skills, 24 queries), where it is.
fn sample() -> Option<PathBuf> {
    let dir = root().join("../shared/skillret-sample");
    if dir.join("skills/test.jsonl").is_file() {
        Some(dir)
    } else {
        eprintln!("skipping: {} is absent", dir.display());
        None
    }
}

/// `pipeline run` of `config` (cache in `dir`) on `data` into `dir/out`.
fn run(dir: &Path, config: &str, data: &Path, out: &str) -> PathBuf {
    let file = dir.join(format!("{out}.toml"));
    std::fs::write(
        &file,
        format!(
            "{config}\n[output]\ncache = \"{}\"\n",
            dir.join("cache").display()
        ),
    )
    .unwrap();
    let result = pipeline(&[
        "run",
        "--config",
        path(&file),
        "--data",
        path(data),
        "--out",
        path(&dir.join(out)),
    ]);
    assert!(result.status.success(), "{}", text(&result.stderr));
    dir.join(out)
}

/// BM25's top 20 reranked by the tiny TEST cross-encoder (its scores mean
/// nothing: it exercises the machinery, in a fraction of a second).
fn bm25_and_reranker() -> Option<String> {
    let model = installed("test-tiny-bert")?;
    Some(format!(
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\ntop_n = 20\n\
         [reranker]\nmodel = \"{}\"\ntop_n = 20\nmax_length = 128\n",
        model.display()
    ))
}

/// The JSON block of a report page.
fn page_data(html: &str) -> Value {
    let start = html
        .find("<script type=\"application/json\" id=\"data\">")
        .expect("the data block")
        + "<script type=\"application/json\" id=\"data\">".len();
    let end = start + html[start..].find("</script>").expect("its end");
    serde_json::from_str(&html[start..end]).expect("the block is JSON")
}

#[test]
fn the_report_of_a_run_agrees_with_its_files_and_is_deterministic() {
    let (Some(sample), Some(config)) = (sample(), bm25_and_reranker()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let a = run(dir.path(), &config, &sample, "a");
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(html.starts_with("<!doctype html>"));
    // Self-contained: nothing loaded from elsewhere.
    for remote in ["src=\"http", "href=\"http", "@import", "url(http"] {
        assert!(!html.contains(remote), "{remote}");
    }
    let data = page_data(&html);
    let metrics: Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("metrics.json")).unwrap()).unwrap();
    let stages = data["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2);
    for stage in stages {
        let name = stage["name"].as_str().unwrap();
        for key in ["NDCG@10", "Recall@5", "Completeness@15", "MRR"] {
            let (page, file) = (
                stage["metrics"][key].as_f64().unwrap(),
                metrics[name][key].as_f64().unwrap(),
            );
            assert!((page - file).abs() < 1e-6, "{name} {key}: {page} {file}");
        }
    }
    // The reranker's change: its interval holds its mean, its p-value is
    // results.json's.
    let change = &data["changes"][0];
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("results.json")).unwrap()).unwrap();
    assert_eq!(
        change["p"],
        serde_json::json!((results["changes"][0]["p"].as_f64().unwrap() * 1e6).round() / 1e6)
    );
    for row in change["rows"].as_array().unwrap() {
        let (d, lo, hi) = (
            row["delta"].as_f64().unwrap(),
            row["lo"].as_f64().unwrap(),
            row["hi"].as_f64().unwrap(),
        );
        assert!(lo <= d + 1e-9 && d <= hi + 1e-9, "{row}");
    }
    // The pool: the reranker reorders BM25's top 20; reranking all 20 by the
    // stored scores gives the reranker's NDCG@10 and Recall@10 again, and
    // the oracle is at least both stages.
    let pool = &change["pool"];
    assert_eq!(pool["depth"], 20);
    let by_depth = pool["by_depth"]["ndcg"].as_array().unwrap();
    assert_eq!(by_depth.len(), 20);
    let last = by_depth[19].as_f64().unwrap();
    assert!((last - metrics["reranker"]["NDCG@10"].as_f64().unwrap()).abs() < 1e-6);
    let recall_last = pool["by_depth"]["recall"][19].as_f64().unwrap();
    assert!((recall_last - metrics["reranker"]["Recall@10"].as_f64().unwrap()).abs() < 1e-6);
    let oracle = pool["oracle"].as_f64().unwrap();
    for stage in ["retriever", "reranker"] {
        assert!(oracle + 1e-9 >= metrics[stage]["NDCG@10"].as_f64().unwrap());
    }
    // Recall@20 of the first stage is the pool's recall.
    let recall_20 = pipeline(&[
        "eval",
        "--qrels",
        path(&sample),
        "--run",
        path(&a.join("run.retriever.trec")),
        "--k",
        "20",
        "--format",
        "json",
    ]);
    let recall_20: Value = serde_json::from_slice(&recall_20.stdout).unwrap();
    assert!(
        (pool["recall"].as_f64().unwrap() - recall_20["Recall@20"].as_f64().unwrap()).abs() < 1e-6
    );
    // Every query: a class that agrees with its gold ranks and its scores.
    let queries = data["queries"].as_array().unwrap();
    assert_eq!(queries.len(), 24);
    for q in queries {
        let ranks = &q["ranks"][0];
        let in_pool = ranks
            .as_array()
            .unwrap()
            .iter()
            .any(|r| (1..=20).contains(&r.as_u64().unwrap()));
        let (x, y) = (
            q["ndcg"][0].as_f64().unwrap(),
            q["ndcg"][1].as_f64().unwrap(),
        );
        let class = q["class"][0].as_str().unwrap();
        let expected = if !in_pool {
            "retriever miss"
        } else if y > x + 1e-12 {
            "rescued"
        } else if y < x - 1e-12 {
            "harmed"
        } else if x <= 1e-12 {
            "both miss"
        } else {
            "unchanged"
        };
        assert_eq!(class, expected, "{}", q["id"]);
    }
    // Slices: one group per gold count at least, Holm never below the raw p.
    for slice in data["slices"].as_array().unwrap() {
        for g in slice["groups"].as_array().unwrap() {
            let c = &g["changes"][0];
            if let (Some(p), Some(holm)) = (c["p"].as_f64(), c["p_holm"].as_f64()) {
                assert!(holm + 1e-9 >= p, "{g}");
            }
        }
    }
    // The same run gives the same bytes; `pipeline report` rebuilds the
    // same data from the directory.
    let b = run(dir.path(), &config, &sample, "a-again");
    let again = std::fs::read_to_string(b.join("report.html")).unwrap();
    let title = |h: &str| h.replace("a-again.toml", "a.toml");
    assert_eq!(title(&again), html, "identical runs, different report.html");
    let rebuilt = dir.path().join("rebuilt.html");
    let out = pipeline(&["report", path(&a), "--out", path(&rebuilt)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut rebuilt = page_data(&std::fs::read_to_string(&rebuilt).unwrap());
    let mut original = data.clone();
    for d in [&mut rebuilt, &mut original] {
        for key in ["about", "links", "title"] {
            d.as_object_mut().unwrap().remove(key);
        }
    }
    assert_eq!(
        rebuilt, original,
        "pipeline report differs from pipeline run"
    );

    // Two runs compare like two stages: BM25 alone, then the reranker run.
    let bm25 = run(
        dir.path(),
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\ntop_n = 20\n",
        &sample,
        "bm25",
    );
    let both = dir.path().join("both.html");
    let out = pipeline(&["report", path(&bm25), path(&a), "--out", path(&both)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let both = page_data(&std::fs::read_to_string(&both).unwrap());
    assert_eq!(both["stages"][0]["name"], "bm25");
    assert_eq!(both["stages"][1]["name"], "a");
    assert_eq!(both["changes"][0]["pool"]["depth"], 20);
    // Several runs need --out; a directory that is not a run is named.
    let out = pipeline(&["report", path(&bm25), path(&a)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--out FILE is needed"),
        "{}",
        text(&out.stderr)
    );
    let help = text(&pipeline(&["report", "--help"]).stdout);
    for needle in ["--out", "--data", "Examples:", "file://"] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
    let out = pipeline(&["report", path(dir.path())]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is ")
            && text(&out.stderr).contains("a `pipeline run` output directory"),
        "{}",
        text(&out.stderr)
    );
}

/// A dataset whose one skill carries markup and a script in its name,
/// description and body, gold for the only query.
fn hostile_data(dir: &Path) -> PathBuf {
    let data = dir.join("hostile-data");
    for sub in ["skills", "queries", "qrels"] {
        std::fs::create_dir_all(data.join(sub)).unwrap();
    }
    let evil = "</script><img src=x onerror=\"window.pwned=1;document.title='pwned'\"><!--";
    let skills = [
        serde_json::json!({"id": "hostile", "name": format!("pdf {evil}"),
            "description": format!("Merge PDF tables {evil}"),
            "skill_md": format!("# PDF tables\n\nMerge the tables of PDF reports.\n\n{evil}\n\u{2028}&amp;")}),
        serde_json::json!({"id": "plain", "name": "dates", "description": "Format dates.",
            "skill_md": "# Dates\n\nFormat dates."}),
    ];
    let lines: Vec<String> = skills.iter().map(Value::to_string).collect();
    std::fs::write(data.join("skills/test.jsonl"), lines.join("\n") + "\n").unwrap();
    let query = serde_json::json!({"id": "q-1",
        "query": format!("merge the tables of two PDF reports. Then {evil} done.")});
    std::fs::write(data.join("queries/test.jsonl"), format!("{query}\n")).unwrap();
    std::fs::write(
        data.join("qrels/test.jsonl"),
        "{\"query_id\": \"q-1\", \"skill_id\": \"hostile\", \"relevance\": 1}\n",
    )
    .unwrap();
    data
}

/// The page in Chromium: `tests/browser/check_report.py` (see its header).
/// Skipped where Playwright or Chromium is missing, unless BROWSER_REQUIRED=1.
#[test]
fn the_report_works_in_a_real_browser() {
    let (Some(sample), Some(config)) = (sample(), bm25_and_reranker()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // With query focus (its view and the query view's intent marks are checked too).
    let focus = "[analysis]\nquery_focus = true\n";
    let a = run(dir.path(), &format!("{config}{focus}"), &sample, "a");
    let hostile = run(
        dir.path(),
        &format!("[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\ntop_n = 2\n{focus}"),
        &hostile_data(dir.path()),
        "hostile",
    );
    let sweep = sweep(dir.path());
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("tests/browser/check_report.py"))
        .arg(&a)
        .arg("--hostile")
        .arg(&hostile)
        .arg("--leaderboard")
        .arg(&sweep);
    if let Some(shots) = std::env::var_os("REPORT_SCREENSHOTS") {
        cmd.arg("--screenshots").arg(shots);
    }
    let out = cmd.output().expect("python3 runs");
    let log = text(&out.stdout) + &text(&out.stderr);
    match out.status.code() {
        Some(0) => assert!(log.contains("browser checks passed"), "{log}"),
        Some(2) if std::env::var("BROWSER_REQUIRED").as_deref() != Ok("1") => {
            eprintln!("{log}");
        }
        _ => panic!("{log}"),
    }
}

/// A sweep of two BM25 configurations on the tiny fixture, into `dir/sweep`.
fn sweep(dir: &Path) -> PathBuf {
    let configs = dir.join("configs");
    std::fs::create_dir_all(&configs).unwrap();
    let cache = format!("\n[output]\ncache = \"{}\"\n", dir.join("cache").display());
    std::fs::write(
        configs.join("bm25.toml"),
        format!(
            "[data]\ndir = \"{}\"\n[retriever]\nkind = \"bm25\"\n{cache}",
            fixture("tiny").display()
        ),
    )
    .unwrap();
    std::fs::write(
        configs.join("bm25-b.toml"),
        format!(
            "[data]\ndir = \"{}\"\n[retriever]\nkind = \"bm25\"\ntop_n = 5\n{cache}",
            fixture("tiny").display()
        ),
    )
    .unwrap();
    let out_dir = dir.join("sweep");
    let out = pipeline(&[
        "sweep",
        "--configs",
        &format!("{}/*.toml", configs.display()),
        "--out",
        path(&out_dir),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    out_dir
}

#[test]
fn a_sweep_writes_a_leaderboard_page_linking_each_report() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = sweep(dir.path());
    let html = std::fs::read_to_string(out_dir.join("leaderboard.html")).unwrap();
    let data = page_data(&html);
    assert_eq!(data["kind"], "leaderboard");
    let rows = data["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    for row in rows {
        let report = out_dir.join(row["report"].as_str().unwrap());
        assert!(report.is_file(), "{}", report.display());
        let (v, lo, hi) = (
            row["value"].as_f64().unwrap(),
            row["lo"].as_f64().unwrap(),
            row["hi"].as_f64().unwrap(),
        );
        assert!(lo <= v + 1e-9 && v <= hi + 1e-9, "{row}");
    }
    // Tiers start at 1 and rise by at most one a row, down the ranking.
    let tiers: Vec<u64> = rows.iter().map(|r| r["tier"].as_u64().unwrap()).collect();
    assert_eq!(tiers[0], 1);
    assert!(
        tiers.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1),
        "{tiers:?}"
    );
}

/// What the fuzzer found in results.json (issue 54): a `protocol.k` with a 0 made `pipeline
/// report` fail with an error naming no file. Each cut-off is checked where it is read.
#[test]
fn a_report_refuses_cut_offs_it_cannot_use_naming_results_json() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\ntop_n = 20\n",
        &fixture("tiny"),
        "bm25",
    );
    let results = out.join("results.json");
    let good: Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    for k in [
        serde_json::json!([0, 10, 15]),
        serde_json::json!([]),
        serde_json::json!([5, "ten"]),
        serde_json::json!(1_000_001),
    ] {
        let mut bad = good.clone();
        bad["protocol"]["k"] = k.clone();
        std::fs::write(&results, bad.to_string()).unwrap();
        let html = dir.path().join("report.html");
        let result = pipeline(&["report", path(&out), "--out", path(&html)]);
        assert_eq!(result.status.code(), Some(1), "{k}");
        let err = text(&result.stderr);
        assert!(
            err.contains(&format!("{}: `protocol.k` is {k}", results.display())),
            "{err}"
        );
        assert!(!html.exists(), "{k}: a page was written");
    }
}
