#!/usr/bin/env bash
# Host AdamW (the CPU-Adam of dissect's optimizer offload) against PyTorch's CPU AdamW, same
# parameter count and threads, interleaved rounds on this host (issue 12, item 6):
#   benchmarks/host_adamw_bench.sh [ROUNDS] [PARAMS] [THREADS]      (defaults 3 1e9 nproc)
# Each round runs build/adamw_bench (dissect, streaming bf16 stores as by default; also a STREAM
# triad) and benchmarks/torch_adamw_cpu.py (plain = foreach=False, and foreach=True), each with
# its median of STEPS (default 5) timed steps. Prints a table: per implementation the median over
# the rounds of parameters/s and GB/s (28 bytes per parameter, the traffic both have in common),
# and dissect's speed-up over each PyTorch mode as the median of the rounds' paired ratios.
# BUILD=build-gpu picks another build directory; PYTHON3 another interpreter.
# AB_ENV="VAR=value ..." also runs dissect with that environment in every round (first in odd
# rounds, second in even ones), e.g. AB_ENV=DX_HOST_ADAMW_PREFETCH=0, and prints the default's
# speed-up over it as the median of the rounds' paired ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3} params=${2:-1000000000} threads=${3:-$(nproc)} steps=${STEPS:-5}
bin=${BUILD:-build}/adamw_bench
py=${PYTHON3:-python3}
"$py" -c 'import torch' 2>/dev/null || { echo "host_adamw_bench.sh: $py cannot import torch (PyTorch is the reference)" >&2; exit 1; }
[ -x "$bin" ] || { echo "host_adamw_bench.sh: $bin not found (build first: meson setup ${BUILD:-build} && ninja -C ${BUILD:-build})" >&2; exit 1; }
log=${OUT:-/tmp/dissect-host-adamw}; mkdir -p "$log"
: > "$log/results.jsonl"
ab=${AB_ENV:-}
run_ab() { # round: dissect's update alone under AB_ENV, labelled dissect-host-adamw-ab
  env $ab "$bin" --params "$params" --threads "$threads" --steps "$steps" 2> "$log/dissect_ab_$1.err" \
    | grep '"impl": "dissect-host-adamw"' | sed "s/^{/{\"round\": $1, /; s/dissect-host-adamw/dissect-host-adamw-ab/" \
    >> "$log/results.jsonl"
}
for r in $(seq 1 "$rounds"); do
  [ -n "$ab" ] && [ $((r % 2)) = 1 ] && run_ab "$r"
  "$bin" --params "$params" --threads "$threads" --steps "$steps" 2> "$log/dissect_$r.err" \
    | sed "s/^{/{\"round\": $r, /" >> "$log/results.jsonl"
  [ -n "$ab" ] && [ $((r % 2)) = 0 ] && run_ab "$r"
  OMP_NUM_THREADS=$threads "$py" benchmarks/torch_adamw_cpu.py --params "$params" --threads "$threads" \
    --steps "$steps" --modes plain,foreach 2> "$log/torch_$r.err" | sed "s/^{/{\"round\": $r, /" >> "$log/results.jsonl"
done
"$py" - "$log/results.jsonl" "$params" "$threads" "$ab" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
n, threads, ab = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for r in rows:
    if "error" in r:
        sys.exit(f"host_adamw_bench.sh: round {r['round']} {r['impl']}: {r['error']}")
by = {}
for r in rows:
    by.setdefault(r["impl"], {})[r["round"]] = r
d = by.get("dissect-host-adamw", {})
print(f"\nhost AdamW, {n:.3g} fp32 parameters, {threads} threads, {len(d)} rounds (median of each round's steps)")
print(f"{'implementation':<26} {'params/s':>10} {'runs':>26} {'GB/s (28 B)':>12} {'dissect speed-up':>17}")
for impl in ("dissect-host-adamw", "dissect-host-adamw-ab", "torch-adamw-cpu-plain", "torch-adamw-cpu-foreach"):
    rs = by.get(impl, {})
    if not rs:
        continue
    pps = [rs[k]["params_per_s"] for k in sorted(rs)]
    ratio = ""
    if impl != "dissect-host-adamw":
        ratios = [d[k]["params_per_s"] / rs[k]["params_per_s"] for k in sorted(rs) if k in d]
        ratio = f"{st.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
    runs = ", ".join(f"{p / 1e9:.2f}" for p in pps)
    print(f"{impl:<26} {st.median(pps):>10.3g} {runs:>26} {st.median(pps) * 28 / 1e9:>12.0f} {ratio:>17}")
if ab:
    print(f"(dissect-host-adamw-ab: dissect under {ab})")
tri = [r["gbps"] for r in rows if r["impl"] == "stream-triad"]
if tri:
    print(f"STREAM triad (24 B per element counted): {st.median(tri):.0f} GB/s median ({min(tri):.0f}-{max(tri):.0f})")
PY
