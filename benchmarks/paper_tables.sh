#!/usr/bin/env bash
# The pre-training comparison of Zhang et al. 2023 ("Dissecting the runtime performance of the
# training, fine-tuning, and inference of LLMs", Llama-2-7B at seq 350 on 8 GPUs), dissect against
# PyTorch on the GPUs of one host, one call (issue 15, items 1, 2 and 5):
#   . .gpu/env.sh && benchmarks/paper_tables.sh [SEQ] [MICRO_BATCH] [STEPS]        (350 4 6)
# Needs build-gpu (tests/gpu_suite.sh build). NGPU ranks (default: every visible GPU), MODEL
# (llama2-7b; llama2-13b "where it fits": a run that the memory plan refuses is a row saying so).
# Every dissect run is one op-level run of STEPS steps with micro-batch MICRO_BATCH per rank:
#   zero2, zero3             DP = NGPU, ZeRO stage 2 / 3 (zero1: stage 1, only when RUNS names it)
#   zero2_off, zero3_off     + optimizer offload to the host (zero_optimization.offload_optimizer)
#   zero2_off_rc, zero3_off_rc  + full activation recomputation
#   zero2_rc                 ZeRO-2 + full recomputation, no offload
#   tpN                      TP = NGPU (one replica; micro-batch MICRO_BATCH)
#   tp2_ppP                  TP = 2 x PP = NGPU/2, 1F1B over PP_MICRO_BATCHES (default 2 x P)
#                            micro-batches per step
#   tp2_dpD_z1               TP = 2 x DP = NGPU/2, ZeRO-1
# For each: tokens/s (median step after the 3rd, from /steps), MFU (6 x non-embedding params + 12
# x layers x hidden x seq FLOPs per token at PEAK_TFLOPS (989) per GPU), peak GPU memory (max over
# ranks and steps of the allocator's peak), peak host memory (max of /steps host_peak_bytes: the
# largest rank's resident set), and the step breakdown of `dissect report` (mean over steps of
# the max over ranks: forward, backward, optimizer, exposed communication, idle; pipeline bubble
# measured and in theory). Then PyTorch, each under TORCH_TIMEOUT (300 s): FSDP2 (ZeRO-3-like,
# benchmarks/torch_grid_ref.py --mode fsdp), FSDP2 + CPUOffloadPolicy with per-layer checkpointing
# (benchmarks/torch_offload_ref.py under torchrun), TP = NGPU (torch_grid_ref.py --mode tp) and
# PP = NGPU 1F1B (--mode pp); their ranks get OMP_NUM_THREADS = cores / NGPU unless it is set
# (torchrun's default is 1). RUNS and TORCH_MODES (fsdp fsdp_off tp pp; also tp_compile and
# fsdp_compile: each block under torch.compile) pick subsets; after the table, each PyTorch row's
# host time (rank 0's main-thread CPU ms per step: near the step time when the host's kernel
# dispatch, not the GPU, bounds it);
# SKIP_TORCH=1 skips PyTorch; RUN_TIMEOUT (default 420 s) bounds each dissect run. DISSECT,
# DEVICE, MODEL, LAYERS and VOCAB override the binary, --device, --model and its shape (a CPU
# smoke test of the script: DISSECT=build/dissect DEVICE=cpu MODEL=tiny NGPU=4 SKIP_TORCH=1).
# Logs, traces, reports, torch_*.jsonl and table.txt go to $OUT (/tmp/dissect-paper).
# Prints the table last: run | GPUs | tokens/s | MFU | GPU GiB | host GiB | fwd | bwd | optim |
# exposed comm | idle | bubble (measured/theory) | step ms.
set -uo pipefail
cd "$(dirname "$0")/.."
seq=${1:-350} mb=${2:-4} steps=${3:-6}
if command -v nvidia-smi > /dev/null; then ngpu_default=$(nvidia-smi -L | wc -l); else ngpu_default=8; fi
ngpu=${NGPU:-$ngpu_default}
OUT=${OUT:-/tmp/dissect-paper}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
dissect=${DISSECT:-build-gpu/dissect}
model=${MODEL:-llama2-7b}
pp=$(( ngpu / 2 )); dpz1=$(( ngpu / 2 ))
ppm=${PP_MICRO_BATCHES:-$(( 2 * pp ))}
t_start=$SECONDS
[ "$steps" -ge 4 ] || { echo "paper_tables: STEPS must be >= 4 (3 warm-up steps are left out)"; exit 2; }
[ "$ngpu" -ge 2 ] && [ $(( ngpu % 2 )) = 0 ] || { echo "paper_tables: NGPU must be even and >= 2 (got $ngpu)"; exit 2; }
: > "$OUT/status.txt"
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab "${VOCAB:-32000}" --tokens $(( (steps + 2) * mb * ppm * ngpu * (seq + 1) )) \
  && "$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size "${VOCAB:-32000}" > /dev/null \
  || { echo "paper_tables: could not make the token shard"; exit 1; }
