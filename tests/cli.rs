//! End-to-end tests of the `pipeline` command on the shipped tiny fixture.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use common::{fixture, installed, path, pipeline, root, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

#[test]
fn eval_json_has_exactly_the_official_keys_and_the_extras() {
    let tiny = fixture("tiny");
    let run = fixture("tiny/runs/lexical.run.trec");
    let out = pipeline(&[
        "eval",
        "--qrels",
        path(&tiny),
        "--run",
        path(&run),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap();
    let mut expected = Vec::new();
    for k in [5, 10, 15] {
        for name in ["NDCG", "Recall", "MAP", "Precision", "Completeness"] {
            expected.push(format!("{name}@{k}"));
        }
    }
    expected.extend(["HitRate@5", "HitRate@10", "HitRate@15", "MRR", "queries"].map(String::from));
    assert_eq!(json.keys().cloned().collect::<Vec<_>>(), expected);
    assert_eq!(json["queries"], 5);
    // t-1 finds its skill first; t-2's skill ties with one listed before it and
    // wins by id descending (trec_eval's rule); t-3 has one of two relevant
    // skills first and the other sixth; t-4 finds it second; t-5 misses.
    assert_eq!(
        json["MRR"].as_f64().unwrap(),
        (1.0 + 1.0 + 1.0 + 0.5 + 0.0) / 5.0
    );
    assert_eq!(json["Completeness@5"].as_f64().unwrap(), 3.0 / 5.0);
    assert_eq!(json["Completeness@10"].as_f64().unwrap(), 4.0 / 5.0);

    // The official output JSON of the same ranking gives the same bytes.
    let official = fixture("tiny/runs/lexical.official.json");
    let again = pipeline(&[
        "eval",
        "--qrels",
        path(&tiny),
        "--run",
        path(&official),
        "--format",
        "json",
    ]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(out.stdout, again.stdout);
}

#[test]
fn eval_table_and_per_query_tsv() {
    let dir = tempfile::tempdir().unwrap();
    let tsv = dir.path().join("per_query.tsv");
    let out = pipeline(&[
        "eval",
        "--qrels",
        path(&fixture("tiny/qrels/test.jsonl")),
        "--run",
        path(&fixture("tiny/runs/lexical.run.trec")),
        "--k",
        "1,3",
        "--per-query",
        path(&tsv),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(table.starts_with("5 queries scored"), "{table}");
    assert!(
        table.contains("NDCG") && table.contains("Completeness"),
        "{table}"
    );
    assert!(table.contains("MRR 0.7000"), "{table}");

    let tsv = std::fs::read_to_string(&tsv).unwrap();
    let rows: Vec<Vec<&str>> = tsv.lines().map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), 6);
    assert_eq!(rows[0][..3], ["query_id", "NDCG@1", "Recall@1"]);
    assert_eq!(rows[1][0], "t-1");
    let mrr = rows[0].iter().position(|h| *h == "MRR").unwrap();
    let per_query: Vec<&str> = rows[1..].iter().map(|r| r[mrr]).collect();
    assert_eq!(per_query, ["1", "1", "1", "0.5", "0"]);
}

#[test]
fn bad_input_exits_non_zero_naming_file_line_and_field_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("bad.trec");
    std::fs::write(
        &run,
        "t-1 Q0 tiny.k8s-backup 1 9.5 x\nt-1 Q0 tiny.sql-tuning 2 four x\n",
    )
    .unwrap();
    let tsv = dir.path().join("per_query.tsv");
    let out = pipeline(&[
        "eval",
        "--qrels",
        path(&fixture("tiny")),
        "--run",
        path(&run),
        "--per-query",
        path(&tsv),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{}:2: field `score`", run.display())),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    assert!(!tsv.exists(), "nothing may be written on error");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn warnings_and_skipped_queries_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run.trec");
    // t-9 is not judged; t-2..t-5 are judged but absent.
    std::fs::write(
        &run,
        "t-1 Q0 tiny.k8s-backup 1 1 x\nt-9 Q0 tiny.k8s-backup 1 1 x\n",
    )
    .unwrap();
    let qrels = dir.path().join("qrels.jsonl");
    std::fs::write(
        &qrels,
        "{\"query_id\": \"t-1\", \"skill_id\": \"tiny.k8s-backup\", \"relevance\": 1}\n\
         {\"query_id\": \"t-1\", \"skill_id\": \"tiny.k8s-backup\", \"relevance\": 1}\n\
         {\"query_id\": \"t-2\", \"skill_id\": \"tiny.slo-alerts\", \"relevance\": 1}\n",
    )
    .unwrap();
    let out = pipeline(&[
        "eval",
        "--qrels",
        path(&qrels),
        "--run",
        path(&run),
        "--format",
        "json",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("warning: {}:2: field `skill_id`", qrels.display())),
        "{err}"
    );
    assert!(err.contains("1 run queries have no judgements"), "{err}");
    assert!(
        err.contains("1 judged queries are missing from the run"),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["queries"], 1);

    let out = pipeline(&[
        "eval",
        "--qrels",
        path(&qrels),
        "--run",
        path(&run),
        "--format",
        "json",
        "--complete",
    ]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["queries"], 2);
    assert_eq!(json["MRR"], 0.5);
}

#[test]
fn help_teaches() {
    let out = pipeline(&["eval", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    for needle in [
        "trec_eval",
        "ties broken by document id",
        "Examples:",
        "--per-query",
        "--complete",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let out = pipeline(&["eval", "--qrels", "x", "--run", "y", "--k", "0"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cut-offs must be positive"));
}

fn minilm() -> Option<PathBuf> {
    installed("all-MiniLM-L6-v2")
}

#[test]
fn embed_reads_strings_skills_and_queries_in_order() {
    let Some(model) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let skill = r##"{"id": "s", "name": " pdf ", "description": "Read PDFs.", "skill_md": "# PDF\nUse pdfplumber."}"##;
    std::fs::write(
        &input,
        format!(
            "\"pdf | Read PDFs. | # PDF\\nUse pdfplumber.\"\n{skill}\n\n{{\"id\": \"q\", \"query\": \"Extract tables\"}}\n\"Extract tables\"\n"
        ),
    )
    .unwrap();
    let output = dir.path().join("out.jsonl");
    let out = pipeline(&[
        "embed",
        "--model",
        path(&model),
        "--input",
        path(&input),
        "--output",
        path(&output),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let vectors: Vec<Vec<f32>> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(vectors.len(), 4);
    assert!(vectors.iter().all(|v| v.len() == 384));
    // A skill record is embedded as its document text; a query as its query.
    assert_eq!(vectors[0], vectors[1]);
    assert_eq!(vectors[2], vectors[3]);
    assert_ne!(vectors[0], vectors[2]);
    let err = text(&out.stderr);
    assert!(err.contains("tokens/s"), "{err}");
}

#[test]
fn embed_bad_input_names_the_line_and_writes_nothing() {
    let Some(model) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "\"fine\"\n{\"id\": 3, \"text\": 4}\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let out = pipeline(&[
        "embed",
        "--model",
        path(&model),
        "--input",
        path(&input),
        "--output",
        path(&output),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains(&format!("{}:2:", input.display())), "{err}");
    assert!(!output.exists());
}

/// A copy of a TEST model directory (files and one level of folders).
fn copy_model_dir(src: &Path, dst: &Path) {
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let target = dst.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_model_dir(&entry.path(), &{
                std::fs::create_dir_all(&target).unwrap();
                target
            });
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn embed_refuses_registry_models_it_cannot_run_and_writes_nothing() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let (jina, gemma) = (
        root.join("models/test-jina-v5"),
        root.join("models/test-gemma3-embedding"),
    );
    if !jina.join("model.safetensors").is_file() || !gemma.join("model.safetensors").is_file() {
        eprintln!("skipping: run python3 scripts/make_registry_models.py");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "\"x\"\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let embed = |model: &Path, extra: &[&str]| {
        let mut args = vec![
            "embed",
            "--model",
            path(model),
            "--input",
            path(&input),
            "--output",
            path(&output),
        ];
        args.extend_from_slice(extra);
        let out = pipeline(&args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(!output.exists(), "an output was written");
        text(&out.stderr)
    };
    // A LoRA task the model has no adapter for: the tasks it has.
    let err = embed(&jina, &["--task", "summarise"]);
    assert!(
        err.contains("\"summarise\"") && err.contains("retrieval, text-matching"),
        "{err}"
    );
    // An unsupported architecture: every supported model type.
    let bad = dir.path().join("bad");
    std::fs::create_dir(&bad).unwrap();
    copy_model_dir(&gemma, &bad);
    let config = bad.join("config.json");
    let edited = std::fs::read_to_string(&config)
        .unwrap()
        .replace("\"gemma3_text\"", "\"mamba\"");
    std::fs::write(&config, edited).unwrap();
    let err = embed(&bad, &[]);
    assert!(
        err.contains("config.json") && err.contains("\"mamba\""),
        "{err}"
    );
    for t in embedder::SUPPORTED_TYPES {
        assert!(err.contains(t), "{err} lacks {t}");
    }
    // A checkpoint missing a tensor: its name.
    copy_model_dir(&gemma, &bad);
    let bytes = std::fs::read(gemma.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let missing = "layers.2.self_attn.k_norm.weight";
    let kept: Vec<_> = tensors
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != missing)
        .collect();
    safetensors::serialize_to_file(kept, None, &bad.join("model.safetensors")).unwrap();
    let err = embed(&bad, &[]);
    assert!(err.contains(missing), "{err}");
}

#[test]
fn embed_explains_a_missing_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "\"x\"\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let missing = dir.path().join("models/nope");
    let out = pipeline(&[
        "embed",
        "--model",
        path(&missing),
        "--input",
        path(&input),
        "--output",
        path(&output),
    ]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("fetch-models.sh"),
        "{}",
        text(&out.stderr)
    );
    let out = pipeline(&[
        "embed",
        "--model",
        "intfloat/e5-small-v2",
        "--input",
        path(&input),
        "--output",
        path(&output),
    ]);
    assert!(!out.status.success());
    // Without the Hub and without a local copy: both said, and how to pin.
    let err = text(&out.stderr);
    assert!(
        err.contains("--revision") && err.contains("no local copy in"),
        "{err}"
    );
}

fn test_cross_encoder() -> Option<PathBuf> {
    installed("test-bert-cross-encoder")
}

/// A TREC run file as (query, doc, score) lines in file order.
fn read_run(path: &Path) -> Vec<(String, String, f64)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].to_owned(), f[2].to_owned(), f[4].parse().unwrap())
        })
        .collect()
}

#[test]
fn rerank_rescores_the_top_n_of_any_run() {
    let Some(model) = test_cross_encoder() else {
        return;
    };
    let tiny = fixture("tiny");
    let first = tiny.join("runs/lexical.run.trec");
    let dir = tempfile::tempdir().unwrap();
    let rerank_to = |output: &Path| {
        pipeline(&[
            "rerank",
            "--model",
            path(&model),
            "--data",
            path(&tiny),
            "--run",
            path(&first),
            "--top-n",
            "2",
            "--max-length",
            "128",
            "--output",
            path(output),
        ])
    };
    let output = dir.path().join("reranked.trec");
    let out = rerank_to(&output);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("pairs/s"));
    let before = read_run(&first);
    let after = read_run(&output);
    let queries: std::collections::BTreeSet<&str> =
        before.iter().map(|(q, _, _)| q.as_str()).collect();
    for query in queries {
        // The first stage's top 2 by score, equal scores at the cut taken in
        // the run file's order (Python's stable sort, as eval_rerank).
        let mut firsts: Vec<(f64, &str)> = before
            .iter()
            .filter(|(q, _, _)| q == query)
            .map(|(_, d, s)| (*s, d.as_str()))
            .collect();
        firsts.sort_by(|a, b| b.0.total_cmp(&a.0));
        let mut expected: Vec<&str> = firsts.iter().take(2).map(|x| x.1).collect();
        // The reranked run holds those only, as the official eval_rerank's.
        let mut reranked: Vec<&str> = after
            .iter()
            .filter(|(q, _, _)| q == query)
            .map(|(_, d, _)| d.as_str())
            .collect();
        reranked.sort_unstable();
        expected.sort_unstable();
        assert_eq!(reranked, expected, "query {query}");
    }
    // t-2 ties at 3.0 for the cut of 1: the file's first (k8s-backup) goes
    // in, not trec order's (slo-alerts, the higher id).
    let out_1 = dir.path().join("one.trec");
    let mut args = vec!["rerank", "--model", path(&model), "--data", path(&tiny)];
    args.extend([
        "--run",
        path(&first),
        "--top-n",
        "1",
        "--output",
        path(&out_1),
    ]);
    assert!(pipeline(&args).status.success());
    let one = read_run(&out_1);
    assert!(
        one.iter()
            .any(|(q, d, _)| q == "t-2" && d == "tiny.k8s-backup"),
        "{one:?}"
    );
    // With --oracle each query's gold skills join its pool.
    let oracle = dir.path().join("oracle.trec");
    args.pop();
    args.extend([path(&oracle), "--oracle"]);
    let out = pipeline(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("gold skills (oracle)"));
    let pooled = read_run(&oracle);
    assert!(
        pooled
            .iter()
            .any(|(q, d, _)| q == "t-2" && d == "tiny.slo-alerts"),
        "{pooled:?}"
    );
    assert!(
        pooled
            .iter()
            .any(|(q, d, _)| q == "t-3" && d == "tiny.release-beta"),
        "{pooled:?}"
    );
    // The same command again writes the same bytes.
    let again = dir.path().join("again.trec");
    let out = rerank_to(&again);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read(&output).unwrap(),
        std::fs::read(&again).unwrap()
    );
}

#[test]
fn rerank_refuses_a_bi_encoder_and_explains_test_models() {
    let help = text(&pipeline(&["rerank", "--help"]).stdout);
    for needle in ["TEST models", "mean nothing", "--top-n", "Examples:"] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    let Some(model) = minilm() else { return };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("out.trec");
    let out = pipeline(&[
        "rerank",
        "--model",
        path(&model),
        "--data",
        path(&tiny),
        "--run",
        path(&tiny.join("runs/lexical.run.trec")),
        "--output",
        path(&output),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no sequence-classification head"),
        "{}",
        text(&out.stderr)
    );
    assert!(!output.exists());
}

fn configs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../configs")
}

/// `pipeline run` with a configuration, output and cache in `dir`.
fn run_config(dir: &Path, config_text: &str, data: &Path, out: &str) -> Output {
    let config = dir.join(format!("{out}.toml"));
    std::fs::write(
        &config,
        format!(
            "{config_text}\n[output]\ncache = \"{}\"\n",
            dir.join("cache").display()
        ),
    )
    .unwrap();
    pipeline(&[
        "run",
        "--config",
        path(&config),
        "--data",
        path(data),
        "--out",
        path(&dir.join(out)),
    ])
}

#[test]
fn run_bm25_end_to_end_writes_every_output_deterministically() {
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(configs().join("bm25.toml")).unwrap();
    let out = run_config(dir.path(), &config, &tiny, "a");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let a = dir.path().join("a");
    for file in [
        "metrics.json",
        "timings.json",
        "run.retriever.trec",
        "per_query.tsv",
        "report.md",
        "recall_at_k.svg",
    ] {
        assert!(a.join(file).is_file(), "{file} missing");
    }
    // The terminal shows the stage table; stderr a line per stage.
    assert!(text(&out.stdout).contains("| NDCG@10 |"));
    assert!(text(&out.stderr).contains("bm25"));
    // metrics.json agrees with `pipeline eval` on the written run.
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("metrics.json")).unwrap()).unwrap();
    let eval = pipeline(&[
        "eval",
        "--qrels",
        path(&tiny),
        "--run",
        path(&a.join("run.retriever.trec")),
        "--format",
        "json",
    ]);
    let eval: serde_json::Value = serde_json::from_slice(&eval.stdout).unwrap();
    for key in ["NDCG@10", "Recall@5", "Completeness@15", "MAP@10", "MRR"] {
        assert_eq!(metrics["retriever"][key], eval[key], "{key}");
    }
    // per_query.tsv: a row per query with the rank of each relevant skill.
    let tsv = std::fs::read_to_string(a.join("per_query.tsv")).unwrap();
    assert!(tsv.starts_with("query\tstage\tNDCG@5"));
    assert!(tsv.contains("t-1\tretriever\t"));
    assert!(tsv.contains("tiny.k8s-backup:1"), "{tsv}");
    let svg = std::fs::read_to_string(a.join("recall_at_k.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("retriever Recall@k"));
    // A second run writes the same bytes (all but the timings).
    let out = run_config(dir.path(), &config, &tiny, "b");
    assert!(out.status.success());
    let b = dir.path().join("b");
    for file in [
        "metrics.json",
        "run.retriever.trec",
        "per_query.tsv",
        "recall_at_k.svg",
    ] {
        assert_eq!(
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
            "{file} differs between identical runs"
        );
    }
    // compare: one row per run and stage.
    let cmp = pipeline(&["compare", path(&a), path(&b)]);
    assert!(cmp.status.success(), "{}", text(&cmp.stderr));
    let table = text(&cmp.stdout);
    assert_eq!(table.matches("| retriever |").count(), 2, "{table}");
}

#[test]
fn run_config_errors_name_the_file_and_line_and_write_nothing() {
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let out = run_config(
        dir.path(),
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\ntop_k = 5\n",
        &tiny,
        "bad",
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("bad.toml:5"), "{err}");
    assert!(err.contains("top_k"), "{err}");
    assert!(!dir.path().join("bad").exists());
    let help = text(&pipeline(&["run", "--help"]).stdout);
    for needle in ["--limit-queries", "metrics.json", "Examples:", "resumes"] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
}

#[test]
fn run_every_stage_caches_embeddings_and_reports_the_reranker() {
    let (Some(_), Some(_)) = (minilm(), test_cross_encoder()) else {
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = std::fs::read_to_string(configs().join("minilm-hnsw-test-reranker.toml"))
        .unwrap()
        .replace("\"models/", &format!("\"{}/models/", root.display()));
    let first = run_config(dir.path(), &config, &tiny, "a");
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert!(text(&first.stderr).contains("0 of 1 shards from the cache"));
    let report = std::fs::read_to_string(dir.path().join("a/report.md")).unwrap();
    for needle in [
        "| reranker |",
        "Δ",
        "wins",
        "p = ",
        "HNSW against exact search",
        "## Breakdowns",
        "By number of gold skills",
        "By query length",
        "The reranker helps",
    ] {
        assert!(
            report.contains(needle),
            "report.md lacks {needle:?}:\n{report}"
        );
    }
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("a/metrics.json")).unwrap())
            .unwrap();
    assert!(metrics["reranker"]["NDCG@10"].is_f64());
    assert!(metrics["hnsw_recall"]["Recall@10"].is_f64());
    // results.json: scores with their provenance.
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("a/results.json")).unwrap())
            .unwrap();
    assert_eq!(
        results["scores"], metrics,
        "the same scores as metrics.json"
    );
    let weights = results["models"]["embedder"]["weights_sha256"]["model.safetensors"].as_str();
    assert_eq!(weights.map(str::len), Some(64), "{results:#}");
    assert!(
        results["dataset"]["revision"]
            .as_str()
            .unwrap()
            .starts_with("local-")
    );
    assert_eq!(
        results["dataset"]["sha256"]["queries/test.jsonl"]
            .as_str()
            .map(str::len),
        Some(64)
    );
    assert_eq!(results["tool"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(results["tool"]["git_commit"].is_string());
    assert!(results["device"]["cpu"].is_string());
    assert_eq!(results["protocol"]["reranker"]["top_n"], 20);
    assert!(results["timings"]["stages"].as_array().unwrap().len() >= 4);
    let gold = results["breakdowns"]["gold_skills"].as_array().unwrap();
    let counted: u64 = gold.iter().map(|g| g["queries"].as_u64().unwrap()).sum();
    assert_eq!(counted, metrics["retriever"]["queries"].as_u64().unwrap());
    // The official JSON of the first stage, fed back to `pipeline rerank`,
    // gives the run's reranked stage exactly.
    let official = dir.path().join("a/skillret.retriever.json");
    let again = dir.path().join("again.trec");
    let root_models = root.join("models/test-bert-cross-encoder");
    let out = pipeline(&[
        "rerank",
        "--model",
        path(&root_models),
        "--data",
        path(&tiny),
        "--run",
        path(&official),
        "--top-n",
        "20",
        "--max-length",
        "256",
        "--tag",
        "reranker",
        "--output",
        path(&again),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(dir.path().join("a/run.reranker.trec")).unwrap()
    );
    // The second run reads every vector from the cache and writes the same metrics.
    let second = run_config(dir.path(), &config, &tiny, "b");
    assert!(second.status.success());
    let err = text(&second.stderr);
    assert!(err.contains("all 1 shards from the cache"), "{err}");
    assert!(
        !err.contains("embedder:"),
        "the model is not even loaded:\n{err}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("a/metrics.json")).unwrap(),
        std::fs::read(dir.path().join("b/metrics.json")).unwrap()
    );
}

#[test]
fn precision_override_keeps_int8_and_f32_vectors_apart_in_the_cache() {
    if minilm().is_none() {
        return;
    }
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = dir.path().join("minilm.toml");
    std::fs::write(
        &config,
        format!(
            "{}\n[output]\ncache = \"{}\"\n",
            std::fs::read_to_string(configs().join("minilm.toml"))
                .unwrap()
                .replace("\"models/", &format!("\"{}/models/", root.display())),
            dir.path().join("cache").display()
        ),
    )
    .unwrap();
    let run = |out: &str, precision: Option<&str>| {
        let mut args = vec![
            "run",
            "--config",
            path(&config),
            "--data",
            path(&tiny),
            "--out",
        ];
        let out = dir.path().join(out);
        args.push(path(&out));
        if let Some(p) = precision {
            args.extend(["--precision", p]);
        }
        let output = pipeline(&args);
        assert!(output.status.success(), "{}", text(&output.stderr));
        text(&output.stderr)
    };
    assert!(run("f32", None).contains("0 of 1 shards from the cache"));
    let int8 = run("int8", Some("int8"));
    // Every level from avx2 up has an int8 kernel.
    if embedder::isa::active() >= embedder::Isa::Avx2 {
        // Its own vectors, computed afresh, on the int8 path.
        assert!(int8.contains("0 of 1 shards from the cache"), "{int8}");
        assert!(int8.contains("native, int8 on "), "{int8}");
        assert!(run("int8-again", Some("int8")).contains("all 1 shards from the cache"));
    } else {
        // Below AVX2 int8 runs f32, says so, and f32 vectors are the same.
        assert!(int8.contains("int8 needs AVX2"), "{int8}");
        assert!(int8.contains("all 1 shards from the cache"), "{int8}");
    }
    // The f32 run still finds its own vectors.
    assert!(run("f32-again", None).contains("all 1 shards from the cache"));
}

/// A SkillRet directory with `n` skills (the tiny fixture's, repeated under
/// new ids) and the tiny fixture's queries and judgements.
fn bigger_corpus(dir: &Path, n: usize) -> PathBuf {
    let tiny = fixture("tiny");
    let data = dir.join("data");
    for sub in ["skills", "queries", "qrels"] {
        std::fs::create_dir_all(data.join(sub)).unwrap();
    }
    for sub in ["queries", "qrels"] {
        std::fs::copy(
            tiny.join(sub).join("test.jsonl"),
            data.join(sub).join("test.jsonl"),
        )
        .unwrap();
    }
    let skills: Vec<serde_json::Value> = std::fs::read_to_string(tiny.join("skills/test.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut lines = String::new();
    for i in 0..n {
        let mut s = skills[i % skills.len()].clone();
        if i >= skills.len() {
            s["id"] = format!("copy-{i}").into();
            s["description"] =
                format!("{} (variant {i})", s["description"].as_str().unwrap()).into();
        }
        lines.push_str(&s.to_string());
        lines.push('\n');
    }
    std::fs::write(data.join("skills/test.jsonl"), lines).unwrap();
    data
}

#[test]
fn a_run_killed_while_embedding_resumes_from_its_finished_shards() {
    let Some(_) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let data = bigger_corpus(dir.path(), 1024);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let config = format!(
        "[data]\nsplit = \"test\"\n[embedder]\nmodel = \"{}/models/all-MiniLM-L6-v2\"\nmax_length = 32\n[retriever]\nkind = \"dense\"\n",
        root.display()
    );
    let config_path = dir.path().join("c.toml");
    let cache = dir.path().join("cache");
    std::fs::write(
        &config_path,
        format!("{config}[output]\ncache = \"{}\"\n", cache.display()),
    )
    .unwrap();
    let shards = || -> usize {
        walk(&cache.join("embeddings/documents"))
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "f32"))
            .count()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["run", "--config", path(&config_path), "--data", path(&data)])
        .args(["--out", path(&dir.path().join("killed"))])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // SIGKILL as soon as the first of the 4 shards is on disk.
    let started = std::time::Instant::now();
    while shards() == 0 {
        assert!(
            started.elapsed().as_secs() < 300,
            "no shard was written in 5 minutes"
        );
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let kept = shards();
    assert!((1..4).contains(&kept), "{kept} shards after the kill");
    assert!(!dir.path().join("killed/metrics.json").exists());

    let resumed = pipeline(&[
        "run",
        "--config",
        path(&config_path),
        "--data",
        path(&data),
        "--out",
        path(&dir.path().join("resumed")),
    ]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let err = text(&resumed.stderr);
    assert!(
        err.contains(&format!("{kept} of 4 shards from the cache")),
        "{err}"
    );
    // The same answer as a run that was never interrupted (fresh cache).
    let clean_config = dir.path().join("clean.toml");
    std::fs::write(
        &clean_config,
        format!(
            "{config}[output]\ncache = \"{}\"\n",
            dir.path().join("cache2").display()
        ),
    )
    .unwrap();
    let clean = pipeline(&[
        "run",
        "--config",
        path(&clean_config),
        "--data",
        path(&data),
        "--out",
        path(&dir.path().join("clean")),
    ]);
    assert!(clean.status.success());
    assert_eq!(
        std::fs::read(dir.path().join("resumed/metrics.json")).unwrap(),
        std::fs::read(dir.path().join("clean/metrics.json")).unwrap()
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

fn qwen3_models() -> Option<(PathBuf, PathBuf)> {
    let found = (
        installed("test-qwen3-embedding"),
        installed("test-qwen3-reranker"),
    );
    if let (Some(e), Some(r)) = found {
        Some((e, r))
    } else {
        eprintln!("skipping: run python3 scripts/make_qwen3_models.py");
        None
    }
}

/// Vectors of a `pipeline embed` output file.
fn read_vectors(path: &Path) -> Vec<Vec<f64>> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn embed_takes_qwen3_models_with_their_prompts() {
    let Some((model, _)) = qwen3_models() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("q.jsonl");
    std::fs::write(
        &input,
        "{\"query\": \"extract the tables of a PDF report\"}\n\"rebase my branch\"\n",
    )
    .unwrap();
    let embed = |name: &str, extra: &[&str]| {
        let output = dir.path().join(name);
        let mut args = vec![
            "embed",
            "--model",
            path(&model),
            "--kind",
            "query",
            "--input",
            path(&input),
            "--output",
            path(&output),
        ];
        args.extend(extra);
        let out = pipeline(&args);
        assert!(out.status.success(), "{}", text(&out.stderr));
        (read_vectors(&output), text(&out.stderr))
    };
    let (own, log) = embed("own.jsonl", &[]);
    assert!(log.contains("qwen3") && log.contains("LastToken"), "{log}");
    assert!(
        log.contains("prompt \"Instruct: Given a web search query"),
        "{log}"
    );
    let (named, _) = embed("named.jsonl", &["--query-prompt-name", "query"]);
    let (none, _) = embed("none.jsonl", &["--query-prompt", ""]);
    let (skillret, log) = embed(
        "skillret.jsonl",
        &[
            "--query-prompt",
            "Instruct: Given a skill search query, retrieve relevant skills that match the query\nQuery: ",
        ],
    );
    assert!(log.contains("skill search query"), "{log}");
    assert_eq!(own, named);
    assert_ne!(own, none);
    assert_ne!(own, skillret);
    assert_eq!(own.len(), 2);
    let norm: f64 = own[0].iter().map(|x| x * x).sum();
    assert!((norm - 1.0).abs() < 1e-5, "normalised: {norm}");
    // A prompt name the model does not define: an error naming the file, nothing written.
    let output = dir.path().join("bad.jsonl");
    let out = pipeline(&[
        "embed",
        "--model",
        path(&model),
        "--query-prompt-name",
        "passage",
        "--input",
        path(&input),
        "--output",
        path(&output),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("config_sentence_transformers.json") && err.contains("\"passage\""),
        "{err}"
    );
    assert!(!output.exists());
}

#[test]
fn rerank_takes_a_yes_no_reranker() {
    let Some((_, model)) = qwen3_models() else {
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("reranked.trec");
    let out = pipeline(&[
        "rerank",
        "--model",
        path(&model),
        "--data",
        path(&tiny),
        "--run",
        path(&tiny.join("runs/lexical.run.trec")),
        "--top-n",
        "3",
        "--max-length",
        "512",
        "--output",
        path(&output),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("yes/no decoder"),
        "{}",
        text(&out.stderr)
    );
    let reranked = read_run(&output);
    let first = read_run(&tiny.join("runs/lexical.run.trec"));
    // Each query's top 3 and nothing more, as the official eval_rerank.
    let mut per_query: std::collections::BTreeMap<&str, usize> = Default::default();
    for (q, _, _) in &first {
        *per_query.entry(q.as_str()).or_default() += 1;
    }
    assert_eq!(
        reranked.len(),
        per_query.values().map(|n| (*n).min(3)).sum::<usize>()
    );
    // They carry P(yes) scores, in (0, 1) and descending.
    let mut by_query: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for (q, _, s) in &reranked {
        by_query.entry(q.as_str()).or_default().push(*s);
    }
    for scores in by_query.values() {
        let top = &scores[..3.min(scores.len())];
        assert!(top.iter().all(|p| *p > 0.0 && *p < 1.0), "{top:?}");
        assert!(top.windows(2).all(|w| w[0] >= w[1]), "{top:?}");
    }
}

/// A cross-encoder saved by sentence-transformers 6.3 with a chat template:
/// `pipeline rerank` says its pairs are rendered through it, and its scores
/// are the library's (whose parity with 6.3 is crates/reranker/tests/chat.rs).
#[test]
fn rerank_renders_pairs_through_a_cross_encoders_chat_template() {
    let Some(model) = installed("test-bert-cross-encoder-chat") else {
        eprintln!("skipping: run python3 scripts/make_chat_models.py");
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let output = dir.path().join("reranked.trec");
    let run = tiny.join("runs/lexical.run.trec");
    let out = pipeline(&[
        "rerank",
        "--model",
        path(&model),
        "--data",
        path(&tiny),
        "--run",
        path(&run),
        "--top-n",
        "3",
        "--output",
        path(&output),
    ]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("pairs rendered through the chat template of")
            && stderr.contains("chat_template.jinja (flat messages)")
            && stderr.contains("prompt \"Rank the skill for the request.\""),
        "{stderr}"
    );
    let reranked = read_run(&output);
    assert!(!reranked.is_empty());
    // Each score is the library's logit for the pair pipeline builds.
    let model =
        reranker::CrossEncoder::from_dir(&model, reranker::RerankerOptions::default()).unwrap();
    let data = eval::Dataset::load(&tiny, "test").unwrap();
    for (qid, sid, score) in &reranked {
        let query = &data.queries.iter().find(|q| &q.id == qid).unwrap().text;
        let skill = data.skills.iter().find(|s| &s.id == sid).unwrap();
        let skill = eval::document_text(&skill.name, &skill.description, &skill.skill_md);
        let want = model
            .score(&[(query.as_str(), skill.as_str())], &|_| {})
            .unwrap()[0];
        assert!(
            (f64::from(want) - score).abs() < 1e-5,
            "{qid} {sid}: {score} vs {want}"
        );
    }
}

#[test]
fn run_qwen3_test_models_end_to_end_on_the_shared_sample() {
    let Some(_) = qwen3_models() else { return };
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/skillret-sample");
    if !sample.join("skills/test.jsonl").is_file() {
        eprintln!("skipping: {} is absent", sample.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // A slice of the library (the official skill_ids_filter): every gold skill and every eighth
    // of the others, which runs the same path as all 2,851 in a fifth of the time.
    let gold: std::collections::BTreeSet<String> =
        std::fs::read_to_string(sample.join("qrels/test.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["skill_id"].to_string())
            .map(|id| id.trim_matches('"').to_owned())
            .collect();
    let ids: Vec<String> = std::fs::read_to_string(sample.join("skills/test.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["id"].to_string())
        .map(|id| id.trim_matches('"').to_owned())
        .enumerate()
        .filter(|(i, id)| i % 8 == 0 || gold.contains(id))
        .map(|(_, id)| id)
        .collect();
    let filter = dir.path().join("slice.txt");
    std::fs::write(&filter, ids.join("\n") + "\n").unwrap();
    let config = std::fs::read_to_string(configs().join("qwen3-test-models.toml"))
        .unwrap()
        .replace("\"models/", &format!("\"{}/models/", root.display()))
        .replace(
            "[data]\n",
            &format!("[data]\nskill_ids_filter = \"{}\"\n", filter.display()),
        );
    let out = run_config(dir.path(), &config, &sample, "q");
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!("{} documents", ids.len())) && log.contains("24 queries"),
        "{} documents: {log}",
        ids.len()
    );
    assert!(
        log.contains("qwen3, max 1024 tokens, LastToken pooling"),
        "{log}"
    );
    assert!(log.contains("yes/no decoder, P(yes)"), "{log}");
    assert!(log.contains("480 pairs"), "{log}");
    let metrics: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("q/metrics.json")).unwrap())
            .unwrap();
    for stage in ["retriever", "reranker"] {
        assert!(metrics[stage]["NDCG@10"].is_f64(), "{metrics}");
    }
    let reranked = read_run(&dir.path().join("q/run.reranker.trec"));
    assert_eq!(reranked.len(), 24 * 20);
}

#[test]
fn hub_configs_fail_fast_with_the_hint_where_the_hub_is_unreachable() {
    let tiny = fixture("tiny");
    let hf_home = tempfile::tempdir().unwrap();
    for name in [
        "qwen3-embedding-0.6b.toml",
        "skillret-embedding-0.6b.toml",
        "qwen3-embedding-0.6b+qwen3-reranker-0.6b.toml",
        "skillret-embedding-0.6b+skillret-reranker-0.6b.toml",
        "bge-small-en-v1.5.toml",
        "snowflake-arctic-embed-s.toml",
        "e5-small-v2.toml",
    ] {
        let out_dir = hf_home.path().join(name);
        let out = Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args([
                "run",
                "--config",
                path(&configs().join(name)),
                "--data",
                path(&tiny),
                "--out",
                path(&out_dir),
            ])
            .env("HF_HOME", hf_home.path())
            .env_remove("HF_HUB_OFFLINE")
            // Nothing listens on port 9 of the loopback: refused at once.
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {err}");
        assert!(err.contains("[embedder] model"), "{name}: {err}");
        assert!(
            err.contains("pass a local model directory instead"),
            "{name}: {err}"
        );
        assert!(!out_dir.exists(), "{name}: nothing is written");
    }
}

/// The Milvus server the tests share (`scripts/milvus.sh start`), or `None`
/// with a note; with `MILVUS_REQUIRED=1` (CI) its absence fails the test.
fn milvus_server() -> Option<String> {
    let uri = std::env::var("MILVUS_URI").unwrap_or_else(|_| "http://127.0.0.1:19530".to_owned());
    let address = uri
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let up = address
        .parse::<std::net::SocketAddr>()
        .ok()
        .is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, std::time::Duration::from_millis(500)).is_ok()
        });
    if up {
        return Some(uri);
    }
    assert!(
        std::env::var("MILVUS_REQUIRED").as_deref() != Ok("1"),
        "MILVUS_REQUIRED=1 but no Milvus answers at {uri}"
    );
    eprintln!("skipping: no Milvus at {uri} (scripts/milvus.sh start)");
    None
}

/// configs/minilm-milvus.toml with the models' path made absolute and the
/// Milvus settings given.
fn milvus_config(uri: &str, index_type: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::read_to_string(configs().join("minilm-milvus.toml"))
        .unwrap()
        .replace("\"models/", &format!("\"{}/models/", root.display()))
        .replace(
            "uri = \"http://127.0.0.1:19530\"",
            &format!("uri = \"{uri}\""),
        )
        .replace(
            "index_type = \"HNSW\"",
            &format!("index_type = \"{index_type}\""),
        )
}

#[test]
fn run_with_milvus_flat_ranks_as_exact_search_and_reports_its_recall() {
    let (Some(_), Some(uri)) = (minilm(), milvus_server()) else {
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let exact_config = milvus_config(&uri, "FLAT")
        .replace("index = \"milvus\"", "index = \"exact\"")
        .split("[retriever.milvus]")
        .next()
        .unwrap()
        .to_owned()
        + "[eval]\nk = [5, 10, 15]\n";
    let exact = run_config(dir.path(), &exact_config, &tiny, "exact");
    assert!(exact.status.success(), "{}", text(&exact.stderr));
    for (index_type, out) in [("FLAT", "flat"), ("HNSW", "hnsw"), ("HNSW", "again")] {
        let run = run_config(dir.path(), &milvus_config(&uri, index_type), &tiny, out);
        let err = text(&run.stderr);
        assert!(run.status.success(), "{err}");
        assert!(err.contains(&format!("{index_type} index")), "{err}");
        let report = std::fs::read_to_string(dir.path().join(out).join("report.md")).unwrap();
        assert!(report.contains("Milvus (collection skillret_"), "{report}");
        let metrics: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join(out).join("metrics.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(metrics["milvus_recall"]["index_type"], index_type);
        assert!(metrics["milvus_recall"]["Recall@10"].as_f64().unwrap() >= 0.9);
    }
    // FLAT: the exact run's rankings; the scores differ in the last bits
    // (the server sums in its own order).
    let exact = read_run(&dir.path().join("exact/run.retriever.trec"));
    let flat = read_run(&dir.path().join("flat/run.retriever.trec"));
    assert_eq!(exact.len(), flat.len());
    for (e, f) in exact.iter().zip(&flat) {
        assert_eq!((&e.0, &e.1), (&f.0, &f.1));
        assert!((e.2 - f.2).abs() < 1e-6, "{e:?} {f:?}");
    }
    // The second HNSW run finds the collection and its index as they were.
    let again = text(&run_config(dir.path(), &milvus_config(&uri, "HNSW"), &tiny, "third").stderr);
    assert!(again.contains("0 uploaded, HNSW index found"), "{again}");
}

#[test]
fn run_with_milvus_down_fails_within_seconds_and_writes_nothing() {
    let Some(_) = minilm() else { return };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    // Nothing listens there.
    let started = std::time::Instant::now();
    let out = run_config(
        dir.path(),
        &milvus_config("http://127.0.0.1:19529", "HNSW").replace("timeout_s = 10", "timeout_s = 3"),
        &tiny,
        "down",
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot reach Milvus at http://127.0.0.1:19529")
            && err.contains("scripts/milvus.sh start"),
        "{err}"
    );
    assert!(!dir.path().join("down/metrics.json").exists());
}

/// `SKILLRET_MAX_ISA`: an unknown level is refused naming the allowed ones
/// (exit 1, nothing written); a cap runs that level, and the summary line
/// names it and the int8 kernel that ran.
#[test]
fn the_instruction_set_cap_is_checked_and_named() {
    let Some(model) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "\"a skill that formats dates\"\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let embed = |isa: &str, precision: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args([
                "embed",
                "--model",
                path(&model),
                "--input",
                path(&input),
                "--output",
                path(&output),
                "--precision",
                precision,
            ])
            .env("SKILLRET_MAX_ISA", isa)
            .output()
            .unwrap()
    };
    let out = embed("avx3", "f32");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("SKILLRET_MAX_ISA: \"avx3\" is not an instruction set")
            && err.contains("allowed: amx, avx512, avxvnni, avx2, scalar"),
        "{err}"
    );
    assert!(!output.exists(), "an output was written");
    let out = embed("scalar", "int8");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("f32: int8 needs AVX2") && err.contains(", scalar, "),
        "{err}"
    );
    if embedder::Isa::Avx2.available() {
        let out = embed("avx2", "int8");
        assert!(out.status.success(), "{}", text(&out.stderr));
        let err = text(&out.stderr);
        assert!(
            err.contains("int8 on avx2 vpmaddubsw") && err.contains(", avx2, "),
            "{err}"
        );
    }
    if embedder::Isa::Amx.available() {
        // bf16 and int8 on AMX tiles; capped at avx512, the vector units.
        for (isa, precision, says) in [
            ("amx", "bf16", "bf16 on amx"),
            ("amx", "int8", "int8 on amx"),
            ("avx512", "int8", "int8 on avx512 vnni"),
        ] {
            let out = embed(isa, precision);
            assert!(out.status.success(), "{}", text(&out.stderr));
            let err = text(&out.stderr);
            assert!(
                err.contains(says) && err.contains(&format!(", {isa}, ")),
                "{isa} {precision}: {err}"
            );
        }
    }
}

#[test]
fn int8_keeps_its_layers_in_the_faster_unit_and_a_slower_bf16_is_named() {
    let Some(model) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(
        &input,
        "\"a skill that formats dates\"\n\"merge the tables of two PDF reports\"\n",
    )
    .unwrap();
    let embed = |name: &str, precision: &str, rates: &str| {
        let output = dir.path().join(name);
        let out = Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["embed", "--model", path(&model), "--input", path(&input)])
            .args(["--output", path(&output), "--precision", precision])
            .env("SKILLRET_UNIT_RATES", rates)
            .env("SKILLRET_RATES_CACHE", "")
            .output()
            .unwrap();
        (out, output)
    };
    let slow_bf16 = "fma256=119.4,fma512=238.7,bf16=119.8";
    let fast_bf16 = "fma256=117.4,fma512=117.4,bf16=234.9";
    // A rate that cannot be read is refused, naming the variable; nothing written.
    let (out, written) = embed("bad.jsonl", "int8", "fma256=fast,bf16=1");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(
            "SKILLRET_UNIT_RATES=\"fma256=fast,bf16=1\": \"fast\" is not a positive rate"
        ),
        "{}",
        text(&out.stderr)
    );
    assert!(!written.exists());
    let (out, f32_file) = embed("f32.jsonl", "f32", slow_bf16);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let f32_vectors = read_vectors(&f32_file);
    let (slow, slow_file) = embed("slow.jsonl", "int8", slow_bf16);
    let (fast, fast_file) = embed("fast.jsonl", "int8", fast_bf16);
    assert!(slow.status.success() && fast.status.success());
    let (slow, fast) = (text(&slow.stderr), text(&fast.stderr));
    let cosine = |a: &[f64], b: &[f64]| {
        let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
        dot / (a.iter().map(|x| x * x).sum::<f64>() * b.iter().map(|x| x * x).sum::<f64>()).sqrt()
    };
    for file in [&slow_file, &fast_file] {
        for (v, w) in read_vectors(file).iter().zip(&f32_vectors) {
            assert!(cosine(v, w) > 0.999, "{}: {}", file.display(), cosine(v, w));
        }
    }
    if embedder::Precision::Bf16.on_this_cpu() == embedder::Precision::Bf16 {
        // A CPU with a bf16 unit: the kept layers follow the faster unit.
        assert!(
            slow.contains(
                "(query/key/value in f32, feed-forward output in f32; bf16 is slower here: \
                 bf16 119.8 against f32 238.7 GOP/s per thread)"
            ),
            "{slow}"
        );
        // Where the products run on AMX tiles, the words say so.
        let unit = if embedder::Isa::Amx.available() {
            "bf16 on amx"
        } else {
            "bf16"
        };
        assert!(
            fast.contains(&format!(
                "(query/key/value in {unit}, feed-forward output in {unit})"
            )),
            "{fast}"
        );
        assert_ne!(read_vectors(&slow_file), read_vectors(&fast_file));
        let (out, _) = embed("bf16.jsonl", "bf16", slow_bf16);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains(
                "native, bf16 as asked, though slower here than f32: \
                 bf16 119.8 against f32 238.7 GOP/s per thread"
            ),
            "{}",
            text(&out.stderr)
        );
    } else {
        // No bf16 unit: the kept layers are f32 whatever the rates say.
        for err in [&slow, &fast] {
            assert!(!err.contains("slower") && !err.contains("in bf16"), "{err}");
        }
        assert_eq!(read_vectors(&slow_file), read_vectors(&fast_file));
    }
}

#[test]
fn the_attention_kernel_is_checked_and_named() {
    let Some(model) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "\"a skill that formats dates\"\n\"pdf\"\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let embed = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args([
                "embed",
                "--model",
                path(&model),
                "--input",
                path(&input),
                "--output",
                path(&output),
            ])
            .args(args)
            .output()
            .unwrap()
    };
    // An unknown kernel names the known ones; flash where it cannot run
    // says why; nothing is written either way.
    let out = embed(&["--attention-kernel", "fused"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("one of: exact, flash"),
        "{}",
        text(&out.stderr)
    );
    for args in [
        &[
            "--backend",
            "candle",
            "--precision",
            "bf16",
            "--attention-kernel",
            "flash",
        ][..],
        &["--attention-kernel", "flash"][..],
    ] {
        let out = embed(args);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("attention kernel flash: "),
            "{}",
            text(&out.stderr)
        );
        assert!(!output.exists(), "an output was written");
    }
    // The candle engine names the dtype and the kernel that ran.
    let out = embed(&["--backend", "candle", "--precision", "bf16"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("cpu (candle, bf16, exact attention)"),
        "{}",
        text(&out.stderr)
    );
}

/// The sweep's configurations on the tiny fixture: BM25, MiniLM exact, and
/// MiniLM with the TEST cross-encoder (scores mean nothing: machinery only).
fn sweep_configs(dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let configs = dir.join("configs");
    std::fs::create_dir_all(&configs).unwrap();
    let cache = format!("\n[output]\ncache = \"{}\"\n", dir.join("cache").display());
    let models = |t: String| t.replace("\"models/", &format!("\"{}/models/", root.display()));
    std::fs::write(
        configs.join("bm25.toml"),
        std::fs::read_to_string(self::configs().join("bm25.toml")).unwrap() + &cache,
    )
    .unwrap();
    std::fs::write(
        configs.join("minilm.toml"),
        models(std::fs::read_to_string(self::configs().join("minilm.toml")).unwrap()) + &cache,
    )
    .unwrap();
    std::fs::write(
        configs.join("minilm-test-reranker.toml"),
        models(
            "[data]\ndir = \"tests/fixtures/tiny\"\n[embedder]\nmodel = \"models/all-MiniLM-L6-v2\"\n\
             [retriever]\nkind = \"dense\"\ntop_n = 5\n[reranker]\nmodel = \"models/test-bert-cross-encoder\"\n\
             top_n = 5\nmax_length = 128\n"
            .to_owned(),
        ) + &cache,
    )
    .unwrap();
    configs
}

/// `leaderboard.json`'s rows without the wall times (which a rerun or a
/// resumed sweep measures anew only for what it ran).
fn leaderboard_rows(out: &Path) -> Vec<serde_json::Value> {
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("leaderboard.json")).unwrap())
            .unwrap();
    value["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("wall_s");
            r.as_object_mut().unwrap().remove("tokens_per_s");
            r
        })
        .collect()
}

