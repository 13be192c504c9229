//! The dense layer of the native engine: `out = residual + bias + x·Wᵀ` on
//! every token of a batch at once, with the bias and the residual folded into
//! the product's destination. The weight is kept as stored (`outputs ×
//! inputs`): the `gemm` crate reads it transposed in place (f32), or
//! [`Linear::prepare`] packs it for the AVX-512 BF16 kernel ([`crate::bf16`])
//! or quantises it for the int8 kernels ([`crate::int8`]).

use rayon::prelude::*;

use crate::kernels::{self, ROW_BLOCK, matmul};
use crate::lanes::sized;
use crate::tile::{Post, View};

impl From<crate::Precision> for Arithmetic {
    fn from(precision: crate::Precision) -> Self {
        match precision {
            crate::Precision::F32 => Self::F32,
            crate::Precision::Bf16 => Self::Bf16,
            crate::Precision::Int8 => Self::Int8,
        }
    }
}

/// The role of a linear layer in a transformer block, as [`Plan`] tells them
/// apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Query, key and value (one stacked product).
    AttentionIn,
    /// The attention's output projection.
    AttentionOut,
    /// The feed-forward block's first product (BERT's intermediate, Qwen3's
    /// gate and up).
    FeedForwardIn,
    /// The feed-forward block's last product (BERT's output, Qwen3's down).
    FeedForwardOut,
}

impl Role {
    /// The role in words.
    pub fn name(self) -> &'static str {
        match self {
            Self::AttentionIn => "query/key/value",
            Self::AttentionOut => "attention output",
            Self::FeedForwardIn => "feed-forward input",
            Self::FeedForwardOut => "feed-forward output",
        }
    }
}

/// Which arithmetic each linear layer of a model gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    arithmetic: Arithmetic,
    /// The arithmetic of [`INT8_KEPT`]'s layers on the int8 path.
    kept: Arithmetic,
}

impl Plan {
    /// Every layer in `arithmetic`, but for int8, whose [`INT8_KEPT`]
    /// layers run in `kept` (bf16 or f32); the caller checks CPU support.
    pub fn new(arithmetic: Arithmetic, kept: Arithmetic) -> Self {
        Self { arithmetic, kept }
    }

    /// The fastest plan for `precision` on this CPU, and the words that say
    /// what it runs: its own arithmetic where the CPU has the instructions
    /// (else f32, saying why), int8's kept layers in bf16 only where this
    /// CPU's bf16 unit is faster than its f32 FMA ([`crate::rates`]), and
    /// bf16 on a CPU where it is the slower unit runs as asked, with the two
    /// rates in the words.
    pub fn for_precision(precision: crate::Precision) -> crate::Result<(Self, String)> {
        let arithmetic = Arithmetic::from(precision.on_this_cpu());
        Ok(Self::choose(
            precision,
            arithmetic,
            crate::rates::of_this_cpu()?,
            crate::amx::supported(),
        ))
    }

