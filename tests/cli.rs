//! End-to-end tests of the `pipeline` command on the shipped tiny fixture.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

mod common;

use common::{fixture, installed, path, pipeline, text};

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
    assert!(
        text(&out.stderr).contains("--revision"),
        "{}",
        text(&out.stderr)
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
    assert_eq!(before.len(), after.len(), "every candidate is kept");
    let queries: std::collections::BTreeSet<&str> =
        before.iter().map(|(q, _, _)| q.as_str()).collect();
    for query in queries {
        let mut firsts: Vec<(f64, &str)> = before
            .iter()
            .filter(|(q, _, _)| q == query)
            .map(|(_, d, s)| (*s, d.as_str()))
            .collect();
        firsts.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(a.1)));
        let reranked: Vec<&str> = after
            .iter()
            .filter(|(q, _, _)| q == query)
            .map(|(_, d, _)| d.as_str())
            .collect();
        // The top 2 are the first stage's top 2, in any order; the rest follow
        // in first-stage order.
        let mut top: Vec<&str> = reranked.iter().take(2).copied().collect();
        let mut expected_top: Vec<&str> = firsts.iter().take(2).map(|x| x.1).collect();
        top.sort_unstable();
        expected_top.sort_unstable();
        assert_eq!(top, expected_top, "query {query}");
        let rest: Vec<&str> = firsts.iter().skip(2).map(|x| x.1).collect();
        assert_eq!(&reranked[top.len()..], &rest[..], "query {query}");
    }
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
        "[data]\nsplit = \"test\"\n[embedder]\nmodel = \"{}/models/all-MiniLM-L6-v2\"\nmax_length = 64\n[retriever]\nkind = \"dense\"\n",
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
    assert_eq!(reranked.len(), first.len());
    // Each query's top 3 carry P(yes) scores, in (0, 1) and descending.
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
    let config = std::fs::read_to_string(configs().join("qwen3-test-models.toml"))
        .unwrap()
        .replace("\"models/", &format!("\"{}/models/", root.display()));
    let out = run_config(dir.path(), &config, &sample, "q");
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("2851 documents") && log.contains("24 queries"),
        "{log}"
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
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
    if !model.join("model.safetensors").is_file() {
        eprintln!("skipping: run scripts/fetch-models.sh");
        return;
    }
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
            && err.contains("allowed: avx512, avxvnni, avx2, scalar"),
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
}
