# Sourced by the GPU benchmark scripts: the model of MODEL (default tinyllama-1.1b) with LAYERS
# layers (default: the model's own), as $model and shape=(hidden layers heads kv-heads ffn);
# any other MODEL stops the script with a message naming the caller.
model=${MODEL:-tinyllama-1.1b}
case "$model" in
  tinyllama-1.1b) shape=(2048 ${LAYERS:-22} 32 4 5632) ;;
  llama2-7b) shape=(4096 ${LAYERS:-32} 32 32 11008) ;;
  *) echo "$(basename "$0"): MODEL must be tinyllama-1.1b or llama2-7b, not '$model'" >&2; exit 1 ;;
esac
