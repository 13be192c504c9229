//! The native CPU compute engine of the SkillRet tools: no model knowledge,
//! only the arithmetic that transformer layers are made of.
//!
//! - [`isa`]: the instruction-set level the kernels run at (the CPU's best,
//!   or a cap through `SKILLRET_MAX_ISA`), asked at every dispatch point.
//! - [`tile`]: what the precision kernels share (operand views, the split of
//!   a product into parallel tasks, epilogue pieces, transposes).
//! - The product kernels, one module per arithmetic, each on top of
//!   [`tile`] only: f32 panels below AVX-512 (the `gemm` crate at
//!   AVX-512), [`bf16`] (AVX-512 BF16), [`amx`] (AMX tiles, with a portable
//!   model of the tile unit) and [`int8`] (AVX-512 VNNI, AVX-VNNI, AVX2).
//! - [`kernels`]: the checked f32 matrix product and the row operations
//!   (LayerNorm, RMSNorm, softmax, GELU, SwiGLU, pooling).
//! - [`linear`]: the dense layer on top of the product kernels, with the
//!   per-role [`linear::Plan`] of arithmetic; [`attention`]: tiled
//!   attention with an online softmax over unpadded batches.
//! - [`lanes`]: batches side by side on the thread pool, and the buffers
//!   each keeps between batches.
//!
//! Imports point down that list; nothing here imports the crates above it
//! (`embedder` holds the model families that use it).

pub mod amx;
pub mod attention;
pub mod bf16;
mod error;
mod f32pack;
pub mod int8;
pub mod isa;
pub mod kernels;
pub mod lanes;
pub mod linear;
pub mod rates;
pub mod tile;

pub use error::{Error, Result};
pub use isa::Isa;

/// Arithmetic of the native engine's linear layers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Precision {
    /// f32 throughout (matches sentence-transformers to cosine ≈ 1 − 1e-7).
    #[default]
    F32,
    /// Linear layers in bfloat16 with f32 accumulation, on CPUs with
    /// AVX-512 BF16 (elsewhere f32 is used, and the embedder's device line
    /// says so).
    Bf16,
    /// Linear layers in int8 with i32 accumulation (weights quantised per
    /// output channel at load, activations per token at run time), on CPUs
    /// with AVX2 (`vpdpbusd` where the CPU has AVX-512 VNNI or AVX-VNNI,
    /// else `vpmaddubsw`; the same sums either way); elsewhere f32 is used,
    /// and the embedder's device line says so. The CUDA backend runs f32.
    Int8,
}

impl Precision {
    /// The arithmetic the native engine runs for this precision on this CPU:
    /// itself where the CPU has the instructions, else f32. Caches key
    /// vectors on it, so int8 or bf16 vectors never mix with f32 ones.
    pub fn on_this_cpu(self) -> Self {
        match self {
            Self::Bf16 if !bf16::supported() => Self::F32,
            Self::Int8 if !int8::supported() => Self::F32,
            p => p,
        }
    }
}

/// Entry points for the benchmarks of `examples/` (not a stable API).
#[doc(hidden)]
pub mod bench;
