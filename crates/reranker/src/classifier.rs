//! Cross-encoders with a sequence-classification head on the first token:
//! BERT (`BertForSequenceClassification`: the `bert.*` encoder,
//! `bert.pooler.dense`, `classifier`), as cross-encoder/ms-marco-MiniLM-L-6-v2,
//! and XLM-RoBERTa (`roberta.*`, `classifier.dense`, `classifier.out_proj`), as
//! BAAI/bge-reranker-base. Both compute `out(tanh(dense(h₀)))`. With one
//! label the score is its logit (or its sigmoid, [`Activation::Sigmoid`]);
//! with two labels it is label 1's logit. Pairs are tokenised as
//! sentence-transformers' `CrossEncoder` does (query first, longest-first
//! truncation to the model's maximum length).

use std::path::Path;

use embedder::chat::ChatInputs;
use embedder::{Encoder, Pooling, Tokens, Weights};

use crate::{Activation, Error, Reranker, dot, sigmoid};

/// The classification head on the first token: `out(tanh(dense(h₀)))`.
pub(crate) struct Head {
    /// `hidden × hidden`, row-major (output rows).
    pub(crate) dense_weight: Vec<f32>,
    pub(crate) dense_bias: Vec<f32>,
    /// `labels × hidden`.
    pub(crate) out_weight: Vec<f32>,
    pub(crate) out_bias: Vec<f32>,
    pub(crate) labels: usize,
}

impl Head {
    /// Reads the head of a BERT or XLM-R sequence-classification save.
    fn read(file: &Weights, hidden: usize) -> Result<Self, Error> {
        // (dense, output) tensor name stems of each layout.
        const LAYOUTS: [(&str, &str); 2] = [
            ("bert.pooler.dense", "classifier"),
            ("classifier.dense", "classifier.out_proj"),
        ];
        let path = file.path();
        for (dense, out) in LAYOUTS {
            let Some((shape, out_weight)) = file.find_full(&format!("{out}.weight"))? else {
                continue;
            };
            if shape.len() != 2 || shape[1] != hidden || shape[0] == 0 {
                return Err(Error::Shape {
                    path: path.to_path_buf(),
                    name: format!("{out}.weight"),
                    expected: vec![0, hidden],
                    actual: shape,
                });
            }
            let labels = shape[0];
            let tensor = |name: String, expected: Vec<usize>| -> Result<Vec<f32>, Error> {
                match file.find_full(&name)? {
                    None => Err(Error::MissingTensor {
                        path: path.to_path_buf(),
                        name,
                    }),
                    Some((actual, _)) if actual != expected => Err(Error::Shape {
                        path: path.to_path_buf(),
                        name,
                        expected,
                        actual,
                    }),
                    Some((_, values)) => Ok(values),
                }
            };
            return Ok(Self {
                dense_weight: tensor(format!("{dense}.weight"), vec![hidden, hidden])?,
                dense_bias: tensor(format!("{dense}.bias"), vec![hidden])?,
                out_bias: tensor(format!("{out}.bias"), vec![labels])?,
                out_weight,
                labels,
            });
        }
        Err(Error::format(
            path,
            "no sequence-classification head (neither `classifier.weight` with `bert.pooler.dense`, \
             nor `classifier.dense` with `classifier.out_proj`): this checkpoint is not a cross-encoder \
             (a bi-encoder belongs in the embedder)",
        ))
    }

    /// The logits of one first-token state.
    pub(crate) fn logits(&self, state: &[f32]) -> Vec<f32> {
        let hidden = state.len();
        let pooled: Vec<f32> = self
            .dense_weight
            .chunks_exact(hidden)
            .zip(&self.dense_bias)
            .map(|(row, b)| (dot(row, state) + b).tanh())
            .collect();
        self.out_weight
            .chunks_exact(hidden)
            .zip(&self.out_bias)
            .map(|(row, b)| dot(row, &pooled) + b)
            .collect()
    }
}

/// A loaded cross-encoder with a classification head.
pub struct Classifier {
    encoder: Encoder,
    head: Head,
    activation: Activation,
    /// sentence-transformers' default prompt: before each query, or the
    /// system message of a rendered pair.
    prompt: String,
    /// Pairs rendered through the tokenizer's chat template
    /// (sentence-transformers 6.x's `message` modality).
    chat: Option<ChatInputs>,
}

impl std::fmt::Debug for Classifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Classifier")
            .field("encoder", &self.encoder)
            .field("labels", &self.head.labels)
            .field("activation", &self.activation)
            .finish_non_exhaustive()
    }
}

impl Classifier {
    /// The head of the BERT-family checkpoint in `dir` on its loaded
    /// encoder, checked against the labels its config declares.
    pub(crate) fn new(
        encoder: Encoder,
        dir: &Path,
        activation: Activation,
        prompt: String,
        chat: Option<ChatInputs>,
    ) -> Result<Self, Error> {
        let head = Head::read(&encoder.weights()?, encoder.hidden_size())?;
        let config_path = dir.join("config.json");
        if let Some(declared) = declared_labels(&config_path)?
            && declared != head.labels
        {
            return Err(Error::format(
                &config_path,
                format!(
                    "it declares {declared} labels but the classifier has {} outputs",
                    head.labels
                ),
            ));
        }
        if !(1..=2).contains(&head.labels) {
            return Err(Error::format(
                &config_path,
                format!(
                    "{} labels: a reranker needs 1 (the logit is the score) or 2 (label 1's logit is the score)",
                    head.labels
                ),
            ));
        }
        Ok(Self {
            encoder,
            head,
            activation,
            prompt,
            chat,
        })
    }

