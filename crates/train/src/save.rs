//! Writing trained models in the layouts other tools load: a
//! sentence-transformers directory for a bi-encoder, transformers'
//! `BertForSequenceClassification` for a cross-encoder. Directories are
//! written beside their destination and renamed into place, so a reader
//! never sees half a model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use candle_core::Tensor;
use safetensors::{Dtype, View};
use serde_json::{Value, json};

use crate::bert::{Bert, Head};
use crate::error::{Error, Result};

/// Files copied from the base model as they are (those present).
const TOKENIZER_FILES: [&str; 7] = [
    "tokenizer.json",
    "tokenizer_config.json",
    // A base saved with sentence-transformers 6.3's message modality renders
    // its texts through this template: the trained model must too.
    "chat_template.jinja",
    "vocab.txt",
    "special_tokens_map.json",
    "LICENSE",
    "NOTICE",
];

/// sentence-transformers' module files, copied for a bi-encoder.
const SENTENCE_TRANSFORMERS_FILES: [&str; 3] = [
    "modules.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
];

/// sentence-transformers' files of a cross-encoder it saved (6.x: the
/// modalities, with the chat template's `message`; the prompts and the
/// activation), kept for a cross-encoder trained from one.
const CROSS_ENCODER_FILES: [&str; 3] = [
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
];

/// Whether `dir` was saved by sentence-transformers' `CrossEncoder`
/// (`config_sentence_transformers.json`'s `model_type`).
pub fn is_cross_encoder(dir: &Path) -> Result<bool> {
    let path = dir.join("config_sentence_transformers.json");
    if !path.is_file() {
        return Ok(false);
    }
    Ok(read_json(&path)?.get("model_type").and_then(Value::as_str) == Some("CrossEncoder"))
}

/// A tensor's f32 bytes for safetensors.
struct F32Tensor {
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &F32Tensor {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        std::borrow::Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn f32_tensor(t: &Tensor) -> Result<F32Tensor> {
    let values = t.flatten_all()?.to_vec1::<f32>()?;
    Ok(F32Tensor {
        shape: t.dims().to_vec(),
        bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

/// Writes named tensors as a safetensors file (f32, `format: pt` metadata as
/// PyTorch writes it).
pub fn write_safetensors(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let converted = tensors
        .iter()
        .map(|(name, t)| Ok((name.clone(), f32_tensor(t)?)))
        .collect::<Result<BTreeMap<String, F32Tensor>>>()?;
    let metadata = Some(std::collections::HashMap::from([(
        "format".to_owned(),
        "pt".to_owned(),
    )]));
    let bytes = safetensors::serialize(converted.iter().map(|(n, t)| (n.as_str(), t)), metadata)
        .map_err(|e| Error::format(path, e.to_string()))?;
    std::fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

fn read_json(path: &Path) -> Result<Value> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::format(path, e.to_string()))
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    let mut text =
        serde_json::to_string_pretty(value).map_err(|e| Error::format(path, e.to_string()))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| Error::io(path, e))
}

/// A directory beside `dest` to fill before renaming it into place.
fn staging(dest: &Path) -> Result<PathBuf> {
    let name = dest
        .file_name()
        .ok_or_else(|| Error::Invalid(format!("{}: not a directory name", dest.display())))?;
    let parent = dest.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    let tmp = parent.join(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    }
    std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, e))?;
    Ok(tmp)
}

/// Moves the filled `tmp` to `dest`, replacing what was there.
pub(crate) fn publish(tmp: &Path, dest: &Path) -> Result<()> {
    if dest.exists() {
        let old = tmp.with_extension("old");
        std::fs::rename(dest, &old).map_err(|e| Error::io(dest, e))?;
        std::fs::rename(tmp, dest).map_err(|e| Error::io(dest, e))?;
        std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))?;
    } else {
        std::fs::rename(tmp, dest).map_err(|e| Error::io(dest, e))?;
    }
    Ok(())
}

