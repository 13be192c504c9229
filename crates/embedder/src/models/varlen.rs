//! Unpadded batches on a candle device: the CUDA path, and its check on the
//! CPU (`--backend candle`).
//!
//! The sequences of a batch lie end to end (`Σ len × width` rows, as the
//! native engine lays them), so every linear layer runs on real tokens
//! only. What the layers need is made once per batch, on the device: token
//! positions, cumulative lengths, the gathers between the unpadded rows and
//! a padded view (only where lengths differ), and the bounds of each
//! query's span for each kind of layer (causal or not, window or not); the
//! rotary tables once per model and length ([`RopeTables`]). No layer
//! copies anything from the host.
//!
//! Attention runs one of two kernels ([`AttentionKernel`]):
//! - exact: the padded view, scores materialised with queries in chunks
//!   that bound their memory, a mask built on the device from the span
//!   bounds, softmax (in f32), values. Grouped-query heads share their keys and
//!   values through a reshape of the queries (no copies). Any dtype, any
//!   device: the f32 parity path.
//! - flash: candle-flash-attn's varlen kernels on the unpadded rows (bf16 on
//!   CUDA): causal, sliding windows and grouped-query heads natively.
//!
//! The spans are [`Heads::span`]'s: the native engine's rules, windows
//! included. With picks (CLS or last-token pooling), the last layer attends
//! from one query per sequence.

use std::cell::RefCell;
use std::sync::Mutex;

use candle_core::{D, DType, Device, Tensor};
use rayon::prelude::*;

use super::{Pool, Tokens};
use crate::AttentionKernel;
use crate::config::Pooling;
use crate::error::Error;
use engine::attention::Heads;

/// Attention scores held at once by the exact kernel, in elements (queries
/// are processed in chunks).
const SCORE_BUDGET: usize = 1 << 28;

/// What stands for −∞ in the exact kernel's mask: finite, so that no
/// product with it is NaN; `exp` of it is 0 in every dtype.
const MASKED: f64 = -1e30;

/// A batch of sequences laid end to end on a device.
pub(crate) struct Packed {
    lengths: Vec<usize>,
    total: usize,
    max_len: usize,
    device: Device,
    /// Each token's position in its sequence (u32, `total`).
    positions: Tensor,
    /// Cumulative lengths, `0, len₀, len₀ + len₁, …` (u32, `batch + 1`):
    /// the flash kernel's.
    #[cfg_attr(not(feature = "flash-attn"), allow(dead_code))]
    cumulative: Tensor,
    /// Padded row `s·max_len + t` → its unpadded row (any row of sequence
    /// `s` where `t` is padding), and back; `None` where every sequence
    /// has `max_len` tokens (the padded view is a reshape).
    pad: Option<(Tensor, Tensor)>,
    /// The picked query of each sequence, with its unpadded row
    /// (u32, `batch`).
    picks: Option<(Vec<usize>, Tensor)>,
    /// Span bounds per kind of layer, made at first use.
    bounds: RefCell<Vec<(BoundsKey, Tensor, Tensor)>>,
    /// `0..max_len` (u32, `1 × 1 × max_len`), for the masks.
    keys: Tensor,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BoundsKey {
    causal: bool,
    window: Option<usize>,
    picked: bool,
}

impl Packed {
    /// The batch of `lengths` on `device`; `picks` are the positions
    /// whose states pooling keeps, one per sequence.
    pub(crate) fn new(
        lengths: &[usize],
        picks: Option<&[usize]>,
        device: &Device,
    ) -> candle_core::Result<Self> {
        let b = lengths.len();
        let total: usize = lengths.iter().sum();
        let max_len = lengths.iter().copied().max().unwrap_or(0);
        let u32s = |v: Vec<usize>| -> Vec<u32> { v.into_iter().map(|x| x as u32).collect() };
        let positions: Vec<usize> = lengths.iter().flat_map(|&n| 0..n).collect();
        let mut starts = Vec::with_capacity(b + 1);
        let mut at = 0;
        starts.push(0);
        for &n in lengths {
            at += n;
            starts.push(at);
        }
        let pad = if lengths.iter().all(|&n| n == max_len) {
            None
        } else {
            let mut pad = Vec::with_capacity(b * max_len);
            let mut unpad = Vec::with_capacity(total);
            for (s, &n) in lengths.iter().enumerate() {
                for t in 0..max_len {
                    pad.push(starts[s] + t.min(n.saturating_sub(1)));
                }
                unpad.extend((0..n).map(|t| s * max_len + t));
            }
            Some((
                Tensor::from_vec(u32s(pad), b * max_len, device)?,
                Tensor::from_vec(u32s(unpad), total, device)?,
            ))
        };
        let picks = match picks {
            Some(p) => {
                let rows: Vec<usize> = p.iter().zip(&starts).map(|(&t, &s)| s + t).collect();
                Some((p.to_vec(), Tensor::from_vec(u32s(rows), b, device)?))
            }
            None => None,
        };
        Ok(Self {
            lengths: lengths.to_vec(),
            total,
            max_len,
            device: device.clone(),
            positions: Tensor::from_vec(u32s(positions), total, device)?,
            cumulative: Tensor::from_vec(u32s(starts), b + 1, device)?,
            pad,
            picks,
            bounds: RefCell::new(Vec::new()),
            keys: Tensor::arange(0u32, max_len as u32, device)?.reshape((1, 1, max_len))?,
        })
    }

