//! Mistral decoders (transformers' `MistralModel`): pre-RMSNorm layers,
//! rotary positions, grouped-query causal attention — in a sliding window
//! where `sliding_window` is set (a token sees the `w − 1` tokens before
//! it), as transformers 5's sliding-window causal mask — and a SwiGLU
//! feed-forward, on the shared decoder engine.
//!
//! NV-Embed-v1's decoder is this one run bidirectionally, its `text_config`
//! read here (`nvembed.rs` adds the latent-attention pooling).

use std::path::Path;

use super::decoder::{
    Activation, LayerKind, Rope, RopeParameters, Spec, default_act, default_eps, head_dim,
    single_rope_base,
};
use crate::error::{Error, Result};

/// The Mistral architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct MistralConfig {
    /// Rows of the token-embedding matrix.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Positions the rotary embedding was trained for: the longest input.
    pub max_position_embeddings: usize,
    /// The causal sliding window, if any.
    pub sliding_window: Option<usize>,
    pub(crate) spec: Spec,
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
    #[serde(default = "default_act")]
    hidden_act: String,
    rope_theta: Option<f64>,
    rope_parameters: Option<RopeParameters>,
    rope_scaling: Option<serde_json::Value>,
    sliding_window: Option<usize>,
}

impl MistralConfig {
    pub(crate) fn parse(path: &Path, value: serde_json::Value) -> Result<Self> {
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
        let theta = single_rope_base(
            path,
            raw.rope_theta,
            raw.rope_parameters.as_ref(),
            raw.rope_scaling.as_ref(),
        )?;
        let heads = raw.num_attention_heads;
        let head_dim = head_dim(path, raw.head_dim, raw.hidden_size, heads)?;
        let spec = Spec {
            vocab: raw.vocab_size,
            hidden: raw.hidden_size,
            intermediate: raw.intermediate_size,
            query_heads: heads,
            kv_heads: raw.num_key_value_heads.unwrap_or(heads),
            head_dim,
            eps: raw.rms_norm_eps,
            causal: true,
            scale: 1.0 / (head_dim as f32).sqrt(),
            scaled_embeddings: false,
            unit_offset: false,
            qk_norm: false,
            sandwich: false,
            activation: Activation::Silu,
            attention_bias: false,
            ropes: vec![Rope { theta, factor: 1.0 }],
            layers: vec![
                LayerKind {
                    window: raw.sliding_window,
                    rope: 0,
                };
                raw.num_hidden_layers
            ],
        };
        if let Err((field, message)) = spec.check() {
            return bad(field, message);
        }
        if raw.max_position_embeddings == 0 {
            return bad("max_position_embeddings", "must be positive".to_owned());
        }
        Ok(Self {
            vocab_size: raw.vocab_size,
            hidden_size: raw.hidden_size,
            max_position_embeddings: raw.max_position_embeddings,
            sliding_window: raw.sliding_window,
            spec,
        })
    }
}

/// Name prefixes: `MistralModel` saves (none) and `MistralForCausalLM`.
pub(crate) const PREFIXES: [&str; 2] = ["", "model."];
