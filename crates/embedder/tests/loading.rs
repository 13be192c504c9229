//! Loading errors name the file and what is wrong; the two engines agree on a
//! tiny random model built here (no downloaded model needed).
#![allow(clippy::unwrap_used)] // Test helpers fail loudly.

use std::collections::HashMap;
use std::path::Path;

use embedder::{Backend, EmbedderOptions, Error, Kind, LocalEmbedder, Pooling};
use safetensors::Dtype;
use safetensors::tensor::TensorView;
use serde_json::json;

const HIDDEN: usize = 8;
const FFN: usize = 16;
const POSITIONS: usize = 16;

/// A tiny BERT: word-level tokenizer over `vocab` words, random weights.
fn tiny_model(dir: &Path, vocab: &[&str], wrong_shape: Option<&str>) {
    let config = json!({
        "vocab_size": vocab.len() + 3, "hidden_size": HIDDEN, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": FFN, "hidden_act": "gelu",
        "max_position_embeddings": POSITIONS, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "pad_token_id": 0, "model_type": "bert"
    });
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let mut words: HashMap<String, usize> = HashMap::new();
    for (i, special) in ["[PAD]", "[UNK]", "[CLS]"].iter().enumerate() {
        words.insert((*special).to_owned(), i);
    }
    for (i, w) in vocab.iter().enumerate() {
        words.insert((*w).to_owned(), i + 3);
    }
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]}}},
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": words, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();

    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut random = |n: usize| -> Vec<u8> {
        (0..n)
            .flat_map(|_| {
                state = state
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.8).to_le_bytes()
            })
            .collect()
    };
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        (
            "embeddings.word_embeddings.weight".into(),
            vec![vocab.len() + 3, HIDDEN],
        ),
        (
            "embeddings.position_embeddings.weight".into(),
            vec![POSITIONS, HIDDEN],
        ),
        (
            "embeddings.token_type_embeddings.weight".into(),
            vec![2, HIDDEN],
        ),
        ("embeddings.LayerNorm.weight".into(), vec![HIDDEN]),
        ("embeddings.LayerNorm.bias".into(), vec![HIDDEN]),
    ];
    for l in 0..2 {
        let p = format!("encoder.layer.{l}");
        for (name, out, inp) in [
            ("attention.self.query", HIDDEN, HIDDEN),
            ("attention.self.key", HIDDEN, HIDDEN),
            ("attention.self.value", HIDDEN, HIDDEN),
            ("attention.output.dense", HIDDEN, HIDDEN),
            ("intermediate.dense", FFN, HIDDEN),
            ("output.dense", HIDDEN, FFN),
        ] {
            shapes.push((format!("{p}.{name}.weight"), vec![out, inp]));
            shapes.push((format!("{p}.{name}.bias"), vec![out]));
        }
        for name in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{p}.{name}.weight"), vec![HIDDEN]));
            shapes.push((format!("{p}.{name}.bias"), vec![HIDDEN]));
        }
    }
    if let Some(name) = wrong_shape {
        let entry = shapes.iter_mut().find(|(n, _)| n == name).unwrap();
        entry.1[0] += 1;
    }
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .into_iter()
        .map(|(n, s)| {
            let bytes = random(s.iter().product());
            (n, s, bytes)
        })
        .collect();
    let views: Vec<(String, TensorView<'_>)> = data
        .iter()
        .map(|(n, s, b)| {
            (
                n.clone(),
                TensorView::new(Dtype::F32, s.clone(), b).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.join("model.safetensors")).unwrap();
}

const WORDS: [&str; 6] = ["pdf", "git", "rebase", "table", "backup", "alert"];

fn load(dir: &Path, options: EmbedderOptions) -> Result<LocalEmbedder, Error> {
    LocalEmbedder::from_dir(dir, options)
}

#[test]
fn native_and_candle_agree_and_order_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    let texts = [
        "pdf table",
        "git rebase git rebase backup",
        "alert",
        "pdf table",
        "unknown words here",
    ];
    for pooling in [Pooling::Mean, Pooling::Cls] {
        let options = EmbedderOptions::default()
            .with_pooling(pooling)
            .with_batch_tokens(POSITIONS);
        let native = load(dir.path(), options.clone()).unwrap();
        let candle = load(dir.path(), options.with_backend(Backend::Candle)).unwrap();
        let a = native.embed(&texts, Kind::Document).unwrap();
        let b = candle.embed(&texts, Kind::Document).unwrap();
        assert_eq!(a.len(), texts.len());
        for i in 0..texts.len() {
            let norm: f32 = a.row(i).iter().map(|x| x * x).sum();
            assert!((norm - 1.0).abs() < 1e-5, "not normalised: {norm}");
            for (x, y) in a.row(i).iter().zip(b.row(i)) {
                assert!(
                    (x - y).abs() < 1e-5,
                    "{pooling:?} text {i}: native {x}, candle {y}"
                );
            }
        }
        // Same text, same vector, wherever it sits in the input.
        assert_eq!(a.row(0), a.row(3));
        assert_ne!(a.row(0), a.row(2));
    }
}

#[test]
fn prefixes_and_truncation_apply() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    let model = load(
        dir.path(),
        EmbedderOptions::default()
            .with_prompts("alert ", "backup ")
            .with_max_length(3),
    )
    .unwrap();
    let ids = model.tokenize(&["pdf git table"], Kind::Query).unwrap();
    // [CLS] alert pdf (truncated to 3, prefix first).
    assert_eq!(ids[0], [2, 8, 3]);
    let ids = model.tokenize(&["pdf"], Kind::Document).unwrap();
    assert_eq!(ids[0], [2, 7, 3]);
}

