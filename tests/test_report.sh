#!/usr/bin/env bash
# `dissect report` on the synthetic trace of tests/test_trace.c, tests/check_events.py on it, and
# the report's bad-input handling.
#   usage: test_report.sh TEST_TRACE_BINARY | TRACE.h5      (env: DISSECT, PYTHON3, SRCDIR)
# The expected numbers follow from the event template described at the top of test_trace.c:
# steps 10, 20, 30 with spans 750, 1750, 2750 ms; per step forward 30%, backward 50% (rank 1: 52%),
# optimizer 10%, exposed comm 5% (rank 1: 3%), idle 5%. The default range leaves out step 10.
set -uo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ ${1:?test_trace binary or trace file} == *.h5 ]]; then
  trace=$1
else
  trace=$tmp/t.h5
  "$1" "$trace" >"$tmp/test_trace.log" || { cat "$tmp/test_trace.log"; echo "0 passed, 1 failed"; exit 1; }
fi
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed+1)); }
bad() { echo "FAIL $1"; failed=$((failed+1)); }

# has FILE WORDS...: FILE contains the words in one line, separated by any run of blanks
has() {
  local file=$1; shift
  local pat; pat=$(printf '%s' "$*" | sed -e 's/[][\.*^$+?(){}|/]/\\&/g' -e 's/ \+/[[:space:]]+/g')
  grep -Eq "(^|[[:space:]])$pat([[:space:]]|$)" "$file"
}
expect_line() { # NAME FILE WORDS...
  local name=$1 file=$2; shift 2
  if has "$file" "$@"; then ok "$name: '$*'"; else bad "$name: no line with '$*' in:"; sed 's/^/     /' "$file"; fi
}

# --- the report on the synthetic trace ------------------------------------------------------
out=$tmp/report.txt
if "$DISSECT" report "$trace" >"$out" 2>"$tmp/err.txt"; then ok "report exits 0"; else bad "report exit $?: $(cat "$tmp/err.txt")"; fi
for h in "Run summary" "Step breakdown" "Top operators" "Exposed communication" "Per-layer modules" "Ranks" "Idle"; do
  if grep -q "^$h" "$out"; then ok "section '$h'"; else bad "section '$h' missing"; fi
