//! A Milvus collection as a [`VectorIndex`]: the corpus vectors uploaded
//! once (idempotently) with the document ids as primary keys, searched by
//! inner product with a FLAT or HNSW index that the server builds.
//!
//! Every call has a deadline ([`MilvusParams::timeout_s`]): a server that is
//! down or hangs gives an error naming the URI within seconds, never a hang.
//!
//! The collection is tied to the vectors it holds by a key (the caller's
//! content key: model, text recipe, corpus), written into a property of the
//! collection. A collection whose key, dimension or row count does not
//! match is refused with a message saying how to rebuild it; one whose
//! upload was interrupted is completed (rows are upserted by id, so nothing
//! is ever duplicated).
//!
//! Tested against Milvus Lite 3.2.2 (`scripts/milvus.sh`), which implements
//! Milvus's gRPC API but not `AllocTimestamp`: indexes are created with
//! `sync(false)` and the load is awaited instead.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::result::Result;
use std::sync::Arc;
use std::time::Duration;

use eval::ScoredDoc;
use milvus::v2::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{Error, VectorIndex};

/// The primary-key field (the document id).
const ID_FIELD: &str = "id";
/// The vector field.
const VECTOR_FIELD: &str = "vector";
/// The collection property that ties it to its vectors (Milvus Lite keeps
/// properties, not descriptions).
const KEY_PROPERTY: &str = "skillret.vectors";
/// The collection property that records how its index was built.
const INDEX_PROPERTY: &str = "skillret.index";
/// Longest document id a collection takes (Milvus VarChar `max_length`).
const MAX_ID_BYTES: u32 = 1024;
/// Queries per search request.
const QUERY_BATCH: usize = 64;
/// Ids per existence check while completing an upload.
const GET_BATCH: usize = 1000;

/// The index the server builds over the vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum MilvusIndexType {
    /// Exhaustive search: the same rankings as exact search.
    #[default]
    #[serde(rename = "FLAT")]
    Flat,
    /// HNSW graph with `m`, `ef_construction` and `ef`.
    #[serde(rename = "HNSW")]
    Hnsw,
}

impl MilvusIndexType {
    /// Milvus's name of the index type.
    pub fn name(self) -> &'static str {
        match self {
            Self::Flat => "FLAT",
            Self::Hnsw => "HNSW",
        }
    }
}

/// Where the server is and how the collection is indexed (`[retriever.milvus]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MilvusParams {
    /// The server, e.g. `http://127.0.0.1:19530` (`https://` for TLS).
    pub uri: String,
    /// `user:password` or an API key, where the server asks for one (never
    /// written out with the settings).
    #[serde(default, skip_serializing)]
    pub token: Option<String>,
    /// The collection (default: `skillret_` and the first 24 hex digits of
    /// the vectors' content key, so that a collection never holds vectors
    /// of another model, text recipe or corpus).
    #[serde(default)]
    pub collection: Option<String>,
    /// `FLAT` or `HNSW`.
    #[serde(default)]
    pub index_type: MilvusIndexType,
    /// HNSW: links per node.
    #[serde(default = "default_m")]
    pub m: usize,
    /// HNSW: candidate list size while building.
    #[serde(default = "default_ef_construction")]
    pub ef_construction: usize,
    /// HNSW: candidate list size while searching (at least the depth searched).
    #[serde(default = "default_ef")]
    pub ef: usize,
    /// Deadline of every call to the server, in seconds.
    #[serde(default = "default_timeout")]
    pub timeout_s: f64,
    /// Deadline, in seconds, of the calls that wait for the server's own
    /// work on the whole collection: flush, index build, load.
    #[serde(default = "default_build_timeout")]
    pub build_timeout_s: f64,
    /// Rows per upload request.
    #[serde(default = "default_batch")]
    pub upload_batch: usize,
}