#[test]
fn sweep_runs_every_configuration_resumes_after_a_kill_and_skips_what_fails() {
    let (Some(_), Some(_)) = (minilm(), test_cross_encoder()) else {
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let configs = sweep_configs(dir.path());
    // A configuration that does not load: reported, the others finish.
    std::fs::write(
        configs.join("broken.toml"),
        "[data]\n[retriever]\nkind = \"dense\"\ntop_k = 3\n",
    )
    .unwrap();
    let pattern = format!("{}/*.toml", configs.display());
    let out = dir.path().join("results");
    let args = |out: &Path| -> Vec<String> {
        [
            "sweep",
            "--configs",
            &pattern,
            "--rerank-depths",
            "2,3",
            "--data",
            path(&tiny),
            "--out",
            path(out),
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    let run = |out: &Path| {
        let a = args(out);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        pipeline(&a)
    };
    // The broken configuration fails the exit status; the rest finish.
    let first = run(&out);
    let err = text(&first.stderr);
    assert_eq!(first.status.code(), Some(1), "{err}");
    assert!(
        err.contains("1 configuration(s) or job(s) of the sweep failed"),
        "{err}"
    );
    assert!(
        err.contains("broken.toml does not load") && err.contains("top_k"),
        "{err}"
    );
    for file in [
        "leaderboard.md",
        "leaderboard.csv",
        "leaderboard.json",
        "leaderboard.svg",
    ] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let rows = leaderboard_rows(&out);
    // bm25, minilm (twice: alone and under the reranker, same config? no:
    // the reranker's configuration has its own first stage), 2 depths.
    let stages: Vec<(String, String, Option<u64>)> = rows
        .iter()
        .map(|r| {
            (
                r["model"].as_str().unwrap().to_owned(),
                r["stage"].as_str().unwrap().to_owned(),
                r["depth"].as_u64(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 5, "{stages:?}");
    assert_eq!(
        stages.iter().filter(|s| s.1 == "reranker").count(),
        2,
        "{stages:?}"
    );
    let ndcg: Vec<f64> = rows
        .iter()
        .map(|r| r["scores"]["NDCG@10"].as_f64().unwrap())
        .collect();
    assert!(
        ndcg.windows(2).all(|w| w[0] >= w[1]),
        "sorted by NDCG@10: {ndcg:?}"
    );
    let md = std::fs::read_to_string(out.join("leaderboard.md")).unwrap();
    assert!(md.contains("## Failed") && md.contains("`broken`"), "{md}");
    // Every entry equals the same configuration run alone.
    let alone = dir.path().join("alone");
    let o = pipeline(&[
        "run",
        "--config",
        path(&configs.join("minilm-test-reranker.toml")),
        "--data",
        path(&tiny),
        "--rerank-depth",
        "3",
        "--out",
        path(&alone),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    for file in [
        "metrics.json",
        "run.reranker.trec",
        "skillret.reranker.json",
    ] {
        assert_eq!(
            std::fs::read(alone.join(file)).unwrap(),
            std::fs::read(out.join("runs/minilm-test-reranker@3").join(file)).unwrap(),
            "{file}"
        );
    }
    // The MTEB-shaped results tree.
    let filed: Vec<PathBuf> = glob_files(&out, "SkillRet-local-");
    assert_eq!(filed.len(), 4, "{filed:?}");

    // Run again: nothing is recomputed, the leaderboard is the same.
    let again = run(&out);
    let err = text(&again.stderr);
    assert_eq!(again.status.code(), Some(1), "{err}");
    assert_eq!(
        err.matches("(same key), not recomputed").count(),
        4,
        "{err}"
    );
    assert!(err.contains("0 jobs run"), "{err}");
    assert_eq!(leaderboard_rows(&out), rows);

    // Killed mid-way (SIGKILL once the first job is in place), then run
    // again: the finished job is skipped, the rest done, the same board.
    let killed = dir.path().join("killed");
    let a = args(&killed);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(&a)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let first_job = killed.join("runs/bm25/job.json");
    let started = std::time::Instant::now();
    while !first_job.exists() && started.elapsed().as_secs() < 120 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(first_job.exists());
    assert!(
        !killed.join("leaderboard.json").exists(),
        "killed before the end"
    );
    let resumed = run(&killed);
    let err = text(&resumed.stderr);
    assert_eq!(
        resumed.status.code(),
        Some(1),
        "{err} (the broken configuration)"
    );
    assert!(
        err.contains("bm25: finished before (same key), not recomputed"),
        "{err}"
    );
    assert_eq!(leaderboard_rows(&killed), rows);
}

fn glob_files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "runs") {
                    stack.push(p);
                }
            } else if p
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
            {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn sweep_refuses_bad_input_before_running_anything() {
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let nothing = format!("{}/none-*.toml", dir.path().display());
    let o = pipeline(&[
        "sweep",
        "--configs",
        &nothing,
        "--data",
        path(&tiny),
        "--out",
        path(&out),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("matches no file"),
        "{}",
        text(&o.stderr)
    );
    let all = format!("{}/*.toml", configs().display());
    let o = pipeline(&[
        "sweep",
        "--configs",
        &all,
        "--rerank-depths",
        "10,0",
        "--out",
        path(&out),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("a depth of 0"),
        "{}",
        text(&o.stderr)
    );
    let o = pipeline(&[
        "sweep",
        "--configs",
        &all,
        "--filter",
        "^nothing-like-this$",
        "--out",
        path(&out),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("keeps none"),
        "{}",
        text(&o.stderr)
    );
    assert!(!out.exists(), "nothing written");
    // A skill_ids_filter naming an unknown id: file, line, field; nothing written.
    let filter = dir.path().join("keep.txt");
    std::fs::write(&filter, "tiny.k8s-backup\nno.such.skill\n").unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[data]\ndir = \"tests/fixtures/tiny\"\nskill_ids_filter = \"{}\"\n[retriever]\nkind = \"bm25\"\n",
            filter.display()
        ),
    )
    .unwrap();
    let run_out = dir.path().join("run");
    let o = pipeline(&[
        "run",
        "--config",
        path(&config),
        "--data",
        path(&tiny),
        "--out",
        path(&run_out),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("{}:2", filter.display())) && err.contains("no.such.skill"),
        "{err}"
    );
    assert!(err.contains("skill_ids_filter"), "{err}");
    assert!(!run_out.exists(), "nothing written");
}

#[test]
fn a_hub_id_without_the_hub_uses_a_local_copy_and_says_so() {
    let Some(local) = minilm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    std::fs::write(&input, "\"parse a pdf\"\n").unwrap();
    let embed = |models: &Path, hf_home: &Path, output: &Path| {
        Command::new(env!("CARGO_BIN_EXE_pipeline"))
            .args(["embed", "--model", "sentence-transformers/all-MiniLM-L6-v2"])
            .args(["--input", path(&input), "--output", path(output)])
            .env("SKILLRET_MODELS", models)
            .env("HF_HOME", hf_home)
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap()
    };
    let hf_home = dir.path().join("hf");
    // No pinned revision, offline, no record of the default branch, and a
    // local copy: the copy is used, and the message says why.
    let models = local.parent().unwrap();
    let out_local = dir.path().join("local.jsonl");
    let out = embed(models, &hf_home, &out_local);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("using the local copy") && err.contains("HF_HUB_OFFLINE"),
        "{err}"
    );
    // Its vectors are the local directory's own.
    let direct = dir.path().join("direct.jsonl");
    let o = pipeline(&[
        "embed",
        "--model",
        path(&local),
        "--input",
        path(&input),
        "--output",
        path(&direct),
    ]);
    assert!(o.status.success());
    assert_eq!(
        std::fs::read(&out_local).unwrap(),
        std::fs::read(&direct).unwrap()
    );
    // A recorded default branch whose snapshot is not cached: still the copy.
    let refs = hf_home.join("hub/models--sentence-transformers--all-MiniLM-L6-v2/refs");
    std::fs::create_dir_all(&refs).unwrap();
    std::fs::write(
        refs.join("main"),
        "0123456789abcdef0123456789abcdef01234567",
    )
    .unwrap();
    let out = embed(models, &hf_home, &dir.path().join("again.jsonl"));
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("0123456789abcdef0123456789abcdef01234567"),
        "{err}"
    );
    // No copy either: an error naming where it looked, nothing written.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let none = dir.path().join("none.jsonl");
    let out = embed(&empty, &hf_home, &none);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("no local copy in") && err.contains("SKILLRET_MODELS"),
        "{err}"
    );
    assert!(!none.exists());
}

#[test]
fn sweep_reranks_every_first_stage_listed_for_a_reranker() {
    let (Some(_), Some(model)) = (minilm(), test_cross_encoder()) else {
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let configs = sweep_configs(dir.path());
    std::fs::remove_file(configs.join("minilm-test-reranker.toml")).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    std::fs::write(
        configs.join("rr.toml"),
        format!(
            "[data]\ndir = \"tests/fixtures/tiny\"\n[retriever]\nkind = \"bm25\"\n[reranker]\nmodel = \"{}\"\n\
             max_length = 128\n[sweep]\nfirst_stages = [\"bm25\", \"minilm\"]\n",
            root.join("models/test-bert-cross-encoder").display()
        ),
    )
    .unwrap();
    // A reranker listing a first stage that does not exist: reported.
    std::fs::write(
        configs.join("rr-missing.toml"),
        "[data]\n[retriever]\nkind = \"bm25\"\n[reranker]\nmodel = \"m\"\n[sweep]\nfirst_stages = [\"nope\"]\n",
    )
    .unwrap();
    let out = dir.path().join("results");
    let pattern = format!("{}/*.toml", configs.display());
    // Two workers ("GPUs" 0 and 1: each job's CUDA_VISIBLE_DEVICES; these
    // CPU jobs ignore it).
    let o = pipeline(&[
        "sweep",
        "--configs",
        &pattern,
        "--rerank-depths",
        "2",
        "--devices",
        "0,1",
        "--data",
        path(&tiny),
        "--out",
        path(&out),
    ]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("started on GPU 0") && err.contains("started on GPU 1"),
        "{err}"
    );
    assert!(
        err.contains("rr-missing.toml does not load") && err.contains("\"nope\""),
        "{err}"
    );
    let rows = leaderboard_rows(&out);
    let rerankers: Vec<&str> = rows
        .iter()
        .filter(|r| r["stage"] == "reranker")
        .map(|r| r["first_stage"].as_str().unwrap())
        .collect();
    assert_eq!(rerankers.len(), 2, "{rows:?}");
    assert!(rerankers.contains(&"bm25"), "{rerankers:?}");
    assert!(
        rerankers.iter().any(|f| f.ends_with("all-MiniLM-L6-v2")),
        "{rerankers:?}"
    );
    assert_eq!(
        rows.iter().filter(|r| r["stage"] == "retriever").count(),
        2,
        "{rows:?}"
    );
    // The job reranked the first stage's own run: as `pipeline rerank --run`.
    let again = dir.path().join("again.trec");
    let o = pipeline(&[
        "rerank",
        "--model",
        path(&model),
        "--data",
        path(&tiny),
        "--run",
        path(&out.join("runs/minilm/skillret.retriever.json")),
        "--top-n",
        "2",
        "--max-length",
        "128",
        "--tag",
        "reranker",
        "--output",
        path(&again),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        std::fs::read_to_string(out.join("runs/minilm+rr@2/run.reranker.trec")).unwrap()
    );
    let results: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("runs/minilm+rr@2/results.json")).unwrap(),
    )
    .unwrap();
    assert!(
        results["first_stage"]["sha256"]
            .as_str()
            .is_some_and(|s| s.len() == 64),
        "{results:#}"
    );
}

#[test]
fn the_official_json_reads_back_through_the_official_reading_code() {
    // scripts/read_official_json.py: eval.py's reading and scoring code
    // (pytrec_eval); `.ci/run` installs pytrec_eval-terrier.
    let has_pytrec = Command::new("python3")
        .args(["-c", "import pytrec_eval"])
        .output()
        .is_ok_and(|o| o.status.success());
    let Some(model) = test_cross_encoder().filter(|_| has_pytrec) else {
        eprintln!("skipped: needs python3 with pytrec_eval and the TEST cross-encoder");
        return;
    };
    let tiny = fixture("tiny");
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[data]\ndir = \"tests/fixtures/tiny\"\n[retriever]\nkind = \"bm25\"\n[reranker]\nmodel = \"{}\"\n\
         top_n = 2\nmax_length = 128\n",
        model.display()
    );
    let out = run_config(dir.path(), &config, &tiny, "a");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/read_official_json.py");
    for stage in ["retriever", "reranker"] {
        let file = dir.path().join(format!("a/skillret.{stage}.json"));
        let o = Command::new("python3")
            .arg(&script)
            .arg(&file)
            .args(["--data", path(&tiny)])
            .output()
            .unwrap();
        let said = text(&o.stdout);
        assert!(o.status.success(), "{said}{}", text(&o.stderr));
        // Every metric, @15 of a 2-skill reranked list included, as pytrec_eval.
        assert!(said.contains("15 metrics; 0 differ"), "{said}");
    }
}

/// A model saved by sentence-transformers 6.3 with a chat template: `pipeline
/// embed` renders each text through it as sentence-transformers does (its
/// vectors equal crates/embedder/tests/data/chat_reference.json's, made by
/// scripts/make_chat_fixture.py) and says so.
#[test]
fn embed_renders_chat_template_models_as_sentence_transformers_does() {
    let Some(model) = installed("test-qwen3-chat") else {
        return;
    };
    let reference: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("crates/embedder/tests/data/chat_reference.json"))
            .unwrap(),
    )
    .unwrap();
    let cases = reference["models"]["test-qwen3-chat"]["cases"]
        .as_array()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let lines: Vec<String> = cases.iter().map(|c| c["text"].to_string()).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let output = dir.path().join("out.jsonl");
    let out = pipeline(&[
        "embed",
        "--model",
        path(&model),
        "--kind",
        "query",
        "--max-length",
        "64",
        "--input",
        path(&input),
        "--output",
        path(&output),
    ]);
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("rendered through the chat template of")
            && err.contains("chat_template.jinja (flat messages)"),
        "{err}"
    );
    for (v, case) in read_vectors(&output).iter().zip(cases) {
        let want: Vec<f64> = case["query_vector"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap())
            .collect();
        let dot: f64 = v.iter().zip(&want).map(|(a, b)| a * b).sum();
        let norm = |x: &[f64]| x.iter().map(|a| a * a).sum::<f64>().sqrt();
        let cosine = dot / (norm(v) * norm(&want));
        assert!(cosine >= 0.99999, "{}: {cosine}", case["text"]);
    }
}

/// `pipeline run --query-focus` on `tests/fixtures/focus` with `config` (a retriever section);
/// returns the run directory.
fn focus_run(dir: &Path, name: &str, config: &str) -> PathBuf {
    let file = dir.join(format!("{name}.toml"));
    std::fs::write(
        &file,
        format!(
            "[data]\nsplit = \"test\"\n{config}\n[output]\ncache = \"{}\"\n",
            dir.join("cache").display()
        ),
    )
    .unwrap();
    let out = dir.join(name);
    let result = pipeline(&[
        "run",
        "--config",
        path(&file),
        "--data",
        path(&fixture("focus")),
        "--out",
        path(&out),
        "--query-focus",
    ]);
    assert!(result.status.success(), "{}", text(&result.stderr));
    assert!(text(&result.stdout).contains("Query focus"));
    out
}

/// focus.tsv's rows as maps of column to cell.
fn focus_rows(run: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let tsv = std::fs::read_to_string(run.join("focus.tsv")).unwrap();
    let mut lines = tsv.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
    lines
        .map(|l| {
            header
                .iter()
                .zip(l.split('\t'))
                .map(|(h, c)| ((*h).to_owned(), c.to_owned()))
                .collect()
        })
        .collect()
}

/// The fixture's requests are built so that one known sentence names each gold skill
/// (tests/fixtures/focus/README.md): the focus pass marks it as the intent sentence, leaving
/// out a sentence that names no skill changes nothing (BM25: Δ exactly 0), and the outputs are
/// the same bytes run after run.
#[test]
fn query_focus_finds_the_sentences_built_to_carry_each_gold_skill() {
    let dir = tempfile::tempdir().unwrap();
    let bm25 = "[retriever]\nkind = \"bm25\"\ntop_n = 10\n";
    let run = focus_run(dir.path(), "bm25", bm25);
    let intent = |rows: &[std::collections::HashMap<String, String>], q: &str, skill: &str| {
        let marked: Vec<&str> = rows
            .iter()
            .filter(|r| r["query_id"] == q && r["skill_id"] == skill && r["intent"] == "1")
            .map(|r| r["sentence"].as_str())
            .collect();
        assert_eq!(marked.len(), 1, "{q} {skill}: {marked:?}");
        marked[0].to_owned()
    };
    let rows = focus_rows(&run);
    assert_eq!(intent(&rows, "f-1", "tiny.k8s-backup"), "1");
    assert_eq!(intent(&rows, "f-2", "tiny.pdf-extract"), "1");
    assert_eq!(intent(&rows, "f-2", "tiny.git-rebase"), "2");
    assert_eq!(intent(&rows, "f-3", "tiny.sql-tuning"), "0");
    for r in rows
        .iter()
        .filter(|r| r["query_id"] == "f-1" && r["sentence"] != "1")
    {
        for column in [
            "delta_score",
            "delta_rank",
            "delta_ndcg@10",
            "delta_recall@10",
            "delta_completeness@10",
        ] {
            assert_eq!(r[column], "0", "f-1 sentence {}: {column}", r["sentence"]);
        }
    }
    // The offsets are the request's characters; f-3's code span stays whole.
    let focus: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("focus.json")).unwrap()).unwrap();
    let sentences = |q: &str| {
        focus["queries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["query_id"] == q)
            .unwrap()["sentences"]
            .clone()
    };
    assert_eq!(
        sentences("f-1"),
        serde_json::json!([[0, 29], [30, 108], [109, 135]])
    );
    assert_eq!(sentences("f-3"), serde_json::json!([[0, 86]]));
    let summary = &focus["stages"]["retriever"]["summary"];
    assert_eq!(summary["queries"], 3);
    assert_eq!(summary["multi_skill"]["several_sentences"]["queries"], 1);
    assert_eq!(summary["ndcg@10"]["n"], 3);
    // Deterministic: the same bytes again.
    let again = focus_run(dir.path(), "bm25-again", bm25);
    for file in ["focus.json", "focus.tsv"] {
        assert_eq!(
            std::fs::read(run.join(file)).unwrap(),
            std::fs::read(again.join(file)).unwrap(),
            "{file}"
        );
    }
    // The reranker's pass: its pool fixed from the full request, each sentence left out (no
    // sentence alone); its full-request figures are the run's.
    if let Some(cross) = test_cross_encoder() {
        let run = focus_run(
            dir.path(),
            "rerank",
            &format!(
                "{bm25}[reranker]\nmodel = \"{}\"\ntop_n = 10\nmax_length = 128\n\
                 [analysis]\nquery_focus_reranker = true\n",
                cross.display()
            ),
        );
        let rows = focus_rows(&run);
        let reranked: Vec<_> = rows.iter().filter(|r| r["stage"] == "reranker").collect();
        assert_eq!(reranked.len(), 12);
        assert!(
            reranked
                .iter()
                .all(|r| r["alone_rank"].is_empty() && !r["rank"].is_empty())
        );
        let focus: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("focus.json")).unwrap())
                .unwrap();
        let metrics: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(run.join("metrics.json")).unwrap())
                .unwrap();
        assert_eq!(
            focus["stages"]["reranker"]["summary"]["ndcg@10"]["mean"],
            metrics["reranker"]["NDCG@10"]
        );
    }
    // A hybrid's parts and its fusion are each a stage of the pass; MiniLM finds the same
    // intent sentences.
    let Some(model) = minilm() else { return };
    let hybrid = focus_run(
        dir.path(),
        "hybrid",
        &format!(
            "[embedder]\nmodel = \"{}\"\n[retriever]\nkind = \"hybrid\"\ntop_n = 10\n",
            model.display()
        ),
    );
    let rows = focus_rows(&hybrid);
    for stage in ["dense", "bm25", "retriever"] {
        let rows: Vec<_> = rows
            .iter()
            .filter(|r| r["stage"] == stage)
            .cloned()
            .collect();
        assert_eq!(rows.len(), 12, "{stage}");
        assert_eq!(intent(&rows, "f-1", "tiny.k8s-backup"), "1", "{stage}");
        assert_eq!(intent(&rows, "f-2", "tiny.pdf-extract"), "1", "{stage}");
        assert_eq!(intent(&rows, "f-2", "tiny.git-rebase"), "2", "{stage}");
    }
}

