//! Qwen3 decoders (Qwen3-Embedding, Qwen3-Reranker, and the SkillRet models
//! fine-tuned from them): pre-RMSNorm layers, rotary positions, grouped-query
//! causal attention with per-head RMSNorm on queries and keys, and a SwiGLU
//! feed-forward — transformers' `Qwen3Model`.
//!
//! Checkpoints load in both layouts: `Qwen3Model` (tensor names without a
//! prefix, as embedding models are saved) and `Qwen3ForCausalLM` (under
//! `model.`, with `lm_head` or tied to the embeddings, as rerankers are).
//!
//! Variants: pplx-embed-v1 (`bidirectional_pplx_qwen3`) runs the same
//! weights bidirectionally; jina-embeddings-v5 merges a task's LoRA adapter
//! into them at load (`lora.rs`). Both engines are the shared decoder's
//! (`decoder.rs`; candle-transformers' `qwen3` takes no padding mask and
//! keeps a KV cache between calls, so this crate builds its own graph).

use std::path::Path;

use super::decoder::{
    Activation, EMBEDDINGS, LayerKind, Rope, RopeParameters, Spec, default_act, default_eps,
    head_dim, single_rope_base,
};
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};

/// The Qwen3 architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Qwen3Config {
    /// Rows of the token-embedding matrix.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Width of the feed-forward layer.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_hidden_layers: usize,
    /// Query heads.
    pub num_attention_heads: usize,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: usize,
    /// Width of one head (`num_attention_heads · head_dim` may differ from
    /// `hidden_size`).
    pub head_dim: usize,
    /// Positions the rotary embedding was trained for: the longest input.
    pub max_position_embeddings: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// Rotary base (`rope_theta`, or transformers 5's
    /// `rope_parameters.rope_theta`).
    pub rope_theta: f64,
    /// Whether the projections have biases.
    pub attention_bias: bool,
    /// Whether the language-model head is the embedding matrix.
    pub tie_word_embeddings: bool,
    /// Whether attention is bidirectional (pplx-embed's
    /// `bidirectional_pplx_qwen3`, or `is_causal: false`).
    pub bidirectional: bool,
}

#[derive(serde::Deserialize)]
struct RawConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    #[serde(default = "default_act")]
    hidden_act: String,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    #[serde(default)]
    tie_word_embeddings: bool,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    is_causal: Option<bool>,
    use_bidirectional_attention: Option<bool>,
}

impl Qwen3Config {
    /// `bidirectional`: the model type says so (pplx-embed).
    pub(crate) fn parse(
        path: &Path,
        value: serde_json::Value,
        bidirectional: bool,
    ) -> Result<Self> {
        let raw: RawConfig = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::format(path, format!("{}: {}", e.path(), e.inner())))?;
        let bad =
            |field: &str, message: String| Err(Error::format(path, format!("{field}: {message}")));
        if raw.hidden_act != "silu" {
            return bad(
                "hidden_act",
                format!("{:?} is not supported (silu)", raw.hidden_act),
            );
        }
        if raw.use_sliding_window {
            return bad(
                "use_sliding_window",
                "sliding-window attention is not supported".to_owned(),
            );
        }
        if let Some(types) = &raw.layer_types
            && let Some(other) = types.iter().find(|t| *t != "full_attention")
        {
            return bad(
                "layer_types",
                format!("{other:?} layers are not supported (full_attention)"),
            );
        }
        let rope_theta = single_rope_base(
            path,
            raw.rope_theta,
            raw.rope_parameters.as_ref(),
            raw.rope_scaling.as_ref(),
        )?;
        let heads = raw.num_attention_heads;
        let kv = raw.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
            return bad(
                "num_key_value_heads",
                format!("{kv} does not divide num_attention_heads {heads}"),
            );
        }
        let head_dim = head_dim(path, raw.head_dim, raw.hidden_size, heads)?;
        if head_dim == 0 || head_dim % 2 == 1 {
            return bad(
                "head_dim",
                format!("{head_dim} is not a positive even width"),
            );
        }
        if raw.hidden_size == 0 || raw.vocab_size == 0 || raw.max_position_embeddings == 0 {
            return bad(
                "hidden_size",
                "hidden_size, vocab_size and max_position_embeddings must be positive".to_owned(),
            );
        }
        Ok(Self {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            intermediate_size: raw.intermediate_size,
            num_hidden_layers: raw.num_hidden_layers,
            num_attention_heads: heads,
            num_key_value_heads: kv,
            head_dim,
            max_position_embeddings: raw.max_position_embeddings,
            rms_norm_eps: raw.rms_norm_eps,
            rope_theta,
            attention_bias: raw.attention_bias,
            tie_word_embeddings: raw.tie_word_embeddings,
            bidirectional: bidirectional
                || raw.is_causal == Some(false)
                || raw.use_bidirectional_attention == Some(true),
        })
    }

    /// The decoder it is.
    pub(crate) fn spec(&self) -> Spec {
        Spec {
            vocab: self.vocab_size,
            hidden: self.hidden_size,
            intermediate: self.intermediate_size,
            query_heads: self.num_attention_heads,
            kv_heads: self.num_key_value_heads,
            head_dim: self.head_dim,
            eps: self.rms_norm_eps,
            causal: !self.bidirectional,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            scaled_embeddings: false,
            unit_offset: false,
            qk_norm: true,
            sandwich: false,
            activation: Activation::Silu,
            attention_bias: self.attention_bias,
            ropes: vec![Rope {
                theta: self.rope_theta,
                factor: 1.0,
            }],
            layers: vec![
                LayerKind {
                    window: None,
                    rope: 0
                };
                self.num_hidden_layers
            ],
        }
    }
}

/// Name prefixes: `Qwen3Model` saves (none) and `Qwen3ForCausalLM` saves.
pub(crate) const PREFIXES: [&str; 2] = ["", "model."];
const PROBE: &str = EMBEDDINGS;

/// The name of the language-model head's matrix in `weights`: `lm_head.weight`
/// where the checkpoint has one, else (tied) the embedding matrix.
pub(crate) fn lm_head_name(weights: &Weights) -> String {
    if weights.contains_full("lm_head.weight") {
        "lm_head.weight".to_owned()
    } else {
        format!("{}{PROBE}", weights.prefix())
    }
}

/// Opens a Qwen3 checkpoint's weights.
pub(crate) fn weights(files: &ModelFiles) -> Result<Weights> {
    Weights::open(&files.weights, &PREFIXES, PROBE)
}