    /// Tokens in the batch.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// Each token's position in its sequence (u32).
    pub(crate) fn positions(&self) -> &Tensor {
        &self.positions
    }

    /// Rows of `xs` (`total × …`) in the padded view (`batch·max_len × …`).
    fn padded(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match &self.pad {
            Some((pad, _)) => xs.index_select(pad, 0),
            None => Ok(xs.clone()),
        }
    }

    /// The padded view's rows (`batch·max_len × …`) back to the unpadded
    /// rows.
    fn unpadded(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match &self.pad {
            Some((_, unpad)) => xs.index_select(unpad, 0),
            None => Ok(xs.clone()),
        }
    }

    /// The picked rows of `xs` (`total × …`), one per sequence in order.
    pub(crate) fn picked(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        match &self.picks {
            Some((_, rows)) => xs.index_select(rows, 0),
            None => candle_core::bail!("no picks in this batch"),
        }
    }

    /// The bounds `lo ≤ key < hi` of each query's span (u32,
    /// `batch × queries`): of every position, or of the picked ones.
    fn bounds(&self, heads: Heads, picked: bool) -> candle_core::Result<(Tensor, Tensor)> {
        let key = BoundsKey {
            causal: heads.causal,
            window: heads.window,
            picked,
        };
        if let Some((_, lo, hi)) = self.bounds.borrow().iter().find(|(k, _, _)| *k == key) {
            return Ok((lo.clone(), hi.clone()));
        }
        let queries = if picked { 1 } else { self.max_len };
        let mut lo = Vec::with_capacity(self.lengths.len() * queries);
        let mut hi = Vec::with_capacity(lo.capacity());
        for (s, &n) in self.lengths.iter().enumerate() {
            let rows: Vec<usize> = match (&self.picks, picked) {
                (Some((picks, _)), true) => vec![picks[s]],
                _ => (0..queries).collect(),
            };
            for r in rows {
                // Padding rows attend as the last real row (their outputs
                // are dropped).
                let (a, b) = heads.span(r.min(n.saturating_sub(1)), n);
                lo.push(a as u32);
                hi.push(b as u32);
            }
        }
        let shape = (self.lengths.len(), queries);
        let lo = Tensor::from_vec(lo, shape, &self.device)?;
        let hi = Tensor::from_vec(hi, shape, &self.device)?;
        self.bounds.borrow_mut().push((key, lo.clone(), hi.clone()));
        Ok((lo, hi))
    }

    /// Whether the flash kernel computes the picked queries' spans: its
    /// queries align with the end of their sequence, so a picked last token
    /// does, and any query does where the span is the whole sequence.
    fn flash_fits_picks(&self, heads: Heads) -> bool {
        let Some((picks, _)) = &self.picks else {
            return false;
        };
        (!heads.causal && heads.window.is_none())
            || picks.iter().zip(&self.lengths).all(|(&p, &n)| p + 1 == n)
    }

