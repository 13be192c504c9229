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
# Flash attention (the `flash-attn` feature: candle-flash-attn's varlen kernels, built by nvcc
# through cudaforge) needs two things these machines lack:
# - CUTLASS: its build script clones it from GitHub at the commit it pins. cudaforge first looks
#   in its cache, $CUDAFORGE_HOME/git/checkouts/cutlass-<first 16 hex of the commit>/, and takes a
#   checkout there whose `include/` exists and whose `git rev-parse HEAD` is the pinned commit.
#   NVIDIA's `nvidia-cutlass` 4.2.0.0 wheel on PyPI (sha256-checked) ships CUTLASS's headers
#   (cutlass_library/source/include/{cutlass,cute}, tools/util/include): they are laid out there,
#   in a git directory whose detached HEAD names the pinned commit, so cudaforge fetches nothing
#   (CUTLASS 4.2's headers compile flash-attention 2's kernels; the commit pinned is a 3.x).
# - time: the crate compiles 53 kernel files (fp16 and bf16, nine head widths, paged KV), about
#   5 CPU-minutes each. The build uses a trimmed copy of the crate instead (made here from the
#   cargo registry's, under $SKILLRET_CUDA_HOME, through `--config patch.crates-io...`; Cargo.lock
#   is left as it was): bf16 only, head widths 32, 64, 128 and 256 (every head of the registry:
#   a narrower head runs the next wider kernel, as the crate's own switch does), causal and not,
#   no paged KV: 8 kernels, about 20 minutes on 2 cores, compiled once into
#   $SKILLRET_CUDA_HOME/flash-attn-sm<cap> (CANDLE_FLASH_ATTN_BUILD_DIR) and reused by later builds.
#   SASS for the one compute capability: flash attention runs on GPUs of that capability (a
#   GPU of another major capability runs the exact kernel, named in the summary line).
#
# candle's own kernels (element-wise, reductions, indexing: candle-kernels) ship as PTX for one
# compute capability, which the driver compiles on first use (about 20 s on a fresh machine), and
# which, being for sm_90a (arch-specific), loads on sm_90 GPUs only. The build replaces the
# crate's build script and lib.rs with scripts/cuda/candle-kernels/{build.rs,lib.rs} (a copy
# under $SKILLRET_CUDA_HOME, patched in as flash attention is): each module becomes a compressed
# fatbin with SASS for SKILLRET_CUDA_ARCHS (default 80,86,89,90) and PTX for the newest of them,
# about 2 CPU-minutes more than PTX alone. `cuobjdump --list-elf` of the built modules is checked
# at the end.
#
# Usage: scripts/build-cuda.sh [cargo build arguments...]
#   SKILLRET_CARGO_COMMAND=clippy scripts/build-cuda.sh --workspace --all-targets --features pipeline/cuda,pipeline/flash-attn -- -D warnings
#   default: cargo build --release -p pipeline --features cuda,flash-attn (target dir target/cuda)
# Environment: CUDA_COMPUTE_CAP (default 90: Hopper, H100/H200; there is no GPU to ask here: the
#                flash attention kernels' SASS),
#              SKILLRET_CUDA_ARCHS (default 80,86,89,90: candle's kernels' SASS),
#              SKILLRET_CUDA_HOME (default .cache/cuda),
#              SKILLRET_FLASH_ATTN=0 (default build without flash attention: minutes, not hours).
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
# Under its run-time name too, for running a CUDA build on a machine without a GPU driver
# (`--backend native|candle`; CUDA itself answers that no device could be used): see README, GPU.
[ -e "$stubs/libcuda.so.1" ] || ln -s libcuda.so "$stubs/libcuda.so.1"

# CUTLASS for candle-flash-attn, from its PyPI wheel (see above).
cutlass_commit=7d49e6c7e2f8896c47f586706e67e1fb215529dc # candle-flash-attn 0.11.1's build.rs
cutlass_wheel=nvidia_cutlass-4.2.0.0-py3-none-any.whl
cutlass_sha256=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
export CUDAFORGE_HOME="$home/cudaforge"
cutlass="$CUDAFORGE_HOME/git/checkouts/cutlass-${cutlass_commit:0:16}"
if [ ! -f "$cutlass/include/cute/tensor.hpp" ] || [ ! -f "$cutlass/.from-wheel" ]; then
  echo "laying out CUTLASS's headers from $cutlass_wheel in $cutlass" >&2
  download="$home/downloads"
  mkdir -p "$download"
  [ -f "$download/$cutlass_wheel" ] ||
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$download" nvidia-cutlass==4.2.0.0
  echo "$cutlass_sha256  $download/$cutlass_wheel" | sha256sum --check --quiet
  rm -rf "$cutlass" "$cutlass.tmp"
  mkdir -p "$cutlass.tmp"
  python3 - "$download/$cutlass_wheel" "$cutlass.tmp" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
