#!/usr/bin/env bash
# tests/sanitizer_retry.sh (the sanitizer suite's wrapper) on a fake test that writes a report of
# a chosen kind into ASAN_OPTIONS' log_path: LeakSanitizer tracer crashes are retried (at most 3
# attempts) and kept aside, any other report ends the test with its exit status and stays where
# tests/check_sanitizer_logs.sh fails the suite on it.
set -uo pipefail
: "${SRCDIR:=.}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/fake.sh" <<'FAKE'
#!/usr/bin/env bash
# attempt n (counted in $COUNT): a tracer crash while n <= CRASHES; then a leak report if LEAK is
# set, else a clean exit 0
d=${ASAN_OPTIONS##*log_path=}; d=${d%%:*}
n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$COUNT"
if (( n <= CRASHES )); then
  printf 'Tracer caught signal 11: addr=0x3b70 pc=0x1 sp=0x2\n==7==LeakSanitizer has encountered a fatal error.\n' > "$d.$n"
  exit 1
fi
if [[ -n ${LEAK:-} ]]; then printf '==8==ERROR: LeakSanitizer: detected memory leaks\n' > "$d.$n"; exit 23; fi
exit 0
FAKE
chmod +x "$tmp/fake.sh"
passed=0 failed=0
# case NAME CRASHES LEAK WANT_RC WANT_ATTEMPTS WANT_KEPT_ASIDE WANT_LEFT_FOR_THE_CHECK
case_() {
  local name=$1 logs="$tmp/logs.$1"; mkdir -p "$logs"
  COUNT="$tmp/count.$name" CRASHES=$2 LEAK=$3 ASAN_OPTIONS="detect_leaks=1:log_path=$logs/asan:x=1" \
    bash "$SRCDIR/tests/sanitizer_retry.sh" "$tmp/fake.sh" 2> "$tmp/err.$name"
  local rc=$? attempts kept left
  attempts=$(cat "$tmp/count.$name")
  kept=$(find "$logs/tracer-crashes" -type f 2>/dev/null | wc -l)
  left=$(find "$logs" -maxdepth 1 -type f -name 'asan.*' | wc -l)
  if [[ $rc -eq $4 && $attempts -eq $5 && $kept -eq $6 && $left -eq $7 && -z $(find "$logs" -type d -name 'attempt.*') ]]; then
    echo "ok   $name: exit $rc after $attempts attempt(s), $kept report(s) kept aside, $left left for the check"
    passed=$((passed + 1))
  else
    echo "FAIL $name: exit $rc (want $4), attempts $attempts (want $5), kept aside $kept (want $6), left $left (want $7)"
    sed 's/^/     /' "$tmp/err.$name"; failed=$((failed + 1))
  fi
}
case_ clean 0 "" 0 1 0 0
case_ one_crash 1 "" 0 2 1 0
case_ crash_then_leak 1 1 23 2 1 1
case_ leak 0 1 23 1 0 1
case_ three_crashes 3 "" 1 3 2 1
# without log_path (a build without the sanitizers) the command runs as it is
out=$(ASAN_OPTIONS= bash "$SRCDIR/tests/sanitizer_retry.sh" bash -c 'echo plain; exit 5'); rc=$?
if [[ $rc -eq 5 && $out == plain ]]; then echo "ok   no log_path: runs the command as it is (exit 5)"; passed=$((passed + 1))
else echo "FAIL no log_path: exit $rc, output '$out'"; failed=$((failed + 1)); fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
