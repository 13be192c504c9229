//! Model families behind one small interface.
//!
//! Each family is one file (`bert.rs`, `qwen3.rs`, `gemma3.rs`,
//! `mistral.rs`): its `config.json` fields, and the same forward pass on
//! both engines — the native CPU engine (unpadded batches, fused kernels,
//! f32, bf16 or int8 linear layers) and a candle graph (the CUDA path, also
//! runnable on the CPU to check the native one). The decoders share one
//! engine (`decoder.rs`) that each family's config describes; per-task LoRA
//! adapters merge into it at load (`lora.rs`). All implement `Model`: a
//! batch of token sequences in, one pooled vector per sequence out. Adding
//! a family is one new file and one arm in [`ModelConfig::read`] and
//! `load`.

pub(crate) mod bert;
pub(crate) mod decoder;
pub(crate) mod gemma3;
pub(crate) mod lora;
pub(crate) mod mistral;
pub(crate) mod nvembed;
pub(crate) mod profile;
pub(crate) mod qwen3;
pub(crate) mod varlen;

use std::path::Path;

use crate::config::Pooling;
use crate::error::{Error, Result};
use crate::files::{ModelFiles, Weights};
use crate::{AttentionKernel, Backend, Precision};
use engine::linear::Plan;

pub use bert::BertConfig;
pub use gemma3::Gemma3Config;
pub use mistral::MistralConfig;
pub use nvembed::{Attention, LatentConfig, NvEmbedConfig};
pub use qwen3::Qwen3Config;

/// One tokenised input: token ids, and token types (empty: all type 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tokens {
    /// Token ids, specials included.
    pub ids: Vec<u32>,
    /// Segment of each token (0 first text, 1 second), or empty.
    pub types: Vec<u32>,
}

/// Which states a forward pass returns, one vector per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pool {
    pub(crate) pooling: Pooling,
    /// Leading tokens left out of mean and CLS pooling (a prompt that
    /// sentence-transformers' `include_prompt = false` excludes).
    pub(crate) skip: usize,
    /// The attention of this call.
    pub(crate) mask: Mask,
}

impl Pool {
    pub(crate) fn new(pooling: Pooling, skip: usize) -> Self {
        Self {
            pooling,
            skip,
            mask: Mask::Configured,
        }
    }
}

/// The attention of one forward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mask {
    /// As the model's config says.
    #[default]
    Configured,
    /// Causal, in this sliding window (NV-Embed's official groups that
    /// transformers 5 runs with Mistral's mask).
    Causal(Option<usize>),
}

/// A loaded model on one engine.
pub(crate) trait Model: Send + Sync {
    /// The pooled final states of a batch (`batch.len() × hidden`, row
    /// after row), not normalised.
    fn forward(&self, batch: &[&Tokens], pool: Pool) -> Result<Vec<f32>>;

    /// How many batches to run at once, each with its share of the token
    /// budget: one, or [`engine::lanes::count`] for the native engine.
    fn lanes(&self) -> usize {
        1
    }

    /// The most tokens a batch should hold on this model's engine, whatever
    /// the budget allows (`None`: the budget decides): the native engine
    /// whose products run on AMX tiles keeps its batches' activations in
    /// cache ([`engine::linear::TILE_BATCH_TOKENS`]).
    fn batch_cap(&self) -> Option<usize> {
        None
    }
}

/// The architecture, from `config.json`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ModelConfig {
    /// BERT and RoBERTa-style encoders (MiniLM, e5, bge, arctic-embed, …).
    Bert(BertConfig),
    /// Qwen3 decoders (Qwen3-Embedding, Qwen3-Reranker, pplx-embed run
    /// bidirectionally, jina-embeddings-v5 with its LoRA adapters, …).
    Qwen3(Qwen3Config),
    /// Gemma3 text decoders (harrier-oss-v1-270m, KaLM-Embedding-Gemma3).
    Gemma3(Gemma3Config),
    /// Mistral decoders (causal, with or without a sliding window).
    Mistral(MistralConfig),
    /// NV-Embed: a bidirectional Mistral decoder and latent-attention
    /// pooling.
    NvEmbed(NvEmbedConfig),
}

const BERT_TYPES: [&str; 4] = ["bert", "roberta", "xlm-roberta", "camembert"];

