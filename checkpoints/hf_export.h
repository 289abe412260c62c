/* dissect checkpoints -> a Hugging Face Llama directory (`dissect export`), the converse of
 * --hf-model: what Megatron-LM's checkpoint converters do for its checkpoints.
 *
 * Reads a dissect checkpoint (checkpoints/checkpoint.h: /params/<HF name> fp32 master weights of
 * logical shape, and the root attribute config_json) and writes, in directory OUT (created if
 * missing):
 *   OUT/config.json        transformers' LlamaConfig: architectures ["LlamaForCausalLM"],
 *                          model_type "llama", hidden_act "silu", vocab_size, hidden_size,
 *                          intermediate_size, num_hidden_layers, num_attention_heads,
 *                          num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps,
 *                          rope_theta, initializer_range (the checkpoint's config), bos_token_id 1,
 *                          eos_token_id 2 (dissect's SentencePiece ids, as Llama's), tie_word_embeddings,
 *                          attention_bias, mlp_bias false, torch_dtype "float32" or "bfloat16";
 *   OUT/model.safetensors  every weight of LlamaForCausalLM's state dict, in its order
 *                          (model.embed_tokens.weight, per layer the four attention projections,
 *                          the three MLP projections and the two RMSNorm weights, model.norm.weight,
 *                          lm_head.weight), dtype F32 (the master weights bit for bit) or BF16
 *                          (rounded to nearest-even), shapes [out_features, in_features] / [hidden].
 * `dissect train --hf-model OUT` then starts from exactly these weights (F32).
 *
 * Both files are written under temporary names and renamed; nothing is written before every check
 * passed. Errors (-1 + dx_fail naming the checkpoint or file): not a dissect checkpoint, a config
 * that does not parse, a LoRA checkpoint (it holds the adapters only: lora.save writes them for
 * PEFT), a tensor missing or of another shape than the config's model, an unwritable OUT.
 * Reads one tensor at a time (memory: the largest tensor, 4 bytes per element, twice). */
#ifndef DX_HF_EXPORT_H
#define DX_HF_EXPORT_H

/* bf16: 0 = F32, 1 = BF16. Prints nothing; returns 0 or -1 + dx_fail. */
int dx_hf_export(const char *checkpoint, const char *out_dir, int bf16);

/* `dissect export CHECKPOINT OUT_DIR [--dtype float32|bfloat16]`: argv[0] is "export". Prints a
 * line naming the files and the parameter count; exit code 0, or 1 (bad arguments: 2) with the
 * error on stderr. */
int dx_hf_export_main(int argc, char **argv);

#endif
