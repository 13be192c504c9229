//! Embedding models behind a server through the OpenAI embeddings API
//! (`POST {endpoint}/embeddings`), as vLLM, text-embeddings-inference,
//! Infinity and the hosted APIs speak it. The HTTP side (endpoints, keys,
//! the replica pool with retries) is the `served` crate's.
//!
//! With a local model directory (its tokenizer, prompts and length; no
//! weights needed) the client sends what the native engine would embed:
//! the prompt added, then either the token ids themselves
//! ([`InputMode::Tokens`]: exact) or the text cut where its truncated
//! tokens end ([`InputMode::Text`], for servers that take text only; each
//! cut is checked by tokenising it again, and the ones that would not give
//! the same tokens are counted). Without one, texts go whole and the server
//! truncates (or refuses) as it does.
//!
//! vLLM (`owned_by: "vllm"` in `GET /models`) is asked for the raw pooled
//! vectors (`use_activation: false`), so that normalisation happens here as
//! on the native path; other servers return what they return (hosted APIs:
//! unit vectors). Vectors travel as base64 little-endian f32 where the
//! server takes it: exact and compact.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::tokenize::Tokenization;
use crate::{EmbedStats, Embedder, EmbedderOptions, Embeddings, Kind, Prompts};
use served::pool::{Failure, Job, Pool, RunError};
use served::{Connection, ServedModel, check_served};

/// The text whose vector identifies a served model: a run stores it with
/// the vectors it caches and compares it at the start of the next.
pub const PROBE_TEXT: &str = "skillret probe | A fixed text whose vector tells one served model from another. | # Probe\nIf this vector changes, the model behind the name changed.";

/// What goes over the wire for each text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum InputMode {
    /// Token ids, specials included, as the native engine embeds them
    /// (needs the local model directory; vLLM and TEI take them).
    Tokens,
    /// Text: cut where the truncated tokens end when the local model
    /// directory is known, else whole.
    Text,
}

/// How to reach and use a served embedding model.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Endpoints, key and limits.
    pub connection: Connection,
    /// The name the server knows the model by.
    pub served_model: String,
    /// The local model directory: tokenizer, prompts, maximum length.
    pub model_dir: Option<PathBuf>,
    /// Prompts and maximum length, as for the native engine (pooling,
    /// engine and precision do not apply: the server decides them).
    pub embedder: EmbedderOptions,
    /// Inputs per request.
    pub batch_size: usize,
    /// Matryoshka width to ask for.
    pub dimensions: Option<usize>,
    /// Token ids or text (default: ids with a model directory, else text).
    pub input: Option<InputMode>,
    /// Without a model directory: cut each text to this many characters
    /// (at a character boundary) before it is sent, for hosted APIs that
    /// refuse long inputs and whose tokenizer is not at hand.
    pub max_chars: Option<usize>,
}

/// A served embedding model behind the OpenAI embeddings API.
#[derive(Debug)]
pub struct RemoteEmbedder {
    pool: Pool,
    served: String,
    model: Option<ServedModel>,
    tokens: Option<Tokenization>,
    /// A model saved with the message modality: its texts rendered through
    /// the chat template and sent as the ids the native path embeds.
    chat: Option<crate::chat::ChatInputs>,
    prompts: Prompts,
    input: InputMode,
    batch_size: usize,
    dimensions: Option<usize>,
    raw: bool,
    max_chars: Option<usize>,
    dim: usize,
    probe: Vec<f32>,
    warnings: Vec<String>,
    protocol: String,
}

