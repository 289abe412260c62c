#!/usr/bin/env bash
# Runs the libFuzzer targets of a -Dfuzzing=true clang build for a bounded time each, over a
# copy of their corpus (tests/fuzz/corpus/<target>; the repository's corpus is not changed), and
# fails on any crash, harness check, leak, timeout, out-of-memory or sanitizer report.
#   usage: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [TARGET...]   (default: every target)
# Prints one line per target: executions, seconds, new corpus units, crashes; the findings
# (reproducers) are kept under BUILD_DIR/fuzz-findings/<target>/ and named in the output.
# Environment: FUZZ_SEED (libFuzzer's -seed; default 1, so that a run - the one in tests/run.sh and
# CI included - mutates the same inputs in the same order and a finding reproduces; 0 = a random
# seed per run, for exploring: long campaigns use it), FUZZ_MERGE=1 (merge the new units that add
# coverage into the repository's corpus), FUZZ_ARGS (more libFuzzer flags). Targets run one after
# the other, one process each; meson test runs the suite "fuzz" (one test per target) in parallel.
set -uo pipefail
build=${1:?usage: run_fuzz.sh BUILD_DIR SECONDS [TARGET...]}
secs=${2:?usage: run_fuzz.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$build" && pwd)
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
  for f in "$here"/fuzz_*.c; do t=$(basename "$f" .c); targets+=("${t#fuzz_}"); done
fi

# Sanitizer settings: reports on stderr (captured below), UBSan fatal, leaks checked after every
# input (libFuzzer) and at exit, Open MPI's own allocations suppressed (tests/lsan.supp).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:symbolize=1:handle_abort=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:symbolize=1"
export LSAN_OPTIONS="suppressions=$here/../lsan.supp:print_suppressions=0"
export OMPI_MCA_mca_base_component_disable_dlclose=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

failed=0
printf '%-12s %12s %8s %10s %8s  %s\n' target executions seconds new_units crashes result
for t in "${targets[@]}"; do
  bin="$build/tests/fuzz/fuzz_$t"
  if [[ ! -x $bin ]]; then
    echo "run_fuzz: $bin not built (configure with CC=clang -Dfuzzing=true)" >&2
    failed=1
    continue
  fi
  work=$(mktemp -d "${TMPDIR:-/tmp}/dissect-fuzz-$t.XXXXXX")
  mkdir -p "$work/corpus" "$work/new"
  cp "$here/corpus/$t"/* "$work/corpus/" 2>/dev/null
  seeds=$(ls "$work/corpus" | wc -l)
  findings="$build/fuzz-findings/$t"
  mkdir -p "$findings"
  dict=()
  [[ -f $here/$t.dict ]] && dict=(-dict="$here/$t.dict")
  t0=$(date +%s)
  # new units go to $work/new (the first corpus directory receives them), the seeds are read
  # from $work/corpus
  # shellcheck disable=SC2086
  "$bin" "$work/new" "$work/corpus" "${dict[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -seed="${FUZZ_SEED:-1}" -print_final_stats=1 -artifact_prefix="$findings/" \
    ${FUZZ_ARGS:-} >"$work/log" 2>&1
  rc=$?
  t1=$(date +%s)
  execs=$(awk '/stat::number_of_executed_units/ {s += $2} END {print s + 0}' "$work/log")
  new=$(ls "$work/new" | wc -l)
  crashes=$(grep -cE '^==[0-9]+==ERROR|^SUMMARY: (Address|Undefined|Leak)|harness check failed|ERROR: libFuzzer|runtime error:' "$work/log")
  artifacts=$(grep -oE "Test unit written to [^ ]+" "$work/log" | awk '{print $5}')
  result=ok
  if [[ $rc -ne 0 || $crashes -gt 0 || -n $artifacts ]]; then
    result=FAIL
    failed=1
    [[ $crashes -eq 0 ]] && crashes=1
  fi
  printf '%-12s %12s %8s %10s %8s  %s\n' "$t" "$execs" "$((t1 - t0))" "$new" "$crashes" "$result (seeds $seeds, exit $rc)"
  if [[ $result == FAIL ]]; then
    echo "---- fuzz_$t log (last 80 lines) ----"
    tail -n 80 "$work/log"
    for a in $artifacts; do echo "reproducer: $a  (replay: $bin $a)"; done
    echo "----"
  fi
  if [[ ${FUZZ_MERGE:-0} == 1 && $new -gt 0 ]]; then
    "$bin" -merge=1 -use_counters=0 "$here/corpus/$t" "$work/new" -max_len=65536 >"$work/merge.log" 2>&1 ||
      { echo "merge failed:"; tail -n 20 "$work/merge.log"; }
  fi
  rm -rf "$work"
done
exit $failed