/// Every `model_type` [`ModelConfig::read`] takes.
pub const SUPPORTED_TYPES: [&str; 10] = [
    "bert",
    "roberta",
    "xlm-roberta",
    "camembert",
    "qwen3",
    "bidirectional_pplx_qwen3",
    "gemma3_text",
    "gemma3",
    "mistral",
    "nvembed",
];

/// The largest size of each kind a config.json may give: far beyond any model (the largest have
/// ~130 layers, widths of ~25,000 and vocabularies of ~260,000), near enough that a number from a
/// damaged or hostile file is refused before anything is allocated for it.
const SIZE_LIMITS: [(&str, u64); 11] = [
    ("num_hidden_layers", 1 << 10),
    ("hidden_size", 1 << 16),
    ("intermediate_size", 1 << 18),
    ("num_attention_heads", 1 << 10),
    ("num_key_value_heads", 1 << 10),
    ("head_dim", 1 << 12),
    ("vocab_size", 1 << 22),
    ("type_vocab_size", 1 << 16),
    ("max_position_embeddings", 1 << 24),
    ("num_latents_value", 1 << 16),
    ("latent_dim", 1 << 16),
];

/// Refuses a size beyond [`SIZE_LIMITS`] in `config.json` (or its `text_config`), naming the key.
fn check_sizes(path: &Path, value: &serde_json::Value) -> Result<()> {
    for config in [Some(value), value.get("text_config")]
        .into_iter()
        .flatten()
    {
        for (key, limit) in SIZE_LIMITS {
            if let Some(n) = config.get(key).and_then(serde_json::Value::as_u64)
                && n > limit
            {
                return Err(Error::format(
                    path,
                    format!("{key}: {n} is more than {limit}, beyond any model this reads"),
                ));
            }
        }
    }
    Ok(())
}

impl ModelConfig {
    /// Reads `config.json`, detecting the family from `model_type` (or
    /// `architectures`; BERT where neither says).
    pub fn read(path: &Path) -> Result<Self> {
        let value: serde_json::Value = crate::config::read_json(path)?;
        check_sizes(path, &value)?;
        let model_type = value.get("model_type").and_then(serde_json::Value::as_str);
        let architecture = value
            .get("architectures")
            .and_then(serde_json::Value::as_array)
            .and_then(|a| a.first())
            .and_then(serde_json::Value::as_str);
        match (model_type, architecture) {
            (Some("qwen3"), _) | (None, Some("Qwen3Model" | "Qwen3ForCausalLM")) => {
                Ok(Self::Qwen3(Qwen3Config::parse(path, value, false)?))
            }
            (Some("bidirectional_pplx_qwen3"), _) => {
                Ok(Self::Qwen3(Qwen3Config::parse(path, value, true)?))
            }
            (Some("gemma3_text"), _) => Ok(Self::Gemma3(Gemma3Config::parse(path, value)?)),
            (Some("mistral"), _) => Ok(Self::Mistral(MistralConfig::parse(path, value)?)),
            (Some("nvembed"), _) => Ok(Self::NvEmbed(NvEmbedConfig::parse(path, value)?)),
            (Some("gemma3"), _) => {
                // The multimodal wrapper: the text decoder's config is nested.
                let text = value.get("text_config").cloned().ok_or_else(|| {
                    Error::format(path, "text_config: a gemma3 model needs one".to_owned())
                })?;
                Ok(Self::Gemma3(Gemma3Config::parse(path, text)?))
            }
            (Some(t), _) if BERT_TYPES.contains(&t) => {
                Ok(Self::Bert(BertConfig::parse(path, value)?))
            }
            (None, _) => Ok(Self::Bert(BertConfig::parse(path, value)?)),
            (Some(other), _) => Err(Error::format(
                path,
                format!(
                    "model_type: {other:?} is not a supported architecture (supported: {})",
                    SUPPORTED_TYPES.join(", ")
                ),
            )),
        }
    }

