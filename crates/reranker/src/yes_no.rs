//! Yes/no rerankers on a causal language model (`Qwen3ForCausalLM`:
//! Qwen3-Reranker, SKILLRET-Reranker), scored as the official SkillRet
//! evaluation and Qwen's model card do: the pair is written into the chat
//! template ([`YES_NO_PREFIX`], `<Instruct>: …\n<Query>: …\n<Document>: …`
//! truncated on the right, [`YES_NO_SUFFIX`]; the maximum length counts the
//! whole input) and the score is P(yes) = softmax over the ("no", "yes")
//! logits of the last position, computed from the two rows of the
//! language-model head that matter (equal to σ(h·(w_yes − w_no))).
//!
//! [`Template`] is the protocol alone (what the model reads), shared with
//! the client of a served yes/no reranker, which sends it as text.

use embedder::chat::ChatInputs;
use embedder::{Encoder, Pooling, Tokenization, Tokens};

use crate::{Error, Reranker, dot, sigmoid};

/// The system prompt and user-turn opening of Qwen3-Reranker's template
/// (the official SkillRet evaluation's `Qwen3RankModel`).
pub const YES_NO_PREFIX: &str = "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";

/// The end of the user turn and an empty thinking block, after which the
/// model's next token is "yes" or "no".
pub const YES_NO_SUFFIX: &str = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";

/// The instruction of the official SkillRet evaluation's rerankers.
pub const SKILLRET_INSTRUCTION: &str = "Given a skill search query, judge whether the skill document is relevant and useful for the query";

/// The query part of a yes/no reranker's content.
fn query_part(instruction: &str, query: &str) -> String {
    format!("<Instruct>: {instruction}\n<Query>: {query}\n")
}

/// The text of a yes/no reranker's input between prefix and suffix.
pub fn yes_no_content(instruction: &str, query: &str, document: &str) -> String {
    format!("{}<Document>: {document}", query_part(instruction, query))
}

/// A pair as text for a server that applies no template of its own: the
/// query side (prefix, instruction and query) and the document side
/// (document, suffix), whose tokens joined are the model's input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplatedPair {
    /// Prefix + `<Instruct>: …\n<Query>: …\n` (cut where truncation ends it).
    pub query: String,
    /// `<Document>: …` + suffix.
    pub document: String,
    /// Whether the two sides tokenise to exactly the official input.
    pub exact: bool,
}

/// The yes/no template as the official evaluation applies it.
#[derive(Debug, Clone)]
pub struct Template {
    prefix: Vec<u32>,
    suffix: Vec<u32>,
    instruction: String,
}

impl Template {
    /// The template in the token ids of `tokens`; the instruction defaults
    /// to [`SKILLRET_INSTRUCTION`].
    pub fn new(tokens: &Tokenization, instruction: Option<String>) -> Result<Self, Error> {
        Ok(Self {
            prefix: tokens.token_ids(YES_NO_PREFIX)?,
            suffix: tokens.token_ids(YES_NO_SUFFIX)?,
            instruction: instruction.unwrap_or_else(|| SKILLRET_INSTRUCTION.to_owned()),
        })
    }

    /// The instruction written into each pair.
    pub fn instruction(&self) -> &str {
        &self.instruction
    }

    /// Tokens left for the content within `max_length`.
    fn limit(&self, max_length: usize) -> Result<usize, Error> {
        let template = self.prefix.len() + self.suffix.len();
        max_length
            .checked_sub(template)
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "a maximum length of {max_length} tokens cannot hold the template's {template} tokens and a pair"
                ))
            })
    }

    /// The model's input for each pair: prefix, content cut on the right to
    /// what `tokens.max_length()` leaves, suffix.
    pub fn tokenize<A, B>(
        &self,
        tokens: &Tokenization,
        pairs: &[(A, B)],
    ) -> Result<Vec<Tokens>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        let limit = self.limit(tokens.max_length())?;
        let contents: Vec<String> = pairs
            .iter()
            .map(|(q, d)| yes_no_content(&self.instruction, q.as_ref(), d.as_ref()))
            .collect();
        Ok(tokens
            .tokenize_limited(&contents, limit)?
            .into_iter()
            .map(|content| Tokens {
                ids: [&self.prefix[..], &content.ids, &self.suffix].concat(),
                types: Vec::new(),
            })
            .collect())
    }

    /// Each pair as the two texts a server scores (see [`TemplatedPair`]),
    /// truncated as [`Template::tokenize`] truncates, and checked against it.
    pub fn texts<A, B>(
        &self,
        tokens: &Tokenization,
        pairs: &[(A, B)],
    ) -> Result<Vec<TemplatedPair>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        let limit = self.limit(tokens.max_length())?;
        let contents: Vec<String> = pairs
            .iter()
            .map(|(q, d)| yes_no_content(&self.instruction, q.as_ref(), d.as_ref()))
            .collect();
        let cuts = tokens.cut_text(&contents, limit)?;
        let official = self.tokenize(tokens, pairs)?;
        pairs
            .iter()
            .zip(cuts)
            .zip(official)
            .map(|(((q, _), cut), official)| {
                let head = query_part(&self.instruction, q.as_ref());
                let (query, document) = match cut.text.strip_prefix(head.as_str()) {
                    Some(rest) => (
                        format!("{YES_NO_PREFIX}{head}"),
                        format!("{rest}{YES_NO_SUFFIX}"),
                    ),
                    // Truncation ends inside the query: no document text is left.
                    None => (
                        format!("{YES_NO_PREFIX}{}", cut.text),
                        YES_NO_SUFFIX.to_owned(),
                    ),
                };
                let sent = [tokens.token_ids(&query)?, tokens.token_ids(&document)?].concat();
                Ok(TemplatedPair {
                    exact: cut.exact && sent == official.ids,
                    query,
                    document,
                })
            })
            .collect()
    }
}