    /// [`Plan::for_precision`] given the arithmetic this CPU runs for
    /// `precision`, its unit rates (`None`: below avx2) and whether bf16 and
    /// int8 products run on AMX tiles (the words name where they run,
    /// whatever rates were given).
    fn choose(
        precision: crate::Precision,
        arithmetic: Arithmetic,
        rates: Option<crate::rates::UnitRates>,
        tiles: bool,
    ) -> (Self, String) {
        use crate::Precision;
        let isa = crate::isa::active();
        let missing = |what: &str, needs: &str| {
            if isa < crate::isa::Isa::detected() {
                format!(
                    "f32: {what} needs {needs}, capped at {isa} by {}",
                    crate::isa::ENV
                )
            } else {
                format!("f32: this CPU has no {needs} for {what}")
            }
        };
        let slower = rates
            .and_then(|r| r.bf16_slower())
            .map(|(bf16, f32)| format!("bf16 {bf16:.1} against f32 {f32:.1} GOP/s per thread"));
        let kept = match rates {
            Some(r) if r.bf16_faster() => Arithmetic::Bf16,
            _ => Arithmetic::F32,
        };
        let plan = Self::new(arithmetic, kept);
        // bf16 and int8 run on AMX's tiles at the amx level.
        let amx = rates.and_then(|r| r.amx).filter(|_| tiles);
        let bf16_name = if tiles { "bf16 on amx" } else { "bf16" };
        let note = match (precision, arithmetic) {
            (Precision::Bf16, Arithmetic::F32) => missing("bf16", "AVX-512 BF16"),
            (Precision::Int8, Arithmetic::F32) => missing("int8", "AVX2"),
            (_, Arithmetic::Int8) => {
                let kernel = if tiles {
                    "amx"
                } else {
                    crate::int8::Kernel::active().map_or("?", |k| k.name())
                };
                let kept: Vec<String> = INT8_KEPT
                    .iter()
                    .map(|role| match plan.of(*role) {
                        Arithmetic::Bf16 => format!("{} in {bf16_name}", role.name()),
                        a => format!("{} in {a:?}", role.name()).to_lowercase(),
                    })
                    .collect();
                match slower {
                    Some(rates) => format!(
                        "int8 on {kernel} ({}; bf16 is slower here: {rates})",
                        kept.join(", ")
                    ),
                    None => format!("int8 on {kernel} ({})", kept.join(", ")),
                }
            }
            (_, Arithmetic::Bf16) => match slower {
                Some(rates) => format!("bf16 as asked, though slower here than f32: {rates}"),
                None => bf16_name.to_owned(),
            },
            // Exact f32 where AMX would run bf16: the summary says how much faster.
            (Precision::F32, _) if amx.is_some() => {
                let r = rates.expect("amx comes from the rates");
                format!(
                    "f32 (--precision bf16 would run the products on amx at {:.0}x: {:.1} against \
                     {:.1} GOP/s per thread)",
                    r.bf16().unwrap_or(0.0) / r.f32(),
                    r.bf16().unwrap_or(0.0),
                    r.f32()
                )
            }
            (_, a) => match rates.and_then(|r| Some((r.fma512?, r.fma256, r.wide_fma()))) {
                // At the avx512 level, where 512-bit FMA is no faster than 256-bit.
                Some((wide, narrow, false)) => format!(
                    "f32 on 256-bit FMA: 512-bit is no faster here ({wide:.1} against \
                     {narrow:.1} GOP/s per thread)"
                ),
                _ => format!("{a:?}").to_lowercase(),
            },
        };
        (plan, note)
    }

    /// The arithmetic of layers of `role`.
    pub fn of(&self, role: Role) -> Arithmetic {
        match self.arithmetic {
            Arithmetic::Int8 if INT8_KEPT.contains(&role) => self.kept,
            a => a,
        }
    }
}

/// Layers that int8 quantisation hurts most, kept in bf16 (f32 where the CPU
/// has no bf16) on the int8 path. Measured on all-MiniLM-L6-v2 over 512
/// SkillRet skills (worst cosine to f32): every layer in int8 0.9967; the
/// feed-forward output alone in int8 costs 0.0010 (its input, after GELU, is
/// heavy-tailed, and some of its weight rows reach 38 standard deviations),
/// query/key/value 0.0017 (LayerNorm outliers in its input); keeping these
/// two in bf16 gives 0.9994. Per-group scales (64 inputs) or data-free
/// smoothing did not reach 0.999 with them in int8.
pub const INT8_KEPT: &[Role] = &[Role::AttentionIn, Role::FeedForwardOut];

/// Rows per block of a layer's part after attention where its products run
/// on AMX tiles: each pass over a weight then serves four strips of 32 rows
/// (on the tile unit the weights, not the activations, are the traffic: at
/// 48 rows MiniLM's blocks read 2.6 MB of weights per 340 MFLOP; 128 rows
/// ran MiniLM bf16 7% faster, 256 and 512 slower again).
pub const TILE_BLOCK_ROWS: usize = 128;

/// Tokens per batch at most where a model's products run on AMX tiles (two
/// batches side by side, each half of it): the f32 activations between the
/// products then stay in cache, which the tile unit's pace needs (MiniLM
/// bf16 at 256 tokens: 32-35k tokens/s in batches of 8,192, 38-39k in
/// batches of 1,536-2,048; the Qwen3-0.6B shape at 512 tokens the same).
pub const TILE_BATCH_TOKENS: usize = 2048;

