//! Served rerankers behind a `/rerank` endpoint, fanned out over replicas
//! (the `served` crate's [`served::pool`]).
//!
//! Two request shapes:
//! - [`RemoteApi::Rerank`]: `POST {endpoint}/rerank` with `query` and
//!   `documents`, answered by `results: [{index, relevance_score}]` (vLLM,
//!   Jina, Cohere, Infinity).
//! - [`RemoteApi::Tei`]: text-embeddings-inference's `POST {endpoint}/rerank`
//!   with `query` and `texts`, answered by `[{index, score}]`.
//!
//! With the local model directory (its tokenizer and length; no weights
//! needed) the client truncates as the local scorers do and sends the text
//! cut where the kept tokens end, so the server never truncates: pairs of a
//! cross-encoder longest-first, and for a yes/no reranker the official
//! template written out ([`Template::texts`]: query side = prefix,
//! instruction and query; document side = document and suffix), so that vLLM
//! serving Qwen3-Reranker as a sequence classifier returns the official
//! P(yes). Each cut is checked by tokenising it again; pairs that would not
//! give the local tokens are counted.
//!
//! Activation, so that scores equal the local reranker's: a cross-encoder's
//! score is its logit unless [`Activation::Sigmoid`] is asked for. vLLM is
//! asked for what is wanted (`use_activation`), TEI too (`raw_scores`);
//! other `/rerank` services return probabilities, which are turned back
//! into logits (the inverse sigmoid) when logits are wanted. A yes/no
//! reranker's score is P(yes) everywhere.

use std::path::PathBuf;

use embedder::{ModelConfig, Tokenization};
use serde_json::{Value, json};
use served::pool::{Failure, Job, Pool, RunError};
use served::{Checked, Connection, ServedModel, check_served};

use crate::{Activation, Error, Reranker, RerankerKind, Template};

pub use served::rerank::RemoteApi;

/// How to reach and use a served reranker.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Endpoints, key and limits.
    pub connection: Connection,
    /// The name the server knows the model by (TEI: its `model_id`; may be
    /// left out there).
    pub served_model: Option<String>,
    /// The request shape.
    pub api: RemoteApi,
    /// The local model directory: tokenizer, maximum length, kind.
    pub model_dir: Option<PathBuf>,
    /// Cross-encoder or yes/no (default: detected from the local model,
    /// else a cross-encoder).
    pub kind: Option<RerankerKind>,
    /// Truncation length of a pair (default: the tokenizer's).
    pub max_length: Option<usize>,
    /// A yes/no reranker's instruction.
    pub instruction: Option<String>,
    /// What a cross-encoder's logit becomes.
    pub activation: Activation,
    /// Documents per request.
    pub batch_size: usize,
}

/// A served reranker.
#[derive(Debug)]
pub struct RemoteReranker {
    pool: Pool,
    api: RemoteApi,
    served: Option<String>,
    kind: RerankerKind,
    tokens: Option<Tokenization>,
    template: Option<Template>,
    activation: Activation,
    batch_size: usize,
    vllm: bool,
    max_model_len: Option<usize>,
    warnings: Vec<String>,
    /// Per endpoint, of the last scoring.
    last: std::sync::Mutex<Vec<String>>,
}

/// One pair as sent, with its token count and whether its cut is exact.
struct Sent {
    query: String,
    document: String,
    tokens: usize,
    exact: bool,
    /// The input as the local reranker reads it (yes/no: the official ids).
    ids: Option<Vec<u32>>,
}

/// What one request carries.
enum Request {
    /// Pairs of one query through `/rerank`.
    Rerank,
    /// Official token ids through vLLM's `/classify` (pairs whose text cut
    /// cannot be exact: truncation inside a character).
    Classify,
}