#[test]
fn query_focus_is_refused_where_it_cannot_run_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\n[analysis]\nquery_focus = \"yes\"\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let tiny = fixture("tiny");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "run",
            "--config",
            path(&config),
            "--data",
            path(&tiny),
            "--out",
            path(&out),
        ];
        args.extend(extra);
        pipeline(&args)
    };
    let result = run(&[]);
    assert_eq!(result.status.code(), Some(1));
    let err = text(&result.stderr);
    assert!(
        err.contains("c.toml") && err.contains("query_focus"),
        "{err}"
    );
    std::fs::write(
        &config,
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\n[analysis]\nquery_focus = true\nquery_focus_reranker = true\n",
    )
    .unwrap();
    let result = run(&[]);
    assert_eq!(result.status.code(), Some(1));
    let err = text(&result.stderr);
    assert!(
        err.contains("query_focus_reranker needs a [reranker]"),
        "{err}"
    );
    std::fs::write(
        &config,
        "[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\n[reranker]\nmodel = \"x\"\n",
    )
    .unwrap();
    let given = fixture("tiny/runs/lexical.run.trec");
    let result = run(&["--query-focus", "--first-stage", path(&given)]);
    assert_eq!(result.status.code(), Some(1));
    let err = text(&result.stderr);
    assert!(err.contains("a given --first-stage has none"), "{err}");
    assert!(!out.exists(), "an output was written");
}

