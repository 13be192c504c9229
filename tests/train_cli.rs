//! End-to-end tests of `pipeline train`: a run on the shipped fixture, a run
//! killed with SIGKILL and resumed to the same weights, and bad input.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use common::{installed, path, pipeline, root, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A cross-encoder training configuration on the tiny fixture.
fn config(base: &Path, miner: &Path, extra_train: &str, cache: &Path) -> String {
    format!(
        "[data]\ndir = \"{data}\"\nsplit = \"test\"\nsource = \"pseudo\"\n\
         [model]\nbase = \"{base}\"\nobjective = \"cross-encoder\"\nmax_length = 64\n\
         [pseudo]\nsingle = 4\ncomposed = 12\nneighbours = 5\n\
         [negatives]\nminer = \"{miner}\"\ncount = 2\ndepth = 6\n\
         [train]\nlr = 1e-4\nbatch_size = 2\nseed = 3\n{extra_train}\
         [output]\ncache = \"{cache}\"\n",
        data = root().join("tests/fixtures/tiny").display(),
        base = base.display(),
        miner = miner.display(),
        cache = cache.display(),
    )
}

fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, content).unwrap();
    p
}

#[test]
fn train_writes_a_model_this_project_loads_and_a_rerun_finds_it() {
    let (Some(tiny), Some(minilm)) = (installed("test-tiny-bert"), installed("all-MiniLM-L6-v2"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    // Skills shown without their intents: a query is never a copy of its
    // positive's text.
    let cfg = write(
        dir.path(),
        "t.toml",
        &config(&tiny, &minilm, "", &dir.path().join("cache")).replace(
            "neighbours = 5\n",
            "neighbours = 5\ndocuments = \"without-intents\"\n",
        ),
    );
    let out = dir.path().join("model");
    let first = pipeline(&["train", "--config", path(&cfg), "--out", path(&out)]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    let err = text(&first.stderr);
    assert!(
        err.contains("16 pseudo-labelled (4 single, 12 composed)"),
        "{err}"
    );
    for f in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "training.json",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    let log = std::fs::read_to_string(dir.path().join("model.training/train_log.jsonl")).unwrap();
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("training.json")).unwrap()).unwrap();
    assert_eq!(
        log.lines().count() as u64,
        record["summary"]["steps"].as_u64().unwrap()
    );
    assert!(!dir.path().join("model.training/checkpoints").exists());
    // The training data holds no copy of a query in its positive's text,
    // and no skill text keeps its frontmatter.
    let data =
        std::fs::read_to_string(dir.path().join("model.training/training_data.jsonl")).unwrap();
    for line in data.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let query = v["query"].as_str().unwrap();
        for p in v["positives"].as_array().unwrap() {
            let doc = p["text"].as_str().unwrap();
            assert!(!doc.contains(query) && !doc.contains("\n---"), "{query}");
        }
    }

    // The reranker loads it as any cross-encoder and rescores a run.
    let reranked = dir.path().join("reranked.trec");
    let rerank = pipeline(&[
        "rerank",
        "--model",
        path(&out),
        "--data",
        path(&root().join("tests/fixtures/tiny")),
        "--run",
        path(&root().join("tests/fixtures/tiny/runs/lexical.run.trec")),
        "--top-n",
        "3",
        "--output",
        path(&reranked),
    ]);
    assert!(rerank.status.success(), "{}", text(&rerank.stderr));
    // Each query's top 3 and nothing more, as the official eval_rerank.
    let lines = std::fs::read_to_string(&reranked).unwrap();
    let original =
        std::fs::read_to_string(root().join("tests/fixtures/tiny/runs/lexical.run.trec")).unwrap();
    let mut per_query: std::collections::BTreeMap<&str, usize> = Default::default();
    for line in original.lines() {
        *per_query
            .entry(line.split_whitespace().next().unwrap())
            .or_default() += 1;
    }
    let expected: usize = per_query.values().map(|n| (*n).min(3)).sum();
    assert_eq!(lines.lines().count(), expected);

    // Same configuration, same data: nothing to do.
    let again = pipeline(&["train", "--config", path(&cfg), "--out", path(&out)]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("already trained"),
        "{}",
        text(&again.stderr)
    );
    // Another configuration into the same directory: refused, untouched.
    let before = std::fs::read(out.join("model.safetensors")).unwrap();
    let other = write(
        dir.path(),
        "o.toml",
        &config(&tiny, &minilm, "epochs = 2\n", &dir.path().join("cache")),
    );
    let refused = pipeline(&["train", "--config", path(&other), "--out", path(&out)]);
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("another configuration"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(
        std::fs::read(out.join("model.safetensors")).unwrap(),
        before
    );
}

#[test]
fn a_run_killed_with_sigkill_resumes_to_the_weights_of_an_uninterrupted_one() {
    let (Some(minilm), Some(tiny)) = (installed("all-MiniLM-L6-v2"), installed("test-tiny-bert"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    // The tiny BERT trains a step in about a tenth of a second in the test build: three epochs
    // of 8 steps leave seconds between the first checkpoint (step 2) and the end of the run.
    let cfg = write(
        dir.path(),
        "t.toml",
        &config(&tiny, &minilm, "checkpoint_every = 2\nepochs = 3\n", &cache),
    );
    let killed = dir.path().join("killed");
    let checkpoints = dir.path().join("killed.training/checkpoints");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .args(["train", "--config", path(&cfg), "--out", path(&killed)])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let has_checkpoint = || {
        std::fs::read_dir(&checkpoints)
            .map(|d| {
                d.flatten()
                    .any(|e| e.file_name().to_string_lossy().starts_with("step-"))
            })
            .unwrap_or(false)
    };
    while !has_checkpoint() {
        assert!(
            started.elapsed().as_secs() < 300,
            "no checkpoint in 5 minutes"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before a checkpoint"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert!(!killed.exists(), "a killed run left a model directory");

    // A checkpoint of another model is refused, naming it; nothing written.
    let wrong = write(
        dir.path(),
        "w.toml",
        &config(
            &minilm,
            &minilm,
            "checkpoint_every = 2\nepochs = 3\n",
            &cache,
        ),
    );
    let refused = pipeline(&["train", "--config", path(&wrong), "--out", path(&killed)]);
    assert!(!refused.status.success());
    let err = text(&refused.stderr);
    assert!(
        err.contains("state.json") && err.contains("another model"),
        "{err}"
    );
    assert!(!killed.exists());

    let resumed = pipeline(&["train", "--config", path(&cfg), "--out", path(&killed)]);
    assert!(resumed.status.success(), "{}", text(&resumed.stderr));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(killed.join("training.json")).unwrap())
            .unwrap();
    assert!(
        record["summary"]["resumed_from"].as_u64().unwrap() >= 2,
        "{record}"
    );

    let clean = dir.path().join("clean");
    let whole = pipeline(&["train", "--config", path(&cfg), "--out", path(&clean)]);
    assert!(whole.status.success(), "{}", text(&whole.stderr));
    assert_eq!(
        std::fs::read(killed.join("model.safetensors")).unwrap(),
        std::fs::read(clean.join("model.safetensors")).unwrap(),
        "resumed weights differ from an uninterrupted run's"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("killed.training/train_log.jsonl"))
            .unwrap()
            .lines()
            .count(),
        std::fs::read_to_string(dir.path().join("clean.training/train_log.jsonl"))
            .unwrap()
            .lines()
            .count()
    );
}

/// A labelled split `train` beside the tiny fixture's skills.
/// A cross-encoder saved by sentence-transformers 6.3 with a chat template
/// (the message modality and a default prompt) trains on its pairs rendered
/// through the template, as it reads them when it reranks, and the trained
/// model keeps the template, the modality and the prompt: the reranker reads
/// it the same way.
#[test]
fn a_cross_encoder_with_a_chat_template_trains_on_its_rendered_pairs_and_keeps_them() {
    let (Some(base), Some(minilm)) = (
        installed("test-bert-cross-encoder-chat"),
        installed("all-MiniLM-L6-v2"),
    ) else {
        eprintln!("skipping: run python3 scripts/make_chat_models.py");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cfg = write(
        dir.path(),
        "t.toml",
        &config(&base, &minilm, "", &dir.path().join("cache"))
            .replace("single = 4\ncomposed = 12", "single = 2\ncomposed = 2"),
    );
    let out = dir.path().join("model");
    let trained = pipeline(&["train", "--config", path(&cfg), "--out", path(&out)]);
    let err = text(&trained.stderr);
    assert!(trained.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "rendered through the chat template of {}",
            base.join("chat_template.jinja").display()
        )),
        "{err}"
    );
    for f in [
        "chat_template.jinja",
        "modules.json",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ] {
        assert_eq!(
            std::fs::read(out.join(f)).unwrap(),
            std::fs::read(base.join(f)).unwrap(),
            "{f}"
        );
    }
    let rerank = pipeline(&[
        "rerank",
        "--model",
        path(&out),
        "--data",
        path(&root().join("tests/fixtures/tiny")),
        "--run",
        path(&root().join("tests/fixtures/tiny/runs/lexical.run.trec")),
        "--top-n",
        "2",
        "--output",
        path(&dir.path().join("reranked.trec")),
    ]);
    let err = text(&rerank.stderr);
    assert!(rerank.status.success(), "{err}");
    assert!(
        err.contains("pairs rendered through the chat template of")
            && err.contains("prompt \"Rank the skill for the request.\""),
        "{err}"
    );
}

/// A bi-encoder base whose sentence_bert_config.json lists the message
/// modality trains on its texts rendered through the chat template, and the
/// trained model keeps both: `pipeline embed` renders through it.
#[test]
fn a_bi_encoder_with_a_chat_template_trains_on_its_rendered_texts_and_keeps_them() {
    let Some(minilm) = installed("all-MiniLM-L6-v2") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("minilm-chat");
    std::fs::create_dir_all(base.join("1_Pooling")).unwrap();
    for f in [
        "config.json",
        "model.safetensors",
        "modules.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "1_Pooling/config.json",
    ] {
        std::fs::copy(minilm.join(f), base.join(f)).unwrap();
    }
    std::fs::write(
        base.join("chat_template.jinja"),
        "{{ cls_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}{{ sep_token }}",
    )
    .unwrap();
    let sbert = r#"{"transformer_task": "feature-extraction", "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}, "message": {"method": "forward", "method_output_name": "last_hidden_state", "format": "flat"}}, "module_output_name": "token_embeddings"}"#;
    std::fs::write(base.join("sentence_bert_config.json"), sbert).unwrap();
    let cfg = write(
        dir.path(),
        "t.toml",
        &config(&base, &minilm, "", &dir.path().join("cache"))
            .replace("cross-encoder", "bi-encoder")
            .replace("single = 4\ncomposed = 12", "single = 2\ncomposed = 2"),
    );
    let out = dir.path().join("model");
    let trained = pipeline(&["train", "--config", path(&cfg), "--out", path(&out)]);
    let err = text(&trained.stderr);
    assert!(trained.status.success(), "{err}");
    assert!(
        err.contains("rendered through the chat template of"),
        "{err}"
    );
    let saved: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("sentence_bert_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(saved["modality_config"]["message"]["format"], "flat");
    assert!(out.join("chat_template.jinja").is_file());
    let input = write(dir.path(), "texts.jsonl", "\"merge two PDF reports\"\n");
    let embed = pipeline(&[
        "embed",
        "--model",
        path(&out),
        "--input",
        path(&input),
        "--output",
        path(&dir.path().join("v.jsonl")),
    ]);
    let err = text(&embed.stderr);
    assert!(embed.status.success(), "{err}");
    assert!(
        err.contains("rendered through the chat template of"),
        "{err}"
    );
}

fn labelled(dir: &Path, queries: &str, qrels: &str) -> PathBuf {
    let data = dir.join("data");
    for sub in ["skills", "queries", "qrels"] {
        std::fs::create_dir_all(data.join(sub)).unwrap();
    }
    std::fs::copy(
        root().join("tests/fixtures/tiny/skills/test.jsonl"),
        data.join("skills/train.jsonl"),
    )
    .unwrap();
    std::fs::write(data.join("queries/train.jsonl"), queries).unwrap();
    std::fs::write(data.join("qrels/train.jsonl"), qrels).unwrap();
    data
}

#[test]
fn bad_training_input_is_a_clear_error_and_nothing_is_written() {
    let (Some(tiny), Some(minilm)) = (installed("test-tiny-bert"), installed("all-MiniLM-L6-v2"))
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let skill = |i: usize| -> String {
        let line = std::fs::read_to_string(root().join("tests/fixtures/tiny/skills/test.jsonl"))
            .unwrap()
            .lines()
            .nth(i)
            .unwrap()
            .to_owned();
        serde_json::from_str::<serde_json::Value>(&line).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let queries = "{\"id\": \"t1\", \"query\": \"back up my database\"}\n{\"id\": \"t2\", \"query\": \"write release notes\"}\n";
    let labelled_config = |data: &Path, split: &str| {
        config(&tiny, &minilm, "", &dir.path().join("cache"))
            .replace(
                &format!("dir = \"{}\"", root().join("tests/fixtures/tiny").display()),
                &format!("dir = \"{}\"", data.display()),
            )
            .replace("split = \"test\"", &format!("split = \"{split}\""))
            .replace("source = \"pseudo\"", "source = \"labelled\"")
            .replace("[pseudo]\nsingle = 4\ncomposed = 12\nneighbours = 5\n", "")
    };
    let out = dir.path().join("model");
    let cases = [
        (
            // t2's only judgement is 0: no positive.
            format!(
                "{{\"query_id\": \"t1\", \"skill_id\": \"{}\", \"relevance\": 1}}\n{{\"query_id\": \"t2\", \"skill_id\": \"{}\", \"relevance\": 0}}\n",
                skill(0),
                skill(1)
            ),
            vec!["queries/train.jsonl:2", "\"t2\"", "no relevant skill"],
        ),
        (
            format!(
                "{{\"query_id\": \"t1\", \"skill_id\": \"{}\", \"relevance\": 1}}\n{{\"query_id\": \"t2\", \"skill_id\": \"no-such-skill\", \"relevance\": 1}}\n",
                skill(0)
            ),
            vec!["qrels/train.jsonl:2", "skill_id", "no-such-skill"],
        ),
    ];
    for (i, (qrels, needles)) in cases.iter().enumerate() {
        let case = dir.path().join(format!("case{i}"));
        std::fs::create_dir_all(&case).unwrap();
        let data = labelled(&case, queries, qrels);
        let cfg = write(&case, "t.toml", &labelled_config(&data, "train"));
        let o = pipeline(&["train", "--config", path(&cfg), "--out", path(&out)]);
        assert!(!o.status.success(), "case {i} succeeded");
        let err = text(&o.stderr);
        for n in needles {
            assert!(err.contains(n), "{n:?} not in {err}");
        }
        assert!(
            !out.exists() && !dir.path().join("model.training").exists(),
            "case {i} wrote output"
        );
    }
    // Training on the split it is evaluated on.
    let data = labelled(dir.path(), queries, "");
    let cfg = write(dir.path(), "e.toml", &labelled_config(&data, "test"));
    let o = pipeline(&["train", "--config", path(&cfg), "--out", path(&out)]);
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("e.toml") && err.contains("evaluated on"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn the_labelled_skillret_config_fails_fast_offline_with_the_hint() {
    let Some(_) = installed("all-MiniLM-L6-v2") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("model");
    let o = Command::new(env!("CARGO_BIN_EXE_pipeline"))
        .current_dir(root())
        .env("HF_HUB_OFFLINE", "1")
        .env("HF_HOME", dir.path().join("hf"))
        .args([
            "train",
            "--config",
            "configs/train/reranker-minilm-skillret.toml",
            "--out",
            path(&out),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = text(&o.stderr);
    assert!(
        err.contains("train.jsonl") && err.contains("--data"),
        "{err}"
    );
    assert!(!out.exists());
}
