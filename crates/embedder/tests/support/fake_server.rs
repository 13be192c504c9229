//! A small OpenAI-style server that injects faults, for the served-model
//! tests of the faults a real vLLM cannot produce on demand (429 with
//! Retry-After, 503) and for runs without vLLM installed.
//!
//! It speaks just enough HTTP/1.1 (keep-alive, Content-Length bodies):
//! `GET /v1/models`, `POST /v1/embeddings` (token-id or text inputs; each
//! vector a fixed function of the input and the server's seed, so a test
//! knows what the right answer is) and `POST /v1/rerank`. Faults are queued
//! and served one per request, in order, before normal answers resume.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// What one request gets instead of an answer.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    /// An error status, with a `Retry-After` header when given.
    Status {
        code: u16,
        retry_after: Option<String>,
        message: String,
    },
    /// No answer for this long (then the connection closes).
    Hang(Duration),
    /// The connection closes without an answer.
    Close,
}

/// What the server does; tests change it while it runs.
#[derive(Debug)]
pub(crate) struct Behaviour {
    /// Names `GET /v1/models` lists.
    pub(crate) served: Vec<String>,
    /// `owned_by` of the listed models.
    pub(crate) owned_by: String,
    /// `max_model_len` of the listed models; longer inputs get 400.
    pub(crate) max_model_len: usize,
    /// Changes every vector: another seed is another model.
    pub(crate) seed: u64,
    /// Width of the vectors.
    pub(crate) dim: usize,
    /// The key `Authorization: Bearer …` must carry, if any.
    pub(crate) key: Option<String>,
    /// Faults for the next requests to /embeddings or /rerank.
    pub(crate) faults: VecDeque<Fault>,
    /// Requests to /embeddings and /rerank answered or faulted.
    pub(crate) requests: usize,
    /// Inputs embedded (or documents scored).
    pub(crate) inputs: usize,
    /// Bodies of the embedding requests, as received.
    pub(crate) bodies: Vec<Value>,
    /// Delay before each answer.
    pub(crate) delay: Duration,
}

impl Default for Behaviour {
    fn default() -> Self {
        Self {
            served: vec!["fake-model".to_owned()],
            owned_by: "vllm".to_owned(),
            max_model_len: 512,
            seed: 1,
            dim: 8,
            key: None,
            faults: VecDeque::new(),
            requests: 0,
            inputs: 0,
            bodies: Vec::new(),
            delay: Duration::ZERO,
        }
    }
}