done
expect_line "summary" "$out" "world size (ranks) 2"
expect_line "summary" "$out" "trace level op"
expect_line "summary" "$out" "steps in range 2 (steps 20..30 of 10..30; the first step is left out as warm-up)"
expect_line "summary" "$out" "mean step time (ms) 2250.000"
# tokens/s = (512 + 768) tokens / (1.75 + 2.75) s
expect_line "summary" "$out" "tokens/s 284.4"
# model FLOPs per token of test_trace.c's config_json (preset tiny: vocab 64, hidden 32, FFN 88,
# 2 layers, 4 heads of 8, 2 KV heads; seq 32): N (no token embedding) = 2 x (2 x 32 + 32 x 32 +
# 2 x 32 x 16 + 32 x 32 + 3 x 32 x 88) + 32 + 64 x 32 = 25248; 6 N + 12 x 2 x 32 x 32 = 176064;
# per rank 284.44 tokens/s x 176064 / 2 ranks = 2.504e-05 TFLOP/s
expect_line "model FLOPs" "$out" "model FLOPs per token 176064 (6 x 25248 parameters + 12 x 2 layers x 32 hidden x 32 seq; recomputed passes not counted)"
expect_line "model TFLOP/s" "$out" "model TFLOP/s per rank 2.504e-05"
# the trace records both ranks' device ("Test GPU") and its peak, 1e-4 TFLOP/s: 2.504e-05 / 1e-4
expect_line "MFU from the trace's peaks" "$out" "MFU 0.2504 (of 0.0001 TFLOP/s, the Test GPU's dense bf16 peak)"
"$DISSECT" report "$trace" --peak-tflops 2e-4 >"$tmp/mfu.txt" 2>&1 || bad "report --peak-tflops 2e-4 exit $?"
expect_line "--peak-tflops over the trace's" "$tmp/mfu.txt" "MFU 0.1252 (of --peak-tflops 0.0002)"
# device energy (test_trace.c: energy_j = 512.5 (r + 1) + 8 k J on row r, rank k; power_capped_s =
# 0.375 (r + 1) + 0.125 k s, NaN on row 2): steps 20, 30 draw 2058 + 3083 J, 2570.5 J per step;
# 5141 J / (4.5 s x 2 ranks) = 571 W per rank; 5141 J / 1280 tokens = 4.016 J per token; step 30
# has no power_capped_s, so no power-capped line. Step 20 alone: 2058 J, 2058 / 3.5 = 588 W,
# 2058 / 512 = 4.02 J per token, (0.75 + 0.875) s of 2 x 1.75 s = 46% power-capped.
expect_line "device energy" "$out" "device energy 2570.5 J per step (all ranks), 571 W per rank, 4.016 J per token"
if grep -q "^  power-capped" "$out"; then bad "a power-capped line with a step lacking power_capped_s"; else ok "no power-capped line where a step lacks it"; fi
"$DISSECT" report "$trace" --steps 20 >"$tmp/step20.txt" 2>&1 || bad "report --steps 20 exit $?"
expect_line "device energy, step 20" "$tmp/step20.txt" "device energy 2058.0 J per step (all ranks), 588 W per rank, 4.02 J per token"
expect_line "power-capped, step 20" "$tmp/step20.txt" "power-capped 46% of the step time (the power limit held the clocks down; NVML)"
# a trace without the fields (dissect before 2026-11-28), and one whose energy is NaN (a CPU run):
# no energy lines, the rest as before
for case in noenergy nanenergy; do
  "$PYTHON3" - "$trace" "$tmp/$case.h5" "$case" <<'EOF'
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    rows = f["steps"][()]
    if sys.argv[3] == "nanenergy":
        rows["energy_j"] = np.nan
        rows["power_capped_s"] = np.nan
    else:
        keep = [n for n in rows.dtype.names if n not in ("energy_j", "power_capped_s")]
        rows = np.array(rows[keep].tolist(), dtype=np.dtype([(n, rows.dtype[n]) for n in keep]))
    del f["steps"]
    f.create_dataset("steps", data=rows, maxshape=(None,), chunks=(64,))
EOF
  "$DISSECT" report "$tmp/$case.h5" >"$tmp/$case.txt" 2>&1 || bad "$case: report exit $?"
  if grep -q "^  device energy\|^  power-capped" "$tmp/$case.txt"; then bad "$case: energy lines"; else ok "$case: no energy lines"; fi
  expect_line "$case: the rest as before" "$tmp/$case.txt" "tokens/s 284.4"
done
# copies: an older trace without the device datasets; a rank whose peak is unknown (0); two
# devices (MFU = summed model FLOP/s / summed peaks = 2 x 2.504e-05 / 4e-4); a peak dataset of the
# wrong length (ignored, not an error)
for case in old unknown mixed badshape; do
  "$PYTHON3" - "$trace" "$tmp/$case.h5" "$case" <<'EOF'
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
case = sys.argv[3]
with h5py.File(sys.argv[2], "r+") as f:
    m = f["metadata"]
    if case == "old":
        del m["device_names"], m["device_peak_tflops"]
    else:
        del m["device_peak_tflops"]
        peaks = {"unknown": [1e-4, 0.0], "mixed": [1e-4, 3e-4], "badshape": [1e-4, 1e-4, 1e-4]}[case]
        m["device_peak_tflops"] = np.array(peaks, dtype=np.float64)
    if case == "mixed":
        del m["device_names"]
        m["device_names"] = np.array([b"Test GPU", b"Other GPU"], dtype=h5py.string_dtype())
EOF
  "$DISSECT" report "$tmp/$case.h5" >"$tmp/$case.txt" 2>&1 || bad "$case: report exit $?"