fn default_m() -> usize {
    16
}
fn default_ef_construction() -> usize {
    200
}
fn default_ef() -> usize {
    128
}
fn default_timeout() -> f64 {
    10.0
}
fn default_build_timeout() -> f64 {
    600.0
}
fn default_batch() -> usize {
    1000
}

impl MilvusParams {
    /// Parameters for a server at `uri`, every other field at its default.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            token: None,
            collection: None,
            index_type: MilvusIndexType::default(),
            m: default_m(),
            ef_construction: default_ef_construction(),
            ef: default_ef(),
            timeout_s: default_timeout(),
            build_timeout_s: default_build_timeout(),
            upload_batch: default_batch(),
        }
    }

    /// Checks what can be checked without the server.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |m: String| Err(Error::Invalid(m));
        let rest = self
            .uri
            .strip_prefix("http://")
            .or_else(|| self.uri.strip_prefix("https://"));
        match rest {
            Some(host) if !host.is_empty() && !host.starts_with(['/', ':']) => {}
            _ => {
                return bad(format!(
                    "uri {:?} is not a Milvus address like http://127.0.0.1:19530 (http:// or https://, then host and port)",
                    self.uri
                ));
            }
        }
        if let Some(name) = &self.collection {
            check_collection_name(name)?;
        }
        if !(2..=2048).contains(&self.m) {
            return bad(format!("m = {} is outside 2..=2048", self.m));
        }
        if self.ef_construction == 0 || self.ef == 0 {
            return bad("ef_construction and ef must be positive".to_owned());
        }
        for (key, value) in [
            ("timeout_s", self.timeout_s),
            ("build_timeout_s", self.build_timeout_s),
        ] {
            if !(value.is_finite() && value > 0.0 && value <= 86_400.0) {
                return bad(format!(
                    "{key} = {value} is not a number of seconds in (0, 86400]"
                ));
            }
        }
        if self.upload_batch == 0 {
            return bad("upload_batch must be positive".to_owned());
        }
        Ok(())
    }

    /// The collection for vectors of content key `key`.
    pub fn collection_name(&self, key: &str) -> String {
        self.collection.clone().unwrap_or_else(|| {
            let hex: String = key
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(24)
                .collect();
            format!("skillret_{hex}")
        })
    }

    fn timeout(&self) -> Duration {
        Duration::from_secs_f64(self.timeout_s)
    }

    fn build_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.build_timeout_s)
    }
}

/// Milvus's rule for collection names: a letter or `_` first, then
/// letters, digits and `_`, at most 255 characters.
fn check_collection_name(name: &str) -> Result<(), Error> {
    let mut chars = name.chars();
    let ok = name.len() <= 255
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "collection {name:?} is not a Milvus collection name (a letter or _ first, then letters, digits and _, at most 255)"
        )))
    }
}

/// What opening a collection did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The collection.
    pub collection: String,
    /// Rows found there already.
    pub found: usize,
    /// Rows uploaded now.
    pub uploaded: usize,
    /// Whether the index was built now (not found built).
    pub indexed: bool,
}

/// A loaded Milvus collection, searched through [`VectorIndex`].
pub struct MilvusIndex {
    runtime: tokio::runtime::Runtime,
    client: ClientV2,
    params: MilvusParams,
    collection: String,
    ids: Vec<Arc<str>>,
    position: HashMap<Arc<str>, usize>,
    dim: usize,
}

impl std::fmt::Debug for MilvusIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MilvusIndex")
            .field("uri", &self.params.uri)
            .field("collection", &self.collection)
            .field("len", &self.ids.len())
            .field("dim", &self.dim)
            .finish_non_exhaustive()
    }
}

/// What ties a collection to its vectors: the key, the dimension, the count.
fn description(key: &str, dim: usize, count: usize) -> String {
    format!("skillret vectors key={key} dim={dim} count={count}")
}