    /// `softmax(scale·Q·Kᵀ + mask)·V` for every sequence and head: `q` is
    /// `total × query heads × dim`, `k` and `v` `total × kv heads × dim`
    /// (contiguous). Returns `total × query heads·dim`, or with `picked`
    /// the picked query of each sequence only (`batch × query heads·dim`).
    pub(crate) fn attend(
        &self,
        kernel: AttentionKernel,
        heads: Heads,
        (q, k, v): (&Tensor, &Tensor, &Tensor),
        picked: bool,
    ) -> candle_core::Result<Tensor> {
        match kernel {
            AttentionKernel::Exact => self.exact(heads, q, k, v, picked),
            AttentionKernel::Flash if !picked || self.flash_fits_picks(heads) => {
                self.flash(heads, q, k, v, picked)
            }
            // The whole layer's attention, then the picked rows.
            AttentionKernel::Flash => self.picked(&self.flash(heads, q, k, v, false)?),
        }
    }

    fn exact(
        &self,
        heads: Heads,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        picked: bool,
    ) -> candle_core::Result<Tensor> {
        let (b, len) = (self.lengths.len(), self.max_len);
        let (nq, nkv, d) = (heads.query, heads.kv, heads.dim);
        let g = nq / nkv;
        let heads_first = |x: &Tensor, n: usize| -> candle_core::Result<Tensor> {
            self.padded(x)?
                .reshape((b, len, n, d))?
                .transpose(1, 2)?
                .contiguous()
        };
        let keys = heads_first(k, nkv)?;
        let values = heads_first(v, nkv)?;
        let kt = keys.t()?;
        // Queries as `batch × kv heads × group × queries × dim`: the heads of
        // a group share one key head.
        let (queries, lq) = if picked {
            (
                self.picked(q)?
                    .reshape((b, 1, nq, d))?
                    .transpose(1, 2)?
                    .contiguous()?,
                1,
            )
        } else {
            (heads_first(q, nq)?, len)
        };
        let queries = queries.reshape((b, nkv, g, lq, d))?;
        let (lo, hi) = self.bounds(heads, picked)?;
        let chunk = (SCORE_BUDGET / (b * nq * len).max(1)).clamp(1, lq.max(1));
        let mut parts = Vec::new();
        let mut c0 = 0;
        while c0 < lq {
            let n = chunk.min(lq - c0);
            let lo = lo.narrow(1, c0, n)?.unsqueeze(2)?;
            let hi = hi.narrow(1, c0, n)?.unsqueeze(2)?;
            let seen = (self.keys.broadcast_ge(&lo)? * self.keys.broadcast_lt(&hi)?)?;
            let mask = seen
                .to_dtype(DType::F32)?
                .affine(-MASKED, MASKED)?
                .reshape((b, 1, 1, n, len))?;
            // The softmax in f32 whatever the dtype (as fused kernels
            // accumulate): candle's CPU softmax sums in the input's dtype.
            let scores = (queries
                .narrow(3, c0, n)?
                .contiguous()?
                .reshape((b, nkv, g * n, d))?
                .matmul(&kt)?
                .to_dtype(DType::F32)?
                * f64::from(heads.scale))?
            .reshape((b, nkv, g, n, len))?
            .broadcast_add(&mask)?;
            let probs = candle_nn::ops::softmax_last_dim(&scores)?.to_dtype(q.dtype())?;
            parts.push(
                probs
                    .reshape((b, nkv, g * n, len))?
                    .matmul(&values)?
                    .reshape((b, nkv, g, n, d))?,
            );
            c0 += n;
        }
        let context = Tensor::cat(&parts, 3)?
            .reshape((b, nq, lq, d))?
            .transpose(1, 2)?
            .contiguous()?
            .reshape((b * lq, nq * d))?;
        if picked {
            Ok(context)
        } else {
            self.unpadded(&context)
        }
    }

