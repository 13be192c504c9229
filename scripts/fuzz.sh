#!/usr/bin/env bash
# Fuzzes the readers of outside input (fuzz/: one libFuzzer target per reader).
#
#   scripts/fuzz.sh [TARGET] [SECONDS] [RUNS]
#
# TARGET: one target (two processes fuzz it, sharing its corpus), or all of them (the default),
# two at a time; SECONDS: how long each target runs at most (default 60); RUNS: each process
# stops sooner at that many executions (default: no such limit). Built by `cargo fuzz` on the
# stable toolchain (no sanitizer; debug assertions on, so an overflow panics), in release mode.
# Each process runs with -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10: a panic, an abort,
# memory beyond 2 GiB (or one allocation beyond it) or an input that takes over 10 s is a
# finding, kept as fuzz/artifacts/TARGET/{crash,oom,timeout}-*; make it a regression with
#   cp fuzz/artifacts/TARGET/crash-... fuzz/regressions/TARGET/WHAT-IT-FOUND
# (tests/replay.rs in the fuzz crate replays it in `cargo test --workspace`).
# New inputs go to fuzz/work/TARGET (not committed; the seeds are fuzz/corpus/TARGET, from
# scripts/make_fuzz_corpus.py). At the end a table, per target: executions, executions per
# second, coverage (libFuzzer's cov: edges), peak memory and findings; also in fuzz/out/table.md.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-fuzz >/dev/null || {
    echo "fuzz.sh: cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 1
}
mapfile -t all < <(sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^skillret-fuzz$')
target=${1:-}
seconds=${2:-60}
runs=${3:--1}
[[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || {
    echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
    exit 2
}
[[ $runs == -1 || ($runs =~ ^[0-9]+$ && $runs -gt 0) ]] || {
    echo "fuzz.sh: RUNS must be a positive whole number, not '$runs'" >&2
    exit 2
}
if [[ -n $target ]]; then
    printf '%s\n' "${all[@]}" | grep -qx "$target" || {
        echo "fuzz.sh: no target '$target'; the targets: ${all[*]}" >&2
        exit 2
    }
    targets=("$target")
else
    targets=("${all[@]}")
fi

build=(-s none -a --features libfuzzer)
echo "fuzz.sh: building ${#targets[@]} target(s) (cargo fuzz build ${build[*]})"
if [[ -n $target ]]; then
    cargo fuzz build "${build[@]}" "$target"
else
    cargo fuzz build "${build[@]}"
fi

out=fuzz/out
rm -rf "$out"
mkdir -p "$out/logs" "$out/tmp"
# The targets' scratch directories (fuzz/src/lib.rs) go here, removed at the end.
export TMPDIR=$PWD/$out/tmp
export RAYON_NUM_THREADS=1

# fuzz_one TARGET JOB: one libFuzzer process on TARGET for $seconds.
fuzz_one() {
    local t=$1 job=$2
    mkdir -p "fuzz/work/$t" "fuzz/artifacts/$t"
    local status=0 start=$SECONDS
    cargo fuzz run "${build[@]}" "$t" "fuzz/work/$t" "fuzz/corpus/$t" -- \
        -max_total_time="$seconds" -runs="$runs" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
        -max_len=16384 -dict="fuzz/dictionaries/$t.dict" -print_final_stats=1 \
        -close_fd_mask=1 -reload=1 -artifact_prefix="fuzz/artifacts/$t/" \
        >"$out/logs/$t.$job.log" 2>&1 || status=$?
    echo "$status" >"$out/logs/$t.$job.status"
    echo $((SECONDS - start)) >"$out/logs/$t.$job.seconds"
}
export -f fuzz_one
export out seconds runs
export build_flags="${build[*]}"

started=$SECONDS
if [[ -n $target ]]; then
    fuzz_one "$target" 1 &
    fuzz_one "$target" 2 &
    wait
else
    for t in "${targets[@]}"; do echo "$t"; done |
        xargs -P 2 -I{} bash -c 'build=($build_flags); fuzz_one {} 1'
fi
rm -rf "$out/tmp"

# The table: each target's processes summed (executions, findings), their rate, the highest
# coverage and peak memory.
{
    echo "| target | executions | minutes | exec/s | coverage | peak MiB | findings |"
    echo "|---|---:|---:|---:|---:|---:|---|"
    for t in "${targets[@]}"; do
        execs=0 rate=0 cov=0 peak=0 took=0 found=""
        for log in "$out/logs/$t".*.log; do
            e=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
            r=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
            p=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
            c=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
            execs=$((execs + ${e:-0}))
            rate=$((rate + ${r:-0}))
            ((${c:-0} > cov)) && cov=${c:-0}
            ((${p:-0} > peak)) && peak=${p:-0}
            s=$(cat "${log%.log}.seconds")
            ((s > took)) && took=$s
            status=$(cat "${log%.log}.status")
            if [[ $status != 0 ]]; then
                found+="exit $status: $(grep -m1 -oE 'panicked at [^ ]+|ERROR: libFuzzer: [a-z-]+|out-of-memory[^)]*\)' "$log" || echo see "$log") "
            fi
        done
        echo "| $t | $execs | $(printf '%d.%d' $((took / 60)) $((took % 60 / 6))) | $rate | $cov | $peak | ${found:-0} |"
    done
} | tee "$out/table.md"
echo "fuzz.sh: $((SECONDS - started)) s; logs in $out/logs, findings in fuzz/artifacts/"
