#!/usr/bin/env bash
# Pack what scripts/bench_gpu.py needs on a machine with an NVIDIA GPU, PyTorch and
# sentence-transformers but no network and no Rust toolchain, into one folder of at most 60 MiB:
#
#   .cache/gpu-payload/
#     run.sh            the one command: bash run.sh [OUT] [bench_gpu.py options...]
#     bench_gpu.py      this checkout's scripts/bench_gpu.py
#     payload.tar.xz    bin/pipeline (the stripped --features cuda,flash-attn build of
#                       scripts/build-cuda.sh), bin/pipeline-before (optional, --before FILE: the
#                       binary to compare against), files/<model>/ (the real tokenizers and
#                       sentence-transformers module files of the models this project fetches:
#                       all-MiniLM-L6-v2, and the TEST Qwen3 embedder and reranker, Gemma3 embedder
#                       and XLM-R cross-encoder, weights left out: bench_gpu.py builds random ones
#                       in the real shapes), sample/ (the SkillRet sample's skills and queries)
#
# On the GPU machine our binary finds CUDA's libraries (libcudart.so.13, libcublas.so.13,
# libcublasLt.so.13, libcurand.so.10) in the machine's PyTorch install: bench_gpu.py puts every
# site-packages/nvidia/*/lib of the Python that runs it on LD_LIBRARY_PATH (PyTorch 2.9+ cu13
# wheels; by hand: LD_LIBRARY_PATH=$(python3 -c 'import site,glob;print(":".join(glob.glob(site.getsitepackages()[0]+"/nvidia/*/lib")))')).
# The driver's libcuda.so.1 comes from the system.
#
# Usage: scripts/gpu-payload.sh [--binary FILE] [--before FILE] [--out DIR]
#   --binary  default target/cuda/release/pipeline (build it with scripts/build-cuda.sh)
#   --before  a second binary to compare against (e.g. the build of an earlier commit)
# Needs: scripts/fetch-models.sh, python3 scripts/make_qwen3_models.py,
# python3 scripts/make_cross_encoders.py, python3 scripts/make_registry_models.py, and
# ../shared/skillret-sample (or SKILLRET_SAMPLE).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
binary="$root/target/cuda/release/pipeline"
before=""
out="$root/.cache/gpu-payload"
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--binary FILE] [--before FILE] [--out DIR]" >&2; exit 2 ;;
  esac
done
sample="${SKILLRET_SAMPLE:-$root/../shared/skillret-sample}"
[ -x "$binary" ] || { echo "error: $binary missing: build it with scripts/build-cuda.sh" >&2; exit 1; }
[ -f "$sample/skills/test.jsonl" ] || { echo "error: $sample/skills/test.jsonl missing (SKILLRET_SAMPLE)" >&2; exit 1; }
declare -A files=(
  [minilm]=all-MiniLM-L6-v2
  [qwen3-embedding]=test-qwen3-embedding
  [qwen3-reranker]=test-qwen3-reranker
  [gemma3-embedding]=test-gemma3-embedding
  [xlmr-cross-encoder]=test-xlmr-cross-encoder
)
for dir in "${files[@]}"; do
  [ -f "$root/models/$dir/config.json" ] || {
    echo "error: models/$dir missing: run scripts/fetch-models.sh and the scripts/make_*_models.py" >&2
    exit 1
  }
done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
pack="$stage/gpu-payload"
mkdir -p "$pack/bin" "$pack/files" "$pack/sample/skills" "$pack/sample/queries"
strip -o "$pack/bin/pipeline" "$binary"
[ -z "$before" ] || strip -o "$pack/bin/pipeline-before" "$before"
for name in "${!files[@]}"; do
  src="$root/models/${files[$name]}"
  (cd "$src" && find . -type f ! -name '*.safetensors' ! -name '*.bin' -print0 |
    while IFS= read -r -d '' f; do mkdir -p "$pack/files/$name/$(dirname "$f")"; cp "$f" "$pack/files/$name/$f"; done)
done
cp "$sample/skills/test.jsonl" "$pack/sample/skills/test.jsonl"
cp "$sample/queries/test.jsonl" "$pack/sample/queries/test.jsonl"
git -C "$root" rev-parse HEAD > "$pack/COMMIT" 2>/dev/null || true

rm -rf "$out"
mkdir -p "$out"
echo "compressing (xz)..." >&2
tar -C "$stage" -cf - gpu-payload | xz -T0 -6 > "$out/payload.tar.xz"
cp "$root/scripts/bench_gpu.py" "$out/bench_gpu.py"
cat > "$out/run.sh" <<'RUN'
#!/usr/bin/env bash
# bash run.sh [OUT] [bench_gpu.py options...]: scripts/bench_gpu.py on this machine's GPU.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$PWD/bench-gpu}
shift || true
exec python3 "$here/bench_gpu.py" --payload "$here/payload.tar.xz" --out "$out" "$@"
RUN
chmod +x "$out/run.sh"
size=$(du -sm "$out" | cut -f1)
echo "$out: ${size} MiB (bash $out/run.sh OUT)" >&2
if [ "$size" -gt 60 ]; then
  echo "error: the payload is over 60 MiB" >&2
  exit 1
fi
