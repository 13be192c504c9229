#!/usr/bin/env bash
# Build the `cuda` feature (candle on NVIDIA GPUs) on a machine without a CUDA toolkit: nvcc,
# the CUDA runtime headers, CCCL and the cuBLAS/cuRAND libraries candle links all come from
# NVIDIA's PyPI wheels, installed into .cache/cuda (no root, nothing outside the project).
#
# CUDA 13 wheels: PyPI's CUDA 12 `nvidia-cuda-nvcc-cu12` ships only ptxas and libnvvm (no nvcc
# driver), while `nvidia-cuda-nvcc` 13.x ships the whole compiler. candle's cudarc links the
# driver library (-lcuda), which comes with the GPU driver, not with any wheel: as a toolkit's
# lib64/stubs/libcuda.so does, a link-time stub (every cu* entry point of cuda.h, soname
# libcuda.so.1, each returning CUDA_ERROR_UNKNOWN) is built here to link against; at run time
# the machine's real libcuda.so.1 is loaded instead.
#
# Usage: scripts/build-cuda.sh [cargo build arguments...]
#   default: cargo build --release -p pipeline --features cuda (target dir target/cuda)
# Environment: CUDA_COMPUTE_CAP (default 90: Hopper, H100/H200; there is no GPU to ask here),
#              SKILLRET_CUDA_HOME (default .cache/cuda).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
home="${SKILLRET_CUDA_HOME:-$root/.cache/cuda}"
site="$home/site"
wheels=(
  nvidia-cuda-nvcc==13.0.88
  nvidia-cuda-crt==13.0.88
  nvidia-nvvm==13.0.88
  nvidia-cuda-runtime==13.0.96
  nvidia-cuda-nvrtc==13.0.88
  nvidia-cuda-cccl==13.0.85
  nvidia-cublas==13.0.2.14
  nvidia-curand==10.4.0.35
)
stamp="${wheels[*]}"
if [ ! -f "$site/.installed" ] || [ "$(cat "$site/.installed")" != "$stamp" ]; then
  echo "installing the CUDA toolkit wheels into $site" >&2
  rm -rf "$site"
  python3 -m pip install --quiet --no-deps --only-binary=:all: --target "$site" "${wheels[@]}"
  echo "$stamp" > "$site/.installed"
fi

# The wheels install under nvidia/cu13/{bin,include,lib,nvvm}: a toolkit layout already.
toolkit="$site/nvidia/cu13"
[ -x "$toolkit/bin/nvcc" ] || { echo "error: $toolkit/bin/nvcc missing after install" >&2; exit 1; }
# Toolkits name the library directory lib64; the wheels call it lib.
[ -e "$toolkit/lib64" ] || ln -s lib "$toolkit/lib64"
for lib in "$toolkit"/lib/*.so.*; do
  base="${lib%%.so.*}.so"
  [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done

# The link-time stub of the driver library (see above).
stubs="$toolkit/lib/stubs"
if [ ! -f "$stubs/libcuda.so" ]; then
  mkdir -p "$stubs"
  gcc -E -P "$toolkit/include/cuda.h" | grep -oE '\bcu[A-Z][A-Za-z0-9_]*[[:space:]]*\(' \
    | sed 's/[[:space:]]*($//' | sort -u \
    | awk '{ printf "int %s(void) { return 999; }\n", $1 }' > "$stubs/libcuda-stub.c"
  gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$stubs/libcuda.so" "$stubs/libcuda-stub.c"
fi

export CUDA_HOME="$toolkit" CUDA_PATH="$toolkit" CUDA_ROOT="$toolkit" CUDA_TOOLKIT_ROOT_DIR="$toolkit"
export PATH="$toolkit/bin:$PATH"
export LIBRARY_PATH="$toolkit/lib:$stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$toolkit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
nvcc --version | tail -2 >&2

cd "$root"
if [ $# -eq 0 ]; then
  set -- --release -p pipeline --features cuda
fi
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/cuda}" cargo build "$@"
echo "built with CUDA from $toolkit (compute capability $CUDA_COMPUTE_CAP); run with LD_LIBRARY_PATH=$toolkit/lib" >&2