done
expect_line "old trace: no MFU" "$tmp/old.txt" "MFU - (give --peak-tflops: a rank's device peak, e.g. 989 for an H100 SXM's dense bf16)"
expect_line "a rank's peak unknown: no MFU" "$tmp/unknown.txt" "MFU - (no known peak for Test GPU; give --peak-tflops: a rank's device peak, e.g. 989 for an H100 SXM's dense bf16)"
expect_line "devices" "$out" "devices Test GPU (every rank)"
expect_line "two devices" "$tmp/mixed.txt" "devices Test GPU (rank 0; the ranks' differ)"
if grep -q "^  devices" "$tmp/old.txt"; then bad "old trace: a devices line"; else ok "old trace: no devices line"; fi
expect_line "two devices: summed peaks" "$tmp/mixed.txt" "MFU 0.1252 (of the ranks' dense bf16 peaks, 0.0004 TFLOP/s summed; rank 0: Test GPU)"
expect_line "peaks of the wrong length: no MFU" "$tmp/badshape.txt" "MFU - (no known peak for Test GPU; give --peak-tflops: a rank's device peak, e.g. 989 for an H100 SXM's dense bf16)"
for v in 0 -3 abc 1e999; do
  "$DISSECT" report "$trace" --peak-tflops "$v" >"$tmp/mfu_bad.txt" 2>&1
  rc=$?
  if [[ $rc -eq 2 ]] && grep -q "^dissect: error: report: --peak-tflops '$v': expected a positive number of TFLOP/s" "$tmp/mfu_bad.txt"; then
    ok "--peak-tflops '$v' refused"; else bad "--peak-tflops '$v': exit $rc: $(cat "$tmp/mfu_bad.txt")"; fi
done
# a LoRA run's config, and a trace whose config has no model: no FLOPs, the rest of the report as before
for case in lora nomodel; do
  "$PYTHON3" - "$trace" "$tmp/$case.h5" "$case" <<'EOF'
import shutil, sys, h5py
shutil.copy(sys.argv[1], sys.argv[2])
cfg = {"lora": '{"model": {"preset": "tiny"}, "seq_length": 32, "lora": {"r": 4}}', "nomodel": '{"seq_length": 32}'}
with h5py.File(sys.argv[2], "r+") as f:
    f["metadata"].attrs["config_json"] = cfg[sys.argv[3]]
EOF
  "$DISSECT" report "$tmp/$case.h5" --peak-tflops 1 >"$tmp/$case.txt" 2>&1 || bad "$case: report exit $?"
  want="no model config in /metadata"; [[ $case == lora ]] && want="a LoRA run: not counted"
  expect_line "$case: no model FLOPs" "$tmp/$case.txt" "model FLOPs per token - ($want)"
  if grep -q "^  MFU" "$tmp/$case.txt"; then bad "$case: an MFU line"; else ok "$case: no MFU line"; fi
  expect_line "$case: breakdown as before" "$tmp/$case.txt" "mean max 675.000 1170.000 225.000 112.500 112.500 2250.000"