/// A dense layer.
pub struct Linear {
    /// `outputs × inputs`, row-major, until packed.
    weight: Vec<f32>,
    bias: Option<Vec<f32>>,
    inputs: usize,
    outputs: usize,
    packed: Packed,
}

impl std::fmt::Debug for Linear {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let packed = match &self.packed {
            Packed::None => "f32 as stored",
            Packed::Bf16(_) => "bf16 panels",
            Packed::AmxBf16(_) => "bf16 tiles",
            Packed::AmxBf16Gated(_) => "bf16 tiles, gate and up in pairs of panels",
            Packed::AmxInt8(_) => "int8 tiles",
            Packed::Int8(_) => "int8 panels",
            Packed::F32(_) => "f32 panels",
        };
        f.debug_struct("Linear")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("bias", &self.bias.is_some())
            .field("packed", &packed)
            .finish()
    }
}

/// How a feed-forward block's first product ends
/// ([`Linear::forward_activated`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// GELU on each output (exact, or the tanh approximation).
    Gelu { tanh: bool },
    /// SwiGLU: `silu(gate) · up`, the layer's outputs the gate's, then the
    /// up projection's.
    SiluGate,
    /// GeGLU with GELU's tanh form, laid out as [`Activation::SiluGate`].
    GeluTanhGate,
}

impl Activation {
    fn epilogue(self) -> crate::amx::bf16::Epilogue {
        use crate::amx::bf16::Epilogue;
        match self {
            Self::Gelu { tanh } => Epilogue::Gelu { tanh },
            Self::SiluGate => Epilogue::Gated { silu: true },
            Self::GeluTanhGate => Epilogue::Gated { silu: false },
        }
    }

    /// The layer's outputs per hidden value.
    fn inputs_per_output(self) -> usize {
        match self {
            Self::Gelu { .. } => 1,
            Self::SiluGate | Self::GeluTanhGate => 2,
        }
    }
}

/// A feed-forward block's hidden activations between its two products
/// (a buffer kept across calls): f32 rows, or bf16 strips in the tile
/// layout where both products run on AMX tiles.
#[derive(Debug, Default)]
pub struct Hidden {
    /// f32, `tokens × width` (the unfused path).
    values: Vec<f32>,
    /// A gated unit's gate and up outputs (the unfused path).
    gate_up: Vec<f32>,
    /// The first product's input rounded into strips (the fused path).
    input: crate::amx::bf16::Strips,
    /// Its output, as the second product reads it (the fused path).
    tiles: crate::amx::bf16::Strips,
    /// Whether `tiles` holds the activations.
    fused: bool,
}

/// The weight as the product reads it.
enum Packed {
    /// As stored, read transposed by the `gemm` crate (f32).
    None,
    /// Panels of bfloat16 pairs for the AVX-512 BF16 kernel.
    Bf16(crate::bf16::PackedWeight),
    /// bfloat16 in the AMX tile layout.
    AmxBf16(crate::amx::bf16::PackedWeight),
    /// A gated unit's weight (gate, then up) in the AMX tile layout, each 32
    /// gate columns next to their 32 up columns (the bias reordered alike):
    /// read only by [`Linear::forward_activated`].
    AmxBf16Gated(crate::amx::bf16::PackedWeight),
    /// int8 (per-channel scales) in the AMX tile layout.
    AmxInt8(crate::amx::int8::PackedWeight),
    /// Panels of int8 groups (per-channel scales) for an int8 kernel.
    Int8(crate::int8::PackedWeight),
    /// Panels of f32 for the kernels below AVX-512 ([`crate::f32pack`]).
    F32(crate::f32pack::Panels),
}

/// The arithmetic of a linear layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arithmetic {
    /// f32 (the `gemm` crate).
    F32,
    /// bfloat16 products, f32 sums (needs [`crate::bf16::supported`]).
    Bf16,
    /// int8 products (weights per output channel, activations per row), i32
    /// sums (needs [`crate::int8::supported`]).
    Int8,
}

impl Linear {
    /// A layer from its weight as stored (`outputs × inputs`, row-major).
    pub fn new(weight: Vec<f32>, bias: Option<Vec<f32>>, inputs: usize, outputs: usize) -> Self {
        assert_eq!(
            weight.len(),
            inputs * outputs,
            "weight is not outputs × inputs"
        );
        if let Some(b) = &bias {
            assert_eq!(b.len(), outputs, "bias is not outputs wide");
        }
        Self {
            weight,
            bias,
            inputs,
            outputs,
            packed: Packed::None,
        }
    }

