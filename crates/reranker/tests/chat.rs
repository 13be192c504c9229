//! Cross-encoders saved by sentence-transformers 6.3 with a chat template
//! score as its `CrossEncoder` does: each (query, document) pair rendered as
//! a `query` and a `document` message (the default prompt a system message
//! before them), cut to the maximum length with the template's ending
//! restored; the same token ids, logits within 1e-4, on the native engine and
//! on candle. A BERT sequence classifier and a Qwen3 causal LM with
//! `LogitScore` (logit("yes") − logit("no")).
//!
//! Reference: tests/data/chat_reference.json, from
//! scripts/make_chat_fixture.py (sentence-transformers 6.3.0; its header
//! names the versions). Models: scripts/make_cross_encoders.py,
//! scripts/make_qwen3_models.py, then scripts/make_chat_models.py (TEST
//! models, random weights).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::path::{Path, PathBuf};

use embedder::Backend;
use reranker::{Activation, CrossEncoder, Reranker, RerankerKind, RerankerOptions};
use serde_json::Value;

const BUILD: &str = "scripts/fetch-models.sh && python3 scripts/make_cross_encoders.py && python3 scripts/make_qwen3_models.py && python3 scripts/make_chat_models.py";

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/chat_reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn load(name: &str, backend: Backend, max_length: usize) -> Option<(PathBuf, CrossEncoder)> {
    let dir = common::model(name, BUILD)?;
    let options = RerankerOptions::default()
        .with_backend(backend)
        .with_max_length(max_length)
        .with_activation(Activation::Sigmoid);
    let model = CrossEncoder::from_dir(&dir, options).unwrap();
    Some((dir, model))
}

/// Token ids equal and logits (and sigmoid scores) close to the fixture's.
fn check(name: &str, backend: Backend, kind: RerankerKind) {
    let fixture = fixture();
    let reference = &fixture["models"][name];
    let max_length = reference["max_length"].as_u64().unwrap() as usize;
    let Some((dir, model)) = load(name, backend, max_length) else {
        return;
    };
    assert_eq!(model.kind(), kind);
    let description = model.describe();
    assert!(
        description.contains("pairs rendered through the chat template of")
            && description.contains("chat_template.jinja (flat messages)")
            && description.contains(reference["prompt"].as_str().unwrap()),
        "{description}"
    );
    let cases = reference["cases"].as_array().unwrap();
    let pairs: Vec<(&str, &str)> = cases
        .iter()
        .map(|c| {
            (
                c["query"].as_str().unwrap(),
                c["document"].as_str().unwrap(),
            )
        })
        .collect();
    let tokens = model.tokenize(&pairs).unwrap();
    for (case, t) in cases.iter().zip(&tokens) {
        let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        assert_eq!(t.ids, want, "{}: ids of {:?}", dir.display(), case["query"]);
    }
    // Cut pairs end with the template's ending again.
    assert!(tokens.iter().any(|t| t.ids.len() == max_length));
    let logits = model.logits(&pairs, &|_| {}).unwrap();
    let scores = model.score(&pairs, &|_| {}).unwrap();
    let per_pair = logits.len() / pairs.len();
    for (k, case) in cases.iter().enumerate() {
        let row = &logits[k * per_pair..(k + 1) * per_pair];
        // A classifier's one logit; a yes/no model's ("no", "yes") pair.
        let logit = if per_pair == 1 {
            row[0]
        } else {
            row[1] - row[0]
        };
        let want = case["logit"].as_f64().unwrap();
        assert!(
            (f64::from(logit) - want).abs() < 1e-4,
            "{name} {backend:?} pair {k}: logit {logit} vs {want}"
        );
        let want = case["score"].as_f64().unwrap();
        assert!(
            (f64::from(scores[k]) - want).abs() < 1e-5,
            "{name} {backend:?} pair {k}: score {} vs {want}",
            scores[k]
        );
    }
}

#[test]
fn bert_cross_encoder_with_a_pair_template_matches_sentence_transformers_native() {
    check(
        "test-bert-cross-encoder-chat",
        Backend::Native,
        RerankerKind::Classifier,
    );
}

#[test]
fn bert_cross_encoder_with_a_pair_template_matches_sentence_transformers_candle() {
    check(
        "test-bert-cross-encoder-chat",
        Backend::Candle,
        RerankerKind::Classifier,
    );
}

#[test]
fn qwen3_logit_score_reranker_with_a_pair_template_matches_sentence_transformers_native() {
    check(
        "test-qwen3-reranker-chat",
        Backend::Native,
        RerankerKind::YesNo,
    );
}

#[test]
fn qwen3_logit_score_reranker_with_a_pair_template_matches_sentence_transformers_candle() {
    check(
        "test-qwen3-reranker-chat",
        Backend::Candle,
        RerankerKind::YesNo,
    );
}

/// The Qwen3-Reranker template with the SkillRet instruction as its prompt
/// writes what the built-in official protocol writes, for pairs short enough
/// not to be cut (the two cut differently: the template's whole rendering on
/// the right, the protocol its content).
#[test]
fn the_qwen3_pair_template_writes_the_official_protocol() {
    let Some((_, chat)) = load("test-qwen3-reranker-chat", Backend::Native, 512) else {
        return;
    };
    let Some(plain) = common::model("test-qwen3-reranker", BUILD) else {
        return;
    };
    let plain =
        CrossEncoder::from_dir(&plain, RerankerOptions::default().with_max_length(512)).unwrap();
    let pairs = [
        ("merge two PDF reports", "pdf-merge: merges PDF files"),
        (
            "write a haiku",
            "poetry: writes short poems\n\n# Usage\nAsk.",
        ),
    ];
    let a = chat.tokenize(&pairs).unwrap();
    let b = plain.tokenize(&pairs).unwrap();
    for (a, b) in a.iter().zip(&b) {
        assert_eq!(a.ids, b.ids);
    }
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &dst.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
        }
    }
}

/// A copy of a chat model's directory with another template.
fn with_template(name: &str, template: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    let src = common::model(name, BUILD)?;
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join(name);
    copy_dir(&src, &dst);
    std::fs::write(dst.join("chat_template.jinja"), template).unwrap();
    Some((tmp, dst))
}

#[test]
fn a_template_that_drops_a_role_or_raises_is_refused_naming_the_file() {
    // A chat template that writes user turns only (as a generic one does):
    // neither side of the pair reaches the rendering.
    let generic =
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}";
    let Some((_tmp, dir)) = with_template("test-bert-cross-encoder-chat", generic) else {
        return;
    };
    let e = CrossEncoder::from_dir(&dir, RerankerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&dir.join("chat_template.jinja").display().to_string())
            && e.contains("cannot carry a 'query'/'document' pair")
            && e.contains("the 'query' and 'document' content does not reach the rendered prompt"),
        "{e}"
    );
    // One role only.
    let query_only = "{{ cls_token }}{{ (messages | selectattr('role', 'eq', 'query') | first).content }}{{ sep_token }}";
    let Some((_tmp2, dir)) = with_template("test-bert-cross-encoder-chat", query_only) else {
        return;
    };
    let e = CrossEncoder::from_dir(&dir, RerankerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the 'document' content does not reach") && !e.contains("'query' and"),
        "{e}"
    );
    let raising = "{{ raise_exception('Conversation roles must alternate user/assistant') }}";
    let Some((_tmp3, dir)) = with_template("test-qwen3-reranker-chat", raising) else {
        return;
    };
    let e = CrossEncoder::from_dir(&dir, RerankerOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("it raised") && e.contains("Conversation roles must alternate"),
        "{e}"
    );
}
