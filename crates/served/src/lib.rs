//! Clients of serving engines: vLLM, text-embeddings-inference, Infinity or
//! a hosted API, over HTTP, fanned out over replicas. This crate knows HTTP
//! and the APIs' shapes, not tokenizers or models: the embedder and the
//! reranker hand it ready inputs.
//!
//! - [`Connection`]: the endpoints (base URLs of replicas serving the same
//!   model), the API key and the limits; checked before anything is sent
//!   (a URL, no credentials in it, no key over plain http to another host
//!   unless allowed).
//! - [`pool::Pool`]: requests spread over the endpoints, retried on another
//!   one, with back-off, `Retry-After` and endpoints set aside while they
//!   fail (see its docs).
//! - The embedder's `remote::RemoteEmbedder` (the OpenAI embeddings API)
//!   and the reranker's `RemoteReranker` (`/rerank`, TEI) are built on these.
//! - [`served_models`]: what `GET /models` says an endpoint serves.
//!
//! The key is read from the environment variable the configuration names
//! and is never printed: [`ApiKey`]'s `Debug` hides it, and no error or
//! description includes it.

#![warn(missing_docs)]

pub mod openai;
pub mod pool;
pub mod rerank;

use std::time::Duration;

/// What can go wrong before or while talking to a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// A served model could not be used: its servers refused, failed or
    /// are down (the message names each endpoint).
    #[error("{0}")]
    Served(String),
    /// An endpoint does not serve the model asked for.
    #[error("served_model {name:?} is not served at {endpoint}, which serves: {}", if serves.is_empty() { "nothing".to_owned() } else { serves.join(", ") })]
    NotServed {
        /// The name asked for.
        name: String,
        /// The endpoint.
        endpoint: String,
        /// What it lists.
        serves: Vec<String>,
    },
}

/// This crate's results.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An answer's JSON, or why it is not JSON.
pub(crate) fn answer_json(answer: &[u8]) -> std::result::Result<serde_json::Value, String> {
    serde_json::from_slice(answer).map_err(|e| format!("not JSON ({e})"))
}

/// An answer's `data` list, one item per input (`what` names the items).
pub(crate) fn data_list<'a>(
    value: &'a serde_json::Value,
    count: usize,
    what: &str,
) -> std::result::Result<&'a Vec<serde_json::Value>, String> {
    let data = value
        .get("data")
        .and_then(serde_json::Value::as_array)
        .ok_or("no `data` list")?;
    if data.len() != count {
        return Err(format!("{} {what} for {count} inputs", data.len()));
    }
    Ok(data)
}

/// An API key. Its `Debug` shows nothing of it; it is only ever written
/// into an `Authorization` header.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: String) -> Self {
        Self(key)
    }
    /// The key, for the `Authorization` header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(hidden)")
    }
}

/// A replica's base URL (`http://127.0.0.1:8011/v1`): routes are joined
/// under it (`…/v1/embeddings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    base: String,
    loopback: bool,
    https: bool,
}

impl Endpoint {
    /// Parses a base URL: `http` or `https`, a host, no user or password,
    /// no query or fragment.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let url = url::Url::parse(text).map_err(|e| format!("{text:?} is not a URL ({e})"))?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            other => {
                return Err(format!(
                    "{text:?}: the scheme must be http or https, not {other:?}"
                ));
            }
        };
        let Some(host) = url.host() else {
            return Err(format!("{text:?} has no host"));
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "{text:?} carries credentials; give the key through api_key_env instead"
            ));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("{text:?}: a base URL takes no query or fragment"));
        }
        let loopback = match host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(ip) => ip.is_loopback(),
        };
        Ok(Self {
            base: url.as_str().trim_end_matches('/').to_owned(),
            loopback,
            https,
        })
    }

    /// `{base}/{route}`; a route that starts with `/` is taken from the
    /// server's root instead (the base less a trailing `/v1`), where vLLM
    /// keeps its own routes (`/classify`).
    pub fn join(&self, route: &str) -> String {
        match route.strip_prefix('/') {
            Some(rest) => format!(
                "{}/{rest}",
                self.base.strip_suffix("/v1").unwrap_or(&self.base)
            ),
            None => format!("{}/{route}", self.base),
        }
    }

    /// Whether the host is this machine.
    pub fn is_loopback(&self) -> bool {
        self.loopback
    }

    /// Whether the connection is encrypted.
    pub fn is_https(&self) -> bool {
        self.https
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.base)
    }
}

