//! Models saved by sentence-transformers 6.3 with a chat template (the
//! `message` modality): texts rendered through the template as it renders
//! them, with the prompt as a system message, tokenised without the
//! tokenizer's own specials, cut to the maximum length with the template's
//! ending written back. Token ids equal sentence-transformers' and vectors
//! within cosine 0.99999, on the native engine and on candle, for a Qwen3
//! model (flat messages), a Gemma3 one (structured messages), and a plain
//! Qwen3 checkpoint with a chat template beside its tokenizer (no
//! sentence-transformers files: 6.3 infers the message modality).
//!
//! The reference: scripts/make_chat_fixture.py (sentence-transformers 6.3.0);
//! the TEST models: scripts/make_chat_models.py.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use common::cosine;
use embedder::config::MessageFormat;
use embedder::{Backend, EmbedderOptions, Kind, LocalEmbedder};

fn check(name: &str, backend: Backend) {
    let Some(dir) = common::model(
        name,
        "scripts/fetch-models.sh, scripts/make_qwen3_models.py, scripts/make_registry_models.py and scripts/make_chat_models.py",
    ) else {
        return;
    };
    let reference = common::fixture("chat_reference.json");
    let reference = &reference["models"][name];
    let mut options = EmbedderOptions::default()
        .with_max_length(reference["max_length"].as_u64().unwrap() as usize)
        .with_backend(backend);
    if reference["pooling"] == "mean" {
        // A plain decoder checkpoint: sentence-transformers pools by the
        // mean, this project by the last token unless told (README).
        options = options.with_pooling(embedder::Pooling::Mean);
    }
    let model = LocalEmbedder::from_dir(&dir, options).unwrap();
    let (path, format) = model.chat_template().expect("a chat template");
    assert!(path.ends_with("chat_template.jinja"));
    assert_eq!(format.name(), reference["format"].as_str().unwrap());
    assert!(embedder::Embedder::describe(&model).contains("chat template ("));
    let cases = reference["cases"].as_array().unwrap();
    let texts: Vec<&str> = cases.iter().map(|c| c["text"].as_str().unwrap()).collect();
    for (kind, key) in [(Kind::Query, "query"), (Kind::Document, "document")] {
        assert_eq!(
            model.prompt(kind),
            reference[format!("{key}_prompt")].as_str().unwrap_or("")
        );
        let ids = model.tokenize(&texts, kind).unwrap();
        let vectors = model.embed(&texts, kind).unwrap();
        for (i, case) in cases.iter().enumerate() {
            let want: Vec<u32> = case[format!("{key}_ids")]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap() as u32)
                .collect();
            assert_eq!(ids[i], want, "{name} {key} {i}: token ids");
            let want: Vec<f32> = case[format!("{key}_vector")]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
                .collect();
            let c = cosine(vectors.row(i), &want);
            assert!(c >= 0.99999, "{name} {backend:?} {key} {i}: cosine {c}");
        }
    }
}

#[test]
fn qwen3_flat_messages_equal_sentence_transformers_native() {
    check("test-qwen3-chat", Backend::Native);
}

#[test]
fn qwen3_flat_messages_equal_sentence_transformers_candle() {
    check("test-qwen3-chat", Backend::Candle);
}

#[test]
fn gemma3_structured_messages_equal_sentence_transformers_native() {
    check("test-gemma3-chat", Backend::Native);
}

#[test]
fn gemma3_structured_messages_equal_sentence_transformers_candle() {
    check("test-gemma3-chat", Backend::Candle);
}

#[test]
fn a_plain_checkpoint_with_a_template_renders_as_sentence_transformers_infers_native() {
    check("test-qwen3-raw-chat", Backend::Native);
}

#[test]
fn a_plain_checkpoint_with_a_template_renders_as_sentence_transformers_infers_candle() {
    check("test-qwen3-raw-chat", Backend::Candle);
}

#[test]
fn the_format_is_inferred_as_sentence_transformers_infers_it() {
    let qwen3 = "{% for message in messages %}{{ message.content }}{% endfor %}";
    let gemma3 = "{% for item in message['content'] %}{% if item['type'] == 'text' %}{% endif %}{% endfor %}";
    assert_eq!(
        MessageFormat::Auto.resolve("qwen3", qwen3),
        MessageFormat::Flat
    );
    assert_eq!(
        MessageFormat::Auto.resolve("gemma3", gemma3),
        MessageFormat::Structured
    );
    assert_eq!(
        MessageFormat::Auto.resolve("gpt_oss", gemma3),
        MessageFormat::Flat
    );
    assert_eq!(
        MessageFormat::Auto.resolve("qwen3", ""),
        MessageFormat::Structured
    );
    assert_eq!(
        MessageFormat::Flat.resolve("gemma3", gemma3),
        MessageFormat::Flat
    );
}

/// A template that raises, or uses a filter minijinja lacks, fails the
/// first text with the template's file and message.
#[test]
fn a_template_that_cannot_be_rendered_is_named() {
    let Some(dir) = common::model("test-qwen3-chat", "scripts/make_chat_models.py") else {
        return;
    };
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), copy.path().join(entry.file_name())).unwrap();
        } else {
            let sub = copy.path().join(entry.file_name());
            std::fs::create_dir_all(&sub).unwrap();
            for f in std::fs::read_dir(entry.path()).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), sub.join(f.file_name())).unwrap();
            }
        }
    }
    let template = copy.path().join("chat_template.jinja");
    for (source, says) in [
        (
            "{{ raise_exception('only one user turn is supported') }}",
            "the chat template raised: only one user turn is supported",
        ),
        ("{{ messages|no_such_filter }}", "no_such_filter"),
    ] {
        std::fs::write(&template, source).unwrap();
        let e = LocalEmbedder::from_dir(copy.path(), EmbedderOptions::default())
            .and_then(|m| m.tokenize(&["hello"], Kind::Query))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&template.display().to_string()) && e.contains(says),
            "{e}"
        );
    }
    // No template beside a config that asks for messages: named.
    std::fs::remove_file(&template).unwrap();
    let e = LocalEmbedder::from_dir(copy.path(), EmbedderOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no chat template"), "{e}");
}
