//! Requests fanned out over the replicas of one served model.
//!
//! Each endpoint has `max_in_flight` slots, one worker thread each; a free
//! slot takes the next job, so jobs go to whichever endpoint has room. A
//! job that fails for a reason that may pass (connection refused or reset,
//! a timeout, `429`, `5xx`) goes back to the queue, to be taken by another
//! endpoint where one is up; `429` and `503` hold their endpoint for the
//! server's `Retry-After`, other failures for an exponential back-off with
//! jitter (1 s doubling, at most 30 s). An endpoint that fails is set aside:
//! it gets one request at a time (a probe) until one succeeds. An endpoint
//! whose last `retries + 1` attempts all failed is down; when every endpoint
//! is down the run stops, naming each with its last error. A refusal that
//! no retry changes (`400`, `401`, `404`, `413`, `422`, …) stops the run at
//! once. Either way, jobs already answered have been handed to the caller
//! (which stores them), and answers still in flight are awaited and handed
//! over too, so that a rerun resumes after them.

use std::collections::VecDeque;
use std::io::Read;
use std::sync::mpsc;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use super::{Connection, Endpoint};

/// Reads job `i`'s answer (on the worker that got it).
pub type Parse<'a, T> = dyn Fn(usize, &[u8]) -> Result<T, String> + Sync + 'a;

/// One request: `POST {endpoint}/{route}` with a JSON body.
#[derive(Debug, Clone)]
pub struct Job {
    /// The route under the endpoint's base URL (`embeddings`, `rerank`).
    pub route: String,
    /// The JSON body.
    pub body: Vec<u8>,
    /// Tokens the job carries (for rates; the server's own count is used
    /// where its answer has one).
    pub tokens: usize,
}

/// Why one request failed.
#[derive(Debug, Clone)]
pub enum Failure {
    /// The request did not get an answer: refused, reset, timed out.
    Transport(String),
    /// The server answered with an error status.
    Status {
        /// The HTTP status.
        code: u16,
        /// What the server said (its JSON `message`, or the start of the body).
        message: String,
        /// Its `Retry-After`.
        retry_after: Option<Duration>,
    },
    /// The answer could not be used (not the expected JSON, wrong count…).
    Answer(String),
}

impl Failure {
    /// Whether another attempt may succeed.
    pub fn transient(&self) -> bool {
        match self {
            Self::Transport(_) => true,
            Self::Status { code, .. } => matches!(code, 408 | 425 | 429 | 500 | 502 | 503 | 504),
            Self::Answer(_) => false,
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Transport(m) => f.write_str(m),
            Self::Status { code, message, .. } => {
                write!(f, "HTTP {code}")?;
                if !message.is_empty() {
                    write!(f, ": {message}")?;
                }
                Ok(())
            }
            Self::Answer(m) => write!(f, "unusable answer: {m}"),
        }
    }
}

/// How a run of jobs ended badly.
#[derive(Debug, Clone)]
pub enum RunError {
    /// A job was refused in a way no retry changes.
    Refused {
        /// The endpoint that refused it.
        endpoint: String,
        /// Which job.
        job: usize,
        /// The refusal.
        failure: Failure,
    },
    /// Every endpoint is down: each with its last error and how many
    /// attempts in a row failed.
    AllDown(Vec<(String, String, usize)>),
    /// The caller's handler of an answer failed (storing it, say).
    Handler(String),
}

/// What each endpoint did during a run.
#[derive(Debug, Clone, Default)]
pub struct EndpointStats {
    /// The endpoint, as configured.
    pub endpoint: String,
    /// Jobs it answered.
    pub answered: usize,
    /// Tokens of those jobs.
    pub tokens: usize,
    /// Failed attempts.
    pub failures: usize,
    /// Its last error, if any.
    pub last_error: Option<String>,
}

