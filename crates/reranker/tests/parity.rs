//! Cross-encoder logits equal PyTorch transformers' on 200 real (query, skill)
//! pairs, for the BERT and the XLM-R head; loading errors are clear.
//!
//! Reference: tests/data/reference_logits.json, from
//! scripts/make_reranker_fixture.py (its header names the versions). Models:
//! scripts/fetch-models.sh then scripts/make_cross_encoders.py (test models,
//! random heads); texts: ../shared/skillret-sample. Tests skip with a note
//! where those are absent.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use embedder::{Backend, Precision};
use reranker::{CrossEncoder, Error, Reranker, RerankerOptions};
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn model(name: &str) -> Option<PathBuf> {
    let dir = root().join("models").join(name);
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "skipping: {} is absent (run scripts/fetch-models.sh, scripts/make_cross_encoders.py and scripts/make_registry_models.py)",
            dir.display()
        );
        None
    }
}

/// The fixture's pairs as texts, or `None` where the sample is absent.
fn pairs(fixture: &Value) -> Option<Vec<(String, String)>> {
    let sample = root().join("../shared/skillret-sample");
    if !sample.is_dir() {
        eprintln!("skipping: {} is absent", sample.display());
        return None;
    }
    let data = eval::Dataset::load(&sample, "test").unwrap();
    let queries: HashMap<&str, &str> = data
        .queries
        .iter()
        .map(|q| (q.id.as_str(), q.text.as_str()))
        .collect();
    let skills: HashMap<&str, String> = data
        .skills
        .iter()
        .map(|s| (s.id.as_str(), s.text()))
        .collect();
    Some(
        fixture["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let (q, s) = (p[0].as_str().unwrap(), p[1].as_str().unwrap());
                (queries[q].to_owned(), skills[s].clone())
            })
            .collect(),
    )
}

