//! What a model directory's sentence-transformers and tokenizer files say:
//! pooling, normalisation, prompts and length. (The architecture, from
//! `config.json`, is [`crate::ModelConfig`].)
//!
//! Both generations of sentence-transformers' saved files are read: before
//! 6.x (`pooling_mode_mean_tokens`-style booleans, `max_seq_length` in
//! `sentence_bert_config.json`, module types `sentence_transformers.models.*`)
//! and 6.x (`"pooling_mode": "mean"`, the limit as `model_max_length` in
//! `tokenizer_config.json`, module types such as
//! `sentence_transformers.base.modules.transformer.Transformer`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Average over the tokens (sentence-transformers' `mean`).
    Mean,
    /// The first token's state (`cls`).
    Cls,
    /// The last token's state (`lasttoken`): decoder embedders such as
    /// Qwen3-Embedding, whose tokenizer appends an end-of-text token.
    #[serde(rename = "lasttoken")]
    LastToken,
}

/// What the sentence-transformers files say, where present.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SentenceTransformersConfig {
    /// From the Pooling module's `config.json`.
    pub pooling: Option<Pooling>,
    /// Whether pooling counts the prompt's tokens (the Pooling module's
    /// `include_prompt`; default true).
    pub include_prompt: bool,
    /// Whether `modules.json` lists a Normalize module.
    pub normalize: Option<bool>,
    /// `max_seq_length` from `sentence_bert_config.json` (absent in 6.x saves).
    pub max_seq_length: Option<usize>,
    /// `prompts` of `config_sentence_transformers.json`: name → text.
    pub prompts: BTreeMap<String, String>,
    /// `default_prompt_name` of `config_sentence_transformers.json`.
    pub default_prompt_name: Option<String>,
    /// An output quantizer module after pooling (pplx-embed's
    /// `st_quantize` module).
    pub quantize: Option<Quantize>,
    /// sentence-transformers 6.x's `message` modality
    /// (`sentence_bert_config.json`'s `modality_config.message`): texts are
    /// rendered through the tokenizer's chat template, in this format.
    pub message: Option<MessageFormat>,
    /// `processing_kwargs.chat_template.restore_suffix` (default true): a
    /// truncated rendering ends with the template's own ending again.
    pub restore_suffix: bool,
    /// The other arguments of `processing_kwargs.chat_template`
    /// (`add_generation_prompt`, `enable_thinking`, …): variables of the
    /// template's rendering.
    pub chat_kwargs: BTreeMap<String, serde_json::Value>,
    /// Whether `modules.json` exists (a directory without it is a plain
    /// Hugging Face checkpoint, whose modalities sentence-transformers 6.x
    /// infers: messages wherever the tokenizer has a chat template).
    pub has_modules: bool,
    /// sentence-transformers' `LogitScore` module after the Transformer (a
    /// `CrossEncoder` on a causal language model): the score is the logit
    /// of `true_token_id`, less that of `false_token_id` where given.
    pub logit_score: Option<(u32, Option<u32>)>,
}

/// How a text becomes a chat message's content (the `message` modality's
/// `format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageFormat {
    /// A plain string.
    Flat,
    /// `[{"type": "text", "text": ...}]`.
    Structured,
    /// Decided from the model type and the template, as
    /// sentence-transformers' `InputFormatter` decides.
    Auto,
}

impl MessageFormat {
    /// `Auto` resolved as sentence-transformers 6.3 resolves it (once, at
    /// load): flat for the model types it lists, structured where the
    /// template reads typed parts, else flat.
    pub fn resolve(self, model_type: &str, template: &str) -> Self {
        match self {
            Self::Auto => {
                const FLAT_TYPES: [&str; 5] =
                    ["apertus", "deepseek_v3", "gpt_oss", "minicpm3", "seed_oss"];
                const PARTS: [&str; 6] = [
                    "content[0]",
                    ".type",
                    "'type'",
                    "\"type\"",
                    "item.type",
                    "message.content[",
                ];
                if FLAT_TYPES.contains(&model_type) {
                    Self::Flat
                } else if template.is_empty() || PARTS.iter().any(|p| template.contains(p)) {
                    Self::Structured
                } else {
                    Self::Flat
                }
            }
            other => other,
        }
    }