source = "cutlass_library/source/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        rest = name[len(source):]
        if name.startswith(source) and rest.startswith(("include/", "tools/util/include/")):
            target = f"{out}/{rest}"
            if not name.endswith("/"):
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with z.open(name) as src, open(target, "wb") as dst:
                    dst.write(src.read())
PY
  git init --quiet "$cutlass.tmp"
  echo "$cutlass_commit" > "$cutlass.tmp/.git/HEAD"
  echo "$cutlass_wheel" > "$cutlass.tmp/.from-wheel"
  mv "$cutlass.tmp" "$cutlass"
fi
[ "$(git -C "$cutlass" rev-parse HEAD)" = "$cutlass_commit" ] || { echo "error: $cutlass is not at $cutlass_commit" >&2; exit 1; }

# The trimmed candle-flash-attn (see above).
flash_version=0.11.1
cargo fetch --quiet --manifest-path "$root/Cargo.toml"
registry=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/candle-flash-attn-$flash_version | head -1)
flash="$home/candle-flash-attn-$flash_version-trimmed"
if [ ! -f "$flash/.trimmed" ]; then
  rm -rf "$flash"
  cp -r "$registry" "$flash"
  python3 - "$flash" <<'PY'
import re, sys
from pathlib import Path
crate = Path(sys.argv[1])
kernels = ["kernels/flash_api.cu"] + [
    f"kernels/flash_fwd_hdim{d}_bf16{c}_sm80.cu" for d in (32, 64, 128, 256) for c in ("", "_causal")]
build = (crate / "build.rs").read_text()
build, n = re.subn(r"const KERNEL_FILES: \[&str; \d+\] = \[.*?\];",
                   "const KERNEL_FILES: [&str; %d] = [%s];" % (len(kernels), ", ".join(f'"{k}"' for k in kernels)),
                   build, flags=re.S)
assert n == 1, "build.rs: KERNEL_FILES not found"
(crate / "build.rs").write_text(build)
api = (crate / "kernels/flash_api.cu").read_text()
start = api.index("void run_mha_fwd(")
end = api.index('extern "C" void run_mha(')
api = api[:start] + """void run_mha_fwd(Flash_fwd_params &params, cudaStream_t stream) {
  // Trimmed by skillret's scripts/build-cuda.sh: bf16 only, head widths 32/64/128/256, no paged KV.
  using elem_type = cutlass::bfloat16_t;
  BOOL_SWITCH(params.is_causal, Is_causal, [&] {
      if (params.d <= 32) {
          run_mha_fwd_<elem_type, 32, Is_causal>(params, stream);
      } else if (params.d <= 64) {
          run_mha_fwd_<elem_type, 64, Is_causal>(params, stream);
      } else if (params.d <= 128) {
          run_mha_fwd_<elem_type, 128, Is_causal>(params, stream);
      } else {
          run_mha_fwd_<elem_type, 256, Is_causal>(params, stream);
      }
  });
}

""" + api[end:]
(crate / "kernels/flash_api.cu").write_text(api)
(crate / ".trimmed").write_text("bf16; 32, 64, 128, 256\n")
PY
fi

# candle-kernels with SASS (see above).
kernels_version=0.11.1
kernels_registry=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/candle-kernels-$kernels_version | head -1)
kernels="$home/candle-kernels-$kernels_version-sass"
kernels_stamp=$(cat "$root/scripts/cuda/candle-kernels/build.rs" "$root/scripts/cuda/candle-kernels/lib.rs" | sha256sum | cut -c1-16)
if [ "$(cat "$kernels/.sass" 2>/dev/null)" != "$kernels_stamp" ]; then
  rm -rf "$kernels"
  cp -r "$kernels_registry" "$kernels"
  cp "$root/scripts/cuda/candle-kernels/build.rs" "$kernels/build.rs"
  cp "$root/scripts/cuda/candle-kernels/lib.rs" "$kernels/src/lib.rs"
  # Module::ptx returns cudarc's Ptx (the version and features candle-core already uses).
  printf '\n[dependencies.cudarc]\nversion = "0.19.10"\ndefault-features = false\nfeatures = ["std", "nvrtc"]\n' >> "$kernels/Cargo.toml"
  echo "$kernels_stamp" > "$kernels/.sass"