impl MilvusIndex {
    /// Connects to the server and opens the collection for vectors of
    /// content `key`: reuses it when it matches, completes it when an upload
    /// was interrupted, creates and uploads it otherwise; then makes sure
    /// the index is built and the collection loaded. `progress(rows)` is
    /// called as rows are uploaded.
    pub fn open(
        params: &MilvusParams,
        key: &str,
        ids: Vec<Arc<str>>,
        vectors: &[f32],
        dim: usize,
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<(Self, Upload), Error> {
        params.validate()?;
        if dim == 0 || vectors.len() != ids.len() * dim {
            return Err(Error::Invalid(format!(
                "{} floats are not {} vectors of dimension {dim}",
                vectors.len(),
                ids.len()
            )));
        }
        let mut position = HashMap::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            if id.len() > MAX_ID_BYTES as usize {
                return Err(Error::Invalid(format!(
                    "document id {:?}… is longer than {MAX_ID_BYTES} bytes",
                    &id[..32]
                )));
            }
            if position.insert(Arc::clone(id), i).is_some() {
                return Err(Error::Invalid(format!("document id {id:?} appears twice")));
            }
        }
        let runtime = runtime()?;
        let collection = params.collection_name(key);
        let client = runtime.block_on(connect(params))?;
        let mut index = Self {
            runtime,
            client,
            params: params.clone(),
            collection,
            ids,
            position,
            dim,
        };
        let upload = index.prepare(key, vectors, progress)?;
        Ok((index, upload))
    }

    /// The collection's name.
    pub fn collection(&self) -> &str {
        &self.collection
    }

    /// Drops the collection from the server (its rows and index).
    pub fn drop_collection(self) -> Result<(), Error> {
        let request = DropCollectionRequest::builder()
            .collection_name(&self.collection)
            .build()
            .map_err(|e| self.failed("drop_collection", &e.to_string()))?;
        self.call("drop_collection", self.client.drop_collection(request))
    }

    /// Runs one call to the server under the deadline.
    fn call<T>(
        &self,
        what: &str,
        future: impl Future<Output = milvus::v2::error::Result<T>>,
    ) -> Result<T, Error> {
        self.call_within(self.params.timeout(), what, future)
    }

    /// Runs one call to the server under `deadline`.
    fn call_within<T>(
        &self,
        deadline: Duration,
        what: &str,
        future: impl Future<Output = milvus::v2::error::Result<T>>,
    ) -> Result<T, Error> {
        self.runtime
            .block_on(async { tokio::time::timeout(deadline, future).await })
            .map_err(|_| {
                self.failed(
                    what,
                    &format!("no answer within {} s", deadline.as_secs_f64()),
                )
            })?
            .map_err(|e| self.failed(what, &e.to_string()))
    }

    fn failed(&self, what: &str, why: &str) -> Error {
        Error::Milvus(format!(
            "{what} on collection {} at {} failed: {why}",
            self.collection, self.params.uri
        ))
    }