/// A sweep puts a first stage's focus headroom and concentration (its configuration asks for
/// query focus) beside its row, from the job's focus.json; rows without it show none.
#[test]
fn sweep_shows_query_focus_beside_the_rows_that_ask_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let configs = dir.path().join("configs");
    std::fs::create_dir_all(&configs).unwrap();
    let cache = format!(
        "[output]\ncache = \"{}\"\n",
        dir.path().join("cache").display()
    );
    for (name, extra) in [
        ("bm25-focus", "[analysis]\nquery_focus = true\n"),
        ("bm25-top5", ""),
    ] {
        let top_n = if extra.is_empty() { 5 } else { 10 };
        std::fs::write(
            configs.join(format!("{name}.toml")),
            format!("[data]\nsplit = \"test\"\n[retriever]\nkind = \"bm25\"\ntop_n = {top_n}\n{extra}{cache}"),
        )
        .unwrap();
    }
    let out = dir.path().join("sweep");
    let pattern = format!("{}/*.toml", configs.display());
    let result = pipeline(&[
        "sweep",
        "--configs",
        &pattern,
        "--data",
        path(&fixture("focus")),
        "--out",
        path(&out),
    ]);
    assert!(result.status.success(), "{}", text(&result.stderr));
    let focus: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("runs/bm25-focus/focus.json")).unwrap(),
    )
    .unwrap();
    let summary = &focus["stages"]["retriever"]["summary"];
    let headroom = summary["focus_headroom"]["mean"].as_f64().unwrap();
    let concentration = summary["concentration"]["mean"].as_f64().unwrap();
    let rows = leaderboard_rows(&out);
    let row = |config: &str| {
        rows.iter()
            .find(|r| r["config"].as_str().unwrap().ends_with(config))
            .unwrap()
            .clone()
    };
    assert_eq!(
        row("bm25-focus.toml")["focus"],
        serde_json::json!([headroom, concentration])
    );
    assert!(row("bm25-top5.toml")["focus"].is_null());
    let md = std::fs::read_to_string(out.join("leaderboard.md")).unwrap();
    assert!(md.contains("| focus headroom | concentration |"), "{md}");
    assert!(
        md.contains(&format!("| {headroom:.4} | {concentration:.4} |")),
        "{md}"
    );
    let html = std::fs::read_to_string(out.join("leaderboard.html")).unwrap();
    assert!(html.contains("\"focus headroom\""), "the page's columns");
}
