//! Every class of bad input is an error (or, where the official loader
//! tolerates it, a warning) that names the file, the line and the field.

use std::path::{Path, PathBuf};

use eval::{Dataset, Diagnostic, Error, Qrels, Run};
use tempfile::TempDir;

const SKILLS: &str = r##"{"id": "s1", "name": "pdf", "description": "Read PDFs.", "skill_md": "# PDF"}
{"id": "s2", "name": "git", "description": "Use git.", "skill_md": ""}
"##;
const QUERIES: &str = r#"{"id": "q1", "query": "Extract tables from a PDF", "skill_ids": ["s1"]}
{"id": "q2", "query": "Rebase my branch", "skill_ids": ["s2"]}
"#;
const QRELS: &str = r#"{"query_id": "q1", "skill_id": "s1", "relevance": 1}
{"query_id": "q2", "skill_id": "s2", "relevance": 1}
"#;

/// A data directory with the given files (`None` leaves a file out).
fn data_dir(skills: &[u8], queries: &[u8], qrels: Option<&[u8]>) -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut files = vec![("skills", skills), ("queries", queries)];
    if let Some(q) = qrels {
        files.push(("qrels", q));
    }
    for (kind, content) in files {
        std::fs::create_dir_all(dir.path().join(kind)).unwrap();
        std::fs::write(dir.path().join(kind).join("test.jsonl"), content).unwrap();
    }
    dir
}

fn load_error(dir: &TempDir) -> Diagnostic {
    match Dataset::load(dir.path(), "test") {
        Err(Error::Input(d)) => d,
        other => panic!("expected an input error, got {other:?}"),
    }
}

/// The diagnostic is for `file` at `line`, blames `field`, and its message
/// says all three.
fn assert_names(d: &Diagnostic, file: &Path, line: usize, field: &str) {
    assert_eq!(d.location.path, file, "{d}");
    assert_eq!(d.location.line, Some(line), "{d}");
    assert_eq!(d.field.as_deref(), Some(field), "{d}");
    let text = d.to_string();
    assert!(
        text.contains(&format!("{}:{line}", file.display())),
        "{text}"
    );
    assert!(text.contains(&format!("`{field}`")), "{text}");
}

fn file(dir: &TempDir, kind: &str) -> PathBuf {
    dir.path().join(kind).join("test.jsonl")
}

#[test]
fn a_good_directory_loads() {
    let dir = data_dir(
        SKILLS.as_bytes(),
        QUERIES.as_bytes(),
        Some(QRELS.as_bytes()),
    );
    let data = Dataset::load(dir.path(), "test").unwrap();
    assert_eq!(data.skills.len(), 2);
    assert_eq!(data.queries[1].text, "Rebase my branch");
    assert_eq!(data.qrels.get("q2").unwrap()["s2"], 1);
    assert!(data.warnings.is_empty(), "{:?}", data.warnings);
    // skill_md falls back to the description when empty.
    assert_eq!(data.skills[1].text(), "git | Use git. | Use git.");
}

#[test]
fn malformed_json_line() {
    let skills = format!("{SKILLS}{{\"id\": \"s3\", \"name\": \"x\" \"description\": \"y\"}}\n");
    let dir = data_dir(skills.as_bytes(), QUERIES.as_bytes(), None);
    let d = load_error(&dir);
    assert_names(&d, &file(&dir, "skills"), 3, "name");
    assert!(d.message.contains("column"), "{d}");
}

#[test]
fn a_record_that_is_an_array_is_refused() {
    // serde would read `["s3", "x"]` as {id: "s3", name: "x"} (issue 54).
    let skills = format!("{SKILLS}[\"s3\", \"x\"]\n");
    let dir = data_dir(skills.as_bytes(), QUERIES.as_bytes(), None);
    let d = load_error(&dir);
    assert_eq!(d.location.path, file(&dir, "skills"), "{d}");
    assert_eq!(d.location.line, Some(3), "{d}");
    assert!(d.message.contains("expected a JSON object"), "{d}");
    // A label inside a query's list, too.
    let queries = "{\"id\": \"q1\", \"query\": \"x\", \"labels\": [[\"s1\", 1]]}\n";
    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    let d = load_error(&dir);
    assert_eq!(d.location.line, Some(1), "{d}");
    assert!(d.to_string().contains("labels"), "{d}");
}

#[test]
fn missing_field() {
    let queries = format!("{QUERIES}\n{{\"id\": \"q3\", \"skill_ids\": [\"s1\"]}}\n");
    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    let d = load_error(&dir);
    // Line 3 is blank and skipped; the record is on line 4.
    assert_names(&d, &file(&dir, "queries"), 4, "query");
    assert!(d.message.contains("missing field"), "{d}");
}