impl RemoteEmbedder {
    /// Checks the servers and the model: every endpoint that answers must
    /// list `served_model` and report it alike (one that does not answer
    /// is left out, with a warning); with a local model its length must fit
    /// the server's `max_model_len`. Then embeds [`PROBE_TEXT`], which
    /// gives the width of the vectors.
    pub fn connect(options: RemoteOptions) -> Result<Self> {
        if options.batch_size == 0 {
            return Err(Error::Invalid("batch_size must be positive".to_owned()));
        }
        if options.dimensions == Some(0) || options.max_chars == Some(0) {
            return Err(Error::Invalid(
                "dimensions and max_chars must be positive".to_owned(),
            ));
        }
        if options.max_chars.is_some() && options.model_dir.is_some() {
            return Err(Error::Invalid(
                "max_chars applies without a local model only: with `model`, inputs are truncated to its max length in tokens".to_owned(),
            ));
        }
        let probe_pool = Pool::new(&options.connection);
        let checked = check_served(&probe_pool, &options.served_model)?;
        let pool = Pool::new(&checked.usable_connection(&options.connection));
        let (model, warnings) = (checked.model, checked.warnings);

        let (tokens, prompts, chat) = match &options.model_dir {
            Some(dir) => {
                let st = crate::SentenceTransformersConfig::read(dir)?;
                let prompts = options.embedder.prompts(dir)?;
                let default_length = match st.max_seq_length {
                    Some(n) => Some(n),
                    None => crate::config::tokenizer_max_length(dir)?,
                };
                let tokens =
                    Tokenization::from_dir(dir, options.embedder.max_length, default_length)?;
                let chat = crate::chat::ChatInputs::load(
                    dir,
                    &st,
                    tokens.config().family(),
                    &tokens,
                    &prompts,
                )?;
                if chat.is_some() && options.input == Some(InputMode::Text) {
                    return Err(Error::Invalid(format!(
                        "{}: the model renders its texts through a chat template and cuts them in tokens, which text input cannot carry exactly: use input = \"tokens\"",
                        dir.display()
                    )));
                }
                (Some(tokens), prompts, chat)
            }
            None => {
                if options.embedder.query_prompt_name.is_some()
                    || options.embedder.document_prompt_name.is_some()
                {
                    return Err(Error::Invalid(
                        "a prompt by name needs the local model directory (`model`) that holds the prompts".to_owned(),
                    ));
                }
                if options.embedder.max_length.is_some() {
                    return Err(Error::Invalid(
                        "max_length needs the local model directory (`model`) whose tokenizer counts the tokens".to_owned(),
                    ));
                }
                let e = &options.embedder;
                let prompts = Prompts {
                    query: e.query_prompt.clone().unwrap_or_default(),
                    document: e.document_prompt.clone().unwrap_or_default(),
                };
                (None, prompts, None)
            }
        };
        let input = match (options.input, &tokens) {
            (Some(InputMode::Tokens), None) => {
                return Err(Error::Invalid(
                    "input = \"tokens\" needs the local model directory (`model`) whose tokenizer makes them".to_owned(),
                ));
            }
            (Some(mode), _) => mode,
            (None, Some(_)) => InputMode::Tokens,
            (None, None) => InputMode::Text,
        };
        if let (Some(t), Some(limit)) =
            (&tokens, model.as_ref().and_then(ServedModel::max_model_len))
            && limit < t.max_length()
        {
            return Err(Error::Served(format!(
                "the server's max_model_len for {:?} is {limit} tokens, below the protocol's {} (the model's max length): start it with --max-model-len {} or set max_length = {limit}",
                options.served_model,
                t.max_length(),
                t.max_length()
            )));
        }
        let raw = model.as_ref().is_some_and(ServedModel::is_vllm);
        let chat_protocol = chat.as_ref().map_or_else(String::new, |c| {
            format!(" chat_template={}", c.format().name())
        });
        let protocol = format!(
            "served={:?} models_entry={} input={input:?} prompts={prompts:?}{chat_protocol} max_length={:?} dimensions={:?} raw={raw} max_chars={:?}",
            options.served_model,
            model.as_ref().map_or_else(
                || "unlisted".to_owned(),
                |m| Value::Object(m.entry.clone()).to_string()
            ),
            tokens.as_ref().map(Tokenization::max_length),
            options.dimensions,
            options.max_chars,
        );
        let mut me = Self {
            pool,
            served: options.served_model,
            model,
            tokens,
            chat,
            prompts,
            input,
            batch_size: options.batch_size,
            dimensions: options.dimensions,
            raw,
            max_chars: options.max_chars,
            dim: 0,
            probe: Vec::new(),
            warnings,
            protocol,
        };
        let probe = me.embed_one(PROBE_TEXT, Kind::Document)?;
        if probe.is_empty() {
            return Err(Error::Served(
                "the server returned an empty vector".to_owned(),
            ));
        }
        if let Some(d) = me.dimensions
            && probe.len() != d
        {
            return Err(Error::Served(format!(
                "asked for {d} dimensions, the server returned {}",
                probe.len()
            )));
        }
        me.dim = probe.len();
        me.probe = probe;
        Ok(me)
    }

    /// Everything that decides the vectors (served name, the model's entry
    /// in `GET /models`, inputs, prompts, truncation, dimensions,
    /// activation), never where it runs: the cache key, with the local
    /// model directory's files (the caller hashes them).
    pub fn protocol(&self) -> &str {
        &self.protocol
    }

    /// The raw vector of [`PROBE_TEXT`] (as a document).
    pub fn probe(&self) -> &[f32] {
        &self.probe
    }

    /// What the start found worth saying (endpoints left out, servers that
    /// list no models).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether the vectors come back unnormalised (vLLM asked for the raw
    /// pooled vectors).
    pub fn raw(&self) -> bool {
        self.raw
    }

