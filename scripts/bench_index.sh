#!/usr/bin/env bash
# HNSW (hnsw_rs) against exact search on synthetic unit vectors (dim 384) at
# 100k and 1M: build time, queries/s and recall@10 per ef, exact queries/s and
# the ratio, index memory and peak resident memory, one process per size.
#
#   scripts/bench_index.sh [sizes...]        (default: 100000 1000000)
#
# Extra flags for the benchmark go in BENCH_FLAGS, e.g.
#   BENCH_FLAGS="--m 32 --ef-construction 200" scripts/bench_index.sh 100000
# See `cargo run --release -p index --example bench_hnsw -- --help`.
set -euo pipefail
cd "$(dirname "$0")/.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(100000 1000000)
cargo build --release --quiet -p index --example bench_hnsw
for n in "${sizes[@]}"; do
    # shellcheck disable=SC2086
    ./target/release/examples/bench_hnsw --n "$n" ${BENCH_FLAGS:-}
    echo
done
