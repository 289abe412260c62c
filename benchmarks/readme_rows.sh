#!/usr/bin/env bash
# The README's speed rows in one call, one GPU (the method of its tables): per shape "SEQ MB", one
# benchmarks/gpu_bench.sh run with torch.compile beside dissect (TORCH_MODES=compile), then RUNS - 1
# dissect-only runs (SKIP_TORCH=1); prints one compact table last:
#   . .gpu/env.sh && ACCUM=4 benchmarks/readme_rows.sh "2048 8" "350 32"
# Columns: dissect's median tokens/s over the RUNS runs with their range, its MFU (gpu_bench.sh's
# formula) and peak memory, torch.compile's tokens/s, MFU and peak memory, the ratio of the two
# tokens/s, and the mean SM clock and power of the runs (dissect / torch.compile). RUNS (default 3),
# STEPS (default 8: gpu_bench.sh's median is over the steps after the 3rd), MODEL, LAYERS and ACCUM
# as gpu_bench.sh. Each run's own output and files stay in $OUT/SEQxMB/runI/ (gpu_bench.sh's
# summary.json is what the table is made of); a run that fails is reported and left out, and the
# script then exits 1 after the table.
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: benchmarks/readme_rows.sh \"SEQ MB\" [\"SEQ MB\" ...]" >&2; exit 2; }
runs=${RUNS:-3} steps=${STEPS:-8}
OUT=${OUT:-/tmp/dissect-rows}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
dirs=() failed=0
for shape in "$@"; do
  read -r seq mb <<< "$shape"
  for i in $(seq "$runs"); do
    d=$OUT/${seq}x${mb}/run$i; rm -rf "$d"; mkdir -p "$d"
    if [ "$i" = 1 ]; then mode=(env TORCH_MODES=compile); else mode=(env SKIP_TORCH=1); fi
    if "${mode[@]}" OUT="$d" benchmarks/gpu_bench.sh "$seq" "$mb" "$steps" > "$d/stdout.txt" 2>&1; then
      echo "$seq x $mb run $i: $(grep -m1 '^dissect ' "$d/stdout.txt")"
    else
      echo "$seq x $mb run $i: FAILED (rc $?); last lines of $d/stdout.txt:"; tail -5 "$d/stdout.txt"
      failed=$((failed + 1))
    fi
    dirs+=("$d")
  done
done
"$py" - "$runs" "${dirs[@]}" <<'PY'
import json, os, statistics, sys
runs, dirs = int(sys.argv[1]), sys.argv[2:]
shapes = {}
for d in dirs:
    f = os.path.join(d, "summary.json")
    if not os.path.exists(f):
        continue
    s = json.load(open(f))
    shapes.setdefault((s["model"], s["layers"], s["seq"], s["micro_batch"], s["accum"]), []).append(s)
print(f"\nREADME rows: dissect median of its runs (range), torch.compile from the first run of each shape")
print(f"{'shape':<34} {'dissect tok/s':>13} {'(range)':>15} {'MFU':>6} {'GiB':>5}   {'compile':>8} {'MFU':>6}"
      f" {'GiB':>5} {'ratio':>6}   {'MHz / W (dissect; compile)':<28}")
for (model, layers, seq, mb, accum), ss in shapes.items():
    d = [r for s in ss for r in s["rows"] if r["impl"] == "dissect"]
    c = [r for s in ss for r in s["rows"] if r["impl"] == "pytorch-compile"]
    tok = statistics.median(r["tokens_per_s"] for r in d)
    mfu = statistics.median(r["mfu"] for r in d)
    name = f"{model} {layers}L {seq} x {mb}" + (f" x {accum}" if accum > 1 else "")
    rng = f"{min(r['tokens_per_s'] for r in d):,.0f}-{max(r['tokens_per_s'] for r in d):,.0f}"
    line = f"{name:<34} {tok:>13,.0f} {rng:>15} {mfu:>6.3f} {max(r['peak_gib'] for r in d):>5.1f}"
    if c:
        line += f"   {c[0]['tokens_per_s']:>8,.0f} {c[0]['mfu']:>6.3f} {c[0]['peak_gib']:>5.1f} {tok / c[0]['tokens_per_s']:>6.2f}"
    else:
        line += f"   {'-':>8} {'-':>6} {'-':>5} {'-':>6}"
    dc = [s["clocks"]["dissect"] for s in ss if "dissect" in s.get("clocks", {})]
    tc = [s["clocks"]["torch"] for s in ss if "torch" in s.get("clocks", {})]
    clk = ", ".join(f"{x['sm_mhz']:.0f}/{x['watts']:.0f}" for x in dc)
    if tc:
        clk += "; " + ", ".join(f"{x['sm_mhz']:.0f}/{x['watts']:.0f}" for x in tc)
    print(line + f"   {clk}" + (f"   ({len(d)} of {runs} runs)" if len(d) != runs else ""))
PY
[ "$failed" = 0 ] || { echo "$failed run(s) failed" >&2; exit 1; }