    /// The endpoints in use.
    pub fn endpoints(&self) -> Vec<String> {
        self.pool
            .endpoints()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    fn embed_one(&self, text: &str, kind: Kind) -> Result<Vec<f32>> {
        let texts = [text.to_owned()];
        let mut out = Vec::new();
        self.embed_groups(
            &[&texts],
            kind,
            &mut |_, v| {
                out = v.data;
                Ok(())
            },
            &|_, _| {},
        )?;
        Ok(out)
    }

    /// One request's body for `inputs`.
    fn body(&self, inputs: &[Value]) -> Vec<u8> {
        served::openai::embeddings_request(&self.served, inputs, self.dimensions, self.raw)
    }

    /// Reads one answer: see [`served::openai::parse_embeddings`].
    fn parse(
        answer: &[u8],
        count: usize,
    ) -> std::result::Result<(Vec<f32>, Option<usize>), String> {
        served::openai::parse_embeddings(answer, count)
    }

    /// The inputs of texts of `kind`: each as JSON, with its token count
    /// (what the tokenizer says, else characters / 4), and how many cut
    /// texts would not tokenise back to the same tokens.
    fn inputs(&self, texts: &[String], kind: Kind) -> Result<(Vec<(Value, usize)>, usize)> {
        let prompt = self.prompts.get(kind);
        if let (Some(t), Some(chat)) = (&self.tokens, &self.chat) {
            return Ok((
                chat.tokenize(t, texts, prompt, kind)?
                    .into_iter()
                    .map(|ids| {
                        let n = ids.len();
                        (json!(ids), n)
                    })
                    .collect(),
                0,
            ));
        }
        let prompted: Vec<String> = texts.iter().map(|t| format!("{prompt}{t}")).collect();
        match (&self.tokens, self.input) {
            (Some(t), InputMode::Tokens) => Ok((
                t.tokenize(&prompted)?
                    .into_iter()
                    .map(|tokens| {
                        let n = tokens.ids.len();
                        (json!(tokens.ids), n)
                    })
                    .collect(),
                0,
            )),
            (Some(t), InputMode::Text) => {
                let cuts = t.cut_text(&prompted, t.max_length())?;
                let counts = t.tokenize(&prompted)?;
                let inexact = cuts.iter().filter(|c| !c.exact).count();
                Ok((
                    cuts.into_iter()
                        .zip(counts)
                        .map(|(c, n)| (json!(c.text), n.ids.len()))
                        .collect(),
                    inexact,
                ))
            }
            (None, _) => Ok((
                prompted
                    .into_iter()
                    .map(|p| {
                        let p = match self.max_chars {
                            Some(max) => match p.char_indices().nth(max) {
                                Some((end, _)) => p[..end].to_owned(),
                                None => p,
                            },
                            None => p,
                        };
                        let n = p.len().div_ceil(4);
                        (json!(p), n)
                    })
                    .collect(),
                0,
            )),
        }
    }

    /// A refusal or outage, in the user's terms.
    fn explain(
        &self,
        error: RunError,
        jobs: &[(usize, usize, usize)],
        lengths: &[Vec<usize>],
    ) -> Error {
        match error {
            RunError::AllDown(down) => Error::Served(served::pool::all_down(
                &format!("serving {:?}", self.served),
                &down,
            )),
            RunError::Refused {
                endpoint,
                job,
                failure,
            } => {
                let (group, start, len) = jobs[job];
                let longest = lengths[group][start..start + len]
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(0);
                let inputs = if len == 1 { "1 input" } else { "inputs" };
                let what = match (self.input, len) {
                    (InputMode::Tokens, 1) => format!("{inputs} of {longest} tokens"),
                    (InputMode::Tokens, _) => {
                        format!("{len} {inputs}, the longest {longest} tokens")
                    }
                    (InputMode::Text, 1) if self.tokens.is_some() => {
                        format!("{inputs} of {longest} tokens by the local tokenizer")
                    }
                    (InputMode::Text, _) if self.tokens.is_some() => {
                        format!(
                            "{len} {inputs}, the longest {longest} tokens by the local tokenizer"
                        )
                    }
                    (InputMode::Text, 1) => format!("{inputs} of about {longest} tokens"),
                    (InputMode::Text, _) => {
                        format!("{len} {inputs}, the longest about {longest} tokens")
                    }
                };
                let hint = match &failure {
                    Failure::Status {
                        code: 401 | 403, ..
                    } => {
                        format!(": {}", self.pool.connection().key_hint())
                    }
                    Failure::Status { code: 404, .. } => format!(
                        ": is {endpoint} the base URL of an OpenAI-compatible server (…/v1) serving {:?}?",
                        self.served
                    ),
                    Failure::Status {
                        code: 400 | 413 | 422,
                        message,
                        ..
                    } if is_length_message(message) => {
                        if self.tokens.is_some() {
                            " (too long for the server: start it with a larger --max-model-len, or set max_length lower)".to_owned()
                        } else {
                            " (too long for the server: set `model` to the local model directory so that inputs are truncated to its max length as the native engine does)".to_owned()
                        }
                    }
                    _ => String::new(),
                };
                Error::Served(format!(
                    "{endpoint} refused a request ({what}): {failure}{hint}"
                ))
            }
            RunError::Handler(message) => Error::Invalid(message),
        }
    }
}

fn is_length_message(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "too long",
        "maximum",
        "max_model_len",
        "exceeds",
    ]
    .iter()
    .any(|w| m.contains(w))
}

