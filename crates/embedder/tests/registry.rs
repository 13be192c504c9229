//! The registry architectures beyond BERT and causal Qwen3 equal
//! sentence-transformers / transformers / peft on real SkillRet text: Gemma3
//! causal with last-token pooling and bidirectional with mean pooling (a
//! sliding window far shorter than the inputs, both layer kinds, linearly
//! scaled RoPE on the full layers), Qwen3 run bidirectionally with pplx-embed's
//! int8 tanh output, Qwen3 with jina-embeddings-v5's per-task LoRA
//! adapters, Mistral in its sliding window, and NV-Embed (a bidirectional
//! Mistral, latent-attention pooling, its instruction mask and appended EOS)
//! both as the official evaluation runs it and as it was trained. Token ids,
//! then vectors on every engine and precision.
//!
//! The reference comes from scripts/make_registry_fixture.py; the TEST models
//! from scripts/make_registry_models.py; the texts from ../shared/skillret-sample.
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use crate::common;

use std::path::PathBuf;

use common::{check_digest, cosine};
use embedder::{
    Attention, Backend, EmbedderOptions, Error, Kind, LocalEmbedder, ModelConfig, Pooling,
    Precision,
};
use serde_json::Value;

const SCRIPT: &str = "scripts/fetch-models.sh && python3 scripts/make_registry_models.py";

/// One fixture entry: its key, the model directory, and what the options
/// select.
struct Entry {
    key: &'static str,
    dir: &'static str,
    task: Option<&'static str>,
    attention: Option<Attention>,
    /// The query prompt is the caller's (the fixture's), not the model's:
    /// NV-Embed ships none, the official evaluation passes its instruction
    /// (as configs/nv-embed-v1.toml does).
    caller_prompt: bool,
}

const fn entry(key: &'static str, dir: &'static str) -> Entry {
    Entry {
        key,
        dir,
        task: None,
        attention: None,
        caller_prompt: false,
    }
}

const MODELS: [Entry; 8] = [
    entry("test-gemma3-embedding", "test-gemma3-embedding"),
    entry("test-gemma3-bidirectional", "test-gemma3-bidirectional"),
    entry("test-pplx-embedding", "test-pplx-embedding"),
    Entry {
        task: Some("retrieval"),
        ..entry("test-jina-v5/retrieval", "test-jina-v5")
    },
    Entry {
        task: Some("text-matching"),
        ..entry("test-jina-v5/text-matching", "test-jina-v5")
    },
    entry("test-mistral-embedding", "test-mistral-embedding"),
    // The default: as the official evaluation runs it.
    Entry {
        caller_prompt: true,
        ..entry("test-nv-embed/official", "test-nv-embed")
    },
    Entry {
        attention: Some(Attention::Bidirectional),
        caller_prompt: true,
        ..entry("test-nv-embed/bidirectional", "test-nv-embed")
    },
];

struct Setup {
    skills: Vec<String>,
    queries: Vec<String>,
    fixture: Value,
}

