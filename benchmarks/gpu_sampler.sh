# Sourced by the one-GPU benchmark scripts: the SM clock (MHz) and power draw (W) of GPU $gpu (the
# caller sets it: an index for nvidia-smi -i) every 100 ms, written in the background as CSV lines
# "MHz, W" to a file, between sample_start FILE and sample_stop. Without nvidia-smi, nothing is
# sampled and FILE stays as it was.
sampler=""
sample_start() {
  sampler=""
  command -v nvidia-smi > /dev/null || return 0
  nvidia-smi -i "$gpu" --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 100 > "$1" 2> /dev/null &
  sampler=$!
}
sample_stop() { [ -z "$sampler" ] || { kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null || true; }; }