done
#                                         forward  backward optimizer exposed idle    step
expect_line "breakdown step 20" "$out" "20 rank 0 525.000 875.000 175.000 87.500 87.500 1750.000"
expect_line "breakdown step 30" "$out" "30 max 825.000 1430.000 275.000 137.500 137.500 2750.000"
expect_line "breakdown mean" "$out" "mean rank 0 675.000 1125.000 225.000 112.500 112.500 2250.000"
expect_line "breakdown mean of max" "$out" "mean max 675.000 1170.000 225.000 112.500 112.500 2250.000"
# op module count total_ms mean_us share% GFLOP/s GB/s (over both ranks and steps 20, 30)
expect_line "top op" "$out" "all_reduce layer 4 2250.000 562500.000 25.00 - 2.00"
expect_line "top op" "$out" "gemm mlp 16 2160.000 135000.000 24.00 50.00 4.00"
expect_line "top op" "$out" "memcpy data 4 180.000 45000.000 2.00 - 10.00"
# exposed communication: op module phase count/step comm_ms exposed_ms exposed% (rank mean:
# all_reduce [60, 85) = 25u, exposed 5u on rank 0 and 3u on rank 1; u = 17.5 and 27.5 ms)
expect_line "exposed comm" "$out" "all_reduce layer backward 1.0 562.500 90.000 16.0"
expect_line "exposed comm total" "$out" "total 562.500 90.000 16.0"
# layer embedding attention mlp lm_head loss optimizer layer data total exposed (ms/step, rank mean)
expect_line "layer 0" "$out" "0 - 360.000 315.000 - - - - - 675.000 -"
expect_line "layer other" "$out" "other 112.500 - - 270.000 67.500 225.000 562.500 45.000 1282.500 90.000"
expect_line "rank 1" "$out" "1 2250.000 2070.000 562.500 67.500 112.500"
expect_line "straggler" "$out" "straggler: slowest rank 1 (compute 2070.000 ms/step), fastest rank 0 (2025.000 ms/step), ratio 1.022"
expect_line "idle mean" "$out" "mean 112.500 5.00 112.500 5.00"
if grep -q "^Top operators" "$out" && [[ $(sed -n '/^Top operators/,/^$/p' "$out" | wc -l) -eq 14 ]]; then
  ok "top operators: 11 rows"; else bad "top operators: expected 11 rows"; fi

out2=$tmp/report_steps.txt
"$DISSECT" report "$trace" --steps 10:10 --top 3 >"$out2" 2>&1 || bad "report --steps 10:10 exit $?"
expect_line "--steps 10:10" "$out2" "mean rank 0 225.000 375.000 75.000 37.500 37.500 750.000"
expect_line "--steps 10:10" "$out2" "mean max 225.000 390.000 75.000 37.500 37.500 750.000"
if [[ $(sed -n '/^Top operators/,/^$/p' "$out2" | wc -l) -eq 6 ]]; then ok "--top 3: 3 rows"; else bad "--top 3"; fi

# host work covers a collective: the same trace with the offloaded AdamW (stream host) beside
# the all-reduce's last 5u (rank 1: 3u) leaves no exposed communication, and the breakdown's
# columns still add up to the step (backward 55u on both ranks: 1237.5 ms per step)
if [[ $1 != *.h5 ]]; then
  if "$1" "$tmp/hc.h5" host-cover >"$tmp/hc_trace.log" && "$DISSECT" report "$tmp/hc.h5" >"$tmp/hc.txt" 2>&1; then
    expect_line "host cover: breakdown" "$tmp/hc.txt" "mean max 675.000 1237.500 225.000 0.000 112.500 2250.000"
    expect_line "host cover: exposed comm" "$tmp/hc.txt" "all_reduce layer backward 1.0 562.500 0.000 0.0"
    if "$PYTHON3" "$SRCDIR/tests/check_events.py" "$tmp/hc.h5" >"$tmp/hc_ce.txt" 2>&1; then
      ok "host cover: check_events.py: $(tail -1 "$tmp/hc_ce.txt")"
    else bad "host cover: check_events.py:"; sed 's/^/     /' "$tmp/hc_ce.txt"; fi
  else bad "host cover: trace or report failed"; cat "$tmp/hc_trace.log" "$tmp/hc.txt" 2>/dev/null; fi
fi

# --- benchmarks/step_gaps.py: the compute stream's gaps, from the template (rank 0, units u =
# S / 100): busy [2, 30) + [30, 80) + [85, 95) = 88u; gaps [0, 2) before the first op, [80, 85)
# between the backward and the optimizer (the all-reduce [60, 85) runs through it), [95, 100)
# after the last op; steps 10-30 (S = 750, 1750, 2750 ms) have the mean S = 1750 ms, u = 17.5 ms
if "$PYTHON3" "$SRCDIR/benchmarks/step_gaps.py" "$trace" --skip-steps 0 >"$tmp/gaps.txt" 2>&1; then
  expect_line "step_gaps.py step 20" "$tmp/gaps.txt" "20 1750.00 1540.00 210.00 35.00 0.00 0.00 87.50 87.50"
  expect_line "step_gaps.py mean" "$tmp/gaps.txt" "mean 1750.00 1540.00 210.00 35.00 0.00 0.00 87.50 87.50"
  expect_line "step_gaps.py gap kind" "$tmp/gaps.txt" \
    "87.500 1.0 87500.0 bwd end backward/embedding/embedding -> optimizer/optimizer/grad_norm side comm"
