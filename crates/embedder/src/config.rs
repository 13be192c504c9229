//! What a model directory says about the model: `config.json` (architecture)
//! and the sentence-transformers files (pooling, normalisation, length).

use std::path::Path;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The BERT architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BertConfig {
    /// Rows of the word-embedding matrix.
    pub vocab_size: usize,
    /// Width of every hidden state.
    pub hidden_size: usize,
    /// Number of transformer layers.
    pub num_hidden_layers: usize,
    /// Attention heads per layer.
    pub num_attention_heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Activation of the feed-forward layer (`gelu` only).
    #[serde(default = "default_act")]
    pub hidden_act: String,
    /// Number of position embeddings: the longest input.
    pub max_position_embeddings: usize,
    /// Number of token types.
    #[serde(default = "default_type_vocab")]
    pub type_vocab_size: usize,
    /// LayerNorm epsilon.
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    /// Padding token id.
    #[serde(default)]
    pub pad_token_id: usize,
    /// `absolute` only.
    #[serde(default = "default_position_type")]
    pub position_embedding_type: String,
    /// transformers' model type (`bert`, `xlm-roberta`, ...).
    #[serde(default)]
    pub model_type: Option<String>,
}

fn default_act() -> String {
    "gelu".to_owned()
}
fn default_type_vocab() -> usize {
    2
}
fn default_eps() -> f64 {
    1e-12
}
fn default_position_type() -> String {
    "absolute".to_owned()
}

impl BertConfig {
    /// Reads and checks `config.json`.
    pub fn read(path: &Path) -> Result<Self> {
        let config: Self = read_json(path)?;
        let bad = |message: String| Err(Error::format(path, message));
        if config.hidden_size == 0
            || config.num_attention_heads == 0
            || !config
                .hidden_size
                .is_multiple_of(config.num_attention_heads)
        {
            return bad(format!(
                "hidden_size {} is not a positive multiple of num_attention_heads {}",
                config.hidden_size, config.num_attention_heads
            ));
        }
        if !matches!(
            config.hidden_act.as_str(),
            "gelu" | "gelu_new" | "gelu_pytorch_tanh"
        ) {
            return bad(format!(
                "hidden_act {:?} is not supported (gelu, gelu_new, gelu_pytorch_tanh)",
                config.hidden_act
            ));
        }
        if config.position_embedding_type != "absolute" {
            return bad(format!(
                "position_embedding_type {:?} is not supported (absolute)",
                config.position_embedding_type
            ));
        }
        if config.type_vocab_size == 0 || config.max_input_length() == 0 {
            return bad("type_vocab_size and max_position_embeddings must be positive".to_owned());
        }
        Ok(config)
    }

    /// Whether positions are numbered as RoBERTa numbers them: from
    /// `pad_token_id + 1` (transformers' `create_position_ids_from_input_ids`).
    pub fn roberta_positions(&self) -> bool {
        matches!(
            self.model_type.as_deref(),
            Some("roberta" | "xlm-roberta" | "camembert")
        )
    }

    /// The position of a sequence's first token.
    pub fn position_offset(&self) -> usize {
        if self.roberta_positions() {
            self.pad_token_id + 1
        } else {
            0
        }
    }

    /// The longest input the position table allows.
    pub fn max_input_length(&self) -> usize {
        self.max_position_embeddings
            .saturating_sub(self.position_offset())
    }

    /// Width of one attention head.
    pub fn head_size(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    /// Whether the activation is the tanh approximation of GELU.
    pub(crate) fn tanh_gelu(&self) -> bool {
        self.hidden_act != "gelu"
    }
}

/// How token states become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// Average over the tokens (sentence-transformers' `pooling_mode_mean_tokens`).
    Mean,
    /// The first token's state (`pooling_mode_cls_token`).
    Cls,
}

/// What the sentence-transformers files say, where present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentenceTransformersConfig {
    /// From the Pooling module's `config.json`.
    pub pooling: Option<Pooling>,
    /// Whether `modules.json` lists a Normalize module.
    pub normalize: Option<bool>,
    /// `max_seq_length` from `sentence_bert_config.json`.
    pub max_seq_length: Option<usize>,
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct PoolingFile {
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
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
}

impl SentenceTransformersConfig {
    /// Reads `modules.json`, the Pooling module's config and
    /// `sentence_bert_config.json` from a model directory; absent files leave
    /// their settings unset.
    pub fn read(dir: &Path) -> Result<Self> {
        let mut config = Self {
            pooling: None,
            normalize: None,
            max_seq_length: None,
        };
        let modules_path = dir.join("modules.json");
        if modules_path.is_file() {
            let modules: Vec<Module> = read_json(&modules_path)?;
            config.normalize = Some(modules.iter().any(|m| m.kind.ends_with(".Normalize")));
            if let Some(pooling) = modules.iter().find(|m| m.kind.ends_with(".Pooling")) {
                let path = dir.join(&pooling.path).join("config.json");
                config.pooling = Some(read_pooling(&path)?);
            }
        }
        let st_path = dir.join("sentence_bert_config.json");
        if st_path.is_file() {
            let st: SentenceBertFile = read_json(&st_path)?;
            config.max_seq_length = st.max_seq_length;
        }
        Ok(config)
    }
}

fn read_pooling(path: &Path) -> Result<Pooling> {
    let file: PoolingFile = read_json(path)?;
    match (file.pooling_mode_mean_tokens, file.pooling_mode_cls_token) {
        _ if file.pooling_mode_max_tokens
            || file.pooling_mode_mean_sqrt_len_tokens
            || file.pooling_mode_weightedmean_tokens
            || file.pooling_mode_lasttoken =>
        {
            Err(Error::format(
                path,
                "only mean and CLS pooling are supported (max, mean_sqrt_len, weightedmean and lasttoken are not)",
            ))
        }
        (true, false) => Ok(Pooling::Mean),
        (false, true) => Ok(Pooling::Cls),
        _ => Err(Error::format(
            path,
            "exactly one of pooling_mode_mean_tokens and pooling_mode_cls_token must be true",
        )),
    }
}

/// Reads a JSON file into `T`, errors naming the file, line and column.
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = crate::error::read_file(
        path,
        "a model directory holds config.json, tokenizer.json and model.safetensors",
    )?;
    serde_json::from_slice(&bytes).map_err(|e| Error::format(path, e.to_string()))
}