#[test]
fn field_of_the_wrong_type() {
    let qrels =
        format!("{QRELS}{{\"query_id\": \"q1\", \"skill_id\": \"s2\", \"relevance\": \"high\"}}\n");
    let dir = data_dir(
        SKILLS.as_bytes(),
        QUERIES.as_bytes(),
        Some(qrels.as_bytes()),
    );
    assert_names(&load_error(&dir), &file(&dir, "qrels"), 3, "relevance");
}

#[test]
fn duplicate_skill_id() {
    let skills =
        format!("{SKILLS}{{\"id\": \"s1\", \"name\": \"again\", \"description\": \"d\"}}\n");
    let dir = data_dir(skills.as_bytes(), QUERIES.as_bytes(), None);
    let d = load_error(&dir);
    assert_names(&d, &file(&dir, "skills"), 3, "id");
    assert!(d.message.contains("first on line 1"), "{d}");
}

#[test]
fn duplicate_query_id() {
    let queries = format!("{QUERIES}{{\"id\": \"q2\", \"query\": \"again\", \"skill_ids\": []}}\n");
    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    let d = load_error(&dir);
    assert_names(&d, &file(&dir, "queries"), 3, "id");
    assert!(d.message.contains("first on line 2"), "{d}");
}

#[test]
fn empty_query() {
    let queries =
        format!("{QUERIES}{{\"id\": \"q3\", \"query\": \" \\n \", \"skill_ids\": [\"s1\"]}}\n");
    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    assert_names(&load_error(&dir), &file(&dir, "queries"), 3, "query");
}

#[test]
fn non_utf8_bytes() {
    let mut skills = SKILLS.as_bytes().to_vec();
    skills.extend_from_slice(b"{\"id\": \"s3\", \"name\": \"x\", \"description\": \"caf\xe9\"}\n");
    let dir = data_dir(&skills, QUERIES.as_bytes(), None);
    let d = load_error(&dir);
    assert_names(&d, &file(&dir, "skills"), 3, "description");
    assert!(d.message.contains("UTF-8"), "{d}");
}

#[test]
fn query_without_labels_and_no_qrels_file() {
    let queries = format!("{QUERIES}{{\"id\": \"q3\", \"query\": \"anything\"}}\n");
    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    assert_names(&load_error(&dir), &file(&dir, "queries"), 3, "skill_ids");
    // With a qrels file the query needs no labels, as in the official loader.
    let dir = data_dir(
        SKILLS.as_bytes(),
        queries.as_bytes(),
        Some(QRELS.as_bytes()),
    );
    assert!(Dataset::load(dir.path(), "test").is_ok());
}

#[test]
fn qrel_naming_an_unknown_skill_or_query_is_a_counted_warning() {
    let qrels = format!(
        "{QRELS}{{\"query_id\": \"q1\", \"skill_id\": \"gone\", \"relevance\": 1}}\n\
         {{\"query_id\": \"q9\", \"skill_id\": \"s1\", \"relevance\": 1}}\n"
    );
    let dir = data_dir(
        SKILLS.as_bytes(),
        QUERIES.as_bytes(),
        Some(qrels.as_bytes()),
    );
    let data = Dataset::load(dir.path(), "test").unwrap();
    assert_eq!(data.warnings.len(), 2, "{:?}", data.warnings);
    let path = file(&dir, "qrels");
    assert_names(&data.warnings[0], &path, 3, "skill_id");
    assert_names(&data.warnings[1], &path, 4, "query_id");
    // As in the official loader: the unknown skill stays relevant, the
    // unknown query is dropped.
    assert_eq!(data.qrels.get("q1").unwrap().len(), 2);
    assert!(data.qrels.get("q9").is_none());
}

#[test]
fn label_naming_an_unknown_skill_is_a_counted_warning() {
    let queries = format!(
        "{QUERIES}{{\"id\": \"q3\", \"query\": \"x\", \"skill_ids\": [\"s1\", \"nope\"]}}\n"
    );
    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    let data = Dataset::load(dir.path(), "test").unwrap();
    assert_eq!(data.warnings.len(), 1);
    assert_names(&data.warnings[0], &file(&dir, "queries"), 3, "skill_ids[1]");
}

#[test]
fn repeated_qrel_keeps_the_last_grade_with_a_warning() {
    let qrels =
        format!("{QRELS}{{\"query_id\": \"q1\", \"skill_id\": \"s1\", \"relevance\": 2}}\n");
    let dir = data_dir(
        SKILLS.as_bytes(),
        QUERIES.as_bytes(),
        Some(qrels.as_bytes()),
    );
    let data = Dataset::load(dir.path(), "test").unwrap();
    assert_eq!(data.qrels.get("q1").unwrap()["s1"], 2);
    assert_eq!(data.warnings.len(), 1);
    assert_names(&data.warnings[0], &file(&dir, "qrels"), 3, "skill_id");
}

