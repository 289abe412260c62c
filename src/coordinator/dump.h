/* dissect dump: one forward + backward on the first training batch, written to HDF5, so that the
 * numbers can be compared with another implementation (examples/compare_hf.py compares them with
 * Hugging Face's LlamaForCausalLM).
 *
 *   mpirun -np 1 dissect dump --config FILE [flags] --out OUT.h5
 *
 * The config is built as for `train` (flags, hf_model, ...). The batch is the first micro-batch
 * of the training shard: global sequences 0 .. micro - 1 of the seeded window order (data.h),
 * B = train_micro_batch_size_per_gpu sequences of T = seq_length tokens. Needs one rank and ZeRO
 * stage 0 (the rank then holds the full gradients). With key 'resume' (flag --resume; a file,
 * not "auto") the weights are the checkpoint's first (for LoRA: the trained adapters on the
 * frozen base), read by dx_checkpoint_load; the batch is still the first micro-batch. A
 * checkpoint that does not fit the model is an error naming the file and tensor.
 *
 * OUT.h5 (written to OUT.h5.tmp, renamed on success):
 *   attributes   format = "dissect-dump", format_version = 1 (int64), loss (float64: mean
 *                cross-entropy over the B x T tokens), backend (e.g. "cpu", "cuda"), act_dtype
 *                (the backend's compute dtype: "f32", "bf16"), config_json (resolved config)
 *   /inputs      int32 [B, T]      token ids fed to the model
 *   /targets     int32 [B, T]      next-token targets (the loss is over all of them)
 *   /logits      float32 [B, T, V] logits of the forward pass (the backend's compute dtype, as float)
 *   /grads/NAME  float32 [rows, cols] or [rows]: d loss / d parameter, for every parameter of the
 *                model, by Hugging Face name (e.g. "model.layers.0.self_attn.q_proj.weight")
 */
#ifndef DX_DUMP_H
#define DX_DUMP_H

#include "comm/comm.h"
#include "config/config.h"

/* Runs the dump with config c (finalised, identical on every rank) into out_path. Collective;
 * returns 0, or -1 after the error was printed ("dissect: error: ..."). */
int dx_dump_run(const dx_config *c, dx_comm *world, const char *out_path);

#endif
