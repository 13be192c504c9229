#!/usr/bin/env bash
# Type-checks the whole workspace for aarch64 Linux, where no x86 kernel exists: every
# x86_64 path is cfg-gated and the portable ("scalar") kernels take over. Needs the target's
# standard library (rustup) and a C cross compiler for the build scripts of dependencies with C
# code (ring): on Debian `apt-get install gcc-aarch64-linux-gnu`. Checks, does not link or run.
#
#     scripts/check-aarch64.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
if ! command -v aarch64-linux-gnu-gcc >/dev/null; then
    echo "check-aarch64: aarch64-linux-gnu-gcc not found (apt-get install gcc-aarch64-linux-gnu)" >&2
    exit 1
fi
RUSTFLAGS="-D warnings" cargo check --target "$target" --workspace --all-targets
echo "check-aarch64: the workspace type-checks for $target"