#[test]
fn labels_take_priority_and_may_be_json_encoded() {
    let queries = concat!(
        r#"{"id": "q1", "query": "a", "skill_ids": ["s2"], "labels": [{"id": "s1", "relevance": 2}]}"#,
        "\n",
        r#"{"id": "q2", "query": "b", "labels": "[{\"id\": \"s2\", \"relevance\": 1}]"}"#,
        "\n",
        r#"{"id": "q3", "query": "c", "labels": "[{\"id\": \"s2\"}]"}"#,
        "\n"
    );
    let dir = data_dir(
        SKILLS.as_bytes(),
        &queries.as_bytes()[..queries.rfind("{\"id\": \"q3\"").unwrap()],
        None,
    );
    let data = Dataset::load(dir.path(), "test").unwrap();
    assert_eq!(data.qrels.get("q1").unwrap().get("s1"), Some(&2));
    assert_eq!(data.qrels.get("q1").unwrap().get("s2"), None);
    assert_eq!(data.qrels.get("q2").unwrap().get("s2"), Some(&1));

    let dir = data_dir(SKILLS.as_bytes(), queries.as_bytes(), None);
    assert_names(
        &load_error(&dir),
        &file(&dir, "queries"),
        3,
        "labels[0].relevance",
    );
}

#[test]
fn missing_directory_or_file_says_what_is_expected() {
    let dir = tempfile::tempdir().unwrap();
    let err = Dataset::load(&dir.path().join("nope"), "test").unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
    let err = Dataset::load(dir.path(), "test").unwrap_err();
    assert!(err.to_string().contains("skills/test.jsonl"), "{err}");
}

fn write(dir: &TempDir, name: &str, content: &[u8]) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, content).unwrap();
    path
}

fn input_error<T: std::fmt::Debug>(result: eval::Result<T>) -> Diagnostic {
    match result {
        Err(Error::Input(d)) => d,
        other => panic!("expected an input error, got {other:?}"),
    }
}

#[test]
fn trec_run_errors_name_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "r.trec", b"q1 Q0 a 1 0.5 t\nq1 Q0 b 2 high t\n");
    assert_names(&input_error(Run::read_trec(&path)), &path, 2, "score");

    let path = write(&dir, "r.trec", b"q1 Q0 a 1 0.5 t\n\nq1 Q0 b 2 0.4\n");
    let d = input_error(Run::read_trec(&path));
    assert_names(&d, &path, 3, "run_tag");
    assert!(d.message.contains("expected 6"), "{d}");

    let path = write(
        &dir,
        "r.trec",
        b"q1 Q0 a 1 0.5 t\nq2 Q0 a 1 0.5 t\nq1 Q0 a 2 0.4 t\n",
    );
    let d = input_error(Run::read_trec(&path));
    assert_names(&d, &path, 3, "doc_id");
    assert!(d.message.contains("first on line 1"), "{d}");

    // A repeat within one block of a query's lines.
    let path = write(
        &dir,
        "r.trec",
        b"q1 Q0 a 1 0.5 t\nq1 Q0 b 2 0.4 t\nq1 Q0 a 3 0.3 t\n",
    );
    let d = input_error(Run::read_trec(&path));
    assert_names(&d, &path, 3, "doc_id");
    assert!(d.message.contains("first on line 1"), "{d}");

    // A repeat far apart in a large file, where the query's lines are split
    // between chunks read in parallel.
    let mut big = String::new();
    for i in 0..40_000 {
        big.push_str(&format!("q1 Q0 doc-{i} {i} 0.5 t\n"));
    }
    big.push_str("q1 Q0 doc-7 0 0.1 t\n");
    let path = write(&dir, "big.trec", big.as_bytes());
    let d = input_error(Run::read_trec(&path));
    assert_names(&d, &path, 40_001, "doc_id");
    assert!(d.message.contains("first on line 8"), "{d}");
    big.truncate(big.len() - "q1 Q0 doc-7 0 0.1 t\n".len());
    std::fs::write(&path, &big).unwrap();
    assert_eq!(
        Run::read_trec(&path).unwrap().get("q1").unwrap().len(),
        40_000
    );

    let path = write(&dir, "r.trec", b"q1 Q0 a 1 0.5 t\nq1 Q0 b\xff 2 0.4 t\n");
    assert_names(&input_error(Run::read_trec(&path)), &path, 2, "doc_id");

    let path = write(&dir, "r.trec", b"q1 Q0 a 1 NaN t\n");
    assert_names(&input_error(Run::read_trec(&path)), &path, 1, "score");
}