else bad "step_gaps.py exit:"; sed 's/^/     /' "$tmp/gaps.txt"; fi
if "$PYTHON3" "$SRCDIR/benchmarks/step_gaps.py" "$trace" --skip-steps 40 >"$tmp/gaps40.txt" 2>&1; then
  bad "step_gaps.py --skip-steps 40 (no such steps) exits 0"
elif grep -q "no step spans with op events on the compute stream for rank 0 after step 40" "$tmp/gaps40.txt"; then
  ok "step_gaps.py --skip-steps 40: $(tail -1 "$tmp/gaps40.txt")"
else bad "step_gaps.py --skip-steps 40:"; sed 's/^/     /' "$tmp/gaps40.txt"; fi

# --- check_events.py ---------------------------------------------------------------------
if "$PYTHON3" "$SRCDIR/tests/check_events.py" "$trace" --require-op gemm --require-op all_reduce \
     --require-op adamw >"$tmp/ce.txt" 2>&1; then
  ok "check_events.py: $(tail -1 "$tmp/ce.txt")"
else bad "check_events.py:"; sed 's/^/     /' "$tmp/ce.txt"; fi
# a copy with two overlapping compute ops, an op outside its span and a missing step span must fail
"$PYTHON3" - "$trace" "$tmp/broken.h5" <<'EOF'
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    ev = f["events"][()]
    ops = {n: v for n, v in h5py.check_enum_dtype(f["events"].dtype["op"]).items()}
    gemm = np.flatnonzero((ev["op"] == ops["gemm"]) & (ev["rank"] == 0) & (ev["step"] == 20))
    ev["end_ns"][gemm[0]] += (ev["end_ns"][gemm[0]] - ev["start_ns"][gemm[0]]) * 4  # overlaps the next ops
    span = np.flatnonzero((ev["op"] == ops["step"]) & (ev["rank"] == 1) & (ev["step"] == 30))
    ev["op"][span[0]] = ops["memset"]
    f["events"][...] = ev
EOF
"$PYTHON3" "$SRCDIR/tests/check_events.py" "$tmp/broken.h5" --require-op rope >"$tmp/ce2.txt" 2>&1
rc=$?
if [[ $rc -eq 1 ]] && grep -q "^FAIL rank 0: compute+host" "$tmp/ce2.txt" && grep -q "^FAIL rank 1: one step span" "$tmp/ce2.txt" \
   && grep -q "^FAIL op 'rope'" "$tmp/ce2.txt" && grep -q "^ok   rank 1: compute+host" "$tmp/ce2.txt"; then
  ok "check_events.py finds overlapping compute ops, a missing span, a missing op: $(tail -1 "$tmp/ce2.txt")"
else bad "check_events.py on a broken copy (exit $rc):"; sed 's/^/     /' "$tmp/ce2.txt"; fi