    /// The family, in words.
    pub fn family(&self) -> &'static str {
        match self {
            Self::Bert(_) => "bert",
            Self::Qwen3(_) => "qwen3",
            Self::Gemma3(_) => "gemma3",
            Self::Mistral(_) => "mistral",
            Self::NvEmbed(_) => "nvembed",
        }
    }

    /// Width of the final states.
    pub fn hidden_size(&self) -> usize {
        match self {
            Self::Bert(c) => c.hidden_size,
            Self::Qwen3(c) => c.hidden_size,
            Self::Gemma3(c) => c.hidden_size,
            Self::Mistral(c) => c.hidden_size,
            Self::NvEmbed(c) => c.mistral.hidden_size,
        }
    }

    /// Rows of the token-embedding matrix.
    pub fn vocab_size(&self) -> usize {
        match self {
            Self::Bert(c) => c.vocab_size,
            Self::Qwen3(c) => c.vocab_size,
            Self::Gemma3(c) => c.vocab_size,
            Self::Mistral(c) => c.vocab_size,
            Self::NvEmbed(c) => c.mistral.vocab_size,
        }
    }

    /// Token types the model knows (1: none).
    pub fn type_vocab_size(&self) -> usize {
        match self {
            Self::Bert(c) => c.type_vocab_size,
            Self::Qwen3(_) | Self::Gemma3(_) | Self::Mistral(_) | Self::NvEmbed(_) => 1,
        }
    }

    /// The longest input the model's positions allow.
    pub fn max_input_length(&self) -> usize {
        match self {
            Self::Bert(c) => c.max_input_length(),
            Self::Qwen3(c) => c.max_position_embeddings,
            Self::Gemma3(c) => c.max_position_embeddings,
            Self::Mistral(c) => c.max_position_embeddings,
            Self::NvEmbed(c) => c.mistral.max_position_embeddings,
        }
    }

    /// The pooling that fits where the directory names none: the mean for
    /// encoders and bidirectional decoders, the last token for causal ones.
    pub fn default_pooling(&self) -> Pooling {
        match self {
            Self::Bert(_) => Pooling::Mean,
            Self::Qwen3(c) if c.bidirectional => Pooling::Mean,
            Self::Gemma3(c) if c.bidirectional => Pooling::Mean,
            Self::NvEmbed(_) => Pooling::Mean,
            Self::Qwen3(_) | Self::Gemma3(_) | Self::Mistral(_) => Pooling::LastToken,
        }
    }

    /// A decoder's shape and arithmetic, and where its weights sit.
    fn decoder(&self) -> Option<(decoder::Spec, &'static [&'static str])> {
        match self {
            Self::Bert(_) => None,
            Self::Qwen3(c) => Some((c.spec(), &qwen3::PREFIXES)),
            Self::Gemma3(c) => Some((c.spec.clone(), &gemma3::PREFIXES)),
            Self::Mistral(c) => Some((c.spec.clone(), &mistral::PREFIXES)),
            Self::NvEmbed(c) => Some((c.mistral.spec.clone(), &nvembed::PREFIXES)),
        }
    }
}

