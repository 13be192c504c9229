//! A model's tokenizer with its truncation rules, without the weights: what
//! the [`Encoder`](crate::Encoder) feeds its model, and what a client of a
//! served model sends so that the server sees exactly that input.
//!
//! Besides token ids it can cut the *text* where the truncated input ends
//! ([`Tokenization::cut_text`], [`Tokenization::cut_pair`]), for servers
//! that take text only, and says whether the cut text tokenises back to the
//! same ids.

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tokenizers::{
    Encoding, Model, ModelWrapper, PostProcessor, Tokenizer, TruncationDirection, TruncationParams,
    TruncationStrategy,
};

use crate::error::{Error, Result};
use crate::models::{ModelConfig, Tokens};

/// The tokenizer of a model directory, truncating as the model's inputs are.
#[derive(Clone)]
pub struct Tokenization {
    /// Without truncation or padding: each method cuts its encodings itself (at `max_length`,
    /// a pair longest first) before the post-processor adds the special tokens, as tokenizers'
    /// own truncation does, and one copy of the vocabulary is all it holds (a second one,
    /// truncating, cost multilingual-e5-small's 250,002-piece Unigram 0.4 s to clone at each
    /// load and 0.15 s to drop).
    tokenizer: Tokenizer,
    config: ModelConfig,
    path: PathBuf,
    max_length: usize,
}

impl std::fmt::Debug for Tokenization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenization")
            .field("path", &self.path)
            .field("max_length", &self.max_length)
            .finish_non_exhaustive()
    }
}

/// A text cut where its truncated tokens end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cut {
    /// The text up to the end of its last kept token (all of it when
    /// nothing was cut).
    pub text: String,
    /// Whether tokenising `text` again gives exactly the kept tokens (false
    /// in rare cases where a word cut in the middle tokenises otherwise).
    pub exact: bool,
}

impl Tokenization {
    /// The tokenizer of `dir` (`config.json` and `tokenizer.json`; no
    /// weights needed). `max_length` as the options give it, else
    /// `default_max_length` capped at the model's positions, else the
    /// positions.
    pub fn from_dir(
        dir: &Path,
        max_length: Option<usize>,
        default_max_length: Option<usize>,
    ) -> Result<Self> {
        let config_path = dir.join("config.json");
        let path = dir.join("tokenizer.json");
        for (file, what) in [
            (&config_path, "the model's config.json"),
            (&path, "the model's tokenizer.json"),
        ] {
            if !file.is_file() {
                return Err(Error::MissingFile {
                    path: file.clone(),
                    what,
                });
            }
        }
        let config = ModelConfig::read(&config_path)?;
        Self::new(&path, config, max_length, default_max_length)
    }

    /// As [`Tokenization::from_dir`], with the architecture already read.
    pub(crate) fn new(
        path: &Path,
        config: ModelConfig,
        max_length: Option<usize>,
        default_max_length: Option<usize>,
    ) -> Result<Self> {
        let model_max = config.max_input_length();
        // An explicit length beyond the positions is an error; a default one
        // (a tokenizer's model_max_length, say) is capped, as
        // sentence-transformers caps it.
        let max_length = match (max_length, default_max_length) {
            (Some(n), _) if n > model_max => {
                return Err(Error::Invalid(format!(
                    "max length {n} exceeds the model's {model_max} positions"
                )));
            }
            (Some(0), _) | (None, Some(0)) => {
                return Err(Error::Invalid("max length must be positive".to_owned()));
            }
            (Some(n), _) => n,
            (None, Some(n)) => n.min(model_max),
            (None, None) => model_max,
        };
        let mut tokenizer = read_tokenizer(path)?;
        let size = tokenizer.get_vocab_size(true);
        if size > config.vocab_size() {
            return Err(Error::TokenizerMismatch {
                path: path.to_path_buf(),
                message: format!(
                    "it has {size} tokens but the model's vocab_size is {} (is this the tokenizer of another model?)",
                    config.vocab_size()
                ),
            });
        }
        // tokenizers subtracts its special tokens from the length unchecked.
        let specials = tokenizer
            .get_post_processor()
            .map_or(0, |p| p.added_tokens(false));
        if max_length < specials {
            return Err(Error::format(
                path,
                format!(
                    "a max length of {max_length} cannot hold the {specials} special tokens this tokenizer adds"
                ),
            ));
        }
        tokenizer
            .with_truncation(None)
            .map_err(|e| Error::format(path, e.to_string()))?;
        tokenizer.with_padding(None);
        Ok(Self {
            tokenizer,
            config,
            path: path.to_path_buf(),
            max_length,
        })
    }

    /// The architecture the ids are checked against.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// The truncation length in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// `tokenizer.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tokenises single texts (specials added, truncated).
    pub fn tokenize<S: AsRef<str> + Sync>(&self, texts: &[S]) -> Result<Vec<Tokens>> {
        // The length holds the special tokens (checked at load).
        self.cut_to(texts, self.max_length)
    }

