#!/usr/bin/env bash
# The last test of a sanitizer build (-Db_sanitize=...): fails if any process of the suite wrote
# a sanitizer report to DIR (ASAN_OPTIONS log_path, set in tests/meson.build: AddressSanitizer and
# LeakSanitizer, and with clang UndefinedBehaviorSanitizer too), printing each. The reports are
# then moved to DIR/seen/ so that the next run starts clean. LeakSanitizer tracer crashes that
# tests/sanitizer_retry.sh kept aside in DIR/tracer-crashes/ (their tests ran again) are listed,
# not failed.
#   usage: check_sanitizer_logs.sh DIR
set -uo pipefail
dir=${1:?usage: check_sanitizer_logs.sh DIR}
mkdir -p "$dir"
shopt -s nullglob
# LeakSanitizer tracer crashes that tests/sanitizer_retry.sh retried (the test ran again): told, not failed
retried=("$dir"/tracer-crashes/*)
if [[ ${#retried[@]} -gt 0 ]]; then
  echo "note: ${#retried[@]} LeakSanitizer tracer crash(es) retried (kept in $dir/tracer-crashes/):"
  for f in "${retried[@]}"; do echo "     $(basename "$f"): $(head -n 1 "$f")"; done
  mkdir -p "$dir/seen/tracer-crashes" && mv "${retried[@]}" "$dir/seen/tracer-crashes/"
fi
reports=("$dir"/asan.* "$dir"/ubsan.*)
if [[ ${#reports[@]} -eq 0 ]]; then
  echo "ok   no sanitizer reports in $dir"
  exit 0
fi
mkdir -p "$dir/seen"
for f in "${reports[@]}"; do
  echo "FAIL sanitizer report $f:"
  sed 's/^/     /' "$f"
  mv "$f" "$dir/seen/"
done
echo "${#reports[@]} sanitizer report(s); moved to $dir/seen/"
exit 1
