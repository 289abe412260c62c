#!/usr/bin/env bash
# tests/sanitizer_retry.sh (the sanitizer suite's wrapper) on a fake test that writes a report of
# a chosen kind into ASAN_OPTIONS' log_path: LeakSanitizer tracer crashes are retried (3 attempts
# with the leak check, then one without) and kept aside, any other report ends the test with its
# exit status and stays where tests/check_sanitizer_logs.sh fails the suite on it.
set -uo pipefail
: "${SRCDIR:=.}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/fake.sh" <<'FAKE'
#!/usr/bin/env bash
# attempt n (counted in $COUNT): a tracer crash while n <= CRASHES and the leak check is on; then
# a leak report if LEAK is set (and the leak check on), else a clean exit 0, or exit 7 with an
# AddressSanitizer error if ASAN_ERR is set. Records each attempt's detect_leaks in $COUNT.leaks.
d=${ASAN_OPTIONS##*log_path=}; d=${d%%:*}
n=$(( $(cat "$COUNT" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$COUNT"
dl=${ASAN_OPTIONS##*detect_leaks=}; dl=${dl%%:*}; echo -n "$dl" >> "$COUNT.leaks"
if [[ -n ${ASAN_ERR:-} ]] && (( n > CRASHES )); then printf '==9==ERROR: AddressSanitizer: heap-use-after-free\n' > "$d.$n"; exit 7; fi
if (( n <= CRASHES )) && [[ $dl == 1 ]]; then
  printf 'Tracer caught signal 11: addr=0x3b70 pc=0x1 sp=0x2\n==7==LeakSanitizer has encountered a fatal error.\n' > "$d.$n"
  exit 1
fi
if [[ -n ${LEAK:-} && $dl == 1 ]]; then printf '==8==ERROR: LeakSanitizer: detected memory leaks\n' > "$d.$n"; exit 23; fi
exit 0
FAKE
chmod +x "$tmp/fake.sh"
passed=0 failed=0
# case NAME CRASHES LEAK WANT_RC WANT_ATTEMPTS WANT_KEPT_ASIDE WANT_LEFT_FOR_THE_CHECK WANT_LEAK_CHECKS
# (WANT_LEAK_CHECKS: each attempt's detect_leaks in order; ASAN_ERR from the environment)
case_() {
  local name=$1 logs="$tmp/logs.$1"; mkdir -p "$logs"
  COUNT="$tmp/count.$name" CRASHES=$2 LEAK=$3 ASAN_OPTIONS="detect_leaks=1:log_path=$logs/asan:x=1" \
    bash "$SRCDIR/tests/sanitizer_retry.sh" "$tmp/fake.sh" 2> "$tmp/err.$name"
  local rc=$? attempts kept left checks
  attempts=$(cat "$tmp/count.$name")
  checks=$(cat "$tmp/count.$name.leaks")
  kept=$(find "$logs/tracer-crashes" -type f 2>/dev/null | wc -l)
  left=$(find "$logs" -maxdepth 1 -type f -name 'asan.*' | wc -l)
  if [[ $rc -eq $4 && $attempts -eq $5 && $kept -eq $6 && $left -eq $7 && $checks == "$8" &&
        -z $(find "$logs" -type d -name 'attempt.*') ]]; then
    echo "ok   $name: exit $rc after $attempts attempt(s) (detect_leaks $checks), $kept report(s) kept aside, $left left for the check"
    passed=$((passed + 1))
  else
    echo "FAIL $name: exit $rc (want $4), attempts $attempts (want $5), kept aside $kept (want $6), left $left (want $7), detect_leaks $checks (want $8)"
    sed 's/^/     /' "$tmp/err.$name"; failed=$((failed + 1))
  fi
}
case_ clean 0 "" 0 1 0 0 1
case_ one_crash 1 "" 0 2 1 0 11
case_ crash_then_leak 1 1 23 2 1 1 11
case_ leak 0 1 23 1 0 1 1
case_ two_crashes 2 "" 0 3 2 0 111
# every attempt with the leak check crashes: a fourth runs without it, and its result stands
case_ three_crashes 3 "" 0 4 3 0 1110
case_ always_crashes 99 "" 0 4 3 0 1110
ASAN_ERR=1 case_ crashes_then_asan_error 3 "" 7 4 3 1 1110
if grep -q "running it once more without the leak check" "$tmp/err.always_crashes"; then
  echo "ok   always_crashes: says that the leak check was left out"; passed=$((passed + 1))
else echo "FAIL always_crashes: no word of the leak check left out"; sed 's/^/     /' "$tmp/err.always_crashes"; failed=$((failed + 1)); fi
# without log_path (a build without the sanitizers) the command runs as it is
out=$(ASAN_OPTIONS= bash "$SRCDIR/tests/sanitizer_retry.sh" bash -c 'echo plain; exit 5'); rc=$?
if [[ $rc -eq 5 && $out == plain ]]; then echo "ok   no log_path: runs the command as it is (exit 5)"; passed=$((passed + 1))
else echo "FAIL no log_path: exit $rc, output '$out'"; failed=$((failed + 1)); fi
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