#[test]
fn missing_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    std::fs::remove_file(dir.path().join("model.safetensors")).unwrap();
    let err = load(dir.path(), EmbedderOptions::default()).unwrap_err();
    assert!(matches!(err, Error::MissingFile { .. }), "{err}");
    assert!(err.to_string().contains("model.safetensors"), "{err}");
    let err = load(&dir.path().join("nope"), EmbedderOptions::default()).unwrap_err();
    assert!(err.to_string().contains("not a model directory"), "{err}");
}

#[test]
fn a_weight_of_the_wrong_shape_is_named() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(
        dir.path(),
        &WORDS,
        Some("encoder.layer.1.intermediate.dense.weight"),
    );
    let err = load(dir.path(), EmbedderOptions::default()).unwrap_err();
    match &err {
        Error::Shape {
            name,
            expected,
            actual,
            ..
        } => {
            assert_eq!(name, "encoder.layer.1.intermediate.dense.weight");
            assert_eq!(expected, &[FFN, HIDDEN]);
            assert_eq!(actual, &[FFN + 1, HIDDEN]);
        }
        other => panic!("expected a shape error, got {other}"),
    }
    assert!(err.to_string().contains("model.safetensors"), "{err}");
}

/// A layer count no file holds (issue 54: 10^9 layers aborted the process allocating for them)
/// is refused at config.json, naming the key; so is a width beyond any model.
#[test]
fn sizes_beyond_any_model_are_refused_before_loading() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    let path = dir.path().join("config.json");
    for (key, value) in [
        ("num_hidden_layers", 1_000_000_000u64),
        ("hidden_size", 1 << 40),
    ] {
        let mut config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        config[key] = json!(value);
        std::fs::write(&path, config.to_string()).unwrap();
        let err = load(dir.path(), EmbedderOptions::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("config.json") && err.contains(&format!("{key}: {value} is more than")),
            "{err}"
        );
        tiny_model(dir.path(), &WORDS, None);
    }
}