common=(train --device "${DEVICE:-cuda}" --model "$model" --train-data "$OUT/tok.bin" --seq-length "$seq"
        --micro-batch "$mb" --eval-interval 0 --sample-tokens 0 --log-interval 1 --train-iters "$steps")
[ -n "${LAYERS:-}" ] && common+=(--num-layers "$LAYERS")
mpi=(mpirun -x LD_LIBRARY_PATH -x PATH)
# MPIRUN_FLAGS: extra mpirun options for dissect's runs, word-split (e.g. placement: "--map-by
# ppr:2:package --bind-to package"); Open MPI's default for more than 2 ranks maps them round-robin
# over the packages and binds each to its package
# shellcheck disable=SC2206
[ -n "${MPIRUN_FLAGS:-}" ] && mpi+=(${MPIRUN_FLAGS})
[ -n "${CUDA_VISIBLE_DEVICES:-}" ] && mpi+=(-x CUDA_VISIBLE_DEVICES)
for v in $(env | grep -o '^\(NCCL\|DX\|OMP\)_[A-Za-z0-9_]*'); do mpi+=(-x "$v"); done
limit=${RUN_TIMEOUT:-420}

dx() { # name np flags...: one op-level run, its report
  local n=$1 np=$2 rc; shift 2
  rm -f "$OUT/$n.h5" "$OUT/${n}_report.txt"
  echo "== dissect $n: -np $np $* ($(( SECONDS - t_start )) s)"
  timeout -k 10 "$limit" "${mpi[@]}" -np "$np" "$dissect" "${common[@]}" "$@" --trace "$OUT/$n.h5" \
    --trace-level op > "$OUT/$n.log" 2>&1
  rc=$?
  if [ $rc = 0 ] && [ -f "$OUT/$n.h5" ]; then
    echo "$n ok" >> "$OUT/status.txt"
    "$dissect" report "$OUT/$n.h5" > "$OUT/${n}_report.txt" 2>&1 || echo "   (dissect report failed)"
  elif grep -q "memory plan:" "$OUT/$n.log"; then # refused before allocating: the reason is the row
    echo "$n does not fit: $(grep -m1 -o 'memory plan: .*' "$OUT/$n.log" | cut -c1-150)" >> "$OUT/status.txt"
  else
    echo "$n failed(rc=$rc)" >> "$OUT/status.txt"; tail -n 12 "$OUT/$n.log"
  fi
}

rc_full=(--recompute-granularity full --recompute-method uniform)
for r in ${RUNS:-zero2 zero3 zero2_off zero3_off zero2_rc zero2_off_rc zero3_off_rc tp tp2_pp tp2_dp_z1}; do
  case $r in
    zero2) dx zero2 "$ngpu" --zero-stage 2 ;;
    zero3) dx zero3 "$ngpu" --zero-stage 3 ;;
    zero1) dx zero1 "$ngpu" --zero-stage 1 ;;
    zero2_off) dx zero2_off "$ngpu" --zero-stage 2 --offload-optimizer cpu ;;
    zero3_off) dx zero3_off "$ngpu" --zero-stage 3 --offload-optimizer cpu ;;
    zero2_rc) dx zero2_rc "$ngpu" --zero-stage 2 "${rc_full[@]}" ;;
    zero2_off_rc) dx zero2_off_rc "$ngpu" --zero-stage 2 --offload-optimizer cpu "${rc_full[@]}" ;;
    zero3_off_rc) dx zero3_off_rc "$ngpu" --zero-stage 3 --offload-optimizer cpu "${rc_full[@]}" ;;
    tp) dx tp "$ngpu" --tp "$ngpu" ;;
    tp2_pp) dx tp2_pp "$ngpu" --tp 2 --pp "$pp" --pipeline-schedule 1f1b --grad-accum "$ppm" ;;
    tp2_dp_z1) dx tp2_dp_z1 "$ngpu" --tp 2 --zero-stage 1 ;;
    *) echo "paper_tables: unknown run '$r'" ;;
  esac
done