    #[cfg(feature = "flash-attn")]
    fn flash(
        &self,
        heads: Heads,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        picked: bool,
    ) -> candle_core::Result<Tensor> {
        // Heads::span's window w: keys within w − 1 of the query.
        let side = heads.window.map(|w| w - 1);
        let left = side;
        let right = if heads.causal { Some(0) } else { side };
        // With picks, one query per sequence (aligned with its end).
        let (queries, rows, starts, max_q) = if picked {
            let b = self.lengths.len();
            let one_each = Tensor::arange(0u32, b as u32 + 1, &self.device)?;
            (self.picked(q)?, b, one_each, 1)
        } else {
            (q.clone(), self.total, self.cumulative.clone(), self.max_len)
        };
        candle_flash_attn::flash_attn_varlen_windowed(
            &queries,
            k,
            v,
            &starts,
            &self.cumulative,
            max_q,
            self.max_len,
            heads.scale,
            left,
            right,
        )?
        .reshape((rows, heads.query * heads.dim))
    }

    #[cfg(not(feature = "flash-attn"))]
    fn flash(
        &self,
        _heads: Heads,
        _q: &Tensor,
        _k: &Tensor,
        _v: &Tensor,
        _picked: bool,
    ) -> candle_core::Result<Tensor> {
        // `check_kernel` refuses the kernel at load in such a build.
        candle_core::bail!("this build has no flash attention (feature flash-attn)")
    }

    /// One pooled f32 vector per sequence, row after row, from the final
    /// states: `total × width`, or the picked rows (`batch × width`).
    pub(crate) fn pool(
        &self,
        states: &Tensor,
        pool: Pool,
        picked: bool,
    ) -> candle_core::Result<Vec<f32>> {
        let states = states.to_dtype(DType::F32)?;
        let pooled = match (pool.pooling, picked) {
            (_, true) => states,
            (Pooling::Cls | Pooling::LastToken, false) => {
                let rows: Vec<u32> = self
                    .lengths
                    .iter()
                    .scan(0usize, |start, &n| {
                        let t = match pool.pooling {
                            Pooling::Cls => pool.skip.min(n.saturating_sub(1)),
                            _ => n.saturating_sub(1),
                        };
                        let row = *start + t;
                        *start += n;
                        Some(row as u32)
                    })
                    .collect();
                let rows = Tensor::from_vec(rows, self.lengths.len(), &self.device)?;
                states.index_select(&rows, 0)?
            }
            (Pooling::Mean, false) => {
                let (b, len) = (self.lengths.len(), self.max_len);
                let width = states.dim(D::Minus1)?;
                let mut weights = Vec::with_capacity(b * len);
                let mut counts = Vec::with_capacity(b);
                for &n in &self.lengths {
                    let from = pool.skip.min(n);
                    weights.extend((0..len).map(|t| f32::from(u8::from(t >= from && t < n))));
                    counts.push((n - from).max(1) as f32);
                }
                let weights = Tensor::from_vec(weights, (b, len, 1), &self.device)?;
                let counts = Tensor::from_vec(counts, (b, 1), &self.device)?;
                self.padded(&states)?
                    .reshape((b, len, width))?
                    .broadcast_mul(&weights)?
                    .sum(1)?
                    .broadcast_div(&counts)?
            }
        };
        pooled.flatten_all()?.to_vec1::<f32>()
    }
}

/// The token ids of a batch laid end to end, on `device`.
pub(crate) fn ids(batch: &[&Tokens], device: &Device) -> candle_core::Result<Tensor> {
    let ids: Vec<u32> = batch.iter().flat_map(|t| t.ids.iter().copied()).collect();
    let n = ids.len();
    Tensor::from_vec(ids, n, device)
}

/// A model's rotary tables on its device, made for the longest batch so
/// far (positions `0..len`; a longer batch makes them anew, at least twice
/// as long), and gathered per batch at each token's position.
pub(crate) struct RopeTables {
    rope: Rope,
    dim: usize,
    dtype: DType,
    device: Device,
    tables: Mutex<Option<(usize, Tensor, Tensor)>>,
}

impl RopeTables {
    pub(crate) fn new(rope: Rope, dim: usize, dtype: DType, device: &Device) -> Self {
        Self {
            rope,
            dim,
            dtype,
            device: device.clone(),
            tables: Mutex::new(None),
        }
    }

