//! Fused operations with their own backward pass, for the CPU: the
//! attention softmax (scale, additive key mask and softmax in one pass) as a
//! candle custom op. The composed form — differentiable too, but keeping
//! six `[batch, heads, len, len]` tensors alive per layer for the backward
//! pass — stays the path of other devices.

use candle_core::{CpuStorage, CustomOp2, D, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::Result;

/// softmax(scores · scale + bias) over the last dimension; `scores` is
/// `[n, heads, q, k]`, `bias` `[n, 1, 1, k]` (0 or a large negative).
pub fn masked_softmax(scores: &Tensor, bias: &Tensor, scale: f64) -> Result<Tensor> {
    if scores.device().is_cpu() && scores.dtype() == candle_core::DType::F32 {
        let scores = scores.contiguous()?;
        let bias = bias.contiguous()?;
        return Ok(scores.apply_op2(
            &bias,
            MaskedSoftmax {
                scale: scale as f32,
            },
        )?);
    }
    let x = (scores * scale)?.broadcast_add(bias)?;
    Ok(candle_nn::ops::softmax(&x, D::Minus1)?)
}

/// `x ⊙ mask` where `mask` is a constant (dropout's scaled keep-mask). On
/// the CPU a custom op whose backward pass is `grad ⊙ mask` alone: composed
/// as a product, candle's backward pass would also compute (and keep until
/// the end of the pass) a gradient for the mask, as large as `x`.
pub fn masked(x: &Tensor, mask: &Tensor) -> Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 && x.shape() == mask.shape() {
        return Ok(x.contiguous()?.apply_op1(MaskOp {
            mask: mask.contiguous()?,
        })?);
    }
    Ok(x.mul(mask)?)
}

struct MaskOp {
    mask: Tensor,
}

impl candle_core::CustomOp1 for MaskOp {
    fn name(&self) -> &'static str {
        "constant-mask"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(s, l, "input")?;
        let (storage, layout) = self.mask.storage_and_layout();
        let candle_core::Storage::Cpu(storage) = &*storage else {
            candle_core::bail!("constant mask: expected a CPU mask");
        };
        let m = f32_slice(storage, layout, "mask")?;
        let mut out = vec![0f32; x.len()];
        out.par_chunks_mut(4096)
            .zip(x.par_chunks(4096).zip(m.par_chunks(4096)))
            .for_each(|(o, (x, m))| {
                for ((o, x), m) in o.iter_mut().zip(x).zip(m) {
                    *o = x * m;
                }
            });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<Option<Tensor>> {
        Ok(Some(grad.mul(&self.mask)?))
    }
}

fn f32_slice<'a>(s: &'a CpuStorage, l: &Layout, what: &str) -> candle_core::Result<&'a [f32]> {
    match (s, l.contiguous_offsets()) {
        (CpuStorage::F32(v), Some((start, end))) => Ok(&v[start..end]),
        _ => candle_core::bail!("{what}: expected contiguous f32"),
    }
}

struct MaskedSoftmax {
    scale: f32,
}

impl CustomOp2 for MaskedSoftmax {
    fn name(&self) -> &'static str {
        "masked-softmax"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = f32_slice(s1, l1, "scores")?;
        let bias = f32_slice(s2, l2, "bias")?;
        let (n, heads, q, k) = l1.shape().dims4()?;
        if l2.shape().dims() != [n, 1, 1, k] {
            candle_core::bail!(
                "masked softmax: bias {:?} for scores {:?}",
                l2.shape(),
                l1.shape()
            );
        }
        let mut out = vec![0f32; x.len()];
        let per_item = heads * q;
        out.par_chunks_mut(k)
            .zip(x.par_chunks(k))
            .enumerate()
            .for_each(|(row, (y, x))| {
                let b = &bias[(row / per_item) * k..(row / per_item + 1) * k];
                let mut max = f32::NEG_INFINITY;
                for ((y, &x), &b) in y.iter_mut().zip(x).zip(b) {
                    *y = x * self.scale + b;
                    max = max.max(*y);
                }
                let mut sum = 0f32;
                for y in y.iter_mut() {
                    *y = (*y - max).exp();
                    sum += *y;
                }
                let inv = 1.0 / sum;
                for y in y.iter_mut() {
                    *y *= inv;
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _scores: &Tensor,
        _bias: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> candle_core::Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let g = res.apply_op2_no_bwd(&grad, &SoftmaxGrad { scale: self.scale })?;
        Ok((Some(g), None))
    }
}

/// scale · y ⊙ (g − Σ g ⊙ y), row by row.
struct SoftmaxGrad {
    scale: f32,
}

impl CustomOp2 for SoftmaxGrad {
    fn name(&self) -> &'static str {
        "masked-softmax-grad"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let y = f32_slice(s1, l1, "softmax")?;
        let g = f32_slice(s2, l2, "gradient")?;
        let k = l1.shape().dims().last().copied().unwrap_or(1).max(1);
        let mut out = vec![0f32; y.len()];
        out.par_chunks_mut(k)
            .zip(y.par_chunks(k).zip(g.par_chunks(k)))
            .for_each(|(o, (y, g))| {
                let dot: f32 = y.iter().zip(g).map(|(a, b)| a * b).sum();
                for ((o, &y), &g) in o.iter_mut().zip(y).zip(g) {
                    *o = self.scale * y * (g - dot);
                }
            });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn the_fused_softmax_matches_the_composed_one_forward_and_backward() {
        let dev = Device::Cpu;
        let scores =
            Var::from_tensor(&Tensor::randn(0f32, 2.0, (2, 3, 4, 5), &dev).unwrap()).unwrap();
        let mask = Tensor::new(&[[1f32, 1., 1., 0., 0.], [1., 1., 1., 1., 1.]], &dev).unwrap();
        let bias = ((mask - 1.0).unwrap() * 1e30)
            .unwrap()
            .reshape((2, 1, 1, 5))
            .unwrap();
        let weights = Tensor::randn(0f32, 1.0, (2, 3, 4, 5), &dev).unwrap();
        let run = |fused: bool| {
            let y = if fused {
                masked_softmax(scores.as_tensor(), &bias, 0.125).unwrap()
            } else {
                let x = (scores.as_tensor() * 0.125)
                    .unwrap()
                    .broadcast_add(&bias)
                    .unwrap();
                candle_nn::ops::softmax(&x, D::Minus1).unwrap()
            };
            let loss = (y.clone() * &weights).unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            let g = grads
                .get(scores.as_tensor())
                .unwrap()
                .flatten_all()
                .unwrap();
            (
                y.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
                g.to_vec1::<f32>().unwrap(),
            )
        };
        let (y1, g1) = run(true);
        let (y2, g2) = run(false);
        for (a, b) in y1.iter().zip(&y2).chain(g1.iter().zip(&g2)) {
            assert!((a - b).abs() < 1e-6, "{a} vs {b}");
        }
        assert!(g1.iter().any(|g| g.abs() > 1e-4));
    }
}
