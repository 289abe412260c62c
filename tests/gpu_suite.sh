#!/usr/bin/env bash
# The GPU checks of dissect, for a GPU host (see ../shared/gpu/README.md: `. .gpu/env.sh` first):
#   tests/gpu_suite.sh [sections...]       sections: build kernels sanitizer hf overlap zero grid offload trace brown
#                                          lora resume watchdog accum (run only when named)
# Builds build-gpu (-Dcuda=enabled), then: CUDA kernels vs their CPU twins (table);
# compute-sanitizer memcheck over that test; logits/loss/gradients against Hugging Face's
# LlamaForCausalLM (bf16 on the GPU, fp32 on the CPU backend; bf16 also at head dims 64 and 128); ZeRO stages 0-3 on all visible
# GPUs against one GPU; TP / sequence / pipeline parallelism (every schedule) on 2 GPUs against one
# GPU (tests/test_grid_equivalence.sh with 2 ranks at most); an op-level GPU trace checked with h5py and `dissect report`; the Brown
# model on 1 GPU and on all GPUs (needs data/brown from examples/prepare_brown.sh). lora: PEFT loads
# dissect's trained adapters and reproduces its logits (tests/peft_roundtrip.sh, bf16 and fp32);
# QLoRA trains bitwise as LoRA on the NF4-rounded model; LoRA and QLoRA at DP 2 ZeRO-3 give one GPU's losses.
# overlap: AdamW beside the next forward (the default) gives bitwise the serial update's weights and
# losses (DX_OPT_OVERLAP=0), at ZeRO 0 and 1, with evaluations and a checkpoint in between, and its
# op-level trace passes tests/check_events.py.
# Each step is killed after STEP_TIMEOUT seconds (default 480; a hung kernel then costs one step,
# reported as TIMEOUT, not the whole call). Logs go to $OUT (default /tmp/dissect-gpu); a summary
# table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dissect-gpu}; mkdir -p "$OUT"
export PYTHON3=${PYTHON3:-python3} SRCDIR=$PWD DISSECT=$PWD/build-gpu/dissect PYTHONUNBUFFERED=1
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
sections=("$@"); [ ${#sections[@]} -gt 0 ] || sections=(build kernels sanitizer hf overlap zero grid offload trace brown)
declare -A result
mpi=(mpirun -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE -x PATH)
run() { # name command...: runs (killed after STEP_TIMEOUT s), logs to $OUT/name.log, records ok/FAIL/TIMEOUT
  local name=$1 rc=0; shift
  echo "== $name: $*"
  timeout -k 10 "${STEP_TIMEOUT:-480}" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
  case $rc in
    0) result[$name]=ok ;;
    124|137) result[$name]="TIMEOUT(${STEP_TIMEOUT:-480} s)" ;;
    *) result[$name]="FAIL($rc)" ;;
  esac
  tail -n "${TAIL:-25}" "$OUT/$name.log"
}
want() { [[ " ${sections[*]} " == *" $1 "* ]]; }

if want build; then
  [ -f build-gpu/build.ninja ] || meson setup build-gpu -Dcuda=enabled -Dsentencepiece=disabled > "$OUT/setup.log" 2>&1
  run build ninja -C build-gpu
fi
want kernels && run kernels build-gpu/tests/test_cuda_kernels
want sanitizer && DX_CUDA_TEST_NO_PERF=1 run sanitizer compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/test_cuda_kernels
if want hf; then
  run hf_bf16 "$PYTHON3" examples/compare_hf.py --dissect "$DISSECT" --dtype bf16 --dissect-device cuda --mpirun "${mpi[*]} -np 1"
  run hf_fp32 "$PYTHON3" examples/compare_hf.py --dissect "$DISSECT" --dtype fp32 --dissect-device cpu --mpirun "${mpi[*]} -np 1"
  # head dims 64 and 128 (the default model's is 32): the Hopper attention kernels and the Q|K|V
  # GEMM with RoPE in its epilogue (gemm_rope) run only there
  run hf_bf16_dh64 "$PYTHON3" examples/compare_hf.py --dissect "$DISSECT" --dtype bf16 --dissect-device cuda \
    --mpirun "${mpi[*]} -np 1" --hidden 512 --intermediate 1376 --heads 8 --kv-heads 2
  run hf_bf16_dh128 "$PYTHON3" examples/compare_hf.py --dissect "$DISSECT" --dtype bf16 --dissect-device cuda \
    --mpirun "${mpi[*]} -np 1" --hidden 1024 --intermediate 2752 --heads 8 --kv-heads 2
