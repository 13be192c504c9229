#!/usr/bin/env bash
# What the report's browser tests need (tests/browser/check_report.py): Debian's Chromium and
# Python's Playwright, which drives it (Playwright's own browser download is not used).
# Idempotent: installs only what is missing.
set -euo pipefail
if ! command -v chromium >/dev/null; then
    if [[ $(id -u) == 0 ]]; then sudo=""; else sudo="sudo"; fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
python3 -c 'import playwright' 2>/dev/null ||
    python3 -m pip install --quiet --disable-pip-version-check playwright==1.65.3
chromium --version