    /// Layers over the same inputs stacked into one (their outputs side by
    /// side, in order): one product instead of several.
    pub fn stack(parts: Vec<Linear>) -> Self {
        let inputs = parts[0].inputs;
        assert!(
            parts
                .iter()
                .all(|p| p.inputs == inputs && matches!(p.packed, Packed::None))
        );
        let outputs: usize = parts.iter().map(|p| p.outputs).sum();
        let bias = if parts.iter().any(|p| p.bias.is_some()) {
            Some(
                parts
                    .iter()
                    .flat_map(|p| p.bias.clone().unwrap_or_else(|| vec![0.0; p.outputs]))
                    .collect(),
            )
        } else {
            None
        };
        // Stored row-major by output, so stacking is concatenation.
        let weight = parts.into_iter().flat_map(|p| p.weight).collect();
        Self::new(weight, bias, inputs, outputs)
    }

    /// `out = (residual or 0) + (bias or 0) + x·Wᵀ` for `tokens` rows.
    pub fn forward(&self, x: &[f32], tokens: usize, out: &mut [f32], residual: Option<&[f32]>) {
        self.forward_then(x, tokens, out, residual, None);
    }

    /// [`Linear::forward`], then `post` on the output rows (in blocks of
    /// whole rows, while they are in cache where the kernel allows).
    pub fn forward_then(
        &self,
        x: &[f32],
        tokens: usize,
        out: &mut [f32],
        residual: Option<&[f32]>,
        post: Option<&Post>,
    ) {
        let out = &mut out[..tokens * self.outputs];
        let x = &x[..tokens * self.inputs];
        let residual = residual.map(|r| &r[..out.len()]);
        let bias = self.bias.as_deref();
        match &self.packed {
            // The packed kernels add the bias and the residual as they store.
            Packed::Bf16(packed) => {
                crate::bf16::matmul(out, x, tokens, packed, bias, residual, post);
            }
            Packed::AmxBf16(packed) => {
                crate::amx::bf16::matmul(out, x, tokens, packed, bias, residual, post);
            }
            Packed::AmxBf16Gated(_) => {
                panic!("a gated layer's columns are paired: Linear::forward_activated reads it")
            }
            Packed::AmxInt8(packed) => {
                crate::amx::int8::matmul(out, x, tokens, packed, bias, residual, post);
            }
            Packed::Int8(packed) => {
                crate::int8::matmul(out, x, tokens, packed, bias, residual, post);
            }
            Packed::F32(packed) => {
                crate::f32pack::matmul(out, x, tokens, packed, bias, residual, post);
            }
            Packed::None => {
                // The `gemm` crate accumulates onto the destination: it starts
                // as residual + bias, row-wise in parallel blocks of rows (the
                // results do not depend on the split).
                let block = self.outputs * ROW_BLOCK;
                let zero_bias;
                let bias = match bias {
                    Some(b) => b,
                    None if residual.is_some() => {
                        zero_bias = vec![0.0; self.outputs];
                        zero_bias.as_slice()
                    }
                    None => &[],
                };
                match residual {
                    Some(r) => out.par_chunks_mut(block).zip(r.par_chunks(block)).for_each(
                        |(rows, res)| {
                            for (row, res) in rows
                                .chunks_exact_mut(self.outputs)
                                .zip(res.chunks_exact(self.outputs))
                            {
                                kernels::add(row, res, bias);
                            }
                        },
                    ),
                    None if bias.is_empty() => {}
                    None => out.par_chunks_mut(block).for_each(|rows| {
                        for row in rows.chunks_exact_mut(self.outputs) {
                            row.copy_from_slice(bias);
                        }
                    }),
                }
                let accumulate = residual.is_some() || !bias.is_empty();
                matmul(
                    out,
                    self.outputs,
                    View::rows(x, tokens, self.inputs, self.inputs),
                    View::transposed(&self.weight, self.inputs, self.outputs, self.inputs),
                    accumulate,
                    true,
                );
                if let Some(post) = post {
                    out.par_chunks_mut(block).for_each(post);
                }
            }
        }
    }

