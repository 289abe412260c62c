/* dissect checkpoints: LoRA adapters as a Hugging Face PEFT directory, which
 * `peft.PeftModel.from_pretrained(base_model, DIR)` loads onto the base model:
 *   DIR/adapter_config.json        PEFT's LoraConfig: peft_type "LORA", task_type "CAUSAL_LM",
 *                                  r, lora_alpha, lora_dropout, target_modules, bias "none",
 *                                  fan_in_fan_out false, base_model_name_or_path (hf_model or
 *                                  null), inference_mode true;
 *   DIR/adapter_model.safetensors  every adapter tensor, F32, named as PEFT's state dict:
 *                                  "base_model.model." + dissect's name, e.g.
 *                                  base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight
 *                                  [r, in] and ...lora_B.weight [out, r].
 * Safetensors layout (huggingface/safetensors): an 8-byte little-endian header length, the JSON
 * header (name -> dtype, shape, data_offsets; "__metadata__": {"format": "pt"}), padded with
 * spaces to a multiple of 8, then the tensors' bytes in header order. */
#ifndef DX_PEFT_H
#define DX_PEFT_H

#include "config/config.h"
#include "model/model.h"
#include "zero/zero.h"

/* Writes the adapters of model m (the fp32 master weights held by z) to directory dir (created
 * if missing; files written under temporary names and renamed): every layer's adapters at their
 * full shapes. Each rank gathers its pieces over z's DP group (collective) and places them (a
 * piece every TP rank holds: TP rank 0 only); the pieces are summed over `tp` (this rank's TP
 * group) and `pp` (its pipeline group), host MPI, NULL or size 1 when absent. `world` (NULL: one
 * process): every rank, on which the ranks agree; its rank 0 writes. Tensor names and shapes
 * come from c (model shape, lora.r, lora.target_modules). Returns 0, or -1 + dx_fail naming the
 * file or directory (every rank fails when the writer does). */
int dx_peft_save(const char *dir, dx_model *m, dx_zero *z, const dx_config *c, dx_comm *world, dx_comm *tp,
                 dx_comm *pp);

#endif