/// Fills directory `tmp` and renames it to `dest`, removing it on failure.
pub(crate) fn write_dir(dest: &Path, fill: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = staging(dest)?;
    match fill(&tmp).and_then(|()| publish(&tmp, dest)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Writes `model` (trained from the model directory `base`) to `dest`, in
/// the layout of its head: a sentence-transformers bi-encoder
/// (`max_seq_length` = `max_length`) or a `BertForSequenceClassification`
/// cross-encoder. `extra` files (name, content), such as a README, are
/// written beside the model.
pub fn save_model(
    model: &Bert,
    base: &Path,
    dest: &Path,
    max_length: usize,
    extra: &[(&str, &str)],
) -> Result<()> {
    write_dir(dest, |dir| {
        for name in TOKENIZER_FILES {
            copy_if_present(&base.join(name), &dir.join(name))?;
        }
        let mut config = read_json(&base.join("config.json"))?;
        let object = config
            .as_object_mut()
            .ok_or_else(|| Error::format(&base.join("config.json"), "not a JSON object"))?;
        object.remove("_name_or_path");
        object.remove("_comment");
        let mut tensors = Vec::new();
        match model.head() {
            Head::MeanPooling => {
                object.insert("architectures".to_owned(), json!(["BertModel"]));
                for key in ["id2label", "label2id", "num_labels"] {
                    object.remove(key);
                }
                for p in model.params() {
                    tensors.push((p.name.clone(), p.var.as_tensor().clone()));
                }
                for name in SENTENCE_TRANSFORMERS_FILES {
                    copy_if_present(&base.join(name), &dir.join(name))?;
                }
                if dir.join("modules.json").exists() {
                    create_module_dirs(dir)?;
                } else {
                    write_default_modules(dir, model.config().hidden_size)?;
                }
                let mut sbert = match base.join("sentence_bert_config.json") {
                    p if p.is_file() => read_json(&p)?,
                    _ => json!({"do_lower_case": false}),
                };
                sbert["max_seq_length"] = json!(max_length);
                write_json(&dir.join("sentence_bert_config.json"), &sbert)?;
            }
            Head::Classifier => {
                object.insert(
                    "architectures".to_owned(),
                    json!(["BertForSequenceClassification"]),
                );
                object.insert("id2label".to_owned(), json!({"0": "LABEL_0"}));
                object.insert("label2id".to_owned(), json!({"LABEL_0": 0}));
                object.remove("num_labels");
                for p in model.params() {
                    let name = if p.name.starts_with("classifier.") {
                        p.name.clone()
                    } else {
                        format!("bert.{}", p.name)
                    };
                    tensors.push((name, p.var.as_tensor().clone()));
                }
                if is_cross_encoder(base)? {
                    for name in CROSS_ENCODER_FILES {
                        copy_if_present(&base.join(name), &dir.join(name))?;
                    }
                }
            }
        }
        let tokenizer_config = dir.join("tokenizer_config.json");
        if tokenizer_config.is_file() {
            let mut t = read_json(&tokenizer_config)?;
            t["model_max_length"] = json!(max_length);
            write_json(&tokenizer_config, &t)?;
        }
        write_json(&dir.join("config.json"), &config)?;
        write_safetensors(&dir.join("model.safetensors"), &tensors)?;
        for (name, content) in extra {
            let path = dir.join(name);
            std::fs::write(&path, content).map_err(|e| Error::io(&path, e))?;
        }
        Ok(())
    })
}

/// Creates the folder of every module `modules.json` names (Normalize has
/// no files, but sentence-transformers expects its folder).
fn create_module_dirs(dir: &Path) -> Result<()> {
    let path = dir.join("modules.json");
    let modules = read_json(&path)?;
    for module in modules.as_array().into_iter().flatten() {
        if let Some(sub) = module.get("path").and_then(Value::as_str) {
            if sub.is_empty() || sub.contains("..") || sub.starts_with('/') {
                continue;
            }
            let folder = dir.join(sub);
            std::fs::create_dir_all(&folder).map_err(|e| Error::io(&folder, e))?;
        }
    }
    Ok(())
}

fn write_default_modules(dir: &Path, hidden: usize) -> Result<()> {
    let modules = json!([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    ]);
    write_json(&dir.join("modules.json"), &modules)?;
    std::fs::create_dir_all(dir.join("1_Pooling")).map_err(|e| Error::io(dir, e))?;
    write_json(
        &dir.join("1_Pooling/config.json"),
        &json!({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": true}),
    )
}

fn copy_if_present(from: &Path, to: &Path) -> Result<()> {
    if !from.is_file() {
        return Ok(());
    }
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    std::fs::copy(from, to).map_err(|e| Error::io(from, e))?;
    Ok(())
}
