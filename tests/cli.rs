//! End-to-end tests of the `pipeline` command on the shipped tiny fixture.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

fn pipeline(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(args)
        .output()
        .expect("the pipeline binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

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
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2");
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-models.sh)",
            dir.display()
        );
        None
    }
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
