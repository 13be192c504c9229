#!/usr/bin/env bash
# The vLLM servers the served-model tests (tests/served.rs) use, each started
# with scripts/vllm.sh (float32 on the CPU, 127.0.0.1 only):
#
#   port  served name               model directory                 extra vLLM arguments
#   8011  all-MiniLM-L6-v2          models/all-MiniLM-L6-v2         –
#   8021  test-bert-cross-encoder   models/test-bert-cross-encoder  –
#   8022  test-qwen3-embedding      models/test-qwen3-embedding     --max-model-len 4096
#   8023  test-qwen3-reranker       models/test-qwen3-reranker      --max-model-len 4096 --hf-overrides (Qwen3
#                                   ForSequenceClassification from the "no"/"yes" tokens: P(yes))
#
#   scripts/vllm-test-servers.sh start [NAME...]   start them (default: all), one after another
#   scripts/vllm-test-servers.sh stop [NAME...]
#   scripts/vllm-test-servers.sh status [NAME...]
#
# Each takes about 3-4.5 GiB and 90-140 s to start on 2 cores. The models come from
# scripts/fetch-models.sh, scripts/make_cross_encoders.py and scripts/make_qwen3_models.py.
set -euo pipefail
cd "$(dirname "$0")/.."

QWEN3_RERANKER_OVERRIDES='{"architectures": ["Qwen3ForSequenceClassification"], "classifier_from_token": ["no", "yes"], "is_original_qwen3_reranker": true}'

server() { # name → "port dir [args...]"
    case "$1" in
    all-MiniLM-L6-v2) echo 8011 ;;
    test-bert-cross-encoder) echo 8021 ;;
    test-qwen3-embedding) echo 8022 ;;
    test-qwen3-reranker) echo 8023 ;;
    *) echo "vllm-test-servers.sh: unknown server $1" >&2; exit 2 ;;
    esac
}

start_one() {
    local name=$1 port
    port=$(server "$name")
    case "$name" in
    test-qwen3-embedding)
        scripts/vllm.sh start "models/$name" "$name" "$port" -- --max-model-len 4096 ;;
    test-qwen3-reranker)
        scripts/vllm.sh start "models/$name" "$name" "$port" -- --max-model-len 4096 \
            --hf-overrides "$QWEN3_RERANKER_OVERRIDES" ;;
    *)
        scripts/vllm.sh start "models/$name" "$name" "$port" ;;
    esac
}

cmd="${1:-}"
(($# > 0)) && shift
names=("$@")
((${#names[@]} > 0)) || names=(all-MiniLM-L6-v2 test-bert-cross-encoder test-qwen3-embedding test-qwen3-reranker)
status=0
for name in "${names[@]}"; do
    case "$cmd" in
    start) start_one "$name" ;;
    stop) scripts/vllm.sh stop "$(server "$name")" ;;
    status) scripts/vllm.sh status "$(server "$name")" || status=1 ;;
    *) echo "usage: scripts/vllm-test-servers.sh start|stop|status [NAME...]" >&2; exit 2 ;;
    esac
done
exit $status