    /// Whether the weight is packed for one of this crate's kernels (which
    /// cost nothing per call); the `gemm` crate packs it on every call.
    pub fn is_packed(&self) -> bool {
        !matches!(self.packed, Packed::None)
    }

    /// The rows a block of a model's layer should hold at least where it
    /// runs through this product: [`TILE_BLOCK_ROWS`] on AMX tiles, else 0.
    pub fn block_rows(&self) -> usize {
        match self.packed {
            Packed::AmxBf16(_) | Packed::AmxBf16Gated(_) | Packed::AmxInt8(_) => TILE_BLOCK_ROWS,
            _ => 0,
        }
    }

    /// [`Linear::prepare`] for a feed-forward block's first product, which
    /// [`Linear::forward_activated`] runs with `activation`: a gated one on
    /// AMX tiles gets its gate and up columns paired, so that the gate is
    /// applied as the sums leave the tiles.
    pub fn prepare_activated(&mut self, arithmetic: Arithmetic, activation: Activation) {
        let epilogue = activation.epilogue();
        let gated = matches!(epilogue, crate::amx::bf16::Epilogue::Gated { .. });
        if gated
            && arithmetic == Arithmetic::Bf16
            && crate::amx::supported()
            && crate::amx::bf16::fuses(self.outputs, epilogue)
        {
            self.packed = Packed::AmxBf16Gated(crate::amx::bf16::PackedWeight::pack_gated(
                &self.weight,
                self.bias.as_deref_mut(),
                self.inputs,
                self.outputs,
            ));
            self.weight = Vec::new();
        } else {
            self.prepare(arithmetic);
        }
    }

    /// `hidden = activation((bias or 0) + x·Wᵀ)` for `tokens` rows: a
    /// feed-forward block's first product, kept as `next` (its second)
    /// reads it ([`Linear::forward_hidden`]). Where both run on AMX tiles in
    /// bf16, the activation is applied as the sums leave the tiles and the
    /// result rounded straight into the strips `next` reads (no f32 hidden
    /// activations in memory, no pass to round them); else in f32, as
    /// [`Linear::forward_then`]. The same bits either way, but for a gated
    /// layer packed for tiles ([`Linear::prepare_activated`]) whose `next`
    /// does not run on them (no plan does that): it gets the activations
    /// as rounded to bf16.
    pub fn forward_activated(
        &self,
        x: &[f32],
        tokens: usize,
        activation: Activation,
        hidden: &mut Hidden,
        next: &Linear,
    ) {
        let x = &x[..tokens * self.inputs];
        let bias = self.bias.as_deref();
        let epilogue = activation.epilogue();
        let width = self.outputs / activation.inputs_per_output();
        let tiles_next = matches!(next.packed, Packed::AmxBf16(_));
        let gated = matches!(epilogue, crate::amx::bf16::Epilogue::Gated { .. });
        let tiles = match &self.packed {
            Packed::AmxBf16Gated(packed) => {
                assert!(
                    gated,
                    "a gated layer's columns are paired: run with {activation:?}"
                );
                Some(packed)
            }
            Packed::AmxBf16(packed)
                if !gated && tiles_next && crate::amx::bf16::fuses(self.outputs, epilogue) =>
            {
                Some(packed)
            }
            _ => None,
        };
        hidden.fused = false;
        match tiles {
            Some(packed) => {
                hidden.input.round(x, tokens, self.inputs);
                crate::amx::bf16::matmul_into(
                    &mut hidden.tiles,
                    &hidden.input,
                    packed,
                    bias,
                    epilogue,
                );
                if tiles_next {
                    hidden.fused = true;
                } else {
                    let values = hidden.tiles.to_f32();
                    hidden.values = values;
                }
            }
            None => {
                let values = sized(&mut hidden.values, tokens * width);
                match activation {
                    Activation::Gelu { tanh } => self.forward_then(
                        x,
                        tokens,
                        values,
                        None,
                        Some(&move |rows: &mut [f32]| kernels::gelu(rows, tanh)),
                    ),
                    Activation::SiluGate | Activation::GeluTanhGate => {
                        let gate_up = sized(&mut hidden.gate_up, tokens * self.outputs);
                        self.forward(x, tokens, gate_up, None);
                        let gate = match activation {
                            Activation::SiluGate => kernels::silu_mul,
                            _ => kernels::gelu_tanh_mul,
                        };
                        values
                            .par_chunks_mut(width * ROW_BLOCK)
                            .zip(gate_up.par_chunks(self.outputs * ROW_BLOCK))
                            .for_each(|(v, g)| gate(g, v, width));
                    }
                }
            }
        }
    }