    /// Its name in `sentence_bert_config.json`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Flat => "flat",
            Self::Structured => "structured",
            Self::Auto => "auto",
        }
    }
}

/// A quantizer module that sentence-transformers applies to the pooled
/// vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Quantize {
    /// pplx-embed's `Int8TanhQuantizer`: `clamp(round(tanh(x)·127), −128,
    /// 127)`, as floats.
    Int8Tanh,
}

impl Quantize {
    /// Applies the quantizer to one vector in place.
    pub fn apply(self, v: &mut [f32]) {
        match self {
            Self::Int8Tanh => {
                for x in v {
                    // torch.round rounds half to even.
                    *x = (x.tanh() * 127.0).round_ties_even().clamp(-128.0, 127.0);
                }
            }
        }
    }
}

#[derive(Deserialize)]
struct QuantizerFile {
    quantization: Option<String>,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// `pooling_mode` of a 6.x Pooling config: one mode or a list.
#[derive(Deserialize)]
#[serde(untagged)]
enum Modes {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
struct PoolingFile {
    pooling_mode: Option<Modes>,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default = "yes")]
    include_prompt: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
    /// 6.x: which input modalities the Transformer module takes.
    modality_config: Option<serde_json::Map<String, serde_json::Value>>,
    /// 6.x: keyword arguments of the processor (`chat_template.restore_suffix`).
    processing_kwargs: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct LogitScoreFile {
    true_token_id: u32,
    false_token_id: Option<u32>,
    #[serde(default)]
    module_input_name: Option<String>,
}

#[derive(Deserialize)]
struct PromptsFile {
    #[serde(default)]
    prompts: BTreeMap<String, Option<String>>,
    #[serde(default)]
    default_prompt_name: Option<String>,
}

impl SentenceTransformersConfig {
    /// Reads `modules.json`, the Pooling module's config,
    /// `sentence_bert_config.json` and `config_sentence_transformers.json`
    /// from a model directory; absent files leave their settings unset.
    pub fn read(dir: &Path) -> Result<Self> {
        let mut config = Self {
            include_prompt: true,
            restore_suffix: true,
            ..Self::default()
        };
        let modules_path = dir.join("modules.json");
        if modules_path.is_file() {
            config.has_modules = true;
            let modules = read_modules(&modules_path)?;
            for (i, module) in modules.iter().enumerate() {
                let name = module.kind.rsplit('.').next().unwrap_or_default();
                match name {
                    "Transformer" => {}
                    "Normalize" => config.normalize = Some(true),
                    _ if module.kind.starts_with("st_quantize.") => {
                        let path = dir.join(&module.path).join("config.json");
                        let kind = if path.is_file() {
                            read_json::<QuantizerFile>(&path)?.quantization
                        } else {
                            None
                        };
                        match (name, kind.as_deref()) {
                            ("Int8TanhQuantizer", None | Some("int8")) | (_, Some("int8")) => {
                                config.quantize = Some(Quantize::Int8Tanh);
                            }
                            (_, other) => {
                                return Err(Error::format(
                                    &modules_path,
                                    format!(
                                        "[{i}].type: quantizer {:?} ({other:?}) is not supported (int8 tanh is)",
                                        module.kind
                                    ),
                                ));
                            }
                        }
                    }
                    "LogitScore" => {
                        let path = dir.join(&module.path).join("config.json");
                        let file: LogitScoreFile = read_json(&path)?;
                        if let Some(name) = file
                            .module_input_name
                            .filter(|n| n.as_str() != "causal_logits")
                        {
                            return Err(Error::format(
                                &path,
                                format!(
                                    "module_input_name: {name:?} is not supported (the language model's logits, causal_logits, are)"
                                ),
                            ));
                        }
                        config.logit_score = Some((file.true_token_id, file.false_token_id));
                    }
                    "Pooling" => {
                        let path = dir.join(&module.path).join("config.json");
                        let (pooling, include_prompt) = read_pooling(&path)?;
                        config.pooling = Some(pooling);
                        config.include_prompt = include_prompt;
                    }
                    _ => {
                        return Err(Error::format(
                            &modules_path,
                            format!(
                                "[{i}].type: module {:?} is not supported (Transformer, Pooling, Normalize, pplx-embed's int8 st_quantize and CrossEncoder's LogitScore are); its output would differ from sentence-transformers'",
                                module.kind
                            ),
                        ));
                    }
                }
            }
            config.normalize.get_or_insert(false);
        }
        let st_path = dir.join("sentence_bert_config.json");
        if st_path.is_file() {
            let st: SentenceBertFile = read_json(&st_path)?;
            config.max_seq_length = st.max_seq_length;
            // sentence-transformers 6.x renders text through the tokenizer's
            // chat template whenever the module takes messages.
            if let Some(message) = st.modality_config.as_ref().and_then(|m| m.get("message")) {
                config.message = Some(match message.get("format").and_then(|f| f.as_str()) {
                    None | Some("auto") => MessageFormat::Auto,
                    Some("flat") => MessageFormat::Flat,
                    Some("structured") => MessageFormat::Structured,
                    Some(other) => {
                        return Err(Error::format(
                            &st_path,
                            format!(
                                "modality_config.message.format: {other:?} is not a format (flat, structured, auto)"
                            ),
                        ));
                    }
                });
            }
            match st
                .processing_kwargs
                .as_ref()
                .and_then(|k| k.get("chat_template"))
            {
                None | Some(serde_json::Value::Null) => {}
                Some(serde_json::Value::Object(kwargs)) => {
                    for (key, value) in kwargs {
                        match key.as_str() {
                            "restore_suffix" => {
                                config.restore_suffix = value.as_bool().ok_or_else(|| {
                                    Error::format(
                                        &st_path,
                                        "processing_kwargs.chat_template.restore_suffix: not true or false",
                                    )
                                })?;
                            }
                            // Sizes reach the tokenizer, not the template.
                            "padding" | "truncation" | "max_length" | "return_tensors" => {
                                return Err(Error::format(
                                    &st_path,
                                    format!(
                                        "processing_kwargs.chat_template.{key}: a size setting among the template's arguments is not supported (the maximum length is max_seq_length or --max-length)"
                                    ),
                                ));
                            }
                            _ => {
                                config.chat_kwargs.insert(key.clone(), value.clone());
                            }
                        }
                    }
                }
                Some(_) => {
                    return Err(Error::format(
                        &st_path,
                        "processing_kwargs.chat_template: not an object of keyword arguments",
                    ));
                }
            }
        }
        let prompts_path = dir.join("config_sentence_transformers.json");
        if prompts_path.is_file() {
            let file: PromptsFile = read_json(&prompts_path)?;
            config.prompts = file
                .prompts
                .into_iter()
                .filter_map(|(name, text)| text.map(|t| (name, t)))
                .collect();
            if let Some(name) = &file.default_prompt_name
                && !config.prompts.contains_key(name)
            {
                return Err(Error::format(
                    &prompts_path,
                    format!(
                        "default_prompt_name {name:?} is not one of its prompts ({})",
                        names(&config.prompts)
                    ),
                ));
            }
            config.default_prompt_name = file.default_prompt_name;
        }
        Ok(config)
    }