/// A running fake server on 127.0.0.1.
pub(crate) struct FakeServer {
    pub(crate) port: u16,
    pub(crate) behaviour: Arc<Mutex<Behaviour>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeServer {
    /// Starts on a free port.
    pub(crate) fn start(behaviour: Behaviour) -> Self {
        Self::start_on(0, Arc::new(Mutex::new(behaviour)))
    }

    /// Starts on `port` (0: any free one) with shared behaviour (a restart
    /// keeps it).
    pub(crate) fn start_on(port: u16, behaviour: Arc<Mutex<Behaviour>>) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (b, s) = (Arc::clone(&behaviour), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (b, s) = (Arc::clone(&b), Arc::clone(&s));
                        std::thread::spawn(move || serve(stream, &b, &s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Self {
            port,
            behaviour,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Stops listening and ends open connections' answers (as a killed server).
    pub(crate) fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// The vector the server gives `input` (a JSON token list or string).
pub(crate) fn vector(input: &Value, seed: u64, dim: usize) -> Vec<f32> {
    let text = input.to_string();
    (0..dim)
        .map(|j| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9) ^ j as u64;
            for b in text.bytes() {
                h ^= u64::from(b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
            ((h >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// The score the server gives (query, document).
pub(crate) fn score(query: &str, document: &str, seed: u64) -> f32 {
    vector(&json!([query, document]), seed, 1)[0]
}

fn serve(stream: TcpStream, behaviour: &Mutex<Behaviour>, stop: &AtomicBool) {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // As the servers it stands in for (asyncio, under vLLM's uvicorn, sets TCP_NODELAY).
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        if stop.load(Ordering::SeqCst) {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(_) => return,
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_owned(),
            parts.next().unwrap_or("").to_owned(),
        );
        let mut length = 0usize;
        let mut auth = None;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = v.trim().parse().unwrap_or(0),
                    "authorization" => auth = Some(v.trim().to_owned()),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let answer = answer(&method, &path, &body, auth.as_deref(), behaviour);
        match answer {
            Answer::Json(code, retry_after, value) => {
                let delay = behaviour.lock().unwrap().delay;
                std::thread::sleep(delay);
                if stop.load(Ordering::SeqCst) {
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
                let text = value.to_string();
                let mut head = format!(
                    "HTTP/1.1 {code} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
                    reason(code),
                    text.len()
                );
                if let Some(r) = retry_after {
                    head.push_str(&format!("Retry-After: {r}\r\n"));
                }
                head.push_str("\r\n");
                // One write: a head and body written apart wait for the client's delayed
                // acknowledgement (Nagle's algorithm), 40 ms an answer.
                head.push_str(&text);
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
            }
            Answer::Hang(d) => {
                let until = std::time::Instant::now() + d;
                while std::time::Instant::now() < until && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
            Answer::Close => {
                let _ = stream.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

enum Answer {
    Json(u16, Option<String>, Value),
    Hang(Duration),
    Close,
}

fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn error(code: u16, message: &str) -> Answer {
    Answer::Json(
        code,
        None,
        json!({"error": {"message": message, "type": "error", "code": code}}),
    )
}

fn answer(
    method: &str,
    path: &str,
    body: &[u8],
    auth: Option<&str>,
    behaviour: &Mutex<Behaviour>,
) -> Answer {
    let mut b = behaviour.lock().unwrap();
    if let Some(key) = &b.key
        && auth != Some(format!("Bearer {key}").as_str())
    {
        return error(401, "Unauthorized");
    }
    match (method, path) {
        ("GET", "/v1/models") => Answer::Json(
            200,
            None,
            json!({"object": "list", "data": b.served.iter().map(|id| json!({
                "id": id, "object": "model", "created": 1_700_000_000u64 + b.requests as u64,
                "owned_by": b.owned_by, "root": "/models/x", "parent": null,
                "max_model_len": b.max_model_len, "permission": [{"id": "p"}]
            })).collect::<Vec<_>>()}),
        ),
        ("POST", "/v1/embeddings" | "/v1/rerank") => {
            b.requests += 1;
            if let Some(fault) = b.faults.pop_front() {
                return match fault {
                    Fault::Status {
                        code,
                        retry_after,
                        message,
                    } => Answer::Json(code, retry_after, json!({"error": {"message": message}})),
                    Fault::Hang(d) => Answer::Hang(d),
                    Fault::Close => Answer::Close,
                };
            }
            let Ok(request) = serde_json::from_slice::<Value>(body) else {
                return error(400, "not JSON");
            };
            if !b
                .served
                .iter()
                .any(|s| Some(s.as_str()) == request["model"].as_str())
            {
                return error(
                    404,
                    &format!("The model `{}` does not exist.", request["model"]),
                );
            }
            if path == "/v1/rerank" {
                let query = request["query"].as_str().unwrap_or("");
                let docs = request["documents"].as_array().cloned().unwrap_or_default();
                b.inputs += docs.len();
                let results: Vec<Value> = docs
                    .iter()
                    .enumerate()
                    .map(|(i, d)| json!({"index": i, "relevance_score": score(query, d.as_str().unwrap_or(""), b.seed)}))
                    .collect();
                return Answer::Json(
                    200,
                    None,
                    json!({"results": results, "usage": {"prompt_tokens": 1}}),
                );
            }
            let inputs = request["input"].as_array().cloned().unwrap_or_default();
            for input in &inputs {
                let len = match input {
                    Value::Array(ids) => ids.len(),
                    Value::String(s) => s.split_whitespace().count(),
                    _ => 0,
                };
                if len > b.max_model_len {
                    return error(
                        400,
                        &format!(
                            "This model's maximum context length is {} tokens. However, you requested {len} tokens in the input for embedding generation. Please reduce the length of the input.",
                            b.max_model_len
                        ),
                    );
                }
            }
            b.inputs += inputs.len();
            b.bodies.push(request.clone());
            let (seed, dim) = (b.seed, b.dim);
            let base64 = request["encoding_format"] == "base64";
            let data: Vec<Value> = inputs
                .iter()
                .enumerate()
                .map(|(i, input)| {
                    let v = vector(input, seed, dim);
                    let embedding = if base64 {
                        use base64::Engine as _;
                        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                        json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                    } else {
                        json!(v)
                    };
                    json!({"index": i, "object": "embedding", "embedding": embedding})
                })
                .collect();
            Answer::Json(
                200,
                None,
                json!({"object": "list", "data": data, "usage": {"prompt_tokens": inputs.len()}}),
            )
        }
        _ => error(404, "Not Found"),
    }
}
