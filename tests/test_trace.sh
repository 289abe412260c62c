#!/usr/bin/env bash
# Writes a trace with the C writer ($1 = test_trace binary) and reads it back with h5py.
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
DX_TRACE_TEST_SWITCH=on NCCL_TRACE_TEST=2 "$1" "$tmp/t.h5"
"${PYTHON3:-/usr/bin/python3}" "${SRCDIR:-.}/tests/check_trace.py" "$tmp/t.h5"