/// Where a served model is and how to talk to it.
#[derive(Debug, Clone)]
pub struct Connection {
    /// Replicas serving the same model.
    pub endpoints: Vec<Endpoint>,
    /// The key, if the server wants one.
    pub api_key: Option<ApiKey>,
    /// The name of the variable the key came from (for messages).
    pub api_key_env: Option<String>,
    /// Requests in flight per endpoint.
    pub max_in_flight: usize,
    /// Deadline of one request.
    pub timeout: Duration,
    /// Failed attempts in a row after which an endpoint counts as down
    /// (the first attempt not counted).
    pub retries: usize,
}

impl Connection {
    /// Checks the settings: at least one endpoint, positive limits, and no
    /// key over plain http to a host other than this machine unless
    /// `allow_insecure_http`.
    pub fn new(
        endpoints: Vec<Endpoint>,
        api_key: Option<(String, ApiKey)>,
        max_in_flight: usize,
        timeout: Duration,
        retries: usize,
        allow_insecure_http: bool,
    ) -> Result<Self> {
        if endpoints.is_empty() {
            return Err(Error::Invalid("no endpoints".to_owned()));
        }
        if max_in_flight == 0 || timeout.is_zero() {
            return Err(Error::Invalid(
                "max_in_flight and timeout_s must be positive".to_owned(),
            ));
        }
        if api_key.is_some()
            && !allow_insecure_http
            && let Some(plain) = endpoints.iter().find(|e| !e.is_https() && !e.is_loopback())
        {
            return Err(Error::Invalid(format!(
                "{plain} is plain http to another machine: the API key would cross the network unencrypted; use https, or set allow_insecure_http = true if this network is trusted"
            )));
        }
        let (api_key_env, api_key) = match api_key {
            Some((env, key)) => (Some(env), Some(key)),
            None => (None, None),
        };
        Ok(Self {
            endpoints,
            api_key,
            api_key_env,
            max_in_flight,
            timeout,
            retries,
        })
    }

    /// What to tell a user whose key was refused, or who gave none.
    pub fn key_hint(&self) -> String {
        match &self.api_key_env {
            Some(env) => format!(
                "the server refused the API key in ${env} (check that variable)"
            ),
            None => "the server wants an API key: set api_key_env to the name of the variable that holds it".to_owned(),
        }
    }
}

/// One model as `GET /models` lists it, without the fields that change on
/// every start (`created`, `permission`) and with an absolute `root` (a
/// path on the server's machine) cut to its last component.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedModel {
    /// The name requests use (`id`).
    pub id: String,
    /// The entry as reported, less `created` and `permission`.
    pub entry: serde_json::Map<String, serde_json::Value>,
}

impl ServedModel {
    /// `max_model_len` where the server reports it (vLLM does).
    pub fn max_model_len(&self) -> Option<usize> {
        self.entry
            .get("max_model_len")
            .and_then(serde_json::Value::as_u64)
            .map(|n| n as usize)
    }

    /// Whether vLLM serves it (`owned_by: "vllm"`): it takes vLLM's extra
    /// request fields.
    pub fn is_vllm(&self) -> bool {
        self.entry
            .get("owned_by")
            .and_then(serde_json::Value::as_str)
            == Some("vllm")
    }
}

/// What endpoint `i` of `pool` serves, from `GET {endpoint}/models`.
pub fn served_models(
    pool: &pool::Pool,
    endpoint: usize,
) -> std::result::Result<Vec<ServedModel>, pool::Failure> {
    let bytes = pool.get(endpoint, "models")?;
    parse_models(&bytes)
}

/// The models of a `GET {endpoint}/models` answer (OpenAI's `{"data": [{"id", ...}]}`).
pub fn parse_models(bytes: &[u8]) -> std::result::Result<Vec<ServedModel>, pool::Failure> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| pool::Failure::Answer(format!("GET /models: not JSON ({e})")))?;
    let list = value
        .get("data")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| pool::Failure::Answer("GET /models: no `data` list".to_owned()))?;
    Ok(list
        .iter()
        .filter_map(|m| {
            let mut entry = m.as_object()?.clone();
            entry.remove("created");
            entry.remove("permission");
            // An absolute `root` is a path on the server's machine (where it
            // runs); its last component names the model.
            if let Some(serde_json::Value::String(root)) = entry.get_mut("root")
                && root.starts_with('/')
            {
                *root = root
                    .trim_end_matches('/')
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_owned();
            }
            Some(ServedModel {
                id: entry.get("id")?.as_str()?.to_owned(),
                entry,
            })
        })
        .collect())
}