fn setup() -> Option<Setup> {
    let sample = common::sample()?;
    let (skills, queries) = common::sample_texts(&sample);
    let fixture = common::fixture("registry_reference.json");
    let ids = |key: &str| -> Vec<String> {
        fixture[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect()
    };
    let (doc_ids, query_ids) = (ids("document_ids"), ids("query_ids"));
    for (want, (got, _)) in doc_ids.iter().zip(&skills) {
        assert_eq!(want, got, "skills in the fixture's order");
    }
    for (want, (got, _)) in query_ids.iter().zip(&queries) {
        assert_eq!(want, got, "queries in the fixture's order");
    }
    Some(Setup {
        skills: skills
            .into_iter()
            .take(doc_ids.len())
            .map(|(_, t)| t)
            .collect(),
        queries: queries.into_iter().map(|(_, t)| t).collect(),
        fixture,
    })
}

fn model_dir(name: &str) -> Option<PathBuf> {
    common::model(name, SCRIPT)
}

fn options(setup: &Setup, entry: &Entry) -> EmbedderOptions {
    let max = setup.fixture["max_length"].as_u64().unwrap() as usize;
    let mut options = EmbedderOptions::default()
        .with_max_length(max)
        // Ragged batches of a few inputs each.
        .with_batch_tokens(3000);
    if let Some(task) = entry.task {
        options = options.with_task(task);
    }
    if let Some(attention) = entry.attention {
        options = options.with_attention(attention);
    }
    if entry.caller_prompt {
        let prompt = setup.fixture["models"][entry.key]["query_prompt"]
            .as_str()
            .unwrap();
        options = options.with_query_prompt(prompt);
    }
    options
}

#[test]
fn the_architectures_are_read_as_transformers_reads_them() {
    let Some(setup) = setup() else { return };
    let Some(dir) = model_dir("test-gemma3-bidirectional") else {
        return;
    };
    for (name, key) in [
        ("test-gemma3-embedding", "test-gemma3-embedding"),
        ("test-gemma3-bidirectional", "test-gemma3-bidirectional"),
    ] {
        let config = ModelConfig::read(&dir.with_file_name(name).join("config.json")).unwrap();
        let ModelConfig::Gemma3(c) = &config else {
            panic!("{name}: not detected as Gemma3: {config:?}")
        };
        let want = &setup.fixture["models"][key];
        // The window transformers applies (the bidirectional rewrite 40 → 21).
        assert_eq!(
            c.sliding_window as u64,
            want["applied_sliding_window"].as_u64().unwrap(),
            "{name}"
        );
        assert_eq!(c.bidirectional, want["bidirectional"].as_bool().unwrap());
        let types: Vec<&str> = want["layer_types"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(c.layer_types, types);
        // Inputs far longer than the window.
        assert!(
            setup.fixture["longest_document_tokens"].as_u64().unwrap()
                > 16 * c.sliding_window as u64
        );
    }
    let causal = LocalEmbedder::from_dir(
        &dir.with_file_name("test-gemma3-embedding"),
        EmbedderOptions::default(),
    )
    .unwrap();
    assert_eq!(causal.pooling(), Pooling::LastToken);
    let bidirectional = LocalEmbedder::from_dir(&dir, EmbedderOptions::default()).unwrap();
    assert_eq!(bidirectional.pooling(), Pooling::Mean);
    let Some(pplx) = model_dir("test-pplx-embedding") else {
        return;
    };
    let ModelConfig::Qwen3(c) = ModelConfig::read(&pplx.join("config.json")).unwrap() else {
        panic!("pplx: not Qwen3")
    };
    assert!(c.bidirectional);
    let pplx = LocalEmbedder::from_dir(&pplx, EmbedderOptions::default()).unwrap();
    assert_eq!(pplx.pooling(), Pooling::Mean);
    assert!(!pplx.normalize());
    assert!(pplx.quantize().is_some());
}

#[test]
fn nv_embed_is_read_as_its_code_runs_it() {
    let Some(setup) = setup() else { return };
    let Some(dir) = model_dir("test-nv-embed") else {
        return;
    };
    let ModelConfig::NvEmbed(c) = ModelConfig::read(&dir.join("config.json")).unwrap() else {
        panic!("test-nv-embed: not detected as NV-Embed")
    };
    let official = &setup.fixture["models"]["test-nv-embed/official"];
    assert_eq!(
        c.mistral.sliding_window.map(|w| w as u64),
        official["sliding_window"].as_u64()
    );
    assert!(c.mask_instruction && c.add_eos);
    assert_eq!(c.latent.latents, 16);
    let model = LocalEmbedder::from_dir(&dir, options(&setup, &MODELS[6])).unwrap();
    assert_eq!(model.pooling(), Pooling::Mean);
    assert!(model.normalize());
    // The official run had batches of both kinds among the documents, and
    // the two ways differ exactly where a batch ran causally.
    let batches = &official["batches"]["documents"];
    assert!(
        batches["bidirectional"].as_u64().unwrap() > 0 && batches["causal"].as_u64().unwrap() > 0
    );
    let both = &setup.fixture["models"]["test-nv-embed/bidirectional"];
    let a = common::vectors(&official["documents"], "f32le_base64");
    let b = common::vectors(&both["documents"], "f32le_base64");
    let differ = a
        .iter()
        .zip(&b)
        .filter(|(a, b)| cosine(a, b) < 0.9999)
        .count();
    assert!(
        differ > 0 && differ < a.len(),
        "{differ} of {} differ",
        a.len()
    );
    // Any other model refuses an attention choice.
    let Some(gemma) = model_dir("test-gemma3-embedding") else {
        return;
    };
    let err = LocalEmbedder::from_dir(
        &gemma,
        EmbedderOptions::default().with_attention(Attention::Bidirectional),
    )
    .unwrap_err();
    assert!(err.to_string().contains("only NV-Embed"), "{err}");
}

#[test]
fn token_ids_equal_sentence_transformers() {
    let Some(setup) = setup() else { return };
    for e in &MODELS {
        let (key, name) = (e.key, e.dir);
        let Some(dir) = model_dir(name) else { return };
        let model = LocalEmbedder::from_dir(&dir, options(&setup, e)).unwrap();
        let want = &setup.fixture["models"][key];
        assert_eq!(
            model.prompt(Kind::Query),
            want["query_prompt"].as_str().unwrap(),
            "{key}"
        );
        for (kind, texts, part) in [
            (Kind::Document, &setup.skills, "documents"),
            (Kind::Query, &setup.queries, "queries"),
        ] {
            let ids = model.tokenize(texts, kind).unwrap();
            for (i, (ids, want)) in ids
                .iter()
                .zip(want["tokens"][part].as_array().unwrap())
                .enumerate()
            {
                check_digest(ids, want, &format!("{key} {part} {i}"));
            }
        }
    }
}

/// Every model's vectors for the first `limit` documents and queries of the fixture against it.
fn check(backend: Backend, precision: Precision, bound: f64, limit: usize) {
    let Some(setup) = setup() else { return };
    for e in &MODELS {
        let (key, name) = (e.key, e.dir);
        let Some(dir) = model_dir(name) else { return };
        let model = LocalEmbedder::from_dir(
            &dir,
            options(&setup, e)
                .with_backend(backend)
                .with_precision(precision),
        )
        .unwrap();
        let reference = &setup.fixture["models"][key];
        for (kind, texts, part) in [
            (Kind::Document, &setup.skills, "documents"),
            (Kind::Query, &setup.queries, "queries"),
        ] {
            let want = common::vectors(&reference[part], "f32le_base64");
            assert_eq!(want.len(), texts.len());
            let texts = &texts[..limit.min(texts.len())];
            let got = model.embed(texts, kind).unwrap();
            let mut worst = 1.0f64;
            for (i, want) in want.iter().enumerate().take(texts.len()) {
                let c = cosine(got.row(i), want);
                worst = worst.min(c);
                assert!(c >= bound, "{key} {kind:?} {i}: cosine {c} < {bound}");
            }
            eprintln!(
                "{key} {backend:?} {precision:?} ({}) {kind:?}: {} texts, worst cosine {worst:.9}",
                model.device(),
                texts.len()
            );
        }
    }
}

#[test]
fn native_f32_equals_the_reference() {
    check(Backend::Native, Precision::F32, 0.99999, usize::MAX);
}

#[test]
fn candle_equals_the_reference() {
    // candle's exact attention on the CPU is slow: the first 12 of each (tests/varlen.rs holds
    // it to the native engine on every family, on inputs of 640 tokens).
    check(Backend::Candle, Precision::F32, 0.99999, 12);
}

#[test]
fn native_bf16_is_within_the_families_bound() {
    // As the BERT and Qwen3 families: bf16 products (f32 where the CPU has no
    // AVX-512 BF16) within cosine 0.999.
    check(Backend::Native, Precision::Bf16, 0.999, usize::MAX);
}

#[test]
fn native_int8_is_within_the_families_bound() {
    check(Backend::Native, Precision::Int8, 0.999, usize::MAX);
}

#[test]
fn a_task_the_model_has_no_adapter_for_lists_the_ones_it_has() {
    let Some(dir) = model_dir("test-jina-v5") else {
        return;
    };
    let err = LocalEmbedder::from_dir(&dir, EmbedderOptions::default().with_task("summarise"))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("\"summarise\"") && text.contains("retrieval, text-matching"),
        "{text}"
    );
    // Without a task, jina's `retrieval` (the official registry's choice).
    let model = LocalEmbedder::from_dir(&dir, EmbedderOptions::default()).unwrap();
    assert!(
        model.device().contains("LoRA task \"retrieval\""),
        "{}",
        model.device()
    );
    // A model without adapters refuses a task.
    let Some(gemma) = model_dir("test-gemma3-embedding") else {
        return;
    };
    let err = LocalEmbedder::from_dir(&gemma, EmbedderOptions::default().with_task("retrieval"))
        .unwrap_err();
    assert!(err.to_string().contains("no such adapter"), "{err}");
}

#[test]
fn an_unsupported_model_type_names_the_supported_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.json");
    std::fs::write(&path, r#"{"model_type": "mamba", "hidden_size": 8}"#).unwrap();
    let err = ModelConfig::read(&path).unwrap_err();
    let text = err.to_string();
    for t in embedder::SUPPORTED_TYPES {
        assert!(text.contains(t), "{text} lacks {t}");
    }
    assert!(
        text.contains("config.json") && text.contains("\"mamba\""),
        "{text}"
    );
}

#[test]
fn a_checkpoint_missing_a_tensor_names_it() {
    let Some(dir) = model_dir("test-gemma3-embedding") else {
        return;
    };
    // A copy of the checkpoint without one layer's pre-feed-forward norm.
    let tmp = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() && entry.file_name() != "model.safetensors" {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name())).unwrap();
        }
    }
    for sub in ["1_Pooling", "2_Normalize"] {
        std::fs::create_dir(tmp.path().join(sub)).unwrap();
        std::fs::copy(
            dir.join(sub).join("config.json"),
            tmp.path().join(sub).join("config.json"),
        )
        .unwrap();
    }
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let tensors = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let missing = "layers.1.pre_feedforward_layernorm.weight";
    let kept: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .tensors()
        .into_iter()
        .filter(|(n, _)| n != missing)
        .collect();
    safetensors::serialize_to_file(kept, None, &tmp.path().join("model.safetensors")).unwrap();
    let err = LocalEmbedder::from_dir(tmp.path(), EmbedderOptions::default()).unwrap_err();
    assert!(
        matches!(&err, Error::MissingTensor { name, .. } if name == missing),
        "{err:?}"
    );
    assert!(err.to_string().contains(missing), "{err}");
}
