#!/usr/bin/env bash
# dissect's tensor / sequence / pipeline parallelism on the GPUs of one host against one GPU and
# against PyTorch (TP, PP 1F1B, FSDP2), TinyLlama-1.1B shapes, one call:
#   . .gpu/env.sh && benchmarks/grid_bench.sh [SEQ] [MICRO_BATCH] [MICRO_BATCHES] [STEPS]   (2048 8 8 10)
# Needs build-gpu (tests/gpu_suite.sh build). NGPU (default 2) ranks for the parallel runs; every
# dissect run uses micro-batch MICRO_BATCH and MICRO_BATCHES micro-batches per step
# (--grad-accum), so one step is MICRO_BATCH x MICRO_BATCHES sequences per model replica:
#   gpu1      1 GPU, ZeRO-0 (the baseline)
#   zero2     NGPU GPUs, ZeRO-2 data parallel (global batch NGPU x MB x MICRO_BATCHES)
#   tp, tp_sp --tp NGPU, without and with --sequence-parallel
#   pp_1f1b   --pp NGPU --pipeline-schedule 1f1b
#   pp_int    --pp NGPU --pipeline-schedule interleaved-1f1b with the largest
#             --num-layers-per-virtual-pipeline-stage that gives >= 2 model chunks per stage
#             (22 layers on 2 stages: 1 layer per chunk, 11 chunks per stage)
# Step-level traces; median step time of the steps after the 3rd; peak memory = max over ranks
# and steps of /steps peak_mem_bytes. OP_TRACE=1 adds a 4-step op-level run of each TP and PP
# layout and writes its `dissect report` to $OUT/NAME_report.txt. Then the PyTorch references
# (benchmarks/torch_grid_ref.py through torchrun: tp = one micro-batch of MB sequences per step,
# pp = Schedule1F1B over MICRO_BATCHES micro-batches, fsdp = MB sequences per GPU), each under a
# time limit; SKIP_TORCH=1 skips them. A failed run is marked in the table and the rest go on
# (limits: RUN_TIMEOUT 150 s per dissect run, TORCH_TIMEOUT 240 s per PyTorch mode; a dissect run
# killed at its limit after its last step is still tabled from its trace, marked (*)).
# Defaults on 2 x H200: about 5 minutes (dissect runs 40-70 s each, mostly set-up; PyTorch
# 16-26 s each). Logs, traces, torch_MODE.jsonl and table.txt go to $OUT (/tmp/dissect-grid).
# Prints: run | GPUs | tokens/s | per GPU | vs 1 GPU (per-GPU tokens/s over dissect's one GPU) |
# step ms | MFU (6 x non-embedding params + 12 x layers x hidden x seq FLOPs per token at
# 989 TFLOP/s per GPU) | peak GiB | sequences per step. NCCL_* and DX_* variables of the
# environment are passed to the ranks. RUNS and TORCH_MODES pick subsets; DISSECT, DEVICE and
# MODEL override the binary, --device and --model, LAYERS and VOCAB its shape (e.g. a CPU smoke
# test of the script: DISSECT=build/dissect DEVICE=cpu MODEL=brown-small LAYERS=4 VOCAB=4096).
set -uo pipefail
cd "$(dirname "$0")/.."
seq=${1:-2048} mb=${2:-8} nmb=${3:-8} steps=${4:-10}
ngpu=${NGPU:-2}
OUT=${OUT:-/tmp/dissect-grid}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
dissect=${DISSECT:-build-gpu/dissect}
layers=${LAYERS:-22}  # TinyLlama-1.1B (LAYERS: for another MODEL)
t_start=$SECONDS
[ "$steps" -ge 4 ] || { echo "grid_bench: STEPS must be >= 4 (3 warm-up steps are left out)"; exit 2; }
: > "$OUT/status.txt"
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab "${VOCAB:-32000}" --tokens $(( (steps + 2) * mb * nmb * ngpu * (seq + 1) )) \
  && "$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size "${VOCAB:-32000}" > /dev/null \
  || { echo "grid_bench: could not make the token shard"; exit 1; }
rm -f "$OUT/ids.txt"
common=(train --device "${DEVICE:-cuda}" --model "${MODEL:-tinyllama-1.1b}" --train-data "$OUT/tok.bin"
        --seq-length "$seq" --micro-batch "$mb" --grad-accum "$nmb" --eval-interval 0 --sample-tokens 0
        --log-interval 1)
mpi=(mpirun -x LD_LIBRARY_PATH -x PATH)
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && mpi+=(-x CUDA_VISIBLE_DEVICES)
for v in $(env | grep -o '^\(NCCL\|DX\)_[A-Za-z0-9_]*'); do mpi+=(-x "$v"); done
limit=${RUN_TIMEOUT:-150}  # seconds per dissect run (a normal one takes 40-70 s)