# a copy with an op on stream "aux" (RMSNorm's backward beside the layer-1 backward GEMM, units
# 40..44 of each step: 4 units of 17.5 and 27.5 ms in steps 20 and 30, 90 ms per step on rank 0):
# check_events.py passes, the report prints its line and the step breakdown does not change
"$PYTHON3" - "$trace" "$tmp/aux.h5" <<'EOF2'
import shutil, sys, h5py, numpy as np
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "r+") as f:
    d = f["events"]
    ev = d[()]
    ops = h5py.check_enum_dtype(d.dtype["op"])
    mods = h5py.check_enum_dtype(d.dtype["module"])
    streams = h5py.check_enum_dtype(d.dtype["stream"])
    span = ev[ev["op"] == ops["step"]]
    new = span.copy()
    for i, sp in enumerate(span):
        u = (int(sp["end_ns"]) - int(sp["start_ns"])) // 100
        new["start_ns"][i] = sp["start_ns"] + 40 * u
        new["end_ns"][i] = sp["start_ns"] + 44 * u
    new["op"] = ops["rmsnorm"]
    new["module"] = mods["mlp"]
    new["stream"] = streams["aux"]
    new["layer"] = 1
    new["phase"] = h5py.check_enum_dtype(d.dtype["phase"])["backward"]
    d.resize((len(ev) + len(new),))
    d[len(ev):] = new
EOF2
"$DISSECT" report "$tmp/aux.h5" >"$tmp/aux.txt" 2>&1 || bad "aux: report exit $?"
expect_line "aux stream" "$tmp/aux.txt" "RMSNorm's backward beside the gate|up weight gradients (stream 'aux', rank 0): 90.000 ms of"
expect_line "aux stream" "$tmp/aux.txt" "kernels per step (1.0 calls of 90000.0 us), on a few SMs while the GEMMs run on the rest: in no"
if grep -q "^  rmsnorm " "$tmp/aux.txt"; then bad "aux stream: its op in the operator table"; else ok "aux stream: not in the operator table"; fi
rows() { sed -n '/^Step breakdown/,/^$/p' "$1" | grep -E '^ +([0-9]+|mean|min|max) '; }
if [[ -n $(rows "$out") ]] && diff <(rows "$out") <(rows "$tmp/aux.txt") >/dev/null; then
  ok "aux stream: the step breakdown as without it"; else bad "aux stream: the step breakdown changed"; fi
if "$PYTHON3" "$SRCDIR/tests/check_events.py" "$tmp/aux.h5" >"$tmp/aux_ce.txt" 2>&1; then
  ok "aux stream: check_events.py: $(tail -1 "$tmp/aux_ce.txt")"
else bad "aux stream: check_events.py:"; sed 's/^/     /' "$tmp/aux_ce.txt"; fi

# --- --chrome ----------------------------------------------------------------------------
json=$tmp/trace.json
if "$DISSECT" report "$trace" --chrome "$json" >/dev/null 2>"$tmp/err.txt" && [[ -f $json && ! -e $json.tmp ]]; then
  ok "--chrome writes $(basename "$json")"; else bad "--chrome: $(cat "$tmp/err.txt")"; fi
if "$PYTHON3" -m json.tool "$json" >/dev/null 2>"$tmp/err.txt"; then ok "json.tool parses the Chrome trace"; else bad "json.tool: $(cat "$tmp/err.txt")"; fi
if "$PYTHON3" - "$json" >"$tmp/chrome.txt" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["displayTimeUnit"] == "ms", d.get("displayTimeUnit")
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) == 210, len(x)
assert {e["pid"] for e in x} == {0, 1}, {e["pid"] for e in x}
for p in (0, 1):
    assert sum(e["pid"] == p for e in x) == 105
names = {(e["pid"], e["name"], e["args"]["name"]) for e in ev if e["ph"] == "M" and "name" in e["args"]}
assert (0, "process_name", "rank 0") in names and (1, "process_name", "rank 1") in names, names
assert (1, "thread_name", "comm") in names, names
g = [e for e in x if e["name"] == "gemm" and e["pid"] == 0 and e["args"]["step"] == 10]
first = min(g, key=lambda e: e["ts"])  # step 10 starts at 100 ms; gemm at 4u = 30 ms later
assert abs(first["ts"] - 130000.0) < 1e-6 and abs(first["dur"] - 22500.0) < 1e-6, first
assert first["cat"] == "attention" and first["tid"] == 0 and first["args"]["phase"] == "forward", first
assert first["args"]["flops"] == 50 * 22500000 and first["args"]["layer"] == 0, first
print("210 X events, 105 per pid; metadata and the first gemm as written")
EOF
then ok "Chrome trace content: $(cat "$tmp/chrome.txt")"; else bad "Chrome trace content:"; sed 's/^/     /' "$tmp/chrome.txt"; fi

