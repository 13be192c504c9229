//! Embedding models behind a server: the OpenAI embeddings API
//! ([`RemoteEmbedder`], `openai.rs`), sending what the native engine would
//! embed (token ids, or text cut exactly where its tokens end) so that a
//! served model gives the native vectors. The HTTP side (endpoints, keys,
//! the replica pool with retries) is the `served` crate's.

mod openai;

pub use openai::{InputMode, PROBE_TEXT, RemoteEmbedder, RemoteOptions};
