#!/usr/bin/env bash
# What the query-focus pass costs (issue 55): `pipeline run` of CONFIG on DATA from a cold cache,
# without and with --query-focus, in turn (A B A B ...), RUNS times each. Prints each run's wall
# time, the best of each, the ratio (with / without) and the focus stages' own seconds from the
# run's timings.json, with the CPU.
#
#   scripts/bench_focus.sh [CONFIG] [DATA] [RUNS]
#
# Defaults: configs/minilm.toml, ../shared/skillret-sample, 3. The binary: $PIPELINE, else
# target/release/pipeline (cargo build --release -p pipeline). Nothing else should run meanwhile.
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/minilm.toml}
data=${2:-../shared/skillret-sample}
runs=${3:-3}
pipeline=${PIPELINE:-target/release/pipeline}
[[ -x $pipeline ]] || { echo "bench_focus: no $pipeline (cargo build --release -p pipeline)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$config" "$work/bench.toml"
printf '\n[output]\ncache = "%s/cache"\n' "$work" >>"$work/bench.toml"
echo "bench_focus: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; $config on $data; $runs runs each, cold cache"
best() { sort -g | head -n 1; }
: >"$work/without" ; : >"$work/with"
for i in $(seq "$runs"); do
    for mode in without with; do
        rm -rf "$work/cache" "$work/out"
        flag=()
        [[ $mode == with ]] && flag=(--query-focus)
        start=$(date +%s.%N)
        "$pipeline" run --config "$work/bench.toml" --data "$data" --out "$work/out" "${flag[@]}" >/dev/null 2>"$work/log" ||
            { cat "$work/log" >&2; exit 1; }
        seconds=$(echo "$(date +%s.%N) - $start" | bc)
        echo "$seconds" >>"$work/$mode"
        extra=""
        if [[ $mode == with ]]; then
            extra=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); print("; focus stages %.2f s" % sum(s["seconds"] for s in t["stages"] if s["stage"] in ("embed focus", "focus")))' "$work/out/timings.json")
        fi
        printf 'run %d %-7s %8.2f s%s\n' "$i" "$mode" "$seconds" "$extra"
    done
done
a=$(best <"$work/without")
b=$(best <"$work/with")
printf 'best without %.2f s, with %.2f s: the focus pass adds %.1f%%\n' "$a" "$b" "$(echo "($b / $a - 1) * 100" | bc -l)"