impl RemoteReranker {
    /// Checks the servers and the model (every endpoint that answers must
    /// serve `served_model`, alike; one that does not answer is left out
    /// with a warning) and loads the local tokenizer where given.
    pub fn connect(options: RemoteOptions) -> Result<Self, Error> {
        if options.batch_size == 0 {
            return Err(Error::Invalid("batch_size must be positive".to_owned()));
        }
        let probe = Pool::new(&options.connection);
        let checked = match options.api {
            RemoteApi::Rerank => {
                let name = options.served_model.as_deref().ok_or_else(|| {
                    Error::Invalid("api = \"rerank\" needs served_model".to_owned())
                })?;
                check_served(&probe, name)?
            }
            RemoteApi::Tei => tei_info(&probe, options.served_model.as_deref())?,
        };
        let pool = Pool::new(&checked.usable_connection(&options.connection));
        let (model, mut warnings) = (checked.model, checked.warnings);

        let (tokens, detected) = match &options.model_dir {
            Some(dir) => {
                let st = embedder::config::SentenceTransformersConfig::read(dir)?;
                if st.message.is_some() || st.logit_score.is_some() {
                    return Err(Error::Invalid(format!(
                        "{}: this cross-encoder renders its pairs through a chat template (sentence-transformers 6.x's message modality), which a served reranker is not sent yet; run it locally",
                        dir.display()
                    )));
                }
                let default_length = embedder::config::tokenizer_max_length(dir)?;
                let tokens = Tokenization::from_dir(dir, options.max_length, default_length)?;
                let kind = match tokens.config() {
                    ModelConfig::Bert(_) => RerankerKind::Classifier,
                    _ => RerankerKind::YesNo,
                };
                (Some(tokens), Some(kind))
            }
            None => {
                if options.max_length.is_some() {
                    return Err(Error::Invalid(
                        "max_length needs the local model directory (`model`) whose tokenizer counts the tokens".to_owned(),
                    ));
                }
                (None, None)
            }
        };
        let kind = match (options.kind, detected) {
            (Some(asked), Some(found)) if asked != found => {
                return Err(Error::Invalid(format!(
                    "kind {asked:?} is set, but the local model {} is a {found:?} reranker",
                    options
                        .model_dir
                        .as_ref()
                        .map_or_else(String::new, |d| d.display().to_string())
                )));
            }
            (Some(k), _) | (None, Some(k)) => k,
            (None, None) => RerankerKind::Classifier,
        };
        let template = match (kind, &tokens) {
            (RerankerKind::YesNo, Some(t)) => Some(Template::new(t, options.instruction.clone())?),
            (RerankerKind::YesNo, None) => {
                return Err(Error::Invalid(
                    "a served yes/no reranker needs `model`, the local directory of its tokenizer: the client writes and truncates the official template".to_owned(),
                ));
            }
            (RerankerKind::Classifier, _) => {
                if options.instruction.is_some() {
                    return Err(Error::Invalid(
                        "instruction applies to yes/no rerankers only".to_owned(),
                    ));
                }
                None
            }
        };
        if kind == RerankerKind::YesNo && options.api == RemoteApi::Tei {
            return Err(Error::Invalid(
                "text-embeddings-inference serves cross-encoders only; serve a yes/no reranker with vLLM (api = \"rerank\")".to_owned(),
            ));
        }
        let max_model_len = model.as_ref().and_then(ServedModel::max_model_len);
        if let (Some(t), Some(limit)) = (&tokens, max_model_len)
            && limit < t.max_length()
        {
            return Err(Error::Served(format!(
                "the server's max_model_len is {limit} tokens, below the reranker's {}: start it with --max-model-len {} or set max_length = {limit}",
                t.max_length(),
                t.max_length()
            )));
        }
        if tokens.is_none() {
            warnings.push(
                "no local `model`: pairs go whole and the server truncates them its own way"
                    .to_owned(),
            );
        }
        Ok(Self {
            pool,
            api: options.api,
            served: options.served_model,
            kind,
            tokens,
            template,
            activation: options.activation,
            batch_size: options.batch_size,
            vllm: model.as_ref().is_some_and(ServedModel::is_vllm),
            max_model_len,
            warnings,
            last: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// What the start found worth saying.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Cross-encoder or yes/no.
    pub fn kind(&self) -> RerankerKind {
        self.kind
    }

    /// Each pair as it will be sent.
    fn sent(&self, pairs: &[(&str, &str)]) -> Result<Vec<Sent>, Error> {
        match (&self.template, &self.tokens) {
            (Some(template), Some(t)) => {
                let texts = template.texts(t, pairs)?;
                let counts = template.tokenize(t, pairs)?;
                Ok(texts
                    .into_iter()
                    .zip(counts)
                    .map(|(p, n)| Sent {
                        query: p.query,
                        document: p.document,
                        tokens: n.ids.len(),
                        exact: p.exact,
                        ids: Some(n.ids),
                    })
                    .collect())
            }
            (None, Some(t)) => {
                let cuts = t.cut_pair(pairs)?;
                let counts = t.tokenize_pairs(pairs)?;
                Ok(cuts
                    .into_iter()
                    .zip(counts)
                    .map(|((q, d), n)| Sent {
                        exact: q.exact && d.exact,
                        query: q.text,
                        document: d.text,
                        tokens: n.ids.len(),
                        ids: None,
                    })
                    .collect())
            }
            _ => Ok(pairs
                .iter()
                .map(|(q, d)| Sent {
                    query: (*q).to_owned(),
                    document: (*d).to_owned(),
                    tokens: (q.len() + d.len()).div_ceil(4),
                    exact: true,
                    ids: None,
                })
                .collect()),
        }
    }

    fn body(&self, query: &str, documents: &[&str]) -> Vec<u8> {
        served::rerank::request(
            self.api,
            &served::rerank::Ask {
                model: self.served.as_deref(),
                vllm: self.vllm,
                classifier: self.kind == RerankerKind::Classifier,
                logits: self.kind == RerankerKind::Classifier
                    && self.activation == Activation::Identity,
                truncate: self.tokens.is_none(),
            },
            query,
            documents,
        )
    }

    /// The scores of one `/classify` answer: see
    /// [`served::rerank::parse_classify`].
    fn parse_classify(answer: &[u8], count: usize) -> Result<Vec<f32>, String> {
        served::rerank::parse_classify(answer, count)
    }

    /// The scores of one answer, in document order.
    fn parse(&self, answer: &[u8], count: usize) -> Result<Vec<f32>, String> {
        let mut scores = served::rerank::parse_scores(self.api, answer, count)?;
        // Probabilities from a service that cannot return logits.
        if self.api == RemoteApi::Rerank
            && !self.vllm
            && self.kind == RerankerKind::Classifier
            && self.activation == Activation::Identity
        {
            for s in &mut scores {
                let p = s.clamp(1e-7, 1.0 - 1e-7);
                *s = (p / (1.0 - p)).ln();
            }
        }
        Ok(scores)
    }

    fn explain(&self, error: RunError, jobs: &[Vec<usize>], sent: &[Sent]) -> Error {
        match error {
            RunError::AllDown(down) => {
                Error::Served(served::pool::all_down("of the reranker", &down))
            }
            RunError::Refused {
                endpoint,
                job,
                failure,
            } => {
                let len = jobs[job].len();
                let longest = jobs[job].iter().map(|&i| sent[i].tokens).max().unwrap_or(0);
                let hint = match &failure {
                    Failure::Status { code: 401 | 403, .. } => {
                        format!(": {}", self.pool.connection().key_hint())
                    }
                    Failure::Status { code: 404, .. } => format!(
                        ": is {endpoint} the base URL of a server with a /rerank route (vLLM: …/v1; TEI: its root)?"
                    ),
                    Failure::Status { code: 400 | 413 | 422, .. } if self.tokens.is_none() => {
                        ": set `model` to the local model directory so that pairs are truncated as the local reranker truncates them".to_owned()
                    }
                    _ => String::new(),
                };
                Error::Served(format!(
                    "{endpoint} refused a request ({len} pair{}, the longest {longest} tokens): {failure}{hint}",
                    if len == 1 { "" } else { "s" }
                ))
            }
            RunError::Handler(message) => Error::Invalid(message),
        }
    }
}

impl Reranker for RemoteReranker {
    fn describe(&self) -> String {
        let endpoints: Vec<String> = self
            .pool
            .endpoints()
            .iter()
            .map(ToString::to_string)
            .collect();
        format!(
            "{} served at {} ({:?} API, {}, {}{})",
            self.served
                .as_deref()
                .map_or_else(|| "the model".to_owned(), |s| format!("{s:?}")),
            endpoints.join(", "),
            self.api,
            match self.kind {
                RerankerKind::YesNo =>
                    "yes/no, P(yes), the official template written here".to_owned(),
                _ => format!(
                    "cross-encoder, {}",
                    if self.activation == Activation::Sigmoid {
                        "sigmoid of the logit"
                    } else {
                        "the logit"
                    }
                ),
            },
            match &self.tokens {
                Some(t) => format!("pairs cut at {} tokens here", t.max_length()),
                None => "pairs whole (the server truncates)".to_owned(),
            },
            self.max_model_len
                .map_or_else(String::new, |n| format!(", server max_model_len {n}"))
        )
    }

    fn score_pairs(
        &self,
        pairs: &[(&str, &str)],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<f32>, Error> {
        let sent = self.sent(pairs)?;
        // A yes/no pair whose text cut is not exact (truncation inside a
        // character, which text cannot express) goes as its official token
        // ids to vLLM's /classify, which takes them.
        let by_ids = |s: &Sent| !s.exact && s.ids.is_some() && self.vllm;
        // Consecutive pairs with the same (cut) query share requests.
        let mut members: Vec<(Request, Vec<usize>)> = Vec::new();
        let mut start = 0;
        while start < sent.len() {
            if by_ids(&sent[start]) {
                start += 1;
                continue;
            }
            let mut group = vec![start];
            let mut end = start + 1;
            while end < sent.len()
                && group.len() < self.batch_size
                && sent[end].query == sent[start].query
            {
                if !by_ids(&sent[end]) {
                    group.push(end);
                }
                end += 1;
            }
            members.push((Request::Rerank, group));
            start = end;
        }
        let fallback: Vec<usize> = (0..sent.len()).filter(|&i| by_ids(&sent[i])).collect();
        for chunk in fallback.chunks(self.batch_size) {
            members.push((Request::Classify, chunk.to_vec()));
        }
        let jobs: Vec<Job> = members
            .iter()
            .map(|(kind, group)| match kind {
                Request::Rerank => {
                    let docs: Vec<&str> =
                        group.iter().map(|&i| sent[i].document.as_str()).collect();
                    Job {
                        route: "rerank".to_owned(),
                        body: self.body(&sent[group[0]].query, &docs),
                        tokens: group.iter().map(|&i| sent[i].tokens).sum(),
                    }
                }
                Request::Classify => {
                    let inputs: Vec<&[u32]> = group
                        .iter()
                        .filter_map(|&i| sent[i].ids.as_deref())
                        .collect();
                    Job {
                        route: "/classify".to_owned(),
                        body: serde_json::to_vec(&json!({"model": self.served, "input": inputs}))
                            .unwrap_or_default(),
                        tokens: group.iter().map(|&i| sent[i].tokens).sum(),
                    }
                }
            })
            .collect();
        let spans: Vec<Vec<usize>> = members.iter().map(|(_, g)| g.clone()).collect();
        let mut scores = vec![f32::NAN; sent.len()];
        let done_pairs = std::cell::Cell::new(0usize);
        let parse = |job: usize, bytes: &[u8]| match members[job].0 {
            Request::Rerank => self.parse(bytes, spans[job].len()),
            Request::Classify => Self::parse_classify(bytes, spans[job].len()),
        };
        let mut on_answer = |job: usize, values: Vec<f32>| {
            for (&i, v) in spans[job].iter().zip(values) {
                scores[i] = v;
            }
            done_pairs.set(done_pairs.get() + spans[job].len());
            Ok(())
        };
        let started = std::time::Instant::now();
        let stats = self
            .pool
            .run(&jobs, &parse, &mut on_answer, &mut |_, _| {
                progress(done_pairs.get());
            })
            .map_err(|e| self.explain(e, &spans, &sent))?;
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        let mut notes = served::pool::notes(&stats, seconds);
        if !fallback.is_empty() {
            notes.push(format!(
                "{} of {} pairs cut inside a character (text cannot carry that): scored from their token ids through vLLM's /classify",
                fallback.len(),
                sent.len()
            ));
        }
        let inexact = sent.iter().filter(|s| !s.exact && !by_ids(s)).count();
        if inexact > 0 {
            notes.push(format!(
                "{inexact} of {} pairs were cut where the text tokenises back to other tokens than the local reranker's",
                sent.len()
            ));
        }
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = notes;
        Ok(scores)
    }

    fn notes(&self) -> Vec<String> {
        self.last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// TEI's `GET /info` on each endpoint: its `model_id` must be
/// `served_model` where one is given.
fn tei_info(pool: &Pool, served: Option<&str>) -> Result<Checked, Error> {
    let mut usable = vec![true; pool.endpoints().len()];
    let mut warnings = Vec::new();
    let mut down = Vec::new();
    for (i, endpoint) in pool.endpoints().iter().enumerate() {
        match pool.get(i, "info") {
            Ok(bytes) => {
                let info: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let id = info.get("model_id").and_then(Value::as_str).unwrap_or("");
                if let Some(name) = served
                    && name != id
                {
                    return Err(Error::NotServed {
                        name: name.to_owned(),
                        endpoint: endpoint.to_string(),
                        serves: if id.is_empty() {
                            Vec::new()
                        } else {
                            vec![id.to_owned()]
                        },
                    });
                }
            }
            Err(Failure::Status {
                code: 401 | 403, ..
            }) => {
                return Err(Error::Served(format!(
                    "{endpoint}: GET /info: {}",
                    pool.connection().key_hint()
                )));
            }
            Err(failure) => {
                usable[i] = false;
                down.push(format!("{endpoint}: {failure}"));
                warnings.push(format!(
                    "{endpoint} does not answer ({failure}); it is left out of this run"
                ));
            }
        }
    }
    if !usable.iter().any(|&u| u) {
        return Err(Error::Served(format!(
            "no endpoint answers: {}",
            down.join("; ")
        )));
    }
    Ok(Checked {
        model: None,
        usable,
        warnings,
    })
}