#[test]
fn a_tokenizer_of_another_model_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    // A tokenizer with more words than the model's vocabulary.
    let other = tempfile::tempdir().unwrap();
    let many: Vec<String> = (0..50).map(|i| format!("w{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    tiny_model(other.path(), &many, None);
    std::fs::copy(
        other.path().join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let err = load(dir.path(), EmbedderOptions::default()).unwrap_err();
    assert!(matches!(err, Error::TokenizerMismatch { .. }), "{err}");
    assert!(err.to_string().contains("tokenizer.json"), "{err}");
    assert!(err.to_string().contains("vocab_size"), "{err}");
}

#[test]
fn settings_that_cannot_work_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    let err = load(
        dir.path(),
        EmbedderOptions::default().with_max_length(POSITIONS + 1),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("exceeds the model's 16 positions"),
        "{err}"
    );

    std::fs::write(
        dir.path().join("modules.json"),
        r#"[{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("1_Pooling")).unwrap();
    std::fs::write(
        dir.path().join("1_Pooling/config.json"),
        r#"{"pooling_mode_max_tokens": true}"#,
    )
    .unwrap();
    let err = load(dir.path(), EmbedderOptions::default()).unwrap_err();
    assert!(err.to_string().contains("1_Pooling/config.json"), "{err}");
    assert!(
        err.to_string().contains("\"max\" is not supported"),
        "{err}"
    );
    std::fs::write(
        dir.path().join("1_Pooling/config.json"),
        r#"{"pooling_mode_mean_tokens": true}"#,
    )
    .unwrap();
    // A module's folder outside the model's (the fuzzer's "/_Pooling", issue 54) is refused.
    for outside in ["/_Pooling", "../1_Pooling", "1_Pooling/../../x"] {
        std::fs::write(
            dir.path().join("modules.json"),
            format!(
                r#"[{{"idx": 1, "name": "1", "path": "{outside}", "type": "sentence_transformers.models.Pooling"}}]"#
            ),
        )
        .unwrap();
        let err = load(dir.path(), EmbedderOptions::default()).unwrap_err();
        assert!(err.to_string().contains("modules.json"), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("[0].path: {outside:?} is not a folder inside")),
            "{err}"
        );
    }
    std::fs::remove_file(dir.path().join("modules.json")).unwrap();

    std::fs::write(dir.path().join("config.json"), r#"{"hidden_size": 8}"#).unwrap();
    let err = load(dir.path(), EmbedderOptions::default()).unwrap_err();
    assert!(err.to_string().contains("config.json"), "{err}");
    assert!(err.to_string().contains("missing field"), "{err}");
}

#[test]
fn asking_for_a_gpu_without_one_falls_back_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    let model = load(
        dir.path(),
        EmbedderOptions::default().with_backend(Backend::Cuda),
    )
    .unwrap();
    if !model.device().starts_with("cuda") {
        assert!(model.device().contains("no GPU used"), "{}", model.device());
        assert!(
            model.device().starts_with("cpu (native"),
            "{}",
            model.device()
        );
    }
    assert_eq!(model.embed(&["pdf"], Kind::Query).unwrap().len(), 1);
}

/// What the fuzzer found in tokenizer.json (issue 54): a syntax error inside `decoder` made the
/// tokenizers library panic, and a max length below the special tokens the tokenizer adds
/// underflowed its truncation; both are errors naming the file.
#[test]
fn a_broken_tokenizer_or_a_length_below_its_special_tokens_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path(), &WORDS, None);
    let path = dir.path().join("tokenizer.json");
    let good = std::fs::read_to_string(&path).unwrap();
    let broken = good.replacen("\"decoder\":null", "\"decoder\":lstrip {}", 1);
    assert_ne!(broken, good);
    std::fs::write(&path, broken).unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("not JSON"),
        "{err}"
    );

    // A pair template of three special tokens, and a max length of 2.
    let mut tokenizer: serde_json::Value = serde_json::from_str(&good).unwrap();
    tokenizer["post_processor"]["pair"] = json!([
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
        {"SpecialToken": {"id": "[CLS]", "type_id": 1}}
    ]);
    tokenizer["post_processor"]["single"] = json!([
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
        {"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"SpecialToken": {"id": "[CLS]", "type_id": 0}}
    ]);
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), Some(2), None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer.json") && err.contains("cannot hold the 3 special tokens"),
        "{err}"
    );

    // A template's special token filed under another name (the fuzzer's "[NEP]" holding
    // "[SEP]"): tokenizers read it and panicked when it encoded.
    let mut tokenizer: serde_json::Value = serde_json::from_str(&good).unwrap();
    let special = tokenizer["post_processor"]["special_tokens"]
        .as_object_mut()
        .unwrap();
    let (name, token) = special
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap();
    special.remove(&name);
    special.insert("[NEP]".into(), token);
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer.json")
            && err.contains(&format!(
                "post_processor.single: special token {name:?} is not among its special_tokens"
            )),
        "{err}"
    );
    // The same under another `type` (the fuzzer's "TemplateProscisneg"): tokenizers reads a
    // processor by its fields, so the check goes by them too.
    tokenizer["post_processor"]["type"] = json!("TemplateProscisneg");
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not among its special_tokens"), "{err}");
    // The broken post-processor after a good one under the same key: the last is the one
    // read (the first pass, which keeps only the post-processor, reads such a file whole).
    let bad = tokenizer["post_processor"].to_string();
    let good_processor =
        serde_json::from_str::<serde_json::Value>(&good).unwrap()["post_processor"].to_string();
    let twice = format!(
        "{{\"post_processor\":{good_processor},{}",
        &tokenizer.to_string()[1..]
    );
    assert!(twice.contains(&bad));
    std::fs::write(&path, twice).unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is not among its special_tokens"), "{err}");
    // JSON that is not an object: tokenizers' own error, naming the file.
    std::fs::write(&path, "[1, 2]").unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("tokenizer.json"), "{err}");

    // A WordPiece or WordLevel vocabulary without its unknown token (the fuzzer's, third
    // round): tokenizers failed on the first unknown word, naming no file.
    let mut tokenizer: serde_json::Value = serde_json::from_str(&good).unwrap();
    tokenizer["model"]["unk_token"] = json!("[MISSING]");
    std::fs::write(&path, tokenizer.to_string()).unwrap();
    let err = embedder::Tokenization::from_dir(dir.path(), None, None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("tokenizer.json")
            && err.contains("model.unk_token \"[MISSING]\" is not in model.vocab"),
        "{err}"
    );
}