fi
export SKILLRET_CUDA_ARCHS="${SKILLRET_CUDA_ARCHS:-80,86,89,90}"

export CUDA_HOME="$toolkit" CUDA_PATH="$toolkit" CUDA_ROOT="$toolkit" CUDA_TOOLKIT_ROOT_DIR="$toolkit"
export PATH="$toolkit/bin:$PATH"
export LIBRARY_PATH="$toolkit/lib:$stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$toolkit/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export CANDLE_FLASH_ATTN_BUILD_DIR="$home/flash-attn-trimmed-sm$CUDA_COMPUTE_CAP"
mkdir -p "$CANDLE_FLASH_ATTN_BUILD_DIR"
export CUDAFORGE_THREADS="${CUDAFORGE_THREADS:-$(nproc)}"
nvcc --version | tail -2 >&2

cd "$root"
if [ $# -eq 0 ]; then
  features=cuda
  [ "${SKILLRET_FLASH_ATTN:-1}" = 0 ] || features=cuda,flash-attn
  set -- --release -p pipeline --features "$features"
fi
# The trimmed crate replaces the registry's for this build only; Cargo.lock is restored after.
cp Cargo.lock "$home/Cargo.lock.saved"
trap 'cp "$home/Cargo.lock.saved" "$root/Cargo.lock"' EXIT
CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/cuda}" \
  cargo "${SKILLRET_CARGO_COMMAND:-build}" \
  --config "patch.crates-io.candle-flash-attn.path=\"$flash\"" \
  --config "patch.crates-io.candle-kernels.path=\"$kernels\"" "$@"

# candle's modules carry the SASS asked for (see above), read back with cuobjdump (its own wheel:
# CUDA 13.0 has none on PyPI; 13.2's reads 13.0's fatbins).
if [ "${SKILLRET_CARGO_COMMAND:-build}" = build ]; then
  cuobjdump="$home/cuobjdump/nvidia/cu13/bin/cuobjdump"
  [ -x "$cuobjdump" ] ||
    python3 -m pip install --quiet --no-deps --only-binary=:all: --target "$home/cuobjdump" nvidia-cuda-cuobjdump==13.2.51
  out=$(ls -td "${CARGO_TARGET_DIR:-$root/target/cuda}"/*/build/candle-kernels-*/out | head -1)
  newest=sm_$(tr ',' '\n' <<< "$SKILLRET_CUDA_ARCHS" | sort -n | tail -1)
  count=0
  for fatbin in "$out"/*.fatbin; do
    module=$(basename "$fatbin" .fatbin)
    sass=$("$cuobjdump" --list-elf "$fatbin" 2>/dev/null | grep -oE 'sm_[0-9]+a?\.cubin' | sed 's/\.cubin//' | sort | tr '\n' ' ' || true)
    ptx=$("$cuobjdump" --list-ptx "$fatbin" | grep -oE 'sm_[0-9]+a?\.ptx' | sed 's/\.ptx//')
    [ "$ptx" = "$newest" ] || { echo "error: $fatbin: PTX for ${ptx:-nothing}, not $newest" >&2; exit 1; }
    if [ "$module" != quantized ]; then
      for arch in ${SKILLRET_CUDA_ARCHS//,/ }; do
        [[ " $sass" == *" sm_$arch "* ]] || { echo "error: $fatbin: no SASS for sm_$arch (has: $sass)" >&2; exit 1; }
      done
    fi
    count=$((count + 1))
  done
  [ "$count" = 11 ] || { echo "error: $out: $count candle-kernels modules, not 11" >&2; exit 1; }
  echo "candle-kernels: 11 modules with SASS for sm_${SKILLRET_CUDA_ARCHS//,/, sm_} (quantized: PTX only) and PTX for $newest ($(du -cb "$out"/*.fatbin | tail -1 | cut -f1) bytes)" >&2
fi
echo "built with CUDA from $toolkit (compute capability $CUDA_COMPUTE_CAP); run with LD_LIBRARY_PATH=$toolkit/lib" >&2