# --- examples/plot_trace.py ----------------------------------------------------------------
if "$PYTHON3" "$SRCDIR/examples/plot_trace.py" "$trace" --step 20 --out "$tmp/plot" >"$tmp/plot.txt" 2>&1 \
   && [[ -s $tmp/plot_timeline.png && -s $tmp/plot_ops.png ]]; then
  ok "plot_trace.py writes plot_timeline.png and plot_ops.png"
else bad "plot_trace.py:"; sed 's/^/     /' "$tmp/plot.txt"; fi

# --- a trace without /events (trace level step): breakdown from /steps --------------------
"$PYTHON3" - "$trace" "$tmp/noevents.h5" <<'EOF'
import sys, h5py
with h5py.File(sys.argv[1], "r") as src, h5py.File(sys.argv[2], "w") as dst:
    for k, v in src.attrs.items():
        dst.attrs[k] = v
    src.copy("metadata", dst)
    src.copy("steps", dst)
EOF
if "$DISSECT" report "$tmp/noevents.h5" >"$tmp/noev.txt" 2>&1 && grep -q "from /steps" "$tmp/noev.txt"; then
  ok "a trace without /events: breakdown from /steps"; else bad "trace without /events:"; sed 's/^/     /' "$tmp/noev.txt"; fi
# rank 0 step 20: forward 0.25 s, backward 0.5 s, optimizer 0.125 s, comm 0.02 s, step 1.75 s
expect_line "without /events" "$tmp/noev.txt" "20 rank 0 250.000 500.000 125.000 20.000 855.000 1750.000"

# --- bad input: one error line naming the file, non-zero exit, no --chrome output ---------
echo "this is not a trace" >"$tmp/notes.txt"
"$PYTHON3" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'w'); f['x'] = [1, 2, 3]; f.attrs['format'] = 'something-else'" "$tmp/other.h5"
"$PYTHON3" -c "import h5py, sys; f = h5py.File(sys.argv[1], 'w'); f['steps'] = [1, 2, 3]" "$tmp/noformat.h5"
size=$(stat -c %s "$trace")
head -c $((size / 2)) "$trace" >"$tmp/truncated.h5"
for f in "$tmp/notes.txt" "$tmp/other.h5" "$tmp/noformat.h5" "$tmp/truncated.h5" "$tmp/missing.h5"; do
  name=$(basename "$f")
  rm -f "$tmp/out.json" "$tmp/out.json.tmp"
  "$DISSECT" report "$f" --chrome "$tmp/out.json" >"$tmp/stdout.txt" 2>"$tmp/stderr.txt"
  rc=$?
  n=$(wc -l <"$tmp/stderr.txt")
  if [[ $rc -ne 0 && $rc -lt 128 && $n -eq 1 && ! -s $tmp/stdout.txt && ! -e $tmp/out.json && ! -e $tmp/out.json.tmp ]] \
     && grep -q "$name" "$tmp/stderr.txt"; then
    ok "$name: exit $rc: $(cat "$tmp/stderr.txt")"
  else
    bad "$name: exit $rc, $n stderr lines, stdout $(wc -c <"$tmp/stdout.txt") bytes, out.json $([[ -e $tmp/out.json || -e $tmp/out.json.tmp ]] && echo exists || echo absent):"
    sed 's/^/     /' "$tmp/stderr.txt"
  fi
done
"$DISSECT" report "$trace" --steps 40:50 >"$tmp/stdout.txt" 2>"$tmp/stderr.txt"
rc=$?
if [[ $rc -ne 0 ]] && grep -q "no steps in --steps 40:50" "$tmp/stderr.txt" && [[ ! -s $tmp/stdout.txt ]]; then
  ok "--steps 40:50 (no such steps): $(cat "$tmp/stderr.txt")"; else bad "--steps 40:50: exit $rc"; fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
