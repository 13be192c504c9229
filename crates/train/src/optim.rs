//! AdamW with transformers' Trainer defaults, a linear warm-up and decay
//! schedule and gradient-norm clipping, with state that can be saved and
//! restored exactly (candle's `AdamW` keeps its moments private, so a run
//! could not resume from a checkpoint).

use std::collections::HashMap;

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};

use crate::bert::Param;
use crate::error::{Error, Result};

/// AdamW hyper-parameters (torch's `AdamW` as transformers' Trainer sets it).
#[derive(Debug, Clone, PartialEq)]
pub struct AdamWConfig {
    /// Peak learning rate.
    pub lr: f64,
    /// Decoupled weight decay (not applied to biases and LayerNorm weights).
    pub weight_decay: f64,
    /// β₁.
    pub beta1: f64,
    /// β₂.
    pub beta2: f64,
    /// ε.
    pub eps: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 2e-5,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
        }
    }
}

/// The learning rate of each step: linear warm-up from 0, then linear decay
/// to 0 at the last step (transformers' `get_linear_schedule_with_warmup`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Schedule {
    /// Peak learning rate.
    pub lr: f64,
    /// Warm-up steps.
    pub warmup: u64,
    /// All steps of the run.
    pub total: u64,
}

impl Schedule {
    /// The rate of optimiser step `step` (0-based).
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup {
            return self.lr * step as f64 / self.warmup.max(1) as f64;
        }
        let left = self.total.saturating_sub(step) as f64;
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        self.lr * (left / span).max(0.0)
    }
}

/// First and second moments of each trainable parameter, and the step count.
#[derive(Debug)]
pub struct AdamW {
    config: AdamWConfig,
    /// Steps taken.
    step: u64,
    /// Moments by parameter name.
    moments: HashMap<String, (Tensor, Tensor)>,
}

impl AdamW {
    /// A fresh optimiser for `params` (moments at zero).
    pub fn new(config: AdamWConfig, params: &[Param]) -> Result<Self> {
        let mut moments = HashMap::new();
        for p in params.iter().filter(|p| p.trainable) {
            let zeros = p.var.as_tensor().zeros_like()?;
            moments.insert(p.name.clone(), (zeros.clone(), zeros));
        }
        Ok(Self {
            config,
            step: 0,
            moments,
        })
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// One update at learning rate `lr` with the gradients of `grads`; a
    /// trainable parameter without a gradient is an error (its gradient was
    /// cut somewhere in the graph).
    pub fn step(&mut self, params: &[Param], grads: &GradStore, lr: f64) -> Result<()> {
        self.step += 1;
        let c = &self.config;
        let t = self.step as i32;
        let bias1 = 1.0 - c.beta1.powi(t);
        let bias2_sqrt = (1.0 - c.beta2.powi(t)).sqrt();
        for p in params.iter().filter(|p| p.trainable) {
            let grad = grads.get(p.var.as_tensor()).ok_or_else(|| {
                Error::Invalid(format!("parameter `{}` received no gradient", p.name))
            })?;
            let (m, v) = self
                .moments
                .get_mut(&p.name)
                .ok_or_else(|| Error::Invalid(format!("no optimiser state for `{}`", p.name)))?;
            let mut value = p.var.as_tensor().clone();
            if p.decays() && c.weight_decay != 0.0 {
                value = (value * (1.0 - lr * c.weight_decay))?;
            }
            *m = ((&*m * c.beta1)? + (grad * (1.0 - c.beta1))?)?;
            *v = ((&*v * c.beta2)? + (grad.sqr()? * (1.0 - c.beta2))?)?;
            let denom = ((v.sqrt()? / bias2_sqrt)? + c.eps)?;
            let update = (m.div(&denom)? * (lr / bias1))?;
            p.var.set(&(value - update)?)?;
        }
        Ok(())
    }

    /// The moments and step count, as named tensors (`m.<name>`, `v.<name>`,
    /// `step`) for a checkpoint.
    pub fn state(&self) -> Result<Vec<(String, Tensor)>> {
        let mut out = Vec::with_capacity(2 * self.moments.len() + 1);
        let mut names: Vec<&String> = self.moments.keys().collect();
        names.sort();
        for name in names {
            let (m, v) = &self.moments[name];
            out.push((format!("m.{name}"), m.clone()));
            out.push((format!("v.{name}"), v.clone()));
        }
        let step = Tensor::new(&[self.step as i64], &Device::Cpu)?;
        out.push(("step".to_owned(), step));
        Ok(out)
    }

    /// Restores [`AdamW::state`]; every trainable parameter must have its
    /// moments, of its shape.
    pub fn restore(&mut self, params: &[Param], state: &HashMap<String, Tensor>) -> Result<()> {
        let missing = |name: &str| Error::Invalid(format!("optimiser state has no `{name}`"));
        for p in params.iter().filter(|p| p.trainable) {
            let device = p.var.device();
            let get = |key: String| -> Result<Tensor> {
                let t = state.get(&key).ok_or_else(|| missing(&key))?;
                if t.dims() != p.var.dims() {
                    return Err(Error::Invalid(format!(
                        "optimiser state `{key}` has shape {:?}, the parameter {:?}",
                        t.dims(),
                        p.var.dims()
                    )));
                }
                Ok(t.to_device(device)?)
            };
            let m = get(format!("m.{}", p.name))?;
            let v = get(format!("v.{}", p.name))?;
            self.moments.insert(p.name.clone(), (m, v));
        }
        let step = state.get("step").ok_or_else(|| missing("step"))?;
        let step = match step.flatten_all()?.to_vec1::<i64>()?.as_slice() {
            [one] => *one,
            other => {
                return Err(Error::Invalid(format!(
                    "optimiser state `step` holds {} values, not one",
                    other.len()
                )));
            }
        };
        self.step = u64::try_from(step)
            .map_err(|_| Error::Invalid("optimiser state: negative step".to_owned()))?;
        Ok(())
    }
}

/// Scales the gradients so that their global L2 norm is at most `max_norm`
/// (`torch.nn.utils.clip_grad_norm_`: coefficient max_norm / (norm + 1e-6),
/// capped at 1); returns the norm before clipping.
pub fn clip_grad_norm(params: &[Param], grads: &mut GradStore, max_norm: f64) -> Result<f64> {
    let mut total = 0.0f64;
    for p in params.iter().filter(|p| p.trainable) {
        if let Some(g) = grads.get(p.var.as_tensor()) {
            total += f64::from(g.sqr()?.sum_all()?.to_scalar::<f32>()?);
        }
    }
    let norm = total.sqrt();
    let coef = (max_norm / (norm + 1e-6)).min(1.0);
    if coef < 1.0 {
        for p in params.iter().filter(|p| p.trainable) {
            if let Some(g) = grads.get(p.var.as_tensor()) {
                let scaled = (g * coef)?;
                grads.insert(p.var.as_tensor(), scaled);
            }
        }
    }
    Ok(norm)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_warms_up_then_decays_to_zero() {
        let s = Schedule {
            lr: 1.0,
            warmup: 2,
            total: 6,
        };
        let got: Vec<f64> = (0..7).map(|k| s.lr(k)).collect();
        assert_eq!(got, [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]);
        let flat = Schedule {
            lr: 2.0,
            warmup: 0,
            total: 2,
        };
        assert_eq!((flat.lr(0), flat.lr(1)), (2.0, 1.0));
    }
}