/// A loaded yes/no reranker.
pub struct YesNo {
    encoder: Encoder,
    template: Template,
    /// Rows "no" then "yes" of the head (`2 × hidden`).
    rows: Vec<f32>,
    /// A directory saved by sentence-transformers' `CrossEncoder` with a
    /// `LogitScore` module: pairs rendered through its chat template with
    /// this prompt, instead of [`Template`].
    chat: Option<(ChatInputs, String)>,
}

impl std::fmt::Debug for YesNo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("YesNo")
            .field("encoder", &self.encoder)
            .field("instruction", &self.template.instruction)
            .finish_non_exhaustive()
    }
}

impl YesNo {
    /// The yes/no scoring of a loaded decoder: the "no" and "yes" rows of
    /// its head, and the template in its tokenizer's ids.
    pub(crate) fn new(encoder: Encoder, instruction: Option<String>) -> Result<Self, Error> {
        let weights = encoder.weights()?;
        if weights.contains_full("score.weight") {
            return Err(Error::format(
                weights.path(),
                "this is a sequence-classification decoder (`score.weight`); yes/no rerankers load from the causal language model (`*ForCausalLM`) checkpoint",
            ));
        }
        let ids = yes_no_ids(encoder.tokenization())?;
        Ok(Self {
            rows: encoder.lm_head_rows(&ids)?,
            template: Template::new(encoder.tokenization(), instruction)?,
            encoder,
            chat: None,
        })
    }

    /// A `CrossEncoder` save with `LogitScore`: the (false, true) token rows
    /// of its head, pairs rendered through `chat` with `prompt`.
    pub(crate) fn with_chat(
        encoder: Encoder,
        ids: [u32; 2],
        prompt: String,
        chat: ChatInputs,
    ) -> Result<Self, Error> {
        let mut model = Self::new(encoder, Some(prompt.clone()))?;
        model.rows = model.encoder.lm_head_rows(&ids)?;
        model.chat = Some((chat, prompt));
        Ok(model)
    }

    /// The encoder.
    pub fn encoder(&self) -> &Encoder {
        &self.encoder
    }

    /// The template.
    pub fn template(&self) -> &Template {
        &self.template
    }

    /// The model's input for each pair, after truncation.
    pub fn tokenize<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        match &self.chat {
            Some((chat, prompt)) => Ok(chat
                .tokenize_pairs(self.encoder.tokenization(), pairs, prompt)?
                .into_iter()
                .map(|ids| Tokens {
                    ids,
                    types: Vec::new(),
                })
                .collect()),
            None => self.template.tokenize(self.encoder.tokenization(), pairs),
        }
    }

    /// The chat template pairs are rendered through, where they are.
    pub fn chat(&self) -> Option<&ChatInputs> {
        self.chat.as_ref().map(|(c, _)| c)
    }

    /// The ("no", "yes") logits of each pair, in input order.
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
            .encode_pooled(&inputs, Pooling::LastToken, 0, progress)?;
        Ok(states
            .chunks_exact(hidden)
            .flat_map(|state| self.rows.chunks_exact(hidden).map(|row| dot(row, state)))
            .collect())
    }

    /// P(yes) of each pair: softmax(\[no, yes\])\[1\] = σ(yes − no).
    pub fn score<A, B>(
        &self,
        pairs: &[(A, B)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        Ok(self
            .logits(pairs, progress)?
            .chunks_exact(2)
            .map(|l| sigmoid(l[1] - l[0]))
            .collect())
    }
}

impl Reranker for YesNo {
    fn describe(&self) -> String {
        format!(
            "{} (yes/no decoder, P(yes), max {} tokens{}) on {}",
            self.encoder.dir().display(),
            self.encoder.max_length(),
            match &self.chat {
                Some((chat, prompt)) => crate::chat_words(Some(chat), prompt),
                None => String::new(),
            },
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

/// The ids of "no" and "yes" in the vocabulary.
pub(crate) fn yes_no_ids(tokens: &Tokenization) -> Result<[u32; 2], Error> {
    let token = |text: &str| {
        tokens.token_id(text).ok_or_else(|| Error::TokenizerMismatch {
            path: tokens.path().to_path_buf(),
            message: format!(
                "model.vocab has no token {text:?}: a yes/no reranker scores the \"no\" and \"yes\" tokens"
            ),
        })
    };
    Ok([token("no")?, token("yes")?])
}