# PyTorch: the model's shape from dissect's own config (dissect plan prints nothing of it, so the
# presets are listed here; LAYERS overrides the layer count as for dissect)
case $model in
  llama2-7b) shape=(4096 32 32 32 11008) ;;     # hidden layers heads kv-heads ffn
  llama2-13b) shape=(5120 40 40 40 13824) ;;
  tinyllama-1.1b) shape=(2048 22 32 4 5632) ;;
  *) shape=() ;;
esac
[ -n "${LAYERS:-}" ] && [ ${#shape[@]} -gt 0 ] && shape[1]=$LAYERS
if [ "${SKIP_TORCH:-0}" != 1 ] && [ ${#shape[@]} -gt 0 ]; then
  targs=(--hidden "${shape[0]}" --layers "${shape[1]}" --heads "${shape[2]}" --kv-heads "${shape[3]}"
         --intermediate "${shape[4]}" --seq "$seq" --micro-batch "$mb")
  torch_threads=$(( $(nproc) / ngpu )); [ "$torch_threads" -ge 1 ] || torch_threads=1
  for m in ${TORCH_MODES:-fsdp fsdp_off tp pp}; do
    echo "== pytorch $m ($(( SECONDS - t_start )) s)"
    case $m in
      fsdp_off) script=benchmarks/torch_offload_ref.py; extra=(--warmup 2 --steps $(( steps - 3 > 2 ? steps - 3 : 2 ))) ;;
      pp) script=benchmarks/torch_grid_ref.py; extra=(--mode pp --micro-batches "$ppm" --warmup 3 --steps $(( steps - 3 ))) ;;
      *_compile) script=benchmarks/torch_grid_ref.py; extra=(--mode "${m%_compile}" --compile --warmup 3 --steps $(( steps - 3 ))) ;;
      *) script=benchmarks/torch_grid_ref.py; extra=(--mode "$m" --warmup 3 --steps $(( steps - 3 ))) ;;
    esac
    # torchrun sets OMP_NUM_THREADS=1 for every worker unless told: FSDP2's CPU AdamW would then
    # run on one core per rank, where dissect's host AdamW gets the host's cores shared by its ranks
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-$torch_threads} timeout -k 10 "${TORCH_TIMEOUT:-300}" "$py" -m torch.distributed.run --standalone --nproc_per_node "$ngpu" \
      "$script" "${targs[@]}" "${extra[@]}" > "$OUT/torch_$m.jsonl" 2> "$OUT/torch_$m.err"
    rc=$?
    grep -q '^{' "$OUT/torch_$m.jsonl" \
      || echo "{\"mode\": \"$m\", \"error\": \"torchrun exited with $rc and printed no result (see torch_$m.err)\"}" >> "$OUT/torch_$m.jsonl"
    grep '"error"' "$OUT/torch_$m.jsonl" && tail -n 8 "$OUT/torch_$m.err"
  done
fi

"$py" - "$OUT" "$seq" "$ngpu" "$model" "${shape[*]:-}" "${PEAK_TFLOPS:-989}" <<'PY' | tee "$OUT/table.txt"
import glob, json, os, sys
import numpy as np
out, seq, ngpu, model, shape, peak_tf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], float(sys.argv[6])
status = {}
for line in open(f"{out}/status.txt"):
    w = line.split(None, 1)
    if w:
        status[w[0]] = w[1].strip() if len(w) > 1 else ""

def flops_per_token(D, L, H, Hkv, I, V=32000):
    Dh = D // H
    nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
    return 6 * nonembed + 12 * L * D * seq

def shape_from_trace(f):
    cfg = json.loads(f["metadata"].attrs["config_json"]).get("model", {})
    return (cfg.get("hidden_size"), cfg.get("num_hidden_layers"), cfg.get("num_attention_heads"),
            cfg.get("num_key_value_heads"), cfg.get("intermediate_size"), cfg.get("vocab_size", 32000))

def report_numbers(path):
    """(forward, backward, optimizer, exposed comm, idle, step) ms: the 'mean max' row; bubble and
    theory from the pipeline table's 'all stages' line (None without a pipeline)."""
    brk, bub = None, None
    if not os.path.exists(path):
        return brk, bub
    for l in open(path):
        w = l.split()
        if w[:2] == ["mean", "max"] and len(w) == 8 and brk is None:
            brk = [float(x) for x in w[2:]]
        if w[:2] == ["all", "stages"] and len(w) >= 4:
            bub = (float(w[-2]), float(w[-1]))
    return brk, bub

