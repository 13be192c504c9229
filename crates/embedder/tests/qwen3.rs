//! Qwen3 embedders equal sentence-transformers on real SkillRet text: token
//! ids (the EOS the tokenizer's template appends, the model's query prompt),
//! last-token pooled vectors of ragged batches, and a long document at 2k,
//! 8k and 16k tokens. Also: a directory saved by sentence-transformers 6.2
//! reads as the older layout does, and bad model directories are refused
//! naming the file and field.
//!
//! The reference comes from scripts/make_qwen3_fixture.py; the TEST model
//! from scripts/make_qwen3_models.py; the texts from ../shared/skillret-sample.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::path::{Path, PathBuf};

use common::{check_digest, cosine};
use embedder::{
    Backend, EmbedderOptions, Error, Kind, LocalEmbedder, ModelConfig, Pooling, Precision,
};
use serde_json::Value;

fn qwen3() -> Option<PathBuf> {
    common::model(
        "test-qwen3-embedding",
        "scripts/fetch-models.sh && python3 scripts/make_qwen3_models.py",
    )
}

/// The model, the sample's texts and the fixture, or `None` with a note.
fn setup() -> Option<(PathBuf, common::Texts, common::Texts, Value)> {
    let sample = common::sample()?;
    let dir = qwen3()?;
    let (skills, queries) = common::sample_texts(&sample);
    Some((
        dir,
        skills,
        queries,
        common::fixture("qwen3_reference.json"),
    ))
}

#[test]
fn the_architecture_and_sentence_transformers_files_are_read() {
    let Some(dir) = qwen3() else { return };
    let config = ModelConfig::read(&dir.join("config.json")).unwrap();
    let ModelConfig::Qwen3(c) = &config else {
        panic!("not detected as Qwen3: {config:?}")
    };
    // transformers 5's `rope_parameters.rope_theta`.
    assert_eq!(c.rope_theta, 1_000_000.0);
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (4, 2, 32)
    );
    let model = LocalEmbedder::from_dir(&dir, EmbedderOptions::default()).unwrap();
    assert_eq!(model.pooling(), Pooling::LastToken);
    assert!(model.normalize());
    // sentence-transformers 6.x: the limit is the tokenizer's model_max_length.
    assert_eq!(model.max_length(), 32768);
    assert!(
        model
            .prompt(Kind::Query)
            .starts_with("Instruct: Given a web search query")
    );
    assert_eq!(model.prompt(Kind::Document), "");
    // The tokenizer's template appends <|endoftext|> (151643); nothing is added by hand.
    assert_eq!(
        model.tokenize(&["test"], Kind::Document).unwrap()[0],
        [1944, 151643]
    );
}

#[test]
fn token_ids_equal_sentence_transformers() {
    let Some((dir, skills, queries, fixture)) = setup() else {
        return;
    };
    let max = fixture["tokens_max_length"].as_u64().unwrap() as usize;
    let model =
        LocalEmbedder::from_dir(&dir, EmbedderOptions::default().with_max_length(max)).unwrap();
    assert_eq!(
        model.prompt(Kind::Query),
        fixture["query_prompt"].as_str().unwrap()
    );
    let docs: Vec<&str> = skills.iter().take(200).map(|(_, t)| t.as_str()).collect();
    let qs: Vec<&str> = queries.iter().map(|(_, t)| t.as_str()).collect();
    for (kind, texts, key) in [
        (Kind::Document, &docs, "documents"),
        (Kind::Query, &qs, "queries"),
    ] {
        let want = fixture["tokens"][key].as_array().unwrap();
        assert_eq!(want.len(), texts.len());
        let ids = model.tokenize(texts, kind).unwrap();
        for (i, (ids, want)) in ids.iter().zip(want).enumerate() {
            check_digest(ids, want, &format!("{key} {i}"));
        }
    }
}

fn check_embeddings(backend: Backend, precision: Precision, bound: f64) {
    let Some((dir, skills, queries, fixture)) = setup() else {
        return;
    };
    let reference = &fixture["embeddings"];
    let max = reference["max_length"].as_u64().unwrap() as usize;
    let model = LocalEmbedder::from_dir(
        &dir,
        EmbedderOptions::default()
            .with_max_length(max)
            .with_backend(backend)
            .with_precision(precision)
            // Ragged batches of a few inputs each.
            .with_batch_tokens(3000),
    )
    .unwrap();
    for (kind, texts, ids_key, key) in [
        (Kind::Document, &skills, "document_ids", "documents"),
        (Kind::Query, &queries, "query_ids", "queries"),
    ] {
        let want = common::vectors(&reference[key], "f32le_base64");
        let ids = reference[ids_key].as_array().unwrap();
        for (id, (mine, _)) in ids.iter().zip(texts.iter()) {
            assert_eq!(id.as_str().unwrap(), mine, "texts in the fixture's order");
        }
        let texts: Vec<&str> = texts
            .iter()
            .take(want.len())
            .map(|(_, t)| t.as_str())
            .collect();
        let got = model.embed(&texts, kind).unwrap();
        let mut worst = 1.0f64;
        for (i, want) in want.iter().enumerate() {
            let c = cosine(got.row(i), want);
            worst = worst.min(c);
            assert!(c >= bound, "{kind:?} {i}: cosine {c} < {bound}");
        }
        eprintln!(
            "qwen3 {backend:?} {precision:?} ({}) {kind:?}: {} texts, worst cosine {worst:.9}",
            model.device(),
            texts.len()
        );
    }
}