    /// The encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// Number of logits per pair (1 or 2).
    pub fn labels(&self) -> usize {
        self.head.labels
    }

    /// What a one-label logit becomes.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// The model's input for each (query, document) pair, after truncation:
    /// the pair rendered through the chat template (one segment), or the
    /// query (after the prompt) and the document as the tokenizer pairs them.
    pub fn tokenize<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        pair_inputs(&self.encoder, self.chat.as_ref(), &self.prompt, pairs)
    }

    /// The chat template pairs are rendered through, where they are.
    pub fn chat(&self) -> Option<&ChatInputs> {
        self.chat.as_ref()
    }

    /// The logits of each pair, [`Classifier::labels`] per pair, in input order.
    pub fn logits<A, B>(
        &self,
        pairs: &[(A, B)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        let inputs = self.tokenize(pairs)?;
        let hidden = self.encoder.hidden_size();
        let states = self
            .encoder
            .encode_pooled(&inputs, Pooling::Cls, 0, progress)?;
        Ok(states
            .chunks_exact(hidden)
            .flat_map(|state| self.head.logits(state))
            .collect())
    }

    /// The score of each pair, from its logits.
    pub fn score<A, B>(
        &self,
        pairs: &[(A, B)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        let logits = self.logits(pairs, progress)?;
        Ok(logits
            .chunks_exact(self.labels())
            .map(|l| match (self.activation, l) {
                (Activation::Sigmoid, [x]) => sigmoid(*x),
                (_, [x]) => *x,
                (_, l) => l[1],
            })
            .collect())
    }
}

impl Reranker for Classifier {
    fn describe(&self) -> String {
        format!(
            "{} (cross-encoder, {} label{}, {}, max {} tokens{}) on {}",
            self.encoder.dir().display(),
            self.labels(),
            if self.labels() == 1 { "" } else { "s" },
            match (self.labels(), self.activation) {
                (1, Activation::Sigmoid) => "sigmoid of the logit",
                (1, Activation::Identity) => "the logit",
                _ => "label 1's logit",
            },
            self.encoder.max_length(),
            crate::chat_words(self.chat.as_ref(), &self.prompt),
            self.encoder.device()
        )
    }

    fn score_pairs(
        &self,
        pairs: &[(&str, &str)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error> {
        self.score(pairs, progress)
    }
}

/// A cross-encoder's input for each (query, document) pair, as
/// sentence-transformers' `CrossEncoder` makes it: the pair rendered through
/// the chat template (`chat`, one segment), or the query (after `prompt`)
/// and the document as the tokenizer pairs them; both cut to the encoder's
/// maximum length. What the reranker scores and `pipeline train` trains on.
pub fn pair_inputs<A, B>(
    encoder: &Encoder,
    chat: Option<&ChatInputs>,
    prompt: &str,
    pairs: &[(A, B)],
) -> Result<Vec<Tokens>, Error>
where
    A: AsRef<str> + Sync,
    B: AsRef<str> + Sync,
{
    if let Some(chat) = chat {
        return Ok(chat
            .tokenize_pairs(encoder.tokenization(), pairs, prompt)?
            .into_iter()
            .map(|ids| Tokens {
                types: vec![0; ids.len()],
                ids,
            })
            .collect());
    }
    if prompt.is_empty() {
        return encoder.tokenize_pairs(pairs);
    }
    let prompted: Vec<(String, &str)> = pairs
        .iter()
        .map(|(q, d)| (format!("{prompt}{}", q.as_ref()), d.as_ref()))
        .collect();
    encoder.tokenize_pairs(&prompted)
}

/// The label count `config.json` declares (`id2label` or `num_labels`).
fn declared_labels(path: &Path) -> Result<Option<usize>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| Error::format(path, e.to_string()))?;
    Ok(value
        .get("id2label")
        .and_then(serde_json::Value::as_object)
        .map(serde_json::Map::len)
        .or_else(|| {
            value
                .get("num_labels")
                .and_then(serde_json::Value::as_u64)
                .map(|n| n as usize)
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_head_is_out_of_tanh_of_dense() {
        let head = Head {
            dense_weight: vec![1.0, 0.0, 0.0, 2.0],
            dense_bias: vec![0.0, 0.5],
            out_weight: vec![1.0, 1.0, -1.0, 0.0],
            out_bias: vec![0.25, 0.0],
            labels: 2,
        };
        let logits = head.logits(&[0.5, -0.25]);
        let (a, b) = (0.5f32.tanh(), 0.0f32.tanh());
        assert!((logits[0] - (a + b + 0.25)).abs() < 1e-6);
        assert!((logits[1] + a).abs() < 1e-6);
    }
}
