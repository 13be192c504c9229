//! Gemma3 text decoders (harrier-oss-v1-270m, KaLM-Embedding-Gemma3-12B):
//! transformers' `Gemma3TextModel`, on the shared decoder engine.
//!
//! What sets Gemma3 apart, as transformers 5.24 computes it: token
//! embeddings times √hidden (rounded to the model's run-time dtype by
//! transformers: f32 here, as in a float32 run); RMSNorm as
//! `x · (1 + w)`; four norms per layer (input, post-attention,
//! pre-feed-forward, post-feed-forward); RMSNorm of queries and keys per
//! head; the attention scale `query_pre_attn_scalar^-½`; a GeGLU
//! feed-forward with tanh-approximated GELU; `layer_types` interleaving
//! `sliding_attention` and `full_attention` layers, each kind with its own
//! rotary base. With `use_bidirectional_attention` the model runs
//! bidirectionally and the saved sliding window `w` is rewritten at load to
//! `w / 2 + 1` (integer division) on each side: a token sees tokens closer
//! than that, on both sides.

use std::path::Path;

use super::decoder::{Activation, LayerKind, Rope, Spec};
use crate::error::{Error, Result};

/// The Gemma3 text architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Gemma3Config {
    /// Rows of the token-embedding matrix.
    pub vocab_size: usize,
    /// Width of the hidden states.
    pub hidden_size: usize,
    /// Positions the rotary embedding was trained for: the longest input.
    pub max_position_embeddings: usize,
    /// Whether attention is bidirectional (`use_bidirectional_attention`).
    pub bidirectional: bool,
    /// The sliding window of the sliding layers as the model applies it
    /// (after the bidirectional rewrite).
    pub sliding_window: usize,
    /// `sliding_attention` or `full_attention`, one per layer.
    pub layer_types: Vec<String>,
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
    #[serde(default = "default_head_dim")]
    head_dim: usize,
    #[serde(default = "default_positions")]
    max_position_embeddings: usize,
    #[serde(default = "default_eps")]
    rms_norm_eps: f64,
    #[serde(default = "default_act")]
    hidden_activation: String,
    #[serde(default = "default_scalar")]
    query_pre_attn_scalar: f64,
    #[serde(default = "default_window")]
    sliding_window: Option<usize>,
    #[serde(default)]
    layer_types: Option<Vec<String>>,
    sliding_window_pattern: Option<usize>,
    #[serde(default)]
    use_bidirectional_attention: Option<bool>,
    #[serde(default)]
    attention_bias: bool,
    attn_logit_softcapping: Option<f64>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    rope_scaling: Option<RopeParameters>,
    rope_parameters: Option<serde_json::Map<String, serde_json::Value>>,
}

#[derive(serde::Deserialize, Default, Clone)]
struct RopeParameters {
    rope_theta: Option<f64>,
    rope_type: Option<String>,
    factor: Option<f64>,
}

fn default_head_dim() -> usize {
    256
}
fn default_positions() -> usize {
    131_072
}
fn default_eps() -> f64 {
    1e-6
}
fn default_act() -> String {
    "gelu_pytorch_tanh".to_owned()
}
fn default_scalar() -> f64 {
    256.0
}
fn default_window() -> Option<usize> {
    Some(4096)
}

const SLIDING: &str = "sliding_attention";
const FULL: &str = "full_attention";