dx() { # name np flags...: a step-level run (+ an op-level one with OP_TRACE=1 for TP/PP layouts)
  local n=$1 np=$2 rc; shift 2
  rm -f "$OUT/$n.h5" "$OUT/${n}_op.h5" "$OUT/${n}_report.txt"
  echo "== dissect $n: -np $np $* ($(( SECONDS - t_start )) s)"
  timeout -k 10 "$limit" "${mpi[@]}" -np "$np" "$dissect" "${common[@]}" "$@" --train-iters "$steps" \
    --trace "$OUT/$n.h5" --trace-level step > "$OUT/$n.log" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ -f "$OUT/$n.h5" ]; then echo "$n ok" >> "$OUT/status.txt"
  else
    echo "$n failed(rc=$rc)" >> "$OUT/status.txt"; tail -n 15 "$OUT/$n.log"; return
  fi
  grep -m1 '^grid' "$OUT/$n.log"
  if [ "${OP_TRACE:-0}" = 1 ] && [ "$n" != gpu1 ] && [ "$n" != zero2 ]; then
    if timeout -k 10 "$limit" "${mpi[@]}" -np "$np" "$dissect" "${common[@]}" "$@" --train-iters 4 \
         --trace "$OUT/${n}_op.h5" --trace-level op > "$OUT/${n}_op.log" 2>&1 \
       && "$dissect" report "$OUT/${n}_op.h5" > "$OUT/${n}_report.txt" 2>&1; then
      echo "   op-level report: $OUT/${n}_report.txt"
    else
      echo "   op-level run of $n failed"; tail -n 10 "$OUT/${n}_op.log"
    fi
  fi
}

# interleaved 1F1B: layers per model chunk, the largest with >= 2 chunks per stage
vl=0
for (( v = layers / (2 * ngpu); v >= 1; v-- )); do
  if (( layers % (ngpu * v) == 0 )); then vl=$v; break; fi
done

for r in ${RUNS:-gpu1 zero2 tp tp_sp pp_1f1b pp_int}; do
  case $r in
    gpu1) dx gpu1 1 --zero-stage 0 ;;
    zero2) dx zero2 "$ngpu" --zero-stage 2 ;;
    tp) dx tp "$ngpu" --tp "$ngpu" ;;
    tp_sp) dx tp_sp "$ngpu" --tp "$ngpu" --sequence-parallel ;;
    pp_1f1b) dx pp_1f1b "$ngpu" --pp "$ngpu" --pipeline-schedule 1f1b ;;
    pp_int)
      if (( vl == 0 || nmb % ngpu != 0 )); then
        echo "pp_int skipped (no layer split with >= 2 chunks per stage, or $nmb micro-batches not a multiple of $ngpu)" \
          | tee -a "$OUT/status.txt"
      else
        dx pp_int "$ngpu" --pp "$ngpu" --pipeline-schedule interleaved-1f1b \
          --num-layers-per-virtual-pipeline-stage "$vl"
      fi ;;
    *) echo "grid_bench: unknown run '$r'" ;;
  esac
done

if [ "${SKIP_TORCH:-0}" != 1 ]; then
  for m in ${TORCH_MODES:-tp pp fsdp}; do
    echo "== pytorch $m ($(( SECONDS - t_start )) s)"
    timeout -k 10 "${TORCH_TIMEOUT:-240}" "$py" -m torch.distributed.run --standalone --nproc_per_node "$ngpu" \
      benchmarks/torch_grid_ref.py --mode "$m" --seq "$seq" --micro-batch "$mb" --micro-batches "$nmb" \
      --warmup 3 --steps $(( steps - 3 )) > "$OUT/torch_$m.jsonl" 2> "$OUT/torch_$m.err"
    rc=$?
    if ! grep -q '^{' "$OUT/torch_$m.jsonl"; then
      echo "{\"mode\": \"$m\", \"error\": \"torchrun exited with $rc and printed no result (see torch_$m.err)\"}" \
        >> "$OUT/torch_$m.jsonl"
    fi
    grep '"error"' "$OUT/torch_$m.jsonl" && tail -n 15 "$OUT/torch_$m.err"
  done
fi

"$py" - "$OUT" "$seq" "$mb" "$nmb" "$ngpu" "${SKIP_TORCH:-0}" "${TORCH_MODES:-tp pp fsdp}" "$steps" <<'PY' | tee "$OUT/table.txt"
import json, os, sys
import numpy as np
out, seq, mb, nmb, ngpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch_modes = [] if sys.argv[6] == "1" else sys.argv[7].split()
steps = int(sys.argv[8])
footnotes = []
L, D, H, Hkv, I, V = 22, 2048, 32, 4, 5632, 32000  # TinyLlama-1.1B
Dh = D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
fpt = 6 * nonembed + 12 * L * D * seq
status = {}
for line in open(f"{out}/status.txt"):
    w = line.split(None, 1)
    if w:
        status[w[0]] = w[1].strip() if len(w) > 1 else ""