rows = []
labels = {"zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "zero2_off": "ZeRO-2 + offload", "zero3_off": "ZeRO-3 + offload",
          "zero2_rc": "ZeRO-2 + recompute", "zero2_off_rc": "ZeRO-2 + offload + recompute",
          "zero3_off_rc": "ZeRO-3 + offload + recompute", "tp": f"TP={ngpu}", "tp2_pp": f"TP=2 x PP={ngpu // 2} (1F1B)",
          "tp2_dp_z1": f"TP=2 x DP={ngpu // 2} ZeRO-1"}
import h5py
for name, label in labels.items():
    st = status.get(name)
    if st is None:
        continue
    row = dict(label="dissect " + label, n=ngpu, status=st)
    if st == "ok":
        try:
            with h5py.File(f"{out}/{name}.h5", "r") as f:
                s = f["steps"]
                t = float(np.median(np.asarray(s["step_time_s"])[3:]))
                tok = float(np.asarray(s["tokens"])[-1]) / t
                row.update(tok=tok, ms=t * 1e3, gpu=float(np.max(s["peak_mem_bytes"])) / 2**30,
                           host=(float(np.max(s["host_peak_bytes"])) / 2**30 if "host_peak_bytes" in s.dtype.names else float("nan")),
                           mfu=tok * flops_per_token(*shape_from_trace(f)) / (peak_tf * 1e12 * ngpu))
            row["brk"], row["bub"] = report_numbers(f"{out}/{name}_report.txt")
        except Exception as e:  # noqa: BLE001 (one unreadable trace is one row)
            row["status"] = f"trace unreadable: {e}"
    rows.append(row)
tnames = {"fsdp": "FSDP2", "fsdp_compile": "FSDP2 + torch.compile", "fsdp_off": "FSDP2 + CPUOffloadPolicy + checkpointing",
          "tp": f"TP={ngpu}", "tp_compile": f"TP={ngpu} + torch.compile", "pp": f"PP={ngpu} 1F1B"}
for m, label in tnames.items():
    path = f"{out}/torch_{m}.jsonl"
    if not os.path.exists(path):
        continue
    recs = []
    for l in open(path):
        if l.strip().startswith("{"):
            try:
                recs.append(json.loads(l))
            except ValueError:
                pass
    ok = [r for r in recs if "tokens_per_s" in r]
    row = dict(label="pytorch " + label, n=ngpu, status="ok" if ok else "failed: " + (recs[0].get("error", "?")[:200] if recs else "no result"))
    if ok:
        r = ok[0]
        row.update(tok=r["tokens_per_s"], ms=r["step_ms"], mfu=r.get("mfu", float("nan")), host_ms=r.get("host_ms"),
                   gpu=r.get("peak_mem_gib", r.get("peak_gpu_gib", float("nan"))), host=r.get("peak_host_gib", float("nan")))
    rows.append(row)

print(f"\n{model}, seq {seq}, {ngpu} GPUs (dissect: median step after the 3rd of an op-level run; breakdown: "
      f"dissect report, mean over steps of the max over ranks, ms)")
hdr = (f"{'run':<44} {'GPUs':>4} {'tokens/s':>9} {'MFU':>6} {'GPU GiB':>8} {'host GiB':>8} {'fwd':>7} {'bwd':>7}"
       f" {'optim':>7} {'exp.comm':>8} {'idle':>6} {'bubble':>11} {'step ms':>8}")
print(hdr)
for r in rows:
    if r["status"] != "ok":
        print(f"{r['label']:<44} {r['n']:>4} {r['status']}")
        continue
    b = r.get("brk") or [float("nan")] * 6
    bub = r.get("bub")
    bs = f"{bub[0]:.3f}/{bub[1]:.3f}" if bub else "-"
    print(f"{r['label']:<44} {r['n']:>4} {r['tok']:>9.0f} {r['mfu']:>6.3f} {r['gpu']:>8.1f} {r['host']:>8.1f} {b[0]:>7.1f}"
          f" {b[1]:>7.1f} {b[2]:>7.1f} {b[3]:>8.1f} {b[4]:>6.1f} {bs:>11} {r['ms']:>8.1f}")
for r in rows:
    if r.get("host_ms") is not None:
        print(f"{r['label']}: rank 0's main thread on the CPU {r['host_ms']:.1f} ms of a {r['ms']:.1f} ms step")
PY
echo "paper_tables: $(( SECONDS - t_start )) s; logs, traces, reports and JSON in $OUT"
