#!/usr/bin/env bash
# A local Milvus server for the tests and the demo: Milvus Lite, which speaks
# Milvus's gRPC API (a FAISS-based re-implementation of it, not the Milvus
# engine: it tests the protocol and the client code, see README.md).
#
#   scripts/milvus.sh start    install (once) and start it; waits until the port answers
#   scripts/milvus.sh stop     stop it by its PID
#   scripts/milvus.sh status   say whether it runs (exit 0) or not (exit 1)
#
# Pinned: milvus-lite==3.2.2, and pymilvus==3.0.2, which the server imports but
# the wheel does not declare. Both go into a virtual environment under the
# project's cache (.cache/milvus/venv); the data, the PID and the log live
# beside it. The server listens on 127.0.0.1 only (Milvus Lite's default is
# every interface).
#
# Environment: MILVUS_PORT (default 19530), MILVUS_HOME (default
# .cache/milvus under the repository), MILVUS_DATA (default $MILVUS_HOME/data).
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${MILVUS_PORT:-19530}"
HOME_DIR="${MILVUS_HOME:-$PWD/.cache/milvus}"
VENV="$HOME_DIR/venv"
DATA="${MILVUS_DATA:-$HOME_DIR/data}"
PID_FILE="$HOME_DIR/server-$PORT.pid"
LOG="$HOME_DIR/server-$PORT.log"
PACKAGES=(milvus-lite==3.2.2 pymilvus==3.0.2)

port_open() {
    python3 - "$PORT" <<'EOF'
import socket, sys
s = socket.socket()
s.settimeout(0.5)
sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid state cmd
    pid="$(cat "$PID_FILE")"
    # Alive, not a zombie (a killed server whose parent is gone may linger
    # unreaped), and still Milvus Lite (not a reused PID).
    if [[ -r "/proc/$pid/stat" ]]; then
        read -r _ _ state _ <"/proc/$pid/stat"
        cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline")"
    else
        state="$(ps -o stat= -p "$pid" 2>/dev/null)" || return 1
        cmd="$(ps -o command= -p "$pid")"
    fi
    [[ -n "$state" && "$state" != Z* && "$cmd" == *"milvus-lite server"* ]] || return 1
    echo "$pid"
}

install() {
    local stamp="$VENV/.installed"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "${PACKAGES[*]}" ]]; then
        return
    fi
    echo "milvus.sh: installing ${PACKAGES[*]} into $VENV" >&2
    mkdir -p "$HOME_DIR"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PACKAGES[@]}"
    echo "${PACKAGES[*]}" >"$stamp"
}

start() {
    if pid="$(running_pid)"; then
        echo "milvus.sh: already running on 127.0.0.1:$PORT (pid $pid)"
        return
    fi
    if port_open; then
        echo "milvus.sh: 127.0.0.1:$PORT is taken by another process; set MILVUS_PORT" >&2
        exit 1
    fi
    install
    mkdir -p "$DATA"
    # setsid: its own process group, so that stop ends the server and nothing else.
    setsid "$VENV/bin/milvus-lite" server --host 127.0.0.1 --port "$PORT" --data-dir "$DATA" \
        >"$LOG" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    for _ in $(seq 1 120); do
        if port_open; then
            echo "milvus.sh: Milvus Lite on 127.0.0.1:$PORT (pid $(cat "$PID_FILE"), data $DATA, log $LOG)"
            return
        fi
        if ! running_pid >/dev/null; then
            echo "milvus.sh: the server exited; its log ($LOG):" >&2
            tail -n 20 "$LOG" >&2
            rm -f "$PID_FILE"
            exit 1
        fi
        sleep 0.25
    done
    echo "milvus.sh: the server did not open 127.0.0.1:$PORT within 30 s; log: $LOG" >&2
    stop
    exit 1
}

stop() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$PID_FILE"
        echo "milvus.sh: not running"
        return
    fi
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.25
    done
    kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    rm -f "$PID_FILE"
    echo "milvus.sh: stopped (pid $pid)"
}

status() {
    if pid="$(running_pid)" && port_open; then
        echo "milvus.sh: running on 127.0.0.1:$PORT (pid $pid)"
    else
        echo "milvus.sh: not running on 127.0.0.1:$PORT"
        exit 1
    fi
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
    echo "usage: scripts/milvus.sh start|stop|status  (MILVUS_PORT, MILVUS_HOME, MILVUS_DATA)" >&2
    exit 2
    ;;
esac