#[test]
fn trec_qrels_errors_name_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(&dir, "q.trec", b"q1 0 a 1\nq1 0 b yes\n");
    assert_names(&input_error(Qrels::read_trec(&path)), &path, 2, "relevance");
    let path = write(&dir, "q.trec", b"q1 0 a 1\nq1 0 a 0\n");
    assert_names(&input_error(Qrels::read_trec(&path)), &path, 2, "doc_id");
}

#[test]
fn official_json_errors_name_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        &dir,
        "o.json",
        b"{\n \"retrieval\": {\n  \"test\": {\n   \"q1\": {\"a\": \"x\"}\n  }\n }\n}\n",
    );
    assert_names(
        &input_error(Run::read(&path, "test")),
        &path,
        4,
        "retrieval.test.q1.a",
    );

    let path = write(&dir, "o.json", b"{\"metrics\": {}}\n");
    let d = input_error(Run::read(&path, "test"));
    assert_eq!(d.field.as_deref(), Some("retrieval"), "{d}");

    let path = write(&dir, "o.json", b"{\"retrieval\": {\"train\": {}}}\n");
    let d = input_error(Run::read(&path, "test"));
    assert!(d.message.contains("\"train\""), "{d}");
}

#[test]
fn written_files_read_back_identically() {
    let dir = data_dir(
        SKILLS.as_bytes(),
        QUERIES.as_bytes(),
        Some(QRELS.as_bytes()),
    );
    let qrels = Dataset::load(dir.path(), "test").unwrap().qrels;
    let out = tempfile::tempdir().unwrap();
    qrels.write_trec(&out.path().join("q.trec")).unwrap();
    assert_eq!(Qrels::read_trec(&out.path().join("q.trec")).unwrap(), qrels);
    qrels.write_jsonl(&out.path().join("q.jsonl")).unwrap();
    let mut warnings = Vec::new();
    assert_eq!(
        Qrels::read(&out.path().join("q.jsonl"), "test", &mut warnings).unwrap(),
        qrels
    );

    let run = Run::read_trec(&crate::data("parity/run.trec")).unwrap();
    run.write_trec(&out.path().join("r.trec"), "copy").unwrap();
    let again = Run::read_trec(&out.path().join("r.trec")).unwrap();
    for query in run.query_ids() {
        let mut a = run.get(query).unwrap().to_vec();
        eval::sort_trec(&mut a);
        assert_eq!(again.get(query).unwrap(), a.as_slice());
    }
    assert!(
        run.write_trec(&out.path().join("x.trec"), "two words")
            .is_err()
    );
}

#[test]
fn a_skill_ids_filter_keeps_its_skills_and_names_unknown_ids() {
    let dir = data_dir(
        SKILLS.as_bytes(),
        QUERIES.as_bytes(),
        Some(QRELS.as_bytes()),
    );
    let mut data = Dataset::load(dir.path(), "test").unwrap();
    let filter = write(&dir, "keep.txt", b"# the subset\n\ns2\n");
    assert_eq!(data.keep_skills(&filter).unwrap(), 1);
    assert_eq!(data.skills[0].id, "s2");
    // Queries and judgements stay whole, as the official evaluation keeps them.
    assert_eq!(data.queries.len(), 2);
    assert_eq!(data.qrels.get("q1").unwrap()["s1"], 1);

    let mut data = Dataset::load(dir.path(), "test").unwrap();
    let unknown = write(&dir, "unknown.txt", b"s1\ns9\n");
    let d = input_error(data.keep_skills(&unknown));
    assert_names(&d, &unknown, 2, "id");
    assert!(d.message.contains("\"s9\""), "{d}");
    assert_eq!(data.skills.len(), 2, "nothing kept on error");
    let twice = write(&dir, "twice.txt", b"s1\ns1\n");
    assert_names(&input_error(data.keep_skills(&twice)), &twice, 2, "id");
    let empty = write(&dir, "empty.txt", b"# nothing\n");
    let d = input_error(data.keep_skills(&empty));
    assert!(d.to_string().contains("names no skill id"), "{d}");
}

#[test]
fn skill_categories_load_where_the_records_carry_them() {
    let skills = r##"{"id": "s1", "name": "pdf", "description": "Read PDFs.", "skill_md": "# PDF", "major": "documents", "sub": "pdf"}
{"id": "s2", "name": "git", "description": "Use git.", "skill_md": "", "major": " ", "sub": null}
"##;
    let dir = data_dir(
        skills.as_bytes(),
        QUERIES.as_bytes(),
        Some(QRELS.as_bytes()),
    );
    let data = Dataset::load(dir.path(), "test").unwrap();
    assert_eq!(data.skills[0].major.as_deref(), Some("documents"));
    assert_eq!(data.skills[0].sub.as_deref(), Some("pdf"));
    assert_eq!(data.skills[1].major, None, "blank is none");
    assert_eq!(data.skills[1].sub, None);
}