/// Loads `config`'s weights on the engine `backend` asks for, with the LoRA
/// adapter of `task` merged where the model has adapters and the candle
/// engine's attention `kernel` (or its default); returns the model and
/// where it runs, in words (device, dtype and attention kernel).
pub(crate) fn load(
    config: &ModelConfig,
    files: &ModelFiles,
    backend: Backend,
    precision: Precision,
    kernel: Option<AttentionKernel>,
    task: Option<&str>,
) -> Result<(Box<dyn Model>, String)> {
    let (plan, precision_note) = Plan::for_precision(precision)?;
    let decoder = config.decoder();
    let adapters = lora::tasks(&files.dir);
    let lora = match (task, adapters.is_empty(), &decoder) {
        (Some(task), _, Some(_)) => Some(lora::Lora::open(&files.dir, task)?),
        // The official registry selects `retrieval` (vLLM's default too).
        (None, false, Some(_)) => Some(lora::Lora::open(&files.dir, "retrieval")?),
        (Some(task), _, None) => {
            return Err(Error::Invalid(format!(
                "{}: task {task:?}: a {} model has no LoRA adapters",
                files.dir.display(),
                config.family()
            )));
        }
        _ => None,
    };
    let weights = match &decoder {
        Some((spec, prefixes)) => Some((
            spec,
            Weights::open(&files.weights, prefixes, decoder::EMBEDDINGS)?,
        )),
        None => None,
    };
    let native = || -> Result<(Box<dyn Model>, String)> {
        let model: Box<dyn Model> = match (config, &weights) {
            (ModelConfig::Bert(c), _) => Box::new(bert::NativeBert::load(files, c, plan)?),
            (_, Some((spec, w))) => {
                let mut model = decoder::NativeDecoder::load(w, spec, plan, lora.as_ref())?;
                if let ModelConfig::NvEmbed(c) = config {
                    model.latent = Some(Box::new(nvembed::LatentPooler::load(w, &c.latent, plan)?));
                }
                Box::new(model)
            }
            (_, None) => unreachable!("decoders have weights"),
        };
        let threads = rayon::current_num_threads();
        // Where the CPU has AMX but this process may not use it, say why.
        let level = match engine::isa::amx_refused() {
            Some(why) => format!("{} (no amx: {why})", engine::isa::active()),
            None => engine::isa::active().to_string(),
        };
        Ok((
            model,
            format!("cpu (native, {precision_note}, {level}, {threads} threads)"),
        ))
    };
    // The candle engine computes in the precision's dtype, on the CPU too
    // (where bf16 is slow, but checks the graph); int8 is the native
    // engine's only, and the description says f32 ran.
    let dtype = match precision {
        Precision::Bf16 => candle_core::DType::BF16,
        _ => candle_core::DType::F32,
    };
    let asked = kernel;
    let kernel = asked.unwrap_or_else(|| AttentionKernel::default_for(backend, precision));
    let candle = |device: &candle_core::Device| -> Result<(Box<dyn Model>, String)> {
        let head_dim = match (config, &weights) {
            (ModelConfig::Bert(c), _) => c.head_size(),
            (_, Some((spec, _))) => spec.head_dim,
            (_, None) => unreachable!("decoders have weights"),
        };
        // Refused before any weight loads; where none was asked for and flash
        // cannot run (a GPU its kernels were not compiled for), exact runs and
        // the description says why.
        let (kernel, why) = match varlen::check_kernel(kernel, device, dtype, head_dim) {
            Ok(kernel) => (kernel, String::new()),
            Err(e) if asked.is_none() => (AttentionKernel::Exact, format!(": {e}")),
            Err(e) => return Err(e),
        };
        let model: Box<dyn Model> = match (config, &weights) {
            (ModelConfig::Bert(c), _) => {
                Box::new(bert::CandleBert::load(files, c, device, dtype, kernel)?)
            }
            (_, Some((spec, w))) => {
                let mut model = decoder::CandleDecoder::load(
                    files,
                    w,
                    spec,
                    device,
                    dtype,
                    kernel,
                    lora.as_ref(),
                )?;
                if let ModelConfig::NvEmbed(c) = config {
                    model.latent = Some(Box::new(nvembed::CandleLatent::load(
                        files, w, &c.latent, device, dtype,
                    )?));
                }
                Box::new(model)
            }
            (_, None) => unreachable!("decoders have weights"),
        };
        let dtype = match precision {
            Precision::Int8 => "f32: int8 runs on the native engine only".to_owned(),
            _ => format!("{dtype:?}").to_lowercase(),
        };
        Ok((model, format!("candle, {dtype}, {kernel} attention{why}")))
    };
    if backend == Backend::Native && asked == Some(AttentionKernel::Flash) {
        return Err(Error::Invalid(
            "attention kernel flash: it runs on the candle engine (--backend cuda)".to_owned(),
        ));
    }
    let (model, device) = match backend {
        Backend::Native => native()?,
        Backend::Candle => {
            let (model, what) = candle(&candle_core::Device::Cpu)?;
            (model, format!("cpu ({what})"))
        }
        Backend::Cuda => match candle_core::Device::new_cuda(0) {
            Ok(device) => {
                let warm = warm_up(&device);
                let (model, what) = candle(&device)?;
                warm.finish();
                (model, format!("cuda:0 ({what})"))
            }
            Err(e) if asked == Some(AttentionKernel::Flash) => {
                return Err(Error::Invalid(format!(
                    "attention kernel flash: no CUDA device could be used ({e})"
                )));
            }
            Err(e) => {
                // Without the `cuda` feature candle's stand-in device answers
                // that CUDA support is not compiled in.
                let (model, device) = native()?;
                (
                    model,
                    format!("{device}: no GPU used, no CUDA device could be used ({e})"),
                )
            }
        },
    };
    match &lora {
        Some(lora) => {
            lora.check_all_merged()?;
            Ok((model, format!("{device}, LoRA task {:?}", lora.task())))
        }
        None => Ok((model, device)),
    }
}

/// The position in each sequence whose state pooling keeps, where it keeps
/// one (CLS after the skipped prompt, or the last token); `None` for the
/// mean. A forward pass needs the last layer's attention output and
/// feed-forward for those rows only.
pub(crate) fn picks(lengths: &[usize], pool: Pool) -> Option<Vec<usize>> {
    let pick = |n: usize| match pool.pooling {
        Pooling::Mean => None,
        Pooling::Cls => Some(pool.skip.min(n.saturating_sub(1))),
        Pooling::LastToken => Some(n.saturating_sub(1)),
    };
    lengths.iter().map(|&n| pick(n)).collect()
}

