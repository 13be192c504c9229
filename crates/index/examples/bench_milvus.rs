//! A Milvus server (Milvus Lite from `scripts/milvus.sh start`, or any other)
//! against the in-process indexes on the same synthetic unit vectors and
//! queries, in one run: upload (or build) vectors/s, search queries/s and
//! recall@10 against exact search for exact search, HNSW (hnsw_rs), Milvus
//! FLAT and Milvus HNSW.
//!
//! `cargo run --release -p index --example bench_milvus -- --n 100000`
//! (the collections it makes are dropped at the end).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/synthetic.rs"]
mod synthetic;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use clap::Parser;
use index::hnsw::recall_at_k;
use index::{
    ExactIndex, HnswIndex, HnswParams, MilvusIndex, MilvusIndexType, MilvusParams, VectorIndex,
};

/// Benchmark a Milvus server against exact search and in-process HNSW.
#[derive(Parser)]
struct Args {
    /// The server.
    #[arg(long, default_value = "http://127.0.0.1:19530")]
    uri: String,
    /// Corpus size.
    #[arg(long, default_value_t = 100_000)]
    n: usize,
    /// Number of queries (drawn from the same mixture, not from the corpus).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Vector width.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// HNSW M (both HNSWs).
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW ef_construction (both).
    #[arg(long, default_value_t = 200)]
    ef_construction: usize,
    /// HNSW ef at search (both).
    #[arg(long, default_value_t = 128)]
    ef: usize,
    /// Rows per upload request.
    #[arg(long, default_value_t = 1000)]
    upload_batch: usize,
    /// k of recall@k.
    #[arg(long, default_value_t = 10)]
    k: usize,
}

fn main() {
    let args = Args::parse();
    println!(
        "# n {} | queries {} | dim {} | M {} | ef_construction {} | ef {} | {} threads | Milvus at {}",
        args.n,
        args.queries,
        args.dim,
        args.m,
        args.ef_construction,
        args.ef,
        rayon::current_num_threads(),
        args.uri
    );
    let mixture = synthetic::Mixture::new(args.dim, 32, 1000, 0.5, 11);
    let vectors = mixture.sample(args.n, 1);
    let queries = mixture.sample(args.queries, 2);
    let ids: Vec<Arc<str>> = (0..args.n)
        .map(|i| Arc::from(format!("skill-{i:08}")))
        .collect();
    println!(
        "| index | upload or build (vectors/s) | index + load (s) | queries/s | recall@{} |",
        args.k
    );
    println!("|---|---:|---:|---:|---:|");

    let start = Instant::now();
    let exact = ExactIndex::new(ids.clone(), vectors.clone(), args.dim).unwrap();
    let build = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let truth = exact.search(&queries, args.k).unwrap();
    let qps = args.queries as f64 / start.elapsed().as_secs_f64();
    println!(
        "| exact (in process) | {:.0} | – | {qps:.0} | 1.0000 |",
        args.n as f64 / build
    );
    drop(exact);

    let params = HnswParams {
        m: args.m,
        ef_construction: args.ef_construction,
        ef_search: args.ef,
        deterministic: false,
    };
    let start = Instant::now();
    let hnsw = HnswIndex::build(ids.clone(), &vectors, args.dim, params, &|_| {}).unwrap();
    let build = start.elapsed().as_secs_f64();
    let start = Instant::now();
    let found = hnsw.search(&queries, args.k).unwrap();
    let qps = args.queries as f64 / start.elapsed().as_secs_f64();
    println!(
        "| HNSW hnsw_rs (in process) | {:.0} | – | {qps:.0} | {:.4} |",
        args.n as f64 / build,
        recall_at_k(&found, &truth, args.k)
    );
    drop(hnsw);

    for index_type in [MilvusIndexType::Flat, MilvusIndexType::Hnsw] {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = MilvusParams {
            collection: Some(format!("bench_{}_{nanos}", index_type.name())),
            index_type,
            m: args.m,
            ef_construction: args.ef_construction,
            ef: args.ef,
            upload_batch: args.upload_batch,
            timeout_s: 60.0,
            build_timeout_s: 3600.0,
            ..MilvusParams::new(&args.uri)
        };
        let uploaded_at = Mutex::new(None);
        let start = Instant::now();
        let (milvus, upload) =
            MilvusIndex::open(&p, "bench", ids.clone(), &vectors, args.dim, &|done| {
                if done == args.n {
                    *uploaded_at.lock().unwrap() = Some(start.elapsed().as_secs_f64());
                }
            })
            .unwrap();
        let total = start.elapsed().as_secs_f64();
        let upload_s = uploaded_at.lock().unwrap().expect("the upload finished");
        assert_eq!(upload.uploaded, args.n);
        // One warm-up batch, then the timed pass.
        milvus
            .search(&queries[..args.dim * 64.min(args.queries)], args.k)
            .unwrap();
        let start = Instant::now();
        let found = milvus.search(&queries, args.k).unwrap();
        let qps = args.queries as f64 / start.elapsed().as_secs_f64();
        println!(
            "| Milvus {} | {:.0} | {:.1} | {qps:.0} | {:.4} |",
            index_type.name(),
            args.n as f64 / upload_s,
            total - upload_s,
            recall_at_k(&found, &truth, args.k)
        );
        milvus.drop_collection().unwrap();
    }
}