    /// The untruncated encoding (no specials) of enough of `text` to hold
    /// its first `keep` tokens, and whether that is less than the whole.
    ///
    /// A long text's first tokens are those of a prefix that ends where a
    /// run of whitespace starts: pre-tokenizers split there (BERT's
    /// whitespace and punctuation split, byte-level BPE's and
    /// sentencepiece's word patterns), and normalisers work within words,
    /// so every token before that point is the same in the prefix as in the
    /// whole. The prefix must give more than `keep` tokens (it grows
    /// fourfold until it does, or is the whole text), so a 100,000-character
    /// skill truncated to 256 tokens costs a few thousand characters of
    /// tokenising instead of all of them.
    fn head(&self, text: &str, keep: usize) -> Result<(Encoding, bool)> {
        let mut budget = (keep * 8).max(1024);
        while budget < text.len() {
            let Some(cut) = whitespace_run_start(text, budget) else {
                break;
            };
            let encoding = self.tokenizer.encode(&text[..cut], false).map_err(failed)?;
            if encoding.len() > keep {
                return Ok((encoding, true));
            }
            budget = budget.saturating_mul(4);
        }
        let encoding = self.tokenizer.encode(text, false).map_err(failed)?;
        Ok((encoding, false))
    }

    /// The untruncated encodings (no specials) of a pair's texts, or of
    /// prefixes of them that longest-first truncation cannot tell from the
    /// whole.
    ///
    /// That truncation depends on the two lengths only through which one is
    /// longer, whether their sum exceeds the maximum length, and the shorter
    /// one's length (tokenizers' `truncate_encodings`; transformers' one
    /// token at a time gives the same lengths). The shorter text (in bytes)
    /// is tokenised whole, with `n` tokens; the longer through
    /// [`Tokenization::head`], keeping more than `max(max_length, n)`
    /// tokens unless it is whole: then it is longer than the other and than
    /// the maximum in the prefix as in the whole, and the first tokens,
    /// which truncation keeps, are the same. A cross-encoder pairing a query
    /// with a 10,000-character skill tokenises a few thousand characters of
    /// it instead of all (and no overflow encodings of the rest).
    fn pair_heads(&self, a: &str, b: &str) -> Result<(Encoding, Encoding)> {
        let (short, long, swapped) = if a.len() <= b.len() {
            (a, b, false)
        } else {
            (b, a, true)
        };
        let short = self.tokenizer.encode(short, false).map_err(failed)?;
        let (long, _) = self.head(long, self.max_length.max(short.len()))?;
        Ok(if swapped {
            (long, short)
        } else {
            (short, long)
        })
    }