/// The state of a run, for progress.
#[derive(Debug, Clone)]
pub struct Rates {
    /// Jobs answered so far.
    pub answered: usize,
    /// Seconds since the run started.
    pub seconds: f64,
    /// Per endpoint.
    pub endpoints: Vec<EndpointStats>,
}

impl Rates {
    /// `host:port 1234 tok/s, …` (down or set-aside endpoints say so).
    pub fn line(&self, down: &[bool]) -> String {
        self.endpoints
            .iter()
            .zip(down)
            .map(|(e, &down)| {
                let rate = e.tokens as f64 / self.seconds.max(1e-9);
                let host = short(&e.endpoint);
                if down {
                    format!(
                        "{host} set aside ({})",
                        e.last_error.as_deref().unwrap_or("failing")
                    )
                } else {
                    format!("{host} {rate:.0} tok/s")
                }
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// One line per endpoint for a stage summary: requests, tokens, tokens/s
/// over `seconds`, and failures with the last error.
pub fn notes(stats: &[EndpointStats], seconds: f64) -> Vec<String> {
    stats
        .iter()
        .map(|s| {
            let failures = if s.failures > 0 {
                format!(
                    ", {} failed attempts (last: {})",
                    s.failures,
                    s.last_error.as_deref().unwrap_or("?")
                )
            } else {
                String::new()
            };
            format!(
                "{}: {} requests, {} tokens, {:.0} tokens/s{failures}",
                s.endpoint,
                s.answered,
                s.tokens,
                s.tokens as f64 / seconds.max(1e-9)
            )
        })
        .collect()
}

/// "every endpoint … is down: a: its error (n attempts in a row failed); b: …".
pub fn all_down(what: &str, down: &[(String, String, usize)]) -> String {
    format!(
        "every endpoint {what} is down: {}",
        down.iter()
            .map(|(e, err, n)| format!("{e}: {err} ({n} attempts in a row failed)"))
            .collect::<Vec<_>>()
            .join("; ")
    )
}

/// `host:port` of an endpoint URL.
pub(crate) fn short(endpoint: &str) -> &str {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    rest.split('/').next().unwrap_or(rest)
}

/// First back-off after a failure, doubled per failure in a row.
const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest back-off (and the longest `Retry-After` honoured).
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The HTTP client of one served model: its endpoints, key and limits.
#[derive(Debug)]
pub struct Pool {
    endpoints: Vec<Endpoint>,
    connection: Connection,
    agent: ureq::Agent,
}

struct Health {
    /// Failed attempts in a row.
    failures: usize,
    /// No request before this.
    not_before: Instant,
    in_flight: usize,
    stats: EndpointStats,
}

struct State {
    /// Jobs to do: index, and the endpoint that last failed it.
    queue: VecDeque<(usize, Option<usize>)>,
    health: Vec<Health>,
    /// Jobs not yet answered (queued or in flight).
    open: usize,
    stop: bool,
    error: Option<RunError>,
}

enum Message<T> {
    Answer(usize, T),
    Progress,
}

impl Pool {
    /// A client for the endpoints of `connection` (already validated).
    pub fn new(connection: &Connection) -> Self {
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(connection.timeout.min(Duration::from_secs(10)))
            .timeout(connection.timeout)
            .max_idle_connections_per_host(connection.max_in_flight.max(1))
            .max_idle_connections(connection.max_in_flight.max(1) * connection.endpoints.len())
            .user_agent(concat!("skillret-pipeline/", env!("CARGO_PKG_VERSION")))
            .build();
        Self {
            endpoints: connection.endpoints.clone(),
            connection: connection.clone(),
            agent,
        }
    }

    /// The endpoints.
    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    /// The connection settings.
    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// One `GET {endpoint}/{route}`, no retry: the answer's bytes.
    pub fn get(&self, endpoint: usize, route: &str) -> Result<Vec<u8>, Failure> {
        let request = self.agent.get(&self.endpoints[endpoint].join(route));
        self.send(request, None)
    }

    /// One `POST {endpoint}/{route}` with a JSON body, no retry.
    pub fn post(&self, endpoint: usize, route: &str, body: &[u8]) -> Result<Vec<u8>, Failure> {
        let request = self
            .agent
            .post(&self.endpoints[endpoint].join(route))
            .set("Content-Type", "application/json");
        self.send(request, Some(body))
    }

    fn send(&self, mut request: ureq::Request, body: Option<&[u8]>) -> Result<Vec<u8>, Failure> {
        if let Some(key) = &self.connection.api_key {
            request = request.set("Authorization", &format!("Bearer {}", key.expose()));
        }
        let result = match body {
            Some(body) => request.send_bytes(body),
            None => request.call(),
        };
        match result {
            Ok(response) => {
                let mut bytes = Vec::new();
                response
                    .into_reader()
                    .take(1 << 30)
                    .read_to_end(&mut bytes)
                    .map_err(|e| {
                        Failure::Transport(format!("reading the answer: {}", io_text(&e)))
                    })?;
                Ok(bytes)
            }
            Err(ureq::Error::Status(code, response)) => {
                let retry_after = response.header("retry-after").and_then(parse_retry_after);
                let mut bytes = Vec::new();
                let _ = response.into_reader().take(1 << 16).read_to_end(&mut bytes);
                Err(Failure::Status {
                    code,
                    message: server_message(&bytes),
                    retry_after,
                })
            }
            Err(ureq::Error::Transport(t)) => {
                let text = transport_text(&t);
                Err(Failure::Transport(if text == NO_ANSWER {
                    format!(
                        "no answer within {} s (timeout_s)",
                        self.connection.timeout.as_secs_f64()
                    )
                } else {
                    text
                }))
            }
        }
    }

    /// Runs `jobs` over the endpoints. Each answer is parsed by `parse` (on
    /// the worker that got it) and handed to `done` on this thread, in the
    /// order answers arrive; `progress` is called after each answer and
    /// each failure. Returns each endpoint's figures.
    pub fn run<T: Send>(
        &self,
        jobs: &[Job],
        parse: &Parse<'_, T>,
        done: &mut dyn FnMut(usize, T) -> Result<(), String>,
        progress: &mut dyn FnMut(&Rates, &[bool]),
    ) -> Result<Vec<EndpointStats>, RunError> {
        let started = Instant::now();
        let now = Instant::now();
        let state = Mutex::new(State {
            queue: (0..jobs.len()).map(|i| (i, None)).collect(),
            health: self
                .endpoints
                .iter()
                .map(|e| Health {
                    failures: 0,
                    not_before: now,
                    in_flight: 0,
                    stats: EndpointStats {
                        endpoint: e.to_string(),
                        ..EndpointStats::default()
                    },
                })
                .collect(),
            open: jobs.len(),
            stop: jobs.is_empty(),
            error: None,
        });
        let wake = Condvar::new();
        let (tx, rx) = mpsc::channel::<Message<T>>();
        let slots = self.connection.max_in_flight.max(1);
        let mut answered = 0usize;
        std::thread::scope(|scope| {
            for endpoint in 0..self.endpoints.len() {
                for _ in 0..slots {
                    let tx = tx.clone();
                    let (state, wake) = (&state, &wake);
                    scope.spawn(move || self.worker(endpoint, jobs, parse, state, wake, &tx));
                }
            }
            drop(tx);
            // Every answer is handed over, also after a stop: what was
            // answered is kept.
            for message in rx {
                if let Message::Answer(job, value) = message {
                    answered += 1;
                    if let Err(e) = done(job, value) {
                        let mut s = lock(&state);
                        s.stop = true;
                        s.error.get_or_insert(RunError::Handler(e));
                        wake.notify_all();
                    }
                }
                let (rates, down) = {
                    let s = lock(&state);
                    snapshot(&s, answered, started)
                };
                progress(&rates, &down);
            }
        });
        let s = state
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match s.error {
            Some(e) => Err(e),
            None => Ok(s.health.into_iter().map(|h| h.stats).collect()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn worker<T: Send>(
        &self,
        me: usize,
        jobs: &[Job],
        parse: &Parse<'_, T>,
        state: &Mutex<State>,
        wake: &Condvar,
        tx: &mpsc::Sender<Message<T>>,
    ) {
        let retries = self.connection.retries;
        loop {
            // Take a job when this endpoint may send one.
            let job = {
                let mut s = lock(state);
                loop {
                    if s.stop || s.open == 0 {
                        return;
                    }
                    let now = Instant::now();
                    let h = &s.health[me];
                    // A failing endpoint sends one probe at a time.
                    let may_send = now >= h.not_before && (h.failures == 0 || h.in_flight == 0);
                    if may_send && let Some(pos) = pick(&s, me) {
                        let (job, _) = s.queue.remove(pos).unwrap_or((0, None));
                        s.health[me].in_flight += 1;
                        break job;
                    }
                    let wait = if now < h.not_before {
                        h.not_before - now
                    } else {
                        Duration::from_millis(200)
                    };
                    s = wake
                        .wait_timeout(s, wait.min(Duration::from_millis(500)))
                        .map(|(g, _)| g)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
            };
            let spec = &jobs[job];
            let result = self
                .post(me, &spec.route, &spec.body)
                .and_then(|bytes| parse(job, &bytes).map_err(Failure::Answer));
            let mut s = lock(state);
            s.health[me].in_flight -= 1;
            match result {
                Ok(value) => {
                    let h = &mut s.health[me];
                    h.failures = 0;
                    h.stats.answered += 1;
                    h.stats.tokens += spec.tokens;
                    s.open -= 1;
                    let _ = tx.send(Message::Answer(job, value));
                }
                Err(failure) if failure.transient() => {
                    let endpoints = s.health.len();
                    let h = &mut s.health[me];
                    h.failures += 1;
                    h.stats.failures += 1;
                    h.stats.last_error = Some(failure.to_string());
                    let hold = match &failure {
                        Failure::Status {
                            code: 429 | 503,
                            retry_after: Some(after),
                            ..
                        } => (*after).min(BACKOFF_MAX),
                        _ => backoff(h.failures),
                    };
                    h.not_before = Instant::now() + hold;
                    s.queue
                        .push_front((job, Some(me).filter(|_| endpoints > 1)));
                    if s.health.iter().all(|h| h.failures > retries) {
                        s.stop = true;
                        let down = s
                            .health
                            .iter()
                            .map(|h| {
                                (
                                    h.stats.endpoint.clone(),
                                    h.stats.last_error.clone().unwrap_or_default(),
                                    h.failures,
                                )
                            })
                            .collect();
                        s.error.get_or_insert(RunError::AllDown(down));
                    }
                    let _ = tx.send(Message::Progress);
                }
                Err(failure) => {
                    s.health[me].stats.failures += 1;
                    s.health[me].stats.last_error = Some(failure.to_string());
                    s.stop = true;
                    s.error.get_or_insert(RunError::Refused {
                        endpoint: self.endpoints[me].to_string(),
                        job,
                        failure,
                    });
                }
            }
            drop(s);
            wake.notify_all();
        }
    }
}

/// The queue position of the job endpoint `me` should take: the first
/// that did not just fail on it, or any when no other endpoint can take it
/// now.
fn pick(s: &State, me: usize) -> Option<usize> {
    let others_up = s
        .health
        .iter()
        .enumerate()
        .any(|(i, h)| i != me && h.failures == 0);
    s.queue
        .iter()
        .position(|&(_, failed_on)| failed_on != Some(me) || !others_up)
}

fn snapshot(s: &State, answered: usize, started: Instant) -> (Rates, Vec<bool>) {
    (
        Rates {
            answered,
            seconds: started.elapsed().as_secs_f64(),
            endpoints: s.health.iter().map(|h| h.stats.clone()).collect(),
        },
        s.health.iter().map(|h| h.failures > 0).collect(),
    )
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// 1 s, 2 s, 4 s … (at most 30 s) after the n-th failure in a row, ±25%.
fn backoff(failures: usize) -> Duration {
    let base = BACKOFF_BASE.saturating_mul(1 << failures.saturating_sub(1).min(10));
    let base = base.min(BACKOFF_MAX);
    base.mul_f64(rand::random_range(0.75..1.25))
}

/// `Retry-After`: seconds, or an HTTP date.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let when = httpdate::parse_http_date(value).ok()?;
    Some(
        when.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The message in an error answer: OpenAI's `{"error": {"message"}}`,
/// `{"error": "…"}`, `{"message"}`, FastAPI's `{"detail"}`, else the start
/// of the body.
pub fn server_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) {
        let found = value
            .pointer("/error/message")
            .or_else(|| value.get("error"))
            .or_else(|| value.get("message"))
            .or_else(|| value.get("detail"));
        if let Some(found) = found {
            return match found {
                serde_json::Value::String(s) => clip(s),
                other => clip(&other.to_string()),
            };
        }
    }
    clip(text.trim())
}

fn clip(s: &str) -> String {
    const MAX: usize = 400;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn transport_text(t: &ureq::Transport) -> String {
    let io = std::error::Error::source(t).and_then(|s| s.downcast_ref::<std::io::Error>());
    match (t.kind(), io) {
        (_, Some(e)) => io_text(e),
        (ureq::ErrorKind::ConnectionFailed, None) => "connection failed".to_owned(),
        (ureq::ErrorKind::Dns, None) => "the host name does not resolve".to_owned(),
        (kind, None) => match t.message() {
            Some(m) => format!("{kind}: {m}"),
            None => kind.to_string(),
        },
    }
}

const NO_ANSWER: &str = "no answer within the timeout";

fn io_text(e: &std::io::Error) -> String {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused => "connection refused".to_owned(),
        K::ConnectionReset => "connection reset by the server".to_owned(),
        K::ConnectionAborted => "connection aborted".to_owned(),
        K::TimedOut | K::WouldBlock => NO_ANSWER.to_owned(),
        K::UnexpectedEof => "the server closed the connection".to_owned(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        let later = SystemTime::now() + Duration::from_secs(120);
        let got = parse_retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(got > Duration::from_secs(110) && got <= Duration::from_secs(120));
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        for (n, base) in [(1, 1.0), (2, 2.0), (3, 4.0), (6, 30.0), (40, 30.0)] {
            let d = backoff(n).as_secs_f64();
            assert!(d >= base * 0.75 && d <= base * 1.25, "{n}: {d}");
        }
    }

    #[test]
    fn server_messages_are_found_in_the_usual_shapes() {
        assert_eq!(
            server_message(br#"{"error":{"message":"too long"}}"#),
            "too long"
        );
        assert_eq!(
            server_message(br#"{"error":"Input validation error"}"#),
            "Input validation error"
        );
        assert_eq!(server_message(br#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(server_message(b"plain words"), "plain words");
        assert!(server_message(&[b'x'; 1000]).ends_with('…'));
    }

    #[test]
    fn failures_that_may_pass_are_retried() {
        let status = |code| Failure::Status {
            code,
            message: String::new(),
            retry_after: None,
        };
        assert!(Failure::Transport("connection refused".into()).transient());
        for code in [429, 500, 502, 503, 504] {
            assert!(status(code).transient(), "{code}");
        }
        for code in [400, 401, 403, 404, 413, 422] {
            assert!(!status(code).transient(), "{code}");
        }
        assert!(!Failure::Answer("x".into()).transient());
    }
}