    /// Creates, checks, completes, indexes and loads the collection.
    fn prepare(
        &mut self,
        key: &str,
        vectors: &[f32],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Upload, Error> {
        let n = self.ids.len();
        let expected = description(key, self.dim, n);
        let name = self.collection.clone();
        let exists = self
            .call(
                "has_collection",
                self.client.has_collection(
                    HasCollectionRequest::builder()
                        .collection_name(&name)
                        .build()
                        .map_err(|e| self.failed("has_collection", &e.to_string()))?,
                ),
            )?
            .exists();
        let mut properties = HashMap::new();
        if exists {
            let described = self.call(
                "describe_collection",
                self.client.describe_collection(
                    DescribeCollectionRequest::builder()
                        .collection_name(&name)
                        .build()
                        .map_err(|e| self.failed("describe_collection", &e.to_string()))?,
                ),
            )?;
            let found = described
                .description()
                .get_properties()
                .get(KEY_PROPERTY)
                .cloned()
                .unwrap_or_default();
            if found != expected {
                return Err(self.refuse(&format!(
                    "it holds other vectors ({found:?}; this run needs {expected:?})"
                )));
            }
            properties = described.description().get_properties().clone();
        } else {
            let schema = CollectionSchema::new()
                .description(&expected)
                .add_field(
                    FieldSchema::new()
                        .name(ID_FIELD)
                        .data_type(DataType::VarChar)
                        .max_length(MAX_ID_BYTES)
                        .primary_key(true),
                )
                .add_field(
                    FieldSchema::new()
                        .name(VECTOR_FIELD)
                        .data_type(DataType::FloatVector)
                        .dimension(self.dim as u32),
                );
            let request = CreateCollectionRequest::builder()
                .collection_name(&name)
                .description(&expected)
                .properties(HashMap::from([(KEY_PROPERTY.to_owned(), expected.clone())]))
                .schema(schema)
                .consistency_level(ConsistencyLevel::Strong)
                .build()
                .map_err(|e| self.failed("create_collection", &e.to_string()))?;
            self.call("create_collection", self.client.create_collection(request))?;
        }
        // A collection answers queries only while loaded (a restarted server
        // holds its collections released), and it loads only with an index:
        // an existing one is indexed and loaded before its ids are listed.
        // A new one is uploaded first and indexed after, so that the server
        // builds its index over every row at once.
        let mut indexed = false;
        let present = if exists {
            indexed = self.ensure_index(&properties, false)?;
            self.load()?;
            self.present_ids()?
        } else {
            HashSet::new()
        };
        if present
            .iter()
            .any(|id| !self.position.contains_key(id.as_str()))
        {
            return Err(self.refuse("it holds ids that are not documents of this corpus"));
        }
        let missing: Vec<usize> = (0..n)
            .filter(|&i| !present.contains(&*self.ids[i]))
            .collect();
        let found = present.len();
        let mut done = 0;
        for chunk in missing.chunks(self.params.upload_batch) {
            let ids: Vec<String> = chunk.iter().map(|&i| self.ids[i].to_string()).collect();
            let rows: Vec<Vec<f32>> = chunk
                .iter()
                .map(|&i| vectors[i * self.dim..(i + 1) * self.dim].to_vec())
                .collect();
            let rows = InsertRequest::builder()
                .collection_name(&name)
                .columns(vec![
                    FieldData::varchar(ID_FIELD, ids),
                    FieldData::float_vector(VECTOR_FIELD, rows),
                ])
                .build()
                .map_err(|e| self.failed("upsert", &e.to_string()))?;
            let request = UpsertRequest::builder()
                .insert(rows)
                .build()
                .map_err(|e| self.failed("upsert", &e.to_string()))?;
            self.call("upsert", self.client.upsert(request))?;
            done += chunk.len();
            progress(done);
        }
        if !missing.is_empty() {
            let request = FlushRequest::builder()
                .collection_names([name.as_str()])
                .build()
                .map_err(|e| self.failed("flush", &e.to_string()))?;
            self.call_within(
                self.params.build_timeout(),
                "flush",
                self.client.flush(request),
            )?;
            // Rows added to an indexed collection are rebuilt into its index
            // (Milvus Lite would otherwise search them by brute force).
            indexed |= self.ensure_index(&properties, exists)?;
            self.load()?;
        }
        let count = self.count()?;
        if count != n {
            return Err(self.refuse(&format!(
                "it holds {count} rows after the upload, the corpus has {n}"
            )));
        }
        Ok(Upload {
            collection: name,
            found,
            uploaded: missing.len(),
            indexed,
        })
    }

    fn refuse(&self, why: &str) -> Error {
        Error::Refused {
            path: format!("{}/{}", self.params.uri, self.collection).into(),
            why: format!(
                "{why}. To rebuild it, drop it (Python: `pymilvus.MilvusClient({:?}).drop_collection({:?})`) and run again, or set [retriever.milvus] collection to a new name",
                self.params.uri, self.collection
            ),
        }
    }

    /// The ids the collection holds (in batches of the corpus's ids).
    fn present_ids(&self) -> Result<HashSet<String>, Error> {
        let mut present = HashSet::new();
        for chunk in self.ids.chunks(GET_BATCH) {
            // A literal filter: Milvus Lite does not take the filter
            // templates that `get` sends.
            let listed: Vec<String> = chunk
                .iter()
                .map(|id| serde_json::to_string(&**id).unwrap_or_default())
                .collect();
            let request = QueryRequest::builder()
                .collection_name(&self.collection)
                .filter(format!("{ID_FIELD} in [{}]", listed.join(",")))
                .output_fields([ID_FIELD])
                .limit(chunk.len() as i64)
                .consistency_level(ConsistencyLevel::Strong)
                .build()
                .map_err(|e| self.failed("query", &e.to_string()))?;
            let response = self.call("query", self.client.query(request))?;
            for row in response
                .results()
                .rows()
                .map_err(|e| self.failed("query", &e.to_string()))?
            {
                match row.get(ID_FIELD) {
                    Ok(ResultValue::String(id)) => {
                        present.insert(id.to_string());
                    }
                    other => {
                        return Err(self.failed("query", &format!("unexpected id value {other:?}")));
                    }
                }
            }
        }
        // Rows not among the corpus's ids show up in the count.
        let count = self.count()?;
        if count > present.len() {
            return Err(self.refuse(&format!(
                "it holds {count} rows, {} of them documents of this corpus",
                present.len()
            )));
        }
        Ok(present)
    }

    /// `count(*)` with strong consistency.
    fn count(&self) -> Result<usize, Error> {
        let request = QueryRequest::builder()
            .collection_name(&self.collection)
            .filter("")
            .output_fields(["count(*)"])
            .consistency_level(ConsistencyLevel::Strong)
            .build()
            .map_err(|e| self.failed("count", &e.to_string()))?;
        let response = self.call("count", self.client.query(request))?;
        let row = response
            .results()
            .rows()
            .map_err(|e| self.failed("count", &e.to_string()))?
            .next()
            .ok_or_else(|| self.failed("count", "no row"))?;
        let count = row
            .get_i64("count(*)")
            .map_err(|e| self.failed("count", &e.to_string()))?;
        usize::try_from(count).map_err(|_| self.failed("count", "negative count"))
    }

    /// Loads the collection (waiting for its index).
    fn load(&self) -> Result<(), Error> {
        let request = LoadCollectionRequest::builder()
            .collection_name(&self.collection)
            .sync(true)
            .timeout_ms((self.params.build_timeout_s * 1000.0) as i64)
            .build()
            .map_err(|e| self.failed("load_collection", &e.to_string()))?;
        self.call_within(
            self.params.build_timeout(),
            "load_collection",
            self.client.load_collection(request),
        )
    }

    /// The index this run asks for.
    fn index_param(&self) -> IndexParam {
        let mut extra = HashMap::new();
        let index_type = match self.params.index_type {
            MilvusIndexType::Flat => IndexType::Flat,
            MilvusIndexType::Hnsw => {
                extra.insert("M".to_owned(), self.params.m.to_string());
                extra.insert(
                    "efConstruction".to_owned(),
                    self.params.ef_construction.to_string(),
                );
                IndexType::Hnsw
            }
        };
        IndexParam::new()
            .field_name(VECTOR_FIELD)
            .index_type(index_type)
            .metric_type(MetricType::Ip)
            .extra_params(extra)
    }

    /// Builds the index unless one with this run's parameters is there and
    /// `rebuild` is false (an index there otherwise is dropped first);
    /// whether it built one.
    fn ensure_index(
        &self,
        properties: &HashMap<String, String>,
        rebuild: bool,
    ) -> Result<bool, Error> {
        // Milvus Lite has no ListIndexes: ask for the vector field's index,
        // which is error 700 where there is none.
        let request = DescribeIndexRequest::builder()
            .collection_name(&self.collection)
            .field_name(VECTOR_FIELD)
            .build()
            .map_err(|e| self.failed("describe_index", &e.to_string()))?;
        let found = match self.call("describe_index", self.client.describe_index(request)) {
            Ok(described) => described.indexes().first().cloned(),
            // Milvus's ErrIndexNotFound.
            Err(Error::Milvus(why)) if why.contains("code=700") => None,
            Err(e) => return Err(e),
        };
        // What it was built with, as recorded beside it (Milvus Lite does not
        // report an index's parameters).
        let wanted = self.index_description();
        if let Some(found) = found {
            if !rebuild && properties.get(INDEX_PROPERTY) == Some(&wanted) {
                return Ok(false);
            }
            // Built with other parameters: release, drop, build anew.
            let request = ReleaseCollectionRequest::builder()
                .collection_name(&self.collection)
                .build()
                .map_err(|e| self.failed("release_collection", &e.to_string()))?;
            self.call(
                "release_collection",
                self.client.release_collection(request),
            )?;
            let request = DropIndexRequest::builder()
                .collection_name(&self.collection)
                .field_name(VECTOR_FIELD)
                .index_name(found.get_index_name())
                .build()
                .map_err(|e| self.failed("drop_index", &e.to_string()))?;
            self.call("drop_index", self.client.drop_index(request))?;
        }
        // Milvus Lite has no AllocTimestamp, which the synchronous path waits
        // on: create without waiting; the load waits for the index.
        let request = CreateIndexRequest::builder()
            .collection_name(&self.collection)
            .index_param(self.index_param())
            .sync(false)
            .build()
            .map_err(|e| self.failed("create_index", &e.to_string()))?;
        // Milvus Lite builds the index inside the call; the client may retry
        // an attempt that outlives its transport, and the retry then finds
        // the index that attempt built (Milvus's "index already exists").
        match self.call_within(
            self.params.build_timeout(),
            "create_index",
            self.client.create_index(request),
        ) {
            Ok(()) => {}
            Err(Error::Milvus(why)) if why.contains("code=35") => {}
            Err(e) => return Err(e),
        }
        let request = AlterCollectionPropertiesRequest::builder()
            .collection_name(&self.collection)
            .property(INDEX_PROPERTY, wanted)
            .build()
            .map_err(|e| self.failed("alter_collection_properties", &e.to_string()))?;
        self.call(
            "alter_collection_properties",
            self.client.alter_collection_properties(request),
        )?;
        Ok(true)
    }

    /// The index this run asks for, in words (recorded in [`INDEX_PROPERTY`]).
    fn index_description(&self) -> String {
        match self.params.index_type {
            MilvusIndexType::Flat => "FLAT IP".to_owned(),
            MilvusIndexType::Hnsw => format!(
                "HNSW IP M={} efConstruction={}",
                self.params.m, self.params.ef_construction
            ),
        }
    }
}

/// Connects to the server of `params` and hangs up: an error naming the URI
/// (within [`MilvusParams::timeout_s`]) where it does not answer.
pub fn check_server(params: &MilvusParams) -> Result<(), Error> {
    params.validate()?;
    let runtime = runtime()?;
    runtime.block_on(connect(params)).map(drop)
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Invalid(format!("cannot start the Milvus client's runtime: {e}")))
}