impl Gemma3Config {
    /// `value` is `config.json` of a `gemma3_text` model, or the
    /// `text_config` of a `gemma3` one.
    pub(crate) fn parse(path: &Path, value: serde_json::Value) -> Result<Self> {
        let raw: RawConfig = serde_path_to_error::deserialize(value)
            .map_err(|e| Error::format(path, format!("{}: {}", e.path(), e.inner())))?;
        let bad =
            |field: &str, message: String| Err(Error::format(path, format!("{field}: {message}")));
        if !["gelu_pytorch_tanh", "gelu_tanh"].contains(&raw.hidden_activation.as_str()) {
            return bad(
                "hidden_activation",
                format!(
                    "{:?} is not supported (gelu_pytorch_tanh)",
                    raw.hidden_activation
                ),
            );
        }
        if let Some(cap) = raw.attn_logit_softcapping {
            return bad(
                "attn_logit_softcapping",
                format!("{cap}: soft-capped attention is not supported"),
            );
        }
        let layer_types = match raw.layer_types {
            Some(types) => types,
            None => {
                let pattern = raw.sliding_window_pattern.unwrap_or(6).max(1);
                (0..raw.num_hidden_layers)
                    .map(|i| {
                        if (i + 1) % pattern == 0 {
                            FULL
                        } else {
                            SLIDING
                        }
                        .to_owned()
                    })
                    .collect()
            }
        };
        if layer_types.len() != raw.num_hidden_layers {
            return bad(
                "layer_types",
                format!(
                    "{} entries for {} layers",
                    layer_types.len(),
                    raw.num_hidden_layers
                ),
            );
        }
        if let Some(other) = layer_types.iter().find(|t| *t != SLIDING && *t != FULL) {
            return bad(
                "layer_types",
                format!("{other:?} is not a layer type ({SLIDING}, {FULL})"),
            );
        }
        // Rotary parameters per layer kind: transformers 5's
        // `rope_parameters` keyed by layer type, or transformers 4's
        // `rope_theta` (full), `rope_local_base_freq` (sliding) and
        // `rope_scaling` (full).
        let kind = |name: &str| -> Result<RopeParameters> {
            let Some(map) = &raw.rope_parameters else {
                return Ok(RopeParameters::default());
            };
            match map.get(name) {
                None | Some(serde_json::Value::Null) => Ok(RopeParameters::default()),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| Error::format(path, format!("rope_parameters.{name}: {e}"))),
            }
        };
        let mut full = kind(FULL)?;
        let sliding = kind(SLIDING)?;
        if let Some(scaling) = raw.rope_scaling.clone() {
            full.rope_type = scaling.rope_type.or(full.rope_type);
            full.factor = scaling.factor.or(full.factor);
        }
        let rope = |p: &RopeParameters, theta: f64, field: &str| -> Result<Rope> {
            let theta = p.rope_theta.unwrap_or(theta);
            let factor = match p.rope_type.as_deref().unwrap_or("default") {
                "default" => 1.0,
                "linear" => p.factor.unwrap_or(1.0),
                other => {
                    return Err(Error::format(
                        path,
                        format!("{field}.rope_type: {other:?} is not supported (default, linear)"),
                    ));
                }
            };
            if !(theta.is_finite() && theta > 1.0 && factor.is_finite() && factor > 0.0) {
                return Err(Error::format(
                    path,
                    format!("{field}: base {theta} and factor {factor} are not a rotary embedding"),
                ));
            }
            Ok(Rope { theta, factor })
        };
        let ropes = vec![
            rope(
                &sliding,
                raw.rope_local_base_freq.unwrap_or(10_000.0),
                "rope_parameters.sliding_attention",
            )?,
            rope(
                &full,
                raw.rope_theta.unwrap_or(1_000_000.0),
                "rope_parameters.full_attention",
            )?,
        ];
        let bidirectional = raw.use_bidirectional_attention.unwrap_or(false);
        let saved = match raw.sliding_window {
            Some(w) if w > 0 => w,
            _ if !layer_types.iter().any(|t| t == SLIDING) => 1,
            other => {
                return bad(
                    "sliding_window",
                    format!("{other:?} is not a window, and there are sliding layers"),
                );
            }
        };
        let sliding_window = if bidirectional { saved / 2 + 1 } else { saved };
        if !(raw.query_pre_attn_scalar.is_finite() && raw.query_pre_attn_scalar > 0.0) {
            return bad(
                "query_pre_attn_scalar",
                format!("{} is not a positive scalar", raw.query_pre_attn_scalar),
            );
        }
        let layers = layer_types
            .iter()
            .map(|t| {
                if t == SLIDING {
                    LayerKind {
                        window: Some(sliding_window),
                        rope: 0,
                    }
                } else {
                    LayerKind {
                        window: None,
                        rope: 1,
                    }
                }
            })
            .collect();
        let heads = raw.num_attention_heads;
        let spec = Spec {
            vocab: raw.vocab_size,
            hidden: raw.hidden_size,
            intermediate: raw.intermediate_size,
            query_heads: heads,
            kv_heads: raw.num_key_value_heads.unwrap_or(heads),
            head_dim: raw.head_dim,
            eps: raw.rms_norm_eps,
            causal: !bidirectional,
            scale: raw.query_pre_attn_scalar.powf(-0.5) as f32,
            scaled_embeddings: true,
            unit_offset: true,
            qk_norm: true,
            sandwich: true,
            activation: Activation::GeluTanh,
            attention_bias: raw.attention_bias,
            ropes,
            layers,
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
            bidirectional,
            sliding_window,
            layer_types,
            spec,
        })
    }
}

/// Name prefixes: `Gemma3TextModel` saves (none), `Gemma3ForCausalLM`
/// (`model.`), and the text tower of `Gemma3ForConditionalGeneration`.
pub(crate) const PREFIXES: [&str; 4] = [
    "",
    "model.",
    "model.language_model.",
    "language_model.model.",
];