fn fixture() -> Value {
    let path = root().join("crates/reranker/tests/data/reference_logits.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Worst |logit difference| against the reference, after checking the token
/// counts (the tokenisation) match exactly.
fn worst_difference(name: &str, precision: Precision) -> Option<f32> {
    worst_difference_on(name, precision, Backend::Native, usize::MAX)
}

/// The same on `backend`, scoring the first `limit` pairs (the token counts of all).
fn worst_difference_on(
    name: &str,
    precision: Precision,
    backend: Backend,
    limit: usize,
) -> Option<f32> {
    let fixture = fixture();
    let dir = model(name)?;
    let pairs = pairs(&fixture)?;
    let reference = &fixture["models"][name];
    let max_length = reference["max_length"].as_u64().unwrap() as usize;
    let options = RerankerOptions::default()
        .with_max_length(max_length)
        .with_precision(precision)
        .with_backend(backend);
    let model = CrossEncoder::from_dir(&dir, options).unwrap();
    assert_eq!(model.labels() as u64, reference["labels"].as_u64().unwrap());
    let tokens: Vec<u64> = reference["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap())
        .collect();
    let ours: Vec<u64> = model
        .pair_tokens(&pairs)
        .unwrap()
        .into_iter()
        .map(|n| n as u64)
        .collect();
    assert_eq!(
        ours, tokens,
        "{name}: token counts differ from transformers'"
    );
    let every = pairs.len();
    let pairs = &pairs[..limit.min(every)];
    let logits = model.logits(pairs, &|_| {}).unwrap();
    let expected: Vec<f32> = reference["logits"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    assert_eq!(expected.len(), every * model.labels());
    assert_eq!(logits.len(), pairs.len() * model.labels());
    let expected = &expected[..logits.len()];
    let worst = logits
        .iter()
        .zip(expected)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    eprintln!(
        "{name} ({precision:?}): {} pairs, worst |logit difference| {worst:.2e}",
        pairs.len()
    );
    Some(worst)
}

#[test]
fn bert_head_matches_transformers() {
    if let Some(worst) = worst_difference("test-bert-cross-encoder", Precision::F32) {
        assert!(worst <= 1e-4, "worst {worst}");
    }
}

#[test]
fn xlmr_head_matches_transformers() {
    if let Some(worst) = worst_difference("test-xlmr-cross-encoder", Precision::F32) {
        assert!(worst <= 1e-4, "worst {worst}");
    }
}

#[test]
fn jina_reranker_v2_flash_layout_matches_transformers() {
    // jina's own config class (no model_type) and fused Wqkv, read natively
    // and by the candle graph; scored as transformers scores the same
    // weights in its layout, at the model's 1,024 tokens.
    // candle pads each batch to its longest pair: the first 50 of the 200 pairs there.
    for (backend, limit) in [(Backend::Native, usize::MAX), (Backend::Candle, 50)] {
        if let Some(worst) =
            worst_difference_on("test-jina-reranker-v2", Precision::F32, backend, limit)
        {
            assert!(worst <= 1e-4, "{backend:?}: worst {worst}");
        }
    }
}

#[test]
fn bf16_stays_close() {
    // bf16 rounds the weights (8 bits of mantissa): logits of the MiniLM-sized
    // model move by a few thousandths (measured: 1.9e-3).
    if let Some(worst) = worst_difference("test-bert-cross-encoder", Precision::Bf16) {
        assert!(worst <= 1e-2, "worst {worst}");
    }
}

#[test]
fn int8_stays_close() {
    // int8 quantises the weights per output channel and the activations per
    // token (the query/key/value and feed-forward output layers stay bf16):
    // logits of the MiniLM-sized model move by a few hundredths at most
    // (measured: 3.3e-2).
    if let Some(worst) = worst_difference("test-bert-cross-encoder", Precision::Int8) {
        assert!(worst <= 0.1, "worst {worst}");
    }
}

#[test]
fn rerank_reorders_the_top_n_and_returns_only_those() {
    let Some(dir) = model("test-bert-cross-encoder") else {
        return;
    };
    let model =
        CrossEncoder::from_dir(&dir, RerankerOptions::default().with_max_length(128)).unwrap();
    let docs: HashMap<&str, &str> = [
        ("a", "pdf | Read and merge PDF files. | # PDF tools"),
        ("b", "git | Commit, branch and rebase. | # Git"),
        ("c", "csv | Parse CSV tables. | # CSV"),
        ("d", "mail | Send e-mail. | # Mail"),
        ("e", "zip | Compress files. | # Zip"),
    ]
    .into_iter()
    .collect();
    let candidates: Vec<eval::ScoredDoc> = ["a", "b", "c", "d", "e"]
        .iter()
        .enumerate()
        .map(|(i, id)| eval::ScoredDoc::new(*id, 10.0 - i as f64))
        .collect();
    let query = "merge two pdf reports and email them";
    let lookup = |id: &str| docs.get(id).map(|t| (*t).to_owned());
    let out = model.rerank(query, &candidates, &lookup, 3).unwrap();
    // The top 3 only (the official eval_rerank's output), with the
    // cross-encoder's scores, best first.
    assert_eq!(out.len(), 3);
    let pairs: Vec<(&str, &str)> = ["a", "b", "c"].iter().map(|id| (query, docs[id])).collect();
    let scores = model.score(&pairs, &|_| {}).unwrap();
    let mut expected: Vec<(f64, &str)> = scores
        .iter()
        .zip(["a", "b", "c"])
        .map(|(s, id)| (f64::from(*s), id))
        .collect();
    expected.sort_by(|x, y| y.0.total_cmp(&x.0).then(y.1.cmp(x.1)));
    for (doc, (score, id)) in out.iter().zip(&expected) {
        assert_eq!((&*doc.id, doc.score), (*id, *score));
    }
    // The written order is the trec_eval order.
    let mut sorted = out.clone();
    eval::sort_trec(&mut sorted);
    assert_eq!(sorted, out);
    // A document the library lacks is an error naming it.
    let err = model
        .rerank(
            query,
            &candidates,
            &|id| (id != "b").then(|| lookup(id)).flatten(),
            3,
        )
        .unwrap_err();
    assert!(err.to_string().contains("`b`"), "{err}");
}

/// A copy of a model directory with its weights rewritten by `edit`.
fn edited(
    src: &Path,
    edit: impl FnOnce(&mut Vec<(String, Vec<usize>, Vec<u8>)>),
) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(src.join(name), dir.path().join(name)).unwrap();
    }
    let bytes = std::fs::read(src.join("model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| (name, view.shape().to_vec(), view.data().to_vec()))
        .collect();
    edit(&mut tensors);
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape, data)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), data)
                    .unwrap();
            (name.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &dir.path().join("model.safetensors")).unwrap();
    dir
}

fn load_error(dir: &Path) -> Error {
    CrossEncoder::from_dir(dir, RerankerOptions::default()).unwrap_err()
}

#[test]
fn a_bi_encoder_is_not_a_cross_encoder() {
    let Some(dir) = model("all-MiniLM-L6-v2") else {
        return;
    };
    let message = load_error(&dir).to_string();
    assert!(
        message.contains("no sequence-classification head"),
        "{message}"
    );
}

#[test]
fn unsupported_label_counts_and_broken_heads_are_refused() {
    let Some(src) = model("test-xlmr-cross-encoder") else {
        return;
    };
    // Three labels, declared in config.json and present in the classifier.
    let three = edited(&src, |tensors| {
        for (name, shape, data) in tensors.iter_mut() {
            if name.starts_with("classifier.out_proj.") {
                shape[0] = 3;
                let row = data.len() / 2;
                data.extend_from_within(..row);
            }
        }
    });
    let config_path = three.path().join("config.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).unwrap()).unwrap();
    config["id2label"] = serde_json::json!({"0": "a", "1": "b", "2": "c"});
    std::fs::write(&config_path, config.to_string()).unwrap();
    let message = load_error(three.path()).to_string();
    assert!(message.contains("3 labels"), "{message}");
    // A config that declares 2 labels for a 3-output classifier.
    config["id2label"] = serde_json::json!({"0": "a", "1": "b"});
    std::fs::write(&config_path, config.to_string()).unwrap();
    let message = load_error(three.path()).to_string();
    assert!(message.contains("declares 2 labels"), "{message}");
    // A head with a tensor missing.
    let partial = edited(&src, |tensors| {
        tensors.retain(|(name, _, _)| name != "classifier.dense.bias");
    });
    let err = load_error(partial.path());
    assert!(
        matches!(&err, Error::MissingTensor { name, .. } if name == "classifier.dense.bias"),
        "{err}"
    );
}

#[test]
fn a_tokenizer_of_another_model_is_refused() {
    let (Some(bert), Some(xlmr)) = (
        model("test-bert-cross-encoder"),
        model("test-xlmr-cross-encoder"),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for name in ["config.json", "model.safetensors", "tokenizer_config.json"] {
        std::fs::copy(bert.join(name), dir.path().join(name)).unwrap();
    }
    std::fs::copy(
        xlmr.join("tokenizer.json"),
        dir.path().join("tokenizer.json"),
    )
    .unwrap();
    let err = load_error(dir.path());
    assert!(matches!(err, Error::TokenizerMismatch { .. }), "{err}");
}