#[test]
fn native_f32_equals_sentence_transformers() {
    check_embeddings(Backend::Native, Precision::F32, 0.99999);
}

#[test]
fn candle_f32_equals_sentence_transformers() {
    check_embeddings(Backend::Candle, Precision::F32, 0.99999);
}

#[test]
fn native_bf16_stays_within_0_999() {
    check_embeddings(Backend::Native, Precision::Bf16, 0.999);
}

#[test]
fn native_int8_stays_within_0_999() {
    // The decoder path gets int8 too (its attention output and gate/up
    // products; query/key/value and down stay bf16).
    check_embeddings(Backend::Native, Precision::Int8, 0.999);
}

/// The long document of the fixture: sample skill texts in file order joined
/// by blank lines until 90,000+ characters.
fn long_document(skills: &[(String, String)]) -> String {
    let mut parts = Vec::new();
    let mut size = 0;
    for (_, text) in skills {
        parts.push(text.as_str());
        size += text.chars().count();
        if size > 90_000 {
            break;
        }
    }
    parts.join("\n\n")
}

#[test]
fn a_long_document_equals_sentence_transformers_at_2k_8k_and_16k_tokens() {
    let Some((dir, skills, _, fixture)) = setup() else {
        return;
    };
    let text = long_document(&skills);
    for entry in fixture["long_document"]["lengths"].as_array().unwrap() {
        let length = entry["max_length"].as_u64().unwrap() as usize;
        let want = &common::vectors(&entry["vector"], "f32le_base64")[0];
        let mut backends = vec![Backend::Native];
        if length <= 2000 {
            backends.push(Backend::Candle);
        }
        for backend in backends {
            let model = LocalEmbedder::from_dir(
                &dir,
                EmbedderOptions::default()
                    .with_max_length(length)
                    .with_backend(backend),
            )
            .unwrap();
            let ids = model.tokenize(&[text.as_str()], Kind::Document).unwrap();
            check_digest(&ids[0], &entry["ids"], &format!("{length} tokens"));
            let got = model.embed_tokens(&ids, Kind::Document, &|_| {}).unwrap();
            let c = cosine(got.row(0), want);
            eprintln!("{length} tokens, {backend:?}: cosine {c:.9}");
            assert!(c >= 0.99999, "{length} tokens, {backend:?}: cosine {c}");
        }
    }
}

#[test]
fn prompts_follow_the_model_and_can_be_overridden() {
    let Some(dir) = qwen3() else { return };
    let load = |options: EmbedderOptions| LocalEmbedder::from_dir(&dir, options);
    let own = load(EmbedderOptions::default()).unwrap();
    let named = load(EmbedderOptions::default().with_query_prompt_name("query")).unwrap();
    assert_eq!(own.prompt(Kind::Query), named.prompt(Kind::Query));
    let skillret = "Instruct: Given a skill search query, retrieve relevant skills that match the query\nQuery: ";
    let literal = load(EmbedderOptions::default().with_query_prompt(skillret)).unwrap();
    assert_eq!(literal.prompt(Kind::Query), skillret);
    assert_eq!(literal.prompt(Kind::Document), "");
    let q = ["parse a pdf"];
    let a = own.embed(&q, Kind::Query).unwrap();
    let b = literal.embed(&q, Kind::Query).unwrap();
    let c = own.embed(&q, Kind::Document).unwrap();
    assert_ne!(a.row(0), b.row(0));
    assert_ne!(a.row(0), c.row(0));
    // An explicit empty prompt is no prompt.
    let none = load(EmbedderOptions::default().with_query_prompt("")).unwrap();
    assert_eq!(none.embed(&q, Kind::Query).unwrap().row(0), c.row(0));

    let err = load(EmbedderOptions::default().with_query_prompt_name("passage")).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("config_sentence_transformers.json"), "{text}");
    assert!(
        text.contains("prompts") && text.contains("\"passage\""),
        "{text}"
    );
    assert!(
        text.contains("\"query\""),
        "names the prompts it has: {text}"
    );
    let err = load(
        EmbedderOptions::default()
            .with_query_prompt("x")
            .with_query_prompt_name("query"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("give one"), "{err}");
}

/// A copy of a model directory's small files, its weights linked.
fn copy_model(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for entry in walk(dir) {
        let rel = entry.strip_prefix(dir).unwrap();
        let target = copy.path().join(rel);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        if rel.extension().is_some_and(|e| e == "safetensors") {
            std::os::unix::fs::symlink(&entry, &target).unwrap();
        } else {
            std::fs::copy(&entry, &target).unwrap();
        }
    }
    copy
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut Value)) {
    let mut value: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut value);
    std::fs::write(path, value.to_string()).unwrap();
}

