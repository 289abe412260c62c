#!/usr/bin/env bash
# Builds dissect (if needed) and runs the whole test suite: ./tests/run.sh [--quick]
#   1. build/ (the default build): every test (meson test -C build);
#   2. build-asan/ (-Db_sanitize=address,undefined, CPU only): the same suite under AddressSanitizer
#      and UndefinedBehaviorSanitizer, plus the fuzz corpus replayed once; any sanitizer report of
#      any process (dissect under mpirun included) fails it (tests/check_sanitizer_logs.sh);
#   3. build-fuzz/ (clang, libFuzzer, ASan + UBSan): each parser of untrusted input fuzzed for
#      DX_FUZZ_SECONDS (default 30) seconds from the corpus in tests/fuzz/corpus.
# --quick: part 1 only. On 2 cores: ~10 min for part 1, ~30 min for part 2, ~5 min for part 3.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = --quick ] && { quick=1; shift; }
[ -f build/build.ninja ] || meson setup build
ninja -C build
meson test -C build --print-errorlogs "$@"
[ "$quick" = 1 ] && exit 0

echo "== the suite under ASan/UBSan (build-asan)"
[ -f build-asan/build.ninja ] || meson setup build-asan -Dcuda=disabled -Db_sanitize=address,undefined \
  -Db_lundef=false -Dfuzzing=true > /dev/null
ninja -C build-asan
# (tests/sanitizer_retry.sh runs a test again when LeakSanitizer's own tracer crashed in it)
meson test -C build-asan --print-errorlogs --num-processes 2 --timeout-multiplier 3 \
  --wrapper "$PWD/tests/sanitizer_retry.sh"

echo "== fuzzing (build-fuzz, clang + libFuzzer, ASan/UBSan)"
if command -v clang > /dev/null; then
  [ -f build-fuzz/build.ninja ] || CC=clang CXX=clang++ meson setup build-fuzz -Dcuda=disabled -Dfuzzing=true \
    -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dfuzz_seconds="${DX_FUZZ_SECONDS:-30}" > /dev/null
  ninja -C build-fuzz
  meson test -C build-fuzz --print-errorlogs --suite fuzz --num-processes 2
else
  echo "skip: clang is not installed (examples/debian-packages.txt lists it)"
fi