/// The entry of `name` on every endpoint that answers: all must agree. An
/// endpoint that cannot be reached is reported and left out of the run
/// (`usable` false); if none can, or one does not serve `name`, or two
/// report the model differently, the error says so. A server without a
/// listing (`404`) is taken on trust, with a warning (the answer is then
/// `None` where no endpoint lists models).
pub fn check_served(pool: &pool::Pool, name: &str) -> Result<Checked> {
    let mut found: Option<(String, ServedModel)> = None;
    let mut usable = vec![true; pool.endpoints().len()];
    let mut warnings = Vec::new();
    let mut unreachable = Vec::new();
    for (i, endpoint) in pool.endpoints().iter().enumerate() {
        match served_models(pool, i) {
            Ok(models) => {
                let Some(model) = models.iter().find(|m| m.id == name) else {
                    return Err(Error::NotServed {
                        name: name.to_owned(),
                        endpoint: endpoint.to_string(),
                        serves: models.iter().map(|m| m.id.clone()).collect(),
                    });
                };
                if let Some((other, seen)) = &found
                    && seen != model
                {
                    return Err(Error::Served(format!(
                        "{other} and {endpoint} serve {name:?} differently (GET /models: {} against {}); replicas must serve the same model, started the same way",
                        serde_json::Value::Object(seen.entry.clone()),
                        serde_json::Value::Object(model.entry.clone())
                    )));
                }
                found.get_or_insert((endpoint.to_string(), model.clone()));
            }
            Err(pool::Failure::Status {
                code: 401 | 403, ..
            }) => {
                return Err(Error::Served(format!(
                    "{endpoint}: GET /models: {}",
                    pool.connection().key_hint()
                )));
            }
            Err(pool::Failure::Status {
                code: 404 | 405, ..
            }) => {
                warnings.push(format!(
                    "{endpoint} lists no models (GET /models: not found); served_model {name:?} is not checked there"
                ));
            }
            Err(failure @ pool::Failure::Transport(_))
            | Err(failure @ pool::Failure::Status { .. }) => {
                usable[i] = false;
                unreachable.push(format!("{endpoint}: {failure}"));
                warnings.push(format!(
                    "{endpoint} does not answer ({failure}); it is left out of this run"
                ));
            }
            Err(failure) => {
                return Err(Error::Served(format!("{endpoint}: {failure}")));
            }
        }
    }
    if !usable.iter().any(|&u| u) {
        return Err(Error::Served(format!(
            "no endpoint answers: {}",
            unreachable.join("; ")
        )));
    }
    Ok(Checked {
        model: found.map(|(_, m)| m),
        usable,
        warnings,
    })
}

/// What the start-up check of a served model found.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The model's entry in `GET /models`, where an endpoint lists models.
    pub model: Option<ServedModel>,
    /// Per endpoint: whether it answered (the others are left out).
    pub usable: Vec<bool>,
    /// What is worth telling the user.
    pub warnings: Vec<String>,
}

impl Checked {
    /// The endpoints of `connection` that answered.
    pub fn usable_connection(&self, connection: &Connection) -> Connection {
        let mut c = connection.clone();
        c.endpoints = c
            .endpoints
            .into_iter()
            .zip(&self.usable)
            .filter_map(|(e, &u)| u.then_some(e))
            .collect();
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_urls_without_credentials() {
        let e = Endpoint::parse("http://127.0.0.1:8011/v1/").unwrap();
        assert_eq!(e.to_string(), "http://127.0.0.1:8011/v1");
        assert_eq!(e.join("embeddings"), "http://127.0.0.1:8011/v1/embeddings");
        assert_eq!(e.join("/classify"), "http://127.0.0.1:8011/classify");
        assert!(e.is_loopback() && !e.is_https());
        assert!(
            Endpoint::parse("http://localhost:80")
                .unwrap()
                .is_loopback()
        );
        assert!(Endpoint::parse("http://[::1]:80").unwrap().is_loopback());
        assert!(
            !Endpoint::parse("https://api.openai.com/v1")
                .unwrap()
                .is_loopback()
        );
        for bad in [
            "127.0.0.1:8011",
            "ftp://h/x",
            "http://user:pw@h/v1",
            "http://h/v1?x=1",
            "not a url",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_key_never_goes_over_plain_http_to_another_host_unless_allowed() {
        let key = || Some(("K".to_owned(), ApiKey::new("sk-secret".to_owned())));
        let remote = vec![Endpoint::parse("http://10.0.0.5:8000/v1").unwrap()];
        let t = Duration::from_secs(1);
        let err = Connection::new(remote.clone(), key(), 1, t, 1, false).unwrap_err();
        assert!(err.to_string().contains("allow_insecure_http"), "{err}");
        assert!(!err.to_string().contains("sk-secret"));
        assert!(Connection::new(remote.clone(), key(), 1, t, 1, true).is_ok());
        assert!(Connection::new(remote, None, 1, t, 1, false).is_ok());
        let local = vec![Endpoint::parse("http://127.0.0.1:8000/v1").unwrap()];
        let c = Connection::new(local, key(), 1, t, 1, false).unwrap();
        assert!(!format!("{c:?}").contains("sk-secret"));
    }
}