async fn connect(params: &MilvusParams) -> Result<ClientV2, Error> {
    let config = ConnectConfig::new()
        .uri(params.uri.clone())
        .connect_timeout(params.timeout())
        .rpc_timeout(params.timeout());
    let config = match &params.token {
        Some(token) => config.token(token.clone()),
        None => config,
    };
    match tokio::time::timeout(params.timeout(), ClientV2::new(&config)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(unreachable(params, &e.to_string())),
        Err(_) => Err(unreachable(params, "no answer")),
    }
}

fn unreachable(params: &MilvusParams, why: &str) -> Error {
    Error::Milvus(format!(
        "cannot reach Milvus at {} within {} s ({why}). Is the server running? A local one: scripts/milvus.sh start",
        params.uri, params.timeout_s
    ))
}

impl VectorIndex for MilvusIndex {
    fn ids(&self) -> &[Arc<str>] {
        &self.ids
    }

    fn dim(&self) -> usize {
        self.dim
    }

    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<ScoredDoc>>, Error> {
        let count = crate::query_count(queries, self.dim)?;
        let k = k.min(self.ids.len());
        if k == 0 {
            return Ok(vec![Vec::new(); count]);
        }
        let mut extra = HashMap::new();
        if self.params.index_type == MilvusIndexType::Hnsw {
            extra.insert("ef".to_owned(), self.params.ef.max(k).to_string());
        }
        let mut lists = Vec::with_capacity(count);
        for batch in queries.chunks(QUERY_BATCH * self.dim) {
            let vectors: Vec<Vec<f32>> = batch.chunks(self.dim).map(<[f32]>::to_vec).collect();
            let request = SearchRequest::builder()
                .collection_name(&self.collection)
                .vector_field(VECTOR_FIELD)
                .vectors(SearchVectors::Float(vectors))
                .limit(k as i64)
                .metric_type(MetricType::Ip)
                .extra_params(extra.clone())
                .consistency_level(ConsistencyLevel::Strong)
                .build()
                .map_err(|e| self.failed("search", &e.to_string()))?;
            let response = self.call("search", self.client.search(request))?;
            for result in response.results().iter() {
                let Ids::VarChar(ids) = result.get_ids() else {
                    return Err(self.failed("search", "ids are not strings"));
                };
                let mut list = Vec::with_capacity(ids.len());
                for (id, &score) in ids.iter().zip(result.get_scores()) {
                    let &i = self.position.get(id.as_str()).ok_or_else(|| {
                        self.failed("search", &format!("unknown document id {id:?}"))
                    })?;
                    list.push(ScoredDoc {
                        id: Arc::clone(&self.ids[i]),
                        score: f64::from(score),
                    });
                }
                eval::sort_trec(&mut list);
                lists.push(list);
            }
        }
        if lists.len() != count {
            return Err(self.failed(
                "search",
                &format!("{} result lists for {count} queries", lists.len()),
            ));
        }
        Ok(lists)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_checked_before_any_call() {
        assert!(
            MilvusParams::new("http://127.0.0.1:19530")
                .validate()
                .is_ok()
        );
        for uri in ["127.0.0.1:19530", "http://", "grpc://x:1", "http://:19530"] {
            let err = MilvusParams::new(uri).validate().unwrap_err().to_string();
            assert!(err.contains("is not a Milvus address"), "{uri}: {err}");
        }
        let mut p = MilvusParams::new("http://h:1");
        p.collection = Some("1abc".into());
        assert!(p.validate().is_err());
        p.collection = Some("skills-v2".into());
        assert!(p.validate().is_err());
        p.collection = Some("_skills_v2".into());
        assert!(p.validate().is_ok());
        p.m = 1;
        assert!(p.validate().unwrap_err().to_string().contains("m = 1"));
        p.m = 16;
        p.timeout_s = 0.0;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("timeout_s = 0")
        );
        p.timeout_s = 10.0;
        p.build_timeout_s = f64::NAN;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .contains("build_timeout_s = NaN")
        );
    }

    #[test]
    fn the_default_collection_follows_the_content_key() {
        let p = MilvusParams::new("http://h:1");
        let a = p.collection_name("0123456789abcdef0123456789abcdef");
        assert_eq!(a, "skillret_0123456789abcdef01234567");
        assert_ne!(a, p.collection_name("f123456789abcdef0123456789abcdef"));
        check_collection_name(&a).unwrap();
        let named = MilvusParams {
            collection: Some("mine".into()),
            ..p
        };
        assert_eq!(named.collection_name("0123"), "mine");
    }
}
