#!/usr/bin/env bash
# The last test of a sanitizer build (-Db_sanitize=...): fails if any process of the suite wrote
# a sanitizer report to DIR (ASAN_OPTIONS log_path, set in tests/meson.build: AddressSanitizer and
# LeakSanitizer, and with clang UndefinedBehaviorSanitizer too), printing each. The reports are
# then moved to DIR/seen/ so that the next run starts clean.
#   usage: check_sanitizer_logs.sh DIR
set -uo pipefail
dir=${1:?usage: check_sanitizer_logs.sh DIR}
mkdir -p "$dir"
shopt -s nullglob
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
