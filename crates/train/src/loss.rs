//! Training objectives, as sentence-transformers defines them.

use candle_core::{D, DType, Tensor};

use crate::error::{Error, Result};

/// Multiple Negatives Ranking loss (sentence-transformers'
/// `MultipleNegativesRankingLoss`, direction query → document): the cosine
/// similarity of each anchor with every candidate of the batch, times
/// `scale`, and the cross-entropy of picking its own positive.
///
/// `anchors` is `[n, dim]`; `candidates` is `[n·(1 + k), dim]`: the `n`
/// positives first (positive `i` belongs to anchor `i`), then the hard
/// negatives, `n` at a time.
pub fn multiple_negatives_ranking(
    anchors: &Tensor,
    candidates: &Tensor,
    scale: f64,
) -> Result<Tensor> {
    let n = anchors.dims2()?.0;
    let m = candidates.dims2()?.0;
    if n == 0 || m < n || m % n != 0 {
        return Err(Error::Invalid(format!(
            "MNRL needs n anchors and a multiple of n candidates; got {n} and {m}"
        )));
    }
    let scores = (normalize(anchors)?.matmul(&normalize(candidates)?.t()?)? * scale)?;
    let labels = Tensor::arange(0u32, n as u32, anchors.device())?;
    cross_entropy(&scores, &labels)
}

/// Rows scaled to unit length, as `torch.nn.functional.normalize` (norms
/// clamped at 1e-12).
fn normalize(x: &Tensor) -> Result<Tensor> {
    let norm = x
        .sqr()?
        .sum_keepdim(D::Minus1)?
        .sqrt()?
        .clamp(1e-12, f64::INFINITY)?;
    Ok(x.broadcast_div(&norm)?)
}

/// Mean cross-entropy of `logits` `[n, classes]` against class `labels` `[n]`.
pub fn cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    let picked = log_probs.gather(&labels.unsqueeze(1)?, 1)?;
    Ok(picked.neg()?.mean_all()?)
}

/// Binary cross-entropy on logits, averaged (`torch.nn.BCEWithLogitsLoss`,
/// sentence-transformers' `BinaryCrossEntropyLoss`), in the stable form
/// max(x, 0) − x·y + log(1 + e^−|x|).
pub fn binary_cross_entropy(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let labels = labels.to_dtype(DType::F32)?;
    let loss = logits
        .relu()?
        .sub(&logits.mul(&labels)?)?
        .add(&(logits.abs()?.neg()?.exp()? + 1.0)?.log()?)?;
    Ok(loss.mean_all()?)
}

/// Listwise softmax cross-entropy of one query's list: `logits` `[m]` of
/// its candidates, `labels` `[m]` with 1 for each positive; the loss is
/// −log of the softmax mass on the positives (sentence-transformers'
/// `ListNetLoss` with binary labels reduces to this for one positive).
pub fn listwise_softmax(logits: &Tensor, labels: &Tensor) -> Result<Tensor> {
    let labels = labels.to_dtype(DType::F32)?;
    let positives: f32 = labels.sum_all()?.to_scalar()?;
    if positives < 0.5 {
        return Err(Error::Invalid(
            "a listwise loss needs a positive in every list".to_owned(),
        ));
    }
    let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
    // log Σ_pos p = logsumexp over positives of log p.
    let masked = (log_probs + ((labels - 1.0)? * 1e30)?)?;
    let max = masked.max_keepdim(D::Minus1)?.detach();
    let lse = (masked
        .broadcast_sub(&max)?
        .exp()?
        .sum_keepdim(D::Minus1)?
        .log()?
        + max)?;
    Ok(lse.neg()?.mean_all()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn binary_cross_entropy_matches_the_formula() {
        let dev = Device::Cpu;
        let x = Tensor::new(&[2.0f32, -1.0, 0.0, 40.0], &dev).unwrap();
        let y = Tensor::new(&[1.0f32, 0.0, 1.0, 0.0], &dev).unwrap();
        let got = binary_cross_entropy(&x, &y)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
        let want = (-(sig(2.0)).ln() - (1.0 - sig(-1.0)).ln() - sig(0.0).ln() + 40.0) / 4.0;
        assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
    }

    #[test]
    fn listwise_is_minus_log_of_the_positive_mass() {
        let dev = Device::Cpu;
        let x = Tensor::new(&[2.0f32, -1.0, 0.5, 1.0], &dev).unwrap();
        let y = Tensor::new(&[1.0f32, 0.0, 1.0, 0.0], &dev).unwrap();
        let got = listwise_softmax(&x, &y)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let e: Vec<f64> = [2.0f64, -1.0, 0.5, 1.0].iter().map(|v| v.exp()).collect();
        let want = -((e[0] + e[2]) / e.iter().sum::<f64>()).ln();
        assert!((f64::from(got) - want).abs() < 1e-5, "{got} vs {want}");
        // Gradients reach the logits.
        let v = candle_core::Var::from_tensor(&x).unwrap();
        let grads = listwise_softmax(v.as_tensor(), &y)
            .unwrap()
            .backward()
            .unwrap();
        let g: Vec<f32> = grads.get(v.as_tensor()).unwrap().to_vec1().unwrap();
        assert!(g[1] > 0.0 && g[3] > 0.0 && g[0] < 0.0, "{g:?}");
        let none = Tensor::new(&[0.0f32, 0.0, 0.0, 0.0], &dev).unwrap();
        assert!(listwise_softmax(&x, &none).is_err());
    }

    #[test]
    fn mnrl_is_the_cross_entropy_of_scaled_cosines() {
        let dev = Device::Cpu;
        let a = Tensor::new(&[[1.0f32, 0.0], [0.0, 2.0]], &dev).unwrap();
        let c = Tensor::new(&[[1.0f32, 1.0], [0.0, 1.0], [-1.0, 0.0], [3.0, 0.0]], &dev).unwrap();
        let got = multiple_negatives_ranking(&a, &c, 20.0)
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        let cos = [
            [0.5f64.sqrt(), 0.0, -1.0, 1.0],
            [0.5f64.sqrt(), 1.0, 0.0, 0.0],
        ];
        let ce = |row: &[f64; 4], i: usize| {
            let lse = row.iter().map(|s| (20.0 * s).exp()).sum::<f64>().ln();
            lse - 20.0 * row[i]
        };
        let want = (ce(&cos[0], 0) + ce(&cos[1], 1)) / 2.0;
        assert!((f64::from(got) - want).abs() < 1e-4, "{got} vs {want}");
    }
}