fi
if want overlap; then
  o=$OUT/overlap; rm -rf "$o"; mkdir -p "$o"
  "$PYTHON3" tests/make_synthetic.py "$o/ids.txt" --vocab 4096 --tokens 200000 && "$PYTHON3" examples/make_shards.py "$o/ids.txt" "$o/train.bin" --vocab-size 4096 > /dev/null
  oc=(train --device cuda --model brown-small --train-data "$o/train.bin" --seq-length 256 --micro-batch 8 --eval-interval 4
      --sample-tokens 0 --log-interval 4 --train-iters 12 --save-interval 6)
  for z in 0 1; do
    for ov in 0 1; do
      run overlap_z${z}_$ov env DX_OPT_OVERLAP=$ov "${mpi[@]}" -x DX_OPT_OVERLAP -np 1 "$DISSECT" "${oc[@]}" --zero-stage $z \
        --save-dir "$o/run_z${z}_$ov" --save "$o/ck_z${z}_$ov.h5" --trace "$o/tr_z${z}_$ov.h5" --trace-level op
    done
    run overlap_z${z}_weights "$PYTHON3" tests/compare_checkpoints.py --rtol 0 "$o/ck_z${z}_0.h5" "$o/ck_z${z}_1.h5"
    run overlap_z${z}_losses "$PYTHON3" tests/compare_traces.py --rtol 0 "$o/tr_z${z}_0.h5" "$o/tr_z${z}_1.h5"
  done
  run overlap_events "$PYTHON3" tests/check_events.py "$o/tr_z0_1.h5" --require-op adamw
  TAIL=40 run overlap_report "$DISSECT" report "$o/tr_z0_1.h5"
fi
if want accum; then # a step's micro-batches queued without host waits (the default) against DX_MICRO_SYNC=1
  # (a sync after every forward and backward): the same losses and weights bit for bit, with four
  # micro-batches per step, at ZeRO 1 (AdamW beside the next forward), 3, and 1 with the optimizer
  # offloaded and full recomputation
  m=$OUT/accum; rm -rf "$m"; mkdir -p "$m"
  "$PYTHON3" tests/make_synthetic.py "$m/ids.txt" --vocab 4096 --tokens 400000 && "$PYTHON3" examples/make_shards.py "$m/ids.txt" "$m/train.bin" --vocab-size 4096 > /dev/null
  mc=(train --device cuda --model brown-small --train-data "$m/train.bin" --seq-length 256 --micro-batch 4 --grad-accum 4
      --eval-interval 0 --sample-tokens 0 --log-interval 4 --train-iters 10)
  declare -A mflags=([z1]="--zero-stage 1" [z3]="--zero-stage 3" [off]="--zero-stage 1 --offload-optimizer cpu --recompute-granularity full --recompute-method uniform")
  for k in z1 z3 off; do
    for ms in 0 1; do
      # shellcheck disable=SC2086
      run accum_${k}_$ms env DX_MICRO_SYNC=$ms "${mpi[@]}" -x DX_MICRO_SYNC -np 1 "$DISSECT" "${mc[@]}" ${mflags[$k]} \
        --save "$m/ck_${k}_$ms.h5" --trace "$m/tr_${k}_$ms.h5"
    done
    run accum_${k}_weights "$PYTHON3" tests/compare_checkpoints.py --rtol 0 "$m/ck_${k}_1.h5" "$m/ck_${k}_0.h5"
    run accum_${k}_losses "$PYTHON3" tests/compare_traces.py --rtol 0 "$m/tr_${k}_1.h5" "$m/tr_${k}_0.h5"
  done
fi
if want zero && [ "$ngpu" -ge 2 ]; then
  ZE_DEVICE=cuda ZE_DPS=2 ZE_RTOL=${ZE_RTOL:-2e-2} ZE_STEPS=20 ZE_MODEL=brown-small run zero bash tests/test_zero_equivalence.sh