    /// A pair truncated as `post_process` would (longest first, within
    /// what the special tokens leave), without the overflowing rest: the
    /// post-processor pairs every overflowing part of one text with every
    /// part of the other, which for two long texts is quadratic in time
    /// and memory for tokens that are thrown away.
    fn truncate_pair(&self, first: Encoding, second: Encoding) -> Result<(Encoding, Encoding)> {
        let added = self
            .tokenizer
            .get_post_processor()
            .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, true));
        let params = TruncationParams {
            max_length: self.max_length.saturating_sub(added),
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        };
        let (mut first, second) =
            tokenizers::utils::truncation::truncate_encodings(first, Some(second), &params)
                .map_err(failed)?;
        let mut second = second.ok_or_else(|| failed("truncation dropped the second text"))?;
        first.take_overflowing();
        second.take_overflowing();
        Ok((first, second))
    }

    /// Token ids of `text` as it is, without the tokenizer's special tokens
    /// and without truncation (special tokens written in the text, such as
    /// `<|im_start|>`, are recognised).
    pub fn token_ids(&self, text: &str) -> Result<Vec<u32>> {
        let encoding = self.tokenizer.encode(text, false).map_err(failed)?;
        Ok(self.checked(&encoding)?.ids)
    }

    /// The id of the token spelled `token` in the vocabulary, if any.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    /// Special tokens the tokenizer adds to a single text.
    fn added_single(&self) -> usize {
        self.tokenizer
            .get_post_processor()
            .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false))
    }

    /// Tokenises single texts with the tokenizer's special tokens, each cut
    /// (on the right, specials kept) to at most `limit` tokens, as
    /// transformers' `tokenizer(text, truncation=True, max_length=limit)`.
    pub fn tokenize_limited<S: AsRef<str> + Sync>(
        &self,
        texts: &[S],
        limit: usize,
    ) -> Result<Vec<Tokens>> {
        let added = self.added_single();
        if limit <= added {
            return Err(Error::Invalid(format!(
                "a limit of {limit} tokens leaves no room beside the {added} special tokens"
            )));
        }
        self.cut_to(texts, limit)
    }

    /// Single texts with their special tokens, each cut on the right to at most `limit` tokens
    /// (specials counted; `limit` holds them).
    fn cut_to<S: AsRef<str> + Sync>(&self, texts: &[S], limit: usize) -> Result<Vec<Tokens>> {
        let keep = limit - self.added_single();
        texts
            .par_iter()
            .map(|text| {
                let (mut encoding, _) = self.head(text.as_ref(), keep)?;
                encoding.truncate(keep, 0, TruncationDirection::Right);
                let encoding = self
                    .tokenizer
                    .post_process(encoding, None, true)
                    .map_err(failed)?;
                self.checked(&encoding)
            })
            .collect()
    }

    /// Tokenises text pairs as one input each (`[CLS] a [SEP] b [SEP]` or the
    /// model's own template), truncating the longer text first, as
    /// transformers does for `truncation="longest_first"`.
    ///
    /// Each text is tokenised (see `Tokenization::pair_heads`) before the
    /// pair is truncated: the tokenizers crate 0.23.2 cuts each text to the
    /// maximum length first (an early exit), which turns "longer text first"
    /// into a tie whenever both texts are long, and gives the odd token to
    /// the other text than transformers (Python tokenizers 0.23.3) does.
    pub fn tokenize_pairs<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<Tokens>>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        pairs
            .par_iter()
            .map(|(a, b)| {
                let (first, second) = self.pair_heads(a.as_ref(), b.as_ref())?;
                let (first, second) = self.truncate_pair(first, second)?;
                let pair = self
                    .tokenizer
                    .post_process(first, Some(second), true)
                    .map_err(failed)?;
                self.checked(&pair)
            })
            .collect()
    }

    /// Each text cut where its input ends after truncation to `limit`
    /// tokens (specials counted, as [`Tokenization::tokenize_limited`]): what
    /// a server that tokenises for itself must receive to see the same
    /// tokens.
    pub fn cut_text<S: AsRef<str> + Sync>(&self, texts: &[S], limit: usize) -> Result<Vec<Cut>> {
        let added = self.added_single();
        if limit <= added {
            return Err(Error::Invalid(format!(
                "a limit of {limit} tokens leaves no room beside the {added} special tokens"
            )));
        }
        texts
            .par_iter()
            .map(|text| {
                let text = text.as_ref();
                let (head, _) = self.head(text, limit - added)?;
                self.cut(text, &head, limit - added)
            })
            .collect()
    }

    /// Each pair's texts cut where their tokens end after longest-first
    /// truncation (as [`Tokenization::tokenize_pairs`]).
    pub fn cut_pair<A, B>(&self, pairs: &[(A, B)]) -> Result<Vec<(Cut, Cut)>>
    where
        A: AsRef<str> + Sync,
        B: AsRef<str> + Sync,
    {
        pairs
            .par_iter()
            .map(|(a, b)| {
                let (a, b) = (a.as_ref(), b.as_ref());
                let (first, second) = self.pair_heads(a, b)?;
                let (kept_a, kept_b) = self.truncate_pair(first.clone(), second.clone())?;
                Ok((
                    self.cut(a, &first, kept_a.len())?,
                    self.cut(b, &second, kept_b.len())?,
                ))
            })
            .collect()
    }

    /// `text` up to the end of its `keep`-th token (of `whole`, its
    /// untruncated encoding without specials, or that of a prefix holding
    /// more than `keep` tokens), checked by tokenising the cut text again.
    fn cut(&self, text: &str, whole: &Encoding, keep: usize) -> Result<Cut> {
        let ids = whole.get_ids();
        if keep >= ids.len() {
            return Ok(Cut {
                text: text.to_owned(),
                exact: true,
            });
        }
        let mut end = whole.get_offsets()[..keep]
            .iter()
            .map(|&(_, end)| end)
            .max()
            .unwrap_or(0)
            .min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        let cut = &text[..end];
        let again = self.tokenizer.encode(cut, false).map_err(failed)?;
        Ok(Cut {
            exact: again.get_ids() == &ids[..keep],
            text: cut.to_owned(),
        })
    }

    /// Whether the tokenizer appends a special token to a single text (BERT's
    /// `[SEP]`, Qwen3-Embedding's `<|endoftext|>`).
    pub fn appends_special(&self) -> bool {
        let plain = self.tokenizer.encode("a", false);
        let full = self.tokenizer.encode("a", true);
        match (plain, full) {
            (Ok(plain), Ok(full)) => {
                let (plain, full) = (plain.get_ids(), full.get_ids());
                full.len() > plain.len() && !full.ends_with(plain)
            }
            _ => false,
        }
    }

    /// The ids and types of an encoding, checked against the model's tables.
    fn checked(&self, encoding: &Encoding) -> Result<Tokens> {
        let ids = encoding.get_ids().to_vec();
        let mismatch = |message: String| Error::TokenizerMismatch {
            path: self.path.clone(),
            message,
        };
        let vocab = self.config.vocab_size();
        if let Some(&bad) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(mismatch(format!(
                "token id {bad} is outside the model's vocabulary of {vocab}"
            )));
        }
        let types = encoding.get_type_ids().to_vec();
        let type_vocab = self.config.type_vocab_size();
        if let Some(&bad) = types.iter().find(|&&t| t as usize >= type_vocab) {
            return Err(mismatch(format!(
                "token type {bad} is beyond the model's {type_vocab} token types"
            )));
        }
        let types = if types.iter().all(|&t| t == 0) {
            Vec::new()
        } else {
            types
        };
        Ok(Tokens { ids, types })
    }
}