    /// `out = (residual or 0) + (bias or 0) + hidden·Wᵀ` for `tokens` rows
    /// of what [`Linear::forward_activated`] left in `hidden`.
    pub fn forward_hidden(
        &self,
        hidden: &Hidden,
        tokens: usize,
        out: &mut [f32],
        residual: Option<&[f32]>,
    ) {
        match &self.packed {
            Packed::AmxBf16(packed) if hidden.fused => {
                assert_eq!(hidden.tiles.rows(), tokens, "hidden is not tokens rows");
                let out = &mut out[..tokens * self.outputs];
                let residual = residual.map(|r| &r[..out.len()]);
                crate::amx::bf16::matmul_strips(
                    out,
                    &hidden.tiles,
                    packed,
                    self.bias.as_deref(),
                    residual,
                    None,
                );
            }
            _ => {
                assert!(!hidden.fused, "hidden is in tiles: the layer reads f32");
                self.forward(&hidden.values, tokens, out, residual);
            }
        }
    }

    /// Switches the layer to `arithmetic` (the caller checks CPU support);
    /// unless it is f32, the f32 weight is dropped.
    pub fn prepare(&mut self, arithmetic: Arithmetic) {
        let (inputs, outputs) = (self.inputs, self.outputs);
        self.packed = match arithmetic {
            // The `gemm` crate reads the weight as stored at the AVX-512 level.
            Arithmetic::F32 if crate::rates::f32_in_gemm() => return,
            Arithmetic::F32 => Packed::F32(crate::f32pack::Panels::from_weight(
                &self.weight,
                inputs,
                outputs,
            )),
            Arithmetic::Bf16 if crate::amx::supported() => Packed::AmxBf16(
                crate::amx::bf16::PackedWeight::pack(&self.weight, inputs, outputs),
            ),
            Arithmetic::Bf16 => Packed::Bf16(crate::bf16::PackedWeight::pack(
                &self.weight,
                inputs,
                outputs,
            )),
            Arithmetic::Int8 if crate::amx::supported() => Packed::AmxInt8(
                crate::amx::int8::PackedWeight::pack(&self.weight, inputs, outputs),
            ),
            Arithmetic::Int8 => Packed::Int8(crate::int8::PackedWeight::pack(
                &self.weight,
                inputs,
                outputs,
            )),
        };
        self.weight = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A feed-forward block through `forward_activated` and
    /// `forward_hidden` (fused on AMX tiles) gives the bits of its
    /// products and activation run one after the other.
    #[test]
    fn a_feed_forward_block_fused_or_not_gives_the_same_bits() {
        let arithmetic = if crate::bf16::supported() {
            Arithmetic::Bf16
        } else {
            Arithmetic::F32
        };
        let (tokens, h, width) = (70, 96, 128);
        let x: Vec<f32> = (0..tokens * h)
            .map(|i| ((i * 7919) % 97) as f32 / 25.0 - 2.0)
            .collect();
        let weight = |outputs: usize, inputs: usize, seed: usize| -> Vec<f32> {
            (0..outputs * inputs)
                .map(|i| ((i * 104_729 + seed) % 89) as f32 / 90.0 - 0.5)
                .collect()
        };
        let residual: Vec<f32> = (0..tokens * h).map(|i| (i % 7) as f32 / 4.0).collect();
        for activation in [
            Activation::Gelu { tanh: false },
            Activation::Gelu { tanh: true },
            Activation::SiluGate,
            Activation::GeluTanhGate,
        ] {
            let outputs = width * activation.inputs_per_output();
            let up_weight = weight(outputs, h, 1);
            let bias: Vec<f32> = (0..outputs).map(|o| (o % 11) as f32 / 10.0 - 0.5).collect();
            let mut down = Linear::new(weight(h, width, 2), Some(vec![0.25; h]), width, h);
            down.prepare(arithmetic);
            // One after the other: the product, the activation in f32, the
            // next product (rounding its input as it always does).
            let mut up = Linear::new(up_weight.clone(), Some(bias.clone()), h, outputs);
            up.prepare(arithmetic);
            let mut sums = vec![0.0; tokens * outputs];
            up.forward(&x, tokens, &mut sums, None);
            let mut act = vec![0.0; tokens * width];
            match activation {
                Activation::Gelu { tanh } => {
                    act.copy_from_slice(&sums);
                    kernels::gelu(&mut act, tanh);
                }
                Activation::SiluGate => kernels::silu_mul(&sums, &mut act, width),
                Activation::GeluTanhGate => kernels::gelu_tanh_mul(&sums, &mut act, width),
            }
            let mut want = vec![0.0; tokens * h];
            down.forward(&act, tokens, &mut want, Some(&residual));
            // Through the hidden buffer, twice (the second time reusing it
            // for fewer rows).
            let mut up = Linear::new(up_weight, Some(bias), h, outputs);
            up.prepare_activated(arithmetic, activation);
            let mut hidden = Hidden::default();
            for rows in [tokens, 33] {
                let mut got = vec![f32::NAN; rows * h];
                up.forward_activated(&x, rows, activation, &mut hidden, &down);
                assert_eq!(
                    hidden.fused,
                    crate::amx::supported() && arithmetic == Arithmetic::Bf16,
                    "{activation:?}"
                );
                down.forward_hidden(&hidden, rows, &mut got, Some(&residual[..rows * h]));
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want[..rows * h]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>(),
                    "{activation:?}, {rows} rows"
                );
            }
        }
    }

