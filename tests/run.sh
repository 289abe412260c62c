#!/usr/bin/env bash
# Builds dissect (if needed) and runs the whole test suite: ./tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || meson setup build
ninja -C build
meson test -C build --print-errorlogs "$@"
