//! Structured targets: inputs built with `arbitrary` from the fuzzer's bytes where a byte string
//! would seldom pass the first check (a safetensors header whose offsets fit its data, a
//! config.json of plausible numbers), and the tiny BERT the model targets load.

use std::collections::BTreeMap;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{Value, json};

/// The tiny BERT's config.json: 2 layers of width 8, the vocabulary of data/tokenizer.json.
pub(crate) const TINY_BERT_CONFIG: &str = r#"{
  "architectures": ["BertModel"],
  "model_type": "bert",
  "hidden_size": 8,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "intermediate_size": 16,
  "hidden_act": "gelu",
  "max_position_embeddings": 32,
  "type_vocab_size": 2,
  "vocab_size": 24,
  "layer_norm_eps": 1e-12,
  "pad_token_id": 0
}"#;

const H: usize = 8;
const I: usize = 16;
const V: usize = 24;
const P: usize = 32;

/// The tiny BERT's weights (every tensor 0.01 × its index, f32), as a safetensors file.
pub(crate) fn tiny_bert_weights() -> Vec<u8> {
    let mut shapes: Vec<(String, Vec<usize>)> = vec![
        ("embeddings.word_embeddings.weight".into(), vec![V, H]),
        ("embeddings.position_embeddings.weight".into(), vec![P, H]),
        ("embeddings.token_type_embeddings.weight".into(), vec![2, H]),
        ("embeddings.LayerNorm.weight".into(), vec![H]),
        ("embeddings.LayerNorm.bias".into(), vec![H]),
    ];
    for l in 0..2 {
        let p = format!("encoder.layer.{l}");
        for (name, out, inp) in [
            ("attention.self.query", H, H),
            ("attention.self.key", H, H),
            ("attention.self.value", H, H),
            ("attention.output.dense", H, H),
            ("intermediate.dense", I, H),
            ("output.dense", H, I),
        ] {
            shapes.push((format!("{p}.{name}.weight"), vec![out, inp]));
            shapes.push((format!("{p}.{name}.bias"), vec![out]));
        }
        for norm in ["attention.output.LayerNorm", "output.LayerNorm"] {
            shapes.push((format!("{p}.{norm}.weight"), vec![H]));
            shapes.push((format!("{p}.{norm}.bias"), vec![H]));
        }
    }
    let data: Vec<(String, Vec<usize>, Vec<u8>)> = shapes
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let bytes = (0..n)
                .flat_map(|i| (0.01 * (i % 97) as f32 - 0.3).to_le_bytes())
                .collect();
            (name, shape, bytes)
        })
        .collect();
    let views: Vec<(&str, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(name, shape, bytes)| {
            let view =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                    .expect("the tiny BERT's shapes fit their data");
            (name.as_str(), view)
        })
        .collect();
    safetensors::serialize(views, None).expect("the tiny BERT serialises")
}

/// A tensor of a structured safetensors file.
#[derive(Debug, Arbitrary)]
struct Tensor {
    name: Name,
    dtype: u8,
    shape: Vec<u16>,
    /// Where its bytes start and how many, in units of the data (kept in it unless `wild`).
    start: u16,
    length: u16,
    wild: bool,
}

/// Tensor names a loader looks for, or any.
#[derive(Debug, Arbitrary)]
enum Name {
    Known(u8),
    Any(String),
}

const KNOWN: &[&str] = &[
    "embeddings.word_embeddings.weight",
    "embeddings.position_embeddings.weight",
    "embeddings.LayerNorm.weight",
    "encoder.layer.0.attention.self.query.weight",
    "model.embed_tokens.weight",
    "lm_head.weight",
    "classifier.weight",
    "score.weight",
];

const DTYPES: &[&str] = &[
    "F32", "F16", "BF16", "F64", "I8", "U8", "I16", "I32", "I64", "BOOL", "F8_E4M3", "U64", "X",
];

/// A safetensors file from a header of plausible tensors over a data block, read as the model
/// loaders read one.
pub(crate) fn safetensors(scratch: &Path, data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(tensors) = Vec::<Tensor>::arbitrary(&mut u) else {
        return;
    };
    let Ok(size) = u.int_in_range(0u16..=4096) else {
        return;
    };
    let size = usize::from(size);
    let mut header = BTreeMap::new();
    for t in tensors {
        let name = match t.name {
            Name::Known(i) => KNOWN[usize::from(i) % KNOWN.len()].to_owned(),
            Name::Any(s) => s,
        };
        let dtype = DTYPES[usize::from(t.dtype) % DTYPES.len()];
        let (start, length) = if t.wild {
            (usize::from(t.start) * 7, usize::from(t.length) * 7)
        } else {
            let start = usize::from(t.start) % (size + 1);
            (start, usize::from(t.length) % (size - start + 1))
        };
        header.insert(
            name,
            json!({"dtype": dtype, "shape": t.shape, "data_offsets": [start, start + length]}),
        );
    }
    let header = Value::Object(header.into_iter().collect()).to_string();
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    let rest = u.take_rest();
    file.extend((0..size).map(|i| rest.get(i).copied().unwrap_or(0)));
    let path = crate::put(scratch, "structured.safetensors", Some(&file));
    crate::read_tensors(scratch, &path);
}

/// The families the embedder reads, by their `model_type`.
const FAMILIES: &[&str] = &[
    "bert",
    "xlm-roberta",
    "qwen3",
    "gemma3_text",
    "mistral",
    "nvembed",
    "new",
    "other",
];

/// A number as configs hold them: small, at a power of two, huge, negative or not a number.
#[derive(Debug, Arbitrary)]
enum Number {
    Small(u8),
    Power(u8),
    Huge(u64),
    Negative(i16),
    Float(f32),
    Text,
    Null,
}

impl Number {
    fn json(&self) -> Value {
        match self {
            Number::Small(n) => json!(n),
            Number::Power(p) => json!(1u64 << (p % 64)),
            Number::Huge(n) => json!(n),
            Number::Negative(n) => json!(-i64::from(*n).abs() - 1),
            Number::Float(f) => json!(f),
            Number::Text => json!("12"),
            Number::Null => Value::Null,
        }
    }
}

const KEYS: &[&str] = &[
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "type_vocab_size",
    "head_dim",
    "rope_theta",
    "sliding_window",
    "query_pre_attn_scalar",
    "pad_token_id",
    "layer_norm_eps",
    "rms_norm_eps",
    "num_latents_value",
    "latent_dim",
    "hidden_act",
];

/// A config.json: the tiny BERT's, its `model_type` set to a family, some keys changed.
pub(crate) fn model_config(scratch: &Path, data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(family) = u.choose(FAMILIES) else {
        return;
    };
    let Ok(changes) = Vec::<(u8, Number)>::arbitrary(&mut u) else {
        return;
    };
    let mut config: Value =
        serde_json::from_str(TINY_BERT_CONFIG).expect("the tiny BERT's config is JSON");
    config["model_type"] = json!(family);
    for (key, number) in changes {
        config[KEYS[usize::from(key) % KEYS.len()]] = number.json();
    }
    crate::load_model(scratch, config.to_string().as_bytes());
}