    #[test]
    fn int8_plans_keep_the_sensitive_layers_out_of_int8() {
        for kept in [Arithmetic::Bf16, Arithmetic::F32] {
            let plan = Plan::new(Arithmetic::Int8, kept);
            assert_eq!(plan.of(Role::AttentionIn), kept);
            assert_eq!(plan.of(Role::FeedForwardOut), kept);
            assert_eq!(plan.of(Role::AttentionOut), Arithmetic::Int8);
            assert_eq!(plan.of(Role::FeedForwardIn), Arithmetic::Int8);
        }
        for role in [Role::AttentionIn, Role::FeedForwardIn] {
            assert_eq!(
                Plan::new(Arithmetic::Bf16, Arithmetic::F32).of(role),
                Arithmetic::Bf16
            );
            assert_eq!(
                Plan::new(Arithmetic::F32, Arithmetic::Bf16).of(role),
                Arithmetic::F32
            );
        }
    }

    #[test]
    fn the_faster_unit_runs_the_kept_layers_and_a_slower_bf16_is_named() {
        use crate::Precision;
        use crate::rates::UnitRates;
        let fast_bf16 = UnitRates::parse("fma256=117,fma512=117,bf16=234").expect("valid");
        let slow_bf16 = UnitRates::parse("fma256=119.4,fma512=238.7,bf16=119.8").expect("valid");
        let (plan, note) = Plan::choose(Precision::Int8, Arithmetic::Int8, Some(fast_bf16), false);
        assert_eq!(plan.of(Role::AttentionIn), Arithmetic::Bf16);
        assert!(
            note.ends_with("(query/key/value in bf16, feed-forward output in bf16)"),
            "{note}"
        );
        let (plan, note) = Plan::choose(Precision::Int8, Arithmetic::Int8, Some(slow_bf16), false);
        assert_eq!(plan.of(Role::AttentionIn), Arithmetic::F32);
        assert_eq!(plan.of(Role::FeedForwardOut), Arithmetic::F32);
        assert_eq!(plan.of(Role::FeedForwardIn), Arithmetic::Int8);
        assert!(
            note.ends_with(
                "(query/key/value in f32, feed-forward output in f32; bf16 is slower here: \
                 bf16 119.8 against f32 238.7 GOP/s per thread)"
            ),
            "{note}"
        );
        // Without a bf16 unit the kept layers are f32, and nothing is compared.
        let avx2 = UnitRates::parse("fma256=120").expect("valid");
        let (plan, note) = Plan::choose(Precision::Int8, Arithmetic::Int8, Some(avx2), false);
        assert_eq!(plan.of(Role::AttentionIn), Arithmetic::F32);
        assert!(!note.contains("slower"), "{note}");
        // bf16 runs as asked either way; only the slower unit is named.
        let (plan, note) = Plan::choose(Precision::Bf16, Arithmetic::Bf16, Some(slow_bf16), false);
        assert_eq!(plan.of(Role::AttentionIn), Arithmetic::Bf16);
        assert_eq!(
            note,
            "bf16 as asked, though slower here than f32: bf16 119.8 against f32 238.7 GOP/s per thread"
        );
        assert_eq!(
            Plan::choose(Precision::Bf16, Arithmetic::Bf16, Some(fast_bf16), false).1,
            "bf16"
        );
        assert_eq!(
            Plan::choose(Precision::F32, Arithmetic::F32, None, false).1,
            "f32"
        );
        // On AMX: bf16 on the tiles, int8's kept layers too, f32 says what bf16 would give.
        let amx = UnitRates::parse("fma256=114.6,fma512=219,bf16=109.9,amx=3700").expect("valid");
        assert_eq!(
            Plan::choose(Precision::Bf16, Arithmetic::Bf16, Some(amx), true).1,
            "bf16 on amx"
        );
        let (plan, note) = Plan::choose(Precision::Int8, Arithmetic::Int8, Some(amx), true);
        assert_eq!(plan.of(Role::AttentionIn), Arithmetic::Bf16);
        assert!(
            note == "int8 on amx (query/key/value in bf16 on amx, feed-forward output in bf16 on amx)",
            "{note}"
        );
        // Given rates without the tile unit's: the words still name where the products run.
        let (_, note) = Plan::choose(Precision::Int8, Arithmetic::Int8, Some(fast_bf16), true);
        assert!(
            note.starts_with("int8 on amx (query/key/value in bf16 on amx"),
            "{note}"
        );
        assert_eq!(
            Plan::choose(Precision::F32, Arithmetic::F32, Some(fast_bf16), true).1,
            "f32 on 256-bit FMA: 512-bit is no faster here (117.0 against 117.0 GOP/s per thread)"
        );
        assert_eq!(
            Plan::choose(Precision::F32, Arithmetic::F32, Some(amx), true).1,
            "f32 (--precision bf16 would run the products on amx at 17x: 3700.0 against 219.0 GOP/s \
             per thread)"
        );
        assert_eq!(
            Plan::choose(Precision::F32, Arithmetic::F32, Some(slow_bf16), false).1,
            "f32"
        );
        assert_eq!(
            Plan::choose(Precision::F32, Arithmetic::F32, Some(fast_bf16), false).1,
            "f32 on 256-bit FMA: 512-bit is no faster here (117.0 against 117.0 GOP/s per thread)"
        );
    }

