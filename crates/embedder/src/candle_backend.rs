//! candle's `BertModel` (and `XLMRobertaModel` for RoBERTa-style position
//! numbering): the engine on a CUDA GPU, and a second CPU engine that the
//! native one is checked against.

use candle_core::{D, DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use candle_transformers::models::xlm_roberta::{Config as XlmrConfig, XLMRobertaModel};

use crate::config::{BertConfig, Pooling, read_json};
use crate::encoder::{ModelFiles, Tokens};
use crate::error::{Error, Result};

enum Model {
    Bert(BertModel),
    XlmRoberta(XLMRobertaModel),
}

pub(crate) struct CandleBert {
    model: Model,
    device: Device,
    pad: u32,
}

/// The first CUDA GPU. Without the `cuda` feature candle's stand-in device
/// answers that CUDA support is not compiled in, which the caller reports.
fn gpu() -> Result<Device> {
    Device::new_cuda(0).map_err(|e| Error::Invalid(format!("no CUDA device could be used ({e})")))
}

impl CandleBert {
    pub(crate) fn load(files: &ModelFiles, bert: &BertConfig, cuda: bool) -> Result<Self> {
        let device = if cuda { gpu()? } else { Device::Cpu };
        // candle's Config wants fields that inference does not use and many
        // config.json files leave out; give them their transformers defaults.
        let mut raw: serde_json::Value = read_json(&files.config)?;
        if let Some(map) = raw.as_object_mut() {
            for (key, value) in [
                ("hidden_dropout_prob", serde_json::json!(0.1)),
                ("initializer_range", serde_json::json!(0.02)),
                ("use_cache", serde_json::json!(true)),
            ] {
                map.entry(key).or_insert(value);
            }
        }
        let bytes = crate::error::read_file(&files.weights, "the model's weights")?;
        let vb = VarBuilder::from_buffered_safetensors(bytes, DType::F32, &device)
            .map_err(|e| Error::format(&files.weights, e.to_string()))?;
        let bad_config = |e: serde_json::Error| Error::format(&files.config, e.to_string());
        let bad_weights = |e: candle_core::Error| Error::format(&files.weights, e.to_string());
        let model = if bert.roberta_positions() {
            let config: XlmrConfig = serde_json::from_value(raw).map_err(bad_config)?;
            let vb = if vb.contains_tensor("roberta.embeddings.word_embeddings.weight") {
                vb.pp("roberta")
            } else {
                vb
            };
            Model::XlmRoberta(XLMRobertaModel::new(&config, vb).map_err(bad_weights)?)
        } else {
            let config: Config = serde_json::from_value(raw).map_err(bad_config)?;
            Model::Bert(BertModel::load(vb, &config).map_err(bad_weights)?)
        };
        let pad = u32::try_from(bert.pad_token_id)
            .map_err(|_| Error::format(&files.config, "pad_token_id is too large"))?;
        Ok(Self { model, device, pad })
    }

    /// Pooled vectors of a batch, row after row.
    pub(crate) fn forward_pooled(&self, seqs: &[&Tokens], pooling: Pooling) -> Result<Vec<f32>> {
        self.run(seqs, pooling)
            .map_err(|e| Error::Inference(e.to_string()))
    }

    fn run(&self, seqs: &[&Tokens], pooling: Pooling) -> candle_core::Result<Vec<f32>> {
        let len = seqs.iter().map(|s| s.ids.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(seqs.len() * len);
        let mut types = Vec::with_capacity(seqs.len() * len);
        let mut mask = Vec::with_capacity(seqs.len() * len);
        for seq in seqs {
            let n = seq.ids.len();
            ids.extend(
                seq.ids
                    .iter()
                    .copied()
                    .chain(std::iter::repeat_n(self.pad, len - n)),
            );
            types.extend((0..len).map(|t| seq.types.get(t).copied().unwrap_or(0)));
            mask.extend((0..len).map(|t| u32::from(t < n)));
        }
        let shape = (seqs.len(), len);
        let ids = Tensor::from_vec(ids, shape, &self.device)?;
        let mask = Tensor::from_vec(mask, shape, &self.device)?;
        let types = Tensor::from_vec(types, shape, &self.device)?;
        let states = match &self.model {
            Model::Bert(model) => model.forward(&ids, &types, Some(&mask))?,
            Model::XlmRoberta(model) => model.forward(&ids, &mask, &types, None, None, None)?,
        };
        let pooled = match pooling {
            Pooling::Cls => states.i((.., 0))?,
            Pooling::Mean => {
                let mask = mask.to_dtype(DType::F32)?.unsqueeze(D::Minus1)?;
                let sum = states.broadcast_mul(&mask)?.sum(1)?;
                sum.broadcast_div(&mask.sum(1)?)?
            }
        };
        pooled.flatten_all()?.to_vec1::<f32>()
    }
}