/// Moves row `start(s) + picks[s]` of each sequence `s` of `xs` (rows of
/// `width`, sequences of `lengths` laid end to end) to row `s`.
pub(crate) fn gather_picked(xs: &mut [f32], width: usize, lengths: &[usize], picks: &[usize]) {
    let mut start = 0;
    for (s, (&len, &pick)) in lengths.iter().zip(picks).enumerate() {
        // Row s is at or before every row still to be read (s ≤ start).
        let row = start + pick;
        xs.copy_within(row * width..(row + 1) * width, s * width);
        start += len;
    }
}

/// Pools token states laid end to end (row `Σ lengths[..s] + t` is token t of
/// sequence s) into one vector per sequence.
pub(crate) fn pool_states(states: &[f32], lengths: &[usize], dim: usize, pool: Pool) -> Vec<f32> {
    let mut out = vec![0.0f32; lengths.len() * dim];
    let mut row = 0;
    for (s, &len) in lengths.iter().enumerate() {
        let target = &mut out[s * dim..(s + 1) * dim];
        let state = |t: usize| &states[(row + t) * dim..(row + t + 1) * dim];
        let first = pool.skip.min(len.saturating_sub(1));
        match pool.pooling {
            Pooling::Cls => target.copy_from_slice(state(first)),
            Pooling::LastToken => target.copy_from_slice(state(len.saturating_sub(1))),
            Pooling::Mean => {
                let from = pool.skip.min(len);
                for t in from..len {
                    for (o, v) in target.iter_mut().zip(state(t)) {
                        *o += v;
                    }
                }
                let n = (len - from).max(1) as f32;
                for o in target.iter_mut() {
                    *o /= n;
                }
            }
        }
        row += len;
    }
    out
}

/// The JIT compilation of candle's kernels on a CUDA device, started in the
/// background while the weights load.
///
/// The registry's candle-kernels ships its element-wise, reduction and
/// indexing kernels as PTX for one compute capability; the driver compiles
/// each module the first time it is loaded (about 18 s on an H200 for the
/// modules a model uses, one after another, under candle's lock) and caches
/// the result on disk (`~/.nv/ComputeCache`, or `CUDA_CACHE_PATH`). Loading
/// the modules here, each on its own thread, fills that cache in parallel,
/// so candle's own loads find them compiled. The build of
/// `scripts/build-cuda.sh` ships them as fatbins with SASS for the common
/// GPUs (sm_80 to sm_90), which load without compiling: there this only
/// matters on a GPU newer than those (their PTX).
struct WarmUp(Vec<std::thread::JoinHandle<()>>);

impl WarmUp {
    /// Waits for the compilation (a load that raced it would compile again).
    fn finish(self) {
        for handle in self.0 {
            // A failed warm-up only costs time: candle compiles on demand.
            let _ = handle.join();
        }
    }
}

#[cfg(feature = "cuda")]
fn warm_up(device: &candle_core::Device) -> WarmUp {
    let Ok(cuda) = device.as_cuda_device() else {
        return WarmUp(Vec::new());
    };
    let context = cuda.cuda_stream().context().clone();
    // The modules the graphs use (not conv, quantized or sort).
    let modules = [
        candle_kernels::AFFINE,
        candle_kernels::BINARY,
        candle_kernels::CAST,
        candle_kernels::FILL,
        candle_kernels::INDEXING,
        candle_kernels::REDUCE,
        candle_kernels::TERNARY,
        candle_kernels::UNARY,
    ];
    WarmUp(
        modules
            .into_iter()
            .map(|module| {
                let context = context.clone();
                std::thread::spawn(move || {
                    let _ = context.load_module(image(module.ptx()));
                })
            })
            .collect(),
    )
}

/// A module as the driver takes it: PTX text from the registry's candle-kernels, a fatbin from
/// the build of `scripts/build-cuda.sh` (its `Module::ptx` returns cudarc's `Ptx` already).
#[cfg(feature = "cuda")]
fn image(module: impl Into<cudarc::nvrtc::Ptx>) -> cudarc::nvrtc::Ptx {
    module.into()
}

#[cfg(not(feature = "cuda"))]
fn warm_up(_device: &candle_core::Device) -> WarmUp {
    WarmUp(Vec::new())
}
