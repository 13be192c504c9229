# Steps for .ci/run, each timed: `step NAME CMD...` runs CMD in the foreground; `background NAME
# CMD...` starts CMD now (its output in .cache/ci/NAME.log) and `wait_for NAME` waits for it,
# failing as the step would. Each step's time is printed as it ends, and a table of them all with
# the total when the script exits, whether it passed or not, with the disk space left after each
# (a CI machine's free space varies: one ran out during the test build's 20 GB of debug info).
# shellcheck shell=bash

_ci_free() { df -h --output=avail . | tail -n 1 | tr -d ' '; }

CI_LOGS=.cache/ci
mkdir -p "$CI_LOGS"
CI_STARTED=$SECONDS
CI_TABLE=()
CI_FREE_AT_START=$(_ci_free)
declare -A CI_BG_PID CI_BG_START

_ci_record() { # seconds name
    local free
    free=$(_ci_free)
    CI_TABLE+=("$(printf '%6d s  %6s free  %s' "$1" "$free" "$2")")
    echo "ci: $2: $1 s ($free free)"
}

step() { # name cmd...
    local name=$1 t0=$SECONDS
    shift
    echo "ci: ▶ $name"
    "$@"
    _ci_record $((SECONDS - t0)) "$name"
}

background() { # name cmd...
    local name=$1
    shift
    echo "ci: ▶ $name (in the background: $CI_LOGS/$name.log)"
    CI_BG_START[$name]=$SECONDS
    ("$@") >"$CI_LOGS/$name.log" 2>&1 &
    CI_BG_PID[$name]=$!
}

wait_for() { # name
    local name=$1 t0=$SECONDS
    if ! wait "${CI_BG_PID[$name]}"; then
        echo "ci: $name failed; the end of its log:" >&2
        tail -n 60 "$CI_LOGS/$name.log" >&2
        return 1
    fi
    _ci_record $((SECONDS - CI_BG_START[$name])) "$name (in the background)"
    _ci_record $((SECONDS - t0)) "  waiting for $name"
}

ci_table() {
    echo "ci: step times (disk space left after each; $CI_FREE_AT_START at the start)"
    printf '%s\n' "${CI_TABLE[@]}"
    printf '%6d s  %s\n' $((SECONDS - CI_STARTED)) "total"
}