#[test]
fn bad_model_directories_name_the_file_and_field() {
    let Some(dir) = qwen3() else { return };
    let load = |d: &Path| LocalEmbedder::from_dir(d, EmbedderOptions::default()).unwrap_err();

    // An architecture this crate does not run.
    let copy = copy_model(&dir);
    edit_json(&copy.path().join("config.json"), |v| {
        v["model_type"] = "mistral3".into();
    });
    let err = load(copy.path()).to_string();
    assert!(
        err.contains("config.json") && err.contains("model_type"),
        "{err}"
    );
    assert!(
        err.contains("mistral3") && err.contains("qwen3") && err.contains("gemma3_text"),
        "{err}"
    );

    // A rotary scaling this crate does not implement.
    let copy = copy_model(&dir);
    edit_json(&copy.path().join("config.json"), |v| {
        v["rope_parameters"]["rope_type"] = "yarn".into();
    });
    let err = load(copy.path()).to_string();
    assert!(
        err.contains("rope_parameters.rope_type") && err.contains("yarn"),
        "{err}"
    );

    // A tokenizer whose vocabulary the embedding matrix cannot hold.
    let copy = copy_model(&dir);
    edit_json(&copy.path().join("config.json"), |v| {
        v["vocab_size"] = 151_000.into();
    });
    let err = load(copy.path());
    assert!(matches!(err, Error::TokenizerMismatch { .. }), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("vocab_size"),
        "{err}"
    );

    // A directory whose Transformer takes chat messages (6.x) but whose
    // tokenizer has no chat template (tests/chat.rs has the ones that do),
    // or whose message format is unknown: refused, naming why.
    let copy = copy_model(&dir);
    edit_json(&copy.path().join("sentence_bert_config.json"), |v| {
        v["modality_config"]["message"] = serde_json::json!({"method": "forward"});
    });
    let err = load(copy.path()).to_string();
    assert!(
        err.contains("sentence_bert_config.json") && err.contains("has no chat template"),
        "{err}"
    );
    edit_json(&copy.path().join("sentence_bert_config.json"), |v| {
        v["modality_config"]["message"]["format"] = "nested".into();
    });
    let err = load(copy.path()).to_string();
    assert!(
        err.contains("sentence_bert_config.json")
            && err.contains("modality_config.message.format: \"nested\""),
        "{err}"
    );

    // A pooling mode the engine does not compute (6.x form).
    let copy = copy_model(&dir);
    edit_json(&copy.path().join("1_Pooling/config.json"), |v| {
        v["pooling_mode"] = "weightedmean".into();
    });
    let err = load(copy.path()).to_string();
    assert!(
        err.contains("1_Pooling/config.json") && err.contains("weightedmean"),
        "{err}"
    );

    // A default prompt name that names no prompt.
    let copy = copy_model(&dir);
    edit_json(
        &copy.path().join("config_sentence_transformers.json"),
        |v| {
            v["default_prompt_name"] = "retrieval".into();
        },
    );
    let err = load(copy.path()).to_string();
    assert!(
        err.contains("default_prompt_name") && err.contains("retrieval"),
        "{err}"
    );
}

#[test]
fn a_directory_saved_by_sentence_transformers_6_2_reads_as_the_older_layout() {
    let Some(minilm) = common::model("all-MiniLM-L6-v2", "scripts/fetch-models.sh") else {
        return;
    };
    let saved = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/st6-minilm");
    let dir = tempfile::tempdir().unwrap();
    for file in walk(&saved) {
        let rel = file.strip_prefix(&saved).unwrap();
        std::fs::create_dir_all(dir.path().join(rel).parent().unwrap()).unwrap();
        std::fs::copy(&file, dir.path().join(rel)).unwrap();
    }
    for name in ["model.safetensors", "tokenizer.json", "vocab.txt"] {
        std::fs::copy(minilm.join(name), dir.path().join(name)).unwrap();
    }
    let st = embedder::SentenceTransformersConfig::read(dir.path()).unwrap();
    assert_eq!(st.pooling, Some(Pooling::Mean));
    assert_eq!(st.normalize, Some(true));
    assert_eq!(st.max_seq_length, None, "6.x writes no max_seq_length");
    let new = LocalEmbedder::from_dir(dir.path(), EmbedderOptions::default()).unwrap();
    let old = LocalEmbedder::from_dir(&minilm, EmbedderOptions::default()).unwrap();
    assert_eq!(
        new.max_length(),
        256,
        "tokenizer_config.json's model_max_length"
    );
    assert_eq!(
        (new.pooling(), new.normalize()),
        (old.pooling(), old.normalize())
    );
    let texts = ["parse a pdf and extract its tables", "rebase a git branch"];
    assert_eq!(
        new.embed(&texts, Kind::Document).unwrap(),
        old.embed(&texts, Kind::Document).unwrap()
    );
}