    /// The text of the prompt `name`; an unknown name is an error naming the
    /// file and the prompts it defines.
    pub fn prompt(&self, dir: &Path, name: &str) -> Result<&str> {
        self.prompts.get(name).map(String::as_str).ok_or_else(|| {
            Error::format(
                &dir.join("config_sentence_transformers.json"),
                format!(
                    "prompts: the model defines no prompt named {name:?} (it has: {})",
                    names(&self.prompts)
                ),
            )
        })
    }
}

fn names(prompts: &BTreeMap<String, String>) -> String {
    if prompts.is_empty() {
        "none".to_owned()
    } else {
        prompts
            .keys()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn read_pooling(path: &Path) -> Result<(Pooling, bool)> {
    let file: PoolingFile = read_json(path)?;
    let unsupported = |mode: &str| {
        Error::format(
            path,
            format!(
                "pooling mode {mode:?} is not supported (mean, cls and lasttoken are; max, mean_sqrt_len_tokens and weightedmean are not)"
            ),
        )
    };
    let pooling = match &file.pooling_mode {
        Some(modes) => {
            let modes = match modes {
                Modes::One(m) => std::slice::from_ref(m),
                Modes::Many(m) => m.as_slice(),
            };
            let [mode] = modes else {
                return Err(Error::format(
                    path,
                    format!(
                        "pooling_mode: {} modes concatenated; exactly one is supported",
                        modes.len()
                    ),
                ));
            };
            match mode.as_str() {
                "mean" => Pooling::Mean,
                "cls" => Pooling::Cls,
                "lasttoken" => Pooling::LastToken,
                other => return Err(unsupported(other)),
            }
        }
        None => {
            for (on, mode) in [
                (file.pooling_mode_max_tokens, "max"),
                (
                    file.pooling_mode_mean_sqrt_len_tokens,
                    "mean_sqrt_len_tokens",
                ),
                (file.pooling_mode_weightedmean_tokens, "weightedmean"),
            ] {
                if on {
                    return Err(unsupported(mode));
                }
            }
            match (
                file.pooling_mode_mean_tokens,
                file.pooling_mode_cls_token,
                file.pooling_mode_lasttoken,
            ) {
                (true, false, false) => Pooling::Mean,
                (false, true, false) => Pooling::Cls,
                (false, false, true) => Pooling::LastToken,
                _ => {
                    return Err(Error::format(
                        path,
                        "exactly one of pooling_mode_mean_tokens, pooling_mode_cls_token and pooling_mode_lasttoken must be true (or a 6.x `pooling_mode`)",
                    ));
                }
            }
        }
    };
    Ok((pooling, file.include_prompt))
}

/// The directories of the Pooling modules `modules.json` lists (where their
/// `config.json` is).
pub(crate) fn pooling_dirs(modules: &Path) -> Result<Vec<String>> {
    Ok(read_modules(modules)?
        .into_iter()
        .filter(|m| m.kind.rsplit('.').next() == Some("Pooling"))
        .map(|m| m.path)
        .collect())
}

/// The modules of `modules.json`, each in a folder inside the model's (no root, no `..`).
fn read_modules(path: &Path) -> Result<Vec<Module>> {
    let modules: Vec<Module> = read_json(path)?;
    for (i, module) in modules.iter().enumerate() {
        if !Path::new(&module.path)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Err(Error::format(
                path,
                format!(
                    "[{i}].path: {:?} is not a folder inside the model directory",
                    module.path
                ),
            ));
        }
    }
    Ok(modules)
}

/// `model_max_length` of `tokenizer_config.json`, when it is a real limit
/// (transformers writes a huge sentinel when there is none).
pub fn tokenizer_max_length(dir: &Path) -> Result<Option<usize>> {
    let path = dir.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let value: serde_json::Value = read_json(&path)?;
    Ok(value
        .get("model_max_length")
        .and_then(serde_json::Value::as_f64)
        .filter(|n| (1.0..1e9).contains(n))
        .map(|n| n as usize))
}

/// The text of a special token in `tokenizer_config.json` (`field`, e.g.
/// `eos_token`: a string, or an object with its `content`).
pub fn tokenizer_special(dir: &Path, field: &str) -> Result<String> {
    let path = dir.join("tokenizer_config.json");
    let value: serde_json::Value = read_json(&path)?;
    match value.get(field) {
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(serde_json::Value::Object(o)) => match o.get("content") {
            Some(serde_json::Value::String(s)) => Ok(s.clone()),
            _ => Err(Error::format(
                &path,
                format!("{field}.content: not a string"),
            )),
        },
        _ => Err(Error::format(
            &path,
            format!("{field}: absent, and the model appends it to every text"),
        )),
    }
}

/// Reads a JSON file into `T`, errors naming the file, line and column.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = crate::error::read_file(
        path,
        "a model directory holds config.json, tokenizer.json and model.safetensors",
    )?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let at = e.path().to_string();
        let field = if at == "." {
            String::new()
        } else {
            format!("{at}: ")
        };
        Error::format(path, format!("{field}{}", e.inner()))
    })
}