/// The start of the first run of whitespace at or after byte `from`, if
/// any (at a character boundary).
fn whitespace_run_start(text: &str, from: usize) -> Option<usize> {
    let mut from = from.min(text.len());
    while !text.is_char_boundary(from) {
        from += 1;
    }
    let (offset, _) = text[from..]
        .char_indices()
        .find(|(_, c)| c.is_whitespace())?;
    let mut start = from + offset;
    // Back to the beginning of the run it belongs to.
    while let Some(c) = text[..start].chars().next_back() {
        if !c.is_whitespace() {
            break;
        }
        start -= c.len_utf8();
    }
    Some(start)
}

fn failed(e: impl std::fmt::Display) -> Error {
    Error::Inference(format!("tokenizing: {e}"))
}

/// Reads `tokenizer.json`. Its JSON is checked first: tokenizers panics on a syntax error inside
/// its `decoder` (the `DecoderHelper` it reads that through `expect`s), where it must be an error
/// naming the file and line. That pass keeps only the `post_processor` (the rest is checked for
/// its syntax and skipped: a whole `serde_json::Value` of multilingual-e5-small's 17 MB took
/// 0.12 s of its 0.8 s load).
fn read_tokenizer(path: &Path) -> Result<Tokenizer> {
    /// The part of the file checked before tokenizers reads it.
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(default)]
        post_processor: serde_json::Value,
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let not_json = |e: serde_json::Error| Error::format(path, format!("not JSON: {e}"));
    let post_processor = match serde_json::from_slice::<Head>(&bytes) {
        Ok(head) => head.post_processor,
        // JSON of another shape (another top level, a key twice): read whole, as tokenizers will.
        Err(e) if e.is_data() => serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(not_json)?
            .get("post_processor")
            .cloned()
            .unwrap_or_default(),
        Err(e) => return Err(not_json(e)),
    };
    check_templates(path, &post_processor, "post_processor")?;
    let tokenizer =
        Tokenizer::from_bytes(&bytes).map_err(|e| Error::format(path, e.to_string()))?;
    // A vocabulary model's unknown token is in its vocabulary (WordPiece and WordLevel fail on
    // the first unknown word otherwise, naming no file: issue 54's fuzzing; BPE too).
    let unknown = match tokenizer.get_model() {
        ModelWrapper::WordPiece(m) => Some(&m.unk_token).filter(|t| m.token_to_id(t).is_none()),
        ModelWrapper::WordLevel(m) => Some(&m.unk_token).filter(|t| m.token_to_id(t).is_none()),
        ModelWrapper::BPE(m) => m.unk_token.as_ref().filter(|t| m.token_to_id(t).is_none()),
        ModelWrapper::Unigram(_) => None,
    };
    if let Some(unk) = unknown {
        return Err(Error::format(
            path,
            format!("model.unk_token {unk:?} is not in model.vocab"),
        ));
    }
    Ok(tokenizer)
}

/// Every special token a `TemplateProcessing` post-processor (also inside a `Sequence` of them)
/// puts in its templates is one it defines: tokenizers reads such a file and panics when it
/// encodes with it (issue 54's fuzzing). By shape, not by `type`: tokenizers reads a processor
/// by its fields whatever its `type` says.
fn check_templates(path: &Path, processor: &serde_json::Value, at: &str) -> Result<()> {
    for (i, inner) in processor["processors"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        check_templates(path, inner, &format!("{at}.processors[{i}]"))?;
    }
    let defined = &processor["special_tokens"];
    for template in ["single", "pair"] {
        let pieces = processor[template].as_array().into_iter().flatten();
        for id in pieces.filter_map(|p| p["SpecialToken"]["id"].as_str()) {
            if defined.get(id).is_none_or(|t| t["id"] != id) {
                return Err(Error::format(
                    path,
                    format!(
                        "{at}.{template}: special token {id:?} is not among its special_tokens"
                    ),
                ));
            }
        }
    }
    Ok(())
}