impl Embedder for RemoteEmbedder {
    fn dim(&self) -> usize {
        self.dim
    }

    fn describe(&self) -> String {
        let endpoints = self.endpoints();
        format!(
            "{:?} served at {} ({} endpoint{}, {} per request, {} in flight each; {}; {}{})",
            self.served,
            endpoints.join(", "),
            endpoints.len(),
            if endpoints.len() == 1 { "" } else { "s" },
            self.batch_size,
            self.pool.connection().max_in_flight,
            match (&self.tokens, self.input) {
                (Some(t), InputMode::Tokens) => format!("token ids, max {} tokens", t.max_length()),
                (Some(t), InputMode::Text) => format!("text cut at {} tokens", t.max_length()),
                (None, _) => match self.max_chars {
                    Some(n) => format!("texts cut at {n} characters"),
                    None => "whole texts (the server truncates)".to_owned(),
                },
            },
            if self.raw {
                "raw pooled vectors"
            } else {
                "vectors as the server returns them"
            },
            self.model
                .as_ref()
                .and_then(ServedModel::max_model_len)
                .map_or_else(String::new, |n| format!(", server max_model_len {n}"))
        )
    }

    fn max_length(&self) -> Option<usize> {
        self.tokens.as_ref().map(Tokenization::max_length)
    }

    fn embed_groups(
        &self,
        groups: &[&[String]],
        kind: Kind,
        done: &mut dyn FnMut(usize, Embeddings) -> Result<()>,
        progress: &(dyn Fn(usize, &str) + Sync),
    ) -> Result<EmbedStats> {
        // (group, start, len) of each job.
        let mut spans = Vec::new();
        let mut jobs = Vec::new();
        let mut lengths = Vec::with_capacity(groups.len());
        let mut inexact = 0;
        for (g, texts) in groups.iter().enumerate() {
            let (inputs, cut_inexact) = self.inputs(texts, kind)?;
            inexact += cut_inexact;
            lengths.push(inputs.iter().map(|(_, n)| *n).collect::<Vec<_>>());
            for (c, chunk) in inputs.chunks(self.batch_size).enumerate() {
                let values: Vec<Value> = chunk.iter().map(|(v, _)| v.clone()).collect();
                spans.push((g, c * self.batch_size, chunk.len()));
                jobs.push(Job {
                    route: "embeddings".to_owned(),
                    body: self.body(&values),
                    tokens: chunk.iter().map(|(_, n)| n).sum(),
                });
            }
        }
        let mut buffers: Vec<Vec<f32>> = groups.iter().map(|_| Vec::new()).collect();
        let mut missing: Vec<usize> = groups.iter().map(|g| g.len()).collect();
        let mut dim = self.dim;
        let texts_done = std::cell::Cell::new(0usize);
        let mut server_tokens = 0usize;
        let parse = |job: usize, bytes: &[u8]| Self::parse(bytes, spans[job].2);
        let mut on_answer = |job: usize, (vectors, tokens): (Vec<f32>, Option<usize>)| {
            let (g, start, len) = spans[job];
            let width = vectors.len() / len;
            if dim == 0 {
                dim = width;
            }
            if width != dim {
                return Err(format!(
                    "the server returned vectors of {width} values, earlier ones had {dim}"
                ));
            }
            let buffer = &mut buffers[g];
            if buffer.is_empty() {
                buffer.resize(groups[g].len() * dim, 0.0);
            }
            buffer[start * dim..(start + len) * dim].copy_from_slice(&vectors);
            server_tokens += tokens.unwrap_or(jobs[job].tokens);
            missing[g] -= len;
            texts_done.set(texts_done.get() + len);
            if missing[g] == 0 {
                let data = std::mem::take(buffer);
                done(g, Embeddings { data, dim }).map_err(|e| e.to_string())?;
            }
            Ok(())
        };
        let started = std::time::Instant::now();
        let stats = self
            .pool
            .run(&jobs, &parse, &mut on_answer, &mut |rates, down| {
                progress(texts_done.get(), &rates.line(down));
            })
            .map_err(|e| self.explain(e, &spans, &lengths))?;
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        let mut notes = served::pool::notes(&stats, seconds);
        if inexact > 0 {
            notes.push(format!(
                "{inexact} cut texts tokenise back to other tokens than the native engine's (a word cut in its middle)"
            ));
        }
        Ok(EmbedStats {
            tokens: server_tokens,
            notes,
        })
    }
}