fi
if want grid && [ "$ngpu" -ge 2 ]; then
  GT_DEVICE=cuda GT_MAXNP=2 GT_RTOL=${GT_RTOL:-2e-2} GT_MODEL=brown-small run grid bash tests/test_grid_equivalence.sh
fi
if want offload; then # optimizer offload on the GPU against the same run without it (bf16 bounds)
  OFF_DEVICE=cuda OFF_RTOL=${OFF_RTOL:-2e-2} OFF_MAXNP=$ngpu OFF_MODEL=brown-small run offload bash tests/test_offload.sh
fi
if want lora; then # LoRA / QLoRA on the GPU: PEFT round trip, QLoRA = LoRA on the NF4-rounded model, DP 2 ZeRO-3
  TAIL=12 PR_DEVICE=cuda run peft_bf16 bash tests/peft_roundtrip.sh
  TAIL=12 PR_DEVICE=cpu run peft_fp32 bash tests/peft_roundtrip.sh
  l=$OUT/lora; rm -rf "$l"; mkdir -p "$l"
  "$PYTHON3" examples/compare_hf.py --workdir "$l" --prepare-only > /dev/null && "$PYTHON3" tests/nf4_round_hf.py "$l/hf_model" "$l/hf_nf4" \
    && "$PYTHON3" tests/make_synthetic.py "$l/ids.txt" --vocab 1000 --tokens 100000 \
    && "$PYTHON3" examples/make_shards.py "$l/ids.txt" "$l/train.bin" --vocab-size 1000 > /dev/null
  lc=(train --device cuda --train-data "$l/train.bin" --seq-length 64 --train-iters 20 --warmup-iters 3 --lr 1e-2
      --eval-interval 0 --sample-tokens 0 --log-interval 5 --lora-rank 8 --lora-alpha 16
      --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
  run lora_1gpu "${mpi[@]}" -np 1 "$DISSECT" "${lc[@]}" --hf-model "$l/hf_model" --micro-batch 8 --trace "$l/lora.h5"
  run qlora_1gpu "${mpi[@]}" -np 1 "$DISSECT" "${lc[@]}" --hf-model "$l/hf_model" --quantize nf4 --micro-batch 8 --trace "$l/qlora.h5"
  run lora_nf4_1gpu "${mpi[@]}" -np 1 "$DISSECT" "${lc[@]}" --hf-model "$l/hf_nf4" --micro-batch 8 --trace "$l/lora_nf4.h5"
  run qlora_op "${mpi[@]}" -np 1 "$DISSECT" "${lc[@]}" --hf-model "$l/hf_model" --quantize nf4 --micro-batch 8 --train-iters 3 \
    --trace "$l/qlora_op.h5" --trace-level op
  run qlora_op_check "$PYTHON3" tests/check_events.py "$l/qlora_op.h5" --require-op lora_gemm --require-op dequantize
  # QLoRA dequantizes to exactly the values of the NF4-rounded model: the same losses bit for bit
  run qlora_vs_nf4 "$PYTHON3" tests/compare_traces.py --rtol 0 "$l/lora_nf4.h5" "$l/qlora.h5"
  if [ "$ngpu" -ge 2 ]; then
    run lora_dp2_z3 "${mpi[@]}" -np 2 "$DISSECT" "${lc[@]}" --hf-model "$l/hf_model" --micro-batch 4 --zero-stage 3 --trace "$l/lora_dp2.h5"
    run qlora_dp2_z3 "${mpi[@]}" -np 2 "$DISSECT" "${lc[@]}" --hf-model "$l/hf_model" --quantize nf4 --micro-batch 4 --zero-stage 3 \
      --trace "$l/qlora_dp2.h5"
    run lora_dp2_cmp "$PYTHON3" tests/compare_traces.py --rtol "${LT_RTOL:-2e-2}" "$l/lora.h5" "$l/lora_dp2.h5"
    run qlora_dp2_cmp "$PYTHON3" tests/compare_traces.py --rtol "${LT_RTOL:-2e-2}" "$l/qlora.h5" "$l/qlora_dp2.h5"
  fi
fi
if want trace; then
  t=$OUT/trace; mkdir -p "$t"
  "$PYTHON3" tests/make_synthetic.py "$t/ids.txt" --vocab 4096 --tokens 200000 && "$PYTHON3" examples/make_shards.py "$t/ids.txt" "$t/train.bin" --vocab-size 4096 > /dev/null
  run trace_run "${mpi[@]}" -np "$ngpu" "$DISSECT" train --device cuda --model brown-small --train-data "$t/train.bin" \
    --seq-length 256 --micro-batch 8 --train-iters 30 --eval-interval 0 --sample-tokens 0 --zero-stage 2 --trace "$t/gpu_op.h5" --trace-level op
  run trace_check "$PYTHON3" tests/check_events.py "$t/gpu_op.h5" --require-op gemm --require-op attention --require-op reduce_scatter
  TAIL=70 run trace_report "$DISSECT" report "$t/gpu_op.h5" --chrome "$t/gpu_op.json"
fi
if want resume; then # checkpoints on the GPU: save, resume (plain and under optimizer offload), preemption
  r=$OUT/resume; rm -rf "$r"; mkdir -p "$r"
  "$PYTHON3" tests/make_synthetic.py "$r/ids.txt" --vocab 4096 --tokens 200000 && "$PYTHON3" examples/make_shards.py "$r/ids.txt" "$r/train.bin" --vocab-size 4096 > /dev/null
  rc=(train --device cuda --model brown-small --train-data "$r/train.bin" --seq-length 256 --micro-batch 8 --eval-interval 0
      --sample-tokens 0 --log-interval 1 --zero-stage 1 --train-iters 8)
  run resume_full "${mpi[@]}" -np 1 "$DISSECT" "${rc[@]}" --save-dir "$r/run" --save-interval 4 --save "$r/full.h5"
  run resume_resumed "${mpi[@]}" -np 1 "$DISSECT" "${rc[@]}" --resume "$r/run/iter_0000004.h5" --save "$r/resumed.h5"
  run resume_offload "${mpi[@]}" -np 1 "$DISSECT" "${rc[@]}" --resume "$r/run/iter_0000004.h5" --offload-optimizer cpu --save "$r/offload.h5"
  run resume_compare "$PYTHON3" tests/compare_checkpoints.py --rtol "${RS_RTOL:-2e-2}" "$r/full.h5" "$r/resumed.h5" "$r/offload.h5"
  # preemption: SIGUSR1 to the rank once step 20 is logged -> checkpoint, exit 0
  "${mpi[@]}" -np 1 "$DISSECT" "${rc[@]}" --train-iters 100000 --save-dir "$r/pre" > "$OUT/resume_preempt.log" 2>&1 &
  mp=$!
  for _ in $(seq 600); do grep "step    20/" "$OUT/resume_preempt.log" > /dev/null 2>&1 && break; sleep 0.1; done
  for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = dissect ] && kill -USR1 "${p#/proc/}"; done
  if wait "$mp" && ls "$r/pre" | grep '^iter_' > /dev/null; then result[resume_preempt]=ok; else result[resume_preempt]=FAIL; fi
  grep "signal\|checkpoint" "$OUT/resume_preempt.log" | tail -2
fi
if want watchdog; then # the watchdog thread's cost on a step with many collectives (ZeRO-3, NCCL): on vs off
  TAIL=12 run watchdog_bench bash benchmarks/watchdog_overhead.sh
fi
if want brown && [ -f data/brown/train.bin ]; then
  b=(train --config examples/configs/brown-small.json --device cuda --log-interval 200 --trace-level step)
  run brown_1gpu "${mpi[@]}" -np 1 "$DISSECT" "${b[@]}" --micro-batch 16 --trace "$OUT/brown_1gpu.h5"
  [ "$ngpu" -ge 2 ] && run brown_2gpu "${mpi[@]}" -np 2 "$DISSECT" "${b[@]}" --micro-batch 8 --trace "$OUT/brown_2gpu.h5"
fi
echo; echo "summary ($ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
for k in "${!result[@]}"; do printf '  %-14s %s\n' "$k" "${result[$k]}"; done | sort
