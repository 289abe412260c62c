# Sourced by the one-GPU benchmark scripts: the SM clock (MHz), the power draw (W) and why the clock
# is below its maximum (nvidia-smi's clocks_event_reasons.active bitmask, e.g. 0x0000000000000004)
# of GPU $gpu (the caller sets it: an index for nvidia-smi -i) every 100 ms, written in the
# background as CSV lines "MHz, W, reasons" to a file, between sample_start FILE and sample_stop.
# Where the driver has no clock-event reasons the lines are "MHz, W". Without nvidia-smi, nothing is
# sampled and FILE stays as it was. The reasons' bits (nvml.h, nvmlClocksEventReason*): 0x1 idle,
# 0x4 SW power cap (the board's power limit: the usual one in training), 0x8 HW slowdown, 0x20 SW
# thermal, 0x40 HW thermal, 0x80 HW power brake; benchmarks/gpu_samples.py reads the file and sums them up.
sampler=""
sample_start() {
  sampler=""
  command -v nvidia-smi > /dev/null || return 0
  local q=clocks.sm,power.draw,clocks_event_reasons.active
  nvidia-smi -i "$gpu" --query-gpu=$q --format=csv,noheader,nounits > /dev/null 2>&1 || q=clocks.sm,power.draw
  nvidia-smi -i "$gpu" --query-gpu=$q --format=csv,noheader,nounits -lms 100 > "$1" 2> /dev/null &
  sampler=$!
}
sample_stop() { [ -z "$sampler" ] || { kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null || true; }; }
