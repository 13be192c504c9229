//! HNSW against exact search on synthetic unit vectors, in one run: build
//! time, queries/s and recall@10 per ef, exact queries/s, memory.
//!
//! `cargo run --release -p index --example bench_hnsw -- --n 1000000`
//! (scripts/bench_index.sh runs the 100k and 1M cases).
#![allow(clippy::print_stdout, clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/support/synthetic.rs"]
mod synthetic;

use std::sync::Arc;
use std::time::Instant;

use clap::Parser;
use index::hnsw::recall_at_k;
use index::{ExactIndex, HnswIndex, HnswParams, VectorIndex};

/// Benchmark HNSW (hnsw_rs) against exact inner-product search.
#[derive(Parser)]
struct Args {
    /// Corpus size.
    #[arg(long, default_value_t = 100_000)]
    n: usize,
    /// Number of queries (drawn from the same mixture, not from the corpus).
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Vector width.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Latent (intrinsic) dimension of the data; `--rank <dim>` gives an
    /// isotropic mixture with no low-dimensional structure.
    #[arg(long, default_value_t = 32)]
    rank: usize,
    /// Clusters in the mixture.
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Noise length around a cluster centre (centres have length 1).
    #[arg(long, default_value_t = 0.5)]
    spread: f32,
    /// HNSW M.
    #[arg(long, default_value_t = 16)]
    m: usize,
    /// HNSW ef_construction.
    #[arg(long, default_value_t = 100)]
    ef_construction: usize,
    /// ef values to search with.
    #[arg(long, value_delimiter = ',', default_value = "16,32,64,128,256")]
    ef: Vec<usize>,
    /// Build one vector at a time (deterministic, single-threaded).
    #[arg(long)]
    deterministic: bool,
    /// k of recall@k.
    #[arg(long, default_value_t = 10)]
    k: usize,
}

fn main() {
    let args = Args::parse();
    let threads = rayon::current_num_threads();
    println!(
        "# n {} | queries {} | dim {} | rank {} | clusters {} | spread {} | M {} | ef_construction {} | {} build | {threads} threads",
        args.n,
        args.queries,
        args.dim,
        args.rank,
        args.clusters,
        args.spread,
        args.m,
        args.ef_construction,
        if args.deterministic {
            "deterministic"
        } else {
            "parallel"
        },
    );
    let mixture = synthetic::Mixture::new(args.dim, args.rank, args.clusters, args.spread, 11);
    let vectors = mixture.sample(args.n, 1);
    let queries = mixture.sample(args.queries, 2);
    let ids: Vec<Arc<str>> = (0..args.n).map(|i| Arc::from(format!("{i:08}"))).collect();
    let base = memory_mib("VmRSS");

    let exact = ExactIndex::new(ids.clone(), vectors.clone(), args.dim).unwrap();
    let start = Instant::now();
    let truth = exact.search(&queries, args.k).unwrap();
    let exact_qps = args.queries as f64 / start.elapsed().as_secs_f64();
    println!("exact: {exact_qps:.1} queries/s (all queries in one batch)");
    drop(exact);

    let params = HnswParams {
        m: args.m,
        ef_construction: args.ef_construction,
        ef_search: args.ef[0],
        deterministic: args.deterministic,
    };
    let before = memory_mib("VmRSS");
    let start = Instant::now();
    let hnsw = HnswIndex::build(ids, &vectors, args.dim, params, &|_| {}).unwrap();
    let build_s = start.elapsed().as_secs_f64();
    let graph_mib = memory_mib("VmRSS") - before;
    println!(
        "hnsw build: {build_s:.1} s ({:.0} vectors/s), index memory ≈ {graph_mib:.0} MiB (vectors alone {:.0} MiB)",
        args.n as f64 / build_s,
        (args.n * args.dim * 4) as f64 / (1 << 20) as f64
    );
    println!("| ef | queries/s | × exact | recall@{} |", args.k);
    println!("|---:|---:|---:|---:|");
    for &ef in &args.ef {
        // One warm-up pass over a slice of the queries, then the timed pass.
        hnsw.search_ef(&queries[..args.dim * 50.min(args.queries)], args.k, ef)
            .unwrap();
        let start = Instant::now();
        let found = hnsw.search_ef(&queries, args.k, ef).unwrap();
        let qps = args.queries as f64 / start.elapsed().as_secs_f64();
        let recall = recall_at_k(&found, &truth, args.k);
        println!("| {ef} | {qps:.0} | {:.1} | {recall:.4} |", qps / exact_qps);
    }
    println!(
        "memory: data {:.0} MiB at start, peak resident {:.0} MiB",
        base,
        memory_mib("VmHWM")
    );
}

/// A `/proc/self/status` memory line in MiB (0 where there is none).
fn memory_mib(key: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