def dissect_row(name, label, n, seqs):
    st = status.get(name)
    if st is None:
        return None
    if st.startswith("skipped") or not os.path.exists(f"{out}/{name}.h5"):
        return dict(label=label, n=n, status=st)
    try:
        import h5py
        with h5py.File(f"{out}/{name}.h5", "r") as f:
            s = f["steps"]
            if st != "ok" and len(s) < steps:
                raise ValueError(f"{len(s)} of {steps} steps")
            t = float(np.median(np.asarray(s["step_time_s"])[3:]))
            peak = float(np.max(np.asarray(s["peak_mem_bytes"]))) / 2**30
            try:
                tok_step = float(np.asarray(s["tokens"])[-1])
            except (KeyError, ValueError):
                tok_step = seqs * seq
    except Exception as e:  # noqa: BLE001 (a broken trace is one failed row)
        return dict(label=label, n=n, status=st if st != "ok" else f"trace unreadable: {e}")
    if st != "ok":  # e.g. killed at the time limit after its last step: its trace has every step
        footnotes.append(f"{label}: {st}, but its trace holds all {steps} steps (flushed every 10 "
                         f"steps): the run did not end by itself; see {out}/{name}.log")
        label += " (*)"
    return dict(label=label, n=n, tok=tok_step / t, ms=t * 1e3, peak=peak, seqs=tok_step / seq, status="ok")

def torch_row(mode, label):
    path = f"{out}/torch_{mode}.jsonl"
    if not os.path.exists(path):
        return None
    recs = []
    for l in open(path):
        l = l.strip()
        if l.startswith("{"):
            try:
                recs.append(json.loads(l))
            except ValueError:
                pass
    ok = [r for r in recs if "tokens_per_s" in r]
    if ok:
        r = ok[0]
        return dict(label=label, n=r.get("gpus", ngpu), tok=r["tokens_per_s"], ms=r["step_ms"],
                    peak=r["peak_mem_gib"], seqs=r.get("tokens_per_step", 0) / seq, status="ok",
                    notes=r.get("notes", ""), loss=r.get("loss"))
    errs = [r for r in recs if "error" in r]
    errs.sort(key=lambda r: r.get("rank", 0))
    msg = errs[0]["error"] if errs else "no result"
    return dict(label=label, n=ngpu, status="failed: " + msg[:300])

rows = [
    dissect_row("gpu1", "dissect 1 GPU", 1, mb * nmb),
    dissect_row("zero2", f"dissect ZeRO-2 DP={ngpu}", ngpu, ngpu * mb * nmb),
    torch_row("fsdp", "pytorch FSDP2") if "fsdp" in torch_modes else None,
    dissect_row("tp", f"dissect TP={ngpu}", ngpu, mb * nmb),
    dissect_row("tp_sp", f"dissect TP={ngpu} + SP", ngpu, mb * nmb),
    torch_row("tp", "pytorch TP") if "tp" in torch_modes else None,
    dissect_row("pp_1f1b", f"dissect PP={ngpu} 1F1B", ngpu, mb * nmb),
    dissect_row("pp_int", f"dissect PP={ngpu} interleaved", ngpu, mb * nmb),
    torch_row("pp", "pytorch PP 1F1B") if "pp" in torch_modes else None,
]
rows = [r for r in rows if r]
base = next((r for r in rows if r["label"] == "dissect 1 GPU" and r["status"] == "ok"), None)
base_tok = base["tok"] if base else float("nan")
print(f"\nTinyLlama-1.1B shapes, seq {seq}, micro-batch {mb}, {nmb} micro-batches per step (dissect, "
      f"PyTorch PP); PyTorch TP: 1 micro-batch per step, FSDP2: {mb} sequences per GPU per step")
print(f"{'run':<28} {'GPUs':>4} {'tokens/s':>10} {'per GPU':>9} {'vs 1 GPU':>8} {'step ms':>9} {'MFU':>6}"
      f" {'peak GiB':>8} {'seqs/step':>9}")
for r in rows:
    if r["status"] != "ok":
        print(f"{r['label']:<28} {r['n']:>4} {r['status']}")
        continue
    per = r["tok"] / r["n"]
    print(f"{r['label']:<28} {r['n']:>4} {r['tok']:>10.0f} {per:>9.0f} {per / base_tok:>8.3f} {r['ms']:>9.1f}"
          f" {r['tok'] * fpt / (989e12 * r['n']):>6.3f} {r['peak']:>8.1f} {r['seqs']:>9.0f}")
for f in footnotes:
    print("(*) " + f)
for r in rows:
    if r.get("notes"):
        print(f"\n{r['label']} (loss {r.get('loss', float('nan')):.4f}): {r['notes']}")
PY
echo "grid_bench: $(( SECONDS - t_start )) s; logs, traces and JSON in $OUT"