    #[test]
    fn bias_residual_and_stacking() {
        // W: 2 outputs × 3 inputs.
        let w = vec![1.0, 2.0, 3.0, 0.0, -1.0, 1.0];
        let x = [1.0, 1.0, 1.0, 2.0, 0.0, -1.0];
        {
            let layer = |bias: Option<Vec<f32>>| Linear::new(w.clone(), bias, 3, 2);
            let plain = layer(None);
            let mut out = [f32::NAN; 4];
            plain.forward(&x, 2, &mut out, None);
            assert_eq!(out, [6.0, 0.0, -1.0, -1.0]);
            let biased = layer(Some(vec![0.5, -0.5]));
            biased.forward(&x, 2, &mut out, Some(&[1.0, 1.0, 1.0, 1.0]));
            assert_eq!(out, [7.5, 0.5, 0.5, -0.5]);
            plain.forward(&x, 2, &mut out, Some(&[1.0, 1.0, 1.0, 1.0]));
            assert_eq!(out, [7.0, 1.0, 0.0, 0.0]);
        }
        let stacked = Linear::stack(vec![
            Linear::new(w.clone(), None, 3, 2),
            Linear::new(w.clone(), Some(vec![0.5, -0.5]), 3, 2),
        ]);
        let mut out = [0.0; 8];
        stacked.forward(&x, 2, &mut out, None);
        assert_eq!(out, [6.0, 0.0, 6.5, -0.5, -1.0, -1.0, -0.5, -1.5]);
    }
}