    /// `cos` and `sin` at every token of `packed` (`total × dim/2`).
    pub(crate) fn gather(&self, packed: &Packed) -> candle_core::Result<(Tensor, Tensor)> {
        let mut tables = self
            .tables
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let need = packed.max_len.max(1);
        let fresh = match &*tables {
            Some((len, _, _)) if *len >= need => None,
            Some((len, _, _)) => Some(need.max(2 * len)),
            None => Some(need),
        };
        if let Some(len) = fresh {
            let (cos, sin) = rope_tables(self.rope, self.dim, len);
            let half = self.dim / 2;
            let on_device = |v: Vec<f32>| {
                Tensor::from_vec(v, (len, half), &self.device).and_then(|t| t.to_dtype(self.dtype))
            };
            *tables = Some((len, on_device(cos)?, on_device(sin)?));
        }
        let Some((_, cos, sin)) = &*tables else {
            unreachable!("made above")
        };
        Ok((
            cos.index_select(packed.positions(), 0)?,
            sin.index_select(packed.positions(), 0)?,
        ))
    }
}

/// Rotates `x` (`total × heads × dim`) by the gathered tables.
pub(crate) fn rotate(x: &Tensor, (cos, sin): &(Tensor, Tensor)) -> candle_core::Result<Tensor> {
    candle_nn::rotary_emb::rope_thd(&x.unsqueeze(0)?, cos, sin)?.squeeze(0)
}

/// The kernel that runs for `asked` on `device` in `dtype`, or why it
/// cannot: flash needs a CUDA device, a build with it, bf16 (the kernels
/// `scripts/build-cuda.sh` compiles), and a head width it has kernels for.
pub(crate) fn check_kernel(
    kernel: AttentionKernel,
    device: &Device,
    dtype: DType,
    head_dim: usize,
) -> crate::Result<AttentionKernel> {
    if kernel == AttentionKernel::Exact {
        return Ok(kernel);
    }
    let refuse = |why: String| Err(Error::Invalid(format!("attention kernel flash: {why}")));
    if !cfg!(feature = "flash-attn") {
        return refuse(
            "this build has none (build with scripts/build-cuda.sh: features cuda,flash-attn)"
                .to_owned(),
        );
    }
    if !device.is_cuda() {
        return refuse("it runs on CUDA only (--backend cuda)".to_owned());
    }
    if dtype != DType::BF16 {
        return refuse(format!(
            "it runs bf16, not {dtype:?} (--precision bf16; f32 runs the exact kernel)"
        ));
    }
    if !head_dim.is_multiple_of(8) || head_dim > 256 {
        return refuse(format!(
            "no kernel for heads of {head_dim} (multiples of 8 up to 256)"
        ));
    }
    if let (Some(built), Some(gpu)) = (flash_arch(FLASH_BUILT_FOR), compute_capability(device))
        && !sass_runs_on(built, gpu)
    {
        let (major, minor) = gpu;
        return refuse(format!(
            "its kernels are compiled for sm_{built} only (CUDA_COMPUTE_CAP of \
             scripts/build-cuda.sh), this GPU is sm_{major}{minor}: rebuild with \
             CUDA_COMPUTE_CAP={major}{minor}, or run the exact kernel"
        ));
    }
    Ok(kernel)
}

/// The compute capability flash attention's kernels were compiled for: the
/// build's `CUDA_COMPUTE_CAP` (which `scripts/build-cuda.sh` sets), as `90`.
/// Unset where candle-flash-attn asked the build machine's GPU.
const FLASH_BUILT_FOR: Option<&str> = option_env!("CUDA_COMPUTE_CAP");

/// `CUDA_COMPUTE_CAP`'s number (`90`, `90a`, `sm_90` → 90).
fn flash_arch(text: Option<&str>) -> Option<u32> {
    let digits: String = text?
        .trim_start_matches("sm_")
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Whether SASS compiled for `built` (`90`) runs on a GPU of capability
/// `(major, minor)`: the same major capability, a minor at least the build's
/// (sm_80 code runs on sm_86 and sm_89, not on sm_90).
fn sass_runs_on(built: u32, (major, minor): (u32, u32)) -> bool {
    built / 10 == major && built % 10 <= minor
}

/// The compute capability of a CUDA device; `None` elsewhere.
fn compute_capability(device: &Device) -> Option<(u32, u32)> {
    #[cfg(feature = "cuda")]
    if let Ok(cuda) = device.as_cuda_device() {
        let (major, minor) = cuda.cuda_stream().context().compute_capability().ok()?;
        return Some((major.try_into().ok()?, minor.try_into().ok()?));
    }
    let _ = device;
    None
}

/// An inference error, named for what a user can change where the GPU ran
/// out of memory.
pub(crate) fn inference_error(e: &candle_core::Error, batch: &[&Tokens]) -> Error {
    let text = e.to_string();
    if text.contains("OUT_OF_MEMORY") || text.contains("out of memory") {
        let tokens: usize = batch.iter().map(|t| t.ids.len()).sum();
        let longest = batch.iter().map(|t| t.ids.len()).max().unwrap_or(0);
        return Error::Inference(format!(
            "out of GPU memory on a batch of {} inputs, {tokens} tokens (longest {longest}): \
             lower the token budget of a batch (--batch-tokens, `batch_tokens` in the config) \
             or the input length (--max-length, `max_length`) ({text})",
            batch.len()
        ));
    }
    Error::Inference(text)
}

/// A rotary embedding: base and linear position scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rope {
    pub(crate) theta: f64,
    /// Positions are divided by it (`rope_type = "linear"`; 1 otherwise).
    pub(crate) factor: f64,
}

/// Rotary tables for positions `0..len`: `cos` and `sin`, `len × head_dim/2`.
///
/// Computed as transformers computes them, so that long inputs agree: the
/// inverse frequencies `1 / θ^(2i/d)` in f32 (divided by the linear
/// factor), each angle the f32 product of position and frequency, and its
/// cosine and sine (of that f32 angle).
pub(crate) fn rope_tables(rope: Rope, head_dim: usize, len: usize) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let theta = rope.theta as f32;
    let factor = rope.factor as f32;
    let inv: Vec<f32> = (0..half)
        .map(|i| 1.0 / theta.powf((2 * i) as f32 / head_dim as f32) / factor)
        .collect();
    let mut cos = vec![0.0f32; len * half];
    let mut sin = vec![0.0f32; len * half];
    cos.par_chunks_mut(half)
        .zip(sin.par_chunks_mut(half))
        .enumerate()
        .for_each(|(p, (c, s))| {
            for ((c, s), &f) in c.iter_mut().zip(s.iter_mut()).zip(&inv) {
                let angle = f64::from(p as f32 * f);
                *c = angle.cos() as f32;
                *s = angle.sin() as f32;
            }
        });
    (cos, sin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_runs_where_its_sass_does() {
        assert_eq!(flash_arch(Some("90")), Some(90));
        assert_eq!(flash_arch(Some("90a")), Some(90));
        assert_eq!(flash_arch(Some("sm_80")), Some(80));
        assert_eq!(flash_arch(Some("native")), None);
        assert_eq!(flash_arch(None), None);
        // Same major capability, minor at least the build's.
        assert!(sass_runs_on(90, (9, 0)));
        assert!(sass_runs_on(80, (8, 6)));
        assert!(sass_runs_on(80, (8, 9)));
        assert!(!sass_runs_on(86, (8, 0)));
        assert!(!sass_runs_on(80, (9, 0)));
        assert!(!sass_runs_on(90, (8, 9)));
        assert!(!sass_runs_on(90, (10, 0)));
        // On the CPU there is no capability to compare: the refusal names the device instead.
        assert_eq!(compute_capability(&Device::Cpu), None);
    }
}
